//! Queue handles stay unique, and never outlive their queue, whatever safe code does with
//! the port: one `Port` per port id, and no reconfiguration or stop while a handle lives.
//! Over a real EAL (no hugepages, no PCI) with a net_null port (several queues) and a ring
//! port pair. One test function: the EAL is initialised once per process.

use warpcore_dpdk_sys::{EalBuilder, Error, Mempool, Port, PortConfig, RingPortPair};

fn queues(n: u16) -> PortConfig {
    PortConfig {
        rx_queues: n,
        tx_queues: n,
        rx_desc: 256,
        tx_desc: 256,
        ..PortConfig::default()
    }
}

#[test]
fn queue_handles_are_unique_and_outlive_no_queue() {
    let eal = EalBuilder::for_test("port_handles", 0, 256)
        .vdev("net_null0")
        .init()
        .expect("EAL with --no-huge --no-pci and a net_null port");
    let pool =
        Mempool::new(&eal, "wc_handles_pool", 2047, 0, Mempool::DEFAULT_DATA_ROOM).expect("pool");

    // One Port per port id, by name or by id.
    let mut p = Port::by_name(&eal, "net_null0").expect("net_null port");
    let err = Port::by_name(&eal, "net_null0").expect_err("a second Port on the same id");
    assert!(
        matches!(err, Error::PortInUse { port, ref name } if port == p.id() && name == "net_null0"),
        "{err}"
    );
    assert!(matches!(
        Port::from_id(&eal, p.id()),
        Err(Error::PortInUse { .. })
    ));

    p.configure(&queues(2), &pool).expect("two queue pairs");
    p.start().expect("start");
    let rx1 = p.rx_queue(1).expect("rx 1");
    let tx1 = p.tx_queue(1).expect("tx 1");
    assert_eq!(p.queue_handles(), (1, 1));
    assert!(matches!(
        p.rx_queue(1),
        Err(Error::Queue {
            why: "already taken",
            ..
        })
    ));

    // While handles live, the queues they poll are neither released nor stopped.
    let err = p
        .configure(&queues(1), &pool)
        .expect_err("configure with live handles");
    assert!(
        matches!(
            err,
            Error::QueuesInUse {
                op: "configure",
                rx: 1,
                tx: 1,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("net_null0"), "{err}");
    assert!(matches!(
        p.stop(),
        Err(Error::QueuesInUse { op: "stop", .. })
    ));
    assert!(
        matches!(p.rx_queue(1), Err(Error::Queue { .. })),
        "a refused configure left the taken queue taken"
    );

    // A dropped handle gives its queue back.
    drop(rx1);
    assert_eq!(p.queue_handles(), (0, 1));
    let rx1 = p
        .rx_queue(1)
        .expect("rx 1 taken again once its handle dropped");
    drop((rx1, tx1));
    assert_eq!(p.queue_handles(), (0, 0));

    // With none alive: stop, and configure fewer queues; the released ones cannot be taken.
    p.stop().expect("stop");
    p.configure(&queues(1), &pool).expect("one queue pair");
    assert!(matches!(
        p.rx_queue(1),
        Err(Error::Queue {
            why: "not configured",
            ..
        })
    ));
    let rx0 = p.rx_queue(0).expect("rx 0");

    // A handle keeps the port open after its Port is dropped: no second Port meanwhile.
    let id = p.id();
    drop(p);
    assert!(matches!(
        Port::from_id(&eal, id),
        Err(Error::PortInUse { .. })
    ));
    drop(rx0);

    // Closing gives the id back: a device created after the last handle dropped gets the
    // lowest free id, here the closed ring pair's, and opens.
    let RingPortPair { a, b } = RingPortPair::new(&eal, "wc_handles_1", 64).expect("ring pair");
    let ids = (a.id(), b.id());
    drop((a, b));
    let RingPortPair { a, b } =
        RingPortPair::new(&eal, "wc_handles_2", 64).expect("a ring pair on the freed ids");
    assert_eq!((a.id(), b.id()), ids, "the closed ports' ids are reused");
}
