//! Warpcore's drop-in `libibverbs.so.1` (issue 13): unmodified rdma-core applications
//! (perftest, rping, ucmatose, rdma_server/rdma_client, anything written against
//! `<infiniband/verbs.h>` and `<rdma/rdma_cma.h>`) run on a Warpcore engine in their own
//! process. `scripts/with-warpcore` builds this library, the `librdmacm.so.1` that forwards
//! into it (`rdma-compat/rdmacm`) and the inert provider stand-ins
//! (`rdma-compat/stand-ins`), sets the `WARPCORE_*` environment and puts them ahead of the
//! system's libraries.
//!
//! # How it fits together
//! - **One device, one engine per process.** `ibv_get_device_list` shows one iWARP device,
//!   `warpcore0`, once the environment names a port (`warpcore_apps::env`); the first
//!   `ibv_open_device` (or the first `rdma_cm` call that needs a device) starts the engine on
//!   it, and every open returns the same context (the EAL lives as long as the process).
//! - **Objects are the public structs with ours behind them.** Each `ibv_pd`, `ibv_mr`,
//!   `ibv_cq`, `ibv_qp`, `ibv_srq`, `ibv_comp_channel` is the first field of a `#[repr(C)]`
//!   box that also holds the `warpcore_verbs` object, so the pointer an application gets
//!   back is ours to cast. The context is a `verbs_context` (so `verbs.h`'s extended inline
//!   functions find their `sz` and fall back where we leave an entry NULL).
//! - **The data path is the inline functions of `verbs.h`**: `ibv_post_send`,
//!   `ibv_post_recv`, `ibv_poll_cq`, `ibv_req_notify_cq`, `ibv_post_srq_recv` call through
//!   `context->ops`, which [`verbs`] fills. An `ibv_sge` maps to a Warpcore SGE directly:
//!   regions are registered at their own address (TO = address, `ibv_reg_mr`) or at the
//!   `iova` of `ibv_reg_mr_iova2`, and the lkey and rkey are the STag.
//! - **The connection manager** ([`cm`]) maps `rdma_cm_id`s onto the engine's MPA
//!   connection manager: a dispatcher thread takes the engine's events and queues each on
//!   the event channel of the id it belongs to; the channel's descriptor is readable while
//!   an event waits, for `poll()` users. Synchronous ids (no channel, `rdma_create_ep`) wait
//!   for their own events.
//! - **Exit**: a normal exit closes the connections the process still holds, stops
//!   listening on every port (ending the requests the engine never reported) and refuses
//!   the connection requests it never answered, as the kernel's close of its rdma_cm
//!   descriptor does, so the peers learn at once (`atexit`, bounded;
//!   `cm::refuse_requests_at_exit`, `verbs::close_at_exit`).
//! - **Versions**: every public function has the symbol version Debian's library gives it
//!   (`objdump -T`), attached by `.symver` in [`export`]; the Rust functions themselves are
//!   named `__wc_<name>` (which `librdmacm.so.1` jumps to).
//!
//! What is not supported (UD and other QP types, address handles, multicast, XRC,
//! extended CQs and QPs, device memory, flow steering) returns the errno the man pages
//! name, `EOPNOTSUPP` mostly, never a crash.

#![allow(unsafe_code)]
// The exported functions follow the C API's names and argument lists; each dereferences
// the pointers the caller passes, under that API's contract (documented per function).
#![allow(clippy::missing_safety_doc, clippy::not_unsafe_ptr_arg_deref)]
// The C structs are filled field by field from a zeroed Default, as the man pages list them.
#![allow(clippy::field_reassign_with_default)]

pub mod cm;
pub mod export;
pub mod sys;
pub mod verbs;

use std::ffi::c_int;
use std::sync::{Mutex, OnceLock};

use warpcore_verbs::{Context, MpaParams};

extern "C" {
    fn __errno_location() -> *mut c_int;
}

/// Sets the calling thread's `errno`.
pub(crate) fn set_errno(e: c_int) {
    // SAFETY: glibc's __errno_location returns the calling thread's errno slot, valid for
    // the thread's lifetime.
    unsafe { *__errno_location() = e }
}

/// Runs an exported function's body, turning a panic (a bug of ours) into the C error
/// `fail` with `errno = EIO` instead of unwinding into C, which would abort the application.
pub(crate) fn guard<T>(fail: T, f: impl FnOnce() -> T) -> T {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(_) => {
            set_errno(EIO);
            fail
        }
    }
}

pub(crate) const EPERM: c_int = 1;
pub(crate) const ENOENT: c_int = 2;
pub(crate) const EIO: c_int = 5;
pub(crate) const EBADF: c_int = 9;
pub(crate) const EFAULT: c_int = 14;
pub(crate) const EAGAIN: c_int = 11;
pub(crate) const ENOMEM: c_int = 12;
pub(crate) const EBUSY: c_int = 16;
pub(crate) const ENODEV: c_int = 19;
pub(crate) const EINVAL: c_int = 22;
pub(crate) const ENOSYS: c_int = 38;
pub(crate) const EOPNOTSUPP: c_int = 95;
pub(crate) const EAFNOSUPPORT: c_int = 97;
pub(crate) const EADDRINUSE: c_int = 98;
pub(crate) const EADDRNOTAVAIL: c_int = 99;
pub(crate) const ENETUNREACH: c_int = 101;
pub(crate) const ECONNRESET: c_int = 104;
pub(crate) const ETIMEDOUT: c_int = 110;
pub(crate) const ECONNREFUSED: c_int = 111;
pub(crate) const EHOSTUNREACH: c_int = 113;

/// The errno an engine error stands for.
pub(crate) fn errno_of(e: &warpcore_verbs::Error) -> c_int {
    use warpcore_verbs::Error as E;
    match e {
        E::Timeout => ETIMEDOUT,
        // ibv_post_send(3): ENOMEM when the send queue is full.
        // A queue or SGE count above what ibv_query_device reports, asked of
        // ibv_create_cq/qp/srq or ibv_modify_srq: EINVAL, as siw, rxe and mlx5 answer and
        // the man pages list.
        E::LimitExceeded(
            "cq depth" | "srq depth" | "srq sges" | "srq limit" | "sq_depth" | "rq_depth"
            | "max_sge" | "max_inline",
        ) => EINVAL,
        E::QueueFull | E::LimitExceeded(_) | E::TableFull(_) | E::PdNumbersExhausted => ENOMEM,
        // A Read or atomic on a connection with an ORD of 0 (rdma_connect's or
        // rdma_accept's initiator_depth 0) can never be issued: EINVAL, as siw refuses it
        // ("negotiated not to send READ req's"), not the ENOMEM of a full queue, which an
        // application would retry.
        E::NoReadCredits => EINVAL,
        E::NotSupported(_) => EOPNOTSUPP,
        E::SgeInvalidStag | E::SgeAccess | E::SgeOutOfBounds | E::Stag(_) => EPERM,
        E::EngineGone | E::Device(_) | E::Dpdk(_) => EIO,
        E::Tcp(_) => EADDRINUSE,
        E::NeedsEngineThreads(_) | E::NoChannel => EOPNOTSUPP,
        E::StaleHandle => ENOENT,
        // The system refused a completion channel's descriptor: its own errno (EMFILE,
        // ENFILE, ENOMEM), as rdma-core's ibv_create_comp_channel passes on the kernel's
        // (uverbs' get_unused_fd_flags). It was EINVAL, an input error the caller never
        // made.
        E::Channel(io) => io.0.raw_os_error().filter(|&e| e > 0).unwrap_or(EIO),
        E::NotListening(_) => EINVAL,
        // ibv_dereg_mr(3) with memory windows bound to the region.
        E::Memory(warpcore_verbs::MemError::Busy) => EBUSY,
        _ => EINVAL,
    }
}

/// The process's engine and what the environment configured.
pub(crate) struct Engine {
    pub ctx: Context,
    pub mpa: MpaParams,
    pub rfc7306: bool,
    /// `WARPCORE_SETTLE_MS`.
    pub settle_ms: u64,
    pub ip: std::net::Ipv4Addr,
    pub prefix_len: u8,
    pub gateway: bool,
}

static ENGINE: OnceLock<Result<Engine, String>> = OnceLock::new();
/// Serialises the first open (the EAL is initialised once per process).
static OPENING: Mutex<()> = Mutex::new(());

/// The engine, started on first use from the `WARPCORE_*` environment. The error says
/// what is missing or failed (printed once to stderr as well: the application only sees
/// an errno).
pub(crate) fn engine() -> Result<&'static Engine, &'static str> {
    if let Some(r) = ENGINE.get() {
        return r.as_ref().map_err(String::as_str);
    }
    let _g = OPENING.lock().unwrap_or_else(|e| e.into_inner());
    let r = ENGINE.get_or_init(|| {
        let r = open_engine();
        if let Err(e) = &r {
            eprintln!("warpcore: cannot start the engine: {e}");
        }
        r
    });
    r.as_ref().map_err(String::as_str)
}

/// The engine if it runs already (no start).
pub(crate) fn engine_if_open() -> Option<&'static Engine> {
    ENGINE.get().and_then(|r| r.as_ref().ok())
}

/// `ibv_query_device`'s `max_cqe` (2^20 entries).
pub(crate) const COMPAT_MAX_CQE: usize = 1 << 20;

/// What the drop-in reads of the environment itself (the rest is `warpcore_apps::env`'s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OwnVars {
    /// `WARPCORE_RFC7306` (default on).
    pub rfc7306: bool,
    /// `WARPCORE_SETTLE_MS` (default 0).
    pub settle_ms: u64,
    /// `WARPCORE_MEMIF_WAIT` (default 30).
    pub memif_wait_s: u64,
}

/// Reads [`OwnVars`] through `get` (the environment, or a map in tests). A bad value, or
/// one that is not UTF-8, is an error naming the variable: it stops the engine's start
/// instead of leaving the default in its place.
pub(crate) fn own_vars(
    get: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> Result<OwnVars, String> {
    let var = |k: &'static str| warpcore_apps::env::utf8_var(k, get(k)).map_err(|e| e.to_string());
    let rfc7306 = match var("WARPCORE_RFC7306")?.as_deref() {
        None | Some("on") => true,
        Some("off") => false,
        Some(o) => {
            return Err(format!(
                "WARPCORE_RFC7306: {o:?}: expected on or off (off towards siw, which has no \
                 RFC 7306)"
            ))
        }
    };
    let settle_ms = match var("WARPCORE_SETTLE_MS")? {
        None => 0,
        Some(v) => v.trim().parse().map_err(|_| {
            format!(
                "WARPCORE_SETTLE_MS: {v:?}: expected whole milliseconds to hold an active \
                 side's ESTABLISHED back"
            )
        })?,
    };
    let memif_wait_s = match var("WARPCORE_MEMIF_WAIT")? {
        None => 30,
        Some(v) => v.parse().map_err(|_| {
            format!(
                "WARPCORE_MEMIF_WAIT: {v:?}: expected whole seconds to wait for the memif \
                 server's socket"
            )
        })?,
    };
    Ok(OwnVars {
        rfc7306,
        settle_ms,
        memif_wait_s,
    })
}

/// A memif client (`WARPCORE_MEMIF`) needs its server's socket when its engine starts. The
/// ranks of an MPI job start together, so one may ask first: wait for the socket, at most
/// `WARPCORE_MEMIF_WAIT` seconds (default 30), then let the engine say why it cannot
/// connect. Here, at the engine's start, not before the program: an application may make
/// its peer start its engine first (fi_pingpong's server opens its device only once the
/// client's control connection arrived).
fn wait_for_memif_server(secs: u64) {
    use std::os::unix::fs::FileTypeExt;
    let Some(path) = std::env::var_os("WARPCORE_MEMIF") else {
        return;
    };
    let is_socket = || std::fs::metadata(&path).is_ok_and(|m| m.file_type().is_socket());
    let start = std::time::Instant::now();
    while !is_socket() && start.elapsed() < std::time::Duration::from_secs(secs) {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// `WARPCORE_CAPTURE` as the engine started with it (what [`finish_capture`] rewrites).
static CAPTURE: OnceLock<std::path::PathBuf> = OnceLock::new();

fn open_engine() -> Result<Engine, String> {
    use warpcore_apps::device::{EngineOptions, MemifRole};
    let env = warpcore_apps::env::from_env().map_err(|e| e.to_string())?;
    let own = own_vars(|k| std::env::var_os(k))?;
    let drive = env.drive;
    let configure = move |c: &mut warpcore_verbs::Config| {
        c.drive = drive;
        // The deepest CQ an application may create (ibv_query_device's max_cqe), as large
        // as RDMA devices offer: libfabric's ofi_rxm sizes its CQ by the job's universe
        // (256 processes unless FI_UNIVERSE_SIZE says otherwise: about 200,000 entries).
        // A CQ is allocated at the depth asked for, so the limit itself costs nothing.
        c.engine.max_cq_depth = COMPAT_MAX_CQE;
    };
    let opts = EngineOptions {
        configure: &configure,
        ..EngineOptions::new("warpcore-verbs", MemifRole::Client)
    };
    wait_for_memif_server(own.memif_wait_s);
    let ep = env.dev.open_engine(&opts).map_err(|e| e.to_string())?;
    let ip = env.dev.ip.map(|p| (p.addr, p.len)).unwrap_or((ep.ip, 24));
    let e = Engine {
        ctx: ep.ctx,
        mpa: env.mpa,
        rfc7306: own.rfc7306,
        settle_ms: own.settle_ms,
        ip: ip.0,
        prefix_len: ip.1,
        gateway: env.dev.gateway.is_some(),
    };
    cm::start_dispatcher(&e.ctx).map_err(|err| format!("the CM event thread: {err}"))?;
    if let Some(p) = &env.dev.capture {
        if CAPTURE.set(p.clone()).is_ok() {
            // SAFETY: registering a plain function to run at exit.
            unsafe { atexit(finish_capture) };
        }
    }
    // After `finish_capture`: handlers run in the reverse order, so the closes are captured.
    if ENGINE_PID.set(std::process::id()).is_ok() {
        // SAFETY: registering a plain function to run at exit.
        unsafe { atexit(close_at_exit) };
    }
    Ok(e)
}

/// The process that started the engine (a child it forks has no engine threads, and its
/// exit closes nothing: the kernel's rdma_cm descriptor it inherited stays open in the
/// parent too).
static ENGINE_PID: OnceLock<u32> = OnceLock::new();

/// The longest [`close_at_exit`] holds the process's exit up.
const EXIT_BOUND: std::time::Duration = std::time::Duration::from_millis(300);

/// At a normal exit (return from `main`, `exit(3)`): closes the connections the process
/// still holds ([`verbs::close_at_exit`]), so their peers learn at once, as they do from
/// the kernel's rdma_cm when a process exits with connected ids (the close of its
/// `/dev/infiniband/rdma_cm` descriptor destroys them). Without it the engine's threads
/// ended with the process and sent nothing: a peer waited for its TCP to give up on a
/// silent connection (keep-alives, the user timeout: about 30 s).
///
/// Bounded by [`EXIT_BOUND`]: the work runs on a thread of its own, which the exit stops
/// waiting for (it ends with the process) if an engine core does not answer, its command
/// ring stays full, or an application thread holds a lock it needs. Silent on success.
/// Not for a process killed by a signal or ended by `_exit(2)`: nothing of it runs then,
/// and the peer still waits for its TCP (the kernel would close the connections then too).
extern "C" fn close_at_exit() {
    // No unwinding into C (which aborts): a panic of ours here only ends the closes.
    let _ = std::panic::catch_unwind(|| {
        if ENGINE_PID.get() != Some(&std::process::id()) {
            return;
        }
        let Some(e) = engine_if_open() else { return };
        let (tx, rx) = std::sync::mpsc::channel();
        let started = std::thread::Builder::new()
            .name("warpcore-exit".into())
            .spawn(move || {
                // The requests nobody answered are refused first (their peers learn at
                // once, as from the kernel's close of the rdma_cm descriptor), then the
                // connections close; the latter's linger lets the refusals leave too.
                let refused = crate::cm::refuse_requests_at_exit(&e.ctx);
                verbs::close_at_exit(&e.ctx, refused);
                let _ = tx.send(());
            });
        if started.is_ok() && rx.recv_timeout(EXIT_BOUND).is_err() {
            eprintln!(
                "warpcore: the connections still open at exit were not all closed within {} ms",
                EXIT_BOUND.as_millis()
            );
        }
    });
}

extern "C" {
    fn atexit(f: extern "C" fn()) -> c_int;
}

/// At exit (`WARPCORE_CAPTURE`): DPDK's pcapng writer has written every frame as it went;
/// the tools rewrite its raw file as plain pcapng after their engine stops, and the drop-in,
/// whose engine lives as long as the process, does it here.
extern "C" fn finish_capture() {
    if let Some(p) = CAPTURE.get() {
        match warpcore_apps::device::finish_capture(p) {
            Ok(n) => eprintln!("warpcore: {n} frames captured to {}", p.display()),
            Err(e) => eprintln!("warpcore: {e}"),
        }
    }
}

/// Whether `dst` is reachable from our port (its subnet, or any address with a gateway).
pub(crate) fn reachable(e: &Engine, dst: std::net::Ipv4Addr) -> bool {
    if e.gateway {
        return true;
    }
    let mask = if e.prefix_len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(e.prefix_len.min(32)))
    };
    (u32::from(dst) & mask) == (u32::from(e.ip) & mask)
}

#[cfg(test)]
mod tests;
