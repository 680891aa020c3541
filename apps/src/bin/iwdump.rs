//! `iwdump`: decode the iWARP traffic in pcap/pcapng captures.
//!
//! For every TCP connection that starts with an MPA Request it prints the negotiated
//! parameters (Rev each way, CRC, markers, IRD/ORD, peer-to-peer and RTR), per-direction
//! counts and octets per RDMAP opcode, CRC and marker errors, Terminates with their decoded
//! reason, and every protocol violation found. `-v` adds one line per DDP segment.
//!
//! Exit status: 0 when no protocol violation was found, 1 when at least one was, 2 on usage
//! or I/O errors (a file that cannot be read or is not a capture).
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use warpcore_apps::capture::read_capture_file;
use warpcore_apps::report::{analyse_capture, render_json, render_text};

/// Decode iWARP (MPA/DDP/RDMAP) traffic in pcap or pcapng captures.
#[derive(Debug, Parser)]
#[command(name = "iwdump", version)]
struct Args {
    /// One line per DDP segment (time, direction, opcode, STag/TO or QN/MSN/MO, length, L).
    #[arg(short, long)]
    verbose: bool,
    /// Machine-readable output: one JSON object per file, one per line.
    #[arg(long)]
    json: bool,
    /// Capture files (pcap or pcapng).
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

fn main() -> ExitCode {
    let args: Args = warpcore_apps::parse_args();
    let mut io_error = false;
    let mut violations = false;
    for path in &args.files {
        let name = path.display().to_string();
        let capture = match read_capture_file(path) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("iwdump: {name}: {e}");
                io_error = true;
                continue;
            }
        };
        let report = analyse_capture(&name, &capture);
        violations |= report.violations() > 0;
        if args.json {
            println!("{}", render_json(&report, args.verbose));
        } else {
            print!("{}", render_text(&report, args.verbose));
        }
    }
    if io_error {
        ExitCode::from(2)
    } else if violations {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
