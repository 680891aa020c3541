/*
 * Contract: rdma_migrate_id(3) "migrates a communication identifier to the specified event
 * channel and moves any pending events associated with the rdma_cm_id to the new channel";
 * a NULL channel makes the id synchronous, which librdmacm refuses (EINVAL) for an id that
 * already is. Before the fix the pending events stayed on the old channel (and were freed
 * with it when that was a synchronous id's). A pending event moved to an id made
 * synchronous is what its next synchronous call takes, and librdmacm's ucma_complete
 * answers any event of status 0 with success; before that fix such a call failed with
 * ECONNREFUSED.
 *   migrate_id_moves -s ADDR PORT   server: a listener on PORT migrated with a connection
 *                                   request pending; accepts it (checks on its side)
 *   migrate_id_moves -c ADDR PORT   client: connects, then the checks that need no peer
 */
#include <errno.h>
#include <string.h>
#include <rdma/rdma_cma.h>

static const char *contract_name = "migrate_id_moves";
#include "contract.h"

/* How long each side waits for an event (ms). */
#define WAIT_MS 30000

/* A listener migrated with a connection request pending: the request, and the events of
 * the connection it makes, come on the new channel. */
static int server(const char *addr, const char *p)
{
	struct rdma_event_channel *ec1 = contract_channel(), *ec2 = contract_channel();
	struct rdma_cm_id *l = contract_listener(ec1, addr, contract_port(p));
	if (contract_readable(ec1->fd, WAIT_MS) != 1)
		DIE("no connection request");
	if (rdma_migrate_id(l, ec2))
		DIE("rdma_migrate_id of the listener: %s", strerror(errno));
	struct rdma_cm_event *ev = contract_next_event(ec2, WAIT_MS);
	EXPECT(ev && ev->event == RDMA_CM_EVENT_CONNECT_REQUEST && ev->listen_id == l,
	       "rdma_migrate_id(3): a migrated listener's pending CONNECT_REQUEST comes on the new channel (got %s)",
	       ev ? rdma_event_str(ev->event) : "nothing in 30 s");
	if (!ev || ev->event != RDMA_CM_EVENT_CONNECT_REQUEST)
		DIE("no connection request to accept");
	struct rdma_cm_id *id = ev->id;
	rdma_ack_cm_event(ev);
	EXPECT(id->channel == ec2, "rdma_migrate_id(3): the request's new id is on the listener's new channel");
	contract_qp_on(id);
	if (rdma_accept(id, NULL))
		DIE("rdma_accept: %s", strerror(errno));
	ev = contract_next_event(ec2, WAIT_MS);
	EXPECT(ev && ev->event == RDMA_CM_EVENT_ESTABLISHED && ev->id == id,
	       "rdma_migrate_id(3): the new id's ESTABLISHED comes on the listener's new channel (got %s)",
	       ev ? rdma_event_str(ev->event) : "nothing in 30 s");
	if (ev)
		rdma_ack_cm_event(ev);
	/* The client disconnects when it is done. */
	ev = contract_next_event(ec2, WAIT_MS);
	if (ev)
		rdma_ack_cm_event(ev);
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	rdma_destroy_id(l);
	return contract_end();
}

static int client(const char *addr, const char *p)
{
	int port = contract_port(p);
	struct rdma_event_channel *ec0 = contract_channel(), *ec1 = contract_channel(), *ec2 = contract_channel();

	/* 0. A connection to the server, which migrates its listener meanwhile. */
	struct rdma_cm_id *cid = contract_active(ec0, addr, port, WAIT_MS);
	if (rdma_connect(cid, NULL))
		DIE("rdma_connect: %s", strerror(errno));
	rdma_ack_cm_event(contract_expect_event(ec0, RDMA_CM_EVENT_ESTABLISHED, WAIT_MS));
	contract_nonblocking(ec1->fd, 1);
	contract_nonblocking(ec2->fd, 1);

	/* 1. An ADDR_RESOLVED pending on the first channel, then the id migrated. */
	struct rdma_cm_id *id;
	if (rdma_create_id(ec1, &id, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id: %s", strerror(errno));
	/* Any address on the subnet resolves at once; nothing listens on PORT+1. */
	struct sockaddr_in dst = contract_sockaddr(addr, port + 1);
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000))
		DIE("rdma_resolve_addr: %s", strerror(errno));
	if (contract_readable(ec1->fd, 1000) != 1)
		DIE("no event pending on the first channel");
	if (rdma_migrate_id(id, ec2))
		DIE("rdma_migrate_id: %s", strerror(errno));
	struct rdma_cm_event *ev = NULL;
	int r = rdma_get_cm_event(ec1, &ev), e = errno;
	EXPECT(r == -1 && e == EAGAIN, "rdma_migrate_id(3): the old channel has no event of the id left (got %d: %s)", r,
	       r == 0 ? rdma_event_str(ev->event) : strerror(e));
	if (r == 0)
		rdma_ack_cm_event(ev);
	int readable = contract_readable(ec2->fd, 1000);
	ev = NULL;
	r = rdma_get_cm_event(ec2, &ev), e = errno;
	EXPECT(readable == 1 && r == 0 && ev->event == RDMA_CM_EVENT_ADDR_RESOLVED && ev->id == id,
	       "rdma_migrate_id(3): the pending ADDR_RESOLVED moved to the new channel (readable %d, got %d: %s)",
	       readable, r, r == 0 ? rdma_event_str(ev->event) : strerror(e));
	if (r == 0)
		rdma_ack_cm_event(ev);
	rdma_destroy_id(id);

	/* 2. A synchronous id migrated to no channel. */
	struct rdma_cm_id *sid;
	if (rdma_create_id(NULL, &sid, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id without a channel: %s", strerror(errno));
	r = rdma_migrate_id(sid, NULL), e = errno;
	EXPECT(r == -1 && e == EINVAL, "rdma_migrate_id of a synchronous id to NULL is refused with EINVAL (got %d: %s)", r,
	       r ? strerror(e) : "moved");
	rdma_destroy_id(sid);

	/* 3. An ADDR_RESOLVED pending, then the id migrated to no channel: the next
	 * synchronous call takes whatever event comes next, as librdmacm's ucma_complete does,
	 * and a status of 0 is success whatever the event. rdma_resolve_route returns 0 with
	 * the pending ADDR_RESOLVED in id->event. */
	if (rdma_create_id(ec1, &id, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id: %s", strerror(errno));
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000))
		DIE("rdma_resolve_addr: %s", strerror(errno));
	if (contract_readable(ec1->fd, 1000) != 1)
		DIE("no event pending on the first channel");
	if (rdma_migrate_id(id, NULL))
		DIE("rdma_migrate_id to no channel: %s", strerror(errno));
	r = rdma_resolve_route(id, 2000), e = errno;
	/* errno as a number: its text, "Connection refused", would have the test script retry
	 * the client as if the server had not been listening yet. */
	EXPECT(r == 0 && id->event && id->event->event == RDMA_CM_EVENT_ADDR_RESOLVED,
	       "rdma_resolve_route(3) on an id made synchronous with an ADDR_RESOLVED pending: 0, as librdmacm's "
	       "ucma_complete answers an event of status 0, the ADDR_RESOLVED in id->event (got %d, errno %d, "
	       "id->event %s)",
	       r, r ? e : 0, id->event ? rdma_event_str(id->event->event) : "NULL");
	rdma_destroy_id(id);
	rdma_disconnect(cid);
	if ((ev = contract_next_event(ec0, WAIT_MS)))
		rdma_ack_cm_event(ev);
	rdma_destroy_qp(cid);
	rdma_destroy_id(cid);
	rdma_destroy_event_channel(ec0);
	rdma_destroy_event_channel(ec1);
	rdma_destroy_event_channel(ec2);
	return contract_end();
}

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, server, client);
}
