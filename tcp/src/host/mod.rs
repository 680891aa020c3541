//! Warpcore's own TCP/IPv4 host: the part of the stack around the per-connection state
//! machines of [`crate::conn`].
//!
//! # What it does, per [`Host::poll`]
//!
//! ```text
//! device rx (a batch)  -> Ethernet -> ARP (neighbour cache, replies)
//!                                  -> IPv4 (checked; fragments dropped) -> ICMP echo reply;
//!                                     protocol/port unreachable -> a SYN-SENT connection
//!                                     refused (RFC 1122 4.2.3.9, RFC 5927 4.1)
//!                                  -> TCP (checksum per the device's offload; the common option
//!                                     layouts read by module `headers`, others by smoltcp) -> demux:
//!                                       (header prediction first: the connection the last
//!                                        segment went to, its data and ACKs read at once)
//!                                       keyed hash of the 4-tuple -> Connection::handle_segment
//!                                         (an ACK owed for this segment alone, RFC 5681 4.2:
//!                                          Connection::poll_quick_ack, sent before the next frame)
//!                                       listener + SYN -> half-open table -> Connection::accept
//!                                       nothing -> RST (RFC 9293 3.10.7.1), bounded per poll
//! timer wheel (ticks passed)  -> Connection::handle_timeout
//! dirty connections only      -> Connection::poll_segment (after a full-record segment,
//!                                Connection::full_again_ready / take_full_again first)
//!                             -> Ethernet/IPv4/TCP headers written
//!                                (module `headers`), payload copied from the send ring, external
//!                                records written by `fill` -> device tx
//!                             -> Connection::poll_event -> stack events; re-arm the timer
//! device flush (one burst)
//! ```
//!
//! A lone record (the engine's lone Write: nothing else to send, nothing in flight) may go
//! out ahead of all this: [`Host::send_lone_record`] writes its frame from the caller's
//! buffer and flushes it, then files the record in the send ring and does the segment's
//! bookkeeping (`Connection::lone_segment`, `Connection::commit_lone`), leaving the state a
//! write and a transmit pass would have left (`lone_tests`).
//!
//! Nothing scans every connection: a connection is visited when a segment for it arrives,
//! when its timer is due, or when the engine called it (it is then marked dirty).
//!
//! # Bounds
//! * The connection table holds at most `max_connections` (active, half-open and user-held).
//! * Each listener holds at most `backlog` half-open connections (SYN-RECEIVED); a SYN beyond
//!   that evicts the oldest half-open one. This, rather than SYN cookies, keeps every option
//!   (window scale, SACK, timestamps) on every connection, and a SYN flood can only recycle
//!   half-open slots: a legitimate handshake completes within one RTT, long before the flood
//!   has cycled through the backlog (`docs/decisions/0002-own-tcp.md`).
//! * RSTs for segments that match nothing, ARP replies and ICMP echo replies wait in a queue of
//!   at most [`CONTROL_MAX`] frames; beyond that they are dropped (and counted), so a flood of
//!   stray segments cannot make the host allocate.
//! * Out-of-order data: each connection holds at most its window, in at most 64 blocks, and
//!   all of them together at most `StackConfig::out_of_order_budget_bytes` (one
//!   `OutOfOrderBudget` shared by the host's connections, charged and credited on the
//!   out-of-order paths only); a segment beyond it is dropped unSACKed and resent by its
//!   peer ([`HostStats::out_of_order_refused`]), unless its connection holds less than its
//!   share and the largest holder more: that one then reneges (RFC 2018 8) for it
//!   ([`HostStats::out_of_order_reneges`]).

#[cfg(test)]
mod generation_tests;
mod headers;
mod isn;
#[cfg(test)]
mod lone_tests;
mod neighbor;
#[cfg(test)]
mod sack_tests;
mod wheel;

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use smoltcp::phy::{Checksum, ChecksumCapabilities, RxToken, TxToken};
use smoltcp::socket::tcp::State;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol,
    EthernetRepr, Icmpv4Packet, Icmpv4Repr, IpAddress, IpEndpoint, IpProtocol, Ipv4Address,
    Ipv4Cidr, Ipv4Packet, Ipv4Repr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
};

use crate::conn::{
    ConnConfig, ConnError, ConnEvent, Connection, Endpoints, OutOfOrderBudget, Outgoing, Piece,
    RefusedOutOfOrder,
};
use crate::csum;
use crate::device::{DeviceStats, PollDevice};
use crate::recovery::{Congestion as CcAlgorithm, RecoveryConfig};
use crate::stack::{
    Congestion, ConnId, Event, ListenerId, ResolveId, StackConfig, StackError, TcpTuning,
};

use headers::{FrameAddrs, HeaderRun, ETH_HDR, IP_HDR};
use isn::{IsnGen, KeyedHash, PortGen};
use neighbor::{Lookup, Neighbors};
use wheel::{Entry, Wheel};

const EPHEMERAL_FIRST: u16 = 49152;
/// The smallest IP MTU a device may have (RFC 791 and RFC 1122 3.3.2: every IPv4 host takes datagrams of 576).
const IP_MTU_MIN: usize = 576;

/// What [`Host::listen`] and the reference's `listen` answer to a backlog of 0.
pub(crate) const BACKLOG_ZERO: StackError =
    StackError::InvalidArgument("backlog", "must be at least one handshake");

/// What writes the octets of external records into frames
/// ([`Connection::send_external_record`]): `fill(conn, token, at, dst, sum)` writes
/// `dst.len()` octets of connection `conn`'s record `token`, from offset `at` in the record.
/// It returns `None` if it could not, else `Some` of the unfolded Internet checksum sum of
/// what it wrote ([`csum::sum`] of `dst`, which it can take in the same pass as its copy,
/// [`csum::copy_and_sum_from`]) when `sum` is true (the port does not compute the TCP
/// checksum), of anything when false. A record it cannot produce resets the connection: the
/// frame becomes an RST in place of the segment, the connection is closed
/// (`Event::Closed`), and nothing the owner did not write ever leaves.
pub type Fill<'a> = dyn FnMut(ConnId, u64, usize, &mut [u8], bool) -> Option<u64> + 'a;

/// A [`Fill`] bound to one connection: `fill(token, at, dst, sum)`.
type ConnFill<'a> = dyn FnMut(u64, usize, &mut [u8], bool) -> Option<u64> + 'a;

/// The [`Fill`] of a caller that queues no external records.
fn no_fill(_: ConnId, _: u64, _: usize, _: &mut [u8], _: bool) -> Option<u64> {
    None
}

/// What a poll hands each connection's in-order payload to: `(connection, octets,
/// digest)`, returning how many octets it consumed ([`Host::poll_with_fill_pass`]).
type Deliver<'a> = dyn FnMut(ConnId, &[u8], Option<u32>) -> usize + 'a;

/// Frames taken from the device per poll.
const RX_BUDGET: usize = 64;

/// [`Inner::rx_next`]: the next poll's snapshot is taken ([`Host::begin_poll`]).
const RX_BEGUN: u8 = 1;
/// [`Inner::rx_next`]: the next poll takes no frame ([`Host::hold_rx`]).
const RX_HELD: u8 = 2;
/// RFC 1122 4.2.3.5's R1: from this many unanswered retransmission timeouts of a
/// connection on, each one passes negative advice to the link layer, which asks ARP for the
/// next hop again (RFC 1122 2.3.2.1 (4), higher-layer advice).
const NEGATIVE_ADVICE_RTOS: u32 = 3;
/// Most control frames (RST, ARP, ICMP) waiting to go out.
pub const CONTROL_MAX: usize = 64;
const TCP_HDR: usize = 20;

/// A connection's key in the demultiplexing table (the local address is the host's own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Tuple {
    local_port: u16,
    remote_ip: Ipv4Address,
    remote_port: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Opened by [`Host::connect`].
    Active,
    /// Accepted from a listener's SYN, handshake not complete: invisible to the user.
    HalfOpen(ListenerId),
    /// Established from a listener (in its accept queue or accepted).
    Passive,
    /// Released by the user in TIME-WAIT: the host keeps it until TIME-WAIT ends (RFC 9293
    /// 3.6.1), outside the user's table, the oldest dropped beyond `max_connections`. Also
    /// one released open whose RST the device had no room for: kept until it goes.
    Orphan,
}

#[derive(Debug)]
struct Slot {
    conn: Connection,
    generation: u32,
    tuple: Tuple,
    next_hop: Ipv4Address,
    role: Role,
    /// In the dirty list.
    dirty: bool,
    /// Received data in this poll: its acknowledgement waits for the next poll, so that the
    /// engine's answer (written between the two polls of its loop) carries it. Only one
    /// poll: data arriving while the ACK already waits does not defer it again.
    defer_ack: bool,
    /// Deferred by the last transmit pass with nothing to send (its ACK waits for the
    /// connection's own delay, a timer already armed) and not marked since: its events and
    /// timer are as that pass left them, so the next pass, which still runs its
    /// `transmit_frames` (next hop, slot, the quiet poll), skips its `after_activity`.
    /// Cleared by every mark ([`mark_slot_dirty`]) and by that pass.
    held: bool,
    /// The deadline armed in the wheel (an entry with this instant is live).
    armed: Option<Instant>,
    /// The last transmit pass found no hardware address for `next_hop` (the connection
    /// waits for ARP): a timeout then is the next hop's failure, reported as
    /// [`Event::NeighborUnreachable`], not the peer's silence.
    hop_pending: bool,
    /// Since when it waits for ARP (the first of the passes that set `hop_pending`): a
    /// connection waiting from before its next hop's round of requests failed waited
    /// through that round ([`Neighbors::failed_at`]).
    hop_since: Instant,
    /// Its place in [`Inner::unresolved`] ([`NOT_WAITING`]: not there): filing and
    /// unfiling a connection that waits for ARP cost no scan of the list, which a SYN
    /// flood from sources the neighbour table cannot glean fills with thousands (RFC 4987
    /// 3.4: the backlog keeps them).
    waiting_at: u32,
}

/// [`Slot::waiting_at`] of a connection not waiting for ARP.
const NOT_WAITING: u32 = u32::MAX;

/// A next hop resolved on request ([`Host::resolve_neighbor`]).
#[derive(Debug, Clone, Copy)]
struct Resolving {
    id: ResolveId,
    next_hop: Ipv4Address,
    deadline: Instant,
    /// No request of its own before this instant: the retry interval after the last one
    /// it sent. The neighbour table holds each address's requests back itself, except
    /// while its list of requests is full and records none (RFC 1122 2.3.2.1: without this
    /// bound every poll sent another broadcast request).
    next_ask: Instant,
}

/// Most resolutions asked for and not yet answered: as many addresses as the neighbour
/// table holds (`ucmatose -c 300` starts 300 at once, all for one address). Each costs a
/// look-up per poll while pending, and its next hop an ARP request per retry.
pub const RESOLVE_MAX: usize = 4096;

#[derive(Debug)]
struct Listener {
    port: u16,
    tuning: TcpTuning,
    backlog: usize,
    /// Half-open connections in arrival order (stale handles, of connections that completed
    /// or failed, are skipped and swept).
    half_open: VecDeque<ConnId>,
    /// How many of those are still half-open.
    half_open_live: usize,
    /// Established, waiting for [`Host::accept`].
    ready: VecDeque<ConnId>,
    open: bool,
    /// Counts the entry's uses: a [`ListenerId`] names one (an entry is reused once its
    /// listener is gone, so listen/unlisten churn does not grow the table).
    generation: u32,
}

/// Counters of the host (not of any one connection).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HostStats {
    /// Frames that were not for us or could not be parsed (bad checksum included).
    pub rx_dropped: u64,
    /// IPv4 fragments dropped (TCP segments are never fragmented by our peers: DF, MSS).
    pub rx_fragments: u64,
    /// TCP segments that matched no connection or listener.
    pub rx_no_connection: u64,
    /// TCP segments taken by header prediction (`headers::predict`): in the layout of an
    /// established connection's data and ACKs, for the connection the segment before went
    /// to (Linux's `TCPHPHits` counts the like).
    pub rx_predicted: u64,
    /// RSTs sent for such segments (those the full control queue dropped count in
    /// `control_dropped` instead).
    pub rst_sent: u64,
    /// Control frames dropped because their queue was full.
    pub control_dropped: u64,
    /// ACKs sent between two frames of a receive burst, each for one segment that was out of
    /// order, filled a gap or was a duplicate (RFC 5681 4.2).
    pub quick_acks: u64,
    /// Half-open connections evicted by newer SYNs (a full backlog).
    pub half_open_evicted: u64,
    /// SYNs dropped because the connection table was full.
    pub syn_dropped: u64,
    /// Transmit attempts refused by the device (back-pressure).
    pub tx_blocked: u64,
    /// Connection timers that fired.
    pub timers_fired: u64,
    /// Segments whose external records the owner could not write ([`Fill`]): each went
    /// out as an RST and reset its connection.
    pub external_fill_failures: u64,
    /// Out-of-order segments dropped, neither held nor SACKed, because their new octets
    /// would have taken the octets all connections hold out of order past
    /// `StackConfig::out_of_order_budget_bytes` (their peers send them again).
    pub out_of_order_refused: u64,
    /// Occupancy when read: octets all connections hold out of order now.
    pub out_of_order_held: u64,
    /// Times a connection holding more than its share of the out-of-order budget gave
    /// octets up (reneged, RFC 2018 8) so that one holding less could hold a segment the
    /// budget had refused (the segment is then held, not counted in
    /// `out_of_order_refused`).
    pub out_of_order_reneges: u64,
    /// The octets given up so (`ConnStats::out_of_order_reneged` of each connection).
    pub out_of_order_reneged: u64,
}

/// Counters summed over every connection the host has had, live ones included.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpTotals {
    /// Segments sent (all kinds).
    pub segments_sent: u64,
    /// Segments received for a connection.
    pub segments_received: u64,
    /// Out-of-order segments received.
    pub out_of_order: u64,
    /// Of those, dropped because their connection held its most disjoint out-of-order
    /// blocks (64) already (`ConnStats::out_of_order_no_block`).
    pub out_of_order_no_block: u64,
    /// Segments retransmitted.
    pub retransmitted_segments: u64,
    /// Octets retransmitted.
    pub retransmitted_octets: u64,
    /// Retransmission timeouts.
    pub rtos: u64,
    /// Of those, found spurious and undone (RFC 3522, RFC 4015).
    pub spurious_rtos: u64,
    /// Tail loss probes (RFC 8985).
    pub tail_loss_probes: u64,
    /// ACKs received with a D-SACK block (RFC 2883): segments the peer got twice.
    pub dsacks_received: u64,
    /// Recovery episodes undone because D-SACKs showed all their retransmissions unneeded.
    pub undone_recoveries: u64,
    /// Recovery episodes (window reductions).
    pub fast_recoveries: u64,
    /// Window-probe timer expiries: zero-window probes sent, and segments sender SWS
    /// avoidance held back that went at its override timeout (RFC 9293 3.8.6).
    pub window_probes: u64,
    /// In-order octets the user took straight from the received frames
    /// ([`Host::poll_with`]), never copied into a receive queue.
    pub delivered_in_place: u64,
    /// Octets of external records written into frames by their owner
    /// ([`crate::conn::Connection::send_external_record`]: the engine's FPDUs framed from
    /// registered memory), retransmissions included.
    pub external_octets_sent: u64,
    /// Connections whose peer's SYN carried a Window Scale shift above 14, taken as 14
    /// (RFC 7323 2.3; each also logged as a `tracing` warning).
    pub window_scale_clamped: u64,
    /// ACKs not sent in answer to out-of-window segments without data, within
    /// `TcpTuning::oow_ack_interval` of the last one (Linux's `tcp_oow_rate_limited`).
    pub oow_acks_suppressed: u64,
}

impl TcpTotals {
    fn add(&mut self, c: &crate::conn::ConnStats) {
        self.segments_sent += c.segments_sent;
        self.segments_received += c.segments_received;
        self.out_of_order += c.out_of_order;
        self.out_of_order_no_block += c.out_of_order_no_block;
        self.retransmitted_segments += c.recovery.retransmitted_segments;
        self.retransmitted_octets += c.recovery.retransmitted_octets;
        self.rtos += c.recovery.rto_count;
        self.spurious_rtos += c.recovery.spurious_rtos;
        self.tail_loss_probes += c.recovery.tlp_count;
        self.dsacks_received += c.recovery.dsacks_received;
        self.undone_recoveries += c.recovery.undone_recoveries;
        self.fast_recoveries += c.recovery.fast_recoveries;
        self.window_probes += c.window_probes;
        self.delivered_in_place += c.delivered_in_place;
        self.external_octets_sent += c.external_octets_sent;
        self.window_scale_clamped += c.window_scale_clamped;
        self.oow_acks_suppressed += c.oow_acks_suppressed;
    }
}

struct Inner {
    mac: EthernetAddress,
    cidr: Ipv4Cidr,
    gateway: Option<Ipv4Address>,
    routes: Vec<(Ipv4Cidr, Ipv4Address)>,
    caps: ChecksumCapabilities,
    /// `caps` without the TCP checksum, for smoltcp's TCP header parse: our own code (module
    /// `csum`) verifies the field in `process_tcp` (and fills it in `emit_tcp`).
    caps_no_tcp: ChecksumCapabilities,
    /// What the TCP checksum of a received segment is verified with, from 128 octets on
    /// ([`Host::set_bulk_sum`]).
    bulk_sum: csum::BulkSum,
    /// What a predicted segment's payload is summed and digested with, and from how many
    /// octets on ([`Host::set_payload_digest`]).
    payload_digest: Option<(csum::BulkSumDigest, usize)>,
    mss: u16,
    slots: Vec<Option<Slot>>,
    generations: Vec<u32>,
    free: Vec<u32>,
    live: usize,
    /// Orphans (in TIME-WAIT, or owing a RST), oldest first (stale handles skipped).
    orphans: VecDeque<ConnId>,
    orphans_live: usize,
    demux: HashMap<Tuple, u32, KeyedHash>,
    /// The last pair `demux` answered: segments come in runs for one connection, and the
    /// keyed hash (SipHash-1-3) of every segment's tuple is ~100 instructions. Cleared by
    /// every insertion into and removal from `demux`, so it always agrees with it.
    demux_memo: Option<(Tuple, u32)>,
    listeners: Vec<Listener>,
    /// Entries of listeners gone (`Host::unlisten`), for the next `listen`.
    free_listeners: Vec<u32>,
    ports: HashMap<u16, ListenerId>,
    wheel: Wheel,
    due: Vec<Entry>,
    /// Connections the transmit pass served: their events and timers are taken after the
    /// device flush, so that the frames leave first.
    served: Vec<u32>,
    dirty: Vec<u32>,
    /// Connections waiting for a next hop's hardware address (each once, at its
    /// [`Slot::waiting_at`]).
    unresolved: Vec<u32>,
    /// No connection of `unresolved` may ask for its next hop again before this instant (a
    /// lower bound, taken as each was filed; `None` when none waits): `poll_at` and each
    /// transmit pass read it instead of looking every waiting next hop up, per poll.
    unresolved_retry: Option<Instant>,
    /// Resolutions asked for by [`Host::resolve_neighbor`], not yet answered.
    resolving: Vec<Resolving>,
    /// The sequence number of the next [`ResolveId`].
    next_resolve: u32,
    events: VecDeque<Event>,
    neighbors: Neighbors,
    control: VecDeque<Vec<u8>>,
    /// The connection that owes an ACK for the segment just read alone
    /// ([`Connection::poll_quick_ack`]): sent before the next frame of the burst is read.
    quick_ack: Option<u32>,
    isn: IsnGen,
    now: Instant,
    /// What the caller asked of the next poll's receiving ([`Host::begin_poll`],
    /// [`Host::hold_rx`]): `RX_BEGUN` (its snapshot taken), `RX_HELD` (no frame taken).
    rx_next: u8,
    /// The ephemeral port selector (RFC 6056 3.3.3).
    ports_gen: PortGen,
    max_connections: usize,
    /// This host's tag in every handle it makes (`crate::stack::new_stack_tag`): a handle
    /// of another stack names none of its connections or listeners.
    tag: u32,
    stats: HostStats,
    /// The counters of the connections removed so far.
    removed_totals: TcpTotals,
    /// What every connection holds out of order, against
    /// `StackConfig::out_of_order_budget_bytes` (each connection counts its own into it).
    ooo_budget: Arc<OutOfOrderBudget>,
}

/// Warpcore's TCP/IPv4 host over one device (see the module documentation).
pub struct Host<D: PollDevice> {
    device: D,
    inner: Inner,
}

impl<D: PollDevice + std::fmt::Debug> std::fmt::Debug for Host<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host")
            .field("device", &self.device)
            .field("ip", &self.inner.cidr)
            .field("connections", &self.inner.live)
            .field("listeners", &self.inner.listeners.len())
            .field("pending_events", &self.inner.events.len())
            .finish_non_exhaustive()
    }
}

fn conn_config(t: &TcpTuning, mss: u16) -> ConnConfig {
    let defaults = ConnConfig::default();
    ConnConfig {
        rx_buffer: t.rx_buffer,
        rx_window_clamp: t.rx_window_clamp,
        tx_buffer: t.tx_buffer,
        mss,
        ack_delay: t.ack_delay,
        keep_alive: t.keep_alive,
        timeout: t.timeout,
        time_wait: t.time_wait,
        fin_wait_2_timeout: t.fin_wait_2_timeout,
        oow_ack_interval: t.oow_ack_interval,
        recovery: RecoveryConfig {
            rto_min: t.rto_min,
            rto_initial: t.rto_initial,
            rto_max: crate::stack::RTO_MAX,
            congestion: match t.congestion {
                Congestion::None => CcAlgorithm::None,
                Congestion::Reno => CcAlgorithm::NewReno,
                Congestion::Cubic => CcAlgorithm::Cubic,
            },
            ..defaults.recovery
        },
        ..defaults
    }
}

fn check_tuning(t: &TcpTuning) -> Result<(), StackError> {
    t.check()?;
    if t.nagle {
        // MPA hands TCP whole FPDUs that must leave at once (MPA-5.1-3).
        return Err(StackError::Unsupported("Nagle's algorithm"));
    }
    Ok(())
}

impl<D: PollDevice> Host<D> {
    /// Creates the host on `device` at time `now`.
    pub fn new(device: D, config: &StackConfig, now: Instant) -> Result<Self, StackError> {
        config.check()?;
        if config.routes.len() > 7 {
            return Err(StackError::TooManyRoutes);
        }
        let caps = device.capabilities();
        let ip_mtu = caps.ip_mtu();
        // The MSS advertised is what the device can take (RFC 9293 3.7.1: the IP MTU less
        // the fixed headers; 65,495 at most, the option's width less the headers). Below
        // 536 octets, the least every IPv4 host takes (RFC 9293 3.7.1, RFC 1122 3.3.2), the
        // connection's own floors would send frames the device cannot carry: refused, not
        // raised to 536 (which advertised an MSS the device could not receive).
        if ip_mtu < IP_MTU_MIN {
            return Err(StackError::InvalidArgument(
                "device",
                "has an IP MTU below 576 octets (the least an IPv4 host must take)",
            ));
        }
        let mss = (ip_mtu - (IP_HDR + TCP_HDR)).min(65_495) as u16;
        Ok(Host {
            device,
            inner: Inner {
                mac: EthernetAddress(config.mac),
                cidr: config.ip,
                gateway: config.gateway,
                routes: config.routes.clone(),
                caps: caps.checksum.clone(),
                caps_no_tcp: {
                    let mut c = caps.checksum.clone();
                    c.tcp = Checksum::None;
                    c
                },
                bulk_sum: csum::bulk_sum,
                payload_digest: None,
                mss,
                slots: Vec::new(),
                generations: Vec::new(),
                free: Vec::new(),
                live: 0,
                orphans: VecDeque::new(),
                orphans_live: 0,
                demux: HashMap::with_hasher(KeyedHash::new(config.random_seed)),
                demux_memo: None,
                listeners: Vec::new(),
                free_listeners: Vec::new(),
                ports: HashMap::new(),
                wheel: Wheel::new(now, config.max_connections),
                due: Vec::with_capacity(64),
                served: Vec::with_capacity(64),
                dirty: Vec::with_capacity(64),
                unresolved: Vec::new(),
                unresolved_retry: None,
                resolving: Vec::new(),
                next_resolve: 0,
                events: VecDeque::with_capacity(64),
                neighbors: Neighbors::default(),
                control: VecDeque::with_capacity(CONTROL_MAX),
                quick_ack: None,
                isn: IsnGen::new(config.random_seed),
                now,
                rx_next: 0,
                ports_gen: PortGen::new(config.random_seed),
                max_connections: config.max_connections,
                tag: crate::stack::new_stack_tag(),
                stats: HostStats::default(),
                removed_totals: TcpTotals::default(),
                ooo_budget: OutOfOrderBudget::new(config.out_of_order_budget_bytes),
            },
        })
    }

    /// The device.
    pub fn device(&self) -> &D {
        &self.device
    }

    /// The device, mutably.
    pub fn device_mut(&mut self) -> &mut D {
        &mut self.device
    }

    /// Drops the host (every connection with it, without sending anything) and returns the
    /// device.
    pub fn into_device(self) -> D {
        self.device
    }

    /// Device counters.
    pub fn device_stats(&self) -> DeviceStats {
        self.device.stats()
    }

    /// Host counters.
    pub fn host_stats(&self) -> HostStats {
        let b = &self.inner.ooo_budget;
        let (reneges, reneged) = b.reneged();
        HostStats {
            out_of_order_refused: b.refused(),
            out_of_order_held: b.held() as u64,
            out_of_order_reneges: reneges,
            out_of_order_reneged: reneged,
            ..self.inner.stats
        }
    }

    /// The octets held out of order summed over every connection in the table (a walk:
    /// tests and the fuzz body check that [`HostStats::out_of_order_held`] equals it).
    /// Panics if the budget's index of holders is not exactly the connections' holdings
    /// (what reneging picks its holder from).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn out_of_order_held_by_connections(&self) -> usize {
        let holders: std::collections::BTreeSet<(usize, u32)> = self
            .inner
            .slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((s.as_ref()?.conn.out_of_order_octets(), i as u32)))
            .filter(|&(n, _)| n > 0)
            .collect();
        assert_eq!(
            self.inner.ooo_budget.holders_snapshot(),
            holders,
            "the out-of-order budget's holders are not the connections'"
        );
        holders.iter().map(|&(n, _)| n).sum()
    }

    /// The TCP counters of every connection so far (a walk over the live ones).
    pub fn tcp_totals(&self) -> TcpTotals {
        let mut t = self.inner.removed_totals;
        for s in self.inner.slots.iter().flatten() {
            t.add(&s.conn.stats());
        }
        t
    }

    /// The interface's IPv4 address.
    pub fn ipv4_addr(&self) -> Option<Ipv4Address> {
        Some(self.inner.cidr.address())
    }

    /// The MSS the host advertises (from the device's MTU).
    pub fn mss(&self) -> u16 {
        self.inner.mss
    }

    /// Connections in the table (half-open ones included; released ones finishing their
    /// TIME-WAIT not).
    pub fn live(&self) -> usize {
        self.inner.live - self.inner.orphans_live
    }

    /// Released connections the host keeps until their TIME-WAIT ends.
    pub fn time_wait_orphans(&self) -> usize {
        self.inner.orphans_live
    }

    /// Entries in the timer wheel: one per connection whose timer is armed (a deadline
    /// that moved earlier replaces its entry; a removed connection takes its entry along).
    pub fn timers_armed(&self) -> usize {
        self.inner.wheel.len()
    }

    /// Runs the host at `now`: one rx batch in, due timers, every dirty connection's segments
    /// out, one flush. Returns whether anything happened.
    #[inline]
    pub fn poll(&mut self, now: Instant) -> bool {
        self.poll_with(now, |_, _| 0)
    }

    /// [`Self::poll`], offering each connection's in-order payload to `deliver` straight
    /// from the received frame while that connection's receive queue is empty
    /// ([`Connection::handle_segment_with`]): `deliver(conn, octets)` returns how many it
    /// consumed; the rest is queued and read with `recv_with` as before. `deliver` runs
    /// inside the poll and cannot call the host.
    #[inline]
    pub fn poll_with<F: FnMut(ConnId, &[u8]) -> usize>(
        &mut self,
        now: Instant,
        deliver: F,
    ) -> bool {
        self.poll_with_fill(now, deliver, no_fill)
    }

    /// [`Self::poll_with`], with `fill` writing the octets of external records into the
    /// frames sent ([`Fill`]).
    #[inline]
    pub fn poll_with_fill<F, X>(&mut self, now: Instant, mut deliver: F, fill: X) -> bool
    where
        F: FnMut(ConnId, &[u8]) -> usize,
        X: FnMut(ConnId, u64, usize, &mut [u8], bool) -> Option<u64>,
    {
        self.poll_with_fill_pass(now, move |c, d, _| deliver(c, d), move || fill)
    }

    /// [`Self::poll_with_fill`] with a `deliver` of three arguments (see the end), and with
    /// the fill made by `make_fill` when the poll runs a transmit pass, and dropped when
    /// that pass ends (before the flush): a fill that holds something for the length of a
    /// pass (the engine keeps the guard of the region it copies from, instead of a locked
    /// increment and decrement per segment) costs a poll that sends nothing nothing. Every
    /// `deliver` of the poll runs before `make_fill`.
    /// `deliver(conn, octets, digest)` also gets the payload's digest when `octets` is a
    /// segment's whole payload and [`Self::set_payload_digest`] took one.
    #[inline]
    pub fn poll_with_fill_pass<F, M, X>(
        &mut self,
        now: Instant,
        mut deliver: F,
        make_fill: M,
    ) -> bool
    where
        F: FnMut(ConnId, &[u8], Option<u32>) -> usize,
        M: FnOnce() -> X,
        X: FnMut(ConnId, u64, usize, &mut [u8], bool) -> Option<u64>,
    {
        self.inner.now = now;
        let events_before = self.inner.events.len();
        let rx_next = std::mem::take(&mut self.inner.rx_next);
        if rx_next & RX_BEGUN == 0 {
            self.device.begin_poll();
        }
        let budget = if rx_next & RX_HELD == 0 { RX_BUDGET } else { 0 };
        let mut work = false;
        for _ in 0..budget {
            let Some((rx, _)) = self.device.receive(now) else {
                break;
            };
            let inner = &mut self.inner;
            rx.consume(|frame| inner.process_frame(frame, &mut deliver));
            work = true;
            if let Some(index) = self.inner.quick_ack.take() {
                self.send_quick_ack(index, now);
            }
        }
        self.device.end_rx();
        // The burst brought only data `deliver` placed, whose ACKs the pass would defer (a
        // ping-pong's lone segment): the poll ends here, so the caller sees the message at
        // once. Skipping the pass is the deferral: the next pass sends what the connections
        // have then (a reply written meanwhile carries the ACK) and takes their events.
        if work && self.inner.skip_deferring_pass(now) {
            self.device.flush();
            return true;
        }
        self.timers_and_transmit(now, work, events_before, make_fill)
    }

    /// Takes the next poll's receive snapshot now ([`PollDevice::begin_poll`]): that poll
    /// takes only frames that reached the device by this call. A caller that applies what
    /// its application queued (the engine's commands: a receive posted, a region
    /// registered) after this call and before the poll knows that every frame of the poll
    /// reached the device before it applied them, so nothing queued before such a frame
    /// was sent is missed: a peer's Send, sent once the receive was posted (the peer told
    /// so by any other path), finds that receive however the threads were scheduled.
    /// Without this call the poll takes its snapshot itself.
    pub fn begin_poll(&mut self) {
        self.device.begin_poll();
        self.inner.rx_next |= RX_BEGUN;
    }

    /// Moves the host's time on to `now` (never back) between polls: the time
    /// [`Self::connect`] starts a connection at (its user timeout in SYN-SENT counts from
    /// it, and its ISN) and [`Self::release`] sends its RST at. Both otherwise take the
    /// last poll's, which is stale by however long the caller went without polling (an
    /// application that connects seconds after its last poll would see its connect time
    /// out that much early).
    #[inline]
    pub fn set_time(&mut self, now: Instant) {
        self.inner.now = self.inner.now.max(now);
    }

    /// The next poll takes no frame: its snapshot's frames stay in the device for the poll
    /// after (timers, transmit pass and flush run as always). For a caller that could not
    /// apply all its application had queued before the snapshot (a bounded command drain
    /// that left some): the frames may depend on those.
    pub fn hold_rx(&mut self) {
        self.inner.rx_next |= RX_HELD;
    }

    /// [`Self::poll`] without the rx burst: due timers, every dirty connection's segments
    /// out, one flush. For a caller that received at the top of its loop and now sends
    /// what it wrote; frames that arrived meanwhile wait in the device for the next poll.
    pub fn poll_transmit(&mut self, now: Instant) -> bool {
        self.poll_transmit_fill(now, no_fill)
    }

    /// [`Self::poll_transmit`], with `fill` writing the octets of external records
    /// ([`Fill`]).
    pub fn poll_transmit_fill<X>(&mut self, now: Instant, fill: X) -> bool
    where
        X: FnMut(ConnId, u64, usize, &mut [u8], bool) -> Option<u64>,
    {
        self.inner.now = now;
        let events_before = self.inner.events.len();
        self.timers_and_transmit(now, false, events_before, move || fill)
    }

    /// The end of a poll: due timers, the transmit pass (with the fill `make_fill` makes
    /// for it, dropped when it ends), one device flush, then the served connections'
    /// events and timers (their frames leave first). Whether anything happened (`work`
    /// from before, frames sent, events raised since `events_before`).
    #[inline(always)]
    fn timers_and_transmit<M, X>(
        &mut self,
        now: Instant,
        mut work: bool,
        events_before: usize,
        make_fill: M,
    ) -> bool
    where
        M: FnOnce() -> X,
        X: FnMut(ConnId, u64, usize, &mut [u8], bool) -> Option<u64>,
    {
        if self.inner.wheel.may_have_due(now) {
            work |= self.inner.run_timers(now);
        }
        if !self.inner.resolving.is_empty() {
            work |= self.inner.run_resolutions(now);
        }
        // Nothing queued, nothing dirty, nobody waiting for ARP: no transmit pass (the idle
        // loop's floor).
        let i = &self.inner;
        if !i.control.is_empty() || !i.dirty.is_empty() || !i.unresolved.is_empty() {
            let mut fill = make_fill();
            work |= self.transmit(now, &mut fill);
        }
        let sent = self.device.flush();
        // The bookkeeping of the connections just served, once their frames are on the
        // wire (a lone request's latency does not include it).
        if !self.inner.served.is_empty() {
            let mut served = std::mem::take(&mut self.inner.served);
            for &index in &served {
                self.inner.after_activity(index);
            }
            served.clear();
            self.inner.served = served;
        }
        work || sent || self.inner.events.len() != events_before
    }

    /// When the host next needs a poll without new input (`None`: only on input).
    pub fn poll_at(&mut self, now: Instant) -> Option<Instant> {
        let i = &self.inner;
        if !i.dirty.is_empty() || !i.control.is_empty() {
            return Some(now);
        }
        let wheel = i.wheel.next_deadline();
        let arp = i.arp_retry_at(now);
        let resolving = i.resolve_due_at(now);
        [wheel, arp, resolving].into_iter().flatten().min()
    }

    /// Takes the oldest pending event.
    pub fn next_event(&mut self) -> Option<Event> {
        self.inner.events.pop_front()
    }

    /// Whether an event is pending.
    #[inline]
    pub fn has_events(&self) -> bool {
        !self.inner.events.is_empty()
    }

    /// Resolves the next hop towards `ip` (itself on our subnet, else its router) on
    /// request, as a connection's first transmit would, without a connection: an address
    /// already known answers [`Event::NeighborResolved`] at once (queued with the
    /// events); otherwise ARP requests go out, repeated at the neighbour table's retry
    /// interval (1 s, at most three a round with a second's pause between rounds, as for
    /// a connection waiting for its next hop: RFC 1122 2.3.2.1), until an answer
    /// ([`Event::NeighborResolved`]) or until `timeout` has passed since `now`
    /// ([`Event::NeighborFailed`]). Refused: an address no connection could be opened
    /// to ([`StackError::Unaddressable`]), one without a route ([`StackError::NoRoute`]),
    /// and more than [`RESOLVE_MAX`] resolutions pending ([`StackError::TooManyResolutions`]).
    /// A `timeout` above [`crate::TIMER_MAX`] (a day) counts as a day: the requests go on
    /// until an answer, and the deadline stays far from the end of smoltcp's `Instant`
    /// (`now` plus a timeout near `i64::MAX` microseconds overflowed it: a panic in a
    /// debug build, a deadline in the past in a release one).
    pub fn resolve_neighbor(
        &mut self,
        ip: Ipv4Address,
        timeout: Duration,
        now: Instant,
    ) -> Result<ResolveId, StackError> {
        let timeout = timeout.min(crate::TIMER_MAX);
        let i = &mut self.inner;
        // RFC 1122 3.2.1.3: no loopback or "this network" address either (`wire_unicast`).
        if !wire_unicast(ip, &i.cidr) || ip == i.cidr.address() {
            return Err(StackError::Unaddressable(ip));
        }
        let next_hop = i.route(ip).ok_or(StackError::NoRoute(ip))?;
        if i.resolving.len() >= RESOLVE_MAX {
            return Err(StackError::TooManyResolutions(RESOLVE_MAX));
        }
        let id = ResolveId {
            seq: i.next_resolve,
            stack: i.tag,
        };
        i.next_resolve = i.next_resolve.wrapping_add(1);
        match i.neighbors.lookup(next_hop, now) {
            Lookup::Found(_) => i.events.push_back(Event::NeighborResolved(id)),
            Lookup::FoundRefresh(_) => {
                i.arp_request(next_hop);
                i.events.push_back(Event::NeighborResolved(id));
            }
            lookup @ (Lookup::Request | Lookup::Wait | Lookup::Failed) => {
                // The request goes out with the next poll (a request for the address sent
                // within the retry interval, a connection's, is not repeated).
                // A failed round's hold-down begins a new round for a new resolution, as
                // for a new connect (`Neighbors::restart`).
                let restarted = lookup == Lookup::Failed && i.neighbors.restart(next_hop, now);
                let next_ask = if lookup == Lookup::Request || restarted {
                    i.arp_request(next_hop);
                    now + neighbor::RETRY
                } else {
                    now
                };
                i.resolving.push(Resolving {
                    id,
                    next_hop,
                    deadline: now + timeout,
                    next_ask,
                });
            }
        }
        Ok(id)
    }

    /// Resolutions asked for and not yet answered.
    pub fn resolutions_pending(&self) -> usize {
        self.inner.resolving.len()
    }

    /// Opens a connection to `remote` from `local_port` (an ephemeral port if `None`).
    pub fn connect(
        &mut self,
        remote: (Ipv4Address, u16),
        local_port: Option<u16>,
        tuning: &TcpTuning,
    ) -> Result<ConnId, StackError> {
        check_tuning(tuning)?;
        let i = &mut self.inner;
        let ip = remote.0;
        // RFC 1122 3.2.1.3: no loopback ("MUST NOT appear outside a host") or "this
        // network" address either (`wire_unicast`): sent to the gateway, a SYN to one
        // went on until the user timeout.
        if !wire_unicast(ip, &i.cidr) || ip == i.cidr.address() || remote.1 == 0 {
            return Err(StackError::Unaddressable(ip));
        }
        let next_hop = i.route(ip).ok_or(StackError::NoRoute(ip))?;
        let port = match local_port {
            Some(p) => {
                let t = Tuple {
                    local_port: p,
                    remote_ip: ip,
                    remote_port: remote.1,
                };
                if p == 0 || i.demux.contains_key(&t) {
                    return Err(StackError::PortInUse(p));
                }
                p
            }
            None => i.ephemeral_port(ip, remote.1)?,
        };
        // A full table makes room by evicting a listener's oldest half-open connection,
        // as a SYN does (RFC 4987 3.4): a SYN flood fills the table with them (the engine's
        // backlog is the whole table), and no remote peer's flood may lock our own
        // connections out. Only a table of connections a peer completed is full.
        if i.live - i.orphans_live >= i.max_connections && !i.evict_any_half_open() {
            return Err(StackError::TableFull(i.max_connections));
        }
        let tuple = Tuple {
            local_port: port,
            remote_ip: ip,
            remote_port: remote.1,
        };
        let ep = Endpoints {
            local: (i.cidr.address(), port),
            remote,
        };
        let iss = i.isn.isn(i.now, ep.local, ep.remote);
        let mut conn = Connection::connect(&conn_config(tuning, i.mss), ep, iss, i.now);
        // RFC 7323 5.8, RFC 6191 2: a clock that never goes back across incarnations.
        conn.set_ts_offset(i.isn.ts_offset(ep.local, ep.remote));
        Ok(i.insert(conn, tuple, next_hop, Role::Active))
    }

    /// Listens on `port`; at most `backlog` handshakes in progress (oldest evicted first), at
    /// least one.
    pub fn listen(
        &mut self,
        port: u16,
        backlog: usize,
        tuning: &TcpTuning,
    ) -> Result<ListenerId, StackError> {
        check_tuning(tuning)?;
        if backlog == 0 {
            return Err(BACKLOG_ZERO);
        }
        let i = &mut self.inner;
        if port == 0 || i.ports.contains_key(&port) {
            return Err(StackError::PortInUse(port));
        }
        let mut entry = Listener {
            port,
            tuning: *tuning,
            backlog,
            half_open: VecDeque::new(),
            half_open_live: 0,
            ready: VecDeque::new(),
            open: true,
            generation: 0,
        };
        // An entry in the free list has generation 0 only when its count wrapped (each
        // `unlisten` counts one up from the 0 it was made with): it is retired, as its next
        // `listen` would hand out the handle of its first use again (handles are never
        // aliased). One entry per 2^32 listens on it.
        while i
            .free_listeners
            .last()
            .is_some_and(|&k| i.listeners[k as usize].generation == 0)
        {
            i.free_listeners.pop();
        }
        let id = if let Some(index) = i.free_listeners.pop() {
            let l = &mut i.listeners[index as usize];
            entry.generation = l.generation;
            *l = entry;
            ListenerId(index, l.generation, i.tag)
        } else {
            i.listeners.push(entry);
            ListenerId(i.listeners.len() as u32 - 1, 0, i.tag)
        };
        i.ports.insert(port, id);
        Ok(id)
    }

    /// The listener `id` names, if it still does.
    fn listener_mut(&mut self, id: ListenerId) -> Result<&mut Listener, StackError> {
        match self.inner.listeners.get_mut(id.0 as usize) {
            Some(l) if l.open && l.generation == id.1 && id.2 == self.inner.tag => Ok(l),
            _ => Err(StackError::UnknownListener),
        }
    }

    /// Takes an established connection from the listener, if one is waiting.
    pub fn accept(&mut self, listener: ListenerId) -> Result<Option<ConnId>, StackError> {
        Ok(self.listener_mut(listener)?.ready.pop_front())
    }

    /// Stops listening: handshakes in progress are dropped silently, established
    /// connections not yet accepted are reset (as Linux resets its accept queue when a
    /// listening socket closes) and freed, accepted connections stay. The handle is stale
    /// from here ([`StackError::UnknownListener`]); its entry serves the next `listen`.
    pub fn unlisten(&mut self, listener: ListenerId) -> Result<(), StackError> {
        let l = self.listener_mut(listener)?;
        l.open = false;
        l.generation = l.generation.wrapping_add(1);
        let port = l.port;
        let half_open: Vec<ConnId> = l.half_open.drain(..).collect();
        let ready: Vec<ConnId> = l.ready.drain(..).collect();
        let i = &mut self.inner;
        i.ports.remove(&port);
        for id in half_open {
            if matches!(i.slot(id), Some(s) if s.role == Role::HalfOpen(listener)) {
                i.remove(id.index);
            }
        }
        i.free_listeners.push(listener.0);
        for id in ready {
            // Never handed out: the user holds no handle to release. The RST goes now.
            let _ = self.release(id);
        }
        Ok(())
    }

    /// Listener entries in the table (open or free for reuse).
    pub fn listener_entries(&self) -> usize {
        self.inner.listeners.len()
    }

    /// Lends the free contiguous part of the send buffer to `f`; returns what it wrote.
    pub fn send_with<F>(&mut self, id: ConnId, f: F) -> Result<usize, StackError>
    where
        F: FnOnce(&mut [u8]) -> usize,
    {
        self.send_with_room(id, None, f)
    }

    /// As [`Host::send_with`]; with `Some(room)` what `f` writes is one record and the send
    /// buffer grows only as far as `room` contiguous octets need
    /// ([`Connection::send_with_room`]).
    pub fn send_with_room<F>(
        &mut self,
        id: ConnId,
        room: Option<usize>,
        f: F,
    ) -> Result<usize, StackError>
    where
        F: FnOnce(&mut [u8]) -> usize,
    {
        // One look-up of the slot serves the write and the dirty mark (the engine writes
        // every FPDU through here).
        let Inner {
            slots, dirty, tag, ..
        } = &mut self.inner;
        let s = user_slot_in(slots, *tag, id)?;
        let r = match room {
            Some(room) => s.conn.send_with_room(room, f),
            None => s.conn.send_with(f),
        };
        let n = r.map_err(|_| StackError::CannotSend(s.conn.state()))?;
        if n > 0 {
            mark_slot_dirty(s, dirty, id.index);
        }
        Ok(n)
    }

    /// Sends `record` (one record, an FPDU) on connection `id` at once, when it would be
    /// the only thing a transmit pass now sends: `Ok(true)`, its frame is flushed; then it
    /// is in the send buffer and the connection is as [`Self::send_with_room`] of the
    /// record followed by [`Self::poll_transmit`] at `now` leave it (the same frame, built
    /// by the same function, the same state after). `Ok(false)`, nothing changed (but a
    /// device that refused a transmit slot counts the refusal, which the caller's pass
    /// then meets and counts again): the caller writes the record and polls as usual.
    ///
    /// The order is what differs: the frame is written from `record` and flushed first,
    /// and the record enters the send buffer, the segment its scoreboard, and the
    /// connection's events and timer are taken after the flush, so a lone request's
    /// latency does not include them. Taken when the pass would have nothing else to do:
    /// no control frame, no connection waiting for ARP, no timer due, no other connection
    /// marked, this one not deferring its ACK, its next hop in the neighbour memo, a
    /// transmit slot free, and the connection's own conditions
    /// (`Connection::lone_segment`: nothing in flight or owed, the record whole in one
    /// segment).
    pub fn send_lone_record(
        &mut self,
        id: ConnId,
        now: Instant,
        record: &[u8],
    ) -> Result<bool, StackError> {
        let Host { device, inner, .. } = self;
        let quiet = inner.control.is_empty()
            && inner.unresolved.is_empty()
            && inner.served.is_empty()
            && !inner.wheel.may_have_due(now)
            && match inner.dirty.as_slice() {
                [] => true,
                [d] => *d == id.index,
                _ => false,
            };
        if !quiet {
            return Ok(false);
        }
        let Inner {
            slots,
            dirty,
            neighbors,
            cidr,
            mac: our_mac,
            caps,
            now: host_now,
            tag,
            ..
        } = &mut *inner;
        let s = user_slot_in(slots, *tag, id)?;
        if s.defer_ack {
            return Ok(false);
        }
        let Some(seg) = s.conn.lone_segment(now, record.len()) else {
            return Ok(false);
        };
        let Some(mac) = neighbors.found_in_memo(s.next_hop, now) else {
            return Ok(false);
        };
        let Some(tx) = device.transmit(now) else {
            return Ok(false);
        };
        let addrs = FrameAddrs {
            src_mac: *our_mac,
            dst_mac: mac,
            src: cidr.address(),
            dst: s.tuple.remote_ip,
        };
        let tcp_len = headers::tcp_header_len(&seg) + record.len();
        tx.consume(ETH_HDR + IP_HDR + tcp_len, |buf| {
            emit_tcp(buf, &addrs, &seg, None, record, caps)
        });
        *host_now = now;
        device.flush();
        // What the pass does before its flush and after it, now: the record written (a
        // mark that clears `held`), the segment's bookkeeping, the slot off the dirty list,
        // its events and timer.
        s.conn.commit_lone(now, &seg, record);
        s.held = false;
        if s.dirty {
            s.dirty = false;
            dirty.clear();
        }
        inner.after_activity(id.index);
        Ok(true)
    }

    /// Lends the contiguous received bytes to `f`, which returns how many it consumed.
    pub fn recv_with<F>(&mut self, id: ConnId, f: F) -> Result<usize, StackError>
    where
        F: FnOnce(&[u8]) -> usize,
    {
        let Inner {
            slots, dirty, tag, ..
        } = &mut self.inner;
        let s = user_slot_in(slots, *tag, id)?;
        let n = s
            .conn
            .recv_with(f)
            .map_err(|_| StackError::CannotRecv(s.conn.state()))?;
        if n > 0 {
            // Reading opens the window: the connection may owe the peer an update.
            mark_slot_dirty(s, dirty, id.index);
        }
        Ok(n)
    }

    /// Bytes waiting to be read.
    pub fn recv_queue(&mut self, id: ConnId) -> Result<usize, StackError> {
        Ok(self.inner.user_slot(id)?.conn.recv_queue())
    }

    /// Bytes in the send buffer not yet acknowledged.
    pub fn send_queue(&mut self, id: ConnId) -> Result<usize, StackError> {
        Ok(self.inner.user_slot(id)?.conn.send_queue())
    }

    /// [`Connection::peer_stream_start`] of connection `id` (the fuzz harness).
    #[cfg(feature = "fuzzing")]
    pub(crate) fn peer_stream_start(&self, id: ConnId) -> Option<TcpSeqNumber> {
        self.inner.user_slot(id).ok()?.conn.peer_stream_start()
    }

    /// [`Connection::nothing_in_flight`] of connection `id`.
    pub fn nothing_in_flight(&self, id: ConnId) -> Result<bool, StackError> {
        Ok(self.inner.user_slot(id)?.conn.nothing_in_flight())
    }

    /// [`Connection::peer_window_shut`] of connection `id`.
    pub fn peer_window_shut(&self, id: ConnId) -> Result<bool, StackError> {
        Ok(self.inner.user_slot(id)?.conn.peer_window_shut())
    }

    /// Free bytes in the send buffer.
    pub fn send_space(&mut self, id: ConnId) -> Result<usize, StackError> {
        Ok(self.inner.user_slot(id)?.conn.send_space())
    }

    /// Marks the end of what was written so far as a record boundary
    /// ([`Connection::end_record`]).
    pub fn end_record(&mut self, id: ConnId) -> Result<(), StackError> {
        self.inner.user_slot_mut(id)?.conn.end_record();
        Ok(())
    }

    /// Queues an external record ([`Connection::send_external_record`]); the connection is
    /// marked to send.
    pub fn send_external_record(
        &mut self,
        id: ConnId,
        len: usize,
        token: u64,
    ) -> Result<bool, StackError> {
        self.send_external_run(id, len, len, token)
    }

    /// Queues a run of external records under one token
    /// ([`Connection::send_external_run`]); the connection is marked to send.
    pub fn send_external_run(
        &mut self,
        id: ConnId,
        len: usize,
        every: usize,
        token: u64,
    ) -> Result<bool, StackError> {
        let s = self.inner.user_slot_mut(id)?;
        let queued = s
            .conn
            .send_external_run(len, every, token)
            .map_err(|e| match e {
                ConnError::InvalidArgument(name, why) => StackError::InvalidArgument(name, why),
                _ => StackError::CannotSend(s.conn.state()),
            })?;
        if queued {
            self.inner.mark_dirty(id.index);
        }
        Ok(queued)
    }

    /// [`Connection::internalize_external`]: the unacknowledged external records of `id`
    /// written into its send buffer by `fill(token, at, dst)` and made its own. `Ok(false)`
    /// when a `fill` failed (the records from that one on stay external).
    pub fn internalize_external(
        &mut self,
        id: ConnId,
        fill: impl FnMut(u64, usize, &mut [u8]) -> bool,
    ) -> Result<bool, StackError> {
        Ok(self
            .inner
            .user_slot_mut(id)?
            .conn
            .internalize_external(fill))
    }

    /// [`Connection::take_acked_external`].
    pub fn take_acked_external(&mut self, id: ConnId) -> Result<Option<u64>, StackError> {
        Ok(self.inner.user_slot_mut(id)?.conn.take_acked_external())
    }

    /// The payload room of a data segment without SACK blocks
    /// ([`Connection::max_record_payload`]): the largest record one segment carries.
    pub fn max_record_payload(&self, id: ConnId) -> Result<usize, StackError> {
        Ok(self.inner.user_slot(id)?.conn.max_record_payload())
    }

    /// The TCP state.
    pub fn state(&mut self, id: ConnId) -> Result<State, StackError> {
        Ok(self.inner.user_slot(id)?.conn.state())
    }

    /// Local and remote endpoints.
    pub fn endpoints(
        &mut self,
        id: ConnId,
    ) -> Result<(Option<IpEndpoint>, Option<IpEndpoint>), StackError> {
        let ep = self.inner.user_slot(id)?.conn.endpoints();
        Ok((
            Some(IpEndpoint::new(IpAddress::Ipv4(ep.local.0), ep.local.1)),
            Some(IpEndpoint::new(IpAddress::Ipv4(ep.remote.0), ep.remote.1)),
        ))
    }

    /// Verifies the TCP checksum of received segments of 128 octets or more with `bulk`
    /// instead of [`csum::bulk_sum`]: a sum that folds as [`csum::sum`]'s (the engine's
    /// uses the CPU's 512-bit vectors where it has them). Transmit is unchanged: its sums
    /// are taken in the pass that writes each octet. A predicted segment's payload long
    /// enough for the payload digest, where one is set, is summed by that instead
    /// ([`Self::set_payload_digest`]).
    pub fn set_bulk_sum(&mut self, bulk: csum::BulkSum) {
        self.inner.bulk_sum = bulk;
    }

    /// With `Some((digest, min))`, sums the payload of a received segment of `min` octets
    /// or more with `digest`, when its TCP checksum is verified in software and it takes
    /// the predicted path (an established connection's data, in the layout of its last
    /// segment); the header is summed apart. The digest goes to `deliver` with the payload
    /// when the payload is delivered whole, straight from its frame
    /// ([`Self::poll_with_fill_pass`]); every other delivery gets `None`. A caller of
    /// [`Self::poll`], [`Self::poll_with`] or [`Self::poll_with_fill`] pays for the pass
    /// and never sees a digest. `None` turns it off. The engine's digest is the CRC32c
    /// that checks an FPDU filling the segment: the payload is read once for the checksum
    /// and the CRC.
    pub fn set_payload_digest(&mut self, digest: Option<(csum::BulkSumDigest, usize)>) {
        self.inner.payload_digest = digest;
    }

    /// Nagle is refused (see [`crate::Stack::set_nagle_and_ack_delay`]); the ACK delay of a
    /// live connection is changed, an ACK it already delays then due no later than the new
    /// delay from the last poll (at the next poll without one).
    pub fn set_nagle_and_ack_delay(
        &mut self,
        id: ConnId,
        nagle: bool,
        ack_delay: Option<Duration>,
    ) -> Result<(), StackError> {
        let now = self.inner.now;
        let s = self.inner.user_slot_mut(id)?;
        if nagle {
            return Err(StackError::Unsupported("Nagle's algorithm"));
        }
        // An ACK already delayed follows the new delay: sent at the next poll without
        // one, else its deadline re-armed (the wheel and `poll_at` learn an earlier one).
        if s.conn.set_ack_delay(ack_delay, now) {
            self.inner.mark_dirty(id.index);
        }
        self.inner.after_activity(id.index);
        Ok(())
    }

    /// Lifts connection `id`'s [`TcpTuning::rx_window_clamp`] ([`Connection::clear_window_clamp`]):
    /// the larger window goes to the peer at the next poll.
    pub fn clear_window_clamp(&mut self, id: ConnId) -> Result<(), StackError> {
        if self.inner.user_slot_mut(id)?.conn.clear_window_clamp() {
            self.inner.mark_dirty(id.index);
        }
        Ok(())
    }

    /// Sends FIN after the buffered data.
    pub fn close(&mut self, id: ConnId) -> Result<(), StackError> {
        self.inner.user_slot_mut(id)?.conn.close();
        self.inner.mark_dirty(id.index);
        Ok(())
    }

    /// Sends RST and drops everything buffered.
    pub fn abort(&mut self, id: ConnId) -> Result<(), StackError> {
        self.inner.user_slot_mut(id)?.conn.abort();
        self.inner.mark_dirty(id.index);
        Ok(())
    }

    /// Frees the connection's slot, aborting it first (the RST leaves at once) if it is
    /// still open. The handle becomes stale.
    pub fn release(&mut self, id: ConnId) -> Result<(), StackError> {
        let s = self.inner.user_slot_mut(id)?;
        if s.conn.state() == State::TimeWait {
            // The host finishes TIME-WAIT on its own (old duplicates of this 4-tuple still
            // meet it); the user's table has the room at once.
            s.conn.shed_buffers();
            self.inner.adopt_orphan(id);
            return Ok(());
        }
        if !s.conn.is_finished() {
            s.conn.abort();
            let now = self.inner.now;
            // The RST only: the abort's events (its Closed) go with the slot, as the handle
            // is stale from here (an event for it named a handle the user had let go).
            self.transmit_frames(id.index, now, &mut no_fill);
            // A device that took no more frames (back-pressure: many connections released
            // at once) left the RST owed (RFC 9293 3.10.5): the host keeps the connection
            // as an orphan until the RST goes at the next transmit pass, then frees it
            // (`after_activity`). Dropped with the slot, the RST never left and the peer
            // kept a half-open connection. One whose next hop is unresolved goes now (no
            // frame can reach the peer, and nothing would end its wait).
            if let Some(s) = self.inner.slot(id) {
                if s.conn.rst_owed() && !s.hop_pending {
                    self.inner.adopt_orphan(id);
                    return Ok(());
                }
            }
        }
        self.inner.remove(id.index);
        Ok(())
    }

    /// Sends what is queued: control frames first, then every dirty connection.
    #[inline(never)]
    fn transmit(&mut self, now: Instant, fill: &mut Fill<'_>) -> bool {
        let mut work = false;
        while !self.inner.control.is_empty() {
            let Some(tx) = self.device.transmit(now) else {
                self.inner.stats.tx_blocked += 1;
                return true;
            };
            if let Some(f) = self.inner.control.pop_front() {
                tx.consume(f.len(), |buf| buf.copy_from_slice(&f));
                work = true;
            }
        }
        // Connections waiting for ARP try again when a request may be repeated (an answer
        // marks them dirty at once, in `process_arp`).
        if !self.inner.unresolved.is_empty()
            && self.inner.arp_retry_at(now).is_none_or(|t| t <= now)
        {
            self.inner.wake_unresolved();
        }
        let mut dirty = std::mem::take(&mut self.inner.dirty);
        let mut kept = 0;
        for k in 0..dirty.len() {
            let index = dirty[k];
            work = true;
            let (deferred, held) = match self.inner.slots.get_mut(index as usize) {
                Some(Some(s)) if s.defer_ack => {
                    // Its events now (the engine reads this loop), its segments next poll.
                    s.defer_ack = false;
                    (true, false)
                }
                Some(Some(s)) => {
                    s.dirty = false;
                    (false, std::mem::take(&mut s.held))
                }
                _ => (false, false),
            };
            if deferred {
                self.inner.after_activity(index);
                if let Some(Some(s)) = self.inner.slots.get_mut(index as usize) {
                    // Quiet now: unless marked again, the next pass has nothing to take.
                    s.held = s.conn.nothing_to_send();
                }
                dirty[kept] = index;
                kept += 1;
            } else if held {
                // Untouched since its deferral took its events and armed its timer: its frames
                // pass as any (the next hop's lookup, a slot: both can act on the wire), and
                // finds nothing to send; no `after_activity`.
                debug_assert!(matches!(
                    self.inner.slots.get(index as usize),
                    Some(Some(s)) if s.conn.nothing_to_send()
                ));
                self.transmit_frames(index, now, fill);
            } else {
                self.transmit_frames(index, now, fill);
                self.inner.served.push(index);
            }
        }
        dirty.truncate(kept);
        // Keep the allocation; connections marked while sending join the deferred ones.
        dirty.append(&mut self.inner.dirty);
        self.inner.dirty = dirty;
        // Control frames queued while serving connections (ARP requests).
        while !self.inner.control.is_empty() {
            let Some(tx) = self.device.transmit(now) else {
                self.inner.stats.tx_blocked += 1;
                break;
            };
            if let Some(f) = self.inner.control.pop_front() {
                tx.consume(f.len(), |buf| buf.copy_from_slice(&f));
            }
        }
        work
    }

    /// Sends the ACK connection `index` owes for the segment just read alone
    /// ([`Connection::poll_quick_ack`]), between two frames of a receive burst, if its next
    /// hop's address is known and the device has a slot; otherwise the ACK stays owed and
    /// the transmit pass sends it. The connection stays marked: the pass takes its events
    /// and timer (and what else it has to send) as before.
    #[cold]
    #[inline(never)]
    fn send_quick_ack(&mut self, index: u32, now: Instant) {
        let i = &mut self.inner;
        let Some(Some(s)) = i.slots.get_mut(index as usize) else {
            return;
        };
        // The neighbour memo only (a lookup that would ask or refresh is the pass's).
        let Some(mac) = i.neighbors.found_in_memo(s.next_hop, now) else {
            return;
        };
        let Some(tx) = self.device.transmit(now) else {
            return;
        };
        let Some(ack) = s.conn.poll_quick_ack(now) else {
            return;
        };
        let (tcp_len, fourth) =
            headers::tcp_header_len_sack(&ack, || s.conn.fourth_sack_block(&ack));
        let addrs = FrameAddrs {
            src_mac: i.mac,
            dst_mac: mac,
            src: i.cidr.address(),
            dst: s.tuple.remote_ip,
        };
        let caps = &i.caps;
        tx.consume(ETH_HDR + IP_HDR + tcp_len, |buf| {
            emit_tcp(buf, &addrs, &ack, fourth, &[], caps);
        });
        i.stats.quick_acks += 1;
    }

    /// Sends every segment connection `index` has now (into the device's pending frames);
    /// the caller then runs its `after_activity`.
    fn transmit_frames(&mut self, index: u32, now: Instant, fill: &mut Fill<'_>) {
        let i = &mut self.inner;
        let Some(Some(s)) = i.slots.get_mut(index as usize) else {
            return;
        };
        let next_hop = s.next_hop;
        let lookup = i.neighbors.lookup(next_hop, now);
        let mac = match lookup {
            Lookup::Found(m) => Some(m),
            Lookup::FoundRefresh(m) => {
                i.arp_request(next_hop);
                Some(m)
            }
            Lookup::Request => {
                i.arp_request(next_hop);
                None
            }
            Lookup::Wait | Lookup::Failed => None,
        };
        let Some(Some(s)) = i.slots.get_mut(index as usize) else {
            return;
        };
        let waited = s.hop_pending;
        s.hop_pending = mac.is_none();
        let mut ask_again = false;
        if mac.is_none() {
            if !waited {
                s.hop_since = now;
            }
            // RFC 1122 2.3.2.1, 2.3.2.2: a round of ARP requests went unanswered (one a
            // second, three: Linux's `mcast_solicit`): a connect that waited for it gives up
            // now, reported as the next hop's failure (`Event::NeighborUnreachable`, Linux's
            // `EHOSTUNREACH`), not at its user timeout after a broadcast every retry
            // interval. Also when a newer connect began a new round meanwhile. The caller
            // takes its event.
            let through = waited
                && i.neighbors
                    .failed_at(next_hop, now)
                    .is_some_and(|f| s.hop_since < f);
            if through && s.conn.neighbor_failed() {
                return;
            }
            // A connection that did not wait through the failed round (a connect that came
            // after it) begins a new round at once, as Linux's `__neigh_event_send` probes
            // a FAILED entry again for new traffic: it failed at once (woken in that
            // second) or waited out the hold-down, before a single request of its own.
            ask_again = lookup == Lookup::Failed && !through && i.neighbors.restart(next_hop, now);
        }
        // The slot is looked up again only after a request (off the path of a resolved
        // next hop).
        let s = if ask_again {
            i.arp_request(next_hop);
            let Some(Some(s)) = i.slots.get_mut(index as usize) else {
                return;
            };
            s
        } else {
            s
        };
        // The headers of this connection's run of segments in this pass.
        let mut run = HeaderRun::default();
        // The last segment, while the pass's segments come from the full-record path: the
        // next one is asked of `poll_full_again` first (its checks made once a run).
        let mut full: Option<TcpRepr<'static>> = None;
        match mac {
            Some(mac) => loop {
                // A slot before knowing whether there is anything to send: a refused one puts
                // the connection back on the dirty list even if it had nothing, and that
                // (its next pass, the ACK it then does not defer, `poll_at`) is on the wire.
                let Some(tx) = self.device.transmit(now) else {
                    // Back-pressure: the segments stay with the connection for the next poll.
                    i.stats.tx_blocked += 1;
                    if !s.dirty {
                        s.dirty = true;
                        i.dirty.push(index);
                    }
                    break;
                };
                let id = ConnId {
                    index,
                    generation: s.generation,
                    stack: i.tag,
                };
                // Each answer built where it is kept and borrowed there, never moved into a
                // binding of its own: `poll_full_again`'s answer moved so cost a 152-octet
                // `memcpy` call a segment.
                let again = match &full {
                    Some(prev) => s.conn.full_again_ready().map(|next| (prev, next)),
                    None => None,
                };
                let polled = match again {
                    Some((prev, next)) => Some(s.conn.take_full_again(now, prev, next)),
                    None => s.conn.poll_segment(now),
                };
                let Some(out) = polled.as_ref() else {
                    break;
                };
                if out.is_full_record() {
                    match &mut full {
                        Some(prev) => prev.seq_number = out.repr.seq_number,
                        None => full = Some(out.repr),
                    }
                } else {
                    full = None;
                }
                let (hl, fourth) =
                    headers::tcp_header_len_sack(&out.repr, || out.fourth_sack_block());
                let tcp_len = hl + out.payload_len();
                let src = i.cidr.address();
                let dst = s.tuple.remote_ip;
                let (our_mac, caps) = (i.mac, &i.caps);
                let run = &mut run;
                let written = tx.consume(ETH_HDR + IP_HDR + tcp_len, |buf| {
                    let addrs = FrameAddrs {
                        src_mac: our_mac,
                        dst_mac: mac,
                        src,
                        dst,
                    };
                    emit_segment(buf, &addrs, out, fourth, caps, run, &mut |t, at, d, w| {
                        fill(id, t, at, d, w)
                    })
                });
                match written {
                    Ok(0) => {}
                    Ok(n) => s.conn.count_external_sent(n),
                    Err(()) => {
                        // The frame went out as an RST: the connection is gone.
                        i.stats.external_fill_failures += 1;
                        s.conn.abort();
                        break;
                    }
                }
                // Its last segment sent (a lone message's only one): no slot and no
                // `poll_segment` to learn that there is nothing more.
                if s.conn.nothing_to_send() {
                    break;
                }
            },
            None => {
                // Filed once, in constant time (RFC 4987 3.4: a SYN flood from sources the
                // neighbour table cannot glean leaves thousands here; a scan of the list
                // per filing made each wake-up of them quadratic).
                if s.waiting_at == NOT_WAITING {
                    s.waiting_at = i.unresolved.len() as u32;
                    i.unresolved.push(index);
                    // No request held back: the look-up just made found the list of
                    // requests full (a flood of new next hops) and recorded none. It may
                    // ask again after the usual interval, not at every poll: `now` woke
                    // every such connection at each pass.
                    let retry = i
                        .neighbors
                        .retry_at(next_hop, now)
                        .unwrap_or(now + neighbor::RETRY);
                    i.unresolved_retry = Some(i.unresolved_retry.map_or(retry, |r| r.min(retry)));
                }
            }
        }
    }
}

/// Writes the frame of `out` into `buf` (sized exactly for it): in one pass (copy and
/// checksum) when the connection holds the payload in one piece, else piece by piece, the
/// external ones written by `fill` straight into the frame. Where the port does not compute
/// the TCP checksum, each piece is summed in the pass that writes it (the host's copy, the
/// owner's `fill`) and the sums are added at their offsets ([`csum::at_offset`]): no
/// octet of the payload is read again. Returns the external octets written; `Err` when
/// `fill` failed: the frame is then an RST for the segment's sequence number, padded with
/// zeros (IPv4's total length excludes the padding).
fn emit_segment(
    buf: &mut [u8],
    a: &FrameAddrs,
    out: &Outgoing<'_>,
    fourth: Option<(u32, u32)>,
    caps: &ChecksumCapabilities,
    run: &mut HeaderRun,
    fill: &mut ConnFill<'_>,
) -> Result<usize, ()> {
    if let Some(payload) = out.contiguous() {
        emit_tcp_in_run(buf, a, &out.repr, fourth, payload, caps, run);
        return Ok(0);
    }
    let n = out.payload_len();
    let hl = run.write(buf, a, &out.repr, fourth, n, caps.ipv4.tx());
    let tcp = &mut buf[ETH_HDR + IP_HDR..];
    let payload = &mut tcp[hl..hl + n];
    let want = caps.tcp.tx();
    let (mut at, mut external, mut ok, mut total) = (0usize, 0usize, true, 0u64);
    // An external piece written by the owner's `fill` into `d`: its sum, or `None`.
    let mut fill_piece = |token, from, d: &mut [u8]| {
        let s = fill(token, from, d, want)?;
        debug_assert!(
            !want || csum::fold(s) == csum::fold(csum::sum(d)),
            "fill returned a sum that is not its octets'"
        );
        Some(s)
    };
    if let Some((token, from)) = out.single_external() {
        // A bulk sender's segment, one FPDU: the walk's one piece, given at once.
        match fill_piece(token, from, payload) {
            Some(s) => (total, at, external) = (s, n, n),
            None => ok = false,
        }
    } else {
        out.for_each_piece(|p| match p {
            _ if !ok => {}
            Piece::Octets(o) => {
                let d = &mut payload[at..at + o.len()];
                if want {
                    total += csum::at_offset(csum::copy_and_sum_to_fold(d, o), at);
                } else {
                    d.copy_from_slice(o);
                }
                at += o.len();
            }
            Piece::External {
                token,
                at: from,
                len,
            } => match fill_piece(token, from, &mut payload[at..at + len]) {
                Some(s) => {
                    total += csum::at_offset(s, at);
                    at += len;
                    external += len;
                }
                None => ok = false,
            },
        });
    }
    if !ok || at != n {
        let r = &out.repr;
        let rst = rst_segment(r.src_port, r.dst_port, r.seq_number, r.ack_number);
        let l = ETH_HDR + IP_HDR + rst.header_len();
        let (frame, pad) = buf.split_at_mut(l);
        emit_tcp(frame, a, &rst, None, rst.payload, caps);
        pad.fill(0);
        return Err(());
    }
    if want {
        // The header's octets at offset 0 (its length is a multiple of 4), the payload's
        // pieces summed as they were written.
        let c = run.tcp_checksum(a, &tcp[..hl], n, total);
        tcp[16..18].copy_from_slice(&c);
    }
    Ok(external)
}

/// A bare RST (window 0, no options, no payload).
fn rst_segment(
    src_port: u16,
    dst_port: u16,
    seq_number: TcpSeqNumber,
    ack_number: Option<TcpSeqNumber>,
) -> TcpRepr<'static> {
    TcpRepr {
        src_port,
        dst_port,
        control: TcpControl::Rst,
        seq_number,
        ack_number,
        window_len: 0,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload: &[],
    }
}

/// [`emit_tcp`] with the headers written through the pass's [`HeaderRun`].
#[inline]
fn emit_tcp_in_run(
    buf: &mut [u8],
    a: &FrameAddrs,
    seg: &TcpRepr<'_>,
    fourth: Option<(u32, u32)>,
    payload: &[u8],
    caps: &ChecksumCapabilities,
    run: &mut HeaderRun,
) {
    let n = payload.len();
    let hl = run.write(buf, a, seg, fourth, n, caps.ipv4.tx());
    let bytes = &mut buf[ETH_HDR + IP_HDR..];
    let payload_sum = csum::copy_and_sum_to_fold(&mut bytes[hl..hl + n], payload);
    if caps.tcp.tx() {
        let c = run.tcp_checksum(a, &bytes[..hl], n, payload_sum);
        bytes[16..18].copy_from_slice(&c);
    }
}

/// Writes an Ethernet/IPv4/TCP frame of the segment `seg` carrying `payload` (not
/// `seg.payload`: a caller with the payload apart need not build a copy of the segment
/// around it) into `buf` (sized exactly for it): the headers
/// ([`headers::write_headers`], `fourth` a fourth SACK block after the segment's three),
/// the payload copied with its sum taken in the same pass, and the TCP checksum filled in
/// when the port does not compute it (module `csum`: one pass over the payload).
#[inline]
fn emit_tcp(
    buf: &mut [u8],
    a: &FrameAddrs,
    seg: &TcpRepr<'_>,
    fourth: Option<(u32, u32)>,
    payload: &[u8],
    caps: &ChecksumCapabilities,
) {
    let n = payload.len();
    let hl = headers::write_headers(buf, a, seg, fourth, n, caps.ipv4.tx());
    let bytes = &mut buf[ETH_HDR + IP_HDR..];
    let payload_sum = csum::copy_and_sum_to_fold(&mut bytes[hl..hl + n], payload);
    if caps.tcp.tx() {
        let c = headers::tcp_checksum(a, &bytes[..hl], n, payload_sum);
        bytes[16..18].copy_from_slice(&c);
    }
}

/// [`Inner::user_slot_mut`] over the slots alone, so that a caller may hold the slot and
/// another field of `Inner` (the dirty list) at once.
#[inline]
fn user_slot_in(slots: &mut [Option<Slot>], tag: u32, id: ConnId) -> Result<&mut Slot, StackError> {
    if id.stack != tag {
        return Err(StackError::UnknownConnection);
    }
    match slots.get_mut(id.index as usize) {
        Some(Some(s))
            if s.generation == id.generation
                && !matches!(s.role, Role::HalfOpen(_) | Role::Orphan) =>
        {
            Ok(s)
        }
        _ => Err(StackError::UnknownConnection),
    }
}

/// Queues connection `index` (its slot `s`) for the next transmit pass, once.
#[inline]
fn mark_slot_dirty(s: &mut Slot, dirty: &mut Vec<u32>, index: u32) {
    // Touched: the next pass takes its events and timer again.
    s.held = false;
    if !s.dirty {
        s.dirty = true;
        dirty.push(index);
    }
}

impl Inner {
    /// Whether a transmit pass now would only defer ACKs of data just placed; if so, the
    /// deferral is taken as done, and true is returned (the caller skips the pass). That is
    /// the case with no control frame, no connection waiting for ARP, no timer due, and
    /// every connection marked having received data this poll, with nothing to send (no
    /// data, no ACK owed at once, no probe), nothing queued for the reader and no event
    /// pending but Writable, and no record sent from memory newly acknowledged. Their
    /// events (Writable) and timers are then taken by the next pass, which they stay
    /// marked for, as the deferring pass would have left them (`held` aside); `poll_at`
    /// says now. If the next poll comes later than the ACK's delay, its pass arms the
    /// deadline already passed and the ACK leaves with the poll after it (the deferring
    /// pass had armed it in time): one immediate poll more, after a stall.
    #[inline(never)]
    fn skip_deferring_pass(&mut self, now: Instant) -> bool {
        let skip = self.control.is_empty()
            && self.unresolved.is_empty()
            && self.resolving.is_empty()
            && !self.wheel.may_have_due(now)
            && self.dirty.iter().all(|&index| {
                matches!(
                    self.slots.get(index as usize),
                    Some(Some(s)) if s.defer_ack && s.conn.quiet_after_placed_data()
                )
            });
        if skip {
            for &index in &self.dirty {
                if let Some(Some(s)) = self.slots.get_mut(index as usize) {
                    s.defer_ack = false;
                }
            }
        }
        skip
    }

    /// Whether `ip` may be a packet's source: [`wire_unicast`] on our subnet.
    fn unicast_source(&self, ip: Ipv4Address) -> bool {
        wire_unicast(ip, &self.cidr)
    }

    /// The next hop towards `ip`: itself on our prefix, else the most specific route, else the
    /// gateway.
    fn route(&self, ip: Ipv4Address) -> Option<Ipv4Address> {
        if self.cidr.contains_addr(&ip) {
            return Some(ip);
        }
        self.routes
            .iter()
            .filter(|(c, _)| c.contains_addr(&ip))
            .max_by_key(|(c, _)| c.prefix_len())
            .map(|(_, via)| *via)
            .or(self.gateway)
    }

    /// A local port for a connection to `(ip, port)`: the first candidate of RFC 6056
    /// 3.3.3's sequence for that destination whose 4-tuple is free (TIME-WAIT included) and
    /// that no listener holds; every port of the range is tried once before giving up.
    fn ephemeral_port(&mut self, ip: Ipv4Address, port: u16) -> Result<u16, StackError> {
        let count = u32::from(u16::MAX - EPHEMERAL_FIRST) + 1;
        let (demux, ports) = (&self.demux, &self.ports);
        self.ports_gen
            .candidates((ip, port), EPHEMERAL_FIRST, count)
            .find(|&p| {
                let t = Tuple {
                    local_port: p,
                    remote_ip: ip,
                    remote_port: port,
                };
                !demux.contains_key(&t) && !ports.contains_key(&p)
            })
            .ok_or(StackError::PortInUse(0))
    }

    fn insert(
        &mut self,
        mut conn: Connection,
        tuple: Tuple,
        next_hop: Ipv4Address,
        role: Role,
    ) -> ConnId {
        let index = loop {
            match self.free.pop() {
                // A slot that served every generation is retired, never reused: its next
                // generation would wrap to 0 and a handle of 2^32 uses before would name
                // the new connection (handles are "rejected, never aliased"). One slot
                // per 2^32 connections made in it.
                Some(i) if self.generations[i as usize] == u32::MAX => {}
                Some(i) => {
                    self.generations[i as usize] += 1;
                    break i;
                }
                None => {
                    self.slots.push(None);
                    self.generations.push(0);
                    break (self.slots.len() - 1) as u32;
                }
            }
        };
        // Every connection of the table counts what it holds out of order against the
        // host's budget (and gives it back when it lets it go, or is dropped), keyed by its
        // slot among the budget's holders (the slot's last connection was dropped when it
        // was freed, its key with it).
        conn.set_out_of_order_budget(Arc::clone(&self.ooo_budget), index);
        let generation = self.generations[index as usize];
        self.slots[index as usize] = Some(Slot {
            conn,
            generation,
            tuple,
            next_hop,
            role,
            dirty: false,
            defer_ack: false,
            held: false,
            armed: None,
            hop_pending: false,
            hop_since: Instant::ZERO,
            waiting_at: NOT_WAITING,
        });
        self.demux.insert(tuple, index);
        self.demux_memo = None;
        self.neighbors.hold(next_hop);
        self.live += 1;
        self.mark_dirty(index);
        ConnId {
            index,
            generation,
            stack: self.tag,
        }
    }

    fn remove(&mut self, index: u32) {
        if let Some(s) = self.slots.get_mut(index as usize).and_then(Option::take) {
            self.removed_totals.add(&s.conn.stats());
            if let Role::HalfOpen(l) = s.role {
                if let Some(li) = self.listeners.get_mut(l.0 as usize) {
                    li.half_open_live -= 1;
                }
            }
            if s.role == Role::Orphan {
                self.orphans_live -= 1;
            }
            if self.demux.get(&s.tuple) == Some(&index) {
                self.demux.remove(&s.tuple);
                self.demux_memo = None;
            }
            self.neighbors.release(s.next_hop);
            self.live -= 1;
            self.free.push(index);
            // Its timer goes with it: a SYN flood evicts half-open connections by the
            // thousand, each with a SYN-ACK retransmission armed a second ahead.
            if let Some(at) = s.armed {
                self.wheel.remove(Entry {
                    at,
                    index,
                    generation: s.generation,
                });
            }
            if s.dirty {
                self.dirty.retain(|d| *d != index);
            }
            self.unfile_unresolved(s.waiting_at);
        }
    }

    /// Takes a released connection out of the user's table, the host finishing it (TIME-WAIT,
    /// or a RST still owed): the oldest orphans beyond `max_connections` go first.
    fn adopt_orphan(&mut self, id: ConnId) {
        let Some(Some(s)) = self.slots.get_mut(id.index as usize) else {
            return;
        };
        s.role = Role::Orphan;
        self.orphans_live += 1;
        self.orphans.push_back(id);
        while self.orphans_live > self.max_connections {
            let Some(old) = self.orphans.pop_front() else {
                break;
            };
            if matches!(self.slot(old), Some(s) if s.role == Role::Orphan) {
                self.remove(old.index);
            }
        }
        if self.orphans.len() > 2 * self.orphans_live + 64 {
            let mut q = std::mem::take(&mut self.orphans);
            q.retain(|&o| matches!(self.slot(o), Some(s) if s.role == Role::Orphan));
            self.orphans = q;
        }
    }

    fn slot(&self, id: ConnId) -> Option<&Slot> {
        match self.slots.get(id.index as usize) {
            Some(Some(s)) if s.generation == id.generation && id.stack == self.tag => Some(s),
            _ => None,
        }
    }

    fn user_slot(&self, id: ConnId) -> Result<&Slot, StackError> {
        match self.slot(id) {
            Some(s) if !matches!(s.role, Role::HalfOpen(_) | Role::Orphan) => Ok(s),
            _ => Err(StackError::UnknownConnection),
        }
    }

    fn user_slot_mut(&mut self, id: ConnId) -> Result<&mut Slot, StackError> {
        user_slot_in(&mut self.slots, self.tag, id)
    }

    #[inline]
    fn mark_dirty(&mut self, index: u32) {
        if let Some(Some(s)) = self.slots.get_mut(index as usize) {
            mark_slot_dirty(s, &mut self.dirty, index);
        }
    }

    /// Takes a connection's events, re-arms its timer, frees it if it ended unseen.
    fn after_activity(&mut self, index: u32) {
        let Some(Some(s)) = self.slots.get_mut(index as usize) else {
            return;
        };
        let id = ConnId {
            index,
            generation: s.generation,
            stack: self.tag,
        };
        let mut drop_it = false;
        while let Some(ev) = s.conn.poll_event() {
            match (s.role, ev) {
                (Role::Active, ConnEvent::Connected) => self.events.push_back(Event::Connected(id)),
                (Role::HalfOpen(l), ConnEvent::Connected) => {
                    s.role = Role::Passive;
                    if let Some(li) = self.listeners.get_mut(l.0 as usize) {
                        li.half_open_live -= 1;
                        li.ready.push_back(id);
                        self.events.push_back(Event::Acceptable(l));
                    }
                }
                (Role::HalfOpen(_), ConnEvent::Closed | ConnEvent::Reset | ConnEvent::TimedOut) => {
                    drop_it = true
                }
                (Role::HalfOpen(_), _) | (Role::Orphan, _) => {}
                (_, ConnEvent::Connected) => {}
                (_, ConnEvent::Readable) => self.events.push_back(Event::Readable(id)),
                (_, ConnEvent::Writable) => self.events.push_back(Event::Writable(id)),
                (_, ConnEvent::PeerClosed) => self.events.push_back(Event::PeerClosed(id)),
                (_, ConnEvent::Closed) => self.events.push_back(Event::Closed(id)),
                (_, ConnEvent::Reset) => self.events.push_back(Event::Reset(id)),
                // Given up while its next hop never answered ARP: the hop's failure, not
                // the peer's silence (the engine reports it as the host unreachable).
                (_, ConnEvent::TimedOut) if s.hop_pending => {
                    self.events.push_back(Event::NeighborUnreachable(id))
                }
                (_, ConnEvent::TimedOut) => self.events.push_back(Event::TimedOut(id)),
            }
        }
        if drop_it || (matches!(s.role, Role::HalfOpen(_) | Role::Orphan) && s.conn.is_finished()) {
            self.remove(index);
            return;
        }
        let next = s.conn.poll_timeout();
        if next.is_some_and(|n| s.armed.is_some_and(|a| a <= n)) {
            // An armed earlier deadline fires first and re-arms then: a deadline that moves
            // later (the RTO at each ACK) costs no wheel operation.
            return;
        }
        // A later deadline (or none) no longer wanted: its node goes now, so the wheel
        // holds one entry per connection whose timer is armed.
        if let Some(a) = s.armed.take() {
            self.wheel.remove(Entry {
                at: a,
                index,
                generation: s.generation,
            });
        }
        if let Some(n) = next {
            s.armed = Some(n);
            self.wheel.insert(Entry {
                at: n,
                index,
                generation: s.generation,
            });
        }
    }

    /// Fires the timers due (the caller checked [`Wheel::may_have_due`]).
    #[inline(never)]
    fn run_timers(&mut self, now: Instant) -> bool {
        let mut due = std::mem::take(&mut self.due);
        self.wheel.expire(now, &mut due);
        let mut work = false;
        for e in due.drain(..) {
            let Some(Some(s)) = self.slots.get_mut(e.index as usize) else {
                continue;
            };
            if s.generation != e.generation || s.armed != Some(e.at) {
                continue;
            }
            s.armed = None;
            self.stats.timers_fired += 1;
            let before = s.conn.rto_backoffs();
            s.conn.handle_timeout(now);
            let after = s.conn.rto_backoffs();
            let next_hop = s.next_hop;
            work = true;
            self.mark_dirty(e.index);
            // RFC 1122 4.2.3.5 (b), 2.3.2.1 (4): retransmissions past R1 are negative advice
            // to the link layer: the next hop's entry is checked by a new ARP request while
            // it stays in use, so a peer that came back at another hardware address (a
            // restart on another NIC) is reached again once it answers. The entry used to
            // live its whole 60 s since the last ARP frame, longer than the user timeout
            // (30 s): every retransmission went to the old address and the connection
            // timed out instead of drawing the restarted peer's RST.
            if after > before
                && after >= NEGATIVE_ADVICE_RTOS
                && self.neighbors.advise(next_hop, now)
            {
                self.arp_request(next_hop);
            }
        }
        self.due = due;
        work
    }

    /// Queues a control frame; false when the queue was full and it was dropped (counted).
    fn queue_control(&mut self, frame: Vec<u8>) -> bool {
        if self.control.len() >= CONTROL_MAX {
            self.stats.control_dropped += 1;
            return false;
        }
        self.control.push_back(frame);
        true
    }

    /// When a connection waiting for ARP may ask again: the earliest retry among the next
    /// hops the waiting connections need, as each was filed (one whose request the full
    /// list of requests did not record, the retry interval after its filing). The retries
    /// of addresses nobody waits for any more (a connection released while unresolved) are
    /// no deadline: they would name an instant long past at every call.
    fn arp_retry_at(&self, now: Instant) -> Option<Instant> {
        // The bound taken as the connections were filed, not a look-up of each one's next
        // hop at every poll (thousands under a SYN flood the table could not glean). A
        // connection that left early only makes the bound early: the pass it wakes
        // re-files those still waiting with their own retries.
        if self.unresolved.is_empty() {
            return None;
        }
        Some(self.unresolved_retry.unwrap_or(now))
    }

    /// Marks every connection waiting for ARP dirty (its transmit pass looks its next hop
    /// up again, and files it again if still unknown).
    fn wake_unresolved(&mut self) {
        let waiting = std::mem::take(&mut self.unresolved);
        self.unresolved_retry = None;
        for &index in &waiting {
            if let Some(Some(s)) = self.slots.get_mut(index as usize) {
                s.waiting_at = NOT_WAITING;
            }
            self.mark_dirty(index);
        }
        // Keep the allocation.
        let mut waiting = waiting;
        waiting.clear();
        if self.unresolved.is_empty() {
            self.unresolved = waiting;
        }
    }

    /// Takes the connection filed at `at` in `unresolved` (if any) out of it, in constant
    /// time: the last one takes its place.
    fn unfile_unresolved(&mut self, at: u32) {
        if at == NOT_WAITING || at as usize >= self.unresolved.len() {
            return;
        }
        self.unresolved.swap_remove(at as usize);
        if let Some(&moved) = self.unresolved.get(at as usize) {
            if let Some(Some(s)) = self.slots.get_mut(moved as usize) {
                s.waiting_at = at;
            }
        }
        if self.unresolved.is_empty() {
            self.unresolved_retry = None;
        }
    }

    /// When a pending resolution next needs the poll: its deadline or its next retry.
    fn resolve_due_at(&self, now: Instant) -> Option<Instant> {
        self.resolving
            .iter()
            .map(|r| {
                // The table's retry (none while its full list kept no record) and the
                // resolution's own, whichever is later: a request goes out at neither
                // before.
                let retry = self
                    .neighbors
                    .retry_at(r.next_hop, now)
                    .unwrap_or(r.next_ask)
                    .max(r.next_ask);
                retry.max(now).min(r.deadline)
            })
            .min()
    }

    /// Answers the pending resolutions whose next hop is known now (resolved) or whose
    /// deadline has passed (failed), and repeats the ARP request of the others when the
    /// neighbour table allows one. Whether anything happened.
    fn run_resolutions(&mut self, now: Instant) -> bool {
        let mut work = false;
        let mut k = 0;
        while k < self.resolving.len() {
            let r = self.resolving[k];
            let outcome = match self.neighbors.lookup(r.next_hop, now) {
                Lookup::Found(_) => Some(Event::NeighborResolved(r.id)),
                Lookup::FoundRefresh(_) => {
                    self.arp_request(r.next_hop);
                    Some(Event::NeighborResolved(r.id))
                }
                _ if r.deadline <= now => Some(Event::NeighborFailed(r.id)),
                // RFC 1122 2.3.2.1: once per retry interval, also when the table's full
                // list of requests recorded none.
                Lookup::Request if now >= r.next_ask => {
                    self.arp_request(r.next_hop);
                    self.resolving[k].next_ask = now + neighbor::RETRY;
                    work = true;
                    None
                }
                // A failed round is no failure of the resolution: its own timeout ends it,
                // and a new round begins after the pause.
                Lookup::Request | Lookup::Wait | Lookup::Failed => None,
            };
            match outcome {
                Some(e) => {
                    self.events.push_back(e);
                    self.resolving.swap_remove(k);
                    work = true;
                }
                None => k += 1,
            }
        }
        work
    }

    fn arp_request(&mut self, target: Ipv4Address) {
        let repr = ArpRepr::EthernetIpv4 {
            operation: ArpOperation::Request,
            source_hardware_addr: self.mac,
            source_protocol_addr: self.cidr.address(),
            target_hardware_addr: EthernetAddress([0; 6]),
            target_protocol_addr: target,
        };
        self.queue_arp(repr, EthernetAddress::BROADCAST);
    }

    fn queue_arp(&mut self, repr: ArpRepr, dst: EthernetAddress) {
        let mut f = vec![0u8; ETH_HDR + repr.buffer_len()];
        let mut eth = EthernetFrame::new_unchecked(&mut f[..]);
        EthernetRepr {
            src_addr: self.mac,
            dst_addr: dst,
            ethertype: EthernetProtocol::Arp,
        }
        .emit(&mut eth);
        repr.emit(&mut ArpPacket::new_unchecked(eth.payload_mut()));
        self.queue_control(f);
    }

    #[inline(never)]
    fn process_frame(&mut self, frame: &[u8], deliver: &mut Deliver<'_>) {
        // Header prediction: a segment of the connection the last one went to, in the
        // layout of its data and ACKs, goes straight to it.
        if let Some((t, index)) = self.demux_memo {
            let seg = headers::predict(
                frame,
                self.mac,
                (t.remote_ip, t.remote_port),
                (self.cidr.address(), t.local_port),
                (&self.caps, self.bulk_sum, self.payload_digest),
            );
            if let Some((seg, digest)) = seg {
                if self.hand_to_slot(index, &seg, None, digest, deliver) {
                    self.stats.rx_predicted += 1;
                    return;
                }
            }
        }
        let Ok(eth) = EthernetFrame::new_checked(frame) else {
            self.stats.rx_dropped += 1;
            return;
        };
        let dst = eth.dst_addr();
        if dst != self.mac && !dst.is_broadcast() {
            self.stats.rx_dropped += 1;
            return;
        }
        match eth.ethertype() {
            EthernetProtocol::Arp => self.process_arp(eth.payload()),
            EthernetProtocol::Ipv4 if dst == self.mac => {
                self.process_ipv4(eth.src_addr(), eth.payload(), deliver)
            }
            _ => self.stats.rx_dropped += 1,
        }
    }

    fn process_arp(&mut self, payload: &[u8]) {
        let Some(repr) = ArpPacket::new_checked(payload)
            .ok()
            .and_then(|p| ArpRepr::parse(&p).ok())
        else {
            self.stats.rx_dropped += 1;
            return;
        };
        let ArpRepr::EthernetIpv4 {
            operation,
            source_hardware_addr,
            source_protocol_addr,
            target_protocol_addr,
            ..
        } = repr
        else {
            return;
        };
        let now = self.now;
        let for_us = target_protocol_addr == self.cidr.address();
        let known_before = self.neighbors.knows(source_protocol_addr, now);
        // RFC 826: merge the sender if known; add it if the packet is for us.
        let resolved = if for_us && self.cidr.contains_addr(&source_protocol_addr) {
            self.neighbors
                .fill(source_protocol_addr, source_hardware_addr, now)
        } else {
            self.neighbors
                .refresh(source_protocol_addr, source_hardware_addr, now)
        };
        // Only an address learnt (asked for, or newly known) can end a connection's wait:
        // any other ARP frame on the LAN woke every waiting connection, thousands under a
        // SYN flood from sources the table could not glean (RFC 4987 3.4), per frame.
        let learned = !known_before && self.neighbors.knows(source_protocol_addr, now);
        if (resolved || learned) && !self.unresolved.is_empty() {
            self.wake_unresolved();
        }
        if for_us && operation == ArpOperation::Request && source_hardware_addr.is_unicast() {
            let reply = ArpRepr::EthernetIpv4 {
                operation: ArpOperation::Reply,
                source_hardware_addr: self.mac,
                source_protocol_addr: self.cidr.address(),
                target_hardware_addr: source_hardware_addr,
                target_protocol_addr: source_protocol_addr,
            };
            self.queue_arp(reply, source_hardware_addr);
        }
    }

    fn process_ipv4(
        &mut self,
        src_mac: EthernetAddress,
        payload: &[u8],
        deliver: &mut Deliver<'_>,
    ) {
        let Ok(p) = Ipv4Packet::new_checked(payload) else {
            self.stats.rx_dropped += 1;
            return;
        };
        if p.more_frags() || p.frag_offset() != 0 {
            self.stats.rx_fragments += 1;
            return;
        }
        let Ok(ip) = headers::parse_ipv4(&p, &self.caps) else {
            self.stats.rx_dropped += 1;
            return;
        };
        // RFC 1122 3.2.1.3: a source no datagram may come from (unspecified, a broadcast,
        // multicast) is discarded silently, before any protocol answers it (a stray TCP
        // segment's RST, RFC 9293 3.10.7.1, would be addressed to it). So is our own
        // address, which no peer has (a martian, as Linux's `ip_route_input_slow` drops
        // it): a SYN from it to a listening port from that port made a half-open
        // connection with itself (the "land" attack).
        let src = ip.src_addr;
        if ip.dst_addr != self.cidr.address() || !self.unicast_source(src) || src == ip.dst_addr {
            self.stats.rx_dropped += 1;
            return;
        }
        match ip.next_header {
            IpProtocol::Tcp => {
                self.process_tcp(src_mac, &ip, headers::ipv4_payload(payload), deliver)
            }
            IpProtocol::Icmp => self.process_icmp(src_mac, &ip, headers::ipv4_payload(payload)),
            _ => self.stats.rx_dropped += 1,
        }
    }

    fn process_icmp(&mut self, src_mac: EthernetAddress, ip: &Ipv4Repr, payload: &[u8]) {
        // A reply goes to the request's sender alone: never to a broadcast or multicast
        // source (as `reset_for`'s RSTs).
        if !src_mac.is_unicast() || !self.unicast_source(ip.src_addr) {
            self.stats.rx_dropped += 1;
            return;
        }
        // Destination Unreachable, protocol or port (RFC 792 type 3, codes 2 and 3): the
        // hard errors of RFC 1122 4.2.3.9. Read here, not by smoltcp's parse, which takes
        // only a quoted datagram whose total length it holds whole (RFC 792 quotes its
        // header and 8 octets).
        if let [3, 2 | 3, ..] = *payload {
            self.process_icmp_hard_error(payload);
            return;
        }
        let Some(Icmpv4Repr::EchoRequest {
            ident,
            seq_no,
            data,
        }) = Icmpv4Packet::new_checked(payload)
            .ok()
            .and_then(|p| Icmpv4Repr::parse(&p, &self.caps).ok())
        else {
            return;
        };
        let reply = Icmpv4Repr::EchoReply {
            ident,
            seq_no,
            data,
        };
        let ipr = Ipv4Repr {
            src_addr: self.cidr.address(),
            dst_addr: ip.src_addr,
            next_header: IpProtocol::Icmp,
            payload_len: reply.buffer_len(),
            hop_limit: 64,
        };
        let mut f = vec![0u8; ETH_HDR + IP_HDR + reply.buffer_len()];
        let mut eth = EthernetFrame::new_unchecked(&mut f[..]);
        EthernetRepr {
            src_addr: self.mac,
            dst_addr: src_mac,
            ethertype: EthernetProtocol::Ipv4,
        }
        .emit(&mut eth);
        let mut ipp = Ipv4Packet::new_unchecked(eth.payload_mut());
        ipr.emit(&mut ipp, &self.caps);
        reply.emit(
            &mut Icmpv4Packet::new_unchecked(ipp.payload_mut()),
            &self.caps,
        );
        self.queue_control(f);
    }

    /// RFC 1122 4.2.3.9: an ICMP Destination Unreachable, protocol or port (`icmp`, the
    /// whole message), about a TCP segment we sent goes to the connection that sent it
    /// ([`Connection::icmp_hard_error`]): a connection still in SYN-SENT is refused, as
    /// by a RST, instead of sending its SYN again until its user timeout (a port a
    /// firewall rejects with ICMP, `iptables -j REJECT`'s default). The quoted datagram
    /// must be ours (our address its source, TCP) and name a connection by its ports and
    /// a sequence number it has in flight (RFC 5927 4.1, checked by the connection).
    fn process_icmp_hard_error(&mut self, icmp: &[u8]) {
        // The message's checksum (RFC 792) where the port did not verify it.
        if self.caps.icmpv4.rx() && !csum::verifies(csum::sum_to_fold(icmp)) {
            self.stats.rx_dropped += 1;
            return;
        }
        // After the ICMP header's 8 octets: the datagram's IPv4 header and at least the
        // first 8 octets of its data (RFC 792): the TCP ports and sequence number.
        let inner = icmp.get(8..).unwrap_or(&[]);
        let Some(&v) = inner.first() else {
            return;
        };
        let ihl = usize::from(v & 0x0f) * 4;
        if v >> 4 != 4 || ihl < IP_HDR || inner.len() < ihl + 8 || inner[9] != 6 {
            return;
        }
        let octets = |at: usize| [inner[at], inner[at + 1], inner[at + 2], inner[at + 3]];
        if Ipv4Address::from(octets(12)) != self.cidr.address() {
            return;
        }
        let tcp = &inner[ihl..ihl + 8];
        let tuple = Tuple {
            local_port: u16::from_be_bytes([tcp[0], tcp[1]]),
            remote_ip: Ipv4Address::from(octets(16)),
            remote_port: u16::from_be_bytes([tcp[2], tcp[3]]),
        };
        let seq = TcpSeqNumber(i32::from_be_bytes([tcp[4], tcp[5], tcp[6], tcp[7]]));
        let Some(&index) = self.demux.get(&tuple) else {
            return;
        };
        if let Some(Some(s)) = self.slots.get_mut(index as usize) {
            if s.conn.icmp_hard_error(seq) {
                mark_slot_dirty(s, &mut self.dirty, index);
            }
        }
    }

    fn process_tcp(
        &mut self,
        src_mac: EthernetAddress,
        ip: &Ipv4Repr,
        payload: &[u8],
        deliver: &mut Deliver<'_>,
    ) {
        let Ok(p) = TcpPacket::new_checked(payload) else {
            self.stats.rx_dropped += 1;
            return;
        };
        let (src, dst) = (IpAddress::Ipv4(ip.src_addr), IpAddress::Ipv4(ip.dst_addr));
        // The checksum where the port did not verify it (RFC 9293 3.1), at bulk speed
        // (module `csum`); the header is then parsed without verifying again.
        if self.caps.tcp.rx() {
            let total = csum::pseudo_header(ip.src_addr, ip.dst_addr, payload.len() as u16)
                + csum::sum_to_fold_with(payload, self.bulk_sum);
            if !csum::verifies(total) {
                self.stats.rx_dropped += 1;
                return;
            }
        }
        let Ok(mut seg) = headers::parse_tcp(p.into_inner(), &src, &dst, &self.caps_no_tcp) else {
            self.stats.rx_dropped += 1;
            return;
        };
        if seg.window_scale == Some(14) {
            // smoltcp's parser gives 14 for any shift above it (RFC 7323 2.3): the
            // connection wants the shift as sent, to count and log it.
            if let Some(ws) = headers::window_scale_as_sent(payload) {
                seg.window_scale = Some(ws);
            }
        }
        // A fourth SACK block beside the three smoltcp's parser kept (RFC 2018 3).
        let fourth = if seg.sack_ranges[2].is_some() {
            headers::fourth_sack_block(payload)
        } else {
            None
        };
        let tuple = Tuple {
            local_port: seg.dst_port,
            remote_ip: ip.src_addr,
            remote_port: seg.src_port,
        };
        let found = match self.demux_memo {
            Some((t, index)) if t == tuple => Some(index),
            _ => {
                let found = self.demux.get(&tuple).copied();
                self.demux_memo = found.map(|index| (tuple, index));
                found
            }
        };
        let mut iss_floor = None;
        if let Some(index) = found {
            // RFC 6191 2 (RFC 9293 3.6.1, RFC 1122 4.2.2.13): a SYN that may reopen a
            // connection we hold in TIME-WAIT (a client back from the same port) goes to
            // the listener, the TIME-WAIT TCB dropped, instead of drawing a challenge ACK
            // whose RST from the client ended TIME-WAIT and left its SYN to its RTO (~1 s).
            // A SYN first: every other segment of a connection passes with one comparison,
            // not a look-up of the listeners.
            if seg.control == TcpControl::Syn && self.ports.contains_key(&seg.dst_port) {
                iss_floor = self.end_time_wait_for(index, &seg);
            }
            if self.hand_to_slot(index, &seg, fourth, None, deliver) {
                return;
            }
        }
        if let Some(&l) = self.ports.get(&seg.dst_port) {
            match (seg.control, seg.ack_number) {
                (TcpControl::Syn, None) => {
                    return self.on_syn(l, tuple, src_mac, ip, &seg, iss_floor)
                }
                // RFC 9293 3.10.7.2: in LISTEN a RST is ignored, an ACK draws a RST, anything
                // else is dropped.
                (TcpControl::Rst, _) => return,
                (_, None) => return,
                (_, Some(_)) => {}
            }
        }
        self.stats.rx_no_connection += 1;
        self.reset_for(src_mac, ip, &seg);
    }

    /// Hands `seg` to the connection in slot `index` and marks it; false if the slot is
    /// empty or its connection closed. `digest`, the payload's
    /// ([`Host::set_payload_digest`]), goes to a delivery of the whole payload only.
    #[inline(always)]
    fn hand_to_slot(
        &mut self,
        index: u32,
        seg: &TcpRepr<'_>,
        fourth: Option<(u32, u32)>,
        digest: Option<u32>,
        deliver: &mut Deliver<'_>,
    ) -> bool {
        let Some(Some(s)) = self.slots.get_mut(index as usize) else {
            return false;
        };
        // A closed connection has no TCB (RFC 9293 3.10.7.1) though its user still holds
        // the handle: the segment goes on as for no connection, a SYN to the listener (a
        // peer back from the same port; the new connection takes the 4-tuple over, and the
        // old one's removal leaves it) and anything else to a RST. Handed to the closed
        // connection, it was dropped unanswered until the user released the handle.
        if s.conn.state() == State::Closed {
            return false;
        }
        let id = ConnId {
            index,
            generation: s.generation,
            stack: self.tag,
        };
        let mut deliver_conn = |data: &[u8]| {
            // The same octets as the segment's payload, not a part or a copy of them.
            let whole = std::ptr::eq(data, seg.payload);
            deliver(id, data, digest.filter(|_| whole))
        };
        match fourth {
            None => s.conn.handle_segment_with(self.now, seg, &mut deliver_conn),
            Some(_) => {
                s.conn
                    .handle_segment_with_fourth_sack(self.now, seg, fourth, &mut deliver_conn)
            }
        }
        // Deferred once only: a connection already waiting in the dirty list (its ACK
        // deferred by the last poll, or segments of its own pending) sends this poll.
        // Deferring again at every poll that brought data held a bulk receiver's ACKs back
        // for as long as data kept coming (one ACK per ~160 segments over memif), and the
        // sender waited on window updates.
        if !seg.payload.is_empty() && !s.dirty {
            s.defer_ack = true;
        }
        // The budget's refusals are among the segments that owe a quick ACK (out of
        // order), so the in-order path does not ask for them.
        let mut refused = None;
        if s.conn.quick_ack_owed() {
            self.quick_ack = Some(index);
            refused = s.conn.take_refused_out_of_order();
        }
        mark_slot_dirty(s, &mut self.dirty, index);
        if let Some(r) = refused {
            self.renege_for(index, seg, r);
        }
        true
    }

    /// The host's out-of-order budget refused `r`, octets of `seg`, for the connection in
    /// slot `index`. If that connection, holding them, would
    /// hold no more than its share of the budget (the limit over the connections holding
    /// octets, itself included), and the largest other holder holds more, that holder
    /// gives up octets (its highest first, down to its share and at least as many as `r`
    /// needs: `Reassembly::renege`; RFC 2018 8 lets a receiver discard what it SACKed) and
    /// `r` is held after all. So one peer that fills the budget and never fills its gaps
    /// (or a bulk connection after a loss at a large window) leaves the others their
    /// share, instead of every segment behind their losses being sent again for as long as
    /// its connections live. The holders' index gives the largest without a walk, so a
    /// flood of refused segments costs a lookup each.
    #[cold]
    #[inline(never)]
    fn renege_for(&mut self, index: u32, seg: &TcpRepr<'_>, r: RefusedOutOfOrder) {
        let Some(Some(s)) = self.slots.get(index as usize) else {
            return;
        };
        let mine = s.conn.out_of_order_octets();
        let (holders, largest) = self.ooo_budget.largest_other(index);
        let Some((theirs, victim)) = largest else {
            return;
        };
        // The connections that share the budget, this one counted whether or not it
        // holds octets yet.
        let sharing = holders + usize::from(mine == 0);
        let share = self.ooo_budget.limit() / sharing.max(1);
        if mine + r.len > share || theirs <= share {
            return;
        }
        let Some(Some(v)) = self.slots.get_mut(victim as usize) else {
            return;
        };
        if v.conn.renege_out_of_order(r.len.max(theirs - share)) < r.len {
            return;
        }
        if let Some(Some(s)) = self.slots.get_mut(index as usize) {
            if s.conn.store_refused_out_of_order(seg, r) {
                self.ooo_budget.forgive_refusal();
            }
        }
    }

    /// If the connection in slot `index` is in TIME-WAIT and `seg` a SYN that may reopen it
    /// ([`Connection::time_wait_reopens`]), ends it (CLOSED, removed at its next activity
    /// pass as after a RST there) and returns the floor of the new incarnation's ISS.
    #[cold]
    fn end_time_wait_for(&mut self, index: u32, seg: &TcpRepr<'_>) -> Option<TcpSeqNumber> {
        let Some(Some(s)) = self.slots.get_mut(index as usize) else {
            return None;
        };
        if seg.control != TcpControl::Syn || !s.conn.time_wait_reopens(seg) {
            return None;
        }
        let floor = s.conn.end_time_wait_for_reopen();
        mark_slot_dirty(s, &mut self.dirty, index);
        Some(floor)
    }

    /// A SYN for a listener: a new half-open connection, evicting the listener's oldest if
    /// its backlog is full. `iss_floor`: the ISS must lie above it (a SYN that ended a
    /// TIME-WAIT of this 4-tuple, RFC 1122 4.2.2.13 (a)).
    fn on_syn(
        &mut self,
        l: ListenerId,
        tuple: Tuple,
        src_mac: EthernetAddress,
        ip: &Ipv4Repr,
        syn: &TcpRepr<'_>,
        iss_floor: Option<TcpSeqNumber>,
    ) {
        // RFC 1122 4.2.3.10 and 3.2.1.3: a SYN from a broadcast or multicast source (IPv4,
        // or Ethernet) is discarded: no half-open connection, no SYN-ACK sent to many.
        if !src_mac.is_unicast() || !self.unicast_source(ip.src_addr) {
            self.stats.rx_dropped += 1;
            return;
        }
        let Some(next_hop) = self.route(ip.src_addr) else {
            self.stats.rx_dropped += 1;
            return;
        };
        // Glean the on-link peer's hardware address from its SYN: the SYN-ACK leaves without
        // waiting for an ARP round trip. Only for an address not known (a forged source
        // must not redirect a next hop in use) and never in place of another entry.
        // An address we were asking for (a connect of ours to this very peer waits for
        // it) releases the traffic held for it at once, as an ARP reply does in
        // `process_arp` (RFC 1122 2.3.2.2), not at its next retry.
        if next_hop == ip.src_addr
            && self.neighbors.glean(next_hop, src_mac, self.now)
            && !self.unresolved.is_empty()
        {
            self.wake_unresolved();
        }
        let (backlog, tuning) = {
            let li = &mut self.listeners[l.0 as usize];
            // Forget stale entries (completed or failed handshakes) from the front.
            (li.backlog, li.tuning)
        };
        self.prune_half_open(l);
        if self.listeners[l.0 as usize].half_open_live >= backlog {
            self.evict_oldest_half_open(l);
        }
        // A full table: this listener's oldest half-open connection makes room, else
        // another listener's (RFC 4987 3.4): a flood against one port filled the table with
        // its own half-open connections and refused every SYN for any other port.
        if self.live - self.orphans_live >= self.max_connections
            && !self.evict_oldest_half_open(l)
            && !self.evict_any_half_open()
        {
            self.stats.syn_dropped += 1;
            return;
        }
        let ep = Endpoints {
            local: (self.cidr.address(), tuple.local_port),
            remote: (tuple.remote_ip, tuple.remote_port),
        };
        let mut iss = self.isn.isn(self.now, ep.local, ep.remote);
        if let Some(floor) = iss_floor {
            // RFC 6191 2, RFC 1122 4.2.2.13 (a): above the last incarnation's sequence
            // numbers; the RFC 6528 ISN when it already is.
            if iss < floor {
                iss = floor;
            }
        }
        let mut conn = Connection::accept(&conn_config(&tuning, self.mss), ep, iss, syn, self.now);
        // RFC 7323 5.8, RFC 6191 2: a clock that never goes back across incarnations.
        conn.set_ts_offset(self.isn.ts_offset(ep.local, ep.remote));
        let id = self.insert(conn, tuple, next_hop, Role::HalfOpen(l));
        let li = &mut self.listeners[l.0 as usize];
        li.half_open.push_back(id);
        li.half_open_live += 1;
    }

    fn prune_half_open(&mut self, l: ListenerId) {
        // Entries of completed handshakes pile up behind a live one: sweep them all now and
        // then, so the queue stays within a small multiple of the live count.
        let li = &self.listeners[l.0 as usize];
        if li.half_open.len() > 2 * li.half_open_live + 64 {
            let mut q = std::mem::take(&mut self.listeners[l.0 as usize].half_open);
            q.retain(|&id| matches!(self.slot(id), Some(s) if s.role == Role::HalfOpen(l)));
            self.listeners[l.0 as usize].half_open = q;
        }
        loop {
            let Some(&front) = self.listeners[l.0 as usize].half_open.front() else {
                return;
            };
            if matches!(self.slot(front), Some(s) if s.role == Role::HalfOpen(l)) {
                return;
            }
            self.listeners[l.0 as usize].half_open.pop_front();
        }
    }

    /// Evicts the oldest half-open connection of the listener holding the most (for our
    /// own `connect`, or another listener's SYN, at a full table, RFC 4987 3.4); false if
    /// no listener holds one.
    fn evict_any_half_open(&mut self) -> bool {
        let Some(l) = self
            .listeners
            .iter()
            .enumerate()
            .filter(|(_, li)| li.half_open_live > 0)
            .max_by_key(|(_, li)| li.half_open_live)
            .map(|(k, li)| ListenerId(k as u32, li.generation, self.tag))
        else {
            return false;
        };
        self.evict_oldest_half_open(l)
    }

    fn evict_oldest_half_open(&mut self, l: ListenerId) -> bool {
        while let Some(id) = self.listeners[l.0 as usize].half_open.pop_front() {
            if matches!(self.slot(id), Some(s) if s.role == Role::HalfOpen(l)) {
                // Silently: a RST to a flood's forged source would only add to the flood.
                self.remove(id.index);
                self.stats.half_open_evicted += 1;
                return true;
            }
        }
        false
    }

    /// RFC 9293 3.10.7.1: a segment for no connection draws a RST (never for a RST).
    fn reset_for(&mut self, src_mac: EthernetAddress, ip: &Ipv4Repr, seg: &TcpRepr<'_>) {
        if seg.control == TcpControl::Rst {
            return;
        }
        let (seq, ack) = match seg.ack_number {
            Some(a) => (a, None),
            None => (TcpSeqNumber(0), Some(seg.seq_number + seg.segment_len())),
        };
        let rst = rst_segment(seg.dst_port, seg.src_port, seq, ack);
        // Straight back to the frame's sender: a RST never waits for (or triggers) ARP.
        let mac = src_mac;
        if !mac.is_unicast() {
            return;
        }
        let mut f = vec![0u8; ETH_HDR + IP_HDR + rst.header_len()];
        let addrs = FrameAddrs {
            src_mac: self.mac,
            dst_mac: mac,
            src: self.cidr.address(),
            dst: ip.src_addr,
        };
        emit_tcp(&mut f, &addrs, &rst, None, rst.payload, &self.caps);
        // Counted once queued: a queued control frame waits out back-pressure, never lost.
        if self.queue_control(f) {
            self.stats.rst_sent += 1;
        }
    }
}

/// Whether `ip` is a unicast address a wire carries on subnet `cidr` (RFC 1122 3.2.1.3):
/// not unspecified or of "this network" ({0, <host>}, (a) and (b): a source only while a
/// host learns its own address, which no TCP segment or echo request is), loopback ({127,
/// <any>}, (g): "MUST NOT appear outside a host"), broadcast (limited or the subnet's) or
/// multicast. Datagrams from any other source are discarded (`unicast_source`), and
/// [`crate::StackConfig`] refuses any other interface address.
pub(crate) fn wire_unicast(ip: Ipv4Address, cidr: &Ipv4Cidr) -> bool {
    !(ip.octets()[0] == 0
        || ip.is_loopback()
        || ip.is_broadcast()
        || ip.is_multicast()
        || cidr.broadcast() == Some(ip))
}
