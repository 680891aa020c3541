//! [`Region`]: registered memory as raw shared memory (GUIDE rule 5).
#![allow(unsafe_code)]

use core::fmt;
use core::ptr::{self, NonNull};
use core::sync::atomic::AtomicU64;
use std::alloc::{self, Layout};

use super::MemError;

/// The size of the hugepages [`Region::allocate`] tries: 2 MiB, the x86-64 and arm64
/// default.
pub(crate) const HUGE_PAGE_LEN: usize = 2 << 20;

/// Who owns the memory behind a [`Region`], and so how it is given back.
enum Backing {
    /// A zero-length region: no memory, nothing to free.
    Empty,
    /// An anonymous mapping of `map_len` bytes (the length rounded up to pages).
    #[cfg(target_os = "linux")]
    Mmap { map_len: usize, huge: bool },
    /// A zeroed heap allocation (alignments above the page size, or non-Linux systems).
    Heap { layout: Layout },
    /// An application `Box<[u8]>`, turned into a raw pointer; rebuilt on drop.
    Boxed,
    /// Application memory the region does not own.
    Raw,
}

/// Memory registered (or to be registered) with the engine: a pointer and a length that
/// the engine may write into at any moment a registration allows it, and that the
/// application accesses through copies and atomics (see the module documentation,
/// "Memory shared with the network").
///
/// A `Region` is shared by `Arc` between the application and the [`MrTable`]; the memory
/// lives until the last `Arc` is dropped, which deregistration waits for placement to
/// finish before doing.
///
/// [`MrTable`]: super::MrTable
pub struct Region {
    ptr: NonNull<u8>,
    len: usize,
    backing: Backing,
}

// SAFETY: a `Region` is a pointer and a length to memory it owns (or that `from_raw`'s
// caller promised stays valid for its life). The memory is only accessed through raw
// pointers (copies and atomics), never through references derived from the `Region`
// except under `as_slice`'s contract, so moving the `Region` to another thread or sharing
// it between threads creates no reference aliasing. Concurrent copies to the same bytes
// are the shared-device-memory model described in the module documentation.
unsafe impl Send for Region {}
// SAFETY: see `Send` above; every `&self` method either reads the immutable pointer and
// length or accesses the memory through raw pointers and atomics.
unsafe impl Sync for Region {}

impl Region {
    /// Allocates `len` zeroed bytes aligned to at least `align` and to the page size.
    ///
    /// On Linux, a region of at least 2 MiB with `align` at most 2 MiB is first tried as
    /// an anonymous mapping of 2 MiB hugepages (`MAP_HUGETLB` with `MAP_HUGE_2MB`: the
    /// 2 MiB pool that `scripts/hugepages.sh` reserves, whatever the system's default
    /// hugepage size; length rounded up to a multiple of 2 MiB), which spares the TLB on
    /// large transfers; if the machine has no free 2 MiB hugepages, it falls back to
    /// ordinary pages (mapped at a 2 MiB boundary, with `MADV_HUGEPAGE`, so transparent
    /// hugepages may back all of it). Regions whose alignment exceeds the page size come
    /// from the global allocator. Every page is touched
    /// (pre-faulted) here where the kernel supports it, so that placement takes no page
    /// fault. [`Region::is_huge`] says which way it went.
    ///
    /// A zero-length region allocates nothing. A length above [`Region::max_allocate_len`]
    /// is refused with [`MemError::AllocFailed`] before any mapping is tried: the
    /// pre-faulting would otherwise meet the out-of-memory killer where the kernel
    /// overcommits (`vm.overcommit_memory=1`), not an error.
    pub fn allocate(len: usize, align: usize) -> Result<Region, MemError> {
        if !align.is_power_of_two() || len > isize::MAX as usize {
            return Err(MemError::InvalidLayout);
        }
        if len > Self::max_allocate_len() {
            return Err(MemError::AllocFailed);
        }
        if len == 0 {
            return Ok(Region {
                ptr: NonNull::dangling(),
                len: 0,
                backing: Backing::Empty,
            });
        }
        let page = page_size();
        #[cfg(target_os = "linux")]
        {
            // Miri interprets ordinary anonymous mappings but not hugetlb ones.
            if len >= HUGE_PAGE_LEN && align <= HUGE_PAGE_LEN && !cfg!(miri) {
                if let Some(r) = Self::mmap(len, HUGE_PAGE_LEN, true) {
                    return Ok(r);
                }
            }
            if align <= page {
                if let Some(r) = Self::mmap(len, page, false) {
                    return Ok(r);
                }
                return Err(MemError::AllocFailed);
            }
        }
        let layout =
            Layout::from_size_align(len, align.max(page)).map_err(|_| MemError::InvalidLayout)?;
        // SAFETY: `layout` has a non-zero size (len > 0 was checked above).
        let p = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(p).ok_or(MemError::AllocFailed)?;
        Ok(Region {
            ptr,
            len,
            backing: Backing::Heap { layout },
        })
    }

    /// The longest region [`Region::allocate`] tries: `isize::MAX` (Rust's bound on one
    /// allocation, and so on a [`Region`]), and on Linux no more than the machine's memory
    /// and swap together (`sysinfo(2)`). `allocate` touches every page it maps, so a
    /// longer region could never be backed; the kernel's default overcommit heuristic
    /// refuses such a mapping anyway, and this bound refuses it under every overcommit
    /// policy. A shorter region may still exceed what is free at the moment, or a cgroup's
    /// limit: that is the system's memory policy, as for any other memory the process
    /// writes.
    pub fn max_allocate_len() -> usize {
        let most = isize::MAX as usize;
        // Miri does not model sysinfo.
        #[cfg(all(target_os = "linux", not(miri)))]
        {
            // SAFETY: an all-zero `sysinfo` is a valid value of the plain C struct.
            let mut si: libc::sysinfo = unsafe { core::mem::zeroed() };
            // SAFETY: sysinfo writes only into the struct it is given, which lives here.
            if unsafe { libc::sysinfo(&mut si) } == 0 {
                // `c_ulong` fields: 64 bits here, 32 on 32-bit targets (widened).
                let unit = u64::from(si.mem_unit.max(1));
                let total = (si.totalram as u64)
                    .saturating_add(si.totalswap as u64)
                    .saturating_mul(unit);
                return usize::try_from(total).map_or(most, |t| t.min(most));
            }
        }
        most
    }

    /// One attempt at an anonymous private mapping of `len` bytes rounded up to `unit`.
    #[cfg(target_os = "linux")]
    fn mmap(len: usize, unit: usize, huge: bool) -> Option<Region> {
        let map_len = len.checked_add(unit - 1)? & !(unit - 1);
        let flags = mmap_flags(huge);
        // Ordinary pages for a region of a hugepage or more: mapped at a hugepage boundary,
        // since transparent hugepages back only whole aligned 2 MiB extents of a mapping. The
        // kernel's choice of address is only page-aligned, and an 8 MiB region there had one
        // of its four extents (its first and last ~1 MiB) on 4 KiB pages, a TLB miss every
        // few segments a bulk sender copies from there. A hugepage more is mapped and the
        // parts before the boundary and after the region are unmapped.
        let slack = if !huge && map_len >= HUGE_PAGE_LEN && !cfg!(miri) {
            HUGE_PAGE_LEN - unit
        } else {
            0
        };
        // SAFETY: an anonymous mapping at an address of the kernel's choosing touches no
        // existing memory; the result is checked against MAP_FAILED before use.
        let raw = unsafe {
            libc::mmap(
                ptr::null_mut(),
                map_len.checked_add(slack)?,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return None;
        }
        let p = if slack == 0 {
            raw
        } else {
            let head = (raw as usize).wrapping_neg() & (HUGE_PAGE_LEN - 1);
            let tail = slack - head;
            // SAFETY: `head` (< 2 MiB, a multiple of the page size: both addresses are
            // page-aligned) and `tail` = `slack - head` are the two ends of the mapping just
            // made, outside `[raw + head, raw + head + map_len)`, which is kept; nothing
            // refers to either end. A failed unmap leaves the ends mapped (a leak of at
            // most 2 MiB of untouched address space), never the kept part unmapped.
            unsafe {
                let p = raw.cast::<u8>().add(head);
                if head > 0 {
                    libc::munmap(raw, head);
                }
                if tail > 0 {
                    libc::munmap(p.add(map_len).cast(), tail);
                }
                p.cast::<libc::c_void>()
            }
        };
        if !huge && !cfg!(miri) {
            // SAFETY: advice on a mapping we just created and own; failures (old kernels,
            // THP disabled, MADV_POPULATE_WRITE unknown before Linux 5.14) only lose an
            // optimisation and are ignored on purpose.
            unsafe {
                if map_len >= HUGE_PAGE_LEN {
                    libc::madvise(p, map_len, libc::MADV_HUGEPAGE);
                }
                libc::madvise(p, map_len, libc::MADV_POPULATE_WRITE);
            }
        }
        Some(Region {
            ptr: NonNull::new(p.cast::<u8>())?,
            len,
            backing: Backing::Mmap { map_len, huge },
        })
    }

    /// Takes ownership of application memory in a `Box<[u8]>`. The box's contents are kept;
    /// [`Region::into_boxed`] gives the box back.
    pub fn from_boxed(buf: Box<[u8]>) -> Region {
        let len = buf.len();
        if len == 0 {
            return Region {
                ptr: NonNull::dangling(),
                len: 0,
                backing: Backing::Empty,
            };
        }
        // The box becomes a raw pointer so that no `Box` (which asserts unique access)
        // coexists with the engine's writes.
        let raw: *mut [u8] = Box::into_raw(buf);
        Region {
            // SAFETY: `Box::into_raw` never returns null.
            ptr: unsafe { NonNull::new_unchecked(raw.cast::<u8>()) },
            len,
            backing: Backing::Boxed,
        }
    }

    /// Uses application memory the region does not own: it is never freed by the region.
    ///
    /// # Safety
    /// The caller guarantees, for as long as this `Region` or any `Arc` of it lives (and so
    /// for as long as it is registered):
    /// 1. `ptr` is non-null and valid for reads and writes of `len` bytes, and
    ///    `len <= isize::MAX`; the memory is not unmapped, freed or reused for anything
    ///    else.
    /// 2. No Rust reference to any of those bytes (`&[u8]`, `&mut [u8]`, or anything that
    ///    holds one) is alive, except slices obtained from [`Region::as_slice`] under its
    ///    contract. The application may access the bytes through raw pointers (copies,
    ///    volatile or atomic accesses) and through this region's accessors, with the same
    ///    shared-memory caveats the engine lives under (module documentation).
    ///
    /// This is the contract rust-ibverbs asks of memory handed to the device, written for a
    /// software device.
    pub unsafe fn from_raw(ptr: *mut u8, len: usize) -> Region {
        assert!(
            len <= isize::MAX as usize,
            "Region::from_raw: len too large"
        );
        match NonNull::new(ptr) {
            Some(ptr) => Region {
                ptr,
                len,
                backing: Backing::Raw,
            },
            None => {
                assert_eq!(len, 0, "Region::from_raw: null pointer");
                Region {
                    ptr: NonNull::dangling(),
                    len: 0,
                    backing: Backing::Empty,
                }
            }
        }
    }

    /// Gives back the box of a region made by [`Region::from_boxed`] (or an empty box for
    /// an empty region); any other region is returned unchanged. Use
    /// `Arc::try_unwrap` after deregistration to get the `Region` back first.
    pub fn into_boxed(self) -> Result<Box<[u8]>, Region> {
        match self.backing {
            Backing::Boxed => {
                let raw = ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len);
                core::mem::forget(self);
                // SAFETY: `raw` is exactly the pointer and length `Box::into_raw` returned
                // in `from_boxed`, and `self` was forgotten, so it is not freed twice.
                Ok(unsafe { Box::from_raw(raw) })
            }
            Backing::Empty => Ok(Box::default()),
            _ => Err(self),
        }
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first byte. Writing through it is the application's business and subject to
    /// the same rules as [`Region::from_raw`]'s second condition. Dangling (but non-null)
    /// for an empty region.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Whether the memory is backed by hugetlb pages.
    pub fn is_huge(&self) -> bool {
        match self.backing {
            #[cfg(target_os = "linux")]
            Backing::Mmap { huge, .. } => huge,
            _ => false,
        }
    }

    /// Whether `[offset, offset + len)` lies inside the region.
    #[inline]
    pub(crate) fn range_ok(&self, offset: usize, len: usize) -> bool {
        offset <= self.len && len <= self.len - offset
    }

    /// Copies `dst.len()` bytes at `offset` into `dst`.
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> Result<(), MemError> {
        if !self.range_ok(offset, dst.len()) {
            return Err(MemError::OutOfBounds);
        }
        // SAFETY: the range is inside the region (checked above), which is valid for
        // reads; `dst` is a unique borrow, so it cannot overlap memory that no Rust
        // reference may point into (from_raw / as_slice contracts).
        unsafe {
            ptr::copy_nonoverlapping(self.ptr.as_ptr().add(offset), dst.as_mut_ptr(), dst.len())
        };
        Ok(())
    }

    /// Copies `src` into the region at `offset`.
    pub fn write_at(&self, offset: usize, src: &[u8]) -> Result<(), MemError> {
        if !self.range_ok(offset, src.len()) {
            return Err(MemError::OutOfBounds);
        }
        // SAFETY: the range is inside the region, which is valid for writes. `src` cannot
        // overlap it: a shared reference into the region only exists under `as_slice`'s
        // contract, which forbids writes to the region while it lives.
        unsafe { ptr::copy_nonoverlapping(src.as_ptr(), self.ptr.as_ptr().add(offset), src.len()) };
        Ok(())
    }

    /// Sets `len` bytes at `offset` to `byte`.
    pub fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<(), MemError> {
        if !self.range_ok(offset, len) {
            return Err(MemError::OutOfBounds);
        }
        // SAFETY: the range is inside the region, which is valid for writes.
        unsafe { ptr::write_bytes(self.ptr.as_ptr().add(offset), byte, len) };
        Ok(())
    }

    /// The 8 bytes at `offset` as an atomic word, for the application's side of RFC 7306
    /// atomics (the engine executes a peer's atomics on it with atomic operations too), or
    /// for words only the application writes. The address (not just the offset) must be
    /// 8-aligned. A word a peer may write by RDMA Write or a Send's placement is written
    /// with plain copies: polling it with this races with them (a data race in Rust's
    /// memory model, as memory a DMA device writes is; Miri reports it), whatever x86
    /// makes of an aligned word in practice. A completion, not the memory, tells that
    /// data arrived.
    pub fn atomic_u64_at(&self, offset: usize) -> Result<&AtomicU64, MemError> {
        if !self.range_ok(offset, 8) {
            return Err(MemError::OutOfBounds);
        }
        // SAFETY: in bounds (checked above).
        let p = unsafe { self.ptr.as_ptr().add(offset) };
        if !(p as usize).is_multiple_of(8) {
            return Err(MemError::Misaligned);
        }
        // SAFETY: `p` is 8-aligned and valid for reads and writes of 8 bytes for as long
        // as `self` lives, which bounds the returned lifetime. `AtomicU64` has interior
        // mutability, so the reference asserts nothing about other atomic accesses.
        Ok(unsafe { AtomicU64::from_ptr(p.cast::<u64>()) })
    }

    /// The whole region as a shared slice.
    ///
    /// # Safety
    /// For as long as the returned slice lives, nothing may write to any of the region's
    /// bytes: no registration of this region may allow the engine to write into it (no
    /// registration with `LOCAL_WRITE`, `REMOTE_WRITE` or `REMOTE_ATOMIC` in use by a
    /// posted work request or reachable by a peer, in practice: deregister it, or register
    /// it read-only), and the application does not write to it either (not through
    /// [`Region::write_at`], [`Region::fill`], atomics or raw pointers). This is the
    /// contract rust-ibverbs places on memory lent to the device for a `post_send`, turned
    /// around: the device lends the memory to the application.
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: the region is valid for reads of `len` bytes (a dangling non-null pointer
        // for an empty one, which `from_raw_parts` allows for length 0); the caller
        // guarantees no writes while the slice lives.
        unsafe { core::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        match self.backing {
            Backing::Empty | Backing::Raw => {}
            #[cfg(target_os = "linux")]
            Backing::Mmap { map_len, .. } => {
                // SAFETY: the pointer and length are those of a mapping this region
                // created and still owns; nothing references it any more (last owner).
                unsafe { libc::munmap(self.ptr.as_ptr().cast(), map_len) };
            }
            Backing::Heap { layout } => {
                // SAFETY: allocated with `alloc_zeroed(layout)` in `allocate`.
                unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) };
            }
            Backing::Boxed => {
                let raw = ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len);
                // SAFETY: exactly the pointer and length `Box::into_raw` returned in
                // `from_boxed`; this is the only place that rebuilds it.
                drop(unsafe { Box::from_raw(raw) });
            }
        }
    }
}

impl fmt::Debug for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.backing {
            Backing::Empty => "empty",
            #[cfg(target_os = "linux")]
            Backing::Mmap { huge: true, .. } => "hugetlb",
            #[cfg(target_os = "linux")]
            Backing::Mmap { huge: false, .. } => "mmap",
            Backing::Heap { .. } => "heap",
            Backing::Boxed => "boxed",
            Backing::Raw => "raw",
        };
        f.debug_struct("Region")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("backing", &kind)
            .finish()
    }
}

/// The `mmap(2)` flags of [`Region::mmap`]: a private anonymous mapping, of hugetlb pages
/// if `huge`.
#[cfg(target_os = "linux")]
fn mmap_flags(huge: bool) -> libc::c_int {
    let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    if huge {
        // Hugetlb pages are reserved at mmap time, so a machine without enough free
        // hugepages fails here rather than with SIGBUS on first touch.
        flags |= libc::MAP_HUGETLB | libc::MAP_POPULATE;
        // Of 2 MiB ([`HUGE_PAGE_LEN`]), named: without a size the kernel takes the
        // system's default hugepage size, 1 GiB where `default_hugepagesz=1G` (common on
        // DPDK hosts), rounds the mapping up to whole such pages and refuses the `munmap`
        // of the 2 MiB-rounded length `Drop` gives back (EINVAL): every region dropped
        // leaked a pinned 1 GiB page. A machine without free 2 MiB hugepages falls back
        // to ordinary pages, as before.
        flags |= libc::MAP_HUGE_2MB;
    }
    flags
}

/// The system page size (4 KiB where it cannot be asked).
fn page_size() -> usize {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: sysconf has no memory-safety preconditions.
        let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if n > 0 {
            return n as usize;
        }
    }
    4096
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocate_is_zeroed_and_page_aligned() {
        for len in [1, 4095, 4096, 3 * 4096 + 5] {
            let r = Region::allocate(len, 8).unwrap();
            assert_eq!(r.len(), len);
            assert_eq!(r.as_ptr() as usize % 4096, 0);
            let mut buf = vec![0xAAu8; len];
            r.read_at(0, &mut buf).unwrap();
            assert!(buf.iter().all(|&b| b == 0));
        }
    }

    #[test]
    fn allocate_large_alignment_uses_heap() {
        let r = Region::allocate(100, 1 << 16).unwrap();
        assert_eq!(r.as_ptr() as usize % (1 << 16), 0);
        r.write_at(99, &[1]).unwrap();
    }

    #[test]
    fn allocate_rejects_bad_alignment() {
        assert_eq!(
            Region::allocate(10, 3).unwrap_err(),
            MemError::InvalidLayout
        );
        assert_eq!(
            Region::allocate(10, 0).unwrap_err(),
            MemError::InvalidLayout
        );
    }

    #[test]
    fn huge_allocation_falls_back_or_uses_hugepages() {
        // Works either way; on a machine with free hugepages it is hugetlb-backed, else
        // on ordinary pages; 2 MiB aligned both ways (where transparent hugepages can back
        // it, whole).
        let r = Region::allocate(HUGE_PAGE_LEN + 1, 4096).unwrap();
        #[cfg(all(target_os = "linux", not(miri)))]
        assert_eq!(r.as_ptr() as usize % HUGE_PAGE_LEN, 0, "{r:?}");
        r.write_at(HUGE_PAGE_LEN, &[7]).unwrap();
        let mut b = [0];
        r.read_at(HUGE_PAGE_LEN, &mut b).unwrap();
        assert_eq!(b, [7]);
    }

    /// The hugetlb mapping names its page size, 2 MiB, rather than taking the system's
    /// default hugepage size (`default_hugepagesz=1G` on many DPDK hosts): with 1 GiB
    /// pages the kernel rounds the mapping up to a whole 1 GiB page, and the region's
    /// `munmap` of its 2 MiB-rounded length fails (EINVAL: not a multiple of the page),
    /// so every region dropped leaked a pinned 1 GiB page.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_hugetlb_mapping_names_its_2mib_page_size() {
        use libc::{MAP_HUGE_MASK, MAP_HUGE_SHIFT};
        let flags = mmap_flags(true);
        assert_ne!(flags & libc::MAP_HUGETLB, 0);
        let log2 = (flags >> MAP_HUGE_SHIFT) & MAP_HUGE_MASK;
        assert_eq!(
            1usize << log2,
            HUGE_PAGE_LEN,
            "the hugetlb mapping takes the default hugepage size (log2 {log2})"
        );
        assert_eq!(mmap_flags(false) & libc::MAP_HUGETLB, 0);
        assert_eq!((mmap_flags(false) >> MAP_HUGE_SHIFT) & MAP_HUGE_MASK, 0);
    }

    /// The ordinary-page mapping of a region of a hugepage or more starts at a hugepage
    /// boundary, keeps nothing mapped around it, and gives its whole length back on drop:
    /// many regions allocated and dropped in turn leave the process's mappings as they were.
    #[cfg(all(target_os = "linux", not(miri)))]
    #[test]
    fn ordinary_page_regions_are_hugepage_aligned_and_unmapped_whole() {
        // The process's mapped address space (VmSize, KiB).
        let mapped = || {
            std::fs::read_to_string("/proc/self/status")
                .expect("/proc/self/status")
                .lines()
                .find_map(|l| l.strip_prefix("VmSize:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
                .expect("VmSize")
        };
        let before = mapped();
        for len in [
            HUGE_PAGE_LEN,
            HUGE_PAGE_LEN + 4096,
            4 * HUGE_PAGE_LEN + 8192,
        ] {
            let r = Region::mmap(len, page_size(), false).expect("mmap");
            assert_eq!(r.as_ptr() as usize % HUGE_PAGE_LEN, 0, "{len}: {r:?}");
            r.write_at(len - 1, &[1]).unwrap();
            let mut b = [0];
            r.read_at(0, &mut b).unwrap();
            assert_eq!(b, [0]);
        }
        // Other threads of the test binary map and unmap too (the CRC tests' buffers and
        // guard pages: 67 MiB more at one moment of one run), not the 2 MiB less a page a
        // round that a leak of the slack would add: 511 MiB here.
        for _ in 0..256 {
            drop(Region::mmap(3 * HUGE_PAGE_LEN, page_size(), false).expect("mmap"));
        }
        let after = mapped();
        assert!(
            after <= before + 128 * 1024,
            "mapped {before} -> {after} KiB: the slack leaks"
        );
    }

    /// A length no machine memory could back is refused before anything is mapped, under
    /// every overcommit policy, and the bound is one a region can have.
    #[test]
    fn allocate_refuses_more_than_the_machine_has() {
        let most = Region::max_allocate_len();
        assert!(most <= isize::MAX as usize && most > 0);
        if most < isize::MAX as usize {
            assert_eq!(
                Region::allocate(most + 1, 4096).unwrap_err(),
                MemError::AllocFailed
            );
        }
        assert_eq!(
            Region::allocate(isize::MAX as usize + 1, 4096).unwrap_err(),
            MemError::InvalidLayout
        );
    }

    #[test]
    fn boxed_round_trip_keeps_contents() {
        let r = Region::from_boxed(vec![1, 2, 3, 4].into_boxed_slice());
        r.write_at(1, &[9, 9]).unwrap();
        assert_eq!(&*r.into_boxed().unwrap(), &[1, 9, 9, 4]);
        let r = Region::allocate(16, 8).unwrap();
        assert!(r.into_boxed().is_err());
    }

    #[test]
    fn accessors_check_bounds_at_both_edges() {
        let r = Region::allocate(64, 8).unwrap();
        assert!(r.write_at(60, &[1; 4]).is_ok());
        assert_eq!(r.write_at(61, &[1; 4]), Err(MemError::OutOfBounds));
        assert!(r.write_at(64, &[]).is_ok());
        assert_eq!(r.write_at(65, &[]), Err(MemError::OutOfBounds));
        assert_eq!(
            r.read_at(usize::MAX, &mut [0; 2]),
            Err(MemError::OutOfBounds)
        );
        assert_eq!(r.fill(0, 65, 0), Err(MemError::OutOfBounds));
        assert!(r.atomic_u64_at(56).is_ok());
        assert_eq!(r.atomic_u64_at(57).unwrap_err(), MemError::OutOfBounds);
        assert_eq!(r.atomic_u64_at(4).unwrap_err(), MemError::Misaligned);
    }

    #[test]
    fn raw_region_does_not_free() {
        let mut backing = vec![0u8; 32];
        // SAFETY: `backing` outlives the region and is not referenced while it lives.
        let r = unsafe { Region::from_raw(backing.as_mut_ptr(), backing.len()) };
        r.write_at(0, b"abc").unwrap();
        drop(r);
        assert_eq!(&backing[..3], b"abc");
    }

    #[test]
    fn empty_regions() {
        let r = Region::allocate(0, 4096).unwrap();
        assert!(r.is_empty());
        assert!(r.write_at(0, &[]).is_ok());
        assert_eq!(r.write_at(0, &[1]), Err(MemError::OutOfBounds));
        // SAFETY: nothing writes to an empty region.
        assert!(unsafe { r.as_slice() }.is_empty());
        let b = Region::from_boxed(Box::default());
        assert!(b.is_empty());
    }
}
