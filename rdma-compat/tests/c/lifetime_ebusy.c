/*
 * Contract: an object other objects still use is not destroyed.
 *   ibv_create_cq(3): ibv_destroy_cq() "fails if any queue pair is still associated with
 *     this CQ";
 *   ibv_alloc_pd(3): ibv_dealloc_pd() "may fail if any other resource is still associated
 *     with the PD being freed" (rdma-core: EBUSY while MRs, MWs, SRQs or QPs use it);
 *   ibv_create_srq(3): ibv_destroy_srq() "fails if any queue pair is still associated with
 *     this SRQ".
 * Each destroy answers EBUSY while used, and succeeds once the user is gone. (Before the
 * fix the CQ was freed under its QP, whose flushed completions then landed in whatever
 * the block became.) One process, no peer:
 *   lifetime_ebusy
 */
#include <errno.h>
#include <string.h>
#include <infiniband/verbs.h>

static const char *contract_name = "lifetime_ebusy";
#include "contract.h"

int main(void)
{
	struct ibv_context *ctx = contract_open_device();
	static char buf[4096];

	{
		struct ibv_pd *pd = ibv_alloc_pd(ctx);
		struct ibv_cq *scq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
		struct ibv_cq *rcq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
		if (!pd || !scq || !rcq)
			DIE("pd/cq: %s", strerror(errno));
		struct ibv_qp *qp = contract_rc_qp(pd, scq, rcq, NULL, 1, 1);
		int s = ibv_destroy_cq(scq), r = ibv_destroy_cq(rcq);
		EXPECT(s == EBUSY && r == EBUSY,
		       "ibv_create_cq(3): ibv_destroy_cq fails with EBUSY while a QP uses the CQ (send CQ %d, receive CQ %d)", s, r);
		int p = ibv_dealloc_pd(pd);
		EXPECT(p == EBUSY, "ibv_alloc_pd(3): ibv_dealloc_pd fails with EBUSY while a QP uses the PD (got %d)", p);
		int q = ibv_destroy_qp(qp);
		s = ibv_destroy_cq(scq);
		r = ibv_destroy_cq(rcq);
		p = ibv_dealloc_pd(pd);
		EXPECT(q == 0 && s == 0 && r == 0 && p == 0,
		       "ibv_destroy_cq and ibv_dealloc_pd succeed once the QP is destroyed (qp %d, cqs %d %d, pd %d)", q, s, r, p);
	}
	{
		/* One CQ as both the send and the receive CQ of two QPs: busy until the last goes. */
		struct ibv_pd *pd = ibv_alloc_pd(ctx);
		struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
		if (!pd || !cq)
			DIE("pd/cq: %s", strerror(errno));
		struct ibv_qp *a = contract_rc_qp(pd, cq, cq, NULL, 1, 1), *b = contract_rc_qp(pd, cq, cq, NULL, 1, 1);
		ibv_destroy_qp(a);
		int r = ibv_destroy_cq(cq);
		ibv_destroy_qp(b);
		int r2 = ibv_destroy_cq(cq);
		ibv_dealloc_pd(pd);
		EXPECT(r == EBUSY && r2 == 0,
		       "ibv_create_cq(3): a CQ two QPs share stays busy until both are destroyed (one left: %d; none: %d)", r, r2);
	}
	{
		struct ibv_pd *pd = ibv_alloc_pd(ctx);
		struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : NULL;
		if (!mr)
			DIE("pd/mr: %s", strerror(errno));
		int p = ibv_dealloc_pd(pd);
		EXPECT(p == EBUSY, "ibv_alloc_pd(3): ibv_dealloc_pd fails with EBUSY while an MR uses the PD (got %d)", p);
		int m = ibv_dereg_mr(mr);
		p = ibv_dealloc_pd(pd);
		EXPECT(m == 0 && p == 0, "ibv_dealloc_pd succeeds once the MR is deregistered (dereg %d, dealloc %d)", m, p);
	}
	{
		struct ibv_pd *pd = ibv_alloc_pd(ctx);
		struct ibv_mw *mw = pd ? ibv_alloc_mw(pd, IBV_MW_TYPE_1) : NULL;
		if (!mw)
			DIE("pd/mw: %s", strerror(errno));
		int p = ibv_dealloc_pd(pd);
		EXPECT(p == EBUSY, "ibv_alloc_pd(3): ibv_dealloc_pd fails with EBUSY while an MW uses the PD (got %d)", p);
		int w = ibv_dealloc_mw(mw);
		p = ibv_dealloc_pd(pd);
		EXPECT(w == 0 && p == 0, "ibv_dealloc_pd succeeds once the MW is deallocated (dealloc_mw %d, dealloc_pd %d)", w, p);
	}
	{
		struct ibv_pd *pd = ibv_alloc_pd(ctx);
		struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
		struct ibv_srq_init_attr sa;
		memset(&sa, 0, sizeof sa);
		sa.attr.max_wr = 8;
		sa.attr.max_sge = 1;
		struct ibv_srq *srq = pd && cq ? ibv_create_srq(pd, &sa) : NULL;
		if (!srq)
			DIE("pd/cq/srq: %s", strerror(errno));
		int p = ibv_dealloc_pd(pd);
		EXPECT(p == EBUSY, "ibv_alloc_pd(3): ibv_dealloc_pd fails with EBUSY while an SRQ uses the PD (got %d)", p);
		struct ibv_qp *qp = contract_rc_qp(pd, cq, cq, srq, 1, 1);
		int s = ibv_destroy_srq(srq);
		EXPECT(s == EBUSY, "ibv_create_srq(3): ibv_destroy_srq fails with EBUSY while a QP uses the SRQ (got %d)", s);
		int q = ibv_destroy_qp(qp);
		s = ibv_destroy_srq(srq);
		int c = ibv_destroy_cq(cq);
		p = ibv_dealloc_pd(pd);
		EXPECT(q == 0 && s == 0 && c == 0 && p == 0,
		       "ibv_destroy_srq, ibv_destroy_cq, ibv_dealloc_pd succeed once the QP is gone (qp %d, srq %d, cq %d, pd %d)", q, s, c, p);
	}
	return contract_end();
}
