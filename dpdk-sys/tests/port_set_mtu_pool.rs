//! `Port::set_mtu` checks what `Port::configure` checks of the pool for the MTU: on a port
//! that sends no chained mbufs (net_null, no `RTE_ETH_TX_OFFLOAD_MULTI_SEGS`), an MTU whose
//! frames do not fit one mbuf of the port's pool is refused (`Error::Mtu`), the MTU
//! unchanged. Before, `configure` refused such a pool for the MTU but `set_mtu` raised the
//! MTU past it unchecked: every full-sized frame then had to go as a chain the port cannot
//! send (the device drops it, and the TCP resends it in vain). Over a real EAL (no
//! hugepages, no PCI). One test function: the EAL is initialised once per process.

use warpcore_dpdk_sys::{EalBuilder, Error, Mempool, Port, PortConfig};

#[test]
fn set_mtu_refuses_an_mtu_the_pool_cannot_send_where_the_port_sends_no_chains() {
    let eal = EalBuilder::for_test("port_set_mtu_pool", 0, 256)
        .vdev("net_null0")
        .init()
        .expect("EAL with --no-huge --no-pci and a net_null port");
    // 1,024 octets past the 128-octet headroom.
    let small = Mempool::new(&eal, "wc_rev_mtu_small", 1023, 0, 1024 + 128).expect("pool");
    let mut null = Port::by_name(&eal, "net_null0").expect("net_null port");
    assert!(
        !null
            .configure(
                &PortConfig {
                    mtu: Some(1000),
                    rx_desc: 256,
                    tx_desc: 256,
                    ..PortConfig::default()
                },
                &small,
            )
            .expect("1,014-octet frames fit 1,024 octets")
            .tx_multi_segs
    );
    assert_eq!(null.mtu().expect("mtu"), 1000);
    null.set_mtu(1010).expect("1,024-octet frames still fit");
    assert_eq!(null.mtu().expect("mtu"), 1010);

    let r = null.set_mtu(1500);
    assert!(
        matches!(r, Err(Error::Mtu { mtu: 1500, .. })),
        "1,514-octet frames in 1,024-octet mbufs on a port without chains: {r:?}"
    );
    assert_eq!(null.mtu().expect("mtu"), 1010, "the MTU is unchanged");
}
