//! Flags out of range are refused at the command line with exit status 2 and a message
//! naming the flag, before any device, thread or timer starts: never a panic, a run that
//! measures nothing, a hang until a timeout, or a value silently replaced.

use std::process::Command;

/// Runs tool `exe` with `args`; its exit status and everything it printed.
fn run(exe: &str, args: &[&str]) -> (i32, String) {
    let out = Command::new(exe).args(args).output().expect("run the tool");
    let text =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    (out.status.code().unwrap_or(-1), text)
}

/// `args` is refused as a usage error that names `flag`.
fn refused(exe: &str, args: &[&str], flag: &str) {
    let (rc, text) = run(exe, args);
    assert_eq!(rc, 2, "{args:?}: {text}");
    assert!(text.contains(flag), "{args:?} does not name {flag}: {text}");
    assert!(!text.contains("panicked"), "{args:?}: {text}");
}

/// tcpperf: a zero-octet request/response measured nothing (every "round trip" done
/// before it started), zero iterations reported zeros, zero bulk octets or a zero buffer
/// hung until the timeout, a size beyond memory panicked, and `memory --mtu` took any
/// number.
#[test]
fn tcpperf_refuses_sizes_and_counts_that_cannot_run() {
    let exe = env!("CARGO_BIN_EXE_tcpperf");
    for (args, flag) in [
        (&["memory", "--size", "0"][..], "--size"),
        (&["memory", "--size", "18446744073709551615"], "--size"),
        (&["memory", "--size", "67108865"], "--size"),
        (&["memory", "--iterations", "0"], "--iterations"),
        (&["memory", "--test", "bulk", "--bytes", "0"], "--bytes"),
        (&["memory", "--buffer", "0"], "--buffer"),
        (&["memory", "--mtu", "0"], "--mtu"),
        (&["memory", "--mtu", "100000"], "--mtu"),
        (
            &["kernel-client", "--server", "127.0.0.1:1", "--size", "0"],
            "--size",
        ),
    ] {
        refused(exe, args, flag);
    }
}
