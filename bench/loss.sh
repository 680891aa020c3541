#!/usr/bin/env bash
# Warpcore against the kernel's TCP on the same lossy path, in one run (issue 11).
#
# Two network namespaces joined by a bridge (scripts/lib/lossnet.sh); random loss of L on
# the egress of both bridge ports, so data and ACKs are both lost (a round trip loses about
# 2L). For each L in 0, 0.1 %, 1 %, 5 %:
#   - Warpcore: two iwperf processes on net_af_packet (one per namespace, one CPU each):
#     write_bw of 64 KiB messages for DURATION seconds, then write_lat of 64 B over
#     LAT_ITERS iterations (half round trip, as perftest reports; median and p99 are
#     perftest's, the max the HdrHistogram's largest: perftest's t_max is the second
#     largest);
#   - the kernel on the same veths: iperf3 (one stream, DURATION seconds) and qperf tcp_lat.
# One table, then issue 11's verdicts as PASS/FAIL lines:
#   write_bw >= 1.0x iperf3 at 0.1 % and 1 %; write_lat p99 at 0.1 % <= 2x the loss-free
#   p99 and max <= 20 ms; p99 at 1 % <= 5 ms. A verdict whose loss rate LOSSES leaves out
#   is a FAIL line (not measured), as is one on a figure of 0.
# Exit status: 1 when a measurement could not be taken (a kernel baseline too: an iperf3 that
# measured nothing fails the run with iperf3's reason, and a qperf server that no longer ran
# when its client was done fails it, naming the server; and a row whose loss did not happen:
# the bridge's drop counters must show frames dropped at a loss above 0 and none at 0); the
# verdicts only report, unless --strict (then a FAIL verdict exits 2).
#
#   bench/loss.sh [--quick] [--strict]      # --quick: 2 s runs, 5,000 latency iterations
#   IWPERF=target/release/iwperf LOSSES="0 1000 10000" bench/loss.sh   (parts per million)
#   IWPERF_ARGS="--tcp reference" bench/loss.sh    # smoltcp's reference TCP, for comparison
#   AFP_ARGS=",framecnt=2048,qdisc_bypass=1" bench/loss.sh   # net_af_packet devargs to try
#   MTU=9000 bench/loss.sh        # jumbo frames on every port, for iwperf (--mtu) and the kernel
#   OWN_MAC=0 bench/loss.sh       # iwperf on its veths' Ethernet addresses (default: its own,
#                                 # scripts/lib/lossnet.sh says why)
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0 strict=0
for a in "$@"; do
    case "$a" in
        --quick) quick=1 ;;
        --strict) strict=1 ;;
        *) echo "usage: bench/loss.sh [--quick] [--strict]" >&2; exit 2 ;;
    esac
done
duration=${DURATION:-$([[ $quick == 1 ]] && echo 2 || echo 5)}
lat_iters=${LAT_ITERS:-$([[ $quick == 1 ]] && echo 5000 || echo 20000)}
losses=${LOSSES:-"0 1000 10000 50000"}
# Without IWPERF, build iwperf from this checkout now: lossnet_build only builds a binary
# that is missing, and an iwperf left from an earlier build would measure old code.
if [[ -z "${IWPERF:-}" ]]; then
    scripts/build.sh # every binary the scripts run, iwperf among them
    IWPERF=${CARGO_TARGET_DIR:-target}/release/iwperf
fi
for t in iperf3 qperf python3; do
    command -v "$t" >/dev/null || { echo "bench/loss.sh: $t is missing (scripts/install-deps.sh)" >&2; exit 1; }
done
# shellcheck source=scripts/lib/lossnet.sh
source scripts/lib/lossnet.sh
# shellcheck source=scripts/lib/bg-end.sh
source scripts/lib/bg-end.sh
# shellcheck source=scripts/lib/iperf3-gbps.sh
source scripts/lib/iperf3-gbps.sh
lossnet_harness bench/loss.sh loss-bench
fail() { lossnet_fail "$@"; }
lossnet_build "$IWPERF" iwperf

mtu=${MTU:-1500}
LOSSNET_MTU=$mtu lossnet_up
# Jumbo frames need ~10 KiB mbufs: a bigger heap.
eal="--no-huge -m $( ((mtu > 1500)) && echo 1024 || echo 256) --no-pci --no-telemetry --no-shconf --log-level=error"
echo "bench/loss.sh: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); MTU $mtu; ${duration} s runs, ${lat_iters} latency iterations; $(git rev-parse --short HEAD 2>/dev/null || echo '?')"

mac_a=() mac_b=()
if [[ ${OWN_MAC:-1} == 1 ]]; then
    mac_a=(--mac "$LOSSNET_MAC_A") mac_b=(--mac "$LOSSNET_MAC_B")
fi
# iwperf_pair TEST JSON ARGS...: server in B, client in A; the client's --json lands in JSON.
iwperf_pair() {
    local test=$1 json=$2
    shift 2
    # shellcheck disable=SC2206
    local extra=(${IWPERF_ARGS:-})
    set -- "$@" --mtu "$mtu" "${extra[@]}"
    rm -f "$json"
    ip netns exec "$LOSSNET_B" timeout 180 "$IWPERF" "$test" --ip 198.18.0.2 "${mac_b[@]}" --timeout 60 \
        --vdev "net_af_packet0,iface=wclb${AFP_ARGS:-}" --eal="-l 0 $eal --file-prefix=wcloss-s$$" "$@" \
        >"$work/server.log" 2>&1 &
    local spid=$!
    pids+=("$spid")
    sleep 0.5
    # The client too in `pids` while it runs (bg_run): a run stopped mid-way ends it.
    if ! bg_run ip netns exec "$LOSSNET_A" timeout 180 "$IWPERF" "$test" 198.18.0.2 --ip 198.18.0.1 "${mac_a[@]}" \
        --timeout 60 --json "$json" --vdev "net_af_packet0,iface=wcla${AFP_ARGS:-}" \
        --eal="-l 1 $eal --file-prefix=wcloss-c$$" "$@" >"$work/client.log" 2>&1; then
        kill "$spid" 2>/dev/null || true
        wait "$spid" 2>/dev/null || true
        bg_forget "$spid"
        fail "iwperf $test $*"
    fi
    # Reaped, the server leaves `pids` (scripts/lib/bg-end.sh): its pid is free for reuse.
    local rc=0
    wait "$spid" || rc=$?
    bg_forget "$spid"
    ((rc == 0)) || fail "iwperf $test server"
}

# kernel_bw: iperf3's throughput (Gbit/s) in kbw; fails loudly, with iperf3's reason (it
# exits 0 on a refused connection, the reason in its JSON: scripts/lib/iperf3-gbps.sh). A
# baseline that did not run is no ratio. (Not in a command substitution: there the server's
# pid would not reach the EXIT trap.)
kernel_bw() {
    ip netns exec "$LOSSNET_B" iperf3 -s -1 -B 198.18.0.12 >"$work/iperf3-s.log" 2>&1 &
    local spid=$! rc=0
    pids+=("$spid")
    sleep 0.3
    bg_run ip netns exec "$LOSSNET_A" iperf3 -c 198.18.0.12 -t "$duration" -J >"$work/iperf3.json" 2>"$work/iperf3.log" || rc=$?
    iperf3_gbps "$work/iperf3.json" || fail "iperf3 -c (exit $rc): $IPERF3_NOTE"
    ((rc == 0)) || fail "iperf3 -c exited $rc"
    # A server that failed or hung after its client (scripts/lib/bg-end.sh): no figure.
    rc=0
    bg_end "$spid" "iperf3 -s -1" 30 || rc=$?
    bg_forget "$spid"
    ((rc == 0)) || fail "$BG_NOTE"
    kbw=$IPERF3_GBPS
}

# kernel_lat: qperf tcp_lat's latency (us) in klat; fails loudly. (Not in a command
# substitution: there the server's pid would not reach the EXIT trap, and fail's logs would
# go into the figure; nor its client: bg_run.)
kernel_lat() {
    ip netns exec "$LOSSNET_B" qperf >"$work/qperf-s.log" 2>&1 &
    local spid=$!
    pids+=("$spid")
    sleep 0.3
    local out
    bg_run ip netns exec "$LOSSNET_A" qperf 198.18.0.12 -t "$duration" -m 64 tcp_lat >"$work/qperf.txt" 2>&1 ||
        fail "qperf tcp_lat: $(cat "$work/qperf.txt")"
    out=$(cat "$work/qperf.txt")
    # The server must still run (scripts/lib/bg-end.sh): one that had exited (it could not
    # bind its port) served nothing, and the figure would be another server's.
    local rc=0
    bg_stop "$spid" "the qperf server" 10 || rc=$?
    bg_forget "$spid"
    ((rc == 0)) || fail "$BG_NOTE"
    # qperf prints "latency = 12.3 us" (or ms). Without a figure the row's columns would
    # shift (the TCP counters under the kernel's latency): fail instead.
    klat=$(echo "$out" | awk '/latency/ { v=$3; if ($4=="ms") v*=1000; if ($4=="sec") v*=1e6; printf "%.1f", v }')
    [[ -n $klat ]] || fail "qperf printed no latency: $out"
}

rows=()
for ppm in $losses; do
    lossnet_loss "$ppm"
    # The frames the bridge dropped before this row: a lossy row must see drops (a filter
    # that attaches and drops nothing made it a loss-free one, and its verdicts passed on
    # it), a loss-free row none (scripts/lib/lossnet.sh's lossnet_check_loss).
    drops0=$(lossnet_dropped)
    pct=$(awk -v p="$ppm" 'BEGIN { printf "%g", p / 10000 }')
    # --margin 0: the whole run counts, as iperf3's does (perftest's default margin would
    # leave out iwperf's first and last quarter, slow start and drain, and not iperf3's).
    iwperf_pair write_bw "$work/bw.json" -s 65536 -D "$duration" --margin 0 --report_gbits --verify
    bw=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.3f" % d["results"][0]["bw"]["average"])' "$work/bw.json") ||
        fail "no write_bw result"
    # The sender's TCP counters behind the figure: retransmitted segments, RTOs (spurious
    # ones undone), tail loss probes, recovery episodes (those D-SACKs undid).
    tcpc=$(python3 -c 'import json,sys; t=json.load(open(sys.argv[1])).get("tcp") or {}; print("%s/%s(%s)/%s/%s(%s)" % (t.get("retransmitted_segments","-"), t.get("rtos","-"), t.get("spurious_rtos","-"), t.get("tail_loss_probes","-"), t.get("fast_recoveries","-"), t.get("undone_recoveries","-")))' "$work/bw.json")
    iwperf_pair write_lat "$work/lat.json" -s 64 -n "$lat_iters"
    # The max is the HdrHistogram's (every round trip): perftest's t_max is the second
    # largest sample, and a verdict on it would not see the one worst stall.
    read -r med p99 max < <(python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0]; l=r["lat_usec"]; print("%.2f %.2f %.1f" % (l["t_typical"], l["p99"], r["hdr_usec"]["max"]))' "$work/lat.json") ||
        fail "no write_lat result"
    kernel_bw
    kernel_lat
    lossnet_check_loss "$drops0" "$ppm" || fail "loss $pct %: $LOSSNET_NOTE"
    rows+=("$pct $bw $kbw $med $p99 $max $klat $tcpc")
    printf 'loss %5s %%: write_bw %s Gbit/s (TCP retx/RTO(spurious)/TLP/recoveries(undone) %s), iperf3 %s; write_lat %s / %s / %s us, qperf tcp_lat %s us (%s)\n' \
        "$pct" "$bw" "$tcpc" "$kbw" "$med" "$p99" "$max" "$klat" "$LOSSNET_NOTE"
done

echo
printf '| loss | iwperf write_bw 64 KiB, Gbit/s | its TCP: retransmitted / RTOs (spurious) / TLPs / recoveries (undone by D-SACKs) | kernel iperf3, Gbit/s | ratio | iwperf write_lat 64 B median / p99 / max, us | kernel qperf tcp_lat, us |\n'
printf '|---|---|---|---|---|---|---|\n'
for r in "${rows[@]}"; do
    read -r pct bw kbw med p99 max klat tcpc <<<"$r"
    ratio=$(awk -v a="$bw" -v b="$kbw" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "n/a" }')
    printf '| %s %% | %s | %s | %s | %s | %s / %s / %s | %s |\n' "$pct" "$bw" "$tcpc" "$kbw" "$ratio" "$med" "$p99" "$max" "$klat"
done
echo

# Issue 11's verdicts. A verdict whose row was not measured (LOSSES without its loss
# rate) fails, naming the rate: it is not left out. Every figure judged must be above 0
# (0 is no measurement: a kernel baseline of 0 Gbit/s would pass any write_bw).
verdicts=0
row_of() { for r in "${rows[@]}"; do [[ ${r%% *} == "$1" ]] && { echo "$r"; return; }; done; return 0; }
verdict() { # NAME PASS?
    if [[ $2 == 1 ]]; then echo "PASS $1"; else echo "FAIL $1"; verdicts=1; fi
}
unmeasured() { # NAME PCT...: a verdict whose rows are missing
    echo "FAIL $1: not measured (LOSSES=\"$losses\" has no row at $2 %)"
    verdicts=1
}
base=$(row_of 0)
for pct in 0.1 1; do
    r=$(row_of "$pct")
    if [[ -z "$r" ]]; then
        unmeasured "write_bw at $pct % >= 1.0x kernel iperf3" "$pct"
        continue
    fi
    read -r _ bw kbw _ p99 max _ <<<"$r"
    verdict "write_bw at $pct % >= 1.0x kernel iperf3 ($bw vs $kbw Gbit/s)" "$(awk -v a="$bw" -v b="$kbw" 'BEGIN { print (b > 0 && a >= b) ? 1 : 0 }')"
done
r=$(row_of 0.1)
if [[ -z "$r" || -z "$base" ]]; then
    unmeasured "write_lat p99 at 0.1 % <= 2x the loss-free p99" "$([[ -z $r ]] && echo 0.1 || echo 0)"
    unmeasured "write_lat max at 0.1 % <= 20 ms" 0.1
else
    read -r _ _ _ _ p99 max _ <<<"$r"
    read -r _ _ _ _ p99_0 _ _ <<<"$base"
    verdict "write_lat p99 at 0.1 % <= 2x the loss-free p99 ($p99 vs $p99_0 us)" "$(awk -v a="$p99" -v b="$p99_0" 'BEGIN { print (a > 0 && b > 0 && a <= 2 * b) ? 1 : 0 }')"
    verdict "write_lat max at 0.1 % <= 20 ms ($max us)" "$(awk -v a="$max" 'BEGIN { print (a > 0 && a <= 20000) ? 1 : 0 }')"
fi
r=$(row_of 1)
if [[ -z "$r" ]]; then
    unmeasured "write_lat p99 at 1 % <= 5 ms" 1
else
    read -r _ _ _ _ p99 _ _ <<<"$r"
    verdict "write_lat p99 at 1 % <= 5 ms ($p99 us)" "$(awk -v a="$p99" 'BEGIN { print (a > 0 && a <= 5000) ? 1 : 0 }')"
fi
if [[ $strict == 1 && $verdicts != 0 ]]; then exit 2; fi
exit 0
