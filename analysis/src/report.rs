//! Whole-capture analysis and its two renderings: a human summary (optionally one line per
//! DDP segment) and JSON.

use std::fmt::Write as _;

use serde_json::{json, Value};
use std::time::Duration;

use warpcore_proto::wire::mpa::{EnhancedData, RtrTypes};

use crate::analysis::{
    analyse_connection, Addressing, ConnectionReport, CrcCheck, Direction, DirectionReport,
    Finding, IwarpConnection, OtherConnection, Segment, StartupFrame, TerminateInfo,
};
use crate::capture::{Capture, CaptureFormat};
use crate::tcp::{reassemble, NotTcp, TcpCapture};

/// The analysis of one capture file.
#[derive(Clone, Debug)]
pub struct CaptureReport {
    /// The file name as given.
    pub name: String,
    /// Container format.
    pub format: CaptureFormat,
    /// Frames in the file.
    pub frames: usize,
    /// Frames that were not decodable TCP.
    pub non_tcp_frames: u64,
    /// Capture time of the first frame (times in the report are relative to it).
    pub start: Duration,
    /// Problems with the capture that leave part of it undecoded: a damaged container
    /// (from [`Capture::warnings`]), then frames whose TCP data the analysis cannot use
    /// because of how they were captured (a link type that is not decoded, IP fragments,
    /// frames cut inside their headers), one line per reason with the frame count.
    pub warnings: Vec<String>,
    /// Whether frames of the file were left out ([`Capture::incomplete`]): the report
    /// covers part of what the file recorded.
    pub incomplete: bool,
    /// One entry per TCP connection, in order of appearance.
    pub connections: Vec<ConnectionReport>,
}

impl CaptureReport {
    /// Every protocol violation in the capture.
    pub fn findings(&self) -> impl Iterator<Item = &Finding> {
        self.connections.iter().flat_map(|c| match c {
            ConnectionReport::Iwarp(i) => i.findings.iter().collect::<Vec<_>>(),
            ConnectionReport::Other(o) => o.finding.iter().collect(),
        })
    }

    /// The number of protocol violations (what decides `iwdump`'s exit status).
    pub fn violations(&self) -> usize {
        self.findings().count()
    }

    /// The iWARP connections.
    pub fn iwarp(&self) -> impl Iterator<Item = &IwarpConnection> {
        self.connections.iter().filter_map(|c| match c {
            ConnectionReport::Iwarp(i) => Some(&**i),
            ConnectionReport::Other(_) => None,
        })
    }
}

/// Reassembles and analyses every connection of a capture.
pub fn analyse_capture(name: &str, capture: &Capture) -> CaptureReport {
    analyse_reassembled(name, capture, &reassemble(capture))
}

/// [`analyse_capture`] of a capture whose TCP connections `tcp` were already reassembled
/// (with [`reassemble`] of the same `capture`): for a caller that looks at the streams
/// too, without reassembling a large capture twice.
pub fn analyse_reassembled(name: &str, capture: &Capture, tcp: &TcpCapture) -> CaptureReport {
    let mut warnings = capture.warnings.clone();
    warnings.extend(
        tcp.undecoded
            .iter()
            .map(|(&why, &frames)| undecoded_warning(why, frames)),
    );
    CaptureReport {
        name: name.to_string(),
        format: capture.format,
        frames: capture.frames.len(),
        non_tcp_frames: tcp.non_tcp_frames,
        start: capture
            .frames
            .first()
            .map_or(Duration::ZERO, |f| f.timestamp),
        warnings,
        incomplete: capture.incomplete,
        connections: tcp.connections.iter().map(analyse_connection).collect(),
    }
}

/// What a count of frames that yielded no usable TCP segment means for the analysis.
fn undecoded_warning(why: NotTcp, frames: u64) -> String {
    let n = if frames == 1 {
        "1 frame".to_string()
    } else {
        format!("{frames} frames")
    };
    match why {
        NotTcp::LinkType(link) => format!(
            "link type {link} is not decoded (Ethernet, Linux cooked SLL and SLL2, raw IP and BSD loopback are): {n} not analysed"
        ),
        NotTcp::Fragment => format!(
            "IP fragments are not reassembled: the TCP data of {n} is missing (capture gaps)"
        ),
        NotTcp::Truncated => format!(
            "frames cut inside their link, IP or TCP header (snap length too short, or damaged): the TCP data of {n} is missing (capture gaps)"
        ),
        NotTcp::Other => format!("{n} not TCP"),
    }
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

fn rtr_list(t: RtrTypes) -> String {
    let names: Vec<&str> = t
        .iter()
        .map(|r| match r {
            warpcore_proto::wire::mpa::RtrType::Send => "Send",
            warpcore_proto::wire::mpa::RtrType::Write => "Write",
            warpcore_proto::wire::mpa::RtrType::Read => "Read",
        })
        .collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join("+")
    }
}

fn ird_ord(v: u16) -> String {
    if v == warpcore_proto::wire::mpa::IRD_ORD_NO_NEGOTIATION {
        "0x3FFF (no negotiation)".into()
    } else {
        v.to_string()
    }
}

fn describe_frame(f: &StartupFrame) -> String {
    let mut s = format!(
        "frame {}: Rev {}, M={} C={} R={}",
        f.frame,
        f.rev,
        u8::from(f.markers),
        u8::from(f.crc),
        u8::from(f.reject)
    );
    match f.enhanced {
        Some(EnhancedData {
            peer_to_peer,
            rtr,
            ird,
            ord,
        }) => {
            let _ = write!(
                s,
                ", IRD {} ORD {}, P2P {}, RTR {}",
                ird_ord(ird),
                ird_ord(ord),
                if peer_to_peer { "yes" } else { "no" },
                rtr_list(rtr)
            );
        }
        None => s.push_str(", no enhanced data"),
    }
    let _ = write!(s, ", {} octets of ULP private data", f.ulp_private_data_len);
    s
}

fn rel(t: Duration, start: Duration) -> f64 {
    t.saturating_sub(start).as_secs_f64()
}

fn describe_terminate(t: &TerminateInfo) -> String {
    format!(
        "{} (M={} D={} R={})",
        t.report,
        u8::from(t.flags.0),
        u8::from(t.flags.1),
        u8::from(t.flags.2)
    )
}

/// One line per segment for `-v`.
pub fn segment_line(s: &Segment, start: Duration) -> String {
    let op = s.opcode.map_or_else(
        || format!("opcode {:#x}", s.opcode_raw),
        |o| o.name().to_string(),
    );
    let mut line = format!(
        "{:>7} {:>11.6} {} {:<26}",
        s.frame,
        rel(s.timestamp, start),
        s.direction,
        op
    );
    match s.addressing {
        Addressing::Tagged { stag, to } => {
            let _ = write!(line, " STag {stag:#010x} TO {to:#x}");
        }
        Addressing::Untagged {
            qn,
            msn,
            mo,
            inv_stag,
        } => {
            let _ = write!(line, " QN {qn} MSN {msn} MO {mo}");
            if inv_stag != 0 {
                let _ = write!(line, " InvSTag {inv_stag:#010x}");
            }
        }
    }
    let _ = write!(line, " len {} L={}", s.payload_len, u8::from(s.last));
    if let Some(rr) = s.read_request {
        let _ = write!(
            line,
            " [sink {:#010x}@{:#x} size {} src {:#010x}@{:#x}]",
            rr.sink_stag, rr.sink_to, rr.read_size, rr.src_stag, rr.src_to
        );
    }
    if let Some(t) = s.terminate {
        let _ = write!(line, " [{}]", describe_terminate(&t));
    }
    match s.crc {
        CrcCheck::Good => line.push_str(" crc ok"),
        CrcCheck::Bad => line.push_str(" CRC BAD"),
        CrcCheck::NotChecked => {}
    }
    line
}

/// The human-readable report: a summary per connection, and with `verbose` one line per
/// DDP segment.
pub fn render_text(r: &CaptureReport, verbose: bool) -> String {
    let mut o = String::new();
    let iwarp = r.iwarp().count();
    let _ = writeln!(
        o,
        "{}: {}, {} frames, {} TCP connection(s), {} iWARP",
        r.name,
        match r.format {
            CaptureFormat::Pcap => "pcap",
            CaptureFormat::PcapNg => "pcapng",
        },
        r.frames,
        r.connections.len(),
        iwarp
    );
    for w in &r.warnings {
        let _ = writeln!(o, "  warning: {w}");
    }
    for (n, c) in r.connections.iter().enumerate() {
        match c {
            ConnectionReport::Other(oc) => render_other(&mut o, n + 1, oc),
            ConnectionReport::Iwarp(ic) => render_iwarp(&mut o, n + 1, ic, r.start, verbose),
        }
    }
    let v = r.violations();
    let _ = writeln!(
        o,
        "{}: {} protocol violation{}",
        r.name,
        if v == 0 {
            "no".to_string()
        } else {
            v.to_string()
        },
        if v == 1 { "" } else { "s" }
    );
    o
}

fn render_other(o: &mut String, n: usize, c: &OtherConnection) {
    let _ = writeln!(
        o,
        "connection {n}: {} -> {} (TCP, not decoded as iWARP: {}; {} / {} octets)",
        c.client, c.server, c.reason, c.to_server_octets, c.to_client_octets
    );
    if let Some(f) = &c.finding {
        let _ = writeln!(o, "  VIOLATION frame {}: {}", f.frame, f.detail);
    }
}

/// The segment alignment line of one direction, e.g. "TCP data segments 925: 915 aligned
/// with FPDUs, 10 not aligned (98.9 % aligned)", with " (R of them retransmissions)" after
/// the total when some segments repeat octets sent before, and ", N unknown (from seq S:
/// why)" when some could not be judged (what is counted: [`crate::analysis::SegmentAlignment`]).
/// `None` when the direction has no FPDU-mode data segment.
pub fn alignment_line(d: &DirectionReport) -> Option<String> {
    let unknown = d.alignment_unknown_segments;
    if d.data_segments + unknown == 0 && d.alignment_unknown_from.is_none() {
        return None;
    }
    let repeats = match d.retransmitted_segments {
        0 => String::new(),
        1 => " (1 of them a retransmission)".to_string(),
        n => format!(" ({n} of them retransmissions)"),
    };
    let mut line = format!(
        "TCP data segments {}{repeats}: {} aligned with FPDUs, {} not aligned ({})",
        d.data_segments + unknown,
        d.aligned_segments,
        d.unaligned_segments(),
        d.aligned_percent()
            .map_or("share unknown".to_string(), |p| format!("{p:.1} % aligned"))
    );
    if let Some(u) = d.alignment_unknown_from {
        let _ = write!(
            line,
            ", {unknown} unknown (from seq {}: {})",
            u.seq,
            u.reason.description()
        );
    }
    Some(line)
}

fn render_iwarp(o: &mut String, n: usize, c: &IwarpConnection, start: Duration, verbose: bool) {
    let syn = match c.initiator_sent_syn {
        Some(true) => ", initiator opened TCP",
        Some(false) => ", responder opened TCP",
        None => ", TCP handshake not captured",
    };
    let _ = writeln!(
        o,
        "connection {n}: iWARP {} (initiator) <-> {} (responder){syn}; TCP close I>R {} R>I {}",
        c.initiator,
        c.responder,
        c.closed[0].label(),
        c.closed[1].label()
    );
    let _ = writeln!(o, "  MPA Request {}", describe_frame(&c.request));
    match &c.reply {
        Some(r) => {
            let _ = writeln!(o, "  MPA Reply   {}", describe_frame(r));
        }
        None => {
            let _ = writeln!(o, "  MPA Reply   not captured");
        }
    }
    if let (Some(ng), Some(reply)) = (&c.negotiated, &c.reply) {
        let ird_ord_of = |f: &StartupFrame| {
            f.enhanced.map_or("-".to_string(), |e| {
                format!("{}/{}", ird_ord(e.ird), ird_ord(e.ord))
            })
        };
        let rtr = if ng.peer_to_peer {
            format!(
                "P2P yes, RTR offered {} supported {} sent {}",
                rtr_list(ng.rtr_offered),
                rtr_list(ng.rtr_supported),
                ng.rtr_sent.map_or("none", |r| match r {
                    warpcore_proto::wire::mpa::RtrType::Send => "Send",
                    warpcore_proto::wire::mpa::RtrType::Write => "Write",
                    warpcore_proto::wire::mpa::RtrType::Read => "Read",
                })
            )
        } else {
            "P2P no".to_string()
        };
        let _ = writeln!(
            o,
            "  negotiated: Rev I>R {} R>I {}; CRC {}; markers I>R {} R>I {}; IRD/ORD initiator {} responder {}; {rtr}",
            c.request.rev,
            reply.rev,
            on_off(ng.crc),
            on_off(ng.markers[0]),
            on_off(ng.markers[1]),
            ird_ord_of(&c.request),
            ird_ord_of(reply),
        );
    }
    for dir in Direction::BOTH {
        let d = &c.directions[dir.index()];
        // Every whole FPDU, whether its segment decoded or not.
        let fpdus = d.decoded_fpdus() + d.undecoded_fpdus;
        let undecoded = match d.undecoded_fpdus {
            0 => String::new(),
            n => format!(" ({n} not decoded)"),
        };
        let _ = writeln!(
            o,
            "  {dir}: {fpdus} FPDUs in {} octets{undecoded}; CRC errors {}, marker errors {}",
            d.fpdu_stream_octets, d.crc_errors, d.marker_errors
        );
        if let Some(line) = alignment_line(d) {
            let _ = writeln!(o, "      {line}");
        }
        for (op, s) in &d.opcodes {
            let _ = writeln!(
                o,
                "      {:<26} {:>6} segments {:>6} messages {:>10} payload octets",
                op.name(),
                s.segments,
                s.messages,
                s.payload_octets
            );
        }
        if d.unknown_opcode_segments > 0 {
            let _ = writeln!(
                o,
                "      {:<26} {:>6} segments",
                "undefined opcode", d.unknown_opcode_segments
            );
        }
        for (frame, t) in &d.terminates {
            let _ = writeln!(
                o,
                "      Terminate in frame {frame}: {}",
                describe_terminate(t)
            );
        }
    }
    for note in &c.notes {
        let _ = writeln!(o, "  note: {note}");
    }
    for f in &c.findings {
        let _ = writeln!(
            o,
            "  VIOLATION [{}] frame {} {}: {}",
            f.kind.name(),
            f.frame,
            f.direction.map_or("", |d| d.label()),
            f.detail
        );
    }
    if verbose {
        let _ = writeln!(
            o,
            "  {:>7} {:>11} dir {:<26} fields",
            "frame", "time", "opcode"
        );
        for s in &c.segments {
            let _ = writeln!(o, "  {}", segment_line(s, start));
        }
    }
}

fn json_frame(f: &StartupFrame) -> Value {
    let mut v = json!({
        "frame": f.frame,
        "rev": f.rev,
        "markers": f.markers,
        "crc": f.crc,
        "reject": f.reject,
        "ulp_private_data_len": f.ulp_private_data_len,
    });
    if let Some(e) = f.enhanced {
        v["ird"] = json!(e.ird);
        v["ord"] = json!(e.ord);
        v["peer_to_peer"] = json!(e.peer_to_peer);
        v["rtr"] = json!(rtr_list(e.rtr));
    }
    v
}

fn json_finding(f: &Finding) -> Value {
    let mut v = json!({ "kind": f.kind.name(), "frame": f.frame });
    if let Some(d) = f.direction {
        v["direction"] = json!(d.label());
    }
    v["detail"] = json!(f.detail);
    v
}

fn json_iwarp(ic: &IwarpConnection, start: Duration, verbose: bool) -> Value {
    let mut v = json!({
        "type": "iwarp",
        "initiator": ic.initiator.to_string(),
        "responder": ic.responder.to_string(),
        "close_i2r": ic.closed[0].label(),
        "close_r2i": ic.closed[1].label(),
        "request": json_frame(&ic.request),
    });
    if let Some(rep) = &ic.reply {
        v["reply"] = json_frame(rep);
    }
    if let Some(ng) = &ic.negotiated {
        v["negotiated"] = json!({
            "crc": ng.crc,
            "markers_i2r": ng.markers[0],
            "markers_r2i": ng.markers[1],
            "peer_to_peer": ng.peer_to_peer,
            "rtr_sent": ng.rtr_sent.map_or("none".into(), |r| format!("{r:?}")),
        });
    }
    let mut dirs = serde_json::Map::new();
    for dir in Direction::BOTH {
        let d = &ic.directions[dir.index()];
        let opcodes: serde_json::Map<String, Value> = d
            .opcodes
            .iter()
            .map(|(op, s)| {
                (
                    op.name().to_string(),
                    json!({
                        "segments": s.segments,
                        "messages": s.messages,
                        "payload_octets": s.payload_octets,
                    }),
                )
            })
            .collect();
        let terminates: Vec<Value> = d
            .terminates
            .iter()
            .map(|(frame, t)| {
                json!({
                    "frame": frame,
                    "layer": t.code.layer(),
                    "etype": t.code.etype(),
                    "code": t.code.code(),
                    "reason": t.code.description(),
                    "report": t.report.to_string(),
                })
            })
            .collect();
        dirs.insert(
            dir.label().to_string(),
            json!({
                "fpdu_stream_octets": d.fpdu_stream_octets,
                "fpdus": d.decoded_fpdus() + d.undecoded_fpdus,
                "fpdus_not_decoded": d.undecoded_fpdus,
                "malformed_segments": d.malformed_segments,
                "crc_errors": d.crc_errors,
                "marker_errors": d.marker_errors,
                "segments_aligned": d.aligned_segments,
                "segments_unaligned": d.unaligned_segments(),
                "segments_alignment_unknown": d.alignment_unknown_segments,
                "segments_retransmitted": d.retransmitted_segments,
                "segments_aligned_percent": d.aligned_percent(),
                "alignment_unknown_from": d.alignment_unknown_from.map(|u| json!({
                    "seq": u.seq,
                    "reason": u.reason.name(),
                })),
                "opcodes": opcodes,
                "terminates": terminates,
            }),
        );
    }
    v["directions"] = Value::Object(dirs);
    v["notes"] = json!(ic.notes);
    v["findings"] = Value::Array(ic.findings.iter().map(json_finding).collect());
    if verbose {
        let segments: Vec<Value> = ic
            .segments
            .iter()
            .map(|s| {
                let mut seg = json!({
                    "frame": s.frame,
                    // Seconds since the first frame, to the microsecond.
                    "time": (rel(s.timestamp, start) * 1e6).round() / 1e6,
                    "direction": s.direction.label(),
                    "opcode": s.opcode.map_or_else(
                        || format!("{:#x}", s.opcode_raw),
                        |o| o.name().to_string(),
                    ),
                });
                match s.addressing {
                    Addressing::Tagged { stag, to } => {
                        // Hex strings: a 64-bit TO does not fit a JSON number exactly
                        // (2^53), and STags read better in hex.
                        seg["stag"] = json!(format!("{stag:#010x}"));
                        seg["to"] = json!(format!("{to:#018x}"));
                    }
                    Addressing::Untagged { qn, msn, mo, .. } => {
                        seg["qn"] = json!(qn);
                        seg["msn"] = json!(msn);
                        seg["mo"] = json!(mo);
                    }
                }
                seg["ulpdu_len"] = json!(s.ulpdu_len);
                seg["payload_len"] = json!(s.payload_len);
                seg["last"] = json!(s.last);
                seg
            })
            .collect();
        v["segments"] = Value::Array(segments);
    }
    v
}

/// The report as one JSON object. With `verbose`, every segment is included.
pub fn render_json(r: &CaptureReport, verbose: bool) -> String {
    let connections: Vec<Value> = r
        .connections
        .iter()
        .map(|c| match c {
            ConnectionReport::Other(oc) => json!({
                "type": "tcp",
                "client": oc.client.to_string(),
                "server": oc.server.to_string(),
                "reason": oc.reason,
                "findings": oc.finding.iter().map(json_finding).collect::<Vec<_>>(),
            }),
            ConnectionReport::Iwarp(ic) => json_iwarp(ic, r.start, verbose),
        })
        .collect();
    json!({
        "file": r.name,
        "format": match r.format {
            CaptureFormat::Pcap => "pcap",
            CaptureFormat::PcapNg => "pcapng",
        },
        "frames": r.frames,
        "non_tcp_frames": r.non_tcp_frames,
        "violations": r.violations(),
        "warnings": r.warnings,
        "incomplete": r.incomplete,
        "connections": connections,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::{Frame, LinkType};
    use warpcore_proto::wire::mpa::{FrameKind, FrameRepr};

    /// An MPA Request or Reply with CRC, no markers, MPA revision `rev` and `private_data`.
    fn startup_frame(kind: FrameKind, rev: u8, private_data: &[u8]) -> Vec<u8> {
        FrameRepr {
            kind,
            markers: false,
            crc: true,
            reject: false,
            res: 0,
            rev,
            enhanced: None,
            private_data,
        }
        .to_vec()
    }

    fn tcp_frame(number: u64, payload: &[u8]) -> Frame {
        segment(number, 0, 1, false, payload)
    }

    /// A TCP segment from 10.0.0.1:40000 (`from` 0) or 10.0.0.2:5000 (`from` 1), with ACK
    /// but on the client's SYN.
    fn segment(number: u64, from: usize, seq: u32, syn: bool, payload: &[u8]) -> Frame {
        let flags = match (syn, from) {
            (true, 0) => "S",
            (true, _) => "SA",
            (false, _) => "A",
        };
        crate::tcp::tests::frame(number, from, seq, flags, payload)
    }

    /// Frames whose TCP data is lost to the analysis because of how they were captured (a
    /// link type that is not decoded, IP fragments, a snap length that cuts the headers) are
    /// named with their count, in the text and the JSON, not silently dropped (a capture of
    /// an unsupported link type otherwise reads as "0 TCP connections, no violations").
    #[test]
    fn frames_lost_to_the_capture_are_named() {
        let mut frames = Vec::new();
        for n in 1..=2 {
            frames.push(Frame {
                link: LinkType::Other(147),
                ..tcp_frame(n, b"data")
            });
        }
        // An IPv4 first fragment (MF set) and a later one (offset 185 * 8).
        let mut first = tcp_frame(3, &[7; 64]);
        first.data[20] = 0x20;
        let mut later = tcp_frame(4, &[7; 64]);
        later.data[20] = 0x00;
        later.data[21] = 185;
        frames.extend([first, later]);
        // Cut inside the TCP header (Ethernet 14 + IPv4 20 + 10 of the TCP header's 20).
        let mut cut = tcp_frame(5, &[1; 100]);
        cut.data.truncate(44);
        frames.push(cut);
        // An ARP request is simply not TCP: no warning.
        let mut arp = tcp_frame(6, b"");
        arp.data[12..14].copy_from_slice(&[0x08, 0x06]);
        frames.push(arp);
        frames.push(tcp_frame(7, b"ok"));
        let capture = Capture {
            format: CaptureFormat::Pcap,
            frames,
            warnings: Vec::new(),
            incomplete: false,
        };
        let r = analyse_capture("lost", &capture);
        assert_eq!(r.non_tcp_frames, 6);
        assert_eq!(r.warnings.len(), 3, "{:?}", r.warnings);
        let text = render_text(&r, false);
        for want in [
            "  warning: link type 147 is not decoded (Ethernet, Linux cooked SLL and SLL2, raw IP and BSD loopback are): 2 frames not analysed",
            "  warning: IP fragments are not reassembled: the TCP data of 2 frames is missing",
            "  warning: frames cut inside their link, IP or TCP header (snap length too short, or damaged): the TCP data of 1 frame is missing",
        ] {
            assert!(text.contains(want), "{want:?} in\n{text}");
        }
        let json: Value = serde_json::from_str(&render_json(&r, false)).unwrap();
        assert_eq!(json["non_tcp_frames"], 6);
        assert_eq!(json["warnings"].as_array().unwrap().len(), 3);
    }

    fn other_reason(frames: Vec<Frame>) -> String {
        let capture = Capture {
            format: CaptureFormat::Pcap,
            frames,
            warnings: Vec::new(),
            incomplete: false,
        };
        let r = analyse_capture("start", &capture);
        match &r.connections[..] {
            [ConnectionReport::Other(o)] => o.reason.clone(),
            _ => panic!("{}", render_text(&r, true)),
        }
    }

    /// A connection whose stream start the capture does not hold (it began after the
    /// handshake, or lost the first data segment) may well be iWARP: it is not called "no
    /// MPA Request at the start" (which reads as "not iWARP"), only one whose start was
    /// captured is.
    #[test]
    fn a_missed_stream_start_is_not_called_not_iwarp() {
        let handshake = || vec![segment(1, 0, 99, true, b""), segment(2, 1, 499, true, b"")];
        // Whole: not MPA.
        let mut whole = handshake();
        whole.push(segment(3, 0, 100, false, b"GET / HTTP/1.1\r\n"));
        whole.push(segment(4, 1, 500, false, b"HTTP/1.1 200 OK\r\n"));
        assert_eq!(other_reason(whole), "no MPA Request at the start");
        let missed = "the capture misses the start of its TCP stream";
        // Begun mid-connection, mid-FPDU: no SYN.
        let late = vec![
            segment(1, 0, 7_000, false, &[0x12; 200]),
            segment(2, 1, 9_000, false, &[0x34; 60]),
        ];
        assert!(other_reason(late).starts_with(missed));
        // The SYNs were captured, the client's first data segment was not.
        let mut lost = handshake();
        lost.push(segment(3, 0, 180, false, &[0x12; 200]));
        assert!(other_reason(lost).starts_with(missed));
    }

    /// A header-only capture (`tcpdump -s 66` and the like: every data segment cut to its
    /// headers) holds none of the MPA Request: the connection is not called "no MPA
    /// Request at the start", which reads as "not iWARP". Before, the cut segments counted
    /// as pure ACKs and the empty streams looked whole.
    #[test]
    fn header_only_capture_is_not_called_not_iwarp() {
        let request = startup_frame(FrameKind::Request, 1, b"");
        let reply = startup_frame(FrameKind::Reply, 1, b"");
        let cut = |mut f: Frame| {
            f.data.truncate(54); // Ethernet, IPv4 and TCP headers
            f
        };
        let frames = vec![
            segment(1, 0, 99, true, b""),
            segment(2, 1, 499, true, b""),
            cut(segment(3, 0, 100, false, &request)),
            cut(segment(4, 1, 500, false, &reply)),
        ];
        let reason = other_reason(frames);
        assert!(
            reason.starts_with("the capture misses the start of its TCP stream"),
            "{reason}"
        );
    }

    /// A startup frame the capture lost part of, with more of the stream after the hole, is
    /// not said to be where "the capture ends".
    #[test]
    fn a_gap_inside_a_startup_frame_is_named_as_a_gap() {
        let frame = |kind| startup_frame(kind, 1, b"private");
        let (request, reply) = (frame(FrameKind::Request), frame(FrameKind::Reply));
        let n = request.len() as u32;
        let handshake = || vec![segment(1, 0, 99, true, b""), segment(2, 1, 499, true, b"")];
        // The Request's second half lost, the initiator's first FPDU captured.
        let mut frames = handshake();
        frames.push(segment(3, 0, 100, false, &request[..10]));
        frames.push(segment(4, 0, 100 + n, false, &[0; 24]));
        let reason = other_reason(frames);
        assert_eq!(
            reason,
            "the capture misses octets from seq 110 (a gap, 24 octets after it) inside the MPA Request"
        );
        // The same for the Reply (a note of the iWARP connection).
        let mut frames = handshake();
        frames.push(segment(3, 0, 100, false, &request));
        frames.push(segment(4, 1, 500, false, &reply[..10]));
        frames.push(segment(5, 1, 500 + n, false, &[0; 24]));
        let capture = Capture {
            format: CaptureFormat::Pcap,
            frames,
            warnings: Vec::new(),
            incomplete: false,
        };
        let r = analyse_capture("gap", &capture);
        let c = r.iwarp().next().expect("an iWARP connection");
        assert!(
            c.notes.iter().any(|n| n
                == "the capture misses octets from seq 510 (a gap, 24 octets after it) inside the MPA Reply"),
            "{:?}",
            c.notes
        );
        // Where the capture does end inside it, it says so.
        let mut frames = handshake();
        frames.push(segment(3, 0, 100, false, &request[..10]));
        assert_eq!(
            other_reason(frames),
            "the capture ends inside the MPA Request"
        );
    }

    /// A Request proto's initiator cannot be configured from (Rev 0, an RDMAC-era peer, or
    /// a revision above 2): the Reply is not judged, and a note says so instead of the check
    /// passing in silence.
    #[test]
    fn a_reply_that_cannot_be_judged_says_so() {
        let frame = |kind, rev| startup_frame(kind, rev, b"");
        for (rev, judged) in [(0, false), (1, true), (3, false)] {
            let frames = vec![
                segment(1, 0, 99, true, b""),
                segment(2, 1, 499, true, b""),
                segment(3, 0, 100, false, &frame(FrameKind::Request, rev)),
                segment(4, 1, 500, false, &frame(FrameKind::Reply, 1)),
            ];
            let capture = Capture {
                format: CaptureFormat::Pcap,
                frames,
                warnings: Vec::new(),
                incomplete: false,
            };
            let r = analyse_capture("rev", &capture);
            let text = render_text(&r, false);
            let c = r.iwarp().next().expect("an iWARP connection");
            let note = c
                .notes
                .iter()
                .any(|n| n.starts_with("the MPA Reply is not judged against the Request"));
            assert_eq!(note, !judged, "Rev {rev}:\n{text}");
        }
    }

    /// A retransmission with other octets than the first copy is named in a note (which
    /// frame, which sequence number): the decoding holds one copy, the receiver may have
    /// taken the other.
    #[test]
    fn conflicting_retransmission_is_named() {
        let frame = |kind| startup_frame(kind, 1, b"pd");
        let request = frame(FrameKind::Request);
        let mut resent = request.clone();
        *resent.last_mut().unwrap() ^= 0xFF;
        let n = request.len() as u32;
        let frames = vec![
            segment(1, 0, 99, true, b""),
            segment(2, 1, 499, true, b""),
            segment(3, 0, 100, false, &request),
            segment(4, 0, 100, false, &request),
            segment(5, 0, 100, false, &resent),
            segment(6, 1, 500, false, &frame(FrameKind::Reply)),
        ];
        let capture = Capture {
            format: CaptureFormat::Pcap,
            frames,
            warnings: Vec::new(),
            incomplete: false,
        };
        let r = analyse_capture("conflict", &capture);
        let text = render_text(&r, false);
        let want = format!(
            "  note: I>R: 1 TCP segment(s) carry octets that differ from an earlier copy of the same sequence numbers (first in frame 5 at seq {})",
            100 + n - 1
        );
        assert!(text.contains(&want), "{want}\n{text}");
    }

    /// The Request was captured, the responder's SYN-ACK and MPA Reply were not (a capture
    /// that dropped frames), and its stream starts with an FPDU: that is a note about the
    /// capture, not a violation of the responder's ("does not start with an MPA Reply"),
    /// and with the Reply lost after a captured SYN-ACK the note does not claim that the
    /// connection never reached FPDU mode.
    #[test]
    fn a_reply_the_capture_missed_is_no_violation() {
        let request = startup_frame(FrameKind::Request, 1, b"");
        let fpdu = [0u8; 28]; // bytes after the (lost) Reply
        let reply_len = 20;
        let missed = "the capture misses the start of the responder's stream";
        for synack in [false, true] {
            let mut frames = vec![segment(1, 0, 99, true, b"")];
            if synack {
                frames.push(segment(2, 1, 499, true, b""));
            }
            frames.push(segment(3, 0, 100, false, &request));
            frames.push(segment(4, 1, 500 + reply_len, false, &fpdu));
            let capture = Capture {
                format: CaptureFormat::Pcap,
                frames,
                warnings: Vec::new(),
                incomplete: false,
            };
            let r = analyse_capture("lost-reply", &capture);
            let text = render_text(&r, false);
            assert_eq!(r.violations(), 0, "{text}");
            let c = r.iwarp().next().expect("an iWARP connection");
            assert!(c.notes.iter().any(|n| n.starts_with(missed)), "{text}");
            assert!(
                !c.notes
                    .iter()
                    .any(|n| n.contains("never reached FPDU mode")),
                "{text}"
            );
        }
    }
}
