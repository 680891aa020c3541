//! A completion queue that overruns does not lose completions silently (issue 15, item 4):
//! the QP feeding it goes to the error state, the local user is told
//! (`ConnError::CqOverrun`), and the peer gets a local catastrophic Terminate.
//!
//! A completion channel hands each event to exactly one of the threads waiting on it, and
//! its descriptor is readable exactly while an event is pending.

mod common;

use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant as StdInstant};

use common::*;
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use warpcore_engine::{
    CmEvent, Completion, CompletionChannel, CompletionQueue, ConnError, DepthError, MpaParams,
    QpId, QpState, SendOp, WcOpcode, WcStatus, MAX_QUEUE_DEPTH,
};

/// Connects a new QP of A to a new QP of B (B listening on `PORT`) whose send and receive
/// completions go to a queue of two entries; returns both QPs and the queue.
fn connect_to_small_cq(p: &mut Pair) -> (QpId, QpId, Arc<CompletionQueue>) {
    let qa = p.a.qp(64);
    let small = Arc::new(CompletionQueue::new(2).unwrap());
    let (qb, _) = p.b.core.create_qp(qp_attr(&small, 64, 4)).expect("qp");
    p.a.core
        .connect(qa, (ip(2), PORT), &MpaParams::default(), b"")
        .expect("connect");
    let req = p.wait_request();
    p.b.core.accept(req.request, qb, b"", None).expect("accept");
    p.run_until_established();
    (qa, qb, small)
}

/// A QP still in its MPA startup (the initiator, waiting for the Reply) whose completion
/// queue overran is failed for good: its user gets `Error { CqOverrun }` and its receives
/// flushed, the startup is abandoned and the TCP connection closed, and a Reply that comes
/// later neither brings it back to RTS nor reports `Established` (nothing is delivered
/// after the error, DDP-7.1-17). It used to: the Reply set the failed QP to RTS.
#[test]
fn a_connecting_queue_pair_whose_queue_overran_stays_failed() {
    let mut p = Pair::default_pair();
    p.b.core.listen(PORT, MpaParams::default()).expect("listen");
    let small = Arc::new(CompletionQueue::new(2).unwrap());
    let attr = || qp_attr(&small, 8, 1);
    let (qa, _) = p.a.core.create_qp(attr()).expect("qp");
    let (idle, _) = p.a.core.create_qp(attr()).expect("qp");
    let qb = p.b.qp(8);
    let (_ra, sa) = p.a.region(4096, all_access());
    p.a.core.post_recv(qa, recv_wr(1, &[(sa, 0, 64)])).unwrap();
    p.a.core
        .connect(qa, (ip(2), PORT), &MpaParams::default(), b"")
        .expect("connect");
    let req = p.wait_request();
    // A's startup waits for B's answer; meanwhile three flushed receives of the idle QP
    // overrun the queue of two that both QPs complete into.
    for i in 0..3 {
        p.a.core
            .post_recv(idle, recv_wr(10 + i, &[(sa, 64, 64)]))
            .unwrap();
    }
    p.a.core.abort(idle).unwrap();
    let mut a_events = Vec::new();
    p.run_until(2000, |p| {
        a_events.extend(p.a.take_events());
        a_events
            .iter()
            .any(|e| matches!(e, CmEvent::Error { qp, error: ConnError::CqOverrun } if *qp == qa))
    });
    assert!(small.overrun());
    assert_eq!(p.a.core.qp_state(qa).unwrap(), QpState::Error);
    // B's user accepts now; its Reply reaches a QP that has failed.
    p.b.core.accept(req.request, qb, b"", None).expect("accept");
    p.run(500);
    a_events.extend(p.a.take_events());
    assert!(
        !a_events
            .iter()
            .any(|e| matches!(e, CmEvent::Established(_))),
        "{a_events:?}"
    );
    assert_eq!(p.a.core.qp_state(qa).unwrap(), QpState::Error);
    // The connection is gone on both sides: B's fenced QP learned that A closed.
    assert_eq!(
        p.a.core.stats().tcp_connections,
        0,
        "{:?}",
        p.a.core.stats()
    );
    assert_eq!(p.b.core.qp_state(qb).unwrap(), QpState::Error);
}

/// Eight receives posted on B's `qb` (64 octets each from the start of `sb`) and eight
/// 16-octet Sends posted on A's `qa` from the start of `sa` (wr_ids 100..108).
fn eight_sends(
    p: &mut Pair,
    (qa, sa): (QpId, warpcore_engine::mem::Stag),
    (qb, sb): (QpId, warpcore_engine::mem::Stag),
) {
    for i in 0..8u64 {
        p.b.core
            .post_recv(qb, recv_wr(i, &[(sb, i * 64, 64)]))
            .expect("post_recv");
    }
    for i in 0..8u64 {
        p.a.core
            .post_send(qa, send_wr(100 + i, SendOp::Send, &[(sa, i * 64, 16)]))
            .expect("post_send");
    }
}

#[test]
fn a_completion_queue_overrun_fails_its_queue_pair_loudly() {
    let mut p = Pair::default_pair();
    p.b.core.listen(PORT, MpaParams::default()).expect("listen");
    // B's QP completes into a queue of two entries that nobody polls.
    let (qa, qb, small) = connect_to_small_cq(&mut p);
    let (_ra, sa) = p.a.region(4096, all_access());
    let (_rb, sb) = p.b.region(4096, all_access());
    eight_sends(&mut p, (qa, sa), (qb, sb));
    let mut a_err = None;
    let mut b_err = None;
    let mut b_events = Vec::new();
    p.run_until(5000, |p| {
        for e in p.a.take_events() {
            if let CmEvent::Error { error, .. } = e {
                a_err = Some(error);
            }
        }
        for e in p.b.take_events() {
            if let CmEvent::Error { error, .. } = &e {
                b_err = Some(error.clone());
            }
            b_events.push(e);
        }
        a_err.is_some() && b_err.is_some()
    });
    // The queue's own asynchronous error (IBV_EVENT_CQ_ERR), once, before the QP's error.
    let cq_errors: Vec<usize> = b_events
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e, CmEvent::CqError { cq } if *cq == small.id()))
        .map(|(i, _)| i)
        .collect();
    let qp_error = b_events
        .iter()
        .position(|e| matches!(e, CmEvent::Error { .. }))
        .expect("the QP's error");
    assert_eq!(cq_errors.len(), 1, "{b_events:?}");
    assert!(cq_errors[0] < qp_error, "{b_events:?}");
    assert!(small.overrun());
    assert_eq!(small.len(), 2, "the queue kept what fitted");
    assert_eq!(b_err, Some(ConnError::CqOverrun));
    assert!(
        matches!(&a_err, Some(ConnError::RemoteTerminate(r)) if r.code.layer() == 0 && r.code.etype() == 0),
        "A should get a local catastrophic Terminate: {a_err:?}"
    );
    assert!(matches!(
        p.b.core.qp_state(qb),
        Ok(QpState::Error | QpState::Terminate)
    ));
}

/// A QP whose receive CQ overran while another QP of its core keeps sending is failed in
/// the same few loops, not left to the 50 ms sweep: the simulated clock stands still while
/// the cores have work, so without the transmit poller's overrun check of the receiving QP
/// (it stays marked although it has nothing to send) the error would wait for the stream
/// to end.
#[test]
fn an_overrun_beside_a_busy_qp_is_found_at_once() {
    let mut p = Pair::default_pair();
    // Connection 1: B's qb1 streams Writes into A, keeping B's transmit poller busy;
    // connection 2 carries A's Sends into qb2, whose completion queue nobody polls.
    let (_qa1, qb1) = p.connect();
    let (qa2, qb2, _small) = connect_to_small_cq(&mut p);
    let (_ra, sa) = p.a.region(1 << 20, all_access());
    let (_rb, sb) = p.b.region(1 << 20, all_access());
    let (_rb1, sb1) = p.b.region(1 << 20, all_access());
    for i in 0..60u64 {
        p.b.core
            .post_send(
                qb1,
                send_wr(
                    i,
                    SendOp::Write {
                        remote_stag: sa.0,
                        remote_to: (i % 16) * 65_536,
                    },
                    &[(sb1, (i % 16) * 65_536, 65_536)],
                ),
            )
            .expect("post_send");
    }
    eight_sends(&mut p, (qa2, sa), (qb2, sb));
    let start = p.now;
    let mut b_err = None;
    p.run_until(20_000, |p| {
        for e in p.b.take_events() {
            if let CmEvent::Error { qp, error } = e {
                if qp == qb2 {
                    b_err = Some(error);
                }
            }
        }
        b_err.is_some()
    });
    assert_eq!(b_err, Some(ConnError::CqOverrun));
    let waited = p.now - start;
    assert!(
        waited < warpcore_engine::tcp::smoltcp::time::Duration::from_millis(50),
        "the overrun waited {waited} of engine time (the 50 ms sweep)"
    );
    assert!(
        p.b.core.qp_state(qb1) == Ok(QpState::Rts),
        "the busy QP is untouched"
    );
}

/// Eight small Writes from B's QP, whose completion queue holds two, posted to its empty
/// send queue: each is framed at post (`Qp::write_at_post`) and the next loop pushes their
/// completions; the third overruns the queue, which is reported at once, as the transmit
/// poller reports it on the general path: the queue's error, then the QP's, and A gets a
/// local catastrophic Terminate. Only what fitted is kept.
#[test]
fn writes_framed_at_post_that_overrun_their_queue_fail_it_loudly() {
    let mut p = Pair::default_pair();
    p.b.core.listen(PORT, MpaParams::default()).expect("listen");
    let (_qa, qb, small) = connect_to_small_cq(&mut p);
    let (_ra, sa) = p.a.region(4096, all_access());
    let (_rb, sb) = p.b.region(4096, all_access());
    // A first Write, unsignalled, through the loop: a QP frames at post once its first
    // pass fixed its MULPDU from the TCP's segment size.
    let first = warpcore_engine::SendWr {
        signaled: false,
        ..send_wr(
            199,
            SendOp::Write {
                remote_stag: sa.0,
                remote_to: 1024,
            },
            &[(sb, 0, 16)],
        )
    };
    p.b.core.post_send(qb, first).expect("post_send");
    p.run(50);
    // A loop at this instant first: the sweep (every 50 ms of engine time, which also
    // looks for overruns) is then not due in the loop below.
    p.b.core.poll(p.now);
    while p.b.core.next_event().is_some() {}
    let fpdus = p.b.core.stats().fpdus_tx;
    for i in 0..8u64 {
        p.b.core
            .post_send(
                qb,
                send_wr(
                    200 + i,
                    SendOp::Write {
                        remote_stag: sa.0,
                        remote_to: i * 64,
                    },
                    &[(sb, i * 64, 16)],
                ),
            )
            .expect("post_send");
    }
    assert_eq!(p.b.core.stats().fpdus_tx - fpdus, 8, "framed at post");
    assert!(small.is_empty(), "no completion before a loop");
    // One loop of B, at the same instant, pushes the completions and acts on the overrun.
    p.b.core.poll(p.now);
    let mut b_events = Vec::new();
    while let Some(e) = p.b.core.next_event() {
        b_events.push(e);
    }
    let cq_error = b_events
        .iter()
        .position(|e| matches!(e, CmEvent::CqError { cq } if *cq == small.id()));
    let qp_error = b_events.iter().position(|e| {
        matches!(
            e,
            CmEvent::Error {
                error: ConnError::CqOverrun,
                ..
            }
        )
    });
    assert!(
        matches!((cq_error, qp_error), (Some(c), Some(q)) if c < q),
        "{b_events:?}"
    );
    assert_eq!(small.len(), 2, "the queue kept what fitted");
    let mut a_err = None;
    p.run_until(5000, |p| {
        for e in p.a.take_events() {
            if let CmEvent::Error { error, .. } = e {
                a_err = Some(error);
            }
        }
        a_err.is_some()
    });
    assert!(
        matches!(&a_err, Some(ConnError::RemoteTerminate(r)) if r.code.layer() == 0 && r.code.etype() == 0),
        "A should get a local catastrophic Terminate: {a_err:?}"
    );
}

/// A successful Write's completion, enough to fire an armed queue.
fn write_done() -> Completion {
    Completion {
        wr_id: 1,
        qp: QpId {
            core: 0,
            index: 1,
            generation: 1,
        },
        opcode: WcOpcode::Write,
        status: WcStatus::Success,
        byte_len: 0,
        solicited: false,
        invalidated: None,
        imm: None,
        atomic_orig: None,
    }
}

/// Whether the channel's descriptor is readable now (polling takes nothing).
fn readable(ch: &CompletionChannel) -> bool {
    let fd = ch.fd();
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    poll(&mut fds, Some(&Timespec::default())).unwrap() == 1
}

/// The descriptor is readable while an event is pending and not once the last one was
/// taken, whether it was taken at once (a zero timeout) or after a wait: a level-triggered
/// `epoll` user must not be woken for events already handed out.
#[test]
fn a_channel_descriptor_is_readable_exactly_while_an_event_is_pending() {
    let ch = Arc::new(CompletionChannel::new().unwrap());
    let cq1 = CompletionQueue::with_channel(8, Arc::clone(&ch)).unwrap();
    let cq2 = CompletionQueue::with_channel(8, Arc::clone(&ch)).unwrap();
    assert!(!readable(&ch));
    assert!(cq1.arm(false) && cq2.arm(false));
    cq1.push(write_done());
    cq2.push(write_done());
    assert!(readable(&ch));
    let zero = Some(StdDuration::ZERO);
    assert_eq!(ch.get_event(zero).unwrap(), Some(cq1.id()));
    assert!(readable(&ch), "one event left");
    assert_eq!(ch.get_event(zero).unwrap(), Some(cq2.id()));
    assert!(!readable(&ch), "readable with no event pending");
    assert_eq!(ch.get_event(zero).unwrap(), None);
    // Taken by a thread that was waiting when the event came.
    assert!(cq1.arm(false));
    std::thread::scope(|s| {
        let waiter = s.spawn(|| ch.get_event(Some(StdDuration::from_secs(5))).unwrap());
        std::thread::sleep(StdDuration::from_millis(10));
        cq1.push(write_done());
        assert_eq!(waiter.join().unwrap(), Some(cq1.id()));
    });
    assert!(!readable(&ch), "readable after a waiter took the one event");
}

/// Two threads wait on one channel and two armed queues fire at once: each thread gets an
/// event before its deadline. (A waiter that took every pending wake-up at once left the
/// other asleep, with an event queued, until its deadline, in most tries.)
#[test]
fn two_threads_waiting_on_one_channel_both_wake_for_two_events() {
    let wait = StdDuration::from_secs(5);
    for _ in 0..10 {
        let ch = Arc::new(CompletionChannel::new().unwrap());
        let cq1 = CompletionQueue::with_channel(8, Arc::clone(&ch)).unwrap();
        let cq2 = CompletionQueue::with_channel(8, Arc::clone(&ch)).unwrap();
        assert!(cq1.arm(false) && cq2.arm(false));
        let got = std::thread::scope(|s| {
            let waiters: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| {
                        let deadline = StdInstant::now() + wait;
                        let id = ch.get_event(Some(wait)).unwrap();
                        (id, StdInstant::now() < deadline)
                    })
                })
                .collect();
            // Most often both are asleep by then; the outcome must not depend on it.
            std::thread::sleep(StdDuration::from_millis(20));
            cq1.push(write_done());
            cq2.push(write_done());
            waiters
                .into_iter()
                .map(|w| w.join().unwrap())
                .collect::<Vec<_>>()
        });
        assert!(
            got.contains(&(Some(cq1.id()), true)) && got.contains(&(Some(cq2.id()), true)),
            "a waiter slept until its deadline with an event pending (event, in time): {got:?}"
        );
    }
}

/// A completion queue of 0 entries, or of more than `MAX_QUEUE_DEPTH`, is refused with a
/// `DepthError` naming the depth, in the words `EngineConfig::validate` uses, by both
/// constructors. `CompletionQueue::new(0)` used to give a queue of one entry, a depth above
/// the limit aborted the process on allocation, and then `new` panicked on both.
/// RDMAP-8.1.2-5: completion queue entries are allocated only within the set bounds.
#[test]
fn a_completion_queue_depth_out_of_range_is_refused_naming_it() {
    let ch = Arc::new(CompletionChannel::new().unwrap());
    for (depth, reason) in [
        (0, "must be at least 1"),
        (MAX_QUEUE_DEPTH + 1, "exceeds MAX_QUEUE_DEPTH (2^22)"),
        (usize::MAX, "exceeds MAX_QUEUE_DEPTH (2^22)"),
    ] {
        let want = DepthError {
            queue: "completion queue",
            depth,
            reason,
        };
        assert_eq!(CompletionQueue::new(depth).err(), Some(want));
        assert_eq!(
            CompletionQueue::with_channel(depth, Arc::clone(&ch)).err(),
            Some(want)
        );
        assert_eq!(
            want.to_string(),
            format!("completion queue depth {depth} {reason}")
        );
    }
    // A queue of one entry holds exactly one.
    let one = CompletionQueue::new(1).expect("depth 1");
    one.push(write_done());
    assert!(!one.overrun());
    one.push(write_done());
    assert!(one.overrun());
}

/// A queue pair destroyed with requests still queued flushes them into its queue; when
/// those overrun it, the queue's asynchronous error (`CqError`, IBV_EVENT_CQ_ERR) is
/// reported once, although no queue pair is left whose sweep would find the overrun.
#[test]
fn flushes_of_a_destroyed_queue_pair_that_overrun_its_queue_report_it() {
    let mut p = Pair::default_pair();
    let small = Arc::new(CompletionQueue::new(2).unwrap());
    let (q, _) = p.b.core.create_qp(qp_attr(&small, 8, 1)).expect("qp");
    let (_r, s) = p.b.region(4096, all_access());
    for i in 0..3 {
        p.b.core
            .post_recv(q, recv_wr(i, &[(s, 64 * i, 64)]))
            .unwrap();
    }
    p.run(10);
    p.b.take_events();
    p.b.core.destroy_qp(q).expect("destroy");
    assert!(small.overrun(), "three flushes into a queue of two");
    // Loops of the engine after it: the error is there, and once.
    p.run(200);
    let events = p.b.take_events();
    let cq_errors = events
        .iter()
        .filter(|e| matches!(e, CmEvent::CqError { cq } if *cq == small.id()))
        .count();
    assert_eq!(cq_errors, 1, "{events:?}");
}
