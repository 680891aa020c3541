//! RFC 7306 end to end between two engine cores over the in-memory link: atomics
//! (FetchAdd, CmpSwap, masked forms, contention, errors, ORD/IRD) and Immediate Data
//! (Write with Immediate, Immediate Data with and without SE), and the per-connection
//! RFC 7306 switch (EXT-1.1-1).

mod common;

use std::sync::Arc;
use std::time::Instant as StdInstant;

use common::*;
use warpcore_engine::mem::{Access, MrTable, Region, Stag};
use warpcore_engine::proto::rdmap::atomic::masked_add;
use warpcore_engine::tcp::link::{self, LinkConfig};
use warpcore_engine::tcp::smoltcp::time::Instant;
use warpcore_engine::tcp::smoltcp::wire::Ipv4Cidr;
use warpcore_engine::tcp::StackConfig;
use warpcore_engine::{
    validate_send, CmEvent, CompletionQueue, ConnError, EngineConfig, EngineCore, EngineError,
    MpaParams, QpId, QpShared, QpState, SendOp, WcOpcode, WcStatus,
};

fn atomic_access() -> Access {
    Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC
}

fn qp_ext(side: &mut Side, depth: u32, rfc7306: bool) -> QpId {
    let (id, shared) = side.qp_shared(depth);
    shared.set_rfc7306(rfc7306);
    id
}

/// Connects A to B with RFC 7306 on or off on either side (it is not negotiated).
fn connect_ext(p: &mut Pair, a_on: bool, b_on: bool, params: &MpaParams) -> (QpId, QpId) {
    let (qa, _, qb) = connect_ext_shared(p, a_on, b_on, params);
    (qa, qb)
}

/// [`connect_ext`], with A's QP's shared state (what application threads check posts
/// against).
fn connect_ext_shared(
    p: &mut Pair,
    a_on: bool,
    b_on: bool,
    params: &MpaParams,
) -> (QpId, Arc<QpShared>, QpId) {
    let (qa, shared_a) = p.a.qp_shared(64);
    shared_a.set_rfc7306(a_on);
    let qb = qp_ext(&mut p.b, 64, b_on);
    p.b.core.listen(PORT, params.clone()).expect("listen");
    p.a.core
        .connect(qa, (ip(2), PORT), params, b"")
        .expect("connect");
    let req = p.wait_request();
    p.b.core.accept(req.request, qb, b"", None).expect("accept");
    p.run_until(2000, |p| {
        p.a.core.qp_state(qa) == Ok(QpState::Rts) && p.b.core.qp_state(qb) == Ok(QpState::Rts)
    });
    p.a.take_events();
    p.b.take_events();
    (qa, shared_a, qb)
}

fn word(r: &Region, off: usize) -> u64 {
    r.atomic_u64_at(off)
        .unwrap()
        .load(std::sync::atomic::Ordering::SeqCst)
}

fn set_word(r: &Region, off: usize, v: u64) {
    r.atomic_u64_at(off)
        .unwrap()
        .store(v, std::sync::atomic::Ordering::SeqCst);
}

fn fetch_add(stag: Stag, to: u64, add: u64, add_mask: u64) -> SendOp {
    SendOp::AtomicFetchAdd {
        remote_stag: stag.0,
        remote_to: to,
        add,
        add_mask,
    }
}

fn cmp_swap(stag: Stag, to: u64, compare: u64, cmask: u64, swap: u64, smask: u64) -> SendOp {
    SendOp::AtomicCmpSwap {
        remote_stag: stag.0,
        remote_to: to,
        compare,
        compare_mask: cmask,
        swap,
        swap_mask: smask,
    }
}

/// EXT-5.1.1-1, EXT-5.1.2-1, EXT-5.2.2-*: FetchAdd and CmpSwap, plain and masked, on an
/// 8-aligned word of the peer: memory byte-exact afterwards (host byte order), the original
/// value in the completion and in the 8-octet local SGE.
/// EXT-5-3, EXT-5.2.1-1: both AOpCodes (FetchAdd, CmpSwap) work end to end; EXT-5.2.2-5.
#[test]
fn atomics_plain_and_masked_return_the_original_value() {
    let mut p = Pair::default_pair();
    let (qa, _qb) = connect_ext(&mut p, true, true, &MpaParams::default());
    let (ra, sa) = p.a.region(4096, all_access());
    let (rb, sb) = p.b.region(4096, atomic_access());
    let v0 = 0x0123_4567_89AB_CDEFu64;
    set_word(&rb, 64, v0);
    set_word(&rb, 128, 0x80FF_7F01_FFFF_0000);
    // (op, word offset, expected original, expected new value)
    let lanes = 0x8080_8080_8080_8080;
    let cases: Vec<(SendOp, usize, u64, u64)> = vec![
        (fetch_add(sb, 64, 1, 0), 64, v0, v0 + 1),
        (fetch_add(sb, 64, u64::MAX, 0), 64, v0 + 1, v0),
        // Masked: eight byte lanes, carries do not cross them.
        (
            fetch_add(sb, 128, 0x0101_0101_0101_0101, lanes),
            128,
            0x80FF_7F01_FFFF_0000,
            masked_add(0x80FF_7F01_FFFF_0000, 0x0101_0101_0101_0101, lanes),
        ),
        // CmpSwap hit, miss, and masked (compare the high half, swap the low byte).
        (cmp_swap(sb, 64, v0, u64::MAX, 7, u64::MAX), 64, v0, 7),
        (cmp_swap(sb, 64, 8, u64::MAX, 9, u64::MAX), 64, 7, 7),
        (
            cmp_swap(
                sb,
                64,
                0xFFFF_FFFF_0000_0000,
                0xFFFF_FFFF_0000_0000,
                0xAB,
                0xFF,
            ),
            64,
            7,
            7,
        ),
        (
            cmp_swap(sb, 64, 0x1234_0000_0000_0007, 0xFF, 0xAAAA, 0xFF00),
            64,
            7,
            0xAA07,
        ),
    ];
    assert_eq!(
        masked_add(0x80FF_7F01_FFFF_0000, 0x0101_0101_0101_0101, lanes),
        0x8100_8002_0000_0101
    );
    for (i, (op, off, orig, new)) in cases.into_iter().enumerate() {
        let wr_id = 100 + i as u64;
        p.a.core
            .post_send(qa, send_wr(wr_id, op, &[(sa, 8 * i as u64, 8)]))
            .unwrap();
        p.run_until(3000, |p| !p.a.completions.is_empty());
        let c = p.a.take_completions();
        assert_eq!((c[0].wr_id, c[0].status), (wr_id, WcStatus::Success));
        assert_eq!(c[0].atomic_orig, Some(orig), "case {i}");
        let expect_op = if matches!(op, SendOp::AtomicFetchAdd { .. }) {
            WcOpcode::AtomicFetchAdd
        } else {
            WcOpcode::AtomicCmpSwap
        };
        assert_eq!(c[0].opcode, expect_op);
        assert_eq!(word(&rb, off), new, "case {i}");
        assert_eq!(read_region(&ra, 8 * i, 8), orig.to_ne_bytes().to_vec());
    }
    // An atomic without a local SGE reports the value in the completion only.
    p.a.core
        .post_send(qa, send_wr(200, fetch_add(sb, 64, 0, 0), &[]))
        .unwrap();
    p.run_until(3000, |p| !p.a.completions.is_empty());
    assert_eq!(p.a.take_completions()[0].atomic_orig, Some(0xAA07));
    // Misuse is refused at post time: two SGEs, or one of another length.
    assert_eq!(
        p.a.core
            .post_send(qa, send_wr(201, fetch_add(sb, 64, 0, 0), &[(sa, 0, 4)])),
        Err(EngineError::AtomicSge)
    );
}

fn side_sharing(n: u8, end: link::LinkEnd, cfg: &EngineConfig, mrs: Arc<MrTable>) -> Side {
    let sc = StackConfig {
        mac: [2, 0, 0, 0, 0, n],
        ip: Ipv4Cidr::new(ip(n), 24),
        gateway: None,
        routes: Vec::new(),
        random_seed: u64::from(n) * 7919 + 13,
        max_connections: cfg.max_connections,
        out_of_order_budget_bytes: warpcore_engine::tcp::OUT_OF_ORDER_BUDGET_DEFAULT,
    };
    let core = EngineCore::new(
        u16::from(n) - 1,
        end,
        &sc,
        cfg.clone(),
        Arc::clone(&mrs),
        StdInstant::now(),
        Instant::ZERO,
    )
    .expect("core");
    Side {
        core,
        mrs,
        cq: Arc::new(CompletionQueue::new(4096).unwrap()),
        events: Vec::new(),
        completions: Vec::new(),
        hold_events: false,
    }
}

/// EXT-5-1, EXT-5.3-1: two peers, each on its own connection to its own responder core,
/// the two responder cores sharing one region table, hammer one word with FetchAdd from two
/// threads at once. The final sum is exact and every original value is returned once.
/// EXT-5.4-2: atomic within the engine's scope (one region table shared by two cores).
#[test]
fn fetch_add_contention_from_two_peers_is_exact() {
    const N: u64 = 300;
    let cfg = EngineConfig::default();
    let mut p1 = Pair::default_pair();
    let shared_mrs = Arc::clone(&p1.b.mrs);
    let (e1, e2) = link::pair(&LinkConfig::default());
    let mut p2 = Pair {
        a: side_sharing(1, e1, &cfg, Arc::new(MrTable::new(cfg.mr_table_capacity))),
        b: side_sharing(2, e2, &cfg, Arc::clone(&shared_mrs)),
        now: Instant::ZERO,
    };
    let (rb, sb) = p1.b.region(4096, atomic_access());
    set_word(&rb, 0, 1_000_000);
    let mut handles = Vec::new();
    for p in [&mut p1, &mut p2] {
        let (qa, _) = connect_ext(p, true, true, &MpaParams::default());
        let (_ra, sa) = p.a.region(4096, all_access());
        for i in 0..N {
            // Beyond ORD (8) and the send queue depth the requests wait, not refused.
            if i < 64 {
                p.a.core
                    .post_send(qa, send_wr(i, fetch_add(sb, 0, 1, 0), &[(sa, 0, 8)]))
                    .unwrap();
            }
        }
        let _ = handles.len();
        handles.push(qa);
    }
    let origs: Vec<Vec<u64>> = std::thread::scope(|s| {
        let ts: Vec<_> = [p1, p2]
            .into_iter()
            .zip(handles)
            .map(|(mut p, qa)| {
                s.spawn(move || {
                    let (_ra, sa) = p.a.region(64, all_access());
                    let mut posted = 64;
                    let mut got = Vec::new();
                    while got.len() < N as usize {
                        p.step();
                        for c in p.a.take_completions() {
                            assert_eq!(c.status, WcStatus::Success);
                            got.push(c.atomic_orig.unwrap());
                            if posted < N {
                                p.a.core
                                    .post_send(
                                        qa,
                                        send_wr(posted, fetch_add(sb, 0, 1, 0), &[(sa, 0, 8)]),
                                    )
                                    .unwrap();
                                posted += 1;
                            }
                        }
                    }
                    let info = p.a.core.qp_info(qa).unwrap();
                    assert!(info.reads_in_flight_max <= info.ord);
                    got
                })
            })
            .collect();
        ts.into_iter().map(|t| t.join().unwrap()).collect()
    });
    assert_eq!(word(&rb, 0), 1_000_000 + 2 * N);
    let mut all: Vec<u64> = origs.into_iter().flatten().collect();
    all.sort_unstable();
    let expect: Vec<u64> = (1_000_000..1_000_000 + 2 * N).collect();
    assert_eq!(all, expect);
}

fn terminate_of(events: &[CmEvent]) -> Option<(u8, u8, u8)> {
    events.iter().find_map(|e| match e {
        CmEvent::Error {
            error: ConnError::RemoteTerminate(r),
            ..
        } => Some((r.code.layer(), r.code.etype(), r.code.code())),
        _ => None,
    })
}

fn local_error(events: &[CmEvent]) -> bool {
    events.iter().any(|e| {
        matches!(
            e,
            CmEvent::Error {
                error: ConnError::LocalTerminate(_),
                ..
            }
        )
    })
}

/// Runs one failing request from A and returns the Terminate code A received; checks that
/// both QPs end in the error state and A's request completed in error.
/// `op` gets the STag of B's region (registered with `region_access`).
fn expect_terminate(
    op: impl Fn(Stag) -> SendOp,
    region_access: Access,
    b_on: bool,
) -> (u8, u8, u8) {
    let mut p = Pair::default_pair();
    let (qa, qb) = connect_ext(&mut p, true, b_on, &MpaParams::default());
    let (_ra, sa) = p.a.region(4096, all_access());
    let (_rb, sb) = p.b.region(4096, region_access);
    let op = op(sb);
    let sges: &[(Stag, u64, u32)] = if op.is_atomic() { &[(sa, 0, 8)] } else { &[] };
    p.a.core.post_send(qa, send_wr(1, op, sges)).unwrap();
    p.run_until(3000, |p| {
        terminate_of(&p.a.events).is_some() && local_error(&p.b.events)
    });
    p.run(50);
    let code = terminate_of(&p.a.take_events()).unwrap();
    assert!(matches!(
        p.a.core.qp_state(qa),
        Ok(QpState::Error | QpState::Terminate)
    ));
    assert!(matches!(
        p.b.core.qp_state(qb),
        Ok(QpState::Error | QpState::Terminate)
    ));
    let c = p.a.take_completions();
    assert_eq!(c[0].wr_id, 1);
    if op.is_atomic() {
        // An atomic completes only with its response: the Terminate fails it.
        assert_ne!(c[0].status, WcStatus::Success);
        assert_eq!(c[0].atomic_orig, None);
    }
    code
}

/// EXT-5.2.1-2 (RFC 7306 §5.2.1): the Remote Tagged Offset "MAY start at an arbitrary
/// offset but MUST represent a ULP Buffer address that is 64-bit aligned" (§8.2: the
/// responder validates the *address*). B registers page-aligned memory whose first octet
/// has TO 4 (as `ibv_reg_mr_iova2` or a fast registration with such an iova): TO 4 and
/// TO 12 name the aligned words at offsets 0 and 8. A FetchAdd at TO 4 and a CmpSwap at
/// TO 12 are posted, sent, executed on those words and complete with the original values
/// (as rxe, which checks the resolved page offset, not the iova). (The requester refused
/// both at post with an `AtomicMisaligned` error, and a responder refused them with 0/2/07.)
#[test]
fn an_atomic_at_an_unaligned_to_naming_an_aligned_word_runs() {
    let mut p = Pair::default_pair();
    let (qa, shared_a, _qb) = connect_ext_shared(&mut p, true, true, &MpaParams::default());
    let (ra, sa) = p.a.region(4096, all_access());
    let rb = Arc::new(Region::allocate(4096, 4096).unwrap());
    let sb =
        p.b.mrs
            .register(Arc::clone(&rb), PD, atomic_access(), 4)
            .unwrap();
    set_word(&rb, 0, 0x1111);
    set_word(&rb, 8, 0x2222);
    let add = send_wr(1, fetch_add(sb, 4, 5, 0), &[(sa, 0, 8)]);
    assert_eq!(validate_send(&shared_a, &p.a.mrs, &add), Ok(()));
    p.a.core.post_send(qa, add).unwrap();
    p.a.core
        .post_send(
            qa,
            send_wr(
                2,
                cmp_swap(sb, 12, 0x2222, u64::MAX, 0x3333, u64::MAX),
                &[(sa, 8, 8)],
            ),
        )
        .unwrap();
    p.run_until(3000, |p| {
        p.a.completions.len() >= 2 || !p.a.events.is_empty()
    });
    let c = p.a.take_completions();
    assert!(p.a.take_events().is_empty() && p.b.take_events().is_empty());
    assert_eq!(c.len(), 2, "{c:?}");
    assert_eq!(
        (c[0].wr_id, c[0].status, c[0].atomic_orig),
        (1, WcStatus::Success, Some(0x1111))
    );
    assert_eq!(
        (c[1].wr_id, c[1].status, c[1].atomic_orig),
        (2, WcStatus::Success, Some(0x2222))
    );
    assert_eq!(word(&rb, 0), 0x1116);
    assert_eq!(word(&rb, 8), 0x3333);
    assert_eq!(word(&ra, 0), 0x1111);
    assert_eq!(word(&ra, 8), 0x2222);
    assert_eq!(p.a.core.qp_state(qa), Ok(QpState::Rts));
}

/// EXT-1.1-1, RDMAP-6.1-1, EXT-5.2-1: an application thread's post is checked
/// (`validate_send`) against what the connection fixed when it was set up, with typed
/// errors and nothing queued: RFC 7306 as it was then (the QP's flag turned on afterwards
/// does not let an atomic or Immediate Data out to a peer without it), and the negotiated
/// ORD (0: no Reads nor atomics). (Both passed; the core then flushed such a request in
/// RTS: an RFC 7306 one was sent all the same, and a Read or atomic with ORD 0 held the
/// send queue behind it for good.)
#[test]
fn posts_are_checked_against_the_connections_rfc7306_and_ord() {
    let mut p = Pair::default_pair();
    let (qa, shared_a, _qb) = connect_ext_shared(&mut p, false, false, &MpaParams::default());
    shared_a.set_rfc7306(true);
    let (_ra, sa) = p.a.region(4096, all_access());
    let imm = SendOp::Immediate {
        imm: 5,
        solicited: false,
    };
    for (op, sges) in [
        (fetch_add(Stag(1), 0, 1, 0), &[(sa, 0, 8)][..]),
        (imm, &[][..]),
    ] {
        assert_eq!(
            validate_send(&shared_a, &p.a.mrs, &send_wr(1, op, sges)),
            Err(EngineError::NotSupported("RFC 7306")),
            "{op:?}"
        );
    }
    assert_eq!(shared_a.sq_used(), 0);
    p.run(20);
    assert!(p.a.take_events().is_empty() && p.b.take_events().is_empty());
    assert_eq!(p.a.core.qp_state(qa), Ok(QpState::Rts));

    let mut p = Pair::default_pair();
    let params = MpaParams {
        ord: 0,
        ..MpaParams::default()
    };
    let (qa, shared_a, _qb) = connect_ext_shared(&mut p, true, true, &params);
    assert_eq!(p.a.core.qp_info(qa).unwrap().ord, 0);
    assert_eq!(shared_a.ord(), 0);
    let (_ra, sa) = p.a.region(4096, all_access());
    for op in [
        read_op(1, 0),
        fetch_add(Stag(1), 0, 1, 0),
        cmp_swap(Stag(1), 0, 0, 0, 0, 0),
    ] {
        assert_eq!(
            validate_send(&shared_a, &p.a.mrs, &send_wr(1, op, &[(sa, 0, 8)])),
            Err(EngineError::NoReadCredits),
            "{op:?}"
        );
    }
    assert_eq!(shared_a.sq_used(), 0);
}

/// RDMAP-8.1.1-*, EXT-5.2.1-*: a region without REMOTE_ATOMIC refuses atomics with the
/// remote protection error access rights (0/1/2), and an invalid STag with 0/1/0.
#[test]
fn atomic_without_remote_atomic_access_is_refused() {
    let code = expect_terminate(|sb| fetch_add(sb, 0, 1, 0), all_access(), true);
    assert_eq!(code, (0, 1, 2));
    let code = expect_terminate(
        |sb| fetch_add(Stag(sb.0 ^ 0x100), 0, 1, 0),
        atomic_access(),
        true,
    );
    assert_eq!(code, (0, 1, 0));
    // Out of the region's bounds: 0/1/1.
    let code = expect_terminate(|sb| fetch_add(sb, 4096, 1, 0), atomic_access(), true);
    assert_eq!(code, (0, 1, 1));
}

/// EXT-1.1-1, EXT-8.2-2: a QP without RFC 7306 refuses atomics and Immediate Data at post
/// time with a typed error (nothing sent); a peer without it answers an inbound RFC 7306
/// message with Terminate 0/2/06.
#[test]
fn rfc7306_disabled_post_time_error_and_inbound_0_2_06() {
    let mut p = Pair::default_pair();
    let (qa, _qb) = connect_ext(&mut p, false, false, &MpaParams::default());
    let (_ra, sa) = p.a.region(4096, all_access());
    for op in [
        fetch_add(Stag(1), 0, 1, 0),
        cmp_swap(Stag(1), 0, 0, 0, 0, 0),
        SendOp::WriteWithImm {
            remote_stag: 1,
            remote_to: 0,
            imm: 5,
            solicited: false,
        },
        SendOp::Immediate {
            imm: 5,
            solicited: true,
        },
    ] {
        let sges: &[(Stag, u64, u32)] = if op.is_atomic() { &[(sa, 0, 8)] } else { &[] };
        assert_eq!(
            p.a.core.post_send(qa, send_wr(1, op, sges)),
            Err(EngineError::NotSupported("RFC 7306"))
        );
    }
    p.run(20);
    assert!(p.a.take_completions().is_empty());
    assert_eq!(p.a.core.qp_state(qa), Ok(QpState::Rts));

    let imm = |_| SendOp::Immediate {
        imm: 1,
        solicited: false,
    };
    assert_eq!(expect_terminate(imm, all_access(), false), (0, 2, 6));
    assert_eq!(
        expect_terminate(|sb| fetch_add(sb, 0, 1, 0), atomic_access(), false),
        (0, 2, 6)
    );
}

/// EXT-5.2-1, RDMAP-6.1-1/2: atomics and Reads share ORD at the requester (requests beyond
/// it wait, in order) and are served in request order at the responder; more Atomic
/// Requests than IRD from a hostile peer are refused in engine_hostile-style tests of the
/// Read path (the same `InboundReadQueue`); here the requester never exceeds ORD = 2.
/// EXT-5.2.1-10, EXT-5.4-9, EXT-5.4-10: the original values only in-order execution and
/// responses give.
#[test]
fn atomics_and_reads_share_ord_and_complete_in_order() {
    let mut p = Pair::default_pair();
    let params = MpaParams {
        ird: 2,
        ord: 2,
        ..Default::default()
    };
    let (qa, _qb) = connect_ext(&mut p, true, true, &params);
    let (ra, sa) = p.a.region(1 << 16, all_access());
    let (rb, sb) = p.b.region(1 << 16, atomic_access());
    rb.write_at(1024, &pattern(1000, 9)).unwrap();
    for i in 0..20u64 {
        let op = if i % 3 == 2 {
            SendOp::Read {
                remote_stag: sb.0,
                remote_to: 1024,
            }
        } else {
            fetch_add(sb, 0, 1, 0)
        };
        let len = if i % 3 == 2 { 1000 } else { 8 };
        p.a.core
            .post_send(qa, send_wr(i, op, &[(sa, 2048 * i, len)]))
            .unwrap();
    }
    p.run_until(20_000, |p| p.a.completions.len() == 20);
    let c = p.a.take_completions();
    let mut expect_orig = 0;
    for (i, c) in c.iter().enumerate() {
        assert_eq!((c.wr_id, c.status), (i as u64, WcStatus::Success));
        if i % 3 == 2 {
            assert_eq!(c.opcode, WcOpcode::Read);
            assert_eq!(read_region(&ra, 2048 * i, 1000), pattern(1000, 9));
        } else {
            assert_eq!(c.atomic_orig, Some(expect_orig));
            expect_orig += 1;
        }
    }
    assert_eq!(word(&rb, 0), expect_orig);
    let info = p.a.core.qp_info(qa).unwrap();
    assert_eq!(info.ord, 2);
    assert!(info.reads_in_flight_max <= 2);
    assert_eq!(info.reads_in_flight_max, 2);
}

/// EXT-6.3-*, RDMAP-5.5-*: Write with Immediate places the data and then completes a
/// receive with the immediate value; Immediate Data with and without SE consumes one
/// receive buffer each, in order with Sends.
/// EXT-6.3-6: Immediate Data arrives in the order it was posted.
#[test]
fn write_with_imm_and_immediate_data_complete_receives_in_order() {
    let mut p = Pair::default_pair();
    let (qa, qb) = connect_ext(&mut p, true, true, &MpaParams::default());
    let (ra, sa) = p.a.region(1 << 17, all_access());
    let (rb, sb) = p.b.region(1 << 17, all_access());
    let data = pattern(70_000, 4);
    ra.write_at(0, &data).unwrap();
    for i in 0..4 {
        p.b.core
            .post_recv(qb, recv_wr(10 + i, &[(sb, 100_000 + 100 * i, 100)]))
            .unwrap();
    }
    let ops = [
        (
            SendOp::WriteWithImm {
                remote_stag: sb.0,
                remote_to: 0,
                imm: 0x1122_3344_5566_7788,
                solicited: false,
            },
            vec![(sa, 0, 70_000)],
        ),
        (SendOp::Send, vec![(sa, 0, 10)]),
        (
            SendOp::Immediate {
                imm: 42,
                solicited: true,
            },
            vec![],
        ),
        (
            SendOp::Immediate {
                imm: u64::MAX,
                solicited: false,
            },
            vec![],
        ),
    ];
    for (i, (op, sg)) in ops.iter().enumerate() {
        p.a.core.post_send(qa, send_wr(i as u64, *op, sg)).unwrap();
    }
    // An Immediate takes no payload.
    assert_eq!(
        p.a.core.post_send(
            qa,
            send_wr(
                9,
                SendOp::Immediate {
                    imm: 0,
                    solicited: false
                },
                &[(sa, 0, 1)]
            )
        ),
        Err(EngineError::ImmediatePayload)
    );
    p.run_until(5000, |p| {
        p.a.completions.len() == 4 && p.b.completions.len() == 4
    });
    let ca = p.a.take_completions();
    let opcodes: Vec<_> = ca.iter().map(|c| (c.wr_id, c.opcode, c.status)).collect();
    assert_eq!(
        opcodes,
        vec![
            (0, WcOpcode::WriteWithImm, WcStatus::Success),
            (1, WcOpcode::Send, WcStatus::Success),
            (2, WcOpcode::Immediate, WcStatus::Success),
            (3, WcOpcode::Immediate, WcStatus::Success),
        ]
    );
    let cb = p.b.take_completions();
    let got: Vec<_> = cb
        .iter()
        .map(|c| (c.wr_id, c.opcode, c.byte_len, c.imm, c.solicited))
        .collect();
    assert_eq!(
        got,
        vec![
            (10, WcOpcode::RecvImm, 0, Some(0x1122_3344_5566_7788), false),
            (11, WcOpcode::Recv, 10, None, false),
            (12, WcOpcode::RecvImm, 0, Some(42), true),
            (13, WcOpcode::RecvImm, 0, Some(u64::MAX), false),
        ]
    );
    // The Write's data was placed before its Immediate completed the receive.
    assert_eq!(read_region(&rb, 0, 70_000), data);
    assert_eq!(read_region(&rb, 100_100, 10), data[..10].to_vec());
}

/// EXT-6.3-*, DDP-7.1-*: Immediate Data without a posted receive is the same error as a
/// Send without one (DDP 1/2/2).
#[test]
fn immediate_without_receive_buffer_terminates() {
    let code = expect_terminate(
        |_| SendOp::Immediate {
            imm: 3,
            solicited: false,
        },
        all_access(),
        true,
    );
    assert_eq!(code, (1, 2, 2));
}

/// EXT-5.2.1-2 / EXT-8.2-5 when the Tagged Offset is 8-aligned but the word it names is not:
/// a registration whose base TO is not congruent to its address mod 8 (`register_with_base`
/// as `ibv_reg_mr_iova2`, a fast registration, a zero-based region over unaligned memory).
/// The RFC's requirement is on the ULP buffer's address. The request is refused where it is
/// received: Terminate 0/2/07 with its DDP header, memory untouched (the check once ran only
/// when the atomic was executed: a local catastrophic error, 0/0/FF, instead).
#[test]
fn atomic_on_an_unaligned_word_at_an_aligned_to_terminates_0_2_07() {
    let mut p = Pair::default_pair();
    let (qa, _qb) = connect_ext(&mut p, true, true, &MpaParams::default());
    let (_ra, sa) = p.a.region(4096, all_access());
    // B's region: page-aligned memory whose first octet has TO 4, so TO 8 is offset 4.
    let rb = Arc::new(Region::allocate(4096, 4096).unwrap());
    let sb =
        p.b.mrs
            .register(Arc::clone(&rb), PD, atomic_access(), 4)
            .unwrap();
    set_word(&rb, 0, 0x1111);
    set_word(&rb, 8, 0x2222);
    p.a.core
        .post_send(qa, send_wr(1, fetch_add(sb, 8, 1, 0), &[(sa, 0, 8)]))
        .unwrap();
    p.run_until(3000, |p| {
        terminate_of(&p.a.events).is_some() && local_error(&p.b.events)
    });
    p.run(50);
    let a_events = p.a.take_events();
    assert_eq!(word(&rb, 0), 0x1111);
    assert_eq!(word(&rb, 8), 0x2222);
    assert_eq!(terminate_of(&a_events), Some((0, 2, 7)));
}

/// The same unaligned target followed on the stream by a Send: nothing after the invalid
/// request is placed or completes (DDP-7.1-17, RDMAP-7.1-5). While the alignment was found
/// only when the atomic was executed, on the transmit side, the Send behind it was placed
/// and its receive completed successfully.
#[test]
fn nothing_behind_an_atomic_on_an_unaligned_word_is_delivered() {
    let mut p = Pair::default_pair();
    let (qa, qb) = connect_ext(&mut p, true, true, &MpaParams::default());
    let (ra, sa) = p.a.region(4096, all_access());
    let rb = Arc::new(Region::allocate(4096, 4096).unwrap());
    let sb =
        p.b.mrs
            .register(Arc::clone(&rb), PD, atomic_access(), 4)
            .unwrap();
    let (rrecv, srecv) = p.b.region(4096, all_access());
    p.b.core
        .post_recv(qb, recv_wr(77, &[(srecv, 0, 64)]))
        .unwrap();
    ra.write_at(100, b"after the bad atomic").unwrap();
    p.a.core
        .post_send(qa, send_wr(1, fetch_add(sb, 8, 1, 0), &[(sa, 0, 8)]))
        .unwrap();
    p.a.core
        .post_send(qa, send_wr(2, SendOp::Send, &[(sa, 100, 20)]))
        .unwrap();
    p.run_until(3000, |p| {
        terminate_of(&p.a.events).is_some() && local_error(&p.b.events)
    });
    p.run(50);
    let b = p.b.take_completions();
    assert!(
        !b.iter()
            .any(|c| c.wr_id == 77 && c.status == WcStatus::Success),
        "the Send after the invalid Atomic Request completed: {b:?}"
    );
    let mut got = [0u8; 20];
    rrecv.read_at(0, &mut got).unwrap();
    assert_ne!(&got, b"after the bad atomic", "the Send was placed");
}
