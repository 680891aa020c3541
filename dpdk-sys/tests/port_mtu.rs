//! `Port::mtu` after `Port::set_mtu` on a port whose MTU is past what its driver reports: a
//! net_memif server port (no peer needed) over a real EAL (no hugepages, no PCI). One test
//! function: the EAL is initialised once per process.

use warpcore_dpdk_sys::{EalBuilder, Error, Mempool, Port, PortConfig};

#[test]
fn the_mtu_follows_set_mtu_past_the_reported_maximum() {
    let dir = std::env::temp_dir().join(format!("wc-port-mtu-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("socket directory");
    let sock = dir.join("memif.sock");
    let eal = EalBuilder::for_test("port_mtu", 0, 256)
        .vdev(&format!(
            "net_memif0,role=server,socket={},socket-abstract=no",
            sock.display()
        ))
        .init()
        .expect("EAL with --no-huge --no-pci and a net_memif server");
    let pool =
        Mempool::new(&eal, "wc_mtu_pool", 1023, 0, Mempool::DEFAULT_DATA_ROOM).expect("pool");
    let mut p = Port::by_name(&eal, "net_memif0").expect("memif port");
    assert!(
        9000 + 18 > p.info().max_rx_pktlen,
        "the driver reports jumbo frames now ({}): this test needs one that does not",
        p.info().max_rx_pktlen
    );
    p.configure(
        &PortConfig {
            mtu: Some(9000),
            ..PortConfig::default()
        },
        &pool,
    )
    .expect("configure with MTU 9000 (memif's data path carries it)");
    assert_eq!(p.mtu().expect("mtu"), 9000);

    // Lowered, and raised again, past the driver's maximum: what mtu() says follows.
    p.set_mtu(4000).expect("MTU 4000 on memif's data path");
    assert_eq!(
        p.mtu().expect("mtu"),
        4000,
        "mtu() after set_mtu lowered it"
    );
    p.set_mtu(9000).expect("MTU 9000 again");
    assert_eq!(p.mtu().expect("mtu"), 9000);

    // More than memif's data path carries (16-bit packet lengths): refused, unchanged.
    let err = p.set_mtu(u16::MAX).expect_err("a 65,549-octet frame");
    assert!(matches!(err, Error::Mtu { mtu: u16::MAX, .. }), "{err}");
    assert_eq!(p.mtu().expect("mtu"), 9000);

    // Within the reported maximum the driver sets the MTU, and net_memif (DPDK 22.11) has no
    // MTU operation: refused by the driver, and the MTU is still the one set before.
    let err = p.set_mtu(1500).expect_err("net_memif has no mtu_set");
    assert!(
        matches!(err, Error::Port { ref op, .. } if op.contains("rte_eth_dev_set_mtu(1500)")),
        "{err}"
    );
    assert_eq!(p.mtu().expect("mtu"), 9000);

    drop(p);
    let _ = std::fs::remove_dir_all(&dir);
}
