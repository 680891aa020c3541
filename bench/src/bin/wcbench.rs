//! `wcbench`: the helper of `bench/compare.sh`: the bounds iwperf is compared with, and the
//! report's plot.
//!
//! * `copy`: single-core `memcpy` and `crc32c` throughput for given sizes;
//! * `raw`: a raw DPDK packet ping-pong and a packet blast over any vdev (net_memif between
//!   two processes in the comparison): no TCP, no iWARP, the floor under iwperf's figures;
//! * `plot`: latency percentile curves (PNG) from HdrHistogram interval logs.
#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

use clap::{Parser, Subcommand, ValueEnum};
use hdrhistogram::Histogram;

#[derive(Parser, Debug)]
#[command(name = "wcbench")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// memcpy and crc32c throughput on one core.
    Copy {
        /// Sizes in bytes, comma separated.
        #[arg(long, default_value = "64,65536")]
        sizes: String,
        /// Seconds per measurement.
        #[arg(long, default_value_t = 0.5)]
        secs: f64,
    },
    /// Raw Ethernet frames over a DPDK port: ping-pong or blast.
    Raw {
        /// `echo` (answer every frame, count blasts) or `pingpong` / `blast` (drive).
        #[arg(long, value_enum)]
        mode: RawMode,
        /// The port: --vdev (e.g. net_memif0,role=server,socket=/tmp/x.sock,
        /// socket-abstract=no), --memif, --pci, --eal, --cores (default: CPU 0 for echo,
        /// 1 for the driver, so the two busy-polling processes never share one), --mtu.
        #[cfg(feature = "dpdk")]
        #[command(flatten)]
        dev: warpcore_apps::device::DeviceArgs,
        /// Frame size in bytes (with the Ethernet header, without FCS).
        #[arg(long, default_value_t = 64)]
        size: usize,
        /// Frames.
        #[arg(long, default_value_t = 100_000)]
        count: u64,
        /// HdrHistogram interval log of the half round trips (pingpong).
        #[arg(long)]
        hdr_log: Option<String>,
        /// Blast only: write each frame's payload as an iWARP sender must, from a source of
        /// this many MiB taken in turn (iwperf's write_bw sends from 128 slots of 64 KiB, 8
        /// MiB), copied with its Internet checksum and CRC32c in one pass (the engine's
        /// `copy_sum_crc_slices`), the CRC over the framing header first and stored at the
        /// frame's end: the bound of a sender that does only the payload work the protocol
        /// cannot avoid, no TCP or MPA bookkeeping. Without it every frame is one buffer
        /// copied (the plain raw blast).
        #[arg(long)]
        payload_pass_mib: Option<usize>,
    },
    /// Latency percentile curves from HdrHistogram interval logs: LABEL=FILE ...
    Plot {
        /// Output PNG.
        #[arg(long)]
        out: String,
        /// Title.
        #[arg(long, default_value = "Latency by percentile")]
        title: String,
        /// LABEL=FILE pairs.
        series: Vec<String>,
    },
}

/// `raw`'s side: checked by clap before the port opens (a misspelt mode waited 30 s for a
/// link and then named the link, not the mode).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum RawMode {
    Echo,
    Pingpong,
    Blast,
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("bounds")
}

/// The sizes of `--sizes`: each a whole number of octets, at least one (a size of 0
/// copied nothing and printed 0.00 Gbit/s as its figure).
fn parse_sizes(sizes: &str) -> Result<Vec<usize>, String> {
    sizes
        .split(',')
        .map(|s| match s.parse() {
            Ok(0) => Err("--sizes: 0 octets is no size to copy".to_string()),
            Ok(n) => Ok(n),
            Err(_) => Err(format!("--sizes: {s:?} is not a size in octets")),
        })
        .collect()
}

/// `--secs`: a positive, finite time. 0, a negative or NaN measured nothing and printed
/// 0.00 Gbit/s as the bound.
fn check_secs(secs: f64) -> Result<f64, String> {
    if secs.is_finite() && secs > 0.0 {
        Ok(secs)
    } else {
        Err(format!(
            "--secs {secs}: a measurement takes a positive time"
        ))
    }
}

/// `--count`: at least one frame. `--count 0` printed a ping-pong median of 0.00 us over
/// no samples and a blast of 0 Gbit/s, and exited 0.
#[cfg_attr(not(feature = "dpdk"), allow(dead_code))]
fn check_count(count: u64) -> Result<u64, String> {
    if count == 0 {
        return Err("--count 0: nothing to measure".into());
    }
    Ok(count)
}

/// The raw frame's length: `--size` itself, which the figures count. A frame shorter
/// than Ethernet's 60 octets (without FCS) was padded to 60 and its rate still counted at
/// `--size` octets a frame (`--size 14`: 2.06 Gbit/s for frames that carried 8.8).
#[cfg_attr(not(feature = "dpdk"), allow(dead_code))]
fn frame_len(size: usize) -> Result<usize, String> {
    if size < 60 {
        return Err(format!(
            "--size {size}: a frame is at least 60 octets (Ethernet's minimum without FCS)"
        ));
    }
    Ok(size)
}

fn copy(sizes: &str, secs: f64) -> Result<(), String> {
    let secs = check_secs(secs)?;
    for size in parse_sizes(sizes)? {
        let src = vec![0x5au8; size];
        let mut dst = vec![0u8; size];
        let (mut n, t0) = (0u64, Instant::now());
        while t0.elapsed().as_secs_f64() < secs {
            for _ in 0..64 {
                dst.copy_from_slice(std::hint::black_box(&src));
                std::hint::black_box(&mut dst);
            }
            n += 64;
        }
        let mc = (n * size as u64) as f64 / t0.elapsed().as_secs_f64();
        let (mut n, t0, mut acc) = (0u64, Instant::now(), 0u32);
        while t0.elapsed().as_secs_f64() < secs {
            for _ in 0..64 {
                acc ^= crc32c::crc32c(std::hint::black_box(&src));
            }
            n += 64;
        }
        std::hint::black_box(acc);
        let cr = (n * size as u64) as f64 / t0.elapsed().as_secs_f64();
        println!(
            "RESULT copy size={size} memcpy_gbps={:.2} crc32c_gbps={:.2}",
            mc * 8.0 / 1e9,
            cr * 8.0 / 1e9
        );
    }
    Ok(())
}

#[cfg(feature = "dpdk")]
fn raw(
    mode: RawMode,
    dev: &warpcore_apps::device::DeviceArgs,
    size: usize,
    count: u64,
    hdr_log: Option<&str>,
    payload_pass_mib: Option<usize>,
) -> Result<(), String> {
    use warpcore_apps::device::{CpuList, MemifRole, OpenedPort};
    use warpcore_dpdk_sys::{Mbuf, PortConfig};
    let len = frame_len(size)?;
    let count = check_count(count)?;
    let mut source = PayloadSource::new(mode, len, payload_pass_mib)?;
    // One CPU each, so that the two busy-polling processes never share one.
    let mut dev = dev.clone();
    let role = if mode == RawMode::Echo {
        MemifRole::Server
    } else {
        MemifRole::Client
    };
    dev.cores
        .get_or_insert(CpuList(vec![usize::from(role == MemifRole::Client)]));
    let OpenedPort { mut port, pool, .. } =
        dev.open_port("wcbench", role).map_err(|e| e.to_string())?;
    let pc = PortConfig {
        mtu: dev.mtu,
        ..PortConfig::default()
    };
    port.configure(&pc, &pool).map_err(|e| e.to_string())?;
    port.start().map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    while !port.link_status().map(|l| l.up).unwrap_or(false) {
        if t0.elapsed() > Duration::from_secs(30) {
            return Err("link down after 30 s".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut rx = port.rx_queue(0).map_err(|e| e.to_string())?;
    let mut tx = port.tx_queue(0).map_err(|e| e.to_string())?;
    let mut frame = vec![0u8; len];
    frame[..6].copy_from_slice(&[0xff; 6]);
    frame[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 9]);
    frame[12..14].copy_from_slice(&[0x88, 0xb5]); // IEEE local experimental EtherType
    let mut inb: Vec<Mbuf> = Vec::with_capacity(64);
    let mut out: Vec<Mbuf> = Vec::with_capacity(64);
    let send = |tx: &mut warpcore_dpdk_sys::TxQueue, out: &mut Vec<Mbuf>| {
        // Nothing to send: no call into the driver (net_memif's tx_burst reads the ring
        // the peer writes, on every call).
        if out.is_empty() {
            return;
        }
        // The clock is read only when the ring refuses frames: a read on every send was
        // part of every round trip the ping-pong measures.
        tx.tx_burst(out);
        if out.is_empty() {
            return;
        }
        let t0 = Instant::now();
        while !out.is_empty() && t0.elapsed() < Duration::from_secs(2) {
            tx.tx_burst(out);
        }
        if !out.is_empty() {
            eprintln!("wcbench: tx ring refuses frames");
            out.clear();
        }
    };
    match mode {
        RawMode::Echo => {
            // Echo ping-pong frames (first octet of the payload 1), count blast frames (2),
            // and answer a blast's end marker (3) with the count.
            let (mut blast, mut first, mut last) = (0u64, None::<Instant>, Instant::now());
            let mut idle = Instant::now();
            let mut seen_any = false;
            let mut spins = 0u32;
            loop {
                inb.clear();
                if rx.rx_burst(&mut inb, 32) == 0 {
                    // Every 4,096 empty polls: a clock read on each would delay the
                    // ping-pong's echo by up to one read.
                    spins = spins.wrapping_add(1);
                    if seen_any
                        && spins.is_multiple_of(4096)
                        && idle.elapsed() > Duration::from_secs(10)
                    {
                        return Err("the driver went quiet for 10 s".into());
                    }
                    continue;
                }
                seen_any = true;
                // One clock read a burst, not one a frame: the echo side is the blast's
                // receiver, which bounds it at MTU 1500, and a read per frame took ~26 of
                // its ~160 ns a frame (docs/iwperf.md).
                let now = Instant::now();
                idle = now;
                for m in inb.drain(..) {
                    match m.data().get(14).copied() {
                        Some(1) => out.push(m),
                        Some(2) => {
                            blast += 1;
                            first.get_or_insert(now);
                            last = now;
                        }
                        Some(3) => {
                            let secs = first.map(|f| (last - f).as_secs_f64()).unwrap_or(0.0);
                            let mut r = frame.clone();
                            r[14] = 3;
                            r[15..23].copy_from_slice(&blast.to_be_bytes());
                            r[23..31].copy_from_slice(&secs.to_bits().to_be_bytes());
                            out.push(Mbuf::from_slice(&pool, &r).ok_or("pool empty")?);
                            send(&mut tx, &mut out);
                            // The report sits in the ring this process shares with the
                            // driver: exiting now takes the ring down with the link, and a
                            // driver not scheduled in between never reads it ("the echo
                            // side did not report"). Wait for the driver to go first (the
                            // link drops when it closes its port), at most 5 s.
                            let tw = Instant::now();
                            while tw.elapsed() < Duration::from_secs(5)
                                && port.link_status().map(|l| l.up).unwrap_or(false)
                            {
                                std::thread::sleep(Duration::from_millis(1));
                            }
                            return Ok(());
                        }
                        _ => {}
                    }
                }
                send(&mut tx, &mut out);
            }
        }
        RawMode::Pingpong => {
            frame[14] = 1;
            let mut h = hist();
            let mut intervals: Vec<(Duration, Duration, Histogram<u64>)> = Vec::new();
            let (mut ih, mut istart) = (hist(), Instant::now());
            let start = Instant::now();
            let warm = count / 10;
            for i in 0..count + warm {
                let t = Instant::now();
                out.push(Mbuf::from_slice(&pool, &frame).ok_or("pool empty")?);
                send(&mut tx, &mut out);
                inb.clear();
                // The timeout is checked every 4,096 empty polls, from the round trip's
                // start: a clock read before the wait and on every poll would be measured
                // as part of the round trip.
                let mut spins = 0u32;
                while rx.rx_burst(&mut inb, 1) == 0 {
                    spins = spins.wrapping_add(1);
                    if spins.is_multiple_of(4096) && t.elapsed() > Duration::from_secs(5) {
                        return Err("no echo for 5 s: is the echo side running?".into());
                    }
                }
                let half = t.elapsed().as_nanos() as u64 / 2;
                if i >= warm {
                    let _ = h.record(half.max(1));
                    let _ = ih.record(half.max(1));
                }
                if istart.elapsed() > Duration::from_secs(1) {
                    intervals.push((
                        istart - start,
                        istart.elapsed(),
                        std::mem::replace(&mut ih, hist()),
                    ));
                    istart = Instant::now();
                }
            }
            intervals.push((istart - start, istart.elapsed(), ih));
            let q = |p: f64| h.value_at_quantile(p) as f64 / 1000.0;
            println!(
                "RESULT raw_pingpong size={size} half_rtt_p50_us={:.2} p99_us={:.2} p999_us={:.2} samples={}",
                q(0.5), q(0.99), q(0.999), h.len()
            );
            // Tell the echo side to finish, and wait for its answer: a frame still in the
            // ring when this process exits would be lost with the memif link.
            let mut end = frame.clone();
            end[14] = 3;
            out.push(Mbuf::from_slice(&pool, &end).ok_or("pool empty")?);
            send(&mut tx, &mut out);
            let tw = Instant::now();
            while tw.elapsed() < Duration::from_secs(2) {
                inb.clear();
                rx.rx_burst(&mut inb, 32);
                if inb.iter().any(|m| m.data().get(14) == Some(&3)) {
                    break;
                }
            }
            if let Some(p) = hdr_log {
                write_log(p, &intervals)?;
            }
            Ok(())
        }
        RawMode::Blast => {
            frame[14] = 2;
            let t0 = Instant::now();
            let mut sent = 0u64;
            let (mut stalled, mut stall_t0) = (0u32, t0);
            while sent < count {
                while out.len() < 32 && sent + (out.len() as u64) < count {
                    let m = match &mut source {
                        None => Mbuf::from_slice(&pool, &frame),
                        Some(s) => Mbuf::alloc(&pool).and_then(|mut m| {
                            s.write(m.append(frame.len())?, &frame);
                            Some(m)
                        }),
                    };
                    match m {
                        Some(m) => out.push(m),
                        None => break,
                    }
                }
                let before = out.len();
                tx.tx_burst(&mut out);
                let took = (before - out.len()) as u64;
                sent += took;
                inb.clear();
                rx.rx_burst(&mut inb, 32);
                // A ring that takes nothing (or a pool with no mbuf for a frame) waited
                // here for ever: the clock is read every 4,096 bursts that moved nothing.
                if took > 0 {
                    stalled = 0;
                } else {
                    stalled = stalled.wrapping_add(1);
                    if stalled == 1 {
                        stall_t0 = Instant::now();
                    } else if stalled.is_multiple_of(4096)
                        && stall_t0.elapsed() > Duration::from_secs(5)
                    {
                        return Err(format!(
                            "the tx ring took no frame for 5 s ({sent} of {count} sent, {} \
                             queued): nothing more was measured",
                            out.len()
                        ));
                    }
                }
            }
            let send_secs = t0.elapsed().as_secs_f64();
            std::thread::sleep(Duration::from_millis(200));
            let mut end = frame.clone();
            end[14] = 3;
            out.push(Mbuf::from_slice(&pool, &end).ok_or("pool empty")?);
            send(&mut tx, &mut out);
            let tw = Instant::now();
            let mut bad_reports = 0u64;
            loop {
                inb.clear();
                rx.rx_burst(&mut inb, 32);
                // A frame marked as the report but too short to hold it (a foreign or
                // truncated frame) is counted and ignored: the wait goes on for the real one.
                let mut report = None;
                for m in inb.iter().filter(|m| m.data().get(14) == Some(&3)) {
                    match echo_report(m.data()) {
                        Some(r) => {
                            report = Some(r);
                            break;
                        }
                        None => bad_reports += 1,
                    }
                }
                if let Some((got, secs)) = report {
                    if bad_reports > 0 {
                        eprintln!("wcbench: ignored {bad_reports} short report frame(s)");
                    }
                    println!(
                        "{}",
                        blast_result(size, payload_pass_mib, sent, got, secs, send_secs)?
                    );
                    return Ok(());
                }
                if tw.elapsed() > Duration::from_secs(5) {
                    return Err(format!(
                        "the echo side did not report ({bad_reports} short report frame(s) \
                         ignored)"
                    ));
                }
            }
        }
    }
}

/// The echo side's report (frames received, seconds from its first to its last), from a
/// frame marked as a report (octet 14 = 3): the count at octets 15..23 and the seconds'
/// bits at 23..31, big-endian. None for a frame too short to hold them (a foreign or
/// truncated frame), which indexed past its end and panicked.
#[cfg_attr(not(feature = "dpdk"), allow(dead_code))]
fn echo_report(d: &[u8]) -> Option<(u64, f64)> {
    let got = u64::from_be_bytes(d.get(15..23)?.try_into().ok()?);
    let secs = f64::from_bits(u64::from_be_bytes(d.get(23..31)?.try_into().ok()?));
    Some((got, secs))
}

/// The blast's `RESULT` line from what the echo side reported: `got` frames received over
/// `secs` (its first to last frame; `send_secs`, the sending time, when it saw fewer than
/// two). A blast the echo side received none of measured nothing: it is an error, not a
/// rate of 0 (a run whose frames all went astray printed `received=0 mpps=0.000` and
/// exited 0, as iwperf's `nothing_measured` refuses for its tests).
#[cfg_attr(not(feature = "dpdk"), allow(dead_code))]
fn blast_result(
    size: usize,
    payload_pass_mib: Option<usize>,
    sent: u64,
    got: u64,
    secs: f64,
    send_secs: f64,
) -> Result<String, String> {
    if got == 0 {
        return Err(format!(
            "raw blast: the echo side received none of the {sent} frames sent: nothing was \
             measured"
        ));
    }
    let secs = if secs.is_finite() && secs > 0.0 {
        secs
    } else {
        send_secs
    };
    if !(secs.is_finite() && secs > 0.0) {
        return Err(format!(
            "raw blast: {got} frames received in no measurable time: no rate to report"
        ));
    }
    let pass = match payload_pass_mib {
        Some(mib) => format!(" payload_pass_mib={mib}"),
        None => String::new(),
    };
    Ok(format!(
        "RESULT raw_blast size={size}{pass} sent={sent} received={got} mpps={:.3} gbps={:.3}",
        got as f64 / secs / 1e6,
        (got * size as u64) as f64 * 8.0 / secs / 1e9
    ))
}

/// The octets of a frame before an FPDU's payload in iWARP over TCP/IPv4: Ethernet (14),
/// IPv4 (20), TCP without options (20), MPA's ULPDU_Length (2) and a tagged DDP header
/// (14). The 16 after the TCP header are under the CRC with the payload.
const IWARP_HEAD: usize = 70;
/// The frame's last octets: the MPA CRC.
const IWARP_CRC: usize = 4;

/// `--payload-pass-mib`'s source and where the next frame's payload starts in it.
#[cfg_attr(not(feature = "dpdk"), allow(dead_code))]
struct PayloadSource {
    octets: Vec<u8>,
    at: usize,
}

#[cfg_attr(not(feature = "dpdk"), allow(dead_code))]
impl PayloadSource {
    /// The source for a blast of `len`-octet frames, if `mib` asks for one: refused for
    /// another mode, for 0 MiB, and for frames with no payload after the headers.
    fn new(mode: RawMode, len: usize, mib: Option<usize>) -> Result<Option<Self>, String> {
        let Some(mib) = mib else {
            return Ok(None);
        };
        if mode != RawMode::Blast {
            return Err("--payload-pass-mib: only a blast writes payloads".into());
        }
        let payload = len.saturating_sub(IWARP_HEAD + IWARP_CRC);
        let size = mib
            .checked_mul(1 << 20)
            .filter(|&s| s > 0 && s <= 1 << 32)
            .ok_or_else(|| format!("--payload-pass-mib {mib}: a source of 1 to 4096 MiB"))?;
        if payload == 0 || payload > size {
            return Err(format!(
                "--payload-pass-mib: a {len}-octet frame has no room for a payload after \
                 {IWARP_HEAD} octets of headers and a {IWARP_CRC}-octet CRC"
            ));
        }
        // Not zeros: a page of zeros may be one shared page, always in cache.
        let octets = (0..size)
            .map(|i| (i.wrapping_mul(31) % 251) as u8)
            .collect();
        Ok(Some(PayloadSource { octets, at: 0 }))
    }

    /// Writes `frame`'s headers into `out` (as long as `frame`), then the payload from the
    /// source's next octets with its sum and CRC32c in one pass, the CRC (over the MPA and
    /// DDP header too) at the end and the folded sum into the TCP checksum field.
    fn write(&mut self, out: &mut [u8], frame: &[u8]) {
        let (head, rest) = out.split_at_mut(IWARP_HEAD);
        head.copy_from_slice(&frame[..IWARP_HEAD]);
        let n = rest.len() - IWARP_CRC;
        let (payload, crc_out) = rest.split_at_mut(n);
        if self.at + n > self.octets.len() {
            self.at = 0;
        }
        let crc0 = warpcore_engine::mem::crc::crc32c_append(0, &head[54..]);
        let (sum, crc) = warpcore_engine::mem::crc::copy_sum_crc_slices(
            &self.octets[self.at..self.at + n],
            payload,
            crc0,
        );
        self.at += n;
        crc_out.copy_from_slice(&crc.to_be_bytes());
        head[50..52].copy_from_slice(&warpcore_tcp::csum::finish(sum));
    }
}

#[cfg(not(feature = "dpdk"))]
fn raw(_: RawMode, _: usize, _: u64, _: Option<&str>, _: Option<usize>) -> Result<(), String> {
    Err("wcbench was built without DPDK".into())
}

#[cfg_attr(not(feature = "dpdk"), allow(dead_code))]
fn write_log(path: &str, intervals: &[(Duration, Duration, Histogram<u64>)]) -> Result<(), String> {
    use hdrhistogram::serialization::interval_log::IntervalLogWriterBuilder;
    use hdrhistogram::serialization::V2DeflateSerializer;
    let mut f = std::fs::File::create(path).map_err(|e| e.to_string())?;
    let mut ser = V2DeflateSerializer::new();
    let mut w = IntervalLogWriterBuilder::new()
        .with_base_time(std::time::SystemTime::now())
        .with_max_value_divisor(1000.0)
        .begin_log_with(&mut f, &mut ser)
        .map_err(|e| e.to_string())?;
    for (s, l, h) in intervals {
        if !h.is_empty() {
            w.write_histogram(h, *s, *l, None)
                .map_err(|e| format!("{e:?}"))?;
        }
    }
    Ok(())
}

fn read_log(path: &str) -> Result<Histogram<u64>, String> {
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    use hdrhistogram::serialization::Deserializer;
    let bytes = std::fs::read(path).map_err(|e| format!("{path}: {e}"))?;
    let mut total = hist();
    let mut de = Deserializer::new();
    // A line that does not parse ends the iterator: the log was cut short (its writer
    // stopped mid-line) or is not one. Skipping it plotted the intervals before it as the
    // whole run.
    for e in IntervalLogIterator::new(&bytes) {
        match e.map_err(|e| format!("{path}: not an interval log from there on: {e:?}"))? {
            LogEntry::Interval(iv) => {
                let raw = base64_decode(iv.encoded_histogram())?;
                let h: Histogram<u64> = de
                    .deserialize(&mut std::io::Cursor::new(raw))
                    .map_err(|e| format!("{path}: {e:?}"))?;
                total.add(&h).map_err(|e| format!("{e:?}"))?;
            }
            LogEntry::StartTime(_) | LogEntry::BaseTime(_) => {}
        }
    }
    Ok(total)
}

/// The histograms of the plot's `LABEL=FILE` series. A series without a sample is an
/// error: it was left out of the plot, whose legend then lacked the run that measured
/// nothing, and the report showed the other curves as the comparison.
fn series_histograms(series: &[String]) -> Result<Vec<(String, Histogram<u64>)>, String> {
    series
        .iter()
        .map(|s| {
            let (label, file) = s
                .split_once('=')
                .ok_or_else(|| format!("series {s:?} is not LABEL=FILE"))?;
            let h = read_log(file)?;
            if h.is_empty() {
                return Err(format!("series {label:?}: {file} holds no samples"));
            }
            Ok((label.to_string(), h))
        })
        .collect()
}

fn base64_decode(s: &str) -> Result<Vec<u8>, String> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for &c in s.as_bytes() {
        if c == b'=' {
            break;
        }
        let v = val(c).ok_or("bad base64")?;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Ok(out)
}

fn plot(out: &str, title: &str, series: &[String]) -> Result<(), String> {
    use plotters::prelude::*;
    let font = ["/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"]
        .iter()
        .find_map(|p| std::fs::read(p).ok())
        .ok_or("no DejaVuSans.ttf (apt install fonts-dejavu-core)")?;
    plotters::style::register_font(
        "sans-serif",
        FontStyle::Normal,
        Box::leak(font.into_boxed_slice()),
    )
    .map_err(|_| "font")?;
    // x: percentile as -log10(1 - p) (0 = p0, 1 = p90, 2 = p99, 3 = p99.9, 4 = p99.99).
    let mut curves = Vec::new();
    let mut ymax = 1.0f64;
    for (label, h) in series_histograms(series)? {
        let pts: Vec<(f64, f64)> = (0..=400)
            .map(|k| {
                let x = k as f64 / 100.0;
                let p = 1.0 - 10f64.powf(-x);
                (x, h.value_at_quantile(p) as f64 / 1000.0)
            })
            .collect();
        ymax = pts.iter().map(|p| p.1).fold(ymax, f64::max);
        curves.push((label, pts));
    }
    let root = BitMapBackend::new(out, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut c = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .margin_right(40)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..4f64, (0.01f64..ymax * 1.2).log_scale())
        .map_err(|e| e.to_string())?;
    c.configure_mesh()
        .x_desc("percentile")
        .y_desc("latency [usec] (log)")
        .x_labels(5)
        .x_label_formatter(&|x| match if (x - x.round()).abs() < 0.01 {
            x.round() as i32
        } else {
            -1
        } {
            0 => "p0".into(),
            1 => "p90".into(),
            2 => "p99".into(),
            3 => "p99.9".into(),
            4 => "p99.99".into(),
            _ => String::new(),
        })
        .label_style(("sans-serif", 14))
        .draw()
        .map_err(|e| e.to_string())?;
    let colors = [RED, BLUE, GREEN, MAGENTA, BLACK];
    for (i, (label, pts)) in curves.into_iter().enumerate() {
        let col = colors[i % colors.len()];
        c.draw_series(LineSeries::new(pts, col.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], col.stroke_width(2)));
    }
    c.configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let r = match &cli.cmd {
        Cmd::Copy { sizes, secs } => copy(sizes, *secs),
        #[cfg(feature = "dpdk")]
        Cmd::Raw {
            mode,
            dev,
            size,
            count,
            hdr_log,
            payload_pass_mib,
        } => raw(
            *mode,
            dev,
            *size,
            *count,
            hdr_log.as_deref(),
            *payload_pass_mib,
        ),
        #[cfg(not(feature = "dpdk"))]
        Cmd::Raw {
            mode,
            size,
            count,
            hdr_log,
            payload_pass_mib,
        } => raw(*mode, *size, *count, hdr_log.as_deref(), *payload_pass_mib),
        Cmd::Plot { out, title, series } => plot(out, title, series),
    };
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wcbench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report-marked frame shorter than the report (23 or 31 octets) is no report: it
    /// panicked at `d[15..23]`. A full one reads back what the echo side wrote.
    #[test]
    fn a_short_report_frame_is_no_report() {
        for len in [15, 16, 22, 23, 30] {
            let mut d = vec![0u8; len];
            d[14] = 3;
            assert_eq!(echo_report(&d), None, "{len} octets");
        }
        let mut d = vec![0u8; 60];
        d[14] = 3;
        d[15..23].copy_from_slice(&1234u64.to_be_bytes());
        d[23..31].copy_from_slice(&2.5f64.to_bits().to_be_bytes());
        assert_eq!(echo_report(&d), Some((1234, 2.5)));
    }

    /// `--payload-pass-mib` is refused where it would measure nothing it says: another
    /// mode, no source, a frame with no payload after the headers.
    #[test]
    fn the_payload_pass_is_refused_where_it_has_no_meaning() {
        assert!(PayloadSource::new(RawMode::Blast, 1514, None)
            .unwrap()
            .is_none());
        for mode in [RawMode::Echo, RawMode::Pingpong] {
            let e = PayloadSource::new(mode, 1514, Some(8)).err().unwrap();
            assert!(e.contains("only a blast"), "{e}");
        }
        let e = PayloadSource::new(RawMode::Blast, 1514, Some(0))
            .err()
            .unwrap();
        assert!(e.contains("--payload-pass-mib 0"), "{e}");
        let e = PayloadSource::new(RawMode::Blast, 74, Some(1))
            .err()
            .unwrap();
        assert!(e.contains("no room for a payload"), "{e}");
        assert!(PayloadSource::new(RawMode::Blast, 75, Some(1))
            .unwrap()
            .is_some());
    }

    /// Each frame carries the headers it was given, the source's next octets as its
    /// payload (wrapping at the source's end), a CRC32c over the MPA/DDP header and the
    /// payload at its end, and the payload's folded checksum: the work is done, not skipped.
    #[test]
    fn the_payload_pass_writes_payload_crc_and_checksum() {
        let mut src = PayloadSource::new(RawMode::Blast, 1514, Some(1))
            .unwrap()
            .unwrap();
        let mut frame = vec![0u8; 1514];
        frame[14] = 2;
        frame[60] = 0x77;
        let n = 1514 - IWARP_HEAD - IWARP_CRC;
        let frames = (1 << 20) / n + 2;
        let mut at = 0;
        for k in 0..frames {
            let mut out = vec![0xeeu8; 1514];
            src.write(&mut out, &frame);
            if at + n > 1 << 20 {
                at = 0;
            }
            assert_eq!(out[14], 2, "frame {k}: the blast's marker");
            assert_eq!(out[60], 0x77);
            assert_eq!(&out[IWARP_HEAD..1514 - IWARP_CRC], &src.octets[at..at + n]);
            let crc = crc32c::crc32c(&out[54..1514 - IWARP_CRC]);
            assert_eq!(out[1514 - IWARP_CRC..], crc.to_be_bytes(), "frame {k}");
            let mut sum: u64 = out[IWARP_HEAD..1514 - IWARP_CRC]
                .chunks(2)
                .map(|c| u64::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
                .sum();
            while sum >> 16 != 0 {
                sum = (sum & 0xffff) + (sum >> 16);
            }
            assert_eq!(out[50..52], (!(sum as u16)).to_be_bytes(), "frame {k}");
            at += n;
        }
    }

    /// `--size 14` sent 60-octet frames and reported their rate as 14 octets a frame.
    #[test]
    fn a_frame_below_60_octets_is_refused_not_padded() {
        assert!(frame_len(14).unwrap_err().contains("--size 14"));
        assert!(frame_len(59).is_err());
        assert_eq!(frame_len(60).unwrap(), 60);
        assert_eq!(frame_len(1514).unwrap(), 1514);
    }

    /// A size that does not parse is an error naming it, not a panic.
    #[test]
    fn copy_sizes_parse_or_name_the_bad_one() {
        assert_eq!(parse_sizes("64,65536").unwrap(), vec![64, 65536]);
        assert!(parse_sizes("64,6x4").unwrap_err().contains("\"6x4\""));
    }

    /// `copy --sizes 0` and `--secs 0` (or NaN) printed 0.00 Gbit/s as a bound; `raw
    /// --count 0` a ping-pong median of 0.00 us over no samples. Each is refused by name.
    #[test]
    fn figures_over_nothing_are_refused() {
        assert!(parse_sizes("64,0").unwrap_err().contains("0 octets"));
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(check_secs(bad).unwrap_err().contains("--secs"), "{bad}");
        }
        assert_eq!(check_secs(0.5).unwrap(), 0.5);
        assert!(check_count(0).unwrap_err().contains("--count 0"));
        assert_eq!(check_count(1).unwrap(), 1);
    }

    /// A blast the echo side received nothing of printed `received=0 mpps=0.000` and
    /// exited 0: now an error saying nothing was measured. A blast that did arrive is
    /// still reported, with the echo side's time or, without one, the sending time.
    #[test]
    fn a_blast_that_measured_nothing_is_an_error() {
        let e = blast_result(1514, None, 100_000, 0, 0.0, 0.5).unwrap_err();
        assert!(
            e.contains("nothing was measured") && e.contains("100000"),
            "{e}"
        );
        let e = blast_result(1514, None, 100_000, 0, 1.0, 0.5).unwrap_err();
        assert!(e.contains("nothing was measured"), "{e}");
        let e = blast_result(1514, None, 1, 1, 0.0, 0.0).unwrap_err();
        assert!(e.contains("no measurable time"), "{e}");
        let ok = blast_result(1000, Some(8), 10, 10, 1.0, 2.0).unwrap();
        assert!(
            ok.contains("payload_pass_mib=8 sent=10 received=10 mpps=0.000 gbps=0.000"),
            "{ok}"
        );
        let ok = blast_result(1000, None, 2_000_000, 1_000_000, f64::NAN, 2.0).unwrap();
        assert!(ok.contains("mpps=0.500 gbps=4.000"), "{ok}");
    }

    /// A misspelt `--mode` is refused before the port opens, naming the modes.
    #[test]
    fn an_unknown_raw_mode_is_refused_by_the_parser() {
        let e = Cli::try_parse_from(["wcbench", "raw", "--mode", "pingpnog"]).unwrap_err();
        let e = e.to_string();
        assert!(e.contains("pingpnog") && e.contains("pingpong"), "{e}");
        let ok = Cli::try_parse_from(["wcbench", "raw", "--mode", "blast"]).unwrap();
        assert!(matches!(
            ok.cmd,
            Cmd::Raw {
                mode: RawMode::Blast,
                ..
            }
        ));
    }

    fn log_with(dir: &std::path::Path, name: &str, values: &[&[u64]]) -> std::path::PathBuf {
        let intervals: Vec<_> = values
            .iter()
            .enumerate()
            .map(|(i, vs)| {
                let mut h = hist();
                for &v in vs.iter() {
                    h.record(v).unwrap();
                }
                (Duration::from_secs(i as u64), Duration::from_secs(1), h)
            })
            .collect();
        let p = dir.join(name);
        write_log(p.to_str().unwrap(), &intervals).unwrap();
        p
    }

    fn scratch(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("wcbench-test-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A log cut short in its last interval (its writer stopped mid-line) plotted the
    /// intervals before the cut as the whole run: the line that did not parse ended the
    /// reading without a word.
    #[test]
    fn a_log_cut_short_is_an_error_not_a_shorter_run() {
        let d = scratch("cut");
        let p = log_with(&d, "full.hlog", &[&[1000, 2000], &[3000, 4000, 5000]]);
        assert_eq!(read_log(p.to_str().unwrap()).unwrap().len(), 5);
        let text = std::fs::read_to_string(&p).unwrap();
        let cut = &text[..text.trim_end().len() - 10];
        let q = d.join("cut.hlog");
        std::fs::write(&q, cut).unwrap();
        let e = read_log(q.to_str().unwrap()).unwrap_err();
        assert!(e.contains("cut.hlog"), "{e}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// A series whose log holds no sample was left out of the plot: the legend lacked the
    /// run that measured nothing. It is an error naming the series.
    #[test]
    fn a_series_without_samples_is_an_error_not_left_out() {
        let d = scratch("empty");
        let full = log_with(&d, "full.hlog", &[&[1000]]);
        let empty = log_with(&d, "empty.hlog", &[]);
        let series = |p: &std::path::Path, l: &str| format!("{l}={}", p.display());
        let got = series_histograms(&[series(&full, "raw")]).unwrap();
        assert_eq!((got[0].0.as_str(), got[0].1.len()), ("raw", 1));
        let e = series_histograms(&[series(&empty, "iwperf"), series(&full, "raw")]).unwrap_err();
        assert!(e.contains("iwperf") && e.contains("no samples"), "{e}");
        assert!(series_histograms(&["no-equals-sign".into()]).is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
