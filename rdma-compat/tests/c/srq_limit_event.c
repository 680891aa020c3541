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
#include <fcntl.h>
#include <poll.h>
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
	struct rdma_addrinfo h, *res;
	memset(&h, 0, sizeof h);
	h.ai_port_space = RDMA_PS_TCP;
	h.ai_flags = RAI_PASSIVE;
	if (rdma_getaddrinfo(a, p, &h, &res))
		DIE("rdma_getaddrinfo: %s", strerror(errno));
	struct ibv_qp_init_attr at;
	memset(&at, 0, sizeof at);
	at.qp_type = IBV_QPT_RC;
	at.srq = srq;
	at.cap.max_send_wr = at.cap.max_recv_wr = 8;
	at.cap.max_send_sge = at.cap.max_recv_sge = 1;
	struct rdma_cm_id *l, *id;
	if (rdma_create_ep(&l, res, pd, &at) || rdma_listen(l, 1) || rdma_get_request(l, &id) || rdma_accept(id, NULL))
		DIE("server: %s", strerror(errno));

	/* The client's message takes one of the four: three left, below the limit. */
	fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK);
	struct pollfd pf = { .fd = ctx->async_fd, .events = POLLIN };
	struct ibv_async_event ae;
	memset(&ae, 0, sizeof ae);
	int r = -1;
	if (poll(&pf, 1, 20000) == 1)
		r = ibv_get_async_event(ctx, &ae);
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

int main(int argc, char **argv)
{
	if (argc != 4)
		DIE("usage: srq_limit_event -s|-c ADDR PORT");
	if (!strcmp(argv[1], "-s"))
		return server(argv[2], argv[3]);
	struct rdma_cm_id *id = contract_ep(argv[2], argv[3], 0);
	if (rdma_connect(id, NULL))
		DIE("rdma_connect: %s", strerror(errno));
	static char buf[64] = "one message";
	struct ibv_mr *mr = rdma_reg_msgs(id, buf, sizeof buf);
	if (!mr)
		DIE("rdma_reg_msgs: %s", strerror(errno));
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
