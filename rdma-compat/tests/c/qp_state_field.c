/*
 * Contract: qp->state, the field an application reads, is kept as libibverbs keeps it
 * (rdma-core's libibverbs): ibv_create_qp(3) gives a QP in IBV_QPS_RESET (cmd_qp.c, set_qp);
 * ibv_modify_qp(3) that returns 0 with IBV_QP_STATE in the mask leaves qp->state at
 * attr->qp_state, and ibv_query_qp(3) asked for IBV_QP_STATE stores the state it answers
 * in qp->state (verbs.c: both set it after the provider succeeds); rdma_create_qp(3) gives
 * a QP in IBV_QPS_INIT (librdmacm's ucma_init_conn_qp moves it there with ibv_modify_qp).
 * Before the fix a new QP read INIT, modifies to RESET, INIT, RTR and RTS left the field
 * alone, and queries never wrote it.
 */
#include <errno.h>
#include <string.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
static const char *contract_name = "qp_state_field";
#include "contract.h"

int main(void)
{
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp = contract_lone_qp(&pd, &cq);
	EXPECT(qp->state == IBV_QPS_RESET, "ibv_create_qp(3): a new QP is in RESET (qp->state %d)", qp->state);
	int states[] = { IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPS_RESET, IBV_QPS_INIT };
	for (unsigned i = 0; i < sizeof states / sizeof states[0]; i++) {
		struct ibv_qp_attr a;
		memset(&a, 0, sizeof a);
		a.qp_state = states[i];
		int r = ibv_modify_qp(qp, &a, IBV_QP_STATE);
		EXPECT(r == 0 && qp->state == (enum ibv_qp_state)states[i],
		       "ibv_modify_qp(3) to state %d returns 0 and leaves qp->state at it (returned %d, qp->state %d)",
		       states[i], r, qp->state);
	}

	/* What ibv_query_qp answers is stored in the field: overwritten here to see the store. */
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	qp->state = IBV_QPS_SQD;
	int r = ibv_query_qp(qp, &qa, IBV_QP_STATE, &qi);
	EXPECT(r == 0 && qa.qp_state == IBV_QPS_INIT && qp->state == IBV_QPS_INIT,
	       "ibv_query_qp(3) with IBV_QP_STATE answers the QP's state (INIT, the last set) and stores it in "
	       "qp->state (returned %d, qp_state %d, qp->state %d)",
	       r, qa.qp_state, qp->state);
	struct ibv_qp_attr err = { .qp_state = IBV_QPS_ERR };
	r = ibv_modify_qp(qp, &err, IBV_QP_STATE);
	EXPECT(r == 0 && qp->state == IBV_QPS_ERR, "ibv_modify_qp(3) to ERR leaves qp->state at ERR (returned %d, %d)",
	       r, qp->state);
	qp->state = IBV_QPS_RTS;
	r = ibv_query_qp(qp, &qa, IBV_QP_STATE, &qi);
	EXPECT(r == 0 && qa.qp_state == IBV_QPS_ERR && qp->state == IBV_QPS_ERR,
	       "ibv_query_qp(3) of a QP in error answers ERR and stores it (returned %d, qp_state %d, qp->state %d)",
	       r, qa.qp_state, qp->state);
	ibv_destroy_qp(qp);

	/* rdma_create_qp on an id bound to the device. */
	struct rdma_event_channel *ec = contract_channel();
	struct rdma_cm_id *id;
	struct sockaddr_in sa = contract_sockaddr("10.77.0.1", 0);
	if (rdma_create_id(ec, &id, NULL, RDMA_PS_TCP) || rdma_bind_addr(id, (struct sockaddr *)&sa))
		DIE("an id bound to 10.77.0.1: %s", strerror(errno));
	contract_qp_on(id);
	EXPECT(id->qp->state == IBV_QPS_INIT, "rdma_create_qp(3): the id's new QP is in INIT (qp->state %d)",
	       id->qp->state);
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ec);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	return contract_end();
}
