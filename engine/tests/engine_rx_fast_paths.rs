//! The receive side's fast paths against the general path
//! (`warpcore_engine::core::set_general_paths_only`): the plain-Write placement
//! (`Qp::rx_plain_write`) and the data messages' decode (`rx::plain_data`). Writes that
//! place and Writes the receiver must refuse (unknown or stale STag, another protection
//! domain, no remote write right, TO below the base, beyond the end; our sender refuses a
//! wrapping TO itself), Sends of every opcode and shape and Sends it must refuse, and
//! hostile segments from a raw peer give the same completions, events (the same
//! Terminate), placed data and counters both ways, and a refused Write places nothing.

mod common;

use common::*;
use warpcore_engine::core::set_general_paths_only;
use warpcore_engine::mem::{Access, PdId, Region};
use warpcore_engine::SendOp;

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

/// A Send of `len` octets: plain (0), with Solicited Event (1), with Invalidate of B's
/// first invalidatable region (2) or of an STag B never registered (3), both flags and
/// B's second invalidatable region (4).
type SendShot = (u8, u32);

/// Posts `recvs` (SGE lists `(offset, len)` into B's region) on B, then `sends` from A, both
/// ways.
fn run_sends(general: bool, recvs: &[&[(u64, u32)]], sends: &[SendShot]) -> Outcome {
    set_general_paths_only(general);
    let mut p = Pair::default_pair();
    let (qa, qb) = p.connect();
    let (ra, sa) = p.a.region(LEN, all_access());
    ra.write_at(0, &pattern(LEN, 7)).unwrap();
    let (rb, sb) = p.b.region(LEN, all_access());
    rb.write_at(0, &pattern(LEN, 3)).unwrap();
    let (ri, si) = p.b.region(4096, all_access() | Access::REMOTE_INVALIDATE);
    let (rj, sj) = p.b.region(4096, all_access() | Access::REMOTE_INVALIDATE);
    let stags = [sb, si, sj];
    for (k, list) in recvs.iter().enumerate() {
        let list: Vec<_> = list.iter().map(|&(o, l)| (sb, o, l)).collect();
        p.b.core
            .post_recv(qb, recv_wr(100 + k as u64, &list))
            .unwrap();
    }
    for (k, &(kind, len)) in sends.iter().enumerate() {
        let op = match kind {
            0 => SendOp::Send,
            1 => SendOp::SendSe,
            2 => SendOp::SendInvalidate { stag: si.0 },
            3 => SendOp::SendInvalidate { stag: 0x00FF_FF00 },
            _ => SendOp::SendSeInvalidate { stag: sj.0 },
        };
        let src = k as u64 * 97 % (LEN as u64 - u64::from(len));
        let list: &[_] = if len == 0 { &[] } else { &[(sa, src, len)] };
        post_a(&mut p, qa, k as u64, op, list);
    }
    p.run(5_000);
    set_general_paths_only(false);
    let (ca, cb) = (p.a.take_completions(), p.b.take_completions());
    let (ea, eb) = (p.a.take_events(), p.b.take_events());
    // The STags' keys differ from run to run: name them by index.
    let named = |lines: Vec<String>| -> Vec<String> {
        lines
            .into_iter()
            .map(|mut e| {
                for (i, s) in stags.iter().enumerate() {
                    e = e.replace(&format!("stag: {},", s.0), &format!("stag: B{i},"));
                    e = e.replace(&format!("Some({})", s.0), &format!("Some(B{i})"));
                    e = e.replace(
                        &format!("rsvd_ulp2: {},", s.0),
                        &format!("rsvd_ulp2: B{i},"),
                    );
                }
                e
            })
            .collect()
    };
    Outcome {
        completions_a: dbg(&ca),
        completions_b: named(dbg(&cb)),
        events_a: named(dbg(&ea)),
        events_b: named(dbg(&eb)),
        memory: vec![
            read_region(&rb, 0, LEN),
            read_region(&ri, 0, 4096),
            read_region(&rj, 0, 4096),
        ],
        stats_a: format!("{:?}", p.a.core.stats()),
        stats_b: format!("{:?}", p.b.core.stats()),
    }
}

/// Runs Sends both ways, checks they agree, and returns the fast one.
fn sends_both(recvs: &[&[(u64, u32)]], sends: &[SendShot]) -> Outcome {
    let fast = run_sends(false, recvs, sends);
    let general = run_sends(true, recvs, sends);
    assert_eq!(fast, general, "{recvs:?} {sends:?}");
    fast
}

#[test]
fn sends_place_and_complete_the_same_both_ways() {
    // One SGE, three SGEs (the Send spread over them at its offsets), a large receive for
    // a Send of many segments, an empty one for an empty Send, the four opcodes.
    let recvs: [&[(u64, u32)]; 7] = [
        &[(0, 64)],
        &[(100, 10), (1000, 4000), (9000, 50)],
        &[(20_000, 30_000)],
        &[],
        &[(60_000, 64)],
        &[(61_000, 64)],
        &[(62_000, 3000)],
    ];
    let sends = [
        (0, 64),
        (1, 4060),
        (0, 25_000),
        (0, 0),
        (2, 64),
        (1, 1),
        (4, 2000),
    ];
    let o = sends_both(&recvs, &sends);
    assert!(o.events_a.is_empty() && o.events_b.is_empty(), "{o:?}");
    assert_eq!(o.completions_b.len(), 7, "{o:?}");
    assert!(
        o.completions_b[4].contains("invalidated: Some(B1)"),
        "{o:?}"
    );
}

#[test]
fn refused_sends_terminate_the_same_both_ways() {
    let one: [&[(u64, u32)]; 1] = [&[(0, 64)]];
    // Longer than the receive, no receive posted, an Invalidate of an unknown STag.
    for (recvs, sends) in [
        (&one[..], &[(0u8, 65u32)][..]),
        (&one[..], &[(0, 64), (0, 64)][..]),
        (&[][..], &[(1, 8)][..]),
        (&one[..], &[(3, 8)][..]),
        (&one[..], &[(2, 8), (2, 8)][..]),
    ] {
        let o = sends_both(recvs, sends);
        assert!(
            o.events_a.iter().any(|e| e.contains("RemoteTerminate")),
            "{sends:?}: {o:?}"
        );
    }
}

/// Hostile segments from a raw peer (`warpcore_engine::fuzzing`): Writes and Sends with
/// their control octets, T bit, QN, MSN, MO, STag, TO, length or CRC perturbed, between good
/// ones, in TCP segments cut anywhere. The fast paths take the good ones and must leave every
/// perturbed one to the general path: the same Terminate, placement and receives both ways.
#[test]
fn hostile_writes_and_sends_are_answered_the_same_both_ways() {
    use warpcore_engine::fuzzing::{run, MsnPick, Piece, RxInput, Seg, Setup, StagPick, ToPick};
    use warpcore_engine::proto::wire::rdmap::Opcode;
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut rnd = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    let good = |opcode: Opcode, stag: u8, to: u16, len: u16| {
        Seg::plain(opcode, StagPick::Region(stag), ToPick::Start(to), len)
    };
    let opcodes = [
        Opcode::Write,
        Opcode::Send,
        Opcode::SendSe,
        Opcode::SendInvalidate,
        Opcode::SendSeInvalidate,
        Opcode::ReadResponse,
    ];
    let mut terminates = 0;
    // Every perturbation of every opcode, eight times (the flipped control bit, the T bit
    // and the Invalidate STag's region taken from the round).
    let mut cases = Vec::new();
    for round in 0..8u8 {
        for kind in 0..10u8 {
            for op in opcodes {
                cases.push((round, kind, op));
            }
        }
    }
    for (round, kind, opcode) in cases {
        let mut pieces = vec![
            Piece::Seg(good(Opcode::Write, 0, 0, 64)),
            Piece::Seg(good(Opcode::Send, 0, 0, 32)),
        ];
        // Into region 0 (writable) but for one round in four, in its first 256 octets.
        let stag = if round % 4 == 3 { rnd(6) as u8 } else { 0 };
        let mut s = good(opcode, stag, rnd(256) as u16, 1 + rnd(200) as u16);
        // A Send's Invalidate field names a region; with the T bit flipped, region 0 (the
        // STag a Write's header would have there, the QN and MSN its TO).
        s.inv = StagPick::Region(if kind == 2 { 0 } else { round % 3 });
        match kind {
            0 => s.ctrl_noise = Some((1 << round, 0)),
            1 => s.ctrl_noise = Some((0, 1 << round)),
            2 => s.tagged = Some(round % 2 == 0),
            3 => s.qn = Some(u32::from(round % 5)),
            4 => s.msn = MsnPick::Next(round as i8 % 3 - 1),
            5 => s.mo = rnd(100) as u32,
            6 => s.stag = StagPick::WrongKey(rnd(5) as u8, 1 + rnd(200) as u8),
            7 => s.to = ToPick::End(rnd(200) as i16 - 100),
            8 => s.crc_ok = false,
            _ => s.last = false,
        }
        pieces.push(Piece::Seg(s));
        pieces.push(Piece::Seg(good(Opcode::Write, 0, 100, 64)));
        pieces.push(Piece::Seg(good(Opcode::Send, 0, 0, 16)));
        let input = RxInput {
            setup: Setup {
                rev1: false,
                crc: true,
                markers_rx: false,
                markers_tx: false,
                // Peer-to-peer: the first ULPDU must be the RTR (MPA fence).
                p2p: rnd(4) == 0,
                rfc7306: rnd(2) == 0,
                recvs: 3,
                reads: rnd(2) as u8,
                atomic: false,
                fin: false,
            },
            pieces,
            cuts: if rnd(2) == 0 {
                Vec::new()
            } else {
                vec![1 + rnd(200) as u16, 1 + rnd(1500) as u16]
            },
        };
        set_general_paths_only(false);
        let fast = format!("{:?}", run(&input));
        set_general_paths_only(true);
        let general = format!("{:?}", run(&input));
        set_general_paths_only(false);
        assert_eq!(fast, general, "{input:?}");
        terminates += usize::from(fast.contains("terminates: [T"));
    }
    // Most perturbations are refused: the comparison covered the Terminates.
    assert!(terminates > 100, "{terminates}");
}
