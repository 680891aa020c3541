//! What an error completion reports: its `byte_len`, and the status of a receive too short for its Send.

mod common;

use std::time::Duration;

use common::{connect_accept, link_contexts};
use warpcore_verbs::*;

/// A work request that failed or was flushed transferred nothing the application may
/// count on: its completion's `byte_len` (documented as the octets received or
/// transferred) is 0, as for a flushed receive, and as rdma-core's providers report it
/// (rxe fills `byte_len` only for a successful completion, siw flushes with 0 octets;
/// `ibv_poll_cq(3)`: of an unsuccessful completion only `wr_id`, `status`, `qp_num` and
/// `vendor_err` are valid). The send queue's error completions carried the posted length:
/// a Read that the peer refused (RDMAP-7.1-3, nothing placed) reported every octet it
/// asked for, and a Write flushed behind it (RDMAP-6.2.1-2, never sent) its whole length.
#[test]
fn error_completions_report_no_octets_transferred() {
    let (server, client) = link_contexts();
    let scq = server.create_cq(16).unwrap();
    let spd = server.alloc_pd();
    let sqp = spd.create_qp(&QpInit::new(&scq, &scq)).unwrap();
    let smr = spd
        .alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let ccq = client.create_cq(16).unwrap();
    let cpd = client.alloc_pd();
    let cqp = cpd.create_qp(&QpInit::new(&ccq, &ccq)).unwrap();
    let cmr = cpd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    // A receive on the client: flushed when its queue pair fails, with 0 octets.
    cqp.post_recv(&RecvWr::new(30, &[cmr.sge(2048, 512)]).unwrap())
        .unwrap();
    server.listen(7431, &MpaParams::default()).unwrap();
    connect_accept(&server, &sqp, &client, &cqp, 7431);

    // A Read of 1000 octets from an STag the server never made: refused by the peer
    // (Terminate, remote access error), nothing placed.
    let bad = SendOp::Read {
        remote_stag: smr.stag() ^ 0x0000_ff00,
        remote_to: 0,
    };
    cqp.post_send(&SendWr::new(10, bad, &[cmr.sge(0, 1000)]).unwrap())
        .unwrap();
    // A fenced Write waits for the Read: never sent, flushed when the QP fails.
    let write = SendOp::Write {
        remote_stag: smr.stag(),
        remote_to: 0,
    };
    cqp.post_send(&SendWr::new(20, write, &[cmr.sge(0, 700)]).unwrap().fenced())
        .unwrap();

    let mut got = Vec::new();
    while got.len() < 3 {
        let c = ccq.wait(Duration::from_secs(10)).expect("a completion");
        got.push((c.wr_id, c.status, c.byte_len));
    }
    got.sort_by_key(|g| g.0);
    assert_eq!(
        got,
        [
            (10, WcStatus::RemoteAccess, 0),
            (20, WcStatus::FlushErr, 0),
            (30, WcStatus::FlushErr, 0),
        ],
        "error completions carry the octets they transferred: none"
    );
}

/// A Send longer than the receive it lands in (DDP-7.1-4: the Terminate is 1/2/05) fails
/// that receive with [`WcStatus::LocalLength`], the status documented for exactly this
/// ("the received message was longer than the posted buffers") and the one siw gives it
/// (`SIW_WC_LOC_LEN_ERR`; rdma-compat's `IBV_WC_LOC_LEN_ERR`); the receives behind it are
/// flushed (RDMAP-6.2.1-2). It was flushed like them, as if the QP had failed for an
/// unrelated reason, and `LocalLength` was never produced.
#[test]
fn a_send_longer_than_its_receive_fails_it_with_local_length() {
    let (server, client) = link_contexts();
    let scq = server.create_cq(16).unwrap();
    let spd = server.alloc_pd();
    let sqp = spd.create_qp(&QpInit::new(&scq, &scq)).unwrap();
    let smr = spd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    sqp.post_recv(&RecvWr::new(7, &[smr.sge(0, 10)]).unwrap())
        .unwrap();
    sqp.post_recv(&RecvWr::new(8, &[smr.sge(64, 64)]).unwrap())
        .unwrap();
    let ccq = client.create_cq(16).unwrap();
    let cpd = client.alloc_pd();
    let cqp = cpd.create_qp(&QpInit::new(&ccq, &ccq)).unwrap();
    let cmr = cpd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    server.listen(7432, &MpaParams::default()).unwrap();
    connect_accept(&server, &sqp, &client, &cqp, 7432);

    cqp.post_send(&SendWr::new(1, SendOp::Send, &[cmr.sge(0, 11)]).unwrap())
        .unwrap();
    let mut got = Vec::new();
    while got.len() < 2 {
        let c = scq.wait(Duration::from_secs(10)).expect("a completion");
        got.push((c.wr_id, c.opcode, c.status));
    }
    assert_eq!(
        got,
        [
            (7, WcOpcode::Recv, WcStatus::LocalLength),
            (8, WcOpcode::Recv, WcStatus::FlushErr),
        ]
    );
}
