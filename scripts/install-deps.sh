#!/usr/bin/env bash
# Installs, on a Debian machine, every system package that building and testing Warpcore
# needs, and nothing when they are all present already (no `apt-get update` then either).
#
#   scripts/install-deps.sh            # build + test dependencies
#   scripts/install-deps.sh --demo     # only what the demo needs
#   scripts/install-deps.sh --list     # print the build + test packages, one a line; install nothing
#
# Needs root (or sudo) to install; prints what it does. Without --demo it also adds the Rust
# tools the suite runs (rustup's rustfmt and clippy, cargo-fuzz) when they are missing.
set -euo pipefail
case "${1:-}" in
    "" | --demo | --list) ;;
    *) echo "install-deps: unknown argument '$1' (usage: install-deps.sh [--demo | --list])" >&2; exit 2 ;;
esac

# libibverbs-dev, librdmacm-dev: the rdma-core headers rdma-compat's layouts come from.
build_pkgs=(pkg-config clang libclang-dev dpdk dpdk-dev libdpdk-dev libibverbs-dev librdmacm-dev)
# qemu-system-x86, kmod, cpio, binutils, make, xz-utils: the Linux siw VM of the interop
# check (scripts/test-interop-short.sh, interop/siw-vm/build.sh, whose `tar -xJ` of the
# kernel source runs xz: xz-utils is of priority standard, absent from minimal installs).
# perftest, rdmacm-utils, ibverbs-utils: Debian's unmodified rdma-core programs run on
# Warpcore through scripts/with-warpcore (scripts/test-rdma-compat.sh); gcc builds its C
# checks as Debian's gcc builds a program (clang alone provides no `gcc`).
# libfabric-bin, openmpi-bin, libopenmpi-dev: libfabric's verbs provider and Open MPI over
# it, on the drop-in libraries (scripts/test-libfabric.sh).
# valgrind: bench/compare.sh's instruction counts per message (callgrind), issue 12's
# load-independent evidence.
test_pkgs=(tshark iperf3 qperf socat iproute2 iputils-ping ethtool python3 qemu-system-x86 kmod cpio binutils make xz-utils linux-libc-dev perftest rdmacm-utils ibverbs-utils gcc libfabric-bin openmpi-bin libopenmpi-dev valgrind)
pkgs=("${build_pkgs[@]}")
if [[ "${1:-}" != "--demo" ]]; then
    pkgs+=("${test_pkgs[@]}")
fi
if [[ "${1:-}" == "--list" ]]; then
    printf '%s\n' "${pkgs[@]}"
    exit 0
fi

# Rust first, before any package is installed: the workspace's rust-version is 1.89 (the
# engine's AVX-512 CRC32c uses intrinsics stable since then).
if ! command -v cargo >/dev/null 2>&1 || ! command -v rustc >/dev/null 2>&1; then
    echo "install-deps: cargo or rustc not found; install Rust with rustup (https://rustup.rs) first" >&2
    exit 1
fi
rustc_version=$(rustc --version 2>&1 || true)
if [[ "$rustc_version" =~ ^rustc\ ([0-9]+)\.([0-9]+) ]]; then
    if (( BASH_REMATCH[1] == 1 && BASH_REMATCH[2] < 89 )); then
        echo "install-deps: $rustc_version is older than the workspace's 1.89;" \
            "update it with 'rustup update stable'" >&2
        exit 1
    fi
else
    echo "install-deps: cannot read rustc's version ('$rustc_version')" >&2
    exit 1
fi

missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done

if ((${#missing[@]})); then
    echo "install-deps: installing ${missing[*]}"
    sudo=""
    if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
    # tshark asks whether non-root users may capture; answer "no" up front so the install
    # never waits for input.
    echo "wireshark-common wireshark-common/install-setuid boolean false" | $sudo debconf-set-selections
    # DEBIAN_FRONTEND through env, after sudo: sudo's env_reset drops the caller's variables,
    # and apt-get then asked iperf3's debconf question and waited for an answer.
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
    echo "install-deps: all system packages present"
fi

# The Rust tools the suite runs beside cargo and rustc, after the system packages (cargo
# install links with cc): rustfmt and clippy (scripts/test.sh's format and lint steps; a
# rustup "minimal" profile, that of Rust's container images, has neither) and cargo-fuzz
# (scripts/test-fuzz.sh), here in the install phase rather than from the network in the
# middle of the test run. The demo needs none of them.
if [[ "${1:-}" != "--demo" ]]; then
    components=()
    cargo fmt --version >/dev/null 2>&1 || components+=(rustfmt)
    cargo clippy --version >/dev/null 2>&1 || components+=(clippy)
    if ((${#components[@]})); then
        if ! command -v rustup >/dev/null 2>&1; then
            echo "install-deps: cargo has no ${components[*]}, and there is no rustup to add them;" \
                "install the toolchain's ${components[*]}" >&2
            exit 1
        fi
        echo "install-deps: adding the Rust components ${components[*]}"
        rustup component add "${components[@]}"
    fi
    if ! command -v cargo-fuzz >/dev/null 2>&1; then
        echo "install-deps: installing cargo-fuzz"
        cargo install --locked cargo-fuzz
    fi
fi
