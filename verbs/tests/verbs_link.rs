//! The core verbs suite between two contexts over the in-memory link, each with its own
//! engine core thread (no DPDK).

mod common;

use warpcore_verbs::*;

#[test]
fn core_suite_over_the_memory_link() {
    let (da, db) = link_pair(&LinkConfig::default());
    let server = Context::open(Config::new(db, [10, 0, 0, 2])).unwrap();
    let client = Context::open(Config::new(da, [10, 0, 0, 1])).unwrap();
    common::both_roles(&client, server, [10, 0, 0, 2]);
}
