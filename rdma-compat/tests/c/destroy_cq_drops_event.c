/*
 * Contract: ibv_destroy_cq(3) of a CQ whose completion event waits on its channel, not yet
 * taken by ibv_get_cq_event, takes that event off the channel: the channel's descriptor is
 * readable only while an event of a live CQ waits. In rdma-core the kernel drops a
 * destroyed CQ's queued events from the completion event file (uverbs'
 * ib_uverbs_release_ucq: each entry of the CQ's comp_list is deleted from the file's
 * event list), so a program that polls a channel shared by many CQs and then calls
 * ibv_get_cq_event finds an event there. Before the fix the stale event kept the
 * descriptor readable, and ibv_get_cq_event on a blocking descriptor, after poll(2) had
 * said readable, skipped it and blocked until some other CQ's event came.
 * One process, no peer (the event comes from a receive flushed on a QP in the error
 * state):
 *   destroy_cq_drops_event
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>

static const char *contract_name = "destroy_cq_drops_event";
#include "contract.h"

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_mr *mr;
static char buf[4096];

/* Arms cq (of channel ch), and makes it complete one flushed receive on a QP in the
 * error state (destroyed again): one completion event waits on ch. */
static void event_on(struct ibv_comp_channel *ch, struct ibv_cq *cq)
{
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
	if (contract_readable(ch->fd, 5000) != 1)
		DIE("no completion event on the channel within 5 s");
	struct ibv_wc wc[4];
	for (int i = 0; i < 100 && ibv_poll_cq(cq, 4, wc) == 0; i++)
		usleep(10000);
	if (ibv_destroy_qp(qp))
		DIE("ibv_destroy_qp: %s", strerror(errno));
}

int main(void)
{
	ctx = contract_open_device();
	pd = ibv_alloc_pd(ctx);
	mr = pd ? ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
	if (!mr || !ch)
		DIE("pd/mr/channel: %s", strerror(errno));
	/* Two CQs share the channel, as a server's connections share one. */
	struct ibv_cq *gone = ibv_create_cq(ctx, 16, NULL, ch, 0);
	struct ibv_cq *stays = ibv_create_cq(ctx, 16, (void *)0x5a, ch, 0);
	if (!gone || !stays)
		DIE("ibv_create_cq: %s", strerror(errno));
	event_on(ch, gone);
	int r = ibv_destroy_cq(gone);
	if (r)
		DIE("ibv_destroy_cq: %s", strerror(r));
	int readable = contract_readable(ch->fd, 0);
	EXPECT(readable == 0,
	       "ibv_destroy_cq(3): the destroyed CQ's event no longer waits: the channel's descriptor is not "
	       "readable (poll answered %d)",
	       readable);
	contract_nonblocking(ch->fd, 1);
	struct ibv_cq *cq = NULL;
	void *cq_ctx = NULL;
	r = ibv_get_cq_event(ch, &cq, &cq_ctx);
	int e = errno;
	EXPECT(r == -1 && e == EAGAIN, "ibv_get_cq_event(3) then finds no event: -1, EAGAIN (got %d, %s)", r,
	       r ? strerror(e) : "an event");
	if (r == 0)
		ibv_ack_cq_events(cq, 1);

	/* The other CQ's events come as before. */
	contract_nonblocking(ch->fd, 0);
	event_on(ch, stays);
	r = ibv_get_cq_event(ch, &cq, &cq_ctx);
	EXPECT(r == 0 && cq == stays && cq_ctx == (void *)0x5a,
	       "ibv_get_cq_event(3): the live CQ's event, with its cq_context (got %d)", r);
	if (r == 0)
		ibv_ack_cq_events(cq, 1);
	EXPECT(contract_readable(ch->fd, 0) == 0, "ibv_get_cq_event(3): nothing left on the channel");

	if (ibv_destroy_cq(stays) || ibv_destroy_comp_channel(ch) || ibv_dereg_mr(mr) || ibv_dealloc_pd(pd))
		DIE("teardown: %s", strerror(errno));
	return contract_end();
}
