//! Bindings to DPDK 22.11 LTS and the safe wrappers Warpcore's packet path is built on.
//!
//! # Contract
//!
//! * The raw bindings (bindgen output plus a C shim for DPDK's `static inline` hot-path
//!   functions) live in the private `ffi` module and never leave this crate. Everything
//!   public is safe to call.
//! * [`Eal`] is initialised at most once per process; a second attempt returns
//!   [`Error::EalAlreadyInitialised`]. Every other type needs an [`Eal`] reference to be
//!   created, so no DPDK object exists before the environment does.
//! * [`Mempool`]s live until the process exits (DPDK reclaims their memory then). That is what
//!   makes an [`Mbuf`] sound without a lifetime: the pool it came from can never go away under
//!   it. A pool may be used from any thread, so one over single-producer or single-consumer
//!   mempool operations (`--mbuf-pool-ops-name=ring_sp_sc`, ...), or over operations that
//!   index per-lcore state with the thread's lcore id (`bucket`), is refused.
//! * An [`Mbuf`] owns exactly one packet (possibly a chain of segments). It frees itself on
//!   drop; a transmit burst consumes it (the driver frees it after sending), and the mbufs a
//!   full tx ring refused are handed back to the caller, never dropped silently. A packet
//!   whose transmit offload metadata leaves its first segment, or whose first segment's
//!   buffer is not its own alone (the driver writes the headers there), is never handed to
//!   a driver ([`Mbuf::check_tx_offload`]), and [`Mbuf::set_tx_tso`] and
//!   [`Mbuf::set_tx_checksum_offload`] refuse to mark such a packet. Its bytes are written ([`Mbuf::data_mut`],
//!   [`Mbuf::append`]) only where it is the sole owner of a direct buffer; a received mbuf
//!   a driver shares with others (a clone, an external buffer, a raised reference count) is
//!   refused with [`MbufShared`] rather than written under another packet's reader. Its
//!   header (lengths, data offset, next segment, offload flags and word) is changed
//!   ([`Mbuf::adj`], [`Mbuf::chain`], [`Mbuf::set_tx_tso`], [`Mbuf::set_tx_checksum_offload`],
//!   [`Mbuf::append`], [`Gso::segment`]) only where its reference count is 1: a received
//!   `rte_mbuf` owned twice is refused ([`AdjError`], [`ChainRefused`], [`TxOffloadError`]).
//! * A [`Port`] is configured, started and stopped through its handle; its [`RxQueue`] and
//!   [`TxQueue`] handles are unique (one owner per queue, as DPDK's lock-free bursts require)
//!   and keep the device open until the last of them is dropped. Safe code cannot break
//!   that: a process opens at most one `Port` per port id ([`Error::PortInUse`]), a queue's
//!   handle is handed out again only after the last one dropped, and a port whose queue
//!   handles are alive is neither reconfigured nor stopped ([`Error::QueuesInUse`]), so no
//!   handle outlives the queue it polls. A port whose close the EAL interrupt thread did not
//!   run within 5 s of the last drop (the close is then left to it) is never opened again
//!   in the process.
//! * Set-up failures return an [`Error`] that names the argument, device or queue that failed
//!   together with DPDK's `rte_errno` text.
//!
//! # Invariants checked at compile time
//!
//! The per-packet fields (data pointer, segment and packet lengths, next segment) are read in
//! Rust straight from `struct rte_mbuf`; its size and the offsets used are asserted both here
//! and in the C shim, so a DPDK with a different layout fails to build rather than misbehave.
#![allow(unsafe_code)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

mod eal;
mod error;
pub(crate) mod ffi;
mod gso;
mod mbuf;
mod mempool;
mod pcapng;
mod port;
mod ring;

pub use eal::{Eal, EalBuilder};
pub use error::Error;
pub use gso::Gso;
pub use mbuf::{
    AdjError, ChainError, ChainRefused, Mbuf, MbufShared, RxChecksum, TxChecksumOffload,
    TxOffloadError, TxOffloadField, TxOffloadLenError, TxTso,
};
pub use mempool::Mempool;
pub use pcapng::{Direction, PcapngWriter};
pub use port::prefault_memif_regions;
#[doc(hidden)]
pub use port::stall_interrupt_thread;
pub use port::{
    LinkStatus, Offloads, Port, PortConfig, PortInfo, PortStats, RxQueue, TxQueue, XStat,
    AF_PACKET_FRAMESZ_DEFAULT, AF_PACKET_JUMBO_ARGS, AF_PACKET_JUMBO_BLOCKSZ,
    AF_PACKET_JUMBO_DATA_ROOM, AF_PACKET_JUMBO_FRAMESZ, BURST_MAX,
};
pub use ring::RingPortPair;

use std::sync::atomic::{AtomicU32, Ordering};

/// Largest Ethernet payload (IP MTU) the wrappers configure: jumbo frames up to 9000 bytes.
pub const MTU_MAX: usize = 9000;

/// Reads the time-stamp counter (`rte_get_tsc_cycles`): the clock DPDK's pcapng writer
/// expects for packet stamps, and the counter the verbs layer gives the engine's cores to
/// interpolate their clock by, where [`tsc_is_clock_source`] says it may.
pub fn tsc_cycles() -> u64 {
    // SAFETY: rte_get_tsc_cycles reads a CPU counter; it has no preconditions.
    unsafe { ffi::wc_tsc_cycles() }
}

/// Whether the time-stamp counter counts time: at a constant rate whatever the CPU's
/// frequency and sleep states (`constant_tsc` and `nonstop_tsc` in `/proc/cpuinfo`), and in
/// step across CPUs, which the kernel vouches for by keeping time with it (the current
/// clock source is `tsc`; it switches away from a TSC it finds unsynchronised). Read once.
pub fn tsc_is_clock_source() -> bool {
    static ANSWER: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ANSWER.get_or_init(|| {
        let source = std::fs::read_to_string(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        )
        .unwrap_or_default();
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let flags = cpuinfo
            .lines()
            .find(|l| l.starts_with("flags"))
            .unwrap_or_default();
        let has = |f: &str| flags.split_whitespace().any(|w| w == f);
        cfg!(target_arch = "x86_64")
            && source.trim() == "tsc"
            && has("constant_tsc")
            && has("nonstop_tsc")
    })
}

/// The lcore id of the calling thread (`u32::MAX` for threads DPDK did not start).
pub fn lcore_id() -> u32 {
    // SAFETY: rte_lcore_id reads a thread-local variable; it has no preconditions.
    unsafe { ffi::wc_lcore_id() }
}

/// Gives the calling thread an lcore id of its own if it has none and fewer than `limit`
/// threads hold one from here ([`Mempool::use_lcore_cache`]). Only ever called once the EAL
/// is up (a [`Mempool`] exists). Once decided for the thread, one thread-local read.
#[inline]
pub(crate) fn ensure_lcore(limit: u32) -> Option<u32> {
    LCORE_GUARD.with(|g| {
        if g.tried.get() {
            g.id.get()
        } else {
            decide_lcore(g, limit)
        }
    })
}

/// [`ensure_lcore`]'s first call on a thread (and the calls of a thread refused for the
/// bound, until it gets an id).
#[cold]
fn decide_lcore(g: &LcoreGuard, limit: u32) -> Option<u32> {
    let id = lcore_id();
    if id != LCORE_ID_ANY {
        // An EAL thread, or one registered by its own code: its id is its own.
        g.tried.set(true);
        g.id.set(Some(id));
        return Some(id);
    }
    if eal_joined() {
        // A guest in the application's EAL: registering a thread would disable DPDK's
        // multi-process mode for the application (rte_thread_register calls
        // rte_mp_disable), whose secondary processes could no longer attach.
        g.tried.set(true);
        return None;
    }
    // Refused while `limit` threads hold an id: asked again at the next call (one atomic
    // load), so the thread gets one once another has given its back.
    let counted = LCORE_THREADS
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < limit).then_some(n + 1)
        })
        .is_ok();
    if !counted {
        return None;
    }
    g.tried.set(true);
    // SAFETY: the EAL is initialised (the caller holds a Mempool); the call touches only
    // DPDK's lcore table (under its own lock) and this thread's thread-local lcore id.
    let rc = unsafe { ffi::rte_thread_register() };
    let id = lcore_id();
    if rc != 0 || id == LCORE_ID_ANY {
        // DPDK has no id left (RTE_MAX_LCORE): not asked again.
        LCORE_THREADS.fetch_sub(1, Ordering::AcqRel);
        return None;
    }
    g.registered.set(true);
    g.id.set(Some(id));
    Some(id)
}

/// Whether this process's EAL is its application's, joined as a guest
/// ([`EalBuilder::init_or_join`]).
pub fn eal_joined() -> bool {
    eal::EAL_JOINED.load(Ordering::Relaxed)
}

/// Threads that hold an lcore id from [`ensure_lcore`] now.
static LCORE_THREADS: AtomicU32 = AtomicU32::new(0);

/// The threads that hold an lcore id from [`Mempool::use_lcore_cache`] now.
pub fn lcore_cache_threads() -> u32 {
    LCORE_THREADS.load(Ordering::Acquire)
}

/// `LCORE_ID_ANY`: the lcore id of a thread that has none.
const LCORE_ID_ANY: u32 = u32::MAX;

/// Gives a registered thread's lcore id back when the thread exits ([`ensure_lcore`]), its
/// caches emptied into their pools first.
struct LcoreGuard {
    /// [`ensure_lcore`] decided for good on this thread (`id` is its answer).
    tried: std::cell::Cell<bool>,
    /// Its answer.
    id: std::cell::Cell<Option<u32>>,
    /// It registered the thread (which then gives its id back when it exits).
    registered: std::cell::Cell<bool>,
}

impl Drop for LcoreGuard {
    fn drop(&mut self) {
        if self.registered.get() {
            if let Some(id) = self.id.get() {
                // SAFETY: runs on the exiting thread that holds lcore `id` (thread-local
                // destructors run on their thread), the only user of that id's caches; its
                // DPDK thread-locals (C `__thread` variables, without destructors) are
                // still in place. The pools are never freed while the process runs.
                unsafe { ffi::wc_mempool_flush_lcore_caches(id) };
            }
            // SAFETY: as above; the thread uses no DPDK object after this.
            unsafe { ffi::rte_thread_unregister() };
            LCORE_THREADS.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

thread_local! {
    static LCORE_GUARD: LcoreGuard = const {
        LcoreGuard {
            tried: std::cell::Cell::new(false),
            id: std::cell::Cell::new(None),
            registered: std::cell::Cell::new(false),
        }
    };
}

/// Returns `rte_errno` of the calling thread.
pub(crate) fn errno() -> i32 {
    // SAFETY: reads DPDK's thread-local errno; no preconditions.
    unsafe { ffi::wc_errno() }
}

/// The text DPDK gives for an errno value.
pub(crate) fn strerror(code: i32) -> String {
    // SAFETY: rte_strerror returns a pointer to a static or thread-local NUL-terminated
    // string, valid until the next call on this thread; it is copied out at once.
    unsafe {
        let p = ffi::rte_strerror(code);
        if p.is_null() {
            return format!("errno {code}");
        }
        std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

// Layout pins shared with src/shim.c (see the crate docs).
const _: () = {
    use core::mem::{offset_of, size_of};
    use ffi::rte_mbuf;
    assert!(size_of::<rte_mbuf>() == 128);
    assert!(offset_of!(rte_mbuf, buf_addr) == 0);
    assert!(offset_of!(rte_mbuf, data_off) == 16);
    assert!(offset_of!(rte_mbuf, refcnt) == 18);
    assert!(offset_of!(rte_mbuf, nb_segs) == 20);
    assert!(offset_of!(rte_mbuf, port) == 22);
    assert!(offset_of!(rte_mbuf, ol_flags) == 24);
    assert!(offset_of!(rte_mbuf, pkt_len) == 36);
    assert!(offset_of!(rte_mbuf, data_len) == 40);
    assert!(offset_of!(rte_mbuf, buf_len) == 54);
    assert!(offset_of!(rte_mbuf, next) == 64);
};
