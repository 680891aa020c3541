//! `Context::listen` on a context of several engine cores is all or nothing: when one core
//! refuses the listen, those that took it before stop listening again and the first error
//! is returned. Before, the earlier cores kept listening: the call failed, yet SYNs to the
//! port reaching those cores were answered, `unlisten` found the port listened on, and a
//! retry of `listen` failed with `PortInUse`. Two cores over a net_memif port
//! (`--no-huge --no-pci`); its own binary: one EAL per process.
#![cfg(feature = "dpdk")]

use warpcore_engine::tcp::TcpImplementation;
use warpcore_verbs::dpdk::dpdk_sys::EalBuilder;
use warpcore_verbs::dpdk::DpdkPort;
use warpcore_verbs::*;

#[test]
fn a_listen_failing_on_a_later_core_leaves_no_core_listening() {
    // Only net_memif runs several engine cores; no peer attaches to this one.
    let dir = std::env::temp_dir().join(format!("wceng-verbs-listen-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("memif.sock");
    let eal = EalBuilder::for_test("verbs_dpdk_listen", 0, 256)
        .vdev(&format!(
            "net_memif0,role=server,socket={},socket-abstract=no",
            sock.display()
        ))
        .init()
        .expect("EAL with --no-huge --no-pci and a net_memif port");
    let port = DpdkPort::open(&eal, "net_memif0", 2, 2047).expect("memif port, two queues");
    let mut cfg = Config::new(Device::Dpdk(port), [10, 0, 0, 1]);
    cfg.drive = Drive::Caller;
    // The reference TCP's listener takes `max_pending_requests` (at most 4) sockets of the
    // core's `max_connections`: with 2 and 2, a core with one connection cannot listen.
    cfg.engine.tcp_implementation = TcpImplementation::SmoltcpReference;
    cfg.engine.max_connections = 2;
    cfg.engine.max_pending_requests = 2;
    let ctx = Context::open(cfg).expect("context");
    assert_eq!(ctx.cores(), 2);

    // One connection (never answered: no peer attaches to the memif port) on core 1 only.
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(16).unwrap();
    let mut init = QpInit::new(&cq, &cq);
    init.core = Some(1);
    let qp = pd.create_qp(&init).unwrap();
    qp.connect([10, 0, 0, 9], 4791, &MpaParams::default(), b"")
        .unwrap();

    // Core 0 takes the listen, core 1 refuses it: the call fails with core 1's error...
    let err = ctx.listen(7000, &MpaParams::default()).unwrap_err();
    assert!(
        matches!(err, Error::Tcp(StackError::TableFull(2))),
        "{err:?}"
    );
    // ...and core 0 listens no more: nothing to stop.
    assert_eq!(ctx.unlisten(7000), Err(Error::NotListening(7000)));

    // A retry meets core 1's refusal again, not core 0's listener (`PortInUse`).
    let again = ctx.listen(7000, &MpaParams::default()).unwrap_err();
    assert!(
        matches!(again, Error::Tcp(StackError::TableFull(2))),
        "{again:?}"
    );
    assert_eq!(ctx.unlisten(7000), Err(Error::NotListening(7000)));
    drop(qp);
    drop(ctx);
    let _ = std::fs::remove_dir_all(&dir);
}
