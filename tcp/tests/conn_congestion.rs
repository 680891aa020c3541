//! Packetdrill-style scripts of the sender's congestion and window behaviour at the edges
//! the bulk scripts of `conn_script.rs` do not reach: the window after a lost SYN (RFC
//! 5681 3.1) and the retransmission timer probing a window the peer shrank to zero (RFC
//! 9293 3.8.6). One test per behaviour, named after it, citing the RFC section; the peer is
//! scripted by hand.

use smoltcp::socket::tcp::State;
use smoltcp::time::Instant;
use smoltcp::wire::{TcpControl, TcpSeqNumber, TcpTimestampRepr};
use warpcore_tcp::conn::{ConnConfig, ConnEvent, Connection};

mod script;
use script::*;

fn send(c: &mut Connection, now: Instant, n: usize) -> Vec<Out> {
    let v: Vec<u8> = (0..n).map(|i| i as u8).collect();
    assert_eq!(c.send(&v), Ok(n));
    drain(c, now)
}

/// An active connection whose first SYN was lost: the SYN goes again at the 1 s RTO and
/// the peer answers that one (no timestamps, so no Eifel undo). Returns it at 1,001 ms.
fn established_after_a_lost_syn(config: ConnConfig) -> Connection {
    let mut c = Connection::connect(&config, ep(), ISS, ms(0));
    assert_eq!(drain(&mut c, ms(0)).len(), 1);
    let again = run_until(&mut c, ms(0), ms(1000));
    assert_eq!(again.len(), 1, "the SYN again at the RTO: {again:?}");
    let mut sa = seg(TcpControl::Syn, PISS, Some(ISS + 1), &[]);
    sa.max_seg_size = Some(1460);
    c.handle_segment(ms(1001), &sa);
    assert_eq!(c.state(), State::Established);
    drain(&mut c, ms(1001));
    assert_eq!(events(&mut c), vec![ConnEvent::Connected]);
    c
}

/// RFC 5681 3.1: "if a SYN or SYN/ACK is lost, the initial window used by a sender after a
/// correctly transmitted SYN MUST be one segment" -- the window, not the slow-start
/// threshold: ssthresh "SHOULD be set arbitrarily high" initially, and nothing was in
/// flight to halve. Linux (`tcp_init_transfer` -> `tcp_init_metrics`) starts the transfer
/// with ssthresh infinite after a SYN retransmission. The SYN's RTO had set
/// ssthresh = max(FlightSize * beta, 2 SMSS) = 2 SMSS and nothing reset it, so the
/// connection left slow start at two segments (1, 2, 2, 2, 3 segments per round trip).
#[test]
fn rfc5681_3_1_a_lost_syn_leaves_slow_start_open() {
    let mut c = established_after_a_lost_syn(cfg());
    let s = c.stats().recovery;
    assert_eq!(s.ssthresh, u64::MAX, "ssthresh after a lost SYN: {s:?}");
    // The initial window: one segment of the SMSS the SYN-ACK negotiated.
    assert_eq!(s.cwnd, 1460, "{s:?}");
    // Five round trips of 1 ms, every segment acknowledged: slow start doubles the window
    // each (1, 2, 4, 8, 16 segments, or at least more than the 7 a linear increase gives).
    let mut now = 1002;
    let mut acked = ISS + 1;
    let mut per_round = Vec::new();
    let big: Vec<u8> = vec![7; 200_000];
    c.send(&big).unwrap();
    for _ in 0..5 {
        let out = drain(&mut c, ms(now));
        per_round.push(out.len());
        let end = out.last().map_or(acked, |o| o.seq + o.payload.len());
        now += 1;
        acked = end;
        c.handle_segment(ms(now), &seg(TcpControl::None, PISS + 1, Some(acked), &[]));
    }
    assert_eq!(per_round[0], 1, "one segment first: {per_round:?}");
    assert!(per_round[4] >= 8, "segments per round trip: {per_round:?}");
}

/// RFC 5681 3.1 with RFC 6928 2: the one-segment window after a lost SYN is one segment of
/// the SMSS the option exchange gave. With timestamps (12 octets of every segment's
/// options) that is 1,448 octets; the window stayed one segment of the 1,460 guessed
/// before the SYN-ACK (`set_smss` keeps a window an RTO set). The SYN-ACK echoes the
/// retransmitted SYN's TSval, so the timeout was no spurious one (RFC 3522).
#[test]
fn rfc5681_3_1_the_window_after_a_lost_syn_is_one_negotiated_segment() {
    let mut c = Connection::connect(&cfg(), ep(), ISS, ms(0));
    assert_eq!(drain(&mut c, ms(0)).len(), 1);
    let again = run_until(&mut c, ms(0), ms(1000));
    assert_eq!(again.len(), 1, "the SYN again at the RTO: {again:?}");
    let mut sa = seg(TcpControl::Syn, PISS, Some(ISS + 1), &[]);
    sa.max_seg_size = Some(1460);
    sa.timestamp = Some(TcpTimestampRepr {
        tsval: 1,
        tsecr: again[0].1.ts.expect("timestamps offered").tsval,
    });
    c.handle_segment(ms(1001), &sa);
    assert_eq!(c.state(), State::Established);
    let s = c.stats().recovery;
    assert_eq!(s.spurious_rtos, 0, "{s:?}");
    assert_eq!(s.cwnd, 1448, "{s:?}");
    assert_eq!(s.ssthresh, u64::MAX, "{s:?}");
}

/// RFC 9293 3.8.6: a peer that shrinks its window to zero with a flight of ours outstanding.
/// The retransmission timer then probes the shut window (RFC 9293 3.8.6.1; Linux's
/// `tcp_retransmit_timer` resends the head segment only, "our retransmits become zero
/// probes"). Each expiry marked the whole flight lost and, cwnd being left alone
/// (`set_window_shut`), resent all of it (14,600 octets at 7, 17, 37, 77 and 157 ms) into
/// the shut window at every backed-off expiry.
#[test]
fn rfc9293_3_8_6_a_window_shrunk_to_zero_is_probed_with_one_segment() {
    let mut c = established(cfg(), true);
    let out = send(&mut c, ms(2), 10 * 1460);
    assert_eq!(out.len(), 10);
    // The peer takes nothing and shuts its window (shrinking it: 14,600 octets were in it).
    let mut z = seg(TcpControl::None, PISS + 1, Some(ISS + 1), &[]);
    z.window_len = 0;
    c.handle_segment(ms(3), &z);
    let out = run_until(&mut c, ms(3), ms(200));
    let mut per_expiry: Vec<(u64, usize, TcpSeqNumber)> = Vec::new();
    for (t, o) in &out {
        let t = t.total_millis() as u64;
        match per_expiry.last_mut() {
            Some((at, n, _)) if *at == t => *n += o.payload.len(),
            _ => per_expiry.push((t, o.payload.len(), o.seq)),
        }
    }
    // Backed off (RTT 1 ms + the 5 ms floor): 8, 20, 44, 92, 188 ms.
    assert!(per_expiry.len() >= 4, "{per_expiry:?}");
    for (t, n, seq) in &per_expiry {
        assert!(
            *n <= 1460,
            "{n} octets into the shut window at {t} ms: {per_expiry:?}"
        );
        assert_eq!(*seq, ISS + 1, "the head segment at {t} ms: {per_expiry:?}");
    }
    let s = c.stats().recovery;
    assert_eq!(s.rto_count, 0, "no congestion response: {s:?}");
    assert!(s.window_probe_timeouts >= 4, "{s:?}");
    // The window opens (still acknowledging nothing): the whole flight goes again at once,
    // cwnd as it was, each segment once: the rest, which the probe timer's expiries marked
    // lost, and the head, the last probe, which the shut window could not take.
    let mut open = seg(TcpControl::None, PISS + 1, Some(ISS + 1), &[]);
    open.window_len = 0xffff;
    c.handle_segment(ms(200), &open);
    let out = drain(&mut c, ms(200));
    let mut sent: Vec<(usize, usize)> = out
        .iter()
        .map(|o| (o.seq - (ISS + 1), o.payload.len()))
        .collect();
    sent.sort_unstable();
    let flight: Vec<(usize, usize)> = (0..10).map(|k| (k * 1460, 1460)).collect();
    assert_eq!(sent, flight, "(offset, length) sent once the window opened");
}

/// RFC 9293 3.8.6.1 and RFC 6298 5.5: the retransmission timer's expiries while the peer's
/// window is shut are zero-window probes, not retransmission timeouts (`set_window_shut`),
/// and their backoff ends when the window opens (Linux's `tcp_ack_probe` sets
/// `icsk_backoff` to 0). It ran on: the flight resent when the window opened was timed by
/// the probes' backed-off RTO (32 times the RTO after five unanswered probes), and the
/// probes stayed counted as consecutive timeouts, so the first real RTO after the window
/// opened was taken for a repeated one: it kept no state to restore (RFC 4015 3.1), and an
/// ACK showing it spurious (RFC 3522: its echo older than the RTO) undid nothing, cwnd left
/// at one segment.
#[test]
fn rfc6298_5_5_the_probes_backoff_ends_when_the_window_opens() {
    let mut c = established(cfg(), false);
    let out = send(&mut c, ms(2), 10 * 1448);
    assert_eq!(out.len(), 10);
    let before = c.stats().recovery;
    // The peer shuts its window on the flight and answers no probe.
    let mut z = stamped(seg(TcpControl::None, PISS + 1, Some(ISS + 1), &[]));
    z.window_len = 0;
    c.handle_segment(ms(3), &z);
    run_until(&mut c, ms(3), ms(200));
    let s = c.stats().recovery;
    assert!(s.window_probe_timeouts >= 4, "{s:?}");
    assert_eq!(s.rto_count, 0, "{s:?}");
    // The window opens (acknowledging nothing): the flight goes again, timed by the RTO of
    // before the probing.
    let mut open = stamped(seg(TcpControl::None, PISS + 1, Some(ISS + 1), &[]));
    open.window_len = 0xffff;
    c.handle_segment(ms(200), &open);
    let resent = drain(&mut c, ms(200));
    assert!(!resent.is_empty());
    let s = c.stats().recovery;
    assert_eq!(
        s.rto_us, before.rto_us,
        "the probes' backoff outlived the shut window: {s:?}"
    );
    // The peer is silent: the next expiry is a real RTO.
    let mut now = ms(200);
    while c.stats().recovery.rto_count == 0 {
        let t = c.poll_timeout().expect("a timer runs");
        now = t.max(now);
        c.handle_timeout(now);
        drain(&mut c, now);
        assert!(c.state() == State::Established, "gave up at {now}");
    }
    assert_eq!(c.stats().recovery.cwnd, 1448);
    // The ACK of the flight sent at 200 ms arrives: its echo is older than the RTO, which
    // was spurious, and the window of before it returns.
    let mut ack = seg(TcpControl::None, PISS + 1, Some(ISS + 1 + 10 * 1448), &[]);
    ack.timestamp = Some(TcpTimestampRepr {
        tsval: 2,
        tsecr: resent[0].ts.expect("timestamps").tsval,
    });
    c.handle_segment(now + smoltcp::time::Duration::from_micros(100), &ack);
    let s = c.stats().recovery;
    assert_eq!(s.spurious_rtos, 1, "{s:?}");
    assert!(s.cwnd >= before.cwnd, "{s:?}");
}

/// RFC 4015 3.1 and RFC 5681 3.1: the state an RTO's undo restores is the sender's before
/// the first of consecutive timeouts, and only progress (an ACK of new data) ends the run
/// of them. A peer that answers a zero-window probe is alive (`Recovery::peer_alive`: the
/// count that gives the peer up starts over) but acknowledged nothing, so an RTO after its
/// window opens again is a repeated one. `peer_alive` cleared the consecutive-RTO count
/// too: that RTO was taken for a first one and saved the collapsed window (one segment) as
/// the state to restore, so an ACK of the original flight (its echo older than the first
/// RTO: every timeout spurious, RFC 3522) gave back one segment, not the window of before.
#[test]
fn rfc4015_3_1_an_answered_probe_does_not_restart_the_rto_run() {
    let mut c = established(cfg(), false);
    let first = send(&mut c, ms(2), 10 * 1448);
    assert_eq!(first.len(), 10);
    let before = c.stats().recovery;
    // Two real RTOs, the peer silent.
    let mut now = ms(2);
    while c.stats().recovery.rto_count < 2 {
        let t = c.poll_timeout().expect("a timer runs");
        now = t.max(now);
        c.handle_timeout(now);
        drain(&mut c, now);
    }
    assert_eq!(c.stats().recovery.cwnd, 1448);
    // The peer shuts its window, then answers again with it shut (acknowledging nothing):
    // it is alive.
    let mut z = stamped(seg(TcpControl::None, PISS + 1, Some(ISS + 1), &[]));
    z.window_len = 0;
    now += smoltcp::time::Duration::from_millis(1);
    c.handle_segment(now, &z);
    drain(&mut c, now);
    now += smoltcp::time::Duration::from_millis(1);
    c.handle_segment(now, &z);
    drain(&mut c, now);
    // The window opens, still acknowledging nothing; the peer is silent after it.
    let mut open = stamped(seg(TcpControl::None, PISS + 1, Some(ISS + 1), &[]));
    open.window_len = 0xffff;
    now += smoltcp::time::Duration::from_millis(1);
    c.handle_segment(now, &open);
    drain(&mut c, now);
    while c.stats().recovery.rto_count < 3 {
        let t = c.poll_timeout().expect("a timer runs");
        now = t.max(now);
        c.handle_timeout(now);
        drain(&mut c, now);
        assert!(c.state() == State::Established, "gave up at {now}");
    }
    // The ACK of the original flight: its echo is older than the first RTO.
    let mut ack = seg(TcpControl::None, PISS + 1, Some(ISS + 1 + 10 * 1448), &[]);
    ack.timestamp = Some(TcpTimestampRepr {
        tsval: 2,
        tsecr: first[0].ts.expect("timestamps").tsval,
    });
    c.handle_segment(now + smoltcp::time::Duration::from_micros(100), &ack);
    let s = c.stats().recovery;
    assert_eq!(s.spurious_rtos, 1, "{s:?}");
    assert!(
        s.cwnd >= before.cwnd,
        "the window before the first RTO ({}) not restored: {s:?}",
        before.cwnd
    );
}

/// RFC 6298 2.3: "When a subsequent RTT measurement R' is made, a host MUST set ... RTO <-
/// SRTT + max (G, K*RTTVAR)". The ACK of a zero-window probe that acknowledges new data
/// and carries a timestamp echo (RFC 7323 4) is such a measurement; the probes' backoff
/// ends with it (`Recovery::set_window_shut`), but the RTO the sample gave must stand. The
/// pre-probe RTO was put back over it (`on_progress` ran after `sample_rtt`), so the RTO
/// after the probing ignored the RTT just measured: too short for a path whose RTT grew
/// (spurious RTOs), or still backed off where RTOs came before the window shut.
#[test]
fn rfc6298_2_3_an_acked_probes_rtt_sample_sets_the_rto() {
    let mut c = established(cfg(), false);
    let out = send(&mut c, ms(2), 1448);
    assert_eq!(out.len(), 1);
    let before = c.stats().recovery;
    // The peer shuts its window on the segment and answers no probe.
    let mut z = stamped(seg(TcpControl::None, PISS + 1, Some(ISS + 1), &[]));
    z.window_len = 0;
    c.handle_segment(ms(3), &z);
    run_until(&mut c, ms(3), ms(40));
    let s = c.stats().recovery;
    assert!(s.window_probe_timeouts >= 2, "{s:?}");
    assert!(s.rto_us > before.rto_us, "the probes back off: {s:?}");
    // At 52 ms the peer acknowledges the segment, echoing its first transmission's
    // timestamp (a 50 ms sample), and opens its window.
    let mut ack = seg(TcpControl::None, PISS + 1, Some(ISS + 1 + 1448), &[]);
    ack.timestamp = Some(TcpTimestampRepr {
        tsval: 2,
        tsecr: out[0].ts.expect("timestamps").tsval,
    });
    c.handle_segment(ms(52), &ack);
    let s = c.stats().recovery;
    assert!(s.srtt_us > before.srtt_us, "the sample was taken: {s:?}");
    let want = (s.srtt_us + (4 * s.rttvar_us).max(1)).max(5_000);
    assert_eq!(
        s.rto_us, want,
        "RTO = SRTT + 4 RTTVAR after the sample (RFC 6298 2.3): {s:?}"
    );
}
