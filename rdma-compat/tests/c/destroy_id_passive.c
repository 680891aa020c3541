/*
 * Contract: rdma_destroy_id of a connection request's id ends what the request started,
 * by whether rdma_accept started the connection, not by who made the QP.
 *   rdma_cm (the kernel's): rdma_destroy_id -> ucma_destroy_id -> rdma_destroy_id (cma.c)
 *     -> iw_destroy_cm_id; iw_cm's destroy_cm_id (iwcm.c):
 *     - IW_CM_STATE_ESTABLISHED (rdma_accept succeeded, whatever made the QP: rdma_create_qp
 *       or the application's ibv_create_qp): an abrupt close (iwcm_modify_qp_err: the QP to
 *       ERROR, its posted receives flushed, the socket released); the peer's
 *       RDMA_CM_EVENT_DISCONNECTED comes at once;
 *     - IW_CM_STATE_CONN_RECV (the request never accepted: no rdma_accept, or one librdmacm
 *       refused before it reached the kernel, EINVAL for a responder_resources above the
 *       device's max_qp_rd_atom in ucma_valid_param): "must tell the provider to reject"
 *       (siw: an MPA Reply with the Reject flag); the peer's RDMA_CM_EVENT_REJECTED comes
 *       at once.
 * Before the fix the drop-in decided by the id's own QP (one of rdma_create_qp's): a
 * request whose rdma_accept failed on such a QP was never refused (the peer waited for its
 * connect timeout), while one accepted on an ibv_create_qp QP was "refused" after its
 * acceptance (a stale handle the engine ignored).
 *   destroy_id_passive -s ADDR PORT   server: connection 1 accepted on its own QP
 *                                     (ibv_create_qp), its id destroyed after the client's
 *                                     message; connection 2's rdma_accept fails (EINVAL)
 *                                     on an rdma_create_qp QP, then rdma_destroy_qp and
 *                                     rdma_destroy_id; connection 3 (the client's "done")
 *                                     is refused with rdma_reject
 *   destroy_id_passive -c ADDR PORT   client: wants DISCONNECTED for 1 and the refusal of
 *                                     2, each within 2 s
 */
#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

static const char *contract_name = "destroy_id_passive";
#include "contract.h"

/* Within how many milliseconds the peer must learn. */
#define WITHIN_MS 2000

static char rbuf[64], sbuf[64];

static void post_recv(struct ibv_qp *qp, struct ibv_mr *mr, uint64_t wr_id)
{
	struct ibv_sge sge = { .addr = (uintptr_t)rbuf, .length = sizeof rbuf, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 }, *bad;
	if (ibv_post_recv(qp, &wr, &bad))
		DIE("ibv_post_recv: %s", strerror(errno));
}

/* Client: the next event on ec within WITHIN_MS (+1 s to see a late one) of t0 must be
 * `want` for id, within WITHIN_MS. */
static void expect_soon(struct rdma_event_channel *ec, struct rdma_cm_id *id, int want, double t0,
			const char *what)
{
	int left = WITHIN_MS + 1000 - (int)(contract_now_ms() - t0);
	struct rdma_cm_event *ev = contract_next_event(ec, left > 0 ? left : 0);
	double dt = contract_now_ms() - t0;
	int got = ev ? (int)ev->event : -1;
	EXPECT(ev && got == want && ev->id == id && dt <= WITHIN_MS, "%s (got %s %.0f ms after, want within %d ms)",
	       what, ev ? rdma_event_str(got) : "nothing", dt, WITHIN_MS);
	if (ev)
		rdma_ack_cm_event(ev);
}

static int client(const char *a, const char *p)
{
	int port = contract_port(p);
	struct rdma_event_channel *ec = contract_channel();
	struct rdma_conn_param cp = contract_conn_param(1, 1, NULL, 0);

	/* 1: established, the last message sent; the server then destroys its id. */
	struct rdma_cm_id *id = contract_active(ec, a, port, 5000);
	if (rdma_connect(id, &cp))
		DIE("rdma_connect: %s", strerror(errno));
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_ESTABLISHED, 10000));
	struct ibv_mr *smr = ibv_reg_mr(id->pd, sbuf, sizeof sbuf, IBV_ACCESS_LOCAL_WRITE);
	if (!smr)
		DIE("ibv_reg_mr: %s", strerror(errno));
	snprintf(sbuf, sizeof sbuf, "last message");
	struct ibv_sge sge = { .addr = (uintptr_t)sbuf, .length = sizeof sbuf, .lkey = smr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	if (ibv_post_send(id->qp, &wr, &bad))
		DIE("ibv_post_send: %s", strerror(errno));
	contract_expect_wc(id->send_cq, IBV_WC_SEND, 5000, "the last message");
	expect_soon(ec, id, RDMA_CM_EVENT_DISCONNECTED, contract_now_ms(),
		    "connection 1: the server's rdma_destroy_id of its accepted id, whose QP it made itself "
		    "(ibv_create_qp), gives DISCONNECTED at once, as iw_cm's destroy_cm_id closes an "
		    "established connection");
	rdma_destroy_qp(id);
	ibv_dereg_mr(smr);
	rdma_destroy_id(id);

	/* 2: the server's rdma_accept fails, then it destroys the id. */
	id = contract_active(ec, a, port, 5000);
	double t0 = contract_now_ms();
	if (rdma_connect(id, &cp))
		DIE("rdma_connect: %s", strerror(errno));
	expect_soon(ec, id, RDMA_CM_EVENT_REJECTED, t0,
		    "connection 2: the server's rdma_destroy_id of a request whose rdma_accept failed "
		    "(EINVAL) refuses it at once, as iw_cm's destroy_cm_id rejects a request in CONN_RECV");
	rdma_destroy_qp(id);
	rdma_destroy_id(id);

	/* 3: the server's go to end (it refuses this one). */
	id = contract_active(ec, a, port, 5000);
	if (rdma_connect(id, &cp))
		DIE("rdma_connect: %s", strerror(errno));
	struct rdma_cm_event *ev = contract_next_event(ec, 5000);
	if (ev)
		rdma_ack_cm_event(ev);
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ec);
	return contract_end();
}

static int server(const char *a, const char *p)
{
	int port = contract_port(p);
	struct rdma_event_channel *ec = contract_channel();
	contract_listener(ec, a, port);

	/* 1: accepted on the application's own QP. */
	struct rdma_cm_event *ev = contract_expect_event(ec, RDMA_CM_EVENT_CONNECT_REQUEST, 60000);
	struct rdma_cm_id *id = ev->id;
	rdma_ack_cm_event(ev);
	struct ibv_cq *scq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0);
	struct ibv_cq *rcq = ibv_create_cq(id->verbs, 8, NULL, NULL, 0);
	if (!scq || !rcq)
		DIE("ibv_create_cq: %s", strerror(errno));
	struct ibv_qp *qp = contract_rc_qp(id->pd, scq, rcq, NULL, 1, 1);
	id->qp = qp;
	struct ibv_mr *mr = ibv_reg_mr(id->pd, rbuf, sizeof rbuf, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		DIE("ibv_reg_mr: %s", strerror(errno));
	post_recv(qp, mr, 2);
	struct rdma_conn_param cp = contract_conn_param(1, 1, NULL, 0);
	if (rdma_accept(id, &cp))
		DIE("rdma_accept: %s", strerror(errno));
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_ESTABLISHED, 10000));
	contract_expect_wc(rcq, IBV_WC_RECV, 60000, "the client's last message");
	post_recv(qp, mr, 3);
	int r = rdma_destroy_id(id);
	EXPECT(r == 0, "rdma_destroy_id of the accepted id whose QP the application made returns 0 (got %d)", r);
	struct ibv_wc wc;
	int got = contract_next_wc(rcq, &wc, WITHIN_MS);
	EXPECT(got && wc.wr_id == 3 && wc.status == IBV_WC_WR_FLUSH_ERR,
	       "its QP's receive posted before rdma_destroy_id is flushed, as iw_cm's destroy_cm_id moves an "
	       "established connection's QP to ERROR (got %s)", got ? ibv_wc_status_str(wc.status) : "no completion");
	if (ibv_destroy_qp(qp))
		DIE("ibv_destroy_qp: %s", strerror(errno));
	ibv_destroy_cq(scq);
	ibv_destroy_cq(rcq);

	/* 2: rdma_accept refused (EINVAL, nothing sent), then the id destroyed. */
	ev = contract_expect_event(ec, RDMA_CM_EVENT_CONNECT_REQUEST, 60000);
	id = ev->id;
	rdma_ack_cm_event(ev);
	contract_qp_on(id);
	struct ibv_device_attr da;
	if (ibv_query_device(id->verbs, &da))
		DIE("ibv_query_device: %s", strerror(errno));
	if (da.max_qp_rd_atom >= 254)
		DIE("max_qp_rd_atom %d leaves no responder_resources to refuse", da.max_qp_rd_atom);
	struct rdma_conn_param bad = contract_conn_param(da.max_qp_rd_atom + 1, 1, NULL, 0);
	errno = 0;
	r = rdma_accept(id, &bad);
	EXPECT(r == -1 && errno == EINVAL,
	       "rdma_accept with responder_resources above max_qp_rd_atom (%d) fails with EINVAL (got %d, %s)",
	       da.max_qp_rd_atom + 1, r, strerror(errno));
	rdma_destroy_qp(id);
	rdma_destroy_id(id);

	/* 3: the client's go. */
	ev = contract_expect_event(ec, RDMA_CM_EVENT_CONNECT_REQUEST, 10000);
	id = ev->id;
	rdma_ack_cm_event(ev);
	rdma_reject(id, NULL, 0);
	rdma_destroy_id(id);
	ibv_dereg_mr(mr);
	return contract_end();
}

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, server, client);
}
