//! The safe wrappers over a real EAL (no hugepages, no PCI): mempools, mbufs, a ring port pair,
//! stats, and pcapng capture. One test function: the EAL is initialised once per process.

use warpcore_dpdk_sys::{
    Direction, Eal, EalBuilder, Error, Mbuf, Mempool, PcapngWriter, Port, PortConfig, RingPortPair,
};

fn eal() -> Eal {
    EalBuilder::for_test("ring_ports", 0, 256)
        .init()
        .expect("EAL init with --no-huge --no-pci")
}

#[test]
fn dpdk_wrappers_end_to_end() {
    let eal = eal();
    assert!(matches!(
        EalBuilder::new("again").init(),
        Err(Error::EalAlreadyInitialised)
    ));

    // Mempool and mbufs.
    let pool =
        Mempool::new(&eal, "wcnet_t_pool", 4095, 0, Mempool::DEFAULT_DATA_ROOM).expect("pool");
    let free0 = pool.available();
    assert_eq!(free0, 4095);
    {
        let mut m = pool.alloc().expect("mbuf");
        assert_eq!(m.pkt_len(), 0);
        let room = m.tailroom();
        assert!(room >= 2048, "{room}");
        m.append(100).expect("append").fill(0xab);
        assert_eq!(m.data(), &[0xab; 100][..]);
        assert!(m.append(room).is_none(), "append past the tailroom fails");
        assert_eq!(m.pkt_len(), 100);
        // Chained packet from a slice longer than one segment.
        let data: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        let big = Mbuf::from_slice(&pool, &data).expect("chain");
        assert_eq!(big.pkt_len(), 5000);
        assert!(big.nb_segs() >= 3 && !big.is_contiguous());
        let mut back = vec![0; 5000];
        assert_eq!(big.copy_to_slice(&mut back), 5000);
        assert_eq!(back, data);
        assert_eq!(pool.available(), free0 - 1 - u32::from(big.nb_segs()));
    }
    assert_eq!(
        pool.available(),
        free0,
        "dropping mbufs frees every segment"
    );

    // Exhaustion is back-pressure (None), and everything comes back.
    {
        let mut held = Vec::new();
        while let Some(m) = pool.alloc() {
            held.push(m);
        }
        assert_eq!(held.len(), 4095);
        assert!(Mbuf::from_slice(&pool, &[1, 2, 3]).is_none());
    }
    assert_eq!(pool.available(), free0);

    // A ring port pair: what a transmits, b receives.
    let RingPortPair { mut a, mut b } = RingPortPair::new(&eal, "wcnet_t", 1024).expect("rings");
    let names = Port::names(&eal);
    assert!(
        names.iter().any(|n| n == a.name()),
        "{names:?} {}",
        a.name()
    );
    let err = Port::by_name(&eal, "net_wcnet_missing").expect_err("no such port");
    assert!(err.to_string().contains("net_wcnet_missing"), "{err}");
    // A set-up failure names the port, the device and the operation.
    let err = a
        .configure(
            &PortConfig {
                rx_queues: 64,
                ..PortConfig::default()
            },
            &pool,
        )
        .expect_err("net_ring has far fewer than 64 rx queues");
    let text = err.to_string();
    assert!(
        text.contains(a.name()) && text.contains("rte_eth_dev_configure(64 rx"),
        "{text}"
    );
    for p in [&mut a, &mut b] {
        p.configure(&PortConfig::default(), &pool)
            .expect("configure");
        p.start().expect("start");
        assert!(p.link_status().expect("link").up);
    }
    assert!(a.rx_queue(1).is_err(), "only queue 0 exists");
    let mut atx = a.tx_queue(0).expect("tx");
    assert!(a.tx_queue(0).is_err(), "a queue handle is unique");
    let mut brx = b.rx_queue(0).expect("rx");

    let dir = std::env::temp_dir().join(format!("wcnet-ring-{}.pcapng", std::process::id()));
    let mut cap = PcapngWriter::create(&eal, dir.to_str().expect("utf-8"), "wcnet_t_cap", 256)
        .expect("pcapng");

    let mut out: Vec<Mbuf> = (0..2000u32)
        .map(|i| {
            let mut frame = vec![0u8; 60];
            frame[..4].copy_from_slice(&i.to_be_bytes());
            Mbuf::from_slice(&pool, &frame).expect("frame")
        })
        .collect();
    for m in &out[..10] {
        cap.record(a.id(), 0, m, Direction::Tx)
            .expect("port a is in the capture");
    }
    // The ring holds 1023: the rest stays with the caller, in order.
    let mut sent = 0;
    while atx.tx_burst(&mut out) > 0 {
        sent += 1;
    }
    assert!(sent > 0);
    assert_eq!(out.len(), 2000 - 1023, "refused mbufs are handed back");
    let mut got: Vec<Mbuf> = Vec::new();
    while brx.rx_burst(&mut got, 64) > 0 {}
    assert_eq!(got.len(), 1023);
    for (i, m) in got.iter().enumerate() {
        assert_eq!(&m.data()[..4], &(i as u32).to_be_bytes());
    }
    for m in &got[..10] {
        cap.record(b.id(), 0, m, Direction::Rx)
            .expect("port b is in the capture");
    }
    // Far more records than the writer's pool holds: copies must be recycled.
    for _ in 0..200 {
        for m in &got[..10] {
            cap.record(b.id(), 0, m, Direction::Rx)
                .expect("port b is in the capture");
        }
    }
    drop(got);
    let left = out.len();
    assert_eq!(
        atx.tx_burst(&mut out),
        left.min(256),
        "the drained ring takes a full burst"
    );
    drop(out);
    cap.flush();
    assert_eq!(cap.written(), 2020);
    assert_eq!(cap.dropped(), 0);
    assert_eq!(cap.loss_report(), None, "nothing to report");
    drop(cap);
    let bytes = std::fs::read(&dir).expect("capture file");
    assert_eq!(
        &bytes[..4],
        &[0x0a, 0x0d, 0x0d, 0x0a],
        "pcapng section header"
    );
    assert!(bytes.len() > 2020 * 60);
    let _ = std::fs::remove_file(&dir);

    let st = a.stats().expect("stats");
    assert!(st.opackets >= 1023, "{st:?}");
    let xs = b.xstats().expect("xstats");
    assert!(
        xs.iter()
            .any(|x| x.name == "rx_good_packets" && x.value >= 1023),
        "{xs:?}"
    );
    // A port stops once no queue handle of it is alive (tests/port_handles.rs).
    drop((atx, brx));
    a.stop().expect("stop");
}
