//! MPA framing and deframing: the mpa-08 and RTR test vectors byte for byte, split-at-every-
//! byte streams, corruption, and property tests (GUIDE §4 rungs 1-3).
//!
//! Requirement IDs refer to `shared/specs/REQUIREMENTS.md`; vectors to `WIRE-FORMATS.md`.

use proptest::prelude::*;
use warpcore_proto::error::MpaError;
use warpcore_proto::mpa::deframer::{DeframeFault, Deframer, DeframerConfig};
use warpcore_proto::mpa::framer::{Framer, FramerConfig, FramerError};
use warpcore_proto::wire::fpdu::{self, crc32c, crc_to_wire, MAX_ULPDU_LEN};

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn framer(markers: bool, crc: bool, offset: u64) -> Framer {
    Framer::new(FramerConfig {
        markers,
        crc,
        mulpdu: MAX_ULPDU_LEN,
        stream_offset: offset,
    })
}

fn deframer(markers: bool, crc: bool, offset: u64) -> Deframer {
    Deframer::new(DeframerConfig {
        markers,
        crc,
        max_ulpdu_len: MAX_ULPDU_LEN,
        stream_offset: offset,
    })
}

/// Frames each ULPDU in turn and returns the concatenated wire octets.
fn frame_all(f: &mut Framer, ulpdus: &[Vec<u8>]) -> Vec<u8> {
    let mut wire = Vec::new();
    for u in ulpdus {
        let need = f.fpdu_wire_len(u.len());
        let start = wire.len();
        wire.resize(start + need, 0xA5);
        let n = f.emit(&[u], &mut wire[start..]).unwrap();
        assert_eq!(n, need, "fpdu_wire_len equals bytes written");
    }
    wire
}

/// Feeds `chunks` in order and collects every ULPDU, or the first error.
fn deframe_chunks<'c>(
    d: &mut Deframer,
    chunks: impl IntoIterator<Item = &'c [u8]>,
) -> (Vec<Vec<u8>>, Option<MpaError>) {
    let (out, err) = trace(d, chunks);
    (
        out.into_iter().map(|(u, _, _)| u).collect(),
        err.map(|(e, _)| e),
    )
}

/// Everything a deframer shows after each step: each ULPDU with the offset of its FPDU and
/// the stream offset after it, then the error and its detailed fault.
type Trace = (
    Vec<(Vec<u8>, u64, u64)>,
    Option<(MpaError, Option<DeframeFault>)>,
);

/// Feeds `chunks` in order, polling each until it is consumed (checking `poll`'s contract
/// on consumed counts), and records what [`Trace`] lists.
fn trace<'c>(d: &mut Deframer, chunks: impl IntoIterator<Item = &'c [u8]>) -> Trace {
    trace_with(d, chunks, false)
}

/// [`trace`], with `digest` giving each chunk's first poll the chunk's CRC32c
/// (`Deframer::poll_digest`), as the engine gives a segment's payload with the digest of
/// its checksum pass.
fn trace_with<'c>(
    d: &mut Deframer,
    chunks: impl IntoIterator<Item = &'c [u8]>,
    digest: bool,
) -> Trace {
    let mut out = Vec::new();
    for chunk in chunks {
        let mut input = chunk;
        let mut dg = digest.then(|| crc32c(chunk));
        loop {
            match d.poll_digest(input, dg.take()) {
                Ok((n, Some(u))) => {
                    assert!(n <= input.len());
                    let u = u.to_vec();
                    out.push((u, d.last_fpdu_offset(), d.stream_offset()));
                    input = &input[n..];
                }
                Ok((n, None)) => {
                    assert_eq!(n, input.len(), "None means everything was consumed");
                    break;
                }
                Err(e) => return (out, Some((e, d.fault()))),
            }
        }
    }
    (out, None)
}

/// `wire` (starting at stream offset `offset`) cut right after every marker position.
fn after_each_marker(wire: &[u8], offset: u64) -> Vec<&[u8]> {
    let mut chunks = Vec::new();
    let mut from = 0;
    for i in 0..wire.len() {
        if offset.wrapping_add(i as u64) % 512 == 3 {
            chunks.push(&wire[from..=i]);
            from = i + 1;
        }
    }
    chunks.push(&wire[from..]);
    chunks
}

fn deframe_all(d: &mut Deframer, wire: &[u8]) -> (Vec<Vec<u8>>, Option<MpaError>) {
    deframe_chunks(d, [wire])
}

/// ULPDU of vector 1 / 2: a Send with MSN `msn` and 24 zero octets (42 octets).
fn send_ulpdu(msn: u8) -> Vec<u8> {
    let mut u = vec![0u8; 42];
    u[0] = 0x41;
    u[1] = 0x43;
    u[13] = msn;
    u
}

const VECTOR_1: &str = "00000000002a41430000000000000000000000010000000000000000000000000000000000000000000000000000000052239983";
const VECTOR_2: &str = "002a4143000000000000000000000002000000000000001400000000000000000000000000000000000000000000000084925898";

/// WIRE-FORMATS §7.4 vector 1 (mpa-08 Figure 5): first FPDU of the stream, with the leading
/// marker covered by its CRC (MPA-4.3-7, MPA-4.4-17, MPA-4.4-14, LSB-first CRC).
#[test]
fn vector_1_figure_5_byte_exact() {
    let expected = hex(VECTOR_1);
    let mut f = framer(true, true, 0);
    assert_eq!(frame_all(&mut f, &[send_ulpdu(1)]), expected);

    let mut d = deframer(true, true, 0);
    let (ulpdus, err) = deframe_all(&mut d, &expected);
    assert_eq!(err, None);
    assert_eq!(ulpdus, vec![send_ulpdu(1)]);
    assert_eq!(d.markers_seen(), 1);
    assert_eq!(d.stream_offset(), 52);
    assert_eq!(d.last_fpdu_offset(), 4);
}

/// Vector 1 with its leading marker passed in alone: the FPDU that follows in the next
/// chunk is still checked with the marker under its CRC (MPA-4.4-17), and the deframer
/// counts as inside an FPDU between the two chunks. The CRC computed without the marker
/// (what a sender that forgot MPA-4.4-17 would send) is refused. Regression: the whole-FPDU
/// fast path once took the rest as a fresh FPDU (the deframer fuzz target found it with
/// CRCs off, where only `in_fpdu` stayed wrong).
#[test]
fn vector_1_with_its_marker_in_a_chunk_of_its_own() {
    let wire = hex(VECTOR_1);
    let (marker, rest) = wire.split_at(4);
    for crc in [true, false] {
        let mut d = deframer(true, crc, 0);
        assert_eq!(
            d.poll(marker).map(|(n, u)| (n, u.is_some())),
            Ok((4, false))
        );
        assert!(d.in_fpdu());
        let (n, u) = d.poll(rest).unwrap();
        assert_eq!(
            (n, u.map(|u| u.to_vec())),
            (rest.len(), Some(send_ulpdu(1)))
        );
        assert!(!d.in_fpdu());
        assert_eq!((d.stream_offset(), d.last_fpdu_offset()), (52, 4));
    }

    // The same FPDU with the CRC of its last 48 octets only (the marker left out).
    let mut bad = rest.to_vec();
    let covered = bad.len() - 4;
    let crc = crc_to_wire(crc32c(&bad[..covered]));
    bad[covered..].copy_from_slice(&crc);
    let mut d = deframer(true, true, 0);
    assert!(d.poll(marker).is_ok());
    assert_eq!(d.poll(&bad).map(|(n, _)| n), Err(MpaError::CrcMismatch));
}

/// WIRE-FORMATS §7.4 vector 2 (mpa-08 Figure 6): FPDU at 0x1EC with a marker at 0x200 whose
/// FPDUPTR is 0x14 (MPA-4.3-3, MPA-4.3-9), covered by the CRC (MPA-4.4-15).
#[test]
fn vector_2_figure_6_byte_exact() {
    let expected = hex(VECTOR_2);
    let mut f = framer(true, true, 0x1EC);
    assert_eq!(frame_all(&mut f, &[send_ulpdu(2)]), expected);
    assert_eq!(f.markers_sent(), 1);

    let mut d = deframer(true, true, 0x1EC);
    let (ulpdus, err) = deframe_all(&mut d, &expected);
    assert_eq!(err, None);
    assert_eq!(ulpdus, vec![send_ulpdu(2)]);
    assert_eq!(d.markers_seen(), 1);
}

/// Both vectors as one stream: a 492-octet first FPDU (leading marker included), then
/// vector 2; the first 52 octets are vector 1's layout with a longer Send.
/// MPA-3-1: two ULPDUs, two FPDUs, one whole ULPDU in each.
#[test]
fn vectors_as_one_stream() {
    // 492 = 4 (marker) + 2 + L + pad + 4  =>  L = 482 (pad 0).
    let mut first = send_ulpdu(1);
    first.resize(482, 0);
    let mut f = framer(true, true, 0);
    let wire = frame_all(&mut f, &[first.clone(), send_ulpdu(2)]);
    assert_eq!(wire.len(), 492 + 52);
    assert_eq!(&wire[492..], &hex(VECTOR_2)[..]);
    let (ulpdus, err) = deframe_all(&mut deframer(true, true, 0), &wire);
    assert_eq!(err, None);
    assert_eq!(ulpdus, vec![first, send_ulpdu(2)]);
}

/// WIRE-FORMATS §7.4 "wrong results" (MPA-4.4-21, MPA-8-2): each is a CRC mismatch.
#[test]
fn wrong_crc_variants_are_rejected() {
    let cases = [
        (VECTOR_1, 0u64, "83992352"),  // big-endian CRC
        (VECTOR_1, 0, "b7243ec3"),     // CRC without the leading marker
        (VECTOR_2, 0x1EC, "290fbede"), // CRC without the inner marker
    ];
    for (vector, offset, bad) in cases {
        let mut wire = hex(vector);
        let n = wire.len();
        wire[n - 4..].copy_from_slice(&hex(bad));
        let mut d = deframer(true, true, offset);
        let (ulpdus, err) = deframe_all(&mut d, &wire);
        assert!(ulpdus.is_empty());
        assert_eq!(err, Some(MpaError::CrcMismatch), "{bad}");
        assert!(matches!(d.fault(), Some(DeframeFault::Crc { .. })));
        // The same stream with CRCs off is accepted: the field MUST NOT be checked
        // (MPA-4.1-4, MPA-7.1.1-11, MPA-7.1.1-14).
        let (ulpdus, err) = deframe_all(&mut deframer(true, false, offset), &wire);
        assert_eq!(err, None);
        assert_eq!(ulpdus.len(), 1);
    }
}

/// The RTR messages of WIRE-FORMATS §6.4, without and with the leading marker (MPA2-5-1).
#[test]
fn rtr_vectors() {
    let send = hex("0012 4143 00000000 00000000 00000001 00000000");
    let write = hex("000E C140 00000000 00000000 00000000");
    let read = hex("002E 4141 00000000 00000001 00000001 00000000 \
         00000000 00000000 00000000 00000000 00000000 00000000 00000000");
    let read_resp = hex("000E C142 00000000 00000000 00000000");
    let term = hex("0016 4147 00000000 00000002 00000001 00000000 20070000");
    let cases = [
        (&send, "587BE8C4", Some("88C1D6FC")),
        (&write, "A30572AB", Some("77C9C755")),
        (&read, "F2C6DD3D", Some("8176377E")),
        (&read_resp, "6975D6CA", None),
        (&term, "1BD2BABE", None),
    ];
    for (fpdu_no_crc, crc, crc_with_marker) in cases {
        let ulpdu = fpdu_no_crc[2..].to_vec();
        // No markers.
        let mut expected = fpdu_no_crc.clone();
        expected.extend(hex(crc));
        let wire = frame_all(&mut framer(false, true, 0), std::slice::from_ref(&ulpdu));
        assert_eq!(wire, expected);
        let (ulpdus, err) = deframe_all(&mut deframer(false, true, 0), &wire);
        assert_eq!((ulpdus, err), (vec![ulpdu.clone()], None));
        // The peer required markers: the first marker precedes the RTR and is covered.
        if let Some(crc_m) = crc_with_marker {
            let mut expected = vec![0, 0, 0, 0];
            expected.extend_from_slice(fpdu_no_crc);
            expected.extend(hex(crc_m));
            let wire = frame_all(&mut framer(true, true, 0), std::slice::from_ref(&ulpdu));
            assert_eq!(wire, expected);
            let (ulpdus, err) = deframe_all(&mut deframer(true, true, 0), &wire);
            assert_eq!((ulpdus, err), (vec![ulpdu], None));
        }
    }
}

/// mpa-08 Figure 4 layout: ULPDU_Length 16, ULPDU octets 0-9, marker FPDUPTR 0x000C, ULPDU
/// octets 10-15, pad 2, CRC: 28 octets (MPA-4.3-3, MPA-4.1-2).
#[test]
fn figure_4_marker_inside_ulpdu_pad_2() {
    let ulpdu: Vec<u8> = (1..=16).collect();
    // The marker is 12 octets after ULPDU_Length, so the FPDU starts at 512 - 12.
    let mut f = framer(true, true, 500);
    let wire = frame_all(&mut f, std::slice::from_ref(&ulpdu));
    assert_eq!(wire.len(), 28);
    assert_eq!(&wire[..2], &[0x00, 0x10]);
    assert_eq!(&wire[2..12], &ulpdu[..10]);
    assert_eq!(&wire[12..16], &[0, 0, 0x00, 0x0C]);
    assert_eq!(&wire[16..22], &ulpdu[10..]);
    assert_eq!(&wire[22..24], &[0, 0]);
    assert_eq!(&wire[24..], &crc_to_wire(crc32c(&wire[..24])));
    let mut d = deframer(true, true, 500);
    let (ulpdus, err) = deframe_all(&mut d, &wire);
    assert_eq!((ulpdus, err), (vec![ulpdu], None));
    // The marker sat inside the ULPDU, so it had to be reassembled.
}

/// A marker between pad and CRC belongs to, and is covered by, the current FPDU
/// (MPA-4.4-16; WIRE-FORMATS §7.3 rule 4).
#[test]
fn marker_between_pad_and_crc() {
    let ulpdu: Vec<u8> = (0..41).collect(); // pad 1
    let start = 512 - 44; // length 2 + 41 + pad 1 = 44 octets before the marker
    let wire = frame_all(&mut framer(true, true, start), std::slice::from_ref(&ulpdu));
    assert_eq!(wire.len(), 52);
    assert_eq!(wire[43], 0, "pad");
    assert_eq!(
        &wire[44..48],
        &[0, 0, 0, 44],
        "FPDUPTR back to ULPDU_Length"
    );
    assert_eq!(&wire[48..], &crc_to_wire(crc32c(&wire[..48])));
    let mut d = deframer(true, true, start);
    let (ulpdus, err) = deframe_all(&mut d, &wire);
    assert_eq!((ulpdus, err), (vec![ulpdu.clone()], None));
    assert_eq!(d.markers_seen(), 1);
    // And an FPDU ending right at 512 leaves the marker to the next FPDU (MPA-4.3-11).
    let mut f = framer(true, true, 512 - 48);
    let wire = frame_all(&mut f, &[ulpdu.clone(), ulpdu.clone()]);
    assert_eq!(wire.len(), 48 + 52);
    assert_eq!(&wire[48..52], &[0, 0, 0, 0]);
    assert_eq!(&wire[96..], &crc_to_wire(crc32c(&wire[48..96])));
    let (ulpdus, err) = deframe_all(&mut deframer(true, true, 512 - 48), &wire);
    assert_eq!((ulpdus, err), (vec![ulpdu.clone(), ulpdu], None));
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

const SIZES: [usize; 10] = [0, 1, 2, 3, 4, 511, 512, 513, 1442, 4096];

fn sized_stream() -> Vec<Vec<u8>> {
    SIZES
        .iter()
        .enumerate()
        .map(|(i, &len)| pattern(len, i as u8))
        .collect()
}

/// Split at every byte (GUIDE §4 rung 2; MPA-5.1-5, MPA-A.4-1): a stream of assorted FPDUs
/// fed in two chunks at every split point, and byte by byte, yields the same ULPDUs.
#[test]
fn split_at_every_byte() {
    let ulpdus = sized_stream();
    for markers in [false, true] {
        for crc in [false, true] {
            let wire = frame_all(&mut framer(markers, crc, 0), &ulpdus);
            for split in 0..=wire.len() {
                let mut d = deframer(markers, crc, 0);
                let (got, err) = deframe_chunks(&mut d, [&wire[..split], &wire[split..]]);
                assert_eq!(err, None, "markers {markers} crc {crc} split {split}");
                assert!(got == ulpdus, "markers {markers} crc {crc} split {split}");
                assert!(!d.in_fpdu());
                assert_eq!(d.stream_offset(), wire.len() as u64);
            }
            let mut d = deframer(markers, crc, 0);
            let (got, err) = deframe_chunks(&mut d, wire.chunks(1));
            assert_eq!(err, None);
            assert!(got == ulpdus, "byte by byte, markers {markers} crc {crc}");
            assert_eq!(d.fpdus(), ulpdus.len() as u64);
            let total: usize = ulpdus.iter().map(Vec::len).sum();
            assert_eq!(d.ulpdu_octets(), total as u64);
        }
    }
}

/// Split at every byte with markers, at every 4-aligned marker phase (MPA-4.3-8): the
/// stream of `split_at_every_byte` starts on a marker, so its markers all fall inside a
/// ULPDU's payload. Here the stream starts at each phase in turn, so markers also fall
/// between two FPDUs (MPA-4.3-11, MPA-4.4-17), inside the DDP header and between pad and CRC
/// (MPA-4.4-16); the test checks that each of these cases occurs. CRC off is fed with
/// garbage in every CRC field, which MUST NOT be checked (MPA-4.1-4).
#[test]
fn split_at_every_byte_at_every_marker_phase() {
    // Short ULPDUs (RTR-sized, header-sized) so that markers land on every field.
    let sizes = [0usize, 1, 2, 3, 14, 18, 26, 41, 46, 70, 100, 505];
    let ulpdus: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &len)| pattern(len, i as u8 + 1))
        .collect();
    for crc in [false, true] {
        let (mut between, mut in_header, mut before_crc) = (0, 0, 0);
        for phase in (0..512u64).step_by(4) {
            // Frames with CRCs either way: with CRC off the fields are then overwritten.
            let mut f = framer(true, true, phase);
            let mut wire = Vec::new();
            for u in &ulpdus {
                let start = f.stream_offset();
                wire.extend(frame_all(&mut f, std::slice::from_ref(u)));
                let end = f.stream_offset();
                let n = wire.len();
                if !crc {
                    wire[n - 4..].copy_from_slice(&[0xA5, 0x5A, 0xC3, (n % 251) as u8]);
                }
                let mut m = start + fpdu::octets_to_next_marker(start) as u64;
                while m < end {
                    let rel = m - start;
                    if rel == 0 {
                        between += 1;
                    } else if end - m == 8 {
                        before_crc += 1;
                    } else if rel < 2 + 18 + 4 {
                        in_header += 1;
                    }
                    m += 512;
                }
            }
            let mut d = deframer(true, crc, phase);
            let (got, err) = deframe_chunks(&mut d, wire.chunks(1));
            assert_eq!(err, None, "phase {phase} crc {crc}");
            assert!(got == ulpdus, "phase {phase} crc {crc}");
            assert!(!d.in_fpdu());
            assert_eq!(d.stream_offset(), phase + wire.len() as u64);
        }
        assert!(
            between > 0 && in_header > 0 && before_crc > 0,
            "marker cases covered: {between} {in_header} {before_crc}"
        );
    }
}

/// Zero copy when the FPDU is contiguous in the input; reassembly otherwise.
#[test]
fn borrowed_when_contiguous() {
    let ulpdu = pattern(4096, 7);
    let wire = frame_all(&mut framer(false, true, 0), std::slice::from_ref(&ulpdu));
    let mut d = deframer(false, true, 0);
    let (n, u) = d.poll(&wire).unwrap();
    assert_eq!(n, wire.len());
    let u = u.unwrap();
    assert!(u.is_borrowed());
    assert_eq!(&*u, &ulpdu[..]);

    let mut d = deframer(false, true, 0);
    assert_eq!(d.poll(&wire[..100]).unwrap(), (100, None));
    assert!(d.in_fpdu());
    let (n, u) = d.poll(&wire[100..]).unwrap();
    assert_eq!(n, wire.len() - 100);
    let u = u.unwrap();
    assert!(!u.is_borrowed());
    assert_eq!(u.as_slice(), &ulpdu[..]);

    // With markers, a small FPDU that no marker cuts is still borrowed.
    let small = pattern(40, 1);
    let wire = frame_all(&mut framer(true, true, 0), std::slice::from_ref(&small));
    let mut d = deframer(true, true, 0);
    let (_, u) = d.poll(&wire).unwrap();
    assert!(u.unwrap().is_borrowed());
}

/// Corruption (MPA-8-2, MPA-8-3, MPA-8-12): with CRC on, flipping any single octet of a
/// small stream is detected; no wrong ULPDU is ever delivered, nothing panics.
/// MPA-4.4-1: CRC generation and checking.
#[test]
fn every_flipped_byte_is_detected_with_crc() {
    let ulpdus: Vec<Vec<u8>> = [0usize, 5, 13, 40, 600]
        .iter()
        .map(|&n| pattern(n, n as u8))
        .collect();
    for markers in [false, true] {
        let wire = frame_all(&mut framer(markers, true, 0), &ulpdus);
        for at in 0..wire.len() {
            for mask in [0x01u8, 0x80, 0xFF] {
                let mut bad = wire.clone();
                bad[at] ^= mask;
                // A zero tail completes any FPDU whose length the flip made longer.
                bad.extend(std::iter::repeat_n(0u8, 70_000));
                let mut d = deframer(markers, true, 0);
                let (got, err) = deframe_all(&mut d, &bad);
                assert!(
                    matches!(err, Some(MpaError::CrcMismatch | MpaError::MarkerMismatch)),
                    "markers {markers} flip {mask:#x} at {at}: {err:?}"
                );
                assert!(got.len() < ulpdus.len(), "flip at {at} went unnoticed");
                assert_eq!(got[..], ulpdus[..got.len()], "a wrong ULPDU was delivered");
                // Poisoned (MPA-8-12): the same error, and nothing more, even for good data.
                let e = err.unwrap();
                assert_eq!(d.poll(&wire), Err(e));
                assert_eq!(d.error(), Some(e));
            }
        }
    }
}

/// With CRC off flips may go unnoticed, but nothing panics and framing errors still poison.
#[test]
fn flipped_bytes_without_crc_never_panic() {
    let ulpdus: Vec<Vec<u8>> = [3usize, 40, 700].iter().map(|&n| pattern(n, 9)).collect();
    for markers in [false, true] {
        let wire = frame_all(&mut framer(markers, false, 0), &ulpdus);
        for at in 0..wire.len() {
            let mut bad = wire.clone();
            bad[at] ^= 0xFF;
            let mut d = deframer(markers, false, 0);
            let _ = deframe_chunks(&mut d, bad.chunks(7));
        }
    }
}

/// A marker whose FPDUPTR disagrees with the length chain is code 3 (MPA-8-3), reported
/// after the CRC is found valid when CRCs are on, at once when they are off.
/// MPA-4.3-6: the low two FPDUPTR bits are taken as zero.
#[test]
fn marker_mismatch_with_valid_crc() {
    let ulpdu = pattern(1000, 3);
    let mut wire = frame_all(&mut framer(true, true, 0), std::slice::from_ref(&ulpdu));
    // Markers at 0 (FPDUPTR 0) and 512 (FPDUPTR 508); corrupt the second and fix the CRC.
    assert_eq!(&wire[512..516], &[0, 0, 0x01, 0xFC]);
    wire[515] = 0xF8;
    let n = wire.len();
    let crc = crc32c(&wire[..n - 4]);
    wire[n - 4..].copy_from_slice(&crc_to_wire(crc));
    let mut d = deframer(true, true, 0);
    let (got, err) = deframe_all(&mut d, &wire);
    assert!(got.is_empty());
    assert_eq!(err, Some(MpaError::MarkerMismatch));
    assert_eq!(
        d.fault(),
        Some(DeframeFault::Marker {
            marker_offset: 512,
            expected: 0x1FC,
            received: 0x1F8
        })
    );
    // CRC off: detected as soon as the marker is complete.
    let mut d = deframer(true, false, 0);
    assert_eq!(d.poll(&wire[..516]), Err(MpaError::MarkerMismatch));
    // The low two FPDUPTR bits and the reserved field are ignored (MPA-4.2-3, MPA-4.2-5).
    wire[512] = 0xAB;
    wire[515] = 0xFF;
    let crc = crc32c(&wire[..n - 4]);
    wire[n - 4..].copy_from_slice(&crc_to_wire(crc));
    let (got, err) = deframe_all(&mut deframer(true, true, 0), &wire);
    assert_eq!((got, err), (vec![ulpdu], None));
}

/// A ULPDU_Length above the configured maximum is refused at once as a framing error
/// (code 3; see the deframer's module documentation) without waiting for the body.
#[test]
fn oversized_ulpdu_length_is_a_framing_error() {
    let mut d = Deframer::new(DeframerConfig {
        max_ulpdu_len: 100,
        ..DeframerConfig::default()
    });
    assert_eq!(
        d.poll(&[0x00, 0x64, 0, 0]).map(|(n, u)| (n, u.is_some())),
        Ok((4, false))
    );
    let mut d = Deframer::new(DeframerConfig {
        max_ulpdu_len: 100,
        ..DeframerConfig::default()
    });
    assert_eq!(d.poll(&[0x00, 0x65]), Err(MpaError::MarkerMismatch));
    assert_eq!(
        d.fault(),
        Some(DeframeFault::UlpduTooLong { len: 101, max: 100 })
    );
    assert_eq!(d.poll(&[]), Err(MpaError::MarkerMismatch));
}

/// Framer limits: MPA-3-5 (64768) and MULPDU (MPA-3-7), typed errors, no state change.
#[test]
fn framer_refuses_oversized_ulpdus() {
    let mut f = framer(false, true, 0);
    let big = vec![0u8; MAX_ULPDU_LEN + 1];
    let mut out = vec![0u8; 70_000];
    assert_eq!(
        f.emit(&[&big], &mut out),
        Err(FramerError::UlpduTooLong {
            len: MAX_ULPDU_LEN + 1,
            max: MAX_ULPDU_LEN
        })
    );
    assert_eq!(
        f.emit(&[&big[..MAX_ULPDU_LEN]], &mut out),
        Ok(fpdu::fpdu_len(MAX_ULPDU_LEN))
    );
    // The largest FPDU with markers still deframes (FPDUPTR fits 16 bits).
    let mut f = framer(true, true, 4);
    let ulpdu = pattern(MAX_ULPDU_LEN, 5);
    let wire = frame_all(&mut f, std::slice::from_ref(&ulpdu));
    let (got, err) = deframe_all(&mut deframer(true, true, 4), &wire);
    assert_eq!(err, None);
    assert!(got == vec![ulpdu]);
}

/// A reference framer written the slow, obvious way: content octet by octet, a marker in
/// front of any octet that falls on a multiple of 512, CRC over everything before the CRC
/// field.
fn reference_frame(offset: u64, ulpdu: &[u8], markers: bool, crc: bool) -> Vec<u8> {
    let mut content = (ulpdu.len() as u16).to_be_bytes().to_vec();
    content.extend_from_slice(ulpdu);
    content.resize(content.len() + fpdu::pad_len(ulpdu.len()), 0);
    let mut out = Vec::new();
    let mut pos = offset;
    let mut start = None;
    let push = |out: &mut Vec<u8>, byte: u8, pos: &mut u64, start: &mut Option<u64>| {
        if markers && (*pos).is_multiple_of(512) {
            let ptr = start.map_or(0, |s: u64| pos.wrapping_sub(s) as u16 & !3);
            out.extend_from_slice(&[0, 0, (ptr >> 8) as u8, ptr as u8]);
            *pos = pos.wrapping_add(4);
        }
        if start.is_none() {
            *start = Some(*pos);
        }
        out.push(byte);
        *pos = pos.wrapping_add(1);
    };
    for &b in &content {
        push(&mut out, b, &mut pos, &mut start);
    }
    // A marker due before the CRC is covered by it.
    if markers && pos.is_multiple_of(512) {
        let ptr = pos.wrapping_sub(start.unwrap()) as u16 & !3;
        out.extend_from_slice(&[0, 0, (ptr >> 8) as u8, ptr as u8]);
    }
    let value = if crc { crc32c(&out) } else { 0 };
    out.extend_from_slice(&crc_to_wire(value));
    out
}

fn arb_ulpdus() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(
        prop_oneof![
            prop::collection::vec(any::<u8>(), 0..16),
            prop::collection::vec(any::<u8>(), 0..1100),
        ],
        1..6,
    )
}

proptest! {
    /// The whole-FPDU fast path (an FPDU whole at the front of the input, no marker inside)
    /// and the general path agree on everything, for valid and corrupted streams: the same
    /// ULPDUs at the same offsets, the same error with the same fault. Whole input (the fast
    /// path wherever it applies) against byte by byte (never the fast path).
    #[test]
    fn fast_path_and_octet_by_octet_agree(
        ulpdus in arb_ulpdus(),
        // Half the cases start on a marker, so that the first FPDU has a leading marker.
        offset4 in prop_oneof![0u64..2048, (0u64..16).prop_map(|k| k * 128)],
        markers in any::<bool>(),
        crc in any::<bool>(),
        flip in prop::option::of((any::<prop::sample::Index>(), 1u8..=255)),
    ) {
        let offset = offset4 * 4;
        let mut wire = frame_all(&mut framer(markers, crc, offset), &ulpdus);
        if let Some((at, x)) = flip {
            let i = at.index(wire.len());
            wire[i] ^= x;
        }
        let mut d_whole = deframer(markers, crc, offset);
        let whole = trace(&mut d_whole, [&wire[..]]);
        let mut d_octets = deframer(markers, crc, offset);
        let octets = trace(&mut d_octets, wire.chunks(1));
        prop_assert_eq!(&whole, &octets);
        prop_assert_eq!(d_whole.in_fpdu(), d_octets.in_fpdu());
        // Chunks that end right after each marker: a marker taken alone is the FPDU's
        // first octets (covered by its CRC), so the FPDU that follows in the next chunk must
        // not take the fast path as if nothing of it had been received.
        let mut d_cut = deframer(markers, crc, offset);
        let cut = trace(&mut d_cut, after_each_marker(&wire, offset));
        prop_assert_eq!(&whole, &cut);
        prop_assert_eq!(d_whole.in_fpdu(), d_cut.in_fpdu());
    }

    /// MPA-6-2 through a segment's digest (`Deframer::poll_digest`): fed one FPDU a chunk
    /// (an aligned sender's segments) or several, each chunk with its CRC32c, a deframer
    /// gives what one that computes every CRC gives, for valid and corrupted streams (the
    /// digest taken over the corrupted octets, as the receiver's checksum pass takes it).
    #[test]
    fn a_chunks_digest_checks_as_the_computed_crc(
        ulpdus in arb_ulpdus(),
        offset4 in 0u64..2048,
        markers in any::<bool>(),
        crc in any::<bool>(),
        per_chunk in 1usize..3,
        flip in prop::option::of((any::<prop::sample::Index>(), 1u8..=255)),
    ) {
        let offset = offset4 * 4;
        let mut f = framer(markers, crc, offset);
        let mut wire = Vec::new();
        let mut ends = Vec::new();
        for (i, u) in ulpdus.iter().enumerate() {
            wire.extend(frame_all(&mut f, std::slice::from_ref(u)));
            if (i + 1) % per_chunk == 0 || i + 1 == ulpdus.len() {
                ends.push(wire.len());
            }
        }
        if let Some((at, x)) = flip {
            let i = at.index(wire.len());
            wire[i] ^= x;
        }
        let chunks: Vec<&[u8]> = ends
            .iter()
            .scan(0, |from, &end| {
                let c = &wire[*from..end];
                *from = end;
                Some(c)
            })
            .collect();
        let mut d_plain = deframer(markers, crc, offset);
        let plain = trace(&mut d_plain, chunks.iter().copied());
        let mut d_digest = deframer(markers, crc, offset);
        let digested = trace_with(&mut d_digest, chunks.iter().copied(), true);
        prop_assert_eq!(&plain, &digested);
        prop_assert_eq!(d_plain.in_fpdu(), d_digest.in_fpdu());
    }

    /// Emit then deframe is the identity at any start position, markers on/off, CRC on/off,
    /// any chunking; `fpdu_wire_len` equals bytes written; the framer matches the reference.
    #[test]
    fn framer_deframer_round_trip(
        ulpdus in arb_ulpdus(),
        offset4 in 0u64..2048,
        far in any::<bool>(),
        markers in any::<bool>(),
        crc in any::<bool>(),
        cuts in prop::collection::vec(1usize..700, 0..20),
    ) {
        // Offsets count from the start of FPDU mode; near 2^64 they wrap, and since 512
        // divides 2^64 the markers keep their places.
        let offset = if far { u64::MAX - 2047 - offset4 * 4 } else { offset4 * 4 };
        let mut f = framer(markers, crc, offset);
        let mut wire = Vec::new();
        let mut pos = offset;
        for u in &ulpdus {
            let reference = reference_frame(pos, u, markers, crc);
            // Gather from up to three slices.
            let (a, rest) = u.split_at(u.len() / 3);
            let (b, c) = rest.split_at(rest.len() / 2);
            let need = f.fpdu_wire_len(u.len());
            let mut out = vec![0u8; need + 3];
            let n = f.emit(&[a, b, c], &mut out).unwrap();
            prop_assert_eq!(n, need);
            prop_assert_eq!(&out[..n], &reference[..]);
            wire.extend_from_slice(&out[..n]);
            pos = pos.wrapping_add(n as u64);
        }
        prop_assert_eq!(f.stream_offset(), pos);
        let mut chunks = Vec::new();
        let mut rest = &wire[..];
        for cut in cuts {
            let cut = cut.min(rest.len());
            let (head, tail) = rest.split_at(cut);
            chunks.push(head);
            rest = tail;
        }
        chunks.push(rest);
        let mut d = deframer(markers, crc, offset);
        let (got, err) = deframe_chunks(&mut d, chunks);
        prop_assert_eq!(err, None);
        prop_assert_eq!(got, ulpdus);
        prop_assert_eq!(d.stream_offset(), pos);
        prop_assert!(!d.in_fpdu());
    }

    /// Offsets that are not a multiple of 4 never occur in a conforming stream (markers could
    /// then split the length or CRC field), but framer and deframer still agree and never
    /// panic.
    #[test]
    fn round_trip_at_unaligned_offsets(
        ulpdus in arb_ulpdus(),
        offset in 0u64..4096,
        crc in any::<bool>(),
        chunk in 1usize..300,
    ) {
        let wire = frame_all(&mut framer(true, crc, offset), &ulpdus);
        let mut d = deframer(true, crc, offset);
        let (got, err) = deframe_chunks(&mut d, wire.chunks(chunk));
        prop_assert_eq!(err, None);
        prop_assert_eq!(got, ulpdus);
    }

    /// Arbitrary bytes never panic, in any configuration and chunking; an error poisons.
    #[test]
    fn arbitrary_bytes_never_panic(
        data in prop::collection::vec(any::<u8>(), 0..3000),
        markers in any::<bool>(),
        crc in any::<bool>(),
        max in prop_oneof![Just(0usize), 0usize..2000, Just(usize::MAX)],
        offset in any::<u64>(),
        chunk in 1usize..600,
    ) {
        let mut d = Deframer::new(DeframerConfig {
            markers,
            crc,
            max_ulpdu_len: max,
            stream_offset: offset,
        });
        let (got, err) = deframe_chunks(&mut d, data.chunks(chunk));
        prop_assert!(got.iter().all(|u| u.len() <= d.max_ulpdu_len()));
        if let Some(e) = err {
            prop_assert_eq!(d.poll(&data), Err(e));
        }
    }
}

/// The deframer allocates no reassembly buffer for an idle connection, nor for FPDUs that
/// arrive whole (an MPA-aligned sender); a ULPDU that arrives in pieces grows the buffer to
/// its own length, no more, and never beyond the configured maximum.
#[test]
fn reassembly_buffer_is_allocated_on_demand() {
    let mut framer = Framer::new(FramerConfig::default());
    let frame = |f: &mut Framer, len: usize| {
        let ulpdu: Vec<u8> = (0..len).map(|i| i as u8).collect();
        let mut out = vec![0u8; len + 64];
        let n = f.emit(&[&ulpdu], &mut out).unwrap();
        out.truncate(n);
        (out, ulpdu)
    };
    let mut d = Deframer::new(DeframerConfig {
        max_ulpdu_len: 64768,
        ..DeframerConfig::default()
    });
    assert_eq!(
        d.reassembly_capacity(),
        0,
        "an idle deframer holds no buffer"
    );
    // Whole FPDUs, each in one input: taken in place.
    for len in [16, 1000, 1400] {
        let (fpdu, ulpdu) = frame(&mut framer, len);
        let (used, got) = d.poll(&fpdu).unwrap();
        assert_eq!(used, fpdu.len());
        assert_eq!(&*got.expect("a whole FPDU"), &ulpdu[..]);
    }
    assert_eq!(d.reassembly_capacity(), 0, "whole FPDUs need no reassembly");
    // One FPDU of 3000 octets split in three: the buffer grows to 3000.
    let (fpdu, ulpdu) = frame(&mut framer, 3000);
    let mut delivered = None;
    for piece in fpdu.chunks(1100) {
        let (used, got) = d.poll(piece).unwrap();
        assert_eq!(used, piece.len());
        if let Some(u) = got {
            delivered = Some(u.to_vec());
        }
    }
    assert_eq!(delivered.as_deref(), Some(&ulpdu[..]));
    assert_eq!(d.reassembly_capacity(), 3000);
    // A smaller split ULPDU reuses it.
    let (fpdu, _) = frame(&mut framer, 500);
    for piece in fpdu.chunks(100) {
        d.poll(piece).unwrap();
    }
    assert_eq!(d.reassembly_capacity(), 3000);
}

/// The digest is what checks a whole FPDU given with one (`Deframer::poll_digest`): a
/// valid FPDU with a digest that is not its input's takes the general path, which computes
/// the CRC and delivers it; a corrupted one with the digest of the octets sent (not of
/// those received, which a caller never gives) is trusted, which shows that the digest,
/// not a second CRC pass, decided; with its own digest it fails.
#[test]
fn the_digest_is_what_checks_a_whole_fpdu() {
    let u = pattern(1_000, 3);
    let wire = frame_all(&mut framer(false, true, 0), std::slice::from_ref(&u));
    let good = crc32c(&wire);
    let mut d = deframer(false, true, 0);
    let (n, got) = d.poll_digest(&wire, Some(good ^ 1)).expect("a valid FPDU");
    assert_eq!((n, got.map(|g| g.to_vec())), (wire.len(), Some(u.clone())));
    let mut bad = wire.clone();
    bad[100] ^= 0x10;
    let mut d = deframer(false, true, 0);
    let (n, got) = d.poll_digest(&bad, Some(good)).expect("trusted");
    assert_eq!(n, bad.len());
    assert_ne!(got.map(|g| g.to_vec()), Some(u));
    assert_eq!(d.fpdus_by_digest(), 1);
    let mut d = deframer(false, true, 0);
    assert_eq!(
        d.poll_digest(&bad, Some(crc32c(&bad))).map(|(n, _)| n),
        Err(MpaError::CrcMismatch)
    );
}

/// Four octets that, appended to `prefix`, make the CRC32c of the whole `target`: the
/// CRC's shift register run backwards over 32 bits (reflected polynomial 0x82F63B78; a
/// state whose top bit is set came from one whose low bit was set).
fn forge_crc_suffix(prefix: &[u8], target: u32) -> [u8; 4] {
    const POLY: u32 = 0x82F6_3B78;
    let mut s = !target;
    for _ in 0..32 {
        s = if s & 0x8000_0000 != 0 {
            ((s ^ POLY) << 1) | 1
        } else {
            s << 1
        };
    }
    (s ^ !crc32c(prefix)).to_le_bytes()
}

/// The digest checks an FPDU only when the FPDU is all of the input
/// (`Deframer::poll_digest`): with octets after it, four of them can be chosen so that the
/// input's CRC32c is exactly what a valid FPDU's field would give. A corrupted FPDU
/// followed by such octets, with the input's true CRC32c as the digest, is refused.
#[test]
fn a_digest_over_more_than_the_fpdu_is_not_used() {
    let u = pattern(1_000, 5);
    let mut bad = frame_all(&mut framer(false, true, 0), std::slice::from_ref(&u));
    bad[200] ^= 0x04;
    let field: [u8; 4] = bad[bad.len() - 4..].try_into().unwrap();
    let target = fpdu::crc32c_append(fpdu::crc_from_wire(field), &field);
    let mut input = bad.clone();
    input.extend_from_slice(&forge_crc_suffix(&bad, target));
    assert_eq!(crc32c(&input), target, "the forged suffix gives the target");
    let mut d = deframer(false, true, 0);
    assert_eq!(
        d.poll_digest(&input, Some(crc32c(&input))).map(|(n, _)| n),
        Err(MpaError::CrcMismatch)
    );
    assert_eq!(d.fpdus_by_digest(), 0);
}
