//! A packet whose transmit offload metadata (the header lengths `set_tx_checksum_offload` and
//! `set_tx_tso` store) does not lie inside its first segment never reaches a driver: drivers
//! act on those lengths without bounds checks (net_tap copies the headers into a buffer of
//! the segment's length and writes the TCP checksum at l2 + l3 + 16; its TSO, librte_gso,
//! rewrites whole 20-octet IPv4 and TCP headers at l2 and l2 + l3). `tx_prepare` counts such
//! a packet unfit, `tx_burst` stops before it (it stays in `pkts`) and
//! `Mbuf::check_tx_offload` says what is wrong. Over a ring port pair, whose driver checks
//! nothing. (Its own test binary: the EAL is initialised once per process.)

use warpcore_dpdk_sys::{
    EalBuilder, Error, Mbuf, Mempool, PortConfig, RingPortPair, TxChecksumOffload, TxTso,
};

/// An Ethernet + IPv4 (IHL `ihl`) + TCP frame of `len` octets, zero elsewhere.
fn frame(pool: &Mempool, len: usize, ihl: u8) -> Mbuf {
    let mut v = vec![0u8; len];
    if len > 14 {
        v[12] = 0x08;
        v[14] = 0x40 | ihl;
    }
    Mbuf::from_slice(pool, &v).expect("mbuf")
}

fn csum(l3_len: u16) -> TxChecksumOffload {
    TxChecksumOffload {
        l2_len: 14,
        l3_len,
        ipv4: true,
        tcp: true,
    }
}

#[test]
fn packets_whose_offload_lengths_leave_the_first_segment_are_not_sent() {
    let eal = EalBuilder::for_test("tx_offload", 0, 256)
        .init()
        .expect("EAL with --no-huge --no-pci");
    let pool =
        Mempool::new(&eal, "wc_txoff_pool", 1023, 0, Mempool::DEFAULT_DATA_ROOM).expect("pool");
    let mut pair = RingPortPair::new(&eal, "wc_txoff", 256).expect("ring ports");
    let cfg = PortConfig {
        rx_desc: 256,
        tx_desc: 256,
        ..PortConfig::default()
    };
    pair.a.configure(&cfg, &pool).expect("configure a");
    pair.b.configure(&cfg, &pool).expect("configure b");
    pair.a.start().expect("start a");
    pair.b.start().expect("start b");
    let mut tx = pair.a.tx_queue(0).expect("tx");
    let mut rx = pair.b.rx_queue(0).expect("rx");

    // Fit: a 54-octet frame whose IPv4 (IHL 5) and TCP headers are in the first segment, a
    // frame without offloads, and a TSO super-frame (a chain) with its headers in front.
    let mut ok = frame(&pool, 54, 5);
    ok.set_tx_checksum_offload(csum(20))
        .expect("lengths that fit");
    let plain = frame(&pool, 20, 5);
    let mut tso = frame(&pool, 3000, 5);
    assert!(tso.nb_segs() > 1);
    tso.set_tx_tso(TxTso {
        l2_len: 14,
        l3_len: 20,
        l4_len: 20,
        segsz: 1460,
    })
    .expect("lengths that fit");
    for m in [&ok, &plain, &tso] {
        m.check_tx_offload().expect("fit to send");
    }

    // Unfit, each for one reason.
    let mut no_tcp = frame(&pool, 34, 5); // the TCP header is not in the segment
    no_tcp
        .set_tx_checksum_offload(csum(20))
        .expect("lengths that fit");
    let mut short_l3 = frame(&pool, 54, 5); // an IPv4 header length under 20
    short_l3
        .set_tx_checksum_offload(csum(0))
        .expect("lengths that fit");
    let mut ihl = frame(&pool, 54, 15); // the IPv4 header's own length (60) goes past it
    ihl.set_tx_checksum_offload(csum(20))
        .expect("lengths that fit");
    let mut tso_l4 = frame(&pool, 3000, 5); // a TCP header length under 20
    tso_l4
        .set_tx_tso(TxTso {
            l2_len: 14,
            l3_len: 20,
            l4_len: 0,
            segsz: 1460,
        })
        .expect("lengths that fit");
    let mut tso_seg = frame(&pool, 3000, 5); // no payload per segment
    tso_seg
        .set_tx_tso(TxTso {
            l2_len: 14,
            l3_len: 20,
            l4_len: 20,
            segsz: 0,
        })
        .expect("lengths that fit");
    for (m, what) in [
        (&no_tcp, "TCP header"),
        (&short_l3, "IPv4 header length 0"),
        (&ihl, "IHL"),
        (&tso_l4, "TCP header length 0"),
        (&tso_seg, "segment size 0"),
    ] {
        let err = m.check_tx_offload().expect_err(what);
        assert!(
            matches!(err, Error::TxOffload { ref why } if why.contains(what)),
            "{what}: {err}"
        );
    }

    // tx_prepare counts the fit ones at the front, up to the first unfit one.
    let mut pkts = vec![ok, plain, no_tcp, tso];
    assert_eq!(tx.tx_prepare(&mut pkts), 2);
    assert_eq!(tx.tx_prepare(&mut pkts[2..]), 0);
    assert_eq!(tx.tx_prepare(&mut pkts[3..]), 1);

    // tx_burst sends up to it and leaves it, and what follows, in pkts.
    assert_eq!(tx.tx_burst(&mut pkts), 2);
    assert_eq!(pkts.len(), 2);
    assert_eq!(pkts[0].pkt_len(), 34, "the unfit frame waits at the front");
    assert_eq!(tx.tx_burst(&mut pkts), 0, "never handed to the driver");
    drop(pkts.remove(0));
    assert_eq!(tx.tx_burst(&mut pkts), 1);
    for m in [short_l3, ihl, tso_l4, tso_seg] {
        let mut one = vec![m];
        assert_eq!(tx.tx_prepare(&mut one), 0);
        assert_eq!(tx.tx_burst(&mut one), 0);
        assert_eq!(one.len(), 1);
    }

    let mut got = Vec::new();
    rx.rx_burst(&mut got, 32);
    let lens: Vec<usize> = got.iter().map(Mbuf::pkt_len).collect();
    assert_eq!(lens, [54, 20, 3000], "only the fit frames crossed");
}
