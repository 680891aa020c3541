# shellcheck shell=bash
# shellcheck disable=SC2034 # BG_NOTE is for the caller
# bg_end PID WHAT SECS: the end of a background server (iperf3 -s -1, tcpperf kernel-server,
# an iwperf or wcbench server side) once its client is done. Waits up to SECS seconds for
# PID to exit and returns its exit status; one still running then is killed, and that is a
# failure (status 124, as timeout's). On a failure BG_NOTE says what happened, naming WHAT.
# A server that failed, crashed or hung is a run that failed: its figures are no
# measurement, so a caller fails (or reads them as n/a), never prints them as one.
# Sourced by scripts/tcpperf-compare.sh, scripts/test-flood.sh, bench/compare.sh, bench/loss.sh and
# bench/afp-budget.sh; scripts/test-harness.sh shows it failing each kind of end.
bg_end() {
    local pid=$1 what=$2 secs=$3 rc=0 i
    BG_NOTE=""
    for ((i = 0; i < secs * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        BG_NOTE="$what still ran $secs s after its client finished (stopped)"
        return 124
    fi
    wait "$pid" || rc=$?
    if ((rc != 0)); then
        BG_NOTE="$what exited $rc$( ((rc > 128)) && echo " (signal $((rc - 128)))")"
    fi
    return "$rc"
}
