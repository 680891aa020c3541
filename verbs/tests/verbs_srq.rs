//! A shared receive queue through the verbs API with engine threads over the in-memory
//! link: two server queue pairs drain one queue; each completion names its queue pair;
//! the limit event; typed refusals.

use std::time::Duration;

use warpcore_verbs::*;

mod common;

const T: Duration = Duration::from_secs(10);

#[test]
fn two_queue_pairs_share_one_receive_queue() {
    let (server, client) = common::link_contexts();

    let spd = server.alloc_pd();
    let scq = server.create_cq(64).unwrap();
    let smr = spd.alloc_mr(16 * 1024, Access::LOCAL_WRITE).unwrap();
    let srq = spd.create_srq(8, 2).unwrap();
    for i in 0..8u64 {
        srq.post_recv(
            &RecvWr::new(
                i,
                &[smr.sge(i * 2048, 1024), smr.sge(i * 2048 + 1024, 1024)],
            )
            .unwrap(),
        )
        .unwrap();
    }
    assert_eq!((srq.len(), srq.depth()), (8, 8));
    srq.arm_limit(5).unwrap();
    let init = QpInit::new(&scq, &scq).with_srq(&srq);
    let sqps = [spd.create_qp(&init).unwrap(), spd.create_qp(&init).unwrap()];
    assert_eq!(
        sqps[0].post_recv(&RecvWr::new(99, &[smr.sge(0, 8)]).unwrap()),
        Err(Error::UsesSrq)
    );
    // The queue belongs to its protection domain.
    assert_eq!(
        server.alloc_pd().create_qp(&init).map(|_| ()),
        Err(Error::Stag(MemError::WrongPd))
    );
    server.listen(7500, &MpaParams::default()).unwrap();

    let cpd = client.alloc_pd();
    let ccq = client.create_cq(64).unwrap();
    let cmr = cpd.alloc_mr(8192, Access::LOCAL_WRITE).unwrap();
    let mut cqps = Vec::new();
    for sqp in &sqps {
        let cqp = cpd.create_qp(&QpInit::new(&ccq, &ccq)).unwrap();
        common::connect_accept(&server, sqp, &client, &cqp, 7500);
        cqps.push(cqp);
    }
    // Three Sends from each client QP, alternating; lengths tell them apart.
    for round in 0..3u32 {
        for (k, cqp) in cqps.iter().enumerate() {
            let len = 100 * (k as u32 + 1) + round;
            let seed = (k * 16) as u8 + round as u8;
            let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_add(seed)).collect();
            let off = u64::from(round) * 2048 + k as u64 * 1024;
            cmr.write(off as usize, &data).unwrap();
            cqp.post_send(
                &SendWr::new(u64::from(round), SendOp::Send, &[cmr.sge(off, len)]).unwrap(),
            )
            .unwrap();
        }
    }
    let mut next_round = [0u32; 2];
    for _ in 0..6 {
        let c = scq.wait(T).unwrap();
        assert_eq!((c.status, c.opcode), (WcStatus::Success, WcOpcode::Recv));
        let k = sqps
            .iter()
            .position(|q| q.id() == c.qp)
            .expect("one of ours");
        let round = next_round[k];
        next_round[k] += 1;
        let len = 100 * (k as u32 + 1) + round;
        assert_eq!(c.byte_len, len);
        let seed = (k * 16) as u8 + round as u8;
        let mut got = vec![0u8; len as usize];
        smr.read(c.wr_id as usize * 2048, &mut got).unwrap();
        let want: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_add(seed)).collect();
        assert_eq!(got, want, "buffer {} of QP {k}", c.wr_id);
    }
    assert_eq!(next_round, [3, 3]);
    assert_eq!(srq.len(), 2);
    assert!(srq.limit_reached());
    assert_eq!(srq.armed_limit(), 0, "disarmed once reached");
    // IBV_EVENT_SRQ_LIMIT_REACHED: the context reports it once, naming the queue.
    let mut events = Vec::new();
    while let Some(e) = server.next_event(Duration::from_millis(200)) {
        events.push(e);
    }
    let limit = events
        .iter()
        .filter(|e| matches!(e, CmEvent::SrqLimitReached { srq: id } if *id == srq.id()))
        .count();
    assert_eq!(limit, 1, "{events:?}");
}

/// A shared receive queue's SGE count is bounded by the engine configuration's `max_sge`,
/// as a queue pair's is: with a limit below `MAX_SGE`, a queue of `MAX_SGE` SGEs per buffer
/// is refused like a queue pair of as many.
#[test]
fn srq_sges_are_limited_by_the_configured_max_sge() {
    let (dev_a, _dev_b) = link_pair(&LinkConfig::default());
    let mut cfg = Config::new(dev_a, [10, 0, 0, 1]);
    cfg.engine.max_sge = 2;
    let ctx = Context::open(cfg).unwrap();
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(16).unwrap();
    let mut init = QpInit::new(&cq, &cq);
    init.max_sge = 3;
    assert_eq!(
        pd.create_qp(&init).map(|_| ()),
        Err(Error::LimitExceeded("max_sge"))
    );
    assert_eq!(
        pd.create_srq(8, 3).map(|_| ()),
        Err(Error::LimitExceeded("srq sges"))
    );
    assert_eq!(pd.create_srq(8, 2).unwrap().depth(), 8);
}
