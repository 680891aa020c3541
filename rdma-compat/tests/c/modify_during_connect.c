/*
 * Contract: an application's own ibv_modify_qp(3) of a QP whose connection is being set up
 * is what qp->state reads after ESTABLISHED. With rdma-core over a kernel iWARP provider,
 * qp->state is written only by the application's ibv_modify_qp and ibv_query_qp
 * (libibverbs verbs.c) and by librdmacm's own moves inside the application's calls
 * (rdma_create_qp's INIT, rdma_accept's RTR and RTS); the kernel's iw_cm moves the QP to
 * RTS without touching the field, and librdmacm's rdma_get_cm_event does nothing to the
 * QP for an iWARP ESTABLISHED (librdmacm/cma.c). So a move made after rdma_connect stays.
 * Before the fix the RTS the library stores for ESTABLISHED overwrote it (a QP the
 * application had moved to RESET read RTS). Without a move of the application's,
 * ESTABLISHED still leaves RTS.
 *   modify_during_connect -s ADDR PORT   server: accepts two requests on PORT, each
 *                                               300 ms after it came
 *   modify_during_connect -c ADDR PORT   client: the checks (PORT+1: the control
 *                                               connection)
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

static const char *contract_name = "modify_during_connect";
#include "contract.h"

#define WAIT_MS 20000

static int server(const char *a, const char *p)
{
	int port = contract_port(p);
	struct rdma_event_channel *ec = contract_channel();
	struct rdma_cm_id *l = contract_listener(ec, a, port);
	struct rdma_event_channel *ctl = contract_channel();
	struct rdma_cm_id *cid = contract_control_request(ctl, a, port + 1);
	contract_control_accept(ctl, cid, WAIT_MS);

	for (int i = 0; i < 2; i++) {
		struct rdma_cm_event *ev = contract_expect_event(ec, RDMA_CM_EVENT_CONNECT_REQUEST, 60000);
		struct rdma_cm_id *child = ev->id;
		rdma_ack_cm_event(ev);
		contract_qp_on(child);
		/* The client's move comes while its connection waits for this accept. */
		usleep(300000);
		struct rdma_conn_param cp = contract_conn_param(1, 1, NULL, 0);
		if (rdma_accept(child, &cp))
			DIE("rdma_accept: %s", strerror(errno));
		rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_ESTABLISHED, WAIT_MS));
		rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_DISCONNECTED, 60000));
		rdma_destroy_qp(child);
		rdma_destroy_id(child);
	}

	rdma_ack_cm_event(contract_expect_event(ctl, RDMA_CM_EVENT_DISCONNECTED, 60000));
	rdma_destroy_qp(cid);
	rdma_destroy_id(cid);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(ctl);
	rdma_destroy_event_channel(ec);
	return contract_end();
}

/* One connection to the server; `move`, if not -1, the state the QP is moved to right
 * after rdma_connect. The QP's state field once ESTABLISHED was taken. */
static int connect_once(struct rdma_event_channel *ec, const char *a, int port, int move)
{
	struct rdma_cm_id *id = contract_active(ec, a, port, WAIT_MS);
	struct rdma_conn_param cp = contract_conn_param(1, 1, NULL, 0);
	if (rdma_connect(id, &cp))
		DIE("rdma_connect: %s", strerror(errno));
	if (move != -1) {
		struct ibv_qp_attr at = { .qp_state = move };
		int r = ibv_modify_qp(id->qp, &at, IBV_QP_STATE);
		if (r)
			DIE("ibv_modify_qp to %d while connecting: %s", move, strerror(r));
	}
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_ESTABLISHED, WAIT_MS));
	int state = id->qp->state;
	contract_hang_up(ec, id, WAIT_MS);
	rdma_destroy_id(id);
	return state;
}

static int client(const char *a, const char *p)
{
	int port = contract_port(p);
	struct rdma_event_channel *ctl = contract_channel();
	struct rdma_cm_id *cid = contract_control_connection(ctl, a, port + 1, WAIT_MS);
	struct rdma_event_channel *ec = contract_channel();

	int s = connect_once(ec, a, port, IBV_QPS_RESET);
	EXPECT(s == IBV_QPS_RESET,
	       "ibv_modify_qp(3) to RESET after rdma_connect: qp->state still reads RESET after ESTABLISHED "
	       "(read %d)",
	       s);
	s = connect_once(ec, a, port, -1);
	EXPECT(s == IBV_QPS_RTS, "without a move of the application's, ESTABLISHED leaves qp->state at RTS (read %d)",
	       s);

	contract_hang_up(ctl, cid, WAIT_MS);
	rdma_destroy_id(cid);
	rdma_destroy_event_channel(ec);
	rdma_destroy_event_channel(ctl);
	return contract_end();
}

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, server, client);
}
