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
use warpcore_engine::runtime::{Command, CoreHandle, Drive, Reply};
use warpcore_engine::tcp::smoltcp::time::Duration;
use warpcore_engine::tcp::smoltcp::wire::Ipv4Address;
use warpcore_engine::{CompletionQueue, ConnError, EngineConfig, EngineError, MpaParams, QpAttr};

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

/// Submits the command `make` builds around its reply slot and runs one loop of `core`:
/// the reply the loop gave.
fn apply<T>(core: &CoreHandle, make: impl FnOnce(Reply<T>) -> Command) -> Result<T, EngineError> {
    let (tx, rx) = crossbeam::channel::bounded(1);
    core.submit(make(tx)).expect("submitted");
    core.progress();
    rx.try_recv().expect("applied by the loop")
}

/// The command that failed 300 ms after it was asked at 251 ms: `core` driven every 10 ms
/// from 261 to 550 ms, `failure` (which drains the core's events) seeing nothing, then at
/// 551 ms, a loop or two: what `failure` saw then.
fn fails_300_ms_after_251<T: std::fmt::Debug>(
    core: &CoreHandle,
    set: &dyn Fn(u64),
    failure: &dyn Fn(&CoreHandle) -> Option<T>,
) -> T {
    for ms in (261..=550).step_by(10) {
        set(ms);
        core.progress();
        if let Some(f) = failure(core) {
            panic!("failed {} ms after it was asked: {f:?}", ms - 251);
        }
    }
    set(551);
    core.progress();
    core.progress();
    failure(core).expect("still pending 300 ms after it was asked")
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
    let to = Ipv4Address::new(10, 0, 0, 9);
    let id = apply(&core, |r| {
        Command::ResolveNeighbor(to, StdDuration::from_millis(300), r)
    })
    .expect("resolution started");
    // With the previous loop's time it failed from 50 ms after it was asked.
    fails_300_ms_after_251(&core, &set, &|core| {
        let mut failed = None;
        while let Some(e) = core.next_event() {
            match e {
                CmEvent::NeighborFailed(r) if r == id => failed = Some(()),
                CmEvent::NeighborResolved(r) if r == id => panic!("nobody answered"),
                _ => {}
            }
        }
        failed
    });
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
    let (qp, _shared) = apply(&core, |r| Command::CreateQp(attr, r)).expect("created");
    // The application goes 250 ms without driving its core, then connects.
    set(251);
    apply(&core, |reply| Command::Connect {
        qp,
        remote: (Ipv4Address::new(10, 0, 0, 9), 4791),
        local_port: None,
        params: MpaParams::default(),
        private_data: Vec::new(),
        reply,
    })
    .expect("connect started");
    // With the last poll's time it failed from 50 ms after it was asked; at its 300 ms,
    // the next hop never resolved.
    let error = fails_300_ms_after_251(&core, &set, &|core| {
        let mut failed = None;
        while let Some(e) = core.next_event() {
            match e {
                CmEvent::Error { qp: q, error } if q == qp => failed = Some(error),
                CmEvent::Established(_) => panic!("nobody answered"),
                _ => {}
            }
        }
        failed
    });
    assert_eq!(error, ConnError::NeighborUnresolved);
}
