# shellcheck shell=bash
# The pass/fail tally of the end-to-end test scripts (test-iwperf.sh, test-rdma-compat.sh,
# test-libfabric.sh), each of which keeps its programs' output in "$work"/*.log:
#   ok WHAT    counts a pass and prints "ok   WHAT";
#   bad WHAT   counts a failure, prints "FAIL WHAT", the last 25 lines of every log in
#              $work and the tally, and exits 1 (a script stops at its first failure).
passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok   $*"; }
bad() {
    failed=$((failed + 1))
    echo "FAIL $*"
    local f
    for f in "$work"/*.log; do [[ -f $f ]] && { echo "--- $f"; tail -25 "$f"; }; done
    echo "$passed passed, $failed failed"
    exit 1
}
