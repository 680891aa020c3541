//! Two stacks on two DPDK ring ports in one process (EAL with --no-huge --no-pci): 64 MiB each
//! way, byte-exact, through DpdkDevice (zero-copy rx, tx into fresh mbufs, one burst per poll).
#![cfg(feature = "dpdk")]

mod common;

use common::*;
use smoltcp::time::{Duration, Instant};
use warpcore_tcp::dpdk_sys::{EalBuilder, Mempool, PortConfig, RingPortPair};
use warpcore_tcp::{DpdkDevice, DpdkDeviceConfig, Stack, TcpTuning};

#[test]
fn ring_ports_64_mib_each_way() {
    let eal = EalBuilder::new("dpdk_ring")
        .test_defaults(0, 256, &format!("wcnet-tcpring-{}", std::process::id()))
        .log_level("error")
        .init()
        .expect("EAL init with --no-huge --no-pci");
    // Small enough that the pool can run dry under load: that must be back-pressure.
    let pool = Mempool::new(
        &eal,
        "wcnet_ring_pool",
        4095,
        256,
        Mempool::DEFAULT_DATA_ROOM,
    )
    .expect("pool");
    let RingPortPair { mut a, mut b } = RingPortPair::new(&eal, "wcnet_tcp", 1024).expect("rings");
    let port_cfg = PortConfig {
        rx_desc: 1024,
        tx_desc: 1024,
        ..PortConfig::default()
    };
    let mut devs = Vec::new();
    for p in [&mut a, &mut b] {
        p.configure(&port_cfg, &pool).expect("configure");
        p.start().expect("start");
        let rx = p.rx_queue(0).expect("rx");
        let tx = p.tx_queue(0).expect("tx");
        devs.push(DpdkDevice::new(rx, tx, pool, DpdkDeviceConfig::default()));
    }
    let db = devs.pop().expect("b");
    let da = devs.pop().expect("a");
    let mut sa = Stack::new(da, &config(1, IP_A), Instant::ZERO).expect("stack a");
    let mut sb = Stack::new(db, &config(2, IP_B), Instant::ZERO).expect("stack b");
    let t = bidirectional(
        &mut sa,
        &mut sb,
        64 << 20,
        &TcpTuning::default(),
        sim_clock,
        |_, _| None,
        Duration::from_secs(600),
    );
    let (xa, xb) = (sa.device_stats(), sb.device_stats());
    eprintln!("ring ports: {t} simulated; a {xa:?}; b {xb:?}");
    assert!(xa.tx_frames > 46_000 && xb.rx_frames > 46_000);
    assert_eq!(xa.tx_dropped + xb.tx_dropped, 0);
    let st = a.stats().expect("stats");
    assert_eq!(st.opackets, xa.tx_frames, "{st:?}");
    drop((sa, sb, a, b));

    // Jumbo frames (MTU 9000) on 2 KiB mbufs: every full segment is a chain of mbufs on
    // transmit (built from the scratch buffer) and on receive (linearised for smoltcp).
    let RingPortPair { mut a, mut b } =
        RingPortPair::new(&eal, "wcnet_jumbo", 1024).expect("rings");
    let mut devs = Vec::new();
    for p in [&mut a, &mut b] {
        p.configure(
            &PortConfig {
                mtu: Some(9000),
                ..port_cfg.clone()
            },
            &pool,
        )
        .expect("configure jumbo");
        p.start().expect("start");
        let rx = p.rx_queue(0).expect("rx");
        let tx = p.tx_queue(0).expect("tx");
        let cfg = DpdkDeviceConfig {
            mtu: 9000,
            ..DpdkDeviceConfig::default()
        };
        devs.push(DpdkDevice::new(rx, tx, pool, cfg));
    }
    let db = devs.pop().expect("b");
    let da = devs.pop().expect("a");
    let mut sa = Stack::new(da, &config(1, IP_A), Instant::ZERO).expect("stack a");
    let mut sb = Stack::new(db, &config(2, IP_B), Instant::ZERO).expect("stack b");
    bidirectional(
        &mut sa,
        &mut sb,
        16 << 20,
        &TcpTuning::default(),
        sim_clock,
        |_, _| None,
        Duration::from_secs(600),
    );
    let xa = sa.device_stats();
    // 16 MiB in 8960-byte segments: about 1900 frames, far fewer than at MTU 1500.
    assert!(xa.tx_frames > 1800 && xa.tx_frames < 6000, "{xa:?}");
    assert_eq!(xa.tx_dropped, 0);
}
