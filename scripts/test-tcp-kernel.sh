#!/usr/bin/env bash
# Warpcore's TCP against the Linux kernel's TCP on a lossy path (issue 11): tcpperf exchange
# on net_af_packet in one namespace, an ordinary kernel socket (scripts/lib/tcp-peer.py) in
# another, joined by a bridge that drops IPv4 frames at random on both ports' egress
# (scripts/lib/lossnet.sh). Our side as client and as server, clean and at 1 % loss each way,
# on net_af_packet and on net_tap with TSO super-frames;
# every case moves BYTES (default 8 MiB) each way and checks them byte for byte on both
# ends, and the bridge's drop counters show the loss happened (frames dropped in a
# lossy case, none in a clean one: lossnet_check_loss); then the same at 1 % loss with jumbo frames (MTU 9000 on every port, ours through
# net_af_packet's larger tpacket frames). One line per case; exits 1 on any failure. (scripts/test-net.sh covers net_tap and
# a loss-free veth.)
#
#   scripts/test-tcp-kernel.sh            TCPPERF=target/debug/tcpperf BYTES=...
set -euo pipefail
cd "$(dirname "$0")/.."
bytes=${BYTES:-$((8 << 20))}
# Without TCPPERF, build tcpperf from this checkout now: lossnet_build only builds a binary
# that is missing, and a tcpperf left from an earlier build would test old code.
if [[ -z "${TCPPERF:-}" ]]; then
    scripts/build.sh # every binary the scripts run, tcpperf among them
    TCPPERF=${CARGO_TARGET_DIR:-target}/release/tcpperf
fi
# shellcheck source=scripts/lib/lossnet.sh
source scripts/lib/lossnet.sh
# shellcheck source=scripts/lib/tso-check.sh
source scripts/lib/tso-check.sh
lossnet_harness test-tcp-kernel tcp-kernel
lossnet_build "$TCPPERF" tcpperf
eal="--no-huge -m 256 --no-pci --no-telemetry --no-shconf --log-level=error"
mtu=1500
failed=0
lossnet_up

# case_run ROLE PPM [tap]: ROLE is our side's (client connects to the kernel's listener).
# With tap, our side runs on net_tap (wcnet-la's kernel forwards its frames to the bridge,
# scripts/lib/lossnet.sh) and hands the port TSO super-frames (--tso), with the kernel
# advertising MSS 1400 so that net_tap can cut them (docs/net.md); most of our segments
# must then travel in super-frames, retransmissions included.
case_run() {
    local role=$1 ppm=$2 mode=${3:-afp} port=$((7100 + RANDOM % 500))
    lossnet_loss "$ppm"
    # The frames the bridge dropped before this case: a lossy case must see drops both
    # ways (a filter that drops nothing would pass it as a clean one), a clean case none.
    local drops0
    drops0=$(lossnet_dropped)
    local stack_args dev_args peer_args=() our_ip=198.18.0.1 what="MTU $mtu"
    if [[ $mode == tap ]]; then
        our_ip=198.18.1.1
        dev_args=(--vdev "net_tap0,iface=wcta" --ip "$our_ip/24" --gateway 198.18.1.254 --tso)
        peer_args=(1400)
        what="net_tap with TSO (kernel MSS 1400)"
        lossnet_tap_route
    else
        dev_args=(--vdev "net_af_packet0,iface=wcla" --mtu "$mtu" --ip "$our_ip/24")
    fi
    if [[ $role == client ]]; then
        ip netns exec "$LOSSNET_B" timeout 120 python3 scripts/lib/tcp-peer.py server 198.18.0.12 "$port" "$bytes" "${peer_args[@]}" \
            >"$work/peer.log" 2>&1 &
        pids+=($!)
        for _ in $(seq 1 100); do grep -q listening "$work/peer.log" && break; sleep 0.1; done
        stack_args=(--peer "198.18.0.12:$port")
    else
        stack_args=(--listen "$port")
    fi
    local t0
    t0=$(date +%s.%N)
    ip netns exec "$LOSSNET_A" timeout 120 "$TCPPERF" exchange \
        --eal "-l 0 $eal --file-prefix=wctk$$" "${dev_args[@]}" \
        "${stack_args[@]}" --bytes "$bytes" >"$work/stack.log" 2>&1 &
    local stack=$!
    [[ $mode == tap ]] && lossnet_tap_up wcta
    if [[ $role == server ]]; then
        sleep 1
        ip netns exec "$LOSSNET_B" timeout 120 python3 scripts/lib/tcp-peer.py client "$our_ip" "$port" "$bytes" "${peer_args[@]}" \
            >"$work/peer.log" 2>&1 &
        pids+=($!)
    fi
    local rc=0
    wait "$stack" || rc=1
    wait "${pids[-1]}" || rc=1
    unset 'pids[-1]'
    local took
    took=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    local pct
    pct=$(awk -v p="$ppm" 'BEGIN { printf "%g", p / 10000 }')
    # With jumbo frames the kernel's send MSS must be a jumbo one (both MSS options agreed).
    local mss
    mss=$(sed -nE 's/.*MSS ([0-9]+).*/\1/p' "$work/peer.log")
    if ((rc == 0 && mtu > 1500)) && ! ((${mss:-0} > 1460)); then
        echo "FAIL our TCP as $role vs kernel, MTU $mtu: the kernel's MSS is ${mss:-unknown}, not a jumbo one"
        rc=1
    fi
    if ((rc == 0)) && ! lossnet_check_loss "$drops0" "$ppm"; then
        echo "FAIL our TCP as $role vs kernel, $what: $LOSSNET_NOTE"
        rc=1
    fi
    local tso_note=""
    if ((rc == 0)) && [[ $mode == tap ]]; then
        tso_check "$work/stack.log" || {
            echo "FAIL our TCP as $role vs kernel, $what: too few TSO super-frames$TSO_NOTE"
            rc=1
        }
        tso_note=$TSO_NOTE
    fi
    if ((rc == 0)); then
        echo "ok   our TCP as $role vs kernel, $what, $pct % loss each way ($LOSSNET_NOTE): $(grep -h '^exchange ok' "$work/stack.log"); $(tail -1 "$work/peer.log")$tso_note ($took s)"
    else
        echo "FAIL our TCP as $role vs kernel, $what, $pct % loss each way"
        grep -hv '^EAL' "$work/stack.log" "$work/peer.log" | tail -n 20 || true
        failed=1
    fi
}

for ppm in 0 10000; do
    case_run client "$ppm"
    case_run server "$ppm"
done
for ppm in 0 10000; do
    case_run client "$ppm" tap
    case_run server "$ppm" tap
done
# Jumbo frames refused with the reason: the kernel interface is still at MTU 1500, then a
# tpacket frame too small for them.
refused() { # NAME PATTERN VDEV
    local out
    if out=$(ip netns exec "$LOSSNET_A" timeout 30 "$TCPPERF" exchange \
        --eal "-l 0 ${eal/-m 256/-m 1024} --file-prefix=wctk$$" --vdev "$3" --mtu 9000 \
        --ip 198.18.0.1/24 --listen 7000 --bytes 1000 2>&1); then
        echo "FAIL $1: accepted"
        failed=1
    elif grep -q -- "$2" <<<"$out"; then
        echo "ok   $1: $(grep -m1 -- "$2" <<<"$out")"
    else
        echo "FAIL $1: $out" | tail -n 3
        failed=1
    fi
}
refused "MTU 9000 over a 1500 interface" "has MTU 1500 (ip link set wcla mtu 9000)" \
    "net_af_packet0,iface=wcla"
# Jumbo frames: every port at MTU 9000, ~10 KiB mbufs (a bigger heap).
lossnet_down
LOSSNET_MTU=9000 lossnet_up
mtu=9000
eal=${eal/-m 256/-m 1024}
case_run client 10000
case_run server 10000
refused "MTU 9000 in 4 KiB tpacket frames" "give it framesz=10240 and blocksz=20480" \
    "net_af_packet0,iface=wcla,framesz=4096"
if ((failed)); then
    echo "test-tcp-kernel: FAILED"
    exit 1
fi
echo "test-tcp-kernel: all cases passed"
