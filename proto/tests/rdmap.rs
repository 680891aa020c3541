//! RDMAP wire formats, whole-segment decoding and RDMAP semantics: byte-exact vectors from
//! WIRE-FORMATS.md (§4, §5, §6.4), error mapping and property tests.

use proptest::prelude::*;
use warpcore_proto::error::{DdpError, MpaError, ProtocolError, RdmapError, TerminateCode};
use warpcore_proto::wire::ddp::DdpBuffer;
use warpcore_proto::wire::rdmap::*;
use warpcore_proto::wire::segment::{RdmapHeader, Segment, SegmentError, SegmentRepr};
use warpcore_proto::wire::Error;

fn hex(s: &str) -> Vec<u8> {
    s.split_whitespace()
        .map(|b| u8::from_str_radix(b, 16).unwrap())
        .collect()
}

fn untagged(qn: u32, msn: u32, mo: u32) -> DdpBuffer {
    DdpBuffer::Untagged {
        rsvd_ulp2: 0,
        qn,
        msn,
        mo,
    }
}

// ------------------------------------------------------------------------------------------
// Control octets and opcode table (RDMAP-4.1-*, RDMAP-4.2-1, EXT-4.1-*; WIRE-FORMATS §4.2)
// ------------------------------------------------------------------------------------------

/// WIRE-FORMATS §4.2, last-segment column: D+0 D+1 for every opcode, and the per-opcode
/// facts of the table.
#[test]
fn opcode_table_matches_wire_formats_4_2() {
    // (opcode, D+0 D+1, tagged, QN, header len, payload, solicited, invalidate)
    type Row = (Opcode, [u8; 2], bool, Option<u32>, usize, bool, bool, bool);
    let table: [Row; 12] = [
        (
            Opcode::Write,
            [0xC1, 0x40],
            true,
            None,
            0,
            true,
            false,
            false,
        ),
        (
            Opcode::ReadRequest,
            [0x41, 0x41],
            false,
            Some(1),
            28,
            false,
            false,
            false,
        ),
        (
            Opcode::ReadResponse,
            [0xC1, 0x42],
            true,
            None,
            0,
            true,
            false,
            false,
        ),
        (
            Opcode::Send,
            [0x41, 0x43],
            false,
            Some(0),
            0,
            true,
            false,
            false,
        ),
        (
            Opcode::SendInvalidate,
            [0x41, 0x44],
            false,
            Some(0),
            0,
            true,
            false,
            true,
        ),
        (
            Opcode::SendSe,
            [0x41, 0x45],
            false,
            Some(0),
            0,
            true,
            true,
            false,
        ),
        (
            Opcode::SendSeInvalidate,
            [0x41, 0x46],
            false,
            Some(0),
            0,
            true,
            true,
            true,
        ),
        (
            Opcode::Terminate,
            [0x41, 0x47],
            false,
            Some(2),
            4,
            false,
            false,
            false,
        ),
        (
            Opcode::ImmediateData,
            [0x41, 0x48],
            false,
            Some(0),
            8,
            false,
            false,
            false,
        ),
        (
            Opcode::ImmediateDataSe,
            [0x41, 0x49],
            false,
            Some(0),
            8,
            false,
            true,
            false,
        ),
        (
            Opcode::AtomicRequest,
            [0x41, 0x4A],
            false,
            Some(1),
            52,
            false,
            false,
            false,
        ),
        (
            Opcode::AtomicResponse,
            [0x41, 0x4B],
            false,
            Some(3),
            12,
            false,
            false,
            false,
        ),
    ];
    for (op, ctrl, tagged, qn, hlen, payload, se, inv) in table {
        let ddp_ctrl = if tagged { 0xC1 } else { 0x41 };
        assert_eq!([ddp_ctrl, op.control().0], ctrl, "{op}");
        assert_eq!(op.is_tagged(), tagged, "{op}");
        assert_eq!(op.qn(), qn, "{op}");
        assert_eq!(op.min_header_len(), hlen, "{op}");
        assert_eq!(op.carries_payload(), payload, "{op}");
        assert_eq!(op.is_solicited(), se, "{op}");
        assert_eq!(op.is_invalidate(), inv, "{op}");
        assert_eq!(Opcode::from_u8(op as u8), Some(op));
    }
    assert_eq!(Opcode::Terminate.max_header_len(), 52);
    for raw in 0xC..=0xF {
        assert_eq!(Opcode::from_u8(raw), None);
    }
}

/// WIRE-FORMATS §4.4: the segment (ULPDU_Length) sizes of the control messages.
#[test]
fn segment_sizes_of_wire_formats_4_4() {
    let sizes = [
        (Opcode::ReadRequest, 46),
        (Opcode::ImmediateData, 26),
        (Opcode::AtomicRequest, 70),
        (Opcode::AtomicResponse, 30),
        (Opcode::Terminate, 22),
        (Opcode::Send, 18),
        (Opcode::Write, 14),
    ];
    for (op, len) in sizes {
        let ddp = if op.is_tagged() { 14 } else { 18 };
        assert_eq!(ddp + op.min_header_len(), len, "{op}");
    }
    assert_eq!(18 + Opcode::Terminate.max_header_len(), 70);
}

// ------------------------------------------------------------------------------------------
// Header layouts (RDMAP-4.4-1, RDMAP-4.8-*, EXT-5.2.1, EXT-5.2.2, EXT-6.3)
// ------------------------------------------------------------------------------------------

/// RDMAP-4.4-1 / WIRE-FORMATS §4.5: field offsets of the Read Request header.
#[test]
fn read_request_layout() {
    let r = ReadRequestRepr {
        sink_stag: 0x0102_0304,
        sink_to: 0x1112_1314_1516_1718,
        read_size: 0x2122_2324,
        src_stag: 0x3132_3334,
        src_to: 0x4142_4344_4546_4748,
    };
    let mut b = [0u8; 28];
    r.emit(&mut ReadRequest::new_unchecked(&mut b[..]));
    assert_eq!(
        b.to_vec(),
        hex("01 02 03 04 11 12 13 14 15 16 17 18 21 22 23 24 \
             31 32 33 34 41 42 43 44 45 46 47 48")
    );
    assert_eq!(ReadRequestRepr::parse_bytes(&b), Ok(r));
    assert_eq!(
        ReadRequestRepr::parse_bytes(&b[..27]),
        Err(Error::Truncated)
    );
}

/// RDMAP-4.8 / WIRE-FORMATS §4.6.1: progress update of a copied Read Request header.
#[test]
fn read_request_progress_update() {
    let r = ReadRequestRepr {
        sink_stag: 7,
        sink_to: 1000,
        read_size: 4096,
        src_stag: 9,
        src_to: 50_000,
    };
    assert_eq!(r.progressed(0), r);
    let p = r.progressed(2048);
    assert_eq!(
        p,
        ReadRequestRepr {
            sink_stag: 7,
            sink_to: 3048,
            read_size: 2048,
            src_stag: 9,
            src_to: 52_048,
        }
    );
    assert_eq!(r.progressed(u32::MAX).read_size, 0);
}

/// EXT-5.2.1 / WIRE-FORMATS §5.2: Atomic Request field offsets; AOpCode is the low nibble of
/// octet 3 and reserved bits are sent as zero.
#[test]
fn atomic_request_layout() {
    let r = AtomicRequestRepr::cmp_swap(
        0xA1A2_A3A4,
        0xB1B2_B3B4,
        0xC1C2_C3C4_C5C6_C7C8,
        0xD1D2_D3D4_D5D6_D7D8,
        0xE1E2_E3E4_E5E6_E7E8,
        0xF1F2_F3F4_F5F6_F7F8,
        0x0102_0304_0506_0708,
    );
    let mut b = [0xFFu8; 52];
    r.emit(&mut AtomicRequest::new_unchecked(&mut b[..]));
    assert_eq!(
        b.to_vec(),
        hex(
            "00 00 00 02 A1 A2 A3 A4 B1 B2 B3 B4 C1 C2 C3 C4 C5 C6 C7 C8 \
             D1 D2 D3 D4 D5 D6 D7 D8 E1 E2 E3 E4 E5 E6 E7 E8 \
             F1 F2 F3 F4 F5 F6 F7 F8 01 02 03 04 05 06 07 08"
        )
    );
    assert_eq!(AtomicRequestRepr::parse_bytes(&b), Ok(r));
    // Reserved bits are ignored on receive.
    b[0] = 0xFF;
    b[3] = 0xF2;
    let v = AtomicRequest::new_checked(&b[..]).unwrap();
    assert_eq!(v.aopcode(), 2);
    assert_eq!(v.reserved(), 0x0FF0_000F);
    assert_eq!(AtomicRequestRepr::parse_bytes(&b), Ok(r));
    assert_eq!(
        AtomicRequestRepr::parse_bytes(&b[..51]),
        Err(Error::Truncated)
    );
    // FetchAdd fills the unused compare fields as RFC 7306 §5.2.1 says.
    let f = AtomicRequestRepr::fetch_add(1, 2, 8, 5, 0);
    assert_eq!((f.compare_data, f.compare_mask), (0, u64::MAX));
    assert_eq!(f.op(), Some(AtomicOpcode::FetchAdd));
}

/// EXT-5.2.2 / WIRE-FORMATS §5.3: the Atomic Response header is 12 octets, not 32.
#[test]
fn atomic_response_layout() {
    let r = AtomicResponseRepr {
        orig_request_id: 0x0A0B_0C0D,
        orig_value: 0x1122_3344_5566_7788,
    };
    let mut b = [0u8; 12];
    r.emit(&mut AtomicResponse::new_unchecked(&mut b[..]));
    assert_eq!(b.to_vec(), hex("0A 0B 0C 0D 11 22 33 44 55 66 77 88"));
    assert_eq!(AtomicResponseRepr::parse_bytes(&b), Ok(r));
    assert_eq!(
        AtomicResponseRepr::parse_bytes(&b[..11]),
        Err(Error::Truncated)
    );
}

/// EXT-6.3-5 / WIRE-FORMATS §5.4: Immediate Data is 8 octets at D+18.
#[test]
fn immediate_data_layout() {
    let r = ImmediateDataRepr {
        data: [1, 2, 3, 4, 5, 6, 7, 8],
    };
    let mut b = [0u8; 8];
    r.emit(&mut ImmediateData::new_unchecked(&mut b[..]));
    assert_eq!(b, [1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(
        ImmediateDataRepr::parse_bytes(&b[..7]),
        Err(Error::Truncated)
    );
}

/// RDMAP-4.8-2, RDMAP-4.8-7: Terminate control word bits and masks (WIRE-FORMATS §4.6.2).
#[test]
fn terminate_control_word() {
    let b = hex("01 22 FF FF");
    let v = Terminate::new_checked(&b[..]);
    // D is set but nothing follows: truncated (RDMAP-4.8-9, RDMAP-4.8-10).
    assert_eq!(v, Err(Error::Truncated));
    let b = hex("01 22 BF FF");
    let v = Terminate::new_checked(&b[..]).unwrap();
    assert_eq!(v.code(), TerminateCode::new(0, 1, 0x22));
    assert!(v.m() && !v.d() && v.r());
    assert_eq!(v.reserved(), 0x1FFF);
    assert_eq!(v.rdma_header(), None);
    // Reserved bits are ignored on receive and sent as zero.
    let t = TerminateRepr::parse(&v).unwrap();
    let mut out = [0u8; 4];
    t.emit(&mut Terminate::new_unchecked(&mut out[..]));
    assert_eq!(out.to_vec(), hex("01 22 A0 00"));
}

/// WIRE-FORMATS §4.6.7 item 2: the copied DDP header is 14 or 18 octets by its own T bit,
/// whatever the error type says (unlike Wireshark).
#[test]
fn terminate_copied_header_length_follows_t_bit() {
    // Layer 1 (DDP), EType 1 (tagged), code 0: tagged copied header, 14 octets.
    let mut b = hex("11 00 C0 00 00 05 C1 40 00 00 00 2A 00 00 00 00 00 00 10 00");
    let v = Terminate::new_checked(&b[..]).unwrap();
    assert_eq!(v.ddp_segment_len(), Some(5));
    assert_eq!(v.ddp_header().unwrap().len(), 14);
    assert_eq!(v.header_len(), 20);
    // Layer 0 EType 1 (remote protection) with an untagged copied header: 18 octets.
    b = hex("01 00 C0 00 00 00 41 41 00 00 00 00 00 00 00 01 00 00 00 07 00 00 00 00");
    let v = Terminate::new_checked(&b[..]).unwrap();
    assert_eq!(v.ddp_header().unwrap().len(), 18);
    // One octet short of the untagged header: truncated.
    assert_eq!(
        Terminate::new_checked(&b[..b.len() - 1]),
        Err(Error::Truncated)
    );
}

// ------------------------------------------------------------------------------------------
// Whole segments: WIRE-FORMATS §6.4 and §7.4 vectors, error mapping
// ------------------------------------------------------------------------------------------

/// WIRE-FORMATS §6.4: the zero-length Send RTR (RDMAP-5.3-8).
#[test]
fn vector_rtr_send() {
    let b = hex("41 43 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00");
    let seg = Segment::parse(&b).unwrap();
    assert_eq!(
        seg.repr,
        SegmentRepr {
            last: true,
            buffer: untagged(0, 1, 0),
            opcode: Opcode::Send,
            header: RdmapHeader::None,
        }
    );
    assert!(seg.payload.is_empty());
    let mut out = [0u8; 18];
    assert_eq!(seg.emit(&mut out), Ok(18));
    assert_eq!(out.to_vec(), b);
}

/// WIRE-FORMATS §6.4: the zero-length Write RTR (RDMAP-5.1-7).
#[test]
fn vector_rtr_write() {
    let b = hex("C1 40 00 00 00 00 00 00 00 00 00 00 00 00");
    let seg = Segment::parse(&b).unwrap();
    assert_eq!(seg.repr.opcode, Opcode::Write);
    assert_eq!(seg.repr.buffer, DdpBuffer::Tagged { stag: 0, to: 0 });
    let mut out = [0u8; 14];
    assert_eq!(seg.repr.emit(&mut out), Ok(14));
    assert_eq!(out.to_vec(), b);
}

/// WIRE-FORMATS §6.4: the zero-length Read Request RTR and the Read Response answering it
/// (RDMAP-5.2.1-11, RDMAP-5.2.1-14, RDMAP-4.4-2).
#[test]
fn vector_rtr_read_request_and_response() {
    let rreq = hex("41 41 00 00 00 00 00 00 00 01 00 00 00 01 00 00 00 00 \
         00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 \
         00 00 00 00 00 00 00 00 00 00 00 00");
    assert_eq!(rreq.len(), 0x2E);
    let seg = Segment::parse(&rreq).unwrap();
    assert_eq!(seg.repr.buffer, untagged(1, 1, 0));
    let RdmapHeader::ReadRequest(r) = seg.repr.header else {
        panic!("not a Read Request: {:?}", seg.repr.header);
    };
    assert_eq!(r, ReadRequestRepr::default());
    let mut out = [0u8; 46];
    assert_eq!(seg.emit(&mut out), Ok(46));
    assert_eq!(out.to_vec(), rreq);

    // The Read Response ULPDU of §6.4 (without MPA length and CRC).
    let rresp = hex("C1 42 00 00 00 00 00 00 00 00 00 00 00 00");
    let resp = SegmentRepr {
        last: true,
        buffer: DdpBuffer::Tagged {
            stag: r.sink_stag,
            to: r.sink_to,
        },
        opcode: Opcode::ReadResponse,
        header: RdmapHeader::None,
    };
    let mut out = [0u8; 14];
    assert_eq!(resp.emit(&mut out), Ok(14));
    assert_eq!(out.to_vec(), rresp);
    assert_eq!(Segment::parse(&rresp).unwrap().repr, resp);
}

/// WIRE-FORMATS §6.4: the "no matching RTR" Terminate (Layer 2, EType 0, code 7, no copied
/// headers, QN 2, MSN 1, MO 0): RDMAP-4.8-*, RDMAP-5.4-2, MPA2-8.
#[test]
fn vector_terminate_no_matching_rtr() {
    let b = hex("41 47 00 00 00 00 00 00 00 02 00 00 00 01 00 00 00 00 20 07 00 00");
    let seg = Segment::parse(&b).unwrap();
    assert_eq!(seg.repr.buffer, untagged(2, 1, 0));
    let RdmapHeader::Terminate(t) = seg.repr.header else {
        panic!("not a Terminate");
    };
    assert_eq!(t.code, MpaError::NoMatchingRtr.terminate_code());
    assert_eq!(
        t.code.decode(),
        Some(ProtocolError::Mpa(MpaError::NoMatchingRtr))
    );
    assert!(!t.m && !t.r_bit && t.ddp.is_none() && t.rdma.is_none());
    let mut out = [0u8; 22];
    assert_eq!(seg.emit(&mut out), Ok(22));
    assert_eq!(out.to_vec(), b);
}

/// mpa-08 §4.4 Figure 5 (WIRE-FORMATS §7.4 vector 1): a Send with 24 octets of data.
#[test]
fn vector_mpa08_send() {
    let mut b = hex("41 43 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00");
    b.extend_from_slice(&[0u8; 24]);
    assert_eq!(b.len(), 42);
    let seg = Segment::parse(&b).unwrap();
    assert_eq!(seg.repr.opcode, Opcode::Send);
    assert_eq!(seg.payload, &[0u8; 24][..]);
    assert_eq!(seg.buffer_len(), 42);
}

/// Send with Invalidate carries its STag in RsvdULP[8:39] (RDMAP-4.1-3).
#[test]
fn send_with_invalidate_stag() {
    let b = hex("41 44 DE AD BE EF 00 00 00 00 00 00 00 05 00 00 00 00 AA");
    let seg = Segment::parse(&b).unwrap();
    assert_eq!(seg.repr.invalidate_stag(), Some(0xDEAD_BEEF));
    assert_eq!(seg.payload, &[0xAA][..]);
    let b = hex("41 43 DE AD BE EF 00 00 00 00 00 00 00 05 00 00 00 00");
    // For a plain Send the field is ignored (RDMAP-4.1-9).
    assert_eq!(Segment::parse(&b).unwrap().repr.invalidate_stag(), None);
}

/// The check order and the Terminate each failure maps to (module docs of wire::segment;
/// RDMAP-7.2-1..3, EXT-8.2-1..3, EXT-6.3-7).
#[test]
fn segment_errors_in_order() {
    let cases: &[(&str, SegmentError, ProtocolError)] = &[
        // DDP version 2, tagged: DDP tagged invalid version, before anything else.
        (
            "C2 FF",
            SegmentError::DdpVersion { tagged: true },
            DdpError::TaggedInvalidVersion.into(),
        ),
        (
            "40",
            SegmentError::DdpVersion { tagged: false },
            DdpError::UntaggedInvalidVersion.into(),
        ),
        (
            "",
            SegmentError::DdpTruncated,
            DdpError::LocalCatastrophic.into(),
        ),
        (
            "41 43 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00",
            SegmentError::DdpTruncated,
            DdpError::LocalCatastrophic.into(),
        ),
        // RDMAP version 0 or 2 (RDMAP-7.2-3).
        (
            "41 03 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00",
            SegmentError::RdmapVersion,
            RdmapError::InvalidVersion.into(),
        ),
        (
            "C1 80 00 00 00 00 00 00 00 00 00 00 00 00",
            SegmentError::RdmapVersion,
            RdmapError::InvalidVersion.into(),
        ),
        // Opcodes 0xC-0xF (RDMAP-7.2-2).
        (
            "41 4C 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00",
            SegmentError::UnknownOpcode(0xC),
            RdmapError::UnexpectedOpcode.into(),
        ),
        (
            "C1 4F 00 00 00 00 00 00 00 00 00 00 00 00",
            SegmentError::UnknownOpcode(0xF),
            RdmapError::UnexpectedOpcode.into(),
        ),
        // A tagged Send and an untagged Write (RDMAP-4.1-4).
        (
            "C1 43 00 00 00 00 00 00 00 00 00 00 00 00",
            SegmentError::BufferModel(Opcode::Send),
            RdmapError::UnexpectedOpcode.into(),
        ),
        (
            "41 40 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00",
            SegmentError::BufferModel(Opcode::Write),
            RdmapError::UnexpectedOpcode.into(),
        ),
        // A Send on QN 1 and a Read Request on QN 0 (RDMAP-5.3-6, RDMAP-5.2.1-5).
        (
            "41 43 00 00 00 00 00 00 00 01 00 00 00 01 00 00 00 00",
            SegmentError::QueueNumber {
                opcode: Opcode::Send,
                qn: 1,
            },
            DdpError::UntaggedInvalidQn.into(),
        ),
        (
            "41 4B 00 00 00 00 00 00 00 01 00 00 00 01 00 00 00 00",
            SegmentError::QueueNumber {
                opcode: Opcode::AtomicResponse,
                qn: 1,
            },
            DdpError::UntaggedInvalidQn.into(),
        ),
        // A Read Request with a 27-octet header.
        (
            "41 41 00 00 00 00 00 00 00 01 00 00 00 01 00 00 00 00 \
             00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00",
            SegmentError::HeaderTruncated(Opcode::ReadRequest),
            RdmapError::CatastrophicStream.into(),
        ),
        // Immediate Data of 7 and 9 octets (EXT-6.3-7).
        (
            "41 48 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00 01 02 03 04 05 06 07",
            SegmentError::HeaderTruncated(Opcode::ImmediateData),
            RdmapError::CatastrophicStream.into(),
        ),
        (
            "41 49 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00 01 02 03 04 05 06 07 08 09",
            SegmentError::UnexpectedPayload(Opcode::ImmediateDataSe),
            RdmapError::CatastrophicStream.into(),
        ),
        // A Terminate shorter than its control word.
        (
            "41 47 00 00 00 00 00 00 00 02 00 00 00 01 00 00 00 00 20 07 00",
            SegmentError::HeaderTruncated(Opcode::Terminate),
            RdmapError::CatastrophicStream.into(),
        ),
    ];
    for (bytes, err, perr) in cases {
        let b = hex(bytes);
        assert_eq!(Segment::parse(&b), Err(*err), "{bytes}");
        assert_eq!(err.protocol_error(), *perr, "{bytes}");
    }
}

/// Immediate Data of exactly 8 octets is accepted (EXT-6.3-5, EXT-6.3-7).
#[test]
fn immediate_data_exactly_eight() {
    let b = hex("41 48 00 00 00 00 00 00 00 00 00 00 00 07 00 00 00 00 01 02 03 04 05 06 07 08");
    assert_eq!(b.len(), 26);
    let seg = Segment::parse(&b).unwrap();
    assert_eq!(
        seg.repr.header,
        RdmapHeader::ImmediateData(ImmediateDataRepr {
            data: [1, 2, 3, 4, 5, 6, 7, 8]
        })
    );
}

/// A zero-filled Terminate (fixed-size layout) is tolerated; the fill is kept as payload
/// (WIRE-FORMATS §4.6.7 item 1).
#[test]
fn terminate_trailing_zero_fill_tolerated() {
    let mut b = hex("41 47 00 00 00 00 00 00 00 02 00 00 00 01 00 00 00 00 20 02 00 00");
    b.extend_from_slice(&[0u8; 48]);
    let seg = Segment::parse(&b).unwrap();
    assert_eq!(seg.payload.len(), 48);
    let mut out = vec![0u8; b.len()];
    assert_eq!(seg.emit(&mut out), Ok(b.len()));
    assert_eq!(out, b);
}

/// SegmentRepr::emit refuses inconsistent reprs instead of writing a segment the decoder
/// would reject.
#[test]
fn emit_rejects_inconsistent_repr() {
    let mut out = [0u8; 64];
    let bad_qn = SegmentRepr {
        last: true,
        buffer: untagged(1, 1, 0),
        opcode: Opcode::Send,
        header: RdmapHeader::None,
    };
    assert_eq!(bad_qn.emit(&mut out), Err(Error::Malformed));
    let bad_header = SegmentRepr {
        last: true,
        buffer: untagged(0, 1, 0),
        opcode: Opcode::Send,
        header: RdmapHeader::ReadRequest(ReadRequestRepr::default()),
    };
    assert_eq!(bad_header.emit(&mut out), Err(Error::Malformed));
    let ok = SegmentRepr {
        header: RdmapHeader::None,
        ..bad_header
    };
    assert_eq!(ok.emit(&mut out[..17]), Err(Error::Truncated));
}

// ------------------------------------------------------------------------------------------
// Property tests
// ------------------------------------------------------------------------------------------

fn arb_read_request() -> impl Strategy<Value = ReadRequestRepr> {
    (
        any::<u32>(),
        any::<u64>(),
        any::<u32>(),
        any::<u32>(),
        any::<u64>(),
    )
        .prop_map(
            |(sink_stag, sink_to, read_size, src_stag, src_to)| ReadRequestRepr {
                sink_stag,
                sink_to,
                read_size,
                src_stag,
                src_to,
            },
        )
}

fn arb_copied_ddp() -> impl Strategy<Value = CopiedDdpHeader> {
    (any::<bool>(), prop::array::uniform18(any::<u8>())).prop_map(|(tagged, mut b)| {
        b[0] = (b[0] & 0x7F) | if tagged { 0x80 } else { 0 };
        CopiedDdpHeader::from_segment(&b).unwrap()
    })
}

fn arb_terminate() -> impl Strategy<Value = TerminateRepr> {
    (
        (any::<u8>(), any::<u8>(), any::<u8>()),
        any::<bool>(),
        prop::option::of((any::<u16>(), arb_copied_ddp())),
        any::<bool>(),
        prop::option::of(arb_read_request()),
    )
        .prop_map(|((l, e, c), m, ddp, r_bit, rdma)| TerminateRepr {
            code: TerminateCode::new(l, e, c),
            m,
            ddp,
            // Present header implies the R bit (RDMAP-4.8-11).
            r_bit: r_bit || rdma.is_some(),
            rdma,
        })
}

fn arb_atomic_request() -> impl Strategy<Value = AtomicRequestRepr> {
    (
        0u8..16,
        any::<u32>(),
        any::<u32>(),
        any::<u64>(),
        (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>()),
    )
        .prop_map(
            |(aopcode, request_id, remote_stag, remote_to, (a, b, c, d))| AtomicRequestRepr {
                aopcode,
                request_id,
                remote_stag,
                remote_to,
                add_swap_data: a,
                add_swap_mask: b,
                compare_data: c,
                compare_mask: d,
            },
        )
}

fn arb_segment_repr() -> impl Strategy<Value = SegmentRepr> {
    let opcode = prop::sample::select(Opcode::ALL.to_vec());
    (
        opcode,
        any::<bool>(),
        (any::<u32>(), any::<u64>(), any::<u32>(), any::<u32>()),
        arb_read_request(),
        arb_terminate(),
        arb_atomic_request(),
        (any::<u32>(), any::<u64>(), any::<[u8; 8]>()),
    )
        .prop_map(
            |(opcode, last, (stag, to, msn, mo), rr, term, ar, (id, v, imm))| {
                let buffer = match opcode.qn() {
                    None => DdpBuffer::Tagged { stag, to },
                    Some(qn) => DdpBuffer::Untagged {
                        rsvd_ulp2: stag,
                        qn,
                        msn,
                        mo,
                    },
                };
                let header = match opcode {
                    Opcode::ReadRequest => RdmapHeader::ReadRequest(rr),
                    Opcode::Terminate => RdmapHeader::Terminate(term),
                    Opcode::AtomicRequest => RdmapHeader::AtomicRequest(ar),
                    Opcode::AtomicResponse => RdmapHeader::AtomicResponse(AtomicResponseRepr {
                        orig_request_id: id,
                        orig_value: v,
                    }),
                    Opcode::ImmediateData | Opcode::ImmediateDataSe => {
                        RdmapHeader::ImmediateData(ImmediateDataRepr { data: imm })
                    }
                    _ => RdmapHeader::None,
                };
                SegmentRepr {
                    last,
                    buffer,
                    opcode,
                    header,
                }
            },
        )
}

proptest! {
    #[test]
    fn read_request_round_trip(r in arb_read_request()) {
        let mut b = [0u8; 28];
        r.emit(&mut ReadRequest::new_unchecked(&mut b[..]));
        prop_assert_eq!(ReadRequestRepr::parse_bytes(&b), Ok(r));
    }

    #[test]
    fn atomic_request_round_trip(r in arb_atomic_request()) {
        let mut b = [0u8; 52];
        r.emit(&mut AtomicRequest::new_unchecked(&mut b[..]));
        prop_assert_eq!(r.buffer_len(), 52);
        prop_assert_eq!(AtomicRequestRepr::parse_bytes(&b), Ok(r));
    }

    #[test]
    fn terminate_round_trip(t in arb_terminate()) {
        let mut b = [0xEEu8; 64];
        t.emit(&mut Terminate::new_unchecked(&mut b[..]));
        let len = t.buffer_len();
        prop_assert!(len <= TERMINATE_MAX_LEN);
        // Parsing exactly the emitted octets gives the repr back, and so does parsing with
        // trailing fill (bounded by the segment length, WIRE-FORMATS §4.6.7 item 1) unless R
        // is set without a header, where fill would be read as one.
        prop_assert_eq!(TerminateRepr::parse_bytes(&b[..len]), Ok(t));
        prop_assert_eq!(Terminate::new_checked(&b[..len]).unwrap().header_len(), len);
    }

    /// Emit then parse is identity for every opcode's segment; buffer_len equals the octets
    /// written.
    #[test]
    fn segment_round_trip(repr in arb_segment_repr(), payload in prop::collection::vec(any::<u8>(), 0..64)) {
        let payload: &[u8] = if repr.opcode.carries_payload() { &payload } else { &[] };
        let seg = Segment { repr, payload };
        let mut b = vec![0u8; seg.buffer_len()];
        prop_assert_eq!(seg.emit(&mut b), Ok(b.len()));
        prop_assert_eq!(Segment::parse(&b), Ok(seg));
    }

    /// Arbitrary octets never panic the segment decoder, and whatever it accepts re-emits to
    /// the same octets except the reserved bits of the two control octets and the Terminate
    /// control word.
    #[test]
    fn segment_parse_never_panics(b in prop::collection::vec(any::<u8>(), 0..96)) {
        if let Ok(seg) = Segment::parse(&b) {
            let mut out = vec![0u8; seg.buffer_len()];
            prop_assert_eq!(seg.emit(&mut out), Ok(b.len()));
            prop_assert_eq!(out[0], b[0] & 0xC3);
            prop_assert_eq!(out[1], b[1] & 0xCF);
            prop_assert_eq!(Segment::parse(&out).map(|s| s.repr), Ok(seg.repr));
        }
    }

    /// Arbitrary octets never panic the Terminate view; once checked, no accessor panics.
    #[test]
    fn terminate_view_never_panics(b in prop::collection::vec(any::<u8>(), 0..80)) {
        if let Ok(v) = Terminate::new_checked(&b[..]) {
            let _ = (v.code(), v.m(), v.d(), v.r(), v.reserved(), v.ddp_segment_len());
            let _ = (v.ddp_header(), v.rdma_header());
            prop_assert!(v.header_len() <= b.len());
            prop_assert!(TerminateRepr::parse(&v).is_ok());
        }
    }
}
