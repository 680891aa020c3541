//! The bench scripts' parsing and verdicts on canned output: `bench/test-scripts.sh`, run
//! here so that `cargo test` runs it (it needs bash and python3, which compare.sh needs too;
//! a missing one fails the test, it is not skipped).

#[test]
fn bench_scripts_judge_canned_output() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/test-scripts.sh");
    let out = std::process::Command::new("bash")
        .arg(script)
        .output()
        .unwrap_or_else(|e| panic!("bash {script}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    assert!(out.status.success(), "{script} failed:\n{text}");
    assert!(!text.contains("FAILED"), "{text}");
}
