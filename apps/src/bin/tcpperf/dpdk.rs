//! Server, client and exchange on a DPDK port opened through the apps library's device
//! layer.
use super::*;
use warpcore_apps::device::{raw_capture_path, MemifRole, OpenedPort};
use warpcore_tcp::dpdk_sys::{PcapngWriter, PortConfig};
use warpcore_tcp::{DpdkDevice, DpdkDeviceConfig};

/// Brings up the EAL and the port, builds the stack (with a pcap capture if asked) and
/// runs the role described by `spec` on it.
pub(crate) fn with_stack(
    net: &NetArgs,
    label: &str,
    timeout_s: u64,
    spec: RoleSpec,
) -> Result<(), String> {
    net.dev
        .refuse("--loopback", "tcpperf's loopback is its `memory` mode")
        .map_err(|e| e.to_string())?;
    net.dev
        .refuse(
            "--no-csum",
            "tcpperf's stack always computes checksums (it measures them)",
        )
        .map_err(|e| e.to_string())?;
    let Some(ip) = net.dev.ip else {
        return Err("--ip A.B.C.D[/LEN] is required".into());
    };
    let ip = Ipv4Cidr::new(ip.addr, ip.len);
    // The serving side is the memif server.
    let role = match spec {
        RoleSpec::Server { .. } | RoleSpec::Exchange { peer: None, .. } => MemifRole::Server,
        _ => MemifRole::Client,
    };
    let OpenedPort {
        eal,
        mut port,
        pool,
        ..
    } = net
        .dev
        .open_port("tcpperf", role)
        .map_err(|e| e.to_string())?;
    let mtu = net.dev.mtu.unwrap_or(1500);
    let off = port
        .configure(
            &PortConfig {
                mtu: Some(mtu),
                tso: net.dev.tso,
                ..PortConfig::default()
            },
            &pool,
        )
        .map_err(|e| e.to_string())?;
    port.start().map_err(|e| e.to_string())?;
    // memif connects (and tap comes up) in DPDK's control thread; start the test once the
    // link is up so the first SYN is not lost to a link that is still down.
    let t0 = StdInstant::now();
    while !port.link_status().map(|l| l.up).unwrap_or(false) {
        if t0.elapsed() > std::time::Duration::from_secs(net.link_wait_s) {
            return Err(format!(
                "port {}: link still down after {} s",
                port.name(),
                net.link_wait_s
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let mac = port.mac().map_err(|e| e.to_string())?;
    eprintln!(
        "tcpperf: port {} ({}), mac {:02x?}, mtu {}, offloads {:?}",
        port.name(),
        port.info().driver,
        mac,
        mtu,
        off
    );
    let rx = port.rx_queue(0).map_err(|e| e.to_string())?;
    let tx = port.tx_queue(0).map_err(|e| e.to_string())?;
    let mut dev = DpdkDevice::new(
        rx,
        tx,
        pool,
        DpdkDeviceConfig {
            mtu: usize::from(mtu),
            burst: net.burst,
            tx_pending_max: net.tx_pending,
        },
    )
    .map_err(|e| e.to_string())?;
    if net.dev.tso && !dev.tso() {
        return Err(format!(
            "--tso: port {} ({}) does not offer TSO together with checksum offload and \
             chained mbufs",
            port.name(),
            port.info().driver
        ));
    }
    if let Some(path) = &net.dev.capture {
        let raw = raw_capture_path(path);
        let w = PcapngWriter::create(
            &eal,
            &raw.to_string_lossy(),
            "wcnet_tcpperf_cap",
            u32::from(mtu) + 18,
        )
        .map_err(|e| e.to_string())?;
        dev.set_pcapng(w).map_err(|e| e.to_string())?;
    }
    let clock = Clock(StdInstant::now());
    let mac = net.dev.mac.map_or(mac, |m| m.0);
    let cfg = stack_config(mac, ip, net.dev.gateway);
    let result = match &net.pcap {
        Some(path) => {
            let f = std::fs::File::create(path).map_err(|e| format!("{path}: {e}"))?;
            let cap = Capture::new(dev, BufWriter::new(f), 65535);
            let mut s = new_stack(cap, &cfg, clock.now()).map_err(|e| e.to_string())?;
            let r = make_role(&mut s, spec)?;
            let res = drive(&mut s, &clock, r, timeout_s, label);
            with_capture(res, s.device_mut(), path)
        }
        None => {
            let mut s = new_stack(dev, &cfg, clock.now()).map_err(|e| e.to_string())?;
            let r = make_role(&mut s, spec)?;
            let res = drive(&mut s, &clock, r, timeout_s, label);
            eprintln!("tcpperf: device {:?}", s.device_stats());
            if let Some(h) = s.host_stats() {
                eprintln!("tcpperf: host {h:?}");
            }
            res
        }
    };
    // Stop polling, then linger before the port closes: net_memif in DPDK 22.11 can crash
    // in rx_burst when the peer disconnects during a burst (its control thread unmaps the
    // shared regions under the data path), so neither side may be polling when the other
    // goes away. The side that finishes first is gone before the other stops polling.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let st = port.stats().map_err(|e| e.to_string())?;
    eprintln!("tcpperf: port stats {st:?}");
    if net.xstats {
        for x in port.xstats().map_err(|e| e.to_string())? {
            eprintln!("  {} = {}", x.name, x.value);
        }
    }
    // The device (and its pcapng writer) went with the stack: the capture is complete.
    if let Some(c) = &net.dev.capture {
        let n = warpcore_apps::device::finish_capture(c)?;
        eprintln!("tcpperf: {n} frames captured to {}", c.display());
    }
    result
}
