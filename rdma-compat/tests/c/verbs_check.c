/*
 * A C program written against the system's libibverbs and librdmacm, built against their
 * headers and linked against their libraries, then run on Warpcore's drop-ins by
 * scripts/test-rdma-compat.sh: it checks what no Debian tool exercises.
 *
 *   verbs_check -s ADDR PORT      # server
 *   verbs_check -c ADDR PORT      # client
 *
 * Server: registers 4 KiB with every right, binds a type 1 memory window (ibv_bind_mw) to
 * 512 octets of it, advertises region and window in an inline Send, waits for the client.
 * Client, over the synchronous rdma_cm API (rdma_create_ep, completions through
 * rdma_get_send_comp / rdma_get_recv_comp, so completion channels):
 *   - an RDMA Write through the window, then a Read back through it: equal;
 *   - FetchAdd 5 on a word holding 100 (the original, 100, lands in the local buffer);
 *   - CmpSwap 7 -> 9 (original 7);
 *   - an RDMA Write with Immediate 0xABCD (the server's receive has IBV_WC_WITH_IMM);
 *   - a Send "done"; the server checks every octet and word, replies "ok";
 *   - last, a Write past the window's end: IBV_WC_REM_ACCESS_ERR (the Terminate).
 * Exits 0 when every check passed, printing one line per check.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

#define DIE(...) do { fprintf(stderr, "verbs_check: " __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)
#define CHECK(c, ...) do { if (!(c)) DIE(__VA_ARGS__); printf("ok: " __VA_ARGS__); putchar('\n'); } while (0)

struct adv { uint64_t addr; uint32_t rkey; uint32_t mw_rkey; uint64_t mw_addr; uint32_t mw_len; };

static struct ibv_wc wait_send(struct rdma_cm_id *id)
{
	struct ibv_wc wc;
	if (rdma_get_send_comp(id, &wc) <= 0)
		DIE("no send completion: %s", strerror(errno));
	return wc;
}

static struct ibv_wc wait_recv(struct rdma_cm_id *id)
{
	struct ibv_wc wc;
	if (rdma_get_recv_comp(id, &wc) <= 0)
		DIE("no receive completion: %s", strerror(errno));
	return wc;
}

static struct rdma_cm_id *endpoint(const char *addr, const char *port, int passive)
{
	struct rdma_addrinfo hints, *res;
	struct ibv_qp_init_attr attr;
	struct rdma_cm_id *id;
	memset(&hints, 0, sizeof hints);
	hints.ai_port_space = RDMA_PS_TCP;
	if (passive)
		hints.ai_flags = RAI_PASSIVE;
	if (rdma_getaddrinfo(addr, port, &hints, &res))
		DIE("rdma_getaddrinfo: %s", strerror(errno));
	memset(&attr, 0, sizeof attr);
	attr.cap.max_send_wr = attr.cap.max_recv_wr = 16;
	attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
	attr.cap.max_inline_data = 64;
	attr.sq_sig_all = 1;
	if (rdma_create_ep(&id, res, NULL, &attr))
		DIE("rdma_create_ep: %s", strerror(errno));
	rdma_freeaddrinfo(res);
	return id;
}

static int server(const char *addr, const char *port)
{
	struct rdma_cm_id *listen_id = endpoint(addr, port, 1), *id;
	if (rdma_listen(listen_id, 1) || rdma_get_request(listen_id, &id))
		DIE("listen/get_request: %s", strerror(errno));
	uint8_t *buf = aligned_alloc(4096, 4096);
	memset(buf, 0, 4096);
	*(uint64_t *)(buf + 2048) = 100;
	*(uint64_t *)(buf + 2056) = 7;
	struct ibv_mr *mr = ibv_reg_mr(id->pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE |
		IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |
		IBV_ACCESS_MW_BIND);
	CHECK(mr && mr->lkey == mr->rkey, "ibv_reg_mr at the buffer's own address");
	struct ibv_mw *mw = ibv_alloc_mw(id->pd, IBV_MW_TYPE_1);
	CHECK(mw != NULL, "ibv_alloc_mw type 1 (rkey %#x)", mw ? mw->rkey : 0);
	uint8_t msg[64], rmsg[64];
	struct ibv_mr *rmr = rdma_reg_msgs(id, rmsg, sizeof rmsg);
	/* Two receives: the Write with Immediate's, then "done". */
	if (rdma_post_recv(id, (void *)1, rmsg, sizeof rmsg, rmr) ||
	    rdma_post_recv(id, (void *)2, rmsg, sizeof rmsg, rmr))
		DIE("rdma_post_recv: %s", strerror(errno));
	if (rdma_accept(id, NULL))
		DIE("rdma_accept: %s", strerror(errno));
	/* A bind is a send queue work request: the QP must be connected (RTS). */
	uint32_t old_rkey = mw->rkey;
	struct ibv_mw_bind bind = { .wr_id = 77, .send_flags = IBV_SEND_SIGNALED,
		.bind_info = { .mr = mr, .addr = (uintptr_t)(buf + 1024), .length = 512,
			       .mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ } };
	CHECK(ibv_bind_mw(id->qp, mw, &bind) == 0, "ibv_bind_mw posted");
	struct ibv_wc wc = wait_send(id);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW && wc.wr_id == 77 &&
	      mw->rkey != old_rkey, "the bind completed, the window has a new rkey %#x", mw->rkey);
	struct adv a = { (uintptr_t)buf, mr->rkey, mw->rkey, (uintptr_t)(buf + 1024), 512 };
	memcpy(msg, &a, sizeof a);
	if (rdma_post_send(id, NULL, msg, sizeof a, NULL, IBV_SEND_INLINE))
		DIE("rdma_post_send: %s", strerror(errno));
	wc = wait_send(id);
	CHECK(wc.status == IBV_WC_SUCCESS, "advertisement sent inline");
	wc = wait_recv(id);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
	      (wc.wc_flags & IBV_WC_WITH_IMM) && ntohl(wc.imm_data) == 0xABCD && wc.wr_id == 1,
	      "Write with Immediate received, imm %#x", ntohl(wc.imm_data));
	wc = wait_recv(id);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.byte_len == 5 &&
	      memcmp(rmsg, "done", 5) == 0, "the client's \"done\" received");
	int good = 1;
	for (int i = 0; i < 64; i++)
		good &= buf[1024 + i] == (uint8_t)(i * 3 + 1);
	CHECK(good, "the 64 octets written through the window are in place");
	CHECK(*(uint64_t *)(buf + 2048) == 105, "FetchAdd applied: %" PRIu64, *(uint64_t *)(buf + 2048));
	CHECK(*(uint64_t *)(buf + 2056) == 9, "CmpSwap applied: %" PRIu64, *(uint64_t *)(buf + 2056));
	CHECK(memcmp(buf + 3000, "IMMDATA!", 8) == 0, "the Write with Immediate's payload is in place");
	if (rdma_post_send(id, NULL, "ok", 3, NULL, IBV_SEND_INLINE))
		DIE("rdma_post_send: %s", strerror(errno));
	wait_send(id);
	/* The client's last Write breaks the window's bounds: our QP ends with a Terminate;
	 * a receive posted now is flushed. */
	rdma_post_recv(id, (void *)3, rmsg, sizeof rmsg, rmr);
	wc = wait_recv(id);
	CHECK(wc.status != IBV_WC_SUCCESS, "after the client's out-of-bounds Write our receive ends %s",
	      ibv_wc_status_str(wc.status));
	rdma_disconnect(id);
	rdma_dereg_mr(rmr);
	ibv_dealloc_mw(mw);
	ibv_dereg_mr(mr);
	rdma_destroy_ep(id);
	rdma_destroy_ep(listen_id);
	free(buf);
	printf("server: all checks passed\n");
	return 0;
}

static int client(const char *addr, const char *port)
{
	struct rdma_cm_id *id = endpoint(addr, port, 0);
	uint8_t *buf = aligned_alloc(4096, 4096);
	memset(buf, 0, 4096);
	struct ibv_mr *mr = ibv_reg_mr(id->pd, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
	uint8_t rmsg[64];
	struct ibv_mr *rmr = rdma_reg_msgs(id, rmsg, sizeof rmsg);
	if (!mr || !rmr || rdma_post_recv(id, NULL, rmsg, sizeof rmsg, rmr))
		DIE("client set-up: %s", strerror(errno));
	if (rdma_connect(id, NULL))
		DIE("rdma_connect: %s", strerror(errno));
	struct ibv_wc wc = wait_recv(id);
	struct adv a;
	memcpy(&a, rmsg, sizeof a);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.byte_len == sizeof a, "advertisement received");
	if (rdma_post_recv(id, NULL, rmsg, sizeof rmsg, rmr))
		DIE("rdma_post_recv: %s", strerror(errno));
	for (int i = 0; i < 64; i++)
		buf[i] = (uint8_t)(i * 3 + 1);
	if (rdma_post_write(id, NULL, buf, 64, mr, IBV_SEND_SIGNALED, a.mw_addr, a.mw_rkey))
		DIE("rdma_post_write: %s", strerror(errno));
	wc = wait_send(id);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE, "Write through the window");
	if (rdma_post_read(id, NULL, buf + 512, 64, mr, IBV_SEND_SIGNALED, a.mw_addr, a.mw_rkey))
		DIE("rdma_post_read: %s", strerror(errno));
	wc = wait_send(id);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_READ && memcmp(buf, buf + 512, 64) == 0,
	      "Read back through the window, equal");
	struct ibv_sge sge = { (uintptr_t)(buf + 1024), 8, mr->lkey };
	struct ibv_send_wr wr, *bad;
	memset(&wr, 0, sizeof wr);
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
	wr.wr.atomic.remote_addr = a.addr + 2048;
	wr.wr.atomic.rkey = a.rkey;
	wr.wr.atomic.compare_add = 5;
	if (ibv_post_send(id->qp, &wr, &bad))
		DIE("FetchAdd post: %s", strerror(errno));
	wc = wait_send(id);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_FETCH_ADD &&
	      *(uint64_t *)(buf + 1024) == 100, "FetchAdd: original %" PRIu64, *(uint64_t *)(buf + 1024));
	sge.addr = (uintptr_t)(buf + 1032);
	wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
	wr.wr.atomic.remote_addr = a.addr + 2056;
	wr.wr.atomic.compare_add = 7;
	wr.wr.atomic.swap = 9;
	if (ibv_post_send(id->qp, &wr, &bad))
		DIE("CmpSwap post: %s", strerror(errno));
	wc = wait_send(id);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_COMP_SWAP &&
	      *(uint64_t *)(buf + 1032) == 7, "CmpSwap: original %" PRIu64, *(uint64_t *)(buf + 1032));
	memcpy(buf + 2000, "IMMDATA!", 8);
	sge.addr = (uintptr_t)(buf + 2000);
	wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	wr.imm_data = htonl(0xABCD);
	wr.wr.rdma.remote_addr = a.addr + 3000;
	wr.wr.rdma.rkey = a.rkey;
	if (ibv_post_send(id->qp, &wr, &bad))
		DIE("Write with Immediate post: %s", strerror(errno));
	wc = wait_send(id);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE, "Write with Immediate");
	if (rdma_post_send(id, NULL, "done", 5, NULL, IBV_SEND_INLINE))
		DIE("rdma_post_send: %s", strerror(errno));
	wait_send(id);
	wc = wait_recv(id);
	CHECK(wc.status == IBV_WC_SUCCESS && memcmp(rmsg, "ok", 3) == 0, "the server checked everything");
	/* One octet past the window's end. An RDMA Write is not acknowledged in iWARP: it
	 * completes when sent, and the peer's Terminate (remote access error) fails the QP,
	 * so the Read posted behind it does not succeed. */
	if (rdma_post_write(id, NULL, buf, 64, mr, IBV_SEND_SIGNALED, a.mw_addr + a.mw_len - 63, a.mw_rkey) ||
	    rdma_post_read(id, NULL, buf + 512, 8, mr, IBV_SEND_SIGNALED, a.mw_addr, a.mw_rkey))
		DIE("rdma_post_write/read: %s", strerror(errno));
	struct ibv_wc w1 = wait_send(id), w2 = wait_send(id);
	CHECK(w2.status != IBV_WC_SUCCESS, "a Write past the window's end (%s), the Read behind it: %s",
	      ibv_wc_status_str(w1.status), ibv_wc_status_str(w2.status));
	rdma_disconnect(id);
	rdma_dereg_mr(rmr);
	ibv_dereg_mr(mr);
	rdma_destroy_ep(id);
	free(buf);
	printf("client: all checks passed\n");
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc != 4 || (strcmp(argv[1], "-s") && strcmp(argv[1], "-c")))
		DIE("usage: verbs_check -s|-c ADDR PORT");
	return argv[1][1] == 's' ? server(argv[2], argv[3]) : client(argv[2], argv[3]);
}
