/*
 * Contract: rdma_connect(3)'s responder_resources and initiator_depth are the QP's IRD and
 * ORD at MPA Rev 1 too, where no frame carries them: the kernel's iWARP providers apply
 * conn_param's ird/ord to the QP whatever the revision (siw_connect keeps them in its
 * endpoint, siw_proc_mpareply sets irq_size/orq_size from them; only Rev 2 negotiation
 * changes them), and 0 is none there as well. Before the fix rdma_connect used them at
 * Rev 2 only, and a Rev 1 connection kept the configured 8 each way: its Reads went out.
 * The client runs at Rev 1 (it sets WARPCORE_MPA_REV=1 before its first call starts the
 * engine); the server at Rev 2 answers a Rev 1 Request with a Rev 1 Reply.
 *   cm_conn_param_rev1 -s ADDR PORT   server: checks the request, accepts with 3/2
 *   cm_conn_param_rev1 -c ADDR PORT   client: connects at Rev 1 with 4/0, checks
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <rdma/rdma_cma.h>

static const char *contract_name = "cm_conn_param_rev1";
#include "contract.h"

/* How long each side waits for an event (ms). */
#define WAIT_MS 30000

static int server(const char *addr, const char *p)
{
	struct rdma_event_channel *ec = contract_channel();
	struct rdma_cm_id *l = contract_listener(ec, addr, contract_port(p));
	struct rdma_cm_event *ev = contract_expect_event(ec, RDMA_CM_EVENT_CONNECT_REQUEST, WAIT_MS);
	struct rdma_cm_id *id = ev->id;
	/* Also the proof that the client connected at Rev 1: at Rev 2 the request says 0/4. */
	EXPECT(ev->param.conn.responder_resources == 0 && ev->param.conn.initiator_depth == 0,
	       "rdma_get_cm_event(3): a Rev 1 request carries no IRD/ORD and reports 0/0, as rdma_cm reports siw's "
	       "(got %u/%u)",
	       ev->param.conn.responder_resources, ev->param.conn.initiator_depth);
	rdma_ack_cm_event(ev);
	contract_qp_on(id);
	struct rdma_conn_param cp = contract_conn_param(3, 2, NULL, 0);
	if (rdma_accept(id, &cp))
		DIE("rdma_accept with 3/2: %s", strerror(errno));
	ev = contract_expect_event(ec, RDMA_CM_EVENT_ESTABLISHED, WAIT_MS);
	EXPECT(ev->param.conn.responder_resources == 2 && ev->param.conn.initiator_depth == 3,
	       "rdma_accept(3) with 3/2 at Rev 1: the QP has IRD 3 and ORD 2, reported as siw reports them (ORD as "
	       "responder_resources; want 2/3, got %u/%u)",
	       ev->param.conn.responder_resources, ev->param.conn.initiator_depth);
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
	if (setenv("WARPCORE_MPA_REV", "1", 1))
		DIE("setenv: %s", strerror(errno));
	struct rdma_event_channel *ec = contract_channel();
	struct rdma_cm_id *id = contract_active(ec, addr, contract_port(p), WAIT_MS);
	struct rdma_conn_param cp = contract_conn_param(4, 0, NULL, 0);
	if (rdma_connect(id, &cp))
		DIE("rdma_connect with 4/0: %s", strerror(errno));
	struct rdma_cm_event *ev = contract_expect_event(ec, RDMA_CM_EVENT_ESTABLISHED, WAIT_MS);
	EXPECT(ev->param.conn.responder_resources == 0 && ev->param.conn.initiator_depth == 4,
	       "rdma_connect(3) with 4/0 at Rev 1: the QP has IRD 4 and ORD 0, reported as siw reports them (ORD as "
	       "responder_resources; want 0/4, got %u/%u)",
	       ev->param.conn.responder_resources, ev->param.conn.initiator_depth);
	rdma_ack_cm_event(ev);
	struct ibv_mr *mr = contract_read_refused(id, "a Rev 1 connection made with initiator_depth 0");
	contract_hang_up(ec, id, WAIT_MS);
	ibv_dereg_mr(mr);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ec);
	return contract_end();
}

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, server, client);
}
