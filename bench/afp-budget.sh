#!/usr/bin/env bash
# The CPU each frame costs on bench/loss.sh's path, by CPU and by kernel/user, for Warpcore
# and for the kernel's TCP (issue 11: why write_bw stays under iperf3's there).
#
# The same loss-free path as bench/loss.sh (scripts/lib/lossnet.sh: two namespaces, a
# bridge in a third, offloads off, MTU 1500), the same pinning for both: the receiver on
# CPU 0, the sender on CPU 1.
#   - Warpcore: iwperf write_bw of 64 KiB messages over net_af_packet (as in bench/loss.sh,
#     with its own Ethernet addresses);
#   - kernel: iperf3, one stream (-A 0 on the server, -A 1 on the client).
# While each runs, the busy time of both CPUs (/proc/stat: user, and system + irq +
# softirq as "kernel"; busy as a share of the window, whose ticks count steal: the time the
# host ran another guest on the vCPU) and the frames the sender's veth sent (its tx_packets)
# are sampled over WINDOW seconds. Printed per frame sent, in microseconds:
#   - each CPU's user and kernel time;
#   - for Warpcore, the frame rate its sending CPU allows with its own (user) work at zero:
#     1 / (kernel us per frame on CPU 1), and the write_bw that frame rate would carry (the
#     measured write_bw scaled by it), next to iperf3's measured rate.
# A busy-polling engine keeps its CPU at 100 %: its user time per frame includes its idle
# polls; its kernel time is work only (system calls and the softirqs they run). /proc/stat
# counts every process on the CPU: run it on an otherwise idle machine (the load is printed).
#
#   bench/afp-budget.sh          # WINDOW=3 seconds sampled after 1 s of each run
# Needs: what bench/loss.sh needs (scripts/install-deps.sh), and 2 or more CPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
window=${WINDOW:-3}
run=$((window + 2))
# Without IWPERF, build iwperf from this checkout now: lossnet_build only builds a binary
# that is missing, and an iwperf left from an earlier build would measure old code.
if [[ -z "${IWPERF:-}" ]]; then
    scripts/build.sh # every binary the scripts run, iwperf among them
    IWPERF=${CARGO_TARGET_DIR:-target}/release/iwperf
fi
for t in iperf3 python3; do
    command -v "$t" >/dev/null || { echo "bench/afp-budget.sh: $t is missing (scripts/install-deps.sh)" >&2; exit 1; }
done
(($(nproc) >= 2)) || { echo "bench/afp-budget.sh: needs 2 CPUs, this machine has $(nproc)" >&2; exit 1; }
# shellcheck source=scripts/lib/lossnet.sh
source scripts/lib/lossnet.sh
# shellcheck source=scripts/lib/bg-end.sh
source scripts/lib/bg-end.sh
# shellcheck source=scripts/lib/iperf3-gbps.sh
source scripts/lib/iperf3-gbps.sh
lossnet_harness bench/afp-budget.sh afp-budget
fail() { lossnet_fail "$@"; }
lossnet_build "$IWPERF" iwperf
lossnet_up
lossnet_loss 0
echo "bench/afp-budget.sh: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); ${window} s windows; $(git rev-parse --short HEAD 2>/dev/null || echo '?')"

# sample FILE: the cpu0 and cpu1 lines of /proc/stat, then the sender veth's tx_packets.
sample() {
    { grep -E '^cpu[01] ' /proc/stat; ip netns exec "$LOSSNET_A" cat /sys/class/net/wcla/statistics/tx_packets; } >"$1"
}
# measure NAME: samples WINDOW seconds starting 1 s from now, into NAME.a and NAME.b.
measure() {
    sleep 1
    sample "$work/$1.a"
    sleep "$window"
    sample "$work/$1.b"
}

# serve NAME SETTLE LOG CMD...: starts the receiving side CMD (its output in LOG) and, SETTLE
# seconds later, the sampling NAME (measure), both in the background: pids in spid, mpid.
serve() {
    local name=$1 settle=$2 log=$3
    shift 3
    "$@" >"$log" 2>&1 &
    spid=$!
    pids+=("$spid")
    sleep "$settle"
    measure "$name" &
    mpid=$!
    pids+=("$mpid")
}

eal="--no-huge -m 256 --no-pci --no-telemetry --no-shconf --log-level=error"
serve warpcore 0.5 "$work/server.log" ip netns exec "$LOSSNET_B" timeout 120 "$IWPERF" write_bw \
    --ip 198.18.0.2 --mac "$LOSSNET_MAC_B" --timeout 60 --vdev net_af_packet0,iface=wclb \
    --eal="-l 0 $eal --file-prefix=wcbudget-s$$" -s 65536 -D "$run"
# The clients too in `pids` while they run (bg_run): a run stopped mid-way ends them.
bg_run ip netns exec "$LOSSNET_A" timeout 120 "$IWPERF" write_bw 198.18.0.2 --ip 198.18.0.1 \
    --mac "$LOSSNET_MAC_A" --timeout 60 --json "$work/bw.json" --vdev net_af_packet0,iface=wcla \
    --eal="-l 1 $eal --file-prefix=wcbudget-c$$" -s 65536 -D "$run" --report_gbits >"$work/client.log" 2>&1 || fail "iwperf write_bw client"
# Each process reaped leaves `pids` (scripts/lib/bg-end.sh): its pid is free for reuse.
reap() { # reap PID WHAT: waits for PID, takes it out of pids, fails naming WHAT if it failed
    local rc=0
    wait "$1" || rc=$?
    bg_forget "$1"
    ((rc == 0)) || fail "$2"
}
reap "$mpid" "sampling /proc/stat and the veth's tx_packets during iwperf write_bw"
reap "$spid" "iwperf write_bw server"
bw=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["results"][0]["bw"]["average"])' "$work/bw.json") ||
    fail "no write_bw result"

serve kernel 0.3 "$work/iperf3-s.log" ip netns exec "$LOSSNET_B" iperf3 -s -1 -A 0 -B 198.18.0.12
# iperf3 exits 0 on a refused connection, the reason in its JSON (scripts/lib/iperf3-gbps.sh).
irc=0
bg_run ip netns exec "$LOSSNET_A" iperf3 -c 198.18.0.12 -A 1 -t "$run" -J >"$work/iperf3.json" 2>"$work/iperf3.log" || irc=$?
iperf3_gbps "$work/iperf3.json" || fail "iperf3 -c (exit $irc): $IPERF3_NOTE"
((irc == 0)) || fail "iperf3 -c exited $irc"
reap "$mpid" "sampling /proc/stat and the veth's tx_packets during iperf3"
# A server that failed or hung after its client (scripts/lib/bg-end.sh): no figure.
brc=0
bg_end "$spid" "iperf3 -s -1" 30 || brc=$?
bg_forget "$spid"
((brc == 0)) || fail "$BG_NOTE"
kbw=$IPERF3_GBPS

python3 - "$work" "$bw" "$kbw" <<'PY'
import os, sys
work, bw, kbw = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
hz = os.sysconf("SC_CLK_TCK")

def load(name):
    cpus, frames = {}, 0
    for line in open(os.path.join(work, name)):
        f = line.split()
        if f[0].startswith("cpu"):
            # user nice system idle iowait irq softirq steal: the ticks of the window. Without
            # steal (the time the host ran another guest on this vCPU) the window was that
            # much shorter, and the frame rate and the busy shares that much higher, on a
            # shared VM. (guest and guest_nice are inside user and nice already.)
            v = list(map(int, f[1:9]))
            cpus[f[0]] = (v[0] + v[1], v[2] + v[5] + v[6], sum(v))
        else:
            frames = int(f[0])
    return cpus, frames

def per_frame(name):
    (ca, fa), (cb, fb) = load(name + ".a"), load(name + ".b")
    frames = fb - fa
    if frames <= 0:
        sys.exit("afp-budget: the sender's veth sent nothing during the window")
    us = lambda ticks: ticks / hz * 1e6 / frames
    out = {}
    for cpu in ("cpu0", "cpu1"):
        u = cb[cpu][0] - ca[cpu][0]
        k = cb[cpu][1] - ca[cpu][1]
        t = cb[cpu][2] - ca[cpu][2]
        out[cpu] = (us(u), us(k), (u + k) / t if t else 0.0)
    secs = (cb["cpu1"][2] - ca["cpu1"][2]) / hz
    return out, frames / secs if secs else 0.0

w, wfps = per_frame("warpcore")
k, kfps = per_frame("kernel")
print("| sender's frames/s | what | Gbit/s | CPU 0 (receiver): user / kernel us per frame, busy | CPU 1 (sender): user / kernel us per frame, busy |")
print("|---|---|---|---|---|")
def row(what, gb, fps, d):
    c0, c1 = d["cpu0"], d["cpu1"]
    print("| %.0f | %s | %.2f | %.2f / %.2f, %.0f %% | %.2f / %.2f, %.0f %% |" % (
        fps, what, gb, c0[0], c0[1], 100 * c0[2], c1[0], c1[1], 100 * c1[2]))
row("Warpcore: iwperf write_bw 64 KiB on net_af_packet", bw, wfps, w)
row("kernel: iperf3", kbw, kfps, k)
kern = w["cpu1"][1]
if kern > 0 and wfps > 0:
    cap = 1e6 / kern
    # The same mix of frames at the higher rate: write_bw scales with the frame rate.
    capbw = bw * cap / wfps
    print()
    print("Warpcore's sending CPU spends %.2f us in the kernel per frame: with its own work at zero it could send at most %.0f frames/s, about %.2f Gbit/s of write_bw (%.2fx iperf3's %.2f Gbit/s)." % (
        kern, cap, capbw, capbw / kbw, kbw))
PY
