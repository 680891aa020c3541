# tso_check LOG: reads the counters tcpperf printed into LOG (its `DeviceStats` line, and
# the quick ACKs of its `HostStats` line) and sets TSO_NOTE to "; S of N segments in F TSO
# super-frames (Q quick ACKs not counted)". Fails (returns 1) unless super-frames carried
# more than half of the segments sent, not counting the quick ACKs: with --tso on a port
# that cuts them, a bulk exchange must travel mostly in super-frames. A quick ACK answers one
# out-of-order, gap-filling or duplicate segment (RFC 5681 4.2), a pure ACK that no
# super-frame could carry: under loss they are many (one per segment received after a hole)
# and say nothing about how the data went. Sourced by scripts/test-net.sh and
# scripts/test-tcp-kernel.sh.
tso_check() {
    local frames segs sent quick
    frames=$(sed -nE 's/.*tx_tso_frames: ([0-9]+).*/\1/p' "$1")
    segs=$(sed -nE 's/.*tx_tso_segments: ([0-9]+).*/\1/p' "$1")
    sent=$(sed -nE 's/.*DeviceStats \{ rx_frames: [0-9]+, tx_frames: ([0-9]+).*/\1/p' "$1")
    quick=$(sed -nE 's/.*HostStats \{.*quick_acks: ([0-9]+).*/\1/p' "$1")
    [[ -n $quick ]] || { TSO_NOTE="; tcpperf printed no quick_acks count"; return 1; }
    sent=$((${sent:-1} - quick))
    TSO_NOTE="; ${segs:-?} of ${sent} segments in ${frames:-?} TSO super-frames ($quick quick ACKs not counted)"
    ((${frames:-0} > 0 && ${segs:-0} * 2 > sent))
}
