//! The engine's one validated configuration (GUIDE rule 7): every limit of the data path is
//! fixed here at start-up and checked once, so nothing on the data path allocates or grows.

use warpcore_tcp::smoltcp::time::Duration;
use warpcore_tcp::{TcpImplementation, TcpTuning};

/// The largest number of SGEs a work request can carry; [`EngineConfig::max_sge`] may be
/// lower. Work requests keep their SGEs inline, so this bounds their size.
pub const MAX_SGE: usize = 4;

/// The deepest queue [`EngineConfig`] allows (2^22, 4,194,304 entries: the `max_cqe` of the
/// largest RDMA devices): the limits of work and completion queues and the depths of a
/// core's command and event rings. Those rings are allocated whole when the core starts
/// and a queue when it is created, so an absurd depth would abort the process on
/// allocation instead of being refused by [`EngineConfig::validate`].
pub const MAX_QUEUE_DEPTH: usize = 1 << 22;

/// The longest [`EngineConfig::shutdown_linger_ms`]: a minute. A core sleeps that long when
/// it stops, in the thread that drops the context's last handle or joins the core, so a
/// value without a ceiling (`u64::MAX`) made dropping a context hang.
pub const SHUTDOWN_LINGER_MAX_MS: u64 = 60_000;

/// The longest [`EngineConfig::close_timeout_ms`]: a day (the TCP's own timers stop there,
/// `warpcore_tcp::TIMER_MAX`). A graceful close that may wait longer without progress is
/// one that never ends.
pub const CLOSE_TIMEOUT_MAX_MS: u64 = 86_400_000;

/// The most connections per core [`EngineConfig::max_connections`] allows (2^20); the
/// smoltcp reference allocates its table for all of them up front.
pub const MAX_CONNECTIONS: usize = 1 << 20;

/// Every limit of an engine core.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Queue pairs per core. 10,000 by default (issue 11, item 5): the QP table grows with
    /// the QPs a core has at once and nothing is reserved per QP up front, so a high limit
    /// costs nothing until it is used; at most [`crate::wr::MAX_QPS_PER_CORE`] (16,384).
    pub max_qps: usize,
    /// Largest send queue depth a QP may ask for.
    pub max_sq_depth: usize,
    /// Largest receive queue depth a QP may ask for.
    pub max_rq_depth: usize,
    /// SGEs per work request (at most [`MAX_SGE`]).
    pub max_sge: usize,
    /// Largest IRD (inbound Read Requests served at once) a QP may negotiate.
    pub max_ird: u16,
    /// Largest ORD (outbound Read Requests in flight) a QP may negotiate.
    pub max_ord: u16,
    /// Largest completion queue depth.
    pub max_cq_depth: usize,
    /// Entries of the memory region table.
    pub mr_table_capacity: usize,
    /// Pending connection requests per core: accepted TCP connections whose MPA Request is
    /// being read or awaits the application. Bounded against floods: when the table is
    /// full, a new connection pushes out a request already closing, else the oldest whose
    /// Request has not arrived (reset); requests handed to the application stay. A client
    /// that sends its Request at once (every MPA initiator does) is read within a loop or
    /// two, so it gets through unless more than this many connections arrive in that time.
    /// 1,024 by default: a burst of legitimate clients connecting at once (a parallel job
    /// starting, `wcconnrate --parallel 32`) must not push each other out, which 16 did;
    /// the table grows with the requests pending at once (about a kilobyte each), so the
    /// bound costs memory only under a flood, at most about a megabyte.
    pub max_pending_requests: usize,
    /// Connection manager events buffered per core: the ring to the application. Events
    /// beyond it wait in the core, never lost, but those a network peer can cause without
    /// end are bounded there: at most this many `RequestRefused` reports wait (further
    /// ones are counted in `CoreStats::refusals_unreported`), and a request that ends
    /// before the application took its `ConnectRequest` withdraws that event
    /// (`CoreStats::requests_withdrawn`), so undelivered requests are at most
    /// `max_pending_requests`.
    pub event_queue_depth: usize,
    /// Commands (work requests, CM calls) buffered from application threads per core.
    pub command_queue_depth: usize,
    /// Received stream octets one connection may process per loop (receive poller budget).
    pub rx_budget_bytes: usize,
    /// FPDUs one connection may emit per loop (send poller budget).
    pub tx_budget_fpdus: usize,
    /// Commands taken from the application ring per loop.
    pub command_budget: usize,
    /// IP MTU of the device (sets the MSS and thereby MULPDU). The verbs layer sets it
    /// from the device it opens (a DPDK port's MTU, an in-memory link's): what is given
    /// here counts for an engine core built by hand.
    pub mtu: usize,
    /// TCP buffers and behaviour of every connection. The buffers default to 4 MiB each
    /// way: the receiver acknowledges once per loop, after all it received (at MTU 9000 a
    /// sender's transmit pass is 64 frames, 576 KiB), so the window must hold several such
    /// bursts for the ACK of one to come back before the sender runs dry (64 KiB write_bw
    /// over net_memif at MTU 9000: at 256 KiB 8-11 Gbit/s; at 1 MiB the sender waited for
    /// ACKs in most of its loops and, once its copy, checksum and CRC became one pass, fell
    /// from ~35 to ~28 Gbit/s; at 2 MiB 38-42, at 4 MiB 44-47). Warpcore's TCP grows its
    /// buffers only as far as the data in flight needs, so an idle connection holds a few
    /// KiB whatever the limit.
    ///
    /// The ACK of a lone in-order segment waits up to [`ENGINE_ACK_DELAY`] (20 us) for data
    /// to ride on: in a request/response exchange (a 64 B write_lat, a Send answered by a
    /// Send, an RDMA Read) the answer carries it, so each side sends one segment per message
    /// instead of two and the answer leaves one pure ACK earlier (write_lat 64 B over
    /// net_memif: median 1.58-1.60 -> 1.42-1.46 us in alternating runs). Two segments
    /// unacknowledged, a gap, a duplicate or a FIN are acknowledged at once as before (RFC
    /// 5681 4.2, RFC 1122 4.2.3.2), so bulk transfers are unchanged. The cost: a request
    /// sent from registered memory ([`EngineConfig::tx_from_memory_min`]) in one segment that
    /// the peer does not answer completes up to 20 us later. Our TCP's probe timeout allows a
    /// peer 1 ms of ACK delay with one segment in flight (RFC 8985 7.2), so this delay never
    /// fires a probe; [`EngineConfig::validate`] refuses more than that.
    /// `rx_window_clamp` is the engine's (refused unless `None`): its listeners' connections
    /// offer 4 KiB until their request is accepted, then the whole `rx_buffer`.
    pub tcp: TcpTuning,
    /// Which TCP runs under the core: Warpcore's own (the default) or the smoltcp reference
    /// (kept for differential tests, never the default path).
    pub tcp_implementation: TcpImplementation,
    /// How long the MPA startup may take: an initiator waits this long for the Reply
    /// (counted from its TCP connection's establishment, when MPA starts; also from
    /// `connect` if `tcp.timeout` is `None`), a responder for the Request (then the
    /// connection is reset), and a request the application has not answered by then is
    /// dropped ([`crate::CmEvent::RequestCancelled`]).
    /// 10 s: long enough for a peer under emulation or far away (siw in a TCG VM answers in
    /// well under a second), short enough that a silent connection soon frees its slot.
    pub mpa_timeout_ms: u64,
    /// How long a graceful close may go without progress before it is given up. A QP
    /// closing gracefully (its user's `disconnect`, which the drop-in's `rdma_disconnect`
    /// and `ibv_modify_qp` to SQD reach too, or the drain after the peer's FIN) first
    /// sends what it owes and waits for the Read Responses its own Reads await, then sends
    /// its FIN (RDMAP-06 §6). A peer that holds its receive window at zero while it
    /// answers the probes (RFC 9293 3.8.6.1: no TCP timer gives up on it), or that never
    /// answers a Read, held that close for good, and the QP and its registered memory with
    /// it. When nothing moved for this long (no octet framed, acknowledged or received, no
    /// request completed) before our FIN is acknowledged, the close ends as an abort does:
    /// RST, everything outstanding flushed, and [`crate::CmEvent::Disconnected`] with
    /// [`crate::DisconnectCause::CloseTimedOut`] (Linux's siw moves such a QP to ERROR;
    /// the kernel bounds an orphaned close with `tcp_orphan_retries`). Progress is looked
    /// at whenever the transmit poller visits the QP (at least every 50 ms), so the close
    /// is given up within 50 ms after the bound. A close whose data TCP is retransmitting
    /// to a peer with an open window is TCP's to carry through or end (its retransmission
    /// backoff, its user timeout): a lossy or briefly dead path is not a stalled close.
    /// Once our FIN is acknowledged the bound no
    /// longer applies: a peer that then neither sends nor closes is
    /// `tcp.fin_wait_2_timeout`'s. A close TCP finishes after the QP let its connection go
    /// (destroyed or reset after its FIN went out, or its close ended with the peer's FIN
    /// before ours was acknowledged) is reset once what TCP still has to send made no
    /// progress for as long. 5 s by default: far above a round trip and the
    /// retransmission timeouts of a path that still delivers. At least 1, at most
    /// [`CLOSE_TIMEOUT_MAX_MS`].
    pub close_timeout_ms: u64,
    /// Most TCP connections per core (listener backlogs included). 10,240 by default: one
    /// for each of [`EngineConfig::max_qps`] plus room for connections still being set up
    /// or closing; the TCP's tables grow with the connections that exist, not with this.
    pub max_connections: usize,
    /// The most octets a core's TCP connections hold out of order together: the core's
    /// stack's [`warpcore_tcp::StackConfig::out_of_order_budget_bytes`] (set from here, as
    /// `max_connections` is). Each connection's window (`tcp.rx_buffer`, 4 MiB) bounds its
    /// own; this bounds what peers holding many connections can make a core keep (10,240
    /// windows: 40 GiB). An out-of-order segment beyond it is dropped unSACKed and sent
    /// again by its peer ([`crate::CoreStats::tcp_out_of_order_refused`]), unless its
    /// connection holds less than its share (the budget over the connections holding
    /// octets) and another more: that one then gives up its highest octets for it
    /// (reneging, RFC 2018 8; [`crate::CoreStats::tcp_out_of_order_reneged`]). 128 MiB
    /// ([`warpcore_tcp::OUT_OF_ORDER_BUDGET_DEFAULT`]) by default: 32 whole windows, far
    /// more than the few bulk transfers of a core recovering from loss at once hold. Any
    /// value is taken (0: nothing held out of order).
    pub tcp_out_of_order_budget_bytes: usize,
    /// On shutdown, how long a core keeps its device open after it stopped polling. Two
    /// processes over DPDK net_memif 22.11 need both sides to stop polling before either
    /// closes its port (a disconnect during `rx_burst` can crash the peer); 0 elsewhere.
    /// At most [`SHUTDOWN_LINGER_MAX_MS`].
    pub shutdown_linger_ms: u64,
    /// The least DDP payload, in octets, of an FPDU sent from registered memory (issue 12
    /// item 3): the TCP holds no copy of it; each time a frame carries the FPDU, first
    /// transmission or retransmission, its payload is copied from the region straight
    /// into the frame and framed there with its CRC. Only with Warpcore's TCP (the smoltcp
    /// reference copies every FPDU), and only FPDUs whose payload comes from registered
    /// memory: the Sends (every kind) and RDMA Writes of the send queue (from their SGEs)
    /// and the Read Responses we owe (from the region the peer's Read names). Copied into
    /// the TCP's send buffer whatever their size: a Read Response of no octets (its
    /// source is never validated, RDMAP-5.2.1-13/14), FPDUs whose DDP and RDMAP headers
    /// are longer than an untagged DDP header (Read Requests, Atomic Requests, Immediate
    /// Data: their content is all header), Atomic Responses, the Terminate and the RTR,
    /// and an FPDU a marker would fall inside (with markers, one every 512 stream octets,
    /// so in practice every FPDU of 512 payload octets or more). A message's shorter last
    /// FPDU that joins the run of its larger ones in the same transmit pass goes from
    /// memory with them, whatever its size (runs are built without markers, and only
    /// from FPDUs with no ULP header octets: module `core/txrec.rs`). A Send or Write
    /// with an FPDU sent from memory completes once TCP has every such FPDU of it
    /// acknowledged (its buffer is not read again), after its last FPDU was queued; one
    /// whose FPDUs were all copied completes when its last is queued (for them the copy
    /// costs less than the bookkeeping). Read Responses complete nothing. `usize::MAX`
    /// turns sending from registered memory off; 0 sends every FPDU of the kinds above
    /// from it, zero-length Sends and Writes included. 512 by default.
    pub tx_from_memory_min: usize,
}

/// How long the engine's TCP holds the ACK of a lone in-order segment for data to carry it
/// ([`EngineConfig::tcp`]): 20 us, a few poll loops of an application that answers at once.
pub const ENGINE_ACK_DELAY: Duration = Duration::from_micros(20);

/// The longest ACK delay [`EngineConfig::validate`] accepts: the 1 ms our TCP's probe timeout
/// allows a peer with one segment in flight (RFC 8985 7.2).
pub const MAX_ACK_DELAY: Duration = Duration::from_millis(1);

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            max_qps: 10_000,
            max_sq_depth: 1024,
            max_rq_depth: 1024,
            max_sge: MAX_SGE,
            max_ird: 16,
            max_ord: 16,
            max_cq_depth: 8192,
            mr_table_capacity: 4096,
            max_pending_requests: 1024,
            event_queue_depth: 256,
            command_queue_depth: 4096,
            rx_budget_bytes: 256 * 1024,
            tx_budget_fpdus: 64,
            command_budget: 256,
            mtu: 1500,
            tcp: TcpTuning {
                rx_buffer: 4 * 1024 * 1024,
                tx_buffer: 4 * 1024 * 1024,
                ack_delay: Some(ENGINE_ACK_DELAY),
                // A connection is closed only once both sides drained (RDMAP-06 §6): a peer
                // that acknowledges our FIN and then neither sends nor closes for a minute
                // would otherwise hold the connection, and a disconnecting QP's
                // `Disconnected`, for good.
                fin_wait_2_timeout: Some(Duration::from_secs(60)),
                ..TcpTuning::default()
            },
            tcp_implementation: TcpImplementation::Warpcore,
            mpa_timeout_ms: 10_000,
            close_timeout_ms: 5_000,
            max_connections: 10_240,
            tcp_out_of_order_budget_bytes: warpcore_tcp::OUT_OF_ORDER_BUDGET_DEFAULT,
            shutdown_linger_ms: 0,
            tx_from_memory_min: 512,
        }
    }
}

/// A configuration value out of range: which field and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("engine configuration: {field} {reason}")]
pub struct ConfigError {
    /// The offending field.
    pub field: &'static str,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl EngineConfig {
    /// Checks every limit.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |field, reason| Err(ConfigError { field, reason });
        let nonzero: [(&'static str, usize); 13] = [
            ("max_qps", self.max_qps),
            ("max_sq_depth", self.max_sq_depth),
            ("max_rq_depth", self.max_rq_depth),
            ("max_sge", self.max_sge),
            ("max_cq_depth", self.max_cq_depth),
            ("mr_table_capacity", self.mr_table_capacity),
            ("max_pending_requests", self.max_pending_requests),
            ("event_queue_depth", self.event_queue_depth),
            ("command_queue_depth", self.command_queue_depth),
            ("rx_budget_bytes", self.rx_budget_bytes),
            ("tx_budget_fpdus", self.tx_budget_fpdus),
            ("command_budget", self.command_budget),
            ("max_connections", self.max_connections),
        ];
        for (name, v) in nonzero {
            if v == 0 {
                return err(name, "must be at least 1");
            }
        }
        // Each named on its own: the caller learns which one to change.
        for (name, v) in [
            ("event_queue_depth", self.event_queue_depth),
            ("command_queue_depth", self.command_queue_depth),
        ] {
            if !v.is_power_of_two() {
                return err(name, "must be a power of two (an SPSC ring)");
            }
        }
        for (name, v) in [
            ("max_sq_depth", self.max_sq_depth),
            ("max_rq_depth", self.max_rq_depth),
            ("max_cq_depth", self.max_cq_depth),
            ("event_queue_depth", self.event_queue_depth),
            ("command_queue_depth", self.command_queue_depth),
        ] {
            if v > MAX_QUEUE_DEPTH {
                return err(name, "exceeds MAX_QUEUE_DEPTH (2^22)");
            }
        }
        if self.max_connections > MAX_CONNECTIONS {
            return err("max_connections", "exceeds MAX_CONNECTIONS (2^20)");
        }
        if self.max_pending_requests > self.max_connections {
            return err(
                "max_pending_requests",
                "exceeds max_connections (each pending request holds a connection)",
            );
        }
        if self.max_sge > MAX_SGE {
            return err("max_sge", "exceeds MAX_SGE (4)");
        }
        // RFC 6581 §9.1: IRD/ORD are 14-bit fields and 0x3FFF means "not negotiated".
        if self.max_ird >= 0x3FFF || self.max_ord >= 0x3FFF {
            return err("max_ird/max_ord", "must be below 0x3FFF");
        }
        if !(576..=9000).contains(&self.mtu) {
            return err("mtu", "must be between 576 and 9000");
        }
        if self.tcp.tx_buffer < 2 * 65536 || self.tcp.rx_buffer < 2 * 65536 {
            return err("tcp", "buffers must hold two maximal FPDUs (128 KiB)");
        }
        // What both TCPs refuse at connect (`TcpTuning`), refused here naming the field:
        // the smoltcp reference allocates its buffers whole (a larger one aborted the
        // process), and a timer past a day overflowed the TCP's clock (a keep-alive probe
        // at every poll, or a panic in a debug build).
        if self.tcp.tx_buffer > warpcore_tcp::BUFFER_MAX {
            return err(
                "tcp.tx_buffer",
                "must be at most 1 GiB (TCP's largest window)",
            );
        }
        if self.tcp.rx_buffer > warpcore_tcp::BUFFER_MAX {
            return err(
                "tcp.rx_buffer",
                "must be at most 1 GiB (TCP's largest window)",
            );
        }
        for (field, t) in [
            ("tcp.time_wait", Some(self.tcp.time_wait)),
            ("tcp.keep_alive", self.tcp.keep_alive),
            ("tcp.timeout", self.tcp.timeout),
            ("tcp.fin_wait_2_timeout", self.tcp.fin_wait_2_timeout),
            ("tcp.oow_ack_interval", Some(self.tcp.oow_ack_interval)),
        ] {
            if t.is_some_and(|t| t > warpcore_tcp::TIMER_MAX) {
                return err(field, "must be at most a day (warpcore_tcp::TIMER_MAX)");
            }
        }
        // The engine sleeps this long when it stops, in the thread that drops the last
        // handle (a caller-driven core) or joins the engine's: a value without a ceiling
        // made dropping a context wait for ever.
        if self.shutdown_linger_ms > SHUTDOWN_LINGER_MAX_MS {
            return err("shutdown_linger_ms", "must be at most 60,000 (a minute)");
        }
        // Our peers' probe timeout allows 1 ms of ACK delay (RecoveryConfig::max_ack_delay):
        // a longer one would have every lone segment probed and sent twice.
        if self.tcp.ack_delay.is_some_and(|d| d > MAX_ACK_DELAY) {
            return err(
                "tcp.ack_delay",
                "must be at most 1 ms (the ACK delay our peers' probe timeout allows)",
            );
        }
        // What both TCPs refuse when a connection is opened or a port listened on
        // (`TcpTuning`): refused here, at start-up, naming the field, not at the first
        // connect.
        if self.tcp.timeout == Some(Duration::ZERO) {
            return err("tcp.timeout", "must be longer than zero (None: no timeout)");
        }
        if self.tcp.keep_alive == Some(Duration::ZERO) {
            return err(
                "tcp.keep_alive",
                "must be longer than zero (None: no probes)",
            );
        }
        if self.tcp.fin_wait_2_timeout == Some(Duration::ZERO) {
            return err(
                "tcp.fin_wait_2_timeout",
                "must be longer than zero (None: no limit)",
            );
        }
        // RFC 6298 5.5: a zero RTO never backs off; 2.5: the ceiling RTO_MAX holds both
        // the initial RTO and the floor; 2.1/2.4: the floor is at most the initial RTO.
        if self.tcp.rto_initial == Duration::ZERO {
            return err("tcp.rto_initial", "must be longer than zero (RFC 6298 5.5)");
        }
        if self.tcp.rto_initial > warpcore_tcp::stack::RTO_MAX {
            return err(
                "tcp.rto_initial",
                "must be at most the RTO ceiling of 60 s (RFC 6298 2.5)",
            );
        }
        if self.tcp.rto_min > self.tcp.rto_initial {
            return err(
                "tcp.rto_min",
                "must be at most tcp.rto_initial (RFC 6298 2.1, 2.4)",
            );
        }
        // MPA hands TCP whole FPDUs that must leave at once (MPA-5.1-3); Warpcore's TCP
        // refuses Nagle's algorithm at connect.
        if self.tcp.nagle {
            return err("tcp.nagle", "must be off (MPA-5.1-3: FPDUs leave at once)");
        }
        // The engine sets the clamp itself: a listener's connections offer
        // `REQUEST_WINDOW` until accepted, then the whole buffer (a clamp kept after that
        // would cap every connection's window for good).
        if self.tcp.rx_window_clamp.is_some() {
            return err(
                "tcp.rx_window_clamp",
                "must be None (the engine clamps a listener's connections until accept)",
            );
        }
        // smoltcp applies the timeout to idle connections too: without probes shorter than
        // it, every idle queue pair would be reset (`TcpTuning::keep_alive`).
        if let Some(t) = self.tcp.timeout {
            if self.tcp.keep_alive.is_none_or(|k| k >= t) {
                return err(
                    "tcp.keep_alive",
                    "must be set and shorter than tcp.timeout (idle connections would be reset)",
                );
            }
        }
        if self.max_qps > crate::wr::MAX_QPS_PER_CORE {
            return err(
                "max_qps",
                "exceeds MAX_QPS_PER_CORE (16384: the QP number's slot bits)",
            );
        }
        // The region table is allocated whole at start-up and refuses more (a panic
        // there): the STag's index has 24 bits.
        if self.mr_table_capacity > crate::mem::MAX_CAPACITY {
            return err(
                "mr_table_capacity",
                "exceeds MAX_CAPACITY (2^24 - 1: the STag's 24-bit index)",
            );
        }
        // A zero timeout fails every MPA startup at its first poll.
        if self.mpa_timeout_ms == 0 {
            return err("mpa_timeout_ms", "must be at least 1");
        }
        // A zero bound gives every graceful close up at its first look; one past a day is
        // one that never ends.
        if self.close_timeout_ms == 0 {
            return err("close_timeout_ms", "must be at least 1");
        }
        if self.close_timeout_ms > CLOSE_TIMEOUT_MAX_MS {
            return err("close_timeout_ms", "must be at most a day (86,400,000)");
        }
        if self.max_connections < self.max_qps.min(2) {
            return err("max_connections", "must allow at least two connections");
        }
        Ok(())
    }

    /// The effective MSS of a connection: MTU minus the IPv4 and TCP headers and the options
    /// every data segment carries: Warpcore's TCP sends timestamps (RFC 7323: 10 octets,
    /// padded to 12), smoltcp's reference none.
    pub fn emss(&self) -> usize {
        match self.tcp_implementation {
            TcpImplementation::Warpcore => self.mtu - 40 - 12,
            TcpImplementation::SmoltcpReference => self.mtu - 40,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each out-of-range value is refused by `validate`, naming its field (GUIDE rule 7),
    /// where it used to pass and fail later: a zero TCP timeout or keep-alive interval and
    /// Nagle's algorithm at the first connect or listen (`TcpTuning`'s own check; a zero
    /// timeout was blamed on `tcp.keep_alive`), a region table above `MAX_CAPACITY` with a
    /// panic when the table was allocated, a zero MPA timeout with every startup timing
    /// out at its first poll.
    #[test]
    fn values_that_fail_later_are_refused_naming_the_field() {
        assert_eq!(EngineConfig::default().validate(), Ok(()));
        type Set = fn(&mut EngineConfig);
        let cases: [(&str, Set); 25] = [
            ("tcp.timeout", |c| c.tcp.timeout = Some(Duration::ZERO)),
            ("tcp.keep_alive", |c| {
                c.tcp.timeout = None;
                c.tcp.keep_alive = Some(Duration::ZERO);
            }),
            ("tcp.nagle", |c| c.tcp.nagle = true),
            ("tcp.rx_window_clamp", |c| {
                c.tcp.rx_window_clamp = Some(4096)
            }),
            ("mr_table_capacity", |c| {
                c.mr_table_capacity = crate::mem::MAX_CAPACITY + 1
            }),
            ("mr_table_capacity", |c| c.mr_table_capacity = usize::MAX),
            ("mpa_timeout_ms", |c| c.mpa_timeout_ms = 0),
            // A graceful close given up at once, or never.
            ("close_timeout_ms", |c| c.close_timeout_ms = 0),
            ("close_timeout_ms", |c| {
                c.close_timeout_ms = CLOSE_TIMEOUT_MAX_MS + 1
            }),
            ("close_timeout_ms", |c| c.close_timeout_ms = u64::MAX),
            // Depths that aborted the process on allocation (a ring allocated at start-up,
            // a queue at creation, the smoltcp reference's connection table).
            ("command_queue_depth", |c| c.command_queue_depth = 1 << 40),
            ("event_queue_depth", |c| c.event_queue_depth = 1 << 23),
            ("max_cq_depth", |c| c.max_cq_depth = MAX_QUEUE_DEPTH + 1),
            ("max_sq_depth", |c| c.max_sq_depth = usize::MAX),
            ("max_rq_depth", |c| c.max_rq_depth = usize::MAX),
            ("max_connections", |c| {
                c.max_connections = MAX_CONNECTIONS + 1
            }),
            ("max_pending_requests", |c| {
                c.max_pending_requests = c.max_connections + 1
            }),
            // A linger that made dropping the context wait for ever; buffers the smoltcp
            // reference allocated whole; timers that overflowed the TCP's clock.
            ("shutdown_linger_ms", |c| c.shutdown_linger_ms = u64::MAX),
            ("shutdown_linger_ms", |c| {
                c.shutdown_linger_ms = SHUTDOWN_LINGER_MAX_MS + 1
            }),
            ("tcp.rx_buffer", |c| c.tcp.rx_buffer = 1 << 40),
            ("tcp.tx_buffer", |c| {
                c.tcp.tx_buffer = warpcore_tcp::BUFFER_MAX + 1
            }),
            ("tcp.keep_alive", |c| {
                c.tcp.timeout = None;
                c.tcp.keep_alive = Some(Duration::from_micros(u64::MAX));
            }),
            ("tcp.time_wait", |c| {
                c.tcp.time_wait = warpcore_tcp::TIMER_MAX + Duration::from_micros(1)
            }),
            ("tcp.fin_wait_2_timeout", |c| {
                c.tcp.fin_wait_2_timeout = Some(Duration::from_micros(u64::MAX))
            }),
            ("tcp.oow_ack_interval", |c| {
                c.tcp.oow_ack_interval = Duration::from_micros(u64::MAX)
            }),
        ];
        for (field, set) in cases {
            let mut cfg = EngineConfig::default();
            set(&mut cfg);
            assert_eq!(cfg.validate().map_err(|e| e.field), Err(field));
        }
        // The largest values accepted still pass.
        let mut cfg = EngineConfig {
            mr_table_capacity: crate::mem::MAX_CAPACITY,
            mpa_timeout_ms: 1,
            close_timeout_ms: CLOSE_TIMEOUT_MAX_MS,
            max_sq_depth: MAX_QUEUE_DEPTH,
            max_rq_depth: MAX_QUEUE_DEPTH,
            max_cq_depth: MAX_QUEUE_DEPTH,
            event_queue_depth: MAX_QUEUE_DEPTH,
            command_queue_depth: MAX_QUEUE_DEPTH,
            max_connections: MAX_CONNECTIONS,
            max_pending_requests: MAX_CONNECTIONS,
            shutdown_linger_ms: SHUTDOWN_LINGER_MAX_MS,
            ..EngineConfig::default()
        };
        cfg.tcp.timeout = None;
        cfg.tcp.keep_alive = None;
        cfg.tcp.rx_buffer = warpcore_tcp::BUFFER_MAX;
        cfg.tcp.tx_buffer = warpcore_tcp::BUFFER_MAX;
        cfg.tcp.time_wait = warpcore_tcp::TIMER_MAX;
        cfg.tcp.fin_wait_2_timeout = Some(warpcore_tcp::TIMER_MAX);
        cfg.tcp.oow_ack_interval = warpcore_tcp::TIMER_MAX;
        assert_eq!(cfg.validate(), Ok(()));
    }

    /// A ring depth that is not a power of two (the SPSC rings' capacity, GUIDE rule 8) is
    /// refused naming the one field that is wrong (GUIDE rule 7): both were refused as
    /// "event/command_queue_depth", which is neither field, and `spawn_core` passed that
    /// on as its `EngineError::LimitExceeded`, leaving the caller to guess which of the two
    /// it had set wrong.
    #[test]
    fn a_ring_depth_not_a_power_of_two_names_its_field() {
        type Set = fn(&mut EngineConfig);
        let cases: [(&str, Set); 4] = [
            ("command_queue_depth", |c| c.command_queue_depth = 3),
            ("command_queue_depth", |c| c.command_queue_depth = 1000),
            ("event_queue_depth", |c| c.event_queue_depth = 5),
            ("event_queue_depth", |c| c.event_queue_depth = 1000),
        ];
        for (field, set) in cases {
            let mut cfg = EngineConfig::default();
            set(&mut cfg);
            let e = cfg.validate().expect_err(field);
            assert_eq!(e.field, field);
            assert_eq!(
                e.to_string(),
                format!("engine configuration: {field} must be a power of two (an SPSC ring)")
            );
        }
    }
}

#[cfg(test)]
mod tuning_tests {
    use super::*;
    use warpcore_tcp::stack::RTO_MAX;

    /// GUIDE rule 7: every limit is checked once, at start-up. Each tuning below is one
    /// `TcpTuning` refuses at every connect and listen (`StackError::InvalidTuning`), yet
    /// `validate` passed it: the context opened and each connection attempt failed after.
    #[test]
    fn tcp_tuning_refused_at_connect_is_refused_by_validate() {
        type Set = fn(&mut EngineConfig);
        let cases: [(&str, Set); 5] = [
            // A FIN-WAIT-2 bound of zero reset a connection as its FIN was acknowledged.
            ("tcp.fin_wait_2_timeout", |c| {
                c.tcp.fin_wait_2_timeout = Some(Duration::ZERO)
            }),
            // RFC 6298 5.5: a zero RTO never backs off.
            ("tcp.rto_initial", |c| {
                c.tcp.rto_min = Duration::ZERO;
                c.tcp.rto_initial = Duration::ZERO;
            }),
            // RFC 6298 2.5: above the ceiling the RTO could not be kept.
            ("tcp.rto_initial", |c| {
                c.tcp.rto_initial = RTO_MAX + Duration::from_micros(1)
            }),
            ("tcp.rto_min", |c| {
                c.tcp.rto_initial = RTO_MAX;
                c.tcp.rto_min = Duration::from_micros(u64::MAX);
            }),
            // RFC 6298 2.1/2.4: the floor above the initial RTO.
            ("tcp.rto_min", |c| {
                c.tcp.rto_initial = Duration::from_millis(10);
                c.tcp.rto_min = Duration::from_millis(11);
            }),
        ];
        for (field, set) in cases {
            let mut cfg = EngineConfig::default();
            set(&mut cfg);
            assert_eq!(cfg.validate().map_err(|e| e.field), Err(field), "{cfg:?}");
        }
        // The extremes `TcpTuning` takes still pass.
        let mut cfg = EngineConfig::default();
        cfg.tcp.rto_initial = RTO_MAX;
        cfg.tcp.rto_min = RTO_MAX;
        cfg.tcp.fin_wait_2_timeout = Some(Duration::from_micros(1));
        assert_eq!(cfg.validate(), Ok(()));
    }
}
