/*
 * Contract: ibv_modify_srq(3): "Modifying the srq_limit arms the SRQ to produce an
 * IBV_EVENT_SRQ_LIMIT_REACHED 'low watermark' asynchronous event once the number of WRs in
 * the SRQ drops below srq_limit" (ibv_get_async_event(3): element.srq names it); the limit
 * is then disarmed (ibv_query_srq reports 0), and the SRQ is destroyed at once after the
 * event is acknowledged. Before the fix the limit was accepted and the event never came.
 *   srq_limit_event -s ADDR PORT   server: an SRQ of four receives, limit 4 armed; checks
 *   srq_limit_event -c ADDR PORT   client: sends one message
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

static const char *contract_name = "srq_limit_event";
#include "contract.h"

static int server(const char *a, const char *p)
{
	struct ibv_context *ctx = contract_open_device();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_srq_init_attr sa = { .attr = { .max_wr = 8, .max_sge = 1 } };
	struct ibv_srq *srq = pd ? ibv_create_srq(pd, &sa) : NULL;
	static char buf[4 * 64];
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : NULL;
	if (!srq || !mr)
		DIE("pd, srq, mr: %s", strerror(errno));
	for (int i = 0; i < 4; i++) {
		struct ibv_sge s = { .addr = (uintptr_t)buf + 64 * i, .length = 64, .lkey = mr->lkey };
		struct ibv_recv_wr w = { .wr_id = i, .sg_list = &s, .num_sge = 1 }, *bad;
		if (ibv_post_srq_recv(srq, &w, &bad))
			DIE("ibv_post_srq_recv");
	}
	struct ibv_srq_attr lim = { .srq_limit = 4 };
	if (ibv_modify_srq(srq, &lim, IBV_SRQ_LIMIT))
		DIE("ibv_modify_srq IBV_SRQ_LIMIT 4");
	struct rdma_cm_id *l, *id = contract_request(a, p, pd, NULL, NULL, srq, &l);
	if (rdma_accept(id, NULL))
		DIE("rdma_accept: %s", strerror(errno));

	/* The client's message takes one of the four: three left, below the limit. */
	struct ibv_async_event ae;
	int r = contract_async_event(ctx, &ae, 20000);
	EXPECT(r == 0 && ae.event_type == IBV_EVENT_SRQ_LIMIT_REACHED && ae.element.srq == srq,
	       "ibv_modify_srq(3): the armed SRQ reports IBV_EVENT_SRQ_LIMIT_REACHED naming it once a receive takes it "
	       "below the limit (got %d: %s)",
	       r, r == 0 ? ibv_event_type_str(ae.event_type) : "no event in 20 s");
	struct ibv_srq_attr q;
	EXPECT(ibv_query_srq(srq, &q) == 0 && q.srq_limit == 0,
	       "ibv_query_srq(3): the limit is disarmed once reached (srq_limit %u)", q.srq_limit);
	if (r == 0)
		ibv_ack_async_event(&ae);
	sleep(1);
	rdma_destroy_ep(id);
	rdma_destroy_ep(l);
	int d = ibv_destroy_srq(srq);
	EXPECT(d == 0, "ibv_destroy_srq(3) after the event was acknowledged (returned %d)", d);
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	return contract_end();
}

static int client(const char *a, const char *p)
{
	struct rdma_cm_id *id = contract_connect(a, p);
	static char buf[64] = "one message";
	struct ibv_mr *mr = contract_reg_msgs(id, buf, sizeof buf);
	int ps = rdma_post_send(id, NULL, buf, 16, mr, IBV_SEND_SIGNALED);
	struct ibv_wc wc;
	int got = ps == 0 ? rdma_get_send_comp(id, &wc) : -1;
	EXPECT(got == 1 && wc.status == IBV_WC_SUCCESS, "the message is sent (post %d, completion %d)", ps, got);
	sleep(3);
	rdma_disconnect(id);
	rdma_dereg_mr(mr);
	rdma_destroy_ep(id);
	return contract_end();
}

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, server, client);
}
