//! TEMPORARY stand-in for `crate::mem` (branch `mem`), written in safe Rust against the agreed
//! interface so the engine can be built and tested before `mem` lands. It is slow (byte-wise
//! atomics) and is deleted, with the one `use` alias that points at it, as soon as `mem`
//! merges. Nothing outside the engine sees it.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, RwLock};

/// Access rights of a memory region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Access(pub u32);

impl Access {
    /// No access beyond local read.
    pub const EMPTY: Access = Access(0);
    /// The engine may write (receive buffers, Read sinks).
    pub const LOCAL_WRITE: Access = Access(1);
    /// Peers may read (Read Requests).
    pub const REMOTE_READ: Access = Access(2);
    /// Peers may write (RDMA Writes).
    pub const REMOTE_WRITE: Access = Access(4);
    /// Peers may run atomics.
    pub const REMOTE_ATOMIC: Access = Access(8);
    /// Memory windows may be bound.
    pub const MW_BIND: Access = Access(16);

    /// True if every right of `other` is in `self`.
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

/// A protection domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PdId(pub u32);

/// An STag: index << 8 | key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Stag(pub u32);

impl Stag {
    /// Table index.
    pub const fn index(self) -> u32 {
        self.0 >> 8
    }
    /// 8-bit key.
    pub const fn key(self) -> u8 {
        self.0 as u8
    }
}

/// Memory errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemError {
    /// Table full.
    TableFull,
    /// Unknown STag.
    InvalidStag,
    /// Out of the region.
    OutOfBounds,
}

/// Registered memory.
#[derive(Debug)]
pub struct Region {
    bytes: Box<[AtomicU8]>,
}

impl Region {
    /// Zeroed memory.
    pub fn allocate(len: usize, _align: usize) -> Result<Region, MemError> {
        Ok(Region {
            bytes: (0..len).map(|_| AtomicU8::new(0)).collect(),
        })
    }
    /// Application memory handed over.
    #[allow(clippy::boxed_local)]
    pub fn from_boxed(b: Box<[u8]>) -> Region {
        Region {
            bytes: b.iter().map(|&x| AtomicU8::new(x)).collect(),
        }
    }
    /// Length.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }
    /// Empty.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
    /// Copy out.
    pub fn read_at(&self, offset: usize, out: &mut [u8]) -> Result<(), MemError> {
        let src = self
            .bytes
            .get(offset..offset.checked_add(out.len()).ok_or(MemError::OutOfBounds)?)
            .ok_or(MemError::OutOfBounds)?;
        for (o, s) in out.iter_mut().zip(src) {
            *o = s.load(Ordering::Relaxed);
        }
        Ok(())
    }
    /// Copy in.
    pub fn write_at(&self, offset: usize, data: &[u8]) -> Result<(), MemError> {
        let dst = self
            .bytes
            .get(
                offset
                    ..offset
                        .checked_add(data.len())
                        .ok_or(MemError::OutOfBounds)?,
            )
            .ok_or(MemError::OutOfBounds)?;
        for (d, s) in dst.iter().zip(data) {
            d.store(*s, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// Why a lookup failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LookupFault {
    /// Unknown, stale or invalidated.
    InvalidStag,
    /// Another PD.
    WrongPd,
    /// Missing rights.
    AccessDenied,
}

/// Why a range is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoundsFault {
    /// TO + len wraps.
    ToWrap,
    /// Outside the region.
    OutOfBounds,
}

#[derive(Debug)]
struct Entry {
    region: Arc<Region>,
    pd: PdId,
    access: Access,
    base: u64,
    key: u8,
    valid: bool,
}

/// The region table.
#[derive(Debug)]
pub struct MrTable {
    slots: RwLock<Vec<Option<Entry>>>,
    keys: RwLock<Vec<u8>>,
}

/// A looked-up region.
#[derive(Debug)]
pub struct MrGuard<'a> {
    region: Arc<Region>,
    base: u64,
    _t: std::marker::PhantomData<&'a MrTable>,
}

impl MrGuard<'_> {
    /// TO range to region offset.
    pub fn bounds(&self, to: u64, len: u64) -> Result<usize, BoundsFault> {
        let end = to.checked_add(len).ok_or(BoundsFault::ToWrap)?;
        if to < self.base || end - self.base > self.region.len() as u64 {
            return Err(BoundsFault::OutOfBounds);
        }
        Ok((to - self.base) as usize)
    }
    /// Copy received bytes in.
    pub fn place(&self, offset: usize, data: &[u8]) {
        let _ = self.region.write_at(offset, data);
    }
    /// Copy bytes out.
    pub fn copy_out(&self, offset: usize, out: &mut [u8]) {
        let _ = self.region.read_at(offset, out);
    }
}

impl MrTable {
    /// A table of `capacity` entries.
    pub fn new(capacity: usize) -> MrTable {
        MrTable {
            slots: RwLock::new((0..capacity).map(|_| None).collect()),
            keys: RwLock::new(vec![0; capacity]),
        }
    }

    /// Registers a region.
    pub fn register(
        &self,
        region: Arc<Region>,
        pd: PdId,
        access: Access,
        offset_base: u64,
    ) -> Result<Stag, MemError> {
        let mut s = self.slots.write().unwrap_or_else(|e| e.into_inner());
        let mut k = self.keys.write().unwrap_or_else(|e| e.into_inner());
        // Index 0 is never used so that STag 0 never names a region.
        let i = (1..s.len())
            .find(|&i| s[i].is_none())
            .ok_or(MemError::TableFull)?;
        k[i] = k[i].wrapping_add(1);
        s[i] = Some(Entry {
            region,
            pd,
            access,
            base: offset_base,
            key: k[i],
            valid: true,
        });
        Ok(Stag(((i as u32) << 8) | u32::from(k[i])))
    }

    fn with<R>(&self, stag: Stag, f: impl FnOnce(&mut Option<Entry>) -> R) -> Option<R> {
        let mut s = self.slots.write().unwrap_or_else(|e| e.into_inner());
        let e = s.get_mut(stag.index() as usize)?;
        match e {
            Some(x) if x.key == stag.key() => Some(f(e)),
            _ => None,
        }
    }

    /// Deregisters.
    pub fn deregister(&self, stag: Stag) -> Result<(), MemError> {
        self.with(stag, |e| *e = None).ok_or(MemError::InvalidStag)
    }

    /// Invalidates (remote or local invalidation).
    pub fn invalidate(&self, stag: Stag) -> Result<(), MemError> {
        self.with(stag, |e| {
            if let Some(x) = e {
                x.valid = false;
            }
        })
        .ok_or(MemError::InvalidStag)
    }

    /// Hot-path lookup.
    pub fn lookup(
        &self,
        stag: Stag,
        pd: PdId,
        required: Access,
    ) -> Result<MrGuard<'_>, LookupFault> {
        let s = self.slots.read().unwrap_or_else(|e| e.into_inner());
        let e = match s.get(stag.index() as usize) {
            Some(Some(e)) if e.key == stag.key() && e.valid => e,
            _ => return Err(LookupFault::InvalidStag),
        };
        if e.pd != pd {
            return Err(LookupFault::WrongPd);
        }
        if !e.access.contains(required) {
            return Err(LookupFault::AccessDenied);
        }
        Ok(MrGuard {
            region: Arc::clone(&e.region),
            base: e.base,
            _t: std::marker::PhantomData,
        })
    }

    /// Local (lkey) lookup.
    pub fn lookup_local(
        &self,
        stag: Stag,
        pd: PdId,
        need_write: bool,
    ) -> Result<MrGuard<'_>, LookupFault> {
        let req = if need_write {
            Access::LOCAL_WRITE
        } else {
            Access::EMPTY
        };
        self.lookup(stag, pd, req)
    }
}
