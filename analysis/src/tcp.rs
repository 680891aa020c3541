//! TCP: pulling segments out of captured frames and reassembling each direction of each
//! connection into the byte stream the receiving TCP delivered.
//!
//! Reassembly works on 64-bit stream offsets derived from 32-bit sequence numbers relative
//! to the next expected octet, so sequence wrap is transparent. Retransmitted and
//! overlapping data is dropped (the first copy wins), out-of-order segments wait in a
//! buffer until the hole before them fills, and a hole that never fills ends the usable
//! stream at that point (recorded as a [`Gap`]): everything after it is unknown to us.
//! Besides the stream, each direction keeps the range of every data segment as it was sent
//! ([`Stream::segments`]), retransmissions included, for judging segments against the FPDU
//! boundaries found later.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use etherparse::{EtherType, LaxNetSlice, LaxSlicedPacket, TransportSlice};

use crate::capture::{Capture, Frame, LinkType};

/// One TCP segment taken out of a frame.
#[derive(Clone, Debug)]
pub struct TcpSegment<'a> {
    /// Sender's address and port.
    pub src: SocketAddr,
    /// Receiver's address and port.
    pub dst: SocketAddr,
    /// Sequence number of the first octet (of the SYN, if set).
    pub seq: u32,
    /// SYN flag.
    pub syn: bool,
    /// ACK flag.
    pub ack: bool,
    /// FIN flag.
    pub fin: bool,
    /// RST flag.
    pub rst: bool,
    /// The captured payload octets (fewer than sent if the frame was cut by the snap length).
    pub payload: &'a [u8],
    /// The IP length says more octets were sent than the frame holds (cut by the snap
    /// length): `payload` is only the start of the segment's data.
    pub truncated: bool,
    /// The length of the segment's data as sent: what its IP Total Length (RFC 791 3.1) or
    /// Payload Length (RFC 8200 3) counts past the IP and TCP headers. The same as
    /// `payload.len()` unless `truncated`; where the segment's sequence space ends (its FIN
    /// is the octet after this many, RFC 9293 3.4), whatever the capture kept of it.
    pub len: u32,
}

/// Why a frame holds no TCP segment this tool can use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NotTcp {
    /// The capture's link type (this LINKTYPE number) is not one of those in [`LinkType`]
    /// that are decoded.
    LinkType(u32),
    /// An IPv4 or IPv6 fragment: fragments are not reassembled, so the TCP data they carry
    /// is missing from the stream.
    Fragment,
    /// The frame ends inside its link, IP or TCP header (cut by the snap length, or damaged),
    /// so any TCP data it carried is missing from the stream.
    Truncated,
    /// Not a TCP segment over IP (ARP, UDP, ICMP, ...), or a header that does not parse.
    Other,
}

/// Decodes the link, IP and TCP headers of a frame. Returns `None` for anything that is not
/// an unfragmented TCP segment over IPv4/IPv6 (ARP, UDP, fragments, damaged headers...);
/// [`decode_segment`] says which.
pub fn parse_segment(link: LinkType, data: &[u8]) -> Option<TcpSegment<'_>> {
    decode_segment(link, data).ok()
}

/// [`parse_segment`], saying why a frame holds no usable TCP segment.
pub fn decode_segment(link: LinkType, data: &[u8]) -> Result<TcpSegment<'_>, NotTcp> {
    use etherparse::err::ip::LaxHeaderSliceError;
    use etherparse::err::packet::SliceError;
    fn from_ip(ip: &[u8]) -> Result<LaxSlicedPacket<'_>, NotTcp> {
        LaxSlicedPacket::from_ip(ip).map_err(|e| match e {
            LaxHeaderSliceError::Len(_) => NotTcp::Truncated,
            LaxHeaderSliceError::Content(_) => NotTcp::Other,
        })
    }
    let packet = match link {
        LinkType::Ethernet => {
            LaxSlicedPacket::from_ethernet(data).map_err(|_| NotTcp::Truncated)?
        }
        LinkType::RawIp => from_ip(data)?,
        LinkType::LinuxSll => {
            // 16-octet header; the protocol (an EtherType) is in the last two octets.
            let (Some(&hi), Some(&lo), Some(rest)) = (data.get(14), data.get(15), data.get(16..))
            else {
                return Err(NotTcp::Truncated);
            };
            LaxSlicedPacket::from_ether_type(EtherType(u16::from_be_bytes([hi, lo])), rest)
        }
        LinkType::LinuxSll2 => {
            // 20-octet header; the protocol is in the first two octets.
            let (Some(&hi), Some(&lo), Some(rest)) = (data.first(), data.get(1), data.get(20..))
            else {
                return Err(NotTcp::Truncated);
            };
            LaxSlicedPacket::from_ether_type(EtherType(u16::from_be_bytes([hi, lo])), rest)
        }
        LinkType::Null => from_ip(data.get(4..).ok_or(NotTcp::Truncated)?)?,
        LinkType::Other(n) => return Err(NotTcp::LinkType(n)),
    };
    // Where the lax parser stopped early, say whether the frame simply ended.
    let stopped = || match packet.stop_err {
        Some((SliceError::Len(_), _)) => NotTcp::Truncated,
        _ => NotTcp::Other,
    };
    // `missing`: the octets of the IP payload the length field counts that the frame does
    // not hold (0 unless the frame was cut short); they are the end of the TCP data, the
    // headers being whole (or the TCP header would not have parsed).
    let (src_ip, dst_ip, fragmented, truncated, missing) =
        match packet.net.as_ref().ok_or_else(stopped)? {
            LaxNetSlice::Ipv4(ip) => {
                let h = ip.header();
                let held = h.slice().len() + ip.extensions().auth.map_or(0, |a| a.slice().len());
                let counted = usize::from(h.total_len()).saturating_sub(held);
                (
                    IpAddr::from(h.source_addr()),
                    IpAddr::from(h.destination_addr()),
                    ip.payload().fragmented,
                    ip.payload().incomplete,
                    counted.saturating_sub(ip.payload().payload.len()),
                )
            }
            LaxNetSlice::Ipv6(ip) => {
                let h = ip.header();
                let counted =
                    usize::from(h.payload_length()).saturating_sub(ip.extensions().slice().len());
                (
                    IpAddr::from(h.source_addr()),
                    IpAddr::from(h.destination_addr()),
                    ip.payload().fragmented,
                    ip.payload().incomplete,
                    counted.saturating_sub(ip.payload().payload.len()),
                )
            }
            LaxNetSlice::Arp(_) => return Err(NotTcp::Other),
        };
    if fragmented {
        return Err(NotTcp::Fragment);
    }
    let Some(TransportSlice::Tcp(tcp)) = packet.transport.as_ref() else {
        return Err(match packet.transport {
            Some(_) => NotTcp::Other,
            None => stopped(),
        });
    };
    Ok(TcpSegment {
        src: SocketAddr::new(src_ip, tcp.source_port()),
        dst: SocketAddr::new(dst_ip, tcp.destination_port()),
        seq: tcp.sequence_number(),
        syn: tcp.syn(),
        ack: tcp.ack(),
        fin: tcp.fin(),
        rst: tcp.rst(),
        payload: tcp.payload(),
        truncated,
        // At most 65535 octets (a 16-bit length field) past the captured ones.
        len: if truncated {
            u32::try_from(tcp.payload().len() + missing).unwrap_or(u32::MAX)
        } else {
            tcp.payload().len() as u32
        },
    })
}

/// Where a run of stream octets came from: the frame that delivered the octet at `offset`
/// (and those after it, up to the next chunk).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// Stream offset of the first octet this frame contributed.
    pub offset: u64,
    /// Capture time of the frame.
    pub timestamp: Duration,
    /// Frame number (1-based).
    pub frame: u64,
}

/// A hole in a stream that no later segment filled: the stream is known only up to it. A
/// segment cut by the snap length whose missing octets never came is one too, even at the
/// end of the capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gap {
    /// TCP sequence number of the first missing octet.
    pub seq: u32,
    /// Stream offset of the first missing octet (= length of the usable stream).
    pub offset: u64,
    /// Octets seen beyond the hole that had to be discarded.
    pub discarded_octets: u64,
}

/// Where one TCP segment that carried data lay in its direction's stream: its own range, as
/// sent, whether or not its octets were new (retransmissions and overlapping segments keep
/// their full range; [`Stream::chunks`] records only the new octets).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataSegment {
    /// Stream offset of its first octet. Negative for octets before the first one the
    /// capture holds (a retransmission of data sent before the capture began).
    pub offset: i64,
    /// Its payload length as captured (octets).
    pub len: u32,
    /// The frame was cut by the snap length: the segment really ends after `offset + len`.
    pub truncated: bool,
    /// Frame number.
    pub frame: u64,
}

impl DataSegment {
    /// Stream offset just after its last captured octet.
    pub fn end(&self) -> i64 {
        self.offset + i64::from(self.len)
    }
}

/// One direction of a TCP connection, reassembled.
#[derive(Clone, Debug, Default)]
pub struct Stream {
    /// The in-order octets, from the first octet after the SYN (or the first one seen).
    pub data: Vec<u8>,
    /// Which frame delivered which part of `data`, in increasing offset order.
    pub chunks: Vec<Chunk>,
    /// Every segment that carried data (zero-length segments left out), in capture order,
    /// retransmissions and segments beyond a [`Gap`] included.
    pub segments: Vec<DataSegment>,
    /// Sequence number of `data[0]`.
    pub base_seq: u32,
    /// Whether the SYN of this direction was seen (otherwise the capture started late).
    pub syn: bool,
    /// Whether a FIN was seen (at its proper place in the stream).
    pub fin: bool,
    /// Whether an RST was seen.
    pub rst: bool,
    /// Number of segments that carried only already-received octets.
    pub retransmitted_segments: u64,
    /// Number of segments that arrived ahead of a hole and had to wait.
    pub out_of_order_segments: u64,
    /// A hole that never filled, if any.
    pub gap: Option<Gap>,
    /// Segments carrying octets that differ from those an earlier copy of the same sequence
    /// numbers carried (a retransmission with other content: a sender that resent changed
    /// data, or a frame damaged before the capture point that the receiver then dropped).
    /// `data` holds one of the copies; which one the receiver took, the capture cannot tell.
    pub conflicting_segments: u64,
    /// The first of those: its frame and the sequence number of its first differing octet.
    pub first_conflict: Option<(u64, u32)>,
    /// Segments that arrived after the first octet of data, if the capture began mid-stream.
    started: bool,
    /// Segments beyond a hole, by stream offset: (payload, timestamp, frame).
    pending: BTreeMap<u64, (Vec<u8>, Duration, u64)>,
    /// Stream offset of a FIN that arrived before the data in front of it.
    fin_offset: Option<u64>,
    /// The furthest captured end of a segment cut by the snap length whose captured octets
    /// reached the end of the stream at the time: the octets after it were sent but not
    /// captured, a hole unless a later segment brings them (see [`Stream::finish`]).
    snap_cut: Option<u64>,
}

impl Stream {
    /// The sequence number of the octet at `offset`.
    pub fn seq_at(&self, offset: u64) -> u32 {
        self.base_seq.wrapping_add(offset as u32)
    }

    /// The chunk (frame and time) that delivered the octet at `offset`.
    pub fn chunk_at(&self, offset: u64) -> Option<&Chunk> {
        let i = self.chunks.partition_point(|c| c.offset <= offset);
        self.chunks.get(i.checked_sub(1)?)
    }

    /// Maps a sequence number to a stream offset, assuming it lies within 2^31 octets of the
    /// next expected one (TCP's own window assumption), which makes sequence wrap harmless.
    fn offset_of(&self, seq: u32) -> i128 {
        let next = self.data.len() as u64;
        let delta = seq.wrapping_sub(self.seq_at(next)) as i32;
        i128::from(next) + i128::from(delta)
    }

    fn handle(&mut self, seg: &TcpSegment<'_>, timestamp: Duration, frame: u64) {
        if seg.rst {
            self.rst = true;
        }
        let mut seq = seg.seq;
        if seg.syn {
            seq = seq.wrapping_add(1);
            if !self.started || (self.data.is_empty() && self.pending.is_empty()) {
                self.base_seq = seq;
                self.started = true;
                self.syn = true;
                // Offsets recorded against an earlier ISN mean nothing any more.
                self.segments.clear();
            }
        }
        if !self.started {
            // A segment the snap length cut to its headers carried data all the same.
            if seg.payload.is_empty() && !seg.fin && !seg.truncated {
                return;
            }
            // The capture began after the SYN: start at the first octet we see.
            self.base_seq = seq;
            self.started = true;
        }
        let start = self.offset_of(seq);
        let end = start + seg.payload.len() as i128;
        // The FIN follows the segment's data as sent (RFC 9293 3.4), its captured part or
        // not: a cut segment's FIN lies past octets the capture does not hold.
        let sent_end = start + i128::from(seg.len.max(seg.payload.len() as u32));
        if seg.fin && sent_end >= 0 {
            self.fin_offset = Some(sent_end as u64);
        }
        // The octets of a cut segment after its captured ones (its IP Total Length, RFC 791
        // 3.1, or Payload Length, RFC 8200 3, counts them) are missing from the stream
        // unless they are already in it; here they are not known to be.
        if seg.truncated && end >= self.data.len() as i128 {
            let cut = end as u64;
            self.snap_cut = Some(self.snap_cut.map_or(cut, |c| c.max(cut)));
        }
        if seg.payload.is_empty() {
            self.check_fin();
            return;
        }
        // Within 2^31 of the next expected octet (see `offset_of`), so it fits an i64.
        self.segments.push(DataSegment {
            offset: start as i64,
            len: seg.payload.len() as u32,
            truncated: seg.truncated,
            frame,
        });
        let next = self.data.len() as i128;
        // The part already in the stream must carry the same octets.
        let (lo, hi) = (start.max(0), end.min(next));
        if lo < hi {
            let new = &seg.payload[(lo - start) as usize..(hi - start) as usize];
            self.compare(lo as u64, new, frame);
        }
        if end <= next {
            self.retransmitted_segments += 1;
        } else if start <= next {
            let skip = (next - start) as usize;
            self.append(&seg.payload[skip..], timestamp, frame);
            self.drain_pending();
        } else {
            self.out_of_order_segments += 1;
            let key = start as u64;
            if let Some(at) = self
                .pending
                .get(&key)
                .and_then(|(p, _, _)| first_difference(p, seg.payload))
            {
                self.conflict(key + at as u64, frame);
            }
            let longer = self
                .pending
                .get(&key)
                .is_none_or(|(p, _, _)| p.len() < seg.payload.len());
            if longer {
                self.pending
                    .insert(key, (seg.payload.to_vec(), timestamp, frame));
            }
        }
        self.check_fin();
    }

    fn append(&mut self, octets: &[u8], timestamp: Duration, frame: u64) {
        if octets.is_empty() {
            return;
        }
        self.chunks.push(Chunk {
            offset: self.data.len() as u64,
            timestamp,
            frame,
        });
        self.data.extend_from_slice(octets);
    }

    fn drain_pending(&mut self) {
        while let Some(entry) = self.pending.first_entry() {
            let start = *entry.key();
            let next = self.data.len() as u64;
            if start > next {
                break;
            }
            let (payload, timestamp, frame) = entry.remove();
            let end = start + payload.len() as u64;
            let overlap = (next.min(end) - start) as usize;
            self.compare(start, &payload[..overlap], frame);
            if end > next {
                self.append(&payload[(next - start) as usize..], timestamp, frame);
            }
        }
    }

    /// Checks `octets`, which a segment of `frame` carried for stream offset `offset` on,
    /// against the stream's octets there.
    fn compare(&mut self, offset: u64, octets: &[u8], frame: u64) {
        let Some(held) = self
            .data
            .get(offset as usize..offset as usize + octets.len())
        else {
            return;
        };
        if let Some(at) = first_difference(held, octets) {
            self.conflict(offset + at as u64, frame);
        }
    }

    fn conflict(&mut self, offset: u64, frame: u64) {
        self.conflicting_segments += 1;
        let seq = self.seq_at(offset);
        self.first_conflict.get_or_insert((frame, seq));
    }

    fn check_fin(&mut self) {
        if self.fin_offset == Some(self.data.len() as u64) {
            self.fin = true;
        }
    }

    /// Ends reassembly: anything still waiting behind a hole is discarded and recorded. A
    /// stream that ends where (or before) a segment cut by the snap length stopped being
    /// captured ends in a hole too, though nothing waits behind it: the segment's IP length
    /// says more octets were sent (the capture ended right after it, or the snap length
    /// left none of its data, as in a header-only capture).
    fn finish(&mut self) {
        let offset = self.data.len() as u64;
        if !self.pending.is_empty() || self.snap_cut.is_some_and(|c| c >= offset) {
            let discarded = self.pending.values().map(|(p, _, _)| p.len() as u64).sum();
            self.gap = Some(Gap {
                seq: self.seq_at(offset),
                offset,
                discarded_octets: discarded,
            });
            self.pending.clear();
        }
    }
}

/// Where two copies of the same octets first differ, comparing as far as both reach.
fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y)
}

/// A TCP connection and its two reassembled directions.
#[derive(Clone, Debug)]
pub struct Connection {
    /// The side that sent the first SYN (without ACK), or the sender of the first segment
    /// seen if the capture began after the handshake.
    pub client: SocketAddr,
    /// The other side.
    pub server: SocketAddr,
    /// Client to server.
    pub to_server: Stream,
    /// Server to client.
    pub to_client: Stream,
    /// Time of the first segment seen.
    pub first_timestamp: Duration,
    /// Frame number of the first segment seen.
    pub first_frame: u64,
}

impl Connection {
    /// The stream sent by `sender` (which must be `client` or `server`).
    pub fn stream_from(&self, sender: SocketAddr) -> &Stream {
        if sender == self.client {
            &self.to_server
        } else {
            &self.to_client
        }
    }
}

/// All TCP connections of a capture, reassembled.
#[derive(Clone, Debug, Default)]
pub struct TcpCapture {
    /// Connections in the order their first segment appeared.
    pub connections: Vec<Connection>,
    /// Frames that held no TCP segment we could decode (other protocols, damaged headers).
    pub non_tcp_frames: u64,
    /// Of those, the ones whose TCP data (if any) is lost to the analysis because of the
    /// capture rather than because they are not TCP: frames of a link type that is not
    /// decoded, IP fragments, frames that end inside their headers. By reason.
    pub undecoded: BTreeMap<NotTcp, u64>,
}

/// Reassembles every TCP connection in a capture.
pub fn reassemble(capture: &Capture) -> TcpCapture {
    let mut out = TcpCapture::default();
    // Both directions of a connection map to the same index; a new SYN on a 4-tuple whose
    // connection already closed starts a new connection (port reuse).
    let mut index: HashMap<(SocketAddr, SocketAddr), usize> = HashMap::new();
    for Frame {
        number,
        timestamp,
        link,
        data,
        ..
    } in &capture.frames
    {
        let seg = match decode_segment(*link, data) {
            Ok(seg) => seg,
            Err(why) => {
                out.non_tcp_frames += 1;
                if why != NotTcp::Other {
                    *out.undecoded.entry(why).or_default() += 1;
                }
                continue;
            }
        };
        let key = if seg.src <= seg.dst {
            (seg.src, seg.dst)
        } else {
            (seg.dst, seg.src)
        };
        // Whichever side the old connection's `client` is: a capture that began after its
        // handshake only guessed it (the first sender seen), and either end may open the
        // next connection on the 4-tuple (RFC 9293 3.6.1 MAY-2: a SYN in TIME-WAIT). The
        // SYN's sender must have closed its side (FIN) or the connection been reset, and the
        // SYN must not be a retransmission of the one that opened its stream.
        let reuse = |c: &Connection| {
            let from = c.stream_from(seg.src);
            seg.syn
                && !seg.ack
                && (from.fin || c.to_server.rst || c.to_client.rst)
                && from.seq_at(0) != seg.seq.wrapping_add(1)
        };
        let i = match index.get(&key) {
            Some(&i) if !reuse(&out.connections[i]) => i,
            _ => {
                // The SYN sender is the client; without a SYN, a pure SYN+ACK tells us the
                // server; otherwise guess the first sender.
                let (client, server) = if seg.syn && seg.ack {
                    (seg.dst, seg.src)
                } else {
                    (seg.src, seg.dst)
                };
                out.connections.push(Connection {
                    client,
                    server,
                    to_server: Stream::default(),
                    to_client: Stream::default(),
                    first_timestamp: *timestamp,
                    first_frame: *number,
                });
                index.insert(key, out.connections.len() - 1);
                out.connections.len() - 1
            }
        };
        let conn = &mut out.connections[i];
        let stream = if seg.src == conn.client {
            &mut conn.to_server
        } else {
            &mut conn.to_client
        };
        stream.handle(&seg, *timestamp, *number);
    }
    for c in &mut out.connections {
        c.to_server.finish();
        c.to_client.finish();
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn seg(seq: u32, payload: &[u8]) -> TcpSegment<'_> {
        TcpSegment {
            src: "10.0.0.1:1".parse().unwrap(),
            dst: "10.0.0.2:2".parse().unwrap(),
            seq,
            syn: false,
            ack: true,
            fin: false,
            rst: false,
            payload,
            truncated: false,
            len: payload.len() as u32,
        }
    }

    fn syn(seq: u32) -> TcpSegment<'static> {
        TcpSegment {
            syn: true,
            ack: false,
            ..seg(seq, b"")
        }
    }

    #[test]
    fn in_order_with_wrap() {
        let mut s = Stream::default();
        s.handle(&syn(u32::MAX - 2), Duration::ZERO, 1);
        s.handle(&seg(u32::MAX - 1, b"ab"), Duration::ZERO, 2);
        s.handle(&seg(0, b"cd"), Duration::ZERO, 3);
        s.finish();
        assert_eq!(s.data, b"abcd");
        assert_eq!(s.gap, None);
        assert_eq!(s.chunk_at(3).unwrap().frame, 3);
    }

    #[test]
    fn retransmission_overlap_and_reorder() {
        let mut s = Stream::default();
        s.handle(&syn(99), Duration::ZERO, 1);
        s.handle(&seg(100, b"abc"), Duration::ZERO, 2);
        s.handle(&seg(106, b"ghi"), Duration::ZERO, 3); // ahead of a hole
        s.handle(&seg(100, b"abc"), Duration::ZERO, 4); // pure retransmission
        s.handle(&seg(102, b"cdef"), Duration::ZERO, 5); // overlaps both sides
        s.handle(&seg(108, b"ijk"), Duration::ZERO, 6);
        s.finish();
        assert_eq!(s.data, b"abcdefghijk");
        assert_eq!(s.retransmitted_segments, 1);
        assert_eq!(s.out_of_order_segments, 1);
        assert_eq!(s.gap, None);
        // Every data segment keeps its own range, whatever part of it was new.
        let ranges: Vec<(i64, i64, u64)> = s
            .segments
            .iter()
            .map(|d| (d.offset, d.end(), d.frame))
            .collect();
        assert_eq!(
            ranges,
            [(0, 3, 2), (6, 9, 3), (0, 3, 4), (2, 6, 5), (8, 11, 6)]
        );
    }

    /// A retransmission whose octets differ from the first copy (in the stream already, or
    /// still waiting beyond a hole) is recorded with its frame and the first differing
    /// sequence number; identical copies are not (Wireshark's "conflicting data").
    #[test]
    fn retransmissions_with_other_octets_are_recorded() {
        let mut s = Stream::default();
        s.handle(&syn(99), Duration::ZERO, 1);
        s.handle(&seg(100, b"abcd"), Duration::ZERO, 2);
        s.handle(&seg(100, b"abcd"), Duration::ZERO, 3); // the same: fine
        s.handle(&seg(110, b"klm"), Duration::ZERO, 4); // beyond a hole
        s.handle(&seg(110, b"kXm"), Duration::ZERO, 5); // conflicts with what waits
        s.handle(&seg(102, b"cZef"), Duration::ZERO, 6); // conflicts in the stream
        s.handle(&seg(106, b"ghijkLm"), Duration::ZERO, 7); // conflicts when drained
        s.finish();
        assert_eq!(s.data, b"abcdefghijkLm"); // the in-order copy, as a receiver takes it
        assert_eq!(s.conflicting_segments, 3);
        assert_eq!(s.first_conflict, Some((5, 111)));
        let mut same = Stream::default();
        same.handle(&syn(0), Duration::ZERO, 1);
        same.handle(&seg(5, b"xyz"), Duration::ZERO, 2);
        same.handle(&seg(1, b"abcdx"), Duration::ZERO, 3);
        same.handle(&seg(1, b"abcdxyz"), Duration::ZERO, 4);
        same.finish();
        assert_eq!((same.conflicting_segments, same.first_conflict), (0, None));
    }

    #[test]
    fn unfilled_gap_is_reported() {
        let mut s = Stream::default();
        s.handle(&syn(0), Duration::ZERO, 1);
        s.handle(&seg(1, b"ab"), Duration::ZERO, 2);
        s.handle(&seg(5, b"xyz"), Duration::ZERO, 3);
        s.finish();
        assert_eq!(s.data, b"ab");
        assert_eq!(
            s.gap,
            Some(Gap {
                seq: 3,
                offset: 2,
                discarded_octets: 3
            })
        );
    }

    /// An Ethernet/IPv4 frame of a TCP segment from 10.0.0.1:40000 (`from` 0) or
    /// 10.0.0.2:5000 (`from` 1), with the flags `flags` ("S", "A", "F" in any order).
    pub(crate) fn frame(number: u64, from: usize, seq: u32, flags: &str, payload: &[u8]) -> Frame {
        let (ips, ports) = ([[10, 0, 0, 1], [10, 0, 0, 2]], [40000, 5000]);
        let mut b = etherparse::PacketBuilder::ethernet2([2; 6], [3; 6])
            .ipv4(ips[from], ips[1 - from], 64)
            .tcp(ports[from], ports[1 - from], seq, 65535);
        if flags.contains('S') {
            b = b.syn();
        }
        if flags.contains('A') {
            b = b.ack(1);
        }
        if flags.contains('F') {
            b = b.fin();
        }
        let mut data = Vec::new();
        b.write(&mut data, payload).unwrap();
        Frame {
            number,
            timestamp: Duration::ZERO,
            link: LinkType::Ethernet,
            original_len: data.len() as u32,
            data,
        }
    }

    /// A new SYN (another ISN) on the 4-tuple of a connection that closed is a new
    /// connection (port reuse; RFC 9293 3.6.1 MAY-2, a SYN reopening from TIME-WAIT),
    /// whichever side the capture took for the old connection's client. A capture that
    /// began after the old handshake and first saw the server's data guessed the server as
    /// client; the new SYN from the real client then fell into the old connection (its
    /// octets read as retransmissions or out-of-order data of the old stream), and the new
    /// connection, its MPA startup included, was never analysed.
    #[test]
    fn port_reuse_after_a_late_started_capture() {
        let frames = vec![
            // The old connection, seen from the middle: the server speaks first.
            frame(1, 1, 7000, "A", b"server data"),
            frame(2, 0, 3000, "A", b"client data"),
            frame(3, 0, 3011, "AF", b""),
            frame(4, 1, 7011, "AF", b""),
            // A new connection on the same ports, from the same client.
            frame(5, 0, 90_000, "S", b""),
            frame(6, 1, 50_000, "SA", b""),
            frame(7, 0, 90_001, "A", b"new request"),
            frame(8, 1, 50_001, "A", b"new reply"),
        ];
        let capture = Capture {
            format: crate::capture::CaptureFormat::Pcap,
            frames,
            warnings: Vec::new(),
            incomplete: false,
        };
        let tcp = reassemble(&capture);
        assert_eq!(tcp.connections.len(), 2, "{:#?}", tcp.connections);
        let new = &tcp.connections[1];
        assert_eq!(new.client, "10.0.0.1:40000".parse().unwrap());
        assert!(new.to_server.syn && new.to_client.syn);
        assert_eq!(new.to_server.data, b"new request");
        assert_eq!(new.to_client.data, b"new reply");
        assert_eq!(new.first_frame, 5);
        let old = &tcp.connections[0];
        assert_eq!(
            old.stream_from("10.0.0.1:40000".parse().unwrap()).data,
            b"client data"
        );
        assert_eq!(
            old.to_server.conflicting_segments + old.to_client.conflicting_segments,
            0
        );
    }

    /// `frame` cut by a snap length to its first `keep` octets.
    fn cut(mut frame: Frame, keep: usize) -> Frame {
        frame.data.truncate(keep);
        frame
    }

    /// A segment cut by the snap length (its IP length says more octets were sent than the
    /// frame holds) whose missing octets no later segment brought is a hole in the stream
    /// like any other: the stream is known only up to its captured end. Where the capture
    /// ends right after it, or where the snap length left none of its data (a header-only
    /// capture, `tcpdump -s 66`), no later segment waited beyond the hole, so no gap was
    /// recorded: the stream silently ended early (the analysis then judged every FPDU it
    /// saw and called a connection whose MPA Request was cut away "no MPA Request at the
    /// start"). Ethernet 14 + IPv4 20 + TCP 20 = 54 octets of headers here.
    #[test]
    fn snap_length_cut_at_the_stream_end_is_a_gap() {
        let capture = |frames: Vec<Frame>| Capture {
            format: crate::capture::CaptureFormat::Pcap,
            frames,
            warnings: Vec::new(),
            incomplete: false,
        };
        // Whole data, then a segment of 10 octets of which 2 were captured, then the end.
        let tcp = reassemble(&capture(vec![
            frame(1, 0, 99, "S", b""),
            frame(2, 1, 499, "SA", b""),
            frame(3, 0, 100, "A", b"abc"),
            cut(frame(4, 0, 103, "A", b"defghijklm"), 54 + 2),
        ]));
        let s = &tcp.connections[0].to_server;
        assert_eq!(s.data, b"abcde");
        assert_eq!(
            s.gap,
            Some(Gap {
                seq: 105,
                offset: 5,
                discarded_octets: 0
            })
        );
        // A complete copy of the cut segment fills the hole: no gap.
        let tcp = reassemble(&capture(vec![
            frame(1, 0, 99, "S", b""),
            frame(2, 0, 100, "A", b"abc"),
            cut(frame(3, 0, 103, "A", b"defghijklm"), 54 + 2),
            frame(4, 0, 103, "A", b"defghijklm"),
        ]));
        let s = &tcp.connections[0].to_server;
        assert_eq!((&s.data[..], s.gap), (&b"abcdefghijklm"[..], None));
        // A cut retransmission of octets already in the stream leaves no hole.
        let tcp = reassemble(&capture(vec![
            frame(1, 0, 99, "S", b""),
            frame(2, 0, 100, "A", b"abcdef"),
            cut(frame(3, 0, 100, "A", b"abcdef"), 54 + 2),
        ]));
        assert_eq!(tcp.connections[0].to_server.gap, None);
        // Header-only: the first data segment of each direction cut to its headers.
        let tcp = reassemble(&capture(vec![
            frame(1, 0, 99, "S", b""),
            frame(2, 1, 499, "SA", b""),
            cut(frame(3, 0, 100, "A", &[0x4D; 40]), 54),
            cut(frame(4, 1, 500, "A", &[0x4D; 40]), 54),
        ]));
        let c = &tcp.connections[0];
        for s in [&c.to_server, &c.to_client] {
            assert!(s.data.is_empty());
            assert_eq!(s.gap.map(|g| g.offset), Some(0), "{s:?}");
        }
    }

    /// A FIN on a segment cut by the snap length sits after the segment's last octet as
    /// sent, which its IP length counts (RFC 9293 3.4: the FIN occupies the sequence number
    /// after the data; RFC 791 3.1 Total Length, RFC 8200 3 Payload Length), not after its
    /// last captured one. Placed at the captured end, it made a stream the capture lost the
    /// tail of read as closed with a FIN at its proper place (`close FIN` in the report).
    #[test]
    fn fin_of_a_snap_cut_segment_is_after_its_wire_length() {
        let capture = |frames: Vec<Frame>| Capture {
            format: crate::capture::CaptureFormat::Pcap,
            frames,
            warnings: Vec::new(),
            incomplete: false,
        };
        // 10 octets and a FIN sent from seq 103, 2 of them captured: the FIN is seq 113.
        let tcp = reassemble(&capture(vec![
            frame(1, 0, 99, "S", b""),
            frame(2, 0, 100, "A", b"abc"),
            cut(frame(3, 0, 103, "AF", b"defghijklm"), 54 + 2),
        ]));
        let s = &tcp.connections[0].to_server;
        assert_eq!(s.data, b"abcde");
        assert!(!s.fin, "a FIN 8 octets past the captured end: {s:?}");
        assert_eq!(s.gap.map(|g| (g.seq, g.offset)), Some((105, 5)));
        // The whole segment captured again (a retransmission): the FIN now falls in place.
        let tcp = reassemble(&capture(vec![
            frame(1, 0, 99, "S", b""),
            frame(2, 0, 100, "A", b"abc"),
            cut(frame(3, 0, 103, "AF", b"defghijklm"), 54 + 2),
            frame(4, 0, 103, "AF", b"defghijklm"),
        ]));
        let s = &tcp.connections[0].to_server;
        assert_eq!(
            (&s.data[..], s.fin, s.gap),
            (&b"abcdefghijklm"[..], true, None)
        );
        // Cut to its headers: the FIN is still after its 10 octets, none captured.
        let tcp = reassemble(&capture(vec![
            frame(1, 0, 99, "S", b""),
            frame(2, 0, 100, "A", b"abc"),
            cut(frame(3, 0, 103, "AF", b"defghijklm"), 54),
            frame(4, 0, 103, "A", b"defghijklm"),
        ]));
        let s = &tcp.connections[0].to_server;
        assert_eq!(
            (&s.data[..], s.fin, s.gap),
            (&b"abcdefghijklm"[..], true, None)
        );
        // The segment's own length as sent, over IPv4 and IPv6.
        let f = cut(frame(3, 0, 103, "AF", b"defghijklm"), 54 + 2);
        let seg = decode_segment(LinkType::Ethernet, &f.data).unwrap();
        assert_eq!(
            (seg.payload, seg.len, seg.truncated),
            (&b"de"[..], 10, true)
        );
        let mut v6 = Vec::new();
        etherparse::PacketBuilder::ethernet2([2; 6], [3; 6])
            .ipv6([1; 16], [2; 16], 64)
            .tcp(1, 2, 103, 65535)
            .fin()
            .write(&mut v6, b"defghijklm")
            .unwrap();
        v6.truncate(14 + 40 + 20 + 3);
        let seg = decode_segment(LinkType::Ethernet, &v6).unwrap();
        assert_eq!(
            (seg.payload, seg.len, seg.truncated),
            (&b"def"[..], 10, true)
        );
    }

    #[test]
    fn fin_after_reordered_data() {
        let mut s = Stream::default();
        s.handle(&syn(0), Duration::ZERO, 1);
        s.handle(
            &TcpSegment {
                fin: true,
                ..seg(3, b"c")
            },
            Duration::ZERO,
            2,
        );
        assert!(!s.fin);
        s.handle(&seg(1, b"ab"), Duration::ZERO, 3);
        assert!(s.fin);
        assert_eq!(s.data, b"abc");
    }
}
