/*
 * Contract checks on one connection:
 * 1. ibv_post_send(3) from several threads at once on one QP (libibverbs' verbs are thread
 *    safe): every request completes once, successfully.
 * 2. A Send with Immediate (IBV_WR_SEND_WITH_IMM, no payload) arrives as Warpcore
 *    documents it (docs/rdma-compat.md, "Send with Immediate"): it travels as RFC 7306's
 *    Immediate Data message, the same message a Write with Immediate ends with, so the
 *    receiver sees IBV_WC_RECV_RDMA_WITH_IMM with IBV_WC_WITH_IMM, the immediate data and a
 *    byte_len of 0, not the IBV_WC_RECV ibv_poll_cq(3) gives a Send with Immediate on
 *    InfiniBand: the wire cannot tell the two apart.
 * 3. After the connection ends (DISCONNECTED), the receives still posted complete with
 *    IBV_WC_WR_FLUSH_ERR, on both sides.
 *   threaded_post_imm_flush -s ADDR PORT | -c ADDR PORT
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <pthread.h>
#include <arpa/inet.h>
#include <rdma/rdma_cma.h>
static const char *contract_name = "threaded_post_imm_flush";
#include "contract.h"

struct pdata { uint32_t rkey; uint64_t addr; } __attribute__((packed));

static char sbuf[1 << 16];
static char rbuf[64 * 64];

static void make_qp(struct rdma_cm_id *id)
{
	struct ibv_qp_init_attr at;
	memset(&at, 0, sizeof at);
	at.qp_type = IBV_QPT_RC;
	at.cap.max_send_wr = 64;
	at.cap.max_recv_wr = 64;
	at.cap.max_send_sge = at.cap.max_recv_sge = 1;
	if (rdma_create_qp(id, NULL, &at))
		DIE("rdma_create_qp: %s", strerror(errno));
}

static int post_recvs(struct rdma_cm_id *id, struct ibv_mr *mr, int n)
{
	for (int i = 0; i < n; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)(rbuf + 64 * i), .length = 64, .lkey = mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 1000 + i, .sg_list = &sge, .num_sge = 1 }, *bad;
		if (ibv_post_recv(id->qp, &wr, &bad))
			DIE("ibv_post_recv");
	}
	return n;
}

/* Polls cq until want completions or ms pass; returns how many, in wc. */
static int poll_for(struct ibv_cq *cq, struct ibv_wc *wc, int want, int ms)
{
	int got = 0;
	for (int t = 0; t < ms && got < want; t++) {
		int n = ibv_poll_cq(cq, want - got, wc + got);
		if (n < 0)
			DIE("ibv_poll_cq %d", n);
		got += n;
		if (got < want)
			usleep(1000);
	}
	return got;
}

static int server(const char *addr, const char *port_s)
{
	struct rdma_event_channel *ec = contract_channel();
	struct rdma_cm_id *l = contract_listener(ec, addr, contract_port(port_s));
	struct rdma_cm_event *ev = contract_expect_event(ec, RDMA_CM_EVENT_CONNECT_REQUEST, 10000);
	struct rdma_cm_id *id = ev->id;
	rdma_ack_cm_event(ev);
	make_qp(id);
	struct ibv_mr *mr = ibv_reg_mr(id->pd, rbuf, sizeof rbuf, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *smr = ibv_reg_mr(id->pd, sbuf, sizeof sbuf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!mr || !smr)
		DIE("ibv_reg_mr: %s", strerror(errno));
	int posted = post_recvs(id, mr, 16);
	struct pdata pd = { .rkey = smr->rkey, .addr = (uintptr_t)sbuf };
	struct rdma_conn_param cp = contract_conn_param(RDMA_MAX_RESP_RES, RDMA_MAX_INIT_DEPTH, &pd, sizeof pd);
	if (rdma_accept(id, &cp))
		DIE("rdma_accept: %s", strerror(errno));
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_ESTABLISHED, 10000));
	struct ibv_wc wc[64];
	memset(wc, 0, sizeof wc);
	if (poll_for(id->recv_cq, wc, 1, 10000) != 1)
		DIE("no receive completion for the Send with Immediate");
	posted--;
	EXPECT(wc[0].status == IBV_WC_SUCCESS && wc[0].opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
		       (wc[0].wc_flags & IBV_WC_WITH_IMM) && ntohl(wc[0].imm_data) == 0x1234 && wc[0].byte_len == 0,
	       "a Send with Immediate (no payload) is received as RFC 7306's Immediate Data message, as documented: "
	       "IBV_WC_RECV_RDMA_WITH_IMM with IBV_WC_WITH_IMM, the immediate data, byte_len 0 (status %d opcode %d "
	       "(IBV_WC_RECV %d, IBV_WC_RECV_RDMA_WITH_IMM %d) flags %#x imm %#x byte_len %u)",
	       wc[0].status, wc[0].opcode, IBV_WC_RECV, IBV_WC_RECV_RDMA_WITH_IMM, wc[0].wc_flags, ntohl(wc[0].imm_data),
	       wc[0].byte_len);
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_DISCONNECTED, 20000));
	int n = poll_for(id->recv_cq, wc, posted, 3000);
	int flushed = 0;
	for (int i = 0; i < n; i++)
		flushed += wc[i].status == IBV_WC_WR_FLUSH_ERR;
	EXPECT(flushed == posted, "after DISCONNECTED the %d receives still posted complete flushed (got %d, %d flushed)",
	       posted, n, flushed);
	rdma_destroy_qp(id);
	ibv_dereg_mr(mr);
	ibv_dereg_mr(smr);
	rdma_destroy_id(id);
	rdma_destroy_id(l);
	rdma_destroy_event_channel(ec);
	return contract_end();
}

#define THREADS 4
#define PER_THREAD 2000
static struct rdma_cm_id *cid;
static struct ibv_mr *cmr;
static struct pdata peer;
static int post_errors[THREADS];
/* Requests posted and not yet polled, held below the CQ's depth (64) by the posters: the
 * application's share of the contract (a CQ holds every completion not yet polled). */
static volatile int outstanding;

static void *poster(void *arg)
{
	int t = (int)(intptr_t)arg;
	for (int i = 0; i < PER_THREAD; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)(sbuf + 8 * t), .length = 8, .lkey = cmr->lkey };
		struct ibv_send_wr wr = { .wr_id = (uint64_t)t * PER_THREAD + i, .sg_list = &sge, .num_sge = 1,
					  .opcode = IBV_WR_RDMA_WRITE, .send_flags = IBV_SEND_SIGNALED },
				   *bad = NULL;
		wr.wr.rdma.remote_addr = peer.addr + 8 * t;
		wr.wr.rdma.rkey = peer.rkey;
		while (__atomic_add_fetch(&outstanding, 1, __ATOMIC_SEQ_CST) > 64) {
			__atomic_sub_fetch(&outstanding, 1, __ATOMIC_SEQ_CST);
			sched_yield();
		}
		for (;;) {
			int r = ibv_post_send(cid->qp, &wr, &bad);
			if (r == 0)
				break;
			if (r == ENOMEM) {
				sched_yield();
				continue;
			}
			post_errors[t]++;
			break;
		}
	}
	return NULL;
}

static int client(const char *addr, const char *port_s)
{
	struct rdma_event_channel *ec = contract_channel();
	struct sockaddr_in dst = contract_sockaddr(addr, contract_port(port_s));
	if (rdma_create_id(ec, &cid, NULL, RDMA_PS_TCP))
		DIE("rdma_create_id");
	if (rdma_resolve_addr(cid, NULL, (struct sockaddr *)&dst, 2000))
		DIE("rdma_resolve_addr: %s", strerror(errno));
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_ADDR_RESOLVED, 5000));
	if (rdma_resolve_route(cid, 2000))
		DIE("rdma_resolve_route");
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_ROUTE_RESOLVED, 5000));
	make_qp(cid);
	cmr = ibv_reg_mr(cid->pd, sbuf, sizeof sbuf, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *rmr = ibv_reg_mr(cid->pd, rbuf, sizeof rbuf, IBV_ACCESS_LOCAL_WRITE);
	if (!cmr || !rmr)
		DIE("ibv_reg_mr");
	int posted = post_recvs(cid, rmr, 4);
	if (rdma_connect(cid, NULL))
		DIE("rdma_connect: %s", strerror(errno));
	struct rdma_cm_event *ev = contract_expect_event(ec, RDMA_CM_EVENT_ESTABLISHED, 10000);
	if (ev->param.conn.private_data_len < sizeof peer)
		DIE("private data %d", ev->param.conn.private_data_len);
	memcpy(&peer, ev->param.conn.private_data, sizeof peer);
	rdma_ack_cm_event(ev);

	pthread_t th[THREADS];
	for (int t = 0; t < THREADS; t++)
		pthread_create(&th[t], NULL, poster, (void *)(intptr_t)t);
	static char seen[THREADS * PER_THREAD];
	int got = 0, bad_status = 0, dup = 0;
	struct ibv_wc wc[32];
	for (int spins = 0; got < THREADS * PER_THREAD && spins < 20000000; spins++) {
		int n = ibv_poll_cq(cid->send_cq, 32, wc);
		if (n < 0)
			DIE("poll");
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS)
				bad_status++;
			else if (wc[i].wr_id < THREADS * PER_THREAD && seen[wc[i].wr_id]++)
				dup++;
		}
		got += n;
		__atomic_sub_fetch(&outstanding, n, __ATOMIC_SEQ_CST);
		if (!n)
			sched_yield();
	}
	int perr = 0;
	for (int t = 0; t < THREADS; t++) {
		pthread_join(th[t], NULL);
		perr += post_errors[t];
	}
	EXPECT(got == THREADS * PER_THREAD && !bad_status && !dup && !perr,
	       "ibv_post_send(3) from %d threads at once on one QP: %d requests, each completes once, successfully "
	       "(completions %d, in error %d, duplicates %d, posts failed %d)",
	       THREADS, THREADS * PER_THREAD, got, bad_status, dup, perr);

	struct ibv_send_wr imm = { .wr_id = 77, .num_sge = 0, .opcode = IBV_WR_SEND_WITH_IMM,
				   .send_flags = IBV_SEND_SIGNALED, .imm_data = htonl(0x1234) }, *bad;
	if (ibv_post_send(cid->qp, &imm, &bad))
		DIE("post send with imm: %s", strerror(errno));
	if (poll_for(cid->send_cq, wc, 1, 5000) != 1 || wc[0].status != IBV_WC_SUCCESS)
		DIE("send with imm did not complete");
	usleep(200000);
	if (rdma_disconnect(cid))
		DIE("rdma_disconnect: %s", strerror(errno));
	rdma_ack_cm_event(contract_expect_event(ec, RDMA_CM_EVENT_DISCONNECTED, 10000));
	int n = poll_for(cid->recv_cq, wc, posted, 3000);
	int flushed = 0;
	for (int i = 0; i < n; i++)
		flushed += wc[i].status == IBV_WC_WR_FLUSH_ERR;
	EXPECT(flushed == posted, "after DISCONNECTED the %d receives still posted complete flushed (got %d, %d flushed)",
	       posted, n, flushed);
	rdma_destroy_qp(cid);
	ibv_dereg_mr(cmr);
	ibv_dereg_mr(rmr);
	rdma_destroy_id(cid);
	rdma_destroy_event_channel(ec);
	return contract_end();
}

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, server, client);
}
