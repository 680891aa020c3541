/*
 * Contract: completion events are counted.
 *   ibv_get_cq_event(3): "All completion events that ibv_get_cq_event() returns must be
 *     acknowledged using ibv_ack_cq_events()", and "destroying a CQ will wait for all
 *     completion events to be acknowledged" (rdma-core: ibv_destroy_cq blocks until the
 *     events acknowledged equal the events delivered).
 * (a) get an event, acknowledge it, destroy the CQ: it succeeds at once; (b) get an event
 * and leave it unacknowledged: ibv_destroy_cq, called from a second thread, returns only
 * after the main thread acknowledges it 200 ms later. Before the fix ibv_ack_cq_events was
 * a no-op and ibv_destroy_cq freed the CQ at once, under the unacknowledged event.
 * And ibv_get_cq_event(3)'s non-blocking example: (c) with O_NONBLOCK set on the channel's
 * descriptor and the descriptor polled readable, ibv_get_cq_event returns the event at
 * once, then fails with EAGAIN when none is left. Before the fix it failed with EAGAIN
 * with the event pending. The event comes from a receive posted to a QP in the error
 * state (its flushed completion signals the armed CQ's channel).
 * And ibv_req_notify_cq(3) on a CQ created without a channel: (d) it returns 0, as
 * rdma-core's providers answer (they arm the CQ; with no channel nothing reads the
 * notification), and has no visible effect: a completion after it is polled as any other.
 * Before the fix it returned EOPNOTSUPP, which an application that arms every CQ it makes
 * takes for a failure. One process, no peer:
 *   cq_event_ack
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

static const char *contract_name = "cq_event_ack";
#include "contract.h"

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_mr *mr;
static char buf[4096];

/* A CQ on channel ch with one completion event waiting on the channel, and no QP left on
 * it (so ibv_destroy_cq is not refused with EBUSY). */
static struct ibv_cq *cq_with_event(struct ibv_comp_channel *ch, void *cq_context)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, cq_context, ch, 0);
	if (!cq)
		DIE("ibv_create_cq: %s", strerror(errno));
	struct ibv_qp *qp = contract_rc_qp(pd, cq, cq, NULL, 1, 1);
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_ERR };
	if (ibv_modify_qp(qp, &at, IBV_QP_STATE))
		DIE("ibv_modify_qp to ERR: %s", strerror(errno));
	if (ibv_req_notify_cq(cq, 0))
		DIE("ibv_req_notify_cq: %s", strerror(errno));
	struct ibv_sge s = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	struct ibv_recv_wr w = { .wr_id = 1, .sg_list = &s, .num_sge = 1 }, *bad;
	if (ibv_post_recv(qp, &w, &bad))
		DIE("ibv_post_recv: %s", strerror(errno));
	struct pollfd p = { .fd = ch->fd, .events = POLLIN };
	if (poll(&p, 1, 5000) != 1)
		DIE("no completion event on the channel within 5 s");
	struct ibv_wc wc[4];
	for (int i = 0; i < 100 && ibv_poll_cq(cq, 4, wc) == 0; i++)
		usleep(10000);
	if (ibv_destroy_qp(qp))
		DIE("ibv_destroy_qp: %s", strerror(errno));
	return cq;
}

static struct ibv_cq *victim;
static atomic_int acked;
static int destroy_ret = -1, acked_when_returned = -1;
static double destroy_returned_ms;

static void *destroyer(void *arg)
{
	(void)arg;
	destroy_ret = ibv_destroy_cq(victim);
	acked_when_returned = atomic_load(&acked);
	destroy_returned_ms = contract_now_ms();
	return NULL;
}

int main(void)
{
	ctx = contract_open_device();
	pd = ibv_alloc_pd(ctx);
	mr = pd ? ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	if (!mr || !ch)
		DIE("pd, mr, channel: %s", strerror(errno));
	int tag_a, tag_b;

	/* (a) get, acknowledge, destroy. */
	struct ibv_cq *cq = cq_with_event(ch, &tag_a), *got = NULL;
	void *got_ctx = NULL;
	int g = ibv_get_cq_event(ch, &got, &got_ctx);
	ibv_ack_cq_events(cq, 1);
	double t0 = contract_now_ms();
	int d = ibv_destroy_cq(cq);
	double took = contract_now_ms() - t0;
	EXPECT(g == 0 && got == cq && got_ctx == &tag_a && d == 0,
	       "ibv_get_cq_event(3): an event acknowledged with ibv_ack_cq_events, ibv_destroy_cq succeeds "
	       "(get %d, the CQ and its context returned: %d %d; destroy %d after %.0f ms)",
	       g, got == cq, got_ctx == &tag_a, d, took);

	/* (b) destroy while the event is unacknowledged: it waits for the acknowledgement. */
	victim = cq_with_event(ch, &tag_b);
	got = NULL;
	got_ctx = NULL;
	g = ibv_get_cq_event(ch, &got, &got_ctx);
	if (g || got != victim || got_ctx != &tag_b)
		DIE("ibv_get_cq_event: %d %s", g, strerror(errno));
	pthread_t th;
	if (pthread_create(&th, NULL, destroyer, NULL))
		DIE("pthread_create");
	usleep(200000);
	double acked_ms = contract_now_ms();
	atomic_store(&acked, 1);
	ibv_ack_cq_events(victim, 1);
	pthread_join(th, NULL);
	EXPECT(destroy_ret == 0 && acked_when_returned == 1 && destroy_returned_ms >= acked_ms,
	       "ibv_get_cq_event(3): destroying a CQ waits for all completion events to be acknowledged "
	       "(destroy %d, returned %s the acknowledgement made 200 ms after it was called)",
	       destroy_ret, acked_when_returned == 1 && destroy_returned_ms >= acked_ms ? "after" : "before");
	/* (c) a non-blocking channel: the pending event at once, then EAGAIN. */
	int fl = fcntl(ch->fd, F_GETFL);
	if (fl < 0 || fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK))
		DIE("fcntl O_NONBLOCK: %s", strerror(errno));
	int tag_c;
	struct ibv_cq *nb = cq_with_event(ch, &tag_c);
	got = NULL;
	got_ctx = NULL;
	errno = 0;
	g = ibv_get_cq_event(ch, &got, &got_ctx);
	int err = errno;
	EXPECT(g == 0 && got == nb && got_ctx == &tag_c,
	       "ibv_get_cq_event(3), non-blocking mode: with the channel polled readable, the event is "
	       "returned (get %d, errno %s, the CQ and its context returned: %d %d)",
	       g, g ? strerror(err) : "-", got == nb, got_ctx == &tag_c);
	if (g == 0)
		ibv_ack_cq_events(nb, 1);
	errno = 0;
	g = ibv_get_cq_event(ch, &got, &got_ctx);
	err = errno;
	EXPECT(g == -1 && err == EAGAIN,
	       "ibv_get_cq_event(3), non-blocking mode: with no event left it fails with EAGAIN "
	       "(get %d, errno %s)", g, strerror(err));
	if (ibv_destroy_cq(nb))
		DIE("ibv_destroy_cq: %s", strerror(errno));
	int c = ibv_destroy_comp_channel(ch);
	EXPECT(c == 0, "ibv_destroy_comp_channel succeeds once its CQs are destroyed (got %d)", c);

	/* (d) a CQ without a channel: arming it succeeds and changes nothing. */
	struct ibv_cq *plain = ibv_create_cq(ctx, 4, NULL, NULL, 0);
	if (!plain)
		DIE("ibv_create_cq: %s", strerror(errno));
	int r0 = ibv_req_notify_cq(plain, 0), r1 = ibv_req_notify_cq(plain, 1);
	EXPECT(r0 == 0 && r1 == 0,
	       "ibv_req_notify_cq(3) on a CQ without a channel returns 0, for any completion and for solicited ones "
	       "(got %d: %s; %d: %s)",
	       r0, r0 ? strerror(r0) : "armed", r1, r1 ? strerror(r1) : "armed");
	struct ibv_qp *qp = contract_rc_qp(pd, plain, plain, NULL, 1, 1);
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_ERR };
	if (ibv_modify_qp(qp, &at, IBV_QP_STATE))
		DIE("ibv_modify_qp to ERR: %s", strerror(errno));
	struct ibv_sge s = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	struct ibv_recv_wr w = { .wr_id = 7, .sg_list = &s, .num_sge = 1 }, *bad;
	if (ibv_post_recv(qp, &w, &bad))
		DIE("ibv_post_recv: %s", strerror(errno));
	struct ibv_wc wc[2];
	int n = 0;
	for (int i = 0; i < 100 && n == 0; i++)
		if ((n = ibv_poll_cq(plain, 2, wc)) == 0)
			usleep(10000);
	EXPECT(n == 1 && wc[0].wr_id == 7 && wc[0].status == IBV_WC_WR_FLUSH_ERR,
	       "ibv_req_notify_cq(3) without a channel has no effect: the completion after it is polled as any other "
	       "(%d polled, wr_id %llu, %s)",
	       n, n > 0 ? (unsigned long long)wc[0].wr_id : 0ULL, n > 0 ? ibv_wc_status_str(wc[0].status) : "-");
	if (ibv_destroy_qp(qp) || ibv_destroy_cq(plain))
		DIE("teardown: %s", strerror(errno));
	return contract_end();
}
