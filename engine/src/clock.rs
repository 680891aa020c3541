//! The cores' clock: what the layer above gives them ([`Clock`], GUIDE rule 3), and how a
//! core turns it into its `now` once per loop (`CoreClock`).
//!
//! A core reads the time once per loop (runs of idle loops aside: below). Through
//! `std::time::Instant` that read is a `clock_gettime` (the vDSO: a sequence lock, the
//! TSC, a multiply) plus a `timespec` subtraction and a conversion to microseconds, about
//! 70 instructions per idle loop out of ~310 (issue 12 item 4 asks for an idle loop under
//! 200). DPDK applications read the time-stamp counter instead (`rte_get_tsc_cycles`), a
//! few instructions. So a [`Clock`] may come with a free-running counter of constant rate
//! ([`Clock::with_counter`]: the verbs layer passes the TSC when the kernel itself keeps
//! time with it); the core then reads the counter every loop and the clock only about once
//! a millisecond, and converts counts to microseconds in between at the rate measured
//! between its clock reads:
//!
//! - **Anchors are exact.** Every re-anchoring takes the clock's own reading; the
//!   interpolation never feeds on itself, so its error is the rate's error over at most a
//!   millisecond (the rate comes from the whole time since the core started: it improves as
//!   the core runs, well under a microsecond per millisecond after the first one).
//! - **Never backwards.** `now` is clamped to the last value returned: a re-anchoring that
//!   finds the interpolation a fraction of a microsecond ahead, or a counter read on another
//!   CPU that is behind, holds the time still instead of stepping it back (the timer wheel
//!   and the TCP's RTT samples assume a monotonic `now`).
//! - **Until the rate is known** (the first millisecond), and whenever the counter jumps
//!   (backwards, or more than a millisecond ahead: a core that slept), the core reads the
//!   clock itself, as without a counter. A counter found to disagree with the clock at an
//!   anchor (it ran ahead while the clock did not, as a TSC does through a suspend that
//!   `CLOCK_MONOTONIC` leaves out) has its rate measured afresh from there.
//!
//! Idle loops that follow one another with nothing between them (an engine thread
//! spinning, [`crate::runtime::CoreHandle::progress_until`]) need not read it each time:
//! such a loop may take the last reading (`CoreClock::last`), at most
//! [`crate::runtime::CLOCK_REUSE_LOOPS`] - 1 loops in a row, then reads it again. An idle
//! loop takes well under 100 ns, the engine's time counts whole microseconds, and the
//! counter read is the largest part of an idle loop: skipping it shortens the turn in
//! which a core that waits notices a frame (write_lat's figures: `docs/iwperf.md`).

use std::sync::Arc;
use std::time::Instant as StdInstant;

use warpcore_tcp::smoltcp::time::Instant;

/// Microseconds between re-anchorings at the clock.
const ANCHOR_US: i64 = 1_000;

/// A wall clock for the cores, provided by the layer above (GUIDE rule 3: nothing in the
/// engine reads a clock on its own), optionally with a counter to interpolate it by.
#[derive(Clone)]
pub struct Clock {
    now: Arc<dyn Fn() -> StdInstant + Send + Sync>,
    counter: Option<fn() -> u64>,
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Clock")
            .field("counter", &self.counter.is_some())
            .finish()
    }
}

impl Clock {
    /// A clock read through `now` (`std::time::Instant::now`, or a test's own).
    pub fn new(now: impl Fn() -> StdInstant + Send + Sync + 'static) -> Self {
        Clock {
            now: Arc::new(now),
            counter: None,
        }
    }

    /// The same clock, read about once a millisecond by each core, with `counter` read
    /// every loop in between. `counter` must count at a constant rate, whatever the CPU's
    /// frequency and sleep states, and agree across the CPUs a core may run on (an
    /// invariant TSC the kernel uses as its clock source: `warpcore_dpdk_sys::tsc_cycles`
    /// where `warpcore_dpdk_sys::tsc_is_clock_source` says so). A counter that jumps is
    /// caught (the core re-reads the clock), but one whose rate drifts is not.
    pub fn with_counter(mut self, counter: fn() -> u64) -> Self {
        self.counter = Some(counter);
        self
    }

    /// The clock's reading.
    pub fn now(&self) -> StdInstant {
        (self.now)()
    }
}

/// `t` as an engine instant (microseconds since `base`, 0 before it). Seconds and
/// microseconds separately: no 128-bit nanosecond arithmetic on the loop's path.
#[inline]
pub(crate) fn micros_since(t: StdInstant, base: StdInstant) -> Instant {
    let d = t.saturating_duration_since(base);
    Instant::from_micros(d.as_secs() as i64 * 1_000_000 + i64::from(d.subsec_micros()))
}

/// One core's `now`, from its [`Clock`] (and counter).
pub(crate) struct CoreClock {
    clock: Clock,
    base: StdInstant,
    interp: Option<Interp>,
    /// The last `now` returned without a counter (with one: `Interp::last`).
    last: Instant,
}

/// The counter's state on one core.
struct Interp {
    read: fn() -> u64,
    /// The first anchor: the rate is measured from it.
    first_count: u64,
    first_us: i64,
    /// The current anchor: a counter value and the clock's reading next to it.
    count: u64,
    us: i64,
    /// Microseconds per count, 32.32 fixed point.
    mult: u64,
    /// Counts after the anchor that are interpolated (about [`ANCHOR_US`]); 0 until the
    /// rate is known, so every read goes to the clock.
    span: u64,
    /// The last `now` returned.
    last: i64,
}

impl CoreClock {
    /// A core's clock counting from `base` (the process's time origin).
    pub(crate) fn new(clock: Clock, base: StdInstant) -> Self {
        let interp = clock.counter.map(|read| {
            let count = read();
            let us = micros_since(clock.now(), base).total_micros();
            Interp {
                read,
                first_count: count,
                first_us: us,
                count,
                us,
                mult: 0,
                span: 0,
                last: us,
            }
        });
        let last = Instant::from_micros(0);
        CoreClock {
            clock,
            base,
            interp,
            last,
        }
    }

    /// Microseconds since the time origin, never less than the last call's.
    #[inline]
    pub(crate) fn now(&mut self) -> Instant {
        let Some(t) = &mut self.interp else {
            // Without a counter, the clock alone; clamped like the counter's readings.
            let now = micros_since(self.clock.now(), self.base).max(self.last);
            self.last = now;
            return now;
        };
        let d = (t.read)().wrapping_sub(t.count);
        if d < t.span {
            // d < span keeps d * mult near ANCHOR_US << 32: no overflow.
            let us = (t.us + ((d * t.mult) >> 32) as i64).max(t.last);
            t.last = us;
            return Instant::from_micros(us);
        }
        self.reanchor()
    }

    /// The last reading [`Self::now`] returned, without reading the clock (for a loop
    /// that follows an idle one at once: the module documentation).
    #[inline]
    pub(crate) fn last(&self) -> Instant {
        match &self.interp {
            Some(t) => Instant::from_micros(t.last),
            None => self.last,
        }
    }

    /// Re-reads the clock, moves the anchor there and re-measures the rate.
    #[cold]
    #[inline(never)]
    fn reanchor(&mut self) -> Instant {
        let Some(t) = &mut self.interp else {
            let now = micros_since(self.clock.now(), self.base).max(self.last);
            self.last = now;
            return now;
        };
        // The counter on both sides of the clock read: the anchor is their middle.
        let before = (t.read)();
        let us = micros_since(self.clock.now(), self.base).total_micros();
        let after = (t.read)();
        let count = before.wrapping_add(after.wrapping_sub(before) / 2);
        let counted = count.wrapping_sub(t.first_count);
        let elapsed = us - t.first_us;
        // A counter behind its last anchor (wrapped, or another CPU's) is not trusted: start
        // measuring again from here.
        let behind = |a: u64, b: u64| a.wrapping_sub(b) > i64::MAX as u64;
        // A counter that disagrees with the clock since the last anchor (it jumped ahead
        // while the clock did not: a suspend the clock leaves out, a hypervisor moving the
        // counter's offset) is not trusted either: measured across the jump, the rate came
        // out too slow, the core's time stood nearly still between anchors that came
        // seconds apart, and its timers fired that late. Allowed: a millisecond, or 1/64
        // of the time since the anchor (a rate's error, under 1/1,000 once measured).
        let disagrees = t.mult != 0 && {
            let counted = u128::from(count.wrapping_sub(t.count));
            let said = i64::try_from((counted * u128::from(t.mult)) >> 32).unwrap_or(i64::MAX);
            let since = us - t.us;
            said.abs_diff(since) > ANCHOR_US.max(since / 64) as u64
        };
        if disagrees
            || behind(count, t.count)
            || behind(count, t.first_count)
            || behind(after, before)
        {
            t.first_count = count;
            t.first_us = us;
            t.mult = 0;
            t.span = 0;
        } else if elapsed >= ANCHOR_US && counted > 0 {
            let mult = ((elapsed as u128) << 32) / u128::from(counted);
            // A counter slower than a microsecond per count is no use to interpolate.
            if mult > 0 && mult < 1 << 32 {
                t.mult = mult as u64;
                t.span = (((ANCHOR_US as u128) << 32) / mult) as u64;
            } else {
                t.mult = 0;
                t.span = 0;
            }
        }
        t.count = count;
        t.us = us;
        let us = us.max(t.last);
        t.last = us;
        Instant::from_micros(us)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Mutex;
    use std::time::Duration;

    // One fake world per test thread: a counter and a clock the test moves by hand.
    thread_local! {
        static COUNTER: Cell<u64> = const { Cell::new(0) };
    }
    fn counter() -> u64 {
        COUNTER.with(Cell::get)
    }

    /// A fake clock at `ns` nanoseconds after `origin`, counting its reads.
    struct Fake {
        origin: StdInstant,
        ns: Arc<AtomicU64>,
        reads: Arc<AtomicU64>,
    }

    impl Fake {
        fn new() -> (Fake, Clock) {
            let origin = StdInstant::now();
            let ns = Arc::new(AtomicU64::new(0));
            let reads = Arc::new(AtomicU64::new(0));
            let (n2, r2) = (Arc::clone(&ns), Arc::clone(&reads));
            let clock = Clock::new(move || {
                r2.fetch_add(1, Ordering::Relaxed);
                origin + Duration::from_nanos(n2.load(Ordering::Relaxed))
            })
            .with_counter(counter);
            COUNTER.with(|c| c.set(1 << 40));
            (Fake { origin, ns, reads }, clock)
        }
        /// Moves the clock by `ns` and the counter by `ns * num / den`.
        fn advance(&self, ns: u64, num: u64, den: u64) {
            self.ns.fetch_add(ns, Ordering::Relaxed);
            COUNTER.with(|c| c.set(c.get().wrapping_add(ns * num / den)));
        }
        fn true_us(&self) -> i64 {
            (self.ns.load(Ordering::Relaxed) / 1000) as i64
        }
    }

    #[test]
    fn interpolates_within_a_microsecond_and_reads_the_clock_once_a_millisecond() {
        // A 2.4 GHz counter, the core looping every 137 ns for 50 ms.
        let (f, clock) = Fake::new();
        let mut c = CoreClock::new(clock, f.origin);
        let mut worst = 0i64;
        let mut last = 0;
        for _ in 0..365_000 {
            f.advance(137, 12, 5);
            let now = c.now().total_micros();
            assert!(now >= last, "backwards: {now} after {last}");
            last = now;
            worst = worst.max((now - f.true_us()).abs());
        }
        assert!(worst <= 1, "interpolation off by {worst} us");
        let reads = f.reads.load(Ordering::Relaxed);
        // The first millisecond reads the clock every loop (~7,300), then ~once per ms.
        assert!(reads < 7_400 + 60, "{reads} clock reads in 50 ms");
        assert!(
            reads > 7_000,
            "{reads}: the first millisecond must read the clock"
        );
    }

    #[test]
    fn never_goes_backwards_when_the_counter_jumps_or_the_rate_is_off() {
        let (f, clock) = Fake::new();
        let mut c = CoreClock::new(clock, f.origin);
        for _ in 0..20_000 {
            f.advance(100, 3, 1);
            c.now();
        }
        let mut last = c.now().total_micros();
        let mut check = |c: &mut CoreClock, f: &Fake, within: i64| {
            let now = c.now().total_micros();
            assert!(now >= last, "backwards: {now} after {last}");
            assert!(
                (now - f.true_us()).abs() <= within,
                "{now} vs {}",
                f.true_us()
            );
            last = now;
        };
        // The counter runs 1 % fast for a while: interpolation runs ahead by at most the
        // rate error over a millisecond (10 us), and every anchor brings it back.
        for _ in 0..50_000 {
            f.advance(100, 303, 100);
            check(&mut c, &f, 11);
        }
        // Another CPU's counter, behind: held still, then re-measured.
        COUNTER.with(|k| k.set(k.get() - 1_000_000));
        for _ in 0..30_000 {
            f.advance(100, 3, 1);
            check(&mut c, &f, 11);
        }
        // Back at the true rate, measured afresh: within a microsecond again.
        for _ in 0..30_000 {
            f.advance(100, 3, 1);
            check(&mut c, &f, 1);
        }
        // A sleep of 40 ms: the counter is far past the span, the clock is read.
        f.advance(40_000_000, 3, 1);
        check(&mut c, &f, 1);
        for _ in 0..1_000 {
            f.advance(100, 3, 1);
            check(&mut c, &f, 1);
        }
    }

    /// A counter that jumps ahead while the clock does not (a TSC that keeps counting
    /// through a suspend-to-idle that `CLOCK_MONOTONIC` leaves out, a hypervisor moving its
    /// offset): the rate was measured from the first anchor, jump included, so it came out
    /// thousands of times too slow and the core's time nearly stood still between anchors
    /// that came seconds apart (every TCP and MPA timer that late). The clock is the truth
    /// (GUIDE rule 3): a counter found to disagree with it is measured afresh.
    #[test]
    fn a_counter_that_jumps_ahead_of_the_clock_does_not_slow_time() {
        let (f, clock) = Fake::new();
        let mut c = CoreClock::new(clock, f.origin);
        for _ in 0..100_000 {
            f.advance(137, 12, 5);
            c.now();
        }
        // An hour of counts (2.4 GHz) without the clock moving.
        COUNTER.with(|k| k.set(k.get() + 3_600 * 2_400_000_000));
        let (mut worst, mut last) = (0i64, 0i64);
        for _ in 0..200_000 {
            f.advance(137, 12, 5);
            let now = c.now().total_micros();
            assert!(now >= last, "backwards: {now} after {last}");
            last = now;
            worst = worst.max((now - f.true_us()).abs());
        }
        assert!(worst <= 2, "the core's time off the clock by {worst} us");
    }

    #[test]
    fn without_a_counter_every_read_is_the_clock() {
        let ns = Arc::new(Mutex::new(0u64));
        let n2 = Arc::clone(&ns);
        let origin = StdInstant::now();
        let clock = Clock::new(move || origin + Duration::from_nanos(*n2.lock().unwrap()));
        let mut c = CoreClock::new(clock, origin);
        *ns.lock().unwrap() = 2_500_700;
        assert_eq!(c.now().total_micros(), 2_500);
        *ns.lock().unwrap() = 2_501_000;
        assert_eq!(c.now().total_micros(), 2_501);
    }

    #[test]
    fn last_is_the_last_reading_without_reading_the_clock() {
        let reads = Arc::new(AtomicU64::new(0));
        let r2 = Arc::clone(&reads);
        let origin = StdInstant::now();
        let clock = Clock::new(move || {
            let n = r2.fetch_add(1, Ordering::Relaxed) + 1;
            origin + Duration::from_micros(n * 10)
        });
        let mut c = CoreClock::new(clock, origin);
        assert_eq!(c.last().total_micros(), 0, "before any reading: the origin");
        assert_eq!(reads.load(Ordering::Relaxed), 0);
        let t = c.now();
        assert_eq!(t.total_micros(), 10);
        assert_eq!(c.last(), t);
        assert_eq!(c.last(), t, "asked twice: still the last reading");
        assert_eq!(
            reads.load(Ordering::Relaxed),
            1,
            "last() never reads the clock"
        );
        assert_eq!(c.now().total_micros(), 20);
        assert_eq!(c.last().total_micros(), 20);
    }
}
