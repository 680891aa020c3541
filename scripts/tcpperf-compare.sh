#!/usr/bin/env bash
# tcpperf over net_memif between two processes (Warpcore's user-space TCP on DPDK) against
# kernel TCP over loopback (iperf3 for throughput, qperf tcp_lat for request/response latency),
# in the same run, plus tcpperf over the in-memory link for reference. Prints a table with the
# ratios. Kernel tools run on the loopback of a private namespace (wcnet-cmp-*) when root.
#
#   scripts/tcpperf-compare.sh            # the long comparison (about 2 minutes)
#   scripts/tcpperf-compare.sh --short    # the short one scripts/test-net.sh runs (~30 s)
#
# Environment: TCPPERF (path of a built tcpperf; default: build it with --release),
# RESULTS (file to append the RESULT lines to).
#
# Exits non-zero, with a line naming it, when a run fails: a client, and also a server after
# its client is done (the memif server, iperf3 -s -1, tcpperf kernel-server: each must exit
# 0 within 30 s; one that failed or hung measured nothing worth a figure). A figure the
# tools did not print reads n/a in the table, and so does a ratio on it.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

short=0
[[ "${1:-}" == "--short" ]] && short=1
if ((short)); then
    rr_iter=20000 bulk_bytes=$((512 << 20)) kern_s=3
else
    rr_iter=200000 bulk_bytes=$((4 << 30)) kern_s=10
fi

if [[ -z "${TCPPERF:-}" ]]; then
    scripts/build.sh # every binary the scripts run, tcpperf among them
    case ${CARGO_TARGET_DIR:-target} in /*) tgt=$CARGO_TARGET_DIR ;; *) tgt=$root/${CARGO_TARGET_DIR:-target} ;; esac
    TCPPERF=$tgt/release/tcpperf
fi
for tool in iperf3 qperf ss; do
    command -v "$tool" >/dev/null || { echo "compare: $tool missing (scripts/install-dpdk.sh)" >&2; exit 1; }
done

id=$$
work=$(mktemp -d "/tmp/wcnet-cmp-$id.XXXX")
sock=$work/memif.sock
ns=""
pids=()
cleanup() {
    bg_kill_all
    wait 2>/dev/null || true
    [[ -n "$ns" ]] && ip netns del "$ns" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

eal="--no-huge -m 512 --no-shconf --no-pci --no-telemetry --log-level=error"
# shellcheck source=scripts/lib/cpus.sh
source scripts/lib/cpus.sh
# shellcheck source=scripts/lib/bg-end.sh
source scripts/lib/bg-end.sh
# shellcheck source=scripts/lib/iperf3-gbps.sh
source scripts/lib/iperf3-gbps.sh
cpus_pick
[[ -z $CPUS_NOTE ]] || echo "compare: NOTE: $CPUS_NOTE (the figures below suffer)"
result() { grep -h '^RESULT' "$@" | tee -a "${RESULTS:-/dev/null}"; }
# field KEY: KEY's value on the first line of stdin that has it; n/a when none does (an
# empty figure printed as a blank in the table).
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" | awk 'NR == 1 { v = $0 } END { print (v == "" ? "n/a" : v) }'; }
# server_end PID WHAT LOG: the server's end after its client (scripts/lib/bg-end.sh); a
# failed, crashed or hung server fails the comparison.
server_end() {
    # Ended either way: the EXIT cleanup must not kill its pid, which may be reused by now.
    local rc=0
    bg_end "$1" "$2" 30 || rc=$?
    bg_forget "$1"
    ((rc)) || return 0
    echo "compare: FAILED: $BG_NOTE" >&2
    grep -v '^EAL' "$3" | tail -n 15 >&2
    exit 1
}
# server_stop PID WHAT LOG: the same for a server that serves until stopped (qperf's): one
# that had already exited (a second qperf that could not bind its port exits 1, and its
# client measured another process's server) fails the comparison.
server_stop() {
    local rc=0
    bg_stop "$1" "$2" 10 || rc=$?
    bg_forget "$1"
    ((rc)) || return 0
    echo "compare: FAILED: $BG_NOTE" >&2
    tail -n 15 "$3" >&2
    exit 1
}

echo "== tcpperf over net_memif (two processes, cores $CPU_A and $CPU_B)"
rm -f "$sock"
"$TCPPERF" server --eal "-l $CPU_A $eal --file-prefix=wcnet-cmps$id" \
    --vdev "net_memif0,role=server,socket=$sock,socket-abstract=no,rsize=10" \
    --ip 198.18.0.1/24 --tests 2 >"$work/server.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do [[ -S "$sock" ]] && break; sleep 0.1; done
[[ -S "$sock" ]] || { echo "compare: memif server socket $sock did not appear" >&2; cat "$work/server.log"; exit 1; }
# One client process runs both tests (two TCP connections over one memif connection): memif
# reconnects and disconnects while the peer polls are what DPDK 22.11's net_memif handles worst.
# Each client too in `pids` while it runs (scripts/lib/bg-end.sh's bg_run): a comparison
# stopped mid-run ends it, where a foreground client ran on for up to its timeout.
bg_run timeout 300 "$TCPPERF" client --eal "-l $CPU_B $eal --file-prefix=wcnet-cmpc$id" \
    --vdev "net_memif0,role=client,socket=$sock,socket-abstract=no,rsize=10" \
    --ip 198.18.0.2/24 --server 198.18.0.1 --test rr,bulk --size 64 --iterations "$rr_iter" \
    --bytes "$bulk_bytes" >"$work/memif.log" 2>&1 || { cat "$work/memif.log" "$work/server.log"; exit 1; }
server_end "${pids[0]}" "the memif tcpperf server" "$work/server.log"
pids=()
result "$work/memif.log"
memif_p50=$(grep -h '^RESULT.*test=rr' "$work/memif.log" | field p50_us)
memif_p99=$(grep -h '^RESULT.*test=rr' "$work/memif.log" | field p99_us)
memif_gbps=$(grep -h '^RESULT.*test=bulk' "$work/memif.log" | field gbps)
memif_cpu=$(grep -h '^RESULT.*test=bulk' "$work/memif.log" | field cpu_share)

echo "== tcpperf over the in-memory link (one process)"
bg_run "$TCPPERF" memory --test rr,bulk --iterations "$rr_iter" --bytes "$bulk_bytes" >"$work/mem.log" 2>&1
result "$work/mem.log"
mem_p50=$(grep -h '^RESULT.*test=rr' "$work/mem.log" | field p50_us)
mem_gbps=$(grep -h '^RESULT.*test=bulk' "$work/mem.log" | field gbps)

echo "== kernel TCP over loopback (iperf3, qperf tcp_lat)"
run=()
host=127.0.0.1
if [[ $(id -u) -eq 0 ]]; then
    ns=wcnet-cmp-$id
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    run=(ip netns exec "$ns")
fi
port=$((20000 + id % 20000))
# wait_port PORT: until a TCP listener is on PORT (at most 10 s), without connecting to it
# (a probe would be iperf3 -1's one test, or one of tcpperf's). A fixed sleep loses the
# race on a busy machine: the client is refused and the comparison fails.
wait_port() {
    for _ in $(seq 1 200); do
        [[ -n $("${run[@]}" ss -Hltn "sport = :$1") ]] && return 0
        sleep 0.05
    done
    echo "compare: nothing listens on port $1 after 10 s" >&2
    return 1
}
"${run[@]}" iperf3 -s -1 -p "$port" >"$work/iperf3-s.log" 2>&1 &
iperf3_srv=$!
pids+=("$iperf3_srv")
wait_port "$port"
irc=0
bg_run "${run[@]}" iperf3 -c "$host" -p "$port" -t "$kern_s" -J >"$work/iperf3.json" || irc=$?
server_end "$iperf3_srv" "iperf3 -s -1" "$work/iperf3-s.log"
# iperf3 -J exits 0 on a refused connection, the reason in its report (scripts/lib/iperf3-gbps.sh).
iperf3_gbps "$work/iperf3.json" || { echo "compare: FAILED: iperf3 -c (exit $irc): $IPERF3_NOTE" >&2; exit 1; }
kern_gbps=$IPERF3_GBPS
"${run[@]}" qperf -lp "$((port + 1))" >"$work/qperf-s.log" 2>&1 &
qperf_srv=$!
pids+=("$qperf_srv")
wait_port "$((port + 1))"
bg_run "${run[@]}" qperf -lp "$((port + 1))" "$host" -t "$kern_s" -m 64 tcp_lat >"$work/qperf.log"
server_stop "$qperf_srv" "the qperf server" "$work/qperf-s.log"
# qperf prints the one-way latency (half the round trip): double it to compare round trips.
kern_rtt=$(awk '/latency/ && !done {v=$3; u=$4; if (u=="ns") v/=1000; if (u=="ms") v*=1000; printf "%.2f", 2*v; done=1}
    END {if (!done) print "n/a"}' "$work/qperf.log")
# The same tcpperf tests over kernel sockets: same protocol, clock and histogram.
"${run[@]}" "$TCPPERF" kernel-server --listen "$host:$((port + 2))" --tests 2 >"$work/ks.log" 2>&1 &
ks_srv=$!
pids+=("$ks_srv")
wait_port "$((port + 2))"
bg_run "${run[@]}" "$TCPPERF" kernel-client --server "$host:$((port + 2))" --test rr,bulk --size 64 \
    --iterations "$rr_iter" --bytes "$bulk_bytes" >"$work/kernel.log"
server_end "$ks_srv" "tcpperf kernel-server" "$work/ks.log"
result "$work/kernel.log"
ktp_p50=$(grep -h '^RESULT.*test=rr' "$work/kernel.log" | field p50_us)
ktp_gbps=$(grep -h '^RESULT.*test=bulk' "$work/kernel.log" | field gbps)
echo "RESULT mode=kernel-loopback test=bulk tool=iperf3 gbps=$kern_gbps" | tee -a "${RESULTS:-/dev/null}"
echo "RESULT mode=kernel-loopback test=rr tool=qperf size=64 rtt_us=$kern_rtt" | tee -a "${RESULTS:-/dev/null}"

load=$(cut -d' ' -f1-3 /proc/loadavg)
# ratio A B: A / B, or n/a when either is not a positive figure (n/a, empty, 0).
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { n = "^[0-9]+([.][0-9]+)?$"; if (a ~ n && b ~ n && a > 0 && b > 0) printf "%.2f\n", a / b; else print "n/a" }'; }
cat <<TABLE

                                  request/response 64 B          bulk throughput
  tcpperf, net_memif (2 procs)    p50 rtt ${memif_p50} us (p99 ${memif_p99} us)   ${memif_gbps} Gbit/s (client got ${memif_cpu} of a core)
  tcpperf, in-memory link         p50 rtt ${mem_p50} us                  ${mem_gbps} Gbit/s
  kernel loopback, tcpperf        p50 rtt ${ktp_p50} us                  ${ktp_gbps} Gbit/s
  kernel loopback, qperf/iperf3   rtt ${kern_rtt} us (qperf x2)          ${kern_gbps} Gbit/s
  memif / kernel (tcpperf both)   latency x$(ratio "$memif_p50" "$ktp_p50")                  throughput x$(ratio "$memif_gbps" "$ktp_gbps")
  memif / kernel (qperf, iperf3)  latency x$(ratio "$memif_p50" "$kern_rtt")                  throughput x$(ratio "$memif_gbps" "$kern_gbps")
  (goal: latency ratio <= 0.5, throughput ratio >= 1)
  load average at the end: $load on $(nproc) cores (busy-polling pairs suffer most from other jobs)
TABLE
