//! A connection whose TCP never comes up says why: the peer's RST (nothing listens on the
//! port) is `ConnError::TcpReset`, a SYN that left and drew no answer until the TCP gave
//! up is `ConnError::TcpTimedOut`, and a next hop that never answered ARP (no host at the
//! address, so no SYN could leave) is `ConnError::NeighborUnresolved`. rdma_cm tells these
//! apart (REJECTED with -ECONNREFUSED, UNREACHABLE with -ETIMEDOUT, CONNECT_ERROR with
//! -EHOSTUNREACH over cxgb4), and so must the engine, or the drop-in librdmacm reports a
//! refused connection as an unreachable host. `EngineCore::resolve_neighbor` resolves a
//! next hop on request (rdma_resolve_addr's ARP step). An unlisten
//! ends the connections still in their MPA startup on the port (rejected or reset), so
//! none reaches the user as a request on a port nobody listens on.

mod common;

use common::*;
use warpcore_engine::tcp::link::LinkConfig;
use warpcore_engine::tcp::smoltcp::time::Duration;
use warpcore_engine::{
    CmEvent, ConnError, DisconnectCause, EngineConfig, EngineError, MpaParams, QpId, SendOp,
};

/// Steps the pair until A reports an error for `qa` (at most `max` steps); returns it.
fn error_of(p: &mut Pair, qa: QpId, max: usize) -> ConnError {
    let mut got = None;
    p.run_until(max, |p| {
        for e in p.a.take_events() {
            match e {
                CmEvent::Error { qp, error } if qp == qa => got = Some(error),
                CmEvent::Established(_) => panic!("connected: {e:?}"),
                _ => {}
            }
        }
        got.is_some()
    });
    got.expect("an error")
}

#[test]
fn a_syn_answered_by_a_rst_is_a_reset_not_a_timeout() {
    let mut p = Pair::default_pair();
    let qa = p.a.qp(8);
    // B is up but listens on nothing: its TCP answers the SYN with a RST.
    p.a.core
        .connect(qa, (ip(2), PORT), &MpaParams::default(), b"")
        .expect("connect");
    assert_eq!(error_of(&mut p, qa, 2_000), ConnError::TcpReset);
    assert_eq!(ConnError::TcpReset.to_string(), "TCP connection reset");
}

/// No host has 10.0.0.9 (ip(9)) on the link: no ARP answer, so no SYN ever leaves, and
/// the connection's user timeout ends it. The cause is the next hop, not a silent peer:
/// `NeighborUnresolved` (before, `TcpTimedOut`, as if a SYN had gone unanswered).
#[test]
fn a_connect_whose_next_hop_never_answers_arp_says_so() {
    let mut cfg = EngineConfig::default();
    cfg.tcp.timeout = Some(Duration::from_millis(300));
    cfg.tcp.keep_alive = Some(Duration::from_millis(100));
    let mut p = Pair::new(&LinkConfig::default(), &cfg);
    let qa = p.a.qp(8);
    p.a.core
        .connect(qa, (ip(9), PORT), &MpaParams::default(), b"")
        .expect("connect");
    let start = p.now;
    assert_eq!(error_of(&mut p, qa, 20_000), ConnError::NeighborUnresolved);
    assert!(
        p.now - start >= Duration::from_millis(300),
        "ended before its timeout: {}",
        p.now - start
    );
    assert_eq!(
        ConnError::NeighborUnresolved.to_string(),
        "the next hop did not answer ARP: host unreachable"
    );
}

/// A resolves B (B answers ARP), then B goes silent (every frame it sends lost) and A
/// connects QP `qa` to it: the SYN leaves and draws nothing.
fn connect_into_silence(p: &mut Pair, qa: QpId) {
    let r =
        p.a.core
            .resolve_neighbor(ip(2), std::time::Duration::from_secs(1))
            .expect("resolve");
    let mut resolved = false;
    p.run_until(2_000, |p| {
        resolved |= p.a.take_events().contains(&CmEvent::NeighborResolved(r));
        resolved
    });
    assert!(resolved, "B answered no ARP request");
    p.b.core
        .stack()
        .device()
        .set_tx_faults(warpcore_engine::tcp::link::Faults {
            loss: 1.0,
            ..Default::default()
        })
        .expect("faults");
    p.a.core
        .connect(qa, (ip(2), PORT), &MpaParams::default(), b"")
        .expect("connect");
}

/// B answers ARP (A resolves it first), then goes silent: A's SYN leaves and draws
/// nothing, and the connection's user timeout ends it as `TcpTimedOut`.
#[test]
fn a_syn_nobody_answers_times_out_and_says_so() {
    let mut cfg = EngineConfig::default();
    cfg.tcp.timeout = Some(Duration::from_millis(300));
    cfg.tcp.keep_alive = Some(Duration::from_millis(100));
    let mut p = Pair::new(&LinkConfig::default(), &cfg);
    let qa = p.a.qp(8);
    connect_into_silence(&mut p, qa);
    let start = p.now;
    assert_eq!(error_of(&mut p, qa, 20_000), ConnError::TcpTimedOut);
    assert!(p.now - start >= Duration::from_millis(300));
    assert!(p.a.core.stats().tcp_segments_sent >= 1, "no SYN left");
    assert_eq!(
        ConnError::TcpTimedOut.to_string(),
        "TCP connection timed out"
    );
}

/// `resolve_neighbor` of an address nobody holds fails once its timeout has passed (not
/// before), of one B holds resolves; an address off every route is refused at once.
#[test]
fn resolve_neighbor_reports_resolved_or_failed() {
    let mut p = Pair::default_pair();
    let gone =
        p.a.core
            .resolve_neighbor(ip(9), std::time::Duration::from_millis(200))
            .expect("resolve");
    let live =
        p.a.core
            .resolve_neighbor(ip(2), std::time::Duration::from_millis(200))
            .expect("resolve");
    assert_ne!(gone, live);
    let start = p.now;
    let (mut ok, mut failed_at) = (false, None);
    p.run_until(40_000, |p| {
        for e in p.a.take_events() {
            match e {
                CmEvent::NeighborResolved(r) if r == live => ok = true,
                CmEvent::NeighborFailed(r) if r == gone => failed_at = Some(p.now),
                _ => panic!("unexpected {e:?}"),
            }
        }
        ok && failed_at.is_some()
    });
    assert!(ok, "B was not resolved");
    let failed_at = failed_at.expect("ip(9) never failed");
    assert!(
        failed_at - start >= Duration::from_millis(200),
        "failed before its timeout: {}",
        failed_at - start
    );
    let far = warpcore_engine::tcp::smoltcp::wire::Ipv4Address::new(192, 0, 2, 1);
    assert!(matches!(
        p.a.core
            .resolve_neighbor(far, std::time::Duration::from_secs(1)),
        Err(EngineError::Stack(
            warpcore_engine::tcp::StackError::NoRoute(_)
        ))
    ));
}

/// Connects a fresh QP of A to B's `PORT`; returns the first outcome: `Ok` once
/// established (B accepting the request), else A's error.
fn try_connect(p: &mut Pair) -> Result<(), ConnError> {
    let qa = p.a.qp(8);
    let qb = p.b.qp(8);
    p.a.core
        .connect(qa, (ip(2), PORT), &MpaParams::default(), b"")
        .expect("connect");
    let mut out = None;
    p.run_until(4_000, |p| {
        for e in p.b.take_events() {
            if let CmEvent::ConnectRequest(r) = e {
                p.b.core.accept(r.request, qb, b"", None).expect("accept");
            }
        }
        for e in p.a.take_events() {
            match e {
                CmEvent::Established(_) => out = Some(Ok(())),
                CmEvent::Error { qp, error } if qp == qa => out = Some(Err(error)),
                _ => {}
            }
        }
        out.is_some()
    });
    out.expect("an outcome")
}

/// `EngineCore::unlisten`: a port no longer listened on refuses connections at the TCP
/// (a RST, `TcpReset` at the initiator) instead of taking them through the MPA startup to
/// a request nobody wants; the port can be listened on again, and a port nothing listens
/// on is `NotListening`.
#[test]
fn an_unlistened_port_refuses_connections_and_can_listen_again() {
    let mut p = Pair::default_pair();
    p.b.core.listen(PORT, MpaParams::default()).expect("listen");
    assert_eq!(try_connect(&mut p), Ok(()));
    p.b.core.unlisten(PORT).expect("unlisten");
    assert_eq!(
        p.b.core.unlisten(PORT),
        Err(EngineError::NotListening(PORT))
    );
    let before = p.b.core.stats().requests_refused;
    assert_eq!(try_connect(&mut p), Err(ConnError::TcpReset));
    assert_eq!(
        p.b.core.stats().requests_refused,
        before,
        "no request was made"
    );
    p.b.core
        .listen(PORT, MpaParams::default())
        .expect("listen again");
    assert_eq!(try_connect(&mut p), Ok(()));
}

/// Polls A then B once each, 10 µs apart, collecting B's events into `b_events` (A's stay
/// in `p.a.events`).
fn step_pair(p: &mut Pair, b_events: &mut Vec<CmEvent>) {
    p.a.core.poll(p.now);
    p.b.core.poll(p.now);
    while let Some(e) = p.b.core.next_event() {
        b_events.push(e);
    }
    while let Some(e) = p.a.core.next_event() {
        p.a.events.push(e);
    }
    p.now += Duration::from_micros(10);
}

/// Steps the pair until A reports how its connect ended (an error or a rejection), B's
/// events gathered into `b_events`; returns A's outcome.
fn initiator_outcome(p: &mut Pair, qa: QpId, b_events: &mut Vec<CmEvent>) -> CmEvent {
    let mut out = None;
    p.run_until(20_000, |p| {
        b_events.extend(p.b.take_events());
        for e in p.a.take_events() {
            match e {
                CmEvent::Error { qp, .. } | CmEvent::Rejected { qp, .. } if qp == qa => {
                    out = Some(e)
                }
                CmEvent::Established(_) => panic!("connected: {e:?}"),
                _ => {}
            }
        }
        out.is_some()
    });
    b_events.extend(p.b.take_events());
    out.expect("an outcome")
}

/// A connection the engine took from the TCP before `unlisten` but whose MPA Request had
/// not arrived (A's frames after the handshake are lost) is reset at the unlisten: once
/// A's link works again its Request is never read, B reports no `ConnectRequest` on the
/// port nobody listens on, and A's connect ends refused (`TcpReset`, REJECTED/-ECONNREFUSED
/// at an rdma_cm peer). Before, the request stayed in its startup and reached B's user
/// when the retransmitted Request came.
#[test]
fn unlisten_resets_a_connection_whose_mpa_request_has_not_arrived() {
    let mut p = Pair::default_pair();
    let qa = p.a.qp(8);
    p.b.core.listen(PORT, MpaParams::default()).expect("listen");
    p.a.core
        .connect(qa, (ip(2), PORT), &MpaParams::default(), b"")
        .expect("connect");
    let mut b_events = Vec::new();
    let lost = warpcore_engine::tcp::link::Faults {
        loss: 1.0,
        ..Default::default()
    };
    for _ in 0..100 {
        step_pair(&mut p, &mut b_events);
        // The SYN and the handshake's ACK went out: everything after them is lost.
        if p.a.core.stats().tcp_segments_sent >= 2 {
            p.a.core
                .stack()
                .device()
                .set_tx_faults(lost.clone())
                .expect("faults");
        }
        if p.b.core.stats().requests_pending == 1 {
            break;
        }
    }
    assert_eq!(
        p.b.core.stats().requests_pending,
        1,
        "B took the connection"
    );
    assert!(b_events.is_empty(), "{b_events:?}");
    p.b.core.unlisten(PORT).expect("unlisten");
    assert_eq!(p.b.core.stats().requests_pending, 0, "the request ended");
    p.a.core
        .stack()
        .device()
        .set_tx_faults(Default::default())
        .expect("faults");
    let out = initiator_outcome(&mut p, qa, &mut b_events);
    assert!(
        matches!(
            out,
            CmEvent::Error {
                error: ConnError::TcpReset,
                ..
            }
        ),
        "{out:?}"
    );
    assert_no_request(&b_events);
}

/// A connection whose whole MPA Request sits in B's TCP receive buffer, not yet read by
/// the engine (so not reported), when B unlistens: the Request is answered with a Reply
/// with R = 1 (RFC 5044 §7.1.2, as iw_cm rejects a request reaching a listener that no
/// longer listens), so A's user sees `Rejected`, and B's never sees the request. Before,
/// the next loop read the Request and reported it as a `ConnectRequest` on a port nobody
/// listened on.
#[test]
fn unlisten_rejects_a_connection_whose_mpa_request_arrived_unread() {
    let mut p = Pair::default_pair();
    let qa = p.a.qp(8);
    p.b.core.listen(PORT, MpaParams::default()).expect("listen");
    p.a.core
        .connect(qa, (ip(2), PORT), &MpaParams::default(), b"")
        .expect("connect");
    let mut b_events = Vec::new();
    let sent_by_a = |p: &Pair| p.a.core.stats().tcp_segments_sent;
    // The SYN and the handshake's ACK from A, ...
    for _ in 0..100 {
        step_pair(&mut p, &mut b_events);
        if sent_by_a(&p) >= 2 {
            break;
        }
    }
    assert_eq!(
        sent_by_a(&p),
        2,
        "A sent its Request with the handshake's ACK"
    );
    // ... B alone takes the connection, nothing more from A yet, ...
    p.b.core.poll(p.now);
    assert_eq!(
        p.b.core.stats().requests_pending,
        1,
        "B took the connection"
    );
    // ... A alone sends its Request, ...
    for _ in 0..10 {
        p.a.core.poll(p.now);
        p.now += Duration::from_micros(10);
        if sent_by_a(&p) > 2 {
            break;
        }
    }
    // ... and B's next loop receives it at its end, after the requests poller ran.
    p.b.core.poll(p.now);
    b_events.extend(std::iter::from_fn(|| p.b.core.next_event()));
    assert!(
        b_events.is_empty(),
        "reported before the unlisten: {b_events:?}"
    );
    let ready = sent_by_a(&p) == 3 && p.b.core.stack().device().next_delivery().is_none();
    assert!(ready, "the Request never arrived unread");
    p.b.core.unlisten(PORT).expect("unlisten");
    let out = initiator_outcome(&mut p, qa, &mut b_events);
    assert!(matches!(out, CmEvent::Rejected { .. }), "{out:?}");
    assert_no_request(&b_events);
}

/// An established connection whose peer goes silent (the link drops everything B sends,
/// with data outstanding from A) ends when A's TCP gives up after its user timeout, and A's
/// user is told so: `Disconnected { cause: TimedOut }`, not the `Reset` of a peer's RST.
/// Before, both were `Disconnected { reset: true }`.
#[test]
fn an_established_connection_whose_peer_goes_silent_times_out_and_says_so() {
    let mut cfg = EngineConfig::default();
    cfg.tcp.timeout = Some(Duration::from_millis(300));
    cfg.tcp.keep_alive = Some(Duration::from_millis(100));
    let mut p = Pair::new(&LinkConfig::default(), &cfg);
    let (qa, _qb) = p.connect();
    let (_ra, sa) = p.a.region(4096, all_access());
    // B goes silent: nothing it sends arrives any more (no ACK, no RST).
    p.b.core
        .stack()
        .device()
        .set_tx_faults(warpcore_engine::tcp::link::Faults {
            loss: 1.0,
            ..Default::default()
        })
        .expect("faults");
    post_a(&mut p, qa, 1, SendOp::Send, &[(sa, 0, 64)]);
    let start = p.now;
    let mut cause = None;
    p.run_until(20_000, |p| {
        for e in p.a.take_events() {
            if let CmEvent::Disconnected { qp, cause: c } = e {
                assert_eq!(qp, qa);
                cause = Some(c);
            }
        }
        cause.is_some()
    });
    assert_eq!(cause, Some(DisconnectCause::TimedOut));
    assert!(cause.is_some_and(DisconnectCause::is_abortive));
    assert!(
        p.now - start >= Duration::from_millis(300),
        "ended before its timeout: {}",
        p.now - start
    );
}

/// The peer's RST ends an established connection as `Disconnected { cause: Reset }`.
#[test]
fn an_established_connection_the_peer_resets_says_reset() {
    let mut p = Pair::default_pair();
    let (qa, qb) = p.connect();
    p.b.core.abort(qb).expect("abort");
    let mut cause = None;
    p.run_until(2_000, |p| {
        for e in p.a.take_events() {
            if let CmEvent::Disconnected { qp, cause: c } = e {
                assert_eq!(qp, qa);
                cause = Some(c);
            }
        }
        cause.is_some()
    });
    assert_eq!(cause, Some(DisconnectCause::Reset));
}

/// B's user was never told of the request.
fn assert_no_request(b_events: &[CmEvent]) {
    assert!(
        !b_events
            .iter()
            .any(|e| matches!(e, CmEvent::ConnectRequest(_))),
        "{b_events:?}"
    );
}

/// With the default timeouts (TCP's user timeout 30 s, the MPA startup's 10 s) a SYN that
/// draws nothing ends as the TCP's timeout, `TcpTimedOut` (rdma_cm's UNREACHABLE,
/// -ETIMEDOUT), as the module says: the MPA startup timer (MPA-7.1.2-27) counts only once
/// TCP is established, since MPA starts then (mpa-08 §7.1.2). It used to count from
/// `connect`, so every unanswered connect of the default configuration failed after 10 s
/// as `Negotiation(Timeout)`, an MPA failure on a connection that never existed.
#[test]
fn a_syn_nobody_answers_is_a_tcp_timeout_with_the_default_timeouts() {
    let cfg = EngineConfig::default();
    assert!(cfg
        .tcp
        .timeout
        .is_some_and(|t| t.total_millis() > cfg.mpa_timeout_ms));
    let mut p = Pair::new(&LinkConfig::default(), &cfg);
    let qa = p.a.qp(8);
    connect_into_silence(&mut p, qa);
    assert_eq!(error_of(&mut p, qa, 200_000), ConnError::TcpTimedOut);
}
