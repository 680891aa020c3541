#!/usr/bin/env bash
# The short interop check against Linux siw, for scripts/test.sh (scripts/interop-siw.sh
# --short): rping both directions, ib_write_bw -R against iwperf --perftest, and Debian's
# rping -c and ib_write_bw -R server on the drop-in libraries (scripts/with-warpcore), MPA
# Rev 2 default mode (one VM boot, about 1.5 min
# on 2 cores under TCG; the first run also builds the VM, about 1 min, see
# interop/siw-vm/README.md). Any failed row exits non-zero.
#
# A check that cannot run fails loudly; it never skips silently:
# - the rig itself (interop/siw-vm/run.sh, or $SIWVM/run.sh) missing: always fails, the
#   checkout is incomplete;
# - the machine cannot run it (not root, no /dev/net/tun, no qemu-system-x86_64, tshark or
#   ethtool): fails, unless the caller opts out with WARPCORE_SKIP_SIW=1 (or a reason
#   instead of 1), which prints a SKIPPED line saying what is missing and exits 0 (and
#   scripts/test.sh names the skip in its last line). With CI=true the opt-out fails too:
#   CI must run the check (as test-net.sh's WARPCORE_SKIP_NET). On a machine that can run
#   the check WARPCORE_SKIP_SIW is ignored: the check runs.
#
#   scripts/test-interop-short.sh
#   WARPCORE_SKIP_SIW="laptop without qemu" scripts/test-interop-short.sh
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

fail() {
    echo "interop-short: FAILED: $*" >&2
    exit 1
}

SIWVM=${SIWVM:-$root/interop/siw-vm}
[ -x "$SIWVM/run.sh" ] || fail "the siw VM rig is missing ($SIWVM/run.sh not found or not executable); the checkout is incomplete"

cannot=()
[ "$(id -u)" = 0 ] || cannot+=("not root (network namespaces and TAP devices need it)")
[ -c /dev/net/tun ] || cannot+=("no /dev/net/tun")
for t in qemu-system-x86_64 tshark ethtool; do
    command -v "$t" >/dev/null || cannot+=("no $t (scripts/install-deps.sh installs it)")
done
if [ ${#cannot[@]} -gt 0 ]; then
    reasons=$(IFS=';'; echo "${cannot[*]}" | sed 's/;/; /g')
    if [ "${CI:-}" = true ]; then
        fail "this machine cannot run the siw check: $reasons (required with CI=true; WARPCORE_SKIP_SIW does not apply)"
    fi
    if [ -n "${WARPCORE_SKIP_SIW:-}" ]; then
        echo "interop-short: SKIPPED (WARPCORE_SKIP_SIW=$WARPCORE_SKIP_SIW): this machine cannot run the siw check: $reasons  <-- the siw check did NOT run"
        exit 0
    fi
    fail "this machine cannot run the siw check: $reasons (set WARPCORE_SKIP_SIW=1 to opt out explicitly)"
fi
[ -z "${WARPCORE_SKIP_SIW:-}" ] || echo "interop-short: WARPCORE_SKIP_SIW is set, but this machine can run the check: running it"

echo "interop-short: running the siw short check (rig $SIWVM, VM cache ${SIWVM_DIR:-/var/tmp/siw-vm})"
# A private namespace name, so a developer's own iwtest set-up is left alone.
IWTEST_NS=${IWTEST_NS:-wcinterop$$} SIWVM=$SIWVM scripts/interop-siw.sh --short
rc=$?
[ "$rc" = 0 ] || fail "the siw short check ran and failed (exit $rc), see the table above"
echo "interop-short: PASSED: the siw short check ran in $SECONDS s"
