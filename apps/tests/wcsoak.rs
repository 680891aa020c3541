//! wcsoak (the soak, issue 15) honours the device flags it takes: `--ip` is where its
//! client connects, and `--capture` over DPDK ports ends as a capture at the path given.
//! Short runs (a few seconds, one connection a round, no loss): the soak proper is
//! `scripts/soak.sh`.

use std::process::Command;

/// Runs a three-second wcsoak (reports every second, the warm-up the first, no loss, one
/// QP, one operation a round) with `extra` flags after; returns its exit status and
/// everything it printed.
fn run_soak(extra: &[&str]) -> (Option<i32>, String) {
    let mut args = vec![
        "--minutes",
        "0.05",
        "--report-secs",
        "1",
        "--loss",
        "0",
        "--qps",
        "1",
        "--ops",
        "1",
    ];
    args.extend_from_slice(extra);
    let out = Command::new(env!("CARGO_BIN_EXE_wcsoak"))
        .args(&args)
        .output()
        .expect("run wcsoak");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// [`run_soak`]; the run must pass. Returns everything it printed.
fn soak(extra: &[&str]) -> String {
    let (code, text) = run_soak(extra);
    assert_eq!(code, Some(0), "wcsoak {extra:?} failed:\n{text}");
    assert!(text.contains("wcsoak: ok:"), "{text}");
    text
}

/// The server engine took `--ip`, but the client connected to 10.0.0.2 all the same: no
/// connection request ever came, and the soak failed after its 60 s wait.
#[test]
fn the_client_connects_to_the_address_given() {
    soak(&["--ip", "10.0.0.9/24"]);
}

/// `--capture` over DPDK ports was started and never finished: the run left DPDK's raw
/// file beside the path given and nothing at it.
#[cfg(feature = "dpdk")]
#[test]
fn capture_is_written_where_asked() {
    let dir = std::env::temp_dir().join(format!("wcsoak-capture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cap = dir.join("soak.pcapng");
    let t = soak(&["--loopback=ring", "--capture", cap.to_str().unwrap()]);
    let c = warpcore_apps::capture::read_capture_file(&cap)
        .unwrap_or_else(|e| panic!("{}: {e}\n{t}", cap.display()));
    assert!(c.frames.len() > 10, "{} frames\n{t}", c.frames.len());
    assert!(t.contains("frames captured to"), "{t}");
    assert!(
        !warpcore_apps::device::raw_capture_path(&cap).exists(),
        "the raw capture was left behind"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A reader that goes away (`wcsoak ... | head -3`) made the next report line panic in
/// `println!` (exit 101 and a backtrace); the soak now ends quietly with status 141, as
/// SIGPIPE would, as iwperf and tcpperf do.
#[test]
fn a_closed_stdout_ends_the_soak_quietly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_wcsoak"))
        .args([
            "--minutes",
            "0.02",
            "--loss",
            "0",
            "--qps",
            "1",
            "--ops",
            "1",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run wcsoak");
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// Runs a short soak with `--inject-defect defect`; it must fail, saying `says`.
fn soak_fails(defect: &str, says: &str) {
    let (code, text) = run_soak(&["--inject-defect", defect]);
    assert_eq!(code, Some(1), "--inject-defect {defect}:\n{text}");
    assert!(text.contains("wcsoak: FAILED: "), "{text}");
    assert!(text.contains(says), "--inject-defect {defect}:\n{text}");
}

/// A FetchAdd whose result never lands in A's result word: the word still held what it
/// held before, which on a connection's first FetchAdd was the fresh region's 0, the
/// counter's original value, so the soak passed. The word is now poisoned first.
#[test]
fn a_fetch_add_result_that_never_lands_fails_the_soak() {
    soak_fails("stale-fetch-add", "FetchAdd's result word in A is");
}

/// The Read behind the window's Write took one octet back and nothing compared it: a
/// Read that returned wrong data passed. It now takes the Write back whole and is
/// compared with what B holds.
#[test]
fn a_fence_read_that_returns_wrong_data_fails_the_soak() {
    soak_fails(
        "corrupt-fence-read",
        "Read behind the window's Write returned to A: octet 0 of",
    );
}
