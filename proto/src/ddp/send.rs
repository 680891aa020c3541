//! DDP send side: per-stream MSN counters and segmentation of one message to MULPDU.
//!
//! A DDP message is the ULP header bytes (RDMAP's Read Request, Terminate, Atomic or
//! Immediate Data header; possibly none) followed by `payload_len` octets of ULP data that
//! the engine keeps elsewhere (registered memory). MO and TO count from the first octet of
//! the ULP header, because to DDP the header is just the start of the ULP message.
//!
//! For each segment, [`Segmenter::next_segment`] writes the DDP header plus the ULP header
//! octets that fall into the segment into a small caller buffer and returns the range of the
//! data that follows them in the segment. The engine hands both slices to the MPA framer,
//! which gathers them without an intermediate copy. Nothing here allocates.

use super::QUEUE_COUNT;
use crate::wire::ddp::{
    DdpBuffer, DdpRepr, DdpSegment, DDP_VERSION, MAX_HEADER_LEN, TAGGED_HEADER_LEN,
    UNTAGGED_HEADER_LEN,
};

/// The longest ULP header a [`Segmenter`] carries. RDMAP's longest are the Terminate header
/// with both copied headers and the Atomic Request header, 52 octets each (WIRE-FORMATS
/// §4.4); a few more octets leave room without making the segmenter much larger.
pub const MAX_ULP_HEADER_LEN: usize = 64;

/// The caller buffer size that is always enough for [`Segmenter::next_segment`]: the longest
/// DDP header plus the longest ULP header.
pub const MAX_SEGMENT_HEADER_LEN: usize = MAX_HEADER_LEN + MAX_ULP_HEADER_LEN;

/// Why a message cannot be segmented. These are local errors (the caller's arguments),
/// never protocol errors: nothing has been sent and no MSN has been consumed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum SegmentationError {
    /// MULPDU leaves no room for a single payload octet after the DDP header, so no message
    /// with data could ever be sent (DDP-5.2-2).
    #[error("MULPDU leaves no room for payload")]
    MulpduTooSmall,
    /// The ULP message (ULP header plus payload) is 2^32 octets or longer (DDP-5.2-3).
    #[error("ULP message is 2^32 octets or longer")]
    MessageTooLong,
    /// The QN is not one of the queues this sender keeps MSNs for (`0..QUEUE_COUNT`).
    #[error("queue number out of range")]
    InvalidQn,
    /// The ULP header is longer than [`MAX_ULP_HEADER_LEN`].
    #[error("ULP header too long")]
    UlpHeaderTooLong,
    /// Initial TO plus message length does not fit in 64 bits: the Data Sink would reject
    /// the message with "TO wrap" (DDP-7.1-14), so it is refused here.
    #[error("initial TO plus message length wraps 64 bits")]
    ToWrap,
    /// The caller buffer is shorter than [`Segmenter::header_buf_len`].
    #[error("header buffer too small")]
    BufferTooSmall,
}

/// Per-stream DDP send state: the next MSN of each untagged queue.
///
/// MSNs start at 1 (DDP-4.3-8), grow by one per message on the queue (DDP-4.3-7) and wrap
/// from 0xFFFFFFFF to 0 (DDP-4.3-9). Tagged messages need no state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DdpSender {
    next_msn: [u32; QUEUE_COUNT],
}

impl Default for DdpSender {
    fn default() -> Self {
        Self::new()
    }
}

impl DdpSender {
    /// A fresh stream: every queue's first message gets MSN 1.
    pub const fn new() -> DdpSender {
        DdpSender {
            next_msn: [1; QUEUE_COUNT],
        }
    }

    /// The MSN the next message on `qn` will carry, or `None` for a QN outside
    /// `0..QUEUE_COUNT`.
    pub fn next_msn(&self, qn: u32) -> Option<u32> {
        self.next_msn.get(qn as usize).copied()
    }

    /// Sets the next MSN of `qn` (for tests and for resuming a stream; a normal stream never
    /// needs it). Returns [`SegmentationError::InvalidQn`] for a QN outside `0..QUEUE_COUNT`.
    pub fn set_next_msn(&mut self, qn: u32, msn: u32) -> Result<(), SegmentationError> {
        let slot = self
            .next_msn
            .get_mut(qn as usize)
            .ok_or(SegmentationError::InvalidQn)?;
        *slot = msn;
        Ok(())
    }

    /// Starts an untagged message on queue `qn` and consumes its MSN (DDP-4.3-7..9).
    ///
    /// `rsvd_ulp` is the octet at D+1 (RDMAP's control octet) and `rsvd_ulp2` is
    /// RsvdULP\[8:39\] (RDMAP's Invalidate STag, or 0); DDP copies both into every segment
    /// unchanged (DDP-4.3-2, DDP-4.3-4). The message is `ulp_header` followed by
    /// `payload_len` octets of data. On error no MSN is consumed.
    pub fn untagged(
        &mut self,
        rsvd_ulp: u8,
        rsvd_ulp2: u32,
        qn: u32,
        ulp_header: &[u8],
        payload_len: u32,
        mulpdu: usize,
    ) -> Result<Segmenter, SegmentationError> {
        let msn = self.next_msn(qn).ok_or(SegmentationError::InvalidQn)?;
        let segmenter = Segmenter::new(
            rsvd_ulp,
            DdpBuffer::Untagged {
                rsvd_ulp2,
                qn,
                msn,
                mo: 0,
            },
            ulp_header,
            payload_len,
            mulpdu,
        )?;
        self.next_msn[qn as usize] = msn.wrapping_add(1);
        Ok(segmenter)
    }

    /// Starts a tagged message into the Data Sink's buffer `stag` at initial TO `to`
    /// (DDP-5.2-7). Tagged messages use no per-stream state; this is a method only so that
    /// both models start the same way. See [`untagged`](Self::untagged) for the arguments.
    pub fn tagged(
        &self,
        rsvd_ulp: u8,
        stag: u32,
        to: u64,
        ulp_header: &[u8],
        payload_len: u32,
        mulpdu: usize,
    ) -> Result<Segmenter, SegmentationError> {
        Segmenter::new(
            rsvd_ulp,
            DdpBuffer::Tagged { stag, to },
            ulp_header,
            payload_len,
            mulpdu,
        )
    }

    /// The header of a tagged message without a ULP header that goes out whole in one
    /// segment: writes it into the front of `header` and returns its length
    /// ([`TAGGED_HEADER_LEN`]). The same octets as the one segment of
    /// [`tagged`](Self::tagged)`(rsvd_ulp, stag, to, &[], payload_len, mulpdu)` (its L set,
    /// DDP-4.1-3; TO the initial TO, DDP-5.2-7), for a sender that needs no segmenter state
    /// (a small RDMA Write: no copy of a [`Segmenter`] in and out of the queue pair).
    /// `None` when the message does not fit in one segment of MULPDU (DDP-5.2-2), when
    /// `header` is too short, or when the segmenter would refuse it (TO + length wraps,
    /// DDP-7.1-14): the caller then uses [`tagged`](Self::tagged), which says why.
    #[inline(always)]
    pub fn tagged_whole(
        &self,
        rsvd_ulp: u8,
        stag: u32,
        to: u64,
        payload_len: u32,
        mulpdu: usize,
        header: &mut [u8],
    ) -> Option<usize> {
        // As the segmenter: a MULPDU with no room past the header is refused (even for an
        // empty message), then the message must fit in one segment.
        check_mulpdu(TAGGED_HEADER_LEN, mulpdu).ok()?;
        if payload_len as usize > mulpdu - TAGGED_HEADER_LEN
            || crate::rdmap::to_range_wraps(to, u64::from(payload_len))
        {
            return None;
        }
        let head = header.get_mut(..TAGGED_HEADER_LEN)?;
        DdpRepr {
            last: true,
            version: DDP_VERSION,
            rsvd_ulp,
            buffer: DdpBuffer::Tagged { stag, to },
        }
        .emit(&mut DdpSegment::new_unchecked(head));
        Some(TAGGED_HEADER_LEN)
    }
}

/// One segment produced by [`Segmenter::next_segment`].
///
/// The DDP segment (the MPA ULPDU) is the first `header_len` octets of the caller buffer
/// followed by `payload_len` octets of the message data starting at `payload_offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxSegment {
    /// The DDP header of this segment (MO or TO already advanced, L set on the last).
    pub repr: DdpRepr,
    /// Octets written into the caller buffer: the DDP header plus the ULP header octets
    /// that fall into this segment.
    pub header_len: usize,
    /// Offset of this segment's data in the message data (not counting the ULP header).
    pub payload_offset: u32,
    /// Octets of message data in this segment.
    pub payload_len: u32,
}

impl TxSegment {
    /// The segment length the MPA framer puts in ULPDU_Length: header octets plus data.
    pub fn ulpdu_len(&self) -> usize {
        self.header_len + self.payload_len as usize
    }

    /// True if this is the last segment of the message (L = 1).
    pub fn last(&self) -> bool {
        self.repr.last
    }
}

/// A cursor over the segments of one DDP message (DDP-5.2-1).
///
/// It owns everything it needs (a copy of the ULP header, the counters), so the engine can
/// keep it in the queue pair's send state while the TCP transmit buffer is full and resume
/// later. Each segment is at most MULPDU octets (DDP-5.2-2), every message octet goes out
/// exactly once in increasing offset order (DDP-5.2-4, DDP-5.3-2), L is set on the last
/// segment only (DDP-4.1-3, DDP-4.1-4), which also carries the highest MO/TO (DDP-4.1-6),
/// and a zero-length message is exactly one header-only segment (DDP-5.2-9).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segmenter {
    rsvd_ulp: u8,
    buffer: DdpBuffer,
    ulp_header: [u8; MAX_ULP_HEADER_LEN],
    ulp_header_len: u8,
    message_len: u32,
    /// Offset in the message of the next octet to send.
    offset: u32,
    mulpdu: usize,
    done: bool,
}

impl Segmenter {
    fn new(
        rsvd_ulp: u8,
        buffer: DdpBuffer,
        ulp_header: &[u8],
        payload_len: u32,
        mulpdu: usize,
    ) -> Result<Segmenter, SegmentationError> {
        if ulp_header.len() > MAX_ULP_HEADER_LEN {
            return Err(SegmentationError::UlpHeaderTooLong);
        }
        check_mulpdu(buffer.header_len(), mulpdu)?;
        // DDP-5.2-3: the ULP message is shorter than 2^32 octets.
        let message_len = u32::try_from(ulp_header.len() as u64 + u64::from(payload_len))
            .map_err(|_| SegmentationError::MessageTooLong)?;
        if let DdpBuffer::Tagged { to, .. } = buffer {
            // The last octet sits at to + message_len - 1; refuse what the sink would
            // report as TO wrap (the 64-bit sum of TO and length must not wrap, DDP-7.1-14).
            if crate::rdmap::to_range_wraps(to, u64::from(message_len)) {
                return Err(SegmentationError::ToWrap);
            }
        }
        let mut header = [0u8; MAX_ULP_HEADER_LEN];
        header[..ulp_header.len()].copy_from_slice(ulp_header);
        Ok(Segmenter {
            rsvd_ulp,
            buffer,
            ulp_header: header,
            ulp_header_len: ulp_header.len() as u8,
            message_len,
            offset: 0,
            mulpdu,
            done: false,
        })
    }

    /// Changes MULPDU for the segments not yet produced (the LLP may change it at any time,
    /// DDP-3-1; segments already produced are not re-cut, DDP-3-2).
    pub fn set_mulpdu(&mut self, mulpdu: usize) -> Result<(), SegmentationError> {
        check_mulpdu(self.buffer.header_len(), mulpdu)?;
        self.mulpdu = mulpdu;
        Ok(())
    }

    /// The caller buffer length [`next_segment`](Self::next_segment) needs: the DDP header
    /// plus the whole ULP header. [`MAX_SEGMENT_HEADER_LEN`] is always enough.
    pub fn header_buf_len(&self) -> usize {
        self.buffer.header_len() + usize::from(self.ulp_header_len)
    }

    /// The ULP message length: ULP header plus data.
    pub fn message_len(&self) -> u32 {
        self.message_len
    }

    /// Message octets not yet put into a segment.
    pub fn remaining(&self) -> u32 {
        self.message_len - self.offset
    }

    /// True once the last segment has been produced.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// The ULPDU length of the next segment, or `None` when done. Lets the engine check for
    /// transmit space before it commits to the segment.
    pub fn next_ulpdu_len(&self) -> Option<usize> {
        if self.done {
            return None;
        }
        Some(self.buffer.header_len() + self.chunk_len() as usize)
    }

    /// Message octets the next segment carries.
    #[inline]
    fn chunk_len(&self) -> u32 {
        let room = self.mulpdu - self.buffer.header_len();
        // No more than `remaining()`, so it fits.
        (self.remaining() as usize).min(room) as u32
    }

    /// Produces the next segment: writes its DDP header and the ULP header octets it
    /// carries into `header_buf` and returns where its data comes from. Returns `Ok(None)`
    /// once the message is done, and [`SegmentationError::BufferTooSmall`] (without advancing) if
    /// `header_buf` is shorter than [`header_buf_len`](Self::header_buf_len).
    // Inlined into the engine's transmit loop (once per FPDU): the call and the matching of
    // its `Result<Option<_>>` cost a third of what it does (~26 instructions a 64 B Write).
    #[inline(always)]
    pub fn next_segment(
        &mut self,
        header_buf: &mut [u8],
    ) -> Result<Option<TxSegment>, SegmentationError> {
        if self.done {
            return Ok(None);
        }
        if header_buf.len() < self.header_buf_len() {
            return Err(SegmentationError::BufferTooSmall);
        }
        let hlen = u32::from(self.ulp_header_len);
        if self.offset < hlen {
            return Ok(Some(self.segment_with_ulp_header(header_buf)));
        }
        // Past the ULP header, as every segment of a message without one (Writes, Sends,
        // Read Responses): all of the segment's message octets are data.
        let (start, end) = self.next_range();
        let repr = self.emit_ddp_header(start, end, header_buf);
        Ok(Some(TxSegment {
            repr,
            header_len: repr.header_len(),
            payload_offset: start - hlen,
            payload_len: end - start,
        }))
    }

    /// [`next_segment`](Self::next_segment) for a segment that starts inside the ULP header
    /// (only the first segment of a message with one, in practice): the part of the
    /// segment that lies inside the ULP header goes into `header_buf` after the DDP header,
    /// the rest is message data. Out of line, so that the data segments do not pay for
    /// the copy.
    #[inline(never)]
    fn segment_with_ulp_header(&mut self, header_buf: &mut [u8]) -> TxSegment {
        let (start, end) = self.next_range();
        let repr = self.emit_ddp_header(start, end, header_buf);
        let ddp_len = repr.header_len();
        let hlen = u32::from(self.ulp_header_len);
        let ulp_from = start.min(hlen) as usize;
        let ulp_to = end.min(hlen) as usize;
        let ulp_part = &self.ulp_header[ulp_from..ulp_to];
        header_buf[ddp_len..ddp_len + ulp_part.len()].copy_from_slice(ulp_part);
        let payload_offset = start.max(hlen) - hlen;
        let payload_len = end.max(hlen) - hlen - payload_offset;
        TxSegment {
            repr,
            header_len: ddp_len + ulp_part.len(),
            payload_offset,
            payload_len,
        }
    }

    /// The message offsets `[start, end)` the next segment carries; advances past them,
    /// and marks the segmenter done if they end the message.
    #[inline(always)]
    fn next_range(&mut self) -> (u32, u32) {
        let start = self.offset;
        let end = start + self.chunk_len();
        self.offset = end;
        self.done = end == self.message_len;
        (start, end)
    }

    /// Writes the DDP header of the segment `[start, end)` into the front of `header_buf`
    /// (which [`next_segment`](Self::next_segment) checked) and returns it. L is set on
    /// the last segment only (DDP-4.1-3, DDP-4.1-4).
    #[inline(always)]
    fn emit_ddp_header(&self, start: u32, end: u32, header_buf: &mut [u8]) -> DdpRepr {
        let repr = |buffer| DdpRepr {
            last: end == self.message_len,
            version: DDP_VERSION,
            rsvd_ulp: self.rsvd_ulp,
            buffer,
        };
        // Each arm cuts the header to its model's fixed length, which spares `emit` the
        // checks of a length it cannot know.
        let (repr, head) = match self.buffer {
            // DDP-5.2-8: TO of a segment = initial TO + offset of its first octet. The
            // constructor ruled out wrapping for every offset up to the message length.
            DdpBuffer::Tagged { stag, to } => {
                let repr = repr(DdpBuffer::Tagged {
                    stag,
                    to: to.wrapping_add(u64::from(start)),
                });
                (repr, &mut header_buf[..TAGGED_HEADER_LEN])
            }
            // DDP-5.2-6, DDP-4.3-11: MO = offset of the segment's first octet (0 first).
            DdpBuffer::Untagged {
                rsvd_ulp2, qn, msn, ..
            } => {
                let repr = repr(DdpBuffer::Untagged {
                    rsvd_ulp2,
                    qn,
                    msn,
                    mo: start,
                });
                (repr, &mut header_buf[..UNTAGGED_HEADER_LEN])
            }
        };
        repr.emit(&mut DdpSegment::new_unchecked(head));
        repr
    }
}

fn check_mulpdu(header_len: usize, mulpdu: usize) -> Result<(), SegmentationError> {
    if mulpdu <= header_len {
        Err(SegmentationError::MulpduTooSmall)
    } else {
        Ok(())
    }
}
