//! `DpdkPort::from_port_with_mtu` takes IP MTUs of 576 to 9000 and refuses the rest with a
//! typed error, before the port is configured: an MTU below 576 used to be configured on the
//! port while the devices were clamped to 576, sending frames longer than the port's MTU.
//! Over a ring port pair (`--no-huge --no-pci`); its own binary: one EAL per process.
#![cfg(feature = "dpdk")]

use warpcore_verbs::dpdk::dpdk_sys::{EalBuilder, Mempool, RingPortPair};
use warpcore_verbs::dpdk::DpdkPort;
use warpcore_verbs::Error;

#[test]
fn an_mtu_outside_576_to_9000_is_refused() {
    let eal = EalBuilder::for_test("verbs_dpdk_mtu", 0, 256)
        .init()
        .expect("EAL with --no-huge --no-pci");
    let pool = Mempool::new(&eal, "wceng_mtu_pool", 2047, 0, 9000 + 18 + 128).expect("pool");
    let RingPortPair { a, b } = RingPortPair::new(&eal, "wcmtu", 256).expect("ring ports");
    let err = DpdkPort::from_port_with_mtu(a, pool, 1, Some(300)).expect_err("MTU 300");
    assert!(
        matches!(err, Error::Config(ref c) if c.field == "mtu"),
        "{err}"
    );
    let p = DpdkPort::from_port_with_mtu(b, pool, 1, Some(576)).expect("MTU 576");
    assert_eq!(p.mtu(), 576);
}
