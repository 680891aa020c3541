//! MPA startup negotiation (mpa-08 §7.1, RFC 6581), sans-IO: one machine per role.
//!
//! [`Initiator`] sends the MPA Request and waits for the Reply; [`Responder`] waits for the
//! Request, hands it to its ULP ([`Event::Request`]) and answers with [`Responder::accept`] or
//! [`Responder::reject`]. Neither touches a socket or a clock: bytes go in through
//! `handle_input`, out through `poll_transmit`, results come out of `poll_event`, and the
//! startup timeout (mpa-08 §7.1.2 rules 8 and 10) is driven by `poll_timeout` /
//! `handle_timeout` with the caller's [`Instant`].
//!
//! # How an engine drives the machines
//!
//! Initiator:
//! 1. `Initiator::new(config, now)` queues the Request. Copy it out with
//!    [`Initiator::poll_transmit`] into the TCP send buffer (partial copies are fine; call
//!    again until it returns 0).
//! 2. Feed every received stream octet to [`Initiator::handle_input`]; it returns how many it
//!    took. It never takes an octet after the Reply: whatever is left over is FPDU data for the
//!    deframer and must be kept.
//! 3. Arm a timer for [`Initiator::poll_timeout`] and call [`Initiator::handle_timeout`] when
//!    it fires; on a peer FIN/RST before the outcome call [`Initiator::handle_close`]. An
//!    initiator built before its TCP connection was established counts from its
//!    establishment through [`Initiator::restart_timer`] (then arm the new deadline).
//! 4. Drain [`Initiator::poll_event`]. [`Event::Established`] carries the [`Negotiated`]
//!    parameters: switch both directions to FPDU mode at [`Negotiated::tx_fpdu_offset`] /
//!    [`Negotiated::rx_fpdu_offset`] (stream offsets counted from the first octet of the
//!    Request / Reply) with the CRC and per-direction marker settings. If
//!    [`Negotiated::rtr`] is `Some`, the first FPDU must be that RTR (its ULPDU is
//!    [`RtrType::ulpdu`]); call [`Initiator::handle_rtr_sent`] once it is queued. Send no
//!    other FPDU before [`Initiator::can_send_fpdus`] is true (MPA2-5-1).
//!    [`Event::Rejected`] leaves TCP open for the ULP (MPA-7.1.2-14). [`Event::Failed`]:
//!    if [`Failure::terminate`] is `Some`, send a Terminate FPDU with the
//!    [`NegotiationError::mpa_error`] code framed with those parameters, then close TCP;
//!    otherwise close TCP at once.
//!
//! Responder:
//! 1. `Responder::new(config, now)`; feed received octets to [`Responder::handle_input`]
//!    (it stops right after the Request and leaves the rest unconsumed), honour
//!    [`Responder::poll_timeout`] and [`Responder::handle_close`] as above.
//! 2. [`Event::Request`] hands the peer's parameters and private data to the ULP, which calls
//!    [`Responder::accept`] or [`Responder::reject`] (optionally after
//!    [`Responder::set_ird_ord`]). A Request that asks for markers we cannot send is
//!    rejected without asking the ULP ([`RejectReason::MarkersUnsupported`]).
//! 3. Copy the Reply out with [`Responder::poll_transmit`]. After `accept`,
//!    [`Event::Established`] arrives at once: the receive direction is in FPDU mode from
//!    [`Negotiated::rx_fpdu_offset`] (the octet after the Request).
//! 4. MPA fencing (MPA-7.1.2-16): send no FPDU and no marker until
//!    [`Responder::can_send_fpdus`]. Pass the first ULPDU that the deframer accepted (CRC and
//!    markers good) to [`Responder::handle_first_ulpdu`]: `Ok(Some(rtr))` means it was the
//!    peer-to-peer RTR (consume it; a Read RTR is answered with a zero-length Read Response),
//!    `Ok(None)` means deliver it to DDP as usual, `Err(e)` means send a Terminate with
//!    `e.mpa_error()` and close. Either `Ok` lifts the fence.
//!
//! Both RTR messages that use untagged queues take MSN 1 of their queue (WIRE-FORMATS §6.4),
//! so the initiator's next message on that queue carries MSN 2 and the responder's DDP must
//! expect MSN 2 there. A Read RTR holds one of the initiator's ORD credits until the
//! responder's zero-length Read Response comes back; that Response completes no ULP
//! request. What a Send RTR does to the responder's receive queue is left open by RFC 6581
//! (WIRE-FORMATS §6.4); the engine decides.
//!
//! Choices made where the specifications leave room are described at the items that make
//! them: [`Initiator::new`] (ORD 1 for a Read RTR offer), `Responder::accept` (Rev and C of
//! the Reply, RTR marking, IRD raise), [`NegotiationError`] (codes for each failure).

use std::time::{Duration, Instant};

use crate::error::MpaError;
use crate::wire::mpa::{
    self as wire, EnhancedData, Frame, FrameError, FrameKind, FrameRepr, RtrType, RtrTypes,
    IRD_ORD_NO_NEGOTIATION,
};

/// Which side of the startup an endpoint plays (mpa-08 §7.1: the side that sends the
/// Request, whoever sent the TCP SYN).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Sends the Request.
    Initiator,
    /// Answers with the Reply.
    Responder,
}

/// Local settings of one endpoint for one connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// MPA revision we send: 1 (RFC 5044 frames) or 2 (RFC 6581 enhanced frames with IRD/ORD;
    /// an initiator at Rev 2 always sends S = 1, MPA2-6-2). A responder at 2 still accepts
    /// Rev 1 Requests (MPA2-6-4); a responder at 1 closes on an enhanced Request (MPA2-10-7).
    pub rev: u8,
    /// C: we want CRCs. CRCs are used if either side sets C (MPA-7.1.1-12). Default on.
    pub crc: bool,
    /// M: we require the peer to put markers in the FPDUs it sends to us (MPA-7.1.1-7/8).
    pub markers: bool,
    /// Whether we can insert markers when the peer requires them (MPA-4.3-1). If not, a
    /// responder rejects such a Request and an initiator fails on such a Reply.
    pub markers_supported: bool,
    /// Our IRD (inbound Read queue depth we can serve), at most 0x3FFF; 0x3FFF means "do
    /// not negotiate, the ULP handles it" (RFC 6581 §9.1).
    pub ird: u16,
    /// Our ORD (outbound Reads we want in flight), at most 0x3FFF; 0x3FFF as for `ird`.
    pub ord: u16,
    /// Initiator only: request the peer-to-peer model with an RTR (A = 1; needs Rev 2).
    pub peer_to_peer: bool,
    /// RTR types: for an initiator, those it can send (offered when `peer_to_peer`); for a
    /// responder, those it can accept (at Rev 2 at least one it can mark: not only Read at
    /// IRD 0, MPA2-9.2-3, MPA2-9.2-8).
    pub rtr: RtrTypes,
    /// Initiator only: ULP private data for the Request (at most 512 octets, 508 at Rev 2).
    /// A responder passes its private data to `accept`/`reject`.
    pub private_data: Vec<u8>,
    /// How long to wait for the peer's whole startup frame (mpa-08 §7.1.2 rules 8, 10).
    pub timeout: Duration,
}

impl Default for Config {
    /// Rev 2, CRC on, no markers required but able to send them, IRD = ORD = 16,
    /// client-server, Write and Read RTR, no private data, 10 s timeout (as siw's MPA timer).
    fn default() -> Self {
        Config {
            rev: 2,
            crc: true,
            markers: false,
            markers_supported: true,
            ird: 16,
            ord: 16,
            peer_to_peer: false,
            rtr: RtrTypes::WRITE.union(RtrTypes::READ),
            private_data: Vec::new(),
            timeout: Duration::from_secs(10),
        }
    }
}

/// A local API misuse: a configuration the protocol does not allow, or a call in the wrong
/// phase. Never caused by network input.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum UsageError {
    /// `rev` is neither 1 nor 2.
    #[error("MPA revision must be 1 or 2")]
    UnsupportedRevision,
    /// Private data longer than 512 octets (508 next to the enhanced data; MPA2-7-4).
    #[error("private data longer than the frame allows")]
    PrivateDataTooLong,
    /// IRD or ORD above 0x3FFF.
    #[error("IRD/ORD above 0x3FFF")]
    IrdOrdOutOfRange,
    /// Peer-to-peer needs Rev 2 (MPA2-6-2).
    #[error("peer-to-peer needs MPA revision 2")]
    PeerToPeerNeedsRev2,
    /// Peer-to-peer initiator offering no RTR type, or Rev 2 responder able to mark none
    /// (accepting none, or only the Read RTR at IRD 0; MPA2-9.2-2, MPA2-9.2-3, MPA2-9.2-8).
    #[error("no RTR type configured")]
    NoRtrType,
    /// `accept`/`reject`/`set_ird_ord` called when no Request is waiting for a decision.
    #[error("no MPA Request is waiting for a decision")]
    NotAwaitingDecision,
}

impl Config {
    fn validate(&self, role: Role) -> Result<(), UsageError> {
        if !(1..=2).contains(&self.rev) {
            return Err(UsageError::UnsupportedRevision);
        }
        if self.ird > wire::IRD_ORD_MASK || self.ord > wire::IRD_ORD_MASK {
            return Err(UsageError::IrdOrdOutOfRange);
        }
        match role {
            Role::Initiator => {
                if self.peer_to_peer && self.rev < 2 {
                    return Err(UsageError::PeerToPeerNeedsRev2);
                }
                if self.peer_to_peer && self.rtr.is_empty() {
                    return Err(UsageError::NoRtrType);
                }
                check_pd_len(self.private_data.len(), self.rev >= 2)?;
            }
            Role::Responder => {
                if self.rev >= 2 && markable_rtr(self.rtr, self.ird).is_empty() {
                    return Err(UsageError::NoRtrType);
                }
            }
        }
        Ok(())
    }
}

/// The RTR types a responder accepting `rtr` at IRD `ird` can mark in its Reply: a Read RTR
/// needs an IRD of at least 1 (MPA2-9.1-3). At Rev 2 it must be able to mark one, whatever
/// the initiator offers (MPA2-9.2-3, MPA2-9.2-8).
fn markable_rtr(rtr: RtrTypes, ird: u16) -> RtrTypes {
    if ird == 0 {
        RtrTypes::from_iter(rtr.iter().filter(|t| *t != RtrType::Read))
    } else {
        rtr
    }
}

fn check_pd_len(len: usize, enhanced: bool) -> Result<(), UsageError> {
    let max = if enhanced {
        wire::MAX_ULP_PRIVATE_DATA_LEN_ENHANCED
    } else {
        wire::MAX_PRIVATE_DATA_LEN
    };
    if len > max {
        Err(UsageError::PrivateDataTooLong)
    } else {
        Ok(())
    }
}

/// Why the startup failed. Each maps to an MPA Terminate code ([`NegotiationError::mpa_error`]);
/// [`NegotiationError::sends_terminate`] says whether a Terminate goes to the peer or TCP is
/// simply closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum NegotiationError {
    /// The peer's frame is malformed: bad key, PD_Length above 512, S = 1 without enhanced
    /// data, or the stream ended inside it (MPA-7.1.2-4, MPA-7.1.2-12, MPA-7.1.2-26).
    #[error("{e} ({me})", e = .0, me = self.mpa_error())]
    Frame(FrameError),
    /// An initiator received a Request: both ends were started as initiator (MPA-7.1.2-20).
    #[error("MPA Request received by an initiator ({me})", me = self.mpa_error())]
    InitiatorInitiator,
    /// A responder received a Reply instead of a Request.
    #[error("MPA Reply received by a responder ({me})", me = self.mpa_error())]
    UnexpectedReply,
    /// The peer's Rev is one we cannot work with: 0 (RDMA Consortium, DDP/RDMAP version 0)
    /// or above 2 (MPA-7.1.1-19).
    #[error("unsupported MPA revision {r} ({me})", r = .0, me = self.mpa_error())]
    UnsupportedRevision(u8),
    /// A responder configured for Rev 1 received an enhanced (S = 1) Request (MPA2-10-7).
    #[error("enhanced MPA Request to a Rev 1 responder ({me})", me = self.mpa_error())]
    EnhancedNotSupported,
    /// The Reply's enhanced format does not match the Request's (MPA2-10-5, MPA2-10-6).
    #[error("MPA Reply format does not match the Request ({me})", me = self.mpa_error())]
    EnhancedMismatch,
    /// The Reply requires markers from us and we cannot insert them (an initiator cannot
    /// reject; it closes. Code 5, but no Terminate: it could not be framed).
    #[error("peer requires markers we cannot send ({me})", me = self.mpa_error())]
    MarkersUnsupported,
    /// The Reply did not echo the A flag (MPA2-9.2-4, MPA2-9.2-13): no common connection
    /// model (code 7).
    #[error("peer did not echo the connection model (A flag) ({me})", me = self.mpa_error())]
    ModelMismatch,
    /// No RTR type both sides support, or the only common one cannot work (MPA2-9.2-10, code 7).
    #[error("no matching RTR option ({me})", me = self.mpa_error())]
    NoMatchingRtr,
    /// The responder's ORD exceeds the IRD we can provide (MPA2-9.1-8, code 6).
    #[error("insufficient IRD for the responder ORD ({me})", me = self.mpa_error())]
    InsufficientIrd,
    /// The responder's first ULPDU is not one of the RTR types it marked (MPA2-5-1, code 7).
    #[error("first FPDU is not a negotiated RTR ({me})", me = self.mpa_error())]
    InvalidRtr,
    /// The peer's startup frame did not arrive in time (mpa-08 §7.1.2 rules 8 and 10).
    #[error("MPA startup timed out ({me})", me = self.mpa_error())]
    Timeout,
    /// TCP was closed or reset before the startup completed.
    #[error("TCP closed during MPA startup ({me})", me = self.mpa_error())]
    PeerClosed,
}

impl NegotiationError {
    /// The MPA error (Layer 2, EType 0) this stands for.
    pub const fn mpa_error(self) -> MpaError {
        use NegotiationError::*;
        match self {
            Frame(_)
            | InitiatorInitiator
            | UnexpectedReply
            | UnsupportedRevision(_)
            | EnhancedNotSupported
            | EnhancedMismatch => MpaError::InvalidStartupFrame,
            MarkersUnsupported => MpaError::LocalCatastrophic,
            ModelMismatch | NoMatchingRtr | InvalidRtr => MpaError::NoMatchingRtr,
            InsufficientIrd => MpaError::InsufficientIrd,
            Timeout | PeerClosed => MpaError::TcpLost,
        }
    }

    /// Whether a Terminate FPDU goes to the peer before TCP is closed. True exactly for the
    /// RFC 6581 §9 failures after a valid Reply (codes 6 and 7), when our send direction is
    /// in FPDU mode; a malformed or missing frame closes TCP at once (mpa-08 §7.1.1, §8).
    pub const fn sends_terminate(self) -> bool {
        use NegotiationError::*;
        matches!(
            self,
            ModelMismatch | NoMatchingRtr | InsufficientIrd | InvalidRtr
        )
    }
}

impl From<FrameError> for NegotiationError {
    fn from(e: FrameError) -> Self {
        NegotiationError::Frame(e)
    }
}

/// What the peer's startup frame said, for the ULP (MPA2-9.1-1, MPA2-9.1-10, MPA2-7-7).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerInfo {
    /// The peer's Rev.
    pub rev: u8,
    /// The peer's C flag.
    pub crc: bool,
    /// The peer's M flag (it requires markers from us).
    pub markers: bool,
    /// The peer's enhanced data (IRD, ORD, A, RTR flags), if its frame was enhanced.
    pub enhanced: Option<EnhancedData>,
    /// The peer's ULP private data (without the enhanced data).
    pub private_data: Vec<u8>,
}

impl PeerInfo {
    fn from_repr(repr: &FrameRepr<'_>) -> PeerInfo {
        PeerInfo {
            rev: repr.rev,
            crc: repr.crc,
            markers: repr.markers,
            enhanced: repr.enhanced,
            private_data: repr.private_data.to_vec(),
        }
    }

    /// The peer's IRD, if it sent enhanced data.
    pub fn ird(&self) -> Option<u16> {
        self.enhanced.map(|e| e.ird)
    }

    /// The peer's ORD, if it sent enhanced data.
    pub fn ord(&self) -> Option<u16> {
        self.enhanced.map(|e| e.ord)
    }
}

/// The outcome of a successful startup: everything the framer, deframer and RDMAP need.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Negotiated {
    /// Our role.
    pub role: Role,
    /// The Rev we sent.
    pub rev_sent: u8,
    /// The Rev the peer sent.
    pub rev_received: u8,
    /// Whether RFC 6581 enhanced frames were exchanged (IRD/ORD negotiated).
    pub enhanced: bool,
    /// CRCs are generated and checked in both directions (C in either frame,
    /// MPA-7.1.1-12/13); otherwise the CRC field is sent but never checked (MPA-7.1.1-11).
    pub crc: bool,
    /// We must insert markers in what we send (the peer's M).
    pub markers_tx: bool,
    /// The peer inserts markers in what it sends (our M).
    pub markers_rx: bool,
    /// Our IRD after negotiation (0x3FFF: left to the ULP). Without enhanced frames: as
    /// configured (MPA2-10-8).
    pub local_ird: u16,
    /// Our ORD after negotiation (0x3FFF: left to the ULP). Without enhanced frames: as
    /// configured.
    pub local_ord: u16,
    /// The IRD the peer sent, if enhanced.
    pub peer_ird: Option<u16>,
    /// The ORD the peer sent, if enhanced.
    pub peer_ord: Option<u16>,
    /// Peer-to-peer model (A = 1 in both frames).
    pub peer_to_peer: bool,
    /// Initiator: the RTR it must send as its first FPDU (MPA2-9.2-9). Responder: `None`.
    pub rtr: Option<RtrType>,
    /// Responder: the RTR types it marked and accepts as the first ULPDU. Initiator: empty.
    pub rtr_accepted: RtrTypes,
    /// The peer's ULP private data.
    pub peer_private_data: Vec<u8>,
    /// Offset in our send stream (from the first octet of our frame) where FPDU mode starts:
    /// the octet after our frame. With `markers_tx` the first marker goes there
    /// (mpa-08 §7.1.2 rule 7).
    pub tx_fpdu_offset: u64,
    /// Offset in the received stream (from the first octet of the peer's frame) where FPDU
    /// mode starts: the octet after the peer's frame.
    pub rx_fpdu_offset: u64,
}

/// Why a startup ended in a rejection (TCP left open for the ULP, MPA-7.1.2-7/14).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// Initiator: the Reply had R = 1.
    ByPeer,
    /// Responder: our ULP called [`Responder::reject`].
    ByUlp,
    /// Responder: the Request required markers we cannot send; rejected without the ULP.
    MarkersUnsupported,
}

/// A rejected startup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// Why.
    pub reason: RejectReason,
    /// The peer's frame: its IRD/ORD and private data (MPA2-9.1-10).
    pub peer: PeerInfo,
}

/// A failed startup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// What went wrong.
    pub error: NegotiationError,
    /// The peer's frame, if a valid one arrived (its IRD/ORD go to the ULP even now).
    pub peer: Option<PeerInfo>,
    /// Set when a Terminate must be sent ([`NegotiationError::sends_terminate`]): the
    /// parameters to frame it with (CRC, markers, offsets).
    pub terminate: Option<Negotiated>,
}

/// What a machine reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Responder: a valid Request arrived; call [`Responder::accept`] or
    /// [`Responder::reject`].
    Request(PeerInfo),
    /// FPDU mode: the negotiated parameters.
    Established(Negotiated),
    /// The connection was rejected; MPA is done, TCP stays open.
    Rejected(Rejection),
    /// The startup failed; close TCP (after a Terminate if [`Failure::terminate`] is set).
    Failed(Failure),
}

/// Where a machine is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Waiting for (the rest of) the peer's frame.
    AwaitingFrame,
    /// Responder: the Request was delivered to the ULP, which has not decided yet.
    AwaitingDecision,
    /// FPDU mode (see `can_send_fpdus` for the RTR and fencing rules).
    Established,
    /// Rejected; MPA is done.
    Rejected,
    /// Failed; MPA is done.
    Failed,
}

/// Accumulates the peer's frame from arbitrary stream pieces.
#[derive(Debug, Clone)]
struct FrameReader {
    buf: Vec<u8>,
    expected: FrameKind,
}

impl FrameReader {
    fn new(expected: FrameKind) -> Self {
        FrameReader {
            buf: Vec::with_capacity(wire::MAX_FRAME_LEN),
            expected,
        }
    }

    /// Takes octets up to the end of the frame. Returns the octets taken and whether the
    /// frame is complete, or the error found in what has arrived.
    fn push(&mut self, data: &[u8]) -> (usize, Result<bool, NegotiationError>) {
        let mut taken = 0;
        loop {
            // Judge the key octet by octet so that garbage or a wrong role is caught early
            // (MPA-7.1.2-17, MPA-7.1.2-20).
            if self.buf.len() <= 16 {
                let own = wire::key_prefix_matches(self.expected, &self.buf);
                if !own {
                    let other = match self.expected {
                        FrameKind::Request => FrameKind::Reply,
                        FrameKind::Reply => FrameKind::Request,
                    };
                    let err = if wire::key_prefix_matches(other, &self.buf) {
                        match self.expected {
                            FrameKind::Reply => NegotiationError::InitiatorInitiator,
                            FrameKind::Request => NegotiationError::UnexpectedReply,
                        }
                    } else {
                        NegotiationError::Frame(FrameError::BadKey)
                    };
                    return (taken, Err(err));
                }
            }
            let want = if self.buf.len() < wire::HEADER_LEN {
                wire::HEADER_LEN
            } else {
                match wire::frame_len(&self.buf) {
                    Ok(n) => n,
                    Err(e) => return (taken, Err(e.into())),
                }
            };
            if self.buf.len() >= want {
                return (taken, Ok(true));
            }
            let rest = &data[taken..];
            if rest.is_empty() {
                return (taken, Ok(false));
            }
            // Take at most up to the next checkpoint: octet by octet through the key, then
            // to the end of the header, then to the end of the frame.
            let step_end = if self.buf.len() < 16 {
                self.buf.len() + 1
            } else {
                want
            };
            let n = (step_end - self.buf.len()).min(rest.len());
            self.buf.extend_from_slice(&rest[..n]);
            taken += n;
        }
    }

    fn repr(&self) -> Result<FrameRepr<'_>, NegotiationError> {
        Ok(FrameRepr::parse(&Frame::new_unchecked(&self.buf[..]))?)
    }

    fn len(&self) -> usize {
        self.buf.len()
    }
}

/// Outgoing frame octets not yet handed to TCP.
#[derive(Debug, Clone, Default)]
struct TxQueue {
    bytes: Vec<u8>,
    sent: usize,
}

impl TxQueue {
    fn poll(&mut self, buf: &mut [u8]) -> usize {
        let rest = &self.bytes[self.sent..];
        let n = rest.len().min(buf.len());
        buf[..n].copy_from_slice(&rest[..n]);
        self.sent += n;
        n
    }

    fn drained(&self) -> bool {
        self.sent == self.bytes.len()
    }
}

/// Both sides' check of the peer's Rev (MPA-7.1.1-18/19): we work with IETF Rev 1 and 2
/// only. Rev 0 (RDMA Consortium) would mean DDP/RDMAP version 0, which we never send
/// (mpa-08 Appendix C); Rev 3 and above are unknown to us.
fn check_rev(rev: u8) -> Result<(), NegotiationError> {
    if (1..=2).contains(&rev) {
        Ok(())
    } else {
        Err(NegotiationError::UnsupportedRevision(rev))
    }
}

// ---------------------------------------------------------------------------------------
// Initiator
// ---------------------------------------------------------------------------------------

/// The MPA initiator: sends the Request, validates the Reply (mpa-08 §7.1.2 rules 1, 3).
#[derive(Debug, Clone)]
pub struct Initiator {
    config: Config,
    /// The enhanced data we sent, if the Request was enhanced.
    sent_enhanced: Option<EnhancedData>,
    request_len: usize,
    tx: TxQueue,
    reader: FrameReader,
    phase: Phase,
    deadline: Option<Instant>,
    rtr_pending: bool,
    events: std::collections::VecDeque<Event>,
}

impl Initiator {
    /// Starts the initiator and queues the Request (MPA-7.1.2-1). `now` starts the timer
    /// (a timeout too large for `Instant` disables it).
    ///
    /// At Rev 2 the Request is enhanced (S = 1) with our IRD/ORD; peer-to-peer sets A and
    /// the RTR types we can send (MPA2-9.2-1, MPA2-9.2-2), otherwise A = B = C = D = 0
    /// (MPA2-9.2-12, MPA2-9.2-14). When a Read RTR is offered and our ORD is 0, the Request
    /// announces ORD 1, as Linux siw does, so that the responder provides the Read credit the
    /// RTR needs; the negotiated local ORD then starts from 1.
    pub fn new(config: Config, now: Instant) -> Result<Initiator, UsageError> {
        config.validate(Role::Initiator)?;
        let enhanced = (config.rev >= 2).then(|| {
            let rtr = if config.peer_to_peer {
                config.rtr
            } else {
                RtrTypes::EMPTY // MPA2-9.2-14
            };
            // A Read RTR needs a Read credit at the responder. Announce ORD 1 instead of 0
            // so the responder sizes its IRD for it, as Linux siw does (MPA2-9.1-3).
            let ord = if rtr.contains(RtrType::Read) && config.ord == 0 {
                1
            } else {
                config.ord
            };
            EnhancedData {
                peer_to_peer: config.peer_to_peer,
                rtr,
                ird: config.ird,
                ord,
            }
        });
        let repr = FrameRepr {
            kind: FrameKind::Request,
            markers: config.markers,
            crc: config.crc,
            reject: false, // sent as 0 in a Request
            res: 0,        // MPA-7.1.1-15
            rev: config.rev,
            enhanced,
            private_data: &config.private_data,
        };
        let bytes = repr.to_vec();
        let request_len = bytes.len();
        Ok(Initiator {
            deadline: now.checked_add(config.timeout),
            config,
            sent_enhanced: enhanced,
            request_len,
            tx: TxQueue { bytes, sent: 0 },
            reader: FrameReader::new(FrameKind::Reply),
            phase: Phase::AwaitingFrame,
            rtr_pending: false,
            events: Default::default(),
        })
    }

    /// Copies pending Request octets into `buf`; returns how many (0 when none are left).
    pub fn poll_transmit(&mut self, buf: &mut [u8]) -> usize {
        self.tx.poll(buf)
    }

    /// Feeds received stream octets; returns how many were taken. Stops after the Reply:
    /// what follows belongs to the deframer. Takes nothing once the outcome is known.
    pub fn handle_input(&mut self, data: &[u8]) -> usize {
        if self.phase != Phase::AwaitingFrame {
            return 0;
        }
        let (taken, result) = self.reader.push(data);
        match result {
            Ok(false) => {}
            Ok(true) => {
                self.deadline = None;
                self.on_reply();
            }
            Err(e) => self.fail(e, None, None),
        }
        taken
    }

    /// The peer closed or reset TCP (a no-op once the outcome is known).
    pub fn handle_close(&mut self) {
        if self.phase == Phase::AwaitingFrame {
            let e = if self.reader.len() == 0 {
                NegotiationError::PeerClosed
            } else {
                NegotiationError::Frame(FrameError::Truncated)
            };
            self.fail(e, None, None);
        }
    }

    /// When [`Initiator::handle_timeout`] should be called next, if at all.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }

    /// Fails the startup if the Reply has not arrived by the deadline.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.phase == Phase::AwaitingFrame && self.deadline.is_some_and(|d| now >= d) {
            self.deadline = None;
            self.fail(NegotiationError::Timeout, None, None);
        }
    }

    /// Counts the startup timeout from `now` while the Reply is awaited (a no-op once the
    /// outcome is known): for a caller that builds the initiator before its TCP
    /// connection is established, once it is. MPA starts on an established connection
    /// (mpa-08 §7.1.2 rules 1 and 3), so the wait for the Reply (MPA-7.1.2-27) does not
    /// include the TCP handshake, which has timeouts of its own; Linux siw, too, arms its
    /// MPA timer once its connect returned.
    pub fn restart_timer(&mut self, now: Instant) {
        if self.phase == Phase::AwaitingFrame {
            self.deadline = now.checked_add(self.config.timeout);
        }
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// The engine queued the RTR FPDU; other FPDUs may follow it now (MPA2-5-1).
    pub fn handle_rtr_sent(&mut self) {
        self.rtr_pending = false;
    }

    /// Whether FPDUs other than the RTR may be sent: established, the Request fully handed
    /// to TCP, and any negotiated RTR sent (MPA2-5-1).
    pub fn can_send_fpdus(&self) -> bool {
        self.phase == Phase::Established && self.tx.drained() && !self.rtr_pending
    }

    fn fail(
        &mut self,
        error: NegotiationError,
        peer: Option<PeerInfo>,
        terminate: Option<Negotiated>,
    ) {
        self.phase = Phase::Failed;
        self.deadline = None;
        self.events.push_back(Event::Failed(Failure {
            error,
            peer,
            terminate,
        }));
    }

    fn on_reply(&mut self) {
        let repr = match self.reader.repr() {
            Ok(r) => r,
            Err(e) => return self.fail(e, None, None),
        };
        if let Err(e) = check_rev(repr.rev) {
            return self.fail(e, None, None);
        }
        let peer = PeerInfo::from_repr(&repr);
        let reply_len = self.reader.len();
        // R = 1: exit MPA, TCP stays open (MPA-7.1.2-14). The enhanced format is not judged:
        // the outcome is the same, and the ULP gets whatever IRD/ORD came (MPA2-9.1-10).
        if repr.reject {
            self.phase = Phase::Rejected;
            self.events.push_back(Event::Rejected(Rejection {
                reason: RejectReason::ByPeer,
                peer,
            }));
            return;
        }
        // MPA2-10-5, MPA2-10-6: an enhanced Request gets an enhanced Reply and only then.
        if repr.enhanced.is_some() != self.sent_enhanced.is_some() {
            return self.fail(NegotiationError::EnhancedMismatch, Some(peer), None);
        }
        // MPA-7.1.1-10 / MPA-4.3-1: we must send markers if asked, and cannot.
        if repr.markers && !self.config.markers_supported {
            return self.fail(NegotiationError::MarkersUnsupported, Some(peer), None);
        }
        let mut neg = Negotiated {
            role: Role::Initiator,
            rev_sent: self.config.rev,
            rev_received: repr.rev,
            enhanced: repr.enhanced.is_some(),
            crc: self.config.crc || repr.crc,
            markers_tx: repr.markers,
            markers_rx: self.config.markers,
            local_ird: self.config.ird,
            local_ord: self.config.ord,
            peer_ird: peer.ird(),
            peer_ord: peer.ord(),
            peer_to_peer: false,
            rtr: None,
            rtr_accepted: RtrTypes::EMPTY,
            peer_private_data: peer.private_data.clone(),
            tx_fpdu_offset: self.request_len as u64,
            rx_fpdu_offset: reply_len as u64,
        };
        if let (Some(sent), Some(got)) = (self.sent_enhanced, repr.enhanced) {
            match initiator_adjust(sent, got) {
                Ok((ird, ord, rtr)) => {
                    neg.local_ird = ird;
                    neg.local_ord = ord;
                    neg.peer_to_peer = sent.peer_to_peer;
                    neg.rtr = rtr;
                }
                Err(e) => {
                    // The Terminate is an FPDU in our (now FPDU-mode) send direction.
                    return self.fail(e, Some(peer), Some(neg));
                }
            }
        }
        self.rtr_pending = neg.rtr.is_some();
        self.phase = Phase::Established;
        self.events.push_back(Event::Established(neg));
    }
}

/// The initiator's side of RFC 6581 §9.1-9.2 after an accepting Reply: our IRD and ORD and
/// the RTR to send, from what we sent and what the responder answered.
fn initiator_adjust(
    sent: EnhancedData,
    got: EnhancedData,
) -> Result<(u16, u16, Option<RtrType>), NegotiationError> {
    // MPA2-9.2-4 / MPA2-9.2-13: A must be echoed; otherwise there is no common model (code 7).
    if got.peer_to_peer != sent.peer_to_peer {
        return Err(NegotiationError::ModelMismatch);
    }
    // IRD: at least the responder ORD (MPA2-9.1-7). Responder ORD 0x3FFF, or our own 0x3FFF,
    // leaves it unchanged (MPA2-9.1-14). We set it to exactly the responder ORD, as siw does:
    // the peer never has more Reads outstanding.
    let ird = if got.ord == IRD_ORD_NO_NEGOTIATION || sent.ird == IRD_ORD_NO_NEGOTIATION {
        sent.ird
    } else if got.ord > sent.ird {
        return Err(NegotiationError::InsufficientIrd); // MPA2-9.1-8, MPA2-9.1-9
    } else {
        got.ord
    };
    // ORD: at most the responder IRD (MPA2-9.1-7); lowering it is always possible. Responder
    // IRD 0x3FFF leaves it unchanged (MPA2-9.1-12).
    let ord = if got.ird == IRD_ORD_NO_NEGOTIATION || sent.ord == IRD_ORD_NO_NEGOTIATION {
        sent.ord
    } else {
        sent.ord.min(got.ird)
    };
    if !sent.peer_to_peer {
        return Ok((ird, ord, None));
    }
    // MPA2-9.2-9: pick one of the types we offered and the responder marked. Preference:
    // Write (needs nothing at the responder), Send (needs a posted receive), Read (needs a
    // Read credit, so only with responder IRD >= 1 and our ORD >= 1).
    let mut common = sent.rtr.intersection(got.rtr);
    if ord == 0 || got.ird == 0 {
        common = RtrTypes::from_iter(common.iter().filter(|t| *t != RtrType::Read));
    }
    let pick = [RtrType::Write, RtrType::Send, RtrType::Read]
        .into_iter()
        .find(|t| common.contains(*t));
    match pick {
        Some(t) => Ok((ird, ord, Some(t))),
        None => Err(NegotiationError::NoMatchingRtr), // MPA2-9.2-10, MPA2-9.2-11
    }
}

// ---------------------------------------------------------------------------------------
// Responder
// ---------------------------------------------------------------------------------------

/// The MPA responder: validates the Request, lets the ULP decide, sends the Reply and fences
/// its FPDUs until the initiator's first FPDU arrived (mpa-08 §7.1.2 rules 2, 4).
#[derive(Debug, Clone)]
pub struct Responder {
    config: Config,
    reader: FrameReader,
    tx: TxQueue,
    phase: Phase,
    deadline: Option<Instant>,
    /// The Request, kept from validation to the ULP's decision.
    request: Option<PeerInfo>,
    /// RTR types accepted as the first ULPDU (peer-to-peer only).
    rtr_accepted: RtrTypes,
    peer_to_peer: bool,
    first_ulpdu_seen: bool,
    events: std::collections::VecDeque<Event>,
}

/// The Reply a responder computes for a Request: enhanced data, local IRD/ORD.
struct ReplyPlan {
    rev: u8,
    enhanced: Option<EnhancedData>,
    local_ird: u16,
    local_ord: u16,
    rtr_accepted: RtrTypes,
}

impl Responder {
    /// Starts the responder; `now` starts the timer for the Request (MPA-7.1.2-21).
    pub fn new(config: Config, now: Instant) -> Result<Responder, UsageError> {
        config.validate(Role::Responder)?;
        Ok(Responder {
            deadline: now.checked_add(config.timeout),
            config,
            reader: FrameReader::new(FrameKind::Request),
            tx: TxQueue::default(),
            phase: Phase::AwaitingFrame,
            request: None,
            rtr_accepted: RtrTypes::EMPTY,
            peer_to_peer: false,
            first_ulpdu_seen: false,
            events: Default::default(),
        })
    }

    /// Feeds received stream octets; returns how many were taken. Stops after the Request:
    /// what follows is FPDU data for the deframer.
    pub fn handle_input(&mut self, data: &[u8]) -> usize {
        if self.phase != Phase::AwaitingFrame {
            return 0;
        }
        let (taken, result) = self.reader.push(data);
        match result {
            Ok(false) => {}
            Ok(true) => {
                self.deadline = None;
                self.on_request();
            }
            Err(e) => self.fail(e, None),
        }
        taken
    }

    /// The peer closed or reset TCP. Reported only while the Request is still awaited.
    pub fn handle_close(&mut self) {
        if self.phase == Phase::AwaitingFrame {
            let e = if self.reader.len() == 0 {
                NegotiationError::PeerClosed
            } else {
                NegotiationError::Frame(FrameError::Truncated)
            };
            self.fail(e, None);
        }
    }

    /// When [`Responder::handle_timeout`] should be called next, if at all. Only the wait
    /// for the Request is timed; the ULP's decision and the first FPDU are the ULP's to
    /// time (MPA-7.1.2-28).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadline
    }

    /// Fails the startup if the Request has not arrived by the deadline.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.phase == Phase::AwaitingFrame && self.deadline.is_some_and(|d| now >= d) {
            self.deadline = None;
            self.fail(NegotiationError::Timeout, None);
        }
    }

    /// The next event, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The current phase.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Copies pending Reply octets into `buf`; returns how many (0 when none are left).
    pub fn poll_transmit(&mut self, buf: &mut [u8]) -> usize {
        self.tx.poll(buf)
    }

    /// Overrides our IRD/ORD for the Reply, after seeing the Request and before
    /// accepting or rejecting (e.g. to state the ORD the ULP requires in a reject,
    /// MPA2-9.1-5).
    pub fn set_ird_ord(&mut self, ird: u16, ord: u16) -> Result<(), UsageError> {
        if self.phase != Phase::AwaitingDecision {
            return Err(UsageError::NotAwaitingDecision);
        }
        if ird > wire::IRD_ORD_MASK || ord > wire::IRD_ORD_MASK {
            return Err(UsageError::IrdOrdOutOfRange);
        }
        self.config.ird = ird;
        self.config.ord = ord;
        Ok(())
    }

    /// Accepts the Request with our ULP's private data (MPA-7.1.2-8, MPA-7.1.2-9): queues
    /// the Reply and reports [`Event::Established`].
    ///
    /// The Reply:
    /// - Rev: the lower of ours and the Request's, so a Rev 1 Request gets a Rev 1 Reply
    ///   (MPA2-6-4); it is enhanced exactly when the Request was (MPA2-10-5, MPA2-10-6).
    /// - C: set when CRCs will be used, i.e. if we or the initiator want them. C = 1 in
    ///   either frame turns CRCs on anyway (MPA-7.1.1-12); echoing it keeps initiators happy
    ///   that refuse a Reply without C after asking for CRCs (siw with `mpa_crc_required`).
    /// - M: ours (we require markers from the initiator).
    /// - IRD: the initiator's ORD, capped at ours (0x3FFF rules, MPA2-9.1-11), raised to 1
    ///   when a Read RTR is marked (MPA2-9.1-3). ORD: ours, capped at the initiator's IRD
    ///   (MPA2-9.1-4, MPA2-9.1-13).
    /// - A echoed (MPA2-9.2-4); B/C/D: every offered RTR type we accept (MPA2-9.2-5), or all
    ///   we accept if none of the offered ones is (MPA2-9.2-8). A Read RTR is accepted only
    ///   with an IRD of at least 1.
    ///
    /// [`UsageError::NoRtrType`], nothing sent, when the Request asks for peer-to-peer and
    /// [`Responder::set_ird_ord`] lowered our IRD to 0 with only the Read RTR accepted: the
    /// Reply would mark no RTR type (MPA2-9.2-8).
    pub fn accept(&mut self, private_data: &[u8]) -> Result<(), UsageError> {
        let p2p = self
            .request
            .as_ref()
            .and_then(|r| r.enhanced)
            .is_some_and(|e| e.peer_to_peer);
        if p2p && markable_rtr(self.config.rtr, self.config.ird).is_empty() {
            return Err(UsageError::NoRtrType);
        }
        let request = self.take_request(private_data)?;
        let plan = self.plan(&request, false);
        let reply_len = self.queue_reply(&request, &plan, false, private_data);
        self.rtr_accepted = plan.rtr_accepted;
        self.phase = Phase::Established;
        self.events.push_back(Event::Established(Negotiated {
            role: Role::Responder,
            rev_sent: plan.rev,
            rev_received: request.rev,
            enhanced: plan.enhanced.is_some(),
            crc: self.config.crc || request.crc,
            markers_tx: request.markers,
            markers_rx: self.config.markers,
            local_ird: plan.local_ird,
            local_ord: plan.local_ord,
            peer_ird: request.ird(),
            peer_ord: request.ord(),
            peer_to_peer: self.peer_to_peer,
            rtr: None,
            rtr_accepted: plan.rtr_accepted,
            peer_private_data: request.private_data,
            tx_fpdu_offset: reply_len as u64,
            rx_fpdu_offset: self.reader.len() as u64,
        }));
        Ok(())
    }

    /// Rejects the Request (R = 1) with our ULP's private data (MPA-7.1.2-5/6); MPA is done
    /// and TCP stays open (MPA-7.1.2-7). An enhanced Reply carries our ORD un-clamped, so
    /// the initiator learns the ORD we require (MPA2-9.1-5).
    pub fn reject(&mut self, private_data: &[u8]) -> Result<(), UsageError> {
        let request = self.take_request(private_data)?;
        self.reject_with(request, RejectReason::ByUlp, private_data);
        Ok(())
    }

    /// The RTR types the first ULPDU may be (empty unless peer-to-peer was negotiated).
    pub fn expected_rtr(&self) -> RtrTypes {
        self.rtr_accepted
    }

    /// Whether we may send FPDUs: accepted, the Reply fully handed to TCP, and the
    /// initiator's first FPDU received and validated (MPA fencing, MPA-7.1.2-16).
    pub fn can_send_fpdus(&self) -> bool {
        self.phase == Phase::Established && self.tx.drained() && self.first_ulpdu_seen
    }

    /// The engine's deframer accepted the first FPDU (CRC and markers checked); `ulpdu` is
    /// its ULPDU (the DDP segment). Lifts the fence on success.
    ///
    /// In the peer-to-peer model the first ULPDU must be one of [`Responder::expected_rtr`]
    /// (MPA2-5-1): `Ok(Some(t))`, to be consumed by the engine and not delivered as a ULP
    /// message; anything else is [`NegotiationError::InvalidRtr`] (send a Terminate, code 7).
    /// In the client-server model the first FPDU is an ordinary message: `Ok(None)`. Later
    /// calls (or calls before `accept`) return `Ok(None)` and change nothing.
    pub fn handle_first_ulpdu(
        &mut self,
        ulpdu: &[u8],
    ) -> Result<Option<RtrType>, NegotiationError> {
        if self.phase != Phase::Established || self.first_ulpdu_seen {
            return Ok(None);
        }
        if !self.peer_to_peer {
            self.first_ulpdu_seen = true;
            return Ok(None);
        }
        match RtrType::classify_ulpdu(ulpdu) {
            Some(t) if self.rtr_accepted.contains(t) => {
                self.first_ulpdu_seen = true;
                Ok(Some(t))
            }
            _ => {
                self.phase = Phase::Failed;
                Err(NegotiationError::InvalidRtr)
            }
        }
    }

    fn fail(&mut self, error: NegotiationError, peer: Option<PeerInfo>) {
        self.phase = Phase::Failed;
        self.deadline = None;
        self.events.push_back(Event::Failed(Failure {
            error,
            peer,
            terminate: None,
        }));
    }

    fn take_request(&mut self, private_data: &[u8]) -> Result<PeerInfo, UsageError> {
        if self.phase != Phase::AwaitingDecision {
            return Err(UsageError::NotAwaitingDecision);
        }
        let enhanced = self.request.as_ref().is_some_and(|r| r.enhanced.is_some());
        check_pd_len(private_data.len(), enhanced)?;
        self.request.take().ok_or(UsageError::NotAwaitingDecision)
    }

    fn on_request(&mut self) {
        let repr = match self.reader.repr() {
            Ok(r) => r,
            Err(e) => return self.fail(e, None),
        };
        if let Err(e) = check_rev(repr.rev) {
            return self.fail(e, None);
        }
        let peer = PeerInfo::from_repr(&repr);
        // MPA2-10-7: a Rev 1 responder treats an enhanced Request as malformed.
        if repr.enhanced.is_some() && self.config.rev < 2 {
            return self.fail(NegotiationError::EnhancedNotSupported, Some(peer));
        }
        // The initiator requires markers we cannot insert: reject, as siw does.
        if repr.markers && !self.config.markers_supported {
            self.reject_with(peer, RejectReason::MarkersUnsupported, &[]);
            return;
        }
        self.phase = Phase::AwaitingDecision;
        self.request = Some(peer.clone());
        self.events.push_back(Event::Request(peer));
    }

    fn reject_with(&mut self, request: PeerInfo, reason: RejectReason, private_data: &[u8]) {
        let plan = self.plan(&request, true);
        self.queue_reply(&request, &plan, true, private_data);
        self.phase = Phase::Rejected;
        self.events.push_back(Event::Rejected(Rejection {
            reason,
            peer: request,
        }));
    }

    /// RFC 6581 §9.1-9.2 on the responder side.
    fn plan(&mut self, request: &PeerInfo, reject: bool) -> ReplyPlan {
        // Reply at our revision if the Request's is at least as high, else at the Request's
        // (a Rev 1 Request gets a Rev 1 Reply, MPA2-6-4, MPA2-10-2).
        let rev = self.config.rev.min(request.rev);
        let Some(req) = request.enhanced else {
            self.peer_to_peer = false;
            return ReplyPlan {
                rev,
                enhanced: None,
                local_ird: self.config.ird,
                local_ord: self.config.ord,
                rtr_accepted: RtrTypes::EMPTY,
            };
        };
        let (cfg_ird, cfg_ord) = (self.config.ird, self.config.ord);
        // RTR types (MPA2-9.2-4..8): echo A; mark each offered type we accept; if none,
        // mark all we accept. A Read RTR needs an IRD of at least 1.
        let supported = markable_rtr(self.config.rtr, cfg_ird);
        let marked = if !req.peer_to_peer {
            RtrTypes::EMPTY // MPA2-9.2-14
        } else {
            let common = req.rtr.intersection(supported);
            if common.is_empty() {
                supported
            } else {
                common
            }
        };
        // IRD: initiator ORD 0x3FFF (or our own 0x3FFF) keeps ours and answers 0x3FFF
        // (MPA2-9.1-11). Otherwise as much as the initiator wants, at most what we have,
        // raised to 1 for a Read RTR (MPA2-9.1-3).
        let (local_ird, reply_ird) =
            if req.ord == IRD_ORD_NO_NEGOTIATION || cfg_ird == IRD_ORD_NO_NEGOTIATION {
                (cfg_ird, IRD_ORD_NO_NEGOTIATION)
            } else {
                let mut ird = req.ord.min(cfg_ird);
                if marked.contains(RtrType::Read) && ird == 0 {
                    ird = 1;
                }
                (ird, ird)
            };
        // ORD: initiator IRD 0x3FFF (or ours) keeps ours and answers 0x3FFF (MPA2-9.1-13);
        // otherwise at most the initiator IRD (MPA2-9.1-4). A reject states the ORD we
        // require instead (MPA2-9.1-5).
        let (local_ord, reply_ord) =
            if req.ird == IRD_ORD_NO_NEGOTIATION || cfg_ord == IRD_ORD_NO_NEGOTIATION {
                (cfg_ord, IRD_ORD_NO_NEGOTIATION)
            } else if reject {
                (cfg_ord, cfg_ord)
            } else {
                let ord = cfg_ord.min(req.ird);
                (ord, ord)
            };
        self.peer_to_peer = req.peer_to_peer;
        ReplyPlan {
            rev,
            enhanced: Some(EnhancedData {
                peer_to_peer: req.peer_to_peer,
                rtr: marked,
                ird: reply_ird,
                ord: reply_ord,
            }),
            local_ird,
            local_ord,
            rtr_accepted: marked,
        }
    }

    fn queue_reply(
        &mut self,
        request: &PeerInfo,
        plan: &ReplyPlan,
        reject: bool,
        private_data: &[u8],
    ) -> usize {
        let repr = FrameRepr {
            kind: FrameKind::Reply,
            markers: self.config.markers,
            // CRCs are on if either side asked; saying so in the Reply keeps peers happy
            // that insist on seeing C echoed (siw with mpa_crc_required).
            crc: self.config.crc || request.crc,
            reject,
            res: 0,
            rev: plan.rev,
            enhanced: plan.enhanced,
            private_data,
        };
        self.tx = TxQueue {
            bytes: repr.to_vec(),
            sent: 0,
        };
        self.tx.bytes.len()
    }
}
