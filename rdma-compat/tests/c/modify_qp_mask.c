/*
 * Contract: ibv_modify_qp(3) refuses an attr_mask or attribute no provider would take, as
 * rdma-core and the kernel refuse it for every provider (siw included) before the provider
 * is asked, and then changes nothing (qp->state stays, ibv_query_qp answers the old state):
 *   - a mask bit past IBV_QP_DEST_QPN (IBV_QP_RATE_LIMIT, ...): EOPNOTSUPP
 *     (libibverbs/cmd.c ibv_cmd_modify_qp, which siw's and the other iWARP providers'
 *     modify_qp call: "Masks over IBV_QP_DEST_QPN are only supported by
 *     ibv_cmd_modify_qp_ex"; the kernel's ib_uverbs_modify_qp answers the same). Before:
 *     0, and the rate limit the application asked for silently not applied.
 *   - IBV_QP_PORT with a port the device does not have (it has port 1 only), IBV_QP_AV
 *     whose ah_attr.port_num is not a port of it: EINVAL (drivers/infiniband/core/
 *     uverbs_cmd.c modify_qp, rdma_is_port_valid). Before: 0.
 *   - IBV_QP_CUR_STATE with a cur_qp_state past IBV_QPS_ERR: EINVAL (the same modify_qp).
 *     Before: 0.
 *   A valid RESET -> INIT (state, port 1, access flags, pkey index, as rdma_init_qp_attr
 *   gives it) still succeeds.
 * One process, no peer:
 *   modify_qp_mask
 */
#include <errno.h>
#include <string.h>
#include <infiniband/verbs.h>

static const char *contract_name = "modify_qp_mask";
#include "contract.h"

static int query(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr i;
	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &i))
		DIE("ibv_query_qp");
	return a.qp_state;
}

/* ibv_modify_qp(qp, a, mask) must return want and leave the QP in RESET. */
static void refused(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask, int want, const char *what)
{
	int r = ibv_modify_qp(qp, a, mask);
	int field = qp->state, s = query(qp);
	EXPECT(r == want && field == IBV_QPS_RESET && s == IBV_QPS_RESET,
	       "ibv_modify_qp(3) with %s: %s, the QP still in RESET (returned %d: %s; qp->state %d, queried %d)", what,
	       strerror(want), r, r ? strerror(r) : "0", field, s);
}

int main(void)
{
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp = contract_lone_qp(&pd, &cq);
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.rate_limit = 1000;
	refused(qp, &a, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_RATE_LIMIT, EOPNOTSUPP,
		"IBV_QP_RATE_LIMIT (a mask bit past IBV_QP_DEST_QPN) and a move to INIT");
	refused(qp, &a, IBV_QP_RATE_LIMIT, EOPNOTSUPP, "IBV_QP_RATE_LIMIT alone");

	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 2;
	refused(qp, &a, IBV_QP_STATE | IBV_QP_PORT, EINVAL, "IBV_QP_PORT 2 (the device has port 1 only) and INIT");
	a.port_num = 0;
	refused(qp, &a, IBV_QP_PORT, EINVAL, "IBV_QP_PORT 0 alone");

	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.ah_attr.port_num = 3;
	refused(qp, &a, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_AV, EINVAL, "IBV_QP_AV of port 3 and INIT");

	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.cur_qp_state = IBV_QPS_UNKNOWN;
	refused(qp, &a, IBV_QP_STATE | IBV_QP_CUR_STATE, EINVAL, "IBV_QP_CUR_STATE past IBV_QPS_ERR and INIT");

	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	int r = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX);
	int s = query(qp);
	EXPECT(r == 0 && s == IBV_QPS_INIT,
	       "ibv_modify_qp(3) RESET -> INIT with port 1, access flags and pkey index returns 0, the QP in INIT "
	       "(returned %d, queried %d)",
	       r, s);

	ibv_destroy_qp(qp);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	return contract_end();
}
