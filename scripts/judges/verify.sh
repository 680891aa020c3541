#!/usr/bin/env bash
# Judge of iwperf --verify (issue 16): a judge that cannot fail proves nothing, so each
# planted defect must make verification fail, and each clean run must pass.
#
# Between two iwperf processes over DPDK net_memif (no hugepages), as scripts/test-iwperf.sh
# runs them, with --verify:
#   clean write_bw, clean send_bw        both processes exit 0, the client prints
#                                        "verify: ok, N messages checked" with N > 0;
#   corrupt-octet write_bw and send_bw   (--inject-defect corrupt-octet on the client: octet 7
#                                        of message 3 flipped after its pattern was written)
#   short-send send_bw                   (--inject-defect short-send: Send 3 one octet short)
#                                        the verifying side (the server) prints
#                                        "verify: FAILED: <test>: message 3 ..." naming what
#                                        differed and exits 3, and so does the client.
# Prints exactly one line per case ("passed clean" / "caught (...)", or what went wrong) and
# exits non-zero if a clean run failed or a defect was not caught. About 10-20 s.
#
#   scripts/judges/verify.sh [path/to/iwperf]     # builds the release binary without one
set -euo pipefail
cd "$(dirname "$0")/../.."

iwperf=${1:-}
if [[ -z "$iwperf" ]]; then
    scripts/build.sh # every binary the scripts run, iwperf among them
    iwperf=${CARGO_TARGET_DIR:-target}/release/iwperf
fi
[[ -x "$iwperf" ]] || { echo "judge iwperf --verify: no executable at $iwperf" >&2; exit 2; }

work=$(mktemp -d /tmp/judge-verify.XXXXXX)
sock=$work/memif.sock
server_pid=""
cleanup() {
    if [[ -n "$server_pid" ]]; then kill "$server_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

# run TEST CLIENT_ARGS...: one server and one client process; sets server_rc, client_rc.
run() {
    local test=$1
    shift
    rm -f "$sock" "$work"/*.log
    "$iwperf" "$test" --timeout 15 \
        --vdev "net_memif0,role=server,socket=$sock,socket-abstract=no" >"$work/server.log" 2>&1 &
    server_pid=$!
    for _ in $(seq 1 100); do [[ -S "$sock" ]] && break; sleep 0.05; done
    client_rc=0
    timeout 40 "$iwperf" "$test" 198.18.0.2 --verify --timeout 15 \
        --vdev "net_memif0,role=client,socket=$sock,socket-abstract=no" "$@" \
        >"$work/client.log" 2>&1 || client_rc=$?
    server_rc=0
    if ! timeout 20 tail --pid="$server_pid" -f /dev/null; then
        kill "$server_pid" 2>/dev/null || true
    fi
    wait "$server_pid" || server_rc=$?
    server_pid=""
}

failures=0
verdict() { # LINE OK(0/1)
    echo "$1"
    if [[ $2 -ne 0 ]]; then
        failures=$((failures + 1))
        for f in "$work"/server.log "$work"/client.log; do
            echo "--- $f" >&2
            tail -15 "$f" >&2
        done
    fi
}

# clean TEST ARGS...
clean() {
    local test=$1
    shift
    local name="judge iwperf --verify, clean $test"
    run "$test" -s 65536 -n 100 "$@"
    local line
    line=$(grep -m1 '^verify: ' "$work/client.log" || true)
    if [[ $client_rc -eq 0 && $server_rc -eq 0 && $line =~ ^verify:\ ok,\ [1-9][0-9]*\ messages\ checked$ ]]; then
        verdict "$name: passed clean ($line)" 0
    else
        verdict "$name: FAILED clean run (client exit $client_rc, server exit $server_rc: ${line:-no verify line})" 1
    fi
}

# defect DEFECT TEST PATTERN: the verifying side (server) must print one verify: FAILED:
# line matching PATTERN and exit 3; the client must exit 3 too.
defect() {
    local d=$1 test=$2 pattern=$3
    local name="judge iwperf --verify, $d $test"
    # 100 messages of 64 KiB: write_bw has 128 slots, so message 3 is its slot's last (the
    # one the server checks); send tests check every Send.
    run "$test" -s 65536 -n 100 --inject-defect "$d"
    local n line
    n=$(grep -c '^verify: FAILED: ' "$work/server.log" || true)
    line=$(grep -m1 '^verify: FAILED: ' "$work/server.log" || true)
    if [[ $server_rc -eq 3 && $client_rc -eq 3 && $n -eq 1 && $line == *"$pattern"* ]]; then
        verdict "$name: caught ($line)" 0
    elif [[ $server_rc -eq 0 && $client_rc -eq 0 ]]; then
        verdict "$name: NOT caught (both sides exited 0)" 1
    else
        verdict "$name: NOT caught as expected (client exit $client_rc, server exit $server_rc, ${n} FAILED line(s): ${line:-none})" 1
    fi
}

clean write_bw
clean send_bw
defect corrupt-octet write_bw "verify: FAILED: write_bw: message 3 (65536 octets): octet 7 is "
defect corrupt-octet send_bw "verify: FAILED: send_bw: message 3 (65536 octets): octet 7 is "
defect short-send send_bw "verify: FAILED: send_bw: message 3: received length 65535 octets, expected 65536"

[[ $failures -eq 0 ]]
