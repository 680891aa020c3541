//! The bodies of the cargo-fuzz targets, shared by `fuzz/fuzz_targets/*.rs` (libFuzzer) and
//! `proto/tests/fuzz_corpus.rs` (which replays every committed corpus file as a regular
//! test), so that a crash found by the fuzzer stays a regression test forever.
//!
//! Every body takes arbitrary bytes, must never panic on them, and asserts properties
//! strong enough to catch wrong answers as well as crashes (GUIDE §4 rung 4):
//!
//! - [`deframer`]: the MPA deframer under arbitrary marker/CRC/offset settings, with the
//!   differential property that the same bytes fed whole or in arbitrary chunks yield the
//!   same ULPDUs and the same error; in "framer mode" ULPDUs are framed by our framer and
//!   must come back unchanged.
//! - [`headers`]: every header parser; whatever parses re-emits and re-parses to the same
//!   repr (and, where the format keeps every bit, to the same octets).
//! - [`negotiation`]: the MPA initiator and responder fed arbitrary peer bytes in arbitrary
//!   chunks (whole and chunked must agree), and the two machines talking to each other.
//! - [`ddp_receive`]: proto's DDP receive validation and RDMAP receive checks against a
//!   table of buffer descriptions (no memory): every placement, Read source and atomic
//!   target they accept must lie inside what they were told. The engine's own receive path
//!   (its dispatch, placement into registered memory, Terminates and QP state) is fuzzed by
//!   the `engine_rx` target through `warpcore_engine::fuzzing`, not by a copy here.
//!
//! Input layouts are documented at each body; the seed corpora follow them.
// Each includer uses every body, but not every helper is used by every includer.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use warpcore_proto::ddp::{
    DdpReceiver, DdpSender, Placement, TaggedBuffers, TaggedFault, TaggedRegion, UntaggedBuffers,
    MAX_SEGMENT_HEADER_LEN, QUEUE_COUNT,
};
use warpcore_proto::error::{DdpError, MpaError, ProtocolError};
use warpcore_proto::mpa::deframer::{DeframeFault, Deframer, DeframerConfig};
use warpcore_proto::mpa::framer::{Framer, FramerConfig, FramerError};
use warpcore_proto::mpa::negotiation::{self, Event, Initiator, Phase, Responder};
use warpcore_proto::rdmap::terminate::TERMINATE_SEGMENT_MAX_LEN;
use warpcore_proto::rdmap::{
    self, atomic, AccessRegion, InboundReadQueue, InvalidateFault, Offending, RdmapConfig,
    StagFault, TerminateReport,
};
use warpcore_proto::wire::ddp::{DdpRepr, DdpSegment};
use warpcore_proto::wire::fpdu::{self, Fpdu, Marker, MarkerRepr, MAX_ULPDU_LEN};
use warpcore_proto::wire::mpa::{
    frame_len, Frame, FrameError, FrameKind, FrameRepr, RtrType, RtrTypes,
};
use warpcore_proto::wire::rdmap::{
    AtomicRequest, AtomicRequestRepr, AtomicResponse, AtomicResponseRepr, ImmediateData,
    ImmediateDataRepr, Opcode, ReadRequest, ReadRequestRepr, Terminate, TerminateRepr,
};
use warpcore_proto::wire::segment::{RdmapHeader, Segment, SegmentError};

// ---------------------------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------------------------

/// A tiny deterministic generator (xorshift64*), seeded from input octets, for chunk sizes.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u8) -> Rng {
        // Never zero, and different seeds give unrelated sequences.
        Rng(0x9E37_79B9_7F4A_7C15 ^ (u64::from(seed) << 17 | u64::from(seed) | 1))
    }

    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A chunk length in `1..=max`, mostly small (splits inside headers and fields), sometimes
    /// large (whole FPDUs, several at once).
    fn chunk_len(&mut self) -> usize {
        let r = self.next();
        let max = match r & 3 {
            0 => 4,
            1 => 64,
            2 => 700,
            _ => 5000,
        };
        (r >> 8) as usize % max + 1
    }
}

/// Splits `data` into chunks whose lengths come from `seed` (an empty input gives one empty
/// chunk, so that a machine still sees one call).
fn chunks(data: &[u8], seed: u8) -> Vec<&[u8]> {
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    let mut rest = data;
    while !rest.is_empty() {
        let n = rng.chunk_len().min(rest.len());
        let (head, tail) = rest.split_at(n);
        out.push(head);
        rest = tail;
    }
    if out.is_empty() {
        out.push(rest);
    }
    out
}

/// True if `inner` lies inside `outer` (a borrowed ULPDU must point into the input chunk).
fn is_subslice(outer: &[u8], inner: &[u8]) -> bool {
    let o = outer.as_ptr() as usize;
    let i = inner.as_ptr() as usize;
    i >= o && i + inner.len() <= o + outer.len()
}

// ---------------------------------------------------------------------------------------------
// deframer
// ---------------------------------------------------------------------------------------------

/// Stream offsets the deframer may start at: right after the startup (0), a little later,
/// just before a marker position, and just before the 64-bit stream offset wraps.
const START_OFFSETS: [u64; 4] = [0, 8, 508, 0u64.wrapping_sub(508)];

/// The deframer settings the first input octet selects: bit 0 markers, bit 1 CRC, bits 2-3
/// the starting stream offset ([`START_OFFSETS`]), bit 4 a small maximum ULPDU length (300,
/// so that over-long lengths are reachable by short inputs). Bits 5-7 select the framer
/// modes of [`deframer`].
fn deframer_config(cfg: u8) -> DeframerConfig {
    DeframerConfig {
        markers: cfg & 0x01 != 0,
        crc: cfg & 0x02 != 0,
        max_ulpdu_len: if cfg & 0x10 != 0 { 300 } else { MAX_ULPDU_LEN },
        stream_offset: START_OFFSETS[usize::from((cfg >> 2) & 3)],
    }
}

/// Everything observable after feeding a stream to a deframer.
#[derive(Debug, Clone, PartialEq, Eq)]
struct DeframeOutcome {
    ulpdus: Vec<Vec<u8>>,
    error: Option<MpaError>,
    fault: Option<DeframeFault>,
    stream_offset: u64,
    in_fpdu: bool,
    fpdus: u64,
    ulpdu_octets: u64,
    markers_seen: u64,
}

/// Feeds `chunks` to a fresh deframer, checking the `poll` contract on every call, and
/// stops at the first error.
fn run_deframer(config: DeframerConfig, chunks: &[&[u8]]) -> DeframeOutcome {
    run_deframer_digest(config, chunks, false)
}

/// [`run_deframer`], with `digest` giving each chunk's first poll the chunk's CRC32c
/// (`Deframer::poll_digest`, as the engine gives a segment's payload).
fn run_deframer_digest(config: DeframerConfig, chunks: &[&[u8]], digest: bool) -> DeframeOutcome {
    let mut d = Deframer::new(config);
    let mut ulpdus = Vec::new();
    let mut error = None;
    'chunks: for &chunk in chunks {
        let mut input = chunk;
        let mut dg = digest.then(|| fpdu::crc32c(chunk));
        loop {
            match d.poll_digest(input, dg.take()) {
                Ok((consumed, ulpdu)) => {
                    assert!(consumed <= input.len(), "consumed more than given");
                    match ulpdu {
                        Some(u) => {
                            assert!(u.len() <= d_max(config), "ULPDU above the maximum");
                            if u.is_borrowed() {
                                assert!(is_subslice(input, &u), "borrowed ULPDU not in input");
                            }
                            ulpdus.push(u.to_vec());
                        }
                        None => {
                            // `None` means everything was consumed (the documented contract).
                            assert_eq!(consumed, input.len(), "None before the input ran out");
                            break;
                        }
                    }
                    input = &input[consumed..];
                }
                Err(e) => {
                    // MPA-8-12: poisoned, the same error from now on and nothing delivered.
                    assert_eq!(d.poll(&[0, 0, 0, 0]).map(|(n, u)| (n, u.is_some())), Err(e));
                    assert_eq!(d.error(), Some(e));
                    assert_eq!(d.fault().map(DeframeFault::mpa_error), Some(e));
                    error = Some(e);
                    break 'chunks;
                }
            }
        }
    }
    let outcome = DeframeOutcome {
        error,
        fault: d.fault(),
        stream_offset: d.stream_offset(),
        in_fpdu: d.in_fpdu(),
        fpdus: d.fpdus(),
        ulpdu_octets: d.ulpdu_octets(),
        markers_seen: d.markers_seen(),
        ulpdus,
    };
    assert_eq!(outcome.fpdus, outcome.ulpdus.len() as u64);
    assert_eq!(
        outcome.ulpdu_octets,
        outcome.ulpdus.iter().map(|u| u.len() as u64).sum::<u64>()
    );
    outcome
}

fn d_max(config: DeframerConfig) -> usize {
    config.max_ulpdu_len.min(usize::from(u16::MAX))
}

/// Fuzz body for the MPA deframer.
///
/// Input: `[cfg, seed, stream...]`. `cfg` selects the settings ([`deframer_config`]); with
/// bit 7 set the body runs in framer mode instead ([`framer_roundtrip`]; bit 5 adds one
/// damaged octet, bit 6 a recomputed CRC for it, [`corrupted_stream`]). `seed` drives the
/// chunk sizes. The stream is deframed whole and in chunks, each both ways: without and
/// with each chunk's CRC32c for `Deframer::poll_digest` (a stream of one FPDU takes the
/// digest's check); the runs must agree
/// on every ULPDU, the error, its detail and the counters, and the deframer's own contract
/// (consumed counts, borrowed ULPDUs inside the input, poisoning after an error, MPA-8-12)
/// is checked on every call.
pub fn deframer(data: &[u8]) {
    let [cfg, seed, stream @ ..] = data else {
        return;
    };
    let config = deframer_config(*cfg);
    if cfg & 0x80 != 0 {
        framer_roundtrip(config, *seed, cfg & 0x20 != 0, cfg & 0x40 != 0, stream);
        return;
    }
    let whole = run_deframer(config, &[stream]);
    let chunked = run_deframer(config, &chunks(stream, *seed));
    assert_eq!(whole, chunked, "whole and chunked deframing disagree");
    // Each chunk with its CRC32c, as a segment's payload comes with the digest of the
    // receive checksum's pass: the same outcome (MPA-6-2 through the digest).
    let digested = run_deframer_digest(config, &chunks(stream, *seed), true);
    assert_eq!(whole, digested, "deframing with chunk digests disagrees");
    let digested_whole = run_deframer_digest(config, &[stream], true);
    assert_eq!(
        whole, digested_whole,
        "deframing with the stream's digest disagrees"
    );
    if whole.error.is_none() {
        assert_eq!(
            whole.stream_offset,
            config.stream_offset.wrapping_add(stream.len() as u64),
            "octets lost without an error"
        );
    }
    // Without markers and CRC checking every ULPDU must also be what the plain FPDU view
    // sees at the same place (the two decoders of wire::fpdu and mpa::deframer agree).
    if !config.markers {
        let mut at = 0usize;
        for u in &whole.ulpdus {
            let view = Fpdu::new_checked(&stream[at..]).expect("delivered FPDU is whole");
            assert_eq!(view.ulpdu(), &u[..]);
            if config.crc {
                assert!(view.verify_crc(), "deframer accepted a bad CRC");
            }
            at += view.total_len();
        }
    }
}

/// Framer mode of [`deframer`]: the stream is a list of ULPDUs, each `[n, octets...]` with
/// `3 * n` octets (so lengths cross the 512-octet marker interval), framed by our framer
/// with the ULPDU gathered from two slices split at a seed-chosen point, then deframed in
/// chunks. Every ULPDU must come back unchanged, with no error, and the framer's length
/// prediction must be exact.
///
/// With `corrupt` (cfg bit 5) one octet of one FPDU is then flipped (and with `fix_crc`,
/// cfg bit 6, that FPDU's CRC recomputed) and [`corrupted_stream`] checks the verdict.
fn framer_roundtrip(
    config: DeframerConfig,
    seed: u8,
    corrupt: bool,
    fix_crc: bool,
    mut stream: &[u8],
) {
    let mut framer = Framer::new(FramerConfig {
        markers: config.markers,
        crc: config.crc,
        mulpdu: d_max(config),
        stream_offset: config.stream_offset,
    });
    let mut rng = Rng::new(seed);
    let mut wire = Vec::new();
    let mut sent: Vec<Vec<u8>> = Vec::new();
    // (offset in `wire`, wire length, stream offset) of each FPDU.
    let mut fpdus: Vec<(usize, usize, u64)> = Vec::new();
    while let [n, rest @ ..] = stream {
        let len = (usize::from(*n) * 3).min(rest.len());
        let (ulpdu, tail) = rest.split_at(len);
        stream = tail;
        let split = rng.next() as usize % (ulpdu.len() + 1);
        let (a, b) = ulpdu.split_at(split);
        let need = framer.fpdu_wire_len(len);
        let before = framer.stream_offset();
        let mut out = vec![0xA5u8; need + 8];
        // One octet short must be refused without side effects.
        assert_eq!(
            framer.emit(&[a, b], &mut out[..need - 1]),
            if len > framer.max_ulpdu_len() {
                Err(FramerError::UlpduTooLong {
                    len,
                    max: framer.max_ulpdu_len(),
                })
            } else {
                Err(FramerError::OutputTooSmall { needed: need })
            }
        );
        assert_eq!(framer.stream_offset(), before);
        match framer.emit(&[a, b], &mut out) {
            Ok(written) => {
                assert_eq!(written, need, "fpdu_wire_len mispredicted");
                assert!(
                    out[written..].iter().all(|&x| x == 0xA5),
                    "wrote past the FPDU"
                );
                assert_eq!(framer.stream_offset(), before.wrapping_add(need as u64));
                if !config.markers {
                    let view = Fpdu::new_checked(&out[..written]).expect("framed FPDU");
                    assert_eq!(view.ulpdu(), ulpdu);
                    assert!(view.pad().iter().all(|&p| p == 0), "pad not zero");
                    if config.crc {
                        assert!(view.verify_crc());
                    } else {
                        assert_eq!(view.crc_field(), 0, "CRC off must send zeros");
                    }
                }
                fpdus.push((wire.len(), written, before));
                wire.extend_from_slice(&out[..written]);
                sent.push(ulpdu.to_vec());
            }
            Err(FramerError::UlpduTooLong { len: l, max }) => {
                assert_eq!((l, max), (len, framer.max_ulpdu_len()));
                assert!(len > max);
            }
            Err(e) => panic!("framer refused a big enough buffer: {e}"),
        }
    }
    assert_eq!(framer.fpdus(), sent.len() as u64);
    if corrupt && !fpdus.is_empty() {
        corrupted_stream(config, fix_crc, &mut rng, &mut wire, &fpdus, &sent);
        return;
    }
    let got = run_deframer(config, &chunks(&wire, seed.rotate_left(3)));
    assert_eq!(
        got.error, None,
        "deframer rejected our framer's output: {:?}",
        got.fault
    );
    assert_eq!(
        got.ulpdus, sent,
        "ULPDUs changed through framer and deframer"
    );
    assert!(!got.in_fpdu);
    assert_eq!(got.stream_offset, framer.stream_offset());
    if config.markers {
        assert_eq!(got.markers_seen, framer.markers_sent());
    }
}

/// Flips one octet of one FPDU of a valid stream (recomputing that FPDU's CRC if `fix_crc`,
/// unless the octet is in the CRC field) and checks what the deframer makes of it:
///
/// - the FPDUs before the damaged one are delivered unchanged;
/// - a flipped CRC field is a CRC error with CRCs on and harmless with CRCs off (MPA-4.1-4);
/// - with CRCs on and the CRC not recomputed, any damage outside the length field is a CRC
///   error, even when a marker is also wrong (a bad CRC wins, MPA-8-3);
/// - a marker whose significant FPDUPTR bits changed is a marker error (code 3) once the CRC
///   is valid or off (MPA-8-3, MPA-8-6); its reserved field and the two low FPDUPTR bits are
///   ignored (MPA-4.2-3, MPA-4.2-5);
/// - damage in the pad is ignored and damage in the ULPDU is delivered as is, once the CRC
///   is valid or off (MPA-4.1-3).
///
/// Damage in the ULPDU_Length field breaks the chain unpredictably; only no-panic and the
/// intact prefix are checked then.
fn corrupted_stream(
    config: DeframerConfig,
    fix_crc: bool,
    rng: &mut Rng,
    wire: &mut [u8],
    fpdus: &[(usize, usize, u64)],
    sent: &[Vec<u8>],
) {
    let k = rng.next() as usize % fpdus.len();
    let (at, len, pos0) = fpdus[k];
    let o = rng.next() as usize % len;
    let flip = (rng.next() % 255) as u8 + 1;
    let is_marker = |j: usize| config.markers && pos0.wrapping_add(j as u64) % 512 < 4;
    let in_crc = o >= len - fpdu::CRC_LEN;
    let in_marker = !in_crc && is_marker(o);
    // ULPDU_Length is the first two octets that are not marker octets.
    let non_marker_before = (0..o).filter(|&j| !is_marker(j)).count();
    let in_len = !in_marker && !in_crc && non_marker_before < 2;
    wire[at + o] ^= flip;
    let crc_valid = !config.crc || (fix_crc && !in_crc);
    if config.crc && fix_crc && !in_crc {
        let end = at + len - fpdu::CRC_LEN;
        let crc = fpdu::crc32c(&wire[at..end]);
        wire[end..end + fpdu::CRC_LEN].copy_from_slice(&fpdu::crc_to_wire(crc));
    }
    let got = run_deframer(config, &chunks(wire, rng.next() as u8));
    let intact = got.ulpdus.len().min(k);
    assert_eq!(
        &got.ulpdus[..intact],
        &sent[..intact],
        "damage before it was reached"
    );
    assert!(
        got.ulpdus.len() >= k,
        "an intact FPDU before the damage was refused"
    );
    if in_len {
        return;
    }
    let mut expect: Vec<Vec<u8>> = sent.to_vec();
    let expected_error = if in_crc {
        config.crc.then_some(MpaError::CrcMismatch)
    } else if !crc_valid {
        Some(MpaError::CrcMismatch)
    } else if in_marker {
        let idx = pos0.wrapping_add(o as u64) % 512;
        let significant = idx == 2 || (idx == 3 && flip & 0xFC != 0);
        significant.then_some(MpaError::MarkerMismatch)
    } else {
        let index = non_marker_before - 2;
        if let Some(b) = expect[k].get_mut(index) {
            *b ^= flip; // a ULPDU octet; otherwise pad
        }
        None
    };
    assert_eq!(
        got.error, expected_error,
        "verdict on damage at {o} of FPDU {k}"
    );
    match expected_error {
        Some(MpaError::MarkerMismatch) => {
            assert!(matches!(got.fault, Some(DeframeFault::Marker { .. })));
            assert_eq!(got.ulpdus.len(), k);
        }
        Some(_) => assert_eq!(got.ulpdus.len(), k),
        None => assert_eq!(got.ulpdus, expect, "harmless damage changed the ULPDUs"),
    }
}

// ---------------------------------------------------------------------------------------------
// headers
// ---------------------------------------------------------------------------------------------

/// The parsers [`headers`] can select, by `selector % HEADER_PARSERS`.
pub const HEADER_PARSERS: u8 = 11;

/// Fuzz body for every header parser.
///
/// Input: `[selector, bytes...]`; `selector % 11` picks the parser: 0 MPA Request/Reply
/// frame, 1 FPDU view and markers, 2 DDP header, 3 Read Request, 4 Terminate header,
/// 5 Atomic Request, 6 Atomic Response, 7 Immediate Data, 8 whole-ULPDU `Segment` decoder,
/// 9 Terminate building and decoding for an offending segment, 10 RTR classification.
/// Whatever parses must emit into exactly `buffer_len()` octets and parse back to the same
/// repr; where a format keeps every bit, the octets must come back too.
pub fn headers(data: &[u8]) {
    let [selector, bytes @ ..] = data else {
        return;
    };
    match selector % HEADER_PARSERS {
        0 => header_mpa_frame(bytes),
        1 => header_fpdu(bytes),
        2 => header_ddp(bytes),
        3 => header_read_request(bytes),
        4 => header_terminate(bytes),
        5 => header_atomic_request(bytes),
        6 => header_atomic_response(bytes),
        7 => header_immediate(bytes),
        8 => header_segment(bytes),
        9 => header_terminate_build(bytes),
        _ => header_rtr(bytes),
    }
}

fn header_mpa_frame(bytes: &[u8]) {
    let parsed = FrameRepr::parse(&Frame::new_unchecked(bytes));
    // The length a stream reader waits for agrees with the parser.
    match (frame_len(bytes), &parsed) {
        (Ok(n), Ok(_)) => assert!(n <= bytes.len()),
        (Ok(n), Err(FrameError::Truncated)) => assert!(n > bytes.len()),
        (Ok(_), Err(FrameError::EnhancedDataMissing)) => {}
        (Err(e), Err(p)) => assert_eq!(e, *p),
        (l, p) => panic!("frame_len {l:?} but parse {p:?}"),
    }
    if let Ok(frame) = Frame::new_checked(bytes) {
        // No accessor may panic on a checked view.
        let _ = (
            frame.key(),
            frame.kind(),
            frame.flags(),
            frame.markers(),
            frame.crc(),
        );
        let _ = (
            frame.reject(),
            frame.s_bit(),
            frame.is_enhanced(),
            frame.res(),
        );
        let _ = (frame.rev(), frame.pd_length(), frame.private_data());
        let _ = frame.enhanced_data();
        assert!(frame.total_len() <= bytes.len());
    }
    let Ok(repr) = parsed else {
        return;
    };
    let total = frame_len(bytes).expect("parsed frame has a length");
    assert_eq!(repr.buffer_len(), total);
    let emitted = repr.to_vec();
    assert_eq!(emitted.len(), repr.buffer_len());
    // Reserved bits are kept as received, so the frame comes back octet for octet.
    assert_eq!(
        &emitted[..],
        &bytes[..total],
        "MPA frame does not re-emit identically"
    );
    let again = FrameRepr::parse(&Frame::new_unchecked(&emitted[..])).expect("re-parse");
    assert_eq!(again, repr);
    if let Some(e) = repr.enhanced {
        assert_eq!(
            warpcore_proto::wire::mpa::EnhancedData::from_bytes(e.to_bytes()),
            e
        );
    }
}

fn header_fpdu(bytes: &[u8]) {
    if let Ok(m) = Marker::new_checked(bytes) {
        let repr = MarkerRepr::parse(&m).expect("checked marker parses");
        let _ = (m.reserved(), m.fpduptr_raw());
        assert_eq!(
            repr.fpduptr & 3,
            0,
            "FPDUPTR low bits are ignored (MPA-4.2-5)"
        );
        let mut out = [0xFFu8; 4];
        repr.emit(&mut Marker::new_unchecked(&mut out[..]));
        assert_eq!(out, repr.to_bytes());
        assert_eq!(
            MarkerRepr::parse(&Marker::new_unchecked(&out[..])),
            Ok(repr)
        );
    }
    let Ok(view) = Fpdu::new_checked(bytes) else {
        return;
    };
    let total = view.total_len();
    assert!(total <= bytes.len());
    assert_eq!(view.ulpdu().len(), usize::from(view.ulpdu_len()));
    assert_eq!(view.pad().len(), view.pad_len());
    assert_eq!(total, fpdu::fpdu_len(usize::from(view.ulpdu_len())));
    assert_eq!(total % 4, 0, "FPDUs are 4-octet aligned (MPA-4.1-2)");
    assert_eq!(view.covered().len() + fpdu::CRC_LEN, total);
    let crc_ok = view.verify_crc();
    // Rebuild the FPDU with the setters: same ULPDU, zero pad, a CRC that verifies.
    let mut copy = bytes[..total].to_vec();
    let mut w = Fpdu::new_unchecked(&mut copy[..]);
    w.set_ulpdu_len(view.ulpdu_len());
    w.clear_pad();
    w.fill_crc();
    let w = Fpdu::new_checked(&copy[..]).expect("rebuilt FPDU");
    assert!(w.verify_crc());
    assert_eq!(w.ulpdu(), view.ulpdu());
    if crc_ok && view.pad().iter().all(|&p| p == 0) {
        assert_eq!(&copy[..], &bytes[..total]);
    }
    // Our framer produces the same octets for the same ULPDU at a marker-free position.
    if usize::from(view.ulpdu_len()) > MAX_ULPDU_LEN {
        return;
    }
    let mut framer = Framer::new(FramerConfig::default());
    let mut out = vec![0u8; total];
    assert_eq!(framer.emit(&[view.ulpdu()], &mut out), Ok(total));
    assert_eq!(out, copy, "framer and Fpdu setters disagree");
}

/// The reserved bits of the DDP control octet (DDP-4.1-8).
const DDP_RSVD_MASK: u8 = 0x3C;

fn header_ddp(bytes: &[u8]) {
    let Ok(view) = DdpSegment::new_checked(bytes) else {
        assert!(DdpRepr::parse(&DdpSegment::new_unchecked(bytes)).is_err());
        return;
    };
    let _ = (
        view.control(),
        view.tagged(),
        view.last(),
        view.rsvd(),
        view.version(),
    );
    let _ = (view.rsvd_ulp(), view.stag(), view.to(), view.rsvd_ulp2());
    let _ = (view.qn(), view.msn(), view.mo(), view.header());
    assert_eq!(view.header_len() + view.payload_len(), bytes.len());
    assert_eq!(view.payload().len(), view.payload_len());
    let repr = DdpRepr::parse(&view).expect("checked DDP header parses");
    assert_eq!(repr.buffer_len(), view.header_len());
    let mut out = vec![0u8; repr.buffer_len()];
    assert_eq!(repr.emit_into(&mut out), Ok(repr.buffer_len()));
    assert_eq!(
        repr.emit_into(&mut vec![0u8; repr.buffer_len() - 1]),
        Err(warpcore_proto::wire::Error::Truncated)
    );
    let again = DdpRepr::parse(&DdpSegment::new_checked(&out[..]).expect("re-check"));
    assert_eq!(again, Ok(repr));
    let mut expect = view.header().to_vec();
    expect[0] &= !DDP_RSVD_MASK;
    assert_eq!(out, expect, "DDP header does not re-emit identically");
}

fn header_read_request(bytes: &[u8]) {
    let Ok(view) = ReadRequest::new_checked(bytes) else {
        assert!(ReadRequestRepr::parse_bytes(bytes).is_err());
        return;
    };
    let repr = ReadRequestRepr::parse(&view).expect("checked view parses");
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut ReadRequest::new_unchecked(&mut out[..]));
    assert_eq!(&out[..], &bytes[..repr.buffer_len()]);
    assert_eq!(ReadRequestRepr::parse_bytes(&out), Ok(repr));
    // The Terminate progress update (RDMAP-06 §4.8) keeps the STags and never grows.
    let p = repr.progressed(repr.read_size / 2);
    assert_eq!((p.sink_stag, p.src_stag), (repr.sink_stag, repr.src_stag));
    assert!(p.read_size <= repr.read_size);
    assert_eq!(repr.progressed(0), repr);
}

fn header_terminate(bytes: &[u8]) {
    let Ok(view) = Terminate::new_checked(bytes) else {
        assert!(TerminateRepr::parse_bytes(bytes).is_err());
        return;
    };
    let _ = (
        view.layer(),
        view.etype(),
        view.error_code(),
        view.code(),
        view.m(),
    );
    let _ = (view.d(), view.r(), view.reserved(), view.ddp_segment_len());
    let _ = (view.ddp_header(), view.rdma_header());
    let header_len = view.header_len();
    assert!(header_len <= bytes.len());
    let repr = TerminateRepr::parse(&view).expect("checked Terminate parses");
    assert_eq!(repr.buffer_len(), header_len);
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut Terminate::new_unchecked(&mut out[..]));
    assert_eq!(TerminateRepr::parse_bytes(&out), Ok(repr));
    // Everything but the 13 reserved bits comes back (RDMAP-4.8-7).
    let mut expect = bytes[..header_len].to_vec();
    expect[2] &= 0xE0;
    expect[3] = 0;
    assert_eq!(out, expect, "Terminate header does not re-emit identically");
    let report = TerminateReport::decode(&repr);
    assert_eq!(report.code, repr.code);
    let _ = report.to_string();
}

fn header_atomic_request(bytes: &[u8]) {
    let Ok(view) = AtomicRequest::new_checked(bytes) else {
        assert!(AtomicRequestRepr::parse_bytes(bytes).is_err());
        return;
    };
    let _ = view.reserved();
    let repr = AtomicRequestRepr::parse(&view).expect("checked view parses");
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut AtomicRequest::new_unchecked(&mut out[..]));
    assert_eq!(AtomicRequestRepr::parse_bytes(&out), Ok(repr));
    // All but the 28 reserved bits in front of AOpCode come back.
    assert_eq!(&out[4..], &bytes[4..repr.buffer_len()]);
    assert_eq!(out[3], bytes[3] & 0x0F);
    // Operations the checks accept run; the rest are refused with no side effect.
    let mut word = repr.compare_data ^ repr.add_swap_data;
    let before = word;
    match atomic::execute(&repr, &mut word) {
        Ok(orig) => {
            assert_eq!(orig, before);
            assert_eq!(
                atomic::response(&repr, orig).orig_request_id,
                repr.request_id
            );
        }
        Err(_) => assert_eq!(word, before),
    }
}

fn header_atomic_response(bytes: &[u8]) {
    let Ok(view) = AtomicResponse::new_checked(bytes) else {
        assert!(AtomicResponseRepr::parse_bytes(bytes).is_err());
        return;
    };
    let repr = AtomicResponseRepr::parse(&view).expect("checked view parses");
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut AtomicResponse::new_unchecked(&mut out[..]));
    assert_eq!(&out[..], &bytes[..repr.buffer_len()]);
    assert_eq!(AtomicResponseRepr::parse_bytes(&out), Ok(repr));
}

fn header_immediate(bytes: &[u8]) {
    let Ok(view) = ImmediateData::new_checked(bytes) else {
        assert!(ImmediateDataRepr::parse_bytes(bytes).is_err());
        return;
    };
    let repr = ImmediateDataRepr::parse(&view).expect("checked view parses");
    let mut out = vec![0u8; repr.buffer_len()];
    repr.emit(&mut ImmediateData::new_unchecked(&mut out[..]));
    assert_eq!(&out[..], &bytes[..repr.buffer_len()]);
    assert_eq!(ImmediateDataRepr::parse_bytes(&out), Ok(repr));
}

/// The octets of a segment with every reserved bit cleared, as `Segment::emit` writes them:
/// DDP control reserved bits (DDP-4.1-8), RDMAP control reserved bits (RDMAP-4.1-8), the
/// reserved bits before AOpCode (RFC 7306 §5.2.1) and the Terminate's 13 reserved bits
/// (RDMAP-4.8-7).
fn without_reserved_bits(seg: &Segment<'_>, bytes: &[u8]) -> Vec<u8> {
    let mut v = bytes.to_vec();
    v[0] &= !DDP_RSVD_MASK;
    v[1] &= !0x30;
    let h = seg.repr.buffer.header_len();
    match seg.repr.header {
        RdmapHeader::AtomicRequest(_) => {
            v[h..h + 3].fill(0);
            v[h + 3] &= 0x0F;
        }
        RdmapHeader::Terminate(_) => {
            v[h + 2] &= 0xE0;
            v[h + 3] = 0;
        }
        _ => {}
    }
    v
}

fn header_segment(bytes: &[u8]) {
    let seg = match Segment::parse(bytes) {
        Ok(seg) => seg,
        Err(e) => {
            // Every failure maps to a Terminate code that decodes back to the same error.
            let pe = e.protocol_error();
            assert_eq!(ProtocolError::from_code(pe.terminate_code()), Some(pe));
            let _ = e.to_string();
            return;
        }
    };
    assert_eq!(
        seg.buffer_len(),
        bytes.len(),
        "segment octets unaccounted for"
    );
    assert!(seg.repr.header.matches(seg.repr.opcode));
    assert_eq!(seg.repr.check(), Ok(()));
    let mut out = vec![0u8; seg.buffer_len()];
    assert_eq!(seg.emit(&mut out), Ok(bytes.len()));
    assert_eq!(
        seg.emit(&mut vec![0u8; bytes.len() - 1]),
        Err(warpcore_proto::wire::Error::Truncated)
    );
    let again = Segment::parse(&out).expect("re-parse of an emitted segment");
    assert_eq!(again, seg);
    assert_eq!(
        out,
        without_reserved_bits(&seg, bytes),
        "segment re-emits differently"
    );
    // The RDMAP receive checks never panic, and accept what a full-featured stream agreed.
    for atomics in [false, true] {
        let config = RdmapConfig {
            atomics,
            immediate_data: atomics,
        };
        let _ = rdmap::check_inbound(&seg.repr, &config);
    }
    if let RdmapHeader::Terminate(t) = seg.repr.header {
        let _ = TerminateReport::decode(&t).to_string();
    }
}

/// Every protocol error a Terminate can report.
fn all_protocol_errors() -> Vec<ProtocolError> {
    let mut v = Vec::new();
    for layer in 0..=2u8 {
        for etype in 0..=15u8 {
            for code in 0..=255u8 {
                let c = warpcore_proto::TerminateCode::new(layer, etype, code);
                match ProtocolError::from_code(c) {
                    Some(e) if !v.contains(&e) => v.push(e),
                    _ => {}
                }
            }
        }
    }
    v
}

fn header_terminate_build(bytes: &[u8]) {
    let [which, progress, ulpdu @ ..] = bytes else {
        return;
    };
    let errors = all_protocol_errors();
    let error = errors[usize::from(*which) % errors.len()];
    let offending = Offending {
        ulpdu,
        read_progress: u32::from(*progress) * 1000,
    };
    let with = if which & 0x80 != 0 {
        None
    } else {
        Some(&offending)
    };
    let mut buf = [0u8; TERMINATE_SEGMENT_MAX_LEN];
    let n = rdmap::emit_terminate(error, with, &mut buf).expect("Terminate fits its maximum");
    let seg = Segment::parse(&buf[..n]).expect("our Terminate decodes");
    assert_eq!(seg.repr.opcode, Opcode::Terminate);
    assert!(
        seg.payload.is_empty(),
        "our Terminate has no trailing octets"
    );
    let RdmapHeader::Terminate(term) = seg.repr.header else {
        panic!("Terminate opcode without a Terminate header");
    };
    assert_eq!(term, rdmap::terminate_header(error, with));
    let report = TerminateReport::decode(&term);
    assert_eq!(report.code, error.terminate_code());
    assert_eq!(report.error, Some(error));
    // M is set exactly when the DDP header is copied (RDMAP-4.8-8).
    assert_eq!(term.m, term.ddp.is_some());
    if let Some((_, copied)) = term.ddp {
        assert_eq!(copied.as_bytes(), &ulpdu[..copied.as_bytes().len()]);
    }
    // RDMAP-4.8-11: R set only with the Read Request header present.
    assert_eq!(term.r_bit, term.rdma.is_some());
    let _ = report.to_string();
}

fn header_rtr(bytes: &[u8]) {
    let Some(t) = RtrType::classify_ulpdu(bytes) else {
        return;
    };
    // An RTR is a well-formed RDMAP segment of the matching kind.
    let seg = Segment::parse(bytes).expect("an RTR is a valid segment");
    assert!(seg.repr.last);
    assert!(seg.payload.is_empty());
    let expect = match t {
        RtrType::Send => [Opcode::Send, Opcode::SendSe].contains(&seg.repr.opcode),
        RtrType::Write => seg.repr.opcode == Opcode::Write,
        RtrType::Read => seg.repr.opcode == Opcode::ReadRequest,
    };
    assert!(expect, "{t} classified from {:?}", seg.repr.opcode);
    assert_eq!(RtrType::classify_ulpdu(t.ulpdu()), Some(t));
}

// ---------------------------------------------------------------------------------------------
// negotiation
// ---------------------------------------------------------------------------------------------

/// IRD/ORD values the configuration octets pick from.
const IRD_ORD: [u16; 4] = [0, 1, 16, 0x3FFF];

/// A negotiation configuration from one octet: bit 0 Rev (1 or 2), bit 1 CRC, bit 2 M,
/// bit 3 markers supported, bit 4 peer-to-peer, bits 5-7 RTR types (Send, Write, Read);
/// `io` picks IRD (bits 0-1) and ORD (bits 2-3); bit 4 of `io` adds private data.
fn nego_config(c: u8, io: u8) -> negotiation::Config {
    let mut rtr = RtrTypes::EMPTY;
    for (bit, t) in [
        (0x20, RtrType::Send),
        (0x40, RtrType::Write),
        (0x80, RtrType::Read),
    ] {
        if c & bit != 0 {
            rtr = rtr.with(t);
        }
    }
    negotiation::Config {
        rev: 1 + (c & 1),
        crc: c & 0x02 != 0,
        markers: c & 0x04 != 0,
        markers_supported: c & 0x08 != 0,
        ird: IRD_ORD[usize::from(io & 3)],
        ord: IRD_ORD[usize::from((io >> 2) & 3)],
        peer_to_peer: c & 0x10 != 0,
        rtr,
        private_data: if io & 0x10 != 0 {
            b"warpcore fuzz".to_vec()
        } else {
            Vec::new()
        },
        timeout: Duration::from_secs(10),
    }
}

/// What a machine did with a peer byte stream.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NegoOutcome {
    taken: usize,
    events: Vec<Event>,
    phase: Phase,
    transmitted: Vec<u8>,
}

/// Either machine, driven the same way.
#[derive(Debug)]
enum Machine {
    Initiator(Initiator),
    Responder(Responder),
}

impl Machine {
    fn handle_input(&mut self, data: &[u8]) -> usize {
        match self {
            Machine::Initiator(m) => m.handle_input(data),
            Machine::Responder(m) => m.handle_input(data),
        }
    }
    fn poll_event(&mut self) -> Option<Event> {
        match self {
            Machine::Initiator(m) => m.poll_event(),
            Machine::Responder(m) => m.poll_event(),
        }
    }
    fn phase(&self) -> Phase {
        match self {
            Machine::Initiator(m) => m.phase(),
            Machine::Responder(m) => m.phase(),
        }
    }
    fn poll_transmit(&mut self, buf: &mut [u8]) -> usize {
        match self {
            Machine::Initiator(m) => m.poll_transmit(buf),
            Machine::Responder(m) => m.poll_transmit(buf),
        }
    }
    /// Copies out everything queued, in pieces of up to 7 octets.
    fn drain(&mut self, out: &mut Vec<u8>) {
        let mut buf = [0u8; 7];
        loop {
            let n = self.poll_transmit(&mut buf);
            assert!(n <= buf.len());
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
    }
}

/// Drains events; a responder that sees a Request accepts or rejects it per `decision`
/// (bit 0 reject, bit 1 first override IRD/ORD with bits 2-5). An accept refused because
/// the Reply could mark no RTR type becomes a reject.
fn pump_events(m: &mut Machine, decision: u8, events: &mut Vec<Event>) {
    while let Some(ev) = m.poll_event() {
        let request = matches!(ev, Event::Request(_));
        events.push(ev);
        if let (true, Machine::Responder(r)) = (request, &mut *m) {
            assert_eq!(r.phase(), Phase::AwaitingDecision);
            if decision & 2 != 0 {
                let ird = IRD_ORD[usize::from((decision >> 2) & 3)];
                let ord = IRD_ORD[usize::from((decision >> 4) & 3)];
                r.set_ird_ord(ird, ord)
                    .expect("valid IRD/ORD while deciding");
            }
            let result = if decision & 1 != 0 {
                r.reject(b"no")
            } else {
                match r.accept(b"yes") {
                    // Only the Read RTR accepted, IRD lowered to 0, a peer-to-peer Request:
                    // the Reply could mark no RTR type (MPA2-9.2-8), so the accept is
                    // refused and the decision stays open.
                    Err(negotiation::UsageError::NoRtrType) => r.reject(b"no"),
                    other => other,
                }
            };
            result.expect("decision while awaiting it");
        }
    }
}

/// Feeds `chunks` to a fresh machine and records what it did. Input after the outcome must
/// be left untaken (it belongs to the deframer).
fn run_machine(
    responder: bool,
    config: &negotiation::Config,
    decision: u8,
    now: Instant,
    chunks: &[&[u8]],
) -> Option<NegoOutcome> {
    let mut m = if responder {
        Machine::Responder(Responder::new(config.clone(), now).ok()?)
    } else {
        Machine::Initiator(Initiator::new(config.clone(), now).ok()?)
    };
    let mut transmitted = Vec::new();
    m.drain(&mut transmitted);
    let mut taken = 0usize;
    let mut events = Vec::new();
    for &chunk in chunks {
        let was_awaiting = m.phase() == Phase::AwaitingFrame;
        let n = m.handle_input(chunk);
        assert!(n <= chunk.len());
        if !was_awaiting {
            assert_eq!(n, 0, "input taken after the outcome");
        } else if n < chunk.len() {
            assert_ne!(
                m.phase(),
                Phase::AwaitingFrame,
                "input left while still awaiting"
            );
        }
        taken += n;
        pump_events(&mut m, decision, &mut events);
        m.drain(&mut transmitted);
    }
    // A timer firing or the peer closing now never panics and ends any wait.
    match &mut m {
        Machine::Initiator(i) => {
            if let Some(t) = i.poll_timeout() {
                i.handle_timeout(t);
            }
            i.handle_close();
        }
        Machine::Responder(r) => {
            if let Some(t) = r.poll_timeout() {
                r.handle_timeout(t);
            }
            r.handle_close();
        }
    }
    pump_events(&mut m, decision, &mut events);
    m.drain(&mut transmitted);
    assert_ne!(
        m.phase(),
        Phase::AwaitingFrame,
        "still awaiting after timeout and close"
    );
    Some(NegoOutcome {
        taken,
        events,
        phase: m.phase(),
        transmitted,
    })
}

/// Our own transmitted frame must parse as the expected kind.
fn check_own_frame(bytes: &[u8], kind: FrameKind) {
    if bytes.is_empty() {
        return;
    }
    let repr = FrameRepr::parse(&Frame::new_unchecked(bytes)).expect("our frame parses");
    assert_eq!(repr.kind, kind);
    assert_eq!(
        repr.buffer_len(),
        bytes.len(),
        "more than one frame transmitted"
    );
}

/// Fuzz body for the MPA startup machines.
///
/// Input: `[init_cfg, resp_cfg, io, decision, seed, peer_bytes...]` (see [`nego_config`];
/// `io` feeds both configurations' IRD/ORD, with the responder's taken from its high
/// nibble). Bit 7 of `decision` selects the machine under attack: 0 the initiator (the
/// bytes are the Reply stream), 1 the responder (the bytes are the Request stream). The
/// bytes are fed once whole and once in chunks: events, octets taken, final phase and
/// transmitted octets must be identical; no octet after the peer's frame may be taken, and
/// whatever follows it is deframed with the negotiated settings. Finally an initiator and a
/// responder built from the two configurations negotiate with each other and must agree.
pub fn negotiation(data: &[u8]) {
    let [init_cfg, resp_cfg, io, decision, seed, peer @ ..] = data else {
        return;
    };
    let now = Instant::now();
    let responder = decision & 0x80 != 0;
    let config = if responder {
        nego_config(*resp_cfg, io >> 4)
    } else {
        nego_config(*init_cfg, *io)
    };
    let whole = run_machine(responder, &config, *decision, now, &[peer]);
    let chunked = run_machine(responder, &config, *decision, now, &chunks(peer, *seed));
    assert_eq!(whole, chunked, "whole and chunked negotiation disagree");
    if let Some(out) = whole {
        let own = if responder {
            FrameKind::Reply
        } else {
            FrameKind::Request
        };
        check_own_frame(&out.transmitted, own);
        let peer_kind = if responder {
            FrameKind::Request
        } else {
            FrameKind::Reply
        };
        for ev in &out.events {
            match ev {
                Event::Established(n) => {
                    // The peer's frame was whole and valid, and FPDUs start right after it.
                    assert_eq!(n.rx_fpdu_offset, out.taken as u64);
                    let repr = FrameRepr::parse(&Frame::new_unchecked(peer)).expect("peer frame");
                    assert_eq!(repr.kind, peer_kind);
                    assert_eq!(repr.buffer_len(), out.taken);
                    assert_eq!(n.tx_fpdu_offset, out.transmitted.len() as u64);
                    after_startup(n, &peer[out.taken..], *seed);
                }
                Event::Failed(f) => {
                    let _ = (
                        f.error.mpa_error(),
                        f.error.sends_terminate(),
                        f.error.to_string(),
                    );
                }
                _ => {}
            }
        }
    }
    pair(*init_cfg, *resp_cfg, *io, *decision, now);
}

/// The octets after the peer's frame go to a deframer set up as negotiated; a responder
/// also checks the first ULPDU for the peer-to-peer RTR.
fn after_startup(n: &negotiation::Negotiated, rest: &[u8], seed: u8) {
    let config = DeframerConfig {
        markers: n.markers_rx,
        crc: n.crc,
        max_ulpdu_len: MAX_ULPDU_LEN,
        stream_offset: 0,
    };
    let out = run_deframer(config, &chunks(rest, seed));
    if let Some(first) = out.ulpdus.first() {
        if let Some(t) = RtrType::classify_ulpdu(first) {
            assert!(Segment::parse(first).is_ok(), "{t} does not decode");
        }
    }
}

/// An initiator and a responder from the two configurations talk to each other over a
/// perfect pipe; when both establish, their settings must mirror each other.
fn pair(init_cfg: u8, resp_cfg: u8, io: u8, decision: u8, now: Instant) {
    let (Ok(mut ini), Ok(mut res)) = (
        Initiator::new(nego_config(init_cfg, io), now),
        Responder::new(nego_config(resp_cfg, io >> 4), now),
    ) else {
        return;
    };
    let mut request = vec![0u8; 600];
    let n = ini.poll_transmit(&mut request);
    request.truncate(n);
    check_own_frame(&request, FrameKind::Request);
    assert!(res.handle_input(&request) <= request.len());
    let mut res = Machine::Responder(res);
    let mut res_events = Vec::new();
    pump_events(&mut res, decision & 0x7F, &mut res_events);
    let mut reply = Vec::new();
    res.drain(&mut reply);
    let taken = ini.handle_input(&reply);
    assert!(taken <= reply.len());
    let mut ini = Machine::Initiator(ini);
    let mut ini_events = Vec::new();
    pump_events(&mut ini, 0, &mut ini_events);
    let established = |evs: &[Event]| {
        evs.iter().find_map(|e| match e {
            Event::Established(n) => Some(n.clone()),
            _ => None,
        })
    };
    if let (Some(i), Some(r)) = (established(&ini_events), established(&res_events)) {
        assert_eq!(taken, reply.len());
        assert_eq!(i.crc, r.crc, "CRC settings differ");
        assert_eq!(
            i.markers_tx, r.markers_rx,
            "markers initiator->responder differ"
        );
        assert_eq!(
            i.markers_rx, r.markers_tx,
            "markers responder->initiator differ"
        );
        assert_eq!(i.peer_to_peer, r.peer_to_peer);
        assert_eq!(i.tx_fpdu_offset, r.rx_fpdu_offset);
        assert_eq!(i.rx_fpdu_offset, r.tx_fpdu_offset);
        if let Some(t) = i.rtr {
            assert!(
                r.rtr_accepted.contains(t),
                "initiator sends an RTR the responder refuses"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// ddp_receive
// ---------------------------------------------------------------------------------------------

/// One registered buffer as DDP and RDMAP are told about it: a TO range and rights, no
/// memory (the engine's placement into real memory is `engine_rx`'s business).
#[derive(Debug, Clone)]
struct ToyRegion {
    stag: u32,
    base: u64,
    len: u64,
    remote_read: bool,
    remote_write: bool,
}

impl ToyRegion {
    /// Whether `len` octets at `to` lie inside the region (no wrap).
    fn contains(&self, to: u64, len: u64) -> bool {
        to.checked_sub(self.base)
            .and_then(|off| off.checked_add(len))
            .is_some_and(|end| end <= self.len)
    }
}

/// The buffer table proto is checked against: two regions and the lengths of a few posted
/// receive buffers per untagged queue.
#[derive(Debug)]
struct ToyEngine {
    regions: Vec<ToyRegion>,
    /// STags that exist but belong to another stream.
    foreign_stag: u32,
    queue_mask: u8,
    posted: [VecDeque<u64>; QUEUE_COUNT],
}

impl ToyEngine {
    fn region(&self, stag: u32) -> Result<&ToyRegion, StagFault> {
        if stag == self.foreign_stag {
            return Err(StagFault::NotAssociated);
        }
        self.regions
            .iter()
            .find(|r| r.stag == stag)
            .ok_or(StagFault::Invalid)
    }

    fn access_region(&self, stag: u32) -> Result<AccessRegion, StagFault> {
        self.region(stag).map(|r| AccessRegion {
            base: r.base,
            len: r.len,
            remote_read: r.remote_read,
            remote_write: r.remote_write,
        })
    }
}

impl TaggedBuffers for ToyEngine {
    fn tagged_region(&self, stag: u32, _rsvd_ulp: u8) -> Result<TaggedRegion, TaggedFault> {
        match self.region(stag) {
            Ok(r) => Ok(TaggedRegion {
                base: r.base,
                len: r.len,
            }),
            Err(StagFault::NotAssociated) => Err(TaggedFault::NotAssociated),
            Err(StagFault::Invalid) => Err(TaggedFault::InvalidStag),
        }
    }
}

impl UntaggedBuffers for ToyEngine {
    fn queue_valid(&self, qn: u32) -> bool {
        qn < 8 && self.queue_mask & (1 << qn) != 0
    }

    fn buffer_len(&self, qn: u32, _msn: u32) -> Option<u64> {
        self.posted.get(qn as usize)?.front().copied()
    }
}

/// Length of the configuration prefix of a [`ddp_receive`] input.
pub const DDP_CONFIG_LEN: usize = 18;

fn be_u64(b: &[u8]) -> u64 {
    b.iter().fold(0u64, |acc, &x| acc << 8 | u64::from(x))
}

/// Builds the toy engine from the configuration prefix:
/// octet 0: bits 0-3 valid QNs, bit 4 atomics agreed, bit 5 Immediate Data agreed, bit 6
/// region A allows remote read, bit 7 remote write; octets 1-4 region A's STag; 5-12 its
/// base TO; 13-14 its length; 15-16 the length of each posted receive buffer (four per
/// queue); octet 17 the IRD. Region B is STag A ^ 0x80, zero-based, 64 octets, all access;
/// STag A ^ 0x40 is valid but not associated with the stream.
fn toy_engine(c: &[u8; DDP_CONFIG_LEN]) -> (ToyEngine, RdmapConfig, u32) {
    let stag = be_u64(&c[1..5]) as u32;
    let a = ToyRegion {
        stag,
        base: be_u64(&c[5..13]),
        len: be_u64(&c[13..15]),
        remote_read: c[0] & 0x40 != 0,
        remote_write: c[0] & 0x80 != 0,
    };
    let b = ToyRegion {
        stag: stag ^ 0x80,
        base: 0,
        len: 64,
        remote_read: true,
        remote_write: true,
    };
    let buf_len = be_u64(&c[15..17]);
    let posted = core::array::from_fn(|_| (0..4).map(|_| buf_len).collect());
    let engine = ToyEngine {
        regions: vec![a, b],
        foreign_stag: stag ^ 0x40,
        queue_mask: c[0] & 0x0F,
        posted,
    };
    let config = RdmapConfig {
        atomics: c[0] & 0x10 != 0,
        immediate_data: c[0] & 0x20 != 0,
    };
    (engine, config, u32::from(c[17]))
}

/// Fuzz body for proto's DDP receive validation and RDMAP receive checks.
///
/// Input: an 18-octet configuration ([`toy_engine`]) followed by segments, each
/// `[len_hi, len_lo, octets...]` (a ULPDU as the deframer yields it; the last one may be
/// short). Each segment goes through `DdpReceiver::handle_segment`; a placement it returns
/// must lie inside the region or posted buffer it was told about, then the segment is
/// decoded with `Segment::parse` and proto's RDMAP checks run on it (inbound checks, Write
/// access, Read Request handling with IRD accounting and the Read Response plan, atomic
/// requests and their execution on a word, remote invalidation). The first error is turned
/// into a Terminate, which must decode back to the same error; after a DDP error every
/// later segment must be dropped silently (DDP-7.1-17).
pub fn ddp_receive(data: &[u8]) {
    let Some((cfg, mut rest)) = data.split_first_chunk::<DDP_CONFIG_LEN>() else {
        return;
    };
    let (mut engine, rdmap_config, ird) = toy_engine(cfg);
    let mut receiver = DdpReceiver::new(warpcore_proto::wire::ddp::DDP_VERSION);
    let mut irq = InboundReadQueue::new(ird);
    let mut terminated = false;
    while let [hi, lo, tail @ ..] = rest {
        let len = (usize::from(*hi) << 8 | usize::from(*lo)).min(tail.len());
        let (seg, tail) = tail.split_at(len);
        rest = tail;
        let already_failed = receiver.failed();
        let result = receiver.handle_segment(seg, &engine, &engine);
        if let Some(e) = already_failed {
            assert_eq!(result, Ok(None), "segment accepted after DDP failed");
            assert_eq!(receiver.failed(), Some(e));
            continue;
        }
        if terminated {
            // The stream was terminated by RDMAP; DDP still validates, nothing is placed.
            continue;
        }
        let decoded = Segment::parse(seg);
        check_ddp_vs_decoder(&result, &decoded);
        let error = match result {
            Err(e) => {
                assert_eq!(receiver.failed(), Some(e));
                Some(ProtocolError::Ddp(e))
            }
            Ok(None) => panic!("Ok(None) from a receiver that has not failed"),
            Ok(Some(p)) => {
                check_placement(&mut engine, seg, &p);
                match decoded {
                    Err(e) => Some(e.protocol_error()),
                    Ok(s) => rdmap_receive(&mut engine, &rdmap_config, &mut irq, &s).err(),
                }
            }
        };
        if let Some(error) = error {
            check_terminate(error, seg);
            terminated = true;
        }
    }
}

/// DDP validation and the segment decoder judge the first checks (DDP version, header
/// length) identically.
fn check_ddp_vs_decoder(
    ddp: &Result<Option<Placement>, DdpError>,
    decoded: &Result<Segment<'_>, SegmentError>,
) {
    match decoded {
        Err(e @ (SegmentError::DdpVersion { .. } | SegmentError::DdpTruncated)) => {
            let expect = match e.protocol_error() {
                ProtocolError::Ddp(d) => d,
                other => panic!("DDP-level decoder error {other:?}"),
            };
            assert_eq!(*ddp, Err(expect), "DDP and the segment decoder disagree");
        }
        _ => {
            if let Err(e) = ddp {
                assert!(
                    !matches!(
                        e,
                        DdpError::TaggedInvalidVersion
                            | DdpError::UntaggedInvalidVersion
                            | DdpError::LocalCatastrophic
                    ),
                    "DDP says {e:?} but the segment decodes"
                );
            }
        }
    }
}

/// A placement DDP returned must lie inside the region or the posted buffer it names; the
/// receive buffer of a finished message is popped.
fn check_placement(engine: &mut ToyEngine, seg: &[u8], p: &Placement) {
    let range = p.payload_range();
    assert_eq!(
        range.end,
        seg.len(),
        "payload does not end with the segment"
    );
    let n = range.len() as u64;
    match p {
        Placement::Tagged(t) => {
            assert_eq!(t.payload_offset, 14);
            if t.payload_len > 0 {
                let r = engine
                    .region(t.stag)
                    .expect("placement into a validated STag");
                assert!(r.contains(t.to, n), "tagged placement outside its region");
            }
        }
        Placement::Untagged(u) => {
            assert_eq!(u.payload_offset, 18);
            let q = &mut engine.posted[u.qn as usize];
            let len = *q.front().expect("placement without a posted buffer");
            assert!(
                u64::from(u.mo) + n <= len,
                "untagged placement outside its buffer"
            );
            if let Some(m) = u.message_len {
                assert_eq!(u64::from(m), u64::from(u.mo) + n);
                assert!(u64::from(m) <= len);
                q.pop_front();
            }
        }
    }
}

/// The RDMAP receive checks for a segment DDP accepted.
fn rdmap_receive(
    engine: &mut ToyEngine,
    config: &RdmapConfig,
    irq: &mut InboundReadQueue,
    seg: &Segment<'_>,
) -> Result<(), ProtocolError> {
    rdmap::check_inbound(&seg.repr, config)?;
    match seg.repr.header {
        RdmapHeader::None => match seg.repr.opcode {
            Opcode::Write if !seg.payload.is_empty() => {
                let warpcore_proto::wire::ddp::DdpBuffer::Tagged { stag, .. } = seg.repr.buffer
                else {
                    panic!("a Write that is not tagged");
                };
                let region = engine.access_region(stag).expect("DDP validated the STag");
                rdmap::check_write_access(&region)?;
            }
            Opcode::SendInvalidate | Opcode::SendSeInvalidate => {
                let stag = seg.repr.invalidate_stag().expect("invalidating Send");
                let fault = match engine.region(stag) {
                    Ok(_) => None,
                    Err(StagFault::Invalid) => Some(InvalidateFault::Invalid),
                    Err(StagFault::NotAssociated) => Some(InvalidateFault::NotAssociated),
                };
                if let Some(f) = fault {
                    return Err(rdmap::invalidate_error(f).into());
                }
            }
            _ => {}
        },
        RdmapHeader::ReadRequest(rr) => {
            irq.admit()?;
            let plan = rdmap::handle_read_request(&rr, |stag| engine.access_region(stag))?;
            assert_eq!(plan.len, rr.read_size);
            if plan.len > 0 {
                // The validated source range is inside the region.
                let r = engine.region(plan.src_stag).expect("validated source STag");
                assert!(
                    r.contains(plan.src_to, u64::from(plan.len)),
                    "Read source outside its region"
                );
                // The Read Response goes out in segments of at most 1000 octets.
                let sender = DdpSender::new();
                let segmenter = sender.tagged(
                    Opcode::ReadResponse.control().0,
                    plan.sink_stag,
                    plan.sink_to,
                    &[],
                    plan.len,
                    1000,
                );
                let mut segmenter = match segmenter {
                    Ok(s) => s,
                    Err(e) => panic!(
                        "a Read Request that rdmap accepted cannot be answered: {e:?} \
                         (sink TO {:#x}, RDMARDSZ {})",
                        plan.sink_to, plan.len
                    ),
                };
                let mut hdr = [0u8; MAX_SEGMENT_HEADER_LEN];
                let mut sent = 0u32;
                while let Some(s) = segmenter.next_segment(&mut hdr).expect("header buffer") {
                    let expect = plan.segment(s.payload_offset, s.payload_len);
                    assert_eq!(
                        expect.ddp(),
                        s.repr,
                        "Read Response plan and segmenter differ"
                    );
                    assert!(s.payload_offset + s.payload_len <= plan.len);
                    sent += s.payload_len;
                }
                assert_eq!(sent, plan.len);
            }
            let _ = plan.terminated_header(plan.len / 2);
            irq.retire();
        }
        RdmapHeader::AtomicRequest(req) => {
            irq.admit()?;
            atomic::handle_atomic_request(&req, |stag| engine.access_region(stag))?;
            let r = engine
                .region(req.remote_stag)
                .expect("validated atomic target");
            assert!(
                r.contains(req.remote_to, 8),
                "atomic target outside its region"
            );
            let mut word = u64::from(req.request_id).rotate_left(17) ^ req.remote_to;
            let orig = atomic::execute(&req, &mut word)?;
            assert_eq!(atomic::response(&req, orig).orig_request_id, req.request_id);
            irq.retire();
        }
        RdmapHeader::Terminate(t) => {
            let _ = TerminateReport::decode(&t).to_string();
        }
        RdmapHeader::AtomicResponse(_) | RdmapHeader::ImmediateData(_) => {}
    }
    Ok(())
}

/// The Terminate for `error` caused by `seg` must build and decode back to the same error.
fn check_terminate(error: ProtocolError, seg: &[u8]) {
    let mut buf = [0u8; TERMINATE_SEGMENT_MAX_LEN];
    let n = rdmap::emit_terminate(error, Some(&Offending::new(seg)), &mut buf)
        .expect("Terminate fits its maximum");
    let decoded = Segment::parse(&buf[..n]).expect("our Terminate decodes");
    let RdmapHeader::Terminate(t) = decoded.repr.header else {
        panic!("our Terminate is not a Terminate");
    };
    let report = TerminateReport::decode(&t);
    assert_eq!(report.error, Some(error));
    let _ = report.to_string();
}
