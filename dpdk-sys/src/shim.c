/*
 * Thin C shim over DPDK's `static inline` functions. Each wrapper only forwards its
 * arguments; the safety contracts are those of the DPDK function it wraps and are restated
 * at the Rust call sites.
 */
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <unistd.h>
#include "wrapper.h"

/* The Rust side computes per-packet fields from these offsets (see src/mbuf.rs). */
_Static_assert(sizeof(struct rte_mbuf) == 128, "rte_mbuf is two cache lines");
_Static_assert(offsetof(struct rte_mbuf, buf_addr) == 0, "buf_addr offset");
_Static_assert(offsetof(struct rte_mbuf, data_off) == 16, "data_off offset");
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

char *wc_pktmbuf_adj(struct rte_mbuf *m, uint16_t len)
{
	return rte_pktmbuf_adj(m, len);
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
