/*
 * Contract: rdma_create_qp and rdma_create_qp_ex write the QP they made back into the
 * caller's attributes, as librdmacm does (rdma-core librdmacm/cma.c):
 *   rdma_create_qp_ex: the PD (attr->pd = id->pd and IBV_QP_INIT_ATTR_PD in comp_mask when
 *     the caller gave none), the CQs it made (attr->send_cq, attr->recv_cq) and the id's
 *     SRQ (attr->srq = id->srq when the caller gave none), then ibv_create_qp_ex on attr,
 *     which writes the capabilities the QP has into attr->cap (ibv_create_qp(3): "The
 *     function ibv_create_qp() will update the qp_init_attr->cap struct with the actual
 *     QP values of the QP that was created");
 *   rdma_create_qp: the same, copied back into the caller's ibv_qp_init_attr.
 * Before the fix rdma_create_qp_ex left attr->srq NULL and attr->pd, comp_mask as given.
 * One process, no peer:
 *   create_qp_attr_back
 */
#include <errno.h>
#include <string.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

static const char *contract_name = "create_qp_attr_back";
#include "contract.h"

/* An id bound to our address (its device and PD attached) with an SRQ of its own. */
static struct rdma_cm_id *id_with_srq(struct rdma_event_channel *ec)
{
	struct rdma_cm_id *id;
	struct sockaddr_in sa = contract_sockaddr("10.77.0.1", 0);
	if (rdma_create_id(ec, &id, NULL, RDMA_PS_TCP) || rdma_bind_addr(id, (struct sockaddr *)&sa))
		DIE("id: %s", strerror(errno));
	struct ibv_srq_init_attr s = { .attr = { .max_wr = 4, .max_sge = 1 } };
	if (rdma_create_srq(id, NULL, &s))
		DIE("rdma_create_srq: %s", strerror(errno));
	return id;
}

/* The QP's capabilities as ibv_query_qp(3) reports them. */
static struct ibv_qp_cap queried(struct ibv_qp *q)
{
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	if (ibv_query_qp(q, &qa, IBV_QP_CAP, &qi))
		DIE("ibv_query_qp: %s", strerror(errno));
	return qi.cap;
}

static int same_cap(struct ibv_qp_cap a, struct ibv_qp_cap b)
{
	return a.max_send_wr == b.max_send_wr && a.max_recv_wr == b.max_recv_wr && a.max_send_sge == b.max_send_sge &&
	       a.max_recv_sge == b.max_recv_sge && a.max_inline_data == b.max_inline_data;
}

int main(void)
{
	struct rdma_event_channel *ec = contract_channel();

	struct rdma_cm_id *id = id_with_srq(ec);
	struct ibv_qp_init_attr_ex ax;
	memset(&ax, 0, sizeof ax);
	ax.qp_type = IBV_QPT_RC;
	ax.cap.max_send_wr = ax.cap.max_recv_wr = 4;
	ax.cap.max_send_sge = ax.cap.max_recv_sge = 1;
	if (rdma_create_qp_ex(id, &ax))
		DIE("rdma_create_qp_ex: %s", strerror(errno));
	struct ibv_qp_cap c = queried(id->qp);
	EXPECT(same_cap(ax.cap, c) && ax.cap.max_inline_data == c.max_inline_data,
	       "rdma_create_qp_ex: attr->cap holds the QP's capabilities (max_send_wr %u, max_recv_wr %u, "
	       "max_recv_sge %u, max_inline_data %u; ibv_query_qp %u, %u, %u, %u)",
	       ax.cap.max_send_wr, ax.cap.max_recv_wr, ax.cap.max_recv_sge, ax.cap.max_inline_data, c.max_send_wr,
	       c.max_recv_wr, c.max_recv_sge, c.max_inline_data);
	EXPECT(ax.send_cq == id->qp->send_cq && ax.recv_cq == id->qp->recv_cq && ax.send_cq,
	       "rdma_create_qp_ex: attr->send_cq and attr->recv_cq are the CQs the library made for the QP");
	EXPECT(ax.srq == id->srq && ax.srq == id->qp->srq,
	       "rdma_create_qp_ex: attr->srq is the id's SRQ the QP was put on (got %p, id->srq %p)", (void *)ax.srq,
	       (void *)id->srq);
	EXPECT(ax.pd == id->qp->pd && (ax.comp_mask & IBV_QP_INIT_ATTR_PD),
	       "rdma_create_qp_ex: attr->pd is the id's PD the QP was made on, IBV_QP_INIT_ATTR_PD set in comp_mask "
	       "(got pd %p, QP's %p, comp_mask %#x)",
	       (void *)ax.pd, (void *)id->qp->pd, ax.comp_mask);
	rdma_destroy_qp(id);
	rdma_destroy_srq(id);
	rdma_destroy_id(id);

	id = id_with_srq(ec);
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = a.cap.max_recv_wr = 4;
	a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	if (rdma_create_qp(id, NULL, &a))
		DIE("rdma_create_qp: %s", strerror(errno));
	c = queried(id->qp);
	EXPECT(same_cap(a.cap, c),
	       "rdma_create_qp: qp_init_attr->cap holds the QP's capabilities (max_send_wr %u, max_recv_wr %u, "
	       "max_recv_sge %u, max_inline_data %u; ibv_query_qp %u, %u, %u, %u)",
	       a.cap.max_send_wr, a.cap.max_recv_wr, a.cap.max_recv_sge, a.cap.max_inline_data, c.max_send_wr,
	       c.max_recv_wr, c.max_recv_sge, c.max_inline_data);
	EXPECT(a.send_cq == id->qp->send_cq && a.recv_cq == id->qp->recv_cq && a.srq == id->srq && a.srq,
	       "rdma_create_qp: qp_init_attr's CQs and SRQ are those the QP was made with");
	rdma_destroy_qp(id);
	rdma_destroy_srq(id);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ec);
	return contract_end();
}
