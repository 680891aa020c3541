/*
 * Contract: ibv_get_async_event(3) with many asynchronous events unread. The context's
 * async_fd is readable while events wait ("the user can poll async_fd"), however many
 * there are: raising them never waits for the application to read one, every one is
 * delivered, and the descriptor is not readable once none waits (ibv_destroy_cq taking
 * back the last one, still queued, included). Before the fix each event wrote one octet
 * into a socket pair: a few hundred unread events filled it and the thread raising the
 * next (the CM dispatcher, which also delivers every rdma_cm event) blocked until the
 * application read one, holding the lock ibv_create_cq and ibv_destroy_cq take.
 *
 * N CQs of one entry each overrun (two receives flushed into each by moving their QP to
 * the error state): N IBV_EVENT_CQ_ERR, left unread. A second, idle QP on each CQ is moved
 * to the error state by the engine when it reports the CQ's overrun, after queuing the
 * event for the dispatcher: once all are in error, every event is on its way. Then an
 * rdma_cm id resolves 10.77.0.2 (nobody holds it) with a timeout_ms of 0: its ADDR_ERROR
 * reaches the id's channel only once the dispatcher has queued the N before it (the
 * engine's events come in order). (It connected to that absent host and aborted before,
 * which rdma_resolve_addr's ARP step, as the kernel's, no longer allows.) One process, no
 * peer.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

static const char *contract_name = "async_event_flood";
#include "contract.h"

/* Several times what a socket holds in one-octet writes (about 280 at Linux's default
 * buffer of 208 KiB). */
#define N 1000

static struct ibv_cq *cq[N];
static struct ibv_qp *flushed[N], *watcher[N];
static int seen[N];

static enum ibv_qp_state state_of(struct ibv_qp *q)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr i;
	if (ibv_query_qp(q, &a, IBV_QP_STATE, &i))
		DIE("ibv_query_qp: %s", strerror(errno));
	return a.qp_state;
}

static void to_error(struct ibv_qp *q)
{
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_ERR };
	if (ibv_modify_qp(q, &at, IBV_QP_STATE))
		DIE("ibv_modify_qp to ERR: %s", strerror(errno));
}

int main(void)
{
	struct ibv_context *ctx = contract_open_device();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	static char buf[64];
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!mr)
		DIE("pd, mr: %s", strerror(errno));
	struct rdma_event_channel *ec = contract_channel();
	struct rdma_cm_id *id;
	if (rdma_create_id(ec, &id, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id: %s", strerror(errno));

	/* Every object first: nothing below takes the locks a blocked dispatcher held. */
	for (int i = 0; i < N; i++) {
		cq[i] = ibv_create_cq(ctx, 1, (void *)(intptr_t)i, NULL, 0);
		if (!cq[i])
			DIE("ibv_create_cq %d: %s", i, strerror(errno));
		flushed[i] = contract_rc_qp(pd, cq[i], cq[i], NULL, 1, 1);
		watcher[i] = contract_rc_qp(pd, cq[i], cq[i], NULL, 1, 1);
	}
	for (int i = 0; i < N; i++) {
		struct ibv_sge s = { .addr = (uintptr_t)buf, .length = sizeof buf, .lkey = mr->lkey };
		struct ibv_recv_wr w[2] = { { .wr_id = 1, .sg_list = &s, .num_sge = 1, .next = &w[1] },
					    { .wr_id = 2, .sg_list = &s, .num_sge = 1 } },
				   *bad;
		if (ibv_post_recv(flushed[i], w, &bad))
			DIE("ibv_post_recv: %s", strerror(errno));
		to_error(flushed[i]);
	}
	int waited = 0;
	for (int i = 0; i < N; i++)
		while (state_of(watcher[i]) != IBV_QPS_ERR) {
			if (++waited > 30000)
				DIE("the overrun of CQ %d was not reported in 30 s", i);
			usleep(1000);
		}

	/* The CM's dispatcher still delivers: a failed resolution's event. */
	struct sockaddr_in gone = contract_sockaddr("10.77.0.2", 7470);
	if (rdma_resolve_addr(id, NULL, (struct sockaddr *)&gone, 0))
		DIE("rdma_resolve_addr: %s", strerror(errno));
	struct rdma_cm_event *ev = contract_next_event(ec, 30000);
	EXPECT(ev && ev->id == id && ev->event == RDMA_CM_EVENT_ADDR_ERROR,
	       "with %d asynchronous events unread, the rdma_cm event that follows them is delivered (%s)", N,
	       ev ? rdma_event_str(ev->event) : "none in 30 s");
	if (ev)
		rdma_ack_cm_event(ev);

	/* Every event, each CQ once; all but the last read here. */
	int got = 0, wrong = 0, twice = 0, unreadable = 0;
	for (int k = 0; k < N - 1; k++) {
		struct ibv_async_event ae;
		unreadable += contract_readable(ctx->async_fd, 0) != 1;
		if (contract_async_event(ctx, &ae, 30000))
			break;
		got++;
		intptr_t i = ae.event_type == IBV_EVENT_CQ_ERR ? (intptr_t)ae.element.cq->cq_context : -1;
		if (i < 0 || i >= N || ae.element.cq != cq[i])
			wrong++;
		else if (seen[i]++)
			twice++;
		ibv_ack_async_event(&ae);
	}
	EXPECT(got == N - 1 && !wrong && !twice && !unreadable,
	       "ibv_get_async_event(3): %d of %d IBV_EVENT_CQ_ERR read, each naming one of the CQs (%d another, %d a "
	       "CQ twice), async_fd readable before each (%d times not)",
	       got, N - 1, wrong, twice, unreadable);

	/* The last, still queued: its CQ's destroy takes it back, and nothing is left. */
	int last = -1;
	for (int i = 0; i < N; i++)
		if (!seen[i])
			last = i;
	if (last < 0 || got != N - 1)
		DIE("no CQ left whose event is unread");
	int d = ibv_destroy_qp(flushed[last]) || ibv_destroy_qp(watcher[last]) || ibv_destroy_cq(cq[last]);
	cq[last] = NULL;
	int readable = contract_readable(ctx->async_fd, 0);
	struct ibv_async_event ae;
	errno = 0;
	int g = ibv_get_async_event(ctx, &ae);
	int err = errno;
	EXPECT(d == 0 && readable == 0 && g == -1 && err == EAGAIN,
	       "ibv_destroy_cq(3) takes back its event still queued: async_fd then not readable, ibv_get_async_event "
	       "EAGAIN (destroy %d, readable %d, get %d, %s)",
	       d, readable, g, strerror(err));

	for (int i = 0; i < N; i++)
		if (cq[i] && (ibv_destroy_qp(flushed[i]) || ibv_destroy_qp(watcher[i]) || ibv_destroy_cq(cq[i])))
			DIE("teardown of CQ %d: %s", i, strerror(errno));
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ec);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	return contract_end();
}
