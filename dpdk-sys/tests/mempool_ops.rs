//! A `Mempool` is `Sync` and `Copy` and its mbufs are `Send`: any thread allocates and frees
//! through it. That is sound only over mempool operations that are safe for several
//! producers and consumers. The EAL's `--mbuf-pool-ops-name` can choose single-producer or
//! single-consumer rings (`ring_sp_sc`, ...), whose get and put race when two threads use
//! them; such a pool is refused with an error naming the operations, not handed to safe
//! code. (Its own test binary: the EAL is initialised once per process.)

use warpcore_dpdk_sys::{EalBuilder, Error, Mempool};

#[test]
fn a_pool_over_single_thread_operations_is_refused() {
    let eal = EalBuilder::for_test("mempool_ops", 0, 128)
        .arg("--mbuf-pool-ops-name=ring_sp_sc")
        .init()
        .expect("EAL with --no-huge --no-pci");
    let err = Mempool::new(&eal, "wc_sp_sc", 511, 0, Mempool::DEFAULT_DATA_ROOM)
        .expect_err("a pool whose gets and puts race across threads");
    assert!(
        matches!(err, Error::Mempool { ref name, ref reason, .. }
            if name == "wc_sp_sc" && reason.contains("ring_sp_sc")),
        "{err}"
    );
    // The refused pool was freed: its name is free again (not "File exists").
    let again = Mempool::new(&eal, "wc_sp_sc", 511, 0, Mempool::DEFAULT_DATA_ROOM)
        .expect_err("refused again");
    assert!(again.to_string().contains("ring_sp_sc"), "{again}");
}
