//! The application's side of registered memory: each kind of `Region` through a full
//! register → place → deregister → take back cycle.
// These tests exercise the `unsafe` contracts of `Region::from_raw` and `Region::as_slice`.
#![allow(unsafe_code)]

use std::sync::atomic::Ordering;
use std::sync::Arc;

use warpcore_engine::mem::{Access, MemError, MrTable, PdId, Region};

const PD: PdId = PdId(3);
const W: Access = Access::LOCAL_WRITE.union(Access::REMOTE_WRITE);

/// An application buffer handed over as a box, written by "the network", given back.
#[test]
fn boxed_memory_round_trip() {
    let t = MrTable::new(4);
    let mut buf = vec![0u8; 256].into_boxed_slice();
    buf[0] = 0x11;
    let r = Arc::new(Region::from_boxed(buf));
    let s = t.register(r.clone(), PD, W, 0).unwrap();
    t.lookup(s, PD, Access::REMOTE_WRITE)
        .unwrap()
        .place_at(10, b"hello")
        .unwrap();
    t.deregister(s).unwrap();
    let back = Arc::try_unwrap(r).unwrap().into_boxed().unwrap();
    assert_eq!(back[0], 0x11);
    assert_eq!(&back[10..15], b"hello");
}

/// Raw application memory (here a `Vec` the test keeps alive and does not touch while
/// registered) under `from_raw`'s contract.
#[test]
fn raw_memory_round_trip() {
    let t = MrTable::new(4);
    let mut backing = vec![0u64; 32]; // 8-aligned, for the atomic below
    let len = backing.len() * 8;
    // SAFETY: `backing` outlives the region (dropped after it below) and is only accessed
    // through the region while the region exists.
    let r = Arc::new(unsafe { Region::from_raw(backing.as_mut_ptr().cast(), len) });
    let s = t
        .register(r.clone(), PD, W | Access::REMOTE_ATOMIC, 0)
        .unwrap();
    {
        let g = t.lookup(s, PD, Access::REMOTE_ATOMIC).unwrap();
        g.atomic(16).unwrap().fetch_add(5, Ordering::Relaxed);
        g.place(0, &7u64.to_ne_bytes()).unwrap();
    }
    t.deregister(s).unwrap();
    assert!(Arc::try_unwrap(r).unwrap().into_boxed().is_err());
    assert_eq!(backing[0], 7);
    assert_eq!(backing[2], 5);
}

/// Engine-allocated memory: the application reads what was placed with copies, and after
/// deregistration (no writer left) may look at it as a slice.
#[test]
fn allocated_memory_read_back() {
    let t = MrTable::new(4);
    let r = Arc::new(Region::allocate(8192, 64).unwrap());
    let s = t.register(r.clone(), PD, W, 0x4000).unwrap();
    let payload: Vec<u8> = (0..=255).collect();
    t.lookup(s, PD, Access::REMOTE_WRITE)
        .unwrap()
        .place_at(0x4000 + 8192 - 256, &payload)
        .unwrap();
    let mut copy = vec![0; 256];
    r.read_at(8192 - 256, &mut copy).unwrap();
    assert_eq!(copy, payload);
    t.deregister(s).unwrap();
    // SAFETY: no registration of `r` remains, and nothing else writes to it while the
    // slice lives.
    let view = unsafe { r.as_slice() };
    assert_eq!(&view[8192 - 256..], &payload[..]);
    assert!(view[..8192 - 256].iter().all(|&b| b == 0));
}

#[test]
fn registration_checks_its_arguments() {
    let t = MrTable::new(4);
    let r = Arc::new(Region::allocate(16, 8).unwrap());
    assert_eq!(
        t.register(r.clone(), PD, Access::REMOTE_WRITE, 0),
        Err(MemError::InvalidAccess)
    );
    assert_eq!(
        t.register(
            r.clone(),
            PD,
            Access::REMOTE_ATOMIC | Access::REMOTE_READ,
            0
        ),
        Err(MemError::InvalidAccess)
    );
    assert_eq!(t.register(r, PD, W, u64::MAX - 8), Err(MemError::ToWrap));
    assert_eq!(t.registered(), 0);
}
