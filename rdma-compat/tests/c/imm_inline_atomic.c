/*
 * Contract, on one connection, of the two work requests post_err_qp.c checks on a
 * failed QP, here carried out:
 * 1. ibv_post_send(3): "IBV_SEND_INLINE ... Valid only for Send and RDMA Write": a Fetch
 *    and Add posted with it (its SGE is the sink of the original value) is carried out as
 *    without it, the flag passed over as for an RDMA Read (and as rxe passes it over): it
 *    completes successfully (IBV_WC_FETCH_ADD), the original value in the sink, the sum
 *    at the peer. Before: EINVAL.
 * 2. A Send with Immediate of no octets given as one SGE of length 0 travels as RFC 7306's
 *    Immediate Data message, as one with no SGE does (docs/rdma-compat.md, "Send with
 *    Immediate"): the receiver gets IBV_WC_WITH_IMM and the immediate data. Before:
 *    EOPNOTSUPP.
 * The server checks what arrived and exits non-zero if it is not so.
 *   imm_inline_atomic -s ADDR PORT | -c ADDR PORT
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
static const char *contract_name = "imm_inline_atomic";
#include "contract.h"

struct pdata { uint32_t rkey; uint64_t addr; } __attribute__((packed));

static char rbuf[2 * 64];
static uint64_t target __attribute__((aligned(8)));
static uint64_t sink __attribute__((aligned(8)));

static void make_qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr at;
	memset(&at, 0, sizeof at);
	at.qp_type = IBV_QPT_RC;
	at.cap.max_send_wr = at.cap.max_recv_wr = 8;
	at.cap.max_send_sge = at.cap.max_recv_sge = 1;
	if (rdma_create_qp(id, NULL, &at))
		DIE("rdma_create_qp: %s", strerror(errno));
}

/* Polls cq for one completion within ms milliseconds: 1 with *wc filled, or 0. */
static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc, int ms)
{
	for (int t = 0; t < ms; t++) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n < 0)
			DIE("ibv_poll_cq %d", n);
		if (n == 1)
			return 1;
		usleep(1000);
	}
	return 0;
}

static int server(const char *addr, const char *port_s)
{
	struct rdma_event_channel *ec = contract_channel();
	struct rdma_cm_id *l = contract_listener(ec, addr, contract_port(port_s));
	struct rdma_cm_event *ev = contract_expect_event(ec, RDMA_CM_EVENT_CONNECT_REQUEST, 10000);
	struct rdma_cm_id *id = ev->id;
	rdma_ack_cm_event(ev);
	make_qp(id);
	target = 100;
	struct ibv_mr *mr = ibv_reg_mr(id->pd, rbuf, sizeof rbuf, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *tmr = ibv_reg_mr(id->pd, &target, sizeof target, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
	if (!mr || !tmr)
		DIE("ibv_reg_mr: %s", strerror(errno));
	for (int i = 0; i < 2; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)(rbuf + 64 * i), .length = 64, .lkey = mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 100 + i, .sg_list = &sge, .num_sge = 1 }, *bad;
		if (ibv_post_recv(id->qp, &wr, &bad))
			DIE("ibv_post_recv");
	}
	struct pdata pd = { .rkey = tmr->rkey, .addr = (uintptr_t)&target };
	struct rdma_conn_param cp = contract_conn_param(RDMA_MAX_RESP_RES, RDMA_MAX_INIT_DEPTH, &pd, sizeof pd);
	if (rdma_accept(id, &cp))
		DIE("rdma_accept: %s", strerror(errno));
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_ESTABLISHED, 10000));
	struct ibv_wc wc;
	memset(&wc, 0, sizeof wc);
	int got = poll_one(id->recv_cq, &wc, 10000);
	EXPECT(got && wc.status == IBV_WC_SUCCESS && (wc.wc_flags & IBV_WC_WITH_IMM) && ntohl(wc.imm_data) == 0xBEEF &&
		       wc.byte_len == 0,
	       "a Send with Immediate of one SGE of length 0 arrives as the Immediate Data message: IBV_WC_WITH_IMM, "
	       "imm 0xbeef, byte_len 0 (got %s: status %d flags %#x imm %#x byte_len %u)",
	       got ? "a completion" : "none", wc.status, wc.wc_flags, ntohl(wc.imm_data), wc.byte_len);
	EXPECT(target == 105, "the Fetch and Add posted with IBV_SEND_INLINE added 5 at the responder (100 -> %llu)",
	       (unsigned long long)target);
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_DISCONNECTED, 20000));
	rdma_destroy_qp(id);
	ibv_dereg_mr(mr);
	ibv_dereg_mr(tmr);
	rdma_destroy_id(id);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(ec);
	return contract_end();
}

static int client(const char *addr, const char *port_s)
{
	struct rdma_event_channel *ec = contract_channel();
	struct rdma_cm_id *id = contract_active(ec, addr, contract_port(port_s), 5000);
	/* contract_active made a QP of 4 work requests; that is enough here. */
	struct ibv_mr *smr = ibv_reg_mr(id->pd, &sink, sizeof sink, IBV_ACCESS_LOCAL_WRITE);
	if (!smr)
		DIE("ibv_reg_mr: %s", strerror(errno));
	struct rdma_conn_param cp = contract_conn_param(1, 1, NULL, 0);
	if (rdma_connect(id, &cp))
		DIE("rdma_connect: %s", strerror(errno));
	struct rdma_cm_event *ev = contract_expect_event(ec, RDMA_CM_EVENT_ESTABLISHED, 10000);
	struct pdata peer;
	if (ev->param.conn.private_data_len < sizeof peer)
		DIE("private data %d", ev->param.conn.private_data_len);
	memcpy(&peer, ev->param.conn.private_data, sizeof peer);
	rdma_ack_cm_event(ev);

	sink = 7;
	struct ibv_sge s = { .addr = (uintptr_t)&sink, .length = 8, .lkey = smr->lkey };
	struct ibv_send_wr w = { .wr_id = 1, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
				 .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE },
			   *bad = NULL;
	w.wr.atomic.remote_addr = peer.addr;
	w.wr.atomic.rkey = peer.rkey;
	w.wr.atomic.compare_add = 5;
	int r = ibv_post_send(id->qp, &w, &bad);
	struct ibv_wc wc;
	memset(&wc, 0, sizeof wc);
	int got = r == 0 && poll_one(id->send_cq, &wc, 5000);
	EXPECT(r == 0 && got && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_FETCH_ADD && sink == 100,
	       "ibv_post_send(3): a Fetch and Add with IBV_SEND_INLINE is carried out as without it, the original value "
	       "in its SGE (got %d: %s; completion %s, status %d, opcode %d, sink %llu, want 100)",
	       r, r ? strerror(r) : "posted", got ? "yes" : "none", wc.status, wc.opcode, (unsigned long long)sink);

	s.length = 0;
	struct ibv_send_wr imm = { .wr_id = 2, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND_WITH_IMM,
				   .send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(0xBEEF) };
	r = ibv_post_send(id->qp, &imm, &bad);
	memset(&wc, 0, sizeof wc);
	got = r == 0 && poll_one(id->send_cq, &wc, 5000);
	EXPECT(r == 0 && got && wc.status == IBV_WC_SUCCESS && wc.wr_id == 2,
	       "ibv_post_send(3): a Send with Immediate of one SGE of length 0 is posted and completes (got %d: %s; "
	       "completion %s, status %d)",
	       r, r ? strerror(r) : "posted", got ? "yes" : "none", wc.status);
	usleep(200000);
	if (rdma_disconnect(id))
		DIE("rdma_disconnect: %s", strerror(errno));
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_DISCONNECTED, 10000));
	rdma_destroy_qp(id);
	ibv_dereg_mr(smr);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ec);
	return contract_end();
}

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, server, client);
}
