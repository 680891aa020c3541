//! Replaying a committed cargo-fuzz corpus as a regular test, shared by the corpus tests of
//! the crates whose bodies live in `fuzz/` (`proto/tests/fuzz_corpus.rs`,
//! `analysis/tests/fuzz_capture.rs`) and of `tcp/tests/fuzz_tcp_segments.rs`.

use std::path::{Path, PathBuf};

/// Runs `body` on every file of `fuzz/corpus/<target>/` and fails on the first panic, naming
/// the file. An empty or missing corpus is an error too: the test must not pass vacuously.
#[allow(dead_code)] // each test crate includes this file and uses one of the two
pub fn replay(target: &str, body: fn(&[u8])) -> usize {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target);
    replay_dir(&dir, target, body)
}

/// [`replay`] of the corpus in `dir`, the body named `name` in its failures; returns how
/// many files it replayed. A missing, unreadable or empty directory fails.
#[allow(dead_code)]
pub fn replay_dir(dir: &Path, name: &str, body: fn(&[u8])) -> usize {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
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
            "fuzz body `{name}` failed on {} ({} octets)",
            path.display(),
            data.len()
        );
    }
    files.len()
}
