/*
 * Contract: rdma_listen(3) and rdma_resolve_addr(3) on an id in the wrong state fail with
 * EINVAL, as the kernel's rdma_cm answers (drivers/infiniband/core/cma.c):
 * - rdma_listen moves an id from ADDR_BOUND to LISTEN (an idle id is bound first),
 *   `cma_comp_exch(id_priv, RDMA_CM_ADDR_BOUND, RDMA_CM_LISTEN)`, else -EINVAL: an id whose
 *   address is being resolved (ADDR_QUERY) or is resolved (ADDR_RESOLVED) does not listen;
 * - rdma_resolve_addr moves ADDR_BOUND to ADDR_QUERY, or binds an idle id first
 *   (resolve_prepare_src; rdma_bind_addr_dst: `cma_comp_exch(id_priv, RDMA_CM_IDLE,
 *   RDMA_CM_ADDR_BOUND)`), else -EINVAL: a listening id, or one whose address is resolved,
 *   resolves nothing;
 * - after an ADDR_ERROR the id is back in ADDR_BOUND, and rdma_resolve_addr is taken again.
 * Before the fix rdma_listen on a resolved id listened on the port the id was to connect
 * from (the id then both an active and a passive one), rdma_resolve_addr on a listener
 * failed with EADDRINUSE, and a second rdma_resolve_addr of a resolved id started another
 * resolution and queued a second ADDR_RESOLVED.
 *   listen_resolve_states
 */
#include <errno.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

static const char *contract_name = "listen_resolve_states";
#include "contract.h"

/* rdma_resolve_addr(id, NULL, addr:port, ms): 0, or the errno of its failure. */
static int resolve_to(struct rdma_cm_id *id, const char *addr, int port, int ms)
{
	struct sockaddr_in dst = contract_sockaddr(addr, port);
	return rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, ms) ? errno : 0;
}

int main(void)
{
	struct rdma_event_channel *ec = contract_channel();
	struct rdma_cm_id *a, *l;
	if (rdma_create_id(ec, &a, NULL, RDMA_PS_TCP) || rdma_create_id(ec, &l, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id: %s", strerror(errno));

	/* ADDR_QUERY: nobody holds 10.77.0.2, so the resolution runs until its timeout. */
	if (resolve_to(a, "10.77.0.2", 7564, 300))
		DIE("rdma_resolve_addr: %s", strerror(errno));
	errno = 0;
	int r = rdma_listen(a, 4);
	int e = errno;
	EXPECT(r == -1 && e == EINVAL,
	       "rdma_listen(3) on an id whose address is being resolved is EINVAL (got %d, %s)", r,
	       r ? strerror(e) : "0");
	struct rdma_cm_event *ev = contract_next_event(ec, 5000);
	EXPECT(ev && ev->id == a && ev->event == RDMA_CM_EVENT_ADDR_ERROR && ev->status == -ETIMEDOUT,
	       "the resolution goes on to its answer, ADDR_ERROR -ETIMEDOUT (got %s, status %d)",
	       ev ? rdma_event_str(ev->event) : "none", ev ? ev->status : 0);
	if (ev)
		rdma_ack_cm_event(ev);

	/* ADDR_BOUND again: a resolution is taken; our own address answers at once. */
	e = resolve_to(a, "10.77.0.1", 7564, 2000);
	EXPECT(e == 0, "rdma_resolve_addr(3) after an ADDR_ERROR is taken (errno %d)", e);
	if (e == 0)
		rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_ADDR_RESOLVED, 5000));

	/* ADDR_RESOLVED. */
	uint16_t port = rdma_get_src_port(a);
	errno = 0;
	r = rdma_listen(a, 4);
	e = errno;
	EXPECT(r == -1 && e == EINVAL, "rdma_listen(3) on an id whose address is resolved is EINVAL (got %d, %s)",
	       r, r ? strerror(e) : "0");
	e = resolve_to(a, "10.77.0.1", 7566, 2000);
	EXPECT(e == EINVAL, "rdma_resolve_addr(3) of an id whose address is resolved is EINVAL (errno %d)", e);
	ev = contract_next_event(ec, 300);
	EXPECT(ev == NULL, "... and queues no event (got %s)", ev ? rdma_event_str(ev->event) : "none");
	if (ev)
		rdma_ack_cm_event(ev);
	EXPECT(rdma_get_src_port(a) == port && ntohs(rdma_get_dst_port(a)) == 7564,
	       "the refused calls leave the id's addresses (src port %u, was %u; dst port %u)",
	       ntohs(rdma_get_src_port(a)), ntohs(port), ntohs(rdma_get_dst_port(a)));

	/* LISTEN. */
	if (rdma_listen(l, 4))
		DIE("rdma_listen: %s", strerror(errno));
	uint16_t lport = rdma_get_src_port(l);
	e = resolve_to(l, "10.77.0.1", 7568, 2000);
	EXPECT(e == EINVAL, "rdma_resolve_addr(3) of a listening id is EINVAL (errno %d)", e);
	ev = contract_next_event(ec, 300);
	EXPECT(ev == NULL, "... and queues no event (got %s)", ev ? rdma_event_str(ev->event) : "none");
	if (ev)
		rdma_ack_cm_event(ev);
	EXPECT(rdma_get_src_port(l) == lport && lport != 0,
	       "the listener keeps its port (%u, was %u)", ntohs(rdma_get_src_port(l)), ntohs(lport));

	rdma_destroy_id(a);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(ec);
	return contract_end();
}
