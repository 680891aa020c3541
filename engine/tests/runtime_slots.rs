//! A work queue's slot and the completion that retires it, as application threads see them
//! across the core's rings: by the time a completion can be polled, the slot of its work
//! request is free for the next post (the verbs count a request outstanding until its
//! completion is polled, so an `ibv_post_recv` after the poll must find room).

use std::sync::Arc;
use std::time::{Duration, Instant};

use warpcore_engine::clock::Clock;
use warpcore_engine::mem::{MrTable, PdId};
use warpcore_engine::runtime::{Command, Drive};
use warpcore_engine::{validate_recv, CompletionChannel, CompletionQueue, QpAttr, RecvWr, SgeList};

mod runtime_common;
use runtime_common::core_on;

/// A receive flushed when its queue pair is destroyed (or fails, or is reset) completes
/// with `FlushErr`; its receive queue slot was given back only after that completion was
/// pushed (`Qp::flush_rq`), where a receive that completes normally (`complete_recv`) and
/// every send queue request (`retire_sq`) give the slot back first. An application thread
/// that polled the flushed completion and posted again in that window got `QueueFull`
/// from a queue with nothing outstanding.
///
/// The core is held right after the completion became visible, deterministically: the
/// queue is armed, so the push signals its channel, and the channel's eventfd counter is
/// filled to its ceiling, so that signal's write blocks until the test reads one count.
#[test]
fn a_flushed_receive_frees_its_slot_before_its_completion_is_seen() {
    let clock = Clock::new(Instant::now);
    let (core, _peer) = core_on(Drive::Thread, clock);
    let channel = Arc::new(CompletionChannel::new().expect("channel"));
    let cq = Arc::new(CompletionQueue::with_channel(8, Arc::clone(&channel)).expect("cq"));
    let (tx, rx) = crossbeam::channel::bounded(1);
    core.submit(Command::CreateQp(
        QpAttr {
            pd: PdId(1),
            send_cq: Arc::clone(&cq),
            recv_cq: Arc::clone(&cq),
            sq_depth: 1,
            rq_depth: 1,
            max_sge: 1,
        },
        tx,
    ))
    .expect("submit");
    let (qp, shared) = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("reply")
        .expect("create_qp");
    // A receive of no octets: no region needed.
    let wr = RecvWr {
        wr_id: 7,
        sges: SgeList::new(),
    };
    validate_recv(&shared, &MrTable::new(4), &wr).expect("validate");
    core.post_recv(qp, &wr).expect("post_recv");
    assert!(cq.arm(false));
    // The counter at its ceiling (2^64 - 2): the next ring blocks.
    let ceiling = (u64::MAX - 1).to_ne_bytes();
    assert_eq!(rustix::io::write(channel.fd(), &ceiling), Ok(8));
    let (tx, rx) = crossbeam::channel::bounded(1);
    core.submit(Command::DestroyQp(qp, tx)).expect("submit");
    let t0 = Instant::now();
    while cq.is_empty() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::yield_now();
    }
    let seen = !cq.is_empty();
    // What a thread that polled the completion now finds of the receive queue.
    let used = shared.rq_used();
    // Let the core go on (a semaphore eventfd: one count taken), whatever was found.
    let mut count = [0u8; 8];
    assert_eq!(rustix::io::read(channel.fd(), &mut count), Ok(8));
    rx.recv_timeout(Duration::from_secs(10))
        .expect("reply")
        .expect("destroy_qp");
    assert!(seen, "the flushed receive completed");
    assert_eq!(
        used, 0,
        "the flushed receive's completion was visible while its slot was still held"
    );
    let c = cq.pop().expect("the flushed completion");
    assert_eq!(
        (c.wr_id, c.status),
        (7, warpcore_engine::WcStatus::FlushErr)
    );
}
