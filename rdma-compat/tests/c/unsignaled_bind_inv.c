/*
 * Contract: a bind or Local Invalidate posted without IBV_SEND_SIGNALED, on a QP whose
 * sq_sig_all is 0, completes without a work completion when it succeeds.
 *   ibv_post_send(3): "IBV_SEND_SIGNALED Set the completion notification indicator.
 *     Relevant only if QP was created with sq_sig_all=0" (for every opcode, IBV_WR_BIND_MW
 *     and IBV_WR_LOCAL_INV among them);
 *   ibv_bind_mw(3): mw_bind->send_flags "IBV_SEND_SIGNALED ... Set the completion
 *     notification indicator", as for a send work request.
 * An application using selective signalling sizes its CQ and counts its completions by
 * the requests it signals; an extra completion (wr_id it never expects) overruns the CQ or
 * is taken for another request.
 *   unsignaled_bind_inv -s ADDR PORT   server: accepts one connection, keeps it until the client disconnects (contract_serve)
 *   unsignaled_bind_inv -c ADDR PORT   client: the checks
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

static const char *contract_name = "unsignaled_bind_inv";
#include "contract.h"

/* Every completion of cq within ms milliseconds, their wr_ids into ids (at most max). */
static int drain(struct ibv_cq *cq, uint64_t *ids, int max, int ms)
{
	int n = 0;
	for (int i = 0; i < ms / 10; i++) {
		struct ibv_wc wc;
		while (n < max && ibv_poll_cq(cq, 1, &wc) == 1)
			ids[n++] = wc.wr_id;
		usleep(10000);
	}
	return n;
}

static int client(const char *a, const char *p)
{
	struct rdma_cm_id *id = contract_connect(a, p);
	static char buf[4096];
	struct ibv_mr *mr = ibv_reg_mr(id->pd, buf, sizeof buf,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_MW_BIND);
	struct ibv_mw *mw1 = mr ? ibv_alloc_mw(id->pd, IBV_MW_TYPE_1) : NULL;
	struct ibv_mw *mw2 = mw1 ? ibv_alloc_mw(id->pd, IBV_MW_TYPE_2) : NULL;
	if (!mw2)
		DIE("ibv_reg_mr/ibv_alloc_mw: %s", strerror(errno));
	uint64_t ids[16];

	/* ibv_bind_mw of a type 1 window, send_flags 0. */
	struct ibv_mw_bind bind = { .wr_id = 10, .send_flags = 0,
		.bind_info = { .mr = mr, .addr = (uintptr_t)buf, .length = 64,
			       .mw_access_flags = IBV_ACCESS_REMOTE_WRITE } };
	int r = ibv_bind_mw(id->qp, mw1, &bind);
	if (r)
		DIE("ibv_bind_mw: %s", strerror(r));
	int n = drain(id->send_cq, ids, 16, 300);
	EXPECT(n == 0, "ibv_bind_mw(3): an unsignaled bind (send_flags 0, sq_sig_all 0) gives no completion (got %d, first wr_id %llu)",
	       n, n ? (unsigned long long)ids[0] : 0ULL);

	/* IBV_WR_BIND_MW and IBV_WR_LOCAL_INV of a type 2 window, unsignaled, then a signaled
	 * bind: one completion, the last one's. */
	struct ibv_send_wr b1 = { .wr_id = 1, .opcode = IBV_WR_BIND_MW, .send_flags = 0 };
	b1.bind_mw.mw = mw2;
	b1.bind_mw.rkey = ibv_inc_rkey(mw2->rkey);
	b1.bind_mw.bind_info = bind.bind_info;
	struct ibv_send_wr *bad = NULL;
	if ((r = ibv_post_send(id->qp, &b1, &bad)))
		DIE("IBV_WR_BIND_MW: %s", strerror(r));
	struct ibv_send_wr inv = { .wr_id = 2, .opcode = IBV_WR_LOCAL_INV, .send_flags = 0 };
	inv.invalidate_rkey = mw2->rkey;
	if ((r = ibv_post_send(id->qp, &inv, &bad)))
		DIE("IBV_WR_LOCAL_INV: %s", strerror(r));
	struct ibv_send_wr b3 = b1;
	b3.wr_id = 3;
	b3.send_flags = IBV_SEND_SIGNALED;
	b3.bind_mw.rkey = ibv_inc_rkey(mw2->rkey);
	if ((r = ibv_post_send(id->qp, &b3, &bad)))
		DIE("IBV_WR_BIND_MW (signaled): %s", strerror(r));
	n = drain(id->send_cq, ids, 16, 500);
	EXPECT(n == 1 && ids[0] == 3,
	       "ibv_post_send(3): unsignaled IBV_WR_BIND_MW and IBV_WR_LOCAL_INV give no completion, the signaled bind one (got %d: wr_ids %llu %llu %llu)",
	       n, n > 0 ? (unsigned long long)ids[0] : 0ULL, n > 1 ? (unsigned long long)ids[1] : 0ULL,
	       n > 2 ? (unsigned long long)ids[2] : 0ULL);
	return contract_end();
}

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, contract_serve, client);
}
