//! A `Mempool` is `Sync` and `Copy` and its mbufs are `Send`: any thread allocates and frees
//! through it, a thread without an lcore id (`LCORE_ID_ANY`) too (one the pool's bound gave
//! none, a pool without a cache, a guest in the application's EAL). DPDK's `bucket` mempool
//! operations (`--mbuf-pool-ops-name=bucket`, shipped and loaded by Debian's DPDK) index
//! per-lcore stacks with `rte_lcore_id()` in every get and put (`bd->buckets[rte_lcore_id()]`
//! in `drivers/mempool/bucket`): from such a thread they read far past that array, and the
//! first allocation of a plain `std::thread` crashed the process with SIGSEGV (safe code).
//! Such a pool is refused with an error naming the operations, as the single-thread rings
//! are (`mempool_ops.rs`). (Its own test binary: the EAL is initialised once per process.)

use warpcore_dpdk_sys::{EalBuilder, Error, Mempool};

#[test]
fn a_pool_over_per_lcore_operations_is_refused() {
    let eal = EalBuilder::for_test("mempool_bucket", 0, 256)
        .arg("--mbuf-pool-ops-name=bucket")
        .init()
        .expect("EAL with --no-huge --no-pci");
    let err = Mempool::new(&eal, "wc_bucket", 511, 0, Mempool::DEFAULT_DATA_ROOM)
        .expect_err("a pool whose gets and puts need an lcore id");
    assert!(
        matches!(err, Error::Mempool { ref name, ref reason, .. }
            if name == "wc_bucket" && reason.contains("\"bucket\"")),
        "{err}"
    );
    // The refused pool was freed: its name is free again (not "File exists").
    let again = Mempool::new(&eal, "wc_bucket", 511, 0, Mempool::DEFAULT_DATA_ROOM)
        .expect_err("refused again");
    assert!(again.to_string().contains("bucket"), "{again}");
}
