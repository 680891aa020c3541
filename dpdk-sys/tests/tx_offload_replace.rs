//! `set_tx_checksum_offload` asks the port for the checksum work it is given, and nothing
//! else: what an earlier call asked of the same mbuf does not stay behind. Before, the flags
//! were OR-ed into the mbuf's and never cleared, so a packet re-marked for the IPv4 checksum
//! alone still asked for the TCP one (the port then overwrote the TCP checksum the caller
//! filled in software, computing it over a field without the pseudo-header sum: a wrong
//! checksum on the wire, the segment dropped by its receiver, RFC 9293 3.1), and one
//! re-marked after `set_tx_tso` kept its TSO flag with a segment size of 0 (the offload word
//! was replaced): unfit, it held its tx queue up. (Its own test binary: the EAL is
//! initialised once per process.)

use warpcore_dpdk_sys::{
    EalBuilder, Mbuf, Mempool, PortConfig, RingPortPair, TxChecksumOffload, TxTso,
};

/// An Ethernet + IPv4 (IHL 5) + TCP frame of 100 octets, zero elsewhere.
fn frame(pool: &Mempool) -> Mbuf {
    let mut v = vec![0u8; 100];
    v[12] = 0x08;
    v[14] = 0x45;
    v[14 + 9] = 6;
    v[14 + 20 + 12] = 5 << 4;
    Mbuf::from_slice(pool, &v).expect("mbuf")
}

fn csum(ipv4: bool, tcp: bool) -> TxChecksumOffload {
    TxChecksumOffload {
        l2_len: 14,
        l3_len: 20,
        ipv4,
        tcp,
    }
}

#[test]
fn a_checksum_offload_replaces_what_the_mbuf_asked_before() {
    let eal = EalBuilder::for_test("tx_offload_replace", 0, 128)
        .init()
        .expect("EAL with --no-huge --no-pci");
    let pool =
        Mempool::new(&eal, "wc_rtxrep_pool", 255, 0, Mempool::DEFAULT_DATA_ROOM).expect("pool");

    // Both checksums, then the IPv4 one alone: the TCP one is no longer asked for.
    let mut m = frame(&pool);
    m.set_tx_checksum_offload(csum(true, true)).expect("fits");
    m.set_tx_checksum_offload(csum(true, false)).expect("fits");
    assert_eq!(m.tx_checksum_offload(), Some(csum(true, false)));

    // Then none: the packet asks for nothing.
    m.set_tx_checksum_offload(csum(false, false)).expect("fits");
    assert_eq!(m.tx_checksum_offload(), None);

    // TSO, then checksums only: no TSO left (and no segment size of 0 to refuse).
    let mut t = frame(&pool);
    t.set_tx_tso(TxTso {
        l2_len: 14,
        l3_len: 20,
        l4_len: 20,
        segsz: 40,
    })
    .expect("fits");
    t.set_tx_checksum_offload(csum(true, true)).expect("fits");
    assert_eq!(t.tx_tso_segsz(), None, "TSO is no longer asked for");
    t.check_tx_offload().expect("fit to send");

    // Over a ring port pair: both go to the driver and arrive.
    let mut pair = RingPortPair::new(&eal, "wc_rtxrep", 64).expect("ring ports");
    for p in [&mut pair.a, &mut pair.b] {
        p.configure(&PortConfig::default(), &pool)
            .expect("configure");
        p.start().expect("start");
    }
    let mut tx = pair.a.tx_queue(0).expect("tx");
    let mut rx = pair.b.rx_queue(0).expect("rx");
    let mut out = vec![m, t];
    assert_eq!(tx.tx_burst(&mut out), 2, "neither holds the queue up");
    let mut got = Vec::new();
    assert_eq!(rx.rx_burst(&mut got, 8), 2);
}
