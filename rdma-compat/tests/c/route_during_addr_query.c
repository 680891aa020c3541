/*
 * Contract: rdma_resolve_route(3) and rdma_connect(3) while the id's address is still being
 * resolved (rdma_resolve_addr returned 0, no ADDR_RESOLVED yet) fail with EINVAL, as the
 * kernel's rdma_cm answers: its id is in RDMA_CM_ADDR_QUERY, and rdma_resolve_route needs
 * ADDR_RESOLVED (`cma_comp_exch(id_priv, RDMA_CM_ADDR_RESOLVED, RDMA_CM_ROUTE_QUERY)`),
 * rdma_connect ROUTE_RESOLVED (`cma_comp_exch(id_priv, RDMA_CM_ROUTE_RESOLVED,
 * RDMA_CM_CONNECT)`). The address's answer is then the id's first event. Before the fix
 * rdma_resolve_route returned 0 and queued ROUTE_RESOLVED at once, ahead of the address's
 * answer (here an ADDR_ERROR: nobody holds 10.77.0.2), so an application that follows the
 * events took a route to an address that never resolved, and rdma_connect started a
 * connection to it.
 *   route_during_addr_query
 */
#include <errno.h>
#include <string.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

static const char *contract_name = "route_during_addr_query";
#include "contract.h"

int main(void)
{
	struct rdma_event_channel *ec = contract_channel();
	struct rdma_cm_id *id;
	if (rdma_create_id(ec, &id, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id: %s", strerror(errno));
	struct sockaddr_in gone = contract_sockaddr("10.77.0.2", 7562);
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&gone, 1000))
		DIE("rdma_resolve_addr: %s", strerror(errno));

	errno = 0;
	int r = rdma_resolve_route(id, 2000);
	int e = errno;
	EXPECT(r == -1 && e == EINVAL,
	       "rdma_resolve_route(3) while the address is being resolved is EINVAL (got %d, %s)", r,
	       r ? strerror(e) : "0");

	contract_qp_on(id);
	errno = 0;
	r = rdma_connect(id, NULL);
	e = errno;
	EXPECT(r == -1 && e == EINVAL,
	       "rdma_connect(3) while the address is being resolved is EINVAL (got %d, %s)", r,
	       r ? strerror(e) : "0");

	struct rdma_cm_event *ev = contract_next_event(ec, 5000);
	EXPECT(ev && ev->event == RDMA_CM_EVENT_ADDR_ERROR && ev->status == -ETIMEDOUT,
	       "the id's first event is the address's answer, ADDR_ERROR -ETIMEDOUT (got %s, status %d)",
	       ev ? rdma_event_str(ev->event) : "none", ev ? ev->status : 0);
	if (ev)
		rdma_ack_cm_event(ev);
	/* Whatever else came (the old ROUTE_RESOLVED, a failed connect's event), acknowledged. */
	while ((ev = contract_next_event(ec, 300)))
		rdma_ack_cm_event(ev);

	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ec);
	return contract_end();
}
