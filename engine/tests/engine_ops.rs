//! Send, Write and Read end to end between two engine cores over the in-memory link.

mod common;

use common::*;
use warpcore_engine::mem::Access;
use warpcore_engine::{SendOp, WcOpcode, WcStatus};

/// RDMAP-5.3-1, DDP-5.4-1: a Send lands in the posted receive buffer, byte for byte, and
/// both sides complete.
#[test]
fn send_write_read_end_to_end() {
    let mut p = Pair::default_pair();
    let (qa, qb) = p.connect();
    let (ra, sa) = p.a.region(1 << 20, all_access());
    let (rb, sb) = p.b.region(1 << 20, all_access());
    let data = pattern(100_000, 3);
    ra.write_at(0, &data).unwrap();
    p.b.core
        .post_recv(qb, recv_wr(7, &[(sb, 0, 200_000)]))
        .unwrap();
    p.a.core
        .post_send(qa, send_wr(1, SendOp::Send, &[(sa, 0, 100_000)]))
        .unwrap();
    p.run_until(5000, |p| {
        p.a.completions.len() == 1 && p.b.completions.len() == 1
    });
    let ca = p.a.take_completions();
    let cb = p.b.take_completions();
    assert_eq!(ca[0].status, WcStatus::Success);
    assert_eq!(cb[0].wr_id, 7);
    assert_eq!(cb[0].opcode, WcOpcode::Recv);
    assert_eq!(cb[0].byte_len, 100_000);
    assert_eq!(read_region(&rb, 0, 100_000), data);

    // RDMA Write into B at 300000, then Read it back into A at 500000.
    p.a.core
        .post_send(
            qa,
            send_wr(
                2,
                SendOp::Write {
                    remote_stag: sb.0,
                    remote_to: 300_000,
                },
                &[(sa, 0, 50_000), (sa, 60_000, 40_000)],
            ),
        )
        .unwrap();
    p.a.core
        .post_send(
            qa,
            send_wr(
                3,
                SendOp::Read {
                    remote_stag: sb.0,
                    remote_to: 300_000,
                },
                &[(sa, 500_000, 90_000)],
            ),
        )
        .unwrap();
    p.run_until(5000, |p| p.a.completions.len() == 2);
    let ca = p.a.take_completions();
    assert_eq!((ca[0].wr_id, ca[0].status), (2, WcStatus::Success));
    assert_eq!(
        (ca[1].wr_id, ca[1].status, ca[1].byte_len),
        (3, WcStatus::Success, 90_000)
    );
    let mut expect = data[..50_000].to_vec();
    expect.extend_from_slice(&data[60_000..100_000]);
    assert_eq!(read_region(&rb, 300_000, 90_000), expect);
    assert_eq!(read_region(&ra, 500_000, 90_000), expect);
    let _ = Access::LOCAL_WRITE;
}
