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

/// tcpperf: `--warmup` + `--iterations` round trips overflowed: `--iterations
/// 18446744073709551615` with the default warm-up of 1,000 wrapped (in a release build) to
/// 999 round trips, all warm-up, and the run reported the empty histogram's zeros with
/// status 0 (a debug build panicked). Refused before any run, naming both flags.
#[test]
fn tcpperf_refuses_round_trips_that_cannot_be_counted() {
    const MAX: &str = "18446744073709551615";
    let exe = env!("CARGO_BIN_EXE_tcpperf");
    for args in [
        &["memory", "--iterations", MAX][..],
        &["memory", "--warmup", MAX, "--iterations", "1"],
        &[
            "kernel-client",
            "--server",
            "127.0.0.1:1",
            "--iterations",
            MAX,
        ],
    ] {
        refused(exe, args, "--warmup");
        refused(exe, args, "--iterations");
    }
}

/// tcpperf: `WARPCORE_TCP` other than `warpcore` or `reference` ran Warpcore's TCP
/// silently, so a misspelt `reference` measured the wrong stack: refused, naming it.
#[test]
fn tcpperf_refuses_an_unknown_tcp_implementation() {
    let with = |tcp: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_tcpperf"))
            .args([
                "memory",
                "--test",
                "rr",
                "--iterations",
                "10",
                "--warmup",
                "0",
            ])
            .env("WARPCORE_TCP", tcp)
            .output()
            .expect("run tcpperf");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, text) = with("referense");
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("WARPCORE_TCP=\"referense\""), "{text}");
    for ok in ["warpcore", "reference"] {
        let (code, text) = with(ok);
        assert_eq!(code, Some(0), "{ok}: {text}");
    }
}

/// wcconnrate: a negative, NaN or endless `--secs` panicked turning it into a Duration;
/// `--loss` took any number (negative: no loss, above 1: nothing through); `--kernel`
/// silently ignored a server address, a device, `--loss`, `--port` (its server listens on
/// a port the kernel picks), `--capture`, `--cores` and the device's addressing; and
/// `--loopback` silently ignored a server address.
#[test]
fn wcconnrate_refuses_times_losses_and_flags_kernel_runs_ignore() {
    let exe = env!("CARGO_BIN_EXE_wcconnrate");
    for secs in ["-1", "NaN", "inf", "0", "1e300"] {
        refused(exe, &["--kernel", &format!("--secs={secs}")], "--secs");
    }
    for loss in ["-0.5", "1", "2", "NaN"] {
        refused(
            exe,
            &["--loopback=link", &format!("--loss={loss}")],
            "--loss",
        );
    }
    for args in [
        &["--kernel", "198.18.0.2"][..],
        &["--kernel", "--loopback=link", "--loss", "0.1"],
        &["--kernel", "--memif", "/tmp/wcconnrate-unused.sock"],
        &["--kernel", "--secs", "0.1", "--port", "9000"],
        &[
            "--kernel",
            "--secs",
            "0.1",
            "--capture",
            "/tmp/wcconnrate-unused.pcapng",
        ],
        &["--kernel", "--secs", "0.1", "--cores", "0"],
        &["--kernel", "--secs", "0.1", "--ip", "198.18.0.7/24"],
        &["--kernel", "--secs", "0.1", "--mtu", "1500"],
    ] {
        refused(exe, args, "--kernel");
    }
    let (rc, text) = run(exe, &["198.18.0.2", "--loopback=link", "--secs", "0.1"]);
    assert_eq!(rc, 2, "{text}");
    assert!(
        text.contains("--loopback") && text.contains("198.18.0.2"),
        "{text}"
    );
}

/// wcsoak: a negative or NaN `--minutes` panicked; `--qps 0` or `--ops 0` made a soak that
/// checked nothing and passed; `--report-secs 0` was silently taken as 1, and one beyond
/// a year panicked (`Instant + Duration` overflows); `--loss` took any number.
#[test]
fn wcsoak_refuses_times_counts_and_losses_that_cannot_run() {
    let exe = env!("CARGO_BIN_EXE_wcsoak");
    for (args, flag) in [
        (&["--minutes=-1"][..], "--minutes"),
        (&["--minutes", "NaN"], "--minutes"),
        (&["--minutes", "0"], "--minutes"),
        (&["--qps", "0"], "--qps"),
        (&["--ops", "0"], "--ops"),
        (&["--report-secs", "0"], "--report-secs"),
        (&["--report-secs", "18446744073709551615"], "--report-secs"),
        (&["--loss", "1.5"], "--loss"),
        (&["--loss=-0.01"], "--loss"),
    ] {
        refused(exe, args, flag);
    }
}

/// A timeout beyond the clock's arithmetic panicked (`Instant + Duration` overflows) at the
/// first wait: every tool bounds its timeouts at a year.
#[test]
fn timeouts_beyond_a_year_are_refused() {
    const HUGE: &str = "18446744073709551615";
    let client = ["-c", "-a", "198.18.0.11", "--ip", "198.18.0.2/24"];
    for (exe, args, flag) in [
        (
            env!("CARGO_BIN_EXE_wcconnrate"),
            vec!["--loopback=link", "--secs", "0.2", "--timeout", HUGE],
            "--timeout",
        ),
        (
            env!("CARGO_BIN_EXE_tcpperf"),
            vec!["memory", "--iterations", "5", "--timeout-s", HUGE],
            "--timeout-s",
        ),
        (
            env!("CARGO_BIN_EXE_iwping"),
            [&client[..], &["--timeout", HUGE]].concat(),
            "--timeout",
        ),
        (
            env!("CARGO_BIN_EXE_iwping"),
            [&client[..], &["--retry", HUGE]].concat(),
            "--retry",
        ),
        // Last: without the bound its client thread panicked and its server thread waited on.
        (
            env!("CARGO_BIN_EXE_iwperf"),
            vec!["write_lat", "--loopback=link", "-n", "5", "--timeout", HUGE],
            "--timeout",
        ),
    ] {
        refused(exe, &args, flag);
    }
}
