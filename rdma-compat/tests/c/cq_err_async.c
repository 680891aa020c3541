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
	struct rdma_cm_id *l, *id = contract_request(a, p, NULL, scq, rcq, NULL, &l);
	/* id->qp->recv_cq: a CQ the caller gives stays out of id->recv_cq, as librdmacm's
	 * rdma_create_qp_ex leaves it (create_qp_caller_cqs.c). */
	if (!id->qp || id->qp->recv_cq != rcq)
		DIE("the request's QP does not receive into the CQ given");
	static char buf[4 * 64];
	struct ibv_mr *mr = contract_reg_msgs(id, buf, sizeof buf);
	for (int i = 0; i < 4; i++)
		if (rdma_post_recv(id, NULL, buf + 64 * i, 64, mr))
			DIE("rdma_post_recv: %s", strerror(errno));
	if (rdma_accept(id, NULL))
		DIE("rdma_accept: %s", strerror(errno));

	/* Four messages into a CQ of one entry, never polled. */
	struct ibv_async_event ae;
	int r = contract_async_event(ctx, &ae, 20000);
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

static int client(const char *a, const char *p)
{
	struct rdma_cm_id *id = contract_connect(a, p);
	static char buf[64] = "four messages for a CQ of one entry";
	struct ibv_mr *mr = contract_reg_msgs(id, buf, sizeof buf);
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

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, server, client);
}
