//! One engine core: a TCP stack, the queue pairs it owns, and the pollers that move bytes
//! between them (GUIDE §1, rule 9). Single-threaded and deterministic: time is an argument
//! of [`EngineCore::poll`], so tests drive two cores over the in-memory link with a
//! simulated clock, and [`crate::runtime`] drives one per pinned thread.
//!
//! # Pollers, in loop order
//! 1. **rx**: one [`Stack::poll`]: an rx burst into smoltcp, timers.
//! 2. **tcp events**: accepted connections become pending connection requests; FIN/RST
//!    move queue pairs towards the error state.
//! 3. **requests**: MPA Requests of not yet accepted connections are read and handed to the
//!    application ([`CmEvent::ConnectRequest`]).
//! 4. **receive**: per connection, at most `rx_budget_bytes` of the TCP receive buffer are
//!    deframed (borrowed, no copy), validated (DDP, RDMAP) and placed straight into
//!    registered memory; completions go out in MSN order.
//! 5. **timers**: MPA startup timeouts.
//! 6. **send**: per connection at most `tx_budget_fpdus` FPDUs: the Terminate if one is due,
//!    the RTR, Read Responses (inbound Read queue first), then the send queue in order, with
//!    ORD enforced; each FPDU is framed straight into the TCP send buffer.
//! 7. **tx flush**: a second [`Stack::poll`] turns what was queued into frames, one flush;
//!    skipped when no poller of this loop did anything.
//!
//! The pollers visit only the occupied QP slots, and receive only connections with new octets.
//!
//! Commands from application threads (the rings of [`crate::runtime`]) are applied between
//! loops through the same methods tests call directly ([`EngineCore::post_send`], ...).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant as StdInstant};

use warpcore_proto::ddp::{
    DdpReceiver, DdpSender, Placement, Segmenter, TaggedBuffers, TaggedFault, TaggedRegion,
    UntaggedBuffers, MAX_SEGMENT_HEADER_LEN,
};
use warpcore_proto::error::{DdpError, MpaError, ProtocolError, RdmapError};
use warpcore_proto::mpa::deframer::{Deframer, DeframerConfig};
use warpcore_proto::mpa::framer::{Framer, FramerConfig};
use warpcore_proto::mpa::negotiation::{self as nego, Initiator, Negotiated, Responder};
use warpcore_proto::rdmap::atomic::{self as ext_atomic, handle_atomic_request};
use warpcore_proto::rdmap::terminate::TERMINATE_SEGMENT_MAX_LEN;
use warpcore_proto::rdmap::{
    check_inbound, emit_terminate, handle_read_request, invalidate_error, to_range_wraps,
    InboundReadQueue, Offending, RdmapConfig, ReadResponsePlan,
};
use warpcore_proto::wire::ddp::DDP_VERSION;
use warpcore_proto::wire::fpdu::{self, MAX_ULPDU_LEN};
use warpcore_proto::wire::mpa::{RtrType, IRD_ORD_NO_NEGOTIATION};
use warpcore_proto::wire::rdmap::{
    qn, AtomicRequest, AtomicRequestRepr, AtomicResponse, Control, ImmediateData,
    ImmediateDataRepr, Opcode, ReadRequest, ReadRequestRepr,
};
use warpcore_proto::wire::segment::{RdmapHeader, Segment};
use warpcore_proto::TerminateReport;
use warpcore_tcp::smoltcp::socket::tcp::State as TcpState;
use warpcore_tcp::smoltcp::time::Instant;
use warpcore_tcp::smoltcp::wire::Ipv4Address;
use warpcore_tcp::{ConnId, Event as TcpEvent, PollDevice, Stack, StackConfig};

use crate::cm::{
    CmEvent, ConnError, ConnectRequest, Established, ListenerId, MpaParams, RequestId,
};
use crate::config::EngineConfig;
use crate::error::EngineError;
use crate::mem::{Access, BoundsFault, LookupFault, MrGuard, MrTable, PdId, Stag};
use crate::wr::{
    Completion, CompletionQueue, QpId, QpShared, QpState, RecvWr, SendOp, SendWr, Sge, WcOpcode,
    WcStatus,
};

mod local;

/// Largest FPDU on the wire: a maximal ULPDU with length, pad, CRC and markers.
const FPDU_SCRATCH_LEN: usize = MAX_ULPDU_LEN + 2 + 3 + 4 + 4 * (MAX_ULPDU_LEN / 512 + 2);
/// Largest Terminate FPDU (no markers inside 76 octets but leave room for two).
const TERM_FPDU_MAX: usize = TERMINATE_SEGMENT_MAX_LEN;

/// Attributes of a new queue pair.
#[derive(Debug, Clone)]
pub struct QpAttr {
    /// The protection domain its SGEs and the peer's STags must belong to.
    pub pd: PdId,
    /// Completions of send queue work requests.
    pub send_cq: Arc<CompletionQueue>,
    /// Completions of receive queue work requests.
    pub recv_cq: Arc<CompletionQueue>,
    /// Send queue depth.
    pub sq_depth: u32,
    /// Receive queue depth.
    pub rq_depth: u32,
    /// SGEs per work request.
    pub max_sge: u32,
}

/// Counters of one core.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CoreStats {
    /// Loops run.
    pub loops: u64,
    /// FPDUs sent.
    pub fpdus_tx: u64,
    /// FPDUs received (ULPDUs the deframer delivered).
    pub fpdus_rx: u64,
    /// Payload octets placed into registered memory.
    pub placed_octets: u64,
    /// Terminates sent.
    pub terminates_tx: u64,
    /// Terminates received.
    pub terminates_rx: u64,
}

/// Checks a send work request against the QP's shared state and the region table and
/// reserves its send queue slot. Used by [`EngineCore::post_send`] and by application
/// threads before they hand a request to a core, so misuse is refused before anything is
/// queued (nothing changes on error).
pub fn validate_send(shared: &QpShared, mrs: &MrTable, wr: &SendWr) -> Result<(), EngineError> {
    let st = shared.state();
    if st != QpState::Rts {
        return Err(EngineError::InvalidState(st));
    }
    let sges = wr.sges.as_slice();
    if sges.len() > shared.max_sge as usize {
        return Err(EngineError::TooManySges);
    }
    // Binds, fast registrations and Local Invalidates: what does not depend on the STag
    // states they will meet when executed (module `local`).
    if wr.op.is_local() {
        local::check_local_op(shared.pd, mrs, wr)?;
    }
    // RFC 7306 operations only on connections that use it (EXT-1.1-1): refused here,
    // typed, before anything reaches the wire.
    if wr.op.is_rfc7306() && !shared.rfc7306() {
        return Err(EngineError::NotSupported("RFC 7306"));
    }
    let is_read = matches!(wr.op, SendOp::Read { .. });
    if is_read && sges.len() > 1 {
        return Err(EngineError::ReadSgeCount);
    }
    // An atomic returns the original 8-octet word into at most one local SGE of exactly
    // 8 octets (EXT-5.2.2-*; as ibverbs' atomic SGE); Immediate Data carries no payload.
    if wr.op.is_atomic() && (sges.len() > 1 || sges.first().is_some_and(|s| s.len != 8)) {
        return Err(EngineError::AtomicSge);
    }
    if matches!(wr.op, SendOp::Immediate { .. }) && wr.sges.total_len() != 0 {
        return Err(EngineError::MessageTooLong);
    }
    let is_read = is_read || wr.op.is_atomic();
    if wr.sges.total_len() > u64::from(u32::MAX) {
        return Err(EngineError::MessageTooLong);
    }
    // The remote range [TO, TO + length) must not wrap the 64-bit TO space: the Data Sink
    // would refuse it (DDP-7.1-14, RDMAP-7.2-13) and our segmenter cannot frame it, so it
    // is refused here, typed, rather than failing at transmit. An atomic's range is its
    // 8-octet word.
    let remote_to = match wr.op {
        SendOp::Write { remote_to, .. }
        | SendOp::WriteWithImm { remote_to, .. }
        | SendOp::Read { remote_to, .. }
        | SendOp::AtomicFetchAdd { remote_to, .. }
        | SendOp::AtomicCmpSwap { remote_to, .. } => Some(remote_to),
        _ => None,
    };
    let remote_len = if wr.op.is_atomic() {
        8
    } else {
        wr.sges.total_len()
    };
    if remote_to.is_some_and(|to| to_range_wraps(to, remote_len)) {
        return Err(EngineError::RemoteToWrap);
    }
    for s in sges {
        check_sge(mrs, shared.pd, s, is_read)?;
    }
    if !shared.reserve_sq() {
        return Err(EngineError::QueueFull);
    }
    Ok(())
}

/// Checks a receive work request and reserves its receive queue slot (see
/// [`validate_send`]). Receives may be posted before the connection exists.
pub fn validate_recv(shared: &QpShared, mrs: &MrTable, wr: &RecvWr) -> Result<(), EngineError> {
    let st = shared.state();
    if !matches!(st, QpState::Idle | QpState::Connecting | QpState::Rts) {
        return Err(EngineError::InvalidState(st));
    }
    if shared.srq().is_some() {
        return Err(EngineError::UsesSrq);
    }
    let sges = wr.sges.as_slice();
    if sges.len() > shared.max_sge as usize {
        return Err(EngineError::TooManySges);
    }
    if wr.sges.total_len() > u64::from(u32::MAX) {
        return Err(EngineError::MessageTooLong);
    }
    for s in sges {
        check_sge(mrs, shared.pd, s, true)?;
    }
    if !shared.reserve_rq() {
        return Err(EngineError::QueueFull);
    }
    Ok(())
}

fn check_sge(mrs: &MrTable, pd: PdId, s: &Sge, write: bool) -> Result<(), EngineError> {
    let g = mrs
        .lookup_local(Stag(s.stag), pd, write)
        .map_err(|f| match f {
            LookupFault::AccessDenied => EngineError::SgeAccess,
            LookupFault::InvalidStag | LookupFault::WrongPd | LookupFault::WrongQp => {
                EngineError::SgeInvalidStag
            }
        })?;
    g.bounds(s.to, s.len as usize)
        .map_err(|_| EngineError::SgeOutOfBounds)?;
    Ok(())
}

#[derive(Debug)]
struct SqEntry {
    wr: SendWr,
    /// `Some` once the request is done (its completion is due when it reaches the head).
    status: Option<WcStatus>,
    byte_len: u32,
    /// Messages of this request started (a Write with Immediate sends two).
    stage: u8,
    /// The original value an atomic returned.
    atomic_orig: Option<u64>,
}

/// An outstanding outbound Read (ORD accounting, RDMAP-06 §5.2): its Read Responses come
/// back in request order.
#[derive(Debug, Clone, Copy)]
struct OrqEntry {
    /// The SQ sequence number of the Read, `None` for a Read RTR (completes nothing).
    seq: Option<u64>,
    sink_stag: u32,
    len: u32,
    /// `Some(request id)` for an RFC 7306 Atomic Request (answered on QN 3; Reads and
    /// Atomics share ORD, EXT-5.2-1), `None` for a Read.
    atomic: Option<u32>,
}

/// An inbound request on QN 1 owed a response, in arrival order (RDMAP-5.5-13; RFC 7306
/// responses go out in request order too, EXT-5.2.2-6).
#[derive(Debug, Clone, Copy)]
enum Inbound {
    Read(ReadResponsePlan),
    Atomic(AtomicRequestRepr),
}

#[derive(Debug)]
enum TxSrc {
    Sq(u64),
    ReadResp(ReadResponsePlan),
    /// A header-only response (Atomic Response): no payload, retires an IRD credit.
    AtomicResp,
}

#[derive(Debug)]
struct TxMsg {
    seg: Segmenter,
    src: TxSrc,
}

#[derive(Debug)]
enum Mpa {
    Initiator(Box<Initiator>),
    Responder(Box<Responder>),
    Done,
}

#[derive(Debug)]
struct Conn {
    tcp: ConnId,
    mpa: Mpa,
    framer: Option<Framer>,
    deframer: Option<Deframer>,
    ddp_tx: DdpSender,
    ddp_rx: DdpReceiver,
    rtr_pending: Option<RtrType>,
    fin_sent: bool,
    peer_closed: bool,
    /// A Terminate FPDU's ULPDU waiting for the send poller.
    term: Option<([u8; TERM_FPDU_MAX], usize)>,
}

#[derive(Debug)]
struct Qp {
    id: QpId,
    shared: Arc<QpShared>,
    pd: PdId,
    send_cq: Arc<CompletionQueue>,
    recv_cq: Arc<CompletionQueue>,
    state: QpState,
    sq: VecDeque<SqEntry>,
    sq_head_seq: u64,
    sq_next_seq: u64,
    rq: VecDeque<RecvWr>,
    orq: VecDeque<OrqEntry>,
    ord: u32,
    irq: VecDeque<Inbound>,
    ird: InboundReadQueue,
    tx: Option<TxMsg>,
    conn: Option<Conn>,
    /// Placed octets of the Read Response in progress (for its completion length).
    read_placed: u64,
    disconnect_requested: bool,
    /// Most Reads ever in flight at once (ORD high-water mark, for tests and stats).
    orq_high: u32,
    /// RFC 7306 in use on this connection (from [`QpShared::rfc7306`] at connect/accept).
    rfc7306: bool,
    /// A local error found while starting a message (an atomic target gone), reported by
    /// the send poller.
    tx_fault: Option<ProtocolError>,
}

/// What the application may inspect about a queue pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInfo {
    /// State.
    pub state: QpState,
    /// Negotiated IRD.
    pub ird: u32,
    /// Negotiated ORD.
    pub ord: u32,
    /// Most outbound Reads that were ever in flight at once (never above `ord`).
    pub reads_in_flight_max: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReqPhase {
    Reading,
    Waiting,
    Rejecting,
    Closing,
}

#[derive(Debug)]
struct PendingReq {
    tcp: ConnId,
    responder: Box<Responder>,
    listener: u32,
    phase: ReqPhase,
    remote: (Ipv4Address, u16),
}

#[derive(Debug)]
struct Listener {
    tcp: warpcore_tcp::ListenerId,
    params: MpaParams,
}

/// What went wrong while handling one received ULPDU.
enum RxFault {
    Protocol(ProtocolError),
    RemoteTerminate(TerminateReport),
}

impl From<ProtocolError> for RxFault {
    fn from(e: ProtocolError) -> Self {
        RxFault::Protocol(e)
    }
}
impl From<DdpError> for RxFault {
    fn from(e: DdpError) -> Self {
        RxFault::Protocol(ProtocolError::Ddp(e))
    }
}
impl From<RdmapError> for RxFault {
    fn from(e: RdmapError) -> Self {
        RxFault::Protocol(ProtocolError::Rdmap(e))
    }
}

/// Shared references the per-connection pollers need next to the QP itself.
struct Ctx<'a> {
    mrs: &'a MrTable,
    cfg: &'a EngineConfig,
    events: &'a mut VecDeque<CmEvent>,
    stats: &'a mut CoreStats,
}

/// One engine core over a device `D`: see the module documentation.
pub struct EngineCore<D: PollDevice> {
    core: u16,
    cfg: EngineConfig,
    stack: Stack<D>,
    mrs: Arc<MrTable>,
    qps: Vec<Option<Qp>>,
    /// Indices of the occupied slots of `qps`, ascending: the pollers walk only these, so
    /// a loop costs the same whatever the table's size.
    live: Vec<usize>,
    generations: Vec<u32>,
    listeners: Vec<Listener>,
    requests: Vec<Option<PendingReq>>,
    req_generations: Vec<u32>,
    /// TCP connections whose QP is gone, released once TCP finished closing.
    zombies: Vec<ConnId>,
    events: VecDeque<CmEvent>,
    clock_base: StdInstant,
    now: Instant,
    gather: Box<[u8]>,
    fpdu: Box<[u8]>,
    stats: CoreStats,
}

impl<D: PollDevice> std::fmt::Debug for EngineCore<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineCore")
            .field("core", &self.core)
            .field("qps", &self.qps.iter().filter(|q| q.is_some()).count())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

/// The tagged lookup done once per segment, before DDP validation: DDP does the TO range,
/// wrap and bounds arithmetic on the region it returns (DDP-7.1-10..14).
struct TaggedView(Result<TaggedRegion, TaggedFault>);

impl TaggedBuffers for TaggedView {
    fn tagged_region(&self, _stag: u32, _rsvd_ulp: u8) -> Result<TaggedRegion, TaggedFault> {
        self.0
    }
}

/// The untagged queues of a stream as DDP sees them: QN 0 is the receive queue, QN 1 the
/// inbound Read Request slots (IRD is accounted by RDMAP), QN 2 the Terminate slot. QN 3
/// (Atomic Responses) is not a queue without RFC 7306 atomics.
struct UntaggedView {
    rq_head_len: Option<u64>,
    /// QN 3 is a queue when RFC 7306 is in use (EXT-5.2-2).
    rfc7306: bool,
}

impl UntaggedBuffers for UntaggedView {
    fn queue_valid(&self, qn: u32) -> bool {
        qn <= qn::TERMINATE || (self.rfc7306 && qn == qn::ATOMIC_RESPONSE)
    }
    fn buffer_len(&self, q: u32, _msn: u32) -> Option<u64> {
        match q {
            qn::SEND => self.rq_head_len,
            qn::READ_REQUEST => Some(64),
            qn::TERMINATE => Some(TERMINATE_SEGMENT_MAX_LEN as u64),
            // The requester keeps room for every outstanding response: ORD bounds them (EXT-5.2.2-4).
            qn::ATOMIC_RESPONSE if self.rfc7306 => Some(64),
            _ => None,
        }
    }
}

/// The IRD/ORD we announce: at most our configured limit, except 0x3FFF ("not negotiated",
/// RFC 6581 §9.1), which goes on the wire as is.
fn clamp_offer(v: u16, max: u16) -> u16 {
    if v >= IRD_ORD_NO_NEGOTIATION {
        IRD_ORD_NO_NEGOTIATION
    } else {
        v.min(max)
    }
}

fn clamp_ird_ord(v: u16, max: u16) -> u32 {
    // 0x3FFF: not negotiated, left to the ULP (RFC 6581 §9.1); we use our limit.
    if v >= 0x3FFF {
        u32::from(max)
    } else {
        u32::from(v.min(max))
    }
}

/// Scatters `data` at message offset `mo` over the SGEs of a receive buffer.
fn scatter(mrs: &MrTable, pd: PdId, sges: &[Sge], mo: u64, data: &[u8]) -> Result<(), DdpError> {
    let mut off = mo;
    let mut rest = data;
    for s in sges {
        if rest.is_empty() {
            break;
        }
        let l = u64::from(s.len);
        if off >= l {
            off -= l;
            continue;
        }
        let n = (l - off).min(rest.len() as u64) as usize;
        let g = mrs
            .lookup_local(Stag(s.stag), pd, true)
            .map_err(|_| DdpError::LocalCatastrophic)?;
        let to = s.to.checked_add(off).ok_or(DdpError::LocalCatastrophic)?;
        g.place_at(to, &rest[..n])
            .map_err(|_| DdpError::LocalCatastrophic)?;
        rest = &rest[n..];
        off = 0;
    }
    if rest.is_empty() {
        Ok(())
    } else {
        // DDP checked MO + length against the buffer length; this cannot happen.
        Err(DdpError::UntaggedTooLong)
    }
}

/// Gathers `out.len()` octets at message offset `offset` from the SGEs of a send request.
fn gather(mrs: &MrTable, pd: PdId, sges: &[Sge], offset: u64, out: &mut [u8]) -> bool {
    let mut off = offset;
    let mut done = 0usize;
    for s in sges {
        if done == out.len() {
            break;
        }
        let l = u64::from(s.len);
        if off >= l {
            off -= l;
            continue;
        }
        let n = (l - off).min((out.len() - done) as u64) as usize;
        let Ok(g) = mrs.lookup_local(Stag(s.stag), pd, false) else {
            return false;
        };
        let Some(to) = s.to.checked_add(off) else {
            return false;
        };
        if g.copy_out_at(to, &mut out[done..done + n]).is_err() {
            return false;
        }
        done += n;
        off = 0;
    }
    done == out.len()
}

/// Frames one ULPDU (`hdr` then `payload`) into the connection's TCP send buffer: straight
/// into the buffer when the free space is contiguous, through `scratch` when it wraps.
/// Returns false, having changed nothing, when the send buffer lacks room.
fn send_fpdu<D: PollDevice>(
    stack: &mut Stack<D>,
    tcp: ConnId,
    framer: &mut Framer,
    hdr: &[u8],
    payload: &[u8],
    scratch: &mut [u8],
) -> bool {
    let need = framer.fpdu_wire_len(hdr.len() + payload.len());
    match stack.send_space(tcp) {
        Ok(s) if s >= need => {}
        _ => return false,
    }
    let direct = stack.send_with(tcp, |buf| {
        if buf.len() >= need {
            framer.emit(&[hdr, payload], buf).unwrap_or(0)
        } else {
            0
        }
    });
    match direct {
        Ok(n) if n == need => return true,
        Ok(0) => {}
        _ => return false,
    }
    let Ok(n) = framer.emit(&[hdr, payload], scratch) else {
        return false;
    };
    let mut off = 0;
    while off < n {
        match stack.send(tcp, &scratch[off..n]) {
            Ok(k) if k > 0 => off += k,
            _ => break,
        }
    }
    // The space was checked above, so the FPDU always goes in whole.
    debug_assert_eq!(off, n);
    true
}

/// Frames the ULPDU `hdr` + `plen` payload octets, which `fill` copies out of registered
/// memory, into the connection's TCP send buffer. When no marker falls inside the FPDU and
/// the buffer's free space is contiguous, `fill` writes the payload straight into the send
/// buffer at its place in the FPDU and the framer writes the fields and the CRC around it
/// ([`Framer::emit_in_place`]): one copy of the payload. Otherwise the payload is gathered
/// into `gbuf` first and framed by [`send_fpdu`]. `Ok(false)`: no room, nothing changed;
/// `Err(())`: `fill` failed (the local region went away), nothing sent.
#[allow(clippy::too_many_arguments)]
fn send_fpdu_from<D: PollDevice>(
    stack: &mut Stack<D>,
    tcp: ConnId,
    framer: &mut Framer,
    hdr: &[u8],
    plen: usize,
    fill: &mut dyn FnMut(&mut [u8]) -> bool,
    gbuf: &mut [u8],
    scratch: &mut [u8],
) -> Result<bool, ()> {
    let ulen = hdr.len() + plen;
    let need = framer.fpdu_wire_len(ulen);
    if need == fpdu::fpdu_len(ulen) {
        let at = fpdu::ULPDU_LENGTH_LEN + hdr.len();
        let mut failed = false;
        let direct = stack.send_with(tcp, |buf| {
            if buf.len() < need {
                return 0;
            }
            if !fill(&mut buf[at..at + plen]) {
                failed = true;
                return 0;
            }
            match framer.emit_in_place(hdr, plen, buf) {
                Ok(Some(n)) => n,
                _ => 0,
            }
        });
        if failed {
            return Err(());
        }
        match direct {
            Ok(n) if n == need => return Ok(true),
            Ok(0) => {}
            _ => return Ok(false),
        }
    }
    let Some(g) = gbuf.get_mut(..plen) else {
        return Err(());
    };
    if !fill(g) {
        return Err(());
    }
    Ok(send_fpdu(stack, tcp, framer, hdr, g, scratch))
}

impl Qp {
    fn complete_send(&self, e: &SqEntry, status: WcStatus) {
        let opcode = match e.wr.op {
            SendOp::Write { .. } => WcOpcode::Write,
            SendOp::Read { .. } => WcOpcode::Read,
            SendOp::AtomicFetchAdd { .. } => WcOpcode::AtomicFetchAdd,
            SendOp::AtomicCmpSwap { .. } => WcOpcode::AtomicCmpSwap,
            SendOp::WriteWithImm { .. } => WcOpcode::WriteWithImm,
            SendOp::Immediate { .. } => WcOpcode::Immediate,
            SendOp::BindMw { .. } => WcOpcode::BindMw,
            SendOp::FastReg { .. } => WcOpcode::FastReg,
            SendOp::LocalInvalidate { .. } => WcOpcode::LocalInvalidate,
            _ => WcOpcode::Send,
        };
        self.send_cq.push(Completion {
            wr_id: e.wr.wr_id,
            qp: self.id,
            opcode,
            status,
            byte_len: e.byte_len,
            solicited: false,
            invalidated: None,
            imm: None,
            atomic_orig: if status == WcStatus::Success {
                e.atomic_orig
            } else {
                None
            },
        });
    }

    /// Retires done requests from the head of the send queue, in order: operations complete
    /// in submission order (RDMAP-5.5-8), a Read only once its Read Response was delivered
    /// (RDMAP-5.5-12); unsignalled successes retire without an entry.
    fn retire_sq(&mut self) -> bool {
        let mut any = false;
        while let Some(e) = self.sq.front() {
            let Some(status) = e.status else { break };
            if e.wr.signaled || status != WcStatus::Success {
                self.complete_send(e, status);
            }
            self.sq.pop_front();
            self.sq_head_seq += 1;
            self.shared.release_sq();
            any = true;
        }
        any
    }

    /// Records an outstanding Read or Atomic Request (ORD, RDMAP-6.1-1, EXT-5.2-1), in the
    /// order its response must come back, and the high-water mark of the queue.
    fn push_outstanding(&mut self, entry: OrqEntry) {
        self.orq.push_back(entry);
        self.orq_high = self.orq_high.max(self.orq.len() as u32);
    }

    fn entry_mut(&mut self, seq: u64) -> Option<&mut SqEntry> {
        let i = seq.checked_sub(self.sq_head_seq)?;
        self.sq.get_mut(usize::try_from(i).ok()?)
    }

    fn set_state(&mut self, s: QpState) {
        self.state = s;
        self.shared.set_state(s);
    }

    /// Moves to the error state and flushes every outstanding work request: those not done
    /// complete with [`WcStatus::FlushErr`] (done ones keep their status), in queue order
    /// (RDMAP-6.2.1-2: after a Terminate everything outstanding completes in error).
    fn flush(&mut self) {
        self.set_state(QpState::Error);
        for e in self.sq.iter_mut() {
            if e.status.is_none() {
                e.status = Some(WcStatus::FlushErr);
            }
        }
        self.retire_sq();
        self.sq_next_seq = self.sq_head_seq;
        while let Some(r) = self.rq.pop_front() {
            self.recv_cq.push(Completion {
                wr_id: r.wr_id,
                qp: self.id,
                opcode: WcOpcode::Recv,
                status: WcStatus::FlushErr,
                byte_len: 0,
                solicited: false,
                invalidated: None,
                imm: None,
                atomic_orig: None,
            });
            self.shared.release_rq();
        }
        self.orq.clear();
        self.irq.clear();
        self.tx = None;
    }

    /// A local failure found while starting work at the sending position (`tx_fault`):
    /// fail the QP with it as [`Self::fail_local`] does. Returns whether there was one.
    fn fail_tx_fault(
        &mut self,
        mrs: &MrTable,
        cfg: &EngineConfig,
        events: &mut VecDeque<CmEvent>,
        stats: &mut CoreStats,
    ) -> bool {
        let Some(err) = self.tx_fault.take() else {
            return false;
        };
        let mut ctx = Ctx {
            mrs,
            cfg,
            events,
            stats,
        };
        self.fail_local(err, None, &mut ctx);
        true
    }

    /// A protocol error found here: queue the Terminate the specs prescribe (RDMAP-06
    /// §4.8, §7.1; RDMAP-6.2.1-1, RDMAP-7.1-3/4; DDP-7.1-15/16; MPA-8-*), flush, report
    /// to the local ULP (RDMAP-7.1-1). The Terminate goes out on the next send poll, ahead of
    /// everything else and as the stream's last message (RDMAP-5.4-6); then TCP is closed
    /// gracefully so that it arrives (RDMAP-6.2.1-4). Only the first error is reported
    /// (RDMAP-7.1-5): later calls do nothing.
    fn fail_local(&mut self, err: ProtocolError, offending: Option<&[u8]>, ctx: &mut Ctx<'_>) {
        if matches!(self.state, QpState::Terminate | QpState::Error) {
            return;
        }
        if let Some(conn) = self.conn.as_mut() {
            let mut buf = [0u8; TERM_FPDU_MAX];
            let off = offending.map(Offending::new);
            if let Ok(n) = emit_terminate(err, off.as_ref(), &mut buf) {
                conn.term = Some((buf, n));
            }
        }
        self.flush();
        self.set_state(QpState::Terminate);
        ctx.events.push_back(CmEvent::Error {
            qp: self.id,
            error: ConnError::LocalTerminate(err),
        });
    }

    fn remote_terminate(&mut self, report: TerminateReport, ctx: &mut Ctx<'_>) {
        ctx.stats.terminates_rx += 1;
        // A Terminate that names one of our Read Requests fails that Read with the
        // peer's verdict (RDMAP-06 §4.8 copies the Read Request header); everything
        // else outstanding is flushed and the decoded Terminate goes to the application.
        if matches!(
            report.opcode,
            Some(Opcode::ReadRequest | Opcode::AtomicRequest)
        ) {
            let access = report.code.etype() == 1 && report.code.layer() <= 1;
            let status = if access {
                WcStatus::RemoteAccess
            } else {
                WcStatus::RemoteOperation
            };
            if let Some(seq) = self.orq.front().and_then(|o| o.seq) {
                if let Some(e) = self.entry_mut(seq) {
                    e.status = Some(status);
                }
            }
        }
        self.flush();
        // The stream is dead: close TCP once the send poller runs (RDMAP-06 §5.4).
        self.disconnect_requested = true;
        ctx.events.push_back(CmEvent::Error {
            qp: self.id,
            error: ConnError::RemoteTerminate(report),
        });
    }

    fn setup_fpdu_mode(&mut self, n: &Negotiated, cfg: &EngineConfig) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        conn.framer = Some(Framer::new(FramerConfig {
            markers: n.markers_tx,
            crc: n.crc,
            mulpdu: fpdu::mulpdu(cfg.emss(), n.markers_tx),
            // Markers count from the first octet of FPDU mode (mpa-08 §7.1.2 rule 7).
            stream_offset: 0,
        }));
        conn.deframer = Some(Deframer::new(DeframerConfig {
            markers: n.markers_rx,
            crc: n.crc,
            max_ulpdu_len: MAX_ULPDU_LEN,
            stream_offset: 0,
        }));
        self.ird = InboundReadQueue::new(clamp_ird_ord(n.local_ird, cfg.max_ird));
        self.ord = clamp_ird_ord(n.local_ord, cfg.max_ord);
        conn.rtr_pending = n.rtr;
        // RFC 7306 is agreed out of band (no MPA bit): fixed for the connection now.
        self.rfc7306 = self.shared.rfc7306();
    }

    fn established_event(&self, n: &Negotiated) -> CmEvent {
        CmEvent::Established(Established {
            qp: self.id,
            rev: (n.rev_sent, n.rev_received),
            crc: n.crc,
            markers: (n.markers_tx, n.markers_rx),
            ird: self.ird.ird() as u16,
            ord: self.ord as u16,
            peer_ird_ord: n.peer_ird.zip(n.peer_ord),
            rtr: n.rtr,
            rtr_accepted: n.rtr_accepted,
            private_data: n.peer_private_data.clone(),
        })
    }

    /// Drains the initiator's events (after input or a timeout).
    fn drive_initiator(&mut self, ctx: &mut Ctx<'_>) {
        loop {
            let ev = match self.conn.as_mut().map(|c| &mut c.mpa) {
                Some(Mpa::Initiator(i)) => i.poll_event(),
                _ => None,
            };
            let Some(ev) = ev else { break };
            match ev {
                nego::Event::Established(n) => {
                    self.setup_fpdu_mode(&n, ctx.cfg);
                    self.set_state(QpState::Rts);
                    ctx.events.push_back(self.established_event(&n));
                }
                nego::Event::Rejected(r) => {
                    self.flush();
                    ctx.events.push_back(CmEvent::Rejected {
                        qp: self.id,
                        private_data: r.peer.private_data,
                    });
                    if let Some(c) = self.conn.as_mut() {
                        c.mpa = Mpa::Done;
                        c.fin_sent = false;
                    }
                    self.disconnect_requested = true;
                }
                nego::Event::Failed(f) => {
                    if let Some(n) = f.terminate.as_ref() {
                        self.setup_fpdu_mode(n, ctx.cfg);
                        if let Some(c) = self.conn.as_mut() {
                            let mut buf = [0u8; TERM_FPDU_MAX];
                            let err = ProtocolError::Mpa(f.error.mpa_error());
                            if let Ok(len) = emit_terminate(err, None, &mut buf) {
                                c.term = Some((buf, len));
                            }
                            c.rtr_pending = None;
                            c.mpa = Mpa::Done;
                        }
                    }
                    self.flush();
                    self.disconnect_requested = true;
                    if self.conn.as_ref().is_some_and(|c| c.term.is_some()) {
                        self.set_state(QpState::Terminate);
                    }
                    ctx.events.push_back(CmEvent::Error {
                        qp: self.id,
                        error: ConnError::Negotiation(f.error),
                    });
                }
                nego::Event::Request(_) => {}
            }
        }
    }

    /// Consumes received stream octets: MPA startup frames, then FPDUs. Returns how many
    /// octets were consumed.
    fn consume(&mut self, data: &[u8], ctx: &mut Ctx<'_>) -> usize {
        let mut used = 0;
        if let Some(Mpa::Initiator(i)) = self.conn.as_mut().map(|c| &mut c.mpa) {
            if i.phase() == nego::Phase::AwaitingFrame {
                used += i.handle_input(data);
                self.drive_initiator(ctx);
            }
        }
        if !matches!(self.state, QpState::Rts | QpState::Closing) {
            // Nothing more is delivered after a Terminate or an error (DDP-7.1-17): the
            // octets are dropped so that TCP keeps its window open while it closes.
            return if matches!(self.state, QpState::Terminate | QpState::Error) {
                data.len()
            } else {
                used
            };
        }
        let Some(mut d) = self.conn.as_mut().and_then(|c| c.deframer.take()) else {
            return used;
        };
        loop {
            match d.poll(&data[used..]) {
                Ok((n, Some(ulpdu))) => {
                    used += n;
                    ctx.stats.fpdus_rx += 1;
                    match self.rx_ulpdu(&ulpdu, ctx) {
                        Ok(()) => {}
                        Err(RxFault::Protocol(e)) => {
                            self.fail_local(e, Some(&ulpdu), ctx);
                            used = data.len();
                            break;
                        }
                        Err(RxFault::RemoteTerminate(r)) => {
                            self.remote_terminate(r, ctx);
                            used = data.len();
                            break;
                        }
                    }
                }
                Ok((n, None)) => {
                    used += n;
                    break;
                }
                Err(e) => {
                    // CRC or marker error (MPA-8-*): Terminate with the MPA code, no copied
                    // header (the FPDU is not trustworthy).
                    self.fail_local(ProtocolError::Mpa(e), None, ctx);
                    used = data.len();
                    break;
                }
            }
        }
        if let Some(c) = self.conn.as_mut() {
            c.deframer = Some(d);
        }
        used
    }

    /// Validates and places one ULPDU (one DDP segment).
    fn rx_ulpdu(&mut self, ulpdu: &[u8], ctx: &mut Ctx<'_>) -> Result<(), RxFault> {
        let conn = self
            .conn
            .as_mut()
            .ok_or(RxFault::Protocol(ProtocolError::Mpa(
                MpaError::LocalCatastrophic,
            )))?;
        // MPA fencing and the peer-to-peer RTR (MPA-7.1.2-16, MPA2-5-1).
        // An initiator that finds no RTR in common sends a Terminate instead of an RTR
        // (MPA2-9.2-10/11): it is decoded below like any Terminate, so our user learns the
        // peer's verdict rather than seeing us answer a Terminate with a Terminate.
        // Parsed here only while the fence holds (the first ULPDU), not per FPDU.
        if matches!(conn.mpa, Mpa::Responder(_))
            && Segment::parse(ulpdu)
                .is_ok_and(|s| matches!(s.repr.header, RdmapHeader::Terminate(_)))
        {
            conn.mpa = Mpa::Done;
        }
        if let Mpa::Responder(r) = &mut conn.mpa {
            let first = r
                .handle_first_ulpdu(ulpdu)
                .map_err(|e| ProtocolError::Mpa(e.mpa_error()))?;
            conn.mpa = Mpa::Done;
            match first {
                None => {}
                Some(RtrType::Write) => return Ok(()),
                Some(RtrType::Send) => {
                    // The Send RTR took MSN 1 of QN 0 and consumes no receive buffer.
                    let _ = conn.ddp_rx.set_expected_msn(qn::SEND, 2);
                    return Ok(());
                }
                Some(RtrType::Read) => {
                    // The Read RTR takes MSN 1 of QN 1 and one IRD credit; it is answered
                    // with a zero-length Read Response (RFC 6581 §9.2).
                    let _ = conn.ddp_rx.set_expected_msn(qn::READ_REQUEST, 2);
                    if let Ok(seg) = Segment::parse(ulpdu) {
                        if let RdmapHeader::ReadRequest(rr) = seg.repr.header {
                            self.ird.admit()?;
                            self.irq.push_back(Inbound::Read(ReadResponsePlan {
                                sink_stag: rr.sink_stag,
                                sink_to: rr.sink_to,
                                src_stag: rr.src_stag,
                                src_to: rr.src_to,
                                len: 0,
                            }));
                        }
                    }
                    return Ok(());
                }
            }
        }
        let seg = Segment::parse(ulpdu).map_err(|e| e.protocol_error())?;
        // RFC 7306 opcodes only where the connection uses RFC 7306; otherwise 0/2/06 as for
        // an RFC 5040 receiver (EXT-8.2-2, EXT-1.1-1).
        let rdmap_cfg = RdmapConfig {
            atomics: self.rfc7306,
            immediate_data: self.rfc7306,
        };
        check_inbound(&seg.repr, &rdmap_cfg)?;
        // A QP on a shared receive queue claims the oldest buffer there for a message on
        // QN 0 when it holds none (module `srq`); none there: no buffer, as below.
        if self.rq.is_empty() {
            if let warpcore_proto::wire::ddp::DdpBuffer::Untagged { qn: qn::SEND, .. } =
                seg.repr.buffer
            {
                if let Some(wr) = self.shared.srq().and_then(|q| q.claim()) {
                    self.shared.claim_rq();
                    self.rq.push_back(wr);
                }
            }
        }
        let opcode = seg.repr.opcode;
        let immediate = matches!(opcode, Opcode::ImmediateData | Opcode::ImmediateDataSe);
        // One STag lookup per segment: key, protection domain and access here, bounds on
        // the guard below (DDP-7.1-10..14, DDP-8.2-1, RDMAP-8.1.1-6). Zero-length tagged
        // segments are not looked up at all (DDP-5.2-11).
        let mut guard: Option<MrGuard<'_>> = None;
        let mut tagged = TaggedView(Err(TaggedFault::InvalidStag));
        if let warpcore_proto::wire::ddp::DdpBuffer::Tagged { stag, .. } = seg.repr.buffer {
            if !seg.payload.is_empty() {
                let need = if opcode == Opcode::ReadResponse {
                    Access::LOCAL_WRITE
                } else {
                    Access::REMOTE_WRITE
                };
                match ctx
                    .mrs
                    .lookup_remote(Stag(stag), self.pd, self.id.stream(), need)
                {
                    Ok(g) => {
                        tagged = TaggedView(Ok(g.tagged_region()));
                        guard = Some(g);
                    }
                    Err(_)
                        if opcode == Opcode::ReadResponse
                            && self
                                .orq
                                .front()
                                .is_some_and(|h| h.atomic.is_none() && h.sink_stag == stag) =>
                    {
                        // The sink of our own Read went away under it (deregistered or
                        // invalidated locally): a local fault, not the peer's (departure 8).
                        if let Some(seq) = self.orq.front().and_then(|h| h.seq) {
                            if let Some(e) = self.entry_mut(seq) {
                                e.status = Some(WcStatus::LocalProtection);
                            }
                        }
                        return Err(RdmapError::LocalCatastrophic.into());
                    }
                    Err(f) => tagged = TaggedView(Err(f.tagged_fault())),
                }
            }
        }
        // Immediate Data consumes a receive buffer whatever its length: the 8 octets go
        // into the completion, not into the buffer (EXT-6.3-2; departure in docs/engine.md).
        let untagged = UntaggedView {
            rq_head_len: self.rq.front().map(|r| {
                if immediate {
                    r.sges.total_len().max(8)
                } else {
                    r.sges.total_len()
                }
            }),
            rfc7306: self.rfc7306,
        };
        let Some(placement) = conn.ddp_rx.handle_segment(ulpdu, &tagged, &untagged)? else {
            return Ok(());
        };
        match placement {
            Placement::Tagged(p) => {
                let data = ulpdu
                    .get(p.payload_offset..p.payload_offset + p.payload_len)
                    .unwrap_or(&[]);
                if opcode == Opcode::ReadResponse {
                    // Read Responses answer our Reads in order (RDMAP-5.2.2-4, RDMAP-5.5-13);
                    // the optional STag check of RDMAP-5.2.2-5 is made.
                    let head = self
                        .orq
                        .front()
                        .copied()
                        .filter(|h| h.atomic.is_none())
                        .ok_or(RdmapError::UnexpectedOpcode)?;
                    if !data.is_empty() && p.stag != head.sink_stag {
                        return Err(DdpError::TaggedInvalidStag.into());
                    }
                }
                if let Some(g) = guard.as_ref() {
                    // DDP checked the range on this very registration; the guard checks it
                    // again as it copies, so no octet can land outside the region.
                    g.place_at(p.to, data).map_err(BoundsFault::ddp_error)?;
                    ctx.stats.placed_octets += data.len() as u64;
                }
                if opcode == Opcode::ReadResponse {
                    self.read_placed += data.len() as u64;
                    if p.last {
                        if let Some(head) = self.orq.pop_front() {
                            let placed = self.read_placed;
                            self.read_placed = 0;
                            if let Some(seq) = head.seq {
                                let complete = placed == u64::from(head.len);
                                if let Some(e) = self.entry_mut(seq) {
                                    e.byte_len = placed as u32;
                                    e.status = Some(if complete {
                                        WcStatus::Success
                                    } else {
                                        WcStatus::RemoteOperation
                                    });
                                }
                            }
                            self.retire_sq();
                        }
                    }
                }
            }
            Placement::Untagged(p) => match p.qn {
                qn::SEND if immediate => {
                    let RdmapHeader::ImmediateData(h) = seg.repr.header else {
                        return Err(RdmapError::UnexpectedOpcode.into());
                    };
                    // One message in one segment (check_inbound); it completes the head
                    // receive in MSN order with the value (EXT-6.3-2, EXT-6.3-3, RDMAP-5.5-2).
                    if p.message_len.is_some() {
                        if let Some(r) = self.rq.pop_front() {
                            self.shared.release_rq();
                            self.recv_cq.push(Completion {
                                wr_id: r.wr_id,
                                qp: self.id,
                                opcode: WcOpcode::RecvImm,
                                status: WcStatus::Success,
                                byte_len: 0,
                                solicited: opcode == Opcode::ImmediateDataSe,
                                invalidated: None,
                                imm: Some(u64::from_be_bytes(h.data)),
                                atomic_orig: None,
                            });
                        }
                    }
                }
                qn::SEND => {
                    let data = ulpdu
                        .get(p.payload_offset..p.payload_offset + p.payload_len)
                        .unwrap_or(&[]);
                    let head = self.rq.front().ok_or(DdpError::UntaggedNoBuffer)?;
                    let inv_stag = seg.repr.invalidate_stag();
                    if let Some(inv) = inv_stag {
                        // RDMAP-5.3-11/12, RDMAP-7.2-4/5, RDMAP-8.1.1-8: every segment
                        // carries the Invalidate STag (RDMAP-4.1-3); it is checked before
                        // the segment is placed, so a refused Send with Invalidate places
                        // nothing (the issue's security matrix).
                        ctx.mrs
                            .check_invalidate_remote(Stag(inv), self.pd, self.id.stream())
                            .map_err(invalidate_error)?;
                    }
                    scatter(
                        ctx.mrs,
                        self.pd,
                        head.sges.as_slice(),
                        u64::from(p.mo),
                        data,
                    )?;
                    ctx.stats.placed_octets += data.len() as u64;
                    if let Some(len) = p.message_len {
                        let mut invalidated = None;
                        if let Some(inv) = inv_stag {
                            // Invalidated at delivery, checked again: a local operation
                            // (Local Invalidate, bind, deregistration) may have changed the
                            // STag since the check above; then the Terminate goes out now
                            // and the placed payload is flushed with the receive
                            // (`MrTable::invalidate_remote`; docs/engine.md departure 24).
                            ctx.mrs
                                .invalidate_remote(Stag(inv), self.pd, self.id.stream())
                                .map_err(invalidate_error)?;
                            invalidated = Some(inv);
                        }
                        // Delivered once, in MSN order, after DDP delivery (RDMAP-5.5-2,
                        // RDMAP-5.5-9, DDP-5.4-1).
                        if let Some(r) = self.rq.pop_front() {
                            self.shared.release_rq();
                            self.recv_cq.push(Completion {
                                wr_id: r.wr_id,
                                qp: self.id,
                                opcode: WcOpcode::Recv,
                                status: WcStatus::Success,
                                byte_len: len,
                                solicited: opcode.is_solicited(),
                                invalidated,
                                imm: None,
                                atomic_orig: None,
                            });
                        }
                    }
                }
                qn::READ_REQUEST if opcode == Opcode::AtomicRequest => {
                    let RdmapHeader::AtomicRequest(ar) = seg.repr.header else {
                        return Err(RdmapError::UnexpectedOpcode.into());
                    };
                    // Atomic Requests count against IRD next to Read Requests (EXT-5.2-1).
                    self.ird.admit()?;
                    // AOpCode, alignment (0/2/07, EXT-5.2.1-2), STag, bounds, then the
                    // REMOTE_ATOMIC right: a region grants atomics only with it, so the
                    // right stands for both remote rights proto's check asks for.
                    let pd = self.pd;
                    let stream = self.id.stream();
                    let checked = handle_atomic_request(&ar, |stag| {
                        let g = ctx
                            .mrs
                            .lookup_remote(Stag(stag), pd, stream, Access::empty())
                            .map_err(LookupFault::stag_fault)?;
                        let atomic_ok = g.access().contains(Access::REMOTE_ATOMIC);
                        let mut a = g.access_region();
                        a.remote_read = atomic_ok;
                        a.remote_write = atomic_ok;
                        Ok(a)
                    });
                    if let Err(e) = checked {
                        self.ird.retire();
                        return Err(e.into());
                    }
                    // Executed when its turn comes to be answered, after every earlier
                    // Read Response was read (responses in request order, EXT-5.2.2-6).
                    self.irq.push_back(Inbound::Atomic(ar));
                }
                qn::ATOMIC_RESPONSE => {
                    let RdmapHeader::AtomicResponse(resp) = seg.repr.header else {
                        return Err(RdmapError::UnexpectedOpcode.into());
                    };
                    // Responses come back in request order, Reads and Atomics together;
                    // one that answers nothing outstanding is an unexpected opcode (as an
                    // unsolicited Read Response, departure 3).
                    let head = self.orq.front().copied();
                    let Some(head) = head.filter(|h| h.atomic == Some(resp.orig_request_id)) else {
                        return Err(RdmapError::UnexpectedOpcode.into());
                    };
                    self.orq.pop_front();
                    let orig = resp.orig_value;
                    if let Some(seq) = head.seq {
                        let sink = self
                            .entry_mut(seq)
                            .and_then(|e| e.wr.sges.as_slice().first().copied());
                        let mut status = WcStatus::Success;
                        if let Some(s) = sink {
                            // The original value into the local SGE in host byte order,
                            // as ibverbs returns it.
                            let ok = ctx
                                .mrs
                                .lookup_local(Stag(s.stag), self.pd, true)
                                .ok()
                                .is_some_and(|g| g.place_at(s.to, &orig.to_ne_bytes()).is_ok());
                            if !ok {
                                status = WcStatus::LocalProtection;
                            }
                        }
                        if let Some(e) = self.entry_mut(seq) {
                            e.status = Some(status);
                            e.atomic_orig = Some(orig);
                        }
                        // The local SGE's region went away under the posted atomic: the
                        // stream ends with a local catastrophic Terminate (departure 8),
                        // the atomic keeps its local protection completion.
                        if status != WcStatus::Success {
                            return Err(RdmapError::LocalCatastrophic.into());
                        }
                    }
                    self.retire_sq();
                }
                qn::READ_REQUEST => {
                    let RdmapHeader::ReadRequest(rr) = seg.repr.header else {
                        return Err(RdmapError::UnexpectedOpcode.into());
                    };
                    // IRD (RDMAP-6.1-2): a Read beyond it breaks the negotiated ORD.
                    self.ird.admit()?;
                    let plan = handle_read_request(&rr, |stag| {
                        ctx.mrs
                            .lookup_remote(Stag(stag), self.pd, self.id.stream(), Access::empty())
                            .map(|g| g.access_region())
                            .map_err(LookupFault::stag_fault)
                    });
                    let plan = match plan {
                        Ok(p) => p,
                        Err(e) => {
                            self.ird.retire();
                            return Err(e.into());
                        }
                    };
                    self.irq.push_back(Inbound::Read(plan));
                }
                qn::TERMINATE => {
                    let RdmapHeader::Terminate(t) = seg.repr.header else {
                        return Err(RdmapError::UnexpectedOpcode.into());
                    };
                    // Delivered to the ULP decoded (RDMAP-5.4-5); we stop sending
                    // (RDMAP-5.4-7) and close.
                    return Err(RxFault::RemoteTerminate(TerminateReport::decode(&t)));
                }
                _ => return Err(DdpError::UntaggedInvalidQn.into()),
            },
        }
        Ok(())
    }

    /// Whether FPDUs other than the RTR may go out now (MPA2-5-1, MPA-7.1.2-16).
    fn can_send_fpdus(&self) -> bool {
        match self.conn.as_ref().map(|c| &c.mpa) {
            Some(Mpa::Done) => true,
            Some(Mpa::Initiator(i)) => i.can_send_fpdus(),
            Some(Mpa::Responder(r)) => r.can_send_fpdus(),
            None => false,
        }
    }

    /// Starts the next message: Read Responses first, in the order of their requests
    /// (RDMAP-5.2.2-4, RDMAP-5.5-13), then the send queue in posting order (RDMAP-5.5-6).
    /// A Read Response reads its source as it is sent, which may be after later Writes were
    /// placed (RDMAP-5.5-5 allows it; a requester that needs otherwise fences).
    fn start_next(&mut self, cfg: &EngineConfig, mrs: &MrTable) -> Option<TxMsg> {
        // Binds, fast registrations and Local Invalidates at the sending position run
        // here, in order, without a message (module `local`).
        let _ = self.run_local_ops(mrs);
        if self.tx_fault.is_some() {
            return None;
        }
        let conn = self.conn.as_mut()?;
        let mulpdu = conn.framer.as_ref()?.max_ulpdu_len();
        match self.irq.pop_front() {
            Some(Inbound::Read(plan)) => {
                let ctrl = Control::new(Opcode::ReadResponse).0;
                let seg = conn
                    .ddp_tx
                    .tagged(ctrl, plan.sink_stag, plan.sink_to, &[], plan.len, mulpdu)
                    .ok()?;
                return Some(TxMsg {
                    seg,
                    src: TxSrc::ReadResp(plan),
                });
            }
            Some(Inbound::Atomic(req)) => {
                // Executed now, in request order after every earlier Read Response was
                // read (EXT-5.2.2-6), atomically against every other atomic through this
                // engine on the same word (EXT-5-1, EXT-5.3-1): a compare-exchange loop
                // on the word's AtomicU64, which holds the value in host byte order
                // (EXT-5.1.1-1: the target memory's order; operands are big-endian on
                // the wire only).
                let orig = mrs
                    .lookup_remote(
                        Stag(req.remote_stag),
                        self.pd,
                        self.id.stream(),
                        Access::REMOTE_ATOMIC,
                    )
                    .ok()
                    .and_then(|g| {
                        let off = g.bounds(req.remote_to, 8).ok()?;
                        let w = g.atomic(off).ok()?;
                        let mut cur = w.load(std::sync::atomic::Ordering::Acquire);
                        loop {
                            let mut new = cur;
                            ext_atomic::execute(&req, &mut new).ok()?;
                            if new == cur {
                                // CmpSwap miss (or a no-op): nothing to store.
                                return Some(cur);
                            }
                            match w.compare_exchange_weak(
                                cur,
                                new,
                                std::sync::atomic::Ordering::AcqRel,
                                std::sync::atomic::Ordering::Acquire,
                            ) {
                                Ok(_) => return Some(cur),
                                Err(v) => cur = v,
                            }
                        }
                    });
                let Some(orig) = orig else {
                    // The region went away since the request was checked.
                    self.tx_fault = Some(ProtocolError::Rdmap(RdmapError::LocalCatastrophic));
                    return None;
                };
                let mut hdr = [0u8; 12];
                ext_atomic::response(&req, orig)
                    .emit(&mut AtomicResponse::new_unchecked(&mut hdr[..]));
                let seg = conn
                    .ddp_tx
                    .untagged(
                        Control::new(Opcode::AtomicResponse).0,
                        0,
                        qn::ATOMIC_RESPONSE,
                        &hdr,
                        0,
                        mulpdu,
                    )
                    .ok()?;
                return Some(TxMsg {
                    seg,
                    src: TxSrc::AtomicResp,
                });
            }
            None => {}
        }
        let _ = cfg;
        let idx = usize::try_from(self.sq_next_seq - self.sq_head_seq).ok()?;
        let e = self.sq.get(idx)?;
        // Read fence: wait until every earlier Read completed.
        if e.wr.fence && !self.orq.is_empty() {
            return None;
        }
        let len = e.wr.sges.total_len() as u32;
        let seq = self.sq_next_seq;
        let stage = e.stage;
        // A Write with Immediate is two messages; the request stays at the send position
        // until its second (Immediate Data) has started.
        let mut advance = true;
        let seg = match e.wr.op {
            // A local operation still here waits for its fence (`run_local_ops`).
            SendOp::BindMw { .. } | SendOp::FastReg { .. } | SendOp::LocalInvalidate { .. } => {
                return None
            }
            SendOp::WriteWithImm {
                remote_stag,
                remote_to,
                ..
            } if stage == 0 => {
                advance = false;
                conn.ddp_tx.tagged(
                    Control::new(Opcode::Write).0,
                    remote_stag,
                    remote_to,
                    &[],
                    len,
                    mulpdu,
                )
            }
            SendOp::WriteWithImm { imm, .. } | SendOp::Immediate { imm, .. } => {
                let op = match e.wr.op {
                    SendOp::Immediate {
                        solicited: true, ..
                    } => Opcode::ImmediateDataSe,
                    _ => Opcode::ImmediateData,
                };
                let mut hdr = [0u8; 8];
                ImmediateDataRepr {
                    data: imm.to_be_bytes(),
                }
                .emit(&mut ImmediateData::new_unchecked(&mut hdr[..]));
                conn.ddp_tx
                    .untagged(Control::new(op).0, 0, qn::SEND, &hdr, 0, mulpdu)
            }
            SendOp::AtomicFetchAdd { .. } | SendOp::AtomicCmpSwap { .. } => {
                // ORD bounds Reads and Atomics together (EXT-5.2-1): the queue waits.
                if self.orq.len() as u32 >= self.ord {
                    return None;
                }
                let id = seq as u32;
                let req = match e.wr.op {
                    SendOp::AtomicFetchAdd {
                        remote_stag,
                        remote_to,
                        add,
                        add_mask,
                    } => AtomicRequestRepr::fetch_add(id, remote_stag, remote_to, add, add_mask),
                    SendOp::AtomicCmpSwap {
                        remote_stag,
                        remote_to,
                        compare,
                        compare_mask,
                        swap,
                        swap_mask,
                    } => AtomicRequestRepr::cmp_swap(
                        id,
                        remote_stag,
                        remote_to,
                        swap,
                        swap_mask,
                        compare,
                        compare_mask,
                    ),
                    _ => return None,
                };
                let mut hdr = [0u8; 52];
                req.emit(&mut AtomicRequest::new_unchecked(&mut hdr[..]));
                let s = conn.ddp_tx.untagged(
                    Control::new(Opcode::AtomicRequest).0,
                    0,
                    qn::READ_REQUEST,
                    &hdr,
                    0,
                    mulpdu,
                );
                if s.is_ok() {
                    self.push_outstanding(OrqEntry {
                        seq: Some(seq),
                        sink_stag: 0,
                        len: 8,
                        atomic: Some(id),
                    });
                }
                s
            }
            SendOp::Send | SendOp::SendSe => {
                let op = if e.wr.op == SendOp::Send {
                    Opcode::Send
                } else {
                    Opcode::SendSe
                };
                conn.ddp_tx
                    .untagged(Control::new(op).0, 0, qn::SEND, &[], len, mulpdu)
            }
            SendOp::SendInvalidate { stag } | SendOp::SendSeInvalidate { stag } => {
                let op = if matches!(e.wr.op, SendOp::SendInvalidate { .. }) {
                    Opcode::SendInvalidate
                } else {
                    Opcode::SendSeInvalidate
                };
                conn.ddp_tx
                    .untagged(Control::new(op).0, stag, qn::SEND, &[], len, mulpdu)
            }
            SendOp::Write {
                remote_stag,
                remote_to,
            } => conn.ddp_tx.tagged(
                Control::new(Opcode::Write).0,
                remote_stag,
                remote_to,
                &[],
                len,
                mulpdu,
            ),
            SendOp::Read {
                remote_stag,
                remote_to,
            } => {
                // ORD (RDMAP-6.1-1): at most `ord` Reads in flight; the send queue waits.
                if self.orq.len() as u32 >= self.ord {
                    return None;
                }
                let sink = e.wr.sges.as_slice().first().copied().unwrap_or_default();
                let rr = ReadRequestRepr {
                    sink_stag: sink.stag,
                    sink_to: sink.to,
                    read_size: sink.len,
                    src_stag: remote_stag,
                    src_to: remote_to,
                };
                let mut hdr = [0u8; 28];
                rr.emit(&mut ReadRequest::new_unchecked(&mut hdr[..]));
                let s = conn.ddp_tx.untagged(
                    Control::new(Opcode::ReadRequest).0,
                    0,
                    qn::READ_REQUEST,
                    &hdr,
                    0,
                    mulpdu,
                );
                if s.is_ok() {
                    self.push_outstanding(OrqEntry {
                        seq: Some(seq),
                        sink_stag: sink.stag,
                        len: sink.len,
                        atomic: None,
                    });
                }
                s
            }
        };
        if let Some(e) = self.entry_mut(seq) {
            e.stage += 1;
        }
        if advance {
            self.sq_next_seq += 1;
        }
        match seg {
            Ok(seg) => Some(TxMsg {
                seg,
                src: TxSrc::Sq(seq),
            }),
            Err(_) => {
                // A request the segmenter refuses: `validate_send` refuses every such
                // request at post time (TO + length wrapping, `EngineError::RemoteToWrap`;
                // lengths), so this is a broken invariant, not a peer's doing. It fails as a
                // local error does (departure 8): a local protection completion, a local
                // catastrophic Terminate (0/0/FF) to the peer, later requests flushed.
                if !advance {
                    self.sq_next_seq += 1;
                }
                if let Some(e) = self.entry_mut(seq) {
                    e.status = Some(WcStatus::LocalProtection);
                }
                self.tx_fault = Some(ProtocolError::Rdmap(RdmapError::LocalCatastrophic));
                None
            }
        }
    }
}

impl<D: PollDevice> EngineCore<D> {
    /// A core numbered `core` over `device`. `clock_base` is the wall-clock instant that
    /// `Instant::ZERO` of the `now` arguments stands for (MPA timers use it).
    pub fn new(
        core: u16,
        device: D,
        stack_cfg: &StackConfig,
        cfg: EngineConfig,
        mrs: Arc<MrTable>,
        clock_base: StdInstant,
        now: Instant,
    ) -> Result<Self, EngineError> {
        cfg.validate()
            .map_err(|e| EngineError::LimitExceeded(e.field))?;
        let mut sc = stack_cfg.clone();
        sc.max_connections = cfg.max_connections;
        let stack = Stack::new(device, &sc, now)?;
        Ok(EngineCore {
            core,
            qps: (0..cfg.max_qps).map(|_| None).collect(),
            live: Vec::with_capacity(cfg.max_qps),
            generations: vec![0; cfg.max_qps],
            listeners: Vec::with_capacity(8),
            requests: (0..cfg.max_pending_requests).map(|_| None).collect(),
            req_generations: vec![0; cfg.max_pending_requests],
            zombies: Vec::with_capacity(cfg.max_connections),
            events: VecDeque::with_capacity(cfg.event_queue_depth),
            clock_base,
            now,
            gather: vec![0u8; MAX_ULPDU_LEN].into_boxed_slice(),
            fpdu: vec![0u8; FPDU_SCRATCH_LEN].into_boxed_slice(),
            stats: CoreStats::default(),
            cfg,
            stack,
            mrs,
        })
    }

    /// The core's number.
    pub fn core_index(&self) -> u16 {
        self.core
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    /// The region table.
    pub fn mrs(&self) -> &Arc<MrTable> {
        &self.mrs
    }

    /// Counters.
    pub fn stats(&self) -> CoreStats {
        self.stats
    }

    /// The TCP stack (for device access and counters).
    pub fn stack(&self) -> &Stack<D> {
        &self.stack
    }

    /// The TCP stack, mutably (device access, e.g. a capture's writer).
    pub fn stack_mut(&mut self) -> &mut Stack<D> {
        &mut self.stack
    }

    /// Takes the oldest connection manager event.
    pub fn next_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    fn now_std(&self) -> StdInstant {
        self.clock_base + StdDuration::from_micros(self.now.total_micros().max(0) as u64)
    }

    fn qp_mut(&mut self, id: QpId) -> Result<&mut Qp, EngineError> {
        if id.core != self.core {
            return Err(EngineError::UnknownQp);
        }
        match self.qps.get_mut(usize::from(id.index)) {
            Some(Some(q)) if q.id == id => Ok(q),
            _ => Err(EngineError::UnknownQp),
        }
    }

    /// Creates a queue pair in the idle state.
    pub fn create_qp(&mut self, attr: QpAttr) -> Result<(QpId, Arc<QpShared>), EngineError> {
        if attr.sq_depth as usize > self.cfg.max_sq_depth || attr.sq_depth == 0 {
            return Err(EngineError::LimitExceeded("sq_depth"));
        }
        if attr.rq_depth as usize > self.cfg.max_rq_depth || attr.rq_depth == 0 {
            return Err(EngineError::LimitExceeded("rq_depth"));
        }
        if attr.max_sge as usize > self.cfg.max_sge {
            return Err(EngineError::LimitExceeded("max_sge"));
        }
        let index = self
            .qps
            .iter()
            .position(Option::is_none)
            .ok_or(EngineError::TableFull("queue pair"))?;
        self.generations[index] = self.generations[index].wrapping_add(1);
        let id = QpId {
            core: self.core,
            index: index as u16,
            generation: self.generations[index],
        };
        let shared = Arc::new(QpShared::new(
            attr.pd,
            attr.sq_depth,
            attr.rq_depth,
            attr.max_sge,
        ));
        let max_ird = usize::from(self.cfg.max_ird);
        self.qps[index] = Some(Qp {
            id,
            shared: Arc::clone(&shared),
            pd: attr.pd,
            send_cq: attr.send_cq,
            recv_cq: attr.recv_cq,
            state: QpState::Idle,
            sq: VecDeque::with_capacity(attr.sq_depth as usize),
            sq_head_seq: 0,
            sq_next_seq: 0,
            rq: VecDeque::with_capacity(attr.rq_depth as usize),
            orq: VecDeque::with_capacity(usize::from(self.cfg.max_ord) + 1),
            ord: 0,
            irq: VecDeque::with_capacity(max_ird + 1),
            ird: InboundReadQueue::new(0),
            tx: None,
            conn: None,
            read_placed: 0,
            disconnect_requested: false,
            orq_high: 0,
            rfc7306: true,
            tx_fault: None,
        });
        if let Err(at) = self.live.binary_search(&index) {
            self.live.insert(at, index);
        }
        Ok((id, shared))
    }

    /// Destroys a queue pair: its work requests are flushed and its connection is aborted —
    /// unless a graceful close is already under way (a Terminate or a FIN went out), in which
    /// case TCP finishes that close on its own. An RST there could overtake the Terminate at
    /// the peer: a peer stack that receives the Terminate and the RST in one burst drops the
    /// unread Terminate with its receive buffer, and the peer's user would see a bare reset
    /// instead of the error report RDMAP-5.4/RDMAP-7.1 require.
    pub fn destroy_qp(&mut self, id: QpId) -> Result<(), EngineError> {
        let q = self.qp_mut(id)?;
        q.flush();
        let conn = q.conn.take();
        self.qps[usize::from(id.index)] = None;
        self.live.retain(|&i| i != usize::from(id.index));
        if let Some(c) = conn {
            if !c.fin_sent {
                let _ = self.stack.abort(c.tcp);
            }
            self.zombies.push(c.tcp);
        }
        Ok(())
    }

    /// The state of a queue pair.
    pub fn qp_state(&self, id: QpId) -> Result<QpState, EngineError> {
        match self.qps.get(usize::from(id.index)) {
            Some(Some(q)) if q.id == id && id.core == self.core => Ok(q.state),
            _ => Err(EngineError::UnknownQp),
        }
    }

    /// State, negotiated IRD/ORD and the ORD high-water mark of a queue pair.
    pub fn qp_info(&self, id: QpId) -> Result<QpInfo, EngineError> {
        match self.qps.get(usize::from(id.index)) {
            Some(Some(q)) if q.id == id && id.core == self.core => Ok(QpInfo {
                state: q.state,
                ird: q.ird.ird(),
                ord: q.ord,
                reads_in_flight_max: q.orq_high,
            }),
            _ => Err(EngineError::UnknownQp),
        }
    }

    /// Posts a send queue work request (validated; nothing changes on error).
    pub fn post_send(&mut self, id: QpId, wr: SendWr) -> Result<(), EngineError> {
        let mrs = Arc::clone(&self.mrs);
        let q = self.qp_mut(id)?;
        validate_send(&q.shared, &mrs, &wr)?;
        if (matches!(wr.op, SendOp::Read { .. }) || wr.op.is_atomic()) && q.ord == 0 {
            q.shared.release_sq();
            return Err(EngineError::NoReadCredits);
        }
        if wr.op.is_rfc7306() && !q.rfc7306 {
            q.shared.release_sq();
            return Err(EngineError::NotSupported("RFC 7306"));
        }
        q.sq.push_back(SqEntry {
            wr,
            status: None,
            byte_len: wr.sges.total_len() as u32,
            stage: 0,
            atomic_orig: None,
        });
        Ok(())
    }

    /// Takes a send work request already validated (and its slot reserved) by an
    /// application thread with [`validate_send`]. If the QP left RTS meanwhile the request
    /// completes with a flush error.
    pub fn post_send_reserved(&mut self, id: QpId, wr: SendWr) {
        let Ok(q) = self.qp_mut(id) else { return };
        let bad_read = (matches!(wr.op, SendOp::Read { .. }) || wr.op.is_atomic()) && q.ord == 0;
        // The application may have changed the QP's RFC 7306 flag after the connection
        // fixed it: such a request is not sent.
        let bad_ext = wr.op.is_rfc7306() && !q.rfc7306;
        let e = SqEntry {
            wr,
            status: (q.state != QpState::Rts || bad_read || bad_ext).then_some(WcStatus::FlushErr),
            byte_len: wr.sges.total_len() as u32,
            stage: 0,
            atomic_orig: None,
        };
        q.sq.push_back(e);
        if q.state != QpState::Rts {
            q.sq_next_seq = q.sq_head_seq + q.sq.len() as u64;
            q.retire_sq();
        }
    }

    /// Posts a receive work request (validated; nothing changes on error).
    pub fn post_recv(&mut self, id: QpId, wr: RecvWr) -> Result<(), EngineError> {
        let mrs = Arc::clone(&self.mrs);
        let q = self.qp_mut(id)?;
        validate_recv(&q.shared, &mrs, &wr)?;
        q.rq.push_back(wr);
        Ok(())
    }

    /// Takes a receive work request validated by an application thread ([`validate_recv`]).
    pub fn post_recv_reserved(&mut self, id: QpId, wr: RecvWr) {
        let Ok(q) = self.qp_mut(id) else { return };
        q.rq.push_back(wr);
        if q.state == QpState::Error {
            q.flush();
        }
    }

    fn mpa_config(&self, p: &MpaParams, private_data: Vec<u8>, initiator: bool) -> nego::Config {
        nego::Config {
            rev: p.rev,
            crc: p.crc,
            markers: p.markers,
            markers_supported: p.markers_supported,
            ird: clamp_offer(p.ird, self.cfg.max_ird),
            ord: clamp_offer(p.ord, self.cfg.max_ord),
            peer_to_peer: initiator && p.peer_to_peer && p.rev >= 2,
            // An initiator offers the RTR types chosen; a responder accepts the ones chosen.
            rtr: if initiator { p.rtr_offer } else { p.rtr_accept },
            private_data,
            timeout: StdDuration::from_millis(self.cfg.mpa_timeout_ms),
        }
    }

    /// Connects an idle queue pair to `remote` as MPA initiator with `private_data`.
    /// [`CmEvent::Established`], [`CmEvent::Rejected`] or [`CmEvent::Error`] follows.
    pub fn connect(
        &mut self,
        id: QpId,
        remote: (Ipv4Address, u16),
        params: &MpaParams,
        private_data: &[u8],
    ) -> Result<(), EngineError> {
        let config = self.mpa_config(params, private_data.to_vec(), true);
        let now_std = self.now_std();
        let st = self.qp_mut(id)?.state;
        if st != QpState::Idle {
            return Err(EngineError::InvalidState(st));
        }
        let init = Initiator::new(config, now_std)?;
        let tcp = self.stack.connect(remote, None, &self.cfg.tcp)?;
        let q = self.qp_mut(id)?;
        q.conn = Some(Conn {
            tcp,
            mpa: Mpa::Initiator(Box::new(init)),
            framer: None,
            deframer: None,
            ddp_tx: DdpSender::new(),
            ddp_rx: DdpReceiver::new(DDP_VERSION),
            rtr_pending: None,
            fin_sent: false,
            peer_closed: false,
            term: None,
        });
        q.set_state(QpState::Connecting);
        Ok(())
    }

    /// Listens on `port`; connection requests arrive as [`CmEvent::ConnectRequest`].
    pub fn listen(&mut self, port: u16, params: MpaParams) -> Result<ListenerId, EngineError> {
        let backlog = self.cfg.max_pending_requests.min(4);
        let tcp = self.stack.listen(port, backlog, &self.cfg.tcp)?;
        self.listeners.push(Listener { tcp, params });
        Ok(ListenerId {
            core: self.core,
            index: (self.listeners.len() - 1) as u32,
        })
    }

    fn req_mut(&mut self, id: RequestId) -> Result<&mut PendingReq, EngineError> {
        let i = id.index as usize;
        if id.core != self.core || self.req_generations.get(i) != Some(&id.generation) {
            return Err(EngineError::UnknownRequest);
        }
        match self.requests.get_mut(i) {
            Some(Some(r)) if r.phase == ReqPhase::Waiting => Ok(r),
            _ => Err(EngineError::UnknownRequest),
        }
    }

    /// Accepts a connection request on an idle queue pair with our private data (optionally
    /// overriding IRD/ORD). [`CmEvent::Established`] follows at once.
    pub fn accept(
        &mut self,
        req: RequestId,
        id: QpId,
        private_data: &[u8],
        ird_ord: Option<(u16, u16)>,
    ) -> Result<(), EngineError> {
        let (max_ird, max_ord) = (self.cfg.max_ird, self.cfg.max_ord);
        let st = self.qp_mut(id)?.state;
        if st != QpState::Idle {
            return Err(EngineError::InvalidState(st));
        }
        let r = self.req_mut(req)?;
        if let Some((ird, ord)) = ird_ord {
            r.responder
                .set_ird_ord(clamp_offer(ird, max_ird), clamp_offer(ord, max_ord))?;
        }
        r.responder.accept(private_data)?;
        let Some(r) = self.requests[req.index as usize].take() else {
            return Err(EngineError::UnknownRequest);
        };
        let mut responder = r.responder;
        let cfg = self.cfg.clone();
        let q = self.qp_mut(id)?;
        let mut negotiated = None;
        while let Some(ev) = responder.poll_event() {
            if let nego::Event::Established(n) = ev {
                negotiated = Some(n);
            }
        }
        q.conn = Some(Conn {
            tcp: r.tcp,
            mpa: Mpa::Responder(responder),
            framer: None,
            deframer: None,
            ddp_tx: DdpSender::new(),
            ddp_rx: DdpReceiver::new(DDP_VERSION),
            rtr_pending: None,
            fin_sent: false,
            peer_closed: false,
            term: None,
        });
        if let Some(n) = negotiated {
            q.setup_fpdu_mode(&n, &cfg);
            q.set_state(QpState::Rts);
            let ev = q.established_event(&n);
            self.events.push_back(ev);
        }
        Ok(())
    }

    /// Rejects a connection request with our private data (MPA Reply with R = 1, then
    /// FIN).
    pub fn reject(&mut self, req: RequestId, private_data: &[u8]) -> Result<(), EngineError> {
        let r = self.req_mut(req)?;
        r.responder.reject(private_data)?;
        while r.responder.poll_event().is_some() {}
        r.phase = ReqPhase::Rejecting;
        Ok(())
    }

    /// Graceful close: no new sends; the send queue and inbound Reads drain, then FIN.
    /// [`CmEvent::Disconnected`] follows once both sides closed.
    pub fn disconnect(&mut self, id: QpId) -> Result<(), EngineError> {
        let q = self.qp_mut(id)?;
        match q.state {
            QpState::Rts => {
                q.set_state(QpState::Closing);
                q.disconnect_requested = true;
                Ok(())
            }
            QpState::Closing => Ok(()),
            s => Err(EngineError::InvalidState(s)),
        }
    }

    /// Abortive close: RST at once, everything outstanding is flushed.
    pub fn abort(&mut self, id: QpId) -> Result<(), EngineError> {
        let q = self.qp_mut(id)?;
        let Some(c) = q.conn.take() else {
            return Err(EngineError::InvalidState(q.state));
        };
        q.flush();
        let qid = q.id;
        let _ = self.stack.abort(c.tcp);
        self.zombies.push(c.tcp);
        self.events.push_back(CmEvent::Disconnected {
            qp: qid,
            reset: true,
        });
        Ok(())
    }

    /// Runs one loop of the pollers at time `now`; returns whether any did work.
    pub fn poll(&mut self, now: Instant) -> bool {
        self.now = now;
        self.stats.loops += 1;
        let mut work = self.stack.poll(now);
        work |= self.poll_tcp_events();
        let mut engine = self.poll_requests();
        engine |= self.poll_rx();
        engine |= self.poll_timers();
        engine |= self.poll_tx();
        // Whatever the pollers queued (FPDUs, startup frames, FINs, window updates after a
        // read) goes out in the same loop; when none did anything, nothing was queued and
        // the second pass of the stack would only repeat the first.
        if engine {
            self.stack.poll(now);
            self.poll_tcp_events();
        }
        work | engine
    }

    /// When the core next needs a poll without new input (for simulated clocks).
    pub fn poll_at(&mut self) -> Option<Instant> {
        self.stack.poll_at(self.now)
    }

    fn find_qp(&self, tcp: ConnId) -> Option<usize> {
        self.qps.iter().position(|q| {
            q.as_ref()
                .and_then(|q| q.conn.as_ref())
                .is_some_and(|c| c.tcp == tcp)
        })
    }

    fn poll_tcp_events(&mut self) -> bool {
        let mut work = false;
        while let Some(ev) = self.stack.next_event() {
            work = true;

            match ev {
                TcpEvent::Acceptable(l) => self.on_acceptable(l),
                TcpEvent::PeerClosed(c) => {
                    if let Some(i) = self.find_qp(c) {
                        let Some(q) = self.qps[i].as_mut() else {
                            continue;
                        };
                        // A startup frame may still sit in the receive buffer in front of the
                        // FIN: the receive poller reads it first and only then tells the
                        // initiator about the close.
                        let mut fenced = false;
                        if let Some(conn) = q.conn.as_mut() {
                            conn.peer_closed = true;
                            fenced = matches!(conn.mpa, Mpa::Responder(_));
                        }
                        // A responder still fenced: the receive poller decides once every
                        // octet before the FIN is read (it may be the RTR or a Terminate).
                        if q.state == QpState::Rts && !fenced {
                            // The peer closed: drain what we owe, then FIN (RDMAP-06 §6).
                            q.set_state(QpState::Closing);
                        }
                    }
                }
                TcpEvent::Closed(c) | TcpEvent::Reset(c) => {
                    let reset = matches!(ev, TcpEvent::Reset(_));
                    if let Some(i) = self.find_qp(c) {
                        let Some(q) = self.qps[i].as_mut() else {
                            continue;
                        };
                        let conn = q.conn.take();
                        let was = q.state;
                        q.flush();
                        if let Some(conn) = conn {
                            let _ = self.stack.release(conn.tcp);
                            if was == QpState::Connecting {
                                self.events.push_back(CmEvent::Error {
                                    qp: q.id,
                                    error: ConnError::TcpLost,
                                });
                            } else if !matches!(was, QpState::Error | QpState::Terminate) {
                                self.events
                                    .push_back(CmEvent::Disconnected { qp: q.id, reset });
                            }
                        }
                    } else if let Some(p) = self.zombies.iter().position(|z| *z == c) {
                        let z = self.zombies.swap_remove(p);
                        let _ = self.stack.release(z);
                    } else {
                        self.cancel_request(c);
                    }
                }
                TcpEvent::Connected(_) | TcpEvent::Readable(_) | TcpEvent::Writable(_) => {}
            }
        }
        work
    }

    fn cancel_request(&mut self, tcp: ConnId) {
        for i in 0..self.requests.len() {
            if self.requests[i].as_ref().is_some_and(|r| r.tcp == tcp) {
                if let Some(r) = self.requests[i].take() {
                    let _ = self.stack.release(r.tcp);
                    if r.phase == ReqPhase::Waiting {
                        self.events.push_back(CmEvent::RequestCancelled(RequestId {
                            core: self.core,
                            index: i as u32,
                            generation: self.req_generations[i],
                        }));
                    }
                }
            }
        }
    }

    fn on_acceptable(&mut self, l: warpcore_tcp::ListenerId) {
        let Some(li) = self.listeners.iter().position(|x| x.tcp == l) else {
            return;
        };
        while let Ok(Some(tcp)) = self.stack.accept(l) {
            let params = self.listeners[li].params.clone();
            let config = self.mpa_config(&params, Vec::new(), false);
            let slot = self.requests.iter().position(Option::is_none);
            let responder = Responder::new(config, self.now_std());
            let (Some(slot), Ok(responder)) = (slot, responder) else {
                // No room for another pending request: refuse with RST.
                let _ = self.stack.release(tcp);
                continue;
            };
            let remote = match self.stack.endpoints(tcp) {
                Ok((_, Some(ep))) => match ep.addr {
                    warpcore_tcp::smoltcp::wire::IpAddress::Ipv4(a) => (a, ep.port),
                },
                _ => (Ipv4Address::UNSPECIFIED, 0),
            };
            self.req_generations[slot] = self.req_generations[slot].wrapping_add(1);
            self.requests[slot] = Some(PendingReq {
                tcp,
                responder: Box::new(responder),
                listener: li as u32,
                phase: ReqPhase::Reading,
                remote,
            });
        }
    }

    fn poll_requests(&mut self) -> bool {
        let mut work = false;
        let now_std = self.now_std();
        for i in 0..self.requests.len() {
            let Some(r) = self.requests[i].as_mut() else {
                continue;
            };
            match r.phase {
                ReqPhase::Reading => {
                    let resp = &mut r.responder;
                    let n = self
                        .stack
                        .recv_with(r.tcp, |d| resp.handle_input(d))
                        .unwrap_or(0);
                    work |= n > 0;
                    r.responder.handle_timeout(now_std);
                    while let Some(ev) = r.responder.poll_event() {
                        work = true;
                        match ev {
                            nego::Event::Request(peer) => {
                                r.phase = ReqPhase::Waiting;
                                self.events
                                    .push_back(CmEvent::ConnectRequest(ConnectRequest {
                                        request: RequestId {
                                            core: self.core,
                                            index: i as u32,
                                            generation: self.req_generations[i],
                                        },
                                        listener: ListenerId {
                                            core: self.core,
                                            index: r.listener,
                                        },
                                        remote: r.remote,
                                        rev: peer.rev,
                                        ird: peer.ird(),
                                        ord: peer.ord(),
                                        private_data: peer.private_data,
                                    }));
                            }
                            nego::Event::Rejected(rej) => {
                                // MPA refused the Request on its own (markers we cannot
                                // send): the Reply with R = 1 goes out, and our user is
                                // told, typed, so neither side waits in silence.
                                if rej.reason == nego::RejectReason::MarkersUnsupported {
                                    self.events.push_back(CmEvent::RequestRefused {
                                        listener: ListenerId {
                                            core: self.core,
                                            index: r.listener,
                                        },
                                        remote: r.remote,
                                        error: nego::NegotiationError::MarkersUnsupported,
                                    });
                                }
                                r.phase = ReqPhase::Rejecting;
                            }
                            nego::Event::Failed(_) => {
                                let _ = self.stack.close(r.tcp);
                                r.phase = ReqPhase::Closing;
                            }
                            nego::Event::Established(_) => {}
                        }
                    }
                }
                ReqPhase::Rejecting => {
                    let resp = &mut r.responder;
                    let n = self
                        .stack
                        .send_with(r.tcp, |b| resp.poll_transmit(b))
                        .unwrap_or(0);
                    if n == 0 {
                        // The Reply is in TCP's hands; close after it (MPA-7.1.2-7 leaves
                        // the choice to the ULP; siw closes too).
                        let _ = self.stack.close(r.tcp);
                        r.phase = ReqPhase::Closing;
                    }
                    work = true;
                }
                ReqPhase::Closing => {
                    let _ = self.stack.recv_with(r.tcp, |d| d.len());
                    let done = match self.stack.state(r.tcp) {
                        Ok(s) => matches!(s, TcpState::Closed | TcpState::TimeWait),
                        Err(_) => true,
                    };
                    if done {
                        let _ = self.stack.release(r.tcp);
                        self.requests[i] = None;
                        work = true;
                    }
                }
                ReqPhase::Waiting => {}
            }
        }
        work
    }

    fn poll_rx(&mut self) -> bool {
        let mut work = false;
        let budget = self.cfg.rx_budget_bytes;
        let EngineCore {
            stack,
            qps,
            mrs,
            cfg,
            events,
            stats,
            live,
            ..
        } = self;
        for &i in live.iter() {
            let Some(q) = qps[i].as_mut() else {
                continue;
            };
            let Some(tcp) = q.conn.as_ref().map(|c| c.tcp) else {
                continue;
            };
            let mut ctx = Ctx {
                mrs,
                cfg,
                events,
                stats,
            };
            // No new octets: consuming nothing would change nothing (the deframer keeps
            // partial FPDUs itself; startup timeouts and closes have their own steps below
            // and in `poll_timers`).
            let queued = stack.recv_queue(tcp).unwrap_or(0);
            if queued > 0 {
                let n = stack
                    .recv_with(tcp, |data| {
                        let data = &data[..data.len().min(budget)];
                        q.consume(data, &mut ctx)
                    })
                    .unwrap_or(0);
                work |= n > 0;
            }
            // The peer closed during the startup and every octet before its FIN is read.
            let closed_early = q.state == QpState::Connecting
                && q.conn.as_ref().is_some_and(|c| c.peer_closed)
                && stack.recv_queue(tcp).unwrap_or(0) == 0;
            if closed_early {
                if let Some(Mpa::Initiator(init)) = q.conn.as_mut().map(|c| &mut c.mpa) {
                    init.handle_close();
                }
                q.drive_initiator(&mut ctx);
                work = true;
            }
            // The initiator closed before its first FPDU (e.g. it cannot send the markers
            // we require, MPA-7.1.1-10) and everything before its FIN was read: the startup
            // never completed and we may send nothing (MPA-7.1.2-16), so fail it, typed,
            // and close, rather than wait in Closing for a fence that cannot lift.
            let closed_in_rts = q.state == QpState::Rts
                && q.conn.as_ref().is_some_and(|c| c.peer_closed)
                && stack.recv_queue(tcp).unwrap_or(0) == 0;
            let fenced = q
                .conn
                .as_ref()
                .is_some_and(|c| matches!(c.mpa, Mpa::Responder(_)));
            if closed_in_rts && !fenced {
                // The RTR came with the FIN: drain what we owe, then FIN (RDMAP-06 §6).
                q.set_state(QpState::Closing);
            } else if closed_in_rts {
                q.flush();
                q.disconnect_requested = true;
                q.set_state(QpState::Error);
                ctx.events.push_back(CmEvent::Error {
                    qp: q.id,
                    error: ConnError::Negotiation(nego::NegotiationError::PeerClosed),
                });
                work = true;
            }
        }
        work
    }

    fn poll_timers(&mut self) -> bool {
        let now_std = self.now_std();
        let EngineCore {
            qps,
            mrs,
            cfg,
            events,
            stats,
            live,
            ..
        } = self;
        let mut work = false;
        for &i in live.iter() {
            let Some(q) = qps[i].as_mut() else {
                continue;
            };
            let fired = match q.conn.as_mut().map(|c| &mut c.mpa) {
                Some(Mpa::Initiator(i)) if i.poll_timeout().is_some_and(|t| t <= now_std) => {
                    i.handle_timeout(now_std);
                    true
                }
                _ => false,
            };
            if fired {
                work = true;
                let mut ctx = Ctx {
                    mrs,
                    cfg,
                    events,
                    stats,
                };
                q.drive_initiator(&mut ctx);
            }
        }
        work
    }

    fn poll_tx(&mut self) -> bool {
        let mut work = false;
        // `tx_qp` never creates nor destroys a QP, so `live` stays as it is.
        for k in 0..self.live.len() {
            work |= self.tx_qp(self.live[k]);
        }
        work
    }

    fn tx_qp(&mut self, i: usize) -> bool {
        let EngineCore {
            stack,
            qps,
            mrs,
            cfg,
            events,
            stats,
            gather: gbuf,
            fpdu: fbuf,
            zombies,
            ..
        } = self;
        let Some(q) = qps[i].as_mut() else {
            return false;
        };
        let Some(conn) = q.conn.as_mut() else {
            return false;
        };
        let tcp = conn.tcp;
        let mut work = false;
        // MPA startup frames.
        match &mut conn.mpa {
            Mpa::Initiator(init) if init.phase() == nego::Phase::AwaitingFrame => {
                work |= stack.send_with(tcp, |b| init.poll_transmit(b)).unwrap_or(0) > 0;
                return work;
            }
            Mpa::Initiator(init) => {
                work |= stack.send_with(tcp, |b| init.poll_transmit(b)).unwrap_or(0) > 0;
            }
            Mpa::Responder(r) => {
                work |= stack.send_with(tcp, |b| r.poll_transmit(b)).unwrap_or(0) > 0;
            }
            Mpa::Done => {}
        }
        // A rejected or failed startup: close once the frames are out.
        if q.state == QpState::Error && q.disconnect_requested && !conn.fin_sent {
            let _ = stack.close(tcp);
            conn.fin_sent = true;
            return true;
        }
        // The Terminate goes first, at an FPDU boundary; then TCP closes.
        if let Some((buf, len)) = conn.term {
            let Some(framer) = conn.framer.as_mut() else {
                conn.term = None;
                let _ = stack.close(tcp);
                return true;
            };
            if send_fpdu(stack, tcp, framer, &buf[..len], &[], fbuf) {
                conn.term = None;
                stats.terminates_tx += 1;
                stats.fpdus_tx += 1;
                let _ = stack.close(tcp);
                conn.fin_sent = true;
                q.set_state(QpState::Error);
                return true;
            }
            return work;
        }
        if !matches!(q.state, QpState::Rts | QpState::Closing) {
            return work;
        }
        // The initiator's RTR is its first FPDU (MPA2-5-1).
        if let Some(t) = conn.rtr_pending {
            let Some(framer) = conn.framer.as_mut() else {
                return work;
            };
            if !send_fpdu(stack, tcp, framer, t.ulpdu(), &[], fbuf) {
                return work;
            }
            stats.fpdus_tx += 1;
            conn.rtr_pending = None;
            match t {
                RtrType::Send => {
                    let _ = conn.ddp_tx.set_next_msn(qn::SEND, 2);
                }
                RtrType::Read => {
                    let _ = conn.ddp_tx.set_next_msn(qn::READ_REQUEST, 2);
                    q.orq.push_back(OrqEntry {
                        seq: None,
                        sink_stag: 0,
                        len: 0,
                        atomic: None,
                    });
                }
                RtrType::Write => {}
            }
            if let Mpa::Initiator(init) = &mut conn.mpa {
                init.handle_rtr_sent();
            }
            work = true;
        }
        // Binds, fast registrations and Local Invalidates at the sending position need no
        // FPDU: they run even while MPA fencing holds FPDUs back (module `local`).
        if q.tx.is_none() {
            work |= q.run_local_ops(mrs);
            if q.fail_tx_fault(mrs, cfg, events, stats) {
                return true;
            }
        }
        if !q.can_send_fpdus() {
            return work;
        }
        if let Some(c) = q.conn.as_mut() {
            if matches!(c.mpa, Mpa::Initiator(_)) {
                c.mpa = Mpa::Done;
            }
        }
        let mut fpdus = 0;
        while fpdus < cfg.tx_budget_fpdus {
            if q.tx.is_none() {
                q.tx = q.start_next(cfg, mrs);
                if q.fail_tx_fault(mrs, cfg, events, stats) {
                    return true;
                }
                if q.tx.is_none() {
                    break;
                }
            }
            let Some(conn) = q.conn.as_mut() else { break };
            let Some(framer) = conn.framer.as_mut() else {
                break;
            };
            let Some(msg) = q.tx.as_mut() else { break };
            let Some(ulpdu_len) = msg.seg.next_ulpdu_len() else {
                q.tx = None;
                continue;
            };
            let need = framer.fpdu_wire_len(ulpdu_len);
            if stack.send_space(tcp).unwrap_or(0) < need {
                break;
            }
            let mut hdr = [0u8; MAX_SEGMENT_HEADER_LEN];
            let Ok(Some(s)) = msg.seg.next_segment(&mut hdr) else {
                q.tx = None;
                continue;
            };
            let plen = s.payload_len as usize;
            let off = u64::from(s.payload_offset);
            let (sq, sq_head, pd, stream) = (&q.sq, q.sq_head_seq, q.pd, q.id.stream());
            let src = &msg.src;
            // Copies this segment's payload out of registered memory into `dst`; false if
            // the local region went away.
            let mut fill = |dst: &mut [u8]| -> bool {
                match src {
                    TxSrc::Sq(seq) => match sq.get((*seq - sq_head) as usize) {
                        Some(e) => gather(mrs, pd, e.wr.sges.as_slice(), off, dst),
                        None => false,
                    },
                    TxSrc::AtomicResp => true,
                    TxSrc::ReadResp(plan) => {
                        dst.is_empty()
                            || mrs
                                .lookup_remote(Stag(plan.src_stag), pd, stream, Access::REMOTE_READ)
                                .ok()
                                .and_then(|g| {
                                    let to = plan.src_to.checked_add(off)?;
                                    g.copy_out_at(to, dst).ok()
                                })
                                .is_some()
                    }
                }
            };
            let sent = send_fpdu_from(
                stack,
                tcp,
                framer,
                &hdr[..s.header_len],
                plen,
                &mut fill,
                gbuf,
                fbuf,
            );
            let ok = sent.is_ok();
            if !ok {
                // The local region went away under a posted request or a Read being
                // answered: a local catastrophic error for the stream.
                let mut ctx = Ctx {
                    mrs,
                    cfg,
                    events,
                    stats,
                };
                if let TxSrc::Sq(seq) = msg.src {
                    if let Some(e) = q.entry_mut(seq) {
                        e.status = Some(WcStatus::LocalProtection);
                    }
                }
                q.fail_local(
                    ProtocolError::Rdmap(RdmapError::LocalCatastrophic),
                    None,
                    &mut ctx,
                );
                return true;
            }
            // Space was checked before the segment was cut, so this always succeeds.
            debug_assert!(matches!(sent, Ok(true)));
            fpdus += 1;
            stats.fpdus_tx += 1;
            work = true;
            if msg.seg.is_done() {
                let done = q.tx.take();
                match done.map(|m| m.src) {
                    Some(TxSrc::Sq(seq)) => {
                        // Reads and Atomics complete when their response arrives; a Write
                        // with Immediate when its second message is out.
                        let pending = q.entry_mut(seq).is_some_and(|e| {
                            matches!(e.wr.op, SendOp::Read { .. })
                                || e.wr.op.is_atomic()
                                || (matches!(e.wr.op, SendOp::WriteWithImm { .. }) && e.stage < 2)
                        });
                        if !pending {
                            if let Some(e) = q.entry_mut(seq) {
                                e.status.get_or_insert(WcStatus::Success);
                            }
                        }
                    }
                    Some(TxSrc::ReadResp(_)) | Some(TxSrc::AtomicResp) => q.ird.retire(),
                    None => {}
                }
            }
        }
        work |= q.retire_sq();
        // Graceful close: once nothing is owed, FIN (RDMAP-06 §6; the peer drains too).
        let drained = q.tx.is_none() && q.irq.is_empty() && q.sq.is_empty() && q.orq.is_empty();
        if q.state == QpState::Closing && drained {
            let qid = q.id;
            if let Some(c) = q.conn.as_mut() {
                if !c.fin_sent {
                    let _ = stack.close(tcp);
                    c.fin_sent = true;
                    work = true;
                }
                if c.peer_closed {
                    q.flush();
                    if let Some(c) = q.conn.take() {
                        zombies.push(c.tcp);
                    }
                    events.push_back(CmEvent::Disconnected {
                        qp: qid,
                        reset: false,
                    });
                }
            }
        }
        work
    }
}
