//! DDP wire format, segmentation and receive validation (draft-ietf-rddp-ddp-04).
//!
//! Test names and comments cite REQUIREMENTS.md IDs; byte vectors come from WIRE-FORMATS.md
//! §3, §4.4, §6.4 and §7.4.

use proptest::prelude::*;
use warpcore_proto::ddp::{
    DdpReceiver, DdpSender, Placement, SegmentationError, Segmenter, TaggedBuffers, TaggedFault,
    TaggedRegion, TxSegment, UntaggedBuffers, MAX_SEGMENT_HEADER_LEN, MAX_ULP_HEADER_LEN,
    QUEUE_COUNT,
};
use warpcore_proto::error::DdpError;
use warpcore_proto::wire::ddp::{
    DdpBuffer, DdpRepr, DdpSegment, DDP_VERSION, MAX_HEADER_LEN, TAGGED_HEADER_LEN,
    UNTAGGED_HEADER_LEN,
};
use warpcore_proto::wire::Error as WireError;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn untagged(last: bool, rsvd_ulp: u8, rsvd_ulp2: u32, qn: u32, msn: u32, mo: u32) -> DdpRepr {
    DdpRepr {
        last,
        version: DDP_VERSION,
        rsvd_ulp,
        buffer: DdpBuffer::Untagged {
            rsvd_ulp2,
            qn,
            msn,
            mo,
        },
    }
}

fn tagged(last: bool, rsvd_ulp: u8, stag: u32, to: u64) -> DdpRepr {
    DdpRepr {
        last,
        version: DDP_VERSION,
        rsvd_ulp,
        buffer: DdpBuffer::Tagged { stag, to },
    }
}

/// A whole DDP segment: the header of `repr` then `payload`.
fn segment(repr: &DdpRepr, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![0u8; repr.buffer_len() + payload.len()];
    repr.emit(&mut DdpSegment::new_unchecked(&mut v[..]));
    v[repr.buffer_len()..].copy_from_slice(payload);
    v
}

/// Runs a segmenter to the end, returning each segment's descriptor and its ULPDU bytes.
fn run(seg: &mut Segmenter, data: &[u8]) -> Vec<(TxSegment, Vec<u8>)> {
    let mut out = Vec::new();
    let mut hdr = [0u8; MAX_SEGMENT_HEADER_LEN];
    loop {
        let expected_len = seg.next_ulpdu_len();
        let Some(s) = seg.next_segment(&mut hdr).unwrap() else {
            assert_eq!(expected_len, None);
            break;
        };
        assert_eq!(expected_len, Some(s.ulpdu_len()));
        let mut bytes = hdr[..s.header_len].to_vec();
        bytes.extend_from_slice(&data[s.payload_offset as usize..][..s.payload_len as usize]);
        assert_eq!(bytes.len(), s.ulpdu_len());
        out.push((s, bytes));
    }
    assert!(seg.is_done());
    out
}

// ---------------------------------------------------------------------------------------
// Wire format: byte-exact
// ---------------------------------------------------------------------------------------

/// WIRE-FORMATS §3.1: D+0 is C1/81/41/01 for tagged-last, tagged, untagged-last, untagged
/// (DDP-4.1-1..4, DDP-4.1-8 reserved bits zero, DDP-4.1-9 DV = 1).
#[test]
fn control_octet_table_3_1() {
    let cases = [
        (tagged(true, 0x40, 0, 0), 0xC1u8),
        (tagged(false, 0x40, 0, 0), 0x81),
        (untagged(true, 0x43, 0, 0, 1, 0), 0x41),
        (untagged(false, 0x43, 0, 0, 1, 0), 0x01),
    ];
    for (repr, octet) in cases {
        let bytes = segment(&repr, &[]);
        assert_eq!(bytes[0], octet, "{repr:?}");
        assert_eq!(bytes[1], repr.rsvd_ulp);
        let view = DdpSegment::new_checked(&bytes[..]).unwrap();
        assert_eq!(view.control(), octet);
        assert_eq!(view.rsvd(), 0);
        assert_eq!(view.version(), 1);
    }
}

/// WIRE-FORMATS §3.2: tagged header layout, 14 octets (DDP-4.2-1).
#[test]
fn tagged_header_layout_3_2() {
    let repr = tagged(false, 0x42, 0x1122_3344, 0x0102_0304_0506_0708);
    let bytes = segment(&repr, &[0xEE, 0xFF]);
    assert_eq!(bytes, hex("81 42 11223344 0102030405060708 EEFF"));
    let view = DdpSegment::new_checked(&bytes[..]).unwrap();
    assert_eq!(view.header_len(), TAGGED_HEADER_LEN);
    assert_eq!(view.header(), &bytes[..14]);
    assert_eq!(view.stag(), Some(0x1122_3344));
    assert_eq!(view.to(), Some(0x0102_0304_0506_0708));
    assert_eq!(view.payload(), &[0xEE, 0xFF]);
    assert_eq!(DdpRepr::parse(&view).unwrap(), repr);
}

/// WIRE-FORMATS §3.3: untagged header layout, 18 octets (DDP-4.3-1), RsvdULP[8:39] at D+2.
#[test]
fn untagged_header_layout_3_3() {
    let repr = untagged(true, 0x44, 0xAABB_CCDD, 0, 0x0102_0304, 0x0A0B_0C0D);
    let bytes = segment(&repr, b"xy");
    assert_eq!(bytes, hex("41 44 AABBCCDD 00000000 01020304 0A0B0C0D 7879"));
    let view = DdpSegment::new_checked(&bytes[..]).unwrap();
    assert_eq!(view.header_len(), UNTAGGED_HEADER_LEN);
    assert_eq!(view.rsvd_ulp2(), Some(0xAABB_CCDD));
    assert_eq!(view.qn(), Some(0));
    assert_eq!(view.msn(), Some(0x0102_0304));
    assert_eq!(view.mo(), Some(0x0A0B_0C0D));
    assert_eq!(view.payload(), b"xy");
    assert_eq!(DdpRepr::parse(&view).unwrap(), repr);
}

/// Setters address the right octets and leave the others alone.
#[test]
fn setters_write_their_fields_only() {
    let mut bytes = [0u8; 20];
    let mut view = DdpSegment::new_unchecked(&mut bytes[..]);
    view.set_tagged(false);
    view.set_last(true);
    view.set_version(1);
    view.set_rsvd(0xF);
    view.set_rsvd_ulp(0x46);
    view.set_rsvd_ulp2(0xDEAD_BEEF);
    view.set_qn(2);
    view.set_msn(3);
    view.set_mo(4);
    view.payload_mut().copy_from_slice(&[9, 9]);
    assert_eq!(
        bytes.to_vec(),
        hex("7D 46 DEADBEEF 00000002 00000003 00000004 0909")
    );
    let mut view = DdpSegment::new_unchecked(&mut bytes[..]);
    view.set_rsvd(0);
    view.set_tagged(true);
    view.set_stag(5);
    view.set_to(6);
    assert_eq!(
        bytes.to_vec(),
        hex("C1 46 00000005 0000000000000006 00000004 0909")
    );
}

/// The DDP segments of the WIRE-FORMATS §6.4 RTR messages and the §7.4 mpa-08 vectors
/// (ULPDU only, without MPA length/CRC), produced by the segmenter.
#[test]
fn wire_formats_vectors_from_the_segmenter() {
    let mut sender = DdpSender::new();
    // §6.4 C: zero-length RDMA Write, 14 octets, STag 0 / TO 0 as siw sends them.
    let mut s = sender.tagged(0x40, 0, 0, &[], 0, 1000).unwrap();
    let segs = run(&mut s, &[]);
    assert_eq!(segs.len(), 1);
    assert_eq!(segs[0].1, hex("C140 00000000 0000000000000000"));
    // §6.4: zero-length Read Response, 14 octets.
    let mut s = sender.tagged(0x42, 0, 0, &[], 0, 1000).unwrap();
    assert_eq!(run(&mut s, &[])[0].1, hex("C142 00000000 0000000000000000"));
    // §6.4 B: zero-length Send, QN 0, MSN 1, 18 octets.
    let mut s = sender.untagged(0x43, 0, 0, &[], 0, 1000).unwrap();
    assert_eq!(
        run(&mut s, &[])[0].1,
        hex("4143 00000000 00000000 00000001 00000000")
    );
    // §6.4 D: zero-length Read Request, QN 1, MSN 1, 28-octet RDMAP header: ULPDU 46.
    let mut s = sender.untagged(0x41, 0, 1, &[0u8; 28], 0, 1000).unwrap();
    let segs = run(&mut s, &[]);
    assert_eq!(segs.len(), 1);
    let mut want = hex("4141 00000000 00000001 00000001 00000000");
    want.extend_from_slice(&[0u8; 28]);
    assert_eq!(segs[0].1, want);
    assert_eq!(segs[0].1.len(), 0x2E);
    // §6.4: Terminate "no matching RTR", QN 2, MSN 1, header 20 07 00 00: ULPDU 22.
    let mut s = sender
        .untagged(0x47, 0, 2, &hex("20070000"), 0, 1000)
        .unwrap();
    let segs = run(&mut s, &[]);
    assert_eq!(
        segs[0].1,
        hex("4147 00000000 00000002 00000001 00000000 20070000")
    );
    assert_eq!(segs[0].1.len(), 0x16);
    // §7.4 vectors 1 and 2: two Sends of 24 zero octets, MSN 1 then 2 (ULPDU 42 each).
    let mut fresh = DdpSender::new();
    for msn in [1u32, 2] {
        let mut s = fresh.untagged(0x43, 0, 0, &[], 24, 1000).unwrap();
        let segs = run(&mut s, &[0u8; 24]);
        let mut want = hex("4143 00000000 00000000");
        want.extend_from_slice(&msn.to_be_bytes());
        want.extend_from_slice(&[0u8; 4 + 24]);
        assert_eq!(segs[0].1, want);
        assert_eq!(segs[0].1.len(), 42);
    }
}

/// WIRE-FORMATS §4.4: the ULPDU length of each message kind, as the segmenter builds it
/// from the RDMAP header length (the RDMAP header rides at the start of the untagged
/// payload, D+18).
#[test]
fn per_message_ulpdu_lengths_4_4() {
    let mut sender = DdpSender::new();
    // (control, qn or None for tagged, RDMAP header length, data length, ULPDU length)
    let table: [(u8, Option<u32>, usize, u32, usize); 10] = [
        (0x40, None, 0, 100, 14 + 100),    // RDMA Write
        (0x42, None, 0, 0, 14),            // zero-length Read Response
        (0x43, Some(0), 0, 100, 18 + 100), // Send
        (0x43, Some(0), 0, 0, 18),         // zero-length Send
        (0x41, Some(1), 28, 0, 46),        // Read Request
        (0x47, Some(2), 4, 0, 22),         // shortest Terminate
        (0x47, Some(2), 52, 0, 70),        // longest Terminate
        (0x48, Some(0), 8, 0, 26),         // Immediate Data
        (0x4A, Some(1), 52, 0, 70),        // Atomic Request
        (0x4B, Some(3), 12, 0, 30),        // Atomic Response
    ];
    for (control, qn, hlen, dlen, ulpdu) in table {
        let ulp = vec![0x77u8; hlen];
        let mut s = match qn {
            None => sender.tagged(control, 1, 0, &ulp, dlen, 1500).unwrap(),
            Some(qn) => sender.untagged(control, 0, qn, &ulp, dlen, 1500).unwrap(),
        };
        let segs = run(&mut s, &vec![0u8; dlen as usize]);
        assert_eq!(segs.len(), 1);
        assert_eq!(segs[0].1.len(), ulpdu, "opcode {control:#x}");
        assert_eq!(segs[0].1[1], control);
        let d = if qn.is_some() { 18 } else { 14 };
        assert_eq!(&segs[0].1[d..d + hlen], &ulp[..]);
    }
}

/// DDP-4.1-8: reserved bits are not checked on receive.
#[test]
fn reserved_control_bits_are_not_checked() {
    let mut bytes = segment(&untagged(true, 0x43, 0, 0, 1, 0), b"hi");
    bytes[0] |= 0x3C;
    let view = DdpSegment::new_checked(&bytes[..]).unwrap();
    assert_eq!(view.rsvd(), 0xF);
    assert_eq!(
        DdpRepr::parse(&view).unwrap(),
        untagged(true, 0x43, 0, 0, 1, 0)
    );
    let mut rx = DdpReceiver::new(DDP_VERSION);
    let q = ToyQueues::with_buffers(&[(0, 100)]);
    let p = rx.handle_segment(&bytes, &ToyMem::default(), &q).unwrap();
    assert!(matches!(p, Some(Placement::Untagged(_))));
}

/// new_checked reads T first, then wants 14 (tagged) or 18 (untagged) octets.
#[test]
fn new_checked_length_depends_on_t() {
    assert_eq!(
        DdpSegment::new_checked(&[][..]).unwrap_err(),
        WireError::Truncated
    );
    for len in 1..MAX_HEADER_LEN + 2 {
        let mut b = vec![0u8; len];
        b[0] = 0x81;
        assert_eq!(DdpSegment::new_checked(&b[..]).is_ok(), len >= 14, "{len}");
        b[0] = 0x01;
        assert_eq!(DdpSegment::new_checked(&b[..]).is_ok(), len >= 18, "{len}");
    }
}

// ---------------------------------------------------------------------------------------
// Segmentation
// ---------------------------------------------------------------------------------------

/// DDP-04 §5.2 worked example, untagged: 2048 octets, MULPDU 1500 → MO 0 with 1482
/// octets, MO 1482 with 566 (DDP-5.2-2, DDP-5.2-6, DDP-4.3-11).
#[test]
fn ddp_5_2_example_untagged() {
    let data: Vec<u8> = (0..2048u32).map(|i| i as u8).collect();
    let mut sender = DdpSender::new();
    let mut s = sender.untagged(0x43, 0, 0, &[], 2048, 1500).unwrap();
    let segs = run(&mut s, &data);
    assert_eq!(segs.len(), 2);
    let got: Vec<_> = segs
        .iter()
        .map(|(s, b)| match s.repr.buffer {
            DdpBuffer::Untagged { mo, msn, .. } => (mo, msn, s.payload_len, s.last(), b.len()),
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(got, [(0, 1, 1482, false, 1500), (1482, 1, 566, true, 584)]);
}

/// DDP-04 §5.2 worked example, tagged: 2048 octets at TO 16384, MULPDU 1500 → TO 16384
/// with 1486, TO 17870 with 562 (DDP-5.2-7, DDP-5.2-8).
#[test]
fn ddp_5_2_example_tagged() {
    let data = vec![0x5Au8; 2048];
    let mut s = DdpSender::new()
        .tagged(0x40, 0x1234, 16384, &[], 2048, 1500)
        .unwrap();
    let segs = run(&mut s, &data);
    let got: Vec<_> = segs
        .iter()
        .map(|(s, _)| match s.repr.buffer {
            DdpBuffer::Tagged { stag, to } => (stag, to, s.payload_len, s.last()),
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(
        got,
        [(0x1234, 16384, 1486, false), (0x1234, 17870, 562, true)]
    );
}

/// The shape of a 64 KiB RDMA Write in the siw captures: ULPDU 1442 leaves 1428 payload
/// octets per segment; ceil(65536 / 1428) = 46 segments, 45 × 1428 = 64260, so the last
/// carries 1276 octets, a ULPDU of 1276 + 14 = 1290, and only it has L = 1 (DDP-4.1-3/4).
/// DDP-4.2-6: every segment carries the STag the ULP supplied.
#[test]
fn siw_capture_shape_64k_write() {
    let data = vec![1u8; 65536];
    let mut s = DdpSender::new()
        .tagged(0x40, 0xABCD_EF01, 0x7F00_0000, &[], 65536, 1442)
        .unwrap();
    let segs = run(&mut s, &data);
    assert_eq!(segs.len(), 46);
    for (i, (seg, bytes)) in segs.iter().enumerate() {
        let is_last = i == 45;
        assert_eq!(seg.last(), is_last);
        assert_eq!(bytes[0], if is_last { 0xC1 } else { 0x81 });
        assert_eq!(bytes.len(), if is_last { 1290 } else { 1442 });
        assert_eq!(
            seg.repr.buffer,
            DdpBuffer::Tagged {
                stag: 0xABCD_EF01,
                to: 0x7F00_0000 + 1428 * i as u64
            }
        );
    }
    assert_eq!(segs[45].0.payload_len, 1276);
}

/// DDP-5.2-9: a zero-length message is exactly one header-only segment with L = 1.
#[test]
fn zero_length_is_one_header_only_segment() {
    let mut sender = DdpSender::new();
    for mut s in [
        sender.tagged(0x40, 9, 9, &[], 0, 100).unwrap(),
        sender.untagged(0x43, 0, 0, &[], 0, 100).unwrap(),
    ] {
        assert_eq!(s.message_len(), 0);
        let segs = run(&mut s, &[]);
        assert_eq!(segs.len(), 1);
        assert!(segs[0].0.last());
        assert_eq!(segs[0].0.payload_len, 0);
        assert_eq!(segs[0].1.len(), segs[0].0.repr.header_len());
    }
}

/// Exact multiples of the per-segment payload produce no trailing empty segment.
#[test]
fn exact_multiple_has_no_empty_tail() {
    let data = vec![3u8; 3 * 1482];
    let mut s = DdpSender::new()
        .untagged(0x43, 0, 0, &[], data.len() as u32, 1500)
        .unwrap();
    let segs = run(&mut s, &data);
    assert_eq!(segs.len(), 3);
    assert!(segs
        .iter()
        .all(|(s, b)| s.payload_len == 1482 && b.len() == 1500));
    assert!(segs[2].0.last() && !segs[1].0.last());
    // One octet more needs a fourth segment of one octet.
    let data = vec![3u8; 1482 + 1];
    let mut s = DdpSender::new()
        .untagged(0x43, 0, 0, &[], data.len() as u32, 1500)
        .unwrap();
    let segs = run(&mut s, &data);
    assert_eq!(segs.len(), 2);
    assert_eq!(segs[1].0.payload_len, 1);
}

/// DDP-4.3-7/8: MSNs start at 1 and count per queue.
#[test]
fn msn_starts_at_one_per_queue() {
    let mut sender = DdpSender::new();
    for qn in 0..QUEUE_COUNT as u32 {
        assert_eq!(sender.next_msn(qn), Some(1));
    }
    let msn_of = |s: &Segmenter| {
        let mut s = *s;
        match s
            .next_segment(&mut [0u8; MAX_SEGMENT_HEADER_LEN])
            .unwrap()
            .unwrap()
            .repr
            .buffer
        {
            DdpBuffer::Untagged { msn, .. } => msn,
            _ => unreachable!(),
        }
    };
    let a = sender.untagged(0x43, 0, 0, &[], 1, 100).unwrap();
    let b = sender.untagged(0x43, 0, 0, &[], 1, 100).unwrap();
    let c = sender.untagged(0x41, 0, 1, &[0; 28], 0, 100).unwrap();
    // Tagged messages do not consume MSNs.
    sender.tagged(0x40, 1, 0, &[], 10, 100).unwrap();
    let d = sender.untagged(0x43, 0, 0, &[], 1, 100).unwrap();
    assert_eq!(
        [msn_of(&a), msn_of(&b), msn_of(&c), msn_of(&d)],
        [1, 2, 1, 3]
    );
    assert_eq!(sender.next_msn(0), Some(4));
    assert_eq!(sender.next_msn(1), Some(2));
    assert_eq!(sender.next_msn(4), None);
}

/// DDP-4.3-9: the MSN wraps from 0xFFFFFFFF to 0, then continues with 1.
#[test]
fn msn_wraps_to_zero() {
    let mut sender = DdpSender::new();
    sender.set_next_msn(0, 0xFFFF_FFFF).unwrap();
    let mut msns = Vec::new();
    for _ in 0..3 {
        let mut s = sender.untagged(0x43, 0, 0, &[], 0, 100).unwrap();
        match run(&mut s, &[])[0].0.repr.buffer {
            DdpBuffer::Untagged { msn, .. } => msns.push(msn),
            _ => unreachable!(),
        }
    }
    assert_eq!(msns, [0xFFFF_FFFF, 0, 1]);
    assert_eq!(sender.set_next_msn(9, 1), Err(SegmentationError::InvalidQn));
}

/// The RDMAP header travels at the start of the untagged payload; MO counts it
/// (DDP-5.2-6). With a tiny MULPDU it is split across segments without loss.
#[test]
fn ulp_header_leads_the_message_and_may_split() {
    let ulp: Vec<u8> = (100..128u8).collect(); // 28 octets, like a Read Request header
    let data: Vec<u8> = (0..10u8).collect();
    let mut s = DdpSender::new()
        .untagged(0x41, 0, 1, &ulp, 10, 18 + 12)
        .unwrap();
    assert_eq!(s.message_len(), 38);
    assert_eq!(s.header_buf_len(), 18 + 28);
    let segs = run(&mut s, &data);
    assert_eq!(segs.len(), 4); // 12 + 12 + 12 + 2
    let mut message = Vec::new();
    for (i, (seg, bytes)) in segs.iter().enumerate() {
        match seg.repr.buffer {
            DdpBuffer::Untagged { mo, .. } => assert_eq!(mo as usize, 12 * i),
            _ => unreachable!(),
        }
        assert!(bytes.len() <= 30);
        message.extend_from_slice(&bytes[18..]);
    }
    let mut want = ulp.clone();
    want.extend_from_slice(&data);
    assert_eq!(message, want);
    // The third segment straddles the header/data boundary: 4 header octets + 8 data.
    assert_eq!(segs[2].0.header_len, 18 + 4);
    assert_eq!((segs[2].0.payload_offset, segs[2].0.payload_len), (0, 8));
}

/// DDP-3-1/3-2: MULPDU can change between segments; earlier segments are not re-cut.
#[test]
fn mulpdu_change_applies_to_later_segments() {
    let data = vec![0u8; 1000];
    let mut s = DdpSender::new()
        .tagged(0x40, 1, 0, &[], 1000, 14 + 100)
        .unwrap();
    let mut hdr = [0u8; MAX_SEGMENT_HEADER_LEN];
    let first = s.next_segment(&mut hdr).unwrap().unwrap();
    assert_eq!(first.payload_len, 100);
    assert_eq!(s.set_mulpdu(14), Err(SegmentationError::MulpduTooSmall));
    s.set_mulpdu(14 + 300).unwrap();
    let rest = run(&mut s, &data);
    let lens: Vec<u32> = rest.iter().map(|(s, _)| s.payload_len).collect();
    assert_eq!(lens, [300, 300, 300]);
    assert_eq!(s.remaining(), 0);
}

/// Local argument errors, none of which consumes an MSN.
#[test]
fn segmentation_errors() {
    let mut sender = DdpSender::new();
    // DDP-5.2-2: MULPDU must leave room for payload.
    assert_eq!(
        sender.untagged(0x43, 0, 0, &[], 10, 18).unwrap_err(),
        SegmentationError::MulpduTooSmall
    );
    assert_eq!(
        sender.tagged(0x40, 0, 0, &[], 10, 14).unwrap_err(),
        SegmentationError::MulpduTooSmall
    );
    assert!(sender.tagged(0x40, 0, 0, &[], 10, 15).is_ok());
    // DDP-5.2-3: message shorter than 2^32 (header counts).
    assert!(sender.untagged(0x43, 0, 0, &[], u32::MAX, 1500).is_ok());
    assert_eq!(sender.next_msn(0), Some(2));
    assert_eq!(
        sender
            .untagged(0x41, 0, 1, &[0; 28], u32::MAX, 1500)
            .unwrap_err(),
        SegmentationError::MessageTooLong
    );
    assert_eq!(
        sender.untagged(0x43, 0, 4, &[], 1, 1500).unwrap_err(),
        SegmentationError::InvalidQn
    );
    assert_eq!(
        sender
            .untagged(0x43, 0, 0, &[0; MAX_ULP_HEADER_LEN + 1], 1, 1500)
            .unwrap_err(),
        SegmentationError::UlpHeaderTooLong
    );
    // DDP-7.1-14 seen from the sender: TO + length must not wrap 64 bits.
    assert_eq!(
        sender.tagged(0x40, 0, u64::MAX, &[], 1, 1500).unwrap_err(),
        SegmentationError::ToWrap
    );
    assert!(sender.tagged(0x40, 0, u64::MAX - 1, &[], 1, 1500).is_ok());
    // A zero-length message at the top of the TO space places nothing: allowed.
    assert!(sender.tagged(0x40, 0, u64::MAX, &[], 0, 1500).is_ok());
    assert_eq!(sender.next_msn(0), Some(2));
    assert_eq!(sender.next_msn(1), Some(1));
    // A short caller buffer is refused without advancing.
    let mut s = sender.untagged(0x41, 0, 1, &[0; 28], 0, 1500).unwrap();
    assert_eq!(
        s.next_segment(&mut [0u8; 18 + 27]),
        Err(SegmentationError::BufferTooSmall)
    );
    assert_eq!(s.remaining(), 28);
    assert!(s.next_segment(&mut [0u8; 18 + 28]).unwrap().is_some());
    assert_eq!(s.next_segment(&mut [0u8; 46]).unwrap(), None);
}

// ---------------------------------------------------------------------------------------
// Receive: a toy engine
// ---------------------------------------------------------------------------------------

/// Toy STag table: each entry is an STag and what the engine says about it.
#[derive(Default)]
struct ToyMem {
    stags: Vec<(u32, Result<TaggedRegion, TaggedFault>)>,
}

impl ToyMem {
    fn with(stag: u32, base: u64, len: u64) -> ToyMem {
        ToyMem {
            stags: vec![(stag, Ok(TaggedRegion { base, len }))],
        }
    }
}

impl TaggedBuffers for ToyMem {
    fn tagged_region(&self, stag: u32, _rsvd_ulp: u8) -> Result<TaggedRegion, TaggedFault> {
        self.stags
            .iter()
            .find(|(s, _)| *s == stag)
            .map_or(Err(TaggedFault::InvalidStag), |(_, r)| *r)
    }
}

/// Toy receive queues: per QN whether it exists and the lengths of the posted buffers,
/// head first.
struct ToyQueues {
    valid: [bool; QUEUE_COUNT],
    posted: [Vec<u64>; QUEUE_COUNT],
}

impl ToyQueues {
    fn with_buffers(bufs: &[(usize, u64)]) -> ToyQueues {
        let mut q = ToyQueues {
            valid: [true; QUEUE_COUNT],
            posted: Default::default(),
        };
        for &(qn, len) in bufs {
            q.posted[qn].push(len);
        }
        q
    }

    /// What the engine does on delivery: consume the head buffer of the queue.
    fn deliver(&mut self, qn: u32) {
        self.posted[qn as usize].remove(0);
    }
}

impl UntaggedBuffers for ToyQueues {
    fn queue_valid(&self, qn: u32) -> bool {
        self.valid.get(qn as usize).copied().unwrap_or(false)
    }
    fn buffer_len(&self, qn: u32, _msn: u32) -> Option<u64> {
        self.posted.get(qn as usize)?.first().copied()
    }
}

/// Feeds one segment to a fresh receiver and returns the error.
fn reject(bytes: &[u8], mem: &ToyMem, queues: &ToyQueues) -> DdpError {
    let mut rx = DdpReceiver::new(DDP_VERSION);
    let e = rx.handle_segment(bytes, mem, queues).unwrap_err();
    // DDP-7.1-17: after an error every later segment is dropped silently.
    assert_eq!(rx.failed(), Some(e));
    assert_eq!(rx.handle_segment(bytes, mem, queues), Ok(None));
    e
}

fn accept(rx: &mut DdpReceiver, bytes: &[u8], mem: &ToyMem, queues: &ToyQueues) -> Placement {
    rx.handle_segment(bytes, mem, queues).unwrap().unwrap()
}

// --- one test per DdpError variant --------------------------------------------------------

/// DDP-4.1-10, DDP-7.2-1: DV other than the stream's → 0x1/0x04 for tagged.
#[test]
fn err_tagged_invalid_version() {
    let mem = ToyMem::with(1, 0, 100);
    let q = ToyQueues::with_buffers(&[]);
    for dv in [0u8, 2, 3] {
        let mut repr = tagged(true, 0x40, 1, 0);
        repr.version = dv;
        let e = reject(&segment(&repr, b"abc"), &mem, &q);
        assert_eq!(e, DdpError::TaggedInvalidVersion);
    }
    // The version is checked before the length: a truncated header with DV 0 is a
    // version error too.
    assert_eq!(reject(&[0x80], &mem, &q), DdpError::TaggedInvalidVersion);
}

/// DDP-4.1-10, DDP-7.2-1: DV other than the stream's → 0x2/0x06 for untagged.
#[test]
fn err_untagged_invalid_version() {
    let q = ToyQueues::with_buffers(&[(0, 100)]);
    let mut repr = untagged(true, 0x43, 0, 0, 1, 0);
    repr.version = 0;
    let e = reject(&segment(&repr, b"abc"), &ToyMem::default(), &q);
    assert_eq!(e, DdpError::UntaggedInvalidVersion);
}

/// An RDMAC-flavour stream (DV 0, negotiated through MPA Rev 0) accepts DV 0 and rejects
/// DV 1 (DDP-4.1-10: one version per stream).
#[test]
fn rdmac_stream_expects_dv_zero() {
    let q = ToyQueues::with_buffers(&[(0, 100)]);
    let mut repr = untagged(true, 0x03, 0, 0, 1, 0);
    repr.version = 0;
    let mut rx = DdpReceiver::new(0);
    assert!(rx
        .handle_segment(&segment(&repr, b"x"), &ToyMem::default(), &q)
        .unwrap()
        .is_some());
    let repr = untagged(true, 0x43, 0, 0, 2, 0);
    assert_eq!(
        rx.handle_segment(&segment(&repr, b"x"), &ToyMem::default(), &q),
        Err(DdpError::UntaggedInvalidVersion)
    );
}

/// DDP-7.1-10: unknown STag → 0x1/0x00.
#[test]
fn err_tagged_invalid_stag() {
    let mem = ToyMem::with(1, 0, 100);
    let q = ToyQueues::with_buffers(&[]);
    let e = reject(&segment(&tagged(true, 0x40, 2, 0), b"abc"), &mem, &q);
    assert_eq!(e, DdpError::TaggedInvalidStag);
}

/// DDP-8.2-1/2: STag of another protection domain or stream → 0x1/0x02.
/// DDP-4.2-5: the STag must be valid for the stream it arrives on.
#[test]
fn err_tagged_stag_not_associated() {
    let mem = ToyMem {
        stags: vec![(7, Err(TaggedFault::NotAssociated))],
    };
    let e = reject(
        &segment(&tagged(true, 0x40, 7, 0), b"abc"),
        &mem,
        &ToyQueues::with_buffers(&[]),
    );
    assert_eq!(e, DdpError::TaggedStagNotAssociated);
    assert_eq!(
        TaggedFault::BaseOrBounds.ddp_error(),
        DdpError::TaggedBaseOrBounds
    );
}

/// DDP-7.1-12/13: TO below the base, at the end, or TO + length past the end → 0x1/0x01.
#[test]
fn err_tagged_base_or_bounds() {
    let mem = ToyMem::with(1, 1000, 100); // legal TOs 1000..1100
    let q = ToyQueues::with_buffers(&[]);
    for (to, len) in [
        (999u64, 1usize),
        (1100, 1),
        (1099, 2),
        (1000, 101),
        (u64::MAX - 5, 3),
    ] {
        let e = reject(
            &segment(&tagged(false, 0x40, 1, to), &vec![0; len]),
            &mem,
            &q,
        );
        assert_eq!(e, DdpError::TaggedBaseOrBounds, "to {to} len {len}");
    }
    // The edges themselves are legal.
    for (to, len) in [(1000u64, 100usize), (1099, 1), (1050, 50)] {
        let mut rx = DdpReceiver::new(DDP_VERSION);
        let p = accept(
            &mut rx,
            &segment(&tagged(false, 0x40, 1, to), &vec![0; len]),
            &mem,
            &q,
        );
        assert_eq!(p.payload_range(), 14..14 + len);
    }
}

/// DDP-7.1-14: the 64-bit sum of TO and length wraps → 0x1/0x03.
#[test]
fn err_tagged_to_wrap() {
    let mem = ToyMem::with(1, 0, u64::MAX); // TOs 0..u64::MAX - 1
    let q = ToyQueues::with_buffers(&[]);
    let e = reject(
        &segment(&tagged(true, 0x40, 1, u64::MAX - 2), &[0; 10]),
        &mem,
        &q,
    );
    assert_eq!(e, DdpError::TaggedToWrap);
    let mem = ToyMem::with(1, u64::MAX - 100, 101); // up to and including u64::MAX
    let e = reject(
        &segment(&tagged(true, 0x40, 1, u64::MAX), &[0; 1]),
        &mem,
        &q,
    );
    assert_eq!(e, DdpError::TaggedToWrap);
}

/// DDP-7.1-1: QN above 3, or a QN the engine does not have → 0x2/0x01.
#[test]
fn err_untagged_invalid_qn() {
    let mut q = ToyQueues::with_buffers(&[(0, 100), (3, 100)]);
    let mem = ToyMem::default();
    for qn in [4u32, 5, u32::MAX] {
        let e = reject(&segment(&untagged(true, 0x43, 0, qn, 1, 0), b"x"), &mem, &q);
        assert_eq!(e, DdpError::UntaggedInvalidQn);
    }
    // A stream without RFC 7306 has no QN 3 (WIRE-FORMATS §4.2 notes).
    q.valid[3] = false;
    let e = reject(&segment(&untagged(true, 0x4B, 0, 3, 1, 0), b"x"), &mem, &q);
    assert_eq!(e, DdpError::UntaggedInvalidQn);
}

/// DDP-7.1-2: no buffer posted for the expected MSN → 0x2/0x02, also for a zero-length
/// message, which consumes a buffer all the same.
#[test]
fn err_untagged_no_buffer() {
    let q = ToyQueues::with_buffers(&[(1, 28)]);
    let mem = ToyMem::default();
    for payload in [&b"abc"[..], &[][..]] {
        let e = reject(
            &segment(&untagged(true, 0x43, 0, 0, 1, 0), payload),
            &mem,
            &q,
        );
        assert_eq!(e, DdpError::UntaggedNoBuffer);
    }
}

/// DDP-7.1-5: an MSN other than the one expected next on the queue → 0x2/0x03, ahead,
/// behind, or a repeat of a delivered message (delivered at most once, DDP-5.3-5).
#[test]
fn err_untagged_msn_out_of_range() {
    let mem = ToyMem::default();
    let q = ToyQueues::with_buffers(&[(0, 100), (0, 100), (0, 100)]);
    for msn in [0u32, 2, 3, 0xFFFF_FFFF] {
        let e = reject(
            &segment(&untagged(true, 0x43, 0, 0, msn, 0), b"x"),
            &mem,
            &q,
        );
        assert_eq!(e, DdpError::UntaggedMsnOutOfRange, "msn {msn}");
    }
    let mut rx = DdpReceiver::new(DDP_VERSION);
    let one = segment(&untagged(true, 0x43, 0, 0, 1, 0), b"x");
    assert!(rx.handle_segment(&one, &mem, &q).unwrap().is_some());
    assert_eq!(rx.expected_msn(0), Some(2));
    assert_eq!(
        rx.handle_segment(&one, &mem, &q),
        Err(DdpError::UntaggedMsnOutOfRange)
    );
}

/// DDP-7.1-3: MO outside the buffer → 0x2/0x04.
#[test]
fn err_untagged_invalid_mo() {
    let mem = ToyMem::default();
    let q = ToyQueues::with_buffers(&[(0, 100)]);
    for (mo, len) in [(100u32, 1usize), (u32::MAX, 1), (101, 0)] {
        let e = reject(
            &segment(&untagged(false, 0x43, 0, 0, 1, mo), &vec![0; len]),
            &mem,
            &q,
        );
        assert_eq!(e, DdpError::UntaggedInvalidMo, "mo {mo} len {len}");
    }
}

/// DDP-4.1-6: the L = 1 segment must carry the highest MO; an earlier segment that reached
/// past its end is reported as invalid MO.
#[test]
fn err_untagged_last_segment_not_highest() {
    let mem = ToyMem::default();
    let q = ToyQueues::with_buffers(&[(0, 1000)]);
    let mut rx = DdpReceiver::new(DDP_VERSION);
    accept(
        &mut rx,
        &segment(&untagged(false, 0x43, 0, 0, 1, 100), &[0; 50]),
        &mem,
        &q,
    );
    assert_eq!(
        rx.handle_segment(
            &segment(&untagged(true, 0x43, 0, 0, 1, 0), &[0; 10]),
            &mem,
            &q
        ),
        Err(DdpError::UntaggedInvalidMo)
    );
}

/// DDP-7.1-4: MO + length past the buffer end → 0x2/0x05.
#[test]
fn err_untagged_too_long() {
    let mem = ToyMem::default();
    let q = ToyQueues::with_buffers(&[(0, 100)]);
    for (mo, len) in [(0u32, 101usize), (99, 2), (50, 51)] {
        let e = reject(
            &segment(&untagged(true, 0x43, 0, 0, 1, mo), &vec![0; len]),
            &mem,
            &q,
        );
        assert_eq!(e, DdpError::UntaggedTooLong, "mo {mo} len {len}");
    }
    // DDP-5.2-3: even into a huge buffer a message may not reach 2^32 octets.
    let q = ToyQueues::with_buffers(&[(0, u64::MAX)]);
    let e = reject(
        &segment(&untagged(true, 0x43, 0, 0, 1, u32::MAX - 1), &[0; 2]),
        &mem,
        &q,
    );
    assert_eq!(e, DdpError::UntaggedTooLong);
}

/// A segment shorter than the header its T bit announces (or empty) has no header to
/// judge or to copy into the Terminate: 0x1/0x0/0x00 local catastrophic, the one DDP error
/// whose Terminate carries no DDP header (DDP-6.2.2-1). Checked over every control octet
/// with DV 1: exactly the short segments get it, and no full-length one does.
#[test]
fn err_local_catastrophic_for_truncated_header() {
    let mem = ToyMem::with(0, 0, 10);
    let full = ToyQueues::with_buffers(&[(0, 10), (1, 10), (2, 10), (3, 10)]);
    let empty = ToyQueues::with_buffers(&[]);
    assert_eq!(reject(&[], &mem, &full), DdpError::LocalCatastrophic);
    assert_eq!(
        reject(&[0x81, 0x40, 0, 0], &mem, &full),
        DdpError::LocalCatastrophic
    );
    assert_eq!(
        reject(&[0x41; 17], &mem, &full),
        DdpError::LocalCatastrophic
    );
    assert_eq!(
        reject(&[0xC1; 13], &mem, &full),
        DdpError::LocalCatastrophic
    );
    for control in (0..=255u8).filter(|c| c & 0x03 == 1) {
        for len in [1usize, 13, 14, 17, 18, 30] {
            let mut bytes = vec![0u8; len];
            bytes[0] = control;
            let need = if control & 0x80 != 0 { 14 } else { 18 };
            for q in [&full, &empty] {
                let r = DdpReceiver::new(DDP_VERSION).handle_segment(&bytes, &mem, q);
                assert_eq!(
                    r == Err(DdpError::LocalCatastrophic),
                    len < need,
                    "control {control:#x} len {len}: {r:?}"
                );
            }
        }
    }
    assert!(!DdpError::LocalCatastrophic
        .terminate_code()
        .decode()
        .map(|e| e.terminate_headers().ddp)
        .unwrap());
}

// --- accepted segments --------------------------------------------------------------------

/// DDP-5.2-10/11: a zero-length tagged segment is not checked against STag or TO.
#[test]
fn zero_length_tagged_skips_stag_and_to() {
    let mut rx = DdpReceiver::new(DDP_VERSION);
    let p = accept(
        &mut rx,
        &segment(&tagged(true, 0x40, 0xDEAD, u64::MAX), &[]),
        &ToyMem::default(),
        &ToyQueues::with_buffers(&[]),
    );
    match p {
        Placement::Tagged(t) => {
            assert_eq!(
                (t.stag, t.to, t.last, t.payload_len),
                (0xDEAD, u64::MAX, true, 0)
            );
        }
        _ => panic!("tagged expected"),
    }
}

/// DDP-5.4-1/2/3: an untagged message is delivered at its L = 1 segment with length
/// MO + length and its RsvdULP; segments may arrive in any MO order (DDP-5.3-3).
/// DDP-5.4-3: delivery reports the message's RsvdULP.
#[test]
fn untagged_delivery_reports_length_once() {
    let mem = ToyMem::default();
    let mut q = ToyQueues::with_buffers(&[(0, 100), (0, 7)]);
    let mut rx = DdpReceiver::new(DDP_VERSION);
    let a = accept(
        &mut rx,
        &segment(&untagged(false, 0x44, 0x55, 0, 1, 40), &[1; 20]),
        &mem,
        &q,
    );
    let b = accept(
        &mut rx,
        &segment(&untagged(false, 0x44, 0x55, 0, 1, 0), &[2; 40]),
        &mem,
        &q,
    );
    let c = accept(
        &mut rx,
        &segment(&untagged(true, 0x44, 0x55, 0, 1, 60), &[3; 30]),
        &mem,
        &q,
    );
    let (Placement::Untagged(a), Placement::Untagged(b), Placement::Untagged(c)) = (a, b, c) else {
        panic!("untagged expected")
    };
    assert!(a.first && !b.first && !c.first);
    assert_eq!(
        (a.message_len, b.message_len, c.message_len),
        (None, None, Some(90))
    );
    assert_eq!(
        (c.rsvd_ulp, c.rsvd_ulp2, c.qn, c.msn, c.mo),
        (0x44, 0x55, 0, 1, 60)
    );
    assert_eq!((c.payload_offset, c.payload_len), (18, 30));
    q.deliver(0);
    // The next message gets the next buffer; a zero-length one is delivered with length 0.
    let d = accept(
        &mut rx,
        &segment(&untagged(true, 0x43, 0, 0, 2, 0), &[]),
        &mem,
        &q,
    );
    assert!(d.last());
    match d {
        Placement::Untagged(d) => assert_eq!((d.msn, d.message_len, d.first), (2, Some(0), true)),
        _ => unreachable!(),
    }
    assert_eq!(rx.expected_msn(0), Some(3));
    assert_eq!(rx.expected_msn(1), Some(1));
    assert_eq!(rx.expected_msn(4), None);
}

/// Queues reassemble independently: a Read Request on QN 1 between two segments of a
/// Send on QN 0 does not disturb the Send.
#[test]
fn queues_are_independent() {
    let mem = ToyMem::default();
    let q = ToyQueues::with_buffers(&[(0, 100), (1, 28)]);
    let mut rx = DdpReceiver::new(DDP_VERSION);
    accept(
        &mut rx,
        &segment(&untagged(false, 0x43, 0, 0, 1, 0), &[0; 50]),
        &mem,
        &q,
    );
    let rr = accept(
        &mut rx,
        &segment(&untagged(true, 0x41, 0, 1, 1, 0), &[0; 28]),
        &mem,
        &q,
    );
    assert!(rr.last());
    let s = accept(
        &mut rx,
        &segment(&untagged(true, 0x43, 0, 0, 1, 50), &[0; 50]),
        &mem,
        &q,
    );
    match s {
        Placement::Untagged(s) => assert_eq!(s.message_len, Some(100)),
        _ => unreachable!(),
    }
}

/// The receiver's MSN expectation wraps from 0xFFFFFFFF to 0 like the sender's (DDP-4.3-9).
#[test]
fn receiver_follows_msn_wrap() {
    let mut sender = DdpSender::new();
    sender.set_next_msn(2, 0xFFFF_FFFF).unwrap();
    let mut rx = DdpReceiver::new(DDP_VERSION);
    rx.set_expected_msn(2, 0xFFFF_FFFF).unwrap();
    assert!(rx.set_expected_msn(4, 1).is_err());
    let mem = ToyMem::default();
    let q = ToyQueues::with_buffers(&[(2, 64)]);
    let mut msns = Vec::new();
    for _ in 0..3 {
        let mut s = sender.untagged(0x47, 0, 2, &[0; 4], 0, 100).unwrap();
        for (_, bytes) in run(&mut s, &[]) {
            match accept(&mut rx, &bytes, &mem, &q) {
                Placement::Untagged(p) => msns.push((p.msn, p.message_len)),
                _ => unreachable!(),
            }
        }
    }
    assert_eq!(msns, [(0xFFFF_FFFF, Some(4)), (0, Some(4)), (1, Some(4))]);
    assert_eq!(rx.expected_msn(2), Some(2));
}

// ---------------------------------------------------------------------------------------
// Property tests
// ---------------------------------------------------------------------------------------

fn arb_repr() -> impl Strategy<Value = DdpRepr> {
    let buffer = prop_oneof![
        (any::<u32>(), any::<u64>()).prop_map(|(stag, to)| DdpBuffer::Tagged { stag, to }),
        (any::<u32>(), any::<u32>(), any::<u32>(), any::<u32>()).prop_map(
            |(rsvd_ulp2, qn, msn, mo)| DdpBuffer::Untagged {
                rsvd_ulp2,
                qn,
                msn,
                mo
            }
        ),
    ];
    (any::<bool>(), 0u8..4, any::<u8>(), buffer).prop_map(|(last, version, rsvd_ulp, buffer)| {
        DdpRepr {
            last,
            version,
            rsvd_ulp,
            buffer,
        }
    })
}

/// A toy engine that accepts everything, for the no-panic property.
struct Permissive;

impl TaggedBuffers for Permissive {
    fn tagged_region(&self, stag: u32, _: u8) -> Result<TaggedRegion, TaggedFault> {
        match stag % 3 {
            0 => Ok(TaggedRegion {
                base: 0,
                len: u64::MAX,
            }),
            1 => Ok(TaggedRegion {
                base: u64::from(stag),
                len: 1 << 20,
            }),
            _ => Err(TaggedFault::NotAssociated),
        }
    }
}

impl UntaggedBuffers for Permissive {
    fn queue_valid(&self, qn: u32) -> bool {
        qn != 2
    }
    fn buffer_len(&self, _qn: u32, msn: u32) -> Option<u64> {
        (!msn.is_multiple_of(7)).then_some(u64::from(msn) * 100)
    }
}

/// One message of the round-trip property.
#[derive(Clone, Debug)]
struct Msg {
    tagged: bool,
    qn: u32,
    ulp_header: Vec<u8>,
    data: Vec<u8>,
}

fn arb_msg() -> impl Strategy<Value = Msg> {
    (
        any::<bool>(),
        0u32..QUEUE_COUNT as u32,
        prop::collection::vec(any::<u8>(), 0..=52),
        0usize..5000,
        any::<u8>(),
    )
        .prop_map(|(tagged, qn, ulp_header, len, seed)| Msg {
            tagged,
            qn,
            ulp_header,
            data: (0..len)
                .map(|i| (i as u8).wrapping_mul(31) ^ seed)
                .collect(),
        })
}

proptest! {
    /// Emit then parse is identity, and `buffer_len()` is exactly what emit writes.
    #[test]
    fn emit_then_parse_is_identity(repr in arb_repr(), extra in 0usize..8) {
        let mut buf = vec![0xA5u8; repr.buffer_len() + extra];
        let n = repr.emit_into(&mut buf).unwrap();
        prop_assert_eq!(n, repr.buffer_len());
        prop_assert!(buf[n..].iter().all(|&b| b == 0xA5));
        let view = DdpSegment::new_checked(&buf[..]).unwrap();
        prop_assert_eq!(view.header_len(), n);
        prop_assert_eq!(view.payload_len(), extra);
        prop_assert_eq!(DdpRepr::parse(&view).unwrap(), repr);
        prop_assert_eq!(view.rsvd(), 0); // DDP-4.1-8
    }

    /// Arbitrary bytes never panic the view, the repr or the receiver; whatever parses
    /// re-emits to the same header bytes (reserved control bits aside).
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..48)) {
        if let Ok(view) = DdpSegment::new_checked(&bytes[..]) {
            let _ = (view.tagged(), view.last(), view.rsvd(), view.version(), view.rsvd_ulp());
            let _ = (view.stag(), view.to(), view.rsvd_ulp2(), view.qn(), view.msn(), view.mo());
            let _ = (view.header(), view.payload(), view.payload_len());
            let repr = DdpRepr::parse(&view).unwrap();
            let mut again = vec![0u8; repr.buffer_len()];
            repr.emit_into(&mut again).unwrap();
            prop_assert_eq!(again[0], bytes[0] & !0x3C);
            prop_assert_eq!(&again[1..], &bytes[1..repr.buffer_len()]);
        }
        // handle_header on a parsed header agrees with handle_segment on the bytes.
        if let Ok(view) = DdpSegment::new_checked(&bytes[..]) {
            let repr = DdpRepr::parse(&view).unwrap();
            let a = DdpReceiver::new(1).handle_segment(&bytes, &Permissive, &Permissive);
            let b = DdpReceiver::new(1).handle_header(&repr, view.payload_len(), &Permissive, &Permissive);
            prop_assert_eq!(a, b);
        }
        for version in [0u8, 1] {
            let mut rx = DdpReceiver::new(version);
            // Feed the bytes, then every suffix, so state built by one segment meets others.
            for start in 0..bytes.len().min(8) {
                let _ = rx.handle_segment(&bytes[start..], &Permissive, &Permissive);
            }
        }
    }

    /// Segmentation then validation reproduces every message exactly: each octet is placed
    /// once at its offset, each untagged message is delivered once, in order, with its
    /// length, and no segment exceeds MULPDU (DDP-5.2-1..9, DDP-5.3-5/6, DDP-5.4-2,
    /// DDP-7.1-*).
    #[test]
    fn segment_then_reassemble(
        msgs in prop::collection::vec(arb_msg(), 1..5),
        mulpdu_extra in 1usize..1600,
        to_base in any::<u64>(),
        start_msn in any::<u32>(),
    ) {
        const STAG: u32 = 0x5157_A600;
        let mut sender = DdpSender::new();
        let mut rx = DdpReceiver::new(DDP_VERSION);
        for qn in 0..QUEUE_COUNT as u32 {
            let msn = start_msn.wrapping_add(qn);
            sender.set_next_msn(qn, msn).unwrap();
            rx.set_expected_msn(qn, msn).unwrap();
        }
        // Each tagged message gets its own area of one region; the region ends exactly
        // where the last message ends, so any off-by-one would trip the bounds check.
        let total: u64 = msgs
            .iter()
            .filter(|m| m.tagged)
            .map(|m| (m.ulp_header.len() + m.data.len()) as u64)
            .sum();
        let base = to_base.min(u64::MAX - total - 1);
        let mem = ToyMem::with(STAG, base, total.max(1));
        let mut region = vec![0u8; total as usize];
        let mut region_hits = vec![0u8; total as usize];
        // Untagged buffers are exactly the message length, posted in order per queue.
        let mut queues = ToyQueues::with_buffers(&[]);
        for m in msgs.iter().filter(|m| !m.tagged) {
            queues.posted[m.qn as usize].push((m.ulp_header.len() + m.data.len()) as u64);
        }
        let mut to_next = base;
        let mut hdr = [0u8; MAX_SEGMENT_HEADER_LEN];
        for m in &msgs {
            let msg_len = m.ulp_header.len() + m.data.len();
            let mut whole = m.ulp_header.clone();
            whole.extend_from_slice(&m.data);
            let (mut seg, hlen) = if m.tagged {
                let s = sender
                    .tagged(0x40, STAG, to_next, &m.ulp_header, m.data.len() as u32, 14 + mulpdu_extra)
                    .unwrap();
                (s, 14)
            } else {
                let s = sender
                    .untagged(0x43, 0, m.qn, &m.ulp_header, m.data.len() as u32, 18 + mulpdu_extra)
                    .unwrap();
                (s, 18)
            };
            let mut buffer = vec![0u8; msg_len];
            let mut hits = vec![0u8; msg_len];
            let mut deliveries = 0;
            let mut segments = 0;
            while let Some(s) = seg.next_segment(&mut hdr).unwrap() {
                segments += 1;
                let mut bytes = hdr[..s.header_len].to_vec();
                bytes.extend_from_slice(&m.data[s.payload_offset as usize..][..s.payload_len as usize]);
                prop_assert!(bytes.len() <= hlen + mulpdu_extra); // DDP-5.2-2
                let p = rx.handle_segment(&bytes, &mem, &queues).unwrap().unwrap();
                let payload = &bytes[p.payload_range()];
                match p {
                    Placement::Tagged(t) => {
                        prop_assert!(m.tagged);
                        prop_assert_eq!(t.stag, STAG);
                        let off = (t.to - base) as usize;
                        if !payload.is_empty() {
                            region[off..off + payload.len()].copy_from_slice(payload);
                            for h in &mut region_hits[off..off + payload.len()] { *h += 1; }
                        }
                        let moff = (t.to - to_next) as usize;
                        buffer[moff..moff + payload.len()].copy_from_slice(payload);
                        for h in &mut hits[moff..moff + payload.len()] { *h += 1; }
                        if t.last { deliveries += 1; }
                    }
                    Placement::Untagged(u) => {
                        prop_assert!(!m.tagged);
                        prop_assert_eq!(u.qn, m.qn);
                        let off = u.mo as usize;
                        buffer[off..off + payload.len()].copy_from_slice(payload);
                        for h in &mut hits[off..off + payload.len()] { *h += 1; }
                        if let Some(n) = u.message_len {
                            prop_assert_eq!(n as usize, msg_len);
                            deliveries += 1;
                            queues.deliver(u.qn);
                        }
                    }
                }
            }
            prop_assert_eq!(deliveries, 1);
            prop_assert_eq!(segments, msg_len.div_ceil(mulpdu_extra).max(1));
            prop_assert!(hits.iter().all(|&h| h == 1));
            prop_assert_eq!(&buffer, &whole);
            if m.tagged {
                to_next += msg_len as u64;
            }
        }
        prop_assert!(region_hits.iter().all(|&h| h == 1));
        prop_assert!(queues.posted.iter().all(|q| q.is_empty()));
        prop_assert_eq!(rx.failed(), None);
    }
}

proptest! {
    /// `DdpSender::tagged_whole` writes exactly the header of the one segment the segmenter
    /// cuts for the same tagged message without a ULP header, and declines (`None`) every
    /// message the segmenter cuts in several segments or refuses (DDP-5.2-2, DDP-4.1-3,
    /// DDP-5.2-7, DDP-7.1-14).
    #[test]
    fn tagged_whole_is_the_segmenters_one_segment(
        rsvd_ulp in any::<u8>(),
        stag in any::<u32>(),
        to in prop_oneof![any::<u64>(), (0u64..4096).prop_map(|d| u64::MAX - d)],
        len in prop_oneof![0u32..64, 0u32..20_000, any::<u32>()],
        mulpdu in prop_oneof![0usize..40, 10usize..18, 0usize..20_000],
        short in 0usize..TAGGED_HEADER_LEN,
    ) {
        let sender = DdpSender::new();
        let mut whole = [0xA5u8; MAX_SEGMENT_HEADER_LEN];
        let got = sender.tagged_whole(rsvd_ulp, stag, to, len, mulpdu, &mut whole);
        let general = sender
            .tagged(rsvd_ulp, stag, to, &[], len, mulpdu)
            .map(|mut seg| {
                let mut hdr = [0u8; MAX_SEGMENT_HEADER_LEN];
                let first = seg.next_segment(&mut hdr).unwrap().unwrap();
                (first, seg.is_done(), hdr)
            });
        match general {
            Ok((first, true, hdr)) => {
                prop_assert_eq!(got, Some(TAGGED_HEADER_LEN));
                prop_assert_eq!(first.header_len, TAGGED_HEADER_LEN);
                prop_assert_eq!((first.payload_offset, first.payload_len), (0, len));
                prop_assert_eq!(&whole[..TAGGED_HEADER_LEN], &hdr[..TAGGED_HEADER_LEN]);
                prop_assert!(whole[TAGGED_HEADER_LEN..].iter().all(|&b| b == 0xA5));
                // A buffer too short for the header: declined, nothing written.
                let mut small = vec![0x5Au8; short];
                prop_assert_eq!(
                    sender.tagged_whole(rsvd_ulp, stag, to, len, mulpdu, &mut small),
                    None
                );
                prop_assert!(small.iter().all(|&b| b == 0x5A));
            }
            _ => prop_assert_eq!(got, None),
        }
    }
}
