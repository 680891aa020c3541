//! Warpcore's drop-in `librdmacm.so.1` (issue 13): librdmacm's public functions with
//! their version nodes, each a jump into the `__wc_rdma_*` implementation in Warpcore's
//! `libibverbs.so.1` (`rdma-compat`), where the engine, the devices and the verbs objects
//! the connection manager works with live. Two libraries with one state: the state
//! stays in one of them.
//!
//! The `__wc_` symbols are resolved when the program loads: every program that links
//! librdmacm links libibverbs too (the rdma_cm API hands out `ibv_*` objects), and
//! `scripts/with-warpcore` puts both drop-ins on the library path. rsockets (`rsocket`,
//! `rsend`, ...) are not provided; `rpoll` is (rping and ucmatose call it), as `poll`.

std::arch::global_asm!(
    include_str!(concat!(env!("OUT_DIR"), "/rdmacm.s")),
    options(att_syntax)
);
