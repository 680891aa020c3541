//! The MR/STag table: key rotation, protection domains, access rights, bounds, TO wrap,
//! zero length, invalidation, and the concurrency guarantees (deregistration waits for
//! in-flight placements; concurrent atomics are exact).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use warpcore_engine::mem::{
    Access, BoundsFault, LookupFault, MemError, MrTable, PdId, Region, Stag, MAX_CAPACITY,
    MIN_SPARE_SLOTS,
};

/// Smaller loops under Miri, which is orders of magnitude slower.
const fn scaled(n: usize) -> usize {
    if cfg!(miri) {
        n / 100 + 1
    } else {
        n
    }
}

fn region(len: usize) -> Arc<Region> {
    Arc::new(Region::allocate(len, 8).unwrap())
}

const PD: PdId = PdId(7);
const RW: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_ATOMIC);

/// GUIDE rule 6: after deregister + re-register of the same slot, the old STag is invalid.
/// DDP-8.3-2, DDP-8.3.1-5: STags are made valid and revoked.
#[test]
fn stale_stag_after_reuse_of_the_same_slot_is_invalid() {
    // One slot: every registration reuses it.
    let t = MrTable::new(1);
    let old = t.register(region(64), PD, RW, 0).unwrap();
    t.deregister(old).unwrap();
    assert_eq!(
        t.lookup(old, PD, Access::empty()).unwrap_err(),
        LookupFault::InvalidStag
    );
    // The slot comes back after the table's spare slots were used once each.
    let r = region(64);
    let new = loop {
        let s = t.register(Arc::clone(&r), PD, RW, 0).unwrap();
        if s.index() == old.index() {
            break s;
        }
        t.deregister(s).unwrap();
    };
    assert_ne!(new.key(), old.key(), "fresh key");
    assert_eq!(
        t.lookup(old, PD, Access::empty()).unwrap_err(),
        LookupFault::InvalidStag
    );
    assert_eq!(t.deregister(old), Err(MemError::InvalidStag));
    assert!(t.lookup(new, PD, Access::REMOTE_WRITE).is_ok());
}

/// Every one of the 255 STags that differ from a valid one only in the key is invalid, and
/// so are indices that name no slot, and STag 0.
#[test]
fn only_the_exact_stag_matches() {
    let t = MrTable::with_seed(4, 42);
    let s = t.register(region(8), PD, RW, 0).unwrap();
    for k in 0..=255u8 {
        let probe = Stag::new(s.index(), k);
        let r = t.lookup(probe, PD, Access::empty());
        assert_eq!(r.is_ok(), probe == s, "{probe:?}");
    }
    assert_eq!(
        t.lookup(Stag(0), PD, Access::empty()).unwrap_err(),
        LookupFault::InvalidStag
    );
    let mut invalid_indices = 0;
    for i in (0..(1u32 << 24)).step_by(if cfg!(miri) { 1 << 18 } else { 4099 }) {
        if i != s.index()
            && t.lookup(Stag::new(i, s.key()), PD, Access::empty())
                .is_err()
        {
            invalid_indices += 1;
        }
    }
    assert!(invalid_indices > 0);
}

#[test]
fn double_deregister_and_unknown_stags_are_errors() {
    let t = MrTable::new(2);
    let s = t.register(region(8), PD, RW, 0).unwrap();
    t.deregister(s).unwrap();
    assert_eq!(t.deregister(s), Err(MemError::InvalidStag));
    assert_eq!(t.deregister(Stag(0)), Err(MemError::InvalidStag));
    assert_eq!(t.invalidate(s), Err(MemError::InvalidStag));
}

/// DDP-8.2-1, RDMAP-8.1.1-2: a stream of another PD cannot use the STag. The STag check
/// comes first (siw's order), so a stale STag is invalid whatever the PD.
/// DDP-8.2-4: protection-domain association.
#[test]
fn pd_mismatch_is_refused_after_the_stag_check() {
    let t = MrTable::new(4);
    let s = t.register(region(8), PdId(1), RW, 0).unwrap();
    assert_eq!(
        t.lookup(s, PdId(2), Access::empty()).unwrap_err(),
        LookupFault::WrongPd
    );
    assert_eq!(
        t.lookup_local(s, PdId(2), false).unwrap_err(),
        LookupFault::WrongPd
    );
    // PD comes before access rights.
    let ro = t.register(region(8), PdId(1), Access::empty(), 0).unwrap();
    assert_eq!(
        t.lookup(ro, PdId(2), Access::REMOTE_WRITE).unwrap_err(),
        LookupFault::WrongPd
    );
    t.deregister(s).unwrap();
    assert_eq!(
        t.lookup(s, PdId(2), Access::empty()).unwrap_err(),
        LookupFault::InvalidStag
    );
}

/// RDMAP-8.1.1-6: every combination of registered rights against every combination of
/// required rights; and `ibv_reg_mr`'s rule that remote write/atomic need local write.
/// DDP-8.3.1-6: read/write remote access granted per STag.
#[test]
fn every_access_flag_is_enforced() {
    let t = MrTable::new(64);
    for granted_bits in 0..=Access::all().bits() {
        let granted = Access::from_bits(granted_bits).unwrap();
        let r = t.register(region(8), PD, granted, 0);
        let needs_local_write =
            granted.contains(Access::REMOTE_WRITE) || granted.contains(Access::REMOTE_ATOMIC);
        if needs_local_write && !granted.contains(Access::LOCAL_WRITE) {
            assert_eq!(r, Err(MemError::InvalidAccess), "{granted:?}");
            continue;
        }
        let s = r.unwrap();
        for required_bits in 0..=Access::all().bits() {
            let required = Access::from_bits(required_bits).unwrap();
            let got = t.lookup(s, PD, required);
            if granted.contains(required) {
                assert!(got.is_ok(), "{granted:?} should allow {required:?}");
            } else {
                assert_eq!(
                    got.unwrap_err(),
                    LookupFault::AccessDenied,
                    "{granted:?} vs {required:?}"
                );
            }
        }
        assert_eq!(
            t.lookup_local(s, PD, true).is_ok(),
            granted.contains(Access::LOCAL_WRITE)
        );
        assert!(t.lookup_local(s, PD, false).is_ok(), "local read always");
        t.deregister(s).unwrap();
    }
    assert_eq!(t.registered(), 0);
}

/// DDP-7.1-12/13, RDMAP-7.2-11/12, DDP-8.3.1-4: both edges of a VA-based registration.
#[test]
fn bounds_at_both_edges() {
    let t = MrTable::new(1);
    let base = 0x7F00_1234_5000u64;
    let s = t.register(region(4096), PD, RW, base).unwrap();
    let g = t.lookup(s, PD, Access::REMOTE_WRITE).unwrap();
    assert_eq!(g.base_to(), base);
    assert_eq!(g.len(), 4096);
    assert_eq!(g.bounds(base, 4096), Ok(0));
    assert_eq!(g.bounds(base, 1), Ok(0));
    assert_eq!(g.bounds(base + 4095, 1), Ok(4095));
    assert_eq!(g.bounds(base + 4096, 0), Ok(4096), "zero length at the end");
    assert_eq!(g.bounds(base, 0), Ok(0));
    assert_eq!(g.bounds(base - 1, 1), Err(BoundsFault::OutOfBounds));
    assert_eq!(g.bounds(base - 1, 0), Err(BoundsFault::OutOfBounds));
    assert_eq!(g.bounds(base + 4096, 1), Err(BoundsFault::OutOfBounds));
    assert_eq!(g.bounds(base + 4097, 0), Err(BoundsFault::OutOfBounds));
    assert_eq!(g.bounds(base + 1, 4096), Err(BoundsFault::OutOfBounds));
    assert_eq!(g.bounds(base, 4097), Err(BoundsFault::OutOfBounds));
    assert_eq!(g.bounds(0, 1), Err(BoundsFault::OutOfBounds));
    // The accessors refuse the same ranges.
    assert_eq!(
        g.place_at(base + 4095, &[1, 2]),
        Err(BoundsFault::OutOfBounds)
    );
    assert_eq!(g.place(4095, &[1, 2]), Err(BoundsFault::OutOfBounds));
    assert_eq!(g.place(4097, &[]), Err(BoundsFault::OutOfBounds));
    assert_eq!(g.place(usize::MAX, &[1]), Err(BoundsFault::OutOfBounds));
    assert_eq!(g.copy_out(4090, &mut [0; 7]), Err(BoundsFault::OutOfBounds));
    assert_eq!(
        g.copy_out_at(base - 1, &mut [0; 1]),
        Err(BoundsFault::OutOfBounds)
    );
    assert_eq!(g.place_at(base + 4096, &[]), Ok(()));
}

/// DDP-7.1-14, RDMAP-7.2-13: TO + length wrapping 2^64 is a TO wrap, reported before any
/// bounds verdict; a registration whose TO range would wrap is refused.
#[test]
fn to_wrap() {
    let t = MrTable::new(2);
    // Registration ending exactly at the top of the TO space is allowed...
    let base = u64::MAX - 4096;
    let s = t.register(region(4096), PD, RW, base).unwrap();
    // ...one byte further is not.
    assert_eq!(
        t.register(region(4096), PD, RW, base + 1),
        Err(MemError::ToWrap)
    );
    let g = t.lookup(s, PD, Access::REMOTE_READ).unwrap();
    assert_eq!(g.bounds(u64::MAX - 1, 1), Ok(4095));
    assert_eq!(g.bounds(u64::MAX, 0), Ok(4096));
    assert_eq!(g.bounds(u64::MAX, 1), Err(BoundsFault::ToWrap));
    assert_eq!(g.bounds(u64::MAX - 8, 16), Err(BoundsFault::ToWrap));
    // Wrap is reported even where the start is also out of bounds.
    assert_eq!(g.bounds(3, usize::MAX), Err(BoundsFault::ToWrap));
    assert_eq!(
        g.copy_out_at(u64::MAX, &mut [0; 2]),
        Err(BoundsFault::ToWrap)
    );
    assert_eq!(g.place_at(u64::MAX - 2, &[0; 4]), Err(BoundsFault::ToWrap));
    // The mapping to Terminate errors.
    assert_eq!(
        BoundsFault::ToWrap.ddp_error(),
        warpcore_proto::DdpError::TaggedToWrap
    );
}

/// Zero-length regions and zero-length operations (DDP-5.2-9).
#[test]
fn zero_length() {
    let t = MrTable::new(2);
    let s = t.register(region(0), PD, RW, 0x1000).unwrap();
    let g = t.lookup(s, PD, Access::REMOTE_WRITE).unwrap();
    assert!(g.is_empty());
    assert_eq!(g.bounds(0x1000, 0), Ok(0));
    assert_eq!(g.bounds(0x1000, 1), Err(BoundsFault::OutOfBounds));
    assert_eq!(g.bounds(0x1001, 0), Err(BoundsFault::OutOfBounds));
    assert_eq!(g.place_at(0x1000, &[]), Ok(()));
    assert_eq!(g.copy_out(0, &mut []), Ok(()));
    assert_eq!(g.atomic(0).unwrap_err(), BoundsFault::OutOfBounds);
    drop(g);
    // Zero-length operations on a non-empty region, anywhere inside or at the end.
    let s2 = t.register(region(16), PD, RW, 0).unwrap();
    let g = t.lookup(s2, PD, Access::REMOTE_WRITE).unwrap();
    for to in 0..=16 {
        assert_eq!(g.place_at(to, &[]), Ok(()));
    }
}

#[test]
fn place_and_copy_out_round_trip() {
    let t = MrTable::new(1);
    let r = region(1 << 16);
    let s = t.register(r.clone(), PD, RW, r.as_ptr() as u64).unwrap();
    let base = r.as_ptr() as u64;
    let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
    {
        let g = t.lookup(s, PD, Access::REMOTE_WRITE).unwrap();
        let off = g.bounds(base + 500, data.len()).unwrap();
        assert_eq!(off, 500);
        g.place(off, &data).unwrap();
        g.place_at(base + 3000, &data[..10]).unwrap();
    }
    // The application sees the bytes through its copy accessor.
    let mut back = vec![0; 1000];
    r.read_at(500, &mut back).unwrap();
    assert_eq!(back, data);
    // And the engine reads them back for a Read Response.
    let g = t.lookup(s, PD, Access::REMOTE_READ).unwrap();
    let mut out = [0u8; 10];
    g.copy_out_at(base + 3000, &mut out).unwrap();
    assert_eq!(&out[..], &data[..10]);
    g.copy_out(0, &mut out).unwrap();
    assert_eq!(out, [0; 10], "untouched bytes stay zero");
}

#[test]
fn atomics_check_alignment_and_bounds() {
    let t = MrTable::new(1);
    let r = region(64);
    let s = t.register(r.clone(), PD, RW, 0).unwrap();
    let g = t
        .lookup(
            s,
            PD,
            Access::REMOTE_ATOMIC | Access::REMOTE_READ | Access::REMOTE_WRITE,
        )
        .unwrap();
    g.atomic(56).unwrap().store(0xABCD, Ordering::Relaxed);
    assert_eq!(g.atomic(57).unwrap_err(), BoundsFault::OutOfBounds);
    assert_eq!(g.atomic(60).unwrap_err(), BoundsFault::OutOfBounds);
    assert_eq!(g.atomic(4).unwrap_err(), BoundsFault::Misaligned);
    assert_eq!(r.atomic_u64_at(56).unwrap().load(Ordering::Relaxed), 0xABCD);
}

/// Invalidation (RDMAP-5.3-12): lookups fail from then on, the slot stays taken until the
/// registration is deregistered.
#[test]
fn invalidate_then_deregister() {
    let t = MrTable::new(1);
    let s = t.register(region(8), PD, RW, 0).unwrap();
    t.invalidate(s).unwrap();
    assert_eq!(
        t.lookup(s, PD, Access::empty()).unwrap_err(),
        LookupFault::InvalidStag
    );
    assert_eq!(t.invalidate(s), Err(MemError::InvalidStag));
    assert_eq!(t.registered(), 1);
    assert_eq!(t.register(region(8), PD, RW, 0), Err(MemError::TableFull));
    t.deregister(s).unwrap();
    assert_eq!(t.registered(), 0);
    assert!(t.register(region(8), PD, RW, 0).is_ok());
}

/// A table kept full but for one slot, whose application registers and deregisters over
/// and over (a buffer registered per I/O): an STag whose registration ended never names a
/// later registration within 256 x `MIN_SPARE_SLOTS` registrations. Free slots were reused
/// oldest first, but the one free slot was the only one: its key, 8 bits, came back after
/// 256 registrations and the stale STag (held by a peer, say) reached the new region.
#[test]
fn a_stale_stag_stays_stale_when_the_table_is_kept_nearly_full() {
    let t = MrTable::new(2);
    let _held = t.register(region(64), PD, RW, 0).unwrap();
    let old = t.register(region(64), PD, RW, 0).unwrap();
    t.deregister(old).unwrap();
    let r = region(64);
    for i in 0..scaled(256 * MIN_SPARE_SLOTS) {
        let s = t.register(Arc::clone(&r), PD, RW, 0).unwrap();
        assert!(
            s != old && !t.is_valid(old),
            "registration {i} after it brought the stale STag back"
        );
        assert_eq!(t.register(region(8), PD, RW, 0), Err(MemError::TableFull));
        t.deregister(s).unwrap();
    }
}

#[test]
fn table_full_then_reuse() {
    let t = MrTable::new(3);
    let stags: Vec<_> = (0..3)
        .map(|_| t.register(region(8), PD, RW, 0).unwrap())
        .collect();
    assert_eq!(t.register(region(8), PD, RW, 0), Err(MemError::TableFull));
    t.deregister(stags[1]).unwrap();
    let again = t.register(region(8), PD, RW, 0).unwrap();
    assert_ne!(again, stags[1]);
    assert!(!t.is_valid(stags[1]));
    assert_eq!(t.register(region(8), PD, RW, 0), Err(MemError::TableFull));
    assert!(t.lookup(stags[0], PD, Access::empty()).is_ok());
    assert!(t.lookup(stags[2], PD, Access::empty()).is_ok());
}

#[test]
#[should_panic(expected = "capacity")]
fn capacity_is_checked() {
    let _ = MrTable::new(MAX_CAPACITY + 1);
}

/// The table keeps the region alive while registered, and lets it go on deregistration.
#[test]
fn table_owns_a_reference_until_deregistration() {
    let t = MrTable::new(1);
    let r = region(32);
    let weak = Arc::downgrade(&r);
    let s = t.register(r, PD, RW, 0).unwrap();
    assert!(weak.upgrade().is_some());
    t.deregister(s).unwrap();
    assert!(weak.upgrade().is_none(), "freed after deregistration");
}

/// DDP-8.3.1-7: deregistration blocks while a placement holds the region, and the memory
/// is freed only after the guard is gone. The placing thread holds its guard across a
/// barrier and a pause, places after the deregistration started, then drops the guard.
#[test]
fn deregister_waits_for_in_flight_placement() {
    let t = Arc::new(MrTable::new(4));
    let r = region(4096);
    let weak = Arc::downgrade(&r);
    let s = t.register(r, PD, RW, 0).unwrap();
    let start = Arc::new(Barrier::new(2));
    let placed = Arc::new(AtomicBool::new(false));
    let deregistered = Arc::new(AtomicBool::new(false));

    let placer = {
        let (t, start, placed, deregistered) = (
            t.clone(),
            start.clone(),
            placed.clone(),
            deregistered.clone(),
        );
        thread::spawn(move || {
            let g = t.lookup(s, PD, Access::REMOTE_WRITE).unwrap();
            start.wait();
            // Wait until the deregistration has started: new lookups fail from then on,
            // while we still hold our guard.
            while t.lookup(s, PD, Access::REMOTE_WRITE).is_ok() {
                thread::yield_now();
            }
            // The deregistering thread is now blocked on our guard; give it time to
            // (wrongly) return.
            thread::sleep(Duration::from_millis(if cfg!(miri) { 5 } else { 50 }));
            assert!(
                !deregistered.load(Ordering::SeqCst),
                "deregister did not wait"
            );
            g.place_at(0, &[0x5A; 4096]).unwrap();
            assert!(
                weak.upgrade().is_some(),
                "memory alive while the guard is held"
            );
            placed.store(true, Ordering::SeqCst);
            drop(g);
            weak
        })
    };
    start.wait();
    t.deregister(s).unwrap();
    deregistered.store(true, Ordering::SeqCst);
    assert!(
        placed.load(Ordering::SeqCst),
        "returned before the guard dropped"
    );
    let weak = placer.join().unwrap();
    assert!(weak.upgrade().is_none());
}

/// Registration churn on one thread while another places continuously: every lookup
/// either fails cleanly or places into live memory. Run under Miri (and ASan) this is the
/// use-after-free check; natively it checks that nothing hangs or panics.
#[test]
fn churn_while_placing() {
    let t = Arc::new(MrTable::new(2));
    let current = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let placer = {
        let (t, current, stop) = (t.clone(), current.clone(), stop.clone());
        thread::spawn(move || {
            let mut ok = 0u64;
            let data = [0xEEu8; 256];
            while !stop.load(Ordering::Relaxed) {
                let s = Stag(current.load(Ordering::Relaxed) as u32);
                if let Ok(g) = t.lookup(s, PD, Access::REMOTE_WRITE) {
                    g.place_at(0, &data).unwrap();
                    ok += 1;
                }
            }
            ok
        })
    };
    for _ in 0..scaled(5_000) {
        let s = t.register(region(256), PD, RW, 0).unwrap();
        current.store(u64::from(s.0), Ordering::Relaxed);
        thread::yield_now();
        t.deregister(s).unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let _placements = placer.join().unwrap();
    assert_eq!(t.registered(), 0);
}

/// RFC 7306 atomics from two cores on the same word are exact: each thread looks the STag
/// up for every operation, as an engine core does per Atomic Request.
#[test]
fn concurrent_atomics_on_one_word_sum_exactly() {
    let t = Arc::new(MrTable::new(1));
    let r = region(64);
    let s = t.register(r.clone(), PD, RW, 0).unwrap();
    let per_thread = scaled(200_000) as u64;
    let barrier = Arc::new(Barrier::new(2));
    let workers: Vec<_> = (0..2)
        .map(|i| {
            let (t, barrier) = (t.clone(), barrier.clone());
            thread::spawn(move || {
                barrier.wait();
                for _ in 0..per_thread {
                    let g = t
                        .lookup(s, PD, Access::REMOTE_ATOMIC | Access::REMOTE_READ)
                        .unwrap();
                    // Thread 0 adds 1, thread 1 adds 2^32: a lost update in either
                    // half shows.
                    g.atomic(8)
                        .unwrap()
                        .fetch_add(if i == 0 { 1 } else { 1 << 32 }, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    let word = r.atomic_u64_at(8).unwrap().load(Ordering::SeqCst);
    assert_eq!(word, per_thread | per_thread << 32);
}

/// The table and regions are shared between application threads and engine cores.
#[test]
fn table_and_region_are_send_and_sync() {
    fn shared<T: Send + Sync>() {}
    shared::<MrTable>();
    shared::<Region>();
    shared::<Arc<MrTable>>();
}

/// The guard feeds `warpcore_proto`'s own checks: DDP's tagged range and RDMAP's remote
/// access check (RDMAP-7.2-9..13) see the same registration the guard places into.
#[test]
fn guard_views_feed_the_protocol_checks() {
    use warpcore_proto::ddp::{TaggedFault, TaggedRegion};
    use warpcore_proto::rdmap::{check_remote_access, Access as RemoteAccess, StagFault};
    use warpcore_proto::RdmapError;

    let t = MrTable::new(2);
    let base = 0x10_0000u64;
    let s = t
        .register(region(4096), PD, Access::REMOTE_READ, base)
        .unwrap();
    let g = t.lookup(s, PD, Access::empty()).unwrap();
    assert_eq!(g.tagged_region(), TaggedRegion { base, len: 4096 });
    let check = |to, len, access| {
        check_remote_access(
            t.lookup(s, PD, Access::empty())
                .map(|g| g.access_region())
                .map_err(|f| f.stag_fault()),
            to,
            len,
            access,
        )
    };
    assert_eq!(check(base, 4096, RemoteAccess::RemoteRead), Ok(()));
    assert_eq!(
        check(base + 1, 4096, RemoteAccess::RemoteRead),
        Err(RdmapError::BaseOrBounds)
    );
    assert_eq!(
        check(base, 8, RemoteAccess::RemoteAtomic),
        Err(RdmapError::AccessRights)
    );
    let other_pd = t
        .lookup(s, PdId(99), Access::empty())
        .map(|g| g.access_region())
        .map_err(|f| f.stag_fault());
    assert_eq!(other_pd.unwrap_err(), StagFault::NotAssociated);
    assert_eq!(
        LookupFault::WrongPd.tagged_fault(),
        TaggedFault::NotAssociated
    );
    assert_eq!(
        LookupFault::AccessDenied.tagged_fault(),
        TaggedFault::InvalidStag
    );
    assert_eq!(
        LookupFault::InvalidStag.rdmap_error(),
        RdmapError::InvalidStag
    );
}
