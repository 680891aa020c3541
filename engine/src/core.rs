//! One engine core: a TCP stack, the queue pairs it owns, and the pollers that move bytes
//! between them (GUIDE §1, rule 9). Single-threaded and deterministic: time is an argument
//! of [`EngineCore::poll`], so tests drive two cores over the in-memory link with a
//! simulated clock, and [`crate::runtime`] drives one per pinned thread.
//!
//! # Pollers, in loop order
//! 0. **send first**: when a request was posted to an empty send queue since the last loop
//!    (a ping-pong's answer, a lone request), step 5 and a transmit pass with its flush
//!    ([`Stack::poll_transmit_fill`]) run before anything else, so its frame is on the
//!    wire before the loop does any other work. A busy send queue (bulk transfer) waits
//!    for step 6, after that loop's ACKs widened what may be sent.
//! 1. **tcp events**: accepted connections become pending connection requests; FIN/RST
//!    move queue pairs towards the error state.
//! 2. **requests**: MPA Requests of not yet accepted connections are read and handed to the
//!    application ([`CmEvent::ConnectRequest`]).
//! 3. **receive**: per connection, at most `rx_budget_bytes` of the TCP receive queue (what
//!    step 6 did not take: octets behind a gap, of a startup, or a partial FPDU's rest) are
//!    deframed (borrowed, no copy), validated (DDP, RDMAP) and placed straight into
//!    registered memory; completions go out in MSN order.
//! 4. **timers**: MPA startup timeouts; the bounds of graceful closes that made no
//!    progress ([`EngineConfig::close_timeout_ms`]: given up as an abort).
//! 5. **send**: per connection at most `tx_budget_fpdus` FPDUs: the Terminate if one is due,
//!    the RTR, Read Responses (inbound Read queue first), then the send queue in order, with
//!    ORD enforced; a Send, Write or Read Response FPDU of
//!    [`EngineConfig::tx_from_memory_min`] payload octets or more (with Warpcore's TCP, no
//!    marker inside; a Read Response of no octets never) is queued in TCP as an external
//!    record and framed from registered memory into each frame that carries it (`txrec`);
//!    every other FPDU is framed into the TCP send buffer.
//! 6. **stack**: one [`Stack::poll_with`]: an rx burst into the TCP (in-order payload of a
//!    QP in RTS whose TCP receive queue is empty is deframed and placed while its frame is
//!    parsed, straight from the mbuf: `poll_stack`; the rest is queued by TCP), timers,
//!    then the transmit pass that turns what steps 1-5 and the TCP queued into frames, one
//!    flush. What the burst brought (TCP events, QPs marked for steps 3 and 5) is served
//!    by the next loop; a loop that did anything says so, and its runner loops again.
//!
//! A loop that receives a message thus ends soon after placing it: a caller-driven
//! application ([`crate::runtime`]) sees it without waiting for the pollers' work.
//!
//! The pollers visit only the occupied QP slots, and receive only connections with new octets.
//!
//! Commands from application threads (the rings of [`crate::runtime`]) are applied between
//! loops through the same methods tests call directly ([`EngineCore::post_send`], ...),
//! after the loop's receive snapshot ([`EngineCore::begin_poll`]): the frames a loop takes
//! reached the device before the commands it applied, so a receive posted before the peer
//! was told to Send is there for the Send.
//!
//! # Where each concern lives
//! | module | what |
//! |---|---|
//! | this file | the types ([`EngineCore`], `Qp`, `Conn`, ...), construction, the loop (`poll`) |
//! | `commands` | the application's commands: QPs created and destroyed, work requests posted |
//! | `validate` | post-time checks of work requests ([`validate_send`], [`validate_recv`]) |
//! | `connect` | MPA startup (both roles), listeners and requests, TCP events, timers, teardown |
//! | `deadlines` | the deadline heaps of pending requests and MPA initiators, the zombie set |
//! | `rx` | the receive path, below |
//! | `tx` | the transmit path, below |
//! | `qp` | QP state: in-order retirement, completions, flush, local and remote Terminates |
//! | `local` | binds, fast registrations and Local Invalidates at the sending position |
//! | `txrec` | FPDUs sent from registered memory: their records, the copy into the frame, acknowledgements |
//!
//! # The receive path, by function
//! ```text
//! poll ─ poll_tcp_events, poll_requests            (connect: new connections, MPA Requests)
//!      ─ poll_rx                                    (rx: connections with queued octets)
//!          └ Qp::consume      MPA startup frames (initiator), then consume_fpdus:
//!                             Deframer::poll per FPDU
//!              └ Qp::rx_ulpdu
//!                  ├ rx_plain_write      a plain RDMA Write placed from its fixed header
//!                  ├ rx_fenced           a fenced responder's first ULPDU (the RTR)
//!                  ├ plain_data / Segment::parse + check_inbound: the decode and RDMAP's
//!                  │                     checks; an SRQ buffer claimed if needed
//!                  ├ rx_malformed        a refused message without ULP payload: DDP's
//!                  │                     untagged checks first, then RDMAP's error
//!                  ├ rx_lookup           the one STag lookup (MrTable::lookup_remote)
//!                  ├ DdpReceiver::handle_header
//!                  └ rx_tagged           Write / Read Response: MrGuard::place_at, ORQ head
//!                    rx_send             QN 0: scatter into the head receive, completion
//!                    rx_immediate        QN 0: Immediate Data completes the head receive
//!                    rx_read_request     QN 1: admitted under IRD -> irq
//!                    rx_atomic_request   QN 1: admitted under IRD -> irq
//!                    Terminate           QN 2: Qp::remote_terminate           (qp)
//!                    rx_atomic_response  QN 3: ORQ head, original value, retire_sq
//!                errors ─ Qp::fail_local (Terminate queued, flush)           (qp)
//!      ─ poll_stack: stack.poll_with_fill_pass (rx burst, TCP) (rx: in-order payload of RTS QPs)
//!          └ Qp::consume_fpdus   straight from the frame, while the TCP queue is empty;
//!                                a whole payload comes with its CRC32c, taken in the
//!                                checksum's pass (crc::payload_digest), which checks an
//!                                FPDU that fills it (Deframer::poll_digest)
//! ```
//! # The transmit path, by function
//! ```text
//! post_send / post_send_reserved_ref (a request posted; the loop's commands or the
//!   caller-driven direct post)
//!      ─ Qp::write_lone      caller-driven (post_send_now), the first post since the
//!                            last loop, a plain one-FPDU Write: framed into a scratch
//!                            buffer, Stack::send_lone_record flushes its frame, then the
//!                            TCP files it; recorded in posted_out
//!      ─ Qp::write_at_post   a plain one-FPDU Write to an empty, settled send queue:
//!                            frame_write_whole now, recorded in posted_out; else push_sq
//!      ─ transmit_posted     caller-driven, a lone Write framed at post (nothing else in
//!                            flight): the stack's transmit pass and flush, from the post
//! poll ─ complete_posted_out, poll_tx, transmit: first, after a request posted to an
//!        empty send queue (slots and completions of the Writes framed at post first)
//!      ─ poll_timers, poll_close_timers            (connect: MPA timeouts, close bounds)
//!      ─ poll_tx                                   (tx: every QP marked ready)
//!          └ tx_qp
//!              ├ watch_close        a QP in Closing: its close's progress (connect)
//!              ├ TxRecords::acked   FPDUs sent from memory acknowledged (txrec) -> record_acked
//!              ├ Qp::tx_control     startup frames, failed-startup close, tx_terminate,
//!              │                    tx_rtr, run_local_ops (local), the MPA fence
//!              ├ Qp::tx_fpdus       per FPDU within tx_budget_fpdus:
//!              │   ├ Qp::tx_write_whole a plain one-FPDU Write at the send position:
//!              │   │                    frame_write_whole (DdpSender::tagged_whole,
//!              │   │                    send_fpdu_from), done
//!              │   ├ Qp::start_next     run_local_ops, then start_read_response /
//!              │   │                    start_atomic_response (execute_atomic) / start_sq
//!              │   ├ Segmenter::next_segment (DDP), then either
//!              │   │   TxRecords::push + Stack::send_external_record (payload >= 512: sent
//!              │   │   from registered memory, txrec), or send_fpdu_from / send_fpdu: framed
//!              │   │   (MPA, CRC) into the TCP send buffer, payload from gather
//!              │   └ Qp::tx_message_done
//!              ├ Qp::retire_sq      completions in order
//!              └ Qp::tx_close_if_drained   FIN once nothing is owed, Disconnected
//!      ─ poll_stack's transmit pass after its rx burst (Stack::poll_with_fill_pass), one
//!          flush; the host calls TxRecords::fill for each external record a frame carries
//!          (the pass holding the guard of the region it copies from); a failed fill ->
//!          fail_unfillable
//! ```
//!
//! The per-connection steps borrow the core's `Ctx` (region table, configuration, events,
//! counters), a field lent with one borrow next to the QP table and the stack.

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
    check_inbound, emit_terminate, emit_terminate_delivered, handle_read_request, invalidate_error,
    to_range_wraps, InboundReadQueue, Offending, RdmapConfig, ReadResponsePlan,
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
use warpcore_tcp::smoltcp::time::{Duration, Instant};
use warpcore_tcp::smoltcp::wire::Ipv4Address;
use warpcore_tcp::{
    ConnId, Event as TcpEvent, PollDevice, Stack, StackConfig, TcpImplementation, TcpTuning,
};

use crate::cm::{
    CmEvent, ConnError, ConnectRequest, DisconnectCause, Established, ListenerId, MpaParams,
    NeighborId, RequestId,
};
use crate::config::{EngineConfig, MAX_SGE};
use crate::error::EngineError;
use crate::mem::{Access, BoundsFault, LookupFault, MrGuard, MrTable, PdId, Stag, StreamId};
use crate::wr::{
    Completion, CompletionQueue, QpId, QpShared, QpState, RecvWr, SendOp, SendWr, Sge, WcOpcode,
    WcStatus,
};

/// An engine time no loop reaches: no deadline.
const NEVER: Instant = Instant::from_micros_const(i64::MAX);

mod commands;
mod connect;
mod deadlines;
mod local;
mod qp;
mod rx;
mod tx;
mod txrec;
mod validate;

use deadlines::{Deadlines, Zombies};
use tx::LoneWrite;
use txrec::TxRecords;

pub use validate::{
    ends_in_flush, reserve_flushed_send, validate_recv, validate_recv_late, validate_send,
    validate_send_inline,
};

#[cfg(feature = "self-check")]
thread_local! {
    /// See [`set_general_paths_only`].
    static GENERAL_PATHS_ONLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// With the `self-check` feature (the engine's tests): turns this thread's fast paths that
/// tests hold to their general paths off (`true`) or on again, so that a test can run the
/// same work both ways and compare (`tests/engine_fast_paths.rs`). Without the feature the
/// fast paths are always taken.
#[cfg(feature = "self-check")]
#[doc(hidden)]
pub fn set_general_paths_only(on: bool) {
    GENERAL_PATHS_ONLY.with(|g| g.set(on));
}

/// Whether the fast paths are taken (always, but under [`set_general_paths_only`]).
#[inline(always)]
fn fast_paths() -> bool {
    #[cfg(feature = "self-check")]
    {
        !GENERAL_PATHS_ONLY.with(|g| g.get())
    }
    #[cfg(not(feature = "self-check"))]
    {
        true
    }
}

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
    /// Of `fpdus_rx`, those whose CRC the deframer checked through the CRC32c the receive
    /// checksum's pass took of their segment (`crc::payload_digest`: a full segment that
    /// is one FPDU, on a CPU with the 512-bit or 256-bit folding paths).
    pub fpdus_rx_by_digest: u64,
    /// Payload octets placed into registered memory.
    pub placed_octets: u64,
    /// Received stream octets (FPDUs) consumed straight from the received frames, never
    /// copied into the TCP receive queue (`EngineCore::poll_stack`); the rest of the
    /// stream was read from the queue.
    pub rx_in_place_octets: u64,
    /// Payload octets of FPDUs queued to be sent from registered memory
    /// ([`EngineConfig::tx_from_memory_min`]): not copied into the TCP send buffer when
    /// queued (only what TCP still owes of them when a QP lets its connection go during a
    /// graceful close is copied then, `txrec::internalize`).
    pub tx_from_memory_octets: u64,
    /// Of those FPDUs' octets (headers, CRC and retransmissions included), how many TCP
    /// had written into frames (the TCP's count, read when the stats are taken).
    pub tx_from_memory_wire_octets: u64,
    /// Lone Writes whose frame left from their caller-driven post ahead of the TCP's
    /// bookkeeping (`Stack::send_lone_record`, a ping-pong's requests and answers).
    pub writes_sent_at_post: u64,
    /// Terminates sent.
    pub terminates_tx: u64,
    /// Terminates received.
    pub terminates_rx: u64,
    /// Pending connection requests pushed out of a full table by a newer connection: the
    /// oldest whose MPA Request had not arrived (or that was already closing), reset.
    pub requests_evicted: u64,
    /// New connections to a listener refused with RST because every slot of the request
    /// table held a request already handed to the application (`max_pending_requests`).
    pub requests_refused: u64,
    /// Pending connection requests dropped after `mpa_timeout_ms`: no complete MPA
    /// Request, or a request the application never accepted nor rejected.
    pub requests_timed_out: u64,
    /// Pending connection requests that ended (the peer gave up, or the startup timeout
    /// passed) while their [`CmEvent::ConnectRequest`] still waited for the application
    /// to take it: the event was withdrawn, and no `RequestCancelled` queued.
    pub requests_withdrawn: u64,
    /// [`CmEvent::RequestRefused`] reports dropped because `event_queue_depth` of them
    /// waited for the application already (the refusals themselves went ahead).
    pub refusals_unreported: u64,
    /// Pending connection requests visited by the requests poller (each visit reads the
    /// request's connection and checks its timers): a loop visits the requests with
    /// something to do (new, their connection's octets or FIN, a Reply going out), and
    /// those whose deadline has passed.
    pub request_visits: u64,
    /// MPA initiator startup timer entries the timers poller took because they were due:
    /// a QP's deadline, or an entry left by a QP gone or past its startup (deleted lazily).
    /// The others cost a loop nothing.
    pub mpa_timer_visits: u64,
    /// Entries looked at to find the pending request a full table evicts for a new
    /// connection (`evict_request`): the oldest closing or reading request, and the stale
    /// entries before it in their queues (each dropped once). It scanned the whole table
    /// twice for each new connection of a flood.
    pub eviction_probes: u64,
    /// Entries of the zombie set (connections whose QP is gone) examined to find a TCP
    /// event's connection there: one a look-up.
    pub zombie_probes: u64,
    /// Occupancy when read: queue pairs in the table.
    pub qps_live: u64,
    /// Occupancy when read: pending connection requests.
    pub requests_pending: u64,
    /// Occupancy when read: live MPA startup timer entries (one per QP whose MPA
    /// initiator waits for its Reply; the entries of QPs gone or past their startup,
    /// deleted lazily, are not counted).
    pub mpa_timers: u64,
    /// Occupancy when read: TCP connections of the stack (listener sockets included), and
    /// of those, the ones whose QP is gone, waiting for TCP to finish closing.
    pub tcp_connections: u64,
    /// See `tcp_connections`.
    pub tcp_zombies: u64,
    /// Occupancy when read: registrations in the memory region table (shared by the
    /// context's cores: the same figure on each).
    pub mrs_registered: u64,
    /// QPs found with work by the periodic sweep although nothing had marked them ready (0
    /// unless a wake-up trigger is missing; the sweep bounds the delay to about 50 ms).
    pub missed_wakeups: u64,
    /// QP visits by that sweep so far: every live QP about every 50 ms, at most
    /// 256 in one loop (a core with thousands of QPs spreads a pass over the interval
    /// rather than stalling its busy QPs for the whole table at once).
    pub sweep_visits: u64,
    /// TCP counters summed over every connection of the core so far (Warpcore's TCP; zero
    /// on the smoltcp reference): segments sent and received.
    pub tcp_segments_sent: u64,
    /// See `tcp_segments_sent`.
    pub tcp_segments_received: u64,
    /// Segments retransmitted.
    pub tcp_retransmitted_segments: u64,
    /// Retransmission timeouts, and of those the spurious ones undone (RFC 3522).
    pub tcp_rtos: u64,
    /// See `tcp_rtos`.
    pub tcp_spurious_rtos: u64,
    /// Tail loss probes (RFC 8985).
    pub tcp_tail_loss_probes: u64,
    /// Recovery episodes (congestion window reductions).
    pub tcp_fast_recoveries: u64,
    /// Of those, undone because D-SACKs showed every retransmission unneeded (RFC 3708).
    pub tcp_undone_recoveries: u64,
    /// ACKs received with a D-SACK block (RFC 2883): segments the peer got twice.
    pub tcp_dsacks_received: u64,
    /// Out-of-order segments the core's TCP dropped unSACKed because the octets its
    /// connections held out of order would have passed
    /// [`EngineConfig::tcp_out_of_order_budget_bytes`] (their peers send them again).
    pub tcp_out_of_order_refused: u64,
    /// Occupancy when read: octets the core's TCP connections hold out of order.
    pub tcp_out_of_order_held: u64,
    /// Out-of-order segments the core's TCP dropped unSACKed because their connection held
    /// its most disjoint out-of-order blocks (64) already (their peers send them again).
    pub tcp_out_of_order_no_block: u64,
    /// Octets the core's TCP connections gave up after holding them out of order (and
    /// SACKing them: reneging, RFC 2018 8): a connection over its share of
    /// [`EngineConfig::tcp_out_of_order_budget_bytes`] makes room for one under it whose
    /// segment the budget refused (their peers send them again).
    pub tcp_out_of_order_reneged: u64,
    /// Occupancy when read: buffers taken from the device's pool (mbufs on a DPDK port;
    /// cores whose ports share a pool report the same figure), `None` for a device without
    /// one (the in-memory link).
    pub pool_in_use: Option<u64>,
}

/// The QP `id` names in the table `qps`, if its slot still holds it (the same core, slot
/// and generation: `id` is compared whole).
fn qp_in(qps: &[Option<Qp>], id: QpId) -> Option<&Qp> {
    qps.get(usize::from(id.index))
        .and_then(Option::as_ref)
        .filter(|q| q.id == id)
}

/// A request framed when it was posted ([`Qp::write_at_post`]): a plain RDMA Write, done,
/// whose slot and completion the next loop gives back ([`EngineCore::complete_posted_out`]).
#[derive(Debug, Clone, Copy)]
struct PostedOut {
    id: QpId,
    wr_id: u64,
    byte_len: u32,
    signaled: bool,
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
    /// FPDUs of this request sent from registered memory and not yet acknowledged by TCP
    /// (module `txrec`): the request completes only when none is left.
    unacked: u32,
    /// Its last message was queued whole (a Send or Write then waits only for `unacked`).
    sent_whole: bool,
}

/// An outstanding outbound Read (ORD accounting, RDMAP-06 §5.2): its Read Responses come
/// back in request order.
#[derive(Debug, Clone, Copy)]
struct OrqEntry {
    /// The SQ sequence number of the Read, `None` for a Read RTR (completes nothing).
    seq: Option<u64>,
    sink_stag: u32,
    /// The sink's Tagged Offset the Read Request named: its Read Response must start there
    /// and run on without a gap (RDMAP-5.2.2-5).
    sink_to: u64,
    len: u32,
    /// `Some(request id)` for an RFC 7306 Atomic Request (answered on QN 3; Reads and
    /// Atomics share ORD, EXT-5.2-1), `None` for a Read.
    atomic: Option<u32>,
    /// The QN 1 MSN of the request: a Terminate that refuses it copies its DDP header,
    /// which names it by this (RDMAP-06 §4.8).
    msn: u32,
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
    /// Boxed: `consume` takes it out of the connection for each input it deframes and puts
    /// it back, a pointer's move instead of the whole deframer's (~170 octets) each way.
    deframer: Option<Box<Deframer>>,
    ddp_tx: DdpSender,
    ddp_rx: DdpReceiver,
    rtr_pending: Option<RtrType>,
    fin_sent: bool,
    peer_closed: bool,
    /// A Terminate FPDU's ULPDU waiting for the send poller.
    term: Option<([u8; TERM_FPDU_MAX], usize)>,
    /// MULPDU was set from the TCP connection's segment room (the first `tx_fpdus`).
    mulpdu_synced: bool,
    /// Octets past the MPA startup arrived from the peer (its FPDUs, valid or not): a
    /// responder's Terminate may answer them even before its fence lifts (`tx_control`).
    fpdu_octets_rx: bool,
    /// The startup failed with the peer silent: the close is an RST, not a FIN, so that a
    /// peer that never answers cannot hold the connection in FIN-WAIT-2 either.
    reset_on_close: bool,
    /// The bound on a graceful close's wait ([`EngineConfig::close_timeout_ms`]): set when
    /// the transmit poller first visits the QP in `Closing` (`EngineCore::watch_close`).
    close_watch: Option<CloseWatch>,
}

/// What a graceful close last showed of its progress, and when (module `connect`,
/// `EngineCore::watch_close`, `EngineCore::poll_close_timers`).
#[derive(Debug, Clone, Copy)]
struct CloseWatch {
    /// When `mark` last changed (or the close began).
    since: Instant,
    /// The deadline of its live entry in `EngineCore::close_timers`; `None` once our
    /// side is done (drained, our FIN acknowledged), when no bound applies any more.
    due: Option<Instant>,
    /// The close's progress (`Qp::close_mark`): octets framed, octets TCP still holds
    /// unacknowledged, requests completed, Read Response octets placed, octets of the
    /// peer's stream read.
    mark: [u64; 5],
}

#[derive(Debug)]
struct Qp {
    id: QpId,
    /// The DDP stream identity type 2 windows bind to and every remote access is checked
    /// against: [`QpId::stream`] when created, a new one from [`EngineCore::reset_qp`]
    /// (the QP's next connection is another stream, DDP-8.2-2, RDMAP-8.1.1-3).
    stream: StreamId,
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
    /// Local keys checked at post (from [`QpShared::sges_checked_at_post`] at
    /// connect/accept): if not, `start_sq` checks them when a request starts.
    sges_at_post: bool,
    /// A local error found while starting a message (an atomic target gone), reported by
    /// the send poller.
    tx_fault: Option<ProtocolError>,
    /// What the local user is told of `tx_fault` when it is not the protocol error itself
    /// (a failed local operation's cause, module `local`).
    tx_fault_cause: Option<ConnError>,
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
    /// When TCP handed the connection over: the request's deadlines count from here.
    since: StdInstant,
    /// Arrival order (eviction takes the oldest; two may share `since`).
    arrival: u64,
    /// The deadline of its live entry in `EngineCore::req_deadlines` (`None`: its entry
    /// was taken, the request visited at it); an entry at another instant is stale.
    timer: Option<StdInstant>,
    responder: Box<Responder>,
    listener: u32,
    phase: ReqPhase,
    remote: (Ipv4Address, u16),
    /// The initiator closed (FIN) while the request waited: the QP that accepts it starts
    /// with its peer closed (departure 26 then fails it, typed).
    peer_closed: bool,
}

#[derive(Debug)]
struct Listener {
    tcp: warpcore_tcp::ListenerId,
    params: MpaParams,
    /// The TCP port it listens on (reported in each [`ConnectRequest`]).
    port: u16,
    /// Still listening (`EngineCore::unlisten` ends it; the entry serves the port's next
    /// `listen`, so the table holds at most one entry a port).
    open: bool,
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

/// What the per-connection steps need of their core next to the QP itself: a field of
/// [`EngineCore`], so that the pollers lend it with one borrow (disjoint from the QP table
/// and the stack) instead of assembling references at every call site.
struct Ctx {
    mrs: Arc<MrTable>,
    cfg: EngineConfig,
    events: VecDeque<CmEvent>,
    /// [`CmEvent::RequestRefused`] events in `events` ([`Ctx::report_refused`]).
    refusals_queued: usize,
    stats: CoreStats,
}

impl Ctx {
    /// Queues a [`CmEvent::RequestRefused`], unless `event_queue_depth` of them wait for
    /// the application already: each malformed Request a peer sends makes one, so an
    /// application that reads no events for a while (busy elsewhere, or a listener it
    /// polls rarely) would otherwise let a peer's flood of bad Requests grow the queue
    /// without bound. The refusal itself (the connection closed or the Reply with R = 1
    /// sent) happens either way; a report dropped here is counted
    /// ([`CoreStats::refusals_unreported`]).
    fn report_refused(&mut self, ev: CmEvent) {
        if self.refusals_queued >= self.cfg.event_queue_depth {
            self.stats.refusals_unreported += 1;
            return;
        }
        self.refusals_queued += 1;
        self.events.push_back(ev);
    }

    /// Tells the application that pending request `id` is gone (the peer gave up, or the
    /// startup timeout passed). If its [`CmEvent::ConnectRequest`] still waits in the
    /// queue, the application never learnt of the request: the event is withdrawn instead
    /// and nothing is queued ([`CoreStats::requests_withdrawn`]). So the requests of an
    /// application that reads no events cost the queue at most the request table's
    /// worth, `max_pending_requests`, where each one a flood's peers opened and dropped
    /// added two events (Linux's rdma_cm likewise counts undelivered connect requests
    /// against the listener's backlog).
    fn report_cancelled(&mut self, id: RequestId) {
        let queued = self
            .events
            .iter()
            .position(|e| matches!(e, CmEvent::ConnectRequest(c) if c.request == id));
        match queued {
            Some(k) => {
                self.events.remove(k);
                self.stats.requests_withdrawn += 1;
            }
            None => self.events.push_back(CmEvent::RequestCancelled(id)),
        }
    }
}

/// `conn_qp` entry of a connection without a QP.
const NO_QP: u32 = u32::MAX;

/// How often every live QP is visited whether or not anything marked it (the safety net
/// behind the ready sets; [`CoreStats::missed_wakeups`] counts what it finds).
const SWEEP_INTERVAL: Duration = Duration::from_millis(50);

/// The most live QPs one loop's sweep visits: a pass over more is spread over
/// [`SWEEP_INTERVAL`] in chunks of this many, so that a core with 10,000 QPs (each visit a
/// receive and a transmit attempt) does not hold its busy QPs for the whole table every
/// 50 ms, a stall of a millisecond or more in their latency's tail.
const SWEEP_CHUNK: usize = 256;

/// QP slots a poller must visit, each listed once (a mark per slot). What can give a QP work
/// marks it: a command for it, a TCP event of its connection, its own receive activity; a
/// QP leaves the set when a visit finds nothing to do, and is not marked for the transmit
/// poller where its visit would find nothing (`tx::tx_settled`). So a loop costs the QPs that are
/// busy, not the QPs that exist (issue 11: 10,000 QPs per core).
#[derive(Debug)]
struct ReadySet {
    list: Vec<usize>,
    marked: Vec<bool>,
}

impl ReadySet {
    fn new() -> Self {
        ReadySet {
            list: Vec::new(),
            marked: Vec::new(),
        }
    }

    /// Makes room for the marks of `slots` QP slots (the table grew).
    fn grow(&mut self, slots: usize) {
        if self.marked.len() < slots {
            self.marked.resize(slots, false);
        }
    }

    fn mark(&mut self, i: usize) {
        if let Some(m) = self.marked.get_mut(i) {
            if !*m {
                *m = true;
                self.list.push(i);
            }
        }
    }

    fn is_marked(&self, i: usize) -> bool {
        self.marked.get(i).copied().unwrap_or(false)
    }

    fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Moves the listed slots into `out` (empty) and clears their marks.
    fn take_into(&mut self, out: &mut Vec<usize>) {
        debug_assert!(out.is_empty());
        std::mem::swap(&mut self.list, out);
        for &i in out.iter() {
            self.marked[i] = false;
        }
    }
}

/// Engine cores made so far in the process ([`EngineCore::instance`]).
static ENGINE_INSTANCES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// One engine core over a device `D`: see the module documentation.
pub struct EngineCore<D: PollDevice> {
    core: u16,
    /// This core's number in the process ([`EngineCore::instance`]).
    instance: u64,
    /// Queue pairs reset so far ([`EngineCore::reset_qp`]): each reset's stream identity.
    resets: u64,
    stack: Stack<D>,
    ctx: Ctx,
    /// The QP slots. The table grows by one slot when a QP is created and no slot is free,
    /// up to [`EngineConfig::max_qps`], and never shrinks: a core sized for 10,000 QPs
    /// costs memory for the QPs it has had at once, not for its limit (issue 11, item 5).
    qps: Vec<Option<Qp>>,
    /// The empty slots of `qps`, the last freed on top (reused first: its lines are warm).
    free_slots: Vec<usize>,
    /// Indices of the occupied slots of `qps`, ascending: the pollers walk only these, so
    /// a loop costs the same whatever the table's size.
    live: Vec<usize>,
    /// Each slot's generation, bumped when a QP takes it (a stale [`QpId`] never matches).
    generations: Vec<u32>,
    listeners: Vec<Listener>,
    /// Pending connection requests; grows with the most pending at once, up to
    /// [`EngineConfig::max_pending_requests`].
    requests: Vec<Option<PendingReq>>,
    /// The occupied entries of `requests` (its poller does nothing while there are none).
    requests_live: usize,
    req_generations: Vec<u32>,
    /// Pending requests the requests poller must visit: new ones, those whose connection
    /// brought octets or a FIN, those answering. The others wait for such an event or for
    /// their deadline (`req_deadlines`): a loop costs the requests with something to do,
    /// not every one pending (a thousand silent connections cost each loop a thousand
    /// visits).
    req_ready: ReadySet,
    /// The pending requests' deadlines (MPA-7.1.2-27's startup timeout, the closing
    /// bound), keyed by slot and generation; a request's live entry is the one its
    /// `PendingReq::timer` names. A loop visits the requests whose deadline has passed,
    /// each at its deadline: a visit of every request at the earliest deadline cost a slow
    /// flood N visits N times per timeout, and one at most every 50 ms let a request
    /// outlive its deadline by up to 50 ms.
    req_deadlines: Deadlines<(u32, u32)>,
    /// Empty slots of the request table below its width, for the next request: a new
    /// connection found one by a scan of the table. Entries may be stale (a slot taken
    /// since by the table's growth path); `free_request_slot` checks.
    req_free: Vec<usize>,
    /// The requests still reading their MPA Request and those closing, each in arrival
    /// order (keyed by slot and generation; an entry whose request ended or moved on is
    /// stale and dropped when it surfaces, the queue compacted as `req_deadlines`): the
    /// candidates `evict_request` takes from a full table, oldest first, found without the
    /// two scans of the whole table it made for every connection of a flood.
    req_reading: Deadlines<(u32, u32), u64>,
    req_closing: Deadlines<(u32, u32), u64>,
    /// The request slot of each TCP connection, indexed by [`ConnId::slot`] (`NO_QP`:
    /// none), as `conn_qp`: a TCP event finds its request without a scan. Entries may be
    /// stale; `find_req` checks.
    conn_req: Vec<u32>,
    /// Scratch list of the requests the requests poller visits.
    req_batch: Vec<usize>,
    /// TCP connections whose QP is gone, released once TCP finished closing.
    zombies: Zombies,
    /// The QP slot of each TCP connection, indexed by [`ConnId::slot`] (`NO_QP`: none), so a
    /// TCP event finds its QP without a scan. Entries may be stale; `find_qp` checks.
    conn_qp: Vec<u32>,
    /// QPs the receive poller must visit.
    rx_ready: ReadySet,
    /// QPs the transmit poller must visit.
    tx_ready: ReadySet,
    /// A request was posted to an empty send queue since the last loop: the next loop
    /// sends before it receives ([`EngineCore::poll`]).
    send_first: bool,
    /// FPDUs were framed into TCP send buffers when their requests were posted
    /// ([`Qp::write_at_post`]), after the last transmit pass (the last loop's, or a lone
    /// post's own: [`Self::transmit_posted`]): the next loop transmits first.
    framed_at_post: bool,
    /// The requests framed at post, in posting order, whose slots and completions the
    /// next loop gives back before anything else ([`Self::complete_posted_out`]). At most
    /// the send queue depths of the live QPs (each holds its slot until then); grows with
    /// what is posted, as the send queues do.
    posted_out: Vec<PostedOut>,
    /// Scratch list of the slots a poller visits this loop.
    batch: Vec<usize>,
    /// The startup deadlines of the QPs' MPA initiators (MPA-7.1.2-27), keyed by QP slot
    /// and generation: [`Self::connect`] adds one, `poll_timers` takes those due, each at
    /// its deadline (it visited every connecting QP at every loop). An entry whose QP was
    /// destroyed or reset, or whose startup ended, is dropped when it surfaces (its QP's
    /// initiator no longer has that deadline), or by a compaction when stale entries
    /// outnumber the live QPs (a churn of connects and destroys).
    mpa_timers: Deadlines<(u16, u32)>,
    /// The engine time at which `mpa_timers`' earliest entry is due (rounded up to the
    /// clock's microsecond; the far future when there is none): what a loop compares its
    /// time with, one comparison. An initiator's entry outlives its startup (deleted
    /// lazily), and reading the heap and converting its instant at every loop cost an
    /// idle loop ~15 instructions a core.
    mpa_due: Instant,
    /// The bounds of the graceful closes under way ([`EngineConfig::close_timeout_ms`]),
    /// keyed by QP slot and generation; a QP's live entry is the one its connection's
    /// `CloseWatch::due` names (an entry whose QP went, or whose close moved on, is
    /// dropped when it surfaces, or by a compaction, as `mpa_timers`).
    close_timers: Deadlines<(u16, u32), Instant>,
    /// When `close_timers`' earliest entry is due (`NEVER`: none), as `mpa_due`.
    close_due: Instant,
    /// Connection requests accepted from TCP so far (their arrival numbers).
    arrivals: u64,
    /// When the sweep next visits live QPs regardless of the ready sets (its next chunk).
    sweep_at: Instant,
    /// The slot from which the sweep's pass goes on (`live` is sorted by slot, and a QP
    /// keeps its slot: a pass in chunks visits every QP live throughout it once).
    sweep_from: usize,
    /// When the sweep's current pass began (its first chunk).
    sweep_pass: Instant,
    /// The sweep's chunk of slots (kept for its capacity).
    sweep_slots: Vec<usize>,
    clock_base: StdInstant,
    now: Instant,
    /// Scratch for a payload gathered before framing and for an FPDU framed before it is
    /// copied into a wrapped send buffer; allocated at first use.
    gather: Vec<u8>,
    fpdu: Vec<u8>,
    /// The FPDUs sent from registered memory that TCP may still send (module `txrec`).
    txrec: TxRecords,
    /// QPs the stack's receive pass found settled but for their records sent from memory
    /// (`tx::tx_settled_but_txrec`), not marked for the transmit poller: those records are
    /// looked at once the pass is over.
    rx_settled: Vec<usize>,
    /// With the `self-check` feature: QPs a send request was posted to, not marked for the
    /// receive poller ([`Self::qp_mut_for_send`]), checked in the next loop.
    rx_check: Vec<usize>,
    /// The region table again (the one in `ctx`): the receive pass and the transmit-only
    /// pass borrow it apart from `ctx`, for the guard each keeps across segments
    /// ([`RxHeld`], `txrec::TxHeld`).
    rx_mrs: Arc<MrTable>,
}

impl<D: PollDevice> std::fmt::Debug for EngineCore<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineCore")
            .field("core", &self.core)
            .field("qps", &self.qps.iter().filter(|q| q.is_some()).count())
            .field("stats", &self.ctx.stats)
            .finish_non_exhaustive()
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
        // Stream identities keep the core in 14 bits (`QpId::stream`, `reset_stream`).
        if core >= 1 << 14 {
            return Err(EngineError::LimitExceeded("core"));
        }
        let mut sc = stack_cfg.clone();
        sc.max_connections = cfg.max_connections;
        sc.out_of_order_budget_bytes = cfg.tcp_out_of_order_budget_bytes;
        let mut stack = Stack::with_implementation(device, &sc, now, cfg.tcp_implementation)?;
        // Received segments' checksums summed with the CPU's widest vectors, where the TCP
        // crate (no `unsafe`, so no run-time choice of instructions) would use SSE2.
        if let Some(bulk) = crate::mem::crc::bulk_sum() {
            stack.set_bulk_sum(bulk);
        }
        // Where the CPU has the folding paths (512-bit or 256-bit), a full segment's payload
        // is summed and its CRC32c taken in the same pass, and the deframer checks the FPDU
        // filling it against that CRC instead of reading it again (`Deframer::poll_digest`).
        if let Some(digest) = crate::mem::crc::payload_digest() {
            stack.set_payload_digest(Some((digest, crate::mem::crc::PAYLOAD_DIGEST_MIN)));
        }
        Ok(EngineCore {
            core,
            instance: ENGINE_INSTANCES.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            resets: 0,
            qps: Vec::new(),
            free_slots: Vec::new(),
            live: Vec::new(),
            generations: Vec::new(),
            listeners: Vec::with_capacity(8),
            requests: Vec::new(),
            requests_live: 0,
            req_generations: Vec::new(),
            req_ready: ReadySet::new(),
            req_deadlines: Deadlines::new(),
            req_free: Vec::new(),
            req_reading: Deadlines::new(),
            req_closing: Deadlines::new(),
            conn_req: Vec::new(),
            req_batch: Vec::new(),
            zombies: Zombies::new(),
            conn_qp: Vec::new(),
            rx_ready: ReadySet::new(),
            tx_ready: ReadySet::new(),
            send_first: false,
            framed_at_post: false,
            posted_out: Vec::new(),
            batch: Vec::new(),
            mpa_timers: Deadlines::new(),
            mpa_due: NEVER,
            close_timers: Deadlines::new(),
            close_due: NEVER,
            arrivals: 0,
            sweep_at: now + SWEEP_INTERVAL,
            sweep_from: 0,
            sweep_pass: now,
            sweep_slots: Vec::new(),
            clock_base,
            now,
            gather: Vec::new(),
            fpdu: Vec::new(),
            txrec: TxRecords::new(),
            rx_mrs: mrs.clone(),
            rx_settled: Vec::new(),
            rx_check: Vec::new(),
            stack,
            ctx: Ctx {
                events: VecDeque::with_capacity(cfg.event_queue_depth),
                refusals_queued: 0,
                stats: CoreStats::default(),
                cfg,
                mrs,
            },
        })
    }

    /// The core's number.
    pub fn core_index(&self) -> u16 {
        self.core
    }

    /// This engine core's number in the process, never given to another one: what its
    /// [`RequestId`]s carry ([`RequestId::engine`]), so that a request of another engine
    /// (another context's core of the same [`Self::core_index`]) is refused, not taken
    /// for one of this core's.
    pub fn instance(&self) -> u64 {
        self.instance
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.ctx.cfg
    }

    /// The region table.
    pub fn mrs(&self) -> &Arc<MrTable> {
        &self.ctx.mrs
    }

    /// Counters.
    pub fn stats(&self) -> CoreStats {
        let t = self.stack.tcp_totals().unwrap_or_default();
        let h = self.stack.host_stats().unwrap_or_default();
        CoreStats {
            tcp_segments_sent: t.segments_sent,
            tcp_segments_received: t.segments_received,
            tcp_retransmitted_segments: t.retransmitted_segments,
            tcp_rtos: t.rtos,
            tcp_spurious_rtos: t.spurious_rtos,
            tcp_tail_loss_probes: t.tail_loss_probes,
            tcp_fast_recoveries: t.fast_recoveries,
            tcp_undone_recoveries: t.undone_recoveries,
            tcp_dsacks_received: t.dsacks_received,
            tcp_out_of_order_refused: h.out_of_order_refused,
            tcp_out_of_order_held: h.out_of_order_held,
            tcp_out_of_order_no_block: t.out_of_order_no_block,
            tcp_out_of_order_reneged: h.out_of_order_reneged,
            qps_live: self.live.len() as u64,
            requests_pending: self.requests_live as u64,
            mpa_timers: self.live_mpa_timers() as u64,
            tcp_connections: self.stack.live() as u64,
            tcp_zombies: self.zombies.len() as u64,
            tx_from_memory_wire_octets: t.external_octets_sent,
            mrs_registered: self.ctx.mrs.registered() as u64,
            pool_in_use: self.stack.device_stats().pool_in_use,
            ..self.ctx.stats
        }
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
        let ev = self.ctx.events.pop_front();
        if matches!(ev, Some(CmEvent::RequestRefused { .. })) {
            self.ctx.refusals_queued -= 1;
        }
        ev
    }

    /// Whether [`EngineCore::next_event`] has an event.
    #[inline]
    pub fn has_events(&self) -> bool {
        !self.ctx.events.is_empty()
    }

    fn now_std(&self) -> StdInstant {
        self.clock_base + StdDuration::from_micros(self.now.total_micros().max(0) as u64)
    }

    /// The QP `id` names, unmarked (a look-up that gives it no work).
    fn qp_ref(&self, id: QpId) -> Result<&Qp, EngineError> {
        qp_in(&self.qps, id).ok_or(EngineError::UnknownQp)
    }

    /// The QP a command names. Every command may give it work, so it is marked for both
    /// pollers (a send request only for the transmit poller: [`Self::qp_mut_for_send`]).
    fn qp_mut(&mut self, id: QpId) -> Result<&mut Qp, EngineError> {
        if id.core != self.core {
            return Err(EngineError::UnknownQp);
        }
        self.mark(usize::from(id.index));
        match self.qps.get_mut(usize::from(id.index)) {
            Some(Some(q)) if q.id == id => Ok(q),
            _ => Err(EngineError::UnknownQp),
        }
    }

    /// The QP a send work request is posted to: [`Self::qp_mut`], marked for the transmit
    /// poller only. A posted send request gives the receive poller nothing to do: its steps
    /// read the TCP receive queue and the connection's close, which mark it themselves (a
    /// Readable or PeerClosed event, its own unfinished budget). With the `self-check`
    /// feature the receive visit it would have had is made where the receive poller runs,
    /// if nothing marked it meanwhile, and must find nothing.
    fn qp_mut_for_send(&mut self, id: QpId) -> Result<&mut Qp, EngineError> {
        if id.core != self.core {
            return Err(EngineError::UnknownQp);
        }
        let i = usize::from(id.index);
        self.tx_ready.mark(i);
        if cfg!(any(test, feature = "self-check")) {
            self.rx_check.push(i);
        }
        match self.qps.get_mut(i) {
            Some(Some(q)) if q.id == id => Ok(q),
            _ => Err(EngineError::UnknownQp),
        }
    }

    /// Marks QP slot `i` for both pollers.
    fn mark(&mut self, i: usize) {
        self.rx_ready.mark(i);
        self.tx_ready.mark(i);
    }

    /// Takes the next loop's receive snapshot now ([`warpcore_tcp::host::Host::begin_poll`]): the
    /// runtime calls it before it applies the application's commands, so that a frame
    /// [`Self::poll`] takes reached the device before they were applied. A receive posted
    /// (a command) before the peer was told to Send is then always there for the Send, on
    /// whatever schedule the threads ran: without the snapshot, a core that looked at an
    /// empty command ring just before the application posted, and then took in its rx
    /// burst a Send sent after that post, failed the stream with "no buffer"
    /// (DDP 1/2/02), and the receive was flushed.
    #[inline]
    pub fn begin_poll(&mut self) {
        self.stack.begin_poll();
    }

    /// The time the commands applied before the next [`Self::poll`] count from (a neighbour
    /// resolution's timeout, a connection's MPA timer, its TCP connect's timeout): the
    /// runtime gives a reading taken once it saw commands waiting, the one that poll will be
    /// given, before it applies the loop's first command. Without
    /// it they counted from the previous loop's, which after a park (up to 200 µs, more on a
    /// loaded host) made a 300 ms neighbour resolution fail 0.3 ms before its caller's
    /// 300 ms had passed. Set only when there are commands: the idle loop pays nothing.
    #[inline]
    pub fn commands_at(&mut self, now: Instant) {
        self.now = now;
        // The TCP's too: a connect's timeout counts from it (and a release's RST goes at
        // it), not from the last poll's time, stale by a park or, in a caller-driven core,
        // by however long the application went without driving it.
        self.stack.set_time(now);
    }

    /// The next loop takes no frame: it was given fewer of the queued commands than were
    /// waiting before its snapshot (the runtime's per-loop `command_budget`), and its
    /// frames may need them (a receive among them). They stay in the device for the next
    /// loop.
    #[inline]
    pub fn hold_rx(&mut self) {
        self.stack.hold_rx();
    }

    /// Runs one loop of the pollers at time `now`; returns whether any did work.
    ///
    /// The order: a request posted to an idle send queue goes out first; then the engine's
    /// pollers act on what earlier loops received and on the application's commands; the
    /// stack's poll comes last: its rx burst places what arrived, then its transmit pass
    /// sends what the pollers queued and its one flush ends the loop. So a loop that
    /// receives a message ends soon after placing it (a caller-driven application sees
    /// it at once, its answer does not wait behind the pollers' work), and a loop that
    /// queued FPDUs sends them in the stack's pass, not in a second one.
    pub fn poll(&mut self, now: Instant) -> bool {
        self.now = now;
        self.ctx.stats.loops += 1;
        let mut work = false;
        // A request posted to an idle send queue (a ping-pong's answer, a lone request) is
        // framed and on the wire before anything else: the pollers and the rx burst would
        // delay it for nothing. A busy send queue (bulk transfer) waits for the stack's
        // pass, after the ACKs of the rx burst widened what may be sent.
        if self.send_first {
            self.send_first = false;
            // Framed at post and not yet handed to the device (a lone Write its caller-driven
            // post sent cleared it: `transmit_posted`); completed either way.
            let framed = std::mem::take(&mut self.framed_at_post);
            let posted = !self.posted_out.is_empty();
            if posted {
                self.complete_posted_out();
            }
            if self.poll_tx() | framed {
                work = true;
                self.transmit();
            }
            work |= posted;
        }
        work |= self.poll_tcp_events();
        work |= self.poll_requests();
        if now >= self.sweep_at {
            work |= self.sweep(now);
        }
        if cfg!(any(test, feature = "self-check")) {
            self.check_rx_unmarked();
        }
        // Each poller is skipped outright when it has nothing to visit (the idle loop).
        if !self.rx_ready.is_empty() {
            work |= self.poll_rx();
        }
        // The startup timers only when the earliest is due; the closes' bounds likewise.
        if now >= self.mpa_due {
            work |= self.poll_timers();
        }
        if now >= self.close_due || now >= self.zombies.due() {
            work |= self.poll_close_timers();
        }
        if !self.tx_ready.is_empty() {
            work |= self.poll_tx();
        }
        // The rx burst, then whatever the pollers queued (FPDUs, startup frames, FINs,
        // window updates after a read) with the stack's own ACKs, one flush. What the burst
        // brought (events, marked QPs) is for the next loop; a loop that did something
        // says so, and the caller polls again.
        work | self.poll_stack(now)
    }

    /// The `self-check` of [`Self::qp_mut_for_send`]: each QP a send request was posted to
    /// since the last loop and that nothing marked for the receive poller has the visit it
    /// would have had, which must find nothing.
    #[cold]
    #[inline(never)]
    fn check_rx_unmarked(&mut self) {
        for i in std::mem::take(&mut self.rx_check) {
            if !self.rx_ready.is_marked(i) && self.qps.get(i).is_some_and(|q| q.is_some()) {
                assert!(
                    !self.rx_one(i),
                    "QP slot {i}: an unmarked QP had receive work"
                );
            }
        }
    }

    /// The stack's transmit pass: what the pollers queued goes out, then one device flush.
    fn transmit(&mut self) {
        let EngineCore {
            stack,
            txrec,
            now,
            rx_mrs,
            ..
        } = self;
        let mrs: &MrTable = rx_mrs;
        // The pass's guard (`txrec::TxHeld`): the pass runs no engine code but the fill.
        let mut held: txrec::TxHeld<'_> = None;
        stack.poll_transmit_fill(*now, |c, t, at, dst, sum| {
            txrec.fill(c, t, at, dst, sum, mrs, &mut held)
        });
        drop(held);
        if self.txrec.has_failed() {
            self.fail_unfillable();
        }
    }

    /// Connections whose FPDU sent from registered memory could not be read again (its
    /// region was deregistered or invalidated while TCP could still resend it; module
    /// `txrec`): TCP sent an RST and closed; the request fails with
    /// [`WcStatus::LocalProtection`] and the QP with a local catastrophic error, reported
    /// to the application (the connection's Closed event then detaches it).
    #[cold]
    fn fail_unfillable(&mut self) {
        while let Some((conn, seq)) = self.txrec.take_failed() {
            let Some(i) = self.find_qp(conn) else {
                continue;
            };
            let EngineCore { qps, ctx, .. } = self;
            if let Some(q) = qps[i].as_mut() {
                q.fail_tx_source(seq, ctx);
            }
            self.mark(i);
        }
    }

    /// Visits the next chunk of the live QPs (at most [`SWEEP_CHUNK`]; a pass over all of
    /// them every [`SWEEP_INTERVAL`]), each whether or not a ready set lists it, as the
    /// pollers would, and counts those that had work ([`CoreStats::missed_wakeups`]: a
    /// trigger that should have marked them did not). Also where a CQ overrun reaches the
    /// QPs of that CQ that were idle. Sets when it next runs.
    fn sweep(&mut self, now: Instant) -> bool {
        let mut work = false;
        if self.sweep_from == 0 {
            self.sweep_pass = now;
        }
        let start = self.live.partition_point(|&i| i < self.sweep_from);
        let end = self.live.len().min(start + SWEEP_CHUNK);
        let mut slots = std::mem::take(&mut self.sweep_slots);
        slots.clear();
        slots.extend_from_slice(&self.live[start..end]);
        for &i in &slots {
            if self.qps[i].is_none() {
                continue;
            }
            self.ctx.stats.sweep_visits += 1;
            if !self.rx_ready.is_marked(i) && self.rx_one(i) {
                self.ctx.stats.missed_wakeups += 1;
                self.tx_ready.mark(i);
                work = true;
            }
            if !self.tx_ready.is_marked(i) && self.tx_qp(i) {
                self.ctx.stats.missed_wakeups += 1;
                self.tx_ready.mark(i);
                work = true;
            }
        }
        self.poll_cq_overrun(&slots);
        let left = self.live.len() - end;
        match slots.last() {
            Some(&last) if left > 0 => {
                // The rest of the pass in chunks spread over what is left of its interval.
                self.sweep_from = last + 1;
                let chunks = u32::try_from(left.div_ceil(SWEEP_CHUNK) + 1).unwrap_or(u32::MAX);
                let due = self.sweep_pass + SWEEP_INTERVAL;
                let rest = if due > now { due - now } else { Duration::ZERO };
                self.sweep_at = now + rest / chunks;
            }
            _ => {
                // The pass is over: the next begins an interval after this one began (or
                // now, when this one overran it).
                self.sweep_from = 0;
                self.txrec.trim_idle();
                self.sweep_at = (self.sweep_pass + SWEEP_INTERVAL).max(now);
            }
        }
        self.sweep_slots = slots;
        work
    }

    /// When the core next needs a poll without new input (for simulated clocks): the
    /// stack's next timer, the earliest live MPA deadline (a pending request's, an
    /// initiator's: MPA-7.1.2-27), or the earliest bound of a graceful close
    /// ([`EngineConfig::close_timeout_ms`]), whichever comes first.
    pub fn poll_at(&mut self) -> Option<Instant> {
        let stack = self.stack.poll_at(self.now);
        let mpa = [self.next_request_deadline(), self.next_mpa_timer()]
            .into_iter()
            .flatten()
            .min()
            .map(|t| self.instant_of(t));
        [stack, mpa, self.next_close_timer()]
            .into_iter()
            .flatten()
            .min()
    }

    /// The engine time of `t` (rounded up to the clock's microsecond: a poll at it is not
    /// before `t`).
    pub(super) fn instant_of(&self, t: StdInstant) -> Instant {
        let d = t.saturating_duration_since(self.clock_base);
        let micros = d.as_micros() + u128::from(!d.subsec_nanos().is_multiple_of(1000));
        Instant::from_micros(i64::try_from(micros).unwrap_or(i64::MAX))
    }
}
