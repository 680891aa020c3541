//! A hand-driven iWARP peer (proto's MPA initiator and framer over a raw TCP stack) sends
//! hostile FPDUs to an engine core: each must earn the Terminate the specs prescribe, move
//! the QP to the error state and report the error, never panic, never touch memory outside
//! a registered region; random ULPDUs likewise never panic the engine.

mod common;

use std::sync::Arc;
use std::time::Duration as StdDuration;

use common::{all_access, ip, PD, PORT};
use warpcore_engine::mem::{Access, MrTable, Region, Stag};
use warpcore_engine::proto::mpa::deframer::{Deframer, DeframerConfig};
use warpcore_engine::proto::mpa::framer::{Framer, FramerConfig};
use warpcore_engine::proto::mpa::negotiation::{self as nego, Initiator};
use warpcore_engine::proto::wire::ddp::DdpBuffer;
use warpcore_engine::proto::wire::fpdu;
use warpcore_engine::proto::wire::mpa::{RtrType, RtrTypes};
use warpcore_engine::proto::wire::rdmap::{
    AtomicRequestRepr, AtomicResponseRepr, Opcode, ReadRequestRepr,
};
use warpcore_engine::proto::wire::segment::{RdmapHeader, Segment, SegmentRepr};
use warpcore_engine::tcp::link::LinkEnd;
use warpcore_engine::tcp::smoltcp::time::{Duration, Instant};
use warpcore_engine::tcp::{ConnId, Stack, TcpTuning};
use warpcore_engine::{
    CmEvent, CompletionQueue, ConnError, EngineConfig, EngineCore, MpaParams, QpState,
};

struct World {
    peer: Stack<LinkEnd>,
    engine: EngineCore<LinkEnd>,
    mrs: Arc<MrTable>,
    cq: Arc<CompletionQueue>,
    stag: Stag,
    region: Arc<Region>,
    now: Instant,
}

fn world() -> World {
    world_with(EngineConfig::default())
}

fn world_with(cfg: EngineConfig) -> World {
    world_listening(MpaParams::default(), cfg)
}

/// [`world_with`] whose engine listens with `params`.
fn world_listening(params: MpaParams, cfg: EngineConfig) -> World {
    let mrs = Arc::new(MrTable::new(64));
    let (peer, mut engine) = common::hand_driven_pair(cfg, &mrs);
    engine.listen(PORT, params).unwrap();
    let region = Arc::new(Region::allocate(4096, 4096).unwrap());
    let stag = mrs
        .register(Arc::clone(&region), PD, all_access(), 0)
        .unwrap();
    World {
        peer,
        engine,
        mrs,
        cq: Arc::new(CompletionQueue::new(256).unwrap()),
        stag,
        region,
        now: Instant::ZERO,
    }
}

impl World {
    fn step(&mut self) {
        self.peer.poll(self.now);
        self.engine.poll(self.now);
        self.now += Duration::from_micros(100);
    }

    /// `n` steps, taking what the peer's `tcp` receives; then the engine's events.
    fn run_reading(&mut self, tcp: ConnId, n: usize) -> (Vec<u8>, Vec<CmEvent>) {
        let mut rx = Vec::new();
        for _ in 0..n {
            self.step();
            let _ = self.peer.recv_with(tcp, |d| {
                rx.extend_from_slice(d);
                d.len()
            });
        }
        let mut events = Vec::new();
        while let Some(e) = self.engine.next_event() {
            events.push(e);
        }
        (rx, events)
    }
}

/// A connection from the hand-driven peer, in FPDU mode: (tcp, framer, deframer, qp).
fn connect(w: &mut World, rq: usize) -> (ConnId, Framer, Deframer, warpcore_engine::QpId) {
    connect_with(
        w,
        rq,
        nego::Config {
            ird: 4,
            ord: 4,
            ..nego::Config::default()
        },
    )
    .0
}

/// A QP of the world's PD on its one CQ (8 sends, 8 receives, one SGE each).
fn new_qp(w: &mut World) -> warpcore_engine::QpId {
    new_qp_of_depth(w, 8)
}

/// A QP of the world's PD on its one CQ (`depth` sends and receives, one SGE each).
fn new_qp_of_depth(w: &mut World, depth: u32) -> warpcore_engine::QpId {
    w.engine
        .create_qp(common::qp_attr(&w.cq, depth, 1))
        .unwrap()
        .0
}

/// Connects with the initiator settings `cfg`; also returns the RTR the initiator must send.
#[allow(clippy::type_complexity)]
fn connect_with(
    w: &mut World,
    rq: usize,
    cfg: nego::Config,
) -> (
    (ConnId, Framer, Deframer, warpcore_engine::QpId),
    Option<warpcore_engine::proto::wire::mpa::RtrType>,
) {
    let qp = new_qp(w);
    connect_qp(w, qp, rq, cfg)
}

/// [`connect_with`] for the QP `qp`.
#[allow(clippy::type_complexity)]
fn connect_qp(
    w: &mut World,
    qp: warpcore_engine::QpId,
    rq: usize,
    cfg: nego::Config,
) -> (
    (ConnId, Framer, Deframer, warpcore_engine::QpId),
    Option<warpcore_engine::proto::wire::mpa::RtrType>,
) {
    for i in 0..rq {
        w.engine
            .post_recv(qp, common::recv_wr(i as u64, &[(w.stag, 0, 64)]))
            .unwrap();
    }
    let tcp = w
        .peer
        .connect((ip(2), PORT), None, &TcpTuning::default())
        .unwrap();
    let mut init = Initiator::new(cfg, std::time::Instant::now()).unwrap();
    let mut negotiated = None;
    for _ in 0..5000 {
        w.step();
        let _ = w.peer.send_with(tcp, |b| init.poll_transmit(b));
        let _ = w.peer.recv_with(tcp, |d| init.handle_input(d));
        while let Some(e) = init.poll_event() {
            if let nego::Event::Established(n) = e {
                negotiated = Some(n);
            }
        }
        while let Some(e) = w.engine.next_event() {
            if let CmEvent::ConnectRequest(r) = e {
                w.engine.accept(r.request, qp, b"", None).unwrap();
            }
        }
        if negotiated.is_some() && w.engine.qp_state(qp).unwrap() == QpState::Rts {
            break;
        }
    }
    let n = negotiated.expect("negotiated");
    let framer = Framer::new(FramerConfig {
        markers: n.markers_tx,
        crc: n.crc,
        mulpdu: fpdu::mulpdu(1460, n.markers_tx),
        stream_offset: 0,
    });
    let deframer = Deframer::new(DeframerConfig {
        markers: n.markers_rx,
        crc: n.crc,
        ..DeframerConfig::default()
    });
    ((tcp, framer, deframer, qp), n.rtr)
}

fn send_ulpdus(
    w: &mut World,
    tcp: ConnId,
    framer: &mut Framer,
    ulpdus: &[Vec<u8>],
    corrupt_crc: bool,
) {
    let mut bytes = Vec::new();
    for u in ulpdus {
        let mut out = vec![0u8; framer.fpdu_wire_len(u.len())];
        let n = framer.emit(&[u], &mut out).unwrap();
        if corrupt_crc {
            out[n - 1] ^= 0x55;
        }
        bytes.extend_from_slice(&out[..n]);
    }
    let mut off = 0;
    while off < bytes.len() {
        off += w.peer.send(tcp, &bytes[off..]).unwrap();
        w.step();
    }
}

/// Steps the world once and hands `each` every whole ULPDU the engine's stream brought the
/// peer (what is left of an FPDU stays in the deframer for the next call).
fn step_and_read(w: &mut World, tcp: ConnId, d: &mut Deframer, mut each: impl FnMut(&[u8])) {
    w.step();
    let mut rx = Vec::new();
    let _ = w.peer.recv_with(tcp, |data| {
        rx.extend_from_slice(data);
        data.len()
    });
    let mut input = &rx[..];
    while let Ok((n, Some(u))) = d.poll(input) {
        input = &input[n..];
        each(&u);
    }
}

/// Runs until the engine's Terminate arrives at the peer; returns its (layer, etype, code).
fn terminate_from_engine(w: &mut World, tcp: ConnId, d: &mut Deframer) -> (u8, u8, u8) {
    for _ in 0..5000 {
        let mut term = None;
        step_and_read(w, tcp, d, |u| {
            if let Ok(seg) = Segment::parse(u) {
                if let RdmapHeader::Terminate(t) = seg.repr.header {
                    let c = t.code;
                    term = term.or(Some((c.layer(), c.etype(), c.code())));
                }
            }
        });
        if let Some(t) = term {
            return t;
        }
    }
    panic!("no Terminate from the engine")
}

fn expect_terminate(
    name: &str,
    ulpdus: impl FnOnce(u32) -> Vec<Vec<u8>>,
    corrupt: bool,
    rq: usize,
    want: (u8, u8, u8),
) {
    expect_terminate_in(world(), name, ulpdus, corrupt, rq, want);
}

/// [`expect_terminate`] in a world the caller set up (e.g. with a target of other rights).
fn expect_terminate_in(
    mut w: World,
    name: &str,
    ulpdus: impl FnOnce(u32) -> Vec<Vec<u8>>,
    corrupt: bool,
    rq: usize,
    want: (u8, u8, u8),
) {
    let (tcp, mut framer, mut deframer, qp) = connect(&mut w, rq);
    let ulpdus = ulpdus(w.stag.0);
    send_ulpdus(&mut w, tcp, &mut framer, &ulpdus, corrupt);
    let got = terminate_from_engine(&mut w, tcp, &mut deframer);
    assert_eq!(got, want, "{name}: Terminate code");
    for _ in 0..50 {
        w.step();
    }
    assert_eq!(w.engine.qp_state(qp).unwrap(), QpState::Error, "{name}");
    let mut reported = false;
    while let Some(e) = w.engine.next_event() {
        if let CmEvent::Error {
            error: ConnError::LocalTerminate(e),
            ..
        } = e
        {
            let c = e.terminate_code();
            assert_eq!((c.layer(), c.etype(), c.code()), want, "{name}: reported");
            reported = true;
        }
    }
    assert!(reported, "{name}: error reported to the application");
    // Every posted receive was flushed, but the one a message too long for it aimed at
    // (1/2/05), which fails with a local length error.
    let mut flushed = 0;
    while let Some(c) = w.cq.pop() {
        let status = if want == (1, 2, 5) && flushed == 0 {
            warpcore_engine::WcStatus::LocalLength
        } else {
            warpcore_engine::WcStatus::FlushErr
        };
        assert_eq!(c.status, status, "{name}");
        flushed += 1;
    }
    assert_eq!(flushed, rq, "{name}: receives flushed");
    // Nothing was placed: the region, zeroed at registration, is still all zeros, from
    // offset 0 (where these attacks would write) to its end.
    assert_eq!(first_changed(&w.region), None, "{name}: octet placed");
    let _ = &w.mrs;
}

/// The first octet of a region that is no longer zero, or `None` if all are. This is the
/// "nothing placed" judge of the hostile cases above.
fn first_changed(region: &Region) -> Option<usize> {
    let mut buf = vec![0u8; region.len()];
    region.read_at(0, &mut buf).unwrap();
    buf.iter().position(|&b| b != 0)
}

/// The "nothing placed" judge must be able to fail: one octet written at offset 0 (where a
/// hostile Write would land) and one at the last octet are both caught; a clean region passes.
#[test]
fn planted_placement_at_offset_0_is_caught() {
    let clean = Region::allocate(4096, 4096).unwrap();
    assert_eq!(first_changed(&clean), None, "clean region judged dirty");
    let hit = Region::allocate(4096, 4096).unwrap();
    hit.write_at(0, &[0xAB]).unwrap();
    assert_eq!(first_changed(&hit), Some(0), "placement at offset 0 missed");
    let tail = Region::allocate(4096, 4096).unwrap();
    tail.write_at(4095, &[1]).unwrap();
    assert_eq!(
        first_changed(&tail),
        Some(4095),
        "placement at the last octet missed"
    );
}

fn seg(repr: SegmentRepr, payload: &[u8]) -> Vec<u8> {
    let s = Segment { repr, payload };
    let mut v = vec![0u8; s.buffer_len()];
    s.emit(&mut v).unwrap();
    v
}

fn write(stag: u32, to: u64, payload: &[u8]) -> Vec<u8> {
    seg(
        SegmentRepr {
            last: true,
            buffer: DdpBuffer::Tagged { stag, to },
            opcode: Opcode::Write,
            header: RdmapHeader::None,
        },
        payload,
    )
}

/// A whole Send message in one segment.
fn send(msn: u32, payload: &[u8]) -> Vec<u8> {
    send_seg(msn, 0, true, payload)
}

fn read_req(msn: u32, src_stag: u32, src_to: u64, len: u32) -> Vec<u8> {
    seg(
        SegmentRepr {
            last: true,
            buffer: DdpBuffer::Untagged {
                rsvd_ulp2: 0,
                qn: 1,
                msn,
                mo: 0,
            },
            opcode: Opcode::ReadRequest,
            header: RdmapHeader::ReadRequest(ReadRequestRepr {
                sink_stag: 0x100,
                sink_to: 0,
                read_size: len,
                src_stag,
                src_to,
            }),
        },
        &[],
    )
}

/// DDP-7.1-10: a Write to an unknown STag → 1/1/00.
/// DDP-8.3-4: the invalid STag is reported to the local ULP as well.
#[test]
fn write_to_invalid_stag() {
    expect_terminate(
        "invalid stag",
        |s| vec![write(s ^ 0x100, 0, b"x")],
        false,
        1,
        (1, 1, 0),
    );
}

/// DDP-7.1-13: a Write past the end of the region → 1/1/01, nothing placed.
#[test]
fn write_out_of_bounds() {
    expect_terminate(
        "bounds",
        |s| vec![write(s, 4090, &[0xAA; 32])],
        false,
        1,
        (1, 1, 1),
    );
}

/// A Write whose TO + length wraps the 64-bit space: DDP checks the TO against the
/// region first (DDP-7.1-12, proto's order), so a zero-based region reports base or bounds,
/// 1/1/01, before the wrap check (DDP-7.1-14) could apply.
#[test]
fn write_to_wrap() {
    expect_terminate(
        "wrap",
        |s| vec![write(s, u64::MAX - 2, &[1; 8])],
        false,
        1,
        (1, 1, 1),
    );
}

/// DDP-7.1-2: a Send with no receive posted → 1/2/02.
#[test]
fn send_without_buffer() {
    expect_terminate("no buffer", |_| vec![send(1, b"hi")], false, 0, (1, 2, 2));
}

/// DDP-7.1-5: a Send with the wrong MSN → 1/2/03.
#[test]
fn send_with_wrong_msn() {
    expect_terminate("msn", |_| vec![send(7, b"hi")], false, 1, (1, 2, 3));
}

/// MPA-8-*: a bad CRC → 2/0/02.
#[test]
fn bad_crc() {
    expect_terminate("crc", |_| vec![send(1, b"hi")], true, 1, (2, 0, 2));
}

/// MPA-6-2, MPA-8-*: a bad CRC in an FPDU that fills its segment → 2/0/02 as well, where
/// the receive checksum's pass takes the segment's CRC32c (`crc::payload_digest`) and the
/// deframer checks the FPDU against it (`Deframer::poll_digest`): good full-segment
/// Writes first, the second placed from its frame and checked that way (where the CPU has
/// the 512-bit or 256-bit folding paths; computed elsewhere), then a Write with its CRC broken,
/// nothing of which is placed.
#[test]
fn bad_crc_in_a_full_segment() {
    let mut w = world();
    let (tcp, mut framer, mut deframer, qp) = connect(&mut w, 1);
    let stag = w.stag.0;
    let good = vec![0x5au8; 1_200];
    // Twice: the first FPDU after the handshake is read from the TCP's queue (the QP was
    // not steady yet when it arrived), the second from its frame, with its digest.
    for _ in 0..2 {
        send_ulpdus(&mut w, tcp, &mut framer, &[write(stag, 0, &good)], false);
        for _ in 0..50 {
            w.step();
        }
    }
    assert_eq!(
        common::read_region(&w.region, 0, 1_200),
        good,
        "the good Write placed"
    );
    let s = w.engine.stats();
    if warpcore_engine::mem::crc::payload_digest().is_some() {
        assert_eq!(s.fpdus_rx_by_digest, 1, "its CRC checked by digest: {s:?}");
    } else {
        assert_eq!(s.fpdus_rx_by_digest, 0);
    }
    let bad = vec![0xa5u8; 1_200];
    send_ulpdus(&mut w, tcp, &mut framer, &[write(stag, 0, &bad)], true);
    let got = terminate_from_engine(&mut w, tcp, &mut deframer);
    assert_eq!(got, (2, 0, 2), "Terminate code");
    assert_eq!(
        common::read_region(&w.region, 0, 1_200),
        good,
        "nothing of the bad Write placed"
    );
    for _ in 0..50 {
        w.step();
    }
    assert_eq!(w.engine.qp_state(qp).unwrap(), QpState::Error);
}

/// RDMAP-7.2-2: an undefined opcode → 0/2/06.
#[test]
fn undefined_opcode() {
    let mut u = send(1, b"hi");
    u[1] = (u[1] & 0xF0) | 0x0C;
    expect_terminate("opcode", |_| vec![u], false, 1, (0, 2, 6));
}

/// RDMAP-7.2-9: a Read Request for an invalid source STag → 0/1/00.
#[test]
fn read_request_invalid_stag() {
    expect_terminate(
        "read stag",
        |s| vec![read_req(1, s ^ 0x100, 0, 8)],
        false,
        1,
        (0, 1, 0),
    );
}

/// RDMAP-6.1-2: more Read Requests than the negotiated IRD → 0/2/07 (siw's code).
/// RDMAP-8.1.2-7: each stream's Read Request queue is its own, bounded by its IRD.
#[test]
fn read_requests_beyond_ird() {
    let reqs = |s| (1..=6).map(|m| read_req(m, s, 0, 8)).collect();
    expect_terminate("ird", reqs, false, 1, (0, 2, 7));
}

fn atomic_req(msn: u32, stag: u32, to: u64) -> Vec<u8> {
    atomic_request_seg(msn, AtomicRequestRepr::fetch_add(msn, stag, to, 1, 0))
}

/// The Atomic Request `r` as the message of MSN `msn` on QN 1.
fn atomic_request_seg(msn: u32, r: AtomicRequestRepr) -> Vec<u8> {
    seg(
        SegmentRepr {
            last: true,
            buffer: DdpBuffer::Untagged {
                rsvd_ulp2: 0,
                qn: 1,
                msn,
                mo: 0,
            },
            opcode: Opcode::AtomicRequest,
            header: RdmapHeader::AtomicRequest(r),
        },
        &[],
    )
}

/// EXT-5.2.1-2, EXT-8.2-4: an Atomic Request whose target word is not 8-aligned in
/// memory (here the region's base TO is 0 over aligned memory, so an unaligned TO names
/// an unaligned word) → 0/2/07, nothing placed. The rule is on the address, not the TO:
/// `engine_ext`'s `an_atomic_at_an_unaligned_to_naming_an_aligned_word_runs`.
/// The target allows atomics (without REMOTE_ATOMIC the access check, which comes first
/// now that the alignment is the resolved address's, answers 0/1/2).
#[test]
fn misaligned_atomic_request() {
    for to in [4, 12, 1] {
        let mut w = world();
        w.stag = w
            .mrs
            .register(
                Arc::clone(&w.region),
                PD,
                all_access() | Access::REMOTE_ATOMIC,
                0,
            )
            .unwrap();
        let reqs = |s| vec![atomic_req(1, s, to)];
        expect_terminate_in(w, "misaligned-atomic", reqs, false, 1, (0, 2, 7));
    }
}

/// EXT-5.2-1, RDMAP-6.1-2: Atomic Requests count against IRD next to Read Requests: with
/// IRD = 4 Reads outstanding, an Atomic Request → 0/2/07 as a fifth Read would (the IRD
/// check comes before the target's, which here lacks REMOTE_ATOMIC and would be 0/1/2).
#[test]
fn atomic_and_read_requests_beyond_ird() {
    let reqs = |s| {
        let mut v: Vec<Vec<u8>> = (1..=4).map(|m| read_req(m, s, 0, 8)).collect();
        v.push(atomic_req(5, s, 0));
        v
    };
    expect_terminate("ird-atomic", reqs, false, 1, (0, 2, 7));
}

/// An Atomic Response (QN 3, MSN 1) to a request nobody made.
fn unsolicited_atomic_response_ulpdu() -> Vec<u8> {
    seg(
        SegmentRepr {
            last: true,
            buffer: DdpBuffer::Untagged {
                rsvd_ulp2: 0,
                qn: 3,
                msn: 1,
                mo: 0,
            },
            opcode: Opcode::AtomicResponse,
            header: RdmapHeader::AtomicResponse(AtomicResponseRepr {
                orig_request_id: 1,
                orig_value: 5,
            }),
        },
        &[],
    )
}

/// EXT-5.2.2-*: an Atomic Response nobody asked for → 0/2/06 (as an unsolicited Read
/// Response).
#[test]
fn unsolicited_atomic_response() {
    let u = |_| vec![unsolicited_atomic_response_ulpdu()];
    expect_terminate("unsolicited-atomic", u, false, 1, (0, 2, 6));
}

/// A Read Response nobody asked for → 0/2/06.
#[test]
fn unsolicited_read_response() {
    let u = |s| {
        vec![seg(
            SegmentRepr {
                last: true,
                buffer: DdpBuffer::Tagged { stag: s, to: 0 },
                opcode: Opcode::ReadResponse,
                header: RdmapHeader::None,
            },
            b"data",
        )]
    };
    expect_terminate("unsolicited", u, false, 1, (0, 2, 6));
}

/// Seeded random ULPDUs (valid framing, garbage content) never panic the engine, never
/// write outside the region, and the QP ends in RTS or (after a Terminate) in the error
/// state.
#[test]
fn random_ulpdus_never_panic() {
    let mut x = 0x1234_5678_9abc_def1u64;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for round in 0..40 {
        let mut w = world();
        let (tcp, mut framer, _d, qp) = connect(&mut w, 2);
        let mut ulpdus = Vec::new();
        for _ in 0..(rnd() % 4 + 1) {
            let len = (rnd() % 80) as usize;
            let mut u: Vec<u8> = (0..len).map(|_| rnd() as u8).collect();
            // Half of them look like DDP/RDMAP version 1 so they get past the first checks.
            if round % 2 == 0 && u.len() > 2 {
                u[0] = (u[0] & 0xFC) | 1;
                u[1] = (u[1] & 0x3F) | 0x40;
            }
            ulpdus.push(u);
        }
        send_ulpdus(&mut w, tcp, &mut framer, &ulpdus, false);
        for _ in 0..200 {
            w.step();
        }
        let st = w.engine.qp_state(qp).unwrap();
        assert!(
            matches!(st, QpState::Rts | QpState::Error),
            "round {round}: {st:?}"
        );
        let _ = StdDuration::ZERO;
    }
}

/// RFC 6581 §9.2, MPA2-5-1: as responder the engine accepts each RTR type a peer may send
/// first (siw offers them all), consumes it without completing anything (a Send RTR takes
/// MSN 1 and no receive buffer; a Read RTR is answered with a zero-length Read Response),
/// and the stream then carries ordinary traffic.
#[test]
fn responder_accepts_every_rtr_type() {
    use warpcore_engine::proto::wire::mpa::{RtrType, RtrTypes};
    for t in [RtrType::Write, RtrType::Send, RtrType::Read] {
        let mut w = world();
        let cfg = nego::Config {
            peer_to_peer: true,
            rtr: RtrTypes::only(t),
            ird: 4,
            ord: 4,
            ..nego::Config::default()
        };
        let ((tcp, mut framer, mut deframer, qp), rtr) = connect_with(&mut w, 1, cfg);
        assert_eq!(rtr, Some(t));
        // The RTR, then a Send with the next MSN on QN 0.
        let msn = if t == RtrType::Send { 2 } else { 1 };
        send_ulpdus(
            &mut w,
            tcp,
            &mut framer,
            &[t.ulpdu().to_vec(), send(msn, b"after rtr")],
            false,
        );
        let mut rx = Vec::new();
        let mut read_responses = 0;
        for _ in 0..500 {
            w.step();
            let _ = w.peer.recv_with(tcp, |d| {
                rx.extend_from_slice(d);
                d.len()
            });
            let mut input = &rx[..];
            while let Ok((n, Some(u))) = deframer.poll(input) {
                input = &input[n..];
                let seg = Segment::parse(&u).expect("valid segment from the engine");
                assert_eq!(seg.repr.opcode, Opcode::ReadResponse, "{t:?}");
                assert!(seg.payload.is_empty() && seg.repr.last);
                read_responses += 1;
            }
            rx.clear();
        }
        assert_eq!(read_responses, usize::from(t == RtrType::Read), "{t:?}");
        assert_eq!(w.engine.qp_state(qp).unwrap(), QpState::Rts, "{t:?}");
        let c = w.cq.pop().expect("the Send after the RTR completes");
        assert_eq!((c.wr_id, c.byte_len), (0, 9), "{t:?}");
        assert!(w.cq.pop().is_none(), "{t:?}: the RTR completes nothing");
    }
}

/// What [`read_then_respond_into`] saw: the world, the Read's completion, the QP's state
/// and the Terminate the engine sent (layer, EType, code), if any.
type ReadOutcome = (
    World,
    Option<warpcore_engine::Completion>,
    QpState,
    Option<(u8, u8, u8)>,
);

/// The engine Reads 8 octets into `sink` at TO 0 from the hand-driven peer, which answers
/// with `resp(sink_stag, sink_to)` (its Read Response ULPDUs).
fn read_then_respond_into(
    w: World,
    sink: Stag,
    resp: impl FnOnce(u32, u64) -> Vec<Vec<u8>>,
) -> ReadOutcome {
    read_then_respond(w, &[(sink, 0, 8)], resp)
}

/// [`read_then_respond_into`] with the Read's local SGEs `sges` (none: a Read of no
/// octets, sink STag 0 on the wire).
fn read_then_respond(
    mut w: World,
    sges: &[(Stag, u64, u32)],
    resp: impl FnOnce(u32, u64) -> Vec<Vec<u8>>,
) -> ReadOutcome {
    let (tcp, mut framer, mut d, qp) = connect(&mut w, 0);
    let wr = warpcore_engine::SendWr {
        wr_id: 77,
        op: warpcore_engine::SendOp::Read {
            remote_stag: 0x1234,
            remote_to: 0,
        },
        sges: common::sges(sges),
        signaled: true,
        fence: false,
    };
    w.engine.post_send(qp, wr).unwrap();
    // Lift the responder's MPA fence (MPA-7.1.2-16): a zero-length Write.
    send_ulpdus(&mut w, tcp, &mut framer, &[write(0, 0, b"")], false);
    let mut rr = None;
    let mut term = None;
    let mut collect = |w: &mut World, rr: &mut Option<ReadRequestRepr>| {
        step_and_read(w, tcp, &mut d, |u| {
            if let Ok(s) = Segment::parse(u) {
                match s.repr.header {
                    RdmapHeader::ReadRequest(h) => *rr = Some(h),
                    RdmapHeader::Terminate(t) => {
                        term = Some((t.code.layer(), t.code.etype(), t.code.code()))
                    }
                    _ => {}
                }
            }
        });
    };
    for _ in 0..2000 {
        collect(&mut w, &mut rr);
        if rr.is_some() {
            break;
        }
    }
    let rr = rr.expect("the engine's Read Request");
    let len: u32 = sges.iter().map(|s| s.2).sum();
    assert_eq!(
        (rr.read_size, rr.sink_stag),
        (len, sges.first().map_or(0, |s| s.0 .0))
    );
    let ulpdus = resp(rr.sink_stag, rr.sink_to);
    send_ulpdus(&mut w, tcp, &mut framer, &ulpdus, false);
    for _ in 0..300 {
        collect(&mut w, &mut None);
    }
    let c = w.cq.pop();
    let st = w.engine.qp_state(qp).unwrap();
    (w, c, st, term)
}

fn read_response(stag: u32, to: u64, last: bool, payload: &[u8]) -> Vec<u8> {
    seg(
        SegmentRepr {
            last,
            buffer: DdpBuffer::Tagged { stag, to },
            opcode: Opcode::ReadResponse,
            header: RdmapHeader::None,
        },
        payload,
    )
}

/// RDMAP-5.2.2-3: a Read Response of the Read's STag, TO and length completes the Read
/// with its octets (the reference for the refusals below).
/// RDMAP-5.5-15: the delivered Read Response completes the Read.
#[test]
fn rdmap_5_2_2_a_matching_read_response_completes_the_read() {
    let w = world();
    let sink = w.stag;
    let (w, c, st, term) =
        read_then_respond_into(w, sink, |s, to| vec![read_response(s, to, true, &[9; 8])]);
    let c = c.expect("the Read's completion");
    assert_eq!(
        (c.wr_id, c.status, c.byte_len),
        (77, warpcore_engine::WcStatus::Success, 8)
    );
    assert_eq!((st, term), (QpState::Rts, None));
    assert_eq!(common::read_region(&w.region, 0, 8), vec![9; 8]);
}

/// RDMAP-5.2.2-5 and RDMAP-7.1-3: a Read Response that runs past the length the Read
/// asked for is refused before any octet of it is placed (a DDP base or bounds violation
/// of the tagged buffer the Read named, as siw answers it), the Read does not complete
/// successfully, and the stream ends with a Terminate. Before, its octets landed past the
/// Read's sink, the Read completed in error and the QP stayed in RTS.
#[test]
fn rdmap_5_2_2_5_a_read_response_longer_than_the_read_is_refused_before_placement() {
    let w = world();
    let sink = w.stag;
    let (w, c, st, term) =
        read_then_respond_into(w, sink, |s, to| vec![read_response(s, to, true, &[9; 64])]);
    assert_eq!(first_changed(&w.region), None, "nothing placed at all");
    assert_eq!((st, term), (QpState::Error, Some((1, 1, 1))));
    assert!(c.is_some_and(|c| c.wr_id == 77 && c.status != warpcore_engine::WcStatus::Success));
}

/// The same for a response that spreads past the sink over several segments, into a region
/// the application registered for local writes only: the peer may write the Read's sink
/// and nothing else of it.
#[test]
fn rdmap_5_2_2_5_a_long_read_response_never_writes_a_local_only_region_past_the_sink() {
    use warpcore_engine::mem::Access;
    let w = world();
    let region = Arc::new(Region::allocate(4096, 4096).unwrap());
    let sink = w
        .mrs
        .register(Arc::clone(&region), PD, Access::LOCAL_WRITE, 0)
        .unwrap();
    let (_w, _c, st, term) = read_then_respond_into(w, sink, |s, to| {
        (0..4u64)
            .map(|i| read_response(s, to + i * 1024, i == 3, &[0xAB; 1024]))
            .collect()
    });
    assert_eq!(first_changed(&region), None, "nothing placed at all");
    assert_eq!((st, term), (QpState::Error, Some((1, 1, 1))));
}

/// RDMAP-5.2.2-5: a Read Response at another TO of the sink's registration than the Read
/// named is refused, and nothing is placed there.
#[test]
fn rdmap_5_2_2_5_a_read_response_at_another_to_is_refused() {
    let w = world();
    let sink = w.stag;
    let (w, c, st, term) = read_then_respond_into(w, sink, |s, to| {
        vec![read_response(s, to + 2048, true, &[9; 8])]
    });
    assert_eq!(first_changed(&w.region), None, "nothing placed at all");
    assert_eq!((st, term), (QpState::Error, Some((1, 1, 1))));
    assert!(c.is_some_and(|c| c.status != warpcore_engine::WcStatus::Success));
}

/// RDMAP-5.2.2-5 and RDMAP-7.1-3: a Read Response that ends short of the Read's length
/// fails the Read and ends the stream with a Terminate (RDMAP remote operation error),
/// rather than only completing the Read in error while the stream goes on.
#[test]
fn rdmap_5_2_2_5_a_read_response_shorter_than_the_read_ends_the_stream() {
    let w = world();
    let sink = w.stag;
    let (_w, c, st, term) =
        read_then_respond_into(w, sink, |s, to| vec![read_response(s, to, true, &[9; 4])]);
    assert_eq!((st, term), (QpState::Error, Some((0, 2, 0xFF))));
    assert!(c.is_some_and(|c| c.wr_id == 77 && c.status != warpcore_engine::WcStatus::Success));
}

/// Departure 26: an initiator that closes TCP (FIN) before its first FPDU fails the
/// responder's QP with `Error { Negotiation(PeerClosed) }`, also when the FIN arrives
/// while the application is still deciding on the request and it then accepts. Before,
/// the FIN was dropped with no QP to take it, and the accepted QP sat in RTS for ever.
#[test]
fn departure_26_an_initiator_fin_before_accept_fails_the_accepted_qp() {
    let mut w = world();
    let qp = new_qp(&mut w);
    let tcp = w
        .peer
        .connect((ip(2), PORT), None, &TcpTuning::default())
        .unwrap();
    let mut init = Initiator::new(nego::Config::default(), std::time::Instant::now()).unwrap();
    let mut req = None;
    for _ in 0..5000 {
        w.step();
        let _ = w.peer.send_with(tcp, |b| init.poll_transmit(b));
        while let Some(e) = w.engine.next_event() {
            if let CmEvent::ConnectRequest(r) = e {
                req = Some(r);
            }
        }
        if req.is_some() {
            break;
        }
    }
    let req = req.expect("request");
    // The initiator gives up: FIN.
    w.peer.close(tcp).unwrap();
    for _ in 0..200 {
        w.step();
        let _ = w.peer.recv_with(tcp, |d| d.len());
    }
    let mut events: Vec<CmEvent> = Vec::new();
    while let Some(e) = w.engine.next_event() {
        events.push(e);
    }
    w.engine.accept(req.request, qp, b"", None).unwrap();
    for _ in 0..200_000 {
        w.step();
        let _ = w.peer.recv_with(tcp, |d| d.len());
        while let Some(e) = w.engine.next_event() {
            events.push(e);
        }
    }
    assert!(
        events.iter().any(|e| matches!(
            e,
            CmEvent::Error {
                error: ConnError::Negotiation {
                    error: nego::NegotiationError::PeerClosed,
                    ..
                },
                ..
            }
        )),
        "the initiator's close is never reported: {events:?}"
    );
    assert_eq!(w.engine.qp_state(qp).ok(), Some(QpState::Error));
}

/// MPA-7.1.2-16: the responder sends no FPDU until it has received and validated one from
/// the initiator, a Terminate included. A local operation that fails at execution on a
/// fenced responder (a fast registration of a STag still valid) fails the QP at once, and
/// its Terminate waits for the initiator's first FPDU (then the initiator is in FPDU mode
/// and gets it). Before, the 28-octet Terminate FPDU went out at once.
#[test]
fn mpa_7_1_2_16_a_fenced_responder_sends_no_terminate_on_a_local_failure() {
    use warpcore_engine::{SendOp, SendWr, SgeList};
    let mut w = world();
    let (tcp, mut framer, mut deframer, qp) = connect(&mut w, 0);
    let fr = w.mrs.alloc_fast_reg(PD).unwrap();
    // A fast registration names its STag as allocated; `s` is the key it has before.
    let op = |s: Stag| SendOp::FastReg {
        stag: fr.0,
        new_key: s.key().wrapping_add(1),
        mr: w.stag.0,
        mr_to: 0,
        len: 64,
        base_to: 0,
        access: warpcore_engine::mem::Access::REMOTE_READ,
    };
    let wr = |id: u64, op: SendOp| SendWr {
        wr_id: id,
        op,
        sges: SgeList::new(),
        signaled: true,
        fence: false,
    };
    let next = Stag::new(fr.index(), fr.key().wrapping_add(1));
    w.engine.post_send(qp, wr(1, op(fr))).unwrap();
    // Fast registration of a now valid STag: fails at execution (StillValid).
    w.engine.post_send(qp, wr(2, op(next))).unwrap();
    let (rx, events) = w.run_reading(tcp, 2000);
    // The local failure is reported, with its cause, and the QP fails.
    assert!(
        events.iter().any(|e| matches!(
            e,
            CmEvent::Error {
                error: ConnError::LocalOperation {
                    wr_id: 2,
                    cause: warpcore_engine::mem::MemError::StillValid,
                    ..
                },
                ..
            }
        )),
        "{events:?}"
    );
    assert_eq!(w.engine.qp_state(qp).ok(), Some(QpState::Terminate));
    // The MPA Reply was consumed by the initiator; anything more is an FPDU.
    let got = deframer.poll(&rx);
    assert!(
        rx.is_empty(),
        "the fenced responder sent {} octets (an FPDU: {:?}) before the initiator's first FPDU",
        rx.len(),
        got.map(|(n, u)| (n, u.map(|u| u.to_vec())))
    );
    // The initiator's first FPDU (a zero-length Write): now the Terminate comes.
    send_ulpdus(&mut w, tcp, &mut framer, &[write(0, 0, b"")], false);
    assert_eq!(
        terminate_from_engine(&mut w, tcp, &mut deframer),
        (0, 0, 0xFF)
    );
    for _ in 0..50 {
        w.step();
    }
    assert_eq!(w.engine.qp_state(qp).ok(), Some(QpState::Error));
}

/// The engine posts `reads` Reads of 8 octets each (wr_ids 1, 2, ...) into the world's
/// region and lifts the hand-driven responder's MPA fence; returns the connection and the
/// Read Request ULPDUs as they arrived at the responder, in order.
fn post_reads_and_collect_requests(
    w: &mut World,
    reads: u64,
) -> (ConnId, Framer, warpcore_engine::QpId, Vec<Vec<u8>>) {
    let (tcp, mut framer, mut d, qp) = connect(w, 0);
    for k in 0..reads {
        let wr = warpcore_engine::SendWr {
            wr_id: k + 1,
            op: warpcore_engine::SendOp::Read {
                remote_stag: 0x1234,
                remote_to: 0,
            },
            sges: common::sges(&[(w.stag, k * 64, 8)]),
            signaled: true,
            fence: false,
        };
        w.engine.post_send(qp, wr).unwrap();
    }
    send_ulpdus(w, tcp, &mut framer, &[write(0, 0, b"")], false);
    let mut requests = Vec::new();
    for _ in 0..2000 {
        step_and_read(w, tcp, &mut d, |u| {
            if Segment::parse(u).is_ok_and(|s| s.repr.opcode == Opcode::ReadRequest) {
                requests.push(u.to_vec());
            }
        });
        if requests.len() as u64 == reads {
            break;
        }
    }
    assert_eq!(requests.len() as u64, reads, "the engine's Read Requests");
    (tcp, framer, qp, requests)
}

/// RDMAP-06 §4.8 (the Terminate copies the DDP header of the Read Request it refuses),
/// RDMAP-7.1-1: with two Reads outstanding, a Terminate that names the second Read
/// Request (its QN 1 MSN) fails the second Read with the remote access error and flushes
/// the first, which the responder never answered. Before, the oldest outstanding Read
/// took the error whichever request the Terminate named, and the refused one was flushed.
#[test]
fn rdmap_4_8_a_terminate_fails_the_read_it_names_not_the_oldest() {
    use warpcore_engine::proto::error::{ProtocolError, RdmapError};
    use warpcore_engine::proto::rdmap::{emit_terminate, Offending};
    use warpcore_engine::WcStatus;
    let mut w = world();
    let (tcp, mut framer, qp, requests) = post_reads_and_collect_requests(&mut w, 2);
    let mut term = vec![0u8; 128];
    let n = emit_terminate(
        ProtocolError::Rdmap(RdmapError::InvalidStag),
        Some(&Offending::new(&requests[1])),
        &mut term,
    )
    .unwrap();
    term.truncate(n);
    send_ulpdus(&mut w, tcp, &mut framer, &[term], false);
    for _ in 0..300 {
        w.step();
    }
    assert_eq!(w.engine.qp_state(qp).unwrap(), QpState::Error);
    let mut got = Vec::new();
    while let Some(c) = w.cq.pop() {
        got.push((c.wr_id, c.status));
    }
    assert_eq!(
        got,
        vec![(1, WcStatus::FlushErr), (2, WcStatus::RemoteAccess)],
        "the Read the Terminate names takes its error, the other is flushed"
    );
}

/// RDMAP-5.2.2-3, RDMAP-5.5-12 and the house rule that bad network input never panics: a
/// Read Response that arrives while our Read Request still waits for room in the TCP send
/// buffer answers nothing we asked yet: it is unsolicited, 0/2/06 (departure 3), and the
/// Read does not complete. Before, it completed the Read, whose request was then still the
/// message being sent: the transmit path looked the retired request up with
/// `seq - sq_head`, a subtraction that overflowed (a panic in debug builds; in release a
/// local catastrophic Terminate after a Read completed successfully).
#[test]
fn rdmap_5_2_2_a_read_response_before_the_read_request_went_out_is_unsolicited() {
    use warpcore_engine::WcStatus;
    // A 128 KiB send buffer (the least the engine accepts) filled by copied FPDUs only.
    let mut cfg = EngineConfig::default();
    cfg.tcp.tx_buffer = 128 * 1024;
    cfg.tx_from_memory_min = usize::MAX;
    let mut w = world_with(cfg);
    let qp = new_qp_of_depth(&mut w, 256);
    let ((tcp, mut framer, mut d, qp), _) = connect_qp(
        &mut w,
        qp,
        0,
        nego::Config {
            ird: 4,
            ord: 4,
            ..nego::Config::default()
        },
    );
    send_ulpdus(&mut w, tcp, &mut framer, &[write(0, 0, b"")], false);
    for _ in 0..50 {
        w.step();
    }
    // From here the peer stops: nothing the engine sends is acknowledged. 128 Writes of
    // 1000 octets (an FPDU of 1020 octets each) and one of 444 (464) leave 48 octets of
    // the send buffer free, short of the 52 of a Read Request's FPDU.
    let stag = w.stag;
    let write_of = |len: u32| warpcore_engine::SendWr {
        wr_id: 0,
        op: warpcore_engine::SendOp::Write {
            remote_stag: 0x1234,
            remote_to: 0,
        },
        sges: common::sges(&[(stag, 0, len)]),
        signaled: false,
        fence: false,
    };
    for len in std::iter::repeat_n(1000, 128).chain([444]) {
        w.engine.post_send(qp, write_of(len)).unwrap();
    }
    let sink_to = 2048;
    let read = warpcore_engine::SendWr {
        wr_id: 77,
        op: warpcore_engine::SendOp::Read {
            remote_stag: 0x1234,
            remote_to: 0,
        },
        sges: common::sges(&[(stag, sink_to, 8)]),
        signaled: true,
        fence: false,
    };
    w.engine.post_send(qp, read).unwrap();
    for _ in 0..20 {
        w.engine.poll(w.now);
        w.now += Duration::from_micros(100);
    }
    // The peer answers the Read it guesses, before its request could go out.
    send_ulpdus(
        &mut w,
        tcp,
        &mut framer,
        &[read_response(stag.0, sink_to, true, &[9; 8])],
        false,
    );
    let term = terminate_from_engine(&mut w, tcp, &mut d);
    assert_eq!(term, (0, 2, 6), "an unsolicited Read Response");
    for _ in 0..50 {
        w.step();
    }
    assert_eq!(w.engine.qp_state(qp).unwrap(), QpState::Error);
    let c = w.cq.pop().expect("the Read's completion");
    assert_eq!((c.wr_id, c.status), (77, WcStatus::FlushErr));
    assert_eq!(
        common::read_region(&w.region, sink_to as usize, 8),
        vec![0; 8],
        "nothing placed into the sink"
    );
}

/// RDMAP-5.4-6, RDMAP-6.2.1-2 and DDP-6.2.2-1: an FPDU that fails after our FIN went out
/// (a graceful close, waiting for the peer to drain) can earn no Terminate, since nothing
/// may follow a FIN; the stream still fails: the QP goes to the error state and the
/// local user is told. Before, the Terminate waited for send room that never comes and
/// the QP stayed in `Terminate` for good.
#[test]
fn rdmap_5_4_6_an_error_after_our_fin_moves_the_qp_to_error() {
    let mut w = world();
    let (tcp, mut framer, _d, qp) = connect(&mut w, 0);
    send_ulpdus(&mut w, tcp, &mut framer, &[write(0, 0, b"")], false);
    for _ in 0..20 {
        w.step();
    }
    w.engine.disconnect(qp).unwrap();
    for _ in 0..50 {
        w.step();
    }
    assert_eq!(w.engine.qp_state(qp).unwrap(), QpState::Closing);
    while w.engine.next_event().is_some() {}
    // The peer, still sending, sends a Send with no receive posted (1/2/02).
    send_ulpdus(&mut w, tcp, &mut framer, &[send(1, b"x")], false);
    for _ in 0..200 {
        w.step();
    }
    assert_eq!(w.engine.qp_state(qp).unwrap(), QpState::Error);
    let mut reported = None;
    while let Some(e) = w.engine.next_event() {
        if let CmEvent::Error {
            error: ConnError::LocalTerminate(e),
            ..
        } = e
        {
            let c = e.terminate_code();
            reported = Some((c.layer(), c.etype(), c.code()));
        }
    }
    assert_eq!(reported, Some((1, 2, 2)), "the error reported to the user");
}

/// A Read of no octets (no local SGE: its sink STag on the wire is 0) that the peer
/// answers with a Read Response carrying octets under STag 0 is the peer's error
/// (RDMAP-5.2.2-5: a response longer than the Read; DDP-7.1-10: STag 0 names no buffer):
/// a DDP tagged-buffer Terminate (layer 1, type 1), and the Read is not blamed on local
/// memory (the receive path's "our Read's sink went away" case, `rx_lookup`, took it for
/// a local fault: a local catastrophic Terminate and `LocalProtection`).
#[test]
fn rdmap_5_2_2_5_octets_answering_a_read_of_none_are_the_peers_error() {
    let (_w, c, st, term) = read_then_respond(world(), &[], |stag, to| {
        vec![read_response(stag, to, true, &[9; 8])]
    });
    let c = c.expect("the Read completes");
    assert_eq!(st, QpState::Error);
    assert_eq!(
        term.map(|t| (t.0, t.1)),
        Some((1, 1)),
        "Terminate {term:?}, Read completion {c:?}: the peer's over-long response is a DDP tagged-buffer error"
    );
    assert_ne!(
        c.status,
        warpcore_engine::WcStatus::LocalProtection,
        "the Read was blamed on local memory: {c:?}"
    );
}

/// An MPA Request (the client-server model) and `n` zero-length Writes behind it
/// (well-formed FPDUs, CRC on as both sides ask by default; zero-length tagged segments
/// are not looked up, DDP-5.2-11): the stream, and the Request's length.
fn request_with_fpdus_behind(n: usize) -> (Vec<u8>, usize) {
    let cfg = nego::Config {
        peer_to_peer: false,
        ..nego::Config::default()
    };
    let mut init = Initiator::new(cfg, std::time::Instant::now()).unwrap();
    let mut req = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        let n = init.poll_transmit(&mut buf);
        if n == 0 {
            break;
        }
        req.extend_from_slice(&buf[..n]);
    }
    let request_len = req.len();
    let mut framer = Framer::new(FramerConfig {
        markers: false,
        crc: true,
        mulpdu: fpdu::mulpdu(1460, false),
        stream_offset: 0,
    });
    let u = write(0, 0, b"");
    let mut out = vec![0u8; framer.fpdu_wire_len(u.len())];
    for _ in 0..n {
        let k = framer.emit(&[&u], &mut out).unwrap();
        req.extend_from_slice(&out[..k]);
    }
    (req, request_len)
}

/// MPA-7.1.2-8/10, MPA-7.1.2-16: an initiator that puts an FPDU right behind its Request
/// (before it has our Reply: the peer's protocol error, but one the responder cannot tell
/// from a legal first FPDU, MPA-7.1.2-10) still gets our Reply first: the responder's
/// stream starts with it. (The receive poller, which runs before the transmit poller in the
/// loop after `accept`, took the early FPDU as the initiator's first and dropped the
/// responder with the Reply still queued in it: the Reply never went out.)
#[test]
fn mpa_7_1_2_8_an_fpdu_behind_the_request_does_not_swallow_the_reply() {
    let mut w = world();
    let qp = new_qp(&mut w);
    let tcp = w
        .peer
        .connect((ip(2), PORT), None, &TcpTuning::default())
        .unwrap();
    // The early FPDU: a zero-length Write, CRC on (both sides ask for it by default).
    let (req, _) = request_with_fpdus_behind(1);
    let mut off = 0;
    let mut request = None;
    for _ in 0..5000 {
        w.step();
        if off < req.len() {
            off += w.peer.send(tcp, &req[off..]).unwrap_or(0);
        }
        while let Some(e) = w.engine.next_event() {
            if let CmEvent::ConnectRequest(r) = e {
                request = Some(r);
            }
        }
        if request.is_some() && off == req.len() {
            break;
        }
    }
    // Let the FPDU reach the engine's receive buffer too.
    for _ in 0..50 {
        w.step();
    }
    let r = request.expect("request");
    w.engine.accept(r.request, qp, b"reply pd", None).unwrap();
    let (rx, events) = w.run_reading(tcp, 2000);
    assert!(
        rx.starts_with(b"MPA ID Rep Frame"),
        "the responder's stream does not start with its Reply: {} octets {:02x?}; events {events:?}",
        rx.len(),
        &rx[..rx.len().min(32)]
    );
}

/// MPA-7.1.2-27 (a startup guard against denial of service): while a request waits for the
/// application, the listener's connection offers a window of 4 KiB, not the engine's 4 MiB
/// receive buffer, so a peer that sends on behind its Request (no honest initiator sends
/// an FPDU before it has the Reply, mpa-08 §7.1.2 rule 2's note) parks that much at most.
/// Before, all 256 KiB of it was taken and held, up to 4 MiB a request for as long as the
/// request waited (4 GiB over a full table of 1,024). `accept` opens the whole window:
/// the rest of the stream then flows into the QP.
#[test]
fn mpa_7_1_2_27_a_pending_request_parks_at_most_a_small_window_behind_it() {
    let mut w = world();
    let qp = new_qp(&mut w);
    let tcp = w
        .peer
        .connect((ip(2), PORT), None, &TcpTuning::default())
        .unwrap();
    // 256 KiB of zero-length Writes (20 octets each) behind the Request.
    let (stream, request_len) = request_with_fpdus_behind(256 * 1024 / 20);
    let mut off = 0;
    let mut request = None;
    let step = |w: &mut World, off: &mut usize| {
        w.step();
        if *off < stream.len() {
            *off += w.peer.send(tcp, &stream[*off..]).unwrap_or(0);
        }
    };
    for _ in 0..5000 {
        step(&mut w, &mut off);
        while let Some(e) = w.engine.next_event() {
            if let CmEvent::ConnectRequest(r) = e {
                request = Some(r);
            }
        }
        if request.is_some() && off == stream.len() {
            break;
        }
    }
    // Give the peer ample time to push what the window lets through (a second).
    for _ in 0..10_000 {
        step(&mut w, &mut off);
    }
    assert_eq!(off, stream.len());
    let taken = off - w.peer.send_queue(tcp).unwrap();
    // The clamp's 4 KiB and the sixteenth of it the TCP's right edge may run ahead of the
    // buffer, rounded up to the window scale's unit rather than moved left (RFC 7323 2.4,
    // docs/net.md).
    assert!(
        taken <= request_len + 4096 + 4096 / 16,
        "the responder took {taken} octets behind a {request_len}-octet Request before accept"
    );
    let r = request.expect("request");
    w.engine.accept(r.request, qp, b"", None).unwrap();
    // The whole window at once: the 256 KiB arrive in a dozen steps (with the clamp kept,
    // 4 KiB a round trip, they took 180).
    for _ in 0..60 {
        step(&mut w, &mut off);
        if w.peer.send_queue(tcp).unwrap() == 0 {
            break;
        }
    }
    assert_eq!(
        w.peer.send_queue(tcp).unwrap(),
        0,
        "the stream did not flow at the full window after accept"
    );
    let (_, events) = w.run_reading(tcp, 100);
    assert!(
        matches!(events.as_slice(), [CmEvent::Established(_)]),
        "{events:?}"
    );
    assert_eq!(w.engine.qp_state(qp), Ok(QpState::Rts));
}

/// RDMAP-5.2.1-13/14: a Read Request of zero octets is answered with a zero-length Read
/// Response without its Data Source STag or TO being validated, whatever the engine's
/// `tx_from_memory_min` (0: "every FPDU from registered memory, zero-length ones
/// included"). With 0 the header-only response went to the from-memory path, which
/// looked the unvalidated source up, failed, and ended the stream with a local
/// catastrophic Terminate (0/0/FF) instead of answering.
#[test]
fn zero_length_read_with_an_unchecked_source_is_answered_from_memory_too() {
    for min in [512, 0] {
        let mut w = world_with(EngineConfig {
            tx_from_memory_min: min,
            ..EngineConfig::default()
        });
        let (tcp, mut framer, mut d, qp) = connect(&mut w, 0);
        let good = w.stag.0;
        // An invalid source STag, then a valid STag with a TO far outside its region,
        // then an ordinary Read: all three answered, in order.
        send_ulpdus(
            &mut w,
            tcp,
            &mut framer,
            &[
                read_req(1, good ^ 0x100, 0, 0),
                read_req(2, good, 1 << 40, 0),
                read_req(3, good, 0, 16),
            ],
            false,
        );
        let mut got = Vec::new();
        for _ in 0..300 {
            step_and_read(&mut w, tcp, &mut d, |u| {
                let s = Segment::parse(u).expect("a valid segment from the engine");
                got.push((s.repr.opcode, s.repr.last, s.payload.len(), s.repr.buffer));
            });
        }
        let sink = DdpBuffer::Tagged { stag: 0x100, to: 0 };
        assert_eq!(
            got,
            vec![
                (Opcode::ReadResponse, true, 0, sink),
                (Opcode::ReadResponse, true, 0, sink),
                (Opcode::ReadResponse, true, 16, sink),
            ],
            "tx_from_memory_min {min}"
        );
        assert_eq!(
            w.engine.qp_state(qp).unwrap(),
            QpState::Rts,
            "tx_from_memory_min {min}"
        );
    }
}

/// Initiator settings of the peer-to-peer model offering the RTR types `offer`.
fn p2p(offer: RtrTypes) -> nego::Config {
    nego::Config {
        peer_to_peer: true,
        rtr: offer,
        ird: 4,
        ord: 4,
        ..nego::Config::default()
    }
}

/// MPA2-5-1, MPA2-9.2-9: the first FPDU after a peer-to-peer Reply must be one of the
/// marked RTRs; any other FPDU in its place (a Send carrying data, an RTR of a type the
/// responder did not mark) is not delivered (no receive completes, nothing placed), and
/// the engine answers Terminate 2/0/07 and fails the QP.
#[test]
fn a_first_fpdu_other_than_a_marked_rtr_is_refused_with_2_0_07() {
    let firsts = [
        ("a Send with data", send(1, b"not an rtr")),
        ("a Send RTR", RtrType::Send.ulpdu().to_vec()),
        ("a Read RTR", RtrType::Read.ulpdu().to_vec()),
    ];
    for (name, first) in firsts {
        let mut w = world();
        let ((tcp, mut framer, mut d, qp), rtr) = connect_with(&mut w, 1, p2p(RtrTypes::WRITE));
        assert_eq!(rtr, Some(RtrType::Write), "{name}");
        send_ulpdus(&mut w, tcp, &mut framer, &[first], false);
        assert_eq!(
            terminate_from_engine(&mut w, tcp, &mut d),
            (2, 0, 7),
            "{name}"
        );
        let (_, events) = w.run_reading(tcp, 100);
        let c0 = w.cq.pop().expect("the posted receive is flushed");
        assert_eq!(c0.status, warpcore_engine::WcStatus::FlushErr, "{name}");
        assert_eq!(
            first_changed(&w.region),
            None,
            "{name}: something was placed"
        );
        assert!(
            events.iter().any(|e| matches!(
                e,
                CmEvent::Error {
                    error: ConnError::LocalTerminate(_),
                    ..
                }
            )),
            "{name}: {events:?}"
        );
        assert_eq!(w.engine.qp_state(qp).unwrap(), QpState::Error, "{name}");
    }
}

/// MPA2-9.2-5, MPA2-9.1-3: a responder marks only RTR types it can serve. An engine with
/// `max_ird` 0 serves no Read, whatever the listener's IRD says: with IRD 0x3FFF ("not
/// negotiated", which the engine turns into `max_ird`) it must not mark the Read RTR, or an
/// initiator that can send only that one sends a Read the responder has no IRD credit for.
#[test]
fn no_read_rtr_marked_without_any_ird() {
    let params = MpaParams {
        ird: 0x3FFF,
        ..MpaParams::default()
    };
    let cfg = EngineConfig {
        max_ird: 0,
        ..EngineConfig::default()
    };
    let mut w = world_listening(params, cfg);
    let qp = new_qp(&mut w);
    let tcp = w
        .peer
        .connect((ip(2), PORT), None, &TcpTuning::default())
        .unwrap();
    let mut init = Initiator::new(p2p(RtrTypes::READ), std::time::Instant::now()).unwrap();
    let mut established = None;
    for _ in 0..5000 {
        w.step();
        let _ = w.peer.send_with(tcp, |b| init.poll_transmit(b));
        while let Some(e) = w.engine.next_event() {
            match e {
                CmEvent::ConnectRequest(r) => w.engine.accept(r.request, qp, b"", None).unwrap(),
                CmEvent::Established(e) => established = Some(e),
                _ => {}
            }
        }
        if established.is_some() {
            break;
        }
    }
    let e = established.expect("accepted");
    assert_eq!(e.ird, 0, "the engine's IRD");
    assert!(
        !e.rtr_accepted.contains(RtrType::Read),
        "a Read RTR marked with IRD 0: {:?}",
        e.rtr_accepted
    );
}

/// A Terminate ULPDU (untagged, QN 2, MSN 1, MO 0, L = 1) whose Terminate header is
/// `header`, as given (a hostile peer's: HdrCt may announce what it does not hold).
fn terminate_ulpdu(header: &[u8]) -> Vec<u8> {
    let mut u = vec![0x41, 0x47, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0];
    u.extend_from_slice(header);
    u
}

/// The code of the first Terminate the engine sends on `tcp` within `steps` steps, if any.
fn terminate_sent_within(
    w: &mut World,
    tcp: ConnId,
    deframer: &mut Deframer,
    steps: usize,
) -> Option<warpcore_engine::proto::TerminateCode> {
    let mut answered = None;
    for _ in 0..steps {
        step_and_read(w, tcp, deframer, |u| {
            if let Ok(seg) = Segment::parse(u) {
                if let RdmapHeader::Terminate(t) = seg.repr.header {
                    answered = answered.or(Some(t.code));
                }
            }
        });
    }
    answered
}

/// The peer's Terminate the engine reported (`RemoteTerminate`), after every event it
/// queued; any other error reported, or none, fails the test (`header` names the case).
fn remote_terminate_reported(
    w: &mut World,
    header: &[u8],
) -> warpcore_engine::proto::TerminateReport {
    let mut remote = None;
    while let Some(e) = w.engine.next_event() {
        match e {
            CmEvent::Error {
                error: ConnError::RemoteTerminate(r),
                ..
            } => remote = Some(r),
            CmEvent::Error { error, .. } => panic!("{header:02x?}: reported {error:?}"),
            _ => {}
        }
    }
    remote.unwrap_or_else(|| panic!("{header:02x?}: no RemoteTerminate"))
}

/// The peer terminates with 0/2/07 and sets M, D and R but sends only the control word
/// (or a cut DDP part): the engine reports `RemoteTerminate` with 0/2/07, sends no
/// Terminate of its own, fails the QP and flushes its receives.
#[test]
fn terminate_claiming_absent_headers_is_reported_not_answered() {
    for header in [
        &[0x02u8, 0x07, 0xE0, 0x00][..],
        &[0x02, 0x07, 0xC0, 0x00, 0x00, 0x05, 0x41, 0x43, 0x00][..],
    ] {
        let mut w = world();
        let (tcp, mut framer, mut deframer, qp) = connect(&mut w, 2);
        send_ulpdus(&mut w, tcp, &mut framer, &[terminate_ulpdu(header)], false);
        let answered = terminate_sent_within(&mut w, tcp, &mut deframer, 300);
        assert_eq!(
            answered, None,
            "{header:02x?}: the engine answered with a Terminate"
        );
        assert_eq!(
            w.engine.qp_state(qp).unwrap(),
            QpState::Error,
            "{header:02x?}"
        );
        let r = remote_terminate_reported(&mut w, header);
        let c = r.code;
        assert_eq!(
            (c.layer(), c.etype(), c.code()),
            (0, 2, 0x07),
            "{header:02x?}"
        );
        assert_eq!((r.ddp, r.read_request), (None, None), "{header:02x?}");
        let mut flushed = 0;
        while let Some(c) = w.cq.pop() {
            assert_eq!(c.status, warpcore_engine::WcStatus::FlushErr);
            flushed += 1;
        }
        assert_eq!(flushed, 2, "{header:02x?}: receives flushed");
    }
}

/// a stream of Writes and Sends, framed with and without
/// markers and CRCs, split into two TCP sends at every octet, through the in-place and the
/// queued receive paths, places exactly what it places unsplit (MPA-5.1-5, MPA-6-3,
/// MPA-6-4, MPA-4.3-12).
#[test]
fn mpa_5_1_5_a_stream_split_at_every_octet_places_what_it_places_whole() {
    for (markers, crc, budget) in [
        (false, true, 1usize << 18),
        (true, true, 1 << 18),
        (false, true, 13),
        (true, true, 13),
        (true, false, 1 << 18),
        (false, false, 1 << 18),
    ] {
        let params = MpaParams {
            markers,
            crc,
            ..MpaParams::default()
        };
        let build = |stag: u32| {
            let a: Vec<u8> = (0..300u32).map(|i| (i * 7 + 1) as u8).collect();
            let b: Vec<u8> = (0..41u32).map(|i| (i * 3 + 5) as u8).collect();
            let c: Vec<u8> = (0..701u32).map(|i| (i * 11 + 9) as u8).collect();
            vec![
                write(stag, 100, &a),
                send(1, &b),
                write(stag, 1000, &c),
                send(2, &[]),
            ]
        };
        type Outcome = (Vec<u8>, Vec<(u64, u32)>);
        let mut reference: Option<Outcome> = None;
        let mut wire_len = None;
        let mut k = 0usize;
        loop {
            let mut w = world_listening(
                params.clone(),
                EngineConfig {
                    rx_budget_bytes: budget,
                    ..EngineConfig::default()
                },
            );
            let ((tcp, mut framer, _d, qp), _) = connect_with(
                &mut w,
                2,
                nego::Config {
                    ird: 4,
                    ord: 4,
                    crc,
                    ..nego::Config::default()
                },
            );
            let ulpdus = build(w.stag.0);
            let mut bytes = Vec::new();
            for u in &ulpdus {
                let mut out = vec![0u8; framer.fpdu_wire_len(u.len())];
                let n = framer.emit(&[u], &mut out).unwrap();
                bytes.extend_from_slice(&out[..n]);
            }
            let total = *wire_len.get_or_insert(bytes.len());
            assert_eq!(total, bytes.len());
            for part in [&bytes[..k], &bytes[k..]] {
                let mut off = 0;
                while off < part.len() {
                    off += w.peer.send(tcp, &part[off..]).unwrap();
                    w.step();
                }
                for _ in 0..5 {
                    w.step();
                }
            }
            for _ in 0..400 {
                w.step();
            }
            assert_eq!(
                w.engine.qp_state(qp).unwrap(),
                QpState::Rts,
                "markers {markers} split {k}"
            );
            let region = common::read_region(&w.region, 0, 4096);
            let mut comps = Vec::new();
            while let Some(c) = w.cq.pop() {
                assert_eq!(c.status, warpcore_engine::WcStatus::Success);
                comps.push((c.wr_id, c.byte_len));
            }
            match &reference {
                None => {
                    assert_eq!(comps, vec![(0, 41), (1, 0)], "markers {markers}");
                    assert_eq!(region[100], 1);
                    assert_eq!(region[1000], 9);
                    eprintln!("markers {markers}: {total} octets on the wire");
                    reference = Some((region, comps))
                }
                Some((r, c)) => {
                    assert!(r == &region, "markers {markers} split {k}: region differs");
                    assert_eq!(c, &comps, "markers {markers} split {k}");
                }
            }
            k += if budget < 100 { 7 } else { 1 };
            if k > total {
                break;
            }
        }
    }
}

/// An Immediate Data segment (RFC 7306): queue 0, `msn`, MO 0, L = 1, the value 7s.
fn imm_seg(msn: u32) -> Vec<u8> {
    seg(
        SegmentRepr {
            last: true,
            buffer: DdpBuffer::Untagged {
                rsvd_ulp2: 0,
                qn: 0,
                msn,
                mo: 0,
            },
            opcode: Opcode::ImmediateData,
            header: RdmapHeader::ImmediateData(
                warpcore_engine::proto::wire::rdmap::ImmediateDataRepr { data: [7; 8] },
            ),
        },
        &[],
    )
}

/// An untagged Send segment: queue 0, `msn`, `mo`, `last`.
fn send_seg(msn: u32, mo: u32, last: bool, payload: &[u8]) -> Vec<u8> {
    seg(
        SegmentRepr {
            last,
            buffer: DdpBuffer::Untagged {
                rsvd_ulp2: 0,
                qn: 0,
                msn,
                mo,
            },
            opcode: Opcode::Send,
            header: RdmapHeader::None,
        },
        payload,
    )
}

/// untagged and Read Request refusals earn the Terminates
/// of DDP-7.2 / RDMAP-06 Figure 9 (DDP-7.1-1..5, RDMAP-7.2-6..13, RDMAP-7.2-2), nothing placed.
#[test]
fn ddp_7_1_untagged_and_read_request_refusals_earn_their_terminates() {
    // MO at the buffer's end with payload: invalid MO.
    expect_terminate(
        "mo at end",
        |_| vec![send_seg(1, 64, true, b"x")],
        false,
        1,
        (1, 2, 4),
    );
    // MO near 2^32: invalid MO.
    expect_terminate(
        "mo huge",
        |_| vec![send_seg(1, u32::MAX - 3, true, b"xxxxxxxx")],
        false,
        1,
        (1, 2, 4),
    );
    // Too long for the buffer in one segment.
    expect_terminate(
        "too long",
        |_| vec![send_seg(1, 0, true, &[7; 65])],
        false,
        1,
        (1, 2, 5),
    );
    // MSN 0 (the wrap's neighbour) is out of range.
    expect_terminate(
        "msn 0",
        |_| vec![send_seg(0, 0, true, b"x")],
        false,
        1,
        (1, 2, 3),
    );
    // A Send on QN 5.
    let mut u = send_seg(1, 0, true, b"x");
    u[2..6].copy_from_slice(&[0, 0, 0, 0]);
    u[6..10].copy_from_slice(&5u32.to_be_bytes());
    expect_terminate("qn 5", move |_| vec![u], false, 1, (1, 2, 1));
    // Read Request with L = 0.
    expect_terminate(
        "read l0",
        |s| {
            let mut r = read_req(1, s, 0, 8);
            r[0] &= !0x40;
            vec![r]
        },
        false,
        1,
        (0, 2, 7),
    );
    // Read Request whose source TO + length wraps.
    expect_terminate(
        "read wrap",
        |s| vec![read_req(1, s, u64::MAX - 3, 8)],
        false,
        1,
        (0, 1, 4),
    );
    // Read Request past the end.
    expect_terminate(
        "read bounds",
        |s| vec![read_req(1, s, 4090, 8)],
        false,
        1,
        (0, 1, 1),
    );
    // Read Request with MSN 2.
    expect_terminate(
        "read msn",
        |s| vec![read_req(2, s, 0, 8)],
        false,
        1,
        (1, 2, 3),
    );
}

/// a CRC error ends its own stream with 2/0/02 (MPA-8-2,
/// MPA-8-12) while another QP on the same core goes on placing and completing.
#[test]
fn mpa_8_2_a_crc_error_ends_its_stream_while_another_qp_keeps_working() {
    let mut w = world();
    let (tcp_a, mut fa, mut da, qa) = connect(&mut w, 1);
    let (tcp_b, mut fb, _db, qb) = connect(&mut w, 1);
    let stag = w.stag.0;
    // A: a Write and then a Send with a broken CRC; B: Writes before and after.
    send_ulpdus(
        &mut w,
        tcp_b,
        &mut fb,
        &[write(stag, 2000, &[1; 100])],
        false,
    );
    send_ulpdus(
        &mut w,
        tcp_a,
        &mut fa,
        &[write(stag, 0, &[2; 100]), send(1, b"x")],
        true,
    );
    let got = terminate_from_engine(&mut w, tcp_a, &mut da);
    assert_eq!(got, (2, 0, 2));
    send_ulpdus(
        &mut w,
        tcp_b,
        &mut fb,
        &[write(stag, 3000, &[3; 100]), send(1, b"yy")],
        false,
    );
    for _ in 0..100 {
        w.step();
    }
    assert_eq!(w.engine.qp_state(qa).unwrap(), QpState::Error);
    assert_eq!(w.engine.qp_state(qb).unwrap(), QpState::Rts);
    assert_eq!(common::read_region(&w.region, 2000, 100), vec![1; 100]);
    assert_eq!(common::read_region(&w.region, 3000, 100), vec![3; 100]);
    let mut ok = 0;
    while let Some(c) = w.cq.pop() {
        if c.status == warpcore_engine::WcStatus::Success {
            assert_eq!(c.byte_len, 2);
            ok += 1;
        }
    }
    assert_eq!(ok, 1);
}

/// MPA-8-3, MPA-8-6, MPA-4.3-3, MPA-4.3-11.
#[test]
fn mpa_8_3_a_marker_mismatch_under_a_valid_crc_earns_2_0_03() {
    // The engine requires markers; the first FPDU's leading marker (stream offset 0) carries
    // FPDUPTR 4 instead of 0, with the CRC recomputed over it: MPA 2/0/03, nothing placed.
    for (at, ptr) in [(0usize, 4u16), (512, 0)] {
        let params = MpaParams {
            markers: true,
            ..MpaParams::default()
        };
        let mut w = world_listening(params, EngineConfig::default());
        let (tcp, mut framer, mut d, qp) = connect(&mut w, 1);
        let u = write(w.stag.0, 0, &[0x11; 900]);
        let mut out = vec![0u8; framer.fpdu_wire_len(u.len())];
        let n = framer.emit(&[&u], &mut out).unwrap();
        out.truncate(n);
        out[at + 2..at + 4].copy_from_slice(&ptr.to_be_bytes());
        let crc = fpdu::crc32c_append(0, &out[..n - 4]);
        out[n - 4..].copy_from_slice(&fpdu::crc_to_wire(crc));
        let mut off = 0;
        while off < out.len() {
            off += w.peer.send(tcp, &out[off..]).unwrap();
            w.step();
        }
        let got = terminate_from_engine(&mut w, tcp, &mut d);
        assert_eq!(got, (2, 0, 3), "marker at {at}");
        for _ in 0..50 {
            w.step();
        }
        assert_eq!(w.engine.qp_state(qp).unwrap(), QpState::Error);
        assert_eq!(first_changed(&w.region), None);
    }
}

/// RDMAP-5.4-5, RDMAP-7.1-1, MPA2-9.2-10/11 (docs/engine.md departure 26): a peer-to-peer
/// initiator may send a Terminate in place of its RTR. One whose HdrCt bits announce headers
/// it does not hold (siw's style, `terminate_claiming_absent_headers_is_reported_not_answered`)
/// is still the peer's verdict there: reported as `RemoteTerminate`, never answered with a
/// Terminate of ours (the fenced responder's first-ULPDU check must not take it for a bad RTR).
#[test]
fn mpa2_9_2_10_a_terminate_with_absent_headers_in_place_of_the_rtr_is_reported_not_answered() {
    for header in [
        // Well formed (no HdrCt bits): reported as the peer's before the fix too.
        &[0x20u8, 0x07, 0x00, 0x00][..],
        &[0x02, 0x07, 0xE0, 0x00][..],
        &[0x20, 0x07, 0xE0, 0x00][..],
        &[0x02, 0x07, 0xC0, 0x00, 0x00, 0x05, 0x41, 0x43, 0x00][..],
    ] {
        let mut w = world();
        let cfg = nego::Config {
            peer_to_peer: true,
            rtr: RtrTypes::only(RtrType::Write),
            ird: 4,
            ord: 4,
            ..nego::Config::default()
        };
        let ((tcp, mut framer, mut deframer, qp), rtr) = connect_with(&mut w, 2, cfg);
        assert_eq!(rtr, Some(RtrType::Write));
        // The Terminate goes first, in place of the RTR.
        send_ulpdus(&mut w, tcp, &mut framer, &[terminate_ulpdu(header)], false);
        let answered = terminate_sent_within(&mut w, tcp, &mut deframer, 300);
        assert_eq!(
            answered, None,
            "{header:02x?}: the engine answered the peer's Terminate with one of its own"
        );
        assert_eq!(w.engine.qp_state(qp).unwrap(), QpState::Error);
        let r = remote_terminate_reported(&mut w, header);
        assert_eq!(
            (r.code.layer(), r.code.etype(), r.code.code()),
            (header[0] >> 4, header[0] & 0xF, header[1]),
            "{header:02x?}"
        );
    }
}

/// A Read Request as [`read_req`], then edited: MO, the L flag, octets appended after its
/// 28-octet header, or the header cut to `cut` octets.
fn read_req_edited(
    msn: u32,
    src_stag: u32,
    mo: u32,
    last: bool,
    trailing: usize,
    cut: Option<usize>,
) -> Vec<u8> {
    let mut r = read_req(msn, src_stag, 0, 8);
    r[14..18].copy_from_slice(&mo.to_be_bytes());
    if !last {
        r[0] &= !0x40;
    }
    r.extend(std::iter::repeat_n(0u8, trailing));
    if let Some(n) = cut {
        r.truncate(18 + n);
    }
    r
}

// RDMAP-7.2-6, RDMAP-7.2-1, DDP-7.1-1..5, DDP-7.1-15, RDMAP-06 §7.1 rules 22/23
// (RDMAP-7.1-3/4): DDP validates every untagged field of a Read Request before RDMAP judges
// the message, so a Read Request with a DDP fault (MSN out of range, MO outside the QN 1
// buffer) and an RDMAP fault its octets show (L = 0 or MO > 0: not whole in one segment; its
// header cut short or followed by octets: 0/2/07) earns DDP's Terminate. Before the fix each
// of the `rdmap_7_2_6_read_request_*` tests below earned 0/2/07: the decode's RDMAP checks ran
// before DDP's. Linux siw answers the MSN ones with DDP 1/2/03 too (`siw_init_rresp`; it
// checks no MO).

/// MSN 2 (1 expected) and MO 4: DDP's 1/2/03 (DDP-7.1-5, RDMAP-7.2-6).
#[test]
fn rdmap_7_2_6_read_request_msn_and_mo() {
    let u = |s| vec![read_req_edited(2, s, 4, true, 0, None)];
    expect_terminate("msn+mo", u, false, 1, (1, 2, 3));
}

/// MSN 2 and L = 0: DDP's 1/2/03 (DDP-7.1-5, RDMAP-7.2-6).
#[test]
fn rdmap_7_2_6_read_request_msn_and_not_last() {
    let u = |s| vec![read_req_edited(2, s, 0, false, 0, None)];
    expect_terminate("msn+l0", u, false, 1, (1, 2, 3));
}

/// MSN 2 and four octets after the 28-octet header: DDP's 1/2/03 (DDP-7.1-5, RDMAP-7.2-6).
#[test]
fn rdmap_7_2_6_read_request_msn_and_trailing_octets() {
    let u = |s| vec![read_req_edited(2, s, 0, true, 4, None)];
    expect_terminate("msn+trailing", u, false, 1, (1, 2, 3));
}

/// MSN 2 and the header cut to 20 of its 28 octets: DDP's 1/2/03 (DDP-7.1-5, RDMAP-7.2-6,
/// RDMAP-4.4-1).
#[test]
fn rdmap_7_2_6_read_request_msn_and_cut_header() {
    let u = |s| vec![read_req_edited(2, s, 0, true, 0, Some(20))];
    expect_terminate("msn+cut", u, false, 1, (1, 2, 3));
}

/// MO 4096, outside the QN 1 buffer: DDP's invalid MO 1/2/04 (DDP-7.1-3), not RDMAP's
/// "not whole in one segment".
#[test]
fn rdmap_7_2_6_read_request_mo_outside_its_buffer() {
    let u = |s| vec![read_req_edited(1, s, 4096, true, 0, None)];
    expect_terminate("mo outside", u, false, 1, (1, 2, 4));
}

/// Three faults: MSN, MO and an invalid source STag (RDMAP-7.2-9): DDP's 1/2/03 first.
#[test]
fn rdmap_7_2_6_read_request_msn_mo_and_invalid_source_stag() {
    let u = |s: u32| vec![read_req_edited(2, s ^ 0x100, 4, true, 0, None)];
    expect_terminate("msn+mo+stag", u, false, 1, (1, 2, 3));
}

/// RDMAP-6.1-5: with IRD = 4 Reads outstanding, a fifth with MSN 7 (5 expected) and L = 0:
/// beyond IRD and not whole (both RDMAP's), MSN out of range (DDP's, first: 1/2/03).
#[test]
fn rdmap_7_2_6_read_request_beyond_ird_with_msn_and_not_last() {
    let u = |s| {
        let mut v: Vec<Vec<u8>> = (1..=4).map(|m| read_req(m, s, 0, 8)).collect();
        v.push(read_req_edited(7, s, 0, false, 0, None));
        v
    };
    expect_terminate("ird+msn+l0", u, false, 1, (1, 2, 3));
}

/// EXT-8.2-1, EXT-5.2-1: an Atomic Request with MSN 2 (1 expected) and MO 4: DDP's 1/2/03,
/// not RDMAP's 0/2/07.
#[test]
fn rdmap_7_2_6_atomic_request_msn_and_mo() {
    let u = |s| {
        let mut a = atomic_req(2, s, 0);
        a[14..18].copy_from_slice(&4u32.to_be_bytes());
        vec![a]
    };
    expect_terminate("atomic msn+mo", u, false, 1, (1, 2, 3));
}

/// EXT-8.2-1, EXT-6.3-7, DDP-7.1-2: Immediate Data that is not exactly 8 octets (0/2/07)
/// with no receive posted for it (DDP 1/2/02): DDP's Terminate. Before the fix: 0/2/07.
/// The same segment with a receive posted keeps RDMAP's 0/2/07.
#[test]
fn rdmap_7_2_6_immediate_data_without_a_buffer_is_ddp_first() {
    let long = move |_| {
        let mut u = imm_seg(1);
        u.extend_from_slice(&[0; 4]);
        vec![u]
    };
    expect_terminate("imm no buffer", long, false, 0, (1, 2, 2));
    expect_terminate("imm long", long, false, 1, (0, 2, 7));
}

/// Immediate Data of 12 octets (0/2/07, EXT-6.3-7) on QN 0 of a QP on a shared receive
/// queue that holds no buffer of its own: DDP looks for the buffer in the shared queue
/// first (DDP-7.1-2, EXT-8.2-1). An empty queue: no buffer, 1/2/02 (before the fix: 0/2/07);
/// a buffer there: RDMAP's 0/2/07, and the buffer claimed for it goes back (departure 23).
#[test]
fn rdmap_7_2_6_immediate_data_on_a_shared_receive_queue_is_ddp_first() {
    for posted in [0usize, 1] {
        let mut w = world();
        let (qp, shared) = w.engine.create_qp(common::qp_attr(&w.cq, 8, 1)).unwrap();
        let srq = Arc::new(warpcore_engine::SharedRq::new(PD, 4, 1).unwrap());
        shared.attach_srq(Arc::clone(&srq)).unwrap();
        for i in 0..posted {
            srq.post(&w.mrs, &common::recv_wr(i as u64, &[(w.stag, 0, 64)]))
                .unwrap();
        }
        let ((tcp, mut framer, mut deframer, _), _) = connect_qp(
            &mut w,
            qp,
            0,
            nego::Config {
                ird: 4,
                ord: 4,
                ..nego::Config::default()
            },
        );
        let mut u = imm_seg(1);
        u.extend_from_slice(&[0; 4]);
        send_ulpdus(&mut w, tcp, &mut framer, &[u], false);
        let got = terminate_from_engine(&mut w, tcp, &mut deframer);
        let want = if posted == 0 { (1, 2, 2) } else { (0, 2, 7) };
        assert_eq!(got, want, "{posted} posted");
        assert_eq!(srq.len(), posted, "the shared queue keeps its buffers");
    }
}

/// EXT-6.3-2, EXT-6.3-7, RDMAP-7.2-2: Immediate Data is a whole message in one segment. A
/// peer that starts a Send (MSN 1, L = 0, 4 or 8 octets placed: within the 8 octets the
/// Immediate Data's length claims for the message, so DDP's MO checks pass) and ends the
/// same message with an Immediate Data segment (MSN 1, MO 0, L = 1) sent a message that is
/// neither: the stream ends with 0/2/07 and the receive is flushed. Before the fix it
/// completed as a `RecvImm` of length 0, the placed octets silently dropped.
#[test]
fn ext_6_3_immediate_data_ending_a_started_send_terminates() {
    for sent in [4usize, 8] {
        immediate_data_ending_a_started_send(sent);
    }
}

fn immediate_data_ending_a_started_send(sent: usize) {
    let mut w = world();
    let (tcp, mut framer, mut deframer, qp) = connect(&mut w, 1);
    let ulpdus = [send_seg(1, 0, false, &vec![9; sent]), imm_seg(1)];
    send_ulpdus(&mut w, tcp, &mut framer, &ulpdus, false);
    let got = terminate_from_engine(&mut w, tcp, &mut deframer);
    assert_eq!(got, (0, 2, 7), "{sent} octets sent: Terminate code");
    for _ in 0..50 {
        w.step();
    }
    assert_eq!(w.engine.qp_state(qp).unwrap(), QpState::Error);
    let mut statuses = Vec::new();
    while let Some(c) = w.cq.pop() {
        statuses.push((c.status, c.opcode));
    }
    assert_eq!(
        statuses,
        [(
            warpcore_engine::WcStatus::FlushErr,
            warpcore_engine::WcOpcode::Recv
        )],
        "{sent} octets sent: the receive is flushed, not completed"
    );
}

/// The orders that held before the fix and must keep holding: DDP's faults before RDMAP's
/// later checks (an invalid source STag, RDMAP-7.2-9; IRD, RDMAP-6.1-5; a Data Sink range
/// that wraps), the QN check of the decode (DDP 1/2/01, as siw) before the whole-message
/// one, and each RDMAP fault alone still RDMAP's.
#[test]
fn rdmap_7_2_6_read_request_fault_orders_kept() {
    expect_terminate(
        "msn+stag",
        |s| vec![read_req(2, s ^ 0x100, 0, 8)],
        false,
        1,
        (1, 2, 3),
    );
    expect_terminate(
        "ird+msn",
        |s| (1..=5).map(|m| read_req(m + m / 5, s, 0, 8)).collect(),
        false,
        1,
        (1, 2, 3),
    );
    expect_terminate(
        "msn+sink wrap",
        |s| {
            let mut r = read_req(2, s, 0, 8);
            // SinkTO (octets 22..30) at 2^64 - 4: SinkTO + 8 wraps.
            r[22..30].copy_from_slice(&(u64::MAX - 3).to_be_bytes());
            vec![r]
        },
        false,
        1,
        (1, 2, 3),
    );
    expect_terminate(
        "qn+l0+stag",
        |s| {
            let mut r = read_req_edited(1, s ^ 0x100, 0, false, 0, None);
            r[6..10].copy_from_slice(&5u32.to_be_bytes());
            vec![r]
        },
        false,
        1,
        (1, 2, 1),
    );
    expect_terminate(
        "mo 4 alone",
        |s| vec![read_req_edited(1, s, 4, true, 0, None)],
        false,
        1,
        (0, 2, 7),
    );
    expect_terminate(
        "trailing alone",
        |s| vec![read_req_edited(1, s, 0, true, 4, None)],
        false,
        1,
        (0, 2, 7),
    );
    expect_terminate(
        "cut alone",
        |s| vec![read_req_edited(1, s, 0, true, 0, Some(20))],
        false,
        1,
        (0, 2, 7),
    );
}

/// Runs until the engine's Terminate arrives at the peer; returns it whole.
fn terminate_repr_from_engine(
    w: &mut World,
    tcp: ConnId,
    d: &mut Deframer,
) -> warpcore_engine::proto::wire::rdmap::TerminateRepr {
    for _ in 0..5000 {
        let mut term = None;
        step_and_read(w, tcp, d, |u| {
            if let Ok(seg) = Segment::parse(u) {
                if let RdmapHeader::Terminate(t) = seg.repr.header {
                    term = term.or(Some(t));
                }
            }
        });
        if let Some(t) = term {
            return t;
        }
    }
    panic!("no Terminate from the engine")
}

/// RFC 7306 §8.1 rule 2 (EXT-8.1-2): an error RDMAP finds on an incoming Atomic Request or
/// Atomic Response once DDP delivered it is answered with a Terminate that carries the
/// offending message's DDP header (D = 1, no RDMA header). An Atomic Request with an
/// AOpCode RFC 7306 does not define (EXT-5.2.1-7, 0/2/06 by docs/decisions/0001 RDMAP item
/// 6) and an Atomic Response that answers nothing outstanding (EXT-5.2.2 item 7, 0/2/06)
/// are both whole, valid DDP messages of a known layout: their Terminates named the
/// offending message by nothing (D = 0), so a requester could not tell which of its
/// atomics was refused (`Qp::remote_terminate` names a request by its QN 1 MSN).
#[test]
fn ext_8_1_2_refused_atomic_messages_copy_their_ddp_header() {
    use warpcore_engine::mem::Access;
    let atomic_request = |stag: u32, aopcode: u8| {
        let mut r = AtomicRequestRepr::fetch_add(7, stag, 8, 1, 0);
        r.aopcode = aopcode;
        atomic_request_seg(1, r)
    };
    let atomic_response = unsolicited_atomic_response_ulpdu();
    for (name, aopcode) in [
        ("reserved AOpCode 1", Some(1)),
        ("AOpCode 0xF", Some(0xF)),
        ("unsolicited response", None),
    ] {
        let mut w = world();
        let region = Arc::new(Region::allocate(4096, 4096).unwrap());
        let stag = w
            .mrs
            .register(
                Arc::clone(&region),
                PD,
                all_access() | Access::REMOTE_ATOMIC,
                0,
            )
            .unwrap();
        let (tcp, mut framer, mut d, qp) = connect(&mut w, 1);
        let offending = match aopcode {
            Some(a) => atomic_request(stag.0, a),
            None => atomic_response.clone(),
        };
        send_ulpdus(
            &mut w,
            tcp,
            &mut framer,
            std::slice::from_ref(&offending),
            false,
        );
        let t = terminate_repr_from_engine(&mut w, tcp, &mut d);
        let c = t.code;
        assert_eq!((c.layer(), c.etype(), c.code()), (0, 2, 6), "{name}");
        let (len, copied) = t
            .ddp
            .unwrap_or_else(|| panic!("{name}: the Terminate copies no DDP header"));
        assert_eq!(
            copied.as_bytes(),
            &offending[..18],
            "{name}: the offending DDP header"
        );
        assert!(t.m, "{name}: M with D");
        assert_eq!(len, 0, "{name}: no payload after the RDMAP header");
        assert!(
            !t.r_bit && t.rdma.is_none(),
            "{name}: no RDMA header (EXT-8.1-2)"
        );
        // Nothing executed.
        assert_eq!(
            region
                .atomic_u64_at(8)
                .unwrap()
                .load(std::sync::atomic::Ordering::SeqCst),
            0
        );
        for _ in 0..50 {
            w.step();
        }
        assert_eq!(w.engine.qp_state(qp).unwrap(), QpState::Error, "{name}");
    }
}

/// RDMAP-7.1-3, RDMAP-06 Figure 10: a Read Response that answers no outstanding Read
/// (docs/engine.md departure 3) is refused with 0/2/06 after DDP delivered it; its layout is
/// known, so the Terminate names it by its DDP header and segment length (D = M = 1, no
/// RDMA header). Before the fix the Terminate copied nothing, as for an undefined opcode.
#[test]
fn rdmap_7_1_3_an_unsolicited_read_response_is_named_in_the_terminate() {
    let mut w = world();
    let (tcp, mut framer, mut d, qp) = connect(&mut w, 1);
    let offending = read_response(w.stag.0, 0x40, true, b"data");
    send_ulpdus(
        &mut w,
        tcp,
        &mut framer,
        std::slice::from_ref(&offending),
        false,
    );
    let t = terminate_repr_from_engine(&mut w, tcp, &mut d);
    let c = t.code;
    assert_eq!((c.layer(), c.etype(), c.code()), (0, 2, 6));
    let (len, copied) = t
        .ddp
        .expect("the Terminate copies the Read Response's DDP header");
    assert_eq!((copied.as_bytes(), len), (&offending[..14], 4));
    assert!(t.m && !t.r_bit && t.rdma.is_none());
    for _ in 0..50 {
        w.step();
    }
    assert_eq!(w.engine.qp_state(qp).unwrap(), QpState::Error);
    assert_eq!(first_changed(&w.region), None, "nothing placed");
}

/// RDMAP-5.2.2-5, RDMAP-7.1-1 (review): a Read whose Read Response this side refuses (a
/// response that runs past the Read, lands at another TO, names another or an invalid
/// STag, or ends short) is the request that failed: it completes with
/// `WcStatus::Fatal` ("this side detected a protocol error and terminated the stream"),
/// not `FlushErr` as if it had merely been caught by another request's failure (the verbs
/// give the failing request its own error, siw `SIW_WC_GENERAL_ERR`; a flush status on
/// every request hid which one failed). A Read posted behind it is flushed.
#[test]
fn a_read_whose_response_is_refused_fails_with_its_own_status() {
    use warpcore_engine::WcStatus;
    type Resp = fn(u32, u64) -> Vec<Vec<u8>>;
    let cases: [(&str, Resp); 5] = [
        ("longer", |s, to| vec![read_response(s, to, true, &[9; 64])]),
        ("another TO", |s, to| {
            vec![read_response(s, to + 2048, true, &[9; 8])]
        }),
        ("past the region", |s, to| {
            vec![read_response(s, to + 8192, true, &[9; 8])]
        }),
        ("invalid STag", |s, to| {
            vec![read_response(s ^ 0x100, to, true, &[9; 8])]
        }),
        ("shorter", |s, to| vec![read_response(s, to, true, &[9; 4])]),
    ];
    for (name, resp) in cases {
        let mut w = world();
        let (tcp, mut framer, mut d, qp) = connect(&mut w, 0);
        let read = |wr_id: u64, to: u64| warpcore_engine::SendWr {
            wr_id,
            op: warpcore_engine::SendOp::Read {
                remote_stag: 0x1234,
                remote_to: 0,
            },
            sges: common::sges(&[(w.stag, to, 8)]),
            signaled: true,
            fence: false,
        };
        let (first, second) = (read(77, 0), read(78, 64));
        w.engine.post_send(qp, first).unwrap();
        w.engine.post_send(qp, second).unwrap();
        // Lift the responder's MPA fence (MPA-7.1.2-16): a zero-length Write.
        send_ulpdus(&mut w, tcp, &mut framer, &[write(0, 0, b"")], false);
        let mut reqs = Vec::new();
        for _ in 0..2000 {
            step_and_read(&mut w, tcp, &mut d, |u| {
                if let Ok(s) = Segment::parse(u) {
                    if let RdmapHeader::ReadRequest(h) = s.repr.header {
                        reqs.push(h);
                    }
                }
            });
            if reqs.len() == 2 {
                break;
            }
        }
        assert_eq!(reqs.len(), 2, "{name}: the engine's Read Requests");
        send_ulpdus(
            &mut w,
            tcp,
            &mut framer,
            &resp(reqs[0].sink_stag, reqs[0].sink_to),
            false,
        );
        let term = terminate_from_engine(&mut w, tcp, &mut d);
        for _ in 0..50 {
            w.step();
        }
        assert_eq!(w.engine.qp_state(qp).unwrap(), QpState::Error, "{name}");
        let mut got = Vec::new();
        while let Some(c) = w.cq.pop() {
            got.push((c.wr_id, c.status, c.byte_len));
        }
        assert_eq!(
            got,
            vec![(77, WcStatus::Fatal, 0), (78, WcStatus::FlushErr, 0)],
            "{name} (Terminate {term:?})"
        );
        assert_eq!(first_changed(&w.region), None, "{name}: octet placed");
    }
}

/// What [`fin_inside_a_message`] saw: the Terminate (layer, etype, code) the peer got, if
/// any, the engine's events and its completions.
type FinOutcome = (
    Option<(u8, u8, u8)>,
    Vec<CmEvent>,
    Vec<warpcore_engine::Completion>,
);

/// What the engine does when the peer's FIN ends its stream in the middle of a message:
/// the peer sends `octets` (the start of a message), then closes.
fn fin_inside_a_message(octets: impl FnOnce(&mut Framer) -> Vec<u8>, rq: usize) -> FinOutcome {
    let mut w = world();
    let (tcp, mut framer, mut deframer, _qp) = connect(&mut w, rq);
    // A first FPDU lifts the responder's MPA fence (MPA-7.1.2-16).
    send_ulpdus(&mut w, tcp, &mut framer, &[write(0, 0, b"")], false);
    for _ in 0..20 {
        w.step();
    }
    let bytes = octets(&mut framer);
    let mut off = 0;
    while off < bytes.len() {
        off += w.peer.send(tcp, &bytes[off..]).unwrap();
        w.step();
    }
    w.peer.close(tcp).unwrap();
    let mut term = None;
    let mut events = Vec::new();
    for _ in 0..3000 {
        step_and_read(&mut w, tcp, &mut deframer, |u| {
            if let Ok(seg) = Segment::parse(u) {
                if let RdmapHeader::Terminate(t) = seg.repr.header {
                    let c = t.code;
                    term = term.or(Some((c.layer(), c.etype(), c.code())));
                }
            }
        });
        while let Some(e) = w.engine.next_event() {
            events.push(e);
        }
    }
    let mut completions = Vec::new();
    while let Some(c) = w.cq.pop() {
        completions.push(c);
    }
    (term, events, completions)
}

/// The FPDUs `ulpdus` framed as the peer's framer frames them.
fn framed(framer: &mut Framer, ulpdus: &[Vec<u8>]) -> Vec<u8> {
    let mut bytes = Vec::new();
    for u in ulpdus {
        let mut out = vec![0u8; framer.fpdu_wire_len(u.len())];
        let n = framer.emit(&[u], &mut out).unwrap();
        bytes.extend_from_slice(&out[..n]);
    }
    bytes
}

/// Judges [`fin_inside_a_message`]'s outcome: the close is not a clean one. The stream was
/// lost in the middle of a message (MPA-8-1, error 1: "TCP connection closed" with an
/// FPDU or a DDP message incomplete; DDP-6.2.2-1/2: a lost LLP stream is a fatal error
/// reported to the ULP and outstanding requests complete in error; RDMAP-6.2.1-1: a
/// Terminate is sent when the LLP reports an error, here 2/0/01 on our half, which is
/// still open; RDMAP-6.2.1-2). The receive the message was filling never completes as a
/// success, and the user is not told `Disconnected { Closed }`.
fn assert_fin_inside_a_message_fails(name: &str, (term, events, completions): FinOutcome) {
    assert!(
        !events.iter().any(|e| matches!(
            e,
            CmEvent::Disconnected {
                cause: warpcore_engine::DisconnectCause::Closed,
                ..
            }
        )),
        "{name}: a FIN inside a message reported as a clean close: {events:?}"
    );
    let reported = events.iter().find_map(|e| match e {
        CmEvent::Error {
            error: ConnError::LocalTerminate(e),
            ..
        } => {
            let c = e.terminate_code();
            Some((c.layer(), c.etype(), c.code()))
        }
        _ => None,
    });
    assert_eq!(reported, Some((2, 0, 1)), "{name}: {events:?}");
    assert_eq!(term, Some((2, 0, 1)), "{name}: the Terminate to the peer");
    assert!(
        completions
            .iter()
            .all(|c| c.status != warpcore_engine::WcStatus::Success),
        "{name}: {completions:?}"
    );
    // The receive that held the partial message completes, in error.
    assert!(
        completions.iter().any(|c| c.wr_id == 0),
        "{name}: {completions:?}"
    );
}

/// A Send's first segment (L = 0) placed, then the peer's FIN: the message can never end.
#[test]
fn a_fin_after_the_first_segment_of_a_send_fails_the_stream() {
    let out = fin_inside_a_message(|f| framed(f, &[send_seg(1, 0, false, &[7; 16])]), 2);
    assert_fin_inside_a_message_fails("send L=0", out);
}

/// Half of an FPDU, then the peer's FIN: the FPDU is incomplete at the LLP close.
#[test]
fn a_fin_inside_an_fpdu_fails_the_stream() {
    let out = fin_inside_a_message(
        |f| {
            let mut b = framed(f, &[send(1, &[7; 40])]);
            b.truncate(b.len() / 2);
            b
        },
        2,
    );
    assert_fin_inside_a_message_fails("half an FPDU", out);
}

/// The control: a whole Send, then the peer's FIN, is a clean close that delivers it.
#[test]
fn a_fin_after_a_whole_send_is_a_clean_close() {
    let (term, events, completions) = fin_inside_a_message(|f| framed(f, &[send(1, &[7; 16])]), 2);
    assert_eq!(term, None);
    assert!(
        events.iter().any(|e| matches!(
            e,
            CmEvent::Disconnected {
                cause: warpcore_engine::DisconnectCause::Closed,
                ..
            }
        )),
        "{events:?}"
    );
    assert!(completions.iter().any(|c| c.wr_id == 0
        && c.status == warpcore_engine::WcStatus::Success
        && c.byte_len == 16));
}

/// The same after our own close: the engine's FIN is out (it waits in Closing for the
/// peer's), the peer sends the first segment of a Send and closes. No Terminate can follow
/// our FIN (RDMAP-5.4-6), but the stream still failed (MPA-8-1, DDP-6.2.2-1): the user is
/// told of the error, not of a clean close, and the receive does not complete as a success.
#[test]
fn a_fin_inside_a_send_after_our_close_is_not_a_clean_close() {
    let mut w = world();
    let (tcp, mut framer, _d, qp) = connect(&mut w, 2);
    send_ulpdus(&mut w, tcp, &mut framer, &[write(0, 0, b"")], false);
    for _ in 0..20 {
        w.step();
    }
    w.engine.disconnect(qp).unwrap();
    for _ in 0..50 {
        w.step();
    }
    assert_eq!(w.engine.qp_state(qp).unwrap(), QpState::Closing);
    let mut events = Vec::new();
    while let Some(e) = w.engine.next_event() {
        events.push(e);
    }
    send_ulpdus(
        &mut w,
        tcp,
        &mut framer,
        &[send_seg(1, 0, false, &[7; 16])],
        false,
    );
    w.peer.close(tcp).unwrap();
    let (_, more) = w.run_reading(tcp, 3000);
    events.extend(more);
    assert_eq!(w.engine.qp_state(qp).unwrap(), QpState::Error);
    assert!(
        !events.iter().any(|e| matches!(
            e,
            CmEvent::Disconnected {
                cause: warpcore_engine::DisconnectCause::Closed,
                ..
            }
        )),
        "{events:?}"
    );
    assert!(
        events.iter().any(|e| matches!(
            e,
            CmEvent::Error {
                error: ConnError::LocalTerminate(_),
                ..
            }
        )),
        "{events:?}"
    );
    let mut completions = Vec::new();
    while let Some(c) = w.cq.pop() {
        completions.push(c);
    }
    assert!(completions.iter().any(|c| c.wr_id == 0), "{completions:?}");
    assert!(
        completions
            .iter()
            .all(|c| c.status != warpcore_engine::WcStatus::Success),
        "{completions:?}"
    );
}

/// A Read Response's first segment (L = 0, half the Read) placed, then the peer's FIN: the
/// Read can never complete. It fails `Fatal` (not flushed as if never answered) and the
/// stream fails with 2/0/01, not a clean close (MPA-8-1, DDP-6.2.2-1/2, RDMAP-6.2.1-2).
#[test]
fn a_fin_inside_a_read_response_fails_the_read_and_the_stream() {
    let mut w = world();
    let (tcp, mut framer, mut d, qp) = connect(&mut w, 0);
    let wr = warpcore_engine::SendWr {
        wr_id: 77,
        op: warpcore_engine::SendOp::Read {
            remote_stag: 0x1234,
            remote_to: 0,
        },
        sges: common::sges(&[(w.stag, 0, 16)]),
        signaled: true,
        fence: false,
    };
    w.engine.post_send(qp, wr).unwrap();
    send_ulpdus(&mut w, tcp, &mut framer, &[write(0, 0, b"")], false);
    let mut rr = None;
    for _ in 0..2000 {
        step_and_read(&mut w, tcp, &mut d, |u| {
            if let Ok(s) = Segment::parse(u) {
                if let RdmapHeader::ReadRequest(h) = s.repr.header {
                    rr = Some(h);
                }
            }
        });
        if rr.is_some() {
            break;
        }
    }
    let rr = rr.expect("the engine's Read Request");
    let half = read_response(rr.sink_stag, rr.sink_to, false, &[5; 8]);
    send_ulpdus(&mut w, tcp, &mut framer, &[half], false);
    w.peer.close(tcp).unwrap();
    let mut term = None;
    let mut events = Vec::new();
    for _ in 0..3000 {
        step_and_read(&mut w, tcp, &mut d, |u| {
            if let Ok(s) = Segment::parse(u) {
                if let RdmapHeader::Terminate(t) = s.repr.header {
                    term = term.or(Some((t.code.layer(), t.code.etype(), t.code.code())));
                }
            }
        });
        while let Some(e) = w.engine.next_event() {
            events.push(e);
        }
    }
    let read = w.cq.pop().expect("the Read's completion");
    assert_eq!(
        (read.wr_id, read.status),
        (77, warpcore_engine::WcStatus::Fatal)
    );
    assert_eq!(term, Some((2, 0, 1)), "{events:?}");
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, CmEvent::Disconnected { .. })),
        "{events:?}"
    );
}
