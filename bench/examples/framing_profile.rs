//! A fixed-work driver for profiling the framing paths under callgrind, whose instruction
//! counts do not depend on the load of a shared machine (see `bench/README.md`):
//!
//! ```sh
//! cargo build --profile bench -p warpcore-bench --example framing_profile
//! valgrind --tool=callgrind target/release/examples/framing_profile frame64 100000
//! ```
//!
//! Workloads: `frame64` / `frame64m` (one 64-octet ULPDU per call, markers off / on),
//! `deframe64k` / `deframe64km` (a 65536-octet message as two FPDUs, markers off / on),
//! `crc64k` (raw CRC32c over 65536 octets).

use std::hint::black_box;

use warpcore_bench::or_exit;
use warpcore_proto::mpa::deframer::{Deframer, DeframerConfig};
use warpcore_proto::mpa::framer::{Framer, FramerConfig};
use warpcore_proto::wire::fpdu::MAX_ULPDU_LEN;

fn main() {
    let prog = "framing_profile";
    let mut args = warpcore_bench::Args::new(std::env::args().skip(1));
    let what = or_exit(
        prog,
        args.word(
            "workload",
            &["frame64", "frame64m", "deframe64k", "deframe64km", "crc64k"],
        ),
    );
    let iters: usize = or_exit(prog, args.num("ITERS", 100_000, 0));
    or_exit(prog, args.finish());
    let hdr = [0xC1u8, 0x40, 0, 0, 0x12, 0x34, 0, 0, 0, 0, 0, 0, 0, 0];
    let payload: Vec<u8> = (0..65536usize).map(|i| (i * 7 + 3) as u8).collect();
    let markers = what.ends_with('m');
    let mut sink = 0usize;
    match what.trim_end_matches('m') {
        "frame64" => {
            let mut f = Framer::new(FramerConfig {
                markers,
                ..FramerConfig::default()
            });
            let mut out = [0u8; 128];
            for _ in 0..iters {
                sink += f
                    .emit(&[&hdr, black_box(&payload[..50])], black_box(&mut out))
                    .expect("fits");
            }
        }
        "deframe64k" => {
            let mut f = Framer::new(FramerConfig {
                markers,
                ..FramerConfig::default()
            });
            let mut stream = vec![0u8; 70_000];
            let a = f
                .emit(&[&hdr, &payload[..MAX_ULPDU_LEN - 14]], &mut stream)
                .expect("fits");
            let b = f
                .emit(&[&hdr, &payload[..768 - 14]], &mut stream[a..])
                .expect("fits");
            stream.truncate(a + b);
            let config = DeframerConfig {
                markers,
                ..DeframerConfig::default()
            };
            let mut d = Deframer::new(config);
            for _ in 0..iters {
                // A stream of repeated messages is only valid without markers; with
                // markers a fresh deframer per message keeps the marker positions right.
                if markers {
                    d = Deframer::new(config);
                }
                let mut input = black_box(&stream[..]);
                while let (n, Some(u)) = d.poll(input).expect("valid") {
                    sink += u.len();
                    input = &input[n..];
                }
            }
        }
        "crc64k" => {
            for _ in 0..iters {
                sink += crc32c::crc32c(black_box(&payload)) as usize;
            }
        }
        other => panic!("unknown workload {other}"),
    }
    println!("{what} x{iters}: {sink}");
}
