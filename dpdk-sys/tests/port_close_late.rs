//! A port whose close the EAL interrupt thread did not run in time (dropping it waited, then
//! left the close to that thread) cannot be opened again in the process: the close still to
//! come would stop the device and free its queues under the new `Port`'s handles. Over a real
//! EAL (no hugepages, no PCI) with a net_null port. One test function: the EAL is
//! initialised once per process.

use std::time::Duration;

use warpcore_dpdk_sys::{stall_interrupt_thread, EalBuilder, Error, Mempool, Port, PortConfig};

#[test]
fn a_port_closed_late_is_not_opened_again_meanwhile() {
    let eal = EalBuilder::for_test("port_close_late", 0, 256)
        .vdev("net_null0")
        .init()
        .expect("EAL with --no-huge --no-pci and a net_null port");
    let pool =
        Mempool::new(&eal, "wc_late_pool", 1023, 0, Mempool::DEFAULT_DATA_ROOM).expect("pool");
    let mut p = Port::by_name(&eal, "net_null0").expect("net_null port");
    let id = p.id();
    let cfg = PortConfig {
        rx_desc: 256,
        tx_desc: 256,
        ..PortConfig::default()
    };
    p.configure(&cfg, &pool).expect("configure");
    p.start().expect("start");
    drop(p.rx_queue(0).expect("rx queue"));

    // The interrupt thread is busy for a second; the drop waits 50 ms for it to close the
    // port, then leaves the close to it.
    p.set_close_timeout_ms(50);
    stall_interrupt_thread(&eal, 1000).expect("alarm");
    std::thread::sleep(Duration::from_millis(20));
    drop(p);

    // The close is still to come: the id must not be handed out again.
    match Port::from_id(&eal, id) {
        Err(Error::PortInUse { port, .. }) => assert_eq!(port, id),
        Ok(mut again) => {
            // What the late close would pull from under it: a configured, started port
            // whose queue handles poll queues the close frees.
            let _ = again.configure(&cfg, &pool);
            panic!("port {id} opened again while its close is still to come");
        }
        Err(e) => panic!("port {id}: {e}"),
    }
}
