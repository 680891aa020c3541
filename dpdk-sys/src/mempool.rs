//! Packet buffer pools.

use std::ffi::CString;
use std::ptr::NonNull;

use crate::{ffi, Eal, Error, Mbuf};

/// DPDK's mempool drivers whose gets or puts are single-threaded: rings created with
/// `RING_F_SP_ENQ` and/or `RING_F_SC_DEQ` (`drivers/mempool/ring`).
const SINGLE_THREAD_OPS: [&str; 3] = ["ring_sp_sc", "ring_sp_mc", "ring_mp_sc"];

/// DPDK's mempool drivers whose gets and puts index per-lcore state with `rte_lcore_id()`:
/// `bucket` (`bd->buckets[rte_lcore_id()]` in `drivers/mempool/bucket`), which a thread
/// without an lcore id (`LCORE_ID_ANY`) makes read far past the array (a SIGSEGV).
const LCORE_ONLY_OPS: [&str; 1] = ["bucket"];

/// A pool of packet mbufs (`rte_pktmbuf_pool_create`).
///
/// Pools are never freed: they live until the process exits, so an [`Mbuf`] can never outlive
/// its pool. Create them once at start-up (house rule 7: no allocation on the data path).
/// The handle is `Copy` and may be used from any thread: its gets and puts are safe for
/// several producers and consumers (a pool over operations that are not is refused when it
/// is made, see [`Mempool::new`]), and threads without an lcore id bypass the per-lcore
/// cache, which only the one thread holding that lcore id touches.
#[derive(Debug, Clone, Copy)]
pub struct Mempool {
    raw: NonNull<ffi::rte_mempool>,
    data_room: u16,
    /// [`Mempool::lcore_threads_max`], worked out once: it is read at every loop.
    lcore_threads_max: u32,
}

// SAFETY: Mempool::new hands out only pools whose get/put operations are multi-producer and
// multi-consumer safe and need no lcore id (SINGLE_THREAD_OPS and LCORE_ONLY_OPS are
// refused), and the pool is never freed, so the pointer stays valid on every thread. The
// per-lcore caches are indexed by rte_lcore_id(), which is unique to the one thread that holds it (LCORE_ID_ANY, no cache, for the others).
unsafe impl Send for Mempool {}
// SAFETY: as above; &Mempool only allows alloc and counting, which are thread-safe.
unsafe impl Sync for Mempool {}

impl Mempool {
    /// Default data room per mbuf: 2048 bytes of packet data plus DPDK's 128-byte headroom.
    pub const DEFAULT_DATA_ROOM: u16 = ffi::RTE_MBUF_DEFAULT_BUF_SIZE as u16;

    /// Creates a pool of `count` mbufs with `data_room` bytes each (headroom included), a
    /// per-lcore cache of `cache` mbufs, on the NUMA socket of the calling lcore. Every page
    /// of the pool is written once here, so that without hugepages no mbuf's first use takes
    /// a page fault on the data path (the pool is resident from the start).
    ///
    /// Fails with [`Error::Mempool`] when DPDK cannot make the pool, and when the EAL's
    /// mempool operations (`--mbuf-pool-ops-name`) are single-producer or single-consumer
    /// rings, or `bucket`: the handle may be used from any thread, and the rings race when
    /// two threads get or put at once, while `bucket` indexes per-lcore state with the
    /// calling thread's lcore id, which a thread DPDK did not start does not have (the pool
    /// is freed again then, and its name can be used anew).
    pub fn new(
        _eal: &Eal,
        name: &str,
        count: u32,
        cache: u32,
        data_room: u16,
    ) -> Result<Self, Error> {
        let cname = CString::new(name).map_err(|_| Error::NulInArgument(name.into()))?;
        // SAFETY: the EAL is initialised; cname is a valid C string for the duration of the
        // call (DPDK copies the name).
        let raw = unsafe {
            ffi::rte_pktmbuf_pool_create(
                cname.as_ptr(),
                count,
                cache,
                0,
                data_room,
                ffi::rte_socket_id() as i32,
            )
        };
        let raw = NonNull::new(raw).ok_or_else(|| Error::Mempool {
            name: name.into(),
            count,
            data_room,
            reason: Error::last_reason(),
        })?;
        // SAFETY: a pool just created (valid); the ops table entry's name is a NUL-terminated
        // array inside DPDK's static table, copied at once.
        let ops = unsafe { std::ffi::CStr::from_ptr(ffi::wc_mempool_ops_name(raw.as_ptr())) }
            .to_string_lossy()
            .into_owned();
        let unfit = if SINGLE_THREAD_OPS.contains(&ops.as_str()) {
            Some("are not safe for several threads")
        } else if LCORE_ONLY_OPS.contains(&ops.as_str()) {
            Some("need an lcore id on every thread that uses them")
        } else {
            None
        };
        if let Some(why) = unfit {
            // SAFETY: the pool was just created here and nothing else holds it or any of its
            // objects; it is freed once and `raw` is not used after.
            unsafe { ffi::rte_mempool_free(raw.as_ptr()) };
            return Err(Error::Mempool {
                name: name.into(),
                count,
                data_room,
                reason: format!(
                    "the mempool operations {ops:?} (--mbuf-pool-ops-name) {why}, and a \
                     Mempool may be used from any thread: use ring_mp_mc (the default)"
                ),
            });
        }
        // SAFETY: a pool just created, whose objects nobody holds yet; the shim writes each
        // page's first octet back unchanged (mbuf headers included) within the objects.
        unsafe { ffi::wc_mempool_prefault(raw.as_ptr()) };
        // A cache holds up to 1.5 times its size (DPDK's flush threshold): so many threads
        // that their full caches hold a quarter of the pool at most.
        let lcore_threads_max = match cache {
            0 => 0,
            c => (count / 4) / (c * 3 / 2).max(1),
        };
        Ok(Mempool {
            raw,
            data_room,
            lcore_threads_max,
        })
    }

    /// Allocates one mbuf; `None` when the pool is empty (back-pressure, not an error).
    pub fn alloc(&self) -> Option<Mbuf> {
        Mbuf::alloc(self)
    }

    /// Makes the calling thread allocate and free mbufs through the pools' per-lcore caches
    /// (the `cache` of [`Mempool::new`]), and returns its lcore id: a thread DPDK did not
    /// start (an engine thread, an application thread that drives a caller-driven core) has
    /// none, and is given one (`rte_thread_register`).
    ///
    /// Without an lcore id every mbuf a thread takes from a pool, and every one it (or its
    /// transmit queue's driver) gives back, is an atomic operation on the pool's shared ring,
    /// which all such threads of the process contend for; with one, mbufs move in bulk
    /// between the ring and the thread's cache.
    ///
    /// A cache holds up to 1.5 times its size while its thread is idle, out of every other
    /// thread's reach, so ids are given to at most [`Mempool::lcore_threads_max`] threads
    /// at once (a quarter of the pool in their caches at most). A thread without an id of
    /// its own is given none beyond that, nor when the pool has no cache, nor when DPDK has
    /// none left (`RTE_MAX_LCORE`), nor in an EAL joined as a guest
    /// ([`crate::EalBuilder::init_or_join`]): it gets `None` and works on without a cache. One
    /// refused for the bound asks again at its next call (one atomic load) and gets an id
    /// once another thread has given its back; one DPDK refused is not asked again. A
    /// thread given an id empties its caches into their pools and gives the id back
    /// (`rte_thread_unregister`) when it exits, so threads that come and go neither strand
    /// mbufs nor use up ids. DPDK's note on `rte_thread_register` applies: it does not mix
    /// with DPDK's multi-process mode (secondary processes), which Warpcore does not use.
    ///
    /// Once a thread has an id, one thread-local read a call.
    #[inline]
    pub fn use_lcore_cache(&self) -> Option<u32> {
        crate::ensure_lcore(self.lcore_threads_max())
    }

    /// How many threads [`Mempool::use_lcore_cache`] gives an lcore id to at once: so many
    /// that their caches, full, hold at most a quarter of the pool (0 without a cache).
    #[inline]
    pub fn lcore_threads_max(&self) -> u32 {
        self.lcore_threads_max
    }

    /// Data room per mbuf, headroom included.
    pub fn data_room(&self) -> u16 {
        self.data_room
    }

    /// Mbufs currently free in the pool (including per-lcore caches).
    pub fn available(&self) -> u32 {
        // SAFETY: the pool pointer is valid for the life of the process.
        unsafe { ffi::rte_mempool_avail_count(self.raw.as_ptr()) }
    }

    /// Free mbufs held in the threads' per-lcore caches ([`Mempool::use_lcore_cache`]) rather
    /// than the pool's shared ring: part of [`Mempool::available`], reachable only by the
    /// thread whose cache holds them.
    pub fn in_caches(&self) -> u32 {
        // SAFETY: the pool pointer is valid for the life of the process; the count only
        // reads the caches' lengths (a racy sum while threads use them, as DPDK's own).
        unsafe { ffi::wc_mempool_cached(self.raw.as_ptr()) }
    }

    /// Mbufs currently taken from the pool (allocated and not yet freed; per-lcore caches
    /// count as free). A figure that grows without bound is an mbuf leak.
    pub fn in_use(&self) -> u32 {
        // SAFETY: the pool pointer is valid for the life of the process.
        unsafe { ffi::rte_mempool_in_use_count(self.raw.as_ptr()) }
    }

    pub(crate) fn as_ptr(&self) -> *mut ffi::rte_mempool {
        self.raw.as_ptr()
    }
}
