//! The SACK option of the frames the host writes: four blocks where the options have room
//! for them (no timestamps), three beside timestamps (RFC 2018 3 and 4), and the payload of a
//! data segment shrunk so that the frame stays within the MTU (RFC 9293 3.7.1).

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::time::Instant;
use smoltcp::wire::{
    EthernetAddress, IpAddress, Ipv4Address, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
    TcpTimestampRepr,
};

use super::headers::{self, FrameAddrs, ETH_HDR, IP_HDR};
use super::{emit_tcp, HeaderRun};
use crate::conn::{ConnConfig, Connection, Endpoints};

const US: (Ipv4Address, u16) = (Ipv4Address::new(198, 18, 0, 1), 4791);
const PEER: (Ipv4Address, u16) = (Ipv4Address::new(198, 18, 0, 2), 50000);
const ISS: TcpSeqNumber = TcpSeqNumber(1000);
const PISS: TcpSeqNumber = TcpSeqNumber(500_000);
const MSS: u16 = 1460;

fn addrs() -> FrameAddrs {
    FrameAddrs {
        src_mac: EthernetAddress([2, 0, 0, 0, 0, 1]),
        dst_mac: EthernetAddress([2, 0, 0, 0, 0, 2]),
        src: US.0,
        dst: PEER.0,
    }
}

fn from_peer(control: TcpControl, seq: TcpSeqNumber, ts: bool) -> TcpRepr<'static> {
    TcpRepr {
        src_port: PEER.1,
        dst_port: US.1,
        control,
        seq_number: seq,
        ack_number: Some(ISS + 1),
        window_len: 0xffff,
        window_scale: None,
        max_seg_size: (control == TcpControl::Syn).then_some(MSS),
        sack_permitted: control == TcpControl::Syn,
        sack_ranges: [None; 3],
        timestamp: ts.then_some(TcpTimestampRepr { tsval: 7, tsecr: 0 }),
        payload: &[],
    }
}

/// An active connection, SACK agreed, timestamps agreed only if `ts`.
fn established(ts: bool) -> Connection {
    let cfg = ConnConfig {
        mss: MSS,
        ..ConnConfig::default()
    };
    let ep = Endpoints {
        local: US,
        remote: PEER,
    };
    let t0 = Instant::from_millis(0);
    let mut c = Connection::connect(&cfg, ep, ISS, t0);
    while c.poll_transmit(t0).is_some() {}
    c.handle_segment(
        Instant::from_millis(1),
        &from_peer(TcpControl::Syn, PISS, ts),
    );
    while c.poll_transmit(Instant::from_millis(1)).is_some() {}
    c
}

/// The peer's 100 octets at `off` (from its first data octet).
fn peer_data(off: usize, ts: bool) -> TcpRepr<'static> {
    static DATA: [u8; 100] = [9; 100];
    let mut s = from_peer(TcpControl::None, PISS + 1 + off, ts);
    s.payload = &DATA;
    s
}

/// The four blocks held after the peer's octets 100.., 300.., 500.. and 700.. (100 each)
/// arrived in that order, a hole before each, as sequence numbers.
fn hold_four(c: &mut Connection, ts: bool) -> [(u32, u32); 4] {
    let t = Instant::from_millis(2);
    for k in 0..4 {
        c.handle_segment(t, &peer_data(100 + 200 * k, ts));
    }
    let at = |o: u32| (PISS.0 as u32).wrapping_add(1 + o);
    [(100, 200), (300, 400), (500, 600), (700, 800)].map(|(l, r)| (at(l), at(r)))
}

/// The frame the host writes for the quick ACK `c` owes (`Host::send_quick_ack`).
fn quick_ack_frame(c: &mut Connection, now: Instant) -> Vec<u8> {
    let ack = c.poll_quick_ack(now).expect("an ACK owed");
    let (tcp_len, fourth) = headers::tcp_header_len_sack(&ack, || c.fourth_sack_block(&ack));
    let mut f = vec![0u8; ETH_HDR + IP_HDR + tcp_len];
    emit_tcp(
        &mut f,
        &addrs(),
        &ack,
        fourth,
        &[],
        &ChecksumCapabilities::default(),
    );
    f
}

/// The SACK blocks of the SACK option of the TCP header `tcp`, read from its octets.
fn sack_option(tcp: &[u8]) -> Vec<(u32, u32)> {
    let hl = usize::from(tcp[12] >> 4) * 4;
    let mut at = 20;
    while at < hl {
        match tcp[at] {
            0 => break,
            1 => at += 1,
            kind => {
                let len = usize::from(tcp[at + 1]);
                if kind == 5 {
                    assert_eq!((len - 2) % 8, 0, "SACK option of {len} octets");
                    return tcp[at + 2..at + len]
                        .chunks(8)
                        .map(|b| {
                            (
                                u32::from_be_bytes(b[..4].try_into().unwrap()),
                                u32::from_be_bytes(b[4..].try_into().unwrap()),
                            )
                        })
                        .collect();
                }
                at += len;
            }
        }
    }
    Vec::new()
}

/// The TCP header of frame `f`, checked by smoltcp's parser (checksums included).
fn tcp_of(f: &[u8]) -> &[u8] {
    let tcp = &f[ETH_HDR + IP_HDR..];
    let p = TcpPacket::new_checked(tcp).expect("a whole TCP header");
    TcpRepr::parse(
        &p,
        &IpAddress::from(US.0),
        &IpAddress::from(PEER.0),
        &ChecksumCapabilities::default(),
    )
    .expect("the frame parses");
    let total = u16::from_be_bytes([f[ETH_HDR + 2], f[ETH_HDR + 3]]);
    assert_eq!(usize::from(total), f.len() - ETH_HDR, "IPv4 total length");
    tcp
}

/// RFC 2018 3 and 4: 40 octets of options hold four SACK blocks beside no timestamps, and
/// the receiver SHOULD send as many distinct blocks as it can, the most recent first; with a
/// D-SACK block (RFC 2883 4) it goes first and three SACK blocks follow.
#[test]
fn a_receiver_without_timestamps_sends_four_sack_blocks() {
    let mut c = established(false);
    let held = hold_four(&mut c, false);
    let f = quick_ack_frame(&mut c, Instant::from_millis(2));
    let tcp = tcp_of(&f);
    assert_eq!(
        usize::from(tcp[12] >> 4) * 4,
        56,
        "header of 20 + 36 octets"
    );
    assert_eq!(&tcp[20..22], &[5, 34], "a SACK option of four blocks");
    let blocks = sack_option(tcp);
    assert_eq!(blocks.len(), 4, "{blocks:x?}");
    // The most recent first (RFC 2018 4), each held block once.
    assert_eq!(blocks[0], held[3], "{blocks:x?}");
    let mut sorted = blocks.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, held.to_vec());
    // A duplicate of the octets at 300: a D-SACK block first, then three SACK blocks.
    c.handle_segment(Instant::from_millis(3), &peer_data(300, false));
    let f = quick_ack_frame(&mut c, Instant::from_millis(3));
    let blocks = sack_option(tcp_of(&f));
    assert_eq!(blocks.len(), 4, "{blocks:x?}");
    assert_eq!(blocks[0], held[1], "the D-SACK block first: {blocks:x?}");
    assert!(blocks[1..].iter().all(|b| held.contains(b)), "{blocks:x?}");
    assert!(
        blocks[1] != blocks[2] && blocks[2] != blocks[3] && blocks[1] != blocks[3],
        "{blocks:x?}"
    );
    // The next ACK reports the four SACK blocks again, the D-SACK block gone.
    c.handle_segment(Instant::from_millis(4), &peer_data(900, false));
    let f = quick_ack_frame(&mut c, Instant::from_millis(4));
    let blocks = sack_option(tcp_of(&f));
    assert_eq!(blocks.len(), 4, "{blocks:x?}");
    let at = |o: u32| (PISS.0 as u32).wrapping_add(1 + o);
    assert_eq!(blocks[0], (at(900), at(1000)), "{blocks:x?}");
}

/// RFC 2018 3: beside timestamps (10 octets) the options hold three SACK blocks.
#[test]
fn a_receiver_with_timestamps_still_sends_three_sack_blocks() {
    let mut c = established(true);
    let held = hold_four(&mut c, true);
    let f = quick_ack_frame(&mut c, Instant::from_millis(2));
    let tcp = tcp_of(&f);
    assert_eq!(
        usize::from(tcp[12] >> 4) * 4,
        56,
        "header of 20 + 36 octets"
    );
    let blocks = sack_option(tcp);
    assert_eq!(blocks.len(), 3, "{blocks:x?}");
    assert_eq!(blocks[0], held[3], "{blocks:x?}");
}

/// RFC 9293 3.7.1: the MSS counts data only, so a data segment carrying four SACK blocks
/// (36 octets of options) carries 36 octets less: its frame never exceeds the MTU. And a
/// record stream's full segment keeps its payload whole, its blocks following in a pure ACK
/// (RFC 2018 4).
#[test]
fn a_full_segment_with_four_sack_blocks_fits_the_mtu() {
    let mut c = established(false);
    let held = hold_four(&mut c, false);
    let _ = c.poll_quick_ack(Instant::from_millis(2));
    assert_eq!(c.send(&[1; 10_000]), Ok(10_000));
    let now = Instant::from_millis(3);
    let mut run = HeaderRun::default();
    let mut frames = 0;
    while let Some(out) = c.poll_segment(now) {
        let (hl, fourth) = headers::tcp_header_len_sack(&out.repr, || out.fourth_sack_block());
        let n = out.payload_len();
        let tcp_len = hl + n;
        let mut f = vec![0u8; ETH_HDR + IP_HDR + tcp_len];
        let payload = out.contiguous().expect("one piece").to_vec();
        super::emit_tcp_in_run(
            &mut f,
            &addrs(),
            &out.repr,
            fourth,
            &payload,
            &ChecksumCapabilities::default(),
            &mut run,
        );
        let tcp = tcp_of(&f);
        let mut blocks = sack_option(tcp);
        assert_eq!(blocks.len(), 4, "{blocks:x?}");
        blocks.sort_unstable();
        assert_eq!(blocks, held.to_vec());
        assert!(
            f.len() - ETH_HDR <= usize::from(MSS) + 40,
            "{} octets",
            f.len()
        );
        if frames == 0 {
            assert_eq!(n, usize::from(MSS) - 36, "a full segment beside 36 octets");
        }
        frames += 1;
    }
    assert!(frames >= 2, "{frames} segments");
}

/// RFC 2018 3: a peer without timestamps (Linux, for one) sends up to four SACK blocks in
/// its 40 octets of options. smoltcp's parser keeps three; the host reads the fourth from
/// the octets and the scoreboard takes all four: here the fourth alone reports the last
/// of the segments delivered, which then does not go again while the holes do.
#[test]
fn four_sack_blocks_from_the_wire_all_reach_the_scoreboard() {
    let mut c = established(false);
    assert_eq!(c.send(&[1; 8 * 1460]), Ok(8 * 1460));
    let t = Instant::from_millis(2);
    let mut sent = 0;
    while c.poll_transmit(t).is_some() {
        sent += 1;
    }
    assert_eq!(sent, 8);
    let base = (ISS.0 as u32).wrapping_add(1);
    let seg_at = |k: u32| (base + k * 1460, base + (k + 1) * 1460);
    // Segments 1, 3, 5 and 7 (from 0) delivered, the most recent first.
    let blocks = [seg_at(7), seg_at(5), seg_at(3), seg_at(1)];
    let mut b = [0u8; 20 + 36];
    b[0..2].copy_from_slice(&PEER.1.to_be_bytes());
    b[2..4].copy_from_slice(&US.1.to_be_bytes());
    b[4..8].copy_from_slice(&((PISS.0 as u32) + 1).to_be_bytes());
    b[8..12].copy_from_slice(&base.to_be_bytes());
    b[12] = (56 / 4) << 4;
    b[13] = 0x10; // ACK
    b[14..16].copy_from_slice(&0xffffu16.to_be_bytes());
    b[20..24].copy_from_slice(&[1, 1, 5, 34]); // NOP, NOP, SACK of four blocks
    for (i, (l, r)) in blocks.iter().enumerate() {
        b[24 + 8 * i..28 + 8 * i].copy_from_slice(&l.to_be_bytes());
        b[28 + 8 * i..32 + 8 * i].copy_from_slice(&r.to_be_bytes());
    }
    let (src, dst) = (IpAddress::from(PEER.0), IpAddress::from(US.0));
    let seg = headers::parse_tcp(&b, &src, &dst, &ChecksumCapabilities::ignored())
        .expect("four SACK blocks parse");
    assert_eq!(
        seg.sack_ranges,
        [Some(blocks[0]), Some(blocks[1]), Some(blocks[2])]
    );
    let fourth = headers::fourth_sack_block(&b);
    assert_eq!(fourth, Some(blocks[3]));
    c.handle_segment_with_fourth_sack(Instant::from_millis(3), &seg, fourth, &mut |d| d.len());
    let mut now = Instant::from_millis(3);
    let mut resent = Vec::new();
    while now < Instant::from_millis(20) {
        while let Some(s) = c.poll_transmit(now) {
            resent.push((s.seq_number.0 as u32).wrapping_sub(base) / 1460);
        }
        c.handle_timeout(now);
        now += smoltcp::time::Duration::from_micros(250);
    }
    assert!(
        !resent.contains(&1),
        "segment 1, SACKed by the fourth block, sent again: {resent:?}"
    );
    assert!(resent.contains(&0), "{resent:?}");
}

/// A record stream's data segment keeps its whole record (mpa-08 §4 item 4), so SACK blocks
/// give way, the fourth first: a record with room for three blocks beside it but not four
/// goes with three, and a pure ACK with all four follows (RFC 2018 4).
#[test]
fn a_record_segment_drops_the_fourth_block_first_and_an_ack_carries_it() {
    let mut c = established(false);
    let held = hold_four(&mut c, false);
    let _ = c.poll_quick_ack(Instant::from_millis(2));
    // 1,430 octets: beside 28 octets of options (three blocks) within the MSS, beside 36 not.
    let len = usize::from(MSS) - 30;
    assert_eq!(
        c.send_with_room(len, |b| {
            b[..len].fill(3);
            len
        }),
        Ok(len)
    );
    let now = Instant::from_millis(3);
    let mut run = HeaderRun::default();
    let mut got = Vec::new();
    while let Some(out) = c.poll_segment(now) {
        let (hl, fourth) = headers::tcp_header_len_sack(&out.repr, || out.fourth_sack_block());
        let n = out.payload_len();
        let mut f = vec![0u8; ETH_HDR + IP_HDR + hl + n];
        let payload = out.contiguous().unwrap_or(&[]).to_vec();
        super::emit_tcp_in_run(
            &mut f,
            &addrs(),
            &out.repr,
            fourth,
            &payload,
            &ChecksumCapabilities::default(),
            &mut run,
        );
        assert!(
            f.len() - ETH_HDR <= usize::from(MSS) + 40,
            "{} octets",
            f.len()
        );
        got.push((n, sack_option(tcp_of(&f))));
    }
    assert_eq!(got.len(), 2, "{got:x?}");
    assert_eq!(got[0].0, len);
    assert_eq!(got[0].1.len(), 3, "{got:x?}");
    assert_eq!(got[1].0, 0);
    let mut blocks = got[1].1.clone();
    blocks.sort_unstable();
    assert_eq!(blocks, held.to_vec(), "{got:x?}");
}
