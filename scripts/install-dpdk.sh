#!/usr/bin/env bash
# Installs DPDK 22.11 LTS (runtime, headers, pkg-config file, vdev drivers) and what the
# bindings need to build (clang/libclang for bindgen, pkg-config), plus the tools the packet-path
# tests use. Idempotent: when every package is present it installs nothing and skips
# `apt-get update`. One list of packages for the whole project lives in install-deps.sh.
#
#   scripts/install-dpdk.sh          # build + test packages
#   scripts/install-dpdk.sh --build  # only what building the dpdk-sys crate needs
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == "--build" ]]; then
    scripts/install-deps.sh --demo
else
    scripts/install-deps.sh
fi
echo "install-dpdk: libdpdk $(pkg-config --modversion libdpdk)"
