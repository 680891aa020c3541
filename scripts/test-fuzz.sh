#!/usr/bin/env bash
# Smoke-runs every cargo-fuzz target for a few seconds each (libFuzzer), starting from the
# corpora kept in fuzz/corpus/<target>. Any crash fails the run and leaves its reproducer in
# fuzz/artifacts/<target>/: add it to fuzz/corpus/<target>/ once fixed, and the regular test
# suite (proto/tests/fuzz_corpus.rs) replays it forever after.
#
#   scripts/test-fuzz.sh [SECONDS_PER_TARGET]      # default 5; 0 skips the runs
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-5}
if [[ "$secs" == 0 ]]; then
    echo "test-fuzz: skipped (0 seconds)"
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
cd fuzz
# -O: optimised; -a: debug assertions, which also turn on overflow checks, so that any
# arithmetic overflow on hostile input is a crash (GUIDE: no input may panic or overflow).
cargo fuzz build -O -a
for t in $targets; do
    mkdir -p "corpus/$t"
    # Run on a scratch copy so the smoke run does not grow the committed corpus.
    scratch=$(mktemp -d)
    cp -r "corpus/$t/." "$scratch/" 2>/dev/null || true
    echo "test-fuzz: $t for ${secs}s ($(ls "corpus/$t" | wc -l) corpus files)"
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
