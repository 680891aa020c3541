/*
 * Contract: rdma_init_qp_attr(3) answers for the state the caller asks for
 * (qp_attr->qp_state) and the state the id is in, as the kernel's rdma_cm answers
 * librdmacm on iWARP (rdma_init_qp_attr, iw_cm_init_qp_attr):
 *   - an id that never connected (no iWARP CM id), any state: no access flags, mask
 *     IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PORT, port_num the id's;
 *   - a connection request's new id or a connected id: INIT and RTR give
 *     IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ (mask state, access flags, port),
 *     RTS nothing but the port; RESET, SQD, ERR and states past ERR: EINVAL;
 *   - a listening id: EINVAL.
 * Before the fix every call answered RTS with remote access, whatever was asked.
 * rdma_establish(3) on an id with a QP is EINVAL, as in librdmacm (it answered 0).
 * And rdma_reject_ece(3) on iWARP: a reject with private data (an MPA reject has no
 * reason field), which the client sees as REJECTED with that data; before the fix the
 * program did not load (no rdma_reject_ece in Warpcore's librdmacm.so.1).
 *   init_qp_attr_states -s ADDR PORT   server: rejects the first request, accepts the second
 *   init_qp_attr_states -c ADDR PORT   client: the checks (and listens on PORT+1)
 */
#include <errno.h>
#include <string.h>
#include <rdma/rdma_cma.h>

static const char *contract_name = "init_qp_attr_states";
#include "contract.h"

#define WAIT_MS 30000
#define SAP (IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_PORT)
#define REMOTE (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

/* rdma_init_qp_attr(id) for `state` answers mask `mask`, access flags `access` and the
 * id's port (want_ok), or fails with EINVAL (!want_ok). */
static void answers(struct rdma_cm_id *id, const char *what, int state, int want_ok, int mask, unsigned access)
{
	struct ibv_qp_attr at;
	int m = -1;
	memset(&at, 0xa5, sizeof at);
	at.qp_state = state;
	errno = 0;
	int r = rdma_init_qp_attr(id, &at, &m), e = errno;
	if (want_ok)
		EXPECT(r == 0 && m == mask && (!(mask & IBV_QP_ACCESS_FLAGS) || at.qp_access_flags == access) &&
			       at.port_num == id->port_num && (int)at.qp_state == state,
		       "rdma_init_qp_attr, %s, state %d: mask %#x access %#x port %u (got %d, mask %#x access %#x port %u "
		       "state %d)",
		       what, state, mask, access, id->port_num, r, m, at.qp_access_flags, at.port_num, at.qp_state);
	else
		EXPECT(r == -1 && e == EINVAL, "rdma_init_qp_attr, %s, state %d: EINVAL (got %d: %s)", what, state, r,
		       r ? strerror(e) : "0");
}

static int server(const char *a, const char *p)
{
	struct rdma_event_channel *ec = contract_channel();
	struct rdma_cm_id *l = contract_listener(ec, a, contract_port(p));

	struct rdma_cm_event *ev = contract_expect_event(ec, RDMA_CM_EVENT_CONNECT_REQUEST, WAIT_MS);
	struct rdma_cm_id *child = ev->id;
	if (rdma_reject_ece(child, "ece", 4))
		DIE("rdma_reject_ece: %s", strerror(errno));
	rdma_ack_cm_event(ev);
	rdma_destroy_id(child);

	ev = contract_expect_event(ec, RDMA_CM_EVENT_CONNECT_REQUEST, WAIT_MS);
	child = ev->id;
	rdma_ack_cm_event(ev);
	answers(child, "a connection request's new id", IBV_QPS_INIT, 1, SAP, REMOTE);
	contract_qp_on(child);
	if (rdma_accept(child, NULL))
		DIE("rdma_accept: %s", strerror(errno));
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_ESTABLISHED, WAIT_MS));
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_DISCONNECTED, WAIT_MS));
	rdma_destroy_qp(child);
	rdma_destroy_id(child);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(ec);
	return contract_end();
}

static int client(const char *a, const char *p)
{
	int port = contract_port(p);
	struct rdma_event_channel *ec = contract_channel();

	struct rdma_cm_id *idle = contract_active(ec, a, port, WAIT_MS);
	answers(idle, "an id that never connected", IBV_QPS_RTS, 1, SAP, 0);
	answers(idle, "an id that never connected", IBV_QPS_INIT, 1, SAP, 0);
	answers(idle, "an id that never connected", IBV_QPS_ERR + 1, 0, 0, 0);

	struct rdma_cm_id *l = contract_listener(ec, "0.0.0.0", port + 1);
	answers(l, "a listening id", IBV_QPS_INIT, 0, 0, 0);
	rdma_destroy_id(l);

	/* Refused by rdma_reject_ece with private data. */
	if (rdma_connect(idle, NULL))
		DIE("rdma_connect: %s", strerror(errno));
	struct rdma_cm_event *ev = contract_next_event(ec, WAIT_MS);
	EXPECT(ev && ev->event == RDMA_CM_EVENT_REJECTED && ev->status == -ECONNREFUSED &&
		       ev->param.conn.private_data_len >= 4 && ev->param.conn.private_data &&
		       !memcmp(ev->param.conn.private_data, "ece", 4),
	       "rdma_reject_ece(3) at the peer: REJECTED, status -ECONNREFUSED, with its private data (got %s, status %d)",
	       ev ? rdma_event_str(ev->event) : "nothing in 30 s", ev ? ev->status : 0);
	if (ev)
		rdma_ack_cm_event(ev);
	rdma_destroy_qp(idle);
	rdma_destroy_id(idle);

	struct rdma_cm_id *id = contract_active(ec, a, port, WAIT_MS);
	if (rdma_connect(id, NULL))
		DIE("rdma_connect: %s", strerror(errno));
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_ESTABLISHED, WAIT_MS));
	answers(id, "a connected id", IBV_QPS_INIT, 1, SAP, REMOTE);
	answers(id, "a connected id", IBV_QPS_RTR, 1, SAP, REMOTE);
	answers(id, "a connected id", IBV_QPS_RTS, 1, IBV_QP_PORT, 0);
	answers(id, "a connected id", IBV_QPS_RESET, 0, 0, 0);
	answers(id, "a connected id", IBV_QPS_SQD, 0, 0, 0);
	answers(id, "a connected id", IBV_QPS_ERR, 0, 0, 0);
	errno = 0;
	int r = rdma_establish(id), e = errno;
	EXPECT(r == -1 && e == EINVAL, "rdma_establish on an id with a QP: EINVAL, as librdmacm (got %d: %s)", r,
	       r ? strerror(e) : "0");
	if (rdma_disconnect(id))
		DIE("rdma_disconnect: %s", strerror(errno));
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_DISCONNECTED, WAIT_MS));
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ec);
	return contract_end();
}

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, server, client);
}
