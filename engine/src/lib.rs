//! (being written) The Warpcore engine: run-to-completion cores, connections, QP/CQ/MR tables,
//! placement into registered memory, and the rings that join application threads to cores.
// Unsafe code is allowed only in the modules that opt in (`mem` placement, `ring`), each
// block with a `// SAFETY:` comment (GUIDE rule 4).
#![deny(unsafe_code)]

pub mod mem;
pub mod ring;
