//! `Port::configure` refuses counts DPDK would silently replace: no queue at all (DPDK
//! configures its default count, which nobody then sets up), 0 descriptors (the driver's
//! default) and MTU 0 (1500); and an MTU past `MTU_MAX`. Refused before the port is touched, so the configuration before
//! stays usable. Over a real EAL (no hugepages, no PCI) with a ring port pair. One test
//! function: the EAL is initialised once per process.

use warpcore_dpdk_sys::{EalBuilder, Error, Mempool, PortConfig, RingPortPair};

#[test]
fn counts_dpdk_would_replace_are_refused_before_the_port_is_touched() {
    let eal = EalBuilder::for_test("port_config", 0, 256)
        .init()
        .expect("EAL with --no-huge --no-pci");
    let pool =
        Mempool::new(&eal, "wc_config_pool", 1023, 0, Mempool::DEFAULT_DATA_ROOM).expect("pool");
    let RingPortPair { mut a, .. } = RingPortPair::new(&eal, "wc_config", 64).expect("ring pair");
    let good = PortConfig {
        rx_desc: 256,
        tx_desc: 256,
        ..PortConfig::default()
    };
    a.configure(&good, &pool).expect("one queue each way");

    let bad = [
        (
            PortConfig {
                rx_queues: 0,
                tx_queues: 0,
                ..good.clone()
            },
            "no rx and no tx queue",
        ),
        (
            PortConfig {
                rx_desc: 0,
                ..good.clone()
            },
            "rx_desc 0",
        ),
        (
            PortConfig {
                tx_desc: 0,
                ..good.clone()
            },
            "tx_desc 0",
        ),
    ];
    // MTU 0 (which rte_eth_dev_configure replaces by 1500) and one past MTU_MAX.
    let mtus = [0, 9001].map(|mtu| {
        (
            PortConfig {
                mtu: Some(mtu),
                ..good.clone()
            },
            "the IP MTU must be 1 to 9000",
        )
    });
    for (cfg, what) in bad.into_iter().chain(mtus) {
        let err = a.configure(&cfg, &pool).expect_err(what);
        let text = err.to_string();
        assert!(
            matches!(err, Error::PortConfig { .. } | Error::Mtu { .. })
                && text.contains(what)
                && text.contains(a.name()),
            "{text}"
        );
        // The configuration before is intact: its queues can still be taken.
        let (rx, tx) = (a.rx_queue(0), a.tx_queue(0));
        assert!(rx.is_ok() && tx.is_ok(), "after {what}: {rx:?} {tx:?}");
    }
    // A port with only tx queues is DPDK's to take (it configures what was asked).
    a.configure(
        &PortConfig {
            rx_queues: 0,
            ..good.clone()
        },
        &pool,
    )
    .expect("no rx queue, one tx queue");
    assert!(a.rx_queue(0).is_err() && a.tx_queue(0).is_ok());
}
