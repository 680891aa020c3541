//! Bounded connection set-up under floods and slow peers (issue 15, item 4): a peer that
//! opens many TCP connections and never sends an MPA Request must not stop a legitimate
//! client from connecting, the silent connections are reset when their startup times out,
//! and a request the application never answers is dropped, with an event, after the same
//! timeout.

mod common;

use common::*;
use warpcore_engine::tcp::link::LinkConfig;
use warpcore_engine::tcp::smoltcp::socket::tcp::State;
use warpcore_engine::tcp::smoltcp::time::Duration;
use warpcore_engine::tcp::smoltcp::time::Instant;
use warpcore_engine::tcp::{ConnId, TcpTuning};
use warpcore_engine::{CmEvent, ConnError, EngineConfig, EngineError, MpaParams};

/// One more silent connection from A's TCP stack to B's listener; the flooder frees its
/// own connections that B reset, as a real one would, so its table never fills.
fn silent_connection(p: &mut Pair, silent: &mut Vec<ConnId>) {
    let stack = p.a.core.stack_mut();
    silent.retain(|&c| {
        let closed = stack.state(c) == Ok(State::Closed);
        if closed {
            let _ = stack.release(c);
        }
        !closed
    });
    silent.push(
        stack
            .connect((ip(2), PORT), None, &TcpTuning::default())
            .expect("connect"),
    );
}

#[test]
fn silent_connections_do_not_lock_the_listener_and_time_out() {
    // A small table (the default holds 1,024), so that the flood below fills it well
    // within the startup timeout and the eviction is what frees its slots.
    let cfg = EngineConfig {
        max_pending_requests: 16,
        ..EngineConfig::default()
    };
    let mut p = Pair::new(&LinkConfig::default(), &cfg);
    let max_pending = cfg.max_pending_requests as u64;
    p.b.core.listen(PORT, MpaParams::default()).expect("listen");
    // The table's worth plus 100 connections that never send an octet, one every few loops
    // (smoltcp answers SYNs beyond the listener's ready sockets within one poll with RST).
    let flood = max_pending + 100;
    let mut silent = Vec::new();
    for _ in 0..flood {
        silent_connection(&mut p, &mut silent);
        p.run(3);
    }
    // A connection the last loop's rx burst accepted is B's to evict in the loop after
    // (the engine serves TCP events before its rx burst: EngineCore::poll).
    p.run(1);
    let established = silent
        .iter()
        .filter(|&&c| p.a.core.stack_mut().state(c) == Ok(State::Established))
        .count() as u64;
    let evicted = p.b.core.stats().requests_evicted;
    // B holds at most its table's worth; every older silent connection was pushed out.
    assert!(
        established <= max_pending,
        "{established} still established"
    );
    assert!(
        evicted >= flood - max_pending - 10,
        "only {evicted} evicted"
    );

    // The flood goes on (one more silent connection every loop) while a legitimate client
    // connects: it is accepted and established within a second of simulated time.
    let qa = p.a.qp(16);
    let qb = p.b.qp(16);
    let t0 = p.now;
    p.a.core
        .connect(qa, (ip(2), PORT), &MpaParams::default(), b"legit")
        .expect("connect");
    let mut req = None;
    for _ in 0..2000 {
        silent_connection(&mut p, &mut silent);
        p.step();
        for e in p.b.take_events() {
            if let CmEvent::ConnectRequest(r) = e {
                req = Some(r);
            }
        }
        if req.is_some() {
            break;
        }
    }
    let req = req.expect("the legitimate request was never read");
    assert_eq!(req.private_data, b"legit");
    p.b.core
        .accept(req.request, qb, b"welcome", None)
        .expect("accept");
    p.run_until_established();
    assert!(
        p.now - t0 < Duration::from_secs(1),
        "the legitimate client took {} under the flood",
        p.now - t0
    );

    // The flood stops; after the startup timeout (10 s) every silent connection still
    // pending was reset: none is left established on A's side.
    let timeout = Duration::from_millis(EngineConfig::default().mpa_timeout_ms);
    let end = p.now + timeout + Duration::from_secs(2);
    while p.now < end {
        p.step();
    }
    let still = silent
        .iter()
        .filter(|&&c| p.a.core.stack_mut().state(c) == Ok(State::Established))
        .count();
    assert_eq!(
        still, 0,
        "{still} silent connections outlived the startup timeout"
    );
    let stats = p.b.core.stats();
    assert!(stats.requests_timed_out >= 1, "{stats:?}");
    // The legitimate connection is untouched.
    assert!(p.a.take_events().is_empty() && p.b.take_events().is_empty());
}

#[test]
fn a_request_never_answered_is_dropped_with_an_event() {
    // The initiator waits longer than the responder: it would reset the connection at its
    // own timeout (MPA-7.1.2-27), and the request would go with that reset rather than by
    // the responder's timer that this test is about.
    let b_cfg = EngineConfig::default();
    let a_cfg = EngineConfig {
        mpa_timeout_ms: 2 * b_cfg.mpa_timeout_ms,
        ..EngineConfig::default()
    };
    let mut p = Pair::with_configs(&LinkConfig::default(), &a_cfg, &b_cfg);
    p.b.core.listen(PORT, MpaParams::default()).expect("listen");
    let qa = p.a.qp(16);
    let qb = p.b.qp(16);
    p.a.core
        .connect(qa, (ip(2), PORT), &MpaParams::default(), b"anyone?")
        .expect("connect");
    let req = p.wait_request();
    // The application sits on it past the startup timeout.
    let timeout = Duration::from_millis(EngineConfig::default().mpa_timeout_ms);
    let end = p.now + timeout + Duration::from_secs(1);
    let mut cancelled = None;
    while p.now < end {
        p.step();
        for e in p.b.take_events() {
            if let CmEvent::RequestCancelled(id) = e {
                cancelled = Some(id);
            }
        }
    }
    assert_eq!(
        cancelled,
        Some(req.request),
        "no RequestCancelled after the timeout"
    );
    assert_eq!(p.b.core.stats().requests_timed_out, 1);

    // The request is gone: answering it now is a typed error.
    assert_eq!(
        p.b.core.accept(req.request, qb, b"too late", None),
        Err(EngineError::UnknownRequest)
    );
    // The initiator learns of it: the responder reset the connection.
    let a_events = p.a.take_events();
    assert!(
        a_events.iter().any(|e| matches!(e, CmEvent::Error { .. })),
        "{a_events:?}"
    );
}

#[test]
fn a_burst_of_legitimate_clients_all_get_through() {
    // 64 initiators connect in the same loop (a parallel job starting up). The default
    // table holds them all; when it held 16, the newest pushed the oldest out with resets
    // (wcconnrate --parallel 32 found it).
    const BURST: usize = 64;
    let mut p = Pair::default_pair();
    p.b.core.listen(PORT, MpaParams::default()).expect("listen");
    let qas: Vec<_> = (0..BURST).map(|_| p.a.qp(16)).collect();
    for &qa in &qas {
        p.a.core
            .connect(qa, (ip(2), PORT), &MpaParams::default(), b"burst")
            .expect("connect");
    }
    let mut requests = Vec::new();
    p.run_until(5000, |p| {
        for e in p.b.take_events() {
            if let CmEvent::ConnectRequest(r) = e {
                requests.push(r);
            }
        }
        requests.len() == BURST
    });
    assert_eq!(requests.len(), BURST, "not every request was read");
    assert!(
        p.b.core.stats().requests_pending >= BURST as u64,
        "{:?}",
        p.b.core.stats()
    );
    for r in &requests {
        let qb = p.b.qp(16);
        p.b.core.accept(r.request, qb, b"", None).expect("accept");
    }
    let mut established = 0;
    p.run_until(5000, |p| {
        established +=
            p.a.take_events()
                .iter()
                .filter(|e| matches!(e, CmEvent::Established(_)))
                .count();
        established == BURST
    });
    assert_eq!(established, BURST);
    let stats = p.b.core.stats();
    assert_eq!(stats.requests_evicted, 0, "{stats:?}");
    assert_eq!(stats.requests_pending, 0, "{stats:?}");
}

/// A request table full of requests handed to the application (none may be evicted: the
/// application may still answer them) refuses a new connection with RST, and counts it
/// (`CoreStats::requests_refused`); the initiator learns of it as a lost connection.
#[test]
fn a_table_full_of_unanswered_requests_refuses_and_counts_a_new_one() {
    let b_cfg = EngineConfig {
        max_pending_requests: 2,
        ..EngineConfig::default()
    };
    let mut p = Pair::with_configs(&LinkConfig::default(), &EngineConfig::default(), &b_cfg);
    p.b.core.listen(PORT, MpaParams::default()).expect("listen");
    for k in 0..2 {
        let qa = p.a.qp(16);
        p.a.core
            .connect(qa, (ip(2), PORT), &MpaParams::default(), b"waiting")
            .expect("connect");
        let _ = p.wait_request();
        assert_eq!(p.b.core.stats().requests_pending, k + 1);
    }
    assert_eq!(p.b.core.stats().requests_refused, 0);
    let third = p.a.qp(16);
    p.a.core
        .connect(third, (ip(2), PORT), &MpaParams::default(), b"no room")
        .expect("connect");
    let mut lost = false;
    for _ in 0..2000 {
        p.step();
        lost |=
            p.a.take_events()
                .iter()
                .any(|e| matches!(e, CmEvent::Error { qp, .. } if *qp == third));
        if lost {
            break;
        }
    }
    assert!(lost, "the third initiator was never told");
    let stats = p.b.core.stats();
    assert_eq!(
        (stats.requests_refused, stats.requests_pending),
        (1, 2),
        "{stats:?}"
    );
    assert_eq!(stats.requests_evicted, 0);
}

/// A peer that sends part of an MPA Request and closes: the Request can never be whole, so
/// the pending request goes at once (our side closes too), not at the startup timeout.
#[test]
fn a_peer_that_closes_mid_request_frees_its_slot_at_once() {
    let mut p = Pair::new(&LinkConfig::default(), &EngineConfig::default());
    p.b.core.listen(PORT, MpaParams::default()).expect("listen");
    let c =
        p.a.core
            .stack_mut()
            .connect((ip(2), PORT), None, &TcpTuning::default())
            .expect("connect");
    let mut sent = false;
    let mut pending_seen = false;
    let t0 = p.now;
    for _ in 0..20_000 {
        p.step();
        let stack = p.a.core.stack_mut();
        if !sent && stack.state(c) == Ok(State::Established) {
            assert_eq!(stack.send(c, b"MPA ID Req Fr").expect("send"), 13);
            stack.close(c).expect("close");
            sent = true;
        }
        let pending = p.b.core.stats().requests_pending;
        pending_seen |= pending == 1;
        if pending_seen && pending == 0 {
            break;
        }
    }
    assert!(
        pending_seen,
        "the connection never became a pending request"
    );
    assert_eq!(
        p.b.core.stats().requests_pending,
        0,
        "the slot is still held"
    );
    assert!(
        p.now - t0 < Duration::from_secs(1),
        "freed only after {}",
        p.now - t0
    );
    assert_eq!(p.b.core.stats().requests_timed_out, 0);
}

/// MPA-7.1.2-27 (work per loop under a flood): a thousand connections that never send their
/// MPA Request (a cheap flood: one handshake each, then silence; the table holds 1,024 of
/// them for `mpa_timeout_ms`) made every loop of the core visit every pending request (a
/// read of its TCP connection and its startup timer): 2,000 loops took 83 ms instead of
/// 0.17 ms, every QP on the core held hostage by one peer. They are visited when their
/// connection has something for them or their deadline comes (`CoreStats::request_visits`
/// counts the visits: 2,000,000 in those loops before), and the timeout still ends them all.
#[test]
fn mpa_7_1_2_27_silent_pending_requests_do_not_cost_every_loop() {
    let mut p = Pair::default_pair();
    p.b.core.listen(PORT, MpaParams::default()).expect("listen");
    p.run(10);
    let n = 1000;
    for _ in 0..n {
        p.a.core
            .stack_mut()
            .connect((ip(2), PORT), None, &TcpTuning::default())
            .expect("connect");
    }
    p.run_until(20_000, |p| p.b.core.stats().requests_pending == n);
    let before = p.b.core.stats().request_visits;
    for _ in 0..2000 {
        p.b.core.poll(p.now);
        p.now += Duration::from_micros(1);
    }
    let visits = p.b.core.stats().request_visits - before;
    assert_eq!(p.b.core.stats().requests_pending, n, "still pending");
    assert!(
        visits <= n,
        "2,000 loops visited {visits} requests with {n} silent ones pending"
    );
    // Their startup timeout still ends every one of them (MPA-7.1.2-27).
    let timeout = Duration::from_millis(EngineConfig::default().mpa_timeout_ms);
    let end = p.now + timeout + Duration::from_millis(100);
    while p.now < end {
        p.step();
    }
    assert_eq!(p.b.core.stats().requests_pending, 0);
    assert_eq!(p.b.core.stats().requests_timed_out, n);
}

/// MPA-7.1.2-27 (work under a slow flood): silent connections arriving a few milliseconds
/// apart have deadlines as far apart, and a visit of every pending request at each one's
/// deadline cost N visits N times per startup timeout (501,500 for these 1,000; 52,400
/// with a visit of all at most every 50 ms). Each is visited at its own deadline now
/// (`mpa_7_1_2_27_each_request_times_out_at_its_deadline_alone`).
#[test]
fn mpa_7_1_2_27_deadlines_far_apart_do_not_each_visit_every_request() {
    let mut p = Pair::default_pair();
    p.b.core.listen(PORT, MpaParams::default()).expect("listen");
    p.run(10);
    let n = 1000;
    for _ in 0..n {
        p.a.core
            .stack_mut()
            .connect((ip(2), PORT), None, &TcpTuning::default())
            .expect("connect");
        // Both polled every millisecond, so that each arrives 5 ms after the one before.
        for _ in 0..5 {
            p.a.core.poll(p.now);
            p.b.core.poll(p.now);
            p.now += Duration::from_millis(1);
        }
    }
    // B polled every millisecond (a core polls far more often) until all have timed out.
    let timeout = Duration::from_millis(EngineConfig::default().mpa_timeout_ms);
    let end = p.now + timeout + Duration::from_millis(200);
    while p.now < end {
        p.b.core.poll(p.now);
        p.now += Duration::from_millis(1);
    }
    let st = p.b.core.stats();
    assert_eq!((st.requests_pending, st.requests_timed_out), (0, n as u64));
    // Not a visit of all those pending at each of the 1,000 deadlines (501,500).
    assert!(
        st.request_visits < 150_000,
        "{} visits for {n} requests",
        st.request_visits
    );
}

/// MPA-7.1.2-27 (a deadline structure, not a periodic scan): silent connections arriving
/// 5 ms apart each time out at the first loop at or after their own deadline (B polled
/// every millisecond), and only they are visited then: one deadline visit per request. A
/// visit of every pending request at most every 50 ms let a request outlive its deadline
/// by up to 50 ms and cost each timeout a visit of every request still pending.
#[test]
fn mpa_7_1_2_27_each_request_times_out_at_its_deadline_alone() {
    let mut p = Pair::default_pair();
    p.b.core.listen(PORT, MpaParams::default()).expect("listen");
    p.run(10);
    let n = 200;
    let limit = Duration::from_millis(EngineConfig::default().mpa_timeout_ms);
    // The engine time of each request's arrival: the loop in which B took it on.
    let mut arrivals: Vec<Instant> = Vec::new();
    let tick = |p: &mut Pair, arrivals: &mut Vec<Instant>| {
        p.a.core.poll(p.now);
        p.b.core.poll(p.now);
        let pending = p.b.core.stats().requests_pending as usize;
        while arrivals.len() < pending {
            arrivals.push(p.now);
        }
        p.now += Duration::from_millis(1);
    };
    for _ in 0..n {
        p.a.core
            .stack_mut()
            .connect((ip(2), PORT), None, &TcpTuning::default())
            .expect("connect");
        for _ in 0..5 {
            tick(&mut p, &mut arrivals);
        }
    }
    for _ in 0..20 {
        tick(&mut p, &mut arrivals);
    }
    assert_eq!(arrivals.len(), n, "{:?}", p.b.core.stats());
    assert_eq!(p.b.core.stats().requests_timed_out, 0);
    let visits_before = p.b.core.stats().request_visits;
    // B alone from here, every millisecond: after each loop, exactly the requests whose
    // deadline (`limit` after arrival) that loop reached have timed out.
    let end = *arrivals.last().unwrap() + limit + Duration::from_millis(10);
    while p.now < end {
        p.b.core.poll(p.now);
        let due = arrivals.iter().filter(|&&t| t + limit <= p.now).count() as u64;
        let st = p.b.core.stats();
        assert_eq!(
            st.requests_timed_out, due,
            "at {}: {} timed out, {due} due",
            p.now, st.requests_timed_out
        );
        p.now += Duration::from_millis(1);
    }
    let st = p.b.core.stats();
    assert_eq!((st.requests_pending, st.requests_timed_out), (0, n as u64));
    // One visit each, at its deadline.
    let visits = st.request_visits - visits_before;
    assert_eq!(
        visits, n as u64,
        "{visits} deadline visits for {n} requests"
    );
}

/// The core's next wake-up (`EngineCore::poll_at`, which a simulated clock jumps to)
/// includes the earliest MPA deadline: a caller that sleeps until it is polled at it, and a
/// silent pending request is reset at its startup timeout to the microsecond
/// (MPA-7.1.2-27); the same for a connecting initiator whose Reply never comes. Before,
/// only the TCP's timers counted: an idle core with nothing else due had no wake-up at all.
#[test]
fn mpa_7_1_2_27_poll_at_includes_the_earliest_mpa_deadline() {
    let limit = Duration::from_millis(EngineConfig::default().mpa_timeout_ms);
    // The responder: one silent connection.
    let mut p = Pair::default_pair();
    p.b.core.listen(PORT, MpaParams::default()).expect("listen");
    p.run(10);
    p.a.core
        .stack_mut()
        .connect((ip(2), PORT), None, &TcpTuning::default())
        .expect("connect");
    let mut since = None;
    p.run_until(2000, |p| {
        if p.b.core.stats().requests_pending == 1 {
            since = Some(p.now);
        }
        since.is_some()
    });
    // MPA's startup timer: a Request not whole at `limit` after the connection came.
    let deadline = since.unwrap() + limit;
    // A second on, the TCP's own timers long done.
    let idle = deadline - limit + Duration::from_secs(1);
    p.run_until(100_000, |p| p.now >= idle);
    let at = p.b.core.poll_at();
    assert!(
        at.is_some_and(|t| t <= deadline),
        "B's next wake-up {at:?}, the request's deadline {deadline}"
    );
    // Stepped from wake-up to wake-up, the request times out at its deadline (the rig
    // moves its clock at least 10 µs a step).
    p.run_until(100_000, |p| p.b.core.stats().requests_timed_out == 1);
    let step = Duration::from_micros(10);
    assert!(
        p.now >= deadline && p.now <= deadline + step,
        "timed out at {}, due at {deadline}",
        p.now
    );

    // The initiator: A's startup timeout (1 s) runs out before B's (10 s), and B's
    // application never answers the request.
    let a_cfg = EngineConfig {
        mpa_timeout_ms: 1000,
        ..EngineConfig::default()
    };
    let mut p = Pair::with_configs(&LinkConfig::default(), &a_cfg, &EngineConfig::default());
    p.b.core.listen(PORT, MpaParams::default()).expect("listen");
    p.run(10);
    let qa = p.a.qp(16);
    // A's clock at the connect: its startup timer counts from there.
    let t0 = p.now;
    p.a.core.poll(t0);
    p.a.core
        .connect(qa, (ip(2), PORT), &MpaParams::default(), b"")
        .expect("connect");
    let _ = p.wait_request();
    let deadline = t0 + Duration::from_millis(a_cfg.mpa_timeout_ms);
    p.run_until(100_000, |p| p.now >= t0 + Duration::from_millis(500));
    let at = p.a.core.poll_at();
    assert!(
        at.is_some_and(|t| t <= deadline),
        "A's next wake-up {at:?}, the initiator's deadline {deadline}"
    );
    let mut failed = None;
    p.run_until(100_000, |p| {
        let timed_out = p.a.take_events().iter().any(
            |e| matches!(e, CmEvent::Error { qp, error: ConnError::Negotiation { .. } } if *qp == qa),
        );
        if timed_out {
            failed = Some(p.now);
        }
        failed.is_some()
    });
    // The event is taken after the loop that raised it (the clock then stands still: the
    // loop did work).
    assert!(
        failed.is_some_and(|t| t >= deadline && t <= deadline + step),
        "failed at {failed:?}, due at {deadline}"
    );
}

/// MPA-7.1.2-27 (work per loop of connecting QPs): the startup timers of connecting
/// initiators cost a loop nothing until one is due, then each is taken once, at its
/// deadline (`CoreStats::mpa_timer_visits`); the timers poller visited every connecting
/// QP at every loop (200 QPs waiting for a Reply: 400,000 visits in 2,000 loops).
#[test]
fn mpa_7_1_2_27_connecting_initiators_cost_no_loop_before_their_deadline() {
    let a_cfg = EngineConfig {
        mpa_timeout_ms: 1000,
        ..EngineConfig::default()
    };
    let mut p = Pair::with_configs(&LinkConfig::default(), &a_cfg, &EngineConfig::default());
    p.b.core.listen(PORT, MpaParams::default()).expect("listen");
    p.run(10);
    let n = 200;
    let qas: Vec<_> = (0..n).map(|_| p.a.qp(4)).collect();
    // A's clock at the connects: their startup timers count from there.
    let t0 = p.now;
    p.a.core.poll(t0);
    for &qa in &qas {
        p.a.core
            .connect(qa, (ip(2), PORT), &MpaParams::default(), b"")
            .expect("connect");
    }
    // B's application sits on every request: no Reply comes.
    let mut requests = 0;
    p.run_until(20_000, |p| {
        requests +=
            p.b.take_events()
                .iter()
                .filter(|e| matches!(e, CmEvent::ConnectRequest(_)))
                .count();
        requests == n
    });
    let deadline = t0 + Duration::from_millis(a_cfg.mpa_timeout_ms);
    assert!(p.now < deadline, "{}", p.now);
    assert_eq!(p.a.core.stats().mpa_timers, n as u64);
    for _ in 0..2000 {
        p.a.core.poll(p.now);
        p.now += Duration::from_micros(1);
    }
    assert_eq!(
        p.a.core.stats().mpa_timer_visits,
        0,
        "timers visited before any was due"
    );
    // A polled every millisecond: every initiator fails in the loop at its deadline.
    p.a.take_events();
    let mut failed = Vec::new();
    while failed.len() < n && p.now < deadline + Duration::from_millis(100) {
        p.a.core.poll(p.now);
        p.b.core.poll(p.now);
        while let Some(e) = p.a.core.next_event() {
            if let CmEvent::Error {
                error: ConnError::Negotiation { .. },
                ..
            } = e
            {
                failed.push(p.now);
            }
        }
        p.now += Duration::from_millis(1);
    }
    assert_eq!(failed.len(), n);
    let ms = Duration::from_millis(1);
    assert!(
        failed
            .iter()
            .all(|&t| t == failed[0] && t >= deadline && t < deadline + ms),
        "failed at {:?}..{:?}, due at {deadline}",
        failed.first(),
        failed.last()
    );
    assert_eq!(p.a.core.stats().mpa_timer_visits, n as u64);
    assert_eq!(p.a.core.stats().mpa_timers, 0);
}

/// A mass teardown leaves thousands of zombie connections (their QPs gone, TCP still
/// closing); each of their TCP events (the end of the connection, octets to drop) looked
/// for its connection in the list of all of them (`CoreStats::zombie_probes`: 200 zombies'
/// ends cost ~20,000 probes). One look-up each now.
#[test]
fn zombie_events_find_their_connection_with_one_probe() {
    const N: usize = 200;
    let mut p = Pair::default_pair();
    p.b.core.listen(PORT, MpaParams::default()).expect("listen");
    let qas: Vec<_> = (0..N).map(|_| p.a.qp(4)).collect();
    for &qa in &qas {
        p.a.core
            .connect(qa, (ip(2), PORT), &MpaParams::default(), b"")
            .expect("connect");
    }
    let mut accepted = 0;
    p.run_until(20_000, |p| {
        for e in p.b.take_events() {
            if let CmEvent::ConnectRequest(r) = e {
                let qb = p.b.qp(4);
                p.b.core.accept(r.request, qb, b"", None).expect("accept");
                accepted += 1;
            }
        }
        accepted == N
    });
    let mut established = 0;
    p.run_until(20_000, |p| {
        established +=
            p.a.take_events()
                .iter()
                .filter(|e| matches!(e, CmEvent::Established(_)))
                .count();
        established == N
    });
    // All destroyed at once: N zombies, then their ends.
    let before = p.a.core.stats().zombie_probes;
    for &qa in &qas {
        p.a.core.destroy_qp(qa).expect("destroy");
    }
    assert_eq!(p.a.core.stats().tcp_zombies, N as u64);
    p.run_until(20_000, |p| p.a.core.stats().tcp_zombies == 0);
    let probes = p.a.core.stats().zombie_probes - before;
    assert!(
        probes <= 2 * N as u64,
        "{probes} zombie probes for {N} zombies' ends"
    );
}

/// RFC 4987 3.4, MPA-7.1.2-27: a flood of silent connections against a full table of
/// pending requests costs each new connection a look at the oldest evictable request, not
/// a scan of the table (two per connection: the oldest closing, then the oldest reading,
/// `CoreStats::eviction_probes`), and each eviction still takes the oldest silent one.
#[test]
fn a_full_request_table_evicts_the_oldest_with_a_look_not_a_scan() {
    let cfg = EngineConfig {
        max_pending_requests: 512,
        ..EngineConfig::default()
    };
    let mut p = Pair::new(&LinkConfig::default(), &cfg);
    p.b.core.listen(PORT, MpaParams::default()).expect("listen");
    let mut silent = Vec::new();
    let flood = 512 + 300;
    for _ in 0..flood {
        silent_connection(&mut p, &mut silent);
        p.run(2);
    }
    p.run(2);
    let st = p.b.core.stats();
    assert!(st.requests_evicted >= 250, "{st:?}");
    assert!(
        st.eviction_probes <= 2 * st.requests_evicted,
        "{} entries looked at for {} evictions",
        st.eviction_probes,
        st.requests_evicted
    );
    // The oldest went: the connections left established on A's side are the newest.
    let alive: Vec<bool> = silent
        .iter()
        .map(|&c| p.a.core.stack_mut().state(c) == Ok(State::Established))
        .collect();
    let first_alive = alive.iter().position(|&a| a).expect("some alive");
    assert!(
        alive[first_alive..].iter().filter(|&&a| !a).count() <= 2,
        "an eviction took a newer connection before an older one: {alive:?}"
    );
}

/// Opens `n` TCP connections from A's stack to B's listener, sends `request` on each once
/// it is established, and returns them.
fn raw_requests(p: &mut Pair, n: usize, request: &[u8]) -> Vec<ConnId> {
    let conns: Vec<ConnId> = (0..n)
        .map(|_| {
            p.a.core
                .stack_mut()
                .connect((ip(2), PORT), None, &TcpTuning::default())
                .expect("connect")
        })
        .collect();
    let mut sent = vec![false; n];
    p.run_until(100_000, |p| {
        let stack = p.a.core.stack_mut();
        for (k, &c) in conns.iter().enumerate() {
            if !sent[k] && stack.state(c) == Ok(State::Established) {
                assert_eq!(stack.send(c, request).expect("send"), request.len());
                sent[k] = true;
            }
        }
        sent.iter().all(|&s| s)
    });
    conns
}

/// MPA-7.1.1-3 (a malformed Request is refused and reported), against an application that
/// reads no events for a while: each refusal queued a `RequestRefused` without bound, so a
/// peer's flood of bad Requests grew the core's queue (and the runtime's, behind the ring)
/// as long as it went on. At most `event_queue_depth` reports wait; the rest are counted,
/// and every connection is refused all the same.
#[test]
fn mpa_7_1_1_3_refusal_reports_wait_bounded_for_an_application_that_reads_none() {
    let cfg = EngineConfig {
        event_queue_depth: 16,
        ..EngineConfig::default()
    };
    let mut p = Pair::new(&LinkConfig::default(), &cfg);
    p.b.core.listen(PORT, MpaParams::default()).expect("listen");
    p.b.hold_events = true;
    // A bad key: a malformed Request (MPA-7.1.2-4).
    let conns = raw_requests(&mut p, 40, b"XPA ID Req Frame\x40\x01\x00\x00");
    p.run_until(100_000, |p| {
        p.b.core.stats().requests_pending == 0 && p.b.core.stats().refusals_unreported + 16 >= 40
    });
    // Every connection was closed by B.
    p.run(200);
    for &c in &conns {
        let st = p.a.core.stack_mut().state(c);
        assert!(matches!(st, Ok(State::CloseWait | State::Closed)), "{st:?}");
    }
    assert_eq!(p.b.core.stats().refusals_unreported, 24);
    p.b.hold_events = false;
    p.step();
    let events = p.b.take_events();
    assert_eq!(events.len(), 16, "{events:?}");
    assert!(events
        .iter()
        .all(|e| matches!(e, CmEvent::RequestRefused { .. })));
    // Taken, they make room: the next bad Request is reported again.
    raw_requests(&mut p, 1, b"XPA ID Req Frame\x40\x01\x00\x00");
    p.run_until(100_000, |p| {
        p.b.events
            .iter()
            .any(|e| matches!(e, CmEvent::RequestRefused { .. }))
    });
    assert_eq!(p.b.core.stats().refusals_unreported, 24);
}

/// A request whose peer gives up (RST) or whose startup times out before the application
/// took its `ConnectRequest`: the event is withdrawn, and no `RequestCancelled` queued
/// (the application never learnt of it). Each such request added two events that waited
/// for an application reading none, without bound as a flood's peers came and went; now
/// the undelivered requests are at most the table's `max_pending_requests`. Once the
/// application has taken the `ConnectRequest`, the cancel still comes
/// (`a_request_never_answered_is_dropped_with_an_event`).
#[test]
fn a_request_gone_before_the_application_took_its_event_withdraws_it() {
    let mut p = Pair::new(&LinkConfig::default(), &EngineConfig::default());
    p.b.core.listen(PORT, MpaParams::default()).expect("listen");
    p.b.hold_events = true;
    let request = b"MPA ID Req Frame\x40\x01\x00\x00";
    let conns = raw_requests(&mut p, 8, request);
    p.run_until(100_000, |p| p.b.core.stats().requests_pending == 8);
    // Six peers give up with a reset; two stay until the startup timeout.
    for &c in &conns[..6] {
        p.a.core.stack_mut().abort(c).expect("abort");
    }
    p.run_until(100_000, |p| p.b.core.stats().requests_pending == 2);
    assert_eq!(p.b.core.stats().requests_withdrawn, 6);
    let timeout = Duration::from_millis(EngineConfig::default().mpa_timeout_ms);
    let end = p.now + timeout + Duration::from_secs(1);
    p.run_until(1_000_000, |p| p.now >= end);
    let st = p.b.core.stats();
    assert_eq!(
        (
            st.requests_pending,
            st.requests_timed_out,
            st.requests_withdrawn
        ),
        (0, 2, 8)
    );
    p.b.hold_events = false;
    p.step();
    let events = p.b.take_events();
    assert!(events.is_empty(), "{events:?}");
}
