//! Command line, in perftest's spelling where perftest has the option.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use clap::{Parser, ValueEnum};

/// The tests, named as perftest's binaries without the `ib_` prefix.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
#[value(rename_all = "snake_case")]
pub enum TestName {
    /// RDMA Write ping-pong latency (half round trip).
    WriteLat,
    /// RDMA Write bandwidth.
    WriteBw,
    /// RDMA Read latency (full round trip).
    ReadLat,
    /// RDMA Read bandwidth.
    ReadBw,
    /// Send/Receive ping-pong latency (half round trip).
    SendLat,
    /// Send/Receive bandwidth.
    SendBw,
    /// Atomic (FetchAdd/CmpSwap) latency: not wired to the RFC 7306 verbs yet (issue 5).
    AtomicLat,
    /// Atomic bandwidth: not wired to the RFC 7306 verbs yet (issue 5).
    AtomicBw,
}

impl TestName {
    /// Every test, in hello order.
    pub const ALL: [TestName; 8] = [
        TestName::WriteLat,
        TestName::WriteBw,
        TestName::ReadLat,
        TestName::ReadBw,
        TestName::SendLat,
        TestName::SendBw,
        TestName::AtomicLat,
        TestName::AtomicBw,
    ];

    /// Index in [`TestName::ALL`].
    pub fn index(self) -> u8 {
        TestName::ALL.iter().position(|t| *t == self).unwrap_or(0) as u8
    }

    /// Command-line name.
    pub fn name(self) -> &'static str {
        match self {
            TestName::WriteLat => "write_lat",
            TestName::WriteBw => "write_bw",
            TestName::ReadLat => "read_lat",
            TestName::ReadBw => "read_bw",
            TestName::SendLat => "send_lat",
            TestName::SendBw => "send_bw",
            TestName::AtomicLat => "atomic_lat",
            TestName::AtomicBw => "atomic_bw",
        }
    }

    /// perftest's banner title.
    pub fn title(self) -> &'static str {
        match self {
            TestName::WriteLat => "RDMA_Write Latency Test",
            TestName::WriteBw => "RDMA_Write BW Test",
            TestName::ReadLat => "RDMA_Read Latency Test",
            TestName::ReadBw => "RDMA_Read BW Test",
            TestName::SendLat => "Send Latency Test",
            TestName::SendBw => "Send BW Test",
            TestName::AtomicLat => "Atomic Latency Test",
            TestName::AtomicBw => "Atomic BW Test",
        }
    }

    /// A bandwidth test.
    pub fn is_bw(self) -> bool {
        matches!(
            self,
            TestName::WriteBw | TestName::ReadBw | TestName::SendBw | TestName::AtomicBw
        )
    }

    /// A Send/Receive test.
    pub fn is_send(self) -> bool {
        matches!(self, TestName::SendLat | TestName::SendBw)
    }

    /// An RDMA Read test.
    pub fn is_read(self) -> bool {
        matches!(self, TestName::ReadLat | TestName::ReadBw)
    }
}

/// `on` / `off`.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnOff {
    /// Enabled.
    On,
    /// Disabled.
    Off,
}

/// RFC 6581 peer-to-peer mode and its ready-to-receive message.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum P2p {
    /// No peer-to-peer negotiation (the initiator sends first).
    None,
    /// Zero-length Send RTR.
    Send,
    /// Zero-length RDMA Write RTR.
    Write,
    /// Zero-length RDMA Read RTR.
    Read,
}

/// Which loopback.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loopback {
    /// net_ring when built with DPDK, else the in-memory link.
    Auto,
    /// Two DPDK net_ring ports joined back to back.
    Ring,
    /// The in-memory link (no DPDK).
    Link,
}

/// iwperf: perftest-style RDMA benchmarks over Warpcore's user-space iWARP engine.
#[derive(Parser, Debug, Clone)]
#[command(
    name = "iwperf",
    version,
    after_help = "Server: iwperf write_lat --memif /tmp/iwperf.sock\n\
                  Client: iwperf write_lat --memif /tmp/iwperf.sock 198.18.0.2\n\
                  One process: iwperf write_bw --loopback"
)]
pub struct Cli {
    /// The test.
    #[arg(value_enum)]
    pub test: TestName,
    /// Server address: makes this process the client. Without it, it is the server.
    pub server: Option<Ipv4Addr>,
    /// Message size in bytes (default 2 for latency, 65536 for bandwidth tests).
    #[arg(short = 's', long = "size")]
    pub size: Option<u64>,
    /// Run all sizes from 2 bytes to 8 MiB (powers of two).
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// Iterations (default 1000 for latency, 5000 for bandwidth tests).
    #[arg(short = 'n', long = "iters")]
    pub iters: Option<u64>,
    /// Run each size for this many seconds instead of a number of iterations.
    #[arg(short = 'D', long = "duration")]
    pub duration: Option<f64>,
    /// Queue pairs (bandwidth tests).
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    pub qps: u16,
    /// Work requests in flight per QP (default 128 for bandwidth tests, 1 for latency).
    #[arg(short = 't', long = "tx-depth")]
    pub tx_depth: Option<u32>,
    /// Max inline data (accepted for perftest compatibility; the engine always copies).
    #[arg(short = 'I', long = "inline_size", default_value_t = 0)]
    pub inline_size: u32,
    /// Bidirectional bandwidth test.
    #[arg(short = 'b', long = "bidirectional")]
    pub bidir: bool,
    /// Report bandwidth in Gbit/s instead of MiB/s.
    #[arg(long = "report_gbits")]
    pub report_gbits: bool,
    /// Server: answer linux-rdma/perftest `-R` clients (ib_write_bw, ib_read_bw,
    /// ib_read_lat) instead of iwperf ones (see apps/src/bin/iwperf/perftest.rs).
    #[arg(long)]
    pub perftest: bool,
    /// TCP port of the server.
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    pub port: u16,
    /// MPA CRC32c.
    #[arg(long, value_enum, default_value_t = OnOff::On)]
    pub crc: OnOff,
    /// MPA markers.
    #[arg(long, value_enum, default_value_t = OnOff::Off)]
    pub markers: OnOff,
    /// MPA revision.
    #[arg(long = "mpa-rev", default_value_t = 2, value_parser = clap::value_parser!(u8).range(1..=2))]
    pub mpa_rev: u8,
    /// RFC 6581 peer-to-peer mode (RTR message type).
    #[arg(long, value_enum, default_value_t = P2p::Write)]
    pub p2p: P2p,
    /// RDMA Write with Immediate Data (RFC 7306; not supported yet).
    #[arg(long = "write_with_imm")]
    pub write_with_imm: bool,
    /// Check every received octet against the sender's per-iteration pattern.
    #[arg(long)]
    pub verify: bool,
    /// Write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write an HdrHistogram interval log (one histogram per second and size) to this file.
    #[arg(long = "hdr-log")]
    pub hdr_log: Option<PathBuf>,
    /// CPUs: the first runs the application thread, the others the engine core(s).
    #[arg(long)]
    pub cores: Option<String>,
    /// Record this side's traffic as pcapng (Wireshark, iwdump).
    #[arg(long)]
    pub capture: Option<PathBuf>,
    /// A DPDK vdev (net_memif0,..., net_tap0,..., net_af_packet0,...), repeatable.
    #[arg(long)]
    pub vdev: Vec<String>,
    /// Shorthand for a net_memif vdev on this socket path (memif server role for the iwperf
    /// server, client role for the client).
    #[arg(long)]
    pub memif: Option<PathBuf>,
    /// A NIC by PCI address (EAL -a ADDR; the port is named by it).
    #[arg(long)]
    pub pci: Option<String>,
    /// EAL arguments verbatim (replace the defaults; --vdev is still added).
    #[arg(long, allow_hyphen_values = true)]
    pub eal: Option<String>,
    /// DPDK port name (default: the vdev's or PCI device's name).
    #[arg(long = "dpdk-port")]
    pub dpdk_port: Option<String>,
    /// Server and client engines in this process (net_ring, or the in-memory link).
    #[arg(long, num_args = 0..=1, require_equals = true, default_missing_value = "auto", value_enum)]
    pub loopback: Option<Loopback>,
    /// This side's IPv4 address (default 198.18.0.2 for the server, .1 for the client).
    #[arg(long)]
    pub ip: Option<Ipv4Addr>,
    /// Seconds to wait for the peer (connect, or an answer during a run).
    #[arg(long, default_value_t = 30)]
    pub timeout: u64,
}

impl Cli {
    /// The message sizes of the run.
    pub fn sizes(&self) -> Vec<u64> {
        if self.all {
            (1..=23).map(|e| 1u64 << e).collect()
        } else {
            vec![self
                .size
                .unwrap_or(if self.test.is_bw() { 65536 } else { 2 })]
        }
    }

    /// Iterations per size.
    pub fn iters(&self) -> u64 {
        self.iters
            .unwrap_or(if self.test.is_bw() { 5000 } else { 1000 })
    }

    /// Work requests in flight.
    pub fn tx_depth(&self) -> u32 {
        self.tx_depth
            .unwrap_or(if self.test.is_bw() { 128 } else { 1 })
    }

    /// Refuses what cannot run, with the reason.
    pub fn validate(&self) -> Result<(), String> {
        if matches!(self.test, TestName::AtomicLat | TestName::AtomicBw) {
            return Err(format!(
                "{} is not supported yet (issue 5): iwperf does not drive the RFC 7306 atomics \
                 (FetchAdd, CmpSwap) of the verbs API yet",
                self.test.name()
            ));
        }
        if self.write_with_imm {
            return Err(
                "--write_with_imm is not supported yet (issue 5): iwperf does not drive the \
                        verbs API's RDMA Write with Immediate Data (RFC 7306) yet"
                    .into(),
            );
        }
        if let Some(s) = self.size {
            if s == 0 || s > 1 << 31 {
                return Err(format!("-s {s}: size must be between 1 and 2^31 bytes"));
            }
        }
        if self.test == TestName::WriteLat && self.size.is_some_and(|s| s < 1) {
            return Err("write_lat needs at least 1 byte".into());
        }
        if self.iters == Some(0) {
            return Err("-n must be at least 1".into());
        }
        if let Some(d) = self.duration {
            if !(d > 0.0 && d < 86400.0) {
                return Err(format!("-D {d}: duration must be between 0 and 86400 s"));
            }
        }
        if self.qps == 0 || self.qps > 32 {
            return Err("-q must be between 1 and 32".into());
        }
        if !self.test.is_bw() && self.qps > 1 {
            return Err("latency tests use one QP (as perftest's)".into());
        }
        if !self.test.is_bw() && self.bidir {
            return Err("-b applies to bandwidth tests".into());
        }
        let t = self.tx_depth();
        if t == 0 || t > 1000 {
            return Err(format!("-t {t}: TX depth must be between 1 and 1000"));
        }
        if self.mpa_rev == 1 && self.p2p != P2p::None && self.p2p != P2p::Write {
            return Err("--p2p needs --mpa-rev 2".into());
        }
        if matches!(self.p2p, P2p::Send | P2p::Read) {
            return Err(format!(
                "--p2p {:?}: the verbs API only offers the zero-length RDMA Write RTR; use \
                 --p2p write or none",
                self.p2p
            )
            .to_lowercase());
        }
        if self.loopback.is_some() && self.server.is_some() {
            return Err("--loopback runs both sides: give no server address".into());
        }
        Ok(())
    }
}
