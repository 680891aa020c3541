/*
 * Contract: ibv_modify_qp(3) to IBV_QPS_SQD on a connected (RTS) iWARP QP closes its
 * connection gracefully, as librdmacm's own rdma_disconnect does it on iWARP
 * (librdmacm/cma.c: ucma_shutdown -> ucma_modify_qp_sqd, ibv_modify_qp to SQD) and as
 * both kernel iWARP providers answer it: siw maps SQD to SIW_QP_STATE_CLOSING
 * (siw_verbs_modify_qp; siw_qp_nextstate_from_rts: CLOSING, the connection dropped),
 * cxgb4 to C4IW_QP_STATE_CLOSING (c4iw_modify_qp: RTS -> CLOSING, rdma_fini and a
 * non-abortive c4iw_ep_disconnect). So:
 *   - it returns 0 and qp->state reads SQD (rdma-core's ibv_modify_qp stores the state
 *     asked for once the provider succeeds), or ERR where the close has ended already
 *     (this library stores ERR for DISCONNECTED);
 *   - what the send queue holds goes out first: a Send posted just before completes with
 *     IBV_WC_SUCCESS and the peer receives it whole;
 *   - the connection ends: DISCONNECTED on both sides.
 *   On a QP that is not connected (RESET) SQD is not a move the QP state machine allows
 *   (the kernel's ib_modify_qp_is_ok, cxgb4's IDLE -> CLOSING): EINVAL, still RESET.
 *   Before: EOPNOTSUPP in every state, the connection left up.
 *   modify_qp_sqd -s ADDR PORT   server: accepts one connection, checks the Send
 *   modify_qp_sqd -c ADDR PORT   client: the checks
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

static const char *contract_name = "modify_qp_sqd";
#include "contract.h"

#define WAIT_MS 20000
#define MSG "sent before the move to SQD"

static char buf[64];

/* The next completion of cq within WAIT_MS: 1 with *wc filled, 0 if none came. */
static int next_wc(struct ibv_cq *cq, struct ibv_wc *wc)
{
	for (int i = 0; i < WAIT_MS; i++) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n == 1)
			return 1;
		if (n < 0)
			DIE("ibv_poll_cq: %d", n);
		usleep(1000);
	}
	return 0;
}

static int server(const char *a, const char *p)
{
	int port = contract_port(p);
	struct rdma_event_channel *ec = contract_channel();
	struct rdma_cm_id *l = contract_listener(ec, a, port);
	struct rdma_cm_event *ev = contract_expect_event(ec, RDMA_CM_EVENT_CONNECT_REQUEST, 60000);
	struct rdma_cm_id *id = ev->id;
	rdma_ack_cm_event(ev);
	contract_qp_on(id);
	struct ibv_mr *mr = ibv_reg_mr(id->pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		DIE("ibv_reg_mr: %s", strerror(errno));
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = sizeof buf, .lkey = mr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad = NULL;
	if (ibv_post_recv(id->qp, &rw, &bad))
		DIE("ibv_post_recv");
	struct rdma_conn_param cp = contract_conn_param(1, 1, NULL, 0);
	if (rdma_accept(id, &cp))
		DIE("rdma_accept: %s", strerror(errno));
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_ESTABLISHED, WAIT_MS));
	struct ibv_wc wc = { 0 };
	int got = next_wc(id->recv_cq, &wc);
	EXPECT(got && wc.status == IBV_WC_SUCCESS && wc.byte_len == sizeof MSG && !memcmp(buf, MSG, sizeof MSG),
	       "the Send the peer posted before its move to SQD arrives whole (completion %s, status %s, %u octets)",
	       got ? "yes" : "none", got ? ibv_wc_status_str(wc.status) : "-", got ? wc.byte_len : 0);
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_DISCONNECTED, WAIT_MS));
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	ibv_dereg_mr(mr);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(ec);
	return contract_end();
}

static int client(const char *a, const char *p)
{
	int port = contract_port(p);
	struct rdma_event_channel *ec = contract_channel();
	struct rdma_cm_id *id = contract_active(ec, a, port, WAIT_MS);

	/* A QP of the same PD and CQs that never connected. */
	struct ibv_qp_init_attr ia;
	memset(&ia, 0, sizeof ia);
	ia.send_cq = id->qp->send_cq;
	ia.recv_cq = id->qp->recv_cq;
	ia.qp_type = IBV_QPT_RC;
	ia.cap.max_send_wr = ia.cap.max_recv_wr = 1;
	ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
	struct ibv_qp *idle = ibv_create_qp(id->pd, &ia);
	if (!idle)
		DIE("ibv_create_qp: %s", strerror(errno));
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_SQD };
	int r = ibv_modify_qp(idle, &at, IBV_QP_STATE);
	EXPECT(r == EINVAL && idle->state == IBV_QPS_RESET,
	       "ibv_modify_qp(3) RESET -> SQD: EINVAL, the QP still in RESET (returned %d: %s, qp->state %d)", r,
	       r ? strerror(r) : "0", idle->state);
	ibv_destroy_qp(idle);

	struct rdma_conn_param cp = contract_conn_param(1, 1, NULL, 0);
	if (rdma_connect(id, &cp))
		DIE("rdma_connect: %s", strerror(errno));
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_ESTABLISHED, WAIT_MS));

	memcpy(buf, MSG, sizeof MSG);
	struct ibv_mr *mr = ibv_reg_mr(id->pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		DIE("ibv_reg_mr: %s", strerror(errno));
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = sizeof MSG, .lkey = mr->lkey };
	struct ibv_send_wr sw = { .wr_id = 2, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad = NULL;
	if (ibv_post_send(id->qp, &sw, &bad))
		DIE("ibv_post_send");
	r = ibv_modify_qp(id->qp, &at, IBV_QP_STATE);
	int field = id->qp->state;
	/* The close may already have ended (both FINs over memif take microseconds): then the
	 * library's DISCONNECTED has stored ERR, and that event is on the channel. */
	int ended = field == IBV_QPS_ERR && contract_readable(ec->fd, 1000) == 1;
	EXPECT(r == 0 && (field == IBV_QPS_SQD || ended),
	       "ibv_modify_qp(3) RTS -> SQD returns 0 and qp->state reads SQD, or ERR once the close ended "
	       "(returned %d: %s, qp->state %d%s)",
	       r, r ? strerror(r) : "0", field, ended ? ", DISCONNECTED already queued" : "");
	if (r && rdma_disconnect(id)) /* the peer waits for the end all the same */
		DIE("rdma_disconnect: %s", strerror(errno));
	struct ibv_wc wc = { 0 };
	int got = next_wc(id->send_cq, &wc);
	EXPECT(got && wc.wr_id == 2 && wc.status == IBV_WC_SUCCESS,
	       "the Send posted before the move to SQD completes successfully, not flushed (completion %s, status %s)",
	       got ? "yes" : "none", got ? ibv_wc_status_str(wc.status) : "-");
	{
		struct rdma_cm_event *ev = contract_next_event(ec, WAIT_MS);
		EXPECT(ev && ev->event == RDMA_CM_EVENT_DISCONNECTED,
		       "the connection ends: DISCONNECTED (got %s)", ev ? rdma_event_str(ev->event) : "nothing");
		if (ev)
			rdma_ack_cm_event(ev);
	}
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	ibv_dereg_mr(mr);
	rdma_destroy_event_channel(ec);
	return contract_end();
}

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, server, client);
}
