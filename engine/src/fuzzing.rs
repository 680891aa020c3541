//! Test-only (feature `fuzzing`): the narrow entry point through which the `engine_rx` fuzz
//! target (`fuzz/fuzz_targets/engine_rx.rs`) and `tests/fuzz_engine_rx.rs` drive an engine
//! core's OWN receive path from a hostile peer's TCP byte stream (issue 15, item 1).
//!
//! # What one input does
//! A fresh world per input, deterministic (simulated clock, fixed seeds): an
//! [`EngineCore`] over the in-memory link listens; a peer made of our TCP stack and proto's
//! MPA initiator connects; the engine accepts onto a queue pair with receives posted (and,
//! as the input asks, its own RDMA Reads and an atomic outstanding, so that Read and Atomic
//! Responses have something to answer); a second peer connection, well-behaved, is
//! accepted onto a second queue pair (invariant 8). Five regions are registered, all carved out of one
//! [`GuardedArena`] with guard octets around each:
//!
//! | region | rights | PD | the peer may change |
//! |---|---|---|---|
//! | `RW` | local write, remote read/write/atomic | ours | any octet |
//! | `RO` | remote read only | ours | nothing |
//! | `LOCAL` | local write only (receive buffers, Read and atomic sinks) | ours | only the posted buffers' SGE ranges |
//! | `FOREIGN` | local write, remote read/write | another | nothing |
//! | `TOP` | local write, remote write, TOs up to 2^64 - 1 | ours | any octet |
//!
//! Then the input's octets go to the engine as the peer's TCP stream, cut into TCP segments
//! at the input's points, and the world runs until it is quiet. Everything the engine sends
//! back is deframed and decoded with proto.
//!
//! # Invariants (each a [`Violation`]; the fuzz target panics on any)
//! 1. No panic (the engine runs in-process).
//! 2. No octet outside the registered regions changes (the guard octets) — RDMAP-8.1.1-6,
//!    DDP-7.1-12/13.
//! 3. No octet of a region changes where the peer had no right to write (`RO`, `FOREIGN`,
//!    the unposted parts of `LOCAL`) — RDMAP-8.1.1-6, DDP-8.2-1.
//! 4. What the engine sends deframes and parses; every Terminate carries a defined
//!    layer/type/code, is the stream's last FPDU and the only one (RDMAP-5.4-6,
//!    RDMAP-7.1-5), and its code is the error the engine reported locally.
//! 5. The QP ends consistent: after a Terminate (sent or received) it is in Error (or still
//!    Terminate), every posted receive and send completed exactly once (flushed at the
//!    latest, RDMAP-6.2.1-2); otherwise no work request completed twice, none was flushed
//!    while the QP stayed usable; at most one error is reported (RDMAP-7.1-5).
//! 6. The world goes quiet soon after the stream ends (no livelock).
//! 7. With feature `self-check` (on in the fuzz crate and the engine's tests), the fast
//!    paths change nothing: the input run again with the engine's and the TCP's fast paths
//!    off (`core::set_general_paths_only`, `warpcore_tcp::conn::set_general_paths_only`)
//!    ends with the same [`Report`]: the same Terminates, FPDUs sent, QP state, completions
//!    and the same octets in every region ([`Report::memory`]).
//! 8. The rest of the engine keeps serving: a second connection, set up after the first
//!    and idle while the hostile stream runs, has its queue pair in RTS at the end with no
//!    error or disconnection reported, and a Send crosses it each way (the peer's lands,
//!    exactly, in its posted buffer of a region of its own; the engine's reaches the peer
//!    intact); [`Violation::Bystander`] otherwise. [`run_with_bystander_aborted`] shows the
//!    check failing on a connection the engine itself aborted.
//!
//! With the test-only feature `planted-bounds-defect` the tagged bounds check lets a
//! segment reach past its region's end; invariant 2 must catch it ([`planted_defect_input`]).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Instant as StdInstant;

use arbitrary::{Arbitrary, Unstructured};
use warpcore_proto::mpa::deframer::{Deframer, DeframerConfig};
use warpcore_proto::mpa::framer::{Framer, FramerConfig};
use warpcore_proto::mpa::negotiation::{self as nego, Initiator, Negotiated};
use warpcore_proto::rdmap::TerminateReport;
use warpcore_proto::wire::fpdu::MAX_ULPDU_LEN;
use warpcore_proto::wire::mpa::{RtrType, RtrTypes};
use warpcore_proto::wire::rdmap::Opcode;
use warpcore_proto::wire::segment::{RdmapHeader, Segment};
use warpcore_tcp::link::{self, LinkConfig, LinkEnd};
use warpcore_tcp::smoltcp::time::{Duration, Instant};
use warpcore_tcp::smoltcp::wire::{Ipv4Address, Ipv4Cidr};
use warpcore_tcp::{ConnId, Stack, StackConfig, TcpTuning};

use crate::cm::{CmEvent, ConnError, MpaParams};
use crate::config::EngineConfig;
use crate::core::{EngineCore, QpAttr};
use crate::mem::{Access, GuardedArena, MrTable, PdId, Stag};
use crate::wr::{
    CompletionQueue, QpId, QpState, RecvWr, SendOp, SendWr, Sge, SgeList, WcOpcode, WcStatus,
};

/// The TCP port the engine listens on.
pub const PORT: u16 = 4791;
/// Our protection domain.
pub const PD: PdId = PdId(1);
/// The protection domain of the `FOREIGN` region.
pub const OTHER_PD: PdId = PdId(2);
/// Guard octets before and after every region.
pub const GUARD_LEN: usize = 128;
/// Seed of the region table (STags are deterministic, so corpus files can name them).
pub const MR_SEED: u64 = 0x15_f0_22;
/// Largest payload a structured segment carries (keeps one input cheap).
const MAX_PAYLOAD: usize = 3000;
/// Steps spent sending the stream at most (a long stream cut into one-octet segments is
/// sent up to there; the rest is dropped).
const MAX_STEPS: usize = 4000;
/// Steps the world gets to become quiet after the stream: 50 ms of simulated time, far
/// below TCP's timers, so a world still busy then is a livelock (a violation).
const MAX_QUIET_STEPS: usize = 500;

/// Index of each region in [`REGIONS`].
pub const RW: usize = 0;
/// See [`RW`].
pub const RO: usize = 1;
/// See [`RW`].
pub const LOCAL: usize = 2;
/// See [`RW`].
pub const FOREIGN: usize = 3;
/// See [`RW`].
pub const TOP: usize = 4;

/// One registered region of the harness.
#[derive(Debug, Clone, Copy)]
pub struct RegionSpec {
    /// Length in octets.
    pub len: usize,
    /// Rights.
    pub access: Access,
    /// Protection domain.
    pub pd: PdId,
    /// Tagged Offset of the first octet.
    pub base_to: u64,
    /// Whether the peer may change any octet of it (else only the posted buffers of
    /// `LOCAL` may change).
    pub peer_may_write: bool,
}

const fn acc(bits: u8) -> Access {
    match Access::from_bits(bits) {
        Some(a) => a,
        None => Access::empty(),
    }
}

const LW: u8 = Access::LOCAL_WRITE.bits();
const RR: u8 = Access::REMOTE_READ.bits();
const RWR: u8 = Access::REMOTE_WRITE.bits();
const RA: u8 = Access::REMOTE_ATOMIC.bits();

/// The regions (see the module documentation).
pub const REGIONS: [RegionSpec; 5] = [
    RegionSpec {
        len: 1024,
        access: acc(LW | RR | RWR | RA),
        pd: PD,
        base_to: 0,
        peer_may_write: true,
    },
    RegionSpec {
        len: 256,
        access: acc(RR),
        pd: PD,
        base_to: 0x1000,
        peer_may_write: false,
    },
    RegionSpec {
        len: 512,
        access: acc(LW),
        pd: PD,
        base_to: 0,
        peer_may_write: false,
    },
    RegionSpec {
        len: 256,
        access: acc(LW | RR | RWR),
        pd: OTHER_PD,
        base_to: 0,
        peer_may_write: false,
    },
    RegionSpec {
        len: 512,
        access: acc(LW | RWR),
        pd: PD,
        base_to: u64::MAX - 512,
        peer_may_write: true,
    },
];

/// The receive buffers the harness can post, in posting order: `(offset, len)` SGEs in
/// `LOCAL` (the gap 96..128 between the two SGEs of the second must never change).
const RECVS: [&[(u64, u32)]; 4] = [
    &[(0, 64)],
    &[(64, 32), (128, 32)],
    &[(192, 16)],
    &[(224, 96)],
];
/// Sinks of our own RDMA Reads in `LOCAL`.
const READ_SINKS: [(u64, u32); 2] = [(384, 64), (448, 32)];
/// The atomic's result SGE in `LOCAL`.
const ATOMIC_SINK: (u64, u32) = (480, 8);
/// The peer's (made-up) STag our Reads and atomic name.
const PEER_STAG: u32 = 0x00ab_cd01;

/// How the connection is set up.
#[derive(Debug, Clone, Copy, Arbitrary)]
pub struct Setup {
    /// MPA revision 1 instead of 2.
    pub rev1: bool,
    /// The peer asks for CRCs.
    pub crc: bool,
    /// The engine requires markers in what the peer sends.
    pub markers_rx: bool,
    /// The peer requires markers in what the engine sends.
    pub markers_tx: bool,
    /// Peer-to-peer model (the first FPDU must be the RTR).
    pub p2p: bool,
    /// RFC 7306 (atomics, Immediate Data) on the connection.
    pub rfc7306: bool,
    /// Receives posted (modulo 5).
    pub recvs: u8,
    /// Our own RDMA Reads outstanding (modulo 3).
    pub reads: u8,
    /// Our own atomic outstanding (with RFC 7306).
    pub atomic: bool,
    /// The peer closes (FIN) after its last octet.
    pub fin: bool,
}

/// An STag as the peer names it.
#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum StagPick {
    /// A registered region's STag (index modulo the number of regions).
    Region(u8),
    /// A registered region's STag with the key changed (a stale STag).
    WrongKey(u8, u8),
    /// Any value.
    Garbage(u32),
}

/// A Tagged Offset, relative to a region so that the edges are easy to hit.
#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum ToPick {
    /// Region base + this.
    Start(u16),
    /// Region end (base + length) + this (signed): the interesting edge.
    End(i16),
    /// Any value.
    Raw(u64),
}

/// An MSN: the next one the harness expects on the queue, moved by a delta, or any value.
#[derive(Debug, Clone, Copy, Arbitrary)]
pub enum MsnPick {
    /// Expected + delta.
    Next(i8),
    /// Any value.
    Raw(u32),
}

/// The RDMAP header after the DDP header.
#[derive(Debug, Clone, Arbitrary)]
pub enum Hdr {
    /// None (Write, Read Response, Send).
    None,
    /// Read Request: sink, size, source.
    Read {
        /// Data Sink STag.
        sink: StagPick,
        /// Data Sink TO.
        sink_to: ToPick,
        /// RDMARDSZ.
        size: u32,
        /// Data Source STag.
        src: StagPick,
        /// Data Source TO.
        src_to: ToPick,
    },
    /// Atomic Request (52 octets).
    Atomic {
        /// The reserved/AOpCode word (0 FetchAdd, 2 CmpSwap in the low nibble).
        aop: u32,
        /// Request Identifier.
        id: u32,
        /// Remote STag.
        stag: StagPick,
        /// Remote TO.
        to: ToPick,
        /// Add/swap data and mask, compare data and mask.
        data: [u64; 4],
    },
    /// Atomic Response (12 octets): Original Request Identifier and value.
    AtomicResp(u32, u64),
    /// Immediate Data (8 octets).
    Imm([u8; 8]),
    /// Any octets (a Terminate's header, a truncated header...).
    Raw(Vec<u8>),
}

/// One structured DDP segment.
#[derive(Debug, Clone, Arbitrary)]
pub struct Seg {
    /// The RDMAP opcode nibble.
    pub opcode: u8,
    /// The T bit; `None`: as the opcode wants.
    pub tagged: Option<bool>,
    /// The L bit.
    pub last: bool,
    /// XORed into the DDP and RDMAP control octets (versions, reserved bits).
    pub ctrl_noise: Option<(u8, u8)>,
    /// The STag of a tagged segment.
    pub stag: StagPick,
    /// The TO of a tagged segment.
    pub to: ToPick,
    /// The QN of an untagged one; `None`: as the opcode wants.
    pub qn: Option<u32>,
    /// The MSN.
    pub msn: MsnPick,
    /// The MO.
    pub mo: u32,
    /// The Invalidate STag (untagged `RsvdULP` field).
    pub inv: StagPick,
    /// The RDMAP header.
    pub hdr: Hdr,
    /// Payload length (modulo 3001) and the first octet of its counting pattern.
    pub len: u16,
    /// First payload octet.
    pub fill: u8,
    /// Send a right CRC (when CRCs are in use).
    pub crc_ok: bool,
}

impl Seg {
    /// A well-formed segment of `opcode` as a correct peer sends it: its own buffer model,
    /// L set, no control noise, QN and MSN as they should be, no RDMAP header, `len`
    /// payload octets of 1, a good CRC; tagged ones into `stag` at `to`.
    pub fn plain(opcode: Opcode, stag: StagPick, to: ToPick, len: u16) -> Seg {
        Seg {
            opcode: opcode as u8,
            tagged: None,
            last: true,
            ctrl_noise: None,
            stag,
            to,
            qn: None,
            msn: MsnPick::Next(0),
            mo: 0,
            inv: StagPick::Garbage(0),
            hdr: Hdr::None,
            len,
            fill: 1,
            crc_ok: true,
        }
    }
}

/// One piece of the peer's stream.
#[derive(Debug, Clone, Arbitrary)]
pub enum Piece {
    /// A structured segment, framed.
    Seg(Seg),
    /// Any ULPDU, framed (length, pad, markers, CRC).
    Ulpdu(Vec<u8>),
    /// An RTR (0 Write, 1 Read, else Send), framed.
    Rtr(u8),
    /// Raw stream octets, not framed.
    Bytes(Vec<u8>),
}

/// A structured input.
#[derive(Debug, Clone, Arbitrary)]
pub struct RxInput {
    /// The connection.
    pub setup: Setup,
    /// The stream.
    pub pieces: Vec<Piece>,
    /// TCP segment sizes, used in turn (0 or none: the whole stream in one write).
    pub cuts: Vec<u16>,
}

/// A broken invariant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// A guard octet changed: `after` is the region it follows (`None`: before the first).
    Guard {
        /// The region before the guard.
        after: Option<usize>,
        /// Offset in the arena.
        offset: usize,
    },
    /// An octet of a region changed that the peer had no right to write.
    Forbidden {
        /// The region.
        region: usize,
        /// Offset in the region.
        offset: usize,
    },
    /// The engine's output did not deframe or parse.
    BadOutput(String),
    /// A Terminate with an undefined layer/type/code, or not the last FPDU, or more than one.
    Terminate(String),
    /// The QP's final state or its completions are inconsistent.
    State(String),
    /// The world could not be set up (a harness bug, never the input's fault).
    Setup(String),
    /// The other connection, which did nothing wrong, stopped being served (invariant 8).
    Bystander(String),
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Guard { after, offset } => write!(
                f,
                "engine_rx: guard octet at arena offset {offset} (after region {after:?}) changed: a placement escaped its region"
            ),
            Violation::Forbidden { region, offset } => write!(
                f,
                "engine_rx: octet {offset} of region {region} changed, which the peer had no right to write"
            ),
            Violation::BadOutput(s) => write!(f, "engine_rx: the engine's output: {s}"),
            Violation::Terminate(s) => write!(f, "engine_rx: Terminate: {s}"),
            Violation::State(s) => write!(f, "engine_rx: final state: {s}"),
            Violation::Setup(s) => write!(f, "engine_rx: setup: {s}"),
            Violation::Bystander(s) => write!(
                f,
                "engine_rx: the other connection is no longer served: {s}"
            ),
        }
    }
}

/// What a clean run saw (for tests that want to look further than "no violation").
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// Terminates the engine sent, decoded.
    pub terminates: Vec<TerminateReport>,
    /// FPDUs the engine sent after the MPA startup.
    pub fpdus_out: usize,
    /// The QP's final state.
    pub state: Option<QpState>,
    /// Octets of the regions that changed.
    pub changed: usize,
    /// Receives that completed successfully.
    pub recvs_ok: usize,
    /// Whether the engine reported a local error (it sent a Terminate).
    pub local_error: bool,
    /// Whether the engine reported the peer's Terminate.
    pub remote_terminate: bool,
    /// Every work request's completions, by `wr_id`, in order.
    pub completions: Vec<(u64, Vec<WcStatus>)>,
    /// FNV-1a of the whole arena (the regions and their guards) at the end.
    pub memory: u64,
}

/// The fuzz body: one input, structured or raw (see [`check`]); panics on any violation.
pub fn engine_rx(data: &[u8]) {
    let fast = check(data).unwrap_or_else(|v| panic!("{v}"));
    #[cfg(feature = "self-check")]
    {
        let general = general_paths_only(|| check(data));
        let general = general.unwrap_or_else(|v| panic!("the general paths only: {v}"));
        assert_eq!(
            fast, general,
            "invariant 7: the fast paths and the general paths ended differently"
        );
    }
    #[cfg(not(feature = "self-check"))]
    let _ = fast;
}

/// `f` run with the engine's and the TCP's fast paths off on this thread (feature
/// `self-check`), on again afterwards, whether `f` returned or panicked.
#[cfg(feature = "self-check")]
pub fn general_paths_only<T>(f: impl FnOnce() -> T) -> T {
    struct On;
    impl Drop for On {
        fn drop(&mut self) {
            crate::core::set_general_paths_only(false);
            warpcore_tcp::conn::set_general_paths_only(false);
        }
    }
    crate::core::set_general_paths_only(true);
    warpcore_tcp::conn::set_general_paths_only(true);
    let _on = On;
    f()
}

/// Runs one input and checks every invariant.
///
/// Layout: an empty input does nothing. If bit 0 of the first octet is 0 the rest is a
/// structured [`RxInput`] (decoded with `arbitrary`); if it is 1 the input is raw: octet 0
/// bits 1-7 and octet 1 give the [`Setup`] flags (bit 1 rev 1, 2 CRC, 3 markers from the
/// peer, 4 markers to the peer, 5 peer-to-peer, 6 RFC 7306, 7 FIN; octet 1: bits 0-2
/// receives, 3-4 Reads, 5 atomic), octet 2 is the TCP segment size (0: one write) and the
/// rest is the peer's stream as is.
pub fn check(data: &[u8]) -> Result<Report, Violation> {
    let Some((&head, rest)) = data.split_first() else {
        return Ok(Report::default());
    };
    if head & 1 == 0 {
        let Ok(input) = RxInput::arbitrary_take_rest(Unstructured::new(rest)) else {
            return Ok(Report::default());
        };
        run(&input)
    } else {
        let flags = rest.first().copied().unwrap_or(0);
        let cut = rest.get(1).copied().unwrap_or(0);
        let stream = rest.get(2..).unwrap_or(&[]);
        let bit = |b: u8, n: u8| b & (1 << n) != 0;
        let setup = Setup {
            rev1: bit(head, 1),
            crc: bit(head, 2),
            markers_rx: bit(head, 3),
            markers_tx: bit(head, 4),
            p2p: bit(head, 5),
            rfc7306: bit(head, 6),
            fin: bit(head, 7),
            recvs: flags & 7,
            reads: (flags >> 3) & 3,
            atomic: bit(flags, 5),
        };
        run_stream(&setup, stream, &[u16::from(cut)])
    }
}

/// Runs a structured input.
pub fn run(input: &RxInput) -> Result<Report, Violation> {
    let mut w = World::new(&input.setup)?;
    let stream = w.encode(&input.pieces);
    w.feed(&stream, &input.cuts)
}

/// Runs a raw stream with the given segment sizes.
pub fn run_stream(setup: &Setup, stream: &[u8], cuts: &[u16]) -> Result<Report, Violation> {
    let mut w = World::new(setup)?;
    w.feed(stream, cuts)
}

/// Runs a structured input after the engine aborted the other connection (invariant 8's
/// bystander) itself: the proof that invariant 8 fails an engine that stops serving a
/// connection that did nothing wrong.
pub fn run_with_bystander_aborted(input: &RxInput) -> Result<Report, Violation> {
    let mut w = World::new(&input.setup)?;
    w.engine
        .abort(w.bystander.qp)
        .map_err(|e| Violation::Setup(format!("abort: {e:?}")))?;
    let stream = w.encode(&input.pieces);
    w.feed(&stream, &input.cuts)
}

/// The input that the planted defect (feature `planted-bounds-defect`) fails on: an RDMA
/// Write of 32 octets into the last 16 octets of `RW` and on past its end. A correct engine
/// answers it with a Terminate (DDP 0x1/0x03 base or bounds violation) and places nothing.
pub fn planted_defect_input() -> RxInput {
    RxInput {
        setup: Setup {
            rev1: false,
            crc: true,
            markers_rx: false,
            markers_tx: false,
            p2p: false,
            rfc7306: false,
            recvs: 1,
            reads: 0,
            atomic: false,
            fin: false,
        },
        pieces: vec![Piece::Seg(Seg {
            fill: 0xA5,
            ..Seg::plain(
                Opcode::Write,
                StagPick::Region(RW as u8),
                ToPick::End(-16),
                32,
            )
        })],
        cuts: Vec::new(),
    }
}

/// The raw-mode file (see [`check`]) that replays `input`'s stream: the pieces are encoded
/// against a world set up as `input.setup` says (the STags are deterministic), and the
/// stream is cut into TCP segments of `cut` octets (0: one write). Used to write the seed
/// corpus from hand-made FPDUs; raw mode is what the fuzzer mutates them in.
pub fn raw_seed(input: &RxInput, cut: u8) -> Result<Vec<u8>, Violation> {
    let s = &input.setup;
    let mut w = World::new(s)?;
    let stream = w.encode(&input.pieces);
    let b = |v: bool, n: u8| u8::from(v) << n;
    let head = 1
        | b(s.rev1, 1)
        | b(s.crc, 2)
        | b(s.markers_rx, 3)
        | b(s.markers_tx, 4)
        | b(s.p2p, 5)
        | b(s.rfc7306, 6)
        | b(s.fin, 7);
    let flags = (s.recvs % 5) | ((s.reads % 3) << 3) | b(s.atomic, 5);
    let mut out = vec![head, flags, cut];
    out.extend_from_slice(&stream);
    Ok(out)
}

fn ip(n: u8) -> Ipv4Address {
    Ipv4Address::new(10, 0, 0, n)
}

/// The arena filler: a pattern no placement of a constant or counting payload reproduces
/// by chance over a run of octets.
fn arena_fill(i: usize) -> u8 {
    (i.wrapping_mul(0x9E37_79B1) >> 13) as u8 ^ 0x5A
}

struct World {
    peer: Stack<LinkEnd>,
    engine: EngineCore<LinkEnd>,
    arena: GuardedArena,
    before: Vec<u8>,
    stags: Vec<Stag>,
    cq: Arc<CompletionQueue>,
    qp: QpId,
    tcp: ConnId,
    now: Instant,
    setup: Setup,
    negotiated: Negotiated,
    /// The peer's view of the engine's output.
    deframer: Deframer,
    /// Octets of the peer's stream in FPDU mode so far (markers count from there).
    sent: usize,
    /// Next MSN per QN as the peer counts them.
    msn: [u32; 4],
    /// Posted work requests: wr_id -> (is a receive, allowed ranges in `LOCAL`).
    posted: BTreeMap<u64, bool>,
    /// Octet ranges of `LOCAL` the engine may write (posted buffers and sinks).
    local_ok: Vec<(usize, usize)>,
    report: Report,
    /// Completions seen per wr_id.
    completions: BTreeMap<u64, Vec<WcStatus>>,
    events: Vec<CmEvent>,
    terminate_seen: bool,
    violation: Option<Violation>,
    /// The second, well-behaved connection (invariant 8).
    bystander: Bystander,
}

/// Invariant 8's well-behaved connection: its own queue pair, completion queue and region
/// (registered after [`REGIONS`], so the corpus's STags keep naming the same regions).
struct Bystander {
    arena: GuardedArena,
    before: Vec<u8>,
    stag: u32,
    cq: Arc<CompletionQueue>,
    qp: QpId,
    tcp: ConnId,
    negotiated: Negotiated,
}

/// The bystander's region: its receive buffer is the first half, the source of the Send
/// the engine sends it the second.
const BYSTANDER_LEN: usize = 64;
/// The Send the bystander's peer sends (and the length of the engine's answer).
const BYSTANDER_MSG: &[u8; 16] = b"still serving...";
/// The bystander's receive and send work requests.
const BYSTANDER_RECV: u64 = 901;
/// See [`BYSTANDER_RECV`].
const BYSTANDER_SEND: u64 = 900;
/// Steps the bystander's round trip gets (20 ms simulated).
const BYSTANDER_STEPS: usize = 200;

/// Runs the MPA startup of a connection of the peer to the engine, accepted onto `qp`.
fn handshake(
    peer: &mut Stack<LinkEnd>,
    engine: &mut EngineCore<LinkEnd>,
    qp: QpId,
    cfg: nego::Config,
    tuning: &TcpTuning,
    now: &mut Instant,
) -> Result<(ConnId, Negotiated), Violation> {
    let fail = |what: &str| Violation::Setup(what.to_string());
    let tcp = peer
        .connect((ip(2), PORT), None, tuning)
        .map_err(|_| fail("connect"))?;
    let mut init = Initiator::new(cfg, std::time::Instant::now()).map_err(|_| fail("initiator"))?;
    let mut negotiated = None;
    let mut accepted = false;
    for _ in 0..2000 {
        peer.poll(*now);
        engine.poll(*now);
        *now += Duration::from_micros(100);
        let _ = peer.send_with(tcp, |b| init.poll_transmit(b));
        if negotiated.is_none() {
            let _ = peer.recv_with(tcp, |d| init.handle_input(d));
        }
        while let Some(e) = init.poll_event() {
            if let nego::Event::Established(n) = e {
                negotiated = Some(n);
            }
        }
        while let Some(e) = engine.next_event() {
            if let CmEvent::ConnectRequest(r) = e {
                engine
                    .accept(r.request, qp, b"", None)
                    .map_err(|_| fail("accept"))?;
                accepted = true;
            }
        }
        if accepted && negotiated.is_some() {
            break;
        }
    }
    let negotiated = negotiated.ok_or_else(|| fail("MPA startup did not finish"))?;
    if engine.qp_state(qp) != Ok(QpState::Rts) {
        return Err(fail("QP not in RTS after the startup"));
    }
    Ok((tcp, negotiated))
}

impl World {
    fn new(setup: &Setup) -> Result<World, Violation> {
        let fail = |what: &str| Violation::Setup(what.to_string());
        // Small queues and one backlog socket: every input builds a new world, and the
        // default link preallocates a thousand frames per direction.
        let (a, b) = link::pair(&LinkConfig {
            queue_frames: 128,
            ..LinkConfig::default()
        });
        let tuning = TcpTuning {
            rx_buffer: 128 * 1024,
            tx_buffer: 128 * 1024,
            ..TcpTuning::default()
        };
        let sc = |n: u8| StackConfig {
            mac: [2, 0, 0, 0, 0, n],
            ip: Ipv4Cidr::new(ip(n), 24),
            gateway: None,
            routes: Vec::new(),
            random_seed: u64::from(n) * 7919,
            max_connections: 2,
            out_of_order_budget_bytes: warpcore_tcp::OUT_OF_ORDER_BUDGET_DEFAULT,
        };
        let mut peer = Stack::new(a, &sc(1), Instant::ZERO).map_err(|_| fail("peer stack"))?;
        let cfg = EngineConfig {
            max_qps: 2,
            max_sq_depth: 16,
            max_rq_depth: 16,
            max_cq_depth: 64,
            mr_table_capacity: 16,
            max_pending_requests: 1,
            event_queue_depth: 64,
            command_queue_depth: 64,
            max_connections: 2,
            tcp: tuning,
            ..EngineConfig::default()
        };
        let mrs = Arc::new(MrTable::with_seed(cfg.mr_table_capacity, MR_SEED));
        let arena = GuardedArena::new(&REGIONS.map(|r| r.len), GUARD_LEN, arena_fill);
        let mut stags = Vec::with_capacity(REGIONS.len());
        for (spec, region) in REGIONS.iter().zip(arena.regions()) {
            let stag = mrs
                .register(Arc::clone(region), spec.pd, spec.access, spec.base_to)
                .map_err(|_| fail("register"))?;
            stags.push(stag);
        }
        let before = arena.snapshot();
        let mut engine = EngineCore::new(
            1,
            b,
            &sc(2),
            cfg,
            Arc::clone(&mrs),
            StdInstant::now(),
            Instant::ZERO,
        )
        .map_err(|_| fail("engine core"))?;
        let params = MpaParams {
            rev: if setup.rev1 { 1 } else { 2 },
            crc: false,
            markers: setup.markers_rx,
            markers_supported: true,
            ird: 4,
            ord: 4,
            peer_to_peer: false,
            rtr_offer: RtrTypes::WRITE,
            rtr_accept: RtrTypes::ALL,
        };
        engine.listen(PORT, params).map_err(|_| fail("listen"))?;
        let cq = Arc::new(CompletionQueue::new(256).expect("a valid depth"));
        let (qp, shared) = engine
            .create_qp(QpAttr {
                pd: PD,
                send_cq: Arc::clone(&cq),
                recv_cq: Arc::clone(&cq),
                sq_depth: 8,
                rq_depth: 8,
                max_sge: 4,
            })
            .map_err(|_| fail("create_qp"))?;
        shared.set_rfc7306(setup.rfc7306);
        let local = stags[LOCAL].0;
        let mut posted = BTreeMap::new();
        let mut local_ok = Vec::new();
        for (i, sges) in RECVS.iter().take(usize::from(setup.recvs % 5)).enumerate() {
            let list: Vec<Sge> = sges
                .iter()
                .map(|&(to, len)| Sge {
                    stag: local,
                    to,
                    len,
                })
                .collect();
            local_ok.extend(sges.iter().map(|&(o, l)| (o as usize, l as usize)));
            let wr_id = 100 + i as u64;
            engine
                .post_recv(
                    qp,
                    RecvWr {
                        wr_id,
                        sges: SgeList::from_slice(&list).ok_or_else(|| fail("sges"))?,
                    },
                )
                .map_err(|_| fail("post_recv"))?;
            posted.insert(wr_id, true);
        }
        let p2p = setup.p2p && !setup.rev1;
        let mut now = Instant::ZERO;
        let (tcp, negotiated) = handshake(
            &mut peer,
            &mut engine,
            qp,
            nego::Config {
                rev: if setup.rev1 { 1 } else { 2 },
                crc: setup.crc,
                markers: setup.markers_tx,
                markers_supported: true,
                ird: 4,
                ord: 4,
                peer_to_peer: p2p,
                rtr: RtrTypes::ALL,
                ..nego::Config::default()
            },
            &tuning,
            &mut now,
        )?;
        // Our own Reads and atomic: their responses are what Read and Atomic Responses
        // from the peer may answer. They leave once the peer's first FPDU lifts the fence.
        for (i, &(to, len)) in READ_SINKS
            .iter()
            .take(usize::from(setup.reads % 3))
            .enumerate()
        {
            let wr_id = 200 + i as u64;
            engine
                .post_send(
                    qp,
                    SendWr {
                        wr_id,
                        op: SendOp::Read {
                            remote_stag: PEER_STAG,
                            remote_to: 0x4000 * (i as u64 + 1),
                        },
                        sges: SgeList::from_slice(&[Sge {
                            stag: local,
                            to,
                            len,
                        }])
                        .ok_or_else(|| fail("sges"))?,
                        signaled: true,
                        fence: false,
                    },
                )
                .map_err(|_| fail("post Read"))?;
            local_ok.push((to as usize, len as usize));
            posted.insert(wr_id, false);
        }
        if setup.atomic && setup.rfc7306 {
            let (to, len) = ATOMIC_SINK;
            engine
                .post_send(
                    qp,
                    SendWr {
                        wr_id: 300,
                        op: SendOp::AtomicFetchAdd {
                            remote_stag: PEER_STAG,
                            remote_to: 0x8000,
                            add: 1,
                            add_mask: 0,
                        },
                        sges: SgeList::from_slice(&[Sge {
                            stag: local,
                            to,
                            len,
                        }])
                        .ok_or_else(|| fail("sges"))?,
                        signaled: true,
                        fence: false,
                    },
                )
                .map_err(|_| fail("post atomic"))?;
            local_ok.push((to as usize, len as usize));
            posted.insert(300, false);
        }
        // Invariant 8: a second connection, set up after the first so that the first's TCP
        // and MPA startup are what they were before it existed.
        let b_arena = GuardedArena::new(&[BYSTANDER_LEN], GUARD_LEN, arena_fill);
        let b_stag = mrs
            .register(
                Arc::clone(&b_arena.regions()[0]),
                PD,
                Access::LOCAL_WRITE,
                0,
            )
            .map_err(|_| fail("register the bystander's region"))?
            .0;
        let b_before = b_arena.snapshot();
        let b_cq = Arc::new(CompletionQueue::new(16).expect("a valid depth"));
        let (b_qp, _) = engine
            .create_qp(QpAttr {
                pd: PD,
                send_cq: Arc::clone(&b_cq),
                recv_cq: Arc::clone(&b_cq),
                sq_depth: 2,
                rq_depth: 2,
                max_sge: 1,
            })
            .map_err(|_| fail("create the bystander's QP"))?;
        engine
            .post_recv(
                b_qp,
                RecvWr {
                    wr_id: BYSTANDER_RECV,
                    sges: SgeList::from_slice(&[Sge {
                        stag: b_stag,
                        to: 0,
                        len: (BYSTANDER_LEN / 2) as u32,
                    }])
                    .ok_or_else(|| fail("sges"))?,
                },
            )
            .map_err(|_| fail("post the bystander's receive"))?;
        let (b_tcp, b_negotiated) = handshake(
            &mut peer,
            &mut engine,
            b_qp,
            nego::Config {
                // The listener's revision: a listener made for revision 1 refuses an
                // enhanced Request (`EnhancedNotSupported`).
                rev: if setup.rev1 { 1 } else { 2 },
                crc: true,
                markers: false,
                markers_supported: true,
                ird: 4,
                ord: 4,
                rtr: RtrTypes::ALL,
                ..nego::Config::default()
            },
            &tuning,
            &mut now,
        )?;
        let deframer = Deframer::new(DeframerConfig {
            markers: negotiated.markers_rx,
            crc: negotiated.crc,
            max_ulpdu_len: MAX_ULPDU_LEN,
            stream_offset: 0,
        });
        let mut w = World {
            peer,
            engine,
            arena,
            before,
            stags,
            cq,
            qp,
            tcp,
            now,
            setup: *setup,
            negotiated,
            deframer,
            sent: 0,
            msn: [1; 4],
            posted,
            local_ok,
            report: Report::default(),
            completions: BTreeMap::new(),
            events: Vec::new(),
            terminate_seen: false,
            violation: None,
            bystander: Bystander {
                arena: b_arena,
                before: b_before,
                stag: b_stag,
                cq: b_cq,
                qp: b_qp,
                tcp: b_tcp,
                negotiated: b_negotiated,
            },
        };
        w.drain();
        Ok(w)
    }

    /// The STag a pick names, and the region its TOs are relative to.
    fn stag(&self, p: StagPick) -> (u32, usize) {
        let n = REGIONS.len();
        match p {
            StagPick::Region(i) => {
                let i = usize::from(i) % n;
                (self.stags[i].0, i)
            }
            StagPick::WrongKey(i, k) => {
                let i = usize::from(i) % n;
                let s = self.stags[i].0;
                let key = (s as u8) ^ k.max(1);
                ((s & !0xFF) | u32::from(key), i)
            }
            StagPick::Garbage(v) => (v, (v as usize) % n),
        }
    }

    fn to(region: usize, p: ToPick) -> u64 {
        let r = &REGIONS[region];
        match p {
            ToPick::Start(x) => r.base_to.wrapping_add(u64::from(x)),
            ToPick::End(x) => r
                .base_to
                .wrapping_add(r.len as u64)
                .wrapping_add(i64::from(x) as u64),
            ToPick::Raw(v) => v,
        }
    }

    /// The ULPDU of a structured segment.
    fn ulpdu(&mut self, s: &Seg) -> Vec<u8> {
        let opcode = s.opcode & 0x0F;
        let op = Opcode::from_u8(opcode);
        let tagged = s
            .tagged
            .unwrap_or_else(|| op.is_some_and(|o| o.is_tagged()));
        let (mut ddp_ctrl, mut rdmap_ctrl) = (
            (u8::from(tagged) << 7) | (u8::from(s.last) << 6) | 1,
            (1 << 6) | opcode,
        );
        if let Some((a, b)) = s.ctrl_noise {
            ddp_ctrl ^= a & 0x3F;
            rdmap_ctrl ^= b & 0xF0;
        }
        let mut out = vec![ddp_ctrl, rdmap_ctrl];
        if tagged {
            let (stag, region) = self.stag(s.stag);
            out.extend_from_slice(&stag.to_be_bytes());
            out.extend_from_slice(&Self::to(region, s.to).to_be_bytes());
        } else {
            let qn = s.qn.unwrap_or_else(|| op.and_then(|o| o.qn()).unwrap_or(0));
            let expected = self.msn.get(qn as usize).copied().unwrap_or(1);
            let msn = match s.msn {
                MsnPick::Next(d) => expected.wrapping_add(i32::from(d) as u32),
                MsnPick::Raw(v) => v,
            };
            if s.last {
                if let Some(m) = self.msn.get_mut(qn as usize) {
                    *m = m.wrapping_add(1);
                }
            }
            let (inv, _) = self.stag(s.inv);
            out.extend_from_slice(&inv.to_be_bytes());
            out.extend_from_slice(&qn.to_be_bytes());
            out.extend_from_slice(&msn.to_be_bytes());
            out.extend_from_slice(&s.mo.to_be_bytes());
        }
        match &s.hdr {
            Hdr::None => {}
            Hdr::Read {
                sink,
                sink_to,
                size,
                src,
                src_to,
            } => {
                let (sink, sr) = self.stag(*sink);
                let (src, rr) = self.stag(*src);
                out.extend_from_slice(&sink.to_be_bytes());
                out.extend_from_slice(&Self::to(sr, *sink_to).to_be_bytes());
                out.extend_from_slice(&size.to_be_bytes());
                out.extend_from_slice(&src.to_be_bytes());
                out.extend_from_slice(&Self::to(rr, *src_to).to_be_bytes());
            }
            Hdr::Atomic {
                aop,
                id,
                stag,
                to,
                data,
            } => {
                let (stag, r) = self.stag(*stag);
                out.extend_from_slice(&aop.to_be_bytes());
                out.extend_from_slice(&id.to_be_bytes());
                out.extend_from_slice(&stag.to_be_bytes());
                out.extend_from_slice(&Self::to(r, *to).to_be_bytes());
                for d in data {
                    out.extend_from_slice(&d.to_be_bytes());
                }
            }
            Hdr::AtomicResp(id, v) => {
                out.extend_from_slice(&id.to_be_bytes());
                out.extend_from_slice(&v.to_be_bytes());
            }
            Hdr::Imm(d) => out.extend_from_slice(d),
            Hdr::Raw(v) => out.extend_from_slice(&v[..v.len().min(64)]),
        }
        let len = usize::from(s.len) % (MAX_PAYLOAD + 1);
        out.extend((0..len).map(|i| s.fill.wrapping_add(i as u8)));
        out
    }

    /// Frames a ULPDU at the current stream position (markers count from FPDU mode).
    fn frame(&mut self, ulpdu: &[u8], crc_ok: bool, out: &mut Vec<u8>) {
        let mut framer = Framer::new(FramerConfig {
            markers: self.negotiated.markers_tx,
            crc: self.negotiated.crc,
            mulpdu: MAX_ULPDU_LEN,
            stream_offset: self.sent as u64,
        });
        let ulpdu = &ulpdu[..ulpdu.len().min(MAX_ULPDU_LEN)];
        let mut buf = vec![0u8; framer.fpdu_wire_len(ulpdu.len())];
        let Ok(n) = framer.emit(&[ulpdu], &mut buf) else {
            return;
        };
        if !crc_ok && self.negotiated.crc && n >= 4 {
            buf[n - 1] ^= 0x01;
        }
        out.extend_from_slice(&buf[..n]);
        self.sent += n;
    }

    fn encode(&mut self, pieces: &[Piece]) -> Vec<u8> {
        let mut out = Vec::new();
        for p in pieces {
            match p {
                Piece::Seg(s) => {
                    let u = self.ulpdu(s);
                    self.frame(&u, s.crc_ok, &mut out);
                }
                Piece::Ulpdu(u) => self.frame(u, true, &mut out),
                Piece::Rtr(k) => {
                    let t = match k % 3 {
                        0 => RtrType::Write,
                        1 => RtrType::Read,
                        _ => RtrType::Send,
                    };
                    self.frame(t.ulpdu(), true, &mut out);
                }
                Piece::Bytes(b) => {
                    out.extend_from_slice(b);
                    self.sent += b.len();
                }
            }
        }
        out
    }

    /// One step of both sides, then the peer reads what the engine sent.
    fn step(&mut self) -> bool {
        let mut work = self.peer.poll(self.now);
        work |= self.engine.poll(self.now);
        self.now += Duration::from_micros(100);
        work |= self.drain();
        work
    }

    /// Reads the engine's output, events and completions; true if there was any.
    fn drain(&mut self) -> bool {
        let mut any = false;
        while let Some(e) = self.engine.next_event() {
            any = true;
            self.events.push(e);
        }
        while let Some(c) = self.cq.pop() {
            any = true;
            if c.status == WcStatus::Success && matches!(c.opcode, WcOpcode::Recv) {
                self.report.recvs_ok += 1;
            }
            self.completions.entry(c.wr_id).or_default().push(c.status);
        }
        let World {
            peer,
            tcp,
            deframer,
            report,
            terminate_seen,
            violation,
            ..
        } = self;
        let n = peer
            .recv_with(*tcp, |data| {
                let mut used = 0;
                loop {
                    match deframer.poll(&data[used..]) {
                        Ok((k, Some(u))) => {
                            used += k;
                            report.fpdus_out += 1;
                            if *terminate_seen && violation.is_none() {
                                *violation = Some(Violation::Terminate(
                                    "an FPDU followed the Terminate (RDMAP-5.4-6)".into(),
                                ));
                            }
                            match Segment::parse(&u) {
                                Ok(seg) => {
                                    if let RdmapHeader::Terminate(t) = seg.repr.header {
                                        let r = TerminateReport::decode(&t);
                                        if r.error.is_none() && violation.is_none() {
                                            *violation = Some(Violation::Terminate(format!(
                                                "undefined layer/type/code {:?}",
                                                r.code
                                            )));
                                        }
                                        report.terminates.push(r);
                                        *terminate_seen = true;
                                    }
                                }
                                Err(e) => {
                                    if violation.is_none() {
                                        *violation = Some(Violation::BadOutput(format!(
                                            "an FPDU that does not parse: {e:?}"
                                        )));
                                    }
                                }
                            }
                        }
                        Ok((k, None)) => {
                            used += k;
                            break;
                        }
                        Err(e) => {
                            if violation.is_none() {
                                *violation = Some(Violation::BadOutput(format!(
                                    "the stream does not deframe: {e:?}"
                                )));
                            }
                            used = data.len();
                            break;
                        }
                    }
                }
                used
            })
            .unwrap_or(0);
        any | (n > 0)
    }

    /// Sends `stream` in segments of the sizes `cuts` (in turn), runs until quiet, checks.
    fn feed(&mut self, stream: &[u8], cuts: &[u16]) -> Result<Report, Violation> {
        let mut rest = stream;
        let mut k = 0usize;
        let mut steps = 0usize;
        while !rest.is_empty() && steps < MAX_STEPS {
            let size = match cuts.get(k % cuts.len().max(1)).copied().unwrap_or(0) {
                0 => rest.len(),
                n => usize::from(n).min(rest.len()),
            };
            k += 1;
            let mut piece = &rest[..size];
            rest = &rest[size..];
            // The whole piece goes into the send buffer before the next poll, so that it
            // leaves as its own segment(s).
            while !piece.is_empty() && steps < MAX_STEPS {
                match self.peer.send(self.tcp, piece) {
                    Ok(n) => piece = &piece[n..],
                    Err(_) => {
                        // The engine closed or reset: what is left cannot be delivered.
                        rest = &[];
                        break;
                    }
                }
                self.step();
                steps += 1;
            }
        }
        if self.setup.fin {
            let _ = self.peer.close(self.tcp);
        }
        let mut quiet = 0;
        let mut settle = 0;
        while quiet < 3 {
            if settle == MAX_QUIET_STEPS {
                return Err(Violation::State(format!(
                    "still busy {MAX_QUIET_STEPS} steps after the stream ended (livelock)"
                )));
            }
            if self.step() {
                quiet = 0;
            } else {
                quiet += 1;
            }
            settle += 1;
        }
        self.finish()
    }

    fn finish(&mut self) -> Result<Report, Violation> {
        if let Some(v) = self.violation.take() {
            return Err(v);
        }
        self.check_memory()?;
        self.check_state()?;
        self.report.completions = std::mem::take(&mut self.completions).into_iter().collect();
        // FNV-1a over the arena: the same octets in every region after both runs.
        self.report.memory = self
            .arena
            .snapshot()
            .iter()
            .fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
                (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
            });
        self.check_bystander()?;
        if let Some(v) = self.violation.take() {
            return Err(v);
        }
        Ok(std::mem::take(&mut self.report))
    }

    /// Invariant 8: whatever the first connection's peer did, the engine goes on serving
    /// the other: its queue pair was never failed, a Send from its peer lands in its posted
    /// buffer and completes, and a Send posted on it reaches its peer intact.
    fn check_bystander(&mut self) -> Result<(), Violation> {
        let fail = |s: String| Err(Violation::Bystander(s));
        let qp = self.bystander.qp;
        if let Some(e) = self.events.iter().find(|e| match e {
            CmEvent::Error { qp: q, .. } | CmEvent::Disconnected { qp: q, .. } => *q == qp,
            _ => false,
        }) {
            return fail(format!("its queue pair got {e:?}"));
        }
        let state = self.engine.qp_state(qp);
        if state != Ok(QpState::Rts) {
            return fail(format!("its queue pair is in {state:?}"));
        }
        // The peer's Send: DDP untagged, last, QN 0, MSN 1, MO 0 (RDMAP-5.1, DDP-4.3).
        let mut ulpdu = vec![0x41, 0x40 | Opcode::Send as u8, 0, 0, 0, 0];
        ulpdu.extend_from_slice(&0u32.to_be_bytes());
        ulpdu.extend_from_slice(&1u32.to_be_bytes());
        ulpdu.extend_from_slice(&0u32.to_be_bytes());
        ulpdu.extend_from_slice(BYSTANDER_MSG);
        let n = &self.bystander.negotiated;
        let (markers_tx, markers_rx, crc) = (n.markers_tx, n.markers_rx, n.crc);
        let mut framer = Framer::new(FramerConfig {
            markers: markers_tx,
            crc,
            mulpdu: MAX_ULPDU_LEN,
            stream_offset: 0,
        });
        let mut fpdu = vec![0u8; framer.fpdu_wire_len(ulpdu.len())];
        let len = framer
            .emit(&[&ulpdu], &mut fpdu)
            .map_err(|e| Violation::Setup(format!("framing the bystander's Send: {e:?}")))?;
        fpdu.truncate(len);
        if self.peer.send(self.bystander.tcp, &fpdu) != Ok(fpdu.len()) {
            return fail("its peer's TCP connection no longer takes data".into());
        }
        let src = BYSTANDER_LEN / 2;
        self.engine
            .post_send(
                qp,
                SendWr {
                    wr_id: BYSTANDER_SEND,
                    op: SendOp::Send,
                    sges: SgeList::from_slice(&[Sge {
                        stag: self.bystander.stag,
                        to: src as u64,
                        len: BYSTANDER_MSG.len() as u32,
                    }])
                    .ok_or_else(|| Violation::Setup("sges".into()))?,
                    signaled: true,
                    fence: false,
                },
            )
            .or_else(|e| fail(format!("posting a Send on it: {e:?}")))?;
        let mut deframer = Deframer::new(DeframerConfig {
            markers: markers_rx,
            crc,
            max_ulpdu_len: MAX_ULPDU_LEN,
            stream_offset: 0,
        });
        let mut received: Vec<Vec<u8>> = Vec::new();
        let mut completions = Vec::new();
        let mut deframed = Ok(());
        for _ in 0..BYSTANDER_STEPS {
            self.step();
            while let Some(c) = self.bystander.cq.pop() {
                completions.push(c);
            }
            let _ = self.peer.recv_with(self.bystander.tcp, |data| {
                let mut used = 0;
                while deframed.is_ok() {
                    match deframer.poll(&data[used..]) {
                        Ok((k, Some(u))) => {
                            used += k;
                            received.push(u.to_vec());
                        }
                        Ok((k, None)) => {
                            used += k;
                            break;
                        }
                        Err(e) => {
                            deframed = Err(format!("its stream does not deframe: {e:?}"));
                            used = data.len();
                        }
                    }
                }
                used
            });
            if completions.len() == 2 && !received.is_empty() {
                break;
            }
        }
        deframed.or_else(fail)?;
        let recv = completions.iter().find(|c| c.wr_id == BYSTANDER_RECV);
        match recv {
            Some(c)
                if c.status == WcStatus::Success
                    && c.opcode == WcOpcode::Recv
                    && c.byte_len as usize == BYSTANDER_MSG.len() => {}
            other => return fail(format!("its receive completed as {other:?}")),
        }
        match completions.iter().find(|c| c.wr_id == BYSTANDER_SEND) {
            Some(c) if c.status == WcStatus::Success => {}
            other => return fail(format!("its Send completed as {other:?}")),
        }
        if completions.len() != 2 {
            return fail(format!("{} completions, not 2", completions.len()));
        }
        let after = self.bystander.arena.snapshot();
        let (start, _) = self.bystander.arena.spans()[0];
        let mut want = self.bystander.before.clone();
        want[start..start + BYSTANDER_MSG.len()].copy_from_slice(BYSTANDER_MSG);
        if after != want {
            return fail("its region does not hold exactly the Send its peer sent".into());
        }
        let [u] = received.as_slice() else {
            return fail(format!("its peer received {} FPDUs, not 1", received.len()));
        };
        let sent = &after[start + src..start + src + BYSTANDER_MSG.len()];
        match Segment::parse(u) {
            Ok(seg) if seg.repr.opcode == Opcode::Send && seg.payload == sent => Ok(()),
            other => fail(format!(
                "its peer received {other:?}, not a Send of {sent:02x?}"
            )),
        }
    }

    fn check_memory(&mut self) -> Result<(), Violation> {
        let after = self.arena.snapshot();
        let spans = self.arena.spans();
        let mut changed = 0;
        for (i, (a, b)) in self.before.iter().zip(&after).enumerate() {
            if a == b {
                continue;
            }
            let Some(r) = spans.iter().position(|&(s, l)| i >= s && i < s + l) else {
                let region_before = spans.iter().rposition(|&(s, _)| s <= i);
                return Err(Violation::Guard {
                    after: region_before,
                    offset: i,
                });
            };
            let off = i - spans[r].0;
            changed += 1;
            let ok = REGIONS[r].peer_may_write
                || (r == LOCAL && self.local_ok.iter().any(|&(s, l)| off >= s && off < s + l));
            if !ok {
                return Err(Violation::Forbidden {
                    region: r,
                    offset: off,
                });
            }
        }
        self.report.changed = changed;
        Ok(())
    }

    fn check_state(&mut self) -> Result<(), Violation> {
        let st = |s: String| Err(Violation::State(s));
        if self.cq.overrun() {
            return st("completion queue overrun (harness sized it too small)".into());
        }
        let state = self.engine.qp_state(self.qp).ok();
        self.report.state = state;
        let mut local = None;
        let mut errors = 0;
        for e in &self.events {
            if let CmEvent::Error { qp, error } = e {
                if *qp != self.qp {
                    continue;
                }
                errors += 1;
                match error {
                    ConnError::LocalTerminate(err) => local = Some(*err),
                    ConnError::RemoteTerminate(_) => self.report.remote_terminate = true,
                    _ => {}
                }
            }
        }
        if errors > 1 {
            return st(format!(
                "{errors} errors reported (RDMAP-7.1-5: only the first)"
            ));
        }
        self.report.local_error = local.is_some();
        if self.report.terminates.len() > 1 {
            return Err(Violation::Terminate(format!(
                "{} Terminates sent",
                self.report.terminates.len()
            )));
        }
        if let Some(err) = local {
            let Some(t) = self.report.terminates.first() else {
                return Err(Violation::Terminate(format!(
                    "local error {err:?} reported but no Terminate went out"
                )));
            };
            if t.error != Some(err) {
                return Err(Violation::Terminate(format!(
                    "the wire says {:?}, the engine reported {err:?}",
                    t.error
                )));
            }
        } else if !self.report.terminates.is_empty() {
            return Err(Violation::Terminate(
                "a Terminate went out with no local error reported".into(),
            ));
        }
        for (id, v) in &self.completions {
            if v.len() > 1 {
                return st(format!("work request {id} completed {} times", v.len()));
            }
            if !self.posted.contains_key(id) {
                return st(format!("completion for unknown work request {id}"));
            }
        }
        let dead = local.is_some() || self.report.remote_terminate;
        if dead {
            if !matches!(state, Some(QpState::Error | QpState::Terminate)) {
                return st(format!("after a Terminate the QP is in {state:?}"));
            }
            for id in self.posted.keys() {
                if !self.completions.contains_key(id) {
                    return st(format!(
                        "work request {id} never completed after the QP failed"
                    ));
                }
            }
        } else if errors == 0 && !self.setup.fin {
            if state != Some(QpState::Rts) {
                return st(format!("no error, no FIN, yet the QP is in {state:?}"));
            }
            if self
                .completions
                .values()
                .flatten()
                .any(|s| *s == WcStatus::FlushErr)
            {
                return st("a flushed completion while the QP stays in RTS".into());
            }
        }
        Ok(())
    }
}
