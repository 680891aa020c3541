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

    /// Re-lays the ring out contiguously at offset 0 in a buffer of `cap` octets, copying
    /// every queued octet but those of `holes`: spans reserved and never written
    /// ([`SendRing::reserve`]), as (offset from the head, length) in ascending order. A
    /// bulk sender's ring is almost all reserved spans (external records), so a growth
    /// copies only the few octets written into it, and where the allocator maps the new
    /// buffer fresh (large sizes: its pages are mapped at their first write) the pages
    /// under the spans stay untouched (copying the spans faulted in every page of each
    /// doubling, ~1,500 faults and ~4 MiB copied on the engine core in the first
    /// milliseconds of a bulk connection).
    fn relayout(&mut self, cap: usize, holes: impl IntoIterator<Item = (usize, usize)>) {
        let mut nb = vec![0u8; cap];
        let mut at = 0;
        for (off, len) in holes.into_iter().chain([(self.len, 0)]) {
            let off = off.clamp(at, self.len);
            self.copy_out(at, &mut nb[at..off]);
            at = off.saturating_add(len).clamp(at, self.len);
        }
        self.buf = nb;
        self.head = 0;
    }

    /// Copies the queued octets from `offset` after the head into `to` (across the wrap).
    fn copy_out(&self, offset: usize, to: &mut [u8]) {
        let mut done = 0;
        while done < to.len() {
            let s = self.slice(offset + done, to.len() - done);
            to[done..done + s.len()].copy_from_slice(s);
            done += s.len();
        }
    }

    /// Lends the free contiguous space at the tail (growing the ring, up to its limit, so
    /// that at least an FPDU's worth is contiguous when the limit allows) to `f`, which
    /// returns how many octets it wrote there. Each call grows the ring at most by doubling
    /// (an idle connection that sent a startup frame holds 4 KiB, not an FPDU's worth).
    /// `holes` gives the reserved spans ([`SendRing::relayout`]), called only if the ring
    /// grows.
    pub fn write_with<H, I>(&mut self, holes: H, f: impl FnOnce(&mut [u8]) -> usize) -> usize
    where
        H: FnOnce() -> I,
        I: IntoIterator<Item = (usize, usize)>,
    {
        self.lend(WANT_CONTIGUOUS, 1, holes, f)
    }

    /// Lends the free contiguous space at the tail to `f`, first growing the ring (up to
    /// its limit) only as far as needed for `room` contiguous octets, or for all that may
    /// still be queued if that is less. A writer that knows its size (an FPDU) asks for
    /// it: a connection that sends small messages then keeps a small ring instead of
    /// doubling towards an FPDU's worth at every write (a short-lived connection's
    /// allocations stay small, so the allocator is not made to grow and trim its heap at
    /// every connection).
    pub fn write_with_room<H, I>(
        &mut self,
        room: usize,
        holes: H,
        f: impl FnOnce(&mut [u8]) -> usize,
    ) -> usize
    where
        H: FnOnce() -> I,
        I: IntoIterator<Item = (usize, usize)>,
    {
        self.lend(room.max(1), room.max(1), holes, f)
    }

    /// `write_with`/`write_with_room`: grows when fewer than `want` octets (capped by what
    /// may still be queued) are contiguous, to at least `len + at_least` rounded up to a
    /// power of two, at least doubling, within the limit.
    fn lend<H, I>(
        &mut self,
        want: usize,
        at_least: usize,
        holes: H,
        f: impl FnOnce(&mut [u8]) -> usize,
    ) -> usize
    where
        H: FnOnce() -> I,
        I: IntoIterator<Item = (usize, usize)>,
    {
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
            self.relayout(cap, holes());
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
    /// are its sequence space), but they are never written, read or copied here: `holes`
    /// gives the spans reserved before, which a re-layout skips ([`SendRing::relayout`]);
    /// every caller that may grow the ring passes them.
    pub fn reserve<I>(&mut self, n: usize, holes: impl FnOnce() -> I) -> bool
    where
        I: IntoIterator<Item = (usize, usize)>,
    {
        if n > self.free() {
            return false;
        }
        debug_assert!(self.len != 0 || self.head == 0, "see `lend`");
        if self.buf.len() < self.len + n {
            let cap = (self.buf.len() * 2)
                .max(MIN_CAP)
                .max((self.len + n).next_power_of_two())
                .min(self.limit);
            self.relayout(cap, holes());
        }
        self.len += n;
        true
    }

    /// Copies `data` in (across the wrap if need be); returns how much fit.
    pub fn write<H, I>(&mut self, data: &[u8], holes: H) -> usize
    where
        H: Fn() -> I,
        I: IntoIterator<Item = (usize, usize)>,
    {
        let mut done = 0;
        while done < data.len() {
            let n = self.write_with(&holes, |b| {
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

    /// [`SendRing::slice`], to write: a span an external record reserved, filled in when
    /// the record becomes the ring's own (`Connection::internalize_external`).
    pub fn slice_mut(&mut self, offset: usize, max: usize) -> &mut [u8] {
        if offset >= self.len || self.buf.is_empty() {
            return &mut [];
        }
        let cap = self.buf.len();
        let start = wrap(self.head + offset, cap);
        let n = max.min(self.len - offset).min(cap - start);
        &mut self.buf[start..start + n]
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

    fn no_holes() -> [(usize, usize); 0] {
        []
    }

    #[test]
    fn grows_on_demand_wraps_and_slices_back_what_was_written() {
        let mut r = SendRing::new(10_000);
        assert_eq!(r.allocated(), 0);
        let data: Vec<u8> = (0..7000u32).map(|i| i as u8).collect();
        assert_eq!(r.write(&data, no_holes), 7000);
        assert!(r.allocated() <= 10_000);
        r.consume(6000);
        assert_eq!(r.write(&data[..3000], no_holes), 3000);
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
        assert_eq!(r.write(&[1; 100], no_holes), 100);
        assert!(r.reserve(5000, no_holes));
        assert_eq!(r.write(&[2; 50], no_holes), 50);
        assert_eq!(r.len(), 5150);
        assert!(!r.reserve(5000, no_holes), "over the limit");
        assert_eq!(r.len(), 5150);
        assert_eq!(r.slice(0, 100), &[1; 100][..]);
        assert_eq!(r.slice(5100, 50), &[2; 50][..]);
        r.consume(5100);
        assert!(r.reserve(4800, no_holes));
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
        assert_eq!(r.write(&[1; 9000], no_holes), 5000);
        assert_eq!(r.write(&[1; 10], no_holes), 0);
        assert_eq!(r.write_with(no_holes, |b| b.len()), 0);
        r.consume(100);
        assert_eq!(r.write(&[2; 500], no_holes), 100);
    }

    /// A re-layout copies every queued octet but the holes', wherever the ring wraps and
    /// whatever the holes cover (the head's, the tail's, across the wrap, touching, past
    /// the end), and the holes' octets in the new buffer are left as allocated (zeros).
    #[test]
    fn a_relayout_copies_all_but_the_holes() {
        let holes_sets: [&[(usize, usize)]; 7] = [
            &[],
            &[(0, 10)],
            &[(5, 20), (25, 5)],
            &[(40, 200)],
            &[(90, 10)],
            &[(3, 1), (50, 30), (95, 100)],
            &[(0, 1000)],
        ];
        for head in [0usize, 37, 90, 127] {
            for len in [0usize, 1, 60, 100, 128] {
                for holes in holes_sets {
                    let mut r = SendRing::new(1024);
                    let pattern: Vec<u8> = (0..len).map(|i| 1 + (i % 251) as u8).collect();
                    r.buf = vec![0xEE; 128];
                    r.head = head;
                    r.len = len;
                    for (i, &b) in pattern.iter().enumerate() {
                        r.buf[(head + i) % 128] = b;
                    }
                    if len == 0 {
                        r.head = 0;
                    }
                    r.relayout(256, holes.iter().copied());
                    assert_eq!((r.head, r.len, r.allocated()), (0, len, 256));
                    for (i, &b) in pattern.iter().enumerate() {
                        let in_hole = holes.iter().any(|&(o, l)| i >= o && i < o + l);
                        let want = if in_hole { 0 } else { b };
                        assert_eq!(
                            r.buf[i], want,
                            "head {head} len {len} holes {holes:?}: octet {i}"
                        );
                    }
                    assert!(r.buf[len..].iter().all(|&b| b == 0));
                }
            }
        }
    }

    /// Growth through `write_with` and `reserve` keeps every written octet when the holes
    /// passed are the reserved spans (as the connection passes its external records).
    #[test]
    fn growth_keeps_written_octets_around_reserved_spans() {
        let mut r = SendRing::new(1 << 16);
        // The model: each queued octet, `None` where reserved.
        let mut model: std::collections::VecDeque<Option<u8>> = Default::default();
        let mut seed = 0x2545_f491_u64;
        let mut next = || {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 33) as usize
        };
        let holes_of = |m: &std::collections::VecDeque<Option<u8>>| {
            let mut v = Vec::new();
            let mut i = 0;
            while i < m.len() {
                if m[i].is_none() {
                    let s = i;
                    while i < m.len() && m[i].is_none() {
                        i += 1;
                    }
                    v.push((s, i - s));
                } else {
                    i += 1;
                }
            }
            v
        };
        let mut grew = 0;
        for step in 0..2000 {
            let before = r.allocated();
            match next() % 4 {
                0 | 1 => {
                    let n = next() % 300;
                    let data: Vec<u8> = (0..n).map(|i| (i + step) as u8 | 1).collect();
                    let w = r.write(&data, || holes_of(&model));
                    model.extend(data[..w].iter().map(|&b| Some(b)));
                }
                2 => {
                    let n = 1 + next() % 3000;
                    if r.reserve(n, || holes_of(&model)) {
                        model.extend(std::iter::repeat_n(None, n));
                    }
                }
                _ => {
                    let n = next() % (model.len() + 1);
                    r.consume(n);
                    model.drain(..n);
                }
            }
            grew += usize::from(r.allocated() > before);
            assert_eq!(r.len(), model.len());
            for (i, o) in model.iter().enumerate() {
                if let Some(b) = o {
                    assert_eq!(r.slice(i, 1), &[*b][..], "step {step}: octet {i}");
                }
            }
        }
        assert!(grew >= 5, "the ring grew {grew} times");
    }
}
