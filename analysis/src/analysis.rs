//! iWARP analysis of reassembled TCP connections: MPA startup, negotiated parameters, the
//! FPDU stream of each direction and every DDP/RDMAP segment in it, with the protocol
//! violations found on the way.
//!
//! All parsing is `warpcore-proto`'s: the startup frames with [`wire::mpa`] (and the Reply
//! judged by its initiator negotiation machine), the FPDU streams with its deframer (see
//! [`crate::fpdu`]), every ULPDU with [`wire::segment`], Terminates with
//! [`TerminateReport`]. What this module adds is bookkeeping across segments and across the
//! two directions: message sequence numbers per queue, offsets within a message, Read
//! Requests waiting for their Response, the peer-to-peer RTR, and MPA fencing (a note);
//! and the TCP segments of each direction judged against its FPDU boundaries
//! ([`SegmentAlignment`]).
//!
//! What is a violation and what is not: everything in [`FindingKind`] is a breach of a MUST
//! of the specifications that a capture shows unambiguously. Capture artefacts (a gap the
//! capture never filled, a file trimmed mid-message, an unanswered Read at the end) and
//! behaviour the reference implementation shows (Linux siw's responder does not wait for
//! the initiator's first FPDU outside peer-to-peer mode, MPA-7.1.2-16) are notes.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use warpcore_proto::mpa::negotiation;
use warpcore_proto::rdmap::{check_inbound, InboundReadQueue, RdmapConfig, ReadResponsePlan};
use warpcore_proto::wire;
use warpcore_proto::wire::ddp::DdpBuffer;
use warpcore_proto::wire::mpa::{
    EnhancedData, Frame, FrameError, FrameKind, FrameRepr, RtrType, RtrTypes,
    IRD_ORD_NO_NEGOTIATION,
};
use warpcore_proto::wire::rdmap::{Opcode, ReadRequestRepr};
use warpcore_proto::wire::segment::{RdmapHeader, SegmentError};
use warpcore_proto::{MpaError, TerminateCode, TerminateReport};

use crate::fpdu::{self, Deframed, DeframerConfig, FpduEvent};
use crate::tcp::{Connection, Stream};

/// The direction of an iWARP stream, named after the MPA roles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Direction {
    /// From the side that sent the MPA Request.
    InitiatorToResponder,
    /// From the side that sent the MPA Reply.
    ResponderToInitiator,
}

impl Direction {
    /// Both directions, initiator first.
    pub const BOTH: [Direction; 2] = [
        Direction::InitiatorToResponder,
        Direction::ResponderToInitiator,
    ];

    /// The other direction.
    pub const fn reverse(self) -> Direction {
        match self {
            Direction::InitiatorToResponder => Direction::ResponderToInitiator,
            Direction::ResponderToInitiator => Direction::InitiatorToResponder,
        }
    }

    /// Index 0 for initiator-to-responder, 1 for the reverse.
    pub const fn index(self) -> usize {
        match self {
            Direction::InitiatorToResponder => 0,
            Direction::ResponderToInitiator => 1,
        }
    }

    /// A short label: "I>R" or "R>I".
    pub const fn label(self) -> &'static str {
        match self {
            Direction::InitiatorToResponder => "I>R",
            Direction::ResponderToInitiator => "R>I",
        }
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.label())
    }
}

/// One MPA Request or Reply frame as it was sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartupFrame {
    /// Frame number of the packet that completed the startup frame.
    pub frame: u64,
    /// Its capture time.
    pub timestamp: Duration,
    /// M: the sender wants to receive markers.
    pub markers: bool,
    /// C: the sender wants CRCs.
    pub crc: bool,
    /// R: rejected (meaningful in a Reply).
    pub reject: bool,
    /// Rev.
    pub rev: u8,
    /// The RFC 6581 enhanced data, if S = 1 and Rev ≥ 2.
    pub enhanced: Option<EnhancedData>,
    /// Length of the ULP private data (after the enhanced data).
    pub ulp_private_data_len: usize,
    /// Total frame length (header and private data).
    pub len: usize,
}

impl StartupFrame {
    fn from_repr(repr: &FrameRepr<'_>, len: usize, frame: u64, timestamp: Duration) -> Self {
        StartupFrame {
            frame,
            timestamp,
            markers: repr.markers,
            crc: repr.crc,
            reject: repr.reject,
            rev: repr.rev,
            enhanced: repr.enhanced,
            ulp_private_data_len: repr.private_data.len(),
            len,
        }
    }
}

/// What the MPA startup settled, as far as the capture shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Negotiated {
    /// CRCs on both directions: C set in either frame (MPA-7.1.1, mpa-08 §7.1.1).
    pub crc: bool,
    /// Markers in each direction, indexed by [`Direction::index`]: the initiator sends them
    /// when the Reply has M = 1, the responder when the Request has M = 1.
    pub markers: [bool; 2],
    /// Peer-to-peer mode: A set in both enhanced frames (RFC 6581 §9).
    pub peer_to_peer: bool,
    /// RTR types the initiator offered and the responder accepted (peer-to-peer only).
    pub rtr_offered: RtrTypes,
    /// RTR types the responder said it supports.
    pub rtr_supported: RtrTypes,
    /// The RTR the initiator actually sent first, if its first FPDU is one.
    pub rtr_sent: Option<RtrType>,
    /// Peer-to-peer mode, but the initiator can send none of the RTR types the responder
    /// flagged: a responder supporting none of the offered types flags others
    /// (MPA2-9.2-8), and the initiator then sends a Terminate 2/0/7 in place of an RTR
    /// (MPA2-9.2-10). Neither is a violation.
    pub no_common_rtr: bool,
}

/// Counters for one opcode in one direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpcodeStats {
    /// DDP segments (FPDUs).
    pub segments: u64,
    /// Complete messages (segments with L = 1).
    pub messages: u64,
    /// ULP payload octets (after the DDP and RDMAP headers).
    pub payload_octets: u64,
}

/// The addressing fields of a DDP segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Addressing {
    /// Tagged: STag and Tagged Offset.
    Tagged {
        /// STag.
        stag: u32,
        /// Tagged Offset.
        to: u64,
    },
    /// Untagged: queue, message sequence number and message offset.
    Untagged {
        /// Queue Number.
        qn: u32,
        /// Message Sequence Number.
        msn: u32,
        /// Message Offset.
        mo: u32,
        /// `RsvdULP[8:39]`: the Invalidate STag of the Send-with-Invalidate opcodes.
        inv_stag: u32,
    },
}

/// The CRC of an FPDU, as checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrcCheck {
    /// CRC not negotiated: the field is not checked (MPA-4.4, mpa-08 §7.1.1).
    NotChecked,
    /// Checked and correct.
    Good,
    /// Checked and wrong.
    Bad,
}

/// A decoded Terminate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TerminateInfo {
    /// Layer, EType and code.
    pub code: TerminateCode,
    /// The M, D and R flags.
    pub flags: (bool, bool, bool),
    /// The DDP Segment Length field, if D = 1.
    pub ddp_segment_len: Option<u16>,
    /// proto's decoding of the whole Terminate (reason and the offending message).
    pub report: TerminateReport,
}

/// One DDP segment (one FPDU) as decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Direction.
    pub direction: Direction,
    /// Frame number of the packet that completed the FPDU.
    pub frame: u64,
    /// Its capture time.
    pub timestamp: Duration,
    /// TCP sequence number of the FPDU's ULPDU_Length field (past the marker when one comes
    /// first: such a marker belongs to the FPDU, mpa-08 §4.3).
    pub seq: u32,
    /// ULPDU_Length.
    pub ulpdu_len: usize,
    /// The RDMAP opcode, if the four bits name one.
    pub opcode: Option<Opcode>,
    /// The raw opcode bits.
    pub opcode_raw: u8,
    /// The L flag.
    pub last: bool,
    /// Addressing fields.
    pub addressing: Addressing,
    /// ULP payload octets (after the DDP header and any RDMAP header).
    pub payload_len: usize,
    /// CRC status.
    pub crc: CrcCheck,
    /// The Read Request header, for Read Requests.
    pub read_request: Option<ReadRequestRepr>,
    /// The decoded Terminate, for Terminates.
    pub terminate: Option<TerminateInfo>,
}

/// What kind of problem a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FindingKind {
    /// An MPA Request or Reply frame is malformed (MPA-8-4; Terminate 2/0/4).
    MalformedStartup,
    /// The Reply does not satisfy the Request (MPA2-9.2-4 A echoed, MPA2-9.1-4 responder ORD
    /// at most the initiator IRD, MPA2-10-5/6 format), as proto's initiator negotiation
    /// machine judges it (Terminate 2/0/4, 2/0/6 or 2/0/7). No RTR type in common is not
    /// one: RFC 6581 §9.2 lets the responder flag only types it supports (MPA2-9.2-8) and
    /// has the initiator answer with a Terminate 2/0/7 (MPA2-9.2-10).
    Negotiation,
    /// An FPDU's CRC does not match where CRCs were negotiated (MPA-7.1.1-13, MPA-8-2;
    /// Terminate 2/0/2).
    CrcError,
    /// A marker disagrees with the FPDU framing (MPA-8-3, MPA-8-6; Terminate 2/0/3).
    MarkerError,
    /// An FPDU or DDP segment is malformed (too short for its headers, bad length).
    MalformedSegment,
    /// DDP version is not 1 (Terminate 1/1/4 or 1/2/6).
    DdpVersion,
    /// RDMAP version is not 1 (Terminate 0/2/5).
    RdmapVersion,
    /// Unknown opcode, or an opcode with the wrong buffer model or queue (Terminate 0/2/6).
    UnexpectedOpcode,
    /// MSN out of sequence on a queue: the first message is MSN 1, then one more per message,
    /// the same in every segment of a message (DDP-4.3-7, DDP-4.3-8, DDP-4.3-10).
    MsnSequence,
    /// Message Offset not 0 at the start of a message (DDP-4.3-11) or not contiguous within
    /// it (DDP-5.2-6; in-order emission is DDP-5.3-2, which over one TCP stream holds for
    /// every implementation we know).
    MessageOffset,
    /// Tagged Offset not contiguous within a tagged message (DDP-5.2-8), or the STag changed
    /// mid-message (DDP-4.2-8).
    TaggedOffset,
    /// A Read Response with no Read Request outstanding, out of request order, or not
    /// matching its request's sink STag/TO and size (RDMAP-4.4-2, RDMAP-5.2-1,
    /// RDMAP-5.5-13, RDMAP-5.2.2-5).
    ReadResponse,
    /// More Read and Atomic Requests outstanding than the peer's negotiated IRD
    /// (RDMAP-6.1-4, RDMAP-6.1-5; Atomic Requests share the queue, EXT-5.2-1).
    IrdExceeded,
    /// Peer-to-peer mode, but the initiator's first FPDU is not an agreed RTR (MPA2-5-1).
    Rtr,
    /// An FPDU followed a Terminate in the same direction (RDMAP-5.4-6).
    AfterTerminate,
}

impl FindingKind {
    /// A short name for summaries and JSON.
    pub const fn name(self) -> &'static str {
        match self {
            FindingKind::MalformedStartup => "malformed-startup",
            FindingKind::Negotiation => "negotiation",
            FindingKind::CrcError => "crc-error",
            FindingKind::MarkerError => "marker-error",
            FindingKind::MalformedSegment => "malformed-segment",
            FindingKind::DdpVersion => "ddp-version",
            FindingKind::RdmapVersion => "rdmap-version",
            FindingKind::UnexpectedOpcode => "unexpected-opcode",
            FindingKind::MsnSequence => "msn-sequence",
            FindingKind::MessageOffset => "message-offset",
            FindingKind::TaggedOffset => "tagged-offset",
            FindingKind::ReadResponse => "read-response",
            FindingKind::IrdExceeded => "ird-exceeded",
            FindingKind::Rtr => "rtr",
            FindingKind::AfterTerminate => "after-terminate",
        }
    }
}

/// A protocol violation found in a capture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// What kind of violation.
    pub kind: FindingKind,
    /// Direction, if it belongs to one.
    pub direction: Option<Direction>,
    /// Frame number where it shows.
    pub frame: u64,
    /// A human explanation with the values involved.
    pub detail: String,
}

/// Per-direction results.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DirectionReport {
    /// Octets of FPDU-mode stream the capture holds for this direction.
    pub fpdu_stream_octets: u64,
    /// Counters per opcode.
    pub opcodes: BTreeMap<Opcode, OpcodeStats>,
    /// Segments whose opcode bits name no opcode.
    pub unknown_opcode_segments: u64,
    /// FPDUs whose CRC was checked and found wrong.
    pub crc_errors: u64,
    /// Marker errors.
    pub marker_errors: u64,
    /// ULPDUs proto's segment decoder rejected as malformed.
    pub malformed_segments: u64,
    /// Whole FPDUs whose DDP segment is not among the decoded ones (in `opcodes`): those
    /// with a bad CRC and those proto's segment decoder rejected (any violation kind).
    /// Where deframing stopped, the octets after the last whole FPDU are no FPDU.
    pub undecoded_fpdus: u64,
    /// Octets after the last whole FPDU (the capture ended, or was cut, inside an FPDU).
    pub trailing_octets: usize,
    /// TCP data segments of FPDU mode judged against the FPDU boundaries: the aligned ones
    /// plus the unaligned ones ([`DirectionReport::unaligned_segments`]). How segments are
    /// counted (retransmissions, the startup, unknown boundaries) is told at
    /// [`SegmentAlignment`].
    pub data_segments: u64,
    /// Of those, the segments that start at an FPDU boundary and end at one (one or more
    /// whole FPDUs): what an MPA-aligned sender (mpa-08 §4 item 4) sends, and what a
    /// hardware receiver places without buffering.
    pub aligned_segments: u64,
    /// FPDU-mode data segments that could not be judged (not in `data_segments`): they
    /// reach past [`DirectionReport::alignment_unknown_from`], or were cut by the snap
    /// length.
    pub alignment_unknown_segments: u64,
    /// Where FPDU boundaries (or the segments' ends) stop being known, and why; `None` when
    /// every FPDU-mode data segment of the direction was judged.
    pub alignment_unknown_from: Option<AlignmentUnknown>,
    /// Of the segments counted above (judged or unknown), those that repeat octets an
    /// earlier segment of the capture already carried: retransmissions, each copy of which
    /// is a segment of its own in the counts ([`SegmentAlignment::retransmitted`]).
    pub retransmitted_segments: u64,
    /// The Terminates sent in this direction.
    pub terminates: Vec<(u64, TerminateInfo)>,
}

impl DirectionReport {
    /// FPDUs whose DDP segment decoded (the sum over `opcodes` and undefined opcodes).
    pub fn decoded_fpdus(&self) -> u64 {
        self.opcodes.values().map(|s| s.segments).sum::<u64>() + self.unknown_opcode_segments
    }

    /// Judged segments that do not both start and end at an FPDU boundary.
    pub fn unaligned_segments(&self) -> u64 {
        self.data_segments - self.aligned_segments
    }

    /// The share of judged segments that are aligned, in percent rounded *down* to a tenth
    /// (so 100.0 means every one); `None` when no segment was judged.
    pub fn aligned_percent(&self) -> Option<f64> {
        (self.data_segments > 0)
            .then(|| (self.aligned_segments * 1000 / self.data_segments) as f64 / 10.0)
    }
}

/// How the TCP data segments of one direction lie against its FPDUs (what an MPA-aligned
/// sender, mpa-08 §4 item 4, gets right: every segment starts with an FPDU's header and
/// ends with an FPDU's last octet, a segment may hold several whole FPDUs). Filled into
/// [`DirectionReport`].
///
/// - Every frame holding a TCP segment with data counts once, as it appears in the
///   capture, with the segment's own sequence range: a retransmission is a segment of its
///   own, counted again and judged like any other (aligned iff its own range starts and
///   ends at FPDU boundaries of the stream), whether its octets were new or not and
///   whatever the ranges of the copies before it. (A frame the capture holds twice counts
///   twice.) Out-of-order segments count where they lie in the stream. So that no octet
///   seems to have been sent twice unawares, the counted segments that repeat octets an
///   earlier segment of the capture carried (any earlier one, the startup's included) are
///   counted again in `retransmitted`; a segment that fills a hole in the capture is not a
///   repeat.
/// - Segments holding any octet of the MPA Request or Reply (the startup, including one
///   that also holds the first FPDU octets), and zero-length segments (pure ACKs, window
///   probes without data), are not counted.
/// - FPDU boundaries are stream offsets: where FPDU mode starts and where each FPDU ends, a
///   marker in front of an FPDU's header belonging to that FPDU (as the framer sends it).
///   Markers change nothing else.
/// - A segment is judged only where the boundaries are known: up to the end of the last
///   FPDU proto's deframer validated if decoding ended on an error (deframing stopped, or
///   the length chain lost after a CRC error), up to the end of the captured stream
///   otherwise (an FPDU still incomplete there holds no boundary). A segment starting
///   inside a known FPDU is unaligned whatever follows; any other segment reaching past the
///   known part (or beyond a capture gap, or cut by the snap length) is counted as
///   unknown, not guessed, and [`AlignmentUnknown`] says from where and why.
/// - A connection whose MPA startup the capture missed (it began mid-stream) is not
///   decoded at all, so it has no figures either.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SegmentAlignment {
    /// Segments starting and ending at FPDU boundaries.
    pub aligned: u64,
    /// Segments known to start or end inside an FPDU.
    pub unaligned: u64,
    /// Segments that could not be judged.
    pub unknown: u64,
    /// Of all three, the segments repeating octets an earlier segment carried.
    pub retransmitted: u64,
}

/// Why segments could not be judged aligned or not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AlignmentLoss {
    /// The deframer stopped on an error it cannot resume after (a marker error, a length
    /// above the maximum, a second CRC error in a row): no FPDU boundary after the last
    /// valid FPDU is known.
    DeframingStopped,
    /// A CRC error that no valid FPDU followed: its length field may be the damaged part,
    /// so where that FPDU ends is not known.
    LengthChainLost,
    /// The capture misses octets of the stream (a gap no later segment filled): nothing
    /// beyond it is known.
    CaptureGap,
    /// A frame was cut by the snap length: where its segment ends is not known.
    SnapLength,
}

impl AlignmentLoss {
    /// A short name for JSON.
    pub const fn name(self) -> &'static str {
        match self {
            AlignmentLoss::DeframingStopped => "deframing-stopped",
            AlignmentLoss::LengthChainLost => "length-chain-lost",
            AlignmentLoss::CaptureGap => "capture-gap",
            AlignmentLoss::SnapLength => "snap-length",
        }
    }

    /// A human explanation.
    pub const fn description(self) -> &'static str {
        match self {
            AlignmentLoss::DeframingStopped => "deframing stopped on an error",
            AlignmentLoss::LengthChainLost => "the length chain was lost after a CRC error",
            AlignmentLoss::CaptureGap => "a capture gap",
            AlignmentLoss::SnapLength => "a frame cut by the snap length",
        }
    }
}

/// The first place in a direction where segments stop being judgeable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AlignmentUnknown {
    /// TCP sequence number from which segments cannot be judged: the start of the first
    /// FPDU whose end is not known (deframing), the first octet the capture misses (gap),
    /// or the first octet the cut frame did not hold (snap length).
    pub seq: u32,
    /// Why.
    pub reason: AlignmentLoss,
}

/// How a direction's TCP stream ended in the capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpClose {
    /// Neither FIN nor RST seen (still open, or the capture was cut).
    Open,
    /// Closed with a FIN.
    Fin,
    /// Reset.
    Rst,
}

impl TcpClose {
    fn of(stream: &Stream) -> TcpClose {
        if stream.rst {
            TcpClose::Rst
        } else if stream.fin {
            TcpClose::Fin
        } else {
            TcpClose::Open
        }
    }

    /// "FIN", "RST" or "open".
    pub const fn label(self) -> &'static str {
        match self {
            TcpClose::Open => "open",
            TcpClose::Fin => "FIN",
            TcpClose::Rst => "RST",
        }
    }
}

/// Everything found about one TCP connection that used MPA.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IwarpConnection {
    /// The side that sent the MPA Request.
    pub initiator: SocketAddr,
    /// The side that sent the MPA Reply.
    pub responder: SocketAddr,
    /// Whether the initiator also sent the TCP SYN (None if the SYN was not captured).
    pub initiator_sent_syn: Option<bool>,
    /// How each direction's TCP stream ended, by [`Direction::index`].
    pub closed: [TcpClose; 2],
    /// The Request.
    pub request: StartupFrame,
    /// The Reply, if captured.
    pub reply: Option<StartupFrame>,
    /// The negotiated parameters, once both frames are known.
    pub negotiated: Option<Negotiated>,
    /// Per direction, indexed by [`Direction::index`].
    pub directions: [DirectionReport; 2],
    /// Every segment, in capture order.
    pub segments: Vec<Segment>,
    /// Per direction: the frame after which the capture shows no more of its FPDUs
    /// (deframing stopped on an error, or a capture gap). Checks that pair messages across
    /// the two directions are not made past this point.
    pub blind_after: [Option<u64>; 2],
    /// FPDUs that could not be decoded (CRC error, malformed segment): direction and frame.
    /// Decoding goes on after a CRC error, but pairing Reads across the directions is not
    /// judged after the first of these (the lost FPDU may have been part of a Read).
    pub lost_fpdus: Vec<(Direction, u64)>,
    /// Protocol violations.
    pub findings: Vec<Finding>,
    /// Things worth knowing that are not protocol violations (capture gaps, trimmed
    /// captures, rejected connections).
    pub notes: Vec<String>,
}

/// A TCP connection that did not start with an MPA Request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtherConnection {
    /// TCP client (SYN sender, or first sender seen).
    pub client: SocketAddr,
    /// TCP server.
    pub server: SocketAddr,
    /// Octets client to server.
    pub to_server_octets: u64,
    /// Octets server to client.
    pub to_client_octets: u64,
    /// Why it is not decoded (e.g. "no MPA Request at the start", or the capture misses the
    /// start of a stream).
    pub reason: String,
    /// A violation, if the stream started like an MPA frame but was malformed.
    pub finding: Option<Finding>,
}

/// The analysis of one TCP connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConnectionReport {
    /// An iWARP (MPA) connection.
    Iwarp(Box<IwarpConnection>),
    /// Any other TCP connection.
    Other(OtherConnection),
}

/// Where in the reassembled streams the FPDU mode of each direction starts, and how to
/// deframe it: what the analysis and the tests feed to the deframer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FpduStreams {
    /// Per direction (by [`Direction::index`]): stream offset of the first FPDU-mode octet,
    /// and the deframer settings.
    pub start: [(u64, DeframerConfig); 2],
}

/// The two streams of a connection seen from the MPA roles.
fn role_streams(conn: &Connection, initiator: SocketAddr) -> [&Stream; 2] {
    let from_i = conn.stream_from(initiator);
    let from_r = if std::ptr::eq(from_i, &conn.to_server) {
        &conn.to_client
    } else {
        &conn.to_server
    };
    [from_i, from_r]
}

/// Outcome of looking for an MPA frame at the start of a stream.
enum FrameLookup {
    /// Parsed.
    Found(StartupFrame),
    /// The stream does not start with this key.
    Absent,
    /// The stream ends (capture end or gap) before the frame is complete.
    Incomplete,
    /// Malformed.
    Malformed(FrameError),
}

fn lookup_frame(stream: &Stream, kind: FrameKind) -> FrameLookup {
    let data = &stream.data[..];
    if data.is_empty() || !wire::mpa::key_prefix_matches(kind, data) {
        return FrameLookup::Absent;
    }
    let len = match wire::mpa::frame_len(data) {
        Ok(len) => len,
        Err(FrameError::Truncated) => return FrameLookup::Incomplete,
        Err(e) => return FrameLookup::Malformed(e),
    };
    let Some(bytes) = data.get(..len) else {
        return FrameLookup::Incomplete;
    };
    match FrameRepr::parse(&Frame::new_unchecked(bytes)) {
        Ok(repr) if repr.kind == kind => {
            let chunk = stream.chunk_at(len as u64 - 1).copied();
            let (frame, ts) = chunk.map_or((0, Duration::ZERO), |c| (c.frame, c.timestamp));
            FrameLookup::Found(StartupFrame::from_repr(&repr, len, frame, ts))
        }
        Ok(_) => FrameLookup::Malformed(FrameError::BadKey),
        Err(e) => FrameLookup::Malformed(e),
    }
}

/// The stream carried data but the capture does not hold its first octet: its SYN was not
/// captured (the stream starts at the first octet seen), or it was and the first data
/// segment after it is missing (a gap at offset 0).
fn start_missing(stream: &Stream) -> bool {
    let carried_data = !stream.data.is_empty() || stream.gap.is_some();
    carried_data && (!stream.syn || stream.data.is_empty())
}

/// How a stream that stops inside a startup frame stops: the capture ends there, or misses
/// octets there and goes on (a lost frame).
fn cut_short(stream: &Stream) -> String {
    match stream.gap {
        Some(gap) => format!(
            "the capture misses octets from seq {} (a gap, {} octets after it) inside",
            gap.seq, gap.discarded_octets
        ),
        None => "the capture ends inside".to_string(),
    }
}

fn first_frame_of(stream: &Stream) -> u64 {
    stream.chunks.first().map_or(0, |c| c.frame)
}

/// Analyses one reassembled TCP connection.
pub fn analyse_connection(conn: &Connection) -> ConnectionReport {
    // The initiator is whoever sent the Request, whichever side sent the SYN (MPA-7.1.2).
    let (initiator, responder) = match (
        lookup_frame(&conn.to_server, FrameKind::Request),
        lookup_frame(&conn.to_client, FrameKind::Request),
    ) {
        (FrameLookup::Absent, FrameLookup::Absent) => {
            // Only a stream whose first octet the capture holds can be said not to start
            // with a Request: a capture that began after the handshake (or lost a stream's
            // first segment) may have missed the MPA startup of an iWARP connection.
            let reason = if [&conn.to_server, &conn.to_client]
                .iter()
                .any(|s| start_missing(s))
            {
                "the capture misses the start of its TCP stream (no SYN, or the first segment lost), where an MPA Request would be"
            } else {
                "no MPA Request at the start"
            };
            return ConnectionReport::Other(other(conn, reason, None));
        }
        (FrameLookup::Absent, _) => (conn.server, conn.client),
        _ => (conn.client, conn.server),
    };
    let streams = role_streams(conn, initiator);
    let request = match lookup_frame(streams[0], FrameKind::Request) {
        FrameLookup::Found(f) => f,
        FrameLookup::Incomplete | FrameLookup::Absent => {
            let reason = format!("{} the MPA Request", cut_short(streams[0]));
            return ConnectionReport::Other(other(conn, &reason, None));
        }
        FrameLookup::Malformed(e) => {
            let finding = Finding {
                kind: FindingKind::MalformedStartup,
                direction: Some(Direction::InitiatorToResponder),
                frame: first_frame_of(streams[0]),
                detail: format!("MPA Request: {e}"),
            };
            return ConnectionReport::Other(other(conn, "malformed MPA Request", Some(finding)));
        }
    };
    let mut report = IwarpConnection {
        initiator,
        responder,
        initiator_sent_syn: if conn.to_server.syn {
            Some(initiator == conn.client)
        } else {
            None
        },
        closed: [TcpClose::of(streams[0]), TcpClose::of(streams[1])],
        request,
        reply: None,
        negotiated: None,
        directions: Default::default(),
        segments: Vec::new(),
        blind_after: [None, None],
        lost_fpdus: Vec::new(),
        findings: Vec::new(),
        notes: Vec::new(),
    };
    for (dir, s) in Direction::BOTH.iter().zip(streams) {
        if let Some((frame, seq)) = s.first_conflict {
            report.notes.push(format!(
                "{dir}: {} TCP segment(s) carry octets that differ from an earlier copy of the same sequence numbers (first in frame {frame} at seq {seq}): the receiver may have taken either copy, the decoding uses one",
                s.conflicting_segments
            ));
        }
        if let Some(gap) = s.gap {
            report.notes.push(format!(
                "{dir}: capture gap at seq {} (stream offset {}); {} octets after it not decoded",
                gap.seq, gap.offset, gap.discarded_octets
            ));
        }
    }
    match lookup_frame(streams[1], FrameKind::Reply) {
        FrameLookup::Found(f) => report.reply = Some(f),
        // Not the responder's fault: the capture lacks the octets where the Reply would be.
        FrameLookup::Absent if start_missing(streams[1]) => {
            report.notes.push(
                "the capture misses the start of the responder's stream (no SYN, or its first segment lost), where the MPA Reply would be: FPDUs not decoded".into(),
            );
            return ConnectionReport::Iwarp(Box::new(report));
        }
        FrameLookup::Absent if streams[1].data.is_empty() => {
            report
                .notes
                .push("no MPA Reply captured: the connection never reached FPDU mode".into());
            return ConnectionReport::Iwarp(Box::new(report));
        }
        FrameLookup::Absent => {
            report.findings.push(Finding {
                kind: FindingKind::MalformedStartup,
                direction: Some(Direction::ResponderToInitiator),
                frame: first_frame_of(streams[1]),
                detail: "the responder's stream does not start with an MPA Reply".into(),
            });
            return ConnectionReport::Iwarp(Box::new(report));
        }
        FrameLookup::Incomplete => {
            report
                .notes
                .push(format!("{} the MPA Reply", cut_short(streams[1])));
            return ConnectionReport::Iwarp(Box::new(report));
        }
        FrameLookup::Malformed(e) => {
            report.findings.push(Finding {
                kind: FindingKind::MalformedStartup,
                direction: Some(Direction::ResponderToInitiator),
                frame: first_frame_of(streams[1]),
                detail: format!("MPA Reply: {e}"),
            });
            return ConnectionReport::Iwarp(Box::new(report));
        }
    }
    let Some(reply) = report.reply.clone() else {
        return ConnectionReport::Iwarp(Box::new(report));
    };
    if reply.reject {
        report
            .notes
            .push("the responder rejected the connection (R = 1)".into());
        return ConnectionReport::Iwarp(Box::new(report));
    }
    let mut no_common_rtr = false;
    match judge_reply(&report.request, &streams[1].data[..reply.len]) {
        Ok(Ok(_)) => {}
        // RFC 6581 §9.2: a responder that supports none of the offered RTR types flags one
        // it supports (MPA2-9.2-8); the initiator must then send a Terminate 2/0/7 in place
        // of the RTR (MPA2-9.2-10). The Reply conforms.
        Ok(Err(negotiation::NegotiationError::NoMatchingRtr)) => {
            no_common_rtr = true;
            report.notes.push(
                "peer-to-peer mode with no RTR type in common the initiator can send: it must send a Terminate 2/0/7 in place of an RTR (RFC 6581 9.2)".into(),
            );
        }
        Ok(Err(e)) => report.findings.push(Finding {
            kind: FindingKind::Negotiation,
            direction: Some(Direction::ResponderToInitiator),
            frame: reply.frame,
            detail: format!("the MPA Reply does not fit the Request: {e}"),
        }),
        // A check that cannot run says so.
        Err(why) => report.notes.push(format!(
            "the MPA Reply is not judged against the Request: {why}"
        )),
    }
    let req_enh = report.request.enhanced;
    let rep_enh = reply.enhanced;
    let peer_to_peer =
        matches!((req_enh, rep_enh), (Some(a), Some(b)) if a.peer_to_peer && b.peer_to_peer);
    let mut negotiated = Negotiated {
        crc: report.request.crc || reply.crc,
        markers: [reply.markers, report.request.markers],
        peer_to_peer,
        rtr_offered: req_enh.map_or(RtrTypes::EMPTY, |e| e.effective_rtr()),
        rtr_supported: rep_enh.map_or(RtrTypes::EMPTY, |e| e.effective_rtr()),
        rtr_sent: None,
        no_common_rtr,
    };
    let fpdu_streams = FpduStreams {
        start: [
            (
                report.request.len as u64,
                DeframerConfig {
                    crc: negotiated.crc,
                    markers: negotiated.markers[0],
                    ..Default::default()
                },
            ),
            (
                reply.len as u64,
                DeframerConfig {
                    crc: negotiated.crc,
                    markers: negotiated.markers[1],
                    ..Default::default()
                },
            ),
        ],
    };
    // Deframe and decode each direction, then check rules that span both in capture order.
    let mut per_dir: [Vec<DecodedSegment>; 2] = [Vec::new(), Vec::new()];
    for dir in Direction::BOTH {
        let stream = streams[dir.index()];
        let (start, config) = fpdu_streams.start[dir.index()];
        let bytes = stream.data.get(start as usize..).unwrap_or(&[]);
        let deframed = fpdu::deframe(config, &[bytes]);
        decode_direction(
            dir,
            stream,
            (start, config.markers),
            &deframed,
            &mut report,
            &mut per_dir[dir.index()],
        );
    }
    if peer_to_peer {
        // Not known when the initiator's first FPDU was lost (the first decoded one follows a
        // hole).
        negotiated.rtr_sent = per_dir[0]
            .first()
            .filter(|s| !s.after_hole)
            .and_then(|s| s.rtr);
    }
    report.negotiated = Some(negotiated);
    let [a, b] = per_dir;
    let mut all: Vec<DecodedSegment> = a.into_iter().chain(b).collect();
    all.sort_by_key(|s| (s.segment.frame, s.segment.direction, s.order));
    check_connection(&mut report, &all);
    report.segments = all.into_iter().map(|s| s.segment).collect();
    ConnectionReport::Iwarp(Box::new(report))
}

/// Replays the startup through proto's initiator machine, configured as the captured Request
/// says, and feeds it the captured Reply: the machine decides whether the Reply is one a
/// conforming initiator accepts (RFC 6581 §9-§10). `Err` says why it could not be judged,
/// e.g. a Request that cannot be expressed as an initiator configuration (Rev 0 or above 2).
fn judge_reply(
    request: &StartupFrame,
    reply: &[u8],
) -> Result<Result<negotiation::Negotiated, negotiation::NegotiationError>, String> {
    let enhanced = request.enhanced;
    let config = negotiation::Config {
        rev: request.rev,
        crc: request.crc,
        markers: request.markers,
        markers_supported: true,
        ird: enhanced.map_or(0, |e| e.ird),
        ord: enhanced.map_or(0, |e| e.ord),
        peer_to_peer: enhanced.is_some_and(|e| e.peer_to_peer),
        rtr: enhanced.map_or(RtrTypes::EMPTY, |e| e.rtr),
        private_data: Vec::new(),
        timeout: std::time::Duration::MAX,
    };
    // Time plays no part here; any instant will do.
    let mut machine = negotiation::Initiator::new(config, std::time::Instant::now())
        .map_err(|e| format!("proto's initiator cannot send this Request ({e})"))?;
    let taken = machine.handle_input(reply);
    if taken < reply.len() {
        machine.handle_close();
    }
    // The first event is the outcome: established, rejected or failed.
    match machine.poll_event() {
        Some(negotiation::Event::Established(n)) => Ok(Ok(n)),
        Some(negotiation::Event::Failed(f)) => Ok(Err(f.error)),
        Some(negotiation::Event::Rejected(_) | negotiation::Event::Request(_)) | None => {
            Err("proto's initiator reached no decision on it".into())
        }
    }
}

fn other(conn: &Connection, reason: &str, finding: Option<Finding>) -> OtherConnection {
    OtherConnection {
        client: conn.client,
        server: conn.server,
        to_server_octets: conn.to_server.data.len() as u64,
        to_client_octets: conn.to_client.data.len() as u64,
        reason: reason.to_string(),
        finding,
    }
}

/// Where the FPDU streams of an MPA connection start, for feeding the deframer directly
/// (the split tests do). `None` if the connection is not a complete, accepted MPA startup.
pub fn fpdu_streams(conn: &Connection) -> Option<(SocketAddr, FpduStreams)> {
    let (initiator, request) = match lookup_frame(&conn.to_server, FrameKind::Request) {
        FrameLookup::Found(f) => (conn.client, f),
        _ => match lookup_frame(&conn.to_client, FrameKind::Request) {
            FrameLookup::Found(f) => (conn.server, f),
            _ => return None,
        },
    };
    let streams = role_streams(conn, initiator);
    let FrameLookup::Found(reply) = lookup_frame(streams[1], FrameKind::Reply) else {
        return None;
    };
    if reply.reject {
        return None;
    }
    let crc = request.crc || reply.crc;
    Some((
        initiator,
        FpduStreams {
            start: [
                (
                    request.len as u64,
                    DeframerConfig {
                        crc,
                        markers: reply.markers,
                        ..Default::default()
                    },
                ),
                (
                    reply.len as u64,
                    DeframerConfig {
                        crc,
                        markers: request.markers,
                        ..Default::default()
                    },
                ),
            ],
        },
    ))
}

/// A segment plus facts only the checks need.
struct DecodedSegment {
    segment: Segment,
    /// Position within its direction, to keep stream order among same-frame segments.
    order: usize,
    /// The RTR this ULPDU is, if it is one.
    rtr: Option<RtrType>,
    /// DDP payload octets (everything after the DDP header, RDMAP header included): what
    /// MO and TO advance by.
    ddp_payload_len: u64,
    /// The first segment after an FPDU that could not be decoded (CRC error, malformed
    /// segment): sequence checks re-baseline here instead of blaming this segment.
    after_hole: bool,
}

/// `fpdu_mode`: where FPDU mode starts in `stream`, and whether the direction carries markers.
fn decode_direction(
    dir: Direction,
    stream: &Stream,
    fpdu_mode: (u64, bool),
    deframed: &Deframed,
    report: &mut IwarpConnection,
    out: &mut Vec<DecodedSegment>,
) {
    let (start, markers) = fpdu_mode;
    let d = &mut report.directions[dir.index()];
    d.fpdu_stream_octets = (stream.data.len() as u64).saturating_sub(start);
    d.trailing_octets = deframed.trailing_octets;
    let (alignment, unknown_from) = segment_alignment(stream, start, deframed);
    d.data_segments = alignment.aligned + alignment.unaligned;
    d.aligned_segments = alignment.aligned;
    d.alignment_unknown_segments = alignment.unknown;
    d.alignment_unknown_from = unknown_from;
    d.retransmitted_segments = alignment.retransmitted;
    let mut after_hole = false;
    for event in &deframed.events {
        let (offset, end) = (start + event.offset(), start + event.end());
        let chunk = stream.chunk_at(end.saturating_sub(1)).copied();
        let (frame, timestamp) = chunk.map_or((0, Duration::ZERO), |c| (c.frame, c.timestamp));
        // The FPDU's ULPDU_Length field: after the marker when one comes first (every
        // 512th octet of FPDU mode, mpa-08 §4.3), which then belongs to this FPDU.
        let at_marker = markers && event.offset() % 512 == 0;
        let seq = stream.seq_at(offset + if at_marker { 4 } else { 0 });
        match event {
            FpduEvent::Ulpdu { ulpdu, crc_ok, .. } => {
                let crc = match crc_ok {
                    None => CrcCheck::NotChecked,
                    Some(true) => CrcCheck::Good,
                    Some(false) => CrcCheck::Bad,
                };
                if crc == CrcCheck::Bad {
                    d.crc_errors += 1;
                    report.findings.push(Finding {
                        kind: FindingKind::CrcError,
                        direction: Some(dir),
                        frame,
                        detail: format!(
                            "FPDU at seq {seq} (ULPDU_Length {}): CRC32c does not match",
                            ulpdu.len()
                        ),
                    });
                }
                match decode_ulpdu(ulpdu) {
                    Ok(fields) => {
                        let segment = Segment {
                            direction: dir,
                            frame,
                            timestamp,
                            seq,
                            ulpdu_len: ulpdu.len(),
                            crc,
                            ..fields
                        };
                        let rtr = RtrType::classify_ulpdu(ulpdu);
                        let header = match segment.addressing {
                            Addressing::Tagged { .. } => wire::ddp::TAGGED_HEADER_LEN,
                            Addressing::Untagged { .. } => wire::ddp::UNTAGGED_HEADER_LEN,
                        };
                        let ddp_payload_len = ulpdu.len().saturating_sub(header) as u64;
                        out.push(DecodedSegment {
                            segment,
                            order: out.len(),
                            rtr,
                            ddp_payload_len,
                            after_hole: std::mem::take(&mut after_hole),
                        });
                    }
                    Err((kind, why)) => {
                        after_hole = true;
                        report.lost_fpdus.push((dir, frame));
                        report.findings.push(Finding {
                            kind,
                            direction: Some(dir),
                            frame,
                            detail: format!("FPDU at seq {seq}: {why}"),
                        });
                        if kind == FindingKind::MalformedSegment {
                            d.malformed_segments += 1;
                        }
                        d.undecoded_fpdus += 1;
                    }
                }
            }
            FpduEvent::Error { fault, detail, .. } => {
                let kind = &match fault {
                    Some(fpdu::DeframeFault::Crc { .. }) => FindingKind::CrcError,
                    Some(fpdu::DeframeFault::Marker { .. }) => FindingKind::MarkerError,
                    _ => FindingKind::MalformedSegment,
                };
                after_hole = true;
                report.lost_fpdus.push((dir, frame));
                match kind {
                    FindingKind::MarkerError => d.marker_errors += 1,
                    FindingKind::CrcError => {
                        d.crc_errors += 1;
                        d.undecoded_fpdus += 1;
                    }
                    _ => {}
                }
                report.findings.push(Finding {
                    kind: *kind,
                    direction: Some(dir),
                    frame,
                    detail: format!("at seq {seq}: {detail}"),
                });
            }
        }
    }
    if deframed.stopped || stream.gap.is_some() {
        let stop = match deframed.events.last() {
            Some(FpduEvent::Error { end, .. }) => stream.chunk_at(start + end.saturating_sub(1)),
            _ => stream.chunks.last(),
        };
        report.blind_after[dir.index()] = Some(stop.map_or(0, |c| c.frame));
    }
    if deframed.resumed > 0 {
        report.notes.push(format!(
            "{dir}: decoding resumed at the next FPDU after {} CRC error(s) (an endpoint would have stopped, MPA-8-12)",
            deframed.resumed
        ));
    }
    if deframed.stopped {
        report.notes.push(format!(
            "{dir}: deframing stopped after an unrecoverable error; the rest of the stream is not decoded"
        ));
    } else if deframed.trailing_octets > 0 {
        // After a resumption that never produced a valid FPDU, the "FPDU" still waiting for
        // its end is most likely a damaged length read as a huge one.
        let lost_chain = matches!(deframed.events.last(), Some(FpduEvent::Error { .. }));
        report.notes.push(if lost_chain {
            format!(
                "{dir}: after the CRC error the length chain could not be followed; the last {} octets are not decoded",
                deframed.trailing_octets
            )
        } else {
            format!(
                "{dir}: the stream ends {} octets into an FPDU (capture trimmed or connection cut)",
                deframed.trailing_octets
            )
        });
    }
}

/// Judges every FPDU-mode data segment of `stream` against the FPDU boundaries `deframed`
/// found from stream offset `start` on (the rules are at [`SegmentAlignment`]). Sorted
/// boundaries and a binary search per segment: O(n log n) for n segments and FPDUs.
fn segment_alignment(
    stream: &Stream,
    start: u64,
    deframed: &Deframed,
) -> (SegmentAlignment, Option<AlignmentUnknown>) {
    // FPDU boundaries as stream offsets, increasing: where FPDU mode starts and both ends
    // of every valid FPDU. A failed FPDU's start is the end of the one before it; its end
    // counts only if a valid FPDU follows (then it is that FPDU's start).
    let mut bounds: Vec<u64> = Vec::with_capacity(2 * deframed.events.len() + 1);
    bounds.push(start);
    for e in &deframed.events {
        if let FpduEvent::Ulpdu { offset, end, .. } = e {
            for b in [start + offset, start + end] {
                if bounds.last() != Some(&b) {
                    bounds.push(b);
                }
            }
        }
    }
    let last_bound = *bounds.last().unwrap_or(&start);
    let stream_end = stream.data.len() as u64;
    // Every offset up to `known` has a known boundary status.
    let (known, loss) = match deframed.events.last() {
        Some(FpduEvent::Error { .. }) if deframed.stopped => {
            (last_bound, Some(AlignmentLoss::DeframingStopped))
        }
        Some(FpduEvent::Error { .. }) => (last_bound, Some(AlignmentLoss::LengthChainLost)),
        _ => (
            stream_end,
            stream.gap.is_some().then_some(AlignmentLoss::CaptureGap),
        ),
    };
    let mut unknown_from = loss.map(|reason| (known, reason));
    let is_bound = |o: u64| bounds.binary_search(&o).is_ok();
    let mut counts = SegmentAlignment::default();
    let mut sent = Octets::default();
    for seg in &stream.segments {
        let repeat = sent.insert(seg.offset, seg.end());
        let (Ok(s), Ok(e)) = (u64::try_from(seg.offset), u64::try_from(seg.end())) else {
            continue; // octets before the capture's first: the startup at the latest
        };
        if s < start {
            continue; // the MPA Request or Reply
        }
        counts.retransmitted += u64::from(repeat);
        if s <= known && !is_bound(s) {
            counts.unaligned += 1; // starts inside a known FPDU
        } else if s > known || e > known {
            counts.unknown += 1;
        } else if seg.truncated {
            counts.unknown += 1;
            if unknown_from.is_none_or(|(o, _)| e < o) {
                unknown_from = Some((e, AlignmentLoss::SnapLength));
            }
        } else if is_bound(e) {
            counts.aligned += 1;
        } else {
            counts.unaligned += 1;
        }
    }
    let unknown_from = unknown_from.map(|(offset, reason)| AlignmentUnknown {
        seq: stream.seq_at(offset),
        reason,
    });
    (counts, unknown_from)
}

/// The stream octets the segments seen so far carried: disjoint, non-adjacent ranges by
/// start, so a query or an insertion costs O(log n) plus the ranges it merges.
#[derive(Default)]
struct Octets(BTreeMap<i64, i64>);

impl Octets {
    /// Adds `[start, end)`; returns whether any of it was already there.
    fn insert(&mut self, mut start: i64, mut end: i64) -> bool {
        if start >= end {
            return false;
        }
        // The one range that can overlap is the last one starting before `end`.
        let repeat = self
            .0
            .range(..end)
            .next_back()
            .is_some_and(|(_, &e)| e > start);
        // Merge every range that overlaps or touches `[start, end)`.
        while let Some((&s, &e)) = self.0.range(..=end).next_back() {
            if e < start {
                break;
            }
            self.0.remove(&s);
            start = start.min(s);
            end = end.max(e);
        }
        self.0.insert(start, end);
        repeat
    }
}

/// Decodes a ULPDU with proto's whole-segment decoder. Returns the fields of a [`Segment`]
/// (direction, frame, time, seq and CRC to be filled in by the caller), or the violation.
fn decode_ulpdu(ulpdu: &[u8]) -> Result<Segment, (FindingKind, String)> {
    let seg = wire::segment::Segment::parse(ulpdu).map_err(|e| {
        let kind = match e {
            SegmentError::DdpVersion { .. } => FindingKind::DdpVersion,
            SegmentError::RdmapVersion => FindingKind::RdmapVersion,
            SegmentError::UnknownOpcode(_)
            | SegmentError::BufferModel(_)
            | SegmentError::QueueNumber { .. } => FindingKind::UnexpectedOpcode,
            SegmentError::DdpTruncated
            | SegmentError::HeaderTruncated(_)
            | SegmentError::UnexpectedPayload(_) => FindingKind::MalformedSegment,
        };
        (kind, e.to_string())
    })?;
    let repr = seg.repr;
    // Messages without ULP payload must be whole in one segment (RDMAP-4.2-1). Whether the
    // RFC 7306 opcodes were agreed is a ULP matter a capture does not show: allow them.
    let agreed = RdmapConfig {
        atomics: true,
        immediate_data: true,
    };
    if let Err(e) = check_inbound(&repr, &agreed) {
        return Err((
            FindingKind::MalformedSegment,
            format!(
                "{}: {} ({})",
                repr.opcode,
                e.description(),
                e.terminate_code()
            ),
        ));
    }
    let addressing = match repr.buffer {
        DdpBuffer::Tagged { stag, to } => Addressing::Tagged { stag, to },
        DdpBuffer::Untagged {
            rsvd_ulp2,
            qn,
            msn,
            mo,
        } => Addressing::Untagged {
            qn,
            msn,
            mo,
            inv_stag: rsvd_ulp2,
        },
    };
    let (read_request, terminate) = match repr.header {
        RdmapHeader::ReadRequest(rr) => (Some(rr), None),
        RdmapHeader::Terminate(t) => (
            None,
            Some(TerminateInfo {
                code: t.code,
                flags: (t.m, t.ddp.is_some(), t.r_bit),
                ddp_segment_len: t.ddp.map(|(len, _)| len),
                report: TerminateReport::decode(&t),
            }),
        ),
        _ => (None, None),
    };
    Ok(Segment {
        direction: Direction::InitiatorToResponder,
        frame: 0,
        timestamp: Duration::ZERO,
        seq: 0,
        ulpdu_len: ulpdu.len(),
        opcode: Some(repr.opcode),
        opcode_raw: repr.opcode as u8,
        last: repr.last,
        addressing,
        // A Terminate's trailing octets are fill, not ULP payload.
        payload_len: if repr.opcode == Opcode::Terminate {
            0
        } else {
            seg.payload.len()
        },
        crc: CrcCheck::NotChecked,
        read_request,
        terminate,
    })
}

/// An untagged message being received on one queue.
#[derive(Clone, Copy)]
struct OpenUntagged {
    msn: u32,
    next_mo: u64,
}

/// An RDMA Write being received (Read Responses are followed through their plan instead).
#[derive(Clone, Copy)]
struct OpenTagged {
    stag: u32,
    next_to: u64,
}

/// A Read Request waiting for its Response: what proto says the Response must look like,
/// and how far it has come.
#[derive(Clone, Copy)]
struct PendingRead {
    plan: ReadResponsePlan,
    frame: u64,
    /// Response octets seen so far.
    sent: u32,
}

#[derive(Default)]
struct DirState {
    next_msn: HashMap<u32, u32>,
    open_untagged: HashMap<u32, OpenUntagged>,
    open_tagged: Option<OpenTagged>,
    /// Read Requests this direction sent, oldest first.
    reads_sent: VecDeque<PendingRead>,
    /// The receiver's inbound read queue for those requests, when IRD was negotiated.
    ird: Option<InboundReadQueue>,
    /// Requests outstanding beyond what the queue admitted (each one reported): the queue
    /// plus these is every outstanding request, so a response first retires one of these.
    ird_over: u32,
    /// Atomic Requests this direction sent that no Atomic Response answered yet.
    atomics_sent: u32,
    /// After an undecodable FPDU: the queues whose next segment has re-baselined the MSN.
    unjudged: Option<HashSet<u32>>,
    terminated: Option<u64>,
    first_frame: Option<u64>,
}

/// Follows a Read Response segment (sent in `dir`) through the plan of the oldest
/// outstanding Read Request from the other direction: proto's [`ReadResponsePlan::segment`]
/// gives the STag, TO and L each segment must carry (RDMAP-4.4-2, RDMAP-5.5-13,
/// RDMAP-5.2.2-5, DDP-5.2-8). Nothing is judged while the capture no longer shows the
/// requests (`peer_blind`).
#[allow(clippy::too_many_arguments)]
fn check_read_response(
    state: &mut [DirState; 2],
    dir: Direction,
    s: &Segment,
    stag: u32,
    to: u64,
    len: u64,
    peer_blind: bool,
    find: &mut impl FnMut(FindingKind, String),
) {
    let requester = &mut state[dir.reverse().index()];
    let Some(pending) = requester.reads_sent.front_mut() else {
        if !peer_blind {
            find(
                FindingKind::ReadResponse,
                "Read Response with no Read Request outstanding".into(),
            );
        }
        return;
    };
    let len = u32::try_from(len).unwrap_or(u32::MAX);
    let expected = pending.plan.segment(pending.sent, len);
    if let (
        DdpBuffer::Tagged {
            stag: e_stag,
            to: e_to,
        },
        false,
    ) = (expected.buffer, peer_blind)
    {
        if (e_stag, e_to, expected.last) != (stag, to, s.last) {
            find(
                FindingKind::ReadResponse,
                format!(
                    "Read Response segment STag {stag:#010x} TO {to:#x} L={} after {} of {} octets; the Read Request of frame {} calls for STag {e_stag:#010x} TO {e_to:#x} L={}",
                    u8::from(s.last),
                    pending.sent,
                    pending.plan.len,
                    pending.frame,
                    u8::from(expected.last)
                ),
            );
        }
    }
    pending.sent = pending.sent.saturating_add(len);
    if s.last {
        requester.reads_sent.pop_front();
        retire_request(requester);
    }
}

/// Counts a Read or Atomic Request `st`'s direction sent against the receiver's IRD
/// (RDMAP-6.1-5, EXT-5.2-1), reporting one too many unless the responses' direction is
/// blind. One the queue refuses is outstanding all the same until its response comes:
/// without counting it, the next excess would go unnoticed.
fn admit_request(st: &mut DirState, peer_blind: bool, find: &mut impl FnMut(FindingKind, String)) {
    let Some(queue) = st.ird.as_mut() else {
        return;
    };
    if queue.admit().is_err() {
        st.ird_over += 1;
        if !peer_blind {
            find(
                FindingKind::IrdExceeded,
                format!(
                    "{} Read/Atomic Requests outstanding, the peer's IRD is {}",
                    queue.outstanding() + st.ird_over,
                    queue.ird()
                ),
            );
        }
    }
}

/// Releases the IRD slot of a request `requester` sent, once its last response octet came.
fn retire_request(requester: &mut DirState) {
    if requester.ird_over > 0 {
        requester.ird_over -= 1;
    } else if let Some(queue) = requester.ird.as_mut() {
        queue.retire();
    }
}

/// The IRD the receiver of Read Requests from `dir` announced, if negotiation applies.
fn read_limit(report: &IwarpConnection, dir: Direction) -> Option<u16> {
    let frame = match dir {
        Direction::InitiatorToResponder => report.reply.as_ref()?,
        Direction::ResponderToInitiator => &report.request,
    };
    let ird = frame.enhanced?.ird;
    (ird != IRD_ORD_NO_NEGOTIATION).then_some(ird)
}

fn check_connection(report: &mut IwarpConnection, segments: &[DecodedSegment]) {
    let mut state: [DirState; 2] = Default::default();
    for dir in Direction::BOTH {
        state[dir.index()].ird =
            read_limit(report, dir).map(|ird| InboundReadQueue::new(u32::from(ird)));
    }
    let negotiated = report.negotiated.clone();
    let mut findings = Vec::new();
    let mut notes = Vec::new();
    let blind = report.blind_after;
    // Once an FPDU is lost to a CRC error or a malformed segment, it may have been a Read
    // Request or part of a Read Response: pairing reads is not judged any more.
    let first_loss = report.lost_fpdus.iter().map(|&(_, f)| f).min();
    // The frame of each direction's first FPDU, decoded or lost; and whether the capture
    // shows where the initiator's first FPDU is (not when a gap came before any).
    let first_fpdu = Direction::BOTH.map(|dir| {
        let decoded = segments.iter().find(|d| d.segment.direction == dir);
        let lost = report.lost_fpdus.iter().filter(|(d, _)| *d == dir);
        decoded
            .map(|d| d.segment.frame)
            .into_iter()
            .chain(lost.map(|&(_, f)| f))
            .min()
    });
    let initiator_known = first_fpdu[0].is_some() || blind[0].is_none();
    for ds in segments {
        let s = &ds.segment;
        let dir = s.direction;
        let i = dir.index();
        if ds.after_hole {
            let st = &mut state[i];
            st.unjudged = Some(HashSet::new());
            st.open_untagged.clear();
            st.open_tagged = None;
        }
        let reads_unreliable = first_loss.is_some_and(|f| s.frame >= f);
        // Whether the capture still shows the other direction at this point.
        let peer_blind =
            reads_unreliable || blind[dir.reverse().index()].is_some_and(|f| s.frame > f);
        let mut find = |kind: FindingKind, detail: String| {
            findings.push(Finding {
                kind,
                direction: Some(dir),
                frame: s.frame,
                detail,
            });
        };
        // Statistics.
        let stats = &mut report.directions[i];
        match s.opcode {
            Some(op) => {
                let e = stats.opcodes.entry(op).or_default();
                e.segments += 1;
                e.messages += u64::from(s.last);
                e.payload_octets += s.payload_len as u64;
            }
            None => stats.unknown_opcode_segments += 1,
        }
        if let Some(t) = s.terminate {
            stats.terminates.push((s.frame, t));
        }
        // First FPDU rules: the RTR in peer-to-peer mode, fencing (MPA-7.1.2 rule 4).
        if state[i].first_frame.is_none() {
            state[i].first_frame = Some(s.frame);
            match dir {
                Direction::InitiatorToResponder => {
                    let p2p = negotiated.as_ref().filter(|n| n.peer_to_peer);
                    if let (Some(_), true) = (p2p, ds.after_hole) {
                        // The initiator's first FPDU was lost (CRC error, malformed): it
                        // may have been the RTR, the one decoded first is not its first.
                        notes.push(format!(
                            "I>R: the initiator's first FPDU was not decoded, so whether it was an agreed RTR is not judged (first decoded: frame {})",
                            s.frame
                        ));
                    } else if let Some(n) = p2p {
                        let agreed = n.rtr_offered.intersection(n.rtr_supported);
                        // Without an RTR in common, the Terminate 2/0/7 MPA2-9.2-10 calls
                        // for comes in its place.
                        let no_rtr_term = n.no_common_rtr
                            && s.terminate.is_some_and(|t| {
                                t.code == MpaError::NoMatchingRtr.terminate_code()
                            });
                        let ok = no_rtr_term
                            || ds
                                .rtr
                                .is_some_and(|r| agreed.is_empty() || agreed.contains(r));
                        if !ok {
                            find(
                                FindingKind::Rtr,
                                format!(
                                    "peer-to-peer mode: the initiator's first FPDU is not an agreed RTR (offered {:?}, supported {:?})",
                                    n.rtr_offered, n.rtr_supported
                                ),
                            );
                        }
                    }
                }
                Direction::ResponderToInitiator => {
                    // MPA-7.1.2-16 (mpa-08 §7.1.2 rule 4) wants the responder to wait for
                    // the initiator's first FPDU. Linux siw does not wait outside peer-to-peer
                    // mode (e.g. ib_write_lat, ucmatose), so this is a note, not a violation.
                    // Its first FPDU is the first decoded one or an earlier lost one.
                    let r = first_fpdu[1].unwrap_or(s.frame);
                    if initiator_known && first_fpdu[0].is_none_or(|f| r < f) {
                        notes.push(format!(
                            "R>I: the responder's first FPDU (frame {r}) precedes the initiator's first FPDU (MPA fencing, mpa-08 7.1.2 rule 4, not enforced by Linux siw)"
                        ));
                    }
                }
            }
        }
        if let Some(t) = state[i].terminated {
            find(
                FindingKind::AfterTerminate,
                format!("FPDU after the Terminate in frame {t}"),
            );
        }
        if s.terminate.is_some() {
            state[i].terminated = Some(s.frame);
        }
        // Versions, opcode, buffer model and QN were checked by proto's segment decoder.
        let Some(op) = s.opcode else {
            continue;
        };
        match s.addressing {
            Addressing::Untagged { qn, msn, mo, .. } => {
                if op.is_tagged() || op.qn() != Some(qn) {
                    find(
                        FindingKind::UnexpectedOpcode,
                        format!("{} on untagged queue {qn}", op.name()),
                    );
                    continue;
                }
                let st = &mut state[i];
                // The first segment on a queue after a lost FPDU sets the new baseline.
                let rebaseline = st.unjudged.as_mut().is_some_and(|seen| seen.insert(qn));
                match st.open_untagged.get(&qn).copied() {
                    _ if rebaseline => {}
                    Some(open) => {
                        if msn != open.msn {
                            find(
                                FindingKind::MsnSequence,
                                format!(
                                    "QN {qn}: MSN {msn} while message MSN {} is incomplete",
                                    open.msn
                                ),
                            );
                        } else if u64::from(mo) != open.next_mo {
                            find(
                                FindingKind::MessageOffset,
                                format!("QN {qn} MSN {msn}: MO {mo}, expected {}", open.next_mo),
                            );
                        }
                    }
                    None => {
                        let expected = st.next_msn.get(&qn).copied().unwrap_or(1);
                        if msn != expected {
                            find(
                                FindingKind::MsnSequence,
                                format!("QN {qn}: MSN {msn}, expected {expected}"),
                            );
                        }
                        if mo != 0 {
                            find(
                                FindingKind::MessageOffset,
                                format!("QN {qn} MSN {msn}: first segment has MO {mo}"),
                            );
                        }
                    }
                }
                // Continue from what the segment says, so one error is reported once.
                let data_len = ds.ddp_payload_len;
                if s.last {
                    st.open_untagged.remove(&qn);
                    st.next_msn.insert(qn, msn.wrapping_add(1));
                } else {
                    st.open_untagged.insert(
                        qn,
                        OpenUntagged {
                            msn,
                            next_mo: u64::from(mo) + data_len,
                        },
                    );
                }
                if let Some(rr) = s.read_request {
                    // What the responder must send back (RDMAP-4.4-2, RDMAP-5.2.1-10); the
                    // source STag is not checked here, as an observer knows no STag table.
                    let plan = ReadResponsePlan {
                        sink_stag: rr.sink_stag,
                        sink_to: rr.sink_to,
                        src_stag: rr.src_stag,
                        src_to: rr.src_to,
                        len: rr.read_size,
                    };
                    st.reads_sent.push_back(PendingRead {
                        plan,
                        frame: s.frame,
                        sent: 0,
                    });
                    // Count it against the receiver's IRD (RDMAP-6.1-5).
                    admit_request(st, peer_blind, &mut find);
                }
                // Atomic Requests share the Read Requests' queue and so their IRD
                // (EXT-5.2-1); each Atomic Response retires one (EXT-5.2.2-6: in order).
                if op == Opcode::AtomicRequest {
                    st.atomics_sent += 1;
                    admit_request(st, peer_blind, &mut find);
                } else if op == Opcode::AtomicResponse {
                    let requester = &mut state[dir.reverse().index()];
                    if requester.atomics_sent > 0 {
                        requester.atomics_sent -= 1;
                        retire_request(requester);
                    }
                }
            }
            Addressing::Tagged { stag, to } => {
                let len = ds.ddp_payload_len;
                if op == Opcode::ReadResponse {
                    check_read_response(&mut state, dir, s, stag, to, len, peer_blind, &mut find);
                    continue;
                }
                let st = &mut state[i];
                match st.open_tagged {
                    Some(open) if open.stag != stag => find(
                        FindingKind::TaggedOffset,
                        format!(
                            "{} STag {stag:#010x} while STag {:#010x} is incomplete",
                            op.name(),
                            open.stag
                        ),
                    ),
                    Some(open) if to != open.next_to => find(
                        FindingKind::TaggedOffset,
                        format!(
                            "STag {stag:#010x}: TO {to:#x}, expected {:#x}",
                            open.next_to
                        ),
                    ),
                    _ => {}
                }
                st.open_tagged = (!s.last).then_some(OpenTagged {
                    stag,
                    next_to: to.wrapping_add(len),
                });
            }
        }
    }
    // What the end of the capture leaves open: informative only (a trimmed capture or an
    // aborted connection), never a violation.
    for dir in Direction::BOTH {
        let st = &state[dir.index()];
        if st.open_tagged.is_some() || !st.open_untagged.is_empty() {
            notes.push(format!("{dir}: the capture ends inside a message"));
        }
        if !st.reads_sent.is_empty() {
            let why = match blind[dir.reverse().index()] {
                Some(f) => format!(" (the responses' direction is not decoded after frame {f})"),
                None => String::new(),
            };
            notes.push(format!(
                "{dir}: {} Read Request(s) unanswered when the capture ends{why}",
                st.reads_sent.len()
            ));
        }
    }
    report.findings.extend(findings);
    report.findings.sort_by_key(|f| f.frame);
    report.notes.extend(notes);
}

#[cfg(test)]
mod tests {
    use super::Octets;

    /// The record of octets sent that tells retransmissions from new data: overlaps are
    /// repeats, adjacent or disjoint ranges are not, and merged ranges still answer for
    /// every octet they cover.
    #[test]
    fn octets_tell_repeats_from_new_data() {
        let mut o = Octets::default();
        assert!(!o.insert(10, 20));
        assert!(!o.insert(20, 30)); // adjacent: new
        assert!(!o.insert(40, 50)); // ahead of a hole
        assert!(!o.insert(30, 40)); // fills it exactly
        assert_eq!(o.0.len(), 1);
        assert!(o.insert(49, 60)); // one octet again
        assert!(o.insert(-5, 11)); // reaches into the first range
        assert!(!o.insert(-10, -5));
        assert!(o.insert(0, 1));
        assert!(!o.insert(7, 7)); // empty
        assert_eq!(o.0.iter().collect::<Vec<_>>(), [(&-10, &60)]);
        assert!(!o.insert(100, 200));
        assert!(o.insert(150, 160)); // inside a later range
        assert!(!o.insert(60, 100));
        assert_eq!(o.0.iter().collect::<Vec<_>>(), [(&-10, &200)]);
    }
}
