/*
 * Contract: a connect the peer refuses with an MPA Reject (rdma_reject(3) with private
 * data) leaves the active side's QP as librdmacm leaves it. rdma-core's
 * rdma_get_cm_event (librdmacm/cma.c) answers RDMA_CM_EVENT_REJECTED with
 * ucma_modify_qp_err(), ibv_modify_qp(3) of the id's QP to IBV_QPS_ERR, which libibverbs
 * records in qp->state; the kernel's rdma_cm reports the iWARP provider's refusal as
 * REJECTED with status -ECONNREFUSED and the peer's private data (cma_iw_handler).
 *   - REJECTED, status -ECONNREFUSED, the rejecting side's private data;
 *   - qp->state reads IBV_QPS_ERR (before, it still read the INIT rdma_create_qp left);
 *   - a receive posted before the connect completes with IBV_WC_WR_FLUSH_ERR.
 *   rejected_qp_err -s ADDR PORT   server: rejects the first request on PORT
 *   rejected_qp_err -c ADDR PORT   client: the checks (PORT+1: the control connection)
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

static const char *contract_name = "rejected_qp_err";
#include "contract.h"

#define WAIT_MS 20000
static const char reason[] = "not now";

static int server(const char *a, const char *p)
{
	int port = contract_port(p);
	struct rdma_event_channel *ec = contract_channel();
	struct rdma_cm_id *l = contract_listener(ec, a, port);
	/* The control connection: the client connects to PORT only once PORT listens. */
	struct rdma_event_channel *ctl = contract_channel();
	struct rdma_cm_id *cid = contract_control_request(ctl, a, port + 1);
	contract_control_accept(ctl, cid, WAIT_MS);

	struct rdma_cm_event *ev = contract_expect_event(ec, RDMA_CM_EVENT_CONNECT_REQUEST, 60000);
	struct rdma_cm_id *child = ev->id;
	rdma_ack_cm_event(ev);
	if (rdma_reject(child, reason, sizeof reason))
		DIE("rdma_reject: %s", strerror(errno));
	rdma_destroy_id(child);

	/* The client's disconnect of the control connection: done. */
	rdma_ack_cm_event(contract_expect_event(ctl, RDMA_CM_EVENT_DISCONNECTED, 60000));
	rdma_destroy_qp(cid);
	rdma_destroy_id(cid);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(ctl);
	rdma_destroy_event_channel(ec);
	return contract_end();
}

static int client(const char *a, const char *p)
{
	int port = contract_port(p);
	struct rdma_event_channel *ctl = contract_channel();
	struct rdma_cm_id *cid = contract_control_connection(ctl, a, port + 1, WAIT_MS);

	struct rdma_event_channel *ec = contract_channel();
	struct rdma_cm_id *id = contract_active(ec, a, port, WAIT_MS);
	static char buf[64];
	struct ibv_mr *mr = ibv_reg_mr(id->pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		DIE("ibv_reg_mr: %s", strerror(errno));
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = sizeof buf, .lkey = mr->lkey };
	struct ibv_recv_wr rw = { .wr_id = 42, .sg_list = &sge, .num_sge = 1 }, *bad = NULL;
	if (ibv_post_recv(id->qp, &rw, &bad))
		DIE("ibv_post_recv: %s", strerror(errno));

	struct rdma_conn_param cp = contract_conn_param(1, 1, NULL, 0);
	if (rdma_connect(id, &cp))
		DIE("rdma_connect: %s", strerror(errno));
	struct rdma_cm_event *ev = contract_next_event(ec, WAIT_MS);
	EXPECT(ev && ev->event == RDMA_CM_EVENT_REJECTED && ev->status == -ECONNREFUSED &&
		       ev->param.conn.private_data_len >= sizeof reason && ev->param.conn.private_data &&
		       memcmp(ev->param.conn.private_data, reason, sizeof reason) == 0,
	       "rdma_reject(3) with private data: REJECTED, status -ECONNREFUSED, the data (got %s, status %d, "
	       "%d octets)",
	       ev ? rdma_event_str(ev->event) : "no event", ev ? ev->status : 0,
	       ev ? ev->param.conn.private_data_len : 0);
	EXPECT(id->qp->state == IBV_QPS_ERR,
	       "librdmacm's REJECTED moves the QP to ERR (ucma_modify_qp_err): qp->state %d, want %d",
	       (int)id->qp->state, (int)IBV_QPS_ERR);
	if (ev)
		rdma_ack_cm_event(ev);

	/* The receive posted before the connect is flushed (at most WAIT_MS of polls). */
	struct ibv_wc wc;
	int n = 0;
	for (int i = 0; i < WAIT_MS && n == 0; i++) {
		n = ibv_poll_cq(id->recv_cq, 1, &wc);
		if (n == 0)
			usleep(1000);
	}
	EXPECT(n == 1 && wc.wr_id == 42 && wc.status == IBV_WC_WR_FLUSH_ERR,
	       "ibv_poll_cq(3): the receive of the refused QP completes IBV_WC_WR_FLUSH_ERR (got %d, %s)", n,
	       n == 1 ? ibv_wc_status_str(wc.status) : "nothing");

	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	ibv_dereg_mr(mr);
	contract_hang_up(ctl, cid, WAIT_MS);
	rdma_destroy_id(cid);
	rdma_destroy_event_channel(ec);
	rdma_destroy_event_channel(ctl);
	return contract_end();
}

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, server, client);
}
