//! The core verbs suite (Sends, Writes, Reads, atomics, immediate data, the three MPA
//! rounds) between two contexts whose devices join segments into TSO super-frames, over a
//! wire that cuts them with DPDK's own segmentation library as a TSO port does
//! ([`warpcore_engine::tcp::gso_wire`]). Every segment cut from a super-frame must still be
//! one whole run of FPDUs (MPA alignment, RFC 5044 section 5): the suite checks the data, the
//! wire checks the segments.
#![cfg(feature = "dpdk")]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};

use warpcore_engine::tcp::gso_wire::{GsoWire, WireEnd};
use warpcore_verbs::dpdk::dpdk_sys::{EalBuilder, Mempool, Port, PortConfig, RingPortPair};
use warpcore_verbs::dpdk::DpdkPort;
use warpcore_verbs::*;

/// Why a segment cut from a super-frame is not a whole run of FPDUs, if it is not.
fn misaligned(frame: &[u8]) -> Option<String> {
    let ihl = usize::from(frame[14] & 0x0f) * 4;
    let tcp = &frame[14 + ihl..];
    let (sport, dport) = (
        u16::from_be_bytes([tcp[0], tcp[1]]),
        u16::from_be_bytes([tcp[2], tcp[3]]),
    );
    // The third round has markers in its stream (every 512 octets, RFC 5044 section 6):
    // its FPDUs are not read from the segment's start here.
    if sport == common::PORT + 2 || dport == common::PORT + 2 {
        return None;
    }
    let payload = &tcp[usize::from(tcp[12] >> 4) * 4..];
    if payload.starts_with(b"MPA ID Re") {
        return None;
    }
    let mut at = 0;
    while at < payload.len() {
        if payload.len() - at < 2 {
            return Some(format!("{} octets left at {at}", payload.len() - at));
        }
        let ulpdu = usize::from(u16::from_be_bytes([payload[at], payload[at + 1]]));
        let body = 2 + ulpdu;
        at += body + (4 - body % 4) % 4 + 4;
    }
    (at != payload.len()).then(|| {
        format!(
            "ports {sport}->{dport}: FPDUs end at {at} in a {}-octet payload",
            payload.len()
        )
    })
}

#[test]
fn core_suite_over_tso_super_frames_keeps_every_segment_whole_fpdus() {
    let eal = EalBuilder::for_test("verbs_tso", 0, 512)
        .init()
        .expect("EAL with --no-huge --no-pci");
    let pool = Mempool::new(
        &eal,
        "wceng_tso_pool",
        16383,
        256,
        Mempool::DEFAULT_DATA_ROOM,
    )
    .expect("pool");
    let RingPortPair { a: a1, b: mut w1 } =
        RingPortPair::new(&eal, "wctso1", 2048).expect("ring ports 1");
    let RingPortPair { a: mut w2, b: b2 } =
        RingPortPair::new(&eal, "wctso2", 2048).expect("ring ports 2");
    let end = |p: &mut Port| {
        p.configure(&PortConfig::default(), &pool)
            .expect("configure");
        p.start().expect("start");
        WireEnd {
            rx: p.rx_queue(0).expect("rx"),
            tx: p.tx_queue(0).expect("tx"),
        }
    };
    let mut wire = GsoWire::new(end(&mut w1), end(&mut w2), pool);
    let mut pa = DpdkPort::from_port(a1, pool, 1).expect("port a");
    let mut pb = DpdkPort::from_port(b2, pool, 1).expect("port b");
    pa.force_tso_for_test();
    pb.force_tso_for_test();
    let mut ca = Config::new(Device::Dpdk(pa), [198, 18, 0, 1]);
    ca.mac = Some([2, 0, 0, 0, 0, 1]);
    let mut cb = Config::new(Device::Dpdk(pb), [198, 18, 0, 2]);
    cb.mac = Some([2, 0, 0, 0, 0, 2]);
    let stop = AtomicBool::new(false);
    let (cut, bad, supers) = std::thread::scope(|s| {
        let wire_thread = s.spawn(|| {
            let (mut cut, mut bad) = (0u64, Vec::new());
            while !stop.load(Ordering::Acquire) {
                let moved = wire.carry(&mut |_, f, was_cut| {
                    if was_cut {
                        cut += 1;
                        bad.extend(misaligned(f));
                    }
                });
                if !moved {
                    std::thread::yield_now();
                }
            }
            (cut, bad, wire.super_frames())
        });
        {
            let client = Context::open(ca).expect("context a");
            let server = Context::open(cb).expect("context b");
            common::both_roles(&client, server, [198, 18, 0, 2]);
        }
        stop.store(true, Ordering::Release);
        wire_thread.join().expect("wire")
    });
    eprintln!("{supers} super-frames cut into {cut} segments");
    assert!(supers > 20, "{supers} super-frames");
    assert!(bad.is_empty(), "segments that are not whole FPDUs: {bad:?}");
}
