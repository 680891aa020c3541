//! Results, for people and as `RESULT key=value` lines for scripts.

use hdrhistogram::Histogram;

/// CPU time (user + system) this process has used, from /proc/self/stat (0 if unreadable).
/// Busy-polling processes on a shared machine get only part of a core; the CPU share
/// printed with each result tells how much.
pub(crate) fn cpu_seconds() -> f64 {
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

/// The histogram of round trips, in ns, up to 60 s.
pub(crate) fn rtt_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds")
}

/// Records one round trip of `ns`: one beyond the histogram's 60 s counts as 60 s (at the
/// top, in the count and the maximum) rather than vanishing from the report.
pub(crate) fn record_rtt(h: &mut Histogram<u64>, ns: u64) {
    h.saturating_record(ns.max(1));
}

pub(crate) fn report_rr(label: &str, size: u64, h: &Histogram<u64>, elapsed_s: f64, cpu_s: f64) {
    let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    let rate = h.len() as f64 / elapsed_s;
    warpcore_apps::outln!(
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
    warpcore_apps::outln!(
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

pub(crate) fn report_bulk(label: &str, bytes: u64, elapsed_s: f64, cpu_s: f64) {
    let gbps = bytes as f64 * 8.0 / elapsed_s / 1e9;
    let share = cpu_s / elapsed_s;
    warpcore_apps::outln!(
        "{label}: bulk {bytes} bytes in {elapsed_s:.3} s: {gbps:.3} Gbit/s (client used {:.0}% of a core)",
        share * 100.0
    );
    warpcore_apps::outln!(
        "RESULT mode={label} test=bulk bytes={bytes} seconds={elapsed_s:.4} gbps={gbps:.3} cpu_share={share:.2}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A round trip longer than the histogram holds (a stall under a timeout above 60 s)
    /// still counts: `Histogram::record` refused it, and the report's count and
    /// percentiles left it out without a word.
    #[test]
    fn a_round_trip_beyond_the_histogram_still_counts() {
        let mut h = rtt_histogram();
        record_rtt(&mut h, 1_000);
        record_rtt(&mut h, 90_000_000_000);
        assert_eq!(h.len(), 2);
        assert!(h.max() >= 59_000_000_000, "{}", h.max());
    }
}
