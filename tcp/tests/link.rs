//! Two stacks over the in-memory link: bulk transfers with and without injected faults,
//! back-pressure, hostile input and handle hygiene.

mod common;

use common::*;
use smoltcp::phy::{Device, RxToken, TxToken};
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol, IpProtocol,
    Ipv4Address, Ipv4Packet, Ipv4Repr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
};
use warpcore_tcp::link::{self, Faults, LinkConfig, LinkEnd};
use warpcore_tcp::{Congestion, Event, Stack, StackConfig, StackError, TcpTuning};

const MIB: u64 = 1 << 20;

fn stacks(cfg: &LinkConfig) -> (Stack<LinkEnd>, Stack<LinkEnd>) {
    let (ea, eb) = link::pair(cfg);
    let a = Stack::new(ea, &config(1, IP_A), Instant::ZERO).expect("stack a");
    let b = Stack::new(eb, &config(2, IP_B), Instant::ZERO).expect("stack b");
    (a, b)
}

/// Two stacks over a link whose two directions have `faults(seed_ab)` and
/// `faults(seed_ba)`, after `bytes` each way under the simulated clock (at most `limit`
/// of it); returns them and the simulated time taken.
fn bulk_over(
    faults: impl Fn(u64) -> Faults,
    (seed_ab, seed_ba): (u64, u64),
    bytes: u64,
    limit: Duration,
) -> (Stack<LinkEnd>, Stack<LinkEnd>, Duration) {
    let cfg = LinkConfig {
        faults_ab: faults(seed_ab),
        faults_ba: faults(seed_ba),
        ..LinkConfig::default()
    };
    let (mut a, mut b) = stacks(&cfg);
    let t = bidirectional(
        &mut a,
        &mut b,
        bytes,
        &TcpTuning::default(),
        sim_clock,
        next_delivery,
        limit,
    );
    (a, b, t)
}

#[test]
fn clean_link_64_mib_each_way() {
    let (mut a, mut b) = stacks(&LinkConfig::default());
    let t = bidirectional(
        &mut a,
        &mut b,
        64 * MIB,
        &TcpTuning::default(),
        sim_clock,
        next_delivery,
        Duration::from_secs(600),
    );
    let (sa, sb) = (a.device().tx_fault_stats(), b.device().tx_fault_stats());
    assert_eq!(sa.lost + sb.lost, 0);
    // 64 MiB in full-size segments is at least 46k frames each way.
    assert!(sa.sent > 46_000 && sb.sent > 46_000, "{sa:?} {sb:?}");
    eprintln!("clean link: {t} simulated, a->b {sa:?}, b->a {sb:?}");
}

#[test]
fn lossy_reordering_duplicating_link_64_mib_each_way() {
    let faults = |seed| Faults {
        seed,
        loss: 0.01,
        duplicate: 0.01,
        reorder: 0.02,
        reorder_delay: Duration::from_micros(300),
        latency: Duration::from_micros(50),
        ..Faults::default()
    };
    let (a, b, t) = bulk_over(
        faults,
        (0xdead_beef, 0x0bad_cafe),
        64 * MIB,
        Duration::from_secs(3600),
    );
    let (sa, sb) = (a.device().tx_fault_stats(), b.device().tx_fault_stats());
    for s in [sa, sb] {
        assert!(
            s.lost > 100 && s.duplicated > 100 && s.overtaken > 100,
            "{s:?}"
        );
    }
    eprintln!("faulty link: {t} simulated, a->b {sa:?}, b->a {sb:?}");
}

#[test]
fn corrupting_link_is_caught_by_checksums() {
    let faults = |seed| Faults {
        seed,
        corrupt: 0.02,
        loss: 0.005,
        ..Faults::default()
    };
    let (a, b, _) = bulk_over(faults, (7, 8), 8 * MIB, Duration::from_secs(3600));
    let (sa, sb) = (a.device().tx_fault_stats(), b.device().tx_fault_stats());
    assert!(sa.corrupted > 50 && sb.corrupted > 50, "{sa:?} {sb:?}");
}

#[test]
fn rate_limited_jumbo_link_with_backpressure() {
    let faults = |seed| Faults {
        seed,
        latency: Duration::from_micros(100),
        rate_bytes_per_s: Some(1_250_000_000),
        ..Faults::default()
    };
    let cfg = LinkConfig {
        mtu: 9000,
        // A tiny queue: the device must refuse tokens and TCP must keep the data.
        queue_frames: 8,
        faults_ab: faults(3),
        faults_ba: faults(4),
        ..LinkConfig::default()
    };
    let (mut a, mut b) = stacks(&cfg);
    let t = bidirectional(
        &mut a,
        &mut b,
        16 * MIB,
        &TcpTuning::default(),
        sim_clock,
        next_delivery,
        Duration::from_secs(600),
    );
    assert!(a.device_stats().tx_backpressure > 0);
    // 16 MiB at 10 Gbit/s takes at least 13.4 ms of link time.
    assert!(t >= Duration::from_millis(13), "{t}");
}

/// Writes one raw frame into the link from the "attacker" end.
fn inject(end: &mut LinkEnd, now: Instant, frame: &[u8]) {
    end.transmit(now)
        .expect("room on the link")
        .consume(frame.len(), |b| b.copy_from_slice(frame));
}

fn drain(end: &mut LinkEnd, now: Instant) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while let Some((rx, _tx)) = end.receive(now) {
        out.push(rx.consume(|f| f.to_vec()));
    }
    out
}

fn tcp_frame(dst_port: u16, control: TcpControl, ack: Option<u32>, bad_checksum: bool) -> Vec<u8> {
    tcp_frame_from(IP_A, dst_port, control, ack, bad_checksum)
}

/// [`tcp_frame`] from IPv4 source `src` (the Ethernet source stays A's unicast address).
fn tcp_frame_from(
    src: Ipv4Address,
    dst_port: u16,
    control: TcpControl,
    ack: Option<u32>,
    bad_checksum: bool,
) -> Vec<u8> {
    let a_mac = EthernetAddress([0x02, 0, 0, 0, 0, 1]);
    let b_mac = EthernetAddress([0x02, 0, 0, 0, 0, 2]);
    let mut buf = tcp_frame_between((src, a_mac), (IP_B, b_mac), dst_port, control, ack);
    if bad_checksum {
        buf[34 + 16] ^= 0xff;
    }
    buf
}

/// A TCP segment without data or options from `src` (IPv4 address and MAC), port 40000,
/// sequence number 1000, to `dst` at `dst_port`, checksums right.
fn tcp_frame_between(
    src: (Ipv4Address, EthernetAddress),
    dst: (Ipv4Address, EthernetAddress),
    dst_port: u16,
    control: TcpControl,
    ack: Option<u32>,
) -> Vec<u8> {
    let ip = Ipv4Repr {
        src_addr: src.0,
        dst_addr: dst.0,
        next_header: IpProtocol::Tcp,
        payload_len: 20,
        hop_limit: 64,
    };
    let tcp = TcpRepr {
        src_port: 40000,
        dst_port,
        control,
        seq_number: TcpSeqNumber(1000),
        ack_number: ack.map(|a| TcpSeqNumber(a as i32)),
        window_len: 1000,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None, None, None],
        timestamp: None,
        payload: &[],
    };
    let mut buf = vec![0u8; 14 + 20 + 20];
    let mut eth = EthernetFrame::new_unchecked(&mut buf);
    eth.set_dst_addr(dst.1);
    eth.set_src_addr(src.1);
    eth.set_ethertype(EthernetProtocol::Ipv4);
    let caps = smoltcp::phy::ChecksumCapabilities::default();
    ip.emit(&mut Ipv4Packet::new_unchecked(&mut buf[14..]), &caps);
    tcp.emit(
        &mut TcpPacket::new_unchecked(&mut buf[34..]),
        &src.0.into(),
        &dst.0.into(),
        &caps,
    );
    buf
}

#[test]
fn hostile_frames_are_dropped_or_reset_without_panic() {
    let (attacker, eb) = link::pair(&LinkConfig::default());
    let mut attacker = attacker;
    let mut b = Stack::new(eb, &config(2, IP_B), Instant::ZERO).expect("stack");
    let _l = b.listen(5000, 1, &TcpTuning::default()).expect("listen");
    let mut now = Instant::ZERO;

    // Garbage of every length, an unknown EtherType, a truncated IPv4 header.
    for len in 0..80usize {
        let junk: Vec<u8> = (0..len).map(|i| (i * 37 + len) as u8).collect();
        inject(&mut attacker, now, &junk);
    }
    let mut unknown = tcp_frame(5000, TcpControl::Syn, None, false);
    unknown[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
    inject(&mut attacker, now, &unknown);
    let truncated = tcp_frame(5000, TcpControl::Syn, None, false);
    inject(&mut attacker, now, &truncated[..30]);
    // A SYN with a wrong checksum must be ignored (no SYN-ACK).
    inject(
        &mut attacker,
        now,
        &tcp_frame(5000, TcpControl::Syn, None, true),
    );
    for _ in 0..10 {
        b.poll(now);
        now += Duration::from_millis(1);
    }
    let replies = drain(&mut attacker, now);
    assert!(
        replies.iter().all(|f| {
            let e = EthernetFrame::new_checked(&f[..]).expect("valid reply");
            e.ethertype() != EthernetProtocol::Ipv4
        }),
        "no TCP reply to garbage or bad checksums"
    );

    // An ACK for a connection that does not exist gets a RST (after the stack resolved our
    // address: answer its ARP request and send the ACK again).
    inject(
        &mut attacker,
        now,
        &tcp_frame(6000, TcpControl::None, Some(77), false),
    );
    b.poll(now);
    for f in drain(&mut attacker, now) {
        if let Some(reply) = arp_reply(&f, EthernetAddress([0x02, 0, 0, 0, 0, 1])) {
            inject(&mut attacker, now, &reply);
        }
    }
    b.poll(now);
    inject(
        &mut attacker,
        now,
        &tcp_frame(6000, TcpControl::None, Some(77), false),
    );
    b.poll(now);
    let replies = drain(&mut attacker, now);
    let rst = replies
        .iter()
        .filter_map(|f| {
            let e = EthernetFrame::new_checked(&f[..]).ok()?;
            let ip = Ipv4Packet::new_checked(e.payload()).ok()?;
            let t = TcpPacket::new_checked(ip.payload()).ok()?;
            Some((t.rst(), t.seq_number()))
        })
        .next();
    assert_eq!(
        rst,
        Some((true, TcpSeqNumber(77))),
        "RST answers the stray ACK"
    );
    // Nothing of it opened a connection or raised anything on the listener.
    let events: Vec<Event> = std::iter::from_fn(|| b.next_event()).collect();
    assert_eq!(events, [], "hostile frames raised events");
}

/// RFC 1122 3.2.1.3: a datagram whose IPv4 source is unspecified, a broadcast (limited or
/// our subnet's) or multicast is discarded silently. A stray segment from such a source
/// drew a RST addressed to it (RFC 9293 3.10.7.1 answers the sender, and there is none):
/// the unicast Ethernet source let it through, as it let ICMP and SYNs not.
#[test]
fn a_stray_segment_from_a_group_or_unspecified_source_draws_no_rst() {
    let (mut attacker, eb) = link::pair(&LinkConfig::default());
    let mut b = Stack::new(eb, &config(2, IP_B), Instant::ZERO).expect("stack");
    let now = Instant::ZERO;
    let sources = [
        Ipv4Address::BROADCAST,
        Ipv4Address::new(198, 18, 0, 255),
        Ipv4Address::new(224, 0, 0, 1),
        Ipv4Address::UNSPECIFIED,
    ];
    for src in sources {
        inject(
            &mut attacker,
            now,
            &tcp_frame_from(src, 6000, TcpControl::None, Some(77), false),
        );
        b.poll(now);
        let replies = drain(&mut attacker, now);
        assert!(replies.is_empty(), "{src}: {} replies", replies.len());
    }
    assert_eq!(b.host_stats().expect("ours").rst_sent, 0);
    // The same segment from a unicast source is answered.
    inject(
        &mut attacker,
        now,
        &tcp_frame(6000, TcpControl::None, Some(77), false),
    );
    b.poll(now);
    assert_eq!(drain(&mut attacker, now).len(), 1, "one RST");
}

/// RFC 1122 3.2.1.3 (g): an address of the form {127, <any>} "MUST NOT appear outside a
/// host", and "a host MUST silently discard an incoming datagram containing an IP source
/// address that is invalid by the rules of this section". (So is {0, <host>}, (b), outside
/// of a host's own initialisation, which no TCP segment is.) A stray ACK from 127.0.0.1 or
/// 0.1.2.3 on the wire drew a RST addressed to that source; a SYN from 127.0.0.1 to a
/// listener of a host with a gateway made a half-open connection whose SYN-ACK went out
/// towards 127.0.0.1 through the gateway.
#[test]
fn rfc1122_3_2_1_3_loopback_and_this_network_sources_are_discarded() {
    let (mut attacker, eb) = link::pair(&LinkConfig::default());
    let mut cfg = config(2, IP_B);
    cfg.gateway = Some(IP_A);
    let mut b = Stack::new(eb, &cfg, Instant::ZERO).expect("stack");
    let _l = b.listen(5000, 4, &TcpTuning::default()).expect("listen");
    let mut now = Instant::ZERO;
    let mut replies = Vec::new();
    for src in [Ipv4Address::new(127, 0, 0, 1), Ipv4Address::new(0, 1, 2, 3)] {
        inject(
            &mut attacker,
            now,
            &tcp_frame_from(src, 6000, TcpControl::None, Some(77), false),
        );
        b.poll(now);
        now += Duration::from_millis(1);
        b.poll(now);
        let n = drain(&mut attacker, now).len();
        if n != 0 {
            replies.push(format!(
                "stray ACK from {src}: {n} replies (a RST to {src})"
            ));
        }
    }
    let lo = Ipv4Address::new(127, 0, 0, 1);
    inject(
        &mut attacker,
        now,
        &tcp_frame_from(lo, 5000, TcpControl::Syn, None, false),
    );
    b.poll(now);
    now += Duration::from_millis(1);
    b.poll(now);
    let n = drain(&mut attacker, now).len();
    if n != 0 || b.live() != 0 {
        replies.push(format!(
            "SYN from {lo}: {n} frames sent (SYN-ACK or ARP for the gateway), {} half-open",
            b.live()
        ));
    }
    assert!(replies.is_empty(), "{replies:#?}");
}

/// A stray segment without ACK carrying 10 octets, its IPv4 header with 4 octets of
/// options (IHL 6) and its frame padded past the IPv4 total length: the RST answers the
/// segment's own length (RFC 9293 3.10.7.1: <SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>),
/// not the padding's, and the options do not shift the TCP header.
#[test]
fn rfc791_a_stray_segment_with_ip_options_and_padding_draws_the_right_rst() {
    let (mut attacker, eb) = link::pair(&LinkConfig::default());
    let mut b = Stack::new(eb, &config(2, IP_B), Instant::ZERO).expect("stack");
    let now = Instant::ZERO;
    let payload = [0x55u8; 10];
    let tcp = TcpRepr {
        src_port: 40000,
        dst_port: 6000,
        control: TcpControl::Psh,
        seq_number: TcpSeqNumber(1000),
        ack_number: None,
        window_len: 1000,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None, None, None],
        timestamp: None,
        payload: &payload,
    };
    let tcp_len = 20 + payload.len();
    let mut f = vec![0u8; 14 + 24 + tcp_len + 20];
    let mut eth = EthernetFrame::new_unchecked(&mut f);
    eth.set_dst_addr(EthernetAddress([0x02, 0, 0, 0, 0, 2]));
    eth.set_src_addr(EthernetAddress([0x02, 0, 0, 0, 0, 1]));
    eth.set_ethertype(EthernetProtocol::Ipv4);
    {
        let mut ip = Ipv4Packet::new_unchecked(&mut f[14..]);
        ip.set_version(4);
        ip.set_header_len(24);
        ip.set_total_len((24 + tcp_len) as u16);
        ip.set_hop_limit(64);
        ip.set_next_header(IpProtocol::Tcp);
        ip.set_src_addr(IP_A);
        ip.set_dst_addr(IP_B);
        ip.set_dont_frag(true);
    }
    f[14 + 20..14 + 24].copy_from_slice(&[1, 1, 1, 0]); // NOP NOP NOP EOL
    Ipv4Packet::new_unchecked(&mut f[14..]).fill_checksum();
    let caps = smoltcp::phy::ChecksumCapabilities::default();
    tcp.emit(
        &mut TcpPacket::new_unchecked(&mut f[38..38 + tcp_len]),
        &IP_A.into(),
        &IP_B.into(),
        &caps,
    );
    for x in &mut f[38 + tcp_len..] {
        *x = 0xee;
    }
    inject(&mut attacker, now, &f);
    b.poll(now);
    let out = drain(&mut attacker, now);
    assert_eq!(out.len(), 1, "one RST");
    let e = EthernetFrame::new_checked(&out[0][..]).unwrap();
    let ip = Ipv4Packet::new_checked(e.payload()).unwrap();
    assert_eq!(ip.dst_addr(), IP_A);
    let t = TcpPacket::new_checked(ip.payload()).unwrap();
    assert!(t.rst() && t.ack());
    assert_eq!(t.seq_number(), TcpSeqNumber(0));
    assert_eq!(t.ack_number(), TcpSeqNumber(1010));
    assert!(t.verify_checksum(&IP_B.into(), &IP_A.into()));
    assert!(ip.verify_checksum());
}

/// A datagram that claims the stack's own address as its source came from no peer: it is
/// dropped as a martian (as Linux's `ip_route_input_slow` drops one). A SYN from our own
/// address and listening port to that port (the "land" attack) made a half-open
/// connection whose 4-tuple is its own reverse, answered with a SYN-ACK addressed to
/// ourselves, and a stray ACK from our own address drew a RST addressed to ourselves.
#[test]
fn a_segment_from_our_own_address_is_dropped() {
    let (mut attacker, eb) = link::pair(&LinkConfig::default());
    let mut b = Stack::new(eb, &config(2, IP_B), Instant::ZERO).expect("stack");
    let _l = b.listen(5000, 4, &TcpTuning::default()).expect("listen");
    let now = Instant::ZERO;
    let mut land = tcp_frame_from(IP_B, 5000, TcpControl::Syn, None, false);
    // Source port 5000 too (the frame's TCP checksum covers the ports: emit it again).
    land[34..36].copy_from_slice(&5000u16.to_be_bytes());
    TcpPacket::new_unchecked(&mut land[34..]).fill_checksum(&IP_B.into(), &IP_B.into());
    inject(&mut attacker, now, &land);
    inject(
        &mut attacker,
        now,
        &tcp_frame_from(IP_B, 6000, TcpControl::None, Some(77), false),
    );
    for _ in 0..3 {
        b.poll(now);
    }
    assert_eq!(drain(&mut attacker, now).len(), 0, "no reply");
    assert_eq!(b.live(), 0, "no half-open connection");
    // A peer's SYN is answered.
    inject(
        &mut attacker,
        now,
        &tcp_frame(5000, TcpControl::Syn, None, false),
    );
    b.poll(now);
    assert_eq!(b.live(), 1);
}

/// RFC 9293 3.10.7.1 answers each stray segment with a RST; a flood of them overflows the
/// host's control queue ([`warpcore_tcp::host::CONTROL_MAX`]), which drops the excess and
/// counts it in `control_dropped`. `rst_sent` counts the RSTs that were sent, not those
/// dropped: the two add up to the segments answered.
#[test]
fn rst_sent_counts_only_the_rsts_that_went_out() {
    // Four frames each way: the host's replies back up into its control queue.
    let cfg = LinkConfig {
        queue_frames: 4,
        ..LinkConfig::default()
    };
    let (mut attacker, eb) = link::pair(&cfg);
    let mut b = Stack::new(eb, &config(2, IP_B), Instant::ZERO).expect("stack");
    let mut now = Instant::ZERO;
    let stray = tcp_frame(6000, TcpControl::None, Some(77), false);
    const STRAY: u64 = 200;
    for _ in 0..STRAY / 4 {
        for _ in 0..4 {
            inject(&mut attacker, now, &stray);
        }
        b.poll(now);
        now += Duration::from_micros(10);
    }
    // Now read everything the host sends.
    let mut rsts = 0u64;
    for _ in 0..1000 {
        rsts += drain(&mut attacker, now).len() as u64;
        b.poll(now);
        now += Duration::from_micros(10);
    }
    rsts += drain(&mut attacker, now).len() as u64;
    let h = b.host_stats().expect("ours");
    assert!(h.control_dropped > 0, "the control queue overflowed: {h:?}");
    assert_eq!(h.rst_sent, rsts, "RSTs that reached the wire: {h:?}");
    assert_eq!(h.rst_sent + h.control_dropped, STRAY, "{h:?}");
}

#[test]
fn stale_handles_are_rejected() {
    let (mut a, mut b) = stacks(&LinkConfig::default());
    let tuning = TcpTuning {
        rx_buffer: 4096,
        tx_buffer: 4096,
        ..TcpTuning::default()
    };
    let _l = b.listen(5000, 1, &tuning).expect("listen");
    let c = a.connect((IP_B, 5000), None, &tuning).expect("connect");
    a.release(c).expect("release");
    assert_eq!(a.send(c, b"x"), Err(StackError::UnknownConnection));
    // Nothing to send or no room to read into: the handle is checked all the same.
    assert_eq!(a.send(c, b""), Err(StackError::UnknownConnection));
    assert_eq!(a.recv(c, &mut []), Err(StackError::UnknownConnection));
    let c2 = a
        .connect((IP_B, 5000), None, &tuning)
        .expect("connect again");
    assert_ne!(c, c2, "the reused slot has a new generation");
    assert_eq!(a.state(c), Err(StackError::UnknownConnection));
    let mut now = Instant::ZERO;
    let mut connected = false;
    for _ in 0..1000 {
        a.poll(now);
        b.poll(now);
        while let Some(e) = a.next_event() {
            connected |= e == Event::Connected(c2);
        }
        if connected {
            break;
        }
        now += Duration::from_micros(100);
    }
    assert!(connected);
}

#[test]
fn connection_refused_is_reported_as_reset() {
    let (mut a, mut b) = stacks(&LinkConfig::default());
    let c = a
        .connect((IP_B, 7777), None, &TcpTuning::default())
        .expect("connect");
    let mut now = Instant::ZERO;
    let mut reset = false;
    for _ in 0..1000 {
        a.poll(now);
        b.poll(now);
        while let Some(e) = a.next_event() {
            assert_ne!(e, Event::TimedOut(c), "a RST came: a reset is no timeout");
            reset |= e == Event::Reset(c);
        }
        if reset {
            break;
        }
        now += Duration::from_micros(100);
    }
    assert!(reset, "RST from a closed port ends the connect");
}

#[test]
fn capture_wrapper_writes_every_frame_as_pcap() {
    let (ea, eb) = link::pair(&LinkConfig::default());
    let cap = warpcore_tcp::Capture::new(ea, Vec::new(), 65535);
    let mut a = Stack::new(cap, &config(1, IP_A), Instant::ZERO).expect("stack a");
    let mut b = Stack::new(eb, &config(2, IP_B), Instant::ZERO).expect("stack b");
    bidirectional(
        &mut a,
        &mut b,
        MIB,
        &TcpTuning::default(),
        sim_clock,
        |_, b| b.device().next_delivery(),
        Duration::from_secs(60),
    );
    let stats = a.device_stats();
    let (frames, errors) = a.device().captured();
    assert_eq!(errors, 0);
    assert_eq!(frames, stats.rx_frames + stats.tx_frames);
    // Walk the pcap file: global header, then one record per frame.
    let (_, tmp) = a.into_device().into_parts();
    assert_eq!(&tmp[..4], &0xa1b2_c3d4u32.to_le_bytes());
    assert_eq!(u32::from_le_bytes(tmp[20..24].try_into().unwrap()), 1);
    let mut at = 24;
    let mut n = 0u64;
    let mut tcp = 0u64;
    while at < tmp.len() {
        let incl = u32::from_le_bytes(tmp[at + 8..at + 12].try_into().unwrap()) as usize;
        let frame = &tmp[at + 16..at + 16 + incl];
        let eth = EthernetFrame::new_checked(frame).expect("captured frames are Ethernet");
        if eth.ethertype() == EthernetProtocol::Ipv4 {
            let ip = Ipv4Packet::new_checked(eth.payload()).expect("IPv4");
            tcp += u64::from(ip.next_header() == IpProtocol::Tcp);
        }
        at += 16 + incl;
        n += 1;
    }
    assert_eq!(at, tmp.len());
    assert_eq!(n, frames);
    assert!(tcp > 1400, "{tcp} TCP frames for 1 MiB each way");
}

/// A one-way bulk transfer: the receiver's pure ACKs keep pace with the data (186 ACKs
/// for 188 polls that took data, where the old rule sent 23 for 197). RFC 1122
/// 4.2.3.2 asks for an ACK at least every second full-sized segment; a poll that takes a
/// burst of segments acknowledges them together, and the acknowledgement of one poll's data
/// may wait one poll for the engine's answer to carry it, but no longer (it once waited as
/// long as data kept coming: one ACK per ~160 segments over memif, the sender stalled on
/// window updates). Counted on the simulated link, so no timing enters the check.
#[test]
fn one_way_bulk_receiver_acks_at_least_every_poll_but_one() {
    let faults = |seed| Faults {
        seed,
        latency: Duration::from_micros(20),
        ..Faults::default()
    };
    let cfg = LinkConfig {
        faults_ab: faults(5),
        faults_ba: faults(6),
        ..LinkConfig::default()
    };
    let (mut a, mut b) = stacks(&cfg);
    let tuning = TcpTuning::default();
    let total = 16 * MIB;
    let _l = b.listen(5000, 2, &tuning).expect("listen");
    let ca = a.connect((IP_B, 5000), None, &tuning).expect("connect");
    let mut cb = None;
    let (mut sent, mut received, mut connected) = (0u64, 0u64, false);
    let (mut polls_with_data, mut now) = (0u64, Instant::ZERO);
    while received < total {
        assert!(
            now < Instant::from_secs(60),
            "stalled at {received} of {total}"
        );
        let before = b.device_stats();
        let mut work = a.poll(now) | b.poll(now);
        if b.device_stats().rx_frames > before.rx_frames {
            polls_with_data += 1;
        }
        while let Some(e) = a.next_event() {
            if let Event::Connected(_) = e {
                connected = true;
            }
        }
        while let Some(e) = b.next_event() {
            if let Event::Acceptable(id) = e {
                cb = b.accept(id).expect("accept");
            }
        }
        if connected {
            while sent < total {
                let off = sent;
                let n = a
                    .send_with(ca, |buf| {
                        let n = buf.len().min((total - off) as usize);
                        for (k, x) in buf[..n].iter_mut().enumerate() {
                            *x = pattern(7, off + k as u64);
                        }
                        n
                    })
                    .expect("send");
                if n == 0 {
                    break;
                }
                sent += n as u64;
                work = true;
            }
        }
        if let Some(c) = cb {
            let off = received;
            let n = b
                .recv_with(c, |data| {
                    for (k, &x) in data.iter().enumerate() {
                        assert_eq!(x, pattern(7, off + k as u64));
                    }
                    data.len()
                })
                .expect("recv");
            received += n as u64;
            work |= n > 0;
        }
        let mut wake = next_delivery(&a, &b);
        for t in [a.poll_at(now), b.poll_at(now)].into_iter().flatten() {
            wake = Some(wake.map_or(t, |w: Instant| w.min(t)));
        }
        now = sim_clock(now, work, wake);
    }
    let (data, acks) = (
        a.device().tx_fault_stats().sent,
        b.device().tx_fault_stats().sent,
    );
    eprintln!(
        "one-way bulk: {data} frames of data, {acks} ACKs, {polls_with_data} polls with data"
    );
    // Every second poll that took data produced an ACK at least (a few polls at the end
    // may leave theirs to the delayed-ACK timer).
    assert!(
        acks * 2 + 8 >= polls_with_data,
        "{acks} ACKs for {polls_with_data} polls with data ({data} data frames)"
    );
}

/// A TCP segment's sequence and acknowledgement numbers and payload length, if `frame`
/// holds one.
fn tcp_of(frame: &[u8]) -> Option<(i32, Option<i32>, usize)> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EthernetProtocol::Ipv4 {
        return None;
    }
    let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
    if ip.next_header() != IpProtocol::Tcp {
        return None;
    }
    let tcp = TcpPacket::new_checked(ip.payload()).ok()?;
    let ack = tcp.ack().then(|| tcp.ack_number().0);
    Some((tcp.seq_number().0, ack, tcp.payload().len()))
}

/// Polls `a` and `b` three times, carrying every frame between them.
fn relay_all(
    a: &mut Stack<LinkEnd>,
    mid_a: &mut LinkEnd,
    b: &mut Stack<LinkEnd>,
    mid_b: &mut LinkEnd,
    now: Instant,
) {
    for _ in 0..3 {
        a.poll(now);
        for f in drain(mid_a, now) {
            inject(mid_b, now, &f);
        }
        b.poll(now);
        for f in drain(mid_b, now) {
            inject(mid_a, now, &f);
        }
    }
}

/// RFC 5681 4.2: out-of-order segments, a segment that fills a gap and a duplicate are each
/// ACKed at once, also when several arrive in one receive burst: one ACK each, not one for
/// the burst. A loss-recovery episode's retransmissions arrive together; with one ACK for
/// all of them, the loss of that ACK left the sender (window full, no loss probe in
/// recovery) waiting for its RTO, and a peer counting duplicate ACKs saw one where the RFC
/// has it see several.
#[test]
fn a_burst_of_out_of_order_segments_draws_one_ack_each() {
    // a <-> (ea, mid_a) relay (mid_b, eb) <-> b: the test carries every frame, dropping or
    // holding the ones it chooses.
    let (ea, mut mid_a) = link::pair(&LinkConfig::default());
    let (mut mid_b, eb) = link::pair(&LinkConfig::default());
    let mut a = Stack::new(ea, &config(1, IP_A), Instant::ZERO).expect("stack a");
    let mut b = Stack::new(eb, &config(2, IP_B), Instant::ZERO).expect("stack b");
    let tuning = TcpTuning::default();
    let _l = b.listen(5000, 1, &tuning).expect("listen");
    let ca = a.connect((IP_B, 5000), None, &tuning).expect("connect");
    let (mut now, mut cb, mut connected) = (Instant::ZERO, None, false);
    while !(connected && cb.is_some()) {
        assert!(now < Instant::from_secs(5), "no connection");
        relay_all(&mut a, &mut mid_a, &mut b, &mut mid_b, now);
        while let Some(e) = a.next_event() {
            connected |= matches!(e, Event::Connected(_));
        }
        while let Some(e) = b.next_event() {
            if let Event::Acceptable(id) = e {
                cb = b.accept(id).expect("accept");
            }
        }
        now += Duration::from_micros(10);
    }
    // The last handshake ACKs delivered, nothing left on the wire.
    relay_all(&mut a, &mut mid_a, &mut b, &mut mid_b, now);

    // Five data segments from a (its initial window is ten).
    let data = vec![0x5au8; 5 * 1400];
    assert_eq!(a.send(ca, &data).expect("send"), data.len());
    a.poll(now);
    let segs: Vec<Vec<u8>> = drain(&mut mid_a, now)
        .into_iter()
        .filter(|f| tcp_of(f).is_some_and(|(_, _, n)| n > 0))
        .collect();
    assert!(segs.len() >= 5, "{} data segments", segs.len());
    let end = {
        let (seq, _, n) = tcp_of(segs.last().expect("a segment")).expect("tcp");
        seq.wrapping_add(n as i32)
    };
    // The pure ACKs b sends for what one poll read (and the poll after it, to which it may
    // defer an ACK owed for data).
    let acks_of_a_burst = |b: &mut Stack<LinkEnd>, mid_b: &mut LinkEnd, now: Instant| {
        b.poll(now);
        b.poll(now);
        drain(mid_b, now)
            .into_iter()
            .filter_map(|f| tcp_of(&f))
            .filter(|&(_, ack, n)| ack.is_some() && n == 0)
            .map(|(_, ack, _)| ack.expect("ack"))
            .collect::<Vec<i32>>()
    };

    // The first lost: the others arrive together, each out of order.
    let first_seq = tcp_of(&segs[0]).expect("tcp").0;
    for f in &segs[1..] {
        inject(&mut mid_b, now, f);
    }
    let acks = acks_of_a_burst(&mut b, &mut mid_b, now);
    assert_eq!(
        acks,
        vec![first_seq; segs.len() - 1],
        "one duplicate ACK per out-of-order segment of the burst"
    );

    // The first again (filling the gap) and a duplicate of the second, together.
    now += Duration::from_micros(10);
    inject(&mut mid_b, now, &segs[0]);
    inject(&mut mid_b, now, &segs[1]);
    let acks = acks_of_a_burst(&mut b, &mut mid_b, now);
    assert_eq!(
        acks,
        vec![end, end],
        "one ACK for the segment that filled the gap, one for the duplicate"
    );
    assert_eq!(
        b.host_stats().expect("host").quick_acks,
        segs.len() as u64 + 1
    );
}

/// `a` connected to `b`'s port 5000 (accepted there), both with `tuning`, over the
/// simulated clock from zero: the connection's handle on `a` and the instant reached.
fn established(
    a: &mut Stack<LinkEnd>,
    b: &mut Stack<LinkEnd>,
    tuning: &TcpTuning,
) -> (warpcore_tcp::ConnId, Instant) {
    let _l = b.listen(5000, 1, tuning).expect("listen");
    let ca = a.connect((IP_B, 5000), None, tuning).expect("connect");
    let mut now = Instant::ZERO;
    let mut connected = false;
    while !connected {
        assert!(now < Instant::from_secs(1));
        a.poll(now);
        b.poll(now);
        while let Some(e) = a.next_event() {
            connected |= e == Event::Connected(ca);
        }
        while let Some(e) = b.next_event() {
            if let Event::Acceptable(l) = e {
                b.accept(l).expect("accept");
            }
        }
        now += Duration::from_micros(100);
    }
    (ca, now)
}

/// An idle connection with a user timeout and no keep-alive never times out, so it arms no
/// timer for the timeout either: once the peer has been silent for `timeout`, its timer
/// does not fire at every poll and `poll_at` names no instant already past.
#[test]
fn an_idle_connection_without_keepalive_rests_past_its_timeout() {
    let (mut a, mut b) = stacks(&LinkConfig::default());
    let tuning = TcpTuning {
        keep_alive: None,
        timeout: Some(Duration::from_millis(100)),
        ..TcpTuning::default()
    };
    let (ca, mut now) = established(&mut a, &mut b, &tuning);
    for _ in 0..100 {
        a.poll(now);
        b.poll(now);
        now += Duration::from_micros(100);
    }
    // Idle now. Jump past the timeout and keep polling.
    now += Duration::from_secs(1);
    a.poll(now);
    assert_eq!(a.state(ca), Ok(smoltcp::socket::tcp::State::Established));
    let fired0 = a.host_stats().expect("host").timers_fired;
    for _ in 0..1000 {
        now += Duration::from_millis(1);
        a.poll(now);
    }
    let fired = a.host_stats().expect("host").timers_fired - fired0;
    eprintln!(
        "timers fired in 1000 idle polls: {fired}; poll_at {:?} at {now}",
        a.poll_at(now)
    );
    assert!(
        fired < 10,
        "an idle connection's timer fired {fired} times in 1 s"
    );
    assert!(
        a.poll_at(now).is_none_or(|t| t > now),
        "poll_at says now while idle"
    );
    // Data after the idle spell, to a peer that answers at once: nothing times out (the
    // silence counts from when we began to wait for an answer, not from the last segment
    // heard before the idle spell).
    assert_eq!(a.send(ca, b"after idle").expect("send"), 10);
    for _ in 0..50 {
        a.poll(now);
        b.poll(now);
        now += Duration::from_micros(100);
    }
    assert_eq!(a.state(ca), Ok(smoltcp::socket::tcp::State::Established));
}

/// A connect whose next hop never answers ARP (its SYN never leaves) ends on the user
/// timeout, keep-alive or not, and says why: [`Event::NeighborUnreachable`], not the
/// [`Event::TimedOut`] of a peer that got the SYN and stayed silent (what Linux reports as
/// `EHOSTUNREACH` rather than `ETIMEDOUT`).
#[test]
fn a_connect_to_an_unresolved_next_hop_ends_on_the_user_timeout() {
    let (ea, _silent) = link::pair(&LinkConfig::default());
    let mut a = Stack::new(ea, &config(1, IP_A), Instant::ZERO).expect("stack a");
    let tuning = TcpTuning {
        keep_alive: None,
        timeout: Some(Duration::from_millis(100)),
        ..TcpTuning::default()
    };
    let c = a
        .connect(
            (smoltcp::wire::Ipv4Address::new(198, 18, 0, 77), 5000),
            None,
            &tuning,
        )
        .expect("connect");
    let mut now = Instant::ZERO;
    let mut timed_out = false;
    while !timed_out && now < Instant::from_secs(1) {
        a.poll(now);
        while let Some(e) = a.next_event() {
            assert_ne!(e, Event::Reset(c), "no RST came: a timeout is no reset");
            assert_ne!(e, Event::TimedOut(c), "the next hop failed, not the peer");
            timed_out |= e == Event::NeighborUnreachable(c);
        }
        now += Duration::from_millis(10);
    }
    assert!(timed_out, "the connect never gave up on its next hop");
}

/// An established connection whose peer vanishes: while its ARP entry lasts, segments
/// still leave and the user timeout is the peer's silence ([`Event::TimedOut`]); once the
/// entry has expired and the refresh went unanswered, nothing can leave any more and the
/// timeout is the next hop's failure ([`Event::NeighborUnreachable`], Linux's
/// `EHOSTUNREACH` after its neighbour entry failed), not a peer that heard us and said
/// nothing.
#[test]
fn an_established_connection_that_loses_its_next_hop_says_so() {
    for (timeout_s, hop_lost) in [(5, false), (90, true)] {
        let (mut a, mut b) = stacks(&LinkConfig::default());
        let tuning = TcpTuning {
            keep_alive: None,
            timeout: Some(Duration::from_secs(timeout_s)),
            ..TcpTuning::default()
        };
        let (ca, mut now) = established(&mut a, &mut b, &tuning);
        // b goes away: it answers neither the data nor ARP from here on.
        assert_eq!(a.send(ca, b"into the void").expect("send"), 13);
        let start = now;
        let mut ended = None;
        while ended.is_none() && now < start + Duration::from_secs(timeout_s + 30) {
            a.poll(now);
            while let Some(e) = a.next_event() {
                assert_ne!(e, Event::Reset(ca), "no RST came: a timeout is no reset");
                if matches!(e, Event::TimedOut(c) | Event::NeighborUnreachable(c) if c == ca) {
                    ended = Some(e);
                }
            }
            now += Duration::from_millis(10);
        }
        let want = if hop_lost {
            Event::NeighborUnreachable(ca)
        } else {
            Event::TimedOut(ca)
        };
        assert_eq!(ended, Some(want), "user timeout {timeout_s} s");
        let waited = now - start;
        assert!(
            waited >= Duration::from_secs(timeout_s),
            "gave up after {waited}, before the user timeout of {timeout_s} s"
        );
    }
}

/// `poll_at` names the ARP retry of the next hops connections wait for only: a request for
/// an address whose connection was released, never answered, does not make it name an
/// instant long past while another connection waits for ARP.
#[test]
fn poll_at_ignores_the_arp_retry_of_an_address_nobody_waits_for() {
    let (ea, _silent) = link::pair(&LinkConfig::default());
    let mut a = Stack::new(ea, &config(1, IP_A), Instant::ZERO).expect("stack a");
    let tuning = TcpTuning::default();
    let mut now = Instant::ZERO;
    let c1 = a
        .connect(
            (smoltcp::wire::Ipv4Address::new(198, 18, 0, 77), 5000),
            None,
            &tuning,
        )
        .expect("connect");
    a.poll(now);
    a.release(c1).expect("release");
    now += Duration::from_secs(1);
    let _c2 = a
        .connect(
            (smoltcp::wire::Ipv4Address::new(198, 18, 0, 78), 5000),
            None,
            &tuning,
        )
        .expect("connect");
    a.poll(now);
    let at = a.poll_at(now);
    eprintln!("poll_at({now}) = {at:?}");
    assert!(
        at.is_none_or(|t| t > now),
        "nothing is due now (the request for .78 just went out), yet poll_at says {at:?}"
    );
}

/// A SYN for a listening port from `src` (Ethernet source `src_mac`), checksums right.
fn syn_from(src: smoltcp::wire::Ipv4Address, src_mac: EthernetAddress) -> Vec<u8> {
    let mut f = tcp_frame(5000, TcpControl::Syn, None, false);
    let mut eth = EthernetFrame::new_unchecked(&mut f);
    eth.set_src_addr(src_mac);
    let mut ipp = Ipv4Packet::new_unchecked(&mut f[14..]);
    ipp.set_src_addr(src);
    ipp.fill_checksum();
    let mut tp = TcpPacket::new_unchecked(&mut f[34..]);
    tp.fill_checksum(&src.into(), &IP_B.into());
    f
}

/// An ICMP echo request to B from `src_mac` (IPv4 source IP_A).
fn echo_request(src_mac: EthernetAddress) -> Vec<u8> {
    let icmp = smoltcp::wire::Icmpv4Repr::EchoRequest {
        ident: 7,
        seq_no: 1,
        data: b"ping",
    };
    let ip = Ipv4Repr {
        src_addr: IP_A,
        dst_addr: IP_B,
        next_header: IpProtocol::Icmp,
        payload_len: icmp.buffer_len(),
        hop_limit: 64,
    };
    let mut buf = vec![0u8; 14 + 20 + icmp.buffer_len()];
    let mut eth = EthernetFrame::new_unchecked(&mut buf);
    eth.set_dst_addr(EthernetAddress([0x02, 0, 0, 0, 0, 2]));
    eth.set_src_addr(src_mac);
    eth.set_ethertype(EthernetProtocol::Ipv4);
    let caps = smoltcp::phy::ChecksumCapabilities::default();
    ip.emit(&mut Ipv4Packet::new_unchecked(&mut buf[14..]), &caps);
    icmp.emit(
        &mut smoltcp::wire::Icmpv4Packet::new_unchecked(&mut buf[34..]),
        &caps,
    );
    buf
}

/// RFC 1122 4.2.3.10 / 3.2.1.3: a SYN from a broadcast or multicast source, IPv4 or
/// Ethernet, is discarded (no half-open connection, no SYN-ACK to many), and an echo
/// request from a broadcast or multicast Ethernet source draws no reply; the same from a
/// unicast source is answered.
#[test]
fn syns_and_echo_requests_from_broadcast_or_multicast_sources_are_dropped() {
    let (mut attacker, eb) = link::pair(&LinkConfig::default());
    let mut b = Stack::new(eb, &config(2, IP_B), Instant::ZERO).expect("stack");
    let _l = b.listen(5000, 4, &TcpTuning::default()).expect("listen");
    let unicast = EthernetAddress([0x02, 0, 0, 0, 0, 1]);
    let bcast = EthernetAddress::BROADCAST;
    let mcast = EthernetAddress([0x01, 0, 0x5e, 0, 0, 1]);
    let mut now = Instant::ZERO;
    let mut answers = |frame: Vec<u8>, b: &mut Stack<LinkEnd>, now: &mut Instant| {
        inject(&mut attacker, *now, &frame);
        b.poll(*now);
        *now += Duration::from_micros(10);
        b.poll(*now);
        drain(&mut attacker, *now).len()
    };
    let subnet_bcast = smoltcp::wire::Ipv4Address::new(198, 18, 0, 255);
    let limited = smoltcp::wire::Ipv4Address::new(255, 255, 255, 255);
    let multicast = smoltcp::wire::Ipv4Address::new(224, 0, 0, 1);
    for (src, mac) in [
        (subnet_bcast, unicast),
        (limited, unicast),
        (multicast, unicast),
        (IP_A, bcast),
        (IP_A, mcast),
    ] {
        assert_eq!(
            answers(syn_from(src, mac), &mut b, &mut now),
            0,
            "SYN from {src} {mac}"
        );
        assert_eq!(
            b.live(),
            0,
            "a half-open connection for a SYN from {src} {mac}"
        );
    }
    for mac in [bcast, mcast] {
        assert_eq!(
            answers(echo_request(mac), &mut b, &mut now),
            0,
            "echo from {mac}"
        );
    }
    assert_eq!(
        answers(echo_request(unicast), &mut b, &mut now),
        1,
        "echo reply"
    );
    assert_eq!(
        answers(syn_from(IP_A, unicast), &mut b, &mut now),
        1,
        "SYN-ACK"
    );
}

/// A SYN flood from forged sources against a backlog of 64: every SYN beyond the backlog
/// evicts the oldest half-open connection (RFC 4987 3.4, recycling the oldest half-open
/// TCB), and the evicted
/// connection's SYN-ACK retransmission timer goes with it. Before, each evicted connection
/// left its 1 s timer entry in the wheel, which thus held about one node per SYN of the last
/// second and kept that many nodes for good.
#[test]
fn a_syn_flood_leaves_one_timer_per_half_open_connection() {
    let (mut attacker, eb) = link::pair(&LinkConfig::default());
    let cfg = StackConfig {
        max_connections: 256,
        ..config(2, IP_B)
    };
    let mut b = Stack::new(eb, &cfg, Instant::ZERO).expect("stack");
    let _l = b.listen(5000, 64, &TcpTuning::default()).expect("listen");
    let mac = EthernetAddress([0x02, 0, 0, 0, 0, 1]);
    let mut now = Instant::ZERO;
    let mut most = 0;
    for round in 0..300u32 {
        for k in 0..64u32 {
            let n = round * 64 + k;
            // A forged source port per SYN.
            let mut f = syn_from(IP_A, mac);
            let mut tp = TcpPacket::new_unchecked(&mut f[34..]);
            tp.set_src_port(1024 + n as u16);
            tp.fill_checksum(&IP_A.into(), &IP_B.into());
            inject(&mut attacker, now, &f);
        }
        b.poll(now);
        drain(&mut attacker, now);
        most = most.max(b.timers_armed().expect("warpcore host"));
        now += Duration::from_micros(100);
    }
    // 19,200 SYNs in 30 ms, well within the 1 s SYN-ACK timeout: the half-open table holds
    // its 64, and the wheel one deadline for each (nothing else is armed).
    assert_eq!(b.live(), 64);
    assert_eq!(b.timers_armed(), Some(64));
    assert!(
        most <= 64,
        "the wheel held {most} deadlines for 64 half-open connections"
    );
}

/// RFC 8985 6.2 step 4 over a link that reorders (2 % of frames held back 300 us, several
/// minimum RTTs) and loses nothing: every retransmission is spurious and draws a D-SACK
/// (RFC 2883) from Warpcore's receiver, and each round trip with one widens the sender's
/// reordering window by min_RTT / 4, up to SRTT. The senders see the D-SACKs, and the
/// widened window keeps spurious retransmissions to a fraction of the reordered segments
/// (with the window fixed at min_RTT / 4, about every reordered segment was resent).
#[test]
fn rfc8985_6_2_d_sacks_widen_the_reordering_window_on_a_reordering_link() {
    let faults = |seed| Faults {
        seed,
        reorder: 0.02,
        reorder_delay: Duration::from_micros(150),
        latency: Duration::from_micros(100),
        ..Faults::default()
    };
    let (a, b, _) = bulk_over(
        faults,
        (0x5eed_0001, 0x5eed_0002),
        16 * MIB,
        Duration::from_secs(600),
    );
    let (sa, sb) = (a.device().tx_fault_stats(), b.device().tx_fault_stats());
    let (ta, tb) = (a.tcp_totals().expect("a"), b.tcp_totals().expect("b"));
    eprintln!("a->b {sa:?}; b->a {sb:?}; a {ta:?}; b {tb:?}");
    for (s, t) in [(sa, ta), (sb, tb)] {
        assert_eq!(s.lost, 0);
        // Frames that arrived after later ones, not only frames held back.
        assert!(s.overtaken > 200, "{s:?}");
        assert!(t.dsacks_received > 0, "{t:?}");
        assert!(
            t.retransmitted_segments * 4 < s.overtaken,
            "{} segments resent for {} overtaken",
            t.retransmitted_segments,
            s.overtaken
        );
    }
}

/// Local misuse of the link: a configuration no link can work with is refused with the
/// field named ([`LinkConfig::check`]), by `try_pair` as an error and by `pair` as a panic
/// that names it. Before, a NaN probability injected nothing (the test asking for loss ran
/// clean), a queue of no frames refused every transmit, and a huge MTU overflowed.
#[test]
fn link_configurations_no_link_can_work_with_are_refused_by_field() {
    use warpcore_tcp::link::{try_pair, LinkConfigError};
    let with_ab = |f: Faults| LinkConfig {
        faults_ab: f,
        ..LinkConfig::default()
    };
    let faults = Faults::default();
    let cases: Vec<(LinkConfig, LinkConfigError)> = vec![
        (
            with_ab(Faults {
                loss: f64::NAN,
                ..faults.clone()
            }),
            LinkConfigError::Faults("faults_ab", "loss", ""),
        ),
        (
            with_ab(Faults {
                duplicate: 1.5,
                ..faults.clone()
            }),
            LinkConfigError::Faults("faults_ab", "duplicate", ""),
        ),
        (
            with_ab(Faults {
                reorder: -0.1,
                ..faults.clone()
            }),
            LinkConfigError::Faults("faults_ab", "reorder", ""),
        ),
        (
            LinkConfig {
                faults_ba: Faults {
                    corrupt: f64::INFINITY,
                    ..faults.clone()
                },
                ..LinkConfig::default()
            },
            LinkConfigError::Faults("faults_ba", "corrupt", ""),
        ),
        (
            with_ab(Faults {
                rate_bytes_per_s: Some(0),
                ..faults.clone()
            }),
            LinkConfigError::Faults("faults_ab", "rate_bytes_per_s", ""),
        ),
        (
            with_ab(Faults {
                latency: Duration::from_micros(u64::MAX),
                ..faults.clone()
            }),
            LinkConfigError::Faults("faults_ab", "latency", ""),
        ),
        (
            with_ab(Faults {
                reorder_delay: Duration::from_secs(u64::MAX / 1_000_000),
                ..faults.clone()
            }),
            LinkConfigError::Faults("faults_ab", "reorder_delay", ""),
        ),
        (
            LinkConfig {
                queue_frames: 0,
                ..LinkConfig::default()
            },
            LinkConfigError::Link("queue_frames", ""),
        ),
        (
            LinkConfig {
                queue_frames: usize::MAX,
                ..LinkConfig::default()
            },
            LinkConfigError::Link("queue_frames", ""),
        ),
        (
            LinkConfig {
                max_burst_size: 0,
                ..LinkConfig::default()
            },
            LinkConfigError::Link("max_burst_size", ""),
        ),
        (
            LinkConfig {
                mtu: usize::MAX,
                ..LinkConfig::default()
            },
            LinkConfigError::Link("mtu", ""),
        ),
        (
            LinkConfig {
                mtu: 67,
                ..LinkConfig::default()
            },
            LinkConfigError::Link("mtu", ""),
        ),
    ];
    // The field named, whatever the explanation.
    let field = |e: &LinkConfigError| match *e {
        LinkConfigError::Link(f, _) => ("", f),
        LinkConfigError::Faults(d, f, _) => (d, f),
    };
    for (cfg, want) in &cases {
        let got = try_pair(cfg).err();
        assert_eq!(got.as_ref().map(field), Some(field(want)), "{cfg:?}");
        let text = got.unwrap().to_string();
        let panic = std::panic::catch_unwind(|| drop(link::pair(cfg)))
            .expect_err("pair accepted a configuration try_pair refuses");
        let msg = panic.downcast_ref::<String>().cloned().unwrap_or_default();
        assert!(msg.contains(&text), "{msg:?} should carry {text:?}");
    }
    // The limits themselves are accepted.
    for ok in [
        LinkConfig {
            mtu: 68,
            queue_frames: 1,
            max_burst_size: 1,
            ..LinkConfig::default()
        },
        LinkConfig {
            mtu: 9000,
            queue_frames: link::QUEUE_FRAMES_MAX,
            faults_ab: Faults {
                loss: 1.0,
                duplicate: 0.0,
                latency: link::HOLD_MAX,
                reorder_delay: link::HOLD_MAX,
                rate_bytes_per_s: Some(1),
                ..Faults::default()
            },
            ..LinkConfig::default()
        },
    ] {
        assert!(try_pair(&ok).is_ok(), "{ok:?}");
    }
    // Faults changed on a live link are checked alike, and refused ones change nothing.
    let (a, _b) = link::pair(&LinkConfig::default());
    let nan = Faults {
        loss: f64::NAN,
        ..Faults::default()
    };
    assert_eq!(
        a.set_tx_faults(nan).map_err(|e| field(&e)),
        Err(("set_tx_faults", "loss"))
    );
}

/// A link whose faults ask for loss and a stack over it: what `pair` accepted before, a
/// NaN probability, ran the link without losing a frame (`Rng::chance` is false for NaN).
#[test]
#[should_panic(expected = "faults_ab.loss")]
fn a_nan_loss_probability_is_not_silently_no_loss() {
    let _ = link::pair(&LinkConfig {
        faults_ab: Faults {
            loss: f64::NAN,
            ..Faults::default()
        },
        ..LinkConfig::default()
    });
}

/// `tcp` from A (its MAC and IP_A) to B as a frame, checksums right: the peer a test plays.
fn frame_from_a(tcp: &TcpRepr<'_>) -> Vec<u8> {
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
    eth.set_src_addr(EthernetAddress([0x02, 0, 0, 0, 0, 1]));
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

/// Polls `b` until it sent a TCP segment (answering its ARP requests for IP_A as A, and
/// advancing the clock up to 3 s, past a SYN's or SYN-ACK's first retransmission): the
/// segments' flags (SYN, ACK), sequence number and payload length, with the time reached.
fn segments_from_b(
    b: &mut Stack<LinkEnd>,
    peer: &mut LinkEnd,
    mut now: Instant,
) -> (Vec<(bool, bool, i32, usize)>, Instant) {
    let a_mac = EthernetAddress([0x02, 0, 0, 0, 0, 1]);
    let end = now + Duration::from_secs(3);
    while now < end {
        b.poll(now);
        let mut segs = Vec::new();
        for f in drain(peer, now) {
            let e = EthernetFrame::new_checked(&f[..]).expect("valid frame");
            if let Some(reply) = arp_reply(&f, a_mac) {
                inject(peer, now, &reply);
            } else if let Ok(ip) = Ipv4Packet::new_checked(e.payload()) {
                let t = TcpPacket::new_checked(ip.payload()).expect("a TCP segment");
                segs.push((t.syn(), t.ack(), t.seq_number().0, t.payload().len()));
            }
        }
        if !segs.is_empty() {
            return (segs, now);
        }
        now += Duration::from_millis(10);
    }
    panic!("B sent no segment within 3 s");
}

/// A collector of `tracing` warnings (their fields and message as text), for the current
/// thread only (`tracing::subscriber::with_default`).
#[derive(Debug, Default, Clone)]
struct Warnings(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl tracing::Subscriber for Warnings {
    fn enabled(&self, m: &tracing::Metadata<'_>) -> bool {
        *m.level() == tracing::Level::WARN
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, e: &tracing::Event<'_>) {
        struct Text(String);
        impl tracing::field::Visit for Text {
            fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                self.0 += &format!("{}={:?} ", f.name(), v);
            }
        }
        let mut t = Text(String::new());
        e.record(&mut t);
        self.0.lock().expect("not poisoned").push(t.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// RFC 7323 2.3: a Window Scale shift above 14 in the peer's SYN (passive open) or SYN-ACK
/// (active open) is used as 14, and the TCP SHOULD log it. smoltcp's header parser turned
/// it into 14 before the connection saw it, silently (a debug line at most), so nothing
/// was counted nor logged. Now each such connection counts once in
/// `TcpTotals::window_scale_clamped` and gives one `tracing` warning naming the peer and
/// the shift; its window is still scaled by 14: a peer window field of 1 lets exactly
/// 16 KiB out (with 15 it would be 32 KiB; congestion control is off and 1 MiB is queued).
#[test]
fn rfc7323_2_3_a_window_scale_above_14_is_counted_logged_and_used_as_14() {
    let warnings = Warnings::default();
    let seen = warnings.0.clone();
    tracing::subscriber::with_default(warnings, || {
        let (mut peer, eb) = link::pair(&LinkConfig::default());
        let mut b = Stack::new(eb, &config(2, IP_B), Instant::ZERO).expect("stack");
        let t = TcpTuning {
            congestion: Congestion::None,
            ..TcpTuning::default()
        };
        let seg = |control, seq: i32, ack: Option<i32>, ws| TcpRepr {
            src_port: 40000,
            dst_port: 5000,
            control,
            seq_number: TcpSeqNumber(seq),
            ack_number: ack.map(TcpSeqNumber),
            window_len: 1,
            window_scale: ws,
            max_seg_size: ws.map(|_| 1460),
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp: None,
            payload: &[],
        };
        let data = vec![0x5a; 1 << 20];
        // Sends what B may and returns the payload octets it sent.
        let burst = |b: &mut Stack<LinkEnd>, peer: &mut LinkEnd, id, now| {
            assert_eq!(b.send(id, &data), Ok(data.len()));
            let (segs, _) = segments_from_b(b, peer, now);
            segs.iter().map(|s| s.3).sum::<usize>()
        };
        let mut now = Instant::ZERO;

        // Passive open: the SYN says 15.
        let l = b.listen(5000, 1, &t).expect("listen");
        inject(
            &mut peer,
            now,
            &frame_from_a(&seg(TcpControl::Syn, 1000, None, Some(15))),
        );
        let (segs, at) = segments_from_b(&mut b, &mut peer, now);
        now = at;
        let &(true, true, iss, _) = segs.first().expect("one") else {
            panic!("a SYN-ACK, not {segs:?}");
        };
        inject(
            &mut peer,
            now,
            &frame_from_a(&seg(TcpControl::None, 1001, Some(iss + 1), None)),
        );
        b.poll(now);
        let id = b.accept(l).expect("accept").expect("established");
        let sent = burst(&mut b, &mut peer, id, now);
        assert!(
            sent <= 1 << 14 && sent > (1 << 14) - 1460,
            "a window of 1 << 14 octets lets {sent} out"
        );
        assert_eq!(b.tcp_totals().expect("ours").window_scale_clamped, 1);

        // Active open: the SYN-ACK says 200.
        let c = b.connect((IP_A, 40000), Some(5001), &t).expect("connect");
        let (segs, at) = segments_from_b(&mut b, &mut peer, now);
        now = at;
        let &(true, false, iss, _) = segs.first().expect("one") else {
            panic!("a SYN, not {segs:?}");
        };
        let mut syn_ack = seg(TcpControl::Syn, 7000, Some(iss + 1), Some(200));
        syn_ack.dst_port = 5001;
        inject(&mut peer, now, &frame_from_a(&syn_ack));
        let (segs, at) = segments_from_b(&mut b, &mut peer, now);
        now = at;
        assert_eq!(segs, [(false, true, iss + 1, 0)], "the handshake's ACK");
        // A SYN's window is never scaled: the peer opens it with a scaled one.
        let mut update = seg(TcpControl::None, 7001, Some(iss + 1), None);
        update.dst_port = 5001;
        inject(&mut peer, now, &frame_from_a(&update));
        let sent = burst(&mut b, &mut peer, c, now);
        assert!(
            sent <= 1 << 14 && sent > (1 << 14) - 1460,
            "a window of 1 << 14 octets lets {sent} out"
        );
        assert_eq!(b.tcp_totals().expect("ours").window_scale_clamped, 2);
    });
    let seen = seen.lock().expect("not poisoned");
    assert_eq!(seen.len(), 2, "one warning per connection: {seen:?}");
    for (w, shift) in seen.iter().zip([15, 200]) {
        assert!(
            w.contains(&format!("peer={IP_A}")) && w.contains(&format!("shift={shift}")),
            "{w}"
        );
    }
}

/// RFC 9293 3.10.7.4 answers an unacceptable segment with an ACK; Linux limits the answers
/// to out-of-window segments without data (`tcp_oow_rate_limited`, `tcp_invalid_ratelimit`)
/// so two endpoints out of step cannot trade ACKs forever. Through the stack: ten old pure
/// ACKs at once draw one ACK under the default `TcpTuning::oow_ack_interval` (500 ms) and are
/// counted in `TcpTotals::oow_acks_suppressed`; with the interval 0 each draws its own.
#[test]
fn rfc9293_3_10_7_4_out_of_window_pure_acks_are_answered_once_per_tuned_interval() {
    for (interval, answers, suppressed) in [
        (TcpTuning::default().oow_ack_interval, 1, 9),
        (Duration::ZERO, 10, 0),
    ] {
        let (mut peer, eb) = link::pair(&LinkConfig::default());
        let mut b = Stack::new(eb, &config(2, IP_B), Instant::ZERO).expect("stack");
        let t = TcpTuning {
            oow_ack_interval: interval,
            ..TcpTuning::default()
        };
        let seg = |control, seq: i32, ack: Option<i32>| TcpRepr {
            src_port: 40000,
            dst_port: 5000,
            control,
            seq_number: TcpSeqNumber(seq),
            ack_number: ack.map(TcpSeqNumber),
            window_len: 65535,
            window_scale: None,
            max_seg_size: (control == TcpControl::Syn).then_some(1460),
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp: None,
            payload: &[],
        };
        let now = Instant::ZERO;
        let l = b.listen(5000, 1, &t).expect("listen");
        inject(
            &mut peer,
            now,
            &frame_from_a(&seg(TcpControl::Syn, 1000, None)),
        );
        let (segs, now) = segments_from_b(&mut b, &mut peer, now);
        let &(true, true, iss, _) = segs.first().expect("one") else {
            panic!("a SYN-ACK, not {segs:?}");
        };
        inject(
            &mut peer,
            now,
            &frame_from_a(&seg(TcpControl::None, 1001, Some(iss + 1))),
        );
        b.poll(now);
        b.accept(l).expect("accept").expect("established");
        // Ten pure ACKs 5,000 octets behind RCV.NXT (outside the window, no data), one a
        // millisecond, each in a poll of its own (one poll sends one ACK at most).
        let mut segs = Vec::new();
        let mut now = now;
        for _ in 0..10 {
            now += Duration::from_millis(1);
            inject(
                &mut peer,
                now,
                &frame_from_a(&seg(TcpControl::None, 1001 - 5000, Some(iss + 1))),
            );
            b.poll(now);
            for f in drain(&mut peer, now) {
                let e = EthernetFrame::new_checked(&f[..]).expect("valid frame");
                let ip = Ipv4Packet::new_checked(e.payload()).expect("IPv4, the peer is known");
                let t = TcpPacket::new_checked(ip.payload()).expect("a TCP segment");
                segs.push((t.syn(), t.ack(), t.seq_number().0, t.payload().len()));
            }
        }
        assert_eq!(
            segs.len(),
            answers,
            "interval {interval:?}: answers to ten old pure ACKs: {segs:?}"
        );
        assert!(
            segs.iter().all(|s| *s == (false, true, iss + 1, 0)),
            "{segs:?}"
        );
        assert_eq!(
            b.tcp_totals().expect("ours").oow_acks_suppressed,
            suppressed,
            "interval {interval:?}"
        );
    }
}

/// An ARP request from `src` at `mac` (broadcast), asking for `target`: not for B.
fn arp_request_from(src: Ipv4Address, mac: EthernetAddress, target: Ipv4Address) -> Vec<u8> {
    let req = ArpRepr::EthernetIpv4 {
        operation: ArpOperation::Request,
        source_hardware_addr: mac,
        source_protocol_addr: src,
        target_hardware_addr: EthernetAddress([0; 6]),
        target_protocol_addr: target,
    };
    let mut buf = vec![0u8; 14 + req.buffer_len()];
    let mut eth = EthernetFrame::new_unchecked(&mut buf);
    eth.set_dst_addr(EthernetAddress::BROADCAST);
    eth.set_src_addr(mac);
    eth.set_ethertype(EthernetProtocol::Arp);
    req.emit(&mut ArpPacket::new_unchecked(&mut buf[14..]));
    buf
}

/// RFC 4987 3.4 (resource exhaustion): a SYN flood from more on-link sources than the neighbour
/// table can glean (RFC 4987 3.4 keeps the backlog's half-open connections; `docs/net.md`)
/// leaves thousands of half-open connections waiting for ARP. Each ARP frame on the LAN,
/// for us or not, then woke every one of them, and each re-filed itself on the waiting list
/// after a scan of that list: work quadratic in the half-open connections, per ARP frame a
/// peer sends. A poll after such a frame must cost about what a poll costs, not seconds.
#[test]
fn rfc4987_3_4_arp_frames_do_not_cost_quadratic_work_under_an_unresolvable_syn_flood() {
    use std::time::Instant as Wall;
    const N: u32 = 4096 + 30_000;
    let (mut attacker, eb) = link::pair(&LinkConfig::default());
    let cfg = StackConfig {
        ip: smoltcp::wire::Ipv4Cidr::new(IP_B, 16),
        max_connections: N as usize + 64,
        ..config(2, IP_B)
    };
    let mut b = Stack::new(eb, &cfg, Instant::ZERO).expect("stack");
    let _l = b
        .listen(5000, N as usize + 64, &TcpTuning::default())
        .expect("listen");
    let mac = EthernetAddress([0x02, 0, 0, 0, 0, 1]);
    let mut now = Instant::ZERO;
    let mut sent = 0u32;
    let mut k = 0u32;
    while sent < N {
        for _ in 0..64 {
            k += 1;
            // 198.18.x.y of the /16, neither B nor the broadcast address.
            let src = Ipv4Address::from(u32::from(Ipv4Address::new(198, 18, 0, 0)) + k + 10);
            inject(&mut attacker, now, &syn_from(src, mac));
            sent += 1;
        }
        b.poll(now);
        drain(&mut attacker, now);
        now += Duration::from_micros(1);
    }
    b.poll(now);
    drain(&mut attacker, now);
    assert_eq!(
        b.live(),
        sent as usize,
        "every SYN kept (the backlog holds them)"
    );
    // Polls with nothing new, and polls each with an ARP request between two other hosts
    // of the LAN (not for B, resolving nothing B waits for).
    let other = Ipv4Address::new(198, 18, 250, 1);
    let started = Wall::now();
    for j in 0..5u8 {
        now += Duration::from_micros(10);
        b.poll(now);
        let f = arp_request_from(other, EthernetAddress([0x02, 0, 0, 0, 9, j]), IP_A);
        inject(&mut attacker, now, &f);
        b.poll(now);
        drain(&mut attacker, now);
    }
    let took = started.elapsed();
    eprintln!("10 polls, 5 of them with an ARP frame: {took:?}");
    assert!(
        took < std::time::Duration::from_millis(250),
        "10 polls (5 with an ARP frame of two other hosts) took {took:?} with {} half-open \
         connections waiting for ARP",
        sent - 4096
    );
}

/// B with a table of 16 connections listening on `ports`, filled by 16 SYNs from A's address
/// to the first port (half-open connections): (the attacker's end, B, A's MAC, the time).
fn flooded_table(ports: &[u16]) -> (LinkEnd, Stack<LinkEnd>, EthernetAddress, Instant) {
    let (mut attacker, eb) = link::pair(&LinkConfig::default());
    let cfg = StackConfig {
        max_connections: 16,
        ..config(2, IP_B)
    };
    let mut b = Stack::new(eb, &cfg, Instant::ZERO).expect("stack");
    for &port in ports {
        b.listen(port, 16, &TcpTuning::default()).expect("listen");
    }
    let mac = EthernetAddress([0x02, 0, 0, 0, 0, 1]);
    let now = Instant::ZERO;
    for n in 0..16u16 {
        let mut f = syn_from(IP_A, mac);
        let mut tp = TcpPacket::new_unchecked(&mut f[34..]);
        tp.set_src_port(1024 + n);
        tp.fill_checksum(&IP_A.into(), &IP_B.into());
        inject(&mut attacker, now, &f);
    }
    b.poll(now);
    drain(&mut attacker, now);
    assert_eq!(
        b.live(),
        16,
        "the flood's half-open connections fill the table"
    );
    (attacker, b, mac, now)
}

/// RFC 4987 3.4 (one peer's flood against the others): a SYN flood fills the connection table
/// with half-open connections (the engine gives its listeners a backlog of the whole
/// table). A SYN evicts the oldest of them (RFC 4987 3.4, recycling the oldest half-open
/// TCB), but our own `connect` found the table full and failed: a remote peer that sends a
/// SYN per slot kept every outgoing connection of the host from opening for as long as its
/// flood lasted. A half-open connection, which no peer has acknowledged, gives way to it.
#[test]
fn rfc4987_3_4_a_syn_flood_does_not_lock_out_our_own_connects() {
    let (_attacker, mut b, _, _) = flooded_table(&[5000]);
    let c = b.connect((IP_A, 7000), None, &TcpTuning::default());
    assert!(
        c.is_ok(),
        "our connect under a SYN flood: {c:?} (the table held only half-open connections)"
    );
    assert_eq!(b.live(), 16, "one half-open connection made room");
    assert_eq!(b.host_stats().expect("warpcore").half_open_evicted, 1);
}

/// RFC 4987 3.4 (one peer's flood against the others): a SYN flood against one listening port
/// that fills the connection table left a SYN for another port no room: a SYN evicted only
/// its own listener's oldest half-open connection, and the other listener had none. The
/// flood on one service thus refused every handshake of every other service of the host.
/// A half-open connection of the flooded listener gives way to it (RFC 4987 3.4).
#[test]
fn rfc4987_3_4_a_syn_flood_on_one_port_does_not_refuse_another() {
    let (mut attacker, mut b, mac, now) = flooded_table(&[5000, 5001]);
    // A client's SYN for the other port.
    let mut f = syn_from(IP_A, mac);
    let mut tp = TcpPacket::new_unchecked(&mut f[34..]);
    tp.set_dst_port(5001);
    tp.set_src_port(40_000);
    tp.fill_checksum(&IP_A.into(), &IP_B.into());
    inject(&mut attacker, now, &f);
    b.poll(now);
    let synacks = drain(&mut attacker, now)
        .iter()
        .filter(|f| {
            let Ok(e) = EthernetFrame::new_checked(&f[..]) else {
                return false;
            };
            let Ok(ip) = Ipv4Packet::new_checked(e.payload()) else {
                return false;
            };
            let Ok(t) = TcpPacket::new_checked(ip.payload()) else {
                return false;
            };
            t.syn() && t.ack() && t.src_port() == 5001 && t.dst_port() == 40_000
        })
        .count();
    let stats = b.host_stats().expect("warpcore");
    assert_eq!(
        synacks, 1,
        "the SYN for port 5001 under a flood of port 5000 drew no SYN-ACK ({stats:?})"
    );
    assert_eq!(stats.syn_dropped, 0);
}

/// The ARP reply from `ip` at `mac` to B (IP_B at `b_mac`).
fn arp_reply_from(ip: Ipv4Address, mac: EthernetAddress, b_mac: EthernetAddress) -> Vec<u8> {
    let reply = ArpRepr::EthernetIpv4 {
        operation: ArpOperation::Reply,
        source_hardware_addr: mac,
        source_protocol_addr: ip,
        target_hardware_addr: b_mac,
        target_protocol_addr: IP_B,
    };
    let mut buf = vec![0u8; 14 + reply.buffer_len()];
    let mut eth = EthernetFrame::new_unchecked(&mut buf);
    eth.set_dst_addr(b_mac);
    eth.set_src_addr(mac);
    eth.set_ethertype(EthernetProtocol::Arp);
    reply.emit(&mut ArpPacket::new_unchecked(&mut buf[14..]));
    buf
}

/// The target of the ARP request in `frame`, if it is one.
fn arp_request_target(frame: &[u8]) -> Option<Ipv4Address> {
    let e = EthernetFrame::new_checked(frame).ok()?;
    if e.ethertype() != EthernetProtocol::Arp {
        return None;
    }
    match ArpRepr::parse(&ArpPacket::new_checked(e.payload()).ok()?).ok()? {
        ArpRepr::EthernetIpv4 {
            operation: ArpOperation::Request,
            target_protocol_addr,
            ..
        } => Some(target_protocol_addr),
        _ => None,
    }
}

/// RFC 826 ("merge", the table's upkeep left to the implementation), RFC 1122 2.3.2.1
/// (ARP cache flooding) and RFC 4987 3.4: an on-link peer fills the neighbour table with
/// ARP requests for B from forged senders of a large subnet, then answers B's request for
/// the source of one SYN of its own. The answer to a request B sent took the place of the
/// oldest entry nobody had asked for, which was the next hop of B's live connection: the
/// flood evicted it, one SYN and one ARP reply per eviction, and the connection had to
/// resolve its next hop again (and, with the list of requests full under a SYN flood,
/// could not: the answer to a request the full list did not record found no room). A next
/// hop that a connection uses is never the one to give way (as Linux's forced neighbour
/// GC spares entries in use), and its answer always finds room.
#[test]
fn rfc826_an_arp_flood_does_not_evict_a_live_connections_next_hop() {
    let (mut peer, eb) = link::pair(&LinkConfig::default());
    let cfg = StackConfig {
        ip: smoltcp::wire::Ipv4Cidr::new(IP_B, 16),
        ..config(2, IP_B)
    };
    let mut b = Stack::new(eb, &cfg, Instant::ZERO).expect("stack");
    let b_mac = EthernetAddress([0x02, 0, 0, 0, 0, 2]);
    b.listen(5000, 64, &TcpTuning::default()).expect("listen");
    // B's connection to A: A answers B's ARP request, B's SYN leaves for A's MAC.
    let a_mac = EthernetAddress([0x02, 0, 0, 0, 0, 0xa1]);
    let mut now = Instant::ZERO;
    let c = b
        .connect((IP_A, 7000), None, &TcpTuning::default())
        .expect("connect");
    b.poll(now);
    for f in drain(&mut peer, now) {
        if let Some(r) = arp_reply(&f, a_mac) {
            inject(&mut peer, now, &r);
        }
    }
    b.poll(now);
    let out = drain(&mut peer, now);
    assert!(
        out.iter().any(|f| f[..6] == a_mac.0 && tcp_of(f).is_some()),
        "B's SYN went to A"
    );
    // The flood: ARP requests for B from 4,200 forged senders of the /16, filling the
    // table (4,096 entries) with entries fresher than A's.
    now += Duration::from_millis(1);
    let attacker = EthernetAddress([0x02, 0, 0, 0, 0, 0x66]);
    for k in 0..4200u32 {
        let src = Ipv4Address::from(u32::from(Ipv4Address::new(198, 18, 10, 0)) + k);
        inject(&mut peer, now, &arp_request_from(src, attacker, IP_B));
        if k % 64 == 63 {
            b.poll(now);
            drain(&mut peer, now);
            now += Duration::from_micros(1);
        }
    }
    b.poll(now);
    drain(&mut peer, now);
    // Two SYNs from new on-link sources: the full table cannot glean them, B asks for each
    // and the attacker answers.
    for x in [
        Ipv4Address::new(198, 18, 200, 1),
        Ipv4Address::new(198, 18, 200, 2),
    ] {
        inject(&mut peer, now, &syn_from(x, attacker));
        b.poll(now);
        for f in drain(&mut peer, now) {
            if arp_request_target(&f) == Some(x) {
                inject(&mut peer, now, &arp_reply_from(x, attacker, b_mac));
            }
        }
        b.poll(now);
        drain(&mut peer, now);
        now += Duration::from_micros(10);
    }
    // B retransmits its SYN (simulated clock, past the initial RTO): to A's MAC straight
    // away, without asking for A again.
    let mut asked_for_a = 0;
    let mut syns_to_a = 0;
    while now < Instant::from_secs(3) {
        now += Duration::from_millis(10);
        b.poll(now);
        for f in drain(&mut peer, now) {
            if arp_request_target(&f) == Some(IP_A) {
                asked_for_a += 1;
            } else if f[..6] == a_mac.0 && tcp_of(&f).is_some() {
                syns_to_a += 1;
            }
        }
    }
    assert_eq!(b.state(c), Ok(smoltcp::socket::tcp::State::SynSent));
    assert_eq!(
        asked_for_a, 0,
        "the ARP flood evicted the next hop of B's live connection"
    );
    assert!(syns_to_a > 0, "B retransmitted its SYN to A");
}

/// An ICMP Destination Unreachable of `code` from IP_B to IP_A (A's MAC `a_mac`), quoting
/// `quoted` (as RFC 792 asks: the header of a datagram A sent and the first 8 octets of its
/// data, the header's total length the datagram's own).
fn icmp_unreachable(code: u8, quoted: &[u8], a_mac: EthernetAddress) -> Vec<u8> {
    let mut icmp = vec![3, code, 0, 0, 0, 0, 0, 0];
    icmp.extend_from_slice(quoted);
    let mut p = smoltcp::wire::Icmpv4Packet::new_unchecked(&mut icmp[..]);
    p.fill_checksum();
    let ip = Ipv4Repr {
        src_addr: IP_B,
        dst_addr: IP_A,
        next_header: IpProtocol::Icmp,
        payload_len: icmp.len(),
        hop_limit: 64,
    };
    let mut buf = vec![0u8; 14 + 20 + icmp.len()];
    let mut eth = EthernetFrame::new_unchecked(&mut buf);
    eth.set_dst_addr(a_mac);
    eth.set_src_addr(EthernetAddress([0x02, 0, 0, 0, 0, 2]));
    eth.set_ethertype(EthernetProtocol::Ipv4);
    let caps = smoltcp::phy::ChecksumCapabilities::default();
    ip.emit(&mut Ipv4Packet::new_unchecked(&mut buf[14..]), &caps);
    buf[34..].copy_from_slice(&icmp);
    buf
}

/// RFC 1122 4.2.3.9 (RFC 5461 4.1): an ICMP port or protocol unreachable about our SYN is
/// a hard error that refuses the connect at once (reported as a reset, as a RST would be),
/// instead of the SYN going again until the user timeout (a port a firewall rejects with
/// ICMP, `iptables -j REJECT`'s default). RFC 5927 4.1: only an error quoting the SYN's
/// ports and sequence number counts; a soft error (network unreachable) does not end it.
#[test]
fn rfc1122_4_2_3_9_an_icmp_port_unreachable_refuses_the_connect() {
    for code in [3u8, 2] {
        let (ea, mut peer) = link::pair(&LinkConfig::default());
        let mut a = Stack::new(ea, &config(1, IP_A), Instant::ZERO).expect("stack a");
        let tuning = TcpTuning {
            timeout: Some(Duration::from_secs(30)),
            ..TcpTuning::default()
        };
        let c = a.connect((IP_B, 7777), None, &tuning).expect("connect");
        let b_mac = EthernetAddress([0x02, 0, 0, 0, 0, 2]);
        let mut now = Instant::ZERO;
        // A asks for B's address; B answers; A's SYN leaves.
        let mut syn = None;
        let mut a_mac = None;
        for _ in 0..20 {
            a.poll(now);
            for f in drain(&mut peer, now) {
                let eth = EthernetFrame::new_checked(&f[..]).expect("ethernet");
                a_mac = Some(eth.src_addr());
                match eth.ethertype() {
                    EthernetProtocol::Arp => {
                        let reply = ArpRepr::EthernetIpv4 {
                            operation: ArpOperation::Reply,
                            source_hardware_addr: b_mac,
                            source_protocol_addr: IP_B,
                            target_hardware_addr: eth.src_addr(),
                            target_protocol_addr: IP_A,
                        };
                        let mut buf = vec![0u8; 14 + reply.buffer_len()];
                        let mut e = EthernetFrame::new_unchecked(&mut buf);
                        e.set_dst_addr(eth.src_addr());
                        e.set_src_addr(b_mac);
                        e.set_ethertype(EthernetProtocol::Arp);
                        reply.emit(&mut ArpPacket::new_unchecked(&mut buf[14..]));
                        inject(&mut peer, now, &buf);
                    }
                    EthernetProtocol::Ipv4 => syn = Some(f[14..].to_vec()),
                    _ => {}
                }
            }
            if syn.is_some() {
                break;
            }
            now += Duration::from_millis(1);
        }
        let syn = syn.expect("A sent its SYN");
        let a_mac = a_mac.expect("A sent a frame");
        let ihl = usize::from(syn[0] & 0x0f) * 4;
        // Forged or stale errors: a sequence number not in flight, another port, a soft
        // error (network unreachable). None ends the connect.
        let mut wrong_seq = syn.clone();
        wrong_seq[ihl + 7] = wrong_seq[ihl + 7].wrapping_add(1);
        let mut wrong_port = syn.clone();
        wrong_port[ihl + 3] = wrong_port[ihl + 3].wrapping_add(1);
        // Hostile quotes: cut short of the 8 octets, an IHL below 5 or past the quote.
        // None panics or ends the connect either.
        let q = ihl + 8;
        let mut short_ihl = syn[..q].to_vec();
        short_ihl[0] = 0x44;
        let mut long_ihl = syn[..q].to_vec();
        long_ihl[0] = 0x4f;
        for f in [
            icmp_unreachable(code, &wrong_seq[..q], a_mac),
            icmp_unreachable(code, &wrong_port[..q], a_mac),
            icmp_unreachable(0, &syn[..q], a_mac),
            icmp_unreachable(code, &syn[..q - 1], a_mac),
            icmp_unreachable(code, &syn[..4], a_mac),
            icmp_unreachable(code, &[], a_mac),
            icmp_unreachable(code, &short_ihl, a_mac),
            icmp_unreachable(code, &long_ihl, a_mac),
        ] {
            inject(&mut peer, now, &f);
        }
        for _ in 0..10 {
            a.poll(now);
            drain(&mut peer, now);
            while let Some(e) = a.next_event() {
                assert_ne!(
                    e,
                    Event::Reset(c),
                    "code {code}: a forged or soft error refused"
                );
            }
            now += Duration::from_millis(1);
        }
        assert_eq!(
            a.state(c).expect("state"),
            smoltcp::socket::tcp::State::SynSent
        );
        // The error about the SYN itself: refused within the poll.
        inject(&mut peer, now, &icmp_unreachable(code, &syn[..q], a_mac));
        let mut refused = false;
        for _ in 0..10 {
            a.poll(now);
            drain(&mut peer, now);
            while let Some(e) = a.next_event() {
                assert_ne!(e, Event::TimedOut(c), "code {code}: refused, not timed out");
                refused |= e == Event::Reset(c);
            }
            now += Duration::from_millis(1);
        }
        assert!(
            refused,
            "code {code}: the ICMP hard error did not refuse the connect"
        );
    }
}

/// RFC 1122 2.3.2.1 (ARP flooding: at most one request a second per destination is the
/// recommended bound) and Linux's neighbour state machine (`mcast_solicit` 3 probes at
/// `retrans_time` 1 s, then FAILED, a connect's `EHOSTUNREACH`): a connect to an on-link
/// address nobody answers for sends its ARP request at once, repeats it a second apart,
/// three in all, and then fails as [`Event::NeighborUnreachable`]. The requests went out
/// every 100 ms until the user timeout (30 s: 300 broadcasts per destination), and the
/// connect learnt nothing before it.
#[test]
fn rfc1122_2_3_2_1_arp_requests_go_once_a_second_three_times_then_the_connect_fails() {
    let (ea, mut silent) = link::pair(&LinkConfig::default());
    let mut a = Stack::new(ea, &config(1, IP_A), Instant::ZERO).expect("stack a");
    let absent = Ipv4Address::new(198, 18, 0, 77);
    let c = a
        .connect((absent, 5000), None, &TcpTuning::default())
        .expect("connect");
    let mut now = Instant::ZERO;
    let mut requests = Vec::new();
    let mut failed_at = None;
    while now < Instant::from_secs(10) {
        a.poll(now);
        while let Some(e) = a.next_event() {
            assert_eq!(e, Event::NeighborUnreachable(c), "at {now}");
            failed_at.get_or_insert(now);
        }
        for f in drain(&mut silent, now) {
            if arp_request_target(&f) == Some(absent) {
                requests.push(now.total_millis());
            }
        }
        now += Duration::from_millis(10);
    }
    assert_eq!(requests, vec![0, 1000, 2000], "ARP requests (ms)");
    let at = failed_at.expect("the connect never failed on its next hop");
    assert!(
        at >= Instant::from_secs(3) && at < Instant::from_millis(3050),
        "failed at {at}"
    );
}

/// A connect to an address nobody answers ARP for at 0, a second one to it at
/// `second_at` ms, an ARP request from another host reaching A at `wake_at` ms (if any):
/// the first connect's id, the second's, A's ARP requests for the address (ms) and A's
/// events with their times (ms), over 12 s.
fn second_connect_to_an_absent_host(
    second_at: i64,
    wake_at: Option<i64>,
) -> (
    warpcore_tcp::ConnId,
    warpcore_tcp::ConnId,
    Vec<i64>,
    Vec<(Event, i64)>,
) {
    let (ea, mut silent) = link::pair(&LinkConfig::default());
    let mut a = Stack::new(ea, &config(1, IP_A), Instant::ZERO).expect("stack a");
    let absent = Ipv4Address::new(198, 18, 0, 77);
    let other = Ipv4Address::new(198, 18, 0, 50);
    let other_mac = EthernetAddress([0x02, 0, 0, 0, 0, 0x50]);
    let first = a
        .connect((absent, 5000), None, &TcpTuning::default())
        .expect("connect");
    let mut second = None;
    let mut now = Instant::ZERO;
    let mut requests = Vec::new();
    let mut events = Vec::new();
    while now < Instant::from_secs(12) {
        if now == Instant::from_millis(second_at) {
            // Marked for the transmit pass before the poll wakes the first.
            let c = a.connect((absent, 5001), None, &TcpTuning::default());
            second = Some(c.expect("second connect"));
        }
        if wake_at.is_some_and(|w| now == Instant::from_millis(w)) {
            inject(&mut silent, now, &arp_request_from(other, other_mac, IP_A));
        }
        a.poll(now);
        while let Some(e) = a.next_event() {
            events.push((e, now.total_millis()));
        }
        for f in drain(&mut silent, now) {
            if arp_request_target(&f) == Some(absent) {
                requests.push(now.total_millis());
            }
        }
        now += Duration::from_millis(10);
    }
    let second = second.expect("the second connect was made");
    (first, second, requests, events)
}

/// A connect that comes while its next hop's last round is failed (the second after its
/// third request went unanswered) is not failed at once, before any request of its own:
/// it begins the next round at once (Linux starts probing a FAILED entry again for new
/// traffic; the last request went a second before), and fails only once that round went
/// unanswered too.
#[test]
fn a_connect_during_a_failed_arp_round_starts_the_next_round_at_once() {
    let (first, second, requests, failed) = second_connect_to_an_absent_host(3500, None);
    assert_eq!(
        requests,
        vec![0, 1000, 2000, 3500, 4500, 5500],
        "ARP requests (ms)"
    );
    assert_eq!(failed.len(), 2, "{failed:?}");
    assert_eq!(failed[0].0, Event::NeighborUnreachable(first));
    assert_eq!(failed[1].0, Event::NeighborUnreachable(second));
    assert!((6500..6550).contains(&failed[1].1), "{failed:?}");
}

/// Linux (`__neigh_event_send`: new traffic for a FAILED entry starts probing it again)
/// and RFC 1122 2.3.2.1 (at most one request a second per address): a connect that comes
/// while its next hop's last round is failed starts a new round at once (the last request
/// went a second ago or more) and fails only when that round went unanswered. It was filed
/// without a request and, woken in that second by anything (here an ARP frame teaching A
/// another address), failed as `NeighborUnreachable` before a single request of its own.
#[test]
fn a_connect_woken_during_a_failed_arp_round_starts_a_new_round() {
    let (first, second, requests, failed) = second_connect_to_an_absent_host(3500, Some(3700));
    assert_eq!(
        requests,
        vec![0, 1000, 2000, 3500, 4500, 5500],
        "ARP requests (ms)"
    );
    assert_eq!(failed.len(), 2, "{failed:?}");
    assert_eq!(failed[0].0, Event::NeighborUnreachable(first));
    assert!((3000..3050).contains(&failed[0].1), "{failed:?}");
    assert_eq!(failed[1].0, Event::NeighborUnreachable(second));
    assert!((6500..6550).contains(&failed[1].1), "{failed:?}");
}

/// A connect that waited through its next hop's failed round of ARP requests fails with
/// it, also when a newer connect to the same address began the next round first (its pass
/// came first in the poll the round failed in): that one then gets a round of its own.
#[test]
fn a_connect_that_waited_through_a_failed_arp_round_fails_though_a_new_round_began() {
    let (first, second, requests, failed) = second_connect_to_an_absent_host(3000, None);
    assert_eq!(
        requests,
        vec![0, 1000, 2000, 3000, 4000, 5000],
        "ARP requests (ms)"
    );
    assert_eq!(
        failed,
        vec![
            (Event::NeighborUnreachable(first), 3000),
            (Event::NeighborUnreachable(second), 6000)
        ]
    );
}

/// A resolution asked for ([`Stack::resolve_neighbor`]) in the second after its address's
/// round of ARP requests failed begins a new round at once, as a connect does (Linux's
/// `__neigh_event_send`; the last request went a second before, RFC 1122 2.3.2.1), not
/// only after that second.
#[test]
fn a_resolution_during_a_failed_arp_round_asks_at_once() {
    let (ea, mut silent) = link::pair(&LinkConfig::default());
    let mut a = Stack::new(ea, &config(1, IP_A), Instant::ZERO).expect("stack a");
    let absent = Ipv4Address::new(198, 18, 0, 77);
    let first = a
        .connect((absent, 5000), None, &TcpTuning::default())
        .expect("connect");
    let mut now = Instant::ZERO;
    let mut requests = Vec::new();
    let mut events = Vec::new();
    while now < Instant::from_millis(4500) {
        if now == Instant::from_millis(3200) {
            a.resolve_neighbor(absent, Duration::from_secs(10), now)
                .expect("resolve");
        }
        a.poll(now);
        while let Some(e) = a.next_event() {
            events.push((e, now.total_millis()));
        }
        for f in drain(&mut silent, now) {
            if arp_request_target(&f) == Some(absent) {
                requests.push(now.total_millis());
            }
        }
        now += Duration::from_millis(10);
    }
    assert_eq!(
        events,
        vec![(Event::NeighborUnreachable(first), 3000)],
        "the resolution is pending"
    );
    assert_eq!(
        requests,
        vec![0, 1000, 2000, 3200, 4200],
        "ARP requests (ms)"
    );
}

/// A SYN from `src` at `src_mac` to A's port `dst_port` (checksums right).
fn syn_to_a(src: Ipv4Address, src_mac: EthernetAddress, dst_port: u16) -> Vec<u8> {
    let a_mac = EthernetAddress([0x02, 0, 0, 0, 0, 1]);
    tcp_frame_between(
        (src, src_mac),
        (IP_A, a_mac),
        dst_port,
        TcpControl::Syn,
        None,
    )
}

/// RFC 826 / RFC 1122 2.3.2.2 (the packets held for an address go once it is resolved): a
/// SYN from the very peer a connect waits for teaches A its hardware address (gleaned,
/// `on_syn`), and the waiting connect's SYN leaves at once, as after an ARP reply. The
/// gleaned entry woke nobody: the connect sat until its next ARP retry.
#[test]
fn a_gleaned_syn_source_releases_the_connect_waiting_for_it() {
    let (ea, mut peer) = link::pair(&LinkConfig::default());
    let mut a = Stack::new(ea, &config(1, IP_A), Instant::ZERO).expect("stack a");
    a.listen(6000, 8, &TcpTuning::default()).expect("listen");
    let b_mac = EthernetAddress([0x02, 0, 0, 0, 0, 2]);
    let mut now = Instant::ZERO;
    let c = a
        .connect((IP_B, 7000), None, &TcpTuning::default())
        .expect("connect");
    a.poll(now);
    let out = drain(&mut peer, now);
    assert!(out.iter().any(|f| arp_request_target(f) == Some(IP_B)));
    // B's ARP reply is lost; B's own SYN for A's listener arrives 10 ms later.
    now += Duration::from_millis(10);
    inject(&mut peer, now, &syn_to_a(IP_B, b_mac, 6000));
    a.poll(now);
    let out = drain(&mut peer, now);
    let to_b: Vec<_> = out
        .iter()
        .filter(|f| f[..6] == b_mac.0)
        .filter_map(|f| {
            let ip = Ipv4Packet::new_checked(&f[14..]).ok()?;
            let tcp = TcpPacket::new_checked(ip.payload()).ok()?;
            Some((tcp.src_port(), tcp.dst_port(), tcp.syn(), tcp.ack()))
        })
        .collect();
    assert!(
        to_b.iter()
            .any(|&(_, dst, syn, ack)| dst == 7000 && syn && !ack),
        "the connect's SYN waited past the gleaned answer: {to_b:?}"
    );
    assert!(
        to_b.iter()
            .any(|&(src, _, syn, ack)| src == 6000 && syn && ack),
        "the SYN-ACK to B: {to_b:?}"
    );
    assert_eq!(a.state(c), Ok(smoltcp::socket::tcp::State::SynSent));
}

/// RFC 826's merge with RFC 1122 2.3.2.2: an ARP frame from the very address a connect
/// waits for, though not for us (its request for another host, a gratuitous ARP), tells
/// its hardware address; the address being resolved is in the table already, as Linux
/// keeps it (INCOMPLETE, updated by any ARP frame of its sender), so the frame resolves it
/// and the connect's SYN leaves at once. It was merged only into a resolved entry: the
/// connect waited for its next request's answer (a second, the retry interval).
#[test]
fn rfc826_an_arp_frame_from_the_address_being_resolved_resolves_it() {
    let (ea, mut peer) = link::pair(&LinkConfig::default());
    let mut a = Stack::new(ea, &config(1, IP_A), Instant::ZERO).expect("stack a");
    let b_mac = EthernetAddress([0x02, 0, 0, 0, 0, 2]);
    let mut now = Instant::ZERO;
    let c = a
        .connect((IP_B, 7000), None, &TcpTuning::default())
        .expect("connect");
    a.poll(now);
    assert!(drain(&mut peer, now)
        .iter()
        .any(|f| arp_request_target(f) == Some(IP_B)));
    // B's answer is lost; B asks for another host of the LAN 10 ms later.
    now += Duration::from_millis(10);
    let other = Ipv4Address::new(198, 18, 0, 9);
    inject(&mut peer, now, &arp_request_from(IP_B, b_mac, other));
    a.poll(now);
    let syn_to_b = drain(&mut peer, now)
        .iter()
        .any(|f| f[..6] == b_mac.0 && tcp_of(f).is_some());
    assert!(syn_to_b, "the connect's SYN waited past B's ARP frame");
    assert_eq!(a.state(c), Ok(smoltcp::socket::tcp::State::SynSent));
    // A frame from an address nobody asked for and nobody knows still adds nothing (RFC
    // 826: merge only): no entry for it, so a connect to it asks.
    let stranger = Ipv4Address::new(198, 18, 0, 10);
    now += Duration::from_millis(10);
    inject(
        &mut peer,
        now,
        &arp_request_from(stranger, EthernetAddress([0x02, 0, 0, 0, 0, 10]), other),
    );
    a.poll(now);
    drain(&mut peer, now);
    a.connect((stranger, 7000), None, &TcpTuning::default())
        .expect("connect");
    a.poll(now);
    assert!(drain(&mut peer, now)
        .iter()
        .any(|f| arp_request_target(f) == Some(stranger)));
}
