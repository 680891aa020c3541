/*
 * Contract: ibv_get_async_event(3): a CQ that overran reports IBV_EVENT_CQ_ERR with
 * element.cq naming that CQ; "destroying an object (CQ, SRQ or QP) will wait for all
 * affiliated events of the object to be acknowledged", so once the event is acknowledged
 * (ibv_ack_async_event) the CQ is destroyed at once. Before the fix element.cq was NULL.
 *   cq_err_async -s ADDR PORT   server: a receive CQ of one entry and four receives posted;
 *                               checks the event
 *   cq_err_async -c ADDR PORT   client: sends the four messages
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

static const char *contract_name = "cq_err_async";
#include "contract.h"

static int server(const char *a, const char *p)
{
	struct ibv_context *ctx = contract_open_device();
	struct ibv_cq *scq = ibv_create_cq(ctx, 8, NULL, NULL, 0), *rcq = ibv_create_cq(ctx, 1, NULL, NULL, 0);
	if (!scq || !rcq)
		DIE("ibv_create_cq: %s", strerror(errno));
	struct rdma_addrinfo h, *res;
	memset(&h, 0, sizeof h);
	h.ai_port_space = RDMA_PS_TCP;
	h.ai_flags = RAI_PASSIVE;
	if (rdma_getaddrinfo(a, p, &h, &res))
		DIE("rdma_getaddrinfo: %s", strerror(errno));
	struct ibv_qp_init_attr at;
	memset(&at, 0, sizeof at);
	at.qp_type = IBV_QPT_RC;
	at.send_cq = scq;
	at.recv_cq = rcq;
	at.cap.max_send_wr = at.cap.max_recv_wr = 8;
	at.cap.max_send_sge = at.cap.max_recv_sge = 1;
	struct rdma_cm_id *l, *id;
	if (rdma_create_ep(&l, res, NULL, &at) || rdma_listen(l, 1) || rdma_get_request(l, &id))
		DIE("server: %s", strerror(errno));
	if (id->recv_cq != rcq)
		DIE("the request's QP does not receive into the CQ given");
	static char buf[4 * 64];
	struct ibv_mr *mr = rdma_reg_msgs(id, buf, sizeof buf);
	if (!mr)
		DIE("rdma_reg_msgs: %s", strerror(errno));
	for (int i = 0; i < 4; i++)
		if (rdma_post_recv(id, NULL, buf + 64 * i, 64, mr))
			DIE("rdma_post_recv: %s", strerror(errno));
	if (rdma_accept(id, NULL))
		DIE("rdma_accept: %s", strerror(errno));

	/* Four messages into a CQ of one entry, never polled. */
	fcntl(ctx->async_fd, F_SETFL, fcntl(ctx->async_fd, F_GETFL) | O_NONBLOCK);
	struct pollfd pf = { .fd = ctx->async_fd, .events = POLLIN };
	struct ibv_async_event ae;
	memset(&ae, 0, sizeof ae);
	int r = -1;
	if (poll(&pf, 1, 20000) == 1)
		r = ibv_get_async_event(ctx, &ae);
	EXPECT(r == 0 && ae.event_type == IBV_EVENT_CQ_ERR && ae.element.cq == rcq,
	       "ibv_get_async_event(3): an overrun CQ reports IBV_EVENT_CQ_ERR naming it (got %d: %s, element.cq %p, "
	       "the CQ %p)",
	       r, r == 0 ? ibv_event_type_str(ae.event_type) : "no event in 20 s", r == 0 ? (void *)ae.element.cq : NULL,
	       (void *)rcq);
	if (r != 0)
		DIE("no asynchronous event");
	ibv_ack_async_event(&ae);
	rdma_dereg_mr(mr);
	rdma_destroy_ep(id);
	int d = ibv_destroy_cq(rcq);
	EXPECT(d == 0, "ibv_destroy_cq(3) of the CQ whose error was acknowledged (returned %d)", d);
	ibv_destroy_cq(scq);
	rdma_destroy_ep(l);
	return contract_end();
}

int main(int argc, char **argv)
{
	if (argc != 4)
		DIE("usage: cq_err_async -s|-c ADDR PORT");
	if (!strcmp(argv[1], "-s"))
		return server(argv[2], argv[3]);
	struct rdma_cm_id *id = contract_ep(argv[2], argv[3], 0);
	if (rdma_connect(id, NULL))
		DIE("rdma_connect: %s", strerror(errno));
	static char buf[64] = "four messages for a CQ of one entry";
	struct ibv_mr *mr = rdma_reg_msgs(id, buf, sizeof buf);
	if (!mr)
		DIE("rdma_reg_msgs: %s", strerror(errno));
	int posted = 0;
	for (int i = 0; i < 4; i++)
		posted += rdma_post_send(id, NULL, buf, 16, mr, IBV_SEND_SIGNALED) == 0;
	EXPECT(posted == 4, "rdma_post_send: four messages posted (%d)", posted);
	/* The server checks; its QP goes to the error state with the CQ (ours follows). */
	sleep(3);
	rdma_dereg_mr(mr);
	rdma_destroy_ep(id);
	return contract_end();
}
