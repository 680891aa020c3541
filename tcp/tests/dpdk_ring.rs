//! Two stacks on two DPDK ring ports in one process (EAL with --no-huge --no-pci): 64 MiB each
//! way, byte-exact, through DpdkDevice (zero-copy rx, tx into fresh mbufs, one burst per poll).
#![cfg(feature = "dpdk")]

mod common;

use common::*;
use smoltcp::time::{Duration, Instant};
use warpcore_tcp::dpdk_sys::{
    lcore_id, Eal, EalBuilder, Mempool, Port, PortConfig, RingPortPair, RxQueue, TxQueue,
};
use warpcore_tcp::{DpdkDevice, DpdkDeviceConfig, Stack, TcpTuning};

/// A fresh pair of ring ports named `name`, each configured with `port_cfg` over `pool` and
/// started, and each one's queue pair (the ports must outlive them).
fn ring_ports(
    eal: &Eal,
    name: &str,
    pool: Mempool,
    port_cfg: &PortConfig,
) -> (Port, Port, [(RxQueue, TxQueue); 2]) {
    let RingPortPair { mut a, mut b } = RingPortPair::new(eal, name, 1024).expect("rings");
    let queues = [&mut a, &mut b].map(|p| {
        p.configure(port_cfg, &pool).expect("configure");
        p.start().expect("start");
        (p.rx_queue(0).expect("rx"), p.tx_queue(0).expect("tx"))
    });
    (a, b, queues)
}

/// Two stacks (A at `IP_A`, B at `IP_B`) on the two queue pairs of [`ring_ports`], each device
/// made with `dev_cfg` over `pool` (checksums skipped on both when `skip_csum`).
fn stacks_on(
    queues: [(RxQueue, TxQueue); 2],
    pool: Mempool,
    dev_cfg: DpdkDeviceConfig,
    skip_csum: bool,
) -> (Stack<DpdkDevice>, Stack<DpdkDevice>) {
    let [qa, qb] = queues;
    let stack = |(rx, tx): (RxQueue, TxQueue), n: u8, ip| {
        let mut d = DpdkDevice::new(rx, tx, pool, dev_cfg).expect("device");
        if skip_csum {
            d.skip_checksums();
            assert!(d.checksums_skipped() && !d.tx_checksum_offloaded());
        }
        Stack::new(d, &config(n, ip), Instant::ZERO).expect("stack")
    };
    (stack(qa, 1, IP_A), stack(qb, 2, IP_B))
}

/// [`ring_ports`] and [`stacks_on`] at once. The ports come back too: they must outlive the
/// stacks.
fn ring_stacks(
    eal: &Eal,
    name: &str,
    pool: Mempool,
    port_cfg: &PortConfig,
    dev_cfg: DpdkDeviceConfig,
    skip_csum: bool,
) -> (Port, Port, Stack<DpdkDevice>, Stack<DpdkDevice>) {
    let (a, b, queues) = ring_ports(eal, name, pool, port_cfg);
    let (sa, sb) = stacks_on(queues, pool, dev_cfg, skip_csum);
    (a, b, sa, sb)
}

#[test]
fn ring_ports_64_mib_each_way() {
    let eal = EalBuilder::for_test("dpdk_ring", 0, 256)
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
    let port_cfg = PortConfig {
        rx_desc: 1024,
        tx_desc: 1024,
        ..PortConfig::default()
    };
    let (a, b, mut sa, mut sb) = ring_stacks(
        &eal,
        "wcnet_tcp",
        pool,
        &port_cfg,
        DpdkDeviceConfig::default(),
        false,
    );
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
    let (a, b, mut sa, mut sb) = ring_stacks(
        &eal,
        "wcnet_jumbo",
        pool,
        &PortConfig {
            mtu: Some(9000),
            ..port_cfg.clone()
        },
        DpdkDeviceConfig {
            mtu: 9000,
            ..DpdkDeviceConfig::default()
        },
        false,
    );
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
    drop((sa, sb, a, b));

    // Checksums skipped on both ends (what iwperf --no-csum does on memif): the transfer
    // is still byte-exact, with no frame dropped.
    let (a, b, mut sa, mut sb) = ring_stacks(
        &eal,
        "wcnet_nocsum",
        pool,
        &port_cfg,
        DpdkDeviceConfig::default(),
        true,
    );
    bidirectional(
        &mut sa,
        &mut sb,
        4 << 20,
        &TcpTuning::default(),
        sim_clock,
        |_, _| None,
        Duration::from_secs(600),
    );
    let (xa, xb) = (sa.device_stats(), sb.device_stats());
    assert!(xa.tx_frames > 2800 && xb.rx_frames > 2800, "{xa:?} {xb:?}");
    assert_eq!(xa.rx_dropped + xb.rx_dropped, 0);
    drop((sa, sb, a, b));

    // An exhausted mempool is back-pressure: with 96 mbufs for both stacks (rings that hold
    // 1023, 512 frames allowed to wait per device), transmit tokens are refused again and
    // again, yet every byte arrives and the mbufs come back to the pool afterwards. (This
    // once deadlocked: receive waited for a transmit buffer while the peer waited for ours.)
    let small = Mempool::new(&eal, "wcnet_small_pool", 96, 0, Mempool::DEFAULT_DATA_ROOM)
        .expect("small pool");
    let (mut a, mut b, mut sa, mut sb) = ring_stacks(
        &eal,
        "wcnet_small",
        small,
        &port_cfg,
        DpdkDeviceConfig::default(),
        false,
    );
    bidirectional(
        &mut sa,
        &mut sb,
        8 << 20,
        &TcpTuning::default(),
        sim_clock,
        |_, _| None,
        Duration::from_secs(600),
    );
    let (xa, xb) = (sa.device_stats(), sb.device_stats());
    eprintln!("small pool: a {xa:?}; b {xb:?}");
    assert!(xa.tx_pool_empty + xb.tx_pool_empty > 0, "{xa:?} {xb:?}");
    assert_eq!(xa.tx_dropped + xb.tx_dropped, 0);
    drop((sa, sb));
    // The stacks (and their spare and pending mbufs) are gone and the final polls drained
    // the rings: everything is back in the pool but at most a frame or two still in a ring.
    a.stop().expect("stop a");
    b.stop().expect("stop b");
    assert!(
        small.available() >= 96 - 2,
        "mbufs leaked: {} of 96 free",
        small.available()
    );

    // Stacks polled on a thread DPDK did not start (an engine thread, its device built
    // there from queues handed over, as `engine::runtime::spawn_core` does): the device's
    // first loop gives the thread an lcore id of its own, so its mbufs go through the
    // pool's per-lcore cache instead of an atomic operation on the shared ring each.
    let (a, b, queues) = ring_ports(&eal, "wcnet_thread", pool, &port_cfg);
    std::thread::scope(|s| {
        s.spawn(move || {
            assert_eq!(lcore_id(), u32::MAX, "a plain thread has no lcore id");
            let (mut sa, mut sb) = stacks_on(queues, pool, DpdkDeviceConfig::default(), false);
            bidirectional(
                &mut sa,
                &mut sb,
                1 << 20,
                &TcpTuning::default(),
                sim_clock,
                |_, _| None,
                Duration::from_secs(600),
            );
            let id = lcore_id();
            assert!(id != u32::MAX && id != 0, "lcore {id}");
        });
    });
    drop((a, b));
}
