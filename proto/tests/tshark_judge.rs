//! An independent judge of the octets we put on the wire: Wireshark's iWARP dissectors.
//!
//! The test builds synthetic TCP conversations (Ethernet, IPv4 and TCP headers with consistent
//! sequence numbers) whose payload is produced only by our own code — MPA Request/Reply frames
//! (`wire::mpa`), DDP segmentation (`ddp::DdpSender`), RDMAP headers (`wire::segment`,
//! `rdmap::emit_terminate`) and the MPA framer (`mpa::framer`) — writes them to a pcap, and has
//! `tshark` dissect it. It covers MPA Rev 1 and Rev 2 Request/Reply, every RDMAP opcode
//! 0x0-0xB, CRC on, and markers on and off, and requires:
//! - zero malformed packets and zero expert errors;
//! - every FPDU we framed dissected as an FPDU, with its CRC checked as good;
//! - every opcode present in the dissection (tshark 4.0 knows 0x0-0x7 and 0xA/0xB by name;
//!   0x8/0x9, Immediate Data, are dissected as opcode values without a name);
//! - every marker we inserted recognised, with the FPDUPTR we computed.
//!
//! `rpcordma` is disabled: its heuristic claims plain Send payloads and reports them as
//! malformed RPC (see `interop/pcaps/README.md`).
//!
//! If tshark is missing the test fails when `WARPCORE_REQUIRE_TSHARK` is set (as
//! `scripts/test.sh` does) and is skipped with a message otherwise.

#[path = "support/capture.rs"]
mod capture;

use std::collections::{BTreeMap, BTreeSet};

use capture::{Conversation, Dir};
use warpcore_proto::ddp::DdpSender;
use warpcore_proto::mpa::framer::{Framer, FramerConfig};
use warpcore_proto::rdmap::{emit_terminate, Offending};
use warpcore_proto::wire::ddp::DdpBuffer;
use warpcore_proto::wire::fpdu::mulpdu;
use warpcore_proto::wire::mpa::{
    EnhancedData, Frame, FrameKind, FrameRepr, RtrTypes, IRD_ORD_NO_NEGOTIATION,
};
use warpcore_proto::wire::rdmap::{
    AtomicRequestRepr, AtomicResponseRepr, Control, ImmediateDataRepr, Opcode, ReadRequestRepr,
};
use warpcore_proto::wire::segment::{RdmapHeader, SegmentRepr};
use warpcore_proto::{DdpError, ProtocolError, RdmapError};

/// TCP payload per segment: a 1500-octet MTU with 20-octet IPv4 and TCP headers.
const MSS: usize = 1460;

/// One direction of an MPA connection in full operation.
struct Sender {
    dir: Dir,
    framer: Framer,
    ddp: DdpSender,
    mulpdu: usize,
}

/// What we put on the wire, to compare with what tshark saw.
#[derive(Default, Debug)]
struct Expect {
    fpdus: usize,
    markers: usize,
    /// FPDUPTR of every marker we emitted, in stream order per conversation.
    opcodes: BTreeSet<u8>,
}

impl Sender {
    fn new(dir: Dir, markers: bool) -> Sender {
        // EMSS = MSS here: no TCP options in the synthetic capture.
        let mulpdu = mulpdu(MSS, markers);
        Sender {
            dir,
            framer: Framer::new(FramerConfig {
                markers,
                crc: true,
                mulpdu,
                stream_offset: 0,
            }),
            ddp: DdpSender::new(),
            mulpdu,
        }
    }

    /// Frames one ULPDU gathered from `parts` and sends it as its own TCP segment (one FPDU
    /// per segment, as an MPA sender aligned with TCP does, MPA-5.1-*).
    fn fpdu(&mut self, conv: &mut Conversation, expect: &mut Expect, parts: &[&[u8]]) {
        let ulpdu_len: usize = parts.iter().map(|p| p.len()).sum();
        let mut out = vec![0u8; self.framer.fpdu_wire_len(ulpdu_len)];
        let markers_before = self.framer.markers_sent();
        let n = self.framer.emit(parts, &mut out).expect("framer emit");
        assert_eq!(n, out.len(), "fpdu_wire_len must equal the octets written");
        conv.send(self.dir, &out, MSS);
        expect.fpdus += 1;
        expect.markers += (self.framer.markers_sent() - markers_before) as usize;
        if let Some(&rdmap_ctl) = parts.first().and_then(|p| p.get(1)) {
            expect.opcodes.insert(rdmap_ctl & 0x0F);
        }
    }

    /// An untagged message (QN 0 Sends and Immediate Data, QN 1 requests, QN 3 responses),
    /// segmented to MULPDU; `ulp_header` is the RDMAP header, if the opcode has one.
    fn untagged(
        &mut self,
        conv: &mut Conversation,
        expect: &mut Expect,
        opcode: Opcode,
        inv_stag: u32,
        ulp_header: &[u8],
        payload: &[u8],
    ) {
        let qn = opcode.qn().expect("untagged opcode");
        let mut seg = self
            .ddp
            .untagged(
                Control::new(opcode).0,
                inv_stag,
                qn,
                ulp_header,
                payload.len() as u32,
                self.mulpdu,
            )
            .expect("segmenter");
        let mut hdr = vec![0u8; seg.header_buf_len()];
        while let Some(s) = seg.next_segment(&mut hdr).expect("segment") {
            let body = &payload[s.payload_offset as usize..][..s.payload_len as usize];
            let h = hdr[..s.header_len].to_vec();
            self.fpdu(conv, expect, &[&h, body]);
        }
    }

    /// A tagged message (RDMA Write, Read Response) to `stag`/`to`, segmented to MULPDU.
    fn tagged(
        &mut self,
        conv: &mut Conversation,
        expect: &mut Expect,
        opcode: Opcode,
        stag: u32,
        to: u64,
        payload: &[u8],
    ) {
        let mut seg = self
            .ddp
            .tagged(
                Control::new(opcode).0,
                stag,
                to,
                &[],
                payload.len() as u32,
                self.mulpdu,
            )
            .expect("segmenter");
        let mut hdr = vec![0u8; seg.header_buf_len()];
        while let Some(s) = seg.next_segment(&mut hdr).expect("segment") {
            let body = &payload[s.payload_offset as usize..][..s.payload_len as usize];
            let h = hdr[..s.header_len].to_vec();
            self.fpdu(conv, expect, &[&h, body]);
        }
    }
}

/// The RDMAP header octets of `header` (what follows the 18-octet untagged DDP header).
fn rdmap_header_bytes(opcode: Opcode, header: RdmapHeader) -> Vec<u8> {
    let repr = SegmentRepr {
        last: true,
        buffer: DdpBuffer::Untagged {
            rsvd_ulp2: 0,
            qn: opcode.qn().expect("untagged opcode"),
            msn: 1,
            mo: 0,
        },
        opcode,
        header,
    };
    let mut buf = vec![0u8; 128];
    let n = repr.emit(&mut buf).expect("segment emit");
    buf[18..n].to_vec()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn mpa_frame(kind: FrameKind, rev: u8, markers: bool, enhanced: Option<EnhancedData>) -> Vec<u8> {
    let private_data: &[u8] = match kind {
        FrameKind::Request => b"warpcore judge request",
        FrameKind::Reply => b"warpcore judge reply",
    };
    let repr = FrameRepr {
        kind,
        markers,
        crc: true,
        reject: false,
        res: 0,
        rev,
        enhanced,
        private_data,
    };
    let mut buf = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Frame::new_unchecked(&mut buf[..]));
    buf
}

/// One whole connection: startup, every opcode in both directions where it makes sense, and
/// an orderly close. Returns what it put on the wire.
fn conversation(
    port: u16,
    rev: u8,
    markers: bool,
    isn_near_wrap: bool,
    frames: &mut Vec<Vec<u8>>,
) -> Expect {
    let mut conv = Conversation::open(40000 + port, port, isn_near_wrap);
    let mut expect = Expect::default();

    let enhanced = |ird, ord| {
        (rev >= 2).then_some(EnhancedData {
            peer_to_peer: false,
            rtr: RtrTypes::EMPTY,
            ird,
            ord,
        })
    };
    conv.send(
        Dir::ToResponder,
        &mpa_frame(FrameKind::Request, rev, markers, enhanced(16, 16)),
        MSS,
    );
    conv.send(
        Dir::ToInitiator,
        &mpa_frame(
            FrameKind::Reply,
            rev,
            markers,
            enhanced(16, IRD_ORD_NO_NEGOTIATION),
        ),
        MSS,
    );

    // Markers on means both sides asked for them, so both directions carry markers.
    let mut ini = Sender::new(Dir::ToResponder, markers);
    let mut rsp = Sender::new(Dir::ToInitiator, markers);
    let e = &mut expect;
    let c = &mut conv;

    // Sends of every flavour, single- and multi-segment, including zero-length.
    ini.untagged(c, e, Opcode::Send, 0, &[], &pattern(16, 1));
    ini.untagged(c, e, Opcode::Send, 0, &[], &[]);
    ini.untagged(c, e, Opcode::SendSe, 0, &[], &pattern(3000, 2));
    ini.untagged(
        c,
        e,
        Opcode::SendInvalidate,
        0x0000_1234,
        &[],
        &pattern(64, 3),
    );
    ini.untagged(
        c,
        e,
        Opcode::SendSeInvalidate,
        0x0000_5678,
        &[],
        &pattern(5, 4),
    );
    // RDMA Write, multi-segment, and zero-length.
    rsp.tagged(
        c,
        e,
        Opcode::Write,
        0x0000_2201,
        0x1000,
        &pattern(70_000, 5),
    );
    rsp.tagged(c, e, Opcode::Write, 0, 0, &[]);
    // RDMA Read Request and its Read Response.
    let rr = ReadRequestRepr {
        sink_stag: 0x0000_3301,
        sink_to: 0x7F00_0000_0000,
        read_size: 4000,
        src_stag: 0x0000_4401,
        src_to: 0x20,
    };
    ini.untagged(
        c,
        e,
        Opcode::ReadRequest,
        0,
        &rdmap_header_bytes(Opcode::ReadRequest, RdmapHeader::ReadRequest(rr)),
        &[],
    );
    rsp.tagged(
        c,
        e,
        Opcode::ReadResponse,
        rr.sink_stag,
        rr.sink_to,
        &pattern(4000, 6),
    );
    // RFC 7306: Immediate Data (with and without SE), atomics.
    for (op, v) in [(Opcode::ImmediateData, 7u8), (Opcode::ImmediateDataSe, 8)] {
        let imm = ImmediateDataRepr { data: [v; 8] };
        ini.untagged(
            c,
            e,
            op,
            0,
            &rdmap_header_bytes(op, RdmapHeader::ImmediateData(imm)),
            &[],
        );
    }
    let fetch_add = AtomicRequestRepr {
        aopcode: 0,
        request_id: 1,
        remote_stag: 0x0000_5501,
        remote_to: 0x40,
        add_swap_data: 5,
        add_swap_mask: 0,
        compare_data: 0,
        compare_mask: u64::MAX,
    };
    let cmp_swap = AtomicRequestRepr {
        aopcode: 2,
        request_id: 2,
        compare_data: 10,
        compare_mask: u64::MAX,
        add_swap_data: 11,
        add_swap_mask: u64::MAX,
        ..fetch_add
    };
    for (i, req) in [fetch_add, cmp_swap].into_iter().enumerate() {
        ini.untagged(
            c,
            e,
            Opcode::AtomicRequest,
            0,
            &rdmap_header_bytes(Opcode::AtomicRequest, RdmapHeader::AtomicRequest(req)),
            &[],
        );
        let resp = AtomicResponseRepr {
            orig_request_id: req.request_id,
            orig_value: 100 + i as u64,
        };
        rsp.untagged(
            c,
            e,
            Opcode::AtomicResponse,
            0,
            &rdmap_header_bytes(Opcode::AtomicResponse, RdmapHeader::AtomicResponse(resp)),
            &[],
        );
    }
    // A Terminate closes the stream: the responder reports a DDP error on the initiator's
    // last Send, copying its DDP header (RDMAP-4.8, DDP-7.2).
    let offending = {
        let mut b = vec![0u8; 18 + 5];
        b[..2].copy_from_slice(&[0x41, 0x43]);
        b[9] = 0; // QN 0
        b[13] = 9; // MSN 9
        b
    };
    let mut term = vec![0u8; 80];
    let n = emit_terminate(
        ProtocolError::Ddp(DdpError::UntaggedMsnOutOfRange),
        Some(&Offending::new(&offending)),
        &mut term,
    )
    .expect("terminate");
    rsp.fpdu(c, e, &[&term[..n]]);
    // And one RDMAP-layer Terminate from the other side with no copied header.
    let n = emit_terminate(
        ProtocolError::Rdmap(RdmapError::LocalCatastrophic),
        None,
        &mut term,
    )
    .expect("terminate");
    ini.fpdu(c, e, &[&term[..n]]);

    conv.close();
    frames.extend(conv.into_packets());
    expect
}

/// tshark on `file` with TCP reassembly on (the frames here are written by hand).
fn tshark(file: &std::path::Path, args: &[&str]) -> String {
    let mut all = vec!["-o", "tcp.desegment_tcp_streams:TRUE"];
    all.extend_from_slice(args);
    warpcore_test_support::tshark::run(file, &all)
}

/// Every value of `field` in the dissection, one per occurrence.
fn field_values(file: &std::path::Path, field: &str) -> Vec<String> {
    tshark(
        file,
        &[
            "-T",
            "fields",
            "-E",
            "occurrence=a",
            "-E",
            "separator=,",
            "-e",
            field,
        ],
    )
    .lines()
    .flat_map(|l| l.split(',').map(str::to_owned).collect::<Vec<_>>())
    .filter(|v| !v.is_empty())
    .collect()
}

fn judge(name: &str, rev: u8, markers: bool, isn_near_wrap: bool) {
    if !warpcore_test_support::tshark::present_or_skip(name) {
        return;
    }
    let mut frames = Vec::new();
    let expect = conversation(7000 + rev as u16, rev, markers, isn_near_wrap, &mut frames);
    let dir = std::env::temp_dir().join(format!("warpcore-judge-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("{name}.pcap"));
    capture::write_pcap(&file, &frames);

    // 1. Nothing malformed, no expert errors.
    let malformed = tshark(
        &file,
        &["-Y", "_ws.malformed || _ws.expert.severity == error"],
    );
    assert!(
        malformed.trim().is_empty(),
        "{name}: tshark reports malformed packets or errors:\n{malformed}\n(capture kept at {})",
        file.display()
    );
    let verbose = tshark(&file, &["-V"]);
    assert!(
        !verbose.contains("Bad CRC32"),
        "{name}: tshark found a bad CRC (capture kept at {})",
        file.display()
    );

    // 2. Every FPDU dissected, every CRC checked and good.
    let fpdus = field_values(&file, "iwarp_mpa.ulpdulength").len();
    let good_crcs = field_values(&file, "iwarp_mpa.crc_check").len();
    assert_eq!(fpdus, expect.fpdus, "{name}: FPDUs dissected vs framed");
    assert_eq!(good_crcs, expect.fpdus, "{name}: good CRCs vs FPDUs framed");

    // 3. Every opcode present.
    let seen: BTreeSet<u8> = field_values(&file, "iwarp_rdma.opcode")
        .iter()
        .map(|v| u8::from_str_radix(v.trim_start_matches("0x"), 16).expect("opcode"))
        .collect();
    let all: BTreeSet<u8> = (0x0..=0xB).collect();
    assert_eq!(
        expect.opcodes, all,
        "{name}: the test must send every opcode"
    );
    assert_eq!(seen, all, "{name}: opcodes dissected by tshark");

    // 4. Markers: every one recognised where we put one.
    let fpduptrs = field_values(&file, "iwarp_mpa.marker_fpduptr");
    if markers {
        assert!(expect.markers > 0, "{name}: markers were negotiated");
        assert_eq!(fpduptrs.len(), expect.markers, "{name}: markers recognised");
    } else {
        assert_eq!(expect.markers, 0);
        assert!(
            fpduptrs.is_empty(),
            "{name}: markers found where none were sent"
        );
    }

    // 5. The MPA startup frames were dissected as such, with the flags we sent.
    let flags: BTreeMap<&str, usize> = [("iwarp_mpa.key.req", 1usize), ("iwarp_mpa.key.rep", 1)]
        .into_iter()
        .collect();
    for (field, count) in flags {
        assert_eq!(field_values(&file, field).len(), count, "{name}: {field}");
    }
    let revs = field_values(&file, "iwarp_mpa.rev");
    assert_eq!(revs, vec![rev.to_string(), rev.to_string()], "{name}: Rev");
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_dir(&dir);
}

// MPA-4.4-*, MPA-4.3-*, MPA-7.1.1-*, MPA2-6-*: Rev 1 and Rev 2 startup, CRC on, markers off.
#[test]
fn tshark_accepts_mpa_rev1_crc_no_markers() {
    judge("rev1-crc", 1, false, false);
}

#[test]
fn tshark_accepts_mpa_rev2_crc_no_markers() {
    judge("rev2-crc", 2, false, false);
}

// Markers at every 512th octet of FPDU mode, each FPDUPTR as tshark computes it.
#[test]
fn tshark_accepts_mpa_rev1_crc_markers() {
    judge("rev1-crc-markers", 1, true, false);
}

#[test]
fn tshark_accepts_mpa_rev2_crc_markers_across_sequence_wrap() {
    judge("rev2-crc-markers-wrap", 2, true, true);
}
