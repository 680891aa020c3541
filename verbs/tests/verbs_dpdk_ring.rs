//! The core verbs suite between two contexts on two DPDK ring ports in one process
//! (`--no-huge --no-pci`), with a pcapng capture judged by iwdump and tshark.
#![cfg(feature = "dpdk")]

mod common;

use warpcore_verbs::*;

#[test]
fn core_suite_over_net_ring_with_pcapng_judged() {
    let (_eal, ca, cb, cap) = common::ring::ring_pair("ring");
    {
        let client = Context::open(ca).expect("context a");
        let server = Context::open(cb).expect("context b");
        common::both_roles(&client, server, [198, 18, 0, 2]);
    }
    common::judge::judge_capture(&cap);
    let _ = std::fs::remove_dir_all(cap.parent().unwrap());
}
