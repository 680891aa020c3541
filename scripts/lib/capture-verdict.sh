# shellcheck shell=bash
# The capture judges, shared by scripts/interop-siw.sh (every row of the siw matrix) and
# scripts/test-judges.sh (which shows each of them catching a planted defect).
#
#   TS="tshark -n --disable-protocol rpcordma"; IWDUMP=target/release/iwdump
#   capture_verdict PCAP
#
# Sets, from tshark's and iwdump's own verdicts on PCAP:
#   CV_FRAMES     frames in the capture
#   CV_MALFORMED  frames tshark marks malformed (_ws.malformed)
#   CV_EXPERT     frames carrying an expert-info item of severity error
#   CV_OVERLAP    frames whose only error is TCP reassembly's "New fragment overlaps old data
#                 (retransmission?)": a retransmitted segment over bytes tshark had already
#                 reassembled. Wireshark flags that malformed even when the bytes are the
#                 same (different bytes are "Conflicting data in fragment overlap", which
#                 stays malformed), so such frames are counted here, not in the two above.
#   CV_GOOD       MPA CRCs tshark checked good ("(Good CRC32)" in -V)
#   CV_BAD        MPA CRCs tshark checked bad ("Bad CRC32" in -V)
#   CV_IWDUMP     iwdump's exit status (0: no protocol violation)
#   CV_IWARP      iWARP connections iwdump decoded (its first line's "N iWARP"): 0 means
#                 iwdump judged nothing (a link type or framing it cannot read exits 0 with
#                 warnings), so a caller that expects iWARP traffic fails on it
#   CV_TSHARK     tshark's exit status reading the capture: 0 when each of its two passes
#                 (the display filter of errors; -V, which also counts the frames) read it
#                 to the end,
#                 else the first pass's non-zero status (a file cut short mid-frame,
#                 unreadable, a display filter this tshark refuses, tshark failing). Non-zero
#                 means the counts above cover part of the capture or none (a refused filter
#                 counts 0 malformed and 0 expert errors): callers fail on it.
#   CV_TSHARK_NOTE  which pass failed, with its status and first error line ("" when none)
# and leaves tshark's -V error output in PCAP.V.err (CV_TSHARK_NOTE first when another pass
# failed) and iwdump's report in PCAP.iwdump. The -V text itself is counted as it streams,
# never written: it runs to about 8 times the capture (a 117 MB capture of
# scripts/test-libfabric.sh gave 889 MB of it), and a run of CI failed with "No space left
# on device" while it sat in /tmp.
#
# Why -V: iwarp_mpa.crc_check is present for good and bad CRCs alike (counting it counts CRCs
# seen), and no display filter selects a bad one; the verdict is only in the detail text.
capture_verdict() {
    local pcap=$1
    : "${TS:?capture_verdict needs TS (the tshark command)}" "${IWDUMP:?capture_verdict needs IWDUMP}"
    # tshark's own failures must not end a caller running under `set -e -o pipefail` before
    # it judged them, nor pass as counts: each pass's status is kept, and the first that
    # failed is CV_TSHARK (before, the first two passes' were dropped, and a display filter
    # tshark refused read as 0 malformed frames and 0 expert errors: a pass).
    # Two passes, each a whole dissection (the frames used to be counted in a third, which
    # made a quarter of the judging time of scripts/test-libfabric.sh's big captures).
    local rc_errs=0 rc_v=0
    # One line per frame with an error: malformed?, then each expert item as SEVERITY=MESSAGE.
    local errs
    errs=$($TS -r "$pcap" -Y '_ws.malformed || _ws.expert.severity == error' -T fields \
        -E separator='|' -E aggregator='~' -E occurrence=a \
        -e frame.number -e _ws.malformed -e _ws.expert.severity -e _ws.expert.message \
        2>"$pcap.cv-errs.err") || rc_errs=$?
    local counts
    counts=$(awk -F'|' -v ov='New fragment overlaps old data (retransmission?)' '
        NF >= 4 {
            n = split($3, sev, "~"); split($4, msg, "~")
            only_ov = 1; err = 0
            for (i = 1; i <= n; i++) if (sev[i] == 8388608) { err = 1; if (msg[i] != ov) only_ov = 0 }
            m = split($2, mal, "~")
            for (i = 1; i <= m; i++) if (mal[i] != "" && mal[i] != "_ws.malformed" && index(mal[i], ov) == 0) only_ov = 0
            if (only_ov && (err || $2 != "")) { o++; next }
            if ($2 != "") mf++
            if (err) ex++
        }
        END { printf "%d %d %d\n", mf, ex, o }' <<<"$errs")
    read -r CV_MALFORMED CV_EXPERT CV_OVERLAP <<<"$counts"
    # One pass over the -V text: the frames (each begins with a "Frame N: " header at the
    # margin, as its protocols' top lines are; no other line starts "Frame " and a number)
    # and the good and bad CRCs counted, tshark's status after
    # them on a line of its own (a marker -V never prints: its lines are frame headers or
    # indented).
    local vcounts
    vcounts=$( {
        $TS -r "$pcap" -V 2>"$pcap.V.err"
        echo "capture_verdict: tshark -V exited $?"
    } | awk '/^Frame [0-9]+: / { f++ } /Bad CRC32/ { b++ } /\(Good CRC32\)/ { g++ }
        /^capture_verdict: tshark -V exited [0-9]+$/ { rc = $NF }
        END { printf "%d %d %d %d\n", f, g, b, rc }')
    read -r CV_FRAMES CV_GOOD CV_BAD rc_v <<<"$vcounts"
    CV_TSHARK=0 CV_TSHARK_NOTE=""
    local pass rc err
    for pass in "display-filter (malformed, expert errors):$rc_errs:$pcap.cv-errs.err" \
        "-V (frames, CRCs):$rc_v:$pcap.V.err"; do
        IFS=: read -r pass rc err <<<"$pass"
        ((rc != 0)) || continue
        CV_TSHARK=$rc
        CV_TSHARK_NOTE="tshark's $pass pass exited $rc: $(grep -v '^Running as user' "$err" | head -n 1 || true)"
        break
    done
    if ((rc_v == 0 && CV_TSHARK != 0)); then
        { echo "$CV_TSHARK_NOTE"; cat "$pcap.V.err"; } >"$pcap.cv-V.err" && mv "$pcap.cv-V.err" "$pcap.V.err"
    fi
    rm -f "$pcap.cv-errs.err"
    CV_IWDUMP=0
    "$IWDUMP" "$pcap" >"$pcap.iwdump" 2>&1 || CV_IWDUMP=$?
    CV_IWARP=$(sed -n 's/.* connection(s), \([0-9][0-9]*\) iWARP.*/\1/p' "$pcap.iwdump" | head -n1)
    CV_IWARP=${CV_IWARP:-0}
}

# ts_count PCAP FILTER: how many frames of PCAP the display filter FILTER matches, or
# "tshark-failed" (tshark's message on stderr) when tshark cannot apply it (a field a newer
# Wireshark renamed): the judges comparing the count (scripts/interop-siw.sh's Terminates,
# RDMAP frames after a markers request, siw's rejecting Reply) then fail, where a count
# read through `2>/dev/null | wc -l` was 0 ("no Terminate") and passed.
ts_count() {
    local n err
    err=$(mktemp)
    if n=$(set -o pipefail; $TS -r "$1" -Y "$2" 2>"$err" | wc -l); then
        echo "$n"
    else
        echo "capture-verdict: tshark could not apply '$2' to $1: $(grep -v '^Running as user' "$err" | head -n1)" >&2
        echo tshark-failed
    fi
    rm -f "$err"
}

# capture_drops LOG: how many packets the capturing tshark whose standard error is LOG said
# it dropped ("N packets dropped from IFACE", or "1 packet dropped", at the end of its
# capture; 0 when it said none). A capture that lost packets was not judged whole: a CRC,
# FPDU or Terminate in a dropped frame went unseen, so scripts/interop-siw.sh fails the rows
# judged on it (its VM's capture runs on a TAP port of a host loaded with QEMU's TCG).
capture_drops() {
    tr -d '\r' 2>/dev/null <"$1" | sed -nE 's/^([0-9]+) packets? dropped( from .*)?$/\1/p' |
        awk '{ n += $1 } END { print n + 0 }'
}
