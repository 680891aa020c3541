#!/usr/bin/env bash
# Warpcore's main demo: perftest-style RDMA benchmarks between two processes over DPDK
# net_memif, no hugepages, no NIC.
#
# Installs what is missing (Debian), builds iwperf and iwdump in release mode, then for each
# of write_lat, read_lat, write_bw and send_bw starts an `iwperf` server process and an
# `iwperf` client process joined by a memif socket, with --verify (every message the
# receiving side checks carries a per-iteration pattern), and prints perftest's table and
# the HdrHistogram percentile block. The write_lat server records its traffic with
# --capture; iwdump decodes that capture at the end.
#
#   scripts/demo.sh                 # about a minute after the build
#   DEMO_LAT_ITERS=20000 DEMO_BW_ITERS=20000 scripts/demo.sh
set -euo pipefail
# It takes no argument: one it ignored installed packages and ran the demo.
case $# in
    0) ;;
    *)
        if [[ $1 == -h || $1 == --help ]] && (($# == 1)); then
            echo "usage: scripts/demo.sh (no arguments; DEMO_LAT_ITERS and DEMO_BW_ITERS in the environment):"
            sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
            exit 0
        fi
        echo "demo: takes no arguments (got '$*'); usage: scripts/demo.sh --help" >&2
        exit 2
        ;;
esac
cd "$(dirname "$0")/.."

lat_iters=${DEMO_LAT_ITERS:-3000}
bw_iters=${DEMO_BW_ITERS:-5000}

scripts/install-deps.sh --demo
cargo build --release -q -p warpcore-apps --bin iwperf --bin iwdump
# Where cargo put it: $CARGO_TARGET_DIR (relative to the checkout) when set, else target/.
case ${CARGO_TARGET_DIR:-target} in /*) tgt=$CARGO_TARGET_DIR ;; *) tgt=$(pwd)/${CARGO_TARGET_DIR:-target} ;; esac
iwperf=$tgt/release/iwperf
iwdump=$tgt/release/iwdump

# shellcheck source=scripts/lib/cpus.sh
source scripts/lib/cpus.sh
cpus_pick
[[ -z $CPUS_NOTE ]] || echo "demo: $CPUS_NOTE; the latencies then include the scheduler's hand-offs"

work=$(mktemp -d /tmp/iwperf-demo.XXXXXX)
sock=$work/memif.sock
server_pid=""
cleanup() {
    if [[ -n "$server_pid" ]]; then kill "$server_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

t0=$SECONDS
# run TEST ARGS...: one server process and one client process over a fresh memif socket.
run() {
    local test=$1
    shift
    printf '\n######## iwperf %s %s (server and client processes over net_memif)\n' "$test" "$*"
    rm -f "$sock"
    local extra=()
    if [[ "$test" == write_lat ]]; then extra=(--capture "$work/write_lat.pcapng"); fi
    # One CPU per process, each process one busy-polling thread that runs the application
    # and its engine core (iwperf's default --poll-mode caller), so the two processes never
    # compete for one CPU and no hand-off waits for the scheduler (where the machine has
    # two CPUs for us: scripts/lib/cpus.sh).
    "$iwperf" "$test" --memif "$sock" --cores "$CPU_A" "${extra[@]}" >"$work/server-$test.log" 2>&1 &
    server_pid=$!
    for _ in $(seq 1 100); do [[ -S "$sock" ]] && break; sleep 0.05; done
    if ! timeout 90 "$iwperf" "$test" --memif "$sock" 198.18.0.2 --cores "$CPU_B" --verify "$@"; then
        echo "demo: iwperf $test failed; server log:" >&2
        cat "$work/server-$test.log" >&2
        exit 1
    fi
    if ! timeout 20 tail --pid="$server_pid" -f /dev/null; then
        echo "demo: the $test server did not exit" >&2
        exit 1
    fi
    wait "$server_pid" || { echo "demo: the $test server failed:" >&2; cat "$work/server-$test.log" >&2; exit 1; }
    server_pid=""
}

run write_lat -s 64 -n "$lat_iters"
run read_lat -s 64 -n "$lat_iters"
run write_bw -s 65536 -n "$bw_iters"
run send_bw -s 65536 -n "$bw_iters"

printf '\n######## iwdump on the write_lat server capture (%s)\n' "$(grep -o '[0-9]* packets' "$work/server-write_lat.log" || true)"
"$iwdump" "$work/write_lat.pcapng"
printf '\ndemo: done in %d s (after the build)\n' $((SECONDS - t0))
