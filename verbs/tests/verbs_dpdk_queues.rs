//! `DpdkPort` refuses a port of zero queues with a typed error naming `queues`: a net_memif
//! port passed the multi-queue check, made no device, and the context opened on it had no
//! engine core, so `create_qp` panicked dividing by zero (round robin over the cores); other
//! drivers were told that they cannot run "several engine cores". Over a ring port pair
//! (`--no-huge --no-pci`); its own binary: one EAL per process.
#![cfg(feature = "dpdk")]

use warpcore_verbs::dpdk::dpdk_sys::{EalBuilder, Mempool, RingPortPair};
use warpcore_verbs::dpdk::DpdkPort;
use warpcore_verbs::Error;

#[test]
fn a_port_of_zero_queues_is_refused_naming_queues() {
    let eal = EalBuilder::for_test("verbs_dpdk_queues", 0, 256)
        .init()
        .expect("EAL with --no-huge --no-pci");
    let pool =
        Mempool::new(&eal, "wceng_q_pool", 2047, 0, Mempool::DEFAULT_DATA_ROOM).expect("pool");
    let RingPortPair { a, b } = RingPortPair::new(&eal, "wcq", 256).expect("ring ports");
    let err = DpdkPort::from_port(a, pool, 0).expect_err("zero queues");
    assert!(
        matches!(err, Error::Config(ref c) if c.field == "queues"),
        "{err:?}"
    );
    let p = DpdkPort::from_port(b, pool, 1).expect("one queue");
    assert_eq!(p.driver(), "net_ring");
}
