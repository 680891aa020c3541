//! Differential tests (issue 11): the same seeded workload over the in-memory link, with 1 %
//! loss, reordering and duplication, through Warpcore's own TCP and through the smoltcp
//! reference. Both must deliver every octet in order, byte for byte (the pattern check in
//! `common::bidirectional`); ours must not take longer in simulated time, which is what the
//! TCP was rewritten for.

mod common;

use common::*;
use smoltcp::time::{Duration, Instant};
use warpcore_tcp::link::{self, LinkConfig, LinkEnd};
use warpcore_tcp::{Stack, TcpImplementation, TcpTuning};

const MIB: u64 = 1 << 20;

fn stacks(cfg: &LinkConfig, imp: TcpImplementation) -> (Stack<LinkEnd>, Stack<LinkEnd>) {
    let (ea, eb) = link::pair(cfg);
    let a = Stack::with_implementation(ea, &config(1, IP_A), Instant::ZERO, imp).expect("a");
    let b = Stack::with_implementation(eb, &config(2, IP_B), Instant::ZERO, imp).expect("b");
    (a, b)
}

fn faulty(seed: u64) -> LinkConfig {
    faulty_link(seed, 0.01)
}

/// Runs the workload through one implementation; returns the simulated time and the frames
/// the link lost.
fn run(imp: TcpImplementation, seed: u64, total: u64) -> (Duration, u64) {
    let (a, b, t, _) = workload(imp, seed, total, false);
    let lost = a.device().tx_fault_stats().lost + b.device().tx_fault_stats().lost;
    (t, lost)
}

/// The seeded lossy workload, with the seeded in-place reader when `in_place`; returns the
/// two stacks, the simulated time and the octets taken in place.
fn workload(
    imp: TcpImplementation,
    seed: u64,
    total: u64,
    in_place: bool,
) -> (Stack<LinkEnd>, Stack<LinkEnd>, Duration, u64) {
    let (mut a, mut b) = stacks(&faulty(seed), imp);
    let (t, taken) = bidirectional_in_place(
        &mut a,
        &mut b,
        total,
        &TcpTuning::default(),
        sim_clock,
        next_delivery,
        Duration::from_secs(3600),
        in_place.then_some(seed),
    );
    (a, b, t, taken)
}

#[test]
fn same_seeded_lossy_workload_is_byte_exact_through_both_implementations() {
    for seed in [1_u64, 0xfeed, 0x1234_5678] {
        let (ours, lost_o) = run(TcpImplementation::Warpcore, seed, 8 * MIB);
        let (reference, lost_r) = run(TcpImplementation::SmoltcpReference, seed, 8 * MIB);
        eprintln!(
            "seed {seed:#x}: warpcore {ours} ({lost_o} frames lost), smoltcp reference \
             {reference} ({lost_r} frames lost)"
        );
        assert!(lost_o > 0 && lost_r > 0, "the link must have lost frames");
        assert!(
            ours <= reference,
            "seed {seed:#x}: our TCP took {ours}, the reference {reference}"
        );
    }
}

/// Issue 12 item 2: in-order payload offered in place (`Stack::poll_with`) while nothing is
/// queued, the rest queued for `recv_with`. A reader that takes nothing, everything or a
/// random prefix of each offer, over a link with 1 % loss, reordering and duplication, must
/// still see every octet once and in order (the pattern check), through both paths; the
/// reference never offers anything and stays byte-exact.
#[test]
fn in_place_delivery_is_byte_exact_under_loss_with_partial_reads() {
    for seed in [7_u64, 0xbeef, 0x5eed_0042] {
        let total = 4 * MIB;
        let (a, b, _, in_place) = workload(TcpImplementation::Warpcore, seed, total, true);
        let counted = a.tcp_totals().expect("ours").delivered_in_place
            + b.tcp_totals().expect("ours").delivered_in_place;
        let lost = a.device().tx_fault_stats().lost + b.device().tx_fault_stats().lost;
        eprintln!(
            "seed {seed:#x}: {in_place} of {} octets in place, {lost} frames lost",
            2 * total
        );
        assert!(lost > 0, "the link must have lost frames");
        assert_eq!(
            in_place, counted,
            "the TCP's count of octets taken in place"
        );
        // An offer refused or taken in part sends the rest of its poll's burst to the
        // queue: both paths carry a share of the stream.
        assert!(in_place > total / 4, "too few octets in place: {in_place}");
        assert!(
            in_place < 2 * total - total / 4,
            "too few octets queued: {in_place}"
        );
    }
    let (_, _, _, in_place) = workload(TcpImplementation::SmoltcpReference, 3, MIB, true);
    assert_eq!(in_place, 0, "the smoltcp reference offers nothing in place");
}
