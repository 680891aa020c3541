//! The Internet checksum (RFC 1071) of TCP segments, computed where a port cannot offload it,
//! at bulk speed and, on transmit, in the same pass as the payload's copy into the frame.
//!
//! smoltcp's `TcpPacket::fill_checksum` / `verify_checksum` walk the segment two octets at a
//! time after its payload was copied into the frame: a second pass over every octet, 12 % of
//! a bulk sender's cycles over net_memif (issue 12). Here the words are summed 32 octets per
//! step, as eight 32-bit words into eight lanes (`Lanes`), a loop the compiler vectorises
//! with plain SSE2 (no unsafe, no CPU detection), and [`copy_and_sum`] stores each step's octets as it sums them; runs
//! shorter than 128 octets (headers, small payloads) and tails take eight octets per step
//! in two 64-bit accumulators instead, without the lanes' setup and drain. The
//! results are checked against smoltcp's in this module's tests (every length, every
//! offset). The host's own header writer and parser (module `host::headers`, decision 0006)
//! fill and check the field; smoltcp parses only the rare layouts.
//!
//! Sums are kept in "native words": 16-bit words loaded little-endian, which RFC 1071 §2(B)
//! allows (the one's-complement sum is byte-order independent); [`finish`] turns the folded
//! sum into the two octets of the checksum field. Where only the folded value counts (the
//! checksums the host verifies and writes), [`sum_to_fold`] takes short runs in 64-bit
//! words with their carries instead.

use smoltcp::wire::Ipv4Address;

/// Octets per step of the summing loops: eight 32-bit words, one per lane of [`Lanes`].
const STEP: usize = 32;
/// Steps after which the lanes are added into the total (a lane's sum of first or of
/// second 16-bit words gains at most 0xffff per step, so 0x8000 steps cannot overflow it).
const FOLD_EVERY: usize = 0x8000;

/// The running sums of the bulk loops: each step's eight 32-bit little-endian words `x`
/// (two 16-bit words each: `x & 0xffff` first, `x >> 16` second) go into eight lanes as
/// `all += x` (wrapping) and `high += x >> 16`. The first words' sum is then
/// `all - (high << 16)` (wrapping: exact while it stays below 2^32, which [`FOLD_EVERY`]
/// keeps), so a step costs a shift and two additions per sixteen octets (one vector of
/// four lanes, plain SSE2) and no unpacking of words into wider lanes: fewer instructions
/// than sixteen zero-extended lanes, and no shuffles (one port on most x86 cores), so not
/// slower in time either; each accumulator's chain is one addition per step.
#[derive(Default)]
struct Lanes {
    all: [u32; 8],
    high: [u32; 8],
}

impl Lanes {
    /// Adds one step's eight 32-bit words, one to each lane (a loop of constant shape:
    /// vectorised).
    #[inline(always)]
    fn add_step(&mut self, s: &[u8; STEP]) {
        let lanes = self.all.iter_mut().zip(self.high.iter_mut());
        for ((all, high), w) in lanes.zip(s.chunks_exact(4)) {
            let x = u32::from_le_bytes(w.try_into().unwrap_or([0; 4]));
            *all = all.wrapping_add(x);
            *high = high.wrapping_add(x >> 16);
        }
    }

    /// Adds the lanes' sixteen-bit words into a 64-bit total and clears them.
    #[inline(always)]
    fn drain(&mut self, total: &mut u64) {
        for i in 0..8 {
            let high = self.high[i];
            let low = self.all[i].wrapping_sub(high << 16);
            *total += u64::from(low) + u64::from(high);
        }
        *self = Lanes::default();
    }
}

/// A step's octets as an array (the slices come from `chunks_exact(STEP)`: the conversion
/// cannot fail, and the compiler drops its check).
#[inline(always)]
fn step(s: &[u8]) -> &[u8; STEP] {
    s.try_into().unwrap_or(&[0; STEP])
}

/// Below this many octets [`sum`] and [`copy_and_sum`] skip the lanes (whose setup and
/// drain cost more than a header or a small payload): eight octets per step instead.
const SMALL: usize = 128;

/// The sum of a short run (a tail, a header, a small payload: at most a few thousand
/// octets), eight octets per step: each 64-bit load's four words are split into two
/// accumulators of two 32-bit lanes, whose totals add up to exactly the sum of the
/// 16-bit words (an odd last octet is padded with a zero octet).
#[inline(always)]
fn tail_sum(rest: &[u8]) -> u64 {
    const EVEN: u64 = 0x0000_ffff_0000_ffff;
    let (mut a, mut b) = (0u64, 0u64);
    let mut eights = rest.chunks_exact(8);
    for e in &mut eights {
        let w = u64::from_le_bytes(e.try_into().unwrap_or([0; 8]));
        a += w & EVEN;
        b += (w >> 16) & EVEN;
    }
    let lanes = a + b;
    let mut total = (lanes & 0xffff_ffff) + (lanes >> 32);
    let mut words = eights.remainder().chunks_exact(2);
    for w in &mut words {
        total += u64::from(u16::from_le_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        total += u64::from(u16::from_le_bytes([*last, 0]));
    }
    total
}

/// [`sum`] of a run known to be short (a header, the few framing octets around an FPDU's
/// payload): the same value, from the same short loop [`sum`] takes under 128 octets,
/// inlined where it is called instead of a call into [`sum`] and its test of the length.
/// Exact for any length under 256 KiB (its 32-bit lanes), only slower than [`sum`] on long
/// ones.
#[inline(always)]
pub fn sum_short(data: &[u8]) -> u64 {
    tail_sum(data)
}

/// The unfolded one's-complement sum of `data` in native words. `data` must start at an even
/// offset of what is summed (true of every header and of a TCP payload).
#[inline]
pub fn sum(data: &[u8]) -> u64 {
    if data.len() < SMALL {
        return tail_sum(data);
    }
    let mut lanes = Lanes::default();
    let mut total = 0u64;
    let whole = data.len() - data.len() % STEP;
    let (steps, rest) = data.split_at(whole);
    for block in steps.chunks(FOLD_EVERY * STEP) {
        for s in block.chunks_exact(STEP) {
            lanes.add_step(step(s));
        }
        lanes.drain(&mut total);
    }
    total + tail_sum(rest)
}

/// A sum of `data` that [`fold`]s to what [`sum`]'s folds to, but is a different number:
/// for the checksums the host verifies or writes itself, where only the folded value
/// counts (not for a sum that must equal [`sum`]'s, such as what [`Fill`] returns).
///
/// The one's-complement sum of the 64-bit little-endian words (a last partial word padded
/// with zeros), each carry out of the top added back at the bottom: 2^64 and 2^16 are
/// both 1 modulo 0xffff, so it is [`sum`]'s value modulo 0xffff; and it is zero only when
/// every octet is, as [`sum`]'s (where [`fold`] gives 0 rather than 0xffff). One load and two
/// additions per eight octets, in four independent chains (112 octets 13.95 -> 9.59 ns in
/// `benches/csum.rs`, against one chain), without [`sum`]'s lanes or the setup of a
/// vectorised loop: the headers and the small segments of a request/response exchange. Runs of
/// 128 octets or more go to [`sum`] itself (its lanes are the faster at bulk).
/// Returns at most 2^33 for any run up to 256 KiB (every segment), so sums of a few of
/// them do not overflow. `data` must start at an
/// even offset of what is summed.
///
/// [`Fill`]: crate::host::Fill
#[inline(always)]
pub fn sum_to_fold(data: &[u8]) -> u64 {
    sum_to_fold_with(data, bulk_sum)
}

/// A sum of a run of octets that [`fold`]s as [`sum`]'s does, for runs of any length
/// from an even offset, with [`sum_to_fold`]'s bound: what the host verifies a received
/// segment's checksum with from 128 octets on ([`sum_to_fold_with`]). [`bulk_sum`] by
/// default; the engine gives one that uses the CPU's wider vectors, which this crate,
/// without `unsafe`, cannot select at run time (`Host::set_bulk_sum`).
pub type BulkSum = fn(&[u8]) -> u64;

/// A [`BulkSum`] that also returns a 32-bit digest of the same octets, taken in the same
/// pass: what the host sums a received segment's payload with when the engine asks for a
/// digest of it (`Host::set_payload_digest`). The host does not interpret the digest; it
/// hands it to the delivery of a payload delivered whole (the engine's is the CRC32c that
/// checks an FPDU filling the segment, so each received octet is read once for both).
pub type BulkSumDigest = fn(&[u8]) -> (u64, u32);

/// [`sum`], out of line: the default [`BulkSum`].
#[inline(never)]
pub fn bulk_sum(data: &[u8]) -> u64 {
    sum(data)
}

/// [`sum_to_fold`] with `bulk` for runs of 128 octets or more.
#[inline(always)]
pub fn sum_to_fold_with(data: &[u8], bulk: BulkSum) -> u64 {
    if data.len() >= SMALL {
        return bulk(data);
    }
    // Four chains of additions, a word each in turn (a header's or a small segment's sum is
    // on a request's path): a few instructions more to join them, the chain a quarter as
    // long.
    let (mut a, mut b, mut c, mut d) = (0u64, 0u64, 0u64, 0u64);
    let mut fours = data.chunks_exact(32);
    for f in &mut fours {
        a = add_carry(a, word(&f[..8]));
        b = add_carry(b, word(&f[8..16]));
        c = add_carry(c, word(&f[16..24]));
        d = add_carry(d, word(&f[24..]));
    }
    let mut eights = fours.remainder().chunks_exact(8);
    if let Some(e) = eights.next() {
        a = add_carry(a, word(e));
    }
    if let Some(e) = eights.next() {
        b = add_carry(b, word(e));
    }
    if let Some(e) = eights.next() {
        c = add_carry(c, word(e));
    }
    d = add_carry(d, last_word(eights.remainder()));
    let acc = add_carry(add_carry(a, b), add_carry(c, d));
    (acc & 0xffff_ffff) + (acc >> 32)
}

/// [`copy_and_sum`] for where only the folded sum counts: returns a sum that [`fold`]s as
/// [`sum`]'s of the octets copied does, taken as [`sum_to_fold`] takes it (and bounded as
/// its), in the same pass as the copy. Runs of 128 octets or more go to [`copy_and_sum`]
/// itself.
///
/// # Panics
/// If the lengths differ (a caller's bug: the frame was sized for the payload).
#[inline(always)]
pub fn copy_and_sum_to_fold(dst: &mut [u8], src: &[u8]) -> u64 {
    #[inline(never)]
    fn bulk(dst: &mut [u8], src: &[u8]) -> u64 {
        copy_and_sum(dst, src)
    }
    assert_eq!(dst.len(), src.len(), "copy_and_sum_to_fold: lengths differ");
    if src.len() >= SMALL {
        return bulk(dst, src);
    }
    // Two chains of additions (even and odd words), as `sum_to_fold`'s four.
    let (mut acc, mut odd) = (0u64, 0u64);
    let mut d16 = dst.chunks_exact_mut(16);
    let mut s16 = src.chunks_exact(16);
    for (d, s) in (&mut d16).zip(&mut s16) {
        let (w0, w1) = (word(&s[..8]), word(&s[8..]));
        d[..8].copy_from_slice(&w0.to_le_bytes());
        d[8..].copy_from_slice(&w1.to_le_bytes());
        acc = add_carry(acc, w0);
        odd = add_carry(odd, w1);
    }
    acc = add_carry(acc, odd);
    let mut d8 = d16.into_remainder().chunks_exact_mut(8);
    let mut s8 = s16.remainder().chunks_exact(8);
    for (d, s) in (&mut d8).zip(&mut s8) {
        let w = word(s);
        d.copy_from_slice(&w.to_le_bytes());
        acc = add_carry(acc, w);
    }
    let (d, s) = (d8.into_remainder(), s8.remainder());
    let w = last_word(s);
    let o = w.to_le_bytes();
    let mut at = 0;
    if s.len() & 4 != 0 {
        d[..4].copy_from_slice(&o[..4]);
        at = 4;
    }
    if s.len() & 2 != 0 {
        d[at..at + 2].copy_from_slice(&o[at..at + 2]);
        at += 2;
    }
    if s.len() & 1 != 0 {
        d[at] = o[at];
    }
    acc = add_carry(acc, w);
    (acc & 0xffff_ffff) + (acc >> 32)
}

/// `acc + w` in one's complement: the carry out of the top added back at the bottom
/// ([`sum_to_fold`]).
#[inline(always)]
fn add_carry(acc: u64, w: u64) -> u64 {
    let (s, carry) = acc.overflowing_add(w);
    s + u64::from(carry)
}

/// The last under eight octets of a run as a little-endian word padded with zeros, read
/// four, two and one at a time (a copy of a variable length into a padded array is a
/// call of `memcpy`).
#[inline(always)]
fn last_word(s: &[u8]) -> u64 {
    let mut w = 0u64;
    let mut at = 0;
    if s.len() & 4 != 0 {
        w = u64::from(u32::from_le_bytes([s[0], s[1], s[2], s[3]]));
        at = 4;
    }
    if s.len() & 2 != 0 {
        w |= u64::from(u16::from_le_bytes([s[at], s[at + 1]])) << (8 * at);
        at += 2;
    }
    if s.len() & 1 != 0 {
        w |= u64::from(s[at]) << (8 * at);
    }
    w
}

/// Eight octets as a little-endian word (the slices come from `chunks_exact(8)` or are cut
/// eight long: the conversion cannot fail, and the compiler drops its check).
#[inline(always)]
fn word(b: &[u8]) -> u64 {
    u64::from_le_bytes(b.try_into().unwrap_or([0; 8]))
}

/// Copies `src` into `dst` (of the same length) and returns the unfolded sum of the octets
/// copied, as [`sum`] would: one pass over the payload instead of a copy and a sum.
///
/// # Panics
/// If the lengths differ (a caller's bug: the frame was sized for the payload).
#[inline]
pub fn copy_and_sum(dst: &mut [u8], src: &[u8]) -> u64 {
    assert_eq!(dst.len(), src.len(), "copy_and_sum: lengths differ");
    if src.len() < SMALL {
        dst.copy_from_slice(src);
        return tail_sum(src);
    }
    let mut lanes = Lanes::default();
    let mut total = 0u64;
    let whole = src.len() - src.len() % STEP;
    let (d_steps, d_rest) = dst.split_at_mut(whole);
    let (s_steps, s_rest) = src.split_at(whole);
    let blocks = d_steps
        .chunks_mut(FOLD_EVERY * STEP)
        .zip(s_steps.chunks(FOLD_EVERY * STEP));
    for (d_block, s_block) in blocks {
        for (d, s) in d_block
            .chunks_exact_mut(STEP)
            .zip(s_block.chunks_exact(STEP))
        {
            // A copy of the step, stored and summed: summed from the borrowed source,
            // the compiler vectorises the loop across steps instead, with a gather of
            // each lane's words (twice the instructions).
            let s = *step(s);
            d.copy_from_slice(&s);
            lanes.add_step(&s);
        }
        lanes.drain(&mut total);
    }
    d_rest.copy_from_slice(s_rest);
    total + tail_sum(s_rest)
}

/// [`copy_and_sum`] from a source that cannot be borrowed as a slice (registered memory the
/// application may write to: the engine reads it only through raw copies). `read(at, out)`
/// must fill `out` with the source's octets at offset `at`; it is called once per 32-octet
/// step and once for the tail, in order, and the octets summed are exactly those written to
/// `dst`, whatever the source does meanwhile. Returns the unfolded sum of `dst`.
#[inline]
pub fn copy_and_sum_from(dst: &mut [u8], mut read: impl FnMut(usize, &mut [u8])) -> u64 {
    let mut lanes = Lanes::default();
    let mut total = 0u64;
    let whole = dst.len() - dst.len() % STEP;
    let (d_steps, d_rest) = dst.split_at_mut(whole);
    let mut at = 0;
    for d_block in d_steps.chunks_mut(FOLD_EVERY * STEP) {
        for d in d_block.chunks_exact_mut(STEP) {
            let mut s = [0u8; STEP];
            read(at, &mut s);
            d.copy_from_slice(&s);
            lanes.add_step(&s);
            at += STEP;
        }
        lanes.drain(&mut total);
    }
    read(at, d_rest);
    total + tail_sum(d_rest)
}

/// The contribution of a block whose sum from its own first octet is `partial`, when the
/// block starts `offset` octets into what is summed: a block at an odd offset has its
/// words' octets swapped (RFC 1071 §2(B)), so its folded sum is byte-swapped.
#[inline]
pub fn at_offset(partial: u64, offset: usize) -> u64 {
    if offset.is_multiple_of(2) {
        partial
    } else {
        u64::from(fold(partial).swap_bytes())
    }
}

/// The sum of the IPv4 pseudo-header of a TCP segment of `tcp_len` octets (RFC 9293 3.1).
#[inline]
pub fn pseudo_header(src: Ipv4Address, dst: Ipv4Address, tcp_len: u16) -> u64 {
    let (s, d) = (src.octets(), dst.octets());
    let len = tcp_len.to_be_bytes();
    tail_sum(&[
        s[0], s[1], s[2], s[3], d[0], d[1], d[2], d[3], 0, 6, len[0], len[1],
    ])
}

/// Folds an unfolded sum to 16 bits (end-around carries).
#[inline]
pub fn fold(mut total: u64) -> u16 {
    while total > 0xffff {
        total = (total & 0xffff) + (total >> 16);
    }
    total as u16
}

/// The two octets of the checksum field for a segment whose every octet (checksum field
/// zero) and pseudo-header add up to `total`.
#[inline]
pub fn finish(total: u64) -> [u8; 2] {
    (!fold(total)).to_le_bytes()
}

/// Whether a received segment's sum (checksum field included, pseudo-header added) verifies.
#[inline]
pub fn verifies(total: u64) -> bool {
    fold(total) == 0xffff
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::wire::{IpAddress, TcpPacket};

    const SRC: Ipv4Address = Ipv4Address::new(198, 18, 0, 1);
    const DST: Ipv4Address = Ipv4Address::new(10, 200, 3, 77);

    fn bytes(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect()
    }

    /// A TCP segment: a 20-octet header (data offset 5) and `payload`.
    fn segment(payload: &[u8], seed: u64) -> Vec<u8> {
        let mut seg = bytes(20, seed);
        seg[12] = 5 << 4;
        seg.extend_from_slice(payload);
        seg
    }

    fn ours(seg: &[u8]) -> [u8; 2] {
        let mut s = seg.to_vec();
        s[16] = 0;
        s[17] = 0;
        finish(pseudo_header(SRC, DST, s.len() as u16) + sum(&s))
    }

    /// Every payload length from 0 to 2,100 octets (every tail, odd and even), and a few
    /// long ones past the lanes' fold: the same field as smoltcp's `fill_checksum`, and
    /// smoltcp's `verify_checksum` accepts it.
    #[test]
    fn checksum_field_matches_smoltcp_at_every_length() {
        let lens = (0..=2100).chain([9000, 65_515, 65_535 - 20]);
        for len in lens {
            let mut seg = segment(&bytes(len, len as u64), len as u64 + 1);
            let mine = ours(&seg);
            let mut p = TcpPacket::new_unchecked(&mut seg[..]);
            p.fill_checksum(&IpAddress::Ipv4(SRC), &IpAddress::Ipv4(DST));
            assert_eq!(mine, seg[16..18], "payload of {len} octets");
            let p = TcpPacket::new_unchecked(&seg[..]);
            assert!(p.verify_checksum(&IpAddress::Ipv4(SRC), &IpAddress::Ipv4(DST)));
            let total = pseudo_header(SRC, DST, seg.len() as u16) + sum(&seg);
            assert!(verifies(total), "payload of {len} octets");
        }
    }

    /// [`sum`], [`copy_and_sum`] and [`copy_and_sum_from`] are exactly the plain sum of the
    /// 16-bit words (not only modulo 0xffff: a [`Fill`]'s sum is added to others), over
    /// random octets and all ones (the lanes' largest sums: a lane's first words would
    /// overflow were they added more than 0x10001 steps between folds), at every short
    /// length and up to past two of the lanes' folds.
    ///
    /// [`Fill`]: crate::host::Fill
    #[test]
    fn bulk_sums_are_the_plain_sum_of_words() {
        let plain = |d: &[u8]| -> u64 {
            d.chunks(2)
                .map(|w| u64::from(w[0]) | u64::from(w.get(1).copied().unwrap_or(0)) << 8)
                .sum()
        };
        let fold_len = FOLD_EVERY * STEP;
        let long = 3 * fold_len + 1000 + 5;
        for src in [bytes(long, 21), vec![0xff; long]] {
            let lens = (0..=300).chain([1460, fold_len - 1, fold_len + 33, long]);
            for len in lens {
                let d = &src[..len];
                let want = plain(d);
                assert_eq!(sum(d), want, "{len} octets");
                if len <= 9000 {
                    assert_eq!(sum_short(d), want, "{len} octets, sum_short");
                }
                let mut out = vec![0x5a; len];
                assert_eq!(copy_and_sum(&mut out, d), want, "{len} octets");
                assert_eq!(out, d);
                let mut out = vec![0x5a; len];
                let got =
                    copy_and_sum_from(&mut out, |at, o| o.copy_from_slice(&d[at..][..o.len()]));
                assert_eq!(got, want, "{len} octets");
                assert_eq!(out, d);
            }
        }
    }

    /// One flipped bit anywhere in a segment (or its pseudo-header's addresses) fails.
    #[test]
    fn a_flipped_bit_fails_verification() {
        let mut seg = segment(&bytes(1460, 3), 4);
        let mut p = TcpPacket::new_unchecked(&mut seg[..]);
        p.fill_checksum(&IpAddress::Ipv4(SRC), &IpAddress::Ipv4(DST));
        let ph = pseudo_header(SRC, DST, seg.len() as u16);
        assert!(verifies(ph + sum(&seg)));
        for i in (0..seg.len()).step_by(7) {
            let mut bad = seg.clone();
            bad[i] ^= 1 << (i % 8);
            assert!(!verifies(ph + sum(&bad)), "octet {i}");
        }
        let other = pseudo_header(Ipv4Address::new(198, 18, 0, 3), DST, seg.len() as u16);
        assert!(!verifies(other + sum(&seg)));
    }

    /// `sum_to_fold` folds as `sum` does at every length up to past a few of its 32-octet
    /// steps and long ones, from every alignment of the buffer, over random octets, all
    /// zeros (0 must stay 0, not 0xffff) and all ones (the carries), and added to the
    /// pseudo-header as the host does: the same checksum field as smoltcp's.
    #[test]
    fn sum_to_fold_folds_as_sum() {
        let src = bytes(70_000, 13);
        let fills: [&dyn Fn(usize) -> Vec<u8>; 3] =
            [&|len| src[..len].to_vec(), &|len| vec![0; len], &|len| {
                vec![0xff; len]
            }];
        for (k, f) in fills.iter().enumerate() {
            let whole = f(2100 + 8);
            for off in 0..8 {
                for len in (0..300).chain([1460, 1461, 2099, 2100]) {
                    let d = &whole[off..off + len];
                    assert!(
                        sum_to_fold(d) <= 1 << 33,
                        "fill {k}, offset {off}, {len} octets"
                    );
                    assert_eq!(
                        fold(sum_to_fold(d)),
                        fold(sum(d)),
                        "fill {k}, offset {off}, {len} octets"
                    );
                }
            }
            for len in [9000, 65_535] {
                let d = f(len);
                assert_eq!(
                    fold(sum_to_fold(&d)),
                    fold(sum(&d)),
                    "fill {k}, {len} octets"
                );
            }
        }
        for len in (0..=300).chain([1460, 1461, 65_515]) {
            let mut seg = segment(&bytes(len, len as u64 + 5), len as u64 + 6);
            seg[16] = 0;
            seg[17] = 0;
            let ph = pseudo_header(SRC, DST, seg.len() as u16);
            let mine = finish(ph + sum_to_fold(&seg));
            let mut p = TcpPacket::new_unchecked(&mut seg[..]);
            p.fill_checksum(&IpAddress::Ipv4(SRC), &IpAddress::Ipv4(DST));
            assert_eq!(mine, seg[16..18], "payload of {len} octets");
            assert!(verifies(ph + sum_to_fold(&seg)), "payload of {len} octets");
        }
    }

    /// `copy_and_sum_to_fold` copies exactly (over a garbage destination) and its sum
    /// folds as `sum` of the octets does, at every length up to past the bulk threshold and
    /// long ones, from every source alignment, over random octets, zeros and ones.
    #[test]
    fn copy_and_sum_to_fold_copies_and_folds_as_sum() {
        let src = bytes(70_000, 14);
        let fills: [&dyn Fn(usize) -> Vec<u8>; 3] =
            [&|len| src[..len].to_vec(), &|len| vec![0; len], &|len| {
                vec![0xff; len]
            }];
        for (k, f) in fills.iter().enumerate() {
            let whole = f(4096 + 8);
            for off in 0..8 {
                for len in (0..300).chain([1460, 1461, 4096]) {
                    let s = &whole[off..off + len];
                    let mut dst = vec![0xa5; len];
                    let t = copy_and_sum_to_fold(&mut dst, s);
                    assert_eq!(dst, s, "fill {k}, offset {off}, {len} octets");
                    assert!(t <= 1 << 33, "fill {k}, offset {off}, {len} octets");
                    assert_eq!(
                        fold(t),
                        fold(sum(s)),
                        "fill {k}, offset {off}, {len} octets"
                    );
                }
            }
        }
    }

    /// `copy_and_sum_from` copies what its reader gives and sums what it copied, at every
    /// length up to three steps past a multiple of the step and past the lanes' fold.
    #[test]
    fn copy_and_sum_from_matches_copy_and_sum() {
        let src = bytes(70_000, 11);
        for len in (0..200).chain([1460, 1461, 9000, 65_535]) {
            let s = &src[3..3 + len];
            let mut dst = vec![0x55; len];
            let t = copy_and_sum_from(&mut dst, |at, out| {
                out.copy_from_slice(&s[at..at + out.len()]);
            });
            assert_eq!(dst, s, "{len} octets");
            assert_eq!(t, sum(s), "{len} octets");
        }
    }

    /// Summing a buffer in blocks, each from its own first octet and placed with
    /// `at_offset`, folds to the sum of the whole, whatever the blocks' parities.
    #[test]
    fn blocks_placed_at_their_offsets_sum_to_the_whole() {
        let data = bytes(3000, 12);
        for cuts in [
            vec![0, 1, 2, 3, 1000, 2999, 3000],
            vec![0, 7, 8, 1461, 3000],
            vec![0, 3000],
        ] {
            let mut total = 0u64;
            for w in cuts.windows(2) {
                total += at_offset(sum(&data[w[0]..w[1]]), w[0]);
            }
            assert_eq!(fold(total), fold(sum(&data)), "cuts {cuts:?}");
        }
    }

    /// The copy is exact and its sum equals [`sum`] of the octets, at every length up to
    /// three steps past a multiple of the step, from every source alignment.
    #[test]
    fn copy_and_sum_copies_and_sums() {
        let src = bytes(4096 + 64, 9);
        for off in 0..8 {
            for len in (0..200).chain([1460, 1461, 4096]) {
                let s = &src[off..off + len];
                let mut dst = vec![0xaa; len];
                let t = copy_and_sum(&mut dst, s);
                assert_eq!(dst, s, "offset {off}, {len} octets");
                assert_eq!(t, sum(s), "offset {off}, {len} octets");
            }
        }
    }
}
