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
# An argument it does not know is refused, never taken for "everything": `--help` or a
# mistyped `--biuld` installed every build and test package.
case "$*" in
    --build) scripts/install-deps.sh --demo ;;
    "") scripts/install-deps.sh ;;
    -h | --help)
        echo "usage: scripts/install-dpdk.sh [--build]"
        sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'
        exit 0
        ;;
    *) echo "install-dpdk: unknown argument '$*' (usage: install-dpdk.sh [--build])" >&2; exit 2 ;;
esac
echo "install-dpdk: libdpdk $(pkg-config --modversion libdpdk)"
