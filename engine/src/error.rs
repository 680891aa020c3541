//! Local errors of the engine: misuse by the application, refused before anything changes.

use core::fmt;

use warpcore_proto::mpa::negotiation::UsageError;
use warpcore_tcp::StackError;

use crate::wr::QpState;

/// Why an engine call was refused. Nothing changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EngineError {
    /// The QP handle is stale or unknown.
    UnknownQp,
    /// The connection request handle is stale or unknown.
    UnknownRequest,
    /// The listener handle is unknown.
    UnknownListener,
    /// The QP is in the wrong state for this call.
    InvalidState(QpState),
    /// The send or receive queue is full.
    QueueFull,
    /// More SGEs than the QP allows.
    TooManySges,
    /// An SGE names no valid region of this protection domain.
    SgeInvalidStag,
    /// An SGE's region lacks the access the operation needs (local write for receive
    /// buffers and Read sinks).
    SgeAccess,
    /// An SGE reaches outside its region.
    SgeOutOfBounds,
    /// The message is longer than 2^32 - 1 octets.
    MessageTooLong,
    /// An RDMA Read needs exactly one local SGE (one Data Sink STag, RDMAP-06 §5.2.1).
    ReadSgeCount,
    /// The negotiated ORD is 0: this QP cannot issue RDMA Reads.
    NoReadCredits,
    /// The connection does not use the named extension (RFC 7306 atomics and Immediate
    /// Data are off for this QP, e.g. towards siw): EXT-1.1-1, nothing is sent.
    NotSupported(&'static str),
    /// An atomic takes no local SGE or one of exactly 8 octets with local write access
    /// (the original value is written there).
    AtomicSge,
    /// A requested size exceeds the configured limit.
    LimitExceeded(&'static str),
    /// A table is full.
    TableFull(&'static str),
    /// The QP already has a connection.
    AlreadyConnected,
    /// The TCP stack refused.
    Stack(StackError),
    /// The MPA parameters are not allowed.
    Mpa(UsageError),
    /// The engine core is gone.
    CoreGone,
    /// The device (DPDK port, link) could not be set up, or its core's thread not started.
    Device(DeviceError),
    /// A memory window, fast registration or invalidation was refused (what was wrong is
    /// in the [`MemError`](crate::mem::MemError)).
    Memory(crate::mem::MemError),
    /// The QP takes its receives from a shared receive queue (post there), or a shared
    /// receive queue cannot be attached (already attached, receives already posted).
    UsesSrq,
    /// A Write, Read or atomic whose remote Tagged Offset plus length wraps the 64-bit TO
    /// space: no Data Sink could accept it (DDP-7.1-14), so it is refused before it is
    /// queued.
    RemoteToWrap,
}

impl fmt::Display for EngineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EngineError::UnknownQp => f.write_str("unknown queue pair"),
            EngineError::UnknownRequest => f.write_str("unknown connection request"),
            EngineError::UnknownListener => f.write_str("unknown listener"),
            EngineError::InvalidState(s) => write!(f, "queue pair in state {s:?}"),
            EngineError::QueueFull => f.write_str("queue full"),
            EngineError::TooManySges => f.write_str("too many SGEs"),
            EngineError::SgeInvalidStag => f.write_str("SGE names no valid region"),
            EngineError::SgeAccess => f.write_str("SGE region lacks the needed access"),
            EngineError::SgeOutOfBounds => f.write_str("SGE outside its region"),
            EngineError::MessageTooLong => f.write_str("message longer than 2^32-1 octets"),
            EngineError::ReadSgeCount => f.write_str("an RDMA Read takes exactly one SGE"),
            EngineError::NoReadCredits => f.write_str("ORD is 0: no RDMA Reads possible"),
            EngineError::NotSupported(w) => write!(f, "{w} not enabled on this connection"),
            EngineError::AtomicSge => f.write_str("an atomic takes no SGE or one of 8 octets"),
            EngineError::LimitExceeded(w) => write!(f, "{w} exceeds the configured limit"),
            EngineError::TableFull(w) => write!(f, "{w} table full"),
            EngineError::AlreadyConnected => f.write_str("queue pair already connected"),
            EngineError::Stack(e) => write!(f, "TCP: {e}"),
            EngineError::Mpa(e) => write!(f, "MPA: {e}"),
            EngineError::CoreGone => f.write_str("engine core stopped"),
            EngineError::Device(e) => write!(f, "device: {e}"),
            EngineError::Memory(e) => write!(f, "memory: {e}"),
            EngineError::UsesSrq => f.write_str("queue pair uses a shared receive queue"),
            EngineError::RemoteToWrap => f.write_str("remote tagged offset plus length wraps 2^64"),
        }
    }
}

impl std::error::Error for EngineError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            EngineError::Stack(e) => Some(e),
            EngineError::Device(e) => Some(e),
            _ => None,
        }
    }
}

/// Why an engine core's device could not be brought up: the driver's own error is kept as
/// the [`source`](std::error::Error::source), shared so that [`EngineError`] stays `Clone`.
/// Two are equal when they say the same.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum DeviceError {
    /// The device factory failed on the core's thread (a DPDK queue, a link end).
    Open(std::sync::Arc<dyn std::error::Error + Send + Sync + 'static>),
    /// The operating system would not start the engine core's thread.
    Spawn(std::sync::Arc<std::io::Error>),
}

impl DeviceError {
    /// A factory failure from any error type.
    pub fn open(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        DeviceError::Open(std::sync::Arc::new(e))
    }
}

impl fmt::Display for DeviceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceError::Open(e) => write!(f, "could not open the device: {e}"),
            DeviceError::Spawn(e) => write!(f, "could not start the engine core's thread: {e}"),
        }
    }
}

impl std::error::Error for DeviceError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DeviceError::Open(e) => Some(&**e),
            DeviceError::Spawn(e) => Some(&**e),
        }
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
