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
#
# bg_stop PID WHAT SECS: the end of a background server that serves until it is stopped
# (qperf's server), once its clients are done. It must still be running then: one that had
# exited (a crash, or a port already taken, when qperf prints "unable to bind to listen
# port" and exits 1) served nothing, and a client that got figures got them from another
# process's server (on another CPU, in another run). Stops it (SIGTERM), waits up to SECS
# seconds (then SIGKILL), and returns 0 when it ran until stopped and ended by the stop
# (exit 0 or the SIGTERM); else non-zero, BG_NOTE saying what happened, naming WHAT.
#
# bg_run CMD...: CMD as a foreground command (its exit status returned, its output where the
# caller sends it), but run in the background and in the caller's `pids` while it runs, then
# forgotten (bg_forget). A script stopped (SIGTERM) while a foreground client ran ended in
# its EXIT trap, which kills the pids it knows: the client, not among them, ran on for up to
# its timeout (120-180 s), polling a core. CMD must be a program (a function would run in a
# subshell, whose children the kill would not reach); its stdin is /dev/null.
#
# bg_forget PID: takes PID out of the caller's `pids` (the processes its EXIT trap kills)
# once PID has been reaped (bg_end, bg_stop or wait): its number is free for reuse then, and
# a trap that still killed it would kill whichever process got the number next.
#
# bg_kill_all: what an EXIT trap calls to end what the script started: every pid in `pids`,
# and the last process started in the background ($!) while it is still this shell's child.
# A SIGTERM that lands between `CMD &` and `pids+=("$!")` (bg_run's, or a caller's own) runs
# the trap before the pid is in the list: the process ran on, and a busy 2-vCPU CI host let
# a stand-in client start and write its pid file in that window (test-harness.sh's "stopped
# mid-run" case for bench/afp-budget.sh). $! is killed only while its parent is this shell:
# once reaped, its number may belong to another program.
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

bg_run() {
    local p rc=0
    "$@" </dev/null &
    p=$!
    pids+=("$p")
    wait "$p" || rc=$?
    bg_forget "$p"
    return "$rc"
}

bg_forget() {
    local p keep=()
    for p in "${pids[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
    pids=("${keep[@]}")
}

bg_stop() {
    local pid=$1 what=$2 secs=$3 rc=0 i
    BG_NOTE=""
    if ! kill -0 "$pid" 2>/dev/null; then
        wait "$pid" || rc=$?
        BG_NOTE="$what had exited $rc$( ((rc > 128)) && echo " (signal $((rc - 128)))") before its clients were done"
        return $((rc == 0 ? 1 : rc))
    fi
    kill "$pid" 2>/dev/null || true
    for ((i = 0; i < secs * 10; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        BG_NOTE="$what still ran $secs s after it was stopped (killed)"
        return 124
    fi
    wait "$pid" || rc=$?
    ((rc == 0 || rc == 143)) && return 0
    BG_NOTE="$what exited $rc$( ((rc > 128)) && echo " (signal $((rc - 128)))") when it was stopped"
    return "$rc"
}

bg_kill_all() {
    local p last=${!:-} stat ppid
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    [[ -n $last ]] && read -r stat 2>/dev/null <"/proc/$last/stat" || return 0
    # The fields after the command's name, whose parentheses may hold spaces: state, ppid.
    read -r _ ppid _ <<<"${stat##*) }"
    [[ $ppid == "$BASHPID" ]] && kill "$last" 2>/dev/null
    return 0
}
