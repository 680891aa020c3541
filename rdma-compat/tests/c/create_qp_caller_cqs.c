/*
 * Contract: rdma_create_qp(3) keeps the CQs the caller names out of the id, as librdmacm's
 * rdma_create_qp_ex does (only ucma_create_cqs, for the CQs it makes itself, sets
 * id->send_cq / id->recv_cq and their channels), so rdma_destroy_qp(3) and
 * rdma_destroy_id(3) never touch the caller's CQs and id->send_cq / id->recv_cq are NULL
 * unless the library made them:
 *   rdma_create_qp(3): "If a send or receive completion queue is not specified, then a CQ
 *   will be allocated by the rdma_cm for the QP, along with corresponding completion
 *   channels. Completion channels and CQ data created by the rdma_cm are exposed to the
 *   user through the rdma_cm_id structure."
 * Before the fix, CQs the caller gave both were written into the id and stayed there after
 * rdma_destroy_qp and the caller's ibv_destroy_cq: a program testing id->send_cq for NULL
 * (as it may with librdmacm) found a freed CQ. And a CQ in the attributes that is not the
 * one the id has is EINVAL (rdma_create_qp_ex), where the id's CQ was ignored; a CQ the
 * attributes leave out where the id has one is the id's, where a new one was made.
 */
#include <errno.h>
#include <string.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

static const char *contract_name = "create_qp_caller_cqs";
#include "contract.h"

static struct rdma_cm_id *resolved(struct rdma_event_channel *ec, int port)
{
	struct rdma_cm_id *id;
	struct sockaddr_in dst = contract_sockaddr("10.77.0.1", port);
	if (rdma_create_id(ec, &id, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id: %s", strerror(errno));
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000))
		DIE("rdma_resolve_addr: %s", strerror(errno));
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_ADDR_RESOLVED, 5000));
	return id;
}

static struct ibv_qp_init_attr attrs(struct ibv_cq *scq, struct ibv_cq *rcq)
{
	struct ibv_qp_init_attr at;
	memset(&at, 0, sizeof at);
	at.qp_type = IBV_QPT_RC;
	at.send_cq = scq;
	at.recv_cq = rcq;
	at.cap.max_send_wr = at.cap.max_recv_wr = 4;
	at.cap.max_send_sge = at.cap.max_recv_sge = 1;
	return at;
}

static struct ibv_cq *cq_on(struct rdma_cm_id *id)
{
	struct ibv_cq *cq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0);
	if (!cq)
		DIE("ibv_create_cq: %s", strerror(errno));
	return cq;
}

int main(void)
{
	struct rdma_event_channel *ec = contract_channel();

	/* Both CQs the caller's. */
	struct rdma_cm_id *id = resolved(ec, 7560);
	struct ibv_cq *scq = cq_on(id), *rcq = cq_on(id);
	struct ibv_qp_init_attr at = attrs(scq, rcq);
	if (rdma_create_qp(id, NULL, &at))
		DIE("rdma_create_qp with the caller's CQs: %s", strerror(errno));
	EXPECT(id->send_cq == NULL && id->recv_cq == NULL && id->send_cq_channel == NULL &&
		       id->recv_cq_channel == NULL,
	       "rdma_create_qp(3) with both CQs given leaves id->send_cq, id->recv_cq and their channels NULL "
	       "(got %p %p %p %p)",
	       (void *)id->send_cq, (void *)id->recv_cq, (void *)id->send_cq_channel, (void *)id->recv_cq_channel);
	EXPECT(id->qp && id->qp->send_cq == scq && id->qp->recv_cq == rcq, "... and the QP completes into them");
	rdma_destroy_qp(id);
	int ds = ibv_destroy_cq(scq), dr = ibv_destroy_cq(rcq);
	EXPECT(ds == 0 && dr == 0, "rdma_destroy_qp(3) leaves the caller's CQs to the caller (ibv_destroy_cq: %d, %d)",
	       ds, dr);
	EXPECT(id->send_cq == NULL && id->recv_cq == NULL,
	       "... and the id names no CQ after (got %p %p)", (void *)id->send_cq, (void *)id->recv_cq);
	/* Again, none given: the library's own, on the id, gone with rdma_destroy_qp. */
	at = attrs(NULL, NULL);
	int r = rdma_create_qp(id, NULL, &at);
	EXPECT(r == 0 && id->send_cq && id->recv_cq && id->send_cq_channel && id->recv_cq_channel &&
		       at.send_cq == id->send_cq && at.recv_cq == id->recv_cq,
	       "rdma_create_qp(3) again without CQs makes its own on the id (%d, %p %p)", r, (void *)id->send_cq,
	       (void *)id->recv_cq);
	rdma_destroy_qp(id);
	EXPECT(id->send_cq == NULL && id->recv_cq == NULL && id->send_cq_channel == NULL &&
		       id->recv_cq_channel == NULL,
	       "rdma_destroy_qp(3) takes its own CQs off the id");

	/* One given, one made: only the made one is on the id. */
	rcq = cq_on(id);
	at = attrs(NULL, rcq);
	r = rdma_create_qp(id, NULL, &at);
	EXPECT(r == 0 && id->send_cq && id->send_cq_channel && id->recv_cq == NULL && id->recv_cq_channel == NULL &&
		       at.send_cq == id->send_cq && at.recv_cq == rcq,
	       "rdma_create_qp(3) with the receive CQ given puts only the send CQ it made on the id (%d, %p %p)", r,
	       (void *)id->send_cq, (void *)id->recv_cq);
	/* librdmacm's order: the QP, then the id, then the caller's CQ. */
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	dr = ibv_destroy_cq(rcq);
	EXPECT(dr == 0, "the caller's CQ outlives rdma_destroy_qp(3) and rdma_destroy_id(3) (ibv_destroy_cq: %d)", dr);

	/* A CQ on the id (the application's) and another one in the attributes: EINVAL. */
	id = resolved(ec, 7561);
	scq = cq_on(id);
	struct ibv_cq *other = cq_on(id);
	id->send_cq = scq;
	at = attrs(other, NULL);
	errno = 0;
	r = rdma_create_qp(id, NULL, &at);
	int e = errno;
	EXPECT(r == -1 && e == EINVAL && id->qp == NULL,
	       "rdma_create_qp(3) with a send CQ other than the id's is EINVAL (got %d, %s)", r, r ? strerror(e) : "0");
	/* The same CQ, or none: the QP takes the id's. */
	at = attrs(NULL, NULL);
	r = rdma_create_qp(id, NULL, &at);
	EXPECT(r == 0 && at.send_cq == scq && id->qp && id->qp->send_cq == scq && id->recv_cq && at.recv_cq == id->recv_cq,
	       "rdma_create_qp(3) without a send CQ takes the id's (%d, %p for %p)", r, (void *)at.send_cq, (void *)scq);
	/* Taken back off the id by the application before rdma_destroy_qp, as librdmacm's
	 * would destroy a CQ it finds there. */
	id->send_cq = NULL;
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	ds = ibv_destroy_cq(scq);
	int dother = ibv_destroy_cq(other);
	EXPECT(ds == 0 && dother == 0, "the application's CQs are its own to destroy (%d, %d)", ds, dother);
	rdma_destroy_event_channel(ec);
	return contract_end();
}
