# tso_check LOG: reads the counters tcpperf printed into LOG (its `DeviceStats` line, and
# the quick ACKs of its `HostStats` line) and sets TSO_NOTE to "; S of N segments in F TSO
# super-frames (Q quick ACKs not counted)". Fails (returns 1) unless super-frames carried
# more than half of the segments sent, not counting the quick ACKs: with --tso on a port
# that cuts them, a bulk exchange must travel mostly in super-frames. A quick ACK answers one
# out-of-order, gap-filling or duplicate segment (RFC 5681 4.2), a pure ACK that no
# super-frame could carry: under loss they are many (one per segment received after a hole)
# and say nothing about how the data went. A count missing from LOG (tcpperf's output
# changed, or it printed none) fails too: a ratio of an unknown figure proves nothing (a
# missing tx_frames once made the check pass on any super-frame at all). Sourced by
# scripts/test-net.sh and scripts/test-tcp-kernel.sh; scripts/test-harness.sh shows it
# failing on such logs.
tso_check() {
    local frames segs sent quick
    frames=$(sed -nE 's/.*DeviceStats \{.*tx_tso_frames: ([0-9]+).*/\1/p' "$1" | tail -n 1)
    segs=$(sed -nE 's/.*DeviceStats \{.*tx_tso_segments: ([0-9]+).*/\1/p' "$1" | tail -n 1)
    sent=$(sed -nE 's/.*DeviceStats \{.*[{ ]tx_frames: ([0-9]+).*/\1/p' "$1" | tail -n 1)
    quick=$(sed -nE 's/.*HostStats \{.*quick_acks: ([0-9]+).*/\1/p' "$1" | tail -n 1)
    local none=()
    [[ -n $frames ]] || none+=(tx_tso_frames)
    [[ -n $segs ]] || none+=(tx_tso_segments)
    [[ -n $sent ]] || none+=(tx_frames)
    [[ -n $quick ]] || none+=(quick_acks)
    if ((${#none[@]})); then
        TSO_NOTE="; tcpperf printed no ${none[*]} count"
        return 1
    fi
    sent=$((sent - quick))
    TSO_NOTE="; $segs of $sent segments in $frames TSO super-frames ($quick quick ACKs not counted)"
    ((frames > 0 && segs * 2 > sent))
}
