/*
 * Contract: a QP taken back to RESET (ERR -> RESET) is idle as a new one, and ibv_query_qp(3)
 * answers for it as for a new QP: max_rd_atomic and max_dest_rd_atomic, the negotiated ORD
 * and IRD of its connection while it was established (as siw's siw_query_qp reports them),
 * read 0 again, as they read before any connection (docs/rdma-compat.md, "QP states").
 * Before: the ended connection's ORD and IRD were still reported after the reset, until a
 * new connection was established.
 *   reset_clears_ird_ord -s ADDR PORT   server: accepts one connection (contract_serve)
 *   reset_clears_ird_ord -c ADDR PORT   client: the checks
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

static const char *contract_name = "reset_clears_ird_ord";
#include "contract.h"

#define WAIT_MS 20000

static struct ibv_qp_attr query(struct ibv_qp *qp)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr i;
	if (ibv_query_qp(qp, &a, IBV_QP_STATE | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC, &i))
		DIE("ibv_query_qp");
	return a;
}

static int move(struct ibv_qp *qp, enum ibv_qp_state s)
{
	struct ibv_qp_attr a = { .qp_state = s };
	return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

static int client(const char *a, const char *p)
{
	struct rdma_event_channel *ec = contract_channel();
	struct rdma_cm_id *id = contract_active(ec, a, contract_port(p), WAIT_MS);
	struct rdma_conn_param cp = contract_conn_param(2, 2, NULL, 0);
	if (rdma_connect(id, &cp))
		DIE("rdma_connect: %s", strerror(errno));
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_ESTABLISHED, WAIT_MS));
	struct ibv_qp_attr q = query(id->qp);
	if (q.qp_state != IBV_QPS_RTS || (!q.max_rd_atomic && !q.max_dest_rd_atomic))
		DIE("the established QP reads state %d, ORD %d, IRD %d: nothing for the reset to clear", q.qp_state,
		    q.max_rd_atomic, q.max_dest_rd_atomic);
	int ord = q.max_rd_atomic, ird = q.max_dest_rd_atomic;
	if (move(id->qp, IBV_QPS_ERR) || move(id->qp, IBV_QPS_RESET))
		DIE("ibv_modify_qp to ERR, then RESET");
	q = query(id->qp);
	EXPECT(q.qp_state == IBV_QPS_RESET && q.max_rd_atomic == 0 && q.max_dest_rd_atomic == 0,
	       "ibv_query_qp(3) of the QP reset after its connection: RESET, max_rd_atomic and max_dest_rd_atomic 0 "
	       "as for a new QP (state %d, max_rd_atomic %d, max_dest_rd_atomic %d; %d and %d while established)",
	       q.qp_state, q.max_rd_atomic, q.max_dest_rd_atomic, ord, ird);
	/* The aborted connection's end, if it reached the channel, is the id's to take. */
	struct rdma_cm_event *ev = contract_next_event(ec, 2000);
	if (ev)
		rdma_ack_cm_event(ev);
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ec);
	return contract_end();
}

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, contract_serve, client);
}
