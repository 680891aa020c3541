/*
 * Contract: ibv_create_qp(3): "The attributes max_recv_wr and max_recv_sge are ignored by
 * ibv_create_qp() if the QP is to be associated with an SRQ." A QP on an SRQ created with a
 * max_recv_sge above the device's max_sge (here 64, and UINT32_MAX) is created all the same
 * (its receives come from the SRQ, whose own max_sge bounds them), as rxe and mlx5 create
 * it; the same max_recv_sge without an SRQ stays EINVAL. ibv_query_qp(3) reports no
 * receive queue of its own for the QP on the SRQ (max_recv_wr and max_recv_sge 0, as rxe
 * reports them), not the value it ignored. Before the fix the QP on the SRQ was refused
 * with EINVAL. One process, no peer:
 *   srq_qp_recv_caps
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <infiniband/verbs.h>

static const char *contract_name = "srq_qp_recv_caps";
#include "contract.h"

static struct ibv_qp *rc_qp(struct ibv_pd *pd, struct ibv_cq *cq, struct ibv_srq *srq, uint32_t recv_sge,
			    struct ibv_qp_cap *cap)
{
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.send_cq = a.recv_cq = cq;
	a.srq = srq;
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = 8;
	a.cap.max_recv_wr = 8;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_sge = recv_sge;
	errno = 0;
	struct ibv_qp *q = ibv_create_qp(pd, &a);
	*cap = a.cap;
	return q;
}

int main(void)
{
	struct ibv_context *ctx = contract_open_device();
	struct ibv_device_attr da;
	if (ibv_query_device(ctx, &da))
		DIE("ibv_query_device: %s", strerror(errno));
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 4, .max_sge = 1 } };
	struct ibv_srq *srq = pd ? ibv_create_srq(pd, &sa) : NULL;
	if (!pd || !cq || !srq)
		DIE("pd, cq, srq: %s", strerror(errno));

	uint32_t too_many[] = { (uint32_t)da.max_sge + 60, UINT32_MAX };
	for (unsigned i = 0; i < sizeof too_many / sizeof too_many[0]; i++) {
		struct ibv_qp_cap cap;
		struct ibv_qp *q = rc_qp(pd, cq, srq, too_many[i], &cap);
		int e = errno;
		EXPECT(q != NULL,
		       "ibv_create_qp(3): max_recv_sge %u is ignored for a QP on an SRQ (device max_sge %d; got %s)",
		       too_many[i], da.max_sge, q ? "a QP" : strerror(e));
		if (!q)
			continue;
		struct ibv_qp_attr qa;
		struct ibv_qp_init_attr qi;
		int r = ibv_query_qp(q, &qa, IBV_QP_CAP, &qi);
		EXPECT(r == 0 && qi.cap.max_recv_sge == 0 && qi.cap.max_recv_wr == 0 && qi.cap.max_send_sge == 1,
		       "ibv_query_qp(3): a QP on an SRQ has no receive queue of its own (max_recv_wr %u, max_recv_sge %u, "
		       "max_send_sge %u; want 0, 0, 1)",
		       qi.cap.max_recv_wr, qi.cap.max_recv_sge, qi.cap.max_send_sge);
		ibv_destroy_qp(q);
	}

	/* Without an SRQ the receive queue is the QP's own: its SGE limit is checked. */
	struct ibv_qp_cap cap;
	struct ibv_qp *q = rc_qp(pd, cq, NULL, (uint32_t)da.max_sge + 60, &cap);
	int e = errno;
	EXPECT(q == NULL && e == EINVAL,
	       "ibv_create_qp(3): max_recv_sge above the device's max_sge without an SRQ is EINVAL (got %s)",
	       q ? "a QP" : strerror(e));
	if (q)
		ibv_destroy_qp(q);

	EXPECT(ibv_destroy_srq(srq) == 0, "ibv_destroy_srq(3) once its QPs are destroyed");
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	return contract_end();
}
