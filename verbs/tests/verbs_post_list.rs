//! Post lists (`ibv_post_send` with chained requests): every request is checked as a single
//! post is; the ones before the first refused are posted and complete in order, the rest
//! are not tried, and the error says where the list stopped.

mod common;

use std::time::Duration;

use common::{connect_accept, link_contexts};
use warpcore_verbs::*;

#[test]
fn a_list_posts_in_order_up_to_the_first_refused_request() {
    let (server, client) = link_contexts();
    let scq = server.create_cq(64).unwrap();
    let spd = server.alloc_pd();
    let sqp = spd.create_qp(&QpInit::new(&scq, &scq)).unwrap();
    let target = spd
        .alloc_mr(1 << 16, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let ccq = client.create_cq(64).unwrap();
    let cpd = client.alloc_pd();
    let cqp = cpd.create_qp(&QpInit::new(&ccq, &ccq)).unwrap();
    let src = cpd.alloc_mr(1 << 16, Access::LOCAL_WRITE).unwrap();
    src.write(0, &common::pattern(1 << 16, 7)).unwrap();
    server.listen(7421, &MpaParams::default()).unwrap();
    connect_accept(&server, &sqp, &client, &cqp, 7421);

    let write = |i: u64, off: u64, len: u32| {
        SendWr::new(
            i,
            SendOp::Write {
                remote_stag: target.stag(),
                remote_to: off,
            },
            &[src.sge(off, len)],
        )
        .unwrap()
    };
    // Eight good Writes in one list.
    let list: Vec<SendWr> = (0..8).map(|i| write(i, i * 4096, 4096)).collect();
    cqp.post_send_list(&list).unwrap();
    for i in 0..8 {
        let wc = ccq.wait(Duration::from_secs(5)).unwrap();
        assert_eq!((wc.wr_id, wc.status), (i, WcStatus::Success));
    }
    // A list whose fourth request reaches outside its region: three are posted.
    let mut list: Vec<SendWr> = (10..13).map(|i| write(i, 0, 64)).collect();
    list.push(write(13, (1 << 16) - 8, 64));
    list.push(write(14, 0, 64));
    let e = cqp.post_send_list(&list).unwrap_err();
    assert_eq!(e.posted, 3);
    assert_eq!(e.error, Error::SgeOutOfBounds);
    for i in 10..13 {
        let wc = ccq.wait(Duration::from_secs(5)).unwrap();
        assert_eq!((wc.wr_id, wc.status), (i, WcStatus::Success));
    }
    assert!(
        ccq.wait(Duration::from_millis(100)).is_err(),
        "nothing after the refused request"
    );
    let mut got = vec![0u8; 8 * 4096];
    target.read(0, &mut got).unwrap();
    assert_eq!(got, common::pattern(1 << 16, 7)[..8 * 4096]);
}

#[test]
fn a_list_longer_than_the_send_queue_stops_where_it_is_full() {
    let (server, client) = link_contexts();
    let scq = server.create_cq(64).unwrap();
    let spd = server.alloc_pd();
    let sqp = spd.create_qp(&QpInit::new(&scq, &scq)).unwrap();
    let target = spd
        .alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let ccq = client.create_cq(256).unwrap();
    let cpd = client.alloc_pd();
    let mut init = QpInit::new(&ccq, &ccq);
    init.sq_depth = 16;
    let cqp = cpd.create_qp(&init).unwrap();
    let src = cpd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    server.listen(7422, &MpaParams::default()).unwrap();
    connect_accept(&server, &sqp, &client, &cqp, 7422);
    let list: Vec<SendWr> = (0..40)
        .map(|i| {
            SendWr::new(
                i,
                SendOp::Write {
                    remote_stag: target.stag(),
                    remote_to: 0,
                },
                &[src.sge(0, 64)],
            )
            .unwrap()
        })
        .collect();
    // The whole list is checked (and its send queue slots taken) before any of it reaches
    // the engine, so exactly the 16 slots are filled.
    let e = cqp.post_send_list(&list).unwrap_err();
    assert_eq!((e.posted, e.error.clone()), (16, Error::QueueFull));
    let posted = e.posted;
    for i in 0..posted as u64 {
        let wc = ccq.wait(Duration::from_secs(5)).unwrap();
        assert_eq!((wc.wr_id, wc.status), (i, WcStatus::Success));
    }
}
