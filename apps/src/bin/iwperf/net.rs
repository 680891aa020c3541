//! Opening the engine(s) iwperf runs on through the apps library's device layer
//! ([`warpcore_apps::device`]): a DPDK port named by `--memif`/`--vdev`/`--pci`/`--eal`, or
//! two engines in one process (`--loopback`: two net_ring ports, or the in-memory link).
//! What is iwperf's own: the default addresses, the engine limits sized to `-q`, the TCP
//! of `--tcp` and who drives the engine (`--poll-mode`).

use warpcore_apps::device::{EngineOptions, MemifRole, PairAddrs};
use warpcore_verbs::{Config, Drive};

use crate::cli::{Cli, PollMode};

pub use warpcore_apps::device::Endpoint;

/// What `open` produced: one engine (server or client role) or a loopback pair.
#[derive(Debug)]
pub enum Opened {
    /// One engine for this process's role (DPDK builds only).
    #[cfg_attr(not(feature = "dpdk"), allow(dead_code))]
    Single(Endpoint),
    /// Two engines in this process: (server, client).
    Pair(Endpoint, Endpoint),
}

/// Who runs the engine cores, from `--poll-mode`.
pub fn drive(cli: &Cli) -> Drive {
    match cli.poll_mode() {
        PollMode::Caller => Drive::Caller,
        PollMode::Busy => Drive::BusyPoll,
        PollMode::Thread => Drive::Thread,
    }
}

/// The most QPs a run uses (issue 11: 10,000 per engine core).
pub const MAX_QPS: u16 = 10_000;

/// The engine's limits for this side: a QP table sized to the run (`-q` where this process
/// knows it, i.e. a client or a loopback; the most `-q` allows for a server; plus two
/// spare), connections and memory regions to match, and the TCP chosen by `--tcp`. The
/// pollers visit only the QPs with work, so a large table costs memory, not time.
pub fn size_engine(cli: &Cli, cfg: &mut Config, knows_qps: bool) {
    let qps = if knows_qps { cli.qps } else { MAX_QPS };
    cfg.engine.max_qps = usize::from(qps) + 2;
    cfg.engine.max_connections = cfg.engine.max_connections.max(cfg.engine.max_qps + 64);
    cfg.engine.max_pending_requests = cfg.engine.max_pending_requests.min(cfg.engine.max_qps);
    // Each QP registers its data and control buffers, and its inline arena at the first
    // inline post: room for four regions a QP (`-q 10000` needs more than the default).
    cfg.engine.mr_table_capacity = cfg.engine.mr_table_capacity.max(4 * cfg.engine.max_qps);
    cfg.engine.tcp_implementation = match cli.tcp {
        crate::cli::TcpChoice::Warpcore => warpcore_tcp::TcpImplementation::Warpcore,
        crate::cli::TcpChoice::Reference => warpcore_tcp::TcpImplementation::SmoltcpReference,
    };
}

/// Opens what the command line asks for.
pub fn open(cli: &Cli) -> Result<Opened, String> {
    if cli.dev.loopback.is_some() {
        let o = EngineOptions {
            fixed_mac: true,
            configure: &|c: &mut Config| {
                c.drive = drive(cli);
                size_engine(cli, c, true);
            },
            ..EngineOptions::new("iwperf", MemifRole::Server)
        };
        let (s, c) = cli
            .dev
            .open_engine_pair(&o, PairAddrs::BENCHMARK)
            .map_err(|e| e.to_string())?;
        return Ok(Opened::Pair(s, c));
    }
    #[cfg(feature = "dpdk")]
    {
        // The server (no address given) is the memif server.
        let client = cli.server.is_some();
        let o = EngineOptions {
            default_ip: Some(PairAddrs::BENCHMARK.of(!client)),
            fixed_mac: true,
            configure: &|c: &mut Config| {
                c.drive = drive(cli);
                size_engine(cli, c, client);
            },
            ..EngineOptions::new("iwperf", MemifRole::serving(!client))
        };
        cli.dev
            .open_engine(&o)
            .map(Opened::Single)
            .map_err(|e| e.to_string())
    }
    #[cfg(not(feature = "dpdk"))]
    {
        Err("this iwperf was built without DPDK: only --loopback=link works".into())
    }
}
