#!/usr/bin/env bash
# Optionally reserves 2 MB hugepages for DPDK (then run it with --in-memory instead of
# --no-huge -m N). Everything in this repository also works without hugepages.
#
#   scripts/hugepages.sh reserve [COUNT]   # default 512 pages = 1 GiB
#   scripts/hugepages.sh release
#   scripts/hugepages.sh status
set -euo pipefail

nr=/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages
cmd=${1:-status}
case "$cmd" in
    reserve)
        count=${2:-512}
        echo "$count" > "$nr"
        got=$(cat "$nr")
        if ((got < count)); then
            echo "hugepages: asked for $count 2 MB pages, the kernel gave $got (memory fragmented?)" >&2
            exit 1
        fi
        if ! mountpoint -q /dev/hugepages 2>/dev/null; then
            mkdir -p /dev/hugepages
            mount -t hugetlbfs nodev /dev/hugepages
        fi
        echo "hugepages: $got pages of 2 MB reserved; use EAL argument --in-memory"
        ;;
    release)
        echo 0 > "$nr"
        echo "hugepages: released"
        ;;
    status)
        grep -E 'HugePages_(Total|Free)|Hugepagesize' /proc/meminfo
        ;;
    *)
        echo "usage: $0 reserve [COUNT] | release | status" >&2
        exit 2
        ;;
esac
