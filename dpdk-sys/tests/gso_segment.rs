//! `Gso::segment` over a real EAL (no hugepages, no PCI): every mbuf it touches goes back to
//! its pool exactly once, whatever librte_gso makes of the packet, and headers shorter than
//! the ones librte_gso rewrites in place are refused before it sees them. One test function:
//! the EAL is initialised once per process.

use warpcore_dpdk_sys::{EalBuilder, Error, Gso, Mbuf, Mempool, TxTso};

const ETH: usize = 14;
const IP: usize = 20;
const TCP: usize = 20;

/// An Ethernet + IPv4 + TCP super-frame of `payload` octets, with the IPv4 flags and
/// fragment offset field `frag` (0x4000: DF, the usual; 0x2000: more fragments).
fn frame(payload: usize, frag: u16) -> Vec<u8> {
    let mut f = vec![0u8; ETH + IP + TCP + payload];
    f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip = &mut f[ETH..ETH + IP];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&((IP + TCP + payload) as u16).to_be_bytes());
    ip[6..8].copy_from_slice(&frag.to_be_bytes());
    ip[8] = 64;
    ip[9] = 6;
    let tcp = &mut f[ETH + IP..ETH + IP + TCP];
    tcp[12] = 5 << 4;
    tcp[13] = 0x18;
    for (i, b) in f[ETH + IP + TCP..].iter_mut().enumerate() {
        *b = i as u8;
    }
    f
}

/// Takes every mbuf the pool can give and returns them: how many that was. A pool that got
/// one mbuf back twice hands it out twice, and so gives more than it holds.
fn drain(pool: &Mempool) -> usize {
    let mut all = Vec::new();
    while let Some(m) = Mbuf::alloc(pool) {
        all.push(m);
        assert!(all.len() <= 1 << 12, "the pool never runs dry");
    }
    all.len()
}

#[test]
fn gso_frees_every_mbuf_once_and_refuses_short_headers() {
    let eal = EalBuilder::for_test("gso_segment", 0, 256)
        .init()
        .expect("EAL with --no-huge --no-pci");
    const COUNT: u32 = 255;
    // No per-lcore cache: a double free shows in what the pool hands out.
    let pool =
        Mempool::new(&eal, "wc_gso_pool", COUNT, 0, Mempool::DEFAULT_DATA_ROOM).expect("pool");
    let gso = Gso::new(&pool, 1514);
    let tso = |l3_len: u16, l4_len: u8| TxTso {
        l2_len: ETH as u8,
        l3_len,
        l4_len,
        segsz: 1460,
    };
    let packet = |frag: u16, t: TxTso| {
        let mut m = Mbuf::from_slice(&pool, &frame(3000, frag)).expect("super-frame");
        m.set_tx_tso(t).expect("lengths that fit");
        m
    };

    // An ordinary super-frame: cut in three, every mbuf back in the pool afterwards.
    let segs = gso.segment(packet(0x4000, tso(20, 20))).expect("segmented");
    assert_eq!(segs.len(), 3);
    assert_eq!(drain(&pool), COUNT as usize);

    // A fragment (more fragments set): librte_gso does not cut it and hands the input
    // packet itself back as the one "segment". It comes back whole, and freed once.
    let whole = frame(3000, 0x2000);
    let segs = gso
        .segment(packet(0x2000, tso(20, 20)))
        .expect("a fragment comes back whole");
    assert_eq!(segs, vec![whole]);
    assert_eq!(
        drain(&pool),
        COUNT as usize,
        "an mbuf went back to the pool twice"
    );

    // librte_gso rewrites the IPv4 total length and identification and the TCP sequence
    // number and flags of each segment's header copy in place, as if the headers had their
    // full 20 octets: shorter ones are refused before it writes past them.
    for (l3, l4) in [(0, 20), (19, 20), (20, 0), (20, 13)] {
        let err = gso
            .segment(packet(0x4000, tso(l3, l4)))
            .expect_err("headers shorter than librte_gso rewrites");
        assert!(
            matches!(&err, Error::Gso { reason } if reason.contains("header")),
            "l3 {l3}, l4 {l4}: {err}"
        );
    }
    assert_eq!(drain(&pool), COUNT as usize);
}
