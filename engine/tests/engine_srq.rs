//! Shared receive queues: several QPs of one engine core drain one queue of receive
//! buffers; completions name the receiving QP; an empty queue earns the "no buffer"
//! Terminate for the QP whose message found it empty, and only that QP.

mod common;
mod engine_mw_common;

use std::collections::HashMap;
use std::sync::Arc;

use common::*;
use engine_mw_common::*;
use warpcore_engine::mem::{Access, MemError, PdId};
use warpcore_engine::{
    CmEvent, DepthError, EngineError, QpId, QpState, SendOp, SharedRq, WcOpcode, WcStatus,
    MAX_QUEUE_DEPTH,
};

/// B's QPs all on one SRQ, each connected to one of A's.
fn srq_rig(n: usize, depth: u32) -> (Pair, Arc<SharedRq>, Vec<(QpId, QpId)>) {
    let mut p = Pair::default_pair();
    let srq = Arc::new(SharedRq::new(PD, depth, 2).unwrap());
    let mut out = Vec::new();
    for i in 0..n {
        let qa = p.a.qp(64);
        let (qb, shared) = qp_b(&mut p);
        shared.attach_srq(Arc::clone(&srq)).unwrap();
        connect_qps(&mut p, qa, qb, PORT + 20 + i as u16);
        out.push((qa, qb));
    }
    (p, srq, out)
}

/// Messages of several QPs, some of many segments, sent interleaved: each lands whole in
/// the buffer its QP claimed, completes on that QP (`Completion::qp`) in the QP's order,
/// and the queue's limit event fires when it runs low.
/// DDP-8.3.2-7, RDMAP-8.1.2-8: per-QP attribution and the limit event detect over-use.
#[test]
fn several_qps_drain_one_queue() {
    let (mut p, srq, q) = srq_rig(3, 8);
    let (rb, sb) = p.b.region(8 * 8192, Access::LOCAL_WRITE);
    for i in 0..8u64 {
        // Two SGEs per buffer: 4096 + 4096 octets.
        let wr = recv_wr(i, &[(sb, i * 8192, 4096), (sb, i * 8192 + 4096, 4096)]);
        srq.post(&p.b.mrs, &wr).unwrap();
    }
    assert_eq!(srq.len(), 8);
    srq.arm_limit(3).unwrap();
    let (ra, sa) = p.a.region(3 * 2 * 8192, all_access());
    // QP k sends two messages: 5000 + 1000k octets (several segments) and 17 octets.
    let mut sent: HashMap<(QpId, u32), Vec<u8>> = HashMap::new();
    for round in 0..2u64 {
        for (k, &(qa, qb)) in q.iter().enumerate() {
            let len = if round == 0 { 5000 + 1000 * k } else { 17 };
            let off = (k as u64 * 2 + round) * 8192;
            let data = pattern(len, (k * 2) as u8 + round as u8);
            ra.write_at(off as usize, &data).unwrap();
            sent.insert((qb, round as u32), data);
            p.a.core
                .post_send(qa, send_wr(round, SendOp::Send, &[(sa, off, len as u32)]))
                .unwrap();
        }
    }
    p.run_until(20_000, |p| p.b.completions.len() == 6);
    let mut per_qp: HashMap<QpId, u32> = HashMap::new();
    for c in p.b.take_completions() {
        assert_eq!((c.opcode, c.status), (WcOpcode::Recv, WcStatus::Success));
        let round = per_qp.entry(c.qp).or_default();
        let want = &sent[&(c.qp, *round)];
        *round += 1;
        assert_eq!(c.byte_len as usize, want.len());
        let mut got = vec![0u8; want.len()];
        rb.read_at(c.wr_id as usize * 8192, &mut got).unwrap();
        assert_eq!(&got, want, "buffer {} of {:?}", c.wr_id, c.qp);
    }
    assert_eq!(per_qp.len(), 3);
    assert_eq!(srq.len(), 2);
    assert!(srq.limit_reached());
    // The verbs' IBV_EVENT_SRQ_LIMIT_REACHED: reported once, naming the queue, by the core
    // whose claim left two buffers (fewer than three); the limit is disarmed.
    let limit_events = |events: &[CmEvent]| {
        events
            .iter()
            .filter(|e| matches!(e, CmEvent::SrqLimitReached { srq: id } if *id == srq.id()))
            .count()
    };
    assert_eq!(limit_events(&p.b.events), 1, "{:?}", p.b.events);
    assert_eq!(srq.armed_limit(), 0);
    for &(_, qb) in &q {
        assert_eq!(p.b.core.qp_state(qb).unwrap(), QpState::Rts);
    }
    // Armed again at 2 (two waiting): the next claim, which leaves one, reports it again.
    srq.arm_limit(2).unwrap();
    assert_eq!(srq.armed_limit(), 2);
    p.b.take_events();
    let data = pattern(40, 9);
    ra.write_at(0, &data).unwrap();
    p.a.core
        .post_send(q[0].0, send_wr(9, SendOp::Send, &[(sa, 0, 40)]))
        .unwrap();
    p.run_until(20_000, |p| p.b.completions.len() == 1);
    assert_eq!(srq.len(), 1);
    assert_eq!(limit_events(&p.b.events), 1, "{:?}", p.b.events);
    assert_eq!(srq.armed_limit(), 0);
}

/// DDP-7.1-6 (untagged "no buffer", 1/2/02): a message that finds the shared queue empty
/// terminates its own stream only; the other QPs carry on with later buffers.
#[test]
fn empty_queue_terminates_only_the_receiving_qp() {
    let (mut p, srq, q) = srq_rig(2, 4);
    let (rb, sb) = p.b.region(4096, Access::LOCAL_WRITE);
    let (ra, sa) = p.a.region(4096, all_access());
    ra.write_at(0, &pattern(64, 7)).unwrap();
    srq.post(&p.b.mrs, &recv_wr(1, &[(sb, 0, 64)])).unwrap();
    p.a.core
        .post_send(q[0].0, send_wr(1, SendOp::Send, &[(sa, 0, 64)]))
        .unwrap();
    let c = wait_completion(&mut p, true, 1, WcOpcode::Recv);
    assert_eq!((c.qp, c.byte_len), (q[0].1, 64));
    assert!(srq.is_empty());
    p.a.core
        .post_send(q[1].0, send_wr(2, SendOp::Send, &[(sa, 0, 64)]))
        .unwrap();
    assert_eq!(expect_terminate(&mut p, q[1].0, q[1].1), (1, 2, 2));
    assert_eq!(p.b.core.qp_state(q[1].1).unwrap(), QpState::Error);
    assert_eq!(p.b.core.qp_state(q[0].1).unwrap(), QpState::Rts);
    // Immediate Data consumes a shared buffer too; the surviving QP gets it.
    srq.post(&p.b.mrs, &recv_wr(2, &[(sb, 1024, 64)])).unwrap();
    p.a.core
        .post_send(
            q[0].0,
            send_wr(
                3,
                SendOp::Immediate {
                    imm: 0xABCD,
                    solicited: true,
                },
                &[],
            ),
        )
        .unwrap();
    let c = wait_completion(&mut p, true, 2, WcOpcode::RecvImm);
    assert_eq!((c.qp, c.imm, c.solicited), (q[0].1, Some(0xABCD), true));
    let mut untouched = [0u8; 64];
    rb.read_at(1024, &mut untouched).unwrap();
    assert_eq!(untouched, [0u8; 64]);
}

/// A depth of 0 or above `MAX_QUEUE_DEPTH` is refused with a `DepthError` naming it: 0
/// used to make a queue of one buffer (`depth()` said 1), and `u32::MAX` allocated two
/// rings of 2^32 receive requests (the process aborted). The largest depth still works.
#[test]
fn a_shared_receive_queue_depth_out_of_range_is_refused_naming_it() {
    for (depth, reason) in [
        (0, "must be at least 1"),
        (MAX_QUEUE_DEPTH as u32 + 1, "exceeds MAX_QUEUE_DEPTH (2^22)"),
        (u32::MAX, "exceeds MAX_QUEUE_DEPTH (2^22)"),
    ] {
        let want = DepthError {
            queue: "shared receive queue",
            depth: depth as usize,
            reason,
        };
        assert_eq!(SharedRq::new(PD, depth, 1).err(), Some(want));
        assert_eq!(
            want.to_string(),
            format!("shared receive queue depth {depth} {reason}")
        );
    }
    let one = SharedRq::new(PD, 1, 1).unwrap();
    assert_eq!(one.depth(), 1);
}

/// Local misuse: typed errors, nothing changes.
#[test]
fn srq_limits_and_misuse() {
    let mut p = Pair::default_pair();
    let (_r, s) = p.b.region(4096, Access::LOCAL_WRITE);
    let (_r2, ro) = p.b.region(4096, Access::REMOTE_READ);
    let srq = Arc::new(SharedRq::new(PD, 2, 1).unwrap());
    assert_eq!(
        srq.post(&p.b.mrs, &recv_wr(1, &[(s, 0, 8), (s, 8, 8)])),
        Err(EngineError::TooManySges)
    );
    assert_eq!(
        srq.post(&p.b.mrs, &recv_wr(1, &[(ro, 0, 8)])),
        Err(EngineError::SgeAccess)
    );
    assert_eq!(
        srq.post(&p.b.mrs, &recv_wr(1, &[(s, 4090, 8)])),
        Err(EngineError::SgeOutOfBounds)
    );
    srq.post(&p.b.mrs, &recv_wr(1, &[(s, 0, 8)])).unwrap();
    srq.post(&p.b.mrs, &recv_wr(2, &[(s, 8, 8)])).unwrap();
    assert_eq!(
        srq.post(&p.b.mrs, &recv_wr(3, &[(s, 16, 8)])),
        Err(EngineError::QueueFull)
    );
    assert_eq!(
        srq.arm_limit(3),
        Err(EngineError::LimitExceeded("srq limit"))
    );
    // Attaching: same PD, idle, no receive posted, once.
    let (qb, shared) = qp_b(&mut p);
    let other = Arc::new(SharedRq::new(PdId(5), 2, 1).unwrap());
    assert_eq!(
        shared.attach_srq(other),
        Err(EngineError::Memory(MemError::WrongPd))
    );
    shared.attach_srq(Arc::clone(&srq)).unwrap();
    assert_eq!(
        shared.attach_srq(Arc::clone(&srq)),
        Err(EngineError::UsesSrq)
    );
    let (qb2, shared2) = qp_b(&mut p);
    p.b.core.post_recv(qb2, recv_wr(9, &[(s, 0, 8)])).unwrap();
    assert_eq!(
        shared2.attach_srq(Arc::clone(&srq)),
        Err(EngineError::UsesSrq)
    );
    // A QP on the SRQ takes no receive of its own.
    let qa = p.a.qp(8);
    connect_qps(&mut p, qa, qb, PORT + 40);
    assert_eq!(
        p.b.core.post_recv(qb, recv_wr(4, &[(s, 0, 8)])),
        Err(EngineError::UsesSrq)
    );
    assert_eq!(
        shared.attach_srq(srq),
        Err(EngineError::InvalidState(QpState::Rts))
    );
}

/// One shared receive queue drained by QPs of two engine cores (B1, B2, sharing the region
/// table and a completion queue), each connected over its own link: nothing in the queue is
/// per core, so this is allowed, and each completion names its QP.
#[test]
fn qps_of_two_cores_drain_one_queue() {
    use std::time::Instant as StdInstant;
    use warpcore_engine::mem::{MrTable, Region};
    use warpcore_engine::tcp::link::{self, LinkConfig, LinkEnd};
    use warpcore_engine::tcp::smoltcp::time::{Duration, Instant};
    use warpcore_engine::tcp::smoltcp::wire::Ipv4Cidr;
    use warpcore_engine::tcp::StackConfig;
    use warpcore_engine::{CmEvent, CompletionQueue, EngineConfig, EngineCore, MpaParams};

    let cfg = EngineConfig::default();
    let base = StdInstant::now();
    let core = |n: u8, idx: u16, end: LinkEnd, mrs: &Arc<MrTable>| {
        let sc = StackConfig {
            mac: [2, 0, 0, 0, 0, n],
            ip: Ipv4Cidr::new(ip(n), 24),
            gateway: None,
            routes: Vec::new(),
            random_seed: u64::from(n) * 31,
            max_connections: 8,
            out_of_order_budget_bytes: warpcore_engine::tcp::OUT_OF_ORDER_BUDGET_DEFAULT,
        };
        EngineCore::new(
            idx,
            end,
            &sc,
            cfg.clone(),
            Arc::clone(mrs),
            base,
            Instant::ZERO,
        )
        .unwrap()
    };
    let mrs_a = Arc::new(MrTable::new(64));
    let mrs_b = Arc::new(MrTable::new(64));
    let (l1a, l1b) = link::pair(&LinkConfig::default());
    let (l2a, l2b) = link::pair(&LinkConfig::default());
    // A1 (10.0.0.1) - B1 (10.0.0.2) on one link, A2 (10.0.0.3) - B2 (10.0.0.4) on another.
    let mut cores = [
        core(1, 0, l1a, &mrs_a),
        core(2, 0, l1b, &mrs_b),
        core(3, 1, l2a, &mrs_a),
        core(4, 1, l2b, &mrs_b),
    ];
    let cq_a = Arc::new(CompletionQueue::new(64).unwrap());
    let cq_b = Arc::new(CompletionQueue::new(64).unwrap());
    let srq = Arc::new(SharedRq::new(PD, 8, 1).unwrap());
    let attr = |cq: &Arc<CompletionQueue>| qp_attr(cq, 16, 1);
    let mut now = Instant::ZERO;
    let mut step = |cores: &mut [EngineCore<LinkEnd>; 4]| {
        for c in cores.iter_mut() {
            c.poll(now);
        }
        now += Duration::from_micros(50);
    };
    let mut qps = Vec::new();
    for (a, b) in [(0usize, 1usize), (2, 3)] {
        let (qa, _) = cores[a].create_qp(attr(&cq_a)).unwrap();
        let (qb, shared) = cores[b].create_qp(attr(&cq_b)).unwrap();
        shared.attach_srq(Arc::clone(&srq)).unwrap();
        cores[b].listen(PORT, MpaParams::default()).unwrap();
        let peer = ip(b as u8 + 1);
        cores[a]
            .connect(qa, (peer, PORT), &MpaParams::default(), b"")
            .unwrap();
        let mut established = 0;
        for _ in 0..20_000 {
            step(&mut cores);
            while let Some(e) = cores[b].next_event() {
                if let CmEvent::ConnectRequest(r) = e {
                    cores[b].accept(r.request, qb, b"", None).unwrap();
                }
            }
            while let Some(e) = cores[a].next_event() {
                if matches!(e, CmEvent::Established(_)) {
                    established += 1;
                }
            }
            if established == 1 && cores[b].qp_state(qb).unwrap() == QpState::Rts {
                break;
            }
        }
        assert_eq!(cores[b].qp_state(qb).unwrap(), QpState::Rts);
        qps.push((a, qa, qb));
    }
    let rb = Arc::new(Region::allocate(8 * 256, 64).unwrap());
    let sb = mrs_b
        .register(Arc::clone(&rb), PD, Access::LOCAL_WRITE, 0)
        .unwrap();
    for i in 0..4u64 {
        srq.post(&mrs_b, &recv_wr(i, &[(sb, i * 256, 256)]))
            .unwrap();
    }
    let ra = Arc::new(Region::allocate(256, 64).unwrap());
    let sa = mrs_a
        .register(Arc::clone(&ra), PD, all_access(), 0)
        .unwrap();
    ra.write_at(0, &pattern(256, 5)).unwrap();
    // Two Sends from each side: 40 octets over B1's QP, 70 over B2's.
    for round in 0..2u64 {
        for (k, &(a, qa, _)) in qps.iter().enumerate() {
            let len = 40 + 30 * k as u32;
            cores[a]
                .post_send(qa, send_wr(round, SendOp::Send, &[(sa, 0, len)]))
                .unwrap();
        }
    }
    let mut got = Vec::new();
    for _ in 0..20_000 {
        step(&mut cores);
        while let Some(c) = cq_b.pop() {
            got.push(c);
        }
        if got.len() == 4 {
            break;
        }
    }
    assert_eq!(got.len(), 4, "{got:?}");
    let mut buffers = std::collections::HashSet::new();
    for c in &got {
        assert_eq!((c.status, c.opcode), (WcStatus::Success, WcOpcode::Recv));
        let k = qps
            .iter()
            .position(|q| q.2 == c.qp)
            .expect("one of the QPs");
        assert_eq!(c.qp.core, k as u16, "completion names the QP of its core");
        let len = 40 + 30 * k;
        assert_eq!(c.byte_len as usize, len);
        let mut v = vec![0u8; len];
        rb.read_at(c.wr_id as usize * 256, &mut v).unwrap();
        assert_eq!(v, pattern(len, 5));
        assert!(buffers.insert(c.wr_id), "a buffer used twice");
    }
    assert!(srq.is_empty());
}

/// Departure 23: a Send longer than the shared buffer its QP claimed for it fails that QP
/// (DDP's untagged bounds, layer 1) and gives the buffer back, ahead of the buffers posted
/// after it: the next message, of another QP, lands in it. The buffer used to be consumed
/// by the invalid message, flushed with the failing QP.
#[test]
fn an_invalid_message_gives_its_claimed_buffer_back() {
    let (mut p, srq, q) = srq_rig(2, 4);
    let (rb, sb) = p.b.region(4096, Access::LOCAL_WRITE);
    let (ra, sa) = p.a.region(4096, all_access());
    ra.write_at(0, &pattern(128, 9)).unwrap();
    srq.post(&p.b.mrs, &recv_wr(1, &[(sb, 0, 64)])).unwrap();
    srq.post(&p.b.mrs, &recv_wr(2, &[(sb, 1024, 64)])).unwrap();
    p.a.core
        .post_send(q[0].0, send_wr(1, SendOp::Send, &[(sa, 0, 128)]))
        .unwrap();
    let (layer, _, _) = expect_terminate(&mut p, q[0].0, q[0].1);
    assert_eq!(layer, 1, "DDP");
    assert_eq!(p.b.core.qp_state(q[0].1).unwrap(), QpState::Error);
    assert_eq!(srq.len(), 2, "the claimed buffer is back");
    assert!(
        !p.b.completions.iter().any(|c| c.qp == q[0].1),
        "{:?}",
        p.b.completions
    );
    p.a.core
        .post_send(q[1].0, send_wr(2, SendOp::Send, &[(sa, 0, 64)]))
        .unwrap();
    let c = wait_completion(&mut p, true, 1, WcOpcode::Recv);
    assert_eq!(
        (c.qp, c.status, c.byte_len),
        (q[1].1, WcStatus::Success, 64)
    );
    assert_eq!(read_region(&rb, 0, 64), pattern(128, 9)[..64]);
    assert_eq!(srq.len(), 1);
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
