/*
 * Contract: a connect that the peer's TCP refuses (a RST to the SYN: nothing listens on the
 * port) is reported as the kernel's rdma_cm reports it for an iWARP provider
 * (cma_iw_handler: an IW_CM_EVENT_CONNECT_REPLY with -ECONNREFUSED is REJECTED):
 *   - on an id with a channel: RDMA_CM_EVENT_REJECTED with status -ECONNREFUSED. Before the
 *     engine told a RST from a TCP timeout, every such failure was UNREACHABLE.
 *   - on a synchronous id (rdma_create_ep): rdma_connect fails with errno ECONNREFUSED.
 *   The id can then connect to the port that does listen.
 * - a connect the application ends itself before it completes (ibv_modify_qp(3) of its QP
 *   to IBV_QPS_ERR, while it awaits the MPA Reply of a server that took one connection and
 *   answers no more): what the providers report for it (siw's siw_qp_cm_drop while it
 *   awaits the MPA Reply: status -EINVAL), which cma_iw_handler makes CONNECT_ERROR.
 *   Before, the engine's abort was CONNECT_ERROR with -ECONNRESET, a status the kernel
 *   reports as REJECTED. (The connect went to an absent host before, its SYN waiting for
 *   ARP; rdma_resolve_addr now resolves the neighbour first and fails such an id with
 *   ADDR_ERROR, as the kernel's does: id_device_pd.c.)
 *   connect_refused -s ADDR PORT   server: accepts one connection (contract_serve)
 *   connect_refused -c ADDR PORT   client: the checks (PORT+1 has no listener)
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <rdma/rdma_cma.h>

static const char *contract_name = "connect_refused";
#include "contract.h"

#define WAIT_MS 20000

static int client(const char *a, const char *p)
{
	int port = contract_port(p);
	char closed_port[16];
	snprintf(closed_port, sizeof closed_port, "%d", port + 1);
	struct rdma_event_channel *ec = contract_channel();

	struct rdma_cm_id *id = contract_active(ec, a, port + 1, WAIT_MS);
	struct rdma_conn_param cp = contract_conn_param(1, 1, NULL, 0);
	if (rdma_connect(id, &cp))
		DIE("rdma_connect: %s", strerror(errno));
	struct rdma_cm_event *ev = contract_next_event(ec, WAIT_MS);
	EXPECT(ev && ev->event == RDMA_CM_EVENT_REJECTED && ev->status == -ECONNREFUSED,
	       "a connect to a port nobody listens on: REJECTED, status -ECONNREFUSED (got %s, status %d)",
	       ev ? rdma_event_str(ev->event) : "no event", ev ? ev->status : 0);
	if (ev)
		rdma_ack_cm_event(ev);
	rdma_destroy_qp(id);
	rdma_destroy_id(id);

	struct rdma_cm_id *sync = contract_ep(a, closed_port, 0);
	errno = 0;
	int r = rdma_connect(sync, NULL), e = errno;
	EXPECT(r == -1 && e == ECONNREFUSED,
	       "rdma_connect on a synchronous id to a port nobody listens on: ECONNREFUSED (got %d: %s)", r,
	       r ? strerror(e) : "0");
	rdma_destroy_ep(sync);

	/* The listening port connects (the server accepts this one and no other). */
	struct rdma_cm_id *up = contract_connect(a, p);

	/* A second connect to it waits for an MPA Reply that never comes. */
	struct rdma_cm_id *ab = contract_active(ec, a, port, WAIT_MS);
	if (rdma_connect(ab, &cp))
		DIE("rdma_connect: %s", strerror(errno));
	struct ibv_qp_attr err = { .qp_state = IBV_QPS_ERR };
	if (ibv_modify_qp(ab->qp, &err, IBV_QP_STATE))
		DIE("ibv_modify_qp to ERR: %s", strerror(errno));
	ev = contract_next_event(ec, WAIT_MS);
	EXPECT(ev && ev->id == ab && ev->event == RDMA_CM_EVENT_CONNECT_ERROR && ev->status == -EINVAL,
	       "a connect whose QP the application moves to ERR before it completes: CONNECT_ERROR, status -EINVAL "
	       "(got %s, status %d)",
	       ev ? rdma_event_str(ev->event) : "no event", ev ? ev->status : 0);
	if (ev)
		rdma_ack_cm_event(ev);
	rdma_destroy_qp(ab);
	rdma_destroy_id(ab);

	/* Releases the server. */
	rdma_disconnect(up);
	rdma_destroy_ep(up);
	rdma_destroy_event_channel(ec);
	return contract_end();
}

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, contract_serve, client);
}
