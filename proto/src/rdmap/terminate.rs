//! Building the Terminate for a [`ProtocolError`] and decoding a received one (RDMAP-06
//! §4.8, §5.4, §7.1; RFC 7306 §8.1; WIRE-FORMATS §4.6).
//!
//! ## What a Terminate we send carries
//!
//! It is a complete untagged segment on QN 2 with MSN 1 and MO 0, L = 1, and `RsvdULP[8:39]`
//! zero, as Linux siw sends it (RDMAP-5.4-1, RDMAP-5.4-2, RDMAP-4.1-9; only one Terminate
//! per stream, so its MSN is always 1). The MPA framer adds length, pad and CRC. Its header
//! is variable-length: parts that are absent are left out and their flag is clear
//! (WIRE-FORMATS §4.6.7 item 1, siw and Chelsio).
//!
//! Which parts are copied follows RDMAP-06 Figure 10 through
//! [`ProtocolError::terminate_headers`] (RDMAP-4.8-4..6, RDMAP-7.1-2..4, EXT-8.1-1, EXT-8.1-2),
//! with these decisions:
//!
//! - **No copied header for an invalid DDP version, an invalid RDMAP version or an
//!   unexpected opcode**, because the layout of the offending segment is then unknown; siw
//!   does the same (`siw_send_terminate`, WIRE-FORMATS §4.6.7 item 4). Not for an RFC 7306
//!   message DDP delivered, whose layout is known: [`terminate_header_delivered`] copies
//!   its DDP header for every RDMAP error (EXT-8.1-2). Nor for a Read Response that
//!   decodes whole and is unexpected (it answers no outstanding Read): an error on an
//!   incoming Read Response copies its DDP header (RDMAP-7.1-3), on every stream.
//! - **No copied header without an offending segment**: errors while building an outgoing
//!   message, local catastrophic and LLP errors carry only the code (RDMAP-7.1-2; the draft
//!   says "set to zero", which with the variable-length layout means left out and D = 0).
//! - **D and M together**: whenever the DDP header is copied the DDP Segment Length is
//!   present and valid, so M = D (RDMAP-4.8-8, RDMAP-4.8-9; siw does the same).
//! - **DDP Segment Length = the offending segment's payload length**: its ULPDU_Length minus
//!   the DDP header and the opcode's RDMAP header (0 for a Read Request). This is what siw
//!   sends (`siw_send_terminate` subtracts `iwarp_pktinfo[op].hdr_len - MPA_HDR_SIZE`), and
//!   we match siw on the wire. The draft's wording ("the length handed up by the DDP layer",
//!   §4.8; "ULP PDU Length", §7.1) also admits the whole segment length; that reading was not
//!   checked against RFC 5040 (WIRE-FORMATS §4.6.7 item 3, §8.1 item 9). If the opcode is
//!   unknown only the DDP header is subtracted; the result saturates at 0 and at 0xFFFF.
//! - **The copied DDP header is the offending one, verbatim**: 14 or 18 octets by its T bit.
//! - **R and the RDMA header only for a Read Request**: for remote protection errors the
//!   Read Request header is appended with the progress update of §4.8 (both TOs advance by
//!   the octets already sent, the size shrinks). Figure 10 also lists Send with Invalidate
//!   under remote protection, but such a message has no RDMA header, and RDMAP-4.8-11 says
//!   the header MUST be present whenever R = 1; so we leave R clear there. Linux siw sets R
//!   without a header in that case; our parser tolerates it ([`crate::wire::rdmap::Terminate`]).
//!   RFC 7306 messages never get an RDMA header (EXT-8.1-2).

use crate::error::{ProtocolError, RdmapError, TerminateCode, TerminateHeaders};
use crate::wire::ddp::{DdpBuffer, DdpRepr, DdpSegment};
use crate::wire::rdmap::{
    qn, Control, CopiedDdpHeader, Opcode, ReadRequestRepr, Terminate, TerminateRepr, RDMAP_VERSION,
    READ_REQUEST_LEN, TERMINATE_CONTROL_LEN, TERMINATE_MAX_LEN,
};
use crate::wire::segment::{RdmapHeader, Segment, SegmentRepr};
use crate::wire::Result;

/// The largest Terminate segment we emit: 18-octet DDP header plus the 52-octet maximum
/// Terminate header (70 octets; 76 as an FPDU without markers).
pub const TERMINATE_SEGMENT_MAX_LEN: usize = 18 + TERMINATE_MAX_LEN;

/// The inbound segment that caused the error, for the copied headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Offending<'a> {
    /// The whole offending ULPDU (the DDP segment as the deframer yielded it).
    pub ulpdu: &'a [u8],
    /// For an error on a Read Request found while its Read Response was already going out:
    /// the octets sent so far (RDMAP-06 §4.8 progress update). 0 otherwise.
    pub read_progress: u32,
}

impl<'a> Offending<'a> {
    /// An offending segment with no Read Response progress.
    pub const fn new(ulpdu: &'a [u8]) -> Offending<'a> {
        Offending {
            ulpdu,
            read_progress: 0,
        }
    }
}

/// The opcode of a segment, if its RDMAP control octet is valid.
fn offending_opcode(ctrl: Control) -> Option<Opcode> {
    if ctrl.rv() == RDMAP_VERSION {
        ctrl.opcode()
    } else {
        None
    }
}

/// The Terminate header reporting `error`, copying from `offending` what the module
/// documentation says. Never fails: parts that cannot be copied (a segment shorter than its
/// DDP header, a Read Request shorter than its RDMA header) are left out.
pub fn terminate_header(error: ProtocolError, offending: Option<&Offending<'_>>) -> TerminateRepr {
    terminate_header_as(error, headers_wanted(error, offending), offending)
}

/// The parts Figure 10 has a Terminate for `error` copy from `offending`:
/// [`ProtocolError::terminate_headers`], except that an unexpected opcode on a Read Response
/// that decodes whole (one that answers no outstanding Read, RDMAP-5.2.2-4) copies the DDP
/// header. The message is of a known layout and DDP delivered it, so RDMAP-7.1-3 (an error
/// on an incoming Read Response: the DDP header and segment length) and Figure 10 (remote
/// operation error: "yes, if possible") apply; the "no header" rule is for an opcode whose
/// layout is unknown. A segment the decode refuses keeps the rule of its error.
fn headers_wanted(error: ProtocolError, offending: Option<&Offending<'_>>) -> TerminateHeaders {
    let mut want = error.terminate_headers();
    if error == ProtocolError::Rdmap(RdmapError::UnexpectedOpcode)
        && offending
            .and_then(|off| Segment::parse(off.ulpdu).ok())
            .is_some_and(|seg| seg.repr.opcode == Opcode::ReadResponse)
    {
        want.ddp = true;
    }
    want
}

/// [`terminate_header`] for an error RDMAP found on an incoming message that DDP had
/// delivered, on a stream that uses RFC 7306: an Atomic Request, Atomic Response or
/// Immediate Data message refused by RDMAP always copies its DDP header (RFC 7306 §8.1
/// rule 2, EXT-8.1-2), also for the errors whose Terminate otherwise copies none (an
/// unexpected opcode: an unsupported AOpCode, EXT-5.2.1-7; an Atomic Response that answers
/// nothing). Such a message was decoded whole, so the layout the "no header" rule guards
/// against not knowing is known. Never an RDMA header for them (EXT-8.1-2). Any other
/// offending message, a local catastrophic error or an invalid RDMAP version: as
/// [`terminate_header`]. Not for a stream without RFC 7306, whose receiver refuses the
/// four opcodes as an RFC 5040 receiver does (docs/decisions/0001 RDMAP item 12).
pub fn terminate_header_delivered(
    error: ProtocolError,
    offending: Option<&Offending<'_>>,
) -> TerminateRepr {
    let mut want = headers_wanted(error, offending);
    // Decoded whole: a segment the decode refuses (the buffer model or QN wrong for the
    // opcode, a header cut short or followed by octets) keeps the rule of its error.
    let extension = offending
        .and_then(|off| Segment::parse(off.ulpdu).ok())
        .is_some_and(|seg| seg.repr.opcode.is_extension());
    let remote = matches!(
        error,
        ProtocolError::Rdmap(e) if !matches!(e, RdmapError::LocalCatastrophic | RdmapError::InvalidVersion)
    );
    if extension && remote {
        want.ddp = true;
        want.rdma_if_read_request = false;
    }
    terminate_header_as(error, want, offending)
}

/// [`terminate_header`] copying the parts `want` names.
fn terminate_header_as(
    error: ProtocolError,
    want: TerminateHeaders,
    offending: Option<&Offending<'_>>,
) -> TerminateRepr {
    let mut repr = TerminateRepr {
        code: error.terminate_code(),
        m: false,
        ddp: None,
        r_bit: false,
        rdma: None,
    };
    let Some(off) = offending else {
        return repr;
    };
    if !want.ddp {
        return repr;
    }
    let Ok(copied) = CopiedDdpHeader::from_segment(off.ulpdu) else {
        return repr;
    };
    let opcode = offending_opcode(copied.rdmap_control());
    let headers = copied.as_bytes().len() + opcode.map_or(0, Opcode::min_header_len);
    let payload_len = off.ulpdu.len().saturating_sub(headers);
    repr.m = true;
    repr.ddp = Some((u16::try_from(payload_len).unwrap_or(u16::MAX), copied));
    if want.rdma_if_read_request && opcode == Some(Opcode::ReadRequest) {
        let at = copied.as_bytes().len();
        if let Some(bytes) = off.ulpdu.get(at..at + READ_REQUEST_LEN) {
            if let Ok(rr) = ReadRequestRepr::parse_bytes(bytes) {
                repr.r_bit = true;
                repr.rdma = Some(rr.progressed(off.read_progress));
            }
        }
    }
    repr
}

/// The complete Terminate segment carrying `header`: untagged, QN 2, MSN 1, MO 0, L = 1.
pub const fn terminate_segment(header: TerminateRepr) -> SegmentRepr {
    SegmentRepr {
        last: true,
        buffer: DdpBuffer::Untagged {
            rsvd_ulp2: 0,
            qn: qn::TERMINATE,
            msn: 1,
            mo: 0,
        },
        opcode: Opcode::Terminate,
        header: RdmapHeader::Terminate(header),
    }
}

/// Writes the whole Terminate ULPDU for `error` into `buf` and returns its length (22 to
/// [`TERMINATE_SEGMENT_MAX_LEN`] octets). Fails only if `buf` is too short.
pub fn emit_terminate(
    error: ProtocolError,
    offending: Option<&Offending<'_>>,
    buf: &mut [u8],
) -> Result<usize> {
    terminate_segment(terminate_header(error, offending)).emit(buf)
}

/// [`emit_terminate`] with the header [`terminate_header_delivered`] builds.
pub fn emit_terminate_delivered(
    error: ProtocolError,
    offending: Option<&Offending<'_>>,
    buf: &mut [u8],
) -> Result<usize> {
    terminate_segment(terminate_header_delivered(error, offending)).emit(buf)
}

/// A received Terminate, decoded for the local user (RDMAP-5.4-5, RDMAP-7.1-1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TerminateReport {
    /// Layer, EType and Error Code as received.
    pub code: TerminateCode,
    /// The typed error, if the code is a defined one.
    pub error: Option<ProtocolError>,
    /// The DDP Segment Length, if present and marked valid (D = 1 and M = 1).
    pub ddp_segment_len: Option<u16>,
    /// The copied DDP header of the offending segment, decoded (D = 1).
    pub ddp: Option<DdpRepr>,
    /// The offending message's opcode, if the copied header has a valid RDMAP control octet.
    pub opcode: Option<Opcode>,
    /// The copied Read Request header (R = 1 with the header present). Left out if the copied
    /// DDP header shows a message other than a Read Request, so that siw's R bit without a
    /// header followed by zero fill is not mistaken for one.
    pub read_request: Option<ReadRequestRepr>,
}

impl TerminateReport {
    /// Decodes a parsed Terminate header.
    pub fn decode(term: &TerminateRepr) -> TerminateReport {
        let (ddp_segment_len, ddp, opcode) = match term.ddp {
            Some((len, copied)) => {
                let ddp = DdpSegment::new_checked(copied.as_bytes())
                    .and_then(|seg| DdpRepr::parse(&seg))
                    .ok();
                (
                    if term.m { Some(len) } else { None },
                    ddp,
                    offending_opcode(copied.rdmap_control()),
                )
            }
            None => (None, None, None),
        };
        let read_request = match (term.rdma, opcode) {
            (Some(_), Some(op)) if op != Opcode::ReadRequest => None,
            (rr, _) => rr,
        };
        TerminateReport {
            code: term.code,
            error: term.code.decode(),
            ddp_segment_len,
            ddp,
            opcode,
            read_request,
        }
    }
}

impl TerminateReport {
    /// Decodes only the control word of a received Terminate header `header` (the octets
    /// after the Terminate's DDP header) whose HdrCt bits announce parts the segment does
    /// not hold, which [`TerminateRepr::parse`] refuses (D = 1 without the whole DDP
    /// Segment Length and copied DDP header: RDMAP-4.8-9/10 are the sender's MUSTs). Layer,
    /// EType and Error Code are still the peer's verdict, which RDMAP delivers to its ULP
    /// (RDMAP-5.4-5, RDMAP-7.1-1) rather than answering the Terminate with one of its own;
    /// the copied headers are reported absent. `None` if `header` is shorter than the
    /// control word.
    pub fn decode_control_word(header: &[u8]) -> Option<TerminateReport> {
        let word = header.get(..TERMINATE_CONTROL_LEN)?;
        // Only the control word's accessors are used, which read octets 0 to 3.
        let view = Terminate::new_unchecked(word);
        Some(TerminateReport::decode(&TerminateRepr {
            code: view.code(),
            m: view.m(),
            ddp: None,
            r_bit: view.r(),
            rdma: None,
        }))
    }
}

impl core::fmt::Display for TerminateReport {
    /// One line for logs and the capture decoder: the code with its meaning, then what the
    /// copied headers say about the offending message.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}", self.code)?;
        if let Some(op) = self.opcode {
            write!(f, "; offending {op}")?;
        }
        match self.ddp.map(|d| d.buffer) {
            Some(DdpBuffer::Tagged { stag, to }) => write!(f, " stag {stag:#x} to {to:#x}")?,
            Some(DdpBuffer::Untagged { qn, msn, mo, .. }) => {
                write!(f, " qn {qn} msn {msn} mo {mo}")?
            }
            None => {}
        }
        if let Some(len) = self.ddp_segment_len {
            write!(f, " len {len}")?;
        }
        if let Some(rr) = self.read_request {
            write!(
                f,
                "; read {} octets from {:#x}@{:#x} to {:#x}@{:#x}",
                rr.read_size, rr.src_stag, rr.src_to, rr.sink_stag, rr.sink_to
            )?;
        }
        Ok(())
    }
}
