//! # warpcore-test-support: what the test suites of several crates share
//!
//! Unpublished; a dev-dependency only. It depends on nothing but the capture analysis
//! (`warpcore-analysis`), so any crate's tests may use it without an edge to the tools
//! crate (`verbs`'s tests used to depend on `apps`, which depends on `verbs`).
//! - [`tshark`]: running Wireshark's dissector on a capture, and the rule for when it is
//!   missing (fail when `WARPCORE_REQUIRE_TSHARK` is set, as `scripts/test.sh` does; skip
//!   out loud otherwise);
//! - [`judge`]: judging a capture of an engine run with iwdump's library and tshark;
//! - [`paths`]: test data inside the checkout, found relative to it;
//! - [`pcapng`]: small pcapng files built in memory.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod judge;
pub mod paths;
pub mod pcapng;
pub mod tshark;
