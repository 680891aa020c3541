//! The transmit path's buffers and completions: a request sent from registered memory
//! completes only once TCP no longer reads its buffer (RDMAP-5.5-8), and a Read Response
//! read from memory never shows a later atomic (RFC 7306 §5.4 rule 8).

mod common;

use std::sync::Arc;

use common::*;
use warpcore_engine::mem::{Access, Region, Stag};
use warpcore_engine::{CmEvent, ConnError, DisconnectCause, MpaParams, QpId, SendOp, WcStatus};

/// A's QP, its local keys checked when a request starts (not at post), connected to B's.
fn connect_late_checks(p: &mut Pair) -> QpId {
    let (qa, shared) = p.a.qp_shared(64);
    shared.set_sges_checked_at_post(false).unwrap();
    let qb = p.b.qp(64);
    p.b.core.listen(PORT, MpaParams::default()).unwrap();
    p.a.core
        .connect(qa, (ip(2), PORT), &MpaParams::default(), b"")
        .unwrap();
    let req = p.wait_request();
    p.b.core.accept(req.request, qb, b"", None).unwrap();
    p.run_until_established();
    qa
}

fn write(remote_stag: u32, remote_to: u64) -> SendOp {
    SendOp::Write {
        remote_stag,
        remote_to,
    }
}

/// RDMAP-5.5-8, RDMAP-5.5-7 (docs/engine.md departure 1: a Send or Write sent from
/// registered memory completes once TCP has it acknowledged, since a retransmission reads
/// its buffer again). A Write sent from registered memory is queued whole in TCP, none of
/// it acknowledged (B does not run), when a later request fails locally (its local key,
/// not checked at post, is bad): A sends a Terminate behind the Write's FPDUs and closes
/// gracefully, so TCP still sends and resends them from the buffer. The Write must not
/// complete (successfully or not: either hands the buffer back) while TCP may still read
/// it; an application that scribbles over a buffer the moment its request completes must
/// never see its scribble placed at the peer.
#[test]
fn rdmap_5_5_8_a_flushed_write_from_memory_does_not_hand_back_a_buffer_tcp_still_reads() {
    let mut p = Pair::default_pair();
    let qa = connect_late_checks(&mut p);
    let (ra, sa) = p.a.region(1 << 20, all_access());
    let (rb, sb) = p.b.region(1 << 20, all_access());
    let len = 300_000usize;
    // No octet of the data is the scribble's.
    let data: Vec<u8> = pattern(len, 7)
        .into_iter()
        .map(|b| if b == 0xEE { 0x11 } else { b })
        .collect();
    ra.write_at(0, &data).unwrap();
    p.a.take_completions();
    post_a(&mut p, qa, 1, write(sb.0, 0), &[(sa, 0, len as u32)]);
    // A bad local key (not checked at post): the request fails when it starts.
    post_a(&mut p, qa, 2, SendOp::Send, &[(Stag(sa.0 ^ 0x5a), 0, 16)]);
    let mut scribbled = Vec::new();
    let scribble = |p: &mut Pair, scribbled: &mut Vec<(u64, WcStatus)>| {
        for c in p.a.take_completions() {
            if c.wr_id == 1 {
                // The buffer is the application's again: reused at once.
                ra.fill(0, len, 0xEE).unwrap();
            }
            scribbled.push((c.wr_id, c.status));
        }
    };
    // B does not run: nothing is acknowledged.
    for _ in 0..100 {
        p.run_a_alone(1);
        scribble(&mut p, &mut scribbled);
    }
    assert!(
        p.a.events
            .iter()
            .any(|e| matches!(e, CmEvent::Error { .. })),
        "A failed: {:?}",
        p.a.events
    );
    assert!(p.a.core.stats().tx_from_memory_octets > 200_000);
    p.run_until(50_000, |p| {
        scribble(p, &mut scribbled);
        p.b.events
            .iter()
            .any(|e| matches!(e, CmEvent::Error { .. }))
            && scribbled.len() == 2
    });
    p.run(2000);
    scribble(&mut p, &mut scribbled);
    let sink = read_region(&rb, 0, len);
    let placed_scribble = sink.iter().filter(|&&b| b == 0xEE).count();
    assert_eq!(
        placed_scribble, 0,
        "B placed {placed_scribble} octets the application wrote after the Write completed \
         ({scribbled:?})"
    );
    assert_eq!(scribbled.len(), 2, "{scribbled:?}");
    assert_eq!(
        scribbled[1],
        (2, WcStatus::LocalProtection),
        "{scribbled:?}"
    );
    // Completed successfully only once all of it was acknowledged: B holds all of it.
    match scribbled[0] {
        (1, WcStatus::Success) => assert!(sink == data, "a Write completed but not all placed"),
        (1, WcStatus::FlushErr) => {}
        other => panic!("the Write completed as {other:?}"),
    }
}

/// RDMAP-5.5-7 (a Send or Write is not reported complete before DDP completed it) and
/// departure 1: a Write sent from registered memory completes successfully only once TCP
/// has it acknowledged. Aborted with none of it acknowledged (B does not run; most of it
/// never left A), it completes flushed, not successfully: the peer may hold none of it.
#[test]
fn rdmap_5_5_8_an_aborted_write_from_memory_never_acknowledged_is_not_a_success() {
    let mut p = Pair::default_pair();
    let (qa, _qb) = p.connect();
    let (ra, sa) = p.a.region(1 << 20, all_access());
    let (_rb, sb) = p.b.region(1 << 20, all_access());
    let len = 300_000usize;
    ra.write_at(0, &pattern(len, 9)).unwrap();
    p.a.take_completions();
    post_a(&mut p, qa, 1, write(sb.0, 0), &[(sa, 0, len as u32)]);
    p.run_a_alone(100);
    assert!(p.a.core.stats().tx_from_memory_octets > 200_000);
    assert!(p.a.take_completions().is_empty());
    p.a.core.abort(qa).unwrap();
    p.run_a_alone(5);
    let c = p.a.take_completions();
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(
        (c[0].wr_id, c[0].status),
        (1, WcStatus::FlushErr),
        "a Write none of which was acknowledged completed as {:?}",
        c[0].status
    );
}

/// A's QP, failed (a later request's bad local key, not checked at post) behind a Write of
/// 300,000 octets sent from registered memory, none of it acknowledged (B does not run):
/// its Terminate and FIN went out behind the Write's FPDUs. Then destroyed, and the
/// application writes 0xEE over its buffer at once. Returns B's sink and the Write's data
/// (which holds no 0xEE).
fn destroyed_behind_an_unacknowledged_write(p: &mut Pair, salt: u8) -> (Arc<Region>, Vec<u8>) {
    let qa = connect_late_checks(p);
    let (ra, sa) = p.a.region(1 << 20, all_access());
    let (rb, sb) = p.b.region(1 << 20, all_access());
    let len = 300_000usize;
    let data: Vec<u8> = pattern(len, salt)
        .into_iter()
        .map(|b| if b == 0xEE { 0x11 } else { b })
        .collect();
    ra.write_at(0, &data).unwrap();
    post_a(p, qa, 1, write(sb.0, 0), &[(sa, 0, len as u32)]);
    post_a(p, qa, 2, SendOp::Send, &[(Stag(sa.0 ^ 0x5a), 0, 16)]);
    p.run_a_alone(100);
    assert!(p
        .a
        .events
        .iter()
        .any(|e| matches!(e, CmEvent::Error { .. })));
    assert!(p.a.core.stats().tx_from_memory_octets > 200_000);
    p.a.core.destroy_qp(qa).unwrap();
    // The QP is gone: its buffers are the application's.
    ra.fill(0, len, 0xEE).unwrap();
    (rb, data)
}

/// RDMAP-5.5-8: a QP destroyed while TCP may still (re)send FPDUs of its requests from
/// registered memory (it failed and sent its Terminate and FIN behind a Write none of
/// which B acknowledged yet): the application owns every buffer once the QP is gone, so
/// nothing may read them again; what it writes there must never reach the peer.
#[test]
fn rdmap_5_5_8_a_destroyed_qp_leaves_no_reader_of_its_buffers() {
    let mut p = Pair::default_pair();
    let (rb, data) = destroyed_behind_an_unacknowledged_write(&mut p, 3);
    p.run(5000);
    let sink = read_region(&rb, 0, data.len());
    let placed = sink.iter().filter(|&&b| b == 0xEE).count();
    assert_eq!(
        placed, 0,
        "B placed {placed} octets written after the QP was destroyed"
    );
}

/// RDMAP-5.4-5/6, RDMAP-7.1-4 and RDMAP-5.5-8 together: a QP destroyed after it failed
/// and sent its Terminate and FIN behind a Write from registered memory that B has not
/// acknowledged yet (B does not run). The buffers are the application's once the QP is
/// gone, but the graceful close is under way: TCP keeps a copy of what it still has to
/// send of the Write, so B receives the whole Write and then the Terminate, which it
/// reports (`RemoteTerminate`), and never a reset, which could overtake the Terminate;
/// nothing the application writes into its buffer afterwards reaches B.
#[test]
fn rdmap_5_4_a_qp_destroyed_after_its_terminate_still_delivers_it_and_the_data_before() {
    let mut p = Pair::default_pair();
    let (rb, data) = destroyed_behind_an_unacknowledged_write(&mut p, 5);
    let is_end = |e: &CmEvent| matches!(e, CmEvent::Error { .. } | CmEvent::Disconnected { .. });
    p.run_until(50_000, |p| p.b.events.iter().any(is_end));
    p.run(2000);
    let sink = read_region(&rb, 0, data.len());
    let placed = sink.iter().filter(|&&b| b == 0xEE).count();
    assert_eq!(
        placed, 0,
        "B placed {placed} octets written after the QP was destroyed"
    );
    let ends: Vec<_> = p.b.events.iter().filter(|e| is_end(e)).collect();
    assert!(
        matches!(
            ends.first(),
            Some(CmEvent::Error {
                error: ConnError::RemoteTerminate(_),
                ..
            })
        ),
        "B did not report A's Terminate first: {ends:?}"
    );
    assert!(
        !ends.iter().any(|e| matches!(
            e,
            CmEvent::Error {
                error: ConnError::TcpReset,
                ..
            } | CmEvent::Disconnected {
                cause: DisconnectCause::Reset,
                ..
            }
        )),
        "A reset the connection: {ends:?}"
    );
    assert!(sink == data, "B does not hold the whole Write");
}

/// RFC 7306 §5.4 rule 8 and §7's table (RDMA Read then Atomic: "Atomic Response Message
/// will not be generated until RDMA Read Response has been generated"), EXT-5.2.2-6;
/// docs/engine.md departure 16 ("a Read Request before an Atomic Request never sees the
/// atomic's result"). B answers a Read of 64 KiB from registered memory (its FPDUs are
/// read from the region when TCP sends them, module `txrec`), then a FetchAdd on the
/// first word of that range, requested after the Read: the Read must return the word as
/// it was before the FetchAdd.
#[test]
fn ext_5_2_2_6_a_read_response_from_memory_does_not_see_a_later_atomic() {
    let mut p = Pair::default_pair();
    let params = MpaParams {
        ird: 4,
        ord: 4,
        ..Default::default()
    };
    let (qa, shared_a) = p.a.qp_shared(64);
    shared_a.set_rfc7306(true);
    let (qb, shared_b) = p.b.qp_shared(64);
    shared_b.set_rfc7306(true);
    p.b.core.listen(PORT, params.clone()).unwrap();
    p.a.core.connect(qa, (ip(2), PORT), &params, b"").unwrap();
    let req = p.wait_request();
    p.b.core.accept(req.request, qb, b"", None).unwrap();
    p.run_until_established();
    p.a.take_events();
    p.b.take_events();
    let (ra, sa) = p.a.region(1 << 20, all_access());
    let (rb, sb) = p.b.region(1 << 20, all_access() | Access::REMOTE_ATOMIC);
    let len = 65_536usize;
    let data = pattern(len, 4);
    rb.write_at(0, &data).unwrap();
    let before = u64::from_le_bytes(data[..8].try_into().unwrap());
    let tx_mem = p.b.core.stats().tx_from_memory_octets;
    post_a(
        &mut p,
        qa,
        1,
        SendOp::Read {
            remote_stag: sb.0,
            remote_to: 0,
        },
        &[(sa, 0, len as u32)],
    );
    post_a(
        &mut p,
        qa,
        2,
        SendOp::AtomicFetchAdd {
            remote_stag: sb.0,
            remote_to: 0,
            add: 1,
            add_mask: 0,
        },
        &[(sa, 1 << 19, 8)],
    );
    p.run_until(20_000, |p| p.a.completions.len() == 2);
    let c = p.a.take_completions();
    assert_eq!((c[0].wr_id, c[0].status), (1, WcStatus::Success), "{c:?}");
    assert_eq!((c[1].wr_id, c[1].status), (2, WcStatus::Success), "{c:?}");
    assert_eq!(c[1].atomic_orig, Some(before));
    assert!(
        p.b.core.stats().tx_from_memory_octets - tx_mem >= len as u64 - 2048,
        "the Read Response went from registered memory"
    );
    let got = read_region(&ra, 0, len);
    assert_eq!(
        u64::from_le_bytes(got[..8].try_into().unwrap()),
        before,
        "the Read saw the FetchAdd requested after it"
    );
    assert_eq!(got, data);
}
