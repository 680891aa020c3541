//! Two contexts' configurations on two DPDK ring ports in one process (`--no-huge
//! --no-pci`), A's port capturing to a pcapng file.

use std::path::PathBuf;

use warpcore_verbs::dpdk::dpdk_sys::{Eal, EalBuilder, Mempool, RingPortPair};
use warpcore_verbs::dpdk::DpdkPort;
use warpcore_verbs::*;

/// The EAL (keep it alive while the contexts run), the configurations of A (198.18.0.1,
/// capturing) and B (198.18.0.2), and the capture's path. `tag` names the EAL's file
/// prefix, the pool, the rings, the capture and its folder, so that runs do not collide.
pub fn ring_pair(tag: &str) -> (Eal, Config, Config, PathBuf) {
    let pid = std::process::id();
    let eal = EalBuilder::for_test(&format!("verbs_{tag}"), 0, 512)
        .init()
        .expect("EAL with --no-huge --no-pci");
    let pool = Mempool::new(
        &eal,
        &format!("wceng_{tag}_pool"),
        8191,
        256,
        Mempool::DEFAULT_DATA_ROOM,
    )
    .expect("pool");
    let RingPortPair { a, b } =
        RingPortPair::new(&eal, &format!("wc{tag}"), 2048).expect("ring ports");
    let mut pa = DpdkPort::from_port(a, pool, 1).expect("port a");
    let pb = DpdkPort::from_port(b, pool, 1).expect("port b");
    let dir = std::env::temp_dir().join(format!("wceng-{tag}-{pid}"));
    std::fs::create_dir_all(&dir).unwrap();
    let cap = dir.join(format!("{tag}.pcapng"));
    pa.capture_pcapng(&eal, cap.to_str().unwrap(), &format!("wceng_{tag}_cap"))
        .expect("pcapng");
    let mut ca = Config::new(Device::Dpdk(pa), [198, 18, 0, 1]);
    ca.mac = Some([2, 0, 0, 0, 0, 1]);
    let mut cb = Config::new(Device::Dpdk(pb), [198, 18, 0, 2]);
    cb.mac = Some([2, 0, 0, 0, 0, 2]);
    (eal, ca, cb, cap)
}
