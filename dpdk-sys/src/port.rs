//! Ethernet ports (`rte_ethdev`) and their queues.

use std::collections::BTreeSet;
use std::ffi::{CStr, CString};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::{ffi, Eal, Error, Mbuf, Mempool};

/// Most mbufs one burst call moves (the scratch array of each queue handle).
pub const BURST_MAX: usize = 256;

/// What a device offers, as reported by `rte_eth_dev_info_get`.
#[derive(Debug, Clone)]
pub struct PortInfo {
    /// Driver name, e.g. `net_memif`.
    pub driver: String,
    /// Most rx queues.
    pub max_rx_queues: u16,
    /// Most tx queues.
    pub max_tx_queues: u16,
    /// Smallest MTU.
    pub min_mtu: u16,
    /// Largest MTU.
    pub max_mtu: u16,
    /// Largest frame the port receives, as the driver reports it (what
    /// `rte_eth_dev_configure` accepts as MTU plus 18).
    pub max_rx_pktlen: u32,
    /// Largest Ethernet frame (header included, no FCS) the driver's data path carries,
    /// which for some vdevs is more than they report: see [`Port::configure`].
    pub frame_max: u32,
    /// The driver arguments of the port's vdev string (`iface=veth0,framesz=10240` of
    /// `net_af_packet0,iface=veth0,framesz=10240`); empty for none.
    pub devargs: String,
    /// `RTE_ETH_RX_OFFLOAD_*` the port supports.
    pub rx_offload_capa: u64,
    /// `RTE_ETH_TX_OFFLOAD_*` the port supports.
    pub tx_offload_capa: u64,
    /// `RTE_ETH_RSS_*` hash types the port supports.
    pub flow_type_rss_offloads: u64,
    /// Most mbufs one transmitted packet may chain (`tx_desc_lim.nb_seg_max`).
    pub tx_seg_max: u16,
}

/// Offloads enabled on a configured port (the intersection of what was asked and what the
/// device reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Offloads {
    /// The port verifies IPv4 header checksums on receive (flags in each mbuf).
    pub rx_ipv4_checksum: bool,
    /// The port verifies TCP checksums on receive.
    pub rx_tcp_checksum: bool,
    /// The port fills IPv4 header checksums on transmit.
    pub tx_ipv4_checksum: bool,
    /// The port fills TCP checksums on transmit.
    pub tx_tcp_checksum: bool,
    /// TCP segmentation offload is enabled.
    pub tso: bool,
    /// The port's TSO refuses a super-frame whose segments, Ethernet header included, exceed
    /// the IP MTU: net_tap checks `tso_segsz` plus the l2, l3 and l4 header lengths against
    /// the MTU (`pmd_tx_burst` in `drivers/net/tap/rte_eth_tap.c`, DPDK 22.11, unchanged in
    /// DPDK's main branch in 2026), so it cannot cut segments that fill the MTU, only ones
    /// 14 octets shorter.
    pub tso_frame_within_mtu: bool,
    /// Most mbufs one TSO super-frame may chain: the port's `nb_seg_max` (0 without TSO).
    pub tso_segments_max: u16,
    /// Receive side scaling spreads flows over the rx queues.
    pub rss: bool,
    /// The port accepts chained (multi-segment) mbufs on transmit.
    pub tx_multi_segs: bool,
    /// The port may deliver chained mbufs on receive.
    pub rx_scatter: bool,
}

/// How to configure a port.
#[derive(Debug, Clone)]
pub struct PortConfig {
    /// Number of rx queues (more than one enables RSS when the port offers it). Not 0
    /// together with `tx_queues` ([`Error::PortConfig`]).
    pub rx_queues: u16,
    /// Number of tx queues.
    pub tx_queues: u16,
    /// Descriptors per rx queue (not 0, within the driver's limits: [`Error::PortConfig`]).
    pub rx_desc: u16,
    /// Descriptors per tx queue (as `rx_desc`).
    pub tx_desc: u16,
    /// IP MTU (the Ethernet payload), 1 to [`crate::MTU_MAX`] ([`Error::Mtu`] else).
    /// `None` keeps the default.
    pub mtu: Option<u16>,
    /// Ask for checksum offloads (enabled where offered).
    pub checksum_offload: bool,
    /// Ask for TCP segmentation offload (enabled where offered).
    pub tso: bool,
    /// Put the port in promiscuous mode.
    pub promiscuous: bool,
}

impl Default for PortConfig {
    fn default() -> Self {
        PortConfig {
            rx_queues: 1,
            tx_queues: 1,
            rx_desc: 1024,
            tx_desc: 1024,
            mtu: None,
            checksum_offload: true,
            tso: false,
            promiscuous: true,
        }
    }
}

/// Link state (`rte_eth_link_get_nowait`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkStatus {
    /// Link is up.
    pub up: bool,
    /// Speed in Mbit/s (0 if unknown).
    pub speed_mbps: u32,
    /// Full duplex.
    pub full_duplex: bool,
}

/// Basic port counters (`rte_eth_stats_get`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortStats {
    /// Packets received.
    pub ipackets: u64,
    /// Packets sent.
    pub opackets: u64,
    /// Bytes received.
    pub ibytes: u64,
    /// Bytes sent.
    pub obytes: u64,
    /// Packets dropped by the hardware because no rx descriptor was free.
    pub imissed: u64,
    /// Erroneous received packets.
    pub ierrors: u64,
    /// Failed transmissions.
    pub oerrors: u64,
    /// Receive allocation failures.
    pub rx_nombuf: u64,
}

/// One extended statistic (`rte_eth_xstats_get`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct XStat {
    /// Driver-defined name.
    pub name: String,
    /// Counter value.
    pub value: u64,
}

/// How long dropping a port waits for the EAL interrupt thread to close it.
const CLOSE_TIMEOUT_MS: u32 = 5000;

/// The port ids a [`Port`] is open on in this process. One `Port` per id is what makes its
/// queue handles unique: a second `Port` on the same id would hand out the same queues again.
static OPEN_PORTS: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// Locks `m`, whether or not a thread panicked while holding it: every update under these
/// locks is a single insert, remove or assignment, so the data is whole either way.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A port id taken in [`OPEN_PORTS`]; dropping it gives the id back.
#[derive(Debug)]
struct PortClaim(u16);

impl PortClaim {
    /// Takes `id`; `None` when a `Port` is open on it already.
    fn take(id: u16) -> Option<PortClaim> {
        let fresh = lock(&OPEN_PORTS).insert(id);
        // Made only when the id was free: a claim dropped here would give back somebody
        // else's id.
        fresh.then(|| PortClaim(id))
    }
}

impl Drop for PortClaim {
    fn drop(&mut self) {
        lock(&OPEN_PORTS).remove(&self.0);
    }
}

/// Which queues of the configured port have a live handle. Empty (no queue to take) before
/// the first successful [`Port::configure`] and while one runs.
#[derive(Debug, Default)]
struct QueuesTaken {
    rx: Vec<bool>,
    tx: Vec<bool>,
}

impl QueuesTaken {
    /// Live rx and tx handles.
    fn live(&self) -> (usize, usize) {
        let count = |v: &[bool]| v.iter().filter(|&&t| t).count();
        (count(&self.rx), count(&self.tx))
    }
}

/// The part of a port that queue handles share; closing the device waits for all of them.
#[derive(Debug)]
struct PortShared {
    id: u16,
    name: String,
    /// Set by the port (under `&mut Port`), cleared by each queue handle as it drops.
    taken: Mutex<QueuesTaken>,
    /// How long dropping waits for the EAL interrupt thread to close the device
    /// ([`CLOSE_TIMEOUT_MS`]; tests shorten it, [`Port::set_close_timeout_ms`]).
    close_timeout_ms: AtomicU32,
    /// Declared last: fields drop after `Drop::drop` has closed the device, so the id is
    /// free again only once nothing uses it. Taken and kept forever when the close did not
    /// finish in time (see `Drop`).
    claim: Option<PortClaim>,
}

impl Drop for PortShared {
    fn drop(&mut self) {
        // Stop and close on the EAL interrupt thread, serialised with the drivers' own event
        // handlers there (net_memif closes its end there when the peer closes first; two
        // concurrent closes in one process could crash it). See `wc_eth_dev_close_serialized`.
        let timeout_ms = self.close_timeout_ms.load(Ordering::Relaxed);
        // SAFETY: no queue handle or Port refers to the device any more (they hold this Arc);
        // stopping an already stopped port and closing it are both allowed, and the shim only
        // passes the port id to rte_eth_dev_stop/rte_eth_dev_close. If the close is left to
        // the interrupt thread, the id stays claimed (below), so nothing of ours reaches the
        // device again.
        let r = unsafe { ffi::wc_eth_dev_close_serialized(self.id, timeout_ms) };
        if r < 0 {
            // The close is still to come, on the interrupt thread, at a time nobody knows:
            // a `Port` opened on the id meanwhile would have its queues stopped and freed
            // under its handles. So the id stays taken in this process for good.
            std::mem::forget(self.claim.take());
            eprintln!(
                "dpdk-sys: port {} ({}): the EAL interrupt thread did not close it within {} \
                 ms; it closes it later, and the port id cannot be opened again in this process",
                self.id, self.name, timeout_ms
            );
        }
    }
}

/// An ethdev port. Dropping the port and all its queue handles stops and closes the device.
///
/// At most one `Port` is open on a port id in a process ([`Error::PortInUse`] for a second),
/// and it hands out one live handle per queue; while any handle is alive the port
/// can be neither reconfigured nor stopped ([`Error::QueuesInUse`]). So a queue is polled by
/// one owner only, and never after it was released: DPDK's bursts take no lock, and a queue
/// released by a reconfiguration is freed memory.
///
/// A `Port` may move to another thread (`Send`) but is not shared between threads (not
/// `Sync`): its `&self` calls (`stats`, `xstats`, `link_status`, ...) are ethdev control
/// operations, which DPDK does not make safe to run concurrently on one port (ixgbe's
/// `stats_get` adds the hardware counters into the port's totals without a lock, say).
///
/// ```compile_fail,E0277
/// fn shared<T: Sync>() {}
/// shared::<warpcore_dpdk_sys::Port>();
/// ```
#[derive(Debug)]
pub struct Port {
    shared: Arc<PortShared>,
    info: PortInfo,
    offloads: Offloads,
    /// The MTU set by [`Port::configure`] past what the ethdev layer accepts.
    data_path_mtu: Option<u16>,
    /// The data room (headroom included) of the pool the last successful
    /// [`Port::configure`] set the rx queues up with: what [`Port::set_mtu`] checks a new
    /// MTU's frames against, as `configure` checks its own.
    pool_data_room: Option<u16>,
    /// Not `Sync` (see the type's docs); still `Send`.
    _not_sync: std::marker::PhantomData<std::cell::Cell<()>>,
}

/// net_af_packet's default tpacket frame size (`framesz`).
pub const AF_PACKET_FRAMESZ_DEFAULT: u32 = 2048;
/// A tpacket frame size for jumbo frames on net_af_packet: frames of up to 10,174 octets
/// (MTU 9000 needs 9,014). Two frames per [`AF_PACKET_JUMBO_BLOCKSZ`] block, as the PMD
/// addresses frames as one array (a block must hold a whole number of them).
pub const AF_PACKET_JUMBO_FRAMESZ: u32 = 10240;
/// The block size that goes with [`AF_PACKET_JUMBO_FRAMESZ`] (five pages).
pub const AF_PACKET_JUMBO_BLOCKSZ: u32 = 20480;
/// The driver arguments to append to a net_af_packet vdev for jumbo frames.
pub const AF_PACKET_JUMBO_ARGS: &str = "framesz=10240,blocksz=20480";
/// Octets of mbuf data room (headroom included) a net_af_packet port with
/// [`AF_PACKET_JUMBO_FRAMESZ`] needs: its rx queue refuses mbufs that cannot hold a whole
/// tpacket frame's data.
pub const AF_PACKET_JUMBO_DATA_ROOM: u16 = 10240 - 32 + 128;

/// The value of `key` in a vdev's driver arguments (`iface=veth0,framesz=10240`).
fn devarg<T: std::str::FromStr>(devargs: &str, key: &str) -> Option<T> {
    devargs
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| k.trim() == key)
        .and_then(|(_, v)| v.trim().parse().ok())
}

/// The largest Ethernet frame (no FCS) the data path of `driver` carries. DPDK 22.11 reports
/// 1518 for net_memif and net_af_packet although:
/// * net_memif chains ring descriptors for a longer frame on transmit and delivers it as a
///   chain of mbufs, so any length passes (up to a 16-bit packet length);
/// * net_af_packet copies a frame into one tpacket frame of `framesz` octets (default
///   2048): the kernel puts a received frame at offset 66 (TPACKET_V2's 52-octet header and
///   its alignment), so frames of up to `framesz - 66` octets pass both ways (the PMD
///   takes up to `framesz - 32` on transmit).
///
/// Every other driver: what it reports (less the FCS).
fn data_path_frame_max(driver: &str, devargs: &str, reported: u32) -> u32 {
    match driver {
        "net_memif" => u32::from(u16::MAX),
        "net_af_packet" => devarg::<u32>(devargs, "framesz")
            .unwrap_or(AF_PACKET_FRAMESZ_DEFAULT)
            .saturating_sub(66),
        _ => reported.saturating_sub(4),
    }
}

/// Maps every page of this process's net_memif shared regions (its rings and packet
/// buffers) now, without changing their contents; returns the octets covered. [`Port::start`]
/// has the EAL interrupt thread call this once a net_memif port's link is up; calling it
/// again is harmless (pages already mapped cost nothing more).
pub fn prefault_memif_regions() -> usize {
    // SAFETY: the shim reads /proc/self/maps and asks the kernel to populate the
    // read-write mappings named memif_region_*, which changes no octet of them. If the
    // driver unmaps one meanwhile (called off the interrupt thread), madvise fails on the
    // hole or populates whatever was mapped there since: no contents change either way.
    unsafe { ffi::wc_memif_prefault_regions() }
}

/// Keeps the EAL interrupt thread busy for `ms` milliseconds from about now (an alarm
/// whose callback sleeps): for tests of what waits on that thread, such as the close of a
/// dropped [`Port`]. Returns DPDK's refusal to set the alarm.
#[doc(hidden)]
pub fn stall_interrupt_thread(_eal: &Eal, ms: u32) -> Result<(), Error> {
    extern "C" fn sleep_cb(arg: *mut std::ffi::c_void) {
        // Nothing here can panic (no unwinding out of a C callback): the duration was
        // passed as the pointer's value.
        std::thread::sleep(std::time::Duration::from_millis(arg as u64));
    }
    // SAFETY: the callback is a plain function that reads no memory through its argument
    // (a number, not a pointer), so it is sound whenever the interrupt thread runs it.
    let r = unsafe { ffi::rte_eal_alarm_set(1, Some(sleep_cb), ms as usize as *mut _) };
    if r != 0 {
        return Err(Error::Port {
            port: u16::MAX,
            name: "EAL interrupt thread".into(),
            op: "rte_eal_alarm_set".into(),
            reason: Error::code_reason(r),
        });
    }
    Ok(())
}

fn port_name(id: u16) -> String {
    let mut buf = [0 as std::ffi::c_char; 64];
    // SAFETY: buf has room for RTE_ETH_NAME_MAX_LEN (64) bytes including the NUL.
    let ret = unsafe { ffi::rte_eth_dev_get_name_by_port(id, buf.as_mut_ptr()) };
    if ret != 0 {
        return format!("port{id}");
    }
    // SAFETY: on success buf holds a NUL-terminated string.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

impl Port {
    /// Names of all probed ports.
    pub fn names(eal: &Eal) -> Vec<String> {
        (0..ffi::RTE_MAX_ETHPORTS as u16)
            // SAFETY: valid for any port id once the EAL is up.
            .filter(|&id| unsafe { ffi::rte_eth_dev_is_valid_port(id) } == 1)
            .map(port_name)
            .take(eal.port_count() as usize)
            .collect()
    }

    /// Opens the port named `name` (a vdev name such as `net_memif0`, or a PCI address).
    pub fn by_name(eal: &Eal, name: &str) -> Result<Port, Error> {
        let cname = CString::new(name).map_err(|_| Error::NulInArgument(name.into()))?;
        let mut id = 0u16;
        // SAFETY: cname is a valid C string; id is a valid out pointer.
        let ret = unsafe { ffi::rte_eth_dev_get_port_by_name(cname.as_ptr(), &mut id) };
        if ret != 0 {
            return Err(Error::NoSuchPort {
                name: name.into(),
                present: Port::names(eal).join(", "),
            });
        }
        Port::from_id(eal, id)
    }

    /// Opens the port with id `id`. Fails with [`Error::PortInUse`] while another `Port` of
    /// this process is open on it (or queue handles of a dropped one are still alive).
    pub fn from_id(eal: &Eal, id: u16) -> Result<Port, Error> {
        // SAFETY: valid for any id once the EAL is up.
        if unsafe { ffi::rte_eth_dev_is_valid_port(id) } != 1 {
            return Err(Error::NoSuchPort {
                name: format!("port id {id}"),
                present: Port::names(eal).join(", "),
            });
        }
        let name = port_name(id);
        let claim = PortClaim::take(id).ok_or_else(|| Error::PortInUse {
            port: id,
            name: name.clone(),
        })?;
        let mut di = ffi::rte_eth_dev_info::default();
        // SAFETY: id is valid; di is a valid out pointer.
        let ret = unsafe { ffi::rte_eth_dev_info_get(id, &mut di) };
        if ret != 0 {
            return Err(Error::Port {
                port: id,
                name,
                op: "rte_eth_dev_info_get".into(),
                reason: Error::code_reason(ret),
            });
        }
        let driver = if di.driver_name.is_null() {
            String::new()
        } else {
            // SAFETY: driver_name points at the driver's static NUL-terminated name.
            unsafe { CStr::from_ptr(di.driver_name) }
                .to_string_lossy()
                .into_owned()
        };
        // SAFETY: valid port; the returned string (or NULL) belongs to the EAL's device
        // list and outlives this call; it is copied at once.
        let args = unsafe { ffi::wc_port_devargs(id) };
        let devargs = if args.is_null() {
            String::new()
        } else {
            // SAFETY: non-NULL: a NUL-terminated string owned by the EAL (see above).
            unsafe { CStr::from_ptr(args) }
                .to_string_lossy()
                .into_owned()
        };
        let frame_max = data_path_frame_max(&driver, &devargs, di.max_rx_pktlen);
        let info = PortInfo {
            frame_max,
            devargs,
            driver,
            max_rx_queues: di.max_rx_queues,
            max_tx_queues: di.max_tx_queues,
            min_mtu: di.min_mtu,
            max_mtu: di.max_mtu,
            max_rx_pktlen: di.max_rx_pktlen,
            rx_offload_capa: di.rx_offload_capa,
            tx_offload_capa: di.tx_offload_capa,
            flow_type_rss_offloads: di.flow_type_rss_offloads,
            tx_seg_max: di.tx_desc_lim.nb_seg_max,
        };
        Ok(Port {
            shared: Arc::new(PortShared {
                id,
                name,
                taken: Mutex::new(QueuesTaken::default()),
                close_timeout_ms: AtomicU32::new(CLOSE_TIMEOUT_MS),
                claim: Some(claim),
            }),
            info,
            offloads: Offloads::default(),
            data_path_mtu: None,
            pool_data_room: None,
            _not_sync: std::marker::PhantomData,
        })
    }

    /// Port id.
    pub fn id(&self) -> u16 {
        self.shared.id
    }

    /// How long the close that dropping the port (and its last queue handle) makes waits
    /// for the EAL interrupt thread, instead of 5 s: for tests of a close that takes longer.
    #[doc(hidden)]
    pub fn set_close_timeout_ms(&mut self, ms: u32) {
        self.shared.close_timeout_ms.store(ms, Ordering::Relaxed);
    }

    /// Device name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// What the device offers.
    pub fn info(&self) -> &PortInfo {
        &self.info
    }

    /// Offloads enabled by [`Port::configure`].
    pub fn offloads(&self) -> Offloads {
        self.offloads
    }

    /// Live rx and tx queue handles taken from this port.
    pub fn queue_handles(&self) -> (usize, usize) {
        lock(&self.shared.taken).live()
    }

    /// Refuses `op` while queue handles are alive. None can be taken meanwhile: that needs
    /// `&mut self`, which the caller holds.
    fn refuse_with_live_queues(&mut self, op: &'static str) -> Result<(), Error> {
        let (rx, tx) = self.queue_handles();
        if rx + tx > 0 {
            return Err(Error::QueuesInUse {
                port: self.id(),
                name: self.name().into(),
                op,
                rx,
                tx,
            });
        }
        Ok(())
    }

    fn err(&self, op: impl Into<String>, ret: i32) -> Error {
        Error::Port {
            port: self.id(),
            name: self.name().into(),
            op: op.into(),
            reason: Error::code_reason(ret),
        }
    }

    /// Configures queues, MTU and offloads, and sets the rx queues up to receive into `pool`.
    /// Returns the offloads actually enabled (requested and offered).
    ///
    /// An MTU the driver reports it cannot take (DPDK 22.11's net_memif and net_af_packet
    /// report 1518-octet frames at most, and `rte_eth_dev_configure` refuses more) is still
    /// set where the driver's data path carries the frames ([`PortInfo::frame_max`]): the
    /// ethdev layer keeps its default MTU, which nothing on the data path checks, and
    /// [`Port::mtu`] returns the one asked for. net_af_packet also needs its kernel
    /// interface to take the MTU (checked here, not changed).
    ///
    /// Refused with [`Error::QueuesInUse`] while queue handles taken from the port are
    /// alive: the queues they name are released and set up anew here. After a failure no
    /// queue can be taken until a configuration succeeds, except after
    /// [`Error::PortConfig`]: a configuration with no queue at all, or a descriptor count
    /// the driver would not take as it is (0, or outside its limits), is refused before the
    /// port is touched.
    ///
    /// On a port that sends no chained mbufs (no `RTE_ETH_TX_OFFLOAD_MULTI_SEGS`), a `pool`
    /// whose mbufs cannot hold a whole frame of the MTU is refused with [`Error::Mtu`]:
    /// a frame longer than one mbuf could never be sent there.
    pub fn configure(&mut self, cfg: &PortConfig, pool: &Mempool) -> Result<Offloads, Error> {
        self.refuse_with_live_queues("configure")?;
        let (rxd, txd) = self.check_counts(cfg)?;
        *lock(&self.shared.taken) = QueuesTaken::default();
        let id = self.id();
        let mut data_path_mtu = None;
        let rx_capa = self.info.rx_offload_capa;
        let tx_capa = self.info.tx_offload_capa;
        let has = |capa: u64, bit: u32| capa & u64::from(bit) != 0;
        let mut off = Offloads::default();
        let mut conf = ffi::rte_eth_conf::default();
        if cfg.checksum_offload {
            // Receive offload only as a pair: the stack trusts the port's flags only when
            // it checks both checksums (`Offloads::rx_*`), and asking for TCP's alone is not
            // harmless: a virtio port then negotiates partial checksums (the host hands over
            // a guest peer's frames with the TCP checksum field unfilled), which the
            // stack's software check, still on for want of the IPv4 offload, would drop.
            let rx = rx_checksum_offloads(rx_capa);
            if rx != 0 {
                conf.rxmode.offloads |= rx;
                off.rx_ipv4_checksum = true;
                off.rx_tcp_checksum = true;
            }
            if has(tx_capa, ffi::RTE_ETH_TX_OFFLOAD_IPV4_CKSUM) {
                conf.txmode.offloads |= u64::from(ffi::RTE_ETH_TX_OFFLOAD_IPV4_CKSUM);
                off.tx_ipv4_checksum = true;
            }
            if has(tx_capa, ffi::RTE_ETH_TX_OFFLOAD_TCP_CKSUM) {
                conf.txmode.offloads |= u64::from(ffi::RTE_ETH_TX_OFFLOAD_TCP_CKSUM);
                off.tx_tcp_checksum = true;
            }
        }
        if cfg.tso && has(tx_capa, ffi::RTE_ETH_TX_OFFLOAD_TCP_TSO) {
            conf.txmode.offloads |= u64::from(ffi::RTE_ETH_TX_OFFLOAD_TCP_TSO);
            off.tso = true;
            off.tso_frame_within_mtu = self.info.driver == "net_tap";
            off.tso_segments_max = self.info.tx_seg_max;
        }
        if has(tx_capa, ffi::RTE_ETH_TX_OFFLOAD_MULTI_SEGS) {
            conf.txmode.offloads |= u64::from(ffi::RTE_ETH_TX_OFFLOAD_MULTI_SEGS);
            off.tx_multi_segs = true;
        } else {
            self.check_pool_holds_frames(cfg.mtu, pool.data_room())?;
        }
        if let Some(mtu) = cfg.mtu {
            if u32::from(mtu) + 18 > self.info.max_rx_pktlen {
                self.check_data_path_mtu(mtu)?;
                data_path_mtu = Some(mtu);
            } else {
                conf.rxmode.mtu = u32::from(mtu);
            }
        }
        // Receive scatter for the MTU the port gets, the ethdev default (1500) where none
        // is asked for: without it a driver reads each frame into one mbuf and drops the
        // longer ones (net_tap's `pmd_rx_burst` reads into a single buffer, DPDK 22.11).
        let mtu = cfg.mtu.unwrap_or(ffi::RTE_ETHER_MTU as u16);
        if self.needs_rx_scatter(mtu, pool.data_room()).is_some() {
            conf.rxmode.offloads |= u64::from(ffi::RTE_ETH_RX_OFFLOAD_SCATTER);
            off.rx_scatter = true;
        }
        let rss_hf = self.info.flow_type_rss_offloads
            & (u64::from(ffi::RTE_ETH_RSS_IP) | u64::from(ffi::RTE_ETH_RSS_TCP));
        if cfg.rx_queues > 1 && rss_hf != 0 {
            conf.rxmode.mq_mode = ffi::RTE_ETH_MQ_RX_RSS;
            conf.rx_adv_conf.rss_conf.rss_hf = rss_hf;
            off.rss = true;
        }
        // SAFETY: id is a valid port; conf is a fully initialised configuration.
        let ret = unsafe { ffi::rte_eth_dev_configure(id, cfg.rx_queues, cfg.tx_queues, &conf) };
        if ret != 0 {
            return Err(self.err(
                format!(
                    "rte_eth_dev_configure({} rx, {} tx queues, mtu {:?})",
                    cfg.rx_queues, cfg.tx_queues, cfg.mtu
                ),
                ret,
            ));
        }
        // SAFETY: valid port.
        let socket = queue_socket(unsafe { ffi::rte_eth_dev_socket_id(id) });
        for q in 0..cfg.rx_queues {
            // SAFETY: valid port and queue index; NULL rxconf selects the driver defaults
            // together with the port-level offloads; the pool lives forever.
            let ret = unsafe {
                ffi::rte_eth_rx_queue_setup(id, q, rxd, socket, std::ptr::null(), pool.as_ptr())
            };
            if ret != 0 {
                return Err(self.err(format!("rx queue {q} setup ({rxd} descriptors)"), ret));
            }
        }
        for q in 0..cfg.tx_queues {
            // SAFETY: valid port and queue index; NULL txconf selects the driver defaults.
            let ret = unsafe { ffi::rte_eth_tx_queue_setup(id, q, txd, socket, std::ptr::null()) };
            if ret != 0 {
                return Err(self.err(format!("tx queue {q} setup ({txd} descriptors)"), ret));
            }
        }
        if cfg.promiscuous {
            // SAFETY: valid port.
            let ret = unsafe { ffi::rte_eth_promiscuous_enable(id) };
            // -ENOTSUP is tolerated: several vdevs do not implement it and receive
            // everything anyway. Any other failure (net_af_packet's or net_tap's ioctl on
            // the kernel interface) would leave the port deaf to frames for an address of
            // our own (`--mac`): said now, not found as a silent peer later.
            let unsupported = ret < 0
                && std::io::Error::from_raw_os_error(-ret).kind()
                    == std::io::ErrorKind::Unsupported;
            if ret != 0 && !unsupported {
                return Err(self.err("promiscuous mode".to_string(), ret));
            }
        }
        *lock(&self.shared.taken) = QueuesTaken {
            rx: vec![false; usize::from(cfg.rx_queues)],
            tx: vec![false; usize::from(cfg.tx_queues)],
        };
        self.offloads = off;
        self.data_path_mtu = data_path_mtu;
        self.pool_data_room = Some(pool.data_room());
        Ok(off)
    }

    /// An MTU of 0 (which `rte_eth_dev_configure` replaces by 1500) or past
    /// [`crate::MTU_MAX`] (which the wrappers do not configure) is refused.
    fn check_mtu_range(&self, mtu: u16) -> Result<(), Error> {
        if mtu == 0 || usize::from(mtu) > crate::MTU_MAX {
            return Err(Error::Mtu {
                port: self.id(),
                name: self.name().into(),
                mtu,
                why: format!("the IP MTU must be 1 to {}", crate::MTU_MAX),
            });
        }
        Ok(())
    }

    /// The queue and descriptor counts of `cfg` as the port takes them, else an error
    /// naming the count: DPDK replaces none-and-none queues by its default count (which
    /// nobody sets up then: net_memif dereferences the missing queues when its peer
    /// connects), a descriptor count of 0 by the driver's default, and moves any other
    /// outside the driver's limits (`rte_eth_dev_adjust_nb_rx_tx_desc`) to the nearest it
    /// takes. The MTU is checked too ([`Port::check_mtu_range`]).
    fn check_counts(&self, cfg: &PortConfig) -> Result<(u16, u16), Error> {
        let refuse = |why: String| Error::PortConfig {
            port: self.id(),
            name: self.name().into(),
            why,
        };
        if cfg.rx_queues == 0 && cfg.tx_queues == 0 {
            return Err(refuse(
                "no rx and no tx queue asked for (at least one)".into(),
            ));
        }
        if let Some(mtu) = cfg.mtu {
            self.check_mtu_range(mtu)?;
        }
        let (mut rxd, mut txd) = (cfg.rx_desc, cfg.tx_desc);
        // SAFETY: valid port; the out pointers are valid. The call only reads the device's
        // limits.
        let ret = unsafe { ffi::rte_eth_dev_adjust_nb_rx_tx_desc(self.id(), &mut rxd, &mut txd) };
        if ret != 0 {
            return Err(self.err("rte_eth_dev_adjust_nb_rx_tx_desc", ret));
        }
        for (kind, asked, takes, queues) in [
            ("rx", cfg.rx_desc, rxd, cfg.rx_queues),
            ("tx", cfg.tx_desc, txd, cfg.tx_queues),
        ] {
            if queues > 0 && asked == 0 {
                return Err(refuse(format!(
                    "{kind}_desc 0: a {kind} queue needs descriptors"
                )));
            }
            if queues > 0 && asked != takes {
                return Err(refuse(format!(
                    "{kind}_desc {asked} is outside the limits of {} (the nearest count it \
                     takes is {takes})",
                    self.info.driver
                )));
            }
        }
        Ok((rxd, txd))
    }

    /// On a port that sends no chained mbufs: whether one mbuf of a pool with `data_room`
    /// holds a whole Ethernet frame of IP MTU `mtu` (the ethdev default where `None`), else
    /// an error naming the data room it needs. A longer frame would have to go as a chain,
    /// which such a port cannot send (the device drops it, counted, and the TCP would resend
    /// it in vain): refused here, at start-up (or by [`Port::set_mtu`]), instead.
    fn check_pool_holds_frames(&self, mtu: Option<u16>, data_room: u16) -> Result<(), Error> {
        let mtu = mtu.unwrap_or(ffi::RTE_ETHER_MTU as u16);
        let frame = u32::from(mtu) + 14;
        let headroom = ffi::RTE_PKTMBUF_HEADROOM;
        let room = u32::from(data_room).saturating_sub(headroom);
        if frame <= room {
            return Ok(());
        }
        Err(Error::Mtu {
            port: self.id(),
            name: self.name().into(),
            mtu,
            why: format!(
                "{} sends no chained mbufs (no RTE_ETH_TX_OFFLOAD_MULTI_SEGS), and a \
                 {frame}-octet frame does not fit one mbuf of the pool ({room} octets past \
                 the headroom): give the pool a data room of at least {}",
                self.info.driver,
                frame + headroom
            ),
        })
    }

    /// Whether the mbufs of the configured port's pool (`data_room`) carry frames of IP MTU
    /// `mtu` as [`Port::configure`] set the port up: one mbuf holds a whole frame where the
    /// port sends no chains ([`Port::check_pool_holds_frames`]), and where receive scatter
    /// would be needed for the frame (the port offers it) it was enabled. Without it a
    /// driver reads each frame into one mbuf and drops the longer ones (net_tap's
    /// `pmd_rx_burst`, DPDK 22.11): an MTU raised past that by [`Port::set_mtu`] made every
    /// full-sized frame vanish on receive. Else an error saying to configure the port for
    /// the MTU.
    fn check_pool_takes_mtu(&self, mtu: u16, data_room: u16) -> Result<(), Error> {
        if !self.offloads.tx_multi_segs {
            self.check_pool_holds_frames(Some(mtu), data_room)?;
        }
        if let Some((frame, room)) = self
            .needs_rx_scatter(mtu, data_room)
            .filter(|_| !self.offloads.rx_scatter)
        {
            return Err(Error::Mtu {
                port: self.id(),
                name: self.name().into(),
                mtu,
                why: format!(
                    "a {frame}-octet frame does not fit one mbuf of the pool ({room} octets \
                     past the headroom) and the port was configured without receive \
                     scatter: configure it with this MTU (Port::configure) instead"
                ),
            });
        }
        Ok(())
    }

    /// Whether a frame of IP MTU `mtu` (header and CRC, as ethdev counts one) needs receive
    /// scatter on this port: it is longer than one mbuf of a pool with `data_room` past the
    /// headroom, and the port offers scatter (one that does not cannot receive it chained
    /// either way). `Some((frame, room))` if so, for the error that names them.
    fn needs_rx_scatter(&self, mtu: u16, data_room: u16) -> Option<(u32, u32)> {
        let frame = u32::from(mtu) + 18;
        let room = u32::from(data_room).saturating_sub(ffi::RTE_PKTMBUF_HEADROOM);
        let scatter = u64::from(ffi::RTE_ETH_RX_OFFLOAD_SCATTER);
        (frame > room && self.info.rx_offload_capa & scatter != 0).then_some((frame, room))
    }

    /// Whether frames of IP MTU `mtu` pass this port's data path although the driver
    /// reports a smaller maximum: an error naming what is missing if not.
    fn check_data_path_mtu(&self, mtu: u16) -> Result<(), Error> {
        let fail = |why: String| Error::Mtu {
            port: self.id(),
            name: self.name().into(),
            mtu,
            why,
        };
        let frame = u32::from(mtu) + 14;
        if frame > self.info.frame_max {
            let why = if self.info.driver == "net_af_packet" {
                format!(
                    "net_af_packet carries frames of up to {} octets with framesz {} \
                     (DPDK reports {}): give it framesz={AF_PACKET_JUMBO_FRAMESZ} and \
                     blocksz={AF_PACKET_JUMBO_BLOCKSZ}",
                    self.info.frame_max,
                    devarg(&self.info.devargs, "framesz").unwrap_or(AF_PACKET_FRAMESZ_DEFAULT),
                    self.info.max_rx_pktlen
                )
            } else {
                format!(
                    "{} takes frames of up to {} octets",
                    self.info.driver, self.info.max_rx_pktlen
                )
            };
            return Err(fail(why));
        }
        if self.info.driver == "net_af_packet" {
            // The kernel refuses to send a frame longer than its interface's MTU allows.
            let iface: String = devarg(&self.info.devargs, "iface").unwrap_or_default();
            let path = format!("/sys/class/net/{iface}/mtu");
            let kernel = std::fs::read_to_string(&path)
                .ok()
                .and_then(|s| s.trim().parse::<u32>().ok());
            match kernel {
                Some(k) if k >= u32::from(mtu) => {}
                Some(k) => {
                    return Err(fail(format!(
                        "the kernel interface {iface} has MTU {k} (ip link set {iface} mtu {mtu})"
                    )))
                }
                None => return Err(fail(format!("cannot read {path}"))),
            }
        }
        Ok(())
    }

    /// Starts the device.
    ///
    /// A net_memif port also has the EAL interrupt thread map its shared rings and buffers
    /// as soon as its link comes up (see [`prefault_memif_regions`]), so that without
    /// hugepages the first lap of each ring does not take a page fault per buffer page on
    /// the engine core, in the middle of the first transfer.
    pub fn start(&mut self) -> Result<(), Error> {
        // SAFETY: valid, configured port.
        let ret = unsafe { ffi::rte_eth_dev_start(self.id()) };
        if ret != 0 {
            return Err(self.err("rte_eth_dev_start", ret));
        }
        if self.info.driver == "net_memif" {
            // SAFETY: the shim only arms an EAL alarm carrying the port id; its callback
            // checks that the id is still a valid port before each use, and runs on the
            // interrupt thread, serialised with net_memif's handler that maps and unmaps
            // the regions.
            let r = unsafe { ffi::wc_memif_prefault_on_link_up(self.id()) };
            if r != 0 {
                // Only an optimisation: the rings fault in on first use as before.
                eprintln!(
                    "dpdk-sys: port {} ({}): net_memif's regions will not be prefaulted: {}",
                    self.id(),
                    self.name(),
                    Error::code_reason(r)
                );
            }
        }
        Ok(())
    }

    /// Stops the device. Refused with [`Error::QueuesInUse`] while queue handles taken from
    /// the port are alive (drop them first).
    pub fn stop(&mut self) -> Result<(), Error> {
        self.refuse_with_live_queues("stop")?;
        // SAFETY: valid port.
        let ret = unsafe { ffi::rte_eth_dev_stop(self.id()) };
        if ret != 0 {
            return Err(self.err("rte_eth_dev_stop", ret));
        }
        Ok(())
    }

    /// The current MTU: the one [`Port::configure`] or [`Port::set_mtu`] set past the
    /// driver's reported maximum, if the last of them did; else the driver's.
    pub fn mtu(&self) -> Result<u16, Error> {
        if let Some(m) = self.data_path_mtu {
            return Ok(m);
        }
        let mut mtu = 0u16;
        // SAFETY: valid port; valid out pointer.
        let ret = unsafe { ffi::rte_eth_dev_get_mtu(self.id(), &mut mtu) };
        if ret != 0 {
            return Err(self.err("rte_eth_dev_get_mtu", ret));
        }
        Ok(mtu)
    }

    /// Changes the MTU of a configured port, as [`Port::configure`] sets it: an MTU whose
    /// frames exceed what the driver reports is set where the driver's data path carries
    /// them (the ethdev layer keeps its MTU; [`Error::Mtu`] says what is missing if it does
    /// not), any other is the driver's to set (`rte_eth_dev_set_mtu`; net_memif and net_ring
    /// have no MTU operation in DPDK 22.11 and refuse). Either way [`Port::mtu`] returns it
    /// from then on; on an error the MTU is unchanged. On a configured port the pool it was
    /// configured with must carry the MTU's frames as `configure` set the port up, else
    /// [`Error::Mtu`]: one mbuf must hold a whole frame on a port that sends no chained
    /// mbufs, and a frame longer than one mbuf needs receive scatter where the port offers
    /// it, which only `configure` enables (configure the port with the MTU instead).
    pub fn set_mtu(&mut self, mtu: u16) -> Result<(), Error> {
        self.check_mtu_range(mtu)?;
        if let Some(data_room) = self.pool_data_room {
            self.check_pool_takes_mtu(mtu, data_room)?;
        }
        let data_path = u32::from(mtu) + 18 > self.info.max_rx_pktlen;
        if data_path {
            self.check_data_path_mtu(mtu)?;
        } else {
            // SAFETY: valid port.
            let ret = unsafe { ffi::rte_eth_dev_set_mtu(self.id(), mtu) };
            if ret != 0 {
                return Err(self.err(format!("rte_eth_dev_set_mtu({mtu})"), ret));
            }
        }
        // A data-path MTU set earlier no longer holds once the driver's is the port's again
        // (net_af_packet lowered from a jumbo MTU, say).
        self.data_path_mtu = data_path.then_some(mtu);
        Ok(())
    }

    /// The port's MAC address.
    pub fn mac(&self) -> Result<[u8; 6], Error> {
        let mut a = ffi::rte_ether_addr::default();
        // SAFETY: valid port; valid out pointer.
        let ret = unsafe { ffi::rte_eth_macaddr_get(self.id(), &mut a) };
        if ret != 0 {
            return Err(self.err("rte_eth_macaddr_get", ret));
        }
        Ok(a.addr_bytes)
    }

    /// Link status without waiting.
    pub fn link_status(&self) -> Result<LinkStatus, Error> {
        let mut l = ffi::rte_eth_link::default();
        // SAFETY: valid port; valid out pointer.
        let ret = unsafe { ffi::rte_eth_link_get_nowait(self.id(), &mut l) };
        if ret != 0 {
            return Err(self.err("rte_eth_link_get_nowait", ret));
        }
        Ok(link_status_of(&l))
    }

    /// Basic counters.
    pub fn stats(&self) -> Result<PortStats, Error> {
        let mut s = ffi::rte_eth_stats::default();
        // SAFETY: valid port; valid out pointer.
        let ret = unsafe { ffi::rte_eth_stats_get(self.id(), &mut s) };
        if ret != 0 {
            return Err(self.err("rte_eth_stats_get", ret));
        }
        Ok(PortStats {
            ipackets: s.ipackets,
            opackets: s.opackets,
            ibytes: s.ibytes,
            obytes: s.obytes,
            imissed: s.imissed,
            ierrors: s.ierrors,
            oerrors: s.oerrors,
            rx_nombuf: s.rx_nombuf,
        })
    }

    /// Extended, driver-specific counters.
    pub fn xstats(&self) -> Result<Vec<XStat>, Error> {
        let id = self.id();
        // SAFETY: valid port; a NULL array with size 0 asks for the count.
        let mut n = unsafe { ffi::rte_eth_xstats_get_names(id, std::ptr::null_mut(), 0) };
        // A driver may add counters between the calls (a queue set up meanwhile): DPDK then
        // returns the size it needs without filling the arrays, and we ask again.
        let mut tries = 0;
        let (names, vals, count) = loop {
            if n < 0 {
                return Err(self.err("rte_eth_xstats_get_names", n));
            }
            let mut names = vec![ffi::rte_eth_xstat_name::default(); n as usize];
            let mut vals = vec![ffi::rte_eth_xstat::default(); n as usize];
            // SAFETY: both arrays hold n entries.
            let got = unsafe { ffi::rte_eth_xstats_get_names(id, names.as_mut_ptr(), n as u32) };
            if got < 0 {
                return Err(self.err("rte_eth_xstats_get_names", got));
            }
            // SAFETY: as above.
            let got2 = unsafe { ffi::rte_eth_xstats_get(id, vals.as_mut_ptr(), n as u32) };
            if got2 < 0 {
                return Err(self.err("rte_eth_xstats_get", got2));
            }
            match xstats_count(n, got, got2) {
                Ok(count) => break (names, vals, count),
                Err(need) if tries < 3 => {
                    tries += 1;
                    n = need;
                }
                Err(need) => {
                    return Err(Error::Port {
                        port: id,
                        name: self.name().into(),
                        op: "rte_eth_xstats_get".into(),
                        reason: format!(
                            "the driver's counter count kept changing ({n}, then {need})"
                        ),
                    })
                }
            }
        };
        Ok(vals[..count]
            .iter()
            .map(|v| {
                // A value's id indexes the name table; a driver bug must not index out of it.
                let name = match names.get(v.id as usize) {
                    Some(n) => {
                        // DPDK NUL-terminates names inside the 64-byte array; read no further.
                        let bytes: Vec<u8> = n
                            .name
                            .iter()
                            .take_while(|&&c| c != 0)
                            .map(|&c| c as u8)
                            .collect();
                        String::from_utf8_lossy(&bytes).into_owned()
                    }
                    None => format!("xstat{}", v.id),
                };
                XStat {
                    name,
                    value: v.value,
                }
            })
            .collect())
    }

    /// Resets the basic counters.
    pub fn reset_stats(&mut self) -> Result<(), Error> {
        // SAFETY: valid port.
        let ret = unsafe { ffi::rte_eth_stats_reset(self.id()) };
        if ret != 0 {
            return Err(self.err("rte_eth_stats_reset", ret));
        }
        Ok(())
    }

    /// Marks queue `queue` of `kind` taken: an error if it is not configured or has a live
    /// handle.
    fn take_queue(&mut self, kind: &'static str, queue: u16) -> Result<(), Error> {
        let port = self.id();
        let mut taken = lock(&self.shared.taken);
        let slots = if kind == "rx" {
            &mut taken.rx
        } else {
            &mut taken.tx
        };
        let slot = slots.get_mut(usize::from(queue)).ok_or(Error::Queue {
            port,
            kind,
            queue,
            why: "not configured",
        })?;
        if std::mem::replace(slot, true) {
            return Err(Error::Queue {
                port,
                kind,
                queue,
                why: "already taken",
            });
        }
        Ok(())
    }

    /// Takes the handle of rx queue `queue`: one live handle per queue (dropping it lets the
    /// queue be taken again).
    pub fn rx_queue(&mut self, queue: u16) -> Result<RxQueue, Error> {
        self.take_queue("rx", queue)?;
        Ok(RxQueue {
            shared: Arc::clone(&self.shared),
            port: self.id(),
            queue,
            scratch: Box::new([std::ptr::null_mut(); BURST_MAX]),
            malformed: 0,
        })
    }

    /// Takes the handle of tx queue `queue`: one live handle per queue (dropping it lets the
    /// queue be taken again).
    pub fn tx_queue(&mut self, queue: u16) -> Result<TxQueue, Error> {
        self.take_queue("tx", queue)?;
        Ok(TxQueue {
            shared: Arc::clone(&self.shared),
            port: self.id(),
            queue,
            offloads: self.offloads,
            scratch: Box::new([std::ptr::null_mut(); BURST_MAX]),
        })
    }
}

/// The unique handle of one rx queue.
#[derive(Debug)]
pub struct RxQueue {
    shared: Arc<PortShared>,
    port: u16,
    queue: u16,
    scratch: Box<[*mut ffi::rte_mbuf; BURST_MAX]>,
    /// Packets `rx_burst` freed unread: their layout did not hold (`Mbuf::layout_holds`).
    malformed: u64,
}

// SAFETY: the handle is the only user of its queue; DPDK allows a queue to be polled from any
// single thread at a time, and &mut self enforces that.
unsafe impl Send for RxQueue {}

impl Drop for RxQueue {
    fn drop(&mut self) {
        // The port's queues are not reconfigured while this handle lives, so the slot is
        // the one it was taken from.
        if let Some(t) = lock(&self.shared.taken).rx.get_mut(usize::from(self.queue)) {
            *t = false;
        }
    }
}

impl RxQueue {
    /// Port id.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Queue index.
    pub fn queue(&self) -> u16 {
        self.queue
    }

    /// Receives up to `max` (at most [`BURST_MAX`]) packets, appending them to `out`.
    /// Returns how many were appended.
    ///
    /// A packet whose segment lengths do not hold together (a segment's data past its
    /// buffer, data lengths that do not add up to the packet length, a chain longer or
    /// shorter than its segment count: the length checks of DPDK's `rte_mbuf_check`) is
    /// freed unread and counted ([`RxQueue::malformed`]): only a driver's bug (or a ring
    /// port's producer's) makes one, and reading it would read past its buffers.
    pub fn rx_burst(&mut self, out: &mut impl Extend<Mbuf>, max: usize) -> usize {
        let n_max = max.min(BURST_MAX) as u16;
        // SAFETY: scratch has room for n_max pointers; this handle owns the queue.
        let n = unsafe { ffi::wc_rx_burst(self.port, self.queue, self.scratch.as_mut_ptr(), n_max) }
            as usize;
        if n == 0 {
            // An idle poll's answer: nothing to check or hand over.
            return 0;
        }
        let (mut kept, malformed) = (0, &mut self.malformed);
        out.extend(self.scratch[..n].iter().filter_map(|&p| {
            let Some(p) = NonNull::new(p) else {
                *malformed += 1;
                return None;
            };
            // SAFETY: rx_burst returned n mbufs whose ownership passes to us; their layout
            // is checked next, before anything reads their data (a packet whose layout
            // does not hold is freed: rte_pktmbuf_free reads no length).
            let m = unsafe { Mbuf::from_raw(p) };
            if m.layout_holds() {
                kept += 1;
                Some(m)
            } else {
                *malformed += 1;
                None
            }
        }));
        kept
    }

    /// Packets [`RxQueue::rx_burst`] freed unread because their segment lengths did not
    /// hold together (a driver's bug).
    pub fn malformed(&self) -> u64 {
        self.malformed
    }
}

/// The unique handle of one tx queue.
#[derive(Debug)]
pub struct TxQueue {
    shared: Arc<PortShared>,
    port: u16,
    queue: u16,
    offloads: Offloads,
    scratch: Box<[*mut ffi::rte_mbuf; BURST_MAX]>,
}

// SAFETY: as for RxQueue.
unsafe impl Send for TxQueue {}

impl Drop for TxQueue {
    fn drop(&mut self) {
        // As for RxQueue.
        if let Some(t) = lock(&self.shared.taken).tx.get_mut(usize::from(self.queue)) {
            *t = false;
        }
    }
}

impl TxQueue {
    /// Port id.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Queue index.
    pub fn queue(&self) -> u16 {
        self.queue
    }

    /// Offloads enabled on the port when this handle was taken.
    pub fn offloads(&self) -> Offloads {
        self.offloads
    }

    /// Transmits packets from the front of `pkts` (at most [`BURST_MAX`] per call). The
    /// packets the driver took are removed from `pkts` (it frees them once sent); those a full
    /// ring refused stay in `pkts`, in order, for the next call. Returns the number sent.
    ///
    /// A packet whose offload metadata does not fit it ([`Mbuf::check_tx_offload`], which
    /// [`TxQueue::tx_prepare`] counts unfit) is never handed to the driver: the burst stops
    /// before it, and it stays at the front of `pkts` (drop it to send what follows).
    pub fn tx_burst(&mut self, pkts: &mut Vec<Mbuf>) -> usize {
        let n = fit_prefix(pkts);
        if n == 0 {
            return 0;
        }
        for (slot, m) in self.scratch.iter_mut().zip(pkts.iter()) {
            // The pointer is lent to the driver; ownership moves only for the sent prefix.
            *slot = m.as_raw();
        }
        // SAFETY: scratch holds n valid mbufs owned by `pkts`, each with offload lengths
        // inside its first segment (fit_prefix); the driver takes ownership of the first
        // `sent` of them.
        let sent =
            unsafe { ffi::wc_tx_burst(self.port, self.queue, self.scratch.as_mut_ptr(), n as u16) }
                as usize;
        for m in pkts.drain(..sent) {
            let _ = m.into_raw();
        }
        sent
    }

    /// Has the driver check and fix up the packets at the front of `pkts` (at most
    /// [`BURST_MAX`]) for the offloads they ask for (`rte_eth_tx_prepare`: a NIC's own
    /// pseudo-header checksum rules, its smallest TSO segment, ...). Returns how many from
    /// the front are fit to send; when fewer than were looked at, the packet after them is
    /// not, and sending it would fail or misbehave. A packet whose offload metadata does not
    /// fit it ([`Mbuf::check_tx_offload`]) is unfit before the driver looks at it.
    pub fn tx_prepare(&mut self, pkts: &mut [Mbuf]) -> usize {
        let n = fit_prefix(pkts);
        if n == 0 {
            return 0;
        }
        for (slot, m) in self.scratch.iter_mut().zip(pkts.iter()) {
            *slot = m.as_raw();
        }
        // SAFETY: scratch holds n valid mbufs owned by `pkts`, borrowed mutably for the
        // call, each with offload lengths inside its first segment (fit_prefix); the driver
        // only reads and fixes up their headers and flags.
        let ready = unsafe {
            ffi::wc_tx_prepare(self.port, self.queue, self.scratch.as_mut_ptr(), n as u16)
        };
        usize::from(ready)
    }
}

/// How many packets from the front of `pkts` (at most [`BURST_MAX`]) may be handed to a
/// driver: up to the first whose offload lengths leave its first segment
/// ([`Mbuf::check_tx_offload`]).
fn fit_prefix(pkts: &[Mbuf]) -> usize {
    pkts.iter()
        .take(BURST_MAX)
        .take_while(|m| m.tx_offload_fits())
        .count()
}

/// What `rte_eth_link_get_nowait` said of a link. A speed the driver cannot tell
/// (`RTE_ETH_SPEED_NUM_UNKNOWN`, all bits set: virtio before it is negotiated, say) is 0, as
/// [`LinkStatus::speed_mbps`] documents, not 4,294,967,295 Mbit/s.
fn link_status_of(l: &ffi::rte_eth_link) -> LinkStatus {
    LinkStatus {
        up: u32::from(l.link_status()) == ffi::RTE_ETH_LINK_UP,
        speed_mbps: if l.link_speed == ffi::RTE_ETH_SPEED_NUM_UNKNOWN {
            0
        } else {
            l.link_speed
        },
        full_duplex: l.link_duplex() != 0,
    }
}

/// How many extended counters of a call that offered arrays of `n` may be read, given what
/// `rte_eth_xstats_get_names` (`names`) and `rte_eth_xstats_get` (`values`) returned; or,
/// when either needs more than `n` (the driver added counters since it was asked for the
/// count: DPDK then fills nothing and returns the size it needs), that size.
fn xstats_count(n: i32, names: i32, values: i32) -> Result<usize, i32> {
    let need = names.max(values);
    if need > n {
        return Err(need);
    }
    Ok(names.min(values).max(0) as usize)
}

/// The receive checksum offloads to ask of a port with capabilities `rx_capa`: IPv4's and
/// TCP's together, or none (see `Port::configure`).
fn rx_checksum_offloads(rx_capa: u64) -> u64 {
    let pair = u64::from(ffi::RTE_ETH_RX_OFFLOAD_IPV4_CKSUM | ffi::RTE_ETH_RX_OFFLOAD_TCP_CKSUM);
    if rx_capa & pair == pair {
        pair
    } else {
        0
    }
}

/// The NUMA socket argument of `rte_eth_rx_queue_setup` and `rte_eth_tx_queue_setup` (a C
/// `unsigned int`) for a port whose `rte_eth_dev_socket_id` is `dev_socket`: that socket, or
/// `SOCKET_ID_ANY` (-1 as the unsigned the calls take, which they document as "no NUMA
/// constraint") where DPDK could not tell it and answered -1 (a vdev, a machine of one
/// node, a NIC whose firmware names none). That answer used to become socket 0: the
/// descriptor rings were then asked of node 0, whose memory a process bound to another node
/// (or an EAL given memory on another node only) does not have.
fn queue_socket(dev_socket: i32) -> u32 {
    if dev_socket < 0 {
        ffi::SOCKET_ID_ANY as u32
    } else {
        dev_socket as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `rte_eth_dev_socket_id`'s -1 (socket unknown) reaches the queue setup calls as
    /// `SOCKET_ID_ANY` (all bits set in their `unsigned int`), not as socket 0; a known
    /// socket passes unchanged.
    #[test]
    fn an_unknown_port_socket_sets_queues_up_on_any_socket_not_socket_0() {
        assert_eq!(ffi::SOCKET_ID_ANY, -1);
        assert_eq!(queue_socket(-1), u32::MAX);
        assert_eq!(queue_socket(-1), ffi::SOCKET_ID_ANY as u32);
        assert_eq!(queue_socket(0), 0);
        assert_eq!(queue_socket(1), 1);
        assert_eq!(queue_socket(7), 7);
    }

    /// A port that verifies TCP checksums but not IPv4's (virtio) gets neither asked of
    /// it: asking for TCP's alone makes virtio hand over partial checksums, which the
    /// stack's software check (on, for want of the IPv4 offload) would drop.
    #[test]
    fn receive_checksum_offload_is_asked_as_a_pair_or_not_at_all() {
        let ip = u64::from(ffi::RTE_ETH_RX_OFFLOAD_IPV4_CKSUM);
        let tcp = u64::from(ffi::RTE_ETH_RX_OFFLOAD_TCP_CKSUM);
        let udp = u64::from(ffi::RTE_ETH_RX_OFFLOAD_UDP_CKSUM);
        assert_eq!(rx_checksum_offloads(tcp | udp), 0);
        assert_eq!(rx_checksum_offloads(ip), 0);
        assert_eq!(rx_checksum_offloads(ip | tcp | udp), ip | tcp);
        assert_eq!(rx_checksum_offloads(0), 0);
    }

    /// A port (and its queue handles) may be handed to another thread; the port is not
    /// shared (its doc test checks it is not `Sync`).
    #[test]
    fn ports_and_queue_handles_move_between_threads() {
        fn sent<T: Send>() {}
        sent::<Port>();
        sent::<RxQueue>();
        sent::<TxQueue>();
    }

    /// A driver that grows its counter list between the count and the read must not make
    /// `xstats` slice past its arrays: the larger size is asked for again.
    #[test]
    fn xstats_counts_never_exceed_the_arrays() {
        assert_eq!(xstats_count(10, 10, 10), Ok(10));
        assert_eq!(xstats_count(10, 8, 10), Ok(8));
        assert_eq!(xstats_count(10, 10, 12), Err(12));
        assert_eq!(xstats_count(10, 14, 10), Err(14));
        assert_eq!(xstats_count(0, 0, 0), Ok(0));
    }

    /// A driver that cannot tell its link's speed (virtio before the speed is negotiated,
    /// say) reports `RTE_ETH_SPEED_NUM_UNKNOWN`, all bits set: [`LinkStatus::speed_mbps`]
    /// says 0 then, as its docs promise, not 4,294,967,295 Mbit/s. A known speed passes.
    #[test]
    fn an_unknown_link_speed_reads_as_0() {
        let mut l = ffi::rte_eth_link::default();
        l.set_link_status(ffi::RTE_ETH_LINK_UP as u16);
        l.link_speed = ffi::RTE_ETH_SPEED_NUM_UNKNOWN;
        let s = link_status_of(&l);
        assert!(s.up);
        assert_eq!(s.speed_mbps, 0, "unknown speed");
        l.link_speed = ffi::RTE_ETH_SPEED_NUM_10G;
        assert_eq!(link_status_of(&l).speed_mbps, 10_000);
        l.link_speed = ffi::RTE_ETH_SPEED_NUM_NONE;
        assert_eq!(link_status_of(&l).speed_mbps, 0);
    }

    #[test]
    fn devargs_are_read_by_key() {
        let a = "iface=veth0, framesz=10240,blocksz=20480";
        assert_eq!(devarg::<u32>(a, "framesz"), Some(10240));
        assert_eq!(devarg::<u32>(a, "blocksz"), Some(20480));
        assert_eq!(devarg::<String>(a, "iface").as_deref(), Some("veth0"));
        assert_eq!(devarg::<u32>(a, "framecnt"), None);
        assert_eq!(devarg::<u32>("framesz=big", "framesz"), None);
        assert_eq!(devarg::<u32>("", "framesz"), None);
    }

    #[test]
    fn data_path_frame_limits() {
        // af_packet: the kernel writes a received frame at offset 66 of its tpacket frame.
        assert_eq!(
            data_path_frame_max("net_af_packet", "iface=v", 1518),
            2048 - 66
        );
        assert_eq!(
            data_path_frame_max("net_af_packet", AF_PACKET_JUMBO_ARGS, 1518),
            AF_PACKET_JUMBO_FRAMESZ - 66
        );
        assert!(AF_PACKET_JUMBO_FRAMESZ - 66 >= crate::MTU_MAX as u32 + 14);
        // The jumbo frame size is a whole fraction of its block and a multiple of 16
        // (TPACKET_ALIGNMENT); the block is whole pages.
        assert_eq!(AF_PACKET_JUMBO_BLOCKSZ % AF_PACKET_JUMBO_FRAMESZ, 0);
        assert_eq!(AF_PACKET_JUMBO_FRAMESZ % 16, 0);
        assert_eq!(AF_PACKET_JUMBO_BLOCKSZ % 4096, 0);
        // The PMD refuses rx mbufs that cannot hold framesz - 32 octets past the headroom.
        assert_eq!(
            u32::from(AF_PACKET_JUMBO_DATA_ROOM) - 128,
            AF_PACKET_JUMBO_FRAMESZ - 32
        );
        assert!(data_path_frame_max("net_memif", "", 1518) >= crate::MTU_MAX as u32 + 14);
        // Any other driver: what it reports, less the FCS.
        assert_eq!(data_path_frame_max("net_tap", "", 1522), 1518);
        assert_eq!(data_path_frame_max("net_ring", "", 0), 0);
    }
}
