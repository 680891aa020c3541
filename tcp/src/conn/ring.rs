//! The send buffer: a ring of octets from SND.UNA on (sent and unsent), grown on demand up to
//! its configured capacity, so an idle connection holds only what it ever needed at once and
//! the engine can frame FPDUs straight into its free space.

/// Least allocation when the ring first grows.
const MIN_CAP: usize = 4096;
/// Contiguous free space worth a re-layout: an FPDU of the largest ULPDU fits.
const WANT_CONTIGUOUS: usize = 66 * 1024;

/// `at % cap` for `at < 2 * cap` (a position at most one lap past the end: `head < cap`
/// plus an offset or length of at most `cap`), without a division on the per-segment path.
#[inline]
fn wrap(at: usize, cap: usize) -> usize {
    debug_assert!(at < 2 * cap || cap == 0);
    if at >= cap {
        at - cap
    } else {
        at
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct SendRing {
    buf: Vec<u8>,
    /// Where the oldest octet is; 0 whenever the ring is empty.
    head: usize,
    len: usize,
    limit: usize,
}

impl SendRing {
    pub fn new(limit: usize) -> Self {
        SendRing {
            buf: Vec::new(),
            head: 0,
            len: 0,
            limit,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Octets that may still be queued.
    pub fn free(&self) -> usize {
        self.limit - self.len
    }

    /// Bytes allocated.
    pub fn allocated(&self) -> usize {
        self.buf.len()
    }

    /// Gives the buffer back when it holds nothing (it grows again on the next write).
    pub fn release_if_empty(&mut self) {
        if self.len == 0 {
            self.buf = Vec::new();
            self.head = 0;
        }
    }

    /// The tail (where the next octet goes) and the free octets contiguous from it. `len`
    /// is at most `cap`, and `head < cap` when anything is queued (`head` is 0 otherwise, as
    /// `consume`, `relayout` and `release_if_empty` set it so), so the ring's end falls at most one lap past the
    /// buffer's: before it, the free run reaches the buffer's end; past it (the queued
    /// octets wrap, or fill the ring), the free run is all the free space, up to the head.
    fn tail_space(&self) -> (usize, usize) {
        let cap = self.buf.len();
        let end = self.head + self.len;
        if end < cap {
            (end, cap - end)
        } else {
            (end - cap, cap - self.len)
        }
    }

    /// Re-lays the ring out contiguously at offset 0 in a buffer of `cap` octets.
    fn relayout(&mut self, cap: usize) {
        let mut nb = vec![0u8; cap];
        let (a, b) = self.as_slices();
        nb[..a.len()].copy_from_slice(a);
        nb[a.len()..a.len() + b.len()].copy_from_slice(b);
        self.buf = nb;
        self.head = 0;
    }

    fn as_slices(&self) -> (&[u8], &[u8]) {
        let cap = self.buf.len();
        if self.len == 0 || cap == 0 {
            return (&[], &[]);
        }
        let end = self.head + self.len;
        if end <= cap {
            (&self.buf[self.head..end], &[])
        } else {
            (&self.buf[self.head..], &self.buf[..end - cap])
        }
    }

    /// Lends the free contiguous space at the tail (growing the ring, up to its limit, so
    /// that at least an FPDU's worth is contiguous when the limit allows) to `f`, which
    /// returns how many octets it wrote there. Each call grows the ring at most by doubling
    /// (an idle connection that sent a startup frame holds 4 KiB, not an FPDU's worth).
    pub fn write_with(&mut self, f: impl FnOnce(&mut [u8]) -> usize) -> usize {
        self.lend(WANT_CONTIGUOUS, 1, f)
    }

    /// Lends the free contiguous space at the tail to `f`, first growing the ring (up to
    /// its limit) only as far as needed for `room` contiguous octets, or for all that may
    /// still be queued if that is less. A writer that knows its size (an FPDU) asks for
    /// it: a connection that sends small messages then keeps a small ring instead of
    /// doubling towards an FPDU's worth at every write (a short-lived connection's
    /// allocations stay small, so the allocator is not made to grow and trim its heap at
    /// every connection).
    pub fn write_with_room(&mut self, room: usize, f: impl FnOnce(&mut [u8]) -> usize) -> usize {
        self.lend(room.max(1), room.max(1), f)
    }

    /// `write_with`/`write_with_room`: grows when fewer than `want` octets (capped by what
    /// may still be queued) are contiguous, to at least `len + at_least` rounded up to a
    /// power of two, at least doubling, within the limit.
    fn lend(&mut self, want: usize, at_least: usize, f: impl FnOnce(&mut [u8]) -> usize) -> usize {
        let free = self.free();
        if free == 0 {
            return 0;
        }
        // An empty ring's head is 0 already: `consume` resets it as the ring empties (the
        // only way it empties), so the free run starts at the buffer's start.
        debug_assert!(self.len != 0 || self.head == 0);
        let want = free.min(want);
        let (mut tail, mut n) = self.tail_space();
        if n < want && self.buf.len() < self.limit {
            let cap = (self.buf.len() * 2)
                .max(MIN_CAP)
                .max((self.len + at_least.min(free)).next_power_of_two())
                .min(self.limit);
            self.relayout(cap);
            (tail, n) = self.tail_space();
        }
        // The buffer never outgrows the limit (every growth is capped by it), so the free
        // run is never more than may still be queued: no clamp of `n` by `free`.
        debug_assert!(n <= free && self.buf.len() <= self.limit);
        let w = f(&mut self.buf[tail..tail + n]).min(n);
        self.len += w;
        w
    }

    /// Takes `n` octets of the free space without writing them (octets the connection's
    /// owner supplies at each transmission: external records); false, changing nothing,
    /// when fewer than `n` may still be queued. The ring grows to hold them (its positions
    /// are its sequence space), but they are never written, read or copied here except
    /// when a re-layout moves them.
    pub fn reserve(&mut self, n: usize) -> bool {
        if n > self.free() {
            return false;
        }
        debug_assert!(self.len != 0 || self.head == 0, "see `lend`");
        if self.buf.len() < self.len + n {
            let cap = (self.buf.len() * 2)
                .max(MIN_CAP)
                .max((self.len + n).next_power_of_two())
                .min(self.limit);
            self.relayout(cap);
        }
        self.len += n;
        true
    }

    /// Copies `data` in (across the wrap if need be); returns how much fit.
    pub fn write(&mut self, data: &[u8]) -> usize {
        let mut done = 0;
        while done < data.len() {
            let n = self.write_with(|b| {
                let k = b.len().min(data.len() - done);
                b[..k].copy_from_slice(&data[done..done + k]);
                k
            });
            if n == 0 {
                break;
            }
            done += n;
        }
        done
    }

    /// Up to `max` contiguous octets starting `offset` octets after the head.
    pub fn slice(&self, offset: usize, max: usize) -> &[u8] {
        if offset >= self.len || self.buf.is_empty() {
            return &[];
        }
        let cap = self.buf.len();
        let start = wrap(self.head + offset, cap);
        let n = max.min(self.len - offset).min(cap - start);
        &self.buf[start..start + n]
    }

    /// Drops `n` octets from the head (acknowledged).
    pub fn consume(&mut self, n: usize) {
        let n = n.min(self.len);
        if n == 0 {
            return;
        }
        self.head = wrap(self.head + n, self.buf.len());
        self.len -= n;
        if self.len == 0 {
            self.head = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_on_demand_wraps_and_slices_back_what_was_written() {
        let mut r = SendRing::new(10_000);
        assert_eq!(r.allocated(), 0);
        let data: Vec<u8> = (0..7000u32).map(|i| i as u8).collect();
        assert_eq!(r.write(&data), 7000);
        assert!(r.allocated() <= 10_000);
        r.consume(6000);
        assert_eq!(r.write(&data[..3000]), 3000);
        assert_eq!(r.len(), 4000);
        // Read it all back through slices (one may end at the wrap).
        let mut got = Vec::new();
        while got.len() < r.len() {
            let s = r.slice(got.len(), 1460);
            assert!(!s.is_empty());
            got.extend_from_slice(s);
        }
        assert_eq!(&got[..1000], &data[6000..7000]);
        assert_eq!(&got[1000..], &data[..3000]);
        assert_eq!(r.free(), 6000);
    }

    #[test]
    fn reserved_octets_take_sequence_space_between_written_ones() {
        let mut r = SendRing::new(10_000);
        assert_eq!(r.write(&[1; 100]), 100);
        assert!(r.reserve(5000));
        assert_eq!(r.write(&[2; 50]), 50);
        assert_eq!(r.len(), 5150);
        assert!(!r.reserve(5000), "over the limit");
        assert_eq!(r.len(), 5150);
        assert_eq!(r.slice(0, 100), &[1; 100][..]);
        assert_eq!(r.slice(5100, 50), &[2; 50][..]);
        r.consume(5100);
        assert!(r.reserve(4800));
        assert_eq!(r.len(), 4850);
        assert_eq!(r.free(), 5150);
        assert_eq!(r.slice(0, 50), &[2; 50][..]);
    }

    /// `tail_space` against the plain definition (the tail one lap past the head, the free
    /// run up to the buffer's end or to the head), at every head, length and wrap.
    #[test]
    fn tail_space_agrees_with_the_definition() {
        for cap in [0usize, 1, 7, 16] {
            for head in 0..cap.max(1) {
                for len in 0..=cap {
                    let r = SendRing {
                        buf: vec![0; cap],
                        head: if cap == 0 { 0 } else { head },
                        len,
                        limit: cap,
                    };
                    let tail = if cap == 0 { 0 } else { (r.head + len) % cap };
                    let free = if len == cap {
                        0
                    } else if tail >= r.head {
                        cap - tail
                    } else {
                        r.head - tail
                    };
                    assert_eq!(
                        r.tail_space(),
                        (tail, free),
                        "cap {cap} head {head} len {len}"
                    );
                }
            }
        }
    }

    #[test]
    fn never_exceeds_its_limit() {
        let mut r = SendRing::new(5000);
        assert_eq!(r.write(&[1; 9000]), 5000);
        assert_eq!(r.write(&[1; 10]), 0);
        assert_eq!(r.write_with(|b| b.len()), 0);
        r.consume(100);
        assert_eq!(r.write(&[2; 500]), 100);
    }
}
