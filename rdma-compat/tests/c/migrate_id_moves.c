/*
 * Contract: rdma_migrate_id(3) "migrates a communication identifier to the specified event
 * channel and moves any pending events associated with the rdma_cm_id to the new channel";
 * a NULL channel makes the id synchronous, which librdmacm refuses (EINVAL) for an id that
 * already is. Before the fix the pending events stayed on the old channel (and were freed
 * with it when that was a synchronous id's).
 *   migrate_id_moves -s ADDR PORT   server: a listener on PORT migrated with a connection
 *                                   request pending; accepts it (checks on its side)
 *   migrate_id_moves -c ADDR PORT   client: connects, then the checks that need no peer
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

static const char *contract_name = "migrate_id_moves";
#include "contract.h"

static void nonblocking(struct rdma_event_channel *ec)
{
	fcntl(ec->fd, F_SETFL, fcntl(ec->fd, F_GETFL) | O_NONBLOCK);
}

/* The next event on ec within 30 s, or NULL. */
static struct rdma_cm_event *next(struct rdma_event_channel *ec)
{
	struct pollfd p = { .fd = ec->fd, .events = POLLIN };
	struct rdma_cm_event *ev;
	if (poll(&p, 1, 30000) != 1 || rdma_get_cm_event(ec, &ev))
		return NULL;
	return ev;
}

static void qp_on(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr at;
	memset(&at, 0, sizeof at);
	at.qp_type = IBV_QPT_RC;
	at.cap.max_send_wr = at.cap.max_recv_wr = 4;
	at.cap.max_send_sge = at.cap.max_recv_sge = 1;
	if (rdma_create_qp(id, NULL, &at))
		DIE("rdma_create_qp: %s", strerror(errno));
}

/* A listener migrated with a connection request pending: the request, and the events of
 * the connection it makes, come on the new channel. */
static int server(const char *addr, int port)
{
	struct rdma_event_channel *ec1 = rdma_create_event_channel(), *ec2 = rdma_create_event_channel();
	struct rdma_cm_id *l;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	inet_pton(AF_INET, addr, &sa.sin_addr);
	if (!ec1 || !ec2 || rdma_create_id(ec1, &l, NULL, RDMA_PS_TCP) || rdma_bind_addr(l, (struct sockaddr *)&sa) ||
	    rdma_listen(l, 4))
		DIE("listener on %d: %s", port, strerror(errno));
	struct pollfd p1 = { .fd = ec1->fd, .events = POLLIN };
	if (poll(&p1, 1, 30000) != 1)
		DIE("no connection request");
	if (rdma_migrate_id(l, ec2))
		DIE("rdma_migrate_id of the listener: %s", strerror(errno));
	struct rdma_cm_event *ev = next(ec2);
	EXPECT(ev && ev->event == RDMA_CM_EVENT_CONNECT_REQUEST && ev->listen_id == l,
	       "rdma_migrate_id(3): a migrated listener's pending CONNECT_REQUEST comes on the new channel (got %s)",
	       ev ? rdma_event_str(ev->event) : "nothing in 30 s");
	if (!ev || ev->event != RDMA_CM_EVENT_CONNECT_REQUEST)
		DIE("no connection request to accept");
	struct rdma_cm_id *id = ev->id;
	rdma_ack_cm_event(ev);
	EXPECT(id->channel == ec2, "rdma_migrate_id(3): the request's new id is on the listener's new channel");
	qp_on(id);
	if (rdma_accept(id, NULL))
		DIE("rdma_accept: %s", strerror(errno));
	ev = next(ec2);
	EXPECT(ev && ev->event == RDMA_CM_EVENT_ESTABLISHED && ev->id == id,
	       "rdma_migrate_id(3): the new id's ESTABLISHED comes on the listener's new channel (got %s)",
	       ev ? rdma_event_str(ev->event) : "nothing in 30 s");
	if (ev)
		rdma_ack_cm_event(ev);
	/* The client disconnects when it is done. */
	ev = next(ec2);
	if (ev)
		rdma_ack_cm_event(ev);
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	rdma_destroy_id(l);
	return contract_end();
}

int main(int argc, char **argv)
{
	if (argc != 4)
		DIE("usage: migrate_id_moves -s|-c ADDR PORT");
	int port = atoi(argv[3]);
	if (!strcmp(argv[1], "-s"))
		return server(argv[2], port);
	struct rdma_event_channel *ec0 = rdma_create_event_channel();
	struct rdma_event_channel *ec1 = rdma_create_event_channel(), *ec2 = rdma_create_event_channel();
	if (!ec0 || !ec1 || !ec2)
		DIE("rdma_create_event_channel: %s", strerror(errno));

	/* 0. A connection to the server, which migrates its listener meanwhile. */
	struct rdma_cm_id *cid;
	struct sockaddr_in sdst = { .sin_family = AF_INET, .sin_port = htons(port) };
	if (inet_pton(AF_INET, argv[2], &sdst.sin_addr) != 1)
		DIE("not an IPv4 address: %s", argv[2]);
	if (rdma_create_id(ec0, &cid, NULL, RDMA_PS_TCP) || rdma_resolve_addr(cid, NULL, (struct sockaddr *)&sdst, 2000))
		DIE("rdma_resolve_addr: %s", strerror(errno));
	struct rdma_cm_event *ev = next(ec0);
	if (!ev || ev->event != RDMA_CM_EVENT_ADDR_RESOLVED)
		DIE("no ADDR_RESOLVED");
	rdma_ack_cm_event(ev);
	if (rdma_resolve_route(cid, 2000) || !(ev = next(ec0)) || ev->event != RDMA_CM_EVENT_ROUTE_RESOLVED)
		DIE("no ROUTE_RESOLVED");
	rdma_ack_cm_event(ev);
	qp_on(cid);
	if (rdma_connect(cid, NULL))
		DIE("rdma_connect: %s", strerror(errno));
	ev = next(ec0);
	if (!ev || ev->event != RDMA_CM_EVENT_ESTABLISHED)
		DIE("%s instead of ESTABLISHED", ev ? rdma_event_str(ev->event) : "nothing");
	rdma_ack_cm_event(ev);
	nonblocking(ec1);
	nonblocking(ec2);

	/* 1. An ADDR_RESOLVED pending on the first channel, then the id migrated. */
	struct rdma_cm_id *id;
	if (rdma_create_id(ec1, &id, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id: %s", strerror(errno));
	/* Any address on the subnet resolves at once; nothing listens on PORT+1. */
	struct sockaddr_in dst = sdst;
	dst.sin_port = htons(port + 1);
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000))
		DIE("rdma_resolve_addr: %s", strerror(errno));
	struct pollfd p1 = { .fd = ec1->fd, .events = POLLIN };
	if (poll(&p1, 1, 1000) != 1)
		DIE("no event pending on the first channel");
	if (rdma_migrate_id(id, ec2))
		DIE("rdma_migrate_id: %s", strerror(errno));
	ev = NULL;
	int r = rdma_get_cm_event(ec1, &ev), e = errno;
	EXPECT(r == -1 && e == EAGAIN, "rdma_migrate_id(3): the old channel has no event of the id left (got %d: %s)", r,
	       r == 0 ? rdma_event_str(ev->event) : strerror(e));
	if (r == 0)
		rdma_ack_cm_event(ev);
	struct pollfd p2 = { .fd = ec2->fd, .events = POLLIN };
	int readable = poll(&p2, 1, 1000);
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
	rdma_disconnect(cid);
	if ((ev = next(ec0)))
		rdma_ack_cm_event(ev);
	rdma_destroy_qp(cid);
	rdma_destroy_id(cid);
	rdma_destroy_event_channel(ec0);
	rdma_destroy_event_channel(ec1);
	rdma_destroy_event_channel(ec2);
	return contract_end();
}
