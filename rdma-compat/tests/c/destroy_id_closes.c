/*
 * Contract: rdma_destroy_id of a connected id whose QP the application still holds closes
 * the connection.
 *   rdma_cm (the kernel's): rdma_destroy_id -> ucma_destroy_id -> rdma_destroy_id (cma.c)
 *     -> iw_destroy_cm_id; iw_cm's destroy_cm_id makes an abrupt close of an ESTABLISHED
 *     connection (iwcm_modify_qp_err: siw moves the QP to ERROR, flushing its queues, and
 *     releases its TCP socket: a FIN, no Terminate). The QP itself stays the application's
 *     (it destroys it after, or made it with ibv_create_qp): in the error state, its
 *     posted receives flushed. The peer's RDMA_CM_EVENT_DISCONNECTED comes at once.
 * Before the fix the drop-in left the connection up after rdma_destroy_id: the QP stayed
 * in RTS with its receive posted, and the peer learnt nothing until the QP was destroyed
 * or the process exited.
 *   destroy_id_closes -s ADDR PORT   server: accepts the connection, receives the client's
 *                                    last message, then wants DISCONNECTED within 2 s of it
 *   destroy_id_closes -c ADDR PORT   client: connects with a QP of its own (ibv_create_qp),
 *                                    posts a receive, sends the last message, calls
 *                                    rdma_destroy_id (no rdma_disconnect) and checks its
 *                                    QP; keeps running 3 s before it destroys the QP
 */
#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

static const char *contract_name = "destroy_id_closes";
#include "contract.h"

/* Within how many milliseconds of the client's last message its destroy must show. */
#define WITHIN_MS 2000

static char rbuf[64], sbuf[64];

static void post_recv(struct ibv_qp *qp, struct ibv_mr *mr, uint64_t wr_id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)rbuf, .length = sizeof rbuf, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;
	if (ibv_post_recv(qp, &wr, &bad))
		DIE("ibv_post_recv: %s", strerror(errno));
}

static int client(const char *a, const char *p)
{
	int port = contract_port(p);
	struct rdma_event_channel *ec = contract_channel();
	struct rdma_cm_id *id;
	struct sockaddr_in dst = contract_sockaddr(a, port);
	if (rdma_create_id(ec, &id, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id: %s", strerror(errno));
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000))
		DIE("rdma_resolve_addr: %s", strerror(errno));
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_ADDR_RESOLVED, 5000));
	if (rdma_resolve_route(id, 2000))
		DIE("rdma_resolve_route: %s", strerror(errno));
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_ROUTE_RESOLVED, 5000));
	/* The application's own QP and CQs (ibv_create_qp): rdma_cm only connects it. */
	struct ibv_cq *scq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0);
	if (!scq || !rcq)
		DIE("ibv_create_cq: %s", strerror(errno));
	struct ibv_qp *qp = contract_rc_qp(id->pd, scq, rcq, NULL, 1, 1);
	id->qp = qp;
	struct rdma_conn_param cp = contract_conn_param(1, 1, NULL, 0);
	if (rdma_connect(id, &cp))
		DIE("rdma_connect: %s", strerror(errno));
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_ESTABLISHED, 10000));

	struct ibv_mr *rmr = ibv_reg_mr(id->pd, rbuf, sizeof rbuf, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *smr = ibv_reg_mr(id->pd, sbuf, sizeof sbuf, IBV_ACCESS_LOCAL_WRITE);
	if (!rmr || !smr)
		DIE("ibv_reg_mr: %s", strerror(errno));
	post_recv(qp, rmr, 7);
	snprintf(sbuf, sizeof sbuf, "last message");
	struct ibv_sge sge = { .addr = (uintptr_t)sbuf, .length = sizeof sbuf, .lkey = smr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	if (ibv_post_send(qp, &wr, &bad))
		DIE("ibv_post_send: %s", strerror(errno));
	contract_expect_wc(scq, IBV_WC_SEND, 5000, "the last message");

	double t0 = contract_now_ms();
	int r = rdma_destroy_id(id);
	double dt = contract_now_ms() - t0;
	EXPECT(r == 0 && dt < 500,
	       "rdma_destroy_id of the connected id (its QP still the application's) returns 0 at once "
	       "(got %d after %.0f ms)", r, dt);

	/* iwcm_modify_qp_err: the QP's posted receive is flushed, the QP is in the error state. */
	struct ibv_wc wc;
	int got = contract_next_wc(rcq, &wc, WITHIN_MS);
	EXPECT(got && wc.wr_id == 7 && wc.status == IBV_WC_WR_FLUSH_ERR,
	       "the receive posted before rdma_destroy_id is flushed (IBV_WC_WR_FLUSH_ERR), as iw_cm's "
	       "destroy_cm_id moves an ESTABLISHED connection's QP to ERROR (got %s)",
	       got ? ibv_wc_status_str(wc.status) : "no completion");
	struct ibv_qp_attr at;
	struct ibv_qp_init_attr ia;
	int q = ibv_query_qp(qp, &at, IBV_QP_STATE, &ia);
	EXPECT(q == 0 && at.qp_state == IBV_QPS_ERR,
	       "ibv_query_qp of the QP after rdma_destroy_id: IBV_QPS_ERR (got %d, state %d)", q,
	       q == 0 ? (int)at.qp_state : -1);
	EXPECT(qp->state == IBV_QPS_ERR, "qp->state after rdma_destroy_id: IBV_QPS_ERR (got %d)", (int)qp->state);

	/* Still running (no exit's close to mask it) while the server waits for DISCONNECTED. */
	sleep(3);
	if (ibv_destroy_qp(qp))
		DIE("ibv_destroy_qp: %s", strerror(errno));
	ibv_dereg_mr(rmr);
	ibv_dereg_mr(smr);
	ibv_destroy_cq(scq);
	ibv_destroy_cq(rcq);
	rdma_destroy_event_channel(ec);
	return contract_end();
}

static int server(const char *a, const char *p)
{
	int port = contract_port(p);
	struct rdma_event_channel *ec = contract_channel();
	contract_listener(ec, a, port);
	struct rdma_cm_event *ev = contract_expect_event(ec, RDMA_CM_EVENT_CONNECT_REQUEST, 60000);
	struct rdma_cm_id *id = ev->id;
	rdma_ack_cm_event(ev);
	contract_qp_on(id);
	struct ibv_mr *mr = ibv_reg_mr(id->pd, rbuf, sizeof rbuf, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		DIE("ibv_reg_mr: %s", strerror(errno));
	post_recv(id->qp, mr, 2);
	struct rdma_conn_param cp = contract_conn_param(1, 1, NULL, 0);
	if (rdma_accept(id, &cp))
		DIE("rdma_accept: %s", strerror(errno));
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_ESTABLISHED, 10000));
	contract_expect_wc(id->recv_cq, IBV_WC_RECV, 60000, "the client's last message");
	double t0 = contract_now_ms();
	ev = contract_next_event(ec, WITHIN_MS + 1000);
	double dt = contract_now_ms() - t0;
	int kind = ev ? (int)ev->event : -1;
	EXPECT(ev && kind == RDMA_CM_EVENT_DISCONNECTED && ev->id == id && dt <= WITHIN_MS,
	       "the client's rdma_destroy_id of its connected id gives DISCONNECTED at once, as iw_cm's "
	       "destroy_cm_id closes the connection (got %s %.0f ms after its last message, want within %d ms)",
	       ev ? rdma_event_str(kind) : "nothing", dt, WITHIN_MS);
	if (ev)
		rdma_ack_cm_event(ev);
	rdma_destroy_qp(id);
	ibv_dereg_mr(mr);
	rdma_destroy_id(id);
	return contract_end();
}

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, server, client);
}
