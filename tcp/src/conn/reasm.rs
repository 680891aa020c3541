//! Out-of-order segments held until the gap before them fills (RFC 9293 3.10.7.4 "seventh"
//! allows keeping segments beyond RCV.NXT inside the window). Blocks are kept disjoint and
//! bounded in number; what does not fit is dropped, never merged wrongly.
//!
//! A connection's window bounds what it holds; the octets every connection of a host holds
//! together are bounded by the host's [`OutOfOrderBudget`]
//! (`StackConfig::out_of_order_budget_bytes`), which each [`Reassembly`] of the host charges
//! for every octet it takes and credits for every octet it lets go (taken when the gap
//! fills, purged, or dropped with its connection), so the count is exact by construction.
//!
//! The budget also keeps its holders ordered by what they hold, so that a connection
//! refused while it holds less than its fair share can take octets back from the largest
//! holder (reneging, which RFC 2018 8 allows): one peer filling the budget cannot leave
//! the host's other connections without out-of-order room for as long as its connections
//! live. The host decides ([`crate::host`]); [`Reassembly::renege`] gives the octets up.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// Most disjoint blocks held (a peer cannot make us track more holes than this).
pub(crate) const MAX_BLOCKS: usize = 64;

/// Blocks remembered in the order they took octets: as many as a SACK option holds.
const RECENT: usize = 3;

/// The out-of-order octets the connections of one host hold together, and the most they
/// may (`StackConfig::out_of_order_budget_bytes`): a peer, or many, with thousands of
/// connections could otherwise make the host hold each one's whole window out of order
/// (Linux bounds the like with `tcp_mem`). Shared by the host and its connections'
/// [`Reassembly`]s, and touched on the out-of-order paths only: an insert that takes new
/// octets, a take when a gap fills, a purge, a connection dropped. Atomic because the host
/// (and every connection with it) moves between threads; one thread drives it at a time,
/// so the counters and the holders' lock are never contended.
pub(crate) struct OutOfOrderBudget {
    held: AtomicUsize,
    limit: usize,
    refused: AtomicU64,
    /// `(octets held, key)` of every keyed [`Reassembly`] holding octets (the host keys
    /// each connection by its slot): the largest holder without a walk over the table.
    /// Updated where `held` is (the out-of-order paths), never on the in-order path.
    holders: Mutex<BTreeSet<(usize, u32)>>,
    /// Times octets were taken back from a holder ([`Reassembly::renege`]), and how many.
    reneges: AtomicU64,
    reneged: AtomicU64,
}

impl std::fmt::Debug for OutOfOrderBudget {
    /// The limit only: the count is the host's, not the connection's (two copies of a
    /// connection that print alike must print alike whatever the others hold).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutOfOrderBudget")
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

impl OutOfOrderBudget {
    /// A budget of `limit` octets, none held.
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(OutOfOrderBudget {
            held: AtomicUsize::new(0),
            limit,
            refused: AtomicU64::new(0),
            holders: Mutex::new(BTreeSet::new()),
            reneges: AtomicU64::new(0),
            reneged: AtomicU64::new(0),
        })
    }

    /// The most octets all holders may hold together.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Times octets held were taken back from a holder, and the octets taken.
    pub fn reneged(&self) -> (u64, u64) {
        (self.reneges.load(Relaxed), self.reneged.load(Relaxed))
    }

    /// A refusal that the host undid: the segment was held after all, once a holder
    /// reneged (it is not a segment dropped for want of budget).
    pub fn forgive_refusal(&self) {
        let before = self.refused.fetch_sub(1, Relaxed);
        debug_assert!(
            before > 0,
            "out-of-order budget: a refusal forgiven, none counted"
        );
    }

    fn holders(&self) -> MutexGuard<'_, BTreeSet<(usize, u32)>> {
        // Nothing panics while the lock is held; a poisoned set is still exact.
        self.holders.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The holders' index as it is now (tests and the fuzz body compare it with the
    /// connections').
    #[cfg(any(test, feature = "fuzzing"))]
    pub fn holders_snapshot(&self) -> BTreeSet<(usize, u32)> {
        self.holders().clone()
    }

    /// The holder `key` went from `before` to `after` octets.
    fn reindex(&self, key: u32, before: usize, after: usize) {
        if before == after {
            return;
        }
        let mut h = self.holders();
        if before > 0 {
            h.remove(&(before, key));
        }
        if after > 0 {
            h.insert((after, key));
        }
    }

    /// How many keyed reassemblies hold octets, and the one that holds the most other than
    /// `key`: `(octets, key)`.
    pub fn largest_other(&self, key: u32) -> (usize, Option<(usize, u32)>) {
        let h = self.holders();
        let largest = h.iter().rev().find(|&&(_, k)| k != key).copied();
        (h.len(), largest)
    }

    /// Octets held now.
    pub fn held(&self) -> usize {
        self.held.load(Relaxed)
    }

    /// Segments refused so far for want of budget.
    pub fn refused(&self) -> u64 {
        self.refused.load(Relaxed)
    }

    /// Takes `n` octets if they fit (counting a refusal if not).
    fn charge(&self, n: usize) -> bool {
        let fits = self
            .held
            .fetch_update(Relaxed, Relaxed, |h| {
                h.checked_add(n).filter(|&t| t <= self.limit)
            })
            .is_ok();
        if !fits {
            self.refused.fetch_add(1, Relaxed);
        }
        fits
    }

    /// Takes `n` octets whether they fit or not (a copy of octets already held).
    fn charge_anyway(&self, n: usize) {
        self.held.fetch_add(n, Relaxed);
    }

    /// Gives `n` octets back.
    fn credit(&self, n: usize) {
        let before = self.held.fetch_sub(n, Relaxed);
        debug_assert!(
            before >= n,
            "out-of-order budget: {n} octets given back, {before} held"
        );
    }
}

/// What [`Reassembly::insert`] did with a segment's octets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stored {
    /// Held (or held already: a copy of octets the blocks have).
    Held,
    /// Refused: its new octets would take the host's [`OutOfOrderBudget`] past its limit
    /// (counted there).
    OverBudget,
    /// Refused: it needed a block of its own and [`MAX_BLOCKS`] are held already (the
    /// connection counts it: `ConnStats::out_of_order_no_block`).
    NoBlock,
}

/// Blocks keyed by stream offset (octets after the peer's ISN + 1).
#[derive(Debug, Default)]
pub(crate) struct Reassembly {
    blocks: BTreeMap<u64, VecDeque<u8>>,
    /// Starts of the blocks that most recently took octets, the latest first: the first
    /// SACK block, then the blocks most recently reported first (RFC 2018 4). Entries whose
    /// block merged into another or was taken are skipped when read.
    recent: [Option<u64>; RECENT],
    octets: usize,
    /// The host's budget these octets count against ([`OutOfOrderBudget`]); `None` for a
    /// connection outside a host (the window alone bounds it).
    budget: Option<Arc<OutOfOrderBudget>>,
    /// This reassembly's key among the budget's holders (the host's slot of its
    /// connection); `None`: not among them (a copy, or no budget).
    key: Option<u32>,
    /// Octets held before an insert that it copied or moved (blocks joined into a span, a
    /// block's buffer reallocated or rotated): what a peer can make a small segment cost.
    /// The tests count it instead of timing a flood.
    #[cfg(test)]
    moved: usize,
}

/// A copy holds its octets twice: the budget counts both (tests copy connections). The copy
/// is not among the budget's holders (it has no key): only the original can be reneged.
impl Clone for Reassembly {
    fn clone(&self) -> Self {
        if let Some(b) = &self.budget {
            b.charge_anyway(self.octets);
        }
        Reassembly {
            blocks: self.blocks.clone(),
            recent: self.recent,
            octets: self.octets,
            budget: self.budget.clone(),
            key: None,
            #[cfg(test)]
            moved: self.moved,
        }
    }
}

/// A connection dropped (released, removed, its host gone) gives its octets back.
impl Drop for Reassembly {
    fn drop(&mut self) {
        let n = std::mem::take(&mut self.octets);
        self.gave_back(n);
    }
}

impl Reassembly {
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Octets held.
    pub fn octets(&self) -> usize {
        self.octets
    }

    /// Counts the octets held against `budget` from now on (the host's, given to each
    /// connection it makes), among its holders as `key` if given (the host's slot of the
    /// connection: a key names one reassembly of the budget at a time).
    pub fn set_budget(&mut self, budget: Arc<OutOfOrderBudget>, key: Option<u32>) {
        if let Some(old) = &self.budget {
            old.credit(self.octets);
            if let Some(k) = self.key {
                old.reindex(k, self.octets, 0);
            }
        }
        budget.charge_anyway(self.octets);
        if let Some(k) = key {
            budget.reindex(k, 0, self.octets);
        }
        self.budget = Some(budget);
        self.key = key;
    }

    /// `n` of the octets held before this change are no longer held (`self.octets` is
    /// already what is left): the budget is credited and the holders' index follows.
    fn gave_back(&self, n: usize) {
        if let Some(b) = &self.budget {
            b.credit(n);
            if let Some(k) = self.key {
                b.reindex(k, self.octets + n, self.octets);
            }
        }
    }

    /// Drops every octet held, giving them back to the budget (the peer's FIN makes them
    /// meaningless, the connection closed, or its buffers were shed). Assigning a fresh
    /// `Reassembly` instead would lose the budget.
    pub fn clear(&mut self) {
        let n = std::mem::take(&mut self.octets);
        self.gave_back(n);
        self.blocks = BTreeMap::new();
        self.recent = [None; RECENT];
        #[cfg(test)]
        {
            self.moved = 0;
        }
    }

    /// Stores `data` at stream offset `off` (beyond the in-order point), merging with
    /// neighbours. Octets already held are kept as they were (the first copy wins, as the
    /// in-order path does).
    ///
    /// The merged block grows in place from the largest block it joins, at either end (a
    /// `VecDeque` takes octets at its front as cheaply as at its back): a merge copies the
    /// new octets and the smaller blocks it joins, never the largest one. So the common
    /// case, each segment after a loss extending the block that ends where it starts, costs
    /// the copy of that segment alone (amortised), and no peer can make a small segment
    /// move a large block: each held octet is copied only into a block at least twice the
    /// size of the one it was in. (The first version built every merge in a new buffer:
    /// after one loss the k-th segment behind the hole copied k segments, and at 1 % loss
    /// that took 14 % of both engines' instructions in `engine_profile`'s 64 KiB Writes.
    /// The second grew the first block it touched: a peer sending one octet just before a
    /// block of the window's size had all of it copied, 4 MiB per 55-octet segment.)
    ///
    /// Refuses the segment, holding nothing more, when the octets not yet held would take
    /// the host's [`OutOfOrderBudget`] past its limit ([`Stored::OverBudget`], the refusal
    /// counted there), or would need a block beyond [`MAX_BLOCKS`] ([`Stored::NoBlock`]):
    /// the segment is dropped whole, so no SACK block reports
    /// it (RFC 2018 3 lets a receiver report only what it holds) and the peer sends it again
    /// (RFC 9293 3.10.7.4 lets a receiver keep or drop segments beyond RCV.NXT). Nothing
    /// held is given up here; the host may have another holder give some up
    /// ([`Reassembly::renege`]) and insert the segment again.
    pub fn insert(&mut self, off: u64, data: &[u8]) -> Stored {
        if data.is_empty() {
            return Stored::Held;
        }
        let end = off + data.len() as u64;
        // Blocks never touch one another, so at most one block that starts at or before
        // `off` touches the new octets: the last one starting there, if it reaches `off`.
        // The others that do start in `(off, end]`.
        let before = self
            .blocks
            .range(..=off)
            .next_back()
            .filter(|(s, b)| **s + b.len() as u64 >= off);
        let (mut first, mut last_end) = (off, end);
        let mut base: Option<(u64, usize)> = None;
        // Octets of `[off, end)` held already: what the insert does not add. (A block
        // that only touches the new octets overlaps none.)
        let mut overlap = 0;
        for (&s, b) in before.into_iter().chain(self.blocks.range(off + 1..=end)) {
            let e = s + b.len() as u64;
            overlap += e.min(end) - s.max(off);
            first = first.min(s);
            last_end = last_end.max(e);
            if base.is_none_or(|(_, l)| b.len() > l) {
                base = Some((s, b.len()));
            }
        }
        // A block of their own for the new octets only if there is room for one.
        if base.is_none() && self.blocks.len() >= MAX_BLOCKS {
            return Stored::NoBlock;
        }
        // The octets this insert adds, charged before anything changes.
        let new = data.len() - overlap as usize;
        if new > 0 {
            if let Some(b) = &self.budget {
                if !b.charge(new) {
                    return Stored::OverBudget;
                }
            }
        }
        let held_before = self.octets;
        // The base: the largest block joined (its octets stay where they are), else the
        // new octets.
        let (start, mut buf) = match base.and_then(|(s, _)| Some((s, self.blocks.remove(&s)?))) {
            Some((s, b)) => {
                self.octets -= b.len();
                (s, b)
            }
            None => (off, VecDeque::from(data.to_vec())),
        };
        // What lies before the base and after it: the new octets, overwritten by those of
        // the other blocks joined (which lie wholly inside those spans: blocks are
        // disjoint and do not touch).
        let held_end = start + buf.len() as u64;
        if first < start {
            let front = self.take_span(first, start, off, data);
            let n = front.len();
            self.note_growth(&buf, n);
            buf.extend(&front);
            buf.rotate_right(n);
            #[cfg(test)]
            {
                self.moved += n.min(buf.len() - n);
            }
        }
        if last_end > held_end {
            if self.blocks.range(held_end..last_end).next().is_none() {
                // No other block after the base (the common case): the new octets alone
                // extend it, without a span built first.
                let rest = &data[(held_end - off) as usize..];
                self.note_growth(&buf, rest.len());
                buf.extend(rest);
            } else {
                let back = self.take_span(held_end, last_end, off, data);
                self.note_growth(&buf, back.len());
                buf.extend(&back);
            }
        }
        self.octets += buf.len();
        // What the budget was charged is what the blocks grew by.
        debug_assert_eq!(self.octets, held_before + new);
        if let (Some(b), Some(k)) = (&self.budget, self.key) {
            b.reindex(k, held_before, self.octets);
        }
        self.blocks.insert(first, buf);
        // RFC 2018 4: this block goes first, the ones reported before it after it (those
        // still held apart: a block this insert joined is part of this one now).
        let mut recent = [None; RECENT];
        recent[0] = Some(first);
        let mut k = 1;
        for &r in self.recent.iter().flatten() {
            if k < RECENT && r != first && self.blocks.contains_key(&r) {
                recent[k] = Some(r);
                k += 1;
            }
        }
        self.recent = recent;
        Stored::Held
    }

    /// Octets of memory the blocks' buffers take (tests only).
    #[cfg(test)]
    fn capacity(&self) -> usize {
        self.blocks.values().map(VecDeque::capacity).sum()
    }

    /// Counts (tests only) the octets of `buf` that growing it by `n` reallocates.
    #[inline(always)]
    fn note_growth(&mut self, buf: &VecDeque<u8>, n: usize) {
        #[cfg(test)]
        if buf.len() + n > buf.capacity() {
            self.moved += buf.len();
        }
        let _ = (buf, n);
    }

    /// The octets of `[from, to)`, a span next to the block a merge grows: the new octets
    /// (`data` at `off`) where they lie, overwritten by the blocks held in the span, which
    /// are taken out of the map (the span holds them whole).
    fn take_span(&mut self, from: u64, to: u64, off: u64, data: &[u8]) -> Vec<u8> {
        let mut span = vec![0; (to - from) as usize];
        let (lo, hi) = (from.max(off), to.min(off + data.len() as u64));
        if lo < hi {
            span[(lo - from) as usize..(hi - from) as usize]
                .copy_from_slice(&data[(lo - off) as usize..(hi - off) as usize]);
        }
        while let Some(s) = self.blocks.range(from..to).next().map(|(&s, _)| s) {
            let Some(b) = self.blocks.remove(&s) else {
                break;
            };
            self.octets -= b.len();
            let at = (s - from) as usize;
            #[cfg(test)]
            {
                self.moved += b.len();
            }
            let (x, y) = b.as_slices();
            span[at..at + x.len()].copy_from_slice(x);
            span[at + x.len()..at + b.len()].copy_from_slice(y);
        }
        span
    }

    /// The first octets of `[off, end)` already held, as `(start, end)` stream offsets: a
    /// segment's duplicate part, reported as a D-SACK block (RFC 2883).
    pub fn held_within(&self, off: u64, end: u64) -> Option<(u64, u64)> {
        if let Some((&s, b)) = self.blocks.range(..=off).next_back() {
            let e = s + b.len() as u64;
            if e > off {
                return Some((off, e.min(end)));
            }
        }
        let (&s, b) = self.blocks.range(off..end).next()?;
        Some((s, (s + b.len() as u64).min(end)))
    }

    /// Takes the block that starts at or before `off` and reaches past it: the octets from
    /// `off` on (the block's own buffer, made contiguous, not a copy). Blocks wholly before
    /// `off` are dropped. Either way their octets are given back to the budget.
    pub fn take_at(&mut self, off: u64) -> Option<Vec<u8>> {
        loop {
            let (&s, b) = self.blocks.iter().next()?;
            let e = s + b.len() as u64;
            if s > off {
                return None;
            }
            let mut b = self.blocks.remove(&s)?;
            self.octets -= b.len();
            self.gave_back(b.len());
            for r in &mut self.recent {
                if *r == Some(s) {
                    *r = None;
                }
            }
            if e > off {
                b.drain(..(off - s) as usize);
                return Some(Vec::from(b));
            }
        }
    }

    /// Gives up at least `n` of the octets held (all of them if fewer), the highest stream
    /// offsets first: those the connection would pass to its user last, as Linux's
    /// `tcp_prune_ofo_queue` drops the queue's tail. Whole blocks go, and the last one
    /// reached is cut at its end, so no new hole is made and the blocks left are what
    /// the SACK blocks report from now on (RFC 2018 8 lets a receiver discard what it
    /// SACKed; the sender keeps it until it is cumulatively acknowledged). Returns the
    /// octets given back to the budget.
    pub fn renege(&mut self, n: usize) -> usize {
        let mut freed = 0;
        while freed < n {
            let Some(mut last) = self.blocks.last_entry() else {
                break;
            };
            let len = last.get().len();
            if len <= n - freed {
                let s = *last.key();
                last.remove();
                for r in &mut self.recent {
                    if *r == Some(s) {
                        *r = None;
                    }
                }
                freed += len;
            } else {
                let b = last.get_mut();
                b.truncate(len - (n - freed));
                // The buffer's memory goes with the octets (truncating keeps it): the
                // budget bounds what the blocks take, about twice the octets at most, and
                // the connection reneged for takes its own. Shrunk to twice what is left
                // once it takes four times that: the copy of what is left is paid for by
                // the octets given up since the last one (at least half), so a peer
                // cannot make each renege copy a large block.
                if b.capacity() > 4 * b.len() {
                    b.shrink_to(2 * b.len());
                }
                freed = n;
            }
        }
        self.octets -= freed;
        self.gave_back(freed);
        if let Some(b) = self.budget.as_ref().filter(|_| freed > 0) {
            b.reneges.fetch_add(1, Relaxed);
            b.reneged.fetch_add(freed as u64, Relaxed);
        }
        freed
    }

    /// Up to `N` blocks as (start, end) stream offsets: the one that took the latest
    /// octets first, then the others that most recently took octets, latest first (RFC
    /// 2018 4: the blocks reported first before, repeated so that the loss of an ACK hides
    /// none; the lowest ones instead left a block in the middle reported once), then the
    /// rest in ascending order; `None` past the last. An array: a segment's SACK option
    /// holds four at most (three beside timestamps, RFC 2018 3), and building it allocates
    /// nothing.
    pub fn sack_blocks<const N: usize>(&self) -> [Option<(u64, u64)>; N] {
        let mut out = [None; N];
        let mut k = 0;
        let recent = self
            .recent
            .iter()
            .flatten()
            .filter_map(|r| self.blocks.get_key_value(r));
        for (&s, b) in recent.chain(&self.blocks) {
            if k >= N {
                break;
            }
            if !out[..k].iter().flatten().any(|&(l, _)| l == s) {
                out[k] = Some((s, s + b.len() as u64));
                k += 1;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_merge_and_come_back_in_order() {
        let mut r = Reassembly::default();
        r.insert(10, &[1; 5]);
        r.insert(20, &[2; 5]);
        r.insert(14, &[3; 7]); // bridges both
        assert_eq!(r.sack_blocks::<3>(), [Some((10, 25)), None, None]);
        let b = r.take_at(12).expect("block");
        // The first copies win where they overlap.
        assert_eq!(&b[..3], &[1, 1, 1]);
        assert_eq!(&b[3..8], &[3, 3, 3, 3, 3]);
        assert_eq!(&b[8..], &[2, 2, 2, 2, 2]);
        assert!(r.is_empty());
        assert_eq!(r.octets(), 0);
    }

    /// Random inserts against a model (one slot per octet, the first copy wins): the same
    /// octets held, in disjoint blocks, and `take_at` gives back the model's run.
    #[test]
    fn random_inserts_match_a_first_copy_wins_model() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..300 {
            let mut r = Reassembly::default();
            let mut model: Vec<Option<u8>> = vec![None; 400];
            let mut blocks_ever = 0;
            for k in 0..(1 + next() % 30) {
                let off = 10 + next() % 300;
                let len = 1 + next() % 60;
                let data: Vec<u8> = (0..len).map(|i| (k * 61 + i + round) as u8).collect();
                // At most 30 inserts: the block limit is never reached here.
                let before = r.clone();
                r.insert(off, &data);
                let held: usize = r.blocks.values().map(|b| b.len()).sum();
                assert_eq!(held, r.octets(), "{before:?} + {off} {}", data.len());
                blocks_ever = blocks_ever.max(r.blocks.len());
                // The SACK blocks: the most recent first, then the others in order.
                let mut want: Vec<(u64, u64)> = Vec::new();
                let block = |s: u64| (s, s + r.blocks[&s].len() as u64);
                for s in r.recent.iter().flatten().chain(r.blocks.keys()) {
                    if r.blocks.contains_key(s) && want.iter().all(|w| w.0 != *s) {
                        want.push(block(*s));
                    }
                }
                let got = r.sack_blocks::<3>();
                let n = want.len().min(3);
                assert_eq!(got.iter().flatten().copied().collect::<Vec<_>>(), want[..n]);
                assert!(got[n..].iter().all(Option::is_none));
                for (i, &d) in data.iter().enumerate() {
                    model[off as usize + i].get_or_insert(d);
                }
                let modelled = model.iter().filter(|m| m.is_some()).count();
                assert_eq!(r.octets(), modelled, "{before:?} + {off} {}", data.len());
            }
            assert!(blocks_ever <= MAX_BLOCKS);
            assert_eq!(r.octets(), model.iter().filter(|m| m.is_some()).count());
            // Blocks are disjoint and hold exactly the model's octets.
            let mut last_end = 0;
            for (&s, b) in &r.blocks {
                assert!(
                    s > last_end || last_end == 0,
                    "blocks touch or overlap at {s}"
                );
                for (i, &o) in b.iter().enumerate() {
                    assert_eq!(model[s as usize + i], Some(o), "octet {}", s as usize + i);
                }
                assert!(model[s as usize - 1].is_none());
                assert!(model[s as usize + b.len()].is_none());
                last_end = s + b.len() as u64;
            }
            // Taking from inside the first block gives the rest of its run.
            if let Some((&s, b)) = r.blocks.iter().next() {
                let (s, len) = (s, b.len() as u64);
                let at = s + next() % len;
                let got = r.take_at(at).expect("block");
                let want: Vec<u8> = model[at as usize..(s + len) as usize]
                    .iter()
                    .map(|m| m.expect("held"))
                    .collect();
                assert_eq!(got, want);
            }
        }
    }

    /// A hostile peer holds a block of the window's size out of order, then sends one
    /// octet at a time just before it (and pairs of octets, the first a block of its own,
    /// the second joining it to the large one): each merge copies the few new octets, not
    /// the large block (RFC 9293 3.10.7.4 lets us keep such octets; it does not make us pay
    /// for them again at every segment). The second version of `insert` grew the first
    /// block a segment touched, so each of these segments copied all 16 MiB: 3,000 of them
    /// took 10 s on the review's machine (48 GB copied). The test counts what was moved.
    #[test]
    fn octets_before_a_large_block_do_not_copy_it() {
        let big = 16 << 20;
        let at = 1 << 30;
        let mut r = Reassembly::default();
        r.insert(at, &vec![7; big]);
        let mut first = at;
        for _ in 0..1000 {
            first -= 1;
            r.insert(first, &[1]);
        }
        for _ in 0..1000 {
            r.insert(first - 2, &[2]);
            r.insert(first - 1, &[3]);
            first -= 2;
        }
        // The large block's buffer grows a few times (doubling: once here), and each pair's
        // lone octet is joined once: never the block per segment (48 GB before).
        assert!(
            r.moved <= 2 * big + 4 * 3000,
            "3,000 small segments before a 16 MiB block moved {} octets",
            r.moved
        );
        assert_eq!(r.sack_blocks::<2>(), [Some((first, at + big as u64)), None]);
        assert_eq!(r.octets(), big + 3000);
        let b = r.take_at(first).expect("the block");
        let want: Vec<u8> = (0..1000)
            .flat_map(|_| [2, 3])
            .chain(std::iter::repeat_n(1, 1000))
            .chain(std::iter::repeat_n(7, big))
            .collect();
        assert!(b == want, "the octets held, in order");
    }

    /// A segment that bridges two blocks keeps both blocks' octets where it overlaps them
    /// and fills the gap, whichever of the three is the largest (the base a merge grows).
    #[test]
    fn a_bridging_segment_keeps_both_blocks_whichever_is_largest() {
        for (a_len, b_len, new_len) in [
            (2, 50, 30),
            (50, 2, 30),
            (5, 5, 200),
            (1, 1, 11),
            (1, 1, 12),
        ] {
            let mut r = Reassembly::default();
            let a = 100u64;
            let b = a + a_len as u64 + 10;
            r.insert(a, &vec![1; a_len]);
            r.insert(b, &vec![2; b_len]);
            // From inside the first block to past the second's end (or to its middle).
            let off = a + a_len as u64 - 1;
            r.insert(off, &vec![3; new_len]);
            let mut model = vec![None; 1000];
            for (s, len, v) in [(a, a_len, 1u8), (b, b_len, 2), (off, new_len, 3)] {
                for m in &mut model[s as usize..s as usize + len] {
                    m.get_or_insert(v);
                }
            }
            let want: Vec<u8> = model[a as usize..].iter().map_while(|m| *m).collect();
            let end = a + want.len() as u64;
            assert_eq!(
                r.sack_blocks::<2>(),
                [Some((a, end)), None],
                "{a_len} {b_len}"
            );
            assert_eq!(r.octets(), want.len());
            assert_eq!(r.take_at(a), Some(want), "{a_len} {b_len} {new_len}");
            assert!(r.is_empty());
        }
    }

    /// A renege gives the memory of the octets it gives up back, not only their
    /// count. The budget bounds what the host's reassemblies take in memory ("up to about
    /// twice" the octets held, `StackConfig::out_of_order_budget_bytes`); a block cut at
    /// its end kept its whole buffer, so a connection reneged from the whole budget down to
    /// a share still held the memory of all of it while the connection it reneged for took
    /// its share in new buffers: each holder kept twice its peak, not its share (RFC 2018 8
    /// lets the receiver discard the octets; Linux's `tcp_prune_ofo_queue` frees them).
    #[test]
    fn renege_gives_the_memory_back() {
        let budget = OutOfOrderBudget::new(1 << 20);
        let mut r = Reassembly::default();
        r.set_budget(Arc::clone(&budget), Some(0));
        // One block of 64 segments behind a hole, grown segment by segment.
        for k in 0..64u64 {
            assert_eq!(r.insert(1000 + k * 1000, &[k as u8; 1000]), Stored::Held);
        }
        assert!(r.capacity() >= 64_000);
        assert_eq!(r.renege(60_000), 60_000);
        assert_eq!(r.octets(), 4_000);
        assert!(
            r.capacity() <= 2 * r.octets(),
            "{} octets held in buffers of {}",
            r.octets(),
            r.capacity()
        );
        // Small reneges after it copy nothing again (the shrink is paid for by the octets
        // given up before it, so a peer cannot make each renege copy the block).
        let cap = r.capacity();
        for _ in 0..10 {
            assert_eq!(r.renege(1), 1);
        }
        assert_eq!(r.capacity(), cap);
        // What is left is intact and grows again.
        assert_eq!(r.insert(4990, &[3; 10]), Stored::Held);
        assert_eq!(r.insert(5000, &[4; 1000]), Stored::Held);
        let b = r.take_at(1000).expect("the block");
        assert_eq!(b.len(), 5_000);
        assert!(b.iter().enumerate().all(|(i, &o)| o == (i / 1000) as u8));
    }

    /// The host's budget over several reassemblies at once (the stack-wide bound
    /// of out-of-order octets): random inserts, takes, purges, copies and drops against a
    /// first-copy-wins model per reassembly, with a budget that refuses many of them.
    /// After every step the budget's count is the sum of the octets held (never above its
    /// limit) and its holders' index is exactly each keyed reassembly's octets; an insert
    /// is refused exactly when the octets it would add do not fit, and a refused one
    /// changes nothing; a renege gives up the highest octets held, as many as asked (or
    /// all); when the last reassembly goes, nothing is held and no holder is indexed.
    #[test]
    fn budget_counts_exactly_what_every_reassembly_holds() {
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut refusals = 0;
        for round in 0..200u64 {
            let limit = 1 + (next() % 400) as usize;
            let budget = OutOfOrderBudget::new(limit);
            let mut rs: Vec<(Reassembly, Vec<Option<u8>>)> = (0..4)
                .map(|i| {
                    let mut r = Reassembly::default();
                    r.set_budget(Arc::clone(&budget), Some(i));
                    (r, vec![None; 400])
                })
                .collect();
            for k in 0..60u64 {
                let i = (next() % rs.len() as u64) as usize;
                let (r, model) = &mut rs[i];
                match next() % 10 {
                    0 => {
                        // The gap fills: everything up to the first block's end goes.
                        if let Some((&s, b)) = r.blocks.iter().next() {
                            let e = s + b.len() as u64;
                            let got = r.take_at(s).expect("the first block");
                            assert_eq!(got.len() as u64, e - s);
                            for m in &mut model[..e as usize] {
                                *m = None;
                            }
                        }
                    }
                    1 => {
                        r.clear();
                        model.iter_mut().for_each(|m| *m = None);
                    }
                    2 => {
                        // A copy (a test's clone of a connection) counts too, until dropped.
                        let copy = r.clone();
                        let held: usize = rs.iter().map(|(r, _)| r.octets()).sum();
                        assert_eq!(budget.held(), held + copy.octets());
                    }
                    3 => {
                        // A connection dropped: a fresh one takes its place.
                        let mut fresh = Reassembly::default();
                        fresh.set_budget(Arc::clone(&budget), Some(i as u32));
                        *r = fresh;
                        model.iter_mut().for_each(|m| *m = None);
                    }
                    4 => {
                        // Reneged: the highest octets held go, `n` of them or all.
                        let n = (next() % 80) as usize;
                        let before = r.octets();
                        let (times, octets) = budget.reneged();
                        let freed = r.renege(n);
                        assert_eq!(freed, n.min(before));
                        let mut left = freed;
                        for m in model.iter_mut().rev().filter(|m| m.is_some()) {
                            if left == 0 {
                                break;
                            }
                            *m = None;
                            left -= 1;
                        }
                        assert_eq!(r.octets(), model.iter().flatten().count());
                        let counted = u64::from(freed > 0);
                        assert_eq!(budget.reneged(), (times + counted, octets + freed as u64));
                    }
                    _ => {
                        let off = 10 + next() % 300;
                        let len = 1 + next() % 60;
                        let data: Vec<u8> = (0..len).map(|j| (k * 61 + j + round) as u8).collect();
                        let new = (off..off + len)
                            .filter(|&o| model[o as usize].is_none())
                            .count();
                        let fits = budget.held() + new <= limit;
                        let room = r.blocks.len() < MAX_BLOCKS;
                        let (before, refused) = (r.octets(), budget.refused());
                        let stored = r.insert(off, &data) == Stored::Held;
                        if !fits && new > 0 {
                            assert!(!stored, "{new} octets stored past the budget");
                            assert_eq!(r.octets(), before, "a refused insert held octets");
                            assert_eq!(budget.refused(), refused + 1);
                            refusals += 1;
                        } else if room {
                            assert!(stored, "{new} octets refused within the budget");
                            for (j, &d) in data.iter().enumerate() {
                                model[off as usize + j].get_or_insert(d);
                            }
                        }
                        assert_eq!(r.octets(), model.iter().flatten().count());
                    }
                }
                let held: usize = rs.iter().map(|(r, _)| r.octets()).sum();
                assert_eq!(budget.held(), held, "round {round} step {k}");
                assert!(budget.held() <= limit);
                let indexed: BTreeSet<(usize, u32)> = rs
                    .iter()
                    .enumerate()
                    .filter(|(_, (r, _))| r.octets() > 0)
                    .map(|(i, (r, _))| (r.octets(), i as u32))
                    .collect();
                assert_eq!(*budget.holders(), indexed, "round {round} step {k}");
            }
            // Every octet held is the model's.
            for (r, model) in &rs {
                for (&s, b) in &r.blocks {
                    for (j, &o) in b.iter().enumerate() {
                        assert_eq!(model[s as usize + j], Some(o));
                    }
                }
            }
            drop(rs);
            assert_eq!(
                budget.held(),
                0,
                "octets left counted after every reassembly went"
            );
            assert!(budget.holders().is_empty(), "holders left indexed");
        }
        assert!(refusals > 100, "the budget refused only {refusals} inserts");
    }

    #[test]
    fn most_recent_block_is_reported_first_and_holes_are_bounded() {
        let mut r = Reassembly::default();
        for k in 0..(MAX_BLOCKS as u64 + 10) {
            r.insert(100 + k * 10, &[0; 2]);
        }
        assert_eq!(r.sack_blocks::<100>().iter().flatten().count(), MAX_BLOCKS);
        r.insert(100, &[0; 4]);
        assert_eq!(r.sack_blocks::<1>(), [Some((100, 104))]);
        assert_eq!(r.take_at(50), None);
    }
}
