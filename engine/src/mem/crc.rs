//! CRC32c (Castagnoli) for the engine's framers and deframers: the `crc32c` crate, with a
//! shorter path for short inputs.
//!
//! The crate interleaves three streams of SSE4.2 `crc32` instructions only over whole
//! blocks of 768 octets (and 24 KiB), each combined through table lookups; the rest of an
//! input runs one stream, one `crc32` every three cycles (its latency), and a short input
//! also pays for its dispatch and byte-wise head and tail loops: ~130 instructions for the
//! 84 covered octets of a 64 B Write's FPDU, and for a 1,440-octet FPDU 672 of the octets
//! go one stream. Here, below [`SHORT`] octets one `crc32` per 8 octets (unaligned loads
//! are free) and one per 4, 2 and 1 octets of the tail; from [`SHORT`] on, three equal
//! lanes of as many words as the input has (up to 4 KiB each) at one `crc32` a cycle, their
//! states combined with two carry-less multiplications (PCLMULQDQ) and one `crc32`, and a
//! tail under 24 octets. The results are the crate's, bit for bit (tested at every length
//! to past three lanes, offset and initial value below).
//!
//! [`copy_sum_crc`] copies an FPDU's payload from registered memory into a frame, sums it
//! for the TCP checksum and extends the CRC over it in one pass (three lanes at once, as
//! above): the transmit path's one touch of each octet.
//!
//! The `unsafe` here is the call of `#[target_feature]` functions (SSE4.2, PCLMULQDQ) after
//! a run-time check that the CPU has them (`std::is_x86_feature_detected!`, which caches
//! its answer), and in [`copy_sum_crc`] the loads from registered memory whose bounds its
//! caller ([`crate::mem::MrGuard::copy_out_summed_crc_at`]) proved; the placement module is
//! where the engine keeps its `unsafe`, and the CRC of an FPDU is computed as its payload is
//! placed or framed.

/// Inputs shorter than this take the one-stream loop (three streams and their combination
/// cost more than they save below it).
pub const SHORT: usize = 256;

/// The longest lane of the three-stream loop: inputs up to three times this are one pass.
const MAX_LANE: usize = 4096;

/// `crc32c::crc32c_append(crc, data)`, faster for the FPDU sizes of a TCP segment (module
/// documentation): the CRC32c of the octets before `data` (`crc`, 0 for none) extended
/// over `data`. It has the signature of `warpcore_proto::wire::fpdu::Crc32cFn`.
///
/// The short case is the hot one (every small FPDU, sent and received, calls this through
/// a function pointer): it tail-calls `serial_append` once `crc32c_append_long` has seen
/// SSE4.2 (`HAVE_SSE42`), and everything else is out of line there, so this function saves
/// no registers and sets up no frame.
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if data.len() < SHORT && HAVE_SSE42.load(std::sync::atomic::Ordering::Relaxed) {
        // SAFETY: the CPU has SSE4.2 (`HAVE_SSE42` is set only once the standard library
        // detected it), `serial_append`'s only target feature; it reads only `data`.
        return unsafe { serial_append(crc, data) };
    }
    crc32c_append_long(crc, data)
}

/// Set by [`crc32c_append_long`] once `std::is_x86_feature_detected!` reported SSE4.2: a
/// flag [`crc32c_append`] reads without the standard library's first-use detection call,
/// whose register saves every call would otherwise pay.
#[cfg(target_arch = "x86_64")]
static HAVE_SSE42: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// [`crc32c_append`] from [`SHORT`] octets on, on a CPU without SSE4.2, and the first
/// short input (which sets `HAVE_SSE42`).
#[inline(never)]
fn crc32c_append_long(crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("sse4.2") {
        HAVE_SSE42.store(true, std::sync::atomic::Ordering::Relaxed);
        if data.len() < SHORT {
            // SAFETY: the CPU has SSE4.2 (checked just above), `serial_append`'s only
            // target feature; it reads only `data`.
            return unsafe { serial_append(crc, data) };
        }
        if std::is_x86_feature_detected!("pclmulqdq") {
            // SAFETY: the CPU has SSE4.2 and PCLMULQDQ (checked above), `three_streams`'
            // target features; it reads only `data`.
            return !unsafe { three_streams(!crc, data) };
        }
    }
    crc32c::crc32c_append(crc, data)
}

/// `crc32c_append` for inputs under [`SHORT`] octets: the CRC (inverted, as
/// `crc32c_append` takes and gives it) extended over `data` by [`serial`], inlined here.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn serial_append(crc: u32, data: &[u8]) -> u32 {
    !serial(!crc, data)
}

/// The CRC state (not inverted) `c` after `data`: one `crc32` per 8 octets, four to a loop
/// step (one 32-octet chunk), then at most one each per 16, 8, 4, 2 and 1 octets of the
/// rest. Written out so: the compiler's own unrolling of a one-word loop runs a
/// remainder loop and an 8-word body with more set-up than a short FPDU's CRC needs.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
#[inline]
unsafe fn serial(c: u32, data: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u16, _mm_crc32_u32, _mm_crc32_u64, _mm_crc32_u8};
    let mut c = u64::from(c);
    let mut chunks = data.chunks_exact(32);
    for w in &mut chunks {
        c = _mm_crc32_u64(c, word(&w[..8]));
        c = _mm_crc32_u64(c, word(&w[8..16]));
        c = _mm_crc32_u64(c, word(&w[16..24]));
        c = _mm_crc32_u64(c, word(&w[24..]));
    }
    let mut rest = chunks.remainder();
    if rest.len() >= 16 {
        c = _mm_crc32_u64(c, word(&rest[..8]));
        c = _mm_crc32_u64(c, word(&rest[8..16]));
        rest = &rest[16..];
    }
    if rest.len() >= 8 {
        c = _mm_crc32_u64(c, word(&rest[..8]));
        rest = &rest[8..];
    }
    let mut c = c as u32;
    if rest.len() >= 4 {
        c = _mm_crc32_u32(c, u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]));
        rest = &rest[4..];
    }
    if rest.len() >= 2 {
        c = _mm_crc32_u16(c, u16::from_le_bytes([rest[0], rest[1]]));
        rest = &rest[2..];
    }
    if let [last] = rest {
        c = _mm_crc32_u8(c, *last);
    }
    c
}

/// Eight octets as a little-endian word (`w` is 8 octets long).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn word(w: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(w);
    u64::from_le_bytes(b)
}

/// `SHIFT[k]` multiplies a CRC state by x^(8·8(k+1) − 33) mod P: with one carry-less
/// multiplication and one `crc32` it advances a state over 8(k+1) zero octets (Intel,
/// "Fast CRC Computation for iSCSI Polynomial Using CRC32 Instruction", 2011). The state
/// that stands for x^31 is 1, and each `crc32` over a zero word multiplies by x^64, so the
/// constant for `n` octets is 1 advanced over `n − 8` zero octets.
#[cfg(target_arch = "x86_64")]
fn shift_table() -> &'static [u32; 2 * MAX_LANE / 8] {
    static TABLE: std::sync::OnceLock<[u32; 2 * MAX_LANE / 8]> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = [0u32; 2 * MAX_LANE / 8];
        let mut k = 1u32;
        for e in t.iter_mut() {
            *e = k;
            // The next constant: eight more zero octets (crc32c_append's table-free
            // software form of one `crc32` over a zero word, so no target feature here).
            for _ in 0..64 {
                k = if k & 1 == 1 {
                    (k >> 1) ^ 0x82F6_3B78
                } else {
                    k >> 1
                };
            }
        }
        t
    })
}

/// Lanes' states combined: `a`'s state moved over two lanes of `lane` octets of zeros,
/// `b`'s over one, and `d`'s, which ends where the pass ends (`lane` a multiple of 8 from 8
/// to [`MAX_LANE`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2,pclmulqdq")]
unsafe fn combine(shift: &[u32; 2 * MAX_LANE / 8], a: u64, b: u64, d: u64, lane: usize) -> u32 {
    use std::arch::x86_64::{
        _mm_clmulepi64_si128, _mm_crc32_u64, _mm_cvtsi128_si64, _mm_cvtsi64_si128, _mm_xor_si128,
    };
    let ka = _mm_cvtsi64_si128(i64::from(shift[2 * lane / 8 - 1]));
    let kb = _mm_cvtsi64_si128(i64::from(shift[lane / 8 - 1]));
    let pa = _mm_clmulepi64_si128(_mm_cvtsi64_si128(a as i64), ka, 0x00);
    let pb = _mm_clmulepi64_si128(_mm_cvtsi64_si128(b as i64), kb, 0x00);
    let folded = _mm_cvtsi128_si64(_mm_xor_si128(pa, pb)) as u64;
    (_mm_crc32_u64(0, folded) ^ d) as u32
}

/// Inputs from this long on take [`copy_sum_crc`]'s fused pass where the CPU has it
/// ([`fused_available`]); shorter ones a copy and sum, then the CRC over the copy in L1 (the
/// three lanes' set-up and combination cost more than they save below it).
pub const FUSE_MIN: usize = 768;

/// Whether [`copy_sum_crc`] may be called: an x86-64 CPU with SSE4.2 and PCLMULQDQ (the
/// answer is cached by the standard library).
#[inline]
pub fn fused_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("sse4.2") && std::is_x86_feature_detected!("pclmulqdq")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Copies `dst.len()` octets from `src` into `dst` and returns the unfolded Internet
/// checksum sum of `dst` (as `warpcore_tcp::csum::copy_and_sum` would) and the CRC32c of
/// `dst` appended to `crc` (as [`crc32c_append`]): the transmit path's one touch of each
/// octet copied from registered memory into a frame (issue 12 items 2 and 3). Sum and CRC
/// are taken of the octets written to `dst`, whatever the source does meanwhile.
///
/// One pass over three lanes of the input at once: each 16-octet vector is loaded once,
/// stored, widened into the checksum's 32-bit lanes, and its words run through `crc32`
/// from the copy just stored (the instruction loads them itself, with a memory operand),
/// so the CRC's one instruction a cycle overlaps the copy's
/// loads and stores instead of following them; passes of up to 4 KiB a lane,
/// combined as in [`crc32c_append`]'s three streams, then a tail under 96 octets.
///
/// # Safety
/// `src` must be valid for reads of `dst.len()` octets (it may change meanwhile: it is
/// registered memory the application owns) and must not overlap `dst`; the CPU must have
/// SSE4.2 and PCLMULQDQ ([`fused_available`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2,pclmulqdq")]
pub unsafe fn copy_sum_crc(src: *const u8, dst: &mut [u8], crc: u32) -> (u64, u32) {
    use std::arch::x86_64::{
        __m128i, _mm_add_epi32, _mm_loadu_si128, _mm_setzero_si128, _mm_storeu_si128,
        _mm_unpackhi_epi16, _mm_unpacklo_epi16,
    };
    const V: usize = 16;
    let shift = shift_table();
    let n = dst.len();
    let d = dst.as_mut_ptr();
    let zero = _mm_setzero_si128();
    let mut total = 0u64;
    let mut c = !crc;
    let mut done = 0usize;
    while n - done >= 6 * V {
        let lane = ((n - done) / (6 * V) * (2 * V)).min(MAX_LANE);
        let mut acc = [zero; 4];
        let (mut ca, mut cb, mut cd) = (u64::from(c), 0u64, 0u64);
        let mut i = done;
        while i < done + lane {
            // One 32-octet step of each lane: a at i, b a lane later, d two lanes later.
            for (k, cs) in [(0, &mut ca), (lane, &mut cb), (2 * lane, &mut cd)] {
                let at = i + k;
                // SAFETY: `at + 32 <= done + 3 * lane <= n`: inside `src` (the caller's
                // contract) and inside `dst`.
                let (lo, hi) = unsafe {
                    let lo = _mm_loadu_si128(src.add(at).cast::<__m128i>());
                    let hi = _mm_loadu_si128(src.add(at + V).cast::<__m128i>());
                    _mm_storeu_si128(d.add(at).cast::<__m128i>(), lo);
                    _mm_storeu_si128(d.add(at + V).cast::<__m128i>(), hi);
                    (lo, hi)
                };
                acc[0] = _mm_add_epi32(acc[0], _mm_unpacklo_epi16(lo, zero));
                acc[1] = _mm_add_epi32(acc[1], _mm_unpackhi_epi16(lo, zero));
                acc[2] = _mm_add_epi32(acc[2], _mm_unpacklo_epi16(hi, zero));
                acc[3] = _mm_add_epi32(acc[3], _mm_unpackhi_epi16(hi, zero));
                for w in 0..4 {
                    // SAFETY: `at + 8 * w + 8 <= at + 32`: inside `dst`, just written.
                    *cs = unsafe { crc32_from_memory(*cs, d.add(at + 8 * w)) };
                }
            }
            i += 2 * V;
        }
        // A pass adds at most 3 * MAX_LANE / 32 = 384 words of 16 bits to each 32-bit
        // lane: no overflow.
        for a in acc {
            let lanes: [u32; 4] = std::mem::transmute(a);
            total += lanes.iter().map(|&l| u64::from(l)).sum::<u64>();
        }
        c = combine(shift, ca, cb, cd, lane);
        done += 3 * lane;
    }
    // The tail, under three steps, at a multiple of 32 octets (an even offset).
    let tail = &mut dst[done..];
    // SAFETY: `done + tail.len() == n`: inside `src`; `tail` is part of `dst`.
    unsafe { std::ptr::copy_nonoverlapping(src.add(done), tail.as_mut_ptr(), tail.len()) };
    total += warpcore_tcp::csum::sum(tail);
    (total, !serial(c, tail))
}

/// The CRC state `c` extended over the 8 octets at `p` (any alignment), loaded by the
/// `crc32` instruction itself: the compiler cannot take the word from anywhere else (such
/// as the source those octets were just copied from), so the CRC covers what `p` holds.
/// (A volatile `u64` read would do the same but must be aligned; a frame's payload is not.)
///
/// # Safety
/// `p` must be valid for reads of 8 octets; the CPU must have SSE4.2.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn crc32_from_memory(c: u64, p: *const u8) -> u64 {
    let mut c = c;
    // SAFETY: the caller's contract: 8 readable octets at `p`, SSE4.2 present. `readonly`:
    // the instruction reads memory, so the stores before it are done first.
    unsafe {
        std::arch::asm!(
            "crc32 {c}, qword ptr [{p}]",
            c = inout(reg) c,
            p = in(reg) p,
            options(nostack, readonly, preserves_flags, pure)
        );
    }
    c
}

/// The CRC state (not inverted) `c` after `data` (at least [`SHORT`] octets): passes of
/// three equal lanes of whole words summed at once (one `crc32` a cycle instead of one
/// every three), then the lanes' states combined (`SHIFT`); a tail of less than 24 octets
/// one stream.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2,pclmulqdq")]
unsafe fn three_streams(c: u32, mut data: &[u8]) -> u32 {
    use std::arch::x86_64::_mm_crc32_u64;
    let shift = shift_table();
    let mut c = c;
    while data.len() >= 24 {
        let lane = (data.len() / 24 * 8).min(MAX_LANE);
        let (a, rest) = data.split_at(lane);
        let (b, rest) = rest.split_at(lane);
        let (d, rest) = rest.split_at(lane);
        let (mut ca, mut cb, mut cd) = (u64::from(c), 0u64, 0u64);
        for ((x, y), z) in a
            .chunks_exact(8)
            .zip(b.chunks_exact(8))
            .zip(d.chunks_exact(8))
        {
            ca = _mm_crc32_u64(ca, word(x));
            cb = _mm_crc32_u64(cb, word(y));
            cd = _mm_crc32_u64(cd, word(z));
        }
        c = combine(shift, ca, cb, cd, lane);
        data = rest;
    }
    serial(c, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The crate's value at every length up to past [`SHORT`], from every alignment of
    /// the first octet, from 0 and from other initial values; and the check value of the
    /// CRC-32C catalogue.
    #[test]
    fn equals_the_crate_everywhere() {
        let data: Vec<u8> = (0..40_016u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        assert_eq!(crc32c_append(0, b"123456789"), 0xE306_9283);
        for off in 0..8 {
            for len in (0..SHORT + 200)
                .chain((SHORT + 200..4 * MAX_LANE).step_by(97))
                .chain([1440, 8948, 3 * MAX_LANE, 3 * MAX_LANE + 23, 40_000])
            {
                let d = &data[off..off + len];
                for init in [0u32, 1, 0xdead_beef, u32::MAX] {
                    assert_eq!(
                        crc32c_append(init, d),
                        crc32c::crc32c_append(init, d),
                        "offset {off}, {len} octets, initial {init:#x}"
                    );
                }
            }
        }
    }

    /// The fused copy writes exactly the source and returns the sum `copy_and_sum` returns
    /// and the CRC the crate computes, at every length around the lanes' boundaries (one
    /// to several passes, every tail), from several alignments and initial values.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn fused_copy_equals_copy_sum_and_crc() {
        if !fused_available() {
            panic!("this test needs an x86-64 CPU with SSE4.2 and PCLMULQDQ");
        }
        let data: Vec<u8> = (0..40_100u32)
            .map(|i| (i.wrapping_mul(2_246_822_519) >> 11) as u8)
            .collect();
        let lens = (0..400)
            .chain((400..4 * MAX_LANE).step_by(61))
            .chain([
                FUSE_MIN,
                1440,
                8940,
                3 * MAX_LANE - 1,
                3 * MAX_LANE,
                3 * MAX_LANE + 95,
            ])
            .chain([3 * MAX_LANE + 96, 9 * MAX_LANE + 7, 40_000]);
        for len in lens {
            // Source and destination at every kind of alignment (a frame's payload is not
            // 8-aligned).
            for (off, doff) in [(0usize, 0usize), (1, 5), (3, 2), (8, 7)] {
                let src = &data[off..off + len];
                for init in [0u32, 0x1234_5678] {
                    let mut buf = vec![0xA5u8; len + 16];
                    let dst = &mut buf[doff..doff + len];
                    // SAFETY: `src` is a slice of `len` octets, apart from `dst`; the CPU
                    // has the features (checked above).
                    let (sum, crc) = unsafe { copy_sum_crc(src.as_ptr(), dst, init) };
                    assert_eq!(&buf[doff..doff + len], src, "copy, {len} octets at {off}");
                    assert!(
                        buf[..doff]
                            .iter()
                            .chain(&buf[doff + len..])
                            .all(|&b| b == 0xA5),
                        "wrote outside the {len} octets"
                    );
                    let mut want = vec![0u8; len];
                    let want_sum = warpcore_tcp::csum::copy_and_sum(&mut want, src);
                    assert_eq!(
                        warpcore_tcp::csum::fold(sum),
                        warpcore_tcp::csum::fold(want_sum),
                        "sum, {len} octets at {off}"
                    );
                    assert_eq!(crc, crc32c::crc32c_append(init, src), "CRC, {len} at {off}");
                }
            }
        }
    }

    /// Extending over pieces equals the CRC of the whole, as the framers use it.
    #[test]
    fn appends_compose() {
        let data: Vec<u8> = (0..20_000u32).map(|i| (i * 7 + 3) as u8).collect();
        let whole = crc32c::crc32c(&data);
        for cut in [0, 1, 7, 8, 83, 500, 999, 1000, 12_289, 19_999, 20_000] {
            let (a, b) = data.split_at(cut);
            assert_eq!(crc32c_append(crc32c_append(0, a), b), whole, "cut at {cut}");
        }
    }
}
