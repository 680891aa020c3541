/*
 * Contract: ibv_post_send(3) with IBV_SEND_INLINE against the QP's cap.max_inline_data
 * (ibv_create_qp(3)): a request of at most max_inline_data octets is posted, one larger is
 * refused; an inline request of no octets needs no inline room (and its SGE's L_Key "will
 * not be checked"). Before the fix a zero-length inline Send on a QP created with
 * max_inline_data 0 failed with ENOMEM. The QPs are in the error state, so what is posted
 * completes flushed. One process, no peer:
 *   post_inline
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>

static const char *contract_name = "post_inline";
#include "contract.h"

static struct ibv_qp *qp_inline(struct ibv_pd *pd, struct ibv_cq *cq, unsigned inl)
{
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.send_cq = a.recv_cq = cq;
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = a.cap.max_recv_wr = 8;
	a.cap.max_send_sge = a.cap.max_recv_sge = 1;
	a.cap.max_inline_data = inl;
	struct ibv_qp *q = ibv_create_qp(pd, &a);
	if (!q)
		DIE("ibv_create_qp with max_inline_data %u: %s", inl, strerror(errno));
	EXPECT(a.cap.max_inline_data >= inl, "ibv_create_qp(3): max_inline_data at least the %u asked (%u)", inl,
	       a.cap.max_inline_data);
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_ERR };
	if (ibv_modify_qp(q, &at, IBV_QP_STATE))
		DIE("ibv_modify_qp to ERR: %s", strerror(errno));
	return q;
}

static int post(struct ibv_qp *q, uint64_t id, void *addr, uint32_t len, uint32_t lkey)
{
	struct ibv_sge s = { .addr = (uintptr_t)addr, .length = len, .lkey = lkey };
	struct ibv_send_wr w = { .wr_id = id, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE },
			   *bad = NULL;
	return ibv_post_send(q, &w, &bad);
}

/* The wr_id of the next completion within a second, or 0. */
static uint64_t completion(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	for (int i = 0; i < 1000; i++) {
		if (ibv_poll_cq(cq, 1, &wc) == 1)
			return wc.wr_id;
		usleep(1000);
	}
	return 0;
}

int main(void)
{
	struct ibv_context *ctx = contract_open_device();
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!pd || !cq)
		DIE("pd, cq: %s", strerror(errno));
	static char buf[64];

	struct ibv_qp *q0 = qp_inline(pd, cq, 0);
	int r = post(q0, 1, buf, 0, 0);
	EXPECT(r == 0 && completion(cq) == 1,
	       "ibv_post_send(3): an inline Send of no octets on a QP of max_inline_data 0 is posted (got %d: %s)", r,
	       r ? strerror(r) : "posted");

	struct ibv_qp *q16 = qp_inline(pd, cq, 16);
	r = post(q16, 2, buf, 16, 0);
	EXPECT(r == 0 && completion(cq) == 2,
	       "ibv_post_send(3): an inline Send of max_inline_data (16) octets is posted, its L_Key unchecked (got %d: %s)",
	       r, r ? strerror(r) : "posted");
	r = post(q16, 3, buf, 17, 0);
	EXPECT(r != 0, "ibv_post_send(3): an inline Send of 17 octets on a QP of max_inline_data 16 is refused (got %d)", r);

	ibv_destroy_qp(q0);
	ibv_destroy_qp(q16);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	return contract_end();
}
