//! The core verbs suite between two contexts over the in-memory link, each with its own
//! engine core thread (no DPDK).

mod common;

use warpcore_verbs::*;

#[test]
fn core_suite_over_the_memory_link() {
    let (da, db) = link_pair(&LinkConfig::default());
    let server = Context::open(Config::new(db, [10, 0, 0, 2])).unwrap();
    let client = Context::open(Config::new(da, [10, 0, 0, 1])).unwrap();
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::channel();
        let t = s.spawn(move || common::server(&server, move || tx.send(()).unwrap()));
        rx.recv().expect("server listening");
        common::client(&client, [10, 0, 0, 2]);
        t.join().expect("server role");
    });
}
