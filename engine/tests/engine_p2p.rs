//! RFC 6581 connection modes between two engine cores over the in-memory link: the
//! peer-to-peer model with each RTR type as initiator and as responder (both directions),
//! an RTR mismatch (clean Terminate 2/0/07, never a hang), the 0x3FFF IRD/ORD rule and
//! IRD enforcement, and markers on and off end to end (with loss and reordering), including
//! a peer that refuses to send markers.

mod common;

use common::*;
use warpcore_engine::proto::mpa::negotiation::NegotiationError;
use warpcore_engine::tcp::link::{Faults, LinkConfig};
use warpcore_engine::tcp::smoltcp::time::Duration;
use warpcore_engine::{
    CmEvent, ConnError, EngineConfig, Established, MpaParams, QpId, QpState, RtrType, RtrTypes,
    SendOp, WcOpcode, WcStatus,
};

/// The initiator and responder sides of `p`: A initiates unless `flip`.
fn roles(p: &mut Pair, flip: bool) -> (&mut Side, &mut Side) {
    if flip {
        (&mut p.b, &mut p.a)
    } else {
        (&mut p.a, &mut p.b)
    }
}

fn addr(flip: bool) -> (warpcore_engine::tcp::smoltcp::wire::Ipv4Address, u16) {
    (if flip { ip(1) } else { ip(2) }, PORT)
}

/// What one connection attempt ended in, per side.
#[derive(Debug)]
enum Outcome {
    Up(Box<Established>),
    Rejected,
    Failed(ConnError),
}

/// The decisive event of one side: an error or rejection outranks an earlier
/// `Established` (a failure after FPDU mode started).
fn outcome(events: &[CmEvent]) -> Option<Outcome> {
    let mut best = None;
    for e in events {
        match e {
            CmEvent::Error { error, .. } => return Some(Outcome::Failed(error.clone())),
            CmEvent::Rejected { .. } => return Some(Outcome::Rejected),
            CmEvent::Established(x) => best = Some(Outcome::Up(Box::new(x.clone()))),
            _ => {}
        }
    }
    best
}

/// Connects the initiator (A, or B if `flip`) to the responder with `pi`/`pr`; accepts the
/// request if one reaches the responder's user. Returns (initiator QP, responder QP,
/// initiator outcome, responder outcome; `None` for a responder whose user never saw a
/// request, e.g. one rejected by MPA itself). When the initiator failed, waits (bounded)
/// for the responder's error too.
fn attempt(
    p: &mut Pair,
    flip: bool,
    pi: &MpaParams,
    pr: &MpaParams,
) -> (QpId, QpId, Outcome, Option<Outcome>) {
    let (i, r) = roles(p, flip);
    let qi = i.qp(16);
    let qr = r.qp(16);
    r.core.listen(PORT, pr.clone()).expect("listen");
    i.core.connect(qi, addr(flip), pi, b"p2p").expect("connect");
    let (mut ev_i, mut ev_r) = (Vec::new(), Vec::new());
    let mut accepted = false;
    // Bounded: a hang fails here, within simulated seconds.
    p.run_until(5000, |p| {
        let (i, r) = roles(p, flip);
        for e in r.take_events() {
            if let CmEvent::ConnectRequest(req) = &e {
                r.core.accept(req.request, qr, b"", None).expect("accept");
                accepted = true;
            }
            ev_r.push(e);
        }
        ev_i.extend(i.take_events());
        match outcome(&ev_i) {
            None => false,
            Some(Outcome::Up(_)) => !accepted || outcome(&ev_r).is_some(),
            Some(_) => !accepted || matches!(outcome(&ev_r), Some(Outcome::Failed(_))),
        }
    });
    (
        qi,
        qr,
        outcome(&ev_i).expect("initiator outcome"),
        outcome(&ev_r),
    )
}

/// Sends both ways (the responder first, which the peer-to-peer model allows), a Write and
/// a Read from the initiator: every byte checked.
fn traffic(p: &mut Pair, flip: bool, qi: QpId, qr: QpId) {
    let (i, r) = roles(p, flip);
    let (ri, si) = i.region(1 << 16, all_access());
    let (rr, sr) = r.region(1 << 16, all_access());
    let a = pattern(3000, 1);
    let b = pattern(2000, 2);
    ri.write_at(0, &a).unwrap();
    rr.write_at(0, &b).unwrap();
    i.core
        .post_recv(qi, recv_wr(10, &[(si, 10_000, 4000)]))
        .unwrap();
    r.core
        .post_recv(qr, recv_wr(20, &[(sr, 10_000, 4000)]))
        .unwrap();
    r.core
        .post_send(qr, send_wr(21, SendOp::Send, &[(sr, 0, 2000)]))
        .unwrap();
    i.core
        .post_send(qi, send_wr(11, SendOp::Send, &[(si, 0, 3000)]))
        .unwrap();
    i.core
        .post_send(
            qi,
            send_wr(
                12,
                SendOp::Write {
                    remote_stag: sr.0,
                    remote_to: 20_000,
                },
                &[(si, 0, 3000)],
            ),
        )
        .unwrap();
    i.core
        .post_send(
            qi,
            send_wr(
                13,
                SendOp::Read {
                    remote_stag: sr.0,
                    remote_to: 0,
                },
                &[(si, 30_000, 2000)],
            ),
        )
        .unwrap();
    p.run_until(5000, |p| {
        let (i, r) = roles(p, flip);
        i.completions.len() == 4 && r.completions.len() == 2
    });
    let (i, r) = roles(p, flip);
    assert!(i
        .take_completions()
        .iter()
        .all(|c| c.status == WcStatus::Success));
    assert!(r
        .take_completions()
        .iter()
        .all(|c| c.status == WcStatus::Success));
    assert_eq!(read_region(&ri, 10_000, 2000), b);
    assert_eq!(read_region(&rr, 10_000, 3000), a);
    assert_eq!(read_region(&rr, 20_000, 3000), a);
    assert_eq!(read_region(&ri, 30_000, 2000), b);
}

/// MPA2-9.2-1/2/5/9, MPA2-5-1: each RTR type, offered alone by the initiator and accepted
/// alone by the responder, is the first FPDU; the responder consumes it (a Send RTR takes
/// MSN 1 of QN 0 and no receive buffer; a Read RTR takes MSN 1 of QN 1 and is answered
/// with a zero-length Read Response) and traffic in both directions follows. Each engine
/// plays initiator and responder.
#[test]
fn each_rtr_type_as_initiator_and_responder() {
    for flip in [false, true] {
        for t in [RtrType::Send, RtrType::Write, RtrType::Read] {
            let mut p = Pair::default_pair();
            let pi = MpaParams {
                rtr_offer: RtrTypes::only(t),
                ..Default::default()
            };
            let pr = MpaParams {
                rtr_accept: RtrTypes::only(t),
                ..Default::default()
            };
            let (qi, qr, oi, or) = attempt(&mut p, flip, &pi, &pr);
            let (Outcome::Up(ei), Some(Outcome::Up(er))) = (oi, or) else {
                panic!("{t:?} flip={flip}: not established");
            };
            assert_eq!(ei.rtr, Some(t));
            assert_eq!(er.rtr_accepted, RtrTypes::only(t));
            // Let the RTR (and the Read RTR's response) cross before any traffic: exactly
            // one FPDU each way for a Read RTR, one from the initiator otherwise.
            p.run(200);
            let (i, r) = roles(&mut p, flip);
            let (si, sr) = (i.core.stats(), r.core.stats());
            assert_eq!((si.fpdus_tx, sr.fpdus_rx), (1, 1), "{t:?}");
            let back = u64::from(t == RtrType::Read);
            assert_eq!((sr.fpdus_tx, si.fpdus_rx), (back, back), "{t:?}");
            traffic(&mut p, flip, qi, qr);
            let (i, r) = roles(&mut p, flip);
            assert_eq!(
                i.core.stats().terminates_rx + r.core.stats().terminates_rx,
                0
            );
        }
    }
}

/// A Read RTR is a zero-length Read Request that holds an ORD slot until its Read Response
/// comes back (MPA2-5-1, RDMAP-6.1-1): the ORD high-water mark the engine reports
/// (`QpInfo::reads_in_flight_max`) counts it as a Read in flight, as every other Read. The
/// RTR's Read was queued past the count, which read 0 after it; other RTR types hold no
/// ORD slot.
#[test]
fn a_read_rtr_counts_in_the_reads_in_flight_high_water_mark() {
    for flip in [false, true] {
        for t in [RtrType::Send, RtrType::Write, RtrType::Read] {
            let mut p = Pair::default_pair();
            let pi = MpaParams {
                rtr_offer: RtrTypes::only(t),
                ..Default::default()
            };
            let pr = MpaParams {
                rtr_accept: RtrTypes::only(t),
                ..Default::default()
            };
            let (qi, _qr, oi, or) = attempt(&mut p, flip, &pi, &pr);
            assert!(
                matches!((oi, or), (Outcome::Up(_), Some(Outcome::Up(_)))),
                "{t:?} flip={flip}: not established"
            );
            p.run(200);
            let (i, _) = roles(&mut p, flip);
            let info = i.core.qp_info(qi).unwrap();
            let want = u32::from(t == RtrType::Read);
            assert_eq!(info.reads_in_flight_max, want, "{t:?} flip={flip}");
            assert!(info.reads_in_flight_max <= info.ord, "{t:?} flip={flip}");
        }
    }
}

/// The initiator offers more than one type: of those the responder marks, Write is
/// preferred, then Send, then Read (MPA2-9.2-9).
#[test]
fn rtr_choice_among_several_offered() {
    for (offer, accept, want) in [
        (RtrTypes::ALL, RtrTypes::ALL, RtrType::Write),
        (
            RtrTypes::ALL,
            RtrTypes::SEND.union(RtrTypes::READ),
            RtrType::Send,
        ),
        (RtrTypes::ALL, RtrTypes::READ, RtrType::Read),
        (
            RtrTypes::SEND.union(RtrTypes::READ),
            RtrTypes::ALL,
            RtrType::Send,
        ),
    ] {
        let mut p = Pair::default_pair();
        let pi = MpaParams {
            rtr_offer: offer,
            ..Default::default()
        };
        let pr = MpaParams {
            rtr_accept: accept,
            ..Default::default()
        };
        let (qi, qr, oi, or) = attempt(&mut p, false, &pi, &pr);
        let (Outcome::Up(ei), Some(Outcome::Up(_))) = (oi, or) else {
            panic!("{offer:?}/{accept:?}: not established");
        };
        assert_eq!(ei.rtr, Some(want), "{offer:?}/{accept:?}");
        traffic(&mut p, false, qi, qr);
    }
}

/// MPA2-9.2-8/10/11: the responder accepts none of the offered types, so it marks the ones
/// it does accept; the initiator can send none of them and fails with a Terminate
/// 2/0/07 (no matching RTR). Both users get a typed error, both QPs end in the error
/// state, nothing hangs. Also with a Read RTR that cannot work (responder IRD 0).
#[test]
fn rtr_mismatch_is_a_clean_terminate_2_0_07() {
    let cases = [
        (RtrTypes::WRITE, RtrTypes::SEND, 8u16),
        (RtrTypes::SEND, RtrTypes::READ.union(RtrTypes::WRITE), 8),
        (RtrTypes::READ, RtrTypes::SEND, 8),
        // The responder would take a Read RTR, but with IRD 0 it cannot (MPA2-9.1-3 is a
        // MAY; we raise IRD only for an offered Read RTR we accept), so it marks Send.
        (RtrTypes::READ, RtrTypes::READ.union(RtrTypes::SEND), 0),
    ];
    for flip in [false, true] {
        for (offer, accept, rird) in cases {
            let mut p = Pair::default_pair();
            let pi = MpaParams {
                rtr_offer: offer,
                ..Default::default()
            };
            let pr = MpaParams {
                rtr_accept: accept,
                ird: rird,
                ..Default::default()
            };
            let (qi, qr, oi, or) = attempt(&mut p, flip, &pi, &pr);
            if rird == 0 {
                // The responder's IRD 0 drops Read from what it marks (it cannot answer a
                // Read RTR): only Send remains, which the initiator did not offer.
                assert!(!accept.intersection(offer).is_empty());
            }
            let Outcome::Failed(ConnError::Negotiation { error: e, .. }) = oi else {
                panic!("{offer:?}/{accept:?}: initiator {oi:?}");
            };
            assert_eq!(e, NegotiationError::NoMatchingRtr);
            let Some(Outcome::Failed(ConnError::RemoteTerminate(rep))) = or else {
                panic!("{offer:?}/{accept:?}: responder {or:?}");
            };
            assert_eq!(
                (rep.code.layer(), rep.code.etype(), rep.code.code()),
                (2, 0, 7),
                "{offer:?}/{accept:?}"
            );
            p.run(300);
            let (i, r) = roles(&mut p, flip);
            assert_eq!(i.core.qp_state(qi).unwrap(), QpState::Error);
            assert_eq!(r.core.qp_state(qr).unwrap(), QpState::Error);
            assert_eq!(r.core.stats().terminates_tx, 0);
            assert_eq!(i.core.stats().terminates_tx, 1);
        }
    }
}

fn established_pair(
    p: &mut Pair,
    pi: &MpaParams,
    pr: &MpaParams,
) -> (QpId, QpId, Established, Established) {
    let (qi, qr, oi, or) = attempt(p, false, pi, pr);
    let (Outcome::Up(ei), Some(Outcome::Up(er))) = (oi, or) else {
        panic!("not established");
    };
    (qi, qr, *ei, *er)
}

/// RFC 6581 §9.1, MPA2-9.1-11..14: 0x3FFF means "not negotiated". The responder keeps its
/// local IRD (ORD) and answers 0x3FFF when the initiator's ORD (IRD) is 0x3FFF; the
/// initiator keeps its local ORD (IRD) when the responder's IRD (ORD) is 0x3FFF. A local
/// value that stays 0x3FFF means our configured maximum (`max_ird`/`max_ord`; departure 4).
/// Explicit values are negotiated as usual (MPA2-9.1-4/7).
#[test]
fn ird_ord_0x3fff_rule() {
    const N: u16 = 0x3FFF;
    let cfg = EngineConfig::default(); // max_ird = max_ord = 16
                                       // (initiator ird, ord), (responder ird, ord) ->
                                       //   responder (local ird, ord), its Reply (ird, ord), initiator (local ird, ord)
    type Pair2 = (u16, u16);
    let cases: [(Pair2, Pair2, Pair2, Pair2, Pair2); 6] = [
        // Initiator ORD 0x3FFF: responder keeps IRD 5 and answers 0x3FFF (MPA2-9.1-11);
        // the initiator then keeps its ORD 0x3FFF = max_ord (MPA2-9.1-12).
        ((4, N), (5, 3), (5, 3), (N, 3), (3, 16)),
        // Initiator IRD 0x3FFF: responder keeps ORD 3 and answers 0x3FFF (MPA2-9.1-13); the
        // initiator keeps its IRD 0x3FFF = max_ird (MPA2-9.1-14).
        ((N, 4), (5, 3), (4, 3), (4, N), (16, 4)),
        // Both 0x3FFF from the initiator.
        ((N, N), (5, 3), (5, 3), (N, N), (16, 16)),
        // The responder's own 0x3FFF: same answers, its local values become its maxima.
        ((4, 6), (N, N), (16, 16), (N, N), (4, 6)),
        // Everybody 0x3FFF.
        ((N, N), (N, N), (16, 16), (N, N), (16, 16)),
        // Explicit: responder IRD = min(initiator ORD, its IRD), ORD = min(its ORD,
        // initiator IRD); the initiator's IRD becomes the responder ORD, its ORD at most
        // the responder IRD.
        ((2, 7), (5, 3), (5, 2), (5, 2), (2, 5)),
    ];
    for ((ii, io), (ri, ro), r_local, reply, i_local) in cases {
        let mut p = Pair::new(&LinkConfig::default(), &cfg);
        let pi = MpaParams {
            ird: ii,
            ord: io,
            ..Default::default()
        };
        let pr = MpaParams {
            ird: ri,
            ord: ro,
            ..Default::default()
        };
        let (_, _, ei, er) = established_pair(&mut p, &pi, &pr);
        let case = format!("initiator {ii:#x}/{io:#x} responder {ri:#x}/{ro:#x}");
        assert_eq!(er.peer_ird_ord, Some((ii, io)), "{case}");
        assert_eq!((er.ird, er.ord), r_local, "{case}");
        assert_eq!(ei.peer_ird_ord, Some(reply), "{case}");
        assert_eq!((ei.ird, ei.ord), i_local, "{case}");
    }
}

/// RDMAP-6.1-2 / RDMAP-7.2 (0/2/07): when the initiator did not negotiate (ORD 0x3FFF, so
/// its ORD is its maximum, 16) and the responder's IRD is 2, the initiator's user may put
/// more Reads in flight than the responder serves: the third earns Terminate 0/2/07 and
/// both QPs end in the error state. With an explicit ORD the same Reads are throttled by
/// the negotiated ORD and all succeed.
#[test]
fn more_reads_than_negotiated_ird_terminate() {
    for negotiate in [false, true] {
        let mut p = Pair::default_pair();
        let pi = MpaParams {
            ord: if negotiate { 8 } else { 0x3FFF },
            ..Default::default()
        };
        let pr = MpaParams {
            ird: 2,
            ..Default::default()
        };
        let (qi, qr, ei, er) = established_pair(&mut p, &pi, &pr);
        assert_eq!(er.ird, 2);
        assert_eq!(ei.ord, if negotiate { 2 } else { 16 });
        let (ra, sa) = p.a.region(1 << 16, all_access());
        let (_rb, sb) = p.b.region(1 << 16, all_access());
        for k in 0..6u64 {
            p.a.core
                .post_send(
                    qi,
                    send_wr(
                        k,
                        SendOp::Read {
                            remote_stag: sb.0,
                            remote_to: 0,
                        },
                        &[(sa, k * 1000, 1000)],
                    ),
                )
                .unwrap();
        }
        if negotiate {
            p.run_until(5000, |p| p.a.completions.len() == 6);
            assert!(p
                .a
                .take_completions()
                .iter()
                .all(|c| c.status == WcStatus::Success && c.opcode == WcOpcode::Read));
            assert_eq!(p.a.core.qp_info(qi).unwrap().reads_in_flight_max, 2);
            assert_eq!(p.b.core.stats().terminates_tx, 0);
            continue;
        }
        let (ea, eb) = p.run_until_both_fail(5000);
        let rep = received_terminate(&ea);
        assert_eq!(
            (rep.code.layer(), rep.code.etype(), rep.code.code()),
            (0, 2, 7)
        );
        assert!(eb.iter().any(|e| matches!(
            e,
            CmEvent::Error {
                error: ConnError::LocalTerminate(_),
                ..
            }
        )));
        p.run(300);
        assert_eq!(p.a.core.qp_state(qi).unwrap(), QpState::Error);
        assert_eq!(p.b.core.qp_state(qr).unwrap(), QpState::Error);
        // No Read beyond the region; every Read completed (success, error or flush).
        p.run_until(500, |p| p.a.completions.len() == 6);
        let _ = ra;
    }
}

/// Markers on and off end to end (MPA-4.3, MPA-7.1.1-7/8): each direction carries markers
/// exactly when its receiver asked; payloads of every size around the 512-octet marker
/// spacing cross many marker positions, with 2% loss, reordering and duplication both
/// ways; every byte is checked.
/// MPA-7.1.5-3: TCP's loss and reordering recovery is kept under MPA with markers.
#[test]
fn markers_both_ways_under_loss_and_reorder() {
    let faults = |seed| Faults {
        seed,
        loss: 0.02,
        duplicate: 0.01,
        reorder: 0.02,
        reorder_delay: Duration::from_micros(300),
        ..Faults::default()
    };
    let link = LinkConfig {
        faults_ab: faults(11),
        faults_ba: faults(12),
        ..LinkConfig::default()
    };
    for (ma, mb) in [(true, true), (true, false), (false, true), (false, false)] {
        let mut p = Pair::new(&link, &EngineConfig::default());
        let pi = MpaParams {
            markers: ma,
            ..Default::default()
        };
        let pr = MpaParams {
            markers: mb,
            ..Default::default()
        };
        let (qa, qb, ea, eb) = established_pair(&mut p, &pi, &pr);
        // (we insert, the peer inserts)
        assert_eq!(ea.markers, (mb, ma));
        assert_eq!(eb.markers, (ma, mb));
        let (ra, sa) = p.a.region(1 << 20, all_access());
        let (rb, sb) = p.b.region(1 << 20, all_access());
        let src_a = pattern(1 << 19, 3);
        let src_b = pattern(1 << 19, 4);
        ra.write_at(0, &src_a).unwrap();
        rb.write_at(0, &src_b).unwrap();
        // Sizes straddling marker positions (every 512 stream octets) and MULPDU.
        let sizes = [
            1u32, 3, 4, 5, 505, 508, 509, 511, 512, 513, 1020, 1400, 4096, 65_537,
        ];
        let mut off = 0u64;
        let mut n = 0;
        for (k, &len) in sizes.iter().enumerate() {
            let dst = (1 << 19) + off;
            let op = |stag: warpcore_engine::mem::Stag| SendOp::Write {
                remote_stag: stag.0,
                remote_to: dst,
            };
            p.a.core
                .post_send(qa, send_wr(k as u64, op(sb), &[(sa, off, len)]))
                .unwrap();
            p.b.core
                .post_send(qb, send_wr(k as u64, op(sa), &[(sb, off, len)]))
                .unwrap();
            off += u64::from(len) + 7;
            n += 1;
        }
        // A Read each way too: the responses are marked by the other side.
        p.a.core
            .post_send(
                qa,
                send_wr(
                    99,
                    SendOp::Read {
                        remote_stag: sb.0,
                        remote_to: 100,
                    },
                    &[(sa, 900_000, 70_000)],
                ),
            )
            .unwrap();
        p.b.core
            .post_send(
                qb,
                send_wr(
                    99,
                    SendOp::Read {
                        remote_stag: sa.0,
                        remote_to: 100,
                    },
                    &[(sb, 900_000, 70_000)],
                ),
            )
            .unwrap();
        p.run_until(200_000, |p| {
            p.a.completions.len() == n + 1 && p.b.completions.len() == n + 1
        });
        for c in
            p.a.take_completions()
                .iter()
                .chain(p.b.take_completions().iter())
        {
            assert_eq!(c.status, WcStatus::Success, "markers {ma}/{mb}: {c:?}");
        }
        let mut off = 0usize;
        for &len in &sizes {
            let len = len as usize;
            let dst = (1 << 19) + off;
            assert_eq!(read_region(&rb, dst, len), src_a[off..off + len]);
            assert_eq!(read_region(&ra, dst, len), src_b[off..off + len]);
            off += len + 7;
        }
        assert_eq!(read_region(&ra, 900_000, 70_000), src_b[100..70_100]);
        assert_eq!(read_region(&rb, 900_000, 70_000), src_a[100..70_100]);
        assert_eq!(
            p.a.core.stats().terminates_rx + p.b.core.stats().terminates_rx,
            0
        );
        let lost = p.a.core.stack().device().tx_fault_stats().lost
            + p.b.core.stack().device().tx_fault_stats().lost;
        assert!(lost > 0, "the faults were injected");
    }
}

/// MPA-4.3-1, MPA-7.1.1-10: requesting markers from a peer that will not send them. As
/// initiator (the responder refuses): MPA rejects the Request without asking its user
/// (Reply with R = 1); the initiator's user gets `Rejected` and its QP is in the error
/// state, the responder's user gets `RequestRefused { MarkersUnsupported }`. As responder
/// (the initiator refuses): the initiator fails with `MarkersUnsupported` and closes (it
/// cannot frame a Terminate the responder could read); the responder, still fenced, gets
/// `Error { Negotiation(PeerClosed) }`. Never a hang.
#[test]
fn markers_refused_is_a_clean_rejection() {
    // The responder refuses to insert markers the initiator requires.
    let mut p = Pair::default_pair();
    let pi = MpaParams {
        markers: true,
        ..Default::default()
    };
    let pr = MpaParams {
        markers_supported: false,
        ..Default::default()
    };
    let qi = p.a.qp(16);
    p.b.core.listen(PORT, pr).expect("listen");
    p.a.core
        .connect(qi, (ip(2), PORT), &pi, b"")
        .expect("connect");
    let (mut ea, mut eb) = (Vec::new(), Vec::new());
    p.run_until(5000, |p| {
        ea.extend(p.a.take_events());
        eb.extend(p.b.take_events());
        !ea.is_empty() && !eb.is_empty()
    });
    assert!(matches!(ea[..], [CmEvent::Rejected { .. }]), "{ea:?}");
    // The responder's user never sees a request to decide on, but is told it was refused.
    let [CmEvent::RequestRefused { remote, error, .. }] = &eb[..] else {
        panic!("responder {eb:?}");
    };
    assert_eq!(
        (remote.0, *error),
        (ip(1), NegotiationError::MarkersUnsupported)
    );
    p.run(300);
    assert_eq!(p.a.core.qp_state(qi).unwrap(), QpState::Error);

    // The initiator refuses to insert markers the responder requires.
    let mut p = Pair::default_pair();
    let pi = MpaParams {
        markers_supported: false,
        ..Default::default()
    };
    let pr = MpaParams {
        markers: true,
        ..Default::default()
    };
    let (qi, qr, oi, or) = attempt(&mut p, false, &pi, &pr);
    let Outcome::Failed(ConnError::Negotiation { error: e, .. }) = oi else {
        panic!("initiator {oi:?}");
    };
    assert_eq!(e, NegotiationError::MarkersUnsupported);
    // The responder accepted, then the initiator closed before its first FPDU: a typed
    // startup failure, not a Closing that waits forever for the fence to lift.
    let Some(Outcome::Failed(ConnError::Negotiation { error: e, .. })) = or else {
        panic!("responder {or:?}");
    };
    assert_eq!(e, NegotiationError::PeerClosed);
    p.run(500);
    assert_eq!(p.a.core.qp_state(qi).unwrap(), QpState::Error);
    assert_eq!(p.b.core.qp_state(qr).unwrap(), QpState::Error);
}
