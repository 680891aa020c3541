//! One device layer for every tool: the flags that name a device ([`DeviceArgs`], flattened
//! into each tool's parser), the EAL arguments they make ([`DeviceArgs::eal_args`]), and the
//! one path that brings a device up ([`DeviceArgs::open_port`], [`DeviceArgs::open_ring_pair`]
//! for DPDK ports; [`DeviceArgs::open_engine`] and [`DeviceArgs::open_engine_pair`] start
//! Warpcore engines on them).
//!
//! The EAL is initialised once per process from the typed builder of `warpcore-dpdk-sys`:
//! `--eal` verbatim when given, otherwise no hugepages (or hugepages without files when
//! the free 2 MB pages hold all of the EAL's memory, `-m`: 256 MB, 1,024 MB for jumbo
//! frames), no shared configuration, no telemetry, a per-process file prefix, no PCI scan
//! unless `--pci` names a NIC, and the vdevs of `--vdev` and `--memif`.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};

/// Which loopback (`--loopback`).
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loopback {
    /// net_ring when built with DPDK, else the in-memory link.
    Auto,
    /// Two DPDK net_ring ports joined back to back.
    Ring,
    /// The in-memory link (no DPDK).
    Link,
    /// Two DPDK net_memif ports of this process, a memif server and its client, joined
    /// through one socket in a private directory: the shared-memory rings and the driver
    /// two processes use, with both engines in one process.
    Memif,
}

/// An IPv4 address with its prefix length (`--ip A.B.C.D[/LEN]`, /24 when not given).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpPrefix {
    /// The address.
    pub addr: Ipv4Addr,
    /// The prefix length, 0 to 32.
    pub len: u8,
}

impl std::str::FromStr for IpPrefix {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (a, l) = s.split_once('/').unwrap_or((s, "24"));
        let addr: Ipv4Addr = a
            .parse()
            .map_err(|_| format!("bad IPv4 address {a:?} (expected e.g. 198.18.0.2/24)"))?;
        let len: u8 = l
            .parse()
            .ok()
            .filter(|l| *l <= 32)
            .ok_or_else(|| format!("bad prefix length {l:?} (0 to 32)"))?;
        if let Some(why) = not_a_host_address(addr, len) {
            return Err(format!("{addr}/{len} is {why}, not a host's address"));
        }
        Ok(IpPrefix { addr, len })
    }
}

/// Why `addr` on a network of prefix `len` cannot be a host's own address (RFC 1122
/// 3.2.1.3; a /31 has no network or broadcast address, RFC 3021), or `None`.
fn not_a_host_address(addr: Ipv4Addr, len: u8) -> Option<&'static str> {
    let a = u32::from(addr);
    let host_mask = u32::MAX.checked_shr(u32::from(len)).unwrap_or(0);
    if addr.is_unspecified() || addr.octets()[0] == 0 {
        Some("\"this network\" (0.0.0.0/8, RFC 1122 3.2.1.3)")
    } else if addr.is_loopback() {
        Some("a loopback address (127.0.0.0/8, RFC 1122 3.2.1.3)")
    } else if addr.is_multicast() {
        Some("a multicast group (224.0.0.0/4, RFC 1112 4)")
    } else if addr.is_broadcast() {
        Some("the limited broadcast address")
    } else if len <= 30 && a & host_mask == 0 {
        Some("the network's own address (host part all zeros)")
    } else if len <= 30 && a & host_mask == host_mask {
        Some("the network's broadcast address (host part all ones)")
    } else {
        None
    }
}

/// An Ethernet address (`--mac 02:00:00:00:00:01`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mac(pub [u8; 6]);

impl std::str::FromStr for Mac {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("bad Ethernet address {s:?} (expected e.g. 02:00:00:00:00:01)");
        let v: Vec<u8> = s
            .split(':')
            .map(|p| u8::from_str_radix(p, 16))
            .collect::<Result<_, _>>()
            .map_err(|_| bad())?;
        let mac: [u8; 6] = v.try_into().map_err(|_| bad())?;
        // A station's address is an individual one: a frame's source is never a group
        // (I/G bit, the first octet's lowest, set), nor all zeros (IEEE 802 8.2).
        if mac[0] & 1 == 1 {
            return Err(format!(
                "{s:?} is a group (multicast) address, not a station's (its first octet is odd)"
            ));
        }
        if mac == [0; 6] {
            return Err(format!("{s:?} is all zeros, not a station's address"));
        }
        Ok(Mac(mac))
    }
}

/// clap value parser for `--memif PATH`: the path goes into DPDK's device arguments,
/// `key=value` pairs split at ',' and '=', so a path holding either would be cut there (a
/// socket other than the one named, or an EAL error about an argument never given).
fn memif_path(s: &str) -> Result<PathBuf, String> {
    match s.chars().find(|c| matches!(c, ',' | '=')) {
        Some(c) => Err(format!(
            "{s:?}: a memif socket path cannot hold {c:?} (DPDK's device arguments are split \
             there); pick another path"
        )),
        None => Ok(PathBuf::from(s)),
    }
}

/// A CPU list (`--cores 0,2-3`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

/// The largest CPU number a thread can be pinned to: a CPU set (`cpu_set_t`, which the
/// engine's pinning uses) holds CPUs 0 to 1023.
pub const MAX_CPU: usize = 1023;

impl CpuList {
    /// Parses a list in the kernel's format (`0,2-3`), each CPU at most [`MAX_CPU`] (a
    /// range is expanded, so an unbounded one would be an unbounded allocation).
    fn parse(s: &str) -> Result<Vec<usize>, String> {
        let bad = || format!("bad CPU list {s:?} (expected e.g. 0,1 or 0-3)");
        let cpu = |c: &str| -> Result<usize, String> {
            let n: usize = c.trim().parse().map_err(|_| bad())?;
            if n > MAX_CPU {
                return Err(format!(
                    "CPU {n} in {s:?}: above {MAX_CPU}, the largest CPU a thread can be pinned to"
                ));
            }
            Ok(n)
        };
        if s.trim().is_empty() {
            return Err(format!("empty CPU list {s:?}"));
        }
        let mut v = Vec::new();
        for part in s.trim().split(',') {
            if part.trim().is_empty() {
                // "0,,1": a CPU left out, not one fewer asked for.
                return Err(format!(
                    "empty element in CPU list {s:?} (expected e.g. 0,1 or 0-3)"
                ));
            }
            match part.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (cpu(a)?, cpu(b)?);
                    if a > b {
                        return Err(bad());
                    }
                    v.extend(a..=b);
                }
                None => v.push(cpu(part)?),
            }
        }
        Ok(v)
    }
}

impl std::str::FromStr for CpuList {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        CpuList::parse(s).map(CpuList)
    }
}

/// The flags that name and shape a device, the same in every tool (flatten them into the
/// tool's parser with `#[command(flatten)]`). A tool refuses, with the reason, the ones it
/// cannot use ([`DeviceArgs::refuse`]).
#[derive(Args, Debug, Clone, Default)]
pub struct DeviceArgs {
    /// Shorthand for a net_memif vdev on this socket path (the serving side is the memif
    /// server, the connecting side its client).
    #[arg(long, value_parser = memif_path, help_heading = "Device")]
    pub memif: Option<PathBuf>,
    /// A DPDK vdev (net_memif0,..., net_tap0,..., net_af_packet0,..., net_ring0), repeatable.
    #[arg(long, help_heading = "Device")]
    pub vdev: Vec<String>,
    /// A NIC by PCI address (EAL -a ADDR; the port is named by it).
    #[arg(long, help_heading = "Device")]
    pub pci: Option<String>,
    /// EAL arguments verbatim, whitespace separated (replace the defaults; --vdev and
    /// --memif are still added).
    #[arg(long, allow_hyphen_values = true, help_heading = "Device")]
    pub eal: Option<String>,
    /// DPDK port name (default: the first vdev's or the PCI device's name, else port 0;
    /// needed when two of --vdev, --memif and --pci are given: the engine runs on one).
    #[arg(long = "dpdk-port", help_heading = "Device")]
    pub dpdk_port: Option<String>,
    /// Both ends in this process: two net_ring ports (DPDK), or the in-memory link.
    #[arg(
        long,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "auto",
        value_enum,
        help_heading = "Device"
    )]
    pub loopback: Option<Loopback>,
    /// This side's IPv4 address and prefix length, e.g. 198.18.0.2/24 (/24 if left out).
    /// With --loopback: the serving end's; the other end takes another host address of
    /// its network.
    #[arg(long, help_heading = "Device")]
    pub ip: Option<IpPrefix>,
    /// Default gateway (refused with --loopback: both ends share one network).
    #[arg(long, help_heading = "Device")]
    pub gateway: Option<Ipv4Addr>,
    /// Ethernet address of this side, an individual one (default: the tool's choice, see
    /// its help; refused with --loopback, where each end has its own).
    #[arg(long, help_heading = "Device")]
    pub mac: Option<Mac>,
    /// CPUs: the first runs the application (the EAL's main lcore), the others the engine
    /// core(s); one CPU is shared by both. With --loopback, at most three: the second for
    /// the server's engine core, the third for the client's.
    #[arg(long, help_heading = "Device")]
    pub cores: Option<CpuList>,
    /// IP MTU of the port (576 to 9000; default: the port's own).
    /// (`-m` too, as perftest spells it; perftest's 256 and 512 are below what an IPv4 host
    /// must take, 576 octets, RFC 791.)
    #[arg(short = 'm', long, value_parser = clap::value_parser!(u16).range(576..=9000), help_heading = "Device")]
    pub mtu: Option<u16>,
    /// Skip IPv4/TCP checksums (send zero, verify nothing), as the kernel's loopback does.
    /// net_memif only (shared memory between two processes, no wire), and both sides must
    /// give it: a side that still verifies drops every frame of the other.
    #[arg(long = "no-csum", help_heading = "Device")]
    pub no_csum: bool,
    /// Hand the port TSO super-frames: a connection's consecutive segments of one length (the
    /// last may be shorter) go to the port as one frame it cuts back into the same segments.
    /// Ports with TSO (net_tap, most NICs) only; net_tap cuts only segments 14 octets short
    /// of its MTU (docs/net.md).
    #[arg(long, help_heading = "Device")]
    pub tso: bool,
    /// Record this side's traffic as pcapng (Wireshark, iwdump).
    #[arg(long, help_heading = "Device")]
    pub capture: Option<PathBuf>,
}

/// How long an engine core keeps a net_memif port open after it stopped polling
/// (`EngineConfig::shutdown_linger_ms`).
pub const MEMIF_LINGER_MS: u64 = 300;

/// Which end of a `--memif` socket this process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemifRole {
    /// The memif server (creates the socket): the tool's serving side.
    Server,
    /// The memif client: the tool's connecting side.
    Client,
}

impl MemifRole {
    /// The memif role of a tool's side: the serving side is the memif server.
    pub fn serving(serving: bool) -> MemifRole {
        if serving {
            MemifRole::Server
        } else {
            MemifRole::Client
        }
    }
}

/// A device that could not be brought up, or flags that cannot go together.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DeviceError {
    /// No device was named.
    #[error("no device: give {0}")]
    NoDevice(&'static str),
    /// A flag this tool (or this combination) cannot honour.
    #[error("{flag}: {why}")]
    Refused {
        /// The flag.
        flag: &'static str,
        /// Why not.
        why: String,
    },
    /// A memif socket path is in use by a live process, or a stale one cannot be removed.
    #[error("memif socket {path} {why}")]
    MemifSocket {
        /// The socket path.
        path: String,
        /// What is wrong.
        why: String,
    },
    /// A DPDK call failed.
    #[cfg(feature = "dpdk")]
    #[error("{what}: {source}")]
    Dpdk {
        /// What was being done.
        what: String,
        /// DPDK's error.
        #[source]
        source: warpcore_verbs::dpdk::dpdk_sys::Error,
    },
    /// The EAL refused its arguments.
    #[cfg(feature = "dpdk")]
    #[error(
        "DPDK EAL initialisation failed: {source}\n  (check --vdev/--memif/--pci/--eal; the \
         EAL arguments were: {args})"
    )]
    Eal {
        /// The arguments given to the EAL.
        args: String,
        /// DPDK's error.
        #[source]
        source: warpcore_verbs::dpdk::dpdk_sys::Error,
    },
    /// Warpcore refused the port or the engine configuration.
    #[error("{what}: {source}")]
    Verbs {
        /// What was being done.
        what: &'static str,
        /// Warpcore's error.
        #[source]
        source: warpcore_verbs::Error,
    },
}

fn hugepages_free() -> u64 {
    std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// The file DPDK's pcapng writer fills; [`finish_capture`] rewrites it to `--capture`.
pub fn raw_capture_path(p: &Path) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(".dpdk-raw");
    PathBuf::from(s)
}

/// After the engine (or port) is dropped: rewrites DPDK's raw capture of `--capture PATH` as
/// plain pcapng at PATH ([`crate::pcapng::clean_report`]) and removes the raw file. Returns
/// the number of frames. A raw file cut short (the writer failed, say on a full disk) is an
/// error naming where it stopped: PATH then holds the frames before the cut, and the raw
/// file is kept, but the capture is not the run's whole traffic, and a judge reading the
/// rewritten file could not tell.
pub fn finish_capture(path: &Path) -> Result<u64, String> {
    let raw = raw_capture_path(path);
    let c = crate::pcapng::clean_report(&raw, path).map_err(|e| format!("--capture: {e}"))?;
    if let Some((at, why)) = c.cut {
        return Err(format!(
            "--capture: {} is cut short at octet {at} ({why}): only the {} frames before \
             it are in {}",
            raw.display(),
            c.packets,
            path.display()
        ));
    }
    let _ = std::fs::remove_file(&raw);
    Ok(c.packets)
}

/// A memif server refuses to start on a socket file left by a dead process, and two servers
/// on one live socket would steal each other's peer: remove a stale file, refuse a live one.
pub fn check_memif_socket(vdev: &str) -> Result<(), DeviceError> {
    check_memif_socket_in(vdev, || std::fs::read_to_string("/proc/net/unix"))
}

/// [`check_memif_socket`] with the kernel's table of Unix sockets read by `unix_table`.
fn check_memif_socket_in(
    vdev: &str,
    unix_table: impl FnOnce() -> std::io::Result<String>,
) -> Result<(), DeviceError> {
    if !vdev.starts_with("net_memif") {
        return Ok(());
    }
    let kv = |key: &str| {
        vdev.split(',')
            .find_map(|p| p.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
    };
    if kv("role") != Some("server") || kv("socket-abstract") != Some("no") {
        return Ok(());
    }
    let Some(sock) = kv("socket") else {
        return Ok(());
    };
    let path = Path::new(sock);
    if !path.exists() {
        return Ok(());
    }
    // memif listens on a SOCK_SEQPACKET socket, which std cannot connect to; the kernel's
    // table of Unix sockets says whether a process still listens on the path
    // (flag __SO_ACCEPTCON, 0x10000).
    // A table that cannot be read says nothing: taken for empty, it would have made a live
    // server's socket stale, removed under it.
    let table = unix_table().map_err(|e| DeviceError::MemifSocket {
        path: sock.into(),
        why: format!(
            "exists, and whether a process listens on it cannot be told: /proc/net/unix: {e} \
             (remove the file if no memif server uses it)"
        ),
    })?;
    let live = table.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() >= 8 && f[7] == sock && f[3] == "00010000"
    });
    if live {
        return Err(DeviceError::MemifSocket {
            path: sock.into(),
            why: "is busy: another process listens on it (a server already running?); stop \
                  it or pick another socket path"
                .into(),
        });
    }
    std::fs::remove_file(path).map_err(|e| DeviceError::MemifSocket {
        path: sock.into(),
        why: format!("is a stale file that cannot be removed: {e}"),
    })?;
    eprintln!("removed stale memif socket {sock}");
    Ok(())
}

impl DeviceArgs {
    /// Refuses `flag` (set in these arguments) with `why`, for a tool that cannot use it.
    pub fn refuse(&self, flag: &'static str, why: &str) -> Result<(), DeviceError> {
        let set = match flag {
            "--memif" => self.memif.is_some(),
            "--vdev" => !self.vdev.is_empty(),
            "--pci" => self.pci.is_some(),
            "--eal" => self.eal.is_some(),
            "--dpdk-port" => self.dpdk_port.is_some(),
            "--loopback" => self.loopback.is_some(),
            "--ip" => self.ip.is_some(),
            "--gateway" => self.gateway.is_some(),
            "--mac" => self.mac.is_some(),
            "--cores" => self.cores.is_some(),
            "--mtu" => self.mtu.is_some(),
            "--no-csum" => self.no_csum,
            "--tso" => self.tso,
            "--capture" => self.capture.is_some(),
            _ => false,
        };
        if set {
            Err(DeviceError::Refused {
                flag,
                why: why.into(),
            })
        } else {
            Ok(())
        }
    }

    /// The CPUs of `--cores` (empty when not given).
    pub fn cpus(&self) -> &[usize] {
        self.cores.as_ref().map_or(&[], |c| &c.0)
    }

    /// The engine cores' CPUs: all but the first of `--cores`, or the one CPU given.
    pub fn engine_cpus(&self) -> Vec<usize> {
        match self.cpus() {
            [] => Vec::new(),
            [one] => vec![*one],
            [_, rest @ ..] => rest.to_vec(),
        }
    }

    /// The engine CPUs of the two engines of `--loopback` (server's, client's): each runs
    /// one engine core, so the server's takes the first engine CPU of `--cores` and the
    /// client's the second, or both the one given. More than two are refused, naming
    /// `--cores` (handed to both, they failed each engine's open with an error naming no
    /// flag).
    pub fn pair_cpus(&self) -> Result<(Vec<usize>, Vec<usize>), DeviceError> {
        match self.engine_cpus()[..] {
            [] => Ok((Vec::new(), Vec::new())),
            [one] => Ok((vec![one], vec![one])),
            [s, c] => Ok((vec![s], vec![c])),
            _ => Err(DeviceError::Refused {
                flag: "--cores",
                why: "--loopback runs two engine cores, one for each end: give at most \
                      three CPUs (the application's, the server's engine core's, the \
                      client's)"
                    .into(),
            }),
        }
    }

    /// Whether anything names a DPDK port.
    pub fn names_port(&self) -> bool {
        !self.vdev.is_empty() || self.memif.is_some() || self.pci.is_some() || self.eal.is_some()
    }

    /// Refuses flags that name two ports when `--dpdk-port` does not pick one: the engine
    /// runs on one ([`DeviceArgs::port_name`], the first vdev's), and the other (a NIC
    /// probed, a memif server listening) would be left unused without a word.
    pub fn one_port(&self) -> Result<(), DeviceError> {
        if self.dpdk_port.is_some() {
            return Ok(());
        }
        // In the order `port_name` takes them: the first is used, the others are not.
        let named: Vec<&'static str> = [
            ("--vdev", !self.vdev.is_empty()),
            ("--memif", self.memif.is_some()),
            ("--pci", self.pci.is_some()),
        ]
        .into_iter()
        .filter_map(|(f, set)| set.then_some(f))
        .collect();
        match named[..] {
            [used, unused, ..] => Err(DeviceError::Refused {
                flag: unused,
                why: format!(
                    "{used} names another port, and the engine runs on one: give one of \
                     them, or pick the port with --dpdk-port NAME"
                ),
            }),
            _ => Ok(()),
        }
    }

    /// The vdevs: `--vdev` as given plus the `--memif PATH` shorthand in `role`.
    pub fn vdevs(&self, role: MemifRole) -> Vec<String> {
        let mut v: Vec<String> = self
            .vdev
            .iter()
            .map(|d| match self.af_packet_jumbo_args(d) {
                Some(args) => format!("{d},{args}"),
                None => d.clone(),
            })
            .collect();
        if let Some(sock) = &self.memif {
            let role = match role {
                MemifRole::Server => "server",
                MemifRole::Client => "client",
            };
            v.push(format!(
                "net_memif0,role={role},socket={},socket-abstract=no,{}",
                sock.display(),
                self.memif_ring_args()
            ));
        }
        v
    }

    /// The name of the port to open: `--dpdk-port`, else the first vdev's name, else the
    /// PCI address (`None`: port 0).
    pub fn port_name(&self, role: MemifRole) -> Option<String> {
        self.dpdk_port
            .clone()
            .or_else(|| {
                self.vdevs(role)
                    .first()
                    .map(|v| v.split(',').next().unwrap_or(v).to_string())
            })
            .or_else(|| self.pci.clone())
    }

    /// The EAL arguments (without the program name) for process `tool` in `role`.
    pub fn eal_args(&self, tool: &str, role: MemifRole) -> Vec<String> {
        self.eal_args_with(tool, role, hugepages_free())
    }

    /// [`DeviceArgs::eal_args`] with `free_hugepages` free 2 MB hugepages.
    fn eal_args_with(&self, tool: &str, role: MemifRole, free_hugepages: u64) -> Vec<String> {
        let mut a: Vec<String> = Vec::new();
        match &self.eal {
            Some(s) => a.extend(s.split_whitespace().map(String::from)),
            None => {
                match self.cpus().first() {
                    Some(c) => a.extend(["-l".into(), c.to_string()]),
                    // No --cores: let the main thread (and the engine threads it starts)
                    // float over every CPU.
                    None => a.push(format!(
                        "--lcores=0@(0-{})",
                        std::thread::available_parallelism()
                            .map(|n| n.get() - 1)
                            .unwrap_or(0)
                    )),
                }
                // Jumbo frames need bigger mbufs: give the pool room.
                let mb = if self.jumbo() { 1024 } else { 256 };
                // Hugepages only when they hold all of `-m`: the EAL reserves it at start and
                // fails when it cannot (jumbo frames' 1,024 MB on 256 MB of pages did).
                if free_hugepages >= mb / 2 {
                    a.push("--in-memory".into());
                } else {
                    a.push("--no-huge".into());
                }
                a.extend(["-m".into(), mb.to_string(), "--no-shconf".into()]);
                a.push("--no-telemetry".into());
                a.push("--log-level=error".into());
                let r = match role {
                    MemifRole::Server => "s",
                    MemifRole::Client => "c",
                };
                a.push(format!("--file-prefix={tool}-{r}-{}", std::process::id()));
                match &self.pci {
                    Some(p) => a.extend(["-a".into(), p.clone()]),
                    None => a.push("--no-pci".into()),
                }
            }
        }
        for v in self.vdevs(role) {
            a.push(format!("--vdev={v}"));
        }
        a
    }

    /// Octets of mbuf data room a frame of this MTU needs (at least DPDK's default; with
    /// jumbo frames on net_af_packet, a whole tpacket frame: its rx queue asks for that).
    pub fn data_room(&self) -> u16 {
        let frame = u32::from(self.mtu.unwrap_or(1500)) + 18 + 128;
        let room = u16::try_from(frame.max(2048 + 128)).unwrap_or(u16::MAX);
        #[cfg(feature = "dpdk")]
        if self.jumbo() && self.vdev.iter().any(|d| is_af_packet(d)) {
            return room.max(warpcore_verbs::dpdk::dpdk_sys::AF_PACKET_JUMBO_DATA_ROOM);
        }
        room
    }

    /// The ring arguments of a net_memif port. Up to MTU 1500: 1,024 slots of the
    /// driver's default 2,048-octet buffers (2 MiB a direction). Jumbo frames get buffers
    /// that hold a whole frame (the MTU and 18 octets of Ethernet header and VLAN tag,
    /// rounded up to 1 KiB) and 512 slots (4.5 MiB at MTU 9000): DPDK 22.11's memif
    /// delivers frames chained over several descriptors wrongly, old frames again a ring
    /// lap later (a capture of a write_bw at MTU 9000 with 2,048-octet buffers saw one data
    /// segment in four arrive two to sixty-six times; with whole-frame buffers, every
    /// segment exactly once).
    ///
    /// The slot counts are measured, not round: a ring is memory both processes stream
    /// through, and a smaller one stays in cache. 64 KiB write_bw, three alternating runs
    /// on a 2-vCPU Xeon: 31-34 Gbit/s with 4,096 slots (8 MiB), 36 with 2,048, 39-44 with
    /// 1,024, 41-42 with 512, 39 with 256 (the sender then waits for the ring); at MTU 9000
    /// 57-59 Gbit/s with 1,024 slots, 72-78 with 512, 68-70 with 256. The 64 B message rate
    /// and latency do not move (docs/net.md, "memif rings").
    pub fn memif_ring_args(&self) -> String {
        if self.jumbo() {
            let frame = u32::from(self.mtu.unwrap_or(1500)) + 18;
            format!("rsize=9,bsize={}", frame.div_ceil(1024) * 1024)
        } else {
            "rsize=10".to_string()
        }
    }

    /// Driver arguments to append to vdev `d`: jumbo frames on net_af_packet need tpacket
    /// frames that hold them (the default 2,048 octets do not); a `framesz` given stays.
    fn af_packet_jumbo_args(&self, d: &str) -> Option<&'static str> {
        #[cfg(feature = "dpdk")]
        if self.jumbo() && is_af_packet(d) && !d.contains("framesz=") {
            return Some(warpcore_verbs::dpdk::dpdk_sys::AF_PACKET_JUMBO_ARGS);
        }
        let _ = d;
        None
    }

    /// An MTU above Ethernet's 1500.
    fn jumbo(&self) -> bool {
        self.mtu.is_some_and(|m| m > 1500)
    }
}

/// A net_af_packet vdev string (`net_af_packet0,iface=...`; `eth_af_packet` is its alias).
#[cfg(feature = "dpdk")]
fn is_af_packet(vdev: &str) -> bool {
    vdev.starts_with("net_af_packet") || vdev.starts_with("eth_af_packet")
}

/// Both ends' addresses when a tool runs them in one process: (server, client).
#[derive(Debug, Clone, Copy)]
pub struct PairAddrs {
    /// The serving engine's address.
    pub server: Ipv4Addr,
    /// The connecting engine's address.
    pub client: Ipv4Addr,
}

impl PairAddrs {
    /// The addresses iwperf and wcconnrate use when `--ip` is not given, from the RFC 2544
    /// benchmarking range: server 198.18.0.2, client 198.18.0.1.
    pub const BENCHMARK: PairAddrs = PairAddrs {
        server: Ipv4Addr::new(198, 18, 0, 2),
        client: Ipv4Addr::new(198, 18, 0, 1),
    };

    /// This side's address by role (`serving`: the server's).
    pub fn of(&self, serving: bool) -> Ipv4Addr {
        if serving {
            self.server
        } else {
            self.client
        }
    }
}

/// The client's address in a pair whose server is `sip` (`--ip`, or the tool's default):
/// `default` when it is another host of the server's network, else the first host address
/// of that network that is not the server's (the other one of a /31, RFC 3021). Both ends
/// must be on one network: the in-memory link and the joined ports have no router
/// (RFC 1122 3.3.1.1). A /32 leaves no address for the client and is refused, naming
/// `--ip`.
fn pair_client(sip: IpPrefix, default: Ipv4Addr) -> Result<IpPrefix, DeviceError> {
    let mask = u32::MAX.checked_shl(32 - u32::from(sip.len)).unwrap_or(0);
    let server = u32::from(sip.addr);
    let net = server & mask;
    let host = |a: u32| {
        a & mask == net && a != server && (sip.len >= 31 || (a & !mask != 0 && a | mask != !0))
    };
    let addr = match sip.len {
        32 => {
            return Err(DeviceError::Refused {
                flag: "--ip",
                why: format!(
                    "{}/32 leaves no address on its network for the other end of --loopback \
                     (give a prefix of 31 or less)",
                    sip.addr
                ),
            })
        }
        _ if host(u32::from(default)) => u32::from(default),
        31 => server ^ 1,
        _ if host(net + 1) => net + 1,
        _ => net + 2,
    };
    Ok(IpPrefix {
        addr: Ipv4Addr::from(addr),
        len: sip.len,
    })
}

/// One opened Warpcore engine and what a banner says about it.
pub struct Endpoint {
    /// The engine. (The EAL it runs on stays up until the process exits.)
    pub ctx: warpcore_verbs::Context,
    /// Our IPv4 address.
    pub ip: Ipv4Addr,
    /// Device name for banners.
    pub device: String,
    /// IP MTU of the device.
    pub mtu: usize,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Endpoint({} on {})", self.ip, self.device)
    }
}

/// How a tool wants its engine(s) set up, besides what [`DeviceArgs`] says.
pub struct EngineOptions<'a> {
    /// The tool's name (EAL program name and file prefix).
    pub tool: &'a str,
    /// Which end of a `--memif` socket this process is.
    pub role: MemifRole,
    /// This side's address when `--ip` is not given.
    pub default_ip: Option<Ipv4Addr>,
    /// Give memif and net_ring ports a fixed MAC, `02:57:43:00:00:<last octet of the IP>`,
    /// so captures of different runs compare (those ports draw a random one per run).
    pub fixed_mac: bool,
    /// Anything else the tool sets on each engine's configuration (limits, drive, TCP).
    pub configure: &'a dyn Fn(&mut warpcore_verbs::Config),
    /// The in-memory link of `--loopback=link` (its MTU, seeded loss, reordering,
    /// duplication); `None`: a clean link.
    pub link: Option<warpcore_verbs::LinkConfig>,
}

impl<'a> EngineOptions<'a> {
    /// `tool` in `role`, with no default address, the port's own MAC, nothing else
    /// configured and a clean link: set the rest with struct update syntax.
    pub fn new(tool: &'a str, role: MemifRole) -> Self {
        EngineOptions {
            tool,
            role,
            default_ip: None,
            fixed_mac: false,
            configure: &|_| {},
            link: None,
        }
    }
}

impl std::fmt::Debug for EngineOptions<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "EngineOptions({}, {:?})", self.tool, self.role)
    }
}

/// Opens an engine, naming what failed.
fn open_context(cfg: warpcore_verbs::Config) -> Result<warpcore_verbs::Context, DeviceError> {
    warpcore_verbs::Context::open(cfg).map_err(|source| DeviceError::Verbs {
        what: "engine",
        source,
    })
}

/// A pair of opened engines (server, client) on `device`.
fn pair(
    server: warpcore_verbs::Context,
    sip: IpPrefix,
    client: warpcore_verbs::Context,
    cip: IpPrefix,
    device: &str,
    mtu: usize,
) -> (Endpoint, Endpoint) {
    let ep = |ctx, ip: IpPrefix| Endpoint {
        ctx,
        ip: ip.addr,
        device: device.into(),
        mtu,
    };
    (ep(server, sip), ep(client, cip))
}

impl DeviceArgs {
    /// `--capture`: DPDK's pcapng writer on the first queue of `port`, into the raw file
    /// [`finish_capture`] rewrites at exit.
    #[cfg(feature = "dpdk")]
    fn start_capture(
        &self,
        port: &mut warpcore_verbs::dpdk::DpdkPort,
        eal: &warpcore_verbs::dpdk::dpdk_sys::Eal,
        tool: &str,
    ) -> Result<(), DeviceError> {
        let Some(c) = &self.capture else {
            return Ok(());
        };
        port.capture_pcapng(
            eal,
            &raw_capture_path(c).to_string_lossy(),
            &format!("{tool}_cap"),
        )
        .map_err(|source| DeviceError::Verbs {
            what: "--capture",
            source,
        })
    }

    fn engine_config(
        &self,
        device: warpcore_verbs::Device,
        ip: IpPrefix,
        cpus: Vec<usize>,
        fixed_mac: bool,
        configure: &dyn Fn(&mut warpcore_verbs::Config),
    ) -> warpcore_verbs::Config {
        let mut cfg = warpcore_verbs::Config::new(device, ip.addr);
        cfg.prefix_len = ip.len;
        cfg.gateway = self.gateway;
        cfg.cpus = cpus;
        cfg.mac = self
            .mac
            .map(|m| m.0)
            .or(fixed_mac.then(|| [2, 0x57, 0x43, 0, 0, ip.addr.octets()[3]]));
        if let Some(m) = self.mtu {
            cfg.engine.mtu = usize::from(m);
        }
        // DPDK 22.11's net_memif unmaps the shared regions from its control thread when the
        // peer disconnects, under a data path that may be inside `rx_burst` (an iwperf
        // client died of SIGSEGV there once in ~40 runs): a core stops polling, then keeps
        // its port open this long, so the peer, which finishes within a round trip or two,
        // has stopped polling too before the port goes (as tcpperf does).
        if self.memif.is_some() || self.vdev.iter().any(|v| v.starts_with("net_memif")) {
            cfg.engine.shutdown_linger_ms = cfg.engine.shutdown_linger_ms.max(MEMIF_LINGER_MS);
        }
        configure(&mut cfg);
        cfg
    }

    #[cfg_attr(not(feature = "dpdk"), allow(dead_code))]
    fn local_ip(&self, default: Option<Ipv4Addr>) -> Result<IpPrefix, DeviceError> {
        self.ip
            .or(default.map(|addr| IpPrefix { addr, len: 24 }))
            .ok_or(DeviceError::Refused {
                flag: "--ip",
                why: "this side needs an address: give --ip A.B.C.D[/LEN]".into(),
            })
    }

    /// Opens one engine on the DPDK port these arguments name (the EAL is initialised here,
    /// once per process).
    #[cfg(feature = "dpdk")]
    pub fn open_engine(&self, o: &EngineOptions<'_>) -> Result<Endpoint, DeviceError> {
        use warpcore_verbs::dpdk::{DpdkPort, PortOptions};
        if self.loopback.is_some() {
            return Err(DeviceError::Refused {
                flag: "--loopback",
                why: "runs both ends in this process; this side opens one port".into(),
            });
        }
        let ip = self.local_ip(o.default_ip)?;
        let queues = self.engine_cpus().len().max(1) as u16;
        let p = self.open_port(o.tool, o.role)?;
        let name = p.name.clone();
        let is_memif = p.port.info().driver == "net_memif";
        let options = PortOptions {
            mtu: self.mtu,
            tso: self.tso,
        };
        let mut port =
            DpdkPort::from_port_with(p.port, p.pool, queues, options).map_err(|source| {
                DeviceError::Verbs {
                    what: "DPDK port set-up",
                    source,
                }
            })?;
        if self.no_csum {
            port.skip_checksums().map_err(|source| DeviceError::Verbs {
                what: "--no-csum",
                source,
            })?;
        }
        self.start_capture(&mut port, &p.eal, o.tool)?;
        let mtu = port.mtu();
        let cfg = self.engine_config(
            warpcore_verbs::Device::Dpdk(port),
            ip,
            self.engine_cpus(),
            o.fixed_mac && is_memif,
            o.configure,
        );
        let ctx = open_context(cfg)?;
        Ok(Endpoint {
            ctx,
            ip: ip.addr,
            device: name,
            mtu,
        })
    }

    /// Opens two engines in this process (`--loopback`): over two net_ring ports, or over
    /// the in-memory link (`--loopback=link`, or `auto` without DPDK). Returns
    /// (server, client).
    pub fn open_engine_pair(
        &self,
        o: &EngineOptions<'_>,
        addrs: PairAddrs,
    ) -> Result<(Endpoint, Endpoint), DeviceError> {
        self.refuse(
            "--no-csum",
            "applies to a net_memif port between two processes only",
        )?;
        self.refuse(
            "--tso",
            "the loopback ports (net_ring, net_memif, the in-memory link) have no TSO",
        )?;
        self.refuse(
            "--memif",
            "names a port to another process; --loopback needs none",
        )?;
        self.refuse(
            "--vdev",
            "names a port to another process; --loopback needs none",
        )?;
        self.refuse("--pci", "names a NIC; --loopback needs none")?;
        self.refuse(
            "--dpdk-port",
            "names a port to open; --loopback opens ports of its own",
        )?;
        // Both engines share one link: one Ethernet address for both would make each take
        // the other's frames for its own, and a gateway routes nothing between two hosts of
        // one network.
        self.refuse(
            "--mac",
            "names one side's Ethernet address; --loopback runs both ends in this process, \
             each with an address of its own",
        )?;
        self.refuse(
            "--gateway",
            "--loopback puts both ends on one network: nothing is routed through a gateway",
        )?;
        self.pair_cpus()?;
        let sip = self.ip.unwrap_or(IpPrefix {
            addr: addrs.server,
            len: 24,
        });
        let cip = pair_client(sip, addrs.client)?;
        match self.loopback.unwrap_or(Loopback::Auto) {
            #[cfg(feature = "dpdk")]
            Loopback::Ring | Loopback::Auto => self.open_ring_engines(o, sip, cip),
            #[cfg(feature = "dpdk")]
            Loopback::Memif => self.open_memif_engines(o, sip, cip),
            #[cfg(not(feature = "dpdk"))]
            Loopback::Ring => Err(DeviceError::Refused {
                flag: "--loopback=ring",
                why: "this build has no DPDK".into(),
            }),
            #[cfg(not(feature = "dpdk"))]
            Loopback::Memif => Err(DeviceError::Refused {
                flag: "--loopback=memif",
                why: "this build has no DPDK".into(),
            }),
            _ => {
                self.refuse(
                    "--capture",
                    "records DPDK ports; use --loopback=ring or --loopback=memif to capture",
                )?;
                self.refuse(
                    "--eal",
                    "the in-memory link (--loopback=link) starts no EAL; use \
                     --loopback=ring or --loopback=memif",
                )?;
                let mut link = o.link.clone().unwrap_or_default();
                // `--mtu` is the link's, as it is a port's: the engine takes the device's.
                if let Some(m) = self.mtu {
                    link.mtu = usize::from(m);
                }
                let (a, b) =
                    warpcore_verbs::try_link_pair(&link).map_err(|e| DeviceError::Refused {
                        flag: "--loopback=link",
                        why: e.to_string(),
                    })?;
                let (scpu, ccpu) = self.pair_cpus()?;
                let cs = self.engine_config(b, sip, scpu, false, o.configure);
                let cc = self.engine_config(a, cip, ccpu, false, o.configure);
                // `--cores` pins the application thread through the EAL and the engine
                // threads through the engine. The in-memory link has no EAL, and
                // caller-driven engines have no threads (the engine pins nothing then): the
                // CPUs were ignored, a CPU that does not exist included, and the run was not
                // the pinned one asked for.
                if self.cores.is_some() && cs.drive == warpcore_verbs::Drive::Caller {
                    return Err(DeviceError::Refused {
                        flag: "--cores",
                        why: "the engines over the in-memory link (--loopback=link) are \
                              caller-driven here: no EAL pins the application thread and \
                              there are no engine threads, so nothing would be pinned (run \
                              the process under taskset, use a DPDK loopback, or engine \
                              threads)"
                            .into(),
                    });
                }
                let mtu = link.mtu;
                let server = open_context(cs)?;
                let client = open_context(cc)?;
                Ok(pair(server, sip, client, cip, "in-memory link", mtu))
            }
        }
    }

    #[cfg(feature = "dpdk")]
    fn open_ring_engines(
        &self,
        o: &EngineOptions<'_>,
        sip: IpPrefix,
        cip: IpPrefix,
    ) -> Result<(Endpoint, Endpoint), DeviceError> {
        use warpcore_verbs::{dpdk::DpdkPort, Device};
        let r = self.open_ring_pair(o.tool)?;
        let set_up = |port, what| {
            DpdkPort::from_port_with_mtu(port, r.pool, 1, self.mtu)
                .map_err(|source| DeviceError::Verbs { what, source })
        };
        let mut pa = set_up(r.a, "net_ring port a")?;
        let pb = set_up(r.b, "net_ring port b")?;
        self.start_capture(&mut pa, &r.eal, o.tool)?;
        let mtu = pa.mtu();
        let (scpu, ccpu) = self.pair_cpus()?;
        let cc = self.engine_config(Device::Dpdk(pa), cip, ccpu, true, o.configure);
        let cs = self.engine_config(Device::Dpdk(pb), sip, scpu, true, o.configure);
        let client = open_context(cc)?;
        let server = open_context(cs)?;
        Ok(pair(server, sip, client, cip, "net_ring (loopback)", mtu))
    }

    #[cfg(feature = "dpdk")]
    fn open_memif_engines(
        &self,
        o: &EngineOptions<'_>,
        sip: IpPrefix,
        cip: IpPrefix,
    ) -> Result<(Endpoint, Endpoint), DeviceError> {
        use warpcore_verbs::{dpdk::DpdkPort, Device};
        let r = self.open_memif_pair(o.tool)?;
        let set_up = |port, what| {
            DpdkPort::from_port_with_mtu(port, r.pool, 1, self.mtu)
                .map_err(|source| DeviceError::Verbs { what, source })
        };
        let mut ps = set_up(r.a, "net_memif server port")?;
        let pc = set_up(r.b, "net_memif client port")?;
        self.start_capture(&mut ps, &r.eal, o.tool)?;
        let mtu = ps.mtu();
        let (scpu, ccpu) = self.pair_cpus()?;
        let cs = self.engine_config(Device::Dpdk(ps), sip, scpu, true, o.configure);
        let cc = self.engine_config(Device::Dpdk(pc), cip, ccpu, true, o.configure);
        let server = open_context(cs)?;
        let client = open_context(cc)?;
        Ok(pair(server, sip, client, cip, "net_memif (loopback)", mtu))
    }
}

#[cfg(feature = "dpdk")]
pub use self::dpdk::{OpenedPort, RingPair};

#[cfg(feature = "dpdk")]
mod dpdk {
    use super::*;
    use warpcore_verbs::dpdk::dpdk_sys::{Eal, EalBuilder, Mempool, Port, RingPortPair};

    /// An initialised EAL with the named port found and a pool for it: what a tool that
    /// drives the port itself (tcpperf) or through Warpcore starts from.
    #[derive(Debug)]
    pub struct OpenedPort {
        /// Proof that the EAL is up.
        pub eal: Eal,
        /// The port, not yet configured.
        pub port: Port,
        /// Its mbuf pool (data room for `--mtu`).
        pub pool: Mempool,
        /// The port's name, for banners.
        pub name: String,
    }

    /// Two net_ring ports joined back to back, and their pool.
    #[derive(Debug)]
    pub struct RingPair {
        /// Proof that the EAL is up.
        pub eal: Eal,
        /// One end.
        pub a: Port,
        /// The other end.
        pub b: Port,
        /// The pool both use.
        pub pool: Mempool,
    }

    fn dpdk(what: &str) -> impl FnOnce(warpcore_verbs::dpdk::dpdk_sys::Error) -> DeviceError {
        let what = what.to_string();
        move |source| DeviceError::Dpdk { what, source }
    }

    impl DeviceArgs {
        fn init_eal(&self, tool: &str, role: MemifRole) -> Result<Eal, DeviceError> {
            for v in self.vdevs(role) {
                check_memif_socket(&v)?;
            }
            let args = self.eal_args(tool, role);
            // In a DPDK application's process (a drop-in libibverbs user such as SPDK), its
            // EAL is joined: only the devices of these arguments are used (`Eal::joined`).
            EalBuilder::new(tool)
                .args(args.iter())
                .init_or_join()
                .map_err(|source| DeviceError::Eal {
                    args: args.join(" "),
                    source,
                })
        }

        /// Initialises the EAL and finds the port these arguments name, with a pool of
        /// 16,383 mbufs sized for `--mtu`.
        pub fn open_port(&self, tool: &str, role: MemifRole) -> Result<OpenedPort, DeviceError> {
            if !self.names_port() {
                return Err(DeviceError::NoDevice(
                    "--memif PATH, --vdev (e.g. net_tap0,iface=wctap0 or \
                     net_af_packet0,iface=veth0), --pci ADDR or --eal ARGS",
                ));
            }
            self.one_port()?;
            let eal = self.init_eal(tool, role)?;
            let pool = Mempool::new(&eal, &format!("{tool}_pool"), 16383, 256, self.data_room())
                .map_err(dpdk("DPDK mempool"))?;
            let name = self.port_name(role);
            let port = match &name {
                Some(n) => Port::by_name(&eal, n),
                None => Port::from_id(&eal, 0),
            }
            .map_err(dpdk("DPDK port"))?;
            Ok(OpenedPort {
                eal,
                port,
                pool,
                name: name.unwrap_or_else(|| "port 0".into()),
            })
        }

        /// Initialises the EAL with a memif server port and its client on one socket, an
        /// abstract one named after the tool and this process (nothing in the file system:
        /// a socket file's directory outlived every run, as nothing runs after the engines
        /// stop), and returns them as `a` (server) and `b` (client).
        pub fn open_memif_pair(&self, tool: &str) -> Result<RingPair, DeviceError> {
            let sock = format!("/{tool}-memif-{}.sock", std::process::id());
            let mut d = self.clone();
            d.vdev = ["server", "client"]
                .iter()
                .enumerate()
                .map(|(i, role)| {
                    format!(
                        "net_memif{i},role={role},socket={sock},socket-abstract=yes,{}",
                        self.memif_ring_args()
                    )
                })
                .collect();
            let eal = d.init_eal(tool, MemifRole::Server)?;
            let pool = Mempool::new(&eal, &format!("{tool}_pool"), 16383, 256, self.data_room())
                .map_err(dpdk("DPDK mempool"))?;
            let a = Port::by_name(&eal, "net_memif0").map_err(dpdk("net_memif server port"))?;
            let b = Port::by_name(&eal, "net_memif1").map_err(dpdk("net_memif client port"))?;
            Ok(RingPair { eal, a, b, pool })
        }

        /// Initialises the EAL and makes two net_ring ports joined back to back.
        pub fn open_ring_pair(&self, tool: &str) -> Result<RingPair, DeviceError> {
            let eal = self.init_eal(tool, MemifRole::Server)?;
            let pool = Mempool::new(&eal, &format!("{tool}_pool"), 16383, 256, self.data_room())
                .map_err(dpdk("DPDK mempool"))?;
            let RingPortPair { a, b } =
                RingPortPair::new(&eal, tool, 4096).map_err(dpdk("net_ring"))?;
            Ok(RingPair { eal, a, b, pool })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--cores` over the in-memory link with caller-driven engines pinned nothing (no EAL,
    /// no engine thread) and was accepted, a CPU the machine does not have included: the
    /// run went unpinned without a word. It is refused, naming the flag; engine threads
    /// still take it (and name a CPU they cannot have).
    #[test]
    fn cores_that_nothing_would_pin_are_refused() {
        let d = DeviceArgs {
            loopback: Some(Loopback::Link),
            cores: Some("0,1023".parse().unwrap()),
            ..DeviceArgs::default()
        };
        let caller = EngineOptions {
            configure: &|c| c.drive = warpcore_verbs::Drive::Caller,
            ..EngineOptions::new("pin", MemifRole::Server)
        };
        let e = d
            .open_engine_pair(&caller, PairAddrs::BENCHMARK)
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--cores:"), "{e}");
        let threads = EngineOptions {
            configure: &|c| c.drive = warpcore_verbs::Drive::Thread,
            ..EngineOptions::new("pin", MemifRole::Server)
        };
        let e = d
            .open_engine_pair(&threads, PairAddrs::BENCHMARK)
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(e.contains("CPU 1023"), "{e}");
    }
    use clap::Parser;

    /// The whole raw capture becomes PATH and goes; one cut short is an error naming the
    /// cut, with the frames before it kept (never a silent short capture).
    #[test]
    fn finish_capture_refuses_a_raw_capture_cut_short() {
        let dir = std::env::temp_dir().join(format!("wc-finish-cap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("run.pcapng");
        let raw = raw_capture_path(&path);
        std::fs::write(&raw, warpcore_test_support::pcapng::frames(3)).unwrap();
        assert_eq!(finish_capture(&path), Ok(3));
        assert!(!raw.exists(), "the raw file goes once rewritten");
        let mut cut = warpcore_test_support::pcapng::frames(3);
        cut.truncate(cut.len() - 10);
        std::fs::write(&raw, &cut).unwrap();
        let e = finish_capture(&path).unwrap_err();
        assert!(
            e.contains("cut short") && e.contains("only the 2 frames"),
            "{e}"
        );
        assert!(raw.exists(), "the raw file is kept for a look");
        let kept = crate::capture::parse_capture(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(kept.frames.len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[derive(Parser, Debug)]
    struct T {
        #[command(flatten)]
        dev: DeviceArgs,
    }

    #[test]
    fn flags_parse_and_make_eal_arguments() {
        let t = T::try_parse_from([
            "t",
            "--memif",
            "/tmp/x.sock",
            "--ip",
            "198.18.0.7/16",
            "--cores",
            "1,3-4",
            "--mtu",
            "9000",
            "--mac",
            "02:00:00:00:00:09",
        ])
        .unwrap();
        let d = t.dev;
        assert_eq!(
            d.ip,
            Some(IpPrefix {
                addr: Ipv4Addr::new(198, 18, 0, 7),
                len: 16
            })
        );
        assert_eq!(d.cpus(), &[1, 3, 4]);
        assert_eq!(d.engine_cpus(), vec![3, 4]);
        assert_eq!(d.mac, Some(Mac([2, 0, 0, 0, 0, 9])));
        assert_eq!(
            d.port_name(MemifRole::Client).as_deref(),
            Some("net_memif0")
        );
        let a = d.eal_args("t", MemifRole::Client);
        assert_eq!(&a[..2], ["-l", "1"]);
        assert!(a.contains(&"--no-pci".to_string()));
        assert!(
            a.contains(&"1024".to_string()),
            "jumbo MTU gets a bigger heap: {a:?}"
        );
        assert_eq!(
            a.last().unwrap(),
            "--vdev=net_memif0,role=client,socket=/tmp/x.sock,socket-abstract=no,rsize=9,bsize=9216"
        );
        assert!(d.data_room() >= 9000 + 18);
    }

    /// Jumbo frames on net_af_packet: tpacket frames that hold them and mbufs that hold a
    /// tpacket frame, unless the user chose a frame size; nothing changes at MTU 1500.
    #[cfg(feature = "dpdk")]
    #[test]
    fn jumbo_af_packet_gets_big_tpacket_frames() {
        use warpcore_verbs::dpdk::dpdk_sys::{AF_PACKET_JUMBO_ARGS, AF_PACKET_JUMBO_DATA_ROOM};
        let dev = |args: &[&str]| T::try_parse_from([&["t"][..], args].concat()).unwrap().dev;
        let d = dev(&["--vdev", "net_af_packet0,iface=v", "--mtu", "9000"]);
        assert_eq!(
            d.vdevs(MemifRole::Server),
            [format!("net_af_packet0,iface=v,{AF_PACKET_JUMBO_ARGS}")]
        );
        assert_eq!(d.data_room(), AF_PACKET_JUMBO_DATA_ROOM);
        let d = dev(&[
            "--vdev",
            "eth_af_packet1,iface=v,framesz=16384",
            "--mtu",
            "9000",
        ]);
        assert_eq!(
            d.vdevs(MemifRole::Server),
            ["eth_af_packet1,iface=v,framesz=16384"]
        );
        let d = dev(&["--vdev", "net_af_packet0,iface=v"]);
        assert_eq!(d.vdevs(MemifRole::Server), ["net_af_packet0,iface=v"]);
        assert_eq!(d.data_room(), 2048 + 128);
        let d = dev(&["--vdev", "net_tap0", "--mtu", "9000"]);
        assert_eq!(d.vdevs(MemifRole::Server), ["net_tap0"]);
        assert_eq!(d.data_room(), 9000 + 18 + 128);
    }

    #[test]
    fn bad_values_name_the_problem() {
        for (flag, v, want) in [
            ("--ip", "1.2.3/24", "bad IPv4 address"),
            ("--ip", "1.2.3.4/33", "bad prefix length"),
            ("--cores", "3-1", "bad CPU list"),
            ("--mac", "02:00", "bad Ethernet address"),
            ("--mtu", "100", "576..=9000"),
            ("--cores", "1024", "above 1023"),
            // A range that once made a vector of ten billion CPUs (an aborted allocation).
            ("--cores", "0-10000000000", "above 1023"),
        ] {
            let e = T::try_parse_from(["t", flag, v]).unwrap_err().to_string();
            assert!(e.contains(want), "{flag} {v}: {e}");
        }
        let d = T::try_parse_from(["t", "--no-csum"]).unwrap().dev;
        let e = d.refuse("--no-csum", "not here").unwrap_err();
        assert_eq!(e.to_string(), "--no-csum: not here");
        assert!(d.refuse("--mtu", "never refused when unset").is_ok());
    }

    #[test]
    fn pair_over_the_link_refuses_port_flags() {
        let d = T::try_parse_from(["t", "--loopback=link", "--vdev", "net_tap0"])
            .unwrap()
            .dev;
        let o = EngineOptions::new("t", MemifRole::Server);
        let addrs = PairAddrs {
            server: Ipv4Addr::new(198, 18, 0, 2),
            client: Ipv4Addr::new(198, 18, 0, 1),
        };
        let e = d.open_engine_pair(&o, addrs).unwrap_err();
        assert!(e.to_string().starts_with("--vdev:"), "{e}");
    }

    /// An empty element of a CPU list (a CPU left out by a typo, "0,,1", "0,", ",1") is
    /// refused, not dropped: the user meant a CPU there.
    #[test]
    fn cpu_list_empty_element_is_refused() {
        for v in ["0,,1", "0,", ",1", " , "] {
            let e = v.parse::<CpuList>().unwrap_err();
            assert!(e.contains("empty element"), "{v:?}: {e}");
            assert!(e.contains(&format!("{v:?}")), "{v:?}: {e}");
        }
        assert_eq!("0, 2-3".parse::<CpuList>().unwrap().0, [0, 2, 3]);
        assert_eq!(" 1 ".parse::<CpuList>().unwrap().0, [1]);
    }

    /// Whether a process still listens on a memif server's socket is read from
    /// /proc/net/unix; when that cannot be read the check fails, naming why, instead of
    /// taking the socket for stale and removing it from under a live server.
    #[test]
    fn memif_liveness_check_that_cannot_run_fails() {
        let dir = std::env::temp_dir().join(format!("wc-review-memif-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("s.sock");
        std::fs::write(&sock, b"").unwrap();
        let vdev = format!(
            "net_memif0,role=server,socket={},socket-abstract=no,rsize=10",
            sock.display()
        );
        let unreadable = || Err(std::io::Error::from(std::io::ErrorKind::PermissionDenied));
        let e = check_memif_socket_in(&vdev, unreadable)
            .unwrap_err()
            .to_string();
        assert!(e.contains("/proc/net/unix"), "{e}");
        assert!(
            sock.exists(),
            "the socket was removed though nobody could tell it stale"
        );
        // Readable and nobody listening: stale, removed.
        check_memif_socket_in(&vdev, || {
            Ok("Num RefCount Protocol Flags Type St Inode Path\n".into())
        })
        .unwrap();
        assert!(!sock.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[cfg(test)]
mod argument_tests {
    use super::*;

    fn link_pair(d: &DeviceArgs) -> Result<(Endpoint, Endpoint), DeviceError> {
        let addrs = PairAddrs {
            server: Ipv4Addr::new(10, 0, 0, 2),
            client: Ipv4Addr::new(10, 0, 0, 1),
        };
        d.open_engine_pair(&EngineOptions::new("review", MemifRole::Server), addrs)
    }

    fn link(ip: Option<&str>) -> DeviceArgs {
        DeviceArgs {
            loopback: Some(Loopback::Link),
            ip: ip.map(|s| s.parse().unwrap()),
            ..DeviceArgs::default()
        }
    }

    /// `--loopback` with `--ip`: the server took the address and the client always the
    /// tool's fixed one, so `--ip 10.0.0.1/24` (wcsoak's client address) gave both ends one
    /// address, and `--ip 192.168.1.2/24` put the client on another network (no route
    /// between them, RFC 1122 3.3.1.1). The client now gets another host address of the
    /// server's network; a /32 leaves none and is refused, naming `--ip`.
    #[test]
    fn pair_ip_gives_the_client_another_address_on_its_network() {
        for (ip, want_client) in [
            ("10.0.0.1/24", "10.0.0.2"),
            ("192.168.1.2/24", "192.168.1.1"),
            ("192.168.1.1/24", "192.168.1.2"),
            ("10.0.0.5/24", "10.0.0.1"),
            ("172.16.0.9/31", "172.16.0.8"),
            ("10.0.0.2/24", "10.0.0.1"),
        ] {
            let (s, c) = link_pair(&link(Some(ip))).unwrap();
            let want: IpPrefix = ip.parse().unwrap();
            assert_eq!(s.ip, want.addr, "{ip}");
            assert_eq!(c.ip.to_string(), want_client, "{ip}");
            let sa = s.ctx.query_port(1).unwrap().addr;
            let ca = c.ctx.query_port(1).unwrap().addr;
            assert_eq!(sa, (want.addr, want.len), "{ip}");
            assert_eq!(ca, (c.ip, want.len), "{ip}");
        }
        let e = link_pair(&link(Some("10.0.0.2/32")))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("--ip:"), "{e}");
    }

    /// `--mac` with `--loopback` gave both engines of the pair the one Ethernet address
    /// (each took it as its own), and `--gateway` was set on both though they share one
    /// network and route nothing through it: both are refused, naming the flag.
    #[test]
    fn pair_refuses_mac_and_gateway() {
        let d = DeviceArgs {
            mac: Some("02:00:00:00:00:07".parse().unwrap()),
            ..link(None)
        };
        let e = link_pair(&d).unwrap_err().to_string();
        assert!(e.starts_with("--mac:"), "{e}");
        let d = DeviceArgs {
            gateway: Some(Ipv4Addr::new(10, 0, 0, 254)),
            ..link(None)
        };
        let e = link_pair(&d).unwrap_err().to_string();
        assert!(e.starts_with("--gateway:"), "{e}");
        // Without them the pair opens, on two addresses and two MACs.
        let (s, c) = link_pair(&link(None)).unwrap();
        assert_ne!(
            s.ctx.query_port(1).unwrap().mac,
            c.ctx.query_port(1).unwrap().mac
        );
    }

    /// `--ip` took any address as this host's: the network's own address and its directed
    /// broadcast (10.0.0.0/24, 10.0.0.255/24), 255.255.255.255, a multicast group, 0.0.0.0
    /// and the loopback network, none of which a host may take as its address (RFC 1122
    /// 3.2.1.3; RFC 1112 4). They are refused, naming the address; a /31 (RFC 3021) and a
    /// /32 have no such addresses.
    #[test]
    fn ip_that_no_host_may_have_is_refused() {
        for bad in [
            "10.0.0.0/24",
            "10.0.0.255/24",
            "10.1.255.255/16",
            "255.255.255.255/32",
            "224.0.0.1/24",
            "239.1.2.3/32",
            "0.0.0.0/0",
            "0.0.0.5/8",
            "127.0.0.1/8",
        ] {
            let e = bad.parse::<IpPrefix>().unwrap_err();
            let addr = bad.split('/').next().unwrap();
            assert!(e.contains(addr) && e.contains("host"), "{bad}: {e}");
        }
        for good in [
            "10.0.0.1/24",
            "10.0.0.254/24",
            "10.0.0.0/31",
            "10.0.0.1/31",
            "10.0.0.0/32",
            "198.18.0.2",
        ] {
            good.parse::<IpPrefix>().unwrap();
        }
    }

    /// `--mac` took a group address (the I/G bit, the first octet's lowest, set: multicast,
    /// ff:ff:ff:ff:ff:ff) or all zeros as this station's, an address a frame's source cannot
    /// be (IEEE 802 8.2; a Linux bridge drops such frames): refused, naming it.
    #[test]
    fn mac_that_is_no_station_address_is_refused() {
        for bad in [
            "01:00:5e:00:00:01",
            "ff:ff:ff:ff:ff:ff",
            "00:00:00:00:00:00",
        ] {
            let e = bad.parse::<Mac>().unwrap_err();
            assert!(e.contains(bad), "{bad}: {e}");
        }
        "02:00:00:00:00:01".parse::<Mac>().unwrap();
        "00:1b:21:0a:0b:0c".parse::<Mac>().unwrap();
    }

    /// `--pci` beside `--vdev` or `--memif`, or `--memif` beside `--vdev`, named two ports
    /// and, without `--dpdk-port`, the engine ran on the first vdev: the NIC was probed and
    /// never used, a memif server listened on a socket no engine served. Refused before
    /// the EAL starts, naming the flag left unused (WARPCORE_PCI beside WARPCORE_VDEV
    /// already was); `--dpdk-port` picks one and the EAL is started.
    #[cfg(feature = "dpdk")]
    #[test]
    fn two_ports_without_dpdk_port_are_refused() {
        let sock = std::env::temp_dir().join(format!("wc-review-two-{}.sock", std::process::id()));
        // An EAL argument the EAL refuses: a run that gets as far as the EAL fails there.
        let eal = Some("--review-no-such-eal-option".to_string());
        let pci = Some("0000:ff:00.0".to_string());
        let tap = vec!["net_null0".to_string()];
        for (d, flag, other) in [
            (
                DeviceArgs {
                    pci: pci.clone(),
                    vdev: tap.clone(),
                    ..DeviceArgs::default()
                },
                "--pci:",
                "--vdev",
            ),
            (
                DeviceArgs {
                    memif: Some(sock.clone()),
                    vdev: tap.clone(),
                    ..DeviceArgs::default()
                },
                "--memif:",
                "--vdev",
            ),
            (
                DeviceArgs {
                    memif: Some(sock.clone()),
                    pci: pci.clone(),
                    ..DeviceArgs::default()
                },
                "--pci:",
                "--memif",
            ),
        ] {
            let d = DeviceArgs {
                eal: eal.clone(),
                ..d
            };
            let e = d.open_port("review", MemifRole::Server).unwrap_err();
            let m = e.to_string();
            assert!(m.starts_with(flag) && m.contains(other), "{m}");
            let picked = DeviceArgs {
                dpdk_port: Some("net_null0".into()),
                ..d
            };
            let e = picked.open_port("review", MemifRole::Server).unwrap_err();
            assert!(matches!(e, DeviceError::Eal { .. }), "{e}");
        }
    }

    /// The EAL got hugepages (`--in-memory`) once 128 free 2 MB pages (256 MB) existed, but
    /// is told to reserve `-m 1024` MB at start for jumbo frames: with 128 to 511 free
    /// pages an `--mtu 9000` run failed in EAL initialisation ("not enough memory") where
    /// `--no-huge` would have worked. Hugepages are taken only when they hold all of `-m`.
    #[test]
    fn hugepages_only_when_they_hold_the_eal_memory() {
        let args = |mtu: Option<u16>, free: u64| {
            let d = DeviceArgs {
                mtu,
                memif: Some("/tmp/review.sock".into()),
                ..DeviceArgs::default()
            };
            d.eal_args_with("t", MemifRole::Server, free)
        };
        let huge = |a: &[String]| {
            let m = a.iter().position(|x| x == "-m").unwrap();
            (a.contains(&"--in-memory".to_string()), a[m + 1].clone())
        };
        assert_eq!(huge(&args(None, 127)), (false, "256".into()));
        assert_eq!(huge(&args(None, 128)), (true, "256".into()));
        assert_eq!(huge(&args(Some(9000), 128)), (false, "1024".into()));
        assert_eq!(huge(&args(Some(9000), 511)), (false, "1024".into()));
        assert_eq!(huge(&args(Some(9000), 512)), (true, "1024".into()));
        for (mtu, free) in [(None, 0), (Some(9000), 300)] {
            let a = args(mtu, free);
            assert!(a.contains(&"--no-huge".to_string()), "{a:?}");
        }
    }

    /// `--memif PATH` goes into DPDK's device arguments, split at ',' and '=': a path
    /// holding either was cut there (`/tmp/x=y/s.sock` served on `/tmp/x`, `/tmp/a,b.sock`
    /// an EAL error about an argument never given). Refused at the command line, naming the
    /// character, as WARPCORE_MEMIF already was.
    #[test]
    fn memif_path_that_device_arguments_cut_is_refused() {
        #[derive(clap::Parser, Debug)]
        struct T {
            #[command(flatten)]
            dev: DeviceArgs,
        }
        use clap::Parser;
        for (path, c) in [("/tmp/a,b.sock", "','"), ("/tmp/x=y/s.sock", "'='")] {
            let e = T::try_parse_from(["t", "--memif", path])
                .unwrap_err()
                .to_string();
            assert!(e.contains("--memif") && e.contains(c), "{path}: {e}");
        }
        let t = T::try_parse_from(["t", "--memif", "/tmp/ok.sock"]).unwrap();
        assert_eq!(t.dev.memif.as_deref(), Some(Path::new("/tmp/ok.sock")));
    }

    /// `--dpdk-port` with `--loopback` (which opens ports of its own) and `--eal` with
    /// `--loopback=link` (which starts no EAL) were accepted and ignored: refused, naming
    /// the flag.
    #[test]
    fn pair_refuses_dpdk_port_and_link_eal() {
        let d = DeviceArgs {
            dpdk_port: Some("net_tap0".into()),
            ..link(None)
        };
        let e = link_pair(&d).unwrap_err().to_string();
        assert!(e.starts_with("--dpdk-port:"), "{e}");
        let d = DeviceArgs {
            eal: Some("-l 0 --no-huge".into()),
            ..link(None)
        };
        let e = link_pair(&d).unwrap_err().to_string();
        assert!(e.starts_with("--eal:"), "{e}");
    }

    /// `--loopback --cores A,S,C` gave both engines of the pair the engine CPUs S and C, and
    /// each engine runs one core: every such run failed with "engine: Config::cpus names 2
    /// CPU(s) for 1 engine core(s)", an error about no flag the user gave. The server's
    /// engine now takes S and the client's C; a fourth CPU is refused naming `--cores`.
    #[test]
    fn pair_cores_go_one_to_each_end() {
        let cores = |c: &str| DeviceArgs {
            cores: Some(c.parse().unwrap()),
            ..link(None)
        };
        assert_eq!(cores("0,0,0").pair_cpus().unwrap(), (vec![0], vec![0]));
        assert_eq!(cores("0,1,2").pair_cpus().unwrap(), (vec![1], vec![2]));
        assert_eq!(cores("0,1").pair_cpus().unwrap(), (vec![1], vec![1]));
        assert_eq!(cores("5").pair_cpus().unwrap(), (vec![5], vec![5]));
        link_pair(&cores("0,0,0")).unwrap();
        let e = link_pair(&cores("0,0,0,0")).unwrap_err().to_string();
        assert!(e.starts_with("--cores:"), "{e}");
    }
}
