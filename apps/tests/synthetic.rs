//! Synthetic captures built with proto's own encoders (MPA frames, segment headers, the
//! framer with markers and CRC) and etherparse: what the siw captures cannot show (markers,
//! Terminates, sequence wrap, reordering and loss, link types other than Ethernet, and each
//! kind of protocol violation iwdump checks for).

use std::net::SocketAddr;
use std::ops::Range;
use std::time::Duration;

use etherparse::PacketBuilder;
use warpcore_apps::analysis::{
    AlignmentLoss, AlignmentUnknown, Direction, FindingKind, IwarpConnection,
};
use warpcore_apps::capture::{Capture, CaptureFormat, Frame, LinkType};
use warpcore_apps::report::{analyse_capture, render_json, render_text, CaptureReport};
use warpcore_proto::mpa::framer::{Framer, FramerConfig};
use warpcore_proto::wire::ddp::DdpBuffer;
use warpcore_proto::wire::mpa::{EnhancedData, FrameKind, FrameRepr, RtrTypes};
use warpcore_proto::wire::rdmap::{
    AtomicRequestRepr, AtomicResponseRepr, CopiedDdpHeader, Opcode, ReadRequestRepr, TerminateRepr,
};
use warpcore_proto::wire::segment::{RdmapHeader, Segment, SegmentRepr};
use warpcore_proto::TerminateCode;

const I: usize = 0;
const R: usize = 1;

/// How to build the synthetic connection.
#[derive(Clone)]
struct Spec {
    /// M in the Request (the responder must send markers) and in the Reply.
    markers: [bool; 2],
    crc: bool,
    /// Whether the MPA initiator is the TCP client (sent the SYN).
    initiator_is_client: bool,
    /// Initial sequence numbers of the initiator and the responder.
    isn: [u32; 2],
    /// Largest TCP payload per frame.
    mss: usize,
    /// The enhanced data of the Request and of the Reply.
    enhanced: [EnhancedData; 2],
    /// IPv6 instead of IPv4.
    ipv6: bool,
    /// Each FPDU in segments of its own (an MPA-aligned sender), instead of each message's
    /// FPDUs cut into `mss` pieces regardless of their boundaries.
    per_fpdu: bool,
}

impl Default for Spec {
    fn default() -> Self {
        Spec {
            markers: [true, true],
            crc: true,
            initiator_is_client: true,
            isn: [1000, 7_000_000],
            mss: 700,
            ipv6: false,
            per_fpdu: false,
            enhanced: [EnhancedData {
                peer_to_peer: false,
                rtr: RtrTypes::EMPTY,
                ird: 4,
                ord: 4,
            }; 2],
        }
    }
}

/// One message: direction and the ULPDUs (already segmented) it consists of.
struct Msg {
    dir: usize,
    ulpdus: Vec<Vec<u8>>,
}

fn ulpdu(
    last: bool,
    buffer: DdpBuffer,
    opcode: Opcode,
    header: RdmapHeader,
    payload: &[u8],
) -> Vec<u8> {
    let seg = Segment {
        repr: SegmentRepr {
            last,
            buffer,
            opcode,
            header,
        },
        payload,
    };
    let mut buf = vec![0u8; seg.buffer_len()];
    seg.emit(&mut buf).unwrap();
    buf
}

fn send(dir: usize, msn: u32, len: usize, per_segment: usize) -> Msg {
    let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
    let mut chunks: Vec<&[u8]> = data.chunks(per_segment).collect();
    if chunks.is_empty() {
        chunks.push(&[]); // a zero-length message is one segment with no payload
    }
    let n = chunks.len();
    let ulpdus = chunks
        .iter()
        .enumerate()
        .map(|(k, c)| {
            let mo = (k * per_segment) as u32;
            let buffer = DdpBuffer::Untagged {
                rsvd_ulp2: 0,
                qn: 0,
                msn,
                mo,
            };
            ulpdu(k + 1 == n, buffer, Opcode::Send, RdmapHeader::None, c)
        })
        .collect();
    Msg { dir, ulpdus }
}

fn tagged(dir: usize, opcode: Opcode, stag: u32, to: u64, len: usize, per_segment: usize) -> Msg {
    let data = vec![0xA5u8; len];
    let mut chunks: Vec<&[u8]> = data.chunks(per_segment).collect();
    if chunks.is_empty() {
        chunks.push(&[]);
    }
    let n = chunks.len();
    let ulpdus = chunks
        .iter()
        .enumerate()
        .map(|(k, c)| {
            let buffer = DdpBuffer::Tagged {
                stag,
                to: to + (k * per_segment) as u64,
            };
            ulpdu(k + 1 == n, buffer, opcode, RdmapHeader::None, c)
        })
        .collect();
    Msg { dir, ulpdus }
}

fn read_request(dir: usize, msn: u32, sink_stag: u32, sink_to: u64, size: u32) -> Msg {
    let rr = ReadRequestRepr {
        sink_stag,
        sink_to,
        read_size: size,
        src_stag: 0x77,
        src_to: 0x1000,
    };
    let buffer = DdpBuffer::Untagged {
        rsvd_ulp2: 0,
        qn: 1,
        msn,
        mo: 0,
    };
    Msg {
        dir,
        ulpdus: vec![ulpdu(
            true,
            buffer,
            Opcode::ReadRequest,
            RdmapHeader::ReadRequest(rr),
            &[],
        )],
    }
}

fn terminate(dir: usize, code: TerminateCode) -> Msg {
    // Copy the DDP header of an (imaginary) offending Send, as a DDP or RDMAP error does.
    let offending = send(1 - dir, 7, 16, 100).ulpdus.remove(0);
    let copied = CopiedDdpHeader::from_segment(&offending).unwrap();
    let t = TerminateRepr {
        code,
        m: true,
        ddp: Some((16, copied)),
        r_bit: false,
        rdma: None,
    };
    let buffer = DdpBuffer::Untagged {
        rsvd_ulp2: 0,
        qn: 2,
        msn: 1,
        mo: 0,
    };
    Msg {
        dir,
        ulpdus: vec![ulpdu(
            true,
            buffer,
            Opcode::Terminate,
            RdmapHeader::Terminate(t),
            &[],
        )],
    }
}

/// A conversation without violations: Sends (one multi-segment), a Read, a Write, and a
/// Terminate from the responder at the end.
fn clean_messages() -> Vec<Msg> {
    vec![
        send(I, 1, 100, 1000),
        read_request(R, 1, 0x1234, 0x8000, 3000),
        tagged(I, Opcode::ReadResponse, 0x1234, 0x8000, 3000, 1024),
        send(R, 1, 2500, 1000),
        send(I, 2, 0, 1000),
        tagged(R, Opcode::Write, 0xBEEF, 0xFFFF_FF00, 700, 512),
        send(I, 3, 40, 1000),
        terminate(R, TerminateCode::new(0x0, 0x2, 0x06)),
    ]
}

fn mac(n: usize) -> [u8; 6] {
    [2, 0, 0, 0, 0, n as u8 + 1]
}

fn ip(n: usize) -> [u8; 4] {
    [10, 0, 0, n as u8 + 1]
}

/// Appends one TCP segment from `from` (SYN without ACK only for the very first frame).
fn push(spec: &Spec, frames: &mut Vec<Frame>, from: usize, seq: u32, syn: bool, payload: &[u8]) {
    let ports = [40000u16, 5000u16];
    let to = 1 - from;
    let eth = PacketBuilder::ethernet2(mac(from), mac(to));
    let ip = if spec.ipv6 {
        let v6 = |n: usize| {
            let mut a = [0u8; 16];
            a[0] = 0xfd;
            a[15] = n as u8 + 1;
            a
        };
        eth.ipv6(v6(from), v6(to), 64)
    } else {
        eth.ipv4(ip(from), ip(to), 64)
    };
    let mut b = ip.tcp(ports[from], ports[to], seq, 65535);
    // The first SYN carries no ACK; everything else does.
    if syn {
        b = b.syn();
    }
    if !(syn && frames.is_empty()) {
        b = b.ack(1);
    }
    let mut data = Vec::new();
    b.write(&mut data, payload).unwrap();
    let number = frames.len() as u64 + 1;
    frames.push(Frame {
        number,
        timestamp: Duration::from_micros(1_000 * number),
        link: LinkType::Ethernet,
        original_len: data.len() as u32,
        data,
    });
}

/// The SYN from the TCP client and the SYN-ACK.
fn handshake(spec: &Spec) -> Vec<Frame> {
    let client = if spec.initiator_is_client { I } else { R };
    let mut frames = Vec::new();
    push(spec, &mut frames, client, spec.isn[client], true, &[]);
    push(
        spec,
        &mut frames,
        1 - client,
        spec.isn[1 - client],
        true,
        &[],
    );
    frames
}

/// The MPA Request (`dir` = I) or Reply (`dir` = R) of `spec`.
fn startup_frame(spec: &Spec, dir: usize) -> Vec<u8> {
    FrameRepr {
        kind: if dir == I {
            FrameKind::Request
        } else {
            FrameKind::Reply
        },
        markers: spec.markers[dir],
        crc: spec.crc,
        reject: false,
        res: 0,
        rev: 2,
        enhanced: Some(spec.enhanced[dir]),
        private_data: b"synthetic",
    }
    .to_vec()
}

/// The framers of the initiator and the responder: the initiator sends markers if the Reply
/// asked for them, the responder if the Request did.
fn framers(spec: &Spec) -> [Framer; 2] {
    [
        Framer::new(FramerConfig {
            markers: spec.markers[R],
            crc: spec.crc,
            ..Default::default()
        }),
        Framer::new(FramerConfig {
            markers: spec.markers[I],
            crc: spec.crc,
            ..Default::default()
        }),
    ]
}

/// Builds the capture: handshake (SYN from the TCP client), MPA Request and Reply, then
/// every message framed by proto's framer and cut into TCP segments of at most `mss`.
fn build(spec: &Spec, messages: &[Msg]) -> Vec<Frame> {
    let mut next_seq = [spec.isn[I].wrapping_add(1), spec.isn[R].wrapping_add(1)];
    let mut frames = handshake(spec);
    let emit = |frames: &mut Vec<Frame>, next_seq: &mut [u32; 2], dir: usize, bytes: &[u8]| {
        for chunk in bytes.chunks(spec.mss) {
            push(spec, frames, dir, next_seq[dir], false, chunk);
            next_seq[dir] = next_seq[dir].wrapping_add(chunk.len() as u32);
        }
    };
    for dir in [I, R] {
        emit(&mut frames, &mut next_seq, dir, &startup_frame(spec, dir));
    }
    let mut framers = framers(spec);
    for m in messages {
        let mut bytes = Vec::new();
        for u in &m.ulpdus {
            let mut out = vec![0u8; framers[m.dir].fpdu_wire_len(u.len())];
            let n = framers[m.dir].emit(&[u], &mut out).unwrap();
            if spec.per_fpdu {
                emit(&mut frames, &mut next_seq, m.dir, &out[..n]);
            } else {
                bytes.extend_from_slice(&out[..n]);
            }
        }
        emit(&mut frames, &mut next_seq, m.dir, &bytes);
    }
    frames
}

/// Both directions' streams as [`build`] sends them (startup frame, then every FPDU of the
/// messages, markers included), with the stream offset of every FPDU boundary: where FPDU
/// mode starts and where each FPDU ends.
fn streams(spec: &Spec, messages: &[Msg]) -> [(Vec<u8>, Vec<usize>); 2] {
    let mut out = [I, R].map(|dir| {
        let bytes = startup_frame(spec, dir);
        let bounds = vec![bytes.len()];
        (bytes, bounds)
    });
    let mut framers = framers(spec);
    for m in messages {
        for u in &m.ulpdus {
            let (bytes, bounds) = &mut out[m.dir];
            let mut fpdu = vec![0u8; framers[m.dir].fpdu_wire_len(u.len())];
            let n = framers[m.dir].emit(&[u], &mut fpdu).unwrap();
            bytes.extend_from_slice(&fpdu[..n]);
            bounds.push(bytes.len());
        }
    }
    out
}

/// A capture of `streams` sent as the given segments, in this order after the handshake:
/// direction and stream range (an empty range is a pure ACK).
fn segmented(
    spec: &Spec,
    streams: &[(Vec<u8>, Vec<usize>); 2],
    plan: &[(usize, Range<usize>)],
) -> Vec<Frame> {
    let mut frames = handshake(spec);
    for (dir, range) in plan {
        let seq = spec.isn[*dir]
            .wrapping_add(1)
            .wrapping_add(range.start as u32);
        push(
            spec,
            &mut frames,
            *dir,
            seq,
            false,
            &streams[*dir].0[range.clone()],
        );
    }
    frames
}

fn renumber(frames: &mut [Frame]) {
    for (i, f) in frames.iter_mut().enumerate() {
        f.number = i as u64 + 1;
    }
}

fn analyse(frames: Vec<Frame>) -> CaptureReport {
    let capture = Capture {
        format: CaptureFormat::Pcap,
        frames,
        warnings: Vec::new(),
        incomplete: false,
    };
    let report = analyse_capture("synthetic", &capture);
    // Rendering never fails either.
    assert!(!render_text(&report, true).is_empty());
    assert!(render_json(&report, true).starts_with('{'));
    report
}

fn only_connection(report: &CaptureReport) -> &IwarpConnection {
    let conns: Vec<_> = report.iwarp().collect();
    assert_eq!(conns.len(), 1, "{}", render_text(report, true));
    conns[0]
}

fn kinds(report: &CaptureReport) -> Vec<FindingKind> {
    report.findings().map(|f| f.kind).collect()
}

/// Segments as (direction, opcode, L, payload length), per direction in stream order;
/// frame numbers, times and the interleaving of the two directions left out.
fn shape(c: &IwarpConnection) -> Vec<(Direction, Option<Opcode>, bool, usize)> {
    let mut v: Vec<_> = c
        .segments
        .iter()
        .map(|s| (s.direction, s.opcode, s.last, s.payload_len))
        .collect();
    v.sort_by_key(|s| s.0);
    v
}

#[test]
fn markers_crc_terminate_all_decode() {
    let report = analyse(build(&Spec::default(), &clean_messages()));
    assert_eq!(report.violations(), 0, "{}", render_text(&report, true));
    let c = only_connection(&report);
    let ng = c.negotiated.as_ref().unwrap();
    assert!(ng.crc);
    assert_eq!(ng.markers, [true, true]);
    let i2r = &c.directions[0];
    let r2i = &c.directions[1];
    assert_eq!(i2r.opcodes[&Opcode::Send].segments, 3);
    assert_eq!(i2r.opcodes[&Opcode::Send].payload_octets, 140);
    assert_eq!(i2r.opcodes[&Opcode::ReadResponse].segments, 3);
    assert_eq!(i2r.opcodes[&Opcode::ReadResponse].messages, 1);
    assert_eq!(r2i.opcodes[&Opcode::Send].segments, 3);
    assert_eq!(r2i.opcodes[&Opcode::Write].payload_octets, 700);
    // The Terminate, decoded: RDMAP remote operation, unexpected opcode.
    assert_eq!(r2i.terminates.len(), 1);
    assert_eq!(r2i.terminates[0].1.code, TerminateCode::new(0, 2, 6));
    let text = render_text(&report, false);
    assert!(text.contains("Terminate in frame"), "{text}");
    assert!(
        text.contains(TerminateCode::new(0, 2, 6).description()),
        "{text}"
    );
    // proto's Terminate report names the offending message from the copied DDP header.
    assert!(
        text.contains("offending Send qn 0 msn 7 mo 0 len 16"),
        "{text}"
    );
    assert!(c
        .segments
        .iter()
        .all(|s| s.crc == warpcore_apps::analysis::CrcCheck::Good));
}

#[test]
fn markers_in_one_direction_only_and_no_crc() {
    for markers in [[true, false], [false, true]] {
        let spec = Spec {
            markers,
            crc: false,
            ..Spec::default()
        };
        let report = analyse(build(&spec, &clean_messages()));
        assert_eq!(report.violations(), 0, "{}", render_text(&report, true));
        let c = only_connection(&report);
        assert_eq!(
            c.negotiated.as_ref().unwrap().markers,
            [markers[1], markers[0]]
        );
        assert_eq!(c.segments.len(), 13);
    }
}

#[test]
fn responder_opened_tcp_and_sequence_wraps() {
    let spec = Spec {
        initiator_is_client: false,
        isn: [u32::MAX - 1500, u32::MAX - 40],
        ..Spec::default()
    };
    let reference = analyse(build(&Spec::default(), &clean_messages()));
    let report = analyse(build(&spec, &clean_messages()));
    assert_eq!(report.violations(), 0, "{}", render_text(&report, true));
    let c = only_connection(&report);
    assert_eq!(c.initiator_sent_syn, Some(false));
    assert_eq!(c.initiator, SocketAddr::from(([10, 0, 0, 1], 40000)));
    assert_eq!(shape(c), shape(only_connection(&reference)));
}

/// Retransmissions, duplicates and reordering in the capture change nothing.
#[test]
fn reordered_and_duplicated_segments() {
    let frames = build(
        &Spec {
            mss: 300,
            ..Spec::default()
        },
        &clean_messages(),
    );
    let reference = analyse(frames.clone());
    let mut mangled = frames.clone();
    // Swap neighbours, duplicate every fifth frame later on, and repeat an early one at the end.
    let n = mangled.len();
    for i in (6..n - 1).step_by(4) {
        mangled.swap(i, i + 1);
    }
    for i in (5..n).step_by(5).rev() {
        let dup = mangled[i].clone();
        mangled.insert((i + 3).min(mangled.len()), dup);
    }
    mangled.push(frames[7].clone());
    renumber(&mut mangled);
    let report = analyse(mangled);
    assert_eq!(report.violations(), 0, "{}", render_text(&report, true));
    assert_eq!(
        shape(only_connection(&report)),
        shape(only_connection(&reference))
    );
}

/// A frame missing from the capture: that direction stops at the gap (a note, not a
/// violation), and no Read Response is blamed for a Request the capture lost.
#[test]
fn lost_frame_is_a_gap_not_a_violation() {
    let mut frames = build(
        &Spec {
            mss: 300,
            ..Spec::default()
        },
        &clean_messages(),
    );
    // Drop a frame from the middle of the responder's 2500-octet Send.
    let victim = frames.len() - 8;
    frames.remove(victim);
    renumber(&mut frames);
    let report = analyse(frames);
    assert_eq!(report.violations(), 0, "{}", render_text(&report, true));
    let c = only_connection(&report);
    assert!(
        c.notes.iter().any(|n| n.contains("capture gap")),
        "{:?}",
        c.notes
    );
}

#[test]
fn other_link_types() {
    let frames = build(&Spec::default(), &clean_messages());
    let reference = shape(only_connection(&analyse(frames.clone())));
    // Raw IP: the Ethernet header removed.
    let raw: Vec<Frame> = frames
        .iter()
        .map(|f| Frame {
            data: f.data[14..].to_vec(),
            link: LinkType::RawIp,
            ..f.clone()
        })
        .collect();
    // Linux cooked capture v1: a 16-octet header ending in the EtherType.
    let sll: Vec<Frame> = frames
        .iter()
        .map(|f| {
            let mut data = vec![0, 0, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0, 0x08, 0x00];
            data.extend_from_slice(&f.data[14..]);
            Frame {
                data,
                link: LinkType::LinuxSll,
                ..f.clone()
            }
        })
        .collect();
    // Linux cooked capture v2: a 20-octet header starting with the EtherType.
    let sll2: Vec<Frame> = frames
        .iter()
        .map(|f| {
            let mut data = vec![
                0x08, 0x00, 0, 0, 0, 0, 0, 3, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0,
            ];
            data.extend_from_slice(&f.data[14..]);
            Frame {
                data,
                link: LinkType::LinuxSll2,
                ..f.clone()
            }
        })
        .collect();
    // BSD loopback: a 4-octet address family (AF_INET = 2, host order) in front of IP.
    let null: Vec<Frame> = frames
        .iter()
        .map(|f| {
            let mut data = vec![2, 0, 0, 0];
            data.extend_from_slice(&f.data[14..]);
            Frame {
                data,
                link: LinkType::Null,
                ..f.clone()
            }
        })
        .collect();
    // 802.1Q VLAN tag (VID 42) between the MAC addresses and the EtherType.
    let vlan: Vec<Frame> = frames
        .iter()
        .map(|f| {
            let mut data = f.data[..12].to_vec();
            data.extend_from_slice(&[0x81, 0x00, 0x00, 42]);
            data.extend_from_slice(&f.data[12..]);
            Frame { data, ..f.clone() }
        })
        .collect();
    // IPv6.
    let v6 = build(
        &Spec {
            ipv6: true,
            ..Spec::default()
        },
        &clean_messages(),
    );
    for frames in [raw, sll, sll2, null, vlan, v6] {
        let report = analyse(frames);
        assert_eq!(report.violations(), 0);
        assert_eq!(shape(only_connection(&report)), reference);
    }
}

fn violations_of(messages: Vec<Msg>) -> Vec<FindingKind> {
    kinds(&analyse(build(&Spec::default(), &messages)))
}

#[test]
fn msn_out_of_sequence() {
    // DDP-4.3: MSN starts at 1 and goes up by one per message on each queue.
    assert_eq!(
        violations_of(vec![send(I, 1, 10, 100), send(I, 3, 10, 100)]),
        [FindingKind::MsnSequence]
    );
    assert_eq!(
        violations_of(vec![send(I, 2, 10, 100)]),
        [FindingKind::MsnSequence]
    );
}

#[test]
fn message_offset_gap() {
    let mut m = send(I, 1, 300, 100);
    m.ulpdus.remove(1); // MO jumps from 0..100 to 200
    assert_eq!(violations_of(vec![m]), [FindingKind::MessageOffset]);
}

#[test]
fn tagged_offset_not_contiguous() {
    let mut m = tagged(I, Opcode::Write, 0x55, 0, 300, 100);
    m.ulpdus.remove(1);
    assert_eq!(violations_of(vec![m]), [FindingKind::TaggedOffset]);
}

#[test]
fn read_response_without_request_or_mismatched() {
    assert_eq!(
        violations_of(vec![tagged(I, Opcode::ReadResponse, 1, 0, 64, 64)]),
        [FindingKind::ReadResponse]
    );
    // Wrong sink STag.
    assert_eq!(
        violations_of(vec![
            read_request(R, 1, 0x10, 0, 64),
            tagged(I, Opcode::ReadResponse, 0x11, 0, 64, 64)
        ]),
        [FindingKind::ReadResponse]
    );
    // Wrong size.
    assert_eq!(
        violations_of(vec![
            read_request(R, 1, 0x10, 0, 64),
            tagged(I, Opcode::ReadResponse, 0x10, 0, 32, 64)
        ]),
        [FindingKind::ReadResponse]
    );
}

#[test]
fn more_reads_than_ird() {
    // IRD 4 on both sides (see `build`): a fifth outstanding Read Request is one too many.
    let reads = (1..=5)
        .map(|msn| read_request(R, msn, 0x10, 0, 8))
        .collect();
    assert_eq!(violations_of(reads), [FindingKind::IrdExceeded]);
}

fn atomic_request(dir: usize, msn: u32) -> Msg {
    let buffer = DdpBuffer::Untagged {
        rsvd_ulp2: 0,
        qn: 1,
        msn,
        mo: 0,
    };
    let rq = AtomicRequestRepr::fetch_add(msn, 0x20, 0x1000, 1, u64::MAX);
    Msg {
        dir,
        ulpdus: vec![ulpdu(
            true,
            buffer,
            Opcode::AtomicRequest,
            RdmapHeader::AtomicRequest(rq),
            &[],
        )],
    }
}

fn atomic_response(dir: usize, msn: u32) -> Msg {
    let buffer = DdpBuffer::Untagged {
        rsvd_ulp2: 0,
        qn: 3,
        msn,
        mo: 0,
    };
    let rs = AtomicResponseRepr {
        orig_request_id: msn,
        orig_value: 7,
    };
    Msg {
        dir,
        ulpdus: vec![ulpdu(
            true,
            buffer,
            Opcode::AtomicResponse,
            RdmapHeader::AtomicResponse(rs),
            &[],
        )],
    }
}

/// Atomic Requests travel on the Read Requests' queue and count against the same IRD
/// (RFC 7306 §5.2, EXT-5.2-1): three Reads and two FetchAdds outstanding are one too many
/// for IRD 4; once an Atomic Response retired one, the next request fits.
#[test]
fn atomic_requests_count_against_ird() {
    let four = || {
        let mut m: Vec<Msg> = (1..=3)
            .map(|msn| read_request(R, msn, 0x10, 0, 8))
            .collect();
        m.push(atomic_request(R, 4));
        m
    };
    assert_eq!(violations_of(four()), []);
    let mut messages = four();
    messages.push(atomic_request(R, 5));
    messages.push(atomic_response(I, 1));
    messages.push(atomic_response(I, 2));
    messages.push(read_request(R, 6, 0x10, 0, 8));
    let report = analyse(build(&Spec::default(), &messages));
    let text = render_text(&report, false);
    assert_eq!(kinds(&report), [FindingKind::IrdExceeded], "{text}");
    assert_eq!(
        report.findings().next().unwrap().detail,
        "5 Read/Atomic Requests outstanding, the peer's IRD is 4"
    );
}

/// A Read Request beyond the IRD stays outstanding until its response: after one response,
/// four are still outstanding, so the next request is again one too many (RDMAP-6.1-5).
/// Each excess is reported, with the true number outstanding.
#[test]
fn every_read_beyond_ird_is_reported() {
    let mut messages: Vec<Msg> = (1..=5)
        .map(|msn| read_request(R, msn, 0x10, 0, 8))
        .collect();
    messages.push(tagged(I, Opcode::ReadResponse, 0x10, 0, 8, 8));
    messages.push(read_request(R, 6, 0x10, 0, 8));
    for _ in 0..5 {
        messages.push(tagged(I, Opcode::ReadResponse, 0x10, 0, 8, 8));
    }
    messages.push(read_request(R, 7, 0x10, 0, 8));
    let report = analyse(build(&Spec::default(), &messages));
    let text = render_text(&report, false);
    assert_eq!(
        kinds(&report),
        [FindingKind::IrdExceeded, FindingKind::IrdExceeded],
        "{text}"
    );
    let details: Vec<&str> = report.findings().map(|f| f.detail.as_str()).collect();
    assert_eq!(
        details,
        [
            "5 Read/Atomic Requests outstanding, the peer's IRD is 4",
            "5 Read/Atomic Requests outstanding, the peer's IRD is 4"
        ]
    );
}

#[test]
fn fpdu_after_terminate() {
    let found = violations_of(vec![
        terminate(I, TerminateCode::new(2, 0, 2)),
        send(I, 1, 10, 100),
    ]);
    assert_eq!(found, [FindingKind::AfterTerminate]);
}

#[test]
fn wrong_queue_and_bad_versions() {
    // A Send on QN 1: proto's segment decoder rejects it (DDP invalid QN).
    let mut bad_qn = send(I, 1, 10, 100);
    bad_qn.ulpdus[0][9] = 1; // QN (D+6..D+10) = 1
    assert_eq!(violations_of(vec![bad_qn]), [FindingKind::UnexpectedOpcode]);
    let mut v0 = send(I, 1, 10, 100);
    v0.ulpdus[0][0] &= !0x03; // DDP version 0
    assert_eq!(violations_of(vec![v0]), [FindingKind::DdpVersion]);
    // A Read Request that claims to continue (L = 0): messages without ULP payload are
    // whole in one segment (proto's rdmap::check_inbound, RDMAP-4.2-1).
    let mut split_read = read_request(R, 1, 0x10, 0, 8);
    split_read.ulpdus[0][0] &= !0x40;
    assert_eq!(
        violations_of(vec![split_read]),
        [FindingKind::MalformedSegment]
    );
    let mut rv = send(I, 1, 10, 100);
    rv.ulpdus[0][1] &= !0xC0; // RDMAP version 0
    assert_eq!(violations_of(vec![rv]), [FindingKind::RdmapVersion]);
}

/// The summary line's FPDU count counts every whole FPDU of the stream, the ones whose
/// segment did not decode included (and says how many those are): damaging one FPDU each
/// way leaves the count as it was.
#[test]
fn fpdus_that_do_not_decode_are_still_counted() {
    let fpdu_line = |text: &str, dir: &str| {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("  {dir}: ")))
            .unwrap()
            .to_string();
        line
    };
    let clean = render_text(&analyse(build(&Spec::default(), &clean_messages())), false);
    let mut messages = clean_messages();
    messages[0].ulpdus[0][0] &= !0x03; // the initiator's first Send: DDP version 0
    let mut frames = build(&Spec::default(), &messages);
    spoil_first_fpdu(&mut frames, R); // the responder's Read Request: bad CRC
    let report = analyse(frames);
    let text = render_text(&report, false);
    assert_eq!(
        kinds(&report),
        [FindingKind::DdpVersion, FindingKind::CrcError],
        "{text}"
    );
    for dir in ["I>R", "R>I"] {
        let want = fpdu_line(&clean, dir).replacen(" octets;", " octets (1 not decoded);", 1);
        let got = fpdu_line(&text, dir);
        // The same count and octets; the CRC error shows in its own field too.
        assert_eq!(got.replace("CRC errors 1", "CRC errors 0"), want, "{text}");
    }
    let json = render_json(&report, false);
    let clean_json = render_json(&analyse(build(&Spec::default(), &clean_messages())), false);
    for dir in ["I>R", "R>I"] {
        let (d, c) = (json_direction(&json, dir), json_direction(&clean_json, dir));
        assert_eq!(d["fpdus"], c["fpdus"]);
        assert_eq!(d["fpdus_not_decoded"], 1);
    }
}

/// A finding's "at seq S" names the FPDU's ULPDU_Length field, as the Segment field says,
/// also when a marker comes first (every FPDU starting at a 512th octet of FPDU mode, the
/// first one always): S is then 4 past the marker.
#[test]
fn finding_seq_is_that_of_the_ulpdu_length() {
    for markers in [true, false] {
        let spec = Spec {
            markers: [markers; 2],
            ..Spec::default()
        };
        let mut frames = build(&spec, &clean_messages());
        spoil_first_fpdu(&mut frames, R);
        let report = analyse(frames);
        let crc = report
            .findings()
            .find(|f| f.kind == FindingKind::CrcError)
            .unwrap();
        let fpdu_mode = spec.isn[R]
            .wrapping_add(1)
            .wrapping_add(startup_frame(&spec, R).len() as u32);
        let seq = fpdu_mode + if markers { 4 } else { 0 };
        assert!(
            crc.detail.starts_with(&format!("at seq {seq}: ")),
            "markers {markers}: {}",
            crc.detail
        );
    }
}

#[test]
fn corrupted_marker_and_crc() {
    let frames = build(
        &Spec {
            mss: 2000,
            ..Spec::default()
        },
        &clean_messages(),
    );
    // The responder's first FPDU-mode octets are its initial marker (FPDUPTR 0); the frame
    // right after the Reply holds it. Point it somewhere else.
    let reply_frame = 4; // SYN, SYN-ACK, Request, Reply
    let mut bad_marker = frames.clone();
    let f = bad_marker
        .iter_mut()
        .skip(reply_frame)
        .find(|f| f.data[34..36] == [0x13, 0x88])
        .unwrap();
    let payload_start = 14 + 20 + 20;
    f.data[payload_start + 3] = 0x08;
    let report = analyse(bad_marker);
    // With CRCs on, the CRC (which covers the marker) fails first (MPA-8-3).
    assert_eq!(kinds(&report), [FindingKind::CrcError]);
    // Decoding resumed after the bad FPDU (the Read Request): the rest of that direction is
    // all there, and the Read Response it lost its request for is not blamed.
    let r2i = &only_connection(&report).directions[1];
    assert_eq!(r2i.opcodes[&Opcode::Send].segments, 3);
    assert_eq!(r2i.terminates.len(), 1);
    assert!(!r2i.opcodes.contains_key(&Opcode::ReadRequest));
    let spec = Spec {
        mss: 2000,
        crc: false,
        ..Spec::default()
    };
    let mut frames = build(&spec, &clean_messages());
    let f = frames
        .iter_mut()
        .skip(reply_frame)
        .find(|f| f.data[34..36] == [0x13, 0x88])
        .unwrap();
    f.data[payload_start + 3] = 0x08;
    let report = analyse(frames);
    assert_eq!(kinds(&report), [FindingKind::MarkerError]);
    assert_eq!(only_connection(&report).directions[1].marker_errors, 1);
    // The framing is lost from the first FPDU on: no R>I segment can be judged (the five
    // after the Reply: Read Request, the Send in two, Write, Terminate), and iwdump says so.
    let r2i = &only_connection(&report).directions[1];
    let fpdu_mode = spec.isn[R]
        .wrapping_add(1)
        .wrapping_add(startup_frame(&spec, R).len() as u32);
    assert_eq!(
        (
            r2i.data_segments,
            r2i.alignment_unknown_segments,
            r2i.alignment_unknown_from
        ),
        (
            0,
            5,
            Some(AlignmentUnknown {
                seq: fpdu_mode,
                reason: AlignmentLoss::DeframingStopped
            })
        )
    );
    assert_eq!(
        line_after(&render_text(&report, false), "R>I"),
        format!(
            "      TCP data segments 5: 0 aligned with FPDUs, 0 not aligned (share unknown), \
             5 unknown (from seq {fpdu_mode}: deframing stopped on an error)"
        )
    );
}

#[test]
fn malformed_and_missing_startup() {
    // A Request with PD_Length above 512: malformed startup, a violation.
    let mut frames = build(&Spec::default(), &[]);
    let req = &mut frames[2];
    let at = 14 + 20 + 20 + 18;
    req.data[at] = 0x02;
    req.data[at + 1] = 0x01;
    let report = analyse(frames);
    assert_eq!(kinds(&report), [FindingKind::MalformedStartup]);
    // No Reply captured: not a violation, just never reached FPDU mode.
    let mut frames = build(&Spec::default(), &[]);
    frames.truncate(3);
    let report = analyse(frames);
    assert_eq!(report.violations(), 0);
    assert!(only_connection(&report)
        .notes
        .iter()
        .any(|n| n.contains("no MPA Reply")));
}

/// RFC 6581 §9: proto's initiator machine judges the Reply against the Request.
#[test]
fn reply_that_does_not_fit_the_request() {
    let p2p = EnhancedData {
        peer_to_peer: true,
        rtr: RtrTypes::WRITE,
        ird: 4,
        ord: 4,
    };
    let cs = EnhancedData {
        peer_to_peer: false,
        rtr: RtrTypes::EMPTY,
        ird: 4,
        ord: 4,
    };
    // The Reply drops the A flag (MPA2-9.2-4).
    let spec = Spec {
        enhanced: [p2p, cs],
        ..Spec::default()
    };
    assert_eq!(
        kinds(&analyse(build(&spec, &[]))),
        [FindingKind::Negotiation]
    );
    // The responder's ORD exceeds the initiator's IRD (MPA2-9.1-8).
    let greedy = EnhancedData { ord: 8, ..cs };
    let spec = Spec {
        enhanced: [cs, greedy],
        ..Spec::default()
    };
    assert_eq!(
        kinds(&analyse(build(&spec, &[]))),
        [FindingKind::Negotiation]
    );
    // Peer-to-peer done right: the RTR first, then traffic.
    let spec = Spec {
        enhanced: [p2p, p2p],
        ..Spec::default()
    };
    let rtr = tagged(I, Opcode::Write, 0, 0, 0, 64);
    let report = analyse(build(&spec, &[rtr, send(I, 1, 10, 100)]));
    assert_eq!(report.violations(), 0, "{}", render_text(&report, true));
    // Peer-to-peer without the RTR first (RFC 6581 §5).
    let report = analyse(build(&spec, &[send(I, 1, 10, 100)]));
    assert_eq!(kinds(&report), [FindingKind::Rtr]);
}

/// RFC 6581 §9.2: a responder that supports none of the RTR types the initiator offered
/// MUST flag one it does support (MPA2-9.2-8), and the initiator, unable to send any of
/// those, MUST send a Terminate 2/0/7 instead of an RTR (MPA2-9.2-10). Both sides conform:
/// no violation. An initiator that sends anything else first still breaks MPA2-5-1.
#[test]
fn no_common_rtr_answered_by_terminate_is_no_violation() {
    let offer = EnhancedData {
        peer_to_peer: true,
        rtr: RtrTypes::WRITE,
        ird: 4,
        ord: 4,
    };
    let only_read = EnhancedData {
        rtr: RtrTypes::READ,
        ..offer
    };
    let spec = Spec {
        enhanced: [offer, only_read],
        ..Spec::default()
    };
    let term = TerminateRepr {
        code: warpcore_proto::MpaError::NoMatchingRtr.terminate_code(),
        m: false,
        ddp: None,
        r_bit: false,
        rdma: None,
    };
    let buffer = DdpBuffer::Untagged {
        rsvd_ulp2: 0,
        qn: 2,
        msn: 1,
        mo: 0,
    };
    let term = Msg {
        dir: I,
        ulpdus: vec![ulpdu(
            true,
            buffer,
            Opcode::Terminate,
            RdmapHeader::Terminate(term),
            &[],
        )],
    };
    let report = analyse(build(&spec, &[term]));
    assert_eq!(report.violations(), 0, "{}", render_text(&report, true));
    assert!(
        only_connection(&report)
            .notes
            .iter()
            .any(|n| n.contains("no RTR type in common")),
        "{}",
        render_text(&report, true)
    );
    // Traffic without the Terminate: the RTR rule still holds.
    let report = analyse(build(&spec, &[send(I, 1, 10, 100)]));
    assert_eq!(kinds(&report), [FindingKind::Rtr]);
}

/// Spoils the CRC of the first FPDU `dir` sends: the first frame of `dir` after the Request
/// and the Reply (SYN, SYN-ACK, Request, Reply come first), whose last octet is that CRC's.
fn spoil_first_fpdu(frames: &mut [Frame], dir: usize) {
    let port = [40000u16, 5000][dir].to_be_bytes();
    let f = frames
        .iter_mut()
        .skip(4)
        .find(|f| f.data[34..36] == port)
        .unwrap();
    *f.data.last_mut().unwrap() ^= 0xFF;
}

/// The initiator's first FPDU lost to a CRC error: the FPDU decoded first is not its first,
/// so it is neither judged as the peer-to-peer RTR (MPA2-5-1) nor taken as the RTR sent,
/// and the responder's first FPDU, which came after the lost one, is not said to precede
/// the initiator's (MPA fencing, mpa-08 §7.1.2 rule 4). The CRC error is the one finding.
#[test]
fn a_lost_first_fpdu_is_not_judged_as_the_first() {
    let p2p = EnhancedData {
        peer_to_peer: true,
        rtr: RtrTypes::WRITE,
        ird: 4,
        ord: 4,
    };
    let spec = Spec {
        enhanced: [p2p, p2p],
        ..Spec::default()
    };
    let rtr = tagged(I, Opcode::Write, 0, 0, 0, 64);
    let mut frames = build(&spec, &[rtr, send(I, 1, 10, 100)]);
    spoil_first_fpdu(&mut frames, I);
    let report = analyse(frames);
    let text = render_text(&report, false);
    assert_eq!(kinds(&report), [FindingKind::CrcError], "{text}");
    let c = only_connection(&report);
    assert_eq!(c.negotiated.as_ref().unwrap().rtr_sent, None, "{text}");
    assert!(
        c.notes
            .iter()
            .any(|n| n.contains("first FPDU was not decoded, so whether it was an agreed RTR")),
        "{text}"
    );
    // Client-server: the initiator's Send is lost, the responder's Read Request follows it.
    let mut frames = build(&Spec::default(), &clean_messages());
    spoil_first_fpdu(&mut frames, I);
    let report = analyse(frames);
    let text = render_text(&report, false);
    assert_eq!(kinds(&report), [FindingKind::CrcError], "{text}");
    assert!(
        !text.contains("precedes the initiator's first FPDU"),
        "{text}"
    );
    // And the note still comes when the responder did go first.
    let mut messages = clean_messages();
    messages.swap(0, 1);
    let report = analyse(build(&Spec::default(), &messages));
    let text = render_text(&report, false);
    assert!(
        text.contains("precedes the initiator's first FPDU"),
        "{text}"
    );
}

/// A 4-tuple reused after a reset: the new SYN starts a second connection.
#[test]
fn port_reuse_after_reset_is_a_new_connection() {
    let mut frames = build(&Spec::default(), &clean_messages());
    let mut rst = Vec::new();
    PacketBuilder::ethernet2(mac(I), mac(R))
        .ipv4(ip(I), ip(R), 64)
        .tcp(40000, 5000, 123, 0)
        .rst()
        .write(&mut rst, &[])
        .unwrap();
    frames.push(Frame {
        number: 0,
        timestamp: Duration::from_secs(1),
        link: LinkType::Ethernet,
        original_len: rst.len() as u32,
        data: rst,
    });
    let spec = Spec {
        isn: [0x8000_0000, 0x1234],
        ..Spec::default()
    };
    frames.extend(build(&spec, &[send(I, 1, 10, 100), send(R, 1, 20, 100)]));
    renumber(&mut frames);
    let report = analyse(frames);
    assert_eq!(report.violations(), 0, "{}", render_text(&report, true));
    let conns: Vec<_> = report.iwarp().collect();
    assert_eq!(conns.len(), 2, "{}", render_text(&report, false));
    assert_eq!(conns[0].closed[0], warpcore_apps::analysis::TcpClose::Rst);
    assert_eq!(conns[1].segments.len(), 2);
}

/// A damaged ULPDU_Length breaks the length chain: the CRC fails, and what the resumed
/// deframer sees next is not taken for FPDUs: decoding of that direction ends there.
#[test]
fn damaged_length_stops_after_one_resumption() {
    let spec = Spec {
        mss: 4000,
        markers: [false, false],
        ..Spec::default()
    };
    let mut frames = build(
        &spec,
        &[
            send(I, 1, 100, 1000),
            send(I, 2, 100, 1000),
            send(I, 3, 100, 1000),
        ],
    );
    // The first FPDU's ULPDU_Length (118) becomes 114: the CRC is then looked for 4 octets
    // early.
    let f = frames
        .iter_mut()
        .skip(4)
        .find(|f| f.data[34..36] == [0x9c, 0x40])
        .unwrap();
    let at = 14 + 20 + 20 + 1;
    assert_eq!(f.data[at], 118);
    f.data[at] = 114;
    let report = analyse(frames);
    let found = kinds(&report);
    assert_eq!(found[0], FindingKind::CrcError, "{found:?}");
    assert!(found.len() <= 2, "{found:?}");
    let c = only_connection(&report);
    assert!(
        c.notes
            .iter()
            .any(|n| n.contains("deframing stopped") || n.contains("length chain")),
        "{:?}",
        c.notes
    );
    // Nothing after the damage is taken for a real FPDU.
    assert!(c.segments.is_empty(), "{:?}", c.segments);
}

/// The connection of the alignment tests: CRCs on, markers from the responder only (the
/// Request asks for them), so that one direction has markers inside its FPDUs and the other
/// none; seven Sends from the initiator, six from the responder, one FPDU each.
fn alignment_connection() -> (Spec, Vec<Msg>) {
    let spec = Spec {
        markers: [true, false],
        ..Spec::default()
    };
    let mut messages = Vec::new();
    for (k, len) in [100, 40, 60, 200, 120, 80, 30].into_iter().enumerate() {
        messages.push(send(I, k as u32 + 1, len, 4096));
    }
    for (k, len) in [300, 350, 280, 400, 310, 290].into_iter().enumerate() {
        messages.push(send(R, k as u32 + 1, len, 4096));
    }
    (spec, messages)
}

/// The segments of the alignment tests, in capture order after the handshake, from the
/// FPDU boundaries `b` (initiator) and `d` (responder): index 0 is where FPDU mode starts,
/// index k the end of the k-th FPDU. I>R: 6 aligned, 5 not; R>I: 3 aligned, 2 not.
fn alignment_plan(b: &[usize], d: &[usize]) -> Vec<(usize, Range<usize>)> {
    vec![
        (I, 0..b[0]),         // the Request: startup, not counted
        (R, 0..d[1]),         // the Reply with the first FPDU: startup, not counted
        (I, b[0]..b[1]),      // aligned: one FPDU
        (I, b[1]..b[3]),      // aligned: two whole FPDUs
        (R, d[1]..d[2]),      // aligned: one FPDU with markers in it
        (I, b[3]..b[3] + 10), // not aligned: ends inside an FPDU
        (R, d[2]..d[2]),      // a pure ACK: not counted
        (I, b[3] + 10..b[4]), // not aligned: starts inside one
        (R, d[2]..d[4]),      // aligned: two FPDUs
        (I, b[4]..b[5]),      // aligned
        (I, b[4]..b[5]),      // aligned: a retransmission, counted again
        (I, b[3]..b[4]),      // aligned: resends two unaligned segments' octets as one
        (I, b[2] + 5..b[4]),  // not aligned: a retransmission starting inside an FPDU
        (R, d[4]..d[4] + 1),  // not aligned
        (I, b[6] - 3..b[6]),  // not aligned, ahead of the hole before it
        (R, d[4] + 1..d[5]),  // not aligned
        (I, b[5]..b[6] - 3),  // not aligned (fills the hole)
        (I, b[6]..b[6]),      // a pure ACK: not counted
        (R, d[5]..d[6]),      // aligned
        (I, b[6]..b[7]),      // aligned
    ]
}

/// The capture of the alignment tests, with what it was built from.
struct AlignmentCapture {
    spec: Spec,
    frames: Vec<Frame>,
    /// The segments after the handshake: frame `2 + k` holds `plan[k]`.
    plan: Vec<(usize, Range<usize>)>,
    /// The FPDU boundaries of both directions (see [`streams`]).
    bounds: [Vec<usize>; 2],
}

impl AlignmentCapture {
    fn new() -> Self {
        let (spec, messages) = alignment_connection();
        let st = streams(&spec, &messages);
        assert_eq!((st[I].1.len(), st[R].1.len()), (8, 7));
        let plan = alignment_plan(&st[I].1, &st[R].1);
        let frames = segmented(&spec, &st, &plan);
        let bounds = st.map(|(_, b)| b);
        AlignmentCapture {
            spec,
            frames,
            plan,
            bounds,
        }
    }

    /// The index in `frames` of the first segment of `dir` covering `range`.
    fn frame_of(&self, dir: usize, range: Range<usize>) -> usize {
        2 + self
            .plan
            .iter()
            .position(|p| *p == (dir, range.clone()))
            .unwrap()
    }

    /// The TCP sequence number of the octet at stream offset `offset` of the initiator.
    fn seq_i(&self, offset: usize) -> u32 {
        self.spec.isn[I].wrapping_add(1).wrapping_add(offset as u32)
    }
}

/// The line after the "  I>R: ..." or "  R>I: ..." summary line of the first connection.
fn line_after(text: &str, dir: &str) -> String {
    let mut lines = text.lines();
    lines.find(|l| l.starts_with(&format!("  {dir}: ")));
    lines.next().unwrap_or_default().to_string()
}

/// The JSON object of one direction of the first connection, as written.
fn json_direction(json: &str, dir: &str) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_str(json).unwrap();
    v["connections"][0]["directions"][dir].clone()
}

/// Issue 12 item 3: iwdump reports, per direction, the TCP data segments that start and
/// end at FPDU boundaries (an MPA-aligned sender, mpa-08 §4 item 4). Every copy of a
/// segment counts, each judged on its own range, and the copies are reported as
/// retransmissions; startup segments and pure ACKs do not count.
#[test]
fn segment_alignment_counts_every_copy_exactly() {
    let report = analyse(AlignmentCapture::new().frames);
    let text = render_text(&report, false);
    assert_eq!(report.violations(), 0, "{text}");
    let c = only_connection(&report);
    assert_eq!(shape(c).len(), 13, "{text}");
    let [i2r, r2i] = &c.directions;
    assert_eq!(
        (
            i2r.data_segments,
            i2r.aligned_segments,
            i2r.unaligned_segments(),
            i2r.alignment_unknown_segments,
            i2r.alignment_unknown_from
        ),
        (11, 6, 5, 0, None)
    );
    assert_eq!(i2r.aligned_percent(), Some(54.5)); // 6/11 = 54.54...: rounded down
    assert_eq!(
        (
            r2i.data_segments,
            r2i.aligned_segments,
            r2i.alignment_unknown_segments
        ),
        (5, 3, 0)
    );
    // Three of the initiator's segments repeat octets sent before (the copy of b4..b5, the
    // resend of b3..b4 and the one from b2 + 5), and the output says so: the 11 are not 11
    // different pieces of the stream. The segment filling the hole is no repeat.
    assert_eq!(
        (i2r.retransmitted_segments, r2i.retransmitted_segments),
        (3, 0)
    );
    assert_eq!(
        line_after(&text, "I>R"),
        "      TCP data segments 11 (3 of them retransmissions): 6 aligned with FPDUs, 5 not aligned (54.5 % aligned)"
    );
    assert_eq!(
        line_after(&text, "R>I"),
        "      TCP data segments 5: 3 aligned with FPDUs, 2 not aligned (60.0 % aligned)"
    );
    let json = render_json(&report, false);
    assert_eq!(json_direction(&json, "I>R")["segments_retransmitted"], 3);
    assert_eq!(json_direction(&json, "R>I")["segments_retransmitted"], 0);
    assert!(
        json.contains(
            "\"segments_aligned\":6,\"segments_unaligned\":5,\"segments_alignment_unknown\":0,\
             \"segments_retransmitted\":3,\"segments_aligned_percent\":54.5,\
             \"alignment_unknown_from\":null"
        ),
        "{json}"
    );
    assert!(
        json.contains(
            "\"segments_aligned\":3,\"segments_unaligned\":2,\"segments_alignment_unknown\":0,\
             \"segments_retransmitted\":0,\"segments_aligned_percent\":60.0,\
             \"alignment_unknown_from\":null"
        ),
        "{json}"
    );
}

/// A capture that ends inside an FPDU (trimmed): the FPDU still incomplete at its end holds
/// no boundary, so the segment ending there is known not to be aligned.
#[test]
fn segment_alignment_of_a_trimmed_capture() {
    let mut cap = AlignmentCapture::new();
    let b = &cap.bounds[I];
    let last = cap.frame_of(I, b[3]..b[3] + 10);
    cap.frames.truncate(last + 1);
    let report = analyse(cap.frames);
    let text = render_text(&report, false);
    assert_eq!(report.violations(), 0, "{text}");
    let i2r = &only_connection(&report).directions[0];
    assert_eq!(i2r.trailing_octets, 10, "{text}");
    assert_eq!(
        line_after(&text, "I>R"),
        "      TCP data segments 3: 2 aligned with FPDUs, 1 not aligned (66.6 % aligned)"
    );
}

/// A frame the capture lost: the segments beyond the gap are not guessed at but counted as
/// unknown, and the report says from where and why.
#[test]
fn segment_alignment_beyond_a_capture_gap_is_unknown() {
    let mut cap = AlignmentCapture::new();
    let b = cap.bounds[I].clone();
    let lost = cap.frame_of(I, b[5]..b[6] - 3);
    cap.frames.remove(lost);
    renumber(&mut cap.frames);
    let gap_seq = cap.seq_i(b[5]);
    let report = analyse(cap.frames);
    let text = render_text(&report, false);
    assert_eq!(report.violations(), 0, "{text}");
    let i2r = &only_connection(&report).directions[0];
    // Before the gap: 5 aligned and 3 not; the two segments after it unknown.
    assert_eq!(
        (
            i2r.data_segments,
            i2r.aligned_segments,
            i2r.alignment_unknown_segments
        ),
        (8, 5, 2)
    );
    assert_eq!(
        line_after(&text, "I>R"),
        format!(
            "      TCP data segments 10 (3 of them retransmissions): 5 aligned with FPDUs, 3 not aligned (62.5 % aligned), \
             2 unknown (from seq {gap_seq}: a capture gap)"
        )
    );
    let d = json_direction(&render_json(&report, false), "I>R");
    assert_eq!(d["segments_aligned"], 5);
    assert_eq!(d["segments_unaligned"], 3);
    assert_eq!(d["segments_alignment_unknown"], 2);
    assert_eq!(
        d["alignment_unknown_from"],
        serde_json::json!({ "seq": gap_seq, "reason": "capture-gap" })
    );
    // The other direction is whole.
    assert_eq!(
        line_after(&text, "R>I"),
        "      TCP data segments 5: 3 aligned with FPDUs, 2 not aligned (60.0 % aligned)"
    );
}

/// A damaged ULPDU_Length: past the last FPDU that decoded, FPDU boundaries are unknown.
/// A segment starting inside a known FPDU is still unaligned; one starting at the last
/// known boundary, or later, is unknown.
#[test]
fn segment_alignment_after_lost_framing_is_unknown() {
    let mut cap = AlignmentCapture::new();
    let b = cap.bounds[I].clone();
    let first = cap.frame_of(I, b[4]..b[5]);
    let f = &mut cap.frames[first];
    let at = 14 + 20 + 20; // the FPDU's ULPDU_Length, first in the payload
    let len = u16::from_be_bytes([f.data[at], f.data[at + 1]]);
    f.data[at..at + 2].copy_from_slice(&(len - 4).to_be_bytes());
    let seq = cap.seq_i(b[4]);
    let report = analyse(cap.frames);
    let text = render_text(&report, false);
    assert_eq!(kinds(&report)[0], FindingKind::CrcError, "{text}");
    let i2r = &only_connection(&report).directions[0];
    // Judged: b0-b1, b1-b3 and the resent b3-b4 aligned; b3..+10, +10..b4 and b2+5..b4
    // not. Unknown: both copies of b4-b5, and the three segments after.
    assert_eq!(
        (
            i2r.data_segments,
            i2r.aligned_segments,
            i2r.alignment_unknown_segments
        ),
        (6, 3, 5),
        "{text}"
    );
    assert_eq!(
        line_after(&text, "I>R"),
        format!(
            "      TCP data segments 11 (3 of them retransmissions): 3 aligned with FPDUs, 3 not aligned (50.0 % aligned), \
             5 unknown (from seq {seq}: the length chain was lost after a CRC error)"
        )
    );
    let d = json_direction(&render_json(&report, false), "I>R");
    assert_eq!(
        d["alignment_unknown_from"],
        serde_json::json!({ "seq": seq, "reason": "length-chain-lost" })
    );
}

/// A frame cut by the snap length (its octets resent whole later): where that segment ended
/// is unknown, every other segment is judged as before.
#[test]
fn segment_alignment_of_a_cut_frame_is_unknown() {
    let mut cap = AlignmentCapture::new();
    let b = cap.bounds[I].clone();
    let first = cap.frame_of(I, b[4]..b[5]);
    let f = &mut cap.frames[first];
    f.data.truncate(f.data.len() - 5);
    let seq = cap.seq_i(b[5] - 5);
    let report = analyse(cap.frames);
    let text = render_text(&report, false);
    assert_eq!(report.violations(), 0, "{text}");
    let i2r = &only_connection(&report).directions[0];
    assert_eq!(
        (
            i2r.data_segments,
            i2r.aligned_segments,
            i2r.alignment_unknown_segments
        ),
        (10, 5, 1),
        "{text}"
    );
    assert_eq!(
        line_after(&text, "I>R"),
        format!(
            "      TCP data segments 11 (3 of them retransmissions): 5 aligned with FPDUs, 5 not aligned (50.0 % aligned), \
             1 unknown (from seq {seq}: a frame cut by the snap length)"
        )
    );
}

/// Each FPDU in a segment of its own (an MPA-aligned sender): every segment aligned; the
/// same messages cut every 100 octets: few.
#[test]
fn segments_aligned_with_fpdus_are_counted() {
    let aligned = Spec {
        per_fpdu: true,
        mss: 9000,
        ..Spec::default()
    };
    let report = analyse(build(&aligned, &clean_messages()));
    let c = only_connection(&report);
    for d in &c.directions {
        assert!(d.data_segments >= 3, "{d:?}");
        assert_eq!(d.aligned_segments, d.data_segments, "{d:?}");
        assert_eq!(d.alignment_unknown_segments, 0, "{d:?}");
    }
    let text = render_text(&report, false);
    assert!(text.contains("not aligned (100.0 % aligned)"), "{text}");
    let json = render_json(&report, false);
    assert!(json.contains("\"segments_unaligned\":0,"), "{json}");

    let cut = Spec {
        mss: 100,
        ..Spec::default()
    };
    let report = analyse(build(&cut, &clean_messages()));
    let c = only_connection(&report);
    for d in &c.directions {
        assert!(d.data_segments > 10, "{d:?}");
        assert!(d.aligned_segments < d.data_segments / 2, "{d:?}");
    }
}
