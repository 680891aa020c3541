//! Warpcore command-line tools; shared code for the binaries in `src/bin/`.
#![forbid(unsafe_code)]
