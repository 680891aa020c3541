/*
 * Contract: invalid but plausible input from a C caller gets the answer rdma-core gives it,
 * never a crash, a hang or a write outside what the caller passed.
 *   _ibv_query_gid_ex (verbs.h's ibv_query_gid_ex): the entry is entry_size octets; one
 *     shorter than struct ibv_gid_entry is EINVAL (rdma-core hands entry_size to the
 *     kernel as the out attribute's length, and uverbs refuses one shorter than its
 *     struct), nothing written. Before, a whole ibv_gid_entry (32 octets) was written
 *     whatever entry_size said.
 *   ibv_post_send(3) with IBV_SEND_INLINE: an SGE of no octets is nothing to copy, whatever
 *     its addr (NULL included), as the providers' memcpy of 0 octets touches nothing.
 *     Before, such an SGE with addr NULL was made a Rust slice from a null pointer:
 *     undefined behaviour, and an abort of the process in a debug build.
 *   ibv_post_recv(3): a list longer than the receive queue stops with ENOMEM, *bad_wr at
 *     the first request not posted, nothing after it posted; a cyclic list ends there too
 *     (on a QP in the error state, where each request is flushed at once, as well).
 * One process, no peer:
 *   bad_input_bounds
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>

static const char *contract_name = "bad_input_bounds";
#include "contract.h"

static void hung(int sig)
{
	(void)sig;
	static const char m[] = "FAIL: a post did not return within 20 s (a cyclic work request list must end)\n";
	if (write(1, m, sizeof m - 1) < 0)
		_exit(3);
	_exit(1);
}

/* Flushed completions of cq within half a second of quiet; their wr_ids' sum in *sum. */
static int drain(struct ibv_cq *cq, uint64_t *sum)
{
	struct ibv_wc wc[16];
	int n = 0, quiet = 0;
	*sum = 0;
	while (quiet < 500) {
		int got = ibv_poll_cq(cq, 16, wc);
		if (got <= 0) {
			quiet++;
			usleep(1000);
			continue;
		}
		quiet = 0;
		for (int i = 0; i < got; i++)
			*sum += wc[i].wr_id;
		n += got;
	}
	return n;
}

int main(void)
{
	struct ibv_context *ctx = contract_open_device();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	static char buf[4096];
	struct ibv_mr *mr = pd ? ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) : NULL;
	struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	if (!mr || !cq)
		DIE("pd, mr, cq: %s", strerror(errno));
	signal(SIGALRM, hung);

	/* _ibv_query_gid_ex with an entry_size shorter than the struct. */
	unsigned char ent[sizeof(struct ibv_gid_entry) + 16];
	memset(ent, 0xA5, sizeof ent);
	int r = _ibv_query_gid_ex(ctx, 1, 0, (struct ibv_gid_entry *)ent, 0, 16);
	int intact = 1;
	for (size_t i = 16; i < sizeof ent; i++)
		intact &= ent[i] == 0xA5;
	EXPECT(r == EINVAL && intact,
	       "_ibv_query_gid_ex: an entry_size of 16, shorter than struct ibv_gid_entry (%zu), is EINVAL and nothing "
	       "is written past it (got %d, %s)",
	       sizeof(struct ibv_gid_entry), r, intact ? "nothing past it written" : "written past entry_size");
	struct ibv_gid_entry ge;
	r = ibv_query_gid_ex(ctx, 1, 0, &ge, 0);
	EXPECT(r == 0 && ge.port_num == 1, "ibv_query_gid_ex: the whole entry is answered (got %d)", r);

	/* An inline Send whose first SGE has no octets and no address. */
	struct ibv_qp *qp = contract_rc_qp(pd, cq, cq, NULL, 2, 1);
	struct ibv_qp_attr err = { .qp_state = IBV_QPS_ERR };
	if (ibv_modify_qp(qp, &err, IBV_QP_STATE))
		DIE("ibv_modify_qp to ERR: %s", strerror(errno));
	memcpy(buf, "inline!", 8);
	struct ibv_sge two[2] = { { .addr = 0, .length = 0, .lkey = 0 },
				  { .addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey } };
	struct ibv_send_wr iw = { .wr_id = 1, .sg_list = two, .num_sge = 2, .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE },
			   *sbad = NULL;
	r = ibv_post_send(qp, &iw, &sbad);
	uint64_t sum;
	int n = drain(cq, &sum);
	EXPECT(r == 0 && !sbad && n == 1 && sum == 1,
	       "ibv_post_send(3) IBV_SEND_INLINE: an SGE of 0 octets at NULL before one of 8 is posted (got %d, %d "
	       "completions)",
	       r, n);
	ibv_destroy_qp(qp);

	/* A receive list of 10 on a queue of 8 (the QP not connected: nothing consumes). */
	qp = contract_rc_qp(pd, cq, cq, NULL, 1, 1);
	struct ibv_sge s = { .addr = (uintptr_t)buf, .length = 64, .lkey = mr->lkey };
	struct ibv_recv_wr rw[10], *rbad = NULL;
	for (int i = 0; i < 10; i++)
		rw[i] = (struct ibv_recv_wr){ .wr_id = 100 + i, .sg_list = &s, .num_sge = 1,
					      .next = i < 9 ? &rw[i + 1] : NULL };
	alarm(20);
	r = ibv_post_recv(qp, rw, &rbad);
	alarm(0);
	EXPECT(r == ENOMEM && rbad == &rw[8],
	       "ibv_post_recv(3): 10 requests on a queue of 8 stop with ENOMEM, *bad_wr at the 9th (got %d, bad_wr %ld)",
	       r, rbad ? (long)(rbad - rw) : -1L);
	if (ibv_modify_qp(qp, &err, IBV_QP_STATE))
		DIE("ibv_modify_qp to ERR: %s", strerror(errno));
	n = drain(cq, &sum);
	EXPECT(n == 8 && sum == 8 * 100 + 28,
	       "ibv_post_recv(3): the 8 before *bad_wr were posted, nothing after it (%d flushed, wr_id sum %llu)", n,
	       (unsigned long long)sum);

	/* A cyclic list on the QP in the error state, where each request is flushed at once. */
	rw[0].next = &rw[1];
	rw[1].next = &rw[0];
	rbad = NULL;
	alarm(20);
	r = ibv_post_recv(qp, rw, &rbad);
	alarm(0);
	EXPECT(r == ENOMEM && (rbad == &rw[0] || rbad == &rw[1]),
	       "ibv_post_recv(3): a cyclic list on a QP in the error state ends with ENOMEM, *bad_wr on it (got %d)", r);
	drain(cq, &sum);
	struct ibv_send_wr sw[2], *swbad = NULL;
	for (int i = 0; i < 2; i++)
		sw[i] = (struct ibv_send_wr){ .wr_id = 200 + i, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
					      .next = &sw[1 - i] };
	alarm(20);
	r = ibv_post_send(qp, sw, &swbad);
	alarm(0);
	EXPECT(r == ENOMEM && (swbad == &sw[0] || swbad == &sw[1]),
	       "ibv_post_send(3): a cyclic list on a QP in the error state ends with ENOMEM, *bad_wr on it (got %d)", r);
	drain(cq, &sum);
	ibv_destroy_qp(qp);
	return contract_end();
}
