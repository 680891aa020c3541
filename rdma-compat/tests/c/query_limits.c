/*
 * Contract: what the query verbs return and whether the limits ibv_query_device(3)
 * reports are the ones the device enforces ("the maximum values returned by this function
 * are the upper limits of supported resources by the device"):
 * - ibv_query_pkey(3) and ibv_query_gid(3) return 0 on success, -1 on error (errno set);
 *   ibv_query_port(3) returns the errno value. Before the fix ibv_query_pkey returned
 *   EINVAL (22) for a bad index, which a caller testing for -1 takes for success.
 * - a CQ of max_cqe entries, a QP of max_qp_wr work requests and max_sge SGEs each way are
 *   created; one more of any (or an SRQ of max_srq_wr + 1) is refused with EINVAL, as siw,
 *   rxe and mlx5 answer and the man pages list (it was ENOMEM, a "try again later"), and
 *   so is a CQ on completion vector 1 of a device with one (it was accepted).
 * - ibv_reg_mr(3) of a length above max_mr_size returns NULL with errno ENOMEM (as siw
 *   answers a length above what the process may pin). Before the fix the length reached
 *   Region::from_raw's assertion, and the caller read EIO.
 * - max_pd PDs, max_cq CQs and max_srq SRQs are live at once; one more of any is refused
 *   with ENOMEM (as siw_alloc_pd, siw_create_cq and siw_create_srq answer past SIW_MAX_PD,
 *   SIW_MAX_CQ, SIW_MAX_SRQ), and once one is freed another is created. Before the fix
 *   nothing counted them: the one past the limit was created.
 * - device_cap_flags names the memory-window types ibv_alloc_mw(3) allocates: type 2
 *   windows are bound to a QP and its PD (the QP's PD must be the window's), IB's type 2B,
 *   so IBV_DEVICE_MEM_WINDOW_TYPE_2B is set beside IBV_DEVICE_MEM_WINDOW (applications
 *   and rdma-core's own tests look for it before they allocate one). Before the fix it was
 *   missing while ibv_alloc_mw(IBV_MW_TYPE_2) succeeded.
 * One process, no peer:
 *   query_limits
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <infiniband/verbs.h>

static const char *contract_name = "query_limits";
#include "contract.h"

static struct ibv_qp *qp_of(struct ibv_pd *pd, struct ibv_cq *cq, int wr, int sge)
{
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.send_cq = a.recv_cq = cq;
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = a.cap.max_recv_wr = wr;
	a.cap.max_send_sge = a.cap.max_recv_sge = sge;
	return ibv_create_qp(pd, &a);
}

enum kind { PD, CQ, SRQ };
static const char *const kind_name[] = { "ibv_alloc_pd(3)", "ibv_create_cq(3)", "ibv_create_srq(3)" };

static void *make(enum kind k, struct ibv_context *ctx, struct ibv_pd *pd)
{
	struct ibv_srq_init_attr sa;
	switch (k) {
	case PD:
		return ibv_alloc_pd(ctx);
	case CQ:
		return ibv_create_cq(ctx, 1, NULL, NULL, 0);
	case SRQ:
		memset(&sa, 0, sizeof sa);
		sa.attr.max_wr = sa.attr.max_sge = 1;
		return ibv_create_srq(pd, &sa);
	}
	return NULL;
}

static int unmake(enum kind k, void *o)
{
	switch (k) {
	case PD:
		return ibv_dealloc_pd(o);
	case CQ:
		return ibv_destroy_cq(o);
	case SRQ:
		return ibv_destroy_srq(o);
	}
	return EINVAL;
}

/* Creates objects of kind k until refused, `held` of them already live: exactly `max` are
 * live then, the next is refused with ENOMEM, and freeing one makes room for one. */
static void fill_to_limit(enum kind k, struct ibv_context *ctx, struct ibv_pd *pd, int max, int held)
{
	if (max < held || max > (1 << 20))
		DIE("%s: an implausible limit %d", kind_name[k], max);
	void **o = calloc((size_t)max + 1, sizeof *o);
	if (!o)
		DIE("calloc");
	int n = 0;
	while (n < max + 1 - held && (o[n] = make(k, ctx, pd)) != NULL)
		n++;
	int e = errno;
	EXPECT(n == max - held && e == ENOMEM,
	       "%s: %d live at once (the advertised limit), one more is refused with ENOMEM (got %d live, %s)",
	       kind_name[k], max, n + held, n == max + 1 - held ? "one more created" : strerror(e));
	if (n > 0) {
		unmake(k, o[--n]);
		o[n] = make(k, ctx, pd);
		EXPECT(o[n] != NULL, "%s: once one is freed another is created (%s)", kind_name[k],
		       o[n] ? "created" : strerror(errno));
		if (o[n])
			n++;
	}
	while (n > 0)
		if (unmake(k, o[--n]))
			DIE("%s: freeing one failed", kind_name[k]);
	free(o);
}

int main(void)
{
	struct ibv_context *ctx = contract_open_device();
	struct ibv_device_attr da;
	if (ibv_query_device(ctx, &da))
		DIE("ibv_query_device");

	struct ibv_pd *mwpd = ibv_alloc_pd(ctx);
	if (!mwpd)
		DIE("ibv_alloc_pd: %s", strerror(errno));
	struct ibv_mw *mw1 = ibv_alloc_mw(mwpd, IBV_MW_TYPE_1);
	struct ibv_mw *mw2 = ibv_alloc_mw(mwpd, IBV_MW_TYPE_2);
	EXPECT(!mw1 == !(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW),
	       "device_cap_flags: IBV_DEVICE_MEM_WINDOW set exactly when a type 1 window is allocated (%s, flags %#x)",
	       mw1 ? "allocated" : strerror(errno), da.device_cap_flags);
	EXPECT(!mw2 == !(da.device_cap_flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B)),
	       "device_cap_flags: a type 2A or 2B flag set exactly when a type 2 window is allocated (%s, flags %#x)",
	       mw2 ? "allocated" : strerror(errno), da.device_cap_flags);
	EXPECT(!mw2 || (da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B),
	       "device_cap_flags: type 2 windows bound to a QP and its PD are type 2B (flags %#x)", da.device_cap_flags);
	if ((mw1 && ibv_dealloc_mw(mw1)) || (mw2 && ibv_dealloc_mw(mw2)) || ibv_dealloc_pd(mwpd))
		DIE("freeing the windows or their PD failed");

	__be16 pk = 0;
	int r = ibv_query_pkey(ctx, 1, 0, &pk);
	EXPECT(r == 0 && pk == htons(0xffff), "ibv_query_pkey(3): entry 0 is the default P_Key (got %d, %#x)", r,
	       ntohs(pk));
	errno = 0;
	r = ibv_query_pkey(ctx, 1, 1, &pk);
	int e = errno;
	EXPECT(r == -1 && e == EINVAL, "ibv_query_pkey(3): an index past the table returns -1, errno EINVAL (got %d, %s)", r,
	       strerror(e));
	union ibv_gid gid;
	errno = 0;
	r = ibv_query_gid(ctx, 1, 1, &gid);
	e = errno;
	EXPECT(r == -1 && e == EINVAL, "ibv_query_gid(3): an index past the table returns -1, errno EINVAL (got %d, %s)", r,
	       strerror(e));
	struct ibv_port_attr pa;
	r = ibv_query_port(ctx, 2, &pa);
	EXPECT(r == EINVAL, "ibv_query_port(3): a port the device does not have returns EINVAL (got %d)", r);

	struct ibv_cq *cq = ibv_create_cq(ctx, da.max_cqe, NULL, NULL, 0);
	EXPECT(cq != NULL, "ibv_create_cq(3): a CQ of max_cqe (%d) entries is created (%s)", da.max_cqe,
	       cq ? "created" : strerror(errno));
	errno = 0;
	struct ibv_cq *big = ibv_create_cq(ctx, da.max_cqe + 1, NULL, NULL, 0);
	int e1 = errno;
	EXPECT(big == NULL && e1 == EINVAL, "ibv_create_cq(3): a CQ of max_cqe + 1 entries is refused with EINVAL (got %s)",
	       big ? "a CQ" : strerror(e1));
	if (big)
		ibv_destroy_cq(big);
	errno = 0;
	big = ibv_create_cq(ctx, 4, NULL, NULL, 1);
	e1 = errno;
	EXPECT(big == NULL && e1 == EINVAL,
	       "ibv_create_cq(3): comp_vector 1 of a device with num_comp_vectors %d is refused with EINVAL (got %s)",
	       ctx->num_comp_vectors, big ? "a CQ" : strerror(e1));
	if (big)
		ibv_destroy_cq(big);
	if (!cq)
		DIE("no CQ");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	if (!pd)
		DIE("ibv_alloc_pd");
	struct ibv_qp *q = qp_of(pd, cq, da.max_qp_wr, da.max_sge);
	EXPECT(q != NULL, "ibv_create_qp(3): a QP of max_qp_wr (%d) work requests of max_sge (%d) SGEs is created (%s)",
	       da.max_qp_wr, da.max_sge, q ? "created" : strerror(errno));
	if (q)
		ibv_destroy_qp(q);
	errno = 0;
	q = qp_of(pd, cq, da.max_qp_wr + 1, 1);
	int e2 = errno;
	EXPECT(q == NULL && e2 == EINVAL, "ibv_create_qp(3): a QP of max_qp_wr + 1 work requests is refused with EINVAL (got %s)",
	       q ? "a QP" : strerror(e2));
	if (q)
		ibv_destroy_qp(q);
	errno = 0;
	q = qp_of(pd, cq, 1, da.max_sge + 1);
	e2 = errno;
	EXPECT(q == NULL && e2 == EINVAL, "ibv_create_qp(3): a QP of max_sge + 1 SGEs is refused with EINVAL (got %s)",
	       q ? "a QP" : strerror(e2));
	if (q)
		ibv_destroy_qp(q);
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = da.max_srq_wr + 1, .max_sge = 1 } };
	errno = 0;
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	e2 = errno;
	EXPECT(srq == NULL && e2 == EINVAL, "ibv_create_srq(3): an SRQ of max_srq_wr + 1 work requests is refused with EINVAL (got %s)",
	       srq ? "an SRQ" : strerror(e2));
	if (srq)
		ibv_destroy_srq(srq);
	static char page[4096];
	struct ibv_mr *mr = ibv_reg_mr(pd, page, sizeof page, IBV_ACCESS_LOCAL_WRITE);
	EXPECT(mr != NULL, "ibv_reg_mr(3): a page is registered (%s)", mr ? "registered" : strerror(errno));
	if (mr)
		ibv_dereg_mr(mr);
	if (da.max_mr_size < SIZE_MAX) {
		errno = 0;
		mr = ibv_reg_mr(pd, page, (size_t)da.max_mr_size + 1, IBV_ACCESS_LOCAL_WRITE);
		e = errno;
		EXPECT(mr == NULL && e == ENOMEM,
		       "ibv_reg_mr(3): a length of max_mr_size (%#llx) + 1 is refused with ENOMEM (got %s, %s)",
		       (unsigned long long)da.max_mr_size, mr ? "a region" : "NULL", strerror(e));
		if (mr)
			ibv_dereg_mr(mr);
	}
	/* One PD and one CQ are live here. */
	fill_to_limit(PD, ctx, NULL, da.max_pd, 1);
	fill_to_limit(CQ, ctx, NULL, da.max_cq, 1);
	fill_to_limit(SRQ, ctx, pd, da.max_srq, 0);
	ibv_dealloc_pd(pd);
	ibv_destroy_cq(cq);
	return contract_end();
}
