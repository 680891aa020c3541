# tso_check LOG: reads the device counters tcpperf printed into LOG (its `DeviceStats` line)
# and sets TSO_NOTE to "; S of N segments in F TSO super-frames". Fails (returns 1) unless
# super-frames carried more than half of the segments sent: with --tso on a port that cuts
# them, a bulk exchange must travel mostly in super-frames. Sourced by scripts/test-net.sh
# and scripts/test-tcp-kernel.sh.
tso_check() {
    local frames segs sent
    frames=$(sed -nE 's/.*tx_tso_frames: ([0-9]+).*/\1/p' "$1")
    segs=$(sed -nE 's/.*tx_tso_segments: ([0-9]+).*/\1/p' "$1")
    sent=$(sed -nE 's/.*DeviceStats \{ rx_frames: [0-9]+, tx_frames: ([0-9]+).*/\1/p' "$1")
    TSO_NOTE="; ${segs:-?} of ${sent:-?} segments in ${frames:-?} TSO super-frames"
    ((${frames:-0} > 0 && ${segs:-0} * 2 > ${sent:-1}))
}
