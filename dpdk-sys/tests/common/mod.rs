//! What the test binaries that need more than a vdev share.

/// Fails the test unless it runs as root (a net_tap port creates a tap interface): a check
/// that cannot run fails loudly (`scripts/test.sh` runs the suite as root).
pub fn require_root() {
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|e| e == "0"))
        })
        .unwrap_or(false);
    assert!(
        root,
        "this test needs root (a net_tap interface): run it as root, as scripts/test.sh does"
    );
}
