//! `iwdump`: decode the iWARP traffic in pcap/pcapng captures.
//!
//! For every TCP connection that starts with an MPA Request it prints the negotiated
//! parameters (Rev each way, CRC, markers, IRD/ORD, peer-to-peer and RTR), per-direction
//! counts and octets per RDMAP opcode, CRC and marker errors, Terminates with their decoded
//! reason, and every protocol violation found. `-v` adds one line per DDP segment.
//!
//! Per direction it also prints how the TCP segments lie against the FPDUs: how many data
//! segments of FPDU mode start and end at FPDU boundaries (what an MPA-aligned sender,
//! mpa-08 §4 item 4, sends and a hardware receiver places directly), how many do not, and
//! the aligned share (rounded down to a tenth: 100.0 means every one), e.g. `TCP data
//! segments 925: 915 aligned with FPDUs, 10 not aligned (98.9 % aligned)`
//! (`segments_aligned`, `segments_unaligned`, `segments_aligned_percent` in the JSON).
//! Every copy of a retransmitted segment counts, judged on its own range, and the line
//! says how many of the segments repeat octets an earlier one carried (`TCP data segments
//! 11 (3 of them retransmissions): ...`, `segments_retransmitted`); the MPA
//! Request/Reply segments and pure ACKs do not. Segments beyond where the FPDU boundaries
//! are known (deframing stopped, a capture gap, a frame cut by the snap length) are not
//! guessed at: they are counted as unknown, with the sequence number from which and the
//! reason (`segments_alignment_unknown`, `alignment_unknown_from`). The exact rules:
//! `warpcore_analysis::analysis::SegmentAlignment`.
//!
//! Exit status: 0 when no protocol violation was found, 1 when at least one was, 2 on usage
//! or I/O errors (a file that cannot be read or is not a capture, a capture read in part
//! only: damaged or cut short, or with frames of no interface it describes, whose report
//! is printed but covers part of what it recorded; output that cannot be written). When the reader of the output goes away (`iwdump -v x.pcap | head`), iwdump
//! stops quietly with the status of what it decoded so far.
#![forbid(unsafe_code)]

use std::io::Write;
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
    let mut out = std::io::stdout().lock();
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
        if report.incomplete {
            // No violation in part of a file is no clean capture (the report's warnings
            // say which frames were left out).
            eprintln!("iwdump: {name}: the capture could not be read whole (see its warnings)");
            io_error = true;
        }
        let text = if args.json {
            render_json(&report, args.verbose) + "\n"
        } else {
            render_text(&report, args.verbose)
        };
        // print! would panic on a closed or full output.
        if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
            if e.kind() != std::io::ErrorKind::BrokenPipe {
                eprintln!("iwdump: cannot write the output: {e}");
                return ExitCode::from(2);
            }
            break;
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
