/*
 * Contract: ibv_modify_qp(3) to IBV_QPS_ERR, on a QP that never connected: the QP is in
 * the error state afterwards (ibv_query_qp(3) says so), every outstanding work request
 * completes with IBV_WC_WR_FLUSH_ERR, and so does every one posted later. Before the fix
 * the engine's refusal (the QP had no connection to abort) was ignored: success reported,
 * the QP still INIT, nothing flushed. One process, no peer:
 *   modify_qp_err_flush
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>

static const char *contract_name = "modify_qp_err_flush";
#include "contract.h"

static int poll_n(struct ibv_cq *cq, struct ibv_wc *wc, int want)
{
	int got = 0;
	for (int i = 0; i < 100 && got < want; i++) {
		int k = ibv_poll_cq(cq, want - got, wc + got);
		if (k > 0)
			got += k;
		else
			usleep(10000);
	}
	return got;
}

int main(void)
{
	struct ibv_context *ctx = contract_open_device();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	static char buf[4096];
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!mr || !cq)
		DIE("pd, mr, cq: %s", strerror(errno));
	struct ibv_qp *qp = contract_rc_qp(pd, cq, cq, NULL, 1, 1);
	struct ibv_sge s = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	struct ibv_recv_wr r1 = { .wr_id = 1, .sg_list = &s, .num_sge = 1 }, r2 = r1, *rbad;
	r2.wr_id = 2;
	if (ibv_post_recv(qp, &r1, &rbad) || ibv_post_recv(qp, &r2, &rbad))
		DIE("ibv_post_recv: %s", strerror(errno));

	struct ibv_qp_attr at = { .qp_state = IBV_QPS_ERR };
	int m = ibv_modify_qp(qp, &at, IBV_QP_STATE);
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	int q = ibv_query_qp(qp, &qa, IBV_QP_STATE, &qi);
	EXPECT(m == 0 && q == 0 && qa.qp_state == IBV_QPS_ERR,
	       "ibv_modify_qp(3): a QP that never connected is in the error state after a move to ERR (modify %d; ibv_query_qp says %d, ERR is %d)",
	       m, qa.qp_state, IBV_QPS_ERR);
	struct ibv_wc wc[4];
	int got = poll_n(cq, wc, 2);
	EXPECT(got == 2 && wc[0].wr_id == 1 && wc[1].wr_id == 2 && wc[0].status == IBV_WC_WR_FLUSH_ERR &&
	       wc[1].status == IBV_WC_WR_FLUSH_ERR,
	       "ibv_modify_qp(3): the move to ERR flushes the outstanding receives, in order (%d completions: %llu %s, %llu %s)",
	       got, got > 0 ? (unsigned long long)wc[0].wr_id : 0ULL, got > 0 ? ibv_wc_status_str(wc[0].status) : "-",
	       got > 1 ? (unsigned long long)wc[1].wr_id : 0ULL, got > 1 ? ibv_wc_status_str(wc[1].status) : "-");

	struct ibv_recv_wr r3 = r1;
	r3.wr_id = 3;
	struct ibv_send_wr sw = { .wr_id = 4, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *sbad;
	int pr = ibv_post_recv(qp, &r3, &rbad), ps = ibv_post_send(qp, &sw, &sbad);
	got = poll_n(cq, wc, 2);
	int ok = pr == 0 && ps == 0 && got == 2;
	for (int i = 0; ok && i < 2; i++)
		ok = wc[i].status == IBV_WC_WR_FLUSH_ERR && (wc[i].wr_id == 3 || wc[i].wr_id == 4);
	EXPECT(ok, "ibv_modify_qp(3): work requests posted in the error state complete flushed (post_recv %d, post_send %d, %d completions)",
	       pr, ps, got);
	return contract_end();
}
