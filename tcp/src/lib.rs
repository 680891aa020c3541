//! User-space TCP/IPv4 for Warpcore: Warpcore's own sans-IO TCP ([`conn`], [`recovery`],
//! [`host`]) driven by the engine's clock over a DPDK port, an in-memory link with seeded
//! fault injection, or either of them wrapped in a pcap capture; smoltcp's TCP socket stays
//! behind the same [`Stack`] interface as the reference ([`mod@reference`],
//! [`TcpImplementation::SmoltcpReference`]) for differential tests.
//!
//! # Contract
//!
//! * Nothing here reads a clock or spawns a thread: every entry point that needs the time
//!   takes a [`smoltcp::time::Instant`] from its caller, and fault injection draws from a
//!   seeded generator, so a run over the in-memory link is reproducible from its seed.
//! * A [`Stack`] owns one device ([`PollDevice`]). One [`Stack::poll`] takes at most one
//!   receive batch from the device, runs the timers that are due, sends what the connections
//!   that had something happen have to send, and flushes the device once. Nothing scans every
//!   connection: segments find theirs through a keyed hash of the 4-tuple, timers through a
//!   timer wheel.
//! * Back-pressure, not loss: when a device has no buffer or its transmit queue is full it
//!   refuses the token and the bytes stay in the TCP send buffer, to go out on a later poll.
//! * Untrusted input never panics: malformed frames, unknown EtherTypes, bad checksums and
//!   segments for unknown connections are dropped or answered with RST; half-open
//!   connections, out-of-order data (per connection by its window, per stack by
//!   [`StackConfig::out_of_order_budget_bytes`]) and control frames are bounded.
//! * Connections are named by [`ConnId`] handles that carry a generation, so a stale handle is
//!   rejected with [`StackError::UnknownConnection`] instead of reaching a reused slot.
//! * With the `dpdk` feature (on by default) [`DpdkDevice`] runs the stack on a DPDK queue
//!   pair; without it the crate builds and runs over the in-memory [`link`] alone.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod capture;
pub mod conn;
pub mod csum;
pub mod device;
#[cfg(feature = "dpdk")]
pub mod dpdk;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
#[cfg(feature = "dpdk")]
pub mod gso_wire;
pub mod host;
pub mod link;
pub mod recovery;
pub mod reference;
pub mod rng;
pub mod stack;
pub mod tso;

pub use capture::Capture;
pub use device::{DeviceStats, PollDevice};
#[cfg(feature = "dpdk")]
pub use dpdk::{DpdkDevice, DpdkDeviceConfig, DpdkDeviceConfigError};
pub use host::{HostStats, TcpTotals};
pub use link::{Faults, LinkConfig, LinkConfigError, LinkEnd};
pub use smoltcp;
pub use stack::{
    Congestion, ConnId, Event, ListenerId, ResolveId, Stack, StackConfig, StackError,
    TcpImplementation, TcpTuning, BUFFER_MAX, OUT_OF_ORDER_BUDGET_DEFAULT, TIMER_MAX,
};
#[cfg(feature = "dpdk")]
pub use warpcore_dpdk_sys as dpdk_sys;
