//! cargo-fuzz target `engine_rx`: an engine core's own receive path fed a hostile peer's
//! TCP stream; see `warpcore_engine::fuzzing` (engine/src/fuzzing.rs) for the input layout
//! and the invariants, which panic (fail the run) when broken.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| warpcore_engine::fuzzing::engine_rx(data));
