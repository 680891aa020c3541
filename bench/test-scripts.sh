#!/usr/bin/env bash
# The bench scripts' parsing and verdicts, run on canned output: cases where a script printed
# a figure, a ratio or a plot it had not measured, or exited 0 on a run it could not make.
# Each case takes the script's own code (the report's Python, a shell function, or the whole
# script with stand-ins for cargo), feeds it made-up results and prints one line:
#
#   bench-scripts <case>: ok (<what was seen>)
#   bench-scripts <case>: FAILED: <what went wrong>
#
# and the script exits non-zero if any case failed or could not run. No root, no DPDK, a
# second or two; `cargo test -p warpcore-bench` runs it (tests/scripts.rs). (The cases of
# scripts/test-harness.sh cover compare.sh's zero figures and callgrind section, and
# loss.sh's verdicts.)
#
#   bench/test-scripts.sh
set -uo pipefail
cd "$(dirname "$0")/.."

failed=0
ok() { echo "bench-scripts $1: ok ($2)"; }
bad() { echo "bench-scripts $1: FAILED: $2"; failed=$((failed + 1)); }

command -v python3 >/dev/null || { echo "bench/test-scripts.sh: FAILED: python3 is missing (scripts/install-deps.sh)" >&2; exit 1; }
work=$(mktemp -d /tmp/wcbench-scripts.XXXXXX)
trap 'rm -rf "$work"' EXIT

# ---- compare.sh's report: a ratio or a median over runs of which one measured nothing reads
# n/a. "iwperf write_bw / the larger of the raw blasts" took max(1,024-slot, 4,096-slot),
# which keeps the first when the second is NaN: against the 1,024-slot blast alone, under
# the name of the larger. The pairs' median row sorted a column with a NaN in it, which
# leaves the NaN anywhere: the median of the other pairs read as the column's.
sed -n "/<<'PY'$/,/^PY$/p" bench/compare.sh | sed '1d;$d' >"$work/report.py"
report() { # report DIR: the report compare.sh's Python writes from the files in DIR
    local w=$1
    local lat='{"results":[{"hdr_usec":{"p50":0.9,"p99":2.0,"count":2000}}]}'
    local bw='{"results":[{"bw":{"average":40.0,"peak":45.0,"msg_rate_mpps":0.07}}]}'
    for f in write_lat write_lat_thread write_lat_nocsum latpair1 latpair2 latpair3; do echo "$lat" >"$w/$f.json"; done
    for f in write_bw write_bw_nocsum write_bw_9000 pair1 pair2 pair3 jpair1 jpair2 jpair3; do echo "$bw" >"$w/$f.json"; done
    for k in 1 2 3; do
        # The MTU 9000 pairs' kernel bulks, unless the case gave its own.
        [[ -e $w/kpair$k.txt ]] || echo "RESULT mode=kernel test=bulk bytes=131072000 seconds=1 gbps=30.0" >"$w/kpair$k.txt"
        echo "RESULT raw_pingpong size=64 half_rtt_p50_us=0.60 p99_us=0.70 p999_us=1.00 samples=2000" >"$w/latpair$k.txt"
    done
    echo '{"results":[{"bw":{"average":1.0,"peak":1.0,"msg_rate_mpps":5.0}}]}' >"$w/write_rate.json"
    printf '%s\n' "RESULT raw_pingpong size=64 half_rtt_p50_us=0.60 p99_us=0.70 p999_us=1.00 samples=2000" \
        "RESULT raw_blast size=1514 sent=9 received=9 mpps=6.0 gbps=60.0" \
        "RESULT raw_blast size=9014 sent=9 received=9 mpps=1.7 gbps=120.0" >"$w/raw.txt"
    echo "RESULT copy size=64 memcpy_gbps=100 crc32c_gbps=50" >"$w/copy.txt"
    echo "RESULT mode=kernel test=rr size=64 count=2000 p50_us=20.00 p99_us=40.00" >"$w/tcpperf_rr.txt"
    echo "RESULT mode=kernel test=bulk bytes=131072000 seconds=1 gbps=30.0" >"$w/tcpperf_bulk.txt"
    echo "latency = 10 us" >"$w/qperf_lat.txt"
    echo "bw = 3 GB/sec" >"$w/qperf_bw.txt"
    echo '{"end":{"sum_received":{"bits_per_second":3e10}}}' >"$w/iperf3.json"
    mkdir -p "$w/out"
    python3 "$work/report.py" "$w" "$w/out" cmd 0 0 1 0 1 2000 2000 2000 2000 1 3 6000 3 2>&1
}
mkdir -p "$work/cmp-good" "$work/cmp-gap"
# Every blast measured (the 4,096-slot one at 80 Gbit/s), then the 4,096-slot blast and
# the first pair's blast without a result (a tool that printed none).
for w in cmp-good cmp-gap; do
    : >"$work/$w/raw4096.txt" >"$work/$w/pair1.txt"
done
echo "RESULT raw_blast size=1514 sent=9 received=9 mpps=6.6 gbps=80.0" >"$work/cmp-good/raw4096.txt"
echo "RESULT raw_blast size=1514 sent=9 received=9 mpps=6.0 gbps=50.0" >"$work/cmp-good/pair1.txt"
for w in cmp-good cmp-gap; do
    echo "RESULT raw_blast size=1514 sent=9 received=9 mpps=6.0 gbps=60.0" >"$work/$w/pair2.txt"
    echo "RESULT raw_blast size=1514 sent=9 received=9 mpps=6.0 gbps=70.0" >"$work/$w/pair3.txt"
done
good=$(report "$work/cmp-good") gap=$(report "$work/cmp-gap")
larger() { grep -F "| iwperf write_bw / the larger of the raw 1514-byte blasts" <<<"$1" | awk -F'|' '{gsub(/ /, "", $3); print $3}'; }
median_row() { grep '^| median |' <<<"$1" | awk -F'|' '{gsub(/ /, "", $5); gsub(/ /, "", $6); print $5 "/" $6}'; }
if [[ $(larger "$good") != 0.5 || $(median_row "$good") != 60.00/0.667 ]]; then
    bad "compare.sh's ratios over a run that measured nothing" "all measured: larger-blast ratio '$(larger "$good")' (0.5), median row '$(median_row "$good")' (60.00/0.667): $(tail -n 3 <<<"$good")"
elif [[ $(larger "$gap") != n/a || $(median_row "$gap") != n/a/n/a ]]; then
    bad "compare.sh's ratios over a run that measured nothing" "the 4,096-slot blast and a pair's blast missing: larger-blast ratio '$(larger "$gap")', median row blast/ratio '$(median_row "$gap")' (n/a each)"
else
    ok "compare.sh's ratios over a run that measured nothing" "against the larger blast 0.5 measured, n/a without the 4,096-slot blast; the pairs' median blast n/a with one missing"
fi

# ---- compare_mtu9000_pairs: issue 12's MTU 9000 target (write_bw >= 1.0x kernel TCP
# bulk) was judged by the one MTU 9000 write_bw row against the one kernel bulk row, run
# minutes apart on a host whose speed flips between modes (docs/iwperf.md: "0.447x missed
# (kernel TCP in the fast mode)", 1.62x met in another run). The MTU 1500 and latency
# targets take the median of back-to-back pairs and read inconclusive when the pairs' runs
# lie more than 1.5x apart; this one must too. The rows meet it (40 against 30 Gbit/s) in
# every case here: the verdict must come from the pairs (write_bw 40 at MTU 9000 each).
jumbo() { # jumbo KBULK1 KBULK2 KBULK3: the MTU 9000 target's line of the report
    local w=$work/jumbo-$1-$2-$3
    mkdir -p "$w"
    : >"$w/raw4096.txt"
    for k in 1 2 3; do
        echo "RESULT raw_blast size=1514 sent=9 received=9 mpps=6.0 gbps=60.0" >"$w/pair$k.txt"
        echo "RESULT mode=kernel test=bulk bytes=131072000 seconds=1 gbps=${!k}" >"$w/kpair$k.txt"
    done
    report "$w" | grep -E "^\| 64 KiB write_bw at MTU 9000 >= 1.0x kernel"
}
j_steady=$(jumbo 30.0 31.0 29.0) j_flip=$(jumbo 15.0 45.0 60.0) j_over=$(jumbo 50.0 52.0 48.0)
if [[ $j_steady != *"the median of 3 back-to-back pairs"*"| met |" ]]; then
    bad "compare_mtu9000_pairs" "steady pairs (kernel bulk 29-31 Gbit/s) not met by their median: ${j_steady:0:200}"
elif [[ $j_flip != *"**inconclusive**"* || $j_flip == *"| met |" ]]; then
    bad "compare_mtu9000_pairs" "pairs with kernel bulks 15-60 Gbit/s judged: ${j_flip:0:200}"
elif [[ $j_over != *"| **missed** |" ]]; then
    bad "compare_mtu9000_pairs" "steady pairs under the kernel (48-52 Gbit/s) not missed: ${j_over:0:200}"
else
    ok "compare_mtu9000_pairs" "steady pairs at 1.33x met, at 0.8x missed; kernel bulks 15-60 Gbit/s inconclusive"
fi

# ---- compare.sh's plot: the report shows the PNG it finds in OUT_DIR, and a failed plot
# left the last run's there, which the report then showed as this run's.
eval "$(sed -n '/^plot_latency() {/,/^}$/p' bench/compare.sh)"
if ! declare -F plot_latency >/dev/null; then
    bad "compare.sh's plot is this run's or none" "no plot_latency function in bench/compare.sh"
else
    mkdir -p "$work/plot"
    out=$work/plot
    printf '#!/bin/sh\necho "wcbench: series \\"iwperf\\": no samples" >&2; exit 1\n' >"$work/plot/fail"
    printf '#!/bin/sh\nwhile [ "$1" != --out ]; do shift; done\necho png >"$2"\n' >"$work/plot/draw"
    chmod +x "$work/plot/fail" "$work/plot/draw"
    echo stale >"$out/latency_percentiles.png"
    wcbench=$work/plot/fail plot_latency 2>/dev/null
    if [[ -e $out/latency_percentiles.png ]]; then
        bad "compare.sh's plot is this run's or none" "a failed plot left the earlier run's latency_percentiles.png in OUT_DIR"
    else
        wcbench=$work/plot/draw plot_latency
        if [[ $(cat "$out/latency_percentiles.png" 2>/dev/null) != png ]]; then
            bad "compare.sh's plot is this run's or none" "a plot that succeeded left no PNG"
        else
            ok "compare.sh's plot is this run's or none" "the earlier PNG removed when the plot failed, this run's kept"
        fi
    fi
fi

# ---- compare.sh's callgrind targets judge the count as measured: it was rounded to a whole
# number first, and a 64 B Write of 1,500.25 instructions read 1500 and met "<= 1,500".
# Stand-ins: cargo builds nothing; valgrind prints counts 4,000 messages apart that make
# PER_MILLI / 1,000 instructions a message.
mkdir -p "$work/cg/bin"
printf '#!/bin/sh\nexit 0\n' >"$work/cg/bin/cargo"
cat >"$work/cg/bin/valgrind" <<'STANDIN'
#!/bin/sh
# --tool --callgrind-out-file PROGRAM WORKLOAD SIZE N
case "$6" in
    2000) echo "==1== Collected : 1000000" >&2 ;;
    *) echo "==1== Collected : $((1000000 + 4 * PER_MILLI))" >&2 ;;
esac
STANDIN
chmod +x "$work/cg/bin/cargo" "$work/cg/bin/valgrind"
sed -n '/^if \[\[ "${CALLGRIND:-1}" == 1 \]\]/,/^fi$/p' bench/compare.sh >"$work/cg/section.sh"
callgrind() { # callgrind PER_MILLI: the report's line on the 64 B Write's target
    PER_MILLI=$1 PATH="$work/cg/bin:$PATH" out="$work/cg" work="$work/cg" bash -c \
        'set -euo pipefail; pids=(); source scripts/lib/bg-end.sh; source "$work/section.sh"' 2>&1 | grep -F "| a 64 B Write <="
}
above=$(callgrind 1500250) below=$(callgrind 1400250)
# And not the count rounded to the one decimal the report prints: 1,500.04 instructions a
# Write (160 more over the 4,000 messages than 1,500 a Write) printed 1500.0 and met
# "<= 1,500"; exactly 1,500 meets it.
hair=$(callgrind 1500040) exact=$(callgrind 1500000)
if [[ $above != *"| 1500."[23]" | **missed** |"* ]]; then
    bad "compare.sh's callgrind targets judge the count as measured" "1,500.25 a Write: $above"
elif [[ $below != *"| 1400."[23]" | met |"* ]]; then
    bad "compare.sh's callgrind targets judge the count as measured" "1,400.25 a Write: $below"
elif [[ $hair != *"| 1500.0 | **missed** |"* ]]; then
    bad "compare.sh's callgrind targets judge the count as measured" "1,500.04 a Write: $hair"
elif [[ $exact != *"| 1500.0 | met |"* ]]; then
    bad "compare.sh's callgrind targets judge the count as measured" "1,500 a Write: $exact"
else
    ok "compare.sh's callgrind targets judge the count as measured" "1,500.25 and 1,500.04 instructions a Write missed, 1,400.25 and 1,500 met"
fi

# ---- compare.sh's callgrind section (issue 12's instruction-count targets) needs valgrind
# (scripts/install-deps.sh installs it, but compare.sh may run without it): without it compare.sh wrote "callgrind
# section skipped (CALLGRIND=0 or no valgrind)" into its report and exited 0, the two targets
# unjudged. It must refuse at the start, naming valgrind and the opt-out (CALLGRIND=0).
# PATH: stand-ins for the tools compare.sh checks for and for cargo, links to what else it
# runs; no valgrind.
mkdir -p "$work/nv/bin" "$work/nv/out"
for t in qperf iperf3 taskset ss cargo; do printf '#!/bin/sh\nexit 0\n' >"$work/nv/bin/$t"; done
for t in bash dirname mkdir nproc mktemp cut seq rm sleep cat tee sed; do
    p=$(command -v "$t") && ln -s "$p" "$work/nv/bin/$t"
done
ln -s "$(python3 -c 'import sys; print(sys.executable)')" "$work/nv/bin/python3"
chmod +x "$work/nv/bin/"*
nv_out=$(timeout 20 env PATH="$work/nv/bin" CARGO_TARGET_DIR="$work/nv/target" CALLGRIND=1 bench/compare.sh "$work/nv/out" 2>&1)
nv_rc=$?
nv_off=$(timeout 20 env PATH="$work/nv/bin" CARGO_TARGET_DIR="$work/nv/target" CALLGRIND=off bench/compare.sh "$work/nv/out" 2>&1)
nv_off_rc=$?
if ((nv_rc == 0)) || grep -q '^== ' <<<"$nv_out" || ! grep -q '^compare: valgrind missing: .*CALLGRIND=0' <<<"$nv_out"; then
    bad "compare.sh refuses to run its callgrind targets without valgrind" "exit $nv_rc: $(head -n 3 <<<"$nv_out" | tr '\n' ' ' | cut -c1-200)"
elif ((nv_off_rc == 0)) || grep -q '^== ' <<<"$nv_off" || ! grep -q "^compare: CALLGRIND must be 1 or 0, not 'off'" <<<"$nv_off"; then
    bad "compare.sh refuses to run its callgrind targets without valgrind" "CALLGRIND=off: exit $nv_off_rc: $(head -n 3 <<<"$nv_off" | tr '\n' ' ' | cut -c1-200)"
else
    ok "compare.sh refuses to run its callgrind targets without valgrind" "refused at the start, naming valgrind and CALLGRIND=0; CALLGRIND=off refused too"
fi

# ---- afp-budget.sh: the window's length is the ticks of every /proc/stat column, steal
# included; without steal the window was shorter by the time the host ran other guests,
# and the frame rate and busy shares higher by as much. Samples: 3 s windows, CPU 1 busy 2
# s (1 user, 1 kernel) and stolen 1 s; 300,000 frames: 100,000 frames/s and 67 % busy
# (without steal: 150,000 and 100 %).
sed -n "/<<'PY'$/,/^PY$/p" bench/afp-budget.sh | sed '1d;$d' >"$work/afp.py"
hz=$(getconf CLK_TCK)
mkdir -p "$work/afp"
for n in warpcore kernel; do
    # cpuN user nice system idle iowait irq softirq steal guest guest_nice
    printf 'cpu0 0 0 0 0 0 0 0 0 0 0\ncpu1 0 0 0 0 0 0 0 0 0 0\n1000\n' >"$work/afp/$n.a"
    printf 'cpu0 %d 0 %d %d 0 0 0 0 0 0\ncpu1 %d 0 %d 0 0 0 0 %d 0 0\n301000\n' \
        "$hz" "$hz" "$hz" "$hz" "$hz" "$hz" >"$work/afp/$n.b"
done
afp=$(python3 "$work/afp.py" "$work/afp" 4.0 6.0 2>&1)
row=$(grep -F "| Warpcore" <<<"$afp" | tr -d ' ')
if [[ $row != "|100000|Warpcore:iwperfwrite_bw64KiBonnet_af_packet|4.00|3.33/3.33,67%|3.33/3.33,67%|" ]]; then
    bad "afp-budget.sh counts stolen time in its window" "expected 100000 frames/s, 3.33 / 3.33 us, 67 % busy: $(tr '\n' ' ' <<<"$afp" | cut -c1-300)"
else
    ok "afp-budget.sh counts stolen time in its window" "100,000 frames/s and 67 % busy over a 3 s window with 1 s stolen"
fi

# ---- rdma-compat.sh: a count of rounds that is not one ran none and printed medians of
# nothing ("-nanx") with exit status 0. Stand-in: cargo builds nothing.
mkdir -p "$work/bin"
printf '#!/bin/sh\nexit 0\n' >"$work/bin/cargo"
chmod +x "$work/bin/cargo"
rc_out=""
for rounds in 0 three; do
    o=$(PATH="$work/bin:$PATH" timeout 20 bench/rdma-compat.sh "$rounds" 2>&1)
    rc=$?
    if ((rc == 0)) || grep -q "medians" <<<"$o" || ! grep -q "ROUNDS '$rounds'" <<<"$o"; then
        rc_out+="ROUNDS $rounds: exit $rc, $(tr '\n' ' ' <<<"$o" | cut -c1-160); "
    fi
done
if [[ -n $rc_out ]]; then
    bad "rdma-compat.sh refuses a count of rounds that is none" "$rc_out"
else
    ok "rdma-compat.sh refuses a count of rounds that is none" "ROUNDS 0 and three refused by name, non-zero exit, no medians"
fi

# ---- docs_match_install_deps: a page that tells the reader scripts/install-deps.sh
# does not install a package it does install sends them to install it by hand (bench/README.md
# said so of valgrind, which install-deps.sh has installed since compare.sh's callgrind
# section came to need it). Each "PACKAGE, which `scripts/install-deps.sh` does not install"
# on a page must name a package install-deps.sh --list does not print.
dd_pkgs=$(scripts/install-deps.sh --list)
dd_bad=()
while IFS= read -r dd_hit; do
    dd_pkg=${dd_hit%%,*}
    if grep -qx -- "$dd_pkg" <<<"$dd_pkgs"; then dd_bad+=("$dd_pkg"); fi
done < <(find . -name '*.md' -not -path './target/*' -not -path './fuzz/target/*' -print0 |
    xargs -0 cat -- | tr '\n' ' ' | sed 's/\. /.\n/g' |
    grep -oE '[a-z0-9][a-z0-9.+-]*, which `?scripts/install-deps\.sh`? does not *install' || true)
if [[ -z $dd_pkgs ]]; then
    bad "docs_match_install_deps" "scripts/install-deps.sh --list printed nothing"
elif ((${#dd_bad[@]})); then
    bad "docs_match_install_deps" "the docs say install-deps.sh does not install what it installs: ${dd_bad[*]}"
else
    ok "docs_match_install_deps" "no page says install-deps.sh leaves out a package it installs"
fi

if ((failed)); then
    echo "bench/test-scripts.sh: $failed case(s) failed" >&2
    exit 1
fi
