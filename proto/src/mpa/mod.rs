//! MPA: FPDU framing and deframing (markers, pad, CRC32c) and the startup negotiation
//! (RFC 5044 Request/Reply, RFC 6581 enhanced setup with IRD/ORD and RTR).

pub mod deframer;
pub mod framer;
pub mod negotiation;

use crate::wire::fpdu::{CRC_LEN, ULPDU_LENGTH_LEN};

// The rounding below keeps the CRC outside it only because the CRC is 4 octets.
const _: () = assert!(CRC_LEN.is_multiple_of(4));

/// [`fpdu_len`](crate::wire::fpdu::fpdu_len) as the per-FPDU fast paths compute it:
/// ULPDU_Length, the ULPDU and the pad rounded up to a multiple of 4 (MPA-4.1-2), then the
/// CRC (MPA-4.1-1); two instructions rather than the pad's remainders. `ulpdu_len` is a
/// 16-bit ULPDU_Length (at most 65535), so nothing overflows.
#[inline]
pub(crate) const fn fpdu_len_of(ulpdu_len: usize) -> usize {
    (ULPDU_LENGTH_LEN + ulpdu_len + 3 + CRC_LEN) & !3
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::fpdu;

    /// The fast paths' FPDU length is `fpdu::fpdu_len` for every 16-bit ULPDU_Length.
    #[test]
    fn fpdu_len_of_matches_fpdu_len() {
        for len in 0..=usize::from(u16::MAX) {
            assert_eq!(fpdu_len_of(len), fpdu::fpdu_len(len), "ULPDU {len}");
        }
    }
}
