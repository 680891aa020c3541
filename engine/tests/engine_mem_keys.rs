//! The STag table's allocation keys (docs/engine.md, "Memory windows, fast registration,
//! invalidation"; `MrTable::new`): the keys the table chooses follow a per-slot sequence
//! that the application's own keys (a window's binds, a fast registration's key) do not
//! move.

use std::sync::Arc;

use warpcore_engine::mem::{Access, MrTable, MwType, PdId, Region, Stag};

const PD: PdId = PdId(7);

/// Allocates a window, binds it `binds` times (each under the next key, as the verbs'
/// `ibv_inc_rkey` does), deallocates it, then registers and deregisters regions until one
/// lands in the window's old slot: that registration's STag, and the window's.
fn next_registration_of_a_window_slot(binds: usize) -> (Stag, Stag) {
    let t = MrTable::with_seed(2, 1);
    let rights = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::MW_BIND;
    let r = Arc::new(Region::allocate(64, 64).unwrap());
    let mr = t.register(Arc::clone(&r), PD, rights, 0).unwrap();
    let w = t.alloc_mw(PD, MwType::Type1).unwrap();
    let mut cur = w;
    for _ in 0..binds {
        cur = t
            .bind_mw(
                w,
                cur.key().wrapping_add(1),
                mr,
                PD,
                0,
                64,
                Access::REMOTE_WRITE,
                None,
            )
            .unwrap();
    }
    t.deallocate(w, PD).unwrap();
    loop {
        let s = t.register(Arc::clone(&r), PD, rights, 0).unwrap();
        if s.index() == w.index() {
            return (s, w);
        }
        t.deregister(s).unwrap();
    }
}

/// A window rebound through the key space does not move its slot's allocation keys: the
/// slot's next registration gets the key it gets when the window was never bound, one
/// step after the window's allocation key, never that key itself. (Advanced from the
/// slot's last key, as before, the next allocation's key followed the last bind's, so the
/// STags the table hands out of a slot drifted with the application's keys.) Stale STags
/// of the binds themselves may still name it: those keys are the application's choice
/// (DDP-8.3-2; docs/engine.md).
#[test]
fn a_window_s_binds_do_not_move_its_slot_s_allocation_keys() {
    let (plain, w) = next_registration_of_a_window_slot(0);
    assert_ne!(
        plain, w,
        "the next allocation never takes the previous one's key"
    );
    for binds in [1, 2, 17, 255, 256, 300] {
        let (after_binds, w2) = next_registration_of_a_window_slot(binds);
        assert_eq!(w2, w, "same seed, same window");
        assert_eq!(
            after_binds, plain,
            "after {binds} binds the slot's next registration got {after_binds:?}, \
             not the table's own next key {plain:?}"
        );
    }
}
