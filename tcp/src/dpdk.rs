//! smoltcp over a DPDK port queue pair: zero-copy receive, transmit straight into mbufs, one
//! rx burst and one tx burst per poll.

use std::collections::VecDeque;

use smoltcp::phy::{self, Checksum, ChecksumCapabilities, Device, DeviceCapabilities, Medium};
use smoltcp::time::Instant;
use smoltcp::wire::{EthernetFrame, EthernetProtocol, IpProtocol, Ipv4Packet, TcpPacket};
use warpcore_dpdk_sys::{
    Direction, Mbuf, MbufShared, Mempool, PcapngWriter, RxChecksum, RxQueue, TxChecksumOffload,
    TxOffloadError, TxQueue, TxTso,
};

use crate::device::{DeviceStats, PollDevice};
use crate::tso::{self, Group};

/// Limits of a [`DpdkDevice`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DpdkDeviceConfig {
    /// IP MTU of the port (Ethernet payload), up to 9000.
    pub mtu: usize,
    /// Frames one rx burst fetches and smoltcp may send per poll.
    pub burst: usize,
    /// Frames waiting for the tx ring before transmit refuses tokens (back-pressure). The
    /// segments of a TSO super-frame count one each. Any bound from 1 is taken (each frame
    /// waiting holds an mbuf: the pool bounds them too); no more than 1,024 frames' room is
    /// allocated up front.
    pub tx_pending_max: usize,
}

/// A [`DpdkDeviceConfig`] field the device cannot run with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("DPDK device: {field} {value} is not possible ({allowed})")]
pub struct DpdkDeviceConfigError {
    /// The field: `mtu`, `burst` or `tx_pending_max`.
    pub field: &'static str,
    /// Its value.
    pub value: usize,
    /// What it may be.
    pub allowed: &'static str,
}

impl DpdkDeviceConfig {
    /// Whether the device can run with this configuration: an MTU of 68 (IPv4's smallest,
    /// RFC 791) to 9000, a burst of 1 to [`warpcore_dpdk_sys::BURST_MAX`] (an rx burst
    /// moves no more, and one of 0 receives nothing), room for at least one frame waiting
    /// for the tx ring (else nothing is ever sent).
    pub fn check(&self) -> Result<(), DpdkDeviceConfigError> {
        let refuse = |field, value, allowed| {
            Err(DpdkDeviceConfigError {
                field,
                value,
                allowed,
            })
        };
        if !(68..=warpcore_dpdk_sys::MTU_MAX).contains(&self.mtu) {
            return refuse("mtu", self.mtu, "68 to 9000");
        }
        if !(1..=warpcore_dpdk_sys::BURST_MAX).contains(&self.burst) {
            return refuse("burst", self.burst, "1 to 256 frames");
        }
        if self.tx_pending_max == 0 {
            return refuse("tx_pending_max", 0, "at least 1 frame");
        }
        Ok(())
    }
}

/// Frames [`DpdkDevice::new`] makes room for in its transmit queue at most, whatever
/// [`DpdkDeviceConfig::tx_pending_max`] allows (the default's 512 and more).
const TX_PENDING_RESERVED: usize = 4 * warpcore_dpdk_sys::BURST_MAX;

impl Default for DpdkDeviceConfig {
    fn default() -> Self {
        DpdkDeviceConfig {
            mtu: 1500,
            burst: 64,
            tx_pending_max: 512,
        }
    }
}

/// A smoltcp device on one rx queue and one tx queue of a DPDK port.
///
/// * Receive: [`PollDevice::begin_poll`] takes the poll's one `rx_burst` (the receive
///   snapshot), into the batch if a held poll left it empty; each
///   [`DpdkRxToken`] owns its mbuf and lends its bytes to smoltcp without a copy (a chained
///   mbuf is linearised into a scratch buffer first).
/// * Transmit: each [`DpdkTxToken`] from `transmit` comes with a freshly allocated mbuf that
///   smoltcp writes into; no token is given when the pool is empty or too many frames wait
///   for the ring, so the data stays in TCP's buffers. Receiving never waits for a transmit
///   buffer (that would deadlock two stacks sharing an exhausted pool): the token paired with
///   a received frame only carries immediate replies, dropped and counted if no buffer is
///   free. [`PollDevice::flush`] does one `tx_burst`; frames a full
///   ring refused stay queued for the next poll.
/// * Checksums: where the port offers IPv4/TCP checksum offload, smoltcp skips those
///   checksums and the device marks each mbuf for the port (filling the TCP pseudo-header
///   sum as DPDK requires), a chained frame's too (its headers are read from the first
///   mbuf); a frame whose headers do not fit one mbuf gets its checksums in software. On
///   receive, frames the port flagged bad are dropped and frames it did not vouch for are
///   verified in software.
/// * TSO: where the port has TSO enabled ([`warpcore_dpdk_sys::PortConfig::tso`], with
///   checksum offload and chained mbufs), a connection's consecutive segments queued in one
///   poll are joined into one super-frame the port cuts back into the same segments
///   ([`crate::tso`] says which frames join); the joined frames' headers are stripped
///   (no copy: the mbuf's start moves) and their mbufs chained to the first. While a pcapng
///   capture is attached, or once a [`crate::Capture`] wraps the device, frames are not
///   joined, so the capture holds the segments the wire carries (a super-frame would not fit
///   its snap length); a super-frame already queued when the capture begins is recorded as
///   the segments the port cuts it into ([`crate::tso::cut`]).
/// * Captures (pcapng, [`crate::Capture`]) record a transmitted frame once the driver has
///   taken it, once (see [`DpdkDevice::set_pcapng`]).
#[derive(Debug)]
pub struct DpdkDevice {
    rx: RxQueue,
    tx: TxQueue,
    pool: Mempool,
    cfg: DpdkDeviceConfig,
    rx_batch: VecDeque<Mbuf>,
    rx_armed: bool,
    /// The mbufs of the frames received in this poll, freed when the next poll begins: a
    /// poll that placed a message ends without returning them to the pool (its caller sees
    /// the message sooner), and the next rx burst reuses them while they are warm.
    rx_done: Vec<Mbuf>,
    tx_pending: Vec<Mbuf>,
    /// Frames in `tx_pending`, the segments of a super-frame one each.
    tx_pending_frames: usize,
    /// `tx_pending[..tx_prepared]` passed the driver's `tx_prepare` (TSO ports only).
    tx_prepared: usize,
    rx_scratch: Vec<u8>,
    tx_scratch: Vec<u8>,
    rx_offload: bool,
    tx_offload: bool,
    /// The port sends chained mbufs ([`warpcore_dpdk_sys::Offloads::tx_multi_segs`]).
    tx_chains: bool,
    /// Neither compute nor verify IPv4/TCP checksums ([`DpdkDevice::skip_checksums`]).
    no_checksums: bool,
    stats: DeviceStats,
    pcapng: Option<PcapngWriter>,
    /// While a capture is taken (pcapng, or a [`crate::Capture`] flushing through
    /// [`PollDevice::flush_observed`]): copies of `tx_pending[..tx_staged.len()]`, made
    /// before the frames are offered to the driver (which owns what it takes), recorded
    /// for the frames it took and kept for those it refused. `None` where no copy could be
    /// made (the pool was empty): that frame is missing from the capture
    /// ([`DpdkDevice::capture_missed`]). Each with what the port cuts it into
    /// ([`Staged`]).
    tx_staged: Vec<(Option<Mbuf>, Staged)>,
    tx_capture_missed: u64,
    /// A [`crate::Capture`] records the frames ([`PollDevice::observe_tx`]): none are joined.
    tx_observed: bool,
    tx_spare: Option<Mbuf>,
    /// The next spare, allocated after a flush that sent frames: a poll's second frame (or
    /// the slot its connection takes after its segment) does not wait for an allocation
    /// before the flush that sends the first.
    tx_reserve: Option<Mbuf>,
    tso: Option<Tso>,
    /// A thread was given no lcore id ([`DpdkDevice::use_lcore_cache`]); said once.
    lcore_warned: bool,
}

/// TSO state of a device whose port cuts super-frames.
#[derive(Debug)]
struct Tso {
    /// The port's IP MTU.
    mtu: usize,
    /// The port counts the Ethernet header against the MTU
    /// ([`warpcore_dpdk_sys::Offloads::tso_frame_within_mtu`]).
    within_mtu: bool,
    /// Most mbufs the port chains per packet
    /// ([`warpcore_dpdk_sys::Offloads::tso_segments_max`]).
    chain_max: u16,
    /// The super-frame being built: the index of its head in `tx_pending` (the last frame
    /// queued) and what it holds. Ended by any other frame queued and by every flush.
    group: Option<(usize, Group)>,
}

impl Tso {
    /// The longest payload of one segment the port cuts, for `hdr_len` header octets
    /// (Ethernet, IPv4 and TCP).
    fn payload_max(&self, hdr_len: usize) -> usize {
        let frame_max = if self.within_mtu {
            self.mtu
        } else {
            self.mtu + 14
        };
        frame_max.saturating_sub(hdr_len)
    }
}

/// Queues frame `m` for the tx ring: joined to the super-frame being built when TSO is on
/// and [`Group::admits`] it, else on its own (possibly heading a new super-frame).
/// `pending_frames` counts the frames queued (a super-frame's segments one each).
fn queue_frame(
    pending: &mut Vec<Mbuf>,
    pending_frames: &mut usize,
    mut m: Mbuf,
    tso: Option<&mut Tso>,
    stats: &mut DeviceStats,
) {
    *pending_frames += 1;
    let Some(t) = tso else {
        pending.push(m);
        return;
    };
    let Some(s) = m.is_contiguous().then(|| tso::segment(m.data())).flatten() else {
        t.group = None;
        pending.push(m);
        return;
    };
    if let Some((at, g)) = &mut t.group {
        if *at + 1 == pending.len() {
            let head = &mut pending[*at];
            // A frame whose headers cannot be cut (`adj` refuses only a shared header,
            // never one of our fresh spares) goes on its own, as one that does not fit.
            if g.admits(head.data(), m.data(), &s) && m.adj(s.hdr_len).is_ok() {
                match head.chain(m) {
                    Ok(()) => {
                        g.add(&s);
                        if g.segs == 2 {
                            stats.tx_tso_frames += 1;
                            stats.tx_tso_segments += 1;
                        }
                        stats.tx_tso_segments += 1;
                        // The head is a spare from the device's pool, its buffer and
                        // header its own: data_mut and set_tx_tso do not refuse it.
                        let rewritten = head.data_mut().map(|d| tso::rewrite_head(d, g));
                        let set = rewritten.is_ok()
                            && head
                                .set_tx_tso(TxTso {
                                    l2_len: 14,
                                    l3_len: 20,
                                    l4_len: g.l4_len as u8,
                                    segsz: g.segsz as u16,
                                })
                                .is_ok();
                        if !set {
                            // Not reached: these lengths fit the offload word, and the
                            // head's buffer and header are its own. Were either refused
                            // (counted in tx_offload_refused), the head would
                            // keep the headers or the word of fewer segments (or none): the
                            // super-frame is dropped whole (the TCP sends its segments
                            // again), never handed to the port wrong.
                            let segs = g.segs;
                            drop(pending.pop());
                            *pending_frames = pending_frames.saturating_sub(usize::from(segs));
                            stats.tx_offload_refused += 1;
                            stats.tx_dropped += u64::from(segs);
                            stats.tx_tso_frames = stats.tx_tso_frames.saturating_sub(1);
                            stats.tx_tso_segments =
                                stats.tx_tso_segments.saturating_sub(u64::from(segs));
                            t.group = None;
                        }
                    }
                    Err(_) => {
                        // Not reached: SEGMENTS_MAX keeps a chain far below DPDK's segment
                        // limit (RTE_MBUF_MAX_NB_SEGS), and head and frame are spares of
                        // the device's pool, their headers their own (ChainError's
                        // HeadShared, TailShared). The frame lost its headers; TCP sends
                        // the segment again.
                        stats.tx_dropped += 1;
                        t.group = None;
                    }
                }
                return;
            }
        }
    }
    let max = t.payload_max(s.hdr_len);
    let at = pending.len();
    pending.push(m);
    t.group = Group::start(&s, max, t.chain_max).map(|g| (at, g));
}

impl DpdkDevice {
    /// Builds the device on a started port's queues. Transmit buffers come from `pool`.
    /// Refused when `cfg` is not one it can run with ([`DpdkDeviceConfig::check`]).
    pub fn new(
        rx: RxQueue,
        tx: TxQueue,
        pool: Mempool,
        cfg: DpdkDeviceConfig,
    ) -> Result<Self, DpdkDeviceConfigError> {
        cfg.check()?;
        let off = tx.offloads();
        let frame_max = cfg.mtu + 14;
        let tx_offload = off.tx_ipv4_checksum && off.tx_tcp_checksum;
        let tso = DpdkDevice::tso_possible(&off).then_some(Tso {
            mtu: cfg.mtu,
            within_mtu: off.tso_frame_within_mtu,
            chain_max: off.tso_segments_max,
            group: None,
        });
        Ok(DpdkDevice {
            rx,
            tx,
            pool,
            rx_batch: VecDeque::with_capacity(cfg.burst),
            rx_armed: true,
            rx_done: Vec::with_capacity(cfg.burst),
            // Room for the frames a default bound lets wait, not for any bound the check
            // accepts: `usize::MAX` (no back-pressure but the pool's) overflowed the
            // capacity (a panic), and a large one aborted on an allocation of 8 octets a
            // frame made up front. The queue grows if more wait (each holds an mbuf of the
            // pool, which bounds them).
            tx_pending: Vec::with_capacity(cfg.tx_pending_max.min(TX_PENDING_RESERVED)),
            tx_pending_frames: 0,
            tx_prepared: 0,
            rx_scratch: vec![0; frame_max.max(2048)],
            tx_scratch: vec![0; frame_max.max(2048)],
            rx_offload: off.rx_ipv4_checksum && off.rx_tcp_checksum,
            tx_offload,
            tx_chains: off.tx_multi_segs,
            no_checksums: false,
            cfg,
            stats: DeviceStats::default(),
            pcapng: None,
            tx_staged: Vec::new(),
            tx_capture_missed: 0,
            tx_observed: false,
            tx_spare: None,
            tx_reserve: None,
            tso,
            lcore_warned: false,
        })
    }

    /// Records every received and transmitted frame into `w` (DPDK's pcapng writer) from now
    /// on. A transmitted frame is recorded once the driver has taken it (`tx_burst`), once:
    /// one the tx ring refused is recorded by the flush whose burst takes it, one never taken
    /// (dropped, or still queued when the device goes) not at all. To that end the frames
    /// offered to the driver are copied first, into mbufs of the device's pool (at most
    /// [`warpcore_dpdk_sys::BURST_MAX`] held while the ring refuses frames); a frame no copy
    /// could be made of is counted in [`DpdkDevice::capture_missed`]. No TSO super-frames
    /// are built while a capture is attached; one queued before is recorded as the
    /// segments the port cuts it into, as the wire carries them. Refused when the capture
    /// has no interface for the device's port ([`PcapngWriter::covers`]: the port was made
    /// after the writer).
    pub fn set_pcapng(&mut self, w: PcapngWriter) -> Result<(), warpcore_dpdk_sys::Error> {
        w.covers(self.rx.port())?;
        w.covers(self.tx.port())?;
        self.pcapng = Some(w);
        self.tx_staged.clear();
        self.tx_staged.reserve(warpcore_dpdk_sys::BURST_MAX);
        Ok(())
    }

    /// Stops capturing and returns the writer (its drop closes the file).
    pub fn take_pcapng(&mut self) -> Option<PcapngWriter> {
        self.tx_staged.clear();
        self.pcapng.take()
    }

    /// Transmitted frames the driver took that a capture (pcapng, or a [`crate::Capture`]
    /// around this device) lacks: the pool had no mbuf for the copy made before the burst.
    pub fn capture_missed(&self) -> u64 {
        self.tx_capture_missed
    }

    /// Frames queued for the tx ring.
    pub fn tx_pending(&self) -> usize {
        self.tx_pending_frames
    }

    /// Whether transmit checksums are offloaded to the port.
    pub fn tx_checksum_offloaded(&self) -> bool {
        self.tx_offload
    }

    /// Whether a device on a port with offloads `off` joins segments into TSO super-frames:
    /// the port has TSO, chained mbufs and both transmit checksums.
    pub fn tso_possible(off: &warpcore_dpdk_sys::Offloads) -> bool {
        off.tso && off.tx_multi_segs && off.tx_ipv4_checksum && off.tx_tcp_checksum
    }

    /// Whether consecutive segments are joined into TSO super-frames for the port to cut
    /// (except while a pcapng capture is attached or a [`crate::Capture`] wraps the device).
    pub fn tso(&self) -> bool {
        self.tso.is_some()
    }

    /// Joins segments into TSO super-frames whatever the port offers. Only for tests whose
    /// wire cuts them itself (DPDK's librte_gso, [`warpcore_dpdk_sys::Gso`]): a port without
    /// TSO would send each super-frame as one oversized frame.
    #[doc(hidden)]
    pub fn force_tso_for_test(&mut self) {
        self.tso = Some(Tso {
            mtu: self.cfg.mtu,
            within_mtu: false,
            chain_max: tso::SEGMENTS_MAX,
            group: None,
        });
    }

    /// Whether the port verifies receive checksums.
    pub fn rx_checksum_offloaded(&self) -> bool {
        self.rx_offload
    }

    /// From now on, neither computes IPv4/TCP checksums on transmit (the fields go out as
    /// zero) nor verifies them on receive, in software or through the port.
    ///
    /// Only for a link that cannot corrupt a frame and whose both ends agree: two processes
    /// of ours over net_memif shared memory, the way the kernel's loopback skips checksums.
    /// A peer that still verifies drops every frame from this side (its connection
    /// attempts time out); nothing on a real wire (NIC, tap, af_packet) may use it, which
    /// the callers enforce (`warpcore_verbs::dpdk::DpdkPort::skip_checksums`).
    pub fn skip_checksums(&mut self) {
        self.no_checksums = true;
        self.rx_offload = false;
        self.tx_offload = false;
        self.tso = None;
    }

    /// Whether checksums are skipped ([`DpdkDevice::skip_checksums`]).
    pub fn checksums_skipped(&self) -> bool {
        self.no_checksums
    }

    /// The poll's one `rx_burst`, if it is armed and the batch is empty (frames a held poll
    /// left stay first).
    #[inline]
    fn burst_rx(&mut self) {
        if self.rx_batch.is_empty() && self.rx_armed {
            self.rx_armed = false;
            self.rx.rx_burst(&mut self.rx_batch, self.cfg.burst);
            if let Some(w) = &mut self.pcapng {
                let (port, queue) = (self.rx.port(), self.rx.queue());
                for m in &self.rx_batch {
                    // The port was checked by set_pcapng; a refusal is counted in dropped().
                    let _ = w.record(port, queue, m, Direction::Rx);
                }
            }
        }
    }

    fn take_rx(&mut self) -> Option<Mbuf> {
        self.burst_rx();
        while let Some(m) = self.rx_batch.pop_front() {
            if self.rx_offload && !rx_checksums_ok(&m) {
                self.stats.rx_dropped += 1;
                continue;
            }
            self.stats.rx_frames += 1;
            return Some(m);
        }
        None
    }

    #[inline]
    fn tx_room(&mut self) -> bool {
        if self.tx_pending_frames >= self.cfg.tx_pending_max {
            self.stats.tx_backpressure += 1;
            return false;
        }
        true
    }
}

/// With rx offload on, smoltcp does not check checksums: drop what the port flagged bad and
/// verify in software what it did not vouch for.
fn rx_checksums_ok(m: &Mbuf) -> bool {
    let Some(need) = rx_checks_needed(m.rx_ip_checksum(), m.rx_l4_checksum()) else {
        return false;
    };
    if need
        == (Checks {
            ip: false,
            tcp: false,
        })
    {
        return true;
    }
    if !m.is_contiguous() {
        // Chained frames are rare (jumbo frames on small mbufs): copy to verify.
        let mut v = vec![0; m.pkt_len()];
        // The octets the frame's consumer sees (DpdkRxToken::consume): no more.
        let n = m.copy_to_slice(&mut v);
        return software_checksums_ok(&v[..n], need);
    }
    software_checksums_ok(m.data(), need)
}

/// Which checksums of a received frame software must still verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Checks {
    ip: bool,
    tcp: bool,
}

/// From what the port said of a frame's IPv4 and TCP checksums: `None` to drop it (one is
/// bad), else which ones software must verify. A checksum the port verified, rightly or
/// with the data vouched for and the field left as the sender's partial sum
/// ([`RxChecksum::Verified`], virtio between guests), is not checked again: its field would
/// fail a software check of an intact frame.
fn rx_checks_needed(ip: RxChecksum, tcp: RxChecksum) -> Option<Checks> {
    if ip == RxChecksum::Bad || tcp == RxChecksum::Bad {
        return None;
    }
    Some(Checks {
        ip: !ip.vouched(),
        tcp: !tcp.vouched(),
    })
}

fn software_checksums_ok(frame: &[u8], need: Checks) -> bool {
    let Ok(eth) = EthernetFrame::new_checked(frame) else {
        return false;
    };
    if eth.ethertype() != EthernetProtocol::Ipv4 {
        return true;
    }
    let Ok(ip) = Ipv4Packet::new_checked(eth.payload()) else {
        return false;
    };
    if need.ip && !ip.verify_checksum() {
        return false;
    }
    if ip.next_header() != IpProtocol::Tcp || !need.tcp {
        return true;
    }
    let Ok(tcp) = TcpPacket::new_checked(ip.payload()) else {
        return false;
    };
    tcp.verify_checksum(&ip.src_addr().into(), &ip.dst_addr().into())
}

/// Octets of an Ethernet header.
const ETH_LEN: usize = 14;

/// What an outgoing frame's first segment holds of the headers a checksum offload needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TxHeaders {
    /// Nothing to checksum: not IPv4 (ARP), or headers no emitter of ours writes (their
    /// fields contradict the frame's length).
    None,
    /// An IPv4 header of `ihl` octets, and where `tcp` the whole TCP header after it, all
    /// in the first segment; `total` is the IPv4 total length.
    Ipv4 {
        ihl: usize,
        tcp: bool,
        total: usize,
        src: [u8; 4],
        dst: [u8; 4],
    },
    /// The IPv4 or TCP header runs past the first segment: a port reads the headers it
    /// fills in from there, and the pseudo-header sum must be written there.
    Split,
}

/// Finds the headers of an outgoing frame of `pkt_len` octets whose first segment is
/// `seg`. Only the headers are read, each length checked against the first segment, so a
/// frame chained over several mbufs is judged like a contiguous one (the whole IPv4
/// packet need not be in `seg`, only its headers).
fn tx_headers(seg: &[u8], pkt_len: usize) -> TxHeaders {
    let fits = |n: usize| seg.len() >= n;
    if pkt_len < ETH_LEN {
        return TxHeaders::None;
    }
    if !fits(ETH_LEN) {
        return TxHeaders::Split;
    }
    if u16::from_be_bytes([seg[12], seg[13]]) != 0x0800 {
        return TxHeaders::None;
    }
    if pkt_len < ETH_LEN + 20 {
        return TxHeaders::None;
    }
    if !fits(ETH_LEN + 20) {
        return TxHeaders::Split;
    }
    let ip = &seg[ETH_LEN..];
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    if ip[0] >> 4 != 4 || ihl < 20 || total < ihl || ETH_LEN + total > pkt_len {
        return TxHeaders::None;
    }
    if !fits(ETH_LEN + ihl) {
        return TxHeaders::Split;
    }
    let src = [ip[12], ip[13], ip[14], ip[15]];
    let dst = [ip[16], ip[17], ip[18], ip[19]];
    // A TCP header that cannot be one (shorter than 20 octets or than its data offset says)
    // gets no TCP offload, as before: no emitter of ours writes one.
    let mut tcp = ip[9] == 6 && total >= ihl + 20;
    if tcp {
        if !fits(ETH_LEN + ihl + 20) {
            return TxHeaders::Split;
        }
        let doff = usize::from(ip[ihl + 12] >> 4) * 4;
        tcp = doff >= 20 && ihl + doff <= total;
        if tcp && !fits(ETH_LEN + ihl + doff) {
            return TxHeaders::Split;
        }
    }
    TxHeaders::Ipv4 {
        ihl,
        tcp,
        total,
        src,
        dst,
    }
}

/// Prepares an outgoing frame for checksum offload: marks the mbuf and puts the TCP
/// pseudo-header sum (not inverted) in the TCP checksum field, as DPDK drivers expect.
/// Returns false, changing nothing, when the headers do not all lie in the first segment
/// (only a chained frame's can fail so): its checksums must then be computed in software.
/// Fails when the mbuf cannot hold the header lengths ([`TxOffloadError::Len`]) or its
/// buffer or header is not its own to write ([`MbufShared`], [`TxOffloadError::Shared`]):
/// neither is reached, as an IPv4 header is at most 60 octets and the frames are built in
/// fresh mbufs of the device's pool; the caller then drops the frame.
#[inline]
fn prepare_tx_offload(m: &mut Mbuf) -> Result<bool, TxPrepareError> {
    let pkt_len = m.pkt_len();
    let headers = tx_headers(m.data(), pkt_len);
    let TxHeaders::Ipv4 {
        ihl,
        tcp,
        total,
        src,
        dst,
    } = headers
    else {
        // Nothing to offload (true), or headers beyond the first segment (false).
        return Ok(headers == TxHeaders::None);
    };
    if tcp {
        let tcp_len = (total - ihl) as u32;
        let mut sum: u32 = 0;
        for pair in src.chunks(2).chain(dst.chunks(2)) {
            sum += u32::from(u16::from_be_bytes([pair[0], pair[1]]));
        }
        sum += 6 + tcp_len;
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        let at = ETH_LEN + ihl + 16;
        m.data_mut()?[at..at + 2].copy_from_slice(&(sum as u16).to_be_bytes());
    }
    m.set_tx_checksum_offload(TxChecksumOffload {
        l2_len: ETH_LEN as u8,
        l3_len: ihl as u16,
        ipv4: true,
        tcp,
    })?;
    Ok(true)
}

/// Why [`prepare_tx_offload`] refused a frame (see there); the caller counts it in
/// `tx_offload_refused`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TxPrepareError {
    /// The header lengths do not fit the offload word ([`TxOffloadError::Len`]).
    Len,
    /// The frame's first buffer or header is not its own to write ([`MbufShared`]).
    Shared,
}

impl From<TxOffloadError> for TxPrepareError {
    fn from(e: TxOffloadError) -> Self {
        match e {
            TxOffloadError::Len(_) => TxPrepareError::Len,
            TxOffloadError::Shared(_) => TxPrepareError::Shared,
        }
    }
}

impl From<MbufShared> for TxPrepareError {
    fn from(_: MbufShared) -> Self {
        TxPrepareError::Shared
    }
}

/// Computes the IPv4 header and TCP checksums of the whole frame `frame` in software (what
/// smoltcp skipped for a port that offloads them), where the frame has them.
fn fill_checksums(frame: &mut [u8]) {
    let Ok(mut eth) = EthernetFrame::new_checked(frame) else {
        return;
    };
    if eth.ethertype() != EthernetProtocol::Ipv4 {
        return;
    }
    let Ok(mut ip) = Ipv4Packet::new_checked(eth.payload_mut()) else {
        return;
    };
    ip.fill_checksum();
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    if ip.next_header() != IpProtocol::Tcp {
        return;
    }
    if let Ok(mut tcp) = TcpPacket::new_checked(ip.payload_mut()) {
        tcp.fill_checksum(&src.into(), &dst.into());
    }
}

/// Receive token: owns the received mbuf.
#[derive(Debug)]
pub struct DpdkRxToken<'a> {
    mbuf: Mbuf,
    scratch: &'a mut Vec<u8>,
    /// Where the mbuf goes once consumed ([`DpdkDevice`]'s `rx_done`).
    done: &'a mut Vec<Mbuf>,
}

impl phy::RxToken for DpdkRxToken<'_> {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        let r = if self.mbuf.is_contiguous() {
            f(self.mbuf.data())
        } else {
            let len = self.mbuf.pkt_len();
            if self.scratch.len() < len {
                self.scratch.resize(len, 0);
            }
            // Only the octets the segments hold: a driver whose packet length exceeds its
            // segments' sum would otherwise pass an earlier frame's octets left in the
            // scratch buffer as this frame's.
            let n = self.mbuf.copy_to_slice(&mut self.scratch[..len]);
            f(&self.scratch[..n])
        };
        // Freed when the next poll begins (an unconsumed token frees it when it drops).
        self.done.push(self.mbuf);
        r
    }
}

/// Transmit token: smoltcp writes the frame into the device's spare mbuf, which was allocated
/// before the token was given out (so a token always has a buffer). An unused token leaves
/// the spare in place for the next one: no allocation per received frame.
#[derive(Debug)]
pub struct DpdkTxToken<'a> {
    spare: &'a mut Option<Mbuf>,
    pool: Mempool,
    pending: &'a mut Vec<Mbuf>,
    scratch: &'a mut Vec<u8>,
    offload: bool,
    /// The port sends chained mbufs: a frame larger than one mbuf can go.
    chains: bool,
    stats: &'a mut DeviceStats,
    tso: Option<&'a mut Tso>,
    pending_frames: &'a mut usize,
}

impl phy::TxToken for DpdkTxToken<'_> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        if let Some(mut mbuf) = self.spare.take() {
            if len <= mbuf.tailroom() {
                let r = match mbuf.append(len) {
                    Some(buf) => f(buf),
                    None => unreachable!("tailroom checked above"),
                };
                if self.offload {
                    // One segment holds the whole frame, headers included.
                    match prepare_tx_offload(&mut mbuf) {
                        Ok(prepared) => {
                            debug_assert!(prepared, "a contiguous frame's headers are in it")
                        }
                        Err(_) => {
                            offload_refused(self.stats);
                            return r;
                        }
                    }
                }
                queue_frame(
                    self.pending,
                    self.pending_frames,
                    mbuf,
                    self.tso,
                    self.stats,
                );
                self.stats.tx_frames += 1;
                return r;
            }
            // Too big for one mbuf: the spare stays for the next token.
            *self.spare = Some(mbuf);
        }
        // A frame larger than one mbuf (jumbo MTU on small mbufs): build it in the scratch
        // buffer, then copy it into a chain.
        if self.scratch.len() < len {
            self.scratch.resize(len, 0);
        }
        let r = f(&mut self.scratch[..len]);
        if !self.chains {
            // The port cannot send a chain (Port::configure refuses such a pool for its
            // own MTU, so only a device given a smaller pool or a larger MTU than the
            // port's gets here): dropped and counted rather than handed to a driver that
            // would send the first mbuf alone or misread the chain.
            self.stats.tx_dropped += 1;
            return r;
        }
        let mut chain = Mbuf::from_slice(&self.pool, &self.scratch[..len]);
        let prepared = match chain.as_mut() {
            Some(m) if self.offload => prepare_tx_offload(m),
            _ => Ok(true),
        };
        let Ok(prepared) = prepared else {
            offload_refused(self.stats);
            return r;
        };
        if !prepared {
            // The headers run past the first mbuf (a pool with tiny data rooms): no port
            // fills checksums it cannot find there, so compute them here, in the contiguous
            // scratch copy, and copy that (the first copy's mbufs back to the pool first).
            drop(chain.take());
            fill_checksums(&mut self.scratch[..len]);
            chain = Mbuf::from_slice(&self.pool, &self.scratch[..len]);
        }
        match chain {
            Some(m) => {
                queue_frame(self.pending, self.pending_frames, m, self.tso, self.stats);
                self.stats.tx_frames += 1;
            }
            // Pool ran dry mid-chain: TCP retransmits this segment later.
            None => self.stats.tx_dropped += 1,
        }
        r
    }
}

/// A frame whose offload header lengths the mbuf refused ([`prepare_tx_offload`]): an
/// internal error, counted; the frame is dropped (the TCP sends it again).
#[cold]
fn offload_refused(stats: &mut DeviceStats) {
    stats.tx_offload_refused += 1;
    stats.tx_dropped += 1;
}

/// The TCP segments frame `m` carries: each mbuf of a super-frame is one.
fn frames_in(m: &Mbuf) -> usize {
    if m.tx_tso_segsz().is_some() {
        usize::from(m.nb_segs())
    } else {
        1
    }
}

impl DpdkDevice {
    /// Has the driver check the queued frames it has not checked yet (`tx_prepare`) and
    /// drops, counted in `tx_dropped`, each it refuses: a super-frame breaking a NIC's rule
    /// (its smallest TSO segment, ...) would fail or misbehave on the wire, and the TCP
    /// sends its segments again.
    fn prepare_pending(&mut self) {
        while self.tx_prepared < self.tx_pending.len() {
            let from = self.tx_prepared;
            let looked = (self.tx_pending.len() - from).min(warpcore_dpdk_sys::BURST_MAX);
            let ok = self.tx.tx_prepare(&mut self.tx_pending[from..]);
            self.tx_prepared += ok;
            if ok < looked {
                let segs = frames_in(&self.tx_pending[self.tx_prepared]);
                self.drop_pending(self.tx_prepared, segs);
            }
        }
    }

    /// Drops queued frame `i`, which carries `segs` of the TCP's segments (a super-frame's,
    /// each counted in `tx_frames` and `tx_tso_segments` when it joined): each is counted in
    /// `tx_dropped` (the TCP sends it again), and a super-frame leaves the TSO counts, as the
    /// port never sent it.
    fn drop_pending(&mut self, i: usize, segs: usize) {
        drop(self.tx_pending.remove(i));
        self.stats.tx_dropped += segs as u64;
        if segs > 1 {
            self.stats.tx_tso_frames = self.stats.tx_tso_frames.saturating_sub(1);
            self.stats.tx_tso_segments = self.stats.tx_tso_segments.saturating_sub(segs as u64);
        }
        if i < self.tx_staged.len() {
            drop(self.tx_staged.remove(i));
        }
        if i < self.tx_prepared {
            self.tx_prepared -= 1;
        }
    }

    /// A spare mbuf for the next transmit token, if there is none: the reserve allocated
    /// after the last flush, else one from the pool (none if the pool is empty).
    #[inline]
    fn fill_spare(&mut self) {
        if self.tx_spare.is_none() {
            self.tx_spare = self.tx_reserve.take().or_else(|| {
                // A thread that posts a lone Write to a caller-driven core sends it without
                // running a loop (`begin_poll`) first.
                self.use_lcore_cache();
                self.pool.alloc()
            });
        }
    }

    /// Makes the running thread take and give back mbufs through the pool's per-lcore cache
    /// ([`Mempool::use_lcore_cache`]): without an lcore id of its own, each mbuf is an atomic
    /// operation on the pool's ring that every other such thread of the process contends for
    /// (`bench/examples/mbuf_cache.rs`: 14-21 ns an allocation and free with one, 195-768 ns
    /// without, two threads on two CPUs; microseconds to milliseconds on one CPU, where a
    /// thread preempted inside the ring's update stalls the other). Checked each loop: a
    /// caller-driven core is run by whichever thread calls it.
    #[inline]
    fn use_lcore_cache(&mut self) {
        if self.pool.use_lcore_cache().is_none() && !self.lcore_warned {
            self.lcore_warned = true;
            if warpcore_dpdk_sys::eal_joined() {
                // A guest in the application's EAL gives its threads no lcore id, by design
                // (`EalBuilder::init_or_join`): nothing to say.
                return;
            }
            tracing::warn!(
                port = self.tx.port(),
                threads_max = self.pool.lcore_threads_max(),
                "a thread runs this device's loop without an lcore id of its own (as many \
                 threads as the pool allows hold one, or DPDK has none left): its mbufs \
                 bypass the pool's per-lcore cache, which is much slower when several \
                 threads share the pool"
            );
        }
    }

    /// Makes sure a spare mbuf is ready for the next transmit token.
    #[inline]
    fn ensure_spare(&mut self) -> bool {
        self.fill_spare();
        if self.tx_spare.is_none() {
            self.stats.tx_backpressure += 1;
            self.stats.tx_pool_empty += 1;
            return false;
        }
        true
    }
}

impl Device for DpdkDevice {
    type RxToken<'a> = DpdkRxToken<'a>;
    type TxToken<'a> = DpdkTxToken<'a>;

    fn receive(&mut self, _timestamp: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        // Receiving is never held back for want of a transmit buffer: received frames free
        // mbufs, and waiting for a buffer while the peer waits for ours would deadlock two
        // stacks sharing an exhausted pool. The transmit token of this pair only carries
        // immediate replies (ARP, RST); if no buffer is free when one is written, that reply is
        // dropped and counted (tx_dropped), and the protocol repeats it.
        let rx_mbuf = self.take_rx()?;
        self.fill_spare();
        Some((
            DpdkRxToken {
                mbuf: rx_mbuf,
                scratch: &mut self.rx_scratch,
                done: &mut self.rx_done,
            },
            DpdkTxToken {
                spare: &mut self.tx_spare,
                pool: self.pool,
                pending: &mut self.tx_pending,
                scratch: &mut self.tx_scratch,
                offload: self.tx_offload,
                chains: self.tx_chains,
                stats: &mut self.stats,
                tso: self
                    .tso
                    .as_mut()
                    .filter(|_| !self.tx_observed && self.pcapng.is_none()),
                pending_frames: &mut self.tx_pending_frames,
            },
        ))
    }

    // Inlined into the host's transmit pass: a token returned from a call comes back
    // through memory, and the pass's first read of it (eight octets over fields stored one
    // by one) waited for the stores to retire (a store-forwarding stall: a third of
    // `transmit_frames`' own samples in a memif write_bw sender). `#[inline]` alone left
    // the call.
    #[inline(always)]
    fn transmit(&mut self, _timestamp: Instant) -> Option<Self::TxToken<'_>> {
        if !self.tx_room() || !self.ensure_spare() {
            return None;
        }
        Some(DpdkTxToken {
            spare: &mut self.tx_spare,
            pool: self.pool,
            pending: &mut self.tx_pending,
            scratch: &mut self.tx_scratch,
            offload: self.tx_offload,
            chains: self.tx_chains,
            stats: &mut self.stats,
            tso: self
                .tso
                .as_mut()
                .filter(|_| !self.tx_observed && self.pcapng.is_none()),
            pending_frames: &mut self.tx_pending_frames,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = self.cfg.mtu + 14;
        caps.max_burst_size = Some(self.cfg.burst);
        let mut cs = ChecksumCapabilities::default();
        if self.no_checksums {
            cs.ipv4 = Checksum::None;
            cs.tcp = Checksum::None;
        }
        if self.tx_offload {
            // smoltcp leaves these to the port on transmit.
            cs.ipv4 = Checksum::Rx;
            cs.tcp = Checksum::Rx;
        }
        if self.rx_offload {
            // The device checks (or has the port check) before smoltcp sees the frame.
            cs.ipv4 = if self.tx_offload {
                Checksum::None
            } else {
                Checksum::Tx
            };
            cs.tcp = if self.tx_offload {
                Checksum::None
            } else {
                Checksum::Tx
            };
        }
        caps.checksum = cs;
        caps
    }
}

/// What [`PollDevice::flush_observed`] reports each frame the driver took to.
type TxObserver<'a> = &'a mut dyn FnMut(&[u8]);

/// What the port sends for a queued frame, as its capture copy records it.
#[derive(Debug, Clone, Copy)]
struct Staged {
    /// The TCP segments it carries ([`frames_in`]).
    segs: usize,
    /// A TSO super-frame's segment payload: the port cuts it into `segs` frames, and the
    /// capture records those. `None`: the frame goes as it is.
    segsz: Option<u16>,
}

impl DpdkDevice {
    /// Copies the frames the next burst may take (at most
    /// [`warpcore_dpdk_sys::BURST_MAX`], `tx_burst`'s limit) that have no copy yet.
    #[cold]
    fn stage_tx_copies(&mut self) {
        let upto = self.tx_pending.len().min(warpcore_dpdk_sys::BURST_MAX);
        while self.tx_staged.len() < upto {
            let m = &self.tx_pending[self.tx_staged.len()];
            // A super-frame joined before the capture began (none is joined while one is
            // taken): the capture records the segments the port cuts it into.
            let staged = Staged {
                segs: frames_in(m),
                segsz: m.tx_tso_segsz().filter(|_| m.nb_segs() > 1),
            };
            let copy = if m.is_contiguous() {
                Mbuf::from_slice(&self.pool, m.data())
            } else {
                let len = m.pkt_len();
                if self.tx_scratch.len() < len {
                    self.tx_scratch.resize(len, 0);
                }
                m.copy_to_slice(&mut self.tx_scratch[..len]);
                Mbuf::from_slice(&self.pool, &self.tx_scratch[..len])
            };
            self.tx_staged.push((copy, staged));
        }
    }

    /// Records the copies of the `sent` frames the driver just took (the front of
    /// `tx_staged`) into the pcapng writer and hands them to `observer`, in order. A TSO
    /// super-frame (queued before the capture began) is recorded as the frames the port
    /// cuts it into ([`tso::cut`]): the wire's segments, each whole, not one frame of up to
    /// 64 KiB that a snap length cuts short and whose headers no receiver ever saw.
    #[cold]
    fn record_sent(&mut self, sent: usize, mut observer: Option<TxObserver<'_>>) {
        let n = sent.min(self.tx_staged.len());
        let (port, queue) = (self.tx.port(), self.tx.queue());
        let mut staged = std::mem::take(&mut self.tx_staged);
        for (copy, st) in staged.drain(..n) {
            let Some(m) = copy else {
                self.count_capture_missed(port, st.segs as u64);
                continue;
            };
            if let Some(segsz) = st.segsz {
                if self.record_cut(&m, usize::from(segsz), &mut observer) {
                    continue;
                }
            }
            if let Some(w) = &mut self.pcapng {
                // As in take_rx: checked by set_pcapng, counted in dropped() if refused.
                let _ = w.record(port, queue, &m, Direction::Tx);
            }
            if let Some(f) = observer.as_mut() {
                if m.is_contiguous() {
                    f(m.data());
                } else {
                    let len = m.pkt_len();
                    if self.tx_scratch.len() < len {
                        self.tx_scratch.resize(len, 0);
                    }
                    m.copy_to_slice(&mut self.tx_scratch[..len]);
                    f(&self.tx_scratch[..len]);
                }
            }
        }
        self.tx_staged = staged;
    }

    /// Records the copy `m` of a TSO super-frame as the frames the port cuts it into, every
    /// `segsz` payload octets ([`tso::cut`]). False, nothing recorded, when `m` is no
    /// TCP/IPv4 frame to cut.
    #[cold]
    fn record_cut(
        &mut self,
        m: &Mbuf,
        segsz: usize,
        observer: &mut Option<TxObserver<'_>>,
    ) -> bool {
        let (port, queue) = (self.tx.port(), self.tx.queue());
        let len = m.pkt_len();
        if self.tx_scratch.len() < len {
            self.tx_scratch.resize(len, 0);
        }
        m.copy_to_slice(&mut self.tx_scratch[..len]);
        let mut missed = 0u64;
        let (pcapng, pool) = (&mut self.pcapng, &self.pool);
        let cut = tso::cut(&self.tx_scratch[..len], segsz, |seg| {
            if let Some(w) = pcapng.as_mut() {
                match Mbuf::from_slice(pool, seg) {
                    // As in take_rx: checked by set_pcapng, counted in dropped() if refused.
                    Some(c) => {
                        let _ = w.record(port, queue, &c, Direction::Tx);
                    }
                    None => missed += 1,
                }
            }
            if let Some(f) = observer.as_mut() {
                f(seg);
            }
        });
        if missed > 0 {
            self.count_capture_missed(port, missed);
        }
        cut
    }

    /// Counts `n` transmitted frames a capture lacks (the pool had no mbuf for a copy),
    /// with a warning the first time.
    #[cold]
    fn count_capture_missed(&mut self, port: u16, n: u64) {
        if self.tx_capture_missed == 0 {
            tracing::warn!(
                port,
                "capture: no mbuf for the copy of a transmitted frame (pool empty): \
                 the capture misses it (DpdkDevice::capture_missed counts them)"
            );
        }
        self.tx_capture_missed += n;
    }

    /// [`PollDevice::flush`], reporting the frames the driver took to `observer`.
    fn flush_to(&mut self, mut observer: Option<TxObserver<'_>>) -> bool {
        if self.tx_pending.is_empty() {
            return false;
        }
        if self.tso.is_some() {
            self.prepare_pending();
        }
        // A capture records a frame once the driver has taken it, and only then (it may take
        // fewer than offered, and a frame it never takes never went out); the driver owns
        // what it took, so what may go is copied before the burst.
        let capture = self.pcapng.is_some() || observer.is_some();
        if capture {
            self.stage_tx_copies();
        } else if !self.tx_staged.is_empty() {
            // Copies left by a flush that had an observer: this one reports to none.
            self.tx_staged.clear();
        }
        let sent = self.tx.tx_burst(&mut self.tx_pending);
        if capture {
            self.record_sent(sent, observer.take());
        }
        self.tx_prepared = self.tx_prepared.saturating_sub(sent);
        if let Some(t) = &mut self.tso {
            // Frames a full ring refused stay as they are.
            t.group = None;
            // A super-frame the driver failed to send after cutting it may have lost its TSO
            // flag (net_tap clears it in librte_gso and leaves it so when its write fails):
            // as one frame it is too big ever to go, and it would hold up the queue.
            // Each of its mbufs is one of the segments joined (the frames joined are
            // contiguous), as `frames_in` counts them while the flag is there.
            let stuck = self.tx_pending.first().and_then(|m| {
                (m.nb_segs() > 1 && m.tx_tso_segsz().is_none() && m.pkt_len() > self.cfg.mtu + 14)
                    .then(|| usize::from(m.nb_segs()))
            });
            if let Some(segs) = stuck {
                self.drop_pending(0, segs);
            }
        }
        // Only a TSO port's frames can hold more than one segment.
        self.tx_pending_frames = if self.tso.is_some() {
            self.tx_pending.iter().map(frames_in).sum()
        } else {
            self.tx_pending.len()
        };
        if !self.tx_pending.is_empty() {
            self.stats.tx_ring_full += 1;
        }
        if let Some(w) = &mut self.pcapng {
            w.flush();
        }
        // The frames are on their way: the next spare's allocation is off their path.
        if sent > 0 && self.tx_reserve.is_none() {
            self.tx_reserve = self.pool.alloc();
        }
        sent > 0
    }
}

impl PollDevice for DpdkDevice {
    /// Frees the last poll's received mbufs and takes the poll's one `rx_burst` now, unless
    /// frames an earlier poll left wait in the batch: the receive snapshot (the frames this
    /// poll may take; later ones wait for the next, and none is fetched mid-poll).
    fn begin_poll(&mut self) {
        self.use_lcore_cache();
        self.rx_done.clear();
        self.rx_armed = true;
        self.burst_rx();
        self.rx_armed = false;
    }

    fn flush(&mut self) -> bool {
        self.flush_to(None)
    }

    fn defers_tx(&self) -> bool {
        true
    }

    fn observe_tx(&mut self) {
        self.tx_observed = true;
        self.tx_staged.reserve(warpcore_dpdk_sys::BURST_MAX);
    }

    fn flush_observed(&mut self, sent: &mut dyn FnMut(&[u8])) -> bool {
        self.flush_to(Some(sent))
    }

    fn stats(&self) -> DeviceStats {
        DeviceStats {
            pool_in_use: Some(u64::from(self.pool.in_use())),
            // The driver's packets rx_burst freed unread (their lengths did not hold).
            rx_dropped: self.stats.rx_dropped + self.rx.malformed(),
            ..self.stats
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_segment_counts_the_ethernet_header_only_where_the_port_does() {
        let tso = |within_mtu| Tso {
            mtu: 1500,
            within_mtu,
            chain_max: 64,
            group: None,
        };
        // Ethernet, IPv4 and TCP with timestamps: 66 octets.
        assert_eq!(tso(false).payload_max(66), 1448, "a NIC cuts full segments");
        assert_eq!(
            tso(true).payload_max(66),
            1434,
            "net_tap counts the Ethernet header"
        );
        assert_eq!(tso(true).payload_max(1600), 0);
    }

    /// An IPv4/TCP frame whose IPv4 checksum is right and whose TCP checksum field is not
    /// the checksum, as a virtio peer on the same host hands one over with a partial sum
    /// there (`RTE_MBUF_F_RX_L4_CKSUM_NONE`: the data verified, the field not filled in).
    fn partial_checksum_frame() -> Vec<u8> {
        use smoltcp::phy::ChecksumCapabilities;
        use smoltcp::wire::{
            EthernetAddress, EthernetRepr, IpAddress, Ipv4Address, Ipv4Repr, TcpRepr, TcpSeqNumber,
        };
        let (src, dst) = (Ipv4Address::new(10, 0, 0, 1), Ipv4Address::new(10, 0, 0, 2));
        let payload = [0x5Au8; 100];
        let tcp = TcpRepr {
            src_port: 4791,
            dst_port: 50000,
            control: smoltcp::wire::TcpControl::Psh,
            seq_number: TcpSeqNumber(1),
            ack_number: Some(TcpSeqNumber(1)),
            window_len: 1000,
            window_scale: None,
            max_seg_size: None,
            sack_permitted: false,
            sack_ranges: [None; 3],
            timestamp: None,
            payload: &payload,
        };
        let ip = Ipv4Repr {
            src_addr: src,
            dst_addr: dst,
            next_header: IpProtocol::Tcp,
            payload_len: tcp.buffer_len(),
            hop_limit: 64,
        };
        let eth = EthernetRepr {
            src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
            dst_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
            ethertype: EthernetProtocol::Ipv4,
        };
        let mut f = vec![0; 14 + 20 + tcp.buffer_len()];
        let mut e = EthernetFrame::new_unchecked(&mut f);
        eth.emit(&mut e);
        let mut i = Ipv4Packet::new_unchecked(e.payload_mut());
        ip.emit(&mut i, &ChecksumCapabilities::default());
        let mut t = TcpPacket::new_unchecked(i.payload_mut());
        tcp.emit(
            &mut t,
            &IpAddress::Ipv4(src),
            &IpAddress::Ipv4(dst),
            &ChecksumCapabilities::ignored(),
        );
        // Not the checksum (a sender offloading it leaves the pseudo-header's sum there; any
        // value but the right one serves here, and the test checks it is wrong).
        t.set_checksum(0x1234);
        f
    }

    /// A checksum the port vouched for (right, or the data verified with the field left
    /// as the sender's partial sum) is not checked again in software, which would drop
    /// the intact frame; one it did not check is; one it found bad drops the frame.
    #[test]
    fn checksums_the_port_verified_are_not_checked_again() {
        use RxChecksum::{Bad, Good, Unknown, Verified};
        let none = Checks {
            ip: false,
            tcp: false,
        };
        assert_eq!(rx_checks_needed(Good, Good), Some(none));
        assert_eq!(rx_checks_needed(Good, Verified), Some(none));
        assert_eq!(rx_checks_needed(Verified, Verified), Some(none));
        assert_eq!(
            rx_checks_needed(Unknown, Verified),
            Some(Checks {
                ip: true,
                tcp: false
            })
        );
        assert_eq!(
            rx_checks_needed(Good, Unknown),
            Some(Checks {
                ip: false,
                tcp: true
            })
        );
        assert_eq!(rx_checks_needed(Bad, Verified), None);
        assert_eq!(rx_checks_needed(Good, Bad), None);
        let f = partial_checksum_frame();
        let need = |ip, tcp| Checks { ip, tcp };
        // The TCP field is not the checksum: a software check calls the frame damaged...
        assert!(!software_checksums_ok(&f, need(true, true)));
        // ...so one the port verified passes on its IPv4 checksum alone.
        assert!(software_checksums_ok(&f, need(true, false)));
        let mut bad_ip = f.clone();
        bad_ip[14 + 8] ^= 1; // the TTL: the IPv4 checksum no longer matches
        assert!(!software_checksums_ok(&bad_ip, need(true, false)));
    }

    /// A configuration the device cannot run with is refused, naming the field: a burst
    /// of 0 receives nothing, one past BURST_MAX was cut to it by `rx_burst` while smoltcp
    /// was told the larger figure, no room for a pending frame sends nothing, and an MTU
    /// past 9000 or below IPv4's 68 (RFC 791) is no port's.
    #[test]
    fn a_config_the_device_cannot_run_with_is_refused() {
        let ok = DpdkDeviceConfig::default();
        assert_eq!(ok.check(), Ok(()));
        let edges = DpdkDeviceConfig {
            mtu: 68,
            burst: warpcore_dpdk_sys::BURST_MAX,
            tx_pending_max: 1,
        };
        assert_eq!(edges.check(), Ok(()));
        for (cfg, field, value) in [
            (DpdkDeviceConfig { burst: 0, ..ok }, "burst", 0),
            (DpdkDeviceConfig { burst: 257, ..ok }, "burst", 257),
            (DpdkDeviceConfig { mtu: 67, ..ok }, "mtu", 67),
            (DpdkDeviceConfig { mtu: 9001, ..ok }, "mtu", 9001),
            (
                DpdkDeviceConfig {
                    tx_pending_max: 0,
                    ..ok
                },
                "tx_pending_max",
                0,
            ),
        ] {
            let err = cfg.check().expect_err(field);
            assert_eq!((err.field, err.value), (field, value));
            assert!(
                err.to_string().contains(&format!("{field} {value}")),
                "{err}"
            );
        }
    }

    /// The checks of this module that need DPDK, in one test: the EAL starts once per
    /// process (this is the only test of the binary that starts it).
    #[test]
    fn with_the_eal() {
        let eal = warpcore_dpdk_sys::EalBuilder::for_test("tcp_dpdk_unit", 0, 128)
            .vdev("net_null0")
            .init()
            .expect("EAL with --no-huge --no-pci and a net_null port");
        let pool = Mempool::new(&eal, "wcnet_unit_pool", 1023, 0, Mempool::DEFAULT_DATA_ROOM)
            .expect("pool");
        a_refused_super_frame_without_its_tso_flag_is_dropped_and_one_with_it_kept(&eal, pool);
        a_dropped_super_frame_counts_each_of_its_segments(&eal, pool);
        a_frame_chained_over_small_mbufs_gets_its_checksums(&eal, pool);
        no_chain_goes_to_a_port_that_sends_none(&eal, pool);
        a_huge_tx_pending_max_is_a_device_not_a_panic(&eal, pool);
    }

    /// A pair of ring ports named `name`, configured with the defaults over `pool` and
    /// started.
    fn started_ring_ports(
        eal: &warpcore_dpdk_sys::Eal,
        name: &str,
        pool: &Mempool,
    ) -> (warpcore_dpdk_sys::Port, warpcore_dpdk_sys::Port) {
        use warpcore_dpdk_sys::{PortConfig, RingPortPair};
        let RingPortPair { mut a, mut b } = RingPortPair::new(eal, name, 64).expect("ring ports");
        for p in [&mut a, &mut b] {
            p.configure(&PortConfig::default(), pool)
                .expect("configure");
            p.start().expect("start");
        }
        (a, b)
    }

    /// net_tap clears a super-frame's TSO flag when it cuts it and leaves it so when its
    /// write then fails; the frame, too big to go as one, must not hold the queue up. Here
    /// a full ring refuses the frames, as the failed write would.
    fn a_refused_super_frame_without_its_tso_flag_is_dropped_and_one_with_it_kept(
        eal: &warpcore_dpdk_sys::Eal,
        pool: Mempool,
    ) {
        let (mut a, _b) = started_ring_ports(eal, "wcnet_unit", &pool);
        // A burst DPDK would cut to BURST_MAX: refused, the queue handles given back.
        let err = DpdkDevice::new(
            a.rx_queue(0).expect("rx"),
            a.tx_queue(0).expect("tx"),
            pool,
            DpdkDeviceConfig {
                burst: 1000,
                ..DpdkDeviceConfig::default()
            },
        )
        .expect_err("a burst of 1000");
        assert_eq!(err.field, "burst");
        let mut d = DpdkDevice::new(
            a.rx_queue(0).expect("rx"),
            a.tx_queue(0).expect("tx"),
            pool,
            DpdkDeviceConfig::default(),
        )
        .expect("device");
        d.force_tso_for_test();
        // Fill the ring (nobody reads port b) until it refuses a frame.
        while d.tx_pending.is_empty() {
            d.tx_pending
                .push(Mbuf::from_slice(&pool, &[0; 60]).expect("mbuf"));
            d.flush();
        }
        d.tx_pending.clear();
        let big = || Mbuf::from_slice(&pool, &[0; 3000]).expect("a chain of two mbufs");
        let mut with_flag = big();
        with_flag
            .set_tx_tso(TxTso {
                l2_len: 14,
                l3_len: 20,
                l4_len: 20,
                segsz: 1460,
            })
            .expect("lengths that fit");
        d.tx_pending.push(with_flag);
        d.flush();
        assert_eq!(
            d.tx_pending.len(),
            1,
            "a refused super-frame waits for the ring"
        );
        assert_eq!(d.stats.tx_dropped, 0);
        d.tx_pending.clear();
        d.tx_pending.push(big());
        d.flush();
        assert!(
            d.tx_pending.is_empty(),
            "the flagless frame still holds the queue"
        );
        assert_eq!(
            d.stats.tx_dropped, 2,
            "a super-frame of two mbufs: two segments lost"
        );
        assert_eq!(d.tx_pending(), 0);
    }

    /// A super-frame the device drops (the driver's `tx_prepare` refuses it, or net_tap
    /// left it without its TSO flag at the head of the queue) loses every segment it carried:
    /// each was counted in `tx_frames` and in `tx_tso_segments` when it was joined, so each
    /// counts in `tx_dropped`, and the super-frame leaves the TSO counts, which say what the
    /// port was handed to send (`scripts/lib/tso-check.sh` reads them). Before, one drop
    /// counted one frame and the TSO counts kept the super-frame: three segments queued and
    /// lost showed as two sent, and in a super-frame.
    fn a_dropped_super_frame_counts_each_of_its_segments(
        eal: &warpcore_dpdk_sys::Eal,
        pool: Mempool,
    ) {
        let (mut a, _b) = started_ring_ports(eal, "wcnet_unit_drop", &pool);
        let mut d = DpdkDevice::new(
            a.rx_queue(0).expect("rx"),
            a.tx_queue(0).expect("tx"),
            pool,
            DpdkDeviceConfig::default(),
        )
        .expect("device");
        d.force_tso_for_test();
        // Three consecutive segments of 1,000 octets from `seq`: one super-frame.
        let segment = |seq: u32| {
            let mut f = tcp_frame(32, 1000);
            f[ETH_LEN + 24..ETH_LEN + 28].copy_from_slice(&seq.to_be_bytes());
            f
        };
        let queue_three = |d: &mut DpdkDevice, seq: u32| {
            for k in 0..3 {
                let f = segment(seq + 1000 * k);
                let token = d.transmit(Instant::ZERO).expect("a transmit token");
                phy::TxToken::consume(token, f.len(), |b| b.copy_from_slice(&f));
            }
            assert_eq!((d.tx_pending.len(), d.tx_pending()), (1, 3), "joined");
        };
        let counts = |d: &DpdkDevice| {
            let s = d.stats;
            (
                s.tx_frames,
                s.tx_dropped,
                s.tx_tso_frames,
                s.tx_tso_segments,
            )
        };

        queue_three(&mut d, 1000);
        assert_eq!(counts(&d), (3, 0, 1, 3));
        // The driver refuses it in tx_prepare: here a TSO segment size of 0, which the
        // queue's own check refuses before the driver sees it.
        d.tx_pending[0]
            .set_tx_tso(TxTso {
                l2_len: 14,
                l3_len: 20,
                l4_len: 32,
                segsz: 0,
            })
            .expect("lengths that fit");
        d.flush();
        assert!(d.tx_pending.is_empty(), "dropped");
        assert_eq!(
            counts(&d),
            (3, 3, 0, 0),
            "tx_prepare refused it: its three segments lost, no super-frame sent"
        );

        // Fill the ring (nobody reads port b) until it refuses a frame.
        while d.tx_pending.is_empty() {
            d.tx_pending
                .push(Mbuf::from_slice(&pool, &[0; 60]).expect("mbuf"));
            d.flush();
        }
        d.tx_pending.clear();
        (d.tx_pending_frames, d.tx_prepared) = (0, 0);
        queue_three(&mut d, 4000);
        assert_eq!(counts(&d), (6, 3, 1, 3));
        // net_tap cut it, its write failed and the flag stays cleared: the same mbufs (the
        // first segment's frame, then each further segment's payload), no TSO flag.
        let mut flagless = Mbuf::from_slice(&pool, &segment(4000)).expect("mbuf");
        for _ in 0..2 {
            let tail = Mbuf::from_slice(&pool, &[0x5a; 1000]).expect("mbuf");
            flagless.chain(tail).expect("a chain of three");
        }
        d.tx_pending[0] = flagless;
        d.flush();
        assert!(
            d.tx_pending.is_empty(),
            "the flagless super-frame is dropped"
        );
        assert_eq!(
            counts(&d),
            (6, 6, 0, 0),
            "left without its flag: its three segments lost, no super-frame sent"
        );
        assert_eq!(d.tx_pending(), 0);
    }

    /// An Ethernet + IPv4 + TCP frame from 198.18.0.1:4791 to 198.18.0.2:50000 with
    /// `payload` octets after a TCP header of `tcp_hdr` octets (options zero-filled), both
    /// checksum fields zero: what smoltcp writes for a port that offloads them.
    fn tcp_frame(tcp_hdr: usize, payload: usize) -> Vec<u8> {
        let mut f = vec![0u8; ETH_LEN + 20 + tcp_hdr + payload];
        f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        let ip = &mut f[ETH_LEN..];
        ip[0] = 0x45;
        let total = (20 + tcp_hdr + payload) as u16;
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip[8] = 64;
        ip[9] = 6;
        ip[12..16].copy_from_slice(&[198, 18, 0, 1]);
        ip[16..20].copy_from_slice(&[198, 18, 0, 2]);
        let tcp = &mut ip[20..];
        tcp[..2].copy_from_slice(&4791u16.to_be_bytes());
        tcp[2..4].copy_from_slice(&50000u16.to_be_bytes());
        tcp[4..8].copy_from_slice(&0x0102_0304u32.to_be_bytes());
        tcp[12] = ((tcp_hdr / 4) as u8) << 4;
        tcp[13] = 0x10;
        tcp[14..16].copy_from_slice(&1024u16.to_be_bytes());
        for (i, b) in tcp[tcp_hdr..].iter_mut().enumerate() {
            *b = (i * 7 + 3) as u8;
        }
        f
    }

    /// The whole packet in `m`, with the checksums a port fills where `m` asks for them
    /// (the IPv4 header's; the TCP one's over the segment from the pseudo-header sum the
    /// field holds), as DPDK's contract for the offload flags describes.
    fn as_the_port_sends_it(m: &Mbuf) -> Vec<u8> {
        let mut v = vec![0; m.pkt_len()];
        assert_eq!(m.copy_to_slice(&mut v), v.len());
        if let Some(o) = m.tx_checksum_offload() {
            let (l2, l3) = (usize::from(o.l2_len), usize::from(o.l3_len));
            if o.ipv4 {
                let mut ip = Ipv4Packet::new_checked(&mut v[l2..]).expect("IPv4");
                ip.fill_checksum();
            }
            if o.tcp {
                let total = usize::from(u16::from_be_bytes([v[l2 + 2], v[l2 + 3]]));
                let sum = crate::csum::sum(&v[l2 + l3..l2 + total]);
                let at = l2 + l3 + 16;
                v[at..at + 2].copy_from_slice(&crate::csum::finish(sum));
            }
        }
        v
    }

    /// Both checksums of `frame` are right.
    fn checksums_verify(frame: &[u8]) -> bool {
        let eth = EthernetFrame::new_checked(frame).expect("Ethernet");
        let ip = Ipv4Packet::new_checked(eth.payload()).expect("IPv4");
        let tcp = TcpPacket::new_checked(ip.payload()).expect("TCP");
        ip.verify_checksum() && tcp.verify_checksum(&ip.src_addr().into(), &ip.dst_addr().into())
    }

    /// Sends `frame` through a transmit token of a device on a port with checksum offload
    /// whose mbufs come from `pool`; returns what the token queued.
    fn through_a_tx_token(pool: Mempool, frame: &[u8]) -> (Vec<Mbuf>, DeviceStats) {
        let (mut spare, mut pending, mut scratch) = (pool.alloc(), Vec::new(), Vec::new());
        let (mut stats, mut frames) = (DeviceStats::default(), 0);
        let token = DpdkTxToken {
            spare: &mut spare,
            pool,
            pending: &mut pending,
            scratch: &mut scratch,
            offload: true,
            chains: true,
            stats: &mut stats,
            tso: None,
            pending_frames: &mut frames,
        };
        phy::TxToken::consume(token, frame.len(), |b| b.copy_from_slice(frame));
        (pending, stats)
    }

    /// A frame longer than one mbuf's data room, on a port with checksum offload, leaves as
    /// a chain whose first mbuf asks the port for both checksums (the review's first known
    /// defect: its headers were parsed as if the whole IPv4 packet were in the first mbuf,
    /// which failed, and it went out with both checksums zero). When even the headers do
    /// not fit one mbuf, the checksums are computed in software instead.
    fn a_frame_chained_over_small_mbufs_gets_its_checksums(
        eal: &warpcore_dpdk_sys::Eal,
        pool: Mempool,
    ) {
        let headroom = usize::from(Mempool::DEFAULT_DATA_ROOM) - 2048;
        let small = |name: &str, room: usize| {
            Mempool::new(eal, name, 255, 0, (headroom + room) as u16).expect("small pool")
        };
        let offloaded = Some(TxChecksumOffload {
            l2_len: 14,
            l3_len: 20,
            ipv4: true,
            tcp: true,
        });
        // 1,514 octets over 256-octet mbufs; TCP with timestamps (a 32-octet header).
        let frame = tcp_frame(32, 1448);
        let (pending, stats) = through_a_tx_token(small("wcnet_unit_256", 256), &frame);
        assert_eq!(
            (pending.len(), stats.tx_frames, stats.tx_dropped),
            (1, 1, 0)
        );
        let m = &pending[0];
        assert!(m.nb_segs() >= 6, "a chain: {} segments", m.nb_segs());
        assert_eq!(m.tx_checksum_offload(), offloaded);
        // The pseudo-header sum, not inverted, in the TCP checksum field: 198.18.0.1,
        // 198.18.0.2, protocol 6 and the TCP length 1,480, folded.
        let want = 0xc612u32 + 0x0001 + 0xc612 + 0x0002 + 6 + 1480;
        let want = ((want & 0xffff) + (want >> 16)) as u16;
        assert_eq!(m.data()[50..52], want.to_be_bytes());
        let mut queued = vec![0; m.pkt_len()];
        m.copy_to_slice(&mut queued);
        assert_eq!(queued[..50], frame[..50]);
        assert_eq!(
            queued[52..],
            frame[52..],
            "only the TCP checksum field changed"
        );
        assert!(
            checksums_verify(&as_the_port_sends_it(m)),
            "the port's checksums"
        );

        // A jumbo frame over default mbufs, as on net_ring with MTU 9000.
        let jumbo = tcp_frame(20, 8960);
        let (pending, _) = through_a_tx_token(pool, &jumbo);
        assert!(pending[0].nb_segs() == 5 && pending[0].tx_checksum_offload() == offloaded);
        assert!(checksums_verify(&as_the_port_sends_it(&pending[0])));

        // Headers longer than one mbuf (40 octets): no offload, both checksums computed.
        let (pending, stats) = through_a_tx_token(small("wcnet_unit_40", 40), &frame);
        assert_eq!((pending.len(), stats.tx_dropped), (1, 0));
        let m = &pending[0];
        assert_eq!(m.tx_checksum_offload(), None);
        let mut sent = vec![0; m.pkt_len()];
        m.copy_to_slice(&mut sent);
        assert!(checksums_verify(&sent), "software checksums");

        // One mbuf holds the frame: offloaded as ever. Not IPv4 (ARP): nothing to ask.
        let (pending, _) = through_a_tx_token(pool, &frame);
        assert!(pending[0].is_contiguous() && pending[0].tx_checksum_offload() == offloaded);
        assert!(checksums_verify(&as_the_port_sends_it(&pending[0])));
        let mut arp = frame[..60].to_vec();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        let (pending, _) = through_a_tx_token(small("wcnet_unit_arp", 40), &arp);
        assert_eq!(pending[0].tx_checksum_offload(), None);
        assert_eq!(pending[0].nb_segs(), 2);
    }

    #[test]
    fn tx_headers_are_read_from_the_first_segment_only() {
        let f = tcp_frame(32, 1448);
        let ipv4 = TxHeaders::Ipv4 {
            ihl: 20,
            tcp: true,
            total: 1500,
            src: [198, 18, 0, 1],
            dst: [198, 18, 0, 2],
        };
        // Every first-segment length from the whole frame down to the headers' 66 octets.
        for seg in 66..=f.len() {
            assert_eq!(tx_headers(&f[..seg], f.len()), ipv4, "{seg}");
        }
        for seg in 0..66 {
            assert_eq!(tx_headers(&f[..seg], f.len()), TxHeaders::Split, "{seg}");
        }
        // An IPv4 total length past the frame, a TCP data offset past the IPv4 packet, a
        // runt: nothing an emitter of ours writes, so no offload of what they claim.
        let mut bad = f.clone();
        bad[16..18].copy_from_slice(&1501u16.to_be_bytes());
        assert_eq!(tx_headers(&bad, bad.len()), TxHeaders::None);
        let mut bad = tcp_frame(20, 0);
        bad[ETH_LEN + 20 + 12] = 0x60;
        assert!(matches!(
            tx_headers(&bad, bad.len()),
            TxHeaders::Ipv4 { tcp: false, .. }
        ));
        assert_eq!(tx_headers(&f[..10], 10), TxHeaders::None);
    }

    /// net_null sends no chained mbufs (no `MULTI_SEGS`): a device on it whose pool's
    /// mbufs are smaller than a frame drops that frame, counted, instead of queueing a
    /// chain (`Port::configure` refuses such a pool for the port's own MTU; the device is
    /// given a smaller pool here).
    fn no_chain_goes_to_a_port_that_sends_none(eal: &warpcore_dpdk_sys::Eal, pool: Mempool) {
        use warpcore_dpdk_sys::{Port, PortConfig};
        let mut p = Port::by_name(eal, "net_null0").expect("net_null port");
        p.configure(&PortConfig::default(), &pool)
            .expect("configure");
        assert!(!p.offloads().tx_multi_segs, "net_null takes no chains");
        p.start().expect("start");
        let small = Mempool::new(eal, "wcnet_unit_nochain", 63, 0, 128 + 256).expect("pool");
        let mut d = DpdkDevice::new(
            p.rx_queue(0).expect("rx"),
            p.tx_queue(0).expect("tx"),
            small,
            DpdkDeviceConfig::default(),
        )
        .expect("device");
        let mut send = |frame: &[u8]| {
            let token = d.transmit(Instant::ZERO).expect("a token");
            phy::TxToken::consume(token, frame.len(), |b| b.copy_from_slice(frame));
        };
        send(&tcp_frame(20, 1460));
        send(&tcp_frame(20, 200));
        assert_eq!(d.tx_pending(), 1, "only the frame one mbuf holds is queued");
        assert_eq!(d.tx_pending[0].nb_segs(), 1);
        assert_eq!((d.stats.tx_frames, d.stats.tx_dropped), (1, 1));
        drop(d);
        assert_eq!(small.in_use(), 0, "the refused frame took no mbuf with it");
    }

    /// `tx_pending_max` bounds the frames waiting for the ring; the pool bounds them
    /// anyway (each holds an mbuf). A large bound the check accepts (tcpperf's
    /// `--tx-pending`, "at least 1") must give a device, not a panic ("capacity overflow")
    /// or an abort (an allocation of 8 octets per frame it allows, made up front).
    fn a_huge_tx_pending_max_is_a_device_not_a_panic(eal: &warpcore_dpdk_sys::Eal, pool: Mempool) {
        let (mut a, _b) = started_ring_ports(eal, "wcnet_unit_huge", &pool);
        let cfg = DpdkDeviceConfig {
            tx_pending_max: usize::MAX,
            ..DpdkDeviceConfig::default()
        };
        assert_eq!(cfg.check(), Ok(()), "the check accepts it");
        let made = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            DpdkDevice::new(
                a.rx_queue(0).expect("rx"),
                a.tx_queue(0).expect("tx"),
                pool,
                cfg,
            )
        }));
        let mut d = made.expect("DpdkDevice::new panicked").expect("a device");
        let frame = tcp_frame(20, 200);
        let token = d.transmit(Instant::ZERO).expect("a token");
        phy::TxToken::consume(token, frame.len(), |b| b.copy_from_slice(&frame));
        assert_eq!(d.tx_pending(), 1);
        assert!(d.flush(), "the frame goes");
        assert_eq!(d.tx_pending(), 0);
    }
}
