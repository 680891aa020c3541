#!/usr/bin/env bash
# The soak (issue 15): two wcsoak runs of MINUTES minutes each (default 2, as scripts/test.sh
# runs it; the issue's figure is 60), side by side:
#   - over the in-memory link with 1 % loss each way;
#   - over DPDK net_memif (a memif server port and its client in one process, no loss: the
#     shared-memory rings and the driver two processes use).
# Each opens and closes connections continuously, with fresh regions, queues, shared
# receive queues and memory windows for each, a verified mix of RDMA Writes, Reads, Sends,
# FetchAdds and Writes through the windows, and every report the process's RSS and
# descriptors, the engine's table occupancy and, over net_memif, the mbufs taken from the
# DPDK pool. First it shows that its own judge can fail:
# a short run with a planted region leak must be caught.
#
#   scripts/soak.sh [MINUTES]
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-2}
scripts/build.sh # every binary the scripts run, wcsoak among them
soak=${CARGO_TARGET_DIR:-target}/release/wcsoak
log=$(mktemp /tmp/wcsoak.XXXXXX)
trap 'rm -f "$log"' EXIT

if "$soak" --minutes 0.2 --report-secs 2 --inject-defect leak-region >"$log" 2>&1; then
    cat "$log"
    echo "soak: FAIL: the planted region leak was NOT caught" >&2
    exit 1
fi
grep -q "registered regions left" "$log" || { cat "$log"; echo "soak: FAIL: the planted leak failed for another reason" >&2; exit 1; }
echo "soak: planted region leak caught: $(grep -o 'between rounds:.*' "$log")"

# Reports: every 20 s for short runs, every minute from 5 minutes on.
every=$(awk -v m="$minutes" 'BEGIN { print (m >= 5) ? 60 : 20 }')
memif_log=$(mktemp /tmp/wcsoak-memif.XXXXXX)
# Both soaks run in the background and this script waits for them: stopped early (Ctrl-C,
# which background processes of a script ignore, or a kill), it ends them, rather than
# leave them running for MINUTES.
memif_pid="" link_pid=""
trap 'for p in $memif_pid $link_pid; do kill "$p" 2>/dev/null; done; rm -f "$log" "$memif_log"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
"$soak" --minutes "$minutes" --report-secs "$every" --loss 0 --loopback=memif \
    --seed 2 >"$memif_log" 2>&1 &
memif_pid=$!
echo "soak: over the in-memory link, 1 % loss each way"
"$soak" --minutes "$minutes" --report-secs "$every" &
link_pid=$!
link_rc=0
wait "$link_pid" || link_rc=$?
link_pid=""
memif_rc=0
wait "$memif_pid" || memif_rc=$?
memif_pid=""
echo "soak: over net_memif (both ports in one process), no loss"
grep -v '^EAL' "$memif_log" || true
if ((link_rc != 0 || memif_rc != 0)); then
    echo "soak: FAIL (in-memory link: exit $link_rc, net_memif: exit $memif_rc)" >&2
    exit 1
fi
