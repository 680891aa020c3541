//! `Port::set_mtu` on a port whose receive needs scatter (chained mbufs) for the new MTU
//! but was configured without it: refused (`Error::Mtu`), the MTU unchanged. net_tap reads
//! each frame into one mbuf unless `RTE_ETH_RX_OFFLOAD_SCATTER` was configured
//! (`pmd_rx_burst`, DPDK 22.11), which `Port::configure` enables only for an MTU whose
//! frames do not fit one mbuf of the pool: raised past that by `set_mtu`, every longer frame
//! was dropped on receive (`ierrors`), silently. Over a real net_tap port; needs root (a tap
//! interface) and fails without it. One test function: the EAL is initialised once
//! per process.

mod common;

use warpcore_dpdk_sys::{EalBuilder, Error, Mempool, Port, PortConfig};

#[test]
fn set_mtu_refuses_an_mtu_whose_frames_need_the_receive_scatter_left_off() {
    common::require_root();
    let eal = EalBuilder::for_test("port_set_mtu_scatter", 0, 256)
        .vdev("net_tap0,iface=wcrevmtu0")
        .init()
        .expect("EAL with a net_tap port");
    // 1,024 octets past the 128-octet headroom.
    let pool = Mempool::new(&eal, "wc_rev_mtu_scatter", 2047, 0, 1024 + 128).expect("pool");
    let mut p = Port::by_name(&eal, "net_tap0").expect("tap port");
    let off = p
        .configure(
            &PortConfig {
                mtu: Some(1000),
                rx_desc: 512,
                tx_desc: 512,
                ..PortConfig::default()
            },
            &pool,
        )
        .expect("MTU 1000: 1,018-octet frames fit one mbuf");
    assert!(!off.rx_scatter && off.tx_multi_segs);
    p.set_mtu(1006)
        .expect("1,024-octet frames still fit one mbuf");
    assert_eq!(p.mtu().expect("mtu"), 1006);

    let r = p.set_mtu(1500);
    assert!(
        matches!(r, Err(Error::Mtu { mtu: 1500, .. })),
        "1,518-octet frames into 1,024-octet mbufs without receive scatter: {r:?}"
    );
    assert_eq!(p.mtu().expect("mtu"), 1006, "the MTU is unchanged");
    // Configured for that MTU, the port receives it (scatter on).
    assert!(
        p.configure(
            &PortConfig {
                mtu: Some(1500),
                rx_desc: 512,
                tx_desc: 512,
                ..PortConfig::default()
            },
            &pool,
        )
        .expect("MTU 1500, configured")
        .rx_scatter
    );
}
