//! A hashed timer wheel: one deadline per connection, O(1) to arm, work per poll bounded by
//! the ticks that passed (issue 11 item 3: no scan of every connection).
//!
//! Entries are never removed when a connection's deadline moves: the host keeps the armed
//! deadline in the connection's slot and an entry fires only if it still matches it
//! ([`crate::host`] checks). A later deadline keeps the earlier entry, which fires early and
//! re-arms: calling a connection's `handle_timeout` early is harmless by its contract. So a
//! connection whose RTO moves forward with every ACK costs no insertion per ACK.

use smoltcp::time::Instant;

/// Microseconds per tick. Timers fire at the first poll at or after their instant; the tick
/// only decides which bucket holds them, not when they fire.
const TICK_US: i64 = 50;
/// Most buckets: one revolution is 4096 * 50 us = 205 ms. Entries further out stay in their
/// bucket and are skipped until their revolution comes.
const MAX_SLOTS: usize = 4096;
/// Fewest buckets (a host for a handful of connections: a revolution of 12.8 ms, so a
/// keep-alive 10 s away is skipped ~780 times, a few instructions each).
const MIN_SLOTS: usize = 256;

/// One armed deadline: the connection slot and the generation it was armed for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub at: Instant,
    pub index: u32,
    pub generation: u32,
}

/// The wheel. `current` is the first tick not yet fully processed.
#[derive(Debug)]
pub(crate) struct Wheel {
    /// The buckets, a power of two of them.
    slots: Vec<Vec<Entry>>,
    current: i64,
    len: usize,
}

fn tick_of(at: Instant) -> i64 {
    at.total_micros().div_euclid(TICK_US)
}

impl Wheel {
    /// A wheel for about `connections` deadlines: as many buckets, a power of two between
    /// 256 and 4,096 (a small host's wheel costs little to build: the engine fuzz target
    /// builds two hosts per input).
    pub fn new(now: Instant, connections: usize) -> Self {
        let n = connections.next_power_of_two().clamp(MIN_SLOTS, MAX_SLOTS);
        Wheel {
            slots: (0..n).map(|_| Vec::new()).collect(),
            current: tick_of(now),
            len: 0,
        }
    }

    /// Entries held (stale ones included, until their bucket is visited).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Arms `e`. A deadline in the past goes into the current bucket and fires at the next
    /// [`Wheel::expire`].
    pub fn insert(&mut self, e: Entry) {
        let t = tick_of(e.at).max(self.current);
        let b = self.bucket(t);
        self.slots[b].push(e);
        self.len += 1;
    }

    /// Moves every entry due at `now` (at <= now) into `due`. Work: the buckets of the ticks
    /// that passed since the last call, at most one revolution.
    pub fn expire(&mut self, now: Instant, due: &mut Vec<Entry>) {
        if !self.may_have_due(now) {
            return;
        }
        let now_tick = tick_of(now);
        // After a long pause one sweep of every bucket finds everything due.
        let first = self.current.max(now_tick - self.slots.len() as i64 + 1);
        for t in first..=now_tick {
            let b = self.bucket(t);
            let bucket = &mut self.slots[b];
            let mut i = 0;
            while i < bucket.len() {
                if bucket[i].at <= now {
                    due.push(bucket.swap_remove(i));
                    self.len -= 1;
                } else {
                    i += 1;
                }
            }
        }
        // The bucket of `now_tick` may hold entries later in this tick: visit it again.
        self.current = now_tick;
    }

    /// Whether [`Wheel::expire`] at `now` could find anything: false (a few instructions,
    /// the idle loop's case) while `now` is still in the tick last expired and that tick's
    /// bucket is empty, since every earlier tick was emptied of what was due and a deadline
    /// armed in the past lands in the current bucket.
    #[inline]
    pub fn may_have_due(&self, now: Instant) -> bool {
        let now_tick = tick_of(now);
        if now_tick < self.current || self.len == 0 {
            return false;
        }
        now_tick > self.current || !self.slots[self.bucket(self.current)].is_empty()
    }

    #[inline]
    fn bucket(&self, tick: i64) -> usize {
        (tick as usize) & (self.slots.len() - 1)
    }

    /// The earliest armed instant (stale entries included, so it may be early; never late).
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.len == 0 {
            return None;
        }
        // Scan one revolution from the current tick: the first bucket holding an entry of
        // that tick's revolution holds the earliest one.
        for t in self.current..self.current + self.slots.len() as i64 {
            let bucket = &self.slots[self.bucket(t)];
            let best = bucket
                .iter()
                .filter(|e| tick_of(e.at) <= t)
                .map(|e| e.at)
                .min();
            if best.is_some() {
                return best;
            }
        }
        self.slots.iter().flatten().map(|e| e.at).min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(us: i64, index: u32) -> Entry {
        Entry {
            at: Instant::from_micros(us),
            index,
            generation: 0,
        }
    }

    fn expire(w: &mut Wheel, us: i64) -> Vec<u32> {
        let mut due = Vec::new();
        w.expire(Instant::from_micros(us), &mut due);
        let mut v: Vec<u32> = due.iter().map(|d| d.index).collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn fires_at_or_after_the_deadline_never_before() {
        let mut w = Wheel::new(Instant::ZERO, 1);
        w.insert(e(120, 1));
        w.insert(e(149, 2));
        w.insert(e(10_000, 3));
        assert_eq!(expire(&mut w, 119), Vec::<u32>::new());
        assert_eq!(expire(&mut w, 120), vec![1]);
        // 149 is in the same 50 us tick as 120's neighbour: not before its instant.
        assert_eq!(expire(&mut w, 148), Vec::<u32>::new());
        assert_eq!(expire(&mut w, 150), vec![2]);
        assert_eq!(w.next_deadline(), Some(Instant::from_micros(10_000)));
        assert_eq!(expire(&mut w, 20_000), vec![3]);
        assert_eq!(w.len(), 0);
        assert_eq!(w.next_deadline(), None);
    }

    #[test]
    fn far_deadlines_survive_revolutions_and_long_pauses() {
        let mut w = Wheel::new(Instant::ZERO, 1);
        // Ten seconds is ~49 revolutions away.
        w.insert(e(10_000_000, 7));
        w.insert(e(300_000, 8));
        for ms in 1..10_000 {
            let fired = expire(&mut w, ms * 1000);
            if ms == 300 {
                assert_eq!(fired, vec![8]);
            } else {
                assert!(fired.is_empty(), "at {ms} ms: {fired:?}");
            }
        }
        assert_eq!(expire(&mut w, 10_000_000), vec![7]);
        // A pause longer than a revolution still finds everything due.
        w.insert(e(10_100_000, 9));
        w.insert(e(99_000_000, 10));
        assert_eq!(expire(&mut w, 50_000_000), vec![9]);
        assert_eq!(expire(&mut w, 99_000_000), vec![10]);
    }

    #[test]
    fn an_idle_poll_knows_without_visiting_a_bucket_that_nothing_is_due() {
        let mut w = Wheel::new(Instant::ZERO, 1);
        assert!(!w.may_have_due(Instant::from_micros(1_000)));
        w.insert(e(10_000, 1));
        // Ticks passed since the last expiry: their buckets must be visited.
        assert!(w.may_have_due(Instant::from_micros(1_000)));
        assert_eq!(expire(&mut w, 1_000), Vec::<u32>::new());
        // Same tick, its bucket empty: nothing can be due.
        assert!(!w.may_have_due(Instant::from_micros(1_010)));
        // A deadline armed in the past lands in the current bucket and is seen at once.
        w.insert(e(500, 2));
        assert!(w.may_have_due(Instant::from_micros(1_010)));
        assert_eq!(expire(&mut w, 1_010), vec![2]);
        assert!(!w.may_have_due(Instant::from_micros(1_020)));
        assert!(w.may_have_due(Instant::from_micros(10_000)));
        assert_eq!(expire(&mut w, 10_000), vec![1]);
        assert!(!w.may_have_due(Instant::from_micros(20_000)), "empty wheel");
    }

    #[test]
    fn past_deadlines_fire_at_once() {
        let mut w = Wheel::new(Instant::from_micros(1_000_000), 1);
        w.insert(e(5, 1));
        assert_eq!(w.next_deadline(), Some(Instant::from_micros(5)));
        assert_eq!(expire(&mut w, 1_000_000), vec![1]);
    }
}
