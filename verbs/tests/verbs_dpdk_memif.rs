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
    let eal = EalBuilder::new("verbs_memif")
        .test_defaults(lcore, 512, &format!("wceng-m{role}-{id}"))
        .vdev(&format!(
            "net_memif0,role={role},socket={sock},socket-abstract=no"
        ))
        .log_level("error")
        .init()
        .expect("EAL");
    let mut port = DpdkPort::open(&eal, "net_memif0", 1, 8191).expect("memif port");
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
}

fn spawn(role: &str, sock: &str, id: &str, capture: Option<&str>) -> Child {
    let mut c = Command::new(std::env::current_exe().expect("test binary"));
    c.args(["--exact", NAME, "--nocapture", "--test-threads=1"])
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
    if let Ok(r) = std::env::var("WCENG_MEMIF_ROLE") {
        role(&r);
        return;
    }
    let id = std::process::id().to_string();
    let dir = std::env::temp_dir().join(format!("wceng-memif-{id}"));
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("wceng.sock");
    let cap = dir.join("memif.pcapng");
    let (sock, cap_s) = (sock.to_str().unwrap(), cap.to_str().unwrap());
    let mut server = spawn("server", sock, &id, Some(cap_s));
    std::thread::sleep(Duration::from_millis(300));
    let mut client = spawn("client", sock, &id, None);
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
