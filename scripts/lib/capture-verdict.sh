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
#   CV_GOOD       MPA CRCs tshark checked good ("(Good CRC32)" in -V)
#   CV_BAD        MPA CRCs tshark checked bad ("Bad CRC32" in -V)
#   CV_IWDUMP     iwdump's exit status (0: no protocol violation)
# and leaves tshark's -V text in PCAP.V and iwdump's report in PCAP.iwdump.
#
# Why -V: iwarp_mpa.crc_check is present for good and bad CRCs alike (counting it counts CRCs
# seen), and no display filter selects a bad one; the verdict is only in the detail text.
capture_verdict() {
    local pcap=$1
    : "${TS:?capture_verdict needs TS (the tshark command)}" "${IWDUMP:?capture_verdict needs IWDUMP}"
    CV_FRAMES=$($TS -r "$pcap" 2>/dev/null | wc -l)
    CV_MALFORMED=$($TS -r "$pcap" -Y _ws.malformed 2>/dev/null | wc -l)
    CV_EXPERT=$($TS -r "$pcap" -Y '_ws.expert.severity == error' 2>/dev/null | wc -l)
    $TS -r "$pcap" -V >"$pcap.V" 2>/dev/null
    CV_BAD=$(grep -c 'Bad CRC32' "$pcap.V" || true)
    CV_GOOD=$(grep -c '(Good CRC32)' "$pcap.V" || true)
    CV_IWDUMP=0
    "$IWDUMP" "$pcap" >"$pcap.iwdump" 2>&1 || CV_IWDUMP=$?
}
