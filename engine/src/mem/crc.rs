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
//! The `unsafe` here is the call of `#[target_feature]` functions (SSE4.2, PCLMULQDQ) after
//! a run-time check that the CPU has them (`std::is_x86_feature_detected!`, which caches
//! its answer); the placement module is where the engine keeps its `unsafe`, and the CRC of
//! an FPDU is computed as its payload is placed or framed.

/// Inputs shorter than this take the one-stream loop (three streams and their combination
/// cost more than they save below it).
pub const SHORT: usize = 256;

/// The longest lane of the three-stream loop: inputs up to three times this are one pass.
const MAX_LANE: usize = 4096;

/// `crc32c::crc32c_append(crc, data)`, faster for the FPDU sizes of a TCP segment (module
/// documentation): the CRC32c of the octets before `data` (`crc`, 0 for none) extended
/// over `data`. It has the signature of `warpcore_proto::wire::fpdu::Crc32cFn`.
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("sse4.2") {
        if data.len() < SHORT {
            // SAFETY: the CPU has SSE4.2 (checked just above), `serial`'s only target
            // feature; it reads only `data`.
            return !unsafe { serial(!crc, data) };
        }
        if std::is_x86_feature_detected!("pclmulqdq") {
            // SAFETY: the CPU has SSE4.2 and PCLMULQDQ (checked above), `three_streams`'
            // target features; it reads only `data`.
            return !unsafe { three_streams(!crc, data) };
        }
    }
    crc32c::crc32c_append(crc, data)
}

/// The CRC state (not inverted) `c` after `data`, one `crc32` per 8 octets.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn serial(c: u32, data: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u16, _mm_crc32_u32, _mm_crc32_u64, _mm_crc32_u8};
    let mut c = u64::from(c);
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        c = _mm_crc32_u64(c, word(w));
    }
    let mut c = c as u32;
    let mut rest = words.remainder();
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

/// Eight octets as a little-endian word (`w` comes from `chunks_exact(8)`).
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

/// The CRC state (not inverted) `c` after `data` (at least [`SHORT`] octets): passes of
/// three equal lanes of whole words summed at once (one `crc32` a cycle instead of one
/// every three), then the lanes' states combined (`SHIFT`); a tail of less than 24 octets
/// one stream.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2,pclmulqdq")]
unsafe fn three_streams(c: u32, mut data: &[u8]) -> u32 {
    use std::arch::x86_64::{
        _mm_clmulepi64_si128, _mm_crc32_u64, _mm_cvtsi128_si64, _mm_cvtsi64_si128, _mm_xor_si128,
    };
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
        // a's state moves over 2 lanes of zeros, b's over one; d's is where the pass ends.
        let ka = _mm_cvtsi64_si128(i64::from(shift[2 * lane / 8 - 1]));
        let kb = _mm_cvtsi64_si128(i64::from(shift[lane / 8 - 1]));
        let pa = _mm_clmulepi64_si128(_mm_cvtsi64_si128(ca as i64), ka, 0x00);
        let pb = _mm_clmulepi64_si128(_mm_cvtsi64_si128(cb as i64), kb, 0x00);
        let folded = _mm_cvtsi128_si64(_mm_xor_si128(pa, pb)) as u64;
        c = (_mm_crc32_u64(0, folded) ^ cd) as u32;
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
