//! RDMAP conformance rows (draft-ietf-rddp-rdmap-06, final RFC 5040) checked end to end
//! between two engine cores: what reaches the responder's ULP, the order in which Writes,
//! Sends and Reads take effect, and a completion queue overrun that must not spill onto
//! other streams. The matrix in `docs/conformance.md` lists each row with its test.

mod common;

use std::sync::Arc;

use common::*;
use warpcore_engine::{
    CmEvent, CompletionQueue, ConnError, EngineConfig, MpaParams, SendOp, WcOpcode, WcStatus,
};

/// RDMAP-5.1-2, RDMAP-5.2.1-3, RDMAP-5.2.1-4: a valid RDMA Write is placed and a valid Read
/// Request is answered by the responder's RDMAP layer, and neither is delivered to the
/// responder's ULP: no completion, no event, and its posted receive is still there for the
/// next Send.
#[test]
fn writes_and_read_requests_never_reach_the_responders_ulp() {
    let mut p = Pair::default_pair();
    let (qa, qb) = p.connect();
    let (ra, sa) = p.a.region(1 << 16, all_access());
    let (rb, sb) = p.b.region(1 << 16, all_access());
    let data = pattern(20_000, 9);
    ra.write_at(0, &data).unwrap();
    p.b.core
        .post_recv(qb, recv_wr(77, &[(sb, 40_000, 100)]))
        .unwrap();
    post_a(&mut p, qa, 1, write_op(sb.0, 0), &[(sa, 0, 20_000)]);
    post_a(&mut p, qa, 2, read_op(sb.0, 0), &[(sa, 30_000, 20_000)]);
    post_a(&mut p, qa, 3, read_op(sb.0, 0), &[]);
    p.run_until(5000, |p| p.a.completions.len() == 3);
    p.run(200);
    let ca = p.a.take_completions();
    assert!(ca.iter().all(|c| c.status == WcStatus::Success), "{ca:?}");
    assert_eq!(read_region(&rb, 0, 20_000), data, "the Write was placed");
    assert_eq!(read_region(&ra, 30_000, 20_000), data, "the Read answered");
    assert!(p.b.take_completions().is_empty(), "nothing delivered to B");
    assert!(p.b.take_events().is_empty(), "no event at B");
    // The receive B posted is untouched: the next Send takes it.
    post_a(&mut p, qa, 4, SendOp::Send, &[(sa, 0, 100)]);
    p.run_until(5000, |p| p.b.completions.len() == 1);
    let cb = p.b.take_completions();
    assert_eq!(
        (cb[0].wr_id, cb[0].opcode, cb[0].byte_len),
        (77, WcOpcode::Recv, 100)
    );
    assert_eq!(read_region(&rb, 40_000, 100), data[..100]);
}

/// RDMAP-5.1-4, RDMAP-5.3-4, RDMAP-5.3-7, DDP-5.3-6 (through the engine), RDMAP-5.2.1-6,
/// RDMAP-5.2.1-7, RDMAP-5.5-3: over a link that loses frames, Writes take effect in the
/// order they were posted (the last of sixteen Writes to one place wins), Sends are issued
/// and delivered in posted order (the n-th Send fills the n-th receive, whose completions
/// come in order), and Reads are issued, answered and completed in posted order with the
/// right octets in each sink.
#[test]
fn writes_sends_and_reads_keep_their_posted_order() {
    let link = lossy_link(0.03, (0x71, 0x72));
    let mut p = Pair::new(&link, &EngineConfig::default());
    let (qa, qb) = p.connect();
    let (ra, sa) = p.a.region(1 << 20, all_access());
    let (rb, sb) = p.b.region(1 << 20, all_access());
    const N: u64 = 16;
    const LEN: usize = 3000;
    for i in 0..N {
        ra.write_at(i as usize * LEN, &pattern(LEN, i as u8 + 1))
            .unwrap();
        rb.write_at(500_000 + i as usize * LEN, &pattern(LEN, 100 + i as u8))
            .unwrap();
    }
    // Writes: all sixteen to B's offset 0.
    for i in 0..N {
        post_a(
            &mut p,
            qa,
            i,
            write_op(sb.0, 0),
            &[(sa, i * LEN as u64, LEN as u32)],
        );
    }
    p.run_until(20_000, |p| p.a.completions.len() == N as usize);
    let ca = p.a.take_completions();
    assert!(ca.iter().all(|c| c.status == WcStatus::Success));
    assert_eq!(read_region(&rb, 0, LEN), pattern(LEN, N as u8), "last wins");

    // Sends: sixteen receives, each its own slot at B.
    for i in 0..N {
        p.b.core
            .post_recv(
                qb,
                recv_wr(100 + i, &[(sb, 100_000 + i * LEN as u64, LEN as u32)]),
            )
            .unwrap();
    }
    for i in 0..N {
        post_a(
            &mut p,
            qa,
            100 + i,
            SendOp::Send,
            &[(sa, i * LEN as u64, LEN as u32)],
        );
    }
    p.run_until(20_000, |p| {
        p.a.completions.len() == N as usize && p.b.completions.len() == N as usize
    });
    let cb = p.b.take_completions();
    let ids: Vec<_> = cb.iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, (100..100 + N).collect::<Vec<_>>());
    for i in 0..N as usize {
        assert_eq!(
            read_region(&rb, 100_000 + i * LEN, LEN),
            pattern(LEN, i as u8 + 1),
            "Send {i} filled receive {i}"
        );
    }
    p.a.take_completions();

    // Reads: sixteen of distinct sources into distinct sinks.
    for i in 0..N {
        post_a(
            &mut p,
            qa,
            200 + i,
            read_op(sb.0, 500_000 + i * LEN as u64),
            &[(sa, 200_000 + i * LEN as u64, LEN as u32)],
        );
    }
    p.run_until(20_000, |p| p.a.completions.len() == N as usize);
    let ca = p.a.take_completions();
    let got: Vec<_> = ca.iter().map(|c| (c.wr_id, c.status)).collect();
    let want: Vec<_> = (200..200 + N).map(|i| (i, WcStatus::Success)).collect();
    assert_eq!(got, want);
    for i in 0..N as usize {
        assert_eq!(
            read_region(&ra, 200_000 + i * LEN, LEN),
            pattern(LEN, 100 + i as u8),
            "Read {i}"
        );
    }
}

/// RDMAP-8.1.1-12: a completion queue that overruns fails the stream feeding it and leaves
/// a stream on another completion queue as it was: its Sends, Writes and Reads keep
/// completing, byte for byte, after the overrun.
#[test]
fn a_cq_overrun_leaves_streams_on_other_queues_alone() {
    let mut p = Pair::default_pair();
    let (qa1, qb1) = p.connect();
    // A second stream into B whose completions go to a queue of two nobody polls.
    let qa2 = p.a.qp(64);
    let small = Arc::new(CompletionQueue::new(2).unwrap());
    let (qb2, _) = p.b.core.create_qp(qp_attr(&small, 64, 4)).expect("qp");
    p.a.core
        .connect(qa2, (ip(2), PORT), &MpaParams::default(), b"")
        .expect("connect");
    let req = p.wait_request();
    p.b.core
        .accept(req.request, qb2, b"", None)
        .expect("accept");
    p.run_until_established();
    let (ra, sa) = p.a.region(1 << 16, all_access());
    let (rb, sb) = p.b.region(1 << 16, all_access());
    let data = pattern(4000, 5);
    ra.write_at(0, &data).unwrap();
    for i in 0..8 {
        p.b.core
            .post_recv(qb2, recv_wr(i, &[(sb, 8000 + i * 64, 64)]))
            .unwrap();
        post_a(&mut p, qa2, i, SendOp::Send, &[(sa, 0, 16)]);
    }
    let mut overrun = false;
    p.run_until(20_000, |p| {
        for e in p.b.take_events() {
            if let CmEvent::Error { qp, error } = e {
                overrun |= qp == qb2 && error == ConnError::CqOverrun;
            }
        }
        overrun
    });
    p.a.take_completions();
    p.a.take_events();
    // The first stream still works in both directions.
    p.b.core
        .post_recv(qb1, recv_wr(50, &[(sb, 20_000, 4000)]))
        .unwrap();
    post_a(&mut p, qa1, 51, SendOp::Send, &[(sa, 0, 4000)]);
    post_a(&mut p, qa1, 52, write_op(sb.0, 30_000), &[(sa, 0, 4000)]);
    post_a(
        &mut p,
        qa1,
        53,
        read_op(sb.0, 30_000),
        &[(sa, 40_000, 4000)],
    );
    p.run_until(5000, |p| {
        p.a.completions.len() == 3 && p.b.completions.len() == 1
    });
    let ca: Vec<_> =
        p.a.take_completions()
            .iter()
            .map(|c| (c.wr_id, c.status))
            .collect();
    assert_eq!(
        ca,
        [
            (51, WcStatus::Success),
            (52, WcStatus::Success),
            (53, WcStatus::Success)
        ]
    );
    let cb = p.b.take_completions();
    assert_eq!((cb[0].wr_id, cb[0].status), (50, WcStatus::Success));
    assert_eq!(read_region(&rb, 20_000, 4000), data);
    assert_eq!(read_region(&ra, 40_000, 4000), data);
    assert!(p.b.core.qp_state(qb1).is_ok());
    assert!(!p.b.take_events().iter().any(|e| matches!(
        e,
        CmEvent::Error { qp, .. } | CmEvent::Disconnected { qp, .. } if *qp == qb1
    )));
}
