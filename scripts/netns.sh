#!/usr/bin/env bash
# Test network namespaces for the packet path. All addresses are in 198.18.0.0/24 (the
# benchmarking range) and all names start with "wcnet" so parallel runs and other engineers'
# set-ups never collide. Traffic never leaves the namespace.
#
#   scripts/netns.sh create NS                 # an empty namespace with lo up
#   scripts/netns.sh tap-addr NS IFACE [CIDR]  # wait for a tap that DPDK's net_tap created in NS,
#                                              # give the kernel side CIDR (198.18.0.1/24), up
#   scripts/netns.sh veth NS [CIDR]            # a veth pair NS-k / NS-d inside NS: the kernel side
#                                              # NS-k gets CIDR, NS-d is for net_af_packet/af_xdp
#   scripts/netns.sh destroy NS                # delete NS and everything in it
#   scripts/netns.sh exec NS CMD...            # run a command inside NS
set -euo pipefail

die() { echo "netns: $*" >&2; exit 1; }
check_name() { [[ "$1" == wcnet* ]] || die "namespace names must start with wcnet (got $1)"; }
check_cidr() { [[ "$1" == 198.18.0.* ]] || die "addresses must be in 198.18.0.0/24 (got $1)"; }

cmd=${1:-}
shift || true
case "$cmd" in
    create)
        ns=${1:?namespace}
        check_name "$ns"
        ip netns del "$ns" 2>/dev/null || true
        ip netns add "$ns"
        ip -n "$ns" link set lo up
        ;;
    tap-addr)
        ns=${1:?namespace} iface=${2:?interface} cidr=${3:-198.18.0.1/24}
        check_name "$ns"; check_cidr "$cidr"
        for _ in $(seq 1 200); do
            ip -n "$ns" link show "$iface" >/dev/null 2>&1 && break
            sleep 0.05
        done
        ip -n "$ns" link show "$iface" >/dev/null 2>&1 || die "$iface did not appear in $ns"
        ip -n "$ns" addr replace "$cidr" dev "$iface"
        ip -n "$ns" link set "$iface" up
        ;;
    veth)
        ns=${1:?namespace} cidr=${2:-198.18.0.1/24}
        check_name "$ns"; check_cidr "$cidr"
        ip -n "$ns" link add "${ns:0:12}-k" type veth peer name "${ns:0:12}-d"
        ip -n "$ns" addr add "$cidr" dev "${ns:0:12}-k"
        ip -n "$ns" link set "${ns:0:12}-k" up
        ip -n "$ns" link set "${ns:0:12}-d" up
        # net_af_packet sees what the kernel hands the veth: with offloads on, that is
        # unfinished checksums and 64 KB GSO frames. Make the kernel send real frames.
        for dev in "${ns:0:12}-k" "${ns:0:12}-d"; do
            ip netns exec "$ns" ethtool -K "$dev" tx off tso off gso off gro off >/dev/null 2>&1 ||
                die "ethtool could not turn offloads off on $dev (apt-get install ethtool)"
        done
        echo "${ns:0:12}-d"
        ;;
    destroy)
        ns=${1:?namespace}
        check_name "$ns"
        ip netns del "$ns" 2>/dev/null || true
        ;;
    exec)
        ns=${1:?namespace}
        check_name "$ns"
        shift
        exec ip netns exec "$ns" "$@"
        ;;
    *)
        echo "usage: $0 create|tap-addr|veth|destroy|exec NS ..." >&2
        exit 2
        ;;
esac
