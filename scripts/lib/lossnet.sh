# Two network namespaces joined by a Linux bridge in a third, with random loss on the
# bridge ports' egress (sourced by bench/loss.sh and scripts/test-tcp-kernel.sh).
#
#   wcnet-la: veth wcla (kernel 198.18.0.11; net_af_packet users take 198.18.0.1)
#   wcnet-lb: veth wclb (kernel 198.18.0.12; net_af_packet users take 198.18.0.2)
#   (the benches give the net_af_packet users their own Ethernet addresses too, with
#   --mac "$LOSSNET_MAC_A" / "$LOSSNET_MAC_B": see below)
#   wcnet-lbr: bridge wcbr with the peers wcpa, wcpb; scripts/lib/drop.bpf.c on their egress
#
#   net_tap users run in wcnet-la and take 198.18.1.1/24 with gateway 198.18.1.254 (the
#   kernel side of their tap): wcnet-la's kernel forwards between the tap and wcla, so the
#   frames cross the lossy bridge both ways. (A filter on the tap itself would not do: the
#   kernel treats a drop on its own device's egress as local congestion, not loss, and
#   sends the segment again without a retransmission.)
#
# Every port has its offloads off, so net_af_packet and the kernel see real frames with
# real checksums (no GSO super-frames, no partial checksums).
#
#   lossnet_up                   # build the namespaces (replacing old ones)
#   LOSSNET_MTU=9000 lossnet_up  # the same with jumbo frames on every port (default 1500)
#   lossnet_loss PPM             # drop PPM parts per million of IPv4 frames, both ways
#   lossnet_dropped              # frames the filters dropped so far, "WCPA WCPB"
#   lossnet_check_loss BEFORE PPM  # the filters dropped since BEFORE as PPM says (below)
#   lossnet_tap_route            # let net_tap users in wcnet-la reach wcnet-lb (below)
#   lossnet_tap_up TAP           # the kernel side of net_tap's TAP in wcnet-la: 198.18.1.254
#   lossnet_down                 # delete everything
#   lossnet_harness NAME SCRATCH # a script's scratch directory, pids to kill, EXIT trap
#   lossnet_fail MESSAGE         # the message and the logs' tails, exit 1
#   lossnet_build PATH BIN       # build warpcore-apps' BIN unless PATH exists
# Needs: ip, tc, ethtool, clang (-target bpf), linux headers (linux-libc-dev).

# shellcheck source=scripts/lib/bg-end.sh
source "$(dirname "${BASH_SOURCE[0]}")/bg-end.sh" # bg_kill_all, for the EXIT trap
LOSSNET_A=wcnet-la
LOSSNET_B=wcnet-lb
LOSSNET_BR=wcnet-lbr
LOSSNET_DIR=${LOSSNET_DIR:-$(mktemp -d /tmp/lossnet.XXXXXX)}
# Ethernet addresses for the net_af_packet users, other than their veths' own (a second
# function on a shared port has its own, as a macvlan or a VF would). The kernel on the
# veth sees every frame the packet socket sees: a frame to the veth's own address goes up
# to IPv4, which looks up a route for 198.18.0.x before dropping it as not for this host
# (IpInAddrErrors), and it does so in the softirq of the CPU that sent the frame; a frame
# to another address stops at IPv4's first check. Measured on this path (docs/iwperf.md):
# the lookups cost the sending CPU ~0.4 us a frame, ~17 % of write_bw.
LOSSNET_MAC_A=02:57:43:00:00:01
LOSSNET_MAC_B=02:57:43:00:00:02

lossnet_die() { echo "lossnet: $*" >&2; exit 1; }

lossnet_down() {
    ip netns del "$LOSSNET_A" 2>/dev/null || true
    ip netns del "$LOSSNET_B" 2>/dev/null || true
    ip netns del "$LOSSNET_BR" 2>/dev/null || true
}

lossnet_up() {
    for t in ip tc ethtool clang; do
        command -v "$t" >/dev/null || lossnet_die "$t is missing (scripts/install-deps.sh installs it)"
    done
    lossnet_down
    ip netns add "$LOSSNET_A"
    ip netns add "$LOSSNET_B"
    ip netns add "$LOSSNET_BR"
    ip -n "$LOSSNET_BR" link add wcbr type bridge
    ip -n "$LOSSNET_A" link add wcla type veth peer name wcpa netns "$LOSSNET_BR"
    ip -n "$LOSSNET_B" link add wclb type veth peer name wcpb netns "$LOSSNET_BR"
    ip -n "$LOSSNET_BR" link set wcpa master wcbr
    ip -n "$LOSSNET_BR" link set wcpb master wcbr
    for ns in "$LOSSNET_A" "$LOSSNET_B" "$LOSSNET_BR"; do ip -n "$ns" link set lo up; done
    local pair
    for pair in "$LOSSNET_A:wcla" "$LOSSNET_B:wclb" "$LOSSNET_BR:wcpa" "$LOSSNET_BR:wcpb"; do
        local ns=${pair%%:*} dev=${pair#*:}
        ip netns exec "$ns" ethtool -K "$dev" tx off rx off tso off gso off gro off >/dev/null 2>&1 ||
            lossnet_die "ethtool could not turn offloads off on $dev"
        ip -n "$ns" link set "$dev" mtu "${LOSSNET_MTU:-1500}" ||
            lossnet_die "$dev does not take MTU ${LOSSNET_MTU:-1500}"
        ip -n "$ns" link set "$dev" up
    done
    ip -n "$LOSSNET_BR" link set wcbr mtu "${LOSSNET_MTU:-1500}"
    ip -n "$LOSSNET_BR" link set wcbr up
    ip -n "$LOSSNET_A" addr add 198.18.0.11/24 dev wcla
    ip -n "$LOSSNET_B" addr add 198.18.0.12/24 dev wclb
    ip -n "$LOSSNET_BR" link set wcbr type bridge stp_state 0 forward_delay 0 2>/dev/null || true
    for dev in wcpa wcpb; do
        ip netns exec "$LOSSNET_BR" tc qdisc add dev "$dev" clsact
    done
    # The bridge forwards at once (no learning delay) once both ends have spoken.
    ip netns exec "$LOSSNET_A" ping -c 2 -W 2 -i 0.2 198.18.0.12 >/dev/null ||
        lossnet_die "the two namespaces cannot reach each other"
}

# lossnet_loss PPM: replaces the filters on both bridge ports.
lossnet_loss() {
    local ppm=$1 obj="$LOSSNET_DIR/drop-$1.o"
    local src
    src="$(dirname "${BASH_SOURCE[0]}")/drop.bpf.c"
    if [[ ! -f "$obj" ]]; then
        clang -O2 -g -target bpf -DLOSS_PPM="$ppm" -I/usr/include/x86_64-linux-gnu \
            -c "$src" -o "$obj" || lossnet_die "clang could not build $src"
    fi
    for dev in wcpa wcpb; do
        ip netns exec "$LOSSNET_BR" tc filter del dev "$dev" egress 2>/dev/null || true
        if [[ "$ppm" != 0 ]]; then
            ip netns exec "$LOSSNET_BR" tc filter add dev "$dev" egress bpf da obj "$obj" sec classifier ||
                lossnet_die "tc could not attach the drop filter to $dev"
        fi
    done
}

# lossnet_dropped: prints the frames the drop filters have dropped so far on wcpa and wcpb
# ("WCPA WCPB"), from their clsact qdiscs' counters (every TC_ACT_SHOT of a filter on the
# qdisc counts there, and the count outlives a filter swap); "?" for a port whose count tc
# does not show.
lossnet_dropped() {
    local dev n out=()
    for dev in wcpa wcpb; do
        n=$(tc -n "$LOSSNET_BR" -s qdisc show dev "$dev" 2>/dev/null |
            awk '/^qdisc clsact/ { c = 1; next } c && /dropped/ { sub(/.*\(dropped /, ""); sub(/,.*/, ""); print; exit }')
        out+=("${n:-?}")
    done
    echo "${out[*]}"
}

# lossnet_check_loss BEFORE PPM: whether the filters dropped what PPM asks for since BEFORE
# (lossnet_dropped's output then): with PPM > 0, at least one frame in all; with 0, none. A
# filter that attaches but drops nothing (a program built without its LOSS_PPM, say: both
# ports run the same build) would make a lossy run a clean one that passes as lossy. Not
# "one on each port": an 8 MiB exchange at MTU 9000 and 1 % gives a port ~3-16 drops (seen
# 3), so a port without any would come about once in a few hundred runs by chance alone;
# both ports without any, about e^-13. Sets LOSSNET_NOTE to "dropped A + B frames" or to
# what went wrong; returns 1 on the latter.
lossnet_check_loss() {
    local before after ppm=$2 i d=() bad=""
    read -ra before <<<"$1"
    read -ra after <<<"$(lossnet_dropped)"
    for i in 0 1; do
        if ! [[ ${before[i]:-?} =~ ^[0-9]+$ && ${after[i]:-?} =~ ^[0-9]+$ ]]; then
            bad="tc shows no drop count for the bridge ports (before: ${1:-none}, after: ${after[*]})"
            break
        fi
        d+=($((after[i] - before[i])))
    done
    if [[ -z $bad ]]; then
        if ((ppm > 0 && d[0] + d[1] == 0)); then
            bad="the drop filters dropped ${d[0]} + ${d[1]} frames at $ppm ppm: the run was not lossy"
        elif ((ppm == 0 && d[0] + d[1] > 0)); then
            bad="the bridge ports dropped ${d[0]} + ${d[1]} frames at 0 ppm"
        fi
    fi
    if [[ -n $bad ]]; then
        LOSSNET_NOTE=$bad
        return 1
    fi
    LOSSNET_NOTE="dropped ${d[0]} + ${d[1]} frames"
}

# lossnet_tap_route: wcnet-la forwards, and wcnet-lb routes 198.18.1.0/24 through it.
lossnet_tap_route() {
    ip netns exec "$LOSSNET_A" sysctl -qw net.ipv4.ip_forward=1
    ip -n "$LOSSNET_B" route replace 198.18.1.0/24 via 198.18.0.11
}

# lossnet_tap_up TAP: waits for net_tap's TAP in wcnet-la, gives its kernel side
# 198.18.1.254/24 with offloads off (no GSO super-frames towards the tap), and brings it up.
lossnet_tap_up() {
    local tap=$1
    for _ in $(seq 1 200); do
        ip -n "$LOSSNET_A" link show "$tap" >/dev/null 2>&1 && break
        sleep 0.05
    done
    ip -n "$LOSSNET_A" link show "$tap" >/dev/null 2>&1 || lossnet_die "$tap did not appear"
    ip netns exec "$LOSSNET_A" ethtool -K "$tap" tso off gso off >/dev/null 2>&1 || true
    ip -n "$LOSSNET_A" addr replace 198.18.1.254/24 dev "$tap"
    ip -n "$LOSSNET_A" link set "$tap" up
}

# lossnet_measure_loss: prints the loss the kernel's ping sees through the filters now.
lossnet_measure_loss() {
    ip netns exec "$LOSSNET_A" ping -q -c "${1:-2000}" -i 0.001 -W 1 198.18.0.12 2>/dev/null |
        sed -n 's/.* \([0-9.]*\)% packet loss.*/\1/p'
}

# lossnet_harness NAME SCRATCH: what every script on this path needs around its runs. Sets
# `work` (a scratch directory, /tmp/SCRATCH.XXXXXX) and `pids` (append the background
# processes to kill at exit), and traps EXIT to kill them, delete the namespaces and remove
# both directories. NAME prefixes lossnet_fail's and lossnet_build's messages.
lossnet_harness() {
    LOSSNET_NAME=$1
    work=$(mktemp -d "/tmp/$2.XXXXXX")
    pids=()
    trap lossnet_cleanup EXIT
}

lossnet_cleanup() {
    bg_kill_all
    lossnet_down
    rm -rf "$work" "$LOSSNET_DIR"
}

# lossnet_fail MESSAGE: prints MESSAGE and the tail of every log in `work` (on stderr: a
# caller in a command substitution would take them for its output), exits 1. (Under the
# callers' set -e and pipefail, grep's status on a log of nothing but EAL lines, or an
# empty one, had ended the loop there: the logs after it, with the reason, went unshown.)
lossnet_fail() {
    echo "$LOSSNET_NAME: FAILED: $*" >&2
    local f
    for f in "$work"/*.log; do
        [[ -f $f ]] || continue
        echo "--- $f"
        { grep -v '^EAL' "$f" || true; } | tail -n 15
    done >&2
    exit 1
}

# lossnet_build PATH BIN: builds warpcore-apps' binary BIN (release) unless PATH is one
# (scripts/build.sh, which builds every binary the scripts run).
lossnet_build() {
    if [[ ! -x "$1" ]]; then
        echo "$LOSSNET_NAME: building $2"
        "$(dirname "${BASH_SOURCE[0]}")/../build.sh"
    fi
}
