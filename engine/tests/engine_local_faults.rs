//! Local faults of posted requests, each typed at post time or ending the stream with the
//! Terminate the specs prescribe, never a silent drop or a bare reset:
//! * a request whose remote range wraps the 64-bit Tagged Offset space (DDP-7.1-14,
//!   RDMAP-7.2-13) is refused at post time with `EngineError::RemoteToWrap`, nothing
//!   queued; should one reach the sending position anyway (handed over without
//!   `validate_send`), it completes with a local protection error and the peer gets a
//!   local catastrophic Terminate (0/0/FF);
//! * a Read or an atomic whose local SGE's region is deregistered in flight, and a posted
//!   receive whose buffer's region is deregistered before its Send arrives (departure 8).
//! * a receive validated in RTS that reaches the core once its QP is in Terminate is
//!   flushed at once, not when TCP finishes closing; so is a send request on a QP that sent
//!   or received a Terminate, which never goes on the wire (RDMAP-5.4-6).

mod common;
mod engine_mw_common;

use std::sync::Arc;

use common::*;
use engine_mw_common::*;
use warpcore_engine::mem::{Access, Region};
use warpcore_engine::{
    validate_recv, validate_send, EngineError, MpaParams, QpId, QpShared, QpState, SendOp,
    WcOpcode, WcStatus,
};

/// A QP of depth 16 with RFC 7306 on, and its shared state.
fn qp(side: &mut Side) -> (QpId, Arc<QpShared>) {
    let (id, shared) = side.qp_shared(16);
    shared.set_rfc7306(true);
    (id, shared)
}

fn write(remote_to: u64) -> SendOp {
    SendOp::Write {
        remote_stag: 0x1234,
        remote_to,
    }
}

#[test]
fn remote_to_wrap_is_refused_at_post_time() {
    let mut p = Pair::default_pair();
    let (qa, sa_shared) = qp(&mut p.a);
    let (qb, _) = qp(&mut p.b);
    connect_qps(&mut p, qa, qb, PORT);
    let (ra, sa) = p.a.region(4096, all_access());
    // B's region sits at the top of the TO space: TOs [2^64 - 1 - 4096, 2^64 - 1).
    let base = u64::MAX - 4096;
    let rb = Arc::new(Region::allocate(4096, 4096).unwrap());
    let sb =
        p.b.mrs
            .register(Arc::clone(&rb), PD, all_access(), base)
            .unwrap();
    let top = u64::MAX - 64;
    let refused = [
        // TO + length = 2^64: wraps (proto's `to_range_wraps`, the sink's DDP-7.1-14).
        send_wr(1, write(top + 1), &[(sa, 0, 64)]),
        send_wr(2, write(u64::MAX), &[(sa, 0, 1)]),
        send_wr(
            3,
            SendOp::WriteWithImm {
                remote_stag: 0x1234,
                remote_to: top + 1,
                imm: 7,
                solicited: false,
            },
            &[(sa, 0, 64)],
        ),
        send_wr(4, read_op(0x1234, top), &[(sa, 0, 65)]),
        send_wr(
            5,
            SendOp::AtomicFetchAdd {
                remote_stag: 0x1234,
                remote_to: u64::MAX - 7,
                add: 1,
                add_mask: 0,
            },
            &[(sa, 0, 8)],
        ),
        send_wr(
            6,
            SendOp::AtomicCmpSwap {
                remote_stag: 0x1234,
                remote_to: u64::MAX - 3,
                compare: 0,
                compare_mask: u64::MAX,
                swap: 1,
                swap_mask: u64::MAX,
            },
            &[(sa, 0, 8)],
        ),
    ];
    for wr in refused {
        assert_eq!(
            p.a.core.post_send(qa, wr),
            Err(EngineError::RemoteToWrap),
            "wr {}",
            wr.wr_id
        );
    }
    // Nothing was queued or reserved: the whole queue depth is still free.
    for _ in 0..16 {
        assert!(sa_shared.reserve_sq());
    }
    for _ in 0..16 {
        sa_shared.release_sq();
    }
    // A range whose sum is 2^64 - 1 is the highest allowed, and zero-length ones are
    // allowed anywhere: both go out, and the Write lands in B's region.
    ra.write_at(0, &pattern(64, 3)).unwrap();
    let accepted = [
        send_wr(
            10,
            SendOp::Write {
                remote_stag: sb.0,
                remote_to: top,
            },
            &[(sa, 0, 64)],
        ),
        send_wr(
            11,
            SendOp::Write {
                remote_stag: sb.0,
                remote_to: u64::MAX,
            },
            &[],
        ),
    ];
    for wr in accepted {
        assert_eq!(p.a.core.post_send(qa, wr), Ok(()), "wr {}", wr.wr_id);
    }
    for id in [10, 11] {
        assert_eq!(
            wait_completion(&mut p, false, id, WcOpcode::Write).status,
            WcStatus::Success
        );
    }
    assert_eq!(read_region(&rb, 4096 - 64, 64), pattern(64, 3));
    assert_eq!(p.a.core.qp_state(qa).unwrap(), QpState::Rts);
    assert_eq!(p.b.core.qp_state(qb).unwrap(), QpState::Rts);
}

/// A wrapping Write that skipped `validate_send` (handed over as already validated, the
/// path of application threads) reaches the segmenter, which refuses it: the request
/// completes with a local protection error, the peer gets a local catastrophic Terminate
/// (0/0/FF, departure 8), both QPs end in the error state and later requests flush. B's
/// region is untouched.
#[test]
fn an_unvalidated_wrapping_request_fails_with_a_terminate() {
    let mut p = Pair::default_pair();
    let (qa, sa_shared) = qp(&mut p.a);
    let (qb, _) = qp(&mut p.b);
    connect_qps(&mut p, qa, qb, PORT);
    let (_ra, sa) = p.a.region(4096, all_access());
    let (rb, sb) = p.b.region(4096, all_access());
    assert!(sa_shared.reserve_sq() && sa_shared.reserve_sq());
    p.a.core
        .post_send_reserved(qa, send_wr(1, write(u64::MAX - 10), &[(sa, 0, 64)]));
    p.a.core.post_send_reserved(
        qa,
        send_wr(
            2,
            SendOp::Write {
                remote_stag: sb.0,
                remote_to: 0,
            },
            &[(sa, 0, 64)],
        ),
    );
    let c = wait_completion(&mut p, false, 1, WcOpcode::Write);
    assert_eq!(c.status, WcStatus::LocalProtection);
    let c = wait_completion(&mut p, false, 2, WcOpcode::Write);
    assert_eq!(c.status, WcStatus::FlushErr);
    // B received the Terminate A sent (A's LocalTerminate is the other half).
    assert_eq!(expect_terminate_from_a(&mut p, qa, qb), (0, 0, 0xFF));
    assert_eq!(p.a.core.qp_state(qa).unwrap(), QpState::Error);
    p.run_until(5000, |p| p.b.core.qp_state(qb).unwrap() == QpState::Error);
    assert_eq!(read_region(&rb, 0, 4096), vec![0u8; 4096]);
}

/// Departure 8 for an atomic: the region of its local SGE is deregistered while the
/// atomic is in flight, so the original value has nowhere to go when the Atomic Response
/// arrives: the atomic completes with a local protection error and the stream ends with a
/// local catastrophic Terminate (0/0/FF) to the peer, as for any local region loss.
#[test]
fn atomic_response_without_its_sink_fails_with_a_terminate() {
    let mut p = Pair::default_pair();
    let (qa, _) = qp(&mut p.a);
    let (qb, _) = qp(&mut p.b);
    connect_qps(&mut p, qa, qb, PORT);
    let (_rs, sink) = p.a.region(4096, all_access());
    let (rb, sb) = p.b.region(4096, all_access() | Access::REMOTE_ATOMIC);
    post_a(
        &mut p,
        qa,
        1,
        SendOp::AtomicFetchAdd {
            remote_stag: sb.0,
            remote_to: 0,
            add: 5,
            add_mask: 0,
        },
        &[(sink, 0, 8)],
    );
    p.a.mrs.deregister(sink).unwrap();
    let c = wait_completion(&mut p, false, 1, WcOpcode::AtomicFetchAdd);
    assert_eq!(c.status, WcStatus::LocalProtection);
    assert_eq!(expect_terminate_from_a(&mut p, qa, qb), (0, 0, 0xFF));
    assert_eq!(p.a.core.qp_state(qa).unwrap(), QpState::Error);
    // The peer executed the atomic before the response went out.
    assert_eq!(read_region(&rb, 0, 8), 5u64.to_ne_bytes());
}

/// Departure 8 for a Read: its local sink region is deregistered while the Read is in
/// flight. The Read Response names our own sink STag, so the failed lookup is our fault,
/// not the peer's: the Read completes with a local protection error and the peer gets a
/// local catastrophic Terminate (0/0/FF), not DDP's "invalid STag" (1/1/00).
#[test]
fn read_response_without_its_sink_fails_with_a_local_terminate() {
    let mut p = Pair::default_pair();
    let (qa, qb) = p.connect();
    let (_rs, sink) = p.a.region(4096, all_access());
    let (_rb, sb) = p.b.region(4096, all_access());
    post_a(&mut p, qa, 1, read_op(sb.0, 0), &[(sink, 0, 64)]);
    p.a.mrs.deregister(sink).unwrap();
    let c = wait_completion(&mut p, false, 1, WcOpcode::Read);
    assert_eq!(c.status, WcStatus::LocalProtection);
    assert_eq!(expect_terminate_from_a(&mut p, qa, qb), (0, 0, 0xFF));
    assert_eq!(p.a.core.qp_state(qa).unwrap(), QpState::Error);
}

/// Departure 8 for a receive: the region of a posted receive buffer is deregistered before
/// the Send that would fill it arrives. The buffer is our fault, not the peer's: the
/// receive completes with a local protection error (not only flushed, so the user learns
/// which receive failed and why) and the peer gets a local catastrophic Terminate
/// (0/0/FF), as for a Read's sink or an atomic's SGE.
#[test]
fn send_into_a_receive_without_its_region_fails_with_a_local_terminate() {
    let mut p = Pair::default_pair();
    let (qa, qb) = p.connect();
    let (_ra, rbuf) = p.a.region(4096, all_access());
    p.a.core
        .post_recv(qa, recv_wr(9, &[(rbuf, 0, 64)]))
        .unwrap();
    p.a.mrs.deregister(rbuf).unwrap();
    let (_rb, sb) = p.b.region(4096, all_access());
    p.b.core
        .post_send(qb, send_wr(1, SendOp::Send, &[(sb, 0, 64)]))
        .unwrap();
    let c = wait_completion(&mut p, false, 9, WcOpcode::Recv);
    assert_eq!(c.status, WcStatus::LocalProtection);
    assert_eq!(expect_terminate_from_a(&mut p, qa, qb), (0, 0, 0xFF));
    assert_eq!(p.a.core.qp_state(qa).unwrap(), QpState::Error);
}

/// A receive validated by an application thread while its QP was in RTS, that reaches the
/// engine core once the QP is in the Terminate state (a local protocol error: the peer
/// wrote to an STag that does not exist), completes with a flush error at once, and the QP
/// stays in Terminate until TCP has closed. It used to wait in the receive queue for TCP to
/// finish closing.
#[test]
fn a_receive_posted_in_the_terminate_state_is_flushed_at_once() {
    let mut p = Pair::default_pair();
    let qa = p.a.qp(16);
    let (qb, shared_b) = p.b.qp_shared(16);
    p.b.core.listen(PORT, MpaParams::default()).unwrap();
    p.a.core
        .connect(qa, (ip(2), PORT), &MpaParams::default(), b"")
        .unwrap();
    let req = p.wait_request();
    p.b.core.accept(req.request, qb, b"", None).unwrap();
    p.run_until_established();
    let (_rb, sb) = p.b.region(4096, all_access());
    let (_ra, sa) = p.a.region(4096, all_access());
    // Checked (its slot reserved) by an application thread while B is in RTS...
    let wr = recv_wr(7, &[(sb, 0, 64)]);
    validate_recv(&shared_b, &p.b.mrs, &wr).unwrap();
    // ... then B fails: A writes to an STag B never registered.
    post_a(&mut p, qa, 1, write_op(0x00de_ad01, 0), &[(sa, 0, 8)]);
    p.run_until(2000, |p| {
        p.b.core.qp_state(qb).ok() == Some(QpState::Terminate)
    });
    p.b.take_completions();
    while p.b.cq.pop().is_some() {}
    // ... and only now does B's core take the receive.
    p.b.core.post_recv_reserved(qb, wr);
    let c = p.b.cq.pop().expect("the receive is flushed when posted");
    assert_eq!(
        (c.wr_id, c.qp, c.opcode, c.status),
        (7, qb, WcOpcode::Recv, WcStatus::FlushErr)
    );
    assert_eq!(p.b.core.qp_state(qb).ok(), Some(QpState::Terminate));
    assert_eq!(shared_b.rq_used(), 0);
}

/// Send requests validated by an application thread while their QP was in RTS, that reach
/// the engine core once the QP has sent a Terminate (B, in Terminate) or received one (A,
/// in error), complete with a flush error at once, in the call that takes them, and never
/// go on the wire: after a Terminate no further RDMAP message is sent (RDMAP-5.4-6,
/// RFC 5040 §5.3 and §7), and the verbs flush what is posted to a QP in error. The peer
/// receives nothing but the Terminate: no FPDU after it, nothing placed.
#[test]
fn a_send_posted_after_a_terminate_is_flushed_at_once_and_never_sent() {
    let mut p = Pair::default_pair();
    let (qa, shared_a) = p.a.qp_shared(16);
    let (qb, shared_b) = p.b.qp_shared(16);
    p.b.core.listen(PORT, MpaParams::default()).unwrap();
    p.a.core
        .connect(qa, (ip(2), PORT), &MpaParams::default(), b"")
        .unwrap();
    let req = p.wait_request();
    p.b.core.accept(req.request, qb, b"", None).unwrap();
    p.run_until_established();
    let (ra, sa) = p.a.region(4096, all_access());
    let (rb, sb) = p.b.region(4096, all_access());
    // A receive on A that B's Send would complete, were it sent.
    p.a.core
        .post_recv(qa, recv_wr(50, &[(sa, 1024, 64)]))
        .unwrap();
    // Checked (their slots reserved) by application threads while both are in RTS: a Send
    // from B and a Write from A into B's region.
    let send_b = send_wr(60, SendOp::Send, &[(sb, 0, 32)]);
    validate_send(&shared_b, &p.b.mrs, &send_b).unwrap();
    let write_a = send_wr(70, write_op(sb.0, 512), &[(sa, 0, 32)]);
    validate_send(&shared_a, &p.a.mrs, &write_a).unwrap();
    ra.write_at(0, &[0xAB; 32]).unwrap();
    // Then B fails: A writes to an STag B never registered, B sends a Terminate.
    post_a(&mut p, qa, 1, write_op(0x00de_ad01, 0), &[(sa, 0, 8)]);
    p.run_until(2000, |p| {
        p.b.core.qp_state(qb).ok() == Some(QpState::Terminate)
    });
    p.b.take_completions();
    while p.b.cq.pop().is_some() {}
    let a_fpdus_rx = p.a.core.stats().fpdus_rx;
    // B's core takes its Send only now: flushed in the call, never framed.
    p.b.core.post_send_reserved(qb, send_b);
    let c = p.b.cq.pop().expect("the send is flushed when posted");
    assert_eq!(
        (c.wr_id, c.qp, c.opcode, c.status),
        (60, qb, WcOpcode::Send, WcStatus::FlushErr)
    );
    assert_eq!(shared_b.sq_used(), 0);
    // A receives B's Terminate and is in error; its Write reaches its core only now.
    let mut terminated = false;
    p.run_until(2000, |p| {
        terminated |= p.a.take_events().iter().any(|e| {
            matches!(e, warpcore_engine::CmEvent::Error { qp, error: warpcore_engine::ConnError::RemoteTerminate(_) } if *qp == qa)
        });
        terminated
    });
    assert_eq!(p.a.core.qp_state(qa).ok(), Some(QpState::Error));
    let a_completions = p.a.take_completions();
    while p.a.cq.pop().is_some() {}
    let b_fpdus_rx = p.b.core.stats().fpdus_rx;
    p.a.core.post_send_reserved(qa, write_a);
    let c = p.a.cq.pop().expect("the write is flushed when posted");
    assert_eq!(
        (c.wr_id, c.qp, c.opcode, c.status),
        (70, qa, WcOpcode::Write, WcStatus::FlushErr)
    );
    assert_eq!(shared_a.sq_used(), 0);
    p.run(500);
    // A's receive was flushed, not completed by B's Send; A got the Terminate alone.
    assert!(
        a_completions
            .iter()
            .chain(p.a.take_completions().iter())
            .all(|c| c.wr_id != 50 || c.status == WcStatus::FlushErr),
        "{a_completions:?}"
    );
    assert_eq!(
        p.a.core.stats().fpdus_rx,
        a_fpdus_rx + 1,
        "the Terminate alone"
    );
    assert_eq!(
        p.b.core.stats().fpdus_rx,
        b_fpdus_rx,
        "nothing from A after"
    );
    assert_eq!(read_region(&rb, 512, 32), vec![0; 32]);
}
