//! [`MrTable`] and [`MrGuard`]: the STag table and placement. The concurrency protocol is
//! described in the module documentation of [`crate::mem`].
#![allow(unsafe_code)]

use core::cell::UnsafeCell;
use core::fmt;
use core::hash::{BuildHasher, Hasher};
use core::marker::PhantomData;
use core::ptr;
use core::sync::atomic::{fence, AtomicU64, AtomicU8, Ordering};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use crate::mem::{copy, crc};
use crossbeam::utils::Backoff;
use warpcore_proto::ddp::TaggedRegion;
use warpcore_proto::rdmap::AccessRegion;

use warpcore_proto::rdmap::InvalidateFault;

use super::{
    Access, BoundsFault, Deregistration, LookupFault, MemError, MwType, PdId, Region, Stag,
    StagKind, StreamId,
};

/// The largest table: index 0 is never handed out, so 2^24 - 1 slots.
pub const MAX_CAPACITY: usize = (1 << 24) - 1;

/// The fewest spare slots a table keeps beside its capacity, index space permitting
/// ([`MrTable::new`]): a freed slot is allocated again only after at least this many other
/// allocations, so an STag value comes back only after 256 times as many.
pub const MIN_SPARE_SLOTS: usize = 1024;

/// The most spare slots a table keeps (64 octets each): 65,536, 4 MiB.
const MAX_SPARE_SLOTS: usize = 1 << 16;

const INDEX_MASK: u32 = 0x00FF_FFFF;

// Layout of a slot's state word (module documentation, "Concurrency protocol").
const COUNT_MASK: u64 = 0xFFFF_FFFF;
const KEY_SHIFT: u32 = 32;
const STATE_SHIFT: u32 = 40;
const TAG_SHIFT: u32 = KEY_SHIFT;
const FREE: u64 = 0;
const VALID: u64 = 1;
const INVALID: u64 = 2;
const DRAINING: u64 = 3;
/// Owned by one thread that is binding, fast-registering or invalidating the slot: like
/// DRAINING, no lookup succeeds, and the owner alone touches `meta` and `region` once the
/// guard count drained to zero.
const BUSY: u64 = 4;

/// `Slot::binds`: set when the region's handle let go of it while windows or fast
/// registrations still used it ([`MrTable::deregister_or_defer`]); the low bits count them,
/// and the one whose unbinding brings the count to zero frees the slot.
const ORPHAN: u32 = 1 << 31;

/// A guard count this high means guards are being leaked by the billion; stop before the
/// count could overflow into the key (as `Arc` does for its reference count).
const GUARD_LIMIT: u64 = 1 << 31;

#[inline]
fn state_of(word: u64) -> u64 {
    (word >> STATE_SHIFT) & 0xFF
}

#[inline]
fn key_of(word: u64) -> u8 {
    (word >> KEY_SHIFT) as u8
}

/// The state and key bits of a word, for one compare against a wanted pair.
#[inline]
fn tag_of(word: u64) -> u64 {
    word >> TAG_SHIFT
}

#[inline]
const fn tag(state: u64, key: u8) -> u64 {
    state << (STATE_SHIFT - TAG_SHIFT) | key as u64
}

#[inline]
fn word_with(word: u64, state: u64, key: u8) -> u64 {
    (word & COUNT_MASK) | state << STATE_SHIFT | (key as u64) << KEY_SHIFT
}

/// What a guard needs to know about a registration: copied out of the slot at lookup.
#[derive(Clone, Copy)]
struct Meta {
    ptr: *mut u8,
    len: usize,
    base_to: u64,
    pd: PdId,
    access: Access,
    kind: StagKind,
    /// The stream a bound type 2 window belongs to; 0 for none (stream identities are
    /// nonzero), so the data path pays one compare for it.
    qp: StreamId,
    /// Slot number of the region a window is bound to, or a fast registration's memory
    /// belongs to (0: none). While it is nonzero the parent's `binds` counts this one.
    parent: u32,
}

const EMPTY_META: Meta = Meta {
    ptr: ptr::null_mut(),
    len: 0,
    base_to: 0,
    pd: PdId(0),
    access: Access::empty(),
    kind: StagKind::Mr,
    qp: 0,
    parent: 0,
};

/// `Slot::info`: the kind (low 8 bits), protection domain (next 32) and allocation key
/// (next 8: the key of the STag the allocation returned, which names a window or fast
/// registration whatever its key now, [`MrTable::bind_mw`]) of the slot's current
/// allocation, readable without a guard for early, typed refusals.
fn info_word(kind: StagKind, pd: PdId, alloc_key: u8) -> u64 {
    let k = match kind {
        StagKind::Mr => 0u64,
        StagKind::FastReg => 1,
        StagKind::Window(MwType::Type1) => 2,
        StagKind::Window(MwType::Type2) => 3,
    };
    k | u64::from(pd.0) << 8 | u64::from(alloc_key) << 40
}

/// The allocation key of a `Slot::info` word.
fn alloc_key_of(w: u64) -> u8 {
    (w >> 40) as u8
}

fn info_of(w: u64) -> (StagKind, PdId) {
    let kind = match w & 0xFF {
        0 => StagKind::Mr,
        1 => StagKind::FastReg,
        2 => StagKind::Window(MwType::Type1),
        _ => StagKind::Window(MwType::Type2),
    };
    (kind, PdId((w >> 8) as u32))
}

/// One registration slot, on its own cache line so that guards on different regions do
/// not contend.
#[repr(align(64))]
struct Slot {
    word: AtomicU64,
    /// Written only by the thread that owns the slot's registration while no guard can
    /// exist (state FREE, popped from the free list); read by lookups after their
    /// increment observed VALID.
    meta: UnsafeCell<Meta>,
    /// Keeps the memory alive while registered. Written only by the thread that owns the
    /// slot (FREE popped from the free list, DRAINING or BUSY with a drained count); read
    /// by a guard holder (which excludes every writer).
    region: UnsafeCell<Option<Arc<Region>>>,
    /// Kind and PD of the allocation ([`info_word`]), written while the slot is owned.
    info: AtomicU64,
    /// Memory windows currently bound to this region and valid fast registrations over
    /// its memory: it cannot be deregistered or invalidated while any is (as
    /// `ibv_dereg_mr` refuses with bound windows). The top bit ([`ORPHAN`]) says the
    /// registration ends when the count reaches zero.
    binds: std::sync::atomic::AtomicU32,
    /// Copies of `meta`'s base TO, length and rights for [`MrTable::check_local`], which
    /// reads them without a guard: stored wherever `meta` is written
    /// ([`MrTable::mirror`]), between the two steps of `chk_seq`.
    chk_seq: AtomicU64,
    chk_base: AtomicU64,
    chk_len: AtomicU64,
    chk_access: AtomicU8,
}

// SAFETY: the UnsafeCells are accessed according to the protocol in the module
// documentation: `meta` and `region` are written only by the one thread that owns the
// slot (FREE and popped from the mutex-protected free list, or moved by its own CAS to
// DRAINING or BUSY and then drained of guards), and read only by that owner or by
// lookups that atomically observed VALID afterwards through an acquire RMW (whose count
// keeps every owner out until they release it). `Arc<Region>` is Send + Sync.
unsafe impl Sync for Slot {}
// SAFETY: the raw pointer in `meta` points into a `Region`, which is Send.
unsafe impl Send for Slot {}

/// The table of memory registrations: fixed capacity, registration from any thread,
/// lock-free lookups from the engine cores. Share it with `Arc`.
pub struct MrTable {
    /// Slot 0 exists but is never allocated, so that STag index 0 never names a region.
    slots: Box<[Slot]>,
    /// Free slot numbers, oldest freed first (preallocated: never grows). It never gives
    /// out its last `spare` entries: a freed slot waits behind at least `spare` others.
    free: Mutex<VecDeque<u32>>,
    /// Registrations the table holds at once.
    capacity: usize,
    /// Slots beyond `capacity` ([`MrTable::new`]).
    spare: usize,
    /// Odd multiplier of the 24-bit index bijection, and its inverse modulo 2^24.
    index_mul: u32,
    index_inv: u32,
    /// Odd step added to a slot's key at each registration.
    key_step: u8,
}

impl MrTable {
    /// A table for `capacity` registrations, with STag scrambling seeded from the
    /// operating system's randomness (via `std`'s `RandomState`).
    ///
    /// A slot's key takes 256 values, so an STag whose registration ended names the slot's
    /// registration 256 allocations of that slot later again. Freed slots are reused
    /// oldest first, and the table holds spare slots beyond its capacity that it never
    /// lets the free list run down to: `capacity` of them, at least [`MIN_SPARE_SLOTS`] and
    /// at most 65,536, as far as the 24-bit index allows (none at [`MAX_CAPACITY`]). A slot
    /// is therefore allocated again only after at least that many other allocations, and
    /// a stale STag matches a registration only after 256 times that many registrations
    /// of the table (262,400 at least), however full it is kept. (Without spares, a table
    /// kept full but for one slot handed a stale STag's slot and key back after 256
    /// registrations.) That holds for the STags the table chooses (registrations',
    /// windows' and fast registrations' as allocated): binds and fast registrations do
    /// not move a slot's sequence of allocation keys. The keys of a window's binds and of
    /// fast registrations are the application's: a stale STag of those may name the slot's
    /// next registration (of the same PD, to be usable) as soon as the slot comes back.
    ///
    /// # Panics
    /// If `capacity` is 0 or above [`MAX_CAPACITY`]; capacities are configuration,
    /// checked at start-up (GUIDE rule 7).
    pub fn new(capacity: usize) -> MrTable {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_usize(capacity);
        MrTable::with_seed(capacity, h.finish())
    }

    /// A table for `capacity` registrations whose STag values are a function of `seed`
    /// and of the sequence of operations, for reproducible tests.
    ///
    /// # Panics
    /// As [`MrTable::new`].
    pub fn with_seed(capacity: usize, seed: u64) -> MrTable {
        assert!(
            (1..=MAX_CAPACITY).contains(&capacity),
            "MrTable capacity must be in 1..={MAX_CAPACITY}, got {capacity}"
        );
        let mut rng = SplitMix64(seed);
        let index_mul = (rng.next() as u32 | 1) & INDEX_MASK;
        // Newton's iteration doubles the number of correct low bits each step: 5 steps
        // from 3 correct bits (x = m for odd m) reach 96 > 24.
        let mut inv = index_mul;
        for _ in 0..5 {
            inv = inv.wrapping_mul(2u32.wrapping_sub(index_mul.wrapping_mul(inv)));
        }
        let index_inv = inv & INDEX_MASK;
        debug_assert_eq!(index_mul.wrapping_mul(index_inv) & INDEX_MASK, 1);
        let key_step = rng.next() as u8 | 1;
        let spare = capacity
            .clamp(MIN_SPARE_SLOTS, MAX_SPARE_SLOTS)
            .min(MAX_CAPACITY - capacity);
        let slots = (0..=capacity + spare)
            .map(|_| {
                // `info` holds the key of the last allocation; the first allocation adds
                // the step, so start one step behind a pseudo-random key (the word too:
                // no STag names a slot before its first allocation).
                let start = (rng.next() as u8).wrapping_sub(key_step);
                Slot {
                    word: AtomicU64::new(word_with(0, FREE, start)),
                    meta: UnsafeCell::new(EMPTY_META),
                    region: UnsafeCell::new(None),
                    info: AtomicU64::new(info_word(StagKind::Mr, PdId(0), start)),
                    binds: std::sync::atomic::AtomicU32::new(0),
                    chk_seq: AtomicU64::new(0),
                    chk_base: AtomicU64::new(0),
                    chk_len: AtomicU64::new(0),
                    chk_access: AtomicU8::new(0),
                }
            })
            .collect();
        let free = (1..=(capacity + spare) as u32).collect();
        MrTable {
            slots,
            free: Mutex::new(free),
            capacity,
            spare,
            index_mul,
            index_inv,
            key_step,
        }
    }

    /// The number of registrations the table can hold.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The number of slots currently registered (or being deregistered).
    pub fn registered(&self) -> usize {
        self.capacity + self.spare - self.free_list().len()
    }

    /// Takes the free slot freed longest ago, unless only the spares are left.
    fn take_free_slot(&self) -> Result<u32, MemError> {
        let mut free = self.free_list();
        if free.len() <= self.spare {
            return Err(MemError::TableFull);
        }
        free.pop_front().ok_or(MemError::TableFull)
    }

    fn free_list(&self) -> std::sync::MutexGuard<'_, VecDeque<u32>> {
        // The free list is a plain queue of numbers: a panic while it was locked cannot
        // leave it inconsistent, so poisoning is ignored.
        self.free.lock().unwrap_or_else(PoisonError::into_inner)
    }

    #[inline]
    fn stag_index(&self, slot: u32) -> u32 {
        slot.wrapping_mul(self.index_mul) & INDEX_MASK
    }

    /// The slot an STag names, if it names one that can ever be allocated.
    #[inline]
    fn slot_of(&self, stag: Stag) -> Option<&Slot> {
        let n = stag.index().wrapping_mul(self.index_inv) & INDEX_MASK;
        if n == 0 {
            return None;
        }
        self.slots.get(n as usize)
    }

    /// Registers `region` for protection domain `pd` with rights `access`; the region's
    /// first byte has Tagged Offset `offset_base` (0 for zero-based registrations, the
    /// virtual address for VA-based ones). Returns the STag, whose key differs from the
    /// key of every one of the slot's previous 255 registrations (GUIDE rule 6).
    ///
    /// Errors: [`MemError::InvalidAccess`] (remote write or atomic without local write),
    /// [`MemError::ToWrap`] (`offset_base + len` above 2^64 - 1, DDP-7.1-14 would make the
    /// top of the range unreachable), [`MemError::TableFull`].
    pub fn register(
        &self,
        region: Arc<Region>,
        pd: PdId,
        access: Access,
        offset_base: u64,
    ) -> Result<Stag, MemError> {
        if !access.is_valid_for_registration() {
            return Err(MemError::InvalidAccess);
        }
        if offset_base.checked_add(region.len() as u64).is_none() {
            return Err(MemError::ToWrap);
        }
        let n = self.take_free_slot()?;
        let slot = &self.slots[n as usize];
        let key = self.next_alloc_key(slot);
        // SAFETY: slot `n` was on the free list and we popped it, so this thread owns its
        // registration; its state is FREE, so no lookup reads `meta` (a lookup reads it
        // only after observing VALID), and the deregistration that freed it observed a
        // zero guard count (acquire) before pushing it on the free list, which the mutex
        // orders before this point: every earlier reader is done.
        unsafe {
            *slot.meta.get() = Meta {
                ptr: region.as_ptr(),
                len: region.len(),
                base_to: offset_base,
                pd,
                access,
                ..EMPTY_META
            };
            Self::mirror(slot, &*slot.meta.get());
            *slot.region.get() = Some(region);
        }
        slot.info
            .store(info_word(StagKind::Mr, pd, key), Ordering::Relaxed);
        // Publish: FREE -> VALID with the new key, keeping the count that failing
        // lookups may be changing concurrently. Release orders the writes above before
        // the VALID a successful lookup acquires.
        let _ = slot
            .word
            .fetch_update(Ordering::Release, Ordering::Relaxed, |w| {
                debug_assert_eq!(state_of(w), FREE);
                Some(word_with(w, VALID, key))
            });
        Ok(Stag::new(self.stag_index(n), key))
    }

    /// The key of a new allocation of `slot` (just popped from the free list, so owned and
    /// `FREE`): the previous allocation's key advanced by the table's (odd) step, never the
    /// previous allocation's key itself. Binds and fast registrations name a window or fast
    /// registration by that key ([`MrTable::bind_mw`]): a request still queued for the
    /// previous allocation (its handle was dropped) then never names the next one. The
    /// allocation keys of a slot follow the step whatever keys its binds and fast
    /// registrations chose in between (the application's), so an STag the table chose
    /// comes back only after 256 allocations of its slot ([`MrTable::new`]); advanced from
    /// the slot's last key instead, a window rebound through the key space brought its
    /// slot's next allocation onto keys one step apart from its old ones.
    fn next_alloc_key(&self, slot: &Slot) -> u8 {
        alloc_key_of(slot.info.load(Ordering::Relaxed)).wrapping_add(self.key_step)
    }

    /// Moves the slot of `stag` from one of `from` to `to` (keeping key and count) and
    /// waits until no guard holds it. Returns the slot and the state it was in. With
    /// `wait_busy`, a slot another thread holds `BUSY` under the same key (an invalidation
    /// under way, which ends by publishing the key again) is waited for instead of refused.
    fn transition_and_drain(
        &self,
        stag: Stag,
        from: &[u64],
        to: u64,
        wait_busy: bool,
    ) -> Result<(&Slot, u64), MemError> {
        let slot = self.slot_of(stag).ok_or(MemError::InvalidStag)?;
        let mut w = slot.word.load(Ordering::Relaxed);
        let busy = Backoff::new();
        let prev = loop {
            if key_of(w) != stag.key() {
                return Err(MemError::InvalidStag);
            }
            if !from.contains(&state_of(w)) {
                if wait_busy && state_of(w) == BUSY {
                    Self::pause(&busy);
                    w = slot.word.load(Ordering::Relaxed);
                    continue;
                }
                return Err(MemError::InvalidStag);
            }
            match slot.word.compare_exchange_weak(
                w,
                word_with(w, to, stag.key()),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break state_of(w),
                Err(now) => w = now,
            }
        };
        Self::drain(slot);
        Ok((slot, prev))
    }

    /// Waits until no guard holds `slot`, which this thread moved to a state where no new
    /// guard can be taken: the acquire load that sees zero synchronizes with every guard's
    /// release decrement.
    fn drain(slot: &Slot) {
        let backoff = Backoff::new();
        while slot.word.load(Ordering::Acquire) & COUNT_MASK != 0 {
            Self::pause(&backoff);
        }
    }

    /// One step of a wait for another thread: spin, then yield.
    fn pause(backoff: &Backoff) {
        if backoff.is_completed() {
            std::thread::yield_now();
        } else {
            backoff.snooze();
        }
    }

    /// Publishes `state` with `key` on a slot this thread owns (DRAINING or BUSY), keeping
    /// the count failing lookups may hold. Release orders the owner's writes before any
    /// lookup that acquires the new state.
    fn publish(slot: &Slot, state: u64, key: u8) {
        let _ = slot
            .word
            .fetch_update(Ordering::Release, Ordering::Relaxed, |w| {
                Some(word_with(w, state, key))
            });
    }

    /// Copies what [`MrTable::check_local`] reads of `meta` into the slot's atomics (owner
    /// only, right after writing `meta`).
    fn mirror(slot: &Slot, meta: &Meta) {
        Self::mirror_info(slot, meta, None);
    }

    /// [`MrTable::mirror`], storing the slot's `info` word too when given. A seqlock's
    /// writer (the owner is the only one): `chk_seq` turns odd, the release fence orders
    /// that and the owner's earlier change of the state word (the compare-exchange that
    /// made it the owner) before the copies, and `chk_seq` turns even again with release.
    /// A checker that read any of the copies sees, after its acquire fence, the odd step
    /// or a later one (and refuses to judge by them), and one that acquired the even step
    /// sees all of them. The state word alone would not do: a fast registration's key is
    /// the application's choice, so two registrations in a row can bring the same key back.
    fn mirror_info(slot: &Slot, meta: &Meta, info: Option<u64>) {
        let seq = slot.chk_seq.load(Ordering::Relaxed);
        slot.chk_seq.store(seq.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        if let Some(i) = info {
            slot.info.store(i, Ordering::Relaxed);
        }
        slot.chk_base.store(meta.base_to, Ordering::Relaxed);
        slot.chk_len.store(meta.len as u64, Ordering::Relaxed);
        slot.chk_access.store(meta.access.bits(), Ordering::Relaxed);
        slot.chk_seq.store(seq.wrapping_add(2), Ordering::Release);
    }

    fn slot_number(&self, stag: Stag) -> u32 {
        stag.index().wrapping_mul(self.index_inv) & INDEX_MASK
    }

    /// Ends a window's binding (owner only): the parent region's count drops. If its
    /// handle let go of it meanwhile ([`MrTable::deregister_or_defer`]) and this was the
    /// last binding, the parent's registration ends here.
    fn unbind_parent(&self, meta: &mut Meta) {
        if meta.parent != 0 {
            if let Some(p) = self.slots.get(meta.parent as usize) {
                if p.binds.fetch_sub(1, Ordering::AcqRel) == ORPHAN | 1 {
                    self.free_orphan(meta.parent);
                }
            }
            meta.parent = 0;
        }
    }

    /// Frees the orphaned region in slot `n`, whose last window or fast registration just
    /// went (exactly one thread gets here for an orphan: the one whose decrement left the
    /// count at zero). The slot is `INVALID` (the orphaning revoked its STag, so no guard
    /// can hold it), or still `BUSY` for the few instructions between the orphaning's mark
    /// and its publication: wait for `INVALID`, take it, free it.
    fn free_orphan(&self, n: u32) {
        let slot = &self.slots[n as usize];
        let backoff = Backoff::new();
        let mut w = slot.word.load(Ordering::Relaxed);
        loop {
            if state_of(w) != INVALID {
                Self::pause(&backoff);
                w = slot.word.load(Ordering::Relaxed);
                continue;
            }
            match slot.word.compare_exchange_weak(
                w,
                word_with(w, DRAINING, key_of(w)),
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(now) => w = now,
            }
        }
        Self::drain(slot);
        self.free_drained(slot, n);
    }

    /// The end of every deregistration: the slot is owned by this thread (`DRAINING` or
    /// `BUSY` with a drained count, or an orphan taken by [`MrTable::free_orphan`]). Ends
    /// its binding if it is a window, clears it, publishes `FREE` (keeping the key, which
    /// the next registration advances) and puts it on the free list; the memory goes (if
    /// this was the last reference) only then, when no guard can reach it.
    fn free_drained(&self, slot: &Slot, n: u32) {
        // SAFETY: the caller owns the slot with a drained count: no guard exists and none
        // can be created (the state is neither VALID nor FREE), and no other thread can
        // take it, so this thread alone touches its contents until it publishes FREE.
        let region = unsafe {
            let meta = &mut *slot.meta.get();
            self.unbind_parent(meta);
            *meta = EMPTY_META;
            Self::mirror(slot, meta);
            (*slot.region.get()).take()
        };
        // No window is bound any more; an orphan's mark goes with its registration.
        slot.binds.store(0, Ordering::Release);
        // -> FREE, keeping the key and any count failing lookups hold.
        let _ = slot
            .word
            .fetch_update(Ordering::Release, Ordering::Relaxed, |w| {
                Some(word_with(w, FREE, key_of(w)))
            });
        self.free_list().push_back(n);
        drop(region);
    }

    /// Whether `stag` names its slot's current registration (its key, and a state that is
    /// not free) and that registration has windows bound or fast registrations over it:
    /// the early [`MemError::Busy`] of
    /// [`MrTable::deregister`] and [`MrTable::invalidate`]. A stale STag is not busy: the
    /// transition that follows refuses it with [`MemError::InvalidStag`].
    fn busy_with_binds(&self, stag: Stag) -> bool {
        self.slot_of(stag).is_some_and(|s| {
            let w = s.word.load(Ordering::Acquire);
            key_of(w) == stag.key() && state_of(w) != FREE && s.binds.load(Ordering::Acquire) != 0
        })
    }

    /// Deregisters `stag`: no new lookup succeeds once this starts, and it returns only
    /// when no placement into the region is in flight (DDP-8.3.1-7, RDMAP-8.1.1-7). The
    /// table's reference to the region is dropped before returning, after the slot was
    /// freed. Works on valid and invalidated registrations; an invalidation under way on
    /// another thread (a transient state) is waited for.
    ///
    /// Must not be called by a thread that holds an [`MrGuard`] of the same STag (it
    /// would wait for itself). [`MemError::Busy`] while windows are bound to the region
    /// or fast registrations use its memory (nothing changes); [`MemError::InvalidStag`]
    /// if `stag` is not registered, or
    /// another thread is already deregistering it.
    pub fn deregister(&self, stag: Stag) -> Result<(), MemError> {
        // A region with bound windows stays (as `ibv_dereg_mr` refuses): checked before
        // and, against a bind that raced in, after taking the slot. A stale STag is
        // refused as such first, whatever the slot's current registration has bound.
        if self.busy_with_binds(stag) {
            return Err(MemError::Busy);
        }
        let (slot, prev) = self.transition_and_drain(stag, &[VALID, INVALID], DRAINING, true)?;
        if slot.binds.load(Ordering::Acquire) != 0 {
            Self::publish(slot, prev, stag.key());
            return Err(MemError::Busy);
        }
        self.free_drained(slot, self.slot_number(stag));
        Ok(())
    }

    /// Deregisters `stag` as [`MrTable::deregister`] does, or, if windows are bound to the
    /// region (or fast registrations use its memory), ends what can end now and leaves the
    /// rest to the last of them: the region's own STag stops working at once (it is
    /// invalidated, waiting for placements through it as an invalidation does), and the
    /// end of the last window's binding or fast registration (invalidation, rebinding,
    /// deallocation) frees the slot and drops the table's reference to the memory. For an
    /// owner that cannot wait for them to go (a handle being dropped): until they do, they
    /// reach the memory, which must stay valid.
    ///
    /// [`Deregistration::Done`] or [`Deregistration::Deferred`]; [`MemError::InvalidStag`]
    /// as [`MrTable::deregister`]. The same rule about guards applies.
    pub fn deregister_or_defer(&self, stag: Stag) -> Result<Deregistration, MemError> {
        match self.deregister(stag) {
            Err(MemError::Busy) => {}
            r => return r.map(|()| Deregistration::Done),
        }
        // Own the slot: lookups of the region's STag fail from here on, and no window can
        // be bound to it any more (a bind holds a guard on the region while it counts
        // itself, so every bind that will ever count has counted once the guards drained).
        let (slot, prev) = self.transition_and_drain(stag, &[VALID, INVALID], BUSY, true)?;
        let before = slot.binds.fetch_or(ORPHAN, Ordering::AcqRel);
        if before & ORPHAN != 0 {
            // Already orphaned (by an earlier call with the same STag): nothing to add.
            Self::publish(slot, prev, stag.key());
            return Ok(Deregistration::Deferred);
        }
        if before == 0 {
            // The last window went between the refusal and the mark: free it now.
            self.free_drained(slot, self.slot_number(stag));
            return Ok(Deregistration::Done);
        }
        // The last window's unbinding frees it (`free_orphan`, which waits for this).
        Self::publish(slot, INVALID, stag.key());
        Ok(Deregistration::Deferred)
    }

    /// Invalidates `stag` (the table-level operation under Local Invalidate and Send with
    /// Invalidate; RDMAP-5.3-12): lookups fail with [`LookupFault::InvalidStag`] from the
    /// moment this starts, and it returns when no placement into the memory is in flight
    /// (DDP-8.3.1-7). An ordinary registration keeps its slot and memory until
    /// [`MrTable::deregister`]; a window or fast registration lets go of its memory and
    /// can be bound or fast-registered again with a new key. A region with bound windows
    /// or fast registrations over it is refused ([`MemError::Busy`]). Checking who may invalidate is the caller's:
    /// [`MrTable::invalidate_local`], [`MrTable::invalidate_remote`].
    ///
    /// Must not be called by a thread that holds an [`MrGuard`] of the same STag.
    pub fn invalidate(&self, stag: Stag) -> Result<(), MemError> {
        self.invalidate_if(stag, |_| None::<MemError>)
            .and_then(|refused| refused.map_or(Ok(()), Err))
    }

    /// [`MrTable::invalidate`], with `refuse` asked about the registration once this
    /// thread owns the slot (drained of guards: nothing can change it any more). On `Some`
    /// the slot goes back to `VALID` untouched and the answer is `Ok(Some(..))`. What a
    /// caller checked before may be stale by then even though the key matches: bind and
    /// fast-registration keys are the application's choice, so two binds can bring a key
    /// back over another registration (as `check_local`'s sequence guards against).
    fn invalidate_if<E>(
        &self,
        stag: Stag,
        refuse: impl FnOnce(&Meta) -> Option<E>,
    ) -> Result<Option<E>, MemError> {
        if self.busy_with_binds(stag) {
            return Err(MemError::Busy);
        }
        let (slot, _) = self.transition_and_drain(stag, &[VALID], BUSY, false)?;
        if slot.binds.load(Ordering::Acquire) != 0 {
            Self::publish(slot, VALID, stag.key());
            return Err(MemError::Busy);
        }
        // SAFETY: BUSY with a drained count, moved there by this thread: it owns the slot,
        // and nothing writes `meta` while it does.
        if let Some(e) = refuse(unsafe { &*slot.meta.get() }) {
            Self::publish(slot, VALID, stag.key());
            return Ok(Some(e));
        }
        // SAFETY: BUSY with a drained count, moved there by this thread: it owns the slot.
        let old = unsafe {
            let meta = &mut *slot.meta.get();
            if meta.kind == StagKind::Mr {
                None
            } else {
                self.unbind_parent(meta);
                let (kind, pd) = (meta.kind, meta.pd);
                *meta = Meta {
                    kind,
                    pd,
                    ..EMPTY_META
                };
                Self::mirror(slot, meta);
                (*slot.region.get()).take()
            }
        };
        Self::publish(slot, INVALID, stag.key());
        drop(old);
        Ok(None)
    }

    /// Local Invalidate by a queue pair of protection domain `pd`: any valid STag of the
    /// domain (a window of either type, a fast registration, an ordinary region). An STag
    /// already invalid under this very key (the peer's Send with Invalidate got there
    /// first, or an earlier Local Invalidate) stays so and the request succeeds: "per RDMA
    /// verbs definition, an STag may already be in invalid state if invalidation is
    /// requested" (siw's `siw_invalidate_stag`; the SMB Direct client posts its Local
    /// Invalidate of a fast registration it asked the server to invalidate). A key that is
    /// not the slot's current one is refused ([`MemError::InvalidStag`]).
    pub fn invalidate_local(&self, stag: Stag, pd: PdId) -> Result<(), MemError> {
        let (_, spd) = self.slot_info(stag).ok_or(MemError::InvalidStag)?;
        if spd != pd {
            return Err(MemError::WrongPd);
        }
        // The PD again once the slot is owned: the one above is read without a guard.
        match self.invalidate_if(stag, |m| (m.pd != pd).then_some(MemError::WrongPd)) {
            Ok(None) => Ok(()),
            Ok(Some(e)) => Err(e),
            // Not valid (or an orphaned region, invalid with windows still over it): fine
            // if it is invalid under this key.
            Err(MemError::InvalidStag | MemError::Busy) if self.already_invalid(stag) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Whether `stag` names its slot's current allocation (the key) and that is invalid;
    /// a transient `BUSY` under the same key (an invalidation or orphaning under way on
    /// another thread, which publishes the key again) is waited for.
    fn already_invalid(&self, stag: Stag) -> bool {
        let Some(slot) = self.slot_of(stag) else {
            return false;
        };
        let backoff = Backoff::new();
        loop {
            let w = slot.word.load(Ordering::Acquire);
            if key_of(w) != stag.key() {
                return false;
            }
            match state_of(w) {
                INVALID => return true,
                BUSY => Self::pause(&backoff),
                _ => return false,
            }
        }
    }

    /// A peer's invalidation through a Send with (SE and) Invalidate arriving on stream
    /// `stream` of protection domain `pd` (RDMAP-5.3-11/12, RDMAP-7.2-4/5): the STag must
    /// be valid ([`InvalidateFault::Invalid`]), of this PD and, for a type 2 window, bound
    /// to this stream ([`InvalidateFault::NotAssociated`]); and it must be one a peer may
    /// invalidate ([`InvalidateFault::NotInvalidatable`]): a fast registration, a type 2
    /// window, or a region registered with [`Access::REMOTE_INVALIDATE`] and no bound
    /// window or fast registration over it. Type 1 windows and other regions are shared by the streams of the PD
    /// (RDMAP-8.1.1-8).
    pub fn invalidate_remote(
        &self,
        stag: Stag,
        pd: PdId,
        stream: StreamId,
    ) -> Result<(), InvalidateFault> {
        self.check_invalidate_remote(stag, pd, stream)?;
        check_hook::run();
        // The key checked above is checked again by the transition (an invalidation in
        // between fails it), and the rest once the slot is owned: two binds by another
        // queue pair can bring the key back on a type 2 window bound to that queue pair's
        // stream (DDP-8.2-2, RDMAP-8.1.1-3, RDMAP-8.1.1-8).
        match self.invalidate_if(stag, |m| remote_invalidate_fault(m, pd, stream)) {
            Ok(None) => Ok(()),
            Ok(Some(f)) => Err(f),
            Err(MemError::Busy) => Err(InvalidateFault::NotInvalidatable),
            Err(_) => Err(InvalidateFault::Invalid),
        }
    }

    /// The checks of [`MrTable::invalidate_remote`] without the invalidation: whether a
    /// peer on stream `stream` of protection domain `pd` may invalidate `stag` now. The
    /// receive path runs it before it places any octet of a Send with Invalidate, so a
    /// refused one changes no byte (RDMAP-5.3-11/12, RDMAP-7.2-4/5, RDMAP-8.1.1-8); the
    /// state may change before the invalidation itself, which checks again.
    pub fn check_invalidate_remote(
        &self,
        stag: Stag,
        pd: PdId,
        stream: StreamId,
    ) -> Result<(), InvalidateFault> {
        let g = self
            .lookup_in(stag, pd, stream, Access::empty())
            .map_err(|f| match f {
                LookupFault::WrongPd | LookupFault::WrongQp => InvalidateFault::NotAssociated,
                LookupFault::InvalidStag | LookupFault::AccessDenied => InvalidateFault::Invalid,
            })?;
        if let Some(f) = remote_invalidate_fault(g.meta(), pd, stream) {
            return Err(f);
        }
        // A region with bound windows or fast registrations over it cannot be invalidated
        // (`invalidate`: Busy).
        if g.slot.binds.load(Ordering::Acquire) != 0 {
            return Err(InvalidateFault::NotInvalidatable);
        }
        Ok(())
    }

    /// The kind and protection domain of the allocation `stag` names (any state but
    /// free, key matching), for early typed refusals; `None` if it names none.
    pub fn stag_info(&self, stag: Stag) -> Option<(StagKind, PdId)> {
        let slot = self.slot_of(stag)?;
        let w = slot.word.load(Ordering::Acquire);
        if key_of(w) != stag.key() || state_of(w) == FREE {
            return None;
        }
        Some(info_of(slot.info.load(Ordering::Relaxed)))
    }

    /// The kind and protection domain of the allocation in the slot `stag`'s index names,
    /// whatever its key and state (but free): what a work request posted now may check,
    /// since the requests queued before it may change the key (a bind, a fast
    /// registration) before it runs. Execution checks the key.
    pub fn slot_info(&self, stag: Stag) -> Option<(StagKind, PdId)> {
        let slot = self.slot_of(stag)?;
        if state_of(slot.word.load(Ordering::Acquire)) == FREE {
            return None;
        }
        Some(info_of(slot.info.load(Ordering::Relaxed)))
    }

    /// Whether `stag` is currently valid (usable by lookups).
    pub fn is_valid(&self, stag: Stag) -> bool {
        self.slot_of(stag)
            .is_some_and(|s| tag_of(s.word.load(Ordering::Acquire)) == tag(VALID, stag.key()))
    }

    fn alloc_invalid(&self, kind: StagKind, pd: PdId) -> Result<Stag, MemError> {
        let n = self.take_free_slot()?;
        let slot = &self.slots[n as usize];
        let key = self.next_alloc_key(slot);
        // SAFETY: popped from the free list: owned, FREE, drained (as in `register`).
        unsafe {
            *slot.meta.get() = Meta {
                pd,
                kind,
                ..EMPTY_META
            };
            Self::mirror_info(slot, &*slot.meta.get(), Some(info_word(kind, pd, key)));
            *slot.region.get() = None;
        }
        let _ = slot
            .word
            .fetch_update(Ordering::Release, Ordering::Relaxed, |w| {
                Some(word_with(w, INVALID, key))
            });
        Ok(Stag::new(self.stag_index(n), key))
    }

    /// The kind and protection domain of the allocation `alloc` names by its allocation
    /// key (the STag [`MrTable::alloc_mw`], [`MrTable::alloc_fast_reg`] or
    /// [`MrTable::register`] returned), whatever its key and state now (but free), with the
    /// slot's word as read.
    fn allocation(&self, alloc: Stag) -> Option<(&Slot, u64, StagKind, PdId)> {
        let slot = self.slot_of(alloc)?;
        let w = slot.word.load(Ordering::Acquire);
        let info = slot.info.load(Ordering::Relaxed);
        if state_of(w) == FREE || alloc_key_of(info) != alloc.key() {
            return None;
        }
        let (kind, pd) = info_of(info);
        Some((slot, w, kind, pd))
    }

    /// The current STag of the window or fast registration allocated as `alloc` (its key
    /// changes with every bind or fast registration), while it is allocated.
    pub fn current_stag(&self, alloc: Stag) -> Option<Stag> {
        self.allocation(alloc)
            .map(|(_, w, _, _)| Stag::new(alloc.index(), key_of(w)))
    }

    /// Takes the slot of the allocation `alloc` names (by its allocation key, whatever its
    /// key now) from one of the states `from` to `to`, keeping key and count, and drains
    /// it, as [`MrTable::transition_and_drain`] does for an STag; with `wait_busy`, a slot
    /// another thread holds `BUSY` is waited for. Returns the slot, the state it was in and
    /// its key.
    fn own_allocation(
        &self,
        alloc: Stag,
        from: &[u64],
        to: u64,
        wait_busy: bool,
    ) -> Result<(&Slot, u64, u8), MemError> {
        let slot = self.slot_of(alloc).ok_or(MemError::InvalidStag)?;
        let busy = Backoff::new();
        let mut w = slot.word.load(Ordering::Acquire);
        loop {
            // Checked before taking the slot, so that a request naming an allocation that
            // is gone never disturbs the slot's next one; and after, when nothing can
            // change it any more.
            if state_of(w) == FREE || alloc_key_of(slot.info.load(Ordering::Relaxed)) != alloc.key()
            {
                return Err(MemError::InvalidStag);
            }
            if !from.contains(&state_of(w)) {
                if wait_busy && state_of(w) == BUSY {
                    Self::pause(&busy);
                    w = slot.word.load(Ordering::Acquire);
                    continue;
                }
                return Err(MemError::InvalidStag);
            }
            match slot.word.compare_exchange_weak(
                w,
                word_with(w, to, key_of(w)),
                Ordering::Acquire,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(now) => w = now,
            }
        }
        Self::drain(slot);
        let (prev, key) = (state_of(w), key_of(w));
        if alloc_key_of(slot.info.load(Ordering::Relaxed)) != alloc.key() {
            Self::publish(slot, prev, key);
            return Err(MemError::InvalidStag);
        }
        Ok((slot, prev, key))
    }

    /// Frees the window or fast-registration STag allocated as `alloc` (by
    /// [`MrTable::alloc_mw`] or [`MrTable::alloc_fast_reg`], for protection domain `pd`),
    /// whatever its key now: the owner's deallocation (`ibv_dealloc_mw`), which cannot know
    /// the key its queued binds or fast registrations will have left. A bind or
    /// invalidation under way on another thread is waited for; a bound window ends its
    /// binding. Requests still queued for it fail when they run (their allocation is
    /// gone). As [`MrTable::deregister`] otherwise: it returns once no placement through it
    /// is in flight, and must not be called by a thread holding a guard of it.
    ///
    /// [`MemError::InvalidStag`] if `alloc` names no allocation, [`MemError::WrongKind`]
    /// for an ordinary region (use [`MrTable::deregister`]), [`MemError::WrongPd`].
    pub fn deallocate(&self, alloc: Stag, pd: PdId) -> Result<(), MemError> {
        let (_, _, kind, apd) = self.allocation(alloc).ok_or(MemError::InvalidStag)?;
        if kind == StagKind::Mr {
            return Err(MemError::WrongKind);
        }
        if apd != pd {
            return Err(MemError::WrongPd);
        }
        let (slot, _, _) = self.own_allocation(alloc, &[VALID, INVALID], DRAINING, true)?;
        self.free_drained(slot, self.slot_number(alloc));
        Ok(())
    }

    /// Allocates a memory window of protection domain `pd` (`ibv_alloc_mw`): an STag in
    /// the invalid state until a Bind work request binds it ([`MrTable::bind_mw`]).
    /// Deallocate it with [`MrTable::deallocate`] (or [`MrTable::deregister`] of its
    /// current STag).
    pub fn alloc_mw(&self, pd: PdId, ty: MwType) -> Result<Stag, MemError> {
        self.alloc_invalid(StagKind::Window(ty), pd)
    }

    /// Allocates a fast-registration STag of `pd` (`ibv_alloc_mr(IB_MR_TYPE_MEM_REG)`):
    /// invalid until a Fast-Register work request makes it valid
    /// ([`MrTable::fast_register`]). Free it with [`MrTable::deallocate`] (or
    /// [`MrTable::deregister`] of its current STag).
    pub fn alloc_fast_reg(&self, pd: PdId) -> Result<Stag, MemError> {
        self.alloc_invalid(StagKind::FastReg, pd)
    }

    /// The region under a bind or fast registration: an ordinary registration of `pd`
    /// that needs `need`, and the byte offset of `[to, to + len)` in it.
    fn source(
        &self,
        mr: Stag,
        pd: PdId,
        need: Access,
        to: u64,
        len: u64,
    ) -> Result<(MrGuard<'_>, usize, usize), MemError> {
        let g = self
            .lookup_in(mr, pd, 0, Access::empty())
            .map_err(|f| match f {
                LookupFault::WrongPd => MemError::WrongPd,
                _ => MemError::InvalidStag,
            })?;
        if g.meta().kind != StagKind::Mr {
            return Err(MemError::WrongKind);
        }
        if need.contains(Access::MW_BIND) && !g.meta().access.contains(Access::MW_BIND) {
            return Err(MemError::BindNotAllowed);
        }
        if !g.meta().access.contains(need) {
            return Err(MemError::WindowAccess);
        }
        let len = usize::try_from(len).map_err(|_| MemError::OutOfBounds)?;
        let off = g.bounds(to, len).map_err(|f| match f {
            BoundsFault::ToWrap => MemError::ToWrap,
            _ => MemError::OutOfBounds,
        })?;
        Ok((g, off, len))
    }

    /// The checks of a bind that do not depend on the window's state (done again by
    /// [`MrTable::bind_mw`]): `mw` names an allocated window of `pd` (by the STag its
    /// allocation returned), `access` only remote rights (write and atomic need a region
    /// with local write, as `ibv_bind_mw` does), `mr` an ordinary region of `pd` with
    /// [`Access::MW_BIND`] containing `[to, to + len)`. Not `new_key`: the window's key
    /// when the bind runs is the one the binds queued before it leave, not its key now
    /// (a key it has now may be free by then, one it has not may be taken), so only
    /// [`MrTable::bind_mw`] refuses the same key ([`MemError::SameKey`]).
    #[allow(clippy::too_many_arguments)]
    pub fn check_bind(
        &self,
        mw: Stag,
        new_key: u8,
        mr: Stag,
        pd: PdId,
        to: u64,
        len: u64,
        access: Access,
    ) -> Result<(), MemError> {
        let _ = new_key;
        self.bind_source(mw, None, mr, pd, to, len, access)
            .map(|_| ())
    }

    #[allow(clippy::too_many_arguments)]
    fn bind_source(
        &self,
        mw: Stag,
        new_key: Option<u8>,
        mr: Stag,
        pd: PdId,
        to: u64,
        len: u64,
        access: Access,
    ) -> Result<(MwType, MrGuard<'_>, usize, usize), MemError> {
        let (_, w, kind, wpd) = self.allocation(mw).ok_or(MemError::InvalidStag)?;
        let StagKind::Window(ty) = kind else {
            return Err(MemError::WrongKind);
        };
        if wpd != pd {
            return Err(MemError::WrongPd);
        }
        if new_key == Some(key_of(w)) {
            return Err(MemError::SameKey);
        }
        if !Access::WINDOW_RIGHTS.contains(access) {
            return Err(MemError::WindowAccess);
        }
        let mut need = Access::MW_BIND;
        if access.contains(Access::REMOTE_WRITE) || access.contains(Access::REMOTE_ATOMIC) {
            need |= Access::LOCAL_WRITE;
        }
        let (g, off, len) = self.source(mr, pd, need, to, len)?;
        Ok((ty, g, off, len))
    }

    /// Binds window `mw` to `[to, to + len)` of region `mr` (TOs of the region's space;
    /// the window uses the same TOs) with `access`, under the new key `new_key` (different
    /// from the current one, so the old STag never matches again), and returns the
    /// window's new STag. A type 2 window is bound to `stream`, whose Bind work request
    /// this is (DDP-8.3-3); a type 1 window to the PD. Binding a bound window rebinds it
    /// (the old binding ends first). Runs on the engine core that executes the Bind work
    /// request, in send queue order.
    ///
    /// `mw` names the window as allocated: the STag [`MrTable::alloc_mw`] returned,
    /// whatever key the window has now (as `ibv_bind_mw` names the window object, not its
    /// current rkey). A bind queued behind others need not know the key they will leave,
    /// nor does one behind a failed one; and once the window is deallocated
    /// ([`MrTable::deallocate`]) no queued bind reaches its slot's next allocation.
    #[allow(clippy::too_many_arguments)]
    pub fn bind_mw(
        &self,
        mw: Stag,
        new_key: u8,
        mr: Stag,
        pd: PdId,
        to: u64,
        len: u64,
        access: Access,
        stream: Option<StreamId>,
    ) -> Result<Stag, MemError> {
        let (ty, g, off, len) = self.bind_source(mw, Some(new_key), mr, pd, to, len, access)?;
        let stream = stream.unwrap_or(0);
        if ty == MwType::Type2 && stream == 0 {
            return Err(MemError::NoQueuePair);
        }
        let (slot, prev, key) = self.own_allocation(mw, &[VALID, INVALID], BUSY, false)?;
        if key == new_key {
            Self::publish(slot, prev, key);
            return Err(MemError::SameKey);
        }
        // SAFETY: BUSY with a drained count, moved there by this thread: it owns `meta`
        // and `region`. The parent's region is read under its guard `g`, which keeps
        // every writer of the parent's slot out.
        let old = unsafe {
            let meta = &mut *slot.meta.get();
            if meta.kind != StagKind::Window(ty) || meta.pd != pd {
                // Deallocated and reallocated since `bind_source` looked.
                Self::publish(slot, prev, key);
                return Err(MemError::WrongKind);
            }
            self.unbind_parent(meta);
            let parent = self.slot_number(mr);
            self.slots[parent as usize]
                .binds
                .fetch_add(1, Ordering::AcqRel);
            *meta = Meta {
                ptr: g.meta().ptr.add(off),
                len,
                base_to: to,
                pd,
                access,
                kind: StagKind::Window(ty),
                qp: if ty == MwType::Type2 { stream } else { 0 },
                parent,
            };
            Self::mirror(slot, meta);
            let region = (*g.slot.region.get()).clone();
            core::mem::replace(&mut *slot.region.get(), region)
        };
        Self::publish(slot, VALID, new_key);
        drop(g);
        drop(old);
        Ok(Stag::new(mw.index(), new_key))
    }

    /// The checks of a fast registration that do not depend on the STag's state (done
    /// again by [`MrTable::fast_register`]). Not `new_key`, as [`MrTable::check_bind`]
    /// does not check a bind's: the key the STag has when the registration runs is the one
    /// the requests queued before it leave.
    #[allow(clippy::too_many_arguments)]
    pub fn check_fast_reg(
        &self,
        stag: Stag,
        new_key: u8,
        mr: Stag,
        pd: PdId,
        mr_to: u64,
        len: u64,
        base_to: u64,
        access: Access,
    ) -> Result<(), MemError> {
        let _ = new_key;
        self.fast_reg_source(stag, None, mr, pd, mr_to, len, base_to, access)
            .map(|_| ())
    }

    #[allow(clippy::too_many_arguments)]
    fn fast_reg_source(
        &self,
        stag: Stag,
        new_key: Option<u8>,
        mr: Stag,
        pd: PdId,
        mr_to: u64,
        len: u64,
        base_to: u64,
        access: Access,
    ) -> Result<(MrGuard<'_>, usize, usize), MemError> {
        let (_, w, kind, spd) = self.allocation(stag).ok_or(MemError::InvalidStag)?;
        if kind != StagKind::FastReg {
            return Err(MemError::WrongKind);
        }
        if spd != pd {
            return Err(MemError::WrongPd);
        }
        if new_key == Some(key_of(w)) {
            return Err(MemError::SameKey);
        }
        if !access.is_valid_for_registration() || access.contains(Access::MW_BIND) {
            return Err(MemError::WindowAccess);
        }
        if base_to.checked_add(len).is_none() {
            return Err(MemError::ToWrap);
        }
        let writes = Access::LOCAL_WRITE.0 | Access::REMOTE_WRITE.0 | Access::REMOTE_ATOMIC.0;
        let need = if access.0 & writes != 0 {
            Access::LOCAL_WRITE
        } else {
            Access::empty()
        };
        self.source(mr, pd, need, mr_to, len)
    }

    /// Fast registration (the Fast-Register work request): makes the fast-registration
    /// STag allocated as `stag` (the STag [`MrTable::alloc_fast_reg`] returned, whatever
    /// its key now, as [`MrTable::bind_mw`] names a window) valid under the new key
    /// `new_key` over `len` octets at `mr_to` of the ordinary region `mr` (the memory;
    /// write rights need a region with local write), whose first octet gets Tagged Offset
    /// `base_to`, with `access`. Returns the new STag. It must be invalid (never
    /// registered, or invalidated since): a valid one is refused
    /// ([`MemError::StillValid`]), invalidate it first. Until it is invalidated or freed
    /// the region counts it as a bound window: it is not deregistered under it.
    #[allow(clippy::too_many_arguments)]
    pub fn fast_register(
        &self,
        stag: Stag,
        new_key: u8,
        mr: Stag,
        pd: PdId,
        mr_to: u64,
        len: u64,
        base_to: u64,
        access: Access,
    ) -> Result<Stag, MemError> {
        let (g, off, len) =
            self.fast_reg_source(stag, Some(new_key), mr, pd, mr_to, len, base_to, access)?;
        let still_valid = || {
            self.allocation(stag)
                .is_some_and(|(_, w, _, _)| state_of(w) == VALID)
        };
        if still_valid() {
            return Err(MemError::StillValid);
        }
        let (slot, prev, key) =
            self.own_allocation(stag, &[INVALID], BUSY, false)
                .map_err(|_| {
                    if still_valid() {
                        MemError::StillValid
                    } else {
                        MemError::InvalidStag
                    }
                })?;
        if key == new_key {
            Self::publish(slot, prev, key);
            return Err(MemError::SameKey);
        }
        // SAFETY: as in `bind_mw`.
        let old = unsafe {
            let meta = &mut *slot.meta.get();
            if meta.kind != StagKind::FastReg || meta.pd != pd {
                Self::publish(slot, prev, key);
                return Err(MemError::WrongKind);
            }
            // The registration reaches the region's memory: the region counts it as it
            // counts a bound window, so it is not deregistered from under it (the memory
            // of `Region::from_raw` may be freed once it is).
            self.unbind_parent(meta);
            let parent = self.slot_number(mr);
            self.slots[parent as usize]
                .binds
                .fetch_add(1, Ordering::AcqRel);
            *meta = Meta {
                ptr: g.meta().ptr.add(off),
                len,
                base_to,
                pd,
                access,
                kind: StagKind::FastReg,
                qp: 0,
                parent,
            };
            Self::mirror(slot, meta);
            let region = (*g.slot.region.get()).clone();
            core::mem::replace(&mut *slot.region.get(), region)
        };
        Self::publish(slot, VALID, new_key);
        drop(g);
        drop(old);
        Ok(Stag::new(stag.index(), new_key))
    }

    /// Looks up `stag` for an access by a stream of protection domain `pd` that needs the
    /// rights `required` (e.g. [`Access::REMOTE_WRITE`] to place an RDMA Write,
    /// [`Access::LOCAL_WRITE`] to place a Read Response into the requester's own sink, as
    /// siw's `siw_rresp_check` does, [`Access::REMOTE_READ`] to answer a Read Request,
    /// and [`Access::REMOTE_ATOMIC`] with both remote rights for an atomic). Checks, in siw's order: the STag is
    /// valid (DDP-7.1-10), the PD matches (DDP-8.2-1), the rights suffice (DDP-7.1-11).
    ///
    /// The guard keeps the registration alive; drop it as soon as the segment is placed.
    /// Lock-free and allocation-free.
    ///
    /// A type 2 window bound to a queue pair is refused here ([`LookupFault::WrongQp`]):
    /// remote accesses of a stream use [`MrTable::lookup_remote`].
    #[inline]
    pub fn lookup(
        &self,
        stag: Stag,
        pd: PdId,
        required: Access,
    ) -> Result<MrGuard<'_>, LookupFault> {
        self.lookup_in(stag, pd, 0, required)
    }

    /// [`MrTable::lookup`] for an access by the peer of stream `stream`: a type 2 window
    /// must be bound to that stream ([`LookupFault::WrongQp`], checked after the PD,
    /// DDP-8.2-2, RDMAP-8.1.1-3).
    #[inline]
    pub fn lookup_remote(
        &self,
        stag: Stag,
        pd: PdId,
        stream: StreamId,
        required: Access,
    ) -> Result<MrGuard<'_>, LookupFault> {
        self.lookup_in(stag, pd, stream, required)
    }

    #[inline]
    fn lookup_in(
        &self,
        stag: Stag,
        pd: PdId,
        stream: StreamId,
        required: Access,
    ) -> Result<MrGuard<'_>, LookupFault> {
        let slot = self.slot_of(stag).ok_or(LookupFault::InvalidStag)?;
        let want = tag(VALID, stag.key());
        // Early rejection of stale and garbage STags without touching the count (which
        // would make a deregistration wait on lookups that are bound to fail).
        if tag_of(slot.word.load(Ordering::Relaxed)) != want {
            return Err(LookupFault::InvalidStag);
        }
        let old = slot.word.fetch_add(1, Ordering::Acquire);
        if tag_of(old) != want {
            slot.word.fetch_sub(1, Ordering::Release);
            return Err(LookupFault::InvalidStag);
        }
        if old & COUNT_MASK >= GUARD_LIMIT {
            std::process::abort();
        }
        // SAFETY: our increment observed VALID with this key, so the registration that
        // published it happened before (acquire on its release sequence) and the slot
        // cannot leave VALID (nor `meta` change) until our guard decrements.
        let meta = unsafe { &*slot.meta.get() };
        let guard = MrGuard {
            slot,
            stag,
            _not_send: PhantomData,
        };
        check_rights(
            meta.pd,
            meta.qp != 0 && meta.qp != stream,
            meta.access,
            pd,
            required,
        )?;
        Ok(guard)
    }

    /// Looks up a local key for a scatter/gather entry of a posted work request: the PD
    /// must match, and if the engine will write into the memory (Receive, RDMA Read sink)
    /// the registration must allow [`Access::LOCAL_WRITE`]. Local read is always allowed.
    /// A memory window is never a local key ([`LookupFault::AccessDenied`]).
    #[inline]
    pub fn lookup_local(
        &self,
        stag: Stag,
        pd: PdId,
        need_write: bool,
    ) -> Result<MrGuard<'_>, LookupFault> {
        let required = if need_write {
            Access::LOCAL_WRITE
        } else {
            Access::empty()
        };
        let g = self.lookup_in(stag, pd, 0, required)?;
        if matches!(g.meta().kind, StagKind::Window(_)) {
            return Err(LookupFault::AccessDenied);
        }
        Ok(g)
    }
}

impl MrTable {
    /// What [`MrTable::lookup_local`] and [`MrGuard::bounds`] would say of `len` octets at
    /// `to` under the local key `stag`, without taking a guard (no read-modify-write of the
    /// slot's word, which the poster of a work request would otherwise pay twice per SGE).
    /// For the typed refusal of a work request at post time: the engine looks the key up
    /// again, guarded, when it reads or writes the memory, so this check protects nothing
    /// by itself. A seqlock's reader: it reads the copies' sequence, the slot's word, the
    /// copies of the registration's kind, PD, rights and range, then the sequence and the
    /// word again. If the word did not show the STag valid, it refuses
    /// ([`LookupFault::InvalidStag`]); if a registration operation on the slot ran
    /// meanwhile, even one that brought the same key back, it does not judge by what it
    /// read and asks the guarded lookup instead.
    #[inline(always)]
    pub fn check_local(
        &self,
        stag: Stag,
        pd: PdId,
        need_write: bool,
        to: u64,
        len: u64,
    ) -> Result<(), Result<LookupFault, BoundsFault>> {
        let slot = self.slot_of(stag).ok_or(Ok(LookupFault::InvalidStag))?;
        let want = tag(VALID, stag.key());
        let seq = slot.chk_seq.load(Ordering::Acquire);
        if tag_of(slot.word.load(Ordering::Acquire)) != want {
            return Err(Ok(LookupFault::InvalidStag));
        }
        let (kind, spd) = info_of(slot.info.load(Ordering::Relaxed));
        let access = Access::from_bits(slot.chk_access.load(Ordering::Relaxed));
        check_hook::run();
        let base = slot.chk_base.load(Ordering::Relaxed);
        let mlen = slot.chk_len.load(Ordering::Relaxed);
        fence(Ordering::Acquire);
        if seq & 1 != 0
            || slot.chk_seq.load(Ordering::Relaxed) != seq
            || tag_of(slot.word.load(Ordering::Relaxed)) != want
        {
            // The slot changed under the check: the guarded lookup decides.
            return cold(|| {
                self.lookup_local(stag, pd, need_write)
                    .map_err(Ok)
                    .and_then(|g| g.bounds(to, len as usize).map(drop).map_err(Err))
            });
        }
        let required = if need_write {
            Access::LOCAL_WRITE
        } else {
            Access::empty()
        };
        // As `lookup_local`: the checks of `lookup_in` (a bound type 2 window belongs to
        // a stream, never this local lookup's), then windows refused.
        check_rights(
            spd,
            kind == StagKind::Window(MwType::Type2),
            access.unwrap_or(Access::empty()),
            pd,
            required,
        )
        .map_err(Ok)?;
        if access.is_none() || matches!(kind, StagKind::Window(_)) {
            return Err(Ok(LookupFault::AccessDenied));
        }
        // As `MrGuard::bounds`.
        range_offset(base, mlen, to, len).map_err(Err)?;
        Ok(())
    }
}

/// Runs `f` out of line: the rare path of an inlined function stays out of its callers.
#[cold]
#[inline(never)]
fn cold<T>(f: impl FnOnce() -> T) -> T {
    f()
}

/// What [`MrTable::check_local`] runs after it read the copied rights and before it reads
/// the copied range, and [`MrTable::invalidate_remote`] between its check and the
/// invalidation: nothing, except in this crate's unit tests, which put a run of other
/// registrations there (`check_hook::set`, for the next such call on the same thread).
mod check_hook {
    #[cfg(not(test))]
    #[inline(always)]
    pub(super) fn run() {}

    #[cfg(test)]
    thread_local! {
        static HOOK: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
            const { std::cell::RefCell::new(None) };
    }

    #[cfg(test)]
    pub(super) fn run() {
        if let Some(f) = HOOK.with(|h| h.borrow_mut().take()) {
            f();
        }
    }

    #[cfg(test)]
    pub(super) fn set(f: impl FnOnce() + 'static) {
        HOOK.with(|h| *h.borrow_mut() = Some(Box::new(f)));
    }
}

/// Why a peer on stream `stream` of protection domain `pd` may not invalidate the
/// registration `m` (RDMAP-5.3-11/12, RDMAP-7.2-4/5, RDMAP-8.1.1-8): another PD or a type 2
/// window bound to another stream ("not associated"), or one shared by the streams of the
/// PD (a type 1 window, a region without [`Access::REMOTE_INVALIDATE`]).
fn remote_invalidate_fault(m: &Meta, pd: PdId, stream: StreamId) -> Option<InvalidateFault> {
    if m.pd != pd || (m.qp != 0 && m.qp != stream) {
        return Some(InvalidateFault::NotAssociated);
    }
    let allowed = match m.kind {
        StagKind::Mr => m.access.contains(Access::REMOTE_INVALIDATE),
        StagKind::FastReg | StagKind::Window(MwType::Type2) => true,
        StagKind::Window(MwType::Type1) => false,
    };
    (!allowed).then_some(InvalidateFault::NotInvalidatable)
}

/// The rights checks of a lookup, in `lookup_in`'s order (siw's): the registration's PD
/// (`owner_pd`) against the caller's, a type 2 window bound to another stream, then the
/// rights `granted` against those `required`.
#[inline]
fn check_rights(
    owner_pd: PdId,
    other_stream: bool,
    granted: Access,
    pd: PdId,
    required: Access,
) -> Result<(), LookupFault> {
    if owner_pd != pd {
        return Err(LookupFault::WrongPd);
    }
    if other_stream {
        return Err(LookupFault::WrongQp);
    }
    if !granted.contains(required) {
        return Err(LookupFault::AccessDenied);
    }
    Ok(())
}

/// The offset of `[to, to + len)` in a registration of `mlen` octets whose first octet has
/// TO `base`.
#[inline]
fn range_offset(base: u64, mlen: u64, to: u64, len: u64) -> Result<usize, BoundsFault> {
    let end = to.checked_add(len).ok_or(BoundsFault::ToWrap)?;
    // `base + mlen` cannot wrap: registration refuses such ranges.
    if to < base || end - base > mlen {
        return Err(BoundsFault::OutOfBounds);
    }
    Ok((to - base) as usize)
}

impl fmt::Debug for MrTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MrTable")
            .field("capacity", &self.capacity())
            .field("registered", &self.registered())
            .finish_non_exhaustive()
    }
}

/// Test-only (feature `planted-bounds-defect`): how far past its region's end a tagged
/// placement may reach with the planted defect. The deliberately broken check lets DDP and
/// [`MrGuard::place_at`] accept a segment that ends up to this many octets beyond the
/// region, which only the `fuzzing` module's guarded regions have room for; the `engine_rx`
/// invariants must catch it (issue 15).
#[cfg(feature = "planted-bounds-defect")]
pub const PLANTED_SLACK: u64 = 64;

/// The extra length the planted defect adds to the region DDP checks against (0 in every
/// real build).
#[inline(always)]
const fn planted_slack() -> u64 {
    #[cfg(feature = "planted-bounds-defect")]
    {
        PLANTED_SLACK
    }
    #[cfg(not(feature = "planted-bounds-defect"))]
    {
        0
    }
}

/// The longest copy after which [`MrGuard::copy_out_summed_crc_at`] prefetches the next
/// as many octets (`crc::copy_sum_crc_ahead`, `crc::prefetch_at_once`): a segment of an
/// MTU of 9000 or a little more. The next FPDU of a message sent from registered memory
/// continues where the one being copied ends; copied from the next segment's transmit, a
/// few hundred nanoseconds later, its source is then in L2 rather than in L3 or memory
/// (without it the copy of a 64 KiB Write's FPDUs waited on the source at every segment).
/// Where the prefetches are issued before the copy rather than spread over it, only up to
/// [`crc::PREFETCH_AT_ONCE_MAX`] octets are: a jumbo frame's worth issued at once made
/// write_bw at MTU 9000 slower (2026-11-30), spread over the copy it made it faster
/// (2026-12-05: 13 alternating pairs, median 24.9 against 23.3 Gbit/s, ahead in 12;
/// docs/iwperf.md).
const PREFETCH_MAX: usize = 9 * 1024;

/// A registration held for one placement: the region cannot be deregistered (nor
/// invalidated) until the guard drops. Offers the bounds check and the copies.
///
/// Offsets taken by [`MrGuard::place`], [`MrGuard::copy_out`] and [`MrGuard::atomic`] are
/// byte offsets into the region, as [`MrGuard::bounds`] returns them; each accessor checks
/// its range again (two compares), so no offset can reach outside the region.
///
/// The guard reads the registration's metadata in its slot rather than a copy of it: it
/// cannot change while the guard lives (every writer first drains the slot's guard count
/// to zero, `transition_and_drain`, or owns a slot no lookup can reach), and a lookup that
/// keeps its guard (the receive path's held guard) then writes 16 octets instead of the
/// metadata's 48.
pub struct MrGuard<'a> {
    slot: &'a Slot,
    stag: Stag,
    /// Neither `Send` nor `Sync`, as when the guard held the metadata's raw pointer.
    _not_send: PhantomData<*mut u8>,
}

impl<'a> MrGuard<'a> {
    /// The registration's metadata, in its slot.
    #[inline(always)]
    fn meta(&self) -> &Meta {
        // SAFETY: the guard's increment observed VALID with its key (`lookup_in`), so the
        // write that published `meta` happened before, and no writer touches `meta` until
        // the guard count drains to zero (`transition_and_drain`), which this guard's
        // count keeps from happening while the guard lives; the reference borrows the
        // guard, so it cannot outlive it.
        unsafe { &*self.slot.meta.get() }
    }
    /// The STag this guard was looked up with.
    pub fn stag(&self) -> Stag {
        self.stag
    }

    /// The registration's protection domain.
    pub fn pd(&self) -> PdId {
        self.meta().pd
    }

    /// The registration's rights.
    pub fn access(&self) -> Access {
        self.meta().access
    }

    /// What the STag names.
    pub fn kind(&self) -> StagKind {
        self.meta().kind
    }

    /// The Tagged Offset of the region's first byte.
    pub fn base_to(&self) -> u64 {
        self.meta().base_to
    }

    /// The region's length in bytes.
    pub fn len(&self) -> usize {
        self.meta().len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.meta().len == 0
    }

    /// The registration as `warpcore_proto`'s DDP receiver wants it
    /// ([`TaggedBuffers::tagged_region`](warpcore_proto::ddp::TaggedBuffers::tagged_region)).
    pub fn tagged_region(&self) -> TaggedRegion {
        TaggedRegion {
            base: self.meta().base_to,
            len: self.meta().len as u64 + planted_slack(),
        }
    }

    /// The registration as `warpcore_proto::rdmap::check_remote_access` wants it. That
    /// view has no atomic right (proto asks for remote read and write for an atomic):
    /// look up Atomic Request targets with [`Access::REMOTE_ATOMIC`] as well and report
    /// a refusal with [`LookupFault::rdmap_error`].
    pub fn access_region(&self) -> AccessRegion {
        AccessRegion {
            base: self.meta().base_to,
            len: self.meta().len as u64,
            remote_read: self.meta().access.contains(Access::REMOTE_READ),
            remote_write: self.meta().access.contains(Access::REMOTE_WRITE),
        }
    }

    /// The region's first byte, for code that must hand the memory to something that
    /// takes a pointer; subject to the region's shared-memory rules.
    pub fn as_ptr(&self) -> *mut u8 {
        self.meta().ptr
    }

    /// Checks that `len` bytes at Tagged Offset `to` lie inside the registration and
    /// returns the byte offset of `to` in the region. `to + len` must not wrap the 64-bit
    /// space (checked first: [`BoundsFault::ToWrap`], DDP-7.1-14, RDMAP-7.2-13); then
    /// `to` must not lie below the base and `to + len` not beyond the end
    /// ([`BoundsFault::OutOfBounds`], DDP-7.1-12/13, RDMAP-7.2-11/12). A zero-length range
    /// may sit at either edge, including one past the last byte.
    #[inline]
    pub fn bounds(&self, to: u64, len: usize) -> Result<usize, BoundsFault> {
        range_offset(self.meta().base_to, self.meta().len as u64, to, len as u64)
    }

    /// The planted defect (feature `planted-bounds-defect`, test-only): [`MrGuard::bounds`]
    /// with the end of the region moved [`PLANTED_SLACK`] octets out.
    #[cfg(feature = "planted-bounds-defect")]
    fn planted_bounds(&self, to: u64, len: usize) -> Result<usize, BoundsFault> {
        range_offset(
            self.meta().base_to,
            self.meta().len as u64 + PLANTED_SLACK,
            to,
            len as u64,
        )
    }

    #[inline]
    fn range_ok(&self, offset: usize, len: usize) -> bool {
        offset <= self.meta().len && len <= self.meta().len - offset
    }

    /// Copies received bytes into the region at byte `offset` (from [`MrGuard::bounds`]).
    #[inline]
    pub fn place(&self, offset: usize, data: &[u8]) -> Result<(), BoundsFault> {
        if !self.range_ok(offset, data.len()) {
            return Err(BoundsFault::OutOfBounds);
        }
        // SAFETY: the range is inside the region (checked above), which the guard keeps
        // alive and valid for writes. `data` cannot overlap registered memory that may be
        // written: references into a region exist only under `Region::as_slice`'s
        // contract, which excludes writes.
        unsafe { copy::copy(data.as_ptr(), self.meta().ptr.add(offset), data.len()) };
        Ok(())
    }

    /// The hot path in one call: [`MrGuard::bounds`] then [`MrGuard::place`] for `data`
    /// at Tagged Offset `to`, with a single bounds check.
    #[inline(always)]
    pub fn place_at(&self, to: u64, data: &[u8]) -> Result<(), BoundsFault> {
        #[cfg(not(feature = "planted-bounds-defect"))]
        let offset = self.bounds(to, data.len())?;
        #[cfg(feature = "planted-bounds-defect")]
        let offset = self.planted_bounds(to, data.len())?;
        // SAFETY: `bounds` proved `[offset, offset + data.len())` inside the region, which
        // the guard keeps alive; `data` does not overlap it (see `place`). (Not so with the
        // test-only `planted-bounds-defect`, whose whole point is a write up to
        // `PLANTED_SLACK` octets past the end: into the guard octets that the `fuzzing`
        // module's `GuardedArena` keeps behind every region it registers.)
        unsafe { copy::copy(data.as_ptr(), self.meta().ptr.add(offset), data.len()) };
        Ok(())
    }

    /// Copies bytes of the region at byte `offset` into `dst` (the payload of an outgoing
    /// Read Response, or the gather of a local SGE).
    #[inline]
    pub fn copy_out(&self, offset: usize, dst: &mut [u8]) -> Result<(), BoundsFault> {
        if !self.range_ok(offset, dst.len()) {
            return Err(BoundsFault::OutOfBounds);
        }
        // SAFETY: the range is inside the region, alive and valid for reads; `dst` is a
        // unique borrow and so is not registered memory (no `&mut` into a region exists).
        unsafe { copy::copy(self.meta().ptr.add(offset), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// [`MrGuard::bounds`] then [`MrGuard::copy_out`] for `dst.len()` bytes at `to`.
    #[inline(always)]
    pub fn copy_out_at(&self, to: u64, dst: &mut [u8]) -> Result<(), BoundsFault> {
        let offset = self.bounds(to, dst.len())?;
        // SAFETY: as in `copy_out`, with the range proved by `bounds`.
        unsafe { copy::copy(self.meta().ptr.add(offset), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// [`MrGuard::copy_out_at`], returning the unfolded Internet checksum sum of the octets
    /// copied ([`warpcore_tcp::csum::copy_and_sum_from`]) taken in the same pass: a frame's
    /// payload copied from registered memory is then never read again for its TCP checksum.
    /// The octets summed are those written to `dst`, even if the application writes the
    /// region meanwhile.
    #[inline]
    pub fn copy_out_summed_at(&self, to: u64, dst: &mut [u8]) -> Result<u64, BoundsFault> {
        let offset = self.bounds(to, dst.len())?;
        Ok(warpcore_tcp::csum::copy_and_sum_from(
            dst,
            self.reader(offset, dst.len()),
        ))
    }

    /// [`MrGuard::copy_out_summed_at`] that also extends the CRC32c `crc` over the octets
    /// copied, in the same pass: the payload of an FPDU framed in a frame from registered
    /// memory is read once, for its copy, its Internet checksum and its CRC
    /// ([`crc::copy_sum_crc`] where [`crc::fuse`] says so; short copies, and CPUs without
    /// SSE4.2 and PCLMULQDQ, copy and sum, then take the CRC of the copy). Returns the sum and the CRC of the octets
    /// written to `dst`.
    #[inline]
    pub fn copy_out_summed_crc_at(
        &self,
        to: u64,
        dst: &mut [u8],
        crc: u32,
    ) -> Result<(u64, u32), BoundsFault> {
        let offset = self.bounds(to, dst.len())?;
        // The next FPDU's source, where a message's next segment continues (cut at the
        // region's end), prefetched with a copy of up to `PREFETCH_MAX` octets.
        let next = offset + dst.len();
        let ahead = if dst.len() <= PREFETCH_MAX {
            next.saturating_add(dst.len()).min(self.meta().len) - next.min(self.meta().len)
        } else {
            0
        };
        #[cfg(target_arch = "x86_64")]
        if crc::fuse(dst.len()) {
            // SAFETY: `bounds` proved `[offset, offset + dst.len())` inside the region the
            // guard keeps alive, valid for reads; `dst` is a unique borrow, so not
            // registered memory; the CPU has the features (`fuse` checked). The prefetch
            // reads nothing.
            return Ok(unsafe {
                crc::copy_sum_crc_ahead(
                    self.meta().ptr.add(offset),
                    dst,
                    crc,
                    self.meta().ptr.wrapping_add(next),
                    ahead,
                )
            });
        }
        crc::prefetch_at_once(self.meta().ptr.wrapping_add(next), ahead);
        let sum = warpcore_tcp::csum::copy_and_sum_from(dst, self.reader(offset, dst.len()));
        Ok((sum, crc::crc32c_append(crc, dst)))
    }

    /// Reads for the summing copies: `read(at, out)` copies `out.len()` octets of the
    /// region from `offset + at`; `[offset, offset + len)` must have passed
    /// [`MrGuard::bounds`].
    #[inline(always)]
    fn reader(&self, offset: usize, len: usize) -> impl FnMut(usize, &mut [u8]) + '_ {
        let base = self.meta().ptr;
        move |at, out| {
            // Checked here rather than trusted to the summing loops: the copy below relies
            // on it.
            assert!(at <= len && out.len() <= len - at, "MrGuard: read past dst");
            // SAFETY: `[at, at + out.len())` lies in `[0, len)` (asserted above), so the
            // source range lies in `[offset, offset + len)`, which `bounds` proved inside
            // the region the guard keeps alive; `out` is a local step or part of the
            // caller's `dst`, a unique borrow, so not registered memory.
            unsafe { ptr::copy_nonoverlapping(base.add(offset + at), out.as_mut_ptr(), out.len()) }
        }
    }

    /// The 8-byte word at byte `offset`, for an RFC 7306 atomic. Its address must be
    /// 8-aligned ([`BoundsFault::Misaligned`], EXT-5.2.1-2) and it must lie in the region.
    /// All atomics on registered memory go through `AtomicU64`, so concurrent atomics from
    /// several cores on the same word are exact.
    #[inline]
    pub fn atomic(&self, offset: usize) -> Result<&AtomicU64, BoundsFault> {
        if !self.range_ok(offset, 8) {
            return Err(BoundsFault::OutOfBounds);
        }
        // SAFETY: in bounds (checked above).
        let p = unsafe { self.meta().ptr.add(offset) };
        if !(p as usize).is_multiple_of(8) {
            return Err(BoundsFault::Misaligned);
        }
        // SAFETY: 8-aligned, inside a region the guard keeps alive for the returned
        // lifetime (bounded by `&self`); `AtomicU64` permits shared mutation.
        Ok(unsafe { AtomicU64::from_ptr(p.cast::<u64>()) })
    }
}

impl Drop for MrGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        // Release: every access this guard made to the region and its metadata happens
        // before a deregistration's acquire load that sees the count reach zero.
        self.slot.word.fetch_sub(1, Ordering::Release);
    }
}

impl fmt::Debug for MrGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MrGuard")
            .field("stag", &self.stag)
            .field("pd", &self.meta().pd)
            .field("access", &self.meta().access)
            .field("base_to", &self.meta().base_to)
            .field("len", &self.meta().len)
            .finish()
    }
}

/// Sebastiano Vigna's SplitMix64: enough to derive the table's scrambling constants and
/// initial keys from one seed.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(len: usize) -> Arc<Region> {
        Arc::new(Region::allocate(len, 8).unwrap())
    }

    /// The summed copy copies exactly what `copy_out_at` does, its sum is the Internet
    /// checksum sum of the octets copied, at lengths around the summing step and from odd
    /// and even offsets, and a range past the region is refused with nothing copied.
    #[test]
    fn summed_copy_out_copies_and_sums_within_bounds() {
        let r = region(10_000);
        let pattern: Vec<u8> = (0..10_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        r.write_at(0, &pattern).unwrap();
        let t = MrTable::with_seed(4, 5);
        let s = t.register(r, PdId(1), Access::empty(), 0x1000).unwrap();
        let g = t.lookup_local(s, PdId(1), false).unwrap();
        for off in [0usize, 1, 31, 4000] {
            for len in [0usize, 1, 31, 32, 33, 1460, 5999] {
                let mut a = vec![0xEE; len];
                let sum = g.copy_out_summed_at(0x1000 + off as u64, &mut a).unwrap();
                assert_eq!(a, pattern[off..off + len], "offset {off}, {len} octets");
                assert_eq!(
                    sum,
                    warpcore_tcp::csum::sum(&a),
                    "offset {off}, {len} octets"
                );
            }
        }
        let mut past = vec![0xEE; 2];
        assert_eq!(
            g.copy_out_summed_at(0x1000 + 9_999, &mut past),
            Err(BoundsFault::OutOfBounds)
        );
        assert_eq!(
            g.copy_out_summed_at(0xfff, &mut past),
            Err(BoundsFault::OutOfBounds)
        );
        assert_eq!(past, [0xEE, 0xEE]);
    }

    /// `place_at` and `copy_out_at` (the inline short copies up to `copy::SMALL_MAX`, then
    /// `memcpy`) at every length 0..=256 and a few long ones, at region offsets of every
    /// alignment and at both edges: exactly the range is written (the rest of the region
    /// keeps its fill) or read (guard octets around the destination keep theirs), and a range
    /// one octet past the end is refused with nothing touched.
    #[test]
    fn place_and_copy_out_touch_exactly_their_range() {
        const LEN: usize = 8192;
        const FILL: u8 = 0x5A;
        const GUARD: usize = 40;
        let r = region(LEN);
        let t = MrTable::with_seed(4, 9);
        let s = t
            .register(Arc::clone(&r), PdId(1), Access::LOCAL_WRITE, 0x1000)
            .unwrap();
        let g = t.lookup_local(s, PdId(1), true).unwrap();
        let data: Vec<u8> = (0..LEN as u32).map(|i| (i * 31 + i / 7) as u8).collect();
        let mut mem = vec![0u8; LEN];
        let lens = (0..=256usize).chain([257, 1000, 4096, LEN]);
        for len in lens {
            let offs = [0usize, 1, 3, 7, 8, 13, 16, 33, 64, LEN / 2 + 5]
                .into_iter()
                .filter(|&o| o + len <= LEN)
                .chain([LEN - len]);
            for off in offs {
                let to = 0x1000 + off as u64;
                let src = &data[off % 5..off % 5 + len];
                r.write_at(0, &vec![FILL; LEN]).unwrap();
                g.place_at(to, src).unwrap();
                r.read_at(0, &mut mem).unwrap();
                assert_eq!(&mem[off..off + len], src, "place {len} at {off}");
                assert!(
                    mem[..off].iter().all(|&b| b == FILL),
                    "below: place {len} at {off}"
                );
                assert!(
                    mem[off + len..].iter().all(|&b| b == FILL),
                    "above: place {len} at {off}"
                );
                r.write_at(0, &data).unwrap();
                for d in [0usize, 1, 7] {
                    let mut buf = vec![FILL; len + 2 * GUARD + d];
                    g.copy_out_at(to, &mut buf[GUARD + d..GUARD + d + len])
                        .unwrap();
                    assert_eq!(&buf[GUARD + d..GUARD + d + len], &data[off..off + len]);
                    assert!(
                        buf[..GUARD + d].iter().all(|&b| b == FILL),
                        "copy_out {len} at {off}"
                    );
                    assert!(
                        buf[GUARD + d + len..].iter().all(|&b| b == FILL),
                        "copy_out {len} at {off}"
                    );
                }
            }
            if len > 0 {
                let past = 0x1000 + (LEN - len + 1) as u64;
                r.write_at(0, &vec![FILL; LEN]).unwrap();
                assert_eq!(
                    g.place_at(past, &data[..len]),
                    Err(BoundsFault::OutOfBounds)
                );
                let mut buf = vec![FILL; len];
                assert_eq!(g.copy_out_at(past, &mut buf), Err(BoundsFault::OutOfBounds));
                assert!(buf.iter().all(|&b| b == FILL));
                r.read_at(0, &mut mem).unwrap();
                assert!(mem.iter().all(|&b| b == FILL));
            }
        }
    }

    /// A guard reads its registration in the slot (`MrGuard::meta`), not a copy: that is
    /// sound only because nothing rewrites a slot's metadata while a guard holds it. A fast
    /// registration invalidated and registered again over another range by a second thread
    /// must wait for the guard; until it drops, the guard bounds and copies by the range
    /// it was looked up with, and afterwards a new lookup finds the new one.
    #[test]
    fn a_guard_reads_its_registration_until_it_drops() {
        let t = std::sync::Arc::new(MrTable::with_seed(8, 7));
        let pd = PdId(1);
        let r = region(4096);
        let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 13 + i / 97) as u8).collect();
        r.write_at(0, &pattern).unwrap();
        let mr = t.register(r, pd, Access::LOCAL_WRITE, 0).unwrap();
        let fr = t.alloc_fast_reg(pd).unwrap();
        let (k0, k1) = (fr.key().wrapping_add(1), fr.key().wrapping_add(2));
        let s0 = t
            .fast_register(fr, k0, mr, pd, 0, 1024, 0x10_000, Access::LOCAL_WRITE)
            .unwrap();
        let g = t.lookup_local(s0, pd, false).unwrap();
        let other = std::sync::Arc::clone(&t);
        let rewrite = std::thread::spawn(move || {
            other.invalidate_local(s0, pd).unwrap();
            other
                .fast_register(fr, k1, mr, pd, 2048, 16, 0x20_000, Access::empty())
                .unwrap()
        });
        for _ in 0..20 {
            std::thread::sleep(std::time::Duration::from_millis(1));
            assert!(
                !rewrite.is_finished(),
                "the slot was rewritten under a guard"
            );
            assert_eq!((g.base_to(), g.len()), (0x10_000, 1024));
            assert_eq!(g.bounds(0x10_000 + 1000, 24), Ok(1000));
            assert_eq!(g.bounds(0x10_000 + 1000, 25), Err(BoundsFault::OutOfBounds));
            let mut b = [0u8; 24];
            g.copy_out_at(0x10_000 + 1000, &mut b).unwrap();
            assert_eq!(b, pattern[1000..1024]);
        }
        drop(g);
        let s1 = rewrite.join().unwrap();
        let g = t.lookup_local(s1, pd, false).unwrap();
        assert_eq!((g.base_to(), g.len()), (0x20_000, 16));
        let mut b = [0u8; 16];
        g.copy_out_at(0x20_000, &mut b).unwrap();
        assert_eq!(b, pattern[2048..2064]);
    }

    /// The guard-free check never judges by a mix of two registrations, even when the
    /// registrations that ran while it read brought the STag's key back: Local Invalidate,
    /// fast registration to another key, Local Invalidate, fast registration back to the
    /// first key over another range without the write right, all between its read of the
    /// rights and its read of the range. The rights of the first and the range of the last
    /// would say "out of bounds", which neither registration says; the check must answer as
    /// the registration in place does (no write right).
    #[test]
    fn check_local_is_not_fooled_by_a_key_that_came_back() {
        let t = std::sync::Arc::new(MrTable::with_seed(8, 3));
        let pd = PdId(1);
        let mr = t
            .register(region(4096), pd, Access::LOCAL_WRITE, 0)
            .unwrap();
        let fr = t.alloc_fast_reg(pd).unwrap();
        let (k0, k1) = (fr.key().wrapping_add(1), fr.key().wrapping_add(2));
        let s0 = t
            .fast_register(fr, k0, mr, pd, 0, 1024, 0, Access::LOCAL_WRITE)
            .unwrap();
        assert_eq!(t.check_local(s0, pd, true, 0, 1024), Ok(()));
        let other = std::sync::Arc::clone(&t);
        check_hook::set(move || {
            other.invalidate_local(s0, pd).unwrap();
            let s1 = other
                .fast_register(fr, k1, mr, pd, 0, 16, 0x10000, Access::empty())
                .unwrap();
            other.invalidate_local(s1, pd).unwrap();
            let back = other
                .fast_register(fr, k0, mr, pd, 2048, 16, 2048, Access::empty())
                .unwrap();
            assert_eq!(back, s0);
        });
        let answer = t.check_local(s0, pd, true, 0, 1024);
        assert_eq!(answer, Err(Ok(LookupFault::AccessDenied)));
        assert_eq!(t.check_local(s0, pd, false, 2048, 16), Ok(()));
    }

    /// The guard-free check says what a guarded lookup and its bounds check say, for
    /// regions, windows, fast registrations, invalidated and stale STags.
    #[test]
    fn check_local_agrees_with_the_guarded_lookup() {
        let t = MrTable::with_seed(16, 11);
        let pd = PdId(1);
        let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::MW_BIND;
        let ro = t.register(region(4096), pd, Access::empty(), 0).unwrap();
        let w = t.register(region(4096), pd, rw, 0x10_000).unwrap();
        let other_pd = t.register(region(64), PdId(2), rw, 0).unwrap();
        let gone = t.register(region(64), pd, rw, 0).unwrap();
        t.deregister(gone).unwrap();
        // A window of type `ty` bound to the first 512 octets of `w` (a type 2 window to
        // stream 7).
        let window = |ty: MwType, stream: Option<StreamId>| {
            let mw = t.alloc_mw(pd, ty).unwrap();
            t.bind_mw(
                mw,
                mw.key().wrapping_add(1),
                w,
                pd,
                0x10_000,
                512,
                Access::REMOTE_READ,
                stream,
            )
            .unwrap()
        };
        let mw1 = window(MwType::Type1, None);
        let mw2 = window(MwType::Type2, Some(7));
        let fr = t.alloc_fast_reg(pd).unwrap();
        let fr = t
            .fast_register(
                fr,
                fr.key().wrapping_add(1),
                w,
                pd,
                0x10_100,
                256,
                0x5000,
                Access::LOCAL_WRITE,
            )
            .unwrap();
        let unreg = t.alloc_fast_reg(pd).unwrap();
        let invalidated = t.register(region(64), pd, rw, 0).unwrap();
        t.invalidate(invalidated).unwrap();
        let stale = Stag::new(w.index(), w.key().wrapping_add(1));
        let stags = [
            ro,
            w,
            other_pd,
            gone,
            mw1,
            mw2,
            fr,
            unreg,
            invalidated,
            stale,
            Stag(0),
        ];
        let ranges = [
            (0u64, 0u64),
            (0, 4096),
            (0, 4097),
            (0x10_000, 4096),
            (0x10_000, 4097),
            (0x10_fff, 1),
            (0x5000, 256),
            (0x5001, 256),
            (u64::MAX, 2),
            (0xffff, 1),
        ];
        let mut refused = 0;
        for s in stags {
            for p in [pd, PdId(2)] {
                for write in [false, true] {
                    for (to, len) in ranges {
                        let guarded = t
                            .lookup_local(s, p, write)
                            .map_err(Ok)
                            .and_then(|g| g.bounds(to, len as usize).map(drop).map_err(Err));
                        let unguarded = t.check_local(s, p, write, to, len);
                        assert_eq!(
                            unguarded, guarded,
                            "{s:?} {p:?} write {write} {to:#x}+{len}"
                        );
                        refused += usize::from(unguarded.is_err());
                    }
                }
            }
        }
        // Both outcomes are exercised, and no guard was left behind.
        assert!(refused > 0 && refused < stags.len() * 2 * 2 * ranges.len());
        t.deregister(ro).unwrap();
    }

    #[test]
    fn index_bijection_round_trips() {
        for seed in [0, 1, 0xDEAD_BEEF, u64::MAX] {
            let t = MrTable::with_seed(1000, seed);
            for n in [1u32, 2, 999, 1000] {
                let s = Stag::new(t.stag_index(n), 0);
                let slot = t.slot_of(s).unwrap();
                assert!(ptr::eq(slot, &t.slots[n as usize]));
            }
            assert!(t.slot_of(Stag::new(0, 0)).is_none());
        }
    }

    #[test]
    fn stags_of_one_table_are_distinct_and_nonzero() {
        let t = MrTable::with_seed(64, 7);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..64 {
            let s = t.register(region(8), PdId(1), Access::empty(), 0).unwrap();
            assert_ne!(s.0, 0);
            assert!(seen.insert(s.index()));
        }
        assert_eq!(t.registered(), 64);
        assert_eq!(
            t.register(region(8), PdId(1), Access::empty(), 0),
            Err(MemError::TableFull)
        );
    }

    /// One slot's 256 registrations have 256 keys; a table of one registration cycles
    /// through its spare slots too, so each comes back every `spare + 1` registrations.
    #[test]
    fn key_cycles_through_all_256_values_on_one_slot() {
        let t = MrTable::with_seed(1, 99);
        assert_eq!(t.spare, MIN_SPARE_SLOTS);
        let r = region(1);
        let mut keys = std::collections::HashSet::new();
        let mut index = None;
        for i in 0..256 * (t.spare + 1) {
            let s = t
                .register(Arc::clone(&r), PdId(0), Access::empty(), 0)
                .unwrap();
            let first = *index.get_or_insert(s.index());
            assert_eq!(s.index() == first, i % (t.spare + 1) == 0, "FIFO order");
            if s.index() == first {
                assert!(
                    keys.insert(s.key()),
                    "key repeated within 256 registrations of its slot"
                );
            }
            t.deregister(s).unwrap();
        }
        assert_eq!(keys.len(), 256);
    }

    /// The check-only form answers as the invalidation would, changes nothing and leaves
    /// no count; a state change between the check and the invalidation is caught by the
    /// latter (RDMAP-5.3-11/12, RDMAP-7.2-4/5, RDMAP-8.1.1-8).
    #[test]
    fn check_invalidate_remote_matches_invalidate_remote() {
        let t = MrTable::with_seed(8, 5);
        let pd = PdId(1);
        let open = t
            .register(
                region(64),
                pd,
                Access::REMOTE_INVALIDATE | Access::MW_BIND,
                0,
            )
            .unwrap();
        let shared = t.register(region(64), pd, Access::REMOTE_READ, 0).unwrap();
        assert_eq!(
            t.check_invalidate_remote(shared, pd, 1),
            Err(InvalidateFault::NotInvalidatable)
        );
        assert_eq!(
            t.check_invalidate_remote(open, PdId(2), 1),
            Err(InvalidateFault::NotAssociated)
        );
        let w = t.alloc_mw(pd, MwType::Type2).unwrap();
        let w = t
            .bind_mw(w, w.key() ^ 1, open, pd, 0, 8, Access::REMOTE_READ, Some(3))
            .unwrap();
        // A region with a bound window, a window of another stream.
        assert_eq!(
            t.check_invalidate_remote(open, pd, 3),
            Err(InvalidateFault::NotInvalidatable)
        );
        assert_eq!(
            t.check_invalidate_remote(w, pd, 4),
            Err(InvalidateFault::NotAssociated)
        );
        assert_eq!(t.check_invalidate_remote(w, pd, 3), Ok(()));
        assert!(t.is_valid(w), "a check invalidates nothing");
        let slot = t.slot_of(w).unwrap();
        assert_eq!(slot.word.load(Ordering::Relaxed) & COUNT_MASK, 0);
        // Checked, then invalidated locally before delivery: the invalidation refuses.
        t.invalidate(w).unwrap();
        assert_eq!(t.invalidate_remote(w, pd, 3), Err(InvalidateFault::Invalid));
        assert_eq!(t.check_invalidate_remote(open, pd, 3), Ok(()));
        assert_eq!(t.invalidate_remote(open, pd, 3), Ok(()));
        assert_eq!(
            t.check_invalidate_remote(open, pd, 3),
            Err(InvalidateFault::Invalid)
        );
    }

    /// A Send with Invalidate checked for stream 3 must not invalidate a type 2 window that,
    /// between the check and the invalidation, was rebound to stream 4 and got its key back
    /// (two binds by the other queue pair, whose keys are the application's choice): the
    /// window is not associated with stream 3 any more (DDP-8.2-2, RDMAP-8.1.1-3,
    /// RDMAP-5.3-11/12). The key alone does not say the registration is the one checked,
    /// as `check_local_is_not_fooled_by_a_key_that_came_back` shows for the local check.
    #[test]
    fn invalidate_remote_rechecks_the_stream_when_the_key_came_back() {
        let t = std::sync::Arc::new(MrTable::with_seed(8, 5));
        let pd = PdId(1);
        let mr = t
            .register(region(64), pd, Access::LOCAL_WRITE | Access::MW_BIND, 0)
            .unwrap();
        let w = t.alloc_mw(pd, MwType::Type2).unwrap();
        let k = w.key() ^ 1;
        let s = t
            .bind_mw(w, k, mr, pd, 0, 8, Access::REMOTE_READ, Some(3))
            .unwrap();
        let other = std::sync::Arc::clone(&t);
        check_hook::set(move || {
            other
                .bind_mw(w, k ^ 2, mr, pd, 0, 8, Access::REMOTE_READ, Some(4))
                .unwrap();
            let back = other
                .bind_mw(w, k, mr, pd, 0, 8, Access::REMOTE_READ, Some(4))
                .unwrap();
            assert_eq!(back, s, "the key came back, bound to stream 4");
        });
        assert_eq!(
            t.invalidate_remote(s, pd, 3),
            Err(InvalidateFault::NotAssociated)
        );
        assert!(t.is_valid(s), "stream 4's window stays valid");
        assert!(t.lookup_remote(s, pd, 4, Access::REMOTE_READ).is_ok());
    }

    #[test]
    fn failed_lookups_leave_no_count() {
        let t = MrTable::with_seed(2, 3);
        let s = t
            .register(region(8), PdId(1), Access::REMOTE_READ, 0)
            .unwrap();
        assert_eq!(
            t.lookup(s, PdId(2), Access::empty()).unwrap_err(),
            LookupFault::WrongPd
        );
        assert_eq!(
            t.lookup(s, PdId(1), Access::REMOTE_WRITE).unwrap_err(),
            LookupFault::AccessDenied
        );
        let slot = t.slot_of(s).unwrap();
        assert_eq!(slot.word.load(Ordering::Relaxed) & COUNT_MASK, 0);
        let g = t.lookup(s, PdId(1), Access::REMOTE_READ).unwrap();
        assert_eq!(slot.word.load(Ordering::Relaxed) & COUNT_MASK, 1);
        drop(g);
        assert_eq!(slot.word.load(Ordering::Relaxed) & COUNT_MASK, 0);
    }
}
