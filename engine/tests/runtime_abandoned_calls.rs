//! Control calls whose caller stopped waiting for the reply (the verbs' call timeout,
//! `polled::wait_reply`): what the command created must not outlive the caller's
//! knowledge of it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use warpcore_engine::clock::Clock;
use warpcore_engine::cm::MpaParams;
use warpcore_engine::mem::PdId;
use warpcore_engine::runtime::{Command, CoreHandle, Drive};
use warpcore_engine::{CompletionQueue, EngineConfig, QpAttr};

mod runtime_common;
use runtime_common::core_with;

fn attr(cq: &Arc<CompletionQueue>) -> QpAttr {
    QpAttr {
        pd: PdId(1),
        send_cq: Arc::clone(cq),
        recv_cq: Arc::clone(cq),
        sq_depth: 1,
        rq_depth: 1,
        max_sge: 1,
    }
}

/// Waits until the core applied every command queued before (commands are applied in
/// order: a Stats reply means those before it were carried out).
fn sync(core: &CoreHandle) {
    let (tx, rx) = crossbeam::channel::bounded(1);
    core.submit(Command::Stats(tx)).expect("submit");
    rx.recv_timeout(Duration::from_secs(10))
        .expect("reply")
        .expect("stats");
}

/// A CreateQp whose caller gave up waiting (its receiver dropped: the verbs' control call
/// returned `Timeout`) created a queue pair nobody knows the number of: it held one of
/// `max_qps` slots (and its completion queues) until the context went. Two such calls on
/// a core of two QPs, and no queue pair could be created any more.
#[test]
fn a_create_qp_whose_caller_gave_up_does_not_leak_its_queue_pair() {
    let cfg = EngineConfig {
        max_qps: 2,
        ..EngineConfig::default()
    };
    let (core, _peer) = core_with(Drive::Thread, Clock::new(Instant::now), cfg);
    let cq = Arc::new(CompletionQueue::new(8).expect("cq"));
    for _ in 0..2 {
        let (tx, rx) = crossbeam::channel::bounded(1);
        drop(rx);
        core.submit(Command::CreateQp(attr(&cq), tx))
            .expect("submit");
    }
    sync(&core);
    let (tx, rx) = crossbeam::channel::bounded(1);
    core.submit(Command::CreateQp(attr(&cq), tx))
        .expect("submit");
    let r = rx.recv_timeout(Duration::from_secs(10)).expect("reply");
    assert!(
        r.is_ok(),
        "a queue pair whose creator gave up still holds its slot: {r:?}"
    );
}

/// A Listen whose caller gave up waiting left the port listening: the caller was told
/// the call timed out, and its retry was refused with `PortInUse`.
#[test]
fn a_listen_whose_caller_gave_up_does_not_hold_the_port() {
    let (core, _peer) = core_with(
        Drive::Thread,
        Clock::new(Instant::now),
        EngineConfig::default(),
    );
    let (tx, rx) = crossbeam::channel::bounded(1);
    drop(rx);
    core.submit(Command::Listen(4791, MpaParams::default(), tx))
        .expect("submit");
    sync(&core);
    let (tx, rx) = crossbeam::channel::bounded(1);
    core.submit(Command::Listen(4791, MpaParams::default(), tx))
        .expect("submit");
    let r = rx.recv_timeout(Duration::from_secs(10)).expect("reply");
    assert!(
        r.is_ok(),
        "a listener whose caller gave up still holds its port: {r:?}"
    );
}
