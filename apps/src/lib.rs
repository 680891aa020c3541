//! # warpcore-apps: the command-line tools and the library they share
//!
//! The tools (`iwperf`, `iwping`, `iwdump`, `tcpperf`, `wcsoak`, `wcconnrate`) live in
//! `src/bin/`. What they share lives here:
//! - [`device`]: one device layer: the command-line flags that name a device
//!   ([`device::DeviceArgs`], flattened into the clap parser of every tool but iwdump),
//!   the EAL arguments built from them, and the one path that initialises the EAL, opens
//!   a DPDK port or a loopback pair and starts Warpcore engines on it;
//! - [`mod@env`]: the same configuration from `WARPCORE_*` environment variables, for programs
//!   whose command line is not Warpcore's (the rdma-core drop-in libraries);
//! - the capture analysis behind `iwdump`, from `warpcore-analysis` (re-exported here under
//!   its old paths: [`analysis`], [`capture`], [`fpdu`], [`report`], [`tcp`], [`pcapng`]).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod device;
pub mod env;

/// Parses the command line of tool `T` as every Warpcore tool does: `--help` and
/// `--version` print and exit 0; a usage error prints clap's message and exits with status
/// 2 (the tools' "usage" status).
pub fn parse_args<T: clap::Parser>() -> T {
    parse_args_with_matches().0
}

/// [`parse_args`], also handing back clap's matches (which flags the command line gave,
/// as against their defaults).
pub fn parse_args_with_matches<T: clap::Parser>() -> (T, clap::ArgMatches) {
    let parsed = T::command()
        .try_get_matches()
        .and_then(|m| T::from_arg_matches(&m).map(|t| (t, m)));
    match parsed {
        Ok(x) => x,
        Err(e) => {
            let _ = e.print();
            std::process::exit(if e.use_stderr() { 2 } else { 0 })
        }
    }
}

/// Writes formatted output to stdout ([`outln!`], [`out!`]): a closed stdout (`iwperf ... |
/// head`) ends the process quietly with status 141, as SIGPIPE would (Rust's `println!`
/// panics with a backtrace instead); any other write error (a full disk) ends it with
/// status 2 and the reason on stderr.
pub fn write_stdout(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.flush()) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(141);
        }
        eprintln!("standard output: {e}");
        std::process::exit(2);
    }
}

/// `println!` for the tools' reports, through [`write_stdout`].
#[macro_export]
macro_rules! outln {
    () => { $crate::write_stdout(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::write_stdout(format_args!("{}\n", format_args!($($arg)*))) };
}

/// `print!` for the tools' reports, through [`write_stdout`].
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::write_stdout(format_args!($($arg)*)) };
}

/// The longest timeout a tool takes, in seconds (a year): a longer one overflows the
/// clock's arithmetic (`Instant + Duration` panics), and none is meant.
pub const MAX_TIMEOUT_S: u64 = 365 * 86400;

/// clap value parser for a length of time (`--secs`, `--minutes`): a finite number above 0
/// and at most a year's worth of seconds, so that it always makes a `Duration` (which
/// panics on a negative, NaN or too large value).
pub fn positive_time(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if v.is_finite() && v > 0.0 && v <= 365.0 * 86400.0 {
        Ok(v)
    } else {
        Err(format!("{s}: must be above 0 and at most a year's worth"))
    }
}

/// clap value parser for a frame loss probability (`--loss`): 0 (none) up to, not
/// including, 1 (a link that drops every frame carries nothing).
pub fn loss_probability(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
    if (0.0..1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!(
            "{s}: a loss probability is at least 0 and below 1 (0.01: 1 %)"
        ))
    }
}

pub use warpcore_analysis::{analysis, capture, fpdu, pcapng, report, tcp};
