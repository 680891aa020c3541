/*
 * Contract: a process's normal exit closes the connections it still holds.
 *   rdma_cm (the kernel's): a process's /dev/infiniband/rdma_cm descriptor is closed when
 *     it exits; ucma_close() destroys every id it still has (rdma_destroy_id), and on
 *     iWARP iw_cm's destroy_cm_id makes an abrupt close of an ESTABLISHED connection
 *     (iwcm_modify_qp_err: siw moves the QP to ERROR and releases its TCP socket, a FIN;
 *     no Terminate). So the peer's RDMA_CM_EVENT_DISCONNECTED comes at once, not when its
 *     TCP gives up on a silent peer.
 * Before the fix the drop-in's engine died with the process and sent nothing: the peer's
 * DISCONNECTED came ~30 s later (the TCP's user timeout, after keep-alives).
 *   exit_closes -s ADDR PORT   server: accepts two connections (one on an event channel,
 *                              one synchronous), receives the client's last message on
 *                              each, then wants each DISCONNECTED within 3 s of it
 *   exit_closes -c ADDR PORT   client: connects both, sends the last message on each and
 *                              returns from main without rdma_disconnect or
 *                              rdma_destroy_id
 * PORT+1 carries the synchronous connection.
 */
#include <errno.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>

static const char *contract_name = "exit_closes";
#include "contract.h"

/* Within how many milliseconds of the client's last message its exit must show. */
#define WITHIN_MS 3000

static char rbuf[2][64], sbuf[2][64];

/* The next completion of cq within ms milliseconds, which must be a success of opcode op. */
static void expect_wc(struct ibv_cq *cq, enum ibv_wc_opcode op, int ms, const char *what)
{
	struct ibv_wc wc;
	int got = 0;
	for (int i = 0; i < ms && got == 0; i++) {
		got = ibv_poll_cq(cq, 1, &wc);
		if (got == 0)
			usleep(1000);
	}
	if (got != 1 || wc.status != IBV_WC_SUCCESS || wc.opcode != op)
		DIE("%s: no completion (%d, %s)", what, got, got == 1 ? ibv_wc_status_str(wc.status) : "-");
}

/* Client: the connection to a, port on the event channel ec (ESTABLISHED read there). */
static struct rdma_cm_id *client_async(const char *a, int port, struct rdma_event_channel *ec)
{
	struct rdma_cm_id *id = contract_active(ec, a, port, 5000);
	struct rdma_conn_param cp = contract_conn_param(1, 1, NULL, 0);
	if (rdma_connect(id, &cp))
		DIE("rdma_connect: %s", strerror(errno));
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_ESTABLISHED, 10000));
	return id;
}

/* Client: Sends the last message on id's connection, its completion waited for. */
static void send_last(struct rdma_cm_id *id, int k)
{
	struct ibv_mr *mr = ibv_reg_mr(id->pd, sbuf[k], sizeof sbuf[k], IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		DIE("ibv_reg_mr: %s", strerror(errno));
	snprintf(sbuf[k], sizeof sbuf[k], "last message %d", k);
	struct ibv_sge sge = { .addr = (uintptr_t)sbuf[k], .length = sizeof sbuf[k], .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED }, *bad;
	if (ibv_post_send(id->qp, &wr, &bad))
		DIE("ibv_post_send: %s", strerror(errno));
	expect_wc(id->send_cq, IBV_WC_SEND, 5000, "the last message");
}

static int client(const char *a, const char *p)
{
	int port = contract_port(p);
	struct rdma_event_channel *ec = contract_channel();
	struct rdma_cm_id *ids[2];
	ids[0] = client_async(a, port, ec);
	/* The synchronous one: rdma_create_ep and rdma_connect (no channel). */
	char p2[16];
	snprintf(p2, sizeof p2, "%d", port + 1);
	ids[1] = contract_connect(a, p2);
	for (int k = 0; k < 2; k++) {
		send_last(ids[k], k);
		struct ibv_qp_attr at;
		struct ibv_qp_init_attr ia;
		int q = ibv_query_qp(ids[k]->qp, &at, IBV_QP_STATE, &ia);
		EXPECT(q == 0 && at.qp_state == IBV_QPS_RTS,
		       "the %s connection is established and its last message sent; the client now returns "
		       "from main with it connected (no rdma_disconnect, no rdma_destroy_id)",
		       k ? "synchronous" : "event channel's");
	}
	return contract_end();
}

/* Server: connection k's DISCONNECTED, within WITHIN_MS of t0 (when the client's last
 * messages had both arrived). */
static void await_exit(struct rdma_cm_id *id, struct rdma_event_channel *ec, int k, double t0)
{
	int left = WITHIN_MS + 1000 - (int)(contract_now_ms() - t0);
	struct rdma_cm_event *ev = contract_next_event(ec, left > 0 ? left : 0);
	double dt = contract_now_ms() - t0;
	int got = ev ? (int)ev->event : -1;
	EXPECT(ev && got == RDMA_CM_EVENT_DISCONNECTED && ev->id == id && dt <= WITHIN_MS,
	       "the %s connection: the client's exit with it connected gives DISCONNECTED at once, as the "
	       "kernel's close of its rdma_cm descriptor does (got %s %.0f ms after its last message, want "
	       "within %d ms)",
	       k ? "synchronous" : "event channel's", ev ? rdma_event_str(got) : "nothing", dt, WITHIN_MS);
	if (ev)
		rdma_ack_cm_event(ev);
}

static int server(const char *a, const char *p)
{
	int port = contract_port(p);
	struct rdma_event_channel *ec = contract_channel();
	contract_listener(ec, a, port);
	struct rdma_event_channel *ec2 = contract_channel();
	contract_listener(ec2, a, port + 1);
	struct rdma_cm_id *ids[2];
	struct rdma_event_channel *chans[2] = { ec, ec2 };
	for (int k = 0; k < 2; k++) {
		struct rdma_cm_event *ev = contract_expect_event(chans[k], RDMA_CM_EVENT_CONNECT_REQUEST, 60000);
		ids[k] = ev->id;
		rdma_ack_cm_event(ev);
		contract_qp_on(ids[k]);
		struct ibv_mr *mr = ibv_reg_mr(ids[k]->pd, rbuf[k], sizeof rbuf[k], IBV_ACCESS_LOCAL_WRITE);
		if (!mr)
			DIE("ibv_reg_mr: %s", strerror(errno));
		struct ibv_sge sge = { .addr = (uintptr_t)rbuf[k], .length = sizeof rbuf[k], .lkey = mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1 }, *bad;
		if (ibv_post_recv(ids[k]->qp, &wr, &bad))
			DIE("ibv_post_recv: %s", strerror(errno));
		struct rdma_conn_param cp = contract_conn_param(1, 1, NULL, 0);
		if (rdma_accept(ids[k], &cp))
			DIE("rdma_accept: %s", strerror(errno));
		rdma_ack_cm_event(contract_expect_event(chans[k], RDMA_CM_EVENT_ESTABLISHED, 10000));
	}
	for (int k = 0; k < 2; k++)
		expect_wc(ids[k]->recv_cq, IBV_WC_RECV, 60000, "the client's last message");
	double t0 = contract_now_ms();
	for (int k = 0; k < 2; k++)
		await_exit(ids[k], chans[k], k, t0);
	return contract_end();
}

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, server, client);
}
