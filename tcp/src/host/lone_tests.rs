//! [`Host::send_lone_record`] held to the general path: two worlds run the same seeded
//! script (records both ways, polls that place data as the engine does, reads, time, lost
//! and reordered frames); where the script sends a lone record, one world writes it and
//! polls ([`Host::send_with_room`], [`Host::poll_transmit`]: what the engine does without
//! the fast path) and the other offers it to `send_lone_record` first (falling back to the
//! same two calls when declined). After every step the frames each world's host sent, the
//! sender's connection (its whole state, by `Debug`), its slot's flags, the dirty list,
//! timers and events, and what the peer received must be the same.

use std::cell::RefCell;
use std::rc::Rc;

use proptest::prelude::*;
use smoltcp::phy::{self, Device, DeviceCapabilities};
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{Ipv4Address, Ipv4Cidr};

use super::{Host, HostStats};
use crate::device::{DeviceStats, PollDevice};
use crate::link::{self, Faults, LinkConfig, LinkEnd, LinkRxToken, LinkTxToken};
use crate::stack::{Congestion, StackConfig, TcpTuning};
use crate::ConnId;

const IP_A: Ipv4Address = Ipv4Address::new(198, 18, 0, 1);
const IP_B: Ipv4Address = Ipv4Address::new(198, 18, 0, 2);

/// A link end that keeps a copy of every frame sent through it.
#[derive(Debug)]
struct Tap {
    end: LinkEnd,
    frames: Rc<RefCell<Vec<Vec<u8>>>>,
}

struct TapTx<'a> {
    inner: LinkTxToken<'a>,
    frames: Rc<RefCell<Vec<Vec<u8>>>>,
}

impl phy::TxToken for TapTx<'_> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let frames = self.frames;
        self.inner.consume(len, |buf| {
            let r = f(buf);
            frames.borrow_mut().push(buf.to_vec());
            r
        })
    }
}

impl Device for Tap {
    type RxToken<'a> = LinkRxToken<'a>;
    type TxToken<'a> = TapTx<'a>;

    fn receive(&mut self, now: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        let frames = self.frames.clone();
        self.end
            .receive(now)
            .map(|(rx, tx)| (rx, TapTx { inner: tx, frames }))
    }

    fn transmit(&mut self, now: Instant) -> Option<Self::TxToken<'_>> {
        let frames = self.frames.clone();
        self.end.transmit(now).map(|inner| TapTx { inner, frames })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        self.end.capabilities()
    }
}

impl PollDevice for Tap {
    fn stats(&self) -> DeviceStats {
        self.end.stats()
    }
}

fn config(mac_last: u8, ip: Ipv4Address) -> StackConfig {
    StackConfig {
        mac: [0x02, 0, 0, 0, 0, mac_last],
        ip: Ipv4Cidr::new(ip, 24),
        gateway: None,
        routes: Vec::new(),
        random_seed: u64::from(mac_last) * 7919,
        max_connections: 4,
        out_of_order_budget_bytes: crate::OUT_OF_ORDER_BUDGET_DEFAULT,
    }
}

/// One step of the script.
#[derive(Debug, Clone)]
enum Op {
    /// A sends a record of this many octets as a caller-driven post does: written and sent
    /// at once (the step the two worlds take differently).
    Lone(usize),
    /// A writes a record and leaves it for its next poll.
    Queue(usize),
    /// B writes a record and leaves it for its next poll.
    PeerSend(usize),
    /// A polls, its reader taking every in-order octet in place (the engine's placement).
    PollA,
    /// B polls, likewise.
    PollB,
    /// B's reader takes nothing in place this poll: the octets queue.
    PollBQueued,
    /// B reads what queued.
    ReadB,
    /// Time passes.
    Wait(u64),
    /// A writes a record on its second connection, left for its next poll (another
    /// connection marked for the pass: a lone record then waits for the pass).
    Other(usize),
    /// B sends on the second connection.
    OtherPeer(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1usize..300).prop_map(Op::Lone),
        1 => (1usize..1600).prop_map(Op::Lone),
        2 => (1usize..2000).prop_map(Op::Queue),
        3 => (1usize..1500).prop_map(Op::PeerSend),
        6 => Just(Op::PollA),
        6 => Just(Op::PollB),
        1 => Just(Op::PollBQueued),
        1 => Just(Op::ReadB),
        3 => (1u64..3_000).prop_map(Op::Wait),
        1 => (1usize..1500).prop_map(Op::Other),
        1 => (1usize..1500).prop_map(Op::OtherPeer),
    ]
}

/// What varies between scripts besides the steps.
#[derive(Debug, Clone)]
struct Setup {
    rx_buffer: usize,
    tx_buffer: usize,
    ack_delay: Option<u64>,
    congestion: Congestion,
    loss: f64,
    reorder: f64,
    latency_us: u64,
    /// Frames a link direction holds (a few: transmit slots refused, back-pressure).
    queue_frames: usize,
    seed: u64,
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        prop_oneof![Just(4096usize), Just(16384), Just(65536)],
        prop_oneof![Just(4096usize), Just(32768)],
        prop_oneof![Just(None), Just(Some(200u64)), Just(Some(40_000))],
        prop_oneof![
            Just(Congestion::Reno),
            Just(Congestion::Cubic),
            Just(Congestion::None)
        ],
        prop_oneof![3 => Just(0.0f64), 1 => Just(0.05)],
        prop_oneof![3 => Just(0.0f64), 1 => Just(0.05)],
        prop_oneof![Just(0u64), Just(20)],
        prop_oneof![3 => Just(1024usize), 1 => Just(3)],
        any::<u64>(),
    )
        .prop_map(
            |(
                rx_buffer,
                tx_buffer,
                ack_delay,
                congestion,
                loss,
                reorder,
                latency_us,
                queue_frames,
                seed,
            )| {
                Setup {
                    rx_buffer,
                    tx_buffer,
                    ack_delay,
                    congestion,
                    loss,
                    reorder,
                    latency_us,
                    queue_frames,
                    seed,
                }
            },
        )
}

struct World {
    a: Host<Tap>,
    b: Host<LinkEnd>,
    c: ConnId,
    s: ConnId,
    /// A second connection (A's `c2`, B's `s2`).
    c2: ConnId,
    s2: ConnId,
    now: Instant,
    sent_by_a: Rc<RefCell<Vec<Vec<u8>>>>,
    /// What B's reader took, in order.
    got_b: Vec<u8>,
    /// A's events, in order.
    events_a: Vec<String>,
    /// Octets written so far by A and B (the pattern's position).
    written_a: u64,
    written_b: u64,
    /// Lone records `send_lone_record` took.
    taken: usize,
}

/// Writes `data` whole (the caller checked the room) and marks it a record.
fn send_all<D: PollDevice>(h: &mut Host<D>, id: ConnId, data: &[u8]) {
    let mut done = 0;
    while done < data.len() {
        let rest = &data[done..];
        done += h
            .send_with(id, |buf| {
                let n = buf.len().min(rest.len());
                buf[..n].copy_from_slice(&rest[..n]);
                n
            })
            .expect("send");
    }
    h.end_record(id).expect("record");
}

fn record(salt: u8, at: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| ((at + i) as u8).wrapping_mul(31) ^ salt)
        .collect()
}

impl World {
    fn new(su: &Setup) -> World {
        let faults = |seed: u64| Faults {
            seed,
            loss: su.loss,
            reorder: su.reorder,
            latency: Duration::from_micros(su.latency_us),
            ..Faults::default()
        };
        let (ea, eb) = link::pair(&LinkConfig {
            queue_frames: su.queue_frames,
            ..LinkConfig::default()
        });
        let sent_by_a = Rc::new(RefCell::new(Vec::new()));
        let tap = Tap {
            end: ea,
            frames: sent_by_a.clone(),
        };
        let tuning = TcpTuning {
            rx_buffer: su.rx_buffer,
            tx_buffer: su.tx_buffer,
            ack_delay: su.ack_delay.map(Duration::from_micros),
            congestion: su.congestion,
            ..TcpTuning::default()
        };
        let mut a = Host::new(tap, &config(1, IP_A), Instant::ZERO).expect("a");
        let mut b = Host::new(eb, &config(2, IP_B), Instant::ZERO).expect("b");
        let l = b.listen(9000, 2, &tuning).expect("listen");
        let c = a.connect((IP_B, 9000), None, &tuning).expect("connect");
        let c2 = a.connect((IP_B, 9000), None, &tuning).expect("connect");
        let mut now = Instant::ZERO;
        let mut accepted = Vec::new();
        let established =
            |a: &mut Host<Tap>, c| a.state(c) == Ok(smoltcp::socket::tcp::State::Established);
        for _ in 0..2000 {
            a.poll(now);
            b.poll(now);
            while let Some(s) = b.accept(l).expect("accept") {
                accepted.push(s);
            }
            if accepted.len() == 2 && established(&mut a, c) && established(&mut a, c2) {
                break;
            }
            now += Duration::from_micros(500);
        }
        assert_eq!(accepted.len(), 2, "both connections are established");
        // B's ends in A's order: by the ports A chose.
        let port = |a: &mut Host<Tap>, c| a.endpoints(c).expect("ends").0.expect("local").port;
        let (p1, p2) = (port(&mut a, c), port(&mut a, c2));
        let remote = |b: &mut Host<LinkEnd>, s| b.endpoints(s).expect("ends").1.expect("peer").port;
        let (s, s2) = if remote(&mut b, accepted[0]) == p1 {
            (accepted[0], accepted[1])
        } else {
            (accepted[1], accepted[0])
        };
        assert_eq!((remote(&mut b, s), remote(&mut b, s2)), (p1, p2));
        // Faults from now on (the handshake is not what is tested).
        a.device().end.set_tx_faults(faults(su.seed)).unwrap();
        b.device()
            .set_tx_faults(faults(su.seed ^ 0x9e37_79b9))
            .unwrap();
        while a.next_event().is_some() {}
        while b.next_event().is_some() {}
        sent_by_a.borrow_mut().clear();
        World {
            a,
            b,
            c,
            s,
            c2,
            s2,
            now,
            sent_by_a,
            got_b: Vec::new(),
            events_a: Vec::new(),
            written_a: 0,
            written_b: 0,
            taken: 0,
        }
    }

    /// Writes a record of A's of `len` octets, if the send buffer holds it whole.
    fn write_a(&mut self, len: usize) -> Option<Vec<u8>> {
        let rec = record(0xa5, self.written_a, len);
        if self.a.send_space(self.c).unwrap_or(0) < len {
            return None;
        }
        Some(rec)
    }

    fn step(&mut self, op: &Op, lone: bool) {
        match *op {
            Op::Lone(len) => {
                if let Some(rec) = self.write_a(len) {
                    self.written_a += len as u64;
                    let taken = lone
                        && self
                            .a
                            .send_lone_record(self.c, self.now, &rec)
                            .expect("a live connection");
                    if taken {
                        self.taken += 1;
                    } else {
                        // As the engine writes an FPDU: in one piece where the free
                        // space is contiguous, else in pieces.
                        let n = self
                            .a
                            .send_with_room(self.c, Some(len), |b| match b.get_mut(..len) {
                                Some(b) => {
                                    b.copy_from_slice(&rec);
                                    len
                                }
                                None => 0,
                            })
                            .expect("send");
                        if n != len {
                            send_all(&mut self.a, self.c, &rec);
                        }
                        self.a.poll_transmit(self.now);
                    }
                }
            }
            Op::Queue(len) => {
                if let Some(rec) = self.write_a(len) {
                    self.written_a += len as u64;
                    send_all(&mut self.a, self.c, &rec);
                }
            }
            Op::PeerSend(len) => {
                if self.b.send_space(self.s).unwrap_or(0) >= len {
                    let rec = record(0x5a, self.written_b, len);
                    self.written_b += len as u64;
                    send_all(&mut self.b, self.s, &rec);
                }
            }
            Op::Other(len) => {
                if self.a.send_space(self.c2).unwrap_or(0) >= len {
                    send_all(&mut self.a, self.c2, &record(0x3c, 0, len));
                }
            }
            Op::OtherPeer(len) => {
                if self.b.send_space(self.s2).unwrap_or(0) >= len {
                    send_all(&mut self.b, self.s2, &record(0xc3, 0, len));
                }
            }
            Op::PollA => {
                self.a.poll_with(self.now, |_, d| d.len());
            }
            Op::PollB => {
                let got = &mut self.got_b;
                self.b.poll_with(self.now, |_, d| {
                    got.extend_from_slice(d);
                    d.len()
                });
            }
            Op::PollBQueued => {
                self.b.poll_with(self.now, |_, _| 0);
            }
            Op::ReadB => {
                let got = &mut self.got_b;
                while self
                    .b
                    .recv_with(self.s, |d| {
                        got.extend_from_slice(d);
                        d.len()
                    })
                    .unwrap_or(0)
                    > 0
                {}
            }
            Op::Wait(us) => self.now += Duration::from_micros(us),
        }
        while let Some(e) = self.a.next_event() {
            // The two worlds are two stacks, whose handles differ in their stack's tag
            // alone: the events are compared without it.
            self.events_a.push(format!("{:?}", e.untagged()));
        }
        while self.b.next_event().is_some() {}
    }

    /// Everything of A's that the two ways could leave differently.
    fn a_state(&mut self) -> String {
        let now = self.now;
        let poll_at = self.a.poll_at(now);
        let timers = self.a.timers_armed();
        let i = &self.a.inner;
        let mut out = String::new();
        for c in [self.c, self.c2] {
            let slot = i.slots[c.index as usize].as_ref().expect("slot");
            out += &format!(
                "conn {:?}\nflags dirty {} defer_ack {} held {} armed {:?}\n",
                slot.conn, slot.dirty, slot.defer_ack, slot.held, slot.armed,
            );
        }
        // The host's counters, but for the slots a refusing device was asked for twice
        // (`send_lone_record` declines then, and the pass asks again).
        let stats = HostStats {
            tx_blocked: 0,
            ..i.stats
        };
        out += &format!(
            "dirty {:?} served {:?} unresolved {:?} control {} timers {} poll_at {:?}\n\
             now {:?}\nstats {:?}",
            i.dirty,
            i.served,
            i.unresolved,
            i.control.len(),
            timers,
            poll_at,
            i.now,
            stats,
        );
        out
    }
}

/// Asserts `a == b`, showing where they first differ (the states are long).
fn same(a: &str, b: &str, what: &str) {
    if a == b {
        return;
    }
    let at = a
        .bytes()
        .zip(b.bytes())
        .position(|(x, y)| x != y)
        .unwrap_or(a.len().min(b.len()));
    let from = at.saturating_sub(400);
    let window = |s: &str| {
        s.get(from..(at + 200).min(s.len()))
            .unwrap_or("")
            .to_string()
    };
    panic!(
        "{what} differs at {at}:\n general: ...{}\n lone:    ...{}",
        window(a),
        window(b)
    );
}

/// Runs `ops` in both worlds, comparing them after every step; returns how many lone
/// records the fast path took.
fn run(su: &Setup, ops: &[Op]) -> usize {
    let mut general = World::new(su);
    let mut lone = World::new(su);
    for (k, op) in ops.iter().enumerate() {
        general.step(op, false);
        lone.step(op, true);
        let (g, l) = (general.sent_by_a.borrow(), lone.sent_by_a.borrow());
        assert_eq!(g.len(), l.len(), "step {k} ({op:?}): frames sent by A");
        for (n, (fg, fl)) in g.iter().zip(l.iter()).enumerate() {
            assert_eq!(fg, fl, "step {k} ({op:?}): A's frame {n}");
        }
        drop((g, l));
        same(
            &general.a_state(),
            &lone.a_state(),
            &format!("step {k} ({op:?}): A's state"),
        );
        assert_eq!(general.events_a, lone.events_a, "step {k}: A's events");
        assert_eq!(general.got_b, lone.got_b, "step {k}: what B received");
    }
    assert_eq!(general.taken, 0);
    lone.taken
}

/// A ping-pong, the case the fast path is for: every request after the first exchange is
/// taken, and the worlds stay the same.
#[test]
fn a_ping_pong_takes_the_lone_path_and_matches_the_general_one() {
    let su = Setup {
        rx_buffer: 65536,
        tx_buffer: 32768,
        ack_delay: None,
        congestion: Congestion::Cubic,
        loss: 0.0,
        reorder: 0.0,
        latency_us: 0,
        queue_frames: 1024,
        seed: 7,
    };
    let mut ops = Vec::new();
    for k in 0..50 {
        ops.extend([
            Op::Lone(64 + k),
            Op::PollB,
            Op::PeerSend(64),
            Op::PollB,
            Op::PollA,
        ]);
    }
    let taken = run(&su, &ops);
    assert!(taken >= 45, "only {taken} of 50 lone records were taken");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]

    /// Random scripts: the two ways always leave the same frames and state.
    #[test]
    fn a_lone_record_leaves_the_state_of_the_general_path(
        su in setup(),
        head in proptest::collection::vec(op(), 0..40),
        tail in proptest::collection::vec(op(), 0..80),
    ) {
        // A ping-pong first, so every script takes the fast path some of the time.
        let mut ops = head;
        for _ in 0..3 {
            ops.extend([Op::Lone(100), Op::PollB, Op::PeerSend(80), Op::PollB, Op::PollA]);
        }
        ops.extend(tail);
        run(&su, &ops);
    }
}
