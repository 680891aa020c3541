//! A completion queue that overruns does not lose completions silently (issue 15, item 4):
//! the QP feeding it goes to the error state, the local user is told
//! (`ConnError::CqOverrun`), and the peer gets a local catastrophic Terminate.

mod common;

use std::sync::Arc;

use common::*;
use warpcore_engine::{CmEvent, CompletionQueue, ConnError, MpaParams, QpAttr, QpState, SendOp};

#[test]
fn a_completion_queue_overrun_fails_its_queue_pair_loudly() {
    let mut p = Pair::default_pair();
    let qa = p.a.qp(64);
    // B's QP completes into a queue of two entries that nobody polls.
    let small = Arc::new(CompletionQueue::new(2));
    let (qb, _) =
        p.b.core
            .create_qp(QpAttr {
                pd: PD,
                send_cq: Arc::clone(&small),
                recv_cq: Arc::clone(&small),
                sq_depth: 64,
                rq_depth: 64,
                max_sge: 4,
            })
            .expect("qp");
    p.b.core.listen(PORT, MpaParams::default()).expect("listen");
    p.a.core
        .connect(qa, (ip(2), PORT), &MpaParams::default(), b"")
        .expect("connect");
    let req = p.wait_request();
    p.b.core.accept(req.request, qb, b"", None).expect("accept");
    p.run_until_established();
    let (_ra, sa) = p.a.region(4096, all_access());
    let (_rb, sb) = p.b.region(4096, all_access());
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
