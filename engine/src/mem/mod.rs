//! Registered memory, the STag table and placement into registered memory.
//!
//! This module is one of the two places in the engine allowed to use `unsafe` (GUIDE rule 4):
//! it turns an STag, a protection domain and a Tagged Offset from the network into a copy
//! into (or out of) memory the application registered, and it guarantees that the copy
//! never outlives the memory and never leaves the registered range.
//!
//! # Pieces
//! - [`Region`]: registered memory as raw shared memory, a pointer and a length
//!   (GUIDE rule 5). Engine-allocated ([`Region::allocate`]: page-aligned, zeroed, 2 MiB
//!   hugepages when the machine has them), an application `Box<[u8]>` handed over
//!   ([`Region::from_boxed`]) or raw application memory ([`Region::from_raw`], `unsafe`,
//!   with a written contract). A `Region` never hands out `&mut [u8]`: the application reads
//!   and writes it with copies ([`Region::read_at`], [`Region::write_at`]), atomics
//!   ([`Region::atomic_u64_at`]) or the `unsafe` [`Region::as_slice`].
//! - [`MrTable`]: the fixed-capacity table of memory regions, shared by `Arc` between the
//!   application threads (which [`register`](MrTable::register) and
//!   [`deregister`](MrTable::deregister)) and the engine cores (which
//!   [`lookup`](MrTable::lookup) once per received segment). Lookups take no lock and
//!   allocate nothing.
//! - [`MrGuard`]: the result of a successful lookup; it keeps the region mapped for the
//!   duration of one placement and does the bounds check ([`MrGuard::bounds`]) and the copy
//!   ([`MrGuard::place`], [`MrGuard::copy_out`], [`MrGuard::atomic`]).
//! - [`crc::crc32c_append`]: the CRC32c of the engine's framers and deframers, the
//!   `crc32c` crate's results from a one-stream SSE4.2 loop for short FPDUs and three lanes
//!   combined with PCLMULQDQ for longer ones, or 512-bit folding where the CPU has AVX-512
//!   and VPCLMULQDQ; the transmit copy with its sum and CRC in one pass
//!   ([`crc::copy_sum_crc`]) folds 256 bits at a time where the CPU has AVX2 and VPCLMULQDQ
//!   but not AVX-512 (`docs/decisions/0005-short-crc32c.md`).
//! - [`Stag`], [`PdId`], [`Access`]: the handles and rights; [`MemError`] (control path),
//!   [`LookupFault`] and [`BoundsFault`] (data path, small `Copy` enums mapping to the
//!   protocol errors of `warpcore-proto`).
//!
//! # The hot path
//! One placement of one DDP segment is one [`MrTable::lookup`] (an index computation, one
//! load and one atomic increment on the slot's state word, a key/state compare, the PD and
//! access compares), one bounds check and one `copy_nonoverlapping`, then one atomic
//! decrement when the guard drops. [`MrGuard::place_at`] does the bounds check and the
//! copy in one call. Zero-length tagged segments must not be looked up at all: the receiver
//! validates neither their STag nor their TO (DDP-5.2-11, RDMAP-5.2.1-13).
//!
//! # STags
//! An STag is a 24-bit index and an 8-bit key (GUIDE rule 6). The index names a slot of
//! the table through a bijection of the 24-bit space chosen per table, and each slot starts
//! from a pseudo-random key that advances by an odd per-table step at every
//! re-registration, so that STags are spread over the whole range and are not trivially
//! predictable (RDMAP-8.1.1-9, RDMAP-8.1.1-10), and so that a stale STag cannot match a
//! reused slot until the slot has been registered 256 more times. Freed slots go to the
//! back of a FIFO, so a slot is reused only after every other free slot was, and the table
//! keeps spare slots beyond its capacity ([`MIN_SPARE_SLOTS`] at least, index space
//! permitting) that the FIFO never runs down to: those 256 re-registrations of a slot are
//! at least 256 times the spares apart in registrations of the table, however full the
//! application keeps it ([`MrTable::new`]). Index 0 is never handed out, so the STag value
//! 0 is never valid.
//!
//! # Concurrency protocol
//! Each slot holds a 64-bit state word and, beside it, the registration's metadata
//! (pointer, length, base TO, PD, access rights) and the `Arc<Region>` that keeps the
//! memory alive. The word packs:
//!
//! ```text
//!   63      48 47     40 39     32 31                      0
//!  +----------+---------+---------+-------------------------+
//!  |    0     |  state  |   key   |   in-flight guard count |
//!  +----------+---------+---------+-------------------------+
//! ```
//!
//! with the states `FREE`, `VALID`, `INVALID` (allocated or registered but invalidated: a
//! memory window before its bind, a fast-registration STag before its registration, an
//! invalidated STag), `DRAINING` (deregistration waiting for the guards to drop) and
//! `BUSY` (one thread binding a window, fast-registering or invalidating: like `DRAINING`,
//! it waits for the guards to drop and then alone writes the metadata and the `Arc<Region>`
//! before publishing `VALID` or `INVALID` with `Release`). Only the thread that owns a
//! registration operation changes the state and key bits; lookups and guards only change
//! the count. Beside the word, a slot keeps the kind and PD of its allocation in an atomic
//! (written while owned) for typed refusals without a guard, and the number of windows
//! bound to it and fast registrations over its memory (a region with any is neither
//! deregistered nor invalidated; a bind or fast registration increments it while holding
//! a guard on the region, so a deregistration that drained the region's guards sees
//! every one that succeeded, and restores the previous state if one raced in). An owner
//! that cannot wait for them to go ([`MrTable::deregister_or_defer`], a handle being
//! dropped) invalidates the region's own STag and sets the count's top bit: the unbinding
//! or invalidation that brings the count to zero then takes the `INVALID` slot (no guard
//! can hold it) and frees it.
//!
//! - **Lookup** loads the word (`Relaxed`; a cheap early rejection of stale or garbage
//!   STags that touches no count), then `fetch_add(1, Acquire)`s the count and checks the
//!   state and key bits of the value the increment returned. The increment and the check
//!   are one atomic step: if they say `VALID` with the STag's key, the slot cannot leave
//!   `VALID` before this guard drops, because every leaving transition waits for the count
//!   to reach zero. If they say anything else, the lookup gives its increment back
//!   (`fetch_sub(1, Release)`) and fails without reading the metadata. Only after a
//!   successful check does it read the metadata (plain reads, copied into the guard).
//! - **Register** pops a free slot (a mutex-protected FIFO; registration is control path),
//!   writes the metadata and the `Arc<Region>` with plain writes, then publishes
//!   `VALID | new key` with a `Release` compare-exchange loop that keeps whatever count
//!   concurrent failing lookups left there. A lookup whose `Acquire` increment reads the
//!   published value (or any later value: every later change of the word is a
//!   read-modify-write, which continues the release sequence) therefore sees the metadata.
//! - **Deregister** (and **invalidate**, **bind**, **fast registration**) compare-exchange
//!   `VALID | key` (or `INVALID | key`) to `DRAINING | key` (or `BUSY | key`), which stops
//!   new lookups from succeeding (a deregistration that finds `BUSY | key`, an
//!   invalidation under way, waits for it to end), then
//!   wait (spin, then yield) until an `Acquire` load sees a count of zero. Every guard
//!   decrements with `Release`, so every placement into the region, and every read of the
//!   metadata by a guard, happens before that load. Deregistration then takes the
//!   `Arc<Region>` out of the slot, sets the state to `FREE` (keeping the key, which the
//!   next registration advances) and pushes the slot on the free list; the mutex orders
//!   this before the next registration's metadata writes. The `Arc` is dropped last, so
//!   the memory is unmapped (if this was the last reference) only after no guard can
//!   touch it: no use after free.
//! - Between `DRAINING` and the next `VALID`, lookups that raced past the early rejection
//!   may still increment and decrement the count; they never read the metadata, and the
//!   registration's compare-exchange preserves their counts.
//! - **Check** ([`MrTable::check_local`], the post-time check of a work request's SGEs)
//!   takes no guard. It is a seqlock's reader over atomic copies of the metadata it needs
//!   (kind and PD, rights, base TO, length): every writer of `meta` (the slot's owner, so
//!   one at a time) turns the slot's copy sequence odd, stores the copies after a
//!   `Release` fence, and turns the sequence even with `Release`. The check loads the
//!   sequence (`Acquire`) and the word, the copies, then after an `Acquire` fence the
//!   sequence and the word again. It refuses when the word does not show `VALID` with the
//!   STag's key, and answers from the copies only if the sequence was even and unchanged
//!   and the word still shows them; otherwise it asks the guarded lookup. The word alone
//!   would not do: a fast registration's key is the application's choice, so registrations
//!   between the two loads can bring the same key back over another range. It protects
//!   nothing: the engine looks the key up again, guarded, before it touches the memory.
//!
//! A guard must not be held across a call to [`MrTable::deregister`] or
//! [`MrTable::invalidate`] of the same STag on the same thread: that call would wait for
//! itself. The engine's transmit pass keeps the guard of the region it last gathered from
//! until the pass ends (a run of small messages from one region pays one guard), and lets
//! go of it before a Local Invalidate, bind or fast registration at the sending position
//! runs; its receive pass keeps the guard of the region it last placed into, and lets go
//! of it before it handles a Send with Invalidate. Leaking a guard (`mem::forget`) makes
//! deregistration of that STag wait forever; it is never unsound. The count has 32 bits;
//! like `Arc`, a lookup aborts the process rather than let it overflow into the key.
//!
//! # Memory shared with the network
//! The engine writes received bytes into registered memory while the application may read
//! it, and a peer may send an RDMA Write at any time. Registered memory is therefore
//! modelled as memory shared with a device (as DMA buffers are): it is only ever accessed
//! through raw pointers, by copies and atomics, never through a Rust reference the compiler
//! could assume unaliased or unchanging (except under the contract of
//! [`Region::as_slice`]). Applications order their accesses after the engine's through
//! completions, which the completion rings publish with release/acquire. An application
//! that reads bytes a peer is writing at the same moment (a protocol error on its side,
//! or a hostile peer) reads torn bytes; the engine never lets such a race reach a Rust
//! reference, a length or a pointer. The table's own metadata is never shared that way.
//!
//! # Checking
//! The tests in `engine/tests/mem_*.rs` and `engine/tests/ring_*.rs` also run under Miri
//! (loop counts scaled down; `cargo +nightly miri test -p warpcore-engine`, optionally with
//! `MIRIFLAGS=-Zmiri-many-seeds=0..12` for the threaded ones), AddressSanitizer
//! (`RUSTFLAGS=-Zsanitizer=address cargo +nightly test --target x86_64-unknown-linux-gnu`)
//! and ThreadSanitizer (`-Zsanitizer=thread` with `-Zbuild-std`). Run them after any change
//! to an ordering or an `unsafe` block here. Miri cannot run the vector paths of [`crc`]
//! (AVX-512, VPCLMULQDQ): their bounds are checked natively instead, by
//! `crc::tests::no_path_touches_an_octet_past_its_buffers`, which places every input and
//! output against an inaccessible page, so that a load or store past either end faults.
#![allow(unsafe_code)]

mod copy;
pub mod crc;
#[cfg(feature = "fuzzing")]
mod guarded;
mod region;
mod table;

use core::fmt;
use core::ops::{BitAnd, BitOr, BitOrAssign};

use warpcore_proto::ddp::TaggedFault;
use warpcore_proto::error::{DdpError, RdmapError};
use warpcore_proto::rdmap::StagFault;

#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub use guarded::GuardedArena;
pub use region::Region;
#[cfg(feature = "planted-bounds-defect")]
#[doc(hidden)]
pub use table::PLANTED_SLACK;
pub use table::{MrGuard, MrTable, MAX_CAPACITY, MIN_SPARE_SLOTS};

/// Identifies the stream (queue pair) a type 2 memory window is bound to: an opaque,
/// nonzero value the engine derives from the queue pair's handle, unique among live queue
/// pairs (0 means "no stream": a window bound with it would serve every stream, so
/// [`MrTable::bind_mw`] refuses 0 for a type 2 window).
pub type StreamId = u64;

/// Access rights of a memory registration (the `IBV_ACCESS_*` flags of rdma-core's
/// `verbs.h` that iWARP uses). Local read access is always granted.
///
/// The rights a registration holds are fixed when it is registered (RDMAP-8.1.1-6);
/// changing them means deregistering and registering again, which also changes the STag.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Access(u8);

impl Access {
    /// The engine may write into the region on behalf of local work requests (the sink
    /// of a Receive or of an RDMA Read Response). Required by `REMOTE_WRITE` and
    /// `REMOTE_ATOMIC`, as `ibv_reg_mr` requires.
    pub const LOCAL_WRITE: Access = Access(1 << 0);
    /// A peer may read the region with RDMA Read Requests (RDMAP-8.1.1-6).
    pub const REMOTE_READ: Access = Access(1 << 1);
    /// A peer may write the region with RDMA Writes (RDMAP-8.1.1-6).
    pub const REMOTE_WRITE: Access = Access(1 << 2);
    /// A peer may run atomic operations on the region (RFC 7306).
    pub const REMOTE_ATOMIC: Access = Access(1 << 3);
    /// Memory windows may be bound to the region ([`MrTable::bind_mw`]).
    pub const MW_BIND: Access = Access(1 << 4);
    /// A peer may invalidate the STag with a Send with Invalidate (RDMAP-5.3-11/12). An
    /// ordinary registration is usable by every stream of its protection domain, and a
    /// peer must not invalidate an STag shared by several streams (RDMAP-8.1.1-8): grant
    /// this only to a registration one stream uses. Fast-registered STags and type 2
    /// windows bound to the stream are remotely invalidatable without it.
    pub const REMOTE_INVALIDATE: Access = Access(1 << 5);

    /// The rights a memory window can grant (the remote ones).
    pub const WINDOW_RIGHTS: Access =
        Access(Self::REMOTE_READ.0 | Self::REMOTE_WRITE.0 | Self::REMOTE_ATOMIC.0);

    const ALL_BITS: u8 = 0x3F;

    /// No rights beyond local read.
    pub const fn empty() -> Access {
        Access(0)
    }

    /// Every right.
    pub const fn all() -> Access {
        Access(Self::ALL_BITS)
    }

    /// The raw bits.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// The rights named by `bits`, or `None` if `bits` has an undefined bit set.
    pub const fn from_bits(bits: u8) -> Option<Access> {
        if bits & !Self::ALL_BITS == 0 {
            Some(Access(bits))
        } else {
            None
        }
    }

    /// Whether every right in `other` is also in `self`.
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether no right is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// `self` and `other` together.
    pub const fn union(self, other: Access) -> Access {
        Access(self.0 | other.0)
    }

    /// Whether this set is valid for a registration: remote write and remote atomic access
    /// need local write access too (`ibv_reg_mr(3)` refuses them otherwise).
    pub const fn is_valid_for_registration(self) -> bool {
        let needs_local_write = Self::REMOTE_WRITE.0 | Self::REMOTE_ATOMIC.0;
        self.0 & needs_local_write == 0 || self.0 & Self::LOCAL_WRITE.0 != 0
    }
}

impl BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        self.union(rhs)
    }
}

impl BitOrAssign for Access {
    fn bitor_assign(&mut self, rhs: Access) {
        *self = self.union(rhs);
    }
}

impl BitAnd for Access {
    type Output = Access;
    fn bitand(self, rhs: Access) -> Access {
        Access(self.0 & rhs.0)
    }
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [(Access, &str); 6] = [
            (Access::LOCAL_WRITE, "LOCAL_WRITE"),
            (Access::REMOTE_READ, "REMOTE_READ"),
            (Access::REMOTE_WRITE, "REMOTE_WRITE"),
            (Access::REMOTE_ATOMIC, "REMOTE_ATOMIC"),
            (Access::MW_BIND, "MW_BIND"),
            (Access::REMOTE_INVALIDATE, "REMOTE_INVALIDATE"),
        ];
        f.write_str("Access(")?;
        let mut first = true;
        for (flag, name) in NAMES {
            if self.contains(flag) {
                if !first {
                    f.write_str(" | ")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        if first {
            f.write_str("empty")?;
        }
        f.write_str(")")
    }
}

/// The two memory window types of the verbs (as `IBV_MW_TYPE_1/2`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MwType {
    /// Bound to the protection domain: any stream of the PD may use it; never remotely
    /// invalidatable, since several streams share it (RDMAP-8.1.1-8).
    Type1,
    /// Bound to the queue pair whose Bind work request bound it: only that stream may use
    /// it (DDP-8.2-2, DDP-8.3-3), and its peer may invalidate it (RDMAP-5.3-11/12).
    Type2,
}

/// What an STag names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StagKind {
    /// An ordinary registration ([`MrTable::register`]).
    Mr,
    /// A fast-registration STag ([`MrTable::alloc_fast_reg`]).
    FastReg,
    /// A memory window ([`MrTable::alloc_mw`]).
    Window(MwType),
}

/// A protection domain. A stream may only use STags of its own protection domain
/// (DDP-8.2-1, DDP-8.3.1-2, RDMAP-8.1.1-2).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PdId(pub u32);

/// A steering tag: a 24-bit index naming a slot of the [`MrTable`] and an 8-bit key that
/// must match the key of the slot's current registration (GUIDE rule 6). The same value is
/// used as the local key (lkey) of scatter/gather entries and as the remote key on the wire.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Stag(pub u32);

impl Stag {
    /// The STag with `index` (only its low 24 bits are used) and `key`.
    pub const fn new(index: u32, key: u8) -> Stag {
        Stag((index & 0x00FF_FFFF) << 8 | key as u32)
    }

    /// The 24-bit index.
    pub const fn index(self) -> u32 {
        self.0 >> 8
    }

    /// The 8-bit key.
    pub const fn key(self) -> u8 {
        self.0 as u8
    }
}

impl fmt::Debug for Stag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Stag({:#010x})", self.0)
    }
}

/// What [`MrTable::deregister_or_defer`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Deregistration {
    /// The registration ended: its slot is free and the table holds no reference to the
    /// memory.
    Done,
    /// Windows are still bound to the region: its STag no longer works, and the
    /// registration ends when the last of them is unbound.
    Deferred,
}

/// Errors of the control path: allocating regions, registering and deregistering them, and
/// the application's own accessors of a [`Region`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum MemError {
    /// Every slot of the table holds a registration.
    #[error("memory region table is full")]
    TableFull,
    /// The STag names no registration (never registered, already deregistered, stale key,
    /// or deregistration already under way on another thread).
    #[error("STag names no memory registration")]
    InvalidStag,
    /// The access rights cannot be registered (remote write or atomic without local write).
    #[error("remote write or atomic access requires local write access")]
    InvalidAccess,
    /// The registered TO range `[offset_base, offset_base + len)` does not fit below 2^64.
    #[error("registered tagged offset range wraps the 64-bit space")]
    ToWrap,
    /// An accessor's range is not inside the region.
    #[error("range is outside the region")]
    OutOfBounds,
    /// An atomic accessor's address is not 8-aligned.
    #[error("atomic access is not 8-byte aligned")]
    Misaligned,
    /// The requested alignment is not a power of two, or the length is too large.
    #[error("alignment is not a power of two or length is too large")]
    InvalidLayout,
    /// The operating system or the allocator refused the memory.
    #[error("memory allocation failed")]
    AllocFailed,
    /// The STag is not of the kind the operation needs (binding something that is not a
    /// memory window, fast-registering something that is not a fast-registration STag,
    /// windows or fast registrations over something that is not an ordinary region).
    #[error("STag is not of the kind the operation needs")]
    WrongKind,
    /// The STag belongs to another protection domain than the one asking.
    #[error("STag belongs to another protection domain")]
    WrongPd,
    /// Memory windows are bound to the region, or valid fast registrations use its
    /// memory: invalidate or deallocate them first.
    #[error("memory windows or fast registrations use the region")]
    Busy,
    /// The new key of a bind or fast registration equals the current one (a stale STag
    /// would match again).
    #[error("new STag key equals the current key")]
    SameKey,
    /// A fast registration needs an invalid (allocated or invalidated) STag.
    #[error("fast registration needs an invalid STag")]
    StillValid,
    /// The region lacks [`Access::MW_BIND`].
    #[error("region does not allow memory window binding")]
    BindNotAllowed,
    /// The rights asked for a window or a fast registration are not allowed: a window
    /// grants only remote rights, and write or atomic rights need a region with local write.
    #[error("rights not allowed for this window or registration")]
    WindowAccess,
    /// A type 2 window is bound by a queue pair's Bind work request, never without one.
    #[error("a type 2 window must be bound through a queue pair")]
    NoQueuePair,
}

/// Why a lookup refused an STag, in the order the checks run (siw's `siw_check_mem` order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum LookupFault {
    /// No valid registration has this STag: unknown index, stale key, invalidated, or being
    /// deregistered (DDP-7.1-10).
    #[error("invalid STag")]
    InvalidStag,
    /// The registration belongs to another protection domain (DDP-8.2-1, RDMAP-8.1.1-2).
    #[error("STag belongs to another protection domain")]
    WrongPd,
    /// The registration does not grant the access asked for (DDP-7.1-11, RDMAP-8.1.1-6).
    #[error("STag does not grant the access")]
    AccessDenied,
    /// A type 2 memory window bound to another stream (queue pair): "STag not associated
    /// with this stream" (DDP-8.2-2, DDP-8.3.1-3, RDMAP-8.1.1-3).
    #[error("memory window is bound to another queue pair")]
    WrongQp,
}

impl LookupFault {
    /// The DDP tagged-buffer error for a fault while placing a tagged segment (RDMA Write,
    /// Read Response). DDP has no code for missing access rights; like siw we report
    /// "invalid STag" for it (WIRE-FORMATS §3.5).
    pub const fn ddp_error(self) -> DdpError {
        match self {
            LookupFault::InvalidStag | LookupFault::AccessDenied => DdpError::TaggedInvalidStag,
            LookupFault::WrongPd | LookupFault::WrongQp => DdpError::TaggedStagNotAssociated,
        }
    }

    /// The RDMAP remote protection error for a fault on the source of a Read Request or the
    /// target of an Atomic Request (RDMAP-7.2-9/10, WIRE-FORMATS §4.5).
    pub const fn rdmap_error(self) -> RdmapError {
        match self {
            LookupFault::InvalidStag => RdmapError::InvalidStag,
            LookupFault::WrongPd | LookupFault::WrongQp => RdmapError::StagNotAssociated,
            LookupFault::AccessDenied => RdmapError::AccessRights,
        }
    }
}

impl LookupFault {
    /// The fault as `warpcore_proto`'s DDP receiver takes it from
    /// [`TaggedBuffers`](warpcore_proto::ddp::TaggedBuffers) (missing rights are "invalid
    /// STag", as in [`LookupFault::ddp_error`]).
    pub const fn tagged_fault(self) -> TaggedFault {
        match self {
            LookupFault::InvalidStag | LookupFault::AccessDenied => TaggedFault::InvalidStag,
            LookupFault::WrongPd | LookupFault::WrongQp => TaggedFault::NotAssociated,
        }
    }

    /// The fault as `warpcore_proto::rdmap::check_remote_access` takes it. That function
    /// checks the rights itself from an `AccessRegion` ([`MrGuard::access_region`]), so
    /// look up with [`Access::empty()`] for it; `AccessDenied` maps to `Invalid` should it
    /// occur anyway.
    pub const fn stag_fault(self) -> StagFault {
        match self {
            LookupFault::InvalidStag | LookupFault::AccessDenied => StagFault::Invalid,
            LookupFault::WrongPd | LookupFault::WrongQp => StagFault::NotAssociated,
        }
    }
}

/// Why a range is refused by [`MrGuard::bounds`] or the guard's accessors.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum BoundsFault {
    /// The 64-bit sum of TO and length wraps (DDP-7.1-14, RDMAP-7.2-13). Checked first,
    /// because the end of a wrapping range cannot be compared.
    #[error("tagged offset plus length wraps")]
    ToWrap,
    /// The range starts below the registration's base TO or ends beyond its last octet
    /// (DDP-7.1-12/13, RDMAP-7.2-11/12, DDP-8.3.1-4).
    #[error("range is outside the registered region")]
    OutOfBounds,
    /// An atomic target is not 8-aligned in memory (EXT-5.2.1-2). Only
    /// [`MrGuard::atomic`] reports it.
    #[error("atomic target is not 8-byte aligned")]
    Misaligned,
}

impl BoundsFault {
    /// The DDP tagged-buffer error for this fault.
    pub const fn ddp_error(self) -> DdpError {
        match self {
            BoundsFault::ToWrap => DdpError::TaggedToWrap,
            BoundsFault::OutOfBounds | BoundsFault::Misaligned => DdpError::TaggedBaseOrBounds,
        }
    }

    /// The RDMAP error for this fault; a misaligned atomic target is a catastrophic stream
    /// error, as `warpcore_proto::rdmap::atomic::check_alignment` decides.
    pub const fn rdmap_error(self) -> RdmapError {
        match self {
            BoundsFault::ToWrap => RdmapError::ToWrap,
            BoundsFault::OutOfBounds => RdmapError::BaseOrBounds,
            BoundsFault::Misaligned => RdmapError::CatastrophicStream,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stag_packs_index_and_key() {
        let s = Stag::new(0x00AB_CDEF, 0x42);
        assert_eq!(s.0, 0xABCD_EF42);
        assert_eq!(s.index(), 0x00AB_CDEF);
        assert_eq!(s.key(), 0x42);
        // Only 24 bits of index survive.
        assert_eq!(Stag::new(0xFF00_0001, 7).index(), 1);
    }

    #[test]
    fn access_flags_compose() {
        let a = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
        assert!(a.contains(Access::REMOTE_WRITE));
        assert!(!a.contains(Access::REMOTE_READ));
        assert!(a.contains(Access::empty()));
        assert!(a.is_valid_for_registration());
        assert!(!Access::REMOTE_WRITE.is_valid_for_registration());
        assert!(!Access::REMOTE_ATOMIC.is_valid_for_registration());
        assert!(Access::REMOTE_READ.is_valid_for_registration());
        assert_eq!(Access::from_bits(0x40), None);
        assert_eq!(Access::from_bits(Access::all().bits()), Some(Access::all()));
        assert_eq!(
            format!("{:?}", Access::REMOTE_READ | Access::MW_BIND),
            "Access(REMOTE_READ | MW_BIND)"
        );
        assert_eq!(format!("{:?}", Access::empty()), "Access(empty)");
    }

    #[test]
    fn faults_map_to_protocol_errors() {
        assert_eq!(
            LookupFault::WrongPd.ddp_error(),
            DdpError::TaggedStagNotAssociated
        );
        assert_eq!(
            LookupFault::AccessDenied.rdmap_error(),
            RdmapError::AccessRights
        );
        assert_eq!(BoundsFault::ToWrap.ddp_error(), DdpError::TaggedToWrap);
        assert_eq!(
            BoundsFault::OutOfBounds.rdmap_error(),
            RdmapError::BaseOrBounds
        );
    }
}
