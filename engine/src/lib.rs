//! # warpcore-engine: the run-to-completion iWARP engine
//!
//! Engine cores own TCP connections, queue pairs and their protocol state (shared nothing);
//! application threads reach them only through lock-free queues (work requests and
//! connection manager calls in, completions and events out). Each core runs a fixed list of
//! pollers with bounded work per loop ([`core`]); [`runtime`] pins one thread per core and
//! keeps the one idle back-off.
//!
//! ## Contract
//! - **No input from the network panics or escapes a registered region**: every received
//!   segment is validated by `warpcore-proto` (MPA, DDP, RDMAP) and placed through the
//!   region table's per-segment STag, key, protection domain, access and bounds checks.
//!   A protocol or protection error earns the Terminate the specs prescribe, moves the QP
//!   to the error state and flushes its work requests; other connections are untouched.
//! - **Local misuse changes nothing**: posting in the wrong state, an SGE outside its
//!   region or a full queue is refused with an [`EngineError`] before anything is queued.
//! - **Limits are configuration** ([`EngineConfig`]), validated once; the data path does
//!   not allocate after start-up.
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
    EngineConfig, ENGINE_ACK_DELAY, MAX_ACK_DELAY, MAX_CONNECTIONS, MAX_QUEUE_DEPTH, MAX_SGE,
    SHUTDOWN_LINGER_MAX_MS,
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
