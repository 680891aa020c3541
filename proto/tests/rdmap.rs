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
/// RDMAP-4.1-5: each message kind uses its Figure 4 opcode.
/// EXT-4.1-2, EXT-5-5, EXT-5.2.1-3, EXT-5.2.1-8, EXT-5.2.2-1, EXT-5.2.2-2, EXT-6.3-1: the T bit
/// and QN of each RFC 7306 opcode.
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
/// RDMAP-4.8-1: the Terminate header follows the DDP header.
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

/// The whole FPDUs of WIRE-FORMATS §6.4 (ULPDU_Length, ULPDU, pad, CRC32c low octet first):
/// our segments, framed by hand, match the published octets including the CRCs. This ties
/// the decoder's vectors to the ones the framer and Wireshark are checked against.
#[test]
fn rtr_and_terminate_fpdus_of_6_4() {
    fn frame(ulpdu: &[u8]) -> Vec<u8> {
        let mut f = (ulpdu.len() as u16).to_be_bytes().to_vec();
        f.extend_from_slice(ulpdu);
        while !f.len().is_multiple_of(4) {
            f.push(0);
        }
        let crc = crc32c::crc32c(&f);
        f.extend_from_slice(&crc.to_le_bytes());
        f
    }
    let mut buf = [0u8; 80];
    let send = SegmentRepr {
        last: true,
        buffer: untagged(0, 1, 0),
        opcode: Opcode::Send,
        header: RdmapHeader::None,
    };
    let n = send.emit(&mut buf).unwrap();
    assert_eq!(
        frame(&buf[..n]),
        hex("00 12 41 43 00 00 00 00 00 00 00 00 00 00 00 01 00 00 00 00 58 7B E8 C4")
    );
    let write = SegmentRepr {
        last: true,
        buffer: DdpBuffer::Tagged { stag: 0, to: 0 },
        opcode: Opcode::Write,
        header: RdmapHeader::None,
    };
    let n = write.emit(&mut buf).unwrap();
    assert_eq!(
        frame(&buf[..n]),
        hex("00 0E C1 40 00 00 00 00 00 00 00 00 00 00 00 00 A3 05 72 AB")
    );
    let read = SegmentRepr {
        last: true,
        buffer: untagged(1, 1, 0),
        opcode: Opcode::ReadRequest,
        header: RdmapHeader::ReadRequest(ReadRequestRepr::default()),
    };
    let n = read.emit(&mut buf).unwrap();
    let mut expect = hex("00 2E 41 41 00 00 00 00 00 00 00 01 00 00 00 01 00 00 00 00");
    expect.extend_from_slice(&[0u8; 28]);
    expect.extend_from_slice(&hex("F2 C6 DD 3D"));
    assert_eq!(frame(&buf[..n]), expect);
    let plan = warpcore_proto::rdmap::handle_read_request(&ReadRequestRepr::default(), |_| {
        Err(warpcore_proto::rdmap::StagFault::Invalid)
    })
    .unwrap();
    let n = plan.segment(0, 0).emit(&mut buf).unwrap();
    assert_eq!(
        frame(&buf[..n]),
        hex("00 0E C1 42 00 00 00 00 00 00 00 00 00 00 00 00 69 75 D6 CA")
    );
    let n = warpcore_proto::rdmap::emit_terminate(MpaError::NoMatchingRtr.into(), None, &mut buf)
        .unwrap();
    assert_eq!(
        frame(&buf[..n]),
        hex("00 16 41 47 00 00 00 00 00 00 00 02 00 00 00 01 00 00 00 00 20 07 00 00 1B D2 BA BE")
    );
}

/// RdmapHeader::emit_into writes just the RDMAP header, for the DDP segmenter.
#[test]
fn rdmap_header_emit_into() {
    let h = RdmapHeader::AtomicResponse(AtomicResponseRepr {
        orig_request_id: 1,
        orig_value: 2,
    });
    let mut b = [0u8; 12];
    assert_eq!(h.emit_into(&mut b), Ok(12));
    assert_eq!(b.to_vec(), hex("00 00 00 01 00 00 00 00 00 00 00 02"));
    assert_eq!(h.emit_into(&mut b[..11]), Err(Error::Truncated));
    assert_eq!(RdmapHeader::None.emit_into(&mut []), Ok(0));
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
/// RDMAP-5.3-10: control octet and Invalidate STag both go to DDP.
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

    /// Valid segments with one octet changed and cut at any length never panic the decoder;
    /// whatever it accepts is the repr it re-emits (reaching the deep checks that random
    /// octets rarely get past).
    #[test]
    fn mutated_segments_never_panic(
        repr in arb_segment_repr(),
        at in any::<prop::sample::Index>(),
        value in any::<u8>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let seg = Segment { repr, payload: &[] };
        let mut b = vec![0u8; seg.buffer_len()];
        seg.emit(&mut b).unwrap();
        let i = at.index(b.len());
        b[i] = value;
        let b = &b[..cut.index(b.len() + 1)];
        match Segment::parse(b) {
            Ok(s) => {
                let mut out = vec![0u8; s.buffer_len()];
                prop_assert_eq!(s.emit(&mut out), Ok(b.len()));
                prop_assert_eq!(Segment::parse(&out), Ok(s));
            }
            Err(e) => {
                // Every failure maps to a Terminate whose code decodes back to it.
                let pe = e.protocol_error();
                prop_assert_eq!(pe.terminate_code().decode(), Some(pe));
            }
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

// ------------------------------------------------------------------------------------------
// Atomics (RFC 7306 §5.1; EXT-5.1.1-*, EXT-5.1.2-*, EXT-5.2.1-*, EXT-8.2-4/5)
// ------------------------------------------------------------------------------------------

mod atomics {
    use super::*;
    use warpcore_proto::rdmap::atomic::*;

    /// A literal transcription of the RFC 7306 §5.1.1 bit-serial pseudocode.
    fn reference_fetch_add(orig: u64, add: u64, mask: u64) -> u64 {
        let mut carry = 0u64;
        let mut out = 0u64;
        for bit in 0..64 {
            let loc = 1u64 << bit;
            let sum = carry + ((orig & loc) >> bit) + ((add & loc) >> bit);
            carry = (sum & 2) >> 1;
            if sum & 1 != 0 {
                out |= loc;
            }
            carry = u64::from(carry != 0 && mask & loc == 0);
        }
        out
    }

    /// Add Mask 0 is a plain 64-bit add (RFC 7306 §5.1.1), wrapping at 2^64.
    #[test]
    fn fetch_add_unmasked() {
        let mut w = 40u64;
        assert_eq!(fetch_add(&mut w, 2, 0), 40);
        assert_eq!(w, 42);
        let mut w = u64::MAX;
        assert_eq!(fetch_add(&mut w, 3, 0), u64::MAX);
        assert_eq!(w, 2);
        // A carry crosses every byte boundary when nothing is masked.
        let mut w = 0x00FF_FFFF_FFFF_FFFF;
        fetch_add(&mut w, 1, 0);
        assert_eq!(w, 0x0100_0000_0000_0000);
    }

    /// Eight 8-bit lanes: the MSB of each lane is marked, carries out of a lane are dropped.
    #[test]
    fn fetch_add_eight_bit_lanes() {
        let mask = 0x8080_8080_8080_8080;
        let mut w = 0xFF01_7F80_00FE_10FF;
        let orig = fetch_add(&mut w, 0x0101_0180_01FF_F001, mask);
        assert_eq!(orig, 0xFF01_7F80_00FE_10FF);
        // Lane by lane: FF+01=00, 01+01=02, 7F+01=80, 80+80=00, 00+01=01, FE+FF=FD,
        // 10+F0=00, FF+01=00.
        assert_eq!(w, 0x0002_8000_01FD_0000);
    }

    /// Four 16-bit lanes and two 32-bit lanes.
    #[test]
    fn fetch_add_sixteen_and_thirty_two_bit_lanes() {
        let mut w = 0xFFFF_0001_8000_7FFF;
        fetch_add(&mut w, 0x0001_FFFF_8000_0001, 0x8000_8000_8000_8000);
        assert_eq!(w, 0x0000_0000_0000_8000);
        let mut w = 0xFFFF_FFFF_0000_0001;
        fetch_add(&mut w, 0x0000_0002_FFFF_FFFF, 0x8000_0000_8000_0000);
        assert_eq!(w, 0x0000_0001_0000_0000);
        // Unequal lanes: one marked bit at 31 splits a 32-bit low lane from a 32-bit high lane.
        let mut w = 0x0000_0000_FFFF_FFFF;
        fetch_add(&mut w, 1, 0x0000_0000_8000_0000);
        assert_eq!(w, 0);
    }

    /// CmpSwap: full compare and swap, masked compare, masked swap (RFC 7306 §5.1.2,
    /// EXT-5.1.2-1).
    #[test]
    fn cmp_swap_masks() {
        // Full masks: classic compare-and-swap.
        let mut w = 5u64;
        assert_eq!(cmp_swap(&mut w, 9, u64::MAX, 5, u64::MAX), 5);
        assert_eq!(w, 9);
        assert_eq!(cmp_swap(&mut w, 1, u64::MAX, 5, u64::MAX), 9);
        assert_eq!(w, 9, "a failed compare leaves memory unchanged");
        // Compare only the low byte; swap only the high byte.
        let mut w = 0x1100_0000_0000_00AB;
        let orig = cmp_swap(
            &mut w,
            0xEE00_0000_0000_0000,
            0xFF00_0000_0000_0000,
            0x9999_9999_9999_99AB,
            0xFF,
        );
        assert_eq!(orig, 0x1100_0000_0000_00AB);
        assert_eq!(w, 0xEE00_0000_0000_00AB);
        // Compare mask 0 always matches; swap mask 0 changes nothing.
        let mut w = 7;
        assert_eq!(cmp_swap(&mut w, 0, 0, 123, 0), 7);
        assert_eq!(w, 7);
    }

    /// A misaligned target address is 0x0/0x2/0x07 (EXT-5.1.1-2/3/4, EXT-5.1.2-3..6,
    /// EXT-8.2-4, EXT-8.2-5); the rule is on the address the Tagged Offset resolves to, not
    /// on the TO (EXT-5.2.1-2: the TO "MAY start at an arbitrary offset"), so `execute`
    /// runs whatever the TO's low bits. (It refused a TO that was not 8-aligned, and the
    /// engine then worked around proto to accept one naming an aligned word.)
    #[test]
    fn misaligned_address_is_catastrophic_stream_and_the_to_is_not_checked() {
        for addr in [1u64, 2, 4, 7, 0x1004, u64::MAX] {
            assert_eq!(check_alignment(addr), Err(RdmapError::CatastrophicStream));
            let req = AtomicRequestRepr::fetch_add(1, 2, addr, 1, 0);
            let mut w = 77;
            assert_eq!(execute(&req, &mut w), Ok(77));
            assert_eq!(w, 78);
        }
        assert_eq!(
            RdmapError::CatastrophicStream.terminate_code(),
            TerminateCode::new(0, 2, 0x07)
        );
        for addr in [0u64, 8, 0x1000, u64::MAX - 7] {
            assert_eq!(check_alignment(addr), Ok(()));
        }
    }

    /// Unsupported AOpCodes surface an error (EXT-5.2.1-7); our choice is 0x0/0x2/0x06.
    #[test]
    fn unsupported_aopcode() {
        for aop in [1u8, 3, 4, 0xF] {
            let req = AtomicRequestRepr {
                aopcode: aop,
                ..AtomicRequestRepr::fetch_add(1, 2, 8, 1, 0)
            };
            let mut w = 5;
            assert_eq!(execute(&req, &mut w), Err(RdmapError::UnexpectedOpcode));
            assert_eq!(w, 5);
        }
    }

    /// The responder check order: AOpCode, then STag, access and range with the remote
    /// protection codes (EXT-5.2.1-7, EXT-8.2-4, RDMAP-7.2-9..12 by analogy); a TO that is
    /// not 8-aligned is no error here (EXT-5.2.1-2 asks it of the resolved address).
    #[test]
    fn handle_atomic_request_order() {
        use warpcore_proto::rdmap::{AccessRegion, StagFault};
        let rw = AccessRegion {
            base: 0x1000,
            len: 0x100,
            remote_read: true,
            remote_write: true,
        };
        let ok = AtomicRequestRepr::fetch_add(1, 2, 0x10F8, 1, 0);
        assert_eq!(
            handle_atomic_request(&ok, |s| {
                assert_eq!(s, 2);
                Ok(rw)
            }),
            Ok(AtomicOpcode::FetchAdd)
        );
        // The last aligned word is inside, the next one is out of bounds.
        let out = AtomicRequestRepr::fetch_add(1, 2, 0x1100, 1, 0);
        assert_eq!(
            handle_atomic_request(&out, |_| Ok(rw)),
            Err(RdmapError::BaseOrBounds)
        );
        let ro = AccessRegion {
            remote_write: false,
            ..rw
        };
        assert_eq!(
            handle_atomic_request(&ok, |_| Ok(ro)),
            Err(RdmapError::AccessRights)
        );
        assert_eq!(
            handle_atomic_request(&ok, |_| Err(StagFault::Invalid)),
            Err(RdmapError::InvalidStag)
        );
        // A TO that is not 8-aligned passes to the lookup and the range check.
        let mis = AtomicRequestRepr::fetch_add(1, 2, 0x1004, 1, 0);
        assert_eq!(
            handle_atomic_request(&mis, |_| Ok(rw)),
            Ok(AtomicOpcode::FetchAdd)
        );
        // A bad AOpCode is found before the lookup.
        let bad = AtomicRequestRepr { aopcode: 1, ..mis };
        assert_eq!(
            handle_atomic_request(&bad, |_| -> Result<AccessRegion, StagFault> {
                panic!("lookup before the AOpCode check")
            }),
            Err(RdmapError::UnexpectedOpcode)
        );
    }

    /// execute dispatches by AOpCode and the response echoes the Request Identifier.
    #[test]
    fn execute_and_respond() {
        let req = AtomicRequestRepr::fetch_add(0xAB, 2, 16, 10, 0);
        let mut w = 32;
        let orig = execute(&req, &mut w).unwrap();
        assert_eq!((orig, w), (32, 42));
        assert_eq!(
            response(&req, orig),
            AtomicResponseRepr {
                orig_request_id: 0xAB,
                orig_value: 32
            }
        );
        let req = AtomicRequestRepr::cmp_swap(1, 2, 16, 100, u64::MAX, 42, u64::MAX);
        assert_eq!(execute(&req, &mut w), Ok(42));
        assert_eq!(w, 100);
    }

    proptest! {
        #[test]
        fn masked_add_matches_rfc_pseudocode(a in any::<u64>(), b in any::<u64>(), m in any::<u64>()) {
            prop_assert_eq!(masked_add(a, b, m), reference_fetch_add(a, b, m));
        }

        #[test]
        fn cmp_swap_matches_rfc_pseudocode(o in any::<u64>(), sd in any::<u64>(), sm in any::<u64>(),
                                           cd in any::<u64>(), cm in any::<u64>()) {
            let mut w = o;
            prop_assert_eq!(cmp_swap(&mut w, sd, sm, cd, cm), o);
            let expect = if (cd ^ o) & cm == 0 { (o & !sm) | (sd & sm) } else { o };
            prop_assert_eq!(w, expect);
        }
    }
}

// ------------------------------------------------------------------------------------------
// Read Requests, remote access, IRD (RDMAP-5.2.1-*, RDMAP-6.1-*, RDMAP-7.2-6..13)
// ------------------------------------------------------------------------------------------

mod reads {
    use super::*;
    use warpcore_proto::rdmap::*;

    const REGION: AccessRegion = AccessRegion {
        base: 0x1000,
        len: 0x1000,
        remote_read: true,
        remote_write: false,
    };

    fn req(size: u32, src_to: u64) -> ReadRequestRepr {
        ReadRequestRepr {
            sink_stag: 0x11,
            sink_to: 0x5000,
            read_size: size,
            src_stag: 0x22,
            src_to,
        }
    }

    /// RDMAP-5.2.1-13, RDMAP-5.2.1-14: a zero-size request is answered with a zero-length
    /// Read Response and the source is not validated (the lookup is never called).
    #[test]
    fn zero_size_read_skips_validation() {
        let plan = handle_read_request(&req(0, u64::MAX), |_| -> Result<AccessRegion, StagFault> {
            panic!("lookup called for a zero-length Read Request")
        })
        .unwrap();
        assert_eq!(plan.len, 0);
        let seg = plan.segment(0, 0);
        assert!(seg.last);
        assert_eq!(
            seg.buffer,
            DdpBuffer::Tagged {
                stag: 0x11,
                to: 0x5000
            }
        );
        let mut out = [0u8; 14];
        assert_eq!(seg.emit(&mut out), Ok(14));
        assert_eq!(out[..2], [0xC1, 0x42]);
    }

    /// RDMAP-4.4-2, RDMAP-5.2.2-1: the Read Response goes to SinkSTag/SinkTO, TO advancing
    /// per segment, L on the segment that completes RDMARDSZ.
    /// RDMAP-5.2.2-6: every segment of a Read Response names the one sink STag.
    #[test]
    fn read_response_plan_segments() {
        let plan = handle_read_request(&req(3000, 0x1100), |stag| {
            assert_eq!(stag, 0x22);
            Ok(REGION)
        })
        .unwrap();
        assert_eq!(
            plan,
            ReadResponsePlan {
                sink_stag: 0x11,
                sink_to: 0x5000,
                src_stag: 0x22,
                src_to: 0x1100,
                len: 3000
            }
        );
        let first = plan.segment(0, 1486);
        assert!(!first.last);
        assert_eq!(
            first.buffer,
            DdpBuffer::Tagged {
                stag: 0x11,
                to: 0x5000
            }
        );
        let last = plan.segment(2972, 28);
        assert!(last.last);
        assert_eq!(
            last.buffer,
            DdpBuffer::Tagged {
                stag: 0x11,
                to: 0x5000 + 2972
            }
        );
        assert_eq!(plan.terminated_header(0), req(3000, 0x1100));
        assert_eq!(plan.terminated_header(1000).read_size, 2000);
    }

    /// RDMAP-7.2-9..13 with the codes of WIRE-FORMATS §4.5.
    /// RDMAP-7.2-10: a source STag not associated with the stream is refused.
    #[test]
    fn source_validation_error_mapping() {
        let cases: [(Result<AccessRegion, StagFault>, u32, u64, RdmapError); 7] = [
            (Err(StagFault::Invalid), 1, 0x1000, RdmapError::InvalidStag),
            (
                Err(StagFault::NotAssociated),
                1,
                0x1000,
                RdmapError::StagNotAssociated,
            ),
            (
                Ok(AccessRegion {
                    remote_read: false,
                    ..REGION
                }),
                1,
                0x1000,
                RdmapError::AccessRights,
            ),
            (Ok(REGION), 2, u64::MAX, RdmapError::ToWrap),
            (Ok(REGION), 1, 0xFFF, RdmapError::BaseOrBounds),
            (Ok(REGION), 2, 0x1FFF, RdmapError::BaseOrBounds),
            (Ok(REGION), 1, 0x2000, RdmapError::BaseOrBounds),
        ];
        for (lookup, size, to, err) in cases {
            assert_eq!(
                handle_read_request(&req(size, to), |_| lookup),
                Err(err),
                "{size} at {to:#x}"
            );
        }
        // Exactly the whole buffer is fine, and so is the last octet.
        assert!(handle_read_request(&req(0x1000, 0x1000), |_| Ok(REGION)).is_ok());
        assert!(handle_read_request(&req(1, 0x1FFF), |_| Ok(REGION)).is_ok());
        // DDP-7.1-14: a range ending exactly at 2^64 wraps (the 64-bit sum is 0), for RDMAP
        // as for DDP (`to_range_wraps`), so the layers never disagree about it.
        let top = AccessRegion {
            base: u64::MAX - 15,
            len: 16,
            ..REGION
        };
        assert_eq!(
            check_remote_access(Ok(top), u64::MAX - 15, 16, Access::RemoteRead),
            Err(RdmapError::ToWrap)
        );
        assert_eq!(
            check_remote_access(Ok(top), u64::MAX - 15, 15, Access::RemoteRead),
            Ok(())
        );
        // RDMAP-5.2.1-10, DDP-7.1-14: a valid source but a Data Sink range that wraps can
        // never be answered with a Read Response; refused as TO wrap (found by fuzzing).
        let mut wrapping_sink = req(2, 0x1000);
        wrapping_sink.sink_to = u64::MAX;
        assert_eq!(
            handle_read_request(&wrapping_sink, |_| Ok(REGION)),
            Err(RdmapError::ToWrap)
        );
        // A zero-length read is answered whatever its sink TO (RDMAP-5.2.1-11).
        let mut zero = req(0, 0);
        zero.sink_to = u64::MAX;
        assert!(handle_read_request(&zero, |_| Ok(REGION)).is_ok());
        // Atomics need read and write access.
        assert_eq!(
            check_remote_access(Ok(REGION), 0x1000, 8, Access::RemoteAtomic),
            Err(RdmapError::AccessRights)
        );
    }

    /// RDMAP-8.1.1-6: a Write to a buffer without remote write access is a DDP invalid STag
    /// (siw's mapping; RDMAP protection errors cannot come from a Write).
    #[test]
    fn write_access() {
        assert_eq!(
            check_write_access(&REGION),
            Err(DdpError::TaggedInvalidStag)
        );
        let rw = AccessRegion {
            remote_write: true,
            ..REGION
        };
        assert_eq!(check_write_access(&rw), Ok(()));
    }

    /// RDMAP-6.1-5, EXT-5.2.2-3: more inbound requests than IRD is an error (siw: 0x0/0x2/0x07).
    #[test]
    fn ird_enforced() {
        let mut q = InboundReadQueue::new(2);
        assert_eq!(q.admit(), Ok(()));
        assert_eq!(q.admit(), Ok(()));
        assert_eq!(q.admit(), Err(RdmapError::CatastrophicStream));
        assert_eq!(q.outstanding(), 2);
        q.retire();
        assert_eq!(q.admit(), Ok(()));
        let mut zero = InboundReadQueue::new(0);
        assert_eq!(zero.admit(), Err(RdmapError::CatastrophicStream));
        zero.retire();
        assert_eq!(zero.outstanding(), 0);
    }

    /// RDMAP-5.3-11, RDMAP-5.3-12, RDMAP-7.2-4, RDMAP-7.2-5: "STag cannot be invalidated",
    /// protection or operation flavour.
    #[test]
    fn invalidate_errors() {
        assert_eq!(
            invalidate_error(InvalidateFault::NotAssociated).terminate_code(),
            TerminateCode::new(0, 1, 0x09)
        );
        assert_eq!(
            invalidate_error(InvalidateFault::Invalid).terminate_code(),
            TerminateCode::new(0, 2, 0x09)
        );
        assert_eq!(
            invalidate_error(InvalidateFault::NotInvalidatable).terminate_code(),
            TerminateCode::new(0, 2, 0x09)
        );
    }

    /// RDMAP-7.2-2 / EXT-8.2-2: RFC 7306 opcodes need agreement; control messages must be
    /// whole in one segment.
    #[test]
    fn inbound_checks() {
        let imm = SegmentRepr {
            last: true,
            buffer: untagged(0, 1, 0),
            opcode: Opcode::ImmediateData,
            header: RdmapHeader::ImmediateData(ImmediateDataRepr::default()),
        };
        let none = RdmapConfig::default();
        let all = RdmapConfig {
            atomics: true,
            immediate_data: true,
        };
        assert_eq!(
            check_inbound(&imm, &none),
            Err(RdmapError::UnexpectedOpcode.into())
        );
        assert_eq!(check_inbound(&imm, &all), Ok(()));
        let split = SegmentRepr { last: false, ..imm };
        assert_eq!(
            check_inbound(&split, &all),
            Err(RdmapError::CatastrophicStream.into())
        );
        let late = SegmentRepr {
            buffer: untagged(0, 1, 8),
            ..imm
        };
        assert_eq!(
            check_inbound(&late, &all),
            Err(RdmapError::CatastrophicStream.into())
        );
        let send = SegmentRepr {
            last: false,
            buffer: untagged(0, 1, 4096),
            opcode: Opcode::Send,
            header: RdmapHeader::None,
        };
        assert_eq!(check_inbound(&send, &none), Ok(()));
        let ares = SegmentRepr {
            last: true,
            buffer: untagged(3, 1, 0),
            opcode: Opcode::AtomicResponse,
            header: RdmapHeader::AtomicResponse(AtomicResponseRepr::default()),
        };
        assert_eq!(
            check_inbound(
                &ares,
                &RdmapConfig {
                    atomics: false,
                    immediate_data: true
                }
            ),
            Err(RdmapError::UnexpectedOpcode.into())
        );
    }
}

// ------------------------------------------------------------------------------------------
// Terminate construction and decoding (RDMAP-4.8-*, RDMAP-5.4-*, RDMAP-7.1-*, EXT-8.1-*)
// ------------------------------------------------------------------------------------------

mod terminates {
    use super::*;
    use warpcore_proto::rdmap::terminate::*;
    use warpcore_proto::rdmap::TerminateReport;

    fn all_errors() -> Vec<ProtocolError> {
        use DdpError as D;
        use MpaError as M;
        use RdmapError as R;
        let r = [
            R::LocalCatastrophic,
            R::InvalidStag,
            R::BaseOrBounds,
            R::AccessRights,
            R::StagNotAssociated,
            R::ToWrap,
            R::ProtectionCannotInvalidate,
            R::ProtectionUnspecified,
            R::InvalidVersion,
            R::UnexpectedOpcode,
            R::CatastrophicStream,
            R::CatastrophicGlobal,
            R::OperationCannotInvalidate,
            R::OperationUnspecified,
        ];
        let d = [
            D::LocalCatastrophic,
            D::TaggedInvalidStag,
            D::TaggedBaseOrBounds,
            D::TaggedStagNotAssociated,
            D::TaggedToWrap,
            D::TaggedInvalidVersion,
            D::UntaggedInvalidQn,
            D::UntaggedNoBuffer,
            D::UntaggedMsnOutOfRange,
            D::UntaggedInvalidMo,
            D::UntaggedTooLong,
            D::UntaggedInvalidVersion,
        ];
        let m = [
            M::TcpLost,
            M::CrcMismatch,
            M::MarkerMismatch,
            M::InvalidStartupFrame,
            M::LocalCatastrophic,
            M::InsufficientIrd,
            M::NoMatchingRtr,
        ];
        r.iter()
            .map(|&e| e.into())
            .chain(d.iter().map(|&e| e.into()))
            .chain(m.iter().map(|&e| e.into()))
            .collect()
    }

    /// A tagged Write of 100 octets, an untagged Send with Invalidate of 5 octets and a Read
    /// Request of 4096 octets, as offending segments.
    fn write_segment() -> Vec<u8> {
        let mut b = hex("C1 40 00 00 12 34 00 00 00 00 00 00 80 00");
        b.extend_from_slice(&[0x5A; 100]);
        b
    }
    fn send_inv_segment() -> Vec<u8> {
        hex("41 44 00 00 BE EF 00 00 00 00 00 00 00 09 00 00 00 00 01 02 03 04 05")
    }
    fn read_request_segment() -> Vec<u8> {
        hex("41 41 00 00 00 00 00 00 00 01 00 00 00 03 00 00 00 00 \
             00 00 00 11 00 00 00 00 00 00 50 00 00 00 10 00 \
             00 00 00 22 00 00 00 00 00 00 18 00")
    }

    /// WIRE-FORMATS §6.4: the "no matching RTR" Terminate, byte for byte (MPA2-8,
    /// RDMAP-5.4-2).
    #[test]
    fn vector_no_matching_rtr() {
        let mut buf = [0u8; TERMINATE_SEGMENT_MAX_LEN];
        let n = emit_terminate(MpaError::NoMatchingRtr.into(), None, &mut buf).unwrap();
        assert_eq!(
            buf[..n].to_vec(),
            hex("41 47 00 00 00 00 00 00 00 02 00 00 00 01 00 00 00 00 20 07 00 00")
        );
        // An LLP error carries no header even if an offending segment is given.
        let w = write_segment();
        let n = emit_terminate(
            MpaError::CrcMismatch.into(),
            Some(&Offending::new(&w)),
            &mut buf,
        )
        .unwrap();
        assert_eq!(n, 22);
    }

    /// A DDP error on a tagged Write: M = D = 1, 14-octet copied header, DDP Segment Length =
    /// payload length as siw sends it (WIRE-FORMATS §4.6.7 item 3), R = 0.
    #[test]
    fn ddp_error_on_tagged_write() {
        let w = write_segment();
        let mut buf = [0u8; TERMINATE_SEGMENT_MAX_LEN];
        let n = emit_terminate(
            DdpError::TaggedBaseOrBounds.into(),
            Some(&Offending::new(&w)),
            &mut buf,
        )
        .unwrap();
        let mut expect =
            hex("41 47 00 00 00 00 00 00 00 02 00 00 00 01 00 00 00 00 11 01 C0 00 00 64");
        expect.extend_from_slice(&w[..14]);
        assert_eq!(buf[..n].to_vec(), expect);
    }

    /// RFC 7306 §8.1 rule 2 (EXT-8.1-2): an Atomic Request, Atomic Response or Immediate
    /// Data message that RDMAP refuses once DDP delivered it names itself by its DDP header
    /// whatever the error, the unexpected opcode of an unsupported AOpCode (EXT-5.2.1-7) or
    /// of an unsolicited Atomic Response included, and never by an RDMA header;
    /// `terminate_header_delivered` gives that, and for every other message, a local
    /// catastrophic error or an invalid RDMAP version exactly what `terminate_header` gives.
    /// (`terminate_header` copies no header for an unexpected opcode; that Terminate was
    /// all the engine sent for those two refusals.)
    #[test]
    fn ext_8_1_2_a_delivered_rfc7306_message_copies_its_ddp_header() {
        // An Atomic Request (FetchAdd with the reserved AOpCode 1) on QN 1 MSN 3, an Atomic
        // Response on QN 3 MSN 1 and Immediate Data on QN 0 MSN 2.
        let mut request = hex("41 4A 00 00 00 00 00 00 00 01 00 00 00 03 00 00 00 00");
        request.extend_from_slice(&hex("00 00 00 01 00 00 00 07 00 00 12 34"));
        request.extend_from_slice(&[0; 40]);
        let mut response = hex("41 4B 00 00 00 00 00 00 00 03 00 00 00 01 00 00 00 00");
        response.extend_from_slice(&[0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0, 5]);
        let mut immediate = hex("41 48 00 00 00 00 00 00 00 00 00 00 00 02 00 00 00 00");
        immediate.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        for m in [&request, &response, &immediate] {
            let off = Offending::new(m);
            for e in [RdmapError::UnexpectedOpcode, RdmapError::CatastrophicStream] {
                let t = terminate_header_delivered(e.into(), Some(&off));
                let (len, copied) = t.ddp.expect("the DDP header");
                assert_eq!((copied.as_bytes(), len), (&m[..18], 0), "{e:?}");
                assert!(t.m && !t.r_bit && t.rdma.is_none(), "{e:?}");
            }
            // A remote protection error (the atomic's target STag) as before.
            let e = RdmapError::InvalidStag.into();
            assert_eq!(
                terminate_header_delivered(e, Some(&off)),
                terminate_header(e, Some(&off))
            );
            // The codes that copy nothing still copy nothing.
            for e in [RdmapError::LocalCatastrophic, RdmapError::InvalidVersion] {
                assert!(terminate_header_delivered(e.into(), Some(&off))
                    .ddp
                    .is_none());
            }
            let mut buf = [0u8; TERMINATE_SEGMENT_MAX_LEN];
            let n =
                emit_terminate_delivered(RdmapError::UnexpectedOpcode.into(), Some(&off), &mut buf)
                    .unwrap();
            assert_eq!(n, 18 + 4 + 2 + 18);
        }
        // The same Atomic Request with T = 1 (the buffer model wrong for the opcode,
        // RDMAP-7.2-2): refused by the decode, not delivered, so the rule of its error.
        let mut tagged = request.clone();
        tagged[0] |= 0x80;
        let e = RdmapError::UnexpectedOpcode.into();
        assert!(
            terminate_header_delivered(e, Some(&Offending::new(&tagged)))
                .ddp
                .is_none()
        );
        // Any other message: exactly `terminate_header`.
        for m in [write_segment(), send_inv_segment(), read_request_segment()] {
            let off = Offending::new(&m);
            for e in all_errors() {
                assert_eq!(
                    terminate_header_delivered(e, Some(&off)),
                    terminate_header(e, Some(&off)),
                    "{e:?}"
                );
            }
        }
        assert_eq!(
            terminate_header_delivered(RdmapError::UnexpectedOpcode.into(), None),
            terminate_header(RdmapError::UnexpectedOpcode.into(), None)
        );
    }

    /// RDMAP-7.1-3, RDMAP-06 Figure 10 (remote operation error: DDP header "yes, if
    /// possible"): a Read Response that DDP delivered and RDMAP refuses as unexpected (it
    /// answers no outstanding Read, RDMAP-5.2.2-4; docs/engine.md departure 3) is a message
    /// of a known layout, so its Terminate names it by its DDP header and segment length, on
    /// every stream, with no RDMA header. Before the fix the 0/2/06 Terminate copied
    /// nothing, as for an opcode whose layout is unknown. An undefined opcode, and a Read
    /// Response whose T bit is wrong (refused by the decode), still copy nothing.
    #[test]
    fn rdmap_7_1_3_an_unexpected_read_response_copies_its_ddp_header() {
        // A Read Response (opcode 0x2, T = 1, L = 1) of 6 octets to STag 0x1234, TO 0x100.
        let mut rresp = hex("C1 42 00 00 12 34 00 00 00 00 00 00 01 00");
        rresp.extend_from_slice(&[0xA5; 6]);
        let e: ProtocolError = RdmapError::UnexpectedOpcode.into();
        let off = Offending::new(&rresp);
        for t in [
            terminate_header(e, Some(&off)),
            terminate_header_delivered(e, Some(&off)),
        ] {
            assert_eq!(t.code, TerminateCode::new(0, 2, 6));
            let (len, copied) = t.ddp.expect("the Read Response's DDP header");
            assert_eq!((copied.as_bytes(), len), (&rresp[..14], 6));
            assert!(t.m && !t.r_bit && t.rdma.is_none());
        }
        let mut buf = [0u8; TERMINATE_SEGMENT_MAX_LEN];
        let n = emit_terminate(e, Some(&off), &mut buf).unwrap();
        let mut expect =
            hex("41 47 00 00 00 00 00 00 00 02 00 00 00 01 00 00 00 00 02 06 C0 00 00 06");
        expect.extend_from_slice(&rresp[..14]);
        assert_eq!(buf[..n].to_vec(), expect);
        // Not decodable as a Read Response: the layout is unknown, nothing copied.
        let mut undefined = rresp.clone();
        undefined[1] = 0x4C;
        let mut untagged = rresp.clone();
        untagged[0] &= !0x80;
        for m in [&undefined, &untagged] {
            assert!(terminate_header(e, Some(&Offending::new(m))).ddp.is_none());
        }
    }

    /// A remote operation error on a Send: untagged 18-octet header, no RDMA header.
    #[test]
    fn operation_error_on_send() {
        let s = send_inv_segment();
        let t = terminate_header(
            RdmapError::OperationCannotInvalidate.into(),
            Some(&Offending::new(&s)),
        );
        assert!(t.m && !t.r_bit && t.rdma.is_none());
        let (len, copied) = t.ddp.unwrap();
        assert_eq!(len, 5);
        assert_eq!(copied.as_bytes(), &s[..18]);
        // A protection error on a Send with Invalidate: R stays clear (RDMAP-4.8-11).
        let t = terminate_header(
            RdmapError::ProtectionCannotInvalidate.into(),
            Some(&Offending::new(&s)),
        );
        assert!(t.ddp.is_some() && !t.r_bit && t.rdma.is_none());
    }

    /// RDMAP-7.1-4, RDMAP-4.8 progress rule: a protection error on a Read Request copies
    /// both headers, the RDMA header advanced by what was already sent; 4+2+18+28 = 52.
    #[test]
    fn protection_error_on_read_request() {
        let r = read_request_segment();
        let mut buf = [0u8; TERMINATE_SEGMENT_MAX_LEN];
        let off = Offending {
            ulpdu: &r,
            read_progress: 0x800,
        };
        let n = emit_terminate(RdmapError::BaseOrBounds.into(), Some(&off), &mut buf).unwrap();
        assert_eq!(n, 70);
        let mut expect =
            hex("41 47 00 00 00 00 00 00 00 02 00 00 00 01 00 00 00 00 01 01 E0 00 00 00");
        expect.extend_from_slice(&r[..18]);
        expect.extend_from_slice(&hex(
            "00 00 00 11 00 00 00 00 00 00 58 00 00 00 08 00 00 00 00 22 00 00 00 00 00 00 20 00",
        ));
        assert_eq!(buf[..n].to_vec(), expect);
        // A remote operation error on a Read Request carries no RDMA header (Figure 10).
        let t = terminate_header(RdmapError::CatastrophicStream.into(), Some(&off));
        assert!(t.ddp.is_some() && t.rdma.is_none() && !t.r_bit);
    }

    /// No copied header for invalid versions and unexpected opcodes, as siw (WIRE-FORMATS
    /// §4.6.7 item 4), nor for local errors (RDMAP-7.1-2, EXT-8.1-1).
    #[test]
    fn errors_without_copied_headers() {
        let w = write_segment();
        for e in [
            ProtocolError::from(RdmapError::InvalidVersion),
            RdmapError::UnexpectedOpcode.into(),
            RdmapError::LocalCatastrophic.into(),
            DdpError::TaggedInvalidVersion.into(),
            DdpError::UntaggedInvalidVersion.into(),
            DdpError::LocalCatastrophic.into(),
        ] {
            let t = terminate_header(e, Some(&Offending::new(&w)));
            assert_eq!(
                (t.m, t.ddp, t.r_bit, t.rdma),
                (false, None, false, None),
                "{e}"
            );
            assert_eq!(t.buffer_len(), 4);
        }
        // RdmapError::LocalCatastrophic goes out with code 0xFF, as siw sends it.
        let t = terminate_header(RdmapError::LocalCatastrophic.into(), None);
        assert_eq!(t.code, TerminateCode::new(0, 0, 0xFF));
        // An offending segment too short for its DDP header cannot be copied.
        let t = terminate_header(
            DdpError::UntaggedNoBuffer.into(),
            Some(&Offending::new(&w[..3])),
        );
        assert!(t.ddp.is_none());
    }

    /// Build → emit → parse → decode for every ProtocolError, with no, a tagged, an untagged
    /// and a Read Request offending segment (RDMAP-4.8-*, RDMAP-5.4-5).
    #[test]
    fn round_trip_every_error() {
        let segments = [write_segment(), send_inv_segment(), read_request_segment()];
        for e in all_errors() {
            for off in [None, Some(0), Some(1), Some(2)] {
                let offending = off.map(|i: usize| Offending::new(&segments[i]));
                let mut buf = [0u8; TERMINATE_SEGMENT_MAX_LEN];
                let n = emit_terminate(e, offending.as_ref(), &mut buf).unwrap();
                let seg = Segment::parse(&buf[..n]).unwrap();
                assert_eq!(seg.repr.buffer, untagged(2, 1, 0));
                assert!(seg.repr.last && seg.payload.is_empty());
                let RdmapHeader::Terminate(t) = seg.repr.header else {
                    panic!("not a Terminate");
                };
                assert_eq!(t, terminate_header(e, offending.as_ref()));
                let report = TerminateReport::decode(&t);
                assert_eq!(report.error, Some(e), "{e}");
                if let (Some(o), Some(ddp)) = (offending, report.ddp) {
                    let orig = Segment::parse(o.ulpdu).unwrap();
                    assert_eq!(ddp.buffer, orig.repr.buffer, "{e}");
                    assert_eq!(report.opcode, Some(orig.repr.opcode));
                    assert_eq!(
                        usize::from(report.ddp_segment_len.unwrap()),
                        orig.payload.len()
                    );
                    if let RdmapHeader::ReadRequest(rr) = orig.repr.header {
                        let protection = matches!(
                            e,
                            ProtocolError::Rdmap(r) if r.is_protection()
                        );
                        assert_eq!(report.read_request, protection.then_some(rr), "{e}");
                    } else {
                        assert_eq!(report.read_request, None);
                    }
                } else {
                    assert_eq!((report.ddp, report.read_request), (None, None));
                }
            }
        }
    }

    /// Linux siw sets R on a protection error for a Send with Invalidate without appending an
    /// RDMA header; we decode it without inventing one (WIRE-FORMATS §4.6.6), also when zero
    /// fill follows.
    #[test]
    fn decode_siw_r_without_rdma_header() {
        let s = send_inv_segment();
        let mut b = hex("41 47 00 00 00 00 00 00 00 02 00 00 00 01 00 00 00 00 01 09 E0 00 00 05");
        b.extend_from_slice(&s[..18]);
        let seg = Segment::parse(&b).unwrap();
        let RdmapHeader::Terminate(t) = seg.repr.header else {
            panic!()
        };
        assert!(t.r_bit && t.rdma.is_none());
        let rep = TerminateReport::decode(&t);
        assert_eq!(
            rep.error,
            Some(RdmapError::ProtectionCannotInvalidate.into())
        );
        assert_eq!(rep.opcode, Some(Opcode::SendInvalidate));
        assert_eq!(rep.ddp_segment_len, Some(5));
        assert_eq!(rep.read_request, None);
        let line = rep.to_string();
        assert!(line.contains("layer 0x0 type 0x1 code 0x09"), "{line}");
        assert!(
            line.contains("Send with Invalidate") && line.contains("msn 9"),
            "{line}"
        );
        // With 28 octets of zero fill the view sees an "RDMA header", the report does not.
        b.extend_from_slice(&[0u8; 28]);
        let seg = Segment::parse(&b).unwrap();
        let RdmapHeader::Terminate(t) = seg.repr.header else {
            panic!()
        };
        assert!(t.rdma.is_some());
        assert_eq!(TerminateReport::decode(&t).read_request, None);
    }

    proptest! {
        /// Any error with any offending octets builds a Terminate that parses back.
        #[test]
        fn terminate_from_arbitrary_offending(
            idx in 0usize..33,
            ulpdu in prop::collection::vec(any::<u8>(), 0..80),
            progress in any::<u32>(),
        ) {
            let e = all_errors()[idx];
            let off = Offending { ulpdu: &ulpdu, read_progress: progress };
            let mut buf = [0u8; TERMINATE_SEGMENT_MAX_LEN];
            let n = emit_terminate(e, Some(&off), &mut buf).unwrap();
            let seg = Segment::parse(&buf[..n]).unwrap();
            prop_assert_eq!(seg.repr.header, RdmapHeader::Terminate(terminate_header(e, Some(&off))));
        }
    }
}

/// A Terminate whose HdrCt bits announce headers the segment does not hold is refused by
/// the strict header parser (RDMAP-4.8-9/10), but its control word still tells the peer's
/// verdict (RDMAP-5.4-5): `warpcore_proto::rdmap::TerminateReport::decode_control_word`.
#[test]
fn control_word_of_a_terminate_claiming_absent_headers() {
    // M, D and R set, nothing after the control word; then a cut untagged DDP part.
    for header in [
        &[0x02u8, 0x07, 0xE0, 0x00][..],
        &[0x02, 0x07, 0xC0, 0x00, 0x00, 0x05, 0x41, 0x43, 0x00][..],
    ] {
        assert!(
            warpcore_proto::wire::rdmap::TerminateRepr::parse_bytes(header).is_err(),
            "{header:02x?}"
        );
        let r = warpcore_proto::rdmap::TerminateReport::decode_control_word(header)
            .expect("control word");
        assert_eq!(
            r.code,
            warpcore_proto::error::TerminateCode::new(0, 2, 0x07)
        );
        assert_eq!(
            r.error,
            Some(warpcore_proto::error::RdmapError::CatastrophicStream.into())
        );
        assert_eq!(
            (r.ddp, r.ddp_segment_len, r.read_request),
            (None, None, None)
        );
    }
    assert_eq!(
        warpcore_proto::rdmap::TerminateReport::decode_control_word(&[0x02, 0x07, 0xE0]),
        None
    );
}
