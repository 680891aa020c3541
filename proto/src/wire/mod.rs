//! Zero-copy views and reprs of every iWARP header (GUIDE rule 1, after smoltcp's `wire`).
//!
//! Each wire type comes as a `Packet<T: AsRef<[u8]>>`-style view whose `new_checked`
//! validates lengths for untrusted input (after which no accessor panics) and a `Repr` with
//! `parse`, `buffer_len` and `emit`. All multi-octet fields are big-endian except the MPA CRC,
//! which travels least significant octet first.

pub mod ddp;
pub mod fpdu;
pub mod mpa;
pub mod rdmap;
pub mod segment;

/// A wire-level parse error: the bytes are too short, or a field holds a value the format
/// does not allow. Protocol-level meaning (which Terminate to send) is assigned by the layer
/// that parses, not here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Error {
    /// The buffer is shorter than the header (or the length a header field announces).
    #[error("buffer too short for the header")]
    Truncated,
    /// A field holds a value the format does not allow.
    #[error("malformed header field")]
    Malformed,
}

/// The result of a wire-level parse.
pub type Result<T> = core::result::Result<T, Error>;
