//! Replaying a committed cargo-fuzz corpus as a regular test, shared by the corpus tests of
//! the crates whose bodies live in `fuzz/` (`proto/tests/fuzz_corpus.rs`,
//! `analysis/tests/fuzz_capture.rs`).

use std::path::PathBuf;

/// Runs `body` on every file of `fuzz/corpus/<target>/` and fails on the first panic, naming
/// the file. An empty or missing corpus is an error too: the test must not pass vacuously.
pub fn replay(target: &str, body: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {} unreadable: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "corpus {} is empty", dir.display());
    for path in &files {
        let data = std::fs::read(path).expect("corpus file");
        let outcome = std::panic::catch_unwind(|| body(&data));
        assert!(
            outcome.is_ok(),
            "fuzz body `{target}` failed on {} ({} octets)",
            path.display(),
            data.len()
        );
    }
}
