#!/usr/bin/env bash
# The planted-defect suite: every judge the test suite relies on is fed an input with a known
# defect and must fail, and a clean input and must pass. A judge that cannot fail proves
# nothing. Prints one line per case:
#
#   judge <judge>, <input>: caught (<the judge's own words>)
#   judge <judge>, <input>: passed clean (<figures>)
#
# and exits non-zero if any judge missed its defect, failed its clean input, or could not run.
#
#   scripts/test-judges.sh          # run by scripts/test.sh
#
# Judges: the capture verdicts of scripts/lib/capture-verdict.sh (what the siw interop matrix
# judges every row with: tshark's CRC verdicts, malformed frames and expert errors, and
# iwdump), the tshark judge test, the engine_random model comparison, the machine-path check,
# the hostile-peer placement check, iwperf --verify (scripts/judges/verify.sh). The engine
# receive fuzz target's planted bounds defect is shown caught by scripts/test-fuzz.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

missed=0
caught() { echo "judge $1: caught ($2)"; }
clean() { echo "judge $1: passed clean ($2)"; }
missed() { echo "judge $1: MISSED: $2"; missed=$((missed + 1)); }

command -v tshark >/dev/null || { echo "test-judges: tshark is missing (scripts/install-deps.sh)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "test-judges: python3 is missing" >&2; exit 1; }

work=$(mktemp -d /tmp/wcjudges.XXXXXX)
trap 'rm -rf "$work"' EXIT

# ---- the capture judges (shared with scripts/interop-siw.sh)
cargo build -q -p warpcore-apps --bin iwdump
IWDUMP=${CARGO_TARGET_DIR:-$root/target}/debug/iwdump
TS="tshark -n --disable-protocol rpcordma -o tcp.try_heuristic_first:TRUE"
# shellcheck source=lib/capture-verdict.sh
. scripts/lib/capture-verdict.sh

# A real siw-to-siw rping capture, MPA Rev 2 with CRC: 35 FPDUs, every CRC good.
src=interop/pcaps/siw_mpa2crc_rping.pcap
[ -f "$src" ] || { echo "test-judges: $src is missing" >&2; exit 1; }
cp "$src" "$work/clean.pcap"
# Frame 9 is the server's Read Request (MPA length 46, then DDP/RDMAP, then the CRC).
# One flipped octet 10 from its end (the Read Request's sink STag): only the CRC notices.
scripts/lib/pcap-plant.py "$src" "$work/flipped.pcap" 9 -10 flip
# Its MPA ULPDU length cut from 46 to 2 octets: the DDP header no longer fits (malformed).
scripts/lib/pcap-plant.py "$src" "$work/malformed.pcap" 9 0x43 2

capture_verdict "$work/clean.pcap"
if ((CV_TSHARK == 0)); then
    clean "tshark exit status, siw_mpa2crc_rping" "read to the end, $CV_FRAMES frames"
else
    missed "tshark exit status, siw_mpa2crc_rping" "exit $CV_TSHARK on a clean capture: $(head -n2 "$work/clean.pcap.V.err" | tr '\n' ' ')"
fi
if ((CV_BAD == 0 && CV_GOOD > 0)); then
    clean "tshark CRC count, siw_mpa2crc_rping" "$CV_GOOD good, $CV_BAD bad CRCs"
else
    missed "tshark CRC count, siw_mpa2crc_rping" "clean capture gave $CV_GOOD good, $CV_BAD bad"
fi
# (0 and 0 count only from a tshark that ran every pass: a refused filter counts 0 too.)
if ((CV_TSHARK == 0 && CV_MALFORMED == 0 && CV_EXPERT == 0)); then
    clean "tshark malformed/expert, siw_mpa2crc_rping" "$CV_FRAMES frames, 0 malformed, 0 expert errors"
else
    missed "tshark malformed/expert, siw_mpa2crc_rping" "$CV_MALFORMED malformed, $CV_EXPERT expert errors on a clean capture${CV_TSHARK_NOTE:+ ($CV_TSHARK_NOTE)}"
fi
if ((CV_IWDUMP == 0 && CV_IWARP >= 1)); then
    clean "iwdump, siw_mpa2crc_rping" "exit 0, no violation, $CV_IWARP iWARP connection(s) decoded"
else
    missed "iwdump, siw_mpa2crc_rping" "exit $CV_IWDUMP on a clean capture: $(grep -m1 'VIOLATION' "$work/clean.pcap.iwdump" || true)"
fi
good_clean=$CV_GOOD

# iwdump caught a planted defect when its verdict says so: exit 1 (a protocol violation
# found) with a VIOLATION line. Exit 2 is a file it could not read and 101 a panic: neither
# is a verdict on the defect (before, any non-zero exit counted as caught).
iwdump_caught() { # iwdump_caught PCAP: true when iwdump's verdict on PCAP is a violation
    ((CV_IWDUMP == 1)) && grep -q 'VIOLATION' "$1.iwdump"
}

capture_verdict "$work/flipped.pcap"
if ((CV_BAD >= 1)); then
    caught "tshark CRC count, one flipped FPDU octet" "$CV_GOOD good, $CV_BAD bad CRCs (clean: $good_clean good)"
else
    missed "tshark CRC count, one flipped FPDU octet" "$CV_GOOD good, $CV_BAD bad CRCs"
fi
if iwdump_caught "$work/flipped.pcap"; then
    caught "iwdump, one flipped FPDU octet" "exit $CV_IWDUMP: $(grep -m1 'VIOLATION' "$work/flipped.pcap.iwdump")"
else
    missed "iwdump, one flipped FPDU octet" "exit $CV_IWDUMP, no violation reported: $(tail -n1 "$work/flipped.pcap.iwdump")"
fi

capture_verdict "$work/malformed.pcap"
if ((CV_MALFORMED >= 1)); then
    caught "tshark malformed, MPA length cut to 2" "$CV_MALFORMED malformed, $CV_EXPERT expert errors"
else
    missed "tshark malformed, MPA length cut to 2" "0 malformed frames"
fi
# The expert count is a judge of its own (it reads the items' severity, not the malformed
# flag): tshark files the exception as an expert item of severity error, so it must count
# that frame too.
if ((CV_EXPERT >= 1)); then
    caught "tshark expert errors, MPA length cut to 2" "$CV_EXPERT frame(s) with an expert item of severity error"
else
    missed "tshark expert errors, MPA length cut to 2" "0 frames with expert errors ($CV_MALFORMED malformed)"
fi
if iwdump_caught "$work/malformed.pcap"; then
    caught "iwdump, MPA length cut to 2" "exit $CV_IWDUMP: $(grep -m1 'VIOLATION' "$work/malformed.pcap.iwdump")"
else
    missed "iwdump, MPA length cut to 2" "exit $CV_IWDUMP, no violation reported: $(tail -n1 "$work/malformed.pcap.iwdump")"
fi

# The clean capture cut 10 octets short of its end (a capture file a crash or a full disk
# left mid-frame): every count above comes out clean for the frames before the cut, so only
# the exit statuses tell that part of the capture went unjudged.
head -c $(($(stat -c %s "$src") - 10)) "$src" >"$work/cut.pcap"
capture_verdict "$work/cut.pcap"
if ((CV_TSHARK != 0)); then
    caught "tshark exit status, capture cut mid-frame" "exit $CV_TSHARK: $(grep -m1 -o 'cut short[^.]*' "$work/cut.pcap.V.err" || head -n1 "$work/cut.pcap.V.err")"
else
    missed "tshark exit status, capture cut mid-frame" "exit 0 ($CV_FRAMES frames, $CV_MALFORMED malformed)"
fi
# iwdump too: exit 2 with its "could not be read whole" (it exited 0, no violation in the
# frames before the cut).
if ((CV_IWDUMP == 2)) && grep -q 'could not be read whole' "$work/cut.pcap.iwdump"; then
    caught "iwdump exit status, capture cut mid-frame" "exit 2: $(grep -m1 -o 'capture file damaged[^;]*' "$work/cut.pcap.iwdump")"
else
    missed "iwdump exit status, capture cut mid-frame" "exit $CV_IWDUMP: $(tail -n1 "$work/cut.pcap.iwdump")"
fi

# The clean capture under a link type iwdump cannot read (147, user-defined): iwdump exits 0
# with a warning and finds no violation because it decoded nothing; only its connection
# count tells (the siw matrix fails a row on 0 iWARP connections).
python3 - "$src" "$work/linktype.pcap" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
assert b[:4] == bytes.fromhex("d4c3b2a1"), "a little-endian pcap"
b[20:24] = (147).to_bytes(4, "little")
open(sys.argv[2], "wb").write(b)
PY
capture_verdict "$work/linktype.pcap"
# Counted from iwdump's report: only a run that exited 0 and printed its "0 iWARP" count says
# it decoded nothing (a panic or an unreadable file also leaves CV_IWARP at 0).
if ((CV_IWDUMP == 0 && CV_IWARP == 0)) && grep -q ' connection(s), 0 iWARP' "$work/linktype.pcap.iwdump"; then
    caught "iwdump connection count, link type 147" "exit $CV_IWDUMP, 0 iWARP connections: $(grep -m1 'warning' "$work/linktype.pcap.iwdump" | cut -c1-90)"
else
    missed "iwdump connection count, link type 147" "exit $CV_IWDUMP, $CV_IWARP iWARP connection(s) decoded: $(head -n1 "$work/linktype.pcap.iwdump")"
fi

# ---- judges that live in cargo tests: each planted test feeds its judge the defect (it must
# fail) and the clean input (it must pass), so one passing test is both lines.
cargo_judge() { # cargo_judge JUDGE DEFECT CLEAN PACKAGE TEST NAME
    local judge=$1 defect=$2 cleaninput=$3 pkg=$4 test=$5 name=$6 log
    log="$work/$test.$name.log"
    # --workspace, not -p "$pkg": the features the cargo test step resolved, so only what
    # changed is built (-p warpcore-apps built 10 crates again, 22 s on 2 cores). Another
    # package's test target of the same name (proto's tshark_judge) runs none of its tests
    # under the exact name: one result line passes exactly 1 test.
    if WARPCORE_REQUIRE_TSHARK=1 cargo test -q --workspace --test "$test" -- --exact "$name" >"$log" 2>&1 &&
        [[ $(grep -o "test result: ok. [0-9]* passed" "$log" | grep -v " 0 passed" | tr '\n' '|') == \
            "test result: ok. 1 passed|" ]]; then
        caught "$judge, $defect" "test $pkg $test::$name"
        clean "$judge, $cleaninput" "test $pkg $test::$name"
    else
        missed "$judge, $defect" "test $pkg $test::$name failed or did not run (or another ran too)"
        tail -n 30 "$log"
    fi
}
cargo_judge "tshark judge test" "one flipped FPDU octet" "siw_mpa2crc_rping" \
    warpcore-apps tshark_judge planted_flipped_octet_is_caught
cargo_judge "engine_random model comparison" \
    "one flipped octet in each area (receive tails, atomic region, Read sink past 64 KiB, source, target)" \
    "an end-of-run copy equal to the model" warpcore-engine engine_random \
    comparison_catches_one_changed_octet_in_each_area
cargo_judge "machine-path check" "planted absolute home and work paths of five kinds" \
    "system and relative paths, binary and untracked files" warpcore-apps repo_paths \
    planted_machine_paths_are_caught_and_system_paths_are_not
cargo_judge "hostile-peer nothing-placed check" "an octet placed at offset 0 and at the last octet" \
    "an untouched region" warpcore-engine engine_hostile planted_placement_at_offset_0_is_caught

# ---- iwperf --verify over net_memif between two processes
if [ -x scripts/judges/verify.sh ]; then
    out=$work/verify.out
    if scripts/judges/verify.sh >"$out" 2>&1; then
        grep '^judge ' "$out"
    else
        grep '^judge ' "$out" || true
        missed "iwperf --verify" "scripts/judges/verify.sh failed: $(tail -n 5 "$out")"
    fi
else
    missed "iwperf --verify" "scripts/judges/verify.sh is missing"
fi

if ((missed)); then
    echo "test-judges: $missed judge case(s) did not behave" >&2
    exit 1
fi
echo "test-judges: every judge caught its planted defect and passed its clean input"
