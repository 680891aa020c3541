/*
 * Contract: ibv_get_async_event(3): IBV_EVENT_QP_LAST_WQE_REACHED, "Last WQE Reached on a QP
 * associated with an SRQ", element.qp naming the QP. The InfiniBand specification (10.3.1,
 * quoted by the kernel's __ib_drain_srq) has a consumer move such a QP to the error state
 * and wait for this event before it destroys or resets the QP; providers raise it once
 * each time the QP enters the error state (rdmavt's rvt_error_qp: not for a QP already in
 * ERR or still in RESET; cxgb4's __flush_qp, an iWARP RNIC's, whatever moved it there). A
 * QP without an SRQ never gets it, and destroying the QP "will wait for all affiliated
 * events for the object to be acknowledged". Before the fix the event never came.
 *   last_wqe_reached -s ADDR PORT   server: accepts the client's QP (no SRQ here), then
 *                                   disconnects: its own QP must report nothing
 *   last_wqe_reached -c ADDR PORT   client: QPs of its own moved to ERR, then a connection
 *                                   whose QP receives through an SRQ, ended by the server
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

static const char *contract_name = "last_wqe_reached";
#include "contract.h"

static int to_state(struct ibv_qp *qp, enum ibv_qp_state s)
{
	struct ibv_qp_attr at = { .qp_state = s };
	return ibv_modify_qp(qp, &at, IBV_QP_STATE);
}

/* The next asynchronous event within ms milliseconds: its type, or -1 if none came. */
static int next_event(struct ibv_context *ctx, struct ibv_async_event *ae, int ms)
{
	return contract_async_event(ctx, ae, ms) == 0 ? (int)ae->event_type : -1;
}

static const char *type_str(int t)
{
	return t < 0 ? "no event" : ibv_event_type_str(t);
}

struct late_ack {
	struct ibv_async_event ev;
	volatile int acked;
};

static void *ack_later(void *p)
{
	struct late_ack *l = p;
	usleep(300 * 1000);
	l->acked = 1;
	ibv_ack_async_event(&l->ev);
	return NULL;
}

static int server(const char *a, const char *p)
{
	struct rdma_cm_id *l, *id = contract_request(a, p, NULL, NULL, NULL, NULL, &l);
	if (rdma_accept(id, NULL))
		DIE("rdma_accept: %s", strerror(errno));
	sleep(1);
	/* A synchronous id: waits for the DISCONNECTED (the QP is then in ERR, flushed). */
	if (rdma_disconnect(id))
		DIE("rdma_disconnect: %s", strerror(errno));
	struct ibv_async_event ae;
	int t = next_event(id->verbs, &ae, 1500);
	EXPECT(t < 0, "a QP without an SRQ whose connection ended reports no Last WQE Reached (got %s)", type_str(t));
	if (t >= 0)
		ibv_ack_async_event(&ae);
	rdma_destroy_ep(id);
	rdma_destroy_ep(l);
	return contract_end();
}

static int client(const char *a, const char *p)
{
	struct ibv_context *ctx = contract_open_device();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 8, .max_sge = 1 } };
	struct ibv_srq *srq = pd ? ibv_create_srq(pd, &sa) : NULL;
	if (!pd || !cq || !srq)
		DIE("pd, cq, srq: %s", strerror(errno));
	struct ibv_async_event ae;
	int t;

	/* 1. A QP on the SRQ moved to ERR by the application (from INIT). */
	struct ibv_qp *qa = contract_rc_qp(pd, cq, cq, srq, 1, 1);
	if (to_state(qa, IBV_QPS_INIT) || to_state(qa, IBV_QPS_ERR))
		DIE("ibv_modify_qp INIT, ERR");
	t = next_event(ctx, &ae, 2000);
	EXPECT(t == IBV_EVENT_QP_LAST_WQE_REACHED && ae.element.qp == qa,
	       "ibv_get_async_event(3): a QP on an SRQ moved to ERR reports IBV_EVENT_QP_LAST_WQE_REACHED naming it "
	       "(got %s, element.qp %p, the QP %p)",
	       type_str(t), t >= 0 ? (void *)ae.element.qp : NULL, (void *)qa);
	if (t >= 0)
		ibv_ack_async_event(&ae);

	/* 2. Once per transition: ERR again is no new entry into the error state. */
	if (to_state(qa, IBV_QPS_ERR))
		DIE("ibv_modify_qp ERR again");
	t = next_event(ctx, &ae, 300);
	EXPECT(t < 0, "a QP already in ERR moved to ERR again reports nothing more (got %s)", type_str(t));
	if (t >= 0)
		ibv_ack_async_event(&ae);

	/* 3. A QP without an SRQ never reports it. */
	struct ibv_qp *qb = contract_rc_qp(pd, cq, cq, NULL, 1, 1);
	if (to_state(qb, IBV_QPS_INIT) || to_state(qb, IBV_QPS_ERR))
		DIE("ibv_modify_qp INIT, ERR (no SRQ)");
	t = next_event(ctx, &ae, 300);
	EXPECT(t < 0, "a QP without an SRQ moved to ERR reports no Last WQE Reached (got %s)", type_str(t));
	if (t >= 0)
		ibv_ack_async_event(&ae);

	/* 4. Reset and moved to ERR again: a new entry, a new event; the QP's destroy waits
	 * until it is acknowledged. */
	if (to_state(qa, IBV_QPS_RESET) || to_state(qa, IBV_QPS_INIT) || to_state(qa, IBV_QPS_ERR))
		DIE("ibv_modify_qp RESET, INIT, ERR");
	static struct late_ack la;
	t = next_event(ctx, &la.ev, 2000);
	EXPECT(t == IBV_EVENT_QP_LAST_WQE_REACHED && la.ev.element.qp == qa,
	       "a QP reset and moved to ERR again reports Last WQE Reached again (got %s)", type_str(t));
	if (t >= 0) {
		pthread_t th;
		if (pthread_create(&th, NULL, ack_later, &la))
			DIE("pthread_create");
		double t0 = contract_now_ms();
		int d = ibv_destroy_qp(qa);
		double waited = contract_now_ms() - t0;
		EXPECT(d == 0 && la.acked && waited >= 250,
		       "ibv_get_async_event(3): ibv_destroy_qp waits until the QP's event is acknowledged (returned %d "
		       "after %.0f ms, acknowledged %d)",
		       d, waited, la.acked);
		pthread_join(th, NULL);
	} else if (ibv_destroy_qp(qa)) {
		DIE("ibv_destroy_qp");
	}

	/* 5. From RESET straight to ERR (as rdmavt's rvt_error_qp: nothing consumed yet). */
	struct ibv_qp *qc = contract_rc_qp(pd, cq, cq, srq, 1, 1);
	if (to_state(qc, IBV_QPS_ERR))
		DIE("ibv_modify_qp RESET -> ERR");
	t = next_event(ctx, &ae, 300);
	EXPECT(t < 0, "a QP on an SRQ moved from RESET to ERR reports nothing (got %s)", type_str(t));
	if (t >= 0)
		ibv_ack_async_event(&ae);

	/* 6. An event not yet read goes with its QP: the destroy returns at once, and the
	 * queue no longer holds it. */
	if (to_state(qc, IBV_QPS_RESET) || to_state(qc, IBV_QPS_INIT) || to_state(qc, IBV_QPS_ERR))
		DIE("ibv_modify_qp RESET, INIT, ERR (qc)");
	usleep(100 * 1000);
	EXPECT(contract_readable(ctx->async_fd, 0) == 1, "the event of a QP moved to ERR waits on async_fd");
	int d = ibv_destroy_qp(qc);
	t = next_event(ctx, &ae, 300);
	EXPECT(d == 0 && t < 0, "ibv_destroy_qp takes the QP's unread event back (returned %d; then %s)", d,
	       type_str(t));
	if (t >= 0)
		ibv_ack_async_event(&ae);

	/* 7. A connection whose QP receives through the SRQ, ended by the peer: the QP enters
	 * ERR on its own and reports the event, qp->state already ERR. */
	struct rdma_cm_id *id = contract_ep_on(a, p, 0, pd, NULL, NULL, srq);
	if (id->qp->srq != srq)
		DIE("the endpoint's QP does not receive through the SRQ given");
	if (rdma_connect(id, NULL))
		DIE("rdma_connect: %s", strerror(errno));
	t = next_event(ctx, &ae, 15000);
	EXPECT(t == IBV_EVENT_QP_LAST_WQE_REACHED && ae.element.qp == id->qp,
	       "a connected QP on an SRQ whose peer disconnected reports Last WQE Reached naming it (got %s)",
	       type_str(t));
	if (t >= 0) {
		EXPECT(id->qp->state == IBV_QPS_ERR, "the event comes with the QP in ERR (qp->state %d)", id->qp->state);
		ibv_ack_async_event(&ae);
	}
	t = next_event(ctx, &ae, 1000);
	EXPECT(t < 0, "the connection's end (the peer's close, then ours) raises it once (then %s)", type_str(t));
	if (t >= 0)
		ibv_ack_async_event(&ae);

	rdma_destroy_ep(id);
	ibv_destroy_qp(qb);
	ibv_destroy_srq(srq);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	return contract_end();
}

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, server, client);
}
