//! Running tshark on a capture. Every run disables the `rpcordma` heuristic dissector,
//! which otherwise claims some iWARP Sends as RPC-over-RDMA, and tries TCP's heuristic
//! dissectors (iWARP MPA's among them) before its port table: an ephemeral port that
//! happens to be registered there (57000 is IRC's, inside our TCP's 49152-65535 and
//! Linux's 32768-60999) otherwise has every segment of that connection dissected as that
//! protocol, reported malformed, and no FPDU found.

use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Whether tshark runs on this machine.
pub fn available() -> bool {
    Command::new("tshark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether tshark can run. Without it this panics when `WARPCORE_REQUIRE_TSHARK` is set (as
/// `scripts/test.sh` sets it), and otherwise prints that `what` is skipped and returns
/// false: never a silent skip.
pub fn present_or_skip(what: &str) -> bool {
    if available() {
        return true;
    }
    assert!(
        std::env::var_os("WARPCORE_REQUIRE_TSHARK").is_none(),
        "tshark is required (WARPCORE_REQUIRE_TSHARK is set) but not installed"
    );
    eprintln!("SKIPPED {what}: tshark not installed (apt-get install tshark)");
    false
}

fn command(file: &Path, args: &[&str]) -> Command {
    let mut c = Command::new("tshark");
    c.arg("-r")
        .arg(file)
        .args(["--disable-protocol", "rpcordma"])
        .args(["-o", "tcp.try_heuristic_first:TRUE"])
        .args(args);
    c
}

/// Runs tshark with `args` on `file` and returns its standard output; panics with its
/// standard error when it fails.
pub fn run(file: &Path, args: &[&str]) -> String {
    let out = command(file, args).output().expect("run tshark");
    assert!(
        out.status.success(),
        "tshark {args:?} on {} failed: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Starts tshark with `args` on `file`, standard output piped (to run many at once: its
/// start-up dominates); collect it with [`finish`].
pub fn spawn(file: &Path, args: &[&str]) -> Child {
    command(file, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tshark")
}

/// The standard output of a tshark started by [`spawn`]; panics when it failed.
pub fn finish(child: Child) -> String {
    let out = child.wait_with_output().expect("wait for tshark");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
