//! TSO super-frames (issue 11 item 6): which queued frames a device may join into one frame
//! that the port cuts back into TCP segments, and how the joined frame's header changes.
//!
//! The TCP keeps producing one frame per segment, and recovery keeps tracking each of them;
//! a device whose port offers TSO ([`crate::DpdkDevice`]) joins a connection's consecutive
//! frames as they are queued. Frames join only when the port's cuts give back the frames
//! the TCP built, so every segment on the wire is still one whole run of FPDUs (MPA
//! alignment, RFC 5044 section 5): the same sequence range and, but for the fields below,
//! the same octets. All frames of a super-frame have the same header, but for the
//! per-segment fields (IPv4 total length, identification and checksum; TCP sequence number
//! and checksum), and every one but the last carries exactly the first's payload length
//! (the port cuts at that length). Frames with SYN, FIN, RST or URG never join.
//!
//! What the port changes (what every TSO does, and DPDK's librte_gso inside net_tap): the
//! IPv4 identification counts up from the first frame's, and PSH stays on the last segment
//! only (the TCP sets it on every data segment; PSH only asks the receiver to deliver, and
//! Warpcore's receiver ignores it).

use smoltcp::wire::{EthernetFrame, EthernetProtocol, IpProtocol, Ipv4Packet, TcpPacket};

use crate::csum;

const ETH: usize = 14;
const IP: usize = 20;
/// TCP header flag bits that keep a frame out of any super-frame: FIN, SYN, RST and URG.
const FLAGS_ALONE: u8 = 0x01 | 0x02 | 0x04 | 0x20;

/// Segments one super-frame carries at most (fewer where the port chains fewer mbufs per
/// packet). net_tap's software TSO returns at most 64 frames per super-frame and builds
/// each from two mbufs of a pool of 512 per port; 32 keeps a super-frame well inside both,
/// and at MTU 1500 is 46 KiB of payload.
pub const SEGMENTS_MAX: u16 = 32;

/// The shortest segment a super-frame is cut into: NICs refuse shorter ones (Intel's i40e
/// and iavf: 256 octets, `I40E_MIN_TSO_MSS`). Shorter frames go alone.
pub const SEGSZ_MIN: usize = 256;

/// The IPv4 total length of a super-frame, at most.
const IP_TOTAL_MAX: usize = 65_535;

/// What a device needs to know of one queued frame to join it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Ethernet, IPv4 and TCP header octets (TCP options included).
    pub hdr_len: usize,
    /// TCP header octets.
    pub l4_len: usize,
    /// Sequence number of the first payload octet.
    pub seq: u32,
    /// Payload octets.
    pub payload: usize,
    /// Whether PSH is set.
    pub psh: bool,
}

/// Reads `frame` as an Ethernet/IPv4/TCP frame that may be part of a super-frame: IPv4
/// without options and not a fragment, TCP with payload and none of SYN, FIN, RST, URG.
/// `None` for anything else (ARP, control segments, pure ACKs, malformed frames).
pub fn segment(frame: &[u8]) -> Option<Segment> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    if eth.ethertype() != EthernetProtocol::Ipv4 {
        return None;
    }
    let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
    if ip.header_len() as usize != IP
        || ip.next_header() != IpProtocol::Tcp
        || ip.more_frags()
        || ip.frag_offset() != 0
        || ip.total_len() as usize != frame.len() - ETH
    {
        return None;
    }
    let tcp = TcpPacket::new_checked(ip.payload()).ok()?;
    let l4_len = tcp.header_len() as usize;
    let flags = frame[ETH + IP + 13];
    let payload = ip.payload().len().checked_sub(l4_len)?;
    if payload == 0 || flags & FLAGS_ALONE != 0 {
        return None;
    }
    Some(Segment {
        hdr_len: ETH + IP + l4_len,
        l4_len,
        seq: tcp.seq_number().0 as u32,
        payload,
        psh: tcp.psh(),
    })
}

/// A super-frame being built: its head is the frame queued last.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Group {
    /// Header octets of every frame in it.
    pub hdr_len: usize,
    /// TCP header octets.
    pub l4_len: usize,
    /// Payload octets per segment: the first frame's, where the port cuts.
    pub segsz: usize,
    /// Sequence number the next frame must start at.
    pub next_seq: u32,
    /// Frames joined (the head counts).
    pub segs: u16,
    /// Payload octets of all of them.
    pub payload: usize,
    /// Whether the last frame carried `segsz` octets: whether another may follow it (the
    /// port cuts every segment but the last at `segsz`).
    pub open: bool,
    /// Frames the group may hold: [`SEGMENTS_MAX`], or fewer if the port chains fewer mbufs
    /// per packet.
    pub segs_max: u16,
}

impl Group {
    /// A group headed by `s`, if the port can cut segments of its length: `payload_max` is
    /// the longest payload of one segment the port takes with this header length, and
    /// `chain_max` the most mbufs it chains per packet (one per frame joined).
    pub fn start(s: &Segment, payload_max: usize, chain_max: u16) -> Option<Group> {
        let segs_max = chain_max.min(SEGMENTS_MAX);
        (s.payload >= SEGSZ_MIN && s.payload <= payload_max && segs_max >= 2).then_some(Group {
            hdr_len: s.hdr_len,
            l4_len: s.l4_len,
            segsz: s.payload,
            next_seq: s.seq.wrapping_add(s.payload as u32),
            segs: 1,
            payload: s.payload,
            open: true,
            segs_max,
        })
    }

    /// Whether frame `f` (read as `s`) may join the group whose head frame starts with
    /// `head` (at least the header octets; the head's header may already be rewritten by
    /// [`rewrite_head`], whose fields are not compared).
    pub fn admits(&self, head: &[u8], f: &[u8], s: &Segment) -> bool {
        self.open
            && s.seq == self.next_seq
            && s.hdr_len == self.hdr_len
            && s.payload <= self.segsz
            && self.segs < self.segs_max
            && IP + self.l4_len + self.payload + s.payload <= IP_TOTAL_MAX
            && head.len() >= self.hdr_len
            && f.len() >= self.hdr_len
            && same_header(&head[..self.hdr_len], &f[..self.hdr_len])
    }

    /// Counts frame `s` in (after [`Group::admits`]).
    pub fn add(&mut self, s: &Segment) {
        self.segs += 1;
        self.payload += s.payload;
        self.next_seq = self.next_seq.wrapping_add(s.payload as u32);
        self.open = s.payload == self.segsz;
    }
}

/// Whether two headers are equal but for the per-segment fields: IPv4 total length (octets 2
/// and 3 of the IPv4 header), identification (4, 5) and checksum (10, 11); TCP sequence
/// number (4 to 7 of the TCP header) and checksum (16, 17). The TCP flags must be equal:
/// all data segments of ours carry ACK and PSH.
fn same_header(a: &[u8], b: &[u8]) -> bool {
    let t = ETH + IP;
    a.len() == b.len()
        && a[..ETH + 2] == b[..ETH + 2]
        && a[ETH + 6..ETH + 10] == b[ETH + 6..ETH + 10]
        && a[ETH + 12..t + 4] == b[ETH + 12..t + 4]
        && a[t + 8..t + 16] == b[t + 8..t + 16]
        && a[t + 18..] == b[t + 18..]
}

/// Rewrites the head's header for the port once `g` holds more than one frame: the IPv4
/// total length of the whole super-frame and, as DPDK's TSO contract asks, the TCP checksum
/// field set to the pseudo-header sum without the length (not inverted). `head` holds at
/// least the header octets.
pub fn rewrite_head(head: &mut [u8], g: &Group) {
    let total = (IP + g.l4_len + g.payload).min(IP_TOTAL_MAX) as u16;
    head[ETH + 2..ETH + 4].copy_from_slice(&total.to_be_bytes());
    let a = |i: usize| [head[i], head[i + 1], head[i + 2], head[i + 3]];
    let (src, dst) = (a(ETH + 12), a(ETH + 16));
    let sum = csum::fold(csum::pseudo_header(src.into(), dst.into(), 0));
    let at = ETH + IP + 16;
    // `csum` sums in native (little-endian) words: its folded sum goes out as such.
    head[at..at + 2].copy_from_slice(&sum.to_le_bytes());
}

/// The frames the port sends for super-frame `frame` (whole, its head's header rewritten
/// by [`rewrite_head`]) cut every `segsz` payload octets, each handed to `each` in order, as
/// a capture must record them (what the wire carries, not the super-frame): the head's
/// header with the IPv4 total length of the segment, the identification counting up from
/// the head's, the sequence number of its first octet, PSH on the last segment only, and
/// both checksums filled in (the port's). False, nothing handed over, for a frame
/// [`segment`] refuses (no Ethernet/IPv4/TCP frame with payload that could join one) or a
/// `segsz` of 0: no super-frame of ours.
pub fn cut(frame: &[u8], segsz: usize, mut each: impl FnMut(&[u8])) -> bool {
    // The super-frame read as any frame that may join one ([`segment`]: its head's IPv4
    // total length, rewritten, is the whole frame's).
    let Some(head) = segment(frame).filter(|_| segsz != 0) else {
        return false;
    };
    let (hdr_len, seq0, t) = (head.hdr_len, head.seq, ETH + IP);
    let id0 = u16::from_be_bytes([frame[ETH + 4], frame[ETH + 5]]);
    let payload = &frame[hdr_len..];
    let n = payload.len().div_ceil(segsz);
    let mut seg = Vec::with_capacity(hdr_len + segsz.min(payload.len()));
    for (k, chunk) in payload.chunks(segsz).enumerate() {
        seg.clear();
        seg.extend_from_slice(&frame[..hdr_len]);
        seg.extend_from_slice(chunk);
        let total = (seg.len() - ETH) as u16;
        seg[ETH + 2..ETH + 4].copy_from_slice(&total.to_be_bytes());
        let id = id0.wrapping_add(k as u16);
        seg[ETH + 4..ETH + 6].copy_from_slice(&id.to_be_bytes());
        let seq = seq0.wrapping_add((k * segsz) as u32);
        seg[t + 4..t + 8].copy_from_slice(&seq.to_be_bytes());
        if k + 1 < n {
            // What librte_gso (net_tap's TSO) and NICs do: PSH (and FIN, which never
            // joins) on the last segment only.
            seg[t + 13] &= !0x08;
        }
        let mut ipp = Ipv4Packet::new_unchecked(&mut seg[ETH..]);
        ipp.fill_checksum();
        let (src, dst) = (ipp.src_addr(), ipp.dst_addr());
        let mut tcp = TcpPacket::new_unchecked(&mut seg[t..]);
        tcp.fill_checksum(&src.into(), &dst.into());
        each(&seg);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::phy::ChecksumCapabilities;
    use smoltcp::wire::{
        EthernetAddress, EthernetRepr, IpAddress, Ipv4Address, Ipv4Repr, TcpControl, TcpRepr,
        TcpSeqNumber, TcpTimestampRepr,
    };

    /// A data segment of ours: ACK 77, window 1000, timestamps (`ts`, 9).
    fn repr(seq: i32, payload: &[u8], control: TcpControl, ts: u32) -> TcpRepr<'_> {
        TcpRepr {
            src_port: 4791,
            dst_port: 50000,
            control,
            seq_number: TcpSeqNumber(seq),
            ack_number: Some(TcpSeqNumber(77)),
            window_len: 1000,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp: Some(TcpTimestampRepr::new(ts, 9)),
            payload,
        }
    }

    fn frame(seq: i32, payload: &[u8], control: TcpControl, ts: u32) -> Vec<u8> {
        emit(&repr(seq, payload, control, ts))
    }

    /// The frame the host would send for `tcp` (checksums filled in).
    fn emit(tcp: &TcpRepr<'_>) -> Vec<u8> {
        let (src, dst) = (Ipv4Address::new(10, 0, 0, 1), Ipv4Address::new(10, 0, 0, 2));
        let ip = Ipv4Repr {
            src_addr: src,
            dst_addr: dst,
            next_header: IpProtocol::Tcp,
            payload_len: tcp.buffer_len(),
            hop_limit: 64,
        };
        let mut buf = vec![0; ETH + IP + tcp.buffer_len()];
        let mut eth = EthernetFrame::new_unchecked(&mut buf);
        EthernetRepr {
            src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
            dst_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
            ethertype: EthernetProtocol::Ipv4,
        }
        .emit(&mut eth);
        let caps = ChecksumCapabilities::default();
        let mut ipp = Ipv4Packet::new_unchecked(eth.payload_mut());
        ip.emit(&mut ipp, &caps);
        let mut t = TcpPacket::new_unchecked(ipp.payload_mut());
        tcp.emit(&mut t, &IpAddress::Ipv4(src), &IpAddress::Ipv4(dst), &caps);
        buf
    }

    #[test]
    fn a_data_segment_is_read_and_control_segments_are_not() {
        let f = frame(1000, &[7; 100], TcpControl::Psh, 5);
        let s = segment(&f).expect("a data segment");
        assert_eq!(s.hdr_len, ETH + IP + 32);
        assert_eq!((s.seq, s.payload, s.psh), (1000, 100, true));
        assert_eq!(
            segment(&frame(1000, &[], TcpControl::None, 5)),
            None,
            "pure ACK"
        );
        assert_eq!(segment(&frame(1000, &[1], TcpControl::Fin, 5)), None, "FIN");
        assert_eq!(segment(&frame(1000, &[1], TcpControl::Syn, 5)), None, "SYN");
        assert_eq!(segment(&frame(1000, &[1], TcpControl::Rst, 5)), None, "RST");
        assert_eq!(
            segment(&f[..f.len() - 1]),
            None,
            "length disagrees with IPv4's"
        );
        assert_eq!(segment(&f[..30]), None, "truncated");
    }

    #[test]
    fn consecutive_full_segments_join_and_a_short_one_ends_the_group() {
        let a = frame(1000, &[1; 300], TcpControl::Psh, 5);
        let b = frame(1300, &[2; 300], TcpControl::Psh, 5);
        let c = frame(1600, &[3; 40], TcpControl::Psh, 5);
        let d = frame(1640, &[4; 300], TcpControl::Psh, 5);
        let sa = segment(&a).unwrap();
        let mut g = Group::start(&sa, 300, 64).expect("fits the port's cut");
        assert!(
            Group::start(&sa, 299, 64).is_none(),
            "longer than the port cuts"
        );
        assert!(
            Group::start(&sa, 300, 1).is_none(),
            "a port that chains no mbufs"
        );
        let short = frame(1000, &[1; SEGSZ_MIN - 1], TcpControl::Psh, 5);
        assert!(
            Group::start(&segment(&short).unwrap(), 1000, 64).is_none(),
            "shorter than NICs cut"
        );
        let mut head = a.clone();
        for (f, joins) in [(&b, true), (&c, true), (&d, false)] {
            let s = segment(f).unwrap();
            assert_eq!(g.admits(&head, f, &s), joins);
            if joins {
                g.add(&s);
                rewrite_head(&mut head, &g);
            }
        }
        assert_eq!((g.segs, g.payload, g.next_seq), (3, 640, 1640));
        // The head's header now describes the whole: the IPv4 total length of 640 octets
        // of payload, and the pseudo-header sum without the length in the TCP checksum.
        let ip = Ipv4Packet::new_unchecked(&head[ETH..]);
        assert_eq!(ip.total_len() as usize, IP + 32 + 640);
        // 10.0 + 0.1 + 10.0 + 0.2 + protocol 6, in network-order words.
        let want: u32 = 0x0a00 + 0x0001 + 0x0a00 + 0x0002 + 6;
        let at = ETH + IP + 16;
        assert_eq!(
            u32::from(u16::from_be_bytes([head[at], head[at + 1]])),
            want
        );
    }

    #[test]
    fn a_gap_another_header_or_a_full_group_keeps_a_frame_out() {
        let a = frame(1000, &[1; 300], TcpControl::Psh, 5);
        let sa = segment(&a).unwrap();
        let g = Group::start(&sa, 1000, 64).unwrap();
        let refused = |f: &[u8], why: &str| {
            assert!(!g.admits(&a, f, &segment(f).unwrap()), "{why}");
        };
        refused(&frame(1301, &[2; 300], TcpControl::Psh, 5), "sequence gap");
        refused(
            &frame(1300, &[2; 300], TcpControl::Psh, 6),
            "another timestamp",
        );
        refused(&frame(1300, &[2; 301], TcpControl::Psh, 5), "longer");
        refused(&frame(1300, &[2; 300], TcpControl::None, 5), "another flag");
        let next = frame(1300, &[2; 300], TcpControl::Psh, 5);
        // The fields that may differ between segments (total length, identification,
        // checksums, sequence number) aside, each header octet must match: ACK number,
        // window, the options' SACK blocks.
        let mut other_ack = next.clone();
        other_ack[ETH + IP + 11] ^= 1;
        refused(&other_ack, "another ACK number");
        let mut other_window = next.clone();
        other_window[ETH + IP + 15] ^= 1;
        refused(&other_window, "another window");
        let mut other_option = next.clone();
        other_option[ETH + IP + 25] ^= 1;
        refused(&other_option, "another timestamp echo");
        let mut other_id = next.clone();
        other_id[ETH + 5] ^= 1;
        other_id[ETH + 11] ^= 1;
        other_id[ETH + IP + 17] ^= 1;
        assert!(
            g.admits(&a, &other_id, &segment(&other_id).unwrap()),
            "identification and checksums are the port's"
        );
        let full = Group {
            segs: g.segs_max,
            ..g
        };
        assert!(!full.admits(&a, &next, &segment(&next).unwrap()));
        let big = Group {
            payload: IP_TOTAL_MAX - IP - 32 - 299,
            ..g
        };
        assert!(!big.admits(&a, &next, &segment(&next).unwrap()), "64 KiB");
        assert!(g.admits(&a, &next, &segment(&next).unwrap()));
        assert_eq!(
            Group::start(&sa, 1000, 8).unwrap().segs_max,
            8,
            "the port's chain limit"
        );
        assert_eq!(
            Group::start(&sa, 1000, 1000).unwrap().segs_max,
            SEGMENTS_MAX
        );
    }

    /// A super-frame joined from three frames and cut as the port cuts it gives back the
    /// frames the TCP built, byte for byte, but for what the port changes: the
    /// identification counting up from the head's, PSH on the last only, and the checksums
    /// over those. Anything but a TCP/IPv4 frame with payload is not cut.
    #[test]
    fn a_super_frame_cut_gives_back_the_frames_joined() {
        let frames = [
            frame(1000, &[1; 300], TcpControl::Psh, 5),
            frame(1300, &[2; 300], TcpControl::Psh, 5),
            frame(1600, &[3; 120], TcpControl::Psh, 5),
        ];
        let mut g = Group::start(&segment(&frames[0]).unwrap(), 1000, 64).unwrap();
        let mut sup = frames[0].clone();
        for f in &frames[1..] {
            let s = segment(f).unwrap();
            assert!(g.admits(&sup, f, &s));
            g.add(&s);
            sup.extend_from_slice(&f[s.hdr_len..]);
        }
        rewrite_head(&mut sup, &g);
        sup[ETH + 4..ETH + 6].copy_from_slice(&0x1234u16.to_be_bytes());
        let mut got = Vec::new();
        assert!(cut(&sup, g.segsz, |f| got.push(f.to_vec())));
        assert_eq!(got.len(), 3);
        for (k, (got, sent)) in got.iter().zip(&frames).enumerate() {
            let mut want = sent.clone();
            want[ETH + 4..ETH + 6].copy_from_slice(&(0x1234 + k as u16).to_be_bytes());
            if k < 2 {
                want[ETH + IP + 13] &= !0x08;
            }
            let mut ip = Ipv4Packet::new_unchecked(&mut want[ETH..]);
            ip.fill_checksum();
            let mut t = TcpPacket::new_unchecked(ip.payload_mut());
            t.fill_checksum(
                &Ipv4Address::new(10, 0, 0, 1).into(),
                &Ipv4Address::new(10, 0, 0, 2).into(),
            );
            assert_eq!(got, &want, "segment {k}");
        }
        // No cut: an ARP-like frame, a TCP header with no payload, a segment size of 0.
        let mut arp = frames[0].clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        let hdr = segment(&frames[0]).unwrap().hdr_len;
        for (f, segsz) in [(&arp[..], 300), (&frames[0][..hdr], 300), (&sup[..], 0)] {
            assert!(!cut(f, segsz, |_| panic!("nothing to hand over")));
        }
    }

    #[test]
    fn sack_blocks_that_differ_keep_a_frame_out() {
        let with_sack = |seq: i32, left: u32| {
            emit(&TcpRepr {
                sack_ranges: [Some((left, left + 100)), None, None],
                ..repr(seq, &[9; 300], TcpControl::Psh, 5)
            })
        };
        let a = with_sack(1000, 5000);
        let g = Group::start(&segment(&a).unwrap(), 1000, 64).unwrap();
        let same = with_sack(1300, 5000);
        assert!(g.admits(&a, &same, &segment(&same).unwrap()));
        let other = with_sack(1300, 6000);
        assert!(!g.admits(&a, &other, &segment(&other).unwrap()));
    }
}
