#!/usr/bin/env bash
# The connection rate (issue 11): wcconnrate's loop (a new queue pair, TCP handshake, MPA
# Request/Reply, one verified 64 B Send, graceful close, the queue pair destroyed) between
# two processes over net_memif, one caller-driven engine core each (server and client on the
# first two CPUs this process may use, scripts/lib/cpus.sh), next to the same loop over the
# kernel's TCP on loopback (connect, write, half-close, wait for the server's close; a
# server thread and the client threads in one process), interleaved round by round so the
# machine's load falls on both alike. Each round runs one at a time (--parallel 1) and
# PARALLEL at once (1 to 256; 1: only the one at a time). Prints every round, then the
# medians and the ratios. ROUNDS and SECONDS are whole numbers of at least 1: anything
# else is refused (exit 2) before a run.
#
#   bench/connrate.sh [ROUNDS] [SECONDS] [PARALLEL]   # default 3 rounds of 3 s, 8 at once
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$(pwd)
rounds=${1:-3}
secs=${2:-3}
par=${3:-8}
usage() { echo "connrate: $1 (bench/connrate.sh [ROUNDS] [SECONDS] [PARALLEL])" >&2; exit 2; }
whole='^[1-9][0-9]*$'
[[ $rounds =~ $whole ]] || usage "ROUNDS must be a whole number of at least 1, not '$rounds'"
[[ $secs =~ $whole ]] || usage "SECONDS must be a whole number of at least 1, not '$secs'"
[[ $par =~ $whole ]] && ((par <= 256)) || usage "PARALLEL must be 1 to 256, not '$par'"
counts=(1)
((par > 1)) && counts+=("$par")
# shellcheck source=scripts/lib/cpus.sh
source scripts/lib/cpus.sh
cpus_pick
[[ -z $CPUS_NOTE ]] || echo "connrate: $CPUS_NOTE" >&2
scripts/build.sh || exit 1 # every binary the scripts run, wcconnrate among them
case ${CARGO_TARGET_DIR:-target} in /*) tgt=$CARGO_TARGET_DIR ;; *) tgt=$root/${CARGO_TARGET_DIR:-target} ;; esac
CR=$tgt/release/wcconnrate
# shellcheck source=scripts/lib/bg-end.sh
source scripts/lib/bg-end.sh
work=$(mktemp -d /tmp/connrate-bench.XXXXXX)
sock=$work/memif.sock
# Every process started here, ended at exit: a run stopped or failed left its server (and
# its client) running for up to SECONDS + 90 s, each polling an engine core.
pids=()
cleanup() {
    bg_kill_all
    rm -rf "$work"
}
trap cleanup EXIT

field() { sed -nE "s/.* $1=([0-9.]+).*/\1/p" | head -1; }

# warpcore P: one memif run; the client's RESULT line in `line`; fails loudly. (Not in a
# command substitution, and the client in the background: their pids must reach the EXIT
# trap, which a subshell's never did.)
warpcore() {
    rm -f "$sock"
    timeout $((secs + 90)) "$CR" --memif "$sock" --cores "$CPU_A" >"$work/server.log" 2>&1 &
    local sp=$! cp rc=0
    pids+=("$sp")
    for _ in $(seq 1 100); do [[ -S "$sock" ]] && break; sleep 0.05; done
    timeout $((secs + 60)) "$CR" 198.18.0.2 --memif "$sock" --cores "$CPU_B" --secs "$secs" \
        --parallel "$1" >"$work/client.log" 2>&1 &
    cp=$!
    pids+=("$cp")
    wait "$cp" || rc=$?
    if ((rc != 0)); then
        echo "FAIL warpcore --parallel $1: the client exited $rc" >&2
        tail -n 5 "$work/client.log" "$work/server.log" >&2
        exit 1
    fi
    # A server that failed or hung after its client (scripts/lib/bg-end.sh): no figure.
    bg_end "$sp" "the wcconnrate server" 30 || { echo "FAIL warpcore: $BG_NOTE" >&2; tail -n 5 "$work/server.log" >&2; exit 1; }
    pids=() # both ended: their pids are free for reuse, and not the cleanup's
    local n v
    n=$(field conns <"$work/client.log")
    v=$(sed -nE 's/^RESULT connrate-server verified=([0-9]+)/\1/p' "$work/server.log")
    if [[ -z $n || $n != "$v" ]]; then
        echo "FAIL warpcore: the client made ${n:-?} connections, the server verified ${v:-?}" >&2
        exit 1
    fi
    line=$(grep "^RESULT connrate " "$work/client.log") || true
}

# kernel P: one kernel TCP run; its RESULT line in `line`; fails loudly.
kernel() {
    local kp rc=0
    timeout $((secs + 60)) "$CR" --kernel --secs "$secs" --parallel "$1" >"$work/kernel.log" 2>&1 &
    kp=$!
    pids+=("$kp")
    wait "$kp" || rc=$?
    if ((rc != 0)); then
        echo "FAIL kernel --parallel $1: exit $rc" >&2
        tail -n 5 "$work/kernel.log" >&2
        exit 1
    fi
    pids=() # ended: its pid is free for reuse, and not the cleanup's
    line=$(grep "^RESULT connrate " "$work/kernel.log") || true
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

declare -A R P50
echo "connrate: $rounds rounds of ${secs}s, ${counts[*]} at once (CPUs $CPU_A and $CPU_B); load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-6s %-9s %9s %12s %14s %14s\n' round stack parallel "conns/s" "life p50 us" "life p99 us"
for r in $(seq 1 "$rounds"); do
    for p in "${counts[@]}"; do
        for stack in warpcore kernel; do
            "$stack" "$p"
            rate=$(field rate <<<"$line")
            # A RESULT line without a rate measured nothing: printf would print it as 0. A
            # rate of 0 (no connection in SECONDS) is none either: the ratio divided by it ("infx").
            [[ $rate =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "FAIL $stack --parallel $p: no rate in '$line'" >&2; exit 1; }
            awk -v r="$rate" 'BEGIN { exit !(r > 0) }' || { echo "FAIL $stack --parallel $p: a rate of 0 in '$line'" >&2; exit 1; }
            R[$stack.$p]+="$rate "
            P50[$stack.$p]+="$(field cycle_p50_us <<<"$line") "
            printf '%-6s %-9s %9s %12.0f %14s %14s\n' "$r" "$stack" "$p" "$rate" \
                "$(field cycle_p50_us <<<"$line")" "$(field cycle_p99_us <<<"$line")"
        done
    done
done
echo
echo "| connections at once | Warpcore, one engine core a side (conns/s) | kernel TCP loopback (conns/s) | ratio | life median, Warpcore / kernel (us) |"
echo "|---|---|---|---|---|"
for p in "${counts[@]}"; do
    w=$(tr ' ' '\n' <<<"${R[warpcore.$p]}" | grep . | median)
    k=$(tr ' ' '\n' <<<"${R[kernel.$p]}" | grep . | median)
    wl=$(tr ' ' '\n' <<<"${P50[warpcore.$p]}" | grep . | median)
    kl=$(tr ' ' '\n' <<<"${P50[kernel.$p]}" | grep . | median)
    printf '| %s | %.0f | %.0f | %.2fx | %s / %s |\n' "$p" "$w" "$k" "$(awk -v a="$w" -v b="$k" 'BEGIN{print a/b}')" "$wl" "$kl"
done
echo "(medians of $rounds rounds; every Warpcore Send verified by the server, every kernel message by its server thread)"
