#!/usr/bin/env bash
# libfabric and MPI on Warpcore, unmodified: Debian's libfabric (its verbs provider over
# our drop-in libibverbs.so.1 / librdmacm.so.1, scripts/with-warpcore) and Open MPI over
# libfabric, between two processes over DPDK net_memif:
#   1. `fi_info -p verbs` lists Warpcore's device as an iWARP FI_EP_MSG domain;
#   2. fi_pingpong over verbs (FI_EP_MSG, RC queue pairs through rdma_cm), every size with
#      its data-integrity check (-c);
#   3. fi_pingpong over verbs;ofi_rxm (FI_EP_RDM, what MPI uses), every size up to 1 MiB
#      (rendezvous by RDMA Read) with -c;
#   4. an Open MPI job of two ranks (pml cm, mtl ofi, provider verbs;ofi_rxm only), each
#      rank through with-warpcore: rdma-compat/tests/libfabric/mpi_pingpong.c, 8 B to 1 MiB
#      ping-pong with every octet checked, and an Allreduce.
# Each run's server capture is judged by tshark and iwdump: the RDMA traffic must be on
# Warpcore's wire (MPA/DDP/RDMAP, every CRC good, the opcodes expected), not on a kernel socket.
#
# libfabric's verbs provider finds a device's addresses with getifaddrs(3) and
# rdma_bind_addr, so the two Warpcore addresses must be on a kernel interface too: they go
# on a veth pair inside a network namespace of their own (root; names wcnet*, addresses in
# 198.18.0.0/24), where the kernel carries only fi_pingpong's control socket and Open MPI's
# launch traffic; the RDMA traffic goes over memif through the engines.
#
#   scripts/test-libfabric.sh          # about a minute
# Exits non-zero on the first failure; prints "N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

for t in fi_info fi_pingpong mpirun mpicc ip tshark; do
    if ! command -v "$t" >/dev/null; then
        echo "FAIL $t is not installed: scripts/install-deps.sh installs libfabric-bin, openmpi-bin, libopenmpi-dev and tshark"
        exit 1
    fi
done
[[ $(id -u) -eq 0 ]] || { echo "FAIL scripts/test-libfabric.sh needs root (a network namespace)"; exit 1; }
scripts/build.sh || exit 1 # the drop-in libraries and iwdump, among the rest
case ${CARGO_TARGET_DIR:-target} in /*) tgt=$CARGO_TARGET_DIR ;; *) tgt=$root/${CARGO_TARGET_DIR:-target} ;; esac
IWDUMP="$tgt/release/iwdump"

ns=wcnetlf$$
ns=${ns:0:15}
work=$(mktemp -d /tmp/libfabric-test.XXXXXX)
sock=$work/memif.sock
A=198.18.0.71
B=198.18.0.72
# shellcheck source=scripts/lib/bg-end.sh
source scripts/lib/bg-end.sh # bg_kill_all, for the EXIT trap
pids=()
cleanup() {
    bg_kill_all
    ip netns del "$ns" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
# shellcheck source=lib/tally.sh
. scripts/lib/tally.sh

scripts/netns.sh create "$ns" || bad "cannot create network namespace $ns"
ip -n "$ns" link add wclf0 type veth peer name wclf1 &&
    ip -n "$ns" addr add "$A/24" dev wclf0 && ip -n "$ns" addr add "$B/24" dev wclf0 &&
    ip -n "$ns" link set wclf0 up && ip -n "$ns" link set wclf1 up ||
    bad "cannot give $ns the two addresses"
inns() { ip netns exec "$ns" "$@"; }
WW=("$root/scripts/with-warpcore" --poll-mode caller)
SRV=("${WW[@]}" --memif-server "$sock" --ip "$A/24" --capture "$work/server.pcapng" --)
# Only the server's side is captured: it is the one judged, and a client capture of the same
# traffic (over 100 MB for one fi_pingpong run to 1 MiB) would only take disk.
CLI=("${WW[@]}" --memif "$sock" --ip "$B/24" --)

# judge_capture CAPTURE OPCODE...: the capture judges of the siw matrix
# (scripts/lib/capture-verdict.sh, each shown catching a planted defect by
# scripts/test-judges.sh): tshark reads it to the end with every MPA CRC good and nothing
# malformed, iwdump decodes an iWARP connection without a protocol violation; and iwdump
# counts messages of each RDMAP opcode named ("Send", "RDMA Read Request", ...): the
# traffic went through Warpcore, not a kernel socket.
TS="tshark -n --disable-protocol rpcordma -o tcp.try_heuristic_first:TRUE"
# shellcheck source=lib/capture-verdict.sh
. scripts/lib/capture-verdict.sh
judge_capture() {
    local cap=$1 op
    shift
    capture_verdict "$cap"
    ((CV_TSHARK == 0)) || bad "tshark could not read $cap to its end (exit $CV_TSHARK)"
    ((CV_IWARP >= 1)) || bad "iwdump decodes no iWARP connection in $cap"
    ((CV_IWDUMP == 0)) || bad "iwdump finds a protocol violation in $cap: $(grep -m1 VIOLATION "$cap.iwdump")"
    ((CV_BAD == 0 && CV_GOOD > 0)) || bad "tshark checks $CV_GOOD good and $CV_BAD bad MPA CRCs in $cap"
    ((CV_MALFORMED == 0 && CV_EXPERT == 0)) ||
        bad "tshark finds $CV_MALFORMED malformed frames and $CV_EXPERT expert errors in $cap"
    for op in "$@"; do
        grep -Eq "^ +$op +[0-9]+ segments +[1-9][0-9]* messages" "$cap.iwdump" ||
            bad "no $op message in $cap: the traffic did not go through Warpcore"
    done
}

# --- 1. the device as libfabric sees it -----------------------------------------------
rm -f "$sock"
inns timeout 60 "${SRV[@]}" fi_info -p verbs >"$work/fi_info.log" 2>&1 || bad "fi_info -p verbs failed"
grep -q "domain: warpcore0" "$work/fi_info.log" && grep -q "FI_EP_MSG" "$work/fi_info.log" &&
    grep -q "FI_PROTO_IWARP" "$work/fi_info.log" || bad "fi_info -p verbs does not list warpcore0 as iWARP FI_EP_MSG"
ok "fi_info -p verbs: warpcore0, FI_EP_MSG, FI_PROTO_IWARP"

# pair NAME SERVER_ARGS... :: CLIENT_ARGS...: both sides in the namespace, each through
# with-warpcore; the client retries while the server is not listening yet.
pair() {
    local name=$1 s=() c=()
    shift
    while [[ $1 != :: ]]; do s+=("$1"); shift; done
    shift
    c=("$@")
    rm -f "$sock" "$work"/*.log "$work"/*.pcapng
    inns timeout 120 "${SRV[@]}" "${s[@]}" >"$work/server.log" 2>&1 &
    local sp=$!
    pids+=("$sp")
    local tries=0
    until inns timeout 120 "${CLI[@]}" "${c[@]}" >"$work/client.log" 2>&1; do
        tries=$((tries + 1))
        if [[ $tries -lt 20 ]] && kill -0 "$sp" 2>/dev/null &&
            grep -q "failed to connect: Connection refused" "$work/client.log"; then
            sleep 0.5
            continue
        fi
        kill "$sp" 2>/dev/null
        bad "$name: the client failed"
    done
    local rc=0
    wait "$sp" || rc=$?
    # Reaped: its pid is free for reuse, and not the EXIT trap's to kill (bg_forget).
    bg_forget "$sp"
    ((rc == 0)) || bad "$name: the server failed"
}

# --- 2. FI_EP_MSG: verbs alone --------------------------------------------------------
pair "fi_pingpong verbs msg" fi_pingpong -p verbs -e msg -c -I 50 :: \
    fi_pingpong -p verbs -e msg -c -I 50 "$A"
grep -q "^1m *50 *=50" "$work/client.log" || bad "fi_pingpong verbs msg: no 1 MiB row of 50 transfers"
judge_capture "$work/server.pcapng" "Send"
ok "fi_pingpong -p verbs -e msg -c: every size to 1 MiB, data checked, Sends on Warpcore's wire"

# --- 3. FI_EP_RDM: verbs;ofi_rxm ------------------------------------------------------
pair "fi_pingpong verbs;ofi_rxm rdm" fi_pingpong -p "verbs;ofi_rxm" -e rdm -c -I 50 :: \
    fi_pingpong -p "verbs;ofi_rxm" -e rdm -c -I 50 "$A"
grep -q "^1m *50 *=50" "$work/client.log" || bad "fi_pingpong verbs;ofi_rxm: no 1 MiB row of 50 transfers"
judge_capture "$work/server.pcapng" "Send" "RDMA Read Request" "RDMA Read Response"
ok "fi_pingpong -p 'verbs;ofi_rxm' -e rdm -c: every size to 1 MiB (rendezvous by RDMA Read), data checked"

# --- 4. Open MPI over libfabric -------------------------------------------------------
mpicc -O2 -Wall -Werror -o "$work/mpi_pingpong" rdma-compat/tests/libfabric/mpi_pingpong.c ||
    bad "mpi_pingpong.c does not build with mpicc"
rm -f "$sock" "$work"/*.log "$work"/*.pcapng
# --bind-to none: in the caller-driven mode the library's background thread runs the
# engine while a rank waits in libfabric's own queues; bound to its rank's core, it would
# run only when the spinning rank is preempted (milliseconds a message).
inns timeout 180 mpirun --allow-run-as-root --oversubscribe --bind-to none \
    --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include "verbs;ofi_rxm" --mca btl self \
    -np 1 "${SRV[@]}" "$work/mpi_pingpong" : -np 1 "${CLI[@]}" "$work/mpi_pingpong" \
    >"$work/mpi.log" 2>&1 || bad "the MPI job failed"
grep -q "^mpi_pingpong: all checks passed" "$work/mpi.log" || bad "mpi_pingpong: not every check passed"
judge_capture "$work/server.pcapng" "Send" "RDMA Read Request" "RDMA Read Response"
ok "Open MPI (mtl ofi, verbs;ofi_rxm), two ranks: ping-pong 8 B to 1 MiB checked, Allreduce"

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
