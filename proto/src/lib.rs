//! # warpcore-proto: the iWARP protocol core, sans-IO
//!
//! Pure protocol logic for MPA (RFC 5044 framing with markers and CRC32c, RFC 6581 enhanced
//! connection setup), DDP (RFC 5041 tagged and untagged placement) and RDMAP (RFC 5040
//! Write/Read/Send/Terminate, RFC 7306 atomics and immediate data).
//!
//! ## Contract
//! - **No I/O, no clock, no threads, no `unsafe`.** Bytes come in through `handle_*`/`parse`
//!   calls, results go out through `poll_*`/`emit` calls into buffers the caller supplies, and
//!   any notion of time is an argument.
//! - **No input panics.** Every wire view has a `new_checked` constructor for untrusted bytes;
//!   once it succeeds no accessor panics. Every machine accepts any byte sequence in any split.
//! - **Every network error is typed** ([`error`]): small `Copy` enums that each map to the
//!   Terminate (layer, error type, error code) the specs prescribe.
//! - **No allocation on the data path**: the framer, deframer and validators work in caller
//!   buffers; allocation is limited to set-up (negotiation, private data).
//!
//! ## Layout
//! - [`wire`]: zero-copy views and reprs of every header (smoltcp style).
//! - [`mpa`]: the FPDU framer and deframer (markers, CRC) and the startup negotiation.
//! - [`ddp`]: segmentation and receive validation into placement instructions.
//! - [`rdmap`]: per-message semantics, atomics, Terminate construction and decoding.
//!
//! Requirement IDs such as `DDP-7.1-3` refer to `shared/specs/REQUIREMENTS.md`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod ddp;
pub mod error;
pub mod mpa;
pub mod rdmap;
pub mod wire;

pub use ddp::{DdpReceiver, DdpSender, Placement};
pub use error::{DdpError, Layer, MpaError, ProtocolError, RdmapError, TerminateCode};
pub use mpa::deframer::{DeframeFault, Deframer, DeframerConfig, Ulpdu};
pub use mpa::framer::{Framer, FramerConfig, FramerError};
pub use rdmap::TerminateReport;
pub use wire::segment::{Segment, SegmentError, SegmentRepr};
