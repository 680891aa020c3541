//! Placeholder; the protocol core lands in the next commits.
#![forbid(unsafe_code)]
