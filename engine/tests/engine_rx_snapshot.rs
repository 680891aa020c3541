//! The receive snapshot a core's loop takes before it applies the application's commands
//! (`EngineCore::begin_poll`, `EngineCore::hold_rx`; the runtime's `step_with` calls them
//! in that order). A receive the application posted before the peer was told to Send
//! must be there for that Send, whatever the schedule of the threads: the core applies
//! the commands queued before its snapshot, and its poll takes no frame that arrived
//! after the snapshot. Without the snapshot a core that had found its command ring empty
//! just before the application posted, and then took in its rx burst a Send sent after
//! that post, failed the stream with "no buffer" (DDP 1/2/02) and flushed the receive:
//! `verbs/tests/security_matrix.rs`'s "usable" step failed so about one run in ten on a
//! loaded two-CPU host. Here the schedule is set by hand: the frame arrives between the
//! snapshot and the poll, and the receive is posted after that poll.

mod common;

use common::*;
use warpcore_engine::mem::{Access, Stag};
use warpcore_engine::{CmEvent, QpId, SendOp, WcOpcode, WcStatus};

/// A connected pair with a 100-octet Send of A's on the wire towards B, sent after B took
/// its snapshot for its next loop (`before_b`: what B did before A sent).
fn send_after(before_b: impl FnOnce(&mut Pair)) -> (Pair, QpId, Stag) {
    let mut p = Pair::default_pair();
    let (qa, qb) = p.connect();
    let (ra, sa) = p.a.region(4096, all_access());
    let (_rb, sb) = p.b.region(4096, Access::LOCAL_WRITE);
    ra.write_at(0, &pattern(100, 9)).unwrap();
    before_b(&mut p);
    p.a.core
        .post_send(qa, send_wr(1, SendOp::Send, &[(sa, 0, 100)]))
        .unwrap();
    // A's loop frames and sends it.
    let now = p.now;
    p.a.core.poll(now);
    assert!(
        p.b.core.stack().device().next_delivery().is_some(),
        "A's Send is on the wire"
    );
    (p, qb, sb)
}

/// B's loop after the Send arrived takes it only in a loop whose snapshot followed it:
/// here B's next poll (snapshot taken before the Send) leaves it on the wire, the receive
/// is posted after that poll (the command a runtime applies at the start of its next
/// loop), and the loop after places the Send into it. Without the snapshot B's first poll
/// took the Send with no receive posted and failed the stream.
#[test]
fn a_poll_takes_no_frame_that_arrived_after_its_snapshot() {
    let (mut p, qb, sb) = send_after(|p| p.b.core.begin_poll());
    let now = p.now;
    p.b.core.poll(now);
    left_then_placed(p, qb, sb, "B took the Send before its receive was posted");
}

/// After B's poll that must not have taken the Send: no error, the Send still on the wire;
/// then the receive posted, and the next loops place the Send into it.
fn left_then_placed(mut p: Pair, qb: QpId, sb: Stag, taken: &str) {
    while let Some(e) = p.b.core.next_event() {
        assert!(!matches!(e, CmEvent::Error { .. }), "{taken}: {e:?}");
    }
    assert!(
        p.b.core.stack().device().next_delivery().is_some(),
        "the Send waits on the wire"
    );
    p.b.core
        .post_recv(qb, recv_wr(950, &[(sb, 0, 256)]))
        .unwrap();
    p.run_until(200, |p| p.b.completions.len() == 1);
    let cb = p.b.take_completions();
    assert_eq!(
        (cb[0].wr_id, cb[0].opcode, cb[0].status, cb[0].byte_len),
        (950, WcOpcode::Recv, WcStatus::Success, 100)
    );
    assert!(p.b.take_events().is_empty(), "no error on B");
}

/// `hold_rx`: a loop that could not apply every command queued before its snapshot (the
/// runtime's per-loop budget ran out) takes no frame at all; they wait for a loop that
/// applied the rest. The Send is already on the wire when B's held loop runs, its receive
/// posted only after it.
#[test]
fn a_held_poll_takes_no_frame() {
    let (mut p, qb, sb) = send_after(|_| {});
    p.b.core.hold_rx();
    let now = p.now;
    p.b.core.poll(now);
    left_then_placed(p, qb, sb, "B's held loop took the Send");
}

/// The snapshot holds back only what arrived after it: a Send already on the wire when B
/// takes its snapshot is placed in that loop (the receive posted before it).
#[test]
fn a_poll_takes_what_arrived_before_its_snapshot() {
    let (mut p, qb, sb) = send_after(|_| {});
    p.b.core
        .post_recv(qb, recv_wr(950, &[(sb, 0, 256)]))
        .unwrap();
    p.b.core.begin_poll();
    let now = p.now;
    p.b.core.poll(now);
    assert!(
        p.b.core.stack().device().next_delivery().is_none(),
        "the loop took the Send"
    );
    let mut done = Vec::new();
    while let Some(c) = p.b.cq.pop() {
        done.push((c.wr_id, c.opcode, c.status, c.byte_len));
    }
    assert_eq!(done, [(950, WcOpcode::Recv, WcStatus::Success, 100)]);
}
