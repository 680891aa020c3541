/*
 * Contract: ibv_modify_qp of a QP whose connection rdma_destroy_id is closing answers as
 * for a QP in the error state, a RESET it accepts leaves the QP reset, and neither a RESET
 * nor a move to ERR there drops what the connection still had to deliver.
 *   rdma_cm (the kernel's): rdma_destroy_id of a connected id -> iw_cm's destroy_cm_id ->
 *     iwcm_modify_qp_err: the QP is in ERROR when rdma_destroy_id returns, and siw
 *     releases its socket, whose close goes on without the QP: what the socket holds (a
 *     Send whose completion the application saw) still reaches the peer, then the FIN.
 *     From ERROR, ibv_modify_qp(3) may move it to RESET or ERR only (the QP state machine,
 *     the kernel's ib_modify_qp_is_ok): INIT and SQD are EINVAL; RESET succeeds and the QP
 *     is then a new one (siw: ERROR -> IDLE), whose receives posted after RESET and INIT
 *     stay posted; ERR succeeds and changes nothing.
 * Before the fix the drop-in, whose engine closes the connection gracefully after
 * rdma_destroy_id, took INIT, SQD and RESET (0 each) in that window without touching the
 * engine; the close then completed into ERR, so the QP the application had reset and
 * moved to INIT read ERR again and a receive posted after the RESET was flushed. And a
 * move to ERR there reset the stream at once (RST): the peer's receive of the last
 * message, 1 MiB still in the TCP send buffer, was flushed.
 *   destroy_id_reset -s ADDR PORT   server: accepts two connections in turn; on each,
 *                                   receives the client's last message (1 MiB) whole and
 *                                   wants DISCONNECTED within 2 s of it
 *   destroy_id_reset -c ADDR PORT   client: on each connection, with a QP of its own
 *                                   (ibv_create_qp), posts a receive, sends the last
 *                                   message, calls rdma_destroy_id and at once
 *                                   ibv_modify_qp: on the first INIT, SQD, then RESET and
 *                                   INIT, posts a receive and checks the QP; on the
 *                                   second ERR, then RESET
 */
#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

static const char *contract_name = "destroy_id_reset";
#include "contract.h"

#define WITHIN_MS 2000

/* The last message: large enough that most of it is still in TCP's send buffer when its
 * Send completes. */
#define LAST (1 << 20)
static char rbuf[LAST], sbuf[LAST];

static void post_recv(struct ibv_qp *qp, struct ibv_mr *mr, uint64_t wr_id, uint32_t len)
{
	struct ibv_sge sge = { .addr = (uintptr_t)rbuf, .length = len, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;
	if (ibv_post_recv(qp, &wr, &bad))
		DIE("ibv_post_recv: %s", strerror(errno));
}

static int to_state(struct ibv_qp *qp, enum ibv_qp_state s)
{
	struct ibv_qp_attr at = { .qp_state = s, .port_num = 1, .qp_access_flags = IBV_ACCESS_LOCAL_WRITE };
	int mask = IBV_QP_STATE;
	if (s == IBV_QPS_INIT)
		mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
	return ibv_modify_qp(qp, &at, mask);
}

/* One connection of the client: k = 0 resets the QP right after rdma_destroy_id, k = 1
 * moves it to ERR first. */
static void client_conn(struct rdma_event_channel *ec, const char *a, int port, int k)
{
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
	struct ibv_pd *pd = id->pd;
	struct ibv_cq *scq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0);
	if (!scq || !rcq)
		DIE("ibv_create_cq: %s", strerror(errno));
	struct ibv_qp *qp = contract_rc_qp(pd, scq, rcq, NULL, 1, 1);
	id->qp = qp;
	struct rdma_conn_param cp = contract_conn_param(1, 1, NULL, 0);
	if (rdma_connect(id, &cp))
		DIE("rdma_connect: %s", strerror(errno));
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_ESTABLISHED, 10000));

	struct ibv_mr *rmr = ibv_reg_mr(pd, rbuf, 64, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *smr = ibv_reg_mr(pd, sbuf, sizeof sbuf, IBV_ACCESS_LOCAL_WRITE);
	if (!rmr || !smr)
		DIE("ibv_reg_mr: %s", strerror(errno));
	post_recv(qp, rmr, 7, 64);
	memset(sbuf, 'a' + k, sizeof sbuf);
	struct ibv_sge sge = { .addr = (uintptr_t)sbuf, .length = sizeof sbuf, .lkey = smr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	if (ibv_post_send(qp, &wr, &bad))
		DIE("ibv_post_send: %s", strerror(errno));
	contract_expect_wc(scq, IBV_WC_SEND, 5000, "the last message");

	if (rdma_destroy_id(id))
		DIE("rdma_destroy_id: %s", strerror(errno));
	/* At once, while the close rdma_destroy_id started is under way. */
	int r;
	if (k == 0) {
		r = to_state(qp, IBV_QPS_INIT);
		EXPECT(r == EINVAL, "ibv_modify_qp to INIT right after rdma_destroy_id (the QP in ERR): EINVAL, "
		       "as from ERROR (got %d: %s)", r, strerror(r));
		r = to_state(qp, IBV_QPS_SQD);
		EXPECT(r == EINVAL, "ibv_modify_qp to SQD right after rdma_destroy_id (the QP in ERR): EINVAL, "
		       "as from ERROR (got %d: %s)", r, strerror(r));
	} else {
		r = to_state(qp, IBV_QPS_ERR);
		EXPECT(r == 0, "ibv_modify_qp to ERR right after rdma_destroy_id: 0 (got %d: %s)", r, strerror(r));
	}
	r = to_state(qp, IBV_QPS_RESET);
	EXPECT(r == 0, "ibv_modify_qp to RESET right after rdma_destroy_id%s: 0 (got %d: %s)",
	       k ? " and ERR" : "", r, strerror(r));
	/* The receive posted before: flushed by now (the close's end or the reset). */
	struct ibv_wc wc;
	int got = contract_next_wc(rcq, &wc, WITHIN_MS);
	EXPECT(got && wc.wr_id == 7 && wc.status == IBV_WC_WR_FLUSH_ERR,
	       "the receive posted before rdma_destroy_id is flushed (got %s, wr_id %d)",
	       got ? ibv_wc_status_str(wc.status) : "no completion", got ? (int)wc.wr_id : -1);
	if (k == 0) {
		r = to_state(qp, IBV_QPS_INIT);
		EXPECT(r == 0, "ibv_modify_qp RESET -> INIT of the reset QP: 0 (got %d: %s)", r, strerror(r));
		post_recv(qp, rmr, 9, 64);
		/* Long enough for the close of the old connection to finish (one round trip here). */
		got = contract_next_wc(rcq, &wc, 500);
		EXPECT(!got, "a receive posted after the RESET and INIT stays posted (got %s, wr_id %d)",
		       got ? ibv_wc_status_str(wc.status) : "no completion", got ? (int)wc.wr_id : -1);
		struct ibv_qp_attr at;
		struct ibv_qp_init_attr ia;
		int q = ibv_query_qp(qp, &at, IBV_QP_STATE, &ia);
		EXPECT(q == 0 && at.qp_state == IBV_QPS_INIT,
		       "ibv_query_qp of the QP reset and moved to INIT: IBV_QPS_INIT once the old connection's "
		       "close is over (got %d, state %d)", q, q == 0 ? (int)at.qp_state : -1);
	}
	if (ibv_destroy_qp(qp))
		DIE("ibv_destroy_qp: %s", strerror(errno));
	ibv_dereg_mr(rmr);
	ibv_dereg_mr(smr);
	ibv_destroy_cq(scq);
	ibv_destroy_cq(rcq);
}

static int client(const char *a, const char *p)
{
	int port = contract_port(p);
	struct rdma_event_channel *ec = contract_channel();
	for (int k = 0; k < 2; k++)
		client_conn(ec, a, port, k);
	rdma_destroy_event_channel(ec);
	return contract_end();
}

static int server(const char *a, const char *p)
{
	int port = contract_port(p);
	struct rdma_event_channel *ec = contract_channel();
	contract_listener(ec, a, port);
	for (int k = 0; k < 2; k++) {
		struct rdma_cm_event *ev = contract_expect_event(ec, RDMA_CM_EVENT_CONNECT_REQUEST, 60000);
		struct rdma_cm_id *id = ev->id;
		rdma_ack_cm_event(ev);
		contract_qp_on(id);
		struct ibv_mr *mr = ibv_reg_mr(id->pd, rbuf, sizeof rbuf, IBV_ACCESS_LOCAL_WRITE);
		if (!mr)
			DIE("ibv_reg_mr: %s", strerror(errno));
		memset(rbuf, 0, sizeof rbuf);
		post_recv(id->qp, mr, 2, sizeof rbuf);
		struct rdma_conn_param cp = contract_conn_param(1, 1, NULL, 0);
		if (rdma_accept(id, &cp))
			DIE("rdma_accept: %s", strerror(errno));
		rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_ESTABLISHED, 10000));
		struct ibv_wc wc;
		int got = contract_next_wc(id->recv_cq, &wc, 10000);
		int whole = got && wc.status == IBV_WC_SUCCESS && wc.byte_len == LAST && rbuf[0] == 'a' + k &&
			    rbuf[LAST - 1] == 'a' + k;
		EXPECT(whole,
		       "connection %d: the client's last message (1 MiB, its Send completed before its "
		       "rdma_destroy_id and %s) arrives whole (got %s, %u octets)",
		       k + 1, k ? "move to ERR" : "RESET", got ? ibv_wc_status_str(wc.status) : "no completion",
		       got ? wc.byte_len : 0);
		double t0 = contract_now_ms();
		ev = contract_next_event(ec, WITHIN_MS + 1000);
		double dt = contract_now_ms() - t0;
		int kind = ev ? (int)ev->event : -1;
		EXPECT(ev && kind == RDMA_CM_EVENT_DISCONNECTED && ev->id == id && dt <= WITHIN_MS,
		       "connection %d: the client's rdma_destroy_id gives DISCONNECTED at once (got %s %.0f ms "
		       "after its last message, want within %d ms)", k + 1, ev ? rdma_event_str(kind) : "nothing",
		       dt, WITHIN_MS);
		if (ev)
			rdma_ack_cm_event(ev);
		rdma_destroy_qp(id);
		ibv_dereg_mr(mr);
		rdma_destroy_id(id);
	}
	return contract_end();
}

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, server, client);
}
