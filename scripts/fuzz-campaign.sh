#!/usr/bin/env bash
# A fuzz campaign: every cargo-fuzz target (or the ones named) for MINUTES minutes each, on
# both cores (libFuzzer -fork workers sharing one corpus; FUZZ_JOBS sets how many; a crash is
# recorded and the run goes on), starting from the committed corpus
# in fuzz/corpus/<target>. Afterwards each target's corpus is minimised (cargo fuzz cmin:
# the smallest set of inputs that keeps the coverage) back into fuzz/corpus/<target>, to
# be committed. Prints one Markdown table: target, minutes, execs, execs/s, coverage
# (libFuzzer's cov: edges and ft: features), corpus files before and after, crashes.
#
#   scripts/fuzz-campaign.sh MINUTES [TARGET...]      # e.g. 60 (the issue's hour per target)
#
# Built like the smoke runs (scripts/test-fuzz.sh): -O -a (optimised, with debug assertions
# and overflow checks). AddressSanitizer only where it can find something: engine_rx (the
# engine's placement writes through unsafe code); the other targets run code that forbids
# unsafe (proto, tcp), where ASan found nothing a bounds-checked panic would not, and cost
# a factor of 4 in speed (the deframer over its corpus: 0.71 s of CPU with ASan, 0.17 s
# without). Each sanitizer builds into its own target directory (no rebuild when the
# campaign moves from one to the other). A crash leaves its reproducer in fuzz/artifacts/<target>/ and makes
# the campaign exit non-zero once every target ran: each one found becomes a corpus entry
# and a test once fixed (proto/tests/fuzz_corpus.rs and engine/tests/fuzz_engine_rx.rs
# replay the corpora). A target whose run fuzzed nothing (cargo fuzz run failed before
# libFuzzer printed a status line: no "#N" count in its log) is a failure too, named with
# the run's exit status and the end of its log; the campaign goes on with the other targets
# and exits non-zero at the end. Its scratch directories in /tmp go with it, also when it
# is stopped (Ctrl-C, a kill).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
minutes=${1:?usage: scripts/fuzz-campaign.sh MINUTES [TARGET...]}
shift
secs=$(awk -v m="$minutes" 'BEGIN { s = int(m * 60); if (s < 1) s = 1; print s }')
command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked cargo-fuzz
export RUSTC_BOOTSTRAP=1
jobs=${FUZZ_JOBS:-$(nproc)}
if (($#)); then targets=("$@"); else mapfile -t targets < <(cd fuzz && cargo fuzz list); fi
# sanitizer TARGET: the -s argument of cargo fuzz for it.
sanitizer() {
    case $1 in
        engine_rx) echo address ;;
        *) echo none ;;
    esac
}
# fuzz_args TARGET: the build options shared by build, run and cmin.
fuzz_args() {
    local san
    san=$(sanitizer "$1")
    echo "-O -a -s $san --target-dir $root/fuzz/target/san-$san"
}
for t in "${targets[@]}"; do
    # shellcheck disable=SC2046
    (cd fuzz && cargo fuzz build $(fuzz_args "$t") "$t")
done

report=$(mktemp /tmp/wcfuzz-report.XXXXXX)
work=""
# The report and the scratch copy of a corpus (one hour of a campaign stopped by a Ctrl-C
# left both in /tmp).
trap 'rm -f "$report"; [[ -z $work ]] || rm -rf "$work"' EXIT
crashed=0 unrun=()
for t in "${targets[@]}"; do
    corpus=$root/fuzz/corpus/$t
    mkdir -p "$corpus" "$root/fuzz/artifacts/$t"
    before=$(find "$corpus" -type f | wc -l)
    work=$(mktemp -d /tmp/wcfuzz-$t.XXXXXX)
    mkdir "$work/corpus"
    cp -r "$corpus/." "$work/corpus/"
    crashes_before=$(find "$root/fuzz/artifacts/$t" -type f | wc -l)
    echo "fuzz-campaign: $t for ${secs}s on $jobs jobs ($before corpus files)"
    # -fork: libFuzzer's own workers on the one corpus, and with -ignore_crashes a crash (or
    # timeout, or running out of memory) is recorded in the artifacts and the campaign goes
    # on for its whole time (-jobs stopped a one-job run at its first crash).
    # Its exit status alone says little (fork mode exits with its last job's status, and a
    # crash it went on after is in the artifacts), but a run that fuzzed nothing is named
    # with it below.
    rc=0
    # shellcheck disable=SC2046
    (cd "$work" && cargo fuzz run --fuzz-dir "$root/fuzz" $(fuzz_args "$t") "$t" "$work/corpus" -- \
        -max_total_time="$secs" -fork="$jobs" -ignore_crashes=1 -ignore_timeouts=1 \
        -ignore_ooms=1 -artifact_prefix="$root/fuzz/artifacts/$t/" -print_final_stats=1 \
        >"$work/run.log" 2>&1) || rc=$?
    execs=0 cov=0 ft=0
    for log in "$work"/fuzz-*.log "$work/run.log"; do
        [ -f "$log" ] || continue
        # The last status line: "#N  DONE|pulse|NEW ... cov: C ft: F ..." (a -jobs log) or
        # "#N: cov: C ft: F corp: ..." (fork mode: N counts every worker's runs).
        line=$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)
        [ -n "$line" ] || continue
        n=$(sed -E 's/^#([0-9]+).*/\1/' <<<"$line")
        c=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$line")
        f=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$line")
        [ "$log" = "$work/run.log" ] && ((execs > 0)) && continue
        execs=$((execs + n))
        ((${c:-0} > cov)) && cov=$c
        ((${f:-0} > ft)) && ft=$f
    done
    crashes=$(($(find "$root/fuzz/artifacts/$t" -type f | wc -l) - crashes_before))
    if ((crashes > 0)); then
        crashed=1
        echo "fuzz-campaign: $t: $crashes new crash(es) in fuzz/artifacts/$t:" >&2
        grep -h -E "^(==[0-9]+==|SUMMARY|thread .* panicked)" "$work"/fuzz-*.log | head -n 10 >&2 || true
    fi
    # A run that printed no libFuzzer status line fuzzed nothing (cargo fuzz could not start
    # it: a bad option, a build or a disk that failed): not a row of 0 execs that passes.
    if ((execs == 0)); then
        unrun+=("$t (exit $rc)")
        echo "fuzz-campaign: $t: FAILED: the run fuzzed nothing (cargo fuzz run exited $rc," \
            "no libFuzzer status line in its log); the corpus is left as it was:" >&2
        tail -n 20 "$work/run.log" >&2
        printf '| %s | %s | not run (exit %s) | - | - | %s -> %s | %s |\n' \
            "$t" "$minutes" "$rc" "$before" "$before" "$crashes" >>"$report"
        rm -rf "$work"
        work=""
        continue
    fi
    # Minimise what the run found together with what was committed.
    # shellcheck disable=SC2046
    (cd "$work" && cargo fuzz cmin --fuzz-dir "$root/fuzz" $(fuzz_args "$t") "$t" "$work/corpus" \
        >"$work/cmin.log" 2>&1) || {
        echo "fuzz-campaign: $t: cmin failed, corpus left as it was" >&2
        tail -n 20 "$work/cmin.log" >&2
    }
    if [ -s "$work/cmin.log" ] && grep -q "MERGE-OUTER: .* new files" "$work/cmin.log"; then
        # Hand-made seeds and named reproducers (any name that is not libFuzzer's 40-hex
        # SHA-1) stay whatever cmin says: tests and documents refer to them by name.
        find "$corpus" -maxdepth 1 -regextype posix-basic -type f ! -regex '.*/[0-9a-f]\{40\}' \
            -exec cp -n {} "$work/corpus/" \;
        rm -rf "$corpus"
        mkdir -p "$corpus"
        cp -r "$work/corpus/." "$corpus/"
    fi
    after=$(find "$corpus" -type f | wc -l)
    rate=$(awk -v e="$execs" -v s="$secs" 'BEGIN { printf "%.0f", e / s }')
    printf '| %s | %s | %s | %s | %s / %s | %s -> %s | %s |\n' \
        "$t" "$minutes" "$execs" "$rate" "$cov" "$ft" "$before" "$after" "$crashes" >>"$report"
    rm -rf "$work"
    work=""
done

echo
echo "| target | minutes | execs | execs/s | cov / ft | corpus files | new crashes |"
echo "|---|---|---|---|---|---|---|"
cat "$report"
if ((${#unrun[@]})); then
    echo "fuzz-campaign: FAILED: ${#unrun[@]} target(s) fuzzed nothing: ${unrun[*]}" >&2
fi
if ((crashed)); then
    echo "fuzz-campaign: crashes found (see fuzz/artifacts/)" >&2
fi
if ((crashed || ${#unrun[@]})); then
    exit 1
fi
