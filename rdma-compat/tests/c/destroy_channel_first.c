/*
 * Contract: rdma_destroy_event_channel(3) while an id is still on the channel (the order
 * the man page asks applications not to use: "All rdma_cm_id's associated with the event
 * channel must be destroyed") leaves the rest of the process working. librdmacm closes the
 * descriptor and frees the channel; the kernel drops the id's later events. Before the fix
 * the channel was freed under its id: the dispatcher queued the id's next event
 * (DISCONNECTED, when the peer hung up) on freed memory, blocked there holding its
 * registry, and every later rdma_* call of the process waited forever.
 *   destroy_channel_first -s ADDR PORT   server: accepts one connection, disconnects it
 *                                        2 s later
 *   destroy_channel_first -c ADDR PORT   client: connects, destroys its channel before the
 *                                        id, then the checks below
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

static const char *contract_name = "destroy_channel_first";
#include "contract.h"

/* How long the client waits for an event (ms). */
#define WAIT_MS 5000

static int server(const char *addr, const char *p)
{
	struct rdma_cm_id *l, *id = contract_request(addr, p, NULL, NULL, NULL, NULL, &l);
	if (rdma_accept(id, NULL))
		DIE("rdma_accept: %s", strerror(errno));
	sleep(2);
	rdma_disconnect(id);
	sleep(4);
	return contract_end();
}

static int client(const char *addr, const char *p)
{
	int port = contract_port(p);
	struct rdma_event_channel *ec = contract_channel();
	struct rdma_cm_id *id = contract_active(ec, addr, port, WAIT_MS);
	if (rdma_connect(id, NULL))
		DIE("rdma_connect: %s", strerror(errno));
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_ESTABLISHED, WAIT_MS));
	/* The channel first, its id still connected. */
	rdma_destroy_event_channel(ec);
	/* The server hangs up meanwhile: the id's DISCONNECTED has a channel no more. */
	sleep(3);
	struct rdma_event_channel *ec2 = contract_channel();
	struct rdma_cm_id *id2;
	struct sockaddr_in dst = contract_sockaddr(addr, port);
	int c = rdma_create_id(ec2, &id2, NULL, RDMA_PS_TCP);
	int r = c ? -1 : rdma_resolve_addr(id2, NULL, (struct sockaddr *)&dst, 2000);
	struct rdma_cm_event *ev = r ? NULL : contract_next_event(ec2, WAIT_MS);
	EXPECT(ev && ev->event == RDMA_CM_EVENT_ADDR_RESOLVED,
	       "rdma_destroy_event_channel(3) before its id: a new id's rdma_resolve_addr is still answered (got %s)",
	       c ? "rdma_create_id failed" : r ? "rdma_resolve_addr failed" :
	       ev ? rdma_event_str(ev->event) : "nothing in 5 s");
	if (ev)
		rdma_ack_cm_event(ev);
	/* The id left on the destroyed channel can still be destroyed (its queued event goes
	 * with it, and the channel with its last id). */
	rdma_destroy_qp(id);
	int d = rdma_destroy_id(id);
	EXPECT(d == 0, "rdma_destroy_id(3) of the id whose channel was destroyed first returns 0 (got %d: %s)", d,
	       d ? strerror(errno) : "");
	if (!c)
		rdma_destroy_id(id2);
	rdma_destroy_event_channel(ec2);
	return contract_end();
}

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, server, client);
}
