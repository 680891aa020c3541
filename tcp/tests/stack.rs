//! Stack API behaviour over the in-memory link: backlog and accept, events, close sequences,
//! back-pressure on a full send buffer.

mod common;

use common::*;
use smoltcp::socket::tcp::State;
use smoltcp::time::{Duration, Instant};
use warpcore_tcp::link::{self, LinkConfig, LinkEnd};
use warpcore_tcp::{ConnId, Event, Stack, StackConfig, StackError, TcpImplementation, TcpTuning};

fn stacks() -> (Stack<LinkEnd>, Stack<LinkEnd>) {
    stacks_of(TcpImplementation::Warpcore)
}

fn stacks_of(imp: TcpImplementation) -> (Stack<LinkEnd>, Stack<LinkEnd>) {
    let (ea, eb) = link::pair(&LinkConfig::default());
    (
        Stack::with_implementation(ea, &config(1, IP_A), Instant::ZERO, imp).expect("a"),
        Stack::with_implementation(eb, &config(2, IP_B), Instant::ZERO, imp).expect("b"),
    )
}

fn accepted_over_several_polls(imp: TcpImplementation) {
    let (mut a, mut b) = stacks_of(imp);
    let t = TcpTuning::default();
    let l = b.listen(9000, 2, &t).expect("listen");
    // Connections arriving over several polls: each is accepted.
    let mut now = Instant::ZERO;
    let mut accepted = Vec::new();
    for _ in 0..5 {
        a.connect((IP_B, 9000), None, &t).expect("connect");
        let (_, eb) = run(&mut a, &mut b, &mut now, 3);
        for e in eb {
            if e == Event::Acceptable(l) {
                while let Some(c) = b.accept(l).expect("accept") {
                    accepted.push(c);
                }
            }
        }
    }
    assert_eq!(accepted.len(), 5, "accepted {accepted:?}");
    for c in &accepted {
        assert_eq!(b.state(*c), Ok(State::Established));
    }
}

#[test]
fn connections_over_several_polls_are_all_accepted() {
    accepted_over_several_polls(TcpImplementation::Warpcore);
    accepted_over_several_polls(TcpImplementation::SmoltcpReference);
}

#[test]
fn reference_refuses_syns_beyond_its_backlog_sockets() {
    let (mut a, mut b) = stacks_of(TcpImplementation::SmoltcpReference);
    let t = TcpTuning::default();
    let mut now = Instant::ZERO;
    // Three SYNs in the same poll against a backlog of one: smoltcp has no SYN queue, so the
    // surplus is refused with RST (the clients see Reset) rather than left hanging.
    let l2 = b.listen(9100, 1, &t).expect("listen");
    let cs: Vec<ConnId> = (0..3)
        .map(|_| a.connect((IP_B, 9100), None, &t).expect("connect"))
        .collect();
    let (ea, _) = run(&mut a, &mut b, &mut now, 5);
    let connected = cs
        .iter()
        .filter(|c| ea.contains(&Event::Connected(**c)))
        .count();
    let reset = cs
        .iter()
        .filter(|c| ea.contains(&Event::Reset(**c)))
        .count();
    assert_eq!((connected, reset), (1, 2), "{ea:?}");
    assert!(b.accept(l2).expect("accept").is_some());
}

#[test]
fn half_open_table_evicts_the_oldest_and_evicted_clients_retry_in() {
    let (mut a, mut b) = stacks();
    let t = TcpTuning::default();
    let mut now = Instant::ZERO;
    // Three SYNs in one poll against a backlog of one half-open connection: each SYN evicts
    // the previous one silently (no RST: a flood's forged sources get nothing), the last
    // completes. The evicted clients retransmit their SYN after the initial RTO and get in
    // once the table has room.
    let l = b.listen(9100, 1, &t).expect("listen");
    let cs: Vec<ConnId> = (0..3)
        .map(|_| a.connect((IP_B, 9100), None, &t).expect("connect"))
        .collect();
    let (ea, eb) = run(&mut a, &mut b, &mut now, 5);
    let connected = cs
        .iter()
        .filter(|c| ea.contains(&Event::Connected(**c)))
        .count();
    assert_eq!(connected, 1, "{ea:?}");
    assert!(
        !ea.iter()
            .any(|e| matches!(e, Event::Reset(_) | Event::TimedOut(_))),
        "{ea:?}"
    );
    assert!(eb.contains(&Event::Acceptable(l)), "{eb:?}");
    // Their SYNs come back after the initial RTO (1 s, RFC 6298 2.1), again together, so
    // one more gets in; the last one on its next, backed-off retry (2 s later).
    let (ea, _) = run(&mut a, &mut b, &mut now, 40_000);
    let later = cs
        .iter()
        .filter(|c| ea.contains(&Event::Connected(**c)))
        .count();
    assert_eq!(later, 2, "{ea:?}");
    let mut n = 0;
    while b.accept(l).expect("accept").is_some() {
        n += 1;
    }
    assert_eq!(n, 3);
}

#[test]
fn events_follow_data_and_close_in_order() {
    let (mut a, mut b) = stacks();
    let t = TcpTuning {
        rx_buffer: 8192,
        tx_buffer: 8192,
        ..TcpTuning::default()
    };
    let l = b.listen(9001, 1, &t).expect("listen");
    let c = a.connect((IP_B, 9001), None, &t).expect("connect");
    let mut now = Instant::ZERO;
    let (ea, eb) = run(&mut a, &mut b, &mut now, 5);
    assert!(ea.contains(&Event::Connected(c)), "{ea:?}");
    assert!(eb.contains(&Event::Acceptable(l)), "{eb:?}");
    let s = b.accept(l).expect("accept").expect("one connection");
    assert_eq!(b.accept(l), Ok(None));

    // Fill the client's send buffer: the rest is refused (0), not lost.
    let big = vec![7u8; 20_000];
    let n = a.send(c, &big).expect("send");
    assert_eq!(n, 8192);
    assert_eq!(a.send(c, &big[n..]), Ok(0));
    assert_eq!(a.send_space(c), Ok(0));
    let (ea, eb) = run(&mut a, &mut b, &mut now, 3);
    assert!(eb.contains(&Event::Readable(s)), "{eb:?}");
    let mut buf = vec![0u8; 20_000];
    let got = b.recv(s, &mut buf).expect("recv");
    assert_eq!(got, 8192);
    assert!(buf[..got].iter().all(|&x| x == 7));
    let (ea2, _) = run(&mut a, &mut b, &mut now, 3);
    assert!(
        ea.iter().chain(&ea2).any(|e| *e == Event::Writable(c)),
        "send space freed by ACKs: {ea:?} {ea2:?}"
    );

    // Client closes: server sees PeerClosed, reads EOF, closes; both end Closed (not Reset).
    a.close(c).expect("close");
    let (_, eb) = run(&mut a, &mut b, &mut now, 3);
    assert!(eb.contains(&Event::PeerClosed(s)), "{eb:?}");
    assert!(matches!(
        b.recv(s, &mut buf),
        Err(StackError::CannotRecv(_))
    ));
    assert!(
        matches!(b.send(s, b"late reply"), Ok(10)),
        "half-close: server may still send"
    );
    b.close(s).expect("close");
    let (ea, eb) = run(&mut a, &mut b, &mut now, 10);
    assert!(eb.contains(&Event::Closed(s)), "{eb:?}");
    assert!(ea.contains(&Event::PeerClosed(c)), "{ea:?}");
    let mut tail = [0u8; 32];
    assert_eq!(a.recv(c, &mut tail), Ok(10));
    assert_eq!(&tail[..10], b"late reply");
    assert_eq!(a.state(c), Ok(State::TimeWait));
    b.release(s).expect("release");
    assert_eq!(b.state(s), Err(StackError::UnknownConnection));
}

#[test]
fn abort_resets_the_peer() {
    let (mut a, mut b) = stacks();
    let t = TcpTuning::default();
    let l = b.listen(9002, 1, &t).expect("listen");
    let c = a.connect((IP_B, 9002), None, &t).expect("connect");
    let mut now = Instant::ZERO;
    run(&mut a, &mut b, &mut now, 5);
    let s = b.accept(l).expect("accept").expect("connection");
    a.abort(c).expect("abort");
    let (ea, eb) = run(&mut a, &mut b, &mut now, 5);
    assert!(
        ea.contains(&Event::Closed(c)),
        "local abort is a close: {ea:?}"
    );
    assert!(
        eb.contains(&Event::Reset(s)),
        "the peer sees a reset: {eb:?}"
    );
}

/// RFC 9293 3.10.7.1: a closed connection has no TCB; what arrives for its 4-tuple is
/// answered as for no connection (a SYN for a listener opens a new one, anything else
/// draws a RST). A reset connection whose user has not released it yet kept its 4-tuple
/// and swallowed every segment: a peer that came back from the same port was never
/// answered, its SYNs silently dropped, until the user let the handle go.
#[test]
fn a_closed_connection_not_yet_released_does_not_swallow_its_4_tuple() {
    let (mut a, mut b) = stacks();
    let t = TcpTuning::default();
    let l = b.listen(9003, 4, &t).expect("listen");
    let c = a.connect((IP_B, 9003), Some(40_000), &t).expect("connect");
    let mut now = Instant::ZERO;
    run(&mut a, &mut b, &mut now, 5);
    let s = b.accept(l).expect("accept").expect("connection");
    a.abort(c).expect("abort");
    let (_, eb) = run(&mut a, &mut b, &mut now, 5);
    assert!(eb.contains(&Event::Reset(s)), "{eb:?}");
    a.release(c).expect("release");
    // B holds the reset connection; A comes back from the same port.
    assert_eq!(b.state(s), Ok(State::Closed));
    let c2 = a
        .connect((IP_B, 9003), Some(40_000), &t)
        .expect("connect again");
    let (ea, eb) = run(&mut a, &mut b, &mut now, 20);
    assert!(ea.contains(&Event::Connected(c2)), "{ea:?}");
    assert!(eb.contains(&Event::Acceptable(l)), "{eb:?}");
    let s2 = b.accept(l).expect("accept").expect("the new connection");
    assert_ne!(s2, s);
    // Both handles name their own connection, and releasing the old one leaves the new
    // one's 4-tuple in place.
    b.release(s).expect("release the old one");
    assert_eq!(b.send(s2, b"still here"), Ok(10));
    let mut got = [0u8; 16];
    let mut n = 0;
    for _ in 0..10 {
        run(&mut a, &mut b, &mut now, 1);
        n += a.recv(c2, &mut got[n..]).expect("recv");
    }
    assert_eq!(&got[..n], b"still here");
}

/// A released handle is stale (`Stack::release`): no event names it afterwards. Releasing
/// an open connection aborts it, and ours raised the abort's `Closed` for the handle just
/// released (the reference raises nothing); the RST still reaches the peer.
#[test]
fn no_event_names_a_handle_after_its_release() {
    for imp in [
        TcpImplementation::Warpcore,
        TcpImplementation::SmoltcpReference,
    ] {
        let (mut a, mut b) = stacks_of(imp);
        let t = TcpTuning::default();
        let l = b.listen(9005, 1, &t).expect("listen");
        let c = a.connect((IP_B, 9005), None, &t).expect("connect");
        let mut now = Instant::ZERO;
        let (ea, _) = run(&mut a, &mut b, &mut now, 5);
        assert!(ea.contains(&Event::Connected(c)), "{imp:?}: {ea:?}");
        let s = b.accept(l).expect("accept").expect("connection");
        a.release(c).expect("release");
        let (ea, eb) = run(&mut a, &mut b, &mut now, 5);
        let names_c = |e: &Event| match *e {
            Event::Connected(x)
            | Event::Readable(x)
            | Event::Writable(x)
            | Event::PeerClosed(x)
            | Event::Closed(x)
            | Event::Reset(x)
            | Event::TimedOut(x)
            | Event::NeighborUnreachable(x) => x == c,
            Event::Acceptable(_) | Event::NeighborResolved(_) | Event::NeighborFailed(_) => false,
        };
        assert!(!ea.iter().any(names_c), "{imp:?}: {ea:?}");
        assert!(eb.contains(&Event::Reset(s)), "{imp:?}: {eb:?}");
    }
}

#[test]
fn table_limit_is_enforced() {
    for imp in [
        TcpImplementation::Warpcore,
        TcpImplementation::SmoltcpReference,
    ] {
        let (mut a, _b) = stacks_of(imp);
        let t = TcpTuning {
            rx_buffer: 1024,
            tx_buffer: 1024,
            ..TcpTuning::default()
        };
        for _ in 0..16 {
            a.connect((IP_B, 1), None, &t).expect("within the limit");
        }
        assert_eq!(
            a.connect((IP_B, 1), None, &t),
            Err(StackError::TableFull(16))
        );
        match imp {
            // smoltcp's backlog sockets are table entries.
            TcpImplementation::SmoltcpReference => {
                assert_eq!(a.listen(2, 1, &t), Err(StackError::TableFull(16)));
            }
            // Ours holds a listener outside the table; its half-open connections count.
            TcpImplementation::Warpcore => {
                assert!(a.listen(2, 1, &t).is_ok());
                assert_eq!(a.listen(2, 1, &t), Err(StackError::PortInUse(2)));
            }
        }
    }
}

/// Tuning that cannot work is refused with an error naming the field, by both
/// implementations, for connect and listen alike (GUIDE house rule: bad local input is never
/// silently clamped). Before, a zero send buffer became one octet (ours) or a socket that
/// never sent (smoltcp's), a zero receive buffer a window that admitted nothing, and a zero
/// timeout a connection that timed out at once.
#[test]
fn unworkable_tuning_is_refused_naming_the_field() {
    let d = TcpTuning::default();
    let bad = [
        ("rx_buffer", TcpTuning { rx_buffer: 0, ..d }),
        ("tx_buffer", TcpTuning { tx_buffer: 0, ..d }),
        (
            "rx_window_clamp",
            TcpTuning {
                rx_window_clamp: Some(0),
                ..d
            },
        ),
        (
            "timeout",
            TcpTuning {
                timeout: Some(Duration::ZERO),
                ..d
            },
        ),
        (
            "keep_alive",
            TcpTuning {
                keep_alive: Some(Duration::ZERO),
                ..d
            },
        ),
    ];
    for imp in [
        TcpImplementation::Warpcore,
        TcpImplementation::SmoltcpReference,
    ] {
        let (mut a, _b) = stacks_of(imp);
        assert_tuning_refused(&mut a, imp, &bad);
        // One octet each way, and no timeout or probes at all, are fine.
        let small = TcpTuning {
            rx_buffer: 1,
            tx_buffer: 1,
            timeout: None,
            keep_alive: None,
            ..d
        };
        a.connect((IP_B, 1), None, &small).expect("connect");
        a.listen(7, 1, &small).expect("listen");
    }
}

/// Each tuning of `bad` is refused by `connect` and `listen` with
/// `StackError::InvalidTuning` naming its field, and opens nothing.
fn assert_tuning_refused(
    a: &mut Stack<LinkEnd>,
    imp: TcpImplementation,
    bad: &[(&str, TcpTuning)],
) {
    for (field, t) in bad {
        match a.connect((IP_B, 1), None, t) {
            Err(StackError::InvalidTuning(f, _)) => assert_eq!(f, *field, "{imp:?}"),
            other => panic!("{imp:?}: connect with {t:?}: {other:?}"),
        }
        match a.listen(7, 1, t) {
            Err(StackError::InvalidTuning(f, _)) => assert_eq!(f, *field, "{imp:?}"),
            other => panic!("{imp:?}: listen with {t:?}: {other:?}"),
        }
        assert_eq!(a.live(), 0, "{imp:?}: nothing was opened");
    }
}

/// Tuning against the RFCs' bounds is refused naming the field, by both implementations:
/// an ACK delay of half a second or more (RFC 1122 4.2.3.2: less than 0.5 s, a MUST), also
/// when set on a live connection; a zero initial RTO (RFC 6298 5.5 doubles it on each
/// expiry: from zero it never backed off, the SYN went again at every poll and the
/// retries ran out at once); an RTO floor or initial RTO above the 60 s ceiling (RFC 6298
/// 2.5: the floor was silently lowered to it); and a zero FIN-WAIT-2 bound (reset the
/// moment our FIN was acknowledged). Before, every one of them was taken.
#[test]
fn rfc1122_4_2_3_2_and_rfc6298_tuning_out_of_bounds_is_refused_naming_the_field() {
    let d = TcpTuning::default();
    let bad = [
        (
            "ack_delay",
            TcpTuning {
                ack_delay: Some(Duration::from_millis(500)),
                ..d
            },
        ),
        (
            "rto_initial",
            TcpTuning {
                rto_initial: Duration::ZERO,
                ..d
            },
        ),
        (
            "rto_initial",
            TcpTuning {
                rto_initial: Duration::from_secs(61),
                ..d
            },
        ),
        (
            "rto_min",
            TcpTuning {
                rto_min: Duration::from_secs(61),
                ..d
            },
        ),
        (
            "fin_wait_2_timeout",
            TcpTuning {
                fin_wait_2_timeout: Some(Duration::ZERO),
                ..d
            },
        ),
    ];
    for imp in [
        TcpImplementation::Warpcore,
        TcpImplementation::SmoltcpReference,
    ] {
        let (mut a, _b) = stacks_of(imp);
        assert_tuning_refused(&mut a, imp, &bad);
        // The bounds themselves are fine.
        let edge = TcpTuning {
            ack_delay: Some(Duration::from_micros(499_999)),
            rto_initial: Duration::from_secs(60),
            rto_min: Duration::from_secs(60),
            fin_wait_2_timeout: Some(Duration::from_micros(1)),
            ..d
        };
        let id = a.connect((IP_B, 1), None, &edge).expect("connect");
        a.listen(7, 1, &edge).expect("listen");
        // A live connection's ACK delay is held to the same bound.
        assert_eq!(
            a.set_nagle_and_ack_delay(id, false, Some(Duration::from_secs(1))),
            Err(StackError::InvalidArgument(
                "ack_delay",
                "must be less than half a second (RFC 1122 4.2.3.2)"
            )),
            "{imp:?}"
        );
        a.set_nagle_and_ack_delay(id, false, Some(Duration::from_millis(200)))
            .expect("a delay below half a second");
    }
}

/// Local misuse: a handle of one stack used on another. Every stack numbered its slots and
/// generations from zero, so the first connection of stack A and the first of stack B had
/// equal handles, and a call with A's reached B's connection (a send queued A's octets on
/// B's peer, a release reset it). Both implementations now refuse another stack's
/// connection and listener handles as unknown.
#[test]
fn a_handle_of_another_stack_is_refused() {
    for imp in [
        TcpImplementation::Warpcore,
        TcpImplementation::SmoltcpReference,
    ] {
        let (mut a, _pa) = stacks_of(imp);
        let (mut c, _pc) = stacks_of(imp);
        let t = TcpTuning::default();
        let ca = a.connect((IP_B, 9), None, &t).expect("connect on a");
        let cc = c.connect((IP_B, 9), None, &t).expect("connect on c");
        let la = a.listen(7, 1, &t).expect("listen on a");
        let lc = c.listen(7, 1, &t).expect("listen on c");
        assert_eq!(ca.slot(), cc.slot(), "{imp:?}: the same slot in each stack");
        assert_ne!(ca, cc, "{imp:?}: handles of two stacks differ");
        assert_ne!(la, lc, "{imp:?}: listener handles of two stacks differ");
        assert_eq!(c.state(ca), Err(StackError::UnknownConnection), "{imp:?}");
        assert_eq!(
            c.send(ca, b"x"),
            Err(StackError::UnknownConnection),
            "{imp:?}"
        );
        assert_eq!(c.close(ca), Err(StackError::UnknownConnection), "{imp:?}");
        assert_eq!(c.release(ca), Err(StackError::UnknownConnection), "{imp:?}");
        assert_eq!(c.accept(la), Err(StackError::UnknownListener), "{imp:?}");
        assert_eq!(c.unlisten(la), Err(StackError::UnknownListener), "{imp:?}");
        // Each stack's own handles still work, and c's connection was not touched.
        assert_eq!(c.state(cc), Ok(State::SynSent), "{imp:?}");
        assert_eq!(c.send_queue(cc), Ok(0), "{imp:?}");
        assert_eq!(a.state(ca), Ok(State::SynSent), "{imp:?}");
        assert_eq!(c.accept(lc), Ok(None), "{imp:?}");
        a.unlisten(la).expect("a's own listener");
    }
}

/// An RTO floor above the initial RTO is refused by both implementations, naming both
/// fields: the RTO before the first RTT sample is `rto_initial` as given (RFC 6298 2.1),
/// and the floor only applied to RTOs computed from samples (RFC 6298 2.4), so the SYN's
/// first timeout fired below the floor the user asked for. Before, it was taken. Equal
/// values are fine.
#[test]
fn rfc6298_2_1_rto_min_above_rto_initial_is_refused_naming_both_fields() {
    let t = TcpTuning {
        rto_min: Duration::from_millis(300),
        rto_initial: Duration::from_millis(200),
        ..TcpTuning::default()
    };
    for imp in [
        TcpImplementation::Warpcore,
        TcpImplementation::SmoltcpReference,
    ] {
        let (mut a, _b) = stacks_of(imp);
        for what in ["connect", "listen"] {
            let got = match what {
                "connect" => a.connect((IP_B, 1), None, &t).map(drop),
                _ => a.listen(7, 1, &t).map(drop),
            };
            let Err(e @ StackError::InvalidTuning("rto_min", why)) = got else {
                panic!("{imp:?}: {what} with {t:?}: {got:?}");
            };
            assert!(why.contains("rto_initial"), "{imp:?}: {e}");
            assert!(e.to_string().contains("rto_min"), "{imp:?}: {e}");
        }
        assert_eq!(a.live(), 0, "{imp:?}: nothing was opened");
        let equal = TcpTuning {
            rto_initial: t.rto_min,
            ..t
        };
        a.connect((IP_B, 1), None, &equal)
            .expect("rto_min == rto_initial");
        a.listen(7, 1, &equal).expect("rto_min == rto_initial");
    }
}

/// A backlog larger than the table is refused by smoltcp's reference (its backlog sockets
/// are table entries), not an overflow panic, and bounded by the table in ours.
#[test]
fn a_backlog_beyond_the_table_is_refused_or_bounded_without_panic() {
    for imp in [
        TcpImplementation::Warpcore,
        TcpImplementation::SmoltcpReference,
    ] {
        let (_a, mut b) = stacks_of(imp);
        let t = TcpTuning {
            rx_buffer: 1024,
            tx_buffer: 1024,
            ..TcpTuning::default()
        };
        // One entry taken: the table's count plus the backlog must not wrap.
        b.connect((IP_A, 1), None, &t).expect("connect");
        let r = b.listen(5000, usize::MAX, &t);
        match imp {
            TcpImplementation::SmoltcpReference => {
                assert_eq!(r, Err(StackError::TableFull(16)));
                assert_eq!(b.live(), 1);
            }
            TcpImplementation::Warpcore => {
                r.expect("ours holds its half-open connections in the table as they come");
            }
        }
    }
}

/// A device whose IP MTU is below 576 octets, the least every IPv4 host takes (RFC 1122
/// 3.3.2), is refused by ours, naming the device: before, the MSS was raised to 536, so the
/// stack advertised segments its device could not receive and sent frames longer than its
/// MTU. At 576 the MSS is 536 (RFC 9293 3.7.1: the MTU less 40).
#[test]
fn a_device_below_the_ipv4_minimum_mtu_is_refused() {
    let (ea, _eb) = link::pair(&LinkConfig {
        mtu: 500,
        ..LinkConfig::default()
    });
    match Stack::new(ea, &config(1, IP_A), Instant::ZERO) {
        Err(StackError::InvalidArgument(name, _)) => assert_eq!(name, "device"),
        other => panic!("{:?}", other.map(|_| "a stack")),
    }
    let (ea, eb) = link::pair(&LinkConfig {
        mtu: 576,
        ..LinkConfig::default()
    });
    let mut a = Stack::new(ea, &config(1, IP_A), Instant::ZERO).expect("a");
    let mut b = Stack::new(eb, &config(2, IP_B), Instant::ZERO).expect("b");
    let t = TcpTuning::default();
    let l = b.listen(9004, 1, &t).expect("listen");
    let c = a.connect((IP_B, 9004), None, &t).expect("connect");
    let mut now = Instant::ZERO;
    run(&mut a, &mut b, &mut now, 5);
    let s = b.accept(l).expect("accept").expect("connection");
    // The MSS less the timestamp option.
    assert_eq!(a.max_record_payload(c), Ok(Some(536 - 12)));
    assert_eq!(b.max_record_payload(s), Ok(Some(536 - 12)));
}

/// A backlog of no handshakes is refused by both implementations, naming the argument,
/// and binds nothing (house rule: bad local input is never silently clamped). Before, both
/// made it one.
#[test]
fn a_zero_backlog_is_refused_naming_it() {
    for imp in [
        TcpImplementation::Warpcore,
        TcpImplementation::SmoltcpReference,
    ] {
        let (_a, mut b) = stacks_of(imp);
        let t = TcpTuning::default();
        match b.listen(5000, 0, &t) {
            Err(StackError::InvalidArgument(name, _)) => assert_eq!(name, "backlog"),
            other => panic!("{imp:?}: {other:?}"),
        }
        assert_eq!(b.live(), 0, "{imp:?}");
        b.listen(5000, 1, &t).expect("the port is still free");
    }
}

/// A `StackConfig` no stack can work with is refused by `Stack::new`, naming the field:
/// before, a group MAC (peers, ours included, drop frames from group sources), an
/// interface address that is unspecified, multicast, broadcast or its subnet's broadcast,
/// or a next hop off the subnet (never answers ARP) made a stack that came up and stayed
/// silent, and a table of no connections one that refused every connection and SYN.
#[test]
fn unworkable_stack_config_is_refused_naming_the_field() {
    use smoltcp::wire::{Ipv4Address, Ipv4Cidr};
    let good = config(1, IP_A);
    let net = |a, b, c, d| Ipv4Address::new(a, b, c, d);
    let bad: Vec<(&str, StackConfig)> = vec![
        (
            "mac",
            StackConfig {
                mac: [0xff; 6],
                ..good.clone()
            },
        ),
        (
            "mac",
            StackConfig {
                mac: [0x01, 0, 0x5e, 0, 0, 1],
                ..good.clone()
            },
        ),
        (
            "ip",
            StackConfig {
                ip: Ipv4Cidr::new(net(0, 0, 0, 0), 24),
                ..good.clone()
            },
        ),
        (
            "ip",
            StackConfig {
                ip: Ipv4Cidr::new(net(0, 1, 2, 3), 8),
                ..good.clone()
            },
        ),
        (
            "ip",
            StackConfig {
                ip: Ipv4Cidr::new(net(127, 0, 0, 1), 8),
                ..good.clone()
            },
        ),
        (
            "ip",
            StackConfig {
                ip: Ipv4Cidr::new(net(224, 0, 0, 1), 24),
                ..good.clone()
            },
        ),
        (
            "ip",
            StackConfig {
                ip: Ipv4Cidr::new(net(255, 255, 255, 255), 24),
                ..good.clone()
            },
        ),
        (
            "ip",
            StackConfig {
                ip: Ipv4Cidr::new(net(198, 18, 0, 255), 24),
                ..good.clone()
            },
        ),
        (
            "gateway",
            StackConfig {
                gateway: Some(net(10, 0, 0, 1)),
                ..good.clone()
            },
        ),
        (
            "gateway",
            StackConfig {
                gateway: Some(IP_A),
                ..good.clone()
            },
        ),
        (
            "gateway",
            StackConfig {
                gateway: Some(net(198, 18, 0, 255)),
                ..good.clone()
            },
        ),
        (
            "routes",
            StackConfig {
                routes: vec![(Ipv4Cidr::new(net(10, 1, 0, 0), 16), net(10, 0, 0, 1))],
                ..good.clone()
            },
        ),
        (
            "max_connections",
            StackConfig {
                max_connections: 0,
                ..good.clone()
            },
        ),
    ];
    for imp in [
        TcpImplementation::Warpcore,
        TcpImplementation::SmoltcpReference,
    ] {
        for (field, cfg) in &bad {
            let (ea, _eb) = link::pair(&LinkConfig::default());
            match Stack::with_implementation(ea, cfg, Instant::ZERO, imp) {
                Err(StackError::InvalidConfig(f, _)) => assert_eq!(f, *field, "{imp:?} {cfg:?}"),
                other => panic!("{imp:?}: {cfg:?}: {:?}", other.map(|_| "a stack")),
            }
        }
        // A gateway and a route through it on the subnet, a /32 of its own: fine.
        let (ea, _eb) = link::pair(&LinkConfig::default());
        let fine = StackConfig {
            gateway: Some(net(198, 18, 0, 254)),
            routes: vec![(Ipv4Cidr::new(net(10, 1, 0, 0), 16), net(198, 18, 0, 253))],
            ..good.clone()
        };
        Stack::with_implementation(ea, &fine, Instant::ZERO, imp).expect("on-link next hops");
        let (ea, _eb) = link::pair(&LinkConfig::default());
        let host = StackConfig {
            ip: Ipv4Cidr::new(IP_A, 32),
            ..good.clone()
        };
        Stack::with_implementation(ea, &host, Instant::ZERO, imp).expect("a /32");
        // A table without a bound to speak of: the stack comes up and connects (it sized
        // its timer wheel and, the reference, its preallocated tables from the bound, which
        // overflowed: a panic).
        let (ea, _eb) = link::pair(&LinkConfig::default());
        let unbounded = StackConfig {
            max_connections: usize::MAX,
            ..good.clone()
        };
        let mut s = Stack::with_implementation(ea, &unbounded, Instant::ZERO, imp)
            .expect("an unbounded table");
        s.connect((IP_B, 1), None, &TcpTuning::default())
            .expect("connect");
        // Any out-of-order budget is taken: none (nothing held out of order, every such
        // segment resent) and no bound but the windows.
        for budget in [0, usize::MAX] {
            let (ea, _eb) = link::pair(&LinkConfig::default());
            let cfg = StackConfig {
                out_of_order_budget_bytes: budget,
                ..good.clone()
            };
            Stack::with_implementation(ea, &cfg, Instant::ZERO, imp).expect("any budget");
        }
    }
}

/// Header prediction (`HostStats::rx_predicted`) takes an established connection's data
/// segments, and each goes to its own connection: here two connections whose ports are each
/// other's swapped (A's X is local 5000 to B's 5001, A's Y local 5001 to B's 5000), their
/// segments interleaved, so that a prediction reading the remembered connection's ports the
/// wrong way round would hand Y's data to X.
#[test]
fn header_prediction_hands_each_segment_to_its_own_connection() {
    let (mut a, mut b) = stacks();
    let t = TcpTuning::default();
    let la = a.listen(5001, 4, &t).expect("listen a");
    let lb = b.listen(5001, 4, &t).expect("listen b");
    let x = a.connect((IP_B, 5001), Some(5000), &t).expect("connect x");
    let y2 = b.connect((IP_A, 5001), Some(5000), &t).expect("connect y");
    let mut now = Instant::ZERO;
    run(&mut a, &mut b, &mut now, 5);
    let x2 = b.accept(lb).expect("accept").expect("x on b");
    let y = a.accept(la).expect("accept").expect("y on a");
    let ports = |a: &mut Stack<LinkEnd>, c| {
        let (l, r) = a.endpoints(c).expect("endpoints");
        (l.map(|e| e.port), r.map(|e| e.port))
    };
    assert_eq!(ports(&mut a, x), (Some(5000), Some(5001)));
    assert_eq!(ports(&mut a, y), (Some(5001), Some(5000)));
    let before = a.host_stats().expect("ours").rx_predicted;
    let (mut got_x, mut got_y) = (Vec::new(), Vec::new());
    for round in 0..20u8 {
        // Two segments on X (the second predicted), then one on Y while A remembers X.
        for (c, tag) in [(x2, b'x'), (x2, b'X'), (y2, b'y')] {
            assert_eq!(b.send(c, &[tag, round]), Ok(2));
            run(&mut a, &mut b, &mut now, 2);
        }
        let mut buf = [0u8; 64];
        while let Ok(n @ 1..) = a.recv(x, &mut buf) {
            got_x.extend_from_slice(&buf[..n]);
        }
        while let Ok(n @ 1..) = a.recv(y, &mut buf) {
            got_y.extend_from_slice(&buf[..n]);
        }
    }
    let want_x: Vec<u8> = (0..20u8).flat_map(|r| [b'x', r, b'X', r]).collect();
    let want_y: Vec<u8> = (0..20u8).flat_map(|r| [b'y', r]).collect();
    assert_eq!(got_x, want_x, "X's stream");
    assert_eq!(got_y, want_y, "Y's stream");
    let predicted = a.host_stats().expect("ours").rx_predicted - before;
    assert!(predicted >= 20, "{predicted} of 60 data segments predicted");
}

/// `a` listening on port 7000 with `tuning_a`, `b` connected to it with the default
/// tuning, the handshake run: both stacks, `a`'s accepted connection and `b`'s, and the
/// clock.
fn connected(tuning_a: &TcpTuning) -> (Stack<LinkEnd>, Stack<LinkEnd>, ConnId, ConnId, Instant) {
    let (mut a, mut b) = stacks();
    let l = a.listen(7000, 2, tuning_a).expect("listen");
    let c = b
        .connect((IP_A, 7000), None, &TcpTuning::default())
        .expect("connect");
    let mut now = Instant::ZERO;
    run(&mut a, &mut b, &mut now, 5);
    let s = a.accept(l).expect("accept").expect("accepted");
    (a, b, s, c, now)
}

/// A sum that never verifies: the true one plus one.
fn off_by_one(d: &[u8]) -> u64 {
    warpcore_tcp::csum::sum(d) + 1
}

/// `Stack::set_bulk_sum` is what received segments of 128 octets or more are verified with,
/// on the predicted path and the general one alike, and shorter ones are not: with a sum
/// that never verifies, a short segment still arrives, a long one is dropped (counted)
/// however often it is sent, and once the right sum is back its retransmission arrives.
#[test]
fn the_bulk_sum_set_on_the_host_verifies_long_segments() {
    let (mut a, mut b, s, c, mut now) = connected(&TcpTuning::default());
    a.set_bulk_sum(off_by_one);
    let mut buf = [0u8; 512];
    // 32 octets of header (timestamps) and 50 of payload: under 128, the host's own sum.
    assert_eq!(b.send(c, &[7u8; 50]), Ok(50));
    run(&mut a, &mut b, &mut now, 5);
    assert_eq!(a.recv(s, &mut buf), Ok(50), "a short segment arrives");
    let stats = |a: &mut Stack<LinkEnd>| a.host_stats().expect("ours");
    let (dropped, predicted) = (stats(&mut a).rx_dropped, stats(&mut a).rx_predicted);
    // 232 octets: the set sum, which fails; retransmissions over 200 ms fail as well.
    assert_eq!(b.send(c, &[9u8; 200]), Ok(200));
    run(&mut a, &mut b, &mut now, 2_000);
    assert_eq!(
        a.recv(s, &mut buf),
        Ok(0),
        "a long segment failing the set sum"
    );
    let after = stats(&mut a);
    assert!(
        after.rx_dropped >= dropped + 2,
        "the first send and a retransmission dropped: {} -> {}",
        dropped,
        after.rx_dropped
    );
    assert_eq!(
        after.rx_predicted, predicted,
        "the predicted path refused them too"
    );
    a.set_bulk_sum(warpcore_tcp::csum::bulk_sum);
    run(&mut a, &mut b, &mut now, 20_000);
    assert_eq!(
        a.recv(s, &mut buf),
        Ok(200),
        "the retransmission verifies now"
    );
}

/// FNV-1a of `d`: the digest of the payload-digest test (any function of the octets would
/// do; the host does not interpret it).
fn fnv(d: &[u8]) -> u32 {
    d.iter().fold(0x811c_9dc5u32, |h, &x| {
        (h ^ u32::from(x)).wrapping_mul(0x0100_0193)
    })
}

/// The true sum and [`fnv`].
fn sum_and_fnv(d: &[u8]) -> (u64, u32) {
    (warpcore_tcp::csum::sum(d), fnv(d))
}

/// A sum that never verifies, with [`fnv`].
fn wrong_sum_and_fnv(d: &[u8]) -> (u64, u32) {
    (warpcore_tcp::csum::sum(d) + 1, fnv(d))
}

/// `Stack::set_payload_digest`: a payload of `min` octets or more delivered whole, straight
/// from its frame, comes with the digest of exactly those octets; octets delivered from
/// the reassembly queue (out of order, duplicates trimmed) and shorter payloads come
/// without one. Over links that lose, duplicate, reorder and corrupt frames, the stream
/// arrives intact and both kinds of delivery occur.
#[test]
fn the_payload_digest_goes_with_whole_payloads_only() {
    const MIN: usize = 300;
    const TOTAL: u64 = 400_000;
    for seed in 1..=3u64 {
        let mut link = faulty_link(seed, 0.02);
        link.faults_ab.corrupt = 0.01;
        link.faults_ba.corrupt = 0.01;
        let (ea, eb) = link::pair(&link);
        let mut a = Stack::new(ea, &config(1, IP_A), Instant::ZERO).expect("a");
        let mut b = Stack::new(eb, &config(2, IP_B), Instant::ZERO).expect("b");
        a.set_payload_digest(Some((sum_and_fnv, MIN)));
        let t = TcpTuning::default();
        let l = a.listen(7000, 2, &t).expect("listen");
        let c = b.connect((IP_A, 7000), None, &t).expect("connect");
        let mut now = Instant::ZERO;
        let mut s = None;
        let (mut sent, mut got) = (0u64, 0u64);
        let (mut with, mut long_without, mut short) = (0u32, 0u32, 0u32);
        let mut chunk = 0usize;
        let limit = Instant::from_secs(60);
        while got < TOTAL {
            assert!(
                now < limit,
                "seed {seed}: {got} of {TOTAL} octets after 60 s"
            );
            a.poll_with_fill_pass(
                now,
                |_, data: &[u8], digest| {
                    for (i, &x) in data.iter().enumerate() {
                        assert_eq!(
                            x,
                            pattern(7, got + i as u64),
                            "seed {seed}: octet {got}+{i}"
                        );
                    }
                    got += data.len() as u64;
                    match digest {
                        Some(d) => {
                            assert!(data.len() >= MIN, "a digest for {} octets", data.len());
                            assert_eq!(d, fnv(data), "seed {seed}: the digest of other octets");
                            with += 1;
                        }
                        None if data.len() >= MIN => long_without += 1,
                        None => short += 1,
                    }
                    data.len()
                },
                || |_, _, _, _: &mut [u8], _| None,
            );
            b.poll(now);
            while let Some(e) = a.next_event() {
                if let Event::Acceptable(_) = e {
                    s = a.accept(l).expect("accept").or(s);
                }
            }
            while b.next_event().is_some() {}
            if s.is_some() && sent < TOTAL {
                // Writes of 40 to 2,400 octets, so that segments of every size occur.
                let n = (40 + (chunk * 997) % 2_360).min((TOTAL - sent) as usize);
                let buf: Vec<u8> = (0..n as u64).map(|i| pattern(7, sent + i)).collect();
                let took = b.send(c, &buf).unwrap_or(0);
                if took > 0 {
                    chunk += 1;
                }
                sent += took as u64;
            }
            now += Duration::from_micros(20);
        }
        assert!(
            with > 10,
            "seed {seed}: {with} whole payloads with their digest"
        );
        assert!(
            long_without > 0,
            "seed {seed}: no reassembled octets went without one"
        );
        assert!(short > 0, "seed {seed}: no payload under {MIN} octets");
    }
}

/// The sum a payload digest returns is what verifies a predicted segment it digests: with
/// a sum that never verifies, a payload under the digest's minimum is predicted, a longer
/// one is not and goes to the general path, which verifies it with the bulk sum (it
/// arrives); with that failing too, it is dropped.
#[test]
fn the_payload_digests_sum_verifies_the_predicted_segment() {
    let (mut a, mut b, s, c, mut now) = connected(&TcpTuning::default());
    a.set_payload_digest(Some((wrong_sum_and_fnv, 100)));
    let predicted = |a: &mut Stack<LinkEnd>| a.host_stats().expect("ours").rx_predicted;
    let mut buf = [0u8; 512];
    let before = predicted(&mut a);
    assert_eq!(b.send(c, &[7u8; 50]), Ok(50));
    run(&mut a, &mut b, &mut now, 5);
    assert_eq!(a.recv(s, &mut buf), Ok(50), "a short payload arrives");
    assert_eq!(
        predicted(&mut a),
        before + 1,
        "a short payload is predicted"
    );
    assert_eq!(b.send(c, &[9u8; 200]), Ok(200));
    run(&mut a, &mut b, &mut now, 5);
    assert_eq!(
        a.recv(s, &mut buf),
        Ok(200),
        "the general path's sum verifies it"
    );
    assert_eq!(
        predicted(&mut a),
        before + 1,
        "a payload failing the digest's sum"
    );
    a.set_bulk_sum(off_by_one);
    assert_eq!(b.send(c, &[5u8; 200]), Ok(200));
    run(&mut a, &mut b, &mut now, 2_000);
    assert_eq!(a.recv(s, &mut buf), Ok(0), "failing both sums");
    a.set_payload_digest(Some((sum_and_fnv, 100)));
    run(&mut a, &mut b, &mut now, 20_000);
    assert_eq!(
        a.recv(s, &mut buf),
        Ok(200),
        "its retransmission verifies now"
    );
    assert!(predicted(&mut a) > before + 1, "and is predicted");
}

/// The frames waiting on the link for `a`, copied: taken off and sent again from `b`'s
/// end, in the same order, so that `a` still receives them.
fn frames_for(a: &mut Stack<LinkEnd>, b: &mut Stack<LinkEnd>, now: Instant) -> Vec<Vec<u8>> {
    use smoltcp::phy::{Device, RxToken, TxToken};
    let mut got = Vec::new();
    while let Some((rx, _)) = a.device_mut().receive(now) {
        got.push(rx.consume(|f| f.to_vec()));
    }
    for f in &got {
        let tx = b.device_mut().transmit(now).expect("room on the link");
        tx.consume(f.len(), |buf| buf.copy_from_slice(f));
    }
    got
}

/// `frame` (Ethernet, IPv4, TCP) with the sequence number `seq` and `payload` in place of
/// its own, both checksums right, every other field as it was.
fn reframe(frame: &[u8], seq: smoltcp::wire::TcpSeqNumber, payload: &[u8]) -> Vec<u8> {
    use smoltcp::phy::ChecksumCapabilities;
    use smoltcp::wire::{
        EthernetFrame, EthernetRepr, IpAddress, Ipv4Packet, Ipv4Repr, TcpPacket, TcpRepr,
    };
    let caps = ChecksumCapabilities::default();
    let eth = EthernetFrame::new_checked(frame).expect("Ethernet");
    let eth_repr = EthernetRepr::parse(&eth).expect("Ethernet");
    let ip = Ipv4Packet::new_checked(eth.payload()).expect("IPv4");
    let ip_repr = Ipv4Repr::parse(&ip, &caps).expect("IPv4");
    let (src, dst) = (
        IpAddress::Ipv4(ip_repr.src_addr),
        IpAddress::Ipv4(ip_repr.dst_addr),
    );
    let tcp = TcpPacket::new_checked(ip.payload()).expect("TCP");
    let mut t = TcpRepr::parse(&tcp, &src, &dst, &caps).expect("TCP");
    t.seq_number = seq;
    t.payload = payload;
    let ip_out = Ipv4Repr {
        payload_len: t.buffer_len(),
        ..ip_repr
    };
    let mut out = vec![0u8; 14 + ip_out.buffer_len() + t.buffer_len()];
    let mut e = EthernetFrame::new_unchecked(&mut out[..]);
    eth_repr.emit(&mut e);
    let mut i = Ipv4Packet::new_unchecked(e.payload_mut());
    ip_out.emit(&mut i, &caps);
    t.emit(
        &mut TcpPacket::new_unchecked(i.payload_mut()),
        &src,
        &dst,
        &caps,
    );
    out
}

/// A payload cut before delivery gets no digest, even where the cut keeps its start (the
/// digest covers the whole payload): segments made from a captured one and sent to the
/// receiver's host, all taking the predicted path. Whole, at the next expected octet: the
/// digest. Overlapping what was received (the front cut off): none. Longer than the window
/// (the tail cut off, same start): none.
#[test]
fn a_payload_cut_before_delivery_gets_no_digest() {
    use smoltcp::phy::TxToken;
    let ta = TcpTuning {
        rx_buffer: 1_000,
        ..TcpTuning::default()
    };
    let (mut a, mut b, _s, c, now) = connected(&ta);
    a.set_payload_digest(Some((sum_and_fnv, 100)));
    let mut got: Vec<(Vec<u8>, Option<u32>)> = Vec::new();
    let mut poll_a = |a: &mut Stack<LinkEnd>, now| {
        a.poll_with_fill_pass(
            now,
            |_, data: &[u8], digest| {
                got.push((data.to_vec(), digest));
                data.len()
            },
            || |_, _, _, _: &mut [u8], _| None,
        );
    };
    let first: Vec<u8> = (0..300u64).map(|i| pattern(3, i)).collect();
    assert_eq!(b.send(c, &first), Ok(300));
    b.poll(now);
    let frames = frames_for(&mut a, &mut b, now);
    let data_frame = frames
        .iter()
        .find(|f| f.len() > 300)
        .expect("the 300-octet segment")
        .clone();
    poll_a(&mut a, now);
    let seq0 = {
        let t = &data_frame[14 + 20..];
        smoltcp::wire::TcpSeqNumber(i32::from_be_bytes([t[4], t[5], t[6], t[7]]))
    };
    let inject = |b: &mut Stack<LinkEnd>, frame: Vec<u8>, now| {
        use smoltcp::phy::Device;
        let tx = b.device_mut().transmit(now).expect("room on the link");
        tx.consume(frame.len(), |buf| buf.copy_from_slice(&frame));
    };
    let predicted = |a: &Stack<LinkEnd>| a.host_stats().expect("ours").rx_predicted;
    // Whole, next in order: [300, 600).
    let whole: Vec<u8> = (0..300u16).map(|i| (i as u8) ^ 0x5a).collect();
    let before = predicted(&a);
    inject(&mut b, reframe(&data_frame, seq0 + 300, &whole), now);
    poll_a(&mut a, now);
    // Overlapping: [500, 800), the first 100 octets received already.
    let overlap: Vec<u8> = (0..300u16).map(|i| (i % 251) as u8).collect();
    inject(&mut b, reframe(&data_frame, seq0 + 500, &overlap), now);
    poll_a(&mut a, now);
    // Past the window: [800, 2000) against a window of 1,000.
    let long: Vec<u8> = (0..1_200u16).map(|i| (i % 241) as u8).collect();
    inject(&mut b, reframe(&data_frame, seq0 + 800, &long), now);
    poll_a(&mut a, now);
    assert_eq!(
        predicted(&a),
        before + 3,
        "all three took the predicted path"
    );
    let seen: Vec<(usize, Option<u32>)> = got.iter().map(|g| (g.0.len(), g.1)).collect();
    let want = [
        (300, Some(fnv(&first))),
        (300, Some(fnv(&whole))),
        (200, None),
        (1_000, None),
    ];
    assert_eq!(
        seen, want,
        "(length, digest): the captured segment and a payload whole, then the front and \
         the tail cut off"
    );
    assert!(
        got[0].0 == first && got[1].0 == whole,
        "the whole payloads' octets"
    );
    assert!(
        got[2].0 == overlap[100..] && got[3].0 == long[..1_000],
        "the cut payloads' octets"
    );
}

/// Listen/unlisten churn (a server that opens and closes listening endpoints, as
/// libfabric's passive endpoints do) reuses the listener's table entry instead of growing
/// the table by one entry a listen; a handle of a listener gone stays stale even once its
/// entry serves another.
#[test]
fn unlisten_frees_the_listener_entry_and_its_handle_goes_stale() {
    let (mut a, mut b) = stacks();
    let t = TcpTuning::default();
    let mut now = Instant::ZERO;
    let first = b.listen(9200, 4, &t).expect("listen");
    b.unlisten(first).expect("unlisten");
    for i in 0..1_000u16 {
        let l = b.listen(9200 + i % 7, 4, &t).expect("listen again");
        b.unlisten(l).expect("unlisten again");
    }
    assert_eq!(b.listener_entries(), 1);
    let l = b.listen(9200, 4, &t).expect("listen");
    assert_eq!(b.accept(first), Err(StackError::UnknownListener));
    assert_eq!(b.unlisten(first), Err(StackError::UnknownListener));
    // The new listener works.
    let c = a.connect((IP_B, 9200), None, &t).expect("connect");
    let (ea, eb) = run(&mut a, &mut b, &mut now, 5);
    assert!(ea.contains(&Event::Connected(c)), "{ea:?}");
    assert!(eb.contains(&Event::Acceptable(l)), "{eb:?}");
    assert!(b.accept(l).expect("accept").is_some());
}

/// A connection established on a listener but never accepted when the listener goes has
/// no owner: it is reset (the peer learns at once, as from Linux closing a listening
/// socket with connections in its accept queue) and freed, in both implementations; a
/// SYN to the port afterwards draws a RST.
#[test]
fn unlisten_resets_the_connections_nobody_accepted() {
    for imp in [
        TcpImplementation::Warpcore,
        TcpImplementation::SmoltcpReference,
    ] {
        let (mut a, mut b) = stacks_of(imp);
        let t = TcpTuning::default();
        let mut now = Instant::ZERO;
        let l = b.listen(9300, 2, &t).expect("listen");
        let c = a.connect((IP_B, 9300), None, &t).expect("connect");
        let (ea, eb) = run(&mut a, &mut b, &mut now, 5);
        assert!(ea.contains(&Event::Connected(c)), "{imp:?}: {ea:?}");
        assert!(eb.contains(&Event::Acceptable(l)), "{imp:?}: {eb:?}");
        assert!(b.live() > 0);
        b.unlisten(l).expect("unlisten");
        // The unaccepted connection is freed (and the reference's backlog sockets).
        assert_eq!(b.live(), 0, "{imp:?}");
        let (ea, _) = run(&mut a, &mut b, &mut now, 5);
        assert!(ea.contains(&Event::Reset(c)), "{imp:?}: {ea:?}");
        let c2 = a.connect((IP_B, 9300), None, &t).expect("connect again");
        let (ea, _) = run(&mut a, &mut b, &mut now, 5);
        assert!(ea.contains(&Event::Reset(c2)), "{imp:?}: {ea:?}");
    }
}

/// Polls `a` alone every 10 ms from `now` until `until`, collecting its events.
fn run_alone(a: &mut Stack<LinkEnd>, now: &mut Instant, until: Instant) -> Vec<(Instant, Event)> {
    let mut out = Vec::new();
    while *now < until {
        a.poll(*now);
        out.extend(std::iter::from_fn(|| a.next_event()).map(|e| (*now, e)));
        *now += Duration::from_millis(10);
    }
    out
}

/// ARP requests (EtherType 0x0806) among `frames`.
fn arp_requests(frames: &[Vec<u8>]) -> usize {
    frames
        .iter()
        .filter(|f| f.len() >= 14 && f[12..14] == [0x08, 0x06])
        .count()
}

/// A resolution asked for an address whose host never answers ARP fails once its timeout
/// has passed, not before, after requests repeated at the neighbour table's interval
/// (rdma_resolve_addr's ADDR_ERROR, drivers/infiniband/core/addr.c); `poll_at` names the
/// instants it needs. (The interval is 1 s, RFC 1122 2.3.2.1's bound: the timeout was
/// 500 ms with five requests at the former 100 ms; 2.5 s now sees three.)
#[test]
fn a_resolution_nobody_answers_fails_at_its_timeout() {
    let (ea, mut silent) = link::pair(&LinkConfig::default());
    let mut a = Stack::new(ea, &config(1, IP_A), Instant::ZERO).expect("a");
    let absent = smoltcp::wire::Ipv4Address::new(198, 18, 0, 77);
    let mut now = Instant::ZERO;
    let r = a
        .resolve_neighbor(absent, Duration::from_millis(2500), now)
        .expect("resolve");
    assert!(a
        .poll_at(now)
        .is_some_and(|t| t <= now + Duration::from_secs(1)));
    let events = run_alone(&mut a, &mut now, Instant::from_millis(3000));
    assert_eq!(
        events.iter().map(|e| e.1).collect::<Vec<_>>(),
        vec![Event::NeighborFailed(r)],
        "{events:?}"
    );
    let at = events[0].0;
    assert!(
        at >= Instant::from_millis(2500) && at < Instant::from_millis(2520),
        "failed at {at}"
    );
    let frames = {
        use smoltcp::phy::{Device, RxToken};
        std::iter::from_fn(|| {
            silent
                .receive(now)
                .map(|(rx, _)| rx.consume(|f| f.to_vec()))
        })
        .collect::<Vec<_>>()
    };
    let n = arp_requests(&frames);
    assert_eq!(n, 3, "{n} ARP requests in 2.5 s (at 0, 1 and 2 s)");
    // Nothing pending any more: no poll wanted.
    assert_eq!(a.poll_at(now), None);
}

/// A resolution whose timeout is past the end of the clock (`Duration::MAX`, or one near
/// `i64::MAX` microseconds) waits as one of a day would (`TIMER_MAX`): its deadline was
/// `now` plus the timeout, which wrapped smoltcp's `Instant` into the past (the failure
/// at the first poll; a panic in a debug build).
#[test]
fn a_resolution_with_an_endless_timeout_waits_rather_than_failing_at_once() {
    for timeout in [
        Duration::from_micros(u64::MAX),
        Duration::from_micros(i64::MAX as u64 - 10),
    ] {
        let (ea, _silent) = link::pair(&LinkConfig::default());
        let mut a = Stack::new(ea, &config(1, IP_A), Instant::from_secs(5)).expect("a");
        let absent = smoltcp::wire::Ipv4Address::new(198, 18, 0, 77);
        let mut now = Instant::from_secs(5);
        a.resolve_neighbor(absent, timeout, now).expect("resolve");
        let events = run_alone(&mut a, &mut now, Instant::from_millis(6000));
        assert!(events.is_empty(), "{timeout}: {events:?}");
        assert!(
            a.poll_at(now).is_some(),
            "{timeout}: still resolving (ARP repeats)"
        );
    }
}

/// Timers and buffers past what a connection can use are refused, naming the field, by
/// both implementations: a timer longer than a day (`TIMER_MAX`: `now` plus one near
/// `u64::MAX` microseconds wrapped the TCP's clock into the past, so a keep-alive went out
/// at every poll and TIME-WAIT ended at once) and a buffer above 1 GiB (`BUFFER_MAX`,
/// TCP's largest window; the smoltcp reference allocated it whole and aborted).
#[test]
fn tuning_past_a_day_or_a_gibibyte_is_refused_naming_the_field() {
    let d = TcpTuning::default();
    let long = Duration::from_micros(u64::MAX);
    let bad = [
        (
            "time_wait",
            TcpTuning {
                time_wait: long,
                ..d
            },
        ),
        (
            "keep_alive",
            TcpTuning {
                keep_alive: Some(long),
                timeout: None,
                ..d
            },
        ),
        (
            "timeout",
            TcpTuning {
                timeout: Some(long),
                keep_alive: Some(Duration::from_secs(1)),
                ..d
            },
        ),
        (
            "fin_wait_2_timeout",
            TcpTuning {
                fin_wait_2_timeout: Some(long),
                ..d
            },
        ),
        (
            "oow_ack_interval",
            TcpTuning {
                oow_ack_interval: long,
                ..d
            },
        ),
        (
            "rx_buffer",
            TcpTuning {
                rx_buffer: warpcore_tcp::BUFFER_MAX + 1,
                ..d
            },
        ),
        (
            "tx_buffer",
            TcpTuning {
                tx_buffer: 1 << 40,
                ..d
            },
        ),
    ];
    for imp in [
        TcpImplementation::Warpcore,
        TcpImplementation::SmoltcpReference,
    ] {
        let (mut a, _b) = stacks_of(imp);
        assert_tuning_refused(&mut a, imp, &bad);
        let edge = TcpTuning {
            time_wait: warpcore_tcp::TIMER_MAX,
            oow_ack_interval: warpcore_tcp::TIMER_MAX,
            fin_wait_2_timeout: Some(warpcore_tcp::TIMER_MAX),
            ..d
        };
        a.connect((IP_B, 1), None, &edge)
            .expect("connect at the bounds");
    }
}

/// A resolution of a host that answers ARP reports it resolved; a second one, of the
/// address now known, at once (without a request); an address off every route is refused.
#[test]
fn a_resolution_of_a_live_host_reports_it_resolved() {
    let (mut a, mut b) = stacks();
    let mut now = Instant::ZERO;
    let r = a
        .resolve_neighbor(IP_B, Duration::from_secs(3), now)
        .expect("resolve");
    let (ea, _) = run(&mut a, &mut b, &mut now, 5);
    assert_eq!(ea, vec![Event::NeighborResolved(r)]);
    let r2 = a
        .resolve_neighbor(IP_B, Duration::from_millis(1), now)
        .expect("resolve again");
    assert_ne!(r, r2);
    assert_eq!(a.next_event(), Some(Event::NeighborResolved(r2)));
    let far = smoltcp::wire::Ipv4Address::new(203, 0, 113, 9);
    assert_eq!(
        a.resolve_neighbor(far, Duration::from_secs(1), now),
        Err(StackError::NoRoute(far))
    );
    assert_eq!(
        a.resolve_neighbor(IP_A, Duration::from_secs(1), now),
        Err(StackError::Unaddressable(IP_A))
    );
}

/// The smoltcp reference has no way to resolve on request: refused, named.
#[test]
fn the_reference_refuses_a_resolution() {
    let (mut a, _b) = stacks_of(TcpImplementation::SmoltcpReference);
    assert!(matches!(
        a.resolve_neighbor(IP_B, Duration::from_secs(1), Instant::ZERO),
        Err(StackError::Unsupported(_))
    ));
}

/// Many resolutions of one address (`ucmatose -c 300` starts 300 before it reads an event)
/// share its ARP requests, one per retry interval, not one each; beyond
/// `RESOLVE_MAX` pending a resolution is refused, named.
#[test]
fn resolutions_of_one_address_share_its_requests_and_are_bounded() {
    use warpcore_tcp::host::RESOLVE_MAX;
    let (ea, mut silent) = link::pair(&LinkConfig::default());
    let mut a = Stack::new(ea, &config(1, IP_A), Instant::ZERO).expect("a");
    let absent = smoltcp::wire::Ipv4Address::new(198, 18, 0, 77);
    let now = Instant::ZERO;
    for _ in 0..RESOLVE_MAX {
        a.resolve_neighbor(absent, Duration::from_secs(1), now)
            .expect("resolve");
    }
    assert_eq!(
        a.resolve_neighbor(absent, Duration::from_secs(1), now),
        Err(StackError::TooManyResolutions(RESOLVE_MAX))
    );
    a.poll(now);
    a.poll(now + Duration::from_millis(50));
    let frames = {
        use smoltcp::phy::{Device, RxToken};
        std::iter::from_fn(|| {
            silent
                .receive(now)
                .map(|(rx, _)| rx.consume(|f| f.to_vec()))
        })
        .collect::<Vec<_>>()
    };
    assert_eq!(
        arp_requests(&frames),
        1,
        "one request within the retry interval"
    );
}

/// RFC 6056 3.3.3 (Algorithm 3) and 2.2: the ephemeral port of a connection to one peer does
/// not give away the ports of connections to others. A global counter (the port after the
/// last connection's, whoever its peer) let any peer that saw one of our connections name
/// the port of the next one to anyone else, a blind attacker's missing piece of the
/// 4-tuple; each destination's ports now run from a secret offset of its own. Ports stay
/// in the ephemeral range, and a destination's next connection still takes a fresh port.
#[test]
fn rfc6056_3_3_3_ports_to_other_peers_do_not_follow_the_last_one() {
    let (mut a, _b) = stacks();
    let t = TcpTuning {
        rx_buffer: 1024,
        tx_buffer: 1024,
        ..TcpTuning::default()
    };
    let local_port = |a: &mut Stack<LinkEnd>, remote: (smoltcp::wire::Ipv4Address, u16)| {
        let c = a.connect(remote, None, &t).expect("connect");
        let (local, _) = a.endpoints(c).expect("endpoints");
        let p = local.expect("local").port;
        assert!(p >= 49152, "port {p} outside the ephemeral range");
        p
    };
    let peers: Vec<_> = (0..8u8)
        .map(|k| {
            (
                smoltcp::wire::Ipv4Address::new(198, 18, 0, 10 + k),
                7000 + u16::from(k),
            )
        })
        .collect();
    let ports: Vec<u16> = peers.iter().map(|&r| local_port(&mut a, r)).collect();
    let followed = ports
        .windows(2)
        .filter(|w| w[1] == w[0].wrapping_add(1))
        .count();
    assert_eq!(
        followed, 0,
        "each port to a new peer is the last one's plus one: {ports:?}"
    );
    // The same destination again: a port of its own sequence, not the one in use.
    let again = local_port(&mut a, peers[0]);
    assert_ne!(again, ports[0]);
}

/// RFC 1122 3.2.1.3: a loopback address ({127, <any>}, (g): "MUST NOT appear outside a
/// host") and a "this network" one ({0, <host>}, (b): a source only) are no destination a
/// SYN or an ARP request may go to: a connect to either, or a resolution of it, is refused
/// at once ([`StackError::Unaddressable`]), as one to a broadcast or multicast address is,
/// not sent to the gateway to time out after the user timeout.
#[test]
fn rfc1122_3_2_1_3_a_connect_to_loopback_or_this_network_is_refused() {
    let (ea, _eb) = link::pair(&LinkConfig::default());
    let cfg = StackConfig {
        gateway: Some(smoltcp::wire::Ipv4Address::new(198, 18, 0, 254)),
        ..config(1, IP_A)
    };
    let mut a = Stack::new(ea, &cfg, Instant::ZERO).expect("stack");
    for ip in [
        smoltcp::wire::Ipv4Address::new(127, 0, 0, 1),
        smoltcp::wire::Ipv4Address::new(127, 1, 2, 3),
        smoltcp::wire::Ipv4Address::new(0, 1, 2, 3),
    ] {
        assert_eq!(
            a.connect((ip, 80), None, &TcpTuning::default()),
            Err(StackError::Unaddressable(ip)),
            "connect to {ip}"
        );
        assert_eq!(
            a.resolve_neighbor(ip, Duration::from_secs(1), Instant::ZERO)
                .map(drop),
            Err(StackError::Unaddressable(ip)),
            "resolution of {ip}"
        );
    }
    // An address off the subnet still goes through the gateway.
    let far = smoltcp::wire::Ipv4Address::new(203, 0, 113, 9);
    a.connect((far, 80), None, &TcpTuning::default())
        .expect("connect through the gateway");
}

/// A link's burst size is a count of frames (`LinkConfig::max_burst_size`) that smoltcp
/// multiplies by the MSS when the reference sends a segment: `usize::MAX` frames overflowed
/// there (a panic in a debug build; in a release one a wrapped product that could shrink
/// the window the reference offers). Refused as the link's other limits are, naming the
/// field, and the largest burst taken is the largest queue (`QUEUE_FRAMES_MAX`): a burst
/// longer than a direction holds means nothing more.
#[test]
fn a_link_burst_beyond_the_queue_is_refused_not_overflowed() {
    for burst in [link::QUEUE_FRAMES_MAX + 1, usize::MAX / 1000, usize::MAX] {
        let cfg = LinkConfig {
            max_burst_size: burst,
            ..LinkConfig::default()
        };
        match link::try_pair(&cfg) {
            Err(link::LinkConfigError::Link(field, _)) => assert_eq!(field, "max_burst_size"),
            Err(e) => panic!("burst {burst}: {e}"),
            Ok((ea, eb)) => {
                // Accepted: it must work, over the reference that uses it.
                let imp = TcpImplementation::SmoltcpReference;
                let mut a = Stack::with_implementation(ea, &config(1, IP_A), Instant::ZERO, imp)
                    .expect("a");
                let mut b = Stack::with_implementation(eb, &config(2, IP_B), Instant::ZERO, imp)
                    .expect("b");
                let t = TcpTuning::default();
                let l = b.listen(9000, 1, &t).expect("listen");
                a.connect((IP_B, 9000), None, &t).expect("connect");
                let mut now = Instant::ZERO;
                run(&mut a, &mut b, &mut now, 5);
                assert!(b.accept(l).expect("accept").is_some(), "burst {burst}");
            }
        }
    }
    // The largest burst is taken.
    let cfg = LinkConfig {
        max_burst_size: link::QUEUE_FRAMES_MAX,
        ..LinkConfig::default()
    };
    assert!(link::try_pair(&cfg).is_ok());
}

/// The ARP requests among `frames` for `target`.
fn arp_requests_for(frames: &[Vec<u8>], target: smoltcp::wire::Ipv4Address) -> usize {
    frames
        .iter()
        .filter(|f| f.len() >= 42 && f[12..14] == [0x08, 0x06] && f[38..42] == target.octets())
        .count()
}

/// RFC 1122 2.3.2.1 (a mechanism to prevent ARP flooding MUST be included): a resolution
/// asks for its address once per retry interval, also while the neighbour table's list of
/// requests is full (4,096 outstanding: a burst of connects to new on-link peers, or the
/// SYN-ACKs of a SYN flood from sources the table could not glean) and so keeps no record
/// of its request. Its next retry was then "now": every poll sent another broadcast
/// request for it and `poll_at` asked for the next poll at once, a broadcast storm at the
/// poll loop's rate for as long as the list stayed full.
#[test]
fn a_resolution_repeats_its_request_at_the_retry_interval_when_the_requests_are_full() {
    const PEERS: u32 = 4096;
    let (ea, mut silent) = link::pair(&LinkConfig {
        queue_frames: 16_384,
        ..LinkConfig::default()
    });
    let cfg = StackConfig {
        ip: smoltcp::wire::Ipv4Cidr::new(IP_A, 16),
        max_connections: PEERS as usize + 8,
        ..config(1, IP_A)
    };
    let mut a = Stack::new(ea, &cfg, Instant::ZERO).expect("a");
    let mut now = Instant::ZERO;
    let drain = |silent: &mut LinkEnd, now: Instant| {
        use smoltcp::phy::{Device, RxToken};
        std::iter::from_fn(|| {
            silent
                .receive(now)
                .map(|(rx, _)| rx.consume(|f| f.to_vec()))
        })
        .collect::<Vec<_>>()
    };
    // Connections to 4,096 on-link peers nobody answers for: their requests fill the list.
    for k in 0..PEERS {
        let peer = smoltcp::wire::Ipv4Address::from(u32::from(IP_A) + 0x100 + k);
        a.connect((peer, 7000), None, &TcpTuning::default())
            .expect("connect");
    }
    a.poll(now);
    drain(&mut silent, now);
    let absent = smoltcp::wire::Ipv4Address::new(198, 18, 250, 77);
    a.resolve_neighbor(absent, Duration::from_secs(2), now)
        .expect("resolve");
    let mut frames = Vec::new();
    for _ in 0..50 {
        a.poll(now);
        frames.extend(drain(&mut silent, now));
        assert!(
            a.poll_at(now).is_some_and(|t| t > now),
            "the pending resolution asks for a poll at once ({now})"
        );
        now += Duration::from_millis(1);
    }
    let n = arp_requests_for(&frames, absent);
    assert_eq!(n, 1, "{n} ARP requests for one address in 50 ms");
    // Its retry comes (the table's 1 s interval, RFC 1122 2.3.2.1; 100 ms before): one
    // request more.
    now = Instant::from_secs(1);
    a.poll(now);
    let n = arp_requests_for(&drain(&mut silent, now), absent);
    assert_eq!(n, 1, "{n} ARP requests at the retry");
}
