//! Posts to a queue pair that is closing or failed: the verbs take them to be flushed
//! (`ibv_post_send(3)`, `ibv_post_recv(3)` on such a QP), and `QueuePair::post_send_flushed`
//! / `post_recv_late` have the engine core complete them behind the requests posted
//! before them, in each queue's order (a completion pushed on the posting thread overtook
//! the requests a graceful close was still draining).

mod common;

use std::time::{Duration, Instant};

use common::{caller_contexts, connect_accept_driven};
use warpcore_verbs::*;

const T: Duration = Duration::from_secs(10);

#[test]
fn posts_to_a_closing_queue_pair_complete_behind_the_requests_still_draining() {
    let (server, client) = caller_contexts(&LinkConfig::default());
    let spd = server.alloc_pd();
    let scq = server.create_cq(64).unwrap();
    let smr = spd
        .alloc_mr(1 << 20, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let sqp = spd.create_qp(&QpInit::new(&scq, &scq)).unwrap();
    let cpd = client.alloc_pd();
    let ccq = client.create_cq(64).unwrap();
    let cmr = cpd.alloc_mr(1 << 20, Access::LOCAL_WRITE).unwrap();
    let cqp = cpd.create_qp(&QpInit::new(&ccq, &ccq)).unwrap();
    connect_accept_driven(&server, &sqp, &client, &cqp, 7431);
    // A receive waiting, and a Write of 1 MiB that completes only once the server's
    // core acknowledged its segments: both outstanding when the close begins.
    cqp.post_recv(&RecvWr::new(10, &[cmr.sge(0, 64)]).unwrap())
        .unwrap();
    let write = SendOp::Write {
        remote_stag: smr.stag(),
        remote_to: 0,
    };
    cqp.post_send(&SendWr::new(1, write, &[cmr.sge(0, 1 << 20)]).unwrap())
        .unwrap();
    cqp.disconnect().unwrap();
    let st = cqp.state();
    assert!(
        warpcore_engine::ends_in_flush(st),
        "closing after disconnect, not {st:?}"
    );
    // The typed posts refuse; the late ones are taken.
    let send = SendWr::new(2, SendOp::Send, &[]).unwrap();
    assert!(matches!(cqp.post_send(&send), Err(Error::InvalidState(_))));
    let recv = RecvWr::new(11, &[cmr.sge(64, 64)]).unwrap();
    assert!(matches!(cqp.post_recv(&recv), Err(Error::InvalidState(_))));
    cqp.post_send_flushed(2).unwrap();
    cqp.post_recv_late(&recv).unwrap();
    let t0 = Instant::now();
    let mut got = Vec::new();
    while got.len() < 4 {
        assert!(t0.elapsed() < T, "only {got:?} within {T:?}");
        client.progress();
        server.progress();
        while let Some(wc) = ccq.poll_one() {
            got.push((wc.wr_id, wc.status));
        }
    }
    let sends: Vec<_> = got.iter().filter(|c| c.0 < 10).copied().collect();
    let recvs: Vec<_> = got.iter().filter(|c| c.0 >= 10).copied().collect();
    assert_eq!(
        sends,
        vec![(1, WcStatus::Success), (2, WcStatus::FlushErr)],
        "the Write drained by the close completes before the request posted after it"
    );
    assert_eq!(
        recvs,
        vec![(10, WcStatus::FlushErr), (11, WcStatus::FlushErr)],
        "receives flushed in posting order"
    );
    // Outside closing or error the late posts refuse, typed.
    let idle = cpd.create_qp(&QpInit::new(&ccq, &ccq)).unwrap();
    assert!(matches!(
        idle.post_send_flushed(3),
        Err(Error::InvalidState(QpState::Idle))
    ));
    assert!(matches!(
        idle.post_recv_late(&recv),
        Err(Error::InvalidState(QpState::Idle))
    ));
}
