//! DDP segmentation and per-segment receive validation (see `bench/README.md`).
//!
//! A 64 KiB message is cut into segments for an EMSS of 1460 (MULPDU 1454, the framer's
//! value without markers), as an RDMA Write (tagged) and as a Send (untagged, QN 0).
//! Throughput is in segments, so criterion reports the time per segment:
//!
//! - `ddp/segment/{tagged,untagged}`: `Segmenter::next_segment` for every segment
//!   (header written into a scratch buffer, payload range computed);
//! - `ddp/receive/{tagged,untagged}`: `DdpReceiver::handle_segment` for every segment of the
//!   message (DDP-04 §7.1 checks against a one-entry STag table and one posted buffer);
//! - `ddp/decode+receive/tagged`: the engine's receive step per ULPDU: RDMAP's
//!   `Segment::parse` followed by `DdpReceiver::handle_header` on the parsed DDP header.

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use warpcore_proto::ddp::{
    DdpReceiver, DdpSender, TaggedBuffers, TaggedFault, TaggedRegion, UntaggedBuffers,
    MAX_SEGMENT_HEADER_LEN,
};
use warpcore_proto::wire::ddp::DDP_VERSION;
use warpcore_proto::wire::fpdu;
use warpcore_proto::wire::rdmap::Opcode;
use warpcore_proto::wire::segment::Segment;

const MESSAGE_LEN: u32 = 64 * 1024;
const STAG: u32 = 0x0000_1200;
const BASE_TO: u64 = 0x7f00_0000_0000;

/// The engine side of receive validation: one registered buffer and one posted receive
/// buffer per queue, each large enough for the message.
#[derive(Debug)]
struct Engine;

impl TaggedBuffers for Engine {
    fn tagged_region(&self, stag: u32, _rsvd_ulp: u8) -> Result<TaggedRegion, TaggedFault> {
        if stag == STAG {
            Ok(TaggedRegion {
                base: BASE_TO,
                len: u64::from(MESSAGE_LEN),
            })
        } else {
            Err(TaggedFault::InvalidStag)
        }
    }
}

impl UntaggedBuffers for Engine {
    fn queue_valid(&self, qn: u32) -> bool {
        qn < 4
    }

    fn buffer_len(&self, _qn: u32, _msn: u32) -> Option<u64> {
        Some(u64::from(MESSAGE_LEN))
    }
}

/// The whole ULPDUs (header + payload) of one message, as the deframer would yield them.
fn segments(tagged: bool, mulpdu: usize, data: &[u8]) -> Vec<Vec<u8>> {
    let mut sender = DdpSender::new();
    let mut seg = if tagged {
        sender.tagged(
            Opcode::Write.control().0,
            STAG,
            BASE_TO,
            &[],
            MESSAGE_LEN,
            mulpdu,
        )
    } else {
        sender.untagged(Opcode::Send.control().0, 0, 0, &[], MESSAGE_LEN, mulpdu)
    }
    .expect("valid message");
    let mut hdr = [0u8; MAX_SEGMENT_HEADER_LEN];
    let mut out = Vec::new();
    while let Some(s) = seg.next_segment(&mut hdr).expect("header buffer") {
        let mut ulpdu = hdr[..s.header_len].to_vec();
        ulpdu.extend_from_slice(&data[s.payload_offset as usize..][..s.payload_len as usize]);
        out.push(ulpdu);
    }
    out
}

fn model(tagged: bool) -> &'static str {
    if tagged {
        "tagged"
    } else {
        "untagged"
    }
}

fn ddp(c: &mut Criterion) {
    let mulpdu = fpdu::mulpdu(1460, false);
    let data: Vec<u8> = (0..MESSAGE_LEN).map(|i| i as u8).collect();
    let mut group = c.benchmark_group("ddp");
    group.sample_size(20);
    group.warm_up_time(Duration::from_millis(500));
    group.measurement_time(Duration::from_secs(2));

    for tagged in [true, false] {
        let segs = segments(tagged, mulpdu, &data);
        group.throughput(Throughput::Elements(segs.len() as u64));

        group.bench_function(format!("segment/{}", model(tagged)), |b| {
            let mut hdr = [0u8; MAX_SEGMENT_HEADER_LEN];
            b.iter(|| {
                let mut sender = DdpSender::new();
                let mut seg = if tagged {
                    sender.tagged(0x40, STAG, BASE_TO, &[], MESSAGE_LEN, mulpdu)
                } else {
                    sender.untagged(0x43, 0, 0, &[], MESSAGE_LEN, mulpdu)
                }
                .expect("valid message");
                let mut octets = 0usize;
                while let Some(s) = seg.next_segment(black_box(&mut hdr)).expect("buffer") {
                    octets += s.ulpdu_len();
                }
                octets
            })
        });

        group.bench_function(format!("receive/{}", model(tagged)), |b| {
            let mut rx = DdpReceiver::new(DDP_VERSION);
            b.iter(|| {
                // Each iteration receives the same message again: MSN 1 on QN 0.
                rx.set_expected_msn(0, 1).expect("message complete");
                let mut placed = 0usize;
                for s in &segs {
                    let p = rx
                        .handle_segment(black_box(s), &Engine, &Engine)
                        .expect("valid segment")
                        .expect("stream not failed");
                    placed += p.payload_range().len();
                }
                placed
            })
        });
    }

    let segs = segments(true, mulpdu, &data);
    group.throughput(Throughput::Elements(segs.len() as u64));
    group.bench_function("decode+receive/tagged", |b| {
        let mut rx = DdpReceiver::new(DDP_VERSION);
        b.iter(|| {
            let mut placed = 0usize;
            for s in &segs {
                let seg = Segment::parse(black_box(s)).expect("valid segment");
                let p = rx
                    .handle_header(&seg.repr.ddp(), seg.payload.len(), &Engine, &Engine)
                    .expect("valid segment")
                    .expect("stream not failed");
                placed += p.payload_range().len();
            }
            placed
        })
    });
    group.finish();
}

criterion_group!(benches, ddp);
criterion_main!(benches);
