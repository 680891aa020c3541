//! Connection manager, teardown and error paths between two engine cores over the
//! in-memory link: MPA Rev 1/2 with CRC on/off and markers, RFC 6581 IRD/ORD, reject with
//! private data, graceful and abortive close, Terminates and flushes.

mod common;

use common::*;
use warpcore_engine::proto::mpa::negotiation::{
    self as nego, Initiator, NegotiationError, UsageError,
};
use warpcore_engine::proto::wire::mpa::FrameError;
use warpcore_engine::tcp::smoltcp::socket::tcp::State as TcpState;
use warpcore_engine::tcp::TcpTuning;
use warpcore_engine::{
    CmEvent, ConnError, DisconnectCause, EngineError, MpaParams, QpState, RtrTypes, SendOp,
    WcOpcode, WcStatus,
};

fn exchange(p: &mut Pair, qa: warpcore_engine::QpId, qb: warpcore_engine::QpId) {
    let (ra, sa) = p.a.region(1 << 16, all_access());
    let (rb, sb) = p.b.region(1 << 16, all_access());
    let data = pattern(40_000, 5);
    ra.write_at(0, &data).unwrap();
    p.b.core
        .post_recv(qb, recv_wr(1, &[(sb, 0, 40_000)]))
        .unwrap();
    p.a.core
        .post_send(qa, send_wr(1, SendOp::Send, &[(sa, 0, 40_000)]))
        .unwrap();
    // B sends first on the reverse direction too (peer-to-peer lifts the fence at once;
    // client-server waits for A's first FPDU, MPA-7.1.2-16).
    p.a.core
        .post_recv(qa, recv_wr(2, &[(sa, 50_000, 100)]))
        .unwrap();
    rb.write_at(60_000, b"reply").unwrap();
    p.b.core
        .post_send(qb, send_wr(2, SendOp::Send, &[(sb, 60_000, 5)]))
        .unwrap();
    p.run_until(5000, |p| {
        p.a.completions.len() == 2 && p.b.completions.len() == 2
    });
    assert_eq!(read_region(&rb, 0, 40_000), data);
    assert_eq!(read_region(&ra, 50_000, 5), b"reply");
    assert!(p
        .a
        .take_completions()
        .iter()
        .all(|c| c.status == WcStatus::Success));
    assert!(p
        .b
        .take_completions()
        .iter()
        .all(|c| c.status == WcStatus::Success));
}

/// MPA-7.1.1-12/13 (CRC if either side asks), MPA2-6-4 (Rev 2 responder answers Rev 1),
/// MPA-7.1.1-7/8 (markers per direction): every combination carries data byte-exact.
#[test]
fn rev_crc_marker_matrix() {
    for (rev_a, rev_b) in [(1u8, 1u8), (1, 2), (2, 2)] {
        for (crc_a, crc_b) in [(false, false), (true, false), (false, true), (true, true)] {
            for markers in [false, true] {
                let mut p = Pair::default_pair();
                let pa = MpaParams {
                    rev: rev_a,
                    crc: crc_a,
                    markers,
                    peer_to_peer: rev_a >= 2,
                    ..Default::default()
                };
                let pb = MpaParams {
                    rev: rev_b,
                    crc: crc_b,
                    markers: false,
                    ..Default::default()
                };
                let (qa, qb) = p.connect_with(&pa, &pb, 16);
                exchange(&mut p, qa, qb);
                let sa = p.a.core.stats();
                assert!(sa.fpdus_rx > 0 && sa.terminates_rx == 0 && sa.terminates_tx == 0);
            }
        }
    }
}

/// RFC 6581 §9.1: IRD/ORD are negotiated and reported on both sides.
/// RDMAP-6.1-3: the negotiated ORD is made available to the ULP.
#[test]
fn ird_ord_negotiation_reported() {
    let mut p = Pair::default_pair();
    let qa = p.a.qp(8);
    let qb = p.b.qp(8);
    let pa = MpaParams {
        ird: 3,
        ord: 5,
        ..Default::default()
    };
    let pb = MpaParams {
        ird: 4,
        ord: 2,
        ..Default::default()
    };
    p.b.core.listen(PORT, pb).unwrap();
    p.a.core.connect(qa, (ip(2), PORT), &pa, b"").unwrap();
    let mut req = None;
    p.run_until(2000, |p| {
        req = p.b.take_events().into_iter().find_map(|e| match e {
            CmEvent::ConnectRequest(r) => Some(r),
            _ => None,
        });
        req.is_some()
    });
    let req = req.unwrap();
    assert_eq!((req.rev, req.ird, req.ord), (2, Some(3), Some(5)));
    p.b.core.accept(req.request, qb, b"", None).unwrap();
    let mut ea = None;
    let mut eb = None;
    p.run_until(2000, |p| {
        for e in p.a.take_events() {
            if let CmEvent::Established(x) = e {
                ea = Some(x);
            }
        }
        for e in p.b.take_events() {
            if let CmEvent::Established(x) = e {
                eb = Some(x);
            }
        }
        ea.is_some() && eb.is_some()
    });
    let (ea, eb) = (ea.unwrap(), eb.unwrap());
    // Responder: IRD = min(initiator ORD 5, ours 4) = 4; ORD = min(ours 2, initiator IRD 3).
    assert_eq!((eb.ird, eb.ord), (4, 2));
    // Initiator: IRD = responder's ORD 2; ORD = min(5, responder IRD 4).
    assert_eq!((ea.ird, ea.ord), (2, 4));
    assert_eq!(ea.peer_ird_ord, Some((4, 2)));
}

/// MPA-7.1.2-5/6/14: a reject carries private data back; the initiator's QP goes to the
/// error state with its receives flushed; TCP closes.
#[test]
fn reject_with_private_data() {
    for rev in [1u8, 2] {
        let mut p = Pair::default_pair();
        let qa = p.a.qp(8);
        let (_ra, sa) = p.a.region(4096, all_access());
        p.a.core.post_recv(qa, recv_wr(5, &[(sa, 0, 64)])).unwrap();
        let params = MpaParams {
            rev,
            peer_to_peer: rev >= 2,
            ..Default::default()
        };
        p.b.core.listen(PORT, params.clone()).unwrap();
        p.a.core
            .connect(qa, (ip(2), PORT), &params, b"let me in")
            .unwrap();
        let mut req = None;
        p.run_until(2000, |p| {
            req = p.b.take_events().into_iter().find_map(|e| match e {
                CmEvent::ConnectRequest(r) => Some(r),
                _ => None,
            });
            req.is_some()
        });
        p.b.core.reject(req.unwrap().request, b"go away").unwrap();
        let mut rejected = None;
        p.run_until(2000, |p| {
            for e in p.a.take_events() {
                if let CmEvent::Rejected { private_data, .. } = e {
                    rejected = Some(private_data);
                }
            }
            rejected.is_some()
        });
        assert_eq!(rejected.unwrap(), b"go away");
        assert_eq!(p.a.core.qp_state(qa).unwrap(), QpState::Error);
        let c = p.a.take_completions();
        assert_eq!((c[0].wr_id, c[0].status), (5, WcStatus::FlushErr));
        p.run(200);
    }
}

/// MPA2-9.1-10 (the initiator passes the responder's IRD and ORD to its user for a rejecting
/// Reply as for an accepting one), MPA2-9.1-5 (a rejecting responder states the ORD it
/// needs): `Rejected` carries the IRD/ORD of an enhanced Reply, none for a Rev 1 one. They
/// used to be dropped.
#[test]
fn mpa2_9_1_10_a_rejection_tells_the_initiator_the_responders_ird_ord() {
    for (rev, want) in [(2u8, Some((3, 5))), (1, None)] {
        let mut p = Pair::default_pair();
        let qa = p.a.qp(8);
        let params = MpaParams {
            rev,
            peer_to_peer: false,
            ..Default::default()
        };
        p.b.core
            .listen(
                PORT,
                MpaParams {
                    ird: 3,
                    ord: 5,
                    ..params.clone()
                },
            )
            .unwrap();
        p.a.core.connect(qa, (ip(2), PORT), &params, b"").unwrap();
        let req = p.wait_request();
        p.b.core.reject(req.request, b"need ORD 5").unwrap();
        let mut rejected = None;
        p.run_until(2000, |p| {
            for e in p.a.take_events() {
                if let CmEvent::Rejected {
                    private_data,
                    peer_ird_ord,
                    ..
                } = e
                {
                    rejected = Some((private_data, peer_ird_ord));
                }
            }
            rejected.is_some()
        });
        // The Reply's IRD: the initiator's ORD (8) capped at ours (3); its ORD: ours,
        // uncapped in a rejection (MPA2-9.1-5).
        assert_eq!(
            rejected.unwrap(),
            (b"need ORD 5".to_vec(), want),
            "Rev {rev}"
        );
    }
}

/// The engine's contract (a refused call changes nothing): an `accept` refused for its
/// private data (over 508 octets next to the enhanced data, MPA2-7-4) leaves the request as
/// it was, so the IRD/ORD it asked for do not stick to a later `accept`. They did: the
/// override was applied before the private data was judged.
#[test]
fn a_refused_accept_leaves_the_request_as_it_was() {
    let mut p = Pair::default_pair();
    let qa = p.a.qp(8);
    let qb = p.b.qp(8);
    p.b.core.listen(PORT, MpaParams::default()).unwrap();
    p.a.core
        .connect(qa, (ip(2), PORT), &MpaParams::default(), b"")
        .unwrap();
    let req = p.wait_request();
    assert_eq!(
        p.b.core
            .accept(req.request, qb, &[0u8; 509], Some((1, 1)))
            .unwrap_err(),
        EngineError::Mpa(UsageError::PrivateDataTooLong)
    );
    assert_eq!(p.b.core.qp_state(qb).unwrap(), QpState::Idle);
    p.b.core.accept(req.request, qb, b"", None).unwrap();
    let mut est = None;
    p.run_until(2000, |p| {
        for e in p.b.take_events() {
            if let CmEvent::Established(x) = e {
                est = Some((x.ird, x.ord));
            }
        }
        est.is_some()
    });
    // The listener's IRD/ORD (8), as the initiator's (8) allow: not the refused 1/1.
    assert_eq!(est.unwrap(), (8, 8));
}

/// MPA-7.1.1-2/3, MPA-7.1.2-4/17/20/22/26, MPA-7.1.1-19, MPA2-6-5, MPA2-10-7: a malformed
/// Request (sent from A's raw TCP stack) makes the responder close the connection and tell
/// its user, typed, what was wrong (`RequestRefused`); the application never sees a
/// request. It used to be closed without a word.
/// MPA-8-10: after error 4 the responder closes TCP at once.
#[test]
fn a_malformed_request_is_refused_and_reported() {
    type Mangle = fn(&mut Vec<u8>);
    let cases: [(&str, u8, Mangle, NegotiationError); 7] = [
        (
            "bad key",
            2,
            |r| r[0] = b'X',
            NegotiationError::Frame(FrameError::BadKey),
        ),
        (
            "a Reply key",
            2,
            |r| r[9] = b'p',
            NegotiationError::UnexpectedReply,
        ),
        (
            "Rev 0",
            2,
            |r| r[17] = 0,
            NegotiationError::UnsupportedRevision(0),
        ),
        (
            "Rev 3",
            2,
            |r| r[17] = 3,
            NegotiationError::UnsupportedRevision(3),
        ),
        (
            "PD_Length 600",
            2,
            |r| {
                r[18..20].copy_from_slice(&600u16.to_be_bytes());
                r.resize(20 + 600, 0);
            },
            NegotiationError::Frame(FrameError::PrivateDataTooLong),
        ),
        (
            "S = 1 without enhanced data",
            2,
            |r| {
                r[18..20].copy_from_slice(&2u16.to_be_bytes());
                r.truncate(22);
            },
            NegotiationError::Frame(FrameError::EnhancedDataMissing),
        ),
        (
            "an enhanced Request to a Rev 1 listener",
            1,
            |_| {},
            NegotiationError::EnhancedNotSupported,
        ),
    ];
    for (name, listener_rev, mangle, want) in cases {
        let mut p = Pair::default_pair();
        p.b.core
            .listen(
                PORT,
                MpaParams {
                    rev: listener_rev,
                    ..MpaParams::default()
                },
            )
            .unwrap();
        let mut request = mpa_request(b"hello");
        mangle(&mut request);
        let tcp =
            p.a.core
                .stack_mut()
                .connect((ip(2), PORT), None, &TcpTuning::default())
                .unwrap();
        let mut off = 0;
        let mut refused = None;
        p.run_until(5000, |p| {
            let stack = p.a.core.stack_mut();
            if off < request.len() && stack.state(tcp) == Ok(TcpState::Established) {
                off += stack.send(tcp, &request[off..]).unwrap();
            }
            for e in p.b.take_events() {
                match e {
                    CmEvent::RequestRefused { remote, error, .. } => {
                        refused = Some((remote, error))
                    }
                    e => panic!("{name}: {e:?}"),
                }
            }
            refused.is_some()
        });
        let (remote, error) = refused.unwrap();
        assert_eq!(error, want, "{name}");
        assert_eq!(remote.0, ip(1), "{name}");
        // The responder closed the connection.
        p.run_until(2000, |p| {
            let stack = p.a.core.stack_mut();
            let _ = stack.recv_with(tcp, |d| d.len());
            stack.state(tcp) == Ok(TcpState::CloseWait)
        });
    }
}

/// The MPA Request an engine initiator with default settings and `private_data` sends.
fn mpa_request(private_data: &[u8]) -> Vec<u8> {
    let mut init = Initiator::new(
        nego::Config {
            private_data: private_data.to_vec(),
            ..nego::Config::default()
        },
        std::time::Instant::now(),
    )
    .unwrap();
    let mut request = vec![0u8; 1024];
    let n = init.poll_transmit(&mut request);
    request.truncate(n);
    request
}

/// Local misuse is refused with a typed error, nothing changed (the engine's contract):
/// `listen` refuses MPA parameters that every responder of the listener would refuse, as
/// `connect` refuses an initiator's, and binds nothing, so the port then takes a valid
/// listener. It used to listen, then reset each incoming connection after it had taken a
/// request slot (evicting a valid listener's pending request when the table was full).
/// Rev 0 and 3 (MPA-7.1.1, RFC 6581 §6), no RTR type at Rev 2 (MPA2-9.2-3), only the Read
/// RTR at IRD 0 (a Reply marking no type, MPA2-9.1-3, MPA2-9.2-8).
#[test]
fn listen_refuses_mpa_params_no_responder_could_use() {
    let rev = |rev| MpaParams {
        rev,
        ..MpaParams::default()
    };
    let bad = [
        (rev(0), UsageError::UnsupportedRevision),
        (rev(3), UsageError::UnsupportedRevision),
        (
            MpaParams {
                rtr_accept: RtrTypes::EMPTY,
                ..MpaParams::default()
            },
            UsageError::NoRtrType,
        ),
        (
            MpaParams {
                rtr_accept: RtrTypes::READ,
                ird: 0,
                ..MpaParams::default()
            },
            UsageError::NoRtrType,
        ),
    ];
    let mut p = Pair::default_pair();
    for (params, error) in bad {
        assert_eq!(
            p.b.core.listen(PORT, params.clone()).unwrap_err(),
            EngineError::Mpa(error),
            "{params:?}"
        );
    }
    let qa = p.a.qp(8);
    for r in [0, 3] {
        assert_eq!(
            p.a.core
                .connect(qa, (ip(2), PORT), &rev(r), b"")
                .unwrap_err(),
            EngineError::Mpa(UsageError::UnsupportedRevision)
        );
    }
    // Only the Read RTR is fine with an IRD to serve it, and Rev 1 marks no RTR type.
    p.b.core
        .listen(
            PORT + 1,
            MpaParams {
                rtr_accept: RtrTypes::READ,
                ..MpaParams::default()
            },
        )
        .unwrap();
    p.b.core
        .listen(
            PORT + 2,
            MpaParams {
                rev: 1,
                rtr_accept: RtrTypes::EMPTY,
                ..MpaParams::default()
            },
        )
        .unwrap();
    let (qa, qb) = p.connect();
    assert_eq!(p.a.core.qp_state(qa).unwrap(), QpState::Rts);
    assert_eq!(p.b.core.qp_state(qb).unwrap(), QpState::Rts);
}

/// MPA2-9-1 (IRD and ORD are 14-bit fields), RFC 6581 §9.1: an IRD or ORD above 0x3FFF is
/// refused with a typed error by `listen`, `connect` and `accept`, nothing bound, sent or
/// accepted. It used to be taken for 0x3FFF, "not negotiated", without a word.
#[test]
fn mpa2_9_1_ird_ord_above_0x3fff_are_refused_not_taken_for_0x3fff() {
    let out_of_range = EngineError::Mpa(UsageError::IrdOrdOutOfRange);
    let mut p = Pair::default_pair();
    for (ird, ord) in [(0x4000, 8), (8, 0x4000), (u16::MAX, u16::MAX)] {
        let params = MpaParams {
            ird,
            ord,
            ..MpaParams::default()
        };
        assert_eq!(
            p.b.core.listen(PORT, params.clone()).unwrap_err(),
            out_of_range,
            "listen {params:?}"
        );
        let qa = p.a.qp(8);
        assert_eq!(
            p.a.core
                .connect(qa, (ip(2), PORT), &params, b"")
                .unwrap_err(),
            out_of_range,
            "connect {params:?}"
        );
        assert_eq!(p.a.core.qp_state(qa).unwrap(), QpState::Idle);
    }
    // `accept`'s override likewise; the request is still there for a valid answer.
    p.b.core.listen(PORT, MpaParams::default()).unwrap();
    let qa = p.a.qp(8);
    let qb = p.b.qp(8);
    p.a.core
        .connect(qa, (ip(2), PORT), &MpaParams::default(), b"")
        .unwrap();
    let req = p.wait_request();
    for ird_ord in [(0x4000, 4), (4, 0x4000)] {
        assert_eq!(
            p.b.core
                .accept(req.request, qb, b"", Some(ird_ord))
                .unwrap_err(),
            out_of_range,
            "accept {ird_ord:?}"
        );
        assert_eq!(p.b.core.qp_state(qb).unwrap(), QpState::Idle);
    }
    p.b.core.accept(req.request, qb, b"", Some((4, 4))).unwrap();
    p.run_until_established();
}

/// Graceful close (RDMAP-06 §6): the send queue drains before FIN, both sides see
/// Disconnected without reset, outstanding receives are flushed.
/// DDP-6.2.1-2, DDP-6.2.1-5, DDP-3-11, DDP-3-12: posts after close fail; the FIN is answered.
#[test]
fn graceful_close_drains_then_fin() {
    let mut p = Pair::default_pair();
    let (qa, qb) = p.connect();
    let (ra, sa) = p.a.region(1 << 20, all_access());
    let (rb, sb) = p.b.region(1 << 20, all_access());
    let data = pattern(500_000, 1);
    ra.write_at(0, &data).unwrap();
    p.b.core
        .post_recv(qb, recv_wr(1, &[(sb, 0, 500_000)]))
        .unwrap();
    p.b.core.post_recv(qb, recv_wr(2, &[(sb, 0, 10)])).unwrap();
    p.a.core
        .post_recv(qa, recv_wr(3, &[(sa, 600_000, 10)]))
        .unwrap();
    p.a.core
        .post_send(qa, send_wr(1, SendOp::Send, &[(sa, 0, 500_000)]))
        .unwrap();
    p.a.core.disconnect(qa).unwrap();
    // Closing: no new sends.
    assert_eq!(
        p.a.core.post_send(qa, send_wr(9, SendOp::Send, &[])),
        Err(warpcore_engine::EngineError::InvalidState(QpState::Closing))
    );
    assert_eq!(p.run_until_disconnected(20_000), (false, false));
    assert_eq!(read_region(&rb, 0, 500_000), data);
    let cb: Vec<_> =
        p.b.take_completions()
            .iter()
            .map(|c| (c.wr_id, c.status))
            .collect();
    assert_eq!(cb, [(1, WcStatus::Success), (2, WcStatus::FlushErr)]);
    let ca: Vec<_> =
        p.a.take_completions()
            .iter()
            .map(|c| (c.wr_id, c.status))
            .collect();
    assert_eq!(ca, [(1, WcStatus::Success), (3, WcStatus::FlushErr)]);
    assert_eq!(p.a.core.qp_state(qa).unwrap(), QpState::Error);
    assert_eq!(p.b.core.qp_state(qb).unwrap(), QpState::Error);
}

/// RDMAP-06 §6, RDMAP-5.5-8: a send request an application thread validated while the QP
/// was in RTS ([`warpcore_engine::validate_send`] reserved its slot) and that reaches the
/// core after a graceful close began completes flushed, after the requests queued before
/// it: those still go out and complete, and the close finishes. (The core counted the late
/// request as started together with every request ahead of it that had not started yet:
/// those were never sent nor completed, and the close never finished.)
#[test]
fn a_post_that_races_a_disconnect_is_flushed_behind_the_queued_requests() {
    let mut p = Pair::default_pair();
    let (qa, shared_a) = p.connect_shared(64);
    let (ra, sa) = p.a.region(1 << 20, all_access());
    let (rb, sb) = p.b.region(1 << 20, all_access());
    let data = pattern(800_000, 3);
    ra.write_at(0, &data).unwrap();
    // Four Writes of 200,000 octets, none started yet (no loop ran since).
    for k in 0..4u64 {
        let to = k * 200_000;
        post_a(&mut p, qa, k + 1, write_op(sb.0, to), &[(sa, to, 200_000)]);
    }
    p.a.core.disconnect(qa).unwrap();
    // Another thread's Write, validated (and its slot reserved) while the QP was in RTS,
    // reaches the core now.
    assert!(shared_a.reserve_sq());
    p.a.core
        .post_send_reserved(qa, send_wr(9, write_op(sb.0, 0), &[(sa, 0, 64)]));
    assert_eq!(p.run_until_disconnected(20_000), (false, false));
    let ca: Vec<_> =
        p.a.take_completions()
            .iter()
            .map(|c| (c.wr_id, c.status))
            .collect();
    assert_eq!(
        ca,
        [
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success),
            (4, WcStatus::Success),
            (9, WcStatus::FlushErr)
        ]
    );
    assert_eq!(read_region(&rb, 0, 800_000), data);
    assert_eq!(shared_a.sq_used(), 0);
}

/// Abortive close: RST; both sides flush and see Disconnected with reset.
#[test]
fn abortive_close_resets_both_sides() {
    let mut p = Pair::default_pair();
    let (qa, qb) = p.connect();
    let (_ra, sa) = p.a.region(4096, all_access());
    let (_rb, sb) = p.b.region(4096, all_access());
    p.a.core.post_recv(qa, recv_wr(1, &[(sa, 0, 10)])).unwrap();
    p.b.core.post_recv(qb, recv_wr(2, &[(sb, 0, 10)])).unwrap();
    p.a.core.abort(qa).unwrap();
    let mut db = None;
    p.run_until(2000, |p| {
        for e in p.b.take_events() {
            if let CmEvent::Disconnected { cause, .. } = e {
                db = Some(cause);
            }
        }
        db.is_some()
    });
    assert_eq!(db, Some(DisconnectCause::Reset));
    assert!(p.a.take_events().iter().any(|e| matches!(
        e,
        CmEvent::Disconnected {
            cause: DisconnectCause::Reset,
            ..
        }
    )));
    assert_eq!(p.a.take_completions()[0].status, WcStatus::FlushErr);
    assert_eq!(p.b.take_completions()[0].status, WcStatus::FlushErr);
}

/// RDMAP-7.2-9/13 (remote protection error on a Read Request), RDMAP-06 §4.8: a Read of
/// a range outside the peer's region earns a Terminate 0/1/1 with the Read Request header;
/// the requester's Read completes with a remote access error, later requests are flushed,
/// both QPs go to the error state and report the decoded Terminate.
#[test]
fn remote_access_error_terminates_and_flushes_both_sides() {
    let mut p = Pair::default_pair();
    let (qa, qb) = p.connect();
    let (_ra, sa) = p.a.region(1 << 16, all_access());
    let (_rb, sb) = p.b.region(4096, all_access());
    p.b.core.post_recv(qb, recv_wr(77, &[(sb, 0, 10)])).unwrap();
    p.a.core
        .post_send(
            qa,
            send_wr(
                1,
                SendOp::Read {
                    remote_stag: sb.0,
                    remote_to: 4000,
                },
                &[(sa, 0, 200)],
            ),
        )
        .unwrap();
    p.a.core
        .post_send(qa, send_wr(2, SendOp::Send, &[(sa, 0, 5)]))
        .unwrap();
    let (ea, eb) = p.run_until_both_fail(3000);
    let rep = received_terminate(&ea);
    assert_eq!(
        (rep.code.layer(), rep.code.etype(), rep.code.code()),
        (0, 1, 1)
    );
    let rr = rep.read_request.expect("Read Request header copied");
    assert_eq!((rr.src_stag, rr.src_to, rr.read_size), (sb.0, 4000, 200));
    assert!(eb.iter().any(|e| matches!(
        e,
        CmEvent::Error {
            error: ConnError::LocalTerminate(_),
            ..
        }
    )));
    let ca = p.a.take_completions();
    // The Send may have been handed to TCP before the Terminate arrived (then it completed
    // successfully, as in siw); the Read is always the one refused.
    assert_eq!(
        (ca[0].wr_id, ca[0].opcode, ca[0].status),
        (1, WcOpcode::Read, WcStatus::RemoteAccess)
    );
    let cb = p.b.take_completions();
    assert_eq!(
        cb.iter().find(|c| c.wr_id == 77).map(|c| c.status),
        Some(WcStatus::FlushErr)
    );
    assert_eq!(p.a.core.qp_state(qa).unwrap(), QpState::Error);
    assert_ne!(p.b.core.qp_state(qb).unwrap(), QpState::Rts);
    p.run(300);
    assert_eq!(p.b.core.qp_state(qb).unwrap(), QpState::Error);
    assert_eq!(p.b.core.stats().terminates_tx, 1);
}

/// DDP-7.1-2: a Send with no receive posted earns a Terminate 1/2/2 (no buffer).
#[test]
fn send_without_receive_buffer_terminates() {
    let mut p = Pair::default_pair();
    let (qa, _qb) = p.connect();
    let (_ra, sa) = p.a.region(4096, all_access());
    p.a.core
        .post_send(qa, send_wr(1, SendOp::Send, &[(sa, 0, 5)]))
        .unwrap();
    p.run_until(3000, |p| {
        p.a.events
            .iter()
            .any(|e| matches!(e, CmEvent::Error { .. }))
    });
    let ea = p.a.take_events();
    let Some(CmEvent::Error {
        error: ConnError::RemoteTerminate(rep),
        ..
    }) = ea.first()
    else {
        panic!("{ea:?}")
    };
    assert_eq!(
        (rep.code.layer(), rep.code.etype(), rep.code.code()),
        (1, 2, 2)
    );
}

/// A Send longer than the posted buffer: DDP-7.1-4 "message too long" Terminate (1/2/5).
#[test]
fn send_longer_than_buffer_terminates() {
    let mut p = Pair::default_pair();
    let (qa, qb) = p.connect();
    let (_ra, sa) = p.a.region(4096, all_access());
    let (_rb, sb) = p.b.region(4096, all_access());
    p.b.core.post_recv(qb, recv_wr(1, &[(sb, 0, 10)])).unwrap();
    p.a.core
        .post_send(qa, send_wr(1, SendOp::Send, &[(sa, 0, 11)]))
        .unwrap();
    p.run_until(3000, |p| {
        p.a.events
            .iter()
            .any(|e| matches!(e, CmEvent::Error { .. }))
    });
    let ea = p.a.take_events();
    let Some(CmEvent::Error {
        error: ConnError::RemoteTerminate(rep),
        ..
    }) = ea.first()
    else {
        panic!("{ea:?}")
    };
    assert_eq!(
        (rep.code.layer(), rep.code.etype(), rep.code.code()),
        (1, 2, 5)
    );
    // The receive too short for the message fails with a local length error (siw's
    // SIW_WC_LOC_LEN_ERR), not a plain flush.
    let cb = p.b.take_completions();
    assert_eq!((cb[0].wr_id, cb[0].status), (1, WcStatus::LocalLength));
}

/// RDMAP-06 §6 graceful close with a Read in flight: A's Read Request crosses B's FIN (B
/// disconnected with nothing to drain). B can no longer answer it, so it drops it; A, once
/// it has read everything before B's FIN, completes the Read flushed, closes, and both
/// report the end (docs/engine.md: "disconnect → drain → FIN; the peer sees FIN, drains,
/// FINs; both report Disconnected"). Before, both waited in Closing for ever.
#[test]
fn rdmap_6_a_read_crossing_the_peers_fin_completes_flushed_and_both_close() {
    let mut p = Pair::default_pair();
    let (qa, qb) = p.connect();
    let (_ra, sa) = p.a.region(4096, all_access());
    let (_rb, sb) = p.b.region(4096, all_access());
    post_a(&mut p, qa, 1, read_op(sb.0, 0), &[(sa, 0, 64)]);
    p.b.core.disconnect(qb).unwrap();
    let (ea, eb, ca) = run_until_both_end(&mut p);
    assert!(
        ea.iter().any(|e| matches!(e, CmEvent::Disconnected { .. })),
        "A never learns that the connection ended: {ea:?}"
    );
    assert!(
        eb.iter().any(|e| matches!(e, CmEvent::Disconnected { .. })),
        "B never learns that the connection ended: {eb:?}"
    );
    let ca: Vec<_> = ca.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        ca,
        vec![(1, WcStatus::FlushErr)],
        "A's Read completes flushed"
    );
}

/// Steps until both sides reported the end of their connection (Disconnected or Error),
/// at most 20,000 times; returns A's and B's events and A's completions meanwhile.
fn run_until_both_end(
    p: &mut Pair,
) -> (Vec<CmEvent>, Vec<CmEvent>, Vec<warpcore_engine::Completion>) {
    let ended = |v: &[CmEvent]| {
        v.iter()
            .any(|e| matches!(e, CmEvent::Disconnected { .. } | CmEvent::Error { .. }))
    };
    let (mut ea, mut eb, mut ca) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..20_000 {
        p.step();
        ea.extend(p.a.take_events());
        eb.extend(p.b.take_events());
        ca.extend(p.a.take_completions());
        if ended(&ea) && ended(&eb) {
            break;
        }
    }
    (ea, eb, ca)
}

/// MPA-7.1.2-16 fences FPDUs and markers, not a FIN: in the client-server model (no RTR)
/// a responder that disconnects before the initiator's first FPDU still closes (FIN), the
/// initiator closes too, and both report Disconnected. Before, the responder's FIN waited
/// behind the fence and both stayed in Closing for ever.
#[test]
fn mpa_7_1_2_16_a_fenced_responder_that_disconnects_still_closes() {
    let mut p = Pair::default_pair();
    let cs = MpaParams {
        peer_to_peer: false,
        ..MpaParams::default()
    };
    let (qa, qb) = p.connect_with(&cs, &cs, 16);
    p.b.core.disconnect(qb).unwrap();
    p.run(200);
    // The initiator closes as well (it may have seen nothing yet).
    let _ = p.a.core.disconnect(qa);
    let (ea, eb, _) = run_until_both_end(&mut p);
    assert!(
        eb.iter().any(|e| matches!(e, CmEvent::Disconnected { .. })),
        "B (responder) never disconnects"
    );
    assert!(
        ea.iter().any(|e| matches!(e, CmEvent::Disconnected { .. })),
        "A (initiator) never disconnects"
    );
}

/// A QP slot destroyed and connected again (as initiator) while it waits for its Reply,
/// over and over, holds one MPA startup timer entry, not one per connection it ever had:
/// the entry goes with its QP. The old connection's entry used to stay beside the new
/// one's, so the list of timers the core polls grew by one with each cycle. (The timer
/// starts once TCP is established, so each cycle waits for B's request: B's application
/// never answers.)
#[test]
fn connect_destroy_churn_leaves_one_mpa_timer_per_connecting_qp() {
    let mut p = Pair::default_pair();
    p.b.core.listen(PORT, MpaParams::default()).expect("listen");
    let connect = |p: &mut Pair| {
        let q = p.a.qp(4);
        p.a.core
            .connect(q, (ip(2), PORT), &MpaParams::default(), b"")
            .expect("connect");
        p.wait_request();
        q
    };
    let mut q = connect(&mut p);
    for _ in 0..200 {
        p.a.core.destroy_qp(q).expect("destroy");
        q = connect(&mut p);
        assert_eq!(p.a.core.qp_state(q), Ok(QpState::Connecting));
    }
    assert_eq!(p.a.core.stats().mpa_timers, 1);
    p.a.core.destroy_qp(q).expect("destroy");
    assert_eq!(p.a.core.stats().mpa_timers, 0);
}

/// MPA-7.1.1-21, MPA-7.1.2-22/26: a Request whose PD_Length announces more Private Data
/// than arrives before the initiator's FIN is malformed: the responder closes and reports
/// an error locally, `RequestRefused` with `Frame(Truncated)`, as for any malformed Request
/// (it closed without a word before).
#[test]
fn mpa_7_1_1_21_a_request_truncated_by_fin_is_reported() {
    let mut p = Pair::default_pair();
    p.b.core.listen(PORT, MpaParams::default()).unwrap();
    let mut request = mpa_request(b"hello, responder");
    // Header, enhanced data and 3 of the 16 private-data octets PD_Length announces.
    request.truncate(request.len() - 13);
    let tcp =
        p.a.core
            .stack_mut()
            .connect((ip(2), PORT), None, &TcpTuning::default())
            .unwrap();
    let mut off = 0;
    let mut closed = false;
    let mut events = Vec::new();
    let mut steps = 0;
    p.run_until(5000, |p| {
        let stack = p.a.core.stack_mut();
        if off < request.len() && stack.state(tcp) == Ok(TcpState::Established) {
            off += stack.send(tcp, &request[off..]).unwrap();
        }
        if off == request.len() && !closed {
            stack.close(tcp).unwrap();
            closed = true;
        }
        let _ = stack.recv_with(tcp, |d| d.len());
        events.extend(p.b.take_events());
        steps += 1;
        // Long enough for the FIN to arrive and the responder to close (well short of the
        // 10 s startup timeout, which resets silently by design).
        closed && steps > 3000
    });
    assert!(closed);
    assert!(
        matches!(
            p.a.core.stack_mut().state(tcp).ok(),
            Some(TcpState::TimeWait | TcpState::Closed)
        ),
        "the responder closed its side"
    );
    assert!(
        events.iter().any(|e| matches!(
            e,
            CmEvent::RequestRefused {
                error: NegotiationError::Frame(FrameError::Truncated),
                ..
            }
        )),
        "a Request cut short by FIN is dropped without a word: {events:?}"
    );
}

/// Connects A's `qa` to B's listener again (B still listens on [`PORT`]) and accepts on
/// `qb`, both QPs reset to idle; steps until both are established, asserting that no event
/// but the request and the establishments comes (nothing of the old connections).
fn reconnect(p: &mut Pair, qa: warpcore_engine::QpId, qb: warpcore_engine::QpId) {
    p.a.core
        .connect(qa, (ip(2), PORT), &MpaParams::default(), b"again")
        .expect("a reset QP connects again");
    let mut req = None;
    p.run_until(2000, |p| {
        for e in p.b.take_events() {
            match e {
                CmEvent::ConnectRequest(r) => req = Some(r),
                e => panic!("B: an event from the old connection after the reset: {e:?}"),
            }
        }
        req.is_some()
    });
    let req = req.unwrap();
    assert_eq!(req.private_data, b"again");
    p.b.core
        .accept(req.request, qb, b"", None)
        .expect("a reset QP accepts");
    let mut up = (false, false);
    p.run_until(2000, |p| {
        for (side, ev) in [(0, p.a.take_events()), (1, p.b.take_events())] {
            for e in ev {
                match e {
                    CmEvent::Established(_) if side == 0 => up.0 = true,
                    CmEvent::Established(_) => up.1 = true,
                    e => panic!("side {side}: an event from the old connection: {e:?}"),
                }
            }
        }
        up.0 && up.1
    });
    assert_eq!(p.a.core.qp_state(qa).unwrap(), QpState::Rts);
    assert_eq!(p.b.core.qp_state(qb).unwrap(), QpState::Rts);
}

/// The verbs' ERR -> RESET (IB spec's QP state machine; siw's ERROR -> IDLE): a QP whose
/// connection was aborted is reset to idle, keeps the settings its user made on it
/// (RFC 7306 off here) and reads as a new QP (no ORD, RFC 7306 not in use); a receive
/// posted then is queued, not flushed; it connects (and the peer's reset QP accepts)
/// again and moves data both ways, every completion successful and none left over from
/// the old connection; resetting an idle QP changes nothing.
#[test]
fn an_aborted_qp_reset_to_idle_connects_and_moves_data_again() {
    let mut p = Pair::default_pair();
    let (qa, shared_a) = p.a.qp_shared(64);
    let qb = p.b.qp(64);
    shared_a.set_rfc7306(false);
    p.b.core.listen(PORT, MpaParams::default()).unwrap();
    p.a.core
        .connect(qa, (ip(2), PORT), &MpaParams::default(), b"")
        .unwrap();
    let req = p.wait_request();
    p.b.core.accept(req.request, qb, b"", None).unwrap();
    p.run_until_established();
    assert!(shared_a.ord() > 0);
    let (_ra, sa) = p.a.region(4096, all_access());
    p.a.core.post_recv(qa, recv_wr(1, &[(sa, 0, 10)])).unwrap();
    p.a.core.abort(qa).unwrap();
    p.run_until_disconnected(2000);
    // B's QP failed too (its peer reset the stream).
    assert_eq!(p.a.core.qp_state(qa).unwrap(), QpState::Error);
    assert_eq!(p.b.core.qp_state(qb).unwrap(), QpState::Error);
    let flushed = p.a.take_completions();
    assert_eq!(
        dbg(&flushed
            .iter()
            .map(|c| (c.wr_id, c.status))
            .collect::<Vec<_>>()),
        dbg(&[(1, WcStatus::FlushErr)])
    );
    p.b.take_completions();

    p.a.core.reset_qp(qa).unwrap();
    p.b.core.reset_qp(qb).unwrap();
    assert_eq!(p.a.core.qp_state(qa).unwrap(), QpState::Idle);
    assert_eq!(p.b.core.qp_state(qb).unwrap(), QpState::Idle);
    assert_eq!(shared_a.state(), QpState::Idle);
    assert!(!shared_a.rfc7306(), "the user's setting is kept");
    assert_eq!((shared_a.ord(), shared_a.rfc7306_in_use()), (0, false));
    assert_eq!((shared_a.sq_used(), shared_a.rq_used()), (0, 0));
    let info = p.a.core.qp_info(qa).unwrap();
    assert_eq!((info.ird, info.ord, info.reads_in_flight_max), (0, 0, 0));
    // Idle: a second reset is a no-op.
    p.a.core.reset_qp(qa).unwrap();
    assert_eq!(p.a.core.qp_state(qa).unwrap(), QpState::Idle);
    // A receive posted now waits for a message.
    p.a.core
        .post_recv(qa, recv_wr(7, &[(sa, 100, 10)]))
        .unwrap();
    p.run(200);
    assert!(
        p.a.take_completions().is_empty(),
        "the receive is queued, not flushed"
    );
    assert!(p.a.take_events().is_empty() && p.b.take_events().is_empty());
    assert_eq!(shared_a.rq_used(), 1);

    reconnect(&mut p, qa, qb);
    assert!(
        !shared_a.rfc7306_in_use(),
        "read from the kept setting at connect"
    );
    // The receive posted while idle takes B's first Send.
    let (rb, sb) = p.b.region(4096, all_access());
    rb.write_at(0, b"hello").unwrap();
    p.b.core
        .post_send(qb, send_wr(9, SendOp::Send, &[(sb, 0, 5)]))
        .unwrap();
    p.run_until(2000, |p| !p.a.completions.is_empty());
    let c = p.a.take_completions();
    assert_eq!(
        (c[0].wr_id, c[0].status, c[0].byte_len),
        (7, WcStatus::Success, 5)
    );
    p.run_until(2000, |p| !p.b.completions.is_empty());
    let c = p.b.take_completions();
    assert_eq!((c[0].wr_id, c[0].status), (9, WcStatus::Success));
    exchange(&mut p, qa, qb);
    p.run(200);
    assert!(p.a.take_events().is_empty() && p.b.take_events().is_empty());
    assert!(p.a.take_completions().is_empty() && p.b.take_completions().is_empty());
}

/// A QP failed by its peer's Terminate (no receive buffer: DDP-7.1-2), reset at once while
/// TCP may still be closing the old stream, and its peer (in Terminate or Error after
/// sending it) reset too: the old connection goes without another event on either side,
/// and the two QPs connect and move data again.
#[test]
fn qps_failed_by_a_terminate_are_reset_and_reused() {
    let mut p = Pair::default_pair();
    let (qa, qb) = p.connect();
    let (_ra, sa) = p.a.region(4096, all_access());
    p.a.core
        .post_send(qa, send_wr(1, SendOp::Send, &[(sa, 0, 5)]))
        .unwrap();
    p.a.core
        .post_recv(qa, recv_wr(2, &[(sa, 100, 10)]))
        .unwrap();
    p.run_until_both_fail(3000);
    assert!(matches!(
        p.b.core.qp_state(qb).unwrap(),
        QpState::Terminate | QpState::Error
    ));
    p.a.core.reset_qp(qa).unwrap();
    p.b.core.reset_qp(qb).unwrap();
    let ca = p.a.take_completions();
    // The Send may have been handed to TCP whole before the Terminate came (then it
    // completed successfully); the receive is flushed.
    assert_eq!(
        ca.iter().find(|c| c.wr_id == 2).map(|c| c.status),
        Some(WcStatus::FlushErr),
        "{ca:?}"
    );
    p.b.take_completions();
    reconnect(&mut p, qa, qb);
    exchange(&mut p, qa, qb);
    p.run(300);
    assert!(p.a.take_events().is_empty() && p.b.take_events().is_empty());
}

/// A QP with a live connection is not reset (abort it first): InvalidState, nothing
/// changes, the connection still carries data.
#[test]
fn reset_is_refused_while_connected() {
    let mut p = Pair::default_pair();
    let (qa, qb) = p.connect();
    assert!(matches!(
        p.a.core.reset_qp(qa),
        Err(EngineError::InvalidState(QpState::Rts))
    ));
    assert_eq!(p.a.core.qp_state(qa).unwrap(), QpState::Rts);
    exchange(&mut p, qa, qb);
    p.a.core.disconnect(qa).unwrap();
    assert!(matches!(
        p.a.core.reset_qp(qa),
        Err(EngineError::InvalidState(QpState::Closing))
    ));
}

/// RDMAP-5.5-8 (completions in order), RDMAP-06 §6: a request flushed when it reached the
/// core (posted on a QP in a graceful close, or a post that raced the close) sits behind
/// requests not started yet. When the last of those starts, the sending position lands on
/// it; if the loop's FPDU budget runs out right then and the requests before it are done,
/// the send queue's retirement took it too and the head passed the sending position: the
/// next look at the sending position subtracted past zero (a panic with overflow checks;
/// without them the QP never started another request and its close never finished).
#[test]
fn a_flushed_post_retired_at_the_sending_position_keeps_the_queue_going() {
    let cfg = warpcore_engine::EngineConfig {
        tx_budget_fpdus: 2,
        ..warpcore_engine::EngineConfig::default()
    };
    let mut p = Pair::new(&warpcore_engine::tcp::link::LinkConfig::default(), &cfg);
    let (qa, shared_a) = p.a.qp_shared(64);
    let qb = p.b.qp(64);
    p.b.core.listen(PORT, MpaParams::default()).unwrap();
    p.a.core
        .connect(qa, (ip(2), PORT), &MpaParams::default(), b"")
        .unwrap();
    let req = p.wait_request();
    p.b.core.accept(req.request, qb, b"", None).unwrap();
    p.run_until_established();
    let (_ra, sa) = p.a.region(4096, all_access());
    let (_rb, sb) = p.b.region(4096, all_access());
    for k in 0..2u64 {
        p.b.core
            .post_recv(qb, recv_wr(100 + k, &[(sb, k * 64, 64)]))
            .unwrap();
    }
    // Two one-FPDU Sends, none started yet: the loop's budget ends with the second.
    for k in 0..2u64 {
        post_a(&mut p, qa, k + 1, SendOp::Send, &[(sa, k * 64, 64)]);
    }
    p.a.core.disconnect(qa).unwrap();
    // A post on the closing QP, flushed behind the Sends still to go out (the verbs'
    // `QueuePair::post_send_flushed`, `ibv_post_send` on a closing QP in rdma-compat).
    warpcore_engine::reserve_flushed_send(&shared_a).unwrap();
    p.a.core
        .post_send_reserved(qa, send_wr(9, SendOp::Send, &[(sa, 0, 64)]));
    assert_eq!(p.run_until_disconnected(20_000), (false, false));
    let ca: Vec<_> =
        p.a.take_completions()
            .iter()
            .map(|c| (c.wr_id, c.status))
            .collect();
    assert_eq!(
        ca,
        [
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (9, WcStatus::FlushErr)
        ]
    );
    assert_eq!(shared_a.sq_used(), 0);
}
