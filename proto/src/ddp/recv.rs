//! DDP receive side: validation of each incoming segment (DDP-04 §7.1) into a placement
//! instruction, and the per-queue state that delivers untagged messages once and in order.
//!
//! The engine owns memory: STag lookup (protection domain, stream association, access) and
//! the posted receive buffers stay behind the [`TaggedBuffers`] and [`UntaggedBuffers`]
//! traits, so this module stays pure and does the arithmetic and the check order itself.
//!
//! ## Check order
//! 1. DV against the stream's version, per model: invalid DDP version (DDP-4.1-10).
//! 2. Shorter than the header the T bit announces (or empty): DDP local catastrophic
//!    error. No DDP code fits a header that is not there, and this is the one DDP error
//!    whose Terminate copies no DDP header, which a truncated segment does not have
//!    (RDMAP-06 Figure 10). `wire::segment` in the RDMAP layer makes the same choice.
//! 3. Tagged, non-zero length only (DDP-5.2-11): STag valid/associated/placement allowed
//!    (engine, DDP-7.1-10/11, DDP-8.2-*), TO in range (DDP-7.1-12), 64-bit TO + length does
//!    not wrap (DDP-7.1-14), TO + length in range (DDP-7.1-13). Wrap comes before the end
//!    bound because a wrapped end cannot be compared; a wrapping segment is reported as
//!    TO wrap rather than as a bounds violation.
//! 4. Untagged: QN valid (DDP-7.1-1), MSN is the expected one (DDP-7.1-5), a buffer is
//!    posted for it (DDP-7.1-2), MO inside the buffer (DDP-7.1-3), MO + length inside the
//!    buffer and below 2^32 (DDP-7.1-4, DDP-5.2-3), and on L = 1 no earlier segment of the
//!    message reached further than MO + length (DDP-4.1-6). The MSN is judged before the
//!    buffer, unlike the draft's numbering, because the buffer is found by the MSN; Linux
//!    siw checks in the same order (QN, MSN, MO, length).
//!
//! After the first error the receiver is failed: every later segment is dropped silently
//! (DDP-7.1-17) and [`DdpReceiver::handle_segment`] returns `Ok(None)` for it.
//!
//! ## Ordering reading (DDP-04 §5.3, §5.4, §7.1)
//! Over MPA/TCP segments arrive in the order they were sent. A sender posts the L = 1
//! segment of a message after all its other segments (DDP-4.1-5) and sends messages in
//! submission order (DDP-5.3-1), so on one queue every segment belongs to the message with
//! the next undelivered MSN, and the message is complete when its L = 1 segment arrives.
//! The legal MSN window of DDP-7.1-5 therefore narrows to that single MSN; any other MSN is
//! reported as "MSN range is not valid", as Linux siw does. MO, in contrast, is only
//! bounds-checked: the sender need not send segments in increasing MO order (DDP-5.3-2 is a
//! SHOULD) and placement may happen out of order or more than once (DDP-5.3-3/4); the sink
//! need not verify that every octet arrived (DDP-04 §5.2). Delivery happens exactly once,
//! in order, at the L = 1 segment (DDP-5.3-5/6, DDP-5.4-1), with the message length
//! MO + length (DDP-5.4-2). Zero-length untagged segments are checked like the others
//! although §7.1 only demands it for non-zero lengths: a zero-length message still consumes
//! an MSN and a receive buffer (RDMAP-06 §5.3), so it needs both to be delivered.

use super::QUEUE_COUNT;
use crate::error::DdpError;
use crate::wire::ddp::{DdpBuffer, DdpRepr, DdpSegment};

/// Why the engine refuses an STag (the DDP-7.1 tagged checks that need the memory tables).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaggedFault {
    /// The STag is not valid, or its buffer does not allow placement (DDP-7.1-10/11; the
    /// draft has no code of its own for the latter, WIRE-FORMATS §3.5).
    InvalidStag,
    /// The STag belongs to another protection domain or DDP stream (DDP-8.2-1/2).
    NotAssociated,
    /// The engine's own bounds verdict, for memory it cannot describe as one TO range.
    BaseOrBounds,
}

impl TaggedFault {
    /// The DDP error this fault is reported as (DDP-7.2-1).
    pub const fn ddp_error(self) -> DdpError {
        match self {
            TaggedFault::InvalidStag => DdpError::TaggedInvalidStag,
            TaggedFault::NotAssociated => DdpError::TaggedStagNotAssociated,
            TaggedFault::BaseOrBounds => DdpError::TaggedBaseOrBounds,
        }
    }
}

/// The legal TO range of a tagged buffer: `len` octets starting at TO `base`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TaggedRegion {
    /// The lowest legal TO (0 for zero-based regions, the virtual address otherwise).
    pub base: u64,
    /// The number of legal offsets.
    pub len: u64,
}

/// STag lookup, implemented by the engine over its memory region and window tables.
pub trait TaggedBuffers {
    /// The TO range of the buffer behind `stag`, if it is valid on this stream and allows
    /// placement by a segment whose RsvdULP octet (RDMAP's control octet) is `rsvd_ulp`.
    /// DDP does the bounds and wrap arithmetic on the result. Access rights as RDMAP
    /// defines them (remote write for an RDMA Write, local write for a Read Response) are
    /// RDMAP's to check and report; an engine that checks them here reports
    /// [`TaggedFault::InvalidStag`].
    fn tagged_region(&self, stag: u32, rsvd_ulp: u8) -> Result<TaggedRegion, TaggedFault>;
}

/// Receive queue lookup, implemented by the engine over its receive queues (QN 0), its
/// inbound Read/Atomic request slots (QN 1), its Terminate buffer (QN 2) and its atomic
/// response slots (QN 3).
pub trait UntaggedBuffers {
    /// Whether `qn` is a queue of this stream (DDP-7.1-1). QNs at or above
    /// [`QUEUE_COUNT`] are invalid whatever this returns.
    fn queue_valid(&self, qn: u32) -> bool;

    /// The length of the buffer posted for message `msn` on `qn`, or `None` if none is
    /// posted (DDP-7.1-2). DDP asks only for the MSN it expects next on the queue, which is
    /// the head of the engine's posted buffers on that queue; the engine consumes that
    /// buffer when [`UntaggedPlacement::message_len`] reports the message complete.
    fn buffer_len(&self, qn: u32, msn: u32) -> Option<u64>;
}

/// Where to put the payload of a valid tagged segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaggedPlacement {
    /// The octet at D+1 (RDMAP's control octet), for the ULP (DDP-4.2-3).
    pub rsvd_ulp: u8,
    /// The Data Sink buffer (DDP-4.2-7).
    pub stag: u32,
    /// The TO of the first payload octet.
    pub to: u64,
    /// The L flag: the ULP message ends with this segment.
    pub last: bool,
    /// Offset of the payload in the segment (the header length, 14).
    pub payload_offset: usize,
    /// Payload octets. For 0, STag and TO were not checked and mean nothing (DDP-5.2-11).
    pub payload_len: usize,
}

/// Where to put the payload of a valid untagged segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UntaggedPlacement {
    /// The octet at D+1 (RDMAP's control octet), for the ULP (DDP-4.3-3).
    pub rsvd_ulp: u8,
    /// RsvdULP\[8:39\] (RDMAP's Invalidate STag), from this segment (DDP-4.3-5 allows any).
    pub rsvd_ulp2: u32,
    /// Queue Number.
    pub qn: u32,
    /// Message Sequence Number.
    pub msn: u32,
    /// Message Offset of the first payload octet.
    pub mo: u32,
    /// True if this is the first segment of the message DDP has seen (not necessarily
    /// MO 0): the point to set up per-message state.
    pub first: bool,
    /// Offset of the payload in the segment (the header length, 18).
    pub payload_offset: usize,
    /// Payload octets.
    pub payload_len: usize,
    /// `Some(length)` on the L = 1 segment: the message is complete and is delivered now,
    /// exactly once and in order, with this ULP message length (MO + payload length,
    /// DDP-5.4-2). `None` on other segments.
    pub message_len: Option<u32>,
}

/// The result of validating one segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// A tagged segment (T = 1).
    Tagged(TaggedPlacement),
    /// An untagged segment (T = 0).
    Untagged(UntaggedPlacement),
}

impl Placement {
    /// Offset and length of the payload within the segment.
    pub fn payload_range(&self) -> core::ops::Range<usize> {
        let (offset, len) = match self {
            Placement::Tagged(p) => (p.payload_offset, p.payload_len),
            Placement::Untagged(p) => (p.payload_offset, p.payload_len),
        };
        offset..offset + len
    }

    /// The L flag of the segment.
    pub fn last(&self) -> bool {
        match self {
            Placement::Tagged(p) => p.last,
            Placement::Untagged(p) => p.message_len.is_some(),
        }
    }
}

/// Reassembly state of one untagged queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct QueueState {
    /// MSN of the message in progress, or of the next one if none is.
    expected_msn: u32,
    /// A segment of `expected_msn` has been placed but its L = 1 segment has not arrived.
    in_progress: bool,
    /// Highest MO + length seen in the message in progress.
    max_end: u32,
}

/// Per-stream DDP receive state: the stream's DDP version, the reassembly state of each
/// untagged queue, and whether the stream has failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DdpReceiver {
    version: u8,
    queues: [QueueState; QUEUE_COUNT],
    failed: Option<DdpError>,
}

impl DdpReceiver {
    /// A fresh stream expecting DDP version `version` on every segment (DDP-4.1-10):
    /// [`DDP_VERSION`](crate::wire::ddp::DDP_VERSION) normally, 0 if MPA negotiated the
    /// RDMAC flavour. Every queue expects MSN 1 first (DDP-4.3-8).
    pub const fn new(version: u8) -> DdpReceiver {
        DdpReceiver {
            version,
            queues: [QueueState {
                expected_msn: 1,
                in_progress: false,
                max_end: 0,
            }; QUEUE_COUNT],
            failed: None,
        }
    }

    /// The error that failed the stream, if one did.
    pub fn failed(&self) -> Option<DdpError> {
        self.failed
    }

    /// The MSN the next segment on `qn` must carry, or `None` for a QN outside
    /// `0..QUEUE_COUNT`.
    pub fn expected_msn(&self, qn: u32) -> Option<u32> {
        self.queues.get(qn as usize).map(|q| q.expected_msn)
    }

    /// Whether a message on `qn` is in progress: a segment of it was accepted and its
    /// L = 1 segment has not arrived. A stream that ends there (the LLP closed) ends inside
    /// a message (DDP-6.2.2-1). `false` for a QN outside `0..QUEUE_COUNT`.
    pub fn in_progress(&self, qn: u32) -> bool {
        self.queues.get(qn as usize).is_some_and(|q| q.in_progress)
    }

    /// Sets the MSN expected next on `qn` (for tests and for resuming a stream; a normal
    /// stream never needs it). Fails for a QN outside `0..QUEUE_COUNT` or while a message
    /// is in progress on the queue.
    pub fn set_expected_msn(&mut self, qn: u32, msn: u32) -> Result<(), DdpError> {
        match self.queues.get_mut(qn as usize) {
            Some(q) if !q.in_progress => {
                q.expected_msn = msn;
                Ok(())
            }
            Some(_) => Err(DdpError::UntaggedMsnOutOfRange),
            None => Err(DdpError::UntaggedInvalidQn),
        }
    }

    /// Validates one DDP segment (a whole MPA ULPDU) in the order of DDP-04 §7.1 and
    /// returns where its payload goes.
    ///
    /// `Ok(None)`: the stream already failed and the segment is dropped silently
    /// (DDP-7.1-17). `Err(e)`: place nothing of this segment, report `e` to the ULP, which
    /// sends a Terminate (DDP-7.1-15/16); the stream is failed from now on. On success the
    /// queue state has advanced: the caller must place the payload and, when
    /// `message_len` is `Some`, deliver the message.
    pub fn handle_segment<T: TaggedBuffers + ?Sized, U: UntaggedBuffers + ?Sized>(
        &mut self,
        segment: &[u8],
        tagged: &T,
        untagged: &U,
    ) -> Result<Option<Placement>, DdpError> {
        if self.failed.is_some() {
            return Ok(None);
        }
        // DDP-4.1-10: one version per stream, judged before anything else.
        if let Some(&control) = segment.first() {
            let first = [control];
            let view = DdpSegment::new_unchecked(&first[..]);
            if view.version() != self.version {
                return Err(self.fail(if view.tagged() {
                    DdpError::TaggedInvalidVersion
                } else {
                    DdpError::UntaggedInvalidVersion
                }));
            }
        }
        let parsed = DdpSegment::new_checked(segment)
            .and_then(|view| Ok((DdpRepr::parse(&view)?, view.payload_len())));
        match parsed {
            Ok((repr, payload_len)) => self.handle_header(&repr, payload_len, tagged, untagged),
            Err(_) => Err(self.fail(DdpError::LocalCatastrophic)),
        }
    }

    /// Like [`handle_segment`](Self::handle_segment), for a caller that has parsed the
    /// DDP header already (e.g. the RDMAP segment decoder): `payload_len` is the segment
    /// length minus the DDP header length (any RDMAP header counts as DDP payload). The
    /// placement's `payload_offset` is the DDP header length.
    pub fn handle_header<T: TaggedBuffers + ?Sized, U: UntaggedBuffers + ?Sized>(
        &mut self,
        repr: &DdpRepr,
        payload_len: usize,
        tagged: &T,
        untagged: &U,
    ) -> Result<Option<Placement>, DdpError> {
        if self.failed.is_some() {
            return Ok(None);
        }
        match self.validate(repr, payload_len, tagged, untagged) {
            Ok(p) => Ok(Some(p)),
            Err(e) => Err(self.fail(e)),
        }
    }

    fn fail(&mut self, e: DdpError) -> DdpError {
        self.failed = Some(e);
        e
    }

    fn validate<T: TaggedBuffers + ?Sized, U: UntaggedBuffers + ?Sized>(
        &mut self,
        repr: &DdpRepr,
        payload_len: usize,
        tagged: &T,
        untagged: &U,
    ) -> Result<Placement, DdpError> {
        if repr.version != self.version {
            return Err(if repr.buffer.is_tagged() {
                DdpError::TaggedInvalidVersion
            } else {
                DdpError::UntaggedInvalidVersion
            });
        }
        let payload_offset = repr.header_len();
        match repr.buffer {
            DdpBuffer::Tagged { stag, to } => {
                if payload_len > 0 {
                    check_tagged(tagged, stag, to, repr.rsvd_ulp, payload_len as u64)?;
                }
                Ok(Placement::Tagged(TaggedPlacement {
                    rsvd_ulp: repr.rsvd_ulp,
                    stag,
                    to,
                    last: repr.last,
                    payload_offset,
                    payload_len,
                }))
            }
            DdpBuffer::Untagged {
                rsvd_ulp2,
                qn,
                msn,
                mo,
            } => {
                // DDP-7.1-1: the QN is one this stream has.
                let qi = qn as usize;
                if qi >= QUEUE_COUNT || !untagged.queue_valid(qn) {
                    return Err(DdpError::UntaggedInvalidQn);
                }
                let q = self.queues[qi];
                // DDP-7.1-5: with an in-order LLP the legal window is the expected MSN.
                if msn != q.expected_msn {
                    return Err(DdpError::UntaggedMsnOutOfRange);
                }
                // DDP-7.1-2: a buffer is posted for this message.
                let buf_len = untagged
                    .buffer_len(qn, msn)
                    .ok_or(DdpError::UntaggedNoBuffer)?;
                let len = payload_len as u64;
                let mo64 = u64::from(mo);
                // DDP-7.1-3: MO is an offset inside the buffer. A zero-length segment may
                // sit just past the end: it places nothing and ends the message there.
                if (len > 0 && mo64 >= buf_len) || mo64 > buf_len {
                    return Err(DdpError::UntaggedInvalidMo);
                }
                // DDP-7.1-4 (and DDP-5.2-3: the message length stays below 2^32).
                let end = mo64 + len;
                if end > buf_len || end > u64::from(u32::MAX) {
                    return Err(DdpError::UntaggedTooLong);
                }
                let end = end as u32;
                let max_end = if q.in_progress {
                    q.max_end.max(end)
                } else {
                    end
                };
                let message_len = if repr.last {
                    // DDP-4.1-6: the L = 1 segment carries the highest MO, so the message
                    // ends at its end; an earlier segment placed beyond it was invalid.
                    if max_end > end {
                        return Err(DdpError::UntaggedInvalidMo);
                    }
                    Some(end)
                } else {
                    None
                };
                let qs = &mut self.queues[qi];
                if message_len.is_some() {
                    // DDP-5.3-5/6, DDP-5.4-1: delivered now, once; the next MSN is due.
                    qs.expected_msn = msn.wrapping_add(1);
                    qs.in_progress = false;
                    qs.max_end = 0;
                } else {
                    qs.in_progress = true;
                    qs.max_end = max_end;
                }
                Ok(Placement::Untagged(UntaggedPlacement {
                    rsvd_ulp: repr.rsvd_ulp,
                    rsvd_ulp2,
                    qn,
                    msn,
                    mo,
                    first: !q.in_progress,
                    payload_offset,
                    payload_len,
                    message_len,
                }))
            }
        }
    }
}

/// The DDP-7.1 tagged checks for a non-zero length segment.
fn check_tagged<T: TaggedBuffers + ?Sized>(
    tagged: &T,
    stag: u32,
    to: u64,
    rsvd_ulp: u8,
    len: u64,
) -> Result<(), DdpError> {
    // DDP-7.1-10/11, DDP-8.2-1/2: the engine knows STags, domains and streams.
    let region = tagged
        .tagged_region(stag, rsvd_ulp)
        .map_err(TaggedFault::ddp_error)?;
    // DDP-7.1-12: TO inside [base, base + len).
    let rel = to.wrapping_sub(region.base);
    if to < region.base || rel >= region.len {
        return Err(DdpError::TaggedBaseOrBounds);
    }
    // DDP-7.1-14: the 64-bit sum of TO and length must not wrap. Checked before the end
    // bound because the end cannot be computed when it wraps.
    if crate::rdmap::to_range_wraps(to, len) {
        return Err(DdpError::TaggedToWrap);
    }
    // DDP-7.1-13: TO + length inside the range (rel < region.len, so no overflow).
    if len > region.len - rel {
        return Err(DdpError::TaggedBaseOrBounds);
    }
    Ok(())
}
