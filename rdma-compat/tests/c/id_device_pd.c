/*
 * Contract: an rdma_cm_id bound to a device carries the device's protection domain in
 * id->pd, as librdmacm's do (ucma_get_device: one PD per device, given to every id on it),
 * so an application may register memory on id->pd before it creates the QP, and
 * rdma_create_qp / rdma_create_srq with a NULL PD use it (rdma_create_qp(3): "If the pd
 * is NULL, the rdma_cm_id will be created using a default protection domain"). Before the
 * fix id->pd stayed NULL until rdma_create_qp made a PD of the id's own: ibv_reg_mr(id->pd)
 * and rdma_create_srq(id, NULL) failed with EINVAL before it.
 */
#include <errno.h>
#include <string.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

static const char *contract_name = "id_device_pd";
#include "contract.h"

/* A new id on ec with its address resolved to 10.77.0.2, port `port` (ADDR_RESOLVED taken). */
static struct rdma_cm_id *resolved(struct rdma_event_channel *ec, int port)
{
	struct rdma_cm_id *id;
	struct sockaddr_in dst = contract_sockaddr("10.77.0.2", port);
	if (rdma_create_id(ec, &id, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id: %s", strerror(errno));
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000))
		DIE("rdma_resolve_addr: %s", strerror(errno));
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_ADDR_RESOLVED, 5000));
	return id;
}

int main(void)
{
	struct rdma_event_channel *ec = contract_channel();
	struct rdma_cm_id *a = resolved(ec, 7474), *b = resolved(ec, 7475);
	EXPECT(a->pd && a->pd == b->pd && a->pd->context == a->verbs,
	       "ids resolved to the device carry its one PD in id->pd (%p, %p)", (void *)a->pd, (void *)b->pd);

	static char buf[256];
	struct ibv_mr *mr = a->pd ? ibv_reg_mr(a->pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : NULL;
	EXPECT(mr != NULL, "ibv_reg_mr on id->pd before the id has a QP (%s)", mr ? "registered" : strerror(errno));

	struct ibv_srq_init_attr sa;
	memset(&sa, 0, sizeof sa);
	sa.attr.max_wr = 4;
	sa.attr.max_sge = 1;
	int r = rdma_create_srq(b, NULL, &sa);
	EXPECT(r == 0 && b->srq && b->srq->pd == b->pd, "rdma_create_srq with a NULL PD uses id->pd (got %d: %s)", r,
	       r ? strerror(errno) : "0");

	contract_qp_on(a);
	EXPECT(a->qp->pd == a->pd, "rdma_create_qp with a NULL PD puts the QP on id->pd");

	rdma_destroy_qp(a);
	if (mr)
		ibv_dereg_mr(mr);
	if (r == 0)
		rdma_destroy_srq(b);
	rdma_destroy_id(a);
	rdma_destroy_id(b);
	rdma_destroy_event_channel(ec);
	return contract_end();
}
