//! `QueuePair::connect_from`: a connection from a local port the caller chose (an rdma_cm
//! id bound before `rdma_connect`). The peer sees that port; a port whose 4-tuple is in use
//! is refused with a typed error naming it, the queue pair left idle to connect again.

mod common;

use std::time::Duration;
use warpcore_verbs::*;

const WAIT: Duration = Duration::from_secs(10);

/// The server's next connection request (other events skipped), bounded by `WAIT`.
fn request(server: &Context) -> ConnectRequest {
    loop {
        match server.next_event(WAIT) {
            Some(CmEvent::ConnectRequest(r)) => return r,
            Some(_) => {}
            None => panic!("no connection request within {WAIT:?}"),
        }
    }
}

/// The client's next event (bounded by `WAIT`) is Established for `qp`.
fn established(client: &Context, qp: &QueuePair) {
    match client.next_event(WAIT) {
        Some(CmEvent::Established(e)) => assert_eq!(e.qp, qp.id()),
        e => panic!("expected Established, got {e:?}"),
    }
}

#[test]
fn a_connection_from_a_chosen_port_uses_it_and_a_port_in_use_is_refused_naming_it() {
    let (server, client) = common::link_contexts();
    server.listen(7100, &MpaParams::default()).unwrap();
    let spd = server.alloc_pd();
    let scq = server.create_cq(16).unwrap();
    let cpd = client.alloc_pd();
    let ccq = client.create_cq(16).unwrap();
    let qp =
        |pd: &ProtectionDomain, cq: &CompletionQueue| pd.create_qp(&QpInit::new(cq, cq)).unwrap();
    let params = MpaParams::default();

    // The chosen port is the connection's: the request comes from it.
    let (c1, s1) = (qp(&cpd, &ccq), qp(&spd, &scq));
    c1.connect_from(45000, [10, 0, 0, 2], 7100, &params, b"")
        .unwrap();
    let r1 = request(&server);
    assert_eq!(r1.remote.1, 45000, "the request came from another port");
    server.accept(&r1, &s1, b"").unwrap();
    established(&client, &c1);

    // The same port to the same peer port: that 4-tuple is the first connection's.
    let c2 = qp(&cpd, &ccq);
    assert_eq!(
        c2.connect_from(45000, [10, 0, 0, 2], 7100, &params, b""),
        Err(Error::Tcp(StackError::PortInUse(45000)))
    );
    // Port 0 names no port to connect from.
    assert_eq!(
        c2.connect_from(0, [10, 0, 0, 2], 7100, &params, b""),
        Err(Error::Tcp(StackError::PortInUse(0)))
    );
    // Refused, the queue pair is unchanged: idle, and it connects from a free port.
    assert_eq!(c2.state(), QpState::Idle);
    let s2 = qp(&spd, &scq);
    c2.connect_from(45001, [10, 0, 0, 2], 7100, &params, b"")
        .unwrap();
    let r2 = request(&server);
    assert_eq!(r2.remote.1, 45001);
    server.accept(&r2, &s2, b"").unwrap();
    established(&client, &c2);

    // `connect` still takes an ephemeral port, neither of those.
    let (c3, s3) = (qp(&cpd, &ccq), qp(&spd, &scq));
    c3.connect([10, 0, 0, 2], 7100, &params, b"").unwrap();
    let r3 = request(&server);
    assert!(
        r3.remote.1 != 45000 && r3.remote.1 != 45001 && r3.remote.1 != 0,
        "ephemeral port {}",
        r3.remote.1
    );
    server.accept(&r3, &s3, b"").unwrap();
    established(&client, &c3);
}

/// A connect to port 0 of a reachable peer is refused naming the port: it was refused as
/// `StackError::Unaddressable` of the peer's address ("cannot connect to 10.0.0.2"), which
/// tells the user the address is at fault while it is fine. (RFC 6335 6: port 0 is
/// reserved, no connection is made to it.) Nothing changes: the queue pair stays idle and
/// connects to the listener's port after.
#[test]
fn a_connect_to_port_0_is_refused_naming_the_port() {
    let (server, client) = common::link_contexts();
    server.listen(7101, &MpaParams::default()).unwrap();
    let spd = server.alloc_pd();
    let scq = server.create_cq(16).unwrap();
    let cpd = client.alloc_pd();
    let ccq = client.create_cq(16).unwrap();
    let c = cpd.create_qp(&QpInit::new(&ccq, &ccq)).unwrap();
    let s = spd.create_qp(&QpInit::new(&scq, &scq)).unwrap();
    let params = MpaParams::default();
    let want = Err(Error::Tcp(StackError::InvalidArgument(
        "remote port",
        "must not be 0 (no connection is made to port 0)",
    )));
    assert_eq!(c.connect([10, 0, 0, 2], 0, &params, b""), want);
    assert_eq!(c.connect_from(45001, [10, 0, 0, 2], 0, &params, b""), want);
    assert_eq!(c.state(), QpState::Idle);
    c.connect([10, 0, 0, 2], 7101, &params, b"").unwrap();
    let r = request(&server);
    server.accept(&r, &s, b"").unwrap();
    established(&client, &c);
}
