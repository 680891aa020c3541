//! RFC 7306 rows checked on the wire: a hand-driven peer (`conformance_common`) sees every
//! ULPDU the engine sends and answers or provokes it, so the queue numbers, the T bit, the
//! opcodes and the order of Atomic Requests, Atomic Responses and Immediate Data are judged
//! where the peer sees them, and an atomic's execution and completion are timed against
//! what DDP has delivered. Requirement IDs are the rows of `shared/specs/REQUIREMENTS.md`.

mod common;
mod conformance_common;

use conformance_common::*;
use warpcore_engine::proto::mpa::negotiation as nego;
use warpcore_engine::proto::wire::ddp::DdpBuffer;
use warpcore_engine::proto::wire::rdmap::{AtomicRequestRepr, AtomicResponseRepr, Opcode};
use warpcore_engine::proto::wire::segment::{RdmapHeader, Segment, SegmentRepr};
use warpcore_engine::{MpaParams, QpState, SendOp, WcOpcode, WcStatus};

fn cfg() -> nego::Config {
    nego::Config {
        ird: 4,
        ord: 4,
        ..nego::Config::default()
    }
}

fn parse(u: &[u8]) -> SegmentRepr {
    Segment::parse(u)
        .expect("the engine sent a valid segment")
        .repr
}

/// EXT-4.1-2, EXT-5.2.1-3, EXT-5.2.1-8, EXT-5.2.1-9, EXT-5.2.1-4, EXT-6.3-1, EXT-6.3-6,
/// EXT-5.4-8, EXT-5.4-1, EXT-5.2.2-5: the engine as requester. Two FetchAdds, a CmpSwap
/// and two Immediate Data messages (without and with SE) posted interleaved leave in the
/// order they were posted; every Atomic Request is untagged (T = 0) on QN 1 with opcode
/// 1010b and takes the next MSN of that queue, every Immediate Data is untagged on QN 0
/// with 1000b / 1001b. No atomic completes, and nothing lands in its local buffer, until
/// its Atomic Response has arrived; then each completes with the value the response
/// carried, in the local SGE too.
#[test]
fn requester_wire_order_queues_and_completion_after_the_response() {
    let mut w = world(MpaParams::default());
    let mut c = w.connect(1, cfg());
    // The responder sends nothing before the initiator's first FPDU (MPA-7.1.2-16).
    w.send(&mut c, &[send_ulpdu(1, b"go")], false);
    let s = w.stag;
    let posts = [
        (
            0,
            SendOp::AtomicFetchAdd {
                remote_stag: 0x77,
                remote_to: 64,
                add: 1,
                add_mask: 0,
            },
            Some((s, 128, 8)),
        ),
        (
            1,
            SendOp::Immediate {
                imm: 0x0102_0304_0506_0708,
                solicited: false,
            },
            None,
        ),
        (
            2,
            SendOp::AtomicCmpSwap {
                remote_stag: 0x77,
                remote_to: 72,
                compare: 5,
                compare_mask: u64::MAX,
                swap: 6,
                swap_mask: u64::MAX,
            },
            Some((s, 136, 8)),
        ),
        (
            3,
            SendOp::Immediate {
                imm: 9,
                solicited: true,
            },
            None,
        ),
        (
            4,
            SendOp::AtomicFetchAdd {
                remote_stag: 0x77,
                remote_to: 80,
                add: 2,
                add_mask: 0,
            },
            Some((s, 144, 8)),
        ),
    ];
    for (id, op, sge) in posts {
        w.engine.post_send(c.qp, send_wr(id, op, sge)).unwrap();
    }
    let got = w.read_n(&mut c, 5);
    assert_eq!(got.len(), 5, "{got:?}");
    let mut request_ids = Vec::new();
    let mut seen = Vec::new();
    for u in &got {
        // T is the top bit of the DDP control octet; the RDMAP opcode the low nibble of the
        // RDMAP control octet.
        assert_eq!(u[0] & 0x80, 0, "T = 0: {u:02x?}");
        let repr = parse(u);
        let (qn, msn) = match repr.buffer {
            DdpBuffer::Untagged { qn, msn, mo, .. } => {
                assert_eq!(mo, 0);
                (qn, msn)
            }
            b => panic!("tagged: {b:?}"),
        };
        let raw_opcode = u[1] & 0x0F;
        match repr.header {
            RdmapHeader::AtomicRequest(r) => {
                assert_eq!((qn, raw_opcode), (1, 0b1010));
                request_ids.push(r.request_id);
                seen.push(("atomic", msn, r.remote_to, r.aopcode));
            }
            RdmapHeader::ImmediateData(_) => {
                let want = if repr.opcode == Opcode::ImmediateDataSe {
                    0b1001
                } else {
                    0b1000
                };
                assert_eq!((qn, raw_opcode), (0, want));
                seen.push(("immediate", msn, 0, raw_opcode));
            }
            h => panic!("unexpected {h:?}"),
        }
    }
    assert_eq!(
        seen,
        vec![
            ("atomic", 1, 64, 0),
            ("immediate", 1, 0, 0b1000),
            ("atomic", 2, 72, 2),
            ("immediate", 2, 0, 0b1001),
            ("atomic", 3, 80, 0),
        ],
        "posted order, one MSN of QN 1 per Atomic Request"
    );
    // No Atomic Response yet: no atomic completes and its local buffer is untouched.
    w.run(300);
    let early = w.completions();
    assert!(
        early
            .iter()
            .all(|c| c.opcode != WcOpcode::AtomicFetchAdd && c.opcode != WcOpcode::AtomicCmpSwap),
        "an atomic completed before its response: {early:?}"
    );
    assert_eq!(word(&w.region, 128), 0);
    assert_eq!(word(&w.region, 136), 0);
    // The peer answers, in order, on QN 3.
    let origs = [100u64, 5, 300];
    let responses: Vec<Vec<u8>> = request_ids
        .iter()
        .zip(origs)
        .enumerate()
        .map(|(i, (&id, orig))| {
            seg(
                SegmentRepr {
                    last: true,
                    buffer: untagged(3, i as u32 + 1),
                    opcode: Opcode::AtomicResponse,
                    header: RdmapHeader::AtomicResponse(AtomicResponseRepr {
                        orig_request_id: id,
                        orig_value: orig,
                    }),
                },
                &[],
            )
        })
        .collect();
    w.send(&mut c, &responses, false);
    let mut atomics = Vec::new();
    for _ in 0..3000 {
        w.step();
        atomics.extend(
            w.completions()
                .into_iter()
                .filter(|c| matches!(c.opcode, WcOpcode::AtomicFetchAdd | WcOpcode::AtomicCmpSwap))
                .map(|c| (c.wr_id, c.status, c.atomic_orig)),
        );
        if atomics.len() == 3 {
            break;
        }
    }
    assert_eq!(
        atomics,
        vec![
            (0, WcStatus::Success, Some(100)),
            (2, WcStatus::Success, Some(5)),
            (4, WcStatus::Success, Some(300)),
        ]
    );
    assert_eq!(word(&w.region, 128), 100);
    assert_eq!(word(&w.region, 136), 5);
    assert_eq!(word(&w.region, 144), 300);
    assert_eq!(w.engine.qp_state(c.qp), Ok(QpState::Rts));
}

/// EXT-5-5, EXT-5.2.2-1, EXT-5.2.2-2, EXT-5.2.1-10, EXT-5.4-9, EXT-5.4-10, EXT-5.2.1-11,
/// EXT-5.2.1-5, EXT-5.2.1-6, EXT-5.4-6: the engine as responder. A Send, then
/// four Atomic Requests whose results depend on their order (FetchAdd, a CmpSwap that only
/// hits after it, another FetchAdd, a CmpSwap that misses), sent back to back. Each valid
/// request gets an Atomic Response: untagged on QN 3 (opcode 1011b), MSNs 1.., in request
/// order, with the original values only in-order execution gives. The engine's RDMAP
/// executes them itself: the only completion at the responder is the Send's receive,
/// and it is there by the time the first response reaches the peer.
#[test]
fn responder_answers_in_delivery_order_on_qn3_without_a_ulp_completion() {
    let mut w = world(MpaParams::default());
    let mut c = w.connect(1, cfg());
    let s = w.stag.0;
    set_word(&w.region, 1024, 10);
    set_word(&w.region, 1032, 0x55);
    let ulpdus = vec![
        send_ulpdu(1, b"first"),
        atomic_request_ulpdu(1, AtomicRequestRepr::fetch_add(11, s, 1024, 1, 0)),
        atomic_request_ulpdu(
            2,
            AtomicRequestRepr::cmp_swap(12, s, 1024, 100, u64::MAX, 11, u64::MAX),
        ),
        atomic_request_ulpdu(3, AtomicRequestRepr::fetch_add(13, s, 1024, 5, 0)),
        atomic_request_ulpdu(
            4,
            AtomicRequestRepr::cmp_swap(14, s, 1032, 1, u64::MAX, 0, u64::MAX),
        ),
    ];
    let bytes = frame(&mut c.framer, &ulpdus, false);
    w.send_raw(c.tcp, &bytes);
    let mut got = Vec::new();
    let mut at_first_response = None;
    let mut completions = Vec::new();
    for _ in 0..5000 {
        let new = w.read(&mut c);
        if !new.is_empty() && at_first_response.is_none() {
            at_first_response = Some(w.completions());
        }
        got.extend(new);
        if got.len() >= 4 {
            break;
        }
    }
    for _ in 0..100 {
        w.step();
        completions.extend(w.completions());
    }
    let answers: Vec<_> = got
        .iter()
        .map(|u| {
            assert_eq!(u[0] & 0x80, 0, "T = 0");
            assert_eq!(u[1] & 0x0F, 0b1011);
            let r = parse(u);
            let (qn, msn) = match r.buffer {
                DdpBuffer::Untagged { qn, msn, .. } => (qn, msn),
                b => panic!("tagged: {b:?}"),
            };
            match r.header {
                RdmapHeader::AtomicResponse(a) => (qn, msn, a.orig_request_id, a.orig_value),
                h => panic!("{h:?}"),
            }
        })
        .collect();
    assert_eq!(
        answers,
        vec![
            (3, 1, 11, 10),
            (3, 2, 12, 11),
            (3, 3, 13, 100),
            (3, 4, 14, 0x55)
        ]
    );
    assert_eq!(word(&w.region, 1024), 105);
    assert_eq!(word(&w.region, 1032), 0x55);
    let first = at_first_response.unwrap();
    assert_eq!(
        first
            .iter()
            .map(|c| (c.wr_id, c.opcode, c.status, c.byte_len))
            .collect::<Vec<_>>(),
        vec![(0, WcOpcode::Recv, WcStatus::Success, 5)],
        "the Send before the atomics is delivered first, and nothing else completes"
    );
    assert!(completions.is_empty(), "{completions:?}");
    assert_eq!(w.engine.qp_state(c.qp), Ok(QpState::Rts));
}

/// EXT-5.4-4: an Atomic Request is executed only once DDP has delivered it whole and
/// checked. Its FPDU held back by its last four octets (the CRC) changes nothing and gets
/// no response; the rest of it executes it. A further request whose CRC is wrong is never
/// executed: the engine answers with the MPA CRC Terminate (2/0/02) and memory stays.
#[test]
fn an_atomic_request_is_not_executed_before_ddp_delivers_it() {
    let mut w = world(MpaParams::default());
    let mut c = w.connect(0, cfg());
    assert!(c.negotiated.crc);
    let s = w.stag.0;
    set_word(&w.region, 1024, 10);
    let req = atomic_request_ulpdu(1, AtomicRequestRepr::fetch_add(1, s, 1024, 1, 0));
    let bytes = frame(&mut c.framer, &[req], false);
    let (head, crc) = bytes.split_at(bytes.len() - 4);
    w.send_raw(c.tcp, head);
    for _ in 0..300 {
        assert!(w.read(&mut c).is_empty(), "answered before the CRC arrived");
    }
    assert_eq!(
        word(&w.region, 1024),
        10,
        "executed before DDP delivered it"
    );
    w.send_raw(c.tcp, crc);
    let got = w.read_n(&mut c, 1);
    assert_eq!(got.len(), 1);
    assert_eq!(word(&w.region, 1024), 11);

    let bad = atomic_request_ulpdu(2, AtomicRequestRepr::fetch_add(2, s, 1024, 1, 0));
    w.send(&mut c, &[bad], true);
    let mut term = None;
    for _ in 0..3000 {
        term = terminate_in(&w.read(&mut c));
        if term.is_some() {
            break;
        }
    }
    assert_eq!(term, Some((2, 0, 2)));
    w.run(100);
    assert_eq!(
        word(&w.region, 1024),
        11,
        "a request with a bad CRC was executed"
    );
}

/// EXT-5.2.1-4, EXT-5.2.1-8: Atomic Requests use the RDMA Read Request Queue, one untagged
/// buffer (one MSN of QN 1) each, shared with Read Requests: a Read Request with MSN 1 and
/// an Atomic Request with MSN 2 are both answered; an Atomic Request that reuses MSN 2 is
/// refused with a Terminate and not executed.
#[test]
fn atomic_requests_take_one_msn_of_qn1_each() {
    let mut w = world(MpaParams::default());
    let mut c = w.connect(0, cfg());
    let s = w.stag.0;
    set_word(&w.region, 1024, 10);
    let read = seg(
        SegmentRepr {
            last: true,
            buffer: untagged(1, 1),
            opcode: Opcode::ReadRequest,
            header: RdmapHeader::ReadRequest(
                warpcore_engine::proto::wire::rdmap::ReadRequestRepr {
                    sink_stag: 0x100,
                    sink_to: 0,
                    read_size: 8,
                    src_stag: s,
                    src_to: 1024,
                },
            ),
        },
        &[],
    );
    let atomic = atomic_request_ulpdu(2, AtomicRequestRepr::fetch_add(7, s, 1024, 1, 0));
    w.send(&mut c, &[read, atomic], false);
    let got = w.read_n(&mut c, 2);
    let ops: Vec<_> = got.iter().map(|u| parse(u).opcode).collect();
    assert_eq!(ops, vec![Opcode::ReadResponse, Opcode::AtomicResponse]);
    assert_eq!(word(&w.region, 1024), 11);
    let again = atomic_request_ulpdu(2, AtomicRequestRepr::fetch_add(8, s, 1024, 1, 0));
    w.send(&mut c, &[again], false);
    let mut term = None;
    for _ in 0..3000 {
        let u = w.read(&mut c);
        assert!(
            u.iter().all(|u| parse(u).opcode != Opcode::AtomicResponse),
            "a reused MSN was answered"
        );
        term = terminate_in(&u);
        if term.is_some() {
            break;
        }
    }
    assert_eq!(term.map(|t| (t.0, t.1)), Some((1, 2)), "{term:?}");
    assert_eq!(word(&w.region, 1024), 11);
}

/// EXT-5.2.1-3, EXT-5.2.1-8: an Atomic Request must be untagged and on QN 1. One sent on
/// QN 0 or QN 2, or with T = 1, is refused with a Terminate and nothing is executed.
#[test]
fn an_atomic_request_off_qn1_or_tagged_is_refused() {
    for case in ["qn0", "qn2", "tagged"] {
        let mut w = world(MpaParams::default());
        let mut c = w.connect(1, cfg());
        let s = w.stag.0;
        set_word(&w.region, 1024, 10);
        let req = AtomicRequestRepr::fetch_add(1, s, 1024, 1, 0);
        // Untagged DDP header: QN is octets 6..10 (WIRE-FORMATS §3.3); emit refuses an
        // opcode on the wrong queue, so the octets are patched.
        let mut u = atomic_request_ulpdu(1, req);
        match case {
            "qn0" => u[9] = 0,
            "qn2" => u[9] = 2,
            _ => {}
        }
        if case == "tagged" {
            u[0] |= 0x80;
        }
        w.send(&mut c, &[u], false);
        let mut term = None;
        for _ in 0..3000 {
            let got = w.read(&mut c);
            assert!(
                got.iter()
                    .all(|u| Segment::parse(u)
                        .map_or(true, |s| s.repr.opcode != Opcode::AtomicResponse)),
                "{case}: answered"
            );
            term = terminate_in(&got);
            if term.is_some() {
                break;
            }
        }
        assert!(term.is_some(), "{case}: no Terminate");
        assert_eq!(word(&w.region, 1024), 10, "{case}: executed");
        assert!(
            w.completions()
                .iter()
                .all(|c| c.status != WcStatus::Success),
            "{case}"
        );
    }
}
