//! Opening the engine on the DPDK port named by `--vdev` (or `--eal`).

use warpcore_verbs::dpdk::dpdk_sys::{Eal, EalBuilder, Mempool, Port};
use warpcore_verbs::dpdk::DpdkPort;
use warpcore_verbs::{Config, Context, Device};

use crate::cli::Cli;

/// The file DPDK's pcapng writer fills; rewritten to `--capture` at exit.
pub fn raw_capture_path(p: &std::path::Path) -> std::path::PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(".dpdk-raw");
    std::path::PathBuf::from(s)
}

fn eal_args(cli: &Cli) -> Vec<String> {
    let mut a: Vec<String> = match &cli.eal {
        Some(s) => s.split_whitespace().map(String::from).collect(),
        None => {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            vec![
                format!("--lcores=0@(0-{})", cpus - 1),
                "--no-huge".into(),
                "-m".into(),
                "256".into(),
                "--no-shconf".into(),
                "--no-pci".into(),
                "--no-telemetry".into(),
                "--log-level=error".into(),
                format!("--file-prefix=iwping-{}", std::process::id()),
            ]
        }
    };
    a.extend(cli.vdev.iter().map(|v| format!("--vdev={v}")));
    a
}

/// The opened engine; the EAL handle must outlive the context (drop order: fields in
/// declaration order).
pub struct Engine {
    /// The engine.
    pub ctx: Context,
    /// Kept for the process lifetime.
    pub _eal: Eal,
}

/// Initialises the EAL, opens the first port and starts one engine core on it.
pub fn open(cli: &Cli) -> Result<Engine, String> {
    if cli.vdev.is_empty() && cli.eal.is_none() {
        return Err(
            "no device: give --vdev (e.g. net_tap0,iface=wctap0 or net_af_packet0,iface=veth0)"
                .into(),
        );
    }
    let args = eal_args(cli);
    let eal = EalBuilder::new("iwping")
        .args(args.iter())
        .init()
        .map_err(|e| format!("DPDK EAL: {e} (arguments: {})", args.join(" ")))?;
    let name = cli
        .vdev
        .first()
        .map(|v| v.split(',').next().unwrap_or(v).to_string());
    let pool = Mempool::new(&eal, "iwping_pool", 8191, 256, Mempool::DEFAULT_DATA_ROOM)
        .map_err(|e| format!("DPDK mempool: {e}"))?;
    let p = match &name {
        Some(n) => Port::by_name(&eal, n),
        None => Port::from_id(&eal, 0),
    }
    .map_err(|e| format!("DPDK port: {e}"))?;
    let mut port = DpdkPort::from_port(p, pool, 1).map_err(|e| format!("DPDK port: {e}"))?;
    if let Some(c) = &cli.capture {
        let raw = raw_capture_path(c);
        port.capture_pcapng(&eal, &raw.to_string_lossy(), "iwping_cap")
            .map_err(|e| format!("--capture {}: {e}", c.display()))?;
    }
    let (ip, len) = cli.local()?;
    let mut cfg = Config::new(Device::Dpdk(port), ip);
    cfg.prefix_len = len;
    cfg.gateway = cli.gateway;
    cfg.mac = cli.mac()?;
    let ctx = Context::open(cfg).map_err(|e| format!("engine: {e}"))?;
    Ok(Engine { ctx, _eal: eal })
}
