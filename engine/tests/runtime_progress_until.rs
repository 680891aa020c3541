//! `CoreHandle::progress_until`: a caller-driven core run loop after loop under one hold
//! until the caller's test passes, and the clock reads it saves. The clock here counts its
//! reads (no counter to interpolate by: every `now` is one read), so the rule of
//! `CLOCK_REUSE_LOOPS` is checked read for read: the first loop, and every loop after one
//! that did work, reads the clock; a loop after an idle one takes the last reading, at most
//! `CLOCK_REUSE_LOOPS - 1` loops in a row.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant as StdInstant};

use warpcore_engine::clock::Clock;
use warpcore_engine::runtime::{CoreHandle, Drive, CLOCK_REUSE_LOOPS};
use warpcore_engine::tcp::link::LinkEnd;
use warpcore_engine::tcp::smoltcp::phy::{Device, RxToken, TxToken};
use warpcore_engine::tcp::smoltcp::time::Instant;
use warpcore_engine::tcp::smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol,
    EthernetRepr, Ipv4Address,
};

mod runtime_common;
use runtime_common::core_on;

const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 1];

/// A core at 10.0.0.2 on one end of an in-memory link (the other end returned), driven
/// `drive`, whose clock moves 1 us per read and counts its reads.
fn core(drive: Drive) -> (CoreHandle, LinkEnd, Arc<AtomicU64>) {
    let reads = Arc::new(AtomicU64::new(0));
    let r2 = Arc::clone(&reads);
    let origin = StdInstant::now();
    let clock = Clock::new(move || {
        origin + StdDuration::from_micros(r2.fetch_add(1, Ordering::SeqCst) + 1)
    });
    let (handle, peer) = core_on(drive, clock);
    (handle, peer, reads)
}

/// The clock reads the rule predicts for loops that did `works` work, one after another.
fn predicted_reads(works: &[bool]) -> u64 {
    let (mut reads, mut reused, mut after_work) = (0, 0, true);
    for &w in works {
        if after_work || reused + 1 >= CLOCK_REUSE_LOOPS {
            reads += 1;
            reused = 0;
        } else {
            reused += 1;
        }
        after_work = w;
    }
    reads
}

/// An ARP request for the core's address from the peer's end: the core answers it, work
/// in the loop that receives it.
fn send_arp_request(peer: &mut LinkEnd) {
    let arp = ArpRepr::EthernetIpv4 {
        operation: ArpOperation::Request,
        source_hardware_addr: EthernetAddress(PEER_MAC),
        source_protocol_addr: Ipv4Address::new(10, 0, 0, 1),
        target_hardware_addr: EthernetAddress([0; 6]),
        target_protocol_addr: Ipv4Address::new(10, 0, 0, 2),
    };
    let eth = EthernetRepr {
        src_addr: EthernetAddress(PEER_MAC),
        dst_addr: EthernetAddress::BROADCAST,
        ethertype: EthernetProtocol::Arp,
    };
    let tx = peer
        .transmit(Instant::from_micros(0))
        .expect("room on the link");
    tx.consume(eth.buffer_len() + arp.buffer_len(), |buf| {
        let mut f = EthernetFrame::new_unchecked(buf);
        eth.emit(&mut f);
        arp.emit(&mut ArpPacket::new_unchecked(f.payload_mut()));
    });
}

#[test]
fn idle_loops_under_one_hold_read_the_clock_once_every_clock_reuse_loops() {
    let (core, _peer, reads) = core(Drive::Caller);
    // Not a multiple of the run's length: a run one loop too long or too short reads the
    // clock a different number of times.
    let loops = 10 * CLOCK_REUSE_LOOPS + 3;
    let mut works = Vec::new();
    let before = reads.load(Ordering::SeqCst);
    let done = core.progress_until(loops, |w| {
        works.push(w);
        false
    });
    let read = reads.load(Ordering::SeqCst) - before;
    assert!(!done, "`done` never passed");
    assert_eq!(works.len(), loops as usize, "every loop asks `done`");
    assert!(works.iter().all(|w| !w), "an idle core: {works:?}");
    assert_eq!(read, u64::from(loops.div_ceil(CLOCK_REUSE_LOOPS)));
    assert_eq!(read, predicted_reads(&works));
    // One loop a call reads the clock every time: the application ran in between.
    let before = reads.load(Ordering::SeqCst);
    for _ in 0..10 {
        core.progress();
    }
    assert_eq!(reads.load(Ordering::SeqCst) - before, 10);
}

#[test]
fn a_loop_after_one_that_did_work_reads_the_clock() {
    let (core, mut peer, reads) = core(Drive::Caller);
    send_arp_request(&mut peer);
    let mut works = Vec::new();
    let before = reads.load(Ordering::SeqCst);
    core.progress_until(2 * CLOCK_REUSE_LOOPS, |w| {
        works.push(w);
        false
    });
    let read = reads.load(Ordering::SeqCst) - before;
    assert!(
        works[0],
        "the first loop answers the ARP request: {works:?}"
    );
    assert!(!works[works.len() - 1], "the core went idle: {works:?}");
    assert_eq!(read, predicted_reads(&works), "loops' work: {works:?}");
    // Against the idle core's count for as many loops: the loop after the work read too.
    assert!(read > u64::from(2 * CLOCK_REUSE_LOOPS / CLOCK_REUSE_LOOPS));
    // The answer is on the wire.
    let (rx, _) = peer
        .receive(Instant::from_micros(1_000_000))
        .expect("the reply");
    rx.consume(|f| {
        let f = EthernetFrame::new_checked(f).unwrap();
        assert_eq!(f.ethertype(), EthernetProtocol::Arp);
        let arp = ArpRepr::parse(&ArpPacket::new_checked(f.payload()).unwrap()).unwrap();
        assert!(matches!(
            arp,
            ArpRepr::EthernetIpv4 {
                operation: ArpOperation::Reply,
                ..
            }
        ));
    });
}

#[test]
fn progress_until_stops_when_done_passes() {
    let (core, _peer, _reads) = core(Drive::Caller);
    let mut asked = 0;
    assert!(core.progress_until(100, |_| {
        asked += 1;
        asked == 3
    }));
    assert_eq!(asked, 3, "no loop after `done` passed");
}

#[test]
fn a_core_with_its_own_thread_is_not_run_by_progress_until() {
    let (core, _peer, _reads) = core(Drive::Thread);
    let mut asked = 0;
    assert!(!core.progress_until(100, |_| {
        asked += 1;
        true
    }));
    assert_eq!(asked, 0);
}
