//! Shared helpers for the integration tests: a byte pattern both ends can check, and a
//! bidirectional bulk transfer between two stacks driven by one (simulated) clock.
#![allow(dead_code)]

use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol,
    Ipv4Address, Ipv4Cidr,
};
use warpcore_tcp::link::{Faults, LinkConfig, LinkEnd};
use warpcore_tcp::{ConnId, Event, PollDevice, Stack, StackConfig, TcpTuning};

/// Byte `i` of the stream salted with `salt`: big-endian 32-bit word counter XOR salt, so a
/// lost, duplicated or reordered byte range is detected.
pub fn pattern(salt: u32, i: u64) -> u8 {
    (((i >> 2) as u32) ^ salt).to_be_bytes()[(i & 3) as usize]
}

pub const IP_A: Ipv4Address = Ipv4Address::new(198, 18, 0, 1);
pub const IP_B: Ipv4Address = Ipv4Address::new(198, 18, 0, 2);

pub fn config(mac_last: u8, ip: Ipv4Address) -> StackConfig {
    StackConfig {
        mac: [0x02, 0, 0, 0, 0, mac_last],
        ip: Ipv4Cidr::new(ip, 24),
        gateway: None,
        routes: Vec::new(),
        random_seed: u64::from(mac_last) * 7919,
        max_connections: 16,
        out_of_order_budget_bytes: warpcore_tcp::OUT_OF_ORDER_BUDGET_DEFAULT,
    }
}

/// One direction's progress.
#[derive(Debug, Default)]
pub struct Flow {
    pub sent: u64,
    pub received: u64,
    pub fin_sent: bool,
    pub peer_closed: bool,
    /// Of `received`, the octets taken in place from `Stack::poll_with`.
    pub in_place: u64,
}

/// What a seeded in-place reader takes of the octets `Stack::poll_with` offers: nothing (one
/// offer in eight), a random prefix (one in eight) or all, each octet checked against the
/// pattern.
fn offer(f: &mut Flow, rng: &mut u64, salt: u32, data: &[u8]) -> usize {
    *rng = rng
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    let r = (*rng >> 33) as usize;
    let n = match r % 8 {
        0 => 0,
        1 => (r / 8) % (data.len() + 1),
        _ => data.len(),
    };
    for (k, &b) in data[..n].iter().enumerate() {
        let want = pattern(salt, f.received + k as u64);
        assert_eq!(
            b,
            want,
            "in-place byte {} of the stream differs",
            f.received + k as u64
        );
    }
    f.received += n as u64;
    f.in_place += n as u64;
    n
}

pub fn pump(
    stack: &mut Stack<impl PollDevice>,
    c: ConnId,
    f: &mut Flow,
    total: u64,
    tx_salt: u32,
    rx_salt: u32,
) -> bool {
    let mut progress = false;
    while f.sent < total {
        let off = f.sent;
        let n = stack
            .send_with(c, |buf| {
                let n = buf.len().min((total - off) as usize);
                for (k, b) in buf[..n].iter_mut().enumerate() {
                    *b = pattern(tx_salt, off + k as u64);
                }
                n
            })
            .unwrap_or(0);
        if n == 0 {
            break;
        }
        f.sent += n as u64;
        progress = true;
    }
    if f.sent == total && !f.fin_sent {
        stack.close(c).expect("close");
        f.fin_sent = true;
        progress = true;
    }
    read_checked(stack, c, f, rx_salt) || progress
}

/// Reads everything `c` has queued into `f.received`, checking each octet against the
/// pattern salted with `rx_salt`; whether it read any.
pub fn read_checked(
    stack: &mut Stack<impl PollDevice>,
    c: ConnId,
    f: &mut Flow,
    rx_salt: u32,
) -> bool {
    let mut progress = false;
    loop {
        let off = f.received;
        let n = stack
            .recv_with(c, |data| {
                for (k, &b) in data.iter().enumerate() {
                    let want = pattern(rx_salt, off + k as u64);
                    assert_eq!(b, want, "byte {} of the stream differs", off + k as u64);
                }
                data.len()
            })
            // Nothing left once the peer closed: refused, as a read at EOF.
            .unwrap_or(0);
        if n == 0 {
            break;
        }
        f.received += n as u64;
        progress = true;
    }
    progress
}

/// Moves `total` bytes each way between `a` (client) and `b` (server) and checks every byte.
/// `next_delivery` tells when the link delivers next (so idle time can be skipped).
/// Returns the simulated time taken.
pub fn bidirectional<DA: PollDevice, DB: PollDevice>(
    a: &mut Stack<DA>,
    b: &mut Stack<DB>,
    total: u64,
    tuning: &TcpTuning,
    clock: impl FnMut(Instant, bool, Option<Instant>) -> Instant,
    next_delivery: impl Fn(&Stack<DA>, &Stack<DB>) -> Option<Instant>,
    limit: Duration,
) -> Duration {
    bidirectional_in_place(a, b, total, tuning, clock, next_delivery, limit, None).0
}

/// [`bidirectional`]; with `in_place_seed`, both stacks are polled with `Stack::poll_with`
/// and a seeded reader ([`offer`]) takes part of what is offered in place, the rest being
/// read from the queue as before. Returns the simulated time and the octets taken in place
/// (both directions).
#[allow(clippy::too_many_arguments)]
pub fn bidirectional_in_place<DA: PollDevice, DB: PollDevice>(
    a: &mut Stack<DA>,
    b: &mut Stack<DB>,
    total: u64,
    tuning: &TcpTuning,
    mut clock: impl FnMut(Instant, bool, Option<Instant>) -> Instant,
    next_delivery: impl Fn(&Stack<DA>, &Stack<DB>) -> Option<Instant>,
    limit: Duration,
    in_place_seed: Option<u64>,
) -> (Duration, u64) {
    let t0 = Instant::ZERO;
    let mut now = t0;
    let _l = b.listen(5000, 2, tuning).expect("listen");
    let ca = a.connect((IP_B, 5000), None, tuning).expect("connect");
    let mut cb: Option<ConnId> = None;
    let (mut fa, mut fb) = (Flow::default(), Flow::default());
    let mut connected = false;
    let (mut a_closed, mut b_closed) = (false, false);
    let mut rng = in_place_seed.unwrap_or(0);
    loop {
        assert!(
            now - t0 < limit,
            "transfer did not finish within {limit} (a {fa:?}, b {fb:?})"
        );
        let mut work = match in_place_seed {
            None => a.poll(now) | b.poll(now),
            Some(_) => {
                let wa = a.poll_with(now, |c, data| {
                    assert_eq!(c, ca, "offered octets of another connection");
                    offer(&mut fa, &mut rng, 0xa5a5_0002, data)
                });
                let wb = b.poll_with(now, |c, data| {
                    assert_eq!(Some(c), cb, "offered octets of another connection");
                    offer(&mut fb, &mut rng, 0x5a5a_0001, data)
                });
                wa | wb
            }
        };
        while let Some(e) = a.next_event() {
            match e {
                Event::Connected(_) => connected = true,
                Event::PeerClosed(_) => fa.peer_closed = true,
                Event::Reset(_) | Event::TimedOut(_) => {
                    panic!("client connection reset or timed out: {e:?} {fa:?}")
                }
                Event::Closed(_) => a_closed = true,
                _ => {}
            }
        }
        while let Some(e) = b.next_event() {
            match e {
                Event::Acceptable(id) => {
                    if let Some(c) = b.accept(id).expect("accept") {
                        assert!(cb.is_none(), "one connection expected");
                        cb = Some(c);
                    }
                }
                Event::PeerClosed(_) => fb.peer_closed = true,
                Event::Reset(_) | Event::TimedOut(_) => {
                    panic!("server connection reset or timed out: {e:?} {fb:?}")
                }
                Event::Closed(_) => b_closed = true,
                _ => {}
            }
        }
        if connected {
            work |= pump(a, ca, &mut fa, total, 0x5a5a_0001, 0xa5a5_0002);
        }
        if let Some(c) = cb {
            work |= pump(b, c, &mut fb, total, 0xa5a5_0002, 0x5a5a_0001);
        }
        if fa.received == total && fb.received == total && fa.peer_closed && fb.peer_closed {
            // Both halves finished; TIME-WAIT and LAST-ACK end on their own.
            let _ = (a_closed, b_closed);
            return (now - t0, fa.in_place + fb.in_place);
        }
        let mut wake = next_delivery(a, b);
        for t in [a.poll_at(now), b.poll_at(now)].into_iter().flatten() {
            wake = Some(wake.map_or(t, |w: Instant| w.min(t)));
        }
        now = clock(now, work, wake);
    }
}

/// A simulated clock: a small step while busy, a jump to the next deadline while idle.
pub fn sim_clock(now: Instant, work: bool, wake: Option<Instant>) -> Instant {
    let step = now + Duration::from_micros(5);
    if work {
        return step;
    }
    match wake {
        Some(w) if w > step => w,
        _ => step,
    }
}

/// When the in-memory link next delivers a frame to either stack.
pub fn next_delivery(a: &Stack<LinkEnd>, b: &Stack<LinkEnd>) -> Option<Instant> {
    match (a.device().next_delivery(), b.device().next_delivery()) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, y) => x.or(y),
    }
}

/// A link with `loss` (a fraction) each way, 1 % duplication, 2 % reordering (300 µs
/// late) and 50 µs latency, seeded per direction.
pub fn faulty_link(seed: u64, loss: f64) -> LinkConfig {
    let faults = |seed| Faults {
        seed,
        loss,
        duplicate: 0.01,
        reorder: 0.02,
        reorder_delay: Duration::from_micros(300),
        latency: Duration::from_micros(50),
        ..Faults::default()
    };
    LinkConfig {
        faults_ab: faults(seed),
        faults_ba: faults(seed ^ 0x5555_aaaa),
        ..LinkConfig::default()
    }
}

/// Polls both stacks for `steps` steps of 100 us and collects their events.
pub fn run(
    a: &mut Stack<LinkEnd>,
    b: &mut Stack<LinkEnd>,
    now: &mut Instant,
    steps: usize,
) -> (Vec<Event>, Vec<Event>) {
    let (mut ea, mut eb) = (Vec::new(), Vec::new());
    for _ in 0..steps {
        a.poll(*now);
        b.poll(*now);
        ea.extend(std::iter::from_fn(|| a.next_event()));
        eb.extend(std::iter::from_fn(|| b.next_event()));
        *now += Duration::from_micros(100);
    }
    (ea, eb)
}

/// The ARP reply that `mac` at `IP_A` sends to the ARP request in Ethernet frame `frame`
/// (`None` if it is none): how the tests that play peer A by hand answer a stack's
/// resolution of A.
pub fn arp_reply(frame: &[u8], mac: EthernetAddress) -> Option<Vec<u8>> {
    let e = EthernetFrame::new_checked(frame).ok()?;
    if e.ethertype() != EthernetProtocol::Arp {
        return None;
    }
    let ArpRepr::EthernetIpv4 {
        source_hardware_addr,
        source_protocol_addr,
        ..
    } = ArpRepr::parse(&ArpPacket::new_checked(e.payload()).ok()?).ok()?
    else {
        return None;
    };
    let reply = ArpRepr::EthernetIpv4 {
        operation: ArpOperation::Reply,
        source_hardware_addr: mac,
        source_protocol_addr: IP_A,
        target_hardware_addr: source_hardware_addr,
        target_protocol_addr: source_protocol_addr,
    };
    let mut buf = vec![0u8; 14 + reply.buffer_len()];
    let mut eth = EthernetFrame::new_unchecked(&mut buf);
    eth.set_dst_addr(source_hardware_addr);
    eth.set_src_addr(mac);
    eth.set_ethertype(EthernetProtocol::Arp);
    reply.emit(&mut ArpPacket::new_unchecked(&mut buf[14..]));
    Some(buf)
}
