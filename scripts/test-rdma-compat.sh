#!/usr/bin/env bash
# Debian's unmodified rdma-core programs on Warpcore, through scripts/with-warpcore and
# the drop-in libibverbs.so.1 / librdmacm.so.1 (rdma-compat/), between two processes over
# DPDK net_memif (no hugepages), issue 13's acceptance:
#   1. the drop-ins export what the system's libraries export, under the same versions,
#      and the programs load against them (every symbol they import resolves);
#   2. rdmacm-utils: rping -v -V -C 10, ucmatose (8 connections), rdma_server/rdma_client,
#      between two with-warpcore processes, rping between two DPDK applications' processes
#      (each starts its own EAL first, which the drop-in joins), and rping against iwping
#      both ways;
#      and rdma-compat/tests/c/verbs_check.c (windows, atomics, immediate data, Terminate);
#   3. perftest -R: ib_write_bw, ib_read_bw, ib_send_bw, ib_write_lat, ib_read_lat,
#      ib_send_lat, ib_atomic_bw between two with-warpcore processes, and each of the seven
#      against iwperf --perftest in both roles; each client's result row judged by its
#      figures (scripts/lib/perftest-row.sh: the size and -n asked for, positive finite
#      bandwidth or latencies), not by its header alone;
#   4. the errors a user hits: no WARPCORE_IP, a bad variable, UD (udaddy);
#   5. the C contract checks, rdma-compat/tests/c/<contract>.c: clauses of the rdma-core man
#      pages (object lifetimes, flushes, events), each program printing "ok: <clause>" per
#      check and "<name>: all checks passed" last; a build error, a crash, a non-zero exit
#      or a missing last line fails the suite (nothing is skipped). They run four at a time
#      (WARPCORE_CONTRACT_JOBS=N for another count; 1 runs them one after the other), each
#      in a directory of its own, their output printed in order.
# Exits non-zero on the first failure; prints "N passed, N failed".
#
#   scripts/test-rdma-compat.sh                      # about two minutes
#   scripts/test-rdma-compat.sh contracts            # 5 only (about a minute; the release build)
#   scripts/test-rdma-compat.sh --debug contracts    # 5 only, on the debug build
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
profile=release
only=
while [[ $# -gt 0 ]]; do
    case "$1" in
        --debug) profile=debug; shift ;;
        contracts) only=contracts; shift ;;
        *) echo "usage: $0 [--debug] [contracts]" >&2; exit 2 ;;
    esac
done

for t in rping ucmatose udaddy mckey rdma_server rdma_client ib_write_bw ib_read_bw ib_send_bw \
    ib_write_lat ib_read_lat ib_send_lat ib_atomic_bw ibv_devices objdump gcc; do
    if ! command -v "$t" >/dev/null; then
        echo "FAIL $t is not installed: scripts/install-deps.sh installs perftest, rdmacm-utils and ibverbs-utils"
        exit 1
    fi
done
# The drop-in libraries, iwperf and iwping among the rest (scripts/build.sh).
if [[ $profile == release ]]; then
    scripts/build.sh || exit 1
    WW=("$root/scripts/with-warpcore")
else
    [[ $only == contracts ]] || { echo "--debug runs the contract checks only: add 'contracts'" >&2; exit 2; }
    scripts/build.sh --debug || exit 1
    WW=("$root/scripts/with-warpcore" --debug)
fi
# Where cargo put it: $CARGO_TARGET_DIR (relative to the checkout) when set, else target/.
case ${CARGO_TARGET_DIR:-target} in /*) tgt=$CARGO_TARGET_DIR ;; *) tgt=$root/${CARGO_TARGET_DIR:-target} ;; esac
IWPERF="$tgt/release/iwperf"
IWPING="$tgt/release/iwping"
work=$(mktemp -d /tmp/rdma-compat-test.XXXXXX)
sock=$work/memif.sock
# shellcheck source=scripts/lib/bg-end.sh
source scripts/lib/bg-end.sh # bg_kill_all, for the EXIT trap
pids=()
declare -A cjob_running=() # the contracts running (cjob), for cleanup
cleanup() {
    bg_kill_all
    # The contracts still running (cjob): each subshell's own servers and clients are not in
    # this shell's pids, and a subshell runs no EXIT trap. Their children are `timeout`s,
    # which pass the TERM to what they run.
    local p
    for p in "${!cjob_running[@]}"; do
        pkill -TERM -P "$p" 2>/dev/null
        kill "$p" 2>/dev/null
    done
    rm -rf "$work"
}
trap cleanup EXIT

# shellcheck source=lib/tally.sh
. scripts/lib/tally.sh
# shellcheck source=lib/perftest-row.sh
. scripts/lib/perftest-row.sh

# --- 5. the C contract checks ---------------------------------------------------------------
# Built against the system's headers and libraries as Debian's gcc builds a program
# (-Wl,--as-needed), run through with-warpcore. contract NAME: one process (it needs no
# peer); contract_pair NAME PORT: NAME -s ADDR PORT in a server process, NAME -c ADDR PORT
# (the checks) in a client process.
contract_cc() { # contract_cc NAME: the one compile of a contract
    gcc -O2 -Wall -Werror -Wl,--as-needed -I rdma-compat/tests/c -o "$work/$1" "rdma-compat/tests/c/$1.c" \
        -lrdmacm -libverbs
}
contract_build() {
    # Built already by contracts_prebuild: one contract after the other, the 63 compiles
    # took about 13 s of one core while the other idled.
    [[ -x $work/$1 ]] && return 0
    contract_cc "$1" || bad "$1.c does not build against the system's libibverbs-dev/librdmacm-dev"
}
# contracts_prebuild: every contract `contracts` names, compiled on all cores at once. One
# that does not build is left to its contract_build, which compiles it again and names it.
contracts_prebuild() {
    local names
    names=$(declare -f contracts | grep -oE '^ *(cjob )?(contract|contract_pair|contract_build) [a-z0-9_]+' |
        awk '{ print $NF }' | sort -u)
    [[ -n $names ]] || bad "contracts_prebuild: found no contract in the contracts function"
    export -f contract_cc
    export work
    xargs -P "$(nproc)" -n 1 bash -c 'contract_cc "$1" >/dev/null 2>&1 || true' _ <<<"$names"
}
contract_done() { # NAME LOG: the last line says every check passed
    grep -q "^$1: all checks passed" "$2" || bad "$1: not every check passed"
    ok "$1: $(grep -c "^ok:" "$2") checks passed"
}
contract() {
    local name=$1
    shift
    contract_build "$name"
    rm -f "$sock" "$work"/*.log
    sides
    timeout 60 "${SRV[@]}" "$work/$name" "$@" >"$work/$name.log" 2>&1 || bad "$name exited $?"
    contract_done "$name" "$work/$name.log"
}
contract_pair() {
    local name=$1 port=$2
    contract_build "$name"
    pair "$name" SRV "$work/$name" -s 10.77.0.1 "$port" :: CLI "$work/$name" -c 10.77.0.1 "$port"
    contract_done "$name" "$work/client.log"
}
# cjob FUNCTION NAME [ARG...]: `FUNCTION NAME ARG...` (contract or contract_pair) in a
# subshell of its own, in a work directory of its own ($work/c.NAME: its memif socket, its
# logs, its program), at most $cjobs_max at once; contracts_wait prints each one's output in
# the order they started and adds its tally. The contracts wait far more than they compute
# (63 of them took 113 s with 21 s of user CPU one after the other; four at once, 49 s).
# Each pair has a port and a memif socket of its own, and with-warpcore a DPDK file prefix.
cjobs_max=${WARPCORE_CONTRACT_JOBS:-4}
cjob_pids=() cjob_names=()
cjob() {
    local name=$2 done_pid p
    while ((${#cjob_running[@]} >= cjobs_max)); do
        done_pid=
        wait -n -p done_pid "${!cjob_running[@]}" 2>/dev/null || true
        [[ -n $done_pid ]] && unset "cjob_running[$done_pid]"
        # A job whose end the shell took before this wait is not reported by it (wait
        # then returns 127 at once): what no longer runs is done as well.
        for p in "${!cjob_running[@]}"; do kill -0 "$p" 2>/dev/null || unset "cjob_running[$p]"; done
    done
    mkdir -p "$work/c.$name"
    if [[ -x $work/$name ]]; then ln -f "$work/$name" "$work/c.$name/$name"; fi
    (
        work=$work/c.$name
        sock=$work/memif.sock passed=0 failed=0 pids=()
        "$@"
        echo "TALLY $passed"
    ) >"$work/c.$name/out" 2>&1 &
    cjob_running[$!]=1
    cjob_pids+=("$!") cjob_names+=("$name")
}
contracts_wait() {
    local i out n
    wait "${cjob_pids[@]}" 2>/dev/null
    for i in "${!cjob_names[@]}"; do
        out=$work/c.${cjob_names[i]}/out
        # (Its own tally line, of this contract alone, gives way to the one below.)
        grep -v -E '^TALLY |^[0-9]+ passed, [0-9]+ failed$' "$out"
        n=$(sed -n 's/^TALLY \([0-9]*\)$/\1/p' "$out")
        if [[ -z $n ]] || grep -q '^FAIL ' "$out"; then
            # Its FAIL line and its logs are printed above (tally.sh's bad, in the subshell).
            grep -q '^FAIL ' "$out" || echo "FAIL ${cjob_names[i]}: its run ended without a tally"
            failed=$((failed + 1))
            echo "$passed passed, $failed failed"
            exit 1
        fi
        passed=$((passed + n))
    done
    cjob_pids=() cjob_names=()
    cjob_running=()
}
contracts() {
    contracts_prebuild
    cjob contract lifetime_ebusy
    cjob contract_pair destroy_id_cancels 7480
    cjob contract_pair destroy_channel_first 7504
    cjob contract_pair flush_order_notify 7482
    cjob contract_pair dereg_mr_ebusy 7484
    cjob contract_pair cm_conn_param 7486
    cjob contract_pair migrate_id_moves 7488
    cjob contract_pair sync_id_event 7490
    cjob contract_pair cq_err_async 7492
    cjob contract_pair srq_limit_event 7494
    cjob contract_pair disconnect_states 7496
    cjob contract_pair init_qp_attr_states 7498
    cjob contract_pair connect_refused 7500
    cjob contract_pair cm_conn_param_rev1 7502
    cjob contract_pair bad_lkey_completes 7506
    cjob contract_pair listen_backlog 7520
    cjob contract_pair listen_unbound_id 7508
    cjob contract_pair src_port_contract 7510
    cjob contract_pair threaded_post_imm_flush 7512
    cjob contract_pair unsignaled_bind_inv 7514
    cjob contract_pair last_wqe_reached 7518
    cjob contract_pair sync_request_fds 7522
    cjob contract_pair second_connect 7524
    cjob contract_pair rejected_qp_err 7526
    cjob contract_pair mr_mw_inputs 7528
    cjob contract_pair get_request_other_event 7532
    cjob contract_pair modify_during_connect 7540
    cjob contract_pair imm_inline_atomic 7542
    cjob contract_pair modify_qp_sqd 7544
    cjob contract_pair reset_clears_ird_ord 7546
    cjob contract_pair racing_binds 7548
    cjob contract_pair exit_closes 7550
    cjob contract_pair destroy_id_closes 7552
    cjob contract_pair destroy_id_passive 7554
    cjob contract_pair exit_refuses_request 7556
    cjob contract_pair destroy_id_reset 7560
    cjob contract_pair exit_unlistens 7562
    cjob contract rdmacm_exports
    cjob contract id_device_pd
    cjob contract bind_addr_in_use
    cjob contract route_during_addr_query
    cjob contract listen_resolve_states
    cjob contract modify_qp_err_flush
    cjob contract cq_event_ack
    cjob contract destroy_cq_drops_event
    cjob contract async_event_flood
    cjob contract post_num_sge
    cjob contract reg_mr_fault
    cjob contract post_inline
    cjob contract query_limits
    cjob contract qp_state_field
    cjob contract create_qp_caller_cqs
    cjob contract verbs_strs_rereg
    cjob contract qp_reset_after_err
    cjob contract verbs_helpers
    cjob contract bad_input_bounds
    cjob contract gid_mac
    cjob contract atomic_cap_off
    cjob contract verbs_inputs_errno
    cjob contract migrate_waits_ack
    cjob contract migrate_same_channel
    cjob contract srq_qp_recv_caps
    cjob contract getaddrinfo_eai
    cjob contract post_err_qp
    cjob contract modify_qp_mask
    cjob contract fd_errno
    cjob contract create_qp_attr_back
    contracts_wait
    # Only meaningful if the program itself does not need libibverbs.so.1. objdump's output
    # is read whole before grep judges it: `! objdump | grep -q` under pipefail passed when
    # grep's early exit on the match cut objdump off (SIGPIPE) and when objdump failed.
    contract_build rdmacm_only_as_needed
    local dynamic
    dynamic=$(objdump -p "$work/rdmacm_only_as_needed") ||
        bad "objdump -p could not read rdmacm_only_as_needed: the check would prove nothing"
    ! grep -q "NEEDED *libibverbs" <<<"$dynamic" ||
        bad "rdmacm_only_as_needed links libibverbs.so.1 itself: the check would prove nothing"
    contract rdmacm_only_as_needed
}

# loads PROG: PROG starts on the drop-ins in $lib with every symbol bound (LD_BIND_NOW). Its
# --help output is read whole (a loader error after the usage text, as a symbol resolved
# late prints it, was missed in the first 3 lines read before), and its exit status must be
# the program's own: --help exits 1 or 22 (rping), the loader 127, a crash in a constructor
# 128 + its signal. Sets LOAD_NOTE to what was wrong.
loads() {
    local out rc=0
    out=$(LD_BIND_NOW=1 LD_LIBRARY_PATH="$lib" "$(command -v "$1")" --help 2>&1 </dev/null) || rc=$?
    LOAD_NOTE=$(grep -m1 "symbol lookup error\|version .* not found\|undefined symbol\|error while loading shared libraries" <<<"$out")
    [[ -z $LOAD_NOTE ]] || return 1
    if ((rc == 127 || rc >= 128)); then
        LOAD_NOTE="--help exited $rc (127: the loader; above 128: a signal): $(tail -n 1 <<<"$out")"
        return 1
    fi
}

# --- 1. symbols and versions -----------------------------------------------------------
lib="$tgt/warpcore-rdma-$profile"
if [[ -z $only ]]; then
"${WW[@]}" --memif-server "$sock" --ip 10.77.0.1 -- true || bad "with-warpcore could not lay out the libraries"
# Every function the drop-in exports is exported by the system's library with the same
# default version (an application linked against the system's finds it here).
sysdef() { objdump -T "$1" | awk '$2=="g" && $4 !~ /^\(/ && $3 != "*UND*" {print $NF, $(NF-1)}' | sort; }
for pair in "libibverbs.so.1:IBVERBS" "librdmacm.so.1:RDMACM"; do
    name=${pair%%:*}
    node=${pair##*:}
    ours=$(sysdef "$lib/$name" | grep " $node" || true)
    theirs=$(sysdef "/usr/lib/x86_64-linux-gnu/$name")
    [[ -n "$ours" ]] || bad "$name: no versioned symbols"
    extra=$(comm -23 <(echo "$ours") <(echo "$theirs"))
    [[ -z "$extra" ]] || bad "$name exports what the system's does not (or at another version): $extra"
    ok "$name: $(echo "$ours" | grep -vc "^$node") functions, each at the system library's version"
done
# The programs load: every symbol they import from the drop-ins (and the stand-ins) exists
# at the version they ask for (LD_BIND_NOW resolves all of them at start-up).
for p in rping ucmatose rdma_server rdma_client mckey ib_write_bw ib_read_bw ib_send_bw ib_write_lat \
    ib_read_lat ib_send_lat ib_atomic_bw; do
    loads "$p" || bad "$p does not load on the drop-ins: $LOAD_NOTE"
done
ok "rdmacm-utils (mckey too) and perftest load against the drop-ins with every symbol bound"
devs=$("${WW[@]}" --memif-server "$sock" --ip 10.77.0.1 -- ibv_devices 2>&1)
grep -q "warpcore0" <<<"$devs" || bad "ibv_devices does not list warpcore0: $devs"
ok "ibv_devices lists warpcore0"
fi

# --- helpers: two with-warpcore processes over a fresh memif socket --------------------
# pair NAME SERVER_COMMAND... :: CLIENT_COMMAND...: the server runs in the background (memif
# server, 10.77.0.1), the client in the foreground (memif client, 10.77.0.2); both must exit 0.
# The word SRV (CLI) in a command stands for with-warpcore's arguments of that side.
MODE=${MODE:-thread}
pair() {
    local name=$1
    shift
    local s=() c=() a
    sides
    while [[ $1 != :: ]]; do
        if [[ $1 == SRV ]]; then s+=("${SRV[@]}"); else s+=("$1"); fi
        shift
    done
    shift
    for a in "$@"; do
        if [[ $a == CLI ]]; then c+=("${CLI[@]}"); else c+=("$a"); fi
    done
    # A perftest side whose clock calibration failed after its test (perftest_clock_failed)
    # runs the pair again, at most twice, and says so; a third such failure fails the check.
    local clock=0 sp
    while :; do
        rm -f "$sock" "$work"/*.log
        timeout 90 "${s[@]}" >"$work/server.log" 2>&1 &
        sp=$!
        pids+=("$sp")
        for _ in $(seq 1 100); do [[ -S "$sock" ]] && break; sleep 0.05; done
        sleep 0.5
        # A client that finds nobody listening yet (a loaded machine starts the server's
        # engine late) is refused, and rping and perftest do not retry: try again while the
        # server runs.
        local tries=0
        until timeout 80 "${c[@]}" >"$work/client.log" 2>&1; do
            tries=$((tries + 1))
            if [[ $tries -lt 20 ]] && kill -0 "$sp" 2>/dev/null &&
                grep -q -E 'REJECTED|CONNECT_ERROR|UNREACHABLE|connect error|Unable to perform rdma_client|error -111|Connection refused' \
                    "$work/client.log"; then
                sleep 0.5
                continue
            fi
            kill "$sp" 2>/dev/null
            wait "$sp" 2>/dev/null
            # Reaped: its pid is free for reuse, and not the EXIT trap's to kill
            # (scripts/lib/bg-end.sh's bg_forget).
            bg_forget "$sp"
            if ((clock < 2)) && perftest_clock_failed "$work/client.log"; then
                clock=$((clock + 1))
                echo "note $name: the client's perftest clock calibration failed ($(grep -m1 '^Correlation' "$work/client.log")): run again, $clock of 2"
                continue 2
            fi
            bad "$name: the client failed"
        done
        local src=0
        wait "$sp" || src=$?
        bg_forget "$sp"
        if ((src != 0)); then
            if ((clock < 2)) && perftest_clock_failed "$work/server.log"; then
                clock=$((clock + 1))
                echo "note $name: the server's perftest clock calibration failed ($(grep -m1 '^Correlation' "$work/server.log")): run again, $clock of 2"
                continue
            fi
            bad "$name: the server failed"
        fi
        return 0
    done
}
# sides: SRV and CLI, the with-warpcore command lines of the two sides in the current MODE
# (arrays: the checkout's path may hold spaces). pair expands the words SRV and CLI to them.
sides() {
    SRV=("${WW[@]}" --poll-mode "$MODE" --memif-server "$sock" --ip 10.77.0.1 --)
    CLI=("${WW[@]}" --poll-mode "$MODE" --memif "$sock" --ip 10.77.0.2 --)
}

if [[ $only == contracts ]]; then
    contracts
    echo "$passed passed, $failed failed"
    [[ $failed -eq 0 ]]
    exit
fi

# --- 2. rdmacm-utils -------------------------------------------------------------------
pair "rping" SRV rping -s -a 10.77.0.1 -v -V -C 10 :: CLI rping -c -a 10.77.0.1 -v -V -C 10
n=$(grep -c "^ping data: rdma-ping-" "$work/client.log")
[[ $n -eq 10 ]] || bad "rping client printed $n validated pings, wanted 10"
ok "rping -v -V -C 10 between two with-warpcore processes (10 validated pings each way)"

# Both sides DPDK applications' processes (as an SPDK target is): each rping has DPDK's EAL
# started before its main (rdma-compat/tests/c/dpdk_host_preload.c, preloaded), so the
# drop-in finds an EAL it did not start and must join it, probing its memif port there.
read -ra dpdk_cflags <<<"$(pkg-config --cflags libdpdk)"
read -ra dpdk_libs <<<"$(pkg-config --libs libdpdk)"
gcc -shared -fPIC -O2 -Wall -Werror "${dpdk_cflags[@]}" -o "$work/dpdk_host_preload.so" \
    rdma-compat/tests/c/dpdk_host_preload.c "${dpdk_libs[@]}" ||
    bad "dpdk_host_preload.c does not build against the system's libdpdk-dev"
host_eal() { # the EAL options of a DPDK application's process, as iwperf's without hugepages
    echo "--no-huge -m 256 --no-pci --no-shconf --no-telemetry --log-level=error" \
        "--file-prefix=wchost-$1-$$ --lcores=0@(0-$(($(nproc) - 1)))"
}
pair "rping in DPDK applications" \
    SRV env LD_PRELOAD="$work/dpdk_host_preload.so" WC_HOST_EAL="$(host_eal s)" \
    rping -s -a 10.77.0.1 -v -V -C 10 \
    :: CLI env LD_PRELOAD="$work/dpdk_host_preload.so" WC_HOST_EAL="$(host_eal c)" \
    rping -c -a 10.77.0.1 -v -V -C 10
for side in server client; do
    grep -q "^dpdk_host_preload: the application started the EAL" "$work/$side.log" ||
        bad "rping in DPDK applications: the $side's EAL was not started before its main"
done
n=$(grep -c "^ping data: rdma-ping-" "$work/client.log")
[[ $n -eq 10 ]] || bad "rping in DPDK applications: the client printed $n validated pings, wanted 10"
ok "rping -v -V -C 10 between two DPDK applications' processes (the drop-in joins their EALs)"

pair "ucmatose" SRV ucmatose -c 8 -C 50 -S 4096 :: CLI ucmatose -s 10.77.0.1 -c 8 -C 50 -S 4096
grep -q "return status 0" "$work/client.log" || bad "ucmatose client did not return status 0"
ok "ucmatose: 8 connections, 50 messages of 4 KiB each way"

pair "rdma_server/rdma_client" SRV rdma_server -s 10.77.0.1 :: CLI rdma_client -s 10.77.0.1
grep -q "rdma_client: end 0" "$work/client.log" || bad "rdma_client did not end 0"
grep -q "rdma_server: end 0" "$work/server.log" || bad "rdma_server did not end 0"
ok "rdma_server / rdma_client (rdma_create_ep, rdma_get_request, inline sends)"

pair "rping against iwping -s" "$IWPING" -s --memif "$sock" --ip 10.77.0.1 -C 10 -V \
    :: CLI rping -c -a 10.77.0.1 -v -V -C 10
ok "rping (with-warpcore) against iwping -s"
pair "iwping -c against rping -s" SRV rping -s -a 10.77.0.1 -V -C 10 \
    :: "$IWPING" -c -a 10.77.0.1 --memif "$sock" --ip 10.77.0.2 -C 10 -V
ok "iwping -c against rping -s (with-warpcore)"

# A C program of ours, built against the system's headers and libraries, for what no
# Debian tool exercises: memory windows (ibv_alloc_mw, ibv_bind_mw), atomics with their
# results, Write with Immediate, inline sends, completion channels through
# rdma_get_send_comp/rdma_get_recv_comp, and a Write past a window's end (Terminate).
gcc -O2 -Wall -Werror -o "$work/verbs_check" rdma-compat/tests/c/verbs_check.c -lrdmacm -libverbs \
    || bad "verbs_check.c does not build against the system's libibverbs-dev/librdmacm-dev"
pair "verbs_check" SRV "$work/verbs_check" -s 10.77.0.1 7999 :: CLI "$work/verbs_check" -c 10.77.0.1 7999
grep -q "client: all checks passed" "$work/client.log" || bad "verbs_check client"
grep -q "server: all checks passed" "$work/server.log" || bad "verbs_check server"
ok "verbs_check: $(grep -c '^ok:' "$work/client.log") client and $(grep -c '^ok:' "$work/server.log") server checks (windows, atomics, immediate data, inline, channels, Terminate)"

# --- 3. perftest -R ----------------------------------------------------------------------
MODE=caller
for t in ib_write_bw ib_read_bw ib_send_bw ib_atomic_bw ib_write_lat ib_read_lat ib_send_lat; do
    n=2000
    [[ $t == *_lat ]] && n=1000
    pair "$t -R" SRV "$t" -R -n "$n" :: CLI "$t" -R -n "$n" 10.77.0.1
    # The client's result row, by its figures (scripts/lib/perftest-row.sh): the size and
    # -n asked for, positive finite bandwidth or latencies.
    perftest_row "$work/client.log" "$t" "$(perftest_default_size "$t")" "$n" || bad "$PERFTEST_NOTE"
    ok "$t -R -n $n: $PERFTEST_NOTE"
done
# A shared receive queue (ibv_create_srq, ibv_post_srq_recv) on both sides.
pair "ib_send_bw -R --use-srq" SRV ib_send_bw -R --use-srq -n 1000 :: CLI ib_send_bw -R --use-srq -n 1000 10.77.0.1
perftest_row "$work/client.log" ib_send_bw 65536 1000 || bad "--use-srq: $PERFTEST_NOTE"
ok "ib_send_bw -R --use-srq -n 1000 (SRQs): $PERFTEST_NOTE"

# Against iwperf --perftest, both roles, every test iwperf's perftest mode speaks.
for t in write_bw read_bw send_bw atomic_bw write_lat read_lat send_lat; do
    n=1000
    pair "ib_$t -R against iwperf $t --perftest (server)" \
        "$IWPERF" "$t" --perftest --memif "$sock" --ip 10.77.0.1 --poll-mode caller \
        :: CLI "ib_$t" -R -n $n 10.77.0.1
    perftest_row "$work/client.log" "ib_$t" "$(perftest_default_size "$t")" "$n" ||
        bad "against iwperf $t --perftest: $PERFTEST_NOTE"
    row=$PERFTEST_NOTE
    pair "iwperf $t --perftest (client) against ib_$t -R" SRV "ib_$t" -R -n $n \
        :: "$IWPERF" "$t" --perftest -n $n --memif "$sock" --ip 10.77.0.2 --poll-mode caller 10.77.0.1
    perftest_row "$work/client.log" "$t" "$(perftest_default_size "$t")" "$n" ||
        bad "iwperf --perftest (client) against ib_$t: $PERFTEST_NOTE"
    ok "ib_$t -R (with-warpcore) against iwperf $t --perftest, both roles: ib_$t $row; iwperf $PERFTEST_NOTE"
done

# --- 4. errors users hit -------------------------------------------------------------------
# launcher_refusals: with-warpcore refuses what it would otherwise drop without a
# word, before the program runs (exit 2, the options named): a second device (the port
# is the first vdev's; a --pci beside it was probed and never used, a second --memif*
# made the engine fail only at the program's first verbs call), none at all, an option
# given twice (the last silently won), a --vdev holding the ';' that separates vdevs in
# WARPCORE_VDEV. A stand-in cargo: nothing is built, the "libraries" are marked files.
launcher_refusals() {
    local d="$work/launcher-stub" out rc args
    mkdir -p "$d/bin" "$d/target/release"
    printf '#!/bin/sh\nexit 0\n' >"$d/bin/cargo"
    chmod +x "$d/bin/cargo"
    for l in libibverbs librdmacm libwcstandin; do echo "$l" >"$d/target/release/$l.so"; done
    local -a cases=(
        "--pci|--memif-server $sock --pci 0000:00:04.0 --ip 10.77.0.1"
        "--memif-server|--memif $sock --memif-server $sock --ip 10.77.0.1"
        "--vdev|--pci 0000:00:04.0 --vdev net_tap0 --ip 10.77.0.1"
        "--ip given twice|--memif $sock --ip 10.77.0.1 --ip 10.77.0.2"
        "--poll-mode given twice|--poll-mode busy --memif $sock --poll-mode caller --ip 10.77.0.1"
        "no device|--ip 10.77.0.1"
        "';'|--vdev net_tap0;net_tap1 --ip 10.77.0.1"
    )
    for c in "${cases[@]}"; do
        read -r -a args <<<"${c#*|}"
        rc=0
        out=$(PATH="$d/bin:$PATH" CARGO_TARGET_DIR="$d/target" "$root/scripts/with-warpcore" \
            "${args[@]}" -- true 2>&1) || rc=$?
        [[ $rc -eq 2 ]] && grep -qF -- "${c%%|*}" <<<"$out" ||
            bad "launcher_refusals: with-warpcore ${args[*]} exited $rc, not 2 naming '${c%%|*}': $out"
    done
    # Still taken: --vdev repeated (every vdev is probed, the first is the port).
    rc=0
    out=$(PATH="$d/bin:$PATH" CARGO_TARGET_DIR="$d/target" "$root/scripts/with-warpcore" \
        --vdev net_tap0 --vdev net_tap1 --ip 10.77.0.1 -- sh -c 'echo "$WARPCORE_VDEV"' 2>&1) || rc=$?
    [[ $rc -eq 0 && $out == "net_tap0;net_tap1" ]] ||
        bad "launcher_refusals: --vdev twice was not taken (exit $rc): $out"
    ok "launcher_refusals: two devices, none, an option twice, a ';' in --vdev: refused, named"
}
launcher_refusals
out=$(env -u WARPCORE_IP WARPCORE_MEMIF="$sock" LD_LIBRARY_PATH="$lib" ibv_devices 2>&1)
grep -q "WARPCORE_IP" <<<"$out" || bad "a missing WARPCORE_IP is not named: $out"
ok "a missing WARPCORE_IP is named: $(grep WARPCORE_IP <<<"$out" | head -1)"
out=$(WARPCORE_IP=10.77.0.1 WARPCORE_MEMIF="$sock" WARPCORE_CRC=maybe LD_LIBRARY_PATH="$lib" ibv_devices 2>&1)
grep -q "WARPCORE_CRC" <<<"$out" || bad "a bad WARPCORE_CRC is not named: $out"
ok "a bad WARPCORE_CRC is named"
# own_variable_named_at_listing: a bad variable the drop-in reads itself is named
# when the device list is asked for, and no device is listed (before, WARPCORE_SETTLE_MS=abc
# listed warpcore0 and was taken for 0 at the first connection).
out=$(WARPCORE_IP=10.77.0.1 WARPCORE_MEMIF="$sock" WARPCORE_SETTLE_MS=abc LD_LIBRARY_PATH="$lib" ibv_devices 2>&1)
grep -q "WARPCORE_SETTLE_MS" <<<"$out" && ! grep -q "warpcore0" <<<"$out" ||
    bad "own_variable_named_at_listing: a bad WARPCORE_SETTLE_MS is not named, or a device is listed: $out"
ok "own_variable_named_at_listing: a bad WARPCORE_SETTLE_MS is named, no device listed"
# udaddy asks for UD (the RDMA_PS_UDP port space): refused with EOPNOTSUPP (iWARP has
# none), promptly and without a crash.
rm -f "$sock"
sides
out=$(timeout 30 "${SRV[@]}" udaddy -s 10.77.0.9 2>&1)
rc=$?
[[ $rc -ne 0 && $rc -ne 124 && $rc -lt 128 ]] || bad "udaddy: exit $rc (a crash, a hang or a success): $out"
grep -q "RDMA_PS_TCP" <<<"$out" || bad "udaddy: the refusal is not explained: $out"
ok "udaddy (UD) is refused, exit $rc: $(grep RDMA_PS_TCP <<<"$out" | head -1)"

# --- 5. ----------------------------------------------------------------------------------
MODE=thread
contracts

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
