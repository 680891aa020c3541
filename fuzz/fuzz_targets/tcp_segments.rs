//! cargo-fuzz target `tcp_segments`: Warpcore's own TCP (listener, half-open table, active and
//! passive connections) fed arbitrary segment sequences by a scripted peer; see
//! `warpcore_tcp::fuzzing` (tcp/src/fuzzing.rs) for the input and the invariants.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| warpcore_tcp::fuzzing::tcp_segments(data));
