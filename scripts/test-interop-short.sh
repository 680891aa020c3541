#!/usr/bin/env bash
# The short interop check against Linux siw, for scripts/test.sh: rping both directions and
# ib_write_bw -R against iwperf --perftest, MPA Rev 2 default mode (one VM boot, about 1.5 min
# on 2 cores under TCG). Runs only where it
# can: root, /dev/net/tun, qemu-system-x86_64, tshark and the siw-vm scripts present;
# otherwise it says why and exits 0 (skipped). Any failed row exits non-zero.
#
#   scripts/test-interop-short.sh
set -uo pipefail
cd "$(dirname "$0")/.."
skip() { echo "interop-short: skipped: $*"; exit 0; }
[ "$(id -u)" = 0 ] || skip "needs root"
[ -c /dev/net/tun ] || skip "no /dev/net/tun"
command -v qemu-system-x86_64 >/dev/null || skip "no qemu-system-x86_64"
command -v tshark >/dev/null || skip "no tshark"
SIWVM=${SIWVM:-/work/shared/interop/siw-vm}
[ -x "$SIWVM/run.sh" ] || skip "no siw-vm scripts at $SIWVM"
# A private namespace name, so a developer's own iwtest set-up is left alone.
IWTEST_NS=${IWTEST_NS:-wcinterop$$} SIWVM=$SIWVM exec scripts/interop-siw.sh --short
