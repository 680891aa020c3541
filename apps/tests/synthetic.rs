//! Synthetic captures built with proto's own encoders (MPA frames, segment headers, the
//! framer with markers and CRC) and etherparse: what the siw captures cannot show (markers,
//! Terminates, sequence wrap, reordering and loss, link types other than Ethernet, and each
//! kind of protocol violation iwdump checks for).

use std::net::SocketAddr;
use std::time::Duration;

use etherparse::PacketBuilder;
use warpcore_apps::analysis::{Direction, FindingKind, IwarpConnection};
use warpcore_apps::capture::{Capture, CaptureFormat, Frame, LinkType};
use warpcore_apps::report::{analyse_capture, render_json, render_text, CaptureReport};
use warpcore_proto::mpa::framer::{Framer, FramerConfig};
use warpcore_proto::wire::ddp::DdpBuffer;
use warpcore_proto::wire::mpa::{EnhancedData, FrameKind, FrameRepr, RtrTypes};
use warpcore_proto::wire::rdmap::{CopiedDdpHeader, Opcode, ReadRequestRepr, TerminateRepr};
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

/// Builds the capture: handshake (SYN from the TCP client), MPA Request and Reply, then
/// every message framed by proto's framer and cut into TCP segments of at most `mss`.
fn build(spec: &Spec, messages: &[Msg]) -> Vec<Frame> {
    let ports = [40000u16, 5000u16];
    let client = if spec.initiator_is_client { I } else { R };
    let mut next_seq = [spec.isn[I].wrapping_add(1), spec.isn[R].wrapping_add(1)];
    let mut frames = Vec::new();
    let push = |frames: &mut Vec<Frame>, from: usize, seq: u32, syn: bool, payload: &[u8]| {
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
    };
    push(&mut frames, client, spec.isn[client], true, &[]);
    push(&mut frames, 1 - client, spec.isn[1 - client], true, &[]);
    let emit = |frames: &mut Vec<Frame>, next_seq: &mut [u32; 2], dir: usize, bytes: &[u8]| {
        for chunk in bytes.chunks(spec.mss) {
            push(frames, dir, next_seq[dir], false, chunk);
            next_seq[dir] = next_seq[dir].wrapping_add(chunk.len() as u32);
        }
    };
    for (dir, kind) in [(I, FrameKind::Request), (R, FrameKind::Reply)] {
        let frame = FrameRepr {
            kind,
            markers: spec.markers[dir],
            crc: spec.crc,
            reject: false,
            res: 0,
            rev: 2,
            enhanced: Some(spec.enhanced[dir]),
            private_data: b"synthetic",
        };
        emit(&mut frames, &mut next_seq, dir, &frame.to_vec());
    }
    // The initiator sends markers if the Reply asked for them, the responder if the Request did.
    let mut framers = [
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
    ];
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

/// iwdump counts the segments that start with an FPDU and end with one (what an MPA-aligned
/// sender sends, mpa-08 §4 item 4): all of them when each FPDU has its own segment, not
/// those of a stream cut every 100 octets.
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
    }
    let text = render_text(&report, false);
    assert!(text.contains("aligned with FPDUs"), "{text}");
    assert!(text.contains("(100.0 %)"), "{text}");
    let json = render_json(&report, false);
    assert!(json.contains("\"aligned_segments\""), "{json}");

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
