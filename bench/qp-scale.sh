#!/usr/bin/env bash
# Many QPs per engine core (issue 11 item 5), over net_memif between two iwperf processes
# (server and client on the first two CPUs this process may use, scripts/lib/cpus.sh; one
# caller-driven engine core each): the 64 B RDMA Write rate with 1, 16 and 1,024 QPs,
# interleaved round by round so the machine's load falls on all alike, each against the
# one-QP rate of its own round; then one run of -q 10000 (it must complete); and the memory
# per idle connected QP from bench/examples/qp_scale (1,024 idle connections, both ends in
# one process, RSS growth). A run whose report holds no message rate fails, and so does a
# qp_scale run whose output holds no memory: line (naming it, with its output's tail).
#
# ROUNDS is a whole number of at least 1 and MESSAGES of at least 1,024 (each of 1,024 QPs
# sends MESSAGES / 1,024): anything else is refused (exit 2) before a run.
#
#   bench/qp-scale.sh [ROUNDS] [MESSAGES]   # default 3 rounds, 12,000,000 messages a run
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$(pwd)
rounds=${1:-3}
msgs=${2:-12000000}
usage() { echo "qp-scale: $1 (bench/qp-scale.sh [ROUNDS] [MESSAGES])" >&2; exit 2; }
whole='^[1-9][0-9]*$'
[[ $rounds =~ $whole ]] || usage "ROUNDS must be a whole number of at least 1, not '$rounds'"
[[ $msgs =~ $whole ]] && ((msgs >= 1024)) ||
    usage "MESSAGES must be a whole number of at least 1024 (one per QP of the 1,024-QP run), not '$msgs'"
# shellcheck source=scripts/lib/cpus.sh
source scripts/lib/cpus.sh
cpus_pick
[[ -z $CPUS_NOTE ]] || echo "qp-scale: $CPUS_NOTE" >&2
scripts/build.sh || exit 1 # every binary the scripts run, iwperf among them
# qp_scale is an example of warpcore-bench, which scripts/build.sh does not build.
cargo build --release -q -p warpcore-bench --example qp_scale || exit 1
case ${CARGO_TARGET_DIR:-target} in /*) tgt=$CARGO_TARGET_DIR ;; *) tgt=$root/${CARGO_TARGET_DIR:-target} ;; esac
IW=$tgt/release/iwperf
# shellcheck source=scripts/lib/bg-end.sh
source scripts/lib/bg-end.sh
work=$(mktemp -d /tmp/qp-scale-bench.XXXXXX)
sock=$work/memif.sock
# Every process started here, ended at exit: a run stopped or failed left its iwperf server
# (and its client) running for up to 600 s, each polling an engine core.
pids=()
cleanup() {
    bg_kill_all
    rm -rf "$work"
}
trap cleanup EXIT

# rate QPS ITERS: one write_bw -s 64 run; the message rate (M msgs/s) in `m`; fails loudly.
# (Not in a command substitution, and the client in the background: their pids must reach
# the EXIT trap, which a subshell's never did.)
rate() {
    rm -f "$sock"
    timeout 600 "$IW" write_bw --memif "$sock" --cores "$CPU_A" --timeout 60 >"$work/server.log" 2>&1 &
    local sp=$! cp rc=0
    pids+=("$sp")
    for _ in $(seq 1 100); do [[ -S "$sock" ]] && break; sleep 0.05; done
    timeout 590 "$IW" write_bw 198.18.0.2 --memif "$sock" --cores "$CPU_B" --timeout 60 -s 64 \
        -q "$1" -n "$2" >"$work/client.log" 2>&1 &
    cp=$!
    pids+=("$cp")
    wait "$cp" || rc=$?
    if ((rc != 0)); then
        echo "FAIL write_bw -q $1: the client exited $rc" >&2
        tail -n 5 "$work/client.log" "$work/server.log" >&2
        exit 1
    fi
    # A server that failed or hung after its client (scripts/lib/bg-end.sh): no figure.
    bg_end "$sp" "the iwperf write_bw -q $1 server" 30 || { echo "FAIL write_bw -q $1: $BG_NOTE" >&2; tail -n 5 "$work/server.log" >&2; exit 1; }
    pids=() # both ended: their pids are free for reuse, and not the cleanup's
    # The message rate, the fifth column of the row under the "#bytes" header: a report
    # without one (or with no positive rate there) measured nothing, and fails.
    m=$(grep -m1 -A1 "#bytes" "$work/client.log" | tail -n +2 | awk '{print $5}')
    if ! awk -v m="$m" 'BEGIN { exit !(m ~ /^[0-9]+(\.[0-9]+)?$/ && m > 0) }'; then
        echo "FAIL write_bw -q $1: no message rate in the client's report (got '${m}')" >&2
        tail -n 5 "$work/client.log" >&2
        exit 1
    fi
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

echo "qp-scale: $rounds rounds, $msgs 64 B Writes a run over net_memif; load $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A R RATIO
printf '%-6s %8s %12s %10s\n' round QPs "M msgs/s" "x one QP"
for r in $(seq 1 "$rounds"); do
    one=""
    for q in 1 16 1024; do
        rate "$q" $((msgs / q))
        [[ $q == 1 ]] && one=$m
        x=$(awk -v a="$m" -v b="$one" 'BEGIN{printf "%.3f", a/b}')
        R[$q]+="$m "
        RATIO[$q]+="$x "
        printf '%-6s %8s %12s %10s\n' "$r" "$q" "$m" "$x"
    done
done
echo
echo "| QPs | 64 B Write rate, M msgs/s (median) | ratio to the one-QP rate of the same round (median) |"
echo "|---|---|---|"
for q in 1 16 1024; do
    printf '| %s | %s | %sx |\n' "$q" "$(tr ' ' '\n' <<<"${R[$q]}" | grep . | median)" \
        "$(tr ' ' '\n' <<<"${RATIO[$q]}" | grep . | median)"
done
echo
t0=$(date +%s.%N)
rate 10000 200
echo "write_bw -q 10000 -s 64 -n 200 (2,000,000 Writes over 10,000 connections): completed, $m M msgs/s, $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s with set-up and teardown"
echo
# The memory per idle QP: bounded as the runs above are (a hung qp_scale held the script
# forever), in the background for the EXIT trap, and a report without its memory: line (a
# panic, a kill) fails naming what was missing, with the tail of its output.
timeout 600 "$tgt/release/examples/qp_scale" 1024 1 1000 >"$work/qp_scale.log" 2>&1 &
qp=$! rc=0
pids+=("$qp")
wait "$qp" || rc=$?
pids=()
if ! grep '^memory:' "$work/qp_scale.log"; then
    echo "FAIL qp_scale 1024 1 1000: no 'memory:' line in its output (exit $rc$( ((rc == 124)) && echo ", timed out after 600 s"))" >&2
    tail -n 5 "$work/qp_scale.log" >&2
    exit 1
fi
((rc == 0)) || { echo "FAIL qp_scale 1024 1 1000: exited $rc" >&2; tail -n 5 "$work/qp_scale.log" >&2; exit 1; }
