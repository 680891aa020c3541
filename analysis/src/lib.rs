//! # warpcore-analysis: capture-side iWARP analysis
//!
//! The library half of `iwdump`: it reads pcap/pcapng captures ([`capture`]), reassembles
//! every TCP connection per direction ([`tcp`]), and decodes the iWARP layers on top with
//! `warpcore-proto` ([`analysis`]): MPA startup and negotiated parameters, the FPDU stream
//! (markers, CRC), every DDP/RDMAP message, with the protocol violations found, and how the
//! TCP segments lie against the FPDUs (the share an MPA-aligned sender gets right,
//! [`analysis::SegmentAlignment`]).
//!
//! ## Contract
//! - No input file makes anything here panic: damaged containers, truncated frames, garbage
//!   TCP payloads and hostile MPA/DDP/RDMAP fields all end up as warnings or findings.
//! - Protocol parsing is `warpcore-proto`'s; this crate only feeds it the reassembled bytes
//!   (no second deframer, CRC or header parser lives here).
//! - Capture artefacts (a gap the capture never filled, a file trimmed mid-connection) are
//!   reported apart from protocol violations, which are what makes `iwdump` exit 1.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod analysis;
pub mod capture;
pub mod fpdu;
pub mod pcapng;
pub mod report;
pub mod tcp;
