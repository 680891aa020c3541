//! A completion queue that overflows is an asynchronous error of its own (the verbs'
//! `IBV_EVENT_CQ_ERR`): the context reports `CmEvent::CqError` naming the queue, once, and
//! the queue pairs feeding it go to the error state with `ConnError::CqOverrun` (issue 15,
//! item 4).

mod common;

use std::time::{Duration, Instant};

use common::{connect_accept, link_contexts};
use warpcore_verbs::*;

#[test]
fn an_overflowing_queue_is_reported_once_and_fails_its_queue_pairs() {
    let (server, client) = link_contexts();
    let small = server.create_cq(2).unwrap();
    let spd = server.alloc_pd();
    let sqp = spd.create_qp(&QpInit::new(&small, &small)).unwrap();
    let mr = spd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    for i in 0..8 {
        sqp.post_recv(&RecvWr::new(i, &[mr.sge(i * 64, 64)]).unwrap())
            .unwrap();
    }
    let ccq = client.create_cq(64).unwrap();
    let cpd = client.alloc_pd();
    let cqp = cpd.create_qp(&QpInit::new(&ccq, &ccq)).unwrap();
    let cmr = cpd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    server.listen(7431, &MpaParams::default()).unwrap();
    connect_accept(&server, &sqp, &client, &cqp, 7431);
    // Eight Sends into a queue of two that nobody polls.
    for i in 0..8 {
        cqp.post_send(&SendWr::new(i, SendOp::Send, &[cmr.sge(0, 16)]).unwrap())
            .unwrap();
    }
    let mut events = Vec::new();
    let t0 = Instant::now();
    while !events.iter().any(|e| {
        matches!(
            e,
            CmEvent::Error {
                error: ConnError::CqOverrun,
                ..
            }
        )
    }) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no error: {events:?}"
        );
        if let Some(e) = server.next_event(Duration::from_millis(100)) {
            events.push(e);
        }
    }
    // Any late events, then: exactly one CqError, naming this queue, before the QP's error.
    while let Some(e) = server.next_event(Duration::from_millis(200)) {
        events.push(e);
    }
    let cq_err: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e, CmEvent::CqError { .. }))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(cq_err.len(), 1, "{events:?}");
    assert!(matches!(events[cq_err[0]], CmEvent::CqError { cq } if cq == small.id()));
    let qp_err = events
        .iter()
        .position(|e| matches!(e, CmEvent::Error { .. }))
        .unwrap();
    assert!(cq_err[0] < qp_err, "{events:?}");
    assert!(small.overrun());
    assert_eq!(sqp.state(), QpState::Error);
}

/// House rule (bad local input: a typed error, never a silent success): a flushed
/// completion the application pushes into a full queue (`push_flushed`) was lost, the
/// call returning as if it had been queued, and the overrun it raised then failed every
/// queue pair completing into the queue (`CmEvent::CqError`, `ConnError::CqOverrun`, a
/// Terminate to each peer) for the caller's own mistake. The caller is right there to be
/// told: the push is refused, nothing lost, the queue and its queue pairs left alone.
#[test]
fn a_flushed_completion_pushed_into_a_full_queue_is_refused_not_lost() {
    let (server, _client) = link_contexts();
    let cq = server.create_cq(1).unwrap();
    let pd = server.alloc_pd();
    let qp = pd.create_qp(&QpInit::new(&cq, &cq)).unwrap();
    let first = cq.push_flushed(1, qp.id(), WcOpcode::Send);
    let second = cq.push_flushed(2, qp.id(), WcOpcode::Send);
    // The cores' sweeps would have found an overrun by now: nothing happened.
    assert_eq!(server.next_event(Duration::from_millis(300)), None);
    assert_eq!(qp.state(), QpState::Idle);
    assert!(!cq.overrun(), "a refused push is no overrun");
    assert_eq!(first, Ok(()));
    assert_eq!(
        second,
        Err(Error::QueueFull),
        "a push into a full queue is refused, typed"
    );
    assert_eq!(cq.poll_one().map(|c| c.wr_id), Some(1));
    assert!(cq.poll_one().is_none());
}
