//! The STag table's window and fast-registration rules without an engine: states, keys,
//! streams, and the region a window holds.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

use warpcore_engine::mem::{
    Access, Deregistration, LookupFault, MemError, MrTable, MwType, PdId, Region, Stag, StagKind,
};
use warpcore_engine::proto::rdmap::InvalidateFault;

const PD: PdId = PdId(1);

fn table_with_region(access: Access) -> (MrTable, Arc<Region>, Stag) {
    let t = MrTable::with_seed(16, 5);
    let r = Arc::new(Region::allocate(4096, 64).unwrap());
    let s = t.register(Arc::clone(&r), PD, access, 0).unwrap();
    (t, r, s)
}

/// As `ibv_dereg_mr` refuses a region with bound windows, so does the table (and an
/// invalidation of it); once the window is invalidated or deallocated it goes.
#[test]
fn region_with_bound_window_stays_until_the_window_goes() {
    let (t, _r, mr) = table_with_region(Access::LOCAL_WRITE | Access::MW_BIND);
    let mw = t.alloc_mw(PD, MwType::Type2).unwrap();
    assert_eq!(t.stag_info(mw), Some((StagKind::Window(MwType::Type2), PD)));
    let w = t
        .bind_mw(
            mw,
            mw.key() ^ 1,
            mr,
            PD,
            64,
            64,
            Access::REMOTE_WRITE,
            Some(7),
        )
        .unwrap();
    assert_eq!(t.deregister(mr), Err(MemError::Busy));
    assert_eq!(t.invalidate(mr), Err(MemError::Busy));
    assert!(t.is_valid(mr), "a refused deregistration changes nothing");
    t.invalidate_local(w, PD).unwrap();
    t.deregister(mr).unwrap();
    // The window can no longer be bound to the region that is gone.
    assert_eq!(
        t.bind_mw(mw, w.key() ^ 1, mr, PD, 0, 8, Access::REMOTE_READ, Some(7)),
        Err(MemError::InvalidStag)
    );
    t.deregister(w).unwrap();
    assert_eq!(t.registered(), 0);
}

/// A stale STag is refused as stale (`InvalidStag`) by deregistration and invalidation,
/// even when its slot now holds a region with a bound window (whose own STag is `Busy`):
/// the key is compared before the windows are counted.
#[test]
fn a_stale_stag_is_invalid_even_when_its_slot_has_windows_bound() {
    let t = MrTable::with_seed(2, 9);
    let r = Arc::new(Region::allocate(4096, 64).unwrap());
    let mw = t.alloc_mw(PD, MwType::Type1).unwrap();
    let old = t
        .register(Arc::clone(&r), PD, Access::LOCAL_WRITE, 0)
        .unwrap();
    t.deregister(old).unwrap();
    // The region reuses the slot (after the table's spare slots were used once each).
    let mr = loop {
        let s = t
            .register(Arc::clone(&r), PD, Access::LOCAL_WRITE | Access::MW_BIND, 0)
            .unwrap();
        if s.index() == old.index() {
            break s;
        }
        t.deregister(s).unwrap();
    };
    assert_ne!(mr, old);
    t.bind_mw(mw, mw.key() ^ 1, mr, PD, 0, 8, Access::REMOTE_READ, None)
        .unwrap();
    assert_eq!(t.deregister(old), Err(MemError::InvalidStag));
    assert_eq!(t.invalidate(old), Err(MemError::InvalidStag));
    assert_eq!(t.deregister(mr), Err(MemError::Busy));
    assert_eq!(t.invalidate(mr), Err(MemError::Busy));
}

/// An owner that cannot wait (a handle being dropped) deregisters a region with a bound
/// window with `deregister_or_defer`: the region's own STag stops working at once, the
/// window keeps working, and the window's unbinding frees the region's slot.
#[test]
fn a_deferred_deregistration_ends_with_the_last_window() {
    let rights = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::MW_BIND;
    for unbind in ["invalidate", "deregister", "rebind"] {
        let (t, _r, mr) = table_with_region(rights);
        let other = t
            .register(Arc::new(Region::allocate(64, 64).unwrap()), PD, rights, 0)
            .unwrap();
        let mw = t.alloc_mw(PD, MwType::Type1).unwrap();
        let w = t
            .bind_mw(mw, mw.key() ^ 1, mr, PD, 0, 64, Access::REMOTE_WRITE, None)
            .unwrap();
        assert_eq!(t.deregister_or_defer(mr), Ok(Deregistration::Deferred));
        assert_eq!(
            t.lookup(mr, PD, Access::REMOTE_WRITE).unwrap_err(),
            LookupFault::InvalidStag
        );
        assert!(
            t.lookup(w, PD, Access::REMOTE_WRITE).is_ok(),
            "the window works"
        );
        assert_eq!(t.registered(), 3, "the region's slot waits for its window");
        // Neither a second deregistration nor a bind can take the orphan.
        assert_eq!(t.deregister(mr), Err(MemError::Busy));
        let mw2 = t.alloc_mw(PD, MwType::Type1).unwrap();
        assert_eq!(
            t.bind_mw(mw2, mw2.key() ^ 1, mr, PD, 0, 8, Access::REMOTE_READ, None),
            Err(MemError::InvalidStag)
        );
        t.deregister(mw2).unwrap();
        match unbind {
            "invalidate" => t.invalidate(w).unwrap(),
            "deregister" => t.deregister(w).unwrap(),
            _ => {
                t.bind_mw(mw, w.key() ^ 1, other, PD, 0, 8, Access::REMOTE_READ, None)
                    .unwrap();
            }
        }
        // `other` and the window (unless deallocated) are left.
        let left = if unbind == "deregister" { 1 } else { 2 };
        assert_eq!(t.registered(), left, "{unbind}: the region's slot is free");
        assert_eq!(t.deregister(mr), Err(MemError::InvalidStag));
    }
    // Without a window bound it is a plain deregistration.
    let (t, _r, mr) = table_with_region(rights);
    assert_eq!(t.deregister_or_defer(mr), Ok(Deregistration::Done));
    assert_eq!(t.registered(), 0);
}

/// A deferred deregistration racing the window's invalidation on another thread frees the
/// region exactly once, whichever comes first.
#[test]
fn a_deferred_deregistration_races_the_last_unbinding() {
    let t = Arc::new(MrTable::with_seed(8, 3));
    let rights = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::MW_BIND;
    for _ in 0..scaled(500) {
        let mr = t
            .register(Arc::new(Region::allocate(64, 64).unwrap()), PD, rights, 0)
            .unwrap();
        let mw = t.alloc_mw(PD, MwType::Type1).unwrap();
        let w = t
            .bind_mw(mw, mw.key() ^ 1, mr, PD, 0, 64, Access::REMOTE_WRITE, None)
            .unwrap();
        let t2 = Arc::clone(&t);
        let unbinder = thread::spawn(move || t2.invalidate(w).unwrap());
        let r = t.deregister_or_defer(mr).unwrap();
        unbinder.join().unwrap();
        assert!(matches!(r, Deregistration::Done | Deregistration::Deferred));
        assert_eq!(t.registered(), 1, "only the window's slot is left");
        t.deregister(w).unwrap();
    }
}

/// A fast registration reaches its region's memory as a bound window does, so the region
/// counts it: neither deregistered nor invalidated while it is valid (`Busy`), and a
/// deferred deregistration ends with the fast registration's invalidation or
/// deallocation. (The memory of `Region::from_raw` may be freed once the region is
/// deregistered: a fast registration must not outlive that.)
#[test]
fn a_fast_registration_keeps_its_region_registered() {
    for end in ["invalidate", "deregister"] {
        let (t, _r, mr) = table_with_region(Access::LOCAL_WRITE);
        let fr = t.alloc_fast_reg(PD).unwrap();
        let f = t
            .fast_register(fr, fr.key() ^ 1, mr, PD, 0, 64, 0, Access::REMOTE_READ)
            .unwrap();
        assert_eq!(t.deregister(mr), Err(MemError::Busy));
        assert_eq!(t.invalidate(mr), Err(MemError::Busy));
        assert!(t.is_valid(mr), "a refused deregistration changes nothing");
        t.invalidate(f).unwrap();
        t.deregister(mr).unwrap();
        assert_eq!(t.registered(), 1);

        let mr = t
            .register(
                Arc::new(Region::allocate(64, 64).unwrap()),
                PD,
                Access::LOCAL_WRITE,
                0,
            )
            .unwrap();
        let f = t
            .fast_register(fr, f.key() ^ 1, mr, PD, 0, 64, 0, Access::REMOTE_READ)
            .unwrap();
        assert_eq!(t.deregister_or_defer(mr), Ok(Deregistration::Deferred));
        assert!(t.lookup(f, PD, Access::REMOTE_READ).is_ok());
        assert_eq!(t.registered(), 2);
        match end {
            "invalidate" => t.invalidate_local(f, PD).unwrap(),
            _ => t.deregister(f).unwrap(),
        }
        let left = if end == "invalidate" { 1 } else { 0 };
        assert_eq!(t.registered(), left, "{end}: the region's slot is free");
    }
}

/// A window is named by the STag its allocation returned, whatever its key now: its owner
/// deallocates it (`deallocate`) even while a bind that will change its key is under way on
/// another thread (waiting for the bind), and it is gone: not valid under any key, and its
/// region is free to go. (A deregistration by key could only guess the key the bind would
/// leave; the verbs' drop guessed two and freed nothing.)
#[test]
fn deallocate_frees_a_window_whatever_its_key_and_waits_out_a_bind() {
    let t = Arc::new(MrTable::with_seed(16, 5));
    let r = Arc::new(Region::allocate(4096, 64).unwrap());
    let rights = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::MW_BIND;
    let mr = t.register(r, PD, rights, 0).unwrap();
    let mw = t.alloc_mw(PD, MwType::Type1).unwrap();
    let w1 = t
        .bind_mw(mw, mw.key() ^ 1, mr, PD, 0, 64, Access::REMOTE_WRITE, None)
        .unwrap();
    // A placement through the window is in flight (another core's guard)...
    let (held, release) = (
        std::sync::mpsc::channel::<()>(),
        std::sync::mpsc::channel::<()>(),
    );
    let (t2, held_tx, release_rx) = (Arc::clone(&t), held.0, release.1);
    let holder = thread::spawn(move || {
        let g = t2.lookup(w1, PD, Access::REMOTE_WRITE).unwrap();
        held_tx.send(()).unwrap();
        release_rx.recv().unwrap();
        drop(g);
    });
    held.1.recv().unwrap();
    // ...when a core runs a rebind, which waits for it...
    let t3 = Arc::clone(&t);
    let binder = thread::spawn(move || {
        t3.bind_mw(mw, w1.key() ^ 2, mr, PD, 64, 64, Access::REMOTE_WRITE, None)
    });
    // (The bind owns the window once its STag stops being valid.)
    while t.is_valid(w1) {
        thread::yield_now();
    }
    // ...and the owner deallocates the window: it waits for the bind.
    let t4 = Arc::clone(&t);
    let owner = thread::spawn(move || t4.deallocate(mw, PD));
    thread::sleep(std::time::Duration::from_millis(50));
    assert!(!owner.is_finished(), "the deallocation waits for the bind");
    release.0.send(()).unwrap();
    holder.join().unwrap();
    let w2 = binder.join().unwrap().unwrap();
    assert_eq!(owner.join().unwrap(), Ok(()));
    assert!(!t.is_valid(w1) && !t.is_valid(w2));
    assert_eq!(t.registered(), 1, "only the region is left");
    t.deregister(mr).unwrap();
}

/// Once a window is deallocated, nothing that names it reaches its slot's next
/// allocation: neither a bind queued for it nor a second deallocation, even when binds
/// brought its key to the one that precedes its allocation key (the next allocation key
/// is then advanced once more).
#[test]
fn a_deallocated_window_never_names_the_next_allocation_of_its_slot() {
    // Two slots: the region's and the window's, reused by every window.
    let t = MrTable::with_seed(2, 21);
    let rights = Access::LOCAL_WRITE | Access::MW_BIND;
    let mr = t
        .register(Arc::new(Region::allocate(64, 64).unwrap()), PD, rights, 0)
        .unwrap();
    // The next window in the slot of `w` (after the table's spare slots were used once
    // each): allocations in between advance no other slot's key.
    let alloc_in_slot_of = |w: Stag| loop {
        let s = t.alloc_mw(PD, MwType::Type1).unwrap();
        if s.index() == w.index() {
            break s;
        }
        t.deallocate(s, PD).unwrap();
    };
    let a = t.alloc_mw(PD, MwType::Type1).unwrap();
    t.deallocate(a, PD).unwrap();
    let b = alloc_in_slot_of(a);
    // Without binds the allocation key advances by the table's step.
    let step = b.key().wrapping_sub(a.key());
    // Bind `b` so that its key is one step behind its allocation key, then deallocate.
    let back = b.key().wrapping_sub(step);
    t.bind_mw(b, back, mr, PD, 0, 8, Access::REMOTE_READ, None)
        .unwrap();
    t.deallocate(b, PD).unwrap();
    let c = alloc_in_slot_of(b);
    assert_ne!(c.key(), b.key(), "the next allocation has a key of its own");
    assert_eq!(
        t.bind_mw(b, back ^ 1, mr, PD, 0, 8, Access::REMOTE_READ, None),
        Err(MemError::InvalidStag),
        "a bind queued for the deallocated window"
    );
    assert_eq!(t.deallocate(b, PD), Err(MemError::InvalidStag));
    assert_eq!(t.current_stag(c), Some(c), "the new window is untouched");
    assert_eq!(t.deallocate(mr, PD), Err(MemError::WrongKind));
    assert_eq!(t.deallocate(c, PdId(9)), Err(MemError::WrongPd));
    t.deallocate(c, PD).unwrap();
}

/// A rebind ends the old binding: the first region is free to go.
#[test]
fn rebinding_moves_the_window() {
    let t = MrTable::with_seed(16, 6);
    let r1 = Arc::new(Region::allocate(256, 64).unwrap());
    let r2 = Arc::new(Region::allocate(256, 64).unwrap());
    let a = Access::LOCAL_WRITE | Access::MW_BIND;
    let m1 = t.register(r1, PD, a, 0).unwrap();
    let m2 = t.register(r2, PD, a, 0).unwrap();
    let mw = t.alloc_mw(PD, MwType::Type1).unwrap();
    let w1 = t
        .bind_mw(mw, mw.key() ^ 1, m1, PD, 0, 256, Access::REMOTE_READ, None)
        .unwrap();
    let w2 = t
        .bind_mw(mw, w1.key() ^ 1, m2, PD, 0, 256, Access::REMOTE_READ, None)
        .unwrap();
    assert!(!t.is_valid(w1) && t.is_valid(w2));
    t.deregister(m1).unwrap();
    assert_eq!(t.deregister(m2), Err(MemError::Busy));
    t.deregister(w2).unwrap();
    t.deregister(m2).unwrap();
}

/// Stream scoping (DDP-8.2-2): a type 2 window answers only its stream; a type 1 window
/// any stream of the PD; neither is a local key; neither answers another PD.
#[test]
fn window_lookups_by_stream_pd_and_kind() {
    let (t, _r, mr) = table_with_region(Access::LOCAL_WRITE | Access::MW_BIND);
    let m2 = t.alloc_mw(PD, MwType::Type2).unwrap();
    let w2 = t
        .bind_mw(
            m2,
            m2.key() ^ 1,
            mr,
            PD,
            0,
            128,
            Access::WINDOW_RIGHTS,
            Some(1),
        )
        .unwrap();
    assert!(t.lookup_remote(w2, PD, 1, Access::REMOTE_WRITE).is_ok());
    assert_eq!(
        t.lookup_remote(w2, PD, 2, Access::REMOTE_WRITE)
            .unwrap_err(),
        LookupFault::WrongQp
    );
    assert_eq!(
        t.lookup(w2, PD, Access::empty()).unwrap_err(),
        LookupFault::WrongQp
    );
    assert_eq!(
        t.lookup_remote(w2, PdId(2), 1, Access::empty())
            .unwrap_err(),
        LookupFault::WrongPd
    );
    let m1 = t.alloc_mw(PD, MwType::Type1).unwrap();
    let w1 = t
        .bind_mw(m1, m1.key() ^ 1, mr, PD, 0, 128, Access::REMOTE_READ, None)
        .unwrap();
    assert!(t.lookup_remote(w1, PD, 1, Access::REMOTE_READ).is_ok());
    assert!(t.lookup_remote(w1, PD, 2, Access::REMOTE_READ).is_ok());
    assert_eq!(
        t.lookup_remote(w1, PD, 2, Access::REMOTE_WRITE)
            .unwrap_err(),
        LookupFault::AccessDenied
    );
    assert_eq!(
        t.lookup_local(w1, PD, false).unwrap_err(),
        LookupFault::AccessDenied
    );
    // Remote invalidation: type 1 never, type 2 only from its stream.
    assert_eq!(
        t.invalidate_remote(w1, PD, 1),
        Err(InvalidateFault::NotInvalidatable)
    );
    assert_eq!(
        t.invalidate_remote(w2, PD, 2),
        Err(InvalidateFault::NotAssociated)
    );
    assert_eq!(t.invalidate_remote(w2, PD, 1), Ok(()));
    assert_eq!(
        t.invalidate_remote(w2, PD, 1),
        Err(InvalidateFault::Invalid)
    );
    // A type 2 window needs a stream.
    assert_eq!(
        t.bind_mw(m2, w2.key() ^ 1, mr, PD, 0, 8, Access::REMOTE_READ, None),
        Err(MemError::NoQueuePair)
    );
    // Stream 0 is "no stream": it would open a type 2 window to every stream.
    assert_eq!(
        t.bind_mw(m2, w2.key() ^ 1, mr, PD, 0, 8, Access::REMOTE_READ, Some(0)),
        Err(MemError::NoQueuePair)
    );
}

/// Key rotation: 255 fast registrations in a row with the next key each give 255
/// distinct STags, and at each step only the newest matches.
#[test]
fn fast_registration_keys_rotate() {
    let (t, r, mr) = table_with_region(Access::LOCAL_WRITE);
    r.write_at(100, b"fastreg").unwrap();
    let fr = t.alloc_fast_reg(PD).unwrap();
    let mut s = fr;
    let mut seen = HashSet::new();
    let mut old = Vec::new();
    for _ in 0..255 {
        let n = t
            .fast_register(
                fr,
                s.key().wrapping_add(1),
                mr,
                PD,
                96,
                32,
                0,
                Access::REMOTE_READ,
            )
            .unwrap();
        assert!(seen.insert(n));
        assert_eq!(
            t.fast_register(
                fr,
                n.key().wrapping_add(1),
                mr,
                PD,
                0,
                8,
                0,
                Access::REMOTE_READ
            ),
            Err(MemError::StillValid)
        );
        let g = t.lookup_remote(n, PD, 3, Access::REMOTE_READ).unwrap();
        let mut got = [0u8; 7];
        g.copy_out_at(4, &mut got).unwrap();
        assert_eq!(&got, b"fastreg");
        drop(g);
        for o in &old {
            assert_eq!(
                t.lookup(*o, PD, Access::empty()).unwrap_err(),
                LookupFault::InvalidStag
            );
        }
        t.invalidate_local(n, PD).unwrap();
        old.push(n);
        s = n;
    }
    assert_eq!(
        t.fast_register(fr, s.key(), mr, PD, 0, 8, 0, Access::REMOTE_READ),
        Err(MemError::SameKey)
    );
}

/// Smaller loops under Miri (`cargo +nightly miri test -p warpcore-engine --test
/// engine_mw_table`).
const fn scaled(n: usize) -> usize {
    if cfg!(miri) {
        n / 100 + 2
    } else {
        n
    }
}

/// One thread binds a window to moving quarters of a region and invalidates it, while two
/// threads look it up and write through it: every guard they get sees a whole binding
/// (base and length of one quarter) and writes inside it; afterwards the region goes only
/// once the window is unbound. Run under Miri and the sanitizers with the other `mem`
/// tests.
#[test]
fn binds_invalidations_and_lookups_race_safely() {
    let t = Arc::new(MrTable::with_seed(8, 11));
    let r = Arc::new(Region::allocate(4096, 64).unwrap());
    let mr = t
        .register(Arc::clone(&r), PD, Access::LOCAL_WRITE | Access::MW_BIND, 0)
        .unwrap();
    let mw = t.alloc_mw(PD, MwType::Type1).unwrap();
    let cur = Arc::new(AtomicU32::new(mw.0));
    let stop = Arc::new(AtomicBool::new(false));
    let placed = Arc::new(AtomicUsize::new(0));
    let placers: Vec<_> = (0..2u8)
        .map(|k| {
            let (t, cur, stop) = (Arc::clone(&t), Arc::clone(&cur), Arc::clone(&stop));
            let placed = Arc::clone(&placed);
            thread::spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    let s = Stag(cur.load(Ordering::Acquire));
                    match t.lookup_remote(s, PD, 1, Access::REMOTE_WRITE) {
                        Ok(g) => {
                            assert_eq!(g.len(), 1024);
                            assert_eq!(g.base_to() % 1024, 0);
                            assert_eq!(g.kind(), StagKind::Window(MwType::Type1));
                            let to = g.base_to() + u64::from(k) * 8;
                            g.place_at(to, &[k + 1; 8]).unwrap();
                            assert_eq!(
                                g.place_at(g.base_to() + 1020, &[0; 8]),
                                Err(warpcore_engine::mem::BoundsFault::OutOfBounds)
                            );
                            placed.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(LookupFault::InvalidStag) => {}
                        Err(e) => panic!("{e:?}"),
                    }
                    thread::yield_now();
                }
            })
        })
        .collect();
    let mut s = mw;
    // At least the scaled count of rounds, and until the placers got through a few times.
    let mut i = 0;
    while i < scaled(2000) || (placed.load(Ordering::Relaxed) < 20 && i < 1_000_000) {
        i += 1;
        let quarter = (i % 4) as u64 * 1024;
        s = t
            .bind_mw(
                mw,
                s.key().wrapping_add(1),
                mr,
                PD,
                quarter,
                1024,
                Access::REMOTE_WRITE,
                None,
            )
            .unwrap();
        cur.store(s.0, Ordering::Release);
        if i % 3 == 0 {
            t.invalidate_local(s, PD).unwrap();
        }
        if i % 3 != 0 && i % 10 == 1 {
            // Bound: the region refuses to go, and stays valid.
            assert_eq!(t.deregister(mr), Err(MemError::Busy));
            assert!(t.is_valid(mr));
        }
        if i % 16 == 0 {
            thread::yield_now();
        }
    }
    assert!(placed.load(Ordering::Relaxed) >= 20);
    stop.store(true, Ordering::Release);
    for p in placers {
        p.join().unwrap();
    }
    // Only the two threads' octets were ever written, each inside a quarter.
    let mut all = vec![0u8; 4096];
    r.read_at(0, &mut all).unwrap();
    for (i, b) in all.iter().enumerate() {
        let expect_some = i % 1024 < 16;
        assert!(
            *b == 0 || (expect_some && *b == (i % 1024 / 8) as u8 + 1),
            "octet {i} = {b}"
        );
    }
    if t.is_valid(s) {
        assert_eq!(t.deregister(mr), Err(MemError::Busy));
        t.invalidate_local(s, PD).unwrap();
    }
    t.deregister(mr).unwrap();
    t.deregister(s).unwrap();
    assert_eq!(t.registered(), 0);
}

/// `MrTable::check_local` (the guard-free check of a work request's SGE at post time)
/// against one thread that fast-registers an STag over moving quarters of a region and
/// invalidates it again: every answer is the one for a whole registration, never a mix.
/// The STag's key names its quarter, so a checker knows the range that must pass and the
/// ranges that must not. Run under Miri and the sanitizers with the other `mem` tests.
#[test]
fn unguarded_checks_race_fast_registrations_safely() {
    let t = Arc::new(MrTable::with_seed(8, 12));
    let r = Arc::new(Region::allocate(4096, 64).unwrap());
    let mr = t
        .register(Arc::clone(&r), PD, Access::LOCAL_WRITE, 0)
        .unwrap();
    let fr = t.alloc_fast_reg(PD).unwrap();
    let quarter = |s: Stag| u64::from(s.key() % 4) * 1024;
    let cur = Arc::new(AtomicU32::new(fr.0));
    let stop = Arc::new(AtomicBool::new(false));
    let passed = Arc::new(AtomicUsize::new(0));
    let checkers: Vec<_> = (0..2)
        .map(|_| {
            let (t, cur, stop) = (Arc::clone(&t), Arc::clone(&cur), Arc::clone(&stop));
            let passed = Arc::clone(&passed);
            thread::spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    let s = Stag(cur.load(Ordering::Acquire));
                    let base = quarter(s);
                    let invalid = Err(Ok(LookupFault::InvalidStag));
                    match t.check_local(s, PD, true, base, 1024) {
                        Ok(()) => {
                            passed.fetch_add(1, Ordering::Relaxed);
                        }
                        e => assert_eq!(e, invalid),
                    }
                    let past = t.check_local(s, PD, false, base + 1, 1024);
                    assert!(
                        past == invalid
                            || past == Err(Err(warpcore_engine::mem::BoundsFault::OutOfBounds)),
                        "{past:?}"
                    );
                    assert!(matches!(
                        t.check_local(s, PdId(PD.0 + 1), false, base, 1),
                        Err(Ok(LookupFault::InvalidStag | LookupFault::WrongPd))
                    ));
                    thread::yield_now();
                }
            })
        })
        .collect();
    let mut s = fr;
    let mut i = 0;
    while i < scaled(2000) || (passed.load(Ordering::Relaxed) < 20 && i < 1_000_000) {
        i += 1;
        let key = s.key().wrapping_add(1);
        let base = u64::from(key % 4) * 1024;
        s = t
            .fast_register(fr, key, mr, PD, base, 1024, base, Access::LOCAL_WRITE)
            .unwrap();
        cur.store(s.0, Ordering::Release);
        if i % 16 == 0 {
            thread::yield_now();
        }
        t.invalidate_local(s, PD).unwrap();
    }
    assert!(passed.load(Ordering::Relaxed) >= 20);
    stop.store(true, Ordering::Release);
    for c in checkers {
        c.join().unwrap();
    }
}
