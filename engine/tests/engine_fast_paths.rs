//! The fast paths that the `self-check` feature can turn off
//! (`warpcore_engine::core::set_general_paths_only`) against their general paths: the
//! same work run both ways gives the same completions, events, placed data and counters
//! (FPDUs and TCP segments sent: the same wire traffic).

mod common;

use common::*;
use warpcore_engine::core::set_general_paths_only;
use warpcore_engine::mem::Access;
use warpcore_engine::tcp::link::LinkConfig;
use warpcore_engine::{EngineConfig, MpaParams, SendOp, SendWr};

/// Everything observable of one run.
#[derive(Debug, PartialEq)]
struct Outcome {
    completions_a: Vec<String>,
    completions_b: Vec<String>,
    events_a: Vec<String>,
    events_b: Vec<String>,
    memory_b: Vec<u8>,
    memory_a: Vec<u8>,
    stats_a: String,
    stats_b: String,
}

/// Writes of every shape (empty, one octet, small, several FPDUs, more than the send
/// buffer holds, several SGEs, unsignalled, fenced behind a Read, every length around the
/// smallest sent from registered memory and around the largest in one FPDU, more small
/// ones than the send buffer holds), small ones posted to an empty send queue, then, if
/// `fail`, one to a bad STag (the peer's Terminate, the flush of what follows). With
/// `source_gone`, one whose local region is deregistered after it was posted (a local
/// protection completion, a local catastrophic Terminate, departure 8). With `markers`, B
/// asks A for markers (MPA-4.3): A's FPDUs carry them.
fn run(general: bool, fail: bool, source_gone: bool, markers: bool) -> Outcome {
    set_general_paths_only(general);
    // The smallest TCP send buffer allowed and a large FPDU budget, so that a run of small
    // Writes fills the buffer within one visit.
    let mut cfg = EngineConfig::default();
    cfg.tcp.tx_buffer = 2 * 65536;
    cfg.tx_budget_fpdus = 1024;
    let mut p = Pair::new(&LinkConfig::default(), &cfg);
    let pb = MpaParams {
        markers,
        ..MpaParams::default()
    };
    let (qa, _qb) = p.connect_with(&MpaParams::default(), &pb, 1024);
    let (ra, sa) = p.a.region(1 << 20, all_access());
    let (rb, sb) = p.b.region(1 << 20, all_access() | Access::REMOTE_READ);
    ra.write_at(0, &pattern(1 << 20, 7)).unwrap();
    rb.write_at(0, &pattern(1 << 20, 3)).unwrap();
    let mut id = 0;
    let mut post = |p: &mut Pair,
                    op: SendOp,
                    list: &[(warpcore_engine::mem::Stag, u64, u32)],
                    signaled: bool,
                    fence: bool| {
        id += 1;
        let wr = SendWr {
            signaled,
            fence,
            ..send_wr(id, op, list)
        };
        p.a.core.post_send(qa, wr).unwrap();
    };
    post(&mut p, write_op(sb.0, 0), &[], true, false);
    post(&mut p, write_op(sb.0, 10), &[(sa, 0, 1)], true, false);
    post(&mut p, write_op(sb.0, 100), &[(sa, 64, 64)], false, false);
    post(
        &mut p,
        write_op(sb.0, 1000),
        &[(sa, 5000, 3000)],
        true,
        false,
    );
    post(
        &mut p,
        write_op(sb.0, 9000),
        &[(sa, 100, 10), (sa, 9000, 4000), (sa, 1, 1)],
        true,
        false,
    );
    post(
        &mut p,
        read_op(sb.0, 200_000),
        &[(sa, 300_000, 5000)],
        true,
        false,
    );
    post(
        &mut p,
        write_op(sb.0, 200_000),
        &[(sa, 0, 5000)],
        true,
        true,
    );
    post(
        &mut p,
        write_op(sb.0, 400_000),
        &[(sa, 0, 300_000)],
        true,
        false,
    );
    for k in 0..20u64 {
        post(
            &mut p,
            write_op(sb.0, 800_000 + k * 64),
            &[(sa, k * 64, 64)],
            k % 3 != 0,
            false,
        );
    }
    // The smallest FPDU sent from registered memory is 512 payload octets (the default
    // `tx_from_memory_min`); the largest one-FPDU Write at MTU 1500 is ~1,440 octets.
    for (k, len) in (500u32..530).chain(1380..1470).enumerate() {
        let k = k as u64;
        post(
            &mut p,
            write_op(sb.0, 820_000 + k * 1800),
            &[(sa, 7 + k * 3, len)],
            true,
            false,
        );
    }
    // 400 Writes of 500 octets (each one FPDU, copied) posted at once: more than the send
    // buffer holds, so some find no room and wait for the acknowledgements.
    for k in 0..400u64 {
        post(
            &mut p,
            write_op(sb.0, 420_000 + k * 500),
            &[(sa, 200_000 + k * 500, 500)],
            k % 7 != 0,
            false,
        );
    }
    // Once all of that is done: Writes posted to an empty send queue, framed at post
    // (`Qp::write_at_post`) on the fast path, by the loop on the general one: lengths
    // around the marker spacing (A's FPDUs carry markers with `markers`), one sent from
    // registered memory (declined at post: the rest then queue behind it), and more.
    p.run(20_000);
    let lens = [
        0u32, 1, 2, 3, 4, 7, 8, 15, 16, 63, 64, 65, 255, 256, 300, 480, 488, 496,
    ]
    .into_iter()
    .chain([500, 504, 505, 511, 900, 40, 8, 1]);
    for (k, len) in lens.enumerate() {
        let k = k as u64;
        post(
            &mut p,
            write_op(sb.0, 940_000 + k * 1024),
            &[(sa, 3 + k * 5, len)],
            k % 4 != 1,
            false,
        );
    }
    if fail {
        post(
            &mut p,
            write_op(0xFFFF_FF00, 0),
            &[(sa, 0, 64)],
            true,
            false,
        );
        post(&mut p, write_op(sb.0, 0), &[(sa, 0, 64)], true, false);
    }
    if source_gone {
        let (_rg, sg) = p.a.region(4096, all_access());
        post(&mut p, write_op(sb.0, 0), &[(sg, 0, 64)], true, false);
        post(&mut p, write_op(sb.0, 64), &[(sa, 0, 64)], true, false);
        p.a.mrs.deregister(sg).unwrap();
    }
    p.run(20_000);
    set_general_paths_only(false);
    let (ca, cb) = (p.a.take_completions(), p.b.take_completions());
    let (ea, eb) = (p.a.take_events(), p.b.take_events());
    Outcome {
        completions_a: dbg(&ca),
        completions_b: dbg(&cb),
        events_a: dbg(&ea),
        events_b: dbg(&eb),
        memory_b: read_region(&rb, 0, 1 << 20),
        memory_a: read_region(&ra, 0, 1 << 20),
        stats_a: format!("{:?}", p.a.core.stats()),
        stats_b: format!("{:?}", p.b.core.stats()),
    }
}

#[test]
fn writes_take_the_fast_path_as_the_general_one() {
    for (fail, source_gone, markers) in [
        (false, false, false),
        (true, false, false),
        (false, true, false),
        (false, false, true),
        (true, false, true),
        (false, true, true),
    ] {
        let fast = run(false, fail, source_gone, markers);
        let general = run(true, fail, source_gone, markers);
        assert!(!fast.completions_a.is_empty());
        // The lost source is found, not skipped.
        let protection = fast
            .completions_a
            .iter()
            .any(|c| c.contains("LocalProtection"));
        assert_eq!(protection, source_gone);
        let short = |o: &Outcome| {
            format!(
                "{:?} {:?} {:?} {:?} {} {}",
                o.completions_a, o.completions_b, o.events_a, o.events_b, o.stats_a, o.stats_b
            )
        };
        assert_eq!(
            short(&fast),
            short(&general),
            "fail {fail} source_gone {source_gone} markers {markers}"
        );
        assert!(fast.memory_a == general.memory_a && fast.memory_b == general.memory_b);
    }
}
