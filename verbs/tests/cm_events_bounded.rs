//! The engine bounds what a network peer can make a core report for an
//! application that reads events slowly (withdrawn `ConnectRequest`s, capped
//! `RequestRefused`s, the runtime taking from the core only what the ring has room for);
//! the verbs `Context` must not undo that by emptying the rings into a queue of its own
//! at every event the application takes.

use std::time::{Duration, Instant};

use warpcore_verbs::*;

const PORT: u16 = 7471;
const DEPTH: usize = 8;

/// Polls `done` until it holds (10 s at most).
fn wait(mut done: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < end, "timed out");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_slow_reader_keeps_the_events_a_peer_causes_bounded() {
    let (da, db) = link_pair(&LinkConfig::default());
    let mut scfg = Config::new(db, [10, 0, 0, 2]);
    scfg.engine.event_queue_depth = DEPTH;
    let server = Context::open(scfg).unwrap();
    let client = Context::open(Config::new(da, [10, 0, 0, 1])).unwrap();
    server.listen(PORT, &MpaParams::default()).unwrap();
    let cq = client.create_cq(64).unwrap();
    let pd = client.alloc_pd();
    let pending = |s: &Context| s.stats().unwrap()[0].requests_pending;
    // Rounds of a ring's worth of requests whose peers give up (the QP dropped: RST)
    // before the server's application answers; it takes one event per round.
    for _ in 0..12 {
        let qps: Vec<QueuePair> = (0..DEPTH)
            .map(|_| {
                let q = pd.create_qp(&QpInit::new(&cq, &cq)).unwrap();
                q.connect([10, 0, 0, 2], PORT, &MpaParams::default(), b"")
                    .unwrap();
                q
            })
            .collect();
        wait(|| pending(&server) == DEPTH as u64);
        drop(qps);
        wait(|| pending(&server) == 0);
        while client.next_event(Duration::ZERO).is_some() {}
        assert!(server.next_event(Duration::ZERO).is_some());
    }
    std::thread::sleep(Duration::from_millis(50));
    let mut left = 0;
    while server.next_event(Duration::from_millis(20)).is_some() {
        left += 1;
    }
    // What may still wait, whatever the number of rounds: the requests that left the core
    // before their peers gave up (at most the context's queue, the ring and the runtime's
    // held event: 2 * DEPTH + 1) and a cancel for each. Before, every round added up to a
    // ring's worth (86 events after these 12 rounds).
    assert!(left <= 4 * DEPTH + 2, "{left} events still queued");
}
