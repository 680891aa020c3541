//! The receive side's plain-Write fast path (`Qp::rx_plain_write`) against the general
//! path (`warpcore_engine::core::set_general_paths_only`): Writes that place and Writes that
//! the receiver must refuse (unknown or stale STag, another protection domain, no remote
//! write right, TO below the base, beyond the end; our sender refuses a wrapping TO itself)
//! give the same completions, events (the same Terminate), placed data and counters both
//! ways, and a refused Write places nothing.

mod common;

use common::*;
use warpcore_engine::core::set_general_paths_only;
use warpcore_engine::mem::{Access, PdId, Region};

fn dbg<T: std::fmt::Debug>(v: &[T]) -> Vec<String> {
    v.iter().map(|x| format!("{x:?}")).collect()
}

/// Everything observable of one run.
#[derive(Debug, PartialEq)]
struct Outcome {
    completions_a: Vec<String>,
    completions_b: Vec<String>,
    events_a: Vec<String>,
    events_b: Vec<String>,
    memory: Vec<Vec<u8>>,
    stats_a: String,
    stats_b: String,
}

/// The receiver's regions: 0 and 1 zero-based with every right (64 KiB), 2 based at
/// `BASE` (64 KiB), 3 without the remote write right, 4 in another protection domain.
const BASE: u64 = 0x1_0000_0000;
const LEN: usize = 1 << 16;

/// A Write of `len` octets of A's source region to (`target` region of B, `to`); a target
/// of `None` is an STag that B never registered.
type Shot = (Option<usize>, u64, u32);

/// Runs `shots` in one burst and then, if `late` is given, deregisters B's region 1 and
/// runs `late` (Writes to a stale STag among them), both ways.
fn run(general: bool, shots: &[Shot], late: &[Shot]) -> Outcome {
    set_general_paths_only(general);
    let mut p = Pair::default_pair();
    let (qa, _qb) = p.connect();
    let (ra, sa) = p.a.region(LEN, all_access());
    ra.write_at(0, &pattern(LEN, 7)).unwrap();
    let mut regions = Vec::new();
    let mut stags = Vec::new();
    let mut reg = |access: Access, pd: PdId, base: u64| {
        let r = std::sync::Arc::new(Region::allocate(LEN, 4096).expect("alloc"));
        r.write_at(0, &pattern(LEN, 3 + regions.len() as u8))
            .unwrap();
        let s =
            p.b.mrs
                .register(std::sync::Arc::clone(&r), pd, access, base)
                .expect("register");
        regions.push(r);
        stags.push(s);
    };
    reg(all_access(), PD, 0);
    reg(all_access(), PD, 0);
    reg(all_access(), PD, BASE);
    reg(Access::LOCAL_WRITE | Access::REMOTE_READ, PD, 0);
    reg(all_access(), PdId(PD.0 + 1), 0);
    let mut id = 0;
    let mut fire = |p: &mut Pair, list: &[Shot]| {
        for &(target, to, len) in list {
            id += 1;
            let stag = target.map_or(0x00FF_FF00, |t| stags[t].0);
            let src = id * 97 % (LEN as u64 - u64::from(len));
            post_a(p, qa, id, write_op(stag, to), &[(sa, src, len)]);
        }
        p.run(5_000);
    };
    fire(&mut p, shots);
    if !late.is_empty() {
        p.b.mrs.deregister(stags[1]).expect("deregister");
        fire(&mut p, late);
    }
    set_general_paths_only(false);
    let (ca, cb) = (p.a.take_completions(), p.b.take_completions());
    let (ea, eb) = (p.a.take_events(), p.b.take_events());
    // The STags' keys differ from run to run: a Terminate names B's regions by index.
    let named = |events: Vec<String>| -> Vec<String> {
        events
            .into_iter()
            .map(|mut e| {
                for (i, s) in stags.iter().enumerate() {
                    e = e.replace(&format!("stag: {},", s.0), &format!("stag: B{i},"));
                }
                e
            })
            .collect()
    };
    Outcome {
        completions_a: dbg(&ca),
        completions_b: dbg(&cb),
        events_a: named(dbg(&ea)),
        events_b: named(dbg(&eb)),
        memory: regions.iter().map(|r| read_region(r, 0, LEN)).collect(),
        stats_a: format!("{:?}", p.a.core.stats()),
        stats_b: format!("{:?}", p.b.core.stats()),
    }
}

/// Runs both ways, checks they agree, and returns the fast one.
fn both(shots: &[Shot], late: &[Shot]) -> Outcome {
    let fast = run(false, shots, late);
    let general = run(true, shots, late);
    assert_eq!(
        (
            &fast.completions_a,
            &fast.completions_b,
            &fast.events_a,
            &fast.events_b,
            &fast.stats_a,
            &fast.stats_b
        ),
        (
            &general.completions_a,
            &general.completions_b,
            &general.events_a,
            &general.events_b,
            &general.stats_a,
            &general.stats_b
        ),
        "{shots:?} {late:?}"
    );
    assert!(fast.memory == general.memory, "{shots:?} {late:?}");
    fast
}

/// Good Writes: small and large, alternating regions (a held guard let go and taken
/// again), a region based at a high TO, its first and last octets.
fn good() -> Vec<Shot> {
    let mut v = vec![
        (Some(0), 0, 64),
        (Some(0), 64, 64),
        (Some(1), 100, 1),
        (Some(0), 1000, 5000),
        (Some(2), BASE, 64),
        (Some(2), BASE + LEN as u64 - 64, 64),
        (Some(0), LEN as u64 - 1, 1),
        (Some(1), 0, 20_000),
    ];
    for k in 0..30 {
        v.push((Some(k % 2), 40_000 + k as u64 * 64, 64));
    }
    v
}

#[test]
fn good_writes_place_the_same_both_ways() {
    let o = both(&good(), &[(Some(0), 30_000, 64)]);
    assert!(o.events_a.is_empty() && o.events_b.is_empty(), "{o:?}");
    assert_ne!(o.memory[0], pattern(LEN, 3));
}

#[test]
fn refused_writes_terminate_the_same_both_ways() {
    let faults: [(&str, Shot); 7] = [
        ("unknown STag", (None, 0, 64)),
        ("TO below the base", (Some(2), BASE - 1, 64)),
        ("beyond the end", (Some(0), LEN as u64 - 10, 64)),
        ("TO at the top of the space", (Some(0), u64::MAX - 64, 64)),
        ("no remote write right", (Some(3), 0, 64)),
        ("another PD", (Some(4), 0, 64)),
        ("one octet past the end", (Some(2), BASE + LEN as u64, 1)),
    ];
    for (what, bad) in faults {
        // After good Writes to the same region in the same burst (a held guard that
        // answers the lookup, then its bounds refuse), and alone.
        for before in [good(), Vec::new()] {
            let mut shots = before.clone();
            shots.push(bad);
            shots.push((Some(0), 0, 64));
            let o = both(&shots, &[]);
            // The Terminate itself is compared in `both` (the event carries its report).
            assert!(
                o.events_a.iter().any(|e| e.contains("RemoteTerminate")),
                "{what}: {o:?}"
            );
            // Nothing of the refused Write (or after it) landed: the outcome is that of
            // the good Writes alone.
            let alone = both(&before, &[]);
            assert!(o.memory == alone.memory, "{what}");
        }
    }
    // A stale STag (deregistered after it was written to).
    let o = both(&good(), &[(Some(1), 0, 64)]);
    assert!(
        o.events_a.iter().any(|e| e.contains("RemoteTerminate")),
        "{o:?}"
    );
}
