//! Connection manager vocabulary: parameters of listen/connect/accept, and the events an
//! engine core reports (established, rejected, disconnected, error).

use core::fmt;

use warpcore_proto::mpa::negotiation::NegotiationError;
pub use warpcore_proto::wire::mpa::{RtrType, RtrTypes};
use warpcore_proto::{ProtocolError, TerminateReport};
use warpcore_tcp::smoltcp::wire::Ipv4Address;

use crate::mem::MemError;
use crate::wr::{QpId, WcOpcode};

/// Names a listener of one engine core.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ListenerId {
    /// The owning core.
    pub core: u16,
    /// Slot.
    pub index: u32,
}

/// Names a connection request waiting for accept or reject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RequestId {
    /// The owning core.
    pub core: u16,
    /// Slot.
    pub index: u32,
    /// Generation of the slot.
    pub generation: u32,
    /// The engine core that made it, unique in the process
    /// ([`EngineCore::instance`](crate::EngineCore::instance)): core number, slot and
    /// generation are per engine, and another engine's core of the same number (another
    /// context's) hands out the same ones, so its request would name one of this core's,
    /// another peer's. A request of another engine is refused as unknown.
    pub engine: u64,
}

/// MPA settings of one side of a connection (mpa-08 §7.1, RFC 6581).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpaParams {
    /// MPA revision sent: 1 (RFC 5044) or 2 (RFC 6581, IRD/ORD negotiated).
    pub rev: u8,
    /// Ask for CRC32c (used if either side asks, MPA-7.1.1-12).
    pub crc: bool,
    /// Require markers from the peer (MPA-7.1.1-7/8).
    pub markers: bool,
    /// Whether we insert markers when the peer requires them (MPA-4.3-1). Off: a responder
    /// rejects a Request with M = 1 (the initiator sees [`CmEvent::Rejected`]), an
    /// initiator fails on a Reply with M = 1 ([`NegotiationError::MarkersUnsupported`]).
    pub markers_supported: bool,
    /// Inbound Read Requests we serve at once. 0x3FFF: not negotiated (RFC 6581 §9.1,
    /// MPA2-9.1-11..14): the peer's matching value is left alone and ours is our
    /// configured maximum (`EngineConfig::max_ird`), the ULP being responsible.
    pub ird: u16,
    /// Outbound Read Requests we want in flight; 0x3FFF as for `ird` (`max_ord`).
    pub ord: u16,
    /// Initiator at Rev 2: peer-to-peer model with a zero-length RTR (RFC 6581 §9.2), so
    /// the responder may send first.
    pub peer_to_peer: bool,
    /// Initiator in the peer-to-peer model: the RTR types we offer (MPA2-9.2-2). Of the
    /// ones the responder marks we send Write, else Send, else Read (MPA2-9.2-9); none in
    /// common fails the connection with Terminate 2/0/07 (MPA2-9.2-10/11). The Read RTR is
    /// not offered by an engine with `EngineConfig::max_ord` 0 (it could not have the Read
    /// outstanding; `connect` refuses an offer left empty). Default: Write.
    pub rtr_offer: RtrTypes,
    /// Responder: the RTR types we accept as the initiator's first FPDU (MPA2-9.2-3,
    /// MPA2-9.2-5). At Rev 2 it must hold one we can mark: not empty, and not the Read RTR
    /// alone with an IRD of 0 (MPA2-9.1-3, MPA2-9.2-8); `listen` refuses others. Default:
    /// all three.
    pub rtr_accept: RtrTypes,
}

impl Default for MpaParams {
    fn default() -> Self {
        MpaParams {
            rev: 2,
            crc: true,
            markers: false,
            markers_supported: true,
            ird: 8,
            ord: 8,
            peer_to_peer: true,
            rtr_offer: RtrTypes::WRITE,
            rtr_accept: RtrTypes::ALL,
        }
    }
}

/// Names a next-hop resolution asked for with
/// [`EngineCore::resolve_neighbor`](crate::EngineCore::resolve_neighbor): the core that
/// runs it and the TCP stack's handle of it. [`CmEvent::NeighborResolved`] or
/// [`CmEvent::NeighborFailed`] names it once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NeighborId {
    /// The owning core.
    pub core: u16,
    /// The stack's handle.
    pub id: warpcore_tcp::ResolveId,
}

/// What the peer asked for in its MPA Request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectRequest {
    /// Accept or reject with this handle.
    pub request: RequestId,
    /// The listener it arrived on.
    pub listener: ListenerId,
    /// The peer's address and port.
    pub remote: (Ipv4Address, u16),
    /// Our port the listener listens on (`rdma_get_src_port` of the child id).
    pub local_port: u16,
    /// The peer's MPA revision.
    pub rev: u8,
    /// The peer's IRD (RFC 6581; `None` at Rev 1).
    pub ird: Option<u16>,
    /// The peer's ORD (RFC 6581; `None` at Rev 1).
    pub ord: Option<u16>,
    /// The peer's private data.
    pub private_data: Vec<u8>,
}

/// The result of a successful MPA startup, as the application sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Established {
    /// The queue pair, now ready to send.
    pub qp: QpId,
    /// The MPA revision we sent and the one the peer sent.
    pub rev: (u8, u8),
    /// CRC32c is in use.
    pub crc: bool,
    /// We insert markers / the peer inserts markers.
    pub markers: (bool, bool),
    /// Negotiated IRD (inbound Reads served at once) after RFC 6581 §9.1.
    pub ird: u16,
    /// Negotiated ORD (outbound Reads in flight).
    pub ord: u16,
    /// The peer's IRD and ORD as sent (Rev 2 only).
    pub peer_ird_ord: Option<(u16, u16)>,
    /// Peer-to-peer model: as initiator, the RTR we send first (MPA2-9.2-9); as responder,
    /// `None` (the types we marked are in `rtr_accepted`).
    pub rtr: Option<RtrType>,
    /// Peer-to-peer responder: the RTR types we marked in the Reply and accept as the
    /// initiator's first FPDU; empty otherwise.
    pub rtr_accepted: RtrTypes,
    /// The peer's private data.
    pub private_data: Vec<u8>,
}

/// Why a connection ended in error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnError {
    /// The peer sent a Terminate: decoded.
    RemoteTerminate(TerminateReport),
    /// We detected a protocol error and sent a Terminate with this error.
    LocalTerminate(ProtocolError),
    /// The MPA startup failed.
    Negotiation {
        /// Why.
        error: NegotiationError,
        /// The peer's IRD and ORD (Rev 2) when its frame was valid and our checks of it
        /// then failed: an accepting Reply whose ORD is above the IRD we can provide (a
        /// user may connect again asking for it: RFC 6581 9.1), whose A flag or RTR types
        /// do not match. MPA2-9.1-1 and MPA2-9.1-10: an initiator passes the responder's
        /// IRD and ORD to its ULP for accepting and rejecting Replies alike (a rejecting
        /// Reply's are in [`CmEvent::Rejected`]). `None` when no valid frame came (a
        /// timeout, a close, a malformed frame) or it was Rev 1.
        peer_ird_ord: Option<(u16, u16)>,
    },
    /// The TCP connection was reset before it was up: the peer's RST (nothing listens on
    /// the port, or the peer refused or dropped the connection). Our own abort of a
    /// connecting QP is not this: it reports [`CmEvent::Disconnected`] with
    /// [`DisconnectCause::Reset`].
    TcpReset,
    /// The TCP connection timed out before it was up: the SYN's retransmissions or the
    /// connection's user timeout ran out with the SYN sent and no answer.
    TcpTimedOut,
    /// The TCP connection gave up before it was up because its next hop (the peer on our
    /// subnet, else the router) never answered ARP: no SYN could leave. The user timeout
    /// (`timeout` of [`crate::EngineConfig::tcp`]) bounds the wait. rdma_cm over cxgb4
    /// reports this ARP miss as `-EHOSTUNREACH` (docs/rdma-compat.md).
    NeighborUnresolved,
    /// A completion queue of this QP overran: completions were lost, so the QP went to the
    /// error state (as the verbs prescribe for a CQ error) and a local catastrophic
    /// Terminate went to the peer. `CompletionQueue::overrun` tells which queue.
    CqOverrun,
    /// A memory window bind, fast registration or Local Invalidate of this QP's send queue
    /// failed when it ran (its completion: [`WcStatus::MwBind`](crate::WcStatus::MwBind)
    /// or [`WcStatus::LocalProtection`](crate::WcStatus::LocalProtection), the verbs'
    /// statuses, which name no cause): the request and why the region table refused it
    /// (a wrong kind or protection domain, a fast registration of an STag still valid, a
    /// region with windows bound, a key the STag has, bounds, rights). The QP went to the
    /// error state and a local catastrophic Terminate (0/0/FF) went to the peer, as for
    /// [`ConnError::LocalTerminate`] (RDMAP-7.1-1: the local ULP is told).
    LocalOperation {
        /// The failed request's identifier (its completion's `wr_id`).
        wr_id: u64,
        /// Its kind: [`WcOpcode::BindMw`], [`WcOpcode::FastReg`] or
        /// [`WcOpcode::LocalInvalidate`].
        opcode: WcOpcode,
        /// Why it failed.
        cause: MemError,
    },
}

impl fmt::Display for ConnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnError::RemoteTerminate(r) => write!(f, "peer sent Terminate: {r}"),
            ConnError::LocalTerminate(e) => {
                write!(f, "sent Terminate: {}", e.terminate_code())
            }
            ConnError::Negotiation { error, .. } => write!(f, "MPA startup failed: {error}"),
            ConnError::TcpReset => f.write_str("TCP connection reset"),
            ConnError::TcpTimedOut => f.write_str("TCP connection timed out"),
            ConnError::NeighborUnresolved => {
                f.write_str("the next hop did not answer ARP: host unreachable")
            }
            ConnError::CqOverrun => {
                f.write_str("a completion queue overran (completions lost); QP in error")
            }
            ConnError::LocalOperation {
                wr_id,
                opcode,
                cause,
            } => write!(
                f,
                "{opcode:?} work request {wr_id:#x} failed: {cause}; sent Terminate: {}",
                ProtocolError::Rdmap(warpcore_proto::error::RdmapError::LocalCatastrophic)
                    .terminate_code()
            ),
        }
    }
}

/// How an established connection ended ([`CmEvent::Disconnected`]): a user can tell a peer
/// that reset the connection from one that went silent, and from a close of ours that was
/// given up. rdma_cm on iWARP reports them all as `RDMA_CM_EVENT_DISCONNECTED`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DisconnectCause {
    /// Graceful: both sides closed (FIN each way) once their send queues drained.
    Closed,
    /// Abortive: a RST ended the connection, the peer's or the one our `abort` sent.
    Reset,
    /// The TCP gave up on a silent peer or path: retransmissions or the user timeout
    /// exhausted (the user timeout `timeout` of [`crate::EngineConfig::tcp`]), or a peer that never closed its side after our
    /// FIN (FIN-WAIT-2's bound). No RST was received.
    TimedOut,
    /// Our graceful close was given up: for
    /// [`crate::EngineConfig::close_timeout_ms`] it made no progress (the peer held its
    /// receive window at zero while answering the probes, or never answered a Read we
    /// wait for), so our send queue could not drain and our FIN not be acknowledged. The
    /// connection was reset (our RST) and everything outstanding flushed, as `abort`
    /// does.
    CloseTimedOut,
}

impl DisconnectCause {
    /// Whether the connection ended abortively (a reset or a timeout), not by both FINs.
    pub fn is_abortive(self) -> bool {
        self != DisconnectCause::Closed
    }
}

/// What an engine core reports to the connection manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEvent {
    /// A peer's MPA Request arrived on a listener.
    ConnectRequest(ConnectRequest),
    /// A QP reached RTS.
    Established(Established),
    /// Our MPA Request was rejected; the peer's private data and IRD/ORD.
    Rejected {
        /// The queue pair (now in the error state, its work requests flushed).
        qp: QpId,
        /// The peer's private data.
        private_data: Vec<u8>,
        /// The peer's IRD and ORD as its Reply stated them (an enhanced Reply only): a
        /// rejecting responder may state the ORD it needs (MPA2-9.1-5), and the initiator's
        /// user is told them for a rejection as for an acceptance (MPA2-9.1-10).
        peer_ird_ord: Option<(u16, u16)>,
    },
    /// The connection ended; `cause` says how: both FINs exchanged after the send queues
    /// drained, a reset (RST, the peer's or our `abort`), a TCP timeout (the peer or the
    /// path went silent), or a graceful close given up after
    /// [`crate::EngineConfig::close_timeout_ms`] without progress (our RST).
    Disconnected {
        /// The queue pair (now in the error state, its work requests flushed).
        qp: QpId,
        /// How the connection ended.
        cause: DisconnectCause,
    },
    /// The connection failed (Terminate sent or received, startup failure, TCP lost).
    Error {
        /// The queue pair (now in the error state, or Terminate while the stream
        /// closes; its work requests flushed).
        qp: QpId,
        /// Why.
        error: ConnError,
    },
    /// A completion queue lost a completion because it was full: the asynchronous CQ error
    /// of the verbs (`IBV_EVENT_CQ_ERR`), once per queue; `cq` is its
    /// [`CompletionQueue::id`](crate::CompletionQueue::id). Every queue pair completing
    /// into it goes to the error state and reports its own [`CmEvent::Error`] with
    /// [`ConnError::CqOverrun`].
    CqError {
        /// The queue's identifier.
        cq: u64,
    },
    /// A shared receive queue's armed limit was reached: a claim left fewer buffers
    /// waiting than the limit, which is now disarmed (the verbs' asynchronous
    /// `IBV_EVENT_SRQ_LIMIT_REACHED`, once per arming); `srq` is its
    /// [`SharedRq::id`](crate::SharedRq::id).
    SrqLimitReached {
        /// The queue's identifier.
        srq: u64,
    },
    /// A next-hop resolution (`resolve_neighbor`) found the hardware address of the next
    /// hop towards its address (or it was known already).
    NeighborResolved(NeighborId),
    /// A next-hop resolution got no ARP answer within its timeout.
    NeighborFailed(NeighborId),
    /// A connection request vanished before the application decided: the peer gave up, or
    /// the application did not accept or reject it within `EngineConfig::mpa_timeout_ms`
    /// (by then the initiator's own startup timer has expired; the slot is freed and the
    /// connection reset).
    RequestCancelled(RequestId),
    /// MPA itself refused a peer's Request before it reached the application: one that
    /// requires markers while this listener's `MpaParams::markers_supported` is off (a
    /// Reply with R = 1 goes back, MPA-4.3-1, MPA-7.1.1-10), or a malformed one (the
    /// connection is closed, MPA-7.1.1-3, MPA-7.1.2-4/17), a Request cut short by the
    /// peer's FIN included (`Frame(Truncated)`, MPA-7.1.1-21). A connection that sends no
    /// complete Request in time is reset without an event (`CoreStats::requests_timed_out`),
    /// and one closed before any octet of a Request is closed without one.
    RequestRefused {
        /// The listener it arrived on.
        listener: ListenerId,
        /// The peer's address and port.
        remote: (Ipv4Address, u16),
        /// Why: [`NegotiationError::MarkersUnsupported`], or what was malformed
        /// ([`NegotiationError::Frame`], [`NegotiationError::UnexpectedReply`],
        /// [`NegotiationError::UnsupportedRevision`],
        /// [`NegotiationError::EnhancedNotSupported`]).
        error: NegotiationError,
    },
}
