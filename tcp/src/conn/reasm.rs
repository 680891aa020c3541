//! Out-of-order segments held until the gap before them fills (RFC 9293 3.10.7.4 "seventh"
//! allows keeping segments beyond RCV.NXT inside the window). Blocks are kept disjoint and
//! bounded in number; what does not fit is dropped, never merged wrongly.

use std::collections::BTreeMap;

/// Most disjoint blocks held (a peer cannot make us track more holes than this).
pub(crate) const MAX_BLOCKS: usize = 64;

/// Blocks keyed by stream offset (octets after the peer's ISN + 1).
#[derive(Debug, Clone, Default)]
pub(crate) struct Reassembly {
    blocks: BTreeMap<u64, Vec<u8>>,
    /// Start of the block holding the most recently received octets (first SACK block,
    /// RFC 2018 4).
    recent: Option<u64>,
    octets: usize,
}

impl Reassembly {
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Octets held.
    pub fn octets(&self) -> usize {
        self.octets
    }

    /// Stores `data` at stream offset `off` (beyond the in-order point), merging with
    /// neighbours. Octets already held are kept as they were (the first copy wins, as the
    /// in-order path does).
    pub fn insert(&mut self, off: u64, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let mut start = off;
        let mut end = off + data.len() as u64;
        // Merge with every block that touches [start, end).
        let touching: Vec<u64> = self
            .blocks
            .range(..=end)
            .filter(|(s, b)| **s + b.len() as u64 >= start)
            .map(|(s, _)| *s)
            .collect();
        if touching.is_empty() && self.blocks.len() >= MAX_BLOCKS {
            return;
        }
        let mut merged_from: Vec<(u64, Vec<u8>)> = Vec::with_capacity(touching.len());
        for s in touching {
            if let Some(b) = self.blocks.remove(&s) {
                self.octets -= b.len();
                start = start.min(s);
                end = end.max(s + b.len() as u64);
                merged_from.push((s, b));
            }
        }
        let mut buf = vec![0u8; (end - start) as usize];
        let at = (off - start) as usize;
        buf[at..at + data.len()].copy_from_slice(data);
        // Existing octets win over the new copy.
        for (s, b) in merged_from {
            let at = (s - start) as usize;
            buf[at..at + b.len()].copy_from_slice(&b);
        }
        self.octets += buf.len();
        self.blocks.insert(start, buf);
        self.recent = Some(start);
    }

    /// Takes the block that starts at or before `off` and reaches past it: the octets from
    /// `off` on. Blocks wholly before `off` are dropped.
    pub fn take_at(&mut self, off: u64) -> Option<Vec<u8>> {
        loop {
            let (&s, b) = self.blocks.iter().next()?;
            let e = s + b.len() as u64;
            if s > off {
                return None;
            }
            let b = self.blocks.remove(&s)?;
            self.octets -= b.len();
            if self.recent == Some(s) {
                self.recent = None;
            }
            if e > off {
                return Some(b[(off - s) as usize..].to_vec());
            }
        }
    }

    /// Up to `n` blocks as (start, end) stream offsets, the most recent first (RFC 2018 4).
    pub fn sack_blocks(&self, n: usize) -> Vec<(u64, u64)> {
        let mut out = Vec::with_capacity(n);
        if let Some(r) = self.recent {
            if let Some(b) = self.blocks.get(&r) {
                out.push((r, r + b.len() as u64));
            }
        }
        for (&s, b) in &self.blocks {
            if out.len() >= n {
                break;
            }
            if Some(s) != self.recent {
                out.push((s, s + b.len() as u64));
            }
        }
        out.truncate(n);
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
        assert_eq!(r.sack_blocks(3), vec![(10, 25)]);
        let b = r.take_at(12).expect("block");
        // The first copies win where they overlap.
        assert_eq!(&b[..3], &[1, 1, 1]);
        assert_eq!(&b[3..8], &[3, 3, 3, 3, 3]);
        assert_eq!(&b[8..], &[2, 2, 2, 2, 2]);
        assert!(r.is_empty());
        assert_eq!(r.octets(), 0);
    }

    #[test]
    fn most_recent_block_is_reported_first_and_holes_are_bounded() {
        let mut r = Reassembly::default();
        for k in 0..(MAX_BLOCKS as u64 + 10) {
            r.insert(100 + k * 10, &[0; 2]);
        }
        assert_eq!(r.sack_blocks(100).len(), MAX_BLOCKS);
        r.insert(100, &[0; 4]);
        assert_eq!(r.sack_blocks(1), vec![(100, 104)]);
        assert_eq!(r.take_at(50), None);
    }
}
