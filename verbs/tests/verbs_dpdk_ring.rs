//! The core verbs suite between two contexts on two DPDK ring ports in one process
//! (`--no-huge --no-pci`), with a pcapng capture judged by iwdump and tshark.
#![cfg(feature = "dpdk")]

mod common;

use warpcore_verbs::dpdk::dpdk_sys::{EalBuilder, Mempool, RingPortPair};
use warpcore_verbs::dpdk::DpdkPort;
use warpcore_verbs::*;

#[test]
fn core_suite_over_net_ring_with_pcapng_judged() {
    let pid = std::process::id();
    let eal = EalBuilder::new("verbs_ring")
        .test_defaults(0, 512, &format!("wceng-ring-{pid}"))
        .log_level("error")
        .init()
        .expect("EAL with --no-huge --no-pci");
    let pool = Mempool::new(
        &eal,
        "wceng_ring_pool",
        8191,
        256,
        Mempool::DEFAULT_DATA_ROOM,
    )
    .expect("pool");
    let RingPortPair { a, b } = RingPortPair::new(&eal, "wceng", 2048).expect("ring ports");
    let mut pa = DpdkPort::from_port(a, pool, 1).expect("port a");
    let pb = DpdkPort::from_port(b, pool, 1).expect("port b");
    let dir = std::env::temp_dir().join(format!("wceng-ring-{pid}"));
    std::fs::create_dir_all(&dir).unwrap();
    let cap = dir.join("ring.pcapng");
    pa.capture_pcapng(&eal, cap.to_str().unwrap(), "wceng_cap")
        .expect("pcapng");
    let mut ca = Config::new(Device::Dpdk(pa), [198, 18, 0, 1]);
    ca.mac = Some([2, 0, 0, 0, 0, 1]);
    let mut cb = Config::new(Device::Dpdk(pb), [198, 18, 0, 2]);
    cb.mac = Some([2, 0, 0, 0, 0, 2]);
    {
        let client = Context::open(ca).expect("context a");
        let server = Context::open(cb).expect("context b");
        std::thread::scope(|s| {
            let (tx, rx) = std::sync::mpsc::channel();
            let t = s.spawn(move || common::server(&server, move || tx.send(()).unwrap()));
            rx.recv().expect("server listening");
            common::client(&client, [198, 18, 0, 2]);
            t.join().expect("server role");
        });
    }
    common::judge::judge_capture(&cap);
    let _ = std::fs::remove_dir_all(&dir);
}
