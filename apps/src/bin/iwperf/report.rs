//! Output in perftest's layout (banner, table header and rows), then our HdrHistogram
//! percentile block; `--json` and `--hdr-log` files.

use std::io::Write;
use std::path::Path;

use crate::cli::{Cli, TestName};
use crate::tests::Outcome;

/// perftest's separator line.
pub const LINE: &str =
    "---------------------------------------------------------------------------------------";

/// What the banner shows about the connection.
#[derive(Debug, Clone)]
pub struct BannerInfo {
    /// Device name.
    pub device: String,
    /// IP MTU.
    pub mtu: usize,
    /// MPA: revisions, CRC, markers, IRD/ORD, p2p.
    pub mpa: String,
    /// Local address line.
    pub local: String,
    /// Remote address line.
    pub remote: String,
}

/// The banner, as perftest prints it (fields that do not apply to iWARP over DPDK are left
/// out; the MPA line is ours).
pub fn banner(cli: &Cli, b: &BannerInfo) -> String {
    let mut s = String::new();
    s += LINE;
    s += "\n";
    s += &format!("                    {}\n", cli.test.title());
    s += &format!(" Dual-port       : OFF\t\tDevice         : {}\n", b.device);
    s += &format!(" Number of qps   : {}\t\tTransport type : iWARP\n", cli.qps);
    s += " Connection type : RC\t\tUsing SRQ      : OFF\n";
    if cli.test.is_bw() && cli.bidir {
        s += " Bidirectional   : ON\n";
    }
    s += &format!(" TX depth        : {}\n", cli.tx_depth());
    if cli.test.is_bw() {
        s += &format!(" CQ Moderation   : {}\n", 1);
    }
    s += &format!(" Mtu             : {}[B]\n", b.mtu);
    s += " Link type       : Ethernet\n";
    s += &format!(" Max inline data : {}[B]\n", cli.inline_size);
    if cli.test.is_atomic() {
        let ty = match cli.atomic_type {
            crate::cli::AtomicType::FetchAndAdd => "FETCH_AND_ADD",
            crate::cli::AtomicType::CmpAndSwap => "CMP_AND_SWAP",
        };
        s += &format!(" Atomic type     : {ty}\n");
    }
    if cli.write_with_imm {
        s += " Write with imm  : ON\n";
    }
    s += &format!(
        " Poll mode       : {}\n",
        match cli.poll_mode {
            crate::cli::PollMode::Caller => "caller",
            crate::cli::PollMode::Busy => "busy",
            crate::cli::PollMode::Thread => "thread",
        }
    );
    s += " rdma_cm QPs\t : ON\n";
    s += " Data ex. method : rdma_cm\n";
    s += &format!(" MPA             : {}\n", b.mpa);
    if cli.verify {
        s += " Data verify     : ON\n";
    }
    s += LINE;
    s += "\n";
    s += &format!(" local address: {}\n", b.local);
    s += &format!(" remote address: {}\n", b.remote);
    s += LINE;
    s
}

/// perftest's latency table header.
pub const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";

/// perftest's bandwidth table header.
pub fn bw_header(gbits: bool) -> String {
    let u = if gbits { "Gb/sec" } else { "MB/sec" };
    format!(" #bytes     #iterations    BW peak[{u}]    BW average[{u}]   MsgRate[Mpps]")
}

/// Latency statistics in microseconds, computed perftest's way from the sorted samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatStats {
    /// Minimum.
    pub min: f64,
    /// Maximum.
    pub max: f64,
    /// Median ("typical").
    pub typical: f64,
    /// Mean.
    pub avg: f64,
    /// Standard deviation.
    pub stdev: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
}

/// Statistics of `samples_ns` (not empty).
pub fn lat_stats(samples_ns: &[u64]) -> LatStats {
    let mut v: Vec<u64> = samples_ns.to_vec();
    v.sort_unstable();
    let n = v.len().max(1);
    let us = |x: u64| x as f64 / 1000.0;
    let avg = v.iter().map(|&x| us(x)).sum::<f64>() / n as f64;
    let var = v.iter().map(|&x| (us(x) - avg).powi(2)).sum::<f64>() / n as f64;
    let pct = |p: f64| us(v[(((n as f64) * p).ceil() as usize).clamp(1, n) - 1]);
    LatStats {
        min: us(v[0]),
        max: us(v[n - 1]),
        typical: us(v[n / 2]),
        avg,
        stdev: var.sqrt(),
        p99: pct(0.99),
        p999: pct(0.999),
    }
}

/// One latency row.
pub fn lat_row(size: u64, iters: u64, s: &LatStats) -> String {
    format!(
        " {:<7} {:<7}          {:<7.2}        {:<7.2}      {:<7.2}          {:<7.2}        {:<7.2}        {:<7.2}                {:<7.2}",
        size, iters, s.min, s.max, s.typical, s.avg, s.stdev, s.p99, s.p999
    )
}

/// Bandwidth figures of an outcome: (peak, average) in the report's unit and Mpps.
pub fn bw_figures(o: &Outcome, gbits: bool) -> (f64, f64, f64, u64) {
    let (mut bytes, mut secs, mut peak, mut msgs) = (o.bytes as f64, o.secs, o.peak_bps, o.iters);
    let mut avg_bps = bytes / secs.max(1e-9);
    if let Some((pb, ps, pp, pm)) = o.peer {
        // Bidirectional: the sum of both directions, as perftest's -b reports.
        avg_bps += pb as f64 / ps.max(1e-9);
        peak += pp;
        msgs += pm;
        bytes += pb as f64;
        secs = secs.max(ps);
    }
    let _ = bytes;
    let unit = |bps: f64| {
        if gbits {
            bps * 8.0 / 1e9
        } else {
            bps / 1048576.0
        }
    };
    let rate = if o.peer.is_some() {
        (o.iters as f64 / o.secs.max(1e-9)
            + o.peer.map(|p| p.3 as f64 / p.1.max(1e-9)).unwrap_or(0.0))
            / 1e6
    } else {
        msgs as f64 / secs.max(1e-9) / 1e6
    };
    (unit(peak.max(avg_bps)), unit(avg_bps), rate, msgs)
}

/// One bandwidth row.
pub fn bw_row(o: &Outcome, gbits: bool) -> String {
    let (peak, avg, rate, msgs) = bw_figures(o, gbits);
    format!(
        " {:<7}    {:<7}          {:<7.2}            {:<7.2}\t\t   {:<7.6}",
        o.size, msgs, peak, avg, rate
    )
}

/// What each test's histogram holds.
pub fn hdr_what(t: TestName) -> &'static str {
    match t {
        TestName::WriteLat | TestName::SendLat => "half round trip",
        TestName::ReadLat => "round trip",
        _ => "post to completion per work request",
    }
}

/// Writes `--json`.
pub fn write_json(
    path: &Path,
    cli: &Cli,
    info: &BannerInfo,
    outs: &[Outcome],
) -> Result<(), String> {
    let results: Vec<serde_json::Value> = outs
        .iter()
        .map(|o| {
            let q = |p: f64| o.hist.value_at_quantile(p) as f64 / 1000.0;
            let mut v = serde_json::json!({
                "bytes": o.size,
                "iterations": o.iters,
                "verified": o.verified,
                "verify_errors": o.errors,
                "hdr_usec": {
                    "p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "p99_9": q(0.999),
                    "p99_99": q(0.9999), "max": o.hist.max() as f64 / 1000.0,
                    "count": o.hist.len(),
                },
            });
            if cli.test.is_bw() {
                let (peak, avg, rate, msgs) = bw_figures(o, cli.report_gbits);
                v["bw"] = serde_json::json!({
                    "unit": if cli.report_gbits { "Gb/sec" } else { "MB/sec" },
                    "peak": peak, "average": avg, "msg_rate_mpps": rate, "messages": msgs,
                    "seconds": o.secs,
                });
            } else if !o.samples.is_empty() {
                let s = lat_stats(&o.samples);
                v["lat_usec"] = serde_json::json!({
                    "t_min": s.min, "t_max": s.max, "t_typical": s.typical, "t_avg": s.avg,
                    "t_stdev": s.stdev, "p99": s.p99, "p99_9": s.p999,
                });
            }
            v
        })
        .collect();
    let doc = serde_json::json!({
        "tool": "iwperf",
        "version": env!("CARGO_PKG_VERSION"),
        "test": cli.test.name(),
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "device": info.device,
        "mtu": info.mtu,
        "mpa": info.mpa,
        "qps": cli.qps,
        "tx_depth": cli.tx_depth(),
        "bidirectional": cli.bidir,
        "verify": cli.verify,
        "results": results,
    });
    let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
    std::fs::write(path, text + "\n").map_err(|e| format!("--json {}: {e}", path.display()))
}

/// Writes `--hdr-log`: every interval of every size, tagged `<test>-<size>`.
pub fn write_hdr_log(path: &Path, cli: &Cli, outs: &[Outcome]) -> Result<(), String> {
    use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
    use hdrhistogram::serialization::V2DeflateSerializer;
    let err = |e: String| format!("--hdr-log {}: {e}", path.display());
    let mut f = std::fs::File::create(path).map_err(|e| err(e.to_string()))?;
    let mut ser = V2DeflateSerializer::new();
    let now = std::time::SystemTime::now();
    let mut w = IntervalLogWriterBuilder::new()
        .add_comment(&format!("iwperf {} (values in ns)", cli.test.name()))
        .with_base_time(now)
        .with_start_time(now)
        .with_max_value_divisor(1000.0)
        .begin_log_with(&mut f, &mut ser)
        .map_err(|e| err(e.to_string()))?;
    let mut offset = std::time::Duration::ZERO;
    for o in outs {
        let tag = format!("{}-{}", cli.test.name(), o.size);
        let mut end = offset;
        for iv in &o.intervals {
            w.write_histogram(&iv.hist, offset + iv.start, iv.len, Tag::new(&tag))
                .map_err(|e| err(format!("{e:?}")))?;
            end = end.max(offset + iv.start + iv.len);
        }
        offset = end;
    }
    drop(w);
    f.flush().map_err(|e| err(e.to_string()))
}
