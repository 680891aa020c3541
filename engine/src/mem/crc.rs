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
//! above, on 32-octet vectors where the CPU has AVX2, the sum and the CRC taken from the
//! register stored): the transmit path's one touch of each octet.
//!
//! On a CPU with AVX-512F, AVX-512BW and VPCLMULQDQ, inputs from [`FOLD_MIN`] octets on take
//! neither `crc32` lanes: 64-octet vectors are folded into four 512-bit registers by carry-less
//! multiplication (two per 16 octets, four 16-octet lanes per instruction), 256 octets a
//! step, then reduced to 128 bits and by two `crc32` to the state (`fold512`, and
//! `copy_sum_crc_fold512` with the copy and the sum in the same registers). Here (AMD EPYC,
//! `bench/benches/crc.rs`, `docs/decisions/0005-short-crc32c.md`) that doubles the CRC of
//! an FPDU of MTU 9000 and its fused copy into a frame.
//!
//! On a CPU with AVX2 and VPCLMULQDQ but not AVX-512 (AMD Zen 3), the copy folds 256 bits at
//! a time (`copy_sum_crc_fold256`); the CRC alone keeps the three lanes there, which were
//! the faster (`docs/decisions/0005-short-crc32c.md`, 2026-12-01 addendum).
//!
//! [`bulk_sum`] gives the TCP crate a 512-bit sum for verifying received segments'
//! checksums (256-bit where the CPU has AVX2 but not AVX-512F), which that crate (no
//! `unsafe`) cannot choose at run time. Where the CPU has the 512-bit folding paths,
//! [`payload_digest`] gives it `sum_crc_fold512` as well (`sum_crc_fold256` where it has
//! the 256-bit ones: on Zen 3 that one pass took 107-112 ns for 1,440 octets against
//! 129-134 for the sum's pass and the three `crc32` lanes' after it, and as long at 8,960;
//! `docs/decisions/0005-short-crc32c.md`, 2026-12-03 addendum): a predicted segment's payload
//! summed and its CRC32c taken in one pass, the CRC then checking the FPDU that fills the
//! segment (`Deframer::poll_digest`): the receive path's one read of each octet before
//! its copy into registered memory.
//!
//! The `unsafe` here is the call of `#[target_feature]` functions (SSE4.2, PCLMULQDQ, AVX2,
//! AVX-512F, VPCLMULQDQ) after a run-time check that the CPU has them
//! (`std::is_x86_feature_detected!`, which caches its answer); the unaligned vector loads
//! from slices whose bounds the loops check; in [`copy_sum_crc`] the loads from registered
//! memory whose bounds its caller ([`crate::mem::MrGuard::copy_out_summed_crc_at`])
//! proved, and the folding path's store into the frame, written in assembly. The placement
//! module is where the engine keeps its `unsafe`, and the CRC of an FPDU is computed as its
//! payload is placed or framed.

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
        if fold512_available() {
            // SAFETY: the CPU has SSE4.2 (checked above), PCLMULQDQ, AVX-512F and
            // VPCLMULQDQ (`fold512_available`), `fold512`'s target features; `data` has at
            // least `SHORT` = `FOLD_MIN` octets; it reads only `data`.
            return !unsafe { fold512(!crc, data) };
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

/// Whether a copy of `len` octets takes [`copy_sum_crc`]: the CPU has its features
/// ([`fused_available`]) and `len` is [`FUSE_MIN`] or more, or [`FOLD_MIN`] or more where
/// a folding path runs (AVX-512F, AVX-512BW and VPCLMULQDQ, or AVX2 and VPCLMULQDQ).
#[inline]
pub fn fuse(len: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        len >= FOLD_MIN
            && fused_available()
            && (len >= FUSE_MIN || fold512_available() || fold256_available())
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = len;
        false
    }
}

/// [`copy_sum_crc`] of slices, on any CPU: `src` copied into `dst` (the same length),
/// with the unfolded Internet checksum sum and the CRC32c (`crc` extended) of what was
/// written, in one pass where [`fuse`] says so, else a copy, its sum, and the CRC over the
/// copy. What `bench/benches/crc.rs` measures.
///
/// # Panics
/// If the lengths differ.
pub fn copy_sum_crc_slices(src: &[u8], dst: &mut [u8], crc: u32) -> (u64, u32) {
    assert_eq!(src.len(), dst.len(), "copy_sum_crc_slices: lengths differ");
    #[cfg(target_arch = "x86_64")]
    if fuse(dst.len()) {
        // SAFETY: `src` is a slice of `dst.len()` octets, apart from the unique borrow
        // `dst`; the CPU has SSE4.2 and PCLMULQDQ (`fuse` checked).
        return unsafe { copy_sum_crc(src.as_ptr(), dst, crc) };
    }
    dst.copy_from_slice(src);
    (warpcore_tcp::csum::sum(dst), crc32c_append(crc, dst))
}

/// Copies `dst.len()` octets from `src` into `dst` and returns the unfolded Internet
/// checksum sum of `dst` (as `warpcore_tcp::csum::copy_and_sum` would) and the CRC32c of
/// `dst` appended to `crc` (as [`crc32c_append`]): the transmit path's one touch of each
/// octet copied from registered memory into a frame (issue 12 items 2 and 3). Sum and CRC
/// are taken of the octets written to `dst`, whatever the source does meanwhile.
///
/// From [`FOLD_MIN`] octets on, on a CPU with AVX-512F, AVX-512BW and VPCLMULQDQ, by folding
/// (`copy_sum_crc_fold512`): each 64-octet vector loaded once, stored, summed and folded
/// into the CRC from the one register; on a CPU with AVX2 and VPCLMULQDQ but not those, the
/// same in 32-octet vectors (`copy_sum_crc_fold256`). Otherwise one pass over three lanes of
/// the input at once, so that the CRC's one instruction a cycle overlaps the copy's loads
/// and stores instead of following them; passes of up to 4 KiB a lane, combined as in
/// [`crc32c_append`]'s three streams, then a tail under 96 octets. With AVX2
/// (`copy_sum_crc_lanes256`) each 32-octet vector is loaded once, stored, widened into the
/// checksum's 32-bit lanes, and its four words moved from that register into `crc32`;
/// without it (`copy_sum_crc_lanes`) 16-octet vectors, whose words `crc32` reads back from
/// the copy just stored (the instruction loads them itself, with a memory operand).
///
/// # Safety
/// `src` must be valid for reads of `dst.len()` octets (it may change meanwhile: it is
/// registered memory the application owns) and must not overlap `dst`; the CPU must have
/// SSE4.2 and PCLMULQDQ ([`fused_available`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2,pclmulqdq")]
pub unsafe fn copy_sum_crc(src: *const u8, dst: &mut [u8], crc: u32) -> (u64, u32) {
    // SAFETY: the caller's contract, passed on; nothing to prefetch.
    unsafe { copy_sum_crc_ahead(src, dst, crc, std::ptr::null(), 0) }
}

/// [`copy_sum_crc`], and a prefetch of the `ahead_len` octets at `ahead` (the source of the
/// next FPDU of the same message) into the second-level cache, so that the next copy finds
/// its source there ([`prefetch`]). On the 32-octet lanes' path (`copy_sum_crc_lanes256`)
/// the prefetches are spread over the copy, two cache lines every 96 octets copied;
/// elsewhere they are issued before it, and only up to [`PREFETCH_AT_ONCE_MAX`] octets
/// ([`prefetch_at_once`]). Issued at once, the ~23 of an MTU 1500 segment
/// waited for the core's miss buffers (a third of `TxRecord::write`'s samples in a
/// write_bw sender); spread, they overlap the copy (`TxRecord::write` 6.0 % -> 3.3 % of
/// the sender; docs/iwperf.md). A prefetch is a hint: it reads nothing architecturally and
/// never faults, so `ahead` may be any address.
///
/// # Safety
/// As [`copy_sum_crc`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2,pclmulqdq")]
pub unsafe fn copy_sum_crc_ahead(
    src: *const u8,
    dst: &mut [u8],
    crc: u32,
    ahead: *const u8,
    ahead_len: usize,
) -> (u64, u32) {
    let folds = dst.len() >= FOLD_MIN;
    if !(folds && (fold512_available() || fold256_available())) && lanes256_available() {
        // SAFETY: the caller's contract for `src`, `dst` and SSE4.2 and PCLMULQDQ; the CPU
        // has AVX2 (just checked).
        return unsafe { copy_sum_crc_lanes256(src, dst, crc, ahead, ahead_len.div_ceil(64)) };
    }
    prefetch_at_once(ahead, ahead_len);
    if folds && fold512_available() {
        // SAFETY: the caller's contract for `src` and `dst`; the CPU has SSE4.2 and
        // PCLMULQDQ (the caller's contract) and AVX-512F, AVX-512BW and VPCLMULQDQ (just checked);
        // `dst` holds at least `FOLD_MIN` octets.
        return unsafe { copy_sum_crc_fold512(src, dst, crc) };
    }
    if folds && fold256_available() {
        // SAFETY: the caller's contract for `src` and `dst`; the CPU has SSE4.2 and
        // PCLMULQDQ (the caller's contract) and AVX2 and VPCLMULQDQ (just checked); `dst`
        // holds at least `FOLD_MIN` octets.
        return unsafe { copy_sum_crc_fold256(src, dst, crc) };
    }
    // SAFETY: the caller's contract, passed on.
    unsafe { copy_sum_crc_lanes(src, dst, crc) }
}

/// Asks the CPU to bring the `len` octets at `p` into its second-level cache, one prefetch
/// a cache line (`prefetcht1`). A hint: it dereferences nothing, so any address is sound.
/// Not the first-level cache: a segment's ~23 lines brought there pushed out the
/// connection's state, which the transmit pass reads at every segment (`perf` of a
/// write_bw sender, same-run pairs: `Recovery::on_sent` 2.85 % -> 1.58 % of its samples,
/// `Host::transmit_frames` 4.12 % -> 3.51 %, the copy unchanged at 14.6 %).
#[inline]
pub fn prefetch(p: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let mut at = 0;
        while at < len {
            prefetch_line(p.wrapping_add(at));
            at += 64;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, len);
}

/// The most octets [`prefetch_at_once`] prefetches: a segment of an MTU of 1500 or a
/// little more. A jumbo frame's worth (~140 lines) issued before its copy made write_bw
/// at MTU 9000 slower (2026-11-30, docs/iwperf.md).
pub const PREFETCH_AT_ONCE_MAX: usize = 2048;

/// [`prefetch`] for a prefetch issued all at once before a copy, rather than spread over
/// it: nothing when `len` is over [`PREFETCH_AT_ONCE_MAX`].
#[inline]
pub fn prefetch_at_once(p: *const u8, len: usize) {
    if len <= PREFETCH_AT_ONCE_MAX {
        prefetch(p, len);
    }
}

/// One cache line's prefetch ([`prefetch`]).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_line(p: *const u8) {
    // SAFETY: `_mm_prefetch` needs SSE, part of every x86_64 CPU; it is a hint that
    // dereferences nothing, so any address is sound.
    unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(p.cast()) };
}

/// Whether the CPU has AVX2, which [`copy_sum_crc_lanes256`] needs besides SSE4.2 and
/// PCLMULQDQ (the answer is cached by the standard library).
#[cfg(target_arch = "x86_64")]
#[inline]
fn lanes256_available() -> bool {
    std::is_x86_feature_detected!("avx2")
}

/// [`copy_sum_crc`] in three lanes of `crc32` instructions and 16-octet vectors (CPUs
/// without AVX2, and no folding path's features).
///
/// # Safety
/// As [`copy_sum_crc`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2,pclmulqdq")]
unsafe fn copy_sum_crc_lanes(src: *const u8, dst: &mut [u8], crc: u32) -> (u64, u32) {
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

/// [`copy_sum_crc_lanes`] on 32-octet vectors (CPUs with AVX2 but neither folding path's
/// features, such as AMD Zen 2): the same three lanes of `crc32` and the same passes, but
/// each lane's 32-octet step is one load and one store, and the sum (two widenings, two
/// additions) and the CRC (the register's four words moved out to `crc32`) are taken from
/// the register stored. The 16-octet form's `crc32` reads each word back from the store
/// just made, which this core does not forward well: the CRC waited for the stores. The
/// load and the store are one assembly block, so that the compiler cannot read `src` again
/// for the sum or the CRC (without it, it gave `crc32` memory operands on `src`, which may
/// change meanwhile). Copying 1,448 octets from an 8 MiB source into 64 recycled frames:
/// 144-150 ns against the 16-octet form's 168-185 (a `memcpy`, then `sum256` and the CRC
/// over the copy: 162-180); 8,948 octets: 760-807 against 910-1,015
/// (`docs/decisions/0005-short-crc32c.md`, 2026-12-05 addendum).
///
/// # Safety
/// As [`copy_sum_crc`], and the CPU must have AVX2 ([`lanes256_available`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2,pclmulqdq,avx2")]
unsafe fn copy_sum_crc_lanes256(
    src: *const u8,
    dst: &mut [u8],
    crc: u32,
    ahead: *const u8,
    ahead_lines: usize,
) -> (u64, u32) {
    use std::arch::x86_64::{
        __m256i, _mm256_add_epi32, _mm256_extract_epi64, _mm256_setzero_si256,
        _mm256_unpackhi_epi16, _mm256_unpacklo_epi16, _mm_crc32_u64,
    };
    const V: usize = 32;
    let shift = shift_table();
    let n = dst.len();
    let d = dst.as_mut_ptr();
    let zero = _mm256_setzero_si256();
    // The 32 octets at `at` copied, summed into `lo` and `hi`, and `crc32`ed into `$c`, all
    // from the one register loaded.
    macro_rules! step {
        ($at:expr, $c:expr, $lo:ident, $hi:ident) => {{
            let at: usize = $at;
            let v: __m256i;
            // SAFETY: `at + 32 <= n` at every use: inside `src` (the caller's contract) and
            // inside `dst`, which nothing else references meanwhile.
            unsafe {
                std::arch::asm!(
                    "vmovdqu {v}, ymmword ptr [{s}]",
                    "vmovdqu ymmword ptr [{p}], {v}",
                    s = in(reg) src.add(at),
                    p = in(reg) d.add(at),
                    v = out(ymm_reg) v,
                    options(nostack, preserves_flags)
                );
            }
            $lo = _mm256_add_epi32($lo, _mm256_unpacklo_epi16(v, zero));
            $hi = _mm256_add_epi32($hi, _mm256_unpackhi_epi16(v, zero));
            let mut x: u64 = $c;
            x = _mm_crc32_u64(x, _mm256_extract_epi64::<0>(v) as u64);
            x = _mm_crc32_u64(x, _mm256_extract_epi64::<1>(v) as u64);
            x = _mm_crc32_u64(x, _mm256_extract_epi64::<2>(v) as u64);
            _mm_crc32_u64(x, _mm256_extract_epi64::<3>(v) as u64)
        }};
    }
    let mut total = 0u64;
    let mut c = !crc;
    let mut done = 0usize;
    // The next cache line of `ahead` to prefetch.
    let mut line = 0usize;
    while n - done >= 3 * V {
        let lane = ((n - done) / (3 * V) * V).min(MAX_LANE);
        let (mut lo, mut hi) = (zero, zero);
        let (mut ca, mut cb, mut cd) = (u64::from(c), 0u64, 0u64);
        let mut i = done;
        while i < done + lane {
            if line < ahead_lines {
                prefetch_line(ahead.wrapping_add(line * 64));
                prefetch_line(ahead.wrapping_add(line * 64 + 64));
                line += 2;
            }
            // One 32-octet step of each lane: a at i, b a lane later, d two lanes later
            // (`i + 2 * lane + 32 <= done + 3 * lane <= n`).
            ca = step!(i, ca, lo, hi);
            cb = step!(i + lane, cb, lo, hi);
            cd = step!(i + 2 * lane, cd, lo, hi);
            i += V;
        }
        // A pass adds at most 3 * MAX_LANE / 32 = 384 words of 16 bits to each 32-bit
        // lane: no overflow.
        total += lanes_sum256(lo) + lanes_sum256(hi);
        c = combine(shift, ca, cb, cd, lane);
        done += 3 * lane;
    }
    // The tail, under three steps, at a multiple of 32 octets (an even offset): its whole
    // steps one after another (a 1,428-octet FPDU payload leaves 84 octets), then the
    // rest in words of 8, 4, 2 and 1 octets.
    if n - done >= V {
        let (mut lo, mut hi) = (zero, zero);
        let mut cs = u64::from(c);
        while n - done >= V {
            cs = step!(done, cs, lo, hi);
            done += V;
        }
        total += lanes_sum256(lo) + lanes_sum256(hi);
        // `crc32` keeps the state in the low 32 bits.
        c = cs as u32;
    }
    // Lines the lanes' steps did not reach (a copy too short for three steps).
    if line < ahead_lines {
        prefetch(ahead.wrapping_add(line * 64), (ahead_lines - line) * 64);
    }
    // SAFETY: `done <= n`: the rest is `n - done` octets inside `src` and `dst`.
    let (sum, crc) = unsafe { copy_sum_crc_rest(src.add(done), d.add(done), n - done, c) };
    (total + sum, !crc)
}

/// The rest of [`copy_sum_crc_lanes256`] (under 32 octets, at an even offset): words of 8,
/// then 4, 2 and 1 octets, each loaded from `src` once into a register (in assembly, as
/// the lanes' vectors), stored into `dst` from it, and summed (as little-endian 16-bit
/// words, as the lanes do: a word's 32-bit halves added) and `crc32`ed from it. Copied with
/// a `memcpy` call and read back from the frame, the 20 octets a 1,428-octet payload
/// leaves cost a call, `csum::sum`'s and the CRC's reads of stores just made (`csum::sum`
/// 1.2 % of a write_bw sender). Returns the sum and the CRC state (not inverted).
///
/// # Safety
/// `src` must be valid for reads and `dst` for writes of `len` octets (apart, and nothing
/// else references `dst` meanwhile); `len < 32`; the CPU must have SSE4.2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn copy_sum_crc_rest(src: *const u8, dst: *mut u8, len: usize, c: u32) -> (u64, u32) {
    use std::arch::x86_64::{_mm_crc32_u16, _mm_crc32_u32, _mm_crc32_u64, _mm_crc32_u8};
    debug_assert!(len < 32);
    let (mut total, mut at) = (0u64, 0usize);
    // The word at `at` loaded by `$load` into a register and stored from it by `$store`.
    macro_rules! piece {
        ($t:ty, $load:literal, $store:literal) => {{
            let w: $t;
            // SAFETY: every use is at `at + size <= len`: inside `src` and `dst` (the
            // caller's contract).
            unsafe {
                std::arch::asm!(
                    $load,
                    $store,
                    s = in(reg) src.add(at),
                    p = in(reg) dst.add(at),
                    w = out(reg) w,
                    options(nostack, preserves_flags)
                );
            }
            w
        }};
    }
    let mut c64 = u64::from(c);
    while len - at >= 8 {
        let w = piece!(u64, "mov {w}, qword ptr [{s}]", "mov qword ptr [{p}], {w}");
        total += (w & 0xffff_ffff) + (w >> 32);
        c64 = _mm_crc32_u64(c64, w);
        at += 8;
    }
    // `crc32` keeps the state in the low 32 bits.
    let mut c = c64 as u32;
    if len - at >= 4 {
        let w = piece!(
            u32,
            "mov {w:e}, dword ptr [{s}]",
            "mov dword ptr [{p}], {w:e}"
        );
        total += u64::from(w);
        c = _mm_crc32_u32(c, w);
        at += 4;
    }
    if len - at >= 2 {
        let w = piece!(
            u32,
            "movzx {w:e}, word ptr [{s}]",
            "mov word ptr [{p}], {w:x}"
        );
        total += u64::from(w);
        c = _mm_crc32_u16(c, w as u16);
        at += 2;
    }
    if len > at {
        let w = piece!(
            u32,
            "movzx {w:e}, byte ptr [{s}]",
            "mov byte ptr [{p}], {w:l}"
        );
        // The last octet at an even offset: the low octet of a little-endian word.
        total += u64::from(w);
        c = _mm_crc32_u8(c, w as u8);
    }
    (total, c)
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

const _: () = assert!(
    FOLD_MIN <= SHORT,
    "crc32c_append_long gives fold512 SHORT octets on"
);

/// Inputs from this long on take the 512-bit folding paths (`fold512`,
/// `copy_sum_crc_fold512`) where the CPU has them: one 256-octet block folded in four
/// registers, then the reduction.
pub const FOLD_MIN: usize = 256;

/// Whether the CPU has what the 512-bit folding paths need: SSE4.2 and PCLMULQDQ (for the
/// reduction), AVX-512F, AVX-512BW and VPCLMULQDQ (the standard library caches the answer;
/// every CPU with the last three has the first two, but the paths' contracts name all
/// five, and so does the check). The answer is kept in one static octet: the per-segment
/// callers (`sum_crc512_checked`, `copy_sum_crc`) read one value, not five (the five
/// checks were an out-of-line call per received segment).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn fold512_available() -> bool {
    static KNOWN: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
    cached_detect(&KNOWN, || {
        std::is_x86_feature_detected!("sse4.2")
            && std::is_x86_feature_detected!("pclmulqdq")
            && std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("vpclmulqdq")
    })
}

/// The answer of `detect`, asked once and kept in `known` (0 not asked yet, 1 no, 2 yes):
/// one load per call after the first.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn cached_detect(known: &std::sync::atomic::AtomicU8, detect: fn() -> bool) -> bool {
    use std::sync::atomic::Ordering::Relaxed;
    #[cold]
    #[inline(never)]
    fn ask(known: &std::sync::atomic::AtomicU8, detect: fn() -> bool) -> bool {
        let yes = detect();
        known.store(1 + u8::from(yes), Relaxed);
        yes
    }
    match known.load(Relaxed) {
        0 => ask(known, detect),
        k => k == 2,
    }
}

/// `x^n mod poly` (`poly` with its x^32 term, in the normal bit order) as the folding
/// loops multiply by it: bit-reflected and shifted left by one (Intel, "Fast CRC
/// Computation for Generic Polynomials Using PCLMULQDQ Instruction", 2009). Computed at
/// compile time, not typed in; with CRC-32's polynomial it gives the constants crc32fast
/// publishes (`tests::fold_constants_follow_the_published_formula`).
#[cfg(target_arch = "x86_64")]
const fn fold_constant(poly: u64, n: u32) -> u64 {
    let mut r = 1u64;
    let mut i = 0;
    while i < n {
        r <<= 1;
        if r & (1 << 32) != 0 {
            r ^= poly;
        }
        i += 1;
    }
    ((r as u32).reverse_bits() as u64) << 1
}

/// CRC32c's polynomial with its x^32 term.
#[cfg(target_arch = "x86_64")]
const CASTAGNOLI: u64 = 0x1_1EDC_6F41;

/// The constants that move a 128-bit chunk `d` bits further along the message: its low
/// half is multiplied by the first (x^(d+32)), its high half by the second (x^(d-32)), and
/// the two products added (XOR) to the data `d` bits on.
#[cfg(target_arch = "x86_64")]
const fn fold_keys(d: u32) -> (u64, u64) {
    (
        fold_constant(CASTAGNOLI, d + 32),
        fold_constant(CASTAGNOLI, d - 32),
    )
}

#[cfg(target_arch = "x86_64")]
const K2048: (u64, u64) = fold_keys(2048);
#[cfg(target_arch = "x86_64")]
const K1536: (u64, u64) = fold_keys(1536);
#[cfg(target_arch = "x86_64")]
const K1024: (u64, u64) = fold_keys(1024);
#[cfg(target_arch = "x86_64")]
const K512: (u64, u64) = fold_keys(512);
#[cfg(target_arch = "x86_64")]
const K768: (u64, u64) = fold_keys(768);
#[cfg(target_arch = "x86_64")]
const K384: (u64, u64) = fold_keys(384);
#[cfg(target_arch = "x86_64")]
const K256: (u64, u64) = fold_keys(256);
#[cfg(target_arch = "x86_64")]
const K128: (u64, u64) = fold_keys(128);

/// A folding constant pair in each 128-bit lane of a 512-bit register.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
fn keys512(k: (u64, u64)) -> std::arch::x86_64::__m512i {
    let (lo, hi) = (k.0 as i64, k.1 as i64);
    std::arch::x86_64::_mm512_set_epi64(hi, lo, hi, lo, hi, lo, hi, lo)
}

/// Each 128-bit lane of `x` moved along by the distance of `k` ([`keys512`]) and added to
/// the same lane of `data`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,vpclmulqdq")]
#[inline]
fn fold_into(
    x: std::arch::x86_64::__m512i,
    k: std::arch::x86_64::__m512i,
    data: std::arch::x86_64::__m512i,
) -> std::arch::x86_64::__m512i {
    use std::arch::x86_64::{_mm512_clmulepi64_epi128, _mm512_ternarylogic_epi64};
    let lo = _mm512_clmulepi64_epi128(x, k, 0x00);
    let hi = _mm512_clmulepi64_epi128(x, k, 0x11);
    // 0x96: the three-way XOR.
    _mm512_ternarylogic_epi64(lo, hi, data, 0x96)
}

/// [`fold_into`] of one 128-bit chunk.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2,pclmulqdq")]
#[inline]
fn fold128_into(
    x: std::arch::x86_64::__m128i,
    k: (u64, u64),
    data: std::arch::x86_64::__m128i,
) -> std::arch::x86_64::__m128i {
    use std::arch::x86_64::{_mm_clmulepi64_si128, _mm_set_epi64x, _mm_xor_si128};
    let k = _mm_set_epi64x(k.1 as i64, k.0 as i64);
    let lo = _mm_clmulepi64_si128(x, k, 0x00);
    let hi = _mm_clmulepi64_si128(x, k, 0x11);
    _mm_xor_si128(_mm_xor_si128(lo, hi), data)
}

/// The four registers of the last 256-octet block (`x[0]` first) folded into one, at the
/// last 64 octets' place.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,vpclmulqdq")]
#[inline]
fn fold4_to1(x: [std::arch::x86_64::__m512i; 4]) -> std::arch::x86_64::__m512i {
    let to3 = fold_into(x[2], keys512(K512), x[3]);
    let to3 = fold_into(x[1], keys512(K1024), to3);
    fold_into(x[0], keys512(K1536), to3)
}

/// The CRC state after a 512-bit register of folded chunks and then `rest`: the
/// register's four lanes folded into one, `rest`'s whole 16-octet chunks folded on, the
/// last 128 bits reduced by two `crc32` from a zero state (folding keeps the message's
/// remainder: those 128 bits stand for everything before them), then `rest`'s tail.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2,pclmulqdq,avx512f,vpclmulqdq")]
fn reduce512(x: std::arch::x86_64::__m512i, rest: &[u8]) -> u32 {
    use std::arch::x86_64::_mm512_extracti32x4_epi32;
    let l = [
        _mm512_extracti32x4_epi32(x, 0),
        _mm512_extracti32x4_epi32(x, 1),
        _mm512_extracti32x4_epi32(x, 2),
        _mm512_extracti32x4_epi32(x, 3),
    ];
    let mut y = fold128_into(l[2], K128, l[3]);
    y = fold128_into(l[1], K256, y);
    y = fold128_into(l[0], K384, y);
    reduce128(y, rest)
}

/// The CRC state after 128 bits of folded chunks `y` and then `rest`: `rest`'s whole
/// 16-octet chunks folded on, the last 128 bits reduced by two `crc32` from a zero state,
/// then `rest`'s tail (the end shared by [`reduce512`] and [`reduce256`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2,pclmulqdq")]
#[inline]
fn reduce128(mut y: std::arch::x86_64::__m128i, rest: &[u8]) -> u32 {
    use std::arch::x86_64::{
        __m128i, _mm_crc32_u64, _mm_cvtsi128_si64, _mm_extract_epi64, _mm_loadu_si128,
    };
    let mut chunks = rest.chunks_exact(16);
    for c in &mut chunks {
        // SAFETY: `c` is 16 readable octets.
        let v = unsafe { _mm_loadu_si128(c.as_ptr().cast::<__m128i>()) };
        y = fold128_into(y, K128, v);
    }
    let s = _mm_crc32_u64(0, _mm_cvtsi128_si64(y) as u64);
    let s = _mm_crc32_u64(s, _mm_extract_epi64(y, 1) as u64);
    // SAFETY: the CPU has SSE4.2 (this function's target features).
    unsafe { serial(s as u32, chunks.remainder()) }
}

/// The CRC state (not inverted) `c` after `data` (at least [`FOLD_MIN`] octets), by
/// folding: four 512-bit registers take 256 octets a step, each 128-bit lane moved along
/// 2,048 bits (two carry-less multiplications) and added to the next block's lane instead
/// of a `crc32` per 8 octets; then whole 64-octet vectors in one register, and
/// [`reduce512`].
///
/// # Safety
/// The CPU must have SSE4.2, PCLMULQDQ, AVX-512F and VPCLMULQDQ; `data.len() >= FOLD_MIN`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2,pclmulqdq,avx512f,vpclmulqdq")]
unsafe fn fold512(c: u32, data: &[u8]) -> u32 {
    use std::arch::x86_64::{
        __m512i, _mm512_loadu_si512, _mm512_xor_si512, _mm512_zextsi128_si512, _mm_cvtsi32_si128,
    };
    assert!(data.len() >= FOLD_MIN);
    let p = data.as_ptr();
    // (A macro: each use is written out in its loop, its 512-bit value in a register.)
    macro_rules! load {
        ($at:expr) => {
            // SAFETY: every use reads 64 octets at `p + at` with `at + 64 <= data.len()`.
            unsafe { _mm512_loadu_si512(p.add($at).cast::<__m512i>()) }
        };
    }
    let mut x = [load!(0), load!(64), load!(128), load!(192)];
    // The state enters added to the message's first 32 bits (reflected: the low ones).
    x[0] = _mm512_xor_si512(x[0], _mm512_zextsi128_si512(_mm_cvtsi32_si128(c as i32)));
    let k = keys512(K2048);
    let mut at = 256;
    while data.len() - at >= 256 {
        for (j, xj) in x.iter_mut().enumerate() {
            *xj = fold_into(*xj, k, load!(at + 64 * j));
        }
        at += 256;
    }
    let mut one = fold4_to1(x);
    let k = keys512(K512);
    while data.len() - at >= 64 {
        one = fold_into(one, k, load!(at));
        at += 64;
    }
    reduce512(one, &data[at..])
}

/// The TCP checksum's bulk sum for received segments ([`warpcore_tcp::csum::BulkSum`]) that
/// this CPU runs faster than the TCP crate's own: 64-octet vectors where it has AVX-512F
/// (`sum512`), 32-octet vectors where it has AVX2 (`sum256`), else `None` (keep the
/// crate's).
pub fn bulk_sum() -> Option<warpcore_tcp::csum::BulkSum> {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx512f") {
        return Some(sum512_checked);
    }
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        return Some(sum256_checked);
    }
    None
}

/// The received payload's sum and CRC32c in one pass ([`warpcore_tcp::csum::BulkSumDigest`],
/// `Stack::set_payload_digest`) where the CPU has the 512-bit folding paths
/// (`sum_crc_fold512`) or the 256-bit ones (`sum_crc_fold256`), else `None`: the host then
/// verifies the checksum as before and the deframer computes each FPDU's CRC. A segment
/// that carries one whole FPDU (an aligned sender's) has its CRC checked from the digest
/// (`Deframer::poll_digest`), so each of its octets is read once here and once for its
/// copy into registered memory.
pub fn payload_digest() -> Option<warpcore_tcp::csum::BulkSumDigest> {
    #[cfg(target_arch = "x86_64")]
    if fold512_available() {
        return Some(sum_crc512_checked);
    }
    #[cfg(target_arch = "x86_64")]
    if fold256_available() {
        return Some(sum_crc256_checked);
    }
    None
}

/// The shortest payload [`payload_digest`]'s pass is asked for: the payload of a
/// segment that holds a few small FPDUs is not digested (its digest could not check
/// any of them), a full segment's is. A segment over this length that holds several
/// FPDUs, or a connection without CRCs, pays for the CRC in the pass for nothing (the
/// deframer computes each FPDU's CRC as before): the host cannot tell, and an aligned
/// bulk sender's segments are one FPDU each.
pub const PAYLOAD_DIGEST_MIN: usize = 512;

/// [`payload_digest`]'s function: `sum_crc_fold512` after the check it was chosen by,
/// returning the sum as [`warpcore_tcp::csum::sum`] does (equal) and
/// `crc32c_append(0, data)`.
#[cfg(target_arch = "x86_64")]
fn sum_crc512_checked(data: &[u8]) -> (u64, u32) {
    if data.len() >= FOLD_MIN && fold512_available() {
        // SAFETY: the CPU has the features (checked just above; the standard library
        // caches the answer); `data` has at least `FOLD_MIN` octets; only `data` is read.
        return unsafe { sum_crc_fold512(data, 0) };
    }
    (warpcore_tcp::csum::sum(data), crc32c_append(0, data))
}

/// [`payload_digest`]'s function where the CPU has the 256-bit folding paths but not the
/// 512-bit ones: `sum_crc_fold256` after the check it was chosen by, as
/// [`sum_crc512_checked`].
#[cfg(target_arch = "x86_64")]
fn sum_crc256_checked(data: &[u8]) -> (u64, u32) {
    if data.len() >= FOLD_MIN && fold256_available() {
        // SAFETY: the CPU has SSE4.2, PCLMULQDQ, AVX2 and VPCLMULQDQ, `sum_crc_fold256`'s
        // features (`fold256_available` checked all four just above; the answer is
        // cached); `data` has at least `FOLD_MIN` octets; only `data` is read.
        return unsafe { sum_crc_fold256(data, 0) };
    }
    (warpcore_tcp::csum::sum(data), crc32c_append(0, data))
}

/// The sum of `data` (as [`sum512`]) and `crc32c_append(crc, data)`, in one pass: each
/// 64-octet vector loaded once, summed and folded into the CRC ([`fold512_pass`] without
/// its store). The receive path's pass over a segment's payload: its TCP checksum and its
/// FPDU's CRC together.
///
/// # Safety
/// The CPU must have SSE4.2, PCLMULQDQ, AVX-512F, AVX-512BW and VPCLMULQDQ
/// (`fold512_available`); `data.len() >= FOLD_MIN`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2,pclmulqdq,avx512f,avx512bw,vpclmulqdq")]
unsafe fn sum_crc_fold512(data: &[u8], crc: u32) -> (u64, u32) {
    assert!(data.len() >= FOLD_MIN);
    // SAFETY: `data` is `data.len()` readable octets; nothing is written (`COPY` false, so
    // the null destination is never used); the features are the caller's contract.
    unsafe { fold512_pass::<false>(data.as_ptr(), std::ptr::null_mut(), data.len(), crc) }
}

/// [`bulk_sum`]'s function: `sum512` after the check it was chosen by.
#[cfg(target_arch = "x86_64")]
fn sum512_checked(data: &[u8]) -> u64 {
    if std::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512F (checked just above; the standard library caches
        // the answer); `sum512` reads only `data`.
        return unsafe { sum512(data) };
    }
    warpcore_tcp::csum::sum(data)
}

/// The unfolded sum of `data`'s 16-bit little-endian words, as [`warpcore_tcp::csum::sum`]
/// (equal, not only after folding): 64-octet vectors, their words split into the 32-bit
/// lanes of two accumulators by a mask and a shift, which are added into the total every
/// 16,384 vectors (each lane then holds at most 16,384 * 0xFFFF < 2^32); the tail under 64
/// octets by the crate's loop. `data` must start at an even offset of what is summed.
///
/// # Safety
/// The CPU must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn sum512(data: &[u8]) -> u64 {
    use std::arch::x86_64::{
        __m512i, _mm512_add_epi32, _mm512_and_si512, _mm512_loadu_si512, _mm512_set1_epi32,
        _mm512_setzero_si512, _mm512_srli_epi32,
    };
    const RUN: usize = 16_384 * 64;
    let low = _mm512_set1_epi32(0xFFFF);
    let whole = data.len() - data.len() % 64;
    let (vectors, tail) = data.split_at(whole);
    let mut total = 0u64;
    for run in vectors.chunks(RUN) {
        let (mut a, mut b) = (_mm512_setzero_si512(), _mm512_setzero_si512());
        for v in run.chunks_exact(64) {
            // SAFETY: `v` is 64 readable octets.
            let v = unsafe { _mm512_loadu_si512(v.as_ptr().cast::<__m512i>()) };
            a = _mm512_add_epi32(a, _mm512_and_si512(v, low));
            b = _mm512_add_epi32(b, _mm512_srli_epi32(v, 16));
        }
        total += lanes_sum(a) + lanes_sum(b);
    }
    total + warpcore_tcp::csum::sum(tail)
}

/// The sixteen 32-bit lanes of `acc` added as 64-bit numbers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
fn lanes_sum(acc: std::arch::x86_64::__m512i) -> u64 {
    use std::arch::x86_64::{
        _mm512_add_epi64, _mm512_castsi512_si256, _mm512_cvtepu32_epi64, _mm512_extracti64x4_epi64,
        _mm512_reduce_add_epi64,
    };
    let lo = _mm512_cvtepu32_epi64(_mm512_castsi512_si256(acc));
    let hi = _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(acc, 1));
    _mm512_reduce_add_epi64(_mm512_add_epi64(lo, hi)) as u64
}

/// [`copy_sum_crc`] by folding ([`fold512`]): each 64-octet vector is loaded from `src`
/// once, stored into `dst`, and that same register is summed into 32-bit lanes (its
/// 16-bit words split by a mask and a shift) and folded into the CRC, four vectors a step;
/// the rest under 64 octets goes the same way in one register under a mask and is taken by
/// [`reduce512`] from a local copy of that register ([`fold512_pass`]).
///
/// # Safety
/// As [`copy_sum_crc`], and the CPU must have AVX-512F, AVX-512BW and VPCLMULQDQ
/// (`fold512_available`); `dst.len() >= FOLD_MIN`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2,pclmulqdq,avx512f,avx512bw,vpclmulqdq")]
unsafe fn copy_sum_crc_fold512(src: *const u8, dst: &mut [u8], crc: u32) -> (u64, u32) {
    assert!(dst.len() >= FOLD_MIN);
    // SAFETY: the caller's contract for `src` and the features; `dst` is a unique borrow of
    // `dst.len()` writable octets, so nothing else references it while it is written.
    unsafe { fold512_pass::<true>(src, dst.as_mut_ptr(), dst.len(), crc) }
}

/// The one pass of [`copy_sum_crc_fold512`] (`COPY`) and [`sum_crc_fold512`] (not): the
/// `n` octets at `src` summed as [`warpcore_tcp::csum::sum`] sums them (equal) and
/// appended to the CRC `crc` (as [`crc32c_append`]), and with `COPY` stored at `dst` from
/// the same registers.
///
/// # Safety
/// `src` valid for reads of `n` octets; with `COPY`, `dst` valid for writes of `n` octets,
/// not overlapping `src` and referenced by nothing else meanwhile (without, `dst` is never
/// used); `n >= FOLD_MIN`; the CPU has SSE4.2, PCLMULQDQ, AVX-512F, AVX-512BW and
/// VPCLMULQDQ.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2,pclmulqdq,avx512f,avx512bw,vpclmulqdq")]
#[inline]
unsafe fn fold512_pass<const COPY: bool>(
    src: *const u8,
    d: *mut u8,
    n: usize,
    crc: u32,
) -> (u64, u32) {
    use std::arch::x86_64::{
        __m512i, _mm512_add_epi32, _mm512_and_si512, _mm512_loadu_si512, _mm512_mask_storeu_epi8,
        _mm512_maskz_loadu_epi8, _mm512_set1_epi32, _mm512_setzero_si512, _mm512_srli_epi32,
        _mm512_storeu_si512, _mm512_xor_si512, _mm512_zextsi128_si512, _mm_cvtsi32_si128,
    };
    /// Vectors summed into the 32-bit lanes before these are added into `total`: each
    /// lane takes two 16-bit words a vector, 2 * 0xFFFF * 4,096 < 2^32.
    const SUM_RUN: usize = 4096;
    debug_assert!(n >= FOLD_MIN);
    let low = _mm512_set1_epi32(0xFFFF);
    let mut total = 0u64;
    let mut acc = _mm512_setzero_si512();
    // One vector: loaded once, stored (with `COPY`), summed, and given for the CRC. The store is written
    // in assembly: the compiler sees a loop that stores what it loaded as a copy, makes
    // it one `memcpy` ahead of the loop and the sums a second pass over `src`, which the
    // application may change meanwhile. (A macro: each use is written out in its loop, its
    // 512-bit value in a register.)
    macro_rules! copy {
        ($at:expr) => {{
            let at = $at;
            // SAFETY: `at + 64 <= n` at every use: inside `src` and, with `COPY`, inside
            // `d` (the caller's contract).
            let v = unsafe {
                let v = _mm512_loadu_si512(src.add(at).cast::<__m512i>());
                if COPY {
                    std::arch::asm!(
                        "vmovdqu64 zmmword ptr [{p}], {v}",
                        p = in(reg) d.add(at),
                        v = in(zmm_reg) v,
                        options(nostack, preserves_flags)
                    );
                }
                v
            };
            acc = _mm512_add_epi32(acc, _mm512_and_si512(v, low));
            acc = _mm512_add_epi32(acc, _mm512_srli_epi32(v, 16));
            v
        }};
    }
    let mut x = [copy!(0), copy!(64), copy!(128), copy!(192)];
    x[0] = _mm512_xor_si512(x[0], _mm512_zextsi128_si512(_mm_cvtsi32_si128(!crc as i32)));
    let mut run = 4;
    let k = keys512(K2048);
    let mut at = 256;
    while n - at >= 256 {
        if run > SUM_RUN - 4 {
            total += lanes_sum(acc);
            acc = _mm512_setzero_si512();
            run = 0;
        }
        for (j, xj) in x.iter_mut().enumerate() {
            let v = copy!(at + 64 * j);
            *xj = fold_into(*xj, k, v);
        }
        run += 4;
        at += 256;
    }
    let mut one = fold4_to1(x);
    let k = keys512(K512);
    // At most four more vectors (three whole, the tail): each lane then holds at most
    // 2 * 0xFFFF * (SUM_RUN + 4) < 2^32.
    while n - at >= 64 {
        let v = copy!(at);
        one = fold_into(one, k, v);
        at += 64;
    }
    // The rest, under 64 octets, from an even offset (a multiple of 64), in one register as
    // well: loaded and stored under a mask (the octets past `n` are neither read nor
    // written, and read as zeros: an odd last octet is summed padded with a zero, as
    // `csum::sum` pads it), summed with the others, and kept for the CRC in a local copy
    // made by one whole store. Not read back from `dst`: a load cannot take its value from
    // a masked store, nor from two stores at once (`memcpy` copies 16-63 octets as two
    // overlapping moves, and the sum's 8-octet words straddle their overlap), so it would
    // wait until every earlier store of the frame had reached the cache (`perf` of
    // write_bw, with the `memcpy`: the tail's first load was the sender's hottest
    // instruction).
    let rest = n - at;
    let mut spill = [0u8; 64];
    if rest > 0 {
        let mask: u64 = (1u64 << rest) - 1;
        // SAFETY: the mask selects the octets `[at, n)`: inside `src` and, with `COPY`,
        // inside `d` (the caller's contract); masked-out octets are not accessed (AVX-512
        // masked loads and stores suppress faults on them). `spill` is 64 writable octets.
        let v = unsafe {
            let v = _mm512_maskz_loadu_epi8(mask, src.add(at).cast::<i8>());
            if COPY {
                _mm512_mask_storeu_epi8(d.add(at).cast::<i8>(), mask, v);
            }
            _mm512_storeu_si512(spill.as_mut_ptr().cast::<__m512i>(), v);
            v
        };
        acc = _mm512_add_epi32(acc, _mm512_and_si512(v, low));
        acc = _mm512_add_epi32(acc, _mm512_srli_epi32(v, 16));
    }
    total += lanes_sum(acc);
    (total, !reduce512(one, &spill[..rest]))
}

/// Whether the CPU has what the 256-bit folding paths need: SSE4.2 and PCLMULQDQ (for the
/// reduction), AVX2 and VPCLMULQDQ (AMD Zen 3, Intel Alder Lake and later client cores:
/// carry-less multiplication of two 128-bit lanes per instruction, without AVX-512). All
/// four are checked, as [`fold512_available`] checks its five: [`sum_crc256_checked`],
/// which [`payload_digest`] hands out, has no caller that checked SSE4.2 and PCLMULQDQ
/// before it (every CPU with the last two has the first two, but the paths' contracts name
/// all four). The answer is kept in one static octet, as [`fold512_available`]'s.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn fold256_available() -> bool {
    static KNOWN: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
    cached_detect(&KNOWN, || {
        std::is_x86_feature_detected!("sse4.2")
            && std::is_x86_feature_detected!("pclmulqdq")
            && std::is_x86_feature_detected!("avx2")
            && std::is_x86_feature_detected!("vpclmulqdq")
    })
}

/// A folding constant pair in each 128-bit lane of a 256-bit register.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn keys256(k: (u64, u64)) -> std::arch::x86_64::__m256i {
    let (lo, hi) = (k.0 as i64, k.1 as i64);
    std::arch::x86_64::_mm256_set_epi64x(hi, lo, hi, lo)
}

/// [`fold_into`] on 256-bit registers: each 128-bit lane of `x` moved along by the
/// distance of `k` ([`keys256`]) and added to the same lane of `data`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,vpclmulqdq")]
#[inline]
fn fold256_into(
    x: std::arch::x86_64::__m256i,
    k: std::arch::x86_64::__m256i,
    data: std::arch::x86_64::__m256i,
) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::{_mm256_clmulepi64_epi128, _mm256_xor_si256};
    let lo = _mm256_clmulepi64_epi128(x, k, 0x00);
    let hi = _mm256_clmulepi64_epi128(x, k, 0x11);
    _mm256_xor_si256(_mm256_xor_si256(lo, hi), data)
}

/// The four registers of the last 128-octet block (`x[0]` first) folded into one, at the
/// last 32 octets' place.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,vpclmulqdq")]
#[inline]
fn fold4_to1_256(x: [std::arch::x86_64::__m256i; 4]) -> std::arch::x86_64::__m256i {
    let to3 = fold256_into(x[2], keys256(K256), x[3]);
    let to3 = fold256_into(x[1], keys256(K512), to3);
    fold256_into(x[0], keys256(K768), to3)
}

/// [`reduce512`] of a 256-bit register: its two lanes folded into one, then [`reduce128`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2,pclmulqdq,avx2,vpclmulqdq")]
fn reduce256(x: std::arch::x86_64::__m256i, rest: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm256_castsi256_si128, _mm256_extracti128_si256};
    let y = fold128_into(
        _mm256_castsi256_si128(x),
        K128,
        _mm256_extracti128_si256(x, 1),
    );
    reduce128(y, rest)
}

/// The eight 32-bit lanes of `acc` added as 64-bit numbers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn lanes_sum256(acc: std::arch::x86_64::__m256i) -> u64 {
    use std::arch::x86_64::{
        _mm256_add_epi64, _mm256_castsi256_si128, _mm256_cvtepu32_epi64, _mm256_extracti128_si256,
        _mm256_storeu_si256,
    };
    let wide = _mm256_add_epi64(
        _mm256_cvtepu32_epi64(_mm256_castsi256_si128(acc)),
        _mm256_cvtepu32_epi64(_mm256_extracti128_si256(acc, 1)),
    );
    let mut out = [0u64; 4];
    // SAFETY: `out` is 32 writable octets.
    unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), wide) };
    out.iter().sum()
}

/// [`sum512`] in 32-octet vectors (CPUs with AVX2 but not AVX-512F).
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sum256(data: &[u8]) -> u64 {
    use std::arch::x86_64::{
        __m256i, _mm256_add_epi32, _mm256_and_si256, _mm256_loadu_si256, _mm256_set1_epi32,
        _mm256_setzero_si256, _mm256_srli_epi32,
    };
    const RUN: usize = 16_384 * 32;
    let low = _mm256_set1_epi32(0xFFFF);
    let whole = data.len() - data.len() % 32;
    let (vectors, tail) = data.split_at(whole);
    let mut total = 0u64;
    for run in vectors.chunks(RUN) {
        let (mut a, mut b) = (_mm256_setzero_si256(), _mm256_setzero_si256());
        for v in run.chunks_exact(32) {
            // SAFETY: `v` is 32 readable octets.
            let v = unsafe { _mm256_loadu_si256(v.as_ptr().cast::<__m256i>()) };
            a = _mm256_add_epi32(a, _mm256_and_si256(v, low));
            b = _mm256_add_epi32(b, _mm256_srli_epi32(v, 16));
        }
        total += lanes_sum256(a) + lanes_sum256(b);
    }
    total + warpcore_tcp::csum::sum(tail)
}

/// [`bulk_sum`]'s function where the CPU has AVX2 but not AVX-512F: `sum256` after the
/// check it was chosen by.
#[cfg(target_arch = "x86_64")]
fn sum256_checked(data: &[u8]) -> u64 {
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above; the standard library caches the
        // answer); `sum256` reads only `data`.
        return unsafe { sum256(data) };
    }
    warpcore_tcp::csum::sum(data)
}

/// [`copy_sum_crc_fold512`] on 256-bit registers (CPUs with AVX2 and VPCLMULQDQ but not
/// AVX-512): each 32-octet vector is loaded from `src` once, stored into `dst`, summed and
/// folded into the CRC from the one register, four vectors a step; the rest under 32
/// octets is copied through a local buffer, which the sum and the CRC read
/// ([`fold256_pass`]).
///
/// # Safety
/// As [`copy_sum_crc`], and the CPU must have AVX2 and VPCLMULQDQ (`fold256_available`);
/// `dst.len() >= FOLD_MIN`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2,pclmulqdq,avx2,vpclmulqdq")]
unsafe fn copy_sum_crc_fold256(src: *const u8, dst: &mut [u8], crc: u32) -> (u64, u32) {
    assert!(dst.len() >= FOLD_MIN);
    // SAFETY: the caller's contract for `src` and the features; `dst` is a unique borrow of
    // `dst.len()` writable octets, so nothing else references it while it is written.
    unsafe { fold256_pass::<true>(src, dst.as_mut_ptr(), dst.len(), crc) }
}

/// [`sum_crc_fold512`] on 256-bit registers (CPUs with AVX2 and VPCLMULQDQ but not
/// AVX-512): [`fold256_pass`] without its store.
///
/// # Safety
/// The CPU must have SSE4.2, PCLMULQDQ, AVX2 and VPCLMULQDQ (`fold256_available`);
/// `data.len() >= FOLD_MIN`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2,pclmulqdq,avx2,vpclmulqdq")]
unsafe fn sum_crc_fold256(data: &[u8], crc: u32) -> (u64, u32) {
    assert!(data.len() >= FOLD_MIN);
    // SAFETY: `data` is `data.len()` readable octets; nothing is written (`COPY` false, so
    // the null destination is never used); the features are the caller's contract.
    unsafe { fold256_pass::<false>(data.as_ptr(), std::ptr::null_mut(), data.len(), crc) }
}

/// The one pass of [`copy_sum_crc_fold256`] (`COPY`) and [`sum_crc_fold256`] (not), as
/// [`fold512_pass`] in 32-octet vectors.
///
/// # Safety
/// `src` valid for reads of `n` octets; with `COPY`, `d` valid for writes of `n` octets,
/// not overlapping `src` and referenced by nothing else meanwhile (without, `d` is never
/// used); `n >= FOLD_MIN`; the CPU has SSE4.2, PCLMULQDQ, AVX2 and VPCLMULQDQ.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2,pclmulqdq,avx2,vpclmulqdq")]
#[inline]
unsafe fn fold256_pass<const COPY: bool>(
    src: *const u8,
    d: *mut u8,
    n: usize,
    crc: u32,
) -> (u64, u32) {
    use std::arch::x86_64::{
        __m256i, _mm256_add_epi32, _mm256_and_si256, _mm256_loadu_si256, _mm256_set1_epi32,
        _mm256_setzero_si256, _mm256_srli_epi32, _mm256_xor_si256, _mm256_zextsi128_si256,
        _mm_cvtsi32_si128,
    };
    /// Vectors summed into the 32-bit lanes before these are added into `total`: each
    /// lane takes two 16-bit words a vector, 2 * 0xFFFF * 4,096 < 2^32.
    const SUM_RUN: usize = 4096;
    debug_assert!(n >= FOLD_MIN);
    let low = _mm256_set1_epi32(0xFFFF);
    let mut total = 0u64;
    let mut acc = _mm256_setzero_si256();
    // One vector: loaded once, stored (with `COPY`), summed, and given for the CRC; the
    // store in assembly, as in `fold512_pass` (the compiler would otherwise make the loop a
    // `memcpy` and the sums a second pass over `src`, which may change meanwhile).
    macro_rules! copy {
        ($at:expr) => {{
            let at = $at;
            // SAFETY: `at + 32 <= n` at every use: inside `src` (the caller's contract) and,
            // with `COPY`, inside `d`'s `n` octets, which nothing else references meanwhile.
            let v = unsafe {
                let v = _mm256_loadu_si256(src.add(at).cast::<__m256i>());
                if COPY {
                    std::arch::asm!(
                        "vmovdqu ymmword ptr [{p}], {v}",
                        p = in(reg) d.add(at),
                        v = in(ymm_reg) v,
                        options(nostack, preserves_flags)
                    );
                }
                v
            };
            acc = _mm256_add_epi32(acc, _mm256_and_si256(v, low));
            acc = _mm256_add_epi32(acc, _mm256_srli_epi32(v, 16));
            v
        }};
    }
    let mut x = [copy!(0), copy!(32), copy!(64), copy!(96)];
    x[0] = _mm256_xor_si256(x[0], _mm256_zextsi128_si256(_mm_cvtsi32_si128(!crc as i32)));
    let mut run = 4;
    let k = keys256(K1024);
    let mut at = 128;
    while n - at >= 128 {
        if run > SUM_RUN - 4 {
            total += lanes_sum256(acc);
            acc = _mm256_setzero_si256();
            run = 0;
        }
        for (j, xj) in x.iter_mut().enumerate() {
            let v = copy!(at + 32 * j);
            *xj = fold256_into(*xj, k, v);
        }
        run += 4;
        at += 128;
    }
    let mut one = fold4_to1_256(x);
    let k = keys256(K256);
    // At most three more vectors: each lane then holds at most 2 * 0xFFFF * (SUM_RUN + 3)
    // < 2^32.
    while n - at >= 32 {
        let v = copy!(at);
        one = fold256_into(one, k, v);
        at += 32;
    }
    total += lanes_sum256(acc);
    // The rest, under 32 octets, from an even offset (a multiple of 32): read from `src`
    // once into `spill`, written to `d` from there (with `COPY`), summed and taken by the
    // CRC from `spill` (what `d` now holds, whatever `src` does meanwhile).
    let rest = n - at;
    let mut spill = [0u8; 32];
    // SAFETY: `at + rest == n`: inside `src` (the caller's contract); `spill` holds 32
    // octets and `rest < 32`; `spill` is local and cannot overlap `src`, nor `d` (with
    // `COPY`: `d`'s `n` octets are the caller's alone).
    unsafe {
        std::ptr::copy_nonoverlapping(src.add(at), spill.as_mut_ptr(), rest);
        if COPY {
            std::ptr::copy_nonoverlapping(spill.as_ptr(), d.add(at), rest);
        }
    }
    let tail = &spill[..rest];
    total += warpcore_tcp::csum::sum(tail);
    (total, !reduce256(one, tail))
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
        #[cfg(target_arch = "x86_64")]
        assert!(
            fused_available(),
            "this test needs an x86-64 CPU with SSE4.2 and PCLMULQDQ"
        );
        report_path();
        for off in 0..8 {
            for len in (0..SHORT + 200)
                .chain((SHORT + 200..4 * MAX_LANE).step_by(97))
                .chain([1440, 8948, 3 * MAX_LANE, 3 * MAX_LANE + 23, 40_000])
            {
                let d = &data[off..off + len];
                for init in [0u32, 1, 0xdead_beef, u32::MAX] {
                    let want = crc32c::crc32c_append(init, d);
                    assert_eq!(
                        crc32c_append(init, d),
                        want,
                        "offset {off}, {len} octets, initial {init:#x}"
                    );
                    // The three-lane path, which CPUs with the folding path's features no
                    // longer take through `crc32c_append`.
                    #[cfg(target_arch = "x86_64")]
                    if len >= SHORT {
                        // SAFETY: the CPU has SSE4.2 and PCLMULQDQ (checked above).
                        let lanes = !unsafe { three_streams(!init, d) };
                        assert_eq!(lanes, want, "three lanes, offset {off}, {len} octets");
                    }
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
        report_path();
        let data: Vec<u8> = (0..300_100u32)
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
            .chain([3 * MAX_LANE + 96, 9 * MAX_LANE + 7, 40_000])
            // Past the folding path's run of 4,096 vectors summed in 32-bit lanes.
            .chain([262_080, 262_144, 262_400, 300_000]);
        for len in lens {
            // Source and destination at every kind of alignment (a frame's payload is not
            // 8-aligned).
            for (off, doff) in [(0usize, 0usize), (1, 5), (3, 2), (8, 7)] {
                let src = &data[off..off + len];
                // The dispatcher (the 512-bit folding path where the CPU has it, else the
                // 256-bit one, else the 32-octet lanes), the 16-octet lanes, and the
                // 256-bit folding path and the 32-octet lanes called directly (a CPU with a
                // folding path has what they need, and would not take them).
                for (init, path) in [
                    (0u32, 0),
                    (0x1234_5678, 0),
                    (7, 1),
                    (0x0BAD_CAFE, 2),
                    (0x5EED_F00D, 3),
                ] {
                    if path == 2 && !(len >= FOLD_MIN && fold256_available()) {
                        continue;
                    }
                    if path == 3 && !lanes256_available() {
                        continue;
                    }
                    let mut buf = vec![0xA5u8; len + 16];
                    let dst = &mut buf[doff..doff + len];
                    // SAFETY: `src` is a slice of `len` octets, apart from `dst`; the CPU
                    // has the features (checked above, and for the 256-bit path just
                    // before), which takes at least `FOLD_MIN` octets (checked too).
                    let (sum, crc) = unsafe {
                        match path {
                            0 => copy_sum_crc(src.as_ptr(), dst, init),
                            1 => copy_sum_crc_lanes(src.as_ptr(), dst, init),
                            2 => copy_sum_crc_fold256(src.as_ptr(), dst, init),
                            _ => copy_sum_crc_lanes256(src.as_ptr(), dst, init, src.as_ptr(), 3),
                        }
                    };
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

    /// Which long-input path this CPU takes, in the test's output: the 512-bit folding one
    /// (AVX-512F, AVX-512BW and VPCLMULQDQ), the 256-bit one for the copy into a frame
    /// (AVX2 and VPCLMULQDQ), or the three `crc32` lanes (the copy on 32-octet vectors where
    /// the CPU has AVX2, else 16-octet ones). The tests compare every path the
    /// CPU can run with the crate. With `WARPCORE_EXPECT_CRC_PATH` set (`scripts/test.sh`,
    /// the suite CI runs, reads the CPU's flags from `/proc/cpuinfo`), the engine's own
    /// detection must name the same path: a detection that missed a feature would otherwise
    /// leave that path untested and unused without a word.
    fn report_path() {
        #[cfg(target_arch = "x86_64")]
        {
            // The copy's path (the CRC alone folds only with the 512-bit one).
            let (path, copy) = match (
                fold512_available(),
                fold256_available(),
                lanes256_available(),
            ) {
                (true, _, _) => (
                    "fold512",
                    "512-bit folding (the 256-bit one and the lanes called directly)",
                ),
                (false, true, _) => ("fold256", "256-bit folding (the lanes called directly)"),
                (false, false, true) => (
                    "lanes256",
                    "three crc32 lanes on 32-octet vectors (no VPCLMULQDQ here; the 16-octet \
                     form called directly)",
                ),
                (false, false, false) => (
                    "lanes",
                    "three crc32 lanes on 16-octet vectors (no AVX2 here)",
                ),
            };
            if let Some(want) = std::env::var_os("WARPCORE_EXPECT_CRC_PATH") {
                assert_eq!(
                    want.to_str(),
                    Some(path),
                    "WARPCORE_EXPECT_CRC_PATH (from /proc/cpuinfo) names another path than \
                     the engine detects"
                );
            }
            eprintln!(
                "CRC32c from {FOLD_MIN} octets: {}; the copy into a frame: {copy}",
                if fold512_available() {
                    "512-bit folding (and the three lanes, called directly)"
                } else {
                    "three crc32 lanes (no AVX-512F, AVX-512BW and VPCLMULQDQ here)"
                },
            );
        }
    }

    /// The folding constants come from the formula that gives CRC-32 (IEEE)'s published
    /// ones (crc32fast's `K1`-`K5`, from Intel's paper) from that polynomial, and CRC32c's
    /// 128- and 512-bit ones as other implementations (Intel's ISA-L, Linux) carry them.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn fold_constants_follow_the_published_formula() {
        const IEEE: u64 = 0x1_04C1_1DB7;
        assert_eq!(fold_constant(IEEE, 4 * 128 + 32), 0x1_5444_2bd4);
        assert_eq!(fold_constant(IEEE, 4 * 128 - 32), 0x1_c6e4_1596);
        assert_eq!(fold_constant(IEEE, 128 + 32), 0x1_7519_97d0);
        assert_eq!(fold_constant(IEEE, 128 - 32), 0x0_ccaa_009e);
        assert_eq!(fold_constant(IEEE, 64), 0x1_63cd_6124);
        assert_eq!(K128, (0xf20c_0dfe, 0x1_4cd0_0bd6));
        assert_eq!(K512, (0x740e_ef02, 0x9e4a_ddf8));
    }

    /// The bulk sum equals the TCP crate's `sum` (not only after folding) at every length
    /// around the vectors' and the runs' limits, from odd and even addresses.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn bulk_sum_equals_the_crates() {
        let data: Vec<u8> = (0..2_200_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 9) as u8)
            .collect();
        let Some(bulk) = bulk_sum() else {
            eprintln!("bulk sum: no AVX-512F or AVX2 here, the TCP crate's own sum runs");
            return;
        };
        eprintln!(
            "bulk sum: {}",
            if std::is_x86_feature_detected!("avx512f") {
                "512-bit vectors (and 256-bit, called directly)"
            } else {
                "256-bit vectors"
            }
        );
        let avx2 = std::is_x86_feature_detected!("avx2");
        let lens = (0..300).chain((300..20_000).step_by(37)).chain([
            16_384 * 64 - 1,
            16_384 * 64,
            16_384 * 64 + 63,
            2_100_000,
        ]);
        for len in lens {
            for off in [0usize, 1, 2, 63] {
                let d = &data[off..off + len];
                assert_eq!(bulk(d), warpcore_tcp::csum::sum(d), "{len} octets at {off}");
                if avx2 {
                    // SAFETY: the CPU has AVX2 (checked above).
                    let s = unsafe { sum256(d) };
                    assert_eq!(s, warpcore_tcp::csum::sum(d), "sum256, {len} at {off}");
                }
            }
        }
        // All ones: the lanes' largest sums.
        let ones = vec![0xFFu8; 16_384 * 64 * 2 + 10];
        assert_eq!(bulk(&ones), warpcore_tcp::csum::sum(&ones));
        if avx2 {
            // SAFETY: the CPU has AVX2 (checked above).
            assert_eq!(unsafe { sum256(&ones) }, warpcore_tcp::csum::sum(&ones));
        }
    }

    /// The payload digest's pass gives the TCP crate's sum and the CRC32c
    /// of the same octets, at every length around the vectors', the folding steps' and the
    /// sum runs' limits, from odd and even addresses; it is offered exactly where the CPU
    /// has the 512-bit or the 256-bit folding paths. Both passes are checked where the CPU
    /// has them (the 256-bit one on a CPU with both too), and the fallbacks everywhere.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_payload_digest_is_the_sum_and_the_crc() {
        assert_eq!(
            payload_digest().is_some(),
            fold512_available() || fold256_available()
        );
        eprintln!(
            "payload digest: {}",
            if fold512_available() {
                "one 512-bit pass"
            } else if fold256_available() {
                "one 256-bit pass"
            } else {
                "not offered here (the fallback is tested)"
            }
        );
        let data: Vec<u8> = (0..600_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
            .collect();
        let lens = (0..1_100).chain((1_100..20_000).step_by(61)).chain([
            4096 * 64 - 1,
            4096 * 64,
            4096 * 64 + 255,
            4100 * 64 + 1,
            599_000,
        ]);
        for len in lens {
            for off in [0usize, 1, 2, 63] {
                let d = &data[off..off + len];
                for (name, f) in [
                    ("512", sum_crc512_checked as fn(&[u8]) -> (u64, u32)),
                    ("256", sum_crc256_checked),
                ] {
                    let (sum, crc) = f(d);
                    // Equal, not only after folding (as `sum512`'s).
                    assert_eq!(
                        sum,
                        warpcore_tcp::csum::sum(d),
                        "{name}: sum, {len} octets at {off}"
                    );
                    assert_eq!(crc, crc32c::crc32c(d), "{name}: CRC, {len} octets at {off}");
                }
            }
        }
    }

    /// The safe copy takes the one pass where [`fuse`] says so and the copy-then-CRC path
    /// elsewhere, with the same results, at the thresholds of both.
    #[test]
    fn the_copy_equals_the_crate_on_either_side_of_the_thresholds() {
        let data: Vec<u8> = (0..4_000u32).map(|i| (i * 13 + 5) as u8).collect();
        for len in [0, 1, 63, 64, 255, 256, 257, 767, 768, 769, 1440, 3_999] {
            let src = &data[1..1 + len];
            let mut dst = vec![0u8; len];
            let (sum, crc) = copy_sum_crc_slices(src, &mut dst, 0x0bad_cafe);
            assert_eq!(dst, src, "copy, {len} octets");
            assert_eq!(
                warpcore_tcp::csum::fold(sum),
                warpcore_tcp::csum::fold(warpcore_tcp::csum::sum(src)),
                "sum, {len} octets"
            );
            assert_eq!(crc, crc32c::crc32c_append(0x0bad_cafe, src), "CRC, {len}");
        }
        assert!(!fuse(FOLD_MIN - 1) && !fuse(0));
        #[cfg(target_arch = "x86_64")]
        assert_eq!(fuse(FUSE_MIN), fused_available());
    }

    /// Memory with an inaccessible page on either side of `len` octets (rounded up to
    /// pages): a load or store that reaches past either end of a buffer placed against an
    /// edge faults instead of touching a neighbour's octets.
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    struct Fenced {
        map: *mut u8,
        map_len: usize,
        len: usize,
    }

    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    impl Fenced {
        const PAGE: usize = 4096;

        fn new(len: usize) -> Fenced {
            let len = len.div_ceil(Self::PAGE) * Self::PAGE;
            let map_len = len + 2 * Self::PAGE;
            // SAFETY: a fresh anonymous mapping, checked below; the middle pages are made
            // readable and writable, the outer ones stay inaccessible.
            unsafe {
                let map = libc::mmap(
                    std::ptr::null_mut(),
                    map_len,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                );
                assert_ne!(map, libc::MAP_FAILED);
                let map = map.cast::<u8>();
                let r = libc::mprotect(
                    map.add(Self::PAGE).cast(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                );
                assert_eq!(r, 0);
                Fenced { map, map_len, len }
            }
        }

        /// `n` octets starting right after the first fence (`at_end` false) or ending right
        /// before the second (true).
        fn slice(&mut self, n: usize, at_end: bool) -> &mut [u8] {
            assert!(n <= self.len);
            let start = if at_end { self.len - n } else { 0 };
            // SAFETY: `[start, start + n)` lies in the accessible pages, borrowed uniquely
            // through `&mut self`.
            unsafe { std::slice::from_raw_parts_mut(self.map.add(Self::PAGE + start), n) }
        }
    }

    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    impl Drop for Fenced {
        fn drop(&mut self) {
            // SAFETY: the mapping made in `new`, unmapped once.
            unsafe { libc::munmap(self.map.cast(), self.map_len) };
        }
    }

    /// No vector path reads an octet before or after its input, nor writes one around its
    /// output: each runs on inputs and outputs placed against an inaccessible page on
    /// either side (a fault fails the test), at every length around the vectors', lanes'
    /// and folding steps' sizes, and with the results the crate gives. The guarded copy out
    /// of registered memory runs the same way, from the last octets of a region.
    #[test]
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    #[cfg_attr(miri, ignore = "Miri has no mprotect, nor most of these instructions")]
    fn no_path_touches_an_octet_past_its_buffers() {
        use crate::mem::{Access, MrTable, PdId, Region};
        use std::sync::Arc;

        assert!(
            fused_available(),
            "this test needs an x86-64 CPU with SSE4.2 and PCLMULQDQ"
        );
        report_path();
        const AREA: usize = 3 * 4096;
        let mut src_mem = Fenced::new(AREA);
        let mut dst_mem = Fenced::new(AREA);
        let fill: Vec<u8> = (0..AREA as u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8)
            .collect();
        src_mem.slice(AREA, false).copy_from_slice(&fill);
        let lens = (0..=600).chain((601..AREA).step_by(37)).chain([AREA]);
        for len in lens {
            for src_at_end in [false, true] {
                let src = src_mem.slice(len, src_at_end).to_vec();
                let s = &*src_mem.slice(len, src_at_end);
                let want = crc32c::crc32c_append(7, s);
                let want_sum = warpcore_tcp::csum::fold(warpcore_tcp::csum::sum(s));
                assert_eq!(crc32c_append(7, s), want, "{len} octets");
                // SAFETY: the CPU has SSE4.2 and PCLMULQDQ (checked above).
                assert_eq!(!unsafe { three_streams(!7, s) }, want, "lanes, {len}");
                if len >= FOLD_MIN && fold512_available() {
                    // SAFETY: the CPU has the features; `s` has `FOLD_MIN` octets or more.
                    assert_eq!(!unsafe { fold512(!7, s) }, want, "fold512, {len}");
                    let (sum, crc) = sum_crc512_checked(s);
                    assert_eq!(crc, crc32c::crc32c(s), "digest, {len}");
                    assert_eq!(warpcore_tcp::csum::fold(sum), want_sum, "digest, {len}");
                }
                if len >= FOLD_MIN && fold256_available() {
                    // The 256-bit digest reads from the fence's edge too.
                    let (sum, crc) = sum_crc256_checked(s);
                    assert_eq!(crc, crc32c::crc32c(s), "digest 256, {len}");
                    assert_eq!(warpcore_tcp::csum::fold(sum), want_sum, "digest 256, {len}");
                }
                if let Some(bulk) = bulk_sum() {
                    assert_eq!(warpcore_tcp::csum::fold(bulk(s)), want_sum, "bulk, {len}");
                }
                for dst_at_end in [false, true] {
                    for path in 0..4 {
                        if path == 2 && !(len >= FOLD_MIN && fold256_available()) {
                            continue;
                        }
                        if path == 3 && !lanes256_available() {
                            continue;
                        }
                        let dst = dst_mem.slice(len, dst_at_end);
                        dst.fill(0);
                        // SAFETY: `src` is `len` readable octets, apart from `dst`; the CPU
                        // has the features (checked above, and for the 256-bit path just
                        // before, which takes at least `FOLD_MIN` octets).
                        let (sum, crc) = unsafe {
                            let p = src_mem.slice(len, src_at_end).as_ptr();
                            match path {
                                0 => copy_sum_crc(p, dst, 7),
                                1 => copy_sum_crc_lanes(p, dst, 7),
                                2 => copy_sum_crc_fold256(p, dst, 7),
                                _ => copy_sum_crc_lanes256(p, dst, 7, p, 2),
                            }
                        };
                        assert_eq!(&dst[..], &src[..], "copy path {path}, {len}");
                        assert_eq!(crc, want, "copy path {path}, {len}");
                        assert_eq!(warpcore_tcp::csum::fold(sum), want_sum, "path {path}");
                    }
                }
            }
        }

        // Registered memory that ends at a fence, copied out from its last octets.
        let base = src_mem.slice(AREA, false).as_mut_ptr();
        // SAFETY: `AREA` octets at `base` stay mapped while the region lives (it is dropped
        // with the table below, before `src_mem`), and no reference to them is used
        // meanwhile: the slices above are gone.
        let region = Arc::new(unsafe { Region::from_raw(base, AREA) });
        let t = MrTable::with_seed(2, 3);
        let stag = t.register(region, PdId(1), Access::LOCAL_WRITE, 0).unwrap();
        let g = t.lookup_local(stag, PdId(1), true).unwrap();
        for len in (0..=600).chain((601..AREA).step_by(37)).chain([AREA]) {
            let to = (AREA - len) as u64;
            let dst = dst_mem.slice(len, true);
            let (sum, crc) = g.copy_out_summed_crc_at(to, dst, 7).unwrap();
            assert_eq!(&dst[..], &fill[AREA - len..], "copy out, {len}");
            assert_eq!(crc, crc32c::crc32c_append(7, dst), "copy out, {len}");
            assert_eq!(
                warpcore_tcp::csum::fold(sum),
                warpcore_tcp::csum::fold(warpcore_tcp::csum::sum(dst)),
                "copy out, {len}"
            );
            g.place_at(to, &fill[..len]).unwrap();
            g.place_at(to, &fill[AREA - len..]).unwrap();
        }
        drop(g);
        drop(t);
        drop(src_mem);
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

    /// Every kernel (the dispatchers and, where this CPU can run them, each path called
    /// directly) against the plain implementations, the `crc32c` crate and a `memcpy`, at
    /// every length class the kernels branch on (0, 1, 15, 16, 17, 63, 64, 255, 256, 767,
    /// 768, 769, a jumbo FPDU, past one three-lane pass) and random ones, from unaligned
    /// sources into unaligned destinations, with random contents and initial CRCs
    /// (proptest's 256 cases, or `PROPTEST_CASES`). It passes under valgrind too, whose
    /// CPU has AVX2 but neither AVX-512 nor VPCLMULQDQ: the detection then picks the
    /// 32-octet lanes. Not under Miri, which has neither most of these instructions nor
    /// the time for proptest's cases.
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    mod kernels_against_references {
        use super::*;
        use crate::mem::copy::copy;
        use proptest::prelude::*;

        const CLASSES: [usize; 16] = [
            0, 1, 15, 16, 17, 63, 64, 95, 96, 255, 256, 767, 768, 769, 9000, 13_000,
        ];

        fn len_strategy() -> impl Strategy<Value = usize> {
            prop_oneof![
                prop::sample::select(CLASSES.to_vec()),
                0usize..2048,
                0usize..20_000,
            ]
        }

        fn fold(s: u64) -> u16 {
            warpcore_tcp::csum::fold(s)
        }

        proptest! {
            #[test]
            fn every_kernel_equals_crc32c_and_memcpy(
                len in len_strategy(),
                soff in 0usize..64,
                doff in 0usize..64,
                init in any::<u32>(),
                seed in any::<u64>(),
            ) {
                let mut x = seed | 1;
                let buf: Vec<u8> = (0..soff + len)
                    .map(|_| {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        x as u8
                    })
                    .collect();
                let src = &buf[soff..];
                let want_crc = crc32c::crc32c_append(init, src);
                let want_sum = fold(warpcore_tcp::csum::sum(src));

                prop_assert_eq!(crc32c_append(init, src), want_crc, "crc32c_append");
                // The fused copy from a slice, on whichever path this CPU takes.
                let mut out = vec![0x5Au8; doff + len + 64];
                let (sum, crc) = copy_sum_crc_slices(src, &mut out[doff..doff + len], init);
                prop_assert_eq!(&out[doff..doff + len], src);
                prop_assert!(out[..doff].iter().chain(&out[doff + len..]).all(|&b| b == 0x5A));
                prop_assert_eq!(crc, want_crc, "copy_sum_crc_slices crc");
                prop_assert_eq!(fold(sum), want_sum, "copy_sum_crc_slices sum");
                // The inline copy.
                let mut out = vec![0x5Au8; doff + len + 64];
                // SAFETY: `src` and `out[doff..doff + len]` are distinct vectors' ranges.
                unsafe { copy(src.as_ptr(), out.as_mut_ptr().add(doff), len) };
                prop_assert_eq!(&out[doff..doff + len], src);
                prop_assert!(out[..doff].iter().chain(&out[doff + len..]).all(|&b| b == 0x5A));
                // The received-segment passes, as the host is handed them.
                if let Some(digest) = payload_digest() {
                    let (s, c) = digest(src);
                    prop_assert_eq!(fold(s), want_sum, "digest sum");
                    prop_assert_eq!(c, crc32c::crc32c_append(0, src), "digest crc");
                }
                if let Some(bulk) = bulk_sum() {
                    // The sums start at an even offset of what is summed.
                    prop_assert_eq!(fold(bulk(src)), want_sum, "bulk sum");
                }
                // Each path this CPU can run, called directly.
                if !fused_available() {
                    return Ok(());
                }
                let mut paths: Vec<u8> = vec![1];
                if lanes256_available() {
                    paths.push(3);
                }
                if len >= FOLD_MIN && fold256_available() {
                    paths.push(2);
                }
                if len >= FOLD_MIN && fold512_available() {
                    paths.push(4);
                }
                for path in paths {
                    let mut out = vec![0x5Au8; doff + len + 64];
                    let dst = &mut out[doff..doff + len];
                    // SAFETY: `src` is `len` readable octets apart from `dst`; the CPU has
                    // each path's features (checked above), and the folding paths get at
                    // least `FOLD_MIN` octets.
                    let (sum, crc) = unsafe {
                        match path {
                            1 => copy_sum_crc_lanes(src.as_ptr(), dst, init),
                            2 => copy_sum_crc_fold256(src.as_ptr(), dst, init),
                            3 => copy_sum_crc_lanes256(src.as_ptr(), dst, init, src.as_ptr(), 2),
                            _ => copy_sum_crc_fold512(src.as_ptr(), dst, init),
                        }
                    };
                    prop_assert_eq!(&out[doff..doff + len], src, "path {}", path);
                    prop_assert!(
                        out[..doff].iter().chain(&out[doff + len..]).all(|&b| b == 0x5A),
                        "path {}", path
                    );
                    prop_assert_eq!(crc, want_crc, "path {} crc", path);
                    prop_assert_eq!(fold(sum), want_sum, "path {} sum", path);
                }
                if len >= SHORT {
                    // SAFETY: SSE4.2 and PCLMULQDQ (`fused_available`).
                    prop_assert_eq!(!unsafe { three_streams(!init, src) }, want_crc);
                }
                if len >= FOLD_MIN && fold512_available() {
                    // SAFETY: the features (just checked); `FOLD_MIN` octets or more.
                    prop_assert_eq!(!unsafe { fold512(!init, src) }, want_crc);
                    // SAFETY: as above.
                    let (s, c) = unsafe { sum_crc_fold512(src, init) };
                    prop_assert_eq!((fold(s), c), (want_sum, want_crc));
                }
                if len >= FOLD_MIN && fold256_available() {
                    // SAFETY: the features (just checked); `FOLD_MIN` octets or more.
                    let (s, c) = unsafe { sum_crc_fold256(src, init) };
                    prop_assert_eq!((fold(s), c), (want_sum, want_crc));
                }
            }
        }
    }
}
