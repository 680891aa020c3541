//! Opening the engine(s) iwperf runs on: a DPDK port named by `--vdev`/`--pci`/`--eal`, two
//! engines in one process (`--loopback`: two net_ring ports, or the in-memory link), and the
//! clear errors a user needs when the EAL arguments are wrong or a memif socket is busy.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use warpcore_verbs::{link_pair, Config, Context, Device, Drive, LinkConfig};

use crate::cli::{Cli, Loopback, PollMode};

/// Address of the server side when `--ip` is not given (RFC 2544 benchmarking range).
pub const SERVER_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
/// Address of the client side when `--ip` is not given.
pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);

/// One opened engine and what the banner says about it.
pub struct Endpoint {
    /// The engine (dropped before the EAL handle below, which must outlive it).
    pub ctx: Context,
    /// Our IPv4 address.
    pub ip: Ipv4Addr,
    /// Device name for the banner.
    pub device: String,
    /// IP MTU of the device.
    pub mtu: usize,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Endpoint({} on {})", self.ip, self.device)
    }
}

/// What `open` produced: one engine (server or client role) or a loopback pair.
#[derive(Debug)]
pub enum Opened {
    /// One engine for this process's role.
    Single(Endpoint),
    /// Two engines in this process: (server, client).
    Pair(Endpoint, Endpoint),
}

/// Who runs the engine cores, from `--poll-mode`.
pub fn drive(cli: &Cli) -> Drive {
    match cli.poll_mode {
        PollMode::Caller => Drive::Caller,
        PollMode::Busy => Drive::BusyPoll,
        PollMode::Thread => Drive::Thread,
    }
}

/// The most QPs a run uses (issue 11: 10,000 per engine core).
pub const MAX_QPS: u16 = 10_000;

/// The engine's limits for this side: a QP table sized to the run (`-q` where this process
/// knows it, i.e. a client or a loopback; the most `-q` allows for a server; plus two
/// spare), connections to match, and the TCP chosen by `--tcp`. The pollers visit only the
/// QPs with work, so a large table costs memory, not time.
pub fn size_engine(cli: &Cli, cfg: &mut Config, knows_qps: bool) {
    let qps = if knows_qps { cli.qps } else { MAX_QPS };
    cfg.engine.max_qps = usize::from(qps) + 2;
    cfg.engine.max_connections = cfg.engine.max_connections.max(cfg.engine.max_qps + 64);
    cfg.engine.max_pending_requests = cfg.engine.max_pending_requests.min(cfg.engine.max_qps);
    cfg.engine.tcp_implementation = match cli.tcp {
        crate::cli::TcpChoice::Warpcore => warpcore_tcp::TcpImplementation::Warpcore,
        crate::cli::TcpChoice::Reference => warpcore_tcp::TcpImplementation::SmoltcpReference,
    };
}

/// Parses a CPU list such as `0,2-3`.
pub fn parse_cpus(s: &str) -> Result<Vec<usize>, String> {
    let mut v = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let bad = || format!("--cores: bad CPU list {s:?} (expected e.g. 0,1 or 0-3)");
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) =
                    (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                if a > b {
                    return Err(bad());
                }
                v.extend(a..=b);
            }
            None => v.push(part.parse().map_err(|_| bad())?),
        }
    }
    if v.is_empty() {
        return Err(format!("--cores: empty CPU list {s:?}"));
    }
    Ok(v)
}

/// The vdev strings of this run: `--vdev` as given plus the `--memif PATH` shorthand
/// (memif server role for the iwperf server, client role for the client).
pub fn vdevs(cli: &Cli) -> Vec<String> {
    let mut v = cli.vdev.clone();
    if let Some(sock) = &cli.memif {
        let role = if cli.server.is_some() {
            "client"
        } else {
            "server"
        };
        v.push(format!(
            "net_memif0,role={role},socket={},socket-abstract=no,rsize=12",
            sock.display()
        ));
    }
    v
}

/// A memif server refuses to start on a socket file left by a dead process, and two servers
/// on one live socket would steal each other's peer: remove a stale file, refuse a live one.
pub fn check_memif_socket(vdev: &str) -> Result<(), String> {
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
    let table = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    let live = table.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() >= 8 && f[7] == sock && f[3] == "00010000"
    });
    if live {
        return Err(format!(
            "memif socket {sock} is busy: another process listens on it (an iwperf server \
             already running?); stop it or pick another socket path"
        ));
    }
    std::fs::remove_file(path)
        .map_err(|e| format!("cannot remove stale memif socket {sock}: {e}"))?;
    eprintln!("iwperf: removed stale memif socket {sock}");
    Ok(())
}

fn hugepages_free() -> u64 {
    std::fs::read_to_string("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

/// The EAL arguments: `--eal` verbatim when given, otherwise no hugepages (or hugepages
/// without files when at least 256 MB of free 2 MB pages exist), no shared configuration,
/// no telemetry, a per-process file prefix, and no PCI scan unless a NIC is named.
pub fn eal_args(cli: &Cli, role: &str, main_cpu: Option<usize>) -> Vec<String> {
    let mut a: Vec<String> = Vec::new();
    match &cli.eal {
        Some(s) => a.extend(s.split_whitespace().map(String::from)),
        None => {
            match main_cpu {
                Some(c) => a.extend(["-l".into(), c.to_string()]),
                // No --cores: let the main thread (and the engine threads it starts) float.
                None => a.push(format!(
                    "--lcores=0@(0-{})",
                    std::thread::available_parallelism()
                        .map(|n| n.get() - 1)
                        .unwrap_or(0)
                )),
            }
            if hugepages_free() >= 128 {
                a.push("--in-memory".into());
            } else {
                a.push("--no-huge".into());
            }
            a.extend(["-m".into(), "256".into(), "--no-shconf".into()]);
            a.push("--no-telemetry".into());
            a.push("--log-level=error".into());
            a.push(format!(
                "--file-prefix=iwperf-{role}-{}",
                std::process::id()
            ));
            match &cli.pci {
                Some(p) => a.extend(["-a".into(), p.clone()]),
                None => a.push("--no-pci".into()),
            }
        }
    }
    for v in vdevs(cli) {
        a.push(format!("--vdev={v}"));
    }
    a
}

/// Opens what the command line asks for.
pub fn open(cli: &Cli) -> Result<Opened, String> {
    let cpus = match &cli.cores {
        Some(s) => parse_cpus(s)?,
        None => Vec::new(),
    };
    // The first CPU runs the application thread, the rest the engine core(s); a single CPU
    // is shared by both.
    let engine_cpus: Vec<usize> = match cpus.len() {
        0 => Vec::new(),
        1 => cpus.clone(),
        _ => cpus[1..].to_vec(),
    };
    if cli.no_csum && cli.loopback.is_some() {
        return Err("--no-csum applies to a net_memif port between two processes only".into());
    }
    match cli.loopback {
        Some(Loopback::Link) => open_link_pair(cli, &engine_cpus),
        #[cfg(feature = "dpdk")]
        Some(Loopback::Ring) | Some(Loopback::Auto) => {
            dpdk::open_ring_pair(cli, cpus.first().copied(), &engine_cpus)
        }
        #[cfg(not(feature = "dpdk"))]
        Some(Loopback::Auto) => open_link_pair(cli, &engine_cpus),
        #[cfg(not(feature = "dpdk"))]
        Some(Loopback::Ring) => Err("--loopback=ring needs iwperf built with DPDK".into()),
        None => {
            #[cfg(feature = "dpdk")]
            {
                dpdk::open_port(cli, cpus.first().copied(), &engine_cpus)
            }
            #[cfg(not(feature = "dpdk"))]
            {
                Err("this iwperf was built without DPDK: only --loopback=link works".into())
            }
        }
    }
}

fn open_link_pair(cli: &Cli, cpus: &[usize]) -> Result<Opened, String> {
    if cli.capture.is_some() {
        return Err(
            "--capture records DPDK ports; use --loopback=ring (or a --vdev) to capture".into(),
        );
    }
    let (a, b) = link_pair(&LinkConfig::default());
    let mut cs = Config::new(b, cli.ip.unwrap_or(SERVER_IP));
    cs.cpus = cpus.to_vec();
    cs.drive = drive(cli);
    size_engine(cli, &mut cs, true);
    let mut cc = Config::new(a, CLIENT_IP);
    cc.cpus = cpus.to_vec();
    cc.drive = drive(cli);
    size_engine(cli, &mut cc, true);
    let mtu = cs.engine.mtu;
    let server = Context::open(cs).map_err(|e| format!("engine: {e}"))?;
    let client = Context::open(cc).map_err(|e| format!("engine: {e}"))?;
    Ok(Opened::Pair(
        Endpoint {
            ctx: server,
            ip: cli.ip.unwrap_or(SERVER_IP),
            device: "in-memory link".into(),
            mtu,
        },
        Endpoint {
            ctx: client,
            ip: CLIENT_IP,
            device: "in-memory link".into(),
            mtu,
        },
    ))
}

/// The capture file DPDK writes first; rewritten to `--capture` at exit (see `pcapng`).
pub fn raw_capture_path(p: &Path) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(".dpdk-raw");
    PathBuf::from(s)
}

#[cfg(feature = "dpdk")]
mod dpdk {
    use super::*;
    use warpcore_verbs::dpdk::dpdk_sys::{EalBuilder, Mempool, Port, RingPortPair};
    use warpcore_verbs::dpdk::DpdkPort;

    fn init(cli: &Cli, role: &str, main_cpu: Option<usize>) -> Result<(), String> {
        let args = eal_args(cli, role, main_cpu);
        for v in vdevs(cli) {
            check_memif_socket(&v)?;
        }
        let eal = EalBuilder::new("iwperf")
            .args(args.iter())
            .init()
            .map_err(|e| {
                format!(
                    "DPDK EAL initialisation failed: {e}\n  (check --vdev/--pci/--eal; the EAL \
                 arguments were: {})",
                    args.join(" ")
                )
            })?;
        // The EAL stays up until the process exits; keep its proof for the pool and ports.
        EAL.with(|c| *c.borrow_mut() = Some(eal));
        Ok(())
    }

    thread_local! {
        static EAL: std::cell::RefCell<Option<warpcore_verbs::dpdk::dpdk_sys::Eal>> =
            const { std::cell::RefCell::new(None) };
    }

    fn with_eal<T>(
        f: impl FnOnce(&warpcore_verbs::dpdk::dpdk_sys::Eal) -> Result<T, String>,
    ) -> Result<T, String> {
        EAL.with(|c| match c.borrow().as_ref() {
            Some(e) => f(e),
            None => Err("EAL not initialised".into()),
        })
    }

    pub(super) fn open_port(
        cli: &Cli,
        main_cpu: Option<usize>,
        cpus: &[usize],
    ) -> Result<Opened, String> {
        let vd = vdevs(cli);
        if vd.is_empty() && cli.pci.is_none() && cli.eal.is_none() {
            return Err(
                "no device: give --vdev (e.g. --vdev net_memif0,role=server,\
                        socket=/tmp/iwperf.sock,socket-abstract=no), --memif PATH, --pci ADDR, \
                        or --loopback"
                    .into(),
            );
        }
        let role = if cli.server.is_some() {
            "client"
        } else {
            "server"
        };
        init(cli, role, main_cpu)?;
        let name = cli
            .dpdk_port
            .clone()
            .or_else(|| {
                vd.first()
                    .map(|v| v.split(',').next().unwrap_or(v).to_string())
            })
            .or_else(|| cli.pci.clone());
        let queues = cpus.len().max(1) as u16;
        let mut port = with_eal(|eal| {
            let pool = Mempool::new(eal, "iwperf_pool", 16383, 256, Mempool::DEFAULT_DATA_ROOM)
                .map_err(|e| format!("DPDK mempool: {e}"))?;
            let p = match &name {
                Some(n) => Port::by_name(eal, n),
                None => Port::from_id(eal, 0),
            }
            .map_err(|e| format!("DPDK port: {e}"))?;
            DpdkPort::from_port(p, pool, queues).map_err(|e| format!("DPDK port set-up: {e}"))
        })?;
        if cli.no_csum {
            port.skip_checksums()
                .map_err(|e| format!("--no-csum: {e}"))?;
        }
        if let Some(c) = &cli.capture {
            let raw = raw_capture_path(c);
            with_eal(|eal| {
                port.capture_pcapng(eal, &raw.to_string_lossy(), "iwperf_cap")
                    .map_err(|e| format!("--capture {}: {e}", c.display()))
            })?;
        }
        let ip = cli.ip.unwrap_or(if cli.server.is_some() {
            CLIENT_IP
        } else {
            SERVER_IP
        });
        let mut cfg = Config::new(Device::Dpdk(port), ip);
        // memif ports have random MACs per run; fixed ones make captures comparable.
        cfg.mac = Some([2, 0x57, 0x43, 0, 0, ip.octets()[3]]);
        cfg.cpus = cpus.to_vec();
        cfg.drive = drive(cli);
        size_engine(cli, &mut cfg, cli.server.is_some());
        let mtu = 1500;
        let ctx = Context::open(cfg).map_err(|e| format!("engine: {e}"))?;
        Ok(Opened::Single(Endpoint {
            ctx,
            ip,
            device: name.unwrap_or_else(|| "port 0".into()),
            mtu,
        }))
    }

    pub(super) fn open_ring_pair(
        cli: &Cli,
        main_cpu: Option<usize>,
        cpus: &[usize],
    ) -> Result<Opened, String> {
        init(cli, "loop", main_cpu)?;
        let (mut pa, pb) = with_eal(|eal| {
            let pool = Mempool::new(eal, "iwperf_pool", 16383, 256, Mempool::DEFAULT_DATA_ROOM)
                .map_err(|e| format!("DPDK mempool: {e}"))?;
            let RingPortPair { a, b } =
                RingPortPair::new(eal, "iwperf", 4096).map_err(|e| format!("net_ring: {e}"))?;
            let pa = DpdkPort::from_port(a, pool, 1).map_err(|e| format!("ring port: {e}"))?;
            let pb = DpdkPort::from_port(b, pool, 1).map_err(|e| format!("ring port: {e}"))?;
            Ok((pa, pb))
        })?;
        if let Some(c) = &cli.capture {
            let raw = raw_capture_path(c);
            with_eal(|eal| {
                pa.capture_pcapng(eal, &raw.to_string_lossy(), "iwperf_cap")
                    .map_err(|e| format!("--capture {}: {e}", c.display()))
            })?;
        }
        let sip = cli.ip.unwrap_or(SERVER_IP);
        let mut cc = Config::new(Device::Dpdk(pa), CLIENT_IP);
        cc.mac = Some([2, 0x57, 0x43, 0, 0, 1]);
        cc.cpus = cpus.to_vec();
        cc.drive = drive(cli);
        size_engine(cli, &mut cc, true);
        let mut cs = Config::new(Device::Dpdk(pb), sip);
        cs.mac = Some([2, 0x57, 0x43, 0, 0, 2]);
        cs.cpus = cpus.to_vec();
        cs.drive = drive(cli);
        size_engine(cli, &mut cs, true);
        let client = Context::open(cc).map_err(|e| format!("engine: {e}"))?;
        let server = Context::open(cs).map_err(|e| format!("engine: {e}"))?;
        Ok(Opened::Pair(
            Endpoint {
                ctx: server,
                ip: sip,
                device: "net_ring (loopback)".into(),
                mtu: 1500,
            },
            Endpoint {
                ctx: client,
                ip: CLIENT_IP,
                device: "net_ring (loopback)".into(),
                mtu: 1500,
            },
        ))
    }
}
