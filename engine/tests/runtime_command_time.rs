//! The time a core's commands count from: the loop's own, read before they are applied,
//! not the previous loop's. A core that parks when idle (up to 200 µs, longer on a loaded
//! host) and is woken by a command used to apply it at the time of its last loop before
//! the park, so a timeout the command started ran short by the park: CI saw a 300 ms
//! neighbour resolution fail after 299.7 ms by its caller's clock. Here the clock is the
//! test's: the core loops at t0, the clock moves 250 ms (a long park), the resolution is
//! asked for, and it must not fail until 300 ms after that loop. The same for a connect,
//! whose TCP timeout counted from the TCP's own time (the last poll's) even after the
//! core's was set: a caller-driven core is driven only when its application calls in, so
//! that time can be seconds old.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant as StdInstant};

use warpcore_engine::clock::Clock;
use warpcore_engine::cm::CmEvent;
use warpcore_engine::mem::PdId;
use warpcore_engine::runtime::{Command, CoreHandle, Drive};
use warpcore_engine::tcp::smoltcp::time::Duration;
use warpcore_engine::tcp::smoltcp::wire::Ipv4Address;
use warpcore_engine::{CompletionQueue, ConnError, EngineConfig, MpaParams, QpAttr};

mod runtime_common;
use runtime_common::{core_on, core_with};

/// A clock the test sets, in milliseconds, and the setter.
fn test_clock() -> (Clock, impl Fn(u64)) {
    let us = Arc::new(AtomicU64::new(0));
    let us2 = Arc::clone(&us);
    let origin = StdInstant::now();
    let clock = Clock::new(move || origin + StdDuration::from_micros(us2.load(Ordering::SeqCst)));
    (clock, move |ms: u64| us.store(ms * 1_000, Ordering::SeqCst))
}

#[test]
fn a_command_counts_from_the_loop_that_applies_it_not_the_loop_before() {
    let (clock, set) = test_clock();
    // The peer's end is never read: nobody answers the ARP requests.
    let (core, _peer) = core_on(Drive::Caller, clock);
    set(1);
    core.progress();
    // A park of 250 ms, then the command.
    set(251);
    let (tx, rx) = crossbeam::channel::bounded(1);
    core.submit(Command::ResolveNeighbor(
        Ipv4Address::new(10, 0, 0, 9),
        StdDuration::from_millis(300),
        tx,
    ))
    .expect("submitted");
    core.progress();
    let id = rx
        .try_recv()
        .expect("applied by the loop")
        .expect("resolution started");
    let failed = |core: &CoreHandle| {
        let mut failed = false;
        while let Some(e) = core.next_event() {
            match e {
                CmEvent::NeighborFailed(r) if r == id => failed = true,
                CmEvent::NeighborResolved(r) if r == id => panic!("nobody answered"),
                _ => {}
            }
        }
        failed
    };
    // Every 10 ms up to 299 ms after the loop that applied it: still pending (with the
    // previous loop's time it failed from 50 ms before this).
    for ms in (261..=550).step_by(10) {
        set(ms);
        core.progress();
        assert!(!failed(&core), "failed {} ms after it was asked", ms - 251);
    }
    // Its 300 ms are up: failed within a loop or two.
    set(551);
    core.progress();
    core.progress();
    assert!(failed(&core), "still pending 300 ms after it was asked");
}

#[test]
fn a_connect_times_out_from_the_loop_that_applies_it_not_the_last_poll() {
    let (clock, set) = test_clock();
    let mut cfg = EngineConfig::default();
    cfg.tcp.timeout = Some(Duration::from_millis(300));
    // Shorter than the timeout, as the configuration's validation asks.
    cfg.tcp.keep_alive = Some(Duration::from_millis(100));
    // Nobody answers the ARP requests: the connect ends at its TCP timeout.
    let (core, _peer) = core_with(Drive::Caller, clock, cfg);
    set(1);
    let cq = || Arc::new(CompletionQueue::new(16).expect("cq"));
    let attr = QpAttr {
        pd: PdId(1),
        send_cq: cq(),
        recv_cq: cq(),
        sq_depth: 8,
        rq_depth: 8,
        max_sge: 1,
    };
    let (tx, rx) = crossbeam::channel::bounded(1);
    core.submit(Command::CreateQp(attr, tx)).expect("submitted");
    core.progress();
    let (qp, _shared) = rx.try_recv().expect("applied").expect("created");
    // The application goes 250 ms without driving its core, then connects.
    set(251);
    let (tx, rx) = crossbeam::channel::bounded(1);
    core.submit(Command::Connect {
        qp,
        remote: (Ipv4Address::new(10, 0, 0, 9), 4791),
        params: MpaParams::default(),
        private_data: Vec::new(),
        reply: tx,
    })
    .expect("submitted");
    core.progress();
    rx.try_recv()
        .expect("applied by the loop")
        .expect("connect started");
    let failed = |core: &CoreHandle| {
        let mut failed = None;
        while let Some(e) = core.next_event() {
            match e {
                CmEvent::Error { qp: q, error } if q == qp => failed = Some(error),
                CmEvent::Established(_) => panic!("nobody answered"),
                _ => {}
            }
        }
        failed
    };
    // Every 10 ms up to 299 ms after the loop that applied it: still connecting (with the
    // last poll's time it failed from 50 ms before this).
    for ms in (261..=550).step_by(10) {
        set(ms);
        core.progress();
        assert_eq!(
            failed(&core),
            None,
            "failed {} ms after it was asked",
            ms - 251
        );
    }
    // Its 300 ms are up: failed within a loop or two, the next hop never resolved.
    set(551);
    core.progress();
    core.progress();
    assert_eq!(
        failed(&core),
        Some(ConnError::NeighborUnresolved),
        "not failed 300 ms after it was asked"
    );
}
