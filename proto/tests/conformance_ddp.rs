//! DDP conformance rows (draft-ietf-rddp-ddp-04, final RFC 5041) that no other test checked
//! on its own: what the sender writes into every segment of a message, and what the
//! receiver places and delivers, in which order. The matrix in `docs/conformance.md` lists
//! each row with the test that checks it.

use warpcore_proto::ddp::{
    DdpReceiver, DdpSender, Placement, Segmenter, TaggedBuffers, TaggedFault, TaggedRegion,
    UntaggedBuffers, MAX_SEGMENT_HEADER_LEN, QUEUE_COUNT,
};
use warpcore_proto::error::DdpError;
use warpcore_proto::wire::ddp::{DdpBuffer, DdpRepr, DdpSegment, DDP_VERSION};

/// Runs a segmenter to the end; returns each whole DDP segment (header and data octets).
fn segments(seg: &mut Segmenter, data: &[u8]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut hdr = [0u8; MAX_SEGMENT_HEADER_LEN];
    while let Some(s) = seg.next_segment(&mut hdr).unwrap() {
        let mut bytes = hdr[..s.header_len].to_vec();
        bytes.extend_from_slice(&data[s.payload_offset as usize..][..s.payload_len as usize]);
        out.push(bytes);
    }
    out
}

/// Parses the DDP header a segment starts with, as a receiver does.
fn header(bytes: &[u8]) -> DdpRepr {
    let view = DdpSegment::new_checked(bytes).expect("every segment starts with a DDP header");
    DdpRepr::parse(&view).expect("a well-formed DDP header")
}

/// One tagged buffer (STag, base TO, length) and receive buffers per queue, head first.
struct Buffers {
    stag: u32,
    region: TaggedRegion,
    posted: [Vec<u64>; QUEUE_COUNT],
}

impl TaggedBuffers for Buffers {
    fn tagged_region(&self, stag: u32, _rsvd_ulp: u8) -> Result<TaggedRegion, TaggedFault> {
        if stag == self.stag {
            Ok(self.region)
        } else {
            Err(TaggedFault::InvalidStag)
        }
    }
}

impl UntaggedBuffers for Buffers {
    fn queue_valid(&self, qn: u32) -> bool {
        (qn as usize) < QUEUE_COUNT
    }
    fn buffer_len(&self, qn: u32, _msn: u32) -> Option<u64> {
        self.posted[qn as usize].first().copied()
    }
}

/// DDP-4.4-1, DDP-4.2-2, DDP-4.2-4, DDP-4.2-6 (and RDMAP-5.1-6, RDMAP-5.2.2-6: one tagged
/// message names one Data Sink buffer): every segment of a tagged message starts with a
/// whole tagged DDP header carrying the RsvdULP octet and the STag the ULP supplied,
/// unchanged from the first segment to the last, whatever the MULPDU.
#[test]
fn every_tagged_segment_carries_the_ulps_stag_and_rsvd_ulp() {
    let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
    for (rsvd_ulp, mulpdu) in [(0x40u8, 1000usize), (0x42, 15), (0xA5, 1500)] {
        let stag = 0xDEAD_BE01;
        let mut s = DdpSender::new()
            .tagged(rsvd_ulp, stag, 0x1_0000, &[], data.len() as u32, mulpdu)
            .unwrap();
        let segs = segments(&mut s, &data);
        assert!(segs.len() > 1, "MULPDU {mulpdu} cuts the message");
        let mut next_to = 0x1_0000u64;
        for (i, bytes) in segs.iter().enumerate() {
            let repr = header(bytes);
            assert_eq!(repr.version, DDP_VERSION);
            assert_eq!(repr.rsvd_ulp, rsvd_ulp, "segment {i}: RsvdULP as supplied");
            assert_eq!(
                repr.buffer,
                DdpBuffer::Tagged { stag, to: next_to },
                "segment {i}: the ULP's STag"
            );
            assert_eq!(repr.last, i == segs.len() - 1);
            next_to += (bytes.len() - repr.header_len()) as u64;
        }
        assert_eq!(next_to, 0x1_0000 + data.len() as u64);
    }
}

/// DDP-4.4-1, DDP-4.3-6 (with DDP-4.3-2/4: RsvdULP travels unchanged): every segment of an
/// untagged message starts with a whole untagged DDP header carrying the QN the ULP chose,
/// the message's one MSN and the ULP's RsvdULP octets, on every queue.
#[test]
fn every_untagged_segment_carries_the_ulps_qn() {
    let data = vec![0x5Au8; 5000];
    let mut sender = DdpSender::new();
    for qn in 0..QUEUE_COUNT as u32 {
        for msg in 0..3u32 {
            let mut s = sender
                .untagged(0x43, 0x1000 + msg, qn, &[], data.len() as u32, 700)
                .unwrap();
            let segs = segments(&mut s, &data);
            assert!(segs.len() > 1);
            for bytes in &segs {
                let repr = header(bytes);
                assert_eq!(repr.rsvd_ulp, 0x43);
                let DdpBuffer::Untagged {
                    rsvd_ulp2,
                    qn: got_qn,
                    msn,
                    ..
                } = repr.buffer
                else {
                    panic!("untagged expected")
                };
                assert_eq!((got_qn, msn, rsvd_ulp2), (qn, msg + 1, 0x1000 + msg));
            }
        }
    }
}

/// DDP-5.2-5, DDP-5.3-6, DDP-4.1-7, DDP-5.4-3: the payload of every valid segment is placed
/// where its header says (rebuilding each message byte for byte), and messages are delivered
/// one at a time, at their L = 1 segment, in the order they were sent, each with its
/// RsvdULP. A segment of the next message before the current one was delivered is refused
/// (its MSN is not the one due), so no message is delivered ahead of an earlier one.
#[test]
fn segments_are_placed_and_messages_delivered_in_send_order() {
    let mut sender = DdpSender::new();
    let messages: Vec<Vec<u8>> = (0..4u8)
        .map(|m| (0..(900 + 311 * m as usize)).map(|i| i as u8 ^ m).collect())
        .collect();
    let mut wire = Vec::new();
    for (m, data) in messages.iter().enumerate() {
        let mut s = sender
            .untagged(0x43 + m as u8, 0, 0, &[], data.len() as u32, 256)
            .unwrap();
        wire.push(segments(&mut s, data));
    }
    let mut bufs = Buffers {
        stag: 0,
        region: TaggedRegion { base: 0, len: 0 },
        posted: Default::default(),
    };
    bufs.posted[0] = vec![4096; messages.len()];

    // A segment of the second message while the first is still being placed: refused.
    let mut early = DdpReceiver::new(DDP_VERSION);
    assert!(early.handle_segment(&wire[0][0], &bufs, &bufs).is_ok());
    assert_eq!(
        early.handle_segment(&wire[1][0], &bufs, &bufs),
        Err(DdpError::UntaggedMsnOutOfRange)
    );

    let mut rx = DdpReceiver::new(DDP_VERSION);
    let mut delivered = Vec::new();
    for segs in &wire {
        let mut buffer = vec![0u8; 4096];
        for bytes in segs {
            let Some(Placement::Untagged(p)) = rx.handle_segment(bytes, &bufs, &bufs).unwrap()
            else {
                panic!("untagged placement expected")
            };
            let payload = &bytes[p.payload_offset..][..p.payload_len];
            buffer[p.mo as usize..][..p.payload_len].copy_from_slice(payload);
            if let Some(len) = p.message_len {
                delivered.push((p.msn, p.rsvd_ulp, buffer[..len as usize].to_vec()));
                bufs.posted[0].remove(0);
            }
        }
    }
    let expected: Vec<_> = messages
        .iter()
        .enumerate()
        .map(|(m, d)| (m as u32 + 1, 0x43 + m as u8, d.clone()))
        .collect();
    assert_eq!(delivered, expected);
}

/// DDP-5.2-5 for the tagged model: every valid segment of a Write-like tagged message is
/// placed at its TO, and together they rebuild the message in the Data Sink buffer.
#[test]
fn tagged_segments_are_placed_at_their_to() {
    let data: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
    let bufs = Buffers {
        stag: 0x77,
        region: TaggedRegion {
            base: 0x2000,
            len: 0x1000,
        },
        posted: Default::default(),
    };
    let mut s = DdpSender::new()
        .tagged(0x40, 0x77, 0x2100, &[], data.len() as u32, 500)
        .unwrap();
    let mut rx = DdpReceiver::new(DDP_VERSION);
    let mut sink = vec![0u8; 0x1000];
    for bytes in segments(&mut s, &data) {
        let Some(Placement::Tagged(p)) = rx.handle_segment(&bytes, &bufs, &bufs).unwrap() else {
            panic!("tagged placement expected")
        };
        assert_eq!(p.stag, 0x77);
        let at = (p.to - 0x2000) as usize;
        sink[at..][..p.payload_len].copy_from_slice(&bytes[p.payload_offset..][..p.payload_len]);
    }
    assert_eq!(&sink[0x100..0x100 + data.len()], &data[..]);
    assert!(sink[..0x100].iter().all(|&b| b == 0));
}

/// DDP-6.2-1, DDP-6.2.2-4: on an error DDP reports it and keeps the stream (failed, dropping
/// every later segment without a second report); tearing the stream down is its ULP's
/// decision, for which the receiver has no output of its own.
#[test]
fn a_failed_stream_is_reported_and_kept_not_torn_down() {
    let bufs = Buffers {
        stag: 1,
        region: TaggedRegion { base: 0, len: 16 },
        posted: Default::default(),
    };
    let mut rx = DdpReceiver::new(DDP_VERSION);
    // A Send with no receive posted: "no buffer available".
    let mut s = DdpSender::new().untagged(0x43, 0, 0, &[], 8, 100).unwrap();
    let send = segments(&mut s, &[1; 8]).remove(0);
    assert_eq!(
        rx.handle_segment(&send, &bufs, &bufs),
        Err(DdpError::UntaggedNoBuffer)
    );
    // The stream stays, failed, until its owner drops it: later segments, valid ones
    // included, are dropped silently rather than reported again.
    let mut w = DdpSender::new().tagged(0x40, 1, 0, &[], 8, 100).unwrap();
    let write = segments(&mut w, &[2; 8]).remove(0);
    for _ in 0..3 {
        assert_eq!(rx.failed(), Some(DdpError::UntaggedNoBuffer));
        assert_eq!(rx.handle_segment(&write, &bufs, &bufs), Ok(None));
        assert_eq!(rx.handle_segment(&send, &bufs, &bufs), Ok(None));
    }
}
