//! The one error type of the crate.

/// What went wrong while setting DPDK up. Every variant names the argument, device or queue
/// concerned and carries DPDK's own reason.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `rte_eal_init` was already called in this process (it cannot be called twice).
    #[error("the DPDK EAL is already initialised in this process")]
    EalAlreadyInitialised,
    /// `rte_eal_init` failed.
    #[error("EAL initialisation failed with arguments [{args}]: {reason}")]
    EalInit {
        /// The EAL arguments, space separated.
        args: String,
        /// DPDK's reason (`rte_errno` text).
        reason: String,
    },
    /// The process's application had started DPDK's EAL, and a device Warpcore needs could
    /// not be probed on it ([`crate::EalBuilder::init_or_join`]).
    #[error(
        "joining the EAL this process's application started: probing device {device:?} \
         failed: {reason}"
    )]
    EalJoin {
        /// The device arguments (`net_memif0,role=client,...`, a PCI address).
        device: String,
        /// DPDK's reason.
        reason: String,
    },
    /// An argument contained a NUL byte and cannot be passed to C.
    #[error("argument {0:?} contains a NUL byte")]
    NulInArgument(String),
    /// A mempool could not be created.
    #[error("creating mempool {name:?} ({count} mbufs of {data_room} bytes) failed: {reason}")]
    Mempool {
        /// Pool name.
        name: String,
        /// Requested number of mbufs.
        count: u32,
        /// Requested data room per mbuf.
        data_room: u16,
        /// DPDK's reason.
        reason: String,
    },
    /// No ethdev port has this name (a `--vdev` that did not probe, or a typo).
    #[error("no DPDK port named {name:?} (ports present: {present})")]
    NoSuchPort {
        /// The name looked up.
        name: String,
        /// Names of the ports that do exist.
        present: String,
    },
    /// A port operation failed.
    #[error("port {port} ({name}): {op} failed: {reason}")]
    Port {
        /// Port id.
        port: u16,
        /// Device name.
        name: String,
        /// The operation (`rte_eth_dev_configure`, `rx queue 1 setup`, ...).
        op: String,
        /// DPDK's reason.
        reason: String,
    },
    /// The port cannot carry frames of the MTU asked for.
    #[error("port {port} ({name}): MTU {mtu} is not possible: {why}")]
    Mtu {
        /// Port id.
        port: u16,
        /// Device name.
        name: String,
        /// The IP MTU asked for.
        mtu: u16,
        /// Why not, and what would make it possible.
        why: String,
    },
    /// A `Port` is already open on this port id in this process (or queue handles taken
    /// from a dropped one are still alive): a second would hand out the same queues again.
    #[error("port {port} ({name}) is already open in this process (one Port per port id)")]
    PortInUse {
        /// Port id.
        port: u16,
        /// Device name.
        name: String,
    },
    /// A [`crate::PortConfig`] asks for what the port cannot be configured with as asked
    /// (DPDK would put its own default or nearest value in its place).
    #[error("port {port} ({name}): {why}")]
    PortConfig {
        /// Port id.
        port: u16,
        /// Device name.
        name: String,
        /// What was asked for and what the port takes.
        why: String,
    },
    /// The port cannot be reconfigured or stopped while queue handles taken from it are
    /// alive: a reconfiguration releases the queues they poll.
    #[error(
        "port {port} ({name}): cannot {op} while {rx} rx and {tx} tx queue handles are alive \
         (drop them first)"
    )]
    QueuesInUse {
        /// Port id.
        port: u16,
        /// Device name.
        name: String,
        /// `configure` or `stop`.
        op: &'static str,
        /// Live rx queue handles.
        rx: usize,
        /// Live tx queue handles.
        tx: usize,
    },
    /// A queue handle was requested twice or out of range.
    #[error("port {port}: {kind} queue {queue} is not available ({why})")]
    Queue {
        /// Port id.
        port: u16,
        /// `rx` or `tx`.
        kind: &'static str,
        /// Queue index.
        queue: u16,
        /// Why not.
        why: &'static str,
    },
    /// A ring-backed port pair could not be created.
    #[error("creating ring port {name:?} failed: {reason}")]
    Ring {
        /// Ring or port name.
        name: String,
        /// DPDK's reason.
        reason: String,
    },
    /// The pcapng capture could not be opened or written.
    #[error("pcapng capture {path:?}: {reason}")]
    Pcapng {
        /// File path.
        path: String,
        /// Why.
        reason: String,
    },
    /// A packet's transmit offload metadata does not fit its first segment
    /// ([`crate::Mbuf::check_tx_offload`]): no driver may be handed it.
    #[error("the packet's transmit offload cannot be handed to a driver: {why}")]
    TxOffload {
        /// What does not fit.
        why: String,
    },
    /// DPDK's software segmentation refused a packet or ran out of mbufs.
    #[error("segmenting a TCP super-frame (rte_gso_segment) failed: {reason}")]
    Gso {
        /// DPDK's reason.
        reason: String,
    },
}

impl Error {
    /// The `rte_errno` text of the calling thread, for error reports.
    pub(crate) fn last_reason() -> String {
        let e = crate::errno();
        format!("{} (rte_errno {e})", crate::strerror(e))
    }

    /// The text of a negative DPDK return code.
    pub(crate) fn code_reason(ret: i32) -> String {
        let e = ret.abs();
        format!("{} (code {ret})", crate::strerror(e))
    }
}
