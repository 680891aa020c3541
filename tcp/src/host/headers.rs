//! The Ethernet, IPv4 and TCP headers of every frame the host sends, written field by field
//! from a [`TcpRepr`] in one pass over a local copy of the headers; and the IPv4 and TCP
//! headers of every frame it receives, read in the common case without smoltcp's
//! general option parser.
//!
//! smoltcp's `EthernetRepr`, `Ipv4Repr` and `TcpRepr::emit` set each field through a
//! read-modify-write accessor, emit the options through a generic per-option writer and
//! compute the IPv4 checksum with a second walk over the header: about 550 instructions per
//! segment, a fifth of the cost of sending a small one (issue 12). The octets written here
//! are the same, field for field: the tests below hold every frame to smoltcp's emitters
//! (kept as the reference), over random segments of every option combination. On receive,
//! [`parse_tcp`] reads the segments that carry no options or the timestamps alone (ours,
//! Linux's) itself and hands every other layout to smoltcp's parser; [`parse_ipv4`] verifies
//! the IPv4 checksum with [`csum::sum_to_fold`]; both are held to smoltcp's parsers by the tests.
//! Before all that, [`predict`] reads a frame in the layout of an established connection's
//! data and ACKs, for the connection the last segment went to, in one go (header
//! prediction); the tests hold it to the general path. Within one transmit pass, a
//! connection's run of segments that differ only in their sequence numbers is written from
//! a copy of the headers of the second ([`HeaderRun`]), held by the tests to the writer.

use smoltcp::phy::ChecksumCapabilities;
use smoltcp::wire::{
    EthernetAddress, IpAddress, IpProtocol, Ipv4Address, Ipv4Packet, Ipv4Repr, TcpControl,
    TcpPacket, TcpRepr, TcpSeqNumber, TcpTimestampRepr,
};

use crate::csum;

/// Octets of the Ethernet header.
pub(super) const ETH_HDR: usize = 14;
/// Octets of the IPv4 header (no options).
pub(super) const IP_HDR: usize = 20;
/// The most octets of a TCP header (data offset 15).
const TCP_MAX: usize = 60;

/// The addresses of a frame the host sends.
pub(super) struct FrameAddrs {
    pub(super) src_mac: EthernetAddress,
    pub(super) dst_mac: EthernetAddress,
    pub(super) src: Ipv4Address,
    pub(super) dst: Ipv4Address,
}

/// The TCP header length of `seg` as smoltcp's `TcpRepr::header_len` gives it (the options
/// it counts, rounded up to a multiple of 4), without its iterator over the SACK blocks.
#[inline]
pub(super) fn tcp_header_len(seg: &TcpRepr<'_>) -> usize {
    tcp_header_len_sack(seg, || None).0
}

/// [`tcp_header_len`] of `seg` with its fourth SACK block, written after its three
/// ([`write_headers`]), and that block: 8 octets more (3 blocks take a 48-octet header, 4 a
/// 56-octet one, RFC 2018 3). `fourth` gives the block (`Connection::fourth_sack_block`),
/// asked only of a segment with three blocks: one without SACK blocks takes the branches
/// [`tcp_header_len`] takes.
#[inline(always)]
pub(super) fn tcp_header_len_sack(
    seg: &TcpRepr<'_>,
    fourth: impl FnOnce() -> Option<(u32, u32)>,
) -> (usize, Option<(u32, u32)>) {
    let mut len = 20;
    if seg.max_seg_size.is_some() {
        len += 4;
    }
    if seg.window_scale.is_some() {
        len += 3;
    }
    if seg.sack_permitted {
        len += 2;
    }
    if seg.timestamp.is_some() {
        len += 10;
    }
    let mut f = None;
    let blocks = seg.sack_ranges.iter().filter(|r| r.is_some()).count();
    if blocks > 0 {
        len += 8 * blocks + 2;
        if blocks == 3 {
            f = fourth();
            if f.is_some() {
                len += 8;
            }
        }
    }
    ((len + 3) & !3, f)
}

/// Writes the Ethernet, IPv4 and TCP headers of `seg` carrying `payload_len` octets into the
/// start of `buf`, the TCP checksum field zero, the IPv4 checksum filled in when `ip_csum`
/// (the port does not compute it), zero otherwise: the octets smoltcp's emitters write
/// (`TcpRepr::emit` with the TCP checksum off). Returns the TCP header length.
///
/// The header must fit a data offset (at most 60 octets: every segment a connection
/// sends does; smoltcp would write a corrupt offset for a longer one).
///
/// `fourth` is a fourth SACK block written after the three of `seg` (smoltcp's `TcpRepr`
/// holds three): 40 octets of options hold four beside no timestamps (RFC 2018 3), and the
/// receiver SHOULD send as many as it can (RFC 2018 4). `Some` only for a segment with three
/// blocks and no timestamps (`Connection::fourth_sack_block`).
#[inline]
pub(super) fn write_headers(
    buf: &mut [u8],
    a: &FrameAddrs,
    seg: &TcpRepr<'_>,
    fourth: Option<(u32, u32)>,
    payload_len: usize,
    ip_csum: bool,
) -> usize {
    debug_assert!(
        fourth.is_none() || (seg.sack_ranges[2].is_some() && seg.timestamp.is_none()),
        "a fourth SACK block beside fewer than three or beside timestamps"
    );
    let hl = tcp_header_len(seg) + if fourth.is_some() { 8 } else { 0 };
    debug_assert!(hl <= TCP_MAX, "TCP header of {hl} octets");
    let (s, d) = (a.src.octets(), a.dst.octets());
    // Ethernet and IPv4: version 4, IHL 5, DSCP/ECN 0, identification 0, DF, TTL 64, TCP.
    let total = (IP_HDR as u16).wrapping_add((hl + payload_len) as u16);
    let t = total.to_be_bytes();
    let (m, n) = (a.dst_mac.0, a.src_mac.0);
    let mut l2l3: [u8; ETH_HDR + IP_HDR] = [
        m[0], m[1], m[2], m[3], m[4], m[5], n[0], n[1], n[2], n[3], n[4], n[5], 0x08, 0x00, 0x45,
        0, t[0], t[1], 0, 0, 0x40, 0, 64, 6, 0, 0, s[0], s[1], s[2], s[3], d[0], d[1], d[2], d[3],
    ];
    if ip_csum {
        // The header's big-endian words, the checksum field zero (RFC 791).
        let word = |o: [u8; 4]| {
            u32::from(u16::from_be_bytes([o[0], o[1]]))
                + u32::from(u16::from_be_bytes([o[2], o[3]]))
        };
        let mut sum = 0x4500 + u32::from(total) + 0x4000 + 0x4006 + word(s) + word(d);
        sum = (sum & 0xffff) + (sum >> 16);
        sum = (sum & 0xffff) + (sum >> 16);
        let c = (!(sum as u16)).to_be_bytes();
        l2l3[24] = c[0];
        l2l3[25] = c[1];
    }
    // TCP: the fixed part, then the options in smoltcp's order (MSS, window scale, SACK
    // permitted or else the SACK blocks of an ACK, timestamps), the rest end-of-list (0).
    let mut h = [0u8; TCP_MAX];
    h[0..2].copy_from_slice(&seg.src_port.to_be_bytes());
    h[2..4].copy_from_slice(&seg.dst_port.to_be_bytes());
    h[4..8].copy_from_slice(&seg.seq_number.0.to_be_bytes());
    if let Some(ack) = seg.ack_number {
        h[8..12].copy_from_slice(&ack.0.to_be_bytes());
    }
    h[12] = ((hl / 4) as u8) << 4;
    h[13] = match seg.control {
        TcpControl::None => 0,
        TcpControl::Fin => 0x01,
        TcpControl::Syn => 0x02,
        TcpControl::Rst => 0x04,
        TcpControl::Psh => 0x08,
    } | if seg.ack_number.is_some() { 0x10 } else { 0 };
    h[14..16].copy_from_slice(&seg.window_len.to_be_bytes());
    let mut at = 20;
    if let Some(mss) = seg.max_seg_size {
        let v = mss.to_be_bytes();
        h[at..at + 4].copy_from_slice(&[2, 4, v[0], v[1]]);
        at += 4;
    }
    if let Some(ws) = seg.window_scale {
        h[at..at + 3].copy_from_slice(&[3, 3, ws]);
        at += 3;
    }
    if seg.sack_permitted {
        h[at..at + 2].copy_from_slice(&[4, 2]);
        at += 2;
    } else if seg.ack_number.is_some() && seg.sack_ranges.iter().any(Option::is_some) {
        h[at] = 5;
        let start = at;
        at += 2;
        for &(l, r) in seg.sack_ranges.iter().flatten().chain(fourth.iter()) {
            h[at..at + 4].copy_from_slice(&l.to_be_bytes());
            h[at + 4..at + 8].copy_from_slice(&r.to_be_bytes());
            at += 8;
        }
        h[start + 1] = (at - start) as u8;
    }
    if let Some(ts) = seg.timestamp {
        h[at] = 8;
        h[at + 1] = 10;
        h[at + 2..at + 6].copy_from_slice(&ts.tsval.to_be_bytes());
        h[at + 6..at + 10].copy_from_slice(&ts.tsecr.to_be_bytes());
    }
    buf[..ETH_HDR + IP_HDR].copy_from_slice(&l2l3);
    buf[ETH_HDR + IP_HDR..ETH_HDR + IP_HDR + hl].copy_from_slice(&h[..hl]);
    hl
}

/// What a data segment's headers depend on besides its sequence number: two segments with
/// the same key have the same Ethernet, IPv4 and TCP header octets but for the sequence
/// number (and the TCP checksum), for one connection and one port (the addresses and
/// the IPv4 checksum setting fixed). Only segments without the SYN's options and without
/// SACK blocks have one: those a run of data segments is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Key([u64; 3]);

impl Key {
    /// The key of `seg` carrying `payload_len` octets, packed in three words (compared in
    /// three instructions, not field by field).
    #[inline]
    fn of(seg: &TcpRepr<'_>, payload_len: usize) -> Option<Key> {
        let plain = seg.max_seg_size.is_none()
            && seg.window_scale.is_none()
            && !seg.sack_permitted
            && seg.sack_ranges.iter().all(Option::is_none);
        if !plain {
            return None;
        }
        let control = match seg.control {
            TcpControl::None => 0u64,
            TcpControl::Psh => 1,
            TcpControl::Syn => 2,
            TcpControl::Fin => 3,
            TcpControl::Rst => 4,
        };
        let (ack, has_ack) = match seg.ack_number {
            Some(a) => (u64::from(a.0 as u32), 1u64),
            None => (0, 0),
        };
        let (ts, has_ts) = match seg.timestamp {
            Some(t) => ((u64::from(t.tsval) << 32) | u64::from(t.tsecr), 1u64),
            None => (0, 0),
        };
        Some(Key([
            (u64::from(seg.src_port) << 48)
                | (u64::from(seg.dst_port) << 32)
                | (u64::from(seg.window_len) << 16)
                | (control << 8)
                | (has_ack << 1)
                | has_ts,
            (ack << 32) | (payload_len as u64 & 0xffff_ffff),
            ts,
        ]))
    }
}

/// Octets a [`HeaderRun`] keeps: the longest headers, rounded up to whole 32-octet moves.
const COPY_MAX: usize = 96;

/// The headers of a run of data segments, written once (issue 12 item 4, the first part of
/// segment trains): within one transmit pass a connection's consecutive full segments
/// differ only in their sequence numbers (the pass reads the clock once, so the
/// timestamps agree; the ACK number and the window move only when a frame is received),
/// so each after the second is written by copying the octets [`write_headers`] wrote for
/// the second and patching its sequence number, and its TCP checksum starts from the sum of
/// the pseudo-header and those octets taken once ([`HeaderRun::tcp_checksum`]). About 130
/// instructions fewer per segment of a bulk transfer in callgrind (the field-by-field
/// writing, the IPv4 checksum, the header's sum); a pass that sends one segment pays only
/// for its key. One per connection per transmit pass: the addresses and checksum settings a pass
/// writes with do not change within it. The tests hold every frame written this way to
/// [`write_headers`] and [`tcp_checksum`].
#[derive(Debug, Default)]
pub(super) struct HeaderRun {
    /// The key of the last segment written, if it had one.
    last: Option<Key>,
    /// The copied headers: their key, octets and length, and the unfolded sum of the
    /// pseudo-header and the TCP header with its sequence number and checksum zero.
    copy: Option<(Key, [u8; COPY_MAX], usize, u64)>,
    /// Whether the last segment's headers came from the copy.
    hit: bool,
}

impl HeaderRun {
    /// [`write_headers`] for `seg`, from the copy when the previous segment of the pass
    /// had the same key. The copy is taken at the second segment of a run, not the first:
    /// a lone segment pays for no copy and no sum it would not use.
    #[inline]
    pub(super) fn write(
        &mut self,
        buf: &mut [u8],
        a: &FrameAddrs,
        seg: &TcpRepr<'_>,
        fourth: Option<(u32, u32)>,
        payload_len: usize,
        ip_csum: bool,
    ) -> usize {
        let key = Key::of(seg, payload_len);
        self.hit = false;
        // Word by word, with no tuple of the two: the key stays in registers. (Moved
        // through the stack it was written by 8-octet stores and read back by a 16-octet
        // load, which no store can forward: the load waited for the previous frame's
        // stores to reach the cache, two thirds of this function's time in `perf`.)
        if let (Some(Key(k)), Some((Key(ck), bytes, len, _))) = (key.as_ref(), self.copy.as_ref()) {
            if k[0] == ck[0] && k[1] == ck[1] && k[2] == ck[2] {
                // All of the copy where the frame has room (a full segment's: a copy of
                // fixed length, a few vector moves, where the payload written next
                // overwrites what lies past the headers), else the headers alone.
                match buf.first_chunk_mut::<COPY_MAX>() {
                    Some(b) => *b = *bytes,
                    None => buf[..*len].copy_from_slice(&bytes[..*len]),
                }
                let at = ETH_HDR + IP_HDR + 4;
                buf[at..at + 4].copy_from_slice(&seg.seq_number.0.to_be_bytes());
                let hl = *len - ETH_HDR - IP_HDR;
                self.hit = true;
                // The copy's key, equal to this segment's, read from the copy (written
                // passes ago): `key` itself sits on the stack in 8-octet stores just made,
                // and copying it whole would load it in 16-octet halves no store can
                // forward, as above (72 % of this function's samples in `perf`).
                self.last = self.copy.as_ref().map(|c| c.0);
                return hl;
            }
        }
        // (A segment with a fourth SACK block has no key: it has SACK blocks.)
        let hl = write_headers(buf, a, seg, fourth, payload_len, ip_csum);
        if key.is_some() && key == self.last {
            let len = ETH_HDR + IP_HDR + hl;
            let mut bytes = [0u8; COPY_MAX];
            bytes[..len].copy_from_slice(&buf[..len]);
            let tcp = &mut bytes[ETH_HDR + IP_HDR..len];
            tcp[4..8].fill(0);
            let tcp_len = (hl + payload_len) as u16;
            let sum = csum::pseudo_header(a.src, a.dst, tcp_len) + csum::sum_to_fold(tcp);
            tcp[4..8].copy_from_slice(&seg.seq_number.0.to_be_bytes());
            // The key checked above: `Some`.
            self.copy = key.map(|k| (k, bytes, len, sum));
        }
        self.last = key;
        hl
    }

    /// [`tcp_checksum`] of the segment whose headers [`Self::write`] just wrote (`header`
    /// its TCP header, checksum field zero): from the copy's sum and the sequence number
    /// when they came from the copy.
    #[inline]
    pub(super) fn tcp_checksum(
        &self,
        a: &FrameAddrs,
        header: &[u8],
        payload_len: usize,
        payload_sum: u64,
    ) -> [u8; 2] {
        match &self.copy {
            Some((_, _, _, sum)) if self.hit => {
                csum::finish(sum + csum::sum_to_fold(&header[4..8]) + payload_sum)
            }
            _ => tcp_checksum(a, header, payload_len, payload_sum),
        }
    }
}

/// The TCP checksum field of a segment from `a.src` to `a.dst` whose TCP header is
/// `header` (checksum field zero) and whose payload of `payload_len` octets sums to
/// `payload_sum` ([`csum::sum`], or any sum that folds the same).
#[inline]
pub(super) fn tcp_checksum(
    a: &FrameAddrs,
    header: &[u8],
    payload_len: usize,
    payload_sum: u64,
) -> [u8; 2] {
    let len = (header.len() + payload_len) as u16;
    csum::finish(csum::pseudo_header(a.src, a.dst, len) + csum::sum_to_fold(header) + payload_sum)
}

/// `Ipv4Repr::parse(p, caps)` of a packet that `Ipv4Packet::new_checked` accepted and that is
/// no fragment (the host counts those apart): the header checksum, where the port did not
/// verify it, summed by [`csum::sum_to_fold`] instead of smoltcp's octet-pair loop.
#[inline]
pub(super) fn parse_ipv4(
    p: &Ipv4Packet<&[u8]>,
    caps: &ChecksumCapabilities,
) -> Result<Ipv4Repr, ()> {
    if p.version() != 4 {
        return Err(());
    }
    let hl = usize::from(p.header_len());
    if caps.ipv4.rx() {
        let b: &[u8] = p.as_ref();
        if !csum::verifies(csum::sum_to_fold(&b[..hl])) {
            return Err(());
        }
    }
    Ok(Ipv4Repr {
        src_addr: p.src_addr(),
        dst_addr: p.dst_addr(),
        next_header: IpProtocol::from(p.as_ref()[9]),
        payload_len: usize::from(p.total_len()) - hl,
        hop_limit: p.hop_limit(),
    })
}

/// `Ipv4Packet::payload` of the packet `b` that `Ipv4Packet::new_checked` accepted (its
/// header and total lengths within `b`), read in place rather than through smoltcp's
/// accessors (a call each per frame).
#[inline(always)]
pub(super) fn ipv4_payload(b: &[u8]) -> &[u8] {
    let [v, _, t0, t1, ..] = *b else {
        return &[];
    };
    let hl = usize::from(v & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([t0, t1]));
    b.get(hl..total).unwrap_or(&[])
}

/// The options `o` of a TCP header when they are none (`Some(None)`) or the timestamps
/// alone, as ours (timestamps, end of list) and Linux's (two NOPs, timestamps) established
/// connections send them; `None` for any other layout.
#[inline(always)]
fn timestamps_alone(o: &[u8]) -> Option<Option<TcpTimestampRepr>> {
    match *o {
        [] => Some(None),
        [8, 10, v0, v1, v2, v3, e0, e1, e2, e3, 0, _]
        | [1, 1, 8, 10, v0, v1, v2, v3, e0, e1, e2, e3] => Some(Some(TcpTimestampRepr::new(
            u32::from_be_bytes([v0, v1, v2, v3]),
            u32::from_be_bytes([e0, e1, e2, e3]),
        ))),
        _ => None,
    }
}

/// The segment of one connection, from `remote` to `local` (each an address and port),
/// that `frame` carries when it has the layout of an established connection's data and
/// ACKs: Ethernet to `mac` carrying IPv4 (a 20-octet header, no fragment, TCP) with
/// both checksums right where `caps` asks, TCP with ACK and at most PSH beside it and the
/// options [`parse_tcp`] reads itself. It is the `TcpRepr` the general path (Ethernet,
/// [`parse_ipv4`], the TCP checksum, [`parse_tcp`]) gives for such a frame, read without
/// its checked views, its IPv4 representation and its look-up of the connection (header
/// prediction: the one the last segment went to). `None` for every other frame, the
/// general path deciding (and counting what it drops).
///
/// With `digest` (a [`csum::BulkSumDigest`] and the shortest payload it is for), a payload
/// that long whose TCP checksum is verified here is summed by it, and its digest comes
/// back beside the segment: one pass over the payload for the sum and the digest.
#[inline(always)]
pub(super) fn predict<'a>(
    frame: &'a [u8],
    mac: EthernetAddress,
    (remote, remote_port): (Ipv4Address, u16),
    (local, local_port): (Ipv4Address, u16),
    (caps, bulk, digest): (
        &ChecksumCapabilities,
        csum::BulkSum,
        Option<(csum::BulkSumDigest, usize)>,
    ),
) -> Option<(TcpRepr<'a>, Option<u32>)> {
    let (eth, ip) = frame.split_at_checked(ETH_HDR)?;
    if eth[..6] != mac.0 || eth[12..14] != [0x08, 0x00] {
        return None;
    }
    // Version 4 and IHL 5, the total length, no more fragments and offset 0, TCP, the
    // addresses.
    let [0x45, _, t0, t1, _, _, f0, f1, _, 6, _, _, s0, s1, s2, s3, d0, d1, d2, d3, ..] = *ip
    else {
        return None;
    };
    if u16::from_be_bytes([f0, f1]) & 0x3fff != 0
        || [s0, s1, s2, s3] != remote.octets()
        || [d0, d1, d2, d3] != local.octets()
    {
        return None;
    }
    let tcp = ip.get(IP_HDR..usize::from(u16::from_be_bytes([t0, t1])))?;
    if tcp.len() < 20 || tcp[13] & !0x08 != 0x10 {
        return None;
    }
    let be16 = |at: usize| u16::from_be_bytes([tcp[at], tcp[at + 1]]);
    // Port 0 is no connection's (the general parse refuses it, as smoltcp's does): a
    // tuple of one never matches.
    if be16(0) != remote_port || be16(2) != local_port || remote_port == 0 || local_port == 0 {
        return None;
    }
    let hl = usize::from(tcp[12] >> 4) * 4;
    let timestamp = timestamps_alone(tcp.get(20..hl)?)?;
    if caps.ipv4.rx() && !csum::verifies(csum::sum_to_fold(&ip[..IP_HDR])) {
        return None;
    }
    let mut digested = None;
    if caps.tcp.rx() {
        let sum = match (digest, tcp.split_at_checked(hl)) {
            // The header from an even offset (`hl` is a multiple of 4), so the two sums add.
            (Some((f, min)), Some((header, payload))) if payload.len() >= min => {
                let (payload_sum, d) = f(payload);
                digested = Some(d);
                csum::sum_to_fold(header) + payload_sum
            }
            _ => csum::sum_to_fold_with(tcp, bulk),
        };
        if !csum::verifies(csum::pseudo_header(remote, local, tcp.len() as u16) + sum) {
            return None;
        }
    }
    let control = if tcp[13] & 0x08 != 0 {
        TcpControl::Psh
    } else {
        TcpControl::None
    };
    Some((plain_repr(tcp, hl, control, true, timestamp), digested))
}

/// The `TcpRepr` of the segment `b` with a header of `hl` octets, the ACK flag `ack` and
/// no options but `timestamp`: the fields read where they lie.
#[inline(always)]
fn plain_repr(
    b: &[u8],
    hl: usize,
    control: TcpControl,
    ack: bool,
    timestamp: Option<TcpTimestampRepr>,
) -> TcpRepr<'_> {
    // The fixed header as one array: its fields are then read without a bounds check
    // each (both callers saw at least 20 octets; a shorter `b` gets the empty header's
    // zeros, never a panic).
    let h: [u8; 20] = b
        .get(..20)
        .and_then(|h| h.try_into().ok())
        .unwrap_or([0; 20]);
    let [p0, p1, q0, q1, s0, s1, s2, s3, a0, a1, a2, a3, _, _, w0, w1, ..] = h;
    TcpRepr {
        src_port: u16::from_be_bytes([p0, p1]),
        dst_port: u16::from_be_bytes([q0, q1]),
        control,
        seq_number: TcpSeqNumber(i32::from_be_bytes([s0, s1, s2, s3])),
        ack_number: ack.then_some(TcpSeqNumber(i32::from_be_bytes([a0, a1, a2, a3]))),
        window_len: u16::from_be_bytes([w0, w1]),
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp,
        payload: b.get(hl..).unwrap_or(&[]),
    }
}

/// `TcpRepr::parse` of the TCP segment `b` (its lengths checked by `TcpPacket::new_checked`)
/// with the checksum not verified (the host verified it): the segments without options or
/// with the timestamps alone, as ours (timestamps, end of list) and Linux's (two NOPs,
/// timestamps) established connections send them, are read here; every other layout goes
/// to smoltcp's parser.
#[inline]
pub(super) fn parse_tcp<'a>(
    b: &'a [u8],
    src: &IpAddress,
    dst: &IpAddress,
    caps_no_tcp: &ChecksumCapabilities,
) -> Result<TcpRepr<'a>, ()> {
    let general =
        || TcpRepr::parse(&TcpPacket::new_unchecked(b), src, dst, caps_no_tcp).map_err(drop);
    if b.len() < 20 {
        return general();
    }
    let hl = usize::from(b[12] >> 4) * 4;
    let Some(timestamp) = b.get(20..hl).and_then(timestamps_alone) else {
        return general();
    };
    let be16 = |at: usize| u16::from_be_bytes([b[at], b[at + 1]]);
    let (src_port, dst_port) = (be16(0), be16(2));
    if src_port == 0 || dst_port == 0 {
        return Err(());
    }
    let flags = b[13];
    // (SYN, FIN, RST, PSH) as smoltcp reads them; URG, ECE, CWR and NS are ignored.
    let control = match (
        flags & 0x02 != 0,
        flags & 0x01 != 0,
        flags & 0x04 != 0,
        flags & 0x08 != 0,
    ) {
        (false, false, false, false) => TcpControl::None,
        (false, false, false, true) => TcpControl::Psh,
        (true, false, false, _) => TcpControl::Syn,
        (false, true, false, _) => TcpControl::Fin,
        (false, false, true, _) => TcpControl::Rst,
        _ => return Err(()),
    };
    Ok(plain_repr(b, hl, control, flags & 0x10 != 0, timestamp))
}

/// The fourth block of the SACK option of the TCP segment `b`, if it has one: smoltcp's
/// parser keeps the first three of the four that 40 octets of options hold without
/// timestamps (RFC 2018 3). Asked only of a segment that smoltcp's parser accepted with
/// three blocks; of several SACK options the last counts, as in that parser.
#[cold]
pub(super) fn fourth_sack_block(b: &[u8]) -> Option<(u32, u32)> {
    let hl = usize::from(*b.get(12)? >> 4) * 4;
    let mut opts = b.get(20..hl)?;
    let mut fourth = None;
    while let [kind, rest @ ..] = opts {
        match kind {
            0 => break,
            1 => opts = rest,
            _ => {
                let len = usize::from(*rest.first()?);
                if len < 2 || len > opts.len() {
                    break;
                }
                if *kind == 5 {
                    fourth = opts.get(26..34).filter(|_| len == 34).map(|o| {
                        let be = |at: usize| {
                            u32::from_be_bytes([o[at], o[at + 1], o[at + 2], o[at + 3]])
                        };
                        (be(0), be(4))
                    });
                }
                opts = &opts[len..];
            }
        }
    }
    fourth
}

/// The Window Scale shift the TCP segment `b` carries as sent (the last option, as
/// `TcpRepr::parse` reads them), for a segment that parse gave a shift of 14: the parse
/// turns every shift above 14 into 14 (RFC 7323 2.3), and the connection counts and logs
/// such a shift. Only segments with a Window Scale option of 14 or more come here (SYNs).
#[cold]
pub(super) fn window_scale_as_sent(b: &[u8]) -> Option<u8> {
    let summary = TcpPacket::new_checked(b).ok()?.options_summary().ok()?;
    summary.window_scale.map(|ws| ws.max(14))
}

#[cfg(test)]
pub(super) mod reference {
    //! The emitters [`super::write_headers`] replaced: smoltcp's, as the host called them.

    use smoltcp::phy::ChecksumCapabilities;
    use smoltcp::wire::{
        EthernetFrame, EthernetProtocol, EthernetRepr, IpAddress, IpProtocol, Ipv4Packet, Ipv4Repr,
        TcpPacket, TcpRepr,
    };

    use super::{FrameAddrs, ETH_HDR, IP_HDR};

    /// Writes the Ethernet and IPv4 headers of a TCP segment of `tcp_len` octets into `buf`
    /// through smoltcp and returns the rest of `buf`, where the segment goes.
    fn emit_l2l3<'b>(
        buf: &'b mut [u8],
        a: &FrameAddrs,
        tcp_len: usize,
        caps: &ChecksumCapabilities,
    ) -> &'b mut [u8] {
        let mut eth = EthernetFrame::new_unchecked(buf);
        EthernetRepr {
            src_addr: a.src_mac,
            dst_addr: a.dst_mac,
            ethertype: EthernetProtocol::Ipv4,
        }
        .emit(&mut eth);
        let ip = Ipv4Repr {
            src_addr: a.src,
            dst_addr: a.dst,
            next_header: IpProtocol::Tcp,
            payload_len: tcp_len,
            hop_limit: 64,
        };
        let mut ipp = Ipv4Packet::new_unchecked(&mut eth.into_inner()[ETH_HDR..]);
        ip.emit(&mut ipp, caps);
        &mut ipp.into_inner()[IP_HDR..]
    }

    /// Writes the Ethernet, IPv4 and TCP headers of `seg` carrying `payload_len` octets into
    /// `buf` (checksum field zero) through smoltcp.
    pub(in crate::host) fn emit_tcp_header(
        buf: &mut [u8],
        a: &FrameAddrs,
        seg: &TcpRepr<'_>,
        payload_len: usize,
        caps: &ChecksumCapabilities,
        caps_no_tcp: &ChecksumCapabilities,
    ) {
        let tcp = emit_l2l3(buf, a, seg.header_len() + payload_len, caps);
        let header = TcpRepr {
            payload: &[],
            ..*seg
        };
        header.emit(
            &mut TcpPacket::new_unchecked(tcp),
            &IpAddress::Ipv4(a.src),
            &IpAddress::Ipv4(a.dst),
            caps_no_tcp,
        );
    }

    /// A whole frame carrying `seg` (its payload included, the TCP checksum filled in where
    /// `caps` says the port does not compute it) as smoltcp emits it.
    pub(in crate::host) fn emit_frame(
        a: &FrameAddrs,
        seg: &TcpRepr<'_>,
        caps: &ChecksumCapabilities,
    ) -> Vec<u8> {
        let mut f = vec![0xa5; ETH_HDR + IP_HDR + seg.buffer_len()];
        let tcp = emit_l2l3(&mut f, a, seg.buffer_len(), caps);
        seg.emit(
            &mut TcpPacket::new_unchecked(tcp),
            &IpAddress::Ipv4(a.src),
            &IpAddress::Ipv4(a.dst),
            caps,
        );
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use smoltcp::phy::{Checksum, ChecksumCapabilities};
    use smoltcp::wire::{TcpSeqNumber, TcpTimestampRepr};

    fn caps(ip: bool, tcp: bool) -> ChecksumCapabilities {
        let mut c = ChecksumCapabilities::default();
        c.ipv4 = if ip { Checksum::Both } else { Checksum::None };
        c.tcp = if tcp { Checksum::Both } else { Checksum::None };
        c
    }

    fn control(k: u8) -> TcpControl {
        match k % 5 {
            0 => TcpControl::None,
            1 => TcpControl::Psh,
            2 => TcpControl::Syn,
            3 => TcpControl::Fin,
            _ => TcpControl::Rst,
        }
    }

    #[allow(clippy::type_complexity)]
    fn segment() -> impl Strategy<Value = (TcpRepr<'static>, usize)> {
        (
            (any::<u16>(), any::<u16>(), 0u8..5, any::<i32>()),
            (proptest::option::of(any::<i32>()), any::<u16>()),
            (
                proptest::option::of(any::<u8>()),
                proptest::option::of(any::<u16>()),
                any::<bool>(),
            ),
            proptest::array::uniform3(proptest::option::of((any::<u32>(), any::<u32>()))),
            proptest::option::of((any::<u32>(), any::<u32>())),
            0usize..300,
        )
            .prop_map(|(fixed, (ack, win), (ws, mss, sp), sack, ts, len)| {
                let seg = TcpRepr {
                    src_port: fixed.0,
                    dst_port: fixed.1,
                    control: control(fixed.2),
                    seq_number: TcpSeqNumber(fixed.3),
                    ack_number: ack.map(TcpSeqNumber),
                    window_len: win,
                    window_scale: ws,
                    max_seg_size: mss,
                    sack_permitted: sp,
                    sack_ranges: sack,
                    timestamp: ts.map(|(v, e)| TcpTimestampRepr::new(v, e)),
                    payload: &[],
                };
                (seg, len)
            })
            // A data offset holds at most 60 octets: smoltcp writes a corrupt one past that,
            // and no connection sends such a segment.
            .prop_filter("header fits a data offset", |(s, _)| s.header_len() <= 60)
    }

    fn addrs(m: [u8; 6], n: [u8; 6], s: [u8; 4], d: [u8; 4]) -> FrameAddrs {
        FrameAddrs {
            src_mac: EthernetAddress(m),
            dst_mac: EthernetAddress(n),
            src: Ipv4Address::from(s),
            dst: Ipv4Address::from(d),
        }
    }

    /// A payload digest for the tests: the true sum, and the octets XORed together in
    /// 32-bit words (any function of the octets would do).
    fn sum_and_xor(d: &[u8]) -> (u64, u32) {
        let x = d.chunks(4).fold(0u32, |x, w| {
            let mut b = [0u8; 4];
            b[..w.len()].copy_from_slice(w);
            x.rotate_left(5) ^ u32::from_le_bytes(b)
        });
        (csum::sum(d), x)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        /// Every header octet as smoltcp writes it, over a buffer full of garbage, with the
        /// IPv4 checksum offloaded or not; the TCP checksum as smoltcp's `fill_checksum`
        /// computes it over the payload.
        #[test]
        fn headers_and_checksums_match_smoltcp(
            (seg, len) in segment(),
            m in any::<[u8; 6]>(), n in any::<[u8; 6]>(),
            s in any::<[u8; 4]>(), d in any::<[u8; 4]>(),
            ip in any::<bool>(), tcp in any::<bool>(), junk in any::<u8>(),
            seed in any::<u8>(),
        ) {
            let a = addrs(m, n, s, d);
            let payload: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(seed) ^ 0x3c).collect();
            let full = TcpRepr { payload: &payload, ..seg };
            let want = reference::emit_frame(&a, &full, &caps(ip, tcp));
            let mut got = vec![junk; want.len()];
            let hl = write_headers(&mut got, &a, &seg, None, len, ip);
            prop_assert_eq!(hl, seg.header_len());
            let start = ETH_HDR + IP_HDR;
            got[start + hl..].copy_from_slice(&payload);
            if tcp {
                let c = tcp_checksum(&a, &got[start..start + hl], len, csum::sum(&payload));
                got[start + 16..start + 18].copy_from_slice(&c);
            }
            prop_assert_eq!(got, want);

            // The header alone, as the host's piecewise path wrote it.
            let mut h1 = vec![junk; start + hl + len];
            let mut h2 = vec![!junk; start + hl + len];
            write_headers(&mut h1, &a, &seg, None, len, ip);
            reference::emit_tcp_header(&mut h2, &a, &seg, len, &caps(ip, tcp), &caps(ip, false));
            prop_assert_eq!(&h1[..start + hl], &h2[..start + hl]);
        }
    }

    /// How the next segment of a run differs from the one before it: mostly not at all.
    fn step() -> impl Strategy<Value = (u8, u32, u16)> {
        (0u8..8, any::<u32>(), 0u16..300)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// A pass's run of segments written through [`HeaderRun`] (issue 12 item 4): every
        /// header octet and the TCP checksum as [`write_headers`] and [`tcp_checksum`]
        /// write them for each segment alone, over buffers full of garbage, whether the
        /// next segment keeps every field but the sequence number (mostly: the copy is
        /// used) or changes one (the ACK, the window, the timestamps, the flags, the
        /// payload's length, SACK blocks, the SYN's options: the copy must not be used).
        #[test]
        fn a_run_of_segments_has_the_headers_of_each_alone(
            (first, len) in segment(),
            steps in proptest::collection::vec(step(), 1..12),
            m in any::<[u8; 6]>(), n in any::<[u8; 6]>(),
            s in any::<[u8; 4]>(), d in any::<[u8; 4]>(),
            ip in any::<bool>(), junk in any::<u8>(), seed in any::<u8>(),
        ) {
            let a = addrs(m, n, s, d);
            let mut run = HeaderRun::default();
            let (mut seg, mut len) = (first, len);
            let (mut hits, mut keys) = (0, Vec::new());
            for (i, &(how, v, l)) in steps.iter().enumerate() {
                if i > 0 {
                    seg.seq_number += len;
                    match how {
                        0..=3 => {}
                        4 => seg.window_len = v as u16,
                        5 => seg.ack_number = Some(TcpSeqNumber(v as i32)),
                        6 => seg.timestamp = Some(TcpTimestampRepr::new(v, v ^ 0x5a5a)),
                        _ => len = usize::from(l),
                    }
                    if how == 7 && v % 3 == 0 {
                        seg.sack_ranges[0] = Some((v, v.wrapping_add(100)));
                    }
                    if how == 7 && v % 3 == 1 {
                        seg.control = control(v as u8);
                    }
                    if seg.header_len() > 60 {
                        seg.sack_ranges = [None; 3];
                    }
                }
                let payload: Vec<u8> =
                    (0..len).map(|k| (k as u8).wrapping_mul(seed) ^ i as u8).collect();
                let start = ETH_HDR + IP_HDR;
                let hl = seg.header_len();
                let mut want = vec![!junk; start + hl + len];
                write_headers(&mut want, &a, &seg, None, len, ip);
                want[start + hl..].copy_from_slice(&payload);
                let c = tcp_checksum(&a, &want[start..start + hl], len, csum::sum(&payload));
                want[start + 16..start + 18].copy_from_slice(&c);

                let mut got = vec![junk; start + hl + len];
                prop_assert_eq!(run.write(&mut got, &a, &seg, None, len, ip), hl);
                hits += usize::from(run.hit);
                keys.push(Key::of(&seg, len));
                got[start + hl..].copy_from_slice(&payload);
                let c = run.tcp_checksum(&a, &got[start..start + hl], len, csum::sum(&payload));
                got[start + 16..start + 18].copy_from_slice(&c);
                prop_assert_eq!(&got, &want, "segment {} of the run", i);
                let full = TcpRepr { payload: &payload, ..seg };
                prop_assert_eq!(&got, &reference::emit_frame(&a, &full, &caps(ip, true)));
            }
            // The copy is used exactly when a model of the rule says: taken at the second
            // of two segments in a row with the same key, used for each later one with
            // that key (a run of unchanged segments copies from its third on).
            let (mut copied, mut last, mut want_hits) = (None, None, 0);
            for k in keys {
                if k.is_some() && k == copied {
                    want_hits += 1;
                } else if k.is_some() && k == last {
                    copied = k;
                }
                last = k;
            }
            prop_assert_eq!(hits, want_hits);
        }
    }

    /// A bulk transfer's run: six full segments of one pass, the first two written field by
    /// field, the four after them copied (issue 12 item 4).
    #[test]
    fn a_run_of_full_segments_copies_from_its_third() {
        let a = addrs([2; 6], [4; 6], [198, 18, 0, 1], [198, 18, 0, 2]);
        let mut seg = TcpRepr {
            src_port: 49152,
            dst_port: 4791,
            control: TcpControl::Psh,
            seq_number: TcpSeqNumber(1000),
            ack_number: Some(TcpSeqNumber(77)),
            window_len: 4096,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp: Some(TcpTimestampRepr::new(5, 6)),
            payload: &[],
        };
        let mut run = HeaderRun::default();
        let mut hits = Vec::new();
        for _ in 0..6 {
            let mut f = vec![0u8; ETH_HDR + IP_HDR + 32 + 1436];
            run.write(&mut f, &a, &seg, None, 1436, true);
            hits.push(run.hit);
            seg.seq_number += 1436;
        }
        assert_eq!(hits, [false, false, true, true, true, true]);

        // Keys A A B A B B (A the full length, B a shorter one): the copy is A's, taken at
        // the second A and used for the next A; B's is taken at the second B in a row,
        // not at a B that follows a copied A.
        let mut run = HeaderRun::default();
        let mut hits = Vec::new();
        for len in [1436, 1436, 1000, 1436, 1000, 1000] {
            let mut f = vec![0u8; ETH_HDR + IP_HDR + 32 + len];
            run.write(&mut f, &a, &seg, None, len, true);
            hits.push(run.hit);
            seg.seq_number += len;
        }
        assert_eq!(hits, [false, false, false, true, false, false]);
    }

    /// TCP options: mostly the layouts the fast path reads, the others around them.
    fn options() -> impl Strategy<Value = Vec<u8>> {
        let ts = (any::<[u8; 8]>(), any::<u8>()).prop_map(|(v, x)| {
            let mut o = vec![8, 10];
            o.extend_from_slice(&v);
            o.extend_from_slice(&[0, x]);
            o
        });
        let linux = any::<[u8; 8]>().prop_map(|v| {
            let mut o = vec![1, 1, 8, 10];
            o.extend_from_slice(&v);
            o
        });
        let opt = prop_oneof![
            Just(vec![0u8]),
            Just(vec![1u8]),
            any::<u16>().prop_map(|m| vec![2, 4, (m >> 8) as u8, m as u8]),
            any::<u8>().prop_map(|w| vec![3, 3, w]),
            Just(vec![4u8, 2]),
            any::<[u8; 8]>().prop_map(|v| [&[8u8, 10][..], &v[..]].concat()),
            proptest::collection::vec(any::<u8>(), 8..=24).prop_map(|v| {
                let n = v.len() / 8 * 8;
                [&[5u8, n as u8 + 2][..], &v[..n]].concat()
            }),
            proptest::collection::vec(any::<u8>(), 0..6),
        ];
        let mixed = proptest::collection::vec(opt, 0..5).prop_map(|v| v.concat());
        prop_oneof![Just(Vec::new()), ts, linux, mixed]
            // Padded to a multiple of 4 with end-of-list, within a data offset.
            .prop_map(|mut o| {
                o.truncate(40);
                while o.len() % 4 != 0 {
                    o.push(0);
                }
                o
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        /// The fast parser gives what smoltcp's parser gives (the same segment or an error)
        /// for every flag combination, port, option layout (one octet of which may be
        /// changed) and payload.
        #[test]
        fn tcp_parse_matches_smoltcp(
            fixed in any::<[u8; 20]>(),
            opts in options(),
            poke in proptest::option::of((0usize..40, any::<u8>())),
            zero_port in 0u8..8,
            payload in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            let mut opts = opts;
            if let Some((at, v)) = poke {
                if !opts.is_empty() {
                    let at = at % opts.len();
                    opts[at] = v;
                }
            }
            let mut b = fixed.to_vec();
            b[12] = (((20 + opts.len()) / 4) as u8) << 4 | (fixed[12] & 0x0f);
            match zero_port {
                0 => b[0..2].fill(0),
                1 => b[2..4].fill(0),
                _ => {}
            }
            b.extend_from_slice(&opts);
            b.extend_from_slice(&payload);
            let (s, d) = (
                IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, 1)),
                IpAddress::Ipv4(Ipv4Address::new(10, 0, 0, 2)),
            );
            let caps = caps(true, false);
            let p = TcpPacket::new_checked(&b[..]).expect("well-formed lengths");
            let want = TcpRepr::parse(&p, &s, &d, &caps).ok();
            prop_assert_eq!(parse_tcp(&b, &s, &d, &caps).ok(), want);
        }

        /// The IPv4 header parse gives what smoltcp's gives, checksum verified or not, for
        /// headers with good and bad checksums, any version, options and lengths.
        #[test]
        fn ipv4_parse_matches_smoltcp(
            h in any::<[u8; 60]>(),
            ihl in 5u8..16,
            version in prop_oneof![Just(4u8), any::<u8>()],
            good in any::<bool>(),
            extra in 0usize..30,
            verify in any::<bool>(),
        ) {
            let hl = usize::from(ihl) * 4;
            let mut b = h[..hl].to_vec();
            b.extend(std::iter::repeat_n(0x77, extra));
            b[0] = (version << 4) | ihl;
            // No fragment (the host drops those before).
            b[6] &= 0x40;
            b[7] = 0;
            let total = (hl + extra) as u16;
            b[2..4].copy_from_slice(&total.to_be_bytes());
            if good {
                b[10..12].fill(0);
                let c = csum::finish(csum::sum(&b[..hl]));
                b[10..12].copy_from_slice(&c);
            }
            let caps = caps(verify, false);
            let p = Ipv4Packet::new_checked(&b[..]).expect("well-formed lengths");
            prop_assert_eq!(parse_ipv4(&p, &caps).ok(), Ipv4Repr::parse(&p, &caps).ok());
            prop_assert_eq!(ipv4_payload(&b), p.payload());
        }
    }

    /// What the host's general receive path (`Inner::process_frame`, `process_ipv4`,
    /// `process_tcp` up to its look-up) makes of `frame`: the segment, if the frame is an
    /// IPv4 TCP segment for `local` from `remote` that it does not drop.
    fn general_path<'a>(
        frame: &'a [u8],
        mac: EthernetAddress,
        (remote, remote_port): (Ipv4Address, u16),
        (local, local_port): (Ipv4Address, u16),
        caps: &ChecksumCapabilities,
    ) -> Option<TcpRepr<'a>> {
        use smoltcp::wire::{EthernetFrame, EthernetProtocol};
        let eth = EthernetFrame::new_checked(frame).ok()?;
        if eth.dst_addr() != mac || eth.ethertype() != EthernetProtocol::Ipv4 {
            return None;
        }
        let payload = eth.payload();
        let p = Ipv4Packet::new_checked(payload).ok()?;
        if p.more_frags() || p.frag_offset() != 0 {
            return None;
        }
        let ip = parse_ipv4(&p, caps).ok()?;
        if ip.dst_addr != local || ip.next_header != IpProtocol::Tcp {
            return None;
        }
        let tcp = ipv4_payload(payload);
        let t = TcpPacket::new_checked(tcp).ok()?;
        if caps.tcp.rx() {
            let sum = csum::pseudo_header(ip.src_addr, ip.dst_addr, tcp.len() as u16)
                + csum::sum_to_fold(tcp);
            if !csum::verifies(sum) {
                return None;
            }
        }
        let (s, d) = (IpAddress::Ipv4(ip.src_addr), IpAddress::Ipv4(ip.dst_addr));
        let mut no_tcp = caps.clone();
        no_tcp.tcp = Checksum::None;
        let seg = parse_tcp(t.into_inner(), &s, &d, &no_tcp).ok()?;
        (ip.src_addr == remote && seg.src_port == remote_port && seg.dst_port == local_port)
            .then_some(seg)
    }

    /// Recomputes the IPv4 header checksum and the TCP checksum of `f` (sent from `a.src` to
    /// `a.dst`) over the lengths its headers now give, where they lie within it.
    fn fix_checksums(f: &mut [u8], a: &FrameAddrs) {
        let ihl = usize::from(f[ETH_HDR] & 0x0f) * 4;
        let total = usize::from(u16::from_be_bytes([f[ETH_HDR + 2], f[ETH_HDR + 3]]));
        if ihl >= IP_HDR && ETH_HDR + ihl <= f.len() {
            f[ETH_HDR + 10..ETH_HDR + 12].fill(0);
            let c = csum::finish(csum::sum(&f[ETH_HDR..ETH_HDR + ihl]));
            f[ETH_HDR + 10..ETH_HDR + 12].copy_from_slice(&c);
        }
        if ihl >= IP_HDR && ihl + 20 <= total && ETH_HDR + total <= f.len() {
            let tcp = &mut f[ETH_HDR + ihl..ETH_HDR + total];
            tcp[16..18].fill(0);
            let sum = csum::pseudo_header(a.src, a.dst, tcp.len() as u16) + csum::sum(tcp);
            let c = csum::finish(sum);
            tcp[16..18].copy_from_slice(&c);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(6000))]

        /// Header prediction gives the segment the general path gives, or nothing: for
        /// frames of every layout and flag combination, ours and Linux's options, with
        /// checksums verified or not, one octet of the frame (headers mostly) changed or
        /// not, padding after the IPv4 packet, and the connection's addresses and ports or
        /// others. The frames of an established connection's data and ACKs, untouched, are
        /// predicted (the fast path is taken).
        #[test]
        fn prediction_matches_the_general_path(
            (seg, len) in segment(),
            established in 0u8..4,
            linux in any::<bool>(),
            ip in any::<bool>(), tcp in any::<bool>(),
            poke in proptest::option::of((0usize..80, any::<u8>())),
            pad in 0usize..8,
            other in 0u8..8,
            frag in proptest::option::of((0u16..8, prop_oneof![Just(0u16), any::<u16>()])
                .prop_map(|(flags, offset)| flags << 13 | offset & 0x1fff)),
            field in proptest::option::of((0usize..7, any::<u8>())),
        ) {
            let a = addrs([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2], [198, 18, 0, 1], [198, 18, 0, 2]);
            // Three cases in four: the layout of an established connection's segment.
            let seg = if established > 0 {
                TcpRepr {
                    control: if seg.control == TcpControl::Psh { TcpControl::Psh } else { TcpControl::None },
                    ack_number: Some(seg.ack_number.unwrap_or(TcpSeqNumber(7))),
                    window_scale: None,
                    max_seg_size: None,
                    sack_permitted: false,
                    sack_ranges: [None; 3],
                    ..seg
                }
            } else {
                seg
            };
            let payload: Vec<u8> = (0..len).map(|i| (i as u8) ^ 0x5a).collect();
            let full = TcpRepr { payload: &payload, ..seg };
            let mut f = reference::emit_frame(&a, &full, &caps(ip, tcp));
            let start = ETH_HDR + IP_HDR;
            let hl = seg.header_len();
            let ts_alone = seg.timestamp.is_some()
                && seg.max_seg_size.is_none()
                && seg.window_scale.is_none()
                && !seg.sack_permitted
                && seg.sack_ranges.iter().all(Option::is_none);
            if linux && ts_alone {
                // Linux's layout: two NOPs, then the timestamps.
                let ts = f[start + 20..start + 30].to_vec();
                f[start + 20..start + 22].copy_from_slice(&[1, 1]);
                f[start + 22..start + 32].copy_from_slice(&ts);
                if tcp {
                    f[start + 16..start + 18].fill(0);
                    let sum = csum::pseudo_header(a.src, a.dst, (f.len() - start) as u16)
                        + csum::sum(&f[start..]);
                    let c = csum::finish(sum);
                    f[start + 16..start + 18].copy_from_slice(&c);
                }
            }
            let layout = matches!(seg.control, TcpControl::None | TcpControl::Psh)
                && seg.ack_number.is_some()
                && (hl == 20 || ts_alone)
                && seg.src_port != 0
                && seg.dst_port != 0;
            if let Some(v) = frag {
                // Flags and fragment offset, the IPv4 checksum made right again.
                f[ETH_HDR + 6..ETH_HDR + 8].copy_from_slice(&v.to_be_bytes());
                f[ETH_HDR + 10..ETH_HDR + 12].fill(0);
                let c = csum::finish(csum::sum(&f[ETH_HDR..start]));
                f[ETH_HDR + 10..ETH_HDR + 12].copy_from_slice(&c);
            }
            if let Some((k, v)) = field {
                // One field the prediction reads, both checksums made right again (a
                // changed octet alone would mostly only fail a checksum).
                let at = [
                    ETH_HDR,          // IPv4 version and IHL
                    ETH_HDR + 9,      // protocol
                    12,               // ethertype
                    ETH_HDR + 3,      // total length (low octet)
                    start + 12,       // data offset
                    start + 13,       // flags
                    start + 20,       // first option octet
                ][k];
                if at < f.len() {
                    f[at] = v;
                }
                fix_checksums(&mut f, &a);
            }
            if let Some((at, v)) = poke {
                let at = at % f.len();
                f[at] = v;
            }
            f.extend(std::iter::repeat_n(0xee, pad));
            // The receiver is `a.dst_mac`/`a.dst`; the connection's tuple, or another.
            let mac = a.dst_mac;
            let mut remote = (a.src, seg.src_port);
            let mut local = (a.dst, seg.dst_port);
            match other {
                0 => remote.0 = Ipv4Address::new(198, 18, 0, 9),
                1 => remote.1 = remote.1.wrapping_add(1),
                2 => local.1 = local.1.wrapping_add(1),
                3 => local.0 = Ipv4Address::new(198, 18, 0, 9),
                _ => {}
            }
            let c = caps(ip, tcp);
            let got = predict(&f, mac, remote, local, (&c, csum::bulk_sum, None)).map(|g| g.0);
            let want = general_path(&f, mac, remote, local, &c);
            if let Some(g) = got {
                prop_assert_eq!(Some(g), want);
            }
            // With a payload digest (from any length): the same segment, its sum taken
            // header and payload apart, and the digest of exactly its payload where the
            // checksum is verified here.
            let digested =
                predict(&f, mac, remote, local, (&c, csum::bulk_sum, Some((sum_and_xor, 0))));
            prop_assert_eq!(digested.map(|g| g.0), got);
            if let Some((g, d)) = digested {
                let want_d = c.tcp.rx().then(|| sum_and_xor(g.payload).1);
                prop_assert_eq!(d, want_d);
            }
            let untouched = poke.is_none() && field.is_none();
            if untouched && frag.is_none_or(|v| v & 0x3fff == 0) && other >= 4 && layout {
                prop_assert!(got.is_some(), "an established connection's segment not predicted");
            }
        }
    }

    /// The layouts every connection sends, and the extremes, one by one.
    #[test]
    fn common_segments_match_smoltcp() {
        let a = addrs(
            [2, 0, 0, 0, 0, 1],
            [2, 0, 0, 0, 0, 2],
            [198, 18, 0, 1],
            [198, 18, 0, 2],
        );
        let base = TcpRepr {
            src_port: 4791,
            dst_port: 50000,
            control: TcpControl::Psh,
            seq_number: TcpSeqNumber(-5),
            ack_number: Some(TcpSeqNumber(77)),
            window_len: 0xffff,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp: Some(TcpTimestampRepr::new(u32::MAX, 1)),
            payload: &[],
        };
        let syn = TcpRepr {
            control: TcpControl::Syn,
            ack_number: None,
            window_scale: Some(7),
            max_seg_size: Some(1460),
            sack_permitted: true,
            ..base
        };
        let sack = TcpRepr {
            sack_ranges: [Some((1, 2)), None, Some((u32::MAX, 0))],
            ..base
        };
        let sack_no_ack = TcpRepr {
            ack_number: None,
            ..sack
        };
        let bare = TcpRepr {
            timestamp: None,
            control: TcpControl::Rst,
            ..base
        };
        for seg in [base, syn, sack, sack_no_ack, bare] {
            for len in [0, 1, 64, 88, 1448, 65_455] {
                for (ip, tcp) in [(true, true), (false, false), (true, false), (false, true)] {
                    let payload = vec![0x5au8; len];
                    let full = TcpRepr {
                        payload: &payload,
                        ..seg
                    };
                    let want = reference::emit_frame(&a, &full, &caps(ip, tcp));
                    let mut got = vec![0xff; want.len()];
                    let hl = write_headers(&mut got, &a, &seg, None, len, ip);
                    let start = ETH_HDR + IP_HDR;
                    got[start + hl..].copy_from_slice(&payload);
                    if tcp {
                        let c = tcp_checksum(&a, &got[start..start + hl], len, csum::sum(&payload));
                        got[start + 16..start + 18].copy_from_slice(&c);
                    }
                    assert_eq!(got, want, "{seg:?} {len} {ip} {tcp}");
                }
            }
        }
    }
}
