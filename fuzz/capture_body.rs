//! The body of the cargo-fuzz target `capture`: iwdump's decoder (`warpcore-analysis`) on
//! hostile captures. Shared by `fuzz/fuzz_targets/capture.rs` (libFuzzer) and
//! `analysis/tests/fuzz_capture.rs`, which replays every file of `fuzz/corpus/capture/` on
//! each `cargo test`, so that a crash found by the fuzzer stays a regression test.
//!
//! A capture comes from anywhere (a customer's switch, a damaged disk), so the decoder must
//! never panic or overflow on one, whatever its container, link layer, TCP or iWARP content.
//!
//! Input: octet 0 bit 0 = 0: the rest is a capture file as read from disk (pcap or pcapng,
//! any byte order; the container parser is part of what is fuzzed). Bit 0 = 1: the rest is
//! a list of captured frames, each a 2-octet big-endian length and that many octets (the
//! last one may be short), decoded as octet 0 bits 1-2 say (0 Ethernet, 1 Linux cooked v1,
//! 2 raw IP, 3 Linux cooked v2), one microsecond apart: the fuzzer then works on frames,
//! TCP segments and MPA/DDP/RDMAP streams rather than on the container.
//!
//! Properties besides "no panic":
//! - the analysis is deterministic (the same capture twice gives the same report);
//! - the JSON rendering is JSON, and its counts are the report's (frames, violations);
//! - the text rendering's last line states the report's number of violations;
//! - every frame is accounted for: the report counts each frame of the capture once.
#![allow(dead_code)]

use std::time::Duration;

use warpcore_analysis::capture::{parse_capture, Capture, CaptureFormat, Frame, LinkType};
use warpcore_analysis::report::{analyse_capture, render_json, render_text};

/// The list of frames of the framed input layout (see the module doc).
fn frames(mode: u8, mut rest: &[u8]) -> Capture {
    let link = match (mode >> 1) & 3 {
        0 => LinkType::Ethernet,
        1 => LinkType::LinuxSll,
        2 => LinkType::RawIp,
        _ => LinkType::LinuxSll2,
    };
    let mut frames = Vec::new();
    while rest.len() >= 2 {
        let len = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
        let data = &rest[2..(2 + len).min(rest.len())];
        rest = &rest[2 + data.len()..];
        let number = frames.len() as u64 + 1;
        frames.push(Frame {
            number,
            timestamp: Duration::from_micros(number),
            link,
            data: data.to_vec(),
            original_len: len as u32,
        });
    }
    Capture {
        format: CaptureFormat::Pcap,
        frames,
        warnings: Vec::new(),
        incomplete: false,
    }
}

/// The `capture` target (see the module doc).
pub fn capture(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let capture = if mode & 1 == 0 {
        match parse_capture(rest) {
            Ok(c) => c,
            Err(_) => return,
        }
    } else {
        frames(mode, rest)
    };
    let report = analyse_capture("fuzz", &capture);
    assert_eq!(report.frames, capture.frames.len(), "frames counted");
    let text = render_text(&report, true);
    let again = analyse_capture("fuzz", &capture);
    assert_eq!(
        text,
        render_text(&again, true),
        "the same capture analysed twice reads differently"
    );
    let violations = report.violations();
    let last = text.lines().last().expect("the text report has lines");
    let stated = if violations == 0 {
        "fuzz: no protocol violations".to_string()
    } else {
        format!(
            "fuzz: {violations} protocol violation{}",
            if violations == 1 { "" } else { "s" }
        )
    };
    assert_eq!(last, stated, "the text's closing line");
    let json: serde_json::Value =
        serde_json::from_str(&render_json(&report, true)).expect("render_json writes JSON");
    assert_eq!(json["frames"].as_u64(), Some(capture.frames.len() as u64));
    assert_eq!(json["violations"].as_u64(), Some(violations as u64));
    assert_eq!(
        json["connections"].as_array().map(Vec::len),
        Some(report.connections.len())
    );
}
