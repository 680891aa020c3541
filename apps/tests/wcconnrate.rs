//! wcconnrate (the connection-rate benchmark, issue 11) runs its whole loop and reports
//! figures only when every connection's Send was verified: both engines in one process
//! over the in-memory link (clean and with loss, where SYNs, MPA frames and FINs are lost
//! and retransmitted), several connections at once, and the kernel loop it is compared
//! with. Its figures come from `bench/connrate.sh`, not from here.

use std::process::Command;

fn run(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_wcconnrate"))
        .args(args)
        .output()
        .expect("run wcconnrate");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "wcconnrate {args:?} failed:\n{text}");
    text
}

fn field(text: &str, line: &str, key: &str) -> f64 {
    let l = text
        .lines()
        .find(|l| l.starts_with(line))
        .unwrap_or_else(|| panic!("no {line:?} line in:\n{text}"));
    l.split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in {l:?}"))
}

/// The client's count of connections and the server's count of verified Sends agree.
fn check(text: &str, stack: &str) {
    assert!(
        text.contains(&format!("RESULT connrate stack={stack} ")),
        "{text}"
    );
    let conns = field(text, "RESULT connrate ", "conns");
    let verified = field(text, "RESULT connrate-server", "verified");
    assert!(conns >= 10.0, "only {conns} connections:\n{text}");
    assert_eq!(conns, verified, "{text}");
    assert!(field(text, "RESULT connrate ", "rate") > 0.0);
}

#[test]
fn warpcore_loop_over_the_in_memory_link() {
    let t = run(&["--loopback=link", "--secs", "0.3"]);
    check(&t, "warpcore");
    let t = run(&["--loopback=link", "--secs", "0.3", "--parallel", "16"]);
    check(&t, "warpcore");
    assert!(t.contains("16 at once"), "{t}");
}

/// The same over DPDK net_memif: a memif server port and its client in one process
/// (`--loopback=memif`, also what the soak runs on). Its socket leaves nothing in the
/// file system (each run used to leave a `wcconnrate-memif-<pid>` directory behind).
#[cfg(feature = "dpdk")]
#[test]
fn warpcore_loop_over_a_memif_pair() {
    let left = || {
        std::fs::read_dir(std::env::temp_dir())
            .expect("temporary directory")
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("wcconnrate-memif-")
            })
            .count()
    };
    let before = left();
    let t = run(&["--loopback=memif", "--secs", "0.5", "--parallel", "8"]);
    check(&t, "warpcore");
    assert_eq!(
        left(),
        before,
        "the run left a memif socket directory behind"
    );
}

#[test]
fn warpcore_loop_under_loss() {
    // 2 % of frames lost each way: handshakes, MPA frames, Sends and FINs are retransmitted;
    // every connection still completes and every Send arrives intact.
    let t = run(&[
        "--loopback=link",
        "--secs",
        "3",
        "--parallel",
        "8",
        "--loss",
        "0.02",
    ]);
    check(&t, "warpcore");
}

#[test]
fn kernel_loop_on_loopback() {
    let t = run(&["--kernel", "--secs", "0.3", "--parallel", "4"]);
    check(&t, "kernel");
}

/// A `--kernel` run whose `--secs` ended before a client thread started made no connection,
/// and reported `conns=0 rate=0.0` with zero percentiles as a success (exit 0), which
/// bench/connrate.sh would have tabulated: a run that measured nothing fails.
#[test]
fn a_run_that_measured_nothing_fails() {
    let out = Command::new(env!("CARGO_BIN_EXE_wcconnrate"))
        .args(["--kernel", "--secs", "1e-9"])
        .output()
        .expect("run wcconnrate");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("nothing was measured"), "{text}");
    assert!(!text.contains("RESULT connrate "), "{text}");
}

/// `--capture` over a pair of DPDK ports was started and never finished: the run left
/// DPDK's raw file beside the path given and nothing at it. The capture is now rewritten
/// as plain pcapng at the path, holding the run's frames, and the raw file goes.
#[cfg(feature = "dpdk")]
#[test]
fn capture_is_written_where_asked() {
    let dir = std::env::temp_dir().join(format!("wcconnrate-capture-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cap = dir.join("cr.pcapng");
    let t = run(&[
        "--loopback=ring",
        "--secs",
        "0.2",
        "--capture",
        cap.to_str().unwrap(),
    ]);
    check(&t, "warpcore");
    let c = warpcore_apps::capture::read_capture_file(&cap)
        .unwrap_or_else(|e| panic!("{}: {e}\n{t}", cap.display()));
    assert!(c.frames.len() > 10, "{} frames\n{t}", c.frames.len());
    assert!(
        !warpcore_apps::device::raw_capture_path(&cap).exists(),
        "the raw capture was left behind"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A reader that goes away (`wcconnrate ... | grep -m1 RESULT`) made the next report line
/// panic in `println!` (exit 101 and a backtrace); the run now ends quietly with status
/// 141, as SIGPIPE would, as iwperf and tcpperf do.
#[test]
fn a_closed_stdout_ends_the_run_quietly() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_wcconnrate"))
        .args(["--kernel", "--secs", "0.1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run wcconnrate");
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bad_arguments_are_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_wcconnrate"))
        .args(["--kernel", "--parallel", "0"])
        .output()
        .expect("run wcconnrate");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--parallel"), "{err}");
}
