//! CRC32c (Castagnoli) for the engine's framers and deframers: the `crc32c` crate, with a
//! shorter path for short inputs.
//!
//! The crate is fast over long spans (three interleaved streams of SSE4.2 `crc32`
//! instructions from 768 octets on), but a short input pays for its dispatch, a byte-wise
//! loop up to the first 8-aligned octet, the set-up of the interleaved loops it then skips
//! and a byte-wise tail: ~130 instructions for the 84 covered octets of a 64 B Write's FPDU,
//! two such FPDUs (framed, then checked) per Write. Below [`SHORT`] octets [`crc32c_append`]
//! runs one `crc32` per 8 octets (unaligned loads are free here) and one per 4, 2 and 1
//! octets of the tail. The results are the crate's, bit for bit (tested at every length,
//! offset and initial value below).
//!
//! The `unsafe` here is the call of a `#[target_feature(enable = "sse4.2")]` function after
//! a run-time check that the CPU has SSE4.2 (`std::is_x86_feature_detected!`, which caches
//! its answer); the placement module is where the engine keeps its `unsafe`, and the CRC of
//! an FPDU is computed as its payload is placed or framed.

/// Inputs shorter than this take the one-stream loop; longer ones go to the crate, whose
/// interleaved streams start at 768 octets.
pub const SHORT: usize = 768;

/// `crc32c::crc32c_append(crc, data)`, faster for short `data` (module documentation):
/// the CRC32c of the octets before `data` (`crc`, 0 for none) extended over `data`.
/// It has the signature of `warpcore_proto::wire::fpdu::Crc32cFn`.
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if data.len() < SHORT && std::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU has SSE4.2 (checked just above), the only requirement of
        // `short_sse42`'s target feature; the function reads only `data`.
        return unsafe { short_sse42(crc, data) };
    }
    crc32c::crc32c_append(crc, data)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
unsafe fn short_sse42(crc: u32, data: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u16, _mm_crc32_u32, _mm_crc32_u64, _mm_crc32_u8};
    let mut c = u64::from(!crc);
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        c = _mm_crc32_u64(c, u64::from_le_bytes(b));
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
    !c
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The crate's value at every length up to past [`SHORT`], from every alignment of
    /// the first octet, from 0 and from other initial values; and the check value of the
    /// CRC-32C catalogue.
    #[test]
    fn equals_the_crate_everywhere() {
        let data: Vec<u8> = (0..2048u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        assert_eq!(crc32c_append(0, b"123456789"), 0xE306_9283);
        for off in 0..8 {
            for len in 0..SHORT + 40 {
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
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        let whole = crc32c::crc32c(&data);
        for cut in [0, 1, 7, 8, 83, 500, 999, 1000] {
            let (a, b) = data.split_at(cut);
            assert_eq!(crc32c_append(crc32c_append(0, a), b), whole, "cut at {cut}");
        }
    }
}
