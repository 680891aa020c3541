/*
 * Contract: a bad local key is the completion's business, not the post's.
 *   ibv_post_send(3) / ibv_post_recv(3) / ibv_post_srq_recv(3): return 0 or an errno the
 *     man pages list (EINVAL, ENOMEM, EFAULT); none of them for a local key, which siw,
 *     rxe and mlx5 check only when the request runs;
 *   ibv_poll_cq(3): such a request completes with IBV_WC_LOC_PROT_ERR, the QP moves to
 *     the error state and the requests behind it complete with IBV_WC_WR_FLUSH_ERR.
 * The receives here are only shown to be accepted (and flushed with their QP): no message
 * is placed into them; a receive that fails at placement is verbs_late_sge_checks.rs's.
 * Before the change the library checked the key at post and ibv_post_send / ibv_post_recv
 * failed with EPERM, nothing queued (ibv_post_srq_recv too).
 *   bad_lkey_completes -s ADDR PORT   server: accepts one connection, keeps it until the client disconnects (contract_serve)
 *   bad_lkey_completes -c ADDR PORT   client: the checks
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

static const char *contract_name = "bad_lkey_completes";
#include "contract.h"

static int client(const char *a, const char *p)
{
	struct rdma_cm_id *id = contract_ep(a, p, 0);
	static char buf[4096];
	struct ibv_mr *mr = contract_reg_msgs(id, buf, sizeof buf);
	uint32_t bad_key = mr->lkey ^ 0x5a5a5a00u;

	/* A receive naming an unknown key, posted before the connection: accepted. */
	struct ibv_sge rs = { .addr = (uintptr_t)buf, .length = 64, .lkey = bad_key };
	struct ibv_recv_wr rw = { .wr_id = 7, .sg_list = &rs, .num_sge = 1 }, *rbad = NULL;
	int pr = ibv_post_recv(id->qp, &rw, &rbad);
	EXPECT(pr == 0 && !rbad, "ibv_post_recv(3): a receive naming an unknown lkey is accepted (got %d: %s)", pr,
	       pr ? strerror(pr) : "-");
	/* The same on a shared receive queue. */
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 4, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(id->pd, &sa);
	if (!srq)
		DIE("ibv_create_srq: %s", strerror(errno));
	struct ibv_recv_wr qw = { .wr_id = 8, .sg_list = &rs, .num_sge = 1 };
	rbad = NULL;
	pr = ibv_post_srq_recv(srq, &qw, &rbad);
	EXPECT(pr == 0 && !rbad, "ibv_post_srq_recv(3): a receive naming an unknown lkey is accepted (got %d: %s)", pr,
	       pr ? strerror(pr) : "-");
	ibv_destroy_srq(srq);
	if (rdma_connect(id, NULL))
		DIE("rdma_connect: %s", strerror(errno));

	/* A Send whose SGE names an unknown key, then a good one behind it. */
	struct ibv_sge bs = { .addr = (uintptr_t)buf, .length = 64, .lkey = bad_key };
	struct ibv_sge gs = { .addr = (uintptr_t)buf + 64, .length = 64, .lkey = mr->lkey };
	struct ibv_send_wr w2 = { .wr_id = 2, .sg_list = &gs, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr w1 = { .wr_id = 1, .sg_list = &bs, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED, .next = &w2 };
	struct ibv_send_wr *sbad = NULL;
	int ps = ibv_post_send(id->qp, &w1, &sbad);
	EXPECT(ps == 0 && !sbad,
	       "ibv_post_send(3): a Send naming an unknown lkey, and one behind it, are accepted (got %d: %s, bad_wr %s)",
	       ps, ps ? strerror(ps) : "-", sbad == &w1 ? "at it" : sbad ? "at the next" : "not set");

	struct ibv_wc wc[4];
	int got = 0;
	for (int i = 0; i < 300 && got < 2; i++) {
		int k = ibv_poll_cq(id->send_cq, 2 - got, wc + got);
		if (k > 0)
			got += k;
		else
			usleep(10000);
	}
	EXPECT(got == 2 && wc[0].wr_id == 1 && wc[0].status == IBV_WC_LOC_PROT_ERR && wc[1].wr_id == 2 &&
		       wc[1].status == IBV_WC_WR_FLUSH_ERR,
	       "ibv_poll_cq(3): the Send completes with IBV_WC_LOC_PROT_ERR, the one behind it flushed (got %d: wr_id %llu [%s], %llu [%s])",
	       got, got > 0 ? (unsigned long long)wc[0].wr_id : 0ULL, got > 0 ? ibv_wc_status_str(wc[0].status) : "-",
	       got > 1 ? (unsigned long long)wc[1].wr_id : 0ULL, got > 1 ? ibv_wc_status_str(wc[1].status) : "-");

	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	int q = ibv_query_qp(id->qp, &qa, IBV_QP_STATE, &qi);
	EXPECT(q == 0 && qa.qp_state == IBV_QPS_ERR, "ibv_query_qp(3): the QP is in the error state (got %d, state %d)", q,
	       qa.qp_state);

	got = 0;
	for (int i = 0; i < 100 && got < 1; i++) {
		int k = ibv_poll_cq(id->recv_cq, 1, wc);
		if (k > 0)
			got += k;
		else
			usleep(10000);
	}
	EXPECT(got == 1 && wc[0].wr_id == 7 && wc[0].status == IBV_WC_WR_FLUSH_ERR,
	       "ibv_poll_cq(3): the receive naming an unknown lkey completes flushed with its QP (got %d: %s)", got,
	       got > 0 ? ibv_wc_status_str(wc[0].status) : "-");
	return contract_end();
}

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, contract_serve, client);
}
