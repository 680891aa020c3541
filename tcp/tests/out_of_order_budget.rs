//! The stack-wide budget of out-of-order octets (`StackConfig::out_of_order_budget_bytes`):
//! a hostile peer holding many connections cannot make the stack hold more than it out of
//! order, whatever the connections' windows; what it refuses is neither held nor SACKed
//! (RFC 9293 3.10.7.4, RFC 2018 3) and arrives byte-exact once resent; and every path that
//! lets octets held out of order go gives them back, so the count returns to zero.
//!
//! The same scripted peer, agreeing SACK without timestamps, holds the host to the SACK
//! option of four blocks both ways (RFC 2018 3 and 4): in the ACK frames it writes and in
//! the ACKs it takes from the wire.

mod common;

use common::*;
use smoltcp::phy::{Device, RxToken, TxToken};
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, IpProtocol, Ipv4Packet, Ipv4Repr, TcpControl,
    TcpPacket, TcpRepr, TcpSeqNumber,
};
use warpcore_tcp::link::{self, LinkConfig, LinkEnd};
use warpcore_tcp::{ConnId, Event, Stack, StackConfig, TcpTuning};

/// The peer's initial sequence number on every connection.
const PEER_ISS: i32 = 100_000;
/// The payload of each segment the peer sends.
const SEG: usize = 1000;
const A_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 1]);

fn inject(end: &mut LinkEnd, now: Instant, frame: &[u8]) {
    end.transmit(now)
        .expect("room on the link")
        .consume(frame.len(), |b| b.copy_from_slice(frame));
}

/// A segment from the peer (A) on its port `port` to B's port 5000.
fn frame(port: u16, control: TcpControl, seq: i32, ack: Option<i32>, payload: &[u8]) -> Vec<u8> {
    let syn = control == TcpControl::Syn;
    let tcp = TcpRepr {
        src_port: port,
        dst_port: 5000,
        control,
        seq_number: TcpSeqNumber(seq),
        ack_number: ack.map(TcpSeqNumber),
        window_len: 65535,
        window_scale: None,
        max_seg_size: syn.then_some(1460),
        sack_permitted: syn,
        sack_ranges: [None; 3],
        timestamp: None,
        payload,
    };
    let ip = Ipv4Repr {
        src_addr: IP_A,
        dst_addr: IP_B,
        next_header: IpProtocol::Tcp,
        payload_len: tcp.buffer_len(),
        hop_limit: 64,
    };
    let mut buf = vec![0u8; 14 + 20 + tcp.buffer_len()];
    let mut eth = EthernetFrame::new_unchecked(&mut buf);
    eth.set_dst_addr(EthernetAddress([0x02, 0, 0, 0, 0, 2]));
    eth.set_src_addr(A_MAC);
    eth.set_ethertype(EthernetProtocol::Ipv4);
    let caps = smoltcp::phy::ChecksumCapabilities::default();
    ip.emit(&mut Ipv4Packet::new_unchecked(&mut buf[14..]), &caps);
    tcp.emit(
        &mut TcpPacket::new_unchecked(&mut buf[34..]),
        &IP_A.into(),
        &IP_B.into(),
        &caps,
    );
    buf
}

/// What B sent on one connection.
#[derive(Debug, Clone)]
struct Sent {
    port: u16,
    syn: bool,
    rst: bool,
    seq: i32,
    ack: Option<i32>,
    /// Octets the SACK blocks cover (RFC 2018 3).
    sacked: usize,
    /// The SACK blocks, as the peer's stream offsets (a D-SACK block included).
    blocks: Vec<(usize, usize)>,
}

/// Polls B once at `now` and returns the TCP segments it sent, answering its ARP requests
/// for A.
fn exchange(b: &mut Stack<LinkEnd>, peer: &mut LinkEnd, now: Instant) -> Vec<Sent> {
    b.poll(now);
    let mut out = Vec::new();
    let mut arp = false;
    while let Some((rx, _tx)) = peer.receive(now) {
        let f = rx.consume(|f| f.to_vec());
        if let Some(reply) = arp_reply(&f, A_MAC) {
            inject(peer, now, &reply);
            arp = true;
            continue;
        }
        let e = EthernetFrame::new_checked(&f[..]).expect("a frame");
        let ip = Ipv4Packet::new_checked(e.payload()).expect("IPv4");
        let t = TcpPacket::new_checked(ip.payload()).expect("TCP");
        let r = TcpRepr::parse(
            &t,
            &IP_B.into(),
            &IP_A.into(),
            &smoltcp::phy::ChecksumCapabilities::default(),
        )
        .expect("a TCP segment");
        out.push(Sent {
            port: r.dst_port,
            syn: r.control == TcpControl::Syn,
            rst: r.control == TcpControl::Rst,
            seq: r.seq_number.0,
            ack: r.ack_number.map(|a| a.0),
            sacked: r
                .sack_ranges
                .iter()
                .flatten()
                .map(|&(l, r)| r.wrapping_sub(l) as usize)
                .sum(),
            blocks: r
                .sack_ranges
                .iter()
                .flatten()
                .map(|&(l, r)| {
                    let at = |s: u32| s.wrapping_sub(PEER_ISS as u32 + 1) as usize;
                    (at(l), at(r))
                })
                .collect(),
        });
    }
    if arp {
        // The frames that waited for the answer.
        out.extend(exchange(b, peer, now));
    }
    out
}

/// One connection the peer opened: its port, B's ISS and B's handle.
#[derive(Debug, Clone, Copy)]
struct Conn {
    port: u16,
    b_iss: i32,
    id: ConnId,
}

impl Conn {
    /// The peer's segment of `len` octets at stream offset `off`, with `control`.
    fn data(&self, off: usize, len: usize, control: TcpControl) -> Vec<u8> {
        let payload: Vec<u8> = (0..len).map(|i| pattern(7, (off + i) as u64)).collect();
        frame(
            self.port,
            control,
            PEER_ISS + 1 + off as i32,
            Some(self.b_iss + 1),
            &payload,
        )
    }
}

/// B listening on 5000 with a budget of `budget` out-of-order octets, and the peer's end.
fn server(budget: usize) -> (Stack<LinkEnd>, LinkEnd, warpcore_tcp::ListenerId) {
    let (peer, eb) = link::pair(&LinkConfig::default());
    let cfg = StackConfig {
        max_connections: 64,
        out_of_order_budget_bytes: budget,
        ..config(2, IP_B)
    };
    let mut b = Stack::new(eb, &cfg, Instant::ZERO).expect("stack");
    let l = b.listen(5000, 64, &TcpTuning::default()).expect("listen");
    (b, peer, l)
}

/// `n` connections from the peer's ports 40000 on, established and accepted.
fn open(
    b: &mut Stack<LinkEnd>,
    peer: &mut LinkEnd,
    l: warpcore_tcp::ListenerId,
    n: u16,
    now: Instant,
) -> Vec<Conn> {
    (0..n)
        .map(|k| {
            let port = 40000 + k;
            inject(
                peer,
                now,
                &frame(port, TcpControl::Syn, PEER_ISS, None, &[]),
            );
            let sent = exchange(b, peer, now);
            let syn_ack = sent
                .iter()
                .find(|s| s.port == port && s.syn)
                .unwrap_or_else(|| panic!("no SYN-ACK for port {port}: {sent:?}"));
            let b_iss = syn_ack.seq;
            inject(
                peer,
                now,
                &frame(port, TcpControl::None, PEER_ISS + 1, Some(b_iss + 1), &[]),
            );
            exchange(b, peer, now);
            let id = b.accept(l).expect("accept").expect("established");
            Conn { port, b_iss, id }
        })
        .collect()
}

/// The octets B holds out of order: its count, checked against the sum over its
/// connections.
fn held(b: &Stack<LinkEnd>) -> usize {
    let h = b.host_stats().expect("Warpcore's TCP").out_of_order_held as usize;
    assert_eq!(
        Some(h),
        b.out_of_order_held_by_connections(),
        "the stack's count is not the sum over its connections"
    );
    h
}

fn refused(b: &Stack<LinkEnd>) -> u64 {
    b.host_stats().expect("Warpcore's TCP").out_of_order_refused
}

/// Times connections reneged, and the octets they gave up.
fn reneged(b: &Stack<LinkEnd>) -> (u64, u64) {
    let h = b.host_stats().expect("Warpcore's TCP");
    (h.out_of_order_reneges, h.out_of_order_reneged)
}

/// The peer sends segments `segs` (each `SEG` octets at `k * SEG`) on `c`, eight frames at
/// a time (the link holds a few more); B's answers on `c`.
fn send_segments(
    b: &mut Stack<LinkEnd>,
    peer: &mut LinkEnd,
    c: Conn,
    segs: std::ops::RangeInclusive<usize>,
    now: Instant,
) -> Vec<Sent> {
    let segs: Vec<usize> = segs.collect();
    let mut acks = Vec::new();
    for batch in segs.chunks(8) {
        for &k in batch {
            inject(peer, now, &c.data(k * SEG, SEG, TcpControl::Psh));
        }
        acks.extend(
            exchange(b, peer, now)
                .into_iter()
                .filter(|s| s.port == c.port),
        );
    }
    acks
}

/// Reads everything `c` has in order and checks it against the peer's pattern: `len`
/// octets from the stream's start.
fn read_all(b: &mut Stack<LinkEnd>, c: Conn, len: usize) {
    assert_eq!(b.recv_queue(c.id), Ok(len));
    let mut got = vec![0; len];
    assert_eq!(b.recv(c.id, &mut got), Ok(len));
    assert!(got
        .iter()
        .enumerate()
        .all(|(i, &o)| o == pattern(7, i as u64)));
}

/// RFC 2018 8 (a receiver may discard data it SACKed) against a peer that fills the
/// stack's out-of-order budget and never fills its gap. One connection (the hog) holds
/// the whole budget, sixteen segments past a hole; its seventeenth is refused, and the
/// hog, holding more than its share, has no one renege for it. Then a second connection
/// loses a segment: the four behind it are held and SACKed (before, every one was
/// refused, and every segment behind each of its losses was sent again for as long as the
/// hog lived), because the hog gives up its highest octets down to its share (half of the
/// budget now that two connections hold octets): its SACK block ends at 9,000 octets
/// from then on. When the hog's hole fills, only what it kept is acknowledged; the rest,
/// sent again, completes its stream byte-exact, as does the second connection's.
#[test]
fn rfc2018_8_the_largest_holder_reneges_for_a_connection_under_its_share() {
    const BUDGET: usize = 16 * SEG;
    let (mut b, mut peer, l) = server(BUDGET);
    let now = Instant::from_millis(1);
    let conns = open(&mut b, &mut peer, l, 2, now);
    let (hog, other) = (conns[0], conns[1]);

    let acks = send_segments(&mut b, &mut peer, hog, 1..=16, now);
    assert_eq!(
        acks.last().map(|a| a.blocks.clone()),
        Some(vec![(SEG, 17 * SEG)])
    );
    assert_eq!(held(&b), BUDGET);
    let acks = send_segments(&mut b, &mut peer, hog, 17..=17, now);
    assert_eq!(acks.last().map(|a| a.sacked), Some(16 * SEG), "{acks:?}");
    assert_eq!(
        (refused(&b), reneged(&b)),
        (1, (0, 0)),
        "the hog's own refusal"
    );

    let acks = send_segments(&mut b, &mut peer, other, 1..=4, now);
    assert_eq!(acks.len(), 4, "{acks:?}");
    assert!(acks.iter().all(|a| a.ack == Some(PEER_ISS + 1)));
    assert_eq!(
        acks.iter().map(|a| a.sacked).collect::<Vec<_>>(),
        [SEG, 2 * SEG, 3 * SEG, 4 * SEG],
        "the segments behind the other connection's loss held and SACKed"
    );
    assert_eq!(refused(&b), 1, "none of the other connection's refused");
    assert_eq!(
        reneged(&b),
        (1, 8 * SEG as u64),
        "the hog down to its share"
    );
    assert_eq!(held(&b), 8 * SEG + 4 * SEG);
    // A copy of a segment the hog still holds: the ACK's D-SACK block, then what it holds.
    let acks = send_segments(&mut b, &mut peer, hog, 2..=2, now);
    assert_eq!(
        acks.last().map(|a| a.blocks.clone()),
        Some(vec![(2 * SEG, 3 * SEG), (SEG, 9 * SEG)])
    );

    // The hog's hole fills: what it kept goes in order, the rest comes again.
    let acks = send_segments(&mut b, &mut peer, hog, 0..=0, now);
    assert_eq!(
        acks.last().and_then(|a| a.ack),
        Some(PEER_ISS + 1 + 9 * SEG as i32)
    );
    let acks = send_segments(&mut b, &mut peer, hog, 9..=17, now);
    assert_eq!(
        acks.last().and_then(|a| a.ack),
        Some(PEER_ISS + 1 + 18 * SEG as i32)
    );
    read_all(&mut b, hog, 18 * SEG);
    send_segments(&mut b, &mut peer, other, 0..=0, now);
    read_all(&mut b, other, 5 * SEG);
    assert_eq!(held(&b), 0);
}

/// Twelve connections of a hostile peer each send eight 1000-octet segments past a gap at
/// their stream's start (96,000 octets out of order, each connection well within its
/// 64 KiB window) to a stack whose budget is 16 KiB (before the budget the stack held and
/// SACKed all 96,000 octets). The stack never holds more than its budget (checked after
/// every connection's segments). The first two connections' segments fit and are held and
/// SACKed whole; each later one arrives with the budget full and is held and SACKed up to
/// its share, in whole segments: the budget over the connections that hold octets, itself
/// included (16,384 / (k + 1) for the k-th), the largest holders giving up octets for it
/// (RFC 2018 8); before reneging, every one of them was refused whole while the first
/// two lived. The segments past a connection's share are refused, unSACKed but answered
/// by a duplicate ACK each (RFC 5681 4.2), and counted. When the first connection's gap
/// fills, what it kept goes in order, byte-exact, and back to the budget.
#[test]
fn rfc9293_3_10_7_4_out_of_order_octets_of_many_connections_stay_within_the_stack_budget() {
    const BUDGET: usize = 16 * 1024;
    const CONNS: u16 = 12;
    const PER_CONN: usize = 8;
    let (mut b, mut peer, l) = server(BUDGET);
    let now = Instant::from_millis(1);
    let conns = open(&mut b, &mut peer, l, CONNS, now);
    let mut sacked = vec![0; conns.len()];
    for (k, &c) in conns.iter().enumerate() {
        let acks = send_segments(&mut b, &mut peer, c, 1..=PER_CONN, now);
        // One ACK for each out-of-order segment, held or not, acknowledging the gap.
        assert_eq!(acks.len(), PER_CONN, "connection {k}: {acks:?}");
        assert!(acks.iter().all(|a| a.ack == Some(PEER_ISS + 1) && !a.rst));
        sacked[k] = acks.last().expect("an ACK").sacked;
        assert!(held(&b) <= BUDGET, "held {} past {BUDGET}", held(&b));
    }
    let share = |k: usize| (BUDGET / (k + 1) / SEG * SEG).min(PER_CONN * SEG);
    assert_eq!(sacked, (0..conns.len()).map(share).collect::<Vec<_>>());
    let refusals: usize = sacked.iter().map(|s| PER_CONN - s / SEG).sum();
    assert_eq!(refused(&b), refusals as u64);
    assert!(reneged(&b).0 > 0);

    // The first connection's gap fills: what it kept goes in order, and back.
    let before = held(&b);
    let c0 = conns[0];
    let acks = send_segments(&mut b, &mut peer, c0, 0..=0, now);
    let acked = acks.last().and_then(|a| a.ack).expect("an ACK") - (PEER_ISS + 1);
    let kept = acked as usize - SEG;
    assert!(
        (share(CONNS as usize - 1)..PER_CONN * SEG).contains(&kept),
        "{kept}"
    );
    read_all(&mut b, c0, acked as usize);
    assert_eq!(held(&b), before - kept);
    assert_eq!(refused(&b), refusals as u64);
}
/// Two stacks whose out-of-order budgets are tiny (none at all, and four segments' worth)
/// move 4 MiB each way over a link that loses, duplicates and reorders: every byte arrives
/// byte-exact (checked against the salted pattern) though both stacks refused out-of-order
/// segments (counted), and neither ever held more than its budget (sampled at every step
/// of the transfer, the count always the sum over the connections).
#[test]
fn a_tiny_out_of_order_budget_loses_no_byte_over_a_lossy_link() {
    for (budget, seed) in [(4 * 1460, 0x00b0_0001), (0, 0x00b0_0002)] {
        let (ea, eb) = link::pair(&faulty_link(seed, 0.01));
        let cfg = |mac, ip| StackConfig {
            out_of_order_budget_bytes: budget,
            ..config(mac, ip)
        };
        let mut a = Stack::new(ea, &cfg(1, IP_A), Instant::ZERO).expect("stack a");
        let mut b = Stack::new(eb, &cfg(2, IP_B), Instant::ZERO).expect("stack b");
        let most = std::cell::Cell::new(0);
        let t = bidirectional(
            &mut a,
            &mut b,
            4 << 20,
            &TcpTuning::default(),
            sim_clock,
            |a, b| {
                most.set(most.get().max(held(a)).max(held(b)));
                next_delivery(a, b)
            },
            Duration::from_secs(3600),
        );
        let (ra, rb) = (refused(&a), refused(&b));
        let (sa, sb) = (a.device().tx_fault_stats(), b.device().tx_fault_stats());
        eprintln!(
            "budget {budget}: {t} simulated, refused {ra} (a) {rb} (b), most held {}; \
             a->b {sa:?}, b->a {sb:?}",
            most.get()
        );
        assert!(sa.lost > 0 && sb.lost > 0, "the link lost nothing");
        assert!(ra > 0 && rb > 0, "budget {budget}: refused {ra} and {rb}");
        assert!(most.get() <= budget, "held {} past {budget}", most.get());
    }
}

/// Reneging against a real sender (RFC 2018 8: the sender keeps what was SACKed until it
/// is cumulatively acknowledged): four connections each move 512 KiB from one stack to
/// another over a link that loses 2 % of frames each way (and duplicates and reorders),
/// the receiver's out-of-order budget six segments, so its connections refuse one
/// another's segments and reneging is frequent (counted). Every byte of every stream
/// arrives byte-exact, each checked against its connection's own pattern, and the
/// receiver never holds more than its budget (sampled at every step).
#[test]
fn rfc2018_8_reneged_octets_are_sent_again_and_every_stream_arrives_byte_exact() {
    const CONNS: usize = 4;
    const TOTAL: u64 = 512 << 10;
    const BUDGET: usize = 6 * 1460;
    let (ea, eb) = link::pair(&faulty_link(0x00b0_0003, 0.02));
    let mut a = Stack::new(ea, &config(1, IP_A), Instant::ZERO).expect("stack a");
    let cfg_b = StackConfig {
        out_of_order_budget_bytes: BUDGET,
        ..config(2, IP_B)
    };
    let mut b = Stack::new(eb, &cfg_b, Instant::ZERO).expect("stack b");
    let tuning = TcpTuning::default();
    let _l = b.listen(5000, CONNS, &tuning).expect("listen");
    // Each stream's pattern is salted with the sender's port.
    let port = |s: &mut Stack<LinkEnd>, c: ConnId, local: bool| {
        let (l, r) = s.endpoints(c).expect("endpoints");
        u32::from(if local { l } else { r }.expect("an endpoint").port)
    };
    let senders: Vec<ConnId> = (0..CONNS)
        .map(|_| a.connect((IP_B, 5000), None, &tuning).expect("connect"))
        .collect();
    let mut sent: Vec<Flow> = (0..CONNS).map(|_| Flow::default()).collect();
    let mut receivers: Vec<(ConnId, Flow)> = Vec::new();
    let mut connected = 0;
    let mut now = Instant::ZERO;
    let mut most = 0;
    loop {
        assert!(
            now < Instant::from_secs(3600),
            "not done within an hour: {receivers:?}"
        );
        let mut work = a.poll(now) | b.poll(now);
        while let Some(e) = a.next_event() {
            match e {
                Event::Connected(_) => connected += 1,
                Event::Reset(_) | Event::TimedOut(_) => panic!("sender: {e:?}"),
                _ => {}
            }
        }
        while let Some(e) = b.next_event() {
            match e {
                Event::Acceptable(l) => {
                    while let Some(c) = b.accept(l).expect("accept") {
                        receivers.push((c, Flow::default()));
                    }
                }
                Event::PeerClosed(c) => {
                    if let Some((_, f)) = receivers.iter_mut().find(|(r, _)| *r == c) {
                        f.peer_closed = true;
                    }
                }
                Event::Reset(_) | Event::TimedOut(_) => panic!("receiver: {e:?}"),
                _ => {}
            }
        }
        if connected == CONNS {
            for (c, f) in senders.iter().zip(&mut sent) {
                let salt = port(&mut a, *c, true);
                work |= pump(&mut a, *c, f, TOTAL, salt, 0);
            }
        }
        for (c, f) in &mut receivers {
            let salt = port(&mut b, *c, false);
            work |= read_checked(&mut b, *c, f, salt);
            // Nothing sent back: the receiver's FIN once the sender's arrived.
            if f.peer_closed && !f.fin_sent {
                b.close(*c).expect("close");
                f.fin_sent = true;
            }
        }
        most = most.max(held(&b));
        if receivers.len() == CONNS
            && receivers
                .iter()
                .all(|(_, f)| f.received == TOTAL && f.peer_closed)
        {
            break;
        }
        let mut wake = next_delivery(&a, &b);
        for t in [a.poll_at(now), b.poll_at(now)].into_iter().flatten() {
            wake = Some(wake.map_or(t, |w: Instant| w.min(t)));
        }
        now = sim_clock(now, work, wake);
    }
    let (times, octets) = reneged(&b);
    eprintln!(
        "{now} simulated, refused {}, reneged {times} times ({octets} octets), most held {most}",
        refused(&b)
    );
    assert!(times > 10, "reneged only {times} times");
    assert!(most <= BUDGET, "held {most} past {BUDGET}");
}

/// Every way octets held out of order are let go gives them back to the stack's budget:
/// the gap filling (taken in order), the peer's RST, the user's abort, the user's release
/// of an open connection, the peer's FIN landing before them (Linux's `tcp_fin` purge),
/// and the user timeout. After each the count is the sum over the connections left, and
/// at the end nothing is counted (a leak would starve the stack slowly, connection by
/// connection).
#[test]
fn out_of_order_accounting_returns_to_zero_whatever_frees_the_octets() {
    let (mut b, mut peer, l) = server(1 << 20);
    let mut now = Instant::from_millis(1);
    let conns = open(&mut b, &mut peer, l, 6, now);
    // Each connection holds 2 + k segments out of order past a one-segment gap.
    for (k, c) in conns.iter().enumerate() {
        for j in 0..2 + k {
            inject(&mut peer, now, &c.data((2 + j) * SEG, SEG, TcpControl::Psh));
        }
    }
    exchange(&mut b, &mut peer, now);
    let share = |k: usize| (2 + k) * SEG;
    let mut left: usize = (0..conns.len()).map(share).sum();
    assert_eq!(held(&b), left);
    let events = |b: &mut Stack<LinkEnd>| std::iter::from_fn(|| b.next_event()).collect::<Vec<_>>();

    // 0: the gap fills; the held octets are taken in order.
    inject(&mut peer, now, &conns[0].data(0, 2 * SEG, TcpControl::Psh));
    exchange(&mut b, &mut peer, now);
    assert_eq!(b.recv_queue(conns[0].id), Ok(2 * SEG + share(0)));
    left -= share(0);
    assert_eq!(held(&b), left, "after the gap filled");

    // 1: the peer resets the connection (a RST at RCV.NXT).
    inject(
        &mut peer,
        now,
        &frame(conns[1].port, TcpControl::Rst, PEER_ISS + 1, None, &[]),
    );
    exchange(&mut b, &mut peer, now);
    assert!(events(&mut b).contains(&Event::Reset(conns[1].id)));
    left -= share(1);
    assert_eq!(held(&b), left, "after the peer's RST, before the release");
    b.release(conns[1].id).expect("release");
    assert_eq!(held(&b), left);

    // 2: the user aborts.
    b.abort(conns[2].id).expect("abort");
    left -= share(2);
    assert_eq!(held(&b), left, "after the abort");
    exchange(&mut b, &mut peer, now);
    b.release(conns[2].id).expect("release");

    // 3: the user releases the open connection.
    b.release(conns[3].id).expect("release");
    left -= share(3);
    assert_eq!(held(&b), left, "after the release");

    // 4: the peer's FIN ends the stream before the octets held: they are purged.
    inject(&mut peer, now, &conns[4].data(0, SEG, TcpControl::Fin));
    exchange(&mut b, &mut peer, now);
    assert!(events(&mut b).contains(&Event::PeerClosed(conns[4].id)));
    left -= share(4);
    assert_eq!(held(&b), left, "after the FIN");
    b.release(conns[4].id).expect("release");

    // 5: the peer goes silent; keep-alives go unanswered until the user timeout.
    let mut timed_out = false;
    for _ in 0..120 {
        now += Duration::from_millis(500);
        exchange(&mut b, &mut peer, now);
        if events(&mut b).contains(&Event::TimedOut(conns[5].id)) {
            timed_out = true;
            break;
        }
    }
    assert!(timed_out, "no user timeout within a minute");
    assert_eq!(held(&b), 0, "after the user timeout");
    b.release(conns[5].id).expect("release");
    b.release(conns[0].id).expect("release");
    assert_eq!(held(&b), 0);
    assert_eq!(b.live(), 0, "every connection released");
}

/// A peer that puts each segment past a hole of its own (70 disjoint 10-octet segments on
/// one connection, well within its window and the budget) makes the connection hold 64
/// blocks, the most it tracks; the other six are dropped, neither held nor SACKed (RFC
/// 2018 3, RFC 9293 3.10.7.4), and counted (`TcpTotals::out_of_order_no_block`; before,
/// such drops were counted nowhere). Once the holes fill, everything held goes in order,
/// byte-exact, and the six arrive when sent again.
#[test]
fn a_connection_tracks_at_most_64_holes_and_counts_the_segments_it_drops_for_want_of_a_block() {
    const SEGS: usize = 70;
    const HELD: usize = 64;
    let (mut b, mut peer, l) = server(1 << 20);
    let now = Instant::from_millis(1);
    let c = open(&mut b, &mut peer, l, 1, now)[0];
    // Ten at a time: the link holds fewer frames than seventy.
    let mut acks = Vec::new();
    for k in 0..SEGS {
        inject(&mut peer, now, &c.data(10 + 20 * k, 10, TcpControl::Psh));
        if k % 10 == 9 {
            acks.extend(exchange(&mut b, &mut peer, now));
        }
    }
    assert_eq!(
        acks.len(),
        SEGS,
        "one ACK for each out-of-order segment: {acks:?}"
    );
    // What the connection SACKs is what it holds: the last six report no more octets.
    assert!(acks[HELD..]
        .iter()
        .all(|a| a.sacked == acks[HELD - 1].sacked));
    assert!(acks.iter().all(|a| a.ack == Some(PEER_ISS + 1) && !a.rst));
    let totals = || b.tcp_totals().expect("Warpcore's TCP");
    assert_eq!(totals().out_of_order, SEGS as u64);
    assert_eq!(totals().out_of_order_no_block, (SEGS - HELD) as u64);
    assert_eq!(held(&b), HELD * 10);
    assert_eq!(refused(&b), 0, "the budget refused none");
    // The holes, filled by one segment up to the first dropped one, then the rest again.
    let upto = 10 + 20 * HELD;
    inject(&mut peer, now, &c.data(0, upto, TcpControl::Psh));
    exchange(&mut b, &mut peer, now);
    assert_eq!(held(&b), 0);
    let end = 10 + 20 * SEGS;
    inject(&mut peer, now, &c.data(upto, end - upto, TcpControl::Psh));
    exchange(&mut b, &mut peer, now);
    let mut got = vec![0; end];
    assert_eq!(b.recv(c.id, &mut got), Ok(end));
    assert!(got
        .iter()
        .enumerate()
        .all(|(i, &o)| o == pattern(7, i as u64)));
}

/// The TCP segments B sent (their octets, from the TCP header on), polled once at `now`,
/// answering B's ARP requests for A: every frame within the link's MTU, its IP total
/// length that of its TCP segment.
fn raw_exchange(b: &mut Stack<LinkEnd>, peer: &mut LinkEnd, now: Instant) -> Vec<Vec<u8>> {
    b.poll(now);
    let mut out = Vec::new();
    let mut arp = false;
    while let Some((rx, _tx)) = peer.receive(now) {
        let f = rx.consume(|f| f.to_vec());
        if let Some(reply) = arp_reply(&f, A_MAC) {
            inject(peer, now, &reply);
            arp = true;
            continue;
        }
        assert!(f.len() <= 14 + 1500, "a frame of {} octets", f.len());
        let e = EthernetFrame::new_checked(&f[..]).expect("a frame");
        let ip = Ipv4Packet::new_checked(e.payload()).expect("IPv4");
        assert_eq!(usize::from(ip.total_len()), f.len() - 14);
        let t = TcpPacket::new_checked(ip.payload()).expect("TCP");
        assert!(
            t.verify_checksum(&IP_B.into(), &IP_A.into()),
            "TCP checksum"
        );
        out.push(ip.payload().to_vec());
    }
    if arp {
        out.extend(raw_exchange(b, peer, now));
    }
    out
}

/// The SACK blocks of the TCP segment `tcp`, read from its option octets (all of them:
/// smoltcp's parser keeps three), as the peer's stream offsets.
fn sack_blocks_of(tcp: &[u8]) -> Vec<(usize, usize)> {
    let hl = usize::from(tcp[12] >> 4) * 4;
    let mut at = 20;
    while at < hl {
        match tcp[at] {
            0 => break,
            1 => at += 1,
            kind => {
                let len = usize::from(tcp[at + 1]);
                if kind == 5 {
                    assert_eq!((len - 2) % 8, 0, "a SACK option of {len} octets");
                    let off = |b: &[u8]| {
                        u32::from_be_bytes(b.try_into().unwrap()).wrapping_sub(PEER_ISS as u32 + 1)
                            as usize
                    };
                    return tcp[at + 2..at + len]
                        .chunks(8)
                        .map(|b| (off(&b[..4]), off(&b[4..])))
                        .collect();
                }
                at += len;
            }
        }
    }
    Vec::new()
}

/// RFC 2018 3 and 4 at the host: a peer that agreed SACK and no timestamps sends four
/// segments, a hole before each. The host's ACK frames carry as many blocks as 40 octets of
/// options hold, four (a 56-octet header), the most recent first; a copy of a held segment
/// brings a D-SACK block first and three SACK blocks after it (RFC 2883 4); data segments
/// carry the four blocks too, each frame within the MTU.
#[test]
fn a_host_without_timestamps_acks_four_holes_with_four_sack_blocks() {
    let (mut b, mut peer, l) = server(64 * 1024);
    let now = Instant::from_millis(1);
    let c = open(&mut b, &mut peer, l, 1, now)[0];
    let mut last = Vec::new();
    for k in [1, 3, 5, 7] {
        inject(&mut peer, now, &c.data(k * SEG, SEG, TcpControl::Psh));
        let sent = raw_exchange(&mut b, &mut peer, now);
        assert_eq!(sent.len(), 1, "one ACK for each out-of-order segment");
        last = sent[0].clone();
    }
    assert_eq!(
        usize::from(last[12] >> 4) * 4,
        56,
        "20 + 36 octets of header"
    );
    let blocks = sack_blocks_of(&last);
    assert_eq!(
        blocks,
        vec![
            (7 * SEG, 8 * SEG),
            (5 * SEG, 6 * SEG),
            (3 * SEG, 4 * SEG),
            (SEG, 2 * SEG)
        ],
        "the most recent first, the ones reported before after it"
    );
    // A copy of the segment at 3: the D-SACK block first, three SACK blocks after it.
    inject(&mut peer, now, &c.data(3 * SEG, SEG, TcpControl::Psh));
    let sent = raw_exchange(&mut b, &mut peer, now);
    assert_eq!(sent.len(), 1);
    assert_eq!(usize::from(sent[0][12] >> 4) * 4, 56);
    let blocks = sack_blocks_of(&sent[0]);
    assert_eq!(blocks.len(), 4, "{blocks:?}");
    assert_eq!(blocks[0], (3 * SEG, 4 * SEG), "the D-SACK block first");
    // RFC 2883 4: the block holding the duplicate second.
    assert_eq!(blocks[1], (3 * SEG, 4 * SEG), "{blocks:?}");
    let held = [
        (SEG, 2 * SEG),
        (3 * SEG, 4 * SEG),
        (5 * SEG, 6 * SEG),
        (7 * SEG, 8 * SEG),
    ];
    assert!(blocks[1..].iter().all(|x| held.contains(x)), "{blocks:?}");
    assert!(
        blocks[1] != blocks[2] && blocks[2] != blocks[3] && blocks[1] != blocks[3],
        "{blocks:?}"
    );
    // The next ACK (a fifth hole filled past the others) has four SACK blocks again.
    inject(&mut peer, now, &c.data(9 * SEG, SEG, TcpControl::Psh));
    let sent = raw_exchange(&mut b, &mut peer, now);
    let blocks = sack_blocks_of(&sent[0]);
    assert_eq!(blocks.len(), 4, "{blocks:?}");
    assert_eq!(blocks[0], (9 * SEG, 10 * SEG));
    // Data the host sends meanwhile carries the four blocks too, its payload 8 octets
    // shorter for the fourth (RFC 9293 3.7.1: the MSS counts no options): a full segment's
    // frame is exactly the MTU (`raw_exchange` checks them all).
    let data = vec![5u8; 3 * 1460];
    assert_eq!(b.send(c.id, &data), Ok(data.len()));
    let sent = raw_exchange(&mut b, &mut peer, now);
    let payloads: Vec<usize> = sent
        .iter()
        .map(|t| t.len() - usize::from(t[12] >> 4) * 4)
        .collect();
    assert!(
        sent.iter()
            .all(|t| usize::from(t[12] >> 4) * 4 == 56 && sack_blocks_of(t).len() == 4),
        "{payloads:?}"
    );
    assert_eq!(payloads[0], 1460 - 36, "{payloads:?}");
    assert_eq!(payloads.iter().sum::<usize>(), data.len(), "{payloads:?}");
    // The holes fill: the stream arrives whole, the ACKs shrink back to no SACK option.
    for k in [0, 2, 4, 6, 8] {
        inject(&mut peer, now, &c.data(k * SEG, SEG, TcpControl::Psh));
        for s in raw_exchange(&mut b, &mut peer, now) {
            assert!(sack_blocks_of(&s).len() <= 4);
        }
    }
    read_all(&mut b, c, 10 * SEG);
}

/// A pure ACK from the peer (A) on `port` carrying the four SACK blocks `blocks` (sequence
/// numbers) in one 34-octet option after two NOPs: a 56-octet header (RFC 2018 3), which
/// smoltcp's writer cannot make.
fn ack_with_four_blocks(port: u16, seq: i32, ack: i32, blocks: [(u32, u32); 4]) -> Vec<u8> {
    let mut t = [0u8; 56];
    t[0..2].copy_from_slice(&port.to_be_bytes());
    t[2..4].copy_from_slice(&5000u16.to_be_bytes());
    t[4..8].copy_from_slice(&seq.to_be_bytes());
    t[8..12].copy_from_slice(&ack.to_be_bytes());
    t[12] = (56 / 4) << 4;
    t[13] = 0x10;
    t[14..16].copy_from_slice(&0xffffu16.to_be_bytes());
    t[20..24].copy_from_slice(&[1, 1, 5, 34]);
    for (i, (l, r)) in blocks.iter().enumerate() {
        t[24 + 8 * i..28 + 8 * i].copy_from_slice(&l.to_be_bytes());
        t[28 + 8 * i..32 + 8 * i].copy_from_slice(&r.to_be_bytes());
    }
    let mut f = frame(port, TcpControl::None, seq, Some(ack), &[]);
    f.truncate(34);
    f.extend_from_slice(&t);
    let mut ip = Ipv4Packet::new_unchecked(&mut f[14..]);
    ip.set_total_len(20 + 56);
    ip.fill_checksum();
    let mut tcp = TcpPacket::new_unchecked(&mut f[34..]);
    tcp.fill_checksum(&IP_A.into(), &IP_B.into());
    f
}

/// RFC 2018 3 and RFC 6675 at the host: the host sends eight segments, the peer (SACK, no
/// timestamps) answers with one ACK whose SACK option holds four blocks, segments 7, 5, 3
/// and 1. Segment 1, SACKed only by the fourth block, is never sent again while the host
/// recovers the holes 0, 2, 4 and 6 (before any retransmission timeout, which may clear
/// the scoreboard, RFC 2018 8); segment 0 is.
#[test]
fn a_host_takes_the_fourth_sack_block_of_a_peer_without_timestamps() {
    let (mut b, mut peer, l) = server(64 * 1024);
    let mut now = Instant::from_millis(1);
    let c = open(&mut b, &mut peer, l, 1, now)[0];
    let data: Vec<u8> = (0..8 * 1460).map(|i| pattern(3, i as u64)).collect();
    assert_eq!(b.send(c.id, &data), Ok(data.len()));
    let sent = raw_exchange(&mut b, &mut peer, now);
    let base = (c.b_iss as u32).wrapping_add(1);
    let segs: Vec<(u32, usize)> = sent
        .iter()
        .map(|t| {
            let hl = usize::from(t[12] >> 4) * 4;
            let seq = u32::from_be_bytes(t[4..8].try_into().unwrap());
            (seq.wrapping_sub(base), t.len() - hl)
        })
        .filter(|&(_, n)| n > 0)
        .collect();
    assert_eq!(segs.len(), 8, "{segs:?}");
    let range = |k: usize| {
        let (o, n) = segs[k];
        (base.wrapping_add(o), base.wrapping_add(o + n as u32))
    };
    now += Duration::from_millis(1);
    inject(
        &mut peer,
        now,
        &ack_with_four_blocks(
            c.port,
            PEER_ISS + 1,
            base as i32,
            [range(7), range(5), range(3), range(1)],
        ),
    );
    let rtos = |b: &Stack<LinkEnd>| b.tcp_totals().expect("Warpcore's TCP").rtos;
    let mut resent = Vec::new();
    let end = now + Duration::from_millis(3000);
    while now < end && rtos(&b) == 0 {
        for t in raw_exchange(&mut b, &mut peer, now) {
            let hl = usize::from(t[12] >> 4) * 4;
            if t.len() > hl {
                let seq = u32::from_be_bytes(t[4..8].try_into().unwrap()).wrapping_sub(base);
                resent.push(segs.iter().position(|&(o, _)| o == seq));
            }
        }
        now += Duration::from_micros(250);
    }
    assert!(
        !resent.contains(&Some(1)),
        "segment 1, SACKed by the fourth block, sent again: {resent:?}"
    );
    assert!(resent.contains(&Some(0)), "{resent:?}");
}
