//! Connection teardown (RFC 9293 3.6, 3.10.4, 3.10.5, 3.10.7.4 eighth): FIN
//! sending and receiving in every state, half-close, TIME-WAIT, closing-state timeouts,
//! RSTs in closing states, abort and the host's release of a connection. Packetdrill-style
//! scripts for one connection (as `conn_script.rs`) and host tests over the in-memory link.

mod common;
mod script;

use common::*;
use script::*;
use smoltcp::socket::tcp::State;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{TcpControl, TcpSeqNumber, TcpTimestampRepr};
use warpcore_tcp::conn::{ConnEvent, Connection, Endpoints};
use warpcore_tcp::link::{self, LinkConfig, LinkEnd};
use warpcore_tcp::{ConnId, Event, Stack, TcpTuning};

// ---------------------------------------------------------------- one connection

/// RFC 9293 3.10.4 (CLOSE: the FIN goes after what was queued) and 3.10.7.4 fifth (an
/// ACK of the data but not of the FIN): the data goes first with the FIN on its last
/// segment; an ACK short of the FIN leaves FIN-WAIT-1, and the FIN alone goes again at
/// the RTO until acknowledged.
#[test]
fn rfc9293_3_10_4_queued_data_then_fin_and_a_fin_acknowledged_partly() {
    let mut c = established(cfg(), true);
    assert_eq!(c.send(&[5u8; 3000]), Ok(3000));
    c.close();
    assert_eq!(c.state(), State::FinWait1);
    assert!(c.send(b"x").is_err(), "no data after CLOSE");
    let out = drain(&mut c, ms(2));
    let total: usize = out.iter().map(|o| o.payload.len()).sum();
    assert_eq!(total, 3000);
    let fins: Vec<_> = out
        .iter()
        .filter(|o| o.control == TcpControl::Fin)
        .collect();
    assert_eq!(fins.len(), 1, "{out:?}");
    let last = out.last().expect("segments");
    assert_eq!(last.control, TcpControl::Fin, "the FIN rides the last data");
    assert_eq!(last.seq + last.payload.len(), ISS + 1 + 3000);
    // All the data acknowledged, not the FIN.
    c.handle_segment(
        ms(3),
        &seg(TcpControl::None, PISS + 1, Some(ISS + 1 + 3000), &[]),
    );
    assert_eq!(c.state(), State::FinWait1);
    assert_eq!(c.send_queue(), 0);
    let out = run_until(&mut c, ms(3), ms(5_000));
    let again: Vec<_> = out
        .iter()
        .filter(|(_, o)| o.control == TcpControl::Fin)
        .collect();
    assert!(!again.is_empty(), "the FIN goes again: {out:?}");
    for (_, o) in &again {
        assert_eq!(o.seq, ISS + 1 + 3000);
        assert!(o.payload.is_empty(), "the FIN alone: {o:?}");
    }
    c.handle_segment(
        ms(5_001),
        &seg(TcpControl::None, PISS + 1, Some(ISS + 2 + 3000), &[]),
    );
    assert_eq!(c.state(), State::FinWait2);
}

/// RFC 9293 3.6 / 3.10.7.4 seventh (half-close): in FIN-WAIT-1 and FIN-WAIT-2 the peer's
/// data is still taken, acknowledged and readable; its FIN then ends in TIME-WAIT.
#[test]
fn rfc9293_3_6_half_close_data_after_our_fin_is_taken_and_acked() {
    let mut c = established(cfg(), true);
    c.close();
    let out = drain(&mut c, ms(2));
    assert_eq!(out[0].control, TcpControl::Fin);
    // FIN-WAIT-1: the peer's data crosses our FIN (it does not acknowledge it).
    c.handle_segment(ms(3), &data(0, b"hello", ISS + 1));
    assert_eq!(c.state(), State::FinWait1);
    let out = drain(&mut c, ms(3));
    assert_eq!(out.last().and_then(|o| o.ack), Some(PISS + 6), "{out:?}");
    // FIN-WAIT-2.
    c.handle_segment(ms(4), &data(5, b" world", ISS + 2));
    assert_eq!(c.state(), State::FinWait2);
    let out = drain(&mut c, ms(4));
    assert_eq!(out.last().and_then(|o| o.ack), Some(PISS + 12), "{out:?}");
    let mut buf = [0u8; 32];
    assert_eq!(c.recv(&mut buf), Ok(11));
    assert_eq!(&buf[..11], b"hello world");
    // FIN with data.
    c.handle_segment(ms(5), &seg(TcpControl::Fin, PISS + 12, Some(ISS + 2), b"!"));
    assert_eq!(c.state(), State::TimeWait);
    let out = drain(&mut c, ms(5));
    assert_eq!(out.last().and_then(|o| o.ack), Some(PISS + 14), "{out:?}");
    assert_eq!(c.recv(&mut buf), Ok(1));
}

/// RFC 9293 3.10.7.4 eighth, TIME-WAIT: a retransmitted FIN is acknowledged again and
/// restarts the 2 MSL timer; a new SYN draws a (challenge) ACK and leaves TIME-WAIT as it
/// is (RFC 5961 4.2: the connection alone; a host with a listener for the port reopens
/// the 4-tuple instead, RFC 6191, `rfc6191_*`); an in-window RST that is not
/// exactly at RCV.NXT draws a challenge ACK (RFC 5961 3.2), one at RCV.NXT closes.
#[test]
fn rfc9293_3_10_7_4_time_wait_retransmitted_fin_syn_and_rst() {
    let mut config = cfg();
    config.time_wait = Duration::from_secs(2);
    let mut c = established(config, true);
    c.close();
    drain(&mut c, ms(2));
    c.handle_segment(ms(3), &seg(TcpControl::Fin, PISS + 1, Some(ISS + 2), &[]));
    assert_eq!(c.state(), State::TimeWait);
    drain(&mut c, ms(3));
    assert_eq!(c.poll_timeout(), Some(ms(2_003)));
    c.handle_segment(
        ms(1_000),
        &seg(TcpControl::Fin, PISS + 1, Some(ISS + 2), &[]),
    );
    let out = drain(&mut c, ms(1_000));
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].ack, Some(PISS + 2));
    assert_eq!(c.poll_timeout(), Some(ms(3_000)), "2 MSL again");
    // A new SYN.
    let syn = seg(TcpControl::Syn, PISS + 100_000, None, &[]);
    c.handle_segment(ms(1_100), &syn);
    assert_eq!(c.state(), State::TimeWait);
    let out = drain(&mut c, ms(1_100));
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].control, TcpControl::None);
    assert_eq!(out[0].ack, Some(PISS + 2));
    // A RST in the window, not at RCV.NXT (past the oow interval of the last ACK).
    c.handle_segment(ms(1_700), &seg(TcpControl::Rst, PISS + 10, None, &[]));
    assert_eq!(c.state(), State::TimeWait);
    let out = drain(&mut c, ms(1_700));
    assert_eq!(out.len(), 1, "a challenge ACK: {out:?}");
    c.handle_segment(ms(1_800), &seg(TcpControl::Rst, PISS + 2, None, &[]));
    assert_eq!(c.state(), State::Closed);
    assert!(c.is_finished() || !events(&mut c).is_empty());
}

/// RFC 9293 3.10.7.4 second, CLOSING / LAST-ACK / FIN-WAIT: a RST in the window but not at
/// RCV.NXT draws a challenge ACK and changes nothing (RFC 5961 3.2); one at RCV.NXT resets.
#[test]
fn rfc5961_3_2_rst_in_closing_states() {
    // CLOSING.
    let mut c = closing();
    c.handle_segment(ms(600), &seg(TcpControl::Rst, PISS + 5, None, &[]));
    assert_eq!(c.state(), State::Closing);
    assert_eq!(drain(&mut c, ms(600)).len(), 1);
    c.handle_segment(ms(601), &seg(TcpControl::Rst, PISS + 2, None, &[]));
    assert_eq!(c.state(), State::Closed);
    // LAST-ACK.
    let mut c = established(cfg(), true);
    c.handle_segment(ms(2), &seg(TcpControl::Fin, PISS + 1, Some(ISS + 1), &[]));
    c.close();
    assert_eq!(c.state(), State::LastAck);
    drain(&mut c, ms(2));
    c.handle_segment(ms(600), &seg(TcpControl::Rst, PISS + 5, None, &[]));
    assert_eq!(c.state(), State::LastAck);
    c.handle_segment(ms(601), &seg(TcpControl::Rst, PISS + 2, None, &[]));
    assert_eq!(c.state(), State::Closed);
    assert_eq!(events(&mut c).last(), Some(&ConnEvent::Reset));
}

/// RFC 9293 3.10.7.4 second / RFC 5961 3.2 after the peer's FIN (CLOSE-WAIT, LAST-ACK,
/// CLOSING): a peer that sends its FIN and then aborts (macOS on ^C, for one) sends its RST
/// at the FIN's own sequence number, RCV.NXT - 1 once the FIN is taken. Linux's
/// `tcp_reset_check` accepts it there; dropped, the connection waited on a peer that no
/// longer exists (its challenge ACKs go unanswered), in LAST-ACK until the FIN's
/// retransmissions gave up. Another sequence number below RCV.NXT still changes nothing.
#[test]
fn a_rst_at_the_peers_fin_resets_after_the_fin() {
    // CLOSE-WAIT.
    let mut c = established(cfg(), true);
    c.handle_segment(ms(2), &seg(TcpControl::Fin, PISS + 1, Some(ISS + 1), &[]));
    assert_eq!(c.state(), State::CloseWait);
    drain(&mut c, ms(2));
    events(&mut c);
    c.handle_segment(ms(3), &seg(TcpControl::Rst, PISS, None, &[]));
    assert_eq!(c.state(), State::CloseWait, "RCV.NXT - 2 is not the FIN's");
    c.handle_segment(ms(4), &seg(TcpControl::Rst, PISS + 1, None, &[]));
    assert_eq!(c.state(), State::Closed);
    assert_eq!(events(&mut c).last(), Some(&ConnEvent::Reset));
    // LAST-ACK.
    let mut c = established(cfg(), true);
    c.handle_segment(ms(2), &seg(TcpControl::Fin, PISS + 1, Some(ISS + 1), &[]));
    c.close();
    assert_eq!(c.state(), State::LastAck);
    drain(&mut c, ms(2));
    c.handle_segment(ms(3), &seg(TcpControl::Rst, PISS + 1, None, &[]));
    assert_eq!(c.state(), State::Closed);
    assert_eq!(events(&mut c).last(), Some(&ConnEvent::Reset));
    // CLOSING.
    let mut c = closing();
    c.handle_segment(ms(4), &seg(TcpControl::Rst, PISS + 1, None, &[]));
    assert_eq!(c.state(), State::Closed);
}

/// RFC 9293 3.8.3 R2 and 3.10.7.4 (LAST-ACK, CLOSING, FIN-WAIT-1): a peer that never
/// answers our FIN does not hold the connection for ever, even without keep-alive or a
/// user timeout: the retransmissions give up and the connection ends timed out.
#[test]
fn rfc9293_3_8_3_an_unanswered_fin_ends_in_a_timeout() {
    for state in [State::FinWait1, State::LastAck, State::Closing] {
        let mut config = cfg();
        config.keep_alive = None;
        config.timeout = None;
        let mut c = established(config, true);
        match state {
            State::LastAck => {
                c.handle_segment(ms(2), &seg(TcpControl::Fin, PISS + 1, Some(ISS + 1), &[]));
                c.close();
            }
            State::Closing => {
                c.close();
                drain(&mut c, ms(2));
                c.handle_segment(ms(2), &seg(TcpControl::Fin, PISS + 1, Some(ISS + 1), &[]));
            }
            _ => c.close(),
        }
        assert_eq!(c.state(), state);
        let day = 24 * 3600 * 1000;
        let out = run_until(&mut c, ms(2), ms(day));
        assert!(out.iter().any(|(_, o)| o.control == TcpControl::Fin));
        assert_eq!(c.state(), State::Closed, "{state}: {out:?}");
        assert!(events(&mut c).contains(&ConnEvent::TimedOut), "{state}");
        assert_eq!(c.poll_timeout(), None);
    }
}

/// RFC 9293 3.8.6.1 (zero-window probing) with the FIN to send: data queued behind a shut
/// peer window is probed, then goes with the FIN once the window opens; the connection is
/// not given up while the peer answers with a zero window.
#[test]
fn rfc9293_3_8_6_1_a_shut_window_holds_the_data_and_fin_not_the_connection() {
    let mut config = cfg();
    config.keep_alive = None;
    config.timeout = Some(Duration::from_secs(30));
    let mut c = established(config, true);
    // The peer shuts its window.
    let mut shut = seg(TcpControl::None, PISS + 1, Some(ISS + 1), &[]);
    shut.window_len = 0;
    c.handle_segment(ms(2), &shut);
    assert_eq!(c.send(&[9u8; 100]), Ok(100));
    c.close();
    assert!(
        drain(&mut c, ms(2)).is_empty(),
        "nothing fits a shut window"
    );
    // Ten minutes of probes, each answered with the window still shut.
    let mut now = ms(2);
    let mut probes = 0;
    while now < ms(600_000) {
        let Some(t) = c.poll_timeout() else { break };
        now = t;
        c.handle_timeout(now);
        for o in drain(&mut c, now) {
            probes += 1;
            let acked = ISS + 1;
            let mut a = seg(TcpControl::None, PISS + 1, Some(acked), &[]);
            a.window_len = 0;
            let _ = o;
            c.handle_segment(now, &a);
        }
        drain(&mut c, now);
    }
    assert!(probes > 3, "probed {probes} times");
    assert_eq!(c.state(), State::FinWait1, "alive while the peer answers");
    // The window opens: the data and the FIN go.
    now += Duration::from_millis(1);
    c.handle_segment(now, &seg(TcpControl::None, PISS + 1, Some(ISS + 1), &[]));
    let out = drain(&mut c, now);
    let end = out
        .iter()
        .map(|o| (o.seq + o.payload.len()).0)
        .max()
        .expect("segments");
    assert_eq!(TcpSeqNumber(end), ISS + 101, "{out:?}");
    assert!(out.iter().any(|o| o.control == TcpControl::Fin), "{out:?}");
}

/// RFC 9293 3.10.5 (ABORT): whatever state, the RST owed goes once the host polls,
/// including after a second abort (the host's release aborts again).
#[test]
fn rfc9293_3_10_5_a_second_abort_keeps_the_rst_owed() {
    let mut c = established(cfg(), true);
    c.abort();
    c.abort();
    let out = drain(&mut c, ms(2));
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].control, TcpControl::Rst);
    assert_eq!(out[0].seq, ISS + 1);
}

/// RFC 9293 3.10.5 (ABORT) in each state: a RST in the synchronized states (SYN-RECEIVED,
/// ESTABLISHED, FIN-WAIT-1/2, CLOSE-WAIT), none in SYN-SENT or TIME-WAIT; CLOSED at once.
#[test]
fn rfc9293_3_10_5_abort_in_each_state() {
    // SYN-SENT: no RST.
    let ep = Endpoints {
        local: US,
        remote: PEER,
    };
    let mut c = Connection::connect(&cfg(), ep, ISS, ms(0));
    drain(&mut c, ms(0));
    c.abort();
    assert_eq!(c.state(), State::Closed);
    assert!(drain(&mut c, ms(1)).is_empty());
    // FIN-WAIT-2 and CLOSE-WAIT: a RST at SND.NXT.
    let mut c = established(cfg(), true);
    c.close();
    drain(&mut c, ms(2));
    c.handle_segment(ms(3), &seg(TcpControl::None, PISS + 1, Some(ISS + 2), &[]));
    assert_eq!(c.state(), State::FinWait2);
    c.abort();
    let out = drain(&mut c, ms(4));
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].control, out[0].seq), (TcpControl::Rst, ISS + 2));
    let mut c = established(cfg(), true);
    c.handle_segment(ms(2), &seg(TcpControl::Fin, PISS + 1, Some(ISS + 1), &[]));
    drain(&mut c, ms(2));
    assert_eq!(c.state(), State::CloseWait);
    c.abort();
    let out = drain(&mut c, ms(4));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].control, TcpControl::Rst);
    // TIME-WAIT: none.
    let mut c = established(cfg(), true);
    c.close();
    drain(&mut c, ms(2));
    c.handle_segment(ms(3), &seg(TcpControl::Fin, PISS + 1, Some(ISS + 2), &[]));
    drain(&mut c, ms(3));
    assert_eq!(c.state(), State::TimeWait);
    c.abort();
    assert!(drain(&mut c, ms(4)).is_empty());
    assert_eq!(c.state(), State::Closed);
}

// ---------------------------------------------------------------- the host

fn stacks(link: &LinkConfig, max_connections: usize) -> (Stack<LinkEnd>, Stack<LinkEnd>) {
    let (ea, eb) = link::pair(link);
    let mut ca = config(1, IP_A);
    let mut cb = config(2, IP_B);
    ca.max_connections = max_connections;
    cb.max_connections = max_connections;
    (
        Stack::new(ea, &ca, Instant::ZERO).expect("a"),
        Stack::new(eb, &cb, Instant::ZERO).expect("b"),
    )
}

/// `n` connections from `a` to `b`'s new listener on `port`, established and accepted.
fn connect_n(
    a: &mut Stack<LinkEnd>,
    b: &mut Stack<LinkEnd>,
    now: &mut Instant,
    port: u16,
    n: usize,
    t: &TcpTuning,
) -> Vec<(ConnId, ConnId)> {
    let l = b.listen(port, n, t).expect("listen");
    let mut pairs = Vec::new();
    for _ in 0..n {
        let c = a.connect((IP_B, port), None, t).expect("connect");
        run(a, b, now, 5);
        let s = b.accept(l).expect("accept").expect("accepted");
        assert_eq!(a.state(c), Ok(State::Established));
        pairs.push((c, s));
    }
    pairs
}

/// RFC 9293 3.10.5: `abort` then `release` before the next poll (a user that resets a
/// connection and lets its handle go at once) still resets the peer. The release aborted a
/// second time, which cleared the RST the first abort owed: the peer was left with a
/// half-open connection.
#[test]
fn rfc9293_3_10_5_abort_then_release_still_resets_the_peer() {
    let (mut a, mut b) = stacks(&LinkConfig::default(), 16);
    let mut now = Instant::ZERO;
    let t = TcpTuning::default();
    let pairs = connect_n(&mut a, &mut b, &mut now, 9100, 1, &t);
    let (c, s) = pairs[0];
    a.abort(c).expect("abort");
    a.release(c).expect("release");
    let (_, eb) = run(&mut a, &mut b, &mut now, 5);
    assert!(
        eb.contains(&Event::Reset(s)),
        "the peer sees a reset: {eb:?}"
    );
}

/// RFC 9293 3.10.5 at scale, under back-pressure: releasing many open connections at once
/// (each aborted, its RST sent "at once") while the device takes only a few frames per
/// poll still resets every peer. The RST that found the device full was dropped with the
/// slot, and those peers kept half-open connections.
#[test]
fn rfc9293_3_10_5_releasing_many_open_connections_resets_every_peer() {
    let link = LinkConfig {
        queue_frames: 4,
        ..LinkConfig::default()
    };
    let n = 12;
    let (mut a, mut b) = stacks(&link, 64);
    let mut now = Instant::ZERO;
    let t = TcpTuning::default();
    let pairs = connect_n(&mut a, &mut b, &mut now, 9100, n, &t);
    for &(c, _) in &pairs {
        a.release(c).expect("release");
    }
    assert_eq!(a.live(), 0, "the user's table has the room at once");
    let (_, eb) = run(&mut a, &mut b, &mut now, 50);
    let reset = pairs
        .iter()
        .filter(|(_, s)| eb.contains(&Event::Reset(*s)))
        .count();
    assert_eq!(reset, n, "{eb:?}");
    // Nothing of them is left on `a`: no timer armed.
    assert_eq!(a.timers_armed(), Some(0));
}

/// RFC 9293 3.6 / 3.10.7.4 at scale: many connections closed gracefully at once end in
/// TIME-WAIT on the active side; released there they finish it inside the stack and then
/// leave nothing behind (no timer, no orphan, the ports back in the ephemeral pool: the
/// same 4-tuples are taken again by new connections).
#[test]
fn rfc9293_3_6_many_graceful_closes_release_everything_after_time_wait() {
    let (mut a, mut b) = stacks(&LinkConfig::default(), 256);
    let mut now = Instant::ZERO;
    let t = TcpTuning {
        time_wait: Duration::from_millis(50),
        ..TcpTuning::default()
    };
    let n = 200;
    let pairs = connect_n(&mut a, &mut b, &mut now, 9100, n, &t);
    for &(c, _) in &pairs {
        a.close(c).expect("close");
    }
    let (_, eb) = run(&mut a, &mut b, &mut now, 5);
    for &(_, s) in &pairs {
        assert!(eb.contains(&Event::PeerClosed(s)));
        b.close(s).expect("close");
    }
    let (ea, eb) = run(&mut a, &mut b, &mut now, 5);
    for &(c, s) in &pairs {
        assert!(ea.contains(&Event::Closed(c)), "{ea:?}");
        assert!(eb.contains(&Event::Closed(s)), "{eb:?}");
        assert_eq!(a.state(c), Ok(State::TimeWait));
        a.release(c).expect("release");
        b.release(s).expect("release");
        assert!(a.state(c).is_err(), "a released handle is stale");
    }
    // TIME-WAIT goes on inside the stack: one timer each.
    assert_eq!(a.live(), 0);
    assert_eq!(a.timers_armed(), Some(n));
    let (ea, _) = run(&mut a, &mut b, &mut now, 600);
    assert!(ea.is_empty(), "no event names a released handle: {ea:?}");
    assert_eq!((a.live(), b.live()), (0, 0));
    assert_eq!((a.timers_armed(), b.timers_armed()), (Some(0), Some(0)));
    // The ephemeral ports come round again: the pool is not exhausted by them.
    let again = connect_n(&mut a, &mut b, &mut now, 9101, 10, &t);
    for &(c, _) in &again {
        assert_eq!(a.state(c), Ok(State::Established));
    }
}

/// RFC 9293 3.8.3 R2 with a shut peer window: a peer that stops answering the probes is
/// still given up at the user timeout, counted from the first probe it left unanswered.
#[test]
fn rfc9293_3_8_3_a_shut_window_whose_peer_goes_silent_times_out() {
    let mut config = cfg();
    config.keep_alive = None;
    config.timeout = Some(Duration::from_secs(30));
    let mut c = established(config, true);
    let mut shut = seg(TcpControl::None, PISS + 1, Some(ISS + 1), &[]);
    shut.window_len = 0;
    c.handle_segment(ms(2), &shut);
    assert_eq!(c.send(&[9u8; 100]), Ok(100));
    c.close();
    drain(&mut c, ms(2));
    // Answered for two minutes, then silence.
    let mut now = ms(2);
    let mut last_answer = now;
    let mut first_unanswered = None;
    while c.state() != State::Closed {
        let Some(t) = c.poll_timeout() else { break };
        now = t;
        assert!(now < ms(3_600_000), "never given up");
        c.handle_timeout(now);
        let sent = !drain(&mut c, now).is_empty();
        if sent && now < ms(120_000) {
            c.handle_segment(now, &shut);
            last_answer = now;
        } else if sent && first_unanswered.is_none() {
            first_unanswered = Some(now);
        }
        drain(&mut c, now);
    }
    assert!(events(&mut c).contains(&ConnEvent::TimedOut));
    let first = first_unanswered.expect("a probe went unanswered");
    assert!(last_answer < first);
    assert!(
        now >= first + Duration::from_secs(30) && now <= first + Duration::from_secs(31),
        "timed out at {now}, first unanswered probe at {first}"
    );
}

/// The frames waiting on the link for `to`, taken off and put back on it from `from`'s end in
/// the same order (so `to` still receives them); returns copies of them.
fn tap(to: &mut Stack<LinkEnd>, from: &mut Stack<LinkEnd>, now: Instant) -> Vec<Vec<u8>> {
    use smoltcp::phy::{Device, RxToken, TxToken};
    let mut got = Vec::new();
    while let Some((rx, _)) = to.device_mut().receive(now) {
        got.push(rx.consume(|f| f.to_vec()));
    }
    for f in &got {
        let tx = from.device_mut().transmit(now).expect("room on the link");
        tx.consume(f.len(), |buf| buf.copy_from_slice(f));
    }
    got
}

/// RFC 7323 5.8 and RFC 1337 (hazard H1), RFC 6191 2: TIME-WAIT here is short (10 s, and
/// a peer's RST may end it, 3.10.7.4) because PAWS is to keep a segment of an earlier
/// incarnation of a 4-tuple out of a later one whose window it falls in (decision 0002).
/// That holds only if the sender's timestamp clock never goes back from one incarnation
/// of a 4-tuple to the next. Each connection's clock offset was drawn from its ISN (`ISS
/// ^ 0x5a5a5a5a`), so a later incarnation's TSvals could lie below the earlier one's, and
/// then an old duplicate passed PAWS and its octets were delivered as the new stream's.
/// Here `a` reconnects from the same port again and again, each time after the last
/// incarnation's TIME-WAIT, and the last incarnation's data segments (whose sequence
/// numbers fall in the new window: the ISN moves by only 250,000 a second) arrive again
/// before the new data: `b` must deliver the new stream only.
#[test]
fn rfc7323_5_8_old_duplicates_of_an_earlier_incarnation_are_kept_out() {
    let (mut a, mut b) = stacks(&LinkConfig::default(), 16);
    let t = TcpTuning {
        time_wait: Duration::from_millis(20),
        ..TcpTuning::default()
    };
    let l = b.listen(9300, 4, &t).expect("listen");
    let mut now = Instant::ZERO;
    let total: u64 = 96 * 1024;
    let mut old: Vec<Vec<u8>> = Vec::new();
    let step = |a: &mut Stack<LinkEnd>, b: &mut Stack<LinkEnd>, now: &mut Instant| {
        a.poll(*now);
        let seen = tap(b, a, *now);
        b.poll(*now);
        *now += Duration::from_micros(50);
        seen
    };
    for inc in 0..48u32 {
        let c = a
            .connect((IP_B, 9300), Some(40_000), &t)
            .unwrap_or_else(|e| panic!("incarnation {inc}: connect {e:?}"));
        let mut s = None;
        for _ in 0..200 {
            step(&mut a, &mut b, &mut now);
            if s.is_none() {
                s = b.accept(l).expect("accept");
            }
            if s.is_some() && a.state(c) == Ok(State::Established) {
                break;
            }
        }
        let s = s.unwrap_or_else(|| panic!("incarnation {inc} not accepted"));
        // The earlier incarnation's segments, held back by the network, arrive now.
        for f in old.drain(..) {
            use smoltcp::phy::{Device, TxToken};
            let tx = a.device_mut().transmit(now).expect("room on the link");
            tx.consume(f.len(), |buf| buf.copy_from_slice(&f));
            step(&mut a, &mut b, &mut now);
        }
        let (mut fa, mut fb) = (Flow::default(), Flow::default());
        let salt = 0x1000 + inc;
        for _ in 0..20_000 {
            if fa.sent < total {
                let off = fa.sent;
                fa.sent += a
                    .send_with(c, |buf| {
                        let n = buf.len().min((total - off) as usize);
                        for (k, x) in buf[..n].iter_mut().enumerate() {
                            *x = pattern(salt, off + k as u64);
                        }
                        n
                    })
                    .expect("send") as u64;
            }
            old.extend(step(&mut a, &mut b, &mut now));
            // Panics at an octet that is not this incarnation's.
            read_checked(&mut b, s, &mut fb, salt);
            if fb.received == total {
                break;
            }
        }
        assert_eq!(fb.received, total, "incarnation {inc}");
        assert_eq!(b.state(s), Ok(State::Established), "incarnation {inc}");
        // `a` closes first (TIME-WAIT on its side), then `b`.
        a.close(c).expect("close");
        for _ in 0..40 {
            step(&mut a, &mut b, &mut now);
        }
        b.close(s).expect("close");
        for _ in 0..40 {
            step(&mut a, &mut b, &mut now);
        }
        assert_eq!(a.state(c), Ok(State::TimeWait), "incarnation {inc}");
        a.release(c).expect("release");
        b.release(s).expect("release");
        // TIME-WAIT ends: the 4-tuple is free again.
        for _ in 0..1_000 {
            if a.timers_armed() == Some(0) {
                break;
            }
            step(&mut a, &mut b, &mut now);
        }
        let _ = fa.received;
        while a.next_event().is_some() || b.next_event().is_some() {}
    }
}

/// RFC 9293 3.10.7.4 (second check, TIME-WAIT: "If the RST bit is set, then enter the
/// CLOSED state, delete the TCB, and return", no signal to the user, unlike the
/// synchronized states before it) and 3.10.5 (ABORT in TIME-WAIT: "respond with ok"):
/// the user was told `Closed` on entering TIME-WAIT (both FINs through), and nothing ends
/// the connection a second time. A peer's RST at RCV.NXT there (a client back on the same
/// port answers our challenge ACK with it) raised `Reset` after `Closed`, and an abort a
/// second `Closed`: a graceful close reported as a reset, or twice.
#[test]
fn rfc9293_3_10_7_4_time_wait_ends_without_a_second_event() {
    for by_rst in [true, false] {
        let mut c = established(cfg(), true);
        c.close();
        drain(&mut c, ms(2));
        c.handle_segment(ms(3), &seg(TcpControl::Fin, PISS + 1, Some(ISS + 2), &[]));
        assert_eq!(c.state(), State::TimeWait);
        drain(&mut c, ms(3));
        assert_eq!(
            events(&mut c),
            vec![ConnEvent::PeerClosed, ConnEvent::Closed]
        );
        if by_rst {
            c.handle_segment(ms(4), &seg(TcpControl::Rst, PISS + 2, None, &[]));
        } else {
            c.abort();
        }
        assert_eq!(c.state(), State::Closed, "RST {by_rst}");
        assert_eq!(
            events(&mut c),
            vec![],
            "RST {by_rst}: the user was told already"
        );
        assert!(drain(&mut c, ms(4)).is_empty(), "RST {by_rst}");
        assert!(c.is_finished(), "RST {by_rst}");
    }
}

/// RFC 6191 2 (RFC 9293 3.6.1 MAY-2, RFC 1122 4.2.2.13): which SYNs may reopen a 4-tuple
/// held in TIME-WAIT. With timestamps on the old incarnation, a TSval newer than the last
/// one seen (whatever the sequence number), or equal to it with a sequence number above
/// RCV.NXT, and no other; without, a sequence number above RCV.NXT; a SYN-ACK never.
#[test]
fn rfc6191_time_wait_reopen_rule() {
    let syn_ts = |seq: TcpSeqNumber, tsval: Option<u32>| {
        let mut s = seg(TcpControl::Syn, seq, None, &[]);
        s.timestamp = tsval.map(|tsval| TcpTimestampRepr { tsval, tsecr: 0 });
        s
    };
    for plain in [false, true] {
        let mut c = established(cfg(), plain);
        c.close();
        drain(&mut c, ms(2));
        let mut fin = seg(TcpControl::Fin, PISS + 1, Some(ISS + 2), &[]);
        if !plain {
            fin.timestamp = Some(TcpTimestampRepr {
                tsval: 1_000,
                tsecr: 0,
            });
        }
        c.handle_segment(ms(3), &fin);
        assert_eq!(c.state(), State::TimeWait, "plain {plain}");
        drain(&mut c, ms(3));
        events(&mut c);
        let above = PISS + 100_000;
        let below = PISS + 1;
        if plain {
            assert!(c.time_wait_reopens(&syn_ts(above, None)));
            assert!(!c.time_wait_reopens(&syn_ts(below, None)));
            assert!(!c.time_wait_reopens(&syn_ts(PISS + 2, None)), "at RCV.NXT");
            // The new incarnation will use timestamps (RFC 6191 2, second case).
            assert!(c.time_wait_reopens(&syn_ts(below, Some(5))));
        } else {
            assert!(c.time_wait_reopens(&syn_ts(below, Some(1_001))));
            // An equal TSval: by its sequence number (RFC 6191 2, second case).
            assert!(c.time_wait_reopens(&syn_ts(above, Some(1_000))));
            assert!(!c.time_wait_reopens(&syn_ts(below, Some(1_000))));
            assert!(!c.time_wait_reopens(&syn_ts(above, Some(999))));
            // Without timestamps now: by its sequence number.
            assert!(c.time_wait_reopens(&syn_ts(above, None)));
            assert!(!c.time_wait_reopens(&syn_ts(below, None)));
        }
        let mut syn_ack = syn_ts(above, Some(2_000));
        syn_ack.ack_number = Some(ISS + 2);
        assert!(!c.time_wait_reopens(&syn_ack), "plain {plain}");
        // Ending it: CLOSED without a second event, the floor above all we sent.
        let floor = c.end_time_wait_for_reopen();
        assert_eq!(c.state(), State::Closed);
        assert_eq!(events(&mut c), vec![], "plain {plain}");
        assert!(floor > ISS + 2);
    }
}

/// RFC 6191 2, second case of an old incarnation with timestamps: "the timestamp contained
/// in the incoming SYN segment is equal to the last timestamp seen on the previous
/// incarnation ..., and the Sequence Number of the incoming SYN segment is greater than
/// the last sequence number seen ..., honor the connection request". A peer whose
/// timestamp clock ticks once a millisecond (Linux) and that comes back from the same port
/// within that millisecond sends such a SYN (Linux's `tcp_timewait_state_process` takes
/// it: no PAWS reject, a sequence number after RCV.NXT). It drew a challenge ACK, whose RST
/// ended TIME-WAIT and left the SYN to the peer's RTO (about a second). A SYN at or below
/// RCV.NXT with that timestamp still does not reopen.
#[test]
fn rfc6191_2_an_equal_timestamp_with_a_higher_sequence_number_reopens() {
    let mut c = established(cfg(), false);
    c.close();
    drain(&mut c, ms(2));
    let mut fin = seg(TcpControl::Fin, PISS + 1, Some(ISS + 2), &[]);
    fin.timestamp = Some(TcpTimestampRepr {
        tsval: 1_000,
        tsecr: 0,
    });
    c.handle_segment(ms(3), &fin);
    assert_eq!(c.state(), State::TimeWait);
    drain(&mut c, ms(3));
    events(&mut c);
    let syn = |seq: TcpSeqNumber| {
        let mut s = seg(TcpControl::Syn, seq, None, &[]);
        s.timestamp = Some(TcpTimestampRepr {
            tsval: 1_000,
            tsecr: 0,
        });
        s
    };
    assert!(
        c.time_wait_reopens(&syn(PISS + 100_000)),
        "an equal TSval and a sequence number above RCV.NXT reopen (RFC 6191 2)"
    );
    assert!(!c.time_wait_reopens(&syn(PISS + 2)), "at RCV.NXT");
    assert!(!c.time_wait_reopens(&syn(PISS + 1)), "below RCV.NXT");
}

/// RFC 6191 2 (RFC 9293 3.6.1 MAY-2/MAY-3, RFC 1122 4.2.2.13): a client back from the
/// same port while the server holds the last incarnation in TIME-WAIT connects at once.
/// The server answered its SYN with a challenge ACK, the client's RST ended TIME-WAIT and
/// its SYN got through only at its RTO, about a second later. Without a listener for the
/// port the SYN still draws a challenge ACK (checked by the connection test above).
#[test]
fn rfc6191_a_reconnect_from_the_same_port_reopens_time_wait() {
    let (mut a, mut b) = stacks(&LinkConfig::default(), 16);
    let t = TcpTuning {
        time_wait: Duration::from_secs(10),
        ..TcpTuning::default()
    };
    let l = b.listen(9400, 4, &t).expect("listen");
    let mut now = Instant::ZERO;
    let c = a.connect((IP_B, 9400), Some(41_000), &t).expect("connect");
    run(&mut a, &mut b, &mut now, 5);
    let s = b.accept(l).expect("accept").expect("accepted");
    assert_eq!(a.state(c), Ok(State::Established));
    // The server closes first: TIME-WAIT on its side.
    b.close(s).expect("close");
    run(&mut a, &mut b, &mut now, 5);
    a.close(c).expect("close");
    run(&mut a, &mut b, &mut now, 5);
    assert_eq!(b.state(s), Ok(State::TimeWait));
    a.release(c).expect("release");
    b.release(s).expect("release");
    run(&mut a, &mut b, &mut now, 5);
    let c2 = a
        .connect((IP_B, 9400), Some(41_000), &t)
        .expect("reconnect");
    // 10 ms: far below the client's 1 s initial RTO.
    run(&mut a, &mut b, &mut now, 100);
    assert_eq!(a.state(c2), Ok(State::Established), "reconnect stalled");
    let s2 = b.accept(l).expect("accept").expect("reconnect accepted");
    assert_eq!(b.state(s2), Ok(State::Established));
    // Both directions carry data on the new incarnation.
    assert_eq!(a.send(c2, b"hello").expect("send"), 5);
    run(&mut a, &mut b, &mut now, 5);
    let mut buf = [0u8; 16];
    assert_eq!(b.recv(s2, &mut buf).expect("recv"), 5);
    assert_eq!(&buf[..5], b"hello");
}

/// An established connection that closed, then took the peer's FIN before its own FIN was
/// acknowledged: CLOSING, its output drained at 3 ms.
fn closing() -> Connection {
    let mut c = established(cfg(), true);
    c.close();
    drain(&mut c, ms(2));
    c.handle_segment(ms(3), &seg(TcpControl::Fin, PISS + 1, Some(ISS + 1), &[]));
    assert_eq!(c.state(), State::Closing);
    drain(&mut c, ms(3));
    c
}
