#!/usr/bin/env bash
# The one build of what the test and interop scripts run: warpcore-apps' binaries
# (iwperf, iwping, iwdump, tcpperf, wcsoak, wcconnrate) and the drop-in C libraries
# (libibverbs, librdmacm, the provider stand-ins), in one cargo invocation.
#
#   scripts/build.sh            # release: what the scripts run
#   scripts/build.sh --debug    # the dev profile (scripts/with-warpcore --debug)
#
# One invocation with one package list, because cargo resolves the dependencies' features
# for the packages named on its command line: `-p warpcore-apps --bin tcpperf`, the drop-in
# libraries' `-p warpcore-rdma-compat -p warpcore-rdmacm -p warpcore-provider-stand-ins` and
# the two together were three feature sets, and each built the release dependencies again
# (71 crates, about 50 s on 2 cores, each time). And one binary a call built them in a row
# (14-23 s each, one core; the release profile has one codegen unit), where one call builds
# two at once. The first script of a suite run builds everything; the others find it done
# (cargo decides: a changed source is built again).
set -euo pipefail
cd "$(dirname "$0")/.."
profile=(--release)
case ${1:-} in
    "") ;;
    --debug) profile=() ;;
    *) echo "build.sh: unknown option '$1' (--debug builds the dev profile)" >&2; exit 2 ;;
esac
exec cargo build "${profile[@]}" -q -p warpcore-apps -p warpcore-rdma-compat -p warpcore-rdmacm \
    -p warpcore-provider-stand-ins --lib --bins
