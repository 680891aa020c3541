/*
 * Contract: a QP in the error state moved back to RESET (and on to INIT) is in that state.
 *   ibv_modify_qp(3): "returns 0 on success"; any state may go to RESET (IB spec 10.3.1,
 *     rdma-core's ibv_modify_qp sets qp->state = attr->qp_state once the provider
 *     succeeds; siw moves ERROR to IDLE, the kernel's ib_modify_qp_is_ok lists ERR->RESET).
 *   ibv_query_qp(3) then answers the state the QP is in: RESET, then INIT;
 *   ibv_post_recv(3) on a QP in INIT queues the receive (no flushed completion).
 *   From ERR only RESET (and ERR) may be reached: ERR -> INIT fails (EINVAL), the QP stays in ERR.
 * One process, no peer:
 *   qp_reset_after_err
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>

static const char *contract_name = "qp_reset_after_err";
#include "contract.h"

static int move(struct ibv_qp *qp, enum ibv_qp_state s)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = s;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

static int query(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr i;
	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &i))
		DIE("ibv_query_qp");
	return a.qp_state;
}

int main(void)
{
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp = contract_lone_qp(&pd, &cq);
	if (move(qp, IBV_QPS_INIT) || move(qp, IBV_QPS_ERR))
		DIE("ibv_modify_qp to INIT, ERR");
	int r = move(qp, IBV_QPS_INIT);
	int s = query(qp);
	EXPECT(r == EINVAL && s == IBV_QPS_ERR && qp->state == IBV_QPS_ERR,
	       "ibv_modify_qp(3) ERR -> INIT is not a move the QP state machine allows: EINVAL, still ERR (returned %d, state %d)", r, s);
	r = move(qp, IBV_QPS_RESET);
	s = query(qp);
	EXPECT(r == 0 && s == IBV_QPS_RESET, "ibv_modify_qp(3) ERR -> RESET returns 0 and ibv_query_qp(3) answers RESET (returned %d, state %d)", r, s);
	r = move(qp, IBV_QPS_INIT);
	s = query(qp);
	EXPECT(r == 0 && s == IBV_QPS_INIT, "then RESET -> INIT: ibv_query_qp(3) answers INIT (returned %d, state %d)", r, s);
	static char buf[64];
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		DIE("ibv_reg_mr: %s", strerror(errno));
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = sizeof buf, .lkey = mr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 5, .sg_list = &sge, .num_sge = 1 }, *bad = NULL;
	r = ibv_post_recv(qp, &rw, &bad);
	usleep(100000);
	struct ibv_wc wc;
	int n = ibv_poll_cq(cq, 1, &wc);
	EXPECT(r == 0 && n == 0, "ibv_post_recv(3) on the QP in INIT queues the receive, nothing completes (post %d, %d completions%s)",
	       r, n, n == 1 && wc.status == IBV_WC_WR_FLUSH_ERR ? ", flushed" : "");
	return contract_end();
}
