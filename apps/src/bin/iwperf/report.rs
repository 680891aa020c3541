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
    if cli.events {
        s += &format!(
            " Test with events. Using {}_comp0\n",
            crate::cli::DEVICE_NAME
        );
    }
    s += &format!(
        " Dual-port       : OFF\t\tDevice         : {} ({})\n",
        crate::cli::DEVICE_NAME,
        b.device
    );
    s += &format!(" Number of qps   : {}\t\tTransport type : IW\n", cli.qps);
    s += " Connection type : RC\t\tUsing SRQ      : OFF\n";
    if cli.test.is_bw() && cli.bidir {
        s += " Bidirectional   : ON\n";
    }
    s += &format!(" TX depth        : {}\n", cli.tx_depth());
    if cli.test.is_bw() {
        s += &format!(" CQ Moderation   : {}\n", cli.cq_mod.unwrap_or(1));
    }
    if let Some(l) = cli.post_list.filter(|&l| l > 1) {
        s += &format!(" Post List       : {l}\n");
    }
    if let Some(r) = cli.rx_depth {
        s += &format!(" RX depth        : {r}\n");
    }
    if cli.test.is_read() || cli.test.is_atomic() {
        s += &format!(" Outstand reads  : {}\n", cli.outs.unwrap_or(16));
    }
    s += &format!(" Mtu             : {}[B]\n", b.mtu);
    s += " Link type       : Ethernet\n";
    if let Some(g) = cli.gid_index {
        s += &format!(" GID index       : {g}\n");
    }
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
        match cli.poll_mode() {
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

/// Latency statistics in microseconds, computed as perftest's `print_report_lat`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatStats {
    /// Smallest kept sample (`delta[0]`).
    pub min: f64,
    /// perftest's `t_max`: `delta[measure_cnt]` of the sorted samples, i.e. the second
    /// largest sample (the largest is one of the two dropped).
    pub max: f64,
    /// perftest's `t_typical`: its `get_median` over the kept samples.
    pub typical: f64,
    /// Mean of the kept samples.
    pub avg: f64,
    /// perftest's standard deviation over the kept samples (deviations truncated toward zero
    /// to whole microseconds before squaring, as its `int temp_var`).
    pub stdev: f64,
    /// `delta[ceil(measure_cnt * 0.99)]`.
    pub p99: f64,
    /// `delta[ceil(measure_cnt * 0.999)]`.
    pub p999: f64,
}

/// perftest's `LAT_MEASURE_TAIL`: the largest samples left out of every statistic (after
/// sorting, `measure_cnt` shrinks by this much; `t_max` and the percentiles may still index
/// up to `delta[measure_cnt]`, the second largest sample).
pub const LAT_MEASURE_TAIL: usize = 2;

/// How many samples make one printed unit: perftest halves the round trip of the ping-pong
/// tests (`rtt_factor` 2 for write_lat and send_lat) and prints the full round trip of
/// read_lat and atomic_lat (`rtt_factor` 1).
pub fn rtt_factor(t: TestName) -> u64 {
    match t {
        TestName::ReadLat | TestName::AtomicLat => 1,
        _ => 2,
    }
}

/// perftest's latency statistics (`print_report_lat` in linux-rdma/perftest
/// src/perftest_parameters.c), with nanoseconds in the place of its CPU cycles: sort the
/// samples (full intervals, ns), drop the [`LAT_MEASURE_TAIL`] largest, take `get_median`
/// (the mean of the two middle samples, in integer ns, when the kept count is even), the
/// mean and perftest's standard deviation over the kept ones, `t_max = delta[measure_cnt]`,
/// and the percentiles at `delta[ceil(measure_cnt * p)]`; every figure is divided by
/// 1000 * `rtt_factor` to print microseconds. `None` when fewer than
/// `LAT_MEASURE_TAIL + 1` samples leave nothing to keep (perftest would divide by zero).
pub fn lat_stats(samples_ns: &[u64], rtt_factor: u64) -> Option<LatStats> {
    lat_stats_in(samples_ns, rtt_factor, 1.0)
}

/// [`lat_stats`] in units of `per_us` per microsecond (-C: the CPU clock in MHz, so
/// cycles). Every statistic is computed in that unit, as perftest computes it in the unit
/// it prints: its standard deviation truncates each deviation to a whole unit (a whole
/// cycle with -C), so scaling microsecond figures afterwards would be wrong.
pub fn lat_stats_in(samples_ns: &[u64], rtt_factor: u64, per_us: f64) -> Option<LatStats> {
    let mut delta: Vec<u64> = samples_ns.to_vec();
    delta.sort_unstable();
    let measure_cnt = delta
        .len()
        .checked_sub(LAT_MEASURE_TAIL)
        .filter(|&m| m > 0)?;
    let quotient = 1000.0 * rtt_factor.max(1) as f64 / per_us;
    let us = |x: u64| x as f64 / quotient;
    // get_median: for an even count, the integer mean of the two middle samples.
    let median = if (measure_cnt - 1) % 2 != 0 {
        ((u128::from(delta[measure_cnt / 2]) + u128::from(delta[measure_cnt / 2 - 1])) / 2) as u64
    } else {
        delta[measure_cnt / 2]
    };
    let kept = &delta[..measure_cnt];
    let avg = kept.iter().map(|&x| us(x)).sum::<f64>() / measure_cnt as f64;
    // perftest: `int temp_var = average - delta/q; int pow_var = pow(temp_var, 2);`: the
    // deviation is truncated toward zero to whole microseconds.
    let var_sum = kept
        .iter()
        .map(|&x| {
            let d = (avg - us(x)).trunc();
            d * d
        })
        .sum::<f64>();
    let i99 = ((measure_cnt as f64) * 0.99).ceil() as usize;
    let i999 = ((measure_cnt as f64) * 0.999).ceil() as usize;
    Some(LatStats {
        min: us(delta[0]),
        max: us(delta[measure_cnt]),
        typical: us(median),
        avg,
        stdev: (var_sum / measure_cnt as f64).sqrt(),
        p99: us(delta[i99]),
        p999: us(delta[i999]),
    })
}

/// `--output=latency`'s line: the average, or `n/a` when there were too few samples (a
/// zero would read as a measured latency).
pub fn output_latency(s: Option<&LatStats>) -> String {
    s.map_or_else(|| "n/a".to_string(), |s| format!("{:.6}", s.avg))
}

/// One latency row (`n/a` in every column when there were too few samples).
pub fn lat_row(size: u64, iters: u64, s: Option<&LatStats>) -> String {
    match s {
        Some(s) => format!(
            " {:<7} {:<7}          {:<7.2}        {:<7.2}      {:<7.2}          {:<7.2}        {:<7.2}        {:<7.2}                {:<7.2}",
            size, iters, s.min, s.max, s.typical, s.avg, s.stdev, s.p99, s.p999
        ),
        None => format!(
            " {:<7} {:<7}          {:<7}        {:<7}      {:<7}          {:<7}        {:<7}        {:<7}                {:<7}",
            size, iters, "n/a", "n/a", "n/a", "n/a", "n/a", "n/a", "n/a"
        ),
    }
}

/// Shortest window iwperf measures bandwidth over for the peak.
pub const PEAK_WINDOW: std::time::Duration = std::time::Duration::from_millis(10);

/// The peak bandwidth of a transfer: the highest rate over consecutive windows of at least
/// [`PEAK_WINDOW`], each from the end of the previous one (the first from the phase start)
/// to the first observation at least a window later. A transfer shorter than one window has
/// no measured interval and so no peak.
#[derive(Debug, Clone)]
pub struct PeakMeter {
    window: std::time::Duration,
    last: (std::time::Duration, u64),
    peak: Option<f64>,
}

impl PeakMeter {
    /// A meter whose windows last at least `window`.
    pub fn new(window: std::time::Duration) -> Self {
        PeakMeter {
            window,
            last: (std::time::Duration::ZERO, 0),
            peak: None,
        }
    }

    /// The transfer has moved `bytes` in all by `at` (since the phase start): closes the
    /// current window if it is long enough.
    pub fn observe(&mut self, at: std::time::Duration, bytes: u64) {
        let dt = at.saturating_sub(self.last.0);
        if dt < self.window || dt.is_zero() {
            return;
        }
        let rate = bytes.saturating_sub(self.last.1) as f64 / dt.as_secs_f64();
        self.peak = Some(self.peak.map_or(rate, |p| p.max(rate)));
        self.last = (at, bytes);
    }

    /// The highest rate of a closed window, bytes per second.
    pub fn peak(&self) -> Option<f64> {
        self.peak
    }
}

/// perftest's margin of a `-D` run (`--margin`'s default, `duration / 4` in whole seconds as
/// perftest's `int`s): the figures count only what completed between `margin` after the
/// start and `margin` before the end (its `SAMPLE_STATE`), so that neither the ramp-up (TCP's
/// slow start) nor the drain weighs in. Below 4 s there is no margin: the whole run counts.
pub fn perftest_margin(duration_s: f64) -> std::time::Duration {
    std::time::Duration::from_secs(duration_s.max(0.0).trunc() as u64 / 4)
}

/// The window a timed bandwidth phase reports (perftest's `SAMPLE_STATE`): from the first
/// observation at least `margin` after the phase start to the first one at least `margin`
/// before its end, with the octets completed in between. Without a margin there is no
/// window and the whole phase counts.
#[derive(Debug, Clone)]
pub struct SampleWindow {
    from: std::time::Duration,
    to: std::time::Duration,
    start: Option<(std::time::Duration, u64)>,
    end: Option<(std::time::Duration, u64)>,
}

impl SampleWindow {
    /// The window of a phase of `duration` with `margin` at each end; `None` for a run by
    /// iterations or without a margin.
    pub fn new(
        duration: Option<std::time::Duration>,
        margin: std::time::Duration,
    ) -> Option<SampleWindow> {
        let d = duration?;
        (!margin.is_zero() && d > 2 * margin).then(|| SampleWindow {
            from: margin,
            to: d - margin,
            start: None,
            end: None,
        })
    }

    /// The phase has completed `bytes` in all by `at` (since its start).
    pub fn observe(&mut self, at: std::time::Duration, bytes: u64) {
        if self.start.is_none() && at >= self.from {
            self.start = Some((at, bytes));
        }
        if self.end.is_none() && at >= self.to {
            self.end = Some((at, bytes));
        }
    }

    /// Octets completed within the window and its length in seconds; `None` when the
    /// phase ended before the window closed (the whole phase counts then).
    pub fn figures(&self) -> Option<(u64, f64)> {
        let ((t0, b0), (t1, b1)) = (self.start?, self.end?);
        let secs = t1.saturating_sub(t0).as_secs_f64();
        (secs > 0.0).then_some((b1 - b0, secs))
    }
}

/// perftest's peak (`print_report_bw`, cq_mod and post_list 1): the shortest time per
/// message over every span from the post of message i to the completion of message j >= i,
/// `(tcompleted[j] - tposted[i]) / (j - i + 1)` in integer ns, starting from message 0's own
/// time. perftest turns the peak off above 20000 iterations (`noPeak`), and so do we:
/// `None` then, and for an empty run. Times are ns from any common origin.
pub fn perftest_opt_delta_ns(tposted: &[u64], tcompleted: &[u64]) -> Option<u64> {
    let n = tposted.len().min(tcompleted.len());
    if n == 0 || n > 20_000 {
        return None;
    }
    let mut opt = tcompleted[0].saturating_sub(tposted[0]);
    for (i, &p) in tposted[..n].iter().enumerate() {
        for (k, &c) in tcompleted[i..n].iter().enumerate() {
            // k = j - i: the span holds k + 1 messages.
            opt = opt.min(c.saturating_sub(p) / (k as u64 + 1));
        }
    }
    Some(opt)
}

/// Bandwidth figures of an outcome: (peak, average) in the report's unit, Mpps, and the
/// iterations perftest's `#iterations` column shows: this side's messages only, also with
/// `-b` (perftest's `print_full_bw_report` sums the peak, the average and the message rate
/// of both sides, but prints its own `iters`).
/// The peak is `None` (printed n/a) when a direction had no measured window.
pub fn bw_figures(o: &Outcome, gbits: bool) -> (Option<f64>, f64, f64, u64) {
    let mut peak = o.peak_bps;
    let mut avg_bps = o.bytes as f64 / o.secs.max(1e-9);
    if let Some((pb, ps, pp, _)) = o.peer {
        // Bidirectional: the sum of both directions, as perftest's -b reports (each side's
        // peak is its own best window; the sum needs both).
        avg_bps += pb as f64 / ps.max(1e-9);
        peak = peak.zip(pp).map(|(a, b)| a + b);
    }
    let unit = |bps: f64| {
        if gbits {
            bps * 8.0 / 1e9
        } else {
            bps / 1048576.0
        }
    };
    let rate = (o.iters as f64 / o.secs.max(1e-9)
        + o.peer.map_or(0.0, |p| p.3 as f64 / p.1.max(1e-9)))
        / 1e6;
    (peak.map(unit), unit(avg_bps), rate, o.iters)
}

/// Why a phase measured nothing, if it did not: no message completed on this side (or, with
/// `-b`, on the peer's) within what the row counts (a `-D` shorter than the first message
/// took, or a margin window that saw none). Its row would print an average and a message
/// rate of 0 (or, with `-b`, the peer's figures alone as the sum), so the run fails
/// instead.
pub fn nothing_measured(test: TestName, o: &Outcome) -> Option<String> {
    let what = if test.is_bw() { "message" } else { "iteration" };
    let side = if o.iters == 0 {
        "this side"
    } else if o.peer.is_some_and(|p| p.3 == 0) {
        "the server's side (-b)"
    } else {
        return None;
    };
    Some(format!(
        "{} {} B: no {what} completed on {side} in the interval measured: nothing was \
         measured (give a longer -D)",
        test.name(),
        o.size
    ))
}

/// A figure with two decimals, or `n/a`.
pub fn or_na(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_string(), |v| format!("{v:.2}"))
}

/// Whether a bandwidth row prints its figures with 6 decimals instead of 2: perftest's
/// `inc_accuracy`, an average below 0.1 Gb/sec (with `--report_gbits`), which 2 decimals
/// would show as 0.00 .. 0.09.
pub fn bw_inc_accuracy(avg: f64, gbits: bool) -> bool {
    gbits && avg < 0.1
}

/// One bandwidth row (with `no_peak`, perftest's -N, the peak column reads 0.00). Below
/// 0.1 Gb/sec perftest's `REPORT_FMT_EXT`: peak, average and message rate with 6 decimals.
pub fn bw_row(o: &Outcome, gbits: bool, no_peak: bool) -> String {
    let (peak, avg, rate, msgs) = bw_figures(o, gbits);
    let peak = if no_peak { Some(0.0) } else { peak };
    if bw_inc_accuracy(avg, gbits) {
        let peak = peak.map_or_else(|| "n/a".to_string(), |v| format!("{v:.6}"));
        return format!(
            " {:<7}    {}           {:<7}            {:<7.6}            {:<7.6}",
            o.size, msgs, peak, avg, rate
        );
    }
    format!(
        " {:<7}    {:<7}          {:<7}            {:<7.2}\t\t   {:<7.6}",
        o.size,
        msgs,
        or_na(peak),
        avg,
        rate
    )
}

/// The CPU clock in MHz that perftest converts its cycle counts with (`get_cpu_mhz`: the
/// `cpu MHz` lines of /proc/cpuinfo; the highest, as CPUs may differ). -C multiplies
/// iwperf's nanosecond timings by it.
pub fn cpu_mhz() -> Result<f64, String> {
    let text = std::fs::read_to_string("/proc/cpuinfo")
        .map_err(|e| format!("-C: cannot read /proc/cpuinfo: {e}"))?;
    parse_cpu_mhz(&text).ok_or_else(|| {
        "-C: /proc/cpuinfo gives no `cpu MHz` to turn times into cycles with".to_string()
    })
}

fn parse_cpu_mhz(cpuinfo: &str) -> Option<f64> {
    cpuinfo
        .lines()
        .filter(|l| l.starts_with("cpu MHz"))
        .filter_map(|l| l.split(':').nth(1)?.trim().parse::<f64>().ok())
        .filter(|m| *m > 0.0)
        .reduce(f64::max)
}

/// A latency phase's row (with `-C` in units of `per_us` a microsecond): perftest's
/// statistics over its samples ([`lat_stats_in`]) for a run by iterations; for a run by
/// time (`-D`), which keeps no samples (8 octets a round trip, without bound: ~20 GB an
/// hour at 1.5 us), the run's HdrHistogram's own: its min, max, median, mean, standard
/// deviation and 99 / 99.9 % quantiles over every sample (3 significant digits, nothing
/// dropped).
pub fn outcome_lat_stats(o: &Outcome, rtt_factor: u64, per_us: f64) -> Option<LatStats> {
    // A run by iterations records each sample in both: only a run by time has a
    // histogram without samples.
    if !o.samples.is_empty() || o.hist.is_empty() {
        return lat_stats_in(&o.samples, rtt_factor, per_us);
    }
    // The histogram holds what the row prints: full intervals divided by `rtt_factor`, ns.
    let h = &o.hist;
    let u = |ns: f64| ns / 1000.0 * per_us;
    Some(LatStats {
        min: u(h.min() as f64),
        max: u(h.max() as f64),
        typical: u(h.value_at_quantile(0.5) as f64),
        avg: u(h.mean()),
        stdev: u(h.stdev()),
        p99: u(h.value_at_quantile(0.99) as f64),
        p999: u(h.value_at_quantile(0.999) as f64),
    })
}

/// perftest's -U / -H listing: `#, usec` (or `cycles`), then one `n, value` line per
/// sample: in the order measured (`sorted` false), or sorted without the
/// [`LAT_MEASURE_TAIL`] largest (the ones the statistics keep). Samples are full intervals
/// in ns, divided by `rtt_factor` and times `scale` per microsecond.
pub fn samples_listing(
    samples_ns: &[u64],
    rtt_factor: u64,
    scale: f64,
    units: &str,
    sorted: bool,
) -> String {
    let mut v: Vec<u64> = samples_ns.to_vec();
    if sorted {
        v.sort_unstable();
        v.truncate(v.len().saturating_sub(LAT_MEASURE_TAIL));
    }
    let q = 1000.0 * rtt_factor.max(1) as f64;
    let mut s = format!("#, {units}\n");
    for (i, x) in v.iter().enumerate() {
        s += &format!("{}, {}\n", i + 1, *x as f64 / q * scale);
    }
    s
}

/// Writes perftest's `--out_json` report of `o` (the last size, as perftest, whose file
/// holds one report): `test_info` with perftest's keys and values for this run, and
/// `results` with its keys (`MsgSize`, `n_iterations`, `BW_peak`, `BW_average`, `MsgRate`
/// for bandwidth tests; `t_min` .. `percentile_99.9` for latency tests; only `bw_avg`,
/// `msgRate_avg` or `avg_lat` with --output).
pub fn write_perftest_json(
    path: &Path,
    cli: &Cli,
    info: &BannerInfo,
    o: &Outcome,
    cycles_mhz: Option<f64>,
) -> Result<(), String> {
    use serde_json::{json, Map, Value};
    let t = cli.test;
    let verb = match t {
        TestName::SendLat | TestName::SendBw => "Send",
        TestName::WriteLat | TestName::WriteBw if cli.write_with_imm => "RDMA_Write_imm",
        TestName::WriteLat | TestName::WriteBw => "RDMA_Write",
        TestName::ReadLat | TestName::ReadBw => "RDMA_Read",
        TestName::AtomicLat | TestName::AtomicBw => "Atomic",
    };
    let mut name = format!("{verb}_");
    if t.is_atomic() {
        name += match cli.atomic_type {
            crate::cli::AtomicType::FetchAndAdd => "FETCH_AND_ADD_",
            crate::cli::AtomicType::CmpAndSwap => "CMP_AND_SWAP_",
        };
    }
    if t.is_bw() {
        if cli.bidir {
            name += "Bidirectional_";
        }
        if cli.post_list.unwrap_or(1) > 1 {
            name += "Post_List_";
        }
        name += "BW_";
    } else {
        name += "Latency_";
    }
    name += "Test";
    let mut ti = Map::new();
    ti.insert("test".into(), json!(name));
    if cli.events {
        ti.insert(
            "Test with events".into(),
            json!(format!("Using_{}_comp0", crate::cli::DEVICE_NAME)),
        );
    }
    ti.insert("Dual_port".into(), json!("OFF"));
    ti.insert("Device".into(), json!(crate::cli::DEVICE_NAME));
    ti.insert("Number_of_qps".into(), json!(cli.qps));
    ti.insert("Transport_type".into(), json!("IW"));
    ti.insert("Connection_type".into(), json!("RC"));
    ti.insert("Using_SRQ".into(), json!("OFF"));
    ti.insert("PCIe_relax_order".into(), json!("Unsupported"));
    ti.insert("ibv_wr_API".into(), json!("OFF"));
    ti.insert("TX_depth".into(), json!(cli.tx_depth()));
    if let Some(l) = cli.post_list.filter(|&l| l > 1) {
        ti.insert("Post_List".into(), json!(l));
    }
    if let Some(r) = cli.rx_depth {
        ti.insert("RX_depth".into(), json!(r));
    }
    if t.is_bw() {
        ti.insert("CQ_Moderation".into(), json!(cli.cq_mod.unwrap_or(1)));
    }
    ti.insert("Mtu".into(), json!(info.mtu));
    ti.insert("Link_type".into(), json!("Ethernet"));
    if let Some(g) = cli.gid_index {
        ti.insert("GID_index".into(), json!(g));
    }
    if t.is_read() || t.is_atomic() {
        ti.insert("Outstand_reads".into(), json!(cli.outs.unwrap_or(16)));
    } else {
        ti.insert("Max_inline_data".into(), json!(cli.inline_size));
    }
    ti.insert("rdma_cm_QPs".into(), json!("ON"));
    ti.insert("Use_ROCm_memory".into(), json!("OFF"));
    ti.insert("Use_MUSA_memory".into(), json!("OFF"));
    ti.insert("Data_ex_method".into(), json!("rdma_cm"));
    let mut res = Map::new();
    if t.is_bw() {
        let (peak, avg, rate, msgs) = bw_figures(o, cli.report_gbits);
        let peak = if cli.no_peak {
            0.0
        } else {
            peak.unwrap_or(0.0)
        };
        match cli.output {
            Some(crate::cli::OutputKind::Bandwidth) => {
                res.insert("bw_avg".into(), json!(avg));
            }
            Some(crate::cli::OutputKind::MessageRate) => {
                res.insert("msgRate_avg".into(), json!(rate));
            }
            _ => {
                res.insert("MsgSize".into(), json!(o.size));
                res.insert("n_iterations".into(), json!(msgs));
                res.insert("BW_peak".into(), json!(peak));
                res.insert("BW_average".into(), json!(avg));
                res.insert("MsgRate".into(), json!(rate));
            }
        }
    } else {
        let st = outcome_lat_stats(o, rtt_factor(t), cycles_mhz.unwrap_or(1.0));
        match (cli.output, st) {
            (Some(_), s) => {
                // null, not 0, when there were too few samples (as `lat_usec` in --json).
                res.insert("avg_lat".into(), json!(s.map(|s| s.avg)));
            }
            (None, Some(s)) => {
                res.insert("MsgSize".into(), json!(o.size));
                res.insert("n_iterations".into(), json!(o.iters));
                res.insert("t_min".into(), json!(s.min));
                res.insert("t_max".into(), json!(s.max));
                res.insert("t_typical".into(), json!(s.typical));
                res.insert("t_avg".into(), json!(s.avg));
                res.insert("t_stdev".into(), json!(s.stdev));
                res.insert("percentile_99".into(), json!(s.p99));
                res.insert("percentile_99.9".into(), json!(s.p999));
            }
            (None, None) => {
                res.insert("MsgSize".into(), json!(o.size));
                res.insert("n_iterations".into(), json!(o.iters));
            }
        }
    }
    let doc = json!({ "test_info": Value::Object(ti), "results": Value::Object(res) });
    let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
    std::fs::write(path, text + "\n")
        .map_err(|e| format!("--out_json_file {}: {e}", path.display()))
}

/// What each test's histogram holds.
pub fn hdr_what(t: TestName) -> &'static str {
    match t {
        TestName::WriteLat | TestName::SendLat => "half round trip",
        TestName::ReadLat | TestName::AtomicLat => "round trip",
        _ => "post to completion per work request",
    }
}

/// This side's TCP counters, summed over its engine cores (Warpcore's TCP; the smoltcp
/// reference keeps none).
#[derive(Debug, Clone, Copy, Default)]
pub struct TcpSummary {
    pub segments_sent: u64,
    pub segments_received: u64,
    pub retransmitted_segments: u64,
    pub rtos: u64,
    pub spurious_rtos: u64,
    pub tail_loss_probes: u64,
    pub fast_recoveries: u64,
    /// Of those, undone: D-SACKs showed all their retransmissions unneeded (RFC 3708).
    pub undone_recoveries: u64,
    /// ACKs with a D-SACK block (RFC 2883): segments the peer received twice.
    pub dsacks_received: u64,
    /// Out-of-order segments this side dropped unSACKed (its peer sends them again):
    /// refused by the out-of-order budget (`CoreStats::tcp_out_of_order_refused`) or for
    /// want of a block (`CoreStats::tcp_out_of_order_no_block`). Loss recovery is slower
    /// when this is not 0.
    pub out_of_order_dropped: u64,
    /// Octets this side held out of order (and SACKed) and then gave up so that another of
    /// its connections, under its share of the out-of-order budget, could hold a segment
    /// (reneging, RFC 2018 8; `CoreStats::tcp_out_of_order_reneged`): the peer sends them
    /// again.
    pub out_of_order_reneged: u64,
    /// Received stream octets the engine deframed and placed straight from the frames
    /// (`CoreStats::rx_in_place_octets`); the rest went through the TCP receive queue.
    pub octets_placed_from_frames: u64,
    /// FPDU octets TCP sent straight from registered memory, written into each frame
    /// that carried them, retransmissions included (`CoreStats::tx_from_memory_wire_octets`);
    /// smaller FPDUs were copied into the TCP send buffer.
    pub octets_sent_from_memory: u64,
}

impl TcpSummary {
    /// The counters of `ctx`'s cores, or `None` when they cannot be read or the stack keeps
    /// none (nothing sent: the reference TCP).
    pub fn of(ctx: &warpcore_verbs::Context) -> Option<TcpSummary> {
        let cores = ctx.stats().ok()?;
        let mut t = TcpSummary::default();
        for c in &cores {
            t.segments_sent += c.tcp_segments_sent;
            t.segments_received += c.tcp_segments_received;
            t.retransmitted_segments += c.tcp_retransmitted_segments;
            t.rtos += c.tcp_rtos;
            t.spurious_rtos += c.tcp_spurious_rtos;
            t.tail_loss_probes += c.tcp_tail_loss_probes;
            t.fast_recoveries += c.tcp_fast_recoveries;
            t.undone_recoveries += c.tcp_undone_recoveries;
            t.dsacks_received += c.tcp_dsacks_received;
            t.out_of_order_dropped += c.tcp_out_of_order_refused + c.tcp_out_of_order_no_block;
            t.out_of_order_reneged += c.tcp_out_of_order_reneged;
            t.octets_placed_from_frames += c.rx_in_place_octets;
            t.octets_sent_from_memory += c.tx_from_memory_wire_octets;
        }
        (t.segments_sent > 0).then_some(t)
    }

    /// One line for the text report.
    pub fn line(&self) -> String {
        format!(
            "[iwperf] TCP (this side): {} segments sent, {} received, {} retransmitted, {} RTOs ({} spurious, undone), {} tail loss probes, {} recoveries ({} undone by D-SACKs, {} D-SACKs received), {} out-of-order segments dropped ({} octets reneged); {} received octets placed straight from the frames, {} sent straight from registered memory",
            self.segments_sent,
            self.segments_received,
            self.retransmitted_segments,
            self.rtos,
            self.spurious_rtos,
            self.tail_loss_probes,
            self.fast_recoveries,
            self.undone_recoveries,
            self.dsacks_received,
            self.out_of_order_dropped,
            self.out_of_order_reneged,
            self.octets_placed_from_frames,
            self.octets_sent_from_memory
        )
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "segments_sent": self.segments_sent,
            "segments_received": self.segments_received,
            "retransmitted_segments": self.retransmitted_segments,
            "rtos": self.rtos,
            "spurious_rtos": self.spurious_rtos,
            "tail_loss_probes": self.tail_loss_probes,
            "fast_recoveries": self.fast_recoveries,
            "undone_recoveries": self.undone_recoveries,
            "dsacks_received": self.dsacks_received,
            "out_of_order_dropped": self.out_of_order_dropped,
            "out_of_order_reneged": self.out_of_order_reneged,
            "octets_placed_from_frames": self.octets_placed_from_frames,
            "octets_sent_from_memory": self.octets_sent_from_memory,
        })
    }
}

pub fn write_json(
    path: &Path,
    cli: &Cli,
    info: &BannerInfo,
    outs: &[Outcome],
    tcp: Option<&TcpSummary>,
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
                let (peak, avg, rate, _) = bw_figures(o, cli.report_gbits);
                // Messages moved in both directions (with -b), as the sums beside it.
                let msgs = o.iters + o.peer.map_or(0, |p| p.3);
                v["bw"] = serde_json::json!({
                    "unit": if cli.report_gbits { "Gb/sec" } else { "MB/sec" },
                    "peak": peak, "average": avg, "msg_rate_mpps": rate, "messages": msgs,
                    "seconds": o.secs,
                });
            } else {
                v["lat_usec"] = match outcome_lat_stats(o, rtt_factor(cli.test), 1.0) {
                    Some(s) => serde_json::json!({
                        "t_min": s.min, "t_max": s.max, "t_typical": s.typical, "t_avg": s.avg,
                        "t_stdev": s.stdev, "p99": s.p99, "p99_9": s.p999,
                    }),
                    None => serde_json::Value::Null,
                };
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
        "tcp": tcp.map(TcpSummary::json),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_mhz_is_the_highest_cpu_mhz_line() {
        let info = "processor\t: 0\ncpu MHz\t\t: 1995.312\nprocessor\t: 1\ncpu MHz\t\t: 2400.000\n";
        assert_eq!(parse_cpu_mhz(info), Some(2400.0));
        assert_eq!(parse_cpu_mhz("processor: 0\n"), None);
    }

    #[test]
    fn samples_listing_is_perftests() {
        // 4 samples of 2, 8, 4, 6 us full round trip; write_lat halves them.
        let s = [2000, 8000, 4000, 6000];
        assert_eq!(
            samples_listing(&s, 2, 1.0, "usec", false),
            "#, usec\n1, 1\n2, 4\n3, 2\n4, 3\n"
        );
        // Sorted, without the two largest.
        assert_eq!(
            samples_listing(&s, 2, 1.0, "usec", true),
            "#, usec\n1, 1\n2, 2\n"
        );
        assert_eq!(
            samples_listing(&s[..1], 1, 2000.0, "cycles", false),
            "#, cycles\n1, 4000\n"
        );
    }
    use std::time::Duration;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn perftest_statistics_odd_kept_count() {
        // Seven samples, full intervals (rtt_factor 1: read_lat), in ns.
        // Sorted: 1000 2000 3000 4000 5000 9000 100000 (us: 1 2 3 4 5 9 100).
        // measure_cnt = 7 - 2 = 5, kept 1..5 us. get_median: (5 - 1) % 2 == 0 -> delta[2] = 3.
        // avg = 15 / 5 = 3. Deviations 2 1 0 -1 -2 -> squares 10 -> stdev sqrt(10 / 5).
        // t_max = delta[5] = 9 (the 100 us outlier is dropped from everything).
        // 99%: ceil(5 * 0.99) = 5 -> 9; 99.9%: ceil(4.995) = 5 -> 9.
        let s = lat_stats(&[5000, 1000, 3000, 2000, 4000, 9000, 100_000], 1).unwrap();
        assert!(close(s.min, 1.0), "{s:?}");
        assert!(close(s.max, 9.0), "{s:?}");
        assert!(close(s.typical, 3.0), "{s:?}");
        assert!(close(s.avg, 3.0), "{s:?}");
        assert!(close(s.stdev, 2f64.sqrt()), "{s:?}");
        assert!(close(s.p99, 9.0) && close(s.p999, 9.0), "{s:?}");
    }

    #[test]
    fn perftest_statistics_even_kept_count_halves_round_trips() {
        // Eight round trips (rtt_factor 2: write_lat / send_lat print half of each), ns.
        // Sorted: 1000 2000 3001 4000 5000 6000 50000 70000; measure_cnt = 6.
        // get_median: (6 - 1) % 2 == 1 -> (delta[3] + delta[2]) / 2 = 7001 / 2 = 3500 in
        // integer ns (perftest's integer cycles) -> 3500 / 2000 = 1.75 us.
        // Kept in us (/2000): 0.5 1.0 1.5005 2.0 2.5 3.0 -> avg 21001 / 12000.
        // Deviations from 1.750083: 1.25 0.75 0.2496 -0.2499 -0.7499 -1.2499, truncated
        // toward zero (perftest's int): 1 0 0 0 0 -1 -> stdev sqrt(2 / 6).
        // t_max = delta[6] = 50000 / 2000 = 25; 99%: ceil(5.94) = 6 -> 25; 99.9% -> 25.
        let s = lat_stats(&[1000, 3001, 4000, 2000, 5000, 6000, 50_000, 70_000], 2).unwrap();
        assert!(close(s.min, 0.5), "{s:?}");
        assert!(close(s.typical, 1.75), "{s:?}");
        assert!(close(s.avg, 21001.0 / 12000.0), "{s:?}");
        assert!(close(s.stdev, (2.0f64 / 6.0).sqrt()), "{s:?}");
        assert!(close(s.max, 25.0), "{s:?}");
        assert!(close(s.p99, 25.0) && close(s.p999, 25.0), "{s:?}");
    }

    #[test]
    fn perftest_percentile_indexing_and_truncated_stdev() {
        // 202 samples of 1..=202 us (rtt_factor 1); measure_cnt = 200.
        // 99%: ceil(200 * 0.99) = 198 -> delta[198] = 199 us (not the 198 a nearest-rank
        // 99th percentile of the kept samples gives); 99.9%: ceil(199.8) = 200 ->
        // delta[200] = 201 us, which is also t_max (the second largest of all 202).
        // get_median: even count -> (delta[100] + delta[99]) / 2 = (101 + 100) / 2 = 100.5.
        // avg of 1..=200 = 100.5. Deviations 99.5, 98.5, ..., -99.5 truncate to
        // 99..0, -0..-99: sum of squares 2 * (99 * 100 * 199 / 6) = 656700, so
        // stdev = sqrt(656700 / 200) = sqrt(3283.5), not the exact 57.73.
        let v: Vec<u64> = (1..=202).map(|k| k * 1000).collect();
        let s = lat_stats(&v, 1).unwrap();
        assert!(close(s.p99, 199.0), "{s:?}");
        assert!(close(s.p999, 201.0), "{s:?}");
        assert!(close(s.max, 201.0), "{s:?}");
        assert!(close(s.min, 1.0), "{s:?}");
        assert!(close(s.typical, 100.5), "{s:?}");
        assert!(close(s.avg, 100.5), "{s:?}");
        assert!(close(s.stdev, 3283.5f64.sqrt()), "{s:?}");
    }

    /// perftest's -C (`--report-cycles`) computes every statistic over cycles: its
    /// `int temp_var` truncates each deviation to whole *cycles*, not microseconds. iwperf
    /// computed the standard deviation in microseconds (sub-microsecond deviations
    /// truncated to 0) and then multiplied by the clock: sub-microsecond jitter printed
    /// `t_stdev[cycles]` 0.00 where perftest prints hundreds of cycles.
    #[test]
    fn cycles_stdev_truncates_whole_cycles_as_perftest() {
        // Kept (rtt_factor 1): 1.0 1.4 1.8 2.2 2.6 us; the two 1 ms samples are dropped.
        // At 1000 MHz (1 cycle = 1 ns) the deviations from 1800 cycles are -800 -400 0 400
        // 800 cycles: stdev = sqrt((2 * 640000 + 2 * 160000) / 5) = sqrt(320000) = 565.69.
        let s = [1000, 1400, 1800, 2200, 2600, 1_000_000, 1_000_000];
        let us = lat_stats(&s, 1).unwrap();
        assert!(close(us.stdev, 0.0), "{us:?}"); // perftest in usec: truncated to 0
        let cy = lat_stats_in(&s, 1, 1000.0).unwrap();
        assert!(close(cy.stdev, 320_000f64.sqrt()), "{cy:?}");
        assert!(close(cy.avg, 1800.0) && close(cy.min, 1000.0) && close(cy.max, 1_000_000.0));
        assert!(
            close(cy.typical, 1800.0) && close(cy.p99, 1_000_000.0),
            "{cy:?}"
        );
    }

    #[test]
    fn too_few_samples_have_no_statistics() {
        // Two dropped, nothing kept: perftest would divide by zero; we print n/a.
        assert_eq!(lat_stats(&[], 2), None);
        assert_eq!(lat_stats(&[1000, 2000], 2), None);
        // Three: one kept. Sorted 1 2 3 us; median delta[0] = 1, t_max = delta[1] = 2,
        // 99%: ceil(0.99) = 1 -> 2.
        let s = lat_stats(&[3000, 1000, 2000], 1).unwrap();
        assert!(close(s.typical, 1.0) && close(s.max, 2.0) && close(s.p99, 2.0));
        assert!(lat_row(2, 2, None).contains("n/a"));
        assert_eq!(lat_row(2, 2, None).split_whitespace().count(), 9);
    }

    #[test]
    fn peak_is_the_best_closed_window_and_absent_without_one() {
        let ms = Duration::from_millis;
        let mut m = PeakMeter::new(ms(10));
        m.observe(ms(5), 100); // 5 ms: no window closed yet
        assert_eq!(m.peak(), None);
        m.observe(ms(10), 1000); // window 0..10 ms: 1000 B / 10 ms = 100 kB/s
        m.observe(ms(25), 4000); // window 10..25 ms: 3000 B / 15 ms = 200 kB/s
        m.observe(ms(30), 4100); // 5 ms after: window still open
        m.observe(ms(40), 4500); // window 25..40 ms: 500 B / 15 ms = 33.3 kB/s
        assert!(close(m.peak().unwrap(), 200_000.0), "{:?}", m.peak());
        // A transfer shorter than one window measured no interval.
        let mut short = PeakMeter::new(ms(10));
        short.observe(ms(9), 1 << 20);
        assert_eq!(short.peak(), None);
    }

    fn bw_outcome(bytes: u64, secs: f64, peak: Option<f64>) -> Outcome {
        Outcome {
            size: 1000,
            iters: bytes / 1000,
            samples: Vec::new(),
            hist: hdrhistogram::Histogram::new(3).unwrap(),
            intervals: Vec::new(),
            bytes,
            secs,
            peak_bps: peak,
            peer: None,
            verified: 0,
            errors: 0,
            first_error: None,
        }
    }

    /// A latency run by time (-D) keeps no samples (they grew 8 octets a round trip
    /// without bound): its row comes from the run's histogram, which holds what the row
    /// prints (half round trips here, ns); a run by iterations keeps perftest's statistics.
    #[test]
    fn a_latency_run_by_time_takes_its_row_from_the_histogram() {
        let mut o = bw_outcome(0, 1.0, None);
        for ns in [1000u64, 2000, 3000, 4000, 100_000] {
            o.hist.record(ns).unwrap();
        }
        let s = outcome_lat_stats(&o, 2, 1.0).expect("a row from the histogram");
        // Within the histogram's 3 significant digits.
        let near = |a: f64, b: f64| (a - b).abs() <= b / 1000.0;
        assert!(near(s.min, 1.0) && near(s.typical, 3.0), "{s:?}");
        assert!((s.max - 100.0).abs() < 0.1, "{s:?}");
        assert!((s.avg - 22.0).abs() < 0.05, "{s:?}");
        assert!((s.p99 - 100.0).abs() < 0.1, "{s:?}");
        // -C: cycles at 2,000 per microsecond.
        let c = outcome_lat_stats(&o, 2, 2000.0).unwrap();
        assert!(near(c.typical, 6000.0), "{c:?}");
        // Samples kept (a run by iterations): perftest's statistics over them, the two
        // largest dropped, whatever the histogram holds.
        o.samples = vec![2000, 4000, 6000, 8000, 200_000];
        let p = outcome_lat_stats(&o, 2, 1.0).unwrap();
        assert_eq!(Some(p), lat_stats(&o.samples, 2));
        assert!(close(p.max, 4.0) && close(p.typical, 2.0), "{p:?}");
    }

    #[test]
    fn peak_is_reported_as_measured_even_below_the_average() {
        // 3 MB in 10 ms = 3e8 B/s average; the best closed window measured 2e8 B/s (a
        // window can be slower than the whole when the run's time base differs). The table
        // shows 1.60 Gb/s peak and 2.40 average: never max(peak, average).
        let o = bw_outcome(3_000_000, 0.01, Some(2e8));
        let (peak, avg, _, _) = bw_figures(&o, true);
        assert!(close(peak.unwrap(), 1.6), "{peak:?}");
        assert!(close(avg, 2.4), "{avg}");
        // No window: n/a, not the average.
        let o = bw_outcome(3_000_000, 0.01, None);
        assert_eq!(bw_figures(&o, true).0, None);
        assert!(
            bw_row(&o, true, false).contains("n/a"),
            "{}",
            bw_row(&o, true, false)
        );
        assert!(bw_row(&o, true, true).contains("0.00"));
        // Bidirectional: the sum of both directions' peaks; n/a if either has none.
        let mut o = bw_outcome(1_000_000, 0.01, Some(1e8));
        o.peer = Some((1_000_000, 0.01, Some(5e7), 1000));
        assert!(close(bw_figures(&o, false).0.unwrap(), 1.5e8 / 1048576.0));
        o.peer = Some((1_000_000, 0.01, None, 1000));
        assert_eq!(bw_figures(&o, false).0, None);
    }

    /// A phase with no completed message on either side (with `-b`) measured nothing: its
    /// row would be zeros, or the other side's figures passed off as the sum.
    #[test]
    fn a_phase_without_messages_on_either_side_measured_nothing() {
        let mut o = bw_outcome(1_000_000, 0.01, Some(1e8));
        assert_eq!(nothing_measured(TestName::WriteBw, &o), None);
        o.peer = Some((1_000_000, 0.01, Some(5e7), 1000));
        assert_eq!(nothing_measured(TestName::WriteBw, &o), None);
        o.peer = Some((0, 0.0, None, 0));
        let e = nothing_measured(TestName::WriteBw, &o).expect("the server moved nothing");
        assert!(e.contains("server's side") && e.contains("1000 B"), "{e}");
        let o = bw_outcome(0, 0.0, None);
        let e = nothing_measured(TestName::SendLat, &o).expect("no iteration");
        assert!(e.contains("send_lat") && e.contains("this side"), "{e}");
    }

    /// The histogram block of a latency test holds what its table prints (docs/iwperf.md,
    /// "Output"): atomic_lat's full round trips (`rtt_factor` 1, as read_lat) were labelled
    /// as a bandwidth test's "post to completion per work request".
    #[test]
    fn every_latency_histogram_is_labelled_as_its_table() {
        for t in [
            TestName::WriteLat,
            TestName::SendLat,
            TestName::ReadLat,
            TestName::AtomicLat,
        ] {
            let want = if rtt_factor(t) == 2 {
                "half round trip"
            } else {
                "round trip"
            };
            assert_eq!(hdr_what(t), want, "{t:?}");
        }
        for t in [
            TestName::WriteBw,
            TestName::SendBw,
            TestName::ReadBw,
            TestName::AtomicBw,
        ] {
            assert_eq!(hdr_what(t), "post to completion per work request", "{t:?}");
        }
    }

    #[test]
    fn bidirectional_row_sums_the_rates_but_shows_this_sides_iterations() {
        // perftest -b (`print_full_bw_report` with the peer's report): peak, average and
        // message rate are the sums of both sides, the #iterations column its own `iters`.
        // `-b -n 1000` printed 2000 iterations.
        let mut o = bw_outcome(1_000_000, 0.01, Some(1e8));
        o.peer = Some((1_000_000, 0.02, Some(5e7), 1000));
        let (_, avg, rate, iters) = bw_figures(&o, false);
        assert_eq!(iters, 1000);
        assert!(close(avg, (1e8 + 5e7) / 1048576.0), "{avg}");
        assert!(close(rate, (1000.0 / 0.01 + 1000.0 / 0.02) / 1e6), "{rate}");
        let row = bw_row(&o, false, false);
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(cols[..2], ["1000", "1000"], "{row}");
    }

    #[test]
    fn timed_run_counts_only_perftests_sample_window() {
        // perftest -D 5: margin 5 / 4 = 1 s; what completed between 1 s and 4 s counts.
        // -D 3 or 0.5: no margin (the whole run), as perftest's integer 3 / 4 = 0.
        let s = Duration::from_secs;
        assert_eq!(perftest_margin(5.0), s(1));
        assert_eq!(perftest_margin(10.9), s(2));
        assert_eq!(perftest_margin(3.0), s(0));
        assert_eq!(perftest_margin(0.5), s(0));
        assert!(SampleWindow::new(Some(s(3)), s(0)).is_none());
        assert!(SampleWindow::new(None, s(1)).is_none());
        // A slow start (100 B in the first second) then 1000 B/s; observations every
        // 0.5 s to 5 s plus the drain: the window is 1.0 .. 4.0 s, 3000 B in 3 s.
        let mut w = SampleWindow::new(Some(s(5)), s(1)).unwrap();
        let ms = Duration::from_millis;
        let mut bytes = 0;
        for k in 1..=11u64 {
            bytes += if k <= 2 { 50 } else { 500 };
            w.observe(ms(500 * k), bytes);
        }
        let (b, secs) = w.figures().unwrap();
        assert_eq!(b, 3000);
        assert!(close(secs, 3.0), "{secs}");
        // A phase that ended inside the window has no window figures.
        let mut short = SampleWindow::new(Some(s(5)), s(1)).unwrap();
        short.observe(ms(1500), 10);
        assert_eq!(short.figures(), None);
    }

    #[test]
    fn slow_gbits_rows_keep_six_decimals_as_perftest() {
        // 1000 messages of 1000 B in 0.5 s: 0.016 Gb/sec. perftest (`inc_accuracy`) prints
        // 0.016000; two decimals printed 0.02 (and anything below 0.005 as 0.00).
        let o = bw_outcome(1_000_000, 0.5, Some(2_500_000.0));
        let row = bw_row(&o, true, false);
        let cols: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            cols,
            ["1000", "1000", "0.020000", "0.016000", "0.002000"],
            "{row}"
        );
        // MB/sec keeps two decimals (perftest's rule is for Gb/sec only), as do faster runs.
        let mb = bw_row(&o, false, false);
        assert_eq!(mb.split_whitespace().nth(3), Some("1.91"), "{mb}");
        let fast = bw_outcome(1_000_000, 0.001, None);
        let row = bw_row(&fast, true, false);
        assert_eq!(row.split_whitespace().nth(3), Some("8.00"), "{row}");
    }

    #[test]
    fn perftest_peak_is_the_best_span_per_message() {
        // Posts at 0 10 20 30 ns, completions at 100 110 120 200 ns. Per-message times of
        // every span [post i, completion j], integer ns:
        //   i=0: 100/1 110/2=55 120/3=40 200/4=50; i=1: 100 110/2=55 190/3=63;
        //   i=2: 100 180/2=90; i=3: 170. Best: 40 ns (messages 0..2).
        assert_eq!(
            perftest_opt_delta_ns(&[0, 10, 20, 30], &[100, 110, 120, 200]),
            Some(40)
        );
        assert_eq!(perftest_opt_delta_ns(&[], &[]), None);
        // perftest turns the peak off above 20000 iterations.
        let many: Vec<u64> = (0..20_001).collect();
        assert_eq!(perftest_opt_delta_ns(&many, &many), None);
    }
}
