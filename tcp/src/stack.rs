//! The TCP/IP stack the engine drives, behind one interface with two implementations:
//! Warpcore's own TCP ([`crate::host`], the default) and the smoltcp reference
//! ([`crate::reference`], for differential tests). Either way: one device, a connection
//! table addressed by generation-checked handles, and edge-triggered events.

use smoltcp::socket::tcp::{self, State};
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{IpEndpoint, Ipv4Address, Ipv4Cidr};

use crate::device::{DeviceStats, PollDevice};
use crate::host::Host;
use crate::reference::RefStack;

/// Static configuration of a [`Stack`].
#[derive(Debug, Clone)]
pub struct StackConfig {
    /// Ethernet address of the interface.
    pub mac: [u8; 6],
    /// IPv4 address and prefix of the interface.
    pub ip: Ipv4Cidr,
    /// Default gateway, if any.
    pub gateway: Option<Ipv4Address>,
    /// Further routes: destination network and the router to reach it through (at most 7).
    pub routes: Vec<(Ipv4Cidr, Ipv4Address)>,
    /// Seed for initial sequence numbers and ephemeral ports.
    pub random_seed: u64,
    /// Most connections (listening sockets of backlogs included): at least one;
    /// `usize::MAX` for no bound but memory.
    pub max_connections: usize,
    /// The most octets all connections together hold out of order (segments beyond
    /// RCV.NXT waiting for the gap before them to fill). Each connection's window bounds
    /// its own, but a peer, or many, with thousands of connections could otherwise make
    /// the stack hold each one's whole window out of order (the engine's 4 MiB windows on
    /// 10,240 connections: 40 GiB); Linux bounds the like across sockets with `tcp_mem`.
    /// An out-of-order segment whose new octets would take the total past this is dropped
    /// whole, neither held nor SACKed, and the peer sends it again (RFC 9293 3.10.7.4 lets a
    /// receiver keep or drop such segments; RFC 2018 3 has it report only what it holds):
    /// nothing is lost, and in-order data never counts against it, so every connection
    /// still makes progress. A connection refused while it holds less than its share (the
    /// budget over the connections that hold octets, itself included) has the largest
    /// holder, if that one holds more than its share, give up its highest octets, down to
    /// its share and at least what the segment needs, and the segment is held after all
    /// (reneging, which RFC 2018 8 allows: the peer keeps SACKed data until it is
    /// cumulatively acknowledged), so connections that fill the budget and never fill
    /// their gaps cannot keep the others from holding any. Counted in
    /// [`crate::HostStats::out_of_order_refused`] and `out_of_order_reneges`, the total
    /// held in [`crate::HostStats::out_of_order_held`]. These are octets of payload; the buffers
    /// holding them may take up to about twice that while they grow.
    ///
    /// [`OUT_OF_ORDER_BUDGET_DEFAULT`] (128 MiB) by default: 32 full windows of the
    /// engine's (4 MiB) or 128 of [`TcpTuning`]'s default (1 MiB), so a few bulk
    /// transfers recovering from loss at the same time never meet it. Any value is taken:
    /// 0 holds nothing out of order (every such segment waits for its retransmission:
    /// correct, slow), `usize::MAX` has no bound but the windows. Warpcore's TCP only: the
    /// smoltcp reference ignores it (its sockets hold out-of-order data inside their
    /// receive buffers, allocated whole when they open).
    pub out_of_order_budget_bytes: usize,
}

/// The default of [`StackConfig::out_of_order_budget_bytes`]: 128 MiB.
pub const OUT_OF_ORDER_BUDGET_DEFAULT: usize = 128 << 20;

impl StackConfig {
    /// Refuses what no stack can work with (both implementations check it when created):
    /// a group MAC (receivers drop frames from group sources), an interface
    /// address of 0/8 (unspecified included) or 127/8, multicast, broadcast or its subnet's
    /// broadcast, and a
    /// gateway or route next hop off the subnet (ARP cannot reach it), on the interface's
    /// own address or on its broadcast, and a table of no connections (every connect and
    /// every SYN refused). Every out-of-order budget is taken (0 included: see
    /// [`StackConfig::out_of_order_budget_bytes`]).
    pub(crate) fn check(&self) -> Result<(), StackError> {
        let bad = |field, why| Err(StackError::InvalidConfig(field, why));
        if self.max_connections == 0 {
            return bad("max_connections", "must be at least one");
        }
        let mac = smoltcp::wire::EthernetAddress(self.mac);
        // All zeros passes: DPDK's net_ring ports report it as their address, and it
        // works between them.
        if !mac.is_unicast() {
            return bad("mac", "must be a unicast Ethernet address");
        }
        let ip = self.ip.address();
        let subnet_broadcast = self.ip.broadcast();
        // The host discards datagrams from any other source (`unicast_source`): its
        // peers' too.
        if !crate::host::wire_unicast(ip, &self.ip) {
            return bad(
                "ip",
                "must be a unicast address a wire carries (not of 0/8 or 127/8, not \
                 multicast or a broadcast)",
            );
        }
        let on_link = |hop: Ipv4Address| {
            self.ip.contains_addr(&hop) && hop != ip && Some(hop) != subnet_broadcast
        };
        if self.gateway.is_some_and(|g| !on_link(g)) {
            return bad(
                "gateway",
                "must be another unicast address of the interface's subnet",
            );
        }
        if self.routes.iter().any(|&(_, via)| !on_link(via)) {
            return bad(
                "routes",
                "next hops must be other unicast addresses of the interface's subnet",
            );
        }
        Ok(())
    }
}

/// Congestion controller of a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Congestion {
    /// No congestion control (only the peer's window limits the sender).
    None,
    /// TCP Reno (RFC 5681).
    Reno,
    /// CUBIC (RFC 8312).
    Cubic,
}

/// Per-connection tuning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpTuning {
    /// Receive buffer in bytes. Above 64 KiB the window scale option makes it usable
    /// (smoltcp derives the scale from this size).
    pub rx_buffer: usize,
    /// The most octets a connection's receive window offers until
    /// [`Stack::clear_window_clamp`] (Linux's `TCP_WINDOW_CLAMP`; a listener's connections
    /// inherit it, as there), its SYN's window included, so lifting it only opens the
    /// window. For a server that reads a bounded greeting before it takes the connection
    /// (the engine's listeners: an MPA Request): what a peer can park in the receive
    /// buffer meanwhile is the clamp, not `rx_buffer`. The window scale still follows
    /// `rx_buffer`. `None` (the default): no clamp. At least one octet. Warpcore's TCP
    /// only: the smoltcp reference ignores it.
    pub rx_window_clamp: Option<usize>,
    /// Send buffer in bytes.
    pub tx_buffer: usize,
    /// Nagle's algorithm (off by default: MPA writes whole FPDUs and wants them out at once,
    /// MPA-5.1-3).
    pub nagle: bool,
    /// Delayed ACK timeout; `None` acknowledges at the end of every poll that received data.
    /// Below half a second ([`ACK_DELAY_MAX`], RFC 1122 4.2.3.2).
    pub ack_delay: Option<Duration>,
    /// Congestion controller.
    pub congestion: Congestion,
    /// Lower bound of the retransmission timeout (RFC 6298 2.4 allows a floor; Warpcore's
    /// TCP only: smoltcp's is fixed at one second), at most the ceiling [`RTO_MAX`] and at
    /// most `rto_initial`. Applied as Linux's `tcp_rto_min`, to the variance term: RTO =
    /// SRTT + max(4 RTTVAR, `rto_min`), so the least margin above SRTT. See `docs/net.md`
    /// for the default.
    pub rto_min: Duration,
    /// Retransmission timeout before the first RTT sample (RFC 6298 2.1; Warpcore's TCP
    /// only): longer than zero, at least `rto_min` and at most the ceiling [`RTO_MAX`].
    pub rto_initial: Duration,
    /// How long a connection stays in TIME-WAIT (RFC 9293 3.6.1; Warpcore's TCP only).
    pub time_wait: Duration,
    /// Keep-alive interval: an idle connection probes its peer this often. Needed whenever
    /// `timeout` is set: smoltcp 0.14 applies the timeout to idle connections too (it
    /// aborts once the peer has been silent for `timeout`, data outstanding or not), so an
    /// idle queue pair would be reset after `timeout` without probes the peer answers.
    pub keep_alive: Option<Duration>,
    /// Abort the connection when the peer stays silent this long: with data outstanding,
    /// or, idle, without answering `keep_alive` probes (a dead peer), or before the
    /// handshake completes (also when the next hop never resolves). With Warpcore's TCP an
    /// idle connection without `keep_alive` never times out, and the silence counts from
    /// the last segment heard or from when data began to wait for the peer, whichever is
    /// later (an idle spell is not the peer's silence).
    pub timeout: Option<Duration>,
    /// Reset a connection that stays in FIN-WAIT-2 this long without receiving new data:
    /// its user closed, the peer acknowledged the FIN and neither sends nor closes (Linux's
    /// `tcp_fin_timeout`, which Linux applies to connections their user let go; Warpcore's
    /// TCP only). `None` (the default, RFC 9293): FIN-WAIT-2 lasts as long as the peer
    /// wants, for a user that half-closed and still reads. The engine, whose connections
    /// never half-close for long, sets it. Longer than zero.
    pub fin_wait_2_timeout: Option<Duration>,
    /// The least time between two ACKs sent in answer to out-of-window segments that carry
    /// no data (and to ACKs outside RFC 5961 5.2's range): Linux's `tcp_invalid_ratelimit`
    /// (500 ms there and here), against ACK loops between two endpoints out of step and
    /// reflection. Zero answers every one. Warpcore's TCP only; see
    /// `ConnConfig::oow_ack_interval` and `TcpTotals::oow_acks_suppressed`.
    pub oow_ack_interval: Duration,
}

/// The longest ACK delay a connection may be given: RFC 1122 4.2.3.2 (and RFC 9293 3.8.6.3)
/// require the delay to be less than half a second, so this value itself is refused.
pub const ACK_DELAY_MAX: Duration = Duration::from_millis(500);

/// The longest timer [`TcpTuning`] takes (`time_wait`, `keep_alive`, `timeout`,
/// `fin_wait_2_timeout`, `oow_ack_interval`), and the longest neighbour resolution
/// (`Stack::resolve_neighbor`; a longer timeout counts as this): a day. Longer values
/// mean nothing to a connection, and `now` plus one near `u64::MAX` microseconds
/// overflowed smoltcp's `Instant` (a panic in a debug build; in a release one a deadline in
/// the past: a keep-alive probe at every poll, TIME-WAIT ended at once).
pub const TIMER_MAX: Duration = Duration::from_secs(24 * 3600);

/// The largest send or receive buffer [`TcpTuning`] takes: 1 GiB, the largest window TCP
/// can offer (RFC 7323 2.3: a window scale of at most 14 on a 16-bit field). The smoltcp
/// reference allocates its buffers whole when a connection opens, so a larger one aborted
/// the process for want of memory; Warpcore's TCP could never use more.
pub const BUFFER_MAX: usize = 1 << 30;

/// The ceiling of Warpcore's retransmission timeout (RFC 6298 2.5: a ceiling may be placed
/// provided it is at least 60 s): the backed-off RTO never exceeds it, so an RTO floor or an
/// initial RTO above it could not be kept.
pub const RTO_MAX: Duration = Duration::from_secs(60);

impl Default for TcpTuning {
    fn default() -> Self {
        TcpTuning {
            rx_buffer: 1 << 20,
            rx_window_clamp: None,
            tx_buffer: 1 << 20,
            nagle: false,
            ack_delay: None,
            congestion: Congestion::Cubic,
            rto_min: Duration::from_millis(5),
            rto_initial: Duration::from_secs(1),
            time_wait: Duration::from_secs(10),
            // Three probes per timeout: an idle connection to a live peer never times out,
            // a dead one is found within 30 s.
            keep_alive: Some(Duration::from_secs(10)),
            timeout: Some(Duration::from_secs(30)),
            fin_wait_2_timeout: None,
            oow_ack_interval: Duration::from_millis(500),
        }
    }
}

impl TcpTuning {
    /// Refuses values no connection can work with (both implementations check them before
    /// they connect or listen): a buffer or window clamp of no octets (a zero window admits
    /// nothing; a zero send buffer sends nothing), a zero timeout (the connection would time out at once)
    /// or a zero keep-alive interval (a probe on every poll). `None` turns the latter two
    /// off. Also refused: an ACK delay of half a second or more (RFC 1122 4.2.3.2 MUST), a
    /// zero FIN-WAIT-2 bound (the connection was reset the moment its FIN was
    /// acknowledged, the peer's last data lost), a zero initial RTO (RFC 6298 5.5 doubles
    /// it on each expiry: zero never backed off, the SYN went again at every poll and the
    /// retries ran out within microseconds), an RTO floor or initial RTO above the
    /// ceiling [`RTO_MAX`] (RFC 6298 2.5; the floor was silently lowered to it), and an RTO
    /// floor above the initial RTO (the RTO before the first RTT sample is `rto_initial` as
    /// given, RFC 6298 2.1, so the first SYN or data timeout fired below the floor, which
    /// only applied from the first sample on, RFC 6298 2.4).
    pub(crate) fn check(&self) -> Result<(), StackError> {
        let bad = |field, why| Err(StackError::InvalidTuning(field, why));
        if self.rx_buffer == 0 {
            return bad("rx_buffer", "must be at least one octet");
        }
        if self.tx_buffer == 0 {
            return bad("tx_buffer", "must be at least one octet");
        }
        if self.rx_window_clamp == Some(0) {
            return bad(
                "rx_window_clamp",
                "must be at least one octet (None: no clamp)",
            );
        }
        if self.rx_buffer > BUFFER_MAX {
            return bad("rx_buffer", "must be at most 1 GiB (TCP's largest window)");
        }
        if self.tx_buffer > BUFFER_MAX {
            return bad("tx_buffer", "must be at most 1 GiB (TCP's largest window)");
        }
        let timers = [
            ("time_wait", Some(self.time_wait)),
            ("keep_alive", self.keep_alive),
            ("timeout", self.timeout),
            ("fin_wait_2_timeout", self.fin_wait_2_timeout),
            ("oow_ack_interval", Some(self.oow_ack_interval)),
        ];
        for (field, t) in timers {
            if t.is_some_and(|t| t > TIMER_MAX) {
                return bad(field, "must be at most a day (TIMER_MAX)");
            }
        }
        if self.timeout == Some(Duration::ZERO) {
            return bad("timeout", "must be longer than zero (None: no timeout)");
        }
        if self.keep_alive == Some(Duration::ZERO) {
            return bad("keep_alive", "must be longer than zero (None: no probes)");
        }
        if let Some(why) = ack_delay_refused(self.ack_delay) {
            return bad("ack_delay", why);
        }
        if self.fin_wait_2_timeout == Some(Duration::ZERO) {
            return bad(
                "fin_wait_2_timeout",
                "must be longer than zero (None: no limit)",
            );
        }
        if self.rto_initial == Duration::ZERO {
            return bad("rto_initial", "must be longer than zero (RFC 6298 5.5)");
        }
        if self.rto_initial > RTO_MAX {
            return bad(
                "rto_initial",
                "must be at most the RTO ceiling of 60 s (RFC 6298 2.5)",
            );
        }
        if self.rto_min > RTO_MAX {
            return bad(
                "rto_min",
                "must be at most the RTO ceiling of 60 s (RFC 6298 2.5)",
            );
        }
        if self.rto_min > self.rto_initial {
            return bad(
                "rto_min",
                "must be at most rto_initial (the RTO before the first RTT sample is \
                 rto_initial as given, RFC 6298 2.1: it would lie below the floor)",
            );
        }
        Ok(())
    }
}

/// Why an ACK delay is refused, if it is: RFC 1122 4.2.3.2 wants less than half a second.
pub(crate) fn ack_delay_refused(d: Option<Duration>) -> Option<&'static str> {
    d.filter(|&d| d >= ACK_DELAY_MAX)
        .map(|_| "must be less than half a second (RFC 1122 4.2.3.2)")
}

/// Handle of a connection. Stale handles (of a released slot) are rejected, never aliased,
/// and so are handles of another [`Stack`] ([`StackError::UnknownConnection`]): a slot
/// that served all 2^32 generations is retired rather than reused (its generation would
/// wrap, and a handle of its first use name its next connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ConnId {
    pub(crate) index: u32,
    pub(crate) generation: u32,
    /// The tag of the stack that made it ([`new_stack_tag`]).
    pub(crate) stack: u32,
}

/// A tag no other stack of this process has, for the handles it makes: slots and
/// generations alone start alike in every stack (slot 0, generation 0), so a handle of one
/// stack named a live connection of another, and a call on it reached that connection.
/// The tags wrap after 2^32 stacks, far beyond any process's.
pub(crate) fn new_stack_tag() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl ConnId {
    /// The connection's slot in the stack's table: dense and reused, so callers may index
    /// side tables by it (a reused slot carries another generation: compare whole handles;
    /// a slot is retired after 2^32 uses).
    pub fn slot(&self) -> usize {
        self.index as usize
    }
}

/// Handle of a listener: its entry, generation and stack tag (a handle of another stack is
/// refused, [`StackError::UnknownListener`], as [`ConnId`]s are).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ListenerId(pub(crate) u32, pub(crate) u32, pub(crate) u32);

/// What happened to a connection or listener since the last poll (edge-triggered).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// An outgoing connection completed its handshake.
    Connected(ConnId),
    /// A listener has an established connection waiting in [`Stack::accept`].
    Acceptable(ListenerId),
    /// New bytes can be read.
    Readable(ConnId),
    /// Send buffer space became free.
    Writable(ConnId),
    /// The peer sent FIN: no more bytes will arrive after those buffered (what MPA needs to
    /// learn a graceful close, MPA-3-12 and MPA-7.2-1).
    PeerClosed(ConnId),
    /// The connection finished closing normally.
    Closed(ConnId),
    /// The connection was reset by the peer (MPA's error 1, MPA-8-1). The reference
    /// (smoltcp) reports a timeout this way too: its socket does not say which.
    Reset(ConnId),
    /// The connection timed out: retransmissions exhausted, the user timeout passed, or the
    /// peer stayed silent in FIN-WAIT-2 (MPA's error 1 as well). Our TCP only.
    TimedOut(ConnId),
    /// The connection gave up (its user timeout, or its retransmissions, ran out) while its
    /// next hop did not answer ARP: no segment of it could leave, so the peer was never
    /// reached (or no longer is). Reported instead of [`Event::TimedOut`]; Linux's TCP
    /// reports such a connect as `EHOSTUNREACH`, and cxgb4 its ARP miss so. Our TCP only.
    NeighborUnreachable(ConnId),
    /// A resolution asked for with [`Stack::resolve_neighbor`] found the next hop's
    /// hardware address (or it was known already).
    NeighborResolved(ResolveId),
    /// A resolution asked for with [`Stack::resolve_neighbor`] got no ARP answer within
    /// its timeout.
    NeighborFailed(ResolveId),
}

/// Names a next-hop resolution asked for with [`Stack::resolve_neighbor`]: a sequence
/// number of its stack (they wrap after 2^32) and the stack's tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ResolveId {
    pub(crate) seq: u32,
    pub(crate) stack: u32,
}

impl Event {
    /// The event with the stack tag of its handle cleared, so that the same event of two
    /// stacks compares equal (tests and the fuzz body run the same script on two stacks).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn untagged(self) -> Event {
        let c = |id: ConnId| ConnId { stack: 0, ..id };
        match self {
            Event::Connected(id) => Event::Connected(c(id)),
            Event::Acceptable(l) => Event::Acceptable(ListenerId(l.0, l.1, 0)),
            Event::Readable(id) => Event::Readable(c(id)),
            Event::Writable(id) => Event::Writable(c(id)),
            Event::PeerClosed(id) => Event::PeerClosed(c(id)),
            Event::Closed(id) => Event::Closed(c(id)),
            Event::Reset(id) => Event::Reset(c(id)),
            Event::TimedOut(id) => Event::TimedOut(c(id)),
            Event::NeighborUnreachable(id) => Event::NeighborUnreachable(c(id)),
            Event::NeighborResolved(r) => Event::NeighborResolved(ResolveId { stack: 0, ..r }),
            Event::NeighborFailed(r) => Event::NeighborFailed(ResolveId { stack: 0, ..r }),
        }
    }
}

/// Errors of [`Stack`] operations.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StackError {
    /// The handle does not name a live connection.
    #[error("unknown or released connection")]
    UnknownConnection,
    /// The handle does not name a listener.
    #[error("unknown listener")]
    UnknownListener,
    /// The connection table is full.
    #[error("connection table full ({0} entries)")]
    TableFull(usize),
    /// The connection cannot send (not established, or closed for sending).
    #[error("connection cannot send in state {0}")]
    CannotSend(State),
    /// The connection will not receive more data (peer closed, or not connected).
    #[error("connection cannot receive in state {0}")]
    CannotRecv(State),
    /// smoltcp refused to connect.
    #[error("connect to {0} failed: {1}")]
    Connect(IpEndpoint, tcp::ConnectError),
    /// smoltcp refused to listen.
    #[error("listen on port {0} failed: {1}")]
    Listen(u16, tcp::ListenError),
    /// The route table is full.
    #[error("too many routes")]
    TooManyRoutes,
    /// The local port is already listening, or the 4-tuple is in use.
    #[error("port {0} is in use")]
    PortInUse(u16),
    /// No route leads to the address (outside every prefix and no gateway).
    #[error("no route to {0}")]
    NoRoute(Ipv4Address),
    /// The address cannot be connected to (unspecified, "this network", loopback,
    /// broadcast, multicast or our own: RFC 1122 3.2.1.3).
    #[error("cannot connect to {0}")]
    Unaddressable(Ipv4Address),
    /// A tuning option the chosen implementation does not offer.
    #[error("{0} is not supported by this TCP implementation")]
    Unsupported(&'static str),
    /// A [`TcpTuning`] field (named) holds a value no connection can work with.
    #[error("TcpTuning::{0} {1}")]
    InvalidTuning(&'static str, &'static str),
    /// A [`StackConfig`] field (named) holds a value no stack can work with.
    #[error("StackConfig::{0} {1}")]
    InvalidConfig(&'static str, &'static str),
    /// Too many next-hop resolutions pending ([`Stack::resolve_neighbor`]): at most this
    /// many.
    #[error("too many neighbour resolutions pending (at most {0})")]
    TooManyResolutions(usize),
    /// An argument (named) of a [`Stack`] call, or of
    /// [`Capture::try_new`](crate::capture::Capture::try_new), holds a value the call
    /// cannot work with.
    #[error("argument {0} {1}")]
    InvalidArgument(&'static str, &'static str),
}

/// Which TCP implementation runs under a [`Stack`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TcpImplementation {
    /// Warpcore's own sans-IO TCP ([`crate::host`]): the default and the only one meant for
    /// production.
    #[default]
    Warpcore,
    /// smoltcp 0.14's TCP socket ([`crate::reference`]): the reference of differential tests.
    SmoltcpReference,
}

enum Imp<D: PollDevice> {
    Warpcore(Box<Host<D>>),
    Reference(Box<RefStack<D>>),
}

/// A TCP/IP stack over one device, driven by the caller's clock.
///
/// Call [`Stack::poll`] with the current time in a loop; between polls, take events with
/// [`Stack::next_event`] and use the per-connection calls. Nothing here reads a clock.
pub struct Stack<D: PollDevice> {
    imp: Imp<D>,
}

impl<D: PollDevice + std::fmt::Debug> std::fmt::Debug for Stack<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.imp {
            Imp::Warpcore(s) => s.fmt(f),
            Imp::Reference(s) => s.fmt(f),
        }
    }
}

/// Calls the same method on whichever implementation runs.
macro_rules! dispatch {
    ($self:ident, $s:ident => $e:expr) => {
        match &mut $self.imp {
            Imp::Warpcore($s) => $e,
            Imp::Reference($s) => $e,
        }
    };
    (ref $self:ident, $s:ident => $e:expr) => {
        match &$self.imp {
            Imp::Warpcore($s) => $e,
            Imp::Reference($s) => $e,
        }
    };
}

impl<D: PollDevice> Stack<D> {
    /// Creates Warpcore's own TCP/IP stack on `device` at time `now`. A device whose IP
    /// MTU is below 576 octets is refused ([`StackError::InvalidArgument`]).
    pub fn new(device: D, config: &StackConfig, now: Instant) -> Result<Self, StackError> {
        Self::with_implementation(device, config, now, TcpImplementation::Warpcore)
    }

    /// Creates the stack of the chosen implementation. A configuration no stack can work
    /// with is refused ([`StackError::InvalidConfig`]).
    pub fn with_implementation(
        device: D,
        config: &StackConfig,
        now: Instant,
        implementation: TcpImplementation,
    ) -> Result<Self, StackError> {
        let imp = match implementation {
            TcpImplementation::Warpcore => Imp::Warpcore(Box::new(Host::new(device, config, now)?)),
            TcpImplementation::SmoltcpReference => {
                Imp::Reference(Box::new(RefStack::new(device, config, now)?))
            }
        };
        Ok(Stack { imp })
    }

    /// Which implementation runs.
    pub fn implementation(&self) -> TcpImplementation {
        match self.imp {
            Imp::Warpcore(_) => TcpImplementation::Warpcore,
            Imp::Reference(_) => TcpImplementation::SmoltcpReference,
        }
    }

    /// The device.
    pub fn device(&self) -> &D {
        dispatch!(ref self, s => s.device())
    }

    /// The device, mutably.
    pub fn device_mut(&mut self) -> &mut D {
        dispatch!(self, s => s.device_mut())
    }

    /// Drops the stack (every connection with it, without sending anything) and returns the
    /// device, e.g. to close a capture.
    pub fn into_device(self) -> D {
        match self.imp {
            Imp::Warpcore(s) => s.into_device(),
            Imp::Reference(s) => s.into_device(),
        }
    }

    /// Device counters.
    pub fn device_stats(&self) -> DeviceStats {
        dispatch!(ref self, s => s.device_stats())
    }

    /// The interface's IPv4 address.
    pub fn ipv4_addr(&self) -> Option<Ipv4Address> {
        dispatch!(ref self, s => s.ipv4_addr())
    }

    /// Counters of Warpcore's TCP host (`None` for the reference, which keeps none).
    pub fn host_stats(&self) -> Option<crate::HostStats> {
        match &self.imp {
            Imp::Warpcore(s) => Some(s.host_stats()),
            Imp::Reference(_) => None,
        }
    }

    /// The octets held out of order summed over every connection of Warpcore's TCP (`None`
    /// for the reference): the fuzz body and the tests check that
    /// [`crate::HostStats::out_of_order_held`], the count kept as octets come and go,
    /// equals it.
    #[cfg(feature = "fuzzing")]
    pub fn out_of_order_held_by_connections(&self) -> Option<usize> {
        match &self.imp {
            Imp::Warpcore(s) => Some(s.out_of_order_held_by_connections()),
            Imp::Reference(_) => None,
        }
    }

    /// Deadlines held in Warpcore's timer wheel, one per connection whose timer is armed
    /// (`None` for the reference).
    pub fn timers_armed(&self) -> Option<usize> {
        match &self.imp {
            Imp::Warpcore(s) => Some(s.timers_armed()),
            Imp::Reference(_) => None,
        }
    }

    /// TCP counters summed over every connection so far (`None` for the reference).
    pub fn tcp_totals(&self) -> Option<crate::host::TcpTotals> {
        match &self.imp {
            Imp::Warpcore(s) => Some(s.tcp_totals()),
            Imp::Reference(_) => None,
        }
    }

    /// Runs the stack at time `now`: one rx batch in, timers, everything sendable out, one tx
    /// flush. Returns whether anything happened (packets moved or events were raised).
    /// Inlined: the idle loop's case is a few tests in the caller's frame (the work is in
    /// functions of its own: frame processing, timers, transmit).
    #[inline]
    pub fn poll(&mut self, now: Instant) -> bool {
        dispatch!(self, s => s.poll(now))
    }

    /// [`Self::poll`], offering each connection's in-order payload to `deliver` straight
    /// from the received frame, before any copy, while nothing of that connection waits in
    /// its receive queue: `deliver(conn, octets)` returns how many octets it consumed, and
    /// only the rest is queued for [`Self::recv_with`] (with a `Readable` event). The
    /// engine places FPDUs from the frame this way (issue 12, item 2). `deliver` runs inside
    /// the poll: it must not call the stack. The smoltcp reference never offers anything
    /// (its socket copies every octet into its ring first).
    #[inline]
    pub fn poll_with<F: FnMut(ConnId, &[u8]) -> usize>(
        &mut self,
        now: Instant,
        deliver: F,
    ) -> bool {
        match &mut self.imp {
            Imp::Warpcore(s) => s.poll_with(now, deliver),
            Imp::Reference(s) => s.poll(now),
        }
    }

    /// [`Self::poll_with`], with `fill` writing the octets of external records into the
    /// frames that carry them ([`crate::host::Fill`], [`Stack::send_external_record`]).
    /// `fill` runs inside the poll too. The reference queues no external records.
    #[inline]
    pub fn poll_with_fill<F, X>(&mut self, now: Instant, deliver: F, fill: X) -> bool
    where
        F: FnMut(ConnId, &[u8]) -> usize,
        X: FnMut(ConnId, u64, usize, &mut [u8], bool) -> Option<u64>,
    {
        match &mut self.imp {
            Imp::Warpcore(s) => s.poll_with_fill(now, deliver, fill),
            Imp::Reference(s) => s.poll(now),
        }
    }

    /// [`Self::poll_with_fill`] with a `deliver` of three arguments (see the end), and with
    /// the fill made by `make_fill` only when the poll runs a transmit pass, after every
    /// `deliver`, and dropped when the pass ends ([`crate::host::Host::poll_with_fill_pass`]).
    /// The reference never makes one. `deliver(conn, octets, digest)` gets a segment's whole
    /// payload with its digest where [`Self::set_payload_digest`] asked for one.
    #[inline]
    pub fn poll_with_fill_pass<F, M, X>(&mut self, now: Instant, deliver: F, make_fill: M) -> bool
    where
        F: FnMut(ConnId, &[u8], Option<u32>) -> usize,
        M: FnOnce() -> X,
        X: FnMut(ConnId, u64, usize, &mut [u8], bool) -> Option<u64>,
    {
        match &mut self.imp {
            Imp::Warpcore(s) => s.poll_with_fill_pass(now, deliver, make_fill),
            Imp::Reference(s) => s.poll(now),
        }
    }

    /// Takes the next poll's receive snapshot now ([`crate::host::Host::begin_poll`]). The
    /// smoltcp reference takes it inside its poll, as before.
    #[inline]
    pub fn begin_poll(&mut self) {
        if let Imp::Warpcore(s) = &mut self.imp {
            s.begin_poll();
        }
    }

    /// Moves the stack's time on to `now` (never back) between polls, for the calls that
    /// take no time of their own: [`Self::connect`] (its timeout counts from it) and
    /// [`Self::release`] (its RST) ([`crate::host::Host::set_time`]). A caller that
    /// connects long after its last poll calls it first.
    #[inline]
    pub fn set_time(&mut self, now: Instant) {
        dispatch!(self, s => s.set_time(now))
    }

    /// The next poll leaves the frames of its snapshot in the device
    /// ([`crate::host::Host::hold_rx`]). The smoltcp reference receives as always.
    #[inline]
    pub fn hold_rx(&mut self) {
        if let Imp::Warpcore(s) = &mut self.imp {
            s.hold_rx();
        }
    }

    /// [`Self::poll_transmit`] with `fill` ([`Self::poll_with_fill`]).
    pub fn poll_transmit_fill<X>(&mut self, now: Instant, fill: X) -> bool
    where
        X: FnMut(ConnId, u64, usize, &mut [u8], bool) -> Option<u64>,
    {
        match &mut self.imp {
            Imp::Warpcore(s) => s.poll_transmit_fill(now, fill),
            Imp::Reference(s) => s.poll(now),
        }
    }

    /// [`Self::poll`] without receiving: timers, everything sendable out, one tx flush.
    /// The engine's second pass per loop, after its pollers wrote into the send buffers:
    /// frames that arrived meanwhile stay in the device for the next loop's
    /// [`Self::poll_with`], which places them from their frames (received here, they were
    /// queued, and every in-order arrival of the next poll queued behind them). The smoltcp
    /// reference cannot send without receiving: it polls.
    pub fn poll_transmit(&mut self, now: Instant) -> bool {
        match &mut self.imp {
            Imp::Warpcore(s) => s.poll_transmit(now),
            Imp::Reference(s) => s.poll(now),
        }
    }

    /// When the stack next needs a poll without new input (`None`: only on input).
    pub fn poll_at(&mut self, now: Instant) -> Option<Instant> {
        dispatch!(self, s => s.poll_at(now))
    }

    /// Takes the oldest pending event.
    pub fn next_event(&mut self) -> Option<Event> {
        dispatch!(self, s => s.next_event())
    }

    /// Whether an event is pending (a cheap check for an idle loop).
    #[inline]
    pub fn has_events(&self) -> bool {
        dispatch!(ref self, s => s.has_events())
    }

    /// Connections in the table now (for the reference: listener backlog sockets included).
    pub fn live(&self) -> usize {
        dispatch!(ref self, s => s.live())
    }

    /// Resolves the next hop towards `ip` (the address itself on the interface's subnet,
    /// else its router) without opening a connection: [`Event::NeighborResolved`] follows
    /// once its hardware address is known (at once, queued with the events, if it is
    /// already), [`Event::NeighborFailed`] if ARP brings no answer within `timeout` from
    /// `now`. Requests are repeated at the neighbour table's interval, as for a connection
    /// waiting for its next hop (`crate::host::Host::resolve_neighbor`). An address no
    /// connection could be opened to is refused ([`StackError::Unaddressable`]), one
    /// without a route too ([`StackError::NoRoute`]); so are more than
    /// [`crate::host::RESOLVE_MAX`] pending ([`StackError::TooManyResolutions`]). The
    /// smoltcp reference cannot ([`StackError::Unsupported`]).
    pub fn resolve_neighbor(
        &mut self,
        ip: Ipv4Address,
        timeout: Duration,
        now: Instant,
    ) -> Result<ResolveId, StackError> {
        match &mut self.imp {
            Imp::Warpcore(s) => s.resolve_neighbor(ip, timeout, now),
            Imp::Reference(_) => Err(StackError::Unsupported("neighbour resolution")),
        }
    }

    /// Opens a connection to `remote` from `local_port` (an ephemeral port if `None`).
    /// [`Event::Connected`], [`Event::Reset`], [`Event::TimedOut`] or
    /// [`Event::NeighborUnreachable`] follows. Tuning no
    /// connection can work with is refused ([`StackError::InvalidTuning`]). Its timeout
    /// counts from the stack's time: the last poll's, or [`Self::set_time`]'s if later.
    pub fn connect(
        &mut self,
        remote: (Ipv4Address, u16),
        local_port: Option<u16>,
        tuning: &TcpTuning,
    ) -> Result<ConnId, StackError> {
        dispatch!(self, s => s.connect(remote, local_port, tuning))
    }

    /// Listens on `port`; `backlog` bounds the handshakes in progress (Warpcore's TCP: the
    /// half-open table, oldest evicted first; the reference: sockets ready for SYNs), at
    /// least one ([`StackError::InvalidArgument`] for 0). [`Event::Acceptable`] tells when
    /// [`Stack::accept`] has a connection. `tuning` is checked as [`Stack::connect`]
    /// checks it.
    pub fn listen(
        &mut self,
        port: u16,
        backlog: usize,
        tuning: &TcpTuning,
    ) -> Result<ListenerId, StackError> {
        dispatch!(self, s => s.listen(port, backlog, tuning))
    }

    /// Takes an established connection from the listener, if one is waiting.
    pub fn accept(&mut self, listener: ListenerId) -> Result<Option<ConnId>, StackError> {
        dispatch!(self, s => s.accept(listener))
    }

    /// Listener entries in the table, open or kept for reuse (the reference never reuses
    /// one).
    pub fn listener_entries(&self) -> usize {
        dispatch!(ref self, s => s.listener_entries())
    }

    /// Stops listening: handshakes in progress are dropped, established connections not
    /// yet accepted are reset and freed (no handle to them was handed out), accepted
    /// connections stay. The handle is stale from here ([`StackError::UnknownListener`],
    /// for `accept` and `unlisten` alike); Warpcore's TCP reuses its table entry for the
    /// next `listen`, so listen/unlisten churn does not grow the table.
    pub fn unlisten(&mut self, listener: ListenerId) -> Result<(), StackError> {
        dispatch!(self, s => s.unlisten(listener))
    }

    /// Copies up to `data.len()` bytes into the send buffer; returns how many fit.
    pub fn send(&mut self, id: ConnId, data: &[u8]) -> Result<usize, StackError> {
        // The free space may come in two pieces (a ring's wrap, or a growth step). The first
        // call is made even for no data: it checks the handle and the state.
        let mut done = 0;
        loop {
            let rest = &data[done..];
            let n = self.send_with(id, |buf| {
                let n = buf.len().min(rest.len());
                buf[..n].copy_from_slice(&rest[..n]);
                n
            })?;
            done += n;
            if n == 0 || done == data.len() {
                return Ok(done);
            }
        }
    }

    /// Lends the free contiguous part of the send buffer to `f`, which writes into it and
    /// returns how many bytes it wrote. Returns that count.
    pub fn send_with<F>(&mut self, id: ConnId, f: F) -> Result<usize, StackError>
    where
        F: FnOnce(&mut [u8]) -> usize,
    {
        dispatch!(self, s => s.send_with(id, f))
    }

    /// As [`Stack::send_with`], for a writer of one record (an FPDU) that knows its size.
    /// Warpcore's TCP grows the send buffer only as far as `room` contiguous octets need (a
    /// connection that sends small messages keeps a small buffer) and sends records whole,
    /// each segment starting and ending at a record boundary (an MPA-aligned sender; see
    /// [`crate::conn`]). The reference lends what it has and packs a plain stream.
    pub fn send_with_room<F>(&mut self, id: ConnId, room: usize, f: F) -> Result<usize, StackError>
    where
        F: FnOnce(&mut [u8]) -> usize,
    {
        match &mut self.imp {
            Imp::Warpcore(s) => s.send_with_room(id, Some(room), f),
            Imp::Reference(s) => s.send_with(id, f),
        }
    }

    /// Sends `record` at once when it would be the only thing a transmit pass now sends
    /// ([`Host::send_lone_record`]: `Ok(true)`, flushed, and the connection is as
    /// [`Self::send_with_room`] of it and [`Self::poll_transmit`] leave it); `Ok(false)`,
    /// nothing changed: write it and poll as usual. The smoltcp reference always says
    /// `Ok(false)`.
    pub fn send_lone_record(
        &mut self,
        id: ConnId,
        now: Instant,
        record: &[u8],
    ) -> Result<bool, StackError> {
        match &mut self.imp {
            Imp::Warpcore(s) => s.send_lone_record(id, now, record),
            Imp::Reference(_) => Ok(false),
        }
    }

    /// Marks the end of what was written so far as a record boundary, for a record written
    /// in pieces with [`Stack::send`] (Warpcore's TCP; the reference ignores it).
    pub fn end_record(&mut self, id: ConnId) -> Result<(), StackError> {
        match &mut self.imp {
            Imp::Warpcore(s) => s.end_record(id),
            Imp::Reference(_) => Ok(()),
        }
    }

    /// Queues an external record of `len` octets named `token` (Warpcore's TCP; see
    /// [`crate::conn`], "External records"): it takes sequence space and send-buffer room,
    /// and its octets are written by the `fill` of [`Self::poll_with_fill`] /
    /// [`Self::poll_transmit_fill`] into each frame that carries them, until
    /// [`Self::take_acked_external`] reports it acknowledged. `Ok(false)`: no room, nothing
    /// queued. Tokens must increase from one record to the next; a token not above those
    /// of the records still unacknowledged, and a `len` of 0 or above `u32::MAX`, are
    /// refused ([`StackError::InvalidArgument`]). The reference cannot
    /// ([`StackError::Unsupported`]): its socket copies.
    pub fn send_external_record(
        &mut self,
        id: ConnId,
        len: usize,
        token: u64,
    ) -> Result<bool, StackError> {
        self.send_external_run(id, len, len, token)
    }

    /// [`Self::send_external_record`] of a run: `len` octets under one token, a record
    /// boundary after every `every` octets and at the end (segments are cut there, as at
    /// any record's end; `crate::conn`, "External records"); an `every` of 0 is refused
    /// ([`StackError::InvalidArgument`]). The reference cannot.
    pub fn send_external_run(
        &mut self,
        id: ConnId,
        len: usize,
        every: usize,
        token: u64,
    ) -> Result<bool, StackError> {
        match &mut self.imp {
            Imp::Warpcore(s) => s.send_external_run(id, len, every, token),
            Imp::Reference(_) => Err(StackError::Unsupported("external records")),
        }
    }

    /// Makes the external records of `id` not yet acknowledged the connection's own: what
    /// it still has to send or may resend of them is written by `fill(token, at, dst)` (the
    /// octets `[at, at + dst.len())` of the record's run; `false` when it cannot) into the
    /// send-buffer room each reserves, and TCP sends those octets from there from now on,
    /// reading nothing of the owner's again (`crate::conn`, "External records"). For an
    /// owner that must give its memory back while a graceful close still delivers it.
    /// `Ok(false)` when a `fill` failed: that record and the later ones stay external. The
    /// reference holds none: `Ok(true)`.
    pub fn internalize_external(
        &mut self,
        id: ConnId,
        fill: impl FnMut(u64, usize, &mut [u8]) -> bool,
    ) -> Result<bool, StackError> {
        match &mut self.imp {
            Imp::Warpcore(s) => s.internalize_external(id, fill),
            Imp::Reference(_) => Ok(true),
        }
    }

    /// The token of the last external record of `id` wholly acknowledged since the last
    /// call (none from the reference).
    pub fn take_acked_external(&mut self, id: ConnId) -> Result<Option<u64>, StackError> {
        match &mut self.imp {
            Imp::Warpcore(s) => s.take_acked_external(id),
            Imp::Reference(_) => Ok(None),
        }
    }

    /// The largest record one segment of this connection carries (the MSS both ends allow
    /// minus the timestamp option): the engine's MULPDU follows it. `None` from the
    /// reference, which sends no options.
    pub fn max_record_payload(&self, id: ConnId) -> Result<Option<usize>, StackError> {
        match &self.imp {
            Imp::Warpcore(s) => s.max_record_payload(id).map(Some),
            Imp::Reference(_) => Ok(None),
        }
    }

    /// Copies received bytes into `buf`; returns how many (0: nothing buffered now).
    pub fn recv(&mut self, id: ConnId, buf: &mut [u8]) -> Result<usize, StackError> {
        // The received octets may come in two pieces (a ring's wrap).
        let mut done = self.recv_with(id, |data| {
            let n = data.len().min(buf.len());
            buf[..n].copy_from_slice(&data[..n]);
            n
        })?;
        while done < buf.len() {
            let rest = &mut buf[done..];
            let n = self
                .recv_with(id, |data| {
                    let n = data.len().min(rest.len());
                    rest[..n].copy_from_slice(&data[..n]);
                    n
                })
                .unwrap_or(0);
            if n == 0 {
                break;
            }
            done += n;
        }
        Ok(done)
    }

    /// Lends the contiguous received bytes to `f`, which returns how many it consumed.
    /// Returns that count. Fails once the peer closed and everything was read.
    pub fn recv_with<F>(&mut self, id: ConnId, f: F) -> Result<usize, StackError>
    where
        F: FnOnce(&[u8]) -> usize,
    {
        dispatch!(self, s => s.recv_with(id, f))
    }

    /// Bytes waiting to be read.
    pub fn recv_queue(&mut self, id: ConnId) -> Result<usize, StackError> {
        dispatch!(self, s => s.recv_queue(id))
    }

    /// Bytes in the send buffer not yet acknowledged.
    pub fn send_queue(&mut self, id: ConnId) -> Result<usize, StackError> {
        dispatch!(self, s => s.send_queue(id))
    }

    /// The sequence number of the peer's first stream octet on connection `id`, once known
    /// (Warpcore's TCP only; the fuzz harness).
    #[cfg(feature = "fuzzing")]
    pub(crate) fn peer_stream_start(&self, id: ConnId) -> Option<smoltcp::wire::TcpSeqNumber> {
        match &self.imp {
            Imp::Warpcore(s) => s.peer_stream_start(id),
            Imp::Reference(_) => None,
        }
    }

    /// Whether nothing connection `id` sent waits for its acknowledgement (Warpcore's TCP;
    /// [`crate::conn::Connection::nothing_in_flight`]). The reference cannot tell what was
    /// sent from what is queued, and answers false.
    pub fn nothing_in_flight(&self, id: ConnId) -> Result<bool, StackError> {
        match &self.imp {
            Imp::Warpcore(s) => s.nothing_in_flight(id),
            Imp::Reference(_) => Ok(false),
        }
    }

    /// Whether the peer's last window on connection `id` was zero, where only probes go
    /// and no timer ends the connection while the peer answers them (RFC 9293 3.8.6.1;
    /// Warpcore's TCP). The reference cannot tell, and answers true.
    pub fn peer_window_shut(&self, id: ConnId) -> Result<bool, StackError> {
        match &self.imp {
            Imp::Warpcore(s) => s.peer_window_shut(id),
            Imp::Reference(_) => Ok(true),
        }
    }

    /// Free bytes in the send buffer.
    #[inline]
    pub fn send_space(&mut self, id: ConnId) -> Result<usize, StackError> {
        dispatch!(self, s => s.send_space(id))
    }

    /// The TCP state.
    pub fn state(&mut self, id: ConnId) -> Result<State, StackError> {
        dispatch!(self, s => s.state(id))
    }

    /// Local and remote endpoints.
    pub fn endpoints(
        &mut self,
        id: ConnId,
    ) -> Result<(Option<IpEndpoint>, Option<IpEndpoint>), StackError> {
        dispatch!(self, s => s.endpoints(id))
    }

    /// Changes the Nagle and delayed-ACK settings of a live connection (Warpcore's TCP has
    /// no Nagle: MPA wants whole FPDUs out at once, MPA-5.1-3; asking for it is refused).
    /// An ACK delay of half a second or more is refused as [`TcpTuning::ack_delay`] is
    /// ([`StackError::InvalidArgument`], RFC 1122 4.2.3.2). An ACK the connection already
    /// delays is then due no later than the new delay from the last poll, at the next poll
    /// with none ([`Stack::poll_at`] says so).
    pub fn set_nagle_and_ack_delay(
        &mut self,
        id: ConnId,
        nagle: bool,
        ack_delay: Option<Duration>,
    ) -> Result<(), StackError> {
        if let Some(why) = ack_delay_refused(ack_delay) {
            return Err(StackError::InvalidArgument("ack_delay", why));
        }
        dispatch!(self, s => s.set_nagle_and_ack_delay(id, nagle, ack_delay))
    }

    /// Verifies received segments' TCP checksums with `bulk` from 128 octets on
    /// ([`crate::host::Host::set_bulk_sum`]; [`Self::set_payload_digest`]'s sum takes the
    /// payloads it digests). smoltcp's reference stack verifies its own way and ignores it.
    pub fn set_bulk_sum(&mut self, bulk: crate::csum::BulkSum) {
        if let Imp::Warpcore(s) = &mut self.imp {
            s.set_bulk_sum(bulk);
        }
    }

    /// With `Some((digest, min))`, sums and digests the payloads of `min` octets or more of
    /// predicted segments whose checksum is verified in software, and hands the digest to
    /// the delivery of a payload delivered whole ([`Self::poll_with_fill_pass`],
    /// [`crate::host::Host::set_payload_digest`]); `None` turns it off. The reference
    /// delivers nothing in place and ignores it.
    pub fn set_payload_digest(&mut self, digest: Option<(crate::csum::BulkSumDigest, usize)>) {
        if let Imp::Warpcore(s) = &mut self.imp {
            s.set_payload_digest(digest);
        }
    }

    /// Lifts connection `id`'s [`TcpTuning::rx_window_clamp`]: its window is offered from the
    /// whole receive buffer from now on, announced at the next poll (nothing changes
    /// without a clamp; the smoltcp reference has none).
    pub fn clear_window_clamp(&mut self, id: ConnId) -> Result<(), StackError> {
        dispatch!(self, s => s.clear_window_clamp(id))
    }

    /// Sends FIN after the buffered data (graceful close of the sending half).
    pub fn close(&mut self, id: ConnId) -> Result<(), StackError> {
        dispatch!(self, s => s.close(id))
    }

    /// Sends RST and drops everything buffered.
    pub fn abort(&mut self, id: ConnId) -> Result<(), StackError> {
        dispatch!(self, s => s.abort(id))
    }

    /// Frees the connection's slot (aborting it if still open). The handle becomes stale.
    pub fn release(&mut self, id: ConnId) -> Result<(), StackError> {
        dispatch!(self, s => s.release(id))
    }
}
