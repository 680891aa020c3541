# shellcheck shell=bash
# shellcheck disable=SC2034 # IPERF3_GBPS and IPERF3_NOTE are for the caller
# iperf3_gbps JSON: the throughput of an `iperf3 -c ... -J` report (its end.sum_received, in
# Gbit/s, three decimals) in IPERF3_GBPS; returns 1 with the reason in IPERF3_NOTE when the
# report holds none. iperf3 (3.12) exits 0 with -J on a run that failed (a refused
# connection) and writes the reason into the report's "error", on stdout: a caller that
# looked at its exit status and its stderr saw nothing wrong, and a report without
# sum_received died in a Python KeyError that named no reason. A throughput of 0 (or none)
# is no baseline either: a ratio against it is no measurement.
# Sourced by bench/loss.sh, bench/afp-budget.sh and bench/compare.sh; scripts/test-harness.sh
# shows their failures.
iperf3_gbps() {
    IPERF3_GBPS="" IPERF3_NOTE=""
    local out
    if out=$(python3 - "$1" 2>&1 <<'PY'
import json, sys
path = sys.argv[1]
try:
    with open(path) as f:
        d = json.load(f)
except (OSError, ValueError) as e:
    sys.exit("no iperf3 report in %s (%s)" % (path, e))
if not isinstance(d, dict):
    sys.exit("no iperf3 report in %s (not a JSON object)" % path)
if d.get("error"):
    sys.exit("iperf3: %s" % d["error"])
end = d.get("end") if isinstance(d.get("end"), dict) else {}
got = end.get("sum_received") if isinstance(end.get("sum_received"), dict) else {}
b = got.get("bits_per_second")
if isinstance(b, bool) or not isinstance(b, (int, float)) or not b > 0:
    sys.exit("iperf3 measured no throughput (end.sum_received.bits_per_second: %s)" % json.dumps(b))
print("%.3f" % (b / 1e9))
PY
    ); then
        IPERF3_GBPS=$out
        return 0
    fi
    IPERF3_NOTE=$out
    return 1
}
