//! MPA: FPDU framing and deframing (markers, pad, CRC32c) and the startup negotiation
//! (RFC 5044 Request/Reply, RFC 6581 enhanced setup with IRD/ORD and RTR).

pub mod deframer;
pub mod framer;
pub mod negotiation;
