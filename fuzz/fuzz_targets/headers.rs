//! cargo-fuzz target `headers`: see `fuzz/bodies.rs` for what it checks and the input layout.
#![no_main]

#[path = "../bodies.rs"]
mod bodies;

libfuzzer_sys::fuzz_target!(|data: &[u8]| bodies::headers(data));
