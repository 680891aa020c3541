//! The deframer against an independent reference written straight from mpa-08 §4 and §8,
//! on valid, corrupted and truncated streams, markers and CRC on and off, any chunking.
//!
//! `mpa_framing.rs` checks the deframer against the framer (round trip) and against itself
//! (fast path against octet by octet); this file gives it an oracle for corrupted input: the
//! same ULPDUs and the same first fault, detail for detail.
//!
//! Requirement IDs refer to `shared/specs/REQUIREMENTS.md`.

use proptest::prelude::*;
use warpcore_proto::mpa::deframer::{DeframeFault, Deframer, DeframerConfig};
use warpcore_proto::mpa::framer::{Framer, FramerConfig};
use warpcore_proto::wire::fpdu::{self, crc32c, MAX_ULPDU_LEN};

/// A marker as the reference finds it: where it is in the input, which content octet (the
/// stream without markers) it stands in front of, and its FPDUPTR with the two low bits
/// taken as zero (MPA-4.2-5).
struct Found {
    at: usize,
    before: usize,
    fpduptr: u16,
}

/// What a deframer must give for `wire` (starting at stream offset `offset`), computed the
/// slow, obvious way: strip the markers first (one at every stream offset that is a multiple
/// of 512, MPA-4.3-8), then walk the ULPDU_Length chain over the content (MPA-6-3).
///
/// - A marker belongs to the FPDU of the content octet it stands in front of: one in front
///   of ULPDU_Length must be 0 (MPA-4.3-5, MPA-4.3-11), any other points back to
///   ULPDU_Length (MPA-4.3-3, MPA-4.3-9).
/// - The CRC covers every input octet from the FPDU's first (its leading marker, if any) up
///   to its CRC field (MPA-4.4-15 to MPA-4.4-17).
/// - Faults in the order the stream reveals them: a ULPDU_Length above `max` once the field
///   is complete; with CRCs on, a CRC mismatch (MPA-8-2), then the first bad marker of a
///   CRC-valid FPDU (MPA-8-3); with CRCs off, a bad marker as soon as it is complete.
/// - An FPDU cut short by the end of the input gives nothing (but a complete bad marker
///   inside it with CRCs off).
fn reference(
    wire: &[u8],
    offset: u64,
    markers: bool,
    crc: bool,
    max: usize,
) -> (Vec<Vec<u8>>, Option<DeframeFault>) {
    // (octet, its index in `wire`) for every non-marker octet.
    let mut content: Vec<(u8, usize)> = Vec::new();
    let mut found: Vec<Found> = Vec::new();
    let mut i = 0;
    while i < wire.len() {
        if markers && offset.wrapping_add(i as u64).is_multiple_of(512) {
            if i + 4 > wire.len() {
                break; // a marker cut short: nothing is known of it yet
            }
            found.push(Found {
                at: i,
                before: content.len(),
                fpduptr: u16::from_be_bytes([wire[i + 2], wire[i + 3]]) & !3,
            });
            i += 4;
        } else {
            content.push((wire[i], i));
            i += 1;
        }
    }
    let marker_fault = |m: &Found, expected: u16| DeframeFault::Marker {
        marker_offset: offset.wrapping_add(m.at as u64),
        expected,
        received: m.fpduptr,
    };
    let mut out = Vec::new();
    let (mut c, mut m) = (0, 0); // next content octet, next marker
    loop {
        if c + 2 > content.len() {
            // Not even the length: only a leading marker can be judged (CRC off).
            if !crc {
                if let Some(bad) = found[m..].iter().find(|f| f.fpduptr != 0) {
                    return (out, Some(marker_fault(bad, 0)));
                }
            }
            return (out, None);
        }
        let start = content[c].1;
        let len = usize::from(u16::from_be_bytes([content[c].0, content[c + 1].0]));
        let total = if len > max { 2 } else { fpdu::fpdu_len(len) };
        // This FPDU's markers and the first that disagrees, with where it ends.
        let mut first_bad = None;
        let mut n = m;
        while n < found.len() && found[n].before < c + total {
            let f = &found[n];
            let expected = if f.before == c {
                0
            } else {
                (f.at - start) as u16 & !3
            };
            if f.fpduptr != expected && first_bad.is_none() {
                first_bad = Some((f.at + 4, marker_fault(f, expected)));
            }
            n += 1;
        }
        if len > max {
            return match first_bad {
                Some((end, fault)) if !crc && end <= content[c + 1].1 => (out, Some(fault)),
                _ => (
                    out,
                    Some(DeframeFault::UlpduTooLong {
                        len: len as u16,
                        max,
                    }),
                ),
            };
        }
        if c + total > content.len() {
            return (out, if crc { None } else { first_bad.map(|b| b.1) });
        }
        if crc {
            let first = if m < found.len() && found[m].before == c {
                found[m].at
            } else {
                start
            };
            let field: Vec<u8> = content[c + total - 4..c + total]
                .iter()
                .map(|o| o.0)
                .collect();
            let received = u32::from_le_bytes([field[0], field[1], field[2], field[3]]);
            let computed = crc32c(&wire[first..content[c + total - 4].1]);
            if received != computed {
                return (out, Some(DeframeFault::Crc { received, computed }));
            }
        }
        if let Some((_, fault)) = first_bad {
            return (out, Some(fault));
        }
        out.push(content[c + 2..c + 2 + len].iter().map(|o| o.0).collect());
        c += total;
        m = n;
    }
}

/// Feeds `chunks` in order, polling each until it is consumed; the ULPDUs and the fault.
fn deframe(d: &mut Deframer, chunks: &[&[u8]]) -> (Vec<Vec<u8>>, Option<DeframeFault>) {
    let mut out = Vec::new();
    for chunk in chunks {
        let mut input = *chunk;
        loop {
            match d.poll(input) {
                Ok((n, Some(u))) => {
                    out.push(u.to_vec());
                    input = &input[n..];
                }
                Ok((_, None)) => break,
                Err(e) => {
                    assert_eq!(d.fault().map(DeframeFault::mpa_error), Some(e));
                    return (out, d.fault());
                }
            }
        }
    }
    (out, None)
}

proptest! {
    /// MPA-4.3-3, MPA-4.3-5, MPA-4.3-9, MPA-4.3-11, MPA-4.4-15 to MPA-4.4-21, MPA-5.1-5,
    /// MPA-6-3, MPA-8-2, MPA-8-3: framed streams with up to three corrupted octets, cut
    /// anywhere and fed in chunks of any size, deframe exactly as the reference says.
    #[test]
    fn deframer_matches_the_reference(
        ulpdus in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..1100), 1..5),
        // Half the cases start on a marker, so that the first FPDU has a leading marker.
        offset4 in prop_oneof![0u64..2048, (0u64..16).prop_map(|k| k * 128)],
        markers in any::<bool>(),
        crc in any::<bool>(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 0..3),
        cut in prop::option::of(any::<prop::sample::Index>()),
        max in prop_oneof![Just(MAX_ULPDU_LEN), 0usize..1200],
        chunk in 1usize..700,
    ) {
        let offset = offset4 * 4;
        let mut f = Framer::new(FramerConfig {
            markers,
            crc,
            mulpdu: MAX_ULPDU_LEN,
            stream_offset: offset,
        });
        let mut wire = Vec::new();
        for u in &ulpdus {
            let at = wire.len();
            wire.resize(at + f.fpdu_wire_len(u.len()), 0);
            f.emit(&[u], &mut wire[at..]).unwrap();
        }
        for (at, x) in flips {
            let i = at.index(wire.len());
            wire[i] ^= x;
        }
        if let Some(cut) = cut {
            wire.truncate(cut.index(wire.len() + 1));
        }
        let mut d = Deframer::new(DeframerConfig {
            markers,
            crc,
            max_ulpdu_len: max,
            stream_offset: offset,
        });
        let chunks: Vec<&[u8]> = wire.chunks(chunk).collect();
        prop_assert_eq!(
            deframe(&mut d, &chunks),
            reference(&wire, offset, markers, crc, max)
        );
    }
}
