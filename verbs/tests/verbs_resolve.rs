//! `Context::resolve_neighbor` (rdma_resolve_addr's ARP step) over the in-memory link with
//! engine threads: a host that answers ARP is resolved, an absent one fails after the
//! timeout asked for, and a connect to the absent one fails as `NeighborUnresolved`, not
//! as the `TcpTimedOut` of a SYN nobody answered.

use std::time::{Duration, Instant};

use warpcore_verbs::*;

/// The first `NeighborResolved`/`NeighborFailed` naming `id`, waiting up to `within`.
fn outcome(ctx: &Context, id: NeighborId, within: Duration) -> Option<CmEvent> {
    let end = Instant::now() + within;
    while Instant::now() < end {
        match ctx.next_event(Duration::from_millis(20)) {
            Some(e @ (CmEvent::NeighborResolved(r) | CmEvent::NeighborFailed(r))) if r == id => {
                return Some(e)
            }
            _ => {}
        }
    }
    None
}

#[test]
fn resolve_neighbor_resolves_a_live_host_and_fails_an_absent_one_at_its_timeout() {
    let (da, db) = link_pair(&LinkConfig::default());
    let _server = Context::open(Config::new(db, [10, 0, 0, 2])).unwrap();
    let client = Context::open(Config::new(da, [10, 0, 0, 1])).unwrap();
    let live = client
        .resolve_neighbor([10, 0, 0, 2], Duration::from_secs(2))
        .expect("resolve");
    assert_eq!(
        outcome(&client, live, Duration::from_secs(5)),
        Some(CmEvent::NeighborResolved(live))
    );
    let start = Instant::now();
    let gone = client
        .resolve_neighbor([10, 0, 0, 9], Duration::from_millis(300))
        .expect("resolve");
    assert_eq!(
        outcome(&client, gone, Duration::from_secs(5)),
        Some(CmEvent::NeighborFailed(gone))
    );
    assert!(
        start.elapsed() >= Duration::from_millis(300),
        "failed before its timeout: {:?}",
        start.elapsed()
    );
    // Off the subnet, no gateway: refused at once, named.
    assert!(matches!(
        client.resolve_neighbor([192, 0, 2, 1], Duration::from_secs(1)),
        Err(Error::Tcp(StackError::NoRoute(_)))
    ));
}

#[test]
fn a_connect_to_an_absent_host_fails_as_neighbor_unresolved() {
    let (da, _db) = link_pair(&LinkConfig::default());
    let mut cfg = Config::new(da, [10, 0, 0, 1]);
    // The user timeout bounds the wait for ARP: a second (the initial RTO's default).
    // (Keep-alive must be shorter: the tenth of it.)
    cfg.engine.tcp.timeout = Some(cfg.engine.tcp.rto_initial);
    cfg.engine.tcp.keep_alive = Some(cfg.engine.tcp.rto_initial / 10);
    let client = Context::open(cfg).unwrap();
    let pd = client.alloc_pd();
    let cq = client.create_cq(16).unwrap();
    let qp = pd.create_qp(&QpInit::new(&cq, &cq)).unwrap();
    qp.connect([10, 0, 0, 9], 7000, &MpaParams::default(), b"")
        .expect("connect");
    let end = Instant::now() + Duration::from_secs(10);
    let mut got = None;
    while got.is_none() && Instant::now() < end {
        if let Some(CmEvent::Error { qp: q, error }) = client.next_event(Duration::from_millis(50))
        {
            assert_eq!(q, qp.id());
            got = Some(error);
        }
    }
    assert_eq!(got, Some(ConnError::NeighborUnresolved));
}
