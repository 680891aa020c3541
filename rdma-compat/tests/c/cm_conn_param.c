/*
 * Contract: the connection parameters of rdma_connect(3) and rdma_accept(3), and the
 * acknowledgement of a connection request (rdma_ack_cm_event(3), rdma_destroy_id(3)).
 * - responder_resources and initiator_depth "must be less than or equal to" the device's
 *   max_qp_rd_atom and max_qp_init_rd_atom: librdmacm refuses more with EINVAL (255,
 *   RDMA_MAX_RESP_RES / RDMA_MAX_INIT_DEPTH, stands for the maximum). Before the fix they
 *   were quietly lowered.
 * - rdma_accept's responder_resources and initiator_depth are the IRD and ORD of the MPA
 *   Reply (RFC 6581 9.1): the initiator's ORD is capped at the first and its IRD set to
 *   the second. Before the fix rdma_accept ignored both.
 * - A CONNECT_REQUEST is the listener's event (librdmacm counts it there): the new id can
 *   be rejected and destroyed before the request is acknowledged. Before the fix that
 *   rdma_destroy_id waited forever for the acknowledgement.
 *   cm_conn_param -s ADDR PORT   server: accepts one connection on PORT (checks its
 *                                parameters), rejects the next and destroys its id
 *   cm_conn_param -c ADDR PORT   client: the checks of the active side
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>

static const char *contract_name = "cm_conn_param";
#include "contract.h"

/* The next event within 30 s, or NULL. */
static struct rdma_cm_event *next(struct rdma_event_channel *ec)
{
	struct pollfd p = { .fd = ec->fd, .events = POLLIN };
	struct rdma_cm_event *ev;
	if (poll(&p, 1, 30000) != 1 || rdma_get_cm_event(ec, &ev))
		return NULL;
	return ev;
}

/* The next event, which must be `want` (else the program cannot go on). */
static struct rdma_cm_event *expect_event(struct rdma_event_channel *ec, int want)
{
	struct rdma_cm_event *ev = next(ec);
	if (!ev)
		DIE("no %s: %s", rdma_event_str(want), strerror(errno));
	if ((int)ev->event != want)
		DIE("%s (status %d) instead of %s", rdma_event_str(ev->event), ev->status, rdma_event_str(want));
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

static struct rdma_cm_id *active(struct rdma_event_channel *ec, const char *addr, int port)
{
	struct rdma_cm_id *id;
	if (rdma_create_id(ec, &id, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id: %s", strerror(errno));
	struct sockaddr_in dst = { .sin_family = AF_INET, .sin_port = htons(port) };
	inet_pton(AF_INET, addr, &dst.sin_addr);
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000))
		DIE("rdma_resolve_addr: %s", strerror(errno));
	rdma_ack_cm_event(expect_event(ec, RDMA_CM_EVENT_ADDR_RESOLVED));
	if (rdma_resolve_route(id, 2000))
		DIE("rdma_resolve_route: %s", strerror(errno));
	rdma_ack_cm_event(expect_event(ec, RDMA_CM_EVENT_ROUTE_RESOLVED));
	qp_on(id);
	return id;
}

static struct ibv_device_attr device_attr(struct rdma_cm_id *id)
{
	struct ibv_device_attr da;
	if (!id->verbs || ibv_query_device(id->verbs, &da))
		DIE("ibv_query_device");
	if (da.max_qp_rd_atom < 5 || da.max_qp_rd_atom >= 254 || da.max_qp_init_rd_atom < 5 ||
	    da.max_qp_init_rd_atom >= 254)
		DIE("max_qp_rd_atom %d, max_qp_init_rd_atom %d: the checks need 5 to 253", da.max_qp_rd_atom,
		    da.max_qp_init_rd_atom);
	return da;
}

static void hung(int sig)
{
	(void)sig;
	static const char m[] = "FAIL: rdma_destroy_id(3) of a rejected request's new id, its CONNECT_REQUEST "
				"not yet acknowledged, did not return in 10 s\ncm_conn_param: a check failed\n";
	if (write(1, m, sizeof m - 1) < 0)
		_exit(1);
	_exit(1);
}

static int server(const char *addr, int port)
{
	struct rdma_event_channel *ec = rdma_create_event_channel();
	struct rdma_cm_id *l;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port) };
	inet_pton(AF_INET, addr, &sa.sin_addr);
	if (!ec || rdma_create_id(ec, &l, NULL, RDMA_PS_TCP) || rdma_bind_addr(l, (struct sockaddr *)&sa) ||
	    rdma_listen(l, 4))
		DIE("listener on %d: %s", port, strerror(errno));
	struct ibv_device_attr da = device_attr(l);

	/* 1. The client asks for 5 responder resources and an initiator depth of 3. */
	struct rdma_cm_event *ev = expect_event(ec, RDMA_CM_EVENT_CONNECT_REQUEST);
	struct rdma_cm_id *id = ev->id;
	EXPECT(ev->param.conn.responder_resources == 3 && ev->param.conn.initiator_depth == 5,
	       "rdma_get_cm_event(3): a connect request reports the peer's initiator depth as our responder resources "
	       "and its responder resources as our initiator depth (want 3/5, got %u/%u)",
	       ev->param.conn.responder_resources, ev->param.conn.initiator_depth);
	rdma_ack_cm_event(ev);
	qp_on(id);
	struct rdma_conn_param cp;
	memset(&cp, 0, sizeof cp);
	cp.responder_resources = da.max_qp_rd_atom + 1;
	cp.initiator_depth = 1;
	int r = rdma_accept(id, &cp), e = errno;
	EXPECT(r == -1 && e == EINVAL,
	       "rdma_accept(3): responder_resources above max_qp_rd_atom (%d) is refused with EINVAL (got %d: %s)",
	       da.max_qp_rd_atom, r, r ? strerror(e) : "accepted");
	cp.responder_resources = 1;
	cp.initiator_depth = da.max_qp_init_rd_atom + 1;
	r = rdma_accept(id, &cp), e = errno;
	EXPECT(r == -1 && e == EINVAL,
	       "rdma_accept(3): initiator_depth above max_qp_init_rd_atom (%d) is refused with EINVAL (got %d: %s)",
	       da.max_qp_init_rd_atom, r, r ? strerror(e) : "accepted");
	cp.responder_resources = 1;
	cp.initiator_depth = 2;
	if (rdma_accept(id, &cp))
		DIE("rdma_accept with 1/2 after the refused ones: %s", strerror(errno));
	ev = expect_event(ec, RDMA_CM_EVENT_ESTABLISHED);
	EXPECT(ev->param.conn.responder_resources == 1 && ev->param.conn.initiator_depth == 2,
	       "rdma_accept(3): the connection serves the responder resources and has the initiator depth accepted "
	       "with (want 1/2, got %u/%u)",
	       ev->param.conn.responder_resources, ev->param.conn.initiator_depth);
	rdma_ack_cm_event(ev);

	/* 2. The next request: rejected, and its id destroyed before the event is acknowledged. */
	ev = expect_event(ec, RDMA_CM_EVENT_CONNECT_REQUEST);
	struct rdma_cm_id *child = ev->id;
	if (rdma_reject(child, NULL, 0))
		DIE("rdma_reject: %s", strerror(errno));
	signal(SIGALRM, hung);
	alarm(10);
	r = rdma_destroy_id(child);
	alarm(0);
	EXPECT(r == 0, "rdma_destroy_id(3): a rejected request's new id is destroyed before its CONNECT_REQUEST is "
		       "acknowledged (the event is the listener's)");
	rdma_ack_cm_event(ev);

	/* The client disconnects the first connection when it is done. */
	rdma_ack_cm_event(expect_event(ec, RDMA_CM_EVENT_DISCONNECTED));
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(ec);
	return contract_end();
}

int main(int argc, char **argv)
{
	if (argc != 4)
		DIE("usage: cm_conn_param -s|-c ADDR PORT");
	int port = atoi(argv[3]);
	if (!strcmp(argv[1], "-s"))
		return server(argv[2], port);
	const char *addr = argv[2];
	struct rdma_event_channel *ec = rdma_create_event_channel();
	if (!ec)
		DIE("rdma_create_event_channel: %s", strerror(errno));

	/* 0. Values above the device's limits, on an id aimed at PORT+1 (nobody listens: a
	 * connection started by mistake is refused there and destroyed with the id). */
	{
		struct rdma_cm_id *id = active(ec, addr, port + 1);
		struct ibv_device_attr da = device_attr(id);
		struct rdma_conn_param cp;
		memset(&cp, 0, sizeof cp);
		cp.responder_resources = da.max_qp_rd_atom + 1;
		cp.initiator_depth = 1;
		int r = rdma_connect(id, &cp), e = errno;
		EXPECT(r == -1 && e == EINVAL,
		       "rdma_connect(3): responder_resources above max_qp_rd_atom (%d) is refused with EINVAL (got %d: %s)",
		       da.max_qp_rd_atom, r, r ? strerror(e) : "connecting");
		cp.responder_resources = 1;
		cp.initiator_depth = da.max_qp_init_rd_atom + 1;
		r = rdma_connect(id, &cp), e = errno;
		EXPECT(r == -1 && e == EINVAL,
		       "rdma_connect(3): initiator_depth above max_qp_init_rd_atom (%d) is refused with EINVAL (got %d: %s)",
		       da.max_qp_init_rd_atom, r, r ? strerror(e) : "connecting");
		rdma_destroy_qp(id);
		rdma_destroy_id(id);
	}

	/* 1. IRD 5, ORD 3 offered; the server accepts with IRD 1, ORD 2. */
	struct rdma_cm_id *id = active(ec, addr, port);
	struct rdma_conn_param cp;
	memset(&cp, 0, sizeof cp);
	cp.responder_resources = 5;
	cp.initiator_depth = 3;
	if (rdma_connect(id, &cp))
		DIE("rdma_connect: %s", strerror(errno));
	struct rdma_cm_event *ev = expect_event(ec, RDMA_CM_EVENT_ESTABLISHED);
	EXPECT(ev->param.conn.initiator_depth == 1 && ev->param.conn.responder_resources == 2,
	       "rdma_accept(3) at the peer: our initiator depth is capped at its responder resources and our "
	       "responder resources are its initiator depth (want 2/1, got %u/%u)",
	       ev->param.conn.responder_resources, ev->param.conn.initiator_depth);
	rdma_ack_cm_event(ev);

	/* 2. Rejected by a server that destroys the new id before acknowledging the request. */
	{
		struct rdma_cm_id *id2 = active(ec, addr, port);
		if (rdma_connect(id2, NULL))
			DIE("rdma_connect: %s", strerror(errno));
		ev = next(ec);
		EXPECT(ev && ev->event == RDMA_CM_EVENT_REJECTED && ev->id == id2,
		       "rdma_reject(3): the request is refused (got %s)", ev ? rdma_event_str(ev->event) : "nothing in 30 s");
		if (ev)
			rdma_ack_cm_event(ev);
		rdma_destroy_qp(id2);
		rdma_destroy_id(id2);
	}

	if (rdma_disconnect(id))
		DIE("rdma_disconnect: %s", strerror(errno));
	rdma_ack_cm_event(expect_event(ec, RDMA_CM_EVENT_DISCONNECTED));
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ec);
	return contract_end();
}
