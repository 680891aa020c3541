//! # warpcore-engine: the run-to-completion iWARP engine
//!
//! Engine cores own TCP connections, queue pairs and their protocol state (shared nothing);
//! application threads reach them through queues (work requests and connection manager
//! calls in, completions and events out; the command ring's producer end is behind a mutex
//! only application threads take). Each core runs a fixed list of pollers with bounded work
//! per loop ([`core`]); [`runtime`] runs each core on a pinned thread of its own by default
//! and keeps the one idle back-off, or leaves the loop to the application's threads
//! ([`runtime::Drive::Caller`]: they run it when they poll, wait or call, and a send request
//! posted to such a core that no thread is running goes straight into its send queue).
//!
//! ## Contract
//! - **No input from the network panics or escapes a registered region**: every received
//!   segment is validated by `warpcore-proto` (MPA, DDP, RDMAP) and placed through the
//!   region table's per-segment STag, key, protection domain, access and bounds checks.
//!   A protocol or protection error earns the Terminate the specs prescribe, moves the QP
//!   to the error state and flushes its work requests; other connections are untouched.
//! - **Local misuse changes nothing**: posting in the wrong state, an SGE outside its
//!   region or a full queue is refused with an [`EngineError`] before anything is queued.
//!   The one exception is a QP whose local keys are checked when a request runs
//!   ([`QpShared::sges_checked_at_post`] off, as the drop-in libibverbs sets it): its bad
//!   SGE is posted and completes with `LocalProtection`, the QP going to the error state.
//! - **Limits are configuration** ([`EngineConfig`]), validated once; the engine's own
//!   queues and scratch buffers are allocated when the core or the QP is set up, not on the
//!   data path (the TCP's send and receive buffers grow on demand there, up to
//!   `EngineConfig::tcp`'s sizes).
//! - **Unsafe code** lives only in `mem` (placement into registered memory) and `ring`.
//! - Nothing here reads a clock on the data path: cores get `now` from their driver.
//!
//! Requirement IDs (e.g. `RDMAP-5.2-1`) refer to `shared/specs/REQUIREMENTS.md`.
// Unsafe code is allowed only in the modules that opt in (`mem` placement, `ring`), each
// block with a `// SAFETY:` comment (GUIDE rule 4).
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod clock;
pub mod cm;
pub mod config;
pub mod core;
pub mod doorbell;
pub mod error;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod mem;
pub mod ring;
pub mod runtime;
pub mod srq;
pub mod wr;

pub use crate::cm::{
    CmEvent, ConnError, ConnectRequest, DisconnectCause, Established, ListenerId, MpaParams,
    NeighborId, RequestId, RtrType, RtrTypes,
};
pub use crate::config::{
    EngineConfig, CLOSE_TIMEOUT_MAX_MS, ENGINE_ACK_DELAY, MAX_ACK_DELAY, MAX_CONNECTIONS,
    MAX_QUEUE_DEPTH, MAX_SGE, SHUTDOWN_LINGER_MAX_MS,
};
pub use crate::core::{
    ends_in_flush, reserve_flushed_send, validate_recv, validate_recv_late, validate_send,
    validate_send_inline, CoreStats, EngineCore, QpAttr, QpInfo,
};
pub use crate::error::{DepthError, DeviceError, EngineError};
pub use crate::srq::SharedRq;
pub use crate::wr::{
    Completion, CompletionChannel, CompletionQueue, QpId, QpShared, QpState, RecvWr, SendOp,
    SendWr, Sge, SgeList, WcOpcode, WcStatus,
};
pub use warpcore_proto as proto;
pub use warpcore_tcp as tcp;
