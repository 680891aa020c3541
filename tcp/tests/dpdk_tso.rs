//! TSO super-frames (issue 11 item 6) cut by DPDK's own segmentation library, the one
//! net_tap's TSO runs: two stacks on DPDK ring ports with a wire between them that cuts
//! every super-frame with `rte_gso_segment` and fills the checksums, as a port does
//! ([`warpcore_tcp::gso_wire`]). The transfer must be byte-exact, and the segments on the
//! wire must be the very segments the same run produces without TSO: the same sequence
//! ranges in the same order (so each is still one whole run of the sender's records, what
//! MPA alignment needs), with the same ACK numbers, windows and options, differing only in
//! PSH (kept on the last segment of a super-frame only).
#![cfg(feature = "dpdk")]

mod common;

use common::*;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{EthernetFrame, Ipv4Packet, TcpPacket};
use warpcore_tcp::dpdk_sys::{Eal, EalBuilder, Mempool, Port, PortConfig, RingPortPair};
use warpcore_tcp::gso_wire::{GsoWire, WireEnd};
use warpcore_tcp::{DpdkDevice, DpdkDeviceConfig, Stack, TcpTuning};

/// One segment seen on the wire: direction (true: A to B), sequence number, payload
/// length, TCP flags without PSH, ACK number, window, options.
type Seen = (bool, u32, usize, u8, u32, u16, Vec<u8>);

fn seen(a_to_b: bool, v: &[u8]) -> Option<Seen> {
    let eth = EthernetFrame::new_checked(v).ok()?;
    let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
    assert!(ip.verify_checksum(), "IPv4 checksum");
    let tcp = TcpPacket::new_checked(ip.payload()).ok()?;
    assert!(
        tcp.verify_checksum(&ip.src_addr().into(), &ip.dst_addr().into()),
        "TCP checksum"
    );
    let flags = v[14 + 20 + 13] & !0x08;
    Some((
        a_to_b,
        tcp.seq_number().0 as u32,
        tcp.payload().len(),
        flags,
        tcp.ack_number().0 as u32,
        tcp.window_len(),
        tcp.options().to_vec(),
    ))
}

fn started(eal: &Eal, name: &str, pool: Mempool) -> (Port, Port) {
    let RingPortPair { mut a, mut b } = RingPortPair::new(eal, name, 1024).expect("rings");
    for p in [&mut a, &mut b] {
        p.configure(&PortConfig::default(), &pool)
            .expect("configure");
        p.start().expect("start");
    }
    (a, b)
}

/// One transfer of `bytes` each way between A and B through the wire; returns what the
/// wire saw, how many super-frames it cut and how many of A's segments they carried.
fn run(eal: &Eal, tag: &str, pool: Mempool, tso: bool, bytes: u64) -> (Vec<Seen>, u64, u64) {
    // A on pair 1's port a, B on pair 2's port b; the wire owns the other two ports.
    let (mut a1, mut w1) = started(eal, &format!("wcnet_tso_{tag}1"), pool);
    let (mut w2, mut b2) = started(eal, &format!("wcnet_tso_{tag}2"), pool);
    let dev = |p: &mut Port| {
        let mut d = DpdkDevice::new(
            p.rx_queue(0).expect("rx"),
            p.tx_queue(0).expect("tx"),
            pool,
            DpdkDeviceConfig::default(),
        )
        .expect("device");
        if tso {
            d.force_tso_for_test();
        }
        d
    };
    let (da, db) = (dev(&mut a1), dev(&mut b2));
    let mut sa = Stack::new(da, &config(1, IP_A), Instant::ZERO).expect("stack a");
    let mut sb = Stack::new(db, &config(2, IP_B), Instant::ZERO).expect("stack b");
    let end = |p: &mut Port| WireEnd {
        rx: p.rx_queue(0).expect("rx"),
        tx: p.tx_queue(0).expect("tx"),
    };
    let mut wire = GsoWire::new(end(&mut w1), end(&mut w2), pool);
    let mut log = Vec::new();
    bidirectional(
        &mut sa,
        &mut sb,
        bytes,
        &TcpTuning::default(),
        |now, work, wake| {
            let moved = wire.carry(&mut |a_to_b, f, _| log.extend(seen(a_to_b, f)));
            sim_clock(now, work || moved, wake)
        },
        |_, _| None,
        Duration::from_secs(600),
    );
    let (xa, xb) = (sa.device_stats(), sb.device_stats());
    eprintln!("tso {tso}: a {xa:?}; b {xb:?}");
    assert_eq!(xa.tx_dropped + xb.tx_dropped, 0);
    assert_eq!(wire.super_frames(), xa.tx_tso_frames + xb.tx_tso_frames);
    let supers = wire.super_frames();
    drop((sa, sb, a1, w1, w2, b2));
    (log, supers, xa.tx_tso_segments)
}

#[test]
fn super_frames_cut_by_librte_gso_are_the_segments_sent_without_tso() {
    let eal = EalBuilder::for_test("dpdk_tso", 0, 256)
        .init()
        .expect("EAL init with --no-huge --no-pci");
    let pool = Mempool::new(
        &eal,
        "wcnet_tso_pool",
        8191,
        256,
        Mempool::DEFAULT_DATA_ROOM,
    )
    .expect("pool");
    let bytes = 8 << 20;
    let (plain, none, _) = run(&eal, "p", pool, false, bytes);
    assert_eq!(none, 0);
    let (cut, supers, segs) = run(&eal, "t", pool, true, bytes);
    // 8 MiB each way in 1448-octet segments: most of them travel inside super-frames.
    assert!(supers > 100, "{supers} super-frames");
    assert!(segs > 2_000, "{segs} segments of A's inside super-frames");
    // Per direction: the two directions interleave on the wire as the polls fall.
    for dir in [true, false] {
        let of = |v: &[Seen]| v.iter().filter(|s| s.0 == dir).cloned().collect::<Vec<_>>();
        let (cut, plain) = (of(&cut), of(&plain));
        assert!(plain.len() > 5_000, "{} segments", plain.len());
        if let Some(i) = (0..cut.len().max(plain.len())).find(|&i| cut.get(i) != plain.get(i)) {
            panic!(
                "A to B {dir}: segment {i} of {} differs: with TSO {:?}, without {:?}",
                plain.len(),
                cut.get(i),
                plain.get(i)
            );
        }
    }
}
