//! The host's transmit pass over a device that refuses slots on demand: which connections ask
//! the device for a slot, and what counts as back-pressure.

mod common;

use common::*;
use smoltcp::phy::{Device, DeviceCapabilities};
use smoltcp::time::{Duration, Instant};
use warpcore_tcp::link::{self, Faults, LinkConfig, LinkEnd, LinkRxToken, LinkTxToken};
use warpcore_tcp::{ConnId, DeviceStats, Event, PollDevice, Stack, TcpTuning};

/// A link end whose transmit slots can be refused ("closed"), counting the slots asked for.
struct Gate {
    end: LinkEnd,
    open: bool,
    asked: u64,
}

impl Device for Gate {
    type RxToken<'a> = LinkRxToken<'a>;
    type TxToken<'a> = LinkTxToken<'a>;

    fn receive(&mut self, now: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        self.end.receive(now)
    }

    fn transmit(&mut self, now: Instant) -> Option<Self::TxToken<'_>> {
        self.asked += 1;
        if !self.open {
            return None;
        }
        self.end.transmit(now)
    }

    fn capabilities(&self) -> DeviceCapabilities {
        self.end.capabilities()
    }
}

impl PollDevice for Gate {
    fn stats(&self) -> DeviceStats {
        self.end.stats()
    }
}

type Pair = (Stack<Gate>, Stack<LinkEnd>, ConnId, ConnId, Instant);

/// `a` (over a [`Gate`]) connected to `b`, both with `tuning`; the connection's two ends.
fn connected(tuning: &TcpTuning) -> Pair {
    connected_over(&LinkConfig::default(), tuning, tuning)
}

/// [`connected`] over `link`, `a` with `ta` and `b` with `tb`.
fn connected_over(link: &LinkConfig, ta: &TcpTuning, tb: &TcpTuning) -> Pair {
    let (ea, eb) = link::pair(link);
    let gate = Gate {
        end: ea,
        open: true,
        asked: 0,
    };
    let mut a = Stack::new(gate, &config(1, IP_A), Instant::ZERO).expect("a");
    let mut b = Stack::new(eb, &config(2, IP_B), Instant::ZERO).expect("b");
    let l = b.listen(9000, 1, tb).expect("listen");
    let c = a.connect((IP_B, 9000), None, ta).expect("connect");
    let mut now = Instant::ZERO;
    for _ in 0..10 {
        a.poll(now);
        b.poll(now);
        now += Duration::from_micros(100);
    }
    let s = b.accept(l).expect("accept").expect("established");
    while a.next_event().is_some() {}
    while b.next_event().is_some() {}
    (a, b, c, s, now)
}

/// A connection marked for the transmit pass with nothing to send still asks the device
/// for a slot, and a refused one keeps it marked (counted as back-pressure, `poll_at` now):
/// whether that happens depends on the device, and it is on the wire (the next pass, an ACK
/// not deferred again). Skipping the slot of a quiet connection changed a bulk transfer's
/// frames over a link with a short queue. Then a connection with data is refused, counted,
/// and sends once the device takes frames again.
#[test]
fn a_quiet_connection_refused_a_slot_stays_marked() {
    let t = TcpTuning {
        ack_delay: Some(Duration::from_millis(100)),
        ..TcpTuning::default()
    };
    let (mut a, mut b, c, s, mut now) = connected(&t);
    assert_eq!(b.send(s, b"hello"), Ok(5));
    for _ in 0..3 {
        b.poll(now);
        a.poll(now);
        now += Duration::from_micros(100);
    }
    assert!(a.poll_at(now).is_some_and(|t| t > now), "a has nothing due");
    // The read marks the connection for the transmit pass; its ACK waits for the delay and
    // five octets open no window worth announcing: it has nothing to send.
    let mut buf = [0u8; 16];
    assert_eq!(a.recv(c, &mut buf), Ok(5));
    a.device_mut().open = false;
    a.device_mut().asked = 0;
    a.poll(now);
    assert_eq!(a.device().asked, 1, "the quiet connection asks for a slot");
    assert_eq!(a.host_stats().expect("host").tx_blocked, 1);
    assert_eq!(a.poll_at(now), Some(now), "refused: still marked");
    // Now something to send: refused and counted, then sent (with the delayed ACK).
    assert_eq!(a.send(c, b"world"), Ok(5));
    a.poll(now);
    assert_eq!(a.device().asked, 2);
    assert_eq!(a.host_stats().expect("host").tx_blocked, 2);
    a.device_mut().open = true;
    for _ in 0..3 {
        a.poll(now);
        b.poll(now);
        now += Duration::from_micros(100);
    }
    assert_eq!(b.recv(s, &mut buf), Ok(5));
    assert_eq!(&buf[..5], b"world");
    assert_eq!(a.host_stats().expect("host").tx_blocked, 2);
}

/// Segments `a` has sent so far.
fn sent(a: &Stack<Gate>) -> u64 {
    a.tcp_totals().expect("host").segments_sent
}

/// Polls `a` at its deadlines only, nothing else happening, until it sends: its delayed
/// ACK, which must leave at `due`, one segment more than `before`, and reach `b`, which
/// then has nothing unacknowledged on `s`. Returns the time it left.
fn delayed_ack_leaves_at(
    (a, b, s): (&mut Stack<Gate>, &mut Stack<LinkEnd>, ConnId),
    mut now: Instant,
    before: u64,
    due: Instant,
) -> Instant {
    let mut polls = 0;
    while sent(a) == before {
        polls += 1;
        assert!(polls < 100, "no ACK after {polls} polls");
        now = a.poll_at(now).expect("a deadline: the delayed ACK");
        a.poll(now);
    }
    assert_eq!(now, due, "the ACK left at {now}");
    assert_eq!(sent(a), before + 1);
    b.poll(now);
    assert_eq!(b.send_queue(s), Ok(0), "the ACK reached b");
    now
}

/// a sends "ping", b reads it and answers "pong" at once (its ACK of "ping" rides on
/// "pong"), which is then on its way to a.
fn ping_pong(a: &mut Stack<Gate>, b: &mut Stack<LinkEnd>, (c, s): (ConnId, ConnId), now: Instant) {
    assert_eq!(a.send(c, b"ping"), Ok(4));
    a.poll(now);
    b.poll(now);
    let mut buf = [0u8; 8];
    assert_eq!(b.recv(s, &mut buf), Ok(4));
    assert_eq!(b.send(s, b"pong"), Ok(4));
    b.poll(now);
}

/// [`connected`] with ACKs delayed by `delay`, both sides polled once 10 ms later: nothing
/// pending on either side (the handshake's timers are done with).
fn connected_quiet(delay: Duration) -> Pair {
    let t = TcpTuning {
        ack_delay: Some(delay),
        ..TcpTuning::default()
    };
    let (mut a, mut b, c, s, mut now) = connected(&t);
    now += Duration::from_millis(10);
    a.poll(now);
    b.poll(now);
    (a, b, c, s, now)
}

/// A received segment whose ACK the connection delays: the host defers it one poll, finds
/// nothing to send then, and the ACK still leaves when the delay ends, with nothing else
/// happening on the connection (polls at `poll_at` only).
#[test]
fn a_delayed_ack_leaves_when_its_delay_ends() {
    let delay = Duration::from_millis(1);
    let (mut a, mut b, _c, s, now) = connected_quiet(delay);
    assert_eq!(b.send(s, b"hi"), Ok(2));
    b.poll(now);
    let before = sent(&a);
    a.poll(now);
    delayed_ack_leaves_at((&mut a, &mut b, s), now, before, now + delay);
}

/// A connection whose deferred ACK found nothing to send is touched again before the next
/// pass (here a pure ACK of its own data arrives in the next poll's receive burst): that
/// pass takes its events (Writable) as any other.
#[test]
fn a_held_connection_marked_again_has_its_events_taken() {
    let latency = Duration::from_micros(100);
    let link = LinkConfig {
        faults_ab: Faults {
            latency,
            ..Faults::default()
        },
        faults_ba: Faults {
            latency,
            ..Faults::default()
        },
        ..LinkConfig::default()
    };
    let ta = TcpTuning {
        ack_delay: Some(Duration::from_millis(100)),
        ..TcpTuning::default()
    };
    let tb = TcpTuning {
        ack_delay: None,
        ..TcpTuning::default()
    };
    let (mut a, mut b, c, s, mut now) = connected_over(&link, &ta, &tb);
    now += Duration::from_millis(10);
    a.poll(now);
    b.poll(now);
    while a.next_event().is_some() {}
    // Both send at once; each segment arrives a latency later.
    assert_eq!(a.send(c, b"ping"), Ok(4));
    assert_eq!(b.send(s, b"pong"), Ok(4));
    a.poll(now);
    b.poll(now);
    now += latency;
    // a receives "pong": its ACK waits (deferred, then delayed), the read is reported.
    a.poll(now);
    let ev: Vec<Event> = std::iter::from_fn(|| a.next_event()).collect();
    assert_eq!(ev, vec![Event::Readable(c)]);
    // b acknowledges "ping" at once (its deferral, then a pure ACK).
    b.poll(now);
    b.poll(now);
    now += latency;
    // The next poll of a brings that ACK: Writable, from the pass that follows.
    a.poll(now);
    let ev: Vec<Event> = std::iter::from_fn(|| a.next_event()).collect();
    assert_eq!(ev, vec![Event::Writable(c)]);
    assert_eq!(a.send_queue(c), Ok(0));
}

/// A lone segment whose data the reader takes in place (`poll_with`, as the engine places
/// FPDUs) ends its poll at the burst: the transmit pass, which would only defer the ACK, is
/// skipped, and that is the deferral. Here "pong" also acknowledges a's "ping", so a's
/// Writable event, which that pass would have raised, comes with the next poll instead. A
/// reply written before the next poll carries the ACK (one segment, no pure ACK); without
/// one, the delayed ACK leaves when its delay ends, counted from the segment's arrival.
#[test]
fn a_segment_placed_in_place_ends_its_poll_and_the_reply_carries_the_ack() {
    let delay = Duration::from_millis(1);
    let (mut a, mut b, c, s, mut now) = connected_quiet(delay);
    while a.next_event().is_some() {}
    let mut got = Vec::new();
    let mut take = |_: ConnId, d: &[u8]| {
        got.extend_from_slice(d);
        d.len()
    };
    for round in 0..2 {
        ping_pong(&mut a, &mut b, (c, s), now);
        let mut buf = [0u8; 8];
        let before = sent(&a);
        let received = now;
        // a takes "pong" in place: nothing sent, no event yet.
        a.poll_with(now, &mut take);
        assert_eq!(sent(&a), before, "round {round}: the pass was not skipped");
        assert_eq!(
            a.next_event(),
            None,
            "round {round}: events before the next pass"
        );
        assert_eq!(a.poll_at(now), Some(now), "round {round}: still marked");
        if round == 0 {
            // A reply written now carries the ACK: one segment, and the Writable event.
            assert_eq!(a.send(c, b"more"), Ok(4));
            a.poll(now);
            assert_eq!(sent(&a), before + 1);
            assert_eq!(a.next_event(), Some(Event::Writable(c)));
            b.poll(now);
            assert_eq!(b.send_queue(s), Ok(0), "the reply acknowledged pong");
            assert_eq!(b.recv(s, &mut buf), Ok(4));
            assert_eq!(&buf[..4], b"more");
            // b's ACK of "more" (delayed) clears a's send queue.
            now += delay;
            b.poll(now);
            a.poll(now);
            while a.next_event().is_some() {}
            assert_eq!(a.send_queue(c), Ok(0));
        } else {
            // No reply: the next poll raises the event, the ACK leaves at its deadline.
            a.poll(now);
            assert_eq!(a.next_event(), Some(Event::Writable(c)));
            now = delayed_ack_leaves_at((&mut a, &mut b, s), now, before, received + delay);
        }
    }
    assert_eq!(got, b"pongpong");
    // Not taken in place (a plain poll queues it for the reader): no skip, the pass runs
    // and the events come with the receiving poll.
    ping_pong(&mut a, &mut b, (c, s), now);
    a.poll(now);
    let ev: Vec<Event> = std::iter::from_fn(|| a.next_event()).collect();
    assert_eq!(ev, vec![Event::Readable(c), Event::Writable(c)]);
}

/// An ACK already delayed when the delay is shortened on the live connection
/// ([`Stack::set_nagle_and_ack_delay`]) leaves when the new delay ends, not the old one
/// (RFC 1122 4.2.3.2: the delay bounds how long an ACK waits), and the host's next wakeup
/// says so; with the delay turned off, it leaves at the next poll.
#[test]
fn a_pending_delayed_ack_follows_a_shorter_or_no_delay() {
    for new in [Some(Duration::from_millis(1)), None] {
        let (mut a, mut b, c, s, now) = connected_quiet(Duration::from_millis(100));
        assert_eq!(b.send(s, b"hi"), Ok(2));
        b.poll(now);
        let before = sent(&a);
        a.poll(now);
        a.poll(now);
        assert_eq!(sent(&a), before, "the ACK is delayed");
        assert_eq!(a.set_nagle_and_ack_delay(c, false, new), Ok(()));
        let due = now + new.unwrap_or(Duration::ZERO);
        match new {
            Some(_) => assert!(
                a.poll_at(now).is_some_and(|t| t <= due),
                "{new:?}: a's next wakeup is by {due}: {:?}",
                a.poll_at(now)
            ),
            None => assert_eq!(a.poll_at(now), Some(now), "the ACK is due now"),
        }
        delayed_ack_leaves_at((&mut a, &mut b, s), now, before, due);
    }
}
