//! Unit tests of the recovery module, each citing its RFC section.

use super::*;
use proptest::prelude::*;

fn us(n: i64) -> Instant {
    Instant::from_micros(n)
}

fn rec(cc: Congestion) -> Recovery {
    Recovery::new(
        &RecoveryConfig {
            congestion: cc,
            ..RecoveryConfig::default()
        },
        1000,
        us(0),
    )
}

const S: TcpSeqNumber = TcpSeqNumber(100);

#[test]
fn earliest_of_two_is_the_minimum_of_the_deadlines_present() {
    // Every order, with and without deadlines: the result is what an iterator's
    // flatten().min() gave before (Connection::poll_timeout and poll_timeout here).
    let cases = [None, Some(us(5)), Some(us(9)), Some(us(-3))];
    for a in cases {
        for b in cases {
            assert_eq!(
                earliest_of([a, b]),
                [a, b].into_iter().flatten().min(),
                "{a:?} {b:?}"
            );
        }
    }
}

proptest! {
    /// `earliest_of` is the least deadline present, whatever their number, order and
    /// signs (the clock's start is not the least instant).
    #[test]
    fn earliest_of_is_the_minimum_of_the_deadlines_present(
        d in proptest::array::uniform6(proptest::option::of(-1_000_000i64..1_000_000_000_000)),
    ) {
        let d = d.map(|t| t.map(us));
        let want = d.into_iter().flatten().min();
        prop_assert_eq!(earliest_of(d), want);
        prop_assert_eq!(earliest_of([d[0], d[1], d[2]]), [d[0], d[1], d[2]].into_iter().flatten().min());
        prop_assert_eq!(earliest_of::<0>([]), None);
    }
}

#[test]
fn rfc6298_2_2_first_sample_sets_srtt_and_rttvar_and_the_floor_applies() {
    let mut r = rec(Congestion::Cubic);
    r.on_sent(us(0), S, 1000, false);
    let o = r.on_ack(us(800), S + 1000, &[], None);
    assert_eq!(o.newly_acked, 1000);
    assert_eq!(o.rtt_sample, Some(Duration::from_micros(800)));
    assert_eq!(r.srtt(), Some(Duration::from_micros(800)));
    let s = r.stats();
    assert_eq!(s.rttvar_us, 400);
    // 4 * 400 = 1.6 ms, below the 5 ms floor (RFC 6298 2.4), which is the least margin
    // above SRTT (as Linux's `rttvar_us` >= `tcp_rto_min_us`): 800 us + 5 ms.
    assert_eq!(r.rto(), Duration::from_micros(5_800));
}

#[test]
fn rfc6298_2_3_later_samples_are_smoothed() {
    let mut r = rec(Congestion::Cubic);
    r.on_sent(us(0), S, 1000, false);
    r.on_ack(us(10_000), S + 1000, &[], None);
    r.on_sent(us(10_000), S + 1000, 1000, false);
    r.on_ack(us(30_000), S + 2000, &[], None);
    // SRTT = 7/8 * 10 + 1/8 * 20 = 11.25 ms; RTTVAR = 3/4 * 5 + 1/4 * 10 = 6.25 ms.
    assert_eq!(r.stats().srtt_us, 11_250);
    assert_eq!(r.stats().rttvar_us, 6_250);
    assert_eq!(r.rto(), Duration::from_micros(11_250 + 4 * 6_250));
}

#[test]
fn rfc6298_3_karn_no_sample_from_a_retransmitted_segment() {
    let mut r = rec(Congestion::Cubic);
    r.on_sent(us(0), S, 1000, false);
    r.on_sent(us(5_000), S, 1000, true);
    let o = r.on_ack(us(5_100), S + 1000, &[], None);
    assert_eq!(o.rtt_sample, None);
    assert_eq!(r.srtt(), None);
    // A timestamp echo is a valid sample even then (RFC 7323 4.1).
    r.on_sent(us(6_000), S + 1000, 1000, false);
    r.on_sent(us(7_000), S + 1000, 1000, true);
    let o = r.on_ack(us(7_300), S + 2000, &[], Some(Duration::from_micros(300)));
    assert_eq!(o.rtt_sample, Some(Duration::from_micros(300)));
}

#[test]
fn rfc6928_initial_window_and_rfc5681_3_1_slow_start() {
    let mut r = rec(Congestion::NewReno);
    assert_eq!(r.cwnd(), 10_000);
    assert_eq!(r.send_allowance(), 10_000);
    for k in 0..10 {
        r.on_sent(us(0), S + k * 1000, 1000, false);
    }
    assert_eq!(r.send_allowance(), 0);
    r.on_ack(us(100), S + 10_000, &[], None);
    // One (stretch) ACK of ten segments grows cwnd by the ten segments: byte counting
    // without RFC 3465's per-ACK limit, as Linux; a batching receiver acknowledges bursts.
    assert_eq!(r.cwnd(), 20_000);
}

#[test]
fn rfc3465_2_1_congestion_avoidance_counts_the_bytes_a_stretch_ack_covers() {
    // Twenty segments in flight in congestion avoidance (ssthresh below cwnd): one ACK of
    // all twenty grows cwnd by about one SMSS (one window acknowledged), the same as twenty
    // ACKs of one segment each, not by SMSS^2 / cwnd alone.
    let grow = |acks: usize| {
        let mut r = rec(Congestion::NewReno);
        r.cwnd = 20_000;
        r.ssthresh = 10_000;
        for k in 0..20 {
            r.on_sent(us(0), S + k * 1000, 1000, false);
        }
        let per = 20 / acks;
        for a in 1..=acks {
            r.on_ack(us(100), S + a * per * 1000, &[], None);
        }
        r.cwnd()
    };
    let stretch = grow(1);
    let each = grow(20);
    assert!((20_900..=21_000).contains(&stretch), "{stretch}");
    assert!((20_900..=21_000).contains(&each), "{each}");
}

#[test]
fn rfc5681_3_1_rto_collapses_cwnd_and_backs_off() {
    let mut r = rec(Congestion::NewReno);
    for k in 0..4 {
        r.on_sent(us(0), S + k * 1000, 1000, false);
    }
    // No SRTT yet: the probe timeout is the RTO itself (1 s), and the RTO wins.
    let rto_at = r.poll_timeout().unwrap();
    assert_eq!(rto_at, us(1_000_000));
    assert_eq!(r.handle_timeout(rto_at), TimeoutAction::Retransmit);
    assert_eq!(r.cwnd(), 1000);
    assert_eq!(r.rto(), Duration::from_secs(2));
    assert_eq!(r.next_retransmit(), Some((S, 1000)));
}

/// Ten segments out, an RTT of 1 ms known, then nothing for longer than the RTO: the RTO
/// fires, collapses cwnd and resends the first segment. Returns the recovery and the RTO's
/// instant.
fn after_rto() -> (Recovery, Instant) {
    let mut r = rec(Congestion::Cubic);
    r.on_sent(us(0), S, 1000, false);
    r.on_ack(us(1_000), S + 1000, &[], Some(Duration::from_micros(1_000)));
    for k in 1..11 {
        r.on_sent(us(2_000), S + k * 1000, 1000, false);
    }
    let at = r.poll_timeout().unwrap();
    // PTO first (2 SRTT), then the RTO (5 ms floor) with nothing answered.
    let mut now = at;
    while r.handle_timeout(now) != TimeoutAction::Retransmit {
        now = r.poll_timeout().unwrap();
    }
    assert_eq!(r.cwnd(), 1000);
    assert_eq!(r.next_retransmit(), Some((S + 1000, 1000)));
    r.on_sent(now, S + 1000, 1000, true);
    (r, now)
}

#[test]
fn rfc3522_and_rfc4015_an_ack_echoing_the_original_transmission_undoes_the_rto() {
    let (mut r, rto_at) = after_rto();
    let before = r.stats();
    assert_eq!(before.rto_count, 1);
    // The ACK of the originals arrives late; its timestamp echo is from 2 ms (before the
    // RTO): the RTO was spurious.
    let now = rto_at + Duration::from_micros(300);
    let echo = now - us(2_000);
    let o = r.on_ack(now, S + 1000 * 6, &[], Some(echo));
    assert_eq!(o.newly_acked, 5000);
    let s = r.stats();
    assert_eq!(s.spurious_rtos, 1);
    // The congestion window of before the RTO (ten segments, plus growth), not one segment,
    // the RTO's backoff gone, and nothing more to resend: the rest were never lost.
    assert!(r.cwnd() >= 10_000, "cwnd {}", r.cwnd());
    // (The late echo is an RTT sample of its own: the RTO follows it, not the backoff's 12 ms,
    // twice 1 ms + the 5 ms floor.)
    assert!(r.rto() < Duration::from_millis(12), "rto {:?}", r.rto());
    assert_eq!(r.backoffs(), 0);
    assert_eq!(r.next_retransmit(), None);
    assert_eq!(r.in_flight(), 5000);
}

#[test]
fn rfc3522_an_ack_echoing_the_retransmission_leaves_the_rto_in_force() {
    let (mut r, rto_at) = after_rto();
    // The echo is the retransmission's own timestamp: the original was lost.
    let now = rto_at + Duration::from_micros(900);
    let o = r.on_ack(now, S + 2000, &[], Some(Duration::from_micros(900)));
    assert_eq!(o.newly_acked, 1000);
    assert_eq!(r.stats().spurious_rtos, 0);
    assert!(r.cwnd() <= 2000, "cwnd {}", r.cwnd());
    // The rest stays marked lost and is resent.
    assert_eq!(r.next_retransmit(), Some((S + 2000, 1000)));
    // Without timestamps nothing is undone either.
    let (mut r, rto_at) = after_rto();
    r.on_ack(rto_at + Duration::from_micros(300), S + 6000, &[], None);
    assert_eq!(r.stats().spurious_rtos, 0);
    // Slow start from one segment by the five acknowledged (RFC 5681 3.1), not the ten
    // segments of before the RTO.
    assert_eq!(r.cwnd(), 6000);
}

/// CUBIC with a cwnd of 20 segments, all 20 sent at 0 and the first lost: the rest SACKed
/// at 1 ms (19 segments SACKed, >= DupThresh: no reordering window, the first is lost at
/// once), which starts a recovery.
fn cubic_first_of_twenty_lost() -> Recovery {
    let mut r = rec(Congestion::Cubic);
    for k in 0..20 {
        r.on_sent(us(0), S + k * 1000, 1000, false);
    }
    r.cwnd = 20_000;
    let base = (S.0 as u32).wrapping_add(1000);
    let o = r.on_ack(
        us(1_000),
        S,
        &[(TcpSeqNumber(base as i32), S + 20_000)],
        None,
    );
    assert_eq!(o.lost_marked, 1);
    r
}

#[test]
fn rfc9438_4_6_cubic_reduces_to_beta_and_regrows_towards_w_max() {
    let mut r = cubic_first_of_twenty_lost();
    assert_eq!(r.stats().fast_recoveries, 1);
    assert_eq!(r.next_retransmit(), Some((S, 1000)));
    assert_eq!(r.cwnd(), 14_000, "beta 0.7");
    // K = cbrt(W_max (1 - beta) / C) = cbrt(20 * 0.3 / 0.4) = 2.466 s.
    assert!((r.cubic.k - 2.466).abs() < 0.01, "K = {}", r.cubic.k);
}

#[test]
fn rfc2018_sack_blocks_mark_segments_and_shrink_the_pipe() {
    let mut r = rec(Congestion::Cubic);
    for k in 0..5 {
        r.on_sent(us(0), S + k * 1000, 1000, false);
    }
    assert_eq!(r.in_flight(), 5000);
    let o = r.on_ack(us(100), S, &[(S + 2000, S + 4000)], None);
    assert_eq!(o.newly_sacked, 2000);
    assert_eq!(r.in_flight(), 3000);
    // The same block again adds nothing.
    let o = r.on_ack(us(150), S, &[(S + 2000, S + 4000)], None);
    assert_eq!(o.newly_sacked, 0);
}

proptest! {
    /// Any sequence of sends, ACKs (valid or stale), SACK blocks and timer runs keeps the
    /// scoreboard sane: no panic, the pipe never exceeds what is outstanding, every
    /// retransmission lies inside what was sent and not yet acknowledged.
    #[test]
    fn random_ack_and_sack_sequences_keep_the_scoreboard_sane(
        ops in proptest::collection::vec((0u8..4, 0u32..40_000, 0u32..40_000, 1u32..5_000), 1..200)
    ) {
        let mut r = rec(Congestion::Cubic);
        let mut una = S;
        let mut nxt = S;
        let mut now = us(0);
        for (kind, a, b, step) in ops {
            now += Duration::from_micros(u64::from(step));
            match kind {
                0 => {
                    let len = (a % 1500 + 1) as usize;
                    r.on_sent(now, nxt, len, false);
                    nxt += len;
                }
                1 => {
                    let span = (nxt - una) as u32;
                    let ack = if span == 0 { una } else { una + (a % (span + 1)) as usize };
                    r.on_ack(now, ack, &[], None);
                    una = una.max(ack);
                }
                2 => {
                    let span = (nxt - una) as u32;
                    if span > 0 {
                        let l = una + (a % span) as usize;
                        let rgt = l + ((b % span) as usize).max(1);
                        let rgt = if rgt > nxt { nxt } else { rgt };
                        r.on_ack(now, una, &[(l, rgt)], None);
                    }
                }
                _ => {
                    if let Some(t) = r.poll_timeout() {
                        now = now.max(t);
                    }
                    r.handle_timeout(now);
                }
            }
            let outstanding = nxt - una;
            prop_assert!(r.in_flight() <= outstanding);
            if let Some((s, len)) = r.next_retransmit() {
                prop_assert!(s >= una && s + len <= nxt);
            }
        }
    }
}

/// Whether `on_ack` takes its fast path for this ACK (its own test, spelled out here).
fn takes_clean_path(
    r: &Recovery,
    ack: TcpSeqNumber,
    sack: &[(TcpSeqNumber, TcpSeqNumber)],
) -> bool {
    sack.is_empty()
        && r.undo.is_none()
        && r.recover.is_none()
        && r.tally.sacked == 0
        && r.segs.front().is_some_and(|f| f.start < ack)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    /// `on_ack`'s fast path for clean cumulative ACKs leaves exactly the state (scoreboard,
    /// RTT estimators, RACK, timers, congestion window, CUBIC, counters) and returns exactly
    /// the outcome of the general path, over random sends, retransmissions, ACKs with and
    /// without SACK blocks and timestamp echoes, and timer runs, for every controller.
    #[test]
    fn clean_ack_fast_path_matches_the_general_path(
        cc in 0u8..3,
        rack_tlp in any::<bool>(),
        ops in proptest::collection::vec(
            (0u8..7, 0u32..40_000, 0u32..40_000, 0u32..3_000, any::<bool>()),
            1..160,
        ),
    ) {
        let congestion = [Congestion::None, Congestion::NewReno, Congestion::Cubic][cc as usize];
        let cfg = RecoveryConfig { congestion, rack_tlp, ..RecoveryConfig::default() };
        let mut fast = Recovery::new(&cfg, 1000, us(0));
        let mut general = fast.clone();
        let (mut una, mut nxt, mut now) = (S, S, us(0));
        for (kind, a, b, step, flag) in ops {
            // Steps of zero: segments sent at the same instant (RACK's tie on the end).
            now += Duration::from_micros(u64::from(step));
            let span = (nxt - una) as u32;
            match kind {
                0 | 1 => {
                    let len = (a % 3000 + 1) as usize;
                    fast.on_sent(now, nxt, len, false);
                    general.on_sent(now, nxt, len, false);
                    nxt += len;
                }
                2 => {
                    // What the connection would resend: a lost range, else the last segment.
                    let r = fast.next_retransmit().or_else(|| fast.last_segment());
                    prop_assert_eq!(r, general.next_retransmit().or_else(|| general.last_segment()));
                    if let Some((seq, len)) = r {
                        fast.on_sent(now, seq, len, true);
                        general.on_sent(now, seq, len, true);
                    }
                }
                3 | 4 => {
                    let ack = if span == 0 { una } else { una + (a % (span + 1)) as usize };
                    let mut sack = Vec::new();
                    if kind == 4 && span > 0 {
                        let l = una + (b % span) as usize;
                        let rgt = l + ((a % span) as usize).max(1);
                        sack.push((l, if rgt > nxt { nxt } else { rgt }));
                    }
                    // A timestamp echo: an RTT from now back to some earlier instant (before
                    // or after an RTO's retransmission).
                    let ts = flag.then(|| Duration::from_micros(u64::from(b % 20_000)));
                    let o = fast.on_ack(now, ack, &sack, ts);
                    let g = general.on_ack_general(now, ack, &sack, ts);
                    prop_assert_eq!(o, g);
                    una = una.max(ack);
                }
                5 => {
                    if let Some(t) = fast.poll_timeout() {
                        now = now.max(t);
                    }
                    prop_assert_eq!(fast.handle_timeout(now), general.handle_timeout(now));
                }
                _ => {
                    // A D-SACK for some octets sent so far (an episode's retransmission or
                    // not): the undo and the reordering window it may change.
                    let sent = (nxt - S) as u32;
                    if sent > 0 {
                        let l = S + (b % sent) as usize;
                        let r = l + ((a % 3000) as usize + 1).min(nxt - l);
                        fast.on_dsack(una, nxt, l, r);
                        general.on_dsack(una, nxt, l, r);
                    }
                }
            }
            prop_assert_eq!(format!("{fast:?}"), format!("{general:?}"));
        }
    }
}

#[test]
fn clean_ack_fast_path_is_taken_by_in_order_acks() {
    let mut r = rec(Congestion::Cubic);
    r.on_sent(us(0), S, 1000, false);
    r.on_sent(us(0), S + 1000, 1000, false);
    assert!(takes_clean_path(&r, S + 500, &[]));
    r.on_ack(us(100), S + 500, &[], None);
    assert!(takes_clean_path(&r, S + 2000, &[]));
    r.on_ack(us(200), S + 2000, &[], None);
    assert!(r.is_empty());
}

/// CUBIC with one segment sent and acknowledged: an RTT of 1 ms known, nothing outstanding.
fn rtt_of_1_ms() -> Recovery {
    let mut r = rec(Congestion::Cubic);
    r.on_sent(us(0), S, 1000, false);
    r.on_ack(us(1_000), S + 1000, &[], Some(Duration::from_micros(1_000)));
    r
}

/// RFC 8985 7.3: at most one loss probe per flight. A probe unanswered leaves the RTO to
/// act (no second probe at the next PTO, as a probe re-arming the PTO sent one every 1-2 ms
/// until the RTO); an ACK that covers the probe's flight lets the next flight have its own.
#[test]
fn rfc8985_7_3_one_loss_probe_per_flight() {
    let mut r = rtt_of_1_ms();
    for k in 1..4 {
        r.on_sent(us(2_000), S + k * 1000, 1000, false);
    }
    let pto = r.poll_timeout().unwrap();
    assert_eq!(r.handle_timeout(pto), TimeoutAction::Probe);
    // The probe: the last segment again.
    r.on_sent(pto, S + 3000, 1000, true);
    r.probe_sent(true);
    // Nothing answers: the next deadline is the RTO (SRTT 1 ms + the 5 ms floor), re-armed
    // at the probe (RFC 8985 7.3), and it retransmits.
    let next = r.poll_timeout().unwrap();
    assert_eq!(
        next,
        pto + Duration::from_millis(6),
        "no second probe before the RTO"
    );
    assert_eq!(r.handle_timeout(next), TimeoutAction::Retransmit);
    assert_eq!(r.stats().tlp_count, 1);

    // A new flight after everything is answered: its own probe is allowed.
    let mut r = rtt_of_1_ms();
    r.on_sent(us(2_000), S + 1000, 1000, false);
    let pto = r.poll_timeout().unwrap();
    assert_eq!(r.handle_timeout(pto), TimeoutAction::Probe);
    r.on_sent(pto, S + 1000, 1000, true);
    r.probe_sent(true);
    r.on_ack(pto + Duration::from_micros(500), S + 2000, &[], None);
    let t = pto + Duration::from_micros(600);
    r.on_sent(t, S + 2000, 1000, false);
    let pto2 = r.poll_timeout().unwrap();
    assert!(
        pto2 < t + Duration::from_millis(5),
        "the new flight's PTO comes before its RTO"
    );
    assert_eq!(r.handle_timeout(pto2), TimeoutAction::Probe);
    assert_eq!(r.stats().tlp_count, 2);
}

/// A probe asked for and never sent (an ACK answered everything first) holds nothing back:
/// the next flight's first segment has its PTO (a review of the first version found a
/// pending flag that the next ordinary segment took for the probe).
#[test]
fn rfc8985_7_3_a_probe_never_sent_does_not_count() {
    let mut r = rtt_of_1_ms();
    r.on_sent(us(2_000), S + 1000, 1000, false);
    let pto = r.poll_timeout().unwrap();
    assert_eq!(r.handle_timeout(pto), TimeoutAction::Probe);
    // The ACK comes before the probe could leave: nothing outstanding.
    r.on_ack(pto, S + 2000, &[], None);
    assert!(r.is_empty());
    let t = pto + Duration::from_millis(100);
    r.on_sent(t, S + 2000, 1000, false);
    let next = r.poll_timeout().unwrap();
    assert!(
        next < t + Duration::from_millis(5),
        "the PTO comes before the RTO"
    );
    assert_eq!(r.handle_timeout(next), TimeoutAction::Probe);
}

/// RFC 7661 (congestion window validation), RFC 9438 5.8: a sender held back by something
/// other than cwnd (here the peer's window: 20 segments in flight at most) does not grow
/// cwnd without end, for NewReno and CUBIC: slow start stops once cwnd is twice the most in
/// flight (one stretch ACK of a whole flight may take it up to three times), and a loss
/// then reduces a window of that size, a congestion response (before, 400 such rounds
/// left cwnd at 8 MB, and the loss at 5.6 MB). A sender whose window is full still grows
/// it, doubling it per round trip in slow start.
#[test]
fn rfc7661_cwnd_grows_only_while_it_limits_the_sender() {
    for cc in [Congestion::NewReno, Congestion::Cubic] {
        let mut r = rec(cc);
        let (mut next, mut t) = (S, 0);
        // 400 rounds of 20 segments, each round acknowledged whole.
        for _ in 0..400 {
            for _ in 0..20 {
                r.on_sent(us(t), next, 1000, false);
                next += 1000;
            }
            t += 100;
            r.on_ack(us(t), next, &[], None);
            assert!(
                r.cwnd() <= 3 * 20_000,
                "{cc:?}: cwnd {} with at most 20,000 in flight",
                r.cwnd()
            );
        }
        assert!(!r.is_cwnd_limited(), "{cc:?}: cwnd {}", r.cwnd());
        let before = r.cwnd();
        // A loss among the next 20: SACKed segments after it make it lost, and the
        // reduction takes that bounded window down (NewReno to half, CUBIC to 70 %).
        let first = next;
        for _ in 0..20 {
            r.on_sent(us(t), next, 1000, false);
            next += 1000;
        }
        t += 100;
        for k in 1..=4 {
            r.on_ack(
                us(t),
                first,
                &[(first + 1000, first + 1000 + k * 1000)],
                None,
            );
        }
        assert!(r.stats().fast_recoveries >= 1, "{cc:?}: no recovery");
        assert!(
            r.cwnd() <= before * 7 / 10 && r.cwnd() <= 42_000,
            "{cc:?}: cwnd {} after the loss, {before} before",
            r.cwnd()
        );
    }
    // The window full at every round: slow start doubles it per round trip.
    let mut r = rec(Congestion::NewReno);
    let mut next = S;
    for round in 0..4 {
        let w = r.cwnd();
        for _ in 0..w / 1000 {
            r.on_sent(us(round * 100), next, 1000, false);
            next += 1000;
        }
        assert!(r.is_cwnd_limited());
        r.on_ack(us(round * 100 + 100), next, &[], None);
        assert_eq!(r.cwnd(), 2 * w, "round {round}");
    }
}

/// CUBIC in congestion avoidance after a reduction: W_max 100 segments of 1000, cwnd and
/// ssthresh 70, the epoch starting at 0.
fn cubic_after_a_reduction() -> Recovery {
    let mut r = rec(Congestion::Cubic);
    r.cwnd = 70_000;
    r.ssthresh = 70_000;
    r.cubic = Cubic {
        w_max: 100.0,
        k: (100.0 * (1.0 - CUBIC_BETA) / CUBIC_C).cbrt(),
        epoch: Some(us(0)),
        w_est: 70.0,
        unlimited_since: None,
        cwnd_prior: 100.0,
    };
    r
}

/// One round trip of 1 ms: `segs` segments of 1000 sent at `t` (from where the last round
/// ended, starting at `S`), all acknowledged at once 1 ms later (`t` moves on).
fn rounds_of_1000() -> impl FnMut(&mut Recovery, usize, &mut i64) {
    let mut next = S;
    move |r: &mut Recovery, segs: usize, t: &mut i64| {
        for _ in 0..segs {
            r.on_sent(us(*t), next, 1000, false);
            next += 1000;
        }
        *t += 1000;
        r.on_ack(us(*t), next, &[], None);
    }
}

/// RFC 9438 5.8: time the window does not limit the sender is not counted in the epoch's
/// t. CUBIC in congestion avoidance after a reduction (W_max 100 segments, cwnd 70), then
/// 10 s held to 10 segments in flight by the peer, then the window full again: cwnd goes
/// on from the concave part of the curve (a few percent over three round trips) instead
/// of jumping towards W_cubic(10 s) at 1.5x a round trip.
#[test]
fn rfc9438_5_8_time_not_limited_by_cwnd_is_not_the_epochs() {
    let (mut r, mut t) = (cubic_after_a_reduction(), 0);
    let mut round = rounds_of_1000();
    for _ in 0..10_000 {
        round(&mut r, 10, &mut t);
    }
    assert_eq!(r.cwnd(), 70_000, "no growth while not limited");
    for _ in 0..3 {
        let w = r.cwnd() / 1000;
        round(&mut r, w, &mut t);
    }
    assert!(
        r.cwnd() < 73_500,
        "cwnd {} after three limited rounds",
        r.cwnd()
    );
}

/// RFC 9438 5.8: idle time is not the epoch's either. A window-limited round, 10 s with
/// nothing sent or acknowledged, then limited rounds again: without the epoch moving on by
/// the idle time, t counted the 10 s, W_cubic(t) had run far ahead and cwnd climbed at
/// the 1.5x cap (177,551 after three rounds).
#[test]
fn rfc9438_5_8_idle_time_after_a_limited_round_is_not_the_epochs() {
    let (mut r, mut t) = (cubic_after_a_reduction(), 0);
    let mut round = rounds_of_1000();
    let w = r.cwnd() / 1000;
    round(&mut r, w, &mut t);
    let before = r.cwnd();
    t += 10_000_000;
    for _ in 0..3 {
        let w = r.cwnd() / 1000;
        round(&mut r, w, &mut t);
    }
    assert!(
        r.cwnd() < 73_500,
        "cwnd {} after three limited rounds following 10 s idle ({before} before it)",
        r.cwnd()
    );
    // And the epoch never moves past the present.
    assert!(r.cubic.epoch.is_some_and(|e| e <= us(t)));
}

/// One segment sent at 0 and acknowledged at 1 ms (an RTT sample of 1 ms), then `n`
/// segments of 1000 from `S + 1000` sent at 2 ms.
fn sample_then_send(r: &mut Recovery, n: usize) {
    r.on_sent(us(0), S, 1000, false);
    r.on_ack(us(1_000), S + 1000, &[], None);
    send_n(r, us(2_000), S + 1000, n);
}

/// Runs the timers until the RTO fires (loss probes first, if any); returns when.
fn fire_rto(r: &mut Recovery) -> Instant {
    let mut now = r.poll_timeout().unwrap();
    while r.handle_timeout(now) != TimeoutAction::Retransmit {
        now = r.poll_timeout().unwrap();
    }
    now
}

/// Sends `n` segments of 1000 from `from` at `t`.
fn send_n(r: &mut Recovery, t: Instant, from: TcpSeqNumber, n: usize) {
    for k in 0..n {
        r.on_sent(t, from + k * 1000, 1000, false);
    }
}

/// RFC 5681 3.1 / RFC 6298 5: after an RTO the sender slow-starts from one segment, cwnd
/// doubling per round trip while it resends what the RTO marked lost: ten segments lost to
/// an RTO are repaired in four round trips (1 + 2 + 4 + 3), not ten (cwnd held at one
/// segment until SND.UNA passed `recover`).
#[test]
fn rfc5681_3_1_rto_recovery_slow_starts() {
    let mut r = rec(Congestion::NewReno);
    sample_then_send(&mut r, 10);
    let mut now = fire_rto(&mut r);
    let mut una = S + 1000;
    let mut rounds = 0;
    let mut cwnds = vec![];
    while una != S + 11_000 && rounds < 20 {
        let mut sent = 0;
        while let Some((seq, len)) = r.next_retransmit() {
            r.on_sent(now, seq, len, true);
            sent += len;
        }
        now += Duration::from_millis(1);
        una += sent;
        r.on_ack(now, una, &[], None);
        cwnds.push(r.cwnd());
        rounds += 1;
    }
    // 1 + 2 + 4 + 8 >= 10 segments: four round trips of slow start.
    assert!(
        rounds <= 4,
        "{rounds} round trips after the RTO; cwnd per round {cwnds:?}"
    );
    // Doubling per round trip up to ssthresh (5000: half the flight the RTO found), then
    // congestion avoidance for the rest of the third ACK (3000 octets: 5000 * 3000 / 5000).
    assert_eq!(cwnds[..3], [2000, 4000, 5600], "doubling per round trip");
}

/// RFC 5681 3.1 (slow start while cwnd < ssthresh) with byte counting (RFC 3465): an ACK
/// never takes slow start past ssthresh; the octets beyond it count as congestion avoidance,
/// as Linux's `tcp_slow_start`. After an RTO whose flight lost only its first segment, the
/// ACK of the retransmission covers the whole flight: cwnd once grew by all of it, back
/// above the flight, as if the RTO had not reduced it.
#[test]
fn rfc5681_3_1_slow_start_stops_at_ssthresh_within_one_ack() {
    let mut r = rec(Congestion::NewReno);
    sample_then_send(&mut r, 10);
    let now = fire_rto(&mut r);
    assert_eq!((r.cwnd(), r.ssthresh), (1000, 5000));
    let (seq, len) = r.next_retransmit().expect("the first segment");
    r.on_sent(now, seq, len, true);
    // The other nine had arrived: one ACK covers all ten.
    r.on_ack(now + Duration::from_millis(1), S + 11_000, &[], None);
    // 4000 octets of slow start to ssthresh, then 6000 octets of congestion avoidance:
    // 5000 + 1000 * 6000 / 5000.
    assert_eq!(r.cwnd(), 6200);

    // CUBIC too stops at ssthresh (0.7 of the flight), then grows by its own rule.
    let mut r = rec(Congestion::Cubic);
    sample_then_send(&mut r, 10);
    let now = fire_rto(&mut r);
    assert_eq!((r.cwnd(), r.ssthresh), (1000, 7000));
    let (seq, len) = r.next_retransmit().expect("the first segment");
    r.on_sent(now, seq, len, true);
    r.on_ack(now + Duration::from_millis(1), S + 11_000, &[], None);
    assert!((7000..8000).contains(&r.cwnd()), "cwnd {}", r.cwnd());
}

/// RFC 5681 3.2 steps 2-4 / RFC 6582 3.2 without SACK: the third duplicate ACK retransmits
/// the first segment at once, and each further duplicate ACK takes a segment out of the pipe
/// (the cwnd inflation, as Linux's `tcp_add_reno_sack`), so new data flows in recovery. Ten
/// segments out, the first lost, nine duplicate ACKs: the retransmission is allowed at the
/// third (it was refused: pipe 9000 against cwnd 5000, and no duplicate ACK lowered the
/// pipe), and after the ninth the pipe is the retransmission alone, room for four segments.
#[test]
fn rfc5681_3_2_without_sack_the_third_duplicate_ack_retransmits_and_more_let_data_flow() {
    let mut r = rec(Congestion::NewReno);
    sample_then_send(&mut r, 10);
    let mut marked = 0;
    for k in 0..3 {
        marked += r
            .on_ack(us(3_000 + k * 10), S + 1000, &[], None)
            .lost_marked;
    }
    assert_eq!(
        marked, 1,
        "third duplicate ACK marks the first segment lost"
    );
    assert_eq!(r.stats().fast_recoveries, 1);
    // RFC 9937 section 6 (PRR; this test pinned cwnd = ssthresh = 5000 before): the target is
    // ssthresh, and the window pipe (6000: nine out, three taken out by the duplicate ACKs)
    // + sndcnt (CEIL(1000 * 5000 / 10000), a segment).
    assert_eq!((r.ssthresh, r.cwnd()), (5000, 7000));
    assert_eq!(
        r.next_retransmit(),
        Some((S + 1000, 1000)),
        "fast retransmit refused: pipe {} cwnd {}",
        r.in_flight(),
        r.cwnd()
    );
    r.on_sent(us(3_030), S + 1000, 1000, true);
    assert_eq!(r.next_retransmit(), None);
    for k in 3..9 {
        r.on_ack(us(3_000 + k * 10), S + 1000, &[], None);
    }
    assert_eq!(r.in_flight(), 1000, "the retransmission alone");
    assert_eq!(r.send_allowance(), 4000);
    // The ACK of everything ends the episode: nothing is taken out of the pipe any more.
    r.on_ack(us(4_000), S + 11_000, &[], None);
    send_n(&mut r, us(4_000), S + 11_000, 3);
    assert_eq!(r.in_flight(), 3000);
}

/// RFC 6675 5 (4.3): on entering loss recovery the first lost segment is retransmitted at
/// once, regardless of pipe and cwnd. With SACK and NewReno, ten segments out, the first
/// lost and 2..4 SACKed: RACK marks it lost, cwnd becomes 5 SMSS with a pipe of 6: the
/// retransmission was refused. Only the first one goes regardless.
#[test]
fn rfc6675_5_4_3_the_first_retransmission_goes_whatever_the_pipe() {
    let mut r = rec(Congestion::NewReno);
    sample_then_send(&mut r, 10);
    let o = r.on_ack(us(3_000), S + 1000, &[(S + 2000, S + 5000)], None);
    assert_eq!(o.lost_marked, 1);
    assert_eq!(r.in_flight(), 6000);
    // RFC 9937 section 6 (PRR; this test pinned cwnd = ssthresh = 5000 before, which refused the
    // retransmission but for RFC 6675 5 (4.3)): the window is pipe + sndcnt, sndcnt =
    // CEIL(3000 delivered * 5000 / 10000) = 2000. `prr_a_reorder_timers_entry_sends_
    // the_first_retransmission_alone` has the first retransmission go where PRR allows none.
    assert_eq!((r.ssthresh, r.cwnd()), (5000, 8000));
    assert_eq!(
        r.next_retransmit(),
        Some((S + 1000, 1000)),
        "pipe {} cwnd {}",
        r.in_flight(),
        r.cwnd()
    );
    r.on_sent(us(3_000), S + 1000, 1000, true);
    // A second loss waits for the pipe to fall below cwnd.
    let o = r.on_ack(
        us(3_100),
        S + 1000,
        &[(S + 2000, S + 5000), (S + 6000, S + 9000)],
        None,
    );
    assert_eq!(o.lost_marked, 1, "segment 5 lost");
    assert_eq!(r.in_flight(), 3000);
    assert_eq!(r.next_retransmit(), Some((S + 5000, 1000)));
}

/// RFC 6298 3 (Karn), RFC 8985 6.2 step 2: no RTT sample from a segment sent more than
/// once, even once RACK marked its retransmission lost again (which cleared
/// `retransmitted`): the cumulative ACK that covers it, without a timestamp, gave a sample
/// of 1250 us measured from the retransmission.
#[test]
fn rfc6298_3_karn_no_sample_from_a_segment_resent_then_marked_lost_again() {
    let mut r = rec(Congestion::Cubic);
    sample_then_send(&mut r, 4);
    // 1 lost, 2..4 SACKed: 1 marked lost and resent at 3 ms.
    let o = r.on_ack(us(3_000), S + 1000, &[(S + 2000, S + 5000)], None);
    assert_eq!(o.lost_marked, 1);
    assert_eq!(r.next_retransmit(), Some((S + 1000, 1000)));
    r.on_sent(us(3_000), S + 1000, 1000, true);
    // New data at 3.1 ms, SACKed at 4.2 ms: the retransmission of 1 is lost too (RACK).
    send_n(&mut r, us(3_100), S + 5000, 3);
    let o = r.on_ack(us(4_200), S + 1000, &[(S + 2000, S + 8000)], None);
    assert_eq!(o.lost_marked, 1, "retransmission marked lost again");
    // Before it is resent, the cumulative ACK for everything arrives (no timestamps): an
    // ambiguous ACK of a segment sent twice.
    let srtt = r.srtt();
    let o = r.on_ack(us(4_250), S + 8000, &[], None);
    assert_eq!(
        o.rtt_sample, None,
        "Karn: sample {:?} from a resent segment",
        o.rtt_sample
    );
    assert_eq!(r.srtt(), srtt);
}

/// RFC 8985 7.4.2: a loss probe that resent the tail, answered by an ACK covering
/// TLP.end_seq, repaired a loss: the window is reduced as for any other loss (before: cwnd
/// 10000 -> 10000, no reduction). Not when the ACK's timestamp echo is older than the probe
/// (the original arrived), nor when the ACK carries a D-SACK for the probe's segment (both
/// copies arrived; RFC 8985 7.4.2 and Linux's FLAG_DSACK_TLP: the echo is then the probe's,
/// as RFC 7323 takes TS.Recent from a duplicate too), nor for a probe of new data (losses
/// are then found by the usual means).
#[test]
fn rfc8985_7_4_a_loss_the_probe_repaired_reduces_the_window() {
    // (probe of new data, timestamp echo of the original, D-SACK of the probe) -> reduced
    for (new_data, echo_original, dsack, reduced) in [
        (false, false, false, true),
        (false, true, false, false),
        (false, false, true, false),
        (true, false, false, false),
    ] {
        let mut r = rtt_of_1_ms();
        send_n(&mut r, us(2_000), S + 1000, 3);
        // 1 and 2 acknowledged; 3 lost (the tail).
        r.on_ack(us(3_000), S + 3000, &[], None);
        let pto = r.poll_timeout().unwrap();
        assert_eq!(r.handle_timeout(pto), TimeoutAction::Probe);
        let end = if new_data {
            r.on_sent(pto, S + 4000, 1000, false);
            S + 5000
        } else {
            assert_eq!(r.last_segment(), Some((S + 3000, 1000)));
            r.on_sent(pto, S + 3000, 1000, true);
            S + 4000
        };
        r.probe_sent(!new_data);
        let before = r.cwnd();
        let now = pto + Duration::from_micros(1_000);
        // The echo: of the original (sent at 2 ms) or of the probe.
        let echo = if echo_original {
            now - us(2_000)
        } else {
            now - pto
        };
        if dsack {
            r.on_dsack(end, end, S + 3000, S + 4000);
        }
        r.on_ack(now, end, &[], Some(echo));
        let case = (new_data, echo_original, dsack);
        if reduced {
            assert_eq!(r.stats().fast_recoveries, 1, "{case:?}");
            assert_eq!(r.cwnd(), before * 7 / 10, "{case:?}: CUBIC's beta");
        } else {
            assert_eq!(r.stats().fast_recoveries, 0, "{case:?}");
            assert!(r.cwnd() >= before, "{case:?}");
        }
        assert!(r.is_empty());
    }
}

/// RFC 8985 7.2: no loss probe is armed in fast recovery, in RTO recovery, or while
/// segments are SACKed but not cumulatively acknowledged (before: armed in fast recovery,
/// for 5 ms); once the episode ends the next flight has its probe again.
#[test]
fn rfc8985_7_2_no_loss_probe_in_recovery_or_with_sacked_segments() {
    // Fast recovery: segment 1 lost, 2..4 SACKed.
    let mut r = rtt_of_1_ms();
    send_n(&mut r, us(2_000), S + 1000, 10);
    let o = r.on_ack(us(3_000), S + 1000, &[(S + 2000, S + 5000)], None);
    assert_eq!(o.lost_marked, 1);
    assert!(r.recover.is_some());
    assert_eq!(r.pto_at, None, "PTO armed in fast recovery");
    r.on_sent(us(3_000), S + 1000, 1000, true);
    assert_eq!(r.pto_at, None, "PTO armed by the retransmission");
    // The episode ends: the next flight has a probe again.
    r.on_ack(us(4_000), S + 11_000, &[], None);
    assert!(r.recover.is_none());
    send_n(&mut r, us(4_000), S + 11_000, 2);
    assert!(r.pto_at.is_some(), "no PTO after the episode");

    // One segment SACKed, within the reordering window: no recovery, still no probe.
    let mut r = rtt_of_1_ms();
    send_n(&mut r, us(2_000), S + 1000, 3);
    let o = r.on_ack(us(2_900), S + 1000, &[(S + 2000, S + 3000)], None);
    assert_eq!(o.lost_marked, 0);
    assert!(r.recover.is_none());
    assert_eq!(r.pto_at, None, "PTO armed with a segment SACKed");

    // RTO recovery: the retransmission arms no probe.
    let (r, _) = after_rto();
    assert_eq!(r.pto_at, None, "PTO armed in RTO recovery");
}

/// RFC 8985 7.2: the PTO is (re)started when a segment is sent or an ACK acknowledges new
/// data, not by an ACK of nothing new. Before, every ACK restarted it: a peer without SACK
/// sending two duplicate ACKs, or a SACK peer repeating its ACK (a window update on a
/// stalled flow) every half millisecond, pushed the probe back each time, and the tail loss
/// waited for the RTO.
#[test]
fn rfc8985_7_2_an_ack_of_nothing_new_does_not_restart_the_pto() {
    // RFC 8985 7.2: a peer without SACK, two duplicate ACKs (below DupThresh).
    let mut r = rtt_of_1_ms();
    send_n(&mut r, us(2_000), S + 1000, 3);
    let pto = r.poll_timeout().unwrap();
    assert_eq!(pto, us(4_000), "PTO = 2 SRTT after the last send");
    for t in [3_000, 3_900] {
        let o = r.on_ack(us(t), S + 1000, &[], None);
        assert_eq!((o.newly_acked, o.lost_marked), (0, 0));
        assert_eq!(r.poll_timeout(), Some(pto), "a duplicate ACK moved the PTO");
    }
    assert_eq!(r.handle_timeout(pto), TimeoutAction::Probe);

    // RFC 8985 7.2: a SACK peer (SACK seen, nothing SACKed now) repeating its ACK every
    // 500 us: the probe goes at 2 SRTT after the last send all the same.
    let mut r = rtt_of_1_ms();
    send_n(&mut r, us(2_000), S + 1000, 3);
    r.on_ack(us(2_500), S + 2000, &[(S + 2000, S + 3000)], None);
    r.on_ack(us(2_600), S + 3000, &[], None);
    // The ACK of new data restarted the PTO (2 SRTT from 2.6 ms; SRTT is still 1 ms, the
    // ACKs carried no timestamps and Karn's rule gives samples of 500 and 600 us).
    let pto = r.poll_timeout().unwrap();
    assert!(pto > us(2_600) && pto < us(2_000) + r.rto(), "{pto:?}");
    let mut t = 3_000;
    while us(t) < pto {
        let o = r.on_ack(us(t), S + 3000, &[], None);
        assert_eq!((o.newly_acked, o.lost_marked), (0, 0));
        assert_eq!(
            r.poll_timeout(),
            Some(pto),
            "a repeated ACK at {t} us moved the PTO"
        );
        t += 500;
    }
    assert_eq!(r.handle_timeout(pto), TimeoutAction::Probe);
    assert_eq!(r.stats().tlp_count, 1);
}

/// RFC 9438 4.8: in the first congestion avoidance stage after an RTO, K = 0 and W_max (and
/// W_est) = the cwnd at the start of that stage, so the window grows about one segment per
/// round trip from there (here 16165 -> 17182 in two round trips). Before, W_max stayed the
/// flight at the RTO (20 segments) and the window climbed towards it: 17250 -> 19588.
#[test]
fn rfc9438_4_8_after_an_rto_k_is_zero_and_w_max_the_cwnd() {
    let mut r = rec(Congestion::Cubic);
    r.on_sent(us(0), S, 1000, false);
    r.on_ack(us(1_000), S + 1000, &[], None);
    r.cwnd = 20_000;
    send_n(&mut r, us(2_000), S + 1000, 20);
    let mut now = fire_rto(&mut r);
    // Through the RTO recovery, whatever its pace.
    let mut una = S + 1000;
    for _ in 0..40 {
        if una == S + 21_000 {
            break;
        }
        let mut sent = 0;
        while let Some((seq, len)) = r.next_retransmit() {
            r.on_sent(now, seq, len, true);
            sent += len;
        }
        now += Duration::from_millis(1);
        una += sent;
        r.on_ack(now, una, &[], Some(Duration::from_millis(1)));
    }
    assert_eq!(una, S + 21_000);
    // Slow start passed ssthresh during the recovery: congestion avoidance from here.
    let start = r.cwnd();
    assert!(start > r.ssthresh && start < 20_000, "cwnd {start}");
    let mut nxt = una;
    // Two window-limited round trips.
    for _ in 0..2 {
        let n = r.send_allowance() / 1000;
        send_n(&mut r, now, nxt, n);
        nxt += n * 1000;
        now += Duration::from_millis(1);
        for k in 1..=n {
            r.on_ack(now, una + k * 1000, &[], Some(Duration::from_millis(1)));
        }
        una = nxt;
    }
    assert!(
        r.cwnd() <= start + 1_500,
        "cwnd {} -> {} in two RTTs of congestion avoidance after an RTO (W_max {}, K {})",
        start,
        r.cwnd(),
        r.cubic.w_max,
        r.cubic.k
    );
    assert_eq!(r.cubic.k, 0.0);
    assert!(
        r.cubic.w_max * 1000.0 <= start as f64,
        "W_max {}",
        r.cubic.w_max
    );
}

/// RFC 9438 4.8: on an RTO CUBIC sets ssthresh with beta_cubic (0.7, as in 4.6), not
/// Reno's 1/2: ten segments in flight give 7000 (before: 5000). NewReno keeps 1/2.
#[test]
fn rfc9438_4_8_cubic_rto_ssthresh_uses_beta() {
    for (cc, want) in [(Congestion::Cubic, 7000), (Congestion::NewReno, 5000)] {
        let mut r = rec(cc);
        sample_then_send(&mut r, 10);
        fire_rto(&mut r);
        assert_eq!(r.stats().ssthresh, want, "ssthresh after RTO, {cc:?}");
        assert_eq!(r.cwnd(), 1000);
    }
}

/// RFC 5681 3.2 (4): ssthresh = max(FlightSize / 2, 2 SMSS), from FlightSize (the data
/// outstanding), not cwnd: four segments outstanding with cwnd at ten give 2 SMSS (before:
/// 5000, half of cwnd).
#[test]
fn rfc5681_3_2_newreno_ssthresh_from_flightsize_not_cwnd() {
    let mut r = rec(Congestion::NewReno);
    sample_then_send(&mut r, 4);
    assert_eq!(r.cwnd(), 10_000);
    let o = r.on_ack(us(3_000), S + 1000, &[(S + 2000, S + 5000)], None);
    assert_eq!(o.lost_marked, 1);
    assert_eq!(r.stats().ssthresh, 2000, "cwnd {}", r.cwnd());
    assert_eq!(r.cwnd(), 2000);
    // Eight outstanding, three of them SACKed: FlightSize counts them all (4000).
    let mut r = rec(Congestion::NewReno);
    send_n(&mut r, us(0), S, 8);
    let o = r.on_ack(us(1_000), S, &[(S + 1000, S + 4000)], None);
    assert_eq!(o.lost_marked, 1);
    assert_eq!(r.stats().ssthresh, 4000);
}

/// RFC 9438 4.7 fast convergence: a loss while cwnd < W_max sets W_max = cwnd (1 + beta) / 2
/// (20 segments below a W_max of 30: 17, before: 20), and K follows from it and the reduced
/// window (4.2: cbrt((17 - 14) / 0.4) = 1.957 s). At or above W_max, W_max = cwnd.
#[test]
fn rfc9438_4_7_cubic_fast_convergence() {
    for (w_max, want_w_max, want_k) in [(30.0, 17.0, 1.957), (15.0, 20.0, 2.466)] {
        let mut r = rec(Congestion::Cubic);
        r.cubic.w_max = w_max;
        r.cwnd = 20_000;
        send_n(&mut r, us(0), S, 20);
        let o = r.on_ack(us(1_000), S, &[(S + 1000, S + 20_000)], None);
        assert_eq!(o.lost_marked, 1);
        assert!(
            (r.cubic.w_max - want_w_max).abs() < 0.01,
            "W_max {} (want {want_w_max})",
            r.cubic.w_max
        );
        assert!((r.cubic.k - want_k).abs() < 0.01, "K {}", r.cubic.k);
        assert_eq!(r.cwnd(), 14_000);
    }
}

/// RFC 8985 6.2 steps 3-4: once reordering was observed (a segment never retransmitted
/// delivered below RACK.fack, the highest sequence delivered), the reordering window stays
/// min_RTT / 4 even with DupThresh segments SACKed, so a segment reordered behind three
/// others is not marked lost at once (before: reordering was never noted, the window was 0
/// and segment 5 was marked lost: a spurious recovery). Without the earlier reordering it
/// still is.
#[test]
fn rfc8985_6_2_observed_reordering_keeps_the_reordering_window() {
    for reorder_first in [true, false] {
        let mut r = rtt_of_1_ms();
        send_n(&mut r, us(2_000), S + 1000, 4);
        if reorder_first {
            // Segment 1 arrives after segment 2 (reordering), never retransmitted.
            r.on_ack(us(3_000), S + 1000, &[(S + 2000, S + 3000)], None);
            assert_eq!(r.next_retransmit(), None);
        }
        r.on_ack(us(3_100), S + 5000, &[], None);
        assert_eq!(r.stats().fast_recoveries, 0);
        assert_eq!(r.reordering_seen, reorder_first);
        // Next flight: segment 5 reordered behind 6..8 by 100 us.
        send_n(&mut r, us(3_100), S + 5000, 4);
        let o = r.on_ack(us(4_200), S + 5000, &[(S + 6000, S + 9000)], None);
        if reorder_first {
            assert_eq!(
                o.lost_marked, 0,
                "reordering was seen: reo_wnd = min_RTT/4 = 250 us, segment 5 not lost yet"
            );
            // The reorder timer marks it lost once the window has passed.
            assert_eq!(r.poll_timeout(), Some(us(4_450)));
        } else {
            assert_eq!(o.lost_marked, 1, "no reordering seen: no window");
        }
    }
}

/// RFC 8985 6.2 step 4 (RACK_update_reo_wnd): a D-SACK (RFC 2883: the peer got a segment
/// twice, so its retransmission was spurious) widens the reordering window by one step of
/// min_RTT / 4, once per round trip (RACK.dsack_round = SND.NXT: more D-SACKs before an ACK
/// passes it change nothing), for 16 recovery episodes (RACK.reo_wnd_persist), after which
/// it is back to one step. The window never exceeds SRTT.
#[test]
fn rfc8985_6_2_step_4_dsack_widens_the_reordering_window_for_sixteen_recoveries() {
    let mut r = rtt_of_1_ms();
    // Reordering seen (segment 1 delivered after segment 2, never retransmitted).
    send_n(&mut r, us(2_000), S + 1000, 4);
    r.on_ack(us(3_000), S + 1000, &[(S + 2000, S + 3000)], None);
    r.on_ack(us(3_100), S + 5000, &[], None);
    assert!(r.reordering_seen);
    assert_eq!(r.stats().reo_wnd_mult, 1);
    // A D-SACK: one step more; a second one in the same round trip: nothing more.
    send_n(&mut r, us(3_100), S + 5000, 4);
    r.on_dsack(S + 5000, S + 9000, S, S + 1000);
    r.on_dsack(S + 5000, S + 9000, S, S + 1000);
    assert_eq!(r.stats().reo_wnd_mult, 2);
    assert_eq!(r.stats().dsacks_received, 2);
    // Segment 5 reordered behind 6..8: lost only after RACK.rtt + 2 * min_RTT / 4
    // (3_100 + 1_100 + 500), where one step gave 4_450.
    let o = r.on_ack(us(4_200), S + 5000, &[(S + 6000, S + 9000)], None);
    assert_eq!(o.lost_marked, 0);
    assert_eq!(r.poll_timeout(), Some(us(4_700)));
    // Once an ACK passes the round trip's SND.NXT (9000), the next D-SACK steps again.
    r.on_ack(us(4_300), S + 9000, &[], None);
    r.on_dsack(S + 9000, S + 9000, S, S + 1000);
    assert_eq!(r.stats().reo_wnd_mult, 3);
    // Sixteen recovery episodes without a D-SACK bring it back to one step.
    let mut next = S + 9000;
    let mut now = 5_000;
    for episode in 1..=16 {
        assert_eq!(r.stats().reo_wnd_mult, 3, "episode {episode}");
        // The first segment is lost: the others, sent 2 ms later, are SACKed a round trip
        // after that, long after the first one's window passed.
        send_n(&mut r, us(now), next, 1);
        send_n(&mut r, us(now + 2_000), next + 1000, 3);
        now += 3_000;
        let o = r.on_ack(us(now), next, &[(next + 1000, next + 4000)], None);
        assert_eq!(o.lost_marked, 1, "episode {episode}");
        while r.next_retransmit().is_some() {
            let (seq, len) = r.next_retransmit().unwrap();
            r.on_sent(us(now), seq, len, true);
        }
        now += 1_000;
        next += 4000;
        r.on_ack(us(now), next, &[], None);
    }
    assert_eq!(r.stats().fast_recoveries, 16);
    assert_eq!(r.stats().reo_wnd_mult, 1);
    // Bounded by SRTT (~1 ms) whatever the multiplier: 255 steps at most.
    for _ in 0..300 {
        r.on_dsack(next, next + 4000, S, S + 1000);
        r.on_sent(us(now), next, 4000, false);
        next += 4000;
        r.on_ack(us(now + 1_000), next, &[], None);
        now += 1_000;
    }
    assert_eq!(r.stats().reo_wnd_mult, 255);
}

/// RFC 3708 2 (detection) with Linux's `tcp_try_undo_dsack` (response): once D-SACKs have
/// covered every retransmission of a recovery episode, none was needed (the originals
/// arrived, late: reordering, RFC 8985 6.2 step 3 learnt late) and the episode's window
/// reduction is undone, at its end if they came during it. A D-SACK for other octets, or
/// one covering only some of the episode's retransmissions, undoes nothing.
#[test]
fn rfc3708_d_sacks_for_every_retransmission_undo_the_episode() {
    // (D-SACK blocks, relative to the lost segment at S + 1000; whether they come before
    // the episode ends; undone?)
    type Case = (&'static [(usize, usize)], bool, bool);
    let cases: [Case; 5] = [
        (&[(0, 1000)], false, true),
        (&[(0, 1000)], true, true),
        (&[(0, 600), (600, 1000)], false, true),
        (&[(0, 600)], false, false),
        (&[(2000, 3000)], false, false),
    ];
    for (blocks, during, undone) in cases {
        let mut r = rtt_of_1_ms();
        r.cwnd = 20_000;
        let before = (r.cwnd(), r.ssthresh);
        // Segment S+1000 lost: the three after it, sent later, SACKed long after.
        send_n(&mut r, us(2_000), S + 1000, 1);
        send_n(&mut r, us(2_500), S + 2000, 3);
        let o = r.on_ack(us(4_000), S + 1000, &[(S + 2000, S + 5000)], None);
        assert_eq!(o.lost_marked, 1);
        assert!(r.cwnd() < before.0, "reduced");
        // The reduction's target (RFC 9937 section 6: cwnd = ssthresh at the episode's end; during
        // it PRR's pipe + sndcnt, which this test took for the reduced window before).
        let reduced = r.ssthresh;
        let (seq, len) = r.next_retransmit().expect("retransmit");
        r.on_sent(us(4_000), seq, len, true);
        let dsack = |r: &mut Recovery| {
            for &(a, b) in blocks {
                r.on_dsack(S + 5000, S + 5000, S + 1000 + a, S + 1000 + b);
            }
        };
        if during {
            dsack(&mut r);
            assert_eq!(
                r.stats().undone_recoveries,
                0,
                "not while the episode lasts"
            );
        }
        r.on_ack(us(5_000), S + 5000, &[], None);
        if !during {
            dsack(&mut r);
        }
        let st = r.stats();
        assert_eq!(
            st.undone_recoveries,
            u64::from(undone),
            "{blocks:?} during {during}"
        );
        if undone {
            assert!(r.cwnd() >= before.0, "{} < {}", r.cwnd(), before.0);
            assert_eq!(r.ssthresh, before.1);
            assert!(r.reordering_seen);
        } else {
            assert!(r.cwnd() <= reduced + 1000, "{}", r.cwnd());
        }
    }
}

/// A recovery episode that resent segment S + 1000 once (the three after it, sent later,
/// SACKed long after) and ended with the ACK of S + 5000: the undo waits for a D-SACK.
fn ended_episode_resent_once() -> Recovery {
    let mut r = rtt_of_1_ms();
    r.cwnd = 20_000;
    send_n(&mut r, us(2_000), S + 1000, 1);
    send_n(&mut r, us(2_500), S + 2000, 3);
    r.on_ack(us(4_000), S + 1000, &[(S + 2000, S + 5000)], None);
    let (seq, len) = r.next_retransmit().expect("retransmit");
    r.on_sent(us(4_000), seq, len, true);
    r.on_ack(us(5_000), S + 5000, &[], None);
    r
}

/// An RTO ends the wait (its own undo goes by timestamps, RFC 3522): a D-SACK for the
/// earlier episode's retransmission then restores nothing.
#[test]
fn rfc3708_an_rto_ends_an_episodes_undo() {
    let mut r = ended_episode_resent_once();
    // An RTO on the next flight.
    send_n(&mut r, us(5_000), S + 5000, 2);
    while r.stats().rto_count == 0 {
        let t = r.poll_timeout().expect("armed");
        r.handle_timeout(t);
    }
    r.on_dsack(S + 5000, S + 7000, S + 1000, S + 2000);
    assert_eq!(r.stats().undone_recoveries, 0);
}

/// RFC 3708 2 with Linux's `tcp_is_sackblock_valid`: an episode whose retransmission no
/// D-SACK covered stops waiting once SND.UNA is a window's span (2^30) past it. Kept until
/// the next episode instead, its range outlived a wrap of the sequence space: 2^32 octets
/// later a D-SACK with the same numbers (a segment the network duplicated) restored the
/// window from before the long-past reduction. A D-SACK within the span still undoes it
/// (`rfc3708_d_sacks_for_every_retransmission_undo_the_episode`).
#[test]
fn rfc3708_an_episodes_undo_ends_before_the_sequence_space_wraps() {
    for (octets, undone) in [(1usize << 29, 1), (1 << 32, 0)] {
        let mut r = ended_episode_resent_once();
        // Loss-free flights of 60,000 octets, each acknowledged whole.
        let mut next = S + 5000;
        let mut now = 5_000;
        let mut sent = 0;
        while sent < octets {
            let n = 60_000.min(octets - sent);
            r.on_sent(us(now), next, n, false);
            next += n;
            sent += n;
            now += 1_000;
            r.on_ack(us(now), next, &[], None);
        }
        // The same numbers as the retransmission, 2^32 octets on: another segment.
        r.on_dsack(next, next, S + 1000, S + 2000);
        assert_eq!(r.stats().undone_recoveries, undone, "after {octets} octets");
    }
}

/// RFC 3708 2: the undo needs every retransmission of the episode D-SACKed, also those
/// sent after D-SACKs had covered the earlier ones (a second loss in the same episode).
#[test]
fn rfc3708_a_retransmission_after_the_d_sacks_keeps_the_reduction() {
    let mut r = rtt_of_1_ms();
    r.cwnd = 20_000;
    send_n(&mut r, us(2_000), S + 1000, 1);
    send_n(&mut r, us(2_500), S + 2000, 4);
    r.on_ack(us(4_000), S + 1000, &[(S + 2000, S + 4000)], None);
    // The reduction's target (RFC 9937 section 6: cwnd = ssthresh at the episode's end; during it
    // PRR's pipe + sndcnt, which this test took for the reduced window before).
    let reduced = r.ssthresh;
    let (seq, len) = r.next_retransmit().expect("retransmit");
    r.on_sent(us(4_000), seq, len, true);
    // Its D-SACK comes while the episode goes on...
    r.on_dsack(S + 1000, S + 6000, S + 1000, S + 2000);
    // ...then segment 4000 is lost too (5000 SACKed long after), and resent.
    let o = r.on_ack(us(9_000), S + 4000, &[(S + 5000, S + 6000)], None);
    assert_eq!(o.lost_marked, 1);
    let (seq, len) = r.next_retransmit().expect("second retransmission");
    assert_eq!(seq, S + 4000);
    r.on_sent(us(9_000), seq, len, true);
    r.on_ack(us(10_000), S + 6000, &[], None);
    assert_eq!(r.stats().undone_recoveries, 0);
    assert!(r.cwnd() <= reduced + 2000, "{} vs {reduced}", r.cwnd());
}

/// RFC 8985 7.3: after attempting a loss probe the sender MUST re-arm the RTO timer (from
/// the probe, as Linux's `tcp_send_loss_probe` does with `tcp_rearm_rto`). With an SRTT of
/// 2.4 ms the PTO (4.8 ms) came 0.2 ms before the RTO (its 5 ms floor then, armed at the
/// first transmission; 2.6 ms before it with the floor a margin above SRTT, 7.4 ms), so the
/// RTO fired before the probe's ACK could come back: a spurious timeout, cwnd down to one
/// segment and the whole flight marked lost, whenever a tail was probed.
#[test]
fn rfc8985_7_3_the_rto_is_rearmed_after_a_loss_probe() {
    let mut r = rec(Congestion::Cubic);
    let mut t = 0;
    let mut seq = S;
    // Steady 2.4 ms samples: SRTT 2.4 ms, RTTVAR small, RTO SRTT + the 5 ms floor.
    for _ in 0..10 {
        r.on_sent(us(t), seq, 1000, false);
        seq += 1000;
        t += 2_400;
        r.on_ack(us(t), seq, &[], None);
    }
    assert_eq!(r.srtt(), Some(Duration::from_micros(2_400)));
    assert_eq!(r.rto(), Duration::from_micros(7_400));
    // A flight of three segments, the tail lost.
    for _ in 0..3 {
        r.on_sent(us(t), seq, 1000, false);
        seq += 1000;
    }
    let pto = r.poll_timeout().unwrap();
    assert_eq!(pto, us(t + 4_800), "PTO = 2 SRTT");
    assert_eq!(r.handle_timeout(pto), TimeoutAction::Probe);
    r.on_sent(pto, seq - 1000, 1000, true);
    r.probe_sent(true);
    // The probe's ACK is due one RTT later: no RTO before then.
    let next = r.poll_timeout().unwrap();
    assert!(
        next >= pto + r.rto(),
        "the RTO fires {} us after the probe, not re-armed from it",
        (next - pto).total_micros()
    );
    assert_eq!(
        r.handle_timeout(pto + Duration::from_micros(2_400)),
        TimeoutAction::None
    );
    assert_eq!(r.stats().rto_count, 0);
}

/// RFC 6298 3 (Karn): no RTT sample from an ACK that acknowledges a retransmission, not
/// even from the segments sent once that it covers too (as Linux's `tcp_clean_rtx_queue`
/// drops the sample once `FLAG_RETRANS_DATA_ACKED`): the cumulative ACK of those segments
/// was held back by the hole the retransmission filled, so the time since they were sent
/// is the repair's, not a round trip. Without timestamps every RTO (and every fast
/// retransmit) fed such samples in: in a two-connection simulation losing 30 % of the ACKs
/// (no timestamps, RACK-TLP off), SRTT reached 10 s and the RTO its 60 s ceiling; 4 MiB
/// took 283 s or more than 600 s (two seeds) instead of 2-3.5 s.
#[test]
fn rfc6298_3_no_sample_from_an_ack_that_covers_a_retransmission() {
    for clean in [false, true] {
        let mut r = rec(Congestion::NewReno);
        // SRTT 1 ms.
        sample_then_send(&mut r, 0);
        assert_eq!(r.srtt(), Some(Duration::from_millis(1)));
        // Ten segments at 2 ms; the first is lost and the RTO resends it.
        send_n(&mut r, us(2_000), S + 1000, 10);
        let t = fire_rto(&mut r);
        assert_eq!(r.next_retransmit(), Some((S + 1000, 1000)));
        r.on_sent(t, S + 1000, 1000, true);
        if clean {
            // The ACK takes the fast path (no RTO state left to undo).
            r.undo = None;
            r.recover = None;
        }
        // One ACK (1 ms later) covers the retransmission and the nine held behind it.
        let o = r.on_ack(t + Duration::from_millis(1), S + 11_000, &[], None);
        assert_eq!(o.newly_acked, 10_000);
        assert_eq!(
            o.rtt_sample, None,
            "sampled {:?} (clean path: {clean})",
            o.rtt_sample
        );
        assert_eq!(r.srtt(), Some(Duration::from_millis(1)));
    }
}

/// RFC 8985 6.2 infers a loss from the delivery of a segment sent later; without SACK a
/// cumulative ACK tells of no delivery above SND.UNA, so the only segment it can show
/// missing is the one at SND.UNA (RFC 6582 3.2 step 3: a partial ACK retransmits the first
/// unacknowledged segment). RACK marked every segment sent before the acknowledged
/// retransmission lost, the ones the receiver held behind the next hole too: a go-back-N
/// of the whole window at each partial ACK (in a two-connection simulation of 4 MiB at
/// 1 % loss without SACK, 87-107 segments resent for 21-22 lost; 24-51 with RACK off).
#[test]
fn rfc8985_6_2_without_sack_a_partial_ack_marks_only_the_next_hole_lost() {
    let mut r = rec(Congestion::NewReno);
    sample_then_send(&mut r, 10);
    // Segments 1 and 5 lost: three duplicate ACKs, the fast retransmit of segment 1.
    for _ in 0..3 {
        r.on_ack(us(3_000), S + 1000, &[], None);
    }
    assert_eq!(r.next_retransmit(), Some((S + 1000, 1000)));
    r.on_sent(us(3_000), S + 1000, 1000, true);
    // Its ACK, a millisecond later, acknowledges up to segment 5, the next hole.
    r.on_ack(us(4_000), S + 5000, &[], None);
    let mut lost = Vec::new();
    for s in r.segs.iter().filter(|s| s.awaits_retransmit()) {
        lost.push(s.start - S);
    }
    assert_eq!(lost, vec![5000], "segments marked lost (offsets from S)");
}

/// Scoreboard entries the SACK and retransmission walks looked at on this thread since the
/// last call (`VISITS`).
fn take_visits() -> u64 {
    VISITS.with(|v| v.replace(0))
}

/// The most entries one SACK block (RFC 2018 4) or one retransmission may cost over a
/// scoreboard of `n` entries: two binary searches of at most log2(n) + 1 probes each (the
/// walk's start, the skip over what a block of the last ACK covered) and a few entries
/// (the one the skip lands on, the one newly covered, the one that ends the walk).
fn walk_bound(n: usize) -> u64 {
    let log = u64::from(usize::BITS - n.leading_zeros()) + 1;
    2 * log + 4
}

/// RFC 2018 4 and RFC 6675 5: in a recovery episode with three holes in a window of 3000
/// segments, every ACK carries up to three blocks (the one the arriving segment grew,
/// first, then the two before), and each costs O(log n) entries looked at, not a walk
/// from the front of the scoreboard (up to n per block: 3000 + 2000 + 1000 for the
/// last ACKs, quadratic over the episode). What the blocks mark is unchanged: each ACK
/// newly SACKs exactly its segment.
#[test]
fn rfc6675_sack_blocks_cost_what_they_newly_cover_not_the_window() {
    const N: usize = 3000;
    let mut r = rtt_of_1_ms();
    let base = S + 1000;
    send_n(&mut r, us(2_000), base, N);
    let seg = |k: usize| base + k * 1000;
    let mut worst = 0;
    for k in 1..N {
        if k % 1000 == 0 {
            continue; // the holes: segments 0, 1000 and 2000
        }
        let g = k / 1000;
        let mut blocks = vec![(seg(g * 1000 + 1), seg(k + 1))];
        for h in (g.saturating_sub(2)..g).rev() {
            blocks.push((seg(h * 1000 + 1), seg(h * 1000 + 1000)));
        }
        take_visits();
        let o = r.on_ack(us(3_000 + k as i64), base, &blocks, None);
        let v = take_visits();
        assert_eq!(o.newly_sacked, 1000, "ack {k}");
        // And RACK's walk (RFC 8985 6.2 step 5, counted too): two binary searches more.
        assert!(
            v <= (blocks.len() as u64 + 2) * walk_bound(N),
            "ack {k}: {v} entries looked at for {} blocks",
            blocks.len()
        );
        worst = worst.max(v);
    }
    assert_eq!(r.tally.sacked, N - 3);
    assert!(worst > 0);
}

/// RFC 6675 5 (4.3): a retransmission in the middle of a window of 3000 segments (the
/// scoreboard marks it and splits nothing) costs O(log n) entries looked at, not the walk
/// from the front up to it.
#[test]
fn rfc6675_a_retransmission_costs_the_segments_it_covers() {
    const N: usize = 3000;
    let mut r = rtt_of_1_ms();
    let base = S + 1000;
    send_n(&mut r, us(2_000), base, N);
    take_visits();
    r.on_sent(us(3_000), base + 2500 * 1000, 1000, true);
    let v = take_visits();
    assert!(v <= walk_bound(N), "{v} entries looked at");
    let s = r.segs.iter().find(|s| s.retransmitted).unwrap();
    assert_eq!((s.start, s.end), (base + 2500 * 1000, base + 2501 * 1000));
    assert_eq!(r.segs.len(), N);
}

/// RFC 8985 6.2 step 4: RACK.dsack_round ends once SND.UNA reaches it. Across the
/// sequence-number wrap (2^32 to 0) a round ends as anywhere else; and a round that ended
/// long ago stays ended: a D-SACK after more than 2^31 octets (here 2.5 GiB, which also
/// runs across the wrap) starts a new round trip and widens the window. Before, the round
/// was kept until the next D-SACK and compared with its ACK then, modulo 2^32: 2^31 octets
/// on, that ACK read as before the round, and every D-SACK of the next 2^31 octets was
/// ignored.
#[test]
fn rfc8985_6_2_step_4_a_dsack_round_ends_at_the_wrap_and_stays_ended() {
    let start = TcpSeqNumber(-10_000); // 2^32 - 10000
    let mut r = rec(Congestion::Cubic);
    r.on_sent(us(0), start, 1000, false);
    r.on_ack(
        us(1_000),
        start + 1000,
        &[],
        Some(Duration::from_micros(1_000)),
    );
    let mut una = start + 1000;
    let mut now = 2_000;
    // A D-SACK: a round trip until SND.NXT, which lies past the wrap.
    send_n(&mut r, us(now), una, 12);
    let nxt = una + 12_000;
    assert!(nxt.0 > 0 && una.0 < 0);
    r.on_dsack(una, nxt, start, start + 1000);
    assert_eq!(r.stats().reo_wnd_mult, 2);
    // Within the round, across the wrap: the same round trip.
    r.on_ack(us(now + 500), una + 9000, &[], None);
    r.on_dsack(una + 9000, nxt, start, start + 1000);
    assert_eq!(r.stats().reo_wnd_mult, 2);
    // An ACK reaches the round's end (past 0): the next D-SACK steps again.
    r.on_ack(us(now + 1_000), nxt, &[], None);
    una = nxt;
    now += 1_000;
    r.on_dsack(una, una, start, start + 1000);
    assert_eq!(r.stats().reo_wnd_mult, 3);
    // That round (SND.NXT = SND.UNA) ends with the next ACK; then 2.5 GiB go by.
    for _ in 0..5 {
        r.on_sent(us(now), una, 1 << 29, false);
        una += 1 << 29;
        now += 1_000;
        r.on_ack(us(now), una, &[], None);
    }
    r.on_sent(us(now), una, 1000, false);
    r.on_dsack(una, una + 1000, start, start + 1000);
    assert_eq!(r.stats().reo_wnd_mult, 4);
}

proptest! {
    /// RFC 2018 4: an ACK marks SACKed exactly the entries of the scoreboard that one of its
    /// blocks covers whole, and reports their octets newly SACKed, whatever the blocks
    /// (grown from the last ACK's, repeated, new, below or across the cumulative ACK,
    /// across the sequence wrap), the entries (split by partial retransmissions, cut by
    /// the cumulative ACK) and however `on_ack` finds them (its binary searches, the skip
    /// over the last ACK's blocks): the walk from the front over every entry, as before.
    #[test]
    fn sack_marking_agrees_with_the_walk_over_every_entry(
        ops in proptest::collection::vec(
            (0u8..5, 0u32..1_000_000, 0u32..1_000_000, 0u32..1_000_000),
            1..120,
        ),
    ) {
        let base = TcpSeqNumber(-30_000);
        let mut r = rec(Congestion::Cubic);
        let (mut una, mut nxt, mut now) = (base, base, 0i64);
        let mut last: Vec<(TcpSeqNumber, TcpSeqNumber)> = Vec::new();
        for (kind, a, b, c) in ops {
            now += 100;
            let span = (nxt - una) as u32;
            match kind {
                0 => {
                    for _ in 0..=(a % 8) {
                        r.on_sent(us(now), nxt, 1000, false);
                        nxt += 1000;
                    }
                }
                1 | 2 => {
                    // The cumulative ACK anywhere (kind 2 leaves it).
                    let ack = if kind == 1 { una + (a % (span + 1)) as usize } else { una };
                    let mut blocks = Vec::new();
                    if span > 0 {
                        for j in 0..=(b % 3) as usize {
                            let x = c.rotate_left(8 * j as u32);
                            let blk = match (x % 3, last.get(j)) {
                                // The last ACK's block, grown by a segment or not.
                                (0, Some(&(l, rr))) => {
                                    let grown = rr + (x as usize / 3 % 2) * 1000;
                                    (l, if grown > nxt { nxt } else { grown })
                                }
                                _ => {
                                    // Anywhere from SND.UNA, on boundaries or not.
                                    let unit = if x % 2 == 0 { 1000 } else { 1 };
                                    let l = una + (a.rotate_left(3 * j as u32) % span) as usize / unit * unit;
                                    let len = ((x / 7) % span) as usize / unit * unit + unit;
                                    let rr = l + len;
                                    (l, if rr > nxt { nxt } else { rr })
                                }
                            };
                            blocks.push(blk);
                        }
                    }
                    // Each entry's flag before, by its end (the cumulative ACK may cut its
                    // start).
                    let before: Vec<(TcpSeqNumber, bool)> =
                        r.segs.iter().map(|s| (s.end, s.sacked)).collect();
                    let o = r.on_ack(us(now), ack, &blocks, None);
                    una = una.max(ack);
                    let mut newly = 0;
                    for s in &r.segs {
                        let was = before.iter().find(|p| p.0 == s.end).is_some_and(|p| p.1);
                        let covered = blocks
                            .iter()
                            .any(|&(l, rr)| l < rr && l <= s.start && s.end <= rr);
                        prop_assert_eq!(s.sacked, was || covered, "{:?} {:?}", s, blocks);
                        if s.sacked && !was {
                            newly += s.len();
                        }
                    }
                    // (The cumulative ACK goes first: a block below it marks nothing.)
                    prop_assert_eq!(o.newly_sacked, newly);
                    last = blocks;
                }
                3 => {
                    // What the connection would resend: whole entries.
                    if let Some((seq, len)) = r.next_retransmit() {
                        r.on_sent(us(now), seq, len, true);
                    }
                }
                _ => {
                    // Part of an outstanding range resent (an MSS that shrank): entries
                    // split.
                    if span > 1 {
                        let seq = una + (a % span) as usize;
                        let len = ((b % 1500) as usize + 1).min(nxt - seq);
                        r.on_sent(us(now), seq, len, true);
                    }
                }
            }
        }
    }
}

/// The walks over every entry from the front that `detect_loss`, `sack_mark_lost` and
/// `next_retransmit` made before `Marks` and `retx_order` (as they were, line for line):
/// the reference `loss_marks_agree_with_the_walks_over_every_entry` holds them to, taken
/// instead of them while `REFERENCE_WALKS` is set.
impl Recovery {
    pub(super) fn detect_loss_reference(&mut self, now: Instant) -> usize {
        let Some(rack_xmit) = self.rack_xmit else {
            return 0;
        };
        let sacked = self.tally.sacked;
        let reo_wnd = if !self.reordering_seen && (self.recover.is_some() || sacked >= 3) {
            Duration::ZERO
        } else {
            let w = self
                .min_rtt
                .get()
                .map_or(Duration::ZERO, |m| m / 4 * self.reo_wnd_mult);
            self.srtt.map_or(w, |s| w.min(s))
        };
        let mut lost = 0;
        let mut timer: Option<Instant> = None;
        let judged = if self.sack_seen { self.segs.len() } else { 1 };
        for s in self.segs.iter_mut().take(judged) {
            visited();
            let before = s.xmit < rack_xmit || (s.xmit == rack_xmit && s.end < self.rack_end);
            if !before && !s.resent {
                break;
            }
            if s.sacked || (s.lost && !s.retransmitted) || !before {
                continue;
            }
            let deadline = s.xmit + self.rack_rtt + reo_wnd;
            if deadline <= now {
                let was = *s;
                s.lost = true;
                s.retransmitted = false;
                self.tally.change(&was, s);
                lost += 1;
            } else {
                timer = Some(timer.map_or(deadline, |t| t.min(deadline)));
            }
        }
        self.reorder_at = timer;
        lost
    }

    pub(super) fn sack_mark_lost_reference(&mut self) -> usize {
        const DUP_THRESH: usize = 3;
        let (mut segs_above, mut octets_above, mut lost) = (0, 0, 0);
        for s in self.segs.iter_mut().rev() {
            visited();
            if s.sacked {
                segs_above += 1;
                octets_above += s.len();
            } else if !s.lost
                && !s.retransmitted
                && (segs_above >= DUP_THRESH || octets_above > (DUP_THRESH - 1) * self.smss)
            {
                let was = *s;
                s.lost = true;
                self.tally.change(&was, s);
                lost += 1;
            }
        }
        lost
    }

    pub(super) fn next_retransmit_reference(&self, flight: usize) -> Option<(TcpSeqNumber, usize)> {
        let s = self.segs.iter().find(|s| {
            visited();
            s.lost && !s.retransmitted && !s.sacked
        })?;
        if self.cfg.congestion != Congestion::None
            && flight + s.len() > self.cwnd
            && flight > 0
            && !self.retransmit_first
        {
            return None;
        }
        Some((s.start, s.len()))
    }
}

/// Runs `f` with the walks over every entry (`REFERENCE_WALKS`).
fn by_reference<T>(f: impl FnOnce() -> T) -> T {
    REFERENCE_WALKS.with(|c| c.set(true));
    let t = f();
    REFERENCE_WALKS.with(|c| c.set(false));
    t
}

/// The state but for the bounds and lists that only speed the walks up.
fn without_marks(r: &Recovery) -> String {
    let mut r = r.clone();
    r.marks = Marks::default();
    r.retx_order.clear();
    format!("{r:?}")
}

proptest! {
    /// RFC 8985 6.2 step 5, RFC 6675 4 (IsLost) and 5 (4.3): the loss marking and the
    /// choice of the next retransmission, which start their walks at `Marks`' bounds and
    /// take RACK's retransmissions in their time order (`retx_order`), mark the same
    /// segments lost at the same ACKs and timers, arm the same reorder timer and resend
    /// the same ranges as the walks over every entry from the front, whatever the sends,
    /// the ACKs and their SACK blocks (grown, repeated, anywhere, D-SACKs), the timestamp
    /// echoes (an RTO undone), the retransmissions (whole, in part: split entries; at the
    /// same instant: RACK's tie), the reorder timers, loss probes and RTOs, with RACK-TLP
    /// or RFC 6675's IsLost. The whole state but those bounds is compared after each step.
    #[test]
    fn loss_marks_agree_with_the_walks_over_every_entry(
        cc in 0u8..3,
        rack_tlp in any::<bool>(),
        ops in proptest::collection::vec(
            (0u8..8, 0u32..1_000_000, 0u32..1_000_000, 0u32..1_500, any::<bool>()),
            1..200,
        ),
    ) {
        let congestion = [Congestion::None, Congestion::NewReno, Congestion::Cubic][cc as usize];
        let cfg = RecoveryConfig { congestion, rack_tlp, ..RecoveryConfig::default() };
        let base = TcpSeqNumber(-30_000);
        let mut new = Recovery::new(&cfg, 1000, us(0));
        let mut old = new.clone();
        let (mut una, mut nxt, mut now) = (base, base, us(0));
        let mut last: Vec<(TcpSeqNumber, TcpSeqNumber)> = Vec::new();
        for (kind, a, b, step, flag) in ops {
            // Steps of zero: segments sent at the same instant (RACK's tie on the end).
            now += Duration::from_micros(u64::from(step % 3 * step));
            let span = (nxt - una) as u32;
            match kind {
                0 | 1 => {
                    for _ in 0..=(a % 6) {
                        new.on_sent(now, nxt, 1000, false);
                        old.on_sent(now, nxt, 1000, false);
                        nxt += 1000;
                    }
                }
                2 | 3 => {
                    // The cumulative ACK anywhere (kind 3 mostly leaves it).
                    let ack = if kind == 2 || a % 4 == 0 { una + (a % (span + 1)) as usize } else { una };
                    let mut blocks = Vec::new();
                    if span > 0 && b % 5 != 0 {
                        for j in 0..=(b % 3) as usize {
                            let x = b.rotate_left(8 * j as u32);
                            let blk = match (x % 3, last.get(j)) {
                                (0, Some(&(l, r))) => {
                                    let grown = r + (x as usize / 3 % 2) * 1000;
                                    (l, if grown > nxt { nxt } else { grown })
                                }
                                _ => {
                                    let unit = if x % 5 == 0 { 1 } else { 1000 };
                                    let l = una + (a.rotate_left(3 * j as u32) % span) as usize / unit * unit;
                                    let len = ((x / 7) % span) as usize / unit * unit + unit;
                                    let r = l + len;
                                    (l, if r > nxt { nxt } else { r })
                                }
                            };
                            blocks.push(blk);
                        }
                    }
                    // A timestamp echo: an RTT from now back to some earlier instant (before
                    // or after an RTO's retransmission: an RTO undone or not).
                    let ts = flag.then(|| Duration::from_micros(u64::from(a % 20_000)));
                    let o = new.on_ack(now, ack, &blocks, ts);
                    let p = by_reference(|| old.on_ack(now, ack, &blocks, ts));
                    prop_assert_eq!(o, p);
                    una = una.max(ack);
                    last = blocks;
                }
                4 => {
                    // What the connection would resend: a lost range, else the last segment.
                    let r = new.next_retransmit().or_else(|| new.last_segment());
                    let q = by_reference(|| old.next_retransmit().or_else(|| old.last_segment()));
                    prop_assert_eq!(r, q);
                    if let Some((seq, len)) = r {
                        new.on_sent(now, seq, len, true);
                        old.on_sent(now, seq, len, true);
                    }
                }
                5 => {
                    // Part of an outstanding range resent (an MSS that shrank): entries split.
                    if span > 1 {
                        let seq = una + (a % span) as usize;
                        let len = ((b % 2500) as usize + 1).min(nxt - seq);
                        new.on_sent(now, seq, len, true);
                        old.on_sent(now, seq, len, true);
                    }
                }
                6 => {
                    // The timers: reorder, probe (answered as the connection would), RTO.
                    if let Some(t) = new.poll_timeout() {
                        now = now.max(t);
                    }
                    let t = new.handle_timeout(now);
                    prop_assert_eq!(t, by_reference(|| old.handle_timeout(now)));
                    if t == TimeoutAction::Probe {
                        if let Some((seq, len)) = new.last_segment() {
                            new.on_sent(now, seq, len, true);
                            old.on_sent(now, seq, len, true);
                            new.probe_sent(true);
                            old.probe_sent(true);
                        }
                    }
                }
                _ => {
                    // A D-SACK for some octets sent so far: reordering seen, a wider window.
                    let sent = (nxt - base) as u32;
                    if sent > 0 {
                        let l = base + (b % sent) as usize;
                        let r = l + ((a % 3000) as usize + 1).min(nxt - l);
                        new.on_dsack(una, nxt, l, r);
                        old.on_dsack(una, nxt, l, r);
                    }
                }
            }
            // What the connection would resend now (a look, not a step: the hint moves).
            let r = new.clone().next_retransmit();
            prop_assert_eq!(r, by_reference(|| old.clone().next_retransmit()));
            prop_assert_eq!(without_marks(&new), without_marks(&old));
        }
    }
}

/// RFC 8985 6.2 step 5: 3000 segments in flight, the first lost, resent once RACK marks
/// it, and 500 ACKs each SACKing one more segment (RFC 2018 4). Each ACK's RACK walk costs
/// O(log n) and what it judges, not the SACKed segments below the RACK segment nor the
/// retransmission sent after it (before: the walk from the front passed over every one of
/// them, 500 entries at the last ACK, quadratic over an episode).
#[test]
fn rfc8985_6_2_rack_walk_costs_what_it_judges_not_the_sacked_segments() {
    const N: usize = 3000;
    let mut r = rtt_of_1_ms();
    let base = S + 1000;
    send_n(&mut r, us(2_000), base, N);
    let seg = |k: usize| base + k * 1000;
    let mut worst = 0;
    for k in 1..=500 {
        take_visits();
        let o = r.on_ack(us(3_000 + k as i64), base, &[(seg(1), seg(k + 1))], None);
        let _ = r.next_retransmit();
        let v = take_visits();
        assert_eq!(o.newly_sacked, 1000, "ack {k}");
        // The SACK block's walk, RACK's two (its floor, its first retransmission) and the
        // search for the next retransmission: O(log n) each.
        assert!(v <= 4 * walk_bound(N), "ack {k}: {v} entries looked at");
        worst = worst.max(v);
        if let Some((seq, len)) = r.next_retransmit() {
            assert_eq!((seq, len), (base, 1000), "ack {k}");
            r.on_sent(us(3_000 + k as i64), seq, len, true);
        }
    }
    // Segment 0 was marked lost (DupThresh SACKed: no reordering window) and resent once.
    assert_eq!(r.stats.retransmitted_segments, 1);
    assert!(r.segs[0].retransmitted && !r.segs[0].lost);
    assert!(r.none_lost());
    assert!(worst > 0);
}

/// RFC 8985 6.2 step 5 after an RTO (RFC 6298 5.4, RFC 2018 8: every segment lost, SACKs
/// forgotten): 3000 segments await their retransmission, and each ACK of a retransmission
/// costs O(log n), not a walk over every segment still waiting (sent before the RACK
/// segment, the retransmission ACKed, and lost: passed over, 2,500 of them at each of
/// 500 ACKs). The first ACK after the RTO walks them once.
#[test]
fn rfc8985_6_2_rack_walk_after_an_rto_costs_what_it_judges() {
    const N: usize = 3000;
    let mut r = rtt_of_1_ms();
    let base = S + 1000;
    send_n(&mut r, us(2_000), base, N);
    let seg = |k: usize| base + k * 1000;
    // A SACK peer (RACK judges every segment), the last segment SACKed.
    r.on_ack(us(2_500), base, &[(seg(N - 1), seg(N))], None);
    let mut now = fire_rto(&mut r).total_micros();
    assert_eq!(r.tally.lost, N);
    let mut worst = 0;
    for k in 0..500 {
        r.on_sent(us(now), seg(k), 1000, true);
        now += 1_000;
        take_visits();
        let o = r.on_ack(us(now), seg(k + 1), &[], None);
        let v = take_visits();
        assert_eq!((o.newly_acked, o.lost_marked), (1000, 0), "ack {k}");
        if k > 0 {
            assert!(v <= 2 * walk_bound(N), "ack {k}: {v} entries looked at");
            worst = worst.max(v);
        }
    }
    assert_eq!(r.tally.lost, N - 500);
    assert!(worst > 0);
}

/// RFC 6675 5 (4.3): after an RTO marked 3000 segments lost, each search for the next one
/// to resend costs O(log n), not the walk from the front over those resent already (2,500
/// entries for the 2,500th).
#[test]
fn rfc6675_the_next_retransmission_is_found_from_the_last_one() {
    const N: usize = 3000;
    let mut r = rec(Congestion::None);
    let base = S;
    send_n(&mut r, us(0), base, N);
    let now = fire_rto(&mut r);
    let mut worst = 0;
    for k in 0..N {
        take_visits();
        let next = r.next_retransmit();
        let v = take_visits();
        assert_eq!(next, Some((base + k * 1000, 1000)));
        assert!(
            v <= walk_bound(N) + 2,
            "retransmission {k}: {v} entries looked at"
        );
        worst = worst.max(v);
        r.on_sent(now, base + k * 1000, 1000, true);
    }
    assert_eq!(r.next_retransmit(), None);
    assert!(worst > 0);
}

/// RFC 6675 4 (IsLost) and 5, RACK off: 3000 segments in flight, the first lost, and 500
/// ACKs each SACKing one more segment. Each ACK's marking costs O(log n) and the segments
/// it newly covers, not a walk down the whole scoreboard (3000 entries per ACK, quadratic
/// over an episode). Segment 0 is marked lost at the third SACKed segment, as before.
#[test]
fn rfc6675_islost_costs_what_the_ack_newly_covers_not_the_window() {
    const N: usize = 3000;
    let cfg = RecoveryConfig {
        rack_tlp: false,
        ..RecoveryConfig::default()
    };
    let mut r = Recovery::new(&cfg, 1000, us(0));
    r.on_sent(us(0), S, 1000, false);
    r.on_ack(us(1_000), S + 1000, &[], Some(Duration::from_micros(1_000)));
    let base = S + 1000;
    send_n(&mut r, us(2_000), base, N);
    let seg = |k: usize| base + k * 1000;
    let mut worst = 0;
    for k in 1..=500 {
        take_visits();
        let o = r.on_ack(us(3_000 + k as i64), base, &[(seg(1), seg(k + 1))], None);
        let v = take_visits();
        assert_eq!(o.newly_sacked, 1000, "ack {k}");
        assert_eq!(o.lost_marked, usize::from(k == 3), "ack {k}");
        assert!(v <= 2 * walk_bound(N), "ack {k}: {v} entries looked at");
        worst = worst.max(v);
    }
    assert_eq!(r.tally.lost, 1);
    assert!(r.segs[0].lost);
    assert!(worst > 0);
}

/// RFC 9438 4.2: t counts from the start of the congestion avoidance stage, not from the
/// loss: the epoch is unset while the recovery the reduction started lasts (here 50 ms,
/// the retransmission's round trip) and starts at the first ACK that may grow the window
/// after it. It started at the loss, so W_cubic(t) ran a whole recovery ahead.
#[test]
fn rfc9438_4_2_the_epoch_starts_with_congestion_avoidance_not_at_the_loss() {
    let mut r = cubic_first_of_twenty_lost();
    assert_eq!(r.cubic.epoch, None, "the epoch started at the loss");
    // The retransmission, acknowledged 50 ms later with everything: the ACK that ends the
    // recovery is the first that may grow the window, and starts the epoch.
    r.on_sent(us(1_000), S, 1000, true);
    r.on_ack(us(51_000), S + 20_000, &[], None);
    assert_eq!(r.recover, None);
    assert_eq!(r.cubic.epoch, Some(us(51_000)));
}

/// RFC 9438 4.3: CUBIC is in the Reno-friendly region when W_cubic(t) is below W_est, and
/// cwnd then follows W_est. The region was judged against the target a round trip ahead,
/// W_cubic(t + RTT): with a long round trip (2 s here) that target ran above W_est while
/// W_cubic(t) was below it, and cwnd crept up the concave curve instead of taking W_est.
#[test]
fn rfc9438_4_3_the_reno_friendly_region_is_judged_by_w_cubic_of_t() {
    let mut r = cubic_after_a_reduction();
    r.srtt = Some(Duration::from_secs(2));
    // W_cubic(0.001) = 70.01 < W_est = 75 < W_cubic(2.001) = 95.6.
    r.cubic.w_est = 75.0;
    let (mut t, mut round) = (0, rounds_of_1000());
    round(&mut r, 70, &mut t);
    // W_est after the round: 75 + 0.53 (it grew towards W_cubic(2.001 s) = 95.6 instead).
    assert!(
        (75_000..76_000).contains(&r.cwnd()),
        "cwnd {} not W_est in the Reno-friendly region",
        r.cwnd()
    );
}

/// RFC 9438 4.3: alpha_cubic is 3 (1 - beta) / (1 + beta) (0.53) while W_est is below
/// cwnd_prior, the window before the last reduction, and SHOULD be 1 once W_est has reached
/// it: W_est then grows by one segment a round trip, as Reno's window.
#[test]
fn rfc9438_4_3_alpha_becomes_one_once_w_est_reaches_cwnd_prior() {
    for (prior, want) in [(100.0, 3.0 * 0.3 / 1.7), (70.0, 1.0)] {
        let mut r = cubic_after_a_reduction();
        r.cubic.cwnd_prior = prior;
        let before = r.cubic.w_est;
        let (mut t, mut round) = (0, rounds_of_1000());
        round(&mut r, 70, &mut t);
        let grew = r.cubic.w_est - before;
        assert!(
            (grew - want).abs() < 0.01,
            "cwnd_prior {prior}: W_est grew by {grew} in a round trip, not {want}"
        );
    }
}

/// RFC 3708 2 with Linux's `tcp_try_undo_recovery` / `tcp_undo_cwnd_reduction`: an episode
/// whose every retransmission was D-SACKed while it lasted is undone at its end. From
/// congestion avoidance (ssthresh below cwnd before the episode) the full ACK's deflation
/// (RFC 6582 3.2 step 3, cwnd = min(cwnd, ssthresh)) must not take the restored window
/// back to the reduced ssthresh: the undo restored the old cwnd and the deflation then
/// undid it, while `undone_recoveries` counted an undo that changed nothing.
/// (`rfc3708_d_sacks_for_every_retransmission_undo_the_episode` starts from slow start,
/// ssthresh infinite, where the deflation changes nothing.)
#[test]
fn rfc3708_an_undo_at_the_episodes_end_survives_the_deflation() {
    for cc in [Congestion::NewReno, Congestion::Cubic] {
        let mut r = rec(cc);
        r.on_sent(us(0), S, 1000, false);
        r.on_ack(us(1_000), S + 1000, &[], Some(Duration::from_micros(1_000)));
        // Congestion avoidance: cwnd 20 segments, ssthresh 10.
        r.cwnd = 20_000;
        r.ssthresh = 10_000;
        let before = r.cwnd();
        send_n(&mut r, us(2_000), S + 1000, 1);
        send_n(&mut r, us(2_500), S + 2000, 3);
        let o = r.on_ack(us(4_000), S + 1000, &[(S + 2000, S + 5000)], None);
        assert_eq!(o.lost_marked, 1);
        let (seq, len) = r.next_retransmit().expect("retransmit");
        r.on_sent(us(4_000), seq, len, true);
        // The original arrived after all: its D-SACK comes while the episode lasts.
        r.on_dsack(S + 1000, S + 5000, S + 1000, S + 2000);
        r.on_ack(us(5_000), S + 5000, &[], None);
        assert_eq!(r.stats().undone_recoveries, 1, "{cc:?}");
        assert!(
            r.cwnd() >= before,
            "{cc:?}: cwnd {} after the undo, {before} before",
            r.cwnd()
        );
    }
}

/// RFC 9438 4.3: alpha_cubic becomes 1 once W_est reaches cwnd_prior, "the cwnd at the time
/// of most recently setting ssthresh"; RFC 5681 3.1: when the segment the RTO resends "has
/// already been retransmitted by way of the retransmission timer at least once, the value
/// of ssthresh is held constant" (and the code keeps the first RTO's `Undo` likewise). A
/// second consecutive RTO reduces nothing (cwnd is one segment already): it took
/// cwnd_prior to that one segment, so the congestion avoidance stage that follows ran
/// with alpha 1 from its start, as if no window had been lost.
#[test]
fn rfc9438_4_3_a_repeated_rto_keeps_cwnd_prior() {
    let (mut r, _) = after_rto();
    let prior = r.cubic.cwnd_prior;
    assert!(prior >= 10.0, "cwnd_prior {prior} after the first RTO");
    let mut now = r.poll_timeout().unwrap();
    while r.handle_timeout(now) != TimeoutAction::Retransmit {
        now = r.poll_timeout().unwrap();
    }
    assert_eq!(r.stats().rto_count, 2);
    assert_eq!(r.cwnd(), 1000);
    assert_eq!(r.cubic.cwnd_prior, prior, "the second RTO moved cwnd_prior");
}

/// RFC 9438 5.8 and RFC 4015 3.1: the time between a spurious RTO and the ACK that undoes it
/// is not the restored epoch's. CUBIC in congestion avoidance after a reduction (W_max 100
/// segments, cwnd 70), a window-limited round, then a full window whose ACK a descheduled
/// peer holds back 1 s: the RTO fires (cwnd one segment, the sender stalled) and the late
/// ACK, echoing the originals, undoes it. The restored epoch kept its start, so t counted
/// the stall, W_cubic(t) had run far ahead and cwnd jumped towards it at the 1.5x cap;
/// it goes on from the concave part of the curve instead, as after idle time.
#[test]
fn rfc9438_5_8_the_stall_of_a_spurious_rto_is_not_the_epochs() {
    let (mut r, mut t) = (cubic_after_a_reduction(), 0);
    let mut round = rounds_of_1000();
    let w = r.cwnd() / 1000;
    round(&mut r, w, &mut t);
    // A full window sent at `t`, then nothing back until the RTO.
    let from = S + w * 1000;
    let w = r.cwnd() / 1000;
    send_n(&mut r, us(t), from, w);
    let sent_at = us(t);
    let rto_at = fire_rto(&mut r);
    assert_eq!(r.cwnd(), 1000);
    assert_eq!(r.next_retransmit(), Some((from, 1000)));
    r.on_sent(rto_at, from, 1000, true);
    // 1 s later the ACK of the whole window, echoing the originals' timestamp: spurious.
    let now = sent_at + Duration::from_secs(1);
    r.on_ack(now, from + w * 1000, &[], Some(now - sent_at));
    assert_eq!(r.stats().spurious_rtos, 1);
    let before = r.cwnd();
    assert!(before >= 70_000, "cwnd {before} after the undo");
    t = now.total_micros();
    let mut next = from + w * 1000;
    for _ in 0..3 {
        let w = r.cwnd() / 1000;
        send_n(&mut r, us(t), next, w);
        next += w * 1000;
        t += 1000;
        r.on_ack(us(t), next, &[], None);
    }
    assert!(
        r.cwnd() < 73_500,
        "cwnd {} after three limited rounds following the undo ({before} at it)",
        r.cwnd()
    );
    assert!(r.cubic.epoch.is_some_and(|e| e <= us(t)));
}

/// RFC 8985 6.2 step 2: RACK.xmit_ts and RACK.end_seq move only to a segment sent after
/// the RACK segment (RACK_sent_after: a later time, or the same time and a higher end).
/// Four segments A, B, C, D leave in one burst (one instant); D is SACKed, then B: B was
/// not sent after D, yet it took RACK.end_seq down to its own end, so C, sent before D,
/// was no longer judged (only A was marked lost at the reordering timer) and waited for
/// the RTO.
#[test]
fn rfc8985_6_2_a_segment_of_the_same_burst_below_does_not_lower_rack_end_seq() {
    let mut r = rec(Congestion::Cubic);
    sample_then_send(&mut r, 4);
    let (a, b, c, d) = (S + 1000, S + 2000, S + 3000, S + 4000);
    r.on_ack(us(3_000), a, &[(d, d + 1000)], None);
    r.on_ack(us(3_100), a, &[(b, b + 1000), (d, d + 1000)], None);
    assert_eq!(r.rack_end, d + 1000, "RACK.end_seq lowered by B");
    // The reordering timer: A and C, both sent before D, are lost once it passes.
    let mut now = us(3_100);
    while let Some(t) = r.poll_timeout() {
        if t > us(4_500) {
            break;
        }
        now = t;
        assert_eq!(r.handle_timeout(now), TimeoutAction::None);
    }
    assert_eq!(r.stats().rto_count, 0);
    assert_eq!(r.next_retransmit(), Some((a, 1000)));
    r.on_sent(now, a, 1000, true);
    // C is lost too. RFC 9937 section 6 (PRR; this test resent C here before): an episode a timer
    // began has no ACK's delivered data to send by, only its first retransmission (RFC
    // 6675 5 (4.3)); C goes at the next ACK.
    assert!(r.segs.iter().any(|s| s.start == c && s.awaits_retransmit()));
    assert_eq!(r.next_retransmit(), None);
    r.on_ack(
        now + Duration::from_micros(100),
        S + 3000,
        &[(d, d + 1000)],
        None,
    );
    assert_eq!(r.next_retransmit(), Some((c, 1000)));
}

/// RFC 6298 3 and the note after 5.7 (Karn's algorithm, [KP87]): the backed-off RTO stays
/// until a valid RTT measurement "collapses" it (Linux: "only reset backoff on valid RTT
/// measurement"). Without timestamps the RTT grows from 1 ms to 8 ms: the RTO (1 ms + the
/// 5 ms floor) fires and backs off to 12 ms; the ACK of the retransmitted segment gives no
/// sample. It collapsed the RTO to 6 ms anyway, so every flight resent by the RTO (whose
/// ACKs, all covering retransmissions, never give a sample) drew another spurious RTO.
#[test]
fn rfc6298_3_karn_keeps_the_backed_off_rto_until_a_valid_sample() {
    let mut r = rec(Congestion::NewReno);
    r.on_sent(us(0), S, 1000, false);
    r.on_ack(us(1_000), S + 1000, &[], None);
    assert_eq!(r.rto(), Duration::from_millis(6));
    r.on_sent(us(2_000), S + 1000, 1000, false);
    r.on_sent(us(2_000), S + 2000, 1000, false);
    let rto_at = fire_rto(&mut r);
    assert_eq!(r.rto(), Duration::from_millis(12));
    r.on_sent(rto_at, S + 1000, 1000, true);
    // The ACK of the (first) retransmitted segment, 8 ms after it first left: no sample.
    let o = r.on_ack(us(10_000), S + 2000, &[], None);
    assert_eq!(o.rtt_sample, None);
    assert_eq!(
        r.rto(),
        Duration::from_millis(12),
        "backoff dropped without a sample"
    );
    // A segment sent once and acknowledged is a valid sample: the RTO follows it.
    r.on_sent(us(10_000), S + 2000, 1000, true);
    r.on_sent(us(10_000), S + 3000, 1000, false);
    r.on_ack(us(18_000), S + 3000, &[], None);
    r.on_ack(us(18_100), S + 4000, &[], None);
    assert!(r.srtt().is_some_and(|s| s > Duration::from_millis(1)));
    assert_ne!(r.rto(), Duration::from_millis(12));
}

/// What a connection sends after an ACK: the retransmissions the window allows, then new
/// segments of 1000 from `next`; returns the segments sent.
fn prr_drain(r: &mut Recovery, now: Instant, next: &mut TcpSeqNumber) -> usize {
    let mut n = 0;
    while let Some((seq, len)) = r.next_retransmit() {
        r.on_sent(now, seq, len, true);
        n += 1;
    }
    while r.send_allowance() >= 1000 {
        r.on_sent(now, *next, 1000, false);
        *next += 1000;
        n += 1;
    }
    n
}

/// RFC 9937 section 6 (RFC 6937's appendix example): 20 segments in flight (cwnd 20), the
/// first lost, each ACK delivering one more (a SACK block grown by a segment, or a
/// duplicate ACK without SACK). From the third, which begins the episode, PRR sends in
/// the proportion of the reduction: NewReno's 1/2 (ssthresh 10 of RecoverFS 18, the two
/// segments reported before the episode left out: RFC 9937's RecoverFS, test
/// `prr_recover_fs_leaves_out_what_was_sacked_before`) about one segment
/// every other ACK, the retransmission first; CUBIC's 0.7 (ssthresh 14) seven segments
/// per nine ACKs.
/// Before, cwnd fell to ssthresh at once: after the retransmission (RFC 6675 5 (4.3)) the
/// sender was silent until the pipe fell below it (seven ACKs for NewReno, three for
/// CUBIC), then sent one segment per ACK. At the episode's end cwnd is ssthresh.
#[test]
fn prr_one_loss_sends_in_proportion_to_the_reduction() {
    type Case = (Congestion, bool, &'static [usize]);
    let cases: [Case; 3] = [
        (Congestion::NewReno, true, &[1, 1, 0, 1, 0, 1, 0, 1]),
        (Congestion::NewReno, false, &[1, 1, 0, 1, 0, 1, 0, 1]),
        (Congestion::Cubic, true, &[1, 1, 1, 1, 0, 1, 1]),
    ];
    for (cc, sack, want) in cases {
        let mut r = rec(cc);
        sample_then_send(&mut r, 20);
        r.cwnd = 20_000;
        let mut next = S + 21_000;
        let (mut sent, mut pipes) = (vec![], vec![]);
        for k in 1..=2 + want.len() {
            let now = us(3_000 + k as i64 * 10);
            let blocks = [(S + 2000, S + 2000 + k * 1000)];
            let o = r.on_ack(now, S + 1000, if sack { &blocks } else { &[] }, None);
            assert_eq!(
                o.lost_marked,
                usize::from(k == 3),
                "{cc:?} sack {sack} ack {k}"
            );
            // Before the episode nothing is sent (limited transmit, RFC 3042, left out).
            if k >= 3 {
                pipes.push(r.in_flight());
                sent.push(prr_drain(&mut r, now, &mut next));
            }
        }
        assert_eq!(sent, want, "{cc:?} sack {sack}: segments sent per ACK");
        // PRR's proportional part throughout (pipe > ssthresh at every ACK).
        assert!(pipes.iter().all(|&p| p > r.ssthresh), "{pipes:?}");
        assert_eq!(r.stats().retransmitted_segments, 1);
        // RFC 9937 section 6: on exiting recovery cwnd = ssthresh (then the ACK's congestion
        // avoidance, RFC 5681 3.1, as Linux).
        assert!(r.cwnd() > r.ssthresh, "PRR's pipe + sndcnt");
        r.on_ack(us(5_000), next, &[], None);
        if cc == Congestion::NewReno {
            let ca = 1000 * (next - (S + 1000)) / r.ssthresh;
            assert_eq!(r.cwnd(), r.ssthresh + ca, "sack {sack}");
        } else {
            assert!(r.cwnd() >= r.ssthresh);
        }
    }
}

/// RFC 9937 section 6 with RFC 6675 5 (4.3): an episode the reorder timer begins (RACK, RFC 8985
/// 6.2) has no ACK, so no delivered data to send by: the first retransmission goes at
/// once whatever the pipe, nothing more until an ACK. Ten segments out, the tenth SACKed,
/// the nine before it lost at the timer: the pipe is empty, and with cwnd at ssthresh (5)
/// the timer sent five retransmissions at once; then the ACK of the first allows two
/// (PRR-SSRB, a SafeACK: the segment it delivered and one more).
#[test]
fn prr_a_reorder_timers_entry_sends_the_first_retransmission_alone() {
    let mut r = rec(Congestion::NewReno);
    sample_then_send(&mut r, 10);
    r.on_ack(us(3_000), S + 1000, &[(S + 10_000, S + 11_000)], None);
    assert_eq!(r.stats().fast_recoveries, 0);
    let t = r.poll_timeout().expect("the reorder timer");
    assert_eq!(r.handle_timeout(t), TimeoutAction::None);
    assert_eq!(r.stats().fast_recoveries, 1);
    assert_eq!(r.in_flight(), 0);
    let mut next = S + 11_000;
    assert_eq!(
        prr_drain(&mut r, t, &mut next),
        1,
        "the first retransmission alone"
    );
    r.on_ack(
        t + Duration::from_millis(1),
        S + 2000,
        &[(S + 10_000, S + 11_000)],
        None,
    );
    assert_eq!(
        prr_drain(&mut r, t + Duration::from_millis(1), &mut next),
        2
    );
    assert_eq!(r.stats().retransmitted_segments, 3);
}

/// RFC 9937 section 6 (initialization): RecoverFS is snd.nxt - snd.una less the octets
/// SACKed before the ACK that begins the episode, plus what that ACK cumulatively
/// acknowledged, the octets that can yet count in prr_delivered. 20 segments of 1000 out
/// past SND.UNA, the first lost; the third ACK that reports a later segment begins the
/// episode with two segments reported before it: RecoverFS is 18000, with SACK (two
/// SACKed before) and without (two duplicate ACKs before, RFC 9937's estimate for a
/// receiver without SACK). So NewReno's episode sends ssthresh (10 segments) once
/// the 18 segments have been delivered, not 9 (RFC 6937's FlightSize of 20000): from the
/// entering ACK one segment, then ceil(prr_delivered * 10000 / 18000) in whole segments
/// less prr_out: 1, 1, 0, 1, 0, 1, 0, 1 (before: 1, 0, 1, 0, 1, 0, 1, 0).
#[test]
fn prr_recover_fs_leaves_out_what_was_sacked_before() {
    for sack in [true, false] {
        let mut r = rec(Congestion::NewReno);
        sample_then_send(&mut r, 20);
        r.cwnd = 20_000;
        let mut next = S + 21_000;
        let mut sent = vec![];
        for k in 1..=10 {
            let now = us(3_000 + k as i64 * 10);
            let blocks = [(S + 2000, S + 2000 + k * 1000)];
            let o = r.on_ack(now, S + 1000, if sack { &blocks } else { &[] }, None);
            assert_eq!(o.lost_marked > 0, k == 3, "sack {sack} ack {k}");
            if k == 3 {
                let p = r.prr.expect("the episode's PRR state");
                assert_eq!(p.recover_fs, 18_000, "sack {sack}");
            }
            if k >= 3 {
                sent.push(prr_drain(&mut r, now, &mut next));
            }
        }
        assert_eq!(r.ssthresh, 10_000);
        assert_eq!(
            sent,
            [1, 1, 0, 1, 0, 1, 0, 1],
            "sack {sack}: segments sent per ACK"
        );
    }
}

/// RFC 9937 section 6: below ssthresh PRR sends what was delivered (PRR-CRB), and one
/// segment more only on a SafeACK, one that advanced SND.UNA and indicated no further
/// loss (PRR-SSRB; Linux's `tcp_cwnd_reduction`). 20 segments out (NewReno, ssthresh 10),
/// the first twelve lost, the rest SACKed one per ACK: at the third the pipe is 5 (8 left,
/// 3 SACKed). ACKs that only SACK one more segment send one segment each (before: two, the
/// slow-start bound on every ACK); then ACKs that cumulatively acknowledge a retransmission
/// each send two until the pipe reaches ssthresh, then one.
#[test]
fn prr_ssrb_only_on_a_safe_ack() {
    let mut r = rec(Congestion::NewReno);
    sample_then_send(&mut r, 20);
    r.cwnd = 20_000;
    let mut next = S + 21_000;
    let mut sent = vec![];
    let mut pipes = vec![];
    for k in 1..=8 {
        let now = us(3_000 + k as i64 * 10);
        let o = r.on_ack(now, S + 1000, &[(S + 13_000, S + 13_000 + k * 1000)], None);
        if k < 3 {
            continue;
        }
        assert_eq!(o.lost_marked, if k == 3 { 12 } else { 0 });
        sent.push(prr_drain(&mut r, now, &mut next));
        pipes.push(r.in_flight());
    }
    assert_eq!(r.ssthresh, 10_000);
    assert_eq!(sent, [1, 1, 1, 1, 1, 1], "SACK-only ACKs (pipes {pipes:?})");
    assert_eq!(pipes, [6000; 6]);
    // SafeACKs: each covers one more retransmission (sent in order from S + 1000).
    let (mut sent, mut pipes) = (vec![], vec![]);
    for k in 1..=6 {
        let now = us(4_000 + k as i64 * 10);
        let o = r.on_ack(now, S + 1000 + k * 1000, &[(S + 13_000, S + 21_000)], None);
        assert_eq!(o.lost_marked, 0);
        sent.push(prr_drain(&mut r, now, &mut next));
        pipes.push(r.in_flight());
    }
    assert_eq!(sent, [2, 2, 2, 2, 1, 1], "SafeACKs (pipes {pipes:?})");
    assert_eq!(pipes, [7000, 8000, 9000, 10_000, 10_000, 10_000]);
    // The twelve retransmissions, then new data.
    assert_eq!(r.stats().retransmitted_segments, 12);
    assert_eq!(next, S + 25_000);
}

/// RFC 8985 6.2 step 2 (RACK_update): RACK.rtt is the RTT of every newly delivered segment
/// whose sample is plausible, "whether or not it was sent after RACK.xmit_ts"; only
/// RACK.xmit_ts and RACK.end_seq wait for RACK_sent_after (Linux's `tcp_rack_advance` sets
/// `rtt_us` before that test too). A, B, C, D leave at 2 ms (RTT 1 ms); D is SACKed at 3 ms
/// (RACK.rtt 1 ms), then B, reordered, at 3.2 ms: its 1.2 ms is RACK.rtt, and A and C (sent
/// before D) are lost at 2 + 1.2 + min_RTT / 4 = 3.45 ms, not at 3.25 ms (the 1 ms that
/// D's sample left, which a reordering network that delays a segment by more than the
/// window turned into spurious retransmissions).
#[test]
fn rack_rtt_follows_a_late_segment_sent_before_the_rack_segment() {
    let mut r = rec(Congestion::Cubic);
    sample_then_send(&mut r, 4);
    let (a, b, c, d) = (S + 1000, S + 2000, S + 3000, S + 4000);
    r.on_ack(us(3_000), a, &[(d, d + 1000)], None);
    assert_eq!(r.rack_rtt, Duration::from_micros(1_000));
    assert_eq!(r.poll_timeout(), Some(us(3_250)));
    r.on_ack(us(3_200), a, &[(b, b + 1000), (d, d + 1000)], None);
    assert!(r.reordering_seen);
    assert_eq!(
        r.rack_rtt,
        Duration::from_micros(1_200),
        "RFC 8985 6.2 step 2: B's sample is RACK.rtt"
    );
    // RACK.xmit_ts / RACK.end_seq stay D's (B was not sent after it).
    assert_eq!(r.rack_end, d + 1000);
    // RFC 8985 6.2 step 1: RACK.min_RTT is not raised by B's longer sample.
    assert_eq!(r.stats().min_rtt_us, 1_000);
    assert_eq!(
        r.poll_timeout(),
        Some(us(3_450)),
        "the reorder timer from B's RTT"
    );
    assert_eq!(r.handle_timeout(us(3_450)), TimeoutAction::None);
    assert_eq!(r.next_retransmit(), Some((a, 1000)));
    assert!(r.segs.iter().any(|s| s.start == c && s.lost));
}

/// RFC 8985 6.2 step 2: a delivered segment whose sample is implausible (resent less than
/// RACK.min_RTT ago: the ACK answers its original) is skipped, and the others the ACK
/// delivered still update RACK. A, B, C, D leave at 2 ms (RTT 1 ms); C is resent at 3.5 ms
/// and one ACK at 3.6 ms SACKs B and C. C, the most recently sent, is implausible; B's
/// sample (1.6 ms) is RACK.rtt and B the RACK segment, so A, sent before B, is lost at
/// 2 + 1.6 + min_RTT / 4 = 3.85 ms. Before, the ACK updated nothing (only the most recently
/// sent segment was looked at): A waited for the RTO.
#[test]
fn rack_an_implausible_retransmission_leaves_the_update_to_the_others() {
    let mut r = rec(Congestion::Cubic);
    sample_then_send(&mut r, 4);
    let (a, b, c) = (S + 1000, S + 2000, S + 3000);
    r.on_sent(us(3_500), c, 1000, true);
    r.on_ack(us(3_600), a, &[(b, c + 1000)], None);
    assert_eq!(r.rack_rtt, Duration::from_micros(1_600));
    assert_eq!((r.rack_xmit, r.rack_end), (Some(us(2_000)), b + 1000));
    assert_eq!(r.poll_timeout(), Some(us(3_850)), "the reorder timer");
    assert_eq!(r.handle_timeout(us(3_850)), TimeoutAction::None);
    assert_eq!(r.next_retransmit(), Some((a, 1000)));
    assert_eq!(r.stats().rto_count, 0);
}

/// RFC 9937 section 6.2 without SACK: DeliveredData estimates one SMSS per duplicate ACK,
/// and the estimate is limited so that the episode's prr_delivered does not exceed
/// RecoverFS (a receiver may send duplicate ACKs for segments it never got: ACK division
/// and duplicate-ACK spoofing, Savage et al. 1999; ns-3's and FreeBSD's PRR add the
/// estimate only while prr_delivered < RecoverFS). Ten segments out (NewReno, no SACK), the
/// first lost: the third duplicate ACK begins the episode (RecoverFS 8000, ssthresh 5000).
/// A hostile receiver then sends 1000 more duplicate ACKs: PRR sends no more than RecoverFS
/// allows (ssthresh while the pipe exceeds it, what was delivered below it), not one
/// segment per duplicate ACK for as long as they come.
#[test]
fn prr_duplicate_acks_deliver_no_more_than_recover_fs() {
    let mut r = rec(Congestion::NewReno);
    sample_then_send(&mut r, 10);
    let mut next = S + 11_000;
    let mut sent = 0;
    for k in 0..1003 {
        let now = us(3_000 + k);
        r.on_ack(now, S + 1000, &[], None);
        if k >= 2 {
            sent += prr_drain(&mut r, now, &mut next);
        }
    }
    let p = r.prr.expect("the episode's PRR state");
    assert_eq!((p.recover_fs, r.ssthresh), (8000, 5000));
    // prr_delivered stops at RecoverFS (before: 1001000, and 999 segments sent).
    assert_eq!(p.delivered, p.recover_fs);
    assert!(p.out <= p.recover_fs, "prr_out {}", p.out);
    assert!(sent <= 8, "{sent} segments sent on duplicate ACKs");
    assert_eq!(r.stats().retransmitted_segments, 1);
    // The episode ends as ever once the peer acknowledges everything.
    r.on_ack(us(5_000), next, &[], None);
    assert!(r.prr.is_none() && r.recover.is_none());
    assert!(r.cwnd() >= r.ssthresh);
}

/// RFC 8985 6.2 step 1: "The sender SHOULD track a windowed min-filtered estimate of
/// recent RTT measurements that can adapt when migrating to significantly longer paths
/// rather than tracking a simple global minimum of all RTT measurements." A connection
/// whose path goes from 1 ms to 20 ms keeps the 1 ms minimum for the window (300 s,
/// Linux's `tcp_min_rtt_wlen`) and then takes the longer path's; the reordering window
/// (min_RTT / 4, step 4) follows. With a global minimum it stayed at 250 us forever and
/// a segment 3 ms late on the 20 ms path was resent spuriously.
#[test]
fn rack_min_rtt_is_a_windowed_minimum() {
    let mut r = rtt_of_1_ms();
    let mut seq = S + 1000;
    let mut t = 10_000;
    let rtt = 20_000;
    while t < 302_000_000 {
        r.on_sent(us(t), seq, 1000, false);
        r.on_ack(
            us(t + rtt),
            seq + 1000,
            &[],
            Some(Duration::from_micros(20_000)),
        );
        seq += 1000;
        if t < 290_000_000 {
            assert_eq!(r.stats().min_rtt_us, 1_000, "within the window at {t} us");
        }
        t += 100_000;
    }
    assert_eq!(
        r.stats().min_rtt_us,
        20_000,
        "RFC 8985 6.2 step 1: the 1 ms sample has left the window"
    );
    // Reordering seen (RFC 8985 6.2 step 3): the first segment arrives after the second.
    send_n(&mut r, us(t), seq, 2);
    r.on_ack(us(t + rtt), seq, &[(seq + 1000, seq + 2000)], None);
    r.on_ack(us(t + rtt + 100), seq + 2000, &[], None);
    assert!(r.reordering_seen);
    seq += 2000;
    t += 100_000;
    // The next flight's second segment is 3 ms late: within min_RTT / 4 = 5 ms.
    send_n(&mut r, us(t), seq, 5);
    let o = r.on_ack(us(t + rtt), seq + 1000, &[(seq + 2000, seq + 5000)], None);
    assert_eq!(o.lost_marked, 0);
    assert_eq!(
        r.poll_timeout(),
        Some(us(t + rtt + 5_000)),
        "the reorder timer waits min_RTT / 4 of the 20 ms path"
    );
    let o = r.on_ack(us(t + rtt + 3_000), seq + 5000, &[], None);
    assert_eq!(o.lost_marked, 0);
    assert_eq!(r.stats().retransmitted_segments, 0);
    assert_eq!(r.next_retransmit(), None);
}

/// Linux's `minmax_running_min` (lib/win_minmax.c) as it is, every sample through every
/// step: the reference [`MinRtt`]'s cheap path is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct MinmaxReference {
    s: [(i64, u64); 3],
}

impl MinmaxReference {
    fn running_min(&mut self, win: i64, t: i64, v: u64) -> u64 {
        let val = (t, v);
        let s = &mut self.s;
        if v <= s[0].1 || t - s[2].0 > win {
            *s = [val; 3];
            return v;
        }
        if v <= s[1].1 {
            s[1] = val;
            s[2] = val;
        } else if v <= s[2].1 {
            s[2] = val;
        }
        let dt = t - s[0].0;
        if dt > win {
            *s = [s[1], s[2], val];
            if t - s[0].0 > win {
                *s = [s[1], s[2], val];
            }
        } else if s[1].0 == s[0].0 && dt > win / 4 {
            s[1] = val;
            s[2] = val;
        } else if s[2].0 == s[1].0 && dt > win / 2 {
            s[2] = val;
        }
        s[0].1
    }
}

proptest! {
    /// [`MinRtt`] is Linux's windowed min filter: for samples of distinct values (an
    /// equal one does not refresh the choices' times, see `MinRtt`) it keeps the same
    /// choices and estimate after every sample, and the estimate is a sample of the last
    /// window no greater than the latest sample.
    #[test]
    fn min_rtt_filter_is_linux_minmax_running_min(
        steps in proptest::collection::vec((0i64..120_000_000, 1u64..1_000), 1..200),
    ) {
        let mut f = MinRtt::new();
        let mut reference = MinmaxReference { s: [(0, u64::MAX); 3] };
        let mut t = 0;
        let mut seen: Vec<(i64, u64)> = Vec::new();
        for (i, (dt, v)) in steps.into_iter().enumerate() {
            t += dt;
            // Distinct values.
            let v = v * 1000 + i as u64;
            f.update(Instant::from_micros(t), Duration::from_micros(v));
            let want = reference.running_min(MIN_RTT_WINDOW_US, t, v);
            prop_assert_eq!(f.get(), Some(Duration::from_micros(want)));
            prop_assert_eq!(f.s.map(|(t, v)| (t, v.total_micros())), reference.s);
            seen.push((t, v));
            prop_assert!(want <= v);
            prop_assert!(seen.iter().any(|&(st, sv)| sv == want && t - st <= MIN_RTT_WINDOW_US));
        }
    }
}

/// RFC 5681 3.1 / 3.2, RFC 9937 section 6.2: without SACK a duplicate ACK says a segment
/// above the hole left the network, so it takes one out of the pipe (`in_flight`), never
/// more than was outstanding (Linux's `tcp_limit_reno_sacked`). After an RTO, where no
/// RecoverFS bounds the count (the RTO's recovery has no PRR), duplicate ACKs (an ACK
/// storm: ACK division, a network that duplicates ACKs) each added a segment to the
/// estimate whatever was outstanding; the excess was credit that hid the segments sent
/// later from the pipe, and once every loss had been resent the sender sent new data
/// without bound, cwnd notwithstanding.
#[test]
fn duplicate_acks_after_an_rto_take_out_no_more_than_was_outstanding() {
    let mut r = rec(Congestion::NewReno);
    sample_then_send(&mut r, 10);
    let mut now = fire_rto(&mut r);
    assert_eq!(r.cwnd(), 1000);
    let (seq, len) = r.next_retransmit().unwrap();
    r.on_sent(now, seq, len, true);
    for _ in 0..1000 {
        now += Duration::from_micros(1);
        r.on_ack(now, S + 1000, &[], None);
    }
    let mut next = S + 11_000;
    for ack in [S + 2000, S + 4000, S + 8000] {
        now += Duration::from_micros(100);
        r.on_ack(now, ack, &[], None);
        let mut sent = 0;
        while r.send_allowance() >= 1000 && sent < 100 {
            if let Some((seq, len)) = r.next_retransmit() {
                r.on_sent(now, seq, len, true);
            } else {
                r.on_sent(now, next, 1000, false);
                next += 1000;
            }
            sent += 1;
        }
        assert!(
            sent * 1000 <= r.cwnd(),
            "{sent} segments sent at once with cwnd {}",
            r.cwnd()
        );
        assert!(r.in_flight() <= r.cwnd());
    }
}

/// Whether the front entry awaits its retransmission.
fn front_awaits_retransmit(r: &Recovery) -> bool {
    r.segs.front().is_some_and(|s| s.awaits_retransmit())
}

/// RFC 6582 3.2 step 1 and section 4, RFC 6298 5.4: after a retransmission timeout the
/// duplicate ACKs of the flight sent before it (`recover` records the highest sequence
/// sent, and the cumulative ACK lies below it) trigger no fast retransmit: the RTO's
/// retransmission of the front segment is in flight, and marking it lost again resends it
/// spuriously (Linux counts no duplicate ACK towards a fast retransmit in CA_Loss, and
/// `tcp_enter_loss` clears the count). Two duplicate ACKs before the RTO and one after, or
/// three after it, resent the front segment a second time.
#[test]
fn duplicate_acks_after_an_rto_do_not_resend_its_retransmission() {
    for before in [0, 2] {
        let mut r = rec(Congestion::NewReno);
        sample_then_send(&mut r, 10);
        let mut now = us(2_500);
        for _ in 0..before {
            now += Duration::from_micros(10);
            assert_eq!(r.on_ack(now, S + 1000, &[], None).lost_marked, 0);
        }
        now = fire_rto(&mut r);
        let (seq, len) = r.next_retransmit().unwrap();
        assert_eq!(seq, S + 1000);
        r.on_sent(now, seq, len, true);
        for _ in before..3 {
            now += Duration::from_micros(10);
            let o = r.on_ack(now, S + 1000, &[], None);
            assert_eq!(o.lost_marked, 0, "{before} duplicate ACKs before the RTO");
        }
        assert!(
            !front_awaits_retransmit(&r),
            "{before} duplicate ACKs before the RTO: its retransmission marked lost again"
        );
        assert_eq!(r.stats().retransmitted_segments, 1);
    }
}

/// RFC 6582 3.2 step 1: three duplicate ACKs start a fast retransmit only when "the sender
/// isn't already in fast recovery". After a partial ACK (which resent the next hole, step
/// 3, and restarted the count) three duplicate ACKs, drawn by segments the episode sent
/// above the hole, marked that retransmission lost and sent it again (Linux's
/// `tcp_newreno_mark_lost` marks the head in recovery only on a partial ACK).
#[test]
fn no_second_fast_retransmit_within_a_newreno_episode() {
    let mut r = rec(Congestion::NewReno);
    sample_then_send(&mut r, 10);
    // Segments 1 and 5 (of 1..=10) lost: 2, 3, 4 draw three duplicate ACKs.
    let mut now = us(3_000);
    let mut marked = 0;
    for _ in 0..3 {
        now += Duration::from_micros(10);
        marked += r.on_ack(now, S + 1000, &[], None).lost_marked;
    }
    assert_eq!(marked, 1);
    assert_eq!(r.next_retransmit(), Some((S + 1000, 1000)));
    r.on_sent(now, S + 1000, 1000, true);
    // 6..=10 draw five more.
    for _ in 0..5 {
        now += Duration::from_micros(10);
        r.on_ack(now, S + 1000, &[], None);
    }
    // The retransmission of 1 arrives: a partial ACK up to 5, which is resent.
    now += Duration::from_micros(500);
    let o = r.on_ack(now, S + 5000, &[], None);
    assert_eq!(o.lost_marked, 1);
    assert_eq!(r.next_retransmit(), Some((S + 5000, 1000)));
    r.on_sent(now, S + 5000, 1000, true);
    // New segments the episode sent (11..=13) arrive before the retransmission of 5: three
    // duplicate ACKs, which must not resend 5 again.
    send_n(&mut r, now, S + 11_000, 3);
    for _ in 0..3 {
        now += Duration::from_micros(10);
        let o = r.on_ack(now, S + 5000, &[], None);
        assert_eq!(o.lost_marked, 0);
    }
    assert!(!front_awaits_retransmit(&r));
    assert_eq!(r.next_retransmit(), None);
    assert_eq!(r.stats().retransmitted_segments, 2);
}

/// RFC 5681 3.2, RFC 9937 section 6 (pipe) and Linux's `tcp_limit_reno_sacked`, which
/// `tcp_check_reno_reordering` runs at every cumulative ACK too: without SACK the duplicate
/// ACKs' estimate (`dup_sacked`) never counts more segments gone than are outstanding and
/// not lost. The bound held only as a duplicate ACK raised the count; a partial ACK takes
/// one segment less off it than it covers (the hole) and then marks the next hole lost
/// (RFC 6582 3.2 step 3), so an estimate at its bound (a duplicated ACK, ACK division) came
/// out above what was left, and the excess hid the segments sent after it from the pipe:
/// the sender sent a segment more than cwnd for every such excess segment.
#[test]
fn a_partial_ack_leaves_no_duplicate_ack_credit_beyond_what_is_outstanding() {
    let mut r = rec(Congestion::NewReno);
    sample_then_send(&mut r, 6);
    // Segments 1 and 5 (of 1..=6) lost: 2, 3, 4 draw three duplicate ACKs.
    let mut now = us(3_000);
    for _ in 0..3 {
        now += Duration::from_micros(10);
        r.on_ack(now, S + 1000, &[], None);
    }
    assert_eq!(r.next_retransmit(), Some((S + 1000, 1000)));
    r.on_sent(now, S + 1000, 1000, true);
    // 6 draws one more, and the network delivers one of the duplicate ACKs twice.
    for _ in 0..2 {
        now += Duration::from_micros(10);
        r.on_ack(now, S + 1000, &[], None);
    }
    // The retransmission of 1 arrives: a partial ACK up to 5, which is lost, resent.
    now += Duration::from_micros(500);
    assert_eq!(r.on_ack(now, S + 5000, &[], None).lost_marked, 1);
    assert_eq!(r.next_retransmit(), Some((S + 5000, 1000)));
    r.on_sent(now, S + 5000, 1000, true);
    // Outstanding: 5 (resent, in flight) and 6 (gone: its duplicate ACK). Two new segments.
    send_n(&mut r, now, S + 7000, 2);
    assert_eq!(r.in_flight(), 3000);
}

/// RFC 8985 8: the reordering timer, the PTO and the RTO "are mutually exclusive": "when
/// arming a RACK reordering timer or TLP PTO timer, the sender SHOULD cancel any other
/// pending timers" (Linux's reordering timer takes the RTO's place, and the RTO is armed
/// again when it expires). On a steady path RTTVAR decays towards nothing and the RTO comes
/// to SRTT + the 5 ms floor (RFC 6298 2.3; about SRTT before the floor became a margin
/// above it); where min_RTT / 4 exceeds the floor (SRTT above 20 ms) a flight's RTO timer
/// started with its first segment then expired before RACK's reordering window
/// (RACK.rtt + min_RTT / 4 from the segment's transmission) for a segment that the network
/// merely reordered: a spurious RTO (cwnd one segment, the flight resent) where RACK would
/// have waited for it.
#[test]
fn the_rto_waits_for_a_pending_reorder_timer() {
    let mut r = rec(Congestion::Cubic);
    // A steady 40 ms path: one segment every 60 ms, each acknowledged 40 ms later.
    let mut seq = S;
    for i in 0..20 {
        let t = i * 60_000;
        r.on_sent(us(t), seq, 1000, false);
        seq += 1000;
        r.on_ack(us(t + 40_000), seq, &[], None);
    }
    let t0 = 20 * 60_000;
    assert!(r.rto() < Duration::from_micros(45_500), "RTO {:?}", r.rto());
    // Two segments, A and B; B's SACK comes after 40 ms, A (reordered) 7 ms later, after
    // the RTO (45 ms) and within RACK's window.
    r.on_sent(us(t0), seq, 1000, false);
    r.on_sent(us(t0), seq + 1000, 1000, false);
    let o = r.on_ack(us(t0 + 40_000), seq, &[(seq + 1000, seq + 2000)], None);
    assert_eq!(o.lost_marked, 0);
    // A's reordering window: 40 ms + 40 ms / 4.
    assert_eq!(r.reorder_at, Some(us(t0 + 50_000)));
    while let Some(at) = r.poll_timeout().filter(|&at| at < us(t0 + 47_000)) {
        assert_eq!(r.handle_timeout(at), TimeoutAction::None, "at {at}");
    }
    let o = r.on_ack(us(t0 + 47_000), seq + 2000, &[], None);
    assert_eq!(o.newly_acked, 2000);
    assert_eq!(r.stats().rto_count, 0);
    assert_eq!(r.stats().retransmitted_segments, 0);
    assert_eq!(r.cwnd(), 10_000);
}

/// RFC 6298 2.3 and 2.4, as Linux applies its floor (`tcp_rtt_estimator`: RTTVAR's term,
/// `rttvar_us`, is kept at least `tcp_rto_min_us`, so RTO = SRTT + max(4 RTTVAR, floor)).
/// On a steady 20 ms path RTTVAR decays towards nothing; with the 5 ms floor applied to the
/// whole RTO (max(SRTT + 4 RTTVAR, 5 ms)) the RTO came to about SRTT, and an ACK 5 % late
/// (a kernel peer's delayed ACK, a descheduled peer, a loaded host) drew a spurious RTO:
/// cwnd cut to one segment, the segment resent. The floor is the least margin above SRTT.
#[test]
fn rfc6298_2_3_the_rto_floor_is_a_margin_above_srtt_on_a_steady_path() {
    let mut r = rec(Congestion::Cubic);
    // A steady 20 ms path: one segment every 30 ms, each acknowledged 20 ms later.
    let mut seq = S;
    for i in 0..40 {
        let t = i * 30_000;
        r.on_sent(us(t), seq, 1000, false);
        seq += 1000;
        r.on_ack(us(t + 20_000), seq, &[], None);
    }
    assert_eq!(r.srtt(), Some(Duration::from_millis(20)));
    assert!(r.stats().rttvar_us < 100, "RTTVAR decayed: {:?}", r.stats());
    // RTO = SRTT + max(4 RTTVAR, 5 ms) = 25 ms (was about SRTT, 20 ms).
    assert_eq!(r.rto(), Duration::from_millis(25));
    // One more segment, its ACK 1.05 SRTT later: no RTO meanwhile.
    let t0 = 40 * 30_000;
    r.on_sent(us(t0), seq, 1000, false);
    let late = us(t0 + 21_000);
    while let Some(at) = r.poll_timeout().filter(|&at| at < late) {
        r.handle_timeout(at);
    }
    let o = r.on_ack(late, seq + 1000, &[], None);
    assert_eq!(o.newly_acked, 1000);
    assert_eq!(r.stats().rto_count, 0);
    assert_eq!(r.stats().retransmitted_segments, 0);
    assert_eq!(r.cwnd(), 10_000);
}

/// The floor applies to the first sample's RTO too (Linux: `rttvar_us = max(mdev_us,
/// tcp_rto_min_us)` at the first measurement): RTO = R + max(2 R, floor), capped by the
/// ceiling (RFC 6298 2.5).
#[test]
fn rfc6298_2_3_the_rto_floor_applies_to_the_first_sample_and_the_ceiling_caps_it() {
    let mut r = Recovery::new(
        &RecoveryConfig {
            rto_min: Duration::from_millis(5),
            rto_max: Duration::from_millis(30),
            ..RecoveryConfig::default()
        },
        1000,
        us(0),
    );
    r.on_sent(us(0), S, 1000, false);
    r.on_ack(us(1_000), S + 1000, &[], None);
    // 1 ms + max(4 x 0.5 ms, 5 ms) = 6 ms (was the floor, 5 ms).
    assert_eq!(r.rto(), Duration::from_millis(6));
    r.on_sent(us(1_000), S + 1000, 1000, false);
    r.on_ack(us(1_000 + 100_000), S + 2000, &[], None);
    assert_eq!(r.rto(), Duration::from_millis(30));
    // A zero floor leaves RFC 6298's G (1 us) as the least margin.
    let mut r = Recovery::new(
        &RecoveryConfig {
            rto_min: Duration::ZERO,
            ..RecoveryConfig::default()
        },
        1000,
        us(0),
    );
    let mut seq = S;
    for i in 0..200 {
        let t = i * 100;
        r.on_sent(us(t), seq, 1000, false);
        seq += 1000;
        r.on_ack(us(t + 50), seq, &[], None);
    }
    assert_eq!(r.srtt(), Some(Duration::from_micros(50)));
    assert_eq!(r.rto(), Duration::from_micros(51));
}
