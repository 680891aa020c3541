//! The measurement loops: one phase (one message size) of a latency or bandwidth test, for
//! the client (which drives) and the server (which answers).

use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use warpcore_verbs::{Completion, SendOp, SendWr, WcOpcode, WcStatus};

use crate::cli::{Defect, DEFECT_MSG};
use crate::report::{rtt_factor, PeakMeter, SampleWindow, PEAK_WINDOW};
use crate::run::{Conn, Mismatch, Recv, Spin, ValueKind};
use crate::wire::{self, Ctrl, Kind, CLIENT_SALT, SERVER_SALT};

/// How long a phase runs.
#[derive(Debug, Clone, Copy)]
pub struct Phase {
    /// Message size.
    pub size: u64,
    /// Iterations (per QP for bandwidth tests); ignored with a duration.
    pub iters: u64,
    /// Run for this long instead.
    pub duration: Option<Duration>,
    /// -D: perftest's margin at each end of the timed run ([`crate::report::perftest_margin`]);
    /// the bandwidth figures count only what completed between the margins. Zero: the
    /// whole run (runs by iterations, --run_infinitely, and runs shorter than 4 s).
    pub margin: Duration,
    /// Give up after this long without progress.
    pub stall: Duration,
    /// Print a progress line every second.
    pub progress: bool,
    /// Keep each second's histogram for `--hdr-log` ([`Outcome::intervals`]).
    pub hdr_log: bool,
    /// perftest's -Q: one signalled request in this many (bandwidth tests; 1: all).
    pub cq_mod: u64,
    /// perftest's -l: requests posted per post_send_list (bandwidth tests; 1: one by one).
    pub post_list: u64,
}

/// One histogram interval for `--hdr-log`.
#[derive(Debug)]
pub struct Interval {
    /// Start, relative to the phase start.
    pub start: Duration,
    /// Length.
    pub len: Duration,
    /// Samples of the interval (ns).
    pub hist: Histogram<u64>,
}

/// What a phase measured.
#[derive(Debug)]
pub struct Outcome {
    /// Message size.
    pub size: u64,
    /// Iterations done (latency) or messages completed by us (bandwidth).
    pub iters: u64,
    /// Latency samples in ns (latency tests), in order: each iteration's full interval
    /// from post to the answer (the statistics divide by perftest's `rtt_factor`).
    pub samples: Vec<u64>,
    /// The whole phase's histogram (ns): latency samples, or post-to-completion times.
    pub hist: Histogram<u64>,
    /// Per-second intervals.
    pub intervals: Vec<Interval>,
    /// Bytes we moved (bandwidth tests).
    pub bytes: u64,
    /// Seconds from the first post to the last completion.
    pub secs: f64,
    /// Peak bytes per second: the best window of at least 10 ms ([`PeakMeter`]); `None`
    /// when the phase closed no window.
    pub peak_bps: Option<f64>,
    /// The peer's figures (bidirectional): bytes, seconds, peak, messages.
    pub peer: Option<(u64, f64, Option<f64>, u64)>,
    /// Messages verified (both sides) and mismatches found.
    pub verified: u64,
    /// Mismatches.
    pub errors: u64,
    /// The first mismatch (ours, else the one the server reported).
    pub first_error: Option<Mismatch>,
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("histogram bounds")
}

struct Rec {
    hist: Histogram<u64>,
    interval: Histogram<u64>,
    t0: Instant,
    istart: Instant,
    intervals: Vec<Interval>,
    /// Keep the closed intervals (`--hdr-log`).
    keep: bool,
}

impl Rec {
    /// A recorder that keeps no per-second histograms (no `--hdr-log`).
    #[cfg(test)]
    fn new() -> Rec {
        Rec::keeping_intervals(false)
    }
    /// A recorder; with `keep` (`--hdr-log`) it keeps each closed second's histogram. Each
    /// is a full-range histogram of ~270 KB, so without a log to write them to they are
    /// only added to the phase's histogram and dropped (a long -D or --run_infinitely
    /// would otherwise hold gigabytes of them).
    fn keeping_intervals(keep: bool) -> Rec {
        let now = Instant::now();
        Rec {
            hist: hist(),
            interval: hist(),
            t0: now,
            istart: now,
            intervals: Vec::new(),
            keep,
        }
    }
    /// One sample, into the current interval only: [`Self::tick_at`] adds each closed
    /// interval to the whole phase's histogram (once a second, and at the end), so a
    /// bandwidth test's completion pays one histogram record, not two (`perf` of the 64 B
    /// write_bw sender: the two records were ~4 % of the process).
    /// A sample beyond the histogram's hour (a stall under a longer --timeout) counts as
    /// an hour rather than vanishing from the count and the percentiles.
    fn record(&mut self, ns: u64) {
        self.interval.saturating_record(ns.max(1));
    }
    /// `n` samples of one value, as `n` [`Self::record`]s.
    fn record_n(&mut self, ns: u64, n: u64) {
        self.interval.saturating_record_n(ns.max(1), n);
    }
    /// Closes the interval once a second (or at the end, `force`), adding it to the
    /// phase's histogram; returns whether it did. `hist` holds every sample only after a
    /// forced tick.
    fn tick(&mut self, force: bool) -> bool {
        self.tick_at(Instant::now(), force)
    }
    /// [`Self::tick`] at a time the caller already read.
    fn tick_at(&mut self, now: Instant, force: bool) -> bool {
        if !force && now - self.istart < Duration::from_secs(1) {
            return false;
        }
        if !self.keep {
            // Same bounds and precision: the addition cannot fail.
            let _ = self.hist.add(&self.interval);
            self.interval.reset();
            self.istart = now;
            return true;
        }
        let h = std::mem::replace(&mut self.interval, hist());
        if !h.is_empty() {
            // Same bounds and precision: the addition cannot fail.
            let _ = self.hist.add(&h);
            self.intervals.push(Interval {
                start: self.istart - self.t0,
                len: now - self.istart,
                hist: h,
            });
        }
        self.istart = now;
        true
    }
}

fn progress(size: u64, t0: Instant, what: &str) {
    use std::io::IsTerminal;
    let line = format!(
        "[iwperf] {size} B: {:6.1} s  {what}",
        t0.elapsed().as_secs_f64()
    );
    if std::io::stderr().is_terminal() {
        eprint!("\r{line}\x1b[K");
    } else {
        eprintln!("{line}");
    }
}

fn end_progress(on: bool) {
    use std::io::IsTerminal;
    if on && std::io::stderr().is_terminal() {
        eprintln!();
    }
}

/// Whether a post refused with a full queue may be tried again: the stall limit counts
/// from the first refusal. The clock is read only then, not on a latency test's path.
fn retry_full(since: &mut Option<Instant>, stall: Duration) -> bool {
    since.get_or_insert_with(Instant::now).elapsed() < stall
}

fn post(c: &mut Conn, wr: &SendWr, stall: Duration) -> Result<(), String> {
    let mut since = None;
    let mut spin = Spin::default();
    loop {
        match c.qp.post_send(wr) {
            Ok(()) => return Ok(()),
            Err(warpcore_verbs::Error::QueueFull) if retry_full(&mut since, stall) => spin.pause(),
            Err(e) => return Err(format!("post: {e}")),
        }
    }
}

/// Posts data message `wr_id` (`len` octets at `off` of our source region, already staged)
/// with `op`: inline (copied at post time, always signalled) when the layout says so,
/// otherwise from the registered source.
fn try_post_data(
    c: &mut Conn,
    wr_id: u64,
    op: SendOp,
    off: u64,
    len: u64,
    signaled: bool,
) -> Result<(), warpcore_verbs::Error> {
    if c.layout().inline(len) {
        let mut buf = std::mem::take(&mut c.scratch);
        buf.resize(len as usize, 0);
        let r = c
            .src
            .read(off as usize, &mut buf)
            .and_then(|()| c.qp.post_send_inline(wr_id, op, &buf));
        c.scratch = buf;
        r
    } else {
        let wr = SendWr::new(wr_id, op, &[c.src.sge(off, len as u32)])?;
        c.qp.post_send(&if signaled { wr } else { wr.unsignaled() })
    }
}

/// A latency test's data message: posted unsignalled (waiting while the send queue is
/// full); an inline post's completion is taken at once.
fn post_data(c: &mut Conn, i: u64, op: SendOp, len: u64, stall: Duration) -> Result<(), String> {
    let mut since = None;
    let mut spin = Spin::default();
    loop {
        match try_post_data(c, i, op, 0, len, false) {
            Ok(()) => break,
            Err(warpcore_verbs::Error::QueueFull) if retry_full(&mut since, stall) => {
                c.drain_send()?;
                spin.pause()
            }
            Err(e) => return Err(format!("post: {e}")),
        }
    }
    if c.layout().inline(len) {
        c.drain_send()?;
    }
    Ok(())
}

/// The atomic of iteration `i` on the peer's counter word (offset 0 of its data region):
/// FetchAdd 1, or CmpSwap of the value the counter must hold now with its successor, so
/// that every atomic returns (and a CmpSwap succeeds on) `atomics + i`.
fn atomic_op(c: &Conn, i: u64) -> SendOp {
    let want = c.atomics + i;
    if c.layout().opts.cmp_swap {
        SendOp::AtomicCmpSwap {
            remote_stag: c.peer.data_stag,
            remote_to: 0,
            compare: want,
            compare_mask: u64::MAX,
            swap: want + 1,
            swap_mask: u64::MAX,
        }
    } else {
        SendOp::AtomicFetchAdd {
            remote_stag: c.peer.data_stag,
            remote_to: 0,
            add: 1,
            add_mask: 0,
        }
    }
}

/// Checks atomic `i`'s original value, in its completion and in its 8-octet sink at `off`
/// of our source region (host order).
fn check_atomic(c: &mut Conn, i: u64, wc: &Completion, off: u64) -> Result<(), String> {
    let want = c.atomics + i;
    c.check_value(
        i,
        ValueKind::AtomicOrig,
        wc.atomic_orig.unwrap_or(u64::MAX),
        want,
    );
    let mut b = [0u8; 8];
    c.src
        .read(off as usize, &mut b)
        .map_err(|e| e.to_string())?;
    c.check_value(i, ValueKind::AtomicSink, u64::from_ne_bytes(b), want);
    Ok(())
}

/// Server: the counter word after the peer's `n` atomics of this phase.
fn check_counter(c: &mut Conn, n: u64) -> Result<(), String> {
    let want = c.atomics + n;
    let got = c
        .data
        .atomic_u64(0)
        .map_err(|e| e.to_string())?
        .load(std::sync::atomic::Ordering::Acquire);
    c.check_value(n, ValueKind::Counter, got, want);
    c.atomics = want;
    Ok(())
}

/// Checks a data message that carries no tag (send tests, Writes with Immediate Data)
/// against the sender's pattern.
fn verify_plain(c: &mut Conn, size: u64, salt: u64, i: u64) -> Result<(), String> {
    let s = size as usize;
    let mut got = vec![0u8; s];
    let mut want = vec![0u8; s];
    wire::fill(&mut want, salt, i);
    c.data.read(0, &mut got).map_err(|e| e.to_string())?;
    c.check(i, &got, &want);
    Ok(())
}

fn done(i: u64, t0: Instant, ph: &Phase) -> bool {
    done_at(i, t0, Instant::now(), ph)
}

/// [`done`] at a time the caller already read (the bandwidth loop reads the clock once a
/// round, not once per question).
fn done_at(i: u64, t0: Instant, now: Instant, ph: &Phase) -> bool {
    match ph.duration {
        Some(d) => now - t0 >= d,
        None => i >= ph.iters,
    }
}

fn start_phase(conns: &mut [Conn], ph: &Phase, client: bool) -> Result<(), String> {
    // write_lat detects arrival by the last octet: clear it first.
    for c in conns.iter_mut() {
        c.begin_phase(ph.size);
        if c.layout().test == crate::cli::TestName::WriteLat {
            c.data
                .write(ph.size as usize - 1, &[0])
                .map_err(|e| e.to_string())?;
        }
    }
    if client {
        let mut s = Ctrl::new(Kind::Start, ph.size, ph.iters);
        s.duration_ns = ph.duration.map(|d| d.as_nanos() as u64).unwrap_or(0);
        // The margin, for the server's own figures with -b (0 from older clients: none).
        s.v0 = ph.margin.as_nanos() as u64;
        conns[0].send_ctrl(s, ph.stall)?;
        let r = conns[0].wait_ctrl(ph.stall)?;
        if r.kind != Kind::Ready {
            return Err(format!("expected Ready from the server, got {:?}", r.kind));
        }
    }
    Ok(())
}

fn outcome(size: u64, rec: Rec) -> Outcome {
    Outcome {
        size,
        iters: 0,
        samples: Vec::new(),
        hist: rec.hist,
        intervals: rec.intervals,
        bytes: 0,
        secs: 0.0,
        peak_bps: None,
        peer: None,
        verified: 0,
        errors: 0,
        first_error: None,
    }
}

fn poll_mem(c: &Conn, off: usize, want: u8) -> Result<bool, String> {
    let mut b = [0u8; 1];
    c.data.read(off, &mut b).map_err(|e| e.to_string())?;
    Ok(b[0] == want)
}

/// Writes message `i` into our source region: its pattern under `--verify` (with octet
/// `flip` inverted afterwards when `--inject-defect corrupt-octet` targets it), and the tag
/// octet of write_lat.
fn stage(
    c: &Conn,
    size: u64,
    salt: u64,
    i: u64,
    verify: bool,
    tagged: bool,
    flip: Option<u64>,
) -> Result<(), String> {
    let s = size as usize;
    if verify {
        let mut buf = vec![0u8; s];
        wire::fill(&mut buf, salt, i);
        if tagged {
            buf[s - 1] = wire::tag(i);
        }
        if let Some(at) = flip {
            buf[at as usize] ^= 0xff;
        }
        c.src.write(0, &buf).map_err(|e| e.to_string())
    } else if tagged {
        c.src
            .write(s - 1, &[wire::tag(i)])
            .map_err(|e| e.to_string())
    } else {
        Ok(())
    }
}

fn verify_tagged(c: &mut Conn, size: u64, salt: u64, i: u64) -> Result<(), String> {
    let s = size as usize;
    let mut got = vec![0u8; s];
    let mut want = vec![0u8; s];
    wire::fill(&mut want, salt, i);
    want[s - 1] = wire::tag(i);
    // The tag octet can become visible while the engine is still copying the rest of the
    // last segment (memcpy does not store in address order), so a mismatch is read again
    // for a moment before it counts: placement finishes within microseconds.
    let t0 = Instant::now();
    loop {
        c.data.read(0, &mut got).map_err(|e| e.to_string())?;
        if got == want || t0.elapsed() > Duration::from_millis(20) {
            break;
        }
        std::thread::yield_now();
    }
    c.check(i, &got, &want);
    Ok(())
}

/// Client side of one latency phase (`write_lat`, `read_lat`, `send_lat`) on QP 0.
pub fn client_lat(
    conns: &mut [Conn],
    test: crate::cli::TestName,
    ph: &Phase,
    verify: bool,
    static_server: &[u8],
    defect: Option<Defect>,
) -> Result<Outcome, String> {
    use crate::cli::TestName as T;
    start_phase(conns, ph, true)?;
    let c = &mut conns[0];
    let size = ph.size;
    let s = size as usize;
    // Samples hold full intervals; the histogram holds what the table prints (half the
    // round trip of the ping-pong tests, as perftest).
    let rtt = rtt_factor(test);
    let flip = |i: u64| {
        (defect == Some(Defect::CorruptOctet) && i == DEFECT_MSG).then(|| Defect::octet(size))
    };
    let send_len = |i: u64| {
        if defect == Some(Defect::ShortSend) && i == DEFECT_MSG {
            size - 1
        } else {
            size
        }
    };
    let mut rec = Rec::keeping_intervals(ph.hdr_log);
    // A run by iterations keeps every sample for perftest's statistics (sorted, the two
    // largest dropped); a run by time keeps none (8 octets a round trip: ~20 GB an hour at
    // 1.5 us) and its row comes from the histogram (`report::lat_stats_of_hist`).
    let keep_samples = ph.duration.is_none();
    let mut samples = Vec::with_capacity(if keep_samples {
        ph.iters.min(10_000_000) as usize
    } else {
        0
    });
    let sample = |samples: &mut Vec<u64>, rec: &mut Rec, ns: u64| {
        if keep_samples {
            samples.push(ns);
        }
        rec.record(ns / rtt);
    };
    let t_start = Instant::now();
    let mut i = 0u64;
    let mut spin = Spin::default();
    while !done(i, t_start, ph) {
        let t0;
        match test {
            T::WriteLat if c.layout().opts.imm => {
                stage(c, size, CLIENT_SALT, i, verify, false, flip(i))?;
                let op = SendOp::WriteWithImm {
                    remote_stag: c.peer.data_stag,
                    remote_to: 0,
                    imm: i,
                    solicited: false,
                };
                t0 = Instant::now();
                post_data(c, i, op, size, ph.stall)?;
                note_sent(c);
                wait_data(c, t0, ph.stall, &mut spin)?;
                let ns = t0.elapsed().as_nanos() as u64;
                sample(&mut samples, &mut rec, ns);
                if verify {
                    verify_plain(c, size, SERVER_SALT, i)?;
                }
            }
            T::WriteLat => {
                stage(c, size, CLIENT_SALT, i, verify, true, flip(i))?;
                let op = SendOp::Write {
                    remote_stag: c.peer.data_stag,
                    remote_to: 0,
                };
                t0 = Instant::now();
                post_data(c, i, op, size, ph.stall)?;
                let (mut n, tag) = (0, wire::tag(i));
                // The engine's loops run under one hold of the core until the answer's
                // last octet lands (an error reading it ends the wait; the test below
                // reports it).
                while !poll_mem(c, s - 1, tag)? {
                    check_stall_sometimes(c, t0, ph.stall, &mut n)?;
                    spin.wait_until(|| poll_mem(c, s - 1, tag).unwrap_or(true));
                }
                let ns = t0.elapsed().as_nanos() as u64;
                sample(&mut samples, &mut rec, ns);
                if verify {
                    verify_tagged(c, size, SERVER_SALT, i)?;
                }
            }
            T::AtomicLat => {
                let wr = SendWr::new(i, atomic_op(c, i), &[c.src.sge(0, 8)])
                    .map_err(|e| e.to_string())?;
                t0 = Instant::now();
                post(c, &wr, ph.stall)?;
                let wc = wait_send(c, t0, ph.stall, &mut spin)?;
                let ns = t0.elapsed().as_nanos() as u64;
                sample(&mut samples, &mut rec, ns);
                if verify {
                    check_atomic(c, i, &wc, 0)?;
                }
            }
            T::ReadLat => {
                let ro = (i % 64) * 64;
                let wr = SendWr::new(
                    i,
                    SendOp::Read {
                        remote_stag: c.peer.data_stag,
                        remote_to: ro,
                    },
                    &[c.src.sge(0, s as u32)],
                )
                .map_err(|e| e.to_string())?;
                t0 = Instant::now();
                post(c, &wr, ph.stall)?;
                let wc = wait_send(c, t0, ph.stall, &mut spin)?;
                if wc.opcode != WcOpcode::Read {
                    return Err(format!("unexpected completion {:?}", wc.opcode));
                }
                let ns = t0.elapsed().as_nanos() as u64;
                sample(&mut samples, &mut rec, ns);
                if verify {
                    let mut got = vec![0u8; s];
                    c.src.read(0, &mut got).map_err(|e| e.to_string())?;
                    let r = ro as usize;
                    c.check(i, &got, &static_server[r..r + s]);
                }
            }
            T::SendLat => {
                stage(c, size, CLIENT_SALT, i, verify, false, flip(i))?;
                t0 = Instant::now();
                post_data(c, i, SendOp::Send, send_len(i), ph.stall)?;
                note_sent(c);
                wait_data(c, t0, ph.stall, &mut spin)?;
                let ns = t0.elapsed().as_nanos() as u64;
                sample(&mut samples, &mut rec, ns);
            }
            _ => unreachable!("latency tests only"),
        }
        spin.reset();
        i += 1;
        if rec.tick(false) && ph.progress {
            let p50 = rec.hist.value_at_quantile(0.5) as f64 / 1000.0;
            progress(size, t_start, &format!("{i} iterations, p50 {p50:.2} us"));
        }
    }
    end_progress(ph.progress);
    rec.tick(true);
    let secs = t_start.elapsed().as_secs_f64();
    let mut d = Ctrl::new(Kind::Done, size, i);
    d.v0 = (secs * 1e9) as u64;
    c.send_ctrl(d, ph.stall)?;
    let (r, peer_first) = wait_result(c, None, ph.stall)?;
    let mut o = outcome(size, rec);
    o.iters = i;
    o.samples = samples;
    o.secs = secs;
    o.verified = c.verified + r.v3;
    o.errors = c.errors + r.v0;
    o.first_error = c.first_error.take().or(peer_first);
    c.reset_counts();
    if test == T::AtomicLat {
        c.atomics += i;
    }
    Ok(o)
}

/// Client: the server's `Result` of a phase (`early` if it came already), and the first
/// mismatch it reported in a `Mismatch` before it.
fn wait_result(
    c: &mut Conn,
    early: Option<(Ctrl, Option<Mismatch>)>,
    stall: Duration,
) -> Result<(Ctrl, Option<Mismatch>), String> {
    if let Some(e) = early {
        return Ok(e);
    }
    let mut first = None;
    loop {
        let r = c.wait_ctrl(stall)?;
        match r.kind {
            Kind::Result => return Ok((r, first)),
            Kind::Mismatch => {
                let m =
                    Mismatch::from_ctrl(&r).ok_or("malformed Mismatch report from the server")?;
                first.get_or_insert(m);
            }
            k => return Err(format!("expected Result from the server, got {k:?}")),
        }
    }
}

/// Server: reports the phase's first mismatch (if any) to the client before its Result.
fn report_mismatch(c: &mut Conn, m: Option<Mismatch>, stall: Duration) -> Result<(), String> {
    match m {
        Some(m) => c.send_ctrl(m.to_ctrl(), stall),
        None => Ok(()),
    }
}

/// Waits for the peer's next data message (a Send, or a Write's immediate data).
fn wait_data(c: &mut Conn, t0: Instant, stall: Duration, spin: &mut Spin) -> Result<(), String> {
    let mut n = 0;
    loop {
        // Caller-driven, an empty receive queue poll runs the engine itself.
        match c.poll_recv()? {
            Some(Recv::Data | Recv::Imm(_)) => return Ok(()),
            Some(Recv::Ctrl(x)) => return Err(format!("unexpected control message {:?}", x.kind)),
            None => {
                check_stall_sometimes(c, t0, stall, &mut n)?;
                spin.pause()
            }
        }
    }
}

fn note_sent(c: &mut Conn) {
    c.note_data_sent();
}

/// [`check_stall`] once every 256 calls: each check reads the clock and polls the send
/// queue (which, caller-driven, runs the engine once more), and a waiting loop spins
/// millions of times.
fn check_stall_sometimes(
    c: &Conn,
    t0: Instant,
    stall: Duration,
    n: &mut u32,
) -> Result<(), String> {
    *n = n.wrapping_add(1);
    if (*n).is_multiple_of(256) {
        check_stall(c, t0, stall)?;
    }
    Ok(())
}

fn check_stall(c: &Conn, t0: Instant, stall: Duration) -> Result<(), String> {
    if let Some(wc) = c.poll_send_error() {
        return Err(wc);
    }
    if t0.elapsed() > stall {
        return Err(format!(
            "no answer from the peer for {} s (did it exit?)",
            stall.as_secs()
        ));
    }
    Ok(())
}

fn wait_send(
    c: &Conn,
    t0: Instant,
    stall: Duration,
    spin: &mut Spin,
) -> Result<Completion, String> {
    let mut n = 0u32;
    loop {
        if let Some(wc) = c.poll_send() {
            if wc.status != WcStatus::Success {
                return Err(format!("{:?} completed with {:?}", wc.opcode, wc.status));
            }
            return Ok(wc);
        }
        n = n.wrapping_add(1);
        if n.is_multiple_of(256) && t0.elapsed() > stall {
            return Err(format!("no completion for {} s", stall.as_secs()));
        }
        spin.pause();
    }
}

/// Server side of a latency test: answers phases until the client disconnects.
pub fn server_lat(
    conns: &mut [Conn],
    test: crate::cli::TestName,
    verify: bool,
) -> Result<u64, String> {
    use crate::cli::TestName as T;
    let mut phases = 0;
    loop {
        let c = &mut conns[0];
        let start = match c.wait_ctrl(Duration::from_secs(24 * 3600)) {
            Ok(x) if x.kind == Kind::Bye => return Ok(phases),
            Ok(x) => x,
            Err(e) if e.contains("closed") => return Ok(phases),
            Err(e) => return Err(e),
        };
        if start.kind != Kind::Start {
            return Err(format!("expected Start, got {:?}", start.kind));
        }
        conns[0].layout().check_start_size(start.size)?;
        let size = start.size;
        let s = size as usize;
        let ph = Phase {
            cq_mod: 1,
            post_list: 1,
            size,
            iters: start.iters,
            duration: None,
            margin: Duration::ZERO,
            stall: Duration::from_secs(60),
            progress: false,
            hdr_log: false,
        };
        start_phase(conns, &ph, false)?;
        let c = &mut conns[0];
        c.send_ctrl(Ctrl::new(Kind::Ready, size, 0), ph.stall)?;
        let mut i = 0u64;
        let mut spin = Spin::default();
        let imm = c.layout().opts.imm;
        let mut idle = 0u32;
        let (v0, v1) = (c.errors, c.verified);
        // This phase's first mismatch is reported to the client; the run's first stays.
        let prior = c.first_error.take();
        // write_lat answers each Write as it lands: like the client (and perftest's server,
        // which spins on its buffer alone) this loop looks at the buffer after every engine
        // loop (`Spin::wait_until`, up to 32 loops a pass). Only the phase's closing Done
        // comes to the receive queue, looked at every 64th idle pass: a caller-driven
        // completion poll runs an engine loop of its own, and a Write placed by that loop
        // would wait for one more before its answer.
        let spin_mem = test == T::WriteLat && !imm;
        loop {
            if spin_mem && poll_mem(c, s - 1, wire::tag(i))? {
                if verify {
                    verify_tagged(c, size, CLIENT_SALT, i)?;
                }
                stage(c, size, SERVER_SALT, i, verify, true, None)?;
                let op = SendOp::Write {
                    remote_stag: c.peer.data_stag,
                    remote_to: 0,
                };
                post_data(c, i, op, size, ph.stall)?;
                i += 1;
                spin.reset();
                continue;
            }
            if spin_mem {
                idle = idle.wrapping_add(1);
                if !idle.is_multiple_of(64) {
                    let tag = wire::tag(i);
                    spin.wait_until(|| poll_mem(c, s - 1, tag).unwrap_or(true));
                    continue;
                }
            }
            match c.poll_recv()? {
                Some(Recv::Data) => {
                    // send_lat: answer with our message i.
                    stage(c, size, SERVER_SALT, i, verify, false, None)?;
                    post_data(c, i, SendOp::Send, size, ph.stall)?;
                    c.note_data_sent();
                    i += 1;
                    spin.reset();
                }
                Some(Recv::Imm(k)) => {
                    // write_lat with immediate data: the Write is placed; answer in kind.
                    if verify {
                        verify_plain(c, size, CLIENT_SALT, k)?;
                    }
                    stage(c, size, SERVER_SALT, i, verify, false, None)?;
                    let op = SendOp::WriteWithImm {
                        remote_stag: c.peer.data_stag,
                        remote_to: 0,
                        imm: i,
                        solicited: false,
                    };
                    post_data(c, i, op, size, ph.stall)?;
                    c.note_data_sent();
                    i += 1;
                    spin.reset();
                }
                Some(Recv::Ctrl(x)) if x.kind == Kind::Done => {
                    if test == T::AtomicLat {
                        i = x.iters;
                        if verify {
                            check_counter(c, x.iters)?;
                        } else {
                            c.atomics += x.iters;
                        }
                    }
                    break;
                }
                Some(Recv::Ctrl(x)) => return Err(format!("unexpected {:?}", x.kind)),
                None => {
                    if !spin_mem {
                        idle = idle.wrapping_add(1);
                    }
                    if idle.is_multiple_of(256) {
                        if let Some(e) = c.poll_send_error() {
                            return Err(e);
                        }
                    }
                    spin.pause()
                }
            }
        }
        let this = c.first_error;
        report_mismatch(c, this, ph.stall)?;
        c.first_error = prior.or(this);
        let mut r = Ctrl::new(Kind::Result, size, i);
        r.v0 = c.errors - v0;
        r.v3 = c.verified - v1;
        c.send_ctrl(r, ph.stall)?;
        phases += 1;
    }
}

/// The server's `Result` peak when it measured none.
const NO_PEAK: u64 = u64::MAX;

/// Send completions taken per poll in the bandwidth loop (perftest's `CTX_POLL_BATCH`).
const POLL_BATCH: usize = 16;

/// What the completion batch holds before a poll fills it (never read).
const NO_COMPLETION: Completion = Completion {
    wr_id: 0,
    qp: warpcore_verbs::QpId {
        core: 0,
        index: 0,
        generation: 0,
    },
    opcode: WcOpcode::Write,
    status: WcStatus::Success,
    byte_len: 0,
    solicited: false,
    invalidated: None,
    imm: None,
    atomic_orig: None,
};

/// Per-QP sender state of a bandwidth phase.
#[derive(Debug, Default)]
struct Tx {
    posted: u64,
    completed: u64,
    done_sent: bool,
    peer_done: Option<u64>,
    times: Vec<Option<Instant>>,
}

/// One bandwidth phase on either side. `sending`: we post data (client always, server
/// with `-b`); the peer's `Done` on every QP ends our receiving part.
#[allow(clippy::too_many_arguments)]
pub fn bw_phase(
    conns: &mut [Conn],
    test: crate::cli::TestName,
    ph: &Phase,
    client: bool,
    sending: bool,
    peer_sending: bool,
    verify: bool,
    static_peer: &[u8],
    defect: Option<Defect>,
) -> Result<Outcome, String> {
    use crate::cli::TestName as T;
    start_phase(conns, ph, client)?;
    if !client {
        conns[0].send_ctrl(Ctrl::new(Kind::Ready, ph.size, 0), ph.stall)?;
    }
    let size = ph.size;
    let s = size as usize;
    let (salt, _peer_salt) = if client {
        (CLIENT_SALT, SERVER_SALT)
    } else {
        (SERVER_SALT, CLIENT_SALT)
    };
    let slots = conns[0].layout().slots(size);
    let mut window = conns[0].layout().tx_depth.min(slots).max(1);
    if test == T::ReadBw || test == T::AtomicBw {
        window = window.min(u64::from(conns[0].est.as_ref().map(|e| e.ord).unwrap_or(1)).max(1));
    }
    // -Q and -l never exceed what the window holds (else nothing signalled would fit).
    let cqm = ph.cq_mod.clamp(1, window);
    let pl = ph.post_list.clamp(1, window);
    // -l's list, allocated once for the phase and refilled each round.
    let mut batch: Vec<SendWr> = Vec::with_capacity(if pl > 1 { pl as usize } else { 0 });
    // --verify: each message's pattern is built here, allocated once for the phase (a
    // fresh zeroed buffer per message was two more passes over it on the sending core).
    let mut pattern_buf: Vec<u8> = Vec::new();
    // --inject-defect (client, QP 0 only): the message it spoils.
    let defect_at = defect.map(|d| (d, Defect::message(test, ph.iters, slots)));
    let mut tx: Vec<Tx> = conns
        .iter()
        .map(|_| Tx {
            times: vec![None; window as usize],
            done_sent: !sending,
            ..Tx::default()
        })
        .collect();
    let mut rec = Rec::keeping_intervals(ph.hdr_log);
    let t_start = Instant::now();
    let mut last_progress = Instant::now();
    let mut meter = PeakMeter::new(PEAK_WINDOW);
    let mut sample = SampleWindow::new(ph.duration, ph.margin);
    let mut bytes = 0u64;
    let mut t_last = t_start;
    let mut spin = Spin::default();
    let mut last_work = Instant::now();
    let mut stop = false;
    let mut early: Option<(Ctrl, Option<Mismatch>)> = None;
    let mut peer_first: Option<Mismatch> = None;
    let mut wcs = [NO_COMPLETION; POLL_BATCH];
    loop {
        let mut work = false;
        // One clock read for this round's posts, one (at the first) for its completions:
        // per-message reads cost more than the engine's work on a 64 B message.
        let round = Instant::now();
        let mut completed_at: Option<Instant> = None;
        // The posting round of the requests completed last and how many of them in a row:
        // every completion of this round has the round's one time (`completed_at`), so the
        // requests of one posting round all have one latency, recorded once, when the
        // posting round changes or this round ends (hdrhistogram's record per completion
        // was ~3 % of the 64 B write_bw sender).
        let mut same: Option<(Instant, u64)> = None;
        let posted_min = tx.iter().map(|t| t.posted).min().unwrap_or(0);
        if sending && !stop && done_at(posted_min, t_start, round, ph) {
            stop = true;
        }
        for (qi, c) in conns.iter_mut().enumerate() {
            let t = &mut tx[qi];
            if sending && !t.done_sent {
                // With -Q, a duration run stops at a signalled request, so that the last
                // one posted completes.
                batch.clear();
                loop {
                    let next = t.posted + batch.len() as u64;
                    let go = (!stop || !next.is_multiple_of(cqm))
                        && next - t.completed < window
                        && (!c.layout().credits() || c.credits_left() > batch.len() as u64)
                        && (ph.duration.is_some() || next < ph.iters);
                    if !go {
                        break;
                    }
                    let i = next;
                    let slot = (i % slots) * size;
                    let op = match test {
                        T::WriteBw if c.layout().opts.imm => SendOp::WriteWithImm {
                            remote_stag: c.peer.data_stag,
                            remote_to: slot,
                            imm: i,
                            solicited: false,
                        },
                        T::WriteBw => SendOp::Write {
                            remote_stag: c.peer.data_stag,
                            remote_to: slot,
                        },
                        T::ReadBw => SendOp::Read {
                            remote_stag: c.peer.data_stag,
                            remote_to: c.layout().read_offset(size, i),
                        },
                        T::AtomicBw => atomic_op(c, i),
                        _ => SendOp::Send,
                    };
                    let spoil = defect_at.filter(|&(_, m)| qi == 0 && m == i).map(|d| d.0);
                    if verify && (test == T::WriteBw || test == T::SendBw) {
                        pattern_buf.resize(s, 0);
                        let buf = &mut pattern_buf[..s];
                        wire::fill(buf, salt, i);
                        if spoil == Some(Defect::CorruptOctet) {
                            // After the pattern was written, as a corrupting path would.
                            buf[Defect::octet(size) as usize] ^= 0xff;
                        }
                        c.src.write(slot as usize, buf).map_err(|e| e.to_string())?;
                    }
                    let len = if spoil == Some(Defect::ShortSend) {
                        size - 1
                    } else {
                        size
                    };
                    // -Q: every cqm-th request is signalled, and the last of a run by
                    // iterations; its completion retires the unsignalled ones before it.
                    let signaled =
                        (i + 1).is_multiple_of(cqm) || (ph.duration.is_none() && i + 1 == ph.iters);
                    if pl > 1 {
                        let wr = SendWr::new(i, op, &[c.src.sge(slot, len as u32)])
                            .map_err(|e| format!("post: {e}"))?;
                        batch.push(if signaled { wr } else { wr.unsignaled() });
                        if batch.len() as u64 == pl {
                            break;
                        }
                        continue;
                    }
                    let r = if test == T::WriteBw || test == T::SendBw {
                        try_post_data(c, i, op, slot, len, signaled)
                    } else {
                        SendWr::new(i, op, &[c.src.sge(slot, s as u32)]).and_then(|wr| {
                            c.qp.post_send(&if signaled { wr } else { wr.unsignaled() })
                        })
                    };
                    match r {
                        Ok(()) => {}
                        Err(warpcore_verbs::Error::QueueFull) => break,
                        Err(e) => return Err(format!("post: {e}")),
                    }
                    if c.layout().credits() {
                        c.note_data_sent();
                    }
                    t.times[(i % window) as usize] = Some(round);
                    t.posted += 1;
                    work = true;
                }
                if !batch.is_empty() {
                    // -l: the list in one post; what the send queue took counts.
                    let posted = match c.qp.post_send_list(&batch) {
                        Ok(()) => batch.len(),
                        Err(e) if e.error == warpcore_verbs::Error::QueueFull => e.posted,
                        Err(e) => return Err(format!("post: {e}")),
                    };
                    for _ in 0..posted {
                        if c.layout().credits() {
                            c.note_data_sent();
                        }
                        t.times[(t.posted % window) as usize] = Some(round);
                        t.posted += 1;
                        work = true;
                    }
                }
                // In batches, as perftest polls (CTX_POLL_BATCH): one claim of the
                // queue per batch.
                loop {
                    let got = c.poll_sends(&mut wcs);
                    for &wc in &wcs[..got] {
                        if wc.status != WcStatus::Success {
                            return Err(format!("{:?} completed with {:?}", wc.opcode, wc.status));
                        }
                        if wc.wr_id >= u64::MAX - 1 {
                            continue;
                        }
                        let last = wc.wr_id;
                        if last < t.completed {
                            return Err(format!(
                                "send completion {last} out of order (already retired {})",
                                t.completed
                            ));
                        }
                        let now = *completed_at.get_or_insert_with(Instant::now);
                        // Send queues complete in order: a signalled request's completion
                        // retires the unsignalled ones posted before it (-Q).
                        for i in t.completed..=last {
                            if let Some(t0) = t.times[(i % window) as usize].take() {
                                // A run of requests from one posting round: one record.
                                match &mut same {
                                    Some((r, n)) if *r == t0 => *n += 1,
                                    _ => {
                                        if let Some((r, n)) = same.replace((t0, 1)) {
                                            rec.record_n((now - r).as_nanos() as u64, n);
                                        }
                                    }
                                }
                            }
                            if verify && test == T::ReadBw {
                                let slot = ((i % slots) * size) as usize;
                                let ro = c.layout().read_offset(size, i) as usize;
                                let mut data = vec![0u8; s];
                                c.src.read(slot, &mut data).map_err(|e| e.to_string())?;
                                c.check(i, &data, &static_peer[ro..ro + s]);
                            }
                            if verify && test == T::AtomicBw {
                                check_atomic(c, i, &wc, (i % slots) * size)?;
                            }
                            t.completed += 1;
                            bytes += size;
                        }
                        t_last = now;
                        work = true;
                    }
                    if got < wcs.len() {
                        break;
                    }
                }
                let finished = (stop || (ph.duration.is_none() && t.posted >= ph.iters))
                    && t.completed == t.posted;
                if finished && (!c.layout().credits() || c.credit_available()) {
                    let mut d = Ctrl::new(Kind::Done, size, t.posted);
                    d.v0 = (t_last - t_start).as_nanos() as u64;
                    c.send_ctrl(d, ph.stall)?;
                    t.done_sent = true;
                    work = true;
                }
            }
            while let Some(r) = c.poll_recv()? {
                work = true;
                match r {
                    Recv::Data | Recv::Imm(_) => {}
                    Recv::Ctrl(x) if x.kind == Kind::Done => t.peer_done = Some(x.iters),
                    // With -b the server's Result (after its Mismatch, if it found one) can
                    // follow its Done in one drain.
                    Recv::Ctrl(x) if client && x.kind == Kind::Mismatch => {
                        let m = Mismatch::from_ctrl(&x)
                            .ok_or("malformed Mismatch report from the server")?;
                        peer_first.get_or_insert(m);
                    }
                    Recv::Ctrl(x) if client && x.kind == Kind::Result => {
                        early = Some((x, peer_first.take()))
                    }
                    Recv::Ctrl(x) => return Err(format!("unexpected {:?} mid-run", x.kind)),
                }
            }
        }
        // The round's clock reads serve its end too: its completions' time if it had any
        // (the bytes they retired were counted then), else its start. A clock read costs
        // ~20-50 ns here, and in caller mode this thread also runs the engine: four reads
        // a round took ~6 % of the sending core at MTU 9000 (`perf`).
        let now = completed_at.unwrap_or(round);
        if let Some((r, n)) = same {
            rec.record_n((now - r).as_nanos() as u64, n);
        }
        meter.observe(now - t_start, bytes);
        if let Some(w) = &mut sample {
            w.observe(now - t_start, bytes);
        }
        if rec.tick_at(now, false) && ph.progress && sending {
            let _ = last_progress;
            last_progress = now;
            progress(
                size,
                t_start,
                &format!(
                    "{:.1} MB/s",
                    bytes as f64 / (t_last - t_start).as_secs_f64().max(1e-9) / 1048576.0
                ),
            );
        }
        let all_sent = tx.iter().all(|t| t.done_sent);
        let all_peer = !peer_sending || tx.iter().all(|t| t.peer_done.is_some());
        if all_sent && all_peer {
            break;
        }
        if work {
            last_work = now;
            spin.reset();
        } else {
            // The side that only answers RDMA Writes, Reads or atomics sees nothing of them
            // (no completion until the peer's Done), so silence is no sign of a stopped
            // peer there: it waits while its connections are up, and TCP's keep-alive and
            // user timeout end a dead peer's connection (then the QP's error ends the run).
            // It used to give up after --timeout seconds of a run longer than that.
            // Asked only once the stall limit has passed: on that side every loop finds no
            // work, and a walk over every QP's state (10,000 with -q 10000) in each loop
            // would take the thread away from the engine it also runs.
            let receiving_writes = || {
                !sending
                    && peer_sending
                    && matches!(test, T::WriteBw | T::ReadBw | T::AtomicBw)
                    && conns
                        .iter()
                        .all(|c| c.qp.state() == warpcore_verbs::QpState::Rts)
            };
            if now - last_work > ph.stall && !receiving_writes() {
                return Err(format!(
                    "no progress for {} s (the peer stopped?)",
                    ph.stall.as_secs()
                ));
            }
            if !sending {
                for c in conns.iter() {
                    if let Some(e) = c.poll_send_error() {
                        return Err(e);
                    }
                }
            }
            spin.pause();
        }
    }
    end_progress(ph.progress && sending);
    rec.tick(true);
    // Final-slot check of RDMA Writes: each slot holds the last message written into it.
    if verify && test == T::WriteBw && peer_sending {
        for (qi, c) in conns.iter_mut().enumerate() {
            let n = tx[qi].peer_done.unwrap_or(0);
            let psalt = if client { SERVER_SALT } else { CLIENT_SALT };
            for j in 0..slots.min(n) {
                let last = j + ((n - 1 - j) / slots) * slots;
                let mut got = vec![0u8; s];
                let mut want = vec![0u8; s];
                c.data
                    .read((j * size) as usize, &mut got)
                    .map_err(|e| e.to_string())?;
                wire::fill(&mut want, psalt, last);
                c.check(last, &got, &want);
            }
        }
    }
    // Atomics: the counter word holds exactly what the peer's atomics added.
    if test == T::AtomicBw {
        for (qi, c) in conns.iter_mut().enumerate() {
            if client {
                c.atomics += tx[qi].completed;
            } else if verify {
                check_counter(c, tx[qi].peer_done.unwrap_or(0))?;
            } else {
                c.atomics += tx[qi].peer_done.unwrap_or(0);
            }
        }
    }
    let mut msgs: u64 = tx.iter().map(|t| t.completed).sum();
    let mut secs = (t_last - t_start).as_secs_f64();
    // -D with a margin: the figures are what completed within perftest's sample window
    // (every completion adds `size` octets, so the window's messages are its octets / size).
    if let Some((b, s)) = sample.as_ref().and_then(SampleWindow::figures) {
        bytes = b;
        secs = s;
        msgs = b / size.max(1);
    }
    let mut o = outcome(size, rec);
    o.iters = msgs;
    o.bytes = bytes;
    o.secs = secs;
    // Only what a closed window measured: no window, no peak (never the average).
    o.peak_bps = meter.peak();
    o.verified = conns.iter().map(|c| c.verified).sum();
    o.errors = conns.iter().map(|c| c.errors).sum();
    o.first_error = conns.iter_mut().find_map(|c| c.first_error.take());
    if client {
        let (r, peer_first) = wait_result(&mut conns[0], early, ph.stall)?;
        o.verified += r.v3;
        o.errors += r.v0;
        o.first_error = o.first_error.or(peer_first);
        if peer_sending {
            let peak = (r.v2 != NO_PEAK).then_some(r.v2 as f64);
            o.peer = Some((r.iters * size, r.v1 as f64 / 1e9, peak, r.iters));
        }
    } else {
        report_mismatch(&mut conns[0], o.first_error, ph.stall)?;
        let mut r = Ctrl::new(Kind::Result, size, msgs);
        r.v0 = o.errors;
        r.v1 = (secs * 1e9) as u64;
        r.v2 = o.peak_bps.map_or(NO_PEAK, |p| p as u64);
        r.v3 = o.verified;
        conns[0].send_ctrl(r, ph.stall)?;
    }
    for c in conns.iter_mut() {
        c.reset_counts();
    }
    Ok(o)
}

#[cfg(test)]
mod unit_tests {
    use super::*;

    /// A sample longer than the histogram's hour still counts (as an hour): `record`
    /// refused it and the phase's count and percentiles left it out without a word.
    #[test]
    fn a_sample_beyond_the_histogram_still_counts() {
        let mut r = Rec::new();
        r.record(1_000);
        r.record(2 * 3_600_000_000_000);
        r.record_n(5 * 3_600_000_000_000, 2);
        r.tick(true);
        assert_eq!(r.hist.len(), 4);
        assert!(r.hist.max() >= 3_500_000_000_000, "{}", r.hist.max());
    }

    /// Each closed second of a phase kept its own full-range histogram (1 ns .. 1 h at 3
    /// digits: 33,792 counters, 270 KB) for `--hdr-log`, even when no log was asked for:
    /// `-D 3600` held ~1 GB of them and `-D 86400` (allowed) ~23 GB; --run_infinitely
    /// grew by ~1.6 MB per 5 s row until the machine ran out of memory. A phase without
    /// --hdr-log keeps none; the whole phase's histogram still holds every sample.
    #[test]
    fn per_second_histograms_are_kept_only_for_hdr_log() {
        let mut r = Rec::new();
        assert!(
            r.interval.distinct_values() * 8 > 200_000,
            "a histogram is ~270 KB"
        );
        for k in 1..=3u64 {
            r.record(k * 1_000);
            r.tick(true);
        }
        assert_eq!(r.hist.len(), 3);
        assert_eq!(r.intervals.len(), 0, "intervals kept without --hdr-log");
        let mut logged = Rec::keeping_intervals(true);
        for k in 1..=3u64 {
            logged.record(k * 1_000);
            logged.tick(true);
        }
        assert_eq!(logged.hist.len(), 3);
        assert_eq!(logged.intervals.len(), 3);
    }
}
