//! Deadline queues of the connection manager (the pending requests' startup and closing
//! bounds, the MPA initiators' startup timeouts, MPA-7.1.2-27, the graceful closes'
//! bounds) and the set of zombie connections (with the bounds of their closes): structures a loop or a TCP event consults in O(1) / O(log n) whatever
//! the number of entries (a slow SYN / MPA flood holds thousands).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant as StdInstant;

use warpcore_tcp::smoltcp::time::{Duration, Instant};
use warpcore_tcp::ConnId;

/// Entries below which a queue is never compacted: a few stale entries cost nothing.
const COMPACT_SLACK: usize = 64;

/// Deadlines keyed by `K` (a slot and its generation), earliest first: a loop pops only
/// those that have passed (O(log n) each), instead of visiting every entry to find them.
/// The order may be any other `T` than an instant: the pending requests' arrival numbers
/// order the candidates for eviction the same way.
///
/// Deletion is lazy: an entry whose owner went (its slot freed or reused under another
/// generation) or whose deadline moved stays until it surfaces, and its owner's check at
/// the pop drops it. So that a churn of short-lived owners (connections accepted, evicted
/// or reset long before their deadlines) cannot grow the heap without bound, `push`'s
/// caller compacts it ([`Self::needs_compaction`], [`Self::retain`]) when it holds more
/// than twice its live owners: each compaction drops at least as many entries as were
/// pushed since the last one, O(1) amortised per push.
#[derive(Debug)]
pub(super) struct Deadlines<K: Ord + Copy, T: Ord + Copy = StdInstant> {
    heap: BinaryHeap<Reverse<(T, K)>>,
}

impl<K: Ord + Copy, T: Ord + Copy> Deadlines<K, T> {
    pub(super) fn new() -> Self {
        Deadlines {
            heap: BinaryHeap::new(),
        }
    }

    /// Adds `key`'s deadline `at`.
    pub(super) fn push(&mut self, at: T, key: K) {
        self.heap.push(Reverse((at, key)));
    }

    /// The earliest entry, live or stale.
    pub(super) fn peek(&self) -> Option<(T, K)> {
        self.heap.peek().map(|Reverse(e)| *e)
    }

    /// Whether the earliest entry is due at `now`.
    pub(super) fn is_due(&self, now: T) -> bool {
        self.peek().is_some_and(|(at, _)| at <= now)
    }

    /// Takes the earliest entry if it is due at `now`.
    pub(super) fn pop_due(&mut self, now: T) -> Option<(T, K)> {
        if self.is_due(now) {
            self.heap.pop().map(|Reverse(e)| e)
        } else {
            None
        }
    }

    /// Takes the earliest entry, due or not.
    pub(super) fn pop(&mut self) -> Option<(T, K)> {
        self.heap.pop().map(|Reverse(e)| e)
    }

    /// Drops the earliest entries `live` says are stale, so that [`Self::peek`] names a
    /// live deadline (the wake-up a caller reports).
    pub(super) fn prune_head(&mut self, mut live: impl FnMut(T, K) -> bool) {
        while let Some((at, k)) = self.peek() {
            if live(at, k) {
                break;
            }
            self.heap.pop();
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.heap.len()
    }

    /// Entries, live and stale, in no order.
    pub(super) fn iter(&self) -> impl Iterator<Item = (T, K)> + '_ {
        self.heap.iter().map(|Reverse(e)| *e)
    }

    /// Whether the queue holds more than twice `live` owners' entries (plus some slack):
    /// then it is worth a [`Self::retain`].
    pub(super) fn needs_compaction(&self, live: usize) -> bool {
        self.heap.len() > 2 * live + COMPACT_SLACK
    }

    /// Keeps the entries `live` says are live (a compaction, O(n)).
    pub(super) fn retain(&mut self, mut live: impl FnMut(T, K) -> bool) {
        self.heap.retain(|Reverse((at, k))| live(*at, *k));
    }
}

/// The TCP connections whose QP is gone, released once TCP reports them closed, indexed by
/// [`ConnId::slot`]: a TCP event (`Closed`, `Readable`) finds whether its connection is one
/// with one look-up, not a scan of the list (thousands after a mass teardown, each of their
/// events scanned them all). A slot holds at most one zombie: the stack reuses a slot only
/// after its connection is released, which for a zombie is its removal here.
///
/// A zombie left to finish a graceful close (our FIN sent, not reset) is watched
/// ([`Self::watch`]): what TCP still has to send and have acknowledged must move within
/// `EngineConfig::close_timeout_ms`, else the engine resets it (`poll_close_timers`): a
/// peer that holds its window at zero while it answers the probes (RFC 9293 3.8.6.1) kept
/// such a connection, its send buffer and its slot for good, as Linux bounds an orphaned
/// close with `tcp_orphan_retries`. The watches' deadlines are a heap of their own, slot
/// keyed, deleted lazily as [`Deadlines`]' are.
#[derive(Debug)]
pub(super) struct Zombies {
    by_slot: Vec<Option<Zombie>>,
    len: usize,
    watched: Deadlines<usize, Instant>,
    /// When `watched`'s earliest entry is due (`Instant` of `i64::MAX` micros: none).
    due: Instant,
}

#[derive(Debug, Clone, Copy)]
struct Zombie {
    tcp: ConnId,
    watch: Option<ZombieWatch>,
}

/// The progress of a zombie's graceful close ([`Zombies::watch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ZombieWatch {
    /// When `mark` last changed (or the watch began).
    pub since: Instant,
    /// Its entry's deadline in the heap.
    pub due: Instant,
    /// Octets TCP held unacknowledged at the last look.
    pub mark: usize,
}

/// No deadline.
const NO_DUE: Instant = Instant::from_micros_const(i64::MAX);

impl Default for Zombies {
    fn default() -> Self {
        Zombies {
            by_slot: Vec::new(),
            len: 0,
            watched: Deadlines::new(),
            due: NO_DUE,
        }
    }
}

impl Zombies {
    pub(super) fn new() -> Self {
        Zombies::default()
    }

    /// Adds `tcp` (again: no change).
    pub(super) fn insert(&mut self, tcp: ConnId) {
        let slot = tcp.slot();
        if self.by_slot.len() <= slot {
            self.by_slot.resize(slot + 1, None);
        }
        match &mut self.by_slot[slot] {
            Some(z) if z.tcp == tcp => {}
            z => {
                if z.replace(Zombie { tcp, watch: None }).is_none() {
                    self.len += 1;
                }
            }
        }
    }

    /// Watches zombie `tcp`'s close: `w`, its entry due at `w.due` (replacing any watch it
    /// had; nothing if `tcp` is no zombie).
    pub(super) fn watch(&mut self, tcp: ConnId, w: ZombieWatch) {
        let slot = tcp.slot();
        let Some(Some(z)) = self.by_slot.get_mut(slot) else {
            return;
        };
        if z.tcp != tcp {
            return;
        }
        z.watch = Some(w);
        self.watched.push(w.due, slot);
        if self.watched.needs_compaction(self.len) {
            let by_slot = &self.by_slot;
            self.watched
                .retain(|at, slot| watch_live(by_slot, at, slot));
        }
        self.due = self.due.min(w.due);
    }

    /// Watches zombie `tcp`'s close from `since` with `mark` octets unacknowledged: due a
    /// `bound` after `since` ([`Self::watch`]).
    pub(super) fn watch_from(&mut self, tcp: ConnId, since: Instant, bound: Duration, mark: usize) {
        let due = since + bound;
        self.watch(tcp, ZombieWatch { since, due, mark });
    }

    /// Stops watching zombie `tcp`.
    pub(super) fn unwatch(&mut self, tcp: ConnId) {
        if let Some(Some(z)) = self.by_slot.get_mut(tcp.slot()) {
            if z.tcp == tcp {
                z.watch = None;
            }
        }
    }

    /// The next watched zombie whose deadline has passed at `now`, with its watch (its
    /// entry taken: [`Self::watch`] it again to go on).
    pub(super) fn pop_due(&mut self, now: Instant) -> Option<(ConnId, ZombieWatch)> {
        let mut found = None;
        while let Some((at, slot)) = self.watched.pop_due(now) {
            if let Some(Some(z)) = self.by_slot.get(slot) {
                if let Some(w) = z.watch.filter(|w| w.due == at) {
                    found = Some((z.tcp, w));
                    break;
                }
            }
        }
        self.note_due();
        found
    }

    /// The earliest live deadline of a watched zombie (stale entries ahead of it dropped).
    pub(super) fn next_due(&mut self) -> Option<Instant> {
        let by_slot = &self.by_slot;
        self.watched
            .prune_head(|at, slot| watch_live(by_slot, at, slot));
        self.note_due();
        self.watched.peek().map(|(at, _)| at)
    }

    /// When the earliest entry of the watches is due, live or stale (a loop compares its
    /// time with it: one comparison).
    pub(super) fn due(&self) -> Instant {
        self.due
    }

    fn note_due(&mut self) {
        self.due = self.watched.peek().map_or(NO_DUE, |(at, _)| at);
    }

    pub(super) fn contains(&self, tcp: ConnId) -> bool {
        matches!(self.by_slot.get(tcp.slot()), Some(Some(z)) if z.tcp == tcp)
    }

    /// Takes `tcp` out; whether it was a zombie.
    pub(super) fn remove(&mut self, tcp: ConnId) -> bool {
        match self.by_slot.get_mut(tcp.slot()) {
            Some(z) if z.is_some_and(|z| z.tcp == tcp) => {
                *z = None;
                self.len -= 1;
                true
            }
            _ => false,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }
}

/// Whether the watches' entry `(at, slot)` is its zombie's live one.
fn watch_live(by_slot: &[Option<Zombie>], at: Instant, slot: usize) -> bool {
    matches!(by_slot.get(slot), Some(Some(z)) if z.watch.is_some_and(|w| w.due == at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn deadlines_pop_in_order_only_when_due() {
        let t0 = StdInstant::now();
        let ms = Duration::from_millis;
        let mut d = Deadlines::new();
        d.push(t0 + ms(30), 3u32);
        d.push(t0 + ms(10), 1);
        d.push(t0 + ms(20), 2);
        assert_eq!(d.pop_due(t0 + ms(5)), None);
        assert_eq!(d.pop_due(t0 + ms(20)), Some((t0 + ms(10), 1)));
        assert_eq!(d.pop_due(t0 + ms(20)), Some((t0 + ms(20), 2)));
        assert_eq!(d.pop_due(t0 + ms(20)), None);
        d.prune_head(|_, k| k != 3);
        assert_eq!(d.peek(), None);
    }

    #[test]
    fn a_churn_of_stale_entries_is_compacted() {
        let t0 = StdInstant::now();
        let mut d = Deadlines::new();
        // One live owner (key 0) while 10,000 short-lived ones come and go.
        d.push(t0, 0u32);
        for k in 1..10_000u32 {
            d.push(t0, k);
            if d.needs_compaction(1) {
                d.retain(|_, key| key == 0 || key == k);
            }
        }
        assert!(d.len() <= 2 + COMPACT_SLACK, "{} entries", d.len());
    }
}
