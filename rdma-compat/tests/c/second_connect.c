/*
 * Contract: a second rdma_connect(3) on an id whose connection is under way, or a second
 * rdma_accept(3) on a new id already accepted, fails with EINVAL (the kernel's rdma_cm
 * refuses both in the id's state) and changes nothing: the connection's events still come
 * to the id. Before the fix the failed call took the id's QP out of the library's routing,
 * so the id never heard of its connection again: the client's ESTABLISHED and both sides'
 * DISCONNECTED were lost, and an application waiting for them waited for ever.
 * The server keeps nothing of a refused connect (the client retries while it is refused).
 *   second_connect -s ADDR PORT   server: accepts the first request, twice
 *   second_connect -c ADDR PORT   client: connects twice, the checks, disconnects
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

static const char *contract_name = "second_connect";
#include "contract.h"

#define WAIT_MS 10000

static int server(const char *a, const char *p)
{
	struct rdma_event_channel *ec = contract_channel();
	contract_listener(ec, a, contract_port(p));
	struct rdma_cm_event *ev = contract_expect_event(ec, RDMA_CM_EVENT_CONNECT_REQUEST, 60000);
	struct rdma_cm_id *id = ev->id;
	rdma_ack_cm_event(ev);
	contract_qp_on(id);
	struct rdma_conn_param cp = contract_conn_param(1, 1, NULL, 0);
	if (rdma_accept(id, &cp))
		DIE("rdma_accept: %s", strerror(errno));
	errno = 0;
	int r = rdma_accept(id, &cp);
	int e = errno;
	EXPECT(r == -1 && e == EINVAL, "rdma_accept(3) a second time on the same new id fails with EINVAL (%d, %s)", r,
	       strerror(e));
	/* The client's disconnect after its checks: this id's DISCONNECTED (an ESTABLISHED
	 * before it). */
	int established = 0, disconnected = 0;
	while (!disconnected && (ev = contract_next_event(ec, WAIT_MS))) {
		if (ev->id == id && ev->event == RDMA_CM_EVENT_ESTABLISHED)
			established = 1;
		if (ev->id == id && ev->event == RDMA_CM_EVENT_DISCONNECTED)
			disconnected = 1;
		rdma_ack_cm_event(ev);
	}
	EXPECT(established && disconnected,
	       "after the second rdma_accept failed, the connection's ESTABLISHED (%s) and DISCONNECTED (%s) still "
	       "come to the id",
	       established ? "came" : "lost", disconnected ? "came" : "lost");
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	return contract_end();
}

static int client(const char *a, const char *p)
{
	struct rdma_event_channel *ec = contract_channel();
	struct rdma_conn_param cp = contract_conn_param(1, 1, NULL, 0);
	struct rdma_cm_event *ev;
	struct rdma_cm_id *id;
	int r, e;
	/* Again while the server is not listening yet (REJECTED), for at most ten seconds. */
	for (int tries = 0;; tries++) {
		id = contract_active(ec, a, contract_port(p), WAIT_MS);
		if (rdma_connect(id, &cp))
			DIE("rdma_connect: %s", strerror(errno));
		errno = 0;
		r = rdma_connect(id, &cp);
		e = errno;
		ev = contract_next_event(ec, WAIT_MS);
		if (!ev || ev->event != RDMA_CM_EVENT_REJECTED || tries == 100)
			break;
		rdma_ack_cm_event(ev);
		rdma_destroy_qp(id);
		rdma_destroy_id(id);
		usleep(100000);
	}
	EXPECT(r == -1 && e == EINVAL,
	       "rdma_connect(3) a second time on an id whose connection is under way fails with EINVAL (%d, %s)", r,
	       strerror(e));
	EXPECT(ev && ev->id == id && ev->event == RDMA_CM_EVENT_ESTABLISHED,
	       "after the second rdma_connect failed, the connection's ESTABLISHED still comes to the id (got %s)",
	       ev ? rdma_event_str(ev->event) : "nothing");
	if (!ev)
		return contract_end();
	rdma_ack_cm_event(ev);
	if (rdma_disconnect(id))
		DIE("rdma_disconnect: %s", strerror(errno));
	ev = contract_next_event(ec, WAIT_MS);
	EXPECT(ev && ev->id == id && ev->event == RDMA_CM_EVENT_DISCONNECTED,
	       "and its DISCONNECTED after rdma_disconnect (got %s)", ev ? rdma_event_str(ev->event) : "nothing");
	if (ev)
		rdma_ack_cm_event(ev);
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ec);
	return contract_end();
}

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, server, client);
}
