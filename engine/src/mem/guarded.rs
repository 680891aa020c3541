//! [`GuardedArena`]: regions with guard octets around them, for the `engine_rx` fuzz harness
//! (feature `fuzzing`, test-only; issue 15).
//!
//! Every region of the arena is carved out of one allocation with `guard` octets before and
//! after it, so that a placement that escapes its region lands in octets the harness owns
//! and compares after every input, instead of in someone else's memory: the guard octets are
//! the witness of the contract "no octet outside a registered region changes" (`lib.rs`).
#![allow(unsafe_code)]

use core::fmt;
use core::ptr;
use std::sync::Arc;

use super::Region;

/// Alignment of every region in the arena (atomics need 8; a cache line keeps it simple).
const ALIGN: usize = 64;

/// One allocation holding regions separated by guard octets; see the module documentation.
pub struct GuardedArena {
    /// The allocation: `words` `u64`s from `Box::into_raw` (8-aligned), never referenced
    /// through a Rust reference while regions live (they alias it).
    words: *mut [u64],
    /// Its length in octets.
    len: usize,
    /// `(start, len)` of each region, in octets from the arena's first octet.
    spans: Vec<(usize, usize)>,
    /// The regions, in `spans` order; the arena keeps one `Arc` of each.
    regions: Vec<Arc<Region>>,
}

// SAFETY: the arena is a pointer to memory it owns plus regions that are `Send + Sync`;
// its own accesses are raw copies (`snapshot`), the shared-memory model of `Region`.
unsafe impl Send for GuardedArena {}

impl GuardedArena {
    /// Lays out regions of the lengths `lens`, each preceded and followed by at least
    /// `guard` octets (rounded up to 64), and fills every octet with `fill(offset)` so that
    /// a write of any value is visible (in the guards and in the regions alike).
    pub fn new(lens: &[usize], guard: usize, fill: impl Fn(usize) -> u8) -> GuardedArena {
        let guard = guard.div_ceil(ALIGN) * ALIGN;
        let mut spans = Vec::with_capacity(lens.len());
        let mut at = guard;
        for &l in lens {
            spans.push((at, l));
            at += l.div_ceil(ALIGN) * ALIGN + guard;
        }
        let len = at.max(8);
        let mut init = vec![0u64; len.div_ceil(8)].into_boxed_slice();
        for (i, w) in init.iter_mut().enumerate() {
            let mut b = [0u8; 8];
            for (k, o) in b.iter_mut().enumerate() {
                *o = fill(i * 8 + k);
            }
            *w = u64::from_ne_bytes(b);
        }
        let words = Box::into_raw(init);
        let base = words.cast::<u8>();
        let regions = spans
            .iter()
            .map(|&(start, l)| {
                // SAFETY: `Region::from_raw`'s contract holds: `base + start .. + l` lies inside
                // the allocation (`start + l <= len`, by construction above), which lives
                // until the arena drops, and the arena frees it only once it holds the
                // last `Arc` of every region (see `Drop`); no Rust reference to it exists
                // (the box was turned into a raw pointer and the arena reads it by raw
                // copies only).
                let region = unsafe { Region::from_raw(base.add(start), l) };
                Arc::new(region)
            })
            .collect();
        GuardedArena {
            words,
            len,
            spans,
            regions,
        }
    }

    /// The regions, in the order of the lengths given to [`GuardedArena::new`].
    pub fn regions(&self) -> &[Arc<Region>] {
        &self.regions
    }

    /// `(start, len)` of each region in the arena, in octets.
    pub fn spans(&self) -> &[(usize, usize)] {
        &self.spans
    }

    /// The arena's length in octets.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the arena is empty (never: it has at least one word).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A copy of every octet of the arena, guards and regions. Call it only while no engine
    /// core runs on another thread (the harness is single-threaded); otherwise the copy may
    /// be torn, as any read of memory shared with the network.
    pub fn snapshot(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.len];
        // SAFETY: `words` is valid for reads of `len` octets (the allocation has
        // `len.div_ceil(8)` words); `out` is a fresh vector, not registered memory.
        unsafe { ptr::copy_nonoverlapping(self.words.cast::<u8>(), out.as_mut_ptr(), self.len) };
        out
    }
}

impl Drop for GuardedArena {
    fn drop(&mut self) {
        // Free the memory only if no region outlives the arena (a table that still holds a
        // registration, an `Arc` kept by the caller); otherwise leak it: never a use after
        // free. `try_unwrap` takes each last `Arc` in one atomic step, so a `Weak` upgraded
        // meanwhile either counts (and the memory is leaked) or fails; a count read and a
        // drop afterwards would let one upgraded in between outlive the memory.
        let mut all_gone = true;
        for r in self.regions.drain(..) {
            all_gone &= Arc::try_unwrap(r).is_ok();
        }
        if all_gone {
            // SAFETY: `words` came from `Box::into_raw` and every region pointing into it
            // is gone (their last `Arc`s were just taken and dropped), so nothing aliases it.
            drop(unsafe { Box::from_raw(self.words) });
        }
    }
}

impl fmt::Debug for GuardedArena {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuardedArena")
            .field("len", &self.len)
            .field("spans", &self.spans)
            .finish_non_exhaustive()
    }
}
