/* Headers the bindings are generated from (see build.rs). */
#include <rte_config.h>
#include <rte_common.h>
#include <rte_errno.h>
#include <rte_eal.h>
#include <rte_lcore.h>
#include <rte_cycles.h>
#include <rte_mempool.h>
#include <rte_mbuf.h>
#include <rte_ring.h>
#include <rte_ethdev.h>
#include <rte_ether.h>
#include <rte_eth_ring.h>
#include <rte_pcapng.h>
#include <rte_alarm.h>
#include <rte_interrupts.h>
#include <rte_dev.h>
#include <rte_devargs.h>
#include <rte_gso.h>

/* The C shim: DPDK's `static inline` hot-path functions, made callable from Rust. */
uint16_t wc_rx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **pkts, uint16_t nb_pkts);
uint16_t wc_tx_burst(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **pkts, uint16_t nb_pkts);
uint16_t wc_tx_prepare(uint16_t port_id, uint16_t queue_id, struct rte_mbuf **pkts, uint16_t nb_pkts);
struct rte_mbuf *wc_pktmbuf_alloc(struct rte_mempool *mp);
int wc_pktmbuf_alloc_bulk(struct rte_mempool *mp, struct rte_mbuf **mbufs, unsigned count);
void wc_pktmbuf_free(struct rte_mbuf *m);
char *wc_pktmbuf_append(struct rte_mbuf *m, uint16_t len);
int wc_pktmbuf_chain(struct rte_mbuf *head, struct rte_mbuf *tail);
char *wc_pktmbuf_adj(struct rte_mbuf *m, uint16_t len);
uint16_t wc_mbuf_refcnt_update(struct rte_mbuf *m, int16_t value);
void wc_pktmbuf_attach_extbuf(struct rte_mbuf *m, void *buf_addr, uint16_t buf_len,
			      struct rte_mbuf_ext_shared_info *shinfo);
const char *wc_mempool_ops_name(const struct rte_mempool *mp);
unsigned wc_lcore_id(void);
int wc_errno(void);
uint64_t wc_tsc_cycles(void);
/* Stops and closes a port on the EAL interrupt thread (see shim.c). */
int wc_eth_dev_close_serialized(uint16_t port_id, unsigned timeout_ms);
/* The driver arguments of a port's vdev string, or NULL (see shim.c). */
const char *wc_port_devargs(uint16_t port_id);
/* Empties one lcore's cache of every pool (see shim.c). */
void wc_mempool_flush_lcore_caches(unsigned lcore_id);
/* Free mbufs in a pool's per-lcore caches (see shim.c). */
unsigned wc_mempool_cached(const struct rte_mempool *mp);
/* Maps every page of a new pool's objects (see shim.c). */
void wc_mempool_prefault(struct rte_mempool *mp);
/* Maps the net_memif shared regions once a port's link is up (see shim.c). */
int wc_memif_prefault_on_link_up(uint16_t port_id);
size_t wc_memif_prefault_regions(void);
