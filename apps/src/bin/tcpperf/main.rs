//! tcpperf: TCP request/response latency and bulk throughput over Warpcore's user-space stack.
//!
//! One binary, these modes:
//!
//! * `server` / `client`: two processes, each with its own stack on a DPDK port chosen by EAL
//!   arguments (`--vdev net_memif0,...` between two processes, `--vdev net_tap0,...` towards a
//!   kernel peer, or any other port).
//! * `memory`: client and server stacks in one process over the in-memory link (no DPDK).
//! * `exchange`: a byte-exact bidirectional transfer of a known pattern with any TCP peer (the
//!   kernel-interop test pairs it with an ordinary kernel socket).
//! * `kernel-server` / `kernel-client`: the same tests over the kernel's TCP, as a baseline
//!   measured the same way (or as a kernel peer for a stack on net_tap).
//!
//! `WARPCORE_TCP=reference` runs smoltcp's TCP socket instead of Warpcore's (`warpcore`,
//! the default): same-run comparisons of the two; any other value is refused (exit 2).
//!
//! The client opens each test with a 16-byte header: `WCPF`, the test kind (1 request/response,
//! 2 bulk) and a parameter (message size or byte count), all big-endian. Results are printed
//! for people and as one `RESULT key=value ...` line for scripts.

//!
//! The code, by concern: [`common`] (stack, clock, pattern), [`client`], [`server`],
//! [`exchange`], [`mod@drive`] (the poll loop and the in-memory mode), [`dpdk`] (ports, through
//! the apps library's device layer), [`kernel`] (the kernel-TCP baseline), [`report`].

// Without DPDK only the in-memory mode exists; the exchange and server code is then unused.
#![cfg_attr(not(feature = "dpdk"), allow(dead_code))]
#![forbid(unsafe_code)]

mod client;
mod common;
#[cfg(feature = "dpdk")]
mod dpdk;
mod drive;
mod exchange;
mod kernel;
mod report;
mod server;

use std::io::BufWriter;
use std::process::ExitCode;
use std::time::Instant as StdInstant;

use clap::{Args, Parser, Subcommand, ValueEnum};
use hdrhistogram::Histogram;
use warpcore_apps::device::DeviceArgs;
use warpcore_tcp::link::{self, LinkConfig};
use warpcore_tcp::smoltcp::socket::tcp::State;
use warpcore_tcp::smoltcp::wire::{Ipv4Address, Ipv4Cidr};
use warpcore_tcp::{Capture, ConnId, Event, PollDevice, Stack, TcpTuning};

use client::*;
use common::*;
use drive::*;
use exchange::*;
use report::*;
use server::*;

const MAGIC: &[u8; 4] = b"WCPF";
const KIND_RR: u32 = 1;
const KIND_BULK: u32 = 2;
/// Largest request/response message: each side holds one message, and a server allocates
/// what a test header asks for, so the client's `--size` and every header a server accepts
/// are bounded by it (a header asking for more is refused, never allocated).
const MAX_RR_SIZE: u64 = 64 << 20;
const CLIENT_SALT: u32 = 0x5a5a_0001;
const SERVER_SALT: u32 = 0xa5a5_0002;

#[derive(Parser, Debug)]
#[command(
    name = "tcpperf",
    about = "TCP latency and throughput over Warpcore's user-space stack"
)]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand, Debug)]
enum Mode {
    /// Serve request/response and bulk tests on a DPDK port.
    Server {
        #[command(flatten)]
        net: NetArgs,
        /// TCP port to listen on.
        #[arg(long, default_value_t = 5201)]
        listen: u16,
        /// Exit after this many test connections (0: serve forever).
        #[arg(long, default_value_t = 0)]
        tests: u32,
    },
    /// Run a test against a tcpperf server on a DPDK port.
    Client {
        #[command(flatten)]
        net: NetArgs,
        /// Server address.
        #[arg(long)]
        server: Ipv4Address,
        /// Server TCP port.
        #[arg(long, default_value_t = 5201)]
        server_port: u16,
        #[command(flatten)]
        test: TestArgs,
    },
    /// Client and server stacks in this process over the in-memory link (no DPDK).
    Memory {
        #[command(flatten)]
        test: TestArgs,
        /// IP MTU of the link (576 to 9000).
        #[arg(long, default_value_t = 1500, value_parser = clap::value_parser!(u16).range(576..=9000))]
        mtu: u16,
        /// Write the client side's frames to this pcap file.
        #[arg(long)]
        pcap: Option<String>,
    },
    /// The server side of the tests over the kernel's TCP (baseline).
    KernelServer {
        /// Address to listen on, e.g. 127.0.0.1:5301.
        #[arg(long)]
        listen: String,
        /// Exit after this many test connections (0: serve forever).
        #[arg(long, default_value_t = 0)]
        tests: u32,
    },
    /// The client side of the tests over the kernel's TCP (baseline).
    KernelClient {
        /// Server address, e.g. 127.0.0.1:5301.
        #[arg(long)]
        server: String,
        #[command(flatten)]
        test: TestArgs,
    },
    /// Byte-exact pattern exchange with any TCP peer (e.g. a kernel socket).
    Exchange {
        #[command(flatten)]
        net: NetArgs,
        /// Connect to this address:port (client role); without it, listen.
        #[arg(long)]
        peer: Option<String>,
        /// Port to listen on (server role).
        #[arg(long, default_value_t = 7000)]
        listen: u16,
        /// Bytes to send and to expect, each way (at least 1: an exchange of none checks
        /// no byte, and passed).
        #[arg(long, default_value_t = 16 << 20, value_parser = clap::value_parser!(u64).range(1..))]
        bytes: u64,
        /// Give up after this many seconds (1 to a year).
        #[arg(long, default_value_t = 60,
              value_parser = clap::value_parser!(u64).range(1..=warpcore_apps::MAX_TIMEOUT_S))]
        timeout_s: u64,
    },
}

#[derive(Args, Debug, Clone)]
struct NetArgs {
    /// The device: --memif, --vdev, --pci, --eal, --dpdk-port, --ip (required here),
    /// --gateway, --mac, --cores (the first runs the stack), --mtu (default 1500),
    /// --no-csum, --capture (DPDK's pcapng of rx and tx mbufs, normalised at exit).
    #[command(flatten)]
    dev: DeviceArgs,
    /// Write every frame as pcap (the stack's side) to this file.
    #[arg(long)]
    pcap: Option<String>,
    /// Print the port's extended statistics at the end.
    #[arg(long)]
    xstats: bool,
    /// Frames per rx burst (and most frames the stack sends per poll): 1 to 256.
    #[arg(long, default_value_t = 64)]
    burst: usize,
    /// Frames that may wait for the tx ring before the device pushes back (at least 1).
    #[arg(long, default_value_t = 512)]
    tx_pending: usize,
    /// Seconds to wait for the link to come up (e.g. for the memif peer to connect; at most
    /// a year).
    #[arg(long, default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(..=warpcore_apps::MAX_TIMEOUT_S))]
    link_wait_s: u64,
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum TestKind {
    /// Ping-pong of fixed-size messages on one connection.
    Rr,
    /// One-way bulk transfer, client to server.
    Bulk,
}

#[derive(Args, Debug, Clone)]
struct TestArgs {
    /// Which tests, run one after the other on fresh connections of the same stack
    /// (e.g. `rr,bulk`).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "rr")]
    test: Vec<TestKind>,
    /// Request/response message size in bytes (1 to 64 MiB).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=MAX_RR_SIZE))]
    size: u64,
    /// Request/response round trips (after warm-up; at least 1).
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    iterations: u64,
    /// Round trips not recorded at the start.
    #[arg(long, default_value_t = 1_000)]
    warmup: u64,
    /// Bulk bytes (at least 1).
    #[arg(long, default_value_t = 1 << 30, value_parser = clap::value_parser!(u64).range(1..))]
    bytes: u64,
    /// Socket buffer size in bytes (each direction; at least 1; default 4 MiB). Warpcore's
    /// stack only: kernel-client refuses it (the kernel sizes its own buffers).
    #[arg(long, value_parser = positive_usize)]
    buffer: Option<usize>,
    /// Give up after this many seconds (1 to a year).
    #[arg(long, default_value_t = 120,
          value_parser = clap::value_parser!(u64).range(1..=warpcore_apps::MAX_TIMEOUT_S))]
    timeout_s: u64,
    /// Congestion controller of the client's connection (default cubic). Warpcore's stack
    /// only: kernel-client refuses it (the kernel's is net.ipv4.tcp_congestion_control).
    #[arg(long, value_enum)]
    congestion: Option<Cc>,
}

/// Socket buffer size of Warpcore's stack without `--buffer`.
const DEFAULT_BUFFER: usize = 4 << 20;

impl TestArgs {
    /// `--buffer`, or its default.
    fn buffer(&self) -> usize {
        self.buffer.unwrap_or(DEFAULT_BUFFER)
    }

    /// `--congestion`, or its default.
    fn congestion(&self) -> Cc {
        self.congestion.unwrap_or(Cc::Cubic)
    }

    /// Checks what clap cannot: the round trips of a request/response test, warm-up and
    /// recorded, must be countable. Their sum wrapped (`--iterations 18446744073709551615`
    /// with the default warm-up of 1,000 ran 999 round trips, all warm-up) and the run
    /// reported an empty histogram's zeros as a success.
    fn validate(&self) -> Result<(), String> {
        if self.warmup.checked_add(self.iterations).is_none() {
            return Err(format!(
                "--warmup {} and --iterations {}: more round trips than can be counted",
                self.warmup, self.iterations
            ));
        }
        Ok(())
    }
}

/// A count of at least 1 (`--buffer`: a connection with no buffer moves nothing).
fn positive_usize(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
enum Cc {
    /// No congestion control.
    None,
    /// Reno.
    Reno,
    /// CUBIC.
    Cubic,
}

impl From<Cc> for warpcore_tcp::Congestion {
    fn from(c: Cc) -> Self {
        match c {
            Cc::None => warpcore_tcp::Congestion::None,
            Cc::Reno => warpcore_tcp::Congestion::Reno,
            Cc::Cubic => warpcore_tcp::Congestion::Cubic,
        }
    }
}
fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = common::tcp_implementation() {
        eprintln!("tcpperf: {e}");
        return ExitCode::from(2);
    }
    if let Mode::Client { test, .. } | Mode::Memory { test, .. } | Mode::KernelClient { test, .. } =
        &cli.mode
    {
        if let Err(e) = test.validate() {
            eprintln!("tcpperf: {e}");
            return ExitCode::from(2);
        }
    }
    let result = match cli.mode {
        Mode::Memory { test, mtu, pcap } => run_memory(test, usize::from(mtu), pcap),
        Mode::KernelServer { listen, tests } => kernel::server(&listen, tests),
        Mode::KernelClient { server, test } => kernel::client(&server, &test),
        #[cfg(feature = "dpdk")]
        Mode::Server { net, listen, tests } => dpdk::with_stack(
            &net,
            "server",
            0,
            RoleSpec::Server {
                port: listen,
                buffer: DEFAULT_BUFFER,
                tests,
            },
        ),
        #[cfg(feature = "dpdk")]
        Mode::Client {
            net,
            server,
            server_port,
            test,
        } => {
            let t = test.timeout_s;
            dpdk::with_stack(
                &net,
                "dpdk",
                t,
                RoleSpec::Client {
                    server: (server, server_port),
                    test,
                },
            )
        }
        #[cfg(feature = "dpdk")]
        Mode::Exchange {
            net,
            peer,
            listen,
            bytes,
            timeout_s,
        } => dpdk::with_stack(
            &net,
            "exchange",
            timeout_s,
            RoleSpec::Exchange {
                peer,
                listen,
                bytes,
            },
        ),
        #[cfg(not(feature = "dpdk"))]
        Mode::Server { .. } | Mode::Client { .. } | Mode::Exchange { .. } => {
            Err("this tcpperf was built without the dpdk feature: only `memory` works".into())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tcpperf: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `exchange --bytes 0` opened a connection, checked no byte and exited 0, the
    /// byte-exact interop test passing over nothing. It is refused, naming the option, as
    /// the bulk test's `--bytes 0` is.
    #[test]
    fn an_exchange_of_no_bytes_is_refused() {
        let e = Cli::try_parse_from(["tcpperf", "exchange", "--ip", "10.0.0.1/24", "--bytes", "0"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--bytes"), "{e}");
        let ok =
            Cli::try_parse_from(["tcpperf", "exchange", "--ip", "10.0.0.1/24", "--bytes", "1"])
                .unwrap();
        assert!(matches!(ok.mode, Mode::Exchange { bytes: 1, .. }));
        let e = Cli::try_parse_from(["tcpperf", "memory", "--test", "bulk", "--bytes", "0"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--bytes"), "{e}");
    }
}
