//! The copies between registered memory and the engine's buffers.
//!
//! [`copy`] is `ptr::copy_nonoverlapping` with the short case inlined: most payloads on the
//! small-message paths (a 64-octet RDMA Write, a Send) are a few dozen octets, and a
//! `copy_nonoverlapping` with a run-time length is a call to the C library's `memcpy`, about
//! 15 instructions inside it plus the call's set-up and the registers the caller must save
//! around it. Up to [`SMALL_MAX`] octets, [`copy`] does two fixed-size copies that overlap
//! in the middle (as `memcpy` itself does for short lengths), which the compiler turns into
//! a few moves in the caller. Longer runs go to `memcpy` exactly as before, so bulk copies
//! keep the C library's tuned loops (`rep movsb`, non-temporal stores) and their speed.
#![allow(unsafe_code)]

use core::ptr;

/// The longest copy done inline; longer ones call `memcpy`.
pub(crate) const SMALL_MAX: usize = 64;

/// Copies `len` octets from `src` to `dst`: `ptr::copy_nonoverlapping(src, dst, len)`, with
/// copies of at most [`SMALL_MAX`] octets done inline. Reads exactly `[src, src + len)` and
/// writes exactly `[dst, dst + len)` (the inline pairs overlap each other, never the ends).
///
/// # Safety
/// As for [`ptr::copy_nonoverlapping`]: `src` valid for reads and `dst` valid for writes of
/// `len` octets, the two ranges not overlapping. No alignment is required.
#[inline(always)]
pub(crate) unsafe fn copy(src: *const u8, dst: *mut u8, len: usize) {
    if len > SMALL_MAX {
        // SAFETY: the caller's contract is `copy_nonoverlapping`'s.
        unsafe { ptr::copy_nonoverlapping(src, dst, len) };
        return;
    }
    // SAFETY: each `pair::<N>` is called with `N <= len <= 2 * N`, its precondition; the
    // ranges are the caller's.
    unsafe {
        if len >= 32 {
            pair::<32>(src, dst, len);
        } else if len >= 16 {
            pair::<16>(src, dst, len);
        } else if len >= 8 {
            pair::<8>(src, dst, len);
        } else if len >= 4 {
            pair::<4>(src, dst, len);
        } else if len >= 2 {
            pair::<2>(src, dst, len);
        } else if len == 1 {
            dst.write(src.read());
        }
    }
}

/// Copies `len` octets, `N <= len <= 2 * N`, as the first `N` and the last `N` (which
/// overlap when `len < 2 * N`). Both loads come before the stores.
///
/// # Safety
/// `N <= len <= 2 * N`, and `copy`'s contract for `len` octets.
#[inline(always)]
unsafe fn pair<const N: usize>(src: *const u8, dst: *mut u8, len: usize) {
    debug_assert!(N <= len && len <= 2 * N);
    // SAFETY: `[0, N)` and `[len - N, len)` lie in `[0, len)` as `N <= len`, inside the
    // ranges the caller vouches for; unaligned reads and writes need no alignment.
    unsafe {
        let head = ptr::read_unaligned(src.cast::<[u8; N]>());
        let tail = ptr::read_unaligned(src.add(len - N).cast::<[u8; N]>());
        ptr::write_unaligned(dst.cast::<[u8; N]>(), head);
        ptr::write_unaligned(dst.add(len - N).cast::<[u8; N]>(), tail);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GUARD: usize = 64;
    const FILL: u8 = 0xA5;

    /// Every length 0..=256 and a few long ones, from every source offset 0..8 (and a few
    /// odd ones) to every destination offset 0..8 (and a few): the octets copied are the
    /// source's, and no octet of the destination buffer outside the range changes (guard
    /// octets on both sides), nor any of the source.
    #[test]
    fn copies_exactly_the_range_for_every_length_and_offset() {
        let lens = (0..=256).chain([257, 511, 1000, 4096, 65537]);
        let offs = [0usize, 1, 2, 3, 4, 5, 6, 7, 8, 15, 16, 31, 33, 63];
        let max = 65537 + 64;
        let src: Vec<u8> = (0..max + 2 * GUARD)
            .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_right(13) as u8)
            .collect();
        let src_before = src.clone();
        let mut dst = vec![FILL; max + 2 * GUARD];
        for len in lens {
            for &so in &offs {
                for &d in &offs {
                    let doff = GUARD + d;
                    // SAFETY: both ranges lie inside their (distinct) vectors.
                    unsafe { copy(src.as_ptr().add(so), dst.as_mut_ptr().add(doff), len) };
                    assert_eq!(
                        &dst[doff..doff + len],
                        &src[so..so + len],
                        "len {len} src {so} dst {d}"
                    );
                    assert!(
                        dst[..doff].iter().all(|&b| b == FILL),
                        "below: len {len} src {so} dst {d}"
                    );
                    let tail = &dst[doff + len..(doff + len + GUARD).min(dst.len())];
                    assert!(
                        tail.iter().all(|&b| b == FILL),
                        "above: len {len} src {so} dst {d}"
                    );
                    dst[doff..doff + len].fill(FILL);
                }
            }
        }
        assert_eq!(src, src_before);
    }
}
