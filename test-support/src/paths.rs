//! Test data inside the checkout, found relative to it (never an absolute path of a
//! machine: `apps/tests/repo_paths.rs` greps the tree for those).

use std::path::{Path, PathBuf};

/// The root of the checkout (the workspace folder).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("test-support lives one folder below the workspace root")
        .to_path_buf()
}

/// The real siw captures the tests use (`interop/pcaps`).
pub fn interop_pcaps() -> PathBuf {
    repo_root().join("interop").join("pcaps")
}
