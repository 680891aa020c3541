/*
 * Contract: ibv_post_send(3) with IBV_SEND_INLINE against the QP's cap.max_inline_data
 * (ibv_create_qp(3)): "the function ibv_create_qp() will update the qp_init_attr->cap
 * struct with the actual QP values of the QP that was created; the values will be greater
 * than or equal to the values requested", and ibv_query_qp(3) reports the same. A request
 * of at most max_inline_data octets is posted, one larger is refused; an inline request of
 * no octets needs no inline room (and its SGE's L_Key "will not be checked"). Before the
 * fixes a zero-length inline Send on a QP created with max_inline_data 0 failed with ENOMEM,
 * and a QP asked for 2 inline octets got exactly 2 (libfabric's verbs provider, which asks
 * small, then offered an inject size of 2), where providers give what their QP holds. The
 * QPs are in the error state, so what is posted completes flushed. One process, no peer:
 *   post_inline
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>

static const char *contract_name = "post_inline";
#include "contract.h"

/* A QP asked for inl inline octets, moved to the error state; *got: the max_inline_data
 * ibv_create_qp returned. */
static struct ibv_qp *qp_inline(struct ibv_pd *pd, struct ibv_cq *cq, unsigned inl, unsigned *got)
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
	struct ibv_qp_attr qa;
	struct ibv_qp_init_attr qi;
	memset(&qa, 0, sizeof qa);
	memset(&qi, 0, sizeof qi);
	int r = ibv_query_qp(q, &qa, IBV_QP_CAP, &qi);
	EXPECT(r == 0 && qa.cap.max_inline_data == a.cap.max_inline_data &&
		       qi.cap.max_inline_data == a.cap.max_inline_data,
	       "ibv_query_qp(3): max_inline_data is what ibv_create_qp returned (query %d; attr %u, init_attr %u, "
	       "created %u)",
	       r, qa.cap.max_inline_data, qi.cap.max_inline_data, a.cap.max_inline_data);
	*got = a.cap.max_inline_data;
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
	unsigned cap0, cap2;

	struct ibv_qp *q0 = qp_inline(pd, cq, 0, &cap0);
	static char zero[1];
	int r = post(q0, 1, zero, 0, 0);
	EXPECT(r == 0 && completion(cq) == 1,
	       "ibv_post_send(3): an inline Send of no octets on a QP asked for max_inline_data 0 is posted (got %d: %s)",
	       r, r ? strerror(r) : "posted");

	/* Asked for 2 octets: the QP's capacity, all of it usable, and not one octet more. */
	struct ibv_qp *q2 = qp_inline(pd, cq, 2, &cap2);
	EXPECT(cap2 > 2, "ibv_create_qp(3): a QP asked for 2 inline octets gets the inline capacity it has (%u)", cap2);
	char *buf = calloc(1, (size_t)cap2 + 1);
	if (!buf)
		DIE("calloc");
	r = post(q2, 2, buf, cap2, 0);
	EXPECT(r == 0 && completion(cq) == 2,
	       "ibv_post_send(3): an inline Send of max_inline_data (%u) octets is posted, its L_Key unchecked (got %d: %s)",
	       cap2, r, r ? strerror(r) : "posted");
	r = post(q2, 3, buf, cap2 + 1, 0);
	EXPECT(r == EINVAL, "ibv_post_send(3): an inline Send of max_inline_data + 1 (%u) octets is refused with EINVAL "
	       "(got %d: %s)", cap2 + 1, r, r ? strerror(r) : "posted");

	ibv_destroy_qp(q0);
	ibv_destroy_qp(q2);
	ibv_destroy_cq(cq);
	ibv_dealloc_pd(pd);
	free(buf);
	return contract_end();
}
