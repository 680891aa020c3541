//! `EalBuilder::init_or_join` in a process whose application started DPDK's EAL itself (as
//! a DPDK application that loads the drop-in libibverbs does): the EAL is joined, only the
//! arguments' devices are probed on it, and Warpcore's threads get no lcore id there.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int, CString};
use warpcore_dpdk_sys::{
    eal_joined, lcore_cache_threads, lcore_id, EalBuilder, Error, Mempool, Port,
};

extern "C" {
    // DPDK's own entry point, called here as the application would (this test binary links
    // librte_eal through warpcore-dpdk-sys).
    fn rte_eal_init(argc: c_int, argv: *mut *mut c_char) -> c_int;
}

/// Starts the EAL the way an application does, not through Warpcore.
fn start_as_the_application() {
    let args: Vec<CString> = [
        "app",
        "-l",
        "0",
        "--no-huge",
        "-m",
        "256",
        "--no-pci",
        "--no-shconf",
        "--no-telemetry",
        "--log-level=error",
        &format!("--file-prefix=eal_join-{}", std::process::id()),
        "--vdev=net_null0",
    ]
    .iter()
    .map(|a| CString::new(*a).expect("no NUL"))
    .collect();
    // DPDK may keep pointers into argv for the life of the process: leaked.
    let argv: &mut Vec<*mut c_char> =
        Box::leak(Box::new(args.into_iter().map(CString::into_raw).collect()));
    // SAFETY: argv holds argc valid NUL-terminated strings, never freed; this test is the
    // only caller in its process.
    let rc = unsafe { rte_eal_init(argv.len() as c_int, argv.as_mut_ptr()) };
    assert!(rc >= 0, "the application's rte_eal_init failed");
}

#[test]
fn an_eal_the_application_started_is_joined_with_only_our_devices_probed() {
    start_as_the_application();
    assert!(!eal_joined());

    let eal = EalBuilder::for_test("eal_join", 0, 128)
        .vdev("net_null1")
        .init_or_join()
        .expect("joined");
    assert!(eal.joined() && eal_joined());
    // The application's device is there, and ours was probed on its EAL.
    Port::by_name(&eal, "net_null0").expect("the application's port");
    Port::by_name(&eal, "net_null1").expect("our port, probed on join");
    assert!(matches!(
        EalBuilder::for_test("eal_join", 0, 128).init_or_join(),
        Err(Error::EalAlreadyInitialised)
    ));

    // A guest gives its threads no lcore id (that would disable the application's DPDK
    // multi-process mode); the application's own lcore keeps its id.
    let pool = Mempool::new(&eal, "join_pool", 1023, 64, Mempool::DEFAULT_DATA_ROOM).expect("pool");
    assert_eq!(pool.use_lcore_cache(), Some(0));
    let (answer, id) = std::thread::scope(|s| {
        s.spawn(|| (pool.use_lcore_cache(), lcore_id()))
            .join()
            .expect("thread")
    });
    assert_eq!((answer, id), (None, u32::MAX));
    assert_eq!(lcore_cache_threads(), 0);
}

#[test]
fn a_device_that_cannot_be_probed_on_the_joined_eal_is_named() {
    // DPDK's EAL starts once a process, and the other test starts it in this one: this test
    // runs again alone, in a child process of its own, which does the checks.
    if std::env::var_os("WC_EAL_JOIN_CHILD").is_none() {
        let out = std::process::Command::new(std::env::current_exe().expect("exe"))
            .args([
                "--exact",
                "a_device_that_cannot_be_probed_on_the_joined_eal_is_named",
            ])
            .env("WC_EAL_JOIN_CHILD", "1")
            .output()
            .expect("child");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "child: {stdout}");
        // A child that ran no test (the name above drifted from the function's) exits 0
        // too: it must have run this one.
        assert!(
            stdout.contains("test result: ok. 1 passed"),
            "the child ran no test: {stdout}"
        );
        return;
    }
    start_as_the_application();
    match EalBuilder::for_test("eal_join", 0, 128)
        .vdev("net_nosuchdriver0")
        .init_or_join()
    {
        Err(Error::EalJoin { device, .. }) => assert_eq!(device, "net_nosuchdriver0"),
        other => panic!("expected EalJoin, got {other:?}"),
    }
}
