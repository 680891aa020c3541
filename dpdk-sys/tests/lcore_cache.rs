//! `Mempool::use_lcore_cache`: a thread DPDK did not start is given an lcore id of its own
//! (so its mbufs go through the pools' per-lcore caches) while fewer than the pool's bound
//! hold one, keeps it while it lives, and when it exits empties its caches and gives the id
//! back; an EAL thread keeps its own.

use std::sync::Barrier;
use warpcore_dpdk_sys::{lcore_cache_threads, lcore_id, EalBuilder, Mempool};

#[test]
fn a_plain_thread_gets_an_lcore_id_and_gives_it_back_when_it_exits() {
    let eal = EalBuilder::for_test("lcore_cache", 0, 128)
        .init()
        .expect("EAL init with --no-huge --no-pci");
    // 1023 mbufs, caches of 64 (up to 96 each): two threads' caches fit in a quarter.
    let pool =
        Mempool::new(&eal, "lcore_pool", 1023, 64, Mempool::DEFAULT_DATA_ROOM).expect("pool");
    assert_eq!(pool.lcore_threads_max(), 2);
    let uncached =
        Mempool::new(&eal, "lcore_nocache", 63, 0, Mempool::DEFAULT_DATA_ROOM).expect("pool");
    assert_eq!(uncached.lcore_threads_max(), 0);

    // The main thread is the EAL's main lcore (-l 0): it keeps lcore 0, counted nowhere.
    assert_eq!(pool.use_lcore_cache(), Some(0));
    assert_eq!(uncached.use_lcore_cache(), Some(0));
    assert_eq!(lcore_id(), 0);
    assert_eq!(lcore_cache_threads(), 0);

    // A plain thread has none until it asks, then the same one on every call; when it
    // exits, what its cache holds goes back to the ring.
    let first = std::thread::scope(|s| {
        s.spawn(|| {
            assert_eq!(lcore_id(), u32::MAX);
            let id = pool.use_lcore_cache().expect("an lcore id");
            assert_ne!(id, 0);
            assert_eq!(lcore_id(), id);
            assert_eq!(pool.use_lcore_cache(), Some(id));
            assert_eq!(lcore_cache_threads(), 1);
            let held: Vec<_> = (0..100).map(|_| pool.alloc().expect("mbuf")).collect();
            assert_eq!(pool.available(), 1023 - 100);
            drop(held);
            assert_eq!(pool.available(), 1023, "none lost");
            assert!(pool.in_caches() > 0, "its frees went to its cache");
            id
        })
        .join()
        .expect("thread")
    });
    assert_eq!(pool.in_caches(), 0, "the exiting thread emptied its cache");
    assert_eq!(lcore_cache_threads(), 0);

    // Two threads at once hold two ids, and a third is refused while they do (the bound),
    // then given one when it asks again after they have exited. The first thread's id was
    // given back when it exited (DPDK hands out the lowest free id: without the give-back
    // these would be first + 1 and first + 2).
    let (hold, done, asked, gone) = (
        Barrier::new(3),
        Barrier::new(3),
        Barrier::new(2),
        Barrier::new(2),
    );
    let (ids, third) = std::thread::scope(|s| {
        let holders: Vec<_> = (0..2)
            .map(|_| {
                s.spawn(|| {
                    let id = pool.use_lcore_cache();
                    hold.wait(); // both hold theirs
                    done.wait(); // until the third has asked
                    id
                })
            })
            .collect();
        let third = s.spawn(|| {
            let refused = (pool.use_lcore_cache(), lcore_id());
            asked.wait();
            gone.wait(); // the holders have exited
            (refused, pool.use_lcore_cache())
        });
        hold.wait();
        asked.wait();
        done.wait();
        let ids: Vec<Option<u32>> = holders
            .into_iter()
            .map(|h| h.join().expect("holder"))
            .collect();
        assert_eq!(lcore_cache_threads(), 0, "the holders gave their ids back");
        gone.wait();
        (ids, third.join().expect("third"))
    });
    let mut sorted = ids.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, vec![Some(first), Some(first + 1)], "{ids:?}");
    assert_eq!(third.0, (None, u32::MAX), "refused beyond the pool's bound");
    assert_eq!(third.1, Some(first), "given one once the holders had gone");
    assert_eq!(lcore_cache_threads(), 0);

    // A pool without a cache gives no id.
    let none = std::thread::scope(|s| s.spawn(|| uncached.use_lcore_cache()).join());
    assert_eq!(none.expect("thread"), None);
    assert_eq!(pool.available(), 1023);
    assert_eq!(uncached.available(), 63);
}
