/*
 * Thin C shim over DPDK's `static inline` functions. Each wrapper only forwards its
 * arguments; the safety contracts are those of the DPDK function it wraps and are restated
 * at the Rust call sites.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "wrapper.h"

/* The Rust side computes per-packet fields from these offsets (see src/mbuf.rs). */
_Static_assert(sizeof(struct rte_mbuf) == 128, "rte_mbuf is two cache lines");
_Static_assert(offsetof(struct rte_mbuf, buf_addr) == 0, "buf_addr offset");
_Static_assert(offsetof(struct rte_mbuf, data_off) == 16, "data_off offset");
_Static_assert(offsetof(struct rte_mbuf, refcnt) == 18, "refcnt offset");
_Static_assert(offsetof(struct rte_mbuf, nb_segs) == 20, "nb_segs offset");
_Static_assert(offsetof(struct rte_mbuf, port) == 22, "port offset");
_Static_assert(offsetof(struct rte_mbuf, ol_flags) == 24, "ol_flags offset");
_Static_assert(offsetof(struct rte_mbuf, pkt_len) == 36, "pkt_len offset");
_Static_assert(offsetof(struct rte_mbuf, data_len) == 40, "data_len offset");
_Static_assert(offsetof(struct rte_mbuf, buf_len) == 54, "buf_len offset");
_Static_assert(offsetof(struct rte_mbuf, next) == 64, "next offset");

uint16_t wc_rx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **pkts, uint16_t nb_pkts)
{
	return rte_eth_rx_burst(port_id, queue_id, pkts, nb_pkts);
}

uint16_t wc_tx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **pkts, uint16_t nb_pkts)
{
	return rte_eth_tx_burst(port_id, queue_id, pkts, nb_pkts);
}

uint16_t wc_tx_prepare(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **pkts, uint16_t nb_pkts)
{
	return rte_eth_tx_prepare(port_id, queue_id, pkts, nb_pkts);
}

struct rte_mbuf *wc_pktmbuf_alloc(struct rte_mempool *mp)
{
	return rte_pktmbuf_alloc(mp);
}

int wc_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned count)
{
	return rte_pktmbuf_alloc_bulk(mp, mbufs, count);
}

void wc_pktmbuf_free(struct rte_mbuf *m)
{
	rte_pktmbuf_free(m);
}

char *wc_pktmbuf_append(struct rte_mbuf *m, uint16_t len)
{
	return rte_pktmbuf_append(m, len);
}

int wc_pktmbuf_chain(struct rte_mbuf *head, struct rte_mbuf *tail)
{
	return rte_pktmbuf_chain(head, tail);
}

/* Shared mbufs for the tests of Mbuf::data_mut (src/mbuf.rs): a second owner of the same
 * mbuf, and an external buffer attached to one. */
uint16_t wc_mbuf_refcnt_update(struct rte_mbuf *m, int16_t value)
{
	return rte_mbuf_refcnt_update(m, value);
}

void wc_pktmbuf_attach_extbuf(struct rte_mbuf *m, void *buf_addr, uint16_t buf_len,
			      struct rte_mbuf_ext_shared_info *shinfo)
{
	rte_pktmbuf_attach_extbuf(m, buf_addr, RTE_BAD_IOVA, buf_len, shinfo);
}

char *wc_pktmbuf_adj(struct rte_mbuf *m, uint16_t len)
{
	return rte_pktmbuf_adj(m, len);
}

/* The name of the operations (the driver) a pool gets and puts its objects with. */
const char *wc_mempool_ops_name(const struct rte_mempool *mp)
{
	return rte_mempool_get_ops(mp->ops_index)->name;
}

unsigned wc_lcore_id(void)
{
	return rte_lcore_id();
}

int wc_errno(void)
{
	return rte_errno;
}

uint64_t wc_tsc_cycles(void)
{
	return rte_get_tsc_cycles();
}

/*
 * Closing a port on the EAL interrupt thread.
 *
 * Some drivers handle their peer's events on the interrupt thread: net_memif (DPDK 22.11)
 * runs memif_disconnect() there when the peer process closes its end, and
 * rte_eth_dev_close() runs memif_disconnect() on the calling thread. When both ends close at
 * about the same time the two calls race in one process (both unmap the shared regions and
 * free the control channel) and the process can crash on exit. An alarm callback runs on the
 * interrupt thread, so a close done there is serialised with every driver event handler.
 */
struct wc_close_req {
	uint16_t port_id;
	atomic_int done;
};

static void wc_close_cb(void *arg)
{
	struct wc_close_req *r = arg;

	rte_eth_dev_stop(r->port_id);
	rte_eth_dev_close(r->port_id);
	atomic_store(&r->done, 1);
}

/*
 * Returns 0 once the port was stopped and closed on the interrupt thread, 1 if it was
 * closed on the calling thread (called from the interrupt thread itself, or the alarm could
 * not be set), -1 if the interrupt thread did not run the close within timeout_ms (the
 * request is then left to it: its memory is deliberately not freed).
 */
int wc_eth_dev_close_serialized(uint16_t port_id, unsigned timeout_ms)
{
	struct wc_close_req *r;
	unsigned waited_us = 0;

	if (rte_thread_is_intr()) {
		rte_eth_dev_stop(port_id);
		rte_eth_dev_close(port_id);
		return 1;
	}
	r = malloc(sizeof(*r));
	if (r != NULL) {
		r->port_id = port_id;
		atomic_init(&r->done, 0);
	}
	if (r == NULL || rte_eal_alarm_set(1, wc_close_cb, r) != 0) {
		free(r);
		rte_eth_dev_stop(port_id);
		rte_eth_dev_close(port_id);
		return 1;
	}
	while (!atomic_load(&r->done)) {
		if (waited_us >= timeout_ms * 1000u)
			return -1;
		usleep(200);
		waited_us += 200;
	}
	free(r);
	return 0;
}

/*
 * The driver arguments a port was created with ("iface=veth0,framesz=10240" for
 * "net_af_packet0,iface=veth0,framesz=10240"), or NULL when it has none. The string
 * belongs to the EAL's device list and lives as long as the port.
 */
const char *wc_port_devargs(uint16_t port_id)
{
	struct rte_eth_dev_info info;
	const struct rte_devargs *da;

	if (rte_eth_dev_info_get(port_id, &info) != 0 || info.device == NULL)
		return NULL;
	da = rte_dev_devargs(info.device);
	return da == NULL ? NULL : da->args;
}

/* Returns what lcore `arg`'s cache of pool `mp` holds to the pool (rte_mempool_walk). */
static void wc_flush_one(struct rte_mempool *mp, void *arg)
{
	unsigned lcore_id = *(const unsigned *)arg;
	struct rte_mempool_cache *cache = rte_mempool_default_cache(mp, lcore_id);

	if (cache != NULL)
		rte_mempool_cache_flush(cache, mp);
}

/*
 * Empties lcore `lcore_id`'s cache of every pool into the pool. Only the thread that holds
 * that lcore id may call it (a cache has one user at a time, its lcore's thread).
 */
void wc_mempool_flush_lcore_caches(unsigned lcore_id)
{
	rte_mempool_walk(wc_flush_one, &lcore_id);
}

/* Free objects held in the per-lcore caches of `mp` (as rte_mempool_avail_count sums them). */
unsigned wc_mempool_cached(const struct rte_mempool *mp)
{
	unsigned n = 0;

	if (mp->cache_size == 0)
		return 0;
	for (unsigned i = 0; i < RTE_MAX_LCORE; i++)
		n += mp->local_cache[i].len;
	return n;
}

static void wc_touch_obj(struct rte_mempool *mp, void *opaque, void *obj, unsigned idx)
{
	volatile char *p = obj;
	size_t o;

	(void)opaque;
	(void)idx;
	for (o = 0; o < mp->elt_size; o += 4096)
		p[o] = p[o];
	p[mp->elt_size - 1] = p[mp->elt_size - 1];
}

/*
 * Writes one octet of every page of every object of a new pool (the same value back), so
 * that without hugepages the kernel maps the whole pool at start-up instead of taking a
 * page fault on the data path the first time each mbuf's data room is used.
 */
void wc_mempool_prefault(struct rte_mempool *mp)
{
	rte_mempool_obj_iter(mp, wc_touch_obj, NULL);
}

/*
 * net_memif's shared memory, mapped before the first frame instead of by it.
 *
 * net_memif keeps its rings and packet buffers in memfd regions ("memif_region_N") that the
 * client creates and the server maps when the link comes up. Nothing touches their pages
 * before traffic does, so without hugepages the first lap of each ring takes a page fault
 * per 4 KiB buffer page on both ends (~4,000 of them for 4,096 slots of 2 KiB each way),
 * on the engine core, in the middle of the first transfer. Once the link is up they are
 * populated here instead, on the EAL interrupt thread: serialised with the driver's own
 * control-channel handler, which is the only code that maps or unmaps them.
 */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/*
 * Populates [lo, hi) writable with one call, from its start: traffic fills a ring from its
 * first slot up, and the kernel populates faster than a ring fills, so after the first few
 * slots the frames find their pages mapped. Where this thread shares the engine's CPU (a
 * process confined to one CPU), the engine loses the CPU for a scheduler slice or two once
 * (measured: one of the first round trips takes up to ~1.1 ms, instead of a fault per buffer
 * page over the first ring lap; see docs/net.md).
 */
/*
 * The system call itself, not libc's madvise(): libfabric's memory monitor ("memhooks",
 * on by default) rewrites the first instructions of libc's madvise, munmap and mmap when
 * its first domain opens, to see memory being released. That happens while this thread
 * runs (the link comes up as the application sets libfabric up), and a thread inside
 * madvise() while it is rewritten crashed with SIGSEGV at __madvise+9 (fi_pingpong over
 * verbs;ofi_rxm, about one start in five; scripts/test-libfabric.sh).
 */
static void wc_populate(unsigned long lo, unsigned long hi)
{
	if (syscall(SYS_madvise, (void *)lo, hi - lo, MADV_POPULATE_WRITE) != 0 && errno == EINVAL) {
		volatile const char *p = (volatile const char *)lo;
		unsigned long o;

		for (o = 0; o < hi - lo; o += 4096)
			(void)p[o];
	}
}

/* One line of /proc/self/maps: populates it if it is a writable memif region. */
static size_t wc_prefault_line(const char *line)
{
	unsigned long lo, hi;
	char perms[8];

	if (strstr(line, "/memfd:memif_region_") == NULL)
		return 0;
	if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3 || hi <= lo || perms[0] != 'r' ||
	    perms[1] != 'w')
		return 0;
	wc_populate(lo, hi);
	return hi - lo;
}

/*
 * Populates every "memif_region_" mapping of this process writable (MADV_POPULATE_WRITE,
 * Linux 5.14; before it, a read of each page, which for shared memory maps the page
 * writable too). The contents are not changed. Returns the octets covered.
 *
 * /proc/self/maps is read with system calls into buffers on the stack, not with stdio: on
 * the EAL interrupt thread, fopen's malloc was that thread's first allocation, which creates
 * its malloc arena through libc's munmap, and libfabric's memory monitor may be rewriting
 * munmap's first instructions at that moment (SIGSEGV at __munmap+9, fi_pingpong over
 * verbs;ofi_rxm in scripts/test-libfabric.sh, once; the same race as madvise's above).
 * A line longer than the line buffer keeps its start (addresses, permissions); a memif
 * region's line is far shorter.
 */
size_t wc_memif_prefault_regions(void)
{
	char buf[4096], line[512];
	size_t total = 0, len = 0;
	long fd = syscall(SYS_openat, AT_FDCWD, "/proc/self/maps", O_RDONLY | O_CLOEXEC);
	long n, i;

	if (fd < 0)
		return 0;
	while ((n = syscall(SYS_read, fd, buf, sizeof(buf))) > 0) {
		for (i = 0; i < n; i++) {
			if (buf[i] == '\n') {
				line[len] = '\0';
				total += wc_prefault_line(line);
				len = 0;
			} else if (len < sizeof(line) - 1) {
				line[len++] = buf[i];
			}
		}
	}
	if (len > 0) {
		line[len] = '\0';
		total += wc_prefault_line(line);
	}
	syscall(SYS_close, fd);
	return total;
}

struct wc_memif_watch {
	uint16_t port_id;
	unsigned polls;
};

/* Polls the link every 1 ms for a second, then every 10 ms, until it is up. */
static void wc_memif_watch_cb(void *arg)
{
	struct wc_memif_watch *w = arg;
	struct rte_eth_link l;

	if (!rte_eth_dev_is_valid_port(w->port_id)) {
		free(w);
		return;
	}
	memset(&l, 0, sizeof(l));
	if (rte_eth_link_get_nowait(w->port_id, &l) == 0 && l.link_status == RTE_ETH_LINK_UP) {
		wc_memif_prefault_regions();
		free(w);
		return;
	}
	w->polls++;
	if (rte_eal_alarm_set(w->polls < 1000 ? 1000 : 10000, wc_memif_watch_cb, w) != 0)
		free(w);
}

/*
 * Has the interrupt thread populate the memif regions once port_id's link is up (polled;
 * net_memif raises no link event). Returns 0, or a negative errno if no alarm could be set.
 */
int wc_memif_prefault_on_link_up(uint16_t port_id)
{
	struct wc_memif_watch *w = malloc(sizeof(*w));
	int r;

	if (w == NULL)
		return -ENOMEM;
	w->port_id = port_id;
	w->polls = 0;
	r = rte_eal_alarm_set(1000, wc_memif_watch_cb, w);
	if (r != 0)
		free(w);
	return r;
}
