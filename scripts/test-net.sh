#!/usr/bin/env bash
# The packet-path part of the test suite (scripts/test.sh runs it after `cargo test`):
#
#   1. DPDK vdev test between two processes: tcpperf exchange over net_memif, --no-huge
#      --no-pci, 64 MiB each way byte-exact, with a pcapng capture that tshark must read.
#   2. Kernel interop: the stack on net_tap inside a private namespace exchanges 16 MiB each way
#      byte-exact with an ordinary kernel socket (a short Python peer), as client and as server,
#      without and with TSO super-frames (--tso); and once more on net_af_packet over a veth
#      pair, where --tso must be refused.
#   3. A short tcpperf-vs-kernel comparison (scripts/tcpperf-compare.sh --short).
#
# (The single-process DPDK test, two net_ring ports moving 64 MiB each way, and the in-memory
# link tests run in `cargo test`.) Needs root for namespaces and tap devices. A missing
# prerequisite is a failure, unless the caller opts out with WARPCORE_SKIP_NET=1 (or a reason
# in it; as the siw check's WARPCORE_SKIP_SIW): then it is reported as SKIPPED, loudly. With
# CI=true the opt-out is ignored: CI must run the packet path.
# Exits non-zero on any failure and closes with an "N passed, N failed" line, also when a
# command it runs fails where no check expects it (a tool, a namespace, the build): that is
# a FAIL line naming the step and the command (the ERR trap below), then the summary.
set -eEuo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

passed=0 failed=0 skipped=0
ok() { echo "PASS: $*"; passed=$((passed + 1)); }
bad() { echo "FAIL: $*"; failed=$((failed + 1)); }
missing() {
    if [[ "${CI:-}" == "true" ]]; then
        echo "FAIL: $* (required in CI)"
        failed=$((failed + 1))
    elif [[ -n "${WARPCORE_SKIP_NET:-}" ]]; then
        echo "SKIPPED (WARPCORE_SKIP_NET=$WARPCORE_SKIP_NET): $*  <-- this part of the suite did NOT run"
        skipped=$((skipped + 1))
    else
        echo "FAIL: $* (set WARPCORE_SKIP_NET=1 to opt out explicitly)"
        failed=$((failed + 1))
    fi
}
finish() {
    trap - ERR
    echo
    echo "test-net: $passed passed, $failed failed, $skipped skipped"
    echo "$passed passed, $failed failed"
    if ((failed)); then exit 1; fi
    exit 0
}
# The ERR trap (set -E: in functions too): a command that failed where no check tests it
# ends the script with a FAIL line naming the step ($step) and the command, then the summary
# (set -e alone exited without either). In a subshell (a command substitution) it only exits
# with the status: the command that ran the subshell fails in turn and is the one reported.
step="prerequisites"
on_error() { # on_error STATUS COMMAND LINE
    if [[ $BASHPID != "$$" ]]; then exit "$1"; fi
    trap - ERR
    echo "FAIL: $step: '$2' exited $1 (test-net.sh line $3)"
    failed=$((failed + 1))
    finish
}
trap 'on_error $? "$BASH_COMMAND" "$LINENO"' ERR

# Idempotent and quick when everything is there; on a fresh machine it installs the tools the
# tests below use (ethtool, iperf3, qperf, ...).
if [[ $(id -u) -eq 0 ]]; then
    scripts/install-dpdk.sh
fi

prereq=1
pkg-config --exists libdpdk 2>/dev/null || { missing "libdpdk not installed (scripts/install-dpdk.sh)"; prereq=0; }
[[ $(id -u) -eq 0 ]] || { missing "not root: namespaces, tap devices and memif need root"; prereq=0; }
for tool in ip python3 iperf3 qperf ethtool; do
    command -v "$tool" >/dev/null || { missing "$tool not installed (scripts/install-dpdk.sh)"; prereq=0; }
done
((prereq)) || finish

echo "== building tcpperf (release)"
step="building tcpperf"
# (scripts/build.sh: one build of every binary and drop-in library the scripts run.)
scripts/build.sh
case ${CARGO_TARGET_DIR:-target} in /*) tgt=$CARGO_TARGET_DIR ;; *) tgt=$root/${CARGO_TARGET_DIR:-target} ;; esac
tcpperf=$tgt/release/tcpperf

id=$$
work=$(mktemp -d "/tmp/wcnet-test-$id.XXXX")
ns=wcnet-t$id
# shellcheck source=scripts/lib/bg-end.sh
source scripts/lib/bg-end.sh # bg_kill_all, for the EXIT trap
pids=()
cleanup() {
    bg_kill_all
    wait 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
eal="--no-huge -m 512 --no-shconf --no-pci --no-telemetry --log-level=error"
# shellcheck source=scripts/lib/cpus.sh
source scripts/lib/cpus.sh
cpus_pick
[[ -z $CPUS_NOTE ]] || echo "NOTE: $CPUS_NOTE"

# ------------------------------------------------------------------ 1. memif, two processes
echo "== DPDK: net_memif between two processes, 64 MiB each way"
step="memif exchange"
sock=$work/memif.sock
bytes=$((64 << 20))
rm -f "$sock"
timeout 120 "$tcpperf" exchange --eal "-l $CPU_A $eal --file-prefix=wcnet-ms$id" \
    --vdev "net_memif0,role=server,socket=$sock,socket-abstract=no,rsize=10" \
    --ip 198.18.0.1/24 --listen 7000 --bytes "$bytes" --capture "$work/memif.pcapng" \
    >"$work/memif-server.log" 2>&1 &
srv=$!
# In the cleanup list while it runs: a server whose client failed is stopped at once (it
# would wait out its 120 s for a client that never comes, and cleanup with it).
pids+=("$srv")
for _ in $(seq 1 100); do [[ -S "$sock" ]] && break; sleep 0.1; done
memif_rc=0 memif_why=""
[[ -S "$sock" ]] || memif_why=" (the server made no socket in 10 s)"
timeout 120 "$tcpperf" exchange --eal "-l $CPU_B $eal --file-prefix=wcnet-mc$id" \
    --vdev "net_memif0,role=client,socket=$sock,socket-abstract=no,rsize=10" \
    --ip 198.18.0.2/24 --peer 198.18.0.1:7000 --bytes "$bytes" >"$work/memif-client.log" 2>&1 || memif_rc=$?
if ((memif_rc != 0)); then
    kill "$srv" 2>/dev/null || true
    wait "$srv" 2>/dev/null || true
    bad "memif exchange: the client exited $memif_rc$( ((memif_rc == 124)) && echo ' (timed out after 120 s)')$memif_why; the server was stopped"
    grep -hv '^EAL' "$work/memif-client.log" "$work/memif-server.log" || true
else
    wait "$srv" || memif_rc=$?
    if ((memif_rc != 0)); then
        bad "memif exchange: the server exited $memif_rc$( ((memif_rc == 124)) && echo ' (timed out after 120 s)') after its client finished"
        grep -hv '^EAL' "$work/memif-client.log" "$work/memif-server.log" || true
    else
        ok "memif exchange: $(grep -h '^exchange ok' "$work/memif-client.log")"
    fi
fi
unset 'pids[-1]'
step="pcapng capture"
if command -v tshark >/dev/null; then
    # tshark's exit status is judged, not only its line count: a capture it could not read
    # to the end (or a tshark that failed) is a FAIL naming it, and the script goes on.
    tshark_rc=0
    tshark -r "$work/memif.pcapng" -Y tcp >"$work/tshark.out" 2>"$work/tshark.err" || tshark_rc=$?
    frames=$(wc -l <"$work/tshark.out")
    if ((tshark_rc != 0)); then
        bad "pcapng capture: tshark exited $tshark_rc after $frames TCP frames: $(grep -v '^Running as user' "$work/tshark.err" | head -n 1)"
    elif ((frames > 40000)); then
        ok "pcapng capture of the memif run opens in tshark ($frames TCP frames)"
    else
        bad "pcapng capture: tshark read $frames TCP frames"
    fi
else
    missing "tshark not installed: pcapng capture not checked"
fi

# ------------------------------------------------------------------ 2. tap + kernel peer
# The kernel TCP peer (scripts/lib/tcp-peer.py, shared with scripts/test-tcp-kernel.sh).
step="kernel interop setup"
cp scripts/lib/tcp-peer.py "$work/peer.py"

# shellcheck source=scripts/lib/tso-check.sh
source scripts/lib/tso-check.sh
# tap_case ROLE [tso]: with tso, tcpperf hands the port TSO super-frames (--tso) and the
# kernel advertises MSS 1400: net_tap cuts only segments 14 octets short of its MTU
# (docs/net.md), so with the full MSS it would get none. The super-frames must then carry
# most of our segments.
tap_case() {
    local role=$1 tso=${2:-} bytes=$((16 << 20)) tap=wcnettap$((id % 10000))
    local peer_args=() stack_args tso_args=() what="net_tap"
    if [[ -n $tso ]]; then
        peer_args=(1400)
        tso_args=(--tso)
        what="net_tap with TSO (kernel MSS 1400)"
    fi
    step="$what, stack as $role vs kernel socket"
    scripts/netns.sh create "$ns"
    if [[ $role == client ]]; then
        # The stack connects to a kernel listener.
        ip netns exec "$ns" python3 "$work/peer.py" server 0.0.0.0 7000 "$bytes" "${peer_args[@]}" >"$work/peer.log" 2>&1 &
        pids+=($!)
        for _ in $(seq 1 100); do grep -q listening "$work/peer.log" && break; sleep 0.1; done
        stack_args=(--peer 198.18.0.1:7000)
    else
        stack_args=(--listen 7000)
    fi
    ip netns exec "$ns" timeout 120 "$tcpperf" exchange \
        --eal "-l $CPU_A $eal --file-prefix=wcnet-tap$id" --vdev "net_tap0,iface=$tap" \
        --ip 198.18.0.2/24 "${stack_args[@]}" "${tso_args[@]}" --bytes "$bytes" >"$work/tap.log" 2>&1 &
    local stack=$!
    scripts/netns.sh tap-addr "$ns" "$tap" 198.18.0.1/24
    if [[ $role == server ]]; then
        ip netns exec "$ns" timeout 120 python3 "$work/peer.py" client 198.18.0.2 7000 "$bytes" "${peer_args[@]}" >"$work/peer.log" 2>&1 &
        pids+=($!)
    fi
    local rc=0
    wait "$stack" || rc=1
    wait "${pids[-1]}" || rc=1
    unset 'pids[-1]'
    local tso_note=""
    if ((rc == 0)) && [[ -n $tso ]]; then
        tso_check "$work/tap.log" || { echo "the port got too few TSO super-frames$TSO_NOTE"; rc=1; }
        tso_note=$TSO_NOTE
    fi
    if ((rc == 0)); then
        ok "$what, stack as $role vs kernel socket: $(grep -h '^exchange ok' "$work/tap.log"); $(tail -1 "$work/peer.log")$tso_note"
    else
        bad "$what, stack as $role vs kernel socket"
        grep -hv '^EAL' "$work/tap.log" "$work/peer.log" || true
    fi
    ip netns del "$ns"
}
echo "== kernel interop over net_tap in namespace $ns, 16 MiB each way"
tap_case client
tap_case server
tap_case client tso
tap_case server tso

echo "== kernel interop over a veth pair with net_af_packet, 16 MiB each way"
step="net_af_packet on veth"
scripts/netns.sh create "$ns"
vdev=$(scripts/netns.sh veth "$ns" 198.18.0.1/24)
ip netns exec "$ns" python3 "$work/peer.py" server 0.0.0.0 7001 $((16 << 20)) >"$work/peer.log" 2>&1 &
peer=$!
for _ in $(seq 1 100); do grep -q listening "$work/peer.log" && break; sleep 0.1; done
if ip netns exec "$ns" timeout 120 "$tcpperf" exchange \
    --eal "-l $CPU_A $eal --file-prefix=wcnet-afp$id" --vdev "net_af_packet0,iface=$vdev" \
    --ip 198.18.0.2/24 --peer 198.18.0.1:7001 --bytes $((16 << 20)) >"$work/afp.log" 2>&1 &&
    wait "$peer"; then
    ok "net_af_packet on veth, stack as client vs kernel socket: $(grep -h '^exchange ok' "$work/afp.log")"
else
    bad "net_af_packet on veth vs kernel socket"
    grep -hv '^EAL' "$work/afp.log" "$work/peer.log" || true
fi
# --tso on a port without TSO is refused, naming the port, not ignored.
if ip netns exec "$ns" timeout 60 "$tcpperf" exchange \
    --eal "-l $CPU_A $eal --file-prefix=wcnet-afp$id" --vdev "net_af_packet0,iface=$vdev" \
    --ip 198.18.0.2/24 --peer 198.18.0.1:7001 --bytes 1024 --tso >"$work/afp-tso.log" 2>&1; then
    bad "--tso on net_af_packet was not refused"
elif grep -q -- '--tso: port net_af_packet0 (net_af_packet) does not offer TSO' "$work/afp-tso.log"; then
    ok "--tso on net_af_packet refused: $(grep -h -- '--tso:' "$work/afp-tso.log")"
else
    bad "--tso on net_af_packet failed without the reason"
    grep -hv '^EAL' "$work/afp-tso.log" || true
fi
ip netns del "$ns"

# ------------------------------------------------------------------ 3. short comparison
echo "== tcpperf vs kernel TCP (short)"
step="tcpperf comparison"
if TCPPERF=$tcpperf RESULTS=$work/results.txt scripts/tcpperf-compare.sh --short; then
    ok "tcpperf comparison ran (figures above)"
else
    bad "tcpperf comparison"
fi

finish
