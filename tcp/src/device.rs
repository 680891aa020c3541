//! What the [`crate::Stack`] needs from a device beyond smoltcp's [`Device`] trait.

use smoltcp::phy::Device;

/// A smoltcp [`Device`] that works in polls: [`PollDevice::begin_poll`] before the interface
/// is polled (a batching device refills its rx batch once per poll) and
/// [`PollDevice::flush`] after it (a batching device hands its queued frames to the wire in
/// one burst).
pub trait PollDevice: Device {
    /// Called once before each interface poll: the receive snapshot. A device that can
    /// tell takes only the frames that reached it by now in the poll that follows (a DPDK
    /// port's one `rx_burst` a poll, taken here; the in-memory link's frames put on the
    /// wire by now); later ones wait for the next poll. A caller that applies what was
    /// queued for it after this call and before the poll (the engine's commands, a receive
    /// posted among them) can rely on it: every frame the poll takes reached the device
    /// before those were applied, so none was sent in answer to something it missed
    /// ([`crate::host::Host::begin_poll`]).
    fn begin_poll(&mut self) {}

    /// Called once a poll has taken the frames it takes (none, in a held poll): the
    /// snapshot [`PollDevice::begin_poll`] took no longer limits what `receive` gives
    /// (a caller that reads the device outside polls sees every frame, as before the
    /// first poll).
    fn end_rx(&mut self) {}

    /// Called once after each interface poll. Returns whether any frame left the device.
    fn flush(&mut self) -> bool {
        false
    }

    /// Whether transmitted frames leave in [`PollDevice::flush`] (handed to a driver that may
    /// take fewer than offered, the rest kept for a later flush or dropped) rather than when
    /// their transmit token is consumed. A capture of such a device records what
    /// [`PollDevice::flush_observed`] reports, not what the tokens were given.
    fn defers_tx(&self) -> bool {
        false
    }

    /// A capture records this device's frames from now on (through
    /// [`PollDevice::flush_observed`] where it [`defers_tx`](PollDevice::defers_tx)): a
    /// device that joins segments into TSO super-frames stops joining them, so that the
    /// capture holds the frames the wire carries.
    fn observe_tx(&mut self) {}

    /// [`PollDevice::flush`], calling `sent` with each frame the driver accepted in it, in
    /// order, once each. Only a device that [`defers_tx`](PollDevice::defers_tx) reports
    /// anything; the others' frames left with their tokens.
    fn flush_observed(&mut self, sent: &mut dyn FnMut(&[u8])) -> bool {
        let _ = sent;
        self.flush()
    }

    /// Counters of the device.
    fn stats(&self) -> DeviceStats {
        DeviceStats::default()
    }
}

/// Frame counters kept by every device of this crate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// Frames handed to smoltcp.
    pub rx_frames: u64,
    /// Frames smoltcp produced that went out (or were queued to).
    pub tx_frames: u64,
    /// Frames dropped by the device before smoltcp saw them (e.g. bad offloaded checksum,
    /// or a DPDK driver's packet whose segment lengths did not hold together,
    /// `warpcore_dpdk_sys::RxQueue::malformed`).
    pub rx_dropped: u64,
    /// Frames lost on transmit (e.g. a chained mbuf could not be completed, a frame larger
    /// than one mbuf on a port that sends no chained mbufs, or the driver's `tx_prepare`
    /// refused a TSO super-frame). Counted in the frames of `tx_frames`: a super-frame
    /// dropped counts each segment it carried.
    pub tx_dropped: u64,
    /// Of `tx_dropped`, frames whose transmit offload (checksum or TSO) header lengths
    /// DPDK's mbuf could not hold (`warpcore_dpdk_sys::TxOffloadLenError`): an internal
    /// error, as our header writer never produces such lengths. Dropped rather than handed
    /// to the port with wrong offsets (the TCP sends them again).
    pub tx_offload_refused: u64,
    /// Times a transmit token was refused (pool empty or tx queue full): back-pressure.
    pub tx_backpressure: u64,
    /// Of those, times the buffer pool was empty.
    pub tx_pool_empty: u64,
    /// Flushes in which the tx ring took fewer frames than were waiting.
    pub tx_ring_full: u64,
    /// TSO super-frames handed to the port: frames of two or more segments joined for the
    /// port to cut ([`crate::tso`]). One the device drops instead (counted in `tx_dropped`)
    /// leaves this count and `tx_tso_segments`.
    pub tx_tso_frames: u64,
    /// Segments those super-frames carried (each also counted in `tx_frames`).
    pub tx_tso_segments: u64,
    /// Buffers taken from the device's pool when read (a DPDK port: mbufs allocated and not
    /// yet freed, by anyone using that pool; ports that share a pool report the same
    /// figure). `None` for a device without a pool.
    pub pool_in_use: Option<u64>,
}
