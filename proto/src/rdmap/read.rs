//! The responder's side of an RDMA Read and the inbound request queue (RDMAP-06 §5.2, §6.1,
//! §7.2; RFC 7306 §5.2; WIRE-FORMATS §4.5).

use crate::error::RdmapError;
use crate::rdmap::{check_remote_access, Access, AccessRegion, StagFault};
use crate::wire::ddp::DdpBuffer;
use crate::wire::rdmap::{Opcode, ReadRequestRepr};
use crate::wire::segment::{RdmapHeader, SegmentRepr};

/// What the responder must send back for a valid Read Request: one Read Response, a tagged
/// message to `sink_stag`/`sink_to` of `len` octets read from `src_stag`/`src_to`
/// (RDMAP-4.4-2, RDMAP-5.2.1-10, RDMAP-5.2.2-1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReadResponsePlan {
    /// STag of the Read Response: the request's Data Sink STag, copied uninterpreted.
    pub sink_stag: u32,
    /// Tagged Offset of the Read Response's first octet: the request's Data Sink TO.
    pub sink_to: u64,
    /// The local buffer to read from.
    pub src_stag: u32,
    /// The offset in the local buffer to read from.
    pub src_to: u64,
    /// Octets to send (RDMARDSZ); 0 gives a single zero-length segment.
    pub len: u32,
}

impl ReadResponsePlan {
    /// The header of the Read Response segment carrying `payload_len` octets starting
    /// `offset` octets into the message: TO = SinkTO + offset (wrapping as the TO space
    /// does, DDP-04 §5.2), L set on the segment that reaches `len`. For a zero-length Read
    /// Response call it with `(0, 0)`.
    pub fn segment(&self, offset: u32, payload_len: u32) -> SegmentRepr {
        SegmentRepr {
            last: u64::from(offset) + u64::from(payload_len) >= u64::from(self.len),
            buffer: DdpBuffer::Tagged {
                stag: self.sink_stag,
                to: self.sink_to.wrapping_add(u64::from(offset)),
            },
            opcode: Opcode::ReadResponse,
            header: RdmapHeader::None,
        }
    }

    /// The Read Request header to copy into a Terminate if the response fails after `sent`
    /// octets went out (RDMAP-06 §4.8 progress rule; WIRE-FORMATS §4.6.1).
    pub fn terminated_header(&self, sent: u32) -> ReadRequestRepr {
        ReadRequestRepr {
            sink_stag: self.sink_stag,
            sink_to: self.sink_to,
            read_size: self.len,
            src_stag: self.src_stag,
            src_to: self.src_to,
        }
        .progressed(sent)
    }
}

/// Validates an inbound Read Request and returns what to send back (RDMAP-7.2-6..13).
///
/// `lookup` resolves the Data Source STag against this stream's STag table. With
/// RDMARDSZ = 0 it is not called: a zero-length read is answered with a zero-length Read
/// Response without validating SrcSTag/SrcTO (RDMAP-5.2.1-13, RDMAP-5.2.1-14). Otherwise
/// the source range is checked by [`check_remote_access`] for remote read, giving the
/// remote protection errors of WIRE-FORMATS §4.5 (RDMAP-5.2.1-12): invalid STag 0x00, not
/// associated 0x03, access rights 0x02, TO wrap 0x04, base or bounds 0x01.
///
/// IRD accounting is separate ([`InboundReadQueue::admit`]) because it also covers Atomic
/// Requests. The Terminate for a failure here carries the request's RDMA header
/// ([`crate::rdmap::terminate::terminate_header`]).
pub fn handle_read_request(
    req: &ReadRequestRepr,
    lookup: impl FnOnce(u32) -> Result<AccessRegion, StagFault>,
) -> Result<ReadResponsePlan, RdmapError> {
    if req.read_size != 0 {
        check_remote_access(
            lookup(req.src_stag),
            req.src_to,
            u64::from(req.read_size),
            Access::RemoteRead,
        )?;
        // The Read Response goes to SinkTO .. SinkTO + RDMARDSZ in the requester's buffer.
        // The responder does not validate the sink STag (RDMAP-5.2.1-12), but a sink range
        // whose 64-bit sum wraps can never be carried by DDP (DDP-7.1-14): answering is
        // impossible (RDMAP-5.2.1-10), so the request is refused as a remote protection
        // TO wrap, with the Read Request header copied into the Terminate. Found by the
        // `ddp_receive` fuzz target (fuzz/corpus/ddp_receive/bug-read-response-sink-to-wrap).
        if super::to_range_wraps(req.sink_to, u64::from(req.read_size)) {
            return Err(RdmapError::ToWrap);
        }
    }
    Ok(ReadResponsePlan {
        sink_stag: req.sink_stag,
        sink_to: req.sink_to,
        src_stag: req.src_stag,
        src_to: req.src_to,
        len: req.read_size,
    })
}

/// The responder's count of outstanding inbound Read and Atomic Requests against the
/// negotiated IRD (RDMAP-6.1-2, RDMAP-6.1-5, EXT-5.2-1, EXT-5.2.2-3).
///
/// A request is outstanding from its delivery until its response (the last Read Response
/// segment, or the Atomic Response) has been handed to DDP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InboundReadQueue {
    ird: u32,
    outstanding: u32,
}

impl InboundReadQueue {
    /// A queue for the negotiated IRD (the number of QN 1 buffers this side provides).
    pub const fn new(ird: u32) -> InboundReadQueue {
        InboundReadQueue {
            ird,
            outstanding: 0,
        }
    }

    /// The negotiated IRD.
    pub const fn ird(&self) -> u32 {
        self.ird
    }

    /// Requests delivered and not yet answered.
    pub const fn outstanding(&self) -> u32 {
        self.outstanding
    }

    /// Accounts one more inbound Read or Atomic Request. A request beyond the IRD means the
    /// peer broke the ORD it negotiated; it is [`RdmapError::CatastrophicStream`]
    /// (0x0/0x2/0x07), the code Linux siw sends when its inbound read queue overflows
    /// (`siw_init_rresp`). The request is not counted then.
    pub fn admit(&mut self) -> Result<(), RdmapError> {
        if self.outstanding >= self.ird {
            return Err(RdmapError::CatastrophicStream);
        }
        self.outstanding += 1;
        Ok(())
    }

    /// Releases one outstanding request once its response went to DDP. Releasing more
    /// than were admitted is a bug in the caller; the count saturates at zero.
    pub fn retire(&mut self) {
        self.outstanding = self.outstanding.saturating_sub(1);
    }
}
