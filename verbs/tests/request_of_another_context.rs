//! A connection request names a request of the context that reported it, and
//! only of that one. `Context::accept` and `Context::reject` refuse a `ConnectRequest` of
//! another context with `Error::StaleHandle`, and nothing is accepted or rejected: request
//! handles are numbered per engine core (slot and generation), so the first request of
//! every context's core 0 had the same `RequestId`, and the other context's handle
//! accepted or rejected this context's own request, another peer's (MPA-7.1.2-5,
//! MPA-7.1.2-8: the Reply answers the Request it was meant for).

use std::time::Duration;

use warpcore_verbs::*;

mod common;

const T: Duration = Duration::from_secs(10);
const PORT: u16 = 7630;

/// The next connection request of `ctx`, within `T`.
fn request(ctx: &Context) -> ConnectRequest {
    loop {
        match ctx.next_event(T) {
            Some(CmEvent::ConnectRequest(r)) => break r,
            Some(_) => {}
            None => panic!("no connection request within {T:?}"),
        }
    }
}

/// The client's next event: Established, carrying the server's private data.
fn established(client: &Context) -> Vec<u8> {
    match client.next_event(T) {
        Some(CmEvent::Established(e)) => e.private_data,
        e => panic!("expected Established, got {e:?}"),
    }
}

#[test]
fn accept_and_reject_refuse_a_request_of_another_context() {
    // Two servers, each with its own client on its own link.
    let (server_a, client_a) = common::link_contexts();
    let (server_b, client_b) = common::link_contexts();
    let mut sides = Vec::new();
    for (server, client, pd) in [
        (&server_a, &client_a, b"from a"),
        (&server_b, &client_b, b"from b"),
    ] {
        server.listen(PORT, &MpaParams::default()).unwrap();
        let cpd = client.alloc_pd();
        let ccq = client.create_cq(16).unwrap();
        let cqp = cpd.create_qp(&QpInit::new(&ccq, &ccq)).unwrap();
        cqp.connect([10, 0, 0, 2], PORT, &MpaParams::default(), pd)
            .unwrap();
        let spd = server.alloc_pd();
        let scq = server.create_cq(16).unwrap();
        let sqp = spd.create_qp(&QpInit::new(&scq, &scq)).unwrap();
        sides.push((cqp, ccq, sqp, scq));
    }
    let req_a = request(&server_a);
    let req_b = request(&server_b);
    assert_eq!(req_a.private_data, b"from a");
    assert_eq!(req_b.private_data, b"from b");
    let sqp_a = &sides[0].2;
    let sqp_b = &sides[1].2;

    // B's request handed to A: refused, A's own request untouched.
    assert_eq!(
        server_a.accept(&req_b, sqp_a, b"wrong"),
        Err(Error::StaleHandle),
        "A accepted with B's request handle"
    );
    assert_eq!(sqp_a.state(), QpState::Idle, "nothing was accepted");
    assert_eq!(
        server_a.reject(&req_b, b"wrong"),
        Err(Error::StaleHandle),
        "A rejected with B's request handle"
    );
    assert_eq!(
        server_a.accept_with_ird_ord(&req_b, sqp_a, b"wrong", Some((1, 1))),
        Err(Error::StaleHandle)
    );
    // Each request is still there for its own context, and client A's first answer is
    // the one meant for it.
    server_a.accept(&req_a, sqp_a, b"welcome a").unwrap();
    assert_eq!(established(&client_a), b"welcome a");
    server_b.accept(&req_b, sqp_b, b"welcome b").unwrap();
    assert_eq!(established(&client_b), b"welcome b");
}
