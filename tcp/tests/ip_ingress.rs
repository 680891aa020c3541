//! What the host takes from the wire: datagrams from sources RFC 1122 3.2.1.3 rules out
//! are discarded without a reply; a stray segment whose IPv4 header carries options and
//! whose frame carries Ethernet padding is answered by the RST RFC 9293 3.10.7.1 asks for.

mod common;

use common::*;
use smoltcp::phy::{Device, RxToken, TxToken};
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, IpProtocol, Ipv4Address, Ipv4Packet,
    Ipv4Repr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
};
use warpcore_tcp::link::{self, LinkConfig, LinkEnd};
use warpcore_tcp::{Stack, TcpTuning};

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

/// A TCP segment from `src`:40000 to B:`dst_port`, from A's Ethernet address, checksums right.
fn segment_from(src: Ipv4Address, dst_port: u16, control: TcpControl, ack: Option<u32>) -> Vec<u8> {
    let ip = Ipv4Repr {
        src_addr: src,
        dst_addr: IP_B,
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
    eth.set_dst_addr(EthernetAddress([0x02, 0, 0, 0, 0, 2]));
    eth.set_src_addr(EthernetAddress([0x02, 0, 0, 0, 0, 1]));
    eth.set_ethertype(EthernetProtocol::Ipv4);
    let caps = smoltcp::phy::ChecksumCapabilities::default();
    ip.emit(&mut Ipv4Packet::new_unchecked(&mut buf[14..]), &caps);
    tcp.emit(
        &mut TcpPacket::new_unchecked(&mut buf[34..]),
        &src.into(),
        &IP_B.into(),
        &caps,
    );
    buf
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
            &segment_from(src, 6000, TcpControl::None, Some(77)),
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
        &segment_from(lo, 5000, TcpControl::Syn, None),
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
