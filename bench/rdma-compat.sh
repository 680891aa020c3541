#!/usr/bin/env bash
# What the drop-in libraries cost: Debian's unmodified ib_write_lat -R, ib_send_lat -R and
# ib_write_bw -R through scripts/with-warpcore, next to iwperf write_lat / send_lat /
# write_bw (Warpcore's native perftest) over the same net_memif, in the same run,
# interleaved round by round so the machine's load falls on both alike. Each side is one
# process pinned to its own CPU (server CPU 0, client CPU 1); all four use the caller-driven
# engine (the application's polls run it; the drop-in adds a background thread for what the
# application does not poll). Prints every round, then medians and the ratios.
#
#   bench/rdma-compat.sh [ROUNDS]      # default 3 rounds, about two minutes
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$(pwd)
rounds=${1:-3}
# A count of rounds that is not one (0, "three") ran none and printed medians of nothing
# ("-nanx") with exit status 0.
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "bench/rdma-compat.sh: ROUNDS '$rounds' is not a number of rounds (1 or more)" >&2; exit 2; }
scripts/build.sh || exit 1 # the drop-in libraries and iwperf, among the rest
case ${CARGO_TARGET_DIR:-target} in /*) tgt=$CARGO_TARGET_DIR ;; *) tgt=$root/${CARGO_TARGET_DIR:-target} ;; esac
IWPERF=$tgt/release/iwperf
WW=$root/scripts/with-warpcore
# shellcheck source=scripts/lib/bg-end.sh
source scripts/lib/bg-end.sh
# shellcheck source=scripts/lib/perftest-row.sh
source scripts/lib/perftest-row.sh
work=$(mktemp -d /tmp/rdma-compat-bench.XXXXXX)
sock=$work/memif.sock
# Every process started here, ended at exit: a run stopped or failed left its server (and
# its client) running for up to 120 s, each polling an engine core.
pids=()
cleanup() {
    bg_kill_all
    rm -rf "$work"
}
trap cleanup EXIT
lat_n=5000
bw_n=5000

# run NAME SERVER... :: CLIENT...: the client's output in $work/client.log; fails loudly.
# (Not in a command substitution, and the client in the background: their pids must reach
# the EXIT trap, which a subshell's never did.)
run() {
    local name=$1
    shift
    local s=()
    while [[ $1 != :: ]]; do s+=("$1"); shift; done
    shift
    # A perftest side whose clock calibration failed after its test
    # (scripts/lib/perftest-row.sh's perftest_clock_failed) runs the round's pair again, at
    # most twice, and says so.
    local clock=0 sp cp rc
    while :; do
        rm -f "$sock"
        timeout 120 taskset -c 0 "${s[@]}" >"$work/server.log" 2>&1 &
        sp=$! rc=0
        pids+=("$sp")
        # A server that never made its socket (it failed, or waits on something) is no run:
        # its client would only time out against nothing.
        for _ in $(seq 1 400); do [[ -S "$sock" ]] && break; sleep 0.05; done
        if [[ ! -S "$sock" ]]; then
            echo "FAIL $name: the server made no memif socket in 20 s" >&2
            tail -n 20 "$work/server.log" >&2
            exit 1
        fi
        sleep 0.3
        timeout 110 taskset -c 1 "$@" >"$work/client.log" 2>&1 &
        cp=$!
        pids+=("$cp")
        wait "$cp" || rc=$?
        if ((rc != 0)); then
            kill "$sp" 2>/dev/null
            wait "$sp" 2>/dev/null
            if ((clock < 2)) && perftest_clock_failed "$work/client.log"; then
                clock=$((clock + 1))
                echo "note $name: the client's perftest clock calibration failed ($(grep -m1 '^Correlation' "$work/client.log")): run again, $clock of 2" >&2
                continue
            fi
            echo "FAIL $name: the client exited $rc" >&2
            tail -n 20 "$work/client.log" "$work/server.log" >&2
            exit 1
        fi
        # A server that failed or hung after its client (scripts/lib/bg-end.sh): no figure.
        if ! bg_end "$sp" "the $name server" 30; then
            if ((clock < 2)) && perftest_clock_failed "$work/server.log"; then
                clock=$((clock + 1))
                echo "note $name: the server's perftest clock calibration failed ($(grep -m1 '^Correlation' "$work/server.log")): run again, $clock of 2" >&2
                continue
            fi
            echo "FAIL $name: $BG_NOTE" >&2
            tail -n 20 "$work/server.log" >&2
            exit 1
        fi
        pids=() # both ended: their pids are free for reuse, and not the cleanup's
        return 0
    done
}
# Result lines: perftest's and iwperf's tables share the layout. Latency: t_typical (the
# median, column 5); bandwidth: BW average in MB/s (column 4).
# iwperf prints an HdrHistogram table after perftest's: take the first table.
lat_of() { grep -m1 -A1 "#bytes" | tail -1 | awk '{print $5}'; }
bw_of() { grep -A1 "#bytes" | grep -v "#bytes" | head -1 | awk '{print $4}'; }

ww_srv=("$WW" --cores 0 --poll-mode caller --memif-server "$sock" --ip 10.78.0.1 --)
ww_cli=("$WW" --cores 1 --poll-mode caller --memif "$sock" --ip 10.78.0.2 --)
iw_srv=("$IWPERF" --memif "$sock" --cores 0 --poll-mode caller --ip 10.78.0.1)
iw_cli=("$IWPERF" --memif "$sock" --cores 1 --poll-mode caller --ip 10.78.0.2)

declare -a L_IW L_WW B_IW B_WW S_IW S_WW
for r in $(seq 1 "$rounds"); do
    run "iwperf write_lat" "${iw_srv[0]}" write_lat "${iw_srv[@]:1}" :: \
        "${iw_cli[0]}" write_lat "${iw_cli[@]:1}" -n $lat_n 10.78.0.1
    a=$(lat_of <"$work/client.log")
    run "with-warpcore ib_write_lat" "${ww_srv[@]}" ib_write_lat -R -n $lat_n :: \
        "${ww_cli[@]}" ib_write_lat -R -n $lat_n 10.78.0.1
    b=$(lat_of <"$work/client.log")
    run "iwperf send_lat" "${iw_srv[0]}" send_lat "${iw_srv[@]:1}" :: \
        "${iw_cli[0]}" send_lat "${iw_cli[@]:1}" -n $lat_n 10.78.0.1
    e=$(lat_of <"$work/client.log")
    run "with-warpcore ib_send_lat" "${ww_srv[@]}" ib_send_lat -R -n $lat_n :: \
        "${ww_cli[@]}" ib_send_lat -R -n $lat_n 10.78.0.1
    f=$(lat_of <"$work/client.log")
    run "iwperf write_bw" "${iw_srv[0]}" write_bw "${iw_srv[@]:1}" :: \
        "${iw_cli[0]}" write_bw "${iw_cli[@]:1}" -n $bw_n 10.78.0.1
    c=$(bw_of <"$work/client.log")
    run "with-warpcore ib_write_bw" "${ww_srv[@]}" ib_write_bw -R -n $bw_n :: \
        "${ww_cli[@]}" ib_write_bw -R -n $bw_n 10.78.0.1
    d=$(bw_of <"$work/client.log")
    # A figure of 0 (a median of nothing, a transfer of nothing) is no measurement either:
    # the ratio of the medians divided by it, or read 0.00x, with exit 0.
    for v in "iwperf write_lat=$a" "with-warpcore ib_write_lat=$b" "iwperf write_bw=$c" \
        "with-warpcore ib_write_bw=$d" "iwperf send_lat=$e" "with-warpcore ib_send_lat=$f"; do
        [[ ${v#*=} =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "FAIL ${v%%=*}: no figure in its result line (round $r: '${v#*=}')" >&2; exit 1; }
        awk -v x="${v#*=}" 'BEGIN { exit !(x > 0) }' || { echo "FAIL ${v%%=*}: a figure of 0 in its result line (round $r: '${v#*=}')" >&2; exit 1; }
    done
    L_IW+=("$a"); L_WW+=("$b"); B_IW+=("$c"); B_WW+=("$d"); S_IW+=("$e"); S_WW+=("$f")
    printf 'round %d: write_lat 2 B median: iwperf %s us, ib_write_lat %s us; send_lat: iwperf %s us, ib_send_lat %s us; write_bw 64 KiB: iwperf %s MB/s, ib_write_bw %s MB/s\n' \
        "$r" "$a" "$b" "$e" "$f" "$c" "$d"
done
median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
ml_iw=$(median "${L_IW[@]}"); ml_ww=$(median "${L_WW[@]}")
ms_iw=$(median "${S_IW[@]}"); ms_ww=$(median "${S_WW[@]}")
mb_iw=$(median "${B_IW[@]}"); mb_ww=$(median "${B_WW[@]}")
echo "== medians of $rounds rounds (load $(cut -d' ' -f1-3 /proc/loadavg))"
printf 'write_lat: iwperf %s us, with-warpcore ib_write_lat -R %s us: %.2fx\n' "$ml_iw" "$ml_ww" "$(awk -v a="$ml_ww" -v b="$ml_iw" 'BEGIN{print a/b}')"
printf 'send_lat:  iwperf %s us, with-warpcore ib_send_lat -R %s us: %.2fx\n' "$ms_iw" "$ms_ww" "$(awk -v a="$ms_ww" -v b="$ms_iw" 'BEGIN{print a/b}')"
printf 'write_bw:  iwperf %s MB/s, with-warpcore ib_write_bw -R %s MB/s: %.2fx\n' "$mb_iw" "$mb_ww" "$(awk -v a="$mb_ww" -v b="$mb_iw" 'BEGIN{print a/b}')"
