/*
 * Contract: flushed completions are completions like any other.
 *   ibv_poll_cq(3) / the verbs' work queues: the completions of one work queue come out in
 *     the order its work requests were posted, flushed ones included;
 *   ibv_req_notify_cq(3): an armed CQ signals its completion channel when "a completion
 *     queue entry" is added, so also the flushed completion of a work request posted to a
 *     QP in the error state.
 * Before the fix those flushed completions sat in a queue of the library's own, drained
 * ahead of the engine's (out of order) and never signalling the channel.
 *   flush_order_notify -s ADDR PORT   server: accepts one connection, keeps it until the client disconnects (contract_serve)
 *   flush_order_notify -c ADDR PORT   client: the checks
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

static const char *contract_name = "flush_order_notify";
#include "contract.h"

static int post_recv1(struct ibv_qp *q, struct ibv_mr *mr, char *buf, uint64_t id)
{
	struct ibv_sge s = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	struct ibv_recv_wr w = { .wr_id = id, .sg_list = &s, .num_sge = 1 }, *bad = NULL;
	return ibv_post_recv(q, &w, &bad);
}

static int client(const char *a, const char *p)
{
	struct rdma_cm_id *id = contract_ep(a, p, 0);
	static char buf[4096];
	struct ibv_mr *mr = rdma_reg_msgs(id, buf, sizeof buf);
	if (!mr || post_recv1(id->qp, mr, buf, 1))
		DIE("receive 1: %s", strerror(errno));
	if (rdma_connect(id, NULL))
		DIE("rdma_connect: %s", strerror(errno));
	/* Connected (RTS): to the error state, which flushes receive 1; then receive 2, posted
	 * to the QP in error, completes flushed too. */
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_ERR };
	if (ibv_modify_qp(id->qp, &at, IBV_QP_STATE))
		DIE("ibv_modify_qp to ERR: %s", strerror(errno));
	usleep(300000);
	if (post_recv1(id->qp, mr, buf, 2))
		DIE("receive 2: %s", strerror(errno));
	struct ibv_wc wc[4];
	int got = 0;
	for (int i = 0; i < 100 && got < 2; i++) {
		int k = ibv_poll_cq(id->recv_cq, 4 - got, wc + got);
		if (k > 0)
			got += k;
		else
			usleep(10000);
	}
	EXPECT(got == 2 && wc[0].wr_id == 1 && wc[1].wr_id == 2 && wc[0].status == IBV_WC_WR_FLUSH_ERR &&
	       wc[1].status == IBV_WC_WR_FLUSH_ERR,
	       "ibv_poll_cq(3): a work queue's completions come in posting order, flushed ones too (got %d: wr_id %llu [%s] then %llu [%s])",
	       got, (unsigned long long)wc[0].wr_id, got > 0 ? ibv_wc_status_str(wc[0].status) : "-",
	       (unsigned long long)wc[1].wr_id, got > 1 ? ibv_wc_status_str(wc[1].status) : "-");
	/* Arm the empty receive CQ; receive 3 to the QP in error: its flushed completion must
	 * make the channel readable. */
	while (ibv_poll_cq(id->recv_cq, 4, wc) > 0)
		;
	if (ibv_req_notify_cq(id->recv_cq, 0))
		DIE("ibv_req_notify_cq: %s", strerror(errno));
	int r = post_recv1(id->qp, mr, buf, 3);
	int ready = contract_readable(id->recv_cq_channel->fd, 1000);
	struct ibv_cq *ecq = NULL;
	void *ectx = NULL;
	int ev = ready == 1 ? ibv_get_cq_event(id->recv_cq_channel, &ecq, &ectx) : -1;
	if (ev == 0)
		ibv_ack_cq_events(ecq, 1);
	got = ibv_poll_cq(id->recv_cq, 4, wc);
	EXPECT(r == 0 && got == 1 && wc[0].wr_id == 3 && ready == 1 && ev == 0 && ecq == id->recv_cq,
	       "ibv_req_notify_cq(3): a flushed completion on an armed CQ signals its channel (post %d, CQEs %d [%s], channel readable %d, event %d)",
	       r, got, got > 0 ? ibv_wc_status_str(wc[0].status) : "-", ready, ev);
	return contract_end();
}

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, contract_serve, client);
}
