//! Registration at the application's own virtual address (what `ibv_reg_mr` does): Tagged
//! Offsets are addresses, at any alignment, for the peer's Writes and Reads and for local
//! SGEs; a TO below the region's address is a base-or-bounds fault (issue 13, item 1).
//! Windows and fast registrations over such a region take offsets in it, as over a
//! zero-based one.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{connect_accept, link_contexts};
use warpcore_verbs::*;

#[test]
fn tagged_offsets_are_addresses() {
    let (server, client) = link_contexts();
    let scq = server.create_cq(16).unwrap();
    let spd = server.alloc_pd();
    let sqp = spd.create_qp(&QpInit::new(&scq, &scq)).unwrap();
    // The application's memory, at whatever (odd) address the allocator gave it.
    let mut backing = vec![0u8; 4096 + 7];
    backing[200..216].copy_from_slice(b"read me by addr!");
    let smr = spd
        .register_at_address(
            Arc::new(Region::from_boxed(backing.into_boxed_slice())),
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    assert_ne!(smr.base_to(), 0);
    let ccq = client.create_cq(16).unwrap();
    let cpd = client.alloc_pd();
    let cqp = cpd.create_qp(&QpInit::new(&ccq, &ccq)).unwrap();
    let cmr = cpd
        .register_at_address(
            Arc::new(Region::from_boxed(vec![0u8; 1024].into_boxed_slice())),
            Access::LOCAL_WRITE,
        )
        .unwrap();
    cmr.write(5, b"written by addr!").unwrap();
    server.listen(7441, &MpaParams::default()).unwrap();
    connect_accept(&server, &sqp, &client, &cqp, 7441);

    // A Write to the server's address + 100, from the client's address + 5.
    let write = SendOp::Write {
        remote_stag: smr.stag(),
        remote_to: smr.base_to() + 100,
    };
    assert_eq!(cmr.sge(5, 16).to, cmr.base_to() + 5);
    cqp.post_send(&SendWr::new(1, write, &[cmr.sge(5, 16)]).unwrap())
        .unwrap();
    let wc = ccq.wait(Duration::from_secs(5)).unwrap();
    assert_eq!(wc.status, WcStatus::Success);
    // A Read of the server's address + 200 into the client's address + 500.
    let read = SendOp::Read {
        remote_stag: smr.stag(),
        remote_to: smr.base_to() + 200,
    };
    cqp.post_send(&SendWr::new(2, read, &[cmr.sge(500, 16)]).unwrap())
        .unwrap();
    let wc = ccq.wait(Duration::from_secs(5)).unwrap();
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::Success));
    let mut got = [0u8; 16];
    smr.read(100, &mut got).unwrap();
    assert_eq!(&got, b"written by addr!");
    cmr.read(500, &mut got).unwrap();
    assert_eq!(&got, b"read me by addr!");
    // Below the region's address: the peer refuses it (base or bounds, DDP-7.1-12).
    let below = SendOp::Write {
        remote_stag: smr.stag(),
        remote_to: smr.base_to() - 1,
    };
    cqp.post_send(&SendWr::new(3, below, &[cmr.sge(0, 8)]).unwrap())
        .unwrap();
    let t0 = std::time::Instant::now();
    let err = loop {
        match client.next_event(Duration::from_millis(100)) {
            Some(CmEvent::Error { error, .. }) => break error,
            Some(_) => {}
            None => assert!(t0.elapsed() < Duration::from_secs(10), "no error"),
        }
    };
    assert!(
        matches!(&err, ConnError::RemoteTerminate(r) if r.code.layer() == 1),
        "a DDP tagged-buffer Terminate: {err:?}"
    );
}

/// `post_bind_mw` and `post_fast_reg` take `offset` as an offset in the region whatever its
/// Tagged Offsets: over a region registered at its address, a window of 64 octets at offset
/// 100 is addressed by the peer at the region's address + 100 (windows use the region's
/// TOs), and a fast registration of 64 octets at offset 200 at TO 0 (zero-based).
#[test]
fn windows_and_fast_registrations_take_offsets_in_an_address_based_region() {
    let (server, client) = link_contexts();
    let scq = server.create_cq(16).unwrap();
    let spd = server.alloc_pd();
    let sqp = spd.create_qp(&QpInit::new(&scq, &scq)).unwrap();
    let smr = spd
        .register_at_address(
            Arc::new(Region::allocate(8192, 4096).unwrap()),
            Access::LOCAL_WRITE | Access::MW_BIND,
        )
        .unwrap();
    assert!(smr.base_to() > 8192, "an address, not an offset");
    let ccq = client.create_cq(16).unwrap();
    let cpd = client.alloc_pd();
    let cqp = cpd.create_qp(&QpInit::new(&ccq, &ccq)).unwrap();
    let cmr = cpd.alloc_mr(1024, Access::LOCAL_WRITE).unwrap();
    cmr.write(0, b"through the window").unwrap();
    cmr.write(32, b"through a fast reg").unwrap();
    server.listen(7442, &MpaParams::default()).unwrap();
    connect_accept(&server, &sqp, &client, &cqp, 7442);

    let mw = spd.alloc_mw(MwType::Type1).unwrap();
    let w = sqp
        .post_bind_mw(1, &mw, &smr, 100, 64, Access::REMOTE_WRITE)
        .unwrap();
    let fr = spd.alloc_fast_reg().unwrap();
    let f = sqp
        .post_fast_reg(
            2,
            &fr,
            &smr,
            200,
            64,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )
        .unwrap();
    for id in [1, 2] {
        let c = scq.wait(Duration::from_secs(5)).unwrap();
        assert_eq!((c.wr_id, c.status), (id, WcStatus::Success));
    }
    let writes = [(3, w, smr.base_to() + 100, 0), (4, f, 0, 32)];
    for (id, stag, to, from) in writes {
        let write = SendOp::Write {
            remote_stag: stag,
            remote_to: to,
        };
        cqp.post_send(&SendWr::new(id, write, &[cmr.sge(from, 18)]).unwrap())
            .unwrap();
        let c = ccq.wait(Duration::from_secs(5)).unwrap();
        assert_eq!((c.wr_id, c.status), (id, WcStatus::Success));
    }
    // A Send behind the Writes: once it is received, both were placed.
    sqp.post_recv(&RecvWr::new(5, &[smr.sge(4096, 8)]).unwrap())
        .unwrap();
    cqp.post_send(&SendWr::new(6, SendOp::Send, &[cmr.sge(0, 8)]).unwrap())
        .unwrap();
    let c = scq.wait(Duration::from_secs(5)).unwrap();
    assert_eq!((c.wr_id, c.status), (5, WcStatus::Success));
    let mut got = [0u8; 18];
    smr.read(100, &mut got).unwrap();
    assert_eq!(&got, b"through the window");
    smr.read(200, &mut got).unwrap();
    assert_eq!(&got, b"through a fast reg");
}
