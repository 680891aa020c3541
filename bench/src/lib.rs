//! Warpcore benchmarks: see `benches/`.
#![forbid(unsafe_code)]
