//! Sender-side loss recovery and congestion control of Warpcore's TCP, sans-IO: the caller
//! reports every segment sent and every ACK, asks what to retransmit and how much new data
//! the window allows, and runs the timers this module schedules.
//!
//! * RTT in microseconds (RFC 6298 2): samples from timestamp echoes (RFC 7323 4.1) or from
//!   segments never retransmitted (Karn), SRTT/RTTVAR, RTO = SRTT + max(G, 4 RTTVAR, floor)
//!   (the configurable floor on the variance term, as Linux's `tcp_rto_min`: at least that
//!   margin above SRTT, which a decayed RTTVAR on a steady path would otherwise not leave),
//!   capped by the configurable ceiling, exponential backoff (RFC 6298 5.5).
//! * A scoreboard of the segments outstanding, in sequence order (RFC 6675's notions: SACKed,
//!   lost, retransmitted; `in_flight` is its pipe).
//! * RACK-TLP (RFC 8985): a segment is lost once a segment sent after it was delivered and
//!   a reordering window passed (6.2; min_RTT / 4 (min_RTT a windowed minimum over 300 s,
//!   6.2 step 1: `MinRtt`), or none in recovery or with three
//!   segments SACKed until reordering is seen; one step of min_RTT / 4 wider for each round
//!   trip that brought a D-SACK, for 16 recovery episodes, never beyond SRTT: step 4);
//!   otherwise the reorder timer fires then, and an RTO due meanwhile waits for it (RFC
//!   8985 8: the timers are mutually exclusive). A
//!   tail loss is probed after PTO = 2 SRTT (7.2), not an RTO, so it costs about one RTT (no probe in
//!   recovery or while segments are SACKed, 7.2; with or without SACK); one probe per
//!   flight (7.3, TLP.end_seq): an unanswered probe leaves the rest to the RTO. A probe
//!   that resent the tail and is answered repaired a loss and the window is reduced (7.4.2;
//!   not when the ACK's timestamp echo shows that the original arrived, or a D-SACK in
//!   it that both did).
//! * Without SACK, three duplicate ACKs mark the first segment lost (RFC 5681 3.2; outside
//!   recovery only: not in an episode nor after an RTO while SND.UNA is below `recover`,
//!   RFC 6582 3.2 step 1 and section 4) and NewReno
//!   partial ACKs retransmit the next hole until `recover` is acknowledged (RFC 6582 3.2);
//!   each duplicate ACK takes a segment out of the pipe (RFC 5681 3.2's inflation, as
//!   Linux's `tcp_add_reno_sack`; never more than is outstanding, as its
//!   `tcp_limit_reno_sacked`, at every ACK), so new data and the next retransmissions flow. The first
//!   retransmission of a recovery episode goes out at once whatever the pipe (RFC 6675 5
//!   (4.3)).
//! * Congestion control: NewReno (RFC 5681, 6582) or CUBIC (RFC 9438), initial window of ten
//!   segments (RFC 6928), one reduction per recovery episode, cwnd of one segment after an
//!   RTO and slow start from there while the RTO's losses are resent (RFC 5681 3.1), or
//!   none at all.
//! * Proportional Rate Reduction (RFC 9937, which obsoletes RFC 6937) in a fast recovery
//!   episode (SACK, RACK or three duplicate ACKs; not an RTO's): each ACK's delivered
//!   data (cumulative advance and newly SACKed octets, a segment per duplicate ACK without
//!   SACK while prr_delivered < RecoverFS, RFC 9937 section 6.2) set what may be sent,
//!   sndcnt: while the pipe exceeds ssthresh, the share ssthresh / RecoverFS of what was
//!   delivered (RecoverFS the octets outstanding and not SACKed when the episode began;
//!   for NewReno's 1/2 about a segment every other ACK, a little more when segments were
//!   SACKed before), below it no more than the ACK
//!   delivered (PRR-CRB), or on a SafeACK (SND.UNA advanced, no further loss) back
//!   towards ssthresh by at most one segment beyond that (PRR-SSRB). The window the
//!   module reports in the episode is pipe + sndcnt (Linux's `tcp_cwnd_reduction`), and
//!   ssthresh once it ends. Before, cwnd dropped to ssthresh at once and RFC 6675's pipe
//!   < cwnd held the sender silent for about half a round trip, then let it burst (or,
//!   with heavy losses, far below ssthresh, all at once up to it).
//! * A spurious RTO is undone (the Eifel algorithm: detection by timestamps, RFC 3522;
//!   response, RFC 4015): when the first ACK that advances after an RTO echoes a timestamp
//!   older than the retransmission, the original segments arrived; the congestion state
//!   before the RTO comes back, the RTO's backoff is dropped and the segments the RTO marked
//!   lost are not resent. With an RTO only 5 ms (its floor) above SRTT a descheduled peer or
//!   a loaded host can delay ACKs past it; without the undo each such delay costs slow start from one
//!   segment.
//! * D-SACKs (RFC 2883, [`Recovery::on_dsack`]) widen RACK's reordering window (RFC 8985
//!   6.2 step 4), and once they have covered every retransmission of a recovery episode,
//!   its window reduction is undone (RFC 3708; Linux's `tcp_try_undo_dsack`).

use std::collections::VecDeque;

use smoltcp::time::{Duration, Instant};
use smoltcp::wire::TcpSeqNumber;

/// Congestion controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Congestion {
    /// No congestion window: only the peer's receive window limits the sender.
    None,
    /// NewReno (RFC 5681, RFC 6582).
    NewReno,
    /// CUBIC (RFC 9438).
    Cubic,
}

/// Configuration of a connection's recovery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveryConfig {
    /// Floor of the RTO (RFC 6298 2.4), applied as Linux applies its `tcp_rto_min`: to the
    /// variance term, RTO = SRTT + max(4 RTTVAR, `rto_min`), the least margin above SRTT.
    /// See `docs/decisions/0002-own-tcp.md`: 5 ms.
    pub rto_min: Duration,
    /// Ceiling of the RTO (RFC 6298 2.5: at least 60 s).
    pub rto_max: Duration,
    /// RTO before the first sample (RFC 6298 2.1: 1 s).
    pub rto_initial: Duration,
    /// Congestion controller.
    pub congestion: Congestion,
    /// Initial window in segments (RFC 6928: 10).
    pub initial_window_segments: u32,
    /// RACK-TLP (RFC 8985); off: duplicate-ACK counting and the RTO only.
    pub rack_tlp: bool,
    /// Least probe timeout (RFC 8985 7.2 leaves the granularity to the sender): 1 ms, far
    /// below the RTO floor and above a poll loop's jitter.
    pub pto_min: Duration,
    /// The peer's worst-case delayed-ACK time added to the PTO when one segment is in flight
    /// (RFC 8985 7.2 WCDelAckT). Our engines delay an ACK 20 us by default (the engine's
    /// `ENGINE_ACK_DELAY`) and refuse more than this 1 ms; a kernel peer that delays longer only
    /// costs a spurious probe. 1 ms.
    pub max_ack_delay: Duration,
}

impl Default for RecoveryConfig {
    fn default() -> Self {
        RecoveryConfig {
            rto_min: Duration::from_millis(5),
            rto_max: Duration::from_secs(60),
            rto_initial: Duration::from_secs(1),
            congestion: Congestion::Cubic,
            initial_window_segments: 10,
            rack_tlp: true,
            pto_min: Duration::from_millis(1),
            max_ack_delay: Duration::from_millis(1),
        }
    }
}

/// What a timer expiry asks of the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutAction {
    /// Nothing to send (a reorder-timer expiry may have marked losses: ask
    /// [`Recovery::next_retransmit`]).
    None,
    /// Tail loss probe (RFC 8985 7.3): send one new segment if there is one and the peer's
    /// window allows, else retransmit the last segment sent.
    Probe,
    /// Retransmission timeout: everything outstanding is lost; resend from SND.UNA.
    Retransmit,
}

/// What an ACK did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AckOutcome {
    /// Octets (sequence space) newly acknowledged cumulatively.
    pub newly_acked: usize,
    /// Octets newly covered by SACK blocks.
    pub newly_sacked: usize,
    /// The RTT sample taken, if any.
    pub rtt_sample: Option<Duration>,
    /// Segments this ACK marked lost.
    pub lost_marked: usize,
}

/// Counters of one connection's recovery.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecoveryStats {
    /// Retransmission timeouts.
    pub rto_count: u64,
    /// Retransmission timeouts while the peer's window was shut: zero-window probes sent
    /// again, not counted in `rto_count` and no congestion response.
    pub window_probe_timeouts: u64,
    /// Tail loss probes sent.
    pub tlp_count: u64,
    /// Window reductions: recovery episodes entered, and losses a loss probe repaired (RFC
    /// 8985 7.4.2).
    pub fast_recoveries: u64,
    /// Segments retransmitted.
    pub retransmitted_segments: u64,
    /// Octets retransmitted.
    pub retransmitted_octets: u64,
    /// Smoothed RTT, microseconds (0: no sample yet).
    pub srtt_us: u64,
    /// RTT variation, microseconds.
    pub rttvar_us: u64,
    /// RACK.min_RTT (RFC 8985 6.2 step 1): the least RTT of about the last 300 s (a windowed
    /// minimum), microseconds.
    pub min_rtt_us: u64,
    /// Current RTO, microseconds.
    pub rto_us: u64,
    /// Congestion window, octets.
    pub cwnd: u64,
    /// Slow-start threshold, octets.
    pub ssthresh: u64,
    /// Octets in flight (pipe).
    pub in_flight: u64,
    /// RTOs found spurious and undone (RFC 3522, RFC 4015).
    pub spurious_rtos: u64,
    /// ACKs carrying a D-SACK block (RFC 2883): the peer received a segment twice, so a
    /// retransmission was not needed.
    pub dsacks_received: u64,
    /// Recovery episodes whose window reduction was undone: D-SACKs showed that every
    /// retransmission of the episode was unneeded (RFC 3708 detection, Linux's
    /// `tcp_try_undo_dsack` response).
    pub undone_recoveries: u64,
    /// The reordering window's multiplier (RFC 8985 6.2 step 4, RACK.reo_wnd_mult): 1, and
    /// one more for each round trip in which a D-SACK arrived, back to 1 after 16
    /// recovery episodes without one.
    pub reo_wnd_mult: u64,
}

/// One segment outstanding (sequence numbers as raw `u32` in wrapping arithmetic).
#[derive(Debug, Clone, Copy)]
struct Seg {
    start: TcpSeqNumber,
    end: TcpSeqNumber,
    xmit: Instant,
    retransmitted: bool,
    /// Ever sent more than once (`retransmitted` is cleared when a retransmission is lost
    /// again): entries with this unset keep their first sending time, in sequence order.
    resent: bool,
    sacked: bool,
    lost: bool,
}

impl Seg {
    fn len(&self) -> usize {
        self.end - self.start
    }

    /// In the pipe (RFC 6675): sent, not SACKed, not lost-and-unsent.
    fn in_pipe(&self) -> bool {
        !self.sacked && (!self.lost || self.retransmitted)
    }

    /// Lost and waiting for its retransmission.
    fn awaits_retransmit(&self) -> bool {
        self.lost && !self.retransmitted && !self.sacked
    }
}

/// Running sums over the scoreboard, kept as entries change so that the pipe and the
/// presence of losses cost O(1) per query instead of a walk over every segment in flight
/// (hundreds with a large window: the walk was 15 % of a bulk transfer's instructions).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Tally {
    /// Octets in the pipe.
    pipe: usize,
    /// Entries lost and not yet retransmitted.
    lost: usize,
    /// Entries SACKed.
    sacked: usize,
    /// Octets SACKed (PRR's RecoverFS, `enter_recovery`).
    sacked_octets: usize,
    /// Octets of retransmissions in the pipe (the least the pipe counts without SACK,
    /// whatever the duplicate ACKs: [`Recovery::in_flight`]).
    retx: usize,
}

impl Tally {
    fn add(&mut self, s: &Seg) {
        if s.in_pipe() {
            self.pipe += s.len();
            self.retx += if s.retransmitted { s.len() } else { 0 };
        }
        self.lost += usize::from(s.awaits_retransmit());
        self.sacked += usize::from(s.sacked);
        self.sacked_octets += if s.sacked { s.len() } else { 0 };
    }

    fn sub(&mut self, s: &Seg) {
        if s.in_pipe() {
            self.pipe -= s.len();
            self.retx -= if s.retransmitted { s.len() } else { 0 };
        }
        self.lost -= usize::from(s.awaits_retransmit());
        self.sacked -= usize::from(s.sacked);
        self.sacked_octets -= if s.sacked { s.len() } else { 0 };
    }

    /// An entry changed from `before` to `after`.
    fn change(&mut self, before: &Seg, after: &Seg) {
        self.sub(before);
        self.add(after);
    }
}

/// CUBIC's state (RFC 9438 4).
#[derive(Debug, Clone, Copy, Default)]
struct Cubic {
    /// W_max in segments (f64: the RFC's formulas are real-valued).
    w_max: f64,
    /// K in seconds.
    k: f64,
    /// Start of the current congestion avoidance epoch.
    epoch: Option<Instant>,
    /// W_est, the Reno-friendly estimate, in segments (4.3).
    w_est: f64,
    /// Since when, in the epoch, the window has not limited the sender: that time is not
    /// counted in the epoch's t (RFC 9438 5.8); the epoch moves on by it once the window
    /// limits the sender again.
    unlimited_since: Option<Instant>,
    /// cwnd_prior, in segments: the window before the last reduction (RFC 9438 4.3: once
    /// W_est reaches it, W_est grows by Reno's one segment a round trip).
    cwnd_prior: f64,
}

const CUBIC_C: f64 = 0.4;
const CUBIC_BETA: f64 = 0.7;
/// The RTO once a handshake whose SYN timed out gave no RTT sample (RFC 6298 5.7).
const RTO_FALLBACK: Duration = Duration::from_secs(3);
/// Consecutive RTOs after which the connection gives up (like Linux's tcp_retries2 = 15).
pub const MAX_RTO_BACKOFFS: u32 = 15;

/// RACK.min_RTT's window (RFC 8985 6.2 step 1): Linux's `tcp_min_rtt_wlen`, 300 s.
const MIN_RTT_WINDOW_US: i64 = 300_000_000;

/// RACK.min_RTT (RFC 8985 6.2 step 1): "a windowed min-filtered estimate of recent RTT
/// measurements that can adapt when migrating to significantly longer paths rather than
/// tracking a simple global minimum of all RTT measurements". A global minimum kept the
/// reordering window (min_RTT / 4, step 4) and the plausibility bound of step 2 at a
/// short path's values forever once the connection moved to a longer one. Kathleen
/// Nichols' filter as Linux's `minmax_running_min` (lib/win_minmax.c) over
/// [`MIN_RTT_WINDOW_US`]: the best, second and third choices, each no older than the one
/// before, so that when the best leaves the window a choice from its later part takes its
/// place. Test: `rack_min_rtt_is_a_windowed_minimum`.
///
/// The common sample (above the third choice, no sub-window step due) costs a compare and
/// a time check ([`MinRtt::update`]); `due` is the earliest time the sub-window steps of
/// `minmax_subwin_update` would change anything for such a sample. A sample equal to the
/// third choice takes that path too and does not refresh the choices' times as Linux's
/// `<=` would: the value stays, and the sub-window steps take fresh samples of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MinRtt {
    /// (time in microseconds, RTT) of the best, second and third choices: values and
    /// times non-decreasing; `Duration::MAX` before the first sample.
    s: [(i64, Duration); 3],
    /// In microseconds: a sample above `s[2]` after this runs the sub-window steps.
    due: i64,
}

impl MinRtt {
    const fn new() -> Self {
        MinRtt {
            s: [(0, Duration::MAX); 3],
            due: i64::MAX,
        }
    }

    /// The estimate (`None`: no sample yet).
    #[inline(always)]
    fn get(&self) -> Option<Duration> {
        let v = self.s[0].1;
        (v != Duration::MAX).then_some(v)
    }

    /// An RTT sample `rtt` taken at `now`.
    #[inline(always)]
    fn update(&mut self, now: Instant, rtt: Duration) {
        let t = now.total_micros();
        if rtt < self.s[2].1 || t > self.due {
            self.update_slow(t, rtt);
        }
    }

    /// Linux's `minmax_running_min` and `minmax_subwin_update`, then `due` again.
    #[cold]
    #[inline(never)]
    fn update_slow(&mut self, t: i64, v: Duration) {
        const WIN: i64 = MIN_RTT_WINDOW_US;
        let val = (t, v);
        let s = &mut self.s;
        // A new minimum, or nothing left in the window: forget the earlier samples.
        if v <= s[0].1 || t - s[2].0 > WIN {
            *s = [val; 3];
        } else {
            if v <= s[1].1 {
                s[1] = val;
                s[2] = val;
            } else if v <= s[2].1 {
                s[2] = val;
            }
            let dt = t - s[0].0;
            if dt > WIN {
                // The best choice left the window: the second and third move up (twice
                // if the second has left it too; the third has not, checked above).
                *s = [s[1], s[2], val];
                if t - s[0].0 > WIN {
                    *s = [s[1], s[2], val];
                }
            } else if s[1].0 == s[0].0 && dt > WIN / 4 {
                // A quarter of the window without a new second choice: take one from
                // the second quarter.
                s[1] = val;
                s[2] = val;
            } else if s[2].0 == s[1].0 && dt > WIN / 2 {
                // Half the window without a new third choice: take one from the later half.
                s[2] = val;
            }
        }
        let step = if s[1].0 == s[0].0 {
            WIN / 4
        } else if s[2].0 == s[1].0 {
            WIN / 2
        } else {
            WIN
        };
        self.due = s[0].0 + step;
    }
}

/// The recovery state of one connection.
#[derive(Debug, Clone)]
pub struct Recovery {
    cfg: RecoveryConfig,
    smss: usize,
    segs: VecDeque<Seg>,
    /// Sums over `segs`, kept in step with every change to it.
    tally: Tally,
    srtt: Option<Duration>,
    rttvar: Duration,
    rto: Duration,
    /// RACK.min_RTT (RFC 8985 6.2 step 1), windowed.
    min_rtt: MinRtt,
    /// Consecutive RTOs since the last progress (an ACK of new data) or undo: the first
    /// of them keeps the state to restore (`Undo`, RFC 4015 3.1) and CUBIC's cwnd_prior.
    backoffs: u32,
    /// RTOs since the peer last answered (progress, an undo, or an answer to a probe of
    /// its shut window, `peer_alive`): counted with `probe_backoffs` towards giving up
    /// (`Recovery::backoffs`). An answer that acknowledges nothing ends no run of RTOs
    /// (`backoffs`): it cleared that count too, and the next RTO, taken for a first one,
    /// replaced the state from before the run with the collapsed window. Test (scripted):
    /// `rfc4015_3_1_an_answered_probe_does_not_restart_the_rto_run`.
    unanswered_rtos: u32,
    cwnd: usize,
    ssthresh: usize,
    /// In a recovery episode until SND.UNA passes this.
    recover: Option<TcpSeqNumber>,
    /// The recovery episode is an RTO's (Linux's CA_Loss): the window slow-starts from one
    /// segment while it repairs, instead of staying where the reduction put it.
    rto_recovery: bool,
    /// Highest sequence number sent (end of the last segment).
    high: Option<TcpSeqNumber>,
    dupacks: u32,
    /// Without SACK, octets that duplicate ACKs say left the network (one SMSS per
    /// duplicate ACK, less what cumulative ACKs took since): they are not in the pipe
    /// (Linux's `tcp_add_reno_sack`; RFC 5681 3.2's cwnd inflation in other words).
    dup_sacked: usize,
    /// A recovery episode just started: its first retransmission goes out whatever the
    /// pipe (RFC 6675 5 (4.3), RFC 5681 3.2 step 2).
    retransmit_first: bool,
    /// Proportional Rate Reduction's state (RFC 9937 section 6) from the start of a fast recovery
    /// episode (`enter_recovery`) to its end; kept through an RTO in it until the first
    /// ACK after the RTO tells whether the RTO was spurious (`Undo`: its undo goes back
    /// to the episode, PRR's counts with it), but not used while the RTO's recovery runs
    /// (`rto_recovery`: slow start from one segment, RFC 5681 3.1).
    prr: Option<Prr>,
    sack_seen: bool,
    rack_xmit: Option<Instant>,
    rack_end: TcpSeqNumber,
    rack_rtt: Duration,
    /// RFC 8985's RACK.fack: the highest end of what an ACK or SACK delivered (kept up
    /// with SND.UNA, so that it never lies a sequence-space wrap behind).
    fack: Option<TcpSeqNumber>,
    /// RFC 8985's RACK.reordering_seen (6.2 step 3): a segment never retransmitted was
    /// delivered below `fack`, so the network reorders; the reordering window then stays
    /// open in recovery and with DupThresh segments SACKed (step 4).
    reordering_seen: bool,
    /// RFC 8985 6.2 step 4's RACK.reo_wnd_mult, RACK.reo_wnd_persist and RACK.dsack_round:
    /// D-SACKs (the peer got a segment twice: a retransmission was spurious) widen the
    /// reordering window by min_RTT / 4 once per round trip, for 16 recovery episodes.
    reo_wnd_mult: u32,
    reo_wnd_persist: u32,
    /// Set to SND.NXT by a D-SACK, cleared by the first ACK that reaches it
    /// ([`Recovery::end_dsack_round`]), so that it never lies more than a window from
    /// SND.UNA: kept until the next D-SACK instead, it went stale, and once SND.UNA ran
    /// 2^31 octets past it the modular `ack >= d` read "before" and that D-SACK (and every
    /// one for the next 2^31 octets) was taken as one of the same round trip.
    dsack_round: Option<TcpSeqNumber>,
    /// The congestion state before the last recovery episode's reduction, kept until
    /// D-SACKs have reported every retransmission of that episode unneeded (then it comes
    /// back), or another episode, an RTO or too many retransmissions end the wait.
    episode_undo: Option<EpisodeUndo>,
    /// The ranges the episode of `episode_undo` retransmitted and no D-SACK has covered
    /// yet (at most [`EPISODE_RESENT_MAX`]; kept across episodes to reuse its memory).
    episode_resent: Vec<(TcpSeqNumber, TcpSeqNumber)>,
    /// The SACK blocks of the last ACK within what was outstanding (RFC 2018 4; Linux's
    /// `recv_sack_cache`): every entry wholly within one is SACKed (but the front one, which
    /// a cumulative ACK may cut), so the next ACK's blocks, mostly the same ones grown by a
    /// segment, pass over those entries with a binary search instead of visiting each.
    /// Replaced at every ACK (it never lies more than a window from SND.UNA, where sequence
    /// comparisons hold), emptied when an RTO forgets the SACKs (RFC 2018 8) or an entry
    /// is split (`mark_retransmitted`: a piece may lie within a block that covered the
    /// entry in part).
    sack_cache: [(TcpSeqNumber, TcpSeqNumber); SACK_CACHE],
    sack_cached: usize,
    /// Where the per-ACK and per-poll walks of the scoreboard start (see [`Marks`]).
    marks: Marks,
    /// RFC 8985 6.2 step 5 orders segments by their last transmission, and a
    /// retransmission's is its own (Linux moves it to the tail of `tsorted_sent_queue`):
    /// the ranges retransmitted, `(start, end, when)`, in the order they went out, so in
    /// time order, kept while RACK runs with SACK (`tracks_retx_order`). Every entry ever
    /// resent that RACK may judge (not SACKed, not awaiting its retransmission) lies within
    /// a range here sent at its `xmit`; a range may outlive its entries (acknowledged,
    /// SACKed, resent again): `detect_loss` drops it when it reaches it. Entries never
    /// resent need no list: they are in sequence order, which is their sending order.
    retx_order: VecDeque<(TcpSeqNumber, TcpSeqNumber, Instant)>,
    reorder_at: Option<Instant>,
    pto_at: Option<Instant>,
    /// RFC 8985's TLP.end_seq: the end of what was sent when the last loss probe went
    /// out, until an ACK covers it or an RTO fires. While set no other probe is armed (at
    /// most one probe per flight, RFC 8985 7.3; Linux's `tlp_high_seq`): the RTO answers
    /// if the probe brings nothing back.
    tlp_end: Option<TcpSeqNumber>,
    /// RFC 8985's TLP.is_retrans, as the time the probe went out: set while `tlp_end` is
    /// when the probe resent the last segment (not new data).
    tlp_retrans_at: Option<Instant>,
    rto_at: Option<Instant>,
    cubic: Cubic,
    /// What an RTO changed, kept until the first ACK after it says whether it was spurious.
    undo: Option<Undo>,
    /// Congestion window validation ([`Recovery::is_cwnd_limited`]), as Linux's
    /// `tcp_cwnd_validate`: whether the window was full at a transmission since
    /// `usage_end` was set, and the most octets in flight at one.
    cwnd_limited: bool,
    max_flight: usize,
    /// The end of what was sent when `cwnd_limited` and `max_flight` were last reset:
    /// once it is acknowledged, the next transmission starts their measurement again.
    usage_end: Option<TcpSeqNumber>,
    /// When a segment was last sent (new or again): a transmission that finds nothing in
    /// flight moves CUBIC's epoch on by the idle time since then (RFC 9438 5.8).
    last_sent: Option<Instant>,
    stats: RecoveryStats,
    /// The peer's window is shut (see [`Recovery::set_window_shut`]).
    window_shut: bool,
    /// Expiries of the retransmission timer probing the shut window since the peer last
    /// answered: counted with `backoffs` towards giving up (`Recovery::backoffs`), but no
    /// retransmission timeouts (RFC 9293 3.8.6.1), so not in the consecutive-RTO count
    /// that tells a first RTO from a repeated one.
    probe_backoffs: u32,
    /// The RTO before the first probing expiry of this shut window: the probes' backoff
    /// ends with the shut window (`set_window_shut`) or an ACK of new data.
    probe_rto: Option<Duration>,
}

/// The state an RTO replaced (RFC 4015 3.1: the sender's state before the timeout).
#[derive(Debug, Clone, Copy)]
struct Undo {
    /// When the RTO fired: an ACK echoing an earlier transmission answers the original.
    at: Instant,
    cwnd: usize,
    ssthresh: usize,
    cubic: Cubic,
    rto: Duration,
    recover: Option<TcpSeqNumber>,
    rto_recovery: bool,
}

/// What a recovery episode's reduction changed (see `Recovery::episode_undo`).
#[derive(Debug, Clone, Copy)]
struct EpisodeUndo {
    cwnd: usize,
    ssthresh: usize,
    cubic: Cubic,
    /// Every retransmission so far was D-SACKed while the episode went on: the undo waits
    /// for its end (as Linux undoes by D-SACK only out of recovery).
    all_dsacked: bool,
    /// [`EPISODE_HORIZON`] past the highest sequence sent when the episode began or last
    /// retransmitted: the first ACK that reaches it ends the wait
    /// ([`Recovery::end_stale_episode`]). Kept until the next episode instead, the
    /// retransmitted ranges outlived a wrap of the sequence space, and a D-SACK 2^32
    /// octets later with the same numbers (a segment the network duplicated) restored the
    /// window from before a long-past reduction.
    horizon: TcpSeqNumber,
}

/// Proportional Rate Reduction (RFC 9937 section 6) of one fast recovery episode, in octets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Prr {
    /// prr_delivered: octets the peer got since the episode began (cumulatively
    /// acknowledged, newly SACKed, or a duplicate ACK's segment without SACK).
    delivered: usize,
    /// prr_out: octets sent (new or again) since the episode began.
    out: usize,
    /// RecoverFS: FlightSize (SND.NXT - SND.UNA) when the episode began.
    recover_fs: usize,
}

/// The segments an ACK newly delivered that RACK's update may take (RFC 8985 6.2 step 2,
/// [`Recovery::rack_delivered`]), in RACK_sent_after's order (time, then sequence): the most
/// recently sent one, and the most recently sent one whose RTT sample is plausible by
/// RACK.min_RTT before the ACK (never resent, or resent no later than `plausible_until`).
#[derive(Debug, Clone, Copy)]
struct RackPick {
    /// A segment resent (last) after this gives an implausible sample (`None`: none does).
    plausible_until: Option<Instant>,
    /// The most recently sent: (time, end, ever resent).
    latest: Option<(Instant, TcpSeqNumber, bool)>,
    /// The most recently sent with a plausible sample: (time, end).
    plausible: Option<(Instant, TcpSeqNumber)>,
}

impl RackPick {
    /// RFC 8985 6.2 step 2: a resent segment's sample is implausible when it is shorter
    /// than RACK.min_RTT or the ACK's timestamp echo (`ts_rtt` ago) precedes its last
    /// transmission: it is plausible if sent no later than now - max(min_RTT, ts_rtt).
    /// `min_rtt` is RACK.min_RTT before the ACK; its own sample (step 1, taken after the
    /// walks) may only lower it (but when the windowed minimum's best choice leaves its
    /// window at this ACK, `MinRtt`: then an earlier segment is judged by the estimate
    /// of a moment before), so this bound takes no implausible segment. The
    /// most recently sent segment is judged again by the lowered one
    /// (`Recovery::rack_delivered`); an earlier resent one that only the lowered bound
    /// admits is passed over (a sample that is the ACK's new minimum, rare).
    fn new(now: Instant, min_rtt: Option<Duration>, ts_rtt: Option<Duration>) -> Self {
        let bound = match (min_rtt, ts_rtt) {
            (Some(m), Some(t)) => Some(m.max(t)),
            (m, t) => m.or(t),
        };
        RackPick {
            plausible_until: bound.map(|b| now - b),
            latest: None,
            plausible: None,
        }
    }

    /// `s` was newly delivered (cumulatively or by SACK).
    fn note(&mut self, s: &Seg) {
        let after = |p: Option<(Instant, TcpSeqNumber)>| {
            p.is_none_or(|(x, e)| s.xmit > x || (s.xmit == x && s.end > e))
        };
        if after(self.latest.map(|(x, e, _)| (x, e))) {
            self.latest = Some((s.xmit, s.end, s.resent));
        }
        if (!s.resent || self.plausible_until.is_none_or(|u| s.xmit <= u)) && after(self.plausible)
        {
            self.plausible = Some((s.xmit, s.end));
        }
    }
}

/// How far past the last retransmission's SND.NXT an episode's undo waits for D-SACKs:
/// a window at most (2^30, RFC 7323 2.3; [`crate::BUFFER_MAX`]), so that the highest
/// sequence sent lies within 2^31 of the horizon and modular comparisons with it hold.
/// Linux likewise takes a D-SACK block more than the largest window below SND.UNA for
/// stale (`tcp_is_sackblock_valid`).
const EPISODE_HORIZON: usize = 1 << 30;

/// Lower bounds where the walks of the scoreboard start (`None`: at the front), each a
/// sequence number at an entry's boundary promising something of every entry that ends at
/// or before it. They make a walk cost what it judges, not the segments below: with
/// thousands of segments in flight each walk from the front, per ACK or per poll, made a
/// recovery episode quadratic. What could break a promise resets it (an RTO, its undo);
/// all are forgotten when the scoreboard empties and a bound below SND.UNA counts as none,
/// so that none lies more than a window from SND.UNA, where sequence comparisons hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Marks {
    /// RFC 8985 6.2 step 5: every entry below never resent is SACKed or lost, so not one
    /// RACK judges (`detect_loss`'s walk of the entries never resent starts here). Entries
    /// never resent leave that state only by an RTO's undo (`undo_rto`, which resets it).
    rack_floor: Option<TcpSeqNumber>,
    /// No entry below awaits its retransmission (`next_retransmit` starts here): set to the
    /// one it finds, lowered to every entry marked lost (`lower_lost_hint`).
    lost_hint: Option<TcpSeqNumber>,
    /// RFC 6675 4's IsLost (`sack_mark_lost`): every entry below is SACKed, lost or
    /// retransmitted, so not one IsLost may mark. Kept only while something is SACKed.
    islost_floor: Option<TcpSeqNumber>,
}

/// SACK blocks remembered from one ACK to the next (`Recovery::sack_cache`): RFC 2018 3's
/// most, four (three with timestamps).
const SACK_CACHE: usize = 4;

/// Retransmissions an episode may have for its reduction to be undone by D-SACKs: past
/// that it was no reordering (and the list stays small whatever the peer does).
const EPISODE_RESENT_MAX: usize = 64;

#[cfg(test)]
thread_local! {
    /// Tests only: scoreboard entries the SACK and retransmission walks looked at on this
    /// thread, the probes of `walk_start`'s search included (a counter in `Recovery` would
    /// make the fast and general ACK paths' states, which a test compares, differ).
    static VISITS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

#[cfg(test)]
thread_local! {
    /// Tests only: `detect_loss`, `sack_mark_lost` and `next_retransmit` walk every entry
    /// from the front as they did before `Marks` and `retx_order`, the reference that
    /// `tests::loss_marks_agree_with_the_walks_over_every_entry` holds them to.
    static REFERENCE_WALKS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Counts one scoreboard entry looked at (tests only: `VISITS`).
#[inline(always)]
fn visited() {
    #[cfg(test)]
    VISITS.with(|v| v.set(v.get() + 1));
}

fn dur_us(d: Duration) -> u64 {
    d.total_micros()
}

impl Recovery {
    /// Recovery for a connection with sender MSS `smss`.
    pub fn new(cfg: &RecoveryConfig, smss: usize, _now: Instant) -> Self {
        let smss = smss.max(1);
        Recovery {
            // The RTO's floor is its least margin above SRTT (`sample_rtt`), never below
            // RFC 6298 2.3's clock granularity G, 1 us.
            cfg: RecoveryConfig {
                rto_min: cfg.rto_min.max(Duration::from_micros(1)),
                ..*cfg
            },
            smss,
            segs: VecDeque::new(),
            tally: Tally::default(),
            srtt: None,
            rttvar: Duration::ZERO,
            rto: cfg.rto_initial,
            min_rtt: MinRtt::new(),
            backoffs: 0,
            unanswered_rtos: 0,
            cwnd: cfg.initial_window_segments.max(1) as usize * smss,
            ssthresh: usize::MAX,
            recover: None,
            rto_recovery: false,
            high: None,
            dupacks: 0,
            dup_sacked: 0,
            retransmit_first: false,
            prr: None,
            sack_seen: false,
            rack_xmit: None,
            rack_end: TcpSeqNumber(0),
            rack_rtt: Duration::ZERO,
            fack: None,
            reordering_seen: false,
            reo_wnd_mult: 1,
            reo_wnd_persist: 0,
            dsack_round: None,
            episode_undo: None,
            episode_resent: Vec::new(),
            sack_cache: [(TcpSeqNumber(0), TcpSeqNumber(0)); SACK_CACHE],
            sack_cached: 0,
            marks: Marks::default(),
            retx_order: VecDeque::new(),
            reorder_at: None,
            pto_at: None,
            tlp_end: None,
            tlp_retrans_at: None,
            rto_at: None,
            cubic: Cubic::default(),
            undo: None,
            cwnd_limited: false,
            max_flight: 0,
            usage_end: None,
            last_sent: None,
            stats: RecoveryStats::default(),
            window_shut: false,
            probe_backoffs: 0,
            probe_rto: None,
        }
    }

    /// The peer's window is shut (zero) or open again. While it is shut, what is
    /// outstanding is a zero-window probe's octet (or octets the peer's shrunken window
    /// left outside): the retransmission timer probes the window with the head segment
    /// alone (`next_retransmit` holds back the rest until the window opens), backing off,
    /// and its expiry is no sign of congestion, since the peer could not have taken the
    /// octets (RFC 9293 3.8.6.1, RFC 1122 4.2.2.17: probing goes on however long the
    /// window is shut; Linux's persist timer leaves cwnd alone too). Without this every
    /// probe's timeout collapsed cwnd to one segment and ssthresh to two, and the
    /// connection crawled back from there once the window opened. No loss probe runs
    /// meanwhile either: it could only resend the probe.
    ///
    /// When the window opens the probing is over, and its backoff with it (as Linux's
    /// `tcp_ack_probe` clears `icsk_backoff`): the RTO of before the first probe returns,
    /// timing what is outstanding from `now`, and the probes no longer count as
    /// consecutive timeouts. Kept, the flight resent as the window opened waited out the
    /// probes' backed-off RTO, and the first real RTO after it was taken for a repeated
    /// one (no state kept to undo it, RFC 4015 3.1). Test (scripted):
    /// `rfc6298_5_5_the_probes_backoff_ends_when_the_window_opens`.
    pub fn set_window_shut(&mut self, now: Instant, shut: bool) {
        if self.window_shut && !shut {
            self.probe_backoffs = 0;
            if let Some(rto) = self.probe_rto.take() {
                self.rto = rto;
                if self.rto_at.is_some() {
                    self.rto_at = Some(now + self.rto);
                }
            }
        }
        self.window_shut = shut;
        if shut {
            self.pto_at = None;
        }
    }

    /// Sets the sender MSS after the option exchange (the initial window follows it, RFC
    /// 6928 2, while nothing has been acknowledged yet).
    pub fn set_smss(&mut self, smss: usize) {
        let smss = smss.max(1);
        if self.srtt.is_none() && self.recover.is_none() {
            self.cwnd = self.cfg.initial_window_segments.max(1) as usize * smss;
        }
        self.smss = smss;
    }

    /// The current RTO (backed off).
    pub fn rto(&self) -> Duration {
        self.rto
    }

    /// Smoothed RTT, once sampled.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt
    }

    /// Congestion window in octets (`usize::MAX` without congestion control).
    pub fn cwnd(&self) -> usize {
        match self.cfg.congestion {
            Congestion::None => usize::MAX,
            _ => self.cwnd,
        }
    }

    /// The peer answered without acknowledging anything new (a zero-window probe's ACK):
    /// the count of expiries that ends a connection starts over. The run of consecutive
    /// RTOs goes on (nothing was acknowledged): a later RTO is a repeated one, whose
    /// state to restore stays the one from before the first (RFC 4015 3.1, RFC 5681 3.1).
    pub fn peer_alive(&mut self) {
        self.unanswered_rtos = 0;
        self.probe_backoffs = 0;
    }

    /// Consecutive expiries of the retransmission timer without progress or an answer:
    /// RTOs and probes of a shut window.
    pub fn backoffs(&self) -> u32 {
        self.unanswered_rtos + self.probe_backoffs
    }

    /// Octets in flight (RFC 6675 pipe): sent, not SACKed, not lost-and-unsent, and
    /// without SACK not taken out by duplicate ACKs.
    pub fn in_flight(&self) -> usize {
        self.debug_check_tally();
        let pipe = self.tally.pipe;
        if self.dup_sacked == 0 {
            return pipe;
        }
        // RFC 5681 3.2 steps 3-4 (each duplicate ACK a segment that left the network), as
        // Linux's tcp_add_reno_sack and tcp_limit_reno_sacked: however many duplicates
        // arrive, the pipe counts the retransmissions in flight, and at least one segment
        // (the hole the duplicate ACKs point at) unless one awaits its retransmission.
        pipe.saturating_sub(self.dup_sacked)
            .max(self.in_flight_floor().min(pipe))
    }

    /// Linux's `tcp_limit_reno_sacked`: the duplicate ACKs' estimate (`dup_sacked`) counts
    /// no more segments gone than are outstanding and not lost, less the least
    /// [`Self::in_flight`] counts (`in_flight_floor`). A duplicate ACK raises it no further
    /// (`on_ack_general`); what takes octets off the scoreboard or marks them lost lowers
    /// the bound, and the estimate with it (Linux runs the limit at every cumulative ACK,
    /// `tcp_check_reno_reordering`): a partial ACK takes one segment less off the estimate
    /// than it covers (the hole, `tcp_remove_reno_sacks`) and then marks the next hole
    /// lost (RFC 6582 3.2 step 3), so an estimate at its bound (duplicated ACKs, ACK
    /// division) came out above what was left, and the excess hid the segments sent after
    /// it from the pipe (RFC 9937 section 6, RFC 6675 pipe): a segment past cwnd for each.
    /// Test: `a_partial_ack_leaves_no_duplicate_ack_credit_beyond_what_is_outstanding`.
    #[cold]
    fn limit_dup_sacked(&mut self) {
        self.dup_sacked = self.dup_sacked.min(self.dup_sacked_most());
    }

    /// The most the duplicate ACKs' estimate (`dup_sacked`) may count: what is outstanding
    /// and not lost, less the least [`Self::in_flight`] counts (`in_flight_floor`).
    fn dup_sacked_most(&self) -> usize {
        self.tally.pipe - self.in_flight_floor().min(self.tally.pipe)
    }

    /// The least [`Self::in_flight`] counts, whatever the duplicate ACKs (without SACK):
    /// the retransmissions in flight, and at least one segment (the hole the duplicate
    /// ACKs point at) unless one awaits its retransmission.
    fn in_flight_floor(&self) -> usize {
        if self.tally.lost > 0 {
            self.tally.retx
        } else {
            self.tally.retx.max(self.smss)
        }
    }

    /// Debug builds (the tests, the fuzz targets): the running sums match a recount.
    fn debug_check_tally(&self) {
        if cfg!(debug_assertions) {
            let mut t = Tally::default();
            for s in &self.segs {
                t.add(s);
            }
            debug_assert_eq!(t, self.tally, "scoreboard sums out of step");
            // The order `walk_start`'s binary search relies on, and what `sack_cache`
            // promises (but for the front entry, which a cumulative ACK may have cut to
            // within a block: no skip passes over it, the skips go forward from a SACKed
            // entry).
            debug_assert!(
                self.segs
                    .iter()
                    .zip(self.segs.iter().skip(1))
                    .all(|(a, b)| a.end <= b.start),
                "scoreboard out of sequence order"
            );
            debug_assert!(
                self.sack_cache[..self.sack_cached]
                    .iter()
                    .all(|&(l, r)| self
                        .segs
                        .iter()
                        .skip(1)
                        .all(|s| s.sacked || !(l <= s.start && s.end <= r))),
                "an entry within a cached SACK block is not SACKed"
            );
        }
    }

    /// RFC 5681's FlightSize: octets sent and not yet cumulatively acknowledged (SACKed and
    /// lost ones too, unlike the pipe).
    fn flight_size(&self) -> usize {
        match (self.segs.front(), self.segs.back()) {
            (Some(f), Some(b)) => b.end - f.start,
            _ => 0,
        }
    }

    /// Whether anything is outstanding.
    pub fn is_empty(&self) -> bool {
        self.segs.is_empty()
    }

    /// Counters.
    pub fn stats(&self) -> RecoveryStats {
        RecoveryStats {
            srtt_us: self.srtt.map_or(0, dur_us),
            rttvar_us: dur_us(self.rttvar),
            min_rtt_us: self.min_rtt.get().map_or(0, dur_us),
            rto_us: dur_us(self.rto),
            cwnd: self.cwnd as u64,
            ssthresh: self.ssthresh.min(u64::MAX as usize) as u64,
            in_flight: self.in_flight() as u64,
            reo_wnd_mult: u64::from(self.reo_wnd_mult),
            ..self.stats
        }
    }

    /// The ACK about to be given to [`Recovery::on_ack`] (acknowledging up to `ack`, while
    /// `snd_nxt` is the next sequence number to send) opens with the D-SACK block `[l, r)`
    /// (RFC 2883 4: the peer received those octets twice).
    ///
    /// * RFC 8985 6.2 step 4: the first D-SACK of a round trip widens the reordering window
    ///   by one step of min_RTT / 4 (bounded by SRTT when applied) for 16 recovery
    ///   episodes; more in the same round trip change nothing, so a peer cannot grow it
    ///   faster than once per round trip.
    /// * RFC 3708: a D-SACK covering a retransmission of the last recovery episode says the
    ///   original arrived after all, after segments sent later: reordering (RFC 8985 6.2
    ///   step 3's RACK.reordering_seen, learnt late). Once every retransmission of the
    ///   episode is so covered, the episode was spurious and its window reduction is undone
    ///   at its end (Linux's `tcp_try_undo_dsack`).
    pub fn on_dsack(
        &mut self,
        ack: TcpSeqNumber,
        snd_nxt: TcpSeqNumber,
        l: TcpSeqNumber,
        r: TcpSeqNumber,
    ) {
        self.stats.dsacks_received += 1;
        // RFC 8985 7.4.2: a D-SACK for the segment a loss probe resent says both copies
        // arrived: the probe repaired no loss (Linux's FLAG_DSACK_TLP). The probe resent
        // the last segment, which ends at TLP.end_seq.
        if self.tlp_retrans_at.is_some() && self.tlp_end == Some(r) {
            self.tlp_retrans_at = None;
        }
        // The ACK carrying the D-SACK comes to `on_ack` after this: it may end the round.
        self.end_dsack_round(ack);
        if self.dsack_round.is_none() {
            self.dsack_round = Some(snd_nxt);
            // The window is at most SRTT whatever the multiplier: 255 steps of min_RTT / 4
            // are far beyond it (Linux's `reo_wnd_steps` is a u8 as well).
            self.reo_wnd_mult = (self.reo_wnd_mult + 1).min(255);
            self.reo_wnd_persist = 16;
        }
        let Some(u) = self.episode_undo.as_mut() else {
            return;
        };
        // Trim the block from the retransmitted ranges it covers, whole or at either end.
        let mut matched = false;
        self.episode_resent.retain_mut(|(a, b)| {
            if l <= *a && *b <= r {
                matched = true;
                return false;
            }
            if l <= *a && r > *a {
                *a = r;
                matched = true;
            } else if r >= *b && l < *b {
                *b = l;
                matched = true;
            }
            true
        });
        if !matched {
            return;
        }
        self.reordering_seen = true;
        if self.episode_resent.is_empty() {
            if self.recover.is_some() {
                u.all_dsacked = true;
            } else {
                self.undo_episode();
            }
        }
    }

    /// Undoes the last recovery episode's window reduction: D-SACKs reported every one of
    /// its retransmissions unneeded (RFC 3708 2; the response as RFC 4015's and Linux's
    /// `tcp_undo_cwnd_reduction`: the larger of the windows, CUBIC's state before).
    /// `undone_recoveries` counts the undos that gave something back: not one whose
    /// window had grown past the old one meanwhile, nor one without congestion control.
    fn undo_episode(&mut self) {
        let Some(u) = self.episode_undo.take() else {
            return;
        };
        if self.cfg.congestion == Congestion::None
            || (self.cwnd >= u.cwnd && self.ssthresh >= u.ssthresh)
        {
            return;
        }
        self.stats.undone_recoveries += 1;
        self.cwnd = self.cwnd.max(u.cwnd);
        self.ssthresh = self.ssthresh.max(u.ssthresh);
        self.cubic = u.cubic;
    }

    /// A segment covering `[seq, seq + len)` left at `now` (SYN and FIN count one each).
    pub fn on_sent(&mut self, now: Instant, seq: TcpSeqNumber, len: usize, retransmit: bool) {
        if len == 0 {
            return;
        }
        // RFC 9937 section 6: on any data transmission or retransmission, prr_out += (data
        // sent) (in a fast recovery episode only: no cost beyond this test elsewhere).
        if let Some(p) = self.prr.as_mut() {
            p.out += len;
        }
        let end = seq + len;
        if retransmit {
            self.stats.retransmitted_segments += 1;
            self.stats.retransmitted_octets += len as u64;
            if let Some(u) = self.episode_undo.as_mut() {
                if self.episode_resent.len() < EPISODE_RESENT_MAX {
                    self.episode_resent.push((seq, end));
                    // A retransmission after the D-SACKs covered the earlier ones: it
                    // needs one of its own before the episode counts as spurious.
                    u.all_dsacked = false;
                    u.horizon = self.high.map_or(end, |h| h.max(end)) + EPISODE_HORIZON;
                } else {
                    self.episode_undo = None;
                }
            }
            self.retransmit_first = false;
            self.mark_retransmitted(now, seq, end);
        } else {
            // New data continues the last segment (or starts the scoreboard).
            if let Some(h) = self.high {
                if end <= h {
                    // Already tracked (a zero-window probe's octet sent again, say).
                    self.mark_retransmitted(now, seq, end);
                    return;
                }
            }
            // The first transmission after the flight emptied: the idle time since the last
            // one is not the epoch's (RFC 9438 5.8, "a period of idle time"; Linux's
            // CA_EVENT_TX_START), or W_cubic(t) would have run ahead meanwhile and the
            // window would jump towards it at the 1.5x cap once the sender is limited
            // again. Time already counted as not limited (`unlimited_since`) is left to
            // `grow`, which moves the epoch on by all of it.
            if self.segs.is_empty() && self.cubic.unlimited_since.is_none() {
                if let (Some(e), Some(last)) = (&mut self.cubic.epoch, self.last_sent) {
                    *e = (*e + (now - last)).min(now);
                }
            }
            let seg = Seg {
                start: seq,
                end,
                xmit: now,
                retransmitted: false,
                resent: false,
                sacked: false,
                lost: false,
            };
            self.tally.add(&seg);
            self.segs.push_back(seg);
            self.high = Some(end);
            self.validate_cwnd();
        }
        self.last_sent = Some(now);
        if self.rto_at.is_none() {
            self.rto_at = Some(now + self.rto);
        }
        self.arm_pto(now);
    }

    /// The loss probe a [`TimeoutAction::Probe`] asked for went out (its segment already
    /// through [`Recovery::on_sent`]): no other probe until an ACK covers everything sent up
    /// to it, or an RTO (RFC 8985 7.3, TLP.end_seq; Linux's `tlp_high_seq`). `resent`: the
    /// probe resent the last segment rather than new data (TLP.is_retrans).
    pub fn probe_sent(&mut self, resent: bool) {
        self.tlp_end = self.high;
        self.tlp_retrans_at = self.last_sent.filter(|_| resent);
        self.pto_at = None;
    }

    /// Where a walk of the scoreboard over `[l, r)` (a SACK block's, RFC 2018 4; a
    /// retransmission's) may start: the count of leading entries that end at or before
    /// `l`, which such a walk passes over unchanged. A binary search, O(log n): the walk
    /// from the front it replaces cost every segment below the range, per SACK block of
    /// every ACK in recovery (RFC 6675 5) and per retransmission, so with thousands of
    /// segments in flight (a window of megabytes) a recovery episode was quadratic.
    ///
    /// The entries lie in ascending, non-overlapping sequence order within less than 2^31
    /// octets (`debug_check_tally` checks the order; `flight_size` the span), so where `l`
    /// and `r` lie at or above the front's start every comparison with them is the linear
    /// one and the search finds exactly what the walk skipped. The connection passes only
    /// blocks within [SND.UNA, SND.NXT] and its own retransmissions; any other range starts
    /// at the front, as before (`None`).
    fn walk_start(&self, l: TcpSeqNumber, r: TcpSeqNumber) -> Option<usize> {
        let f = self.segs.front()?;
        (f.start <= l && f.start <= r).then(|| self.first_ending_after(l))
    }

    /// The index of the first entry that ends after `seq` (`seq` at or above the front's
    /// start, see `walk_start`), by binary search.
    fn first_ending_after(&self, seq: TcpSeqNumber) -> usize {
        self.segs.partition_point(|s| {
            visited();
            s.end <= seq
        })
    }

    /// Marks `[seq, end)` retransmitted at `now`, splitting entries it covers in part.
    fn mark_retransmitted(&mut self, now: Instant, seq: TcpSeqNumber, end: TcpSeqNumber) {
        // From the first entry the range covers (a binary search): a retransmission in the
        // middle of a large window costs the entries it covers, not the walk up to them.
        let mut i = self.walk_start(seq, end).unwrap_or(0);
        while i < self.segs.len() {
            visited();
            let s = self.segs[i];
            if s.end <= seq {
                i += 1;
                continue;
            }
            if s.start >= end {
                break;
            }
            if s.start < seq {
                // Split off the part before the retransmitted range.
                let mut head = s;
                head.end = seq;
                self.segs[i].start = seq;
                // A piece of an entry a SACK block covered in part may lie wholly within
                // it, not SACKed: the cache promises no more (rare, a partial resend).
                self.sack_cached = 0;
                self.tally.change(&s, &self.segs[i]);
                self.tally.add(&head);
                self.segs.insert(i, head);
                i += 1;
                continue;
            }
            if s.end > end {
                let mut tail = s;
                tail.start = end;
                self.segs[i].end = end;
                self.sack_cached = 0;
                self.tally.change(&s, &self.segs[i]);
                self.tally.add(&tail);
                self.segs.insert(i + 1, tail);
            }
            let e = &mut self.segs[i];
            let before = *e;
            e.retransmitted = true;
            e.resent = true;
            e.lost = false;
            e.xmit = now;
            self.tally.change(&before, e);
            i += 1;
        }
        if self.tracks_retx_order() {
            // RACK's time order (RFC 8985 6.2 step 5): this range, last sent now.
            self.retx_order.push_back((seq, end, now));
            // Ranges outlive their entries until `detect_loss` reaches them: past twice the
            // scoreboard (and some), the list is built again from it, O(n log n) once per
            // n retransmissions, so that it stays bounded whatever the peer acknowledges.
            if self.retx_order.len() > 2 * self.segs.len() + 64 {
                self.rebuild_retx_order();
            }
        }
        if self.tally.lost == 0 {
            // Nothing awaits its retransmission: the hint bounds nothing (and would go
            // stale while nothing is lost).
            self.marks.lost_hint = None;
        }
    }

    /// RFC 8985 6.2 step 4: "If RACK.dsack_round is not None and SND.UNA >=
    /// RACK.dsack_round", the D-SACK's round trip is over, tested at every ACK (`ack`, the
    /// new SND.UNA) rather than only at the next D-SACK: sequence numbers compare modulo
    /// 2^32 (a difference below 2^31 reads "after"), which holds for a round ending within
    /// a window of SND.UNA, not for one left standing while gigabytes go by.
    #[inline(always)]
    fn end_dsack_round(&mut self, ack: TcpSeqNumber) {
        if self.dsack_round.is_some_and(|d| ack >= d) {
            self.dsack_round = None;
        }
    }

    /// Ends the wait for D-SACKs of the last episode's retransmissions once SND.UNA
    /// reaches its horizon ([`EpisodeUndo::horizon`]): a D-SACK for them can no longer be
    /// told from one for octets with the same numbers a wrap of the sequence space later.
    fn end_stale_episode(&mut self, ack: TcpSeqNumber) {
        if self.episode_undo.as_ref().is_some_and(|u| ack >= u.horizon) {
            self.episode_undo = None;
            self.episode_resent.clear();
        }
    }

    /// An ACK up to `ack` (timestamp echo `ts_rtt`): if it covers the last loss probe's
    /// flight, the next flight may have a probe of its own (RFC 8985 7.4). Returns whether
    /// the episode ends with a loss the probe repaired, which calls for a congestion
    /// response (RFC 8985 7.4.2; Linux's `tcp_process_tlp_ack`).
    #[inline(always)]
    fn tlp_answered(&mut self, now: Instant, ack: TcpSeqNumber, ts_rtt: Option<Duration>) -> bool {
        if !self.tlp_end.is_some_and(|e| ack >= e) {
            return false;
        }
        self.tlp_end = None;
        // RFC 8985 7.4.2: a probe of new data detects losses by the usual means (no
        // response here). A probe that resent the last segment and is answered by an ACK
        // covering it repaired a loss unless both copies arrived: a D-SACK for it in this
        // ACK says they did (`on_dsack`, which cleared `tlp_retrans_at`), and so does a
        // timestamp echo older than the probe (it answers the original, as RFC 3522's test
        // of an RTO). A D-SACK in a later ACK comes too late (Linux waits for it; here the
        // episode ends at the first ACK covering TLP.end_seq).
        self.tlp_retrans_at
            .take()
            .is_some_and(|at| ts_rtt.is_none_or(|r| now - r >= at))
    }

    /// Whether a loss probe may be pending now (RFC 8985 7.2's conditions, see `arm_pto`).
    #[inline(always)]
    fn pto_allowed(&self) -> bool {
        self.cfg.rack_tlp
            && !self.window_shut
            && !self.segs.is_empty()
            && self.tlp_end.is_none()
            && self.recover.is_none()
            && self.tally.sacked == 0
    }

    fn arm_pto(&mut self, now: Instant) {
        // RFC 8985 7.2: the PTO is started or restarted after new data is sent or an ACK
        // acknowledges new data, except in fast recovery, in RTO recovery (both: `recover`
        // set, `enter_recovery` and the RTO) and while segments are SACKed
        // (RACK.segs_sacked != 0): RACK and the recovery's retransmissions handle those
        // (Linux: only in CA_Open or CWR). Test:
        // `rfc8985_7_2_no_loss_probe_in_recovery_or_with_sacked_segments`.
        // Connections without SACK keep their probe outside recovery, unlike Linux's (which
        // ties TLP to SACK through RACK): 7.2's conditions hold without SACK (nothing is
        // ever SACKed), our RACK needs no SACK to run on the cumulative ACK a probe draws,
        // and the probe's ACK, or the three duplicate ACKs it and the tail complete, repair
        // a tail loss in about two round trips instead of an RTO; 7.4.2's response to the
        // loss it repaired needs only that ACK.
        if !self.pto_allowed() {
            self.pto_at = None;
            return;
        }
        // RFC 8985 7.2: PTO = 2 SRTT, plus the peer's ACK delay with one segment in flight,
        // never beyond the RTO.
        let base = match self.srtt {
            Some(s) => {
                let mut p = s * 2;
                if self.segs.len() == 1 {
                    p += self.cfg.max_ack_delay;
                }
                p.max(self.cfg.pto_min)
            }
            None => self.rto,
        };
        let at = now + base;
        let rto_at = self.rto_at.unwrap_or(at);
        self.pto_at = Some(at.min(rto_at));
    }

    fn sample_rtt(&mut self, now: Instant, r: Duration) {
        // RFC 6298 2.2 and 2.3, in microseconds; G (clock granularity) is 1 us.
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(srtt) => {
                let diff = if srtt > r { srtt - r } else { r - srtt };
                self.rttvar = (self.rttvar * 3 + diff) / 4;
                self.srtt = Some((srtt * 7 + r) / 8);
            }
        }
        self.min_rtt.update(now, r);
        let srtt = self.srtt.unwrap_or(r);
        // RFC 6298 2.3's max(G, K * RTTVAR), with the floor (2.4; `Recovery::new` keeps it
        // at least G) as the least margin above SRTT, as Linux keeps `rttvar_us` at least
        // `tcp_rto_min_us` (`tcp_rtt_estimator`, the first sample too), not as the least RTO:
        // on a steady path RTTVAR decays towards nothing, and a floor below SRTT left the RTO
        // at about SRTT, so a late ACK (a kernel peer's delayed ACK, a descheduled peer, a
        // loaded host) drew a spurious RTO. Test:
        // `rfc6298_2_3_the_rto_floor_is_a_margin_above_srtt_on_a_steady_path`.
        let var = (self.rttvar * 4).max(self.cfg.rto_min);
        self.rto = (srtt + var).min(self.cfg.rto_max);
    }

    /// An ACK arrived (see the module documentation). `ack` is the new SND.UNA.
    pub fn on_ack(
        &mut self,
        now: Instant,
        ack: TcpSeqNumber,
        sack: &[(TcpSeqNumber, TcpSeqNumber)],
        ts_rtt: Option<Duration>,
    ) -> AckOutcome {
        // The common case, one ACK per segment or burst: it acknowledges the oldest
        // segments, carries no SACK blocks, and no recovery episode or RTO undo is pending.
        let clean = sack.is_empty()
            && self.undo.is_none()
            && self.recover.is_none()
            && self.tally.sacked == 0
            && self.dup_sacked == 0
            && self.segs.front().is_some_and(|f| f.start < ack);
        if clean {
            self.on_clean_ack(now, ack, ts_rtt)
        } else {
            self.on_ack_general(now, ack, sack, ts_rtt)
        }
    }

    /// Our SYN acknowledged (the ACK processed): where its timer expired and the handshake
    /// gave no RTT sample (no timestamps, and Karn's rule keeps the retransmitted SYN's
    /// ACK from timing it), the RTO "MUST be re-initialized to 3 seconds when data
    /// transmission begins" if the initial one is shorter (RFC 6298 5.7, Linux's
    /// `TCP_TIMEOUT_FALLBACK`), not left at the SYN's backed-off value.
    ///
    /// After a SYN (or SYN-ACK) timeout the congestion state starts afresh: the SYN's RTO
    /// ran the data RTO's response (ssthresh = max(FlightSize * beta, 2 SMSS), `recover`
    /// set, a window of one segment of the MSS guessed before the option exchange, which
    /// `set_smss` then kept), and kept, it ended slow start at two segments. RFC 5681 3.1
    /// wants only the initial window to be one segment (of the SMSS the options gave);
    /// ssthresh starts arbitrarily high as ever, nothing having been in flight to halve
    /// (Linux: `tcp_init_transfer` cuts cwnd to one segment after SYN retransmissions,
    /// `tcp_init_metrics` sets ssthresh to infinity). Where an ACK showed the timeout
    /// spurious (RFC 3522, undone by `on_ack`), the SYN was not lost: the initial window
    /// of RFC 6928, of the negotiated SMSS. Test (scripted):
    /// `rfc5681_3_1_a_lost_syn_leaves_slow_start_open`.
    pub fn on_handshake_done(&mut self) {
        if self.srtt.is_none() && self.stats.rto_count > 0 && self.cfg.rto_initial < RTO_FALLBACK {
            self.rto = RTO_FALLBACK.max(self.cfg.rto_min).min(self.cfg.rto_max);
        }
        if self.stats.rto_count > 0 {
            let segments = if self.stats.spurious_rtos == 0 {
                1
            } else {
                self.cfg.initial_window_segments.max(1) as usize
            };
            self.cwnd = segments * self.smss;
            self.ssthresh = usize::MAX;
            self.cubic = Cubic::default();
            self.recover = None;
            self.rto_recovery = false;
            self.undo = None;
            self.episode_undo = None;
            self.prr = None;
        }
    }

    /// An ACK that advanced SND.UNA: the run of consecutive RTOs and the duplicate ACKs
    /// are over, the RTO timer restarted while data is outstanding; the RTO's value changes
    /// only with an RTT sample (`sample_rtt`, run before), Karn's algorithm (RFC 6298 3).
    #[inline(always)]
    fn on_progress(&mut self, now: Instant, sampled: bool) {
        self.backoffs = 0;
        self.unanswered_rtos = 0;
        self.probe_backoffs = 0;
        // The probes' backoff ends too (`set_window_shut`), unless this ACK's RTT sample
        // has set the RTO already (`sample_rtt` runs first): RFC 6298 2.3's RTO stands.
        // Test: `rfc6298_2_3_an_acked_probes_rtt_sample_sets_the_rto`.
        if let Some(rto) = self.probe_rto.take() {
            if !sampled {
                self.rto = rto;
            }
        }
        self.dupacks = 0;
        self.rto_at = (!self.segs.is_empty()).then(|| now + self.rto);
        // Without an RTT sample the RTO's backoff stays (RFC 6298 3, Karn's algorithm, and
        // the note after 5.7: only a new measurement collapses it; Linux resets
        // `icsk_backoff` only on a valid one). Recomputed here from SRTT, the RTO fell back
        // at the first ACK of a retransmission, and without timestamps, where the ACKs of
        // what an RTO resent give no sample, an RTT grown past the old RTO drew a spurious
        // RTO at every flight. Test:
        // `rfc6298_3_karn_keeps_the_backed_off_rto_until_a_valid_sample`.
    }

    /// RACK.fack follows SND.UNA (RFC 8985 6.2: the highest sequence SACKed or ACKed).
    #[inline(always)]
    fn advance_fack(&mut self, ack: TcpSeqNumber) {
        if self.fack.is_none_or(|f| f < ack) {
            self.fack = Some(ack);
        }
    }

    /// RACK's update (RFC 8985 6.2 step 2) for the segments an ACK newly delivered
    /// (`pick`), by an ACK whose timestamp echo gives `ts_rtt`.
    ///
    /// RFC 8985 6.2 step 2 (RACK_update) takes the delivered segments in the order they were
    /// sent and skips those whose sample is implausible (a segment sent more than once whose
    /// ACK may answer an earlier transmission: its timestamp echo precedes the last
    /// transmission, or the sample is shorter than RACK.min_RTT); every other one sets
    /// RACK.rtt, whether or not it was sent after RACK.xmit_ts, and only RACK.xmit_ts and
    /// RACK.end_seq wait for RACK_sent_after (Linux's `tcp_rack_advance` likewise sets
    /// `rtt_us` before that test). So the state the update leaves is the most recently sent
    /// plausible segment's: its RTT is RACK.rtt, and it is the RACK segment if sent after
    /// the one before. Taken only from a segment also sent after RACK.xmit_ts, an ACK that
    /// delivered only a late segment (reordered, sent before the RACK segment) kept the
    /// shorter RACK.rtt of an earlier ACK, and the reordering window passed early: the
    /// segments it delayed were resent spuriously. And where the most recently sent
    /// segment was implausible (a spurious retransmission answered by its original), the
    /// ACK updated nothing, not even from the segments sent once that it delivered too.
    /// Tests: `rack_rtt_follows_a_late_segment_sent_before_the_rack_segment`,
    /// `rack_an_implausible_retransmission_leaves_the_update_to_the_others`.
    #[inline(always)]
    fn rack_delivered(&mut self, now: Instant, pick: &RackPick, ts_rtt: Option<Duration>) {
        let Some((xmit, end, resent)) = pick.latest else {
            return;
        };
        // `resent`, not `retransmitted`, which a retransmission marked lost again (or an
        // RTO) clears.
        let rtt = now - xmit;
        let plausible = !resent
            || (self.min_rtt.get().is_none_or_le(rtt) && ts_rtt.is_none_or(|r| now - r >= xmit));
        // Else the most recently sent one plausible by RACK.min_RTT before this ACK (the
        // ACK's own sample, run before, may only have lowered it, see `RackPick::new`).
        let (xmit, end) = match (plausible, pick.plausible) {
            (true, _) => (xmit, end),
            (false, Some(p)) => p,
            (false, None) => return,
        };
        let rtt = now - xmit;
        self.rack_rtt = rtt;
        // RACK.min_RTT counts SACK-based samples too (RFC 8985 6.2 step 1, as Linux's
        // `tcp_update_rtt_min` takes the SACK RTT); a plausible sample of a resent segment
        // is not below it.
        self.min_rtt.update(now, rtt);
        // RACK_sent_after (RFC 8985 6.2 step 2): a later transmission, or the same instant
        // (one burst) and a higher end. A segment of the RACK segment's burst below it,
        // delivered later (reordered), took RACK.end_seq down to its own end, and the
        // segments between, sent before the RACK segment, were no longer judged lost (the
        // RTO repaired them). Test:
        // `rfc8985_6_2_a_segment_of_the_same_burst_below_does_not_lower_rack_end_seq`.
        let sent_after = match self.rack_xmit {
            None => true,
            Some(x) => xmit > x || (xmit == x && end > self.rack_end),
        };
        if sent_after {
            self.rack_xmit = Some(xmit);
            self.rack_end = end;
        }
    }

    /// [`Self::on_ack`] where it advances SND.UNA past the front segment's start, with no
    /// SACK blocks, no segment SACKed before, no recovery episode and no RTO to undo: the
    /// state [`Self::on_ack_general`] leaves, without its SACK, undo, duplicate-ACK and
    /// NewReno steps (none applies) and, when nothing remains outstanding, without the RACK
    /// loss walk (it has no segment to look at, and the timers it would set are cleared)
    /// and without taking the segments off the scoreboard's sums one by one.
    /// `tests::clean_ack_fast_path_matches_the_general_path` holds the two together.
    fn on_clean_ack(
        &mut self,
        now: Instant,
        ack: TcpSeqNumber,
        ts_rtt: Option<Duration>,
    ) -> AckOutcome {
        let tlp_loss = self.tlp_answered(now, ack, ts_rtt);
        self.end_dsack_round(ack);
        self.end_stale_episode(ack);
        // An ACK without blocks: none to remember (as `on_ack_general`).
        self.sack_cached = 0;
        let mut out = AckOutcome::default();
        let mut karn: Option<Duration> = None;
        // The segments for RACK's update (no segment is SACKed: every one acknowledged).
        let mut pick = RackPick::new(now, self.min_rtt.get(), ts_rtt);
        let mut note = |s: &Seg| pick.note(s);
        // RFC 6298 3 (Karn): an ACK that covers a retransmission gives no sample at all
        // (see `on_ack_general`).
        let mut resent_acked = false;
        if self.segs.back().is_some_and(|b| b.end <= ack) {
            // Everything outstanding acknowledged (a request's answer, a burst's last ACK):
            // the scoreboard empties at once and its sums are zero.
            for s in &self.segs {
                out.newly_acked += s.len();
                // RFC 6298 3 (Karn): `resent`, not `retransmitted` (cleared when a
                // retransmission is marked lost again, and by an RTO).
                if !s.resent {
                    karn = Some(now - s.xmit);
                }
                resent_acked |= s.resent;
                note(s);
            }
            self.segs.clear();
            self.tally = Tally::default();
        }
        while let Some(front) = self.segs.front().copied() {
            if front.end <= ack {
                out.newly_acked += front.len();
                if !front.resent {
                    karn = Some(now - front.xmit);
                }
                resent_acked |= front.resent;
                note(&front);
                self.tally.sub(&front);
                self.segs.pop_front();
            } else {
                if front.start < ack {
                    out.newly_acked += ack - front.start;
                    resent_acked |= front.resent;
                    note(&front);
                    self.segs[0].start = ack;
                    self.tally.change(&front, &self.segs[0]);
                }
                break;
            }
        }
        if let Some(r) = ts_rtt.or(karn.filter(|_| !resent_acked)) {
            self.sample_rtt(now, r);
            out.rtt_sample = Some(r);
        }
        self.rack_delivered(now, &pick, ts_rtt);
        self.on_progress(now, out.rtt_sample.is_some());
        // No segment was SACKed, so none lay below RACK.fack (<= SND.UNA before this ACK):
        // no reordering to note (RFC 8985 6.2 step 3), only fack to keep up.
        self.advance_fack(ack);
        if self.segs.is_empty() {
            if tlp_loss {
                self.reduce_window_tlp();
            } else {
                self.grow(now, out.newly_acked);
            }
            self.pto_at = None;
            self.reorder_at = None;
            // As `on_ack_general` (nothing left to bound, no range to keep).
            self.forget_marks();
            return out;
        }
        if self.cfg.rack_tlp {
            out.lost_marked += self.detect_loss(now);
        }
        if out.lost_marked > 0 {
            self.enter_recovery(out.newly_acked);
            // RFC 9937 section 6: the ACK that begins the episode counts (as
            // `on_ack_general`); it marked a loss, so it is no SafeACK.
            self.prr_on_ack(out.newly_acked, false);
        } else if tlp_loss {
            self.reduce_window_tlp();
        } else {
            self.grow(now, out.newly_acked);
        }
        self.arm_pto(now);
        out
    }

    /// [`Self::on_ack`] in every case.
    fn on_ack_general(
        &mut self,
        now: Instant,
        ack: TcpSeqNumber,
        sack: &[(TcpSeqNumber, TcpSeqNumber)],
        ts_rtt: Option<Duration>,
    ) -> AckOutcome {
        let tlp_loss = self.tlp_answered(now, ack, ts_rtt);
        self.end_dsack_round(ack);
        self.end_stale_episode(ack);
        // RFC 9937's DeliveredData: change_in(snd.una) + change_in(SACKd), the octets
        // SACKed before that this ACK covers taken off (`sacked_acked`), and without SACK
        // one segment per duplicate ACK less what a cumulative ACK takes of those
        // (`dup_sacked`, its change from `dup0`; RFC 9937's estimate for a receiver
        // without SACK, as Linux's `tcp_add_reno_sack` / `tcp_remove_reno_sacks`, limited
        // by prr_delivered < RecoverFS in an episode: see the duplicate-ACK step below).
        let dup0 = self.dup_sacked;
        let mut sacked_acked = 0;
        let mut out = AckOutcome::default();
        let mut karn: Option<Duration> = None;
        let mut rack_pick = RackPick::new(now, self.min_rtt.get(), ts_rtt);
        // RFC 8985 6.2 step 3: a segment never retransmitted, newly delivered below the
        // highest sequence delivered before this ACK (RACK.fack), was reordered. (Against
        // the fack before the ACK: the order of deliveries within one ACK is unknown.)
        let fack0 = self.fack;
        let mut reordered = false;
        // RFC 6298 3 (Karn): an ACK that covers a retransmission gives no sample at all,
        // not even from the segments sent once that it covers too (Linux's
        // FLAG_RETRANS_DATA_ACKED in `tcp_clean_rtx_queue`): their cumulative ACK waited
        // for the hole the retransmission filled, so the time since they left is the
        // repair's, not a round trip (after an RTO, SRTT grew by the backed-off timeout).
        // A timestamp echo (`ts_rtt`) times the segment that drew the ACK and stays valid.
        // Test: `rfc6298_3_no_sample_from_an_ack_that_covers_a_retransmission`.
        let mut resent_acked = false;
        let mut below_fack = |end: TcpSeqNumber, s: &Seg| {
            reordered |= !s.resent && !s.sacked && fack0.is_some_and(|f| end < f);
        };
        // Cumulative acknowledgement.
        while let Some(front) = self.segs.front().copied() {
            if front.end <= ack {
                below_fack(front.end, &front);
                out.newly_acked += front.len();
                sacked_acked += if front.sacked { front.len() } else { 0 };
                // RFC 6298 3 (Karn): no sample from a segment ever sent twice (`resent`:
                // `retransmitted` is cleared when a retransmission is marked lost again,
                // and by an RTO); a timestamp echo (`ts_rtt`) is one even then.
                if !front.resent && !front.sacked {
                    karn = Some(now - front.xmit);
                }
                resent_acked |= front.resent && !front.sacked;
                if !front.sacked {
                    rack_pick.note(&front);
                }
                self.tally.sub(&front);
                self.segs.pop_front();
            } else if front.start < ack {
                below_fack(ack, &front);
                out.newly_acked += ack - front.start;
                sacked_acked += if front.sacked { ack - front.start } else { 0 };
                resent_acked |= front.resent && !front.sacked;
                if !front.sacked {
                    rack_pick.note(&front);
                }
                self.segs[0].start = ack;
                self.tally.change(&front, &self.segs[0]);
                break;
            } else {
                break;
            }
        }
        // IsLost's floor (RFC 6675 4) is kept while something is SACKed (every ACK then comes
        // here, not to `on_clean_ack`, and keeps it within a window of SND.UNA).
        if self.marks.islost_floor.is_some_and(|f| {
            self.tally.sacked == 0 || self.segs.front().is_none_or(|s| f < s.start)
        }) {
            self.marks.islost_floor = None;
        }
        // SACK blocks (RFC 2018 4): mark what they cover. Each walk starts at the first
        // entry the block can cover (a binary search), not at the front, and passes over
        // the entries within a block of the last ACK (`sack_cache`: SACKed already) with
        // another: a peer repeats its blocks in every ACK, each grown by the segment that
        // drew it (RFC 2018 4), so a block costs about the segments it newly covers, not
        // the window below it nor all it covers (with thousands of segments in flight and
        // three blocks per ACK, a recovery episode was quadratic).
        let mut sacked_top: Option<TcpSeqNumber> = None;
        let (cache, cached) = (self.sack_cache, self.sack_cached);
        self.sack_cached = 0;
        for &(l, r) in sack {
            if r <= l {
                continue;
            }
            if !self.sack_seen {
                self.sack_seen = true;
                // RACK judges every entry from now on, not only the front (`detect_loss`):
                // its time order of the retransmissions starts here.
                self.rebuild_retx_order();
            }
            // A block not within what is outstanding (`walk_start`) is walked from the
            // front, as ever, and not cached.
            let start = self.walk_start(l, r);
            let mut i = start.unwrap_or(0);
            while let Some(s) = self.segs.get_mut(i) {
                visited();
                if s.start >= r {
                    break;
                }
                if s.sacked && start.is_some() {
                    let (a, b) = (s.start, s.end);
                    if let Some(&(_, cr)) =
                        cache[..cached].iter().find(|&&(cl, cr)| cl <= a && b <= cr)
                    {
                        i = self.first_ending_after(cr);
                        continue;
                    }
                } else if !s.sacked && s.start >= l && s.end <= r {
                    below_fack(s.end, s);
                    if sacked_top.is_none_or(|t| t < s.end) {
                        sacked_top = Some(s.end);
                    }
                    let before = *s;
                    s.sacked = true;
                    self.tally.change(&before, s);
                    out.newly_sacked += s.len();
                    rack_pick.note(s);
                }
                i += 1;
            }
            if start.is_some() && self.sack_cached < SACK_CACHE {
                self.sack_cache[self.sack_cached] = (l, r);
                self.sack_cached += 1;
            }
        }
        self.reordering_seen |= reordered;
        if let Some(t) = sacked_top {
            self.advance_fack(t);
        }
        self.advance_fack(ack);
        let progressed = out.newly_acked > 0;
        if progressed {
            if let Some(u) = self.undo.take() {
                // RFC 3522 2: the first acceptable ACK after the retransmission echoes a
                // timestamp from before it: the original was delivered.
                if ts_rtt.is_some_and(|r| now - r < u.at) {
                    self.undo_rto(now, &u);
                }
            }
            // The RTO stands (not undone): a fast recovery episode it cut short is over,
            // and PRR's state with it (RFC 9937 is for fast recovery, not an RTO's).
            if self.rto_recovery {
                self.prr = None;
            }
        }
        // RTT: the timestamp echo if there is one, else Karn's rule (RFC 6298 3).
        if progressed {
            if let Some(r) = ts_rtt.or(karn.filter(|_| !resent_acked)) {
                self.sample_rtt(now, r);
                out.rtt_sample = Some(r);
            }
        }
        // RACK (RFC 8985 6.2 step 2).
        self.rack_delivered(now, &rack_pick, ts_rtt);
        if progressed {
            self.on_progress(now, out.rtt_sample.is_some());
            // Linux's tcp_remove_reno_sacks: the ACK covered one hole; the rest of what it
            // covers had drawn duplicate ACKs already.
            self.dup_sacked = self
                .dup_sacked
                .saturating_sub(out.newly_acked.saturating_sub(self.smss));
        } else if !self.segs.is_empty() && sack.is_empty() && !self.sack_seen {
            // RFC 5681 3.2: duplicate ACKs without SACK, each a segment that left the
            // network (steps 3-4; its pipe as Linux's tcp_add_reno_sack: `in_flight`).
            self.dupacks += 1;
            // RFC 9937 section 6.2: without SACK DeliveredData is estimated as one SMSS
            // per duplicate ACK, and only while prr_delivered < RecoverFS: a receiver may
            // send duplicate ACKs for segments it never got (ACK division, duplicate-ACK
            // spoofing: Savage et al. 1999), and the episode's prr_delivered then stays
            // bounded by the data outstanding when it began (as ns-3's TcpPrrRecovery and
            // FreeBSD's PRR). The duplicate ACK then takes nothing out of the pipe either
            // (`dup_sacked` is that estimate): an unbounded estimate let a hostile receiver
            // draw a new segment per duplicate ACK for as long as it sent them. Test:
            // `prr_duplicate_acks_deliver_no_more_than_recover_fs`.
            let spent = !self.rto_recovery && self.prr.is_some_and(|p| p.delivered >= p.recover_fs);
            if !spent {
                // Never more than `in_flight` can take out of the pipe now (Linux's
                // `tcp_limit_reno_sacked`, at every duplicate ACK): no RecoverFS bounds the
                // count in an RTO's recovery, and the excess of a run of duplicates (ACK
                // division, duplicated ACKs) was credit that hid the segments sent later
                // from the pipe, so that once the RTO's losses were resent new data went
                // out without bound. Test:
                // `duplicate_acks_after_an_rto_take_out_no_more_than_was_outstanding`.
                let most = self.dup_sacked_most();
                self.dup_sacked = (self.dup_sacked + self.smss).min(most.max(self.dup_sacked));
            }
            // RFC 6582 3.2 step 1: the third duplicate ACK starts a fast retransmit only
            // when "the sender isn't already in fast recovery", and section 4: not after a
            // retransmission timeout either while the ACKs lie below `recover` (the highest
            // sequence sent when it fired; an RTO sets it, and it is cleared once SND.UNA
            // reaches it, so `recover` set means below it). The front segment is then the
            // episode's or the RTO's retransmission, in flight: marked lost again it went a
            // second time (Linux marks the head lost by duplicate ACKs only before Recovery,
            // `tcp_newreno_mark_lost`, and counts none in CA_Loss). Tests:
            // `duplicate_acks_after_an_rto_do_not_resend_its_retransmission`,
            // `no_second_fast_retransmit_within_a_newreno_episode`.
            if self.dupacks == 3 && self.recover.is_none() {
                if let Some(s) = self.segs.front_mut() {
                    if !s.lost && !s.sacked {
                        let before = *s;
                        s.lost = true;
                        self.tally.change(&before, s);
                        out.lost_marked += 1;
                        self.marks.lost_hint = None;
                    }
                }
            }
        }
        // NewReno partial ACK (RFC 6582 3.2 step 3): the next hole is lost too.
        if let Some(rec) = self.recover {
            if progressed && ack < rec && !self.sack_seen {
                if let Some(s) = self.segs.front_mut() {
                    if !s.lost && !s.sacked && !s.retransmitted {
                        let before = *s;
                        s.lost = true;
                        self.tally.change(&before, s);
                        out.lost_marked += 1;
                        self.marks.lost_hint = None;
                    }
                }
            }
        }
        if self.cfg.rack_tlp {
            out.lost_marked += self.detect_loss(now);
        } else if out.newly_sacked > 0 {
            // RFC 6675 5: without RACK, SACK blocks drive the loss detection (duplicate
            // ACKs are counted only from a peer that does not SACK, above). Test:
            // `rfc6675_5_without_rack_sack_blocks_still_drive_a_fast_retransmit`.
            out.lost_marked += self.sack_mark_lost();
        }
        // Congestion response.
        let acked = out.newly_acked;
        // A loss the probe repaired in a recovery episode (the ACK may end it) had the
        // episode's reduction: one per episode.
        let tlp_loss = tlp_loss && self.recover.is_none();
        let delivered = (out.newly_acked - sacked_acked + out.newly_sacked + self.dup_sacked)
            .saturating_sub(dup0);
        // The duplicate ACKs' estimate within what is outstanding again, now that this ACK
        // took its octets off the scoreboard and marked its losses (after DeliveredData,
        // which counts what the ACK delivered, as Linux's `tcp_remove_reno_sacks` counts
        // `delivered` before its limit).
        if self.dup_sacked > 0 {
            self.limit_dup_sacked();
        }
        if let Some(rec) = self.recover {
            if ack >= rec {
                self.recover = None;
                self.dup_sacked = 0;
                self.retransmit_first = false;
                self.prr = None;
                // RFC 8985 6.2 step 4: a widened reordering window lasts 16 episodes.
                self.reo_wnd_persist = self.reo_wnd_persist.saturating_sub(1);
                if self.reo_wnd_persist == 0 {
                    self.reo_wnd_mult = 1;
                }
                if !std::mem::take(&mut self.rto_recovery) && self.ssthresh != usize::MAX {
                    // RFC 9937 section 6 (on exiting recovery, cwnd = ssthresh) and RFC 6582 3.2
                    // step 3 (full ACK): PRR left cwnd at pipe + sndcnt, at or below
                    // ssthresh (Linux's `tcp_end_cwnd_reduction`).
                    self.cwnd = self.ssthresh.max(2 * self.smss);
                }
                // RFC 3708: every retransmission of the episode was D-SACKed while it
                // lasted: its reduction is undone now, after the deflation (which would
                // take the restored window back to the reduced ssthresh; Linux's
                // `tcp_try_undo_recovery` skips `tcp_end_cwnd_reduction` when it undoes).
                // Test: `rfc3708_an_undo_at_the_episodes_end_survives_the_deflation`.
                if self.episode_undo.is_some_and(|u| u.all_dsacked) {
                    self.undo_episode();
                }
            }
        }
        if out.lost_marked > 0 && self.recover.is_none() {
            self.enter_recovery(delivered);
        } else if tlp_loss {
            self.reduce_window_tlp();
        } else if acked > 0 && (self.recover.is_none() || self.rto_recovery) {
            // RFC 5681 3.1, RFC 6298 5: after an RTO the sender slow-starts from one segment
            // (up to ssthresh, then congestion avoidance, as Linux grows cwnd in CA_Loss)
            // while it resends what the RTO marked lost; `recover` stays (RFC 6582 4: no
            // fast retransmit for data sent before the RTO) but does not hold cwnd at one
            // segment, which repaired the window one segment per round trip.
            self.grow(now, acked);
        }
        // RFC 9937 section 6: in a fast recovery episode (this ACK's included, if it began
        // it) the ACK's delivered data set what may be sent; a SafeACK (SND.UNA advanced,
        // no further loss indicated) may send one segment more (PRR-SSRB).
        if self.prr.is_some() && !self.rto_recovery {
            self.prr_on_ack(delivered, progressed && out.lost_marked == 0);
        }
        // TLP: RFC 8985 7.2 restarts the probe timer on an ACK that acknowledges new data
        // (cumulatively; newly SACKed data leaves segments SACKed, where `arm_pto` arms
        // none). An ACK of nothing new (a duplicate ACK from a peer without SACK, a window
        // update, a repeated ACK from a SACK peer) leaves a running timer alone: restarting
        // it there postponed the probe for as long as such ACKs kept coming, and left the
        // tail loss to the RTO. It may still stop it (the conditions of `pto_allowed`).
        if progressed {
            self.arm_pto(now);
        } else if !self.pto_allowed() {
            self.pto_at = None;
        }
        if self.segs.is_empty() {
            self.rto_at = None;
            self.pto_at = None;
            self.reorder_at = None;
            self.dup_sacked = 0;
            self.forget_marks();
        }
        out
    }

    /// RFC 4015 3.1 (and Linux's undo): back to the congestion state before the spurious
    /// RTO, its backoff dropped; what it marked lost and has not resent is in flight again.
    /// CUBIC's epoch comes back moved on by the time since the RTO (`now - u.at`), which
    /// the window of one segment spent stalled: not the epoch's (RFC 9438 5.8, as idle
    /// time in `on_sent`). Restored as it was, t counted the stall, and a late ACK (a
    /// descheduled peer's, the case the undo is for) had the window jump towards
    /// W_cubic(t) at the 1.5x cap. Test:
    /// `rfc9438_5_8_the_stall_of_a_spurious_rto_is_not_the_epochs`.
    fn undo_rto(&mut self, now: Instant, u: &Undo) {
        self.stats.spurious_rtos += 1;
        if self.cfg.congestion != Congestion::None {
            self.cwnd = self.cwnd.max(u.cwnd);
            self.ssthresh = self.ssthresh.max(u.ssthresh);
            self.cubic = u.cubic;
            // Time already counted as not limited (`unlimited_since`) is left to `grow`,
            // which moves the epoch on by all of it, the stall included.
            if self.cubic.unlimited_since.is_none() {
                if let Some(e) = &mut self.cubic.epoch {
                    *e = (*e + (now - u.at)).min(now);
                }
            }
        }
        self.rto = self.rto.min(u.rto);
        self.backoffs = 0;
        self.unanswered_rtos = 0;
        self.recover = u.recover;
        self.rto_recovery = u.rto_recovery;
        for s in self.segs.iter_mut() {
            if s.lost && !s.retransmitted {
                let was = *s;
                s.lost = false;
                self.tally.change(&was, s);
            }
        }
        // Entries RACK and IsLost had done with are theirs to judge again (RFC 8985 6.2
        // step 5, RFC 6675 4): their walks start at the front, the resent ones go back to
        // RACK's time order.
        self.marks.rack_floor = None;
        self.marks.islost_floor = None;
        self.rebuild_retx_order();
    }

    /// RFC 8985 6.2 step 5: marks lost every segment sent before the RACK segment whose
    /// reordering window passed; arms the reorder timer for the rest.
    ///
    /// The segments judged are those not SACKed nor awaiting their retransmission, sent
    /// (last) before the RACK segment. Walked in sequence order from the front, as before,
    /// every ACK of a recovery episode passed over every SACKed and lost entry below the
    /// RACK segment, and over every retransmission sent after it: quadratic with thousands
    /// of segments in flight. Instead, as Linux's `tcp_rack_detect_loss` over its
    /// time-ordered list, the walk goes in sending order and stops where the rest cannot
    /// change the outcome, in two parts: the entries never resent, whose sending order is
    /// their sequence order, from `marks.rack_floor`; the retransmissions, from
    /// `retx_order`. In each the times only grow, so the deadlines (time + RACK.rtt +
    /// reo_wnd) too: the first one judged that has not passed sets the timer (the least)
    /// and none after it can be marked. The outcome is the walk over every entry's: the
    /// same entries marked lost, the same timer
    /// (`tests::loss_marks_agree_with_the_walks_over_every_entry`).
    fn detect_loss(&mut self, now: Instant) -> usize {
        #[cfg(test)]
        if REFERENCE_WALKS.with(std::cell::Cell::get) {
            return self.detect_loss_reference(now);
        }
        // Bounds at or below SND.UNA bound nothing (and would go stale): the walks start at
        // the front without a search (an ACK of the bulk path: the front entry, sent after
        // the RACK segment, ends the walk at once, as before).
        if let Some(front) = self.segs.front().map(|f| f.start) {
            if self.marks.rack_floor.is_some_and(|f| f <= front) {
                self.marks.rack_floor = None;
            }
            if self.marks.lost_hint.is_some_and(|h| h <= front) {
                self.marks.lost_hint = None;
            }
        }
        let Some(rack_xmit) = self.rack_xmit else {
            return 0;
        };
        // RFC 8985 6.2 step 4: unless reordering was seen (step 3), no window in loss
        // recovery or once DupThresh (3) segments are SACKed; else RACK.reo_wnd_mult *
        // min_RTT / 4 bounded by SRTT.
        let sacked = self.tally.sacked;
        let reo_wnd = if !self.reordering_seen && (self.recover.is_some() || sacked >= 3) {
            Duration::ZERO
        } else {
            let w = self
                .min_rtt
                .get()
                .map_or(Duration::ZERO, |m| m / 4 * self.reo_wnd_mult);
            self.srtt.map_or(w, |s| w.min(s))
        };
        let wait = self.rack_rtt + reo_wnd;
        let rack_end = self.rack_end;
        // Sent before the RACK segment (RFC 8985's RACK_sent_after, the tie broken by the
        // sequence number).
        let before = move |s: &Seg| s.xmit < rack_xmit || (s.xmit == rack_xmit && s.end < rack_end);
        let mut lost = 0;
        let mut timer: Option<Instant> = None;
        // Without SACK information (a peer that never sent a block) an ACK tells of no
        // delivery above SND.UNA: the only segment it can show missing is the one at
        // SND.UNA (RFC 6582 3.2 step 3's partial ACK), not every one sent before the
        // retransmission it acknowledges, which the receiver most likely holds (that was
        // a go-back-N of the window at each partial ACK). Test:
        // `rfc8985_6_2_without_sack_a_partial_ack_marks_only_the_next_hole_lost`.
        if !self.sack_seen {
            if let Some(s) = self.segs.front_mut() {
                visited();
                if Self::rack_judges(s) && before(s) {
                    let deadline = s.xmit + wait;
                    if deadline <= now {
                        Self::mark_lost(&mut self.tally, s);
                        lost += 1;
                        self.marks.lost_hint = None;
                    } else {
                        timer = Some(deadline);
                    }
                }
            }
            self.reorder_at = timer;
            return lost;
        }
        let fresh = self.tally.lost == 0;
        let mut lowest: Option<TcpSeqNumber> = None;
        // The entries never resent, in sequence order from the floor: their times grow with
        // the sequence (each left when first sent), so once one is not before the RACK
        // segment none after it is, and a retransmission above it was sent later still.
        let mut i = self
            .marks
            .rack_floor
            .and_then(|f| self.walk_start(f, f))
            .unwrap_or(0);
        while let Some(s) = self.segs.get_mut(i) {
            visited();
            if s.resent || !Self::rack_judges(s) {
                // A retransmission (judged below), or SACKed or lost: not RACK's, and not
                // again while never resent (`Marks::rack_floor`).
                i += 1;
                continue;
            }
            if !before(s) {
                break;
            }
            let deadline = s.xmit + wait;
            if deadline > now {
                timer = Some(deadline);
                break;
            }
            Self::mark_lost(&mut self.tally, s);
            lost += 1;
            lowest.get_or_insert(s.start);
            i += 1;
        }
        self.marks.rack_floor = match self.segs.get(i) {
            Some(s) => Some(s.start),
            None => self.segs.back().map(|b| b.end),
        };
        // The retransmissions, in the order they went out. A range sent after the RACK
        // segment ends the walk (all later ones were too); one whose entries RACK no longer
        // judges leaves the list.
        let mut k = 0;
        while let Some(&(rs, re, rx)) = self.retx_order.get(k) {
            visited();
            if rx > rack_xmit {
                break;
            }
            let (mut kept, mut waits) = (false, false);
            let mut j = self.walk_start(rs, re).unwrap_or(0);
            while let Some(s) = self.segs.get_mut(j) {
                visited();
                if s.start >= re {
                    break;
                }
                j += 1;
                // Entries of this transmission (not resent again since) that RACK judges.
                if s.end <= rs || !s.resent || s.xmit != rx || !Self::rack_judges(s) {
                    continue;
                }
                if !before(s) {
                    // Sent at the RACK segment's time, above it: the tie (later ranges of
                    // the same time may still hold entries below it).
                    kept = true;
                    continue;
                }
                let deadline = s.xmit + wait;
                if deadline > now {
                    timer = Some(timer.map_or(deadline, |t| t.min(deadline)));
                    (kept, waits) = (true, true);
                    continue;
                }
                Self::mark_lost(&mut self.tally, s);
                lost += 1;
                lowest = Some(match lowest {
                    Some(l) if l <= s.start => l,
                    _ => s.start,
                });
            }
            if waits {
                // Every later range was sent at this time or after: its deadlines are no
                // earlier, none has passed, none is less than the timer.
                break;
            }
            if kept || k > 0 {
                k += 1;
            } else {
                self.retx_order.pop_front();
            }
        }
        if let Some(m) = lowest {
            self.lower_lost_hint(m, fresh);
        }
        self.reorder_at = timer;
        lost
    }

    /// RFC 6675 4's IsLost, the loss detection of RFC 6675 5 where RACK is off: a segment
    /// not SACKed is lost once DupThresh (3) SACKed segments lie above it, or more than
    /// (DupThresh - 1) * SMSS SACKed octets. Retransmissions are not judged again (RFC
    /// 6675 leaves a lost retransmission to the RTO).
    ///
    /// A walk down from the top of the scoreboard, counting what is SACKed above. It starts
    /// at RACK.fack, the end of the highest SACKed entry (nothing above is SACKed, so
    /// nothing there is lost), and stops at `marks.islost_floor`, below which nothing is
    /// left to mark: the counts above an entry only grow while it waits (SACKs add to them,
    /// a cumulative ACK takes entries below it), so once IsLost holds for an entry it holds
    /// for all below, which are then marked, SACKed or retransmitted. Walked over the whole
    /// scoreboard, every ACK that SACKed something new in a recovery episode cost every
    /// segment in flight; now it costs what it newly covers and the entries among the top
    /// DupThresh SACKed ones (`tests::loss_marks_agree_with_the_walks_over_every_entry`
    /// holds it to the walk over every entry).
    fn sack_mark_lost(&mut self) -> usize {
        #[cfg(test)]
        if REFERENCE_WALKS.with(std::cell::Cell::get) {
            return self.sack_mark_lost_reference();
        }
        const DUP_THRESH: usize = 3;
        let fresh = self.tally.lost == 0;
        // Entries ending at or below RACK.fack: every SACKed one (`advance_fack`).
        let top = self
            .fack
            .and_then(|f| self.walk_start(f, f))
            .unwrap_or(self.segs.len());
        let bottom = self
            .marks
            .islost_floor
            .and_then(|f| self.walk_start(f, f))
            .unwrap_or(0);
        let (mut segs_above, mut octets_above, mut lost) = (0, 0, 0);
        // The lowest entry marked, and the lowest left that IsLost may mark later.
        let (mut lowest, mut open) = (None, None);
        let mut i = top;
        while i > bottom {
            i -= 1;
            visited();
            let s = &mut self.segs[i];
            if s.sacked {
                segs_above += 1;
                octets_above += s.len();
            } else if !s.lost && !s.retransmitted {
                if segs_above >= DUP_THRESH || octets_above > (DUP_THRESH - 1) * self.smss {
                    let was = *s;
                    s.lost = true;
                    self.tally.change(&was, s);
                    lost += 1;
                    lowest = Some(s.start);
                } else {
                    open = Some(s.start);
                }
            }
        }
        if open.is_some() {
            self.marks.islost_floor = open;
        } else if top > bottom {
            self.marks.islost_floor = Some(self.segs[top - 1].end);
        }
        if let Some(m) = lowest {
            self.lower_lost_hint(m, fresh);
        }
        lost
    }

    /// Marks the entry lost, waiting for its retransmission (RFC 8985 6.2 step 5: a
    /// retransmission judged lost is sent again), and keeps `tally`'s sums with it. An
    /// associated function: the callers hold `s` borrowed from the scoreboard.
    fn mark_lost(tally: &mut Tally, s: &mut Seg) {
        let was = *s;
        s.lost = true;
        s.retransmitted = false;
        tally.change(&was, s);
    }

    /// Whether RACK judges the entry (RFC 8985 6.2 step 5): neither SACKed nor lost and
    /// waiting for its retransmission, which is to say in the pipe (RFC 6675).
    fn rack_judges(s: &Seg) -> bool {
        s.in_pipe()
    }

    /// Whether `retx_order` is kept: RACK judges every entry only once the peer SACKs.
    fn tracks_retx_order(&self) -> bool {
        self.cfg.rack_tlp && self.sack_seen
    }

    /// Builds `retx_order` from the scoreboard: every entry resent that RACK judges, by
    /// its transmission time. O(n log n), where the list could have missed entries (RACK
    /// judges every entry from the first SACK block on; an RTO's undo makes the entries it
    /// marked lost judged again) or grew long with ranges that outlived their entries.
    fn rebuild_retx_order(&mut self) {
        self.retx_order.clear();
        if !self.tracks_retx_order() {
            return;
        }
        self.retx_order.extend(
            self.segs
                .iter()
                .filter(|s| s.resent && Self::rack_judges(s))
                .map(|s| (s.start, s.end, s.xmit)),
        );
        // Stable: in sequence order among equal times.
        self.retx_order.make_contiguous().sort_by_key(|r| r.2);
    }

    /// Entries from `m` up were marked lost: `next_retransmit`'s search starts at or below
    /// them. `fresh`: none awaited its retransmission before, so the hint bounded nothing.
    fn lower_lost_hint(&mut self, m: TcpSeqNumber, fresh: bool) {
        self.marks.lost_hint = if fresh {
            Some(m)
        } else {
            self.marks.lost_hint.map(|h| if h <= m { h } else { m })
        };
    }

    /// The scoreboard emptied, or an RTO changed every entry: no bound of `marks` holds
    /// and no range of `retx_order` has an entry RACK judges.
    fn forget_marks(&mut self) {
        self.marks = Marks::default();
        self.retx_order.clear();
    }

    /// A recovery episode begins; `delivered` is what the ACK that began it delivered
    /// (its DeliveredData, which `prr_on_ack` counts next; 0 for the reorder timer's entry).
    fn enter_recovery(&mut self, delivered: usize) {
        self.recover = self.high;
        self.retransmit_first = true;
        // What the reduction changes, until D-SACKs say whether it was needed (an episode
        // has something outstanding: `high` is known).
        self.episode_undo = self.high.map(|h| EpisodeUndo {
            cwnd: self.cwnd,
            ssthresh: self.ssthresh,
            cubic: self.cubic,
            all_dsacked: false,
            horizon: h + EPISODE_HORIZON,
        });
        self.episode_resent.clear();
        // RFC 8985 7.2: no loss probe in recovery (`arm_pto`), nor one armed before it.
        self.pto_at = None;
        self.reduce_window();
        if self.cfg.congestion != Congestion::None {
            // RFC 9937 section 6 (initialization): the target is ssthresh
            // (`reduce_window`); RecoverFS is snd.nxt - snd.una less the octets SACKed
            // before this ACK, plus what this ACK cumulatively acknowledged: the octets
            // that can yet count as delivered in the episode, this ACK's included (what
            // was SACKed before never will). RFC 6937 3 took the whole FlightSize: with
            // octets SACKed before the loss was found (RACK's reordering window, three
            // duplicate ACKs), prr_delivered could never reach it and the episode sent
            // less than ssthresh / RecoverFS said. Here: FlightSize after the ACK, less
            // what is SACKed now (the duplicate ACKs' estimate without SACK included),
            // plus the ACK's DeliveredData (its newly SACKed and newly acknowledged
            // octets). Until an ACK's delivered data allow more (`prr_on_ack`), nothing
            // goes but the first retransmission (RFC 6675 5 (4.3), `retransmit_first`):
            // the window is the pipe (a reorder timer's entry, with no ACK; an ACK's entry
            // sets it at once). Test: `prr_recover_fs_leaves_out_what_was_sacked_before`.
            let recover_fs = self
                .flight_size()
                .saturating_sub(self.tally.sacked_octets)
                .saturating_sub(self.dup_sacked)
                .saturating_add(delivered);
            self.prr = Some(Prr {
                delivered: 0,
                out: 0,
                recover_fs: recover_fs.max(1),
            });
            self.cwnd = self.in_flight().max(self.smss);
        }
    }

    /// Proportional Rate Reduction (RFC 9937 section 6) for an ACK of a fast recovery
    /// episode that delivered `delivered` octets (DeliveredData; an ACK that delivered
    /// nothing changes nothing, as Linux's `tcp_cwnd_reduction`): the window becomes pipe +
    /// sndcnt, so that what may go now (`send_allowance`, `next_retransmit`'s pipe < cwnd)
    /// is sndcnt, and each transmission counts in prr_out (`on_sent`). `safe`: the ACK is
    /// a SafeACK, it advanced SND.UNA and indicated no further loss.
    ///
    /// * While pipe > ssthresh: sndcnt = CEIL(prr_delivered * ssthresh / RecoverFS) -
    ///   prr_out, the sending spread over the episode in the proportion of the reduction
    ///   (about one segment per two delivered for NewReno's 1/2 and seven per ten for
    ///   CUBIC's 0.7, a little more when segments were SACKed before the episode)
    ///   instead of RFC 6675's silence until the pipe fell below the reduced cwnd and a
    ///   segment per ACK after. CEIL rounds up to whole segments, as Linux counts it in
    ///   packets: an allowance of part of a segment would be held back by the sender's SWS
    ///   avoidance or go as a runt.
    /// * Else sndcnt = MIN(ssthresh - pipe, MAX(prr_delivered - prr_out, DeliveredData)),
    ///   the conservative reduction bound (PRR-CRB: no more than was delivered), and on a
    ///   SafeACK one MSS more inside the MIN (PRR-SSRB, back towards ssthresh by at most
    ///   one segment per ACK beyond what it delivered), not the burst up to cwnd nor (with
    ///   heavy losses) a window left far below ssthresh. RFC 6937 3 left the choice to
    ///   the implementation (this module took SSRB on every ACK); RFC 9937 section 6
    ///   takes CRB unless the ACK is a SafeACK (as Linux's `tcp_cwnd_reduction`,
    ///   FLAG_SND_UNA_ADVANCED without newly lost segments): an ACK that only SACKs more,
    ///   or that marks more lost, sends no more than it delivered (a policer dropping
    ///   what exceeds its rate would drop the extra segment too). Test:
    ///   `prr_ssrb_only_on_a_safe_ack`.
    /// * The episode's first ACK allows a segment whatever the rest (RFC 9937 section 6:
    ///   "Force a fast retransmit upon entering recovery"; Linux forces one while prr_out
    ///   is 0).
    fn prr_on_ack(&mut self, delivered: usize, safe: bool) {
        let pipe = self.in_flight();
        let (smss, ssthresh) = (self.smss, self.ssthresh);
        let Some(p) = self.prr.as_mut() else {
            return;
        };
        if delivered == 0 {
            return;
        }
        p.delivered += delivered;
        let mut sndcnt = if pipe > ssthresh {
            let share = (p.delivered as u128 * ssthresh as u128).div_ceil(p.recover_fs as u128);
            let share = share.div_ceil(smss as u128) * smss as u128;
            usize::try_from(share)
                .unwrap_or(usize::MAX)
                .saturating_sub(p.out)
        } else {
            let limit = p.delivered.saturating_sub(p.out).max(delivered);
            let limit = if safe {
                limit.saturating_add(smss)
            } else {
                limit
            };
            (ssthresh - pipe).min(limit)
        };
        if p.out == 0 {
            sndcnt = sndcnt.max(smss);
        }
        self.cwnd = pipe.saturating_add(sndcnt);
    }

    /// The reduction for a loss a loss probe repaired: no D-SACK undoes it, nor may an
    /// earlier episode's undo, coming later, restore the window from before it.
    fn reduce_window_tlp(&mut self) {
        self.episode_undo = None;
        self.reduce_window();
    }

    /// The window reduction of a loss (once per episode): of entering recovery, or of a
    /// loss a loss probe repaired (RFC 8985 7.4.2, a reduction with no episode to follow:
    /// Linux's CWR state entered and left at once in `tcp_process_tlp_ack`).
    fn reduce_window(&mut self) {
        self.stats.fast_recoveries += 1;
        match self.cfg.congestion {
            Congestion::None => {}
            Congestion::NewReno => {
                // RFC 5681 (4): ssthresh = max(FlightSize / 2, 2 SMSS), FlightSize the data
                // outstanding, not cwnd (its note: a sender below cwnd would otherwise keep
                // a window it did not use).
                self.ssthresh = (self.flight_size() / 2).max(2 * self.smss);
                self.cwnd = self.ssthresh;
            }
            Congestion::Cubic => {
                // RFC 9438 4.6: W_max, then cwnd * beta.
                let w = self.cwnd as f64 / self.smss as f64;
                // RFC 9438 4.7 (fast convergence): a loss below the last W_max (the
                // available bandwidth fell, or a new flow takes its share) releases some:
                // W_max = cwnd * (1 + beta) / 2.
                self.cubic.w_max = if w < self.cubic.w_max {
                    w * (1.0 + CUBIC_BETA) / 2.0
                } else {
                    w
                };
                self.cubic.cwnd_prior = w;
                self.ssthresh = ((self.cwnd as f64 * CUBIC_BETA) as usize).max(2 * self.smss);
                self.cwnd = self.ssthresh;
                // RFC 9438 4.2: K = cbrt((W_max - cwnd_epoch) / C), cwnd_epoch the window
                // after the reduction (W_max (1 - beta) without fast convergence).
                let epoch_w = self.cwnd as f64 / self.smss as f64;
                self.cubic.k = ((self.cubic.w_max - epoch_w).max(0.0) / CUBIC_C).cbrt();
                // RFC 9438 4.2: t counts from the start of the congestion avoidance stage,
                // which is the first ACK that may grow the window after the recovery the
                // reduction starts (`grow` starts the epoch then; Linux's `bictcp_update`
                // as `epoch_start` is 0), not the loss: a recovery of a round trip or more
                // counted in t had W_cubic run that far ahead.
                self.cubic.epoch = None;
                self.cubic.unlimited_since = None;
                self.cubic.w_est = self.cwnd as f64 / self.smss as f64;
            }
        }
    }

    /// After new data went out: whether the congestion window is what holds the sender
    /// back (its window full: no room for another full segment), and the most octets in
    /// flight, measured over a window of data as Linux's `tcp_cwnd_validate` does (a new
    /// measurement once what was sent at the last reset is acknowledged; a full window or
    /// a new high while not limited updates it at once).
    fn validate_cwnd(&mut self) {
        let flight = self.in_flight();
        let limited = flight.saturating_add(self.smss) > self.cwnd;
        let ended = self
            .usage_end
            .is_none_or(|u| self.segs.front().is_none_or(|s| s.start >= u));
        if ended || limited || (!self.cwnd_limited && flight > self.max_flight) {
            self.cwnd_limited = limited;
            self.max_flight = flight;
            self.usage_end = self.high;
        }
    }

    /// Whether the congestion window limits the sender, so that an ACK may grow it (RFC
    /// 7661's concern, RFC 9438 5.8: no growth while the application, the peer's window or
    /// the sender's own pace keeps the flight below it): the window was full at a
    /// transmission of the current measurement, or, in slow start, it is less than twice
    /// the most octets in flight (Linux's `tcp_is_cwnd_limited`). Without this a sender
    /// held back by anything but cwnd grew it by every octet acknowledged, without end (a
    /// bulk transfer over memif, held back by the receiver, had a cwnd of 190 MB after 50
    /// ms), and a loss then "reduced" it to 70 % of that: no congestion response at all.
    pub fn is_cwnd_limited(&self) -> bool {
        self.cwnd_limited || (self.cwnd < self.ssthresh && self.cwnd < 2 * self.max_flight)
    }

    fn grow(&mut self, now: Instant, acked: usize) {
        match self.cfg.congestion {
            Congestion::None => {}
            _ if !self.is_cwnd_limited() => {
                if self.cubic.epoch.is_some() {
                    self.cubic.unlimited_since.get_or_insert(now);
                }
            }
            _ if self.cwnd < self.ssthresh => {
                // Slow start (RFC 5681 3.1) by byte counting (RFC 3465) without its per-ACK
                // limit L, as Linux: every octet acknowledged grows cwnd, so a stretch ACK
                // (a batching receiver acknowledges a whole burst at once: ours, or a kernel
                // with GRO) still doubles cwnd per round trip instead of adding 2 SMSS. Up
                // to ssthresh only, the rest of the octets counted by congestion avoidance
                // (Linux's `tcp_slow_start`): the ACK that follows an RTO's first
                // retransmission often covers the whole flight the RTO found (only the first
                // segment was lost), and slow start by all of it put cwnd back above the
                // flight, undoing the RTO's reduction in one ACK.
                let inc = acked.min(self.ssthresh - self.cwnd);
                self.cwnd += inc;
                if acked > inc {
                    self.grow(now, acked - inc);
                }
            }
            Congestion::NewReno => {
                // Congestion avoidance: about one SMSS per RTT, by byte counting (RFC 3465
                // 2.1: SMSS * acked / cwnd, so that a stretch ACK counts for every segment).
                let inc = (self.smss * acked / self.cwnd.max(1)).max(1);
                self.cwnd += inc.min(acked);
            }
            Congestion::Cubic => {
                let smss = self.smss as f64;
                // Time the window did not limit the sender is not the epoch's (RFC 9438
                // 5.8): W_cubic(t) would otherwise have run ahead meanwhile, and the window
                // jump towards it once limited again.
                if let (Some(e), Some(since)) = (&mut self.cubic.epoch, self.cubic.unlimited_since)
                {
                    *e += now - since;
                    self.cubic.unlimited_since = None;
                }
                // An epoch starting without a reduction (after slow start) starts now.
                let epoch = *self.cubic.epoch.get_or_insert(now);
                if self.cubic.w_max == 0.0 {
                    self.cubic.w_max = self.cwnd as f64 / smss;
                    self.cubic.k = 0.0;
                    self.cubic.w_est = self.cubic.w_max;
                }
                let rtt = self.srtt.map_or(0.0, |d| d.total_micros() as f64 / 1e6);
                let t = (now - epoch).total_micros() as f64 / 1e6;
                let cur = self.cwnd as f64 / smss;
                let w_cubic = |t: f64| CUBIC_C * (t - self.cubic.k).powi(3) + self.cubic.w_max;
                // RFC 9438 4.2: W_cubic(t + RTT).
                let target = w_cubic(t + rtt);
                // RFC 9438 4.3: the Reno-friendly estimate, by alpha_cubic, which becomes 1
                // (Reno's one segment a round trip) once W_est has reached the window before
                // the last reduction (a SHOULD; Linux keeps alpha_cubic).
                let alpha = if self.cubic.w_est >= self.cubic.cwnd_prior {
                    1.0
                } else {
                    3.0 * (1.0 - CUBIC_BETA) / (1.0 + CUBIC_BETA)
                };
                self.cubic.w_est += alpha * (acked as f64 / smss) / cur.max(1.0);
                // In the Reno-friendly region when W_cubic(t), not the target a round
                // trip ahead, is below W_est (RFC 9438 4.3; Linux's `tcp_friendliness`
                // compares W_est with the window itself).
                let next = if self.cubic.w_est > w_cubic(t) {
                    self.cubic.w_est
                } else {
                    // 4.4/4.5: (target - cwnd) / cwnd per ACKed segment, capped at 1.5x.
                    let t = target.min(1.5 * cur);
                    cur + (t - cur).max(0.0) / cur.max(1.0) * (acked as f64 / smss)
                };
                if next > cur {
                    self.cwnd = (next * smss) as usize;
                }
            }
        }
    }

    /// Whether no segment is marked lost: [`Self::next_retransmit`] then returns `None`
    /// (a test without its search, for [`crate::conn::Connection`]'s quiet check).
    #[inline]
    pub fn none_lost(&self) -> bool {
        self.tally.lost == 0
    }

    /// The next lost range to resend if the congestion window allows (RFC 6675's rule of
    /// sending while pipe < cwnd, cwnd in a fast recovery episode PRR's pipe + sndcnt, RFC
    /// 9937 section 6: `prr_on_ack`); the first of an episode whatever the pipe.
    pub fn next_retransmit(&mut self) -> Option<(TcpSeqNumber, usize)> {
        if self.tally.lost == 0 {
            return None;
        }
        let flight = self.in_flight();
        #[cfg(test)]
        if REFERENCE_WALKS.with(std::cell::Cell::get) {
            return self.next_retransmit_reference(flight);
        }
        // The first entry awaiting its retransmission, searched from the hint (no entry
        // below it awaits one, `Marks::lost_hint`), not from the front: polled while
        // anything is lost, the search from the front passed over every entry below the
        // next hole, again for each retransmission (RFC 6675 5 (4.3): in recovery with
        // thousands of segments in flight, quadratic). Set to what it finds before the
        // window's check, so that a search the window holds back is not repeated.
        let from = self
            .marks
            .lost_hint
            .and_then(|h| self.walk_start(h, h))
            .unwrap_or(0);
        let awaits = |s: &Seg| {
            visited();
            s.awaits_retransmit()
        };
        let i = self
            .segs
            .range(from..)
            .position(awaits)
            .map(|p| from + p)
            .or_else(|| {
                debug_assert!(
                    from == 0,
                    "an entry awaiting its retransmission below the hint"
                );
                self.segs.iter().position(|s| s.awaits_retransmit())
            })?;
        let s = self.segs[i];
        self.marks.lost_hint = Some(s.start);
        // RFC 9293 3.8.6.1: while the peer's window is shut only the head (the first entry
        // not SACKed, at SND.UNA) goes again, a zero-window probe; the rest waits for the
        // window to open (Linux's `__tcp_retransmit_skb` refuses a segment past the
        // window's end but the one at SND.UNA). A peer that shrank its window to zero with
        // a flight outstanding got the whole flight at every expiry of the probe timer.
        // Test: `rfc9293_3_8_6_a_window_shrunk_to_zero_is_probed_with_one_segment`.
        if self.window_shut && !self.segs.range(..i).all(|e| e.sacked) {
            return None;
        }
        // RFC 6675 5 (4.3) and RFC 5681 3.2 step 2: the first retransmission of a recovery
        // episode goes out at once, whatever the pipe (the reduction may have left cwnd
        // below it); the rest wait for pipe < cwnd.
        if self.cfg.congestion != Congestion::None
            && flight + s.len() > self.cwnd
            && flight > 0
            && !self.retransmit_first
        {
            return None;
        }
        Some((s.start, s.len()))
    }

    /// New octets the congestion window allows now.
    pub fn send_allowance(&self) -> usize {
        match self.cfg.congestion {
            Congestion::None => usize::MAX,
            _ => self.cwnd.saturating_sub(self.in_flight()),
        }
    }

    /// The earliest timer: reorder, probe or retransmission.
    pub fn poll_timeout(&self) -> Option<Instant> {
        earliest_of([self.reorder_at, self.pto_at, self.rto_at])
    }

    /// Runs the timers due at `now` (see [`TimeoutAction`]).
    pub fn handle_timeout(&mut self, now: Instant) -> TimeoutAction {
        if self.segs.is_empty() {
            self.rto_at = None;
            self.pto_at = None;
            self.reorder_at = None;
            return TimeoutAction::None;
        }
        if self.window_shut && self.rto_at.is_some_and(|t| t <= now) {
            // Probing the shut window (`set_window_shut`): everything outstanding is to go
            // again, the head at once as the probe and the rest once the window opens
            // (`next_retransmit`), the timer backs off (RFC 6298 5.5) and the
            // consecutive-timeout count runs on (`peer_alive` restarts it when the peer
            // answers), apart from the RTOs' (`probe_backoffs`); the congestion state
            // stays as it was.
            self.stats.window_probe_timeouts += 1;
            self.probe_backoffs += 1;
            self.probe_rto.get_or_insert(self.rto);
            self.resend_all_and_back_off(now, false);
            return TimeoutAction::Retransmit;
        }
        if let Some(reo) = self.reorder_at {
            // RFC 8985 8: the reordering timer, the PTO and the RTO are mutually exclusive,
            // and "when arming a RACK reordering timer or TLP PTO timer, the sender SHOULD
            // cancel any other pending timers" (Linux's reordering timer takes the RTO
            // timer's place, commit 57dde7f70de3, and the RTO is armed again from its
            // expiry). Here the three run side by side: an RTO due while a reordering
            // window is open waits for it, and is restarted from the reordering timer's
            // expiry, when RACK has marked what it finds lost (below) and that goes out.
            // Without this, where RTTVAR had decayed on a steady path and the RTO came to
            // SRTT + its floor (5 ms) and min_RTT / 4 exceeded the floor, a flight's RTO
            // started with its first segment expired before RACK.rtt + min_RTT / 4 had passed for a
            // segment the network merely reordered: a spurious RTO where RACK would have
            // waited (a tie, the two due at once, goes to RACK too). The timer only moves
            // later while RACK has a segment to judge, which ends once its deadline has
            // passed; a cold path (a timer's expiry). Test:
            // `the_rto_waits_for_a_pending_reorder_timer`.
            if self.rto_at.is_some_and(|t| t <= now) {
                self.rto_at = Some(reo.max(now) + self.rto);
            }
        }
        if self.rto_at.is_some_and(|t| t <= now) {
            // RFC 6298 5.4-5.6 and RFC 5681 3.1; SACK information is discarded (RFC 2018 8:
            // the receiver may have reneged).
            self.stats.rto_count += 1;
            // The RTO's own undo (by timestamps) replaces an episode's.
            self.episode_undo = None;
            // The first of consecutive RTOs keeps the state to restore (the one before any
            // of them): an ACK echoing a transmission older than it undoes them all.
            if self.backoffs == 0 {
                self.undo = Some(Undo {
                    at: now,
                    cwnd: self.cwnd,
                    ssthresh: self.ssthresh,
                    cubic: self.cubic,
                    rto: self.rto,
                    recover: self.recover,
                    rto_recovery: self.rto_recovery,
                });
            }
            let first = self.backoffs == 0;
            // A run of RTOs outlives answers that acknowledge nothing (`peer_alive`).
            self.backoffs = self.backoffs.saturating_add(1);
            self.unanswered_rtos += 1;
            let flight = self.flight_size();
            if self.cfg.congestion != Congestion::None {
                // RFC 5681 (4): ssthresh = max(FlightSize / 2, 2 SMSS); CUBIC's with its
                // beta, 0.7, instead of 1/2 (RFC 9438 4.8, as 4.6).
                let beta = match self.cfg.congestion {
                    Congestion::Cubic => CUBIC_BETA,
                    _ => 0.5,
                };
                self.ssthresh = ((flight as f64 * beta) as usize).max(2 * self.smss);
                // RFC 9438 4.3's cwnd_prior: the window before the first of consecutive
                // RTOs (RFC 5681 3.1 holds ssthresh for the ones that follow, as `Undo`
                // keeps the state before the first); a repeated one, its cwnd one segment
                // already, reduces nothing.
                // Test: `rfc9438_4_3_a_repeated_rto_keeps_cwnd_prior`.
                if first {
                    self.cubic.cwnd_prior = self.cwnd as f64 / self.smss as f64;
                }
                self.cwnd = self.smss;
                // RFC 9438 4.8: the first congestion avoidance stage after an RTO has K = 0
                // and W_max = W_est = the cwnd at its start: `grow` sets them so when it
                // finds no W_max and no epoch (W_max was the flight at the RTO, so the
                // window "recovered" towards it at up to 1.5x per round trip).
                self.cubic.epoch = None;
                self.cubic.unlimited_since = None;
                self.cubic.w_max = 0.0;
                self.cubic.k = 0.0;
            }
            self.resend_all_and_back_off(now, true);
            self.recover = self.high;
            self.rto_recovery = true;
            // The duplicate ACKs so far said segments left the network before the RTO,
            // which now takes everything for lost: their count starts again (Linux's
            // `tcp_enter_loss` clears `sacked_out`; RFC 6582 4: the later ones start no fast
            // retransmit while below `recover`, see the third duplicate ACK above).
            self.dupacks = 0;
            self.dup_sacked = 0;
            self.retransmit_first = false;
            self.tlp_end = None;
            self.tlp_retrans_at = None;
            self.rack_xmit = None;
            // The SACK information is gone (above): what it delivered is no guide to
            // reordering any more.
            self.fack = None;
            return TimeoutAction::Retransmit;
        }
        if self.reorder_at.is_some_and(|t| t <= now) {
            self.reorder_at = None;
            if self.detect_loss(now) > 0 {
                // What it marked lost is no longer outstanding for the duplicate ACKs'
                // estimate (`limit_dup_sacked`).
                if self.dup_sacked > 0 {
                    self.limit_dup_sacked();
                }
                if self.recover.is_none() {
                    self.enter_recovery(0);
                }
            }
        }
        if self.pto_at.is_some_and(|t| t <= now) {
            self.pto_at = None;
            self.stats.tlp_count += 1;
            // RFC 8985 7.3: after attempting a loss probe, sent or not, the RTO timer is
            // re-armed (Linux's `tcp_rearm_rto` in `tcp_send_loss_probe`). Left where the
            // first transmission put it, it could fire a fraction of a round trip after
            // the probe (PTO 2 SRTT close to the RTO), before the probe's ACK: a
            // spurious timeout. Test: `rfc8985_7_3_the_rto_is_rearmed_after_a_loss_probe`.
            self.rto_at = Some(now + self.rto);
            return TimeoutAction::Probe;
        }
        TimeoutAction::None
    }

    /// What every expiry of the retransmission timer does: marks what is outstanding lost
    /// (to be sent again; with `forget_sacks` also what was SACKed, RFC 2018 8: the
    /// receiver may have reneged) and backs the timer off (RFC 6298 5.5-5.6), no probe or
    /// reordering timer running meanwhile.
    fn resend_all_and_back_off(&mut self, now: Instant, forget_sacks: bool) {
        let mut tally = Tally::default();
        if forget_sacks {
            self.sack_cached = 0;
        }
        // Every entry not SACKed awaits its retransmission: the walks start again at the
        // front, and RACK judges no retransmission until one is sent again.
        self.forget_marks();
        for s in self.segs.iter_mut() {
            if forget_sacks {
                s.sacked = false;
            }
            if !s.sacked {
                s.lost = true;
                s.retransmitted = false;
            }
            tally.add(s);
        }
        self.tally = tally;
        self.rto = (self.rto * 2).min(self.cfg.rto_max);
        self.rto_at = Some(now + self.rto);
        self.pto_at = None;
        self.reorder_at = None;
    }

    /// The last segment sent (for a probe with nothing new to send).
    pub fn last_segment(&self) -> Option<(TcpSeqNumber, usize)> {
        self.segs
            .iter()
            .rev()
            .find(|s| !s.sacked)
            .map(|s| (s.start, s.len()))
    }
}

/// `Option::is_none_or(|v| v <= x)`, spelled out for the crate's minimum Rust version.
trait NoneOrLe<T> {
    fn is_none_or_le(&self, x: T) -> bool;
}

impl<T: PartialOrd + Copy> NoneOrLe<T> for Option<T> {
    fn is_none_or_le(&self, x: T) -> bool {
        match self {
            None => true,
            Some(v) => *v <= x,
        }
    }
}

/// The earliest of `N` deadlines (`None`: none), as `flatten().min()` would give it, without
/// a branch per deadline: each is a key of microseconds (`i64::MAX` for none) and the least
/// key wins. Every connection's deadline is recomputed after each of its segments. (A
/// deadline at `i64::MAX` microseconds, some 292,000 years after the clock's start, would
/// read as none: no connection arms one.)
#[inline(always)]
pub(crate) fn earliest_of<const N: usize>(d: [Option<Instant>; N]) -> Option<Instant> {
    let mut m = i64::MAX;
    for t in d {
        m = m.min(t.map_or(i64::MAX, |t| t.total_micros()));
    }
    (m != i64::MAX).then(|| Instant::from_micros(m))
}

#[cfg(test)]
mod tests;
