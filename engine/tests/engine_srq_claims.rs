//! Shared receive queues and the untagged receive path: the limit event of a
//! claim that is given back, and a message that fails midway through its claimed buffer.

mod common;
mod engine_mw_common;

use std::sync::Arc;

use common::*;
use engine_mw_common::*;
use warpcore_engine::mem::Access;
use warpcore_engine::{CmEvent, QpId, QpState, SendOp, SharedRq, WcOpcode, WcStatus};

/// B's QPs all on one SRQ, each connected to one of A's.
fn srq_rig(n: usize, depth: u32) -> (Pair, Arc<SharedRq>, Vec<(QpId, QpId)>) {
    let mut p = Pair::default_pair();
    let srq = Arc::new(SharedRq::new(PD, depth, 2).unwrap());
    let mut out = Vec::new();
    for i in 0..n {
        let qa = p.a.qp(64);
        let (qb, shared) = qp_b(&mut p);
        shared.attach_srq(Arc::clone(&srq)).unwrap();
        connect_qps(&mut p, qa, qb, PORT + 60 + i as u16);
        out.push((qa, qb));
    }
    (p, srq, out)
}

fn limit_events(events: &[CmEvent], srq: &SharedRq) -> usize {
    events
        .iter()
        .filter(|e| matches!(e, CmEvent::SrqLimitReached { srq: id } if *id == srq.id()))
        .count()
}

/// `ibv_modify_srq(IBV_SRQ_LIMIT)`: the event fires once the number of WRs in the SRQ drops
/// below the limit. A buffer claimed for a message that fails at once is given back ahead
/// of the queue (departure 23): the number of buffers waiting never dropped, so neither the
/// event nor the disarming may happen then; the claim that really leaves fewer than the
/// limit (the other QP's valid Send) raises it, once.
#[test]
fn a_claim_given_back_raises_no_limit_event_and_keeps_the_limit_armed() {
    let (mut p, srq, q) = srq_rig(2, 4);
    let (_rb, sb) = p.b.region(4096, Access::LOCAL_WRITE);
    let (ra, sa) = p.a.region(4096, all_access());
    ra.write_at(0, &pattern(128, 3)).unwrap();
    srq.post(&p.b.mrs, &recv_wr(1, &[(sb, 0, 64)])).unwrap();
    srq.post(&p.b.mrs, &recv_wr(2, &[(sb, 1024, 64)])).unwrap();
    // A claim leaves one buffer: fewer than two.
    srq.arm_limit(2).unwrap();
    // 128 octets into a 64-octet buffer: refused, the buffer given back.
    p.a.core
        .post_send(q[0].0, send_wr(1, SendOp::Send, &[(sa, 0, 128)]))
        .unwrap();
    let (layer, etype, code) = expect_terminate(&mut p, q[0].0, q[0].1);
    assert_eq!((layer, etype, code), (1, 2, 5), "DDP message too long");
    assert_eq!(srq.len(), 2, "the claimed buffer is back");
    assert_eq!(
        limit_events(&p.b.events, &srq),
        0,
        "no buffer left the queue: {:?}",
        p.b.events
    );
    assert_eq!(srq.armed_limit(), 2, "still armed");
    assert!(!srq.limit_reached());
    // The other QP's valid Send takes a buffer and leaves one: now the event, once.
    p.a.core
        .post_send(q[1].0, send_wr(2, SendOp::Send, &[(sa, 0, 64)]))
        .unwrap();
    let c = wait_completion(&mut p, true, 1, WcOpcode::Recv);
    assert_eq!((c.qp, c.status), (q[1].1, WcStatus::Success));
    assert_eq!(srq.len(), 1);
    assert_eq!(limit_events(&p.b.events, &srq), 1, "{:?}", p.b.events);
    assert_eq!(srq.armed_limit(), 0);
    assert!(srq.limit_reached());
}

/// A message of several segments whose buffer is too short for its second segment: the
/// buffer its QP claimed holds part of it, so it is not given back; it completes once, in
/// error (flushed), on that QP's receive CQ naming that QP; the queue's other buffers stay
/// for the other QP, which goes on receiving. Checked sound (no change needed).
#[test]
fn a_message_failing_midway_completes_its_claimed_buffer_once_in_error() {
    let (mut p, srq, q) = srq_rig(2, 4);
    let (_rb, sb) = p.b.region(16384, Access::LOCAL_WRITE);
    let (ra, sa) = p.a.region(16384, all_access());
    ra.write_at(0, &pattern(8000, 4)).unwrap();
    // The first segment (one MULPDU, well under 3000 octets) fits, the second does not.
    srq.post(&p.b.mrs, &recv_wr(1, &[(sb, 0, 3000)])).unwrap();
    srq.post(&p.b.mrs, &recv_wr(2, &[(sb, 8192, 8000)]))
        .unwrap();
    p.a.core
        .post_send(q[0].0, send_wr(1, SendOp::Send, &[(sa, 0, 8000)]))
        .unwrap();
    let (layer, etype, _) = expect_terminate(&mut p, q[0].0, q[0].1);
    assert_eq!((layer, etype), (1, 2), "DDP untagged");
    p.run(200);
    assert_eq!(p.b.core.qp_state(q[0].1).unwrap(), QpState::Error);
    let mine: Vec<_> =
        p.b.completions
            .iter()
            .filter(|c| c.qp == q[0].1)
            .copied()
            .collect();
    assert_eq!(mine.len(), 1, "{mine:?}");
    assert_eq!(
        (mine[0].wr_id, mine[0].status, mine[0].opcode),
        (1, WcStatus::FlushErr, WcOpcode::Recv)
    );
    assert_eq!(srq.len(), 1, "only the claimed buffer left the queue");
    p.b.take_completions();
    p.a.core
        .post_send(q[1].0, send_wr(2, SendOp::Send, &[(sa, 0, 8000)]))
        .unwrap();
    let c = wait_completion(&mut p, true, 2, WcOpcode::Recv);
    assert_eq!(
        (c.qp, c.status, c.byte_len),
        (q[1].1, WcStatus::Success, 8000)
    );
    assert!(srq.is_empty());
    // Destroying the failed QP completes nothing more (its buffer was flushed once).
    p.b.core.destroy_qp(q[0].1).unwrap();
    p.run(50);
    assert!(
        !p.b.completions.iter().any(|c| c.qp == q[0].1),
        "{:?}",
        p.b.completions
    );
}
