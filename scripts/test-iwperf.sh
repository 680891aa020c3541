#!/usr/bin/env bash
# A short run of every available iwperf test between two processes over DPDK net_memif
# (no hugepages), with --verify, in both directions:
#   pass 1: the iwperf server is the memif server, data client -> server (latency tests
#           ping-pong, so both ways);
#   pass 2: roles swapped (the iwperf server is the memif client) and the bandwidth tests
#           run bidirectionally (-b), so data flows both ways at once.
# Then jumbo frames (MTU 9000), RFC 7306 (atomics of both types, Write with Immediate Data), inline posts, the
# three poll modes, perftest's flags (-F -d -x -R -c -e -Q -l -r -o, --out_json read back by
# Python), and the error paths users hit: a refused option, a missing server, a
# busy memif socket, bad EAL arguments. Exits non-zero on the first failure; prints "N passed, N failed".
#
#   scripts/test-iwperf.sh          # about a minute
#   IWPERF=target/debug/iwperf scripts/test-iwperf.sh
#   IWPERF_SERVER_GRACE=5 scripts/test-iwperf.sh   # seconds a server may outlive its client (20)
set -uo pipefail
cd "$(dirname "$0")/.."

if [[ -z "${IWPERF:-}" ]]; then
    scripts/build.sh || exit 1 # every binary the scripts run, iwperf among them
    case ${CARGO_TARGET_DIR:-target} in /*) tgt=$CARGO_TARGET_DIR ;; *) tgt=$(pwd)/${CARGO_TARGET_DIR:-target} ;; esac
    IWPERF=$tgt/release/iwperf
fi
iters=${IWPERF_ITERS:-300}
grace=${IWPERF_SERVER_GRACE:-20}
work=$(mktemp -d /tmp/iwperf-test.XXXXXX)
sock=$work/memif.sock
server_pid=""
cleanup() {
    if [[ -n "$server_pid" ]]; then kill "$server_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

# shellcheck source=lib/tally.sh
. scripts/lib/tally.sh
# shellcheck source=lib/perftest-row.sh
. scripts/lib/perftest-row.sh

server_args=()
# pair NAME SERVER_MEMIF_ROLE TEST ARGS...: server and client processes; both must exit 0
# and the client must end with "verify: ok, N messages checked", N > 0 (a mismatch, or
# nothing checked, prints "verify: FAILED: ..." and exits 3; scripts/judges/verify.sh shows
# planted defects caught).
pair() {
    local name=$1 srole=$2 test=$3
    shift 3
    local crole=client
    [[ $srole == client ]] && crole=server
    rm -f "$sock" "$work"/*.log
    local server_cmd=("$IWPERF" "$test" --timeout 20 "${server_args[@]}"
        --vdev "net_memif0,role=$srole,socket=$sock,socket-abstract=no")
    local client_cmd=("$IWPERF" "$test" 198.18.0.2 --verify --timeout 20
        --vdev "net_memif0,role=$crole,socket=$sock,socket-abstract=no" "$@")
    # The memif server process starts first (a memif client only connects to an existing
    # socket); the iwperf client retries its connection until the iwperf server listens.
    local client_pid
    if [[ $srole == server ]]; then
        "${server_cmd[@]}" >"$work/server.log" 2>&1 &
        server_pid=$!
        for _ in $(seq 1 100); do [[ -S "$sock" ]] && break; sleep 0.05; done
        timeout 60 "${client_cmd[@]}" >"$work/client.log" 2>&1 &
        client_pid=$!
    else
        timeout 60 "${client_cmd[@]}" >"$work/client.log" 2>&1 &
        client_pid=$!
        for _ in $(seq 1 100); do [[ -S "$sock" ]] && break; sleep 0.05; done
        "${server_cmd[@]}" >"$work/server.log" 2>&1 &
        server_pid=$!
    fi
    if ! wait "$client_pid"; then
        kill "$server_pid" 2>/dev/null
        server_pid=""
        bad "$name"
    fi
    # A server still running $grace s after its client keeps its pid in server_pid: bad exits,
    # and the EXIT trap stops it (with its pid forgotten first, it ran on, polling a core).
    timeout "$grace" tail --pid="$server_pid" -f /dev/null || bad "$name (server still ran $grace s after its client)"
    if ! wait "$server_pid"; then
        server_pid=""
        bad "$name (server)"
    fi
    server_pid=""
    grep -Eq "^verify: ok, [1-9][0-9]* messages checked$" "$work/client.log" \
        || bad "$name (no clean verification line)"
    # The table's row by its figures (scripts/lib/perftest-row.sh): the -s and -n asked for
    # (the iterations of all -q queue pairs, as perftest counts them), positive finite
    # bandwidth or latencies; before, a "#bytes" header alone passed.
    local size="" n="" q="" a
    for a in "$@"; do
        case $a in
            -s) size=next ;; -n) n=next ;; -q) q=next ;;
            *) [[ $size != next ]] || size=$a; [[ $n != next ]] || n=$a; [[ $q != next ]] || q=$a ;;
        esac
    done
    perftest_row "$work/client.log" "$test" "${size:-$(perftest_default_size "$test")}" "$((${n:-0} * ${q:-1}))" ||
        bad "$name (table: $PERFTEST_NOTE)"
    grep -q "HdrHistogram percentiles" "$work/client.log" || bad "$name (no histogram)"
    ok "$name: $PERFTEST_NOTE"
}

for t in write_lat read_lat send_lat; do
    pair "$t memif-server->client" server "$t" -s 64 -n "$iters"
    pair "$t swapped memif roles" client "$t" -s 4000 -n "$iters"
done
for t in write_bw read_bw send_bw; do
    pair "$t" server "$t" -s 65536 -n "$((iters * 4))"
    pair "$t -b swapped memif roles" client "$t" -b -s 8192 -n "$((iters * 4))"
done
pair "write_bw -q 2 -t 16" server write_bw -q 2 -t 16 -s 1000 -n "$iters"
# RFC 7306: atomics (each original value and the final counter word checked), Writes with
# Immediate Data (immediate values and data checked), and inline posts (-I), both ways.
for ty in FETCH_AND_ADD CMP_AND_SWAP; do
    pair "atomic_lat -A $ty" server atomic_lat -A "$ty" -n "$iters"
    pair "atomic_bw -A $ty swapped memif roles" client atomic_bw -A "$ty" -q 2 -n "$((iters * 4))"
done
pair "write_lat --write_with_imm" server write_lat --write_with_imm -s 64 -n "$iters"
pair "write_bw --write_with_imm -b swapped memif roles" client write_bw --write_with_imm -b -s 8192 -n "$((iters * 4))"
pair "write_lat -I 64" client write_lat -I 64 -s 64 -n "$iters"
pair "send_bw -I 256 -b" server send_bw -I 256 -b -s 256 -n "$((iters * 4))"
# RFC 6581 peer-to-peer: the client sends the RTR type asked for first (the server accepts
# all three).
pair "write_bw --p2p send" server write_bw --p2p send -s 4096 -n "$iters"
grep -q "p2p Send RTR" "$work/client.log" || bad "write_bw --p2p send (banner)"
pair "read_lat --p2p read swapped memif roles" client read_lat --p2p read -s 64 -n "$iters"
grep -q "p2p Read RTR" "$work/client.log" || bad "read_lat --p2p read (banner)"
grep -q "p2p Read RTR (responder)" "$work/server.log" || bad "read_lat --p2p read (server banner)"
# The three ways to run the engine core.
server_args=(--poll-mode busy)
pair "write_lat --poll-mode busy" server write_lat --poll-mode busy -s 64 -n "$iters"
server_args=(--poll-mode thread)
pair "send_bw --poll-mode thread" client send_bw --poll-mode thread -s 4096 -n "$iters"
# No IPv4/TCP checksums on memif when both sides say so (byte-exact under --verify).
server_args=(--no-csum)
pair "write_bw -b --no-csum" server write_bw -b --no-csum -s 65536 -n "$iters"
# Jumbo frames on net_memif (DPDK 22.11 reports 1518-octet frames at most; its data path
# chains descriptors): both sides at MTU 9000, and the segments must really be jumbo: the
# sender's TCP sent fewer than one segment per 4,000 octets of payload.
server_args=(--mtu 9000)
pair "write_bw --mtu 9000 swapped memif roles" client write_bw --mtu 9000 -s 65536 -n "$((iters * 4))"
grep -Eq "Mtu +: 9000" "$work/client.log" || bad "write_bw --mtu 9000 (banner)"
segs=$(sed -nE 's/.*TCP \(this side\): ([0-9]+) segments sent.*/\1/p' "$work/client.log")
payload=$((iters * 4 * 65536))
[[ -n "$segs" ]] && ((segs * 4000 < payload)) ||
    bad "write_bw --mtu 9000: ${segs:-no} segments for $payload octets (not jumbo)"
ok "write_bw --mtu 9000: $segs segments for $payload octets"
server_args=()
# perftest's habit: the run flags given to both sides. The server holds the client's run to
# its own (a contradiction is refused below); the same values pass.
server_args=(-b -q 2 -t 16 -s 8192 -n "$iters" --verify)
pair "write_bw with the same run flags on both sides" server write_bw -b -q 2 -t 16 -s 8192 -n "$iters"
server_args=()

# perftest's flags (docs/iwperf.md has the table): the device flags perftest scripts pass,
# event-driven completions with completion moderation, post lists and a receive depth, and
# perftest's JSON report, which Python must load with perftest's keys.
pair "write_bw -F -d warpcore0 -x 0 -i 1 -R -c RC" server write_bw -F -d warpcore0 -x 0 -i 1 \
    -R -c RC -s 65536 -n "$((iters * 4))"
pair "send_bw -e -Q 4 -l 4 -r 64" server send_bw -e -Q 4 -l 4 -r 64 -s 4096 -n "$((iters * 4))"
pair "read_lat -e -o 4 --out_json" client read_lat -e -o 4 -s 64 -n "$iters" --out_json \
    --out_json_file "$work/read_lat.json"
if python3 - "$work/read_lat.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
info, res = d["test_info"], d["results"]
assert info["test"] == "RDMA_Read_Latency_Test", info
assert info["Transport_type"] == "IW" and info["Connection_type"] == "RC", info
assert info["Outstand_reads"] == 4, info
for k in ("MsgSize", "n_iterations", "t_min", "t_max", "t_typical", "t_avg", "t_stdev",
          "percentile_99", "percentile_99.9"):
    assert isinstance(res[k], (int, float)), (k, res)
print("perftest keys: test_info %d keys, results %s" % (len(info), sorted(res)))
PY
then
    ok "--out_json loads in Python with perftest's keys"
else
    bad "--out_json report"
fi

# Error paths: each must exit non-zero with a clear message.
expect_fail() {
    local name=$1 pattern=$2
    shift 2
    local out
    out=$(timeout 30 "$@" 2>&1)
    local rc=$?
    if [[ $rc -ne 0 && $rc -ne 124 ]] && grep -qi -- "$pattern" <<<"$out"; then
        ok "$name: $(grep -i -m1 -- "$pattern" <<<"$out")"
    else
        echo "$out" >"$work/expect.log"
        bad "$name (rc $rc)"
    fi
}
expect_fail "atomics on 16 octets refused" "-s 8 only" "$IWPERF" atomic_lat -s 16 --loopback
expect_fail "-d names the one device" "this process has one RDMA device, warpcore0" \
    "$IWPERF" write_bw -d mlx5_0 --loopback
expect_fail "-c other than RC refused" "reliable connected queue pairs only" \
    "$IWPERF" write_bw -c UD --loopback
expect_fail "--perftest refuses what it cannot honour" "--perftest cannot honour -b" \
    "$IWPERF" write_bw --perftest -b
rm -f "$sock"
expect_fail "missing server" "no iwperf server answered" "$IWPERF" write_lat 198.18.0.2 --timeout 3 \
    --vdev "net_memif0,role=server,socket=$sock,socket-abstract=no"
expect_fail "--no-csum refused off memif" "net_memif port between two processes only" \
    "$IWPERF" write_lat --loopback --no-csum
expect_fail "bad EAL arguments" "EAL initialisation failed" "$IWPERF" write_lat --vdev "net_nosuchdriver0"
# A server given -s 4096 refuses a client running -s 65536 (before, it followed the client's
# hello silently), and says whom it refused.
rm -f "$sock"
"$IWPERF" write_bw -s 4096 --timeout 20 --memif "$sock" >"$work/mismatch.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 100); do [[ -S "$sock" ]] && break; sleep 0.05; done
expect_fail "a server's -s contradicting the client's" \
    "-s: this server was given 4096, the client runs -s 65536" \
    "$IWPERF" write_bw 198.18.0.2 -s 65536 -n 10 --timeout 10 --memif "$sock"
grep -q "iwperf: refused the client at 198.18.0.1: -s: this server was given 4096" "$work/mismatch.log" ||
    bad "a server's -s contradicting the client's (the server's own line)"
kill "$server_pid" 2>/dev/null
wait "$server_pid" 2>/dev/null
server_pid=""
# A live memif server on the socket: a second server must refuse it, not steal it.
rm -f "$sock"
"$IWPERF" write_lat --memif "$sock" >"$work/busy.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 100); do [[ -S "$sock" ]] && break; sleep 0.05; done
expect_fail "busy memif socket" "is busy" "$IWPERF" write_lat --memif "$sock"
kill "$server_pid" 2>/dev/null
wait "$server_pid" 2>/dev/null
server_pid=""

echo "test-iwperf: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
