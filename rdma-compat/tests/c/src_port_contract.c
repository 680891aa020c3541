/*
 * Contract: the active side's source port, as the kernel's rdma_cm gives it on iWARP:
 * - rdma_resolve_addr(3) binds an unbound id to an ephemeral port (cma_bind_addr):
 *   rdma_get_src_port(3) and rdma_get_local_addr(3) report it from then on, and the
 *   connection (rdma_connect) uses it: the passive side's new id reports it as
 *   rdma_get_dst_port(3).
 * - rdma_resolve_addr(3) with a source address carrying a port, or rdma_bind_addr(3) with a
 *   port before it: the id reports that port and its connection comes from it.
 * - rdma_resolve_addr(3) from a port another id holds fails with EADDRINUSE (the kernel's
 *   bind of a port in use, without SO_REUSEADDR).
 * Before the fix rdma_get_src_port was 0 after rdma_resolve_addr, and every connection came
 * from an ephemeral port the engine chose, whatever port the id was bound to.
 *
 * The server accepts three connections, each with the port its new id sees the client on
 * (rdma_get_dst_port) as private data; the client judges.
 *   src_port_contract -s ADDR PORT | -c ADDR PORT
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
static const char *contract_name = "src_port_contract";
#include "contract.h"

#define CONNECTIONS 3

static int server(const char *addr, const char *port_s)
{
	struct rdma_event_channel *ec = contract_channel();
	struct rdma_cm_id *l = contract_listener(ec, addr, contract_port(port_s));
	struct rdma_cm_id *ids[CONNECTIONS];
	static uint16_t seen[CONNECTIONS];
	for (int i = 0; i < CONNECTIONS; i++) {
		struct rdma_cm_event *ev = contract_expect_event(ec, RDMA_CM_EVENT_CONNECT_REQUEST, 10000);
		ids[i] = ev->id;
		rdma_ack_cm_event(ev);
		seen[i] = rdma_get_dst_port(ids[i]);
		contract_qp_on(ids[i]);
		struct rdma_conn_param cp = contract_conn_param(1, 1, &seen[i], sizeof seen[i]);
		if (rdma_accept(ids[i], &cp))
			DIE("rdma_accept: %s", strerror(errno));
		rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_ESTABLISHED, 10000));
	}
	for (int i = 0; i < CONNECTIONS; i++)
		rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_DISCONNECTED, 20000));
	for (int i = 0; i < CONNECTIONS; i++) {
		rdma_destroy_qp(ids[i]);
		rdma_destroy_id(ids[i]);
	}
	rdma_destroy_id(l);
	rdma_destroy_event_channel(ec);
	return contract_end();
}

/* The port of id's local address (rdma_get_local_addr), network order. */
static uint16_t local_port(struct rdma_cm_id *id)
{
	struct sockaddr *sa = rdma_get_local_addr(id);
	return sa && sa->sa_family == AF_INET ? ((struct sockaddr_in *)sa)->sin_port : 0;
}

/* Resolves id's address and route to dst from src (NULL: none given); returns
 * rdma_resolve_addr's result (errno set when -1). */
static int resolve(struct rdma_event_channel *ec, struct rdma_cm_id *id, struct sockaddr_in *src,
		   struct sockaddr_in *dst)
{
	if (rdma_resolve_addr(id, (struct sockaddr *)src, (struct sockaddr *)dst, 2000))
		return -1;
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_ADDR_RESOLVED, 5000));
	return 0;
}

/* Resolves the route of id, gives it a QP, connects it and returns the port the peer saw
 * it connect from (network order). */
static uint16_t connect_seen(struct rdma_event_channel *ec, struct rdma_cm_id *id)
{
	if (rdma_resolve_route(id, 2000))
		DIE("rdma_resolve_route: %s", strerror(errno));
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_ROUTE_RESOLVED, 5000));
	contract_qp_on(id);
	if (rdma_connect(id, NULL))
		DIE("rdma_connect: %s", strerror(errno));
	struct rdma_cm_event *ev = contract_expect_event(ec, RDMA_CM_EVENT_ESTABLISHED, 10000);
	uint16_t seen = 0;
	if (ev->param.conn.private_data_len >= sizeof seen)
		memcpy(&seen, ev->param.conn.private_data, sizeof seen);
	rdma_ack_cm_event(ev);
	return seen;
}

static int client(const char *addr, const char *port_s)
{
	int port = contract_port(port_s);
	/* Ports for the client's binds: PORT's neighbours, unused by the suite's others. */
	const uint16_t src_port = 40000 + port % 10000, bind_port = src_port + 1;
	struct rdma_event_channel *ec = contract_channel();
	struct sockaddr_in dst = contract_sockaddr(addr, port);
	struct rdma_cm_id *a, *b, *c, *d;
	if (rdma_create_id(ec, &a, NULL, RDMA_PS_TCP) || rdma_create_id(ec, &b, NULL, RDMA_PS_TCP) ||
	    rdma_create_id(ec, &c, NULL, RDMA_PS_TCP) || rdma_create_id(ec, &d, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id: %s", strerror(errno));

	/* An unbound id. */
	if (resolve(ec, a, NULL, &dst))
		DIE("rdma_resolve_addr: %s", strerror(errno));
	uint16_t after_resolve = rdma_get_src_port(a), local = local_port(a);
	EXPECT(after_resolve != 0 && local == after_resolve,
	       "rdma_resolve_addr(3) binds an unbound id to an ephemeral port: rdma_get_src_port(3) and "
	       "rdma_get_local_addr(3) report it (src port %u, local address's port %u)",
	       ntohs(after_resolve), ntohs(local));
	uint16_t seen = connect_seen(ec, a);
	EXPECT(seen != 0 && seen == after_resolve && rdma_get_src_port(a) == after_resolve,
	       "the connection of an id bound by rdma_resolve_addr(3) comes from that port (bound %u; connected, "
	       "rdma_get_src_port %u; the peer's rdma_get_dst_port %u)",
	       ntohs(after_resolve), ntohs(rdma_get_src_port(a)), ntohs(seen));

	/* A source address with a port. */
	struct sockaddr_in src = { .sin_family = AF_INET, .sin_port = htons(src_port) };
	if (resolve(ec, b, &src, &dst))
		DIE("rdma_resolve_addr from port %u: %s", src_port, strerror(errno));
	uint16_t b_port = rdma_get_src_port(b);
	seen = connect_seen(ec, b);
	EXPECT(b_port == htons(src_port) && seen == htons(src_port),
	       "rdma_resolve_addr(3) from source port %u: the id reports it and its connection comes from it "
	       "(rdma_get_src_port %u; the peer sees %u)",
	       src_port, ntohs(b_port), ntohs(seen));

	/* The same port again, for another id. */
	errno = 0;
	int r = rdma_resolve_addr(c, (struct sockaddr *)&src, (struct sockaddr *)&dst, 2000);
	int e = errno;
	EXPECT(r == -1 && e == EADDRINUSE,
	       "rdma_resolve_addr(3) from port %u, which another id holds, fails with EADDRINUSE (returned %d, "
	       "errno %s)",
	       src_port, r, r ? strerror(e) : "none");

	/* rdma_bind_addr with a port, then rdma_resolve_addr without a source. */
	struct sockaddr_in bound = { .sin_family = AF_INET, .sin_port = htons(bind_port) };
	if (rdma_bind_addr(d, (struct sockaddr *)&bound))
		DIE("rdma_bind_addr to port %u: %s", bind_port, strerror(errno));
	if (resolve(ec, d, NULL, &dst))
		DIE("rdma_resolve_addr of the bound id: %s", strerror(errno));
	uint16_t d_port = rdma_get_src_port(d);
	seen = connect_seen(ec, d);
	EXPECT(d_port == htons(bind_port) && seen == htons(bind_port),
	       "rdma_bind_addr(3) to port %u, then rdma_resolve_addr: the id keeps the port and its connection "
	       "comes from it (rdma_get_src_port %u; the peer sees %u)",
	       bind_port, ntohs(d_port), ntohs(seen));

	contract_hang_up(ec, a, 10000);
	contract_hang_up(ec, b, 10000);
	contract_hang_up(ec, d, 10000);
	rdma_destroy_id(a);
	rdma_destroy_id(b);
	rdma_destroy_id(c);
	rdma_destroy_id(d);
	rdma_destroy_event_channel(ec);
	return contract_end();
}

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, server, client);
}
