//! A hashed timer wheel: one deadline per connection, O(1) to arm, work per poll bounded by
//! the occupied buckets among the ticks that passed (issue 11 item 3: no scan of every
//! connection; issue 12 item 4: no walk over empty buckets).
//!
//! A deadline that moves later keeps its entry: the host keeps the armed deadline in the
//! connection's slot, the earlier entry fires early and re-arms (calling a connection's
//! `handle_timeout` early is harmless by its contract), so a connection whose RTO moves
//! forward with every ACK costs no wheel operation per ACK. A deadline that moves earlier,
//! or goes, and a connection that goes take their entry out ([`Wheel::remove`], a walk of
//! one bucket): the wheel holds one entry per armed connection, whatever the churn.

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
// The occupancy bits are whole words.
const _: () = assert!(MIN_SLOTS.is_multiple_of(64) && MAX_SLOTS.is_multiple_of(64));

/// One armed deadline: the connection slot and the generation it was armed for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub at: Instant,
    pub index: u32,
    pub generation: u32,
}

/// A list link's end.
const NIL: u32 = u32::MAX;

/// An entry in the node pool, linked into its bucket's list (or into the free list).
#[derive(Debug, Clone, Copy)]
struct Node {
    e: Entry,
    next: u32,
}

/// The wheel. `current` is the first tick not yet fully processed.
///
/// The buckets are singly linked lists threaded through one pool of nodes, not a vector
/// each: the wheel's memory is the most entries it ever held at once, reused through a free
/// list. With a vector per bucket every bucket kept the capacity of its own busiest moment,
/// and under connection churn ever more buckets met a busier moment, so the heap crept up
/// for hours (issue 15's soak: ~2 MB over 20,000 connections, found with heaptrack).
#[derive(Debug)]
pub(crate) struct Wheel {
    /// Each bucket's first node (`NIL`: empty), a power of two of them.
    heads: Vec<u32>,
    /// Every node, in a bucket or free.
    nodes: Vec<Node>,
    /// The free list's first node.
    free: u32,
    /// One bit per bucket, set while it holds an entry: [`Wheel::expire`] and
    /// [`Wheel::next_deadline`] visit only those, so the ticks that passed cost a word test
    /// per 64 buckets, not a visit each (a core polled seldom, or paused, would otherwise
    /// walk up to a revolution of empty buckets at its next poll).
    occupied: Vec<u64>,
    current: i64,
    /// No entry is due before this microsecond: the first tick of the first occupied bucket
    /// at or after `current` (in wheel order), or, when that is the current tick's bucket,
    /// the earliest instant it holds if that comes before the next tick (`i64::MAX` when
    /// no bucket is occupied). A lower bound, kept by [`Wheel::insert`] (each entry's own
    /// instant) and recomputed by [`Wheel::expire`], so polls before it touch no bucket
    /// (and divide nothing).
    horizon_us: i64,
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
        // Past MAX_SLOTS the count's power of two is not wanted (nor, for a count past
        // usize's top bit, representable: `next_power_of_two` panics there).
        let n = connections
            .min(MAX_SLOTS)
            .next_power_of_two()
            .clamp(MIN_SLOTS, MAX_SLOTS);
        Wheel {
            heads: vec![NIL; n],
            nodes: Vec::new(),
            free: NIL,
            occupied: vec![0; n / 64],
            current: tick_of(now),
            horizon_us: i64::MAX,
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
        let node = Node {
            e,
            next: self.heads[b],
        };
        let i = if self.free == NIL {
            self.nodes.push(node);
            (self.nodes.len() - 1) as u32
        } else {
            let i = self.free;
            self.free = self.nodes[i as usize].next;
            self.nodes[i as usize] = node;
            i
        };
        self.heads[b] = i;
        self.occupied[b / 64] |= 1 << (b % 64);
        // Not due before its own instant (one in the past: at the next expiry).
        self.horizon_us = self.horizon_us.min(e.at.total_micros());
        self.len += 1;
    }

    /// Disarms `e`, armed by [`Wheel::insert`] and not yet expired: its node goes back to the
    /// free list at once. Work: a walk of its bucket. The host removes a connection's entry
    /// when the connection goes or its deadline moves earlier, so the wheel holds one node
    /// per armed connection, not one per deadline it ever armed (a SYN flood's evicted
    /// half-open connections each left a 1 s SYN-ACK entry behind, and the pool kept that
    /// peak for good). False if no such entry is held.
    pub fn remove(&mut self, e: Entry) -> bool {
        // An entry still held has `at` after the last expiry's `now`, or went into the
        // current bucket when armed in the past: either way, the bucket `insert` chose.
        let b = self.bucket(tick_of(e.at).max(self.current));
        let mut prev = NIL;
        let mut k = self.heads[b];
        while k != NIL {
            let node = self.nodes[k as usize];
            if node.e == e {
                if prev == NIL {
                    self.heads[b] = node.next;
                    if node.next == NIL {
                        self.occupied[b / 64] &= !(1 << (b % 64));
                    }
                } else {
                    self.nodes[prev as usize].next = node.next;
                }
                self.nodes[k as usize].next = self.free;
                self.free = k;
                self.len -= 1;
                // The horizon stays a lower bound: an earlier one only costs an early look.
                return true;
            }
            prev = k;
            k = node.next;
        }
        false
    }

    /// Moves every entry due at `now` (at <= now) into `due`, in tick order. Work: the
    /// occupied buckets of the ticks that passed since the last call (at most one
    /// revolution), found through the occupancy bits.
    pub fn expire(&mut self, now: Instant, due: &mut Vec<Entry>) {
        if !self.may_have_due(now) {
            return;
        }
        // Never before the current tick: a `now` earlier than the last expiry's (a clock
        // the caller let go back) made the span below negative, cast to a huge `usize`.
        let now_tick = tick_of(now).max(self.current);
        let n = self.heads.len();
        // After a long pause one sweep of every bucket finds everything due.
        let first = self.current.max(now_tick - n as i64 + 1);
        // The ticks first..=now_tick are the buckets start..start + span, modulo n.
        let span = (now_tick - first + 1) as usize;
        let start = self.bucket(first);
        let (end, wrapped) = if start + span <= n {
            (start + span, 0)
        } else {
            (n, start + span - n)
        };
        self.expire_buckets(start, end, now, due);
        self.expire_buckets(0, wrapped, now, due);
        // The bucket of `now_tick` may hold entries later in this tick: visit it again.
        self.current = now_tick;
        let first = self.first_occupied_tick();
        self.horizon_us = if first == now_tick {
            // Its bucket still holds entries: later in this tick (the deadline a
            // connection armed a few microseconds ahead, such as a delayed ACK, while its
            // core polls every fraction of one) or of a later revolution. None is due
            // before the earliest of them, nor any other bucket's before the next tick:
            // the polls until then touch no bucket.
            let earliest = self
                .bucket_entries(self.bucket(now_tick))
                .map(|e| e.at.total_micros())
                .min()
                .unwrap_or(i64::MAX);
            earliest.min((now_tick + 1).saturating_mul(TICK_US))
        } else {
            first.saturating_mul(TICK_US)
        };
    }

    /// The tick of the first occupied bucket at or after `current`, in wheel order
    /// (`i64::MAX` when every bucket is empty).
    fn first_occupied_tick(&self) -> i64 {
        let n = self.heads.len();
        let start = self.bucket(self.current);
        self.next_occupied(start, n)
            .or_else(|| self.next_occupied(0, start))
            .map_or(i64::MAX, |i| self.current + ((i + n - start) % n) as i64)
    }

    /// [`Wheel::expire`] over the buckets `from..end` (no wrap), occupied ones only.
    fn expire_buckets(&mut self, from: usize, end: usize, now: Instant, due: &mut Vec<Entry>) {
        let mut b = from;
        while let Some(i) = self.next_occupied(b, end) {
            // Unlink the due nodes onto the free list, keep the rest in order.
            let mut prev = NIL;
            let mut k = self.heads[i];
            while k != NIL {
                let node = self.nodes[k as usize];
                if node.e.at <= now {
                    due.push(node.e);
                    self.len -= 1;
                    if prev == NIL {
                        self.heads[i] = node.next;
                    } else {
                        self.nodes[prev as usize].next = node.next;
                    }
                    self.nodes[k as usize].next = self.free;
                    self.free = k;
                } else {
                    prev = k;
                }
                k = node.next;
            }
            if self.heads[i] == NIL {
                self.occupied[i / 64] &= !(1 << (i % 64));
            }
            b = i + 1;
        }
    }

    /// The first occupied bucket in `from..end` (no wrap).
    #[inline]
    fn next_occupied(&self, from: usize, end: usize) -> Option<usize> {
        let mut i = from;
        while i < end {
            let bits = self.occupied[i / 64] >> (i % 64);
            if bits != 0 {
                let j = i + bits.trailing_zeros() as usize;
                return (j < end).then_some(j);
            }
            i = (i / 64 + 1) * 64;
        }
        None
    }

    /// Whether [`Wheel::expire`] at `now` could find anything: false (a compare, the idle
    /// loop's case) until `now` reaches the first tick whose bucket holds an entry (an entry
    /// of a later revolution there makes it true once per revolution, early, never late).
    /// A deadline armed in the past lands in the current bucket, so it is seen at once.
    #[inline]
    pub fn may_have_due(&self, now: Instant) -> bool {
        self.len != 0 && now.total_micros() >= self.horizon_us
    }

    #[inline]
    fn bucket(&self, tick: i64) -> usize {
        (tick as usize) & (self.heads.len() - 1)
    }

    /// The earliest armed instant (stale entries included, so it may be early; never late).
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.len == 0 {
            return None;
        }
        // Scan one revolution from the current tick, occupied buckets only: the first
        // bucket holding an entry of that tick's revolution holds the earliest one.
        let n = self.heads.len();
        let start = self.bucket(self.current);
        for (from, end) in [(start, n), (0, start)] {
            let mut b = from;
            while let Some(i) = self.next_occupied(b, end) {
                let t = self.current + ((i + n - start) % n) as i64;
                let best = self
                    .bucket_entries(i)
                    .filter(|e| tick_of(e.at) <= t)
                    .map(|e| e.at)
                    .min();
                if best.is_some() {
                    return best;
                }
                b = i + 1;
            }
        }
        (0..n)
            .flat_map(|i| self.bucket_entries(i))
            .map(|e| e.at)
            .min()
    }

    /// The entries of bucket `b`.
    fn bucket_entries(&self, b: usize) -> impl Iterator<Item = Entry> + '_ {
        let mut k = self.heads[b];
        std::iter::from_fn(move || {
            (k != NIL).then(|| {
                let node = self.nodes[k as usize];
                k = node.next;
                node.e
            })
        })
    }

    /// Nodes in the pool (held and free): the most entries held at once so far.
    #[cfg(test)]
    fn pool(&self) -> usize {
        self.nodes.len()
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
        // Ticks passed since the wheel's start, but the only entry's bucket is 10 ms away:
        // nothing to visit until then.
        assert!(!w.may_have_due(Instant::from_micros(1_000)));
        assert!(!w.may_have_due(Instant::from_micros(9_999)));
        assert_eq!(expire(&mut w, 1_000), Vec::<u32>::new());
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
    fn a_long_pause_visits_only_occupied_buckets_and_finds_everything_due() {
        // 4,096 buckets, three entries: after a pause of a whole revolution expiry finds the
        // two due ones (in tick order) and keeps the third, and the emptied buckets' bits
        // are cleared (a second expiry in the same tick has nothing to do).
        let mut w = Wheel::new(Instant::ZERO, 4096);
        w.insert(e(180_000, 3));
        w.insert(e(70, 1));
        w.insert(e(100_000, 2));
        let mut due = Vec::new();
        w.expire(Instant::from_micros(150_000), &mut due);
        assert_eq!(due.iter().map(|d| d.index).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(w.len(), 1);
        assert_eq!(w.occupied.iter().map(|b| b.count_ones()).sum::<u32>(), 1);
        assert!(!w.may_have_due(Instant::from_micros(150_010)));
        assert_eq!(w.next_deadline(), Some(Instant::from_micros(180_000)));
        assert_eq!(expire(&mut w, 180_000), vec![3]);
        assert!(w.occupied.iter().all(|b| *b == 0));
    }

    proptest::proptest! {
        /// The wheel against a plain list: after every expiry the same entries are due (no
        /// earlier, none missed), the same are held, and the next deadline is the earliest
        /// held one; across short steps, pauses of many revolutions and deadlines in the
        /// past or far ahead.
        #[test]
        fn agrees_with_a_plain_list(
            conns in 1usize..5000,
            ops in proptest::collection::vec((0u8..5, 0i64..400_000, -2_000i64..3_000_000), 1..120),
        ) {
            let mut now = 1_000_000i64;
            let mut w = Wheel::new(Instant::from_micros(now), conns);
            let mut model: Vec<(i64, u32)> = Vec::new();
            let mut most = 0;
            for (k, (op, step, offset)) in ops.into_iter().enumerate() {
                match op {
                    0 | 1 => {
                        let at = now + offset;
                        w.insert(e(at, k as u32));
                        model.push((at, k as u32));
                    }
                    4 => {
                        // Remove a held entry (picked by `step`), or one never armed.
                        if model.is_empty() || step % 5 == 0 {
                            proptest::prop_assert!(!w.remove(e(now + offset, u32::MAX)));
                        } else {
                            let (at, index) = model.swap_remove(step as usize % model.len());
                            proptest::prop_assert!(w.remove(e(at, index)));
                        }
                    }
                    _ => {
                        now += if op == 3 { step * 40 } else { step / 100 };
                        let got = expire(&mut w, now);
                        let mut want: Vec<u32> =
                            model.iter().filter(|m| m.0 <= now).map(|m| m.1).collect();
                        want.sort_unstable();
                        model.retain(|m| m.0 > now);
                        proptest::prop_assert_eq!(got, want, "at {}", now);
                    }
                }
                proptest::prop_assert_eq!(w.len(), model.len());
                // Memory: the pool is the most entries ever held at once, no more.
                most = most.max(model.len());
                proptest::prop_assert_eq!(w.pool(), most);
                proptest::prop_assert_eq!(
                    w.next_deadline(),
                    model.iter().map(|m| Instant::from_micros(m.0)).min()
                );
                let bits: u32 = w.occupied.iter().map(|b| b.count_ones()).sum();
                let held = w.heads.iter().filter(|h| **h != NIL).count() as u32;
                proptest::prop_assert_eq!(bits, held);
                // The horizon never passes a held deadline: an expiry it lets through
                // (`may_have_due`) is never one that finds something due.
                if let Some(first) = model.iter().map(|m| m.0).min() {
                    proptest::prop_assert!(w.horizon_us <= first, "{} > {}", w.horizon_us, first);
                }
            }
        }
    }

    #[test]
    fn memory_is_the_most_entries_held_at_once_not_each_buckets_busiest_moment() {
        // Issue 15's soak: connection churn sends bursts to ever different buckets. Here
        // 64 entries at a time land in one bucket, a different bucket each round, for every
        // bucket of the wheel; the pool never holds more than 64 nodes.
        let mut w = Wheel::new(Instant::ZERO, 4096);
        let mut now = 0;
        for round in 0..4096i64 {
            let at = now + 1 + round % 7 * TICK_US;
            for k in 0..64 {
                w.insert(e(at, k));
            }
            now = at;
            assert_eq!(expire(&mut w, now).len(), 64);
            now += TICK_US;
        }
        assert_eq!(w.len(), 0);
        assert_eq!(w.pool(), 64);
    }

    #[test]
    fn polls_before_a_deadline_later_in_the_current_tick_touch_no_bucket() {
        // A delayed ACK 20 us ahead, its core polling every 100 ns: after the expiry that
        // found it not yet due, the polls before its instant are a compare each.
        let mut w = Wheel::new(Instant::from_micros(1_000_000), 1);
        w.insert(e(1_000_020, 1));
        assert!(!w.may_have_due(Instant::from_micros(1_000_019)));
        assert!(w.may_have_due(Instant::from_micros(1_000_020)));
        w.insert(e(1_000_005, 2));
        assert_eq!(expire(&mut w, 1_000_005), vec![2]);
        assert!(!w.may_have_due(Instant::from_micros(1_000_019)));
        assert_eq!(expire(&mut w, 1_000_020), vec![1]);
        // An entry of a later revolution in the current bucket bounds nothing before the
        // next tick.
        w.insert(e(1_000_010 + 4096 * TICK_US, 3));
        w.insert(e(1_000_060, 4));
        assert_eq!(expire(&mut w, 1_000_021), Vec::<u32>::new());
        assert!(!w.may_have_due(Instant::from_micros(1_000_049)));
        assert_eq!(expire(&mut w, 1_000_060), vec![4]);
    }

    #[test]
    fn past_deadlines_fire_at_once() {
        let mut w = Wheel::new(Instant::from_micros(1_000_000), 1);
        w.insert(e(5, 1));
        assert_eq!(w.next_deadline(), Some(Instant::from_micros(5)));
        assert_eq!(expire(&mut w, 1_000_000), vec![1]);
    }

    /// A poll whose `now` lies before the last one's (the host takes `now` as given, never
    /// clamping it: `Host::poll`), with an entry armed in the past in the current bucket,
    /// fires the entry. (`expire` computed its span of ticks as `now_tick - first + 1`,
    /// negative here, cast to `usize`: `start + span` overflowed, a panic in a debug build;
    /// in a release one the sweep was skipped and `current` moved back.)
    #[test]
    fn a_poll_earlier_than_the_last_fires_what_is_due() {
        let mut w = Wheel::new(Instant::ZERO, 1);
        w.insert(e(10_000, 1));
        assert_eq!(expire(&mut w, 10_000), vec![1]);
        // Armed in the past (a deadline already passed), then a poll at an earlier instant
        // than the last one but after the deadline.
        w.insert(e(500, 2));
        assert_eq!(expire(&mut w, 600), vec![2]);
    }
}
