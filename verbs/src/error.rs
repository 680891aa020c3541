//! The one error type of the verbs API: one variant per way an operation can fail, each
//! naming what was wrong; errors of the layers below are kept as typed sources
//! ([`std::error::Error::source`]), never flattened into text. The message repeats the
//! source's, so printing an `Error` alone says everything.

use warpcore_engine::config::ConfigError;
use warpcore_engine::mem::MemError;
use warpcore_engine::proto::mpa::negotiation::UsageError;
use warpcore_engine::tcp::StackError;
use warpcore_engine::{EngineError, QpState};

/// Why a verbs call failed. Nothing changed when a call returns an error.
///
/// More variants may come (`#[non_exhaustive]`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration is invalid (a field of [`crate::EngineConfig`], of
    /// [`crate::Config`] such as `prefix_len`, or a DPDK port's settings): which field and
    /// why.
    #[error("invalid configuration: {0}")]
    Config(#[source] ConfigError),
    /// [`crate::Config::cpus`] names more or fewer CPUs than the device runs engine cores
    /// (one per core, or none): a CPU left over would be ignored, a core left out unpinned.
    #[error(
        "Config::cpus names {given} CPU(s) for {cores} engine core(s): give one per core, \
         or none"
    )]
    CpuCount {
        /// CPUs named.
        given: usize,
        /// Engine cores the device runs (a link one, a DPDK port one per queue).
        cores: usize,
    },
    /// [`crate::Config::cpus`] names a CPU twice: two engine cores pinned to one CPU
    /// take turns on it (busy-polling ones starve each other), which nobody asks for on
    /// purpose ("0,0" for "0,1").
    #[error("Config::cpus names CPU {0} twice: give each engine core a CPU of its own")]
    CpuTwice(usize),
    /// The port cannot run the way it was asked to.
    #[error("a {driver} port cannot {what}: {why}")]
    PortUnsupported {
        /// The port's DPDK driver (e.g. `net_tap`).
        driver: String,
        /// What was asked of it.
        what: &'static str,
        /// Why it cannot.
        why: &'static str,
    },
    /// DPDK refused to set up the EAL, a mempool, a port, a queue or a capture.
    #[cfg(feature = "dpdk")]
    #[error("DPDK: {0}")]
    Dpdk(#[source] DpdkError),
    /// An engine core could not be started: its device failed, or its thread could not be
    /// pinned to the CPU [`crate::Config::cpus`] names ([`EngineError::Pin`]).
    #[error("{0}")]
    Device(#[source] EngineError),
    /// The operating system's random source failed (the TCP's secret keys are drawn from
    /// it when [`crate::Config::random_seed`] is unset).
    #[error("the operating system's random source failed: {0}")]
    Random(String),
    /// The queue pair is in the wrong state for this call.
    #[error("queue pair in state {0:?}")]
    InvalidState(QpState),
    /// The send or receive queue is full (or, for
    /// [`CompletionQueue::push_flushed`](crate::CompletionQueue::push_flushed), the
    /// completion queue).
    #[error("work queue full")]
    QueueFull,
    /// More SGEs than the queue pair allows.
    #[error("too many scatter/gather elements")]
    TooManySges,
    /// An SGE names no memory region of this protection domain.
    #[error("SGE names no memory region of this protection domain")]
    SgeInvalidStag,
    /// An SGE's region lacks the access the operation needs.
    #[error("SGE region lacks the needed access")]
    SgeAccess,
    /// An SGE reaches outside its memory region.
    #[error("SGE outside its memory region")]
    SgeOutOfBounds,
    /// The message is longer than 2^32 - 1 octets.
    #[error("message too long")]
    MessageTooLong,
    /// An Immediate Data request ([`crate::SendOp::Immediate`]) whose SGEs hold octets:
    /// Immediate Data carries no payload (EXT-6.3-2). (Its inline form is
    /// [`Error::InvalidInline`].)
    #[error("Immediate Data carries no payload: its SGEs must hold no octets")]
    ImmediatePayload,
    /// An RDMA Read takes at most one local SGE, its Data Sink (RDMAP-06 §5.2.1); none
    /// for a Read of no octets.
    #[error("an RDMA Read takes at most one local SGE (none: a Read of no octets)")]
    ReadSgeCount,
    /// The connection has no RDMA Read credits (ORD 0): no Reads nor atomics.
    #[error("ORD is 0: no RDMA Reads possible")]
    NoReadCredits,
    /// The connection does not use this extension (RFC 7306 atomics and Immediate Data
    /// are off for the queue pair: [`crate::QpInit::rfc7306`]).
    #[error("{0} not enabled on this connection")]
    NotSupported(&'static str),
    /// An atomic takes no local SGE or one SGE of exactly 8 octets with local write access.
    #[error("an atomic takes no local SGE or one of 8 octets")]
    AtomicSge,
    /// Inline data was given to an operation that takes none (a Read, an atomic, a local
    /// memory operation, octets for Immediate Data).
    #[error("inline data with an operation that takes none")]
    InvalidInline,
    /// A size exceeds the configured limit.
    #[error("{0} exceeds the configured limit")]
    LimitExceeded(&'static str),
    /// Every protection domain number of the context was given out
    /// ([`Context::try_alloc_pd`](crate::Context::try_alloc_pd)): numbers are never reused.
    #[error("every protection domain number of this context was given out (u32::MAX)")]
    PdNumbersExhausted,
    /// A table (queue pairs, memory regions, requests) is full.
    #[error("{0} table full")]
    TableFull(&'static str),
    /// The handle is stale (the object was destroyed) or belongs to another context.
    #[error("stale or foreign handle")]
    StaleHandle,
    /// [`Context::unlisten`](crate::Context::unlisten) of a port nothing listens on.
    #[error("not listening on port {0}")]
    NotListening(u16),
    /// The memory region could not be allocated, registered, deregistered
    /// ([`MemError::Busy`]: windows are bound to it or fast registrations use it) or
    /// accessed.
    #[error("memory region: {0}")]
    Memory(#[source] MemError),
    /// TCP refused (address in use, no route, ...).
    #[error("TCP: {0}")]
    Tcp(#[source] StackError),
    /// The MPA parameters are not allowed (revision, private data length, IRD/ORD).
    #[error("MPA parameters: {0}")]
    Mpa(#[source] UsageError),
    /// The queue pair lives on another engine core than the connection request.
    #[error("queue pair and connection request are on different engine cores")]
    WrongCore,
    /// [`QpInit::core`](crate::QpInit::core) names an engine core the context does not
    /// run (its cores are numbered from 0: [`Context::cores`](crate::Context::cores)).
    #[error("no engine core {core}: this context runs {cores} (0 to {})", cores.saturating_sub(1))]
    NoSuchCore {
        /// The core asked for.
        core: usize,
        /// How many cores the context runs.
        cores: usize,
    },
    /// Waiting timed out.
    #[error("timed out")]
    Timeout,
    /// The engine stopped.
    #[error("engine stopped")]
    EngineGone,
    /// A memory window, fast registration or invalidation was refused; the
    /// [`MemError`](warpcore_engine::mem::MemError) says what was wrong.
    #[error("memory: {0}")]
    Stag(warpcore_engine::mem::MemError),
    /// The queue pair takes its receives from a shared receive queue (post there), or a
    /// shared receive queue cannot be attached to it.
    #[error("queue pair uses a shared receive queue")]
    UsesSrq,
    /// A Write, Read or atomic whose remote tagged offset plus length wraps 2^64 (no peer
    /// could accept it, DDP-7.1-14).
    #[error("remote tagged offset plus length wraps 2^64")]
    RemoteToWrap,
    /// The call blocks until the engine does something, but this context's engine cores
    /// run only while the application polls ([`Drive::Caller`](crate::Drive::Caller)):
    /// nothing would wake it. Open the context with `Drive::Thread` or `Drive::BusyPoll`.
    #[error("{0} needs engine threads: this context's cores run only while the application polls (Drive::Caller)")]
    NeedsEngineThreads(&'static str),
    /// A device has one port, number 1.
    #[error("no port {0}: a Warpcore device has one port, 1")]
    NoSuchPort(u8),
    /// A completion queue without a completion channel cannot be armed.
    #[error("the completion queue has no completion channel to notify")]
    NoChannel,
    /// The operating system refused a completion channel's socket.
    #[error("completion channel: {0}")]
    Channel(#[source] IoError),
}

/// An I/O error, shared so that [`Error`] stays `Clone`. Two are equal when they say the
/// same.
#[derive(Debug, Clone, thiserror::Error)]
#[error(transparent)]
pub struct IoError(pub std::sync::Arc<std::io::Error>);

impl PartialEq for IoError {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0) || self.0.to_string() == other.0.to_string()
    }
}

impl Eq for IoError {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Channel(IoError(std::sync::Arc::new(e)))
    }
}

impl From<EngineError> for Error {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::UnknownQp | EngineError::UnknownRequest | EngineError::UnknownListener => {
                Error::StaleHandle
            }
            EngineError::NotListening(p) => Error::NotListening(p),
            EngineError::InvalidState(s) => Error::InvalidState(s),
            EngineError::QueueFull => Error::QueueFull,
            EngineError::TooManySges => Error::TooManySges,
            EngineError::SgeInvalidStag => Error::SgeInvalidStag,
            EngineError::SgeAccess => Error::SgeAccess,
            EngineError::SgeOutOfBounds => Error::SgeOutOfBounds,
            EngineError::MessageTooLong => Error::MessageTooLong,
            EngineError::ImmediatePayload => Error::ImmediatePayload,
            EngineError::ReadSgeCount => Error::ReadSgeCount,
            EngineError::NoReadCredits => Error::NoReadCredits,
            EngineError::NotSupported(w) => Error::NotSupported(w),
            EngineError::AtomicSge => Error::AtomicSge,
            EngineError::LimitExceeded(w) => Error::LimitExceeded(w),
            EngineError::TableFull(w) => Error::TableFull(w),
            EngineError::AlreadyConnected => Error::InvalidState(QpState::Connecting),
            EngineError::Stack(e) => Error::Tcp(e),
            EngineError::Mpa(e) => Error::Mpa(e),
            EngineError::CoreGone => Error::EngineGone,
            e @ (EngineError::Device(_) | EngineError::Pin(_)) => Error::Device(e),
            EngineError::Memory(e) => Error::Stag(e),
            EngineError::UsesSrq => Error::UsesSrq,
            EngineError::RemoteToWrap => Error::RemoteToWrap,
        }
    }
}

/// A DPDK set-up error ([`dpdk_sys::Error`](crate::dpdk::dpdk_sys::Error)), shared so that
/// [`Error`] stays `Clone`. Two are equal when they say the same.
#[cfg(feature = "dpdk")]
#[derive(Debug, Clone, thiserror::Error)]
#[error(transparent)]
pub struct DpdkError(pub std::sync::Arc<crate::dpdk::dpdk_sys::Error>);

#[cfg(feature = "dpdk")]
impl PartialEq for DpdkError {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0) || self.0.to_string() == other.0.to_string()
    }
}

#[cfg(feature = "dpdk")]
impl Eq for DpdkError {}
