//! Owned packet buffers.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering};

use crate::{ffi, Error, Mempool};

/// The shortest IPv4 and TCP headers (RFC 791, RFC 9293).
const IPV4_HEADER_MIN: usize = 20;
const TCP_HEADER_MIN: usize = 20;

/// The transmit flags that make a driver act on the header lengths of the offload word.
const TX_OFFLOAD_FLAGS: u64 =
    ffi::RTE_MBUF_F_TX_IP_CKSUM | ffi::RTE_MBUF_F_TX_L4_MASK | ffi::RTE_MBUF_F_TX_TCP_SEG;

/// Every transmit flag [`Mbuf::set_tx_checksum_offload`] and [`Mbuf::set_tx_tso`] set: each
/// setter clears them all before it sets its own, so what an earlier call asked for does not
/// stay behind (the offload word it goes with is replaced too).
const TX_SETTER_FLAGS: u64 = TX_OFFLOAD_FLAGS | ffi::RTE_MBUF_F_TX_IPV4;

/// What a port's receive offload said of one checksum of a frame (`RTE_MBUF_F_RX_*_CKSUM_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxChecksum {
    /// Nothing: the driver did not check it (or has no such offload).
    Unknown,
    /// The checksum is wrong: the frame was damaged.
    Bad,
    /// The checksum was checked and is right.
    Good,
    /// The data was verified, but the checksum field in the frame is not the checksum
    /// (`..._CKSUM_NONE`: virtio's partial checksums of a peer on the same host, say). The
    /// frame is intact; checking its checksum field in software would call it damaged.
    Verified,
}

impl RxChecksum {
    fn from_bits(flags: u64, [bad, good, none]: [u32; 3]) -> RxChecksum {
        if flags == u64::from(bad) {
            RxChecksum::Bad
        } else if flags == u64::from(good) {
            RxChecksum::Good
        } else if flags == u64::from(none) {
            RxChecksum::Verified
        } else {
            RxChecksum::Unknown
        }
    }

    /// The frame's checksum need not be checked again: [`Self::Good`] or [`Self::Verified`].
    pub fn vouched(self) -> bool {
        matches!(self, RxChecksum::Good | RxChecksum::Verified)
    }
}

/// Checksum work a transmitted packet asks the port to do (IPv4 + TCP only, the only
/// protocols Warpcore sends). The caller must have put the pseudo-header checksum in the TCP
/// checksum field when `tcp` is set (DPDK's contract for L4 offload).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TxChecksumOffload {
    /// Ethernet header length in bytes: at most 127 (DPDK's offload word holds 7 bits).
    pub l2_len: u8,
    /// IPv4 header length in bytes: at most 511 (DPDK's offload word holds 9 bits).
    pub l3_len: u16,
    /// Let the port fill the IPv4 header checksum.
    pub ipv4: bool,
    /// Let the port fill the TCP checksum.
    pub tcp: bool,
}

/// TCP segmentation a transmitted packet asks the port to do (`RTE_MBUF_F_TX_TCP_SEG`): the
/// packet is one IPv4/TCP header followed by a payload the port cuts into `segsz`-octet
/// segments, each sent with a copy of the header (sequence number, IPv4 total length and
/// identification adjusted, PSH and FIN kept on the last segment only, both checksums filled
/// in). DPDK's contract: the IPv4 checksum field is zero and the TCP checksum field holds the
/// pseudo-header sum without the length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TxTso {
    /// Ethernet header length in bytes: at most 127 (DPDK's offload word holds 7 bits).
    pub l2_len: u8,
    /// IPv4 header length in bytes: at most 511 (DPDK's offload word holds 9 bits).
    pub l3_len: u16,
    /// TCP header length in bytes (options included).
    pub l4_len: u8,
    /// TCP payload octets per segment.
    pub segsz: u16,
}

/// A header length field of the mbuf's transmit offload word (`tx_offload`), which holds
/// `l2_len` in 7 bits and `l3_len` in 9 (`l4_len` and `tso_segsz` take their types' whole
/// width, 8 and 16 bits, so every value of theirs fits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxOffloadField {
    /// The Ethernet header length, [`TxChecksumOffload::l2_len`] or [`TxTso::l2_len`]: at
    /// most 127.
    L2Len,
    /// The IPv4 header length, [`TxChecksumOffload::l3_len`] or [`TxTso::l3_len`]: at most
    /// 511.
    L3Len,
}

impl TxOffloadField {
    /// The field's name in [`TxChecksumOffload`] and [`TxTso`].
    pub fn name(self) -> &'static str {
        match self {
            TxOffloadField::L2Len => "l2_len",
            TxOffloadField::L3Len => "l3_len",
        }
    }

    /// The largest length the offload word holds in this field.
    pub fn max(self) -> u16 {
        match self {
            TxOffloadField::L2Len => TX_L2_LEN_MAX,
            TxOffloadField::L3Len => TX_L3_LEN_MAX,
        }
    }
}

impl std::fmt::Display for TxOffloadField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A header length [`Mbuf::set_tx_checksum_offload`] or [`Mbuf::set_tx_tso`] cannot store:
/// DPDK's offload word would keep only its low bits, and the port would fill the checksums
/// (or cut the segments) at the wrong offsets. Nothing was changed on the mbuf. Small and
/// `Copy`: the setters are on the transmit path of every frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "transmit offload {field} = {value} octets does not fit DPDK's offload word (at most {max})",
    max = field.max()
)]
pub struct TxOffloadLenError {
    /// The field that does not fit.
    pub field: TxOffloadField,
    /// The length asked for.
    pub value: u16,
}

/// Why [`Mbuf::data_mut`] (or [`Mbuf::append`], [`Mbuf::tailroom`]) will not hand out
/// writable bytes: the segment's buffer is not this `Mbuf`'s alone, so a write would show
/// in another packet that may be read at the same time (or be another process's memory).
/// An `Mbuf` the safe API builds ([`Mbuf::alloc`], [`Mbuf::from_slice`]) is never shared;
/// one a driver hands over ([`crate::RxQueue::rx_burst`]) may be: a ring port delivers
/// whatever its producer enqueued (a clone, a packet sent to several ports with its
/// reference count raised), and drivers such as mlx5 (multi-packet receive queues) or
/// vhost deliver external buffers. Reading ([`Mbuf::data`]) such a packet is fine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MbufShared {
    /// `RTE_MBUF_F_INDIRECT`: the segment is attached to another mbuf's buffer (a clone,
    /// or one of librte_gso's payload segments).
    #[error("the mbuf is indirect (RTE_MBUF_F_INDIRECT): its data is another mbuf's buffer")]
    Indirect,
    /// `RTE_MBUF_F_EXTERNAL`: the segment's buffer is memory it does not own (a driver's
    /// or the application's), which other mbufs may point into.
    #[error("the mbuf has an external buffer (RTE_MBUF_F_EXTERNAL), which others may share")]
    External,
    /// The segment's reference count is above 1: other holders (an indirect mbuf attached
    /// to it, or a second owner of the same mbuf) see the same buffer.
    #[error("the mbuf's reference count is {refcnt}: {n} other holder(s) share its buffer", n = refcnt - 1)]
    Referenced {
        /// The reference count read (`rte_mbuf_refcnt_read`).
        refcnt: u16,
    },
}

/// Whether segment `m` is the sole owner of a direct buffer (DPDK's `RTE_MBUF_DIRECT` and a
/// reference count of 1): only then may the bytes of its buffer be written through it.
///
/// # Safety
/// `m` must point at a valid mbuf segment of a chain the caller owns.
#[inline(always)]
unsafe fn sole_owner(m: *mut ffi::rte_mbuf) -> Result<(), MbufShared> {
    // SAFETY: m is valid (the caller's contract); ol_flags is written only by an owner of
    // the mbuf, and the caller is one.
    let flags = unsafe { (*m).ol_flags };
    if flags & ffi::RTE_MBUF_F_INDIRECT != 0 {
        return Err(MbufShared::Indirect);
    }
    if flags & ffi::RTE_MBUF_F_EXTERNAL != 0 {
        return Err(MbufShared::External);
    }
    // SAFETY: as this function's contract.
    unsafe { header_owner(m) }
}

/// Whether segment `m`'s header (`rte_mbuf`: lengths, data offset, next segment, offload
/// flags and word) is this `Mbuf`'s alone to change: a reference count of 1. Above 1 the
/// same `rte_mbuf` may have a second owner (a packet a ring port's producer sent to two
/// ports with its count raised, delivered to us and still held there), which reads the
/// header while we would change it (or an indirect mbuf is attached to its buffer: we cannot
/// tell the two apart, and refuse both). An indirect or external segment's header is its
/// own: only its buffer is shared ([`sole_owner`]).
///
/// One atomic load (on x86-64 a plain `mov` of the mbuf's first cache line, which the
/// header change touches anyway) and a compare.
///
/// # Safety
/// `m` must point at a valid mbuf segment of a chain the caller owns.
#[inline(always)]
pub(crate) unsafe fn header_owner(m: *mut ffi::rte_mbuf) -> Result<(), MbufShared> {
    // SAFETY: refcnt is a naturally aligned u16 of a valid mbuf (the caller's contract)
    // which DPDK only reads and changes with atomic operations (rte_mbuf_refcnt_read/
    // update/set), so an atomic load is the right access. Acquire: when the last other
    // holder has just let go (an indirect mbuf detached, a second owner freed its
    // reference), its accesses to the buffer and header happen before the writes we then
    // allow.
    let refcnt =
        unsafe { AtomicU16::from_ptr(std::ptr::addr_of_mut!((*m).refcnt)) }.load(Ordering::Acquire);
    if refcnt != 1 {
        return Err(MbufShared::Referenced { refcnt });
    }
    Ok(())
}

/// Why [`Mbuf::adj`] changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AdjError {
    /// The first segment's header is not this `Mbuf`'s alone ([`MbufShared::Referenced`]):
    /// moving its data start would move another owner's packet.
    #[error("cannot remove octets from the packet's start: {0}")]
    Shared(MbufShared),
    /// The first segment holds fewer octets than asked to remove.
    #[error("cannot remove {len} octets from a first segment of {data_len}")]
    TooLong {
        /// Octets asked to remove.
        len: usize,
        /// Octets in the first segment.
        data_len: usize,
    },
}

/// Why [`Mbuf::chain`] changed nothing (see [`ChainRefused`], which gives the tail back).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ChainError {
    /// The head's first or last segment header is not this `Mbuf`'s alone
    /// ([`MbufShared::Referenced`]): chaining changes its length and segment count (first)
    /// and its next pointer (last) under another owner.
    #[error("the head is shared: {0}")]
    HeadShared(MbufShared),
    /// The tail's first segment header is not the tail's alone: chaining changes its
    /// packet length, and its other owner would find our segments after its packet.
    #[error("the tail is shared: {0}")]
    TailShared(MbufShared),
    /// The chain would exceed DPDK's segment limit (`RTE_MBUF_MAX_NB_SEGS`).
    #[error("the chain would exceed DPDK's segment limit")]
    TooManySegments,
}

/// [`Mbuf::chain`] refused: why, and the tail, unchanged, back to its owner.
#[derive(Debug, thiserror::Error)]
#[error("chaining refused: {reason}")]
pub struct ChainRefused {
    /// Why.
    pub reason: ChainError,
    /// The packet that was to be appended, as it was.
    pub tail: Mbuf,
}

/// Why [`Mbuf::set_tx_checksum_offload`] or [`Mbuf::set_tx_tso`] changed nothing. Small
/// and `Copy`: the setters are on the transmit path of every frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TxOffloadError {
    /// A header length does not fit the offload word.
    #[error(transparent)]
    Len(#[from] TxOffloadLenError),
    /// The first segment's header is not this `Mbuf`'s alone ([`MbufShared::Referenced`]):
    /// its offload flags and word are another owner's too; or its buffer is shared
    /// ([`MbufShared::Indirect`], [`MbufShared::External`]), into which the port would
    /// write the headers it fills in.
    #[error("cannot set transmit offloads: {0}")]
    Shared(#[from] MbufShared),
}

/// The largest `l2_len` (7 bits) and `l3_len` (9 bits) of the offload word.
const TX_L2_LEN_MAX: u16 = 0x7f;
const TX_L3_LEN_MAX: u16 = 0x1ff;

/// The `l2_len` and `l3_len` bits of the offload word, or which of the two does not fit
/// (bit layout: l2_len:7, l3_len:9, l4_len:8, tso_segsz:16): one compare and branch on the
/// transmit path.
#[inline(always)]
fn tx_offload_l2_l3(l2_len: u8, l3_len: u16) -> Result<u64, TxOffloadLenError> {
    if (u16::from(l2_len) & !TX_L2_LEN_MAX) | (l3_len & !TX_L3_LEN_MAX) != 0 {
        return Err(tx_offload_len_error(l2_len, l3_len));
    }
    Ok(u64::from(l2_len) | (u64::from(l3_len) << 7))
}

/// Which of `l2_len` and `l3_len` does not fit ([`tx_offload_l2_l3`] found one).
#[cold]
fn tx_offload_len_error(l2_len: u8, l3_len: u16) -> TxOffloadLenError {
    if u16::from(l2_len) > TX_L2_LEN_MAX {
        TxOffloadLenError {
            field: TxOffloadField::L2Len,
            value: u16::from(l2_len),
        }
    } else {
        TxOffloadLenError {
            field: TxOffloadField::L3Len,
            value: l3_len,
        }
    }
}

/// One packet in DPDK memory: a chain of one or more `rte_mbuf` segments.
///
/// Dropping an `Mbuf` returns all its segments to their pool; transmitting it
/// ([`crate::TxQueue::tx_burst`]) hands it to the driver. The pool outlives it by construction
/// (pools are never freed).
#[derive(Debug)]
pub struct Mbuf {
    raw: NonNull<ffi::rte_mbuf>,
}

// SAFETY: an Mbuf owns its segments (a segment shared with other holders, which only a
// driver hands over, is written by none of them: see data()); DPDK mbufs may be freed from any thread
// into their pool, whose operations Mempool::new checked to be safe for several threads (the
// rx queues, the pcapng writer and librte_gso take their mbufs from such pools too).
unsafe impl Send for Mbuf {}

impl Mbuf {
    /// Allocates an empty mbuf from `pool`; `None` when the pool is exhausted.
    pub fn alloc(pool: &Mempool) -> Option<Mbuf> {
        // SAFETY: the pool pointer is valid for the life of the process.
        let raw = unsafe { ffi::wc_pktmbuf_alloc(pool.as_ptr()) };
        NonNull::new(raw).map(|raw| Mbuf { raw })
    }

    /// Copies `data` into a fresh packet, chaining as many segments as the pool's data room
    /// requires. `None` when the pool runs out (nothing is leaked: partial chains are freed).
    pub fn from_slice(pool: &Mempool, data: &[u8]) -> Option<Mbuf> {
        let mut head = Mbuf::alloc(pool)?;
        let mut rest = data;
        let first = rest.len().min(head.tailroom());
        head.append(first)?.copy_from_slice(&rest[..first]);
        rest = &rest[first..];
        while !rest.is_empty() {
            let mut seg = Mbuf::alloc(pool)?;
            let n = rest.len().min(seg.tailroom());
            if n == 0 {
                return None;
            }
            seg.append(n)?.copy_from_slice(&rest[..n]);
            rest = &rest[n..];
            head.chain(seg).ok()?;
        }
        Some(head)
    }

    /// Takes ownership of a raw mbuf.
    ///
    /// # Safety
    /// `raw` must be a valid packet mbuf (chain) that nothing else owns or frees, whose
    /// layout holds ([`Mbuf::layout_holds`]) or is checked before its data is read (a
    /// driver's, `RxQueue::rx_burst`).
    pub(crate) unsafe fn from_raw(raw: NonNull<ffi::rte_mbuf>) -> Mbuf {
        Mbuf { raw }
    }

    /// Gives up ownership without freeing (the receiver of the pointer frees it).
    pub(crate) fn into_raw(self) -> NonNull<ffi::rte_mbuf> {
        let raw = self.raw;
        std::mem::forget(self);
        raw
    }

    /// The raw pointer, still owned by `self`.
    pub(crate) fn as_raw(&self) -> *mut ffi::rte_mbuf {
        self.raw.as_ptr()
    }

    /// Whether the packet's layout holds what [`Mbuf::data`], [`Mbuf::segments`] and the
    /// DPDK functions given a received packet (`rte_pcapng_copy`, `rte_pktmbuf_copy`) rely
    /// on, the length checks of DPDK's `rte_mbuf_check`: at least one segment; each of the
    /// `nb_segs` segments has a buffer and its data inside it (`data_off + data_len <=
    /// buf_len`); their data lengths add up to `pkt_len`; and the chain ends after
    /// `nb_segs`, a single segment's `next` NULL too: [`Mbuf::segments`] stops after
    /// `nb_segs` segments, but [`Mbuf::append`], [`Mbuf::chain`] and DPDK's free follow
    /// `next` to the chain's end, so a single segment with a `next` appended to (or chained
    /// after) a segment no reader of the packet sees. Every packet the safe API builds
    /// holds it (DPDK's append, adj and chain keep it); [`crate::RxQueue::rx_burst`] checks
    /// each packet a driver hands over (never an idle poll's, which has none), as a
    /// driver's (or a ring port's producer's) bug would otherwise have [`Mbuf::data`] read
    /// past the buffer. For a single segment: five fields of the first cache line, which
    /// the receive path reads anyway, and `next` in the second, which the packet's free
    /// reads anyway.
    pub(crate) fn layout_holds(&self) -> bool {
        let head = self.seg();
        let nb_segs = head.nb_segs;
        let mut left = head.pkt_len;
        let mut m: *const ffi::rte_mbuf = head;
        for _ in 0..nb_segs {
            if m.is_null() {
                return false;
            }
            // SAFETY: m is the head (valid) or the `next` of a segment of the chain self
            // owns, non-NULL (checked above): the driver's segment.
            let s = unsafe { &*m };
            if s.buf_addr.is_null()
                || u32::from(s.data_off) + u32::from(s.data_len) > u32::from(s.buf_len)
            {
                return false;
            }
            let Some(l) = left.checked_sub(u32::from(s.data_len)) else {
                return false;
            };
            left = l;
            m = s.next;
        }
        nb_segs > 0 && left == 0 && m.is_null()
    }

    fn seg(&self) -> &ffi::rte_mbuf {
        // SAFETY: self owns a valid mbuf for its whole life.
        unsafe { self.raw.as_ref() }
    }

    /// Total packet length over all segments.
    pub fn pkt_len(&self) -> usize {
        self.seg().pkt_len as usize
    }

    /// Length of the first segment.
    pub fn data_len(&self) -> usize {
        self.seg().data_len as usize
    }

    /// Number of segments in the chain.
    pub fn nb_segs(&self) -> u16 {
        self.seg().nb_segs
    }

    /// Whether the whole packet is in the first segment: one segment in the chain, as
    /// DPDK's `rte_pktmbuf_is_contiguous` asks. `nb_segs` sits in the mbuf's first cache
    /// line, which a driver's receive writes last (with the lengths); `next` sits in the
    /// second, written when the mbuf was allocated and, for a burst's early frames, out of
    /// L1 by the time the burst is read (`perf` of write_bw: the test of `next` was half
    /// of the receive loop's own samples).
    pub fn is_contiguous(&self) -> bool {
        self.seg().nb_segs == 1
    }

    /// The port the packet was received on.
    pub fn port(&self) -> u16 {
        self.seg().port
    }

    /// The offload flags (`RTE_MBUF_F_*`).
    pub fn ol_flags(&self) -> u64 {
        self.seg().ol_flags
    }

    /// What the driver said of the IPv4 header checksum.
    pub fn rx_ip_checksum(&self) -> RxChecksum {
        RxChecksum::from_bits(
            self.ol_flags() & u64::from(ffi::RTE_MBUF_F_RX_IP_CKSUM_MASK),
            [
                ffi::RTE_MBUF_F_RX_IP_CKSUM_BAD,
                ffi::RTE_MBUF_F_RX_IP_CKSUM_GOOD,
                ffi::RTE_MBUF_F_RX_IP_CKSUM_NONE,
            ],
        )
    }

    /// What the driver said of the L4 (TCP) checksum.
    pub fn rx_l4_checksum(&self) -> RxChecksum {
        RxChecksum::from_bits(
            self.ol_flags() & u64::from(ffi::RTE_MBUF_F_RX_L4_CKSUM_MASK),
            [
                ffi::RTE_MBUF_F_RX_L4_CKSUM_BAD,
                ffi::RTE_MBUF_F_RX_L4_CKSUM_GOOD,
                ffi::RTE_MBUF_F_RX_L4_CKSUM_NONE,
            ],
        )
    }

    /// Bytes [`Mbuf::append`] can add after the data of the last segment: those free in its
    /// buffer, or 0 when the buffer is not this packet's alone ([`MbufShared`]), as writing
    /// there could overwrite bytes another holder reads, or when the first segment's header
    /// is shared ([`MbufShared::Referenced`]), whose packet length an append changes.
    pub fn tailroom(&self) -> usize {
        let last = self.last_seg();
        // SAFETY: last is a segment of the chain self owns.
        if unsafe { self.appendable(last) }.is_err() {
            return 0;
        }
        // SAFETY: as above.
        let last = unsafe { &*last };
        last.buf_len as usize - last.data_off as usize - last.data_len as usize
    }

    /// Whether [`Mbuf::append`] may grow `last`: its buffer is its alone ([`sole_owner`])
    /// and the first segment's header, whose packet length grows, is ours alone
    /// ([`header_owner`]; for a single segment the first check read its count already).
    ///
    /// # Safety
    /// `last` must be the last segment of the chain self owns.
    #[inline(always)]
    unsafe fn appendable(&self, last: *mut ffi::rte_mbuf) -> Result<(), MbufShared> {
        let first = self.raw.as_ptr();
        // SAFETY: last and first are segments of the chain self owns.
        unsafe {
            sole_owner(last)?;
            if last != first {
                header_owner(first)?;
            }
        }
        Ok(())
    }

    fn last_seg(&self) -> *mut ffi::rte_mbuf {
        let mut m = self.raw.as_ptr();
        // SAFETY: segments of a chain we own are valid mbufs.
        while let Some(next) = NonNull::new(unsafe { (*m).next }) {
            m = next.as_ptr();
        }
        m
    }

    /// The first segment's data.
    pub fn data(&self) -> &[u8] {
        let m = self.seg();
        // SAFETY: data_off + data_len <= buf_len and buf_addr is not NULL, in each of the
        // first nb_segs segments: DPDK's append, adj and chain keep it in every packet the
        // safe API builds, and rx_burst hands over no driver's packet that breaks it
        // (layout_holds). So buf_addr + data_off points at data_len bytes inside the
        // segment's buffer, all initialised (pool memory is mapped
        // zeroed by the kernel and only ever written with bytes). The borrow of self keeps the
        // mbuf alive, and no safe code writes the bytes meanwhile: only data_mut and append
        // write, through &mut self, and only into a buffer the writing Mbuf is the sole owner
        // of (sole_owner), which no other Mbuf can then be reading. A buffer shared with
        // another Mbuf (a clone, a twice-owned mbuf from a ring port, an external buffer) is
        // written by neither. (What a driver or a peer process does to memory it shares with
        // us, a memif region say, is DMA-like and outside Rust's model, as for any NIC.)
        unsafe {
            std::slice::from_raw_parts(
                (m.buf_addr as *const u8).add(m.data_off as usize),
                m.data_len as usize,
            )
        }
    }

    /// The first segment's data, writable. Refused ([`MbufShared`]) when the first segment
    /// is not the sole owner of a direct buffer: an indirect mbuf (a clone), an external
    /// buffer, or a reference count above 1, where the bytes written would show in another
    /// packet. Never refused for an mbuf from [`Mbuf::alloc`] or [`Mbuf::from_slice`] (nor
    /// for one of theirs passed through a ring port pair); a driver's received mbuf may be.
    #[inline]
    pub fn data_mut(&mut self) -> Result<&mut [u8], MbufShared> {
        // SAFETY: self owns the chain; raw is its first segment.
        unsafe { sole_owner(self.raw.as_ptr()) }?;
        // SAFETY: as in data() for the bounds and initialisation. The segment is the sole
        // owner of a direct buffer (checked above: no other mbuf is attached to it, none
        // shares its header, and it points into no memory of another's), so the borrow of
        // &mut self is the only access to these bytes.
        Ok(unsafe {
            let m = self.raw.as_mut();
            std::slice::from_raw_parts_mut(
                (m.buf_addr as *mut u8).add(m.data_off as usize),
                m.data_len as usize,
            )
        })
    }

    /// Iterates over the data of every segment: the `nb_segs` the first segment counts
    /// (a received packet's chain is checked to end there, `Mbuf::layout_holds`).
    pub fn segments(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let mut cur: *const ffi::rte_mbuf = self.raw.as_ptr();
        let mut left = self.nb_segs();
        std::iter::from_fn(move || {
            if cur.is_null() || left == 0 {
                return None;
            }
            left -= 1;
            // SAFETY: cur is one of the first nb_segs segments of the chain self owns; see
            // data().
            unsafe {
                let m = &*cur;
                cur = m.next;
                Some(std::slice::from_raw_parts(
                    (m.buf_addr as *const u8).add(m.data_off as usize),
                    m.data_len as usize,
                ))
            }
        })
    }

    /// Copies the whole packet into `out` (which must hold [`Mbuf::pkt_len`] bytes) and returns
    /// the number of bytes copied.
    pub fn copy_to_slice(&self, out: &mut [u8]) -> usize {
        let mut at = 0;
        for s in self.segments() {
            let n = s.len().min(out.len() - at);
            out[at..at + n].copy_from_slice(&s[..n]);
            at += n;
            if at == out.len() {
                break;
            }
        }
        at
    }

    /// Grows the last segment by `len` bytes and returns them; `None` if the tailroom is too
    /// small (the packet is unchanged then), which it always is for a last segment whose
    /// buffer is not this packet's alone ([`Mbuf::tailroom`] is 0 then: the bytes past its
    /// data may be another holder's data) or a first segment whose header is shared (its
    /// packet length grows). The bytes are not zeroed: they hold what an earlier packet
    /// left in the buffer, so write all of them.
    pub fn append(&mut self, len: usize) -> Option<&mut [u8]> {
        let len16 = u16::try_from(len).ok()?;
        // SAFETY: the last segment of the chain self owns.
        unsafe { self.appendable(self.last_seg()) }.ok()?;
        // SAFETY: self owns the chain; rte_pktmbuf_append returns NULL (changing nothing) or a
        // pointer to `len` fresh bytes at the end of the last segment.
        let p = unsafe { ffi::wc_pktmbuf_append(self.raw.as_ptr(), len16) };
        if p.is_null() {
            return None;
        }
        // SAFETY: p points at len writable bytes of the last segment's buffer, which it is the
        // sole owner of (checked above), borrowed through &mut self. They hold whatever an earlier
        // packet left there: initialised bytes (see data()), not necessarily zero.
        Some(unsafe { std::slice::from_raw_parts_mut(p as *mut u8, len) })
    }

    /// Appends `tail` (a whole packet) as further segments. Refused, changing nothing and
    /// giving `tail` back ([`ChainRefused`]), when the chain would exceed DPDK's segment
    /// limit, or when a header it changes is shared with another owner
    /// ([`MbufShared::Referenced`]): the head's first segment (packet length, segment
    /// count), its last (next pointer) and the tail's first (packet length).
    pub fn chain(&mut self, tail: Mbuf) -> Result<(), ChainRefused> {
        let refuse = |reason, tail| Err(ChainRefused { reason, tail });
        let (first, last) = (self.raw.as_ptr(), self.last_seg());
        // SAFETY: the first and last segments of the chain self owns.
        if let Err(e) = unsafe { header_owner(first).and_then(|()| header_owner(last)) } {
            return refuse(ChainError::HeadShared(e), tail);
        }
        // SAFETY: the first segment of the chain tail owns.
        if let Err(e) = unsafe { header_owner(tail.raw.as_ptr()) } {
            return refuse(ChainError::TailShared(e), tail);
        }
        let t = tail.raw;
        // SAFETY: both chains are owned, and their headers that change are theirs alone
        // (checked above); on success the head owns the tail's segments.
        let ret = unsafe { ffi::wc_pktmbuf_chain(self.raw.as_ptr(), t.as_ptr()) };
        if ret == 0 {
            std::mem::forget(tail);
            Ok(())
        } else {
            refuse(ChainError::TooManySegments, tail)
        }
    }

    /// Removes `len` bytes from the start of the packet (they must all be in the first
    /// segment). Refused, changing nothing, when the first segment is shorter
    /// ([`AdjError::TooLong`]) or its header is shared with another owner
    /// ([`AdjError::Shared`]), whose packet would lose its start too.
    pub fn adj(&mut self, len: usize) -> Result<(), AdjError> {
        // SAFETY: the first segment of the chain self owns.
        unsafe { header_owner(self.raw.as_ptr()) }.map_err(AdjError::Shared)?;
        let too_long = AdjError::TooLong {
            len,
            data_len: self.data_len(),
        };
        let len16 = u16::try_from(len).map_err(|_| too_long)?;
        // SAFETY: self owns the chain and its first header alone (checked above);
        // rte_pktmbuf_adj returns NULL (changing nothing) when len exceeds the first
        // segment's data, else moves its start and shortens the packet.
        let p = unsafe { ffi::wc_pktmbuf_adj(self.raw.as_ptr(), len16) };
        if p.is_null() {
            return Err(too_long);
        }
        Ok(())
    }

    /// Asks the port to cut the packet into TCP segments ([`TxTso`]); the IPv4 and TCP
    /// checksums are then the port's too (in place of what an earlier call asked). Refused,
    /// changing nothing, when `l2_len` or `l3_len` does not fit its field of the offload
    /// word ([`TxOffloadError::Len`]; before, only its low bits were stored, and the port
    /// wrote the headers at the wrong offsets),
    /// or when the first segment's buffer or header is not this `Mbuf`'s alone
    /// ([`TxOffloadError::Shared`]: indirect, external or referenced twice), as the port
    /// writes the headers in that buffer ([`crate::TxQueue::tx_prepare`] its pseudo-header
    /// checksums, the TSO its per-segment headers) under the other holders.
    #[inline]
    pub fn set_tx_tso(&mut self, t: TxTso) -> Result<(), TxOffloadError> {
        let l2_l3 = tx_offload_l2_l3(t.l2_len, t.l3_len)?;
        // SAFETY: the first segment of the chain self owns.
        unsafe { sole_owner(self.raw.as_ptr()) }?;
        // SAFETY: exclusive access through &mut self, and the header is this Mbuf's alone
        // (checked above, with its buffer); ol_flags and tx_offload are plain data.
        let m = unsafe { self.raw.as_mut() };
        m.ol_flags = (m.ol_flags & !TX_SETTER_FLAGS)
            | ffi::RTE_MBUF_F_TX_IPV4
            | ffi::RTE_MBUF_F_TX_IP_CKSUM
            | ffi::RTE_MBUF_F_TX_TCP_CKSUM
            | ffi::RTE_MBUF_F_TX_TCP_SEG;
        // Bit layout of the tx_offload word: l2_len:7, l3_len:9, l4_len:8, tso_segsz:16.
        m.__bindgen_anon_3.tx_offload =
            l2_l3 | (u64::from(t.l4_len) << 16) | (u64::from(t.segsz) << 24);
        Ok(())
    }

    /// The payload octets per segment when the packet asks the port for TCP segmentation
    /// ([`Mbuf::set_tx_tso`]), else `None`.
    pub fn tx_tso_segsz(&self) -> Option<u16> {
        if self.ol_flags() & ffi::RTE_MBUF_F_TX_TCP_SEG == 0 {
            return None;
        }
        // SAFETY: tx_offload is plain data of a valid mbuf we own.
        let word = unsafe { self.seg().__bindgen_anon_3.tx_offload };
        Some((word >> 24) as u16)
    }

    /// The l2, l3 and l4 header lengths the transmit offload word holds
    /// ([`Mbuf::set_tx_tso`], [`Mbuf::set_tx_checksum_offload`]).
    pub(crate) fn tx_header_lens(&self) -> (usize, usize, usize) {
        // SAFETY: tx_offload is plain data of a valid mbuf we own.
        let word = unsafe { self.seg().__bindgen_anon_3.tx_offload };
        (
            (word & 0x7f) as usize,
            ((word >> 7) & 0x1ff) as usize,
            ((word >> 16) & 0xff) as usize,
        )
    }

    /// Whether the transmit offloads the packet asks for ([`Mbuf::set_tx_checksum_offload`],
    /// [`Mbuf::set_tx_tso`]) can be handed to a driver: the header lengths they carry must
    /// lie inside the first segment, as drivers read and write the headers there without
    /// checking (net_tap copies them into a buffer of the segment's length and writes the TCP
    /// checksum at l2 + l3 + 16; its TSO, librte_gso, rewrites whole 20-octet IPv4 and TCP
    /// headers). So: an IPv4 header length of at least 20, the Ethernet, IPv4 (also as long
    /// as its own IHL says) and TCP (at least 20 octets) headers all in the first segment,
    /// and for TSO a TCP header length of at least 20 and a segment size above 0. And as
    /// the driver writes those headers (`rte_eth_tx_prepare` its pseudo-header checksums),
    /// the first segment's buffer must be the packet's alone ([`MbufShared`]): an offload
    /// asked before the packet was cloned or its count raised (an indirect clone carries
    /// its original's offload flags) is refused here, as the setters refuse it. A packet
    /// that asks for no offload is always fit. [`crate::TxQueue::tx_prepare`] and
    /// [`crate::TxQueue::tx_burst`] hand no unfit packet to the driver; this says why.
    pub fn check_tx_offload(&self) -> Result<(), Error> {
        let flags = self.ol_flags();
        if flags & TX_OFFLOAD_FLAGS == 0 {
            return Ok(());
        }
        let refuse = |why: String| Err(Error::TxOffload { why });
        // SAFETY: the first segment of the chain self owns.
        if let Err(e) = unsafe { sole_owner(self.raw.as_ptr()) } {
            return refuse(format!(
                "the driver would write the headers into a buffer others share: {e}"
            ));
        }
        let (l2, l3, l4) = self.tx_header_lens();
        let seg = self.data_len();
        if l3 < IPV4_HEADER_MIN {
            return refuse(format!(
                "IPv4 header length {l3} (at least {IPV4_HEADER_MIN})"
            ));
        }
        if l2 + l3 > seg {
            return refuse(format!(
                "the Ethernet and IPv4 headers ({l2} + {l3} octets) end past the first \
                 segment's {seg} octets"
            ));
        }
        // l2 + 20 <= seg: the IPv4 header's first octet is in the segment.
        let ihl = usize::from(self.data()[l2] & 0x0f) * 4;
        if l2 + ihl > seg {
            return refuse(format!(
                "the IPv4 header's own length (IHL, {ihl} octets) ends past the first \
                 segment's {seg} octets"
            ));
        }
        let tso = flags & ffi::RTE_MBUF_F_TX_TCP_SEG != 0;
        if tso {
            if l4 < TCP_HEADER_MIN {
                return refuse(format!(
                    "TCP header length {l4} (at least {TCP_HEADER_MIN}) for TSO"
                ));
            }
            if self.tx_tso_segsz() == Some(0) {
                return refuse("TSO segment size 0 (TCP payload octets per segment)".into());
            }
        }
        if tso || flags & ffi::RTE_MBUF_F_TX_L4_MASK != 0 {
            let end = l2 + l3 + l4.max(TCP_HEADER_MIN);
            if end > seg {
                return refuse(format!(
                    "the TCP header ends at octet {end}, past the first segment's {seg} octets"
                ));
            }
        }
        Ok(())
    }

    /// [`Mbuf::check_tx_offload`] without the words: a flag test for a packet that asks for
    /// no offload (the data path's common case).
    pub(crate) fn tx_offload_fits(&self) -> bool {
        self.ol_flags() & TX_OFFLOAD_FLAGS == 0 || self.check_tx_offload().is_ok()
    }

    /// The checksum work the packet asks the port for on transmit
    /// ([`Mbuf::set_tx_checksum_offload`]); `None` when it asks for none.
    pub fn tx_checksum_offload(&self) -> Option<TxChecksumOffload> {
        let flags = self.ol_flags();
        let ipv4 = flags & ffi::RTE_MBUF_F_TX_IP_CKSUM != 0;
        let tcp = flags & ffi::RTE_MBUF_F_TX_L4_MASK == ffi::RTE_MBUF_F_TX_TCP_CKSUM;
        if !ipv4 && !tcp {
            return None;
        }
        let (l2_len, l3_len, _) = self.tx_header_lens();
        Some(TxChecksumOffload {
            l2_len: l2_len as u8,
            l3_len: l3_len as u16,
            ipv4,
            tcp,
        })
    }

    /// Asks the port to compute checksums on transmit (see [`TxChecksumOffload`]): exactly
    /// those `o` asks for, in place of what an earlier call (of this or of
    /// [`Mbuf::set_tx_tso`]) asked of the mbuf; with neither checksum, nothing. Refused,
    /// changing nothing, when `l2_len` or `l3_len` does not fit its field of the offload
    /// word ([`TxOffloadError::Len`]; before, only its low bits were stored, and the port
    /// filled the checksums at the wrong offsets), or when the first segment's buffer or
    /// header is not this `Mbuf`'s alone ([`TxOffloadError::Shared`]: indirect, external or
    /// referenced twice), as the port writes the checksums (and
    /// [`crate::TxQueue::tx_prepare`] the pseudo-header sums) in that buffer.
    #[inline]
    pub fn set_tx_checksum_offload(&mut self, o: TxChecksumOffload) -> Result<(), TxOffloadError> {
        let l2_l3 = tx_offload_l2_l3(o.l2_len, o.l3_len)?;
        // SAFETY: the first segment of the chain self owns.
        unsafe { sole_owner(self.raw.as_ptr()) }?;
        // SAFETY: exclusive access through &mut self, and the header is this Mbuf's alone
        // (checked above, with its buffer); ol_flags and tx_offload are plain data.
        let m = unsafe { self.raw.as_mut() };
        let mut flags = 0u64;
        if o.ipv4 || o.tcp {
            flags |= ffi::RTE_MBUF_F_TX_IPV4;
        }
        if o.ipv4 {
            flags |= ffi::RTE_MBUF_F_TX_IP_CKSUM;
        }
        if o.tcp {
            flags |= ffi::RTE_MBUF_F_TX_TCP_CKSUM;
        }
        // What an earlier call asked for goes: a TCP checksum no longer asked for would have
        // the port overwrite the one the caller computed (over a field without the
        // pseudo-header sum: a wrong checksum on the wire, RFC 9293 3.1), and a TSO flag
        // left without its segment size (the word is replaced below) makes the packet unfit.
        m.ol_flags = (m.ol_flags & !TX_SETTER_FLAGS) | flags;
        // Bit layout of the tx_offload word: l2_len:7, l3_len:9, l4_len:8, tso_segsz:16.
        m.__bindgen_anon_3.tx_offload = l2_l3;
        Ok(())
    }
}

impl Drop for Mbuf {
    fn drop(&mut self) {
        // SAFETY: self owns the chain; rte_pktmbuf_free frees every segment once.
        unsafe { ffi::wc_pktmbuf_free(self.raw.as_ptr()) }
    }
}

#[cfg(test)]
mod tests {
    //! Shared mbufs reach safe code only from a driver; these tests make them the way DPDK
    //! does (clones, a raised reference count, an external buffer) and check that
    //! [`Mbuf::data_mut`] and [`Mbuf::append`] refuse to write under another holder.
    use std::sync::atomic::AtomicBool;

    use super::*;
    use crate::{EalBuilder, PortConfig, RingPortPair};

    static EXT_FREED: AtomicBool = AtomicBool::new(false);

    /// Offloads whose lengths fit the word: a refusal of them is about ownership.
    const CSUM: TxChecksumOffload = TxChecksumOffload {
        l2_len: 14,
        l3_len: 20,
        ipv4: true,
        tcp: true,
    };
    const TSO: TxTso = TxTso {
        l2_len: 14,
        l3_len: 20,
        l4_len: 20,
        segsz: 1000,
    };

    extern "C" fn ext_free(_addr: *mut std::ffi::c_void, _opaque: *mut std::ffi::c_void) {
        EXT_FREED.store(true, Ordering::SeqCst);
    }

    const SHARED2: MbufShared = MbufShared::Referenced { refcnt: 2 };

    /// What the header of the first segment says: data offset, lengths, segment count,
    /// offload flags and the offload word's header lengths.
    fn header(m: &Mbuf) -> (u16, usize, usize, u16, u64, (usize, usize, usize)) {
        (
            m.seg().data_off,
            m.data_len(),
            m.pkt_len(),
            m.nb_segs(),
            m.ol_flags(),
            m.tx_header_lens(),
        )
    }

    /// One `rte_mbuf` owned twice (its reference count raised, as a ring port delivers a
    /// packet its producer also sent elsewhere): every method that changes the header
    /// (`adj`, `chain` as head or tail, `set_tx_tso`, `set_tx_checksum_offload`, `append`,
    /// and `Gso::segment`, which clears the TSO flag) refuses it, changing nothing the other
    /// owner reads; once the other owner let go, each is allowed again. Called from the
    /// one test that starts the EAL.
    fn header_mutators_refuse_a_twice_owned_mbuf(pool: &Mempool) {
        let tso = TxTso {
            l2_len: 14,
            l3_len: 20,
            l4_len: 20,
            segsz: 100,
        };
        let csum = TxChecksumOffload {
            l2_len: 14,
            l3_len: 20,
            ipv4: true,
            tcp: true,
        };
        let mut frame = [0u8; 400];
        frame[14] = 0x45; // IPv4, IHL 5
        frame[23] = 6; // TCP
        frame[16..18].copy_from_slice(&386u16.to_be_bytes());
        frame[46] = 0x50; // TCP data offset 5
        let mut h = Mbuf::from_slice(pool, &frame).expect("mbuf");
        h.set_tx_tso(tso).expect("alone: allowed");
        // SAFETY: h is valid; the count goes from 1 to 2 for the second owner made next.
        unsafe { ffi::wc_mbuf_refcnt_update(h.as_raw(), 1) };
        // SAFETY: the raised count makes this a second owner; each drop releases one count.
        let mut twin = unsafe { Mbuf::from_raw(NonNull::new(h.as_raw()).expect("raw")) };
        let before = header(&h);

        assert_eq!(twin.adj(14), Err(AdjError::Shared(SHARED2)));
        assert_eq!(twin.set_tx_tso(tso), Err(TxOffloadError::Shared(SHARED2)));
        assert_eq!(
            twin.set_tx_checksum_offload(csum),
            Err(TxOffloadError::Shared(SHARED2))
        );
        assert!(twin.append(1).is_none());
        assert_eq!(twin.tailroom(), 0);
        // As the head of a chain: refused, the tail given back whole.
        let other = Mbuf::from_slice(pool, &[1u8; 10]).expect("mbuf");
        let r = twin.chain(other).expect_err("shared head");
        assert_eq!(r.reason, ChainError::HeadShared(SHARED2));
        assert!(r.to_string().contains("reference count is 2"), "{r}");
        let other = r.tail;
        assert_eq!((other.pkt_len(), other.nb_segs()), (10, 1));
        // As the tail: refused, its header untouched.
        let mut head = Mbuf::from_slice(pool, &[2u8; 10]).expect("mbuf");
        let r = head.chain(twin).expect_err("shared tail");
        assert_eq!(r.reason, ChainError::TailShared(SHARED2));
        let twin = r.tail;
        assert_eq!((head.pkt_len(), head.nb_segs()), (10, 1));
        // librte_gso would clear the TSO flag of the packet it cuts.
        let gso = crate::Gso::new(pool, 200);
        let e = gso.segment(twin).expect_err("shared");
        assert!(e.to_string().contains("shared"), "{e}");
        // Nothing the other owner reads changed (twin, consumed, released its count).
        assert_eq!(header(&h), before);
        assert_eq!(h.tx_tso_segsz(), Some(100));

        // The other owner gone: all allowed again.
        assert_eq!(
            h.adj(1000),
            Err(AdjError::TooLong {
                len: 1000,
                data_len: 400
            })
        );
        h.set_tx_checksum_offload(csum).expect("alone");
        h.adj(14).expect("alone");
        assert_eq!(h.data_len(), 386);
        head.chain(h).expect("alone");
        assert_eq!((head.pkt_len(), head.nb_segs()), (396, 2));

        // A chain whose last segment is owned twice: chain would set that segment's next
        // pointer, append its length: both refused; the first segment's own header may
        // still change.
        let tail = Mbuf::from_slice(pool, &[3u8; 10]).expect("mbuf");
        // SAFETY: tail is valid; the count goes to 2 for the second owner made next.
        unsafe { ffi::wc_mbuf_refcnt_update(tail.as_raw(), 1) };
        // SAFETY: as above.
        let tail_twin = unsafe { Mbuf::from_raw(NonNull::new(tail.as_raw()).expect("raw")) };
        let mut chain = Mbuf::from_slice(pool, &[4u8; 10]).expect("mbuf");
        // chain() refuses a shared tail (TailShared): made as a driver's chain would be.
        // SAFETY: both are valid packets; chain takes over tail_twin's reference.
        let ret = unsafe { ffi::wc_pktmbuf_chain(chain.as_raw(), tail_twin.into_raw().as_ptr()) };
        assert_eq!(ret, 0);
        let r = chain.chain(other).expect_err("shared last segment");
        assert_eq!(r.reason, ChainError::HeadShared(SHARED2));
        assert!(chain.append(1).is_none());
        assert!(chain.adj(1).is_ok());
        drop((chain, r));
        assert_eq!(tail.pkt_len(), 10);
        assert!(
            tail.seg().next.is_null(),
            "its other owner's packet ends where it did"
        );
        drop(tail);
    }

    /// A chain whose packet length claims more than its segments hold (a driver's
    /// inconsistency, which safe code cannot make): `copy_to_slice` copies and counts only
    /// the segments' octets, the count `DpdkRxToken::consume` (tcp) relies on so that an
    /// earlier frame's octets in its scratch buffer are not passed on as this frame's.
    fn copy_to_slice_counts_only_the_segments_octets(pool: &Mempool) {
        let mut m = Mbuf::from_slice(pool, &[1u8; 10]).expect("mbuf");
        m.chain(Mbuf::from_slice(pool, &[2u8; 5]).expect("mbuf"))
            .expect("chain");
        // SAFETY: m is owned here; pkt_len is plain data, set back before m is freed.
        unsafe { (*m.as_raw()).pkt_len = 100 };
        let mut out = [0xEEu8; 100];
        assert_eq!(m.copy_to_slice(&mut out), 15, "only the segments' octets");
        assert_eq!(&out[..15], &[[1u8; 10].as_slice(), &[2u8; 5]].concat()[..]);
        // SAFETY: as above.
        unsafe { (*m.as_raw()).pkt_len = 15 };
    }

    /// A driver (here a ring port's producer) that hands over a packet whose segment
    /// lengths do not hold together: a segment's data past its buffer, a packet length
    /// more or less than its segments hold, a segment count that misses a segment of the
    /// chain. `rx_burst` used to pass each on, and `data()` made a slice past the
    /// segment's buffer of the first (the SAFETY argument of `data()` took DPDK's layout
    /// for granted), and DPDK's packet copy (`rte_pcapng_copy` of a capture) takes the
    /// second's packet length for what its chain holds. Now each is freed unread and
    /// counted; a sound packet beside them arrives, and every mbuf is back in the pool.
    fn rx_burst_frees_a_driver_packet_whose_lengths_do_not_hold(eal: &crate::Eal, pool: &Mempool) {
        let RingPortPair { mut a, mut b } = RingPortPair::new(eal, "wcnet_rv", 64).expect("rings");
        for p in [&mut a, &mut b] {
            p.configure(&PortConfig::default(), pool)
                .expect("configure");
            p.start().expect("start");
        }
        let (mut atx, mut brx) = (a.tx_queue(0).expect("tx"), b.rx_queue(0).expect("rx"));
        let free0 = pool.available();
        let set = |m: &Mbuf, pkt_len: u32, data_len: u16, nb_segs: u16| {
            // SAFETY: m is owned here and not yet sent; its lengths are plain data, which
            // this driver's bug breaks (nothing reads the data before rx_burst).
            unsafe {
                let r = m.as_raw();
                (*r).pkt_len = pkt_len;
                (*r).data_len = data_len;
                (*r).nb_segs = nb_segs;
            }
        };
        // Data past the buffer: data_off (the headroom) + buf_len > buf_len.
        let past = Mbuf::from_slice(pool, &[1u8; 60]).expect("mbuf");
        let buf_len = past.seg().buf_len;
        set(&past, u32::from(buf_len), buf_len, 1);
        // A packet length past what its two segments hold (10 + 5).
        let mut long = Mbuf::from_slice(pool, &[2u8; 10]).expect("mbuf");
        long.chain(Mbuf::from_slice(pool, &[3u8; 5]).expect("mbuf"))
            .expect("chain");
        set(&long, 100, 10, 2);
        // A first segment longer than the packet.
        let short = Mbuf::from_slice(pool, &[4u8; 60]).expect("mbuf");
        set(&short, 30, 60, 1);
        // A segment count of 2 on a chain of three, the packet length that of two.
        let mut three = Mbuf::from_slice(pool, &[5u8; 10]).expect("mbuf");
        for _ in 0..2 {
            three
                .chain(Mbuf::from_slice(pool, &[6u8; 10]).expect("mbuf"))
                .expect("chain");
        }
        set(&three, 20, 10, 2);
        let sound = Mbuf::from_slice(pool, &[7u8; 3000]).expect("a chain of two");
        let mut out = vec![past, long, sound, short, three];
        assert_eq!(atx.tx_burst(&mut out), 5);
        let mut got = Vec::new();
        let n = brx.rx_burst(&mut got, 8);
        assert_eq!(
            (n, got.len()),
            (1, 1),
            "only the sound packet is handed over"
        );
        assert_eq!(brx.malformed(), 4);
        assert_eq!(got[0].pkt_len(), 3000);
        let mut back = vec![0u8; 3000];
        assert_eq!(got[0].copy_to_slice(&mut back), 3000);
        assert_eq!(back, [7u8; 3000]);
        drop(got);
        assert_eq!(pool.available(), free0, "the refused packets were freed");
    }

    /// A driver's single segment (`nb_segs` 1, its lengths sound) whose `next` is not NULL:
    /// `layout_holds` did not read a single segment's `next`, so `rx_burst` handed it over,
    /// and `append` (which DPDK's last-segment walk follows `next` for) wrote past the
    /// segment every reader of the packet sees, growing `pkt_len` over octets `data()` and
    /// `segments()` never show. Now it is freed unread and counted like any packet whose
    /// chain does not end after `nb_segs` (`rte_mbuf_check`: "bad nb_segs"), and every
    /// mbuf is back in the pool.
    fn rx_burst_frees_a_single_segment_with_a_next(eal: &crate::Eal, pool: &Mempool) {
        let RingPortPair { mut a, mut b } = RingPortPair::new(eal, "wcnet_rn", 64).expect("rings");
        for p in [&mut a, &mut b] {
            p.configure(&PortConfig::default(), pool)
                .expect("configure");
            p.start().expect("start");
        }
        let (mut atx, mut brx) = (a.tx_queue(0).expect("tx"), b.rx_queue(0).expect("rx"));
        let free0 = pool.available();
        // A chain of two whose head claims to be the whole packet, alone.
        let mut one = Mbuf::from_slice(pool, &[8u8; 10]).expect("mbuf");
        one.chain(Mbuf::from_slice(pool, &[9u8; 5]).expect("mbuf"))
            .expect("chain");
        // SAFETY: one is owned here and not yet sent; its lengths are plain data, which
        // this driver's bug breaks (nothing reads the data before rx_burst). The chain
        // stays linked, so its free still frees both segments.
        unsafe {
            let r = one.as_raw();
            (*r).pkt_len = 10;
            (*r).nb_segs = 1;
        }
        let sound = Mbuf::from_slice(pool, &[7u8; 60]).expect("mbuf");
        let mut out = vec![one, sound];
        assert_eq!(atx.tx_burst(&mut out), 2);
        let mut got = Vec::new();
        let n = brx.rx_burst(&mut got, 8);
        assert_eq!(
            brx.malformed(),
            1,
            "the single segment with a next is refused"
        );
        assert_eq!(
            (n, got.len()),
            (1, 1),
            "only the sound packet is handed over"
        );
        assert_eq!(got[0].data(), &[7u8; 60]);
        drop(got);
        assert_eq!(
            pool.available(),
            free0,
            "the refused packet was freed whole"
        );
    }

    /// The only test of this binary that starts the EAL (once per process).
    #[test]
    fn data_mut_and_append_refuse_a_buffer_the_mbuf_does_not_own_alone() {
        let eal = {
            let _held = crate::eal::tests::INIT_LOCK
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            EalBuilder::for_test("mbuf_unit", 0, 128)
                .init()
                .expect("EAL init with --no-huge --no-pci")
        };
        let pool =
            Mempool::new(&eal, "wcnet_u_pool", 511, 0, Mempool::DEFAULT_DATA_ROOM).expect("pool");
        let free0 = pool.available();

        // A fresh mbuf is its buffer's sole owner.
        let mut m = Mbuf::from_slice(&pool, &[7u8; 64]).expect("mbuf");
        let room = m.tailroom();
        assert!(room > 0);
        m.data_mut().expect("fresh mbuf")[0] = 1;
        assert_eq!(m.data()[0], 1);

        // A clone (rte_pktmbuf_clone): an indirect mbuf attached to m's buffer, which m's
        // reference count now counts. A write through either would show in the other's
        // data(): both are refused, appending too.
        // SAFETY: m is a valid packet owned here; the clone is a new packet we own.
        let clone = unsafe { ffi::rte_pktmbuf_clone(m.as_raw(), pool.as_ptr()) };
        // SAFETY: the clone is ours alone (its buffer is m's, which data_mut now refuses).
        let mut clone = unsafe { Mbuf::from_raw(NonNull::new(clone).expect("clone")) };
        assert_eq!(clone.data(), m.data(), "the clone reads m's bytes");
        assert_eq!(clone.data_mut().unwrap_err(), MbufShared::Indirect);
        assert_eq!(
            m.data_mut().unwrap_err(),
            MbufShared::Referenced { refcnt: 2 }
        );
        assert!(m.append(1).is_none() && clone.append(1).is_none());
        assert_eq!((m.tailroom(), clone.tailroom()), (0, 0));
        assert_eq!(m.pkt_len(), 64, "a refused append changes nothing");
        let text = m.data_mut().unwrap_err().to_string();
        assert!(text.contains("reference count is 2"), "{text}");
        // Nor is the clone marked for offloads, though its header is its own: the port
        // would write the checksums (rte_eth_tx_prepare the pseudo-header sums, the TSO
        // its segments' headers) into m's buffer.
        assert_eq!(
            clone.set_tx_checksum_offload(CSUM),
            Err(TxOffloadError::Shared(MbufShared::Indirect))
        );
        assert_eq!(
            clone.set_tx_tso(TSO),
            Err(TxOffloadError::Shared(MbufShared::Indirect))
        );
        assert_eq!(
            clone.ol_flags() & TX_OFFLOAD_FLAGS,
            0,
            "refused: nothing set"
        );
        // The clone gone, m owns its buffer alone again.
        drop(clone);
        assert!(m.data_mut().is_ok());
        assert_eq!(m.tailroom(), room);

        // A clone of a chain's last segment: the chain's first segment is its own, its last
        // is shared. data_mut (first segment) is allowed, append (last segment) is not.
        // (The clone is made after chaining: chain refuses a tail whose count is raised.)
        let mut chain = Mbuf::from_slice(&pool, &[9u8; 64]).expect("head");
        let tail = Mbuf::from_slice(&pool, &[8u8; 64]).expect("tail");
        let tail_seg = tail.as_raw();
        chain.chain(tail).expect("chain");
        // SAFETY: tail_seg is the last segment of chain, valid while chain lives (the clone
        // raises its count, so it outlives chain if need be); the clone is a new packet of
        // one segment we own, attached to tail_seg's buffer.
        let tail_clone = unsafe { ffi::rte_pktmbuf_clone(tail_seg, pool.as_ptr()) };
        // SAFETY: as above.
        let tail_clone = unsafe { Mbuf::from_raw(NonNull::new(tail_clone).expect("clone")) };
        assert!(chain.data_mut().is_ok());
        assert!(chain.append(1).is_none());
        assert_eq!(chain.tailroom(), 0);
        drop(tail_clone);
        assert!(chain.append(1).is_some());
        drop(chain);

        // One mbuf owned twice (its reference count raised, as for a packet sent to two
        // ports): each owner frees it once, neither may write.
        // SAFETY: m is valid; the count goes from 1 to 2 for the second owner made next.
        unsafe { ffi::wc_mbuf_refcnt_update(m.as_raw(), 1) };
        // SAFETY: the raised count makes this a second owner; each drop releases one count.
        let mut twin = unsafe { Mbuf::from_raw(NonNull::new(m.as_raw()).expect("raw")) };
        assert_eq!(
            twin.data_mut().unwrap_err(),
            MbufShared::Referenced { refcnt: 2 }
        );
        assert!(m.data_mut().is_err() && twin.append(1).is_none());
        drop(twin);
        assert!(m.data_mut().is_ok());

        header_mutators_refuse_a_twice_owned_mbuf(&pool);
        copy_to_slice_counts_only_the_segments_octets(&pool);
        rx_burst_frees_a_driver_packet_whose_lengths_do_not_hold(&eal, &pool);
        rx_burst_frees_a_single_segment_with_a_next(&eal, &pool);

        // An external buffer (rte_pktmbuf_attach_extbuf): memory the mbuf does not own.
        let ext: &'static mut [u8; 256] = Box::leak(Box::new([5u8; 256]));
        let shinfo = Box::leak(Box::new(ffi::rte_mbuf_ext_shared_info {
            free_cb: Some(ext_free),
            fcb_opaque: std::ptr::null_mut(),
            refcnt: 1,
        }));
        let e = pool.alloc().expect("mbuf");
        // SAFETY: e is a fresh direct mbuf with no data; ext and shinfo live for the
        // process, shinfo's count of 1 is e's reference, released (calling ext_free) when
        // e is freed.
        unsafe { ffi::wc_pktmbuf_attach_extbuf(e.as_raw(), ext.as_mut_ptr().cast(), 256, shinfo) };
        let mut e = e;
        assert!(e.append(16).is_none(), "no append into an external buffer");
        assert_eq!(e.tailroom(), 0);
        assert_eq!(e.data_mut().unwrap_err(), MbufShared::External);
        assert_eq!(
            e.set_tx_checksum_offload(CSUM),
            Err(TxOffloadError::Shared(MbufShared::External))
        );
        assert_eq!(
            e.set_tx_tso(TSO),
            Err(TxOffloadError::Shared(MbufShared::External))
        );
        assert_eq!(e.ol_flags() & TX_OFFLOAD_FLAGS, 0, "refused: nothing set");
        drop(e);
        assert!(
            EXT_FREED.load(Ordering::SeqCst),
            "the external buffer was released"
        );

        // Through a ring port pair: a packet built here arrives as its own; a clone sent
        // alongside its original (as a broadcast does) arrives refused.
        let RingPortPair { mut a, mut b } = RingPortPair::new(&eal, "wcnet_u", 64).expect("rings");
        for p in [&mut a, &mut b] {
            p.configure(&PortConfig::default(), &pool)
                .expect("configure");
            p.start().expect("start");
        }
        let (mut atx, mut brx) = (a.tx_queue(0).expect("tx"), b.rx_queue(0).expect("rx"));
        let own = Mbuf::from_slice(&pool, &[3u8; 60]).expect("frame");
        let shared = Mbuf::from_slice(&pool, &[4u8; 60]).expect("frame");
        // SAFETY: shared is a valid packet owned here.
        let c = unsafe { ffi::rte_pktmbuf_clone(shared.as_raw(), pool.as_ptr()) };
        // SAFETY: as above.
        let c = unsafe { Mbuf::from_raw(NonNull::new(c).expect("clone")) };
        let mut out = vec![own, shared];
        assert_eq!(atx.tx_burst(&mut out), 2);
        let mut got = Vec::new();
        brx.rx_burst(&mut got, 8);
        assert_eq!(got.len(), 2);
        assert!(
            got[0].data_mut().is_ok(),
            "a packet of ours arrives as its own"
        );
        assert_eq!(
            got[1].data_mut().unwrap_err(),
            MbufShared::Referenced { refcnt: 2 }
        );
        // The received packet whose count the clone raised: its header is not changed
        // either (adj and the offload setters would move the clone's view of it).
        assert_eq!(got[1].adj(14), Err(AdjError::Shared(SHARED2)));
        assert_eq!(
            got[1].set_tx_checksum_offload(TxChecksumOffload::default()),
            Err(TxOffloadError::Shared(SHARED2))
        );
        assert!(got[0].adj(14).is_ok(), "a packet of ours: its header too");
        drop(c);
        assert!(got[1].data_mut().is_ok());
        assert!(got[1].adj(14).is_ok());
        drop(got);

        // A packet marked for checksum offload, then cloned: the clone carries the marking
        // (rte_pktmbuf_attach copies the offload flags and word), and neither it nor the
        // original, whose count the clone raised, goes to the driver's tx_prepare or
        // tx_burst, which would write the headers into the buffer both see.
        let mut frame = [0u8; 64];
        frame[14] = 0x45; // IPv4, a 20-octet header (IHL 5)
        let mut marked = Mbuf::from_slice(&pool, &frame).expect("frame");
        marked
            .set_tx_checksum_offload(CSUM)
            .expect("its own buffer");
        assert!(marked.check_tx_offload().is_ok());
        // SAFETY: marked is a valid packet owned here; the clone is a new packet we own.
        let c = unsafe { ffi::rte_pktmbuf_clone(marked.as_raw(), pool.as_ptr()) };
        // SAFETY: as above.
        let c = unsafe { Mbuf::from_raw(NonNull::new(c).expect("clone")) };
        assert_eq!(
            c.tx_checksum_offload(),
            Some(CSUM),
            "the clone is marked too"
        );
        let why = c.check_tx_offload().unwrap_err().to_string();
        assert!(why.contains("indirect"), "{why}");
        let why = marked.check_tx_offload().unwrap_err().to_string();
        assert!(why.contains("reference count is 2"), "{why}");
        let mut out = vec![c, marked];
        assert_eq!(atx.tx_prepare(&mut out), 0, "the clone is unfit");
        assert_eq!(atx.tx_prepare(&mut out[1..]), 0, "so is its original");
        assert_eq!(atx.tx_burst(&mut out), 0, "neither is sent");
        drop(out.remove(0));
        assert!(
            out[0].check_tx_offload().is_ok(),
            "the clone gone: fit again"
        );
        assert_eq!(atx.tx_prepare(&mut out), 1);
        drop(out);
        drop((atx, brx));
        assert_eq!(pool.available(), free0 - 1, "all freed but m");
        drop(m);
        assert_eq!(pool.available(), free0, "every mbuf back in the pool");
    }
}
