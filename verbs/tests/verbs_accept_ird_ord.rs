//! `Context::accept_with_ird_ord` (what `rdma_accept`'s `responder_resources` and
//! `initiator_depth` become): the MPA Reply carries the IRD and ORD given instead of the
//! listener's, and both sides end up with RFC 6581 §9.1's result of them.

mod common;

use std::time::Duration;

use warpcore_verbs::*;

const T: Duration = Duration::from_secs(10);

fn established(ctx: &Context) -> Established {
    loop {
        match ctx.next_event(T) {
            Some(CmEvent::Established(e)) => return e,
            Some(_) => {}
            None => panic!("not established within {T:?}"),
        }
    }
}

#[test]
fn accept_answers_with_the_ird_and_ord_given() {
    let (server, client) = common::link_contexts();
    let spd = server.alloc_pd();
    let scq = server.create_cq(16).unwrap();
    let sqp = spd.create_qp(&QpInit::new(&scq, &scq)).unwrap();
    // The listener would answer with IRD 8 and ORD 8.
    server.listen(7100, &MpaParams::default()).unwrap();
    let cpd = client.alloc_pd();
    let ccq = client.create_cq(16).unwrap();
    let cqp = cpd.create_qp(&QpInit::new(&ccq, &ccq)).unwrap();
    let offer = MpaParams {
        ird: 5,
        ord: 3,
        ..MpaParams::default()
    };
    cqp.connect([10, 0, 0, 2], 7100, &offer, b"").unwrap();
    let req = loop {
        match server.next_event(T) {
            Some(CmEvent::ConnectRequest(r)) => break r,
            Some(_) => {}
            None => panic!("no connection request within {T:?}"),
        }
    };
    assert_eq!((req.ird, req.ord), (Some(5), Some(3)));
    server
        .accept_with_ird_ord(&req, &sqp, b"", Some((1, 2)))
        .unwrap();
    // Responder: IRD 1 (at most the initiator's ORD 3), ORD 2 (at most its IRD 5).
    let s = established(&server);
    assert_eq!((s.ird, s.ord), (1, 2), "the responder's IRD/ORD");
    // Initiator: ORD capped at the responder's IRD 1 (MPA2-9.1-7), IRD set to its ORD 2.
    let c = established(&client);
    assert_eq!((c.ird, c.ord), (2, 1), "the initiator's IRD/ORD");
}
