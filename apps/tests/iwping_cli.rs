//! iwping's command line: rping's options are accepted with rping's limits, and a run that
//! cannot start says why with exit status 2 (usage) before touching any device. The exchange
//! itself is checked against Linux siw by scripts/interop-siw.sh (root, QEMU).

use std::process::Command;

fn iwping(args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_iwping"))
        .args(args)
        .output()
        .expect("run iwping");
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    (out.status.code().unwrap_or(-1), text)
}

/// A client of 198.18.0.11 from 198.18.0.2/24 with `extra` flags.
fn client(extra: &[&str]) -> (i32, String) {
    let mut args = vec!["-c", "-a", "198.18.0.11", "--ip", "198.18.0.2/24"];
    args.extend_from_slice(extra);
    iwping(&args)
}

#[test]
fn a_role_is_required() {
    let (rc, text) = iwping(&["-C", "1"]);
    assert_eq!(rc, 2, "{text}");
    assert!(text.contains("-s") && text.contains("-c"), "{text}");
}

#[test]
fn client_needs_server_and_own_address() {
    let (rc, text) = iwping(&["-c", "--ip", "198.18.0.2/24"]);
    assert_eq!(rc, 2, "{text}");
    assert!(text.contains("-a ADDR"), "{text}");
    let (rc, text) = iwping(&["-c", "-a", "198.18.0.11"]);
    assert_eq!(rc, 2, "{text}");
    assert!(text.contains("--ip"), "{text}");
}

#[test]
fn size_limits_are_rpings() {
    // rping: RPING_MIN_BUFSIZE (26) ..= RPING_BUFSIZE - 1.
    for bad in ["25", "65536"] {
        let (rc, text) = iwping(&["-s", "-a", "198.18.0.2", "-S", bad]);
        assert_eq!(rc, 2, "-S {bad}: {text}");
    }
}

#[test]
fn p2p_needs_rev_2_and_no_device_is_a_clear_error() {
    let (rc, text) = client(&["--p2p", "--mpa-rev", "1"]);
    assert_eq!(rc, 2, "{text}");
    assert!(text.contains("--p2p needs --mpa-rev 2"), "{text}");
    let (rc, text) = iwping(&["-s", "-a", "198.18.0.2"]);
    assert_eq!(rc, 1, "{text}");
    assert!(text.contains("no device"), "{text}");
}

/// rping's -P: a persistent server serves one client after another over a net_memif
/// socket (the memif link comes back up for each new client process); -I gives the
/// client's own address as rping's bind address does, and -q is accepted.
#[cfg(feature = "dpdk")]
#[test]
fn a_persistent_server_serves_clients_one_after_another() {
    let sock = std::env::temp_dir().join(format!("iwping-p-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&sock);
    let sock_s = sock.to_str().unwrap().to_string();
    let mut server = Command::new(env!("CARGO_BIN_EXE_iwping"))
        .args([
            "-s",
            "-P",
            "-a",
            "198.18.0.2",
            "-p",
            "7475",
            "--memif",
            &sock_s,
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start iwping -s -P");
    for _ in 0..100 {
        if sock.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    for k in 1..=2 {
        let (rc, text) = iwping(&[
            "-c",
            "-q",
            "-a",
            "198.18.0.2",
            "-I",
            "198.18.0.1",
            "-p",
            "7475",
            "--memif",
            &sock_s,
            "-C",
            "3",
            "-V",
            "-S",
            "40",
            "--timeout",
            "20",
            "--retry",
            "10",
        ]);
        assert_eq!(rc, 0, "client {k}: {text}");
        assert!(text.contains("3 pings done"), "client {k}: {text}");
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let _ = server.kill();
    let out = server.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("client 1: 3 pings done"), "{log}");
    assert!(log.contains("client 2: 3 pings done (6 in all)"), "{log}");
    let _ = std::fs::remove_file(&sock);
}

/// A reader that goes away (`iwping -c -v ... | head -1`) made the next "ping data" line
/// panic in `println!` (exit 101 and a backtrace); the client now ends quietly with status
/// 141, as SIGPIPE would, as iwperf and tcpperf do.
#[cfg(feature = "dpdk")]
#[test]
fn a_closed_stdout_ends_the_client_quietly() {
    let sock = std::env::temp_dir().join(format!("iwping-pipe-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&sock);
    let sock_s = sock.to_str().unwrap().to_string();
    let mut server = Command::new(env!("CARGO_BIN_EXE_iwping"))
        .args(["-s", "-a", "198.18.0.2", "-p", "7476", "--memif", &sock_s])
        .args(["--timeout", "20"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start iwping -s");
    for _ in 0..100 {
        if sock.exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let mut client = Command::new(env!("CARGO_BIN_EXE_iwping"))
        .args(["-c", "-a", "198.18.0.2", "-I", "198.18.0.1", "-p", "7476"])
        .args([
            "--memif",
            &sock_s,
            "-C",
            "3",
            "-v",
            "--timeout",
            "20",
            "--retry",
            "10",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start iwping -c");
    drop(client.stdout.take());
    let out = client.wait_with_output().unwrap();
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_file(&sock);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn persistent_mode_is_the_servers() {
    let (rc, text) = iwping(&["-c", "-P", "-a", "198.18.0.2", "-I", "198.18.0.1"]);
    assert_eq!(rc, 2, "{text}");
    assert!(
        text.contains("-P (persistent server) applies to the server"),
        "{text}"
    );
}

/// The client's --rtr is what --p2p offers: without --p2p it was silently dropped and the
/// connection asked for no peer-to-peer mode at all.
#[test]
fn client_rtr_needs_p2p() {
    let (rc, text) = client(&["--rtr", "read"]);
    assert_eq!(rc, 2, "{text}");
    assert!(text.contains("give --p2p"), "{text}");
}
