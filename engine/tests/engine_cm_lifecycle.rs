//! The connection manager: listeners, pending requests, accept/reject races,
//! connect, the event stream and resource release at scale.

mod common;

use common::*;
use warpcore_engine::tcp::link::LinkConfig;
use warpcore_engine::tcp::smoltcp::socket::tcp::State;
use warpcore_engine::tcp::smoltcp::time::Duration;
use warpcore_engine::tcp::TcpTuning;
use warpcore_engine::{CmEvent, ConnError, EngineConfig, EngineError, MpaParams, QpState, SendOp};

/// Steps until every table of both cores is back to idle: no QP-less TCP connection, no
/// pending request, no MPA timer, no zombie (B keeps its listener's entry if `listening`).
fn run_until_released(p: &mut Pair, max: usize) {
    for _ in 0..max {
        let (a, b) = (p.a.core.stats(), p.b.core.stats());
        if a.requests_pending == 0
            && b.requests_pending == 0
            && a.mpa_timers == 0
            && b.mpa_timers == 0
            && a.tcp_zombies == 0
            && b.tcp_zombies == 0
            && a.tcp_connections == 0
            && b.tcp_connections == 0
        {
            return;
        }
        p.step();
    }
    panic!(
        "not released: A {:?}\nB {:?}",
        p.a.core.stats(),
        p.b.core.stats()
    );
}

#[test]
fn connections_opened_and_closed_by_the_hundred_release_everything() {
    let mut p = Pair::default_pair();
    p.b.core.listen(PORT, MpaParams::default()).expect("listen");
    for round in 0..8 {
        let mut pairs = Vec::new();
        for _ in 0..128 {
            let qa = p.a.qp(4);
            p.a.core
                .connect(qa, (ip(2), PORT), &MpaParams::default(), b"x")
                .unwrap();
            pairs.push(qa);
        }
        let mut reqs = Vec::new();
        p.run_until(5000, |p| {
            for e in p.b.take_events() {
                if let CmEvent::ConnectRequest(r) = e {
                    reqs.push(r);
                }
            }
            reqs.len() == 128
        });
        let mut qbs = Vec::new();
        for r in &reqs {
            let qb = p.b.qp(4);
            p.b.core.accept(r.request, qb, b"", None).unwrap();
            qbs.push(qb);
        }
        p.run(200);
        for (k, &qa) in pairs.iter().enumerate() {
            match (k + round) % 3 {
                0 => p.a.core.disconnect(qa).unwrap(),
                1 => p.a.core.abort(qa).unwrap(),
                _ => p.a.core.destroy_qp(qa).unwrap(),
            }
        }
        p.run(2000);
        for &qa in &pairs {
            let _ = p.a.core.destroy_qp(qa);
        }
        for &qb in &qbs {
            let _ = p.b.core.destroy_qp(qb);
        }
        p.a.take_events();
        p.b.take_events();
    }
    p.b.core.unlisten(PORT).unwrap();
    run_until_released(&mut p, 200_000);
}

/// Connects a fresh A QP to B and waits for B's request.
fn request(p: &mut Pair) -> (warpcore_engine::QpId, warpcore_engine::ConnectRequest) {
    let qa = p.a.qp(4);
    p.a.core
        .connect(qa, (ip(2), PORT), &MpaParams::default(), b"r")
        .unwrap();
    (qa, p.wait_request())
}

#[test]
fn accept_racing_the_peers_reset_ends_once() {
    let mut p = Pair::default_pair();
    p.b.core.listen(PORT, MpaParams::default()).unwrap();
    let (qa, req) = request(&mut p);
    p.a.core.abort(qa).unwrap();
    // A sends its RST; B's rx burst takes it (its Reset event waits for B's next loop).
    for _ in 0..20 {
        p.a.core.poll(p.now);
        p.now += Duration::from_micros(10);
        p.b.core.poll(p.now);
        if p.b.core.stack_mut().has_events() {
            break;
        }
    }
    let qb = p.b.qp(4);
    let r = p.b.core.accept(req.request, qb, b"", None);
    p.run(200);
    let ev = p.b.take_events();
    // Either the accept came first (one Established, then the reset ends it) or the
    // reset did (the request is cancelled and the accept refused): one ending either way.
    match r {
        Ok(()) => assert!(
            matches!(
                ev.as_slice(),
                [
                    CmEvent::Established(_),
                    CmEvent::Disconnected {
                        cause: warpcore_engine::DisconnectCause::Reset,
                        ..
                    }
                ]
            ),
            "{ev:?}"
        ),
        Err(e) => {
            assert_eq!(e, EngineError::UnknownRequest);
            assert!(
                matches!(ev.as_slice(), [CmEvent::RequestCancelled(_)]),
                "{ev:?}"
            );
        }
    }
    p.a.core.destroy_qp(qa).unwrap();
    p.b.core.destroy_qp(qb).unwrap();
    p.b.core.unlisten(PORT).unwrap();
    run_until_released(&mut p, 100_000);
}

#[test]
fn a_qp_destroyed_mid_connect_cancels_the_request_and_holds_nothing() {
    let mut p = Pair::default_pair();
    p.b.core.listen(PORT, MpaParams::default()).unwrap();
    let (qa, req) = request(&mut p);
    p.a.core.destroy_qp(qa).unwrap();
    p.run(500);
    let ev = p.b.take_events();
    assert_eq!(ev, vec![CmEvent::RequestCancelled(req.request)]);
    let qb = p.b.qp(4);
    assert_eq!(
        p.b.core.accept(req.request, qb, b"", None),
        Err(EngineError::UnknownRequest)
    );
    let ea = p.a.take_events();
    assert!(ea.is_empty(), "{ea:?}");
    p.b.core.unlisten(PORT).unwrap();
    run_until_released(&mut p, 100_000);
}

#[test]
fn connect_to_a_port_nobody_listens_on_fails_once_and_holds_nothing() {
    let mut p = Pair::default_pair();
    let qa = p.a.qp(4);
    p.a.core
        .connect(qa, (ip(2), PORT), &MpaParams::default(), b"r")
        .unwrap();
    assert!(matches!(
        p.a.core
            .connect(qa, (ip(2), PORT), &MpaParams::default(), b"r"),
        Err(EngineError::InvalidState(QpState::Connecting))
    ));
    p.run(500);
    let ev = p.a.take_events();
    assert!(matches!(
        ev.as_slice(),
        [CmEvent::Error {
            error: ConnError::TcpReset,
            ..
        }]
    ));
    run_until_released(&mut p, 100_000);
    p.a.core.reset_qp(qa).unwrap();
    p.a.core.destroy_qp(qa).unwrap();
}

#[test]
fn a_slowloris_request_times_out_at_the_startup_timeout() {
    let mut p = Pair::default_pair();
    p.b.core.listen(PORT, MpaParams::default()).unwrap();
    let c =
        p.a.core
            .stack_mut()
            .connect((ip(2), PORT), None, &TcpTuning::default())
            .unwrap();
    let req = b"MPA ID Req Frame\x81\x00\x00\x00";
    let mut sent = 0;
    let mut next = p.now;
    let t0 = p.now;
    let mut seen = false;
    while p.now - t0 < Duration::from_secs(30) {
        p.step();
        let st = p.a.core.stack_mut().state(c);
        if st == Ok(State::Established) && p.now >= next && sent < req.len() {
            sent += p.a.core.stack_mut().send(c, &req[sent..sent + 1]).unwrap();
            next = p.now + Duration::from_millis(600);
        }
        let pend = p.b.core.stats().requests_pending;
        seen |= pend == 1;
        if seen && pend == 0 {
            break;
        }
    }
    assert!(p.now - t0 < Duration::from_secs(11));
    assert_eq!(p.b.core.stats().requests_timed_out, 1);
}

#[test]
fn a_rejected_peer_that_never_closes_is_released_within_twice_the_timeout() {
    let mut p = Pair::default_pair();
    p.b.core.listen(PORT, MpaParams::default()).unwrap();
    let (c, req) = raw_request(&mut p, false, false);
    p.b.core.reject(req.request, &[7u8; 100]).unwrap();
    assert_eq!(
        p.b.core.reject(req.request, b""),
        Err(EngineError::UnknownRequest)
    );
    let t0 = p.now;
    p.run_until(1_000_000, |p| p.b.core.stats().requests_pending == 0);
    assert!(p.now - t0 <= Duration::from_secs(21), "{}", p.now - t0);
    // The Reply with its private data reached the peer before the end.
    let mut buf = [0u8; 1024];
    let n = p.a.core.stack_mut().recv(c, &mut buf).unwrap();
    assert_eq!(n, 20 + 4 + 100);
}

#[test]
fn unlisten_keeps_reported_requests_and_resets_the_rest() {
    let mut p = Pair::default_pair();
    p.b.core.listen(PORT, MpaParams::default()).unwrap();
    assert!(p.b.core.listen(PORT, MpaParams::default()).is_err());
    let (qa1, r1) = request(&mut p);
    let (qa2, r2) = request(&mut p);
    // A silent connection too.
    let c =
        p.a.core
            .stack_mut()
            .connect((ip(2), PORT), None, &TcpTuning::default())
            .unwrap();
    p.run_until(5000, |p| p.b.core.stats().requests_pending == 3);
    p.b.core.unlisten(PORT).unwrap();
    assert_eq!(
        p.b.core.unlisten(PORT),
        Err(EngineError::NotListening(PORT))
    );
    assert_eq!(p.b.core.stats().requests_pending, 2);
    let qb = p.b.qp(4);
    p.b.core.accept(r1.request, qb, b"", None).unwrap();
    p.b.core.reject(r2.request, b"no").unwrap();
    p.run(500);
    let ea = p.a.take_events();
    assert!(
        matches!(ea.as_slice(), [CmEvent::Established(e), CmEvent::Rejected { qp, .. }]
            if e.qp == qa1 && *qp == qa2),
        "{ea:?}"
    );
    // The silent connection, never reported, was reset.
    assert_eq!(p.a.core.stack_mut().state(c), Ok(State::Closed));
    // Listen again.
    p.b.core.listen(PORT, MpaParams::default()).unwrap();
    let (qa3, r3) = request(&mut p);
    let qb3 = p.b.qp(4);
    p.b.core.accept(r3.request, qb3, b"", None).unwrap();
    p.run(500);
    let ea = p.a.take_events();
    assert!(
        matches!(ea.as_slice(), [CmEvent::Established(e)] if e.qp == qa3),
        "{ea:?}"
    );
    for q in [qa1, qa2, qa3] {
        p.a.core.destroy_qp(q).unwrap();
    }
    for q in [qb, qb3] {
        p.b.core.destroy_qp(q).unwrap();
    }
    let _ = p.a.core.stack_mut().release(c);
    p.b.core.unlisten(PORT).unwrap();
    run_until_released(&mut p, 100_000);
}

/// A raw TCP connection from A's stack that sends an MPA Request (`p2p`: the peer-to-peer
/// model) and, if `fin`, closes at once; B's request.
fn raw_request(
    p: &mut Pair,
    p2p: bool,
    fin: bool,
) -> (
    warpcore_engine::tcp::ConnId,
    warpcore_engine::ConnectRequest,
) {
    let c =
        p.a.core
            .stack_mut()
            .connect((ip(2), PORT), None, &TcpTuning::default())
            .unwrap();
    let mut req = None;
    let mut sent = false;
    p.run_until(5000, |p| {
        if !sent && p.a.core.stack_mut().state(c) == Ok(State::Established) {
            let mut init = warpcore_engine::proto::mpa::negotiation::Initiator::new(
                warpcore_engine::proto::mpa::negotiation::Config {
                    peer_to_peer: p2p,
                    ..Default::default()
                },
                std::time::Instant::now(),
            )
            .unwrap();
            let mut b = vec![0u8; 1024];
            let n = init.poll_transmit(&mut b);
            p.a.core.stack_mut().send(c, &b[..n]).unwrap();
            if fin {
                p.a.core.stack_mut().close(c).unwrap();
            }
            sent = true;
        }
        for e in p.b.take_events() {
            if let CmEvent::ConnectRequest(r) = e {
                req = Some(r);
            }
        }
        req.is_some()
    });
    (c, req.unwrap())
}

#[test]
fn accept_after_the_peers_fin_fails_typed_and_releases() {
    for p2p in [false, true] {
        let mut p = Pair::default_pair();
        p.b.core.listen(PORT, MpaParams::default()).unwrap();
        let (c, req) = raw_request(&mut p, p2p, true);
        p.run(100);
        let qb = p.b.qp(4);
        p.b.core.accept(req.request, qb, b"", None).unwrap();
        p.run(3000);
        let ev = p.b.take_events();
        assert!(
            matches!(
                ev.as_slice(),
                [
                    CmEvent::Established(_),
                    CmEvent::Error {
                        error: ConnError::Negotiation { .. },
                        ..
                    }
                ]
            ),
            "p2p {p2p}: {ev:?}"
        );
        assert_eq!(p.b.core.qp_state(qb), Ok(QpState::Error));
        let _ = p.a.core.stack_mut().release(c);
        p.b.core.destroy_qp(qb).unwrap();
        p.b.core.unlisten(PORT).unwrap();
        run_until_released(&mut p, 100_000);
    }
}

/// A second `listen` on a port this core already listens on is refused, whichever TCP
/// runs underneath (the reference TCP lets two sockets listen on one port, and the engine
/// took the second for the first, orphaning the first TCP listener: connections it took
/// were never read, and it could never be unlistened), and the first listener keeps
/// serving.
#[test]
fn listen_twice_on_a_port_is_refused_and_the_first_keeps_serving() {
    for imp in [
        warpcore_engine::tcp::TcpImplementation::Warpcore,
        warpcore_engine::tcp::TcpImplementation::SmoltcpReference,
    ] {
        let cfg = EngineConfig {
            tcp_implementation: imp,
            ..EngineConfig::default()
        };
        let mut p = Pair::new(&LinkConfig::default(), &cfg);
        p.b.core.listen(PORT, MpaParams::default()).expect("listen");
        let again = p.b.core.listen(PORT, MpaParams::default());
        assert!(
            matches!(
                again,
                Err(EngineError::Stack(
                    warpcore_engine::tcp::StackError::PortInUse(PORT)
                ))
            ),
            "{imp:?}: {again:?}"
        );
        // The first listener still takes connections.
        let (qa, req) = request(&mut p);
        let qb = p.b.qp(4);
        p.b.core.accept(req.request, qb, b"", None).unwrap();
        p.run_until_established();
        // One unlisten ends it; nothing listens afterwards.
        p.b.core.unlisten(PORT).unwrap();
        assert_eq!(
            p.b.core.unlisten(PORT),
            Err(EngineError::NotListening(PORT))
        );
        p.a.core.destroy_qp(qa).unwrap();
        p.b.core.destroy_qp(qb).unwrap();
    }
}

/// Accept on a QP of another core, or on one not idle, is refused and leaves the request
/// acceptable; a reject whose private data MPA refuses leaves it too.
#[test]
fn refused_accepts_leave_the_request_acceptable() {
    let mut p = Pair::default_pair();
    p.b.core.listen(PORT, MpaParams::default()).unwrap();
    let (qa, req) = request(&mut p);
    let foreign = p.a.qp(4);
    assert_eq!(
        p.b.core.accept(req.request, foreign, b"", None),
        Err(EngineError::UnknownQp)
    );
    let (qa2, req2) = request(&mut p);
    let qb2 = p.b.qp(4);
    p.b.core.accept(req2.request, qb2, b"", None).unwrap();
    assert!(matches!(
        p.b.core.accept(req.request, qb2, b"", None),
        Err(EngineError::InvalidState(_))
    ));
    assert!(p.b.core.reject(req.request, &[0u8; 4096]).is_err());
    let qb = p.b.qp(4);
    p.b.core.accept(req.request, qb, b"", None).unwrap();
    p.run(500);
    let ea = p.a.take_events();
    assert_eq!(
        ea.iter()
            .filter(|e| matches!(e, CmEvent::Established(_)))
            .count(),
        2,
        "{ea:?}"
    );
    for q in [qa, qa2, foreign] {
        p.a.core.destroy_qp(q).unwrap();
    }
    for q in [qb, qb2] {
        p.b.core.destroy_qp(q).unwrap();
    }
    p.b.core.unlisten(PORT).unwrap();
    run_until_released(&mut p, 100_000);
}

/// A closes gracefully and destroys its QP once its FIN went out (`destroy_qp`
/// then lets TCP finish the close: the connection goes to the zombies, not reset) while B,
/// told of the close, still drains 60 MiB of Writes to A. Nothing read the zombie's
/// receive buffer: once it filled, B sat behind a zero window (its probes answered, so
/// no timeout) until A's FIN-WAIT-2 timeout reset the connection, 144 s of simulated time
/// later, B's QP held all along and its end a Reset. The close must complete as a close.
#[test]
fn a_qp_destroyed_after_its_fin_lets_the_peer_finish_its_close() {
    let mut p = Pair::default_pair();
    let (qa, qb) = p.connect();
    let (_ra, sa) = p.a.region(1 << 20, all_access());
    let (_rb, sb) = p.b.region(1 << 20, all_access());
    for k in 0..60u64 {
        p.b.core
            .post_send(qb, send_wr(k, write_op(sa.0, 0), &[(sb, 0, 1 << 20)]))
            .unwrap();
    }
    p.run(3);
    p.a.core.disconnect(qa).unwrap();
    // A's send queue is empty: its FIN goes out at once.
    p.run(3);
    p.a.core.destroy_qp(qa).unwrap();
    let mut ending = None;
    let mut writes = 0;
    p.run_until(1_000_000, |p| {
        for e in p.b.take_events() {
            if let CmEvent::Disconnected { qp, cause } = e {
                assert_eq!(qp, qb);
                assert!(ending.replace(cause).is_none(), "two endings");
            }
        }
        writes += p.b.take_completions().len();
        ending.is_some() && p.a.core.stats().tcp_zombies == 0
    });
    assert_eq!(
        ending,
        Some(warpcore_engine::DisconnectCause::Closed),
        "B's end after {writes} completions"
    );
}

/// RDMAP-06 §7 (errors found by RDMAP or DDP abortively terminate the RDMAP, DDP and LLP
/// streams) and §6.2.1: B closes gracefully (its FIN goes out at once, its send queue being
/// empty) while A's messages are still on their way; A's Send then finds no receive at B
/// (1/2/02). No Terminate can follow B's FIN, but the stream failed all the same and A's
/// message was dropped, and so are the Writes A goes on sending behind it: A must learn
/// it from an abortive end, not from a clean close that says everything it sent was
/// taken. Before, B let the graceful close finish, dropping what A still sent, and A saw
/// `Disconnected { Closed }` with every request completed successfully: the loss silent.
#[test]
fn an_error_after_our_fin_ends_the_stream_abortively_for_the_peer() {
    let mut p = Pair::default_pair();
    let (qa, qb) = p.connect();
    let (_ra, sa) = p.a.region(1 << 20, all_access());
    let (_rb, sb) = p.b.region(1 << 20, all_access());
    for k in 0..3 {
        p.a.core
            .post_send(qa, send_wr(k, write_op(sb.0, 0), &[(sa, 0, 100_000)]))
            .unwrap();
    }
    p.a.core
        .post_send(qa, send_wr(9, SendOp::Send, &[(sa, 0, 10)]))
        .unwrap();
    // More Writes behind it: B drops them all once it failed.
    for k in 10..16 {
        p.a.core
            .post_send(qa, send_wr(k, write_op(sb.0, 0), &[(sa, 0, 500_000)]))
            .unwrap();
    }
    p.b.core.disconnect(qb).unwrap();
    let (mut end_a, mut end_b) = (None, None);
    p.run_until(100_000, |p| {
        for e in p.a.take_events() {
            if matches!(e, CmEvent::Disconnected { .. } | CmEvent::Error { .. }) {
                assert!(end_a.replace(e).is_none(), "two endings for A");
            }
        }
        for e in p.b.take_events() {
            if matches!(e, CmEvent::Disconnected { .. } | CmEvent::Error { .. }) {
                assert!(end_b.replace(e).is_none(), "two endings for B");
            }
        }
        end_a.is_some() && end_b.is_some()
    });
    assert!(
        matches!(
            end_b,
            Some(CmEvent::Error {
                error: ConnError::LocalTerminate(_),
                ..
            })
        ),
        "B found the error: {end_b:?}"
    );
    assert!(
        matches!(
            end_a,
            Some(CmEvent::Disconnected { cause, .. }) if cause.is_abortive()
        ) || matches!(
            end_a,
            Some(CmEvent::Error {
                error: ConnError::RemoteTerminate(_),
                ..
            })
        ),
        "A's stream failed at B, yet A saw {end_a:?}"
    );
    // Everything is released on both sides; each of A's requests completed once, in
    // order, and not all of those B dropped as successes.
    run_until_released(&mut p, 100_000);
    let done = p.a.take_completions();
    let ids: Vec<u64> = done.iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, [0, 1, 2, 9, 10, 11, 12, 13, 14, 15], "{done:?}");
    assert!(
        done.iter()
            .any(|c| c.wr_id >= 10 && c.status == warpcore_engine::WcStatus::FlushErr),
        "{done:?}"
    );
}

/// RDMAP-06 §6 (graceful close: what the peer sent before its FIN is delivered), MPA-7.2-1
/// (the FIN reaches DDP after the data before it): both sides disconnect at once while A's
/// Sends are still on their way. B, already closing, has the Sends and A's FIN queued in
/// its TCP; its receive poller reads them `rx_budget_bytes` a loop. B's close used to end
/// at the first loop after the FIN arrived, whatever was still unread in front of it: its
/// receives were flushed and the Sends A had completed successfully were lost without a
/// trace.
#[test]
fn a_crossing_close_delivers_every_send_before_the_peers_fin() {
    let cfg_b = EngineConfig {
        rx_budget_bytes: 1024,
        ..EngineConfig::default()
    };
    let mut p = Pair::with_configs(&LinkConfig::default(), &EngineConfig::default(), &cfg_b);
    let (qa, qb) = p.connect();
    const N: usize = 32;
    const LEN: u32 = 4000;
    let (_ra, sa) = p.a.region(N * 4096, all_access());
    let (_rb, sb) = p.b.region(N * 4096, all_access());
    for k in 0..N {
        p.b.core
            .post_recv(qb, recv_wr(k as u64, &[(sb, (k * 4096) as u64, 4096)]))
            .unwrap();
    }
    p.run(20);
    p.b.core.disconnect(qb).unwrap();
    for k in 0..N {
        p.a.core
            .post_send(
                qa,
                send_wr(
                    1000 + k as u64,
                    SendOp::Send,
                    &[(sa, (k * 4096) as u64, LEN)],
                ),
            )
            .unwrap();
    }
    p.a.core.disconnect(qa).unwrap();
    both_close_gracefully(&mut p);
    let sent: Vec<_> = p.a.take_completions();
    assert_eq!(sent.len(), N, "{sent:?}");
    assert!(
        sent.iter()
            .all(|c| c.status == warpcore_engine::WcStatus::Success),
        "{sent:?}"
    );
    // Every Send A completed successfully was received, in order, whole.
    received_in_order(&p.b.take_completions(), N, LEN);
}

/// Runs the pair until both report `Disconnected`, which must be graceful on both sides.
fn both_close_gracefully(p: &mut Pair) {
    let mut ended = (None, None);
    p.run_until(100_000, |p| {
        for e in p.a.take_events() {
            if let CmEvent::Disconnected { cause, .. } = e {
                ended.0 = Some(cause);
            }
        }
        for e in p.b.take_events() {
            if let CmEvent::Disconnected { cause, .. } = e {
                ended.1 = Some(cause);
            }
        }
        ended.0.is_some() && ended.1.is_some()
    });
    assert_eq!(
        ended,
        (
            Some(warpcore_engine::DisconnectCause::Closed),
            Some(warpcore_engine::DisconnectCause::Closed)
        )
    );
}

/// `got` holds `n` receive completions, in order (work request ids 0..n), each a success
/// of `len` octets.
fn received_in_order(got: &[warpcore_engine::Completion], n: usize, len: u32) {
    let recvs: Vec<_> = got
        .iter()
        .filter(|c| c.opcode == warpcore_engine::WcOpcode::Recv)
        .collect();
    assert_eq!(recvs.len(), n, "{got:?}");
    for (k, c) in recvs.iter().enumerate() {
        assert_eq!(
            (c.wr_id, c.status, c.byte_len),
            (k as u64, warpcore_engine::WcStatus::Success, len),
            "receive {k} of {n}: {recvs:?}"
        );
    }
}

/// RDMAP-06 §6, MPA-7.2-1, as above, where the close ends on the transmit side: B's Read
/// holds its close up (its FIN waits for the Read Response) while A's Sends, the Read
/// Response among them, and A's FIN are queued in B's TCP. Once the receive poller had
/// read as far as the Read Response, the transmit poller found nothing owed and the peer
/// closed, and ended the QP (FIN, flush, `Disconnected`) in the same loop, the Sends still
/// queued behind the Response lost.
#[test]
fn a_close_held_by_a_read_delivers_the_sends_behind_its_response() {
    let cfg_b = EngineConfig {
        rx_budget_bytes: 1024,
        ..EngineConfig::default()
    };
    let mut p = Pair::with_configs(&LinkConfig::default(), &EngineConfig::default(), &cfg_b);
    let (qa, qb) = p.connect();
    const N: usize = 32;
    const LEN: u32 = 4000;
    let (_ra, sa) = p.a.region(N * 4096, all_access());
    let (_rb, sb) = p.b.region(N * 4096 + 4096, all_access());
    for k in 0..N {
        p.b.core
            .post_recv(qb, recv_wr(k as u64, &[(sb, (k * 4096) as u64, 4096)]))
            .unwrap();
    }
    p.run(20);
    let post_sends = |p: &mut Pair, ks: std::ops::Range<usize>| {
        for k in ks {
            p.a.core
                .post_send(
                    qa,
                    send_wr(
                        1000 + k as u64,
                        SendOp::Send,
                        &[(sa, (k * 4096) as u64, LEN)],
                    ),
                )
                .unwrap();
        }
    };
    // A's stream to B: half the Sends, the Read Response, the other half, FIN.
    post_sends(&mut p, 0..N / 2);
    p.b.core
        .post_send(
            qb,
            send_wr(7, read_op(sa.0, 0), &[(sb, (N * 4096) as u64, 16)]),
        )
        .unwrap();
    p.b.core.disconnect(qb).unwrap();
    p.step();
    p.step();
    post_sends(&mut p, N / 2..N);
    p.a.core.disconnect(qa).unwrap();
    both_close_gracefully(&mut p);
    let sent = p.a.take_completions();
    assert!(
        sent.len() == N
            && sent
                .iter()
                .all(|c| c.status == warpcore_engine::WcStatus::Success),
        "{sent:?}"
    );
    let got = p.b.take_completions();
    let read: Vec<_> = got
        .iter()
        .filter(|c| c.opcode == warpcore_engine::WcOpcode::Read)
        .collect();
    assert!(
        matches!(read.as_slice(), [c] if c.status == warpcore_engine::WcStatus::Success),
        "{got:?}"
    );
    received_in_order(&got, N, LEN);
}
