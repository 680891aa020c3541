//! Command line, in perftest's spelling where perftest has the option.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use clap::{Parser, ValueEnum};
use warpcore_apps::device::DeviceArgs;

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
    /// RFC 7306 atomic (FetchAdd or CmpSwap, `-A`) latency (full round trip).
    AtomicLat,
    /// RFC 7306 atomic (FetchAdd or CmpSwap, `-A`) bandwidth.
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

    /// An atomic test.
    pub fn is_atomic(self) -> bool {
        matches!(self, TestName::AtomicLat | TestName::AtomicBw)
    }

    /// An RDMA Write test.
    pub fn is_write(self) -> bool {
        matches!(self, TestName::WriteLat | TestName::WriteBw)
    }
}

/// perftest's `-A` atomic types.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicType {
    /// FetchAdd of 1 on the server's 64-bit counter.
    #[value(name = "FETCH_AND_ADD")]
    FetchAndAdd,
    /// CmpSwap of the counter's expected value with its successor.
    #[value(name = "CMP_AND_SWAP")]
    CmpAndSwap,
}

/// Largest `-I`.
pub const MAX_INLINE: u32 = 4096;

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

/// Who runs the engine core's loop (`--poll-mode`).
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollMode {
    /// Run to completion: no engine thread; the application thread runs the engine core
    /// itself while it polls (one busy thread per process, as perftest's).
    Caller,
    /// An engine thread that spins and yields when idle but never parks.
    Busy,
    /// An engine thread that spins, yields, then parks up to 200 us when idle (the verbs
    /// library's default; frees the CPU, costs a wake-up per hand-off).
    Thread,
}

/// `--tcp`: which TCP runs under the engine.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpChoice {
    /// Warpcore's own TCP (the default).
    Warpcore,
    /// smoltcp's TCP socket, kept as the reference of differential tests and benchmarks.
    Reference,
}

/// `--inject-defect`: a testing aid that plants one defect on the sending side so that
/// `--verify` can be shown to catch it.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
#[value(rename_all = "kebab-case")]
pub enum Defect {
    /// Flip one octet (octet 7, or octet 0 of messages up to 8 octets) of message 3 after
    /// its verification pattern was written (write_bw: of the last message written into
    /// message 3's slot, the one the receiver checks).
    CorruptOctet,
    /// Post Send number 3 one octet shorter than the message size (send tests).
    ShortSend,
}

/// The message `--inject-defect` spoils.
pub const DEFECT_MSG: u64 = 3;

impl Defect {
    /// The octet `corrupt-octet` flips in a message of `size` octets (never write_lat's tag,
    /// the last octet, since size >= 2).
    pub fn octet(size: u64) -> u64 {
        if size > 8 {
            7
        } else {
            0
        }
    }

    /// The message number the defect lands on: message 3, except that write_bw checks
    /// only the last message written into each of its `slots` slots, so there it is the
    /// last of `iters` messages that lands in message 3's slot.
    pub fn message(test: TestName, iters: u64, slots: u64) -> u64 {
        if test == TestName::WriteBw && iters > DEFECT_MSG {
            let slots = slots.max(1);
            DEFECT_MSG + ((iters - 1 - DEFECT_MSG) / slots) * slots
        } else {
            DEFECT_MSG
        }
    }

    /// Command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Defect::CorruptOctet => "corrupt-octet",
            Defect::ShortSend => "short-send",
        }
    }
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
    /// Max inline data: messages up to this size are posted with `post_send_inline`
    /// (copied at post time; write and send tests, both sides).
    #[arg(short = 'I', long = "inline_size", default_value_t = 0)]
    pub inline_size: u32,
    /// Atomic type of the atomic tests.
    #[arg(short = 'A', long = "atomic_type", value_enum, default_value_t = AtomicType::FetchAndAdd)]
    pub atomic_type: AtomicType,
    /// Bidirectional bandwidth test.
    #[arg(short = 'b', long = "bidirectional")]
    pub bidir: bool,
    /// Report bandwidth in Gbit/s instead of MiB/s.
    #[arg(long = "report_gbits")]
    pub report_gbits: bool,
    /// Talk to linux-rdma/perftest `-R` peers instead of iwperf ones: as server, answer
    /// its clients; with an address, be the client of its server (`ib_*_bw/lat -R`;
    /// see apps/src/bin/iwperf/perftest.rs).
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
    /// RFC 6581 peer-to-peer mode: the RTR message the client (initiator) offers and sends
    /// first; the server accepts all three.
    #[arg(long, value_enum, default_value_t = P2p::Write)]
    pub p2p: P2p,
    /// RDMA Write with Immediate Data (RFC 7306) in the write tests: the receiver learns of
    /// each message from its receive completion (and the immediate value) instead of
    /// polling memory.
    #[arg(long = "write_with_imm")]
    pub write_with_imm: bool,
    /// Check every received octet against the sender's per-iteration pattern (and every
    /// received Send's length). A clean run prints `verify: ok, N messages checked`; a
    /// failed check, or nothing checked, prints `verify: FAILED: ...` and exits with 3.
    #[arg(long)]
    pub verify: bool,
    /// TESTING AID, not a benchmark option: plant one defect on the sending side (the
    /// client) for --verify to catch. corrupt-octet flips one octet of message 3 after its
    /// pattern was written (write/send tests); short-send posts Send 3 one octet short
    /// (send tests). Needs --verify and -n 4 or more; the run must then fail with exit 3.
    #[arg(long = "inject-defect", value_enum)]
    pub inject_defect: Option<Defect>,
    /// Write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write an HdrHistogram interval log (one histogram per second and size) to this file.
    #[arg(long = "hdr-log")]
    pub hdr_log: Option<PathBuf>,
    /// Who runs the engine core: the application thread while it polls (caller, one
    /// thread per process), or an engine thread that never parks (busy) or parks when
    /// idle (thread).
    #[arg(long = "poll-mode", value_enum, default_value_t = PollMode::Caller)]
    pub poll_mode: PollMode,
    /// The TCP under the engine: Warpcore's own, or smoltcp's reference (for side-by-side
    /// measurements; both ends should use the same).
    #[arg(long, value_enum, default_value_t = TcpChoice::Warpcore)]
    pub tcp: TcpChoice,
    /// The device: --memif, --vdev, --pci, --eal, --dpdk-port, --loopback, --ip, --gateway,
    /// --mac, --cores, --mtu, --no-csum, --capture (the same in every Warpcore tool).
    #[command(flatten)]
    pub dev: DeviceArgs,
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
            vec![self.size.unwrap_or(if self.test.is_atomic() {
                8
            } else if self.test.is_bw() {
                65536
            } else {
                2
            })]
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
        if self.perftest {
            self.validate_perftest()?;
        }
        if let Some(d) = self.inject_defect {
            self.validate_defect(d)?;
        }
        if self.test.is_atomic() && (self.all || self.size.is_some_and(|s| s != 8)) {
            return Err(format!(
                "{}: atomics work on one 64-bit word: -s 8 only (no -a)",
                self.test.name()
            ));
        }
        if self.write_with_imm && !self.test.is_write() {
            return Err("--write_with_imm applies to write_lat and write_bw".into());
        }
        if self.inline_size > 0 && !(self.test.is_write() || self.test.is_send()) {
            return Err(format!(
                "-I applies to write and send tests ({} carries no payload to inline)",
                self.test.name()
            ));
        }
        if self.inline_size > MAX_INLINE {
            return Err(format!(
                "-I {}: at most {MAX_INLINE} octets inline",
                self.inline_size
            ));
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
        if self.qps == 0 || self.qps > crate::net::MAX_QPS {
            return Err(format!("-q must be between 1 and {}", crate::net::MAX_QPS));
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
        if self.dev.loopback.is_some() && self.server.is_some() {
            return Err("--loopback runs both sides: give no server address".into());
        }
        Ok(())
    }

    /// `--perftest` talks to linux-rdma/perftest peers with their own exchange: every option
    /// it cannot carry out is refused rather than ignored.
    fn validate_perftest(&self) -> Result<(), String> {
        let refuse = |opt: &str, why: &str| Err(format!("--perftest cannot honour {opt}: {why}"));
        if self.verify {
            return refuse(
                "--verify",
                "perftest's peers send their own buffer contents, not iwperf's pattern, so \
                 there is nothing to check against",
            );
        }
        if self.inject_defect.is_some() {
            return refuse(
                "--inject-defect",
                "it plants a defect for iwperf's --verify, which --perftest has not",
            );
        }
        if self.bidir {
            return refuse(
                "-b",
                "perftest's bidirectional exchange (run_iter_bi, duplex reports) is not spoken",
            );
        }
        if self.qps != 1 {
            return refuse(
                "-q",
                "it opens one test connection (perftest's default -q 1)",
            );
        }
        if let Some(t) = self.tx_depth {
            return refuse(
                &format!("-t {t}"),
                "its window is fixed (64 Writes or Sends, 16 Reads in flight; one at a time \
                 in latency tests)",
            );
        }
        if self.duration.is_some() {
            return refuse("-D", "it runs by iterations only (-n, matching the peer's)");
        }
        if self.all && self.test.is_send() {
            return refuse(
                "-a",
                "perftest's send tests run sizes up to 8 MiB, and --perftest's receive slots \
                 hold 64 KiB; run one -s at a time (2 to 65536 octets), matching the peer's",
            );
        }
        if self.inline_size > 0 {
            return refuse("-I", "it posts every message from registered memory");
        }
        if self.write_with_imm {
            return refuse(
                "--write_with_imm",
                "it speaks plain RDMA Writes (perftest's write tests without it)",
            );
        }
        if self.report_gbits {
            return refuse("--report_gbits", "it prints perftest's MB/sec table only");
        }
        if self.json.is_some() {
            return refuse(
                "--json",
                "it prints perftest's table only (no iwperf result file)",
            );
        }
        if self.hdr_log.is_some() {
            return refuse(
                "--hdr-log",
                "it keeps no HdrHistogram (perftest's statistics only)",
            );
        }
        if self.dev.loopback.is_some() {
            return refuse(
                "--loopback",
                "its peer is a perftest process on the network, not a second iwperf engine",
            );
        }
        Ok(())
    }

    /// `--inject-defect` needs a run where the defect is sent and checked.
    fn validate_defect(&self, d: Defect) -> Result<(), String> {
        let name = d.name();
        if !self.verify {
            return Err(format!(
                "--inject-defect {name} plants a defect for --verify to catch: give --verify"
            ));
        }
        if self.server.is_none() && self.dev.loopback.is_none() {
            return Err(format!(
                "--inject-defect {name} acts on the sending side: give it to the client (the \
                 side with the server's address, or --loopback)"
            ));
        }
        match d {
            Defect::CorruptOctet if !(self.test.is_write() || self.test.is_send()) => {
                return Err(format!(
                    "--inject-defect corrupt-octet applies to write and send tests ({} sends \
                     no data of the client's)",
                    self.test.name()
                ))
            }
            Defect::ShortSend if !self.test.is_send() => {
                return Err(format!(
                    "--inject-defect short-send applies to send_lat and send_bw ({} posts no \
                     Sends of data)",
                    self.test.name()
                ))
            }
            _ => {}
        }
        if self.all || self.duration.is_some() {
            return Err(format!(
                "--inject-defect {name} spoils message {DEFECT_MSG} of one size run by \
                 iterations: no -a or -D"
            ));
        }
        if self.iters() <= DEFECT_MSG {
            return Err(format!(
                "--inject-defect {name} spoils message {DEFECT_MSG}: give -n {} or more",
                DEFECT_MSG + 1
            ));
        }
        if self.sizes().first().copied().unwrap_or(0) < 2 {
            return Err(format!(
                "--inject-defect {name} needs messages of at least 2 octets"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn defect_lands_on_a_message_the_receiver_checks() {
        // write_bw checks the last message of each slot: with 4 slots and 10 messages,
        // slot 3 holds 3, then 7 (11 is past the end), so message 7 carries the defect.
        assert_eq!(Defect::message(TestName::WriteBw, 10, 4), 7);
        // Fewer messages than slots: message 3 is its slot's last.
        assert_eq!(Defect::message(TestName::WriteBw, 100, 128), 3);
        // Send tests check every message.
        assert_eq!(Defect::message(TestName::SendBw, 10_000, 4), 3);
        assert_eq!(Defect::octet(65536), 7);
        assert_eq!(Defect::octet(2), 0);
    }
}
