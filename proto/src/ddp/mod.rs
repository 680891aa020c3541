//! DDP (draft-ietf-rddp-ddp-04, final RFC 5041): segmentation on send, validation and
//! in-order delivery on receive. Sans-IO and allocation-free; the wire format is in
//! [`crate::wire::ddp`].
//!
//! ## Send ([`DdpSender`], [`Segmenter`])
//! One [`DdpSender`] per stream keeps the next MSN of each untagged queue. For each ULP
//! message the engine calls [`DdpSender::untagged`] (consumes the queue's MSN) or
//! [`DdpSender::tagged`] with the RDMAP control octet, the addressing fields, the RDMAP
//! header bytes (if any), the data length and the MULPDU that the MPA framer computed.
//! It gets a [`Segmenter`], which it may keep in the queue pair's send state:
//!
//! ```
//! use warpcore_proto::ddp::{DdpSender, MAX_SEGMENT_HEADER_LEN};
//! let mut sender = DdpSender::new();
//! let data = vec![7u8; 3000];
//! // A Send (RDMAP control octet 0x43) on QN 0 with MULPDU 1500.
//! let mut seg = sender.untagged(0x43, 0, 0, &[], data.len() as u32, 1500).unwrap();
//! let mut hdr = [0u8; MAX_SEGMENT_HEADER_LEN];
//! let mut sent = 0;
//! while let Some(s) = seg.next_segment(&mut hdr).unwrap() {
//!     let head = &hdr[..s.header_len];
//!     let body = &data[s.payload_offset as usize..][..s.payload_len as usize];
//!     // The MPA framer gathers both into one FPDU: framer.emit(&[head, body], out).
//!     assert!(head.len() + body.len() <= 1500);
//!     sent += body.len();
//! }
//! assert_eq!(sent, 3000);
//! ```
//!
//! MULPDU is the framer's `max_ulpdu_len()` (`wire::fpdu::mulpdu`); the framer's minimum of
//! 128 octets means an RDMAP header (at most 52 octets) always travels whole in the first
//! segment, although the segmenter would split one correctly. [`Segmenter::next_ulpdu_len`]
//! tells the size of the next segment before committing (the framer's `fpdu_wire_len` turns
//! it into transmit space), so the engine can stop when the TCP transmit buffer is full and
//! resume later with the same [`Segmenter`].
//!
//! ## Receive ([`DdpReceiver`])
//! One [`DdpReceiver`] per stream. For each ULPDU the MPA deframer yields, the engine calls
//! [`DdpReceiver::handle_segment`] with its implementations of [`TaggedBuffers`] (STag
//! lookup) and [`UntaggedBuffers`] (posted receive buffers per QN). The result is:
//! - `Ok(Some(Placement::Tagged(p)))`: RDMAP checks opcode and access rights, then the
//!   engine copies `segment[p.payload_offset..][..p.payload_len]` to TO `p.to` of `p.stag`.
//! - `Ok(Some(Placement::Untagged(p)))`: RDMAP checks opcode against the QN; the engine
//!   copies the payload to offset `p.mo` of the buffer at the head of queue `p.qn` (for
//!   MO < RDMAP header length the first octets are RDMAP's header). When `p.message_len` is
//!   `Some(n)` the message is complete: deliver it (n octets) and pop that buffer.
//! - `Err(e)`: a [`DdpError`](crate::error::DdpError); place nothing, send a Terminate
//!   carrying `e.terminate_code()` and the DDP header (`DdpSegment::header`).
//! - `Ok(None)`: the stream failed earlier and the segment is dropped silently.
//!
//! See [`recv`] for the check order and how the draft's ordering rules were read.

pub mod recv;
pub mod send;

pub use recv::{
    DdpReceiver, Placement, TaggedBuffers, TaggedFault, TaggedPlacement, TaggedRegion,
    UntaggedBuffers, UntaggedPlacement,
};
pub use send::{
    DdpSender, SegmentationError, Segmenter, TxSegment, MAX_SEGMENT_HEADER_LEN, MAX_ULP_HEADER_LEN,
};

/// Number of untagged queues DDP keeps state for: QN 0 (Send), 1 (Read and Atomic
/// Requests), 2 (Terminate) and 3 (Atomic Responses, RFC 7306), the IANA registry of RFC
/// 7306 §10.2 (WIRE-FORMATS §4.3). Higher QNs are invalid on both sides.
pub const QUEUE_COUNT: usize = 4;
