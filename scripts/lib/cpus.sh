# shellcheck shell=bash
# cpus_pick: sets CPU_A and CPU_B to the first two CPUs this process may run on (its
# Cpus_allowed_list: "0-3", "2,5-7"), for the two processes of a two-process run (DPDK's
# EAL refuses an lcore outside that list: "lcore 1 unavailable"). On a machine, or in a
# cpuset, with one CPU both are that CPU, and CPUS_NOTE says so; the two processes then
# share it (slower, still correct). Sourced by scripts/demo.sh, scripts/test-net.sh,
# scripts/tcpperf-compare.sh and scripts/test-flood.sh.
cpus_pick() {
    local list r lo hi c picked=()
    # CPUS_ALLOWED_LIST stands in for the kernel's list in scripts/test-harness.sh.
    list=${CPUS_ALLOWED_LIST:-$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)}
    local IFS=,
    for r in $list; do
        lo=${r%-*} hi=${r#*-}
        for ((c = lo; c <= hi && ${#picked[@]} < 2; c++)); do picked+=("$c"); done
        ((${#picked[@]} < 2)) || break
    done
    CPU_A=${picked[0]:-0}
    CPU_B=${picked[1]:-$CPU_A}
    CPUS_NOTE=""
    if [[ $CPU_A == "$CPU_B" ]]; then
        CPUS_NOTE="one CPU ($CPU_A) for both processes: this machine lets us run on no other"
    fi
}
