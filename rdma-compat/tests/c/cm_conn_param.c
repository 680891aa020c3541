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
 * - The events report them as the kernel's rdma_cm reports siw's (cma.c's
 *   iw_conn_req_handler and cma_iw_handler over siw_cm.c's upcalls): a CONNECT_REQUEST from
 *   the listener's side (responder_resources the peer's initiator depth, initiator_depth
 *   its responder resources), an ESTABLISHED on either side with our ORD in
 *   responder_resources and our IRD in initiator_depth (siw and irdma pass their own
 *   ird/ord, which cma_iw_handler puts into initiator_depth/responder_resources). Before
 *   the fix ESTABLISHED had them the other way round.
 * - A NULL conn_param is the device's most each way in rdma_connect and the request's
 *   values (as far as the device goes) in rdma_accept, as librdmacm fills one in (its
 *   RDMA_MAX_RESP_RES / RDMA_MAX_INIT_DEPTH handling). Before the fix both used the
 *   configured 8.
 * - responder_resources 0 and initiator_depth 0 mean none, as in rdma_cm (the MPA Rev 2
 *   IRD and ORD 0): the request and both ESTABLISHED events say 0/0, and a Read posted on
 *   the connection fails with EINVAL (siw's answer to a Read with no ORD). Before the fix
 *   0 kept the configured value (8 each way) and the Read went out.
 * - A CONNECT_REQUEST is the listener's event (librdmacm counts it there): the new id can
 *   be rejected and destroyed before the request is acknowledged. Before the fix that
 *   rdma_destroy_id waited forever for the acknowledgement.
 *   cm_conn_param -s ADDR PORT   server: accepts one connection on PORT (checks its
 *                                parameters), rejects the next and destroys its id, then
 *                                accepts one with 0/0 and one with no parameters
 *   cm_conn_param -c ADDR PORT   client: the checks of the active side
 */
#include <errno.h>
#include <stdint.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

static const char *contract_name = "cm_conn_param";
#include "contract.h"

/* How long each side waits for an event (ms). */
#define WAIT_MS 30000

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

/* The most both ways on a device: max_qp_rd_atom Reads served, max_qp_init_rd_atom issued;
 * between two such devices each side's IRD and ORD end at the smaller. */
#define MOST(da) ((unsigned)((da).max_qp_rd_atom < (da).max_qp_init_rd_atom ? (da).max_qp_rd_atom : \
							     (da).max_qp_init_rd_atom))

/* The "less than or equal to" clause of fn (rdma_connect or rdma_accept, called as call on
 * id): responder_resources above max_qp_rd_atom, then initiator_depth above
 * max_qp_init_rd_atom, each refused with EINVAL; `instead` says what a call that returns 0
 * did. */
static void refuses_above_limits(const char *fn, int (*call)(struct rdma_cm_id *, struct rdma_conn_param *),
				 struct rdma_cm_id *id, struct ibv_device_attr da, const char *instead)
{
	struct rdma_conn_param cp = contract_conn_param(da.max_qp_rd_atom + 1, 1, NULL, 0);
	int r = call(id, &cp), e = errno;
	EXPECT(r == -1 && e == EINVAL,
	       "%s(3): responder_resources above max_qp_rd_atom (%d) is refused with EINVAL (got %d: %s)", fn,
	       da.max_qp_rd_atom, r, r ? strerror(e) : instead);
	cp = contract_conn_param(1, da.max_qp_init_rd_atom + 1, NULL, 0);
	r = call(id, &cp), e = errno;
	EXPECT(r == -1 && e == EINVAL,
	       "%s(3): initiator_depth above max_qp_init_rd_atom (%d) is refused with EINVAL (got %d: %s)", fn,
	       da.max_qp_init_rd_atom, r, r ? strerror(e) : instead);
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

static int server(const char *addr, const char *p)
{
	struct rdma_event_channel *ec = contract_channel();
	struct rdma_cm_id *l = contract_listener(ec, addr, contract_port(p));
	struct ibv_device_attr da = device_attr(l);

	/* 1. The client asks for 5 responder resources and an initiator depth of 3. */
	struct rdma_cm_event *ev = contract_expect_event(ec, RDMA_CM_EVENT_CONNECT_REQUEST, WAIT_MS);
	struct rdma_cm_id *id = ev->id;
	EXPECT(ev->param.conn.responder_resources == 3 && ev->param.conn.initiator_depth == 5,
	       "rdma_get_cm_event(3): a connect request reports the peer's initiator depth as our responder resources "
	       "and its responder resources as our initiator depth (want 3/5, got %u/%u)",
	       ev->param.conn.responder_resources, ev->param.conn.initiator_depth);
	rdma_ack_cm_event(ev);
	contract_qp_on(id);
	refuses_above_limits("rdma_accept", rdma_accept, id, da, "accepted");
	struct rdma_conn_param cp = contract_conn_param(1, 2, NULL, 0);
	if (rdma_accept(id, &cp))
		DIE("rdma_accept with 1/2 after the refused ones: %s", strerror(errno));
	ev = contract_expect_event(ec, RDMA_CM_EVENT_ESTABLISHED, WAIT_MS);
	EXPECT(ev->param.conn.responder_resources == 2 && ev->param.conn.initiator_depth == 1,
	       "rdma_accept(3) with 1/2: ESTABLISHED reports our ORD (2) as responder_resources and our IRD (1) as "
	       "initiator_depth, as rdma_cm reports siw's (want 2/1, got %u/%u)",
	       ev->param.conn.responder_resources, ev->param.conn.initiator_depth);
	rdma_ack_cm_event(ev);
	/* ibv_query_qp(3) of the established QP: the Reads in flight each way and the path
	 * MTU, as siw's siw_query_qp reports them (they read 0). */
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	struct ibv_port_attr pa;
	if (ibv_query_qp(id->qp, &qa, IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_PATH_MTU, &qi))
		DIE("ibv_query_qp: %s", strerror(errno));
	if (ibv_query_port(id->verbs, 1, &pa))
		DIE("ibv_query_port: %s", strerror(errno));
	EXPECT(qa.max_rd_atomic == 2 && qa.max_dest_rd_atomic == 1,
	       "ibv_query_qp(3) after rdma_accept with 1/2: max_rd_atomic is our ORD (2), max_dest_rd_atomic our "
	       "IRD (1) (got %u/%u)",
	       qa.max_rd_atomic, qa.max_dest_rd_atomic);
	EXPECT(qa.path_mtu == pa.active_mtu && qa.path_mtu >= IBV_MTU_256,
	       "ibv_query_qp(3): path_mtu is the port's active_mtu (%d, got %d)", pa.active_mtu, qa.path_mtu);

	/* 2. The next request: rejected, and its id destroyed before the event is acknowledged. */
	ev = contract_expect_event(ec, RDMA_CM_EVENT_CONNECT_REQUEST, WAIT_MS);
	struct rdma_cm_id *child = ev->id;
	if (rdma_reject(child, NULL, 0))
		DIE("rdma_reject: %s", strerror(errno));
	signal(SIGALRM, hung);
	alarm(10);
	int r = rdma_destroy_id(child);
	alarm(0);
	EXPECT(r == 0, "rdma_destroy_id(3): a rejected request's new id is destroyed before its CONNECT_REQUEST is "
		       "acknowledged (the event is the listener's)");
	rdma_ack_cm_event(ev);

	/* The client disconnects the first connection when it is done. */
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_DISCONNECTED, WAIT_MS));
	rdma_destroy_qp(id);
	rdma_destroy_id(id);

	/* 3. No responder resources and no initiator depth either way. */
	ev = contract_expect_event(ec, RDMA_CM_EVENT_CONNECT_REQUEST, WAIT_MS);
	id = ev->id;
	EXPECT(ev->param.conn.responder_resources == 0 && ev->param.conn.initiator_depth == 0,
	       "rdma_connect(3) with responder_resources 0 and initiator_depth 0: the request offers none (want 0/0, "
	       "got %u/%u)",
	       ev->param.conn.responder_resources, ev->param.conn.initiator_depth);
	rdma_ack_cm_event(ev);
	contract_qp_on(id);
	cp = contract_conn_param(0, 0, NULL, 0);
	if (rdma_accept(id, &cp))
		DIE("rdma_accept with 0/0: %s", strerror(errno));
	ev = contract_expect_event(ec, RDMA_CM_EVENT_ESTABLISHED, WAIT_MS);
	EXPECT(ev->param.conn.responder_resources == 0 && ev->param.conn.initiator_depth == 0,
	       "rdma_accept(3) with responder_resources 0 and initiator_depth 0: the connection serves no Read and "
	       "issues none (want 0/0, got %u/%u)",
	       ev->param.conn.responder_resources, ev->param.conn.initiator_depth);
	rdma_ack_cm_event(ev);
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_DISCONNECTED, WAIT_MS));
	rdma_destroy_qp(id);
	rdma_destroy_id(id);

	/* 4. No parameters on either side: the client offers the device's most, and the
	 * accept answers with what the request offered. */
	unsigned most = MOST(da);
	ev = contract_expect_event(ec, RDMA_CM_EVENT_CONNECT_REQUEST, WAIT_MS);
	id = ev->id;
	EXPECT(ev->param.conn.responder_resources == most && ev->param.conn.initiator_depth == most,
	       "rdma_connect(3) with no conn_param: the request offers the device's most each way (want %u/%u, got "
	       "%u/%u)",
	       most, most, ev->param.conn.responder_resources, ev->param.conn.initiator_depth);
	rdma_ack_cm_event(ev);
	contract_qp_on(id);
	if (rdma_accept(id, NULL))
		DIE("rdma_accept with no conn_param: %s", strerror(errno));
	ev = contract_expect_event(ec, RDMA_CM_EVENT_ESTABLISHED, WAIT_MS);
	EXPECT(ev->param.conn.responder_resources == most && ev->param.conn.initiator_depth == most,
	       "rdma_accept(3) with no conn_param: the connection takes what the request offered (want %u/%u, got "
	       "%u/%u)",
	       most, most, ev->param.conn.responder_resources, ev->param.conn.initiator_depth);
	rdma_ack_cm_event(ev);
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_DISCONNECTED, WAIT_MS));
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(ec);
	return contract_end();
}

static int client(const char *addr, const char *p)
{
	int port = contract_port(p);
	struct rdma_event_channel *ec = contract_channel();

	/* 0. Values above the device's limits, on an id aimed at PORT+1 (nobody listens: a
	 * connection started by mistake is refused there and destroyed with the id). */
	{
		struct rdma_cm_id *id = contract_active(ec, addr, port + 1, WAIT_MS);
		refuses_above_limits("rdma_connect", rdma_connect, id, device_attr(id), "connecting");
		rdma_destroy_qp(id);
		rdma_destroy_id(id);
	}

	/* 1. IRD 5, ORD 3 offered; the server accepts with IRD 1, ORD 2. */
	struct rdma_cm_id *id = contract_active(ec, addr, port, WAIT_MS);
	struct rdma_conn_param cp = contract_conn_param(5, 3, NULL, 0);
	if (rdma_connect(id, &cp))
		DIE("rdma_connect: %s", strerror(errno));
	struct rdma_cm_event *ev = contract_expect_event(ec, RDMA_CM_EVENT_ESTABLISHED, WAIT_MS);
	EXPECT(ev->param.conn.responder_resources == 1 && ev->param.conn.initiator_depth == 2,
	       "rdma_accept(3) at the peer with 1/2: our ORD is capped at its responder resources (1) and our IRD "
	       "set to its initiator depth (2); ESTABLISHED reports the ORD as responder_resources and the IRD as "
	       "initiator_depth, as rdma_cm reports siw's (want 1/2, got %u/%u)",
	       ev->param.conn.responder_resources, ev->param.conn.initiator_depth);
	rdma_ack_cm_event(ev);

	/* 2. Rejected by a server that destroys the new id before acknowledging the request. */
	{
		struct rdma_cm_id *id2 = contract_active(ec, addr, port, WAIT_MS);
		if (rdma_connect(id2, NULL))
			DIE("rdma_connect: %s", strerror(errno));
		ev = contract_next_event(ec, WAIT_MS);
		EXPECT(ev && ev->event == RDMA_CM_EVENT_REJECTED && ev->id == id2,
		       "rdma_reject(3): the request is refused (got %s)", ev ? rdma_event_str(ev->event) : "nothing in 30 s");
		if (ev)
			rdma_ack_cm_event(ev);
		rdma_destroy_qp(id2);
		rdma_destroy_id(id2);
	}

	contract_hang_up(ec, id, WAIT_MS);
	rdma_destroy_id(id);

	/* 3. No responder resources and no initiator depth: no Read may be issued. */
	id = contract_active(ec, addr, port, WAIT_MS);
	cp = contract_conn_param(0, 0, NULL, 0);
	if (rdma_connect(id, &cp))
		DIE("rdma_connect with 0/0: %s", strerror(errno));
	ev = contract_expect_event(ec, RDMA_CM_EVENT_ESTABLISHED, WAIT_MS);
	EXPECT(ev->param.conn.responder_resources == 0 && ev->param.conn.initiator_depth == 0,
	       "rdma_connect(3) with responder_resources 0 and initiator_depth 0: the connection serves no Read and "
	       "issues none (want 0/0, got %u/%u)",
	       ev->param.conn.responder_resources, ev->param.conn.initiator_depth);
	rdma_ack_cm_event(ev);
	struct ibv_mr *mr = contract_read_refused(id, "a connection with initiator_depth 0");
	contract_hang_up(ec, id, WAIT_MS);
	ibv_dereg_mr(mr);
	rdma_destroy_id(id);

	/* 4. No conn_param: the device's most each way (both sides have the same device). */
	id = contract_active(ec, addr, port, WAIT_MS);
	unsigned most = MOST(device_attr(id));
	if (rdma_connect(id, NULL))
		DIE("rdma_connect with no conn_param: %s", strerror(errno));
	ev = contract_expect_event(ec, RDMA_CM_EVENT_ESTABLISHED, WAIT_MS);
	EXPECT(ev->param.conn.responder_resources == most && ev->param.conn.initiator_depth == most,
	       "rdma_connect(3) with no conn_param, accepted with none: the device's most each way (want %u/%u, got "
	       "%u/%u)",
	       most, most, ev->param.conn.responder_resources, ev->param.conn.initiator_depth);
	rdma_ack_cm_event(ev);
	contract_hang_up(ec, id, WAIT_MS);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ec);
	return contract_end();
}

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, server, client);
}
