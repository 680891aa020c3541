/*
 * Contract: each work queue keeps its own scatter/gather limit.
 *   ibv_create_qp(3): cap.max_send_sge / cap.max_recv_sge, the most SGEs in a work request
 *     of the send / the receive queue (ibv_query_qp(3) reports them);
 *   ibv_post_send(3) / ibv_post_recv(3): a work request with more SGEs than its queue
 *     allows fails with EINVAL, and *bad_wr points at it.
 * A QP created with max_send_sge 2 and max_recv_sge 1: a receive with 2 SGEs and a send
 * with 3 are refused, a receive with 1 and a send with 2 are accepted (the QP is in the
 * error state, so they complete flushed). Before the fix the QP kept one limit, the
 * larger of the two (and reported it for both queues), and a post was checked only
 * against the engine's 4. An SRQ created with max_sge 1 reports 1 (ibv_query_srq(3); it
 * reported the engine's 4) and refuses a receive of 2 SGEs. An RDMA Read takes at most
 * max_sge_rd (1) SGEs, fewer than the send queue's 2. A QP on the SRQ refuses
 * ibv_post_recv with *bad_wr at the first request. One process, no peer:
 *   post_num_sge
 */
#include <errno.h>
#include <string.h>
#include <infiniband/verbs.h>

static const char *contract_name = "post_num_sge";
#include "contract.h"

int main(void)
{
	struct ibv_context *ctx = contract_open_device();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	static char buf[4096];
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!mr || !cq)
		DIE("pd, mr, cq: %s", strerror(errno));
	struct ibv_qp *qp = contract_rc_qp(pd, cq, cq, NULL, 2, 1);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	int q = ibv_query_qp(qp, &qa, IBV_QP_CAP, &qi);
	EXPECT(q == 0 && qi.cap.max_send_sge == 2 && qi.cap.max_recv_sge == 1,
	       "ibv_query_qp(3): each queue's own SGE limit, as created (send %u, receive %u; asked 2 and 1)",
	       qi.cap.max_send_sge, qi.cap.max_recv_sge);
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_ERR };
	if (ibv_modify_qp(qp, &at, IBV_QP_STATE))
		DIE("ibv_modify_qp to ERR: %s", strerror(errno));

	struct ibv_sge s[3];
	for (int i = 0; i < 3; i++)
		s[i] = (struct ibv_sge){ .addr = (uintptr_t)buf + 64 * i, .length = 64, .lkey = mr->lkey };

	/* The offending request second in a list: the first is posted, *bad_wr is the second. */
	struct ibv_recv_wr r1 = { .wr_id = 1, .sg_list = s, .num_sge = 1 }, r2 = { .wr_id = 2, .sg_list = s, .num_sge = 2 };
	r1.next = &r2;
	struct ibv_recv_wr *rbad = NULL;
	int pr = ibv_post_recv(qp, &r1, &rbad);
	EXPECT(pr == EINVAL && rbad == &r2,
	       "ibv_post_recv(3): a receive with 2 SGEs on a queue of max_recv_sge 1 fails with EINVAL, *bad_wr at it (got %d, bad_wr %s)",
	       pr, rbad == &r2 ? "at it" : rbad == &r1 ? "at the one before" : "not set");
	struct ibv_send_wr w1 = { .wr_id = 3, .sg_list = s, .num_sge = 2, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED },
			   w2 = w1;
	w2.wr_id = 4;
	w2.num_sge = 3;
	w1.next = &w2;
	struct ibv_send_wr *sbad = NULL;
	int ps = ibv_post_send(qp, &w1, &sbad);
	EXPECT(ps == EINVAL && sbad == &w2,
	       "ibv_post_send(3): a send with 3 SGEs on a queue of max_send_sge 2 fails with EINVAL, *bad_wr at it (got %d, bad_wr %s)",
	       ps, sbad == &w2 ? "at it" : sbad == &w1 ? "at the one before" : "not set");

	struct ibv_recv_wr r3 = { .wr_id = 5, .sg_list = s, .num_sge = 1 };
	rbad = NULL;
	pr = ibv_post_recv(qp, &r3, &rbad);
	struct ibv_send_wr w3 = { .wr_id = 6, .sg_list = s, .num_sge = 2, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED };
	sbad = NULL;
	ps = ibv_post_send(qp, &w3, &sbad);
	EXPECT(pr == 0 && ps == 0 && !rbad && !sbad,
	       "ibv_post_recv(3) / ibv_post_send(3): a receive with 1 SGE and a send with 2 are accepted (post_recv %d, post_send %d)",
	       pr, ps);

	/* An RDMA Read scatters into at most max_sge_rd SGEs (ibv_query_device(3)), whatever
	 * the queue's max_send_sge: the Read of 2 SGEs is refused with EINVAL, *bad_wr at it,
	 * even on this QP in the error state (it is no request to flush); a Read of 1 SGE
	 * is accepted. */
	struct ibv_device_attr da;
	if (ibv_query_device(ctx, &da))
		DIE("ibv_query_device: %s", strerror(errno));
	EXPECT(da.max_sge_rd == 1, "ibv_query_device(3): max_sge_rd 1 (got %d)", da.max_sge_rd);
	struct ibv_send_wr rd1 = { .wr_id = 8, .sg_list = s, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
				   .send_flags = IBV_SEND_SIGNALED,
				   .wr.rdma = { .remote_addr = 0x1000, .rkey = 0x100 } },
			   rd2 = rd1;
	rd2.wr_id = 9;
	rd2.num_sge = 2;
	rd1.next = &rd2;
	sbad = NULL;
	ps = ibv_post_send(qp, &rd1, &sbad);
	EXPECT(ps == EINVAL && sbad == &rd2,
	       "ibv_post_send(3): an RDMA Read with 2 SGEs (max_sge_rd %d, max_send_sge 2) fails with EINVAL, *bad_wr at it; one of 1 SGE before it is accepted (got %d, bad_wr %s)",
	       da.max_sge_rd, ps, sbad == &rd2 ? "at it" : sbad == &rd1 ? "at the one before" : "not set");

	/* A shared receive queue of max_sge 1: reported as such, and posts checked against it. */
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 4, .max_sge = 1 } };
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	if (!srq)
		DIE("ibv_create_srq: %s", strerror(errno));
	struct ibv_srq_attr sq;
	int qs = ibv_query_srq(srq, &sq);
	EXPECT(qs == 0 && sq.max_sge == 1,
	       "ibv_query_srq(3): max_sge is the SGE limit the SRQ was created with (got %u; created with 1)", sq.max_sge);
	struct ibv_recv_wr r4 = { .wr_id = 7, .sg_list = s, .num_sge = 2 };
	rbad = NULL;
	pr = ibv_post_srq_recv(srq, &r4, &rbad);
	EXPECT(pr == EINVAL && rbad == &r4,
	       "ibv_post_srq_recv(3): a receive with 2 SGEs on an SRQ of max_sge 1 fails with EINVAL, *bad_wr at it (got %d)", pr);
	/* A QP that takes its receives from the SRQ has no receive queue of its own:
	 * ibv_post_recv on it fails with EINVAL, *bad_wr at the first request (siw and rxe;
	 * it was left unset). */
	struct ibv_qp *sqp = contract_rc_qp(pd, cq, cq, srq, 1, 1);
	struct ibv_recv_wr r5 = { .wr_id = 11, .sg_list = s, .num_sge = 1 };
	rbad = NULL;
	pr = ibv_post_recv(sqp, &r5, &rbad);
	EXPECT(pr == EINVAL && rbad == &r5,
	       "ibv_post_recv(3) on a QP with an SRQ fails with EINVAL, *bad_wr at the first request (got %d, bad_wr %s)",
	       pr, rbad == &r5 ? "at it" : "not set");
	ibv_destroy_qp(sqp);
	ibv_destroy_srq(srq);
	return contract_end();
}
