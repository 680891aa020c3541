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

fn write(remote_stag: u32, remote_to: u64) -> SendOp {
    SendOp::Write {
        remote_stag,
        remote_to,
    }
}

fn read(remote_stag: u32, remote_to: u64) -> SendOp {
    SendOp::Read {
        remote_stag,
        remote_to,
    }
}

/// RDMAP-5.3-2/3 (solicited event), RDMAP-5.3-11 (Send with Invalidate): every Send type
/// arrives, reports its flags, and the invalidating ones invalidate the named STag, after
/// which a Write to it is refused with a Terminate.
#[test]
fn send_types_solicited_and_invalidate() {
    let mut p = Pair::default_pair();
    let (qa, qb) = p.connect();
    let (ra, sa) = p.a.region(4096, all_access());
    let (_rb, sb) = p.b.region(4096, all_access());
    // RDMAP-8.1.1-8: a region a peer may invalidate is registered for it.
    let (_rx1, inv1) = p.b.region(4096, all_access() | Access::REMOTE_INVALIDATE);
    let (_rx2, inv2) = p.b.region(4096, all_access() | Access::REMOTE_INVALIDATE);
    ra.write_at(0, b"abcdefgh").unwrap();
    for i in 0..4 {
        p.b.core
            .post_recv(qb, recv_wr(10 + i, &[(sb, 1024 * i, 1024)]))
            .unwrap();
    }
    let ops = [
        SendOp::Send,
        SendOp::SendSe,
        SendOp::SendInvalidate { stag: inv1.0 },
        SendOp::SendSeInvalidate { stag: inv2.0 },
    ];
    for (i, op) in ops.into_iter().enumerate() {
        p.a.core
            .post_send(qa, send_wr(i as u64, op, &[(sa, 0, 8)]))
            .unwrap();
    }
    p.run_until(3000, |p| {
        p.b.completions.len() == 4 && p.a.completions.len() == 4
    });
    let cb = p.b.take_completions();
    let flags: Vec<_> = cb
        .iter()
        .map(|c| (c.wr_id, c.status, c.byte_len, c.solicited, c.invalidated))
        .collect();
    assert_eq!(
        flags,
        vec![
            (10, WcStatus::Success, 8, false, None),
            (11, WcStatus::Success, 8, true, None),
            (12, WcStatus::Success, 8, false, Some(inv1.0)),
            (13, WcStatus::Success, 8, true, Some(inv2.0)),
        ]
    );
    // The invalidated STag no longer accepts placement: DDP invalid STag (DDP-7.1-10).
    assert!(p.b.mrs.lookup(inv1, PD, Access::REMOTE_WRITE).is_err());
    p.a.core
        .post_send(qa, send_wr(9, write(inv1.0, 0), &[(sa, 0, 8)]))
        .unwrap();
    p.run_until(3000, |p| {
        p.a.events
            .iter()
            .any(|e| matches!(e, warpcore_engine::CmEvent::Error { .. }))
    });
    let ev = p.a.take_events();
    let warpcore_engine::CmEvent::Error {
        error: warpcore_engine::ConnError::RemoteTerminate(rep),
        ..
    } = &ev[0]
    else {
        panic!("expected a remote Terminate, got {ev:?}")
    };
    assert_eq!(
        (rep.code.layer(), rep.code.etype(), rep.code.code()),
        (1, 1, 0)
    );
}

/// DDP-5.2-9, RDMAP-5.2.1-13: zero-length Send, Write and Read all complete.
/// RDMAP-5.3-9: the zero-length Send consumes B's posted receive.
#[test]
fn zero_length_operations() {
    let mut p = Pair::default_pair();
    let (qa, qb) = p.connect();
    let (_ra, sa) = p.a.region(4096, all_access());
    let (_rb, sb) = p.b.region(4096, all_access());
    p.b.core.post_recv(qb, recv_wr(1, &[])).unwrap();
    p.a.core
        .post_send(qa, send_wr(1, SendOp::Send, &[]))
        .unwrap();
    p.a.core
        .post_send(qa, send_wr(2, write(sb.0, 0), &[]))
        .unwrap();
    p.a.core
        .post_send(qa, send_wr(3, read(sb.0, 0), &[(sa, 0, 0)]))
        .unwrap();
    p.a.core.post_send(qa, send_wr(4, read(0, 0), &[])).unwrap();
    p.run_until(3000, |p| {
        p.a.completions.len() == 4 && p.b.completions.len() == 1
    });
    let ca = p.a.take_completions();
    assert!(ca
        .iter()
        .all(|c| c.status == WcStatus::Success && c.byte_len == 0));
    assert_eq!(
        ca.iter().map(|c| c.opcode).collect::<Vec<_>>(),
        [
            WcOpcode::Send,
            WcOpcode::Write,
            WcOpcode::Read,
            WcOpcode::Read
        ]
    );
    let cb = p.b.take_completions();
    assert_eq!((cb[0].wr_id, cb[0].byte_len), (1, 0));
}

/// RDMAP-6.1-1 (ORD), RDMAP-5.5 ordering: many Reads outstanding, interleaved with
/// unsignalled Writes; completions come in submission order, unsignalled requests retire
/// silently, and every Read returns the right bytes.
#[test]
fn many_reads_ord_enforced_and_ordered_completions() {
    let mut p = Pair::default_pair();
    let small = warpcore_engine::MpaParams {
        ird: 2,
        ord: 2,
        ..Default::default()
    };
    let (qa, qb) = p.connect_with(&small, &small, 64);
    let (ra, sa) = p.a.region(1 << 20, all_access());
    let (rb, sb) = p.b.region(1 << 20, all_access());
    let src = pattern(1 << 20, 9);
    rb.write_at(0, &src).unwrap();
    let mut expect_ids = Vec::new();
    for i in 0..12u64 {
        let off = i * 20_000;
        p.a.core
            .post_send(qa, send_wr(100 + i, read(sb.0, off), &[(sa, off, 20_000)]))
            .unwrap();
        expect_ids.push(100 + i);
        let mut w = send_wr(200 + i, write(sb.0, 600_000 + off), &[(sa, 900_000, 10)]);
        w.signaled = i % 3 == 0;
        if w.signaled {
            expect_ids.push(200 + i);
        }
        p.a.core.post_send(qa, w).unwrap();
    }
    p.run_until(20_000, |p| p.a.completions.len() == expect_ids.len());
    let ca = p.a.take_completions();
    assert!(ca.iter().all(|c| c.status == WcStatus::Success));
    assert_eq!(ca.iter().map(|c| c.wr_id).collect::<Vec<_>>(), expect_ids);
    assert_eq!(read_region(&ra, 0, 240_000), src[..240_000]);
    let ia = p.a.core.qp_info(qa).unwrap();
    let ib = p.b.core.qp_info(qb).unwrap();
    assert_eq!((ia.ord, ib.ird), (2, 2));
    assert_eq!(ia.reads_in_flight_max, 2, "ORD caps the Reads in flight");
}

/// Local misuse is refused with a typed error and changes nothing (RDMAP-06 §8.2 local
/// checks): wrong state, bad SGEs, a full queue.
#[test]
fn local_misuse_is_refused_without_side_effects() {
    use warpcore_engine::EngineError as E;
    let mut p = Pair::default_pair();
    let idle = p.a.qp(2);
    let (_ra, sa) = p.a.region(4096, all_access());
    let (_ro, ro) = p.a.region(4096, Access::REMOTE_READ);
    assert_eq!(
        p.a.core
            .post_send(idle, send_wr(1, SendOp::Send, &[(sa, 0, 8)])),
        Err(E::InvalidState(warpcore_engine::QpState::Idle))
    );
    let (qa, _qb) = p.connect_with(&Default::default(), &Default::default(), 2);
    let cases = [
        (
            send_wr(1, SendOp::Send, &[(sa, 4000, 200)]),
            E::SgeOutOfBounds,
        ),
        (
            send_wr(
                1,
                SendOp::Send,
                &[(warpcore_engine::mem::Stag(0x7777), 0, 1)],
            ),
            E::SgeInvalidStag,
        ),
        (send_wr(1, read(1, 0), &[(ro, 0, 8)]), E::SgeAccess),
        (
            send_wr(1, read(1, 0), &[(sa, 0, 8), (sa, 8, 8)]),
            E::ReadSgeCount,
        ),
    ];
    for (wr, err) in cases {
        assert_eq!(p.a.core.post_send(qa, wr), Err(err));
    }
    assert_eq!(
        p.a.core.post_recv(qa, recv_wr(1, &[(ro, 0, 8)])),
        Err(E::SgeAccess)
    );
    let five = [(sa, 0, 1); 5];
    let too_many: Vec<_> = five.to_vec();
    assert!(warpcore_engine::SgeList::from_slice(
        &too_many
            .iter()
            .map(|&(s, to, len)| warpcore_engine::Sge { stag: s.0, to, len })
            .collect::<Vec<_>>()
    )
    .is_none());
    // Depth 2: the third post is refused while two are outstanding.
    p.a.core
        .post_send(qa, send_wr(1, write(1, 0), &[(sa, 0, 8)]))
        .unwrap();
    p.a.core
        .post_send(qa, send_wr(2, write(1, 0), &[(sa, 0, 8)]))
        .unwrap();
    assert_eq!(
        p.a.core
            .post_send(qa, send_wr(3, write(1, 0), &[(sa, 0, 8)])),
        Err(E::QueueFull)
    );
    assert!(p.a.completions.is_empty());
}

/// A region deregistered while a posted Send still names it: the request completes with a
/// local protection error, the stream ends with an RDMAP local catastrophic Terminate
/// (0/0/FF, RDMAP-7.1-2: an error while building an outgoing message), and the peer is told.
#[test]
fn region_deregistered_under_a_posted_send() {
    let mut p = Pair::default_pair();
    let (qa, qb) = p.connect();
    let (_ra, sa) = p.a.region(4096, all_access());
    let (_rb, sb) = p.b.region(4096, all_access());
    p.b.core.post_recv(qb, recv_wr(1, &[(sb, 0, 64)])).unwrap();
    p.a.core
        .post_send(qa, send_wr(7, SendOp::Send, &[(sa, 0, 64)]))
        .unwrap();
    p.a.mrs.deregister(sa).unwrap();
    p.run_until(3000, |p| {
        p.b.events
            .iter()
            .any(|e| matches!(e, warpcore_engine::CmEvent::Error { .. }))
    });
    let ca = p.a.take_completions();
    assert_eq!((ca[0].wr_id, ca[0].status), (7, WcStatus::LocalProtection));
    let eb = p.b.take_events();
    let Some(warpcore_engine::CmEvent::Error {
        error: warpcore_engine::ConnError::RemoteTerminate(rep),
        ..
    }) = eb.first()
    else {
        panic!("{eb:?}")
    };
    assert_eq!((rep.code.layer(), rep.code.etype()), (0, 0));
    assert_eq!(
        p.a.core.qp_state(qa).unwrap(),
        warpcore_engine::QpState::Error
    );
}

/// A fenced Write posted after a Read of the same remote memory starts only once the Read
/// completed, so the Read returns the old bytes (the fence RDMAP-5.5-5 leaves to the ULP).
#[test]
fn fenced_write_after_read_sees_old_data() {
    let mut p = Pair::default_pair();
    let (qa, _qb) = p.connect();
    let (ra, sa) = p.a.region(1 << 20, all_access());
    let (rb, sb) = p.b.region(1 << 20, all_access());
    rb.write_at(0, &pattern(500_000, 1)).unwrap();
    ra.write_at(600_000, &pattern(500_000, 2)[..400_000])
        .unwrap();
    p.a.core
        .post_send(qa, send_wr(1, read(sb.0, 0), &[(sa, 0, 400_000)]))
        .unwrap();
    let mut w = send_wr(2, write(sb.0, 0), &[(sa, 600_000, 400_000)]);
    w.fence = true;
    p.a.core.post_send(qa, w).unwrap();
    p.run_until(20_000, |p| p.a.completions.len() == 2);
    assert!(p
        .a
        .take_completions()
        .iter()
        .all(|c| c.status == WcStatus::Success));
    assert!(read_region(&ra, 0, 400_000) == pattern(500_000, 1)[..400_000]);
    // The Write completed at the source; give the sink time to place it.
    p.run(2000);
    assert!(read_region(&rb, 0, 400_000) == pattern(500_000, 2)[..400_000]);
}

/// Issue 12 item 2: without loss, what arrives in order is deframed and placed straight from
/// the received frames, never copied into the TCP receive queue first: Writes and Sends on
/// B, the Read Response on A, byte for byte.
#[test]
fn fpdus_are_placed_straight_from_the_frames() {
    let mut p = Pair::default_pair();
    let (qa, qb) = p.connect();
    let (ra, sa) = p.a.region(1 << 20, all_access());
    let (rb, sb) = p.b.region(1 << 20, all_access());
    let data = pattern(400_000, 9);
    ra.write_at(0, &data).unwrap();
    let before = (p.a.core.stats(), p.b.core.stats());
    p.b.core
        .post_recv(qb, recv_wr(1, &[(sb, 0, 100_000)]))
        .unwrap();
    p.a.core
        .post_send(qa, send_wr(2, SendOp::Send, &[(sa, 0, 100_000)]))
        .unwrap();
    p.a.core
        .post_send(
            qa,
            send_wr(3, write(sb.0, 100_000), &[(sa, 100_000, 300_000)]),
        )
        .unwrap();
    p.a.core
        .post_send(
            qa,
            send_wr(4, read(sb.0, 100_000), &[(sa, 500_000, 300_000)]),
        )
        .unwrap();
    p.run_until(20_000, |p| {
        p.a.completions.len() == 3 && p.b.completions.len() == 1
    });
    assert!(p
        .a
        .take_completions()
        .iter()
        .all(|c| c.status == WcStatus::Success));
    assert_eq!(p.b.take_completions()[0].byte_len, 100_000);
    assert_eq!(read_region(&rb, 0, 400_000), data);
    assert_eq!(read_region(&ra, 500_000, 300_000), data[100_000..]);
    let (a, b) = (p.a.core.stats(), p.b.core.stats());
    let placed_b = b.placed_octets - before.1.placed_octets;
    let in_place_b = b.rx_in_place_octets - before.1.rx_in_place_octets;
    let in_place_a = a.rx_in_place_octets - before.0.rx_in_place_octets;
    assert_eq!(placed_b, 400_000);
    // Every FPDU octet (headers, pads and CRCs on top of the payload) in place.
    assert!(
        in_place_b > placed_b,
        "B: {in_place_b} of {placed_b} octets in place"
    );
    assert!(
        in_place_a > 300_000,
        "A: {in_place_a} octets of the Read Response in place"
    );
    // Full segments of one FPDU each: their CRC checked through the digest of the
    // checksum's pass where the CPU has the folding paths (512-bit or 256-bit), never
    // elsewhere.
    let by_digest = (
        a.fpdus_rx_by_digest - before.0.fpdus_rx_by_digest,
        b.fpdus_rx_by_digest - before.1.fpdus_rx_by_digest,
    );
    if warpcore_engine::mem::crc::payload_digest().is_some() {
        assert!(
            by_digest.0 > 150 && by_digest.1 > 200,
            "FPDUs checked by digest (A, B): {by_digest:?}"
        );
    } else {
        assert_eq!(by_digest, (0, 0));
    }
}

/// Issue 12 item 3: a Write whose FPDUs are sent from registered memory (payload of 512
/// octets or more, `EngineConfig::tx_from_memory_min`) completes only once TCP has their
/// acknowledgement, since a retransmission reads the buffer again (RDMAP-5.5-8: complete
/// means the buffer may be reused); a small Write, copied into TCP's buffer, completes when
/// queued, as before. While B does not run nothing acknowledges A's segments.
/// RDMAP-5.5-7: no local completion before the LLP has the data.
#[test]
fn a_write_sent_from_registered_memory_completes_once_acknowledged() {
    let mut p = Pair::default_pair();
    let (qa, _qb) = p.connect();
    let (ra, sa) = p.a.region(1 << 20, all_access());
    let (rb, sb) = p.b.region(1 << 20, all_access());
    let data = pattern(256 * 1024, 5);
    ra.write_at(0, &data).unwrap();
    p.a.take_completions();
    let before = p.a.core.stats();
    post_a(&mut p, qa, 1, write(sb.0, 0), &[(sa, 0, 64)]);
    p.run_a_alone(20);
    let c = p.a.take_completions();
    assert_eq!(c.len(), 1, "the small Write completes when queued: {c:?}");
    assert_eq!((c[0].wr_id, c[0].status), (1, WcStatus::Success));
    post_a(&mut p, qa, 2, write(sb.0, 4096), &[(sa, 4096, 200_000)]);
    p.run_a_alone(200);
    let s = p.a.core.stats();
    assert!(
        s.tx_from_memory_octets - before.tx_from_memory_octets >= 190_000,
        "{} octets queued from registered memory",
        s.tx_from_memory_octets - before.tx_from_memory_octets
    );
    assert!(
        p.a.completions.is_empty(),
        "completed before any acknowledgement: {:?}",
        p.a.completions
    );
    p.run_until(20_000, |p| !p.a.completions.is_empty());
    let c = p.a.take_completions();
    assert_eq!((c[0].wr_id, c[0].status), (2, WcStatus::Success));
    assert_eq!(read_region(&rb, 4096, 200_000), data[4096..204_096]);
    assert_eq!(read_region(&rb, 0, 64), data[..64]);
}

/// Issue 12 item 3: a region deregistered while TCP may still have to send FPDUs from it
/// (they were queued, not yet sent: the window is closed while B does not run). Nothing
/// not read from the region ever leaves: the segment becomes an RST, the request fails
/// with a local protection error and the QP with a local catastrophic error; B received
/// a prefix of the data and nothing else, and its connection is reset.
#[test]
fn a_region_deregistered_while_tcp_may_send_from_it_resets_the_stream() {
    let mut p = Pair::default_pair();
    let (qa, _qb) = p.connect();
    let (ra, sa) = p.a.region(1 << 20, all_access());
    let (rb, sb) = p.b.region(1 << 20, all_access());
    let data = pattern(600_000, 11);
    ra.write_at(0, &data).unwrap();
    post_a(&mut p, qa, 9, write(sb.0, 0), &[(sa, 0, 600_000)]);
    p.run_a_alone(50);
    assert!(p.a.core.stats().tx_from_memory_octets > 500_000);
    p.a.mrs.deregister(sa).unwrap();
    p.run_until(20_000, |p| {
        p.a.events
            .iter()
            .any(|e| matches!(e, warpcore_engine::CmEvent::Error { .. }))
            && !p.b.events.is_empty()
    });
    let ca = p.a.take_completions();
    assert_eq!((ca[0].wr_id, ca[0].status), (9, WcStatus::LocalProtection));
    let ea = p.a.take_events();
    assert!(
        matches!(
            ea.first(),
            Some(warpcore_engine::CmEvent::Error {
                error: warpcore_engine::ConnError::LocalTerminate(
                    warpcore_proto::error::ProtocolError::Rdmap(
                        warpcore_proto::error::RdmapError::LocalCatastrophic
                    )
                ),
                ..
            })
        ),
        "{ea:?}"
    );
    let eb = p.b.take_events();
    assert!(
        eb.iter().any(|e| matches!(
            e,
            warpcore_engine::CmEvent::Disconnected {
                cause: warpcore_engine::DisconnectCause::Reset,
                ..
            } | warpcore_engine::CmEvent::Error { .. }
        )),
        "{eb:?}"
    );
    assert_eq!(
        p.a.core
            .stack()
            .host_stats()
            .expect("ours")
            .external_fill_failures,
        1
    );
    let sink = read_region(&rb, 0, 600_000);
    let k = sink
        .iter()
        .zip(&data)
        .position(|(a, b)| a != b)
        .unwrap_or(600_000);
    assert!(k > 0 && k < 600_000, "{k} octets arrived");
    assert!(
        sink[k..].iter().all(|&x| x == 0),
        "octets past the first {k} changed"
    );
}

/// Issue 12 item 3: Read Responses sent from registered memory and not all acknowledged
/// when their QP closes gracefully and is destroyed. Its TCP connection, handed to the
/// zombies, keeps going: at the destroy TCP takes a copy of what it still has to send of
/// them (`Stack::internalize_external`: nothing reads the QP's memory once it is gone), and
/// sends and resends it over a link that loses 3 % each way; the Read completes with every
/// octet.
#[test]
fn a_destroyed_qps_connection_still_sends_read_responses_from_memory() {
    let link = lossy_link(0.03, (0x51, 0x52));
    let mut p = Pair::new(&link, &warpcore_engine::EngineConfig::default());
    let (qa, qb) = p.connect();
    let (ra, sa) = p.a.region(1 << 20, all_access());
    let (rb, sb) = p.b.region(1 << 20, all_access());
    let data = pattern(600_000, 3);
    ra.write_at(0, &data).unwrap();
    p.b.core
        .post_send(qb, send_wr(5, read(sa.0, 0), &[(sb, 0, 600_000)]))
        .unwrap();
    p.run_until(20_000, |p| {
        p.a.core.stats().tx_from_memory_octets >= 590_000
    });
    // Every response queued: the close sends A's FIN behind them at the next loop, and
    // the QP then goes, its connection to the zombies (no RST: the FIN is out).
    p.a.core.disconnect(qa).unwrap();
    p.run_a_alone(1);
    let before = p.a.core.stats();
    p.a.core.destroy_qp(qa).unwrap();
    p.run_until(100_000, |p| !p.b.completions.is_empty());
    let c = p.b.take_completions();
    assert_eq!((c[0].wr_id, c[0].status), (5, WcStatus::Success), "{c:?}");
    assert_eq!(read_region(&rb, 0, 600_000), data);
    let s = p.a.core.stats();
    assert!(
        before.tx_from_memory_wire_octets < 590_000,
        "the responses were all on the wire before the QP went: nothing left to test"
    );
    assert_eq!(
        s.tx_from_memory_wire_octets, before.tx_from_memory_wire_octets,
        "the zombie connection read the QP's memory after it was gone"
    );
    assert!(
        s.tcp_retransmitted_segments > before.tcp_retransmitted_segments,
        "the link must have lost segments the zombie sent again"
    );
}

/// Issue 12 item 3, RDMAP-5.5-8: once a Send or Write sent from registered memory
/// completes, its buffer is the application's again, and nothing TCP sends afterwards
/// (retransmissions included) reads it. Over a link that loses 5 % each way, A posts
/// Writes and Sends of 600 to 64 KiB and overwrites each one's source the moment it
/// completes; B must hold every message as it was when posted. A peer that never
/// acknowledges (B not running) leaves A queuing at most its TCP send buffer's worth from
/// memory: the records are bounded by it.
#[test]
fn a_completed_buffer_is_never_read_again_and_unacknowledged_ones_are_bounded() {
    let link = lossy_link(0.05, (0x61, 0x62));
    let cfg = warpcore_engine::EngineConfig::default();
    let mut p = Pair::new(&link, &cfg);
    let (qa, qb) = p.connect();
    let (ra, sa) = p.a.region(1 << 22, all_access());
    let (rb, sb) = p.b.region(1 << 22, all_access());
    let lens = [600usize, 4096, 65_536, 1500, 30_000, 9000, 700, 65_536];
    let mut want = Vec::new();
    let mut at = 0usize;
    for (k, &len) in lens.iter().enumerate() {
        let data = pattern(len, k as u8 + 1);
        ra.write_at(at, &data).unwrap();
        if k % 2 == 0 {
            post_a(
                &mut p,
                qa,
                k as u64,
                write(sb.0, at as u64),
                &[(sa, at as u64, len as u32)],
            );
        } else {
            p.b.core
                .post_recv(qb, recv_wr(k as u64, &[(sb, at as u64, len as u32)]))
                .unwrap();
            post_a(
                &mut p,
                qa,
                k as u64,
                SendOp::Send,
                &[(sa, at as u64, len as u32)],
            );
        }
        want.push((at, data));
        at += len;
    }
    let mut done = 0;
    p.run_until(200_000, |p| {
        for c in p.a.take_completions() {
            assert_eq!(c.status, WcStatus::Success, "{c:?}");
            let (off, data) = &want[c.wr_id as usize];
            // The buffer is the application's again: scribbled over at once.
            ra.fill(*off, data.len(), 0xEE).unwrap();
            done += 1;
        }
        done == lens.len() && p.b.completions.len() == lens.len() / 2
    });
    assert!(p.a.core.stats().tcp_retransmitted_segments > 0);
    for (off, data) in &want {
        let got = read_region(&rb, *off, data.len());
        let bad = got.iter().zip(data).position(|(g, w)| g != w);
        assert_eq!(
            bad, None,
            "the message at {off} differs from the posted one there"
        );
    }
    // B stops answering: A queues from memory only what its send buffer holds.
    let before = p.a.core.stats().tx_from_memory_octets;
    for k in 0..64u64 {
        post_a(&mut p, qa, 100 + k, write(sb.0, 0), &[(sa, 0, 65_536)]);
    }
    p.run_a_alone(2000);
    let queued = p.a.core.stats().tx_from_memory_octets - before;
    assert!(
        queued > 0 && queued <= cfg.tcp.tx_buffer as u64,
        "{queued} octets queued from memory, send buffer {}",
        cfg.tcp.tx_buffer
    );
}

/// `EngineConfig::tx_from_memory_min` 0 sends every FPDU from registered memory, those of
/// zero-length messages (no SGE, or one of 0 octets) and a 1-octet Send included: each
/// message arrives whole and in order, and each completes once acknowledged.
#[test]
fn every_fpdu_from_registered_memory_zero_length_ones_included() {
    let cfg = warpcore_engine::EngineConfig {
        tx_from_memory_min: 0,
        ..Default::default()
    };
    cfg.validate().unwrap();
    let mut p = Pair::new(&warpcore_tcp::link::LinkConfig::default(), &cfg);
    let (qa, qb) = p.connect();
    let (ra, sa) = p.a.region(1 << 20, all_access());
    let (rb, sb) = p.b.region(1 << 20, all_access());
    let data = pattern(5000, 5);
    ra.write_at(0, &data).unwrap();
    for i in 0..3u64 {
        p.b.core
            .post_recv(qb, recv_wr(i, &[(sb, 8192 * i, 8192)]))
            .unwrap();
    }
    let before = p.a.core.stats().tx_from_memory_octets;
    post_a(&mut p, qa, 1, write(sb.0, 65536), &[]);
    post_a(&mut p, qa, 2, write(sb.0, 65536), &[(sa, 0, 0)]);
    post_a(&mut p, qa, 3, SendOp::Send, &[]);
    post_a(&mut p, qa, 4, SendOp::Send, &[(sa, 0, 1)]);
    post_a(&mut p, qa, 5, SendOp::Send, &[(sa, 0, 5000)]);
    post_a(&mut p, qa, 6, write(sb.0, 65536), &[(sa, 0, 3)]);
    p.run_until(20_000, |p| {
        p.a.completions.len() == 6 && p.b.completions.len() == 3
    });
    let ca = p.a.take_completions();
    let ids: Vec<(u64, WcStatus, u32)> =
        ca.iter().map(|c| (c.wr_id, c.status, c.byte_len)).collect();
    let ok = WcStatus::Success;
    assert_eq!(
        ids,
        [
            (1, ok, 0),
            (2, ok, 0),
            (3, ok, 0),
            (4, ok, 1),
            (5, ok, 5000),
            (6, ok, 3)
        ]
    );
    let cb: Vec<(u64, u32)> =
        p.b.take_completions()
            .iter()
            .map(|c| (c.wr_id, c.byte_len))
            .collect();
    assert_eq!(cb, [(0, 0), (1, 1), (2, 5000)]);
    assert_eq!(read_region(&rb, 8192, 1), data[..1]);
    assert_eq!(read_region(&rb, 2 * 8192, 5000), data[..5000]);
    assert_eq!(read_region(&rb, 65536, 3), data[..3]);
    assert!(p.a.core.stats().tx_from_memory_octets - before >= 5004);
    assert!(p.a.events.is_empty() && p.b.events.is_empty());
}
