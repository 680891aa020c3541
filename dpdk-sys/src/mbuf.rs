//! Owned packet buffers.

use std::ptr::NonNull;

use crate::{ffi, Error, Mempool};

/// The shortest IPv4 and TCP headers (RFC 791, RFC 9293).
const IPV4_HEADER_MIN: usize = 20;
const TCP_HEADER_MIN: usize = 20;

/// The transmit flags that make a driver act on the header lengths of the offload word.
const TX_OFFLOAD_FLAGS: u64 =
    ffi::RTE_MBUF_F_TX_IP_CKSUM | ffi::RTE_MBUF_F_TX_L4_MASK | ffi::RTE_MBUF_F_TX_TCP_SEG;

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

// SAFETY: an Mbuf is the unique owner of its segments; DPDK mbufs may be freed from any thread
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
    /// `raw` must be a valid packet mbuf (chain) that nothing else owns or frees.
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

    /// Bytes free after the data of the last segment.
    pub fn tailroom(&self) -> usize {
        let last = self.last_seg();
        last.buf_len as usize - last.data_off as usize - last.data_len as usize
    }

    fn last_seg(&self) -> &ffi::rte_mbuf {
        let mut m = self.seg();
        while !m.next.is_null() {
            // SAFETY: segments of a chain we own are valid mbufs.
            m = unsafe { &*m.next };
        }
        m
    }

    /// The first segment's data.
    pub fn data(&self) -> &[u8] {
        let m = self.seg();
        // SAFETY: DPDK keeps data_off + data_len <= buf_len, so buf_addr + data_off points at
        // data_len bytes inside the segment's buffer, all initialised (pool memory is mapped
        // zeroed by the kernel and only ever written with bytes). The borrow of self keeps the
        // mbuf alive, and nothing writes the bytes meanwhile: only data_mut and append do,
        // through &mut self, and no Mbuf shares its buffer with another (none is cloned; the
        // indirect segments librte_gso makes never leave Gso::segment, which only reads them).
        unsafe {
            std::slice::from_raw_parts(
                (m.buf_addr as *const u8).add(m.data_off as usize),
                m.data_len as usize,
            )
        }
    }

    /// The first segment's data, writable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in data(); &mut self gives exclusive access to the bytes, as the buffer
        // is shared with no other Mbuf.
        unsafe {
            let m = self.raw.as_mut();
            std::slice::from_raw_parts_mut(
                (m.buf_addr as *mut u8).add(m.data_off as usize),
                m.data_len as usize,
            )
        }
    }

    /// Iterates over the data of every segment.
    pub fn segments(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let mut cur: *const ffi::rte_mbuf = self.raw.as_ptr();
        std::iter::from_fn(move || {
            if cur.is_null() {
                return None;
            }
            // SAFETY: cur is a segment of the chain self owns; see data().
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
    /// small (the packet is unchanged then). The bytes are not zeroed: they hold what an
    /// earlier packet left in the buffer, so write all of them.
    pub fn append(&mut self, len: usize) -> Option<&mut [u8]> {
        let len16 = u16::try_from(len).ok()?;
        // SAFETY: self owns the chain; rte_pktmbuf_append returns NULL (changing nothing) or a
        // pointer to `len` fresh bytes at the end of the last segment.
        let p = unsafe { ffi::wc_pktmbuf_append(self.raw.as_ptr(), len16) };
        if p.is_null() {
            return None;
        }
        // SAFETY: p points at len writable bytes of the last segment's buffer, which no other
        // Mbuf shares (see data()), borrowed through &mut self. They hold whatever an earlier
        // packet left there: initialised bytes (see data()), not necessarily zero.
        Some(unsafe { std::slice::from_raw_parts_mut(p as *mut u8, len) })
    }

    /// Appends `tail` (a whole packet) as further segments. Fails, giving `tail` back, when
    /// the chain would exceed DPDK's segment limit.
    pub fn chain(&mut self, tail: Mbuf) -> Result<(), Mbuf> {
        let t = tail.raw;
        // SAFETY: both chains are owned; on success the head owns the tail's segments.
        let ret = unsafe { ffi::wc_pktmbuf_chain(self.raw.as_ptr(), t.as_ptr()) };
        if ret == 0 {
            std::mem::forget(tail);
            Ok(())
        } else {
            Err(tail)
        }
    }

    /// Removes `len` bytes from the start of the packet (they must all be in the first
    /// segment). Returns false, changing nothing, when the first segment is shorter.
    pub fn adj(&mut self, len: usize) -> bool {
        let Ok(len16) = u16::try_from(len) else {
            return false;
        };
        // SAFETY: self owns the chain; rte_pktmbuf_adj returns NULL (changing nothing) when
        // len exceeds the first segment's data, else moves its start and shortens the packet.
        let p = unsafe { ffi::wc_pktmbuf_adj(self.raw.as_ptr(), len16) };
        !p.is_null()
    }

    /// Asks the port to cut the packet into TCP segments ([`TxTso`]); the IPv4 and TCP
    /// checksums are then the port's too. Refused, changing nothing, when `l2_len` or
    /// `l3_len` does not fit its field of the offload word ([`TxOffloadLenError`]; before,
    /// only its low bits were stored, and the port wrote the headers at the wrong offsets).
    #[inline]
    pub fn set_tx_tso(&mut self, t: TxTso) -> Result<(), TxOffloadLenError> {
        let l2_l3 = tx_offload_l2_l3(t.l2_len, t.l3_len)?;
        // SAFETY: exclusive access through &mut self; ol_flags and tx_offload are plain data.
        let m = unsafe { self.raw.as_mut() };
        m.ol_flags |= ffi::RTE_MBUF_F_TX_IPV4
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
    /// and for TSO a TCP header length of at least 20 and a segment size above 0. A packet
    /// that asks for no offload is always fit. [`crate::TxQueue::tx_prepare`] and
    /// [`crate::TxQueue::tx_burst`] hand no unfit packet to the driver; this says why.
    pub fn check_tx_offload(&self) -> Result<(), Error> {
        let flags = self.ol_flags();
        if flags & TX_OFFLOAD_FLAGS == 0 {
            return Ok(());
        }
        let refuse = |why: String| Err(Error::TxOffload { why });
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

    /// Asks the port to compute checksums on transmit (see [`TxChecksumOffload`]). Refused,
    /// changing nothing, when `l2_len` or `l3_len` does not fit its field of the offload
    /// word ([`TxOffloadLenError`]; before, only its low bits were stored, and the port
    /// filled the checksums at the wrong offsets).
    #[inline]
    pub fn set_tx_checksum_offload(
        &mut self,
        o: TxChecksumOffload,
    ) -> Result<(), TxOffloadLenError> {
        let l2_l3 = tx_offload_l2_l3(o.l2_len, o.l3_len)?;
        // SAFETY: exclusive access through &mut self; tx_offload is plain data.
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
        m.ol_flags |= flags;
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
