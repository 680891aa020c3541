//! Whole-ULPDU decoding: one DDP segment carrying an RDMAP message, as the MPA deframer
//! yields it (RDMAP-06 §4, §11.1; RFC 7306 Appendix A; WIRE-FORMATS §2 and §4.4).
//!
//! [`Segment::parse`] classifies every FPDU for the engine's receive path and the capture
//! decoder: the DDP header ([`crate::wire::ddp`]), the RDMAP control octet, the opcode's RDMAP
//! header and the ULP payload. [`SegmentRepr::emit`] is the encode side: it writes the header
//! octets of a segment in front of a payload the caller places.
//!
//! Parsing applies the checks that need nothing but the segment's own bytes, in the order
//! the specifications and Linux siw (`siw_get_hdr`) apply them; each failure is a
//! [`SegmentError`] whose [`SegmentError::protocol_error`] is the Terminate to send:
//!
//! 1. DDP version (DV) not 01b: DDP tagged or untagged "invalid DDP version" by the T bit
//!    (DDP-7.2, RDMAP-7.2-1). An empty ULPDU fails check 2 instead.
//! 2. Shorter than the DDP header the T bit announces: DDP local catastrophic error (no DDP
//!    code fits; the segment cannot even be addressed).
//! 3. RDMAP version (RV) not 01b: 0x0/0x2/0x05 (RDMAP-7.2-3, EXT-8.2-3).
//! 4. Opcode 0xC-0xF: 0x0/0x2/0x06 (RDMAP-7.2-2, EXT-8.2-2).
//! 5. Opcode and T bit disagree (a tagged Send, an untagged Write): 0x0/0x2/0x06, the opcode
//!    is not valid for the buffer model (RDMAP-4.1-4, RDMAP-7.2-2).
//! 6. Untagged QN not the opcode's queue: DDP 0x1/0x2/0x01 "invalid QN", as siw reports a
//!    Send on a queue other than 0 (RDMAP-4.1-6, RDMAP-5.3-6, EXT-5.2-2).
//! 7. The RDMAP header is shorter than the opcode needs (28 for a Read Request, 4 for a
//!    Terminate, 8/52/12 for the RFC 7306 messages), a Terminate's D part is cut short, or a
//!    message without ULP payload carries octets after its header (Immediate Data must be
//!    exactly 8 octets, EXT-6.3-7): 0x0/0x2/0x07 "catastrophic error, localized to the RDMAP
//!    stream". No code is specified for a malformed RDMAP header; 0x07 is the one RFC 7306
//!    uses for its own malformed-request case (EXT-8.2-5). A Terminate is the exception to
//!    the no-trailing-octets rule: senders that zero-fill it are tolerated (WIRE-FORMATS
//!    §4.6.7 item 1), and the trailing octets are kept as its `payload`.
//!
//! Checks that need connection state (MSN windows, STags, IRD, whether RFC 7306 was agreed)
//! belong to [`crate::ddp`] and [`crate::rdmap`]. Check 7 is RDMAP's judgement of a message
//! DDP has to validate first (RDMAP-7.2-6, EXT-8.2-1): a receiver that also finds a DDP fault
//! (QN, MSN, buffer, MO) in the same segment reports DDP's, as the engine does.

use crate::error::{DdpError, ProtocolError, RdmapError};
use crate::wire::ddp::{DdpBuffer, DdpRepr, DdpSegment, DDP_VERSION};
use crate::wire::rdmap::{
    AtomicRequest, AtomicRequestRepr, AtomicResponse, AtomicResponseRepr, Control, ImmediateData,
    ImmediateDataRepr, Opcode, ReadRequest, ReadRequestRepr, Terminate, TerminateRepr,
    RDMAP_VERSION,
};
use crate::wire::{Error, Result};

/// The T bit of the DDP control octet (DDP-04 §4.1).
const DDP_T_FLAG: u8 = 0x80;
/// The DV field of the DDP control octet (DDP-04 §4.1).
const DDP_DV_MASK: u8 = 0x03;

/// The RDMAP header that follows the DDP header, by opcode (RDMAP-4.2-1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RdmapHeader {
    /// Write, Read Response and the Send types have no RDMAP header.
    None,
    /// RDMA Read Request (28 octets).
    ReadRequest(ReadRequestRepr),
    /// Terminate (4 to 52 octets).
    Terminate(TerminateRepr),
    /// Atomic Request (52 octets).
    AtomicRequest(AtomicRequestRepr),
    /// Atomic Response (12 octets).
    AtomicResponse(AtomicResponseRepr),
    /// Immediate Data or Immediate Data with SE (8 octets).
    ImmediateData(ImmediateDataRepr),
}

impl RdmapHeader {
    /// The number of octets this header occupies after the DDP header.
    pub fn buffer_len(&self) -> usize {
        match self {
            RdmapHeader::None => 0,
            RdmapHeader::ReadRequest(h) => h.buffer_len(),
            RdmapHeader::Terminate(h) => h.buffer_len(),
            RdmapHeader::AtomicRequest(h) => h.buffer_len(),
            RdmapHeader::AtomicResponse(h) => h.buffer_len(),
            RdmapHeader::ImmediateData(h) => h.buffer_len(),
        }
    }

    /// True if this is the kind of header `opcode` carries.
    pub fn matches(&self, opcode: Opcode) -> bool {
        matches!(
            (self, opcode),
            (
                RdmapHeader::None,
                Opcode::Write
                    | Opcode::ReadResponse
                    | Opcode::Send
                    | Opcode::SendInvalidate
                    | Opcode::SendSe
                    | Opcode::SendSeInvalidate
            ) | (RdmapHeader::ReadRequest(_), Opcode::ReadRequest)
                | (RdmapHeader::Terminate(_), Opcode::Terminate)
                | (RdmapHeader::AtomicRequest(_), Opcode::AtomicRequest)
                | (RdmapHeader::AtomicResponse(_), Opcode::AtomicResponse)
                | (
                    RdmapHeader::ImmediateData(_),
                    Opcode::ImmediateData | Opcode::ImmediateDataSe
                )
        )
    }

    /// Writes the header into the start of `buf` and returns its length; fails with
    /// [`Error::Truncated`] if `buf` is too short. For the send path, which hands the RDMAP
    /// header octets to the DDP segmenter (`crate::ddp::DdpSender`).
    pub fn emit_into(&self, buf: &mut [u8]) -> Result<usize> {
        let len = self.buffer_len();
        let head = buf.get_mut(..len).ok_or(Error::Truncated)?;
        self.emit(head);
        Ok(len)
    }

    fn emit(&self, buf: &mut [u8]) {
        match self {
            RdmapHeader::None => {}
            RdmapHeader::ReadRequest(h) => h.emit(&mut ReadRequest::new_unchecked(buf)),
            RdmapHeader::Terminate(h) => h.emit(&mut Terminate::new_unchecked(buf)),
            RdmapHeader::AtomicRequest(h) => h.emit(&mut AtomicRequest::new_unchecked(buf)),
            RdmapHeader::AtomicResponse(h) => h.emit(&mut AtomicResponse::new_unchecked(buf)),
            RdmapHeader::ImmediateData(h) => h.emit(&mut ImmediateData::new_unchecked(buf)),
        }
    }
}

/// Why a ULPDU is not a well-formed RDMAP segment; see the module documentation for the
/// order of the checks and the Terminate each one maps to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum SegmentError {
    /// The DDP version is not 01b; `tagged` is the segment's T bit.
    #[error("DDP version is not 1 ({pe})", pe = self.protocol_error())]
    DdpVersion {
        /// The T bit of the offending segment.
        tagged: bool,
    },
    /// The segment is shorter than the DDP header its T bit announces.
    #[error("segment shorter than its DDP header ({pe})", pe = self.protocol_error())]
    DdpTruncated,
    /// The RDMAP version is not 01b.
    #[error("RDMAP version is not 1 ({pe})", pe = self.protocol_error())]
    RdmapVersion,
    /// The opcode nibble is unassigned (0xC-0xE) or experimental (0xF).
    #[error("undefined RDMAP opcode {op:#x} ({pe})", op = .0, pe = self.protocol_error())]
    UnknownOpcode(u8),
    /// The opcode is tagged but T = 0, or untagged but T = 1.
    #[error("{op} with the wrong DDP buffer model ({pe})", op = .0, pe = self.protocol_error())]
    BufferModel(Opcode),
    /// The untagged QN is not the one the opcode uses.
    #[error("{opcode} on QN {qn} ({pe})", pe = self.protocol_error())]
    QueueNumber {
        /// The opcode.
        opcode: Opcode,
        /// The QN the segment carries.
        qn: u32,
    },
    /// The RDMAP header is shorter than the opcode needs (or a Terminate's D part is cut).
    #[error("{op} header truncated ({pe})", op = .0, pe = self.protocol_error())]
    HeaderTruncated(Opcode),
    /// A message without ULP payload carries octets after its header (Immediate Data not
    /// exactly 8 octets, a Read Request with data, ...).
    #[error("{op} with octets after its header ({pe})", op = .0, pe = self.protocol_error())]
    UnexpectedPayload(Opcode),
}

impl SegmentError {
    /// The error to report to the peer in a Terminate.
    pub const fn protocol_error(self) -> ProtocolError {
        match self {
            SegmentError::DdpVersion { tagged: true } => {
                ProtocolError::Ddp(DdpError::TaggedInvalidVersion)
            }
            SegmentError::DdpVersion { tagged: false } => {
                ProtocolError::Ddp(DdpError::UntaggedInvalidVersion)
            }
            SegmentError::DdpTruncated => ProtocolError::Ddp(DdpError::LocalCatastrophic),
            SegmentError::RdmapVersion => ProtocolError::Rdmap(RdmapError::InvalidVersion),
            SegmentError::UnknownOpcode(_) | SegmentError::BufferModel(_) => {
                ProtocolError::Rdmap(RdmapError::UnexpectedOpcode)
            }
            SegmentError::QueueNumber { .. } => ProtocolError::Ddp(DdpError::UntaggedInvalidQn),
            SegmentError::HeaderTruncated(_) | SegmentError::UnexpectedPayload(_) => {
                ProtocolError::Rdmap(RdmapError::CatastrophicStream)
            }
        }
    }
}

/// The header fields of an RDMAP segment: DDP header, opcode and RDMAP header.
///
/// The DDP and RDMAP versions are not fields: parsing accepts only 01b and emitting writes
/// 01b. The reserved bits of both control octets are ignored on receive and sent as zero
/// (DDP-4.1-8, RDMAP-4.1-8), so `emit` after `parse` reproduces the segment except for
/// them. For untagged segments the `RsvdULP[8:39]` field (`DdpBuffer::Untagged::rsvd_ulp2`)
/// holds the Invalidate STag of the invalidating Sends and is kept as received for every
/// other opcode, where it is ignored (RDMAP-4.1-9, EXT-4.1-3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SegmentRepr {
    /// The DDP L flag: the last segment of the message.
    pub last: bool,
    /// Buffer model and addressing (STag/TO, or QN/MSN/MO and `RsvdULP[8:39]`).
    pub buffer: DdpBuffer,
    /// The RDMAP opcode.
    pub opcode: Opcode,
    /// The opcode's RDMAP header.
    pub header: RdmapHeader,
}

impl SegmentRepr {
    /// The DDP header of this segment, with the RDMAP control octet (RV = 01b, reserved
    /// bits zero) in RsvdULP.
    pub fn ddp(&self) -> DdpRepr {
        DdpRepr {
            last: self.last,
            version: DDP_VERSION,
            rsvd_ulp: self.control().0,
            buffer: self.buffer,
        }
    }

    /// The RDMAP control octet this segment goes out with.
    pub fn control(&self) -> Control {
        Control::new(self.opcode)
    }

    /// The Invalidate STag of a Send with (SE and) Invalidate, `None` for other opcodes.
    pub fn invalidate_stag(&self) -> Option<u32> {
        match (self.opcode.is_invalidate(), self.buffer) {
            (true, DdpBuffer::Untagged { rsvd_ulp2, .. }) => Some(rsvd_ulp2),
            _ => None,
        }
    }

    /// The DDP header length plus the RDMAP header length: where the payload starts.
    pub fn header_len(&self) -> usize {
        self.buffer.header_len() + self.header.buffer_len()
    }

    /// Checks that the fields describe a segment [`Segment::parse`] would accept: the buffer
    /// model and QN fit the opcode and the header is the opcode's kind.
    pub fn check(&self) -> Result<()> {
        let model_ok = self.opcode.is_tagged() == self.buffer.is_tagged();
        let qn_ok = match self.buffer {
            DdpBuffer::Untagged { qn, .. } => self.opcode.qn() == Some(qn),
            DdpBuffer::Tagged { .. } => true,
        };
        if model_ok && qn_ok && self.header.matches(self.opcode) {
            Ok(())
        } else {
            Err(Error::Malformed)
        }
    }

    /// Writes the DDP and RDMAP headers into the start of `buf` and returns their length
    /// ([`SegmentRepr::header_len`]); the payload, if any, goes right after. Fails with
    /// [`Error::Truncated`] if `buf` is too short and with [`Error::Malformed`] if
    /// [`SegmentRepr::check`] fails.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        self.check()?;
        let len = self.header_len();
        let head = buf.get_mut(..len).ok_or(Error::Truncated)?;
        let ddp = self.ddp();
        let ddp_len = ddp.header_len();
        ddp.emit(&mut DdpSegment::new_unchecked(&mut head[..ddp_len]));
        self.header.emit(&mut head[ddp_len..]);
        Ok(len)
    }
}

/// The Terminate header at the front of `rest` and its length, `None` if it is cut short.
/// Out of line: a Terminate comes once per connection at most, and its parser, inlined,
/// would cost the other RDMAP headers registers.
#[inline(never)]
fn parse_terminate(rest: &[u8]) -> Option<(RdmapHeader, usize)> {
    let view = Terminate::new_checked(rest).ok()?;
    let h = TerminateRepr::parse(&view).ok()?;
    Some((RdmapHeader::Terminate(h), h.buffer_len()))
}

/// One decoded RDMAP segment: the header fields and the ULP payload.
///
/// For a Terminate, `payload` holds any octets after the Terminate header (zero fill from
/// senders that send the fixed-size layout); for the other messages without ULP payload it
/// is always empty.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Segment<'a> {
    /// DDP header, opcode and RDMAP header.
    pub repr: SegmentRepr,
    /// The octets after the headers.
    pub payload: &'a [u8],
}

impl<'a> Segment<'a> {
    /// Decodes a whole ULPDU (the DDP segment, without MPA length, pad and CRC). Never
    /// panics; see the module documentation for the checks and their order.
    // Inlined into the engine's receive path (once per FPDU): returned by value, the
    // decoded segment was copied out of the result once more (~26 instructions a 64 B Write).
    #[inline(always)]
    pub fn parse(ulpdu: &'a [u8]) -> core::result::Result<Segment<'a>, SegmentError> {
        // 1. DDP version, judged on the first octet alone so that even a truncated segment
        // with a foreign version is reported as such (siw checks DV first, too).
        let ctrl = *ulpdu.first().ok_or(SegmentError::DdpTruncated)?;
        let tagged = ctrl & DDP_T_FLAG != 0;
        if ctrl & DDP_DV_MASK != DDP_VERSION {
            return Err(SegmentError::DdpVersion { tagged });
        }
        // 2. The whole DDP header. Checks 3-6 read its octets through this view; its fields
        // are decoded only once they passed, below.
        let seg = DdpSegment::new_checked(ulpdu).map_err(|_| SegmentError::DdpTruncated)?;
        // 3-4. RDMAP version and opcode.
        let control = Control(seg.rsvd_ulp());
        if control.rv() != RDMAP_VERSION {
            return Err(SegmentError::RdmapVersion);
        }
        let opcode = control
            .opcode()
            .ok_or(SegmentError::UnknownOpcode(control.opcode_raw()))?;
        // 5-6. Buffer model and queue number.
        if opcode.is_tagged() != tagged {
            return Err(SegmentError::BufferModel(opcode));
        }
        if let Some(qn) = seg.qn() {
            if opcode.qn() != Some(qn) {
                return Err(SegmentError::QueueNumber { opcode, qn });
            }
        }
        // 7. The RDMAP header and what follows it. Write, Read Response and the Sends (the
        // messages with ULP payload) have no RDMAP header: everything after the DDP header
        // is payload, and there is nothing more to check.
        if !opcode.carries_payload() {
            return Self::parse_rdmap_header(ulpdu, opcode);
        }
        // Check 2 passed, so this never fails.
        let (ddp, payload) = DdpRepr::split(ulpdu).ok_or(SegmentError::DdpTruncated)?;
        Ok(Segment {
            repr: SegmentRepr {
                last: ddp.last,
                buffer: ddp.buffer,
                opcode,
                header: RdmapHeader::None,
            },
            payload,
        })
    }

    /// Check 7 for the messages that carry an RDMAP header (Read Request, Terminate and the
    /// RFC 7306 messages), once [`Segment::parse`] found checks 1-6 passed for `ulpdu` and
    /// its `opcode`. It splits the DDP header off again rather than being handed it, so that
    /// `parse` decodes that header only where it builds its result, and keeps the
    /// header-less messages (Writes, Read Responses, Sends: the data path) free of the
    /// registers and copies these larger headers need.
    #[inline(never)]
    fn parse_rdmap_header(
        ulpdu: &'a [u8],
        opcode: Opcode,
    ) -> core::result::Result<Segment<'a>, SegmentError> {
        // Check 2 passed in `parse`, so this never fails.
        let (ddp, rest) = DdpRepr::split(ulpdu).ok_or(SegmentError::DdpTruncated)?;
        let truncated = SegmentError::HeaderTruncated(opcode);
        let (header, used) = match opcode {
            Opcode::ReadRequest => {
                let h = ReadRequestRepr::parse_bytes(rest).map_err(|_| truncated)?;
                (RdmapHeader::ReadRequest(h), h.buffer_len())
            }
            Opcode::Terminate => parse_terminate(rest).ok_or(truncated)?,
            Opcode::AtomicRequest => {
                let h = AtomicRequestRepr::parse_bytes(rest).map_err(|_| truncated)?;
                (RdmapHeader::AtomicRequest(h), h.buffer_len())
            }
            Opcode::AtomicResponse => {
                let h = AtomicResponseRepr::parse_bytes(rest).map_err(|_| truncated)?;
                (RdmapHeader::AtomicResponse(h), h.buffer_len())
            }
            Opcode::ImmediateData | Opcode::ImmediateDataSe => {
                let h = ImmediateDataRepr::parse_bytes(rest).map_err(|_| truncated)?;
                (RdmapHeader::ImmediateData(h), h.buffer_len())
            }
            _ => (RdmapHeader::None, 0),
        };
        // `used` never exceeds `rest.len()`: every parse above checked its length.
        let payload = rest.get(used..).unwrap_or(&[]);
        if !opcode.carries_payload() && opcode != Opcode::Terminate && !payload.is_empty() {
            return Err(SegmentError::UnexpectedPayload(opcode));
        }
        Ok(Segment {
            repr: SegmentRepr {
                last: ddp.last,
                buffer: ddp.buffer,
                opcode,
                header,
            },
            payload,
        })
    }

    /// The whole segment length: headers plus payload (the MPA ULPDU_Length).
    pub fn buffer_len(&self) -> usize {
        self.repr.header_len() + self.payload.len()
    }

    /// Writes headers and payload into the start of `buf` and returns the length written
    /// ([`Segment::buffer_len`]). Fails as [`SegmentRepr::emit`] does.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize> {
        let total = self.buffer_len();
        if buf.len() < total {
            return Err(Error::Truncated);
        }
        let at = self.repr.emit(buf)?;
        buf[at..total].copy_from_slice(self.payload);
        Ok(total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        s.split_whitespace()
            .map(|b| u8::from_str_radix(b, 16).unwrap())
            .collect()
    }

    /// WIRE-FORMATS §6.4: the zero-length Read Request RTR (RDMAP-5.2.1-11) decodes and
    /// re-encodes byte for byte.
    #[test]
    fn rtr_read_request() {
        let b = hex("41 41 00 00 00 00 00 00 00 01 00 00 00 01 00 00 00 00 \
                     00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00 00");
        assert_eq!(b.len(), 46);
        let seg = Segment::parse(&b).unwrap();
        assert_eq!(seg.repr.opcode, Opcode::ReadRequest);
        assert_eq!(
            seg.repr.header,
            RdmapHeader::ReadRequest(ReadRequestRepr::default())
        );
        assert!(seg.payload.is_empty());
        let mut out = [0u8; 64];
        assert_eq!(seg.emit(&mut out), Ok(46));
        assert_eq!(&out[..46], &b[..]);
    }

    /// `Segment::parse` as it was before its fast path for the messages without an RDMAP
    /// header (one function, every field decoded before the checks): the reference the
    /// fast path must agree with, result and error alike.
    fn reference_parse(ulpdu: &[u8]) -> core::result::Result<Segment<'_>, SegmentError> {
        let ctrl = *ulpdu.first().ok_or(SegmentError::DdpTruncated)?;
        let tagged = ctrl & DDP_T_FLAG != 0;
        if ctrl & DDP_DV_MASK != DDP_VERSION {
            return Err(SegmentError::DdpVersion { tagged });
        }
        let seg = DdpSegment::new_checked(ulpdu).map_err(|_| SegmentError::DdpTruncated)?;
        let ddp = DdpRepr::parse(&seg).map_err(|_| SegmentError::DdpTruncated)?;
        let control = Control(ddp.rsvd_ulp);
        if control.rv() != RDMAP_VERSION {
            return Err(SegmentError::RdmapVersion);
        }
        let opcode = control
            .opcode()
            .ok_or(SegmentError::UnknownOpcode(control.opcode_raw()))?;
        if opcode.is_tagged() != ddp.buffer.is_tagged() {
            return Err(SegmentError::BufferModel(opcode));
        }
        if let DdpBuffer::Untagged { qn, .. } = ddp.buffer {
            if opcode.qn() != Some(qn) {
                return Err(SegmentError::QueueNumber { opcode, qn });
            }
        }
        let rest = ulpdu.get(ddp.header_len()..).unwrap_or(&[]);
        let truncated = SegmentError::HeaderTruncated(opcode);
        let (header, used) = match opcode {
            Opcode::ReadRequest => {
                let h = ReadRequestRepr::parse_bytes(rest).map_err(|_| truncated)?;
                (RdmapHeader::ReadRequest(h), h.buffer_len())
            }
            Opcode::Terminate => {
                let view = Terminate::new_checked(rest).map_err(|_| truncated)?;
                let h = TerminateRepr::parse(&view).map_err(|_| truncated)?;
                (RdmapHeader::Terminate(h), h.buffer_len())
            }
            Opcode::AtomicRequest => {
                let h = AtomicRequestRepr::parse_bytes(rest).map_err(|_| truncated)?;
                (RdmapHeader::AtomicRequest(h), h.buffer_len())
            }
            Opcode::AtomicResponse => {
                let h = AtomicResponseRepr::parse_bytes(rest).map_err(|_| truncated)?;
                (RdmapHeader::AtomicResponse(h), h.buffer_len())
            }
            Opcode::ImmediateData | Opcode::ImmediateDataSe => {
                let h = ImmediateDataRepr::parse_bytes(rest).map_err(|_| truncated)?;
                (RdmapHeader::ImmediateData(h), h.buffer_len())
            }
            _ => (RdmapHeader::None, 0),
        };
        let payload = rest.get(used..).unwrap_or(&[]);
        if !opcode.carries_payload() && opcode != Opcode::Terminate && !payload.is_empty() {
            return Err(SegmentError::UnexpectedPayload(opcode));
        }
        Ok(Segment {
            repr: SegmentRepr {
                last: ddp.last,
                buffer: ddp.buffer,
                opcode,
                header,
            },
            payload,
        })
    }

    /// Segments that get past the early checks often: DV and RV are forced to 1 and the QN
    /// to a small value half of the time each, the rest is random (any opcode, T bit and
    /// length, so every check and every RDMAP header kind is reached).
    fn arb_ulpdu() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        (
            any::<u8>(),
            any::<bool>(),
            any::<u8>(),
            any::<bool>(),
            prop::option::of(0u8..5),
            prop::collection::vec(any::<u8>(), 0..96),
        )
            .prop_map(|(ctrl, dv1, rdmap, rv1, qn, mut b)| {
                if let Some(first) = b.first_mut() {
                    *first = if dv1 {
                        (ctrl & !DDP_DV_MASK) | DDP_VERSION
                    } else {
                        ctrl
                    };
                }
                if let Some(second) = b.get_mut(1) {
                    *second = if rv1 { (rdmap & 0x3F) | 0x40 } else { rdmap };
                }
                if let (Some(qn), Some(field)) = (qn, b.get_mut(6..10)) {
                    field.copy_from_slice(&u32::from(qn).to_be_bytes());
                }
                b
            })
    }

    proptest::proptest! {
        /// `Segment::parse` decides every input as the reference does: the same segment or
        /// the same error (and never panics).
        #[test]
        fn parse_agrees_with_the_reference(b in arb_ulpdu()) {
            proptest::prop_assert_eq!(Segment::parse(&b), reference_parse(&b));
        }
    }

    /// The same, exhaustively over the two control octets for a few lengths (every DV, T
    /// bit, RV and opcode; every early error).
    #[test]
    fn parse_agrees_with_the_reference_on_every_control_octet() {
        for len in [0usize, 1, 2, 13, 14, 17, 18, 22, 26, 30, 46, 70, 80] {
            let mut b: Vec<u8> = (0..len).map(|i| (i * 37 % 251) as u8).collect();
            for ctrl in 0..=255u8 {
                for rdmap in 0..=255u8 {
                    if let Some(first) = b.first_mut() {
                        *first = ctrl;
                    }
                    if let Some(second) = b.get_mut(1) {
                        *second = rdmap;
                    }
                    for qn in [0u32, 1, 2, 3, 7] {
                        if let Some(field) = b.get_mut(6..10) {
                            field.copy_from_slice(&qn.to_be_bytes());
                        }
                        assert_eq!(Segment::parse(&b), reference_parse(&b), "{b:02x?}");
                    }
                }
            }
        }
    }
}
