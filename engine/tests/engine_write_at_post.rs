//! A plain one-FPDU RDMA Write posted to an empty send queue is framed when it is posted
//! (`Qp::write_at_post`); the next loop gives its slot and completion back before anything
//! else and sends it. Anything ahead of it in the send queue keeps it there, so completions
//! stay in submission order (RDMAP-5.5-8). `engine_fast_paths.rs` holds its wire traffic,
//! completions and placement to the general path's.

mod common;

use common::*;
use warpcore_engine::core::set_general_paths_only;
use warpcore_engine::mem::Access;
use warpcore_engine::tcp::link::LinkConfig;
use warpcore_engine::tcp::smoltcp::time::Duration;
use warpcore_engine::{
    EngineConfig, EngineError, MpaParams, RtrType, RtrTypes, SendOp, SendWr, WcOpcode, WcStatus,
};

/// Four 64 B Writes posted to a QP of send queue depth 4 with no loop in between, and a
/// fifth: returns the FPDUs counted as sent right after the four posts and the fifth
/// post's outcome, then (one loop of A run) checks that the four completed in order and,
/// all loops run, that B received them.
fn four_writes_without_a_loop(general: bool) -> (u64, Result<(), EngineError>) {
    set_general_paths_only(general);
    let mut p = Pair::default_pair();
    let (qa, _qb) = p.connect_with(&Default::default(), &Default::default(), 4);
    let (ra, sa) = p.a.region(4096, all_access());
    let (rb, sb) = p.b.region(4096, all_access());
    ra.write_at(0, &pattern(512, 5)).unwrap();
    let fpdus_before = p.a.core.stats().fpdus_tx;
    let write = |k: u64| send_wr(k + 1, write_op(sb.0, k * 64), &[(sa, k * 64, 64)]);
    for k in 0..4u64 {
        p.a.core.post_send(qa, write(k)).unwrap();
    }
    let framed = p.a.core.stats().fpdus_tx - fpdus_before;
    // Each holds its slot until a loop gives it back, whichever path took it.
    let fifth = p.a.core.post_send(qa, write(4));
    assert!(p.a.cq.is_empty(), "nothing completes before a loop");
    p.run_a_alone(1);
    let ids: Vec<_> =
        p.a.take_completions()
            .into_iter()
            .map(|c| {
                assert_eq!(
                    (c.opcode, c.status, c.byte_len),
                    (WcOpcode::Write, WcStatus::Success, 64)
                );
                c.wr_id
            })
            .collect();
    assert_eq!(ids, [1, 2, 3, 4], "one loop completes the four, in order");
    assert_eq!(p.a.core.stats().fpdus_tx - fpdus_before, 4);
    p.run_until(200, |_| read_region(&rb, 0, 256) == pattern(512, 5)[..256]);
    assert!(p.a.take_completions().is_empty() && p.b.take_completions().is_empty());
    assert!(p.a.take_events().is_empty() && p.b.take_events().is_empty());
    set_general_paths_only(false);
    (framed, fifth)
}

#[test]
fn writes_posted_to_an_idle_queue_are_framed_at_post_and_complete_with_the_next_loop() {
    assert_eq!(
        four_writes_without_a_loop(false),
        (4, Err(EngineError::QueueFull))
    );
}

/// The judge above fails without the path: under the general paths a Write waits in the
/// send queue for the loop to frame it.
#[test]
fn without_the_path_nothing_is_framed_at_post() {
    assert_eq!(
        four_writes_without_a_loop(true),
        (0, Err(EngineError::QueueFull))
    );
}

/// A Write behind a Send, an unsignalled Write, a Read or a fenced Write behind a Read stays
/// in the send queue: nothing completes at post, and the completions come in submission
/// order once the loops ran.
#[test]
fn a_write_behind_queued_requests_waits_its_turn() {
    set_general_paths_only(false);
    let mut p = Pair::default_pair();
    let (qa, qb) = p.connect_with(&Default::default(), &Default::default(), 16);
    let (ra, sa) = p.a.region(4096, all_access());
    let (rb, sb) = p.b.region(4096, all_access() | Access::REMOTE_READ);
    ra.write_at(0, &pattern(1024, 1)).unwrap();
    rb.write_at(2048, &pattern(64, 9)).unwrap();
    p.b.core
        .post_recv(qb, recv_wr(100, &[(sb, 1024, 64)]))
        .unwrap();
    post_a(&mut p, qa, 1, SendOp::Send, &[(sa, 0, 64)]);
    post_a(&mut p, qa, 2, write_op(sb.0, 0), &[(sa, 64, 64)]);
    let unsignalled = SendWr {
        signaled: false,
        ..send_wr(3, write_op(sb.0, 64), &[(sa, 128, 64)])
    };
    p.a.core.post_send(qa, unsignalled).unwrap();
    post_a(&mut p, qa, 4, read_op(sb.0, 2048), &[(sa, 2048, 64)]);
    let fenced = SendWr {
        fence: true,
        ..send_wr(5, write_op(sb.0, 128), &[(sa, 192, 64)])
    };
    p.a.core.post_send(qa, fenced).unwrap();
    assert!(p.a.cq.is_empty(), "nothing completes before a loop");
    p.run_until(500, |p| p.a.completions.len() == 4);
    let ids: Vec<_> = p.a.take_completions().iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, [1, 2, 4, 5]);
    assert_eq!(read_region(&rb, 0, 192), pattern(1024, 1)[64..256]);
    assert_eq!(read_region(&ra, 2048, 64), pattern(64, 9));
    // Idle again: the next Write is framed at post, and completes with the next loop.
    let fpdus = p.a.core.stats().fpdus_tx;
    post_a(&mut p, qa, 6, write_op(sb.0, 512), &[(sa, 512, 64)]);
    assert_eq!(p.a.core.stats().fpdus_tx - fpdus, 1);
    assert!(p.a.cq.is_empty());
    p.run_a_alone(1);
    let ids: Vec<_> = p.a.take_completions().iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, [6]);
}

/// An initiator's Read RTR (MPA2-5-1, RFC 6581) is a zero-length Read outstanding in the
/// ORQ while its send queue is empty: a fenced Write posted before the Read Response came
/// back waits for it (as `tx_write_whole` and `start_sq` hold one), an unfenced one is
/// framed at post. B's answers are delayed 50 ms on the link so that the Read is still outstanding.
#[test]
fn a_fenced_write_waits_for_the_read_rtr() {
    for fence in [true, false] {
        set_general_paths_only(false);
        let mut link = LinkConfig::default();
        link.faults_ba.latency = Duration::from_millis(50);
        let mut p = Pair::new(&link, &EngineConfig::default());
        let pa = MpaParams {
            rtr_offer: RtrTypes::only(RtrType::Read),
            ..Default::default()
        };
        let pb = MpaParams {
            rtr_accept: RtrTypes::only(RtrType::Read),
            ..Default::default()
        };
        let (qa, _qb) = p.connect_with(&pa, &pb, 16);
        p.run_a_alone(3);
        let s = p.a.core.stats();
        assert_eq!(
            (s.fpdus_tx, s.fpdus_rx),
            (1, 0),
            "the RTR out, its answer not back"
        );
        let (ra, sa) = p.a.region(4096, all_access());
        let (rb, sb) = p.b.region(4096, all_access());
        ra.write_at(0, &pattern(64, 3)).unwrap();
        let wr = SendWr {
            fence,
            ..send_wr(1, write_op(sb.0, 0), &[(sa, 0, 64)])
        };
        p.a.core.post_send(qa, wr).unwrap();
        let framed = p.a.core.stats().fpdus_tx - s.fpdus_tx;
        assert_eq!(framed, u64::from(!fence), "fence {fence}");
        p.run_until(2000, |_| read_region(&rb, 0, 64) == pattern(64, 3));
        p.run_until(100, |p| !p.a.completions.is_empty() || !fence);
        let mut ids: Vec<_> = p.a.take_completions().iter().map(|c| c.wr_id).collect();
        ids.extend(std::iter::from_fn(|| p.a.cq.pop().map(|c| c.wr_id)));
        assert_eq!(ids, [1]);
    }
}

/// A Write validated by an application thread whose region is deregistered before the core
/// takes it: the copy at post finds no region, nothing is sent, and the request goes into
/// the send queue, where the general path reports it as for any request whose source went
/// away (a local protection completion, a local catastrophic Terminate, the QP in error).
#[test]
fn a_write_whose_region_went_away_before_the_post_is_left_to_the_general_path() {
    set_general_paths_only(false);
    let mut p = Pair::default_pair();
    let (qa, shared) = p.connect_shared(16);
    let (_ra, sa) = p.a.region(4096, all_access());
    let (_rb, sb) = p.b.region(4096, all_access());
    let fpdus = p.a.core.stats().fpdus_tx;
    let wr = send_wr(5, write_op(sb.0, 0), &[(sa, 0, 64)]);
    warpcore_engine::validate_send(&shared, &p.a.mrs, &wr).unwrap();
    p.a.mrs.deregister(sa).unwrap();
    p.a.core.post_send_reserved(qa, wr);
    assert!(p.a.cq.is_empty(), "no completion at post");
    assert_eq!(p.a.core.stats().fpdus_tx, fpdus, "nothing framed");
    let (_, eb) = p.run_until_both_fail(3000);
    let ca = p.a.take_completions();
    assert_eq!((ca[0].wr_id, ca[0].status), (5, WcStatus::LocalProtection));
    let rep = received_terminate(&eb);
    assert_eq!((rep.code.layer(), rep.code.etype()), (0, 0));
}

/// Small Writes posted with no loop in between until the TCP send buffer is full: those
/// that found room were framed at post, the first that found none went into the send queue
/// and every later one behind it; all arrive, and the completions come in posting order.
#[test]
fn writes_that_find_no_room_at_post_queue_in_order() {
    set_general_paths_only(false);
    let mut cfg = EngineConfig::default();
    cfg.tcp.tx_buffer = 2 * 65536;
    let mut p = Pair::new(&LinkConfig::default(), &cfg);
    let (qa, _qb) = p.connect_with(&Default::default(), &Default::default(), 1024);
    let (ra, sa) = p.a.region(1 << 20, all_access());
    let (rb, sb) = p.b.region(1 << 20, all_access());
    let (n, len) = (1000u64, 200u64);
    ra.write_at(0, &pattern((len * n) as usize, 8)).unwrap();
    let fpdus = p.a.core.stats().fpdus_tx;
    for k in 0..n {
        post_a(
            &mut p,
            qa,
            k,
            write_op(sb.0, k * len),
            &[(sa, k * len, len as u32)],
        );
    }
    let framed = p.a.core.stats().fpdus_tx - fpdus;
    assert!(framed > 100 && framed < n, "{framed} of {n} framed at post");
    p.run_until(20_000, |p| p.a.completions.len() as u64 == n);
    let ids: Vec<_> = p.a.take_completions().iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, (0..n).collect::<Vec<_>>());
    assert_eq!(
        read_region(&rb, 0, (len * n) as usize),
        pattern((len * n) as usize, 8)
    );
}

/// A Write framed at post, then a disconnect, then a request posted before the disconnect
/// was seen (validated in RTS, taken after it: flushed at once): the Write completes first
/// (RDMAP-5.5-8), with success, and the flushed request after it.
#[test]
fn a_request_flushed_after_a_disconnect_completes_after_the_write_framed_at_post() {
    set_general_paths_only(false);
    let mut p = Pair::default_pair();
    let (qa, shared) = p.connect_shared(16);
    let (_ra, sa) = p.a.region(4096, all_access());
    let (_rb, sb) = p.b.region(4096, all_access());
    // A first Write through the loop fixes the MULPDU; the next ones are framed at post.
    post_a(&mut p, qa, 1, write_op(sb.0, 0), &[(sa, 0, 64)]);
    p.run_until(200, |p| p.a.completions.len() == 1);
    p.a.take_completions();
    let fpdus = p.a.core.stats().fpdus_tx;
    post_a(&mut p, qa, 2, write_op(sb.0, 64), &[(sa, 64, 64)]);
    assert_eq!(p.a.core.stats().fpdus_tx - fpdus, 1, "framed at post");
    let late = send_wr(3, write_op(sb.0, 128), &[(sa, 128, 64)]);
    warpcore_engine::validate_send(&shared, &p.a.mrs, &late).unwrap();
    p.a.core.disconnect(qa).unwrap();
    p.a.core.post_send_reserved(qa, late);
    let got: Vec<_> = std::iter::from_fn(|| p.a.cq.pop())
        .map(|c| (c.wr_id, c.status))
        .collect();
    assert_eq!(
        got,
        [(2, WcStatus::Success), (3, WcStatus::FlushErr)],
        "in submission order"
    );
}
