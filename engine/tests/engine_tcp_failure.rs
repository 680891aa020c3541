//! A connection whose TCP never comes up says why: the peer's RST (nothing listens on the
//! port) is `ConnError::TcpReset`, silence until the TCP gives up (no host at the address,
//! so no ARP answer and no SYN-ACK) is `ConnError::TcpTimedOut`. rdma_cm tells these apart
//! (REJECTED with -ECONNREFUSED, UNREACHABLE with -ETIMEDOUT), and so must the engine, or
//! the drop-in librdmacm reports a refused connection as an unreachable host.

mod common;

use common::*;
use warpcore_engine::tcp::link::LinkConfig;
use warpcore_engine::tcp::smoltcp::time::Duration;
use warpcore_engine::{CmEvent, ConnError, EngineConfig, EngineError, MpaParams, QpId};

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

#[test]
fn a_syn_nobody_answers_times_out_and_says_so() {
    let mut cfg = EngineConfig::default();
    cfg.tcp.timeout = Some(Duration::from_millis(300));
    cfg.tcp.keep_alive = Some(Duration::from_millis(100));
    let mut p = Pair::new(&LinkConfig::default(), &cfg);
    let qa = p.a.qp(8);
    // No host has 10.0.0.9 (ip(9)) on the link: no ARP answer, so no SYN ever reaches
    // anyone, and the connection's user timeout ends it.
    p.a.core
        .connect(qa, (ip(9), PORT), &MpaParams::default(), b"")
        .expect("connect");
    let start = p.now;
    assert_eq!(error_of(&mut p, qa, 20_000), ConnError::TcpTimedOut);
    assert!(
        p.now - start >= Duration::from_millis(300),
        "ended before its timeout: {}",
        p.now - start
    );
    assert_eq!(
        ConnError::TcpTimedOut.to_string(),
        "TCP connection timed out"
    );
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
