/*
 * Contract: rdma_destroy_id(3) "destroys the specified rdma_cm_id and cancels any
 * outstanding asynchronous operation": no event for a destroyed id is handed out
 * afterwards (librdmacm: the kernel purges the id's events; events already handed out are
 * waited for, rdma_ack_cm_event(3)). Before the fix the events stayed queued with
 * event->id pointing at freed memory.
 *   destroy_id_cancels -s ADDR PORT   server: a listener on PORT+1 that it destroys with a
 *                                     connection request queued; accepts one connection
 *                                     on PORT
 *   destroy_id_cancels -c ADDR PORT   client: the checks below
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

static const char *contract_name = "destroy_id_cancels";
#include "contract.h"

static void nonblocking(struct rdma_event_channel *ec)
{
	fcntl(ec->fd, F_SETFL, fcntl(ec->fd, F_GETFL) | O_NONBLOCK);
}

/* The next event within 10 s, or NULL. */
static struct rdma_cm_event *next(struct rdma_event_channel *ec)
{
	struct pollfd p = { .fd = ec->fd, .events = POLLIN };
	struct rdma_cm_event *ev;
	if (poll(&p, 1, 10000) != 1 || rdma_get_cm_event(ec, &ev))
		return NULL;
	return ev;
}

static void expect_event(struct rdma_event_channel *ec, int want)
{
	struct rdma_cm_event *ev = next(ec);
	if (!ev)
		DIE("no %s: %s", rdma_event_str(want), strerror(errno));
	if ((int)ev->event != want)
		DIE("%s (status %d) instead of %s", rdma_event_str(ev->event), ev->status, rdma_event_str(want));
	rdma_ack_cm_event(ev);
}

static struct rdma_cm_id *active(struct rdma_event_channel *ec, const char *addr, int port)
{
	struct rdma_cm_id *id;
	if (rdma_create_id(ec, &id, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id: %s", strerror(errno));
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(port) };
	inet_pton(AF_INET, addr, &dst.sin_addr);
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000))
		DIE("rdma_resolve_addr: %s", strerror(errno));
	expect_event(ec, RDMA_CM_EVENT_ADDR_RESOLVED);
	if (rdma_resolve_route(id, 2000))
		DIE("rdma_resolve_route: %s", strerror(errno));
	expect_event(ec, RDMA_CM_EVENT_ROUTE_RESOLVED);
	struct ibv_qp_init_attr at;
	memset(&at, 0, sizeof at);
	at.qp_type = IBV_QPT_RC;
	at.cap.max_send_wr = at.cap.max_recv_wr = 4;
	at.cap.max_send_sge = at.cap.max_recv_sge = 1;
	if (rdma_create_qp(id, NULL, &at))
		DIE("rdma_create_qp: %s", strerror(errno));
	return id;
}

static int server(const char *addr, int port)
{
	/* The listener to destroy, on PORT+1, made first: once the client is connected on
	 * PORT, this one listens. */
	struct rdma_event_channel *ec = rdma_create_event_channel();
	struct rdma_cm_id *l2;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port + 1) };
	inet_pton(AF_INET, addr, &sa.sin_addr);
	if (!ec || rdma_create_id(ec, &l2, NULL, RDMA_PS_TCP) || rdma_bind_addr(l2, (struct sockaddr *)&sa) ||
	    rdma_listen(l2, 4))
		DIE("listener on %d: %s", port + 1, strerror(errno));
	struct rdma_addrinfo h, *res;
	struct ibv_qp_init_attr at;
	struct rdma_cm_id *l, *id;
	char p[16];
	snprintf(p, sizeof p, "%d", port);
	memset(&h, 0, sizeof h);
	h.ai_port_space = RDMA_PS_TCP;
	h.ai_flags = RAI_PASSIVE;
	memset(&at, 0, sizeof at);
	at.cap.max_send_wr = at.cap.max_recv_wr = 4;
	at.cap.max_send_sge = at.cap.max_recv_sge = 1;
	if (rdma_getaddrinfo(addr, p, &h, &res) || rdma_create_ep(&l, res, NULL, &at) || rdma_listen(l, 1) ||
	    rdma_get_request(l, &id) || rdma_accept(id, NULL))
		DIE("server on %d: %s", port, strerror(errno));
	/* The client's request on PORT+1 arrives; destroy the listener without taking it. */
	struct pollfd pf = { .fd = ec->fd, .events = POLLIN };
	if (poll(&pf, 1, 10000) != 1)
		DIE("no connection request on %d", port + 1);
	if (rdma_destroy_id(l2))
		DIE("rdma_destroy_id of the listener: %s", strerror(errno));
	nonblocking(ec);
	struct rdma_cm_event *ev = NULL;
	int r = rdma_get_cm_event(ec, &ev), e = errno;
	int readable = poll(&pf, 1, 0);
	EXPECT(r == -1 && e == EAGAIN && readable == 0,
	       "rdma_destroy_id(3): a destroyed listener's queued CONNECT_REQUEST is not delivered (got %d: %s; fd readable %d)",
	       r, r == 0 ? rdma_event_str(ev->event) : strerror(e), readable);
	sleep(1);
	return contract_end();
}

int main(int argc, char **argv)
{
	if (argc != 4)
		DIE("usage: destroy_id_cancels -s|-c ADDR PORT");
	int port = atoi(argv[3]);
	if (!strcmp(argv[1], "-s"))
		return server(argv[2], port);
	const char *addr = argv[2];
	struct rdma_event_channel *ec = rdma_create_event_channel();
	if (!ec)
		DIE("rdma_create_event_channel: %s", strerror(errno));

	/* 1. An address resolution's event, queued, then the id destroyed. */
	{
		struct rdma_cm_id *id, *id2;
		if (rdma_create_id(ec, &id, (void *)0x1111, RDMA_PS_TCP))
			DIE("rdma_create_id: %s", strerror(errno));
		struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(port) };
		inet_pton(AF_INET, addr, &dst.sin_addr);
		if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000))
			DIE("rdma_resolve_addr: %s", strerror(errno));
		if (rdma_destroy_id(id))
			DIE("rdma_destroy_id: %s", strerror(errno));
		/* A new id, likely in the freed block. */
		if (rdma_create_id(ec, &id2, (void *)0x2222, RDMA_PS_TCP))
			DIE("rdma_create_id: %s", strerror(errno));
		nonblocking(ec);
		struct rdma_cm_event *ev = NULL;
		int r = rdma_get_cm_event(ec, &ev), e = errno;
		EXPECT(r == -1 && e == EAGAIN,
		       "rdma_destroy_id(3): the ADDR_RESOLVED queued for a destroyed id is not delivered (got %d: %s; ev->id %p, destroyed %p)",
		       r, r == 0 ? rdma_event_str(ev->event) : strerror(e), r == 0 ? (void *)ev->id : NULL, (void *)id);
		if (r == 0)
			rdma_ack_cm_event(ev);
		rdma_destroy_id(id2);
		fcntl(ec->fd, F_SETFL, fcntl(ec->fd, F_GETFL) & ~O_NONBLOCK);
	}

	/* 2. The usual teardown: after ESTABLISHED, rdma_destroy_qp, rdma_dereg_mr,
	 * rdma_destroy_id without waiting for DISCONNECTED (queued meanwhile). */
	{
		struct rdma_cm_id *id = active(ec, addr, port);
		static char buf[64];
		struct ibv_mr *mr = rdma_reg_msgs(id, buf, sizeof buf);
		if (!mr || rdma_post_recv(id, NULL, buf, sizeof buf, mr))
			DIE("receive: %s", strerror(errno));
		if (rdma_connect(id, NULL))
			DIE("rdma_connect: %s", strerror(errno));
		expect_event(ec, RDMA_CM_EVENT_ESTABLISHED);
		void *freed = id;
		rdma_destroy_qp(id);
		rdma_dereg_mr(mr);
		rdma_destroy_id(id);
		nonblocking(ec);
		struct rdma_cm_event *ev = NULL;
		int r = rdma_get_cm_event(ec, &ev), e = errno;
		EXPECT(r == -1 && e == EAGAIN,
		       "rdma_destroy_id(3): after rdma_destroy_qp and rdma_destroy_id no event names the freed id (got %d: %s; ev->id %p, freed %p)",
		       r, r == 0 ? rdma_event_str(ev->event) : strerror(e), r == 0 ? (void *)ev->id : NULL, freed);
		if (r == 0)
			rdma_ack_cm_event(ev);
		fcntl(ec->fd, F_SETFL, fcntl(ec->fd, F_GETFL) & ~O_NONBLOCK);
	}

	/* 3. A request to a listener destroyed with the request queued: refused, not left
	 * waiting (the child id it made is destroyed with the listener). */
	{
		struct rdma_cm_id *id = active(ec, addr, port + 1);
		if (rdma_connect(id, NULL))
			DIE("rdma_connect: %s", strerror(errno));
		struct rdma_cm_event *ev = next(ec);
		EXPECT(ev && ev->event == RDMA_CM_EVENT_REJECTED,
		       "rdma_destroy_id(3): a listener destroyed with our request queued refuses it (got %s)",
		       ev ? rdma_event_str(ev->event) : "nothing in 10 s");
		if (ev)
			rdma_ack_cm_event(ev);
		rdma_destroy_qp(id);
		rdma_destroy_id(id);
	}
	return contract_end();
}
