//! RDMA Read and the responder resources (RDMAP-06 §5.2, §5.5, §6.1; RFC 6581
//! §9.1; RFC 7306 §5.2): IRD/ORD under bidirectional load and loss, and what becomes of
//! outstanding Reads when the stream ends.

mod common;

use std::sync::Arc;

use common::*;
use warpcore_engine::mem::{Region, Stag};
use warpcore_engine::proto::mpa::negotiation::NegotiationError;
use warpcore_engine::tcp::link::LinkConfig;
use warpcore_engine::{
    CmEvent, Completion, ConnError, EngineConfig, MpaParams, QpId, RtrType, RtrTypes, SendOp,
    WcOpcode, WcStatus,
};

/// A registered region and its STag.
type Registered = (Arc<Region>, Stag);

/// A and B connected with IRD = ORD = `n`, each with a region of `len` octets (every
/// access): (A's QP, B's QP, A's region and STag, B's region and STag).
fn connected_for_reads(p: &mut Pair, n: u16, len: usize) -> (QpId, QpId, Registered, Registered) {
    let params = MpaParams {
        ird: n,
        ord: n,
        ..Default::default()
    };
    let (qa, qb) = p.connect_with(&params, &params, 64);
    let a = p.a.region(len, all_access());
    let b = p.b.region(len, all_access());
    (qa, qb, a, b)
}

/// Posts `count` Reads of `size` octets on `side`'s QP `qp`: Read `k` (its wr_id) from the
/// peer's `remote` at `k * size` into `local` at `local_base + k * size`.
fn post_reads(
    side: &mut Side,
    qp: QpId,
    (local, local_base): (Stag, u64),
    remote: Stag,
    count: u64,
    size: u32,
) {
    for k in 0..count {
        let off = k * u64::from(size);
        side.core
            .post_send(
                qp,
                send_wr(
                    k,
                    read_op(remote.0, off),
                    &[(local, local_base + off, size)],
                ),
            )
            .unwrap();
    }
}

/// Every one of `count` Reads completed once, in posting order: a run answered, then the
/// rest flushed. Returns how many were answered.
fn answered_then_flushed(c: &[Completion], count: u64, what: &str) -> usize {
    assert_eq!(
        c.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        (0..count).collect::<Vec<_>>(),
        "{what}: {c:?}"
    );
    let ok = c
        .iter()
        .take_while(|c| c.status == WcStatus::Success)
        .count();
    assert!(
        c[ok..].iter().all(|c| c.status == WcStatus::FlushErr),
        "{what}: {c:?}"
    );
    ok
}

/// RDMAP-6.1-4/5, RDMAP-5.5-13, RDMAP-5.2.1-14: both sides read from each other at once
/// with IRD = ORD = 1 over a lossy, reordering link; each side answers the peer's Reads
/// while its own wait for their responses. Every Read (zero-length ones included) completes
/// successfully, in posting order, with the right octets, and no Terminate is sent.
#[test]
fn bidirectional_reads_at_ird_ord_one_under_loss() {
    for (markers, rtr, crc) in [
        (false, RtrTypes::WRITE, true),
        (true, RtrTypes::READ, true),
        (false, RtrTypes::READ, false),
        (true, RtrTypes::SEND, false),
    ] {
        bidirectional_reads(markers, rtr, crc);
    }
}

fn bidirectional_reads(markers: bool, rtr: RtrTypes, crc: bool) {
    let mut link = lossy_link(0.02, (11, 12));
    link.faults_ab.reorder = 0.02;
    link.faults_ba.reorder = 0.02;
    link.faults_ab.duplicate = 0.01;
    let mut p = Pair::new(&link, &EngineConfig::default());
    let one = MpaParams {
        ird: 1,
        ord: 1,
        markers,
        crc,
        rtr_offer: rtr,
        ..Default::default()
    };
    let (qa, qb) = p.connect_with(&one, &one, 64);
    let (ra, sa) = p.a.region(1 << 21, all_access());
    let (rb, sb) = p.b.region(1 << 21, all_access());
    let src_a = pattern(1 << 20, 3);
    let src_b = pattern(1 << 20, 7);
    ra.write_at(0, &src_a).unwrap();
    rb.write_at(0, &src_b).unwrap();
    let sizes = [0u32, 1, 1000, 0, 70_000, 3, 150_000, 0, 4096, 9000];
    let mut off = 0u64;
    let mut plan = Vec::new();
    for (i, &len) in sizes.iter().enumerate() {
        plan.push((i as u64, off, len));
        off += u64::from(len);
    }
    for &(id, off, len) in &plan {
        p.a.core
            .post_send(
                qa,
                send_wr(id, read_op(sb.0, off), &[(sa, (1 << 20) + off, len)]),
            )
            .unwrap();
        p.b.core
            .post_send(
                qb,
                send_wr(id, read_op(sa.0, off), &[(sb, (1 << 20) + off, len)]),
            )
            .unwrap();
    }
    let n = plan.len();
    p.run_until(400_000, |p| {
        p.a.completions.len() == n && p.b.completions.len() == n
    });
    for (side, c, r, src) in [
        ("A", p.a.take_completions(), &ra, &src_b),
        ("B", p.b.take_completions(), &rb, &src_a),
    ] {
        assert_eq!(
            c.iter()
                .map(|c| (c.wr_id, c.status, c.opcode))
                .collect::<Vec<_>>(),
            plan.iter()
                .map(|&(id, _, _)| (id, WcStatus::Success, WcOpcode::Read))
                .collect::<Vec<_>>(),
            "{side}"
        );
        for (&(_, off, len), c) in plan.iter().zip(&c) {
            assert_eq!(c.byte_len, len, "{side}");
            assert!(
                read_region(r, (1 << 20) + off as usize, len as usize)
                    == src[off as usize..(off + u64::from(len)) as usize],
                "{side}: Read at {off} of {len}"
            );
        }
    }
    assert_eq!(p.a.core.qp_info(qa).unwrap().reads_in_flight_max, 1);
    assert_eq!(p.b.core.qp_info(qb).unwrap().reads_in_flight_max, 1);
    assert_eq!(p.a.core.stats().terminates_tx, 0);
    assert_eq!(p.b.core.stats().terminates_tx, 0);
}

/// RDMAP-6.2.1-2: an abortive close with Reads outstanding (in flight under ORD and queued
/// behind it) completes every one of them exactly once, in order: those answered
/// successfully, the rest flushed. None is lost or completed twice.
#[test]
fn abort_with_reads_outstanding_completes_every_read_once() {
    let mut p = Pair::default_pair();
    let (qa, _qb, (_ra, sa), (_rb, sb)) = connected_for_reads(&mut p, 2, 1 << 22);
    post_reads(&mut p.a, qa, (sa, 0), sb, 12, 300_000);
    // Some Reads answered, some in flight, the rest queued behind ORD.
    p.run_until(20_000, |p| !p.a.completions.is_empty());
    p.a.core.abort(qa).unwrap();
    p.run(200);
    let ok = answered_then_flushed(&p.a.take_completions(), 12, "A");
    assert!(ok < 12, "the abort came too late to test anything");
}

/// RDMAP-06 §6 (graceful close), RDMAP-6.1-4: a disconnect with Reads outstanding and more
/// queued behind ORD lets them all complete successfully before the stream closes.
#[test]
fn disconnect_with_reads_queued_behind_ord_drains_them() {
    let mut p = Pair::default_pair();
    let (qa, _qb, (ra, sa), (rb, sb)) = connected_for_reads(&mut p, 1, 1 << 21);
    let src = pattern(1 << 20, 5);
    rb.write_at(0, &src).unwrap();
    post_reads(&mut p.a, qa, (sa, 0), sb, 8, 100_000);
    p.a.core.disconnect(qa).unwrap();
    let (ra_reset, rb_reset) = p.run_until_disconnected(50_000);
    assert!(!ra_reset && !rb_reset);
    let c = p.a.take_completions();
    assert_eq!(
        c.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        (0..8).map(|k| (k, WcStatus::Success)).collect::<Vec<_>>()
    );
    assert!(read_region(&ra, 0, 800_000) == src[..800_000]);
}

/// RDMAP-06 §6, RDMAP-6.2.1-2: the peer closes while our Reads are queued behind ORD = 1;
/// its FIN crosses our first Read Request. Every Read completes once (flushed: nothing can
/// answer them any more), and both sides finish the close.
#[test]
fn peer_close_with_reads_queued_behind_ord() {
    let mut p = Pair::new(&LinkConfig::default(), &EngineConfig::default());
    let (qa, qb, (_ra, sa), (_rb, sb)) = connected_for_reads(&mut p, 1, 1 << 20);
    post_reads(&mut p.a, qa, (sa, 0), sb, 6, 1000);
    p.b.core.disconnect(qb).unwrap();
    p.run_until_disconnected(50_000);
    answered_then_flushed(&p.a.take_completions(), 6, "A");
    assert!(p
        .b
        .events
        .iter()
        .all(|e| !matches!(e, CmEvent::Error { .. })));
}

/// RDMAP-06 §6, RDMAP-6.2.1-2: both sides disconnect at once while each has Reads of the
/// other in flight and more queued behind ORD = 1. Every Read of each side completes once,
/// in order (answered, or flushed once nothing can answer it), and both closes finish
/// gracefully.
#[test]
fn crossing_disconnects_with_reads_both_ways() {
    for steps_before in [0, 3, 10, 40] {
        let mut p = Pair::default_pair();
        let (qa, qb, (ra, sa), (rb, sb)) = connected_for_reads(&mut p, 1, 1 << 20);
        ra.write_at(0, &pattern(1 << 19, 1)).unwrap();
        rb.write_at(0, &pattern(1 << 19, 2)).unwrap();
        post_reads(&mut p.a, qa, (sa, 1 << 19), sb, 6, 50_000);
        post_reads(&mut p.b, qb, (sb, 1 << 19), sa, 6, 50_000);
        p.run(steps_before);
        p.a.core.disconnect(qa).unwrap();
        p.b.core.disconnect(qb).unwrap();
        let (reset_a, reset_b) = p.run_until_disconnected(50_000);
        assert!(!reset_a && !reset_b, "{steps_before}");
        for (side, c, r, seed) in [
            ("A", p.a.take_completions(), &ra, 2),
            ("B", p.b.take_completions(), &rb, 1),
        ] {
            let ok = answered_then_flushed(&c, 6, &format!("{side} {steps_before}"));
            let src = pattern(1 << 19, seed);
            assert!(read_region(r, 1 << 19, ok * 50_000) == src[..ok * 50_000]);
        }
    }
}

/// IBV_SEND_FENCE / RDMAP-06 §5.5 rule 12: a fenced Read posted after an Atomic starts
/// only once the Atomic's response arrived, so it reads the atomic's result (RFC 7306
/// §5.2: Atomics share the Read queue and ORD).
#[test]
fn fenced_read_after_atomic_sees_its_result() {
    let mut p = Pair::default_pair();
    let (qa, _qb) = p.connect();
    let (ra, sa) = p.a.region(4096, all_access());
    let (rb, sb) = p.b.region(
        4096,
        all_access() | warpcore_engine::mem::Access::REMOTE_ATOMIC,
    );
    rb.write_at(0, &5u64.to_ne_bytes()).unwrap();
    p.a.core
        .post_send(
            qa,
            send_wr(
                1,
                SendOp::AtomicFetchAdd {
                    remote_stag: sb.0,
                    remote_to: 0,
                    add: 7,
                    add_mask: 0,
                },
                &[(sa, 0, 8)],
            ),
        )
        .unwrap();
    let mut r = send_wr(2, read_op(sb.0, 0), &[(sa, 8, 8)]);
    r.fence = true;
    p.a.core.post_send(qa, r).unwrap();
    p.run_until(5000, |p| p.a.completions.len() == 2);
    let c = p.a.take_completions();
    assert!(c.iter().all(|c| c.status == WcStatus::Success), "{c:?}");
    assert_eq!(read_region(&ra, 0, 8), 5u64.to_ne_bytes());
    assert_eq!(read_region(&ra, 8, 8), 12u64.to_ne_bytes());
}

/// RDMAP-6.1-4, MPA2-9.2-2 (the initiator offers only RTR types it can send), as
/// `engine_hostile::no_read_rtr_marked_without_any_ird` for the responder: an initiator
/// whose engine allows no outbound Read (`max_ord` 0) but leaves ORD un-negotiated (0x3FFF,
/// which MPA's own Read RTR check passes and the engine then makes `max_ord`, 0) must not
/// send a Read RTR: the RTR is a Read Request outstanding, one more than its ORD of 0. With
/// a responder that accepts only the Read RTR, the connection must fail for want of a
/// common RTR type instead of coming up with a Read RTR.
#[test]
fn no_read_rtr_from_an_initiator_without_ord() {
    let cfg_a = EngineConfig {
        max_ord: 0,
        ..EngineConfig::default()
    };
    let mut p = Pair::with_configs(&LinkConfig::default(), &cfg_a, &EngineConfig::default());
    let pa = MpaParams {
        ord: 0x3FFF,
        rtr_offer: RtrTypes::WRITE.union(RtrTypes::READ),
        ..Default::default()
    };
    let pb = MpaParams {
        rtr_accept: RtrTypes::READ,
        ..Default::default()
    };
    let qa = p.a.qp(8);
    let qb = p.b.qp(8);
    p.b.core.listen(PORT, pb).unwrap();
    p.a.core.connect(qa, (ip(2), PORT), &pa, b"").unwrap();
    let req = p.wait_request();
    p.b.core.accept(req.request, qb, b"", None).unwrap();
    let mut ended = None;
    p.run_until(5000, |p| {
        for e in p.a.take_events() {
            match e {
                CmEvent::Established(x) => ended = Some(Ok(x)),
                CmEvent::Error { error, .. } => ended = Some(Err(error)),
                _ => {}
            }
        }
        ended.is_some()
    });
    match ended {
        Some(Ok(x)) => {
            assert_eq!(x.ord, 0);
            assert_ne!(x.rtr, Some(RtrType::Read), "a Read RTR sent with ORD 0");
        }
        Some(Err(e)) => assert!(
            matches!(
                e,
                ConnError::Negotiation {
                    error: NegotiationError::NoMatchingRtr,
                    ..
                }
            ),
            "{e:?}"
        ),
        None => unreachable!(),
    }
    assert_eq!(p.a.core.qp_info(qa).unwrap().reads_in_flight_max, 0);
}
