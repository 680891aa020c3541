//! # warpcore-verbs: the public API of the Warpcore iWARP engine
//!
//! Safe Rust over the engine: a [`Context`] opened from a [`Config`] (device, IP address,
//! cores), [`ProtectionDomain`]s, [`MemoryRegion`]s, [`MemoryWindow`]s and fast-registration
//! STags ([`FastRegMr`]), [`QueuePair`]s, [`SharedReceiveQueue`]s, [`CompletionQueue`]s
//! and a connection manager (listen / connect / accept / reject, [`CmEvent`]s).
//!
//! ## Quick start
//!
//! Two contexts joined by the in-memory link (no DPDK needed), a Send and an RDMA Write:
//!
//! ```
//! use std::time::Duration;
//! use warpcore_verbs::*;
//!
//! # fn main() -> Result<(), Error> {
//! let (dev_a, dev_b) = link_pair(&LinkConfig::default());
//! let server = Context::open(Config::new(dev_b, [10, 0, 0, 2]))?;
//! let client = Context::open(Config::new(dev_a, [10, 0, 0, 1]))?;
//!
//! // Server: a receive buffer, a queue pair, a listener.
//! let spd = server.alloc_pd();
//! let scq = server.create_cq(64)?;
//! let smr = spd.alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
//! let sqp = spd.create_qp(&QpInit::new(&scq, &scq))?;
//! sqp.post_recv(&RecvWr::new(1, &[smr.sge(0, 64)])?)?;
//! server.listen(7000, &MpaParams::default())?;
//!
//! // Client: connect with private data.
//! let cpd = client.alloc_pd();
//! let ccq = client.create_cq(64)?;
//! let cmr = cpd.alloc_mr(4096, Access::LOCAL_WRITE)?;
//! let cqp = cpd.create_qp(&QpInit::new(&ccq, &ccq))?;
//! cqp.connect([10, 0, 0, 2], 7000, &MpaParams::default(), b"hi")?;
//!
//! // Server accepts the request; both sides see Established.
//! let req = loop {
//!     if let Some(CmEvent::ConnectRequest(r)) = server.next_event(Duration::from_secs(5)) {
//!         break r;
//!     }
//! };
//! server.accept(&req, &sqp, b"welcome")?;
//! assert!(matches!(client.next_event(Duration::from_secs(5)), Some(CmEvent::Established(_))));
//!
//! // A Send, then an RDMA Write into the server's region.
//! cmr.write(0, b"hello, iWARP")?;
//! cqp.post_send(&SendWr::new(1, SendOp::Send, &[cmr.sge(0, 12)])?)?;
//! let wc = scq.wait(Duration::from_secs(5))?;
//! assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 12));
//! let write = SendOp::Write { remote_stag: smr.stag(), remote_to: 100 };
//! cqp.post_send(&SendWr::new(2, write, &[cmr.sge(0, 5)])?)?;
//! assert_eq!(ccq.wait(Duration::from_secs(5))?.wr_id, 1);
//! assert_eq!(ccq.wait(Duration::from_secs(5))?.wr_id, 2);
//! let mut got = [0u8; 12];
//! smr.read(0, &mut got)?;
//! assert_eq!(&got, b"hello, iWARP");
//! # Ok(())
//! # }
//! ```
//!
//! ## Threads and ownership
//! Each engine core is a pinned thread that owns its connections; this crate talks to it
//! only through lock-free queues. Posting a work request validates it on the calling
//! thread (state, SGEs against the region table, queue depth) and returns a typed
//! [`Error`] without side effects when it is refused. [`CompletionQueue::wait`] blocks the
//! calling thread only (spin, then short parks); an engine core waits for an application
//! thread only while that thread copies out a completion it has claimed from a queue the
//! core is pushing into (the completion queue's slot is room only once it is read). With
//! [`Config::drive`] = [`Drive::Caller`] there are no core threads: the application
//! threads run the cores whenever they poll, wait or call (see [`Context::progress`]).
//!
//! ## Registered memory
//! The network writes into a [`MemoryRegion`] while the application may read it, so no
//! `&mut [u8]` into it is ever handed out: use [`MemoryRegion::read`]/
//! [`MemoryRegion::write`] (copies), [`MemoryRegion::atomic_u64`], or the `unsafe`
//! [`MemoryRegion::as_slice`] whose contract is written there. Order your reads after the
//! engine's writes through completions.
// The one `unsafe fn` ([`MemoryRegion::as_slice`]) opts in; everything else is safe.
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod attr;
mod channel;
mod error;
mod polled;
mod weak_map;

use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant as StdInstant};

pub use warpcore_engine::mem::Region;
use warpcore_engine::mem::{MrTable, PdId, Stag};
pub use warpcore_engine::runtime::Drive;
use warpcore_engine::runtime::{spawn_core, Clock, Command, CoreHandle, CoreSpec, Reply};
use warpcore_engine::tcp::smoltcp::wire::{Ipv4Address, Ipv4Cidr};
use warpcore_engine::tcp::StackConfig;
pub use warpcore_engine::QpId;
use warpcore_engine::{validate_recv, validate_send, QpAttr, QpShared, SharedRq};

pub use attr::{AtomicCap, DeviceAttr, PortAttr, PortState, Transport};
pub use channel::{CompletionChannel, EventChannel};
#[cfg(feature = "dpdk")]
pub use error::DpdkError;
pub use error::{Error, IoError};
pub use warpcore_engine::config::ConfigError;
pub use warpcore_engine::mem::{Access, MemError, MwType};
pub use warpcore_engine::proto::mpa::negotiation::UsageError as MpaUsageError;
pub use warpcore_engine::tcp::link::{Faults, LinkConfig, LinkConfigError, LinkEnd};
pub use warpcore_engine::tcp::StackError;
pub use warpcore_engine::{
    CmEvent, Completion, ConnError, ConnectRequest, CoreStats, DisconnectCause, EngineConfig,
    Established, MpaParams, NeighborId, QpState, RequestId, RtrType, RtrTypes, SendOp, Sge,
    WcOpcode, WcStatus, ENGINE_ACK_DELAY, MAX_ACK_DELAY, MAX_SGE,
};

/// The largest inline payload a queue pair may ask for ([`QpInit::max_inline`]; more is
/// [`Error::LimitExceeded`] at [`ProtectionDomain::create_qp`], as `ibv_create_qp` refuses
/// a `max_inline_data` above the device's). Inline data is copied on the posting thread
/// into an arena of `sq_depth` slots: 64 KiB keeps it at 64 MiB for the default deepest
/// send queue (1,024), and a larger message is better sent from registered memory, without
/// the copy. Unbounded, a `max_inline` of `u32::MAX` had the first inline post map and
/// fault in `sq_depth` times 4 GiB.
pub const MAX_INLINE: u32 = 64 * 1024;

/// The device an engine runs on.
#[derive(Debug)]
pub enum Device {
    /// One end of an in-memory link (tests and examples without DPDK); one engine core.
    Link(LinkEnd),
    /// A DPDK port with one queue pair per engine core.
    #[cfg(feature = "dpdk")]
    Dpdk(dpdk::DpdkPort),
}

/// The two ends of an in-memory link, as devices for two contexts in one process, for a
/// configuration written in code (tests, examples, benchmarks).
///
/// # Panics
///
/// On a `cfg` no link can work with (a loss probability that is not one, a queue of no
/// frames, a rate of 0, ...); a configuration from a user goes through [`try_link_pair`].
pub fn link_pair(cfg: &LinkConfig) -> (Device, Device) {
    try_link_pair(cfg).unwrap_or_else(|e| panic!("link_pair: {e}"))
}

/// [`link_pair`] that refuses a configuration no link can work with, naming the field
/// ([`LinkConfigError`]), instead of panicking.
pub fn try_link_pair(cfg: &LinkConfig) -> Result<(Device, Device), LinkConfigError> {
    let (a, b) = warpcore_engine::tcp::link::try_pair(cfg)?;
    Ok((Device::Link(a), Device::Link(b)))
}

/// How to open a [`Context`].
#[derive(Debug)]
pub struct Config {
    /// The device.
    pub device: Device,
    /// IPv4 address of the interface.
    pub ip: Ipv4Addr,
    /// Prefix length of the interface's network: at most 32 (more fails
    /// [`Context::open`] with [`Error::Config`] naming `prefix_len`).
    pub prefix_len: u8,
    /// Default gateway.
    pub gateway: Option<Ipv4Addr>,
    /// Ethernet address (`None`: derived from the IP address, or the port's own address).
    pub mac: Option<[u8; 6]>,
    /// CPUs to pin the engine cores to, one per core (empty: the cores unpinned). A link
    /// device runs one core; a DPDK port one core per configured queue. Another number of
    /// CPUs fails [`Context::open`] with [`Error::CpuCount`], a CPU named twice with
    /// [`Error::CpuTwice`]. A CPU the core's
    /// thread cannot be pinned to (absent, or outside the process's allowed set) fails
    /// [`Context::open`] with [`Error::Device`] naming it; [`Drive::Caller`] pins nothing
    /// (the caller's thread runs the core).
    pub cpus: Vec<usize>,
    /// Every limit of the engine.
    pub engine: EngineConfig,
    /// Who runs the engine cores' loops: their own threads (default), busy-polling
    /// threads, or the application's threads ([`Drive::Caller`], see [`Context::progress`]).
    pub drive: Drive,
    /// The seed of the TCP's secrets: the key of its initial sequence numbers (RFC 6528),
    /// of its 4-tuple hash table (against hash flooding) and of its ephemeral ports (RFC
    /// 6056 3.3.3).
    /// `None` (the default): 64 bits from the operating system's random source at each
    /// [`Context::open`], so sequence numbers cannot be predicted from the address and two
    /// processes on one address do not start from the same ephemeral port (the second then
    /// met the first's connection, still closing at the server, on the same 4-tuple). Set
    /// it only for reproducible runs.
    pub random_seed: Option<u64>,
}

impl Config {
    /// A configuration with defaults: /24 network, no gateway, one unpinned core.
    pub fn new(device: Device, ip: impl Into<Ipv4Addr>) -> Config {
        Config {
            device,
            ip: ip.into(),
            prefix_len: 24,
            gateway: None,
            mac: None,
            cpus: Vec::new(),
            engine: EngineConfig::default(),
            drive: Drive::default(),
            random_seed: None,
        }
    }
}

/// The seed of a context's TCP secrets ([`Config::random_seed`]): the one given, or 64
/// bits from the operating system's random source.
fn stack_seed(given: Option<u64>) -> Result<u64, Error> {
    match given {
        Some(seed) => Ok(seed),
        None => getrandom::u64().map_err(|e| Error::Random(e.to_string())),
    }
}

/// The instant `timeout` from now; `None` (no deadline: wait until it happens) for a
/// timeout beyond what an `Instant` holds, such as `Duration::MAX`, where `now + timeout`
/// panicked.
pub(crate) fn deadline_after(timeout: Duration) -> Option<StdInstant> {
    StdInstant::now().checked_add(timeout)
}

#[derive(Debug)]
struct Inner {
    cores: Vec<CoreHandle>,
    mrs: Arc<MrTable>,
    /// The next protection domain number. 64 bits, so that it never wraps: the numbers
    /// above `u32::MAX` (the engine's [`PdId`]) are refused ([`Context::try_alloc_pd`])
    /// instead of coming back as the numbers of domains that still live.
    next_pd: AtomicU64,
    next_core: AtomicUsize,
    events: Mutex<VecDeque<CmEvent>>,
    /// The doorbell every core rings when it hands over events (once an event channel
    /// exists).
    event_bell: Mutex<Option<Arc<warpcore_engine::doorbell::Doorbell>>>,
    /// The completion queues this context made, by identifier (unique in the process):
    /// a queue pair completes only into these ([`ProtectionDomain::create_qp`]).
    cqs: Mutex<weak_map::WeakById<warpcore_engine::CompletionQueue>>,
    cfg: EngineConfig,
    /// The port: address and prefix, MAC, IP MTU.
    port: (Ipv4Addr, u8, [u8; 6], usize),
}

/// An open engine: its cores, its memory region table and its connection manager.
/// Cloning is cheap (a shared handle); the engine stops when the last clone and every
/// object created from it are dropped.
#[derive(Debug, Clone)]
pub struct Context {
    inner: Arc<Inner>,
}

/// The cores' clock: `std::time::Instant`, interpolated by the TSC where the kernel keeps
/// time with it (a core then reads the TSC every loop and the clock once a millisecond;
/// `warpcore_engine::clock` explains the bounds). `WARPCORE_CLOCK=system` turns the TSC
/// off: every loop reads `Instant::now`.
fn core_clock() -> Clock {
    let clock = Clock::new(StdInstant::now);
    #[cfg(feature = "dpdk")]
    {
        use warpcore_engine::tcp::dpdk_sys;
        let off = std::env::var("WARPCORE_CLOCK").is_ok_and(|v| v == "system");
        if !off && dpdk_sys::tsc_is_clock_source() {
            return clock.with_counter(dpdk_sys::tsc_cycles);
        }
    }
    clock
}

fn to_smol(ip: Ipv4Addr) -> Ipv4Address {
    let o = ip.octets();
    Ipv4Address::new(o[0], o[1], o[2], o[3])
}

impl Context {
    /// Whether `other` is this context (a clone of it), not another one: handles name
    /// objects of one context's tables.
    pub(crate) fn same(&self, other: &Context) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Opens the device and starts the engine cores.
    pub fn open(cfg: Config) -> Result<Context, Error> {
        cfg.engine.validate().map_err(Error::Config)?;
        // smoltcp's `Ipv4Cidr::new` asserts it: refused here, named, instead of a panic.
        if cfg.prefix_len > 32 {
            return Err(Error::Config(ConfigError {
                field: "prefix_len",
                reason: "must be at most 32 (an IPv4 prefix)",
            }));
        }
        let o = cfg.ip.octets();
        #[allow(unused_mut)]
        let mut stack = StackConfig {
            mac: cfg.mac.unwrap_or([0x02, 0x57, o[0], o[1], o[2], o[3]]),
            ip: Ipv4Cidr::new(to_smol(cfg.ip), cfg.prefix_len),
            gateway: cfg.gateway.map(to_smol),
            routes: Vec::new(),
            random_seed: stack_seed(cfg.random_seed)?,
            max_connections: cfg.engine.max_connections,
            out_of_order_budget_bytes: cfg.engine.tcp_out_of_order_budget_bytes,
        };
        let mrs = Arc::new(MrTable::new(cfg.engine.mr_table_capacity));
        let clock = core_clock();
        let mut cores = Vec::new();
        // The device's MTU: each device below sets it.
        let mtu: usize;
        let check_cpus = |cores: usize| check_cpus(&cfg.cpus, cores);
        match cfg.device {
            Device::Link(end) => {
                check_cpus(1)?;
                // The link's MTU governs, as a DPDK port's does: the TCP takes its MSS from
                // the device, and the engine its first MULPDU and the port's reported MTU
                // from `EngineConfig::mtu`, which would otherwise say what the link does not.
                let mut engine = cfg.engine.clone();
                engine.mtu = end.mtu();
                mtu = end.mtu();
                engine.validate().map_err(Error::Config)?;
                let spec = CoreSpec {
                    device: Box::new(move || Ok(end)),
                    stack: stack.clone(),
                    cpu: cfg.cpus.first().copied(),
                    drive: cfg.drive,
                };
                cores.push(spawn_core(0, spec, engine, Arc::clone(&mrs), clock)?);
            }
            #[cfg(feature = "dpdk")]
            Device::Dpdk(port) => {
                if cfg.mac.is_none() {
                    stack.mac = port.mac;
                }
                let mut engine = cfg.engine.clone();
                engine.mtu = port.mtu;
                mtu = port.mtu;
                let devices = port.into_devices();
                check_cpus(devices.len())?;
                for (i, dev) in devices.into_iter().enumerate() {
                    let mut sc = stack.clone();
                    sc.random_seed ^= i as u64 * 0x9E37_79B9;
                    let spec = CoreSpec {
                        device: Box::new(move || Ok(dev)),
                        stack: sc,
                        cpu: cfg.cpus.get(i).copied(),
                        drive: cfg.drive,
                    };
                    cores.push(spawn_core(
                        i as u16,
                        spec,
                        engine.clone(),
                        Arc::clone(&mrs),
                        clock.clone(),
                    )?);
                }
            }
        }
        Ok(Context {
            inner: Arc::new(Inner {
                cores,
                mrs,
                next_pd: AtomicU64::new(1),
                next_core: AtomicUsize::new(0),
                events: Mutex::new(VecDeque::new()),
                event_bell: Mutex::new(None),
                cqs: Mutex::default(),
                cfg: cfg.engine,
                port: (cfg.ip, cfg.prefix_len, stack.mac, mtu),
            }),
        })
    }

    /// The device's attributes (`ibv_query_device`): an iWARP device and the limits of
    /// this context's engine configuration.
    pub fn query_device(&self) -> DeviceAttr {
        let c = &self.inner.cfg;
        DeviceAttr {
            name: "warpcore0",
            transport: Transport::Iwarp,
            node_guid: attr::eui64(self.inner.port.2),
            max_qp: c.max_qps * self.inner.cores.len(),
            max_qp_wr: c.max_sq_depth.min(c.max_rq_depth),
            max_sge: c.max_sge,
            max_cqe: c.max_cq_depth,
            max_mr: c.mr_table_capacity,
            max_qp_rd_atom: c.max_ird,
            max_qp_init_rd_atom: c.max_ord,
            atomic_cap: AtomicCap::Device,
            phys_port_cnt: 1,
        }
    }

    /// The attributes of port `port` (`ibv_query_port`; a device has one port, 1): its
    /// state, MTU and one GID, the IPv4-mapped form of its address. [`Error::NoSuchPort`]
    /// for any other number.
    pub fn query_port(&self, port: u8) -> Result<PortAttr, Error> {
        if port != 1 {
            return Err(Error::NoSuchPort(port));
        }
        let (ip, len, mac, mtu) = self.inner.port;
        Ok(PortAttr {
            state: PortState::Active,
            mtu,
            active_mtu: attr::ib_mtu(mtu),
            gid: attr::ipv4_gid(ip),
            gid_tbl_len: 1,
            addr: (ip, len),
            mac,
        })
    }

    /// Whether the application's threads run the engine cores ([`Drive::Caller`]).
    pub fn caller_driven(&self) -> bool {
        self.inner.cores.iter().any(CoreHandle::caller_driven)
    }

    /// Whether this context's cores all stopped for good (a caller-driven one's loop
    /// panicked, a core thread ended): nothing runs them again ([`polled::Driver::gone`]).
    pub(crate) fn cores_gone(&self) -> bool {
        self.inner.cores.iter().all(CoreHandle::gone)
    }

    /// Number of engine cores.
    pub fn cores(&self) -> usize {
        self.inner.cores.len()
    }

    fn call<T>(&self, core: usize, f: impl FnOnce(Reply<T>) -> Command) -> Result<T, Error> {
        let (tx, rx) = crossbeam::channel::bounded(1);
        let handle = self.inner.cores.get(core).ok_or(Error::StaleHandle)?;
        handle.submit(f(tx))?;
        polled::wait_reply(handle, &rx)?.map_err(Error::from)
    }

    /// Runs one loop of every caller-driven engine core on this thread ([`Drive::Caller`])
    /// and returns whether any did work; does nothing for cores with their own threads.
    /// Completion-queue polls, event waits and control calls call it themselves; call it
    /// when waiting otherwise (e.g. spinning on a word an RDMA Write will change).
    pub fn progress(&self) -> bool {
        polled::progress(&self.inner.cores)
    }

    /// Runs loops of the caller-driven engine cores on this thread until `done` returns
    /// true, asking it after each loop, at most `max_loops` loops; returns whether it did.
    /// For a thread that spins on a word an RDMA Write will change (perftest's write_lat
    /// does): a lone core is held across the loops and its idle loops skip most clock
    /// reads, so an arriving frame is noticed sooner than by [`Context::progress`] in a
    /// loop. `done` must be a quick test: nothing runs the cores while it runs. With
    /// several caller-driven cores each loop runs all of them; with none (cores on their
    /// own threads) it only asks `done`, once.
    pub fn progress_until(&self, max_loops: u32, mut done: impl FnMut() -> bool) -> bool {
        polled::progress_until(&self.inner.cores, max_loops, &mut done)
    }

    /// A new protection domain.
    ///
    /// # Panics
    /// When every protection domain number of this context has been given out
    /// ([`Error::PdNumbersExhausted`], after `u32::MAX` domains): use
    /// [`Context::try_alloc_pd`] to get the error instead.
    pub fn alloc_pd(&self) -> ProtectionDomain {
        match self.try_alloc_pd() {
            Ok(pd) => pd,
            Err(e) => panic!("Context::alloc_pd: {e}"),
        }
    }

    /// A new protection domain, or [`Error::PdNumbersExhausted`] once this context has
    /// given out every number the engine has for one (`u32::MAX` of them; numbers are never
    /// reused, since a dropped domain's memory regions, windows and queues may still live).
    /// The engine tells domains apart by their number alone (DDP-8.2-1, RDMAP-8.1.1-2): a
    /// number handed out twice would let a queue pair of the second domain use the first
    /// one's regions, windows and shared receive queues.
    pub fn try_alloc_pd(&self) -> Result<ProtectionDomain, Error> {
        // A 64-bit counter cannot wrap back to numbers in use (2^64 calls), so every call
        // past the end is refused, however many there are.
        let n = self.inner.next_pd.fetch_add(1, Ordering::Relaxed);
        let id = u32::try_from(n).map_err(|_| Error::PdNumbersExhausted)?;
        Ok(ProtectionDomain {
            ctx: self.clone(),
            id: PdId(id),
        })
    }

    /// A completion channel (`ibv_create_comp_channel`): completion queues created with
    /// [`Context::create_cq_with_channel`] signal it when armed, so a thread can sleep until
    /// a completion arrives. On a caller-driven context ([`Drive::Caller`]) the thread
    /// waiting in [`CompletionChannel::get_event`] runs the cores while it waits (a thread
    /// that `poll()`s the descriptor instead must see that something else runs them).
    pub fn create_comp_channel(&self) -> Result<CompletionChannel, Error> {
        CompletionChannel::new(self.clone())
    }

    /// A completion queue of `depth` entries that signals `channel` when armed
    /// ([`CompletionQueue::req_notify`]). A channel of another context is
    /// [`Error::StaleHandle`] (its waits would run the other context's cores).
    pub fn create_cq_with_channel(
        &self,
        depth: usize,
        channel: &CompletionChannel,
    ) -> Result<CompletionQueue, Error> {
        if !self.same(channel.context()) {
            return Err(Error::StaleHandle);
        }
        if depth == 0 || depth > self.inner.cfg.max_cq_depth {
            return Err(Error::LimitExceeded("cq depth"));
        }
        // The engine's own bound (MAX_QUEUE_DEPTH) holds the configured one.
        let cq = channel
            .new_cq(depth)
            .map_err(|_| Error::LimitExceeded("cq depth"))?;
        self.own_cq(&cq);
        Ok(CompletionQueue {
            cq,
            driver: polled::Driver::of(self),
        })
    }

    /// A completion queue of `depth` entries.
    pub fn create_cq(&self, depth: usize) -> Result<CompletionQueue, Error> {
        if depth == 0 || depth > self.inner.cfg.max_cq_depth {
            return Err(Error::LimitExceeded("cq depth"));
        }
        let cq = Arc::new(
            warpcore_engine::CompletionQueue::new(depth)
                .map_err(|_| Error::LimitExceeded("cq depth"))?,
        );
        self.own_cq(&cq);
        Ok(CompletionQueue {
            cq,
            driver: polled::Driver::of(self),
        })
    }

    /// Records `cq` as made by this context (the queues of dropped ones are forgotten in
    /// amortised sweeps, [`weak_map::WeakById`]).
    fn own_cq(&self, cq: &Arc<warpcore_engine::CompletionQueue>) {
        self.inner
            .cqs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(cq.id(), cq);
    }

    /// Whether this context made `cq`.
    fn owns_cq(&self, cq: &Arc<warpcore_engine::CompletionQueue>) -> bool {
        self.inner
            .cqs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .holds(cq.id(), cq)
    }

    /// Listens on `port` on every engine core (with RSS, a SYN reaches any of them).
    /// Connection requests arrive as [`CmEvent::ConnectRequest`]. All or nothing: when a
    /// core refuses (e.g. [`StackError::PortInUse`], [`StackError::TableFull`], a full
    /// command queue, [`Error::Timeout`]), the cores that took the listen before it stop
    /// listening again and that core's error is returned, so a failed call leaves no core
    /// answering SYNs to `port` and may be retried, unless an undo cannot be queued (that
    /// core's command queue full: it keeps listening until [`Context::unlisten`]); a core
    /// that does not answer in time still stops when it runs the queued undo, and a core
    /// that is gone answers nothing.
    pub fn listen(&self, port: u16, params: &MpaParams) -> Result<(), Error> {
        for c in 0..self.cores() {
            if let Err(e) = self.call(c, |r| Command::Listen(port, params.clone(), r)) {
                // Undo the cores that listen (a core that timed out unlistens itself when
                // it runs the command and finds nobody waiting for the reply: runtime's
                // `Command::Listen`). Their own errors would hide the one that matters.
                for done in 0..c {
                    let _ = self.call(done, |r| Command::Unlisten(port, r));
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Stops listening on `port` on every engine core: a SYN to it then draws a RST (the
    /// peer's connect fails at once), TCP connections not yet taken up by the engine are
    /// reset, and those in their MPA startup end: one whose MPA Request has arrived gets a
    /// Reply with the Reject bit (the peer sees [`CmEvent::Rejected`]), one without a whole
    /// Request a RST. Requests already reported ([`CmEvent::ConnectRequest`]) stay for
    /// [`Context::accept`] or [`Context::reject`]. [`Error::NotListening`] if no core
    /// listens on it.
    pub fn unlisten(&self, port: u16) -> Result<(), Error> {
        let mut stopped = false;
        let mut first_err = None;
        for c in 0..self.cores() {
            match self.call(c, |r| Command::Unlisten(port, r)) {
                Ok(()) => stopped = true,
                Err(Error::NotListening(_)) => {}
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        match (first_err, stopped) {
            (Some(e), _) => Err(e),
            (None, true) => Ok(()),
            (None, false) => Err(Error::NotListening(port)),
        }
    }

    /// Accepts a connection request on an idle queue pair of this context created on the
    /// request's core ([`QpInit::core`] = `request.request.core`), with our private data.
    /// A queue pair or a request of another context is [`Error::StaleHandle`] (a request
    /// names its engine core, [`RequestId::engine`]: another context's would otherwise
    /// name one of ours, another peer's), as is a request already answered or gone.
    pub fn accept(
        &self,
        request: &ConnectRequest,
        qp: &QueuePair,
        private_data: &[u8],
    ) -> Result<(), Error> {
        self.accept_with_ird_ord(request, qp, private_data, None)
    }

    /// [`Context::accept`] answering with our own IRD and ORD (`Some((ird, ord))`, RFC 6581
    /// §9.1) instead of those of the listener's [`MpaParams`]: the Reply carries our IRD
    /// capped at the initiator's ORD and our ORD capped at its IRD, each also capped at
    /// the engine's `max_ird` / `max_ord` (`rdma_accept`'s `responder_resources` and
    /// `initiator_depth`). A Rev 1 request carries none: they are then our limits as given.
    pub fn accept_with_ird_ord(
        &self,
        request: &ConnectRequest,
        qp: &QueuePair,
        private_data: &[u8],
        ird_ord: Option<(u16, u16)>,
    ) -> Result<(), Error> {
        // Queue pair ids are per core of one context: another context's id would name
        // whichever of ours has the same number.
        if !self.same(&qp.ctx) {
            return Err(Error::StaleHandle);
        }
        if usize::from(request.request.core) != qp.core {
            return Err(Error::WrongCore);
        }
        self.call(qp.core, |reply| Command::Accept {
            req: request.request,
            qp: qp.id,
            private_data: private_data.to_vec(),
            ird_ord,
            reply,
        })
    }

    /// Rejects a connection request with our private data. A request of another context,
    /// or one already answered or gone, is [`Error::StaleHandle`], nothing rejected.
    pub fn reject(&self, request: &ConnectRequest, private_data: &[u8]) -> Result<(), Error> {
        let core = usize::from(request.request.core);
        self.call(core, |r| {
            Command::Reject(request.request, private_data.to_vec(), r)
        })
    }

    /// Resolves the next hop towards `addr` (the address itself on the port's subnet, else
    /// its gateway) with ARP, without connecting: the step of `rdma_resolve_addr` that
    /// finds the peer on the link. Returns at once; [`CmEvent::NeighborResolved`] naming
    /// the returned id follows once the next hop answers (at once if it is known),
    /// [`CmEvent::NeighborFailed`] if it has not within `timeout` (requests repeat every
    /// second, three a round: RFC 1122 2.3.2.1). Runs on core 0 and fills that core's neighbour table only (each core
    /// resolves its connections' next hops itself). Refused: an address without a route
    /// or one no connection could be made to ([`Error::Tcp`] with
    /// [`StackError::NoRoute`] / [`StackError::Unaddressable`]), too many pending
    /// ([`StackError::TooManyResolutions`]).
    pub fn resolve_neighbor(
        &self,
        addr: impl Into<Ipv4Addr>,
        timeout: Duration,
    ) -> Result<NeighborId, Error> {
        let ip = to_smol(addr.into());
        self.call(0, |r| Command::ResolveNeighbor(ip, timeout, r))
    }

    /// The next connection manager event of any core, waiting up to `timeout`
    /// (`Duration::MAX`: until one comes). `None` when none came in time, and at once when
    /// none is queued and the cores stopped for good (a caller-driven loop panicked, a
    /// core thread ended): none can come any more.
    pub fn next_event(&self, timeout: Duration) -> Option<CmEvent> {
        let deadline = deadline_after(timeout);
        let mut spins = 0u32;
        loop {
            self.progress();
            if let Some(e) = self.take_event() {
                return Some(e);
            }
            // Asked after the queue was found empty; an event handed over before the cores
            // went is taken by the look that follows.
            if self.cores_gone() {
                return self.take_event();
            }
            if deadline.is_some_and(|d| StdInstant::now() >= d) {
                return None;
            }
            spins = spins.saturating_add(1);
            if spins < 100 {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// The oldest event any core handed over, without waiting. The cores' rings are
    /// emptied into the context's queue only once it is empty: emptied at every call, an
    /// application taking events more slowly than a peer makes them (each round of
    /// requests that come and go, or of malformed Requests) had the queue grow by up to a
    /// ring's worth per event it took, and the events left in the cores, where a request
    /// that ends withdraws its `ConnectRequest` and refusals are capped, never stayed
    /// there. So the queue holds at most one ring's worth per core.
    pub(crate) fn take_event(&self) -> Option<CmEvent> {
        let mut q = self.inner.events.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = q.pop_front() {
            return Some(e);
        }
        for c in &self.inner.cores {
            while let Some(e) = c.next_event() {
                q.push_back(e);
            }
        }
        q.pop_front()
    }

    /// The connection manager's event channel (`rdma_create_event_channel`): a thread
    /// sleeps in [`EventChannel::get_event`], or `poll()`s its descriptor, until a core
    /// hands over an event, instead of polling [`Context::next_event`]. Every call returns
    /// a handle on the same channel. Refused ([`Error::NeedsEngineThreads`]) on a
    /// caller-driven context.
    pub fn event_channel(&self) -> Result<EventChannel, Error> {
        if self.inner.cores.iter().any(CoreHandle::caller_driven) {
            return Err(Error::NeedsEngineThreads("an event channel"));
        }
        let mut slot = self
            .inner
            .event_bell
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let bell = match slot.as_ref() {
            Some(b) => Arc::clone(b),
            None => {
                let b = Arc::new(warpcore_engine::doorbell::Doorbell::new()?);
                for c in &self.inner.cores {
                    c.set_event_doorbell(Arc::clone(&b));
                }
                // A core that queued an event just before it could see the bell rang
                // nothing, and this thread may not see that event's ring tail yet (a
                // store on each side, then a load of the other's: no order without a
                // fence on both). Rung once here, the first `get_event` takes the ring
                // and looks at the queues again instead of sleeping until the next event.
                b.ring();
                *slot = Some(Arc::clone(&b));
                b
            }
        };
        Ok(EventChannel {
            bell,
            ctx: self.clone(),
        })
    }

    /// Counters of every engine core.
    pub fn stats(&self) -> Result<Vec<CoreStats>, Error> {
        (0..self.cores())
            .map(|c| self.call(c, Command::Stats))
            .collect()
    }
}

/// A protection domain: memory regions and queue pairs of one domain only see each other
/// (DDP-8.2-1, RDMAP-8.1.1-2).
#[derive(Debug, Clone)]
pub struct ProtectionDomain {
    ctx: Context,
    id: PdId,
}

impl ProtectionDomain {
    /// Registers `len` octets of engine-allocated memory (zeroed, page-aligned, on 2 MiB
    /// hugepages when the machine has them) with `access`.
    ///
    /// A `len` above [`Region::max_allocate_len`] (`isize::MAX`, the most a region can
    /// hold, and no more than the machine's memory and swap together, since every page is
    /// touched here) is [`Error::LimitExceeded`]`("mr length")`; memory the system refuses
    /// below that bound is [`Error::Memory`] with [`MemError::AllocFailed`].
    pub fn alloc_mr(&self, len: usize, access: Access) -> Result<MemoryRegion, Error> {
        if len > Region::max_allocate_len() {
            return Err(Error::LimitExceeded("mr length"));
        }
        let r = Region::allocate(len, 4096).map_err(Error::Memory)?;
        self.register(Arc::new(r), access)
    }

    /// Registers application memory handed over as a boxed slice.
    pub fn register_boxed(&self, buf: Box<[u8]>, access: Access) -> Result<MemoryRegion, Error> {
        self.register(Arc::new(Region::from_boxed(buf)), access)
    }

    /// Registers a region (zero-based Tagged Offsets: TO 0 is the region's first octet).
    pub fn register(&self, region: Arc<Region>, access: Access) -> Result<MemoryRegion, Error> {
        self.register_with_base(region, access, 0)
    }

    /// Registers a region at its own virtual address, as `ibv_reg_mr` does: the Tagged
    /// Offset of each octet is its address, at any alignment, so a peer's RDMA Writes,
    /// Reads and atomics and the local SGEs ([`MemoryRegion::sge`] adds the base) name
    /// octets by address. The application's own memory comes in through
    /// [`Region::from_raw`] or [`Region::from_boxed`]. `from_raw`'s contract holds the
    /// memory valid while any `Arc` of the region lives: this registration's until
    /// [`MemoryRegion::deregister`] returns `Ok` (a drop with windows bound or fast
    /// registrations over the region ends it only when the last of them goes), and each
    /// window's or fast registration's until it is unbound or invalidated.
    pub fn register_at_address(
        &self,
        region: Arc<Region>,
        access: Access,
    ) -> Result<MemoryRegion, Error> {
        let base = region.as_ptr() as u64;
        self.register_with_base(region, access, base)
    }

    /// Registers a region whose first octet has Tagged Offset `base_to`, as
    /// `ibv_reg_mr_iova2` does with its `iova`: the peer and the local SGEs name octets by
    /// `base_to` plus their offset.
    pub fn register_with_base(
        &self,
        region: Arc<Region>,
        access: Access,
        base_to: u64,
    ) -> Result<MemoryRegion, Error> {
        let stag = self
            .ctx
            .inner
            .mrs
            .register(Arc::clone(&region), self.id, access, base_to)
            .map_err(Error::Memory)?;
        Ok(MemoryRegion {
            ctx: self.ctx.clone(),
            region,
            stag,
            base_to,
        })
    }

    /// Allocates a memory window (`ibv_alloc_mw`), invalid until bound with
    /// [`QueuePair::post_bind_mw`].
    pub fn alloc_mw(&self, ty: MwType) -> Result<MemoryWindow, Error> {
        let stag = self
            .ctx
            .inner
            .mrs
            .alloc_mw(self.id, ty)
            .map_err(Error::Stag)?;
        Ok(MemoryWindow {
            ctx: self.ctx.clone(),
            ty,
            pd: self.id,
            alloc: stag,
            stag: Mutex::new(stag),
        })
    }

    /// Allocates a fast-registration STag, invalid until made valid with
    /// [`QueuePair::post_fast_reg`].
    pub fn alloc_fast_reg(&self) -> Result<FastRegMr, Error> {
        let stag = self
            .ctx
            .inner
            .mrs
            .alloc_fast_reg(self.id)
            .map_err(Error::Stag)?;
        Ok(FastRegMr {
            ctx: self.ctx.clone(),
            pd: self.id,
            alloc: stag,
            stag: Mutex::new(stag),
        })
    }

    /// A shared receive queue of `depth` buffers of at most `max_sge` SGEs each, for the
    /// queue pairs of this domain created with [`QpInit::with_srq`]. Both are limited by the
    /// engine configuration ([`EngineConfig::max_rq_depth`], [`EngineConfig::max_sge`]), as a
    /// queue pair's are ([`Error::LimitExceeded`]).
    pub fn create_srq(&self, depth: u32, max_sge: u32) -> Result<SharedReceiveQueue, Error> {
        let cfg = &self.ctx.inner.cfg;
        if depth == 0 || depth as usize > cfg.max_rq_depth {
            return Err(Error::LimitExceeded("srq depth"));
        }
        // The configured limit, not MAX_SGE: a queue pair with this queue takes its receives
        // from it, and the configuration bounds every work request's SGEs (`create_qp`).
        if max_sge as usize > cfg.max_sge {
            return Err(Error::LimitExceeded("srq sges"));
        }
        Ok(SharedReceiveQueue {
            ctx: self.ctx.clone(),
            // The engine's own bound (MAX_QUEUE_DEPTH) holds the configured one.
            srq: Arc::new(
                SharedRq::new(self.id, depth, max_sge)
                    .map_err(|_| Error::LimitExceeded("srq depth"))?,
            ),
        })
    }

    /// Creates a reliable-connected queue pair in the idle state. A shared receive queue
    /// ([`QpInit::with_srq`]) must be of this domain ([`Error::Stag`] with
    /// [`MemError::WrongPd`]) and so of this context ([`Error::StaleHandle`]). Depths and
    /// SGEs above the engine configuration's limits, and a [`QpInit::max_inline`] above
    /// [`MAX_INLINE`], are [`Error::LimitExceeded`]. A completion queue of another context
    /// is [`Error::StaleHandle`], as `ibv_create_qp` refuses another device context's CQ:
    /// polls and waits of a caller-driven context's queue run that context's cores only,
    /// so a queue of another context would never see this queue pair's completions (and
    /// its overrun, `CmEvent::CqError`, would be reported by the wrong context).
    pub fn create_qp(&self, init: &QpInit) -> Result<QueuePair, Error> {
        if init.max_inline > MAX_INLINE {
            return Err(Error::LimitExceeded("max_inline"));
        }
        if !(self.ctx.owns_cq(&init.send_cq) && self.ctx.owns_cq(&init.recv_cq)) {
            return Err(Error::StaleHandle);
        }
        if let Some(srq) = &init.srq {
            // Protection domain numbers are per context: another context's domain may have
            // the same number, and its SGEs name another region table.
            if !self.ctx.same(&srq.ctx) {
                return Err(Error::StaleHandle);
            }
            if srq.srq.pd() != self.id {
                return Err(Error::Stag(MemError::WrongPd));
            }
        }
        let n = self.ctx.cores();
        let core = match init.core {
            Some(c) if c < n => c,
            Some(c) => return Err(Error::NoSuchCore { core: c, cores: n }),
            None => self.ctx.inner.next_core.fetch_add(1, Ordering::Relaxed) % n,
        };
        let attr = QpAttr {
            pd: self.id,
            send_cq: Arc::clone(&init.send_cq),
            recv_cq: Arc::clone(&init.recv_cq),
            sq_depth: init.sq_depth,
            rq_depth: init.rq_depth,
            max_sge: init.max_sge,
        };
        // The inline arena: one slot of `max_inline` octets per send queue entry, in this
        // protection domain, registered at the first inline post (an idle queue pair, or
        // one that never posts inline, holds no arena).
        let inline = (init.max_inline > 0).then(|| InlineArena {
            pd: self.clone(),
            slot: init.max_inline as usize,
            slots: init.sq_depth.max(1) as u64,
            state: Mutex::new((0, None)),
        });
        let (id, shared) = self.ctx.call(core, |r| Command::CreateQp(attr, r))?;
        shared.set_rfc7306(init.rfc7306);
        let qp = QueuePair {
            ctx: self.ctx.clone(),
            id,
            shared: Arc::clone(&shared),
            core,
            inline: None,
        };
        // A new QP is idle, so the setting is taken (on failure `qp` drops and destroys it).
        shared.set_sges_checked_at_post(init.sges_checked_at_post)?;
        if let Some(srq) = &init.srq {
            // On failure `qp` drops and destroys the new QP.
            shared.attach_srq(Arc::clone(&srq.srq))?;
        }
        let mut qp = qp;
        qp.inline = inline;
        Ok(qp)
    }
}

/// A memory window (see [`ProtectionDomain::alloc_mw`]): an STag of its own that opens a
/// part of a [`MemoryRegion`] (with [`Access::MW_BIND`]) to the peer, with its own rights
/// and bounds, bound and rebound by Bind work requests on a queue pair, each time under a
/// new key. A type 2 window serves only the queue pair that bound it, and its peer may
/// invalidate it with a Send with Invalidate. Dropping it deallocates it at once, whatever
/// its binds posted so far did or will do: a bind still queued then fails when it runs
/// (its completion says `LocalProtection` and its queue pair goes to the error state).
#[derive(Debug)]
pub struct MemoryWindow {
    ctx: Context,
    ty: MwType,
    pd: PdId,
    /// The STag the allocation returned: what binds name the window by
    /// ([`SendOp::BindMw`]), whatever its key is when they run.
    alloc: Stag,
    /// The STag as of the last bind posted.
    stag: Mutex<Stag>,
}

impl MemoryWindow {
    /// The STag as of the last bind posted (what the peer uses once that bind executed;
    /// a bind that failed when it ran left the window with its previous STag, and the
    /// next bind works all the same).
    pub fn stag(&self) -> u32 {
        self.stag.lock().unwrap_or_else(|e| e.into_inner()).0
    }

    /// The window type.
    pub fn mw_type(&self) -> MwType {
        self.ty
    }

    /// Whether the window is currently bound (valid): false before the first bind, after
    /// an invalidation (local, or remote by a Send with Invalidate) and while a posted
    /// bind has not executed yet.
    pub fn is_bound(&self) -> bool {
        self.ctx.inner.mrs.is_valid(Stag(self.stag()))
    }
}

/// The key of the next bind or fast registration of the window or fast-registration STag
/// allocated as `alloc`, whose last one posted was `posted`: the next one, unless the STag
/// has that key now (possible only after 255 posts that did not run), which a bind or
/// registration must not take again.
fn next_key(ctx: &Context, alloc: Stag, posted: Stag) -> u8 {
    let key = posted.key().wrapping_add(1);
    if ctx
        .inner
        .mrs
        .current_stag(alloc)
        .is_some_and(|c| c.key() == key)
    {
        key.wrapping_add(1)
    } else {
        key
    }
}

impl Drop for MemoryWindow {
    fn drop(&mut self) {
        // By the allocation's STag, whatever key the binds posted so far left or will
        // leave (a bind under way is waited for); binds still queued fail when they run.
        let _ = self.ctx.inner.mrs.deallocate(self.alloc, self.pd);
    }
}

/// A fast-registration STag (see [`ProtectionDomain::alloc_fast_reg`]): made valid over a
/// part of a [`MemoryRegion`] by a Fast-Register work request
/// ([`QueuePair::post_fast_reg`]), each time under a new key, and invalidated by a Local
/// Invalidate or by the peer's Send with Invalidate. Dropping it frees it at once, as a
/// [`MemoryWindow`]'s drop does: a fast registration still queued fails when it runs.
#[derive(Debug)]
pub struct FastRegMr {
    ctx: Context,
    pd: PdId,
    /// The STag the allocation returned: what fast registrations name it by.
    alloc: Stag,
    /// The STag as of the last fast registration posted.
    stag: Mutex<Stag>,
}

impl FastRegMr {
    /// The STag as of the last fast registration posted (one that failed when it ran left
    /// the previous STag; the next one works all the same).
    pub fn stag(&self) -> u32 {
        self.stag.lock().unwrap_or_else(|e| e.into_inner()).0
    }

    /// Whether the STag is currently valid.
    pub fn is_valid(&self) -> bool {
        self.ctx.inner.mrs.is_valid(Stag(self.stag()))
    }
}

impl Drop for FastRegMr {
    fn drop(&mut self) {
        // As `MemoryWindow`'s drop.
        let _ = self.ctx.inner.mrs.deallocate(self.alloc, self.pd);
    }
}

/// A shared receive queue (see [`ProtectionDomain::create_srq`]): queue pairs created with
/// [`QpInit::with_srq`], on any engine cores, take their receive buffers from it; each
/// completion goes to the receiving queue pair's receive completion queue and names it in
/// [`Completion::qp`]. A message that finds it empty is answered like one that finds no
/// posted receive: Terminate "no buffer" (DDP untagged 0x2/0x02), the QP to the error state.
#[derive(Debug, Clone)]
pub struct SharedReceiveQueue {
    ctx: Context,
    srq: Arc<SharedRq>,
}

impl SharedReceiveQueue {
    /// Whether [`SharedReceiveQueue::post_recv`] checks the local keys of a receive's
    /// SGEs (the default: [`Error::SgeInvalidStag`], [`Error::SgeAccess`],
    /// [`Error::SgeOutOfBounds`], nothing queued), or leaves them to the placement of a
    /// message, as [`QpInit::sges_checked_at_post`] does for a queue pair's own receives:
    /// the buffer then completes with [`WcStatus::LocalProtection`] on the queue pair that
    /// took it, which goes to the error state. For the posts that follow.
    pub fn set_sges_checked_at_post(&self, on: bool) {
        self.srq.set_sges_checked_at_post(on);
    }

    /// Posts a receive buffer (checked here: SGEs of this domain with local write, unless
    /// [`SharedReceiveQueue::set_sges_checked_at_post`] turned that off; at most the
    /// queue's SGE count, queue not full).
    pub fn post_recv(&self, wr: &RecvWr) -> Result<(), Error> {
        self.srq.post(&self.ctx.inner.mrs, &wr.0)?;
        Ok(())
    }

    /// Buffers waiting.
    pub fn len(&self) -> usize {
        self.srq.len()
    }

    /// No buffer waiting.
    pub fn is_empty(&self) -> bool {
        self.srq.is_empty()
    }

    /// Depth.
    pub fn depth(&self) -> u32 {
        self.srq.depth()
    }

    /// The most SGEs a receive posted to it may have (what it was created with).
    pub fn max_sge(&self) -> u32 {
        self.srq.max_sge()
    }

    /// Arms the low-water mark (0 disarms): once a message takes a buffer that leaves
    /// fewer than `limit` waiting, the limit is disarmed ([`Self::armed_limit`] turns 0),
    /// [`SharedReceiveQueue::limit_reached`] turns true and the context reports
    /// [`CmEvent::SrqLimitReached`] naming this queue's [`id`](Self::id) (the verbs'
    /// `IBV_EVENT_SRQ_LIMIT_REACHED`), once per arming.
    pub fn arm_limit(&self, limit: u32) -> Result<(), Error> {
        self.srq.arm_limit(limit)?;
        Ok(())
    }

    /// The armed limit, 0 when disarmed (as it is once reached): `ibv_query_srq`'s
    /// `srq_limit`.
    pub fn armed_limit(&self) -> u32 {
        self.srq.armed_limit()
    }

    /// Whether the armed limit was reached since it was last armed.
    pub fn limit_reached(&self) -> bool {
        self.srq.limit_reached()
    }

    /// The queue's identifier, unique in the process: what [`CmEvent::SrqLimitReached`]
    /// names it by.
    pub fn id(&self) -> u64 {
        self.srq.id()
    }
}

/// Registered memory. [`MemoryRegion::deregister`] deregisters it, or says why not;
/// dropping it deregisters it too (waiting until no engine core is placing into it). A drop
/// cannot refuse: if memory windows are bound to the region or fast registrations
/// ([`FastRegMr`]) use its memory, the region's own STag stops working at once and the
/// registration ends when the last of them is invalidated, rebound elsewhere or dropped;
/// until then they still reach the memory.
#[derive(Debug)]
pub struct MemoryRegion {
    ctx: Context,
    region: Arc<Region>,
    /// The STag; `Stag(0)` (which names no slot) once [`MemoryRegion::deregister`] ended
    /// the registration, so that the drop has nothing left to do.
    stag: Stag,
    /// Tagged Offset of the first octet: 0, or its address
    /// ([`ProtectionDomain::register_at_address`]).
    base_to: u64,
}

impl MemoryRegion {
    /// The STag, for the peer (RDMA Write/Read targets) and for local SGEs.
    pub fn stag(&self) -> u32 {
        self.stag.0
    }

    /// Length in octets.
    pub fn len(&self) -> usize {
        self.region.len()
    }

    /// True for an empty region.
    pub fn is_empty(&self) -> bool {
        self.region.is_empty()
    }

    /// The Tagged Offset of the region's first octet: 0 for a zero-based registration, its
    /// address for [`ProtectionDomain::register_at_address`]. A peer adds the octet's
    /// offset to it.
    pub fn base_to(&self) -> u64 {
        self.base_to
    }

    /// The Tagged Offset of the octet at `offset` of the region: [`Self::base_to`] plus
    /// `offset`, or [`MemError::ToWrap`] past 2^64 - 1 (the table checks the range
    /// against the region).
    fn to_of(&self, offset: u64) -> Result<u64, Error> {
        self.base_to
            .checked_add(offset)
            .ok_or(Error::Stag(MemError::ToWrap))
    }

    /// An SGE of `len` octets at `offset` of this region (its Tagged Offset is
    /// [`base_to`](Self::base_to) plus `offset`).
    pub fn sge(&self, offset: u64, len: u32) -> Sge {
        Sge {
            stag: self.stag.0,
            to: self.base_to.wrapping_add(offset),
            len,
        }
    }

    /// Copies `buf.len()` octets out of the region at `offset`.
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Result<(), Error> {
        self.region.read_at(offset, buf).map_err(Error::Memory)
    }

    /// Copies `data` into the region at `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), Error> {
        self.region.write_at(offset, data).map_err(Error::Memory)
    }

    /// The 64-bit word at `offset` (8-aligned) as an atomic: for the target of the peer's
    /// RFC 7306 atomics, or a word only this application writes. Polling a word the peer
    /// writes by RDMA Write or Send is a data race with the engine's plain copies
    /// ([`Region::atomic_u64_at`]); a completion tells that data arrived.
    pub fn atomic_u64(&self, offset: usize) -> Result<&AtomicU64, Error> {
        self.region.atomic_u64_at(offset).map_err(Error::Memory)
    }

    /// Deregisters the region (`ibv_dereg_mr`): from the call on no lookup of its STag
    /// succeeds, and it returns once no engine core is placing into it; then the
    /// registration has ended and (for [`Region::from_raw`] memory) the engine will not
    /// touch the memory again through it. Refused while memory windows are bound to the
    /// region or valid fast registrations use its memory ([`Error::Memory`] with
    /// [`MemError::Busy`], as `ibv_dereg_mr` refuses with `EBUSY`): the handle comes back
    /// unchanged; invalidate or drop them first.
    pub fn deregister(mut self) -> Result<(), (MemoryRegion, Error)> {
        match self.ctx.inner.mrs.deregister(self.stag) {
            Ok(()) => {
                self.stag = Stag(0);
                Ok(())
            }
            Err(e) => Err((self, Error::Memory(e))),
        }
    }

    /// The region's memory as a shared slice.
    ///
    /// # Safety
    /// For as long as the returned slice lives, nothing may write to any octet of the
    /// region ([`Region::as_slice`]'s contract):
    /// - not the engine: it may write any octet at any time while a peer has access (RDMA
    ///   Write, Read Response, Send placement, atomics), also through a memory window bound
    ///   to the region or a fast registration over its memory, whose rights may include
    ///   remote write although the region's own do not. Either no registration over the
    ///   memory allows writes (the region and every window or fast registration over it
    ///   lack [`Access::LOCAL_WRITE`], [`Access::REMOTE_WRITE`] and
    ///   [`Access::REMOTE_ATOMIC`], or they are gone) and no receive or Read sink
    ///   targeting it is outstanding, or the application protocol guarantees that the peer
    ///   is quiescent and nothing local targets it (e.g. after a completion that the peer
    ///   sends only once it stopped writing);
    /// - not the application: no [`MemoryRegion::write`], no store through
    ///   [`MemoryRegion::atomic_u64`], nor any write through another handle or pointer to
    ///   the same memory.
    ///
    /// Otherwise the slice would alias memory being mutated, which is undefined behaviour.
    #[allow(unsafe_code)]
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: the caller's contract (above) is `Region::as_slice`'s: no write to any
        // octet of the region, by the engine or by the application, while the slice lives.
        unsafe { self.region.as_slice() }
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        if self.stag != Stag(0) {
            // With windows bound (or fast registrations over it) the table revokes the
            // STag now and ends the registration when the last of them goes (the drop
            // cannot report a refusal); an error left is a registration gone already.
            let _ = self.ctx.inner.mrs.deregister_or_defer(self.stag);
        }
    }
}

/// Attributes of a new queue pair.
#[derive(Debug, Clone)]
pub struct QpInit {
    /// Completion queue of send work requests.
    pub send_cq: Arc<warpcore_engine::CompletionQueue>,
    /// Completion queue of receive work requests.
    pub recv_cq: Arc<warpcore_engine::CompletionQueue>,
    /// Send queue depth.
    pub sq_depth: u32,
    /// Receive queue depth.
    pub rq_depth: u32,
    /// SGEs per work request (at most [`MAX_SGE`]).
    pub max_sge: u32,
    /// Engine core to create it on (`None`: round robin), below [`Context::cores`]
    /// ([`Error::NoSuchCore`] otherwise). A passive side must use the connection
    /// request's core.
    pub core: Option<usize>,
    /// Use RFC 7306 (atomics, Write with Immediate, Immediate Data) on this connection.
    /// MPA has no bit for it, so both sides must agree out of band (EXT-1.1-1). On by
    /// default (Warpcore peers); turn it off towards siw: then posting an RFC 7306
    /// operation fails with [`Error::NotSupported`] and an inbound RFC 7306 message is
    /// answered with Terminate 0/2/06.
    pub rfc7306: bool,
    /// Largest inline payload ([`QueuePair::post_send_inline`]), at most [`MAX_INLINE`]; the
    /// queue pair registers `sq_depth * max_inline` octets for it at its first inline post
    /// in RTS (a post refused for the state registers nothing; 0: no inline sends). A
    /// limit of its own beside [`QpInit::max_sge`], as `max_inline_data` is beside
    /// `max_send_sge`: an inline post names no SGE of the caller's, so a queue pair with
    /// `max_sge` 0 still sends inline.
    pub max_inline: u32,
    /// The shared receive queue to take receive buffers from (`None`: the QP's own receive
    /// queue of `rq_depth`). Its queue pairs may be on any engine cores.
    pub srq: Option<SharedReceiveQueue>,
    /// Check the local SGEs of each work request when it is posted (the default): a key
    /// that names no region of this protection domain ([`Error::SgeInvalidStag`]), a region
    /// without the access the operation needs ([`Error::SgeAccess`]) or a range outside it
    /// ([`Error::SgeOutOfBounds`]) is refused then, and nothing is queued. `false` posts
    /// such a request and fails it when it runs, as rdma-core's providers do (the drop-in
    /// libibverbs sets it): a send queue request before anything of it is sent, a receive
    /// when a message is placed into it; it completes with [`WcStatus::LocalProtection`],
    /// the peer gets a local catastrophic Terminate and the queue pair goes to the error
    /// state, the requests behind it flushed; an SGE of no octets is then passed over, as
    /// the providers pass it. Memory is looked up and bounds-checked where it is touched
    /// either way. With the check, a send request naming the new STag of a fast
    /// registration posted before it ([`QueuePair::post_fast_reg`]) that has not run yet is
    /// refused ([`Error::SgeInvalidStag`]: the key is not valid yet); to post the two
    /// together, as an `IBV_WR_REG_MR` then `IBV_WR_SEND` chain, turn it off (the drop-in
    /// library does): the send request's keys are then checked when it starts, after the
    /// registration ran.
    pub sges_checked_at_post: bool,
}

impl QpInit {
    /// Depth 64 both ways, [`MAX_SGE`] SGEs, any core.
    pub fn new(send_cq: &CompletionQueue, recv_cq: &CompletionQueue) -> QpInit {
        QpInit {
            send_cq: Arc::clone(&send_cq.cq),
            recv_cq: Arc::clone(&recv_cq.cq),
            sq_depth: 64,
            rq_depth: 64,
            max_sge: MAX_SGE as u32,
            core: None,
            rfc7306: true,
            max_inline: 256,
            srq: None,
            sges_checked_at_post: true,
        }
    }

    /// The same, taking receive buffers from `srq` (then [`QueuePair::post_recv`] is
    /// refused with [`Error::UsesSrq`]).
    pub fn with_srq(mut self, srq: &SharedReceiveQueue) -> QpInit {
        self.srq = Some(srq.clone());
        self
    }
}

/// A send work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWr(warpcore_engine::SendWr);

impl SendWr {
    /// A signalled request; fails with [`Error::TooManySges`] beyond [`MAX_SGE`].
    pub fn new(wr_id: u64, op: SendOp, sges: &[Sge]) -> Result<SendWr, Error> {
        // Not `ok_or(Error::TooManySges)`: that `Error`, built eagerly, would be dropped
        // (a call of its drop glue) on every successful build.
        let Some(sges) = warpcore_engine::SgeList::from_slice(sges) else {
            return Err(Error::TooManySges);
        };
        Ok(SendWr(warpcore_engine::SendWr {
            wr_id,
            op,
            sges,
            signaled: true,
            fence: false,
        }))
    }

    /// Fences the request: it starts only after every earlier RDMA Read of the queue pair
    /// completed (RDMAP-5.5-5 gives no implicit fence).
    pub fn fenced(mut self) -> SendWr {
        self.0.fence = true;
        self
    }

    /// Makes the request unsignalled: no completion on success (errors still complete).
    pub fn unsignaled(mut self) -> SendWr {
        self.0.signaled = false;
        self
    }

    /// [`SendWr::unsignaled`] unless `signaled`, [`SendWr::fenced`] if `fenced`.
    fn flagged(mut self, signaled: bool, fenced: bool) -> SendWr {
        self.0.signaled = signaled;
        self.0.fence |= fenced;
        self
    }
}

/// Why [`QueuePair::post_send_list`] stopped: the requests before index `posted` were
/// posted, the one at `posted` was refused with `error`, the rest were not tried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("work request {posted} of the list refused: {error}")]
pub struct PostListError {
    /// How many requests (from the start of the list) were posted.
    pub posted: usize,
    /// Why the next one was not.
    #[source]
    pub error: Error,
}

/// A receive work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvWr(warpcore_engine::RecvWr);

impl RecvWr {
    /// A receive buffer made of `sges`, filled in order.
    pub fn new(wr_id: u64, sges: &[Sge]) -> Result<RecvWr, Error> {
        // As in `SendWr::new`.
        let Some(sges) = warpcore_engine::SgeList::from_slice(sges) else {
            return Err(Error::TooManySges);
        };
        Ok(RecvWr(warpcore_engine::RecvWr { wr_id, sges }))
    }
}

/// A reliable-connected queue pair. Dropping it aborts its connection and flushes it (the
/// drop waits for room in the core's command queue if it is full).
#[derive(Debug)]
pub struct QueuePair {
    ctx: Context,
    id: QpId,
    shared: Arc<QpShared>,
    core: usize,
    inline: Option<InlineArena>,
}

/// Registered memory holding inline payloads: slot `k % slots` belongs to the k-th inline
/// request. A slot is overwritten only after its send queue slot was reserved again, and
/// since requests retire in order and at most `slots` are outstanding, its previous request
/// has retired (its data was gathered) by then.
#[derive(Debug)]
struct InlineArena {
    pd: ProtectionDomain,
    slot: usize,
    slots: u64,
    /// Inline requests queued so far, and the arena's memory once the first one came;
    /// held while one is reserved, copied and queued so that slot order is queue order.
    state: Mutex<(u64, Option<MemoryRegion>)>,
}

impl QueuePair {
    /// The engine's handle (events carry it).
    pub fn id(&self) -> QpId {
        self.id
    }

    /// The engine core that owns it.
    pub fn core(&self) -> usize {
        self.core
    }

    /// The current state.
    pub fn state(&self) -> QpState {
        self.shared.state()
    }

    /// Connects to `addr:port` as MPA initiator with `private_data`.
    /// [`CmEvent::Established`], [`CmEvent::Rejected`] or [`CmEvent::Error`] follows.
    /// Port 0 is refused with [`Error::Tcp`] holding [`StackError::InvalidArgument`]
    /// naming the remote port; an address no connection can be made to (ours, loopback,
    /// broadcast, multicast, ...) with [`StackError::Unaddressable`] naming it.
    pub fn connect(
        &self,
        addr: impl Into<Ipv4Addr>,
        port: u16,
        params: &MpaParams,
        private_data: &[u8],
    ) -> Result<(), Error> {
        self.connect_with(addr.into(), port, None, params, private_data)
    }

    /// [`QueuePair::connect`] from local port `local_port` instead of an ephemeral port
    /// the TCP chooses (as a socket bound before its `connect`, or an rdma_cm id bound
    /// before `rdma_connect`). A port whose 4-tuple with `addr:port` is in use on the
    /// QP's engine core (a connection, one in TIME-WAIT included), or port 0, is refused
    /// with [`Error::Tcp`] holding [`StackError::PortInUse`]
    /// naming the port; nothing changes and the QP may connect again. The port is
    /// checked on the QP's core only: with several cores, keeping the ports of one
    /// process apart is the caller's part.
    pub fn connect_from(
        &self,
        local_port: u16,
        addr: impl Into<Ipv4Addr>,
        port: u16,
        params: &MpaParams,
        private_data: &[u8],
    ) -> Result<(), Error> {
        self.connect_with(addr.into(), port, Some(local_port), params, private_data)
    }

    fn connect_with(
        &self,
        addr: Ipv4Addr,
        port: u16,
        local_port: Option<u16>,
        params: &MpaParams,
        private_data: &[u8],
    ) -> Result<(), Error> {
        let remote = (to_smol(addr), port);
        self.ctx.call(self.core, |reply| Command::Connect {
            qp: self.id,
            remote,
            local_port,
            params: params.clone(),
            private_data: private_data.to_vec(),
            reply,
        })
    }

    /// Posts a send work request. Checked here, on the calling thread: state RTS, SGEs
    /// inside regions of this protection domain with the needed access (unless
    /// [`QpInit::sges_checked_at_post`] was off: then when the request runs), queue not
    /// full.
    pub fn post_send(&self, wr: &SendWr) -> Result<(), Error> {
        validate_send(&self.shared, &self.ctx.inner.mrs, &wr.0)?;
        let h = &self.ctx.inner.cores[self.core];
        h.post_send(self.id, &wr.0).inspect_err(|_| {
            self.shared.release_sq();
        })?;
        Ok(())
    }

    /// Queues a send request, named `wr_id`, that completes with [`WcStatus::FlushErr`]
    /// behind every request posted before it: what `ibv_post_send(3)` does on a queue
    /// pair that is closing or failed, where [`QueuePair::post_send`] refuses with
    /// [`Error::InvalidState`]. It goes through the engine core as a post does, so its
    /// completion never overtakes those of requests still draining (a graceful close) or
    /// still on their way to the core. Nothing is sent. [`Error::InvalidState`] in any
    /// other state, [`Error::QueueFull`] when the send queue is full.
    pub fn post_send_flushed(&self, wr_id: u64) -> Result<(), Error> {
        warpcore_engine::reserve_flushed_send(&self.shared)?;
        // A request the core flushes because the QP is not in RTS (`post_send_reserved`),
        // whatever it is: a Send of nothing, signalled (error completions always are).
        let wr = SendWr::new(wr_id, SendOp::Send, &[])?;
        let h = &self.ctx.inner.cores[self.core];
        h.post_send(self.id, &wr.0).inspect_err(|_| {
            self.shared.release_sq();
        })?;
        Ok(())
    }

    /// Posts a list of send work requests at once (`ibv_post_send` with a chained list):
    /// each is checked as [`QueuePair::post_send`] checks one, and they are queued to the
    /// engine core in order under one lock with one wake-up. The requests before the first
    /// that fails are posted; [`PostListError`] says how many and why the next failed.
    pub fn post_send_list(&self, wrs: &[SendWr]) -> Result<(), PostListError> {
        let mut cmds = Vec::with_capacity(wrs.len());
        let mut refused = None;
        for wr in wrs {
            match validate_send(&self.shared, &self.ctx.inner.mrs, &wr.0) {
                Ok(()) => cmds.push(Command::PostSend(self.id, wr.0)),
                Err(e) => {
                    refused = Some(Error::from(e));
                    break;
                }
            }
        }
        let valid = cmds.len();
        let h = &self.ctx.inner.cores[self.core];
        if let Err((queued, e)) = h.submit_all(cmds) {
            for _ in queued..valid {
                self.shared.release_sq();
            }
            return Err(PostListError {
                posted: queued,
                error: e.into(),
            });
        }
        match refused {
            Some(error) => Err(PostListError {
                posted: valid,
                error,
            }),
            None => Ok(()),
        }
    }

    /// Posts a signalled Send, Write, Write with Immediate or Immediate whose payload is
    /// `data`, copied now into the queue pair's inline arena: the caller may reuse `data`
    /// (and need not register it) as soon as this returns. At most
    /// [`QpInit::max_inline`] octets ([`Error::LimitExceeded`] beyond); Reads and atomics
    /// take no inline data, nor do binds, fast registrations and Local Invalidates, and
    /// Immediate Data takes none but an empty `data` ([`Error::InvalidInline`]).
    pub fn post_send_inline(&self, wr_id: u64, op: SendOp, data: &[u8]) -> Result<(), Error> {
        self.post_send_inline_with(wr_id, op, data, true, false)
    }

    /// [`QueuePair::post_send_inline`] with the flags of [`SendWr::unsignaled`] (when
    /// `signaled` is false) and [`SendWr::fenced`].
    pub fn post_send_inline_with(
        &self,
        wr_id: u64,
        op: SendOp,
        data: &[u8],
        signaled: bool,
        fenced: bool,
    ) -> Result<(), Error> {
        let Some(a) = self.inline.as_ref() else {
            return Err(Error::LimitExceeded("inline data"));
        };
        if data.len() > a.slot {
            return Err(Error::LimitExceeded("inline data"));
        }
        // Immediate Data carries no payload (EXT-6.3-2): octets for it would be dropped.
        let no_payload = matches!(op, SendOp::Immediate { .. }) && !data.is_empty();
        if matches!(op, SendOp::Read { .. }) || op.is_atomic() || op.is_local() || no_payload {
            return Err(Error::InvalidInline);
        }
        let mut state = a.state.lock().unwrap_or_else(|e| e.into_inner());
        // A queue pair not in RTS refuses the post (`validate_send_inline` asks again):
        // refused before the arena is registered, so that a refused call changes nothing
        // and an idle queue pair holds no arena.
        let st = self.shared.state();
        if state.1.is_none() && st != QpState::Rts {
            return Err(Error::InvalidState(st));
        }
        if state.1.is_none() {
            // The first inline post registers the arena (a full region table is this
            // post's typed error).
            let len = a.slot * a.slots as usize;
            state.1 = Some(a.pd.alloc_mr(len, Access::LOCAL_WRITE)?);
        }
        let (next, arena) = &mut *state;
        let Some(mr) = arena.as_ref() else {
            // Registered just above; never taken.
            return Err(Error::LimitExceeded("inline data"));
        };
        let off = (*next % a.slots) as usize * a.slot;
        let sges = if data.is_empty() || matches!(op, SendOp::Immediate { .. }) {
            Vec::new()
        } else {
            vec![mr.sge(off as u64, data.len() as u32)]
        };
        let mut wr = SendWr::new(wr_id, op, &sges)?;
        if !signaled {
            wr = wr.unsignaled();
        }
        if fenced {
            wr = wr.fenced();
        }
        // Reserve first: only then is the slot's previous request known to be retired.
        // The arena's SGE is not the caller's: not counted against `max_sge` (a queue
        // pair may send inline only, `max_sge` 0), as `max_inline_data` is a cap of its own.
        warpcore_engine::validate_send_inline(&self.shared, &self.ctx.inner.mrs, &wr.0)?;
        if !sges.is_empty() {
            if let Err(e) = mr.write(off, data) {
                self.shared.release_sq();
                return Err(e);
            }
        }
        let h = &self.ctx.inner.cores[self.core];
        h.post_send(self.id, &wr.0).inspect_err(|_| {
            self.shared.release_sq();
        })?;
        *next += 1;
        Ok(())
    }

    /// Posts a Bind work request ([`SendOp::BindMw`]): when it executes, in send queue
    /// order, `mw` opens `len` octets at `offset` of `mr` (which needs
    /// [`Access::MW_BIND`]; write and atomic rights need [`Access::LOCAL_WRITE`] on it)
    /// with `access` (remote rights only), under a new key; a type 2 window is bound to
    /// this queue pair. The window uses the region's Tagged Offsets: the peer names its
    /// first octet [`mr.base_to()`](MemoryRegion::base_to) `+ offset` (`offset` itself
    /// for a zero-based region, the octet's address for
    /// [`ProtectionDomain::register_at_address`]). Returns the window's new STag (also
    /// [`MemoryWindow::stag`]), which a request posted after this one may advertise.
    /// Checked here: typed [`Error::Stag`] errors for the wrong kind or domain, rights,
    /// bounds, a Tagged Offset past 2^64 - 1 ([`MemError::ToWrap`]); a window or region of
    /// another context is [`Error::StaleHandle`].
    pub fn post_bind_mw(
        &self,
        wr_id: u64,
        mw: &MemoryWindow,
        mr: &MemoryRegion,
        offset: u64,
        len: u64,
        access: Access,
    ) -> Result<u32, Error> {
        self.post_bind_mw_with(wr_id, mw, mr, offset, len, access, true, false)
    }

    /// [`QueuePair::post_bind_mw`] with the flags of [`SendWr::unsignaled`] (when
    /// `signaled` is false) and [`SendWr::fenced`].
    #[allow(clippy::too_many_arguments)]
    pub fn post_bind_mw_with(
        &self,
        wr_id: u64,
        mw: &MemoryWindow,
        mr: &MemoryRegion,
        offset: u64,
        len: u64,
        access: Access,
        signaled: bool,
        fenced: bool,
    ) -> Result<u32, Error> {
        self.post_bind_mw_with_key(wr_id, mw, mr, offset, len, access, None, signaled, fenced)
    }

    /// [`QueuePair::post_bind_mw_with`] under the key `key` (`Some`: the low eight bits of
    /// the new STag the caller chose, as `IBV_WR_BIND_MW`'s `rkey`: the verbs leave the key
    /// to the consumer, who advances it with `ibv_inc_rkey` from the rkey it holds; `None`:
    /// the key after the last bind posted). The key the window has when the bind runs is
    /// refused then ([`MemError::SameKey`]: the completion's status is
    /// [`WcStatus::MwBind`], the QP's error event names the cause), not at post: the binds
    /// queued before this one may change the window's key first.
    #[allow(clippy::too_many_arguments)]
    pub fn post_bind_mw_with_key(
        &self,
        wr_id: u64,
        mw: &MemoryWindow,
        mr: &MemoryRegion,
        offset: u64,
        len: u64,
        access: Access,
        key: Option<u8>,
        signaled: bool,
        fenced: bool,
    ) -> Result<u32, Error> {
        // STags are per context: another context's would name whichever window or region
        // of ours has the same index (and most often fail later on its key).
        if !self.ctx.same(&mw.ctx) || !self.ctx.same(&mr.ctx) {
            return Err(Error::StaleHandle);
        }
        let mut cur = mw.stag.lock().unwrap_or_else(|e| e.into_inner());
        // The bind names the window as allocated, not by the key the binds before it will
        // have left (one may fail): a failed bind cannot make the next one name a key the
        // window never gets.
        let new_key = key.unwrap_or_else(|| next_key(&self.ctx, mw.alloc, *cur));
        let op = SendOp::BindMw {
            mw: mw.alloc.0,
            new_key,
            mr: mr.stag.0,
            to: mr.to_of(offset)?,
            len,
            access,
        };
        self.post_send(&SendWr::new(wr_id, op, &[])?.flagged(signaled, fenced))?;
        *cur = Stag::new(cur.index(), new_key);
        Ok(cur.0)
    }

    /// Posts a Fast-Register work request ([`SendOp::FastReg`]): when it executes, the
    /// (invalid) STag of `fr` becomes valid under a new key over `len` octets at `offset`
    /// of `mr` (whatever the region's own Tagged Offsets), zero-based (TO 0 is the octet at
    /// `offset`), with `access`. Returns the new STag (also [`FastRegMr::stag`]). A
    /// registration or region of another context is [`Error::StaleHandle`].
    pub fn post_fast_reg(
        &self,
        wr_id: u64,
        fr: &FastRegMr,
        mr: &MemoryRegion,
        offset: u64,
        len: u64,
        access: Access,
    ) -> Result<u32, Error> {
        // As in `post_bind_mw`: STags are per context.
        if !self.ctx.same(&fr.ctx) || !self.ctx.same(&mr.ctx) {
            return Err(Error::StaleHandle);
        }
        let mut cur = fr.stag.lock().unwrap_or_else(|e| e.into_inner());
        // Named as allocated, as in `post_bind_mw`.
        let new_key = next_key(&self.ctx, fr.alloc, *cur);
        let op = SendOp::FastReg {
            stag: fr.alloc.0,
            new_key,
            mr: mr.stag.0,
            mr_to: mr.to_of(offset)?,
            len,
            base_to: 0,
            access,
        };
        self.post_send(&SendWr::new(wr_id, op, &[])?)?;
        *cur = Stag::new(cur.index(), new_key);
        Ok(cur.0)
    }

    /// Posts a Local Invalidate of `stag` (a window, fast registration or region of this
    /// domain), executed in send queue order ([`SendOp::LocalInvalidate`]); `fenced`
    /// makes it wait for earlier RDMA Reads too. An STag already invalid (the peer's Send
    /// with Invalidate came first) stays so and the request succeeds, as in siw.
    pub fn post_local_invalidate(&self, wr_id: u64, stag: u32, fenced: bool) -> Result<(), Error> {
        self.post_local_invalidate_with(wr_id, stag, true, fenced)
    }

    /// [`QueuePair::post_local_invalidate`], unsignalled when `signaled` is false (no
    /// completion on success, as [`SendWr::unsignaled`]).
    pub fn post_local_invalidate_with(
        &self,
        wr_id: u64,
        stag: u32,
        signaled: bool,
        fenced: bool,
    ) -> Result<(), Error> {
        self.post_send(
            &SendWr::new(wr_id, SendOp::LocalInvalidate { stag }, &[])?.flagged(signaled, fenced),
        )
    }

    /// Posts a receive work request (also before the connection exists).
    pub fn post_recv(&self, wr: &RecvWr) -> Result<(), Error> {
        validate_recv(&self.shared, &self.ctx.inner.mrs, &wr.0)?;
        let h = &self.ctx.inner.cores[self.core];
        h.post_recv(self.id, &wr.0).inspect_err(|_| {
            self.shared.release_rq();
        })?;
        Ok(())
    }

    /// Posts a receive work request to a queue pair that is closing or failed (where
    /// [`QueuePair::post_recv`] refuses with [`Error::InvalidState`]), as
    /// `ibv_post_recv(3)` takes one: checked as a post is but for the state, and queued by
    /// the core behind the receives posted before it. It completes with
    /// [`WcStatus::FlushErr`] when they are flushed (at once on a QP that failed), in
    /// order, or receives a message that still arrives while the connection closes.
    /// [`Error::InvalidState`] in any other state.
    pub fn post_recv_late(&self, wr: &RecvWr) -> Result<(), Error> {
        warpcore_engine::validate_recv_late(&self.shared, &self.ctx.inner.mrs, &wr.0)?;
        let h = &self.ctx.inner.cores[self.core];
        h.post_recv(self.id, &wr.0).inspect_err(|_| {
            self.shared.release_rq();
        })?;
        Ok(())
    }

    /// Graceful close: the send queue drains, then FIN; [`CmEvent::Disconnected`] follows.
    /// A close that makes no progress for [`EngineConfig::close_timeout_ms`] (5 s by
    /// default) before our FIN is acknowledged (the peer holds its window at zero, a Read
    /// is never answered) is given up as [`Self::abort`] ends a connection: RST, the
    /// outstanding work requests flushed, and [`CmEvent::Disconnected`] with
    /// [`DisconnectCause::CloseTimedOut`].
    pub fn disconnect(&self) -> Result<(), Error> {
        self.ctx
            .call(self.core, |r| Command::Disconnect(self.id, r))
    }

    /// Abortive close: RST at once; outstanding work requests are flushed.
    pub fn abort(&self) -> Result<(), Error> {
        self.ctx.call(self.core, |r| Command::Abort(self.id, r))
    }

    /// Takes a queue pair that failed (state [`QpState::Error`] or [`QpState::Terminate`])
    /// back to [`QpState::Idle`], as a new one: the verbs' move from ERR to RESET. Its work
    /// requests are flushed (any not flushed yet complete with a flush error), a connection
    /// it still holds (TCP still closing) is let go without a further [`CmEvent`], and its
    /// per-connection state starts over; its protection domain, completion queues, depths,
    /// shared receive queue and the settings it was created with ([`QpInit::rfc7306`],
    /// [`QpInit::sges_checked_at_post`]) stay. Receives
    /// may then be posted and the QP connected or accepted again. An idle QP is left as
    /// it is.
    ///
    /// # Errors
    /// [`Error::InvalidState`] for a QP with a live connection (connecting, in RTS,
    /// closing): abort it first ([`QueuePair::abort`]); the engine's errors for a QP or
    /// core that is gone.
    pub fn reset(&self) -> Result<(), Error> {
        self.ctx.call(self.core, |r| Command::ResetQp(self.id, r))
    }
}

impl Drop for QueuePair {
    fn drop(&mut self) {
        let Some(h) = self.ctx.inner.cores.get(self.core) else {
            return;
        };
        // A destroy that finds the command ring full must not be lost: the queue pair, its
        // connection and its slot would live on until the context goes. The core drains
        // the ring on its own (a caller-driven one is run by `submit` itself), so wait
        // until there is room; only a core that stopped ends the wait.
        let mut spins = 0u32;
        loop {
            let (tx, _rx) = crossbeam::channel::bounded(1);
            match h.submit(Command::DestroyQp(self.id, tx)) {
                Err(warpcore_engine::EngineError::LimitExceeded(_)) => {
                    spins = spins.saturating_add(1);
                    if spins < 64 {
                        std::thread::yield_now();
                    } else {
                        std::thread::sleep(Duration::from_micros(50));
                    }
                }
                _ => return,
            }
        }
    }
}

/// A completion queue, shared by the queue pairs created with it.
#[derive(Debug, Clone)]
pub struct CompletionQueue {
    pub(crate) cq: Arc<warpcore_engine::CompletionQueue>,
    /// The caller-driven context that created it (its polls run that context's cores).
    driver: polled::Driver,
}

impl CompletionQueue {
    /// Takes up to `out.len()` completions without waiting; returns how many.
    pub fn poll(&self, out: &mut [Completion]) -> usize {
        self.driver.pop_into(&self.cq, out)
    }

    /// Disarms the queue and takes the events it signalled on its channel that no
    /// [`CompletionChannel::get_event`] has taken yet off the channel; returns how many.
    /// For a queue about to be dropped for good (the verbs' `ibv_destroy_cq`, whose kernel
    /// side deletes the CQ's pending events from its completion channel): the channel's
    /// descriptor then reads readable only while another queue's event waits. (An event
    /// of a dropped queue is skipped by `get_event`, but kept the descriptor readable.)
    pub fn forget_events(&self) -> usize {
        self.cq.forget_events()
    }

    /// Appends a flushed completion (`WcStatus::FlushErr`) of work request `wr_id` of
    /// queue pair `qp` behind those already queued, as the engine's own flushes are: a
    /// layer above that accepts work requests on a QP in the error state (the verbs
    /// complete them flushed where [`QueuePair::post_send`] refuses them) keeps each work
    /// queue's completions in posting order, and an armed queue signals its channel. A
    /// full queue refuses it with [`Error::QueueFull`]: nothing is queued and no overrun is
    /// raised (the caller is told, where an engine completion that finds no room is lost
    /// and fails the queue pairs completing into the queue, [`Self::overrun`]).
    pub fn push_flushed(&self, wr_id: u64, qp: QpId, opcode: WcOpcode) -> Result<(), Error> {
        // House rule: a local caller's call that cannot be done is a typed error. Pushed
        // as the engine pushes, the completion was lost and the overrun it raised failed
        // every queue pair of the queue (CmEvent::CqError, ConnError::CqOverrun).
        self.cq
            .try_push(Completion {
                wr_id,
                qp,
                opcode,
                status: WcStatus::FlushErr,
                byte_len: 0,
                solicited: false,
                invalidated: None,
                imm: None,
                atomic_orig: None,
            })
            .map_err(|_| Error::QueueFull)
    }

    /// Takes one completion if there is one.
    pub fn poll_one(&self) -> Option<Completion> {
        self.driver.pop(&self.cq)
    }

    /// Waits up to `timeout` (`Duration::MAX`: until one comes) for one completion (spins
    /// briefly, then parks in short slices; only the calling thread waits).
    /// [`Error::EngineGone`] when the queue is empty and the cores of the context that
    /// created it stopped for good (a caller-driven loop panicked; the core threads ended,
    /// because the context was dropped or a thread panicked): none can come any more.
    pub fn wait(&self, timeout: Duration) -> Result<Completion, Error> {
        let deadline = deadline_after(timeout);
        let mut spins = 0u32;
        loop {
            if let Some(c) = self.driver.pop(&self.cq) {
                return Ok(c);
            }
            if self.driver.gone() {
                // What the core pushed before it stopped is still handed out.
                return self.cq.pop().ok_or(Error::EngineGone);
            }
            if deadline.is_some_and(|d| StdInstant::now() >= d) {
                return Err(Error::Timeout);
            }
            spins = spins.saturating_add(1);
            self.driver.pause(spins);
        }
    }

    /// Solicited-event wait (the `ibv_req_notify_cq(solicited_only)` form): waits up to
    /// `timeout` until a *solicited* completion arrives, i.e. a receive of a message that
    /// carried the Solicited Event flag (Send with SE, Immediate Data with SE; RDMAP-5.3-*,
    /// EXT-6.3-*) or any completion in error (errors always notify, as in ibverbs). Every
    /// completion taken on the way is appended to `out` in queue order, so none is lost;
    /// returns the index in `out` of the one that ended the wait, or [`Error::Timeout`]
    /// (with whatever arrived meanwhile in `out`). `Duration::MAX` waits until one comes.
    /// [`Error::EngineGone`] (with what was taken in `out`) when the queue is empty and the
    /// cores of the context that created it stopped for good (as for [`Self::wait`]).
    pub fn wait_solicited(
        &self,
        timeout: Duration,
        out: &mut Vec<Completion>,
    ) -> Result<usize, Error> {
        let deadline = deadline_after(timeout);
        let mut spins = 0u32;
        loop {
            let mut took = false;
            while let Some(c) = self.driver.pop(&self.cq) {
                took = true;
                let notify = c.solicited || c.status != WcStatus::Success;
                out.push(c);
                if notify {
                    return Ok(out.len() - 1);
                }
            }
            if took {
                spins = 0;
            }
            // Looked at after the queue was found empty: what the core pushed before it
            // stopped was taken above (a push the panicking loop made meanwhile is taken
            // on the next pass, which finds it before this test).
            if self.driver.gone() && self.cq.is_empty() {
                return Err(Error::EngineGone);
            }
            if deadline.is_some_and(|d| StdInstant::now() >= d) {
                return Err(Error::Timeout);
            }
            spins = spins.saturating_add(1);
            self.driver.pause(spins);
        }
    }

    /// Arms the queue (`ibv_req_notify_cq`): the next completion added to it (with
    /// `solicited_only`, the next receive of a message with the Solicited Event flag, or
    /// any completion in error) signals its channel once ([`CompletionChannel::get_event`]).
    /// Completions already queued do not: poll after arming. [`Error::NoChannel`] when the
    /// queue was created without a channel.
    pub fn req_notify(&self, solicited_only: bool) -> Result<(), Error> {
        if self.cq.arm(solicited_only) {
            Ok(())
        } else {
            Err(Error::NoChannel)
        }
    }

    /// The queue's identifier, unique in the process: what [`CmEvent::CqError`] names it
    /// by.
    pub fn id(&self) -> u64 {
        self.cq.id()
    }

    /// Whether this handle and `other` name the same completion queue.
    pub fn same_as(&self, other: &CompletionQueue) -> bool {
        Arc::ptr_eq(&self.cq, &other.cq)
    }

    /// Whether a completion was ever lost because the queue was full. Then the context
    /// reported [`CmEvent::CqError`] with this queue's [`id`](Self::id) (the verbs'
    /// asynchronous `IBV_EVENT_CQ_ERR`), and every queue pair completing into it went to
    /// the error state (a local catastrophic Terminate to its peer) and reported
    /// `CmEvent::Error` with `ConnError::CqOverrun`: size a queue for every completion
    /// that can be outstanding.
    pub fn overrun(&self) -> bool {
        self.cq.overrun()
    }
}

#[cfg(feature = "dpdk")]
pub mod dpdk;

/// [`Config::cpus`] for a device that runs `cores` engine cores: none, or one each, each
/// its own ([`Error::CpuCount`], [`Error::CpuTwice`]).
fn check_cpus(cpus: &[usize], cores: usize) -> Result<(), Error> {
    if !cpus.is_empty() && cpus.len() != cores {
        return Err(Error::CpuCount {
            given: cpus.len(),
            cores,
        });
    }
    for (i, c) in cpus.iter().enumerate() {
        if cpus[..i].contains(c) {
            return Err(Error::CpuTwice(*c));
        }
    }
    Ok(())
}

#[cfg(test)]
mod cpu_tests {
    use super::*;

    /// Two engine cores pinned to one CPU (a typo: "0,0" for "0,1") took turns on it, the
    /// busy-polling ones starving each other; refused, naming the CPU. (A unit test: a
    /// link runs one core, and only a DPDK port with several queues runs more.)
    #[test]
    fn a_cpu_named_twice_is_refused() {
        assert_eq!(check_cpus(&[3, 1, 3], 3), Err(Error::CpuTwice(3)));
        assert_eq!(check_cpus(&[0, 0], 2), Err(Error::CpuTwice(0)));
        assert_eq!(
            Error::CpuTwice(0).to_string(),
            "Config::cpus names CPU 0 twice: give each engine core a CPU of its own"
        );
        assert_eq!(
            check_cpus(&[0, 0], 1),
            Err(Error::CpuCount { given: 2, cores: 1 })
        );
        assert_eq!(check_cpus(&[2, 0, 1], 3), Ok(()));
        assert_eq!(check_cpus(&[], 4), Ok(()));
    }
}

#[cfg(test)]
mod seed_tests {
    use super::*;

    /// RFC 6528 wants the ISN key secret: unset, every context draws its own from the OS
    /// (the seed was derived from the IP address, so two processes on one address shared
    /// their ISN key, hash key and first ephemeral port); a given seed is kept.
    #[test]
    fn each_context_draws_its_own_tcp_seed_unless_one_is_given() {
        let drawn: Vec<u64> = (0..8).map(|_| stack_seed(None).unwrap()).collect();
        for (i, a) in drawn.iter().enumerate() {
            for b in &drawn[i + 1..] {
                assert_ne!(a, b, "two draws gave the same seed");
            }
        }
        assert_eq!(stack_seed(Some(42)).unwrap(), 42);
        let (a, _b) = link_pair(&LinkConfig::default());
        assert_eq!(Config::new(a, [198, 18, 0, 1]).random_seed, None);
    }
}

#[cfg(test)]
mod pd_number_tests {
    use super::*;
    use warpcore_engine::mem::LookupFault;

    /// Protection domain numbers are never handed out twice (DDP-8.2-1, RDMAP-8.1.1-2): the
    /// counter was a `u32` that wrapped after 2^32 allocations, and the domain that then
    /// got number 1 again passed every PD check against the first domain's objects. Here
    /// the counter is set near its end (a unit test: `next_pd` is private, and no API sets
    /// it) and the checks the wrap defeated are asked of every domain allocated after it.
    #[test]
    fn a_domain_number_is_never_given_out_twice() {
        let (dev, _peer) = link_pair(&LinkConfig::default());
        let ctx = Context::open(Config::new(dev, [10, 0, 0, 9])).unwrap();
        let first = ctx.alloc_pd();
        let mr = first.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
        let srq = first.create_srq(8, 1).unwrap();
        let cq = ctx.create_cq(16).unwrap();
        ctx.inner.next_pd.store(u32::MAX.into(), Ordering::Relaxed);
        let mut refused = 0;
        for _ in 0..4 {
            let pd = match ctx.try_alloc_pd() {
                Ok(pd) => pd,
                Err(e) => {
                    assert_eq!(e, Error::PdNumbersExhausted);
                    refused += 1;
                    continue;
                }
            };
            // The shared receive queue of another domain (PdId compare in create_qp).
            let qp = pd.create_qp(&QpInit::new(&cq, &cq).with_srq(&srq));
            assert_eq!(
                qp.map(|_| ()),
                Err(Error::Stag(MemError::WrongPd)),
                "domain {:?} took the SRQ of domain {:?}",
                pd.id,
                first.id
            );
            // The engine's lookup of another domain's region (what placement and the
            // SGEs of a queue pair of `pd` go through).
            let fault = ctx
                .inner
                .mrs
                .lookup_local(Stag(mr.stag()), pd.id, false)
                .map(|_| ())
                .unwrap_err();
            assert_eq!(fault, LookupFault::WrongPd, "domain {:?}", pd.id);
        }
        assert_eq!(refused, 3, "every allocation past u32::MAX is refused");
        assert_eq!(
            Error::PdNumbersExhausted.to_string(),
            "every protection domain number of this context was given out (u32::MAX)"
        );
        // The domains that live keep working.
        let qp = first
            .create_qp(&QpInit::new(&cq, &cq).with_srq(&srq))
            .unwrap();
        drop(qp);
        assert!(ctx
            .inner
            .mrs
            .lookup_local(Stag(mr.stag()), first.id, false)
            .is_ok());
    }
}
