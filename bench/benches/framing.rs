//! MPA framing and deframing throughput, side by side with the two floors it cannot beat:
//! a raw CRC32c and a plain `memcpy` of the same number of octets (see `bench/README.md`).
//!
//! Each group (`framing/64B`, `framing/1KiB`, `framing/64KiB`) moves 64 KiB of ULPDU octets
//! per iteration, so every line of a group reports GiB/s of ULPDU octets:
//!
//! - `64B`: 1024 ULPDUs of 64 octets; `1KiB`: 64 ULPDUs of 1024 octets;
//! - `64KiB`: one 65536-octet message framed as FPDUs no larger than the MPA maximum ULPDU
//!   (64768, MPA-3-5): one ULPDU of 64768 octets and one of 768.
//!
//! Every ULPDU is gathered from two slices, a 14-octet DDP tagged header and its payload,
//! as the engine's transmit path does. CRC is on throughout; markers are off and on.
//!
//! - `frame/markers=…`: `Framer::emit` of all ULPDUs into one output buffer (one framer
//!   for the whole run, so marker positions move as on a real stream);
//! - `deframe/markers=…`: `Deframer::poll` over the contiguous stream of those FPDUs,
//!   CRC verified, every ULPDU yielded (a fresh deframer per iteration, built outside the
//!   timed part);
//! - `crc32c`: `crc32c::crc32c` over 64 KiB; `memcpy`: `copy_from_slice` of 64 KiB.
//!
//! `frame_one/64B` frames a single 64-octet ULPDU per iteration: the per-message cost that
//! the < 50 ns target refers to.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use warpcore_proto::mpa::deframer::{Deframer, DeframerConfig};
use warpcore_proto::mpa::framer::{Framer, FramerConfig};
use warpcore_proto::wire::fpdu::MAX_ULPDU_LEN;

/// Length of the DDP tagged header gathered in front of each payload.
const HEADER_LEN: usize = 14;
/// ULPDU octets each iteration moves in every group.
const OCTETS_PER_ITER: usize = 64 * 1024;

/// One benchmark size: its name and the ULPDU lengths of one iteration.
struct Case {
    name: &'static str,
    ulpdus: Vec<usize>,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            name: "64B",
            ulpdus: vec![64; OCTETS_PER_ITER / 64],
        },
        Case {
            name: "1KiB",
            ulpdus: vec![1024; OCTETS_PER_ITER / 1024],
        },
        Case {
            // A 65536-octet message cut at the MPA maximum ULPDU (MPA-3-5).
            name: "64KiB",
            ulpdus: vec![MAX_ULPDU_LEN, OCTETS_PER_ITER - MAX_ULPDU_LEN],
        },
    ]
}

fn framer_config(markers: bool) -> FramerConfig {
    FramerConfig {
        markers,
        crc: true,
        mulpdu: MAX_ULPDU_LEN,
        stream_offset: 0,
    }
}

fn deframer_config(markers: bool) -> DeframerConfig {
    DeframerConfig {
        markers,
        crc: true,
        max_ulpdu_len: MAX_ULPDU_LEN,
        stream_offset: 0,
    }
}

/// A DDP tagged header (Write, L = 1) and payload octets that are not all zero.
fn header() -> [u8; HEADER_LEN] {
    [0xC1, 0x40, 0, 0, 0x12, 0x34, 0, 0, 0, 0, 0, 0, 0, 0]
}

fn payload() -> Vec<u8> {
    (0..MAX_ULPDU_LEN).map(|i| (i * 7 + 3) as u8).collect()
}

/// Frames every ULPDU of `lens` (header + payload gathered) and returns the written octets.
fn frame_all(
    framer: &mut Framer,
    lens: &[usize],
    hdr: &[u8],
    payload: &[u8],
    out: &mut [u8],
) -> usize {
    let mut at = 0;
    for &len in lens {
        let body = &payload[..len - HEADER_LEN];
        at += framer
            .emit(&[hdr, body], &mut out[at..])
            .expect("output sized for the stream");
    }
    at
}

/// Deframes a whole stream and returns the ULPDU octets delivered (touching each ULPDU).
fn deframe_all(d: &mut Deframer, mut input: &[u8]) -> usize {
    let mut octets = 0;
    loop {
        let (consumed, ulpdu) = d.poll(input).expect("valid stream");
        match ulpdu {
            Some(u) => octets += black_box(u.as_slice()).len(),
            None => break,
        }
        input = &input[consumed..];
    }
    octets
}

fn framing(c: &mut Criterion) {
    let hdr = header();
    let payload = payload();
    for case in cases() {
        let octets: usize = case.ulpdus.iter().sum();
        assert_eq!(octets, OCTETS_PER_ITER);
        let mut group = c.benchmark_group(format!("framing/{}", case.name));
        group.throughput(Throughput::Bytes(octets as u64));
        group.sample_size(20);
        group.warm_up_time(Duration::from_millis(500));
        group.measurement_time(Duration::from_secs(2));

        for markers in [false, true] {
            // Room for the worst case: every FPDU at a position needing the most markers.
            let cap: usize = case.ulpdus.iter().map(|&l| l + 8 + 4 * (l / 508 + 2)).sum();
            let mut out = vec![0u8; cap];

            let mut framer = Framer::new(framer_config(markers));
            group.bench_function(format!("frame/markers={}", on_off(markers)), |b| {
                b.iter(|| {
                    frame_all(
                        &mut framer,
                        &case.ulpdus,
                        &hdr,
                        &payload,
                        black_box(&mut out),
                    )
                })
            });

            // The stream the deframer reads: framed once from offset 0, checked once.
            let mut framer = Framer::new(framer_config(markers));
            let n = frame_all(&mut framer, &case.ulpdus, &hdr, &payload, &mut out);
            let stream = out[..n].to_vec();
            let mut check = Deframer::new(deframer_config(markers));
            assert_eq!(deframe_all(&mut check, &stream), octets);
            group.bench_function(format!("deframe/markers={}", on_off(markers)), |b| {
                b.iter_batched_ref(
                    || Deframer::new(deframer_config(markers)),
                    |d| deframe_all(d, black_box(&stream)),
                    BatchSize::PerIteration,
                )
            });
        }

        let data = &payload[..octets.min(payload.len())];
        // 64 KiB is larger than the payload pattern; use a buffer of exactly `octets`.
        let mut src = data.to_vec();
        src.resize(octets, 0x5A);
        group.bench_function("crc32c", |b| b.iter(|| crc32c::crc32c(black_box(&src))));
        let mut dst = vec![0u8; octets];
        group.bench_function("memcpy", |b| {
            b.iter(|| {
                black_box(&mut dst).copy_from_slice(black_box(&src));
            })
        });
        group.finish();
    }

    // The per-message cost of framing one small ULPDU (header + 50-octet payload).
    let mut group = c.benchmark_group("frame_one");
    group.throughput(Throughput::Bytes(64));
    group.sample_size(20);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(2));
    for markers in [false, true] {
        let mut framer = Framer::new(framer_config(markers));
        let mut out = [0u8; 128];
        let body = &payload[..64 - HEADER_LEN];
        group.bench_function(format!("64B/markers={}", on_off(markers)), |b| {
            b.iter(|| framer.emit(&[&hdr, black_box(body)], black_box(&mut out)))
        });
    }
    group.finish();
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

criterion_group!(benches, framing);
criterion_main!(benches);
