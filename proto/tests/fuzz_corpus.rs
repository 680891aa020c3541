//! Replays the committed cargo-fuzz corpora as regular tests (GUIDE §4 rung 4).
//!
//! The fuzz target bodies live in `fuzz/bodies.rs` and are compiled here unchanged, so every
//! file of `fuzz/corpus/<target>/` (seed inputs, inputs the fuzzer found interesting after
//! minimisation, and crash reproducers once fixed) runs on every `cargo test`, without
//! nightly or libFuzzer. A body panics when an input breaks a property, which fails the
//! test with the file name.

#[path = "../../fuzz/bodies.rs"]
mod bodies;
#[path = "../../fuzz/replay.rs"]
mod replay;

use replay::replay;

/// MPA deframer (MPA-5.2-1, MPA-6-3, MPA-8-12): whole vs. chunked, framer round trip.
#[test]
fn corpus_deframer() {
    replay("deframer", bodies::deframer);
}

/// Every header parser: parse, emit, re-parse.
#[test]
fn corpus_headers() {
    replay("headers", bodies::headers);
}

/// MPA startup machines (mpa-08 §7.1, RFC 6581) on arbitrary peer bytes.
#[test]
fn corpus_negotiation() {
    replay("negotiation", bodies::negotiation);
}

/// DDP receive validation (DDP-04 §7.1) and the RDMAP receive checks against a buffer table
/// (the engine's own receive path is replayed by `engine/tests/fuzz_engine_rx.rs`).
#[test]
fn corpus_ddp_receive() {
    replay("ddp_receive", bodies::ddp_receive);
}

/// The bodies reject nothing silently: a well-formed input of each kind exercises the
/// success path (a sanity check that the input layouts documented in `bodies.rs` hold).
#[test]
fn bodies_accept_well_formed_inputs() {
    // deframer: CRC on, no markers; one FPDU carrying "abc" with its CRC.
    let mut fpdu = vec![0u8, 3, b'a', b'b', b'c', 0, 0, 0, 0, 0, 0, 0];
    let crc = warpcore_proto::wire::fpdu::crc32c(&fpdu[..8]);
    fpdu[8..].copy_from_slice(&crc.to_le_bytes());
    let mut input = vec![0x02, 7];
    input.extend_from_slice(&fpdu);
    bodies::deframer(&input);
    // Framer mode with markers from offset 508: three ULPDUs.
    let mut framed = vec![0x80 | 0x08 | 0x03, 9, 200];
    framed.extend((0..600).map(|i| i as u8));
    framed.extend_from_slice(&[0, 5, 1, 2, 3, 4, 5]);
    bodies::deframer(&framed);
    // headers: the WIRE-FORMATS §6.4 Read RTR through the segment decoder and the RTR check.
    let mut rtr = vec![8u8];
    rtr.extend_from_slice(warpcore_proto::wire::mpa::RtrType::Read.ulpdu());
    bodies::headers(&rtr);
    rtr[0] = 10;
    bodies::headers(&rtr);
}
