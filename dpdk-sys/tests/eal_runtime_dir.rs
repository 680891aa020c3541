//! The EAL's runtime directory (`/var/run/dpdk/PREFIX`): DPDK makes one for its file prefix
//! and never removes it, and every Warpcore process has a prefix of its own (its process
//! id), so each run left an empty directory behind (thousands of them: the drop-in
//! libibverbs' `warpcore-verbs-c-PID`, iwperf's, the tests'). With nothing shared in it
//! (`--no-shconf`, `--in-memory`) it is removed at start, and the EAL still works.

use warpcore_dpdk_sys::{EalBuilder, Mempool};

#[test]
fn eal_runtime_dir_is_not_left_behind() {
    let eal = EalBuilder::for_test("eal_rtdir", 0, 64)
        .init()
        .expect("EAL init");
    let dir = eal.runtime_dir();
    assert!(
        dir.ends_with(format!("eal_rtdir-{}", std::process::id())),
        "{}",
        dir.display()
    );
    assert!(
        !dir.exists(),
        "{} is left behind, empty: {:?}",
        dir.display(),
        std::fs::read_dir(&dir).map(|d| d.count())
    );
    // The EAL works without it.
    Mempool::new(&eal, "eal_rtdir_pool", 1023, 0, Mempool::DEFAULT_DATA_ROOM).expect("pool");
}
