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

/// Largest `-r`: a queue pair's receive queue holds 1024, four of them for iwperf's control
/// messages.
pub const MAX_RX_DEPTH: u32 = 1020;

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
    /// With -D, a bandwidth test counts only what completes from this many seconds after
    /// its start to as many before its end (perftest's --margin; default, as perftest's, a
    /// quarter of -D in whole seconds). 0 counts the whole run. Refused in latency tests
    /// and with --run_infinitely, which have no margin.
    #[arg(long = "margin", value_name = "SECS")]
    pub margin: Option<u32>,
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
    /// (default: caller; thread with -e, whose application thread sleeps.)
    #[arg(long = "poll-mode", value_enum)]
    pub poll_mode_arg: Option<PollMode>,
    /// The TCP under the engine: Warpcore's own, or smoltcp's reference (for side-by-side
    /// measurements; both ends should use the same).
    #[arg(long, value_enum, default_value_t = TcpChoice::Warpcore)]
    pub tcp: TcpChoice,
    /// The device: --memif, --vdev, --pci, --eal, --dpdk-port, --loopback, --ip, --gateway,
    /// --mac, --cores, --mtu, --no-csum, --capture (the same in every Warpcore tool).
    #[command(flatten)]
    pub dev: DeviceArgs,
    /// Seconds to wait for the peer (connect, or an answer during a run; 1 to a year).
    #[arg(long, default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=warpcore_apps::MAX_TIMEOUT_S))]
    pub timeout: u64,

    /// Which of the run flags with a default were given on the command line (filled by
    /// [`Cli::note_given`]): a server holds the client's run to those only.
    #[arg(skip)]
    pub given: Given,

    // ---- perftest's flags (docs/iwperf.md has the table: flag -> what iwperf does) ----
    /// perftest -F: do not fail when the CPU frequency may vary. iwperf times with the
    /// monotonic clock, not the cycle counter, so no figure depends on the frequency.
    #[arg(short = 'F', long = "CPU-freq", help_heading = "perftest")]
    pub cpu_freq: bool,
    /// perftest -d: the RDMA device. This process has one, `warpcore0` (its port is the one
    /// --memif/--vdev/--pci opens).
    #[arg(short = 'd', long = "ib-dev", help_heading = "perftest")]
    pub ib_dev: Option<String>,
    /// perftest -i: the device port. A Warpcore device has one, port 1.
    #[arg(
        short = 'i',
        long = "ib-port",
        default_value_t = 1,
        help_heading = "perftest"
    )]
    pub ib_port: u8,
    /// perftest -x: the GID index. An iWARP port's one GID (index 0) is its IPv4 address.
    #[arg(short = 'x', long = "gid-index", help_heading = "perftest")]
    pub gid_index: Option<u32>,
    /// perftest -R: connect with rdma_cm. iWARP always connects through the connection
    /// manager (TCP, then the MPA exchange), so this is how iwperf always works.
    #[arg(short = 'R', long = "rdma_cm", help_heading = "perftest")]
    pub rdma_cm: bool,
    /// perftest -c: the connection type. iWARP has reliable connections only: RC.
    #[arg(
        short = 'c',
        long = "connection",
        default_value = "RC",
        help_heading = "perftest"
    )]
    pub connection: String,
    /// perftest -e: sleep on a completion channel until a completion arrives instead of
    /// polling (needs an engine thread: --poll-mode thread or busy, thread by default).
    /// Not with write tests, -D or --run_infinitely, as perftest.
    #[arg(short = 'e', long = "events", help_heading = "perftest")]
    pub events: bool,
    /// perftest -H: print every latency sample (sorted, the kept ones) before the row.
    #[arg(short = 'H', long = "report-histogram", help_heading = "perftest")]
    pub report_histogram: bool,
    /// perftest -U: print every latency sample unsorted, in the order measured (implies -H).
    #[arg(short = 'U', long = "report-unsorted", help_heading = "perftest")]
    pub report_unsorted: bool,
    /// perftest -C: latencies in CPU cycles (ns times the CPU clock in /proc/cpuinfo).
    #[arg(short = 'C', long = "report-cycles", help_heading = "perftest")]
    pub report_cycles: bool,
    /// perftest -N: no peak bandwidth (printed 0.00, as perftest).
    #[arg(short = 'N', long = "noPeak", help_heading = "perftest")]
    pub no_peak: bool,
    /// perftest -Q: one completion per this many work requests (the others unsignalled;
    /// bandwidth tests).
    #[arg(short = 'Q', long = "cq-mod", help_heading = "perftest")]
    pub cq_mod: Option<u32>,
    /// perftest -l: post work requests in lists of this many (one post_send_list each;
    /// bandwidth tests).
    #[arg(short = 'l', long = "post_list", help_heading = "perftest")]
    pub post_list: Option<u32>,
    /// perftest -o: outstanding RDMA Reads and atomics (the MPA IRD and ORD asked for;
    /// default 16).
    #[arg(short = 'o', long = "outs", help_heading = "perftest")]
    pub outs: Option<u16>,
    /// perftest -r: receive queue depth of send tests and Write with Immediate (the
    /// client's value sets both sides).
    #[arg(short = 'r', long = "rx-depth", help_heading = "perftest")]
    pub rx_depth: Option<u32>,
    /// perftest --run_infinitely: bandwidth tests run until stopped, printing a row every
    /// -D seconds (default 5).
    #[arg(long = "run_infinitely", help_heading = "perftest")]
    pub run_infinitely: bool,
    /// perftest --output: print only this figure, one line per size.
    #[arg(long = "output", value_enum, help_heading = "perftest")]
    pub output: Option<OutputKind>,
    /// perftest --out_json: write perftest's JSON report (its keys) to --out_json_file.
    #[arg(long = "out_json", help_heading = "perftest")]
    pub out_json: bool,
    /// perftest --out_json_file: the JSON report's file (default perftest_out.json).
    #[arg(long = "out_json_file", help_heading = "perftest")]
    pub out_json_file: Option<PathBuf>,
}

/// perftest's `--output` figures.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
#[value(rename_all = "snake_case")]
pub enum OutputKind {
    /// Average bandwidth (bandwidth tests).
    Bandwidth,
    /// Average message rate in Mpps (bandwidth tests).
    MessageRate,
    /// Average latency in usec (latency tests).
    Latency,
}

/// The run flags with a default value that were given on the command line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Given {
    /// `-q`.
    pub qps: bool,
    /// `-I`.
    pub inline_size: bool,
    /// `-A`.
    pub atomic_type: bool,
}

/// The run an iwperf server's own command line describes. The client decides the run (its
/// hello and [`crate::wire::RunShape`]); a run flag given to the server too must say the
/// same, or the server refuses that client naming the flag (before, it followed the client
/// silently: `-s 4096` on the server ran the client's 65536). Flags not given follow the
/// client, so perftest's habit of giving both sides the same flags works.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ServerRun {
    /// `-s`.
    pub size: Option<u64>,
    /// `-a`.
    pub all: bool,
    /// `-n`.
    pub iters: Option<u64>,
    /// `-D` (or `--run_infinitely`'s 5 s), in ns as the client sends it.
    pub duration_ns: Option<u64>,
    /// `-q`, if given.
    pub qps: Option<u16>,
    /// `-t`.
    pub tx_depth: Option<u32>,
    /// `-I`, if given.
    pub inline: Option<u32>,
    /// `-A`, if given: whether CMP_AND_SWAP.
    pub cmp_swap: Option<bool>,
    /// `-b`.
    pub bidir: bool,
    /// `--write_with_imm`.
    pub imm: bool,
    /// `--verify`.
    pub verify: bool,
}

/// What the client's hello and run shape ask for, as [`ServerRun::check`] compares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientRun {
    /// QPs of the run.
    pub qps: u16,
    /// Work requests in flight per QP.
    pub tx_depth: u32,
    /// `-I`.
    pub inline: u32,
    /// The hello's `FLAG_*` bits.
    pub flags: u8,
    /// Size, iterations and duration (`None`: a client that does not send them).
    pub shape: Option<crate::wire::RunShape>,
}

impl ServerRun {
    /// The first run flag of this server that the client's run contradicts, in words
    /// naming the flag and both values; `Ok` when none does.
    pub fn check(&self, c: &ClientRun) -> Result<(), String> {
        use crate::wire::{FLAG_BIDIR, FLAG_CMP_SWAP, FLAG_IMM, FLAG_VERIFY};
        let differ = |flag: &str, ours: String, theirs: String| {
            Err(format!(
                "{flag}: this server was given {ours}, the client runs {theirs} (give the run \
                 flags to the client; the server follows it)"
            ))
        };
        let on = |b: bool| if b { "it" } else { "none" }.to_string();
        if let Some(q) = self.qps.filter(|&q| q != c.qps) {
            return differ("-q", q.to_string(), c.qps.to_string());
        }
        if let Some(t) = self.tx_depth.filter(|&t| t != c.tx_depth) {
            return differ("-t", t.to_string(), c.tx_depth.to_string());
        }
        if let Some(i) = self.inline.filter(|&i| i != c.inline) {
            return differ("-I", i.to_string(), c.inline.to_string());
        }
        let name = |cas: bool| if cas { "CMP_AND_SWAP" } else { "FETCH_AND_ADD" }.to_string();
        let cas = c.flags & FLAG_CMP_SWAP != 0;
        if let Some(x) = self.cmp_swap.filter(|&x| x != cas) {
            return differ("-A", name(x), name(cas));
        }
        for (set, bit, flag) in [
            (self.bidir, FLAG_BIDIR, "-b"),
            (self.imm, FLAG_IMM, "--write_with_imm"),
            (self.verify, FLAG_VERIFY, "--verify"),
        ] {
            if set && c.flags & bit == 0 {
                return differ(flag, on(true), on(false));
            }
        }
        let Some(shape) = c.shape else {
            return Ok(());
        };
        let sizes = |size: u64| match size {
            0 => "-a (every size)".to_string(),
            s => format!("-s {s}"),
        };
        if self.all && shape.size != 0 {
            return differ("-a", "it".into(), sizes(shape.size));
        }
        if let Some(s) = self.size.filter(|&s| s != shape.size) {
            return differ("-s", s.to_string(), sizes(shape.size));
        }
        let runs = |sh: &crate::wire::RunShape| match sh.duration_ns {
            0 => format!("{} iterations", sh.iters),
            ns => format!("{} s a size", ns as f64 / 1e9),
        };
        if let Some(n) = self
            .iters
            .filter(|&n| shape.duration_ns != 0 || n != shape.iters)
        {
            return differ("-n", n.to_string(), runs(&shape));
        }
        if let Some(d) = self.duration_ns.filter(|&d| d != shape.duration_ns) {
            return differ("-D", format!("{} s", d as f64 / 1e9), runs(&shape));
        }
        Ok(())
    }
}

/// The one RDMA device a Warpcore process has (`-d`).
pub const DEVICE_NAME: &str = "warpcore0";

impl Cli {
    /// Notes which run flags with a default the command line gave (`matches` is what
    /// parsed it).
    pub fn note_given(&mut self, matches: &clap::ArgMatches) {
        let given =
            |id: &str| matches.value_source(id) == Some(clap::parser::ValueSource::CommandLine);
        self.given = Given {
            qps: given("qps"),
            inline_size: given("inline_size"),
            atomic_type: given("atomic_type"),
        };
    }

    /// The run this process's own flags describe, for it as a server to hold its clients'
    /// runs to.
    pub fn server_run(&self) -> ServerRun {
        ServerRun {
            size: self.size,
            all: self.all,
            iters: self.iters,
            duration_ns: self
                .phase_duration()
                .map(|d| std::time::Duration::from_secs_f64(d).as_nanos() as u64),
            qps: self.given.qps.then_some(self.qps),
            tx_depth: self.tx_depth,
            inline: self.given.inline_size.then_some(self.inline_size),
            cmp_swap: self
                .given
                .atomic_type
                .then_some(self.atomic_type == AtomicType::CmpAndSwap),
            bidir: self.bidir,
            imm: self.write_with_imm,
            verify: self.verify,
        }
    }

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

    /// Who runs the engine: `--poll-mode`, else an engine thread with -e (the application
    /// thread sleeps), else the application thread (caller).
    pub fn poll_mode(&self) -> PollMode {
        self.poll_mode_arg.unwrap_or(if self.events {
            PollMode::Thread
        } else {
            PollMode::Caller
        })
    }

    /// Duration of each phase: -D, or 5 s with --run_infinitely (perftest's default).
    pub fn phase_duration(&self) -> Option<f64> {
        self.duration.or(self.run_infinitely.then_some(5.0))
    }

    /// The JSON report's path under --out_json.
    pub fn out_json_path(&self) -> Option<PathBuf> {
        self.out_json.then(|| {
            self.out_json_file
                .clone()
                .unwrap_or_else(|| PathBuf::from("perftest_out.json"))
        })
    }

    /// Refuses what cannot run, with the reason.
    pub fn validate(&self) -> Result<(), String> {
        self.validate_perftest_flags()?;
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
        // As perftest, which refuses -A outside ib_atomic_*: ignored, `write_bw -A
        // CMP_AND_SWAP` ran Writes and reported them as if an atomic were measured.
        if self.given.atomic_type && !self.test.is_atomic() {
            return Err(format!(
                "-A applies to atomic_lat and atomic_bw ({} runs no atomic)",
                self.test.name()
            ));
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
        if self.all && self.size.is_some() {
            return Err("-a runs every size from 2 B to 8 MiB: give -a or -s, not both".into());
        }
        if let Some(m) = self.margin {
            let Some(d) = self.duration else {
                return Err(format!(
                    "--margin {m}: margins apply to a run timed by -D (give -D, or drop \
                     --margin)"
                ));
            };
            // Taken and ignored before: only a bandwidth test by -D has perftest's window
            // (`main.rs` gives the phase no margin otherwise).
            if !self.test.is_bw() {
                return Err(format!(
                    "--margin {m}: margins apply to bandwidth tests (a latency test by time \
                     reports every round trip, from its HdrHistogram)"
                ));
            }
            if self.run_infinitely {
                return Err(format!(
                    "--margin {m}: not with --run_infinitely (each of its rows counts its \
                     whole period)"
                ));
            }
            if m > 0 && f64::from(m) * 2.0 >= d {
                return Err(format!(
                    "--margin {m}: two margins of {m} s leave nothing of -D {d} to count \
                     (give --margin below {}, or 0 for the whole run)",
                    (d / 2.0).ceil()
                ));
            }
        }
        if self.iters.is_some() && self.phase_duration().is_some() {
            return Err(
                "-n with -D or --run_infinitely: a timed run ignores iterations; give one".into(),
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
            // At least a nanosecond: the in-band exchange carries the duration in whole
            // nanoseconds, and 0 there means a run by iterations, so a shorter one reached
            // the server as a run it would hold the client's to by count.
            if !(1e-9..86400.0).contains(&d) {
                return Err(format!(
                    "-D {d}: duration must be at least 1e-9 (a nanosecond) and below 86400 s"
                ));
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

    /// perftest's own flags: each one that cannot apply says why.
    fn validate_perftest_flags(&self) -> Result<(), String> {
        if let Some(d) = &self.ib_dev {
            if d != DEVICE_NAME {
                return Err(format!(
                    "-d {d}: no such device; this process has one RDMA device, {DEVICE_NAME} \
                     (its port is chosen with --memif, --vdev or --pci)"
                ));
            }
        }
        if self.ib_port != 1 {
            return Err(format!(
                "-i {}: {DEVICE_NAME} has one port, 1",
                self.ib_port
            ));
        }
        if let Some(g) = self.gid_index {
            if g != 0 {
                return Err(format!(
                    "-x {g}: an iWARP port has one GID, index 0 (its IPv4 address)"
                ));
            }
        }
        if !self.connection.eq_ignore_ascii_case("RC") {
            return Err(format!(
                "-c {}: iWARP has reliable connected queue pairs only (RFC 5040): -c RC",
                self.connection
            ));
        }
        if self.events {
            if self.test.is_write() {
                return Err(
                    "-e: events are not available with RDMA Write tests (as perftest: the \
                     Write's target gets no completion to wake on)"
                        .into(),
                );
            }
            if self.duration.is_some() || self.run_infinitely {
                return Err(
                    "-e: not with -D or --run_infinitely (as perftest: a timed run polls)".into(),
                );
            }
            if self.poll_mode_arg == Some(PollMode::Caller) {
                return Err(
                    "-e sleeps on a completion channel, so an engine thread must run \
                            the engine: --poll-mode thread or busy, not caller"
                        .into(),
                );
            }
            if self.perftest {
                return Err(
                    "-e with --perftest: its exchange with perftest peers polls; \
                            events apply to runs between iwperf processes"
                        .into(),
                );
            }
        }
        if (self.report_histogram || self.report_unsorted || self.report_cycles)
            && self.test.is_bw()
        {
            return Err("-H, -U and -C apply to latency tests".into());
        }
        // As perftest ("NoPeak only valid for BW tests"): a latency table has no peak
        // column, and the flag was taken and ignored.
        if self.no_peak && !self.test.is_bw() {
            return Err(
                "-N applies to bandwidth tests (a latency table has no peak column)".into(),
            );
        }
        if (self.report_histogram || self.report_unsorted) && self.duration.is_some() {
            return Err(
                "-H and -U list every sample of a run by iterations (-n): a latency run by \
                 time (-D) keeps none, only its HdrHistogram"
                    .into(),
            );
        }
        if let Some(q) = self.cq_mod {
            if !self.test.is_bw() {
                return Err("-Q applies to bandwidth tests".into());
            }
            if q == 0 || q > self.tx_depth() {
                return Err(format!(
                    "-Q {q}: between 1 and the TX depth ({})",
                    self.tx_depth()
                ));
            }
            if q > 1 && self.test == TestName::AtomicBw && self.verify {
                return Err(
                    "-Q with --verify on atomic_bw: an unsignalled atomic has no \
                            completion to carry its original value"
                        .into(),
                );
            }
        }
        if let Some(l) = self.post_list {
            if !self.test.is_bw() {
                return Err("-l applies to bandwidth tests".into());
            }
            if l == 0 || l > self.tx_depth() {
                return Err(format!(
                    "-l {l}: between 1 and the TX depth ({})",
                    self.tx_depth()
                ));
            }
            if l > 1 && self.inline_size > 0 {
                return Err(
                    "-l with -I: inline posts copy their data one request at a time; \
                            post lists take registered memory"
                        .into(),
                );
            }
        }
        if let Some(o) = self.outs {
            if !(self.test.is_read() || self.test.is_atomic()) {
                return Err("-o applies to read and atomic tests".into());
            }
            if o == 0 || o > 0x3fff {
                return Err(format!("-o {o}: between 1 and 16383 (MPA IRD/ORD)"));
            }
        }
        if let Some(r) = self.rx_depth {
            if !(self.test.is_send() || self.write_with_imm) {
                return Err(
                    "-r applies to send tests and --write_with_imm (the tests that \
                            consume receives)"
                        .into(),
                );
            }
            if r == 0 || r > MAX_RX_DEPTH {
                return Err(format!(
                    "-r {r}: between 1 and {MAX_RX_DEPTH} (a queue pair's receive queue holds \
                     1024, four of them for iwperf's control messages)"
                ));
            }
            if self.server.is_none() && self.dev.loopback.is_none() {
                return Err(
                    "-r is the client's: its value sets both sides' receive queues \
                            (give it to the side with the server's address)"
                        .into(),
                );
            }
        }
        if self.run_infinitely {
            if !self.test.is_bw() {
                return Err("--run_infinitely applies to bandwidth tests".into());
            }
            if self.all {
                return Err("--run_infinitely runs one size: no -a".into());
            }
            if self.perftest {
                return Err("--run_infinitely with --perftest: it runs by iterations".into());
            }
            // The run ends only when the process is stopped, and the verdict and the report
            // files come after the last row: they were taken and never given.
            for (given, name) in [
                (self.verify, "--verify"),
                (self.json.is_some(), "--json"),
                (self.hdr_log.is_some(), "--hdr-log"),
                (self.out_json, "--out_json"),
            ] {
                if given {
                    return Err(format!(
                        "--run_infinitely with {name}: the run ends only when the process is \
                         stopped, and {name} reports after the last row (give -D or -n)"
                    ));
                }
            }
        }
        match self.output {
            Some(OutputKind::Latency) if self.test.is_bw() => {
                return Err("--output=latency applies to latency tests".into())
            }
            Some(OutputKind::Bandwidth | OutputKind::MessageRate) if !self.test.is_bw() => {
                return Err("--output=bandwidth and message_rate apply to bandwidth tests".into())
            }
            _ => {}
        }
        if self.out_json_file.is_some() && !self.out_json {
            return Err("--out_json_file names the file of --out_json: give --out_json".into());
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
        for (set, flag) in [
            (self.cq_mod.is_some(), "-Q"),
            (self.post_list.is_some(), "-l"),
            (self.outs.is_some(), "-o"),
            (self.rx_depth.is_some(), "-r"),
        ] {
            if set {
                return refuse(
                    flag,
                    "its queues follow perftest's defaults (64 Writes or Sends, 16 Reads in \
                     flight, one completion each)",
                );
            }
        }
        for (set, flag) in [
            (self.report_histogram, "-H"),
            (self.report_unsorted, "-U"),
            (self.report_cycles, "-C"),
            (self.output.is_some(), "--output"),
            (self.out_json, "--out_json"),
            (self.no_peak, "-N"),
        ] {
            if set {
                return refuse(flag, "it prints perftest's table only, in usec and MB/sec");
            }
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

    /// A server's own run flags: parsed as `main` parses them (with the matches), then held
    /// against a client's run. Each contradiction names the flag and both values; a flag
    /// not given follows the client; the same flags on both sides pass.
    #[test]
    fn a_server_refuses_a_client_whose_run_contradicts_its_own_flags() {
        use crate::wire::{RunShape, FLAG_BIDIR, FLAG_CMP_SWAP, FLAG_VERIFY};
        use clap::{CommandFactory, FromArgMatches};
        let server = |args: &[&str]| {
            let m = Cli::command()
                .try_get_matches_from([&["iwperf", "write_bw"][..], args].concat())
                .expect("parses");
            let mut c = Cli::from_arg_matches(&m).expect("parses");
            c.note_given(&m);
            c.server_run()
        };
        // The client: iwperf write_bw -s 65536 -n 5000 -q 1 -t 128, no flags.
        let client = ClientRun {
            qps: 1,
            tx_depth: 128,
            inline: 0,
            flags: 0,
            shape: Some(RunShape {
                size: 65536,
                iters: 5000,
                duration_ns: 0,
            }),
        };
        let refused = |args: &[&str], c: &ClientRun| server(args).check(c).unwrap_err();
        // Nothing given, or the client's own values given: it follows the client.
        assert_eq!(server(&[]).check(&client), Ok(()));
        let same = [
            "-s", "65536", "-n", "5000", "-q", "1", "-t", "128", "-I", "0",
        ];
        assert_eq!(server(&same).check(&client), Ok(()));
        for (args, want) in [
            (
                &["-s", "4096"][..],
                "-s: this server was given 4096, the client runs -s 65536",
            ),
            (
                &["-a"],
                "-a: this server was given it, the client runs -s 65536",
            ),
            (
                &["-n", "10"],
                "-n: this server was given 10, the client runs 5000 iterations",
            ),
            (
                &["-D", "2"],
                "-D: this server was given 2 s, the client runs 5000 iterations",
            ),
            (&["--run_infinitely"], "-D: this server was given 5 s"),
            (
                &["-q", "2"],
                "-q: this server was given 2, the client runs 1",
            ),
            (
                &["-t", "16"],
                "-t: this server was given 16, the client runs 128",
            ),
            (
                &["-I", "64"],
                "-I: this server was given 64, the client runs 0",
            ),
            (
                &["-b"],
                "-b: this server was given it, the client runs none",
            ),
            (
                &["--write_with_imm"],
                "--write_with_imm: this server was given it",
            ),
            (&["--verify"], "--verify: this server was given it"),
            (
                &["-A", "CMP_AND_SWAP"],
                "-A: this server was given CMP_AND_SWAP, the client runs FETCH_AND_ADD",
            ),
        ] {
            let e = refused(args, &client);
            assert!(e.starts_with(want), "{args:?}: {e}");
        }
        // -q 1 given explicitly is held to a client's -q 2 as well.
        let two = ClientRun { qps: 2, ..client };
        assert!(refused(&["-q", "1"], &two)
            .starts_with("-q: this server was given 1, the client runs 2"));
        // The client's -a, and a timed client.
        let all = ClientRun {
            shape: Some(RunShape {
                size: 0,
                ..client.shape.unwrap()
            }),
            ..client
        };
        assert!(refused(&["-s", "65536"], &all)
            .starts_with("-s: this server was given 65536, the client runs -a"));
        assert_eq!(server(&["-a"]).check(&all), Ok(()));
        let timed = ClientRun {
            shape: Some(RunShape {
                size: 65536,
                iters: 0,
                duration_ns: 2_000_000_000,
            }),
            ..client
        };
        assert_eq!(server(&["-D", "2"]).check(&timed), Ok(()));
        assert!(refused(&["-n", "5000"], &timed)
            .starts_with("-n: this server was given 5000, the client runs 2 s a size"));
        // Flags the client has and the server does not give: followed.
        let flagged = ClientRun {
            flags: FLAG_BIDIR | FLAG_VERIFY | FLAG_CMP_SWAP,
            ..client
        };
        assert_eq!(server(&[]).check(&flagged), Ok(()));
        assert_eq!(
            server(&["-b", "--verify", "-A", "CMP_AND_SWAP"]).check(&flagged),
            Ok(())
        );
        // A client that sends no run shape (an older iwperf): its hello alone is checked.
        let old = ClientRun {
            shape: None,
            ..client
        };
        assert_eq!(server(&["-s", "4096"]).check(&old), Ok(()));
        assert!(refused(&["-t", "16"], &old).starts_with("-t:"));
    }

    /// `-a` with `-s` ran every size and dropped `-s`; `-n` with a timed run (`-D`,
    /// `--run_infinitely`) dropped `-n`: both are refused, naming the conflict.
    #[test]
    fn conflicting_size_and_length_flags_are_refused() {
        let validate = |args: &[&str]| {
            Cli::try_parse_from([&["iwperf", "write_bw", "--loopback=link"][..], args].concat())
                .unwrap()
                .validate()
        };
        let e = validate(&["-a", "-s", "4096"]).unwrap_err();
        assert!(e.contains("give -a or -s, not both"), "{e}");
        for timed in [&["-D", "1"][..], &["--run_infinitely"]] {
            let e = validate(&[timed, &["-n", "100"]].concat()).unwrap_err();
            assert!(e.contains("-n with -D or --run_infinitely"), "{e}");
        }
        assert!(validate(&["-a"]).is_ok());
        assert!(validate(&["-D", "1"]).is_ok());
        assert!(validate(&["-s", "4096", "-n", "100"]).is_ok());
    }

    /// `-A` outside the atomic tests was taken and ignored: `write_bw -A CMP_AND_SWAP` ran
    /// Writes and exited 0, where docs/iwperf.md promises that a perftest flag that cannot
    /// apply is refused (exit 2, the reason named) and perftest itself refuses `-A` outside
    /// `ib_atomic_*`. Parsed as `main` parses (the matches say whether `-A` was given, its
    /// default being FETCH_AND_ADD).
    #[test]
    fn atomic_type_outside_the_atomic_tests_is_refused() {
        use clap::{CommandFactory, FromArgMatches};
        let validate = |args: &[&str]| {
            let m = Cli::command()
                .try_get_matches_from([&["iwperf"][..], args, &["--loopback=link"]].concat())
                .expect("parses");
            let mut c = Cli::from_arg_matches(&m).expect("parses");
            c.note_given(&m);
            c.validate()
        };
        for test in [
            "write_bw",
            "write_lat",
            "read_bw",
            "read_lat",
            "send_bw",
            "send_lat",
        ] {
            for a in ["CMP_AND_SWAP", "FETCH_AND_ADD"] {
                let e = validate(&[test, "-A", a]).unwrap_err();
                assert!(
                    e.contains("-A applies to atomic_lat and atomic_bw"),
                    "{test}: {e}"
                );
            }
            assert!(validate(&[test]).is_ok(), "{test} without -A");
        }
        for test in ["atomic_bw", "atomic_lat"] {
            assert!(validate(&[test, "-A", "CMP_AND_SWAP"]).is_ok(), "{test}");
            assert!(validate(&[test]).is_ok(), "{test}");
        }
    }

    /// `-N` in a latency test was taken and ignored (a latency table has no peak column),
    /// where perftest refuses it ("NoPeak only valid for BW tests") and docs/iwperf.md
    /// promises that a perftest flag that cannot apply is refused.
    #[test]
    fn no_peak_in_a_latency_test_is_refused() {
        let validate = |args: &[&str]| {
            Cli::try_parse_from([&["iwperf"][..], args, &["--loopback=link"]].concat())
                .unwrap()
                .validate()
        };
        for test in ["write_lat", "read_lat", "send_lat", "atomic_lat"] {
            let e = validate(&[test, "-N"]).unwrap_err();
            assert!(e.contains("-N applies to bandwidth tests"), "{test}: {e}");
        }
        for test in ["write_bw", "read_bw", "send_bw", "atomic_bw"] {
            assert!(validate(&[test, "-N"]).is_ok(), "{test}");
        }
    }

    /// `--margin` applies to -D only, and two margins must leave something to count.
    #[test]
    fn a_margin_needs_a_timed_run_with_room_for_it() {
        let validate = |args: &[&str]| {
            Cli::try_parse_from([&["iwperf", "write_bw", "--loopback=link"][..], args].concat())
                .unwrap()
                .validate()
        };
        let e = validate(&["--margin", "1"]).unwrap_err();
        assert!(
            e.contains("--margin 1: margins apply to a run timed by -D"),
            "{e}"
        );
        let e = validate(&["-D", "4", "--margin", "2"]).unwrap_err();
        assert!(e.contains("leave nothing of -D 4"), "{e}");
        assert!(validate(&["-D", "4", "--margin", "1"]).is_ok());
        assert!(validate(&["-D", "1", "--margin", "0"]).is_ok());
    }

    /// `--margin` was taken and ignored where no margin applies: a latency test by time
    /// reports every round trip (its row comes from the run's HdrHistogram), and
    /// `--run_infinitely`'s rows count their whole period, so `write_lat -D 10 --margin 2`
    /// printed figures over the whole run that read as the window asked for. Refused,
    /// naming why.
    #[test]
    fn margin_is_refused_where_no_margin_applies() {
        let validate = |args: &[&str]| {
            Cli::try_parse_from([&["iwperf"][..], args, &["--loopback=link"]].concat())
                .unwrap()
                .validate()
        };
        for test in ["write_lat", "read_lat", "send_lat", "atomic_lat"] {
            let e = validate(&[test, "-D", "10", "--margin", "2"]).unwrap_err();
            assert!(
                e.contains("--margin 2: margins apply to bandwidth tests"),
                "{test}: {e}"
            );
        }
        let e =
            validate(&["write_bw", "--run_infinitely", "-D", "10", "--margin", "2"]).unwrap_err();
        assert!(e.contains("--run_infinitely"), "{e}");
        assert!(validate(&["write_bw", "-D", "10", "--margin", "2"]).is_ok());
        assert!(validate(&["write_bw", "--run_infinitely", "-D", "10"]).is_ok());
    }

    /// `--run_infinitely` runs until the process is stopped, and the verify verdict and
    /// the report files are made once the run is over: `--verify` (a mismatch was counted
    /// and never reported: rows kept coming and no `verify: FAILED` ever), `--json`,
    /// `--hdr-log` and `--out_json` were taken and nothing came of them. Refused, naming
    /// why.
    #[test]
    fn run_infinitely_refuses_what_only_an_ended_run_gives() {
        let validate = |args: &[&str]| {
            Cli::try_parse_from(
                [
                    &["iwperf", "write_bw", "--loopback=link", "--run_infinitely"][..],
                    args,
                ]
                .concat(),
            )
            .unwrap()
            .validate()
        };
        for (args, name) in [
            (&["--verify"][..], "--verify"),
            (&["--json", "/tmp/x.json"], "--json"),
            (&["--hdr-log", "/tmp/x.hlog"], "--hdr-log"),
            (&["--out_json"], "--out_json"),
        ] {
            let e = validate(args).unwrap_err();
            assert!(
                e.contains(&format!("--run_infinitely with {name}")),
                "{args:?}: {e}"
            );
        }
        assert!(validate(&[]).is_ok());
    }

    /// A `-D` under a nanosecond went on the wire as 0 ns, which the server reads as a run
    /// by iterations: refused, naming the bound.
    #[test]
    fn a_duration_under_a_nanosecond_is_refused() {
        let validate = |d: &str| {
            Cli::try_parse_from(["iwperf", "write_bw", "--loopback=link", &format!("-D={d}")])
                .unwrap()
                .validate()
        };
        for d in ["1e-12", "0", "-1", "86400", "NaN"] {
            let e = validate(d).unwrap_err();
            assert!(e.contains("at least 1e-9"), "{d}: {e}");
        }
        assert!(validate("1e-9").is_ok());
        assert!(validate("86399").is_ok());
    }

    /// `--timeout 0` left a loopback run waiting forever: a timeout is at least a second.
    #[test]
    fn a_zero_timeout_is_refused() {
        let e = Cli::try_parse_from(["iwperf", "write_lat", "--loopback=link", "--timeout", "0"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--timeout"), "{e}");
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
