/*
 * Contract: what libibverbs answers for inputs it refuses on an MR and a memory window.
 * - ibv_rereg_mr(3): "IBV_REREG_MR_ERR_INPUT - Old MR is valid, an input error was
 *   detected by libibverbs", unlike "IBV_REREG_MR_ERR_CMD - MR shouldn't be used".
 *   rdma-core's verbs.c answers IBV_REREG_MR_ERR_INPUT with errno EINVAL, before it asks
 *   the provider, for flags outside IBV_REREG_MR_FLAGS_SUPPORTED, for
 *   IBV_REREG_MR_CHANGE_TRANSLATION without an address or a length, and for access flags
 *   without IBV_REREG_MR_CHANGE_ACCESS. (Before, every call answered IBV_REREG_MR_ERR_CMD
 *   with EOPNOTSUPP: an application that checks the code threw away a valid MR.)
 * - ibv_reg_mr(3): IBV_ACCESS_HUGETLB says "huge pages are guaranteed to be used for this
 *   MR, applicable with IBV_ACCESS_ON_DEMAND in explicit mode only": a hint, which the
 *   kernel's ib_check_mr_access accepts (it is in IB_ACCESS_SUPPORTED) and siw ignores, so
 *   the registration succeeds there. (Before, it was EOPNOTSUPP: a program passing it for
 *   its huge-page buffers could not register them.)
 * - ibv_bind_mw(3): with IBV_ACCESS_ZERO_BASED "the address set on the 'remote_addr' field
 *   on the WR will be an offset from the MW's start address". Warpcore's windows take the
 *   region's addresses (zero-based regions are EOPNOTSUPP in ibv_reg_mr as well), so such
 *   a bind, by ibv_bind_mw or IBV_WR_BIND_MW, is refused with EOPNOTSUPP, the window's
 *   rkey unchanged. (Before, the flag was dropped and the window bound at the region's
 *   addresses: a peer sending offsets got remote access errors.) A bind without it still
 *   works on the same QP.
 * - ibv_post_send(3) IBV_WR_BIND_MW: the new rkey is checked when the bind executes, in
 *   send queue order, so a chain that binds the window under rkey + 1 and then back under
 *   the rkey it has at post time binds twice. (Before, the second was refused at post,
 *   EPERM, judged against the window's key before the first had run.)
 *   mr_mw_inputs -s ADDR PORT   server: accepts one connection, keeps it until the client disconnects (contract_serve)
 *   mr_mw_inputs -c ADDR PORT   client: the checks
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

static const char *contract_name = "mr_mw_inputs";
#include "contract.h"

/* ibv_rereg_mr with these arguments answers IBV_REREG_MR_ERR_INPUT with errno EINVAL. */
static void rereg_input(struct ibv_mr *mr, int flags, struct ibv_pd *pd, void *addr, size_t len, int access,
			const char *what)
{
	errno = 0;
	int r = ibv_rereg_mr(mr, flags, pd, addr, len, access);
	int e = errno;
	EXPECT(r == IBV_REREG_MR_ERR_INPUT && e == EINVAL,
	       "ibv_rereg_mr(3): %s is IBV_REREG_MR_ERR_INPUT with errno EINVAL, the old MR valid (got %d, errno %d)",
	       what, r, e);
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

	errno = 0;
	struct ibv_mr *hmr = ibv_reg_mr(id->pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_HUGETLB);
	int he = errno;
	EXPECT(hmr != NULL, "ibv_reg_mr(3): IBV_ACCESS_HUGETLB, a hint, registers as on siw (got %s)",
	       hmr ? "an MR" : strerror(he));
	if (hmr && ibv_dereg_mr(hmr))
		DIE("ibv_dereg_mr: %s", strerror(errno));

	rereg_input(mr, 1 << 3, NULL, NULL, 0, 0, "a flag outside IBV_REREG_MR_FLAGS_SUPPORTED");
	rereg_input(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, sizeof buf, 0,
		    "IBV_REREG_MR_CHANGE_TRANSLATION with a NULL address");
	rereg_input(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, buf, 0, 0,
		    "IBV_REREG_MR_CHANGE_TRANSLATION with a length of 0");
	rereg_input(mr, IBV_REREG_MR_CHANGE_PD, id->pd, NULL, 0, IBV_ACCESS_LOCAL_WRITE,
		    "access flags without IBV_REREG_MR_CHANGE_ACCESS");
	errno = 0;
	int r = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE);
	int e = errno;
	EXPECT(r == IBV_REREG_MR_ERR_CMD && e == EOPNOTSUPP,
	       "ibv_rereg_mr(3): valid input to a provider without rereg_mr is IBV_REREG_MR_ERR_CMD, errno EOPNOTSUPP (got %d, errno %d)",
	       r, e);

	/* ibv_bind_mw of a type 1 window, zero-based. */
	uint32_t rkey1 = mw1->rkey;
	struct ibv_mw_bind bind = { .wr_id = 10, .send_flags = IBV_SEND_SIGNALED,
		.bind_info = { .mr = mr, .addr = (uintptr_t)buf, .length = 64,
			       .mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_ZERO_BASED } };
	r = ibv_bind_mw(id->qp, mw1, &bind);
	EXPECT(r == EOPNOTSUPP && mw1->rkey == rkey1,
	       "ibv_bind_mw(3): IBV_ACCESS_ZERO_BASED is refused with EOPNOTSUPP, the rkey unchanged (got %d: %s, rkey %#x was %#x)",
	       r, r ? strerror(r) : "bound", mw1->rkey, rkey1);

	/* IBV_WR_BIND_MW of a type 2 window, zero-based. */
	uint32_t rkey2 = mw2->rkey;
	struct ibv_send_wr b = { .wr_id = 11, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED }, *bad = NULL;
	b.bind_mw.mw = mw2;
	b.bind_mw.rkey = ibv_inc_rkey(mw2->rkey);
	b.bind_mw.bind_info = bind.bind_info;
	r = ibv_post_send(id->qp, &b, &bad);
	EXPECT(r == EOPNOTSUPP && bad == &b && mw2->rkey == rkey2,
	       "ibv_post_send(3): IBV_WR_BIND_MW with IBV_ACCESS_ZERO_BASED is refused with EOPNOTSUPP, bad_wr on it (got %d: %s, bad_wr %s)",
	       r, r ? strerror(r) : "posted", bad == &b ? "on it" : "not on it");

	/* The same bind without the flag: bound, its completion the only one. */
	b.wr_id = 12;
	b.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
	bad = NULL;
	r = ibv_post_send(id->qp, &b, &bad);
	struct ibv_wc wc = { 0 };
	int n = 0;
	for (int i = 0; !r && n == 0 && i < 200; i++) {
		n = ibv_poll_cq(id->send_cq, 1, &wc);
		if (!n)
			usleep(10000);
	}
	EXPECT(r == 0 && n == 1 && wc.wr_id == 12 && wc.status == IBV_WC_SUCCESS && mw2->rkey == b.bind_mw.rkey,
	       "ibv_post_send(3): the bind without IBV_ACCESS_ZERO_BASED is bound (got %d, %d completions, wr_id %llu, %s)",
	       r, n, n == 1 ? (unsigned long long)wc.wr_id : 0ULL, n == 1 ? ibv_wc_status_str(wc.status) : "-");

	struct ibv_send_wr inv = { .wr_id = 13, .opcode = IBV_WR_LOCAL_INV, .send_flags = 0 };
	inv.invalidate_rkey = mw2->rkey;
	if (ibv_post_send(id->qp, &inv, &bad))
		DIE("IBV_WR_LOCAL_INV: %s", strerror(errno));
	usleep(100000);

	/* IBV_WR_BIND_MW under a key of the application's choosing (ibv_post_send(3): the
	 * desired new rkey), not mw->rkey plus one: bound under that key. It had to be plus
	 * one, and the engine took the key after the last bind posted, so an application that
	 * kept mw->rkey back after a bind that failed, as ibv_bind_mw(3) tells it to, had a
	 * key advertised that the window never got. */
	uint32_t chosen = (mw2->rkey & ~0xFFu) | ((mw2->rkey + 7) & 0xFFu);
	b.wr_id = 14;
	b.bind_mw.rkey = chosen;
	bad = NULL;
	r = ibv_post_send(id->qp, &b, &bad);
	n = 0;
	for (int i = 0; !r && n == 0 && i < 200; i++) {
		n = ibv_poll_cq(id->send_cq, 1, &wc);
		if (!n)
			usleep(10000);
	}
	EXPECT(r == 0 && n == 1 && wc.wr_id == 14 && wc.status == IBV_WC_SUCCESS && mw2->rkey == chosen,
	       "ibv_post_send(3): IBV_WR_BIND_MW under the application's key %#x is bound under it (got %d: %s, %d completions, %s, rkey %#x)",
	       chosen, r, r ? strerror(r) : "posted", n, n == 1 ? ibv_wc_status_str(wc.status) : "-", mw2->rkey);
	/* An rkey that names another window is refused. */
	b.wr_id = 15;
	b.bind_mw.rkey = chosen ^ 0x100;
	bad = NULL;
	r = ibv_post_send(id->qp, &b, &bad);
	EXPECT(r == EINVAL && bad == &b && mw2->rkey == chosen,
	       "ibv_post_send(3): IBV_WR_BIND_MW with an rkey of another window's index is EINVAL (got %d: %s)", r,
	       r ? strerror(r) : "posted");
	/* Two binds of the window in one chain, the second back under the rkey the
	 * window has when they are posted: valid, since the first runs before it and leaves
	 * another key (ibv_post_send(3): the adapter checks the new rkey when it executes the
	 * bind). Before, the second was refused at post (EPERM, the table's "same key" against
	 * the window's key at post time), though it would have succeeded. */
	struct ibv_send_wr b2 = b;
	b.wr_id = 17;
	b.bind_mw.rkey = (chosen & ~0xFFu) | ((chosen + 1) & 0xFFu);
	b.next = &b2;
	b2.wr_id = 18;
	b2.bind_mw.rkey = chosen;
	b2.send_flags = IBV_SEND_SIGNALED;
	b2.next = NULL;
	bad = NULL;
	r = ibv_post_send(id->qp, &b, &bad);
	b.next = NULL;
	struct ibv_wc wcs[2];
	n = 0;
	for (int i = 0; !r && n < 2 && i < 200; i++) {
		int got = ibv_poll_cq(id->send_cq, 2 - n, wcs + n);
		n += got > 0 ? got : 0;
		if (n < 2)
			usleep(10000);
	}
	EXPECT(r == 0 && n == 2 && wcs[0].wr_id == 17 && wcs[0].status == IBV_WC_SUCCESS && wcs[1].wr_id == 18 &&
		       wcs[1].status == IBV_WC_SUCCESS && mw2->rkey == chosen,
	       "ibv_post_send(3): IBV_WR_BIND_MW to rkey+1 then back to the rkey, chained, both bound (got %d: %s, "
	       "%d completions, %s / %s, rkey %#x)",
	       r, r ? strerror(r) : "posted", n, n > 0 ? ibv_wc_status_str(wcs[0].status) : "-",
	       n > 1 ? ibv_wc_status_str(wcs[1].status) : "-", mw2->rkey);
	inv.wr_id = 16;
	inv.invalidate_rkey = mw2->rkey;
	if (ibv_post_send(id->qp, &inv, &bad))
		DIE("IBV_WR_LOCAL_INV: %s", strerror(errno));
	usleep(100000);
	ibv_dealloc_mw(mw2);
	ibv_dealloc_mw(mw1);
	r = ibv_dereg_mr(mr);
	EXPECT(r == 0, "ibv_dereg_mr(3): the MR the refused calls left is deregistered (got %d)", r);
	return contract_end();
}

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, contract_serve, client);
}
