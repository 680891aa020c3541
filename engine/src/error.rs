//! Local errors of the engine: misuse by the application, refused before anything changes.

use warpcore_proto::mpa::negotiation::UsageError;
use warpcore_tcp::StackError;

use crate::wr::QpState;

/// Why an engine call was refused. Nothing changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngineError {
    /// The QP handle is stale or unknown.
    #[error("unknown queue pair")]
    UnknownQp,
    /// The connection request handle is stale or unknown.
    #[error("unknown connection request")]
    UnknownRequest,
    /// Nothing listens on the port (`EngineCore::unlisten`).
    #[error("not listening on port {0}")]
    NotListening(u16),
    /// The listener handle is unknown.
    #[error("unknown listener")]
    UnknownListener,
    /// The QP is in the wrong state for this call.
    #[error("queue pair in state {0:?}")]
    InvalidState(QpState),
    /// The send or receive queue is full.
    #[error("queue full")]
    QueueFull,
    /// More SGEs than the QP allows.
    #[error("too many SGEs")]
    TooManySges,
    /// An SGE names no valid region of this protection domain.
    #[error("SGE names no valid region")]
    SgeInvalidStag,
    /// An SGE's region lacks the access the operation needs (local write for receive
    /// buffers and Read sinks).
    #[error("SGE region lacks the needed access")]
    SgeAccess,
    /// An SGE reaches outside its region.
    #[error("SGE outside its region")]
    SgeOutOfBounds,
    /// The message is longer than 2^32 - 1 octets.
    #[error("message longer than 2^32-1 octets")]
    MessageTooLong,
    /// An Immediate Data request whose SGEs hold octets: Immediate Data carries no
    /// payload (EXT-6.3-2), so they would be dropped.
    #[error("Immediate Data carries no payload: its SGEs must hold no octets")]
    ImmediatePayload,
    /// An RDMA Read takes at most one local SGE (one Data Sink STag, RDMAP-06 §5.2.1);
    /// none for a Read of no octets.
    #[error("an RDMA Read takes at most one SGE (none: a Read of no octets)")]
    ReadSgeCount,
    /// The negotiated ORD is 0: this QP cannot issue RDMA Reads nor atomics.
    #[error("ORD is 0: no RDMA Reads possible")]
    NoReadCredits,
    /// The connection does not use the named extension (RFC 7306 atomics and Immediate
    /// Data are off for this QP, e.g. towards siw): EXT-1.1-1, nothing is sent.
    #[error("{0} not enabled on this connection")]
    NotSupported(&'static str),
    /// An atomic takes no local SGE or one of exactly 8 octets with local write access
    /// (the original value is written there).
    #[error("an atomic takes no SGE or one of 8 octets")]
    AtomicSge,
    /// A requested size exceeds the configured limit.
    #[error("{0} exceeds the configured limit")]
    LimitExceeded(&'static str),
    /// A table is full.
    #[error("{0} table full")]
    TableFull(&'static str),
    /// The QP already has a connection.
    #[error("queue pair already connected")]
    AlreadyConnected,
    /// The TCP stack refused.
    #[error("TCP: {0}")]
    Stack(#[source] StackError),
    /// The MPA parameters are not allowed.
    #[error("MPA: {0}")]
    Mpa(#[source] UsageError),
    /// The engine core is gone.
    #[error("engine core stopped")]
    CoreGone,
    /// The core's thread could not be pinned to the CPU asked for (the CPU does not exist,
    /// or is outside this process's allowed set, e.g. `taskset` or a cgroup cpuset).
    #[error("cannot pin the engine core to CPU {0}: no such CPU in this process's allowed set")]
    Pin(usize),
    /// The device (DPDK port, link) could not be set up, or its core's thread not started.
    #[error("device: {0}")]
    Device(#[source] DeviceError),
    /// A memory window, fast registration or invalidation was refused (what was wrong is
    /// in the [`MemError`](crate::mem::MemError)).
    #[error("memory: {0}")]
    Memory(#[source] crate::mem::MemError),
    /// The QP takes its receives from a shared receive queue (post there), or a shared
    /// receive queue cannot be attached (already attached, receives already posted).
    #[error("queue pair uses a shared receive queue")]
    UsesSrq,
    /// A Write, Read or atomic whose remote Tagged Offset plus length wraps the 64-bit TO
    /// space: no Data Sink could accept it (DDP-7.1-14), so it is refused before it is
    /// queued.
    #[error("remote tagged offset plus length wraps 2^64")]
    RemoteToWrap,
}

/// A queue depth out of range, refused when the queue is created
/// ([`CompletionQueue::new`](crate::CompletionQueue::new),
/// [`SharedRq::new`](crate::SharedRq::new)): the depth asked for and
/// what is wrong with it, in the words [`EngineConfig::validate`](crate::EngineConfig::validate)
/// uses for the configured limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{queue} depth {depth} {reason}")]
pub struct DepthError {
    /// Which queue (`"completion queue"`, `"shared receive queue"`).
    pub queue: &'static str,
    /// The depth asked for.
    pub depth: usize,
    /// What is wrong with it.
    pub reason: &'static str,
}

impl DepthError {
    /// Checks `depth` of `queue` against `1..=`[`MAX_QUEUE_DEPTH`](crate::MAX_QUEUE_DEPTH).
    pub(crate) fn check(queue: &'static str, depth: usize) -> Result<(), DepthError> {
        let reason = if depth == 0 {
            "must be at least 1"
        } else if depth > crate::config::MAX_QUEUE_DEPTH {
            "exceeds MAX_QUEUE_DEPTH (2^22)"
        } else {
            return Ok(());
        };
        Err(DepthError {
            queue,
            depth,
            reason,
        })
    }
}

/// Why an engine core's device could not be brought up: the driver's own error is kept as
/// the [`source`](std::error::Error::source), shared so that [`EngineError`] stays `Clone`.
/// Two are equal when they say the same.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// The device factory failed on the core's thread (a DPDK queue, a link end).
    #[error("could not open the device: {0}")]
    Open(#[source] std::sync::Arc<dyn std::error::Error + Send + Sync + 'static>),
    /// The operating system would not start the engine core's thread.
    #[error("could not start the engine core's thread: {0}")]
    Spawn(#[source] std::sync::Arc<std::io::Error>),
}

impl DeviceError {
    /// A factory failure from any error type.
    pub fn open(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        DeviceError::Open(std::sync::Arc::new(e))
    }
}

impl PartialEq for DeviceError {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Eq for DeviceError {}

impl From<StackError> for EngineError {
    fn from(e: StackError) -> Self {
        EngineError::Stack(e)
    }
}

impl From<UsageError> for EngineError {
    fn from(e: UsageError) -> Self {
        EngineError::Mpa(e)
    }
}

#[cfg(test)]
mod device_error_tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn device_errors_keep_the_driver_error_as_source() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "no such port: net_memif9");
        let e = EngineError::Device(DeviceError::open(io));
        assert_eq!(
            e.to_string(),
            "device: could not open the device: no such port: net_memif9"
        );
        let dev = e.source().expect("EngineError::Device has a source");
        let driver = dev
            .source()
            .expect("DeviceError::Open keeps the driver's error");
        assert_eq!(driver.to_string(), "no such port: net_memif9");
        assert_eq!(e.clone(), e);
    }
}
