//! The core verbs suite between two processes over DPDK net_memif (`--no-huge --no-pci`):
//! the test spawns itself twice, as memif server and as memif client, and judges the
//! server's pcapng capture with iwdump and tshark.
#![cfg(feature = "dpdk")]

mod common;

use std::process::{Child, Command};
use std::time::{Duration, Instant};

use warpcore_verbs::dpdk::dpdk_sys::EalBuilder;
use warpcore_verbs::dpdk::DpdkPort;
use warpcore_verbs::*;

const NAME: &str = "core_suite_over_net_memif_two_processes";

fn role(role: &str) {
    let sock = std::env::var("WCENG_MEMIF_SOCK").expect("socket path");
    let id = std::env::var("WCENG_MEMIF_ID").expect("run id");
    let (lcore, mac_last, ip) = if role == "server" {
        (0, 2, [198, 18, 0, 2])
    } else {
        (1, 1, [198, 18, 0, 1])
    };
    let eal = EalBuilder::for_test(&format!("verbs_memif_{role}_{id}"), lcore, 512)
        .vdev(&format!(
            "net_memif0,role={role},socket={sock},socket-abstract=no"
        ))
        .init()
        .expect("EAL");
    let queues: u16 = std::env::var("WCENG_MEMIF_QUEUES")
        .ok()
        .and_then(|q| q.parse().ok())
        .unwrap_or(1);
    let mut port = DpdkPort::open(&eal, "net_memif0", queues, 8191).expect("memif port");
    if let Ok(cap) = std::env::var("WCENG_MEMIF_CAPTURE") {
        port.capture_pcapng(&eal, &cap, "wceng_memif_cap")
            .expect("pcapng");
    }
    let mut cfg = Config::new(Device::Dpdk(port), ip);
    cfg.mac = Some([2, 0, 0, 0, 0, mac_last]);
    // Both processes stop polling before either closes its memif port.
    cfg.engine.shutdown_linger_ms = 1000;
    let ctx = Context::open(cfg).expect("context");
    if role == "server" {
        common::server(&ctx, || {});
    } else {
        common::client(&ctx, [198, 18, 0, 2]);
    }
    // The suite's traffic uses a few of the 1,024 ring slots each way; the rest of
    // net_memif's shared memory is mapped only because the port populated it when the
    // link came up (dpdk_sys::prefault_memif_regions).
    let regions = memif_regions();
    assert!(
        !regions.is_empty(),
        "no memif_region mapping in /proc/self/smaps"
    );
    for (size, rss) in regions {
        assert_eq!(
            rss, size,
            "memif region of {size} KiB has only {rss} KiB resident"
        );
    }
}

/// (Size, Rss) in KiB of each memif region mapping of this process.
fn memif_regions() -> Vec<(u64, u64)> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
    let mut out = Vec::new();
    let mut cur: Option<(Option<u64>, Option<u64>)> = None;
    let kib = |l: &str| {
        l.split_whitespace()
            .nth(1)
            .and_then(|v| v.parse::<u64>().ok())
    };
    for line in smaps.lines() {
        let header = line.split_whitespace().next().is_some_and(|f| {
            f.contains('-') && f.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
        });
        if header {
            if let Some((Some(s), Some(r))) = cur.take() {
                out.push((s, r));
            }
            cur = line
                .contains("/memfd:memif_region_")
                .then_some((None, None));
        } else if let Some((s, r)) = cur.as_mut() {
            if line.starts_with("Size:") {
                *s = kib(line);
            } else if line.starts_with("Rss:") {
                *r = kib(line);
            }
        }
    }
    if let Some((Some(s), Some(r))) = cur {
        out.push((s, r));
    }
    out
}

fn spawn(
    name: &str,
    role: &str,
    sock: &str,
    id: &str,
    capture: Option<&str>,
    queues: u16,
) -> Child {
    let mut c = Command::new(std::env::current_exe().expect("test binary"));
    c.args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env("WCENG_MEMIF_QUEUES", queues.to_string())
        .env("WCENG_MEMIF_ROLE", role)
        .env("WCENG_MEMIF_SOCK", sock)
        .env("WCENG_MEMIF_ID", id);
    if let Some(p) = capture {
        c.env("WCENG_MEMIF_CAPTURE", p);
    }
    c.spawn().expect("spawn role")
}

fn wait(child: &mut Child, deadline: Instant) -> bool {
    loop {
        if let Some(st) = child.try_wait().expect("wait") {
            return st.success();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn core_suite_over_net_memif_two_processes() {
    run(NAME, 1);
}

/// Two engine cores per process: net_memif delivers each frame on the queue index the peer
/// sent it on, so client core k talks to server core k; the client's queue pairs alternate
/// between its cores and the server accepts each request on the core it arrived at.
#[test]
fn core_suite_over_net_memif_two_cores_per_process() {
    run("core_suite_over_net_memif_two_cores_per_process", 2);
}

fn run(name: &str, queues: u16) {
    if let Ok(r) = std::env::var("WCENG_MEMIF_ROLE") {
        role(&r);
        return;
    }
    let id = format!("{}q{queues}", std::process::id());
    let dir = std::env::temp_dir().join(format!("wceng-memif-{id}"));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("wceng.sock");
    let cap = dir.join("memif.pcapng");
    let (sock, cap_s) = (sock.to_str().unwrap(), cap.to_str().unwrap());
    let mut server = spawn(name, "server", sock, &id, Some(cap_s), queues);
    std::thread::sleep(Duration::from_millis(300));
    let mut client = spawn(name, "client", sock, &id, None, queues);
    let deadline = Instant::now() + Duration::from_secs(120);
    let client_ok = wait(&mut client, deadline);
    let server_ok = wait(&mut server, deadline);
    assert!(
        client_ok && server_ok,
        "client ok {client_ok}, server ok {server_ok}"
    );
    common::judge::judge_capture(&cap);
    let _ = std::fs::remove_dir_all(&dir);
}
