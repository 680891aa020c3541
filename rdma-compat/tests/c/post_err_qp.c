/*
 * Contract: work requests a failed QP (ERR) must take and complete flushed, and flags the
 * verbs give no meaning for an operation, as every rdma-core provider answers them:
 *   - ibv_bind_mw(3) "posts to the queue pair qp a request to bind the memory window";
 *     on a QP in the error state the request is posted (0) and completes with
 *     IBV_WC_WR_FLUSH_ERR, as IBV_WR_BIND_MW through ibv_post_send(3) does here and as
 *     mlx5 and rxe (whose ibv_bind_mw posts a bind work request) answer. Before: EINVAL,
 *     nothing posted, no completion, while the same bind through ibv_post_send flushed.
 *   - ibv_post_send(3): "IBV_SEND_INLINE ... Valid only for Send and RDMA Write": an
 *     atomic's SGE is the sink of the original value, no payload to inline; the flag is
 *     passed over, as it is here for an RDMA Read and as rxe passes it over (its
 *     WR_INLINE_MASK is the Sends' and Writes'). Before: EINVAL (the engine's
 *     InvalidInline), on a connected QP as on a failed one.
 *   - IBV_WR_SEND_WITH_IMM of no octets is RFC 7306's Immediate Data message whatever
 *     the SGEs that say so: one SGE of length 0 is a message of 0 octets as num_sge 0 is
 *     (ibv_post_send(3): the message is the gather list's octets). Before: EOPNOTSUPP,
 *     "with payload".
 * One process, no peer (the QP is moved from RESET to ERR):
 *   post_err_qp
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>

static const char *contract_name = "post_err_qp";
#include "contract.h"

static char buf[4096] __attribute__((aligned(64)));

/* The next completion of cq within about a second: 1 with *wc filled, 0 if none came. */
static int next_wc(struct ibv_cq *cq, struct ibv_wc *wc)
{
	for (int i = 0; i < 1000; i++) {
		int n = ibv_poll_cq(cq, 1, wc);
		if (n == 1)
			return 1;
		if (n < 0)
			DIE("ibv_poll_cq: %d", n);
		usleep(1000);
	}
	return 0;
}

/* Posts w on qp: want 0, then a completion of w's wr_id flushed. */
static void post_flushes(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_send_wr *w, const char *what)
{
	struct ibv_send_wr *bad = NULL;
	int r = ibv_post_send(qp, w, &bad);
	struct ibv_wc wc = { 0 };
	int got = r == 0 && next_wc(cq, &wc);
	EXPECT(r == 0 && got && wc.wr_id == w->wr_id && wc.status == IBV_WC_WR_FLUSH_ERR,
	       "ibv_post_send(3) on a QP in ERR: %s is posted and completes flushed (got %d: %s; completion %s, wr_id %llu, status %s)",
	       what, r, r ? strerror(r) : "posted", got ? "yes" : "none", (unsigned long long)wc.wr_id,
	       got ? ibv_wc_status_str(wc.status) : "-");
}

int main(void)
{
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp = contract_lone_qp(&pd, &cq);
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
					       IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND);
	struct ibv_mw *mw = mr ? ibv_alloc_mw(pd, IBV_MW_TYPE_1) : NULL;
	if (!mw)
		DIE("ibv_reg_mr/ibv_alloc_mw: %s", strerror(errno));
	struct ibv_qp_attr qa = { .qp_state = IBV_QPS_ERR };
	int r = ibv_modify_qp(qp, &qa, IBV_QP_STATE);
	if (r)
		DIE("ibv_modify_qp to ERR: %s", strerror(r));

	/* ibv_bind_mw of a type 1 window on the failed QP. */
	uint32_t rkey = mw->rkey;
	struct ibv_mw_bind mb = { .wr_id = 21, .send_flags = IBV_SEND_SIGNALED,
		.bind_info = { .mr = mr, .addr = (uintptr_t)buf, .length = 64,
			       .mw_access_flags = IBV_ACCESS_REMOTE_READ } };
	r = ibv_bind_mw(qp, mw, &mb);
	struct ibv_wc wc = { 0 };
	int got = r == 0 && next_wc(cq, &wc);
	EXPECT(r == 0 && got && wc.wr_id == 21 && wc.status == IBV_WC_WR_FLUSH_ERR,
	       "ibv_bind_mw(3) on a QP in ERR: posted and completes flushed, as IBV_WR_BIND_MW does (got %d: %s; completion %s, wr_id %llu, status %s)",
	       r, r ? strerror(r) : "posted", got ? "yes" : "none", (unsigned long long)wc.wr_id,
	       got ? ibv_wc_status_str(wc.status) : "-");
	/* The window was never bound under a new key: the rkey the application holds is
	 * still the window's (ibv_bind_mw(3): "fix the mw structure if the subsequent CQE
	 * for the bind operation indicates a failure"). */
	EXPECT(mw->rkey == rkey, "ibv_bind_mw(3) flushed: mw->rkey is still the window's (0x%x, got 0x%x)", rkey,
	       mw->rkey);

	/* IBV_SEND_INLINE on an RDMA Read and on the atomics: passed over alike. */
	struct ibv_sge s = { .addr = (uintptr_t)buf, .length = 8, .lkey = mr->lkey };
	struct ibv_send_wr w = { .wr_id = 31, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
				 .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE };
	w.wr.rdma.remote_addr = (uintptr_t)buf + 64;
	w.wr.rdma.rkey = mr->rkey;
	post_flushes(qp, cq, &w, "an RDMA Read with IBV_SEND_INLINE");
	memset(&w.wr, 0, sizeof w.wr);
	w.wr_id = 32;
	w.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
	w.wr.atomic.remote_addr = (uintptr_t)buf + 64;
	w.wr.atomic.rkey = mr->rkey;
	w.wr.atomic.compare_add = 1;
	post_flushes(qp, cq, &w, "a Fetch and Add with IBV_SEND_INLINE (no payload: the flag passed over)");
	w.wr_id = 33;
	w.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
	w.wr.atomic.swap = 2;
	post_flushes(qp, cq, &w, "a Compare and Swap with IBV_SEND_INLINE (no payload: the flag passed over)");

	/* A Send with Immediate of no octets, said with no SGE and with one of length 0. */
	memset(&w, 0, sizeof w);
	w.wr_id = 41;
	w.opcode = IBV_WR_SEND_WITH_IMM;
	w.send_flags = IBV_SEND_SIGNALED;
	w.imm_data = htobe32(0x01020304);
	post_flushes(qp, cq, &w, "a Send with Immediate of no octets (num_sge 0)");
	s.length = 0;
	w.wr_id = 42;
	w.sg_list = &s;
	w.num_sge = 1;
	post_flushes(qp, cq, &w, "a Send with Immediate of no octets (one SGE of length 0)");
	s.length = 1;
	w.wr_id = 43;
	struct ibv_send_wr *bad = NULL;
	r = ibv_post_send(qp, &w, &bad);
	EXPECT(r == EOPNOTSUPP && bad == &w,
	       "ibv_post_send(3): a Send with Immediate of one octet stays EOPNOTSUPP, bad_wr the request (got %d: %s)", r,
	       r ? strerror(r) : "posted");

	if (ibv_destroy_qp(qp) || ibv_dealloc_mw(mw) || ibv_dereg_mr(mr) || ibv_destroy_cq(cq) || ibv_dealloc_pd(pd))
		DIE("teardown");
	return contract_end();
}
