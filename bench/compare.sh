#!/usr/bin/env bash
# One-run comparison on this machine, written up as Markdown with a latency percentile plot:
#   * iwperf write_lat (64 B), write_bw (64 KiB) and the 64 B Write message rate between two
#     processes over net_memif, each process one thread that also runs its engine core
#     (--poll-mode caller, iwperf's default), plus write_lat with engine threads
#     (--poll-mode thread, the verbs library's default) for the before/after, and write_lat
#     and write_bw again with --no-csum on both sides (no IPv4/TCP checksums on memif, as the
#     kernel's loopback computes none);
#   * kernel TCP over loopback: qperf tcp_lat / tcp_bw and iperf3;
#   * the bounds: a raw DPDK frame ping-pong and frame blast over the same vdev (no TCP, no
#     iWARP), and single-core memcpy and crc32c throughput for the same sizes.
#
#   bench/compare.sh [OUT_DIR]        # default bench/out; about two minutes
#
# Environment: LAT_ITERS (default 20000), BW_ITERS (default 20000), RATE_ITERS (default
# 300000), THREAD_LAT_ITERS (default 300), KERNEL_SECS (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
out=${1:-bench/out}
mkdir -p "$out"
out=$(cd "$out" && pwd)
lat_iters=${LAT_ITERS:-20000}
bw_iters=${BW_ITERS:-20000}
rate_iters=${RATE_ITERS:-300000}
thread_lat_iters=${THREAD_LAT_ITERS:-300}
ksecs=${KERNEL_SECS:-3}
cmdline="bench/compare.sh $*"

for tool in qperf iperf3 python3; do
    command -v "$tool" >/dev/null || { echo "compare: $tool missing (scripts/install-deps.sh)" >&2; exit 1; }
done
cargo build --release -q -p warpcore-apps --bin iwperf
cargo build --release -q -p warpcore-bench --bin wcbench
iwperf=$root/target/release/iwperf
wcbench=$root/target/release/wcbench

work=$(mktemp -d /tmp/wc-compare.XXXXXX)
sock=$work/memif.sock
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
t0=$SECONDS
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# iw TEST ARGS...: server on CPU 0, client on CPU 1 (each process: one thread runs the
# application and its engine core, unless $mode says otherwise), over a fresh memif socket.
mode=caller
csum=()
iw() {
    local test=$1
    shift
    rm -f "$sock"
    "$iwperf" "$test" --memif "$sock" --cores 0 --poll-mode "$mode" "${csum[@]}" >"$work/server-$test.log" 2>&1 &
    local sp=$!
    pids+=("$sp")
    for _ in $(seq 1 100); do [[ -S "$sock" ]] && break; sleep 0.05; done
    timeout 150 "$iwperf" "$test" --memif "$sock" 198.18.0.2 --cores 1 --poll-mode "$mode" "${csum[@]}" "$@" \
        | tee "$work/client-$test.log"
    wait "$sp"
}
echo "== iwperf write_lat 64 B over net_memif"
iw write_lat -s 64 -n "$lat_iters" --json "$work/write_lat.json" --hdr-log "$out/iwperf_write_lat_64.hlog"
echo "== iwperf write_bw 64 KiB over net_memif"
iw write_bw -s 65536 -n "$bw_iters" --report_gbits --json "$work/write_bw.json"
echo "== iwperf write_bw 64 B (message rate) over net_memif"
iw write_bw -s 64 -n "$rate_iters" --json "$work/write_rate.json"
echo "== iwperf write_lat 64 B with engine threads (--poll-mode thread), for comparison"
mode=thread
iw write_lat -s 64 -n "$thread_lat_iters" --json "$work/write_lat_thread.json"
mode=caller
echo "== iwperf write_lat 64 B and write_bw 64 KiB with --no-csum on both sides"
csum=(--no-csum)
iw write_lat -s 64 -n "$lat_iters" --json "$work/write_lat_nocsum.json"
iw write_bw -s 65536 -n "$bw_iters" --report_gbits --json "$work/write_bw_nocsum.json"
csum=()

# raw MODE ARGS...: echo side on CPU 0, driver on CPU 1, over a fresh memif socket.
raw() {
    rm -f "$sock"
    "$wcbench" raw --mode echo --vdev "net_memif0,role=server,socket=$sock,socket-abstract=no,rsize=12" \
        >"$work/echo.log" 2>&1 &
    local ep=$!
    pids+=("$ep")
    for _ in $(seq 1 100); do [[ -S "$sock" ]] && break; sleep 0.05; done
    timeout 120 "$wcbench" raw --vdev "net_memif0,role=client,socket=$sock,socket-abstract=no,rsize=12" "$@" \
        | tee -a "$work/raw.txt"
    wait "$ep" || true
}
echo "== raw DPDK frames over net_memif (no TCP, no iWARP)"
raw --mode pingpong --size 64 --count "$lat_iters" --hdr-log "$out/raw_pingpong_64.hlog"
raw --mode blast --size 1514 --count 2000000

echo "== single core memcpy and crc32c"
"$wcbench" copy --sizes 64,65536 | tee "$work/copy.txt"

echo "== kernel TCP over loopback: qperf and iperf3 (${ksecs} s each)"
qperf >/dev/null 2>&1 &
pids+=($!)
iperf3 -s -1 -p 5299 >/dev/null 2>&1 &
pids+=($!)
sleep 0.5
qperf -t "$ksecs" -m 64 127.0.0.1 tcp_lat | tee "$work/qperf_lat.txt"
qperf -t "$ksecs" -m 65536 127.0.0.1 tcp_bw | tee "$work/qperf_bw.txt"
iperf3 -c 127.0.0.1 -p 5299 -t "$ksecs" -J >"$work/iperf3.json"
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

echo "== plot and report"
"$wcbench" plot --out "$out/latency_percentiles.png" \
    --title "64 B half round trip over net_memif, by percentile" \
    "iwperf write_lat (iWARP)=$out/iwperf_write_lat_64.hlog" \
    "raw DPDK frame ping-pong=$out/raw_pingpong_64.hlog" \
    || echo "compare: plot failed (report written without it)" >&2

python3 - "$work" "$out" "$cmdline" "$load_before" "$load_after" "$((SECONDS - t0))" <<'PY'
import json, re, sys, os, datetime, platform
work, out, cmd, lb, la, secs = sys.argv[1:]
def js(n): return json.load(open(os.path.join(work, n)))
lat = js("write_lat.json")["results"][0]
bw = js("write_bw.json")["results"][0]
rate = js("write_rate.json")["results"][0]
lat_thr = js("write_lat_thread.json")["results"][0]
lat_nc = js("write_lat_nocsum.json")["results"][0]
bw_nc = js("write_bw_nocsum.json")["results"][0]
raw = open(os.path.join(work, "raw.txt")).read()
def field(text, key):
    m = re.search(r"\b%s=([0-9.]+)" % key, text)
    return float(m.group(1)) if m else float("nan")
copy = open(os.path.join(work, "copy.txt")).read().splitlines()
cp = {int(field(l, "size")): (field(l, "memcpy_gbps"), field(l, "crc32c_gbps")) for l in copy if l.startswith("RESULT")}
def qperf(name, key):
    t = open(os.path.join(work, name)).read()
    m = re.search(r"%s\s*=\s*([0-9.]+)\s*(\S+)" % key, t)
    if not m: return float("nan")
    v, u = float(m.group(1)), m.group(2)
    scale = {"us": 1, "ms": 1000, "ns": 0.001, "sec": 1e6,
             "GB/sec": 8, "MB/sec": 0.008, "KB/sec": 8e-6}.get(u, float("nan"))
    return v * scale
k_lat = qperf("qperf_lat.txt", "latency")          # us, half round trip
k_bw = qperf("qperf_bw.txt", "bw")                 # Gbit/s
ip = js("iperf3.json")
k_iperf = ip["end"]["sum_received"]["bits_per_second"] / 1e9
iw_lat = lat["lat_usec"]["t_typical"]
iw_p99 = lat["lat_usec"]["p99"]
iw_bw = bw["bw"]["average"]
iw_bw_peak = bw["bw"]["peak"]
iw_rate = rate["bw"]["msg_rate_mpps"]
nc_lat = lat_nc["lat_usec"]["t_typical"]
nc_p99 = lat_nc["lat_usec"]["p99"]
nc_bw = bw_nc["bw"]["average"]
nc_bw_peak = bw_nc["bw"]["peak"]
thr_lat = lat_thr["lat_usec"]["t_typical"]
thr_p99 = lat_thr["lat_usec"]["p99"]
raw_p50 = field(raw, "half_rtt_p50_us")
raw_p99 = field(raw, "p99_us")
raw_gbps = field(raw, "gbps")
raw_mpps = field(raw, "mpps")
def r(a, b): return "%.3g" % (a / b) if b and b == b and a == a else "n/a"
md = []
md.append("# Warpcore comparison report\n")
md.append("Generated %s UTC on %s (%s), %d CPUs, in %s s.  \nCommand: `%s`  \nLoad average before/after: %s / %s (other jobs share this machine; see docs/iwperf.md)\n" % (
    datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M"), platform.node(), platform.machine(), os.cpu_count(), secs, cmd, lb, la))
md.append("## Latency, 64 B (half round trip, microseconds)\n")
md.append("| what | median | p99 | iwperf median / this |\n|---|---|---|---|")
md.append("| iwperf write_lat over net_memif (iWARP, 2 processes) | %.2f | %.2f | 1.00 |" % (iw_lat, iw_p99))
md.append("| raw DPDK frame ping-pong over net_memif (bound) | %.2f | %.2f | %s |" % (raw_p50, raw_p99, r(iw_lat, raw_p50)))
md.append("| kernel TCP loopback, qperf tcp_lat (mean) | %.2f | | %s |" % (k_lat, r(iw_lat, k_lat)))
md.append("| iwperf write_lat `--no-csum` on both sides (no IPv4/TCP checksums, like kernel loopback) | %.2f | %.2f | %s |" % (nc_lat, nc_p99, r(iw_lat, nc_lat)))
md.append("| iwperf write_lat with engine threads (`--poll-mode thread`, %s iterations) | %.2f | %.2f | %s |" % (lat_thr["iterations"], thr_lat, thr_p99, r(iw_lat, thr_lat)))
md.append("")
md.append("## Throughput (Gbit/s)\n")
md.append("| what | Gbit/s | this / iwperf |\n|---|---|---|")
md.append("| iwperf write_bw 64 KiB over net_memif (iWARP, 2 processes; peak over 10 ms: %.2f) | %.2f | 1.00 |" % (iw_bw_peak, iw_bw))
md.append("| iwperf write_bw 64 KiB `--no-csum` on both sides (peak over 10 ms: %.2f) | %.2f | %s |" % (nc_bw_peak, nc_bw, r(nc_bw, iw_bw)))
md.append("| raw DPDK 1514-byte frame blast over net_memif (bound; %.3f Mpps) | %.2f | %s |" % (raw_mpps, raw_gbps, r(raw_gbps, iw_bw)))
md.append("| kernel TCP loopback, qperf tcp_bw 64 KiB | %.2f | %s |" % (k_bw, r(k_bw, iw_bw)))
md.append("| kernel TCP loopback, iperf3 | %.2f | %s |" % (k_iperf, r(k_iperf, iw_bw)))
for size in sorted(cp):
    md.append("| single-core memcpy, %d B (bound) | %.2f | %s |" % (size, cp[size][0], r(cp[size][0], iw_bw)))
    md.append("| single-core crc32c, %d B (bound) | %.2f | %s |" % (size, cp[size][1], r(cp[size][1], iw_bw)))
md.append("")
md.append("## Message rate\n")
md.append("| what | M msgs/s |\n|---|---|")
md.append("| iwperf write_bw 64 B, one engine core per side | %.3f |" % iw_rate)
md.append("")
def verdict(ok): return "met" if ok else "**missed**"
t_lat = min(0.2 * k_lat, 2 * raw_p50)
md.append("## Targets (issue 6)\n")
md.append("| target | measured | verdict |\n|---|---|---|")
md.append("| 64 B write_lat median <= 0.2x tcp_lat (%.2f us) and <= 2x raw ping-pong (%.2f us) | %.2f us (%s x tcp_lat, %s x raw) | %s |" % (
    0.2 * k_lat, 2 * raw_p50, iw_lat, r(iw_lat, k_lat), r(iw_lat, raw_p50), verdict(iw_lat <= t_lat)))
md.append("| 64 KiB write_bw >= 1.0x tcp_bw (%.2f Gbit/s), one engine core per side | %.2f Gbit/s (%s x) | %s |" % (
    k_bw, iw_bw, r(iw_bw, k_bw), verdict(iw_bw >= k_bw)))
md.append("| same, `--no-csum` (checksums skipped as on kernel loopback) | %.2f us (%s x tcp_lat, %s x raw) | %s |" % (
    nc_lat, r(nc_lat, k_lat), r(nc_lat, raw_p50), verdict(nc_lat <= t_lat)))
md.append("| 64 KiB write_bw >= 1.0x tcp_bw, `--no-csum` | %.2f Gbit/s (%s x) | %s |" % (
    nc_bw, r(nc_bw, k_bw), verdict(nc_bw >= k_bw)))
md.append("| 64 B Write message rate >= 2 M msgs/s per engine core | %.3f M/s | %s |" % (iw_rate, verdict(iw_rate >= 2.0)))
md.append("")
if os.path.exists(os.path.join(out, "latency_percentiles.png")):
    md.append("## Latency by percentile\n\n![latency percentiles](latency_percentiles.png)\n")
    md.append("HdrHistogram interval logs: `iwperf_write_lat_64.hlog`, `raw_pingpong_64.hlog`.\n")
md.append("## How\n")
md.append("* iwperf: server `--cores 0`, client `--cores 1`, `--poll-mode caller` (each process is one busy-polling thread that runs the application and its engine core, as perftest and DPDK applications run), `--memif` (4096-slot rings), no hugepages, MPA Rev 2 with CRC, one QP; write_bw with 128 Writes in flight. The `--poll-mode thread` row runs an engine thread next to the application thread in each process (4 threads on 2 CPUs).")
md.append("* raw bound: `wcbench raw` sends Ethernet frames (EtherType 0x88B5) through the same vdev, echo side on CPU 0, driver on CPU 1.")
md.append("* kernel: `qperf -t %s -m 64 127.0.0.1 tcp_lat`, `qperf -m 65536 tcp_bw`, `iperf3 -t %s` on 127.0.0.1." % (os.environ.get("KERNEL_SECS", "3"), os.environ.get("KERNEL_SECS", "3")))
md.append("* memcpy/crc32c: `wcbench copy` (the crc32c crate, SSE4.2), one thread.\n")
open(os.path.join(out, "report.md"), "w").write("\n".join(md) + "\n")
print("\n".join(md))
PY
echo "compare: report in $out/report.md ($((SECONDS - t0)) s)"
