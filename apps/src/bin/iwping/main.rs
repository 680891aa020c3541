//! `iwping`: an rping-compatible client and server over Warpcore's user-space iWARP engine.
//!
//! Same exchange and options as rdma-core's `rping` (`-s`/`-c`, `-a`, `-p`, `-C`, `-S`, `-v`,
//! `-V`, `-I`, `-P`, `-q`, `-d`), so it runs against the real tool on a Linux soft-iWARP (siw)
//! machine in either role; plus the device layer every Warpcore tool shares (`--memif`,
//! `--vdev`, `--ip`, `--gateway`, `--capture`, ...) and MPA
//! settings (`--crc`, `--mpa-rev`, `--p2p`, `--markers`), `--capture`, and `--fault` to
//! provoke a Terminate on purpose. See docs/interop.md.
//!
//! Exit status: 0 all pings done; 1 failure; 2 usage; 3 the connection ended with a
//! Terminate (sent or received); 4 the MPA Request was rejected / the startup failed; 141
//! standard output was closed (`iwping -v ... | head`), as SIGPIPE would.
#![forbid(unsafe_code)]

mod cli;
mod net;
mod session;
mod wire;

use std::process::ExitCode;

use cli::Cli;
use session::Failure;

fn main() -> ExitCode {
    let cli: Cli = warpcore_apps::parse_args();
    if let Err(e) = cli.validate() {
        eprintln!("iwping: {e}");
        return ExitCode::from(2);
    }
    let engine = match net::open(&cli) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("iwping: {e}");
            return ExitCode::FAILURE;
        }
    };
    let r = match (cli.server, cli.addr) {
        (false, Some(server)) => session::client(&engine.ctx, &cli, server),
        _ => session::server(&engine.ctx, &cli),
    };
    // Stop the engine (joins its threads) so the capture is complete before it is cleaned.
    drop(engine);
    let mut capture_failed = false;
    if let Some(cap) = &cli.dev.capture {
        match warpcore_apps::device::finish_capture(cap) {
            Ok(n) => eprintln!("iwping: {n} frames captured to {}", cap.display()),
            Err(e) => {
                eprintln!("iwping: {e}");
                capture_failed = true;
            }
        }
    }
    let role = if cli.server { "server" } else { "client" };
    match r {
        Ok(n) => {
            eprintln!("iwping: {role}: {n} pings done");
            if cli.count != 0 && n != cli.count {
                eprintln!("iwping: {role}: expected {} pings", cli.count);
                return ExitCode::FAILURE;
            }
            if capture_failed {
                // The pings went, but the capture asked for is not whole.
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(f) => {
            eprintln!("iwping: {role}: {f}");
            ExitCode::from(match f {
                Failure::Terminated(_) => 3,
                Failure::Rejected(_) => 4,
                Failure::Other(_) => 1,
            })
        }
    }
}
