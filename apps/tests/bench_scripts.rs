//! The benchmark scripts that drive the apps, `bench/connrate.sh` (wcconnrate) and
//! `bench/qp-scale.sh` (iwperf), checked on themselves with stand-ins for cargo and the
//! tools (a real run takes minutes and both CPUs): arguments that would measure nothing
//! are refused before a run, the two processes of a run go to CPUs this process may use,
//! and a report without a figure fails instead of printing a table of nothing.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("apps/ has a parent")
        .to_path_buf()
}

/// A scratch directory with a `cargo` that builds nothing and the stand-in tools under
/// `target/release`; every call of a tool is appended to `calls`.
struct Rig {
    dir: PathBuf,
}

/// The stand-in wcconnrate: a server (no address) makes its memif socket and reports the
/// Sends it verified; a client and a `--kernel` run print the client's RESULT line.
const WCCONNRATE: &str = r#"#!/bin/sh
echo "wcconnrate $*" >>"$RIG/calls"
case "$*" in
    *--kernel*)
        echo "RESULT connrate stack=kernel conns=10 secs=1.000 parallel=1 rate=10.0 cycle_p50_us=5.0 cycle_p99_us=9.0 established_p50_us=2.0"
        echo "RESULT connrate-server verified=10" ;;
    198.18.0.2*)
        echo "RESULT connrate stack=warpcore conns=10 secs=1.000 parallel=1 rate=10.0 cycle_p50_us=4.0 cycle_p99_us=8.0 established_p50_us=1.0" ;;
    *)
        sock=$2
        python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$sock"
        echo "RESULT connrate-server verified=10" ;;
esac
"#;

/// The stand-in iwperf: the server makes its memif socket; the client prints perftest's
/// header and, unless `$RIG/no-row` exists, a row with a message rate.
const IWPERF: &str = r#"#!/bin/sh
echo "iwperf $*" >>"$RIG/calls"
case "$*" in
    *198.18.0.2*)
        echo " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
        [ -e "$RIG/no-row" ] || echo " 64         1000             N/A                100.00               1.562500" ;;
    *)
        sock=$3
        python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$sock" ;;
esac
"#;

impl Rig {
    fn new(name: &str) -> Rig {
        let dir = std::env::temp_dir().join(format!(
            "warpcore-bench-scripts-{name}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let examples = dir.join("target/release/examples");
        std::fs::create_dir_all(&examples).unwrap();
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        let tools = [
            (dir.join("bin/cargo"), "#!/bin/sh\nexit 0\n"),
            (dir.join("target/release/wcconnrate"), WCCONNRATE),
            (dir.join("target/release/iwperf"), IWPERF),
            (
                examples.join("qp_scale"),
                "#!/bin/sh\necho 'memory: 8892 bytes per idle connected QP'\n",
            ),
        ];
        for (path, text) in tools {
            std::fs::write(&path, text).unwrap();
            let mut perm = std::fs::metadata(&path).unwrap().permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
            std::fs::set_permissions(&path, perm).unwrap();
        }
        Rig { dir }
    }

    /// Runs `script` with `args` (and CPUS_ALLOWED_LIST `cpus`, the stand-in for the
    /// kernel's list); its exit status, its output, and the tool calls it made.
    fn run(&self, script: &str, args: &[&str], cpus: &str) -> (i32, String, String) {
        let _ = std::fs::remove_file(self.dir.join("calls"));
        let path = format!(
            "{}:{}",
            self.dir.join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = Command::new("bash")
            .arg(repo_root().join(script))
            .args(args)
            .env("PATH", path)
            .env("CARGO_TARGET_DIR", self.dir.join("target"))
            .env("CPUS_ALLOWED_LIST", cpus)
            .env("RIG", &self.dir)
            .output()
            .expect("run the script");
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        let calls = std::fs::read_to_string(self.dir.join("calls")).unwrap_or_default();
        (out.status.code().unwrap_or(-1), text, calls)
    }
}

impl Drop for Rig {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// ROUNDS 0 printed a table of zeros (and a division by zero for the ratio) and exited 0;
/// a fractional SECONDS (wcconnrate takes fractions) stopped with bash's "invalid
/// arithmetic operator"; PARALLEL 1 ran and counted the one-at-a-time run twice a round.
#[test]
fn connrate_refuses_arguments_that_measure_nothing() {
    let rig = Rig::new("connrate-args");
    for (args, names) in [
        (&["0"][..], "ROUNDS"),
        (&["two"], "ROUNDS"),
        (&["1", "0"], "SECONDS"),
        (&["1", "0.5"], "SECONDS"),
        (&["1", "1", "0"], "PARALLEL"),
        (&["1", "1", "257"], "PARALLEL"),
    ] {
        let (rc, text, calls) = rig.run("bench/connrate.sh", args, "0-1");
        assert_eq!(rc, 2, "{args:?}: {text}");
        assert!(
            text.contains(names),
            "{args:?} does not name {names}: {text}"
        );
        assert!(calls.is_empty(), "{args:?} ran the tool: {calls}");
    }
    let (rc, text, calls) = rig.run("bench/connrate.sh", &["1", "1", "1"], "0-1");
    assert_eq!(rc, 0, "{text}");
    let clients = calls.lines().filter(|l| l.contains("198.18.0.2")).count();
    assert_eq!(
        clients, 1,
        "PARALLEL 1: one Warpcore run a round, not\n{calls}"
    );
}

/// Both scripts put their two processes on CPUs 0 and 1, which a cpuset without them does
/// not have (DPDK: "lcore 0 unavailable"); they take the first two this process may use,
/// as the other two-process scripts do (scripts/lib/cpus.sh).
#[test]
fn two_process_runs_take_the_cpus_this_process_may_use() {
    let rig = Rig::new("cpus");
    let (rc, text, calls) = rig.run("bench/connrate.sh", &["1", "1", "4"], "3,6-7");
    assert_eq!(rc, 0, "{text}\n{calls}");
    for l in calls.lines().filter(|l| l.contains("--memif")) {
        let want = if l.contains("198.18.0.2") {
            "--cores 6"
        } else {
            "--cores 3"
        };
        assert!(l.contains(want), "{l}: wants {want}");
    }
    assert!(text.contains("| 4 |"), "{text}");
    let (rc, text, calls) = rig.run("bench/qp-scale.sh", &["1", "2048"], "3,6-7");
    assert_eq!(rc, 0, "{text}\n{calls}");
    for l in calls.lines() {
        let want = if l.contains("198.18.0.2") {
            "--cores 6"
        } else {
            "--cores 3"
        };
        assert!(l.contains(want), "{l}: wants {want}");
    }
}

/// qp-scale.sh: ROUNDS 0 printed a table of zeros and exited 0; fewer MESSAGES than QPs
/// asked iwperf for 0 messages a QP; and a report without a rate row had its header's
/// fifth word taken for the rate, printed, divided, and the script passed.
#[test]
fn qp_scale_refuses_nothing_to_measure_and_a_report_without_a_rate() {
    let rig = Rig::new("qp-scale");
    for (args, names) in [
        (&["0"][..], "ROUNDS"),
        (&["1", "1000"], "MESSAGES"),
        (&["1", "many"], "MESSAGES"),
    ] {
        let (rc, text, calls) = rig.run("bench/qp-scale.sh", args, "0-1");
        assert_eq!(rc, 2, "{args:?}: {text}");
        assert!(
            text.contains(names),
            "{args:?} does not name {names}: {text}"
        );
        assert!(calls.is_empty(), "{args:?} ran the tool: {calls}");
    }
    std::fs::write(rig.dir.join("no-row"), "").unwrap();
    let (rc, text, _) = rig.run("bench/qp-scale.sh", &["1", "2048"], "0-1");
    assert_ne!(rc, 0, "a report without a rate passed: {text}");
    assert!(text.contains("no message rate"), "{text}");
}
