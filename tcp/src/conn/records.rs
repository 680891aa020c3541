//! The record boundaries not yet wholly sent: a queue that is pushed at the back (one per
//! FPDU written) and drained from the front (the records a new segment sent), kept as a
//! plain vector and an index of its first live entry rather than a ring (`VecDeque`): a
//! push is a vector's push (no wrap of the index), the searches see one slice, and a drain
//! moves the index; the dead prefix is dropped when the queue empties (at every segment
//! that sends all that was queued) or once it is at least as long as the live part.

use smoltcp::wire::TcpSeqNumber;

/// A dead prefix shorter than this is never compacted away (a few hundred octets).
const COMPACT_AT: usize = 64;

#[derive(Debug, Clone, Default)]
pub(crate) struct Records {
    /// `ends[head..]` are the live entries; `head == 0` when there are none.
    ends: Vec<TcpSeqNumber>,
    head: usize,
}

impl Records {
    /// The live entries, oldest first.
    #[inline]
    pub fn as_slice(&self) -> &[TcpSeqNumber] {
        self.ends.get(self.head..).unwrap_or(&[])
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// How many of the oldest live entries satisfy `pred`, which must hold for a prefix
    /// of them (as `partition_point`): by a search that doubles its step from the front
    /// and then halves, rather than a binary search over the whole queue. The entries a
    /// segment sends are the first few (one FPDU a segment in a bulk transfer, a few dozen
    /// small ones at most), while the queue holds every record written and not yet sent
    /// (thousands when a window's worth of Writes is posted): a few loads instead of a
    /// dozen dependent ones over the whole queue (`perf` of write_bw at MTU 1500: the
    /// binary search was most of `poll_new`, ~5 % of the sending core).
    #[inline]
    pub fn prefix_len(&self, mut pred: impl FnMut(TcpSeqNumber) -> bool) -> usize {
        let live = self.as_slice();
        // Invariant: `pred` holds for the first `lo` entries.
        let mut lo = 0;
        let mut step = 1;
        while lo + step <= live.len() && pred(live[lo + step - 1]) {
            lo += step;
            step *= 2;
        }
        // `pred` fails at `lo + step - 1` (or the queue ends before it).
        let end = (lo + step).min(live.len());
        lo + live[lo..end].partition_point(|&e| pred(e))
    }

    /// The newest entry.
    pub fn back(&self) -> Option<&TcpSeqNumber> {
        self.ends.last()
    }

    #[inline]
    pub fn push_back(&mut self, end: TcpSeqNumber) {
        self.ends.push(end);
    }

    /// Entries allocated.
    pub fn capacity(&self) -> usize {
        self.ends.capacity()
    }

    /// Gives back memory down to `n` entries (when the queue is empty).
    pub fn shrink_to(&mut self, n: usize) {
        self.ends.shrink_to(n);
    }

    /// Drops the oldest `k` live entries (at most all of them).
    #[inline]
    pub fn drain_front(&mut self, k: usize) {
        self.head = (self.head + k).min(self.ends.len());
        if self.head == self.ends.len() {
            self.ends.clear();
            self.head = 0;
        } else if self.head >= COMPACT_AT && 2 * self.head >= self.ends.len() {
            self.ends.drain(..self.head);
            self.head = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// Against a `VecDeque` driven alike: pushes and drains of every size, the live entries
    /// the same after each, and the dead prefix bounded (never longer than the live part
    /// past `COMPACT_AT`, none when empty).
    #[test]
    fn agrees_with_a_deque_and_stays_compact() {
        let mut r = Records::default();
        let mut d = VecDeque::new();
        let mut next = 0i32;
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let pushes = (x % 7) as usize;
            for _ in 0..pushes {
                next += 1 + (x >> 40) as i32 % 100;
                r.push_back(TcpSeqNumber(next));
                d.push_back(TcpSeqNumber(next));
            }
            let k = ((x >> 8) % 9) as usize;
            r.drain_front(k);
            d.drain(..k.min(d.len()));
            assert_eq!(r.as_slice(), d.iter().copied().collect::<Vec<_>>());
            // `prefix_len` agrees with a binary search at every cut of the live entries.
            let live = r.as_slice();
            for cut in live.iter().map(|e| e.0).chain([i32::MIN, next, next + 1]) {
                let want = live.partition_point(|e| e.0 <= cut);
                assert_eq!(r.prefix_len(|e| e.0 <= cut), want, "cut {cut}");
            }
            assert_eq!(r.back(), d.back());
            assert_eq!(r.is_empty(), d.is_empty());
            assert!(r.head < COMPACT_AT || r.head < r.as_slice().len());
            assert!(r.head == 0 || !r.as_slice().is_empty());
        }
    }
}
