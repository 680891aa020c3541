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
//! The client opens each test with a 16-byte header: `WCPF`, the test kind (1 request/response,
//! 2 bulk) and a parameter (message size or byte count), all big-endian. Results are printed
//! for people and as one `RESULT key=value ...` line for scripts.

// Without DPDK only the in-memory mode exists; the exchange and server code is then unused.
#![cfg_attr(not(feature = "dpdk"), allow(dead_code))]

use std::io::BufWriter;
use std::process::ExitCode;
use std::time::Instant as StdInstant;

use clap::{Args, Parser, Subcommand, ValueEnum};
use hdrhistogram::Histogram;
use warpcore_tcp::link::{self, LinkConfig};
use warpcore_tcp::smoltcp::socket::tcp::State;
use warpcore_tcp::smoltcp::time::Instant;
use warpcore_tcp::smoltcp::wire::{Ipv4Address, Ipv4Cidr};
use warpcore_tcp::{Capture, ConnId, Event, PollDevice, Stack, StackConfig, TcpTuning};

const MAGIC: &[u8; 4] = b"WCPF";
const KIND_RR: u32 = 1;
const KIND_BULK: u32 = 2;
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
        /// IP MTU of the link.
        #[arg(long, default_value_t = 1500)]
        mtu: usize,
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
        /// Bytes to send and to expect, each way.
        #[arg(long, default_value_t = 16 << 20)]
        bytes: u64,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 60)]
        timeout_s: u64,
    },
}

#[derive(Args, Debug, Clone)]
struct NetArgs {
    /// EAL arguments, whitespace separated (default: one core, no hugepages, no PCI, a
    /// per-process file prefix).
    #[arg(long, allow_hyphen_values = true)]
    eal: Option<String>,
    /// A `--vdev` to add to the EAL arguments (repeatable).
    #[arg(long)]
    vdev: Vec<String>,
    /// Core for the default EAL arguments.
    #[arg(long, default_value_t = 0)]
    core: u32,
    /// DPDK port name (default: the first port).
    #[arg(long)]
    port: Option<String>,
    /// This stack's address and prefix, e.g. 198.18.0.2/24.
    #[arg(long, value_parser = parse_cidr)]
    ip: Ipv4Cidr,
    /// Default gateway.
    #[arg(long)]
    gateway: Option<Ipv4Address>,
    /// IP MTU of the port.
    #[arg(long, default_value_t = 1500)]
    mtu: u16,
    /// Write every frame as pcap (smoltcp side) to this file.
    #[arg(long)]
    pcap: Option<String>,
    /// Write rx and tx mbufs as pcapng (DPDK's rte_pcapng) to this file.
    #[arg(long)]
    pcapng: Option<String>,
    /// Print the port's extended statistics at the end.
    #[arg(long)]
    xstats: bool,
    /// Frames per rx burst (and most frames smoltcp sends per poll).
    #[arg(long, default_value_t = 64)]
    burst: usize,
    /// Frames that may wait for the tx ring before the device pushes back.
    #[arg(long, default_value_t = 512)]
    tx_pending: usize,
    /// Seconds to wait for the link to come up (e.g. for the memif peer to connect).
    #[arg(long, default_value_t = 30)]
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
    /// Request/response message size in bytes.
    #[arg(long, default_value_t = 64)]
    size: u64,
    /// Request/response round trips (after warm-up).
    #[arg(long, default_value_t = 100_000)]
    iterations: u64,
    /// Round trips not recorded at the start.
    #[arg(long, default_value_t = 1_000)]
    warmup: u64,
    /// Bulk bytes.
    #[arg(long, default_value_t = 1 << 30)]
    bytes: u64,
    /// Socket buffer size in bytes (each direction).
    #[arg(long, default_value_t = 4 << 20)]
    buffer: usize,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 120)]
    timeout_s: u64,
    /// Congestion controller of the client's connection.
    #[arg(long, value_enum, default_value_t = Cc::Cubic)]
    congestion: Cc,
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

/// The stack under test: Warpcore's TCP, or smoltcp's reference with `WARPCORE_TCP=reference`
/// (same-run comparisons and bisecting a difference between the two).
fn new_stack<D: PollDevice>(
    device: D,
    cfg: &StackConfig,
    now: Instant,
) -> Result<Stack<D>, warpcore_tcp::StackError> {
    let imp = match std::env::var("WARPCORE_TCP").as_deref() {
        Ok("reference") => warpcore_tcp::TcpImplementation::SmoltcpReference,
        _ => warpcore_tcp::TcpImplementation::Warpcore,
    };
    Stack::with_implementation(device, cfg, now, imp)
}

fn parse_cidr(s: &str) -> Result<Ipv4Cidr, String> {
    let (a, p) = s.split_once('/').unwrap_or((s, "24"));
    let addr: Ipv4Address = a.parse().map_err(|_| format!("bad IPv4 address {a:?}"))?;
    let prefix: u8 = p.parse().map_err(|_| format!("bad prefix length {p:?}"))?;
    if prefix > 32 {
        return Err(format!("prefix length {prefix} > 32"));
    }
    Ok(Ipv4Cidr::new(addr, prefix))
}

/// The process clock, turned into the `Instant`s the stack takes.
#[derive(Debug)]
struct Clock(StdInstant);

impl Clock {
    fn now(&self) -> Instant {
        Instant::from_micros(self.0.elapsed().as_micros() as i64)
    }
}

fn pattern(salt: u32, i: u64) -> u8 {
    (((i >> 2) as u32) ^ salt).to_be_bytes()[(i & 3) as usize]
}

fn fill_pattern(buf: &mut [u8], salt: u32, off: u64) {
    for (k, b) in buf.iter_mut().enumerate() {
        *b = pattern(salt, off + k as u64);
    }
}

fn tuning(buffer: usize) -> TcpTuning {
    TcpTuning {
        rx_buffer: buffer,
        tx_buffer: buffer,
        ..TcpTuning::default()
    }
}

fn stack_config(mac: [u8; 6], ip: Ipv4Cidr, gateway: Option<Ipv4Address>) -> StackConfig {
    StackConfig {
        mac,
        ip,
        gateway,
        routes: Vec::new(),
        random_seed: u64::from(u32::from_be_bytes(ip.address().octets())) ^ 0x7c9e,
        max_connections: 64,
    }
}

/// Sends as much of `pending[*done..]` as fits; returns whether anything was sent.
fn send_some<D: PollDevice>(s: &mut Stack<D>, c: ConnId, data: &[u8], done: &mut usize) -> bool {
    if *done >= data.len() {
        return false;
    }
    match s.send(c, &data[*done..]) {
        Ok(n) if n > 0 => {
            *done += n;
            true
        }
        _ => false,
    }
}

// ---------------------------------------------------------------- the client

#[derive(Debug, PartialEq, Eq)]
enum ClientPhase {
    Connecting,
    Running,
    Finished,
}

#[derive(Debug)]
struct Client {
    test: TestArgs,
    kind: TestKind,
    conn: ConnId,
    phase: ClientPhase,
    header: [u8; 16],
    header_sent: usize,
    // request/response
    msg: Vec<u8>,
    msg_sent: usize,
    reply_got: u64,
    round: u64,
    t_req: StdInstant,
    hist: Histogram<u64>,
    // bulk
    bulk_sent: u64,
    reply: Vec<u8>,
    t_start: StdInstant,
    cpu_start: f64,
    elapsed_s: f64,
    cpu_s: f64,
    error: Option<String>,
}

impl Client {
    fn new<D: PollDevice>(
        s: &mut Stack<D>,
        server: (Ipv4Address, u16),
        test: TestArgs,
        kind: TestKind,
    ) -> Result<Self, String> {
        let conn = s
            .connect(
                server,
                None,
                &TcpTuning {
                    congestion: test.congestion.into(),
                    ..tuning(test.buffer)
                },
            )
            .map_err(|e| e.to_string())?;
        let (code, param) = match kind {
            TestKind::Rr => (KIND_RR, test.size),
            TestKind::Bulk => (KIND_BULK, test.bytes),
        };
        let mut header = [0u8; 16];
        header[..4].copy_from_slice(MAGIC);
        header[4..8].copy_from_slice(&code.to_be_bytes());
        header[8..].copy_from_slice(&param.to_be_bytes());
        Ok(Client {
            msg: vec![0x42; test.size as usize],
            test,
            kind,
            conn,
            phase: ClientPhase::Connecting,
            header,
            header_sent: 0,
            msg_sent: 0,
            reply_got: 0,
            round: 0,
            t_req: StdInstant::now(),
            hist: Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds"),
            bulk_sent: 0,
            reply: Vec::with_capacity(8),
            t_start: StdInstant::now(),
            elapsed_s: 0.0,
            cpu_start: 0.0,
            cpu_s: 0.0,
            error: None,
        })
    }

    fn on_event(&mut self, e: Event) {
        match e {
            Event::Connected(c) if c == self.conn => {
                self.phase = ClientPhase::Running;
                self.t_start = StdInstant::now();
                self.cpu_start = cpu_seconds();
            }
            Event::Reset(c) if c == self.conn => {
                self.error = Some("connection reset".into());
                self.phase = ClientPhase::Finished;
            }
            _ => {}
        }
    }

    /// Advances the test; returns whether it made progress.
    fn step<D: PollDevice>(&mut self, s: &mut Stack<D>) -> bool {
        if self.phase != ClientPhase::Running {
            return false;
        }
        let c = self.conn;
        let mut work = false;
        if self.header_sent < 16 {
            let h = self.header;
            work |= send_some(s, c, &h, &mut self.header_sent);
            if self.header_sent < 16 {
                return work;
            }
            self.t_req = StdInstant::now();
            self.t_start = self.t_req;
            self.cpu_start = cpu_seconds();
        }
        match self.kind {
            TestKind::Rr => {
                let size = self.test.size;
                work |= send_some(s, c, &self.msg, &mut self.msg_sent);
                let want = size - self.reply_got;
                let got = s.recv_with(c, |d| d.len().min(want as usize)).unwrap_or(0) as u64;
                if got > 0 {
                    work = true;
                    self.reply_got += got;
                }
                if self.reply_got == size && self.msg_sent == size as usize {
                    let ns = self.t_req.elapsed().as_nanos() as u64;
                    if self.round >= self.test.warmup {
                        let _ = self.hist.record(ns.max(1));
                    }
                    self.round += 1;
                    self.reply_got = 0;
                    self.msg_sent = 0;
                    if self.round == self.test.warmup {
                        self.t_start = StdInstant::now();
                        self.cpu_start = cpu_seconds();
                    }
                    if self.round >= self.test.warmup + self.test.iterations {
                        self.elapsed_s = self.t_start.elapsed().as_secs_f64();
                        self.cpu_s = cpu_seconds() - self.cpu_start;
                        let _ = s.close(c);
                        self.phase = ClientPhase::Finished;
                    } else {
                        self.t_req = StdInstant::now();
                        work |= send_some(s, c, &self.msg, &mut self.msg_sent);
                    }
                }
            }
            TestKind::Bulk => {
                let total = self.test.bytes;
                while self.bulk_sent < total {
                    let off = self.bulk_sent;
                    let n = s
                        .send_with(c, |buf| {
                            let n = buf.len().min((total - off) as usize);
                            // Payload content is irrelevant for throughput; skip filling.
                            n
                        })
                        .unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    self.bulk_sent += n as u64;
                    work = true;
                }
                let mut tmp = [0u8; 8];
                let room = 8 - self.reply.len();
                if let Ok(n) = s.recv(c, &mut tmp[..room]) {
                    self.reply.extend_from_slice(&tmp[..n]);
                    work |= n > 0;
                }
                if self.reply.len() == 8 {
                    self.elapsed_s = self.t_start.elapsed().as_secs_f64();
                    self.cpu_s = cpu_seconds() - self.cpu_start;
                    let got = u64::from_be_bytes(self.reply[..8].try_into().expect("8 bytes"));
                    if got != total {
                        self.error = Some(format!("server counted {got} of {total} bytes"));
                    }
                    let _ = s.close(c);
                    self.phase = ClientPhase::Finished;
                }
            }
        }
        work
    }

    fn report(&self, label: &str) -> Result<(), String> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        match self.kind {
            TestKind::Rr => report_rr(
                label,
                self.test.size,
                &self.hist,
                self.elapsed_s,
                self.cpu_s,
            ),
            TestKind::Bulk => report_bulk(label, self.test.bytes, self.elapsed_s, self.cpu_s),
        }
        Ok(())
    }
}

/// CPU time (user + system) this process has used, from /proc/self/stat (0 if unreadable).
/// Busy-polling processes on a shared machine get only part of a core; the CPU share
/// printed with each result tells how much.
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // Linux reports these in USER_HZ, which is 100 on every mainstream configuration.
    (ticks(11) + ticks(12)) / 100.0
}

fn report_rr(label: &str, size: u64, h: &Histogram<u64>, elapsed_s: f64, cpu_s: f64) {
    let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    let rate = h.len() as f64 / elapsed_s;
    println!(
        "{label}: request/response {size} B x {}: rtt p50 {:.2} us, p90 {:.2} us, p99 {:.2} us, \
         p99.9 {:.2} us, max {:.2} us, mean {:.2} us ({rate:.0} round trips/s)",
        h.len(),
        us(0.5),
        us(0.9),
        us(0.99),
        us(0.999),
        h.max() as f64 / 1000.0,
        h.mean() / 1000.0,
    );
    let share = cpu_s / elapsed_s;
    println!(
        "RESULT mode={label} test=rr size={size} count={} p50_us={:.2} p90_us={:.2} p99_us={:.2} \
         p999_us={:.2} max_us={:.2} mean_us={:.2} rate={rate:.0} cpu_share={share:.2}",
        h.len(),
        us(0.5),
        us(0.9),
        us(0.99),
        us(0.999),
        h.max() as f64 / 1000.0,
        h.mean() / 1000.0,
    );
}

fn report_bulk(label: &str, bytes: u64, elapsed_s: f64, cpu_s: f64) {
    let gbps = bytes as f64 * 8.0 / elapsed_s / 1e9;
    let share = cpu_s / elapsed_s;
    println!(
        "{label}: bulk {bytes} bytes in {elapsed_s:.3} s: {gbps:.3} Gbit/s (client used {:.0}% of a core)",
        share * 100.0
    );
    println!(
        "RESULT mode={label} test=bulk bytes={bytes} seconds={elapsed_s:.4} gbps={gbps:.3} cpu_share={share:.2}"
    );
}

// ---------------------------------------------------------------- kernel TCP, same protocol

/// The same tests over the kernel's TCP (blocking sockets, TCP_NODELAY), for an
/// apples-to-apples baseline: same protocol, same clock, same histogram.
mod kernel {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    pub(crate) fn server(addr: &str, tests: u32) -> Result<(), String> {
        let l = TcpListener::bind(addr).map_err(|e| format!("bind {addr}: {e}"))?;
        println!("kernel-server: listening on {addr}");
        let mut served = 0;
        while tests == 0 || served < tests {
            let (mut s, _) = l.accept().map_err(|e| e.to_string())?;
            s.set_nodelay(true).map_err(|e| e.to_string())?;
            let mut h = [0u8; 16];
            s.read_exact(&mut h).map_err(|e| e.to_string())?;
            if &h[..4] != MAGIC {
                return Err("bad test header".into());
            }
            let kind = u32::from_be_bytes(h[4..8].try_into().expect("4 bytes"));
            let param = u64::from_be_bytes(h[8..16].try_into().expect("8 bytes"));
            match kind {
                KIND_RR => {
                    let mut msg = vec![0u8; param as usize];
                    while s.read_exact(&mut msg).is_ok() {
                        s.write_all(&msg).map_err(|e| e.to_string())?;
                    }
                }
                KIND_BULK => {
                    let mut buf = vec![0u8; 1 << 20];
                    let mut count = 0u64;
                    while count < param {
                        let n = s.read(&mut buf).map_err(|e| e.to_string())?;
                        if n == 0 {
                            break;
                        }
                        count += n as u64;
                    }
                    s.write_all(&count.to_be_bytes())
                        .map_err(|e| e.to_string())?;
                    while s.read(&mut buf).map_err(|e| e.to_string())? > 0 {}
                }
                _ => return Err(format!("unknown test kind {kind}")),
            }
            served += 1;
        }
        println!("kernel-server: {served} test connections served");
        Ok(())
    }

    pub(crate) fn client(addr: &str, test: &TestArgs) -> Result<(), String> {
        for &kind in &test.test {
            one(addr, test, kind)?;
        }
        Ok(())
    }

    fn one(addr: &str, test: &TestArgs, kind: TestKind) -> Result<(), String> {
        let mut s = TcpStream::connect(addr).map_err(|e| format!("connect {addr}: {e}"))?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        let (code, param) = match kind {
            TestKind::Rr => (KIND_RR, test.size),
            TestKind::Bulk => (KIND_BULK, test.bytes),
        };
        let mut h = [0u8; 16];
        h[..4].copy_from_slice(MAGIC);
        h[4..8].copy_from_slice(&code.to_be_bytes());
        h[8..].copy_from_slice(&param.to_be_bytes());
        s.write_all(&h).map_err(|e| e.to_string())?;
        match kind {
            TestKind::Rr => {
                let mut hist =
                    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds");
                let msg = vec![0x42u8; test.size as usize];
                let mut reply = vec![0u8; test.size as usize];
                let mut t_start = StdInstant::now();
                let mut cpu0 = cpu_seconds();
                for i in 0..test.warmup + test.iterations {
                    if i == test.warmup {
                        t_start = StdInstant::now();
                        cpu0 = cpu_seconds();
                    }
                    let t = StdInstant::now();
                    s.write_all(&msg).map_err(|e| e.to_string())?;
                    s.read_exact(&mut reply).map_err(|e| e.to_string())?;
                    if i >= test.warmup {
                        let _ = hist.record((t.elapsed().as_nanos() as u64).max(1));
                    }
                }
                let elapsed = t_start.elapsed().as_secs_f64();
                report_rr("kernel", test.size, &hist, elapsed, cpu_seconds() - cpu0);
            }
            TestKind::Bulk => {
                let buf = vec![0u8; 1 << 20];
                let t = StdInstant::now();
                let cpu0 = cpu_seconds();
                let mut left = test.bytes;
                while left > 0 {
                    let n = left.min(buf.len() as u64) as usize;
                    s.write_all(&buf[..n]).map_err(|e| e.to_string())?;
                    left -= n as u64;
                }
                let mut r = [0u8; 8];
                s.read_exact(&mut r).map_err(|e| e.to_string())?;
                let elapsed = t.elapsed().as_secs_f64();
                if u64::from_be_bytes(r) != test.bytes {
                    return Err("server counted a different byte count".into());
                }
                report_bulk("kernel", test.bytes, elapsed, cpu_seconds() - cpu0);
            }
        }
        Ok(())
    }
}

// ---------------------------------------------------------------- the server

#[derive(Debug)]
struct ServerConn {
    id: ConnId,
    header: Vec<u8>,
    kind: u32,
    param: u64,
    // request/response: bytes of the current request received, and of the reply sent
    got: u64,
    echo: Vec<u8>,
    echo_sent: usize,
    // bulk
    count: u64,
    count_reply: [u8; 8],
    count_sent: usize,
    closing: bool,
}

#[derive(Debug)]
struct Server {
    listener: warpcore_tcp::ListenerId,
    conns: Vec<ServerConn>,
    finished: u32,
}

impl Server {
    fn new<D: PollDevice>(s: &mut Stack<D>, port: u16, buffer: usize) -> Result<Self, String> {
        let listener = s
            .listen(port, 4, &tuning(buffer))
            .map_err(|e| e.to_string())?;
        Ok(Server {
            listener,
            conns: Vec::new(),
            finished: 0,
        })
    }

    fn on_event<D: PollDevice>(&mut self, s: &mut Stack<D>, e: Event) {
        match e {
            Event::Acceptable(l) if l == self.listener => {
                while let Ok(Some(id)) = s.accept(l) {
                    self.conns.push(ServerConn {
                        id,
                        header: Vec::with_capacity(16),
                        kind: 0,
                        param: 0,
                        got: 0,
                        echo: Vec::new(),
                        echo_sent: 0,
                        count: 0,
                        count_reply: [0; 8],
                        count_sent: 8,
                        closing: false,
                    });
                }
            }
            Event::PeerClosed(c) => {
                if let Some(sc) = self.conns.iter_mut().find(|x| x.id == c) {
                    let _ = s.close(c);
                    sc.closing = true;
                }
            }
            Event::Closed(c) | Event::Reset(c) => {
                if let Some(i) = self.conns.iter().position(|x| x.id == c) {
                    let sc = self.conns.swap_remove(i);
                    let _ = s.release(sc.id);
                    self.finished += 1;
                }
            }
            _ => {}
        }
    }

    fn step<D: PollDevice>(&mut self, s: &mut Stack<D>) -> bool {
        let mut work = false;
        for sc in &mut self.conns {
            let c = sc.id;
            if sc.header.len() < 16 {
                let need = 16 - sc.header.len();
                let mut tmp = [0u8; 16];
                let n = s.recv(c, &mut tmp[..need]).unwrap_or(0);
                sc.header.extend_from_slice(&tmp[..n]);
                work |= n > 0;
                if sc.header.len() < 16 {
                    continue;
                }
                if &sc.header[..4] != MAGIC {
                    let _ = s.abort(c);
                    continue;
                }
                sc.kind = u32::from_be_bytes(sc.header[4..8].try_into().expect("4 bytes"));
                sc.param = u64::from_be_bytes(sc.header[8..16].try_into().expect("8 bytes"));
                if sc.kind == KIND_RR {
                    sc.echo = vec![0; sc.param as usize];
                    sc.echo_sent = sc.echo.len();
                }
            }
            match sc.kind {
                KIND_RR => {
                    let size = sc.param;
                    // Finish sending the previous reply before taking the next request.
                    if sc.echo_sent < sc.echo.len() {
                        let echo = std::mem::take(&mut sc.echo);
                        work |= send_some(s, c, &echo, &mut sc.echo_sent);
                        sc.echo = echo;
                        if sc.echo_sent < sc.echo.len() {
                            continue;
                        }
                    }
                    let got = sc.got;
                    let echo = &mut sc.echo;
                    let n = s
                        .recv_with(c, |d| {
                            let n = d.len().min((size - got) as usize);
                            echo[got as usize..got as usize + n].copy_from_slice(&d[..n]);
                            n
                        })
                        .unwrap_or(0);
                    sc.got += n as u64;
                    work |= n > 0;
                    if sc.got == size && size > 0 {
                        sc.got = 0;
                        sc.echo_sent = 0;
                        let echo = std::mem::take(&mut sc.echo);
                        work |= send_some(s, c, &echo, &mut sc.echo_sent);
                        sc.echo = echo;
                    }
                }
                KIND_BULK => {
                    let n = s.recv_with(c, |d| d.len()).unwrap_or(0);
                    if n > 0 {
                        sc.count += n as u64;
                        work = true;
                        if sc.count >= sc.param && sc.count_sent == 8 && sc.count_reply == [0; 8] {
                            sc.count_reply = sc.count.to_be_bytes();
                            sc.count_sent = 0;
                        }
                    }
                    if sc.count_sent < 8 {
                        let r = sc.count_reply;
                        work |= send_some(s, c, &r, &mut sc.count_sent);
                    }
                }
                _ => {
                    let _ = s.abort(c);
                }
            }
        }
        work
    }
}

// ---------------------------------------------------------------- exchange

#[derive(Debug)]
struct Exchange {
    conn: Option<ConnId>,
    listener: Option<warpcore_tcp::ListenerId>,
    bytes: u64,
    tx_salt: u32,
    rx_salt: u32,
    sent: u64,
    received: u64,
    fin_sent: bool,
    peer_closed: bool,
    connected: bool,
    error: Option<String>,
}

impl Exchange {
    fn on_event<D: PollDevice>(&mut self, s: &mut Stack<D>, e: Event) {
        match e {
            Event::Connected(c) if Some(c) == self.conn => self.connected = true,
            Event::Acceptable(l) if Some(l) == self.listener => {
                if let Ok(Some(c)) = s.accept(l) {
                    if self.conn.is_none() {
                        self.conn = Some(c);
                        self.connected = true;
                    }
                }
            }
            Event::PeerClosed(c) if Some(c) == self.conn => self.peer_closed = true,
            Event::Reset(c) if Some(c) == self.conn => {
                self.error = Some(format!(
                    "connection reset after sending {} and receiving {} bytes",
                    self.sent, self.received
                ))
            }
            _ => {}
        }
    }

    fn step<D: PollDevice>(&mut self, s: &mut Stack<D>) -> bool {
        let (Some(c), true) = (self.conn, self.connected) else {
            return false;
        };
        let mut work = false;
        while self.sent < self.bytes {
            let (off, total, salt) = (self.sent, self.bytes, self.tx_salt);
            let n = s
                .send_with(c, |buf| {
                    let n = buf.len().min((total - off) as usize);
                    fill_pattern(&mut buf[..n], salt, off);
                    n
                })
                .unwrap_or(0);
            if n == 0 {
                break;
            }
            self.sent += n as u64;
            work = true;
        }
        if self.sent == self.bytes && !self.fin_sent {
            let _ = s.close(c);
            self.fin_sent = true;
        }
        loop {
            let (off, salt) = (self.received, self.rx_salt);
            let mut bad = None;
            let n = s
                .recv_with(c, |d| {
                    if let Some(k) = d
                        .iter()
                        .enumerate()
                        .position(|(k, &b)| b != pattern(salt, off + k as u64))
                    {
                        bad = Some(off + k as u64);
                    }
                    d.len()
                })
                .unwrap_or(0);
            if let Some(at) = bad {
                self.error
                    .get_or_insert(format!("received byte {at} differs"));
            }
            if n == 0 {
                break;
            }
            self.received += n as u64;
            work = true;
        }
        work
    }

    /// Finished when everything was received and everything sent was acknowledged, FIN
    /// included (TIME-WAIT or CLOSED): leaving earlier could strand unacknowledged bytes.
    fn done<D: PollDevice>(&self, s: &mut Stack<D>) -> bool {
        if self.error.is_some() {
            return true;
        }
        let Some(c) = self.conn else {
            return false;
        };
        let acked = matches!(s.state(c), Ok(State::TimeWait | State::Closed));
        self.received == self.bytes && self.sent == self.bytes && self.peer_closed && acked
    }
}

// ---------------------------------------------------------------- drivers

enum Role {
    Server(Server, u32),
    /// The running test, the tests still to run, and the server.
    Client(Box<Client>, Vec<TestKind>, (Ipv4Address, u16)),
    Exchange(Exchange),
}

/// What to run on a stack, before the stack exists.
#[derive(Debug)]
enum RoleSpec {
    Server {
        port: u16,
        buffer: usize,
        tests: u32,
    },
    Client {
        server: (Ipv4Address, u16),
        test: TestArgs,
    },
    Exchange {
        peer: Option<String>,
        listen: u16,
        bytes: u64,
    },
}

/// Opens the listener or connection `spec` asks for.
fn make_role<D: PollDevice>(s: &mut Stack<D>, spec: RoleSpec) -> Result<Role, String> {
    Ok(match spec {
        RoleSpec::Server {
            port,
            buffer,
            tests,
        } => Role::Server(Server::new(s, port, buffer)?, tests),
        RoleSpec::Client { server, test } => {
            let mut kinds = test.test.clone();
            kinds.reverse();
            let first = kinds.pop().ok_or("no test given")?;
            Role::Client(
                Box::new(Client::new(s, server, test, first)?),
                kinds,
                server,
            )
        }
        RoleSpec::Exchange {
            peer,
            listen,
            bytes,
        } => {
            let mut x = Exchange {
                conn: None,
                listener: None,
                bytes,
                tx_salt: CLIENT_SALT,
                rx_salt: SERVER_SALT,
                sent: 0,
                received: 0,
                fin_sent: false,
                peer_closed: false,
                connected: false,
                error: None,
            };
            match peer {
                Some(p) => {
                    let (ip, port) = p
                        .split_once(':')
                        .ok_or_else(|| format!("--peer {p}: expected address:port"))?;
                    let ip: Ipv4Address = ip.parse().map_err(|_| format!("bad address {ip}"))?;
                    let port: u16 = port.parse().map_err(|_| format!("bad port {port}"))?;
                    x.conn = Some(
                        s.connect((ip, port), None, &tuning(4 << 20))
                            .map_err(|e| e.to_string())?,
                    );
                }
                None => {
                    x.tx_salt = SERVER_SALT;
                    x.rx_salt = CLIENT_SALT;
                    x.listener = Some(
                        s.listen(listen, 1, &tuning(4 << 20))
                            .map_err(|e| e.to_string())?,
                    );
                }
            }
            Role::Exchange(x)
        }
    })
}

/// Polls one stack and its application until the application is done or time runs out.
fn drive<D: PollDevice>(
    s: &mut Stack<D>,
    clock: &Clock,
    mut role: Role,
    timeout_s: u64,
    label: &str,
) -> Result<(), String> {
    let deadline = StdInstant::now() + std::time::Duration::from_secs(timeout_s);
    let mut spins = 0u32;
    loop {
        let now = clock.now();
        s.poll(now);
        while let Some(e) = s.next_event() {
            match &mut role {
                Role::Server(sv, _) => sv.on_event(s, e),
                Role::Client(cl, _, _) => cl.on_event(e),
                Role::Exchange(x) => x.on_event(s, e),
            }
        }
        let done = match &mut role {
            Role::Server(sv, tests) => {
                sv.step(s);
                *tests > 0 && sv.finished >= *tests
            }
            Role::Client(cl, rest, server) => {
                cl.step(s);
                if cl.phase == ClientPhase::Finished {
                    // The finished connection closes on its own (FIN already sent).
                    cl.report(label)?;
                    match rest.pop() {
                        Some(kind) => {
                            **cl = Client::new(s, *server, cl.test.clone(), kind)?;
                            false
                        }
                        None => true,
                    }
                } else {
                    false
                }
            }
            Role::Exchange(x) => {
                x.step(s);
                x.done(s)
            }
        };
        if done {
            // Let the last ACKs and FINs out.
            for _ in 0..1000 {
                s.poll(clock.now());
            }
            break;
        }
        spins = spins.wrapping_add(1);
        if spins % 1024 == 0 && timeout_s > 0 && StdInstant::now() > deadline {
            return Err(format!("{label}: timed out after {timeout_s} s"));
        }
    }
    match role {
        Role::Client(..) => Ok(()),
        Role::Exchange(x) => match x.error {
            Some(e) => Err(e),
            None => {
                println!(
                    "exchange ok: sent {} and received {} bytes, byte-exact",
                    x.sent, x.received
                );
                println!("RESULT mode={label} test=exchange bytes={} ok=1", x.bytes);
                Ok(())
            }
        },
        Role::Server(sv, _) => {
            println!("server: {} test connections served", sv.finished);
            Ok(())
        }
    }
}

fn run_memory(test: TestArgs, mtu: usize, pcap: Option<String>) -> Result<(), String> {
    let cfg = LinkConfig {
        mtu,
        ..LinkConfig::default()
    };
    let (ea, eb) = link::pair(&cfg);
    let clock = Clock(StdInstant::now());
    let ip_b = Ipv4Cidr::new(Ipv4Address::new(198, 18, 0, 2), 24);
    let mut b = new_stack(
        eb,
        &stack_config([2, 0, 0, 0, 0, 2], ip_b, None),
        clock.now(),
    )
    .map_err(|e| e.to_string())?;
    let mut server = Server::new(&mut b, 5201, test.buffer)?;
    match pcap {
        Some(path) => {
            let f = std::fs::File::create(&path).map_err(|e| format!("{path}: {e}"))?;
            let dev = Capture::new(ea, BufWriter::new(f), 65535);
            memory_loop(dev, &mut b, &mut server, &clock, test)
        }
        None => memory_loop(ea, &mut b, &mut server, &clock, test),
    }
}

fn memory_loop<DA: PollDevice, DB: PollDevice>(
    dev_a: DA,
    b: &mut Stack<DB>,
    server: &mut Server,
    clock: &Clock,
    test: TestArgs,
) -> Result<(), String> {
    let ip_a = Ipv4Cidr::new(Ipv4Address::new(198, 18, 0, 1), 24);
    let mut a = new_stack(
        dev_a,
        &stack_config([2, 0, 0, 0, 0, 1], ip_a, None),
        clock.now(),
    )
    .map_err(|e| e.to_string())?;
    let deadline = StdInstant::now() + std::time::Duration::from_secs(test.timeout_s);
    let server_addr = (Ipv4Address::new(198, 18, 0, 2), 5201);
    let mut kinds = test.test.clone();
    kinds.reverse();
    let first = kinds.pop().ok_or("no test given")?;
    let mut client = Client::new(&mut a, server_addr, test.clone(), first)?;
    let mut spins = 0u32;
    loop {
        if client.phase == ClientPhase::Finished {
            client.report("memory")?;
            match kinds.pop() {
                Some(kind) => client = Client::new(&mut a, server_addr, test.clone(), kind)?,
                None => return Ok(()),
            }
        }
        let now = clock.now();
        a.poll(now);
        while let Some(e) = a.next_event() {
            client.on_event(e);
        }
        client.step(&mut a);
        b.poll(now);
        while let Some(e) = b.next_event() {
            server.on_event(b, e);
        }
        server.step(b);
        spins = spins.wrapping_add(1);
        if spins % 1024 == 0 && StdInstant::now() > deadline {
            return Err("memory: timed out".into());
        }
    }
}

#[cfg(feature = "dpdk")]
mod dpdk_mode {
    use super::*;
    use warpcore_tcp::dpdk_sys::{EalBuilder, Mempool, PcapngWriter, Port, PortConfig};
    use warpcore_tcp::{DpdkDevice, DpdkDeviceConfig};

    /// Brings up the EAL and the port, builds the stack (with a pcap capture if asked) and
    /// runs the role described by `spec` on it.
    pub(crate) fn with_stack(
        net: &NetArgs,
        label: &str,
        timeout_s: u64,
        spec: RoleSpec,
    ) -> Result<(), String> {
        let mut b = EalBuilder::new("tcpperf");
        b = match &net.eal {
            Some(args) => b.args(args.split_whitespace()),
            None => b.test_defaults(
                net.core,
                512,
                &format!("wcnet-tcpperf-{}", std::process::id()),
            ),
        };
        for v in &net.vdev {
            b = b.vdev(v);
        }
        let eal = b.init().map_err(|e| e.to_string())?;
        let mtu = net.mtu;
        let frame = u32::from(mtu) + 18 + 128;
        let room = u16::try_from(frame.max(u32::from(Mempool::DEFAULT_DATA_ROOM)))
            .map_err(|_| format!("MTU {mtu} too large"))?;
        let pool =
            Mempool::new(&eal, "wcnet_tcpperf", 16383, 256, room).map_err(|e| e.to_string())?;
        let mut port = match &net.port {
            Some(n) => Port::by_name(&eal, n),
            None => Port::from_id(&eal, 0),
        }
        .map_err(|e| e.to_string())?;
        let off = port
            .configure(
                &PortConfig {
                    mtu: Some(mtu),
                    ..PortConfig::default()
                },
                &pool,
            )
            .map_err(|e| e.to_string())?;
        port.start().map_err(|e| e.to_string())?;
        // memif connects (and tap comes up) in DPDK's control thread; start the test once the
        // link is up so the first SYN is not lost to a link that is still down.
        let t0 = StdInstant::now();
        while !port.link_status().map(|l| l.up).unwrap_or(false) {
            if t0.elapsed() > std::time::Duration::from_secs(net.link_wait_s) {
                return Err(format!(
                    "port {}: link still down after {} s",
                    port.name(),
                    net.link_wait_s
                ));
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let mac = port.mac().map_err(|e| e.to_string())?;
        eprintln!(
            "tcpperf: port {} ({}), mac {:02x?}, mtu {}, offloads {:?}",
            port.name(),
            port.info().driver,
            mac,
            mtu,
            off
        );
        let rx = port.rx_queue(0).map_err(|e| e.to_string())?;
        let tx = port.tx_queue(0).map_err(|e| e.to_string())?;
        let mut dev = DpdkDevice::new(
            rx,
            tx,
            pool,
            DpdkDeviceConfig {
                mtu: usize::from(mtu),
                burst: net.burst,
                tx_pending_max: net.tx_pending,
            },
        );
        if let Some(path) = &net.pcapng {
            let w = PcapngWriter::create(&eal, path, "wcnet_tcpperf_cap", u32::from(mtu) + 18)
                .map_err(|e| e.to_string())?;
            dev.set_pcapng(w);
        }
        let clock = Clock(StdInstant::now());
        let cfg = stack_config(mac, net.ip, net.gateway);
        let result = match &net.pcap {
            Some(path) => {
                let f = std::fs::File::create(path).map_err(|e| format!("{path}: {e}"))?;
                let cap = Capture::new(dev, BufWriter::new(f), 65535);
                let mut s = new_stack(cap, &cfg, clock.now()).map_err(|e| e.to_string())?;
                let r = make_role(&mut s, spec)?;
                drive(&mut s, &clock, r, timeout_s, label)
            }
            None => {
                let mut s = new_stack(dev, &cfg, clock.now()).map_err(|e| e.to_string())?;
                let r = make_role(&mut s, spec)?;
                let res = drive(&mut s, &clock, r, timeout_s, label);
                eprintln!("tcpperf: device {:?}", s.device_stats());
                res
            }
        };
        // Stop polling, then linger before the port closes: net_memif in DPDK 22.11 can crash
        // in rx_burst when the peer disconnects during a burst (its control thread unmaps the
        // shared regions under the data path), so neither side may be polling when the other
        // goes away. The side that finishes first is gone before the other stops polling.
        std::thread::sleep(std::time::Duration::from_millis(300));
        let st = port.stats().map_err(|e| e.to_string())?;
        eprintln!("tcpperf: port stats {st:?}");
        if net.xstats {
            for x in port.xstats().map_err(|e| e.to_string())? {
                eprintln!("  {} = {}", x.name, x.value);
            }
        }
        result
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.mode {
        Mode::Memory { test, mtu, pcap } => run_memory(test, mtu, pcap),
        Mode::KernelServer { listen, tests } => kernel::server(&listen, tests),
        Mode::KernelClient { server, test } => kernel::client(&server, &test),
        #[cfg(feature = "dpdk")]
        Mode::Server { net, listen, tests } => dpdk_mode::with_stack(
            &net,
            "server",
            0,
            RoleSpec::Server {
                port: listen,
                buffer: 4 << 20,
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
            dpdk_mode::with_stack(
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
        } => dpdk_mode::with_stack(
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
