#!/usr/bin/env bash
# Smoke-runs every cargo-fuzz target for a few seconds each (libFuzzer), starting from a
# sample of the corpora kept in fuzz/corpus/<target> (below). Any crash fails the run and leaves its reproducer in
# fuzz/artifacts/<target>/: add it to fuzz/corpus/<target>/ once fixed, and the regular test
# suite (proto/tests/fuzz_corpus.rs; engine/tests/fuzz_engine_rx.rs, tcp/tests/fuzz_tcp_segments.rs
# and analysis/tests/fuzz_capture.rs for engine_rx, tcp_segments and capture) replays it
# forever after. Then the planted-defect proof: engine_rx built with a deliberately broken
# bounds check must fail (fuzz/README.md).
#
#   scripts/test-fuzz.sh [SECONDS_PER_TARGET]      # default 5; 0 skips the runs (not with CI=true)
#   SMOKE_CORPUS_SAMPLE=N scripts/test-fuzz.sh 5    # start from N files of each corpus (default
#                                                   # 400) besides the named seeds: see below
#
# A list of no targets fails, and so does a planted-defect test that did not run (a cargo
# test filter that matches nothing passes with "0 passed"). With CI=true, 0 seconds fails:
# CI must run the fuzz targets and the proof that engine_rx's judge can fail.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}
if [[ "$secs" == 0 ]]; then
    if [[ "${CI:-}" == true ]]; then
        echo "test-fuzz: FAILED: 0 seconds a target with CI=true: CI must run the fuzz targets" >&2
        exit 1
    fi
    echo "test-fuzz: SKIPPED (FUZZ_SECONDS=0, 0 seconds a target): the fuzz targets and the planted-defect proof did NOT run"
    exit 0
fi
if ! command -v cargo-fuzz >/dev/null 2>&1; then
    echo "test-fuzz: installing cargo-fuzz"
    cargo install --locked cargo-fuzz
fi
# cargo-fuzz needs nightly flags (-Zsanitizer); RUSTC_BOOTSTRAP lets the stable toolchain
# accept them.
export RUSTC_BOOTSTRAP=1
targets=$(cd fuzz && cargo fuzz list)
[[ -n ${targets//[[:space:]]/} ]] || { echo "test-fuzz: FAILED: cargo fuzz list names no target" >&2; exit 1; }
cd fuzz
# -O: optimised; -a: debug assertions, which also turn on overflow checks, so that any
# arithmetic overflow on hostile input is a crash (GUIDE: no input may panic or overflow).
cargo fuzz build -O -a
# The smoke run starts each target from a sample of its corpus: every hand-made seed and
# named reproducer (any name that is not libFuzzer's 40-hex SHA-1) and at most
# $SMOKE_CORPUS_SAMPLE (default 400) of the rest, a new random choice each run. libFuzzer
# replays its whole starting corpus before it fuzzes, and under the fuzzing build's
# instrumentation the two slow targets replay 67 (engine_rx) and about 100 (tcp_segments)
# inputs a second: their whole corpora (2,037 and 4,873 files) took about 75 of the
# step's seconds before a single mutation. Every file of every corpus is still replayed on
# each run of the suite, by its cargo test (proto/tests/fuzz_corpus.rs,
# engine/tests/fuzz_engine_rx.rs, tcp/tests/fuzz_tcp_segments.rs,
# analysis/tests/fuzz_capture.rs: overflow checks on, the same invariants), and under the
# sanitizer by every scripts/fuzz-campaign.sh run.
sample=${SMOKE_CORPUS_SAMPLE:-400}
[[ $sample =~ ^[0-9]+$ ]] || { echo "test-fuzz: FAILED: SMOKE_CORPUS_SAMPLE='$sample': want a whole number" >&2; exit 1; }
for t in $targets; do
    mkdir -p "corpus/$t"
    # Run on a scratch copy so the smoke run does not grow the committed corpus.
    scratch=$(mktemp -d)
    find "corpus/$t" -maxdepth 1 -regextype posix-basic -type f ! -regex '.*/[0-9a-f]\{40\}' -exec cp {} "$scratch/" \;
    find "corpus/$t" -maxdepth 1 -regextype posix-basic -type f -regex '.*/[0-9a-f]\{40\}' | shuf -n "$sample" |
        xargs -r cp -t "$scratch/"
    echo "test-fuzz: $t for ${secs}s ($(ls "$scratch" | wc -l) of $(ls "corpus/$t" | wc -l) corpus files)"
    log="$scratch.log"
    set +e
    cargo fuzz run -O -a "$t" "$scratch" -- -max_total_time="$secs" >"$log" 2>&1
    status=$?
    set -e
    grep -E "^(#[0-9]+[[:space:]]+DONE|==[0-9]+==|SUMMARY)" "$log" || true
    if [[ $status -ne 0 ]]; then tail -n 40 "$log" >&2; fi
    rm -f "$log"
    rm -rf "$scratch"
    if [[ $status -ne 0 ]]; then
        echo "test-fuzz: $t FAILED (see fuzz/artifacts/$t)" >&2
        exit 1
    fi
done
echo "test-fuzz: all targets ran clean"

# The proof that engine_rx's invariants fail the run when violated (issue 15): the same
# target, built against an engine with a deliberately broken tagged bounds check (the
# test-only feature planted-bounds-defect), must crash with the guard-octet violation
# within the same time budget, from the same corpus. Its crash goes to a scratch
# directory, not to fuzz/artifacts/.
scratch=$(mktemp -d)
artifacts=$(mktemp -d)
cp -r corpus/engine_rx/. "$scratch/"
log="$scratch.log"
echo "test-fuzz: engine_rx with the planted bounds defect for up to ${secs}s (must fail)"
cargo fuzz build -O -a --features planted-bounds-defect engine_rx
set +e
cargo fuzz run -O -a --features planted-bounds-defect engine_rx "$scratch" -- \
    -max_total_time="$secs" -artifact_prefix="$artifacts/" >"$log" 2>&1
status=$?
set -e
caught=0
if [[ $status -ne 0 ]] && grep -q "engine_rx: guard octet" "$log"; then caught=1; fi
grep -E "^(engine_rx: |SUMMARY)" "$log" || true
rm -rf "$scratch" "$artifacts" "$log"
if [[ $caught -ne 1 ]]; then
    echo "test-fuzz: the planted bounds defect was NOT caught by engine_rx" >&2
    exit 1
fi
# The harness body itself, as a cargo test, on the one input that crosses the region end:
# it must report the guard violation with the defect (and, in the normal suite, pass
# without it: tests/fuzz_engine_rx.rs). With --workspace (only the engine has a test target of
# that name), the dependencies' features are the ones the cargo test step resolved, and this
# compiles the engine and the test alone: with -p warpcore-engine cargo resolved them for the
# engine's package alone and built 19 crates again (51 s against 5 s on 2 cores). And without
# the RUSTC_BOOTSTRAP the fuzz builds need: cargo puts it in every crate's fingerprint, so
# with it this test built 25 crates again (114 s against 14 s; the suite's fuzz step took
# 305 s with it).
cd ..
log=$(mktemp)
if ! env -u RUSTC_BOOTSTRAP cargo test -q --workspace --features warpcore-engine/planted-bounds-defect \
    --test fuzz_engine_rx -- write_past_the_end >"$log" 2>&1; then
    tail -n 30 "$log" >&2
    rm -f "$log"
    echo "test-fuzz: the planted bounds defect was NOT caught by fuzz_engine_rx's write_past_the_end" >&2
    exit 1
fi
if ! grep -q "^test result: ok. 1 passed" "$log"; then
    tail -n 5 "$log" >&2
    rm -f "$log"
    echo "test-fuzz: FAILED: no test of fuzz_engine_rx matching write_past_the_end ran" >&2
    exit 1
fi
rm -f "$log"
# Rebuild the correct engine_rx so that a later `cargo fuzz run` does not pick up the
# planted binary.
(cd fuzz && cargo fuzz build -O -a engine_rx)
echo "test-fuzz: the planted bounds defect was caught"
