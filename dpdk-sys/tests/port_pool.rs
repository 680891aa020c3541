//! `Port::configure` refuses a pool whose mbufs cannot hold a whole frame of the MTU on a
//! port that sends no chained mbufs (net_null has no `RTE_ETH_TX_OFFLOAD_MULTI_SEGS`), and
//! takes it on one that does (net_ring). Over a real EAL (no hugepages, no PCI). One test
//! function: the EAL is initialised once per process.

use warpcore_dpdk_sys::{EalBuilder, Error, Mempool, Port, PortConfig, RingPortPair};

fn mtu(mtu: Option<u16>) -> PortConfig {
    PortConfig {
        mtu,
        rx_desc: 256,
        tx_desc: 256,
        ..PortConfig::default()
    }
}

#[test]
fn a_pool_too_small_for_the_mtu_is_refused_where_the_port_sends_no_chains() {
    let eal = EalBuilder::for_test("port_pool", 0, 256)
        .vdev("net_null0")
        .init()
        .expect("EAL with --no-huge --no-pci and a net_null port");
    // 1,024 octets past the 128-octet headroom; the default holds 2,048.
    let small = Mempool::new(&eal, "wc_pool_small", 1023, 0, 1024 + 128).expect("small pool");
    let default =
        Mempool::new(&eal, "wc_pool_default", 1023, 0, Mempool::DEFAULT_DATA_ROOM).expect("pool");

    let mut null = Port::by_name(&eal, "net_null0").expect("net_null port");
    assert_eq!(
        null.info().tx_offload_capa,
        0,
        "net_null offers no tx offload, MULTI_SEGS included"
    );
    // The default MTU, 1500: a 1,514-octet frame in 1,024 octets.
    let err = null
        .configure(&mtu(None), &small)
        .expect_err("1,514-octet frames in 1,024-octet mbufs");
    let text = err.to_string();
    assert!(
        matches!(err, Error::Mtu { mtu: 1500, .. })
            && text.contains("MULTI_SEGS")
            && text.contains("net_null0")
            && text.contains("at least 1642"),
        "{text}"
    );
    null.configure(&mtu(Some(1000)), &small)
        .expect("1,014-octet frames fit 1,024 octets");
    null.configure(&mtu(None), &default)
        .expect("1,514-octet frames fit the default pool");
    let err = null
        .configure(&mtu(Some(9000)), &default)
        .expect_err("9,014-octet frames in 2 KiB mbufs");
    assert!(matches!(err, Error::Mtu { mtu: 9000, .. }), "{err}");

    // net_ring sends chains: the same pool is fine there, at MTU 1500 and 9000.
    let RingPortPair { mut a, .. } = RingPortPair::new(&eal, "wc_pool", 64).expect("ring pair");
    assert!(a.configure(&mtu(None), &small).expect("ring").tx_multi_segs);
    a.configure(&mtu(Some(9000)), &small)
        .expect("ring, MTU 9000");
}
