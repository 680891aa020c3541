#!/usr/bin/env bash
# Installs DPDK 22.11 LTS (runtime, headers, pkg-config file, vdev drivers) and what the
# bindings need to build (clang/libclang for bindgen, pkg-config), plus the tools the packet-path
# tests use (iproute2, ethtool, python3, iperf3, qperf, socat, tshark). Idempotent: when every package is
# present it installs nothing and skips `apt-get update`.
#
#   scripts/install-dpdk.sh          # build + test packages
#   scripts/install-dpdk.sh --build  # only what building the dpdk-sys crate needs
set -euo pipefail

build_pkgs=(dpdk dpdk-dev libdpdk-dev pkg-config clang libclang-dev)
test_pkgs=(iproute2 ethtool python3 iperf3 qperf socat tshark)
pkgs=("${build_pkgs[@]}")
if [[ "${1:-}" != "--build" ]]; then
    pkgs+=("${test_pkgs[@]}")
fi

missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done

if ((${#missing[@]} == 0)); then
    echo "install-dpdk: all packages present ($(pkg-config --modversion libdpdk 2>/dev/null || echo 'libdpdk?'))"
    exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
echo "install-dpdk: installing ${missing[*]}"
# tshark asks whether non-root users may capture; answer up front so nothing waits for input.
echo "wireshark-common wireshark-common/install-setuid boolean false" | $sudo debconf-set-selections
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-dpdk: libdpdk $(pkg-config --modversion libdpdk)"
