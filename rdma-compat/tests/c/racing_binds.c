/*
 * Contract: binds of one memory window posted from several threads at once (ibv_bind_mw
 * and IBV_WR_BIND_MW; a misuse whose outcome ibv_bind_mw(3) leaves to the provider, but C
 * callers do it) are safe in the library, and leave mw->rkey the rkey of the last bind
 * posted: the key the application's next ibv_inc_rkey advances from, so that a bind under
 * ibv_inc_rkey(mw->rkey) after the race succeeds.
 *   ibv_bind_mw(3): a successful bind gives the window its new rkey (mw->rkey);
 *   ibv_inc_rkey(3): the key of the next bind, from the rkey the window has.
 * (The library took a `&mut` to the window's state per bind, two aliasing `&mut` when two
 * threads bound it at once, undefined behaviour; a race between two plain stores of
 * mw->rkey could also leave the earlier bind's key, and the bind under its successor then
 * named the window's current key and failed. Neither shows every run: this runs the race.)
 *   racing_binds -s ADDR PORT   server: accepts one connection, keeps it until the client disconnects (contract_serve)
 *   racing_binds -c ADDR PORT   client: the checks
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>

static const char *contract_name = "racing_binds";
#include "contract.h"

#define THREADS 4
#define BINDS 200

static struct rdma_cm_id *id;
static struct ibv_mr *mr;
static struct ibv_mw *mw;
static char buf[4096];
static int bad_errno[THREADS];

static void *binder(void *arg)
{
	int t = (int)(intptr_t)arg;
	for (int i = 0; i < BINDS; i++) {
		struct ibv_mw_bind bind = { .wr_id = 100, .send_flags = 0,
			.bind_info = { .mr = mr, .addr = (uintptr_t)buf, .length = 64,
				       .mw_access_flags = IBV_ACCESS_REMOTE_WRITE } };
		int r;
		/* A full send queue (unsignaled binds still hold their slots until they run):
		 * again. */
		while ((r = ibv_bind_mw(id->qp, mw, &bind)) == ENOMEM)
			sched_yield();
		if (r && !bad_errno[t])
			bad_errno[t] = r;
	}
	return NULL;
}

static int client(const char *a, const char *p)
{
	id = contract_connect(a, p);
	mr = ibv_reg_mr(id->pd, buf, sizeof buf,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_MW_BIND);
	mw = mr ? ibv_alloc_mw(id->pd, IBV_MW_TYPE_1) : NULL;
	if (!mw)
		DIE("ibv_reg_mr/ibv_alloc_mw: %s", strerror(errno));
	uint32_t index = mw->rkey & ~0xFFu;

	pthread_t th[THREADS];
	for (int t = 0; t < THREADS; t++)
		if (pthread_create(&th[t], NULL, binder, (void *)(intptr_t)t))
			DIE("pthread_create");
	for (int t = 0; t < THREADS; t++)
		pthread_join(th[t], NULL);
	int bad = 0;
	for (int t = 0; t < THREADS; t++)
		if (bad_errno[t])
			bad = bad_errno[t];
	EXPECT(!bad, "%d threads x %d racing ibv_bind_mw of one window are all posted (one failed: %s)",
	       THREADS, BINDS, bad ? strerror(bad) : "");
	EXPECT((mw->rkey & ~0xFFu) == index, "after the race mw->rkey keeps the window's index (0x%x, then 0x%x)",
	       index, mw->rkey);

	/* Every bind run (none signaled): a signaled bind under the next key after the
	 * rkey left must succeed. */
	struct ibv_send_wr b = { .wr_id = 7, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED };
	b.bind_mw.mw = mw;
	b.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	b.bind_mw.bind_info.mr = mr;
	b.bind_mw.bind_info.addr = (uintptr_t)buf;
	b.bind_mw.bind_info.length = 64;
	b.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
	struct ibv_send_wr *badwr = NULL;
	int r;
	while ((r = ibv_post_send(id->qp, &b, &badwr)) == ENOMEM)
		usleep(1000);
	EXPECT(r == 0, "IBV_WR_BIND_MW under ibv_inc_rkey(mw->rkey) after the race is posted (%s)", strerror(r));
	struct ibv_wc wc = { 0 };
	int n = 0;
	for (int i = 0; i < 300 && n == 0; i++) {
		n = ibv_poll_cq(id->send_cq, 1, &wc);
		if (!n)
			usleep(10000);
	}
	EXPECT(n == 1 && wc.wr_id == 7 && wc.status == IBV_WC_SUCCESS,
	       "the bind under ibv_inc_rkey(mw->rkey) after the race succeeds: mw->rkey was the last bind's (got %d, wr_id %llu, %s)",
	       n, (unsigned long long)wc.wr_id, n == 1 ? ibv_wc_status_str(wc.status) : "none");
	EXPECT(r == 0 && mw->rkey == b.bind_mw.rkey, "mw->rkey is then that bind's (0x%x, posted 0x%x)", mw->rkey,
	       b.bind_mw.rkey);
	return contract_end();
}

int main(int argc, char **argv)
{
	return contract_sides(argc, argv, contract_serve, client);
}
