//! cargo-fuzz target `capture`: see `fuzz/capture_body.rs` for what it checks and the input
//! layout.
#![no_main]

#[path = "../capture_body.rs"]
mod capture_body;

libfuzzer_sys::fuzz_target!(|data: &[u8]| capture_body::capture(data));
