//! `Mempool::use_lcore_cache`: a thread DPDK did not start is given an lcore id of its own
//! (so its mbufs go through the pools' per-lcore caches), keeps it while it lives and gives
//! it back when it exits; an EAL thread keeps its own.

use std::sync::Barrier;
use warpcore_dpdk_sys::{lcore_id, EalBuilder, Mempool};

#[test]
fn a_plain_thread_gets_an_lcore_id_and_gives_it_back_when_it_exits() {
    let eal = EalBuilder::for_test("lcore_cache", 0, 128)
        .init()
        .expect("EAL init with --no-huge --no-pci");
    let pool =
        Mempool::new(&eal, "lcore_pool", 1023, 64, Mempool::DEFAULT_DATA_ROOM).expect("pool");

    // The main thread is the EAL's main lcore (-l 0): it keeps lcore 0.
    assert_eq!(pool.use_lcore_cache(), Some(0));
    assert_eq!(lcore_id(), 0);

    // A plain thread has none until it asks, then the same one on every call.
    let first = std::thread::scope(|s| {
        s.spawn(|| {
            assert_eq!(lcore_id(), u32::MAX);
            let id = pool.use_lcore_cache().expect("an lcore id");
            assert_ne!(id, 0);
            assert_eq!(lcore_id(), id);
            assert_eq!(pool.use_lcore_cache(), Some(id));
            // Its mbufs come and go through its cache; none is lost.
            let held: Vec<_> = (0..100).map(|_| pool.alloc().expect("mbuf")).collect();
            assert_eq!(pool.available(), 1023 - 100);
            drop(held);
            assert_eq!(pool.available(), 1023);
            id
        })
        .join()
        .expect("thread")
    });

    // Two threads at once hold two ids; the first thread's id was given back when it
    // exited (DPDK hands out the lowest free id: without the give-back these would be
    // first + 1 and first + 2).
    let both = Barrier::new(2);
    let ids: Vec<u32> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let id = pool.use_lcore_cache().expect("an lcore id");
                    both.wait(); // both hold theirs at once
                    id
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, vec![first, first + 1], "{ids:?}");
    // Every mbuf is back, in the ring or a cache.
    assert_eq!(pool.available(), 1023);
}
