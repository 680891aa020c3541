//! One TCP connection as a sans-IO state machine (RFC 9293), in the style of quinn-proto:
//! segments in through [`Connection::handle_segment`], segments out through
//! [`Connection::poll_transmit`], timers through [`Connection::poll_timeout`] and
//! [`Connection::handle_timeout`], edge-triggered events through [`Connection::poll_event`].
//! No clock, no I/O: the host ([`crate::host`]) parses frames, demultiplexes and emits.
//!
//! What it implements, with the sections cited next to the code:
//! * every state of RFC 9293 3.3.2, simultaneous open and close, TIME-WAIT;
//! * the acceptability test (3.10.7.4), RST validation and challenge ACKs (RFC 5961 3, 4,
//!   5, rate-limited per 7), RST generation for bad ACKs in SYN states;
//! * MSS (3.7.1), window scaling, timestamps and PAWS (RFC 7323), SACK both ways (RFC 2018)
//!   and D-SACK blocks for duplicates received (RFC 2883 4);
//! * immediate or delayed ACKs (RFC 1122 4.2.3.2: at least every second full segment;
//!   quick ACKs for out-of-order data, gap fills and (even partly) duplicates, RFC 5681 4.2: one for each
//!   such segment, [`Connection::poll_quick_ack`]), window updates after the
//!   application reads, receiver and sender SWS avoidance (3.8.6.2);
//! * zero-window probing (3.8.6.1), keep-alives (3.8.4) and a user timeout;
//! * loss recovery and congestion control through [`crate::recovery`] (RACK-TLP, NewReno,
//!   CUBIC, RTO with a floor). Nagle's algorithm is not offered (MPA-5.1-3).
//!
//! Buffers grow on demand up to their configured size: an idle connection holds almost no
//! memory (issue 11: 10,000 connections per core).
//!
//! # Records: an MPA-aligned sender
//! What [`Connection::send_with_room`] writes, and whatever was written since the last
//! boundary when [`Connection::end_record`] is called, is one *record* (the engine writes
//! one FPDU per record). New data then goes out in whole records: a segment carries as
//! many whole records as fit and ends at a record boundary, so every segment starts with
//! an FPDU and ends with one (the "optimized MPA/TCP" sender of mpa-08 §4 item 4, which
//! hardware receivers place directly). When the windows allow part of the next record but
//! not all of it, the sender waits for an ACK instead of cutting it, unless nothing is in
//! flight (no ACK will come: then it sends what the windows allow). A record longer than a
//! segment is cut at full segments. Retransmissions resend the ranges first sent, so they
//! stay aligned; a data segment keeps its whole payload room and carries only the SACK
//! blocks that still fit, a pure ACK with every block following it. Data written with
//! [`Connection::send_with`] and [`Connection::send`] outside records is a plain stream.
//! A bulk sender's segment (the next record exactly the payload room, within both windows,
//! nothing asked for before it) is planned by a short path that makes the walk's tests and
//! changes without its dispatch and record search (`next_full_record`), and the segments
//! after it in the same transmit pass by a shorter one still, which tests only the amounts
//! (`Connection::poll_full_again`: nothing else can change between two segments of a
//! pass); the tests hold both to the walk at every poll.
//! The receiving side's counterpart is header prediction: the next in-order data segment
//! of an established connection, acknowledging nothing new with its window unchanged (a
//! bulk receiver's) or acknowledging new data of ours (a request's or an answer's, whose
//! ACK the general ACK processing takes), is taken by a short path with the general path's
//! outcome (`take_predicted`).
//!
//! # External records: transmitting from the owner's memory
//! [`Connection::send_external_record`] queues a record whose octets the connection never
//! holds: it takes their sequence space (and send-buffer room, so the windows and the
//! buffer limit count them as any other octets) and a token. Each time a segment covers
//! them, first transmission or retransmission, [`Outgoing::for_each_piece`] names them as
//! [`Piece::External`] (token, offset in the record, length) and the host asks the owner
//! to write them into the frame (the engine frames each FPDU there, from registered
//! memory, with its CRC). The owner must be able to produce the same octets until the
//! record is acknowledged: [`Connection::take_acked_external`] gives the token of the last
//! record wholly acknowledged (a [`ConnEvent::Writable`] is raised when one is), and only
//! then may the owner reuse what the record was built from. Tokens must increase.
//! [`Connection::send_external_run`] queues a run of such records under one token: one
//! entry and one acknowledgement, with a record boundary after every given length (the
//! engine's FPDUs of one message), where segments are cut as at any record's end.

mod reasm;
mod records;
mod ring;

use std::collections::VecDeque;

use smoltcp::socket::tcp::State;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{Ipv4Address, TcpControl, TcpRepr, TcpSeqNumber, TcpTimestampRepr};

use crate::recovery::{
    earliest_of, Recovery, RecoveryConfig, RecoveryStats, TimeoutAction, MAX_RTO_BACKOFFS,
};
pub(crate) use reasm::OutOfOrderBudget;
use reasm::Reassembly;
use records::Records;
use ring::SendRing;

/// Per-connection configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnConfig {
    /// Receive buffer (the most octets advertised as window).
    pub rx_buffer: usize,
    /// The most octets the window offers until [`Connection::clear_window_clamp`] (Linux's
    /// `TCP_WINDOW_CLAMP`, inherited by a listener's connections as there): the SYN's
    /// window included, so lifting it only ever opens the window (RFC 9293 3.8.6.2.1: no
    /// shrinking). For a server that reads a bounded greeting before it decides to take
    /// the connection (an MPA Request): what a peer can park in its buffer meanwhile is
    /// this, not `rx_buffer`. A scaled window offers whole units of 2^shift (the shift
    /// `rx_buffer` needs): a clamp below one unit still offers one unit once the SYN's
    /// edge is held (rather than shrink it to zero, RFC 9293 3.8.6), so it bounds the
    /// queue to itself and one unit. `None`: `rx_buffer` from the start.
    pub rx_window_clamp: Option<usize>,
    /// Send buffer.
    pub tx_buffer: usize,
    /// The MSS we advertise (the host derives it from the MTU).
    pub mss: u16,
    /// Delayed ACK timeout; `None` acknowledges every batch of segments at once.
    pub ack_delay: Option<Duration>,
    /// Keep-alive interval of an idle connection.
    pub keep_alive: Option<Duration>,
    /// Abort when the peer stays silent this long with data outstanding, keep-alives
    /// unanswered or the handshake incomplete; without keep-alive an idle connection never
    /// times out.
    pub timeout: Option<Duration>,
    /// TIME-WAIT length.
    pub time_wait: Duration,
    /// FIN-WAIT-2 without new data this long resets the connection
    /// ([`crate::TcpTuning::fin_wait_2_timeout`]); `None`: no limit.
    pub fin_wait_2_timeout: Option<Duration>,
    /// Offer SACK (RFC 2018).
    pub sack: bool,
    /// Offer timestamps (RFC 7323).
    pub timestamps: bool,
    /// Offer window scaling (RFC 7323).
    pub window_scale: bool,
    /// The least time between two ACKs sent in answer to segments outside the window that
    /// carry no data (pure ACKs and SYNs, also those PAWS rejects), to ACKs outside
    /// RFC 5961 5.2's range, challenge ACKs (RFC 5961 3.2 and 4.2, which have RFC 5961
    /// 7's per-second limit too), and SYN-ACKs sent again for the peer's SYN again in
    /// SYN-RECEIVED (Linux's `tcp_check_req`): those between are not sent (counted in
    /// [`ConnStats::oow_acks_suppressed`]), so two endpoints out of step, or a reflector's
    /// forged segments, cannot trade ACKs without end. Linux's `tcp_invalid_ratelimit`
    /// (`tcp_oow_rate_limited`), 500 ms by default as there; zero sends every one. An out
    /// of window segment with data (or a FIN) is always answered (RFC 9293 3.10.7.4), and
    /// duplicate ACKs for in-window data (RFC 5681 4.2) are not limited.
    pub oow_ack_interval: Duration,
    /// Loss recovery and congestion control.
    pub recovery: RecoveryConfig,
}

impl Default for ConnConfig {
    fn default() -> Self {
        ConnConfig {
            rx_buffer: 256 * 1024,
            rx_window_clamp: None,
            tx_buffer: 256 * 1024,
            mss: 1460,
            ack_delay: None,
            keep_alive: Some(Duration::from_secs(10)),
            timeout: Some(Duration::from_secs(30)),
            time_wait: Duration::from_secs(10),
            fin_wait_2_timeout: None,
            sack: true,
            timestamps: true,
            window_scale: true,
            oow_ack_interval: Duration::from_millis(500),
            recovery: RecoveryConfig::default(),
        }
    }
}

/// Local and remote address and port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoints {
    /// Our address and port.
    pub local: (Ipv4Address, u16),
    /// The peer's.
    pub remote: (Ipv4Address, u16),
}

/// What happened (edge-triggered; see [`crate::Event`] for the meanings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnEvent {
    /// The handshake completed.
    Connected,
    /// New in-order octets can be read.
    Readable,
    /// Send buffer space was freed.
    Writable,
    /// The peer's FIN was received in order.
    PeerClosed,
    /// The connection ended normally (or after our abort).
    Closed,
    /// The peer reset it (an acceptable RST, RFC 9293 3.10.7 and RFC 5961 3.2).
    Reset,
    /// It timed out: retransmissions exhausted, the user timeout (RFC 9293 3.8.3 R2) or
    /// FIN-WAIT-2's bound passed without a word from the peer. A RST went to the peer where
    /// the connection was synchronized.
    TimedOut,
}

/// Errors of the user calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ConnError {
    /// Not in a state that may send.
    #[error("connection cannot send in state {0}")]
    CannotSend(State),
    /// Nothing more will arrive.
    #[error("connection cannot receive in state {0}")]
    CannotRecv(State),
    /// An argument (named) the call cannot work with.
    #[error("argument {0} {1}")]
    InvalidArgument(&'static str, &'static str),
}

/// Counters of one connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnStats {
    /// Segments sent (all kinds).
    pub segments_sent: u64,
    /// Segments received for this connection.
    pub segments_received: u64,
    /// Out-of-order segments received.
    pub out_of_order: u64,
    /// Of those, dropped (neither held nor SACKed; the peer sends them again) because they
    /// needed a block of their own and the connection already held the most disjoint
    /// out-of-order blocks it keeps (64): a peer cannot make it track more holes.
    pub out_of_order_no_block: u64,
    /// Octets held out of order that this connection gave up (reneged, RFC 2018 8) so that
    /// another connection of the host, holding less than its share of the host's
    /// out-of-order budget, could hold a segment (`HostStats::out_of_order_reneges`).
    pub out_of_order_reneged: u64,
    /// Segments outside the window or duplicates.
    pub duplicates: u64,
    /// Challenge ACKs sent (RFC 5961).
    pub challenge_acks: u64,
    /// ACKs not sent in answer to segments outside the window without data, to ACKs
    /// outside RFC 5961 5.2's range, as challenge ACKs, or as SYN-ACKs for a SYN again in
    /// SYN-RECEIVED, within [`ConnConfig::oow_ack_interval`] of the last one sent (Linux's
    /// `TCPACKSkippedSeq`, `..PAWS`, `..Challenge` and `..SynRecv`).
    pub oow_acks_suppressed: u64,
    /// Segments dropped by PAWS.
    pub paws_dropped: u64,
    /// Segments dropped for carrying no timestamp option where both SYNs negotiated
    /// timestamps (RFC 7323 3.2).
    pub ts_missing_dropped: u64,
    /// The peer's SYN carried a Window Scale shift above 14, taken as 14 (RFC 7323 2.3,
    /// which wants it logged: one `tracing` warning names the peer and the shift). At most
    /// one per connection.
    pub window_scale_clamped: u64,
    /// Window-probe timer expiries: zero-window probes sent, and segments sender SWS
    /// avoidance held back that went at its override timeout (RFC 9293 3.8.6).
    pub window_probes: u64,
    /// Keep-alive probes sent.
    pub keepalives: u64,
    /// In-order octets the user took straight from the received segment (the engine's
    /// placement from the mbuf, `Stack::poll_with`), never copied into the receive queue.
    pub delivered_in_place: u64,
    /// Octets of external records written by their owner into frames (transmissions and
    /// retransmissions): sent from the owner's memory, never copied into the send buffer.
    pub external_octets_sent: u64,
    /// Loss recovery.
    pub recovery: RecoveryStats,
}

const EV_CONNECTED: u8 = 1;
const EV_READABLE: u8 = 2;
const EV_WRITABLE: u8 = 4;
const EV_PEER_CLOSED: u8 = 8;
const EV_CLOSED: u8 = 16;
const EV_RESET: u8 = 32;
const EV_TIMED_OUT: u8 = 64;

/// Challenge ACKs allowed per second (RFC 5961 7).
const CHALLENGE_ACKS_PER_SEC: u32 = 10;
/// How long TS.Recent, the peer's last timestamp, stays valid without a segment that
/// moves it on (RFC 7323 5.5): the peer's clock rate is unknown, and its TSval may have
/// moved by half its space in this time if it ticks in microseconds as ours does (Linux 6.7
/// and later with `tcp_usec_ts`, which takes TS.Recent as stale after as long:
/// `TCP_PAWS_WRAP`). A slower clock (Linux's default 1 ms, the RFC's 1 ms to 1 s) takes
/// 24.8 days or more to move as far, so this only accepts its segments sooner than
/// 5.5's 24 days would.
const TS_STALE: Duration = Duration::from_micros(1 << 31);

/// Our TSval ticks in microseconds, half its space in 2^31 us (35.8 minutes). A peer takes
/// our TS.Recent as valid for 24 days of idleness (RFC 7323 5.5; Linux before 6.7,
/// `TCP_PAWS_24DAYS`; FreeBSD), and moves it on only with an acceptable segment of ours
/// (4.3), which a keep-alive probe (SEG.SEQ = SND.NXT - 1) is not: after 36 minutes
/// without one, every segment we sent would look older than TS.Recent there and be
/// dropped by PAWS. So an established connection that sent no acceptable segment for a
/// whole period of this timer sends a pure ACK at SND.NXT ([`Connection::acceptable_seq`])
/// at its expiry, at most two periods (9 minutes) after its last one, and again every two
/// periods while it stays idle: two in a row may be lost, and the third still arrives
/// before our clock runs half its space past the peer's TS.Recent.
const TS_REFRESH: Duration = Duration::from_micros(1 << 28);

#[cfg(feature = "self-check")]
thread_local! {
    static GENERAL_PATHS_ONLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[cfg(feature = "self-check")]
thread_local! {
    /// Segments [`Connection::take_predicted`] took on this thread (tests read it through
    /// [`predicted_segments`]; a counter on the connection would make the two paths'
    /// states differ).
    static PREDICTED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    /// Of those, the ones that acknowledged new data of ours ([`answered_segments`]).
    static ANSWERED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Test-only (feature `self-check`): every connection on this thread takes the general
/// receive path (`true`) or its fast path where it applies again (`false`), so that a test
/// can run the same segments both ways and compare. Without the feature the fast path is
/// always taken.
#[cfg(feature = "self-check")]
#[doc(hidden)]
pub fn set_general_paths_only(on: bool) {
    GENERAL_PATHS_ONLY.with(|g| g.set(on));
}

/// Test-only (feature `self-check`): segments the receive fast path (header prediction)
/// took on this thread so far.
#[cfg(feature = "self-check")]
#[doc(hidden)]
pub fn predicted_segments() -> u64 {
    PREDICTED.with(|n| n.get())
}

/// Test-only (feature `self-check`): of [`predicted_segments`], those that acknowledged
/// new data of ours (a request's or an answer's segment).
#[cfg(feature = "self-check")]
#[doc(hidden)]
pub fn answered_segments() -> u64 {
    ANSWERED.with(|n| n.get())
}

/// Whether the fast path may be taken (always, but under [`set_general_paths_only`]).
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

/// Why new data is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Send {
    /// Within the peer's and the congestion window.
    Normal,
    /// A tail loss probe (RFC 8985 7.3): within the peer's window only.
    LossProbe,
    /// One octet past a zero window (RFC 9293 3.8.6.1).
    WindowProbe,
}

/// A segment to send without its payload, and the ring range (offset, length) of the payload.
type Plan = (TcpRepr<'static>, usize, usize);

/// An out-of-order segment's octets the host's budget refused ([`Reassembly::insert`]'s
/// `Stored::OverBudget`): `len` octets at stream offset `off`, `start` octets into the
/// payload of the segment at `seq` with `payload_len` octets (which names that segment
/// when the octets are stored again: never another's payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RefusedOutOfOrder {
    off: u64,
    start: usize,
    pub(crate) len: usize,
    seq: TcpSeqNumber,
    payload_len: usize,
}

/// What sets a segment of [`Connection::next_full_record`] apart from the others of its run:
/// its sequence number, the ring range of its payload and its timestamp value.
#[derive(Debug, Clone, Copy)]
struct FullRecord {
    seq: TcpSeqNumber,
    off: usize,
    len: usize,
    tsval: u32,
}

fn seq_diff(a: TcpSeqNumber, b: TcpSeqNumber) -> i64 {
    i64::from(a.0.wrapping_sub(b.0))
}

/// The D-SACK block an ACK's SACK blocks open with, if any (RFC 2883 4): a first block that
/// lies at or below the cumulative ACK, or inside the second block, reports a segment
/// received twice. A block that is empty, reaches past what was sent, lies implausibly
/// far behind (more than 2^30 octets, where sequence comparisons stop meaning anything)
/// or is longer than `max_wnd`, the largest window the peer offered (no segment we sent
/// was longer, so no duplicate the peer received is: Linux's "dubious DSACK"; a forged one
/// covering every retransmission would undo a recovery's window reduction, RFC 3708 5),
/// is no evidence.
fn dsack_block(
    ranges: &[Option<(u32, u32)>; 3],
    ack: TcpSeqNumber,
    snd_nxt: TcpSeqNumber,
    max_wnd: usize,
) -> Option<(TcpSeqNumber, TcpSeqNumber)> {
    let (l, r) = ranges[0]?;
    let (l, r) = (TcpSeqNumber(l as i32), TcpSeqNumber(r as i32));
    if l >= r || r > snd_nxt || seq_diff(ack, l) > 1 << 30 || seq_diff(r, l) > max_wnd as i64 {
        return None;
    }
    let dsack = r <= ack
        || ranges[1].is_some_and(|(l2, r2)| {
            let (l2, r2) = (TcpSeqNumber(l2 as i32), TcpSeqNumber(r2 as i32));
            l2 <= l && r <= r2
        });
    dsack.then_some((l, r))
}

/// The spans of the send ring that external records reserve, as (offset from the ring's
/// head, which is sequence number `base`, length), in order: what a re-layout of the ring
/// need not copy ([`SendRing::reserve`]), asked for only when the ring grows.
fn ext_holes(
    ext: &VecDeque<ExtRecord>,
    base: TcpSeqNumber,
) -> impl Iterator<Item = (usize, usize)> + '_ {
    ext.iter().filter_map(move |r| {
        let (off, end) = (seq_diff(r.start, base).max(0), seq_diff(r.end(), base));
        (end > off).then(|| (off as usize, (end - off) as usize))
    })
}

/// An external record (module documentation): its first sequence number, length and token.
#[derive(Debug, Clone, Copy)]
struct ExtRecord {
    start: TcpSeqNumber,
    len: u32,
    token: u64,
}

impl ExtRecord {
    fn end(&self) -> TcpSeqNumber {
        self.start + self.len as usize
    }
}

/// One piece of an outgoing segment's payload, in order ([`Outgoing::for_each_piece`]).
#[derive(Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Octets held by the connection.
    Octets(&'a [u8]),
    /// `len` octets of the external record `token`, from offset `at` in the record: the
    /// owner writes them.
    External {
        /// The record's token.
        token: u64,
        /// Offset of the first octet in the record.
        at: usize,
        /// Octets.
        len: usize,
    },
}

/// A segment to send ([`Connection::poll_segment`]): its header and where its payload's
/// octets come from.
#[derive(Debug)]
pub struct Outgoing<'a> {
    /// The segment, its `payload` empty: the payload is [`Outgoing::payload_len`] octets
    /// given by [`Outgoing::for_each_piece`].
    pub repr: TcpRepr<'static>,
    conn: &'a Connection,
    off: usize,
    len: usize,
    /// The first external record the payload overlaps: its index and ring offset.
    first: Option<(usize, i64)>,
    /// Whether the segment came from the full-record path (new data, exactly one record of
    /// [`Connection::max_record_payload`] octets, nothing asked for before it): the segment
    /// after it in the same transmit pass may then come from
    /// [`Connection::poll_full_again`].
    full: bool,
}

impl Outgoing<'_> {
    /// The fourth SACK block of the segment, written after its three
    /// ([`Connection::fourth_sack_block`]).
    #[inline(always)]
    pub(crate) fn fourth_sack_block(&self) -> Option<(u32, u32)> {
        self.conn.fourth_sack_block(&self.repr)
    }
}

/// A full-record segment [`Connection::full_again_ready`] found to go next: its payload's
/// ring offset and length.
#[derive(Debug, Clone, Copy)]
pub struct FullAgain {
    sent: usize,
    room: usize,
}

impl<'a> Outgoing<'a> {
    /// Payload octets.
    pub fn payload_len(&self) -> usize {
        self.len
    }

    /// Whether this segment came from the full-record path: the caller may ask
    /// [`Connection::poll_full_again`] for the next one, with nothing else done to the
    /// connection in between.
    #[inline]
    pub fn is_full_record(&self) -> bool {
        self.full
    }

    /// The payload as one slice of the send buffer when the connection holds all of it in
    /// one piece (no external octets, no wrap): the common case, copied in one pass.
    #[inline]
    pub fn contiguous(&self) -> Option<&'a [u8]> {
        let c = self.conn;
        if self.len == 0 {
            return Some(&[]);
        }
        if self.first.is_some() {
            return None;
        }
        let s = c.tx.slice(self.off, self.len);
        (s.len() == self.len).then_some(s)
    }

    /// The payload's one piece when it lies wholly inside one external record (a bulk
    /// sender's segment: one FPDU): the record's token and the payload's offset in it,
    /// the one `Piece::External` that [`Outgoing::for_each_piece`] would give, found
    /// without its walk.
    #[inline]
    pub fn single_external(&self) -> Option<(u64, usize)> {
        let (k, start) = self.first?;
        let r = self.conn.ext.get(k)?;
        let pos = self.off as i64;
        (start <= pos && start + i64::from(r.len) >= (self.off + self.len) as i64)
            .then(|| (r.token, (pos - start) as usize))
    }

    /// Calls `f` with each piece of the payload in order: octets of the send buffer (at
    /// most two slices per run, where the ring wraps) and external ones.
    pub fn for_each_piece(&self, mut f: impl FnMut(Piece<'a>)) {
        let c = self.conn;
        let end = self.off + self.len;
        let mut pos = self.off;
        let mut next = self.first;
        while pos < end {
            if let Some((k, start)) = next {
                // `start` may lie before the ring's first octet: a record acknowledged in
                // part.
                if start <= pos as i64 {
                    let r = &c.ext[k];
                    let stop = end.min((start + i64::from(r.len)) as usize);
                    f(Piece::External {
                        token: r.token,
                        at: (pos as i64 - start) as usize,
                        len: stop - pos,
                    });
                    pos = stop;
                    next = c
                        .ext
                        .get(k + 1)
                        .map(|r| (k + 1, c.ring_offset(r.start)))
                        .filter(|&(_, s)| s < end as i64);
                    continue;
                }
            }
            let stop = next.map_or(end, |(_, s)| (s as usize).min(end));
            while pos < stop {
                let piece = c.tx.slice(pos, stop - pos);
                if piece.is_empty() {
                    return;
                }
                pos += piece.len();
                f(Piece::Octets(piece));
            }
        }
    }
}

/// One connection (see the module documentation).
#[derive(Debug)]
#[cfg_attr(test, derive(Clone))]
pub struct Connection {
    cfg: ConnConfig,
    ep: Endpoints,
    state: State,
    active: bool,
    // --- send side (RFC 9293 3.3.1)
    iss: TcpSeqNumber,
    snd_una: TcpSeqNumber,
    snd_nxt: TcpSeqNumber,
    snd_wnd: usize,
    snd_wl1: TcpSeqNumber,
    snd_wl2: TcpSeqNumber,
    max_snd_wnd: usize,
    snd_shift: u8,
    smss: usize,
    tx: SendRing,
    /// Sequence numbers just past the end of each record not yet wholly sent, oldest first.
    records: Records,
    /// A record was ever marked: segments keep their whole payload room (SACK blocks give
    /// way) so that retransmissions stay aligned.
    record_stream: bool,
    /// A segment's payload where it wraps around the end of the send ring (one segment
    /// per lap of the ring is copied here, so no segment is cut short by the wrap).
    wrap_buf: Vec<u8>,
    /// External records not yet wholly acknowledged, oldest first.
    ext: VecDeque<ExtRecord>,
    /// The token of the last external record wholly acknowledged since the owner asked.
    ext_acked: Option<u64>,
    /// Where the last search of `ext` for a segment ended (`locate_ext`).
    ext_hint: usize,
    /// Tests only: [`Connection::next_full_record`] declines, so `plan` takes the walk.
    #[cfg(test)]
    full_walk_only: bool,
    fin_queued: bool,
    /// Sequence number of our FIN once its position is known.
    fin_seq: Option<TcpSeqNumber>,
    syn_sent: bool,
    /// The peer has acknowledged our SYN. Not `snd_una == iss`: after 2^32 octets the
    /// sequence space wraps, and an acknowledgement can land exactly on the ISS again.
    syn_acked: bool,
    // --- receive side
    irs: TcpSeqNumber,
    rcv_nxt: TcpSeqNumber,
    rcv_shift: u8,
    rx: VecDeque<u8>,
    /// Stream offset of RCV.NXT (octets in order so far).
    rcv_off: u64,
    ooo: Reassembly,
    /// The last segment's octets refused by the host's out-of-order budget, until the host
    /// takes them ([`Connection::take_refused_out_of_order`]): it may have a holder
    /// renege and store them after all.
    refused_ooo: Option<RefusedOutOfOrder>,
    /// The octets (stream offsets) of the last duplicate segment, reported as a D-SACK
    /// block first in the next ACK and in that one only (RFC 2883 4).
    dsack: Option<(u64, u64)>,
    /// The fourth SACK block of the last segment polled with three and no timestamps
    /// ([`Self::fourth_sack_block`]): smoltcp's `TcpRepr` holds three, and 40 octets of
    /// options hold four beside no timestamps (RFC 2018 3 and 4).
    sack4: Option<(u32, u32)>,
    /// The fourth SACK block of the segment being handled, beside the three of its
    /// `TcpRepr` ([`Self::handle_segment_with_fourth_sack`]); `None` between segments.
    rx_sack4: Option<(u32, u32)>,
    /// Stream offset of an out-of-order FIN.
    fin_off: Option<u64>,
    fin_received: bool,
    /// Right edge last advertised (stream offset).
    rcv_adv: u64,
    /// The receive buffer the window is offered from: `rx_buffer`, or less while
    /// [`ConnConfig::rx_window_clamp`] holds.
    rx_window: usize,
    // --- options
    ws_ok: bool,
    sack_ok: bool,
    ts_ok: bool,
    ts_recent: u32,
    ts_recent_at: Instant,
    /// RCV.NXT as the last segment we sent acknowledged it (RFC 7323 4.3's Last.ACK.sent):
    /// TS.Recent takes the TSval of a segment at or before it only, so that an ACK
    /// covering several segments echoes the earliest one's and the peer's RTT sample
    /// includes the ACK's delay (RFC 7323 4.3, case A).
    last_ack_sent: TcpSeqNumber,
    ts_offset: u32,
    peer_mss: usize,
    // --- ACKs and timers
    ack_now: bool,
    /// An ACK owed for this segment alone: it was out of order, filled a gap or was a
    /// duplicate (RFC 5681 4.2). The host sends it before the next segment of its receive
    /// burst is read ([`Connection::poll_quick_ack`]), so that a burst of such segments draws
    /// one ACK each, not one for all.
    quick_ack: bool,
    delack_at: Option<Instant>,
    unacked_segs: u32,
    rst_pending: bool,
    /// `<SEQ=SEG.ACK><CTL=RST>` owed for an ACK that does not acknowledge our SYN (RFC 9293
    /// 3.10.7.3 and 3.10.7.4 fifth): a RST at that sequence number, without ACK, that leaves
    /// the connection as it is.
    rst_at: Option<TcpSeqNumber>,
    probe_pending: bool,
    window_probe_due: bool,
    /// The peer's window opened with octets outstanding: what it could not take while it
    /// was shut (the window probe's octet) goes again at once.
    reopen_resend: bool,
    window_probe_at: Option<Instant>,
    window_probe_backoff: u32,
    keepalive_at: Option<Instant>,
    keepalive_pending: bool,
    /// When to check that an acceptable segment carried our TSval to the peer in the last
    /// [`TS_REFRESH`], and whether one did since the last check (every segment that acks
    /// but a keep-alive probe).
    ts_refresh_at: Option<Instant>,
    ts_sent_fresh: bool,
    time_wait_at: Option<Instant>,
    /// When FIN-WAIT-2 without new data ends in a reset (`ConnConfig::fin_wait_2_timeout`),
    /// and RCV.NXT when that deadline was set (data since pushes it back).
    fin_wait_2_at: Option<Instant>,
    fin_wait_2_rcv: TcpSeqNumber,
    last_heard: Instant,
    challenge_window: Instant,
    challenges: u32,
    /// When the last ACK limited by [`ConnConfig::oow_ack_interval`] was sent.
    last_oow_ack: Option<Instant>,
    rec: Recovery,
    events: u8,
    finished: bool,
    stats: ConnStats,
}

impl Connection {
    fn new(cfg: &ConnConfig, ep: Endpoints, iss: TcpSeqNumber, now: Instant, active: bool) -> Self {
        let smss = usize::from(cfg.mss).max(64);
        Connection {
            cfg: *cfg,
            ep,
            state: if active {
                State::SynSent
            } else {
                State::SynReceived
            },
            active,
            iss,
            snd_una: iss,
            snd_nxt: iss,
            snd_wnd: 0,
            snd_wl1: iss,
            snd_wl2: iss,
            max_snd_wnd: 0,
            snd_shift: 0,
            smss,
            tx: SendRing::new(cfg.tx_buffer.max(1)),
            records: Records::default(),
            record_stream: false,
            wrap_buf: Vec::new(),
            ext: VecDeque::new(),
            ext_acked: None,
            ext_hint: 0,
            #[cfg(test)]
            full_walk_only: false,
            fin_queued: false,
            fin_seq: None,
            syn_sent: false,
            syn_acked: false,
            irs: TcpSeqNumber(0),
            rcv_nxt: TcpSeqNumber(0),
            rcv_shift: 0,
            rx: VecDeque::new(),
            rcv_off: 0,
            ooo: Reassembly::default(),
            refused_ooo: None,
            dsack: None,
            sack4: None,
            rx_sack4: None,
            fin_off: None,
            fin_received: false,
            rcv_adv: 0,
            rx_window: cfg
                .rx_window_clamp
                .map_or(cfg.rx_buffer, |c| c.min(cfg.rx_buffer)),
            ws_ok: false,
            sack_ok: false,
            ts_ok: false,
            ts_recent: 0,
            ts_recent_at: now,
            last_ack_sent: TcpSeqNumber(0),
            ts_offset: iss.0 as u32 ^ 0x5a5a_5a5a,
            peer_mss: 536,
            ack_now: false,
            quick_ack: false,
            delack_at: None,
            unacked_segs: 0,
            rst_pending: false,
            rst_at: None,
            probe_pending: false,
            window_probe_due: false,
            reopen_resend: false,
            window_probe_at: None,
            window_probe_backoff: 0,
            keepalive_at: None,
            keepalive_pending: false,
            ts_refresh_at: None,
            ts_sent_fresh: false,
            time_wait_at: None,
            fin_wait_2_at: None,
            fin_wait_2_rcv: TcpSeqNumber(0),
            last_heard: now,
            challenge_window: now,
            challenges: 0,
            last_oow_ack: None,
            rec: Recovery::new(&cfg.recovery, smss, now),
            events: 0,
            finished: false,
            stats: ConnStats::default(),
        }
    }

    /// The sequence number of the peer's first stream octet (IRS + 1), once a SYN was taken
    /// (the fuzz harness checks delivered octets against it: the first ACK we send may
    /// already cover data that came with or right after the SYN).
    #[cfg(feature = "fuzzing")]
    pub(crate) fn peer_stream_start(&self) -> Option<TcpSeqNumber> {
        (!matches!(self.state, State::SynSent | State::Listen | State::Closed))
            .then_some(self.irs + 1)
    }

    /// Active open: SYN-SENT; the first [`Connection::poll_transmit`] is the SYN.
    pub fn connect(cfg: &ConnConfig, ep: Endpoints, iss: TcpSeqNumber, now: Instant) -> Self {
        Self::new(cfg, ep, iss, now, true)
    }

    /// Passive open from the peer's SYN (the host checked: SYN without ACK): SYN-RECEIVED;
    /// the first [`Connection::poll_transmit`] is the SYN-ACK (RFC 9293 3.10.7.2).
    pub fn accept(
        cfg: &ConnConfig,
        ep: Endpoints,
        iss: TcpSeqNumber,
        syn: &TcpRepr<'_>,
        now: Instant,
    ) -> Self {
        let mut c = Self::new(cfg, ep, iss, now, false);
        c.take_syn_options(syn, now);
        c.irs = syn.seq_number;
        c.rcv_nxt = syn.seq_number + 1;
        c.last_ack_sent = c.rcv_nxt;
        c.snd_wnd = usize::from(syn.window_len);
        c.max_snd_wnd = c.snd_wnd;
        c.snd_wl1 = syn.seq_number;
        // Data on a SYN is not kept: the peer retransmits it once synchronized (RFC 9293
        // 3.10.7.2 allows queueing; MPA never sends it).
        c
    }

    /// Sets the offset of our timestamp clock (TSval = the microsecond clock + `offset`),
    /// before the first segment goes: the host's, the same for every incarnation of the
    /// 4-tuple, so PAWS keeps an earlier incarnation's old duplicates out (RFC 7323 5.8,
    /// RFC 6191 2). Without it, one drawn from the ISS, which gives no such order.
    pub(crate) fn set_ts_offset(&mut self, offset: u32) {
        debug_assert_eq!(
            self.stats.segments_sent, 0,
            "the clock is fixed once a segment left"
        );
        self.ts_offset = offset;
    }

    /// RFC 9293 3.7.1 (MSS), RFC 7323 2.2 (window scale), 3.2 (timestamps), RFC 2018 2.
    fn take_syn_options(&mut self, syn: &TcpRepr<'_>, now: Instant) {
        self.peer_mss = usize::from(syn.max_seg_size.unwrap_or(536)).max(64);
        if let Some(ws @ 15..) = syn.window_scale {
            self.window_scale_clamped(ws);
        }
        if let (Some(ws), true) = (syn.window_scale, self.cfg.window_scale) {
            self.ws_ok = true;
            // RFC 7323 2.3: a shift above 14 is used as 14 (counted and logged above).
            self.snd_shift = ws.min(14);
            self.rcv_shift = Self::shift_for(self.cfg.rx_buffer);
        } else {
            self.ws_ok = false;
            self.snd_shift = 0;
            self.rcv_shift = 0;
        }
        self.sack_ok = syn.sack_permitted && self.cfg.sack;
        if let (Some(ts), true) = (syn.timestamp, self.cfg.timestamps) {
            self.ts_ok = true;
            self.ts_recent = ts.tsval;
            self.ts_recent_at = now;
        } else {
            self.ts_ok = false;
        }
        self.update_smss();
    }

    /// RFC 7323 2.3: the peer's SYN carried the Window Scale shift `ws`, above 14; the
    /// TCP SHOULD log it (and uses 14). Counted, and warned of, once per connection. The
    /// host hands the shift as sent: smoltcp's parser already gives 14 for it.
    #[cold]
    fn window_scale_clamped(&mut self, ws: u8) {
        if self.stats.window_scale_clamped != 0 {
            return;
        }
        self.stats.window_scale_clamped = 1;
        let (ip, port) = self.ep.remote;
        tracing::warn!(
            peer = %ip,
            peer_port = port,
            shift = ws,
            "RFC 7323 2.3: the peer's SYN carried a Window Scale shift above 14; 14 is used"
        );
    }

    fn shift_for(buf: usize) -> u8 {
        let mut s = 0u8;
        while s < 14 && (buf >> s) > 0xffff {
            s += 1;
        }
        s
    }

    /// Effective send MSS: the peer's MSS minus the options every segment carries.
    fn update_smss(&mut self) {
        let opts = if self.ts_ok { 12 } else { 0 };
        self.smss = self
            .peer_mss
            .min(usize::from(self.cfg.mss))
            .saturating_sub(opts)
            .max(32);
        self.rec.set_smss(self.smss);
    }

    // ------------------------------------------------------------------ user calls

    /// The state.
    pub fn state(&self) -> State {
        self.state
    }

    /// Consecutive expiries of the retransmission timer without progress or an answer
    /// (RTOs and probes of a shut window): the count RFC 1122 4.2.3.5 compares with R1.
    pub fn rto_backoffs(&self) -> u32 {
        self.rec.backoffs()
    }

    /// Endpoints.
    pub fn endpoints(&self) -> Endpoints {
        self.ep
    }

    /// Whether [`Connection::send_with`] may queue data.
    pub fn may_send(&self) -> bool {
        matches!(self.state, State::Established | State::CloseWait) && !self.fin_queued
    }

    /// Whether nothing sent waits for its acknowledgement: no octet, SYN or FIN in flight
    /// (octets queued in the send buffer and not yet sent do not count) and no external
    /// record (one counts from when it is queued until it is acknowledged, sent or not).
    /// Nagle's test of an idle sender (RFC 896, RFC 9293 3.7.4): a segment queued now goes
    /// out alone.
    pub fn nothing_in_flight(&self) -> bool {
        self.snd_una == self.snd_nxt && self.ext.is_empty()
    }

    /// Whether the peer's last window was zero (RFC 9293 3.8.6.1: we only probe it, and no
    /// timer of ours ends a connection whose peer answers the probes).
    pub fn peer_window_shut(&self) -> bool {
        self.snd_wnd == 0
    }

    /// Whether the connection, having just had data placed by the reader, owes nothing at
    /// once: nothing to send ([`Self::nothing_to_send`]: its ACK may wait), nothing queued
    /// for the reader, no event pending but Writable, no record sent from memory newly
    /// acknowledged.
    pub(crate) fn quiet_after_placed_data(&self) -> bool {
        self.nothing_to_send()
            && self.rx.is_empty()
            && self.events & !EV_WRITABLE == 0
            && self.ext_acked.is_none()
    }

    /// Octets queued and not yet acknowledged.
    pub fn send_queue(&self) -> usize {
        self.tx.len()
    }

    /// Octets that may still be queued.
    pub fn send_space(&self) -> usize {
        if self.may_send() {
            self.tx.free()
        } else {
            0
        }
    }

    /// Octets ready to be read.
    pub fn recv_queue(&self) -> usize {
        self.rx.len()
    }

    /// Changes the delayed-ACK timeout. An ACK already delayed is then due no later than
    /// `now` plus the new delay, at once without one (RFC 1122 4.2.3.2: the delay bounds
    /// how long an ACK waits; the old, longer deadline held it past the new bound). Returns
    /// whether the ACK is now due at once (the host then marks the connection for its
    /// transmit pass); a deadline moved earlier is the host's to re-arm.
    pub fn set_ack_delay(&mut self, d: Option<Duration>, now: Instant) -> bool {
        self.cfg.ack_delay = d;
        let Some(at) = self.delack_at else {
            return false;
        };
        match d {
            None => {
                self.delack_at = None;
                self.ack_now = true;
                true
            }
            Some(d) => {
                self.delack_at = Some(at.min(now + d));
                false
            }
        }
    }

    /// Lends the free contiguous part of the send buffer to `f`; returns what it wrote.
    pub fn send_with(&mut self, f: impl FnOnce(&mut [u8]) -> usize) -> Result<usize, ConnError> {
        if !self.may_send() {
            return Err(ConnError::CannotSend(self.state));
        }
        let (ext, base) = (&self.ext, self.data_start());
        Ok(self.tx.write_with(|| ext_holes(ext, base), f))
    }

    /// Writes one record (see the module documentation: an FPDU): as
    /// [`Connection::send_with`], growing the send buffer only as far as `room` contiguous
    /// octets need (the size of what `f` will write), and marking the end of what `f`
    /// wrote as a record boundary.
    pub fn send_with_room(
        &mut self,
        room: usize,
        f: impl FnOnce(&mut [u8]) -> usize,
    ) -> Result<usize, ConnError> {
        if !self.may_send() {
            return Err(ConnError::CannotSend(self.state));
        }
        let (ext, base) = (&self.ext, self.data_start());
        let n = self.tx.write_with_room(room, || ext_holes(ext, base), f);
        if n > 0 {
            // What was just written is unsent: its end is a new boundary.
            self.push_record(self.data_start() + self.tx.len());
            self.record_stream = true;
        }
        Ok(n)
    }

    /// Marks the end of what was written so far as a record boundary (for a record written
    /// in pieces with [`Connection::send`] or [`Connection::send_with`]).
    pub fn end_record(&mut self) {
        let end = self.data_start() + self.tx.len();
        let unsent_start = self.snd_nxt.max(self.data_start());
        if end > unsent_start && self.records.back() != Some(&end) {
            self.push_record(end);
            self.record_stream = true;
        }
    }

    /// Queues an external record of `len` octets named `token` (module documentation:
    /// the owner writes its octets at each transmission and keeps them unchanged until
    /// [`Connection::take_acked_external`] reports it). `Ok(false)`, changing nothing, when
    /// the send buffer lacks room for `len` more octets. Tokens must increase from one
    /// record to the next: [`ConnError::InvalidArgument`] for a token not above the last
    /// record's still unacknowledged, and for a `len` of 0 or above `u32::MAX` (no room
    /// will ever come for those).
    pub fn send_external_record(&mut self, len: usize, token: u64) -> Result<bool, ConnError> {
        self.send_external_run(len, len, token)
    }

    /// [`Connection::send_external_record`] of a run of records: `len` octets under one
    /// token, with a record boundary after every `every` octets and at the end (the last
    /// record is the rest, `every` or shorter). Segments are cut at those boundaries as at
    /// any other ([`Piece::External`] names the offset in the run), while the connection
    /// keeps one entry for the run and reports it acknowledged once, when all of it is:
    /// the engine queues the equal FPDUs of one message this way, one entry, token and
    /// acknowledgement for many segments. `Ok(false)` and errors as
    /// `send_external_record`, and [`ConnError::InvalidArgument`] for an `every` of 0.
    pub fn send_external_run(
        &mut self,
        len: usize,
        every: usize,
        token: u64,
    ) -> Result<bool, ConnError> {
        if !self.may_send() {
            return Err(ConnError::CannotSend(self.state));
        }
        let bad = |name, why| Err(ConnError::InvalidArgument(name, why));
        let len32 = match u32::try_from(len) {
            Ok(0) => return bad("len", "must be at least one octet"),
            Ok(l) => l,
            Err(_) => return bad("len", "must fit in 32 bits"),
        };
        if every == 0 {
            return bad("every", "must be at least one octet");
        }
        // The owner's contract (`take_acked_external` names the last record acknowledged,
        // and every one before it): a local caller's slip, answered, not a panic.
        if self.ext.back().is_some_and(|r| r.token >= token) {
            return bad(
                "token",
                "must be above the tokens of the external records still unacknowledged",
            );
        }
        let (ext, base) = (&self.ext, self.data_start());
        if !self.tx.reserve(len, || ext_holes(ext, base)) {
            return Ok(false);
        }
        let end = self.data_start() + self.tx.len();
        let start = end - len;
        self.ext.push_back(ExtRecord {
            start,
            len: len32,
            token,
        });
        let mut at = every;
        while at < len {
            self.push_record(start + at);
            at += every;
        }
        self.push_record(end);
        self.record_stream = true;
        Ok(true)
    }

    /// The token of the last external record wholly acknowledged since the last call, if
    /// any was: that record and every one before it will never be sent again.
    pub fn take_acked_external(&mut self) -> Option<u64> {
        self.ext_acked.take()
    }

    /// Counts `n` octets of external records the owner wrote into a frame.
    pub fn count_external_sent(&mut self, n: usize) {
        self.stats.external_octets_sent += n as u64;
    }

    /// Makes every external record still unacknowledged the connection's own: the octets
    /// it has still to send or may resend (those past SND.UNA) are written by
    /// `fill(token, at, dst)` (the octets `[at, at + dst.len())` of the record's run, as the
    /// owner writes them into frames; `false` when it cannot) into the send-buffer span the
    /// record reserves, and the record is forgotten: from then on those octets go out from
    /// the buffer like any written with [`Connection::send`], and nothing of the owner's is
    /// read again. For an owner that must hand its memory back while the connection still
    /// has to deliver it: a graceful close under way (a Terminate, our FIN) whose reset
    /// would overtake it. Records are taken oldest first; `false` when a `fill` failed:
    /// that record and those after it stay external (the owner's memory may still be read,
    /// so the owner resets the connection), the ones before are the connection's.
    pub fn internalize_external(
        &mut self,
        mut fill: impl FnMut(u64, usize, &mut [u8]) -> bool,
    ) -> bool {
        let ds = self.data_start();
        while let Some(r) = self.ext.front().copied() {
            // Acknowledged octets left the ring: the record's part from SND.UNA on.
            let from = seq_diff(r.start, ds);
            let skip = (-from).max(0) as usize;
            let (mut off, mut at) = (from.max(0) as usize, skip);
            let len = r.len as usize;
            while at < len {
                let piece = self.tx.slice_mut(off, len - at);
                if piece.is_empty() || !fill(r.token, at, piece) {
                    return false;
                }
                let n = piece.len();
                off += n;
                at += n;
            }
            self.ext.pop_front();
        }
        self.ext_hint = 0;
        true
    }

    /// External records still unacknowledged.
    pub fn external_records(&self) -> usize {
        self.ext.len()
    }

    /// The offset in the send ring of sequence number `seq` (negative before its start).
    fn ring_offset(&self, seq: TcpSeqNumber) -> i64 {
        seq_diff(seq, self.data_start())
    }

    /// The first external record that ends after ring offset `off` and starts before
    /// `off + len`: its index and ring offset.
    fn first_ext_after(&self, off: usize, len: usize) -> Option<(usize, i64)> {
        let ds = self.data_start();
        let k = self
            .ext
            .partition_point(|r| seq_diff(r.end(), ds) <= off as i64);
        let r = self.ext.get(k)?;
        let start = self.ring_offset(r.start);
        (start < (off + len) as i64).then_some((k, start))
    }

    /// [`Self::first_ext_after`], trying first the record where the last search ended
    /// (with one look at it: does it hold `off`?), then that record and the one after it as
    /// the first to end after `off` (new segments follow each other record by record): no
    /// search per segment in a bulk transfer. Debug builds check every answer against the
    /// search.
    #[inline]
    fn locate_ext(&mut self, off: usize, len: usize) -> Option<(usize, i64)> {
        let found = self.locate_ext_hinted(off, len);
        debug_assert_eq!(
            found,
            self.first_ext_after(off, len),
            "locate_ext: the hint led to another record than the search"
        );
        found
    }

    /// [`Self::locate_ext`]'s work.
    #[inline(always)]
    fn locate_ext_hinted(&mut self, off: usize, len: usize) -> Option<(usize, i64)> {
        if self.ext.is_empty() {
            return None;
        }
        let ds = self.data_start();
        let off_i = off as i64;
        let ext = &self.ext;
        let h = self.ext_hint;
        // The common case first, with one look at the records: `off` inside the hinted one
        // (a bulk transfer's segments, most of a record's run). The one before it ends
        // where it starts or earlier, so it is the first to end after `off`.
        if let Some(r) = ext.get(h) {
            let start = seq_diff(r.start, ds);
            if start <= off_i && start + i64::from(r.len) > off_i && len > 0 {
                return Some((h, start));
            }
        }
        let first_after = |k: usize| {
            ext.get(k).is_some_and(|r| seq_diff(r.end(), ds) > off_i)
                && (k == 0 || seq_diff(ext[k - 1].end(), ds) <= off_i)
        };
        let k = if first_after(h) {
            h
        } else if first_after(h + 1) {
            h + 1
        } else {
            return self
                .first_ext_after(off, len)
                .inspect(|&(k, _)| self.ext_hint = k);
        };
        self.ext_hint = k;
        let start = self.ring_offset(self.ext[k].start);
        (start < (off + len) as i64).then_some((k, start))
    }

    /// Queues a record boundary. Each is the end of the queued data when pushed, so the
    /// boundaries ascend in sequence space: `record_cut` and `poll_new` binary-search them.
    #[inline]
    fn push_record(&mut self, end: TcpSeqNumber) {
        debug_assert!(self.records.back().is_none_or(|&b| seq_diff(end, b) > 0));
        self.records.push_back(end);
    }

    /// Sequence number of the first octet in the send ring.
    fn data_start(&self) -> TcpSeqNumber {
        if !self.syn_acked {
            self.iss + 1
        } else {
            self.snd_una
        }
    }

    /// Copies `data` into the send buffer; returns how much fit.
    pub fn send(&mut self, data: &[u8]) -> Result<usize, ConnError> {
        if !self.may_send() {
            return Err(ConnError::CannotSend(self.state));
        }
        let (ext, base) = (&self.ext, self.data_start());
        Ok(self.tx.write(data, || ext_holes(ext, base)))
    }

    /// Lends the contiguous in-order octets to `f`, which returns how many it consumed.
    /// Fails once nothing more can arrive and everything was read.
    pub fn recv_with(&mut self, f: impl FnOnce(&[u8]) -> usize) -> Result<usize, ConnError> {
        if self.rx.is_empty() {
            let open = matches!(
                self.state,
                State::Established | State::FinWait1 | State::FinWait2
            ) && !self.fin_received;
            return if open {
                Ok(0)
            } else {
                Err(ConnError::CannotRecv(self.state))
            };
        }
        let (a, _) = self.rx.as_slices();
        let n = f(a).min(a.len());
        self.rx.drain(..n);
        // The buffer keeps its capacity while the connection is busy (a burst's buffer
        // given back at every drain made each burst grow it again: reallocations and fresh
        // pages to fault in, per burst); an idle connection gives it back at its next
        // keep-alive tick (`trim_idle_buffers`).
        self.maybe_window_update();
        Ok(n)
    }

    /// Copies received octets into `buf`.
    pub fn recv(&mut self, buf: &mut [u8]) -> Result<usize, ConnError> {
        self.recv_with(|d| {
            let n = d.len().min(buf.len());
            buf[..n].copy_from_slice(&d[..n]);
            n
        })
    }

    /// Queues a FIN after the buffered data (RFC 9293 3.10.4).
    pub fn close(&mut self) {
        match self.state {
            State::SynSent => self.enter_closed(EV_CLOSED),
            State::SynReceived | State::Established => {
                self.fin_queued = true;
                self.state = State::FinWait1;
            }
            State::CloseWait => {
                self.fin_queued = true;
                self.state = State::LastAck;
            }
            _ => {}
        }
    }

    /// Resets the connection: a RST goes out at the next poll (RFC 9293 3.10.5), then
    /// CLOSED.
    pub fn abort(&mut self) {
        let synchronized = !matches!(
            self.state,
            State::Closed | State::Listen | State::SynSent | State::TimeWait
        );
        // A RST still owed (an earlier abort not yet polled out, the FIN-WAIT-2 limit's)
        // stays owed: the host's release aborts again, and clearing it here left the peer
        // a half-open connection.
        let owed = self.rst_pending;
        // RFC 9293 3.10.5: in TIME-WAIT "respond with ok": `Closed` went on entering it.
        let ev = if self.state == State::TimeWait {
            0
        } else {
            EV_CLOSED
        };
        self.enter_closed(ev);
        // CLOSED at once; the RST leaves when the host can send it.
        self.rst_pending = synchronized || owed;
    }

    /// An ICMP hard error (Destination Unreachable, protocol or port: RFC 1122 4.2.3.9)
    /// about a segment of ours that began at `seq`: in SYN-SENT, where RFC 5461 4.1 and
    /// RFC 1122 4.2.3.9 abort on it, the connection is refused (CLOSED, reported as a
    /// reset, as a RST would be), when `seq` lies within SND.UNA..SND.NXT, what we sent and
    /// is not yet acknowledged (RFC 5927 4.1: a forged error must guess the ISN as well as
    /// the ports). Anywhere else it is ignored (RFC 5461 4.2: a synchronized connection
    /// treats hard errors as soft ones). Whether it ended the connection.
    pub(crate) fn icmp_hard_error(&mut self, seq: TcpSeqNumber) -> bool {
        if self.state != State::SynSent
            || seq_diff(seq, self.snd_una) < 0
            || seq_diff(seq, self.snd_nxt) >= 0
        {
            return false;
        }
        self.enter_closed(EV_RESET);
        true
    }

    /// The next hop did not answer a round of ARP requests (RFC 1122 2.3.2.2: the traffic
    /// held for it is given up, with an error to its sender; Linux's connect then fails
    /// with `EHOSTUNREACH`): in SYN-SENT, the connect ends as timed out (the host reports
    /// it as the next hop's failure). A synchronized connection waits on (its own user
    /// timeout and retransmissions bound it: a soft error, RFC 1122 4.2.3.9). Whether it
    /// ended the connection.
    pub(crate) fn neighbor_failed(&mut self) -> bool {
        if self.state != State::SynSent {
            return false;
        }
        self.enter_closed(EV_TIMED_OUT);
        true
    }

    /// A RST is owed and not yet sent (an abort's, or the FIN-WAIT-2 limit's).
    pub(crate) fn rst_owed(&self) -> bool {
        self.rst_pending
    }

    /// The host may free the connection (CLOSED, its events taken).
    pub fn is_finished(&self) -> bool {
        self.finished && self.events == 0 && !self.rst_pending
    }

    /// RFC 6191 2 (RFC 9293 3.6.1 MAY-2 and MAY-3, RFC 1122 4.2.2.13): whether `syn`, a SYN
    /// for this connection's 4-tuple while it is in TIME-WAIT, opens a new incarnation (the
    /// host drops this TCB with [`Connection::end_time_wait_for_reopen`] and hands the SYN
    /// to its listener) instead of drawing a challenge ACK. Safe because our timestamp
    /// clock offset is the same for every incarnation of a 4-tuple (module `host::isn`):
    /// - both this incarnation and the new one use timestamps: its TSval is newer than the
    ///   last one seen here, or equal to it with a sequence number above RCV.NXT;
    /// - only the new one does: always (PAWS and RFC 7323 3.2 keep this one's segments out);
    /// - the new one does not: its sequence number is above RCV.NXT (RFC 1122 4.2.2.13).
    pub fn time_wait_reopens(&self, syn: &TcpRepr<'_>) -> bool {
        if self.state != State::TimeWait
            || syn.control != TcpControl::Syn
            || syn.ack_number.is_some()
        {
            return false;
        }
        match syn.timestamp.filter(|_| self.cfg.timestamps) {
            // RFC 6191 2: a newer TSval, or an equal one with a sequence number above the
            // last one seen (a peer whose clock did not tick since, back from the port).
            Some(ts) if self.ts_ok => match ts.tsval.wrapping_sub(self.ts_recent) as i32 {
                0 => seq_diff(syn.seq_number, self.rcv_nxt) > 0,
                d => d > 0,
            },
            Some(_) => true,
            None => seq_diff(syn.seq_number, self.rcv_nxt) > 0,
        }
    }

    /// Ends TIME-WAIT for a SYN [`Connection::time_wait_reopens`] accepted: CLOSED with no
    /// signal (the user was told `Closed` on entering TIME-WAIT, as for a RST there,
    /// RFC 9293 3.10.7.4). Returns the smallest ISS the new incarnation may take: above
    /// every sequence number this one used (RFC 1122 4.2.2.13 (a), RFC 9293 3.6.1), by a
    /// maximal unscaled window (as Linux's `tcp_timewait_state_process`: `tw_snd_nxt +
    /// 65535 + 2`), so no ACK meant for this incarnation acknowledges the new SYN-ACK.
    pub fn end_time_wait_for_reopen(&mut self) -> TcpSeqNumber {
        let floor = self.snd_nxt + 65537;
        if self.state == State::TimeWait {
            self.enter_closed(0);
        }
        floor
    }
    /// Gives back the buffers' memory once nothing can use it any more (a released
    /// connection in TIME-WAIT: everything it sent was acknowledged, nothing more arrives).
    pub fn shed_buffers(&mut self) {
        if self.tx.len() == 0 {
            self.tx = SendRing::new(self.cfg.tx_buffer.max(1));
            self.records = Records::default();
            self.ext = VecDeque::new();
        }
        self.wrap_buf = Vec::new();
        self.rx = VecDeque::new();
        self.ooo.clear();
    }

    /// Octets of memory the buffers hold now (send ring, receive queue, out-of-order data).
    pub fn buffer_memory(&self) -> usize {
        self.tx.allocated()
            + self.rx.capacity()
            + self.ooo.octets()
            + self.wrap_buf.capacity()
            + self.records.capacity() * std::mem::size_of::<TcpSeqNumber>()
            + self.ext.capacity() * std::mem::size_of::<ExtRecord>()
    }

    /// Counts the octets this connection holds out of order against the host's `budget`
    /// from now on (`StackConfig::out_of_order_budget_bytes`): an out-of-order segment
    /// whose new octets would take the host past it is dropped. A connection outside a host
    /// has none: its window alone bounds what it holds.
    pub(crate) fn set_out_of_order_budget(
        &mut self,
        budget: std::sync::Arc<OutOfOrderBudget>,
        key: u32,
    ) {
        self.ooo.set_budget(budget, Some(key));
    }

    /// Octets held out of order now.
    pub(crate) fn out_of_order_octets(&self) -> usize {
        self.ooo.octets()
    }

    /// The octets of the segment just handled that the host's out-of-order budget refused,
    /// if any (taken: asked again, `None`).
    #[inline(always)]
    pub(crate) fn take_refused_out_of_order(&mut self) -> Option<RefusedOutOfOrder> {
        self.refused_ooo.take()
    }

    /// Stores the refused octets `r` of `seg`, the segment they were refused from, again, once
    /// the host had another connection renege (the segment's other effects, its ACK and
    /// D-SACK block, happened when it was handled). True if they are held now.
    pub(crate) fn store_refused_out_of_order(
        &mut self,
        seg: &TcpRepr<'_>,
        r: RefusedOutOfOrder,
    ) -> bool {
        // The segment the octets were refused from, and no other.
        if seg.seq_number != r.seq || seg.payload.len() != r.payload_len {
            return false;
        }
        let Some(data) = seg.payload.get(r.start..r.start + r.len) else {
            return false;
        };
        // Nothing the connection did since can have moved RCV.NXT past them or purged
        // them (the host asks right after the segment), but check rather than assume.
        if r.off <= self.rcv_off || self.fin_received {
            return false;
        }
        self.ooo.insert(r.off, data) == reasm::Stored::Held
    }

    /// Gives up at least `n` of the octets held out of order (all if fewer), the highest
    /// first ([`Reassembly::renege`]; RFC 2018 8), for a connection the host's budget
    /// refused; returns the octets given up.
    pub(crate) fn renege_out_of_order(&mut self, n: usize) -> usize {
        let freed = self.ooo.renege(n);
        self.stats.out_of_order_reneged += freed as u64;
        freed
    }

    /// Counters.
    pub fn stats(&self) -> ConnStats {
        ConnStats {
            recovery: self.rec.stats(),
            ..self.stats
        }
    }

    /// Takes the next event.
    pub fn poll_event(&mut self) -> Option<ConnEvent> {
        // Most calls find none (the host asks after every activity).
        if self.events == 0 {
            return None;
        }
        // The lowest bit set first (the order of the EV_ constants), without a walk over
        // all seven.
        let bit = self.events & self.events.wrapping_neg();
        self.events &= !bit;
        Some(match bit {
            EV_CONNECTED => ConnEvent::Connected,
            EV_READABLE => ConnEvent::Readable,
            EV_WRITABLE => ConnEvent::Writable,
            EV_PEER_CLOSED => ConnEvent::PeerClosed,
            EV_CLOSED => ConnEvent::Closed,
            EV_RESET => ConnEvent::Reset,
            // `events` holds no other bit than these seven.
            _ => ConnEvent::TimedOut,
        })
    }

    fn enter_closed(&mut self, ev: u8) {
        if self.state != State::Closed {
            self.state = State::Closed;
            self.events |= ev;
        }
        self.finished = true;
        self.rst_pending = false;
        self.rst_at = None;
        self.reopen_resend = false;
        self.delack_at = None;
        self.keepalive_at = None;
        self.ts_refresh_at = None;
        self.window_probe_at = None;
        self.time_wait_at = None;
        self.ack_now = false;
        // Nothing will fill the gaps: the octets held out of order go back to the host's
        // budget now, not when the user releases the connection.
        self.ooo.clear();
    }

    // ------------------------------------------------------------------ receive

    /// Our receive window now (octets), before scaling: what the receive path accepts past
    /// RCV.NXT. The buffer's free space, or as far as the right edge last offered where
    /// that lies further ([`Self::window_field`] rounds it up to the window scale's unit
    /// rather than move it left): every octet we offered is taken.
    fn rcv_wnd(&self) -> usize {
        self.rcv_free()
            .max(self.rcv_adv.saturating_sub(self.rcv_off) as usize)
    }

    /// The receive buffer's free space (octets).
    fn rcv_free(&self) -> usize {
        self.rx_window.saturating_sub(self.rx.len())
    }

    /// How far the right edge of the window offered must be able to move before it moves:
    /// min(Fr * RCV.BUFF, MSS) with Fr = 1/2 (RFC 9293 3.8.6.2.2), and at least one octet:
    /// with a window of one octet (`rx_buffer` or `rx_window_clamp` 1, which the tuning
    /// accepts) half of it rounded down to 0, every test of the free space against the step
    /// held with the buffer full, and `window_field` reopened the window shut by the peer's
    /// octet at once, by a unit past the full buffer (a second octet queued in a one-octet
    /// buffer). Test: `conn_window::a_one_octet_buffer_offers_no_window_when_full`.
    fn sws_step(&self) -> usize {
        (self.rx_window / 2).min(usize::from(self.cfg.mss)).max(1)
    }

    /// Lifts [`ConnConfig::rx_window_clamp`]: the window is offered from the whole
    /// `rx_buffer` from now on, and the larger window is announced at the next transmit
    /// opportunity if it grew by the RFC 9293 3.8.6.2.2 step (returns whether an update is
    /// owed). Nothing changes without a clamp.
    pub fn clear_window_clamp(&mut self) -> bool {
        if self.rx_window == self.cfg.rx_buffer {
            return false;
        }
        self.rx_window = self.cfg.rx_buffer;
        if matches!(self.state, State::SynSent | State::SynReceived) {
            // The handshake's own next segment offers the window.
            return false;
        }
        self.maybe_window_update();
        self.ack_now
    }

    /// The window offered (octets, before scaling), with receiver SWS avoidance (RFC 1122
    /// 4.2.3.3, a MUST; RFC 9293 3.8.6.2.2): the right edge last offered stays where it is
    /// until the free space reaches past it by `sws_step`, so a buffer read in small pieces
    /// offers no window of a few octets for a sender to fill with a segment as small.
    fn rcv_wnd_offered(&self) -> usize {
        let free = self.rcv_free();
        let held = self.rcv_adv.saturating_sub(self.rcv_off) as usize;
        if free >= held + self.sws_step() {
            free
        } else {
            held.min(free)
        }
    }

    /// The window field of our next segment: [`Self::rcv_wnd_offered`] scaled down. A scaled
    /// window is a multiple of the unit 2^shift from SEG.ACK, and RCV.NXT moves by any
    /// number of octets, so the right edge last offered (`rcv_adv`) is rarely one of them:
    /// rounded down, it moved left by up to 2^shift - 1 octets at each ACK while we held
    /// it (RFC 9293 3.8.6, SHLD-14: a receiver should not shrink the window; RFC 7323
    /// 2.4). It is rounded up instead, as Linux's `tcp_select_window`
    /// (`ALIGN(cur_win, 1 << rcv_wscale)`), and [`Self::rcv_wnd`] accepts up to it. Each
    /// such ACK may move the edge up to 2^shift - 1 octets further past the buffer's free
    /// space, so it runs ahead by at most [`Self::rcv_run_ahead`] (a sixteenth of the
    /// buffer), where it moves left by less than the unit again: the receive queue never
    /// holds more than the buffer and that sixteenth.
    fn window_field(&self) -> u16 {
        let shift = self.rcv_shift;
        let down = self.rcv_wnd_offered() >> shift;
        let held = self.rcv_adv.saturating_sub(self.rcv_off) as usize;
        let up = (held + (1 << shift) - 1) >> shift;
        // The buffer and its run-ahead, less what the queue holds (more than the buffer
        // once the edge ran ahead and the peer filled it).
        let most = (self.rx_window + self.rcv_run_ahead()).saturating_sub(self.rx.len()) >> shift;
        let field = down.max(up.min(most)).min(0xffff) as u16;
        if field == 0 && (held != 0 || self.rcv_free() >= self.sws_step()) {
            return self.window_field_within_unit(held);
        }
        field
    }

    /// [`Self::window_field`] when it came to zero with an edge offered past RCV.NXT: the
    /// run-ahead (a sixteenth of the buffer) is less than one unit of 2^shift, which only a
    /// [`ConnConfig::rx_window_clamp`] below 16 units makes so (the shift is chosen for
    /// `rx_buffer`: a 4096-octet clamp under a 512 MiB buffer's shift of 14). Zero would
    /// move the right edge left to RCV.NXT, by up to the whole window offered, and close
    /// it with the buffer free (RFC 9293 3.8.6, SHLD-14; RFC 7323 2.4): the held edge is
    /// rounded up to the unit instead, as Linux's `tcp_select_window` (`ALIGN(cur_win, 1 <<
    /// rcv_wscale)`, never shrink), with a run-ahead of one unit, while the queue is
    /// within the clamp. Once the peer's octets take the queue past the clamp, the field
    /// is 0 and the edge moves back to RCV.NXT, by less than one unit (RFC 7323 2.4's
    /// allowance; the segments beyond it are refused and resent): so under such a clamp
    /// the queue holds at most the clamp and one unit (4096 + 16,384 octets there), still
    /// far from `rx_buffer`. Likewise a window shut as offered (nothing held) whose free
    /// space is at least the RFC 9293 3.8.6.2.2 step but less than one unit (the peer
    /// filled it past the clamp, then the application read): it reopens by one unit, as
    /// Linux's `__tcp_select_window` rounds the free space up to the unit ("prevent zero
    /// window announcement if 1<<rcv_wscale > mss"); rounded down it stayed shut for as
    /// long as the clamp held. Test: `conn_window::clamp_below_one_unit_never_shrinks`.
    #[cold]
    #[inline(never)]
    fn window_field_within_unit(&self, held: usize) -> u16 {
        let shift = self.rcv_shift;
        let unit = 1usize << shift;
        let up = ((held + unit - 1) >> shift).max(usize::from(self.rcv_free() >= self.sws_step()));
        let run_ahead = self.rcv_run_ahead().max(unit);
        let most = (self.rx_window + run_ahead).saturating_sub(self.rx.len()) >> shift;
        up.min(most).min(0xffff) as u16
    }

    /// How far the right edge offered may run ahead of the receive buffer's free space
    /// ([`Self::window_field`]): a sixteenth of the buffer. The edge runs ahead by less
    /// than 2^shift octets at each ACK while the application reads slower than the peer
    /// sends; a window closed from full with one ACK a segment stays within it up to a
    /// window scale of 7 (4 to 8 MiB buffers).
    fn rcv_run_ahead(&self) -> usize {
        self.rx_window / 16
    }

    fn maybe_window_update(&mut self) {
        // RFC 9293 3.8.6.2.2: announce a larger window once it grew by at least
        // min(buffer / 2, MSS) past what was advertised. The edge is the one the window
        // field can carry (`window_field`: whole units of 2^shift, 65,535 of them at most;
        // Linux's `__tcp_cleanup_rbuf` compares `__tcp_select_window`'s): a buffer past
        // that without window scaling, or a read shorter than the unit with a large shift,
        // moves no edge the peer sees, and an ACK for it repeated SEG.ACK and the window,
        // a duplicate ACK to a peer with data in flight (RFC 5681 2). Test:
        // `conn_window::reads_send_no_window_update_the_field_cannot_carry`.
        let shift = self.rcv_shift;
        let carried = (self.rcv_free().min(0xffff_usize << shift) >> shift) << shift;
        let edge = self.rcv_off + carried as u64;
        let step = self.sws_step() as u64;
        // Or a window shut as offered whose free space reached the step but not one unit:
        // `window_field` reopens it by the unit (`window_field_within_unit`), and without
        // this update the peer, which only probes, saw it shut for as long as the clamp
        // held (or, without a clamp, where the unit exceeds the MSS, a buffer past 64 MiB,
        // until a whole unit was free; the unit offered there lies within the run-ahead).
        let reopens =
            |c: &Self| c.rcv_adv <= c.rcv_off && carried == 0 && c.rcv_free() as u64 >= step;
        if (edge >= self.rcv_adv + step || reopens(self)) && self.state != State::Closed {
            self.ack_now = true;
        }
    }

    fn ts_now(&self, now: Instant) -> u32 {
        (now.total_micros() as u32).wrapping_add(self.ts_offset)
    }

    /// A segment of this connection arrived (checksum verified by the host).
    pub fn handle_segment(&mut self, now: Instant, seg: &TcpRepr<'_>) {
        self.handle_segment_with(now, seg, &mut |_| 0);
    }

    /// [`Self::handle_segment`], offering in-order payload to `deliver` first: while the
    /// receive queue is empty, the octets that arrive in order are lent to `deliver`
    /// straight from the segment (the received frame), and only what it does not consume
    /// (returns less than the length) is copied into the queue. What it consumed counts as
    /// read: the window does not shrink for it, and no `Readable` event is raised unless
    /// octets were queued. Octets after a queued one always queue (the stream's order is
    /// kept). Out-of-order data is never offered before the gap before it fills.
    pub fn handle_segment_with(
        &mut self,
        now: Instant,
        seg: &TcpRepr<'_>,
        deliver: &mut dyn FnMut(&[u8]) -> usize,
    ) {
        self.stats.segments_received += 1;
        match self.state {
            State::Closed | State::Listen => {}
            State::SynSent => self.on_syn_sent(now, seg),
            _ => self.on_synchronized(now, seg, deliver),
        }
    }

    /// [`Self::handle_segment_with`] of a segment whose SACK option carried a fourth block,
    /// `fourth`, beside the three of `seg` (smoltcp's parser keeps three; 40 octets of
    /// options hold four without timestamps, RFC 2018 3, as Linux and others send them):
    /// the scoreboard takes all four.
    #[cold]
    pub fn handle_segment_with_fourth_sack(
        &mut self,
        now: Instant,
        seg: &TcpRepr<'_>,
        fourth: Option<(u32, u32)>,
        deliver: &mut dyn FnMut(&[u8]) -> usize,
    ) {
        self.rx_sack4 = fourth.filter(|_| seg.sack_ranges[2].is_some());
        self.handle_segment_with(now, seg, deliver);
        self.rx_sack4 = None;
    }

    /// RFC 9293 3.10.7.3.
    fn on_syn_sent(&mut self, now: Instant, seg: &TcpRepr<'_>) {
        if let Some(ack) = seg.ack_number {
            if ack <= self.iss || ack > self.snd_nxt {
                if seg.control != TcpControl::Rst {
                    self.queue_rst_for_ack(ack);
                }
                return;
            }
        }
        if seg.control == TcpControl::Rst {
            // RFC 5961 3.2 / RFC 9293: only with an acceptable ACK.
            if seg.ack_number.is_some() {
                self.enter_closed(EV_RESET);
            }
            return;
        }
        if seg.control != TcpControl::Syn {
            return;
        }
        self.take_syn_options(seg, now);
        self.irs = seg.seq_number;
        self.rcv_nxt = seg.seq_number + 1;
        self.last_ack_sent = self.rcv_nxt;
        self.last_heard = now;
        self.snd_wnd = usize::from(seg.window_len); // SYN windows are never scaled
        self.max_snd_wnd = self.snd_wnd;
        self.rec.set_window_shut(now, self.snd_wnd == 0);
        self.snd_wl1 = seg.seq_number;
        if let Some(ack) = seg.ack_number {
            self.snd_wl2 = ack;
            let ts_rtt = self.ts_rtt(now, seg);
            self.snd_una = ack;
            // `ack` is acceptable (above): it covers our SYN and nothing else was sent.
            self.syn_acked = true;
            self.rec.on_ack(now, ack, &[], ts_rtt);
            self.rec.on_handshake_done();
            self.state = State::Established;
            self.events |= EV_CONNECTED;
            self.ack_now = true;
            self.arm_keepalive(now);
            self.arm_ts_refresh(now);
        } else {
            // Simultaneous open (RFC 9293 3.5): SYN-RECEIVED, our SYN goes again with ACK.
            // SND.NXT stays past our SYN if it left: the peer may acknowledge it before our
            // SYN-ACK goes (its SYN-ACK answers our SYN); `send_syn` registers the SYN-ACK
            // with the fresh recovery state as a first transmission.
            self.state = State::SynReceived;
            self.syn_sent = false;
            self.rec = Recovery::new(&self.cfg.recovery, self.smss, now);
            self.rec.set_window_shut(now, self.snd_wnd == 0);
        }
    }

    fn ts_rtt(&self, now: Instant, seg: &TcpRepr<'_>) -> Option<Duration> {
        if !self.ts_ok {
            return None;
        }
        let ts = seg.timestamp?;
        if ts.tsecr == 0 {
            return None;
        }
        let d = self.ts_now(now).wrapping_sub(ts.tsecr);
        // An echo from the future or older than a minute is not a sample.
        (d < 60_000_000).then(|| Duration::from_micros(u64::from(d)))
    }

    /// A challenge ACK (RFC 5961 3.2, 4.2, 5.2), under both limits Linux's
    /// `tcp_send_challenge_ack` applies: first the one for every ACK that answers a bad
    /// segment ([`ConnConfig::oow_ack_interval`], as [`Self::oow_ack`]), so that forged
    /// RSTs and SYNs and out-of-window segments together draw one ACK per interval, then
    /// RFC 5961 7's few a second.
    fn challenge_ack(&mut self, now: Instant) {
        if self.oow_limited(now) {
            return;
        }
        if now - self.challenge_window >= Duration::from_secs(1) {
            self.challenge_window = now;
            self.challenges = 0;
        }
        if self.challenges < CHALLENGE_ACKS_PER_SEC {
            self.challenges += 1;
            self.stats.challenge_acks += 1;
            self.last_oow_ack = Some(now);
            self.ack_now = true;
        }
    }

    /// Whether an ACK answering a bad segment now would come less than
    /// [`ConnConfig::oow_ack_interval`] after the last one (counted as suppressed).
    fn oow_limited(&mut self, now: Instant) -> bool {
        if let Some(last) = self.last_oow_ack {
            if now >= last && now - last < self.cfg.oow_ack_interval {
                self.stats.oow_acks_suppressed += 1;
                return true;
            }
        }
        false
    }

    /// Owes the ACK that answers a segment outside the window (RFC 9293 3.10.7.4 first
    /// check, or one PAWS rejects) or an ACK outside RFC 5961 5.2's range, unless one such
    /// ACK went less than [`ConnConfig::oow_ack_interval`] ago and `limited` (as Linux's
    /// `__tcp_oow_rate_limited`): two endpoints out of step (or a forger reflecting off
    /// us) would otherwise answer each other's ACKs with ACKs for ever. RFC 5961 7 bounds
    /// only challenge ACKs; the RFCs' "an acknowledgment should be sent in reply" is kept
    /// for the first of each interval.
    fn oow_ack(&mut self, now: Instant, limited: bool) {
        if limited {
            if self.oow_limited(now) {
                return;
            }
            self.last_oow_ack = Some(now);
        }
        self.ack_now = true;
    }

    /// RFC 9293 3.10.7.4 for every state past SYN-SENT.
    fn on_synchronized(
        &mut self,
        now: Instant,
        seg: &TcpRepr<'_>,
        deliver: &mut dyn FnMut(&[u8]) -> usize,
    ) {
        if fast_paths() && self.take_predicted(now, seg, deliver) {
            return;
        }
        // A RST's payload (RFC 9293 3.5.3: diagnostic text) takes no sequence space the
        // acceptability test weighs: a RST exactly at RCV.NXT is acceptable with the
        // window zero (3.10.7.4: "special allowance should be made to accept valid ACKs,
        // URGs, and RSTs"), data or not.
        let seg_len = if seg.control == TcpControl::Rst {
            0
        } else {
            seg.segment_len()
        };
        let wnd = self.rcv_wnd();
        // First: sequence number acceptability.
        let rel = seq_diff(seg.seq_number, self.rcv_nxt);
        // The peer's SYN again in SYN-RECEIVED: our SYN-ACK may have been lost, and the peer
        // waits for it. Its SEG.SEQ is RCV.NXT - 1, which fails the acceptability test
        // below, so it is taken here: the SYN-ACK goes again at once, not at our RTO
        // (as Linux's `tcp_check_req`). At most one per `oow_ack_interval`, as there
        // (`tcp_oow_rate_limited`, `TCPACKSkippedSynRecv`; RFC 5961 7): each copy of the
        // SYN drew a SYN-ACK, a retransmission of ours that restarted its timer.
        if seg.control == TcpControl::Syn
            && seg.ack_number.is_none()
            && self.state == State::SynReceived
            && !self.active
            && rel == -1
        {
            if !self.oow_limited(now) {
                self.last_oow_ack = Some(now);
                self.syn_sent = false;
            }
            return;
        }
        // Simultaneous open (RFC 9293 3.5, Figure 8): in SYN-RECEIVED from SYN-SENT the peer's
        // SYN-ACK answers our SYN-ACK. Its SEG.SEQ is RCV.NXT - 1 (its SYN, taken already),
        // which fails the acceptability test, but its ACK completes the handshake: it is
        // taken as the same segment past its SYN (as Linux's `tcp_validate_incoming` lets
        // it through). Any data it carries goes again once we acknowledge.
        if seg.control == TcpControl::Syn
            && seg.ack_number.is_some()
            && self.active
            && !self.syn_acked
            && rel == -1
        {
            // RFC 7323 2.2: its window is not scaled; as a scaled one it is rounded down.
            let mut rest = *seg;
            rest.control = TcpControl::None;
            rest.seq_number = self.rcv_nxt;
            rest.window_len = seg.window_len >> self.snd_shift;
            rest.payload = &[];
            self.on_synchronized(now, &rest, deliver);
            if self.syn_acked && !self.syn_sent {
                // Established before our SYN-ACK left: the peer's SYN is acknowledged now.
                self.ack_now = true;
            }
            return;
        }
        let end_rel = rel + seg_len as i64 - 1;
        // With our window shut no segment with octets is acceptable, "but special allowance
        // should be made to accept valid ACKs" (RFC 9293 3.10.7.4): one at RCV.NXT (the
        // peer's zero-window probe, or data it sent before our window closed) goes through
        // for its ACK, window and timestamp, its octets and FIN not taken (below), as
        // Linux's `tcp_sequence` lets it through and `tcp_data_queue` drops the data.
        // Dropped whole, the ACK of our data a probe carries was lost with it. A bare FIN
        // at RCV.NXT is taken whole: it needs no room in the buffer (Linux's
        // `tcp_data_queue` queues it with a zero window, "Some stacks are known to send bare
        // FIN packets in a loop even if we send RWIN 0"). Refused, the peer's close waited
        // for its next retransmission after our window opened, up to the RTO ceiling, or
        // was lost to a peer that gave up retransmitting it meanwhile (Linux's orphan
        // retries). Test: `rfc9293_3_10_7_4_a_bare_fin_is_taken_with_the_window_shut`.
        // So is a segment with an ACK (no RST: that one stays unacceptable) that begins
        // before RCV.NXT and reaches it (a retransmission of octets taken before plus new
        // ones): Linux's `tcp_sequence` takes any segment that overlaps RCV.NXT, processes
        // its ACK and `tcp_data_queue` drops its data (RFC 9293 3.10.7.4, "special
        // allowance ... to accept valid ACKs"). Dropped whole, the ACK of our data it
        // carried was lost with it. Test:
        // `conn_window::a_shut_window_takes_the_ack_of_a_segment_from_before_rcv_nxt`.
        let bare_fin = seg.control == TcpControl::Fin && seg.payload.is_empty() && rel == 0;
        let overlaps =
            rel < 0 && end_rel >= 0 && seg.ack_number.is_some() && seg.control != TcpControl::Rst;
        let shut = seg_len > 0 && wnd == 0 && (rel == 0 || overlaps) && !bare_fin;
        let acceptable = match (seg_len, wnd) {
            (0, 0) => rel == 0,
            (0, _) => rel >= 0 && rel < wnd as i64,
            (_, 0) => shut || bare_fin,
            // RFC 9293 3.10.7.4's two tests, and a segment that begins before RCV.NXT and
            // ends past the window (neither end in it, yet it holds the whole window): it
            // is trimmed to the window ("trimming off any portions that lie outside the
            // window", `process_text`), as Linux's `tcp_sequence` and BSD's `tcp_input`
            // take any segment that overlaps the window. Refused, a retransmission cut so
            // (coalesced or repacketised, past a window the peer overran) brought nothing
            // in until the window opened past its end. Test:
            // `conn_window::rfc9293_3_10_7_4_a_segment_spanning_the_window_is_trimmed_not_dropped`.
            (_, _) => rel < wnd as i64 && end_rel >= 0,
        };
        // RFC 7323 3.2: once both SYNs carried TSopt, every non-RST segment must: one
        // without it is dropped silently (a RST is processed without it).
        if self.ts_ok && seg.timestamp.is_none() && seg.control != TcpControl::Rst {
            self.stats.ts_missing_dropped += 1;
            return;
        }
        // Linux's `tcp_oow_rate_limited`: "Data packets without SYNs are not likely part of
        // an ACK loop". A FIN counts as data (it takes sequence space), a SYN does not.
        let no_data = seg_len == 0 || seg.control == TcpControl::Syn;
        // PAWS (RFC 7323 5.3), before anything else but RST.
        if self.ts_ok && seg.control != TcpControl::Rst {
            if let Some(ts) = seg.timestamp {
                let stale = now - self.ts_recent_at > TS_STALE;
                if !stale && (ts.tsval.wrapping_sub(self.ts_recent) as i32) < 0 {
                    self.stats.paws_dropped += 1;
                    // RFC 7323 5.3's ACK, limited as the first check's (Linux: the same
                    // `tcp_oow_rate_limited`, `TCPACKSkippedPAWS`).
                    self.oow_ack(now, no_data);
                    if rel < 0 && !seg.payload.is_empty() {
                        // Octets received before, most often a segment the network held
                        // back past its retransmission (which moved TS.Recent on): the
                        // duplicate is reported as a D-SACK block (RFC 2883 4), as Linux's
                        // `tcp_send_dupack` does, so the sender learns the retransmission
                        // was not needed (RFC 8985 6.2 step 4).
                        let start = self.rcv_off as i64 + rel;
                        let end = (start + seg.payload.len() as i64).min(self.rcv_off as i64);
                        self.note_duplicate(start, end);
                    }
                    return;
                }
            }
        }
        // The peer is alive if it acknowledges something plausible, in window or not (a
        // keep-alive probe is deliberately just outside it, RFC 9293 3.8.4).
        if let Some(ack) = seg.ack_number {
            let plausible = ack <= self.snd_nxt
                && seq_diff(self.snd_una, ack) <= self.max_snd_wnd.max(1) as i64;
            if plausible && seg.control != TcpControl::Rst {
                self.last_heard = now;
            }
        }
        if !acceptable {
            // RFC 9293 3.10.7.4 second / RFC 5961 3.2, after the peer's FIN: a peer that
            // closes and then aborts (macOS on ^C) sends its RST at the FIN's own sequence
            // number, RCV.NXT - 1 once the FIN is taken. It resets, as Linux's
            // `tcp_reset_check` has it (CLOSE-WAIT, LAST-ACK, CLOSING); dropped, the
            // connection waited on a peer that is gone, in LAST-ACK until our FIN's
            // retransmissions gave up. Test: `a_rst_at_the_peers_fin_resets_after_the_fin`.
            if seg.control == TcpControl::Rst
                && rel == -1
                && self.fin_received
                && matches!(
                    self.state,
                    State::CloseWait | State::LastAck | State::Closing
                )
            {
                self.enter_closed(EV_RESET);
                return;
            }
            if seg.control == TcpControl::Syn {
                // RFC 5961 4.2 (RFC 9293 3.10.7.4 fourth): a SYN draws a challenge ACK
                // "irrespective of the sequence number", so one outside the window too,
                // under the challenge ACK limit (RFC 5961 7). Answered by the first check's
                // ACK instead, a flood of forged SYNs drew one ACK each.
                self.challenge_ack(now);
                return;
            }
            if seg.control != TcpControl::Rst {
                self.stats.duplicates += 1;
                // An old FIN or segment: our ACK tells the peer where we are; one for
                // each duplicate that occupies sequence space (RFC 5681 4.2). One without
                // (a pure ACK) is answered at most once per `oow_ack_interval`: two
                // endpoints out of step would trade such ACKs for ever (Linux's
                // `tcp_validate_incoming`).
                self.oow_ack(now, no_data);
                self.quick_ack |= seg_len > 0;
                if end_rel < 0 && !seg.payload.is_empty() {
                    // Octets all received before: reported as a D-SACK block.
                    let start = self.rcv_off as i64 + rel;
                    self.note_duplicate(start, start + seg.payload.len() as i64);
                }
                if self.state == State::TimeWait && seg.control == TcpControl::Fin {
                    self.time_wait_at = Some(now + self.cfg.time_wait);
                }
            }
            return;
        }
        // Second: RST (RFC 5961 3.2).
        if seg.control == TcpControl::Rst {
            if rel == 0 {
                // RFC 9293 3.10.7.4: in TIME-WAIT the TCB goes without a signal: the user
                // was told `Closed` when both FINs were through, and a graceful close is
                // no reset (a client back on the same port sends this RST).
                let ev = if self.state == State::TimeWait {
                    0
                } else {
                    EV_RESET
                };
                self.enter_closed(ev);
            } else {
                self.challenge_ack(now);
            }
            return;
        }
        // Fourth: SYN in a synchronized state (RFC 5961 4.2): challenge ACK.
        if seg.control == TcpControl::Syn {
            self.challenge_ack(now);
            return;
        }
        // Fifth: ACK.
        let Some(ack) = seg.ack_number else {
            return;
        };
        self.last_heard = now;
        // SYN-RECEIVED, or a close in it (FIN-WAIT-1 at once, RFC 9293 3.10.4) before our
        // SYN is acknowledged: an ACK that does not cover our SYN is not acceptable and
        // draws <SEQ=SEG.ACK><CTL=RST>, its data untaken (3.10.7.4 fifth, SYN-RECEIVED).
        // Tested on the state alone, the closed connection took it as a synchronized
        // one's. In `conn_script`:
        // `close_in_syn_received_still_rejects_an_ack_short_of_our_syn`.
        if !self.syn_acked {
            if !(ack > self.snd_una && ack <= self.snd_nxt) {
                self.queue_rst_for_ack(ack);
                return;
            }
            if self.state == State::SynReceived {
                self.state = State::Established;
                self.events |= EV_CONNECTED;
                if self.fin_queued {
                    self.state = State::FinWait1;
                }
                self.arm_keepalive(now);
                self.arm_ts_refresh(now);
            }
        }
        // RFC 5961 5.2: SND.UNA - MAX.SND.WND <= SEG.ACK <= SND.NXT. Outside it the segment
        // is dropped and an ACK sent, at most one per `oow_ack_interval` whether or not it
        // carried data (Linux answers a too old ACK with `tcp_send_challenge_ack`, limited
        // by `__tcp_oow_rate_limited` alone): its data is never taken, so answering every
        // copy only reflects a forger's flood.
        if ack > self.snd_nxt || seq_diff(self.snd_una, ack) > self.max_snd_wnd.max(1) as i64 {
            self.oow_ack(now, true);
            return;
        }
        // Timestamp bookkeeping (RFC 7323 4.3 (2)): TS.Recent takes SEG.TSval if it is not
        // older and SEG.SEQ <= Last.ACK.sent, so an ACK echoes the earliest segment it
        // acknowledges that arrived after the last ACK we sent. A TS.Recent gone stale is
        // invalid (5.5): the segment PAWS let through for it sets it whatever its TSval
        // (as Linux's `tcp_replace_ts_recent`), or a peer clock that moved more than half
        // its space meanwhile (2^31 ticks: 36 minutes of a microsecond clock such as ours)
        // would leave it stale for good, PAWS off and every echo wrong.
        if let (true, Some(ts)) = (self.ts_ok, seg.timestamp) {
            let stale = now - self.ts_recent_at > TS_STALE;
            if seq_diff(seg.seq_number, self.last_ack_sent) <= 0
                && (stale || (ts.tsval.wrapping_sub(self.ts_recent) as i32) >= 0)
            {
                self.ts_recent = ts.tsval;
                self.ts_recent_at = now;
            }
        }
        self.process_ack(now, seg, ack);
        if self.state == State::Closed {
            return;
        }
        // Seventh: text; eighth: FIN.
        if shut {
            // Nothing of it fits the shut window: answered with our ACK and window, as the
            // unacceptable segment it was before its ACK was taken (RFC 9293 3.10.7.4).
            self.stats.duplicates += 1;
            self.ack_now = true;
            self.quick_ack = true;
            if rel < 0 && !seg.payload.is_empty() {
                // Its octets before RCV.NXT were received before: reported as a D-SACK
                // block (RFC 2883 4), as Linux's `tcp_data_queue` does before it drops
                // the tail the shut window cannot take.
                let start = self.rcv_off as i64 + rel;
                let end = (start + seg.payload.len() as i64).min(self.rcv_off as i64);
                self.note_duplicate(start, end);
            }
        } else if matches!(
            self.state,
            State::Established | State::FinWait1 | State::FinWait2
        ) {
            self.process_text(now, seg, deliver);
        } else if seg_len > 0 {
            // Data after the peer's FIN: ignore, but tell it where we are.
            self.ack_now = true;
        }
    }

    /// Header prediction (the receive fast path of RFC 9293 3.10.7.4's processing, as in
    /// Jacobson's and Linux's `tcp_rcv_established`): the next in-order data segment of an
    /// established connection, its timestamp what the general path would take without a
    /// second look, and either acknowledging nothing new with the window as it was, or
    /// acknowledging new data of ours. Does exactly what the general path does with such a
    /// segment, in fewer steps; returns false, having changed nothing, for any other
    /// segment. What each condition spares:
    ///
    /// * ESTABLISHED, no SYN, FIN or RST (PSH is allowed): no state change, no FIN;
    /// * SEG.SEQ = RCV.NXT, some octets, all within the window: acceptable (first check),
    ///   nothing to trim (seventh), no out-of-order data or FIN waiting behind it;
    /// * a timestamp not older than TS.Recent where they are in use: PAWS passes (RFC 7323
    ///   5.3) and TS.Recent takes it (4.3);
    /// * either SEG.ACK = SND.UNA, no SACK blocks, the window as it is and open: nothing
    ///   acknowledged, nothing for recovery, acceptable under RFC 5961 5.2 and a sign of
    ///   life, and the window update (fifth) moves only SND.WL1/WL2;
    /// * or SND.UNA < SEG.ACK <= SND.NXT with no FIN of ours sent (Linux's fast path takes
    ///   such a data segment too, calling `tcp_ack` from it, though only with the window
    ///   unchanged): acceptable under RFC 5961 5.2, and the general ACK
    ///   processing (`process_ack`: SACK, the scoreboard, the window) changes no state, so
    ///   the text that follows is taken as in the first case. Each segment of a
    ///   request/response exchange (an RDMA Write answered by a Write, a Send by a Send)
    ///   is one of these.
    ///
    /// A bulk receiver's segments and a ping-pong's all take this path;
    /// `tests/conn_script.rs` holds it to the general path over seeded scripts of
    /// segments around it (feature `self-check`).
    #[inline]
    fn take_predicted(
        &mut self,
        now: Instant,
        seg: &TcpRepr<'_>,
        deliver: &mut dyn FnMut(&[u8]) -> usize,
    ) -> bool {
        let len = seg.payload.len();
        let ts = if self.ts_ok {
            match seg.timestamp {
                Some(ts) if ts.tsval.wrapping_sub(self.ts_recent) as i32 >= 0 => Some(ts),
                _ => return false,
            }
        } else {
            None
        };
        let Some(ack) = seg.ack_number else {
            return false;
        };
        let in_order = self.state == State::Established
            && matches!(seg.control, TcpControl::None | TcpControl::Psh)
            && seg.seq_number == self.rcv_nxt
            && len > 0
            && len <= self.rcv_wnd()
            && self.ooo.is_empty()
            && self.fin_off.is_none();
        if !in_order {
            return false;
        }
        // Nothing new acknowledged: the bulk receiver's segment.
        let same = ack == self.snd_una
            && (!self.sack_ok || seg.sack_ranges.iter().all(Option::is_none))
            && self.snd_wnd > 0
            && usize::from(seg.window_len) << self.snd_shift == self.snd_wnd;
        // Or new data of ours acknowledged, within what we sent, before any FIN of ours:
        // a request's or an answer's segment, which the ACK processing below takes whole.
        let answers = !same && ack > self.snd_una && ack <= self.snd_nxt && self.fin_seq.is_none();
        if !same && !answers {
            return false;
        }
        self.last_heard = now;
        // As the general path: SEG.SEQ (= RCV.NXT) <= Last.ACK.sent only while every
        // segment received so far is acknowledged (Linux: `rcv_nxt == rcv_wup`).
        if let Some(ts) = ts.filter(|_| seq_diff(seg.seq_number, self.last_ack_sent) <= 0) {
            self.ts_recent = ts.tsval;
            self.ts_recent_at = now;
        }
        if answers {
            // The fifth step as the general path takes it (SACK blocks, the window, the
            // scoreboard); with no FIN of ours sent it changes no state.
            self.process_ack(now, seg, ack);
            #[cfg(feature = "self-check")]
            ANSWERED.with(|n| n.set(n.get() + 1));
        } else if self.snd_wl1 < seg.seq_number
            || (self.snd_wl1 == seg.seq_number && self.snd_wl2 <= ack)
        {
            // The window as it was and open: the override timeout of sender SWS avoidance
            // runs on (`process_ack`).
            self.snd_wl1 = seg.seq_number;
            self.snd_wl2 = ack;
        }
        self.take_in_order(seg.payload, deliver);
        self.took_in_order(now, false);
        #[cfg(feature = "self-check")]
        PREDICTED.with(|n| n.set(n.get() + 1));
        true
    }

    /// A bad ACK in a SYN state draws `<SEQ=SEG.ACK><CTL=RST>` (RFC 9293 3.10.7.3, 3.10.7.4
    /// fifth): how a connect learns of the peer's half-open connection of an earlier
    /// incarnation (3.5.1), whose challenge ACK (RFC 5961 4.2) carries SEG.ACK = its
    /// RCV.NXT, so the RST resets it. The connection stays as it is (its SYN goes again at
    /// its RTO); one RST is owed at a time, the latest ACK's.
    fn queue_rst_for_ack(&mut self, ack: TcpSeqNumber) {
        self.rst_at = Some(ack);
    }

    fn process_ack(&mut self, now: Instant, seg: &TcpRepr<'_>, ack: TcpSeqNumber) {
        // The SACK blocks within what is outstanding, in their order (at most four, the
        // fourth beside the segment's three when its option had one, RFC 2018 3: a fixed
        // array, no allocation per ACK).
        let mut blocks = [(TcpSeqNumber(0), TcpSeqNumber(0)); 4];
        let mut n_blocks = 0;
        if self.sack_ok {
            let fourth = self.rx_sack4;
            for &(l, r) in seg.sack_ranges.iter().flatten().chain(fourth.iter()) {
                let (l, r) = (TcpSeqNumber(l as i32), TcpSeqNumber(r as i32));
                if l >= self.snd_una && r <= self.snd_nxt && l < r {
                    blocks[n_blocks] = (l, r);
                    n_blocks += 1;
                }
            }
        }
        let sack = &blocks[..n_blocks];
        if self.sack_ok {
            if let Some((l, r)) =
                dsack_block(&seg.sack_ranges, ack, self.snd_nxt, self.max_snd_wnd.max(1))
            {
                self.rec.on_dsack(ack, self.snd_nxt, l, r);
            }
        }
        let advanced = ack > self.snd_una;
        let ts_rtt = if advanced {
            self.ts_rtt(now, seg)
        } else {
            None
        };
        let old_una = self.snd_una;
        if advanced || !sack.is_empty() || (seg.payload.is_empty() && !self.rec.is_empty()) {
            // An answer to a zero-window probe is no duplicate ACK: the shut window could
            // take nothing (RFC 5681 2's "outstanding data" it acknowledges not). Nor is
            // an ACK older than SND.UNA, one the network reordered: a duplicate ACK
            // acknowledges exactly the greatest ACK received so far (RFC 5681 2,
            // condition (e)); three such old ACKs drew a spurious fast retransmit.
            let pure_dup = ack == self.snd_una
                && seg.payload.is_empty()
                && seg.control == TcpControl::None
                && self.snd_wnd > 0
                && usize::from(seg.window_len) << self.snd_shift == self.snd_wnd;
            if advanced || !sack.is_empty() || pure_dup {
                self.rec.on_ack(now, ack, sack, ts_rtt);
            }
        }
        if !advanced && self.snd_wnd == 0 && usize::from(seg.window_len) == 0 {
            // The peer answers our probes with a zero window: it is alive, so probing goes on
            // however long the window stays shut (RFC 9293 3.8.6.1).
            self.rec.peer_alive();
        }
        if advanced {
            // Octets of data acknowledged (SYN and FIN occupy sequence space, not the ring).
            let mut n = ack - old_una;
            if !self.syn_acked {
                n -= 1; // our SYN
                self.syn_acked = true;
                self.rec.on_handshake_done();
                // A connection closed in SYN-RECEIVED (RFC 9293 3.10.4: FIN-WAIT-1 at once)
                // completes its handshake here, past the SYN-RECEIVED transition that arms
                // the timers of a synchronized connection: without them no keep-alive
                // probed a live, half-closed peer in FIN-WAIT-2 (RFC 1122 4.2.3.6) and the
                // user timeout gave it up. Test:
                // `keep_alive_probes_fin_wait_2_after_a_close_in_syn_received`.
                if self.keepalive_at.is_none() {
                    self.arm_keepalive(now);
                }
                if self.ts_refresh_at.is_none() {
                    self.arm_ts_refresh(now);
                }
            }
            if let Some(f) = self.fin_seq {
                if ack > f {
                    n -= 1;
                }
            }
            self.tx.consume(n);
            self.snd_una = ack;
            if self.may_send() && n > 0 {
                self.events |= EV_WRITABLE;
            }
            let mut acked_ext = false;
            while let Some(r) = self.ext.front() {
                if seq_diff(r.end(), ack) > 0 {
                    break;
                }
                self.ext_acked = Some(r.token);
                self.ext.pop_front();
                self.ext_hint = self.ext_hint.saturating_sub(1);
                acked_ext = true;
            }
            if acked_ext {
                self.events |= EV_WRITABLE;
            }
            self.window_probe_backoff = 0;
        }
        // Window update (RFC 9293 3.10.7.4 fifth, SND.WL1/WL2), and from every ACK that
        // advances SND.UNA whatever its SEG.SEQ (Linux's `tcp_may_update_window`): SND.WND
        // is an offset from SND.UNA, so one kept from an older ACK (the peer's segment that
        // passed the WL1 test lies above a retransmission that fills its hole and
        // acknowledges more of ours) would put the right edge past what the peer offered,
        // by everything the new ACK covers. Never from an ACK below SND.UNA ("If SND.UNA =<
        // SEG.ACK =< SND.NXT, the send window should be updated"; Linux's `old_ack`): its
        // window is an offset from that older ACK, and with SND.WL1 moved back to a
        // retransmission's SEG.SEQ (above) a segment the network held back passes the WL1
        // test. Test: `rfc9293_3_10_7_4_an_old_ack_never_moves_the_right_edge`.
        if advanced
            || (ack == self.snd_una
                && (self.snd_wl1 < seg.seq_number
                    || (self.snd_wl1 == seg.seq_number && self.snd_wl2 <= ack)))
        {
            let was_zero = self.snd_wnd == 0;
            self.snd_wnd = usize::from(seg.window_len) << self.snd_shift;
            self.rec.set_window_shut(now, self.snd_wnd == 0);
            self.max_snd_wnd = self.max_snd_wnd.max(self.snd_wnd);
            self.snd_wl1 = seg.seq_number;
            self.snd_wl2 = ack;
            // The window-probe timer, as sender SWS avoidance's override timeout (RFC 9293
            // 3.8.6.2.1), runs on from when the data was first held back: an update of a
            // window still open (the peer's every segment repeats it) restarted it, so a
            // peer that kept sending held our data back for as long as it did. It stops
            // when a shut window opens (the probing is over), when an ACK of new data
            // comes (it is armed with nothing in flight only: data went since, and what is
            // held back now waits from now) and at firing (`handle_timeout`).
            if advanced {
                self.window_probe_at = None;
            }
            if self.snd_wnd > 0 && was_zero {
                self.window_probe_at = None;
                self.window_probe_backoff = 0;
                // Octets still outstanding are most likely the window probe's, which the
                // shut window could not take (RFC 9293 3.10.7.4): they go again now, not at
                // their retransmission timer, backed off through the probing.
                self.reopen_resend = seq_diff(self.snd_nxt, self.snd_una) > 0;
            }
        }
        // Our FIN acknowledged: the closing states move on.
        if let Some(f) = self.fin_seq {
            if ack > f {
                match self.state {
                    State::FinWait1 => {
                        self.state = State::FinWait2;
                        self.fin_wait_2_at = self.cfg.fin_wait_2_timeout.map(|t| now + t);
                        self.fin_wait_2_rcv = self.rcv_nxt;
                    }
                    State::Closing => self.enter_time_wait(now),
                    State::LastAck => self.enter_closed(EV_CLOSED),
                    _ => {}
                }
            }
        }
    }

    /// After in-order octets were taken: RCV.NXT past them, `Readable` if any were queued,
    /// and the ACK they call for: at once for a segment that filled a gap (RFC 5681 4.2)
    /// and for every second segment (RFC 1122 4.2.3.2), else after the delay.
    #[inline]
    fn took_in_order(&mut self, now: Instant, had_gap: bool) {
        self.rcv_nxt = TcpSeqNumber(
            (self.irs.0 as u32)
                .wrapping_add(1)
                .wrapping_add(self.rcv_off as u32) as i32,
        );
        if !self.rx.is_empty() {
            self.events |= EV_READABLE;
        }
        self.unacked_segs += 1;
        if had_gap {
            // RFC 5681 4.2: a segment that fills (part of) a gap is ACKed at once.
            self.ack_now = true;
            self.quick_ack = true;
        } else if self.unacked_segs >= 2 || self.cfg.ack_delay.is_none() {
            self.ack_now = true;
        } else if self.delack_at.is_none() {
            self.delack_at = self.cfg.ack_delay.map(|d| now + d);
        }
    }

    /// Takes `data`, the next in-order octets: offered to `deliver` when nothing is queued
    /// before them, the rest queued.
    #[inline]
    fn take_in_order(&mut self, data: &[u8], deliver: &mut dyn FnMut(&[u8]) -> usize) {
        let n = if self.rx.is_empty() {
            deliver(data).min(data.len())
        } else {
            0
        };
        self.stats.delivered_in_place += n as u64;
        // Delivered whole (the common case): nothing to queue, no empty copy.
        if n < data.len() {
            self.rx.extend(&data[n..]);
        }
        self.rcv_off += data.len() as u64;
    }

    /// Octets `[start, end)` (stream offsets) arrived again: the next ACK, a quick one,
    /// reports them first as a D-SACK block (RFC 2883 4: the duplicate of the most recent segment only), with
    /// SACK in use and before the peer's FIN (whose sequence number the stream offsets do
    /// not count).
    fn note_duplicate(&mut self, start: i64, end: i64) {
        if self.sack_ok && !self.fin_received && start >= 0 && end > start {
            self.dsack = Some((start as u64, end as u64));
            // Reported at once, as the ACK of a wholly duplicate or out-of-order segment is:
            // also for a segment that brought new octets after old ones (most likely a
            // retransmission that was not needed, which the sender learns from it, RFC
            // 2883 4 and RFC 3708, rather than after our delayed-ACK timer).
            self.ack_now = true;
            self.quick_ack = true;
        }
    }

    fn process_text(
        &mut self,
        now: Instant,
        seg: &TcpRepr<'_>,
        deliver: &mut dyn FnMut(&[u8]) -> usize,
    ) {
        let rel = seq_diff(seg.seq_number, self.rcv_nxt);
        let mut data = seg.payload;
        let mut off = self.rcv_off as i64 + rel;
        // Where `data` starts in the payload.
        let mut start = 0;
        // Trim what is already in order (a D-SACK block for it).
        let old = off < self.rcv_off as i64 && !data.is_empty();
        if off < self.rcv_off as i64 {
            if old {
                self.note_duplicate(off, (off + data.len() as i64).min(self.rcv_off as i64));
            }
            let cut = (self.rcv_off as i64 - off) as usize;
            if cut >= data.len() {
                data = &[];
            } else {
                data = &data[cut..];
                start = cut;
            }
            off = self.rcv_off as i64;
        }
        // Trim what lies beyond the window.
        let right = self.rcv_off + self.rcv_wnd() as u64;
        let fin_in_window;
        if off as u64 + data.len() as u64 > right {
            let keep = right.saturating_sub(off as u64) as usize;
            data = &data[..keep.min(data.len())];
            fin_in_window = false;
        } else {
            fin_in_window = true;
        }
        let off = off as u64;
        // The FIN ends the stream (RFC 9293 3.9.1 RECEIVE, 3.10.7.4 eighth): once its place
        // is known, octets past it are not the peer's data, and a FIN elsewhere changes
        // nothing.
        if let Some(f) = self.fin_off {
            data = &data[..(f.saturating_sub(off) as usize).min(data.len())];
        }
        if seg.control == TcpControl::Fin && fin_in_window && self.fin_off.is_none() {
            self.fin_off = Some(off + data.len() as u64);
        }
        if !data.is_empty() {
            if off == self.rcv_off {
                let had_gap = !self.ooo.is_empty();
                // RFC 2883 4: octets held out of order that this segment repeats (a
                // retransmission cut otherwise than the original) are a duplicate,
                // reported as a D-SACK block as Linux's `tcp_ofo_queue` does, unless the
                // segment's octets below RCV.NXT are reported already.
                if let Some((l, r)) = self
                    .ooo
                    .held_within(off, off + data.len() as u64)
                    .filter(|_| had_gap && !old)
                {
                    self.note_duplicate(l as i64, r as i64);
                }
                // The new octets up to the next block held, then that block: the octets
                // held first win where the segment repeats them, as they do out of order
                // (`Reassembly::insert`), so what was SACKed is what is delivered. Nothing
                // held (the common case): the segment whole, as it came.
                let mut rest = data;
                if !had_gap {
                    self.take_in_order(rest, deliver);
                } else {
                    loop {
                        let n = self
                            .ooo
                            .held_within(self.rcv_off, self.rcv_off + rest.len() as u64)
                            .map_or(rest.len(), |(l, _)| (l - self.rcv_off) as usize);
                        if n > 0 {
                            self.take_in_order(&rest[..n], deliver);
                            rest = &rest[n..];
                        }
                        let Some(mut more) = self.ooo.take_at(self.rcv_off) else {
                            break;
                        };
                        // Held before the FIN came: what lies past it is dropped.
                        if let Some(f) = self.fin_off {
                            more.truncate(f.saturating_sub(self.rcv_off) as usize);
                        }
                        if more.is_empty() {
                            break;
                        }
                        rest = &rest[more.len().min(rest.len())..];
                        self.take_in_order(&more, deliver);
                    }
                }
                self.took_in_order(now, had_gap);
            } else {
                self.stats.out_of_order += 1;
                if let Some((l, r)) = self.ooo.held_within(off, off + data.len() as u64) {
                    self.note_duplicate(l as i64, r as i64);
                }
                // Refused (the host's out-of-order budget spent, or no block left), the
                // segment is dropped: not SACKed, the peer sends it again (RFC 9293
                // 3.10.7.4, RFC 2018 3). It is ACKed as any out-of-order segment. The
                // budget counts its refusals; the blocks' are the connection's. One
                // refused by the budget waits for the host, which may have the largest
                // holder renege and store it after all (`take_refused_out_of_order`).
                match self.ooo.insert(off, data) {
                    reasm::Stored::Held => {}
                    reasm::Stored::NoBlock => self.stats.out_of_order_no_block += 1,
                    reasm::Stored::OverBudget => {
                        self.refused_ooo = Some(RefusedOutOfOrder {
                            off,
                            start,
                            len: data.len(),
                            seq: seg.seq_number,
                            payload_len: seg.payload.len(),
                        });
                    }
                }
                // RFC 5681 4.2: out-of-order data is ACKed at once (with SACK blocks).
                self.ack_now = true;
                self.quick_ack = true;
            }
        } else if seg.segment_len() > 0 {
            self.stats.duplicates += 1;
            self.ack_now = true;
            self.quick_ack = true;
        }
        // Eighth: the FIN, once everything before it is here.
        if !self.fin_received && self.fin_off == Some(self.rcv_off) {
            self.fin_received = true;
            self.rcv_nxt += 1;
            // Nothing held out of order can be the peer's data any more (Linux's `tcp_fin`
            // purges it too); its octets go back to the host's budget.
            self.ooo.clear();
            self.events |= EV_PEER_CLOSED;
            self.ack_now = true;
            match self.state {
                State::Established => self.state = State::CloseWait,
                State::FinWait1 => {
                    if self.fin_seq.is_some_and(|f| self.snd_una > f) {
                        self.enter_time_wait(now);
                    } else {
                        self.state = State::Closing;
                    }
                }
                State::FinWait2 => self.enter_time_wait(now),
                _ => {}
            }
        }
    }

    /// Both FINs are through: the user is told the connection closed now (as a socket's
    /// close returns); TIME-WAIT goes on inside the stack (the host keeps a released
    /// connection in it, RFC 9293 3.6.1).
    fn enter_time_wait(&mut self, now: Instant) {
        if self.state != State::TimeWait {
            self.events |= EV_CLOSED;
        }
        self.state = State::TimeWait;
        self.time_wait_at = Some(now + self.cfg.time_wait);
        self.keepalive_at = None;
        self.ts_refresh_at = None;
        self.window_probe_at = None;
    }

    fn arm_keepalive(&mut self, now: Instant) {
        self.keepalive_at = self.cfg.keep_alive.map(|k| now + k);
    }

    /// Starts the [`TS_REFRESH`] timer once the connection is established with timestamps.
    fn arm_ts_refresh(&mut self, now: Instant) {
        self.ts_refresh_at = self.ts_ok.then(|| now + TS_REFRESH);
    }

    // ------------------------------------------------------------------ timers

    /// The earliest timer of this connection.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.finished {
            return None;
        }
        // Only a deadline `handle_timeout` acts on: an idle connection without keep-alive
        // never times out, and a timer due for it would fire at every poll.
        let user = self.cfg.timeout.and_then(|t| {
            (matches!(
                self.state,
                State::Established
                    | State::CloseWait
                    | State::FinWait1
                    | State::FinWait2
                    | State::Closing
                    | State::LastAck
                    | State::SynSent
                    | State::SynReceived
            ) && self.user_timeout_applies())
            .then_some(self.last_heard + t)
        });
        earliest_of([
            self.rec.poll_timeout(),
            self.delack_at,
            self.window_probe_at,
            self.keepalive_at,
            self.ts_refresh_at,
            self.time_wait_at,
            self.fin_wait_2_at.filter(|_| self.state == State::FinWait2),
            user,
        ])
    }

    /// A segment is about to go out: where nothing was outstanding, the connection starts
    /// waiting for the peer now, and the user timeout's silence counts from here, not from
    /// the last segment heard before an idle spell (without keep-alive an idle connection
    /// hears nothing; its first send after an idle spell longer than the timeout was taken
    /// for silence and reset at once). Kept in `last_heard`, which the timeout reads.
    #[inline(always)]
    fn note_waiting(&mut self, now: Instant) {
        if self.rec.is_empty() && self.last_heard < now {
            self.last_heard = now;
        }
    }

    /// Whether the user timeout aborts this connection once the peer has been silent for
    /// it: with data outstanding (or waiting to go), with keep-alive probes unanswered, or
    /// in a SYN state (whether or not the SYN has left: a next hop that never resolves
    /// ends the attempt too).
    fn user_timeout_applies(&self) -> bool {
        if self.window_probe_answered() {
            // The peer answered the last probe of its shut window: it is alive, and the
            // connection stays open however long the window stays shut (RFC 9293 3.8.6.1,
            // RFC 1122 4.2.2.17). Silence counts again from the next probe
            // (`handle_timeout`): counted from the last answer, it ended the connection
            // once the probes' backoff passed the user timeout, every probe answered.
            return false;
        }
        !self.rec.is_empty()
            || (self.tx.len() > 0 && self.snd_wnd == 0)
            || self.cfg.keep_alive.is_some()
            || matches!(self.state, State::SynSent | State::SynReceived)
    }

    /// Whether the peer's window is shut with something of ours waiting on it (outstanding
    /// or queued) and the peer answered the last probe ([`Recovery::peer_alive`]: no
    /// retransmission timeout since).
    fn window_probe_answered(&self) -> bool {
        self.syn_acked
            && !matches!(self.state, State::SynSent | State::SynReceived)
            && self.snd_wnd == 0
            && (!self.rec.is_empty() || self.tx.len() > 0)
            && self.rec.backoffs() == 0
    }

    /// Runs the timers due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.finished {
            return;
        }
        if self.time_wait_at.is_some_and(|t| t <= now) {
            // The Closed event went out on entering TIME-WAIT.
            self.enter_closed(0);
            return;
        }
        // User timeout (RFC 9293 3.8.3 R2) or retries exhausted: the peer is gone.
        let silent = self
            .cfg
            .timeout
            .is_some_and(|t| now - self.last_heard >= t && self.state != State::TimeWait);
        if (silent && self.user_timeout_applies()) || self.rec.backoffs() > MAX_RTO_BACKOFFS {
            self.enter_closed(EV_TIMED_OUT);
            return;
        }
        if self.state == State::FinWait2 && self.fin_wait_2_at.is_some_and(|t| t <= now) {
            if self.rcv_nxt != self.fin_wait_2_rcv {
                // Data came in the meantime: the peer is still sending, not stuck.
                self.fin_wait_2_rcv = self.rcv_nxt;
                self.fin_wait_2_at = self.cfg.fin_wait_2_timeout.map(|t| now + t);
            } else {
                // Linux's `tcp_fin_timeout`: the peer neither sends nor closes. A RST tells
                // it; the user sees a timeout, not a clean close.
                self.enter_closed(EV_TIMED_OUT);
                self.rst_pending = true;
                return;
            }
        }
        if self.delack_at.is_some_and(|t| t <= now) {
            self.delack_at = None;
            self.ack_now = true;
        }
        let answered = self.window_probe_answered();
        match self.rec.handle_timeout(now) {
            TimeoutAction::Probe => self.probe_pending = true,
            TimeoutAction::Retransmit => {
                if answered {
                    // A new probe of the shut window after the last one was answered: the
                    // peer's silence counts from here (`user_timeout_applies`).
                    self.last_heard = self.last_heard.max(now);
                }
                if matches!(self.state, State::SynSent | State::SynReceived) {
                    self.syn_sent = false;
                }
            }
            TimeoutAction::None => {}
        }
        if self.window_probe_at.is_some_and(|t| t <= now) {
            self.window_probe_at = None;
            // Armed with nothing in flight; if data went since (the window opened enough
            // for it), its ACK or its retransmission timer comes instead.
            if self.rec.is_empty() {
                self.stats.window_probes += 1;
                self.window_probe_backoff = (self.window_probe_backoff + 1).min(16);
                // Send one octet past the zero window (RFC 9293 3.8.6.1) below.
                self.window_probe_due = true;
            }
        }
        if self.keepalive_at.is_some_and(|t| t <= now) {
            // RFC 1122 4.2.3.6: a probe only after a whole keep-alive interval without a
            // segment from the peer; heard since, the next tick is one interval after it
            // (Linux's `keepalive_time_elapsed`).
            let quiet_until = self.cfg.keep_alive.map(|k| self.last_heard + k);
            let heard = quiet_until.is_some_and(|t| t > now);
            let idle = self.rec.is_empty() && self.tx.len() == 0 && !heard;
            // FIN-WAIT-2 too: the user timeout counts the peer's silence there as in the
            // other states (`user_timeout_applies`), and a live peer that has not closed
            // yet answers a probe (as Linux probes FIN_WAIT2).
            if idle
                && matches!(
                    self.state,
                    State::Established | State::CloseWait | State::FinWait2
                )
            {
                self.keepalive_pending = true;
                self.stats.keepalives += 1;
            }
            self.trim_idle_buffers();
            self.keepalive_at = if heard {
                quiet_until
            } else {
                self.cfg.keep_alive.map(|k| now + k)
            };
        }
        if self.ts_refresh_at.is_some_and(|t| t <= now) {
            // No acceptable segment of ours for a whole period: a pure ACK carries our
            // TSval to the peer's TS.Recent (RFC 7323 4.3) before PAWS there takes our
            // clock for older (`TS_REFRESH`).
            if !self.ts_sent_fresh
                && matches!(
                    self.state,
                    State::Established
                        | State::CloseWait
                        | State::FinWait1
                        | State::FinWait2
                        | State::Closing
                        | State::LastAck
                )
            {
                self.ack_now = true;
            }
            self.ts_sent_fresh = false;
            self.ts_refresh_at = Some(now + TS_REFRESH);
        }
    }

    /// Gives back the memory a burst left in the receive queue, the send ring and the
    /// record boundaries once they are empty (at the keep-alive tick: a busy connection
    /// keeps them, so that bursts do not reallocate and fault in their buffers again and
    /// again).
    fn trim_idle_buffers(&mut self) {
        if self.rx.is_empty() && self.rx.capacity() > 64 * 1024 {
            self.rx.shrink_to(4096);
        }
        if self.tx.allocated() > 64 * 1024 {
            self.tx.release_if_empty();
        }
        if self.ext.is_empty() && self.ext.capacity() > 1024 {
            self.ext.shrink_to(64);
        }
        if self.records.is_empty() && self.records.capacity() > 1024 {
            self.records.shrink_to(64);
        }
    }

    // ------------------------------------------------------------------ transmit

    fn base_segment(
        &self,
        now: Instant,
        control: TcpControl,
        seq: TcpSeqNumber,
    ) -> TcpRepr<'static> {
        let syn = control == TcpControl::Syn;
        let ack = (self.state != State::SynSent).then_some(self.rcv_nxt);
        let window_len = if syn {
            // RFC 7323 2.2: the window of a SYN is never scaled.
            self.rx_window.min(0xffff) as u16
        } else {
            self.window_field()
        };
        // Our first SYN (SYN-SENT) offers what we support; a SYN-ACK (a passive open, or a
        // simultaneous one, RFC 9293 3.5) only what the peer's SYN carried: RFC 7323 2.2
        // and 3.2, RFC 2018 2. Tested `self.active`, our side of a simultaneous open sent
        // them all whatever the peer's SYN held.
        let first_syn = self.state == State::SynSent;
        let offer_ts = if syn {
            self.cfg.timestamps && (first_syn || self.ts_ok)
        } else {
            self.ts_ok
        };
        let timestamp = offer_ts.then(|| TcpTimestampRepr {
            tsval: self.ts_now(now),
            tsecr: if self.ts_ok { self.ts_recent } else { 0 },
        });
        let (window_scale, max_seg_size, sack_permitted) = if syn {
            let ws = self.cfg.window_scale && (first_syn || self.ws_ok);
            let shift = if first_syn {
                Self::shift_for(self.cfg.rx_buffer)
            } else {
                self.rcv_shift
            };
            (
                ws.then_some(shift),
                Some(self.cfg.mss),
                self.cfg.sack && (first_syn || self.sack_ok),
            )
        } else {
            (None, None, false)
        };
        let mut sack_ranges = [None; 3];
        if !syn && self.sack_ok && (!self.ooo.is_empty() || self.dsack.is_some()) {
            let base = (self.irs.0 as u32).wrapping_add(1);
            let seqs =
                |(l, r): (u64, u64)| (base.wrapping_add(l as u32), base.wrapping_add(r as u32));
            match self.dsack {
                // RFC 2883 4: the D-SACK block first, then the SACK blocks as RFC 2018 has
                // them (the most recent first: where the duplicate lies above RCV.NXT, the
                // block that holds it).
                Some(d) => {
                    let [a, b] = self.ooo.sack_blocks::<2>();
                    sack_ranges = [Some(seqs(d)), a.map(seqs), b.map(seqs)];
                }
                None => sack_ranges = self.ooo.sack_blocks::<3>().map(|b| b.map(seqs)),
            }
        }
        TcpRepr {
            src_port: self.ep.local.1,
            dst_port: self.ep.remote.1,
            control,
            seq_number: seq,
            ack_number: ack,
            window_len,
            window_scale,
            max_seg_size,
            sack_permitted,
            sack_ranges,
            timestamp,
            payload: &[],
        }
    }

    /// [`Self::sent`] of a segment that may carry SACK blocks (not the lone path's, which
    /// never does): its fourth block, if any, kept for the host first (`sent` clears the
    /// D-SACK block it depends on).
    fn sent_sacking(&mut self, seg: &TcpRepr<'_>) {
        if seg.sack_ranges[2].is_some() {
            self.sack4 = self.fourth_of(seg);
        }
        self.sent(seg);
    }

    /// The fourth SACK block `seg` carries beside its three (RFC 2018 3: four fit in 40
    /// octets of options without timestamps; 4: "as many distinct SACK blocks as
    /// possible"): after a D-SACK block, the third SACK block (RFC 2883 4), else the fourth,
    /// in the order of `Reassembly::sack_blocks` (the most recent first). `None` unless
    /// `seg` has three blocks and no timestamps, as [`Self::base_segment`] built them now.
    #[cold]
    fn fourth_of(&self, seg: &TcpRepr<'_>) -> Option<(u32, u32)> {
        if seg.sack_ranges[2].is_none() || seg.timestamp.is_some() || !self.sack_ok {
            return None;
        }
        let base = (self.irs.0 as u32).wrapping_add(1);
        let b = match self.dsack {
            Some(_) => self.ooo.sack_blocks::<3>()[2],
            None => self.ooo.sack_blocks::<4>()[3],
        };
        b.map(|(l, r)| (base.wrapping_add(l as u32), base.wrapping_add(r as u32)))
    }

    /// The octets [`Self::fourth_of`]'s block adds to `seg`'s header (rounded as the header
    /// is: 3 blocks take 48 octets of header, 4 take 56).
    #[inline]
    fn fourth_sack_len(&self, seg: &TcpRepr<'_>) -> usize {
        if seg.sack_ranges[2].is_some() && self.fourth_of(seg).is_some() {
            8
        } else {
            0
        }
    }

    /// The fourth SACK block of `seg`, a segment this connection just gave (polled, nothing
    /// done to the connection since), which the host writes after its three
    /// (`host::headers::write_headers`): `None` for every segment without three blocks.
    #[inline(always)]
    pub(crate) fn fourth_sack_block(&self, seg: &TcpRepr<'_>) -> Option<(u32, u32)> {
        if seg.sack_ranges[2].is_some() {
            self.sack4
        } else {
            None
        }
    }

    fn sent(&mut self, seg: &TcpRepr<'_>) {
        if seg.ack_number.is_some() {
            self.sent_acking();
        } else {
            self.stats.segments_sent += 1;
        }
    }

    /// [`Self::sent`] of a segment that carries an ACK.
    #[inline(always)]
    fn sent_acking(&mut self) {
        self.stats.segments_sent += 1;
        self.ts_sent_fresh = true;
        self.ack_now = false;
        self.quick_ack = false;
        self.dsack = None;
        self.delack_at = None;
        self.unacked_segs = 0;
        // The right edge this segment offered (`window_field`, as scaled).
        self.rcv_adv = self.rcv_off + (u64::from(self.window_field()) << self.rcv_shift);
        self.last_ack_sent = self.rcv_nxt;
    }

    /// Payload octets a data segment at `seq` may carry now: the MSS both ends allow minus
    /// this segment's options (timestamps always, SACK blocks while we hold out-of-order
    /// data), so no frame ever exceeds the MTU (RFC 9293 3.7.1: the MSS counts data only,
    /// options come out of it).
    fn payload_room(&self, now: Instant, seq: TcpSeqNumber) -> usize {
        let mss = self.peer_mss.min(usize::from(self.cfg.mss));
        let seg = self.base_segment(now, TcpControl::Psh, seq);
        let hdr = seg.header_len() + self.fourth_sack_len(&seg);
        mss.saturating_sub(hdr - 20).max(1)
    }

    /// The payload room of a data segment without SACK blocks: the MSS both ends allow minus
    /// the timestamp option if in use. The engine sizes its FPDUs to it (MULPDU), and a
    /// record stream's data segments keep it whole (SACK blocks give way).
    pub fn max_record_payload(&self) -> usize {
        let mss = self.peer_mss.min(usize::from(self.cfg.mss));
        let ts = if self.ts_ok { 12 } else { 0 };
        mss.saturating_sub(ts).max(1)
    }

    /// Drops the SACK blocks that do not fit beside `n` payload octets in a data segment of
    /// a record stream. Returns whether it dropped any: then a pure ACK with all of them
    /// follows (RFC 2018 4: SACK options belong in every ACK while out-of-order data is
    /// held).
    fn fit_sack(&self, seg: &mut TcpRepr<'static>, n: usize) -> bool {
        if seg.sack_ranges[0].is_none() {
            return false;
        }
        let mss = self.peer_mss.min(usize::from(self.cfg.mss));
        // The fourth block ([`Self::fourth_of`]) gives way first: `sent_data` leaves it out
        // of a segment that lost any block.
        let mut trimmed = seg.header_len() + self.fourth_sack_len(seg) - 20 + n > mss;
        while seg.header_len() - 20 + n > mss {
            let Some(last) = seg.sack_ranges.iter().rposition(Option::is_some) else {
                break;
            };
            seg.sack_ranges[last] = None;
            trimmed = true;
        }
        trimmed
    }

    /// [`Self::sent`] of a data segment of the walk; `sack_owed` when its SACK blocks gave
    /// way ([`Self::fit_sack`]): a pure ACK with all of them follows, and a D-SACK block
    /// owed stays owed for it unless the segment kept it (it is trimmed last: as its first
    /// block, RFC 2883 4).
    #[inline(always)]
    fn sent_data(&mut self, seg: &TcpRepr<'_>, sack_owed: bool) {
        // (Only a segment with three blocks may have a fourth: `fourth_sack_block`.)
        if seg.sack_ranges[2].is_some() {
            self.sack4 = if sack_owed { None } else { self.fourth_of(seg) };
        }
        if sack_owed {
            let dsack = self.dsack;
            self.sent(seg);
            self.ack_now = true;
            if seg.sack_ranges[0].is_none() {
                self.dsack = dsack;
            }
        } else {
            self.sent(seg);
        }
    }

    /// Whether this connection sends a record stream (a record was ever marked).
    fn in_records(&self) -> bool {
        self.record_stream
    }

    /// How much of the `n` octets (at most, from SND.NXT) a new segment of a record stream
    /// carries: up to the last record boundary within them; all of them when they reach the
    /// end of the queued data; `None` (wait for an ACK) when not even the next record fits
    /// but would fit a segment and data is in flight. With the cut, when it is a record
    /// boundary found among the records: how many records it sends (those that end within
    /// it: `poll_new` drains them without searching again).
    fn record_cut(&self, n: usize, unsent: usize, room: usize) -> Option<(usize, Option<usize>)> {
        if n >= unsent {
            return Some((n, None));
        }
        let seq = self.snd_nxt;
        // The ends ascend (`push_record`), so those within the `n` octets are a prefix,
        // found by a doubling search from the front (`Records::prefix_len`) rather than a
        // walk over every record of the segment (a segment of small FPDUs carries many);
        // the last of them is the cut.
        let within = self
            .records
            .prefix_len(|end| seq_diff(end, seq) <= n as i64);
        let records = self.records.as_slice();
        let cut = match within.checked_sub(1).and_then(|last| records.get(last)) {
            Some(&end) => seq_diff(end, seq).max(0) as usize,
            None => 0,
        };
        if cut > 0 {
            // The cut is the end of record `within - 1`: exactly the first `within` end
            // at or before it (the ends strictly ascend).
            return Some((cut, Some(within)));
        }
        // None within: the next record is the first past them.
        let next = records
            .get(within)
            .map(|&e| seq_diff(e, seq))
            .filter(|&r| r > 0)
            .map_or(usize::MAX, |r| r as usize);
        let in_flight = seq_diff(self.snd_nxt, self.snd_una) > 0;
        if next <= room && in_flight {
            None
        } else {
            Some((n, None))
        }
    }

    /// Data octets not yet sent, and their offset in the ring.
    fn unsent(&self) -> (usize, usize) {
        let sent = seq_diff(self.snd_nxt, self.data_start()).max(0) as usize;
        let sent = sent.min(self.tx.len());
        (sent, self.tx.len() - sent)
    }

    /// The next segment to send now (see the module documentation): its payload is borrowed
    /// from the send buffer (or, for the one segment per lap that wraps around the ring's
    /// end, copied from both pieces into a small buffer).
    pub fn poll_transmit(&mut self, now: Instant) -> Option<TcpRepr<'_>> {
        let (mut seg, off, n) = self.plan(now)?;
        debug_assert!(
            self.ext.is_empty() || self.first_ext_after(off, n).is_none(),
            "poll_transmit with external records: use poll_segment"
        );
        if self.tx.slice(off, n).len() < n {
            self.wrap_buf.clear();
            let mut at = off;
            while self.wrap_buf.len() < n {
                let piece = self.tx.slice(at, n - self.wrap_buf.len());
                if piece.is_empty() {
                    break;
                }
                self.wrap_buf.extend_from_slice(piece);
                at += piece.len();
            }
            seg.payload = &self.wrap_buf;
        } else {
            seg.payload = self.tx.slice(off, n);
        }
        Some(seg)
    }

    /// Whether an ACK is owed for the last segment alone ([`Self::poll_quick_ack`]).
    #[inline(always)]
    pub(crate) fn quick_ack_owed(&self) -> bool {
        self.quick_ack
    }

    /// The ACK owed for the last segment alone, if any (out of order, a gap filled, a
    /// duplicate: RFC 5681 4.2's "immediately"), as a segment without payload; the host sends
    /// it before it reads the next segment of a receive burst. Without it a burst that brought
    /// several such segments drew one ACK for all of them: a loss-recovery episode's
    /// retransmissions, arriving together, were then answered by one ACK, and where that ACK
    /// was lost the sender, its window full and no probe allowed in recovery (RFC 8985 7.2),
    /// waited for its RTO. One ACK per segment is what the RFC asks, what the peer's
    /// duplicate-ACK counting expects, and what makes the loss of any one of them harmless.
    /// `None` (the flag cleared) outside the synchronized states or with an RST pending:
    /// the transmit pass then decides, as for any ACK owed.
    pub fn poll_quick_ack(&mut self, now: Instant) -> Option<TcpRepr<'static>> {
        if !std::mem::take(&mut self.quick_ack) {
            return None;
        }
        if self.rst_pending
            || !self.syn_acked
            || matches!(
                self.state,
                State::SynSent | State::SynReceived | State::Closed | State::Listen
            )
        {
            return None;
        }
        let repr = self.base_segment(now, TcpControl::None, self.acceptable_seq());
        self.sent_sacking(&repr);
        Some(repr)
    }

    /// The next segment to send now, as [`Connection::poll_transmit`], with its payload
    /// described piece by piece (external records included) rather than borrowed: the
    /// host writes it straight into the frame.
    #[inline]
    pub fn poll_segment(&mut self, now: Instant) -> Option<Outgoing<'_>> {
        // `plan`, with the full-record segment built in the `Outgoing`
        // (`full_record_segment`).
        if self.nothing_to_send() {
            return None;
        }
        if let Some(f) = self.next_full_record(now) {
            return Some(Outgoing {
                repr: self.full_record_segment(&f),
                first: self.locate_ext(f.off, f.len),
                conn: self,
                off: f.off,
                len: f.len,
                full: true,
            });
        }
        let (repr, off, len) = self.plan_in_full(now)?;
        let first = if len == 0 {
            None
        } else {
            self.locate_ext(off, len)
        };
        Some(Outgoing {
            repr,
            conn: self,
            off,
            len,
            first,
            full: false,
        })
    }

    /// The segment after `prev`, a segment the full-record path just gave
    /// ([`Outgoing::is_full_record`]) in the same transmit pass at the same `now`, with
    /// nothing else done to the connection since (no segment received, no timer run, no
    /// data queued, no other poll): the next record as one more full-record segment, or
    /// `None`, nothing changed, when the next segment is anything else (the caller then
    /// asks [`Self::poll_segment`], which decides as always). A bulk sender's run of
    /// segments in one pass (issue 12 item 4: batching) pays the full-record path's checks
    /// once, at its first segment: what they test besides the amounts cannot change
    /// between two segments of a pass. No RST, probe or ACK is asked for (the first
    /// segment's `sent_acking` cleared the ACK owed, and only a received segment or a timer
    /// asks for the others), the state, the handshake's end, the loss marks and the SACK
    /// state are as they were, the timestamp is the same (the same `now`), and so is the
    /// window field (`window_field` of an unchanged receive side, with `rcv_adv` at what it
    /// offered: the same value again). So the segment is `prev` with the next sequence
    /// number, and the changes are the ones the path makes that are not already made:
    /// `snd_nxt`, the record drained, the recovery's entry, the segment counted (the
    /// recovery is not empty, so `note_waiting` has nothing to do, and `sent_acking`'s
    /// fields already hold what it would store). What remains to test is what the amounts
    /// decide: a whole record unsent and ending where the next boundary is, room in both
    /// windows, and sender SWS avoidance letting it through. The tests hold it to
    /// `poll_segment` at every segment of lossy, reordered exchanges
    /// (`the_full_record_path_agrees_with_the_full_walk`).
    #[inline]
    pub fn poll_full_again(
        &mut self,
        now: Instant,
        prev: &TcpRepr<'static>,
    ) -> Option<Outgoing<'_>> {
        let next = self.full_again_ready()?;
        Some(self.take_full_again(now, prev, next))
    }

    /// The test half of [`Self::poll_full_again`], nothing changed: whether the segment
    /// after a full-record segment of this pass is one more full-record segment. A caller
    /// that then takes it with [`Self::take_full_again`] and else asks
    /// [`Self::poll_segment`] has each answer written where it keeps it (`poll_full_again`'s
    /// `None` followed by `poll_segment` copies the second answer, 152 octets, out of the
    /// first's place).
    #[inline]
    pub fn full_again_ready(&self) -> Option<FullAgain> {
        #[cfg(test)]
        if self.full_walk_only {
            return None;
        }
        let (sent, unsent, room) = self.full_record_queued()?;
        debug_assert!(
            self.next_full_record_allowed() && !self.rec.is_empty(),
            "poll_full_again after something other than a full-record segment of this pass"
        );
        if !self.full_record_fits(unsent, room) {
            return None;
        }
        Some(FullAgain { sent, room })
    }

    /// The segment [`Self::full_again_ready`] found, taken: the changes of
    /// [`Self::poll_full_again`] made and the segment returned. `next` must come from
    /// `full_again_ready` with nothing done to the connection since. Always inlined: a
    /// call returns the segment through memory, and the caller then copied it into its
    /// own `Option` (a `memcpy` call), whatever the source's shape.
    #[inline(always)]
    pub fn take_full_again(
        &mut self,
        now: Instant,
        prev: &TcpRepr<'static>,
        next: FullAgain,
    ) -> Outgoing<'_> {
        let FullAgain { sent, room } = next;
        debug_assert_eq!(
            self.full_record_queued().map(|(s, _, r)| (s, r)),
            Some((sent, room)),
            "take_full_again: the connection changed since full_again_ready"
        );
        let seq = self.snd_nxt;
        let end = seq + room;
        self.snd_nxt = end;
        self.records.drain_front(1);
        self.rec.on_sent(now, seq, room, false);
        self.stats.segments_sent += 1;
        let repr = TcpRepr {
            seq_number: seq,
            ..*prev
        };
        debug_assert_eq!(
            (
                repr.window_len,
                repr.ack_number,
                repr.timestamp.map(|t| t.tsval)
            ),
            (
                self.window_field(),
                Some(self.rcv_nxt),
                self.ts_ok.then(|| self.ts_now(now))
            ),
            "poll_full_again: the segment's fields moved within the pass"
        );
        Outgoing {
            repr,
            first: self.locate_ext(sent, room),
            conn: self,
            off: sent,
            len: room,
            full: true,
        }
    }

    /// What [`Connection::poll_transmit`] sends: the segment without payload and the ring
    /// range of its payload.
    ///
    /// Inlined into its two callers: the segment (about a hundred octets) is then built where
    /// they use it instead of copied out of a call per segment.
    #[inline(always)]
    fn plan(&mut self, now: Instant) -> Option<Plan> {
        if self.nothing_to_send() {
            return None;
        }
        if let Some(f) = self.next_full_record(now) {
            return Some((self.full_record_segment(&f), f.off, f.len));
        }
        self.plan_in_full(now)
    }

    /// What [`Self::plan_in_full`] sends, and the same changes, in the common case of a
    /// bulk sender of records (FPDUs the size of a segment, MULPDU): new data, the next
    /// record exactly [`Self::max_record_payload`] long and within both windows, nothing
    /// asked for before it. Returns what the segment needs besides the connection's
    /// fields ([`Self::full_record_segment`] builds it), or `None`, nothing changed, in
    /// every other case (the general path decides). Each test below is one the general
    /// path makes on its way to this segment
    /// (`plan_in_full`: no RST, handshake over, nothing to resend, no window or loss probe;
    /// `poll_new`: window room, sender SWS avoidance, `record_cut` cutting after one
    /// record; `base_segment`: no SACK blocks, no SYN options), so the segment, the record
    /// drained and the recovery's entry are what the walk would give; the tests hold the
    /// two to each other at every poll of lossy, reordered exchanges
    /// (`the_full_record_path_agrees_with_the_full_walk`). It skips the walk's dispatch,
    /// the record search and the general segment builder: about 210 instructions of each
    /// segment of a bulk transfer (issue 12 item 4).
    #[inline(always)]
    fn next_full_record(&mut self, now: Instant) -> Option<FullRecord> {
        #[cfg(test)]
        if self.full_walk_only {
            return None;
        }
        // First what sets a bulk sender's segments apart (a small message's poll leaves
        // here), then what the walk would do before it.
        let (sent, unsent, room) = self.full_record_queued()?;
        // (A keep-alive or an ACK owed comes after new data in the walk, which leaves the
        // one and clears the other as `sent` does here; a record queued makes the stream
        // one of records; a FIN queued (`close`) moves the state past the two below.)
        if !self.next_full_record_allowed() || !self.full_record_fits(unsent, room) {
            return None;
        }
        let seq = self.snd_nxt;
        let end = seq + room;
        let f = FullRecord {
            seq,
            off: sent,
            len: room,
            tsval: self.ts_now(now),
        };
        self.snd_nxt = end;
        self.records.drain_front(1);
        self.note_waiting(now);
        self.rec.on_sent(now, seq, room, false);
        self.sent_acking();
        Some(f)
    }

    /// The full-record path's first test, what sets a bulk sender's segments apart (a
    /// small message's poll leaves here): the next record wholly unsent and exactly the
    /// payload room ([`Self::max_record_payload`]) long. Its ring offset, the octets
    /// unsent, and that room.
    #[inline(always)]
    fn full_record_queued(&self) -> Option<(usize, usize, usize)> {
        let (sent, unsent) = self.unsent();
        let room = self.max_record_payload();
        let end = self.snd_nxt + room;
        (unsent >= room && self.records.as_slice().first() == Some(&end))
            .then_some((sent, unsent, room))
    }

    /// Whether the windows let the next record go in one segment of `room` octets with
    /// `unsent` octets waiting: room in the peer's window and the congestion window, and
    /// `poll_new`'s sender SWS avoidance lets it through (which can refuse a segment of
    /// `room` octets only where the MSS leaves under 32 octets beside the options:
    /// `update_smss` then keeps `smss` above `room`).
    #[inline(always)]
    fn full_record_fits(&self, unsent: usize, room: usize) -> bool {
        let in_flight_wnd = seq_diff(self.snd_nxt, self.snd_una).max(0) as usize;
        let peer_room = self.snd_wnd.saturating_sub(in_flight_wnd);
        let n = unsent
            .min(self.smss)
            .min(peer_room)
            .min(self.rec.send_allowance());
        !(n < room || (n < self.smss && n != unsent && n < self.max_snd_wnd / 2))
    }

    /// Whether nothing but new data is due: the full-record path's tests besides the
    /// amounts ([`Self::next_full_record`]).
    #[inline(always)]
    fn next_full_record_allowed(&self) -> bool {
        let asked = self.rst_pending
            | self.rst_at.is_some()
            | self.window_probe_due
            | self.reopen_resend
            | self.probe_pending;
        !asked
            && self.syn_acked
            && matches!(self.state, State::Established | State::CloseWait)
            && self.rec.none_lost()
            && !(self.sack_ok && (!self.ooo.is_empty() || self.dsack.is_some()))
    }

    /// The segment of [`Self::next_full_record`]'s `f`, as `base_segment` builds it for new
    /// data (the ACK, the window, the timestamps, no option else). Built by the caller where
    /// the segment is to stay (`poll_segment`: in the `Outgoing` it returns), not moved
    /// there: a move reads the fields back with wider loads than the stores that wrote
    /// them, which no store can forward, so the load waits for every earlier store of the
    /// core to reach the cache (the previous frame's, to lines not yet in it: ~2 % of the
    /// MTU 1500 sender in `perf`, on one instruction).
    #[inline(always)]
    fn full_record_segment(&self, f: &FullRecord) -> TcpRepr<'static> {
        TcpRepr {
            src_port: self.ep.local.1,
            dst_port: self.ep.remote.1,
            control: TcpControl::Psh,
            seq_number: f.seq,
            ack_number: Some(self.rcv_nxt),
            window_len: self.window_field(),
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp: self.ts_ok.then_some(TcpTimestampRepr {
                tsval: f.tsval,
                tsecr: self.ts_recent,
            }),
            payload: &[],
        }
    }

    /// Whether [`Self::plan_in_full`] would find nothing to send and change nothing: no
    /// flag asks for a segment (RST, window or loss probe, keep-alive, ACK), the handshake
    /// is over, no segment is marked lost, and neither data nor a FIN waits to go. The
    /// common case of a poll (the last one of a connection that just sent its segment, or
    /// one that had only events to take) in a few tests instead of the whole walk;
    /// `false` whenever in doubt, and the walk decides. The host asks it too, of a
    /// connection whose ACK it just deferred, and after each segment of its transmit pass
    /// (true: the pass ends there, without another slot or `poll_segment`).
    #[inline(always)]
    pub(crate) fn nothing_to_send(&self) -> bool {
        let asked = self.rst_pending
            | self.rst_at.is_some()
            | self.window_probe_due
            | self.reopen_resend
            | self.probe_pending
            | self.keepalive_pending
            | self.ack_now;
        !asked
            && self.syn_acked
            && !matches!(self.state, State::SynSent | State::SynReceived)
            && self.rec.none_lost()
            && !(self.fin_queued && self.fin_seq.is_none())
            && self.unsent().1 == 0
    }

    /// [`Self::plan`] without its quiet check: every case, in order.
    #[inline(always)]
    fn plan_in_full(&mut self, now: Instant) -> Option<Plan> {
        if self.rst_pending {
            self.rst_pending = false;
            let mut seg = self.base_segment(now, TcpControl::Rst, self.acceptable_seq());
            seg.window_len = 0;
            seg.sack_ranges = [None; 3];
            self.stats.segments_sent += 1;
            return Some((seg, 0, 0));
        }
        if let Some(seq) = self.rst_at.take() {
            let mut seg = self.base_segment(now, TcpControl::Rst, seq);
            seg.ack_number = None;
            seg.window_len = 0;
            seg.sack_ranges = [None; 3];
            self.stats.segments_sent += 1;
            return Some((seg, 0, 0));
        }
        match self.state {
            State::Closed | State::Listen => return None,
            State::SynSent | State::SynReceived => {
                if !self.syn_sent {
                    return Some(self.send_syn(now));
                }
                // SYN-RECEIVED, our SYN out: an ACK asked for (RFC 9293 3.10.7.4's first
                // check, RFC 5961 3.2 and 4.2's challenge ACK, which hold "in all states
                // except SYN-SENT") goes as a bare ACK of the peer's SYN, SEG.SEQ = SND.NXT
                // (Linux's `tcp_v4_reqsk_send_ack`). A client back on the same port with a
                // new ISN answers it with the RST that ends this half-open connection
                // (RFC 9293 3.5.1). Nothing else until the handshake completes.
                if self.state == State::SynReceived && self.ack_now {
                    let seg = self.base_segment(now, TcpControl::None, self.snd_nxt);
                    self.sent_sacking(&seg);
                    return Some((seg, 0, 0));
                }
                return None;
            }
            // Closed by the user in SYN-RECEIVED (RFC 9293 3.10.4: FIN-WAIT-1 at once) with
            // our SYN not yet sent, or due again after an RTO: the SYN goes first, the FIN
            // after it (it never takes the SYN's sequence number).
            _ if !self.syn_sent && !self.syn_acked => return Some(self.send_syn(now)),
            _ => {}
        }
        if let Some(p) = self.poll_retransmit(now) {
            return Some(p);
        }
        if std::mem::take(&mut self.reopen_resend) {
            let outstanding = seq_diff(self.snd_nxt, self.snd_una);
            if outstanding > 0 {
                if let Some(p) = self.segment_at(now, self.snd_una, outstanding as usize, true) {
                    return Some(p);
                }
            }
        }
        if self.window_probe_due {
            self.window_probe_due = false;
            if let Some(p) = self.poll_new(now, Send::WindowProbe) {
                return Some(p);
            }
        }
        // RFC 8985 7.3: new data if the peer's window allows, else the last segment; none
        // once an ACK answered everything since the probe was asked for.
        if std::mem::take(&mut self.probe_pending) && !self.rec.is_empty() {
            if let Some(p) = self.poll_new(now, Send::LossProbe) {
                self.rec.probe_sent(false);
                return Some(p);
            }
            if let Some((seq, len)) = self.rec.last_segment() {
                if let Some(p) = self.segment_at(now, seq, len, true) {
                    self.rec.probe_sent(true);
                    return Some(p);
                }
            }
        }
        if let Some(p) = self.poll_new(now, Send::Normal) {
            return Some(p);
        }
        if self.keepalive_pending {
            self.keepalive_pending = false;
            // RFC 9293 3.8.4: SEG.SEQ = SND.NXT - 1, no data.
            let seg = self.base_segment(now, TcpControl::None, self.snd_nxt - 1);
            // Outside the peer's window, it moves no TS.Recent there (`TS_REFRESH`).
            let fresh = self.ts_sent_fresh;
            self.sent_sacking(&seg);
            self.ts_sent_fresh = fresh;
            return Some((seg, 0, 0));
        }
        if self.ack_now {
            let seg = self.base_segment(now, TcpControl::None, self.acceptable_seq());
            self.sent_sacking(&seg);
            return Some((seg, 0, 0));
        }
        None
    }

    /// Our SYN (with the ACK of the peer's once we have it), first sent or again.
    fn send_syn(&mut self, now: Instant) -> Plan {
        self.syn_sent = true;
        let mut seg = self.base_segment(now, TcpControl::Syn, self.iss);
        if self.state != State::SynSent {
            seg.ack_number = Some(self.rcv_nxt);
        }
        // Sent before and tracked (not after a simultaneous open replaced the recovery
        // state: the SYN-ACK is then its first entry).
        let retransmit = self.snd_nxt != self.iss && !self.rec.is_empty();
        if !retransmit {
            self.snd_nxt = self.iss + 1;
        }
        self.rec.on_sent(now, self.iss, 1, retransmit);
        let before = self.rcv_adv;
        self.sent(&seg);
        // The right edge this SYN offered: its window is never scaled (RFC 7323 2.2), so
        // not `window_field`'s, which `sent_acking` recorded for a SYN-ACK (under a clamp
        // below one unit of the shift, zero: the next ACK then moved the edge left from
        // the SYN's, RFC 9293 3.8.6 SHLD-14). Test:
        // `conn_window::clamp_below_one_unit_never_shrinks`.
        self.rcv_adv = before.max(self.rcv_off + u64::from(seg.window_len));
        (seg, 0, 0)
    }

    fn poll_retransmit(&mut self, now: Instant) -> Option<Plan> {
        let (seq, len) = self.rec.next_retransmit()?;
        self.segment_at(now, seq, len, true)
    }

    /// The segment covering `[seq, seq + len)` of what was sent before (data and/or FIN),
    /// at most one MSS and one contiguous piece of the ring.
    fn segment_at(
        &mut self,
        now: Instant,
        seq: TcpSeqNumber,
        len: usize,
        retransmit: bool,
    ) -> Option<Plan> {
        if seq == self.iss && !self.syn_acked {
            // The SYN itself (handled by the SYN path).
            self.syn_sent = false;
            return None;
        }
        let off = seq_diff(seq, self.snd_una).max(0) as usize;
        let data_len = self.tx.len();
        let room = if self.in_records() {
            self.max_record_payload()
        } else {
            self.payload_room(now, seq)
        };
        let mut n = len.min(room);
        let mut fin = false;
        if let Some(f) = self.fin_seq {
            let fin_rel = seq_diff(f, seq);
            if fin_rel >= 0 && (fin_rel as usize) < n + 1 && (fin_rel as usize) <= len {
                // The FIN is inside the range.
                n = fin_rel as usize;
                fin = (fin_rel as usize) < len;
            }
        }
        let n = n.min(data_len.saturating_sub(off));
        let control = if fin {
            TcpControl::Fin
        } else {
            TcpControl::Psh
        };
        let mut seg = self.base_segment(now, control, seq);
        let fin = fin && seq + n == self.fin_seq.unwrap_or(seq);
        if n == 0 && !fin {
            return None;
        }
        if !fin {
            seg.control = TcpControl::Psh;
        }
        let sack_owed = self.in_records() && self.fit_sack(&mut seg, n);
        self.note_waiting(now);
        self.rec.on_sent(now, seq, n + usize::from(fin), retransmit);
        self.sent_data(&seg, sack_owed);
        Some((seg, off, n))
    }

    /// New data (and the FIN) within the windows: normally within both windows; a loss probe
    /// within the peer's window whatever the congestion window; a window probe one octet
    /// past a zero window.
    fn poll_new(&mut self, now: Instant, how: Send) -> Option<Plan> {
        if !matches!(
            self.state,
            State::Established
                | State::CloseWait
                | State::FinWait1
                | State::Closing
                | State::LastAck
        ) {
            return None;
        }
        let (sent, unsent) = self.unsent();
        let fin_due = self.fin_queued && self.fin_seq.is_none();
        if unsent == 0 {
            if fin_due {
                // The FIN alone (it needs no window).
                let seq = self.snd_nxt;
                self.fin_seq = Some(seq);
                self.snd_nxt = seq + 1;
                let seg = self.base_segment(now, TcpControl::Fin, seq);
                self.rec.on_sent(now, seq, 1, false);
                self.sent_sacking(&seg);
                return Some((seg, 0, 0));
            }
            return None;
        }
        let in_flight_wnd = seq_diff(self.snd_nxt, self.snd_una).max(0) as usize;
        let peer_room = self.snd_wnd.saturating_sub(in_flight_wnd);
        let allowance = self.rec.send_allowance();
        let mut n = unsent.min(self.smss);
        if how == Send::LossProbe {
            n = n.min(peer_room);
            if n == 0 {
                return None;
            }
        } else if how == Send::Normal {
            n = n.min(peer_room).min(allowance);
            if n == 0 {
                if self.snd_wnd == 0 {
                    // RFC 9293 3.8.6.1: probe the zero window, backing off.
                    self.arm_window_probe(now);
                }
                return None;
            }
            // Sender SWS avoidance (RFC 9293 3.8.6.2.1): a full segment, everything queued,
            // or at least half the largest window the peer offered; else (4) what the
            // window allows once the override timeout passes (the window-probe timer: with
            // nothing in flight no ACK comes to open the window further, and a lost window
            // update would leave the data waiting for good; Linux's persist timer too).
            let all = n == unsent;
            if n < self.smss && !all && n < self.max_snd_wnd / 2 {
                self.arm_window_probe(now);
                return None;
            }
        } else if self.snd_wnd == 0 && peer_room == 0 {
            n = 1;
        } else {
            // The window is open (it opened meanwhile, or sender SWS avoidance held back
            // what it allows): what it allows goes now, the override of RFC 9293
            // 3.8.6.2.1 (4).
            n = n.min(peer_room).min(allowance);
            if n == 0 {
                return None;
            }
        }
        // A zero-window probe is one octet, whatever the records.
        let records = self.in_records() && !(how == Send::WindowProbe && self.snd_wnd == 0);
        let (payload_len, records_sent) = if records {
            // Whole records, the segment's payload room kept whole (SACK blocks give way).
            let room = self.max_record_payload();
            self.record_cut(n.min(room), unsent, room)?
        } else {
            // The options of this segment (SACK blocks come and go) leave this much room.
            (n.min(self.payload_room(now, self.snd_nxt)), None)
        };
        let seq = self.snd_nxt;
        let last = payload_len == unsent;
        let fin = last && fin_due;
        let control = if fin {
            TcpControl::Fin
        } else {
            TcpControl::Psh
        };
        let mut seg = self.base_segment(now, control, seq);
        let sack_owed = records && self.fit_sack(&mut seg, payload_len);
        self.snd_nxt = seq + payload_len + usize::from(fin);
        if fin {
            self.fin_seq = Some(seq + payload_len);
        }
        // The records now sent (a prefix: their ends ascend) leave at once: as many as
        // `record_cut` counted when it cut at a record's end (every segment of small
        // records), else found by a search.
        let snd_nxt = self.snd_nxt;
        let search = |records: &Records| records.prefix_len(|end| seq_diff(end, snd_nxt) <= 0);
        let sent_records = records_sent.unwrap_or_else(|| search(&self.records));
        debug_assert_eq!(sent_records, search(&self.records));
        self.records.drain_front(sent_records);
        self.note_waiting(now);
        self.rec
            .on_sent(now, seq, payload_len + usize::from(fin), false);
        self.sent_data(&seg, sack_owed);
        Some((seg, sent, payload_len))
    }

    /// Arms the window-probe timer (RFC 9293 3.8.6.1, and the override timeout of sender SWS
    /// avoidance, 3.8.6.2.1) unless it runs or something is in flight (its ACK will come,
    /// and the RTO covers it), backing off from one RTO.
    fn arm_window_probe(&mut self, now: Instant) {
        if self.rec.is_empty() && self.window_probe_at.is_none() {
            let base = self.rec.rto();
            self.window_probe_at = Some(now + base * (1u32 << self.window_probe_backoff.min(6)));
        }
    }

    /// SEG.SEQ of a segment without data (an ACK, a RST): SND.NXT, but no further than the
    /// right edge of the peer's window, SND.UNA + SND.WND (Linux's `tcp_acceptable_seq`).
    /// After a zero-window probe, or where the peer shrank its window (RFC 9293 3.8.6),
    /// SND.NXT lies past that edge, and a receiver whose window is shut accepts SEG.SEQ =
    /// RCV.NXT only (3.10.7.4, first check): ACKs at SND.NXT were dropped there.
    fn acceptable_seq(&self) -> TcpSeqNumber {
        let edge = self.snd_una + self.snd_wnd;
        if seq_diff(self.snd_nxt, edge) > 0 {
            edge
        } else {
            self.snd_nxt
        }
    }

    /// The segment [`Self::poll_segment`] would send for a record of `len` octets written
    /// now, when that is the whole record alone in one segment: the connection may send
    /// and owes nothing else ([`Self::nothing_to_send`], an ACK aside: the segment carries
    /// it), nothing is in flight and the send buffer is empty, the record fits one segment
    /// with its options, the peer's window and the congestion window, and no SACK block
    /// would have to give way to it. `None`, nothing changed, otherwise. The host sends
    /// this segment with the record straight from the caller's buffer and then hands both
    /// to [`Self::commit_lone`], which leaves the connection as writing the record and
    /// polling the segment would have ([`crate::host::Host::send_lone_record`]).
    #[inline]
    pub(crate) fn lone_segment(&self, now: Instant, len: usize) -> Option<TcpRepr<'static>> {
        // `poll_new`'s cases, for the state after the write: the one segment is the whole
        // record (`unsent == len`), sent as `Send::Normal` (no retransmission, probe or
        // FIN comes first: `nothing_to_send`, `may_send`). `nothing_to_send`'s tests but
        // for an ACK owed (`ack_now`): the segment carries it, as `plan_in_full` sends new
        // data before a bare ACK.
        let asked = self.rst_pending
            | self.rst_at.is_some()
            | self.window_probe_due
            | self.reopen_resend
            | self.probe_pending
            | self.keepalive_pending;
        let fits = len > 0
            && !asked
            && self.may_send()
            && self.state == State::Established
            && self.syn_acked
            && self.rec.none_lost()
            && self.unsent().1 == 0
            && self.nothing_in_flight()
            && self.rec.is_empty()
            && self.tx.len() == 0
            && len <= self.tx.free()
            && len <= self.smss
            && len <= self.snd_wnd
            && len <= self.rec.send_allowance()
            && len <= self.max_record_payload();
        if !fits {
            return None;
        }
        let seg = self.base_segment(now, TcpControl::Psh, self.snd_nxt);
        // SACK blocks ride with it only where `fit_sack` would keep them all; simpler to
        // leave such a segment to the general path.
        seg.sack_ranges[0].is_none().then_some(seg)
    }

    /// After the host sent `seg` ([`Self::lone_segment`] at `now`) carrying `record`:
    /// the record enters the send buffer as [`Self::send_with_room`] writes it, and the
    /// bookkeeping of the segment is `poll_new`'s (SND.NXT, the record sent, the scoreboard,
    /// the ACK state). `host::lone_tests` holds the two ways together.
    pub(crate) fn commit_lone(&mut self, now: Instant, seg: &TcpRepr<'_>, record: &[u8]) {
        let len = record.len();
        debug_assert_eq!(self.tx.len(), 0);
        // The ring is empty: nothing to keep if it grows.
        let n = self.tx.write_with_room(
            len,
            || [],
            |b| {
                let k = b.len().min(len);
                b[..k].copy_from_slice(&record[..k]);
                k
            },
        );
        // The ring was empty and had room: the whole record is contiguous.
        debug_assert_eq!(n, len);
        if n < len {
            self.tx.write(&record[n..], || []);
        }
        let seq = self.snd_nxt;
        self.push_record(self.data_start() + self.tx.len());
        self.record_stream = true;
        self.snd_nxt = seq + len;
        // The record just pushed, the only one (nothing was unsent): sent whole.
        let snd_nxt = self.snd_nxt;
        let sent_records = self.records.prefix_len(|end| seq_diff(end, snd_nxt) <= 0);
        self.records.drain_front(sent_records);
        self.note_waiting(now);
        self.rec.on_sent(now, seq, len, false);
        self.sent(seg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: (Ipv4Address, u16) = (Ipv4Address::new(198, 18, 0, 1), 4791);
    const PEER: (Ipv4Address, u16) = (Ipv4Address::new(198, 18, 0, 2), 50000);
    const PISS: TcpSeqNumber = TcpSeqNumber(500_000);

    fn from_peer(
        control: TcpControl,
        seq: TcpSeqNumber,
        ack: TcpSeqNumber,
        mss: Option<u16>,
    ) -> TcpRepr<'static> {
        TcpRepr {
            src_port: PEER.1,
            dst_port: US.1,
            control,
            seq_number: seq,
            ack_number: Some(ack),
            window_len: 0xffff,
            window_scale: None,
            max_seg_size: mss,
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp: None,
            payload: &[],
        }
    }

    /// (sequence number, payload) of every data segment `c` sends now.
    fn sent_data(c: &mut Connection, now: Instant) -> Vec<(TcpSeqNumber, Vec<u8>)> {
        let mut v = Vec::new();
        while let Some(s) = c.poll_transmit(now) {
            if !s.payload.is_empty() {
                v.push((s.seq_number, s.payload.to_vec()));
            }
        }
        v
    }

    /// `poll_event` hands out the pending events lowest bit first, one per call, each once:
    /// for every set of pending events the order of the walk over the seven.
    #[test]
    fn poll_event_takes_pending_events_in_the_order_of_their_bits() {
        let ep = Endpoints {
            local: US,
            remote: PEER,
        };
        let mut c = Connection::connect(&ConnConfig::default(), ep, PISS, Instant::ZERO);
        let order = [
            (EV_CONNECTED, ConnEvent::Connected),
            (EV_READABLE, ConnEvent::Readable),
            (EV_WRITABLE, ConnEvent::Writable),
            (EV_PEER_CLOSED, ConnEvent::PeerClosed),
            (EV_CLOSED, ConnEvent::Closed),
            (EV_RESET, ConnEvent::Reset),
            (EV_TIMED_OUT, ConnEvent::TimedOut),
        ];
        for mask in 0u8..128 {
            c.events = mask;
            let want: Vec<ConnEvent> = order
                .iter()
                .filter(|(bit, _)| mask & bit != 0)
                .map(|&(_, ev)| ev)
                .collect();
            let got: Vec<ConnEvent> = std::iter::from_fn(|| c.poll_event()).collect();
            assert_eq!(got, want, "events {mask:#08b}");
            assert_eq!(c.events, 0);
        }
    }

    /// A client connection (MSS 1460) with ISS `iss`, established at 1 ms by the peer's
    /// SYN-ACK (SACK permitted or not), its own SYN sent at 0.
    fn established_client(iss: TcpSeqNumber, sack: bool) -> Connection {
        let cfg = ConnConfig {
            mss: 1460,
            ..ConnConfig::default()
        };
        let ep = Endpoints {
            local: US,
            remote: PEER,
        };
        let t0 = Instant::from_millis(0);
        let mut c = Connection::connect(&cfg, ep, iss, t0);
        while c.poll_transmit(t0).is_some() {}
        let mut syn = from_peer(TcpControl::Syn, PISS, iss + 1, Some(1460));
        syn.sack_permitted = sack;
        c.handle_segment(Instant::from_millis(1), &syn);
        assert_eq!(c.state(), State::Established);
        c
    }

    /// `nothing_in_flight` (Nagle's idle sender, RFC 896): true while nothing sent waits
    /// for its ACK, whatever is queued and not yet sent; false from the send until the ACK
    /// covering everything sent, a partial ACK included.
    #[test]
    fn rfc896_nothing_in_flight_until_everything_sent_is_acknowledged() {
        let iss = TcpSeqNumber(1000);
        let mut c = established_client(iss, false);
        assert!(c.nothing_in_flight());
        let t1 = Instant::from_millis(2);
        assert_eq!(c.send(&[1u8; 100]).unwrap(), 100);
        assert!(c.nothing_in_flight(), "queued, not sent");
        assert_eq!(sent_data(&mut c, t1).len(), 1);
        assert!(!c.nothing_in_flight());
        c.handle_segment(t1, &from_peer(TcpControl::None, PISS + 1, iss + 51, None));
        assert!(!c.nothing_in_flight(), "half acknowledged");
        c.handle_segment(t1, &from_peer(TcpControl::None, PISS + 1, iss + 101, None));
        assert!(c.nothing_in_flight());
    }

    /// `len` (at most 100) octets of the peer's data at stream offset `from`, acknowledging
    /// our SYN (`iss`).
    fn peer_data(iss: TcpSeqNumber, from: usize, len: usize) -> TcpRepr<'static> {
        static DATA: [u8; 100] = [9u8; 100];
        let mut s = from_peer(TcpControl::None, PISS + 1 + from, iss + 1, None);
        s.payload = &DATA[..len];
        s
    }

    /// The SACK blocks of every segment `c` sends now, as offsets from `base`.
    fn sent_sack_blocks(
        c: &mut Connection,
        now: Instant,
        base: TcpSeqNumber,
    ) -> Vec<Vec<(i64, i64)>> {
        let mut v = Vec::new();
        while let Some(s) = c.poll_transmit(now) {
            v.push(
                s.sack_ranges
                    .iter()
                    .flatten()
                    .map(|&(l, r)| {
                        (
                            seq_diff(TcpSeqNumber(l as i32), base),
                            seq_diff(TcpSeqNumber(r as i32), base),
                        )
                    })
                    .collect(),
            );
        }
        v
    }

    /// RFC 2883 4: the octets of a duplicate segment are reported as the first SACK block of
    /// the next ACK (a D-SACK block), in that ACK only; where they lie above RCV.NXT, the
    /// block holding them follows. Old octets wholly below RCV.NXT, the old part of a segment
    /// that also brings new ones, and octets held out of order all count; without SACK there
    /// is no D-SACK.
    #[test]
    fn rfc2883_a_duplicate_is_reported_first_as_a_d_sack_block_in_one_ack() {
        let iss = TcpSeqNumber(1000);
        let base = PISS + 1;
        let seg = |from: usize, len: usize| peer_data(iss, from, len);
        let t = Instant::from_millis(2);
        let mut c = established_client(iss, true);
        c.handle_segment(t, &seg(0, 100));
        c.handle_segment(t, &seg(100, 100));
        assert_eq!(
            sent_sack_blocks(&mut c, t, base),
            vec![vec![]],
            "the ACK of 200"
        );
        // Wholly old.
        c.handle_segment(t, &seg(0, 100));
        assert_eq!(sent_sack_blocks(&mut c, t, base), vec![vec![(0, 100)]]);
        assert_eq!(
            sent_sack_blocks(&mut c, t, base),
            Vec::<Vec<_>>::new(),
            "one ACK only"
        );
        // Partly old: its first 50 octets.
        c.handle_segment(t, &seg(150, 100));
        assert_eq!(sent_sack_blocks(&mut c, t, base), vec![vec![(150, 200)]]);
        // Out of order (a hole at 250), then again: D-SACK, then the block holding it.
        c.handle_segment(t, &seg(300, 100));
        assert_eq!(sent_sack_blocks(&mut c, t, base), vec![vec![(300, 400)]]);
        c.handle_segment(t, &seg(300, 100));
        assert_eq!(
            sent_sack_blocks(&mut c, t, base),
            vec![vec![(300, 400), (300, 400)]]
        );
        // Partly held out of order: the held part.
        c.handle_segment(t, &seg(350, 100));
        assert_eq!(
            sent_sack_blocks(&mut c, t, base),
            vec![vec![(350, 400), (300, 450)]]
        );
        // The hole filled: a plain ACK.
        c.handle_segment(t, &seg(250, 50));
        assert_eq!(sent_sack_blocks(&mut c, t, base), vec![vec![]]);

        // Without SACK, no D-SACK.
        let mut c = established_client(iss, false);
        c.handle_segment(t, &seg(0, 100));
        c.handle_segment(t, &seg(100, 100));
        let _ = sent_sack_blocks(&mut c, t, base);
        c.handle_segment(t, &seg(0, 100));
        assert_eq!(sent_sack_blocks(&mut c, t, base), vec![vec![]]);
    }

    /// RFC 2883 4 on the sending side: the first block reports a duplicate when it lies at
    /// or below the cumulative ACK or inside the second block; other first blocks, and
    /// blocks that are empty, reach past SND.NXT or lie more than 2^30 behind, do not.
    #[test]
    fn rfc2883_4_a_first_block_below_the_ack_or_inside_the_second_is_a_d_sack() {
        let s = |n: u32| 1_000_000u32.wrapping_add(n);
        let ack = TcpSeqNumber(s(5000) as i32);
        let nxt = TcpSeqNumber(s(9000) as i32);
        type Blocks = [Option<(u32, u32)>; 3];
        let cases: [(Blocks, bool); 10] = [
            ([None; 3], false),
            ([Some((s(1000), s(2000))), None, None], true),
            ([Some((s(4000), s(5000))), None, None], true),
            ([Some((s(4000), s(5001))), None, None], false),
            (
                [Some((s(6000), s(7000))), Some((s(6000), s(8000))), None],
                true,
            ),
            (
                [Some((s(6000), s(7000))), Some((s(7000), s(8000))), None],
                false,
            ),
            ([Some((s(6000), s(7000))), None, None], false),
            ([Some((s(2000), s(2000))), None, None], false),
            (
                [Some((s(8000), s(9001))), Some((s(6000), s(9500))), None],
                false,
            ),
            (
                [
                    Some((s(5000).wrapping_sub((1 << 30) + 1), s(1000))),
                    None,
                    None,
                ],
                false,
            ),
        ];
        for (ranges, want) in cases {
            assert_eq!(
                dsack_block(&ranges, ack, nxt, 1 << 31).is_some(),
                want,
                "{ranges:?}"
            );
        }
        // Across the sequence-space wrap.
        let ack = TcpSeqNumber(100);
        let r = [Some((u32::MAX - 99, 50)), None, None];
        assert_eq!(
            dsack_block(&r, ack, TcpSeqNumber(9000), 150),
            Some((TcpSeqNumber(-100), TcpSeqNumber(50)))
        );
        // Longer than the largest window the peer offered: no duplicate it received.
        assert_eq!(dsack_block(&r, ack, TcpSeqNumber(9000), 149), None);
    }

    /// A D-SACK block owed (the old part of a segment that also brings new octets) reaches
    /// the peer when the next segment is a full record of a bulk sender: the full-record
    /// path leaves that segment to the walk, and a data segment without room for the block
    /// leaves it owed to the pure ACK after it, rather than forgetting it.
    #[test]
    fn a_d_sack_block_survives_a_full_record_segment() {
        let iss = TcpSeqNumber(1000);
        let base = PISS + 1;
        let seg = |from: usize, len: usize| peer_data(iss, from, len);
        let t = Instant::from_millis(2);
        for walk in [false, true] {
            let mut c = established_client(iss, true);
            c.full_walk_only = walk;
            c.handle_segment(t, &seg(0, 100));
            c.handle_segment(t, &seg(100, 100));
            let _ = sent_sack_blocks(&mut c, t, base);
            // Partly old: its first 50 octets are a duplicate.
            c.handle_segment(t, &seg(150, 100));
            assert_eq!(c.dsack, Some((150, 200)));
            assert!(
                c.quick_ack_owed(),
                "a segment with old octets draws its ACK at once"
            );
            // The engine writes one full record (MULPDU) before the next transmit pass.
            let room = c.max_record_payload();
            assert_eq!(
                c.send_with_room(room, |b| {
                    b[..room].fill(1);
                    room
                })
                .unwrap(),
                room
            );
            let blocks = sent_sack_blocks(&mut c, t, base);
            assert!(
                blocks.iter().any(|b| b.first() == Some(&(150, 200))),
                "walk only: {walk}: no segment carries the D-SACK: {blocks:?}"
            );
        }
    }

    /// RFC 9293 3.10.7.4 / Linux's `tcp_check_req`: the peer's SYN again in SYN-RECEIVED
    /// (our SYN-ACK lost) draws the SYN-ACK again at once. Its SEG.SEQ = RCV.NXT - 1 failed
    /// the acceptability test, which returned before the code meant for it: the SYN-ACK
    /// waited for our RTO (1 s before any RTT sample).
    #[test]
    fn a_retransmitted_syn_in_syn_received_draws_the_syn_ack_again() {
        let ep = Endpoints {
            local: US,
            remote: PEER,
        };
        let t0 = Instant::from_millis(0);
        let mut syn = from_peer(TcpControl::Syn, PISS, TcpSeqNumber(0), Some(1460));
        syn.ack_number = None;
        let mut c = Connection::accept(&ConnConfig::default(), ep, TcpSeqNumber(7000), &syn, t0);
        assert_eq!(
            c.poll_transmit(t0).map(|s| s.control),
            Some(TcpControl::Syn)
        );
        assert!(c.poll_transmit(t0).is_none());
        let t1 = Instant::from_millis(3);
        c.handle_segment(t1, &syn);
        assert_eq!(
            c.poll_transmit(t1).map(|s| (s.control, s.ack_number)),
            Some((TcpControl::Syn, Some(PISS + 1))),
            "no SYN-ACK for the SYN again"
        );
        assert!(c.poll_transmit(t1).is_none(), "one SYN-ACK per SYN");
    }

    /// RFC 9293 3.10.7.4, RFC 5961 7 / Linux's `tcp_check_req` (`tcp_oow_rate_limited`,
    /// `TCPACKSkippedSynRecv`): the SYN-ACK a duplicate SYN in SYN-RECEIVED draws again is
    /// limited to one per `oow_ack_interval`. A peer (or a forger who saw the first SYN)
    /// repeating the SYN otherwise drew one SYN-ACK per copy, each also a retransmission
    /// of our SYN that restarted its timer.
    #[test]
    fn duplicate_syns_in_syn_received_draw_one_syn_ack_per_interval() {
        let ep = Endpoints {
            local: US,
            remote: PEER,
        };
        let t0 = Instant::from_millis(0);
        let mut syn = from_peer(TcpControl::Syn, PISS, TcpSeqNumber(0), Some(1460));
        syn.ack_number = None;
        let cfg = ConnConfig::default();
        let mut c = Connection::accept(&cfg, ep, TcpSeqNumber(7000), &syn, t0);
        assert_eq!(
            c.poll_transmit(t0).map(|s| s.control),
            Some(TcpControl::Syn)
        );
        let syn_acks = |c: &mut Connection, at: Instant, copies: usize| {
            let mut n = 0;
            for _ in 0..copies {
                c.handle_segment(at, &syn);
                while let Some(s) = c.poll_transmit(at) {
                    n += usize::from(s.control == TcpControl::Syn);
                }
            }
            n
        };
        let t1 = Instant::from_millis(3);
        assert_eq!(syn_acks(&mut c, t1, 100), 1, "a flood of duplicate SYNs");
        assert_eq!(c.stats().oow_acks_suppressed, 99);
        // The next interval: the peer's SYN again (its retransmission) is answered.
        let t2 = t1 + cfg.oow_ack_interval;
        assert_eq!(syn_acks(&mut c, t2, 1), 1, "the SYN a whole interval later");
    }

    /// RFC 2018 4: every SACK block of an ACK within what is outstanding marks the segments
    /// it covers (up to the three a segment carries); a block beyond SND.NXT is ignored and
    /// does not hide the ones after it.
    #[test]
    fn rfc2018_every_sack_block_within_the_outstanding_data_counts() {
        let iss = TcpSeqNumber(1000);
        let mut c = established_client(iss, true);
        let t1 = Instant::from_millis(2);
        assert_eq!(c.send(&[7u8; 4 * 1460]).unwrap(), 4 * 1460);
        let sent = sent_data(&mut c, t1);
        assert_eq!(sent.len(), 4);
        assert_eq!(c.rec.in_flight(), 4 * 1460);
        let at = |k: usize| (iss + 1 + k * 1460).0 as u32;
        let mut ack = from_peer(TcpControl::None, PISS + 1, iss + 1, None);
        ack.sack_ranges = [
            Some((at(5), at(6))),
            Some((at(1), at(2))),
            Some((at(3), at(4))),
        ];
        c.handle_segment(Instant::from_millis(3), &ack);
        assert_eq!(c.rec.in_flight(), 2 * 1460);
    }

    /// RFC 9293 3.4: sequence numbers wrap. After 2^32 octets an acknowledgement can land
    /// exactly on the ISS again; that must not read as "our SYN is unacknowledged" (the
    /// send ring would then start one octet off: every octet sent shifted, the next ACK
    /// consuming one too few, a retransmission at the ISS taken for the SYN). The 4 GiB in
    /// between are not sent here: the connection is put where they leave it, snd_una on
    /// the ISS with the SYN long acknowledged.
    #[test]
    fn rfc9293_3_4_an_ack_landing_on_the_iss_after_a_wrap_is_not_the_syn() {
        let iss = TcpSeqNumber(1000);
        let mut c = established_client(iss, false);
        let t1 = Instant::from_millis(2);
        assert_eq!(c.send(b"first").unwrap(), 5);
        assert_eq!(sent_data(&mut c, t1), vec![(iss + 1, b"first".to_vec())]);
        c.handle_segment(t1, &from_peer(TcpControl::None, PISS + 1, iss + 6, None));
        assert_eq!(c.tx.len(), 0);
        // The wrap: the next octet to be acknowledged is the ISS's sequence number.
        c.iss = c.snd_una;
        let at = c.snd_una;
        assert_eq!(c.send(b"after the wrap").unwrap(), 14);
        let t2 = Instant::from_millis(3);
        assert_eq!(
            sent_data(&mut c, t2),
            vec![(at, b"after the wrap".to_vec())]
        );
        // No acknowledgement: the RTO resends the same octets at the same place (the
        // segment at the ISS's number is data, not the SYN).
        let rto = c.poll_timeout().expect("retransmission timer");
        c.handle_timeout(rto);
        assert_eq!(
            sent_data(&mut c, rto),
            vec![(at, b"after the wrap".to_vec())]
        );
        // Its acknowledgement empties the ring exactly, and what follows goes after it.
        c.handle_segment(rto, &from_peer(TcpControl::None, PISS + 1, at + 14, None));
        assert_eq!(c.tx.len(), 0);
        assert_eq!(c.send(b"next").unwrap(), 4);
        assert_eq!(sent_data(&mut c, rto), vec![(at + 14, b"next".to_vec())]);
    }

    /// One end of the two-connection exchanges of
    /// `nothing_to_send_agrees_with_the_full_walk`: a segment in flight, its payload owned.
    type Flight = VecDeque<(TcpRepr<'static>, Vec<u8>)>;

    /// When `c` finds itself quiet ([`Connection::nothing_to_send`]), the full walk must
    /// agree: no segment, and no field of the connection changed.
    fn check_quiet(c: &mut Connection, now: Instant) {
        if c.nothing_to_send() {
            let before = format!("{c:?}");
            assert!(
                c.plan_in_full(now).is_none(),
                "quiet, yet the walk sends: {before}"
            );
            assert_eq!(
                format!("{c:?}"),
                before,
                "quiet, yet the walk changed the connection"
            );
        }
    }

    /// Every segment `c` sends now, into `q` (the quiet check before each poll).
    fn drain_into(c: &mut Connection, now: Instant, q: &mut Flight) {
        loop {
            check_quiet(c, now);
            let Some(s) = c.poll_transmit(now) else {
                return;
            };
            let repr = TcpRepr {
                src_port: s.src_port,
                dst_port: s.dst_port,
                control: s.control,
                seq_number: s.seq_number,
                ack_number: s.ack_number,
                window_len: s.window_len,
                window_scale: s.window_scale,
                max_seg_size: s.max_seg_size,
                sack_permitted: s.sack_permitted,
                sack_ranges: s.sack_ranges,
                timestamp: s.timestamp,
                payload: &[],
            };
            q.push_back((repr, s.payload.to_vec()));
        }
    }

    /// Hands the oldest segment of `q` to `c`.
    fn deliver(c: &mut Connection, now: Instant, q: &mut Flight) {
        if let Some((mut repr, payload)) = q.pop_front() {
            repr.payload = &payload;
            c.handle_segment(now, &repr);
        }
    }

    /// The connections of the lossy-exchange proptests: a small MSS (many segments per
    /// message), buffers of `rx_buffer` and `tx_buffer` octets (windows that fill), short
    /// timers (probes, keep-alives and timeouts within a case).
    fn exchange_cfg(
        rx_buffer: usize,
        tx_buffer: usize,
        sack: bool,
        timestamps: bool,
        delack: bool,
    ) -> ConnConfig {
        ConnConfig {
            rx_buffer,
            tx_buffer,
            mss: 300,
            ack_delay: delack.then(|| Duration::from_micros(500)),
            keep_alive: Some(Duration::from_millis(50)),
            timeout: Some(Duration::from_millis(400)),
            time_wait: Duration::from_millis(20),
            sack,
            timestamps,
            ..ConnConfig::default()
        }
    }

    /// The polls [`drain_both_ways`] saw take the full-record path: its first segment of a
    /// pass ([`Connection::next_full_record`]) and the ones after it
    /// ([`Connection::poll_full_again`]).
    #[derive(Default)]
    struct Taken {
        fast: usize,
        again: usize,
    }

    /// Every segment `c` sends now, into `q`, each polled twice: by `c` as the host's
    /// transmit pass polls ([`Connection::poll_full_again`] after a full-record segment,
    /// else [`Connection::poll_segment`]) and by a copy of it made to take the full walk
    /// ([`Connection::plan_in_full`] behind [`Connection::nothing_to_send`]); the
    /// segments, their payloads and the two connections afterwards must be the same. One
    /// call is one transmit pass: nothing else is done to `c` between its polls. Counts in
    /// `taken` the polls the full-record path took.
    fn drain_both_ways(c: &mut Connection, now: Instant, q: &mut Flight, taken: &mut Taken) {
        // The segment and its payload, an external record's octets standing for its token
        // and offset, and whether it came from the full-record path.
        // `single_external` is checked against the walk at every segment: it names the one
        // external piece exactly when the walk gives one covering the whole payload.
        let owned = |o: Outgoing<'_>| {
            let mut payload = Vec::new();
            let mut externals = Vec::new();
            let mut pieces = 0;
            o.for_each_piece(|p| {
                pieces += 1;
                match p {
                    Piece::Octets(b) => payload.extend_from_slice(b),
                    Piece::External { token, at, len } => {
                        externals.push((token, at, len));
                        payload.extend((0..len).map(|i| (token as usize * 31 + at + i) as u8))
                    }
                }
            });
            let one = match externals[..] {
                [(token, at, len)] if pieces == 1 && len == o.payload_len() && len > 0 => {
                    Some((token, at))
                }
                _ => None,
            };
            assert_eq!(
                o.single_external(),
                one,
                "single_external and the walk differ"
            );
            ((o.repr, payload), o.is_full_record())
        };
        let mut prev: Option<TcpRepr<'static>> = None;
        loop {
            let mut walk = c.clone();
            walk.full_walk_only = true;
            let again = prev
                .as_ref()
                .and_then(|p| c.poll_full_again(now, p).map(owned));
            let got = match again {
                Some(g) => {
                    taken.again += 1;
                    Some(g)
                }
                None => {
                    taken.fast += usize::from(c.clone().next_full_record(now).is_some());
                    c.poll_segment(now).map(owned)
                }
            };
            let want = walk.poll_segment(now).map(|o| owned(o).0);
            assert_eq!(
                got.as_ref().map(|g| &g.0),
                want.as_ref(),
                "the full-record path and the walk send differently"
            );
            walk.full_walk_only = false;
            assert_eq!(
                format!("{c:?}"),
                format!("{walk:?}"),
                "the full-record path and the walk leave different connections"
            );
            let Some((s, full)) = got else {
                return;
            };
            prev = full.then_some(s.0);
            q.push_back(s);
        }
    }

    /// The cases the full-record path must leave to the walk though a full record waits,
    /// set up one by one (the random exchanges reach them too rarely to show a missing
    /// test): a window probe asked for after the window opened again (the walk clears the
    /// flag, then sends the record), a loss probe, an RST owed, the FIN due with the last
    /// record, a state past the ones that send new data, the handshake not acknowledged.
    /// The path must decline each at the first poll, and the walk's segment and connection
    /// are what `plan`
    /// gives, then and at every poll after it.
    #[test]
    fn the_full_record_path_leaves_the_walk_what_comes_first() {
        let setup = |records: usize| {
            let now = Instant::from_millis(1);
            let mut a = established_client(TcpSeqNumber(7), false);
            let room = a.max_record_payload();
            for _ in 0..records {
                assert_eq!(a.send(&vec![0x33; room]), Ok(room));
                a.end_record();
            }
            let mut fast = Taken::default();
            let mut q = Flight::new();
            assert!(
                a.clone().next_full_record(now).is_some(),
                "the record goes the fast way"
            );
            drain_both_ways(&mut a.clone(), now, &mut q, &mut fast);
            (a, now)
        };
        type Change = fn(&mut Connection);
        let cases: [(&str, usize, Change); 6] = [
            ("window probe", 2, |c| c.window_probe_due = true),
            ("loss probe", 2, |c| c.probe_pending = true),
            ("RST", 2, |c| c.rst_pending = true),
            ("FIN with the last record", 1, |c| c.close()),
            ("closed", 2, |c| c.state = State::Closed),
            ("SYN not acknowledged", 2, |c| c.syn_acked = false),
        ];
        for (what, records, change) in cases {
            let (mut a, now) = setup(records);
            change(&mut a);
            assert!(
                a.clone().next_full_record(now).is_none(),
                "{what}: the fast path took it"
            );
            // The polls after the first may take it (the record after the FIN's, say).
            drain_both_ways(&mut a, now, &mut Flight::new(), &mut Taken::default());
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
        /// The full-record path of `plan` ([`Connection::next_full_record`]) against the walk
        /// it skips, at every poll of a record stream (records mostly a segment's worth,
        /// some shorter or longer, external records among them) sent through a path that
        /// loses, duplicates and reorders segments, with timers, reads, window changes, data
        /// the other way, closes and aborts in between: every segment, payload and
        /// connection state the same. Each case starts with a bulk burst, so the path is
        /// taken in every case (checked: a path never taken would agree vacuously).
        #[test]
        fn the_full_record_path_agrees_with_the_full_walk(
            ops in proptest::collection::vec((0u8..14, 0u16..3000), 1..150),
            sack in proptest::bool::ANY,
            timestamps in proptest::bool::ANY,
            delack in proptest::bool::ANY,
        ) {
            let cfg = exchange_cfg(4096, 8192, sack, timestamps, delack);
            let ea = Endpoints { local: US, remote: PEER };
            let eb = Endpoints { local: PEER, remote: US };
            let mut now = Instant::from_millis(1);
            let (mut ab, mut ba) = (Flight::new(), Flight::new());
            let mut fast = Taken::default();
            let mut a = Connection::connect(&cfg, ea, TcpSeqNumber(7), now);
            drain_both_ways(&mut a, now, &mut ab, &mut fast);
            let (mut syn, payload) = ab.pop_front().expect("the SYN");
            syn.payload = &payload;
            let mut b = Connection::accept(&cfg, eb, PISS, &syn, now);
            drain_both_ways(&mut b, now, &mut ba, &mut fast);
            deliver(&mut a, now, &mut ba);
            drain_both_ways(&mut a, now, &mut ab, &mut fast);
            deliver(&mut b, now, &mut ab);
            let data = [0x5au8; 3000];
            let room = a.max_record_payload();
            for _ in 0..4 {
                let _ = a.send(&data[..room]);
                a.end_record();
            }
            drain_both_ways(&mut a, now, &mut ab, &mut fast);
            proptest::prop_assert!(fast.fast > 0, "the bulk burst did not take the full-record path");
            proptest::prop_assert!(
                fast.again > 0,
                "the bulk burst's later segments did not take poll_full_again"
            );
            let mut token = 1;
            for (op, n) in ops {
                let k = usize::from(n);
                match op {
                    0 | 1 => {
                        // Mostly a segment's worth, else any length.
                        let len = if n % 4 != 0 { a.max_record_payload() } else { k % 700 + 1 };
                        let _ = a.send(&data[..len.min(data.len())]);
                        a.end_record();
                    }
                    2 => {
                        let len = if n % 2 == 0 { a.max_record_payload() } else { k % 500 + 1 };
                        if a.send_external_record(len, token) == Ok(true) {
                            token += 1;
                        }
                    }
                    3 => { let _ = b.send(&data[..k % 400]); }
                    4 | 5 => deliver(&mut b, now, &mut ab),
                    6 => deliver(&mut a, now, &mut ba),
                    7 => { if n % 2 == 0 { ab.pop_front(); } else { ba.pop_front(); } }
                    8 => {
                        let q = if n % 2 == 0 { &mut ab } else { &mut ba };
                        if let Some(s) = q.pop_front() {
                            if n % 3 == 0 { q.push_back(s.clone()); }
                            q.push_back(s);
                        }
                    }
                    9 => {
                        now += Duration::from_micros(u64::from(n) * 40);
                        for c in [&mut a, &mut b] {
                            if c.poll_timeout().is_some_and(|t| t <= now) {
                                c.handle_timeout(now);
                            }
                        }
                    }
                    10 => {
                        let c = if n % 2 == 0 { &mut a } else { &mut b };
                        let mut buf = vec![0; k];
                        let _ = c.recv(&mut buf);
                    }
                    11 => { let _ = a.take_acked_external(); }
                    12 => if n < 20 { a.close() } else if n < 40 { b.close() },
                    _ => if n < 10 { a.abort() } else if n < 20 { b.abort() },
                }
                if n % 4 != 0 {
                    drain_both_ways(&mut a, now, &mut ab, &mut fast);
                    drain_both_ways(&mut b, now, &mut ba, &mut fast);
                }
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(160))]
        /// The quiet check of `plan` ([`Connection::nothing_to_send`]) against the walk it
        /// skips ([`Connection::plan_in_full`]), at every poll of two connections that
        /// exchange data both ways through a path that loses and reorders segments, with
        /// timers, reads, records, closes and aborts in between: whenever it says quiet,
        /// the walk sends nothing and changes nothing.
        #[test]
        fn nothing_to_send_agrees_with_the_full_walk(
            ops in proptest::collection::vec((0u8..13, 0u16..3000), 1..120),
            sack in proptest::bool::ANY,
            timestamps in proptest::bool::ANY,
            delack in proptest::bool::ANY,
        ) {
            let cfg = exchange_cfg(2048, 2048, sack, timestamps, delack);
            let ea = Endpoints { local: US, remote: PEER };
            let eb = Endpoints { local: PEER, remote: US };
            let mut now = Instant::from_millis(1);
            let (mut ab, mut ba) = (Flight::new(), Flight::new());
            let mut a = Connection::connect(&cfg, ea, TcpSeqNumber(7), now);
            drain_into(&mut a, now, &mut ab);
            let (mut syn, payload) = ab.pop_front().expect("the SYN");
            syn.payload = &payload;
            let mut b = Connection::accept(&cfg, eb, PISS, &syn, now);
            let data = [0x5au8; 3000];
            for (op, n) in ops {
                let k = usize::from(n);
                match op {
                    0 => { let _ = a.send(&data[..k]); }
                    1 => { let _ = b.send(&data[..k]); }
                    2 | 3 => deliver(&mut b, now, &mut ab),
                    4 | 5 => deliver(&mut a, now, &mut ba),
                    6 => { if n % 2 == 0 { ab.pop_front(); } else { ba.pop_front(); } }
                    7 => {
                        let q = if n % 2 == 0 { &mut ab } else { &mut ba };
                        if let Some(s) = q.pop_front() { q.push_back(s); }
                    }
                    8 => {
                        now += Duration::from_micros(u64::from(n) * 40);
                        for c in [&mut a, &mut b] {
                            if c.poll_timeout().is_some_and(|t| t <= now) {
                                c.handle_timeout(now);
                            }
                        }
                    }
                    9 => {
                        let c = if n % 2 == 0 { &mut a } else { &mut b };
                        let mut buf = vec![0; k];
                        let _ = c.recv(&mut buf);
                    }
                    10 => if n % 2 == 0 { a.end_record() } else { b.end_record() },
                    11 => if n < 40 { a.close() } else if n < 80 { b.close() },
                    _ => if n < 15 { a.abort() } else if n < 30 { b.abort() },
                }
                check_quiet(&mut a, now);
                check_quiet(&mut b, now);
                if n % 3 != 0 {
                    drain_into(&mut a, now, &mut ab);
                    drain_into(&mut b, now, &mut ba);
                }
            }
        }
    }
}
