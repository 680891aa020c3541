//! RDMAP wire formats: the control octet, the opcode table and the RDMAP headers that follow
//! the DDP header (RDMAP-06 §4, RFC 7306 §4-§6; WIRE-FORMATS.md §4 and §5).
//!
//! Each header comes as a zero-copy view (`ReadRequest`, `Terminate`, `AtomicRequest`,
//! `AtomicResponse`, `ImmediateData`) over bytes that start right after the DDP header (at
//! `D+18`), and as a `…Repr` that parses and emits it. Offsets inside the views are relative
//! to the start of the RDMAP header. Views only check lengths; protocol meaning (which
//! Terminate an error earns) is assigned by [`crate::wire::segment`] and [`crate::rdmap`].

use core::fmt;

use crate::error::TerminateCode;
use crate::wire::{Error, Result};

/// The RDMAP version this implementation sends and accepts: RV = 01b, the IETF version
/// (RDMAP-4.1-7, EXT-4.1-1). The RDMAC version 00b is not supported, like Linux siw
/// (`siw_qp_rx.c` rejects any RV other than 1).
pub const RDMAP_VERSION: u8 = 1;

/// Masks of the RDMAP control octet, `D+1` (RDMAP-4.1-2; WIRE-FORMATS §4.1).
pub mod control {
    /// RDMAP version (RV), bits 0-1.
    pub const RV_MASK: u8 = 0xC0;
    /// Shift of RV inside the octet.
    pub const RV_SHIFT: u32 = 6;
    /// Reserved bits 2-3: sent as zero, ignored on receive (RDMAP-4.1-8).
    pub const RSV_MASK: u8 = 0x30;
    /// Opcode, bits 4-7.
    pub const OPCODE_MASK: u8 = 0x0F;
}

/// The RDMAP control octet carried in the DDP header's first RsvdULP octet (RDMAP-4.1-1).
///
/// All three fields are kept raw so that any octet can be represented; [`Control::opcode`]
/// interprets the opcode nibble.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Control(pub u8);

impl Control {
    /// The control octet for `opcode` with RV = 01b and zero reserved bits, as we send it.
    #[inline]
    pub const fn new(opcode: Opcode) -> Control {
        Control((RDMAP_VERSION << control::RV_SHIFT) | opcode as u8)
    }

    /// The RDMAP version field (2 bits).
    #[inline]
    pub const fn rv(self) -> u8 {
        (self.0 & control::RV_MASK) >> control::RV_SHIFT
    }

    /// The two reserved bits, unshifted (ignored on receive, RDMAP-4.1-8).
    pub const fn reserved(self) -> u8 {
        self.0 & control::RSV_MASK
    }

    /// The raw opcode nibble.
    #[inline]
    pub const fn opcode_raw(self) -> u8 {
        self.0 & control::OPCODE_MASK
    }

    /// The opcode, if the nibble is one of the twelve defined ones (0x0-0xB).
    #[inline]
    pub const fn opcode(self) -> Option<Opcode> {
        Opcode::from_u8(self.opcode_raw())
    }
}

impl fmt::Debug for Control {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Control(rv={}, opcode={:#x})",
            self.rv(),
            self.opcode_raw()
        )
    }
}

/// Untagged queue numbers (RDMAP-5.2.1-5, RDMAP-5.3-6, RDMAP-5.4-2, EXT-5.2-2; WIRE-FORMATS
/// §4.3, the IANA registry of RFC 7306 §10.2).
pub mod qn {
    /// Send-type messages and Immediate Data.
    pub const SEND: u32 = 0;
    /// RDMA Read Requests and Atomic Requests.
    pub const READ_REQUEST: u32 = 1;
    /// Terminate.
    pub const TERMINATE: u32 = 2;
    /// Atomic Responses.
    pub const ATOMIC_RESPONSE: u32 = 3;
}

/// An RDMAP opcode (RDMAP-06 §4.1 Figure 4, RFC 7306 §4.1 Figure 2; WIRE-FORMATS §4.2).
///
/// Values 0xC-0xE are unassigned and 0xF is reserved for experiments; none of them is an
/// `Opcode`, and receiving one is an "unexpected opcode" error (0x0/0x2/0x06).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Opcode {
    /// 0x0 RDMA Write (tagged).
    Write = 0x0,
    /// 0x1 RDMA Read Request (untagged, QN 1, 28-octet header).
    ReadRequest = 0x1,
    /// 0x2 RDMA Read Response (tagged).
    ReadResponse = 0x2,
    /// 0x3 Send (QN 0).
    Send = 0x3,
    /// 0x4 Send with Invalidate (QN 0, Invalidate STag in the DDP header).
    SendInvalidate = 0x4,
    /// 0x5 Send with Solicited Event (QN 0).
    SendSe = 0x5,
    /// 0x6 Send with Solicited Event and Invalidate (QN 0).
    SendSeInvalidate = 0x6,
    /// 0x7 Terminate (QN 2, 4 to 52 octets of header).
    Terminate = 0x7,
    /// 0x8 Immediate Data (RFC 7306; QN 0, 8 octets).
    ImmediateData = 0x8,
    /// 0x9 Immediate Data with Solicited Event (RFC 7306; QN 0, 8 octets).
    ImmediateDataSe = 0x9,
    /// 0xA Atomic Request (RFC 7306; QN 1, 52 octets).
    AtomicRequest = 0xA,
    /// 0xB Atomic Response (RFC 7306; QN 3, 12 octets).
    AtomicResponse = 0xB,
}

impl Opcode {
    /// Every defined opcode, in numeric order.
    pub const ALL: [Opcode; 12] = [
        Opcode::Write,
        Opcode::ReadRequest,
        Opcode::ReadResponse,
        Opcode::Send,
        Opcode::SendInvalidate,
        Opcode::SendSe,
        Opcode::SendSeInvalidate,
        Opcode::Terminate,
        Opcode::ImmediateData,
        Opcode::ImmediateDataSe,
        Opcode::AtomicRequest,
        Opcode::AtomicResponse,
    ];

    /// The opcode for a nibble value, if defined.
    #[inline]
    pub const fn from_u8(value: u8) -> Option<Opcode> {
        Some(match value {
            0x0 => Opcode::Write,
            0x1 => Opcode::ReadRequest,
            0x2 => Opcode::ReadResponse,
            0x3 => Opcode::Send,
            0x4 => Opcode::SendInvalidate,
            0x5 => Opcode::SendSe,
            0x6 => Opcode::SendSeInvalidate,
            0x7 => Opcode::Terminate,
            0x8 => Opcode::ImmediateData,
            0x9 => Opcode::ImmediateDataSe,
            0xA => Opcode::AtomicRequest,
            0xB => Opcode::AtomicResponse,
            _ => return None,
        })
    }

    /// True if the message uses the tagged buffer model (T = 1): Write and Read Response
    /// (RDMAP-4.1-4, RDMAP-5.1-1, RDMAP-5.2.2-1). All other messages are untagged.
    #[inline]
    pub const fn is_tagged(self) -> bool {
        matches!(self, Opcode::Write | Opcode::ReadResponse)
    }

    /// The queue number an untagged message must carry, or `None` for tagged messages
    /// (RDMAP-4.1-6; WIRE-FORMATS §4.3).
    #[inline(always)]
    pub const fn qn(self) -> Option<u32> {
        match self {
            Opcode::Write | Opcode::ReadResponse => None,
            Opcode::Send
            | Opcode::SendInvalidate
            | Opcode::SendSe
            | Opcode::SendSeInvalidate
            | Opcode::ImmediateData
            | Opcode::ImmediateDataSe => Some(qn::SEND),
            Opcode::ReadRequest | Opcode::AtomicRequest => Some(qn::READ_REQUEST),
            Opcode::Terminate => Some(qn::TERMINATE),
            Opcode::AtomicResponse => Some(qn::ATOMIC_RESPONSE),
        }
    }

    /// The smallest RDMAP header that follows the DDP header for this opcode, in octets
    /// (RDMAP-4.2-1; WIRE-FORMATS §4.4). Only the Terminate header varies in length.
    pub const fn min_header_len(self) -> usize {
        match self {
            Opcode::ReadRequest => READ_REQUEST_LEN,
            Opcode::Terminate => TERMINATE_CONTROL_LEN,
            Opcode::ImmediateData | Opcode::ImmediateDataSe => IMMEDIATE_DATA_LEN,
            Opcode::AtomicRequest => ATOMIC_REQUEST_LEN,
            Opcode::AtomicResponse => ATOMIC_RESPONSE_LEN,
            _ => 0,
        }
    }

    /// The largest RDMAP header for this opcode, in octets: 52 for a Terminate
    /// (4 + 2 + 18 + 28), otherwise the same as [`Opcode::min_header_len`].
    pub const fn max_header_len(self) -> usize {
        match self {
            Opcode::Terminate => TERMINATE_MAX_LEN,
            _ => self.min_header_len(),
        }
    }

    /// True if the message carries ULP payload after its header: Write, Read Response and
    /// the four Send types (RDMAP-4.2-1). The other messages end with their RDMAP header.
    #[inline]
    pub const fn carries_payload(self) -> bool {
        matches!(
            self,
            Opcode::Write
                | Opcode::ReadResponse
                | Opcode::Send
                | Opcode::SendInvalidate
                | Opcode::SendSe
                | Opcode::SendSeInvalidate
        )
    }

    /// True if the message asks for a solicited event at the receiver (RDMAP-5.3-5).
    #[inline]
    pub const fn is_solicited(self) -> bool {
        matches!(
            self,
            Opcode::SendSe | Opcode::SendSeInvalidate | Opcode::ImmediateDataSe
        )
    }

    /// True if the untagged DDP header carries an STag to invalidate in `RsvdULP[8:39]`
    /// (RDMAP-4.1-3); for every other untagged message that field is sent as zero and
    /// ignored on receive (RDMAP-4.1-9, EXT-4.1-3).
    #[inline]
    pub const fn is_invalidate(self) -> bool {
        matches!(self, Opcode::SendInvalidate | Opcode::SendSeInvalidate)
    }

    /// True for the four opcodes RFC 7306 adds (0x8-0xB).
    #[inline]
    pub const fn is_extension(self) -> bool {
        self as u8 >= Opcode::ImmediateData as u8
    }

    /// The control octet we send for this opcode: RV = 01b, reserved bits zero.
    #[inline]
    pub const fn control(self) -> Control {
        Control::new(self)
    }

    /// The message name as the specifications spell it.
    pub const fn name(self) -> &'static str {
        match self {
            Opcode::Write => "RDMA Write",
            Opcode::ReadRequest => "RDMA Read Request",
            Opcode::ReadResponse => "RDMA Read Response",
            Opcode::Send => "Send",
            Opcode::SendInvalidate => "Send with Invalidate",
            Opcode::SendSe => "Send with Solicited Event",
            Opcode::SendSeInvalidate => "Send with Solicited Event and Invalidate",
            Opcode::Terminate => "Terminate",
            Opcode::ImmediateData => "Immediate Data",
            Opcode::ImmediateDataSe => "Immediate Data with Solicited Event",
            Opcode::AtomicRequest => "Atomic Request",
            Opcode::AtomicResponse => "Atomic Response",
        }
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Length of the RDMA Read Request header (RDMAP-4.4-1).
pub const READ_REQUEST_LEN: usize = 28;
/// Length of the Terminate control word, the only part of a Terminate header always present.
pub const TERMINATE_CONTROL_LEN: usize = 4;
/// Length of the largest Terminate header: control, DDP Segment Length, untagged DDP header
/// and Read Request header (4 + 2 + 18 + 28).
pub const TERMINATE_MAX_LEN: usize =
    TERMINATE_CONTROL_LEN + 2 + DDP_UNTAGGED_HEADER_LEN + READ_REQUEST_LEN;
/// Length of the Atomic Request header (RFC 7306 §5.2.1).
pub const ATOMIC_REQUEST_LEN: usize = 52;
/// Length of the Atomic Response header (RFC 7306 §5.2.2; the figure, not the "32 bytes" of
/// the text, WIRE-FORMATS §5.3).
pub const ATOMIC_RESPONSE_LEN: usize = 12;
/// Length of the Immediate Data header (EXT-6.3-5).
pub const IMMEDIATE_DATA_LEN: usize = 8;

/// Length of a tagged DDP header, as copied into a Terminate (DDP-04 §4.2).
pub const DDP_TAGGED_HEADER_LEN: usize = 14;
/// Length of an untagged DDP header, as copied into a Terminate (DDP-04 §4.3).
pub const DDP_UNTAGGED_HEADER_LEN: usize = 18;
/// The T bit of the DDP control octet; it decides the length of a copied DDP header.
const DDP_TAGGED_FLAG: u8 = 0x80;

#[inline]
fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline]
fn be64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(a)
}

// ---------------------------------------------------------------------------------------------
// RDMA Read Request
// ---------------------------------------------------------------------------------------------

mod rr_field {
    use core::ops::Range;
    pub const SINK_STAG: Range<usize> = 0..4;
    pub const SINK_TO: Range<usize> = 4..12;
    pub const READ_SIZE: Range<usize> = 12..16;
    pub const SRC_STAG: Range<usize> = 16..20;
    pub const SRC_TO: Range<usize> = 20..28;
}

/// A view of an RDMA Read Request header (28 octets at `D+18`; RDMAP-06 §4.4, WIRE-FORMATS
/// §4.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadRequest<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ReadRequest<T> {
    /// Wraps a buffer without checking its length; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> ReadRequest<T> {
        ReadRequest { buffer }
    }

    /// Wraps a buffer after [`ReadRequest::check_len`]; no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<ReadRequest<T>> {
        let v = Self::new_unchecked(buffer);
        v.check_len()?;
        Ok(v)
    }

    /// Fails with [`Error::Truncated`] if the buffer is shorter than 28 octets. Longer buffers
    /// are accepted; the bytes after the header are not looked at.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < READ_REQUEST_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Data Sink STag: copied verbatim into the Read Response (RDMAP-4.4-2).
    pub fn sink_stag(&self) -> u32 {
        be32(self.buffer.as_ref(), rr_field::SINK_STAG.start)
    }

    /// Data Sink Tagged Offset: the TO of the Read Response.
    pub fn sink_to(&self) -> u64 {
        be64(self.buffer.as_ref(), rr_field::SINK_TO.start)
    }

    /// RDMA Read Message Size (RDMARDSZ) in octets.
    pub fn read_size(&self) -> u32 {
        be32(self.buffer.as_ref(), rr_field::READ_SIZE.start)
    }

    /// Data Source STag.
    pub fn src_stag(&self) -> u32 {
        be32(self.buffer.as_ref(), rr_field::SRC_STAG.start)
    }

    /// Data Source Tagged Offset.
    pub fn src_to(&self) -> u64 {
        be64(self.buffer.as_ref(), rr_field::SRC_TO.start)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ReadRequest<T> {
    /// Sets the Data Sink STag.
    pub fn set_sink_stag(&mut self, value: u32) {
        self.buffer.as_mut()[rr_field::SINK_STAG].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the Data Sink Tagged Offset.
    pub fn set_sink_to(&mut self, value: u64) {
        self.buffer.as_mut()[rr_field::SINK_TO].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets RDMARDSZ.
    pub fn set_read_size(&mut self, value: u32) {
        self.buffer.as_mut()[rr_field::READ_SIZE].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the Data Source STag.
    pub fn set_src_stag(&mut self, value: u32) {
        self.buffer.as_mut()[rr_field::SRC_STAG].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the Data Source Tagged Offset.
    pub fn set_src_to(&mut self, value: u64) {
        self.buffer.as_mut()[rr_field::SRC_TO].copy_from_slice(&value.to_be_bytes());
    }
}

/// The fields of an RDMA Read Request header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ReadRequestRepr {
    /// Data Sink STag (where the Read Response goes).
    pub sink_stag: u32,
    /// Data Sink Tagged Offset.
    pub sink_to: u64,
    /// RDMARDSZ: octets to read; 0 is a valid zero-length read (RDMAP-5.2.1-11).
    pub read_size: u32,
    /// Data Source STag (what to read).
    pub src_stag: u32,
    /// Data Source Tagged Offset.
    pub src_to: u64,
}

impl ReadRequestRepr {
    /// Parses a checked view. Every bit pattern is a valid header.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &ReadRequest<&T>) -> Result<ReadRequestRepr> {
        view.check_len()?;
        Ok(ReadRequestRepr {
            sink_stag: view.sink_stag(),
            sink_to: view.sink_to(),
            read_size: view.read_size(),
            src_stag: view.src_stag(),
            src_to: view.src_to(),
        })
    }

    /// Parses the first 28 octets of `bytes`.
    pub fn parse_bytes(bytes: &[u8]) -> Result<ReadRequestRepr> {
        Self::parse(&ReadRequest::new_checked(bytes)?)
    }

    /// The header length, 28.
    pub const fn buffer_len(&self) -> usize {
        READ_REQUEST_LEN
    }

    /// Writes the header into the first 28 octets of the view's buffer.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, view: &mut ReadRequest<&mut T>) {
        view.set_sink_stag(self.sink_stag);
        view.set_sink_to(self.sink_to);
        view.set_read_size(self.read_size);
        view.set_src_stag(self.src_stag);
        view.set_src_to(self.src_to);
    }

    /// The header as it must be copied into a Terminate after `sent` octets of the Read
    /// Response have already gone out (RDMAP-06 §4.8, WIRE-FORMATS §4.6.1): both TOs advance
    /// by `sent`, the size becomes what is left, the STags stay. With `sent == 0` this is the
    /// original header. `sent` larger than the size is clamped to it; the TOs wrap as the
    /// 64-bit TO space does.
    pub fn progressed(&self, sent: u32) -> ReadRequestRepr {
        let sent = sent.min(self.read_size);
        ReadRequestRepr {
            sink_stag: self.sink_stag,
            sink_to: self.sink_to.wrapping_add(u64::from(sent)),
            read_size: self.read_size - sent,
            src_stag: self.src_stag,
            src_to: self.src_to.wrapping_add(u64::from(sent)),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Terminate
// ---------------------------------------------------------------------------------------------

/// Masks and offsets of the Terminate header (RDMAP-06 §4.8 Figures 7-8; WIRE-FORMATS
/// §4.6.2). The flag masks apply to octet 2 of the header (`D+20`).
pub mod terminate {
    /// M: the DDP Segment Length field is valid.
    pub const FLAG_M: u8 = 0x80;
    /// D: DDP Segment Length and the terminated DDP header are included.
    pub const FLAG_D: u8 = 0x40;
    /// R: the terminated RDMA (Read Request) header is included.
    pub const FLAG_R: u8 = 0x20;
    /// The 13 reserved bits, as a mask of the 32-bit control word (RDMAP-4.8-7).
    pub const RESERVED_MASK: u32 = 0x0000_1FFF;
}

mod term_field {
    pub const LAYER_ETYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const FLAGS: usize = 2;
    pub const SEGMENT_LEN: usize = 4;
    pub const DDP_HEADER: usize = 6;
}

/// A view of a Terminate header (RDMAP-06 §4.8; WIRE-FORMATS §4.6), starting at `D+18`.
///
/// The optional parts are located by the flag bits and bounded by the buffer, which should
/// be exactly the rest of the DDP segment: with D = 1 the 2-octet DDP Segment Length and
/// a copied DDP header (14 or 18 octets by the copied T bit, WIRE-FORMATS §4.6.7 item 2)
/// follow the control word; with R = 1 a 28-octet Read Request header follows those, but
/// only if the buffer still holds 28 octets, because Linux siw sets R on remote protection
/// errors caused by a Send with Invalidate without appending one (§4.6.6). Trailing octets
/// beyond what the flags announce are tolerated (senders that zero-fill, §4.6.7 item 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Terminate<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Terminate<T> {
    /// Wraps a buffer without checking it; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Terminate<T> {
        Terminate { buffer }
    }

    /// Wraps a buffer after [`Terminate::check_len`]; no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<Terminate<T>> {
        let v = Self::new_unchecked(buffer);
        v.check_len()?;
        Ok(v)
    }

    /// Fails with [`Error::Truncated`] if the buffer is shorter than the control word, or
    /// if D = 1 and the buffer does not hold the DDP Segment Length and the whole copied DDP
    /// header (RDMAP-4.8-9, RDMAP-4.8-10). A missing Read Request header despite R = 1 is
    /// not an error (siw, see the type's documentation).
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < TERMINATE_CONTROL_LEN {
            return Err(Error::Truncated);
        }
        if self.d() {
            let Some(&ctrl) = b.get(term_field::DDP_HEADER) else {
                return Err(Error::Truncated);
            };
            if b.len() < term_field::DDP_HEADER + copied_ddp_len(ctrl) {
                return Err(Error::Truncated);
            }
        }
        Ok(())
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The Layer nibble.
    pub fn layer(&self) -> u8 {
        self.buffer.as_ref()[term_field::LAYER_ETYPE] >> 4
    }

    /// The EType nibble.
    pub fn etype(&self) -> u8 {
        self.buffer.as_ref()[term_field::LAYER_ETYPE] & 0x0F
    }

    /// The Error Code octet.
    pub fn error_code(&self) -> u8 {
        self.buffer.as_ref()[term_field::CODE]
    }

    /// Layer, EType and Error Code together.
    pub fn code(&self) -> TerminateCode {
        TerminateCode::new(self.layer(), self.etype(), self.error_code())
    }

    /// The M bit: the DDP Segment Length is valid.
    pub fn m(&self) -> bool {
        self.buffer.as_ref()[term_field::FLAGS] & terminate::FLAG_M != 0
    }

    /// The D bit: DDP Segment Length and DDP header are included.
    pub fn d(&self) -> bool {
        self.buffer.as_ref()[term_field::FLAGS] & terminate::FLAG_D != 0
    }

    /// The R bit: the Read Request header is included (see the type's documentation).
    pub fn r(&self) -> bool {
        self.buffer.as_ref()[term_field::FLAGS] & terminate::FLAG_R != 0
    }

    /// The 13 reserved bits of the control word (ignored on receive, RDMAP-4.8-7).
    pub fn reserved(&self) -> u16 {
        let b = self.buffer.as_ref();
        (u16::from(b[term_field::FLAGS] & 0x1F) << 8) | u16::from(b[term_field::FLAGS + 1])
    }

    /// The DDP Segment Length field, present if D = 1 (meaningful only if M = 1).
    pub fn ddp_segment_len(&self) -> Option<u16> {
        if !self.d() {
            return None;
        }
        let b = self.buffer.as_ref();
        let at = term_field::SEGMENT_LEN;
        Some(u16::from_be_bytes([b[at], b[at + 1]]))
    }

    /// The copied DDP header (14 or 18 octets, by its own T bit), present if D = 1.
    pub fn ddp_header(&self) -> Option<&[u8]> {
        if !self.d() {
            return None;
        }
        let b = self.buffer.as_ref();
        let len = copied_ddp_len(b[term_field::DDP_HEADER]);
        Some(&b[term_field::DDP_HEADER..term_field::DDP_HEADER + len])
    }

    /// Offset of the Read Request header, right after whatever D announced.
    fn rdma_offset(&self) -> usize {
        if self.d() {
            let b = self.buffer.as_ref();
            term_field::DDP_HEADER + copied_ddp_len(b[term_field::DDP_HEADER])
        } else {
            TERMINATE_CONTROL_LEN
        }
    }

    /// The copied Read Request header: present if R = 1 and the buffer holds 28 more octets.
    pub fn rdma_header(&self) -> Option<&[u8]> {
        if !self.r() {
            return None;
        }
        let at = self.rdma_offset();
        self.buffer.as_ref().get(at..at + READ_REQUEST_LEN)
    }

    /// The number of octets the flags and the present parts account for; anything after it
    /// in the buffer is trailing fill.
    pub fn header_len(&self) -> usize {
        self.rdma_offset()
            + if self.rdma_header().is_some() {
                READ_REQUEST_LEN
            } else {
                0
            }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Terminate<T> {
    /// Sets Layer, EType and Error Code.
    pub fn set_code(&mut self, code: TerminateCode) {
        let b = self.buffer.as_mut();
        b[term_field::LAYER_ETYPE] = (code.layer() << 4) | code.etype();
        b[term_field::CODE] = code.code();
    }

    /// Sets the M, D and R bits and clears the 13 reserved bits (RDMAP-4.8-7).
    pub fn set_flags(&mut self, m: bool, d: bool, r: bool) {
        let b = self.buffer.as_mut();
        let mut flags = 0;
        if m {
            flags |= terminate::FLAG_M;
        }
        if d {
            flags |= terminate::FLAG_D;
        }
        if r {
            flags |= terminate::FLAG_R;
        }
        b[term_field::FLAGS] = flags;
        b[term_field::FLAGS + 1] = 0;
    }

    /// Sets the DDP Segment Length field (the buffer must hold it).
    pub fn set_ddp_segment_len(&mut self, value: u16) {
        let at = term_field::SEGMENT_LEN;
        self.buffer.as_mut()[at..at + 2].copy_from_slice(&value.to_be_bytes());
    }
}

/// The length of a copied DDP header whose control octet is `ctrl`: 14 if its T bit is set,
/// else 18 (WIRE-FORMATS §4.6.7 item 2: by the copied header's own T bit, not by EType as
/// Wireshark does).
const fn copied_ddp_len(ctrl: u8) -> usize {
    if ctrl & DDP_TAGGED_FLAG != 0 {
        DDP_TAGGED_HEADER_LEN
    } else {
        DDP_UNTAGGED_HEADER_LEN
    }
}

/// A DDP header copied verbatim into a Terminate: 14 octets if its T bit is set, 18 if not.
///
/// Kept as raw octets so that a Terminate can echo whatever the peer sent (a header with an
/// invalid version included); [`crate::wire::segment`] decodes it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CopiedDdpHeader {
    bytes: [u8; DDP_UNTAGGED_HEADER_LEN],
}

impl CopiedDdpHeader {
    /// Copies the DDP header at the start of `segment` (the DDP segment of the offending
    /// message), taking 14 or 18 octets by its T bit. Fails with [`Error::Truncated`] if the
    /// segment is shorter than that.
    pub fn from_segment(segment: &[u8]) -> Result<CopiedDdpHeader> {
        let ctrl = *segment.first().ok_or(Error::Truncated)?;
        let len = copied_ddp_len(ctrl);
        let src = segment.get(..len).ok_or(Error::Truncated)?;
        let mut bytes = [0u8; DDP_UNTAGGED_HEADER_LEN];
        bytes[..len].copy_from_slice(src);
        Ok(CopiedDdpHeader { bytes })
    }

    /// True if the copied header is tagged (T = 1).
    pub const fn is_tagged(&self) -> bool {
        self.bytes[0] & DDP_TAGGED_FLAG != 0
    }

    /// The copied octets: 14 or 18 of them.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..copied_ddp_len(self.bytes[0])]
    }

    /// The RDMAP control octet of the offending message (the first RsvdULP octet).
    pub const fn rdmap_control(&self) -> Control {
        Control(self.bytes[1])
    }
}

impl fmt::Debug for CopiedDdpHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CopiedDdpHeader(")?;
        for b in self.as_bytes() {
            write!(f, "{b:02x}")?;
        }
        f.write_str(")")
    }
}

/// The fields of a Terminate header.
///
/// `m`, `r_bit` and the presence of `ddp`/`rdma` are kept separately because peers do not
/// always set them consistently: the M bit is meaningful only with D, and Linux siw sets R
/// without appending a Read Request header (WIRE-FORMATS §4.6.6). [`TerminateRepr::emit`]
/// writes exactly what the fields say, so a parsed header re-emits to the same bytes (minus
/// trailing fill).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TerminateRepr {
    /// Layer, EType and Error Code.
    pub code: TerminateCode,
    /// The M bit: the DDP Segment Length is valid (RDMAP-4.8-4, RDMAP-4.8-8).
    pub m: bool,
    /// D = 1: the DDP Segment Length and the copied DDP header (RDMAP-4.8-5, RDMAP-4.8-9,
    /// RDMAP-4.8-10).
    pub ddp: Option<(u16, CopiedDdpHeader)>,
    /// The R bit as sent (RDMAP-4.8-6). Set whenever `rdma` is present; may be set alone.
    pub r_bit: bool,
    /// The copied Read Request header, if R = 1 and it was included (RDMAP-4.8-11).
    pub rdma: Option<ReadRequestRepr>,
}

impl TerminateRepr {
    /// Parses a view. Fails only as [`Terminate::check_len`] does.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &Terminate<&T>) -> Result<TerminateRepr> {
        view.check_len()?;
        let ddp = match (view.ddp_segment_len(), view.ddp_header()) {
            (Some(len), Some(h)) => Some((len, CopiedDdpHeader::from_segment(h)?)),
            _ => None,
        };
        let rdma = match view.rdma_header() {
            Some(h) => Some(ReadRequestRepr::parse_bytes(h)?),
            None => None,
        };
        Ok(TerminateRepr {
            code: view.code(),
            m: view.m(),
            ddp,
            r_bit: view.r(),
            rdma,
        })
    }

    /// Parses a Terminate header from the bytes that follow the DDP header.
    pub fn parse_bytes(bytes: &[u8]) -> Result<TerminateRepr> {
        Self::parse(&Terminate::new_checked(bytes)?)
    }

    /// The header length this repr emits: 4, plus 2 + 14/18 with `ddp`, plus 28 with `rdma`.
    pub fn buffer_len(&self) -> usize {
        TERMINATE_CONTROL_LEN
            + self.ddp.map_or(0, |(_, h)| 2 + h.as_bytes().len())
            + self.rdma.map_or(0, |r| r.buffer_len())
    }

    /// Writes the header into the first [`TerminateRepr::buffer_len`] octets of the view's
    /// buffer. R is set if `r_bit` is set or `rdma` is present.
    ///
    /// # Panics
    /// If the buffer is shorter than [`TerminateRepr::buffer_len`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, view: &mut Terminate<&mut T>) {
        view.set_code(self.code);
        view.set_flags(
            self.m,
            self.ddp.is_some(),
            self.r_bit || self.rdma.is_some(),
        );
        let mut at = TERMINATE_CONTROL_LEN;
        if let Some((len, header)) = self.ddp {
            view.set_ddp_segment_len(len);
            let h = header.as_bytes();
            let b = view.buffer.as_mut();
            b[term_field::DDP_HEADER..term_field::DDP_HEADER + h.len()].copy_from_slice(h);
            at = term_field::DDP_HEADER + h.len();
        }
        if let Some(rr) = self.rdma {
            let b = view.buffer.as_mut();
            rr.emit(&mut ReadRequest::new_unchecked(
                &mut b[at..at + READ_REQUEST_LEN],
            ));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// RFC 7306 Atomic Request
// ---------------------------------------------------------------------------------------------

/// The atomic operation codes RFC 7306 defines (§5.2.1 Figure 5; WIRE-FORMATS §5.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum AtomicOpcode {
    /// 0x0: masked fetch-and-add.
    FetchAdd = 0x0,
    /// 0x2: masked compare-and-swap. (0x1 was Swap in draft -01 and is reserved in RFC 7306.)
    CmpSwap = 0x2,
}

impl AtomicOpcode {
    /// The operation for an AOpCode value, if RFC 7306 defines it.
    pub const fn from_u8(value: u8) -> Option<AtomicOpcode> {
        match value {
            0x0 => Some(AtomicOpcode::FetchAdd),
            0x2 => Some(AtomicOpcode::CmpSwap),
            _ => None,
        }
    }
}

mod ar_field {
    use core::ops::Range;
    pub const RESERVED_AOPCODE: Range<usize> = 0..4;
    pub const REQUEST_ID: Range<usize> = 4..8;
    pub const REMOTE_STAG: Range<usize> = 8..12;
    pub const REMOTE_TO: Range<usize> = 12..20;
    pub const ADD_SWAP_DATA: Range<usize> = 20..28;
    pub const ADD_SWAP_MASK: Range<usize> = 28..36;
    pub const COMPARE_DATA: Range<usize> = 36..44;
    pub const COMPARE_MASK: Range<usize> = 44..52;
}

/// A view of an Atomic Request header (52 octets at `D+18`; RFC 7306 §5.2.1, WIRE-FORMATS
/// §5.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AtomicRequest<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AtomicRequest<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> AtomicRequest<T> {
        AtomicRequest { buffer }
    }

    /// Wraps a buffer after [`AtomicRequest::check_len`]; no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<AtomicRequest<T>> {
        let v = Self::new_unchecked(buffer);
        v.check_len()?;
        Ok(v)
    }

    /// Fails with [`Error::Truncated`] below 52 octets.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < ATOMIC_REQUEST_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The AOpCode: the low 4 bits of the first word.
    pub fn aopcode(&self) -> u8 {
        self.buffer.as_ref()[ar_field::RESERVED_AOPCODE.end - 1] & 0x0F
    }

    /// The 28 reserved bits (sent as zero, ignored on receive).
    pub fn reserved(&self) -> u32 {
        be32(self.buffer.as_ref(), ar_field::RESERVED_AOPCODE.start) >> 4
    }

    /// Request Identifier, echoed in the response.
    pub fn request_id(&self) -> u32 {
        be32(self.buffer.as_ref(), ar_field::REQUEST_ID.start)
    }

    /// Remote STag of the target buffer.
    pub fn remote_stag(&self) -> u32 {
        be32(self.buffer.as_ref(), ar_field::REMOTE_STAG.start)
    }

    /// Remote Tagged Offset (must be 64-bit aligned, EXT-5.2.1-2).
    pub fn remote_to(&self) -> u64 {
        be64(self.buffer.as_ref(), ar_field::REMOTE_TO.start)
    }

    /// Add Data (FetchAdd) or Swap Data (CmpSwap).
    pub fn add_swap_data(&self) -> u64 {
        be64(self.buffer.as_ref(), ar_field::ADD_SWAP_DATA.start)
    }

    /// Add Mask (FetchAdd) or Swap Mask (CmpSwap).
    pub fn add_swap_mask(&self) -> u64 {
        be64(self.buffer.as_ref(), ar_field::ADD_SWAP_MASK.start)
    }

    /// Compare Data (CmpSwap only).
    pub fn compare_data(&self) -> u64 {
        be64(self.buffer.as_ref(), ar_field::COMPARE_DATA.start)
    }

    /// Compare Mask (CmpSwap only).
    pub fn compare_mask(&self) -> u64 {
        be64(self.buffer.as_ref(), ar_field::COMPARE_MASK.start)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicRequest<T> {
    /// Sets the AOpCode (low 4 bits) and clears the 28 reserved bits.
    pub fn set_aopcode(&mut self, value: u8) {
        let b = self.buffer.as_mut();
        b[ar_field::RESERVED_AOPCODE].copy_from_slice(&u32::from(value & 0x0F).to_be_bytes());
    }

    /// Sets the Request Identifier.
    pub fn set_request_id(&mut self, value: u32) {
        self.buffer.as_mut()[ar_field::REQUEST_ID].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the Remote STag.
    pub fn set_remote_stag(&mut self, value: u32) {
        self.buffer.as_mut()[ar_field::REMOTE_STAG].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the Remote Tagged Offset.
    pub fn set_remote_to(&mut self, value: u64) {
        self.buffer.as_mut()[ar_field::REMOTE_TO].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets Add/Swap Data.
    pub fn set_add_swap_data(&mut self, value: u64) {
        self.buffer.as_mut()[ar_field::ADD_SWAP_DATA].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets Add/Swap Mask.
    pub fn set_add_swap_mask(&mut self, value: u64) {
        self.buffer.as_mut()[ar_field::ADD_SWAP_MASK].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets Compare Data.
    pub fn set_compare_data(&mut self, value: u64) {
        self.buffer.as_mut()[ar_field::COMPARE_DATA].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets Compare Mask.
    pub fn set_compare_mask(&mut self, value: u64) {
        self.buffer.as_mut()[ar_field::COMPARE_MASK].copy_from_slice(&value.to_be_bytes());
    }
}

/// The fields of an Atomic Request header.
///
/// `aopcode` is kept raw (4 bits) so that a request with an unassigned code can be parsed and
/// answered with an error (EXT-5.2.1-7); [`AtomicRequestRepr::op`] interprets it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AtomicRequestRepr {
    /// The AOpCode nibble (0 = FetchAdd, 2 = CmpSwap).
    pub aopcode: u8,
    /// Request Identifier.
    pub request_id: u32,
    /// Remote STag.
    pub remote_stag: u32,
    /// Remote Tagged Offset.
    pub remote_to: u64,
    /// Add Data or Swap Data.
    pub add_swap_data: u64,
    /// Add Mask or Swap Mask.
    pub add_swap_mask: u64,
    /// Compare Data.
    pub compare_data: u64,
    /// Compare Mask.
    pub compare_mask: u64,
}

impl AtomicRequestRepr {
    /// A FetchAdd request; the unused compare fields get the values RFC 7306 §5.2.1 gives
    /// them (Compare Data 0, Compare Mask all ones).
    pub const fn fetch_add(
        request_id: u32,
        remote_stag: u32,
        remote_to: u64,
        add_data: u64,
        add_mask: u64,
    ) -> AtomicRequestRepr {
        AtomicRequestRepr {
            aopcode: AtomicOpcode::FetchAdd as u8,
            request_id,
            remote_stag,
            remote_to,
            add_swap_data: add_data,
            add_swap_mask: add_mask,
            compare_data: 0,
            compare_mask: u64::MAX,
        }
    }

    /// A CmpSwap request.
    #[allow(clippy::too_many_arguments)]
    pub const fn cmp_swap(
        request_id: u32,
        remote_stag: u32,
        remote_to: u64,
        swap_data: u64,
        swap_mask: u64,
        compare_data: u64,
        compare_mask: u64,
    ) -> AtomicRequestRepr {
        AtomicRequestRepr {
            aopcode: AtomicOpcode::CmpSwap as u8,
            request_id,
            remote_stag,
            remote_to,
            add_swap_data: swap_data,
            add_swap_mask: swap_mask,
            compare_data,
            compare_mask,
        }
    }

    /// The operation, if the AOpCode is one RFC 7306 defines.
    pub const fn op(&self) -> Option<AtomicOpcode> {
        AtomicOpcode::from_u8(self.aopcode)
    }

    /// Parses a view (reserved bits ignored).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &AtomicRequest<&T>) -> Result<AtomicRequestRepr> {
        view.check_len()?;
        Ok(AtomicRequestRepr {
            aopcode: view.aopcode(),
            request_id: view.request_id(),
            remote_stag: view.remote_stag(),
            remote_to: view.remote_to(),
            add_swap_data: view.add_swap_data(),
            add_swap_mask: view.add_swap_mask(),
            compare_data: view.compare_data(),
            compare_mask: view.compare_mask(),
        })
    }

    /// Parses the first 52 octets of `bytes`.
    pub fn parse_bytes(bytes: &[u8]) -> Result<AtomicRequestRepr> {
        Self::parse(&AtomicRequest::new_checked(bytes)?)
    }

    /// The header length, 52.
    pub const fn buffer_len(&self) -> usize {
        ATOMIC_REQUEST_LEN
    }

    /// Writes the header (reserved bits zero; `aopcode` masked to 4 bits).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, view: &mut AtomicRequest<&mut T>) {
        view.set_aopcode(self.aopcode);
        view.set_request_id(self.request_id);
        view.set_remote_stag(self.remote_stag);
        view.set_remote_to(self.remote_to);
        view.set_add_swap_data(self.add_swap_data);
        view.set_add_swap_mask(self.add_swap_mask);
        view.set_compare_data(self.compare_data);
        view.set_compare_mask(self.compare_mask);
    }
}

// ---------------------------------------------------------------------------------------------
// RFC 7306 Atomic Response
// ---------------------------------------------------------------------------------------------

mod aresp_field {
    use core::ops::Range;
    pub const ORIG_REQUEST_ID: Range<usize> = 0..4;
    pub const ORIG_VALUE: Range<usize> = 4..12;
}

/// A view of an Atomic Response header (12 octets at `D+18`; RFC 7306 §5.2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AtomicResponse<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AtomicResponse<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> AtomicResponse<T> {
        AtomicResponse { buffer }
    }

    /// Wraps a buffer after [`AtomicResponse::check_len`]; no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<AtomicResponse<T>> {
        let v = Self::new_unchecked(buffer);
        v.check_len()?;
        Ok(v)
    }

    /// Fails with [`Error::Truncated`] below 12 octets.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < ATOMIC_RESPONSE_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Original Request Identifier.
    pub fn orig_request_id(&self) -> u32 {
        be32(self.buffer.as_ref(), aresp_field::ORIG_REQUEST_ID.start)
    }

    /// Original Remote Data Value (the target's value before the operation).
    pub fn orig_value(&self) -> u64 {
        be64(self.buffer.as_ref(), aresp_field::ORIG_VALUE.start)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> AtomicResponse<T> {
    /// Sets the Original Request Identifier.
    pub fn set_orig_request_id(&mut self, value: u32) {
        self.buffer.as_mut()[aresp_field::ORIG_REQUEST_ID].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the Original Remote Data Value.
    pub fn set_orig_value(&mut self, value: u64) {
        self.buffer.as_mut()[aresp_field::ORIG_VALUE].copy_from_slice(&value.to_be_bytes());
    }
}

/// The fields of an Atomic Response header.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AtomicResponseRepr {
    /// The Request Identifier of the request this answers.
    pub orig_request_id: u32,
    /// The target's value before the operation.
    pub orig_value: u64,
}

impl AtomicResponseRepr {
    /// Parses a view.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &AtomicResponse<&T>) -> Result<AtomicResponseRepr> {
        view.check_len()?;
        Ok(AtomicResponseRepr {
            orig_request_id: view.orig_request_id(),
            orig_value: view.orig_value(),
        })
    }

    /// Parses the first 12 octets of `bytes`.
    pub fn parse_bytes(bytes: &[u8]) -> Result<AtomicResponseRepr> {
        Self::parse(&AtomicResponse::new_checked(bytes)?)
    }

    /// The header length, 12.
    pub const fn buffer_len(&self) -> usize {
        ATOMIC_RESPONSE_LEN
    }

    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, view: &mut AtomicResponse<&mut T>) {
        view.set_orig_request_id(self.orig_request_id);
        view.set_orig_value(self.orig_value);
    }
}

// ---------------------------------------------------------------------------------------------
// RFC 7306 Immediate Data
// ---------------------------------------------------------------------------------------------

/// A view of an Immediate Data header (8 octets at `D+18`; RFC 7306 §6.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ImmediateData<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ImmediateData<T> {
    /// Wraps a buffer without checking its length.
    pub const fn new_unchecked(buffer: T) -> ImmediateData<T> {
        ImmediateData { buffer }
    }

    /// Wraps a buffer after [`ImmediateData::check_len`]; no accessor panics afterwards.
    pub fn new_checked(buffer: T) -> Result<ImmediateData<T>> {
        let v = Self::new_unchecked(buffer);
        v.check_len()?;
        Ok(v)
    }

    /// Fails with [`Error::Truncated`] below 8 octets. That the message holds *exactly* 8
    /// octets (EXT-6.3-7) is a property of the segment, checked by [`crate::wire::segment`].
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < IMMEDIATE_DATA_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// The underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The 8 data octets.
    pub fn data(&self) -> [u8; IMMEDIATE_DATA_LEN] {
        let mut d = [0u8; IMMEDIATE_DATA_LEN];
        d.copy_from_slice(&self.buffer.as_ref()[..IMMEDIATE_DATA_LEN]);
        d
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ImmediateData<T> {
    /// Sets the 8 data octets.
    pub fn set_data(&mut self, data: [u8; IMMEDIATE_DATA_LEN]) {
        self.buffer.as_mut()[..IMMEDIATE_DATA_LEN].copy_from_slice(&data);
    }
}

/// The Immediate Data header: 8 opaque octets for the remote ULP.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ImmediateDataRepr {
    /// The data, in wire order.
    pub data: [u8; IMMEDIATE_DATA_LEN],
}

impl ImmediateDataRepr {
    /// Parses a view.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(view: &ImmediateData<&T>) -> Result<ImmediateDataRepr> {
        view.check_len()?;
        Ok(ImmediateDataRepr { data: view.data() })
    }

    /// Parses the first 8 octets of `bytes`.
    pub fn parse_bytes(bytes: &[u8]) -> Result<ImmediateDataRepr> {
        Self::parse(&ImmediateData::new_checked(bytes)?)
    }

    /// The header length, 8.
    pub const fn buffer_len(&self) -> usize {
        IMMEDIATE_DATA_LEN
    }

    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, view: &mut ImmediateData<&mut T>) {
        view.set_data(self.data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RDMAP-4.1-2 / WIRE-FORMATS §4.2: the control octet we send for every opcode is
    /// 0x40 | opcode.
    #[test]
    fn control_octets_match_the_table() {
        for op in Opcode::ALL {
            assert_eq!(op.control().0, 0x40 | op as u8);
            assert_eq!(Control(op.control().0).opcode(), Some(op));
            assert_eq!(Control(op.control().0).rv(), 1);
        }
        for raw in 0xC..=0xF {
            assert_eq!(Control(0x40 | raw).opcode(), None);
        }
        // Reserved bits are ignored for the opcode and version (RDMAP-4.1-8).
        assert_eq!(Control(0x73).opcode(), Some(Opcode::Send));
        assert_eq!(Control(0x73).rv(), 1);
        assert_eq!(Control(0x73).reserved(), 0x30);
    }

    #[test]
    fn terminate_view_tolerates_r_without_header() {
        // siw: remote protection error on a Send with Invalidate: R set, only 2 + 18 octets.
        let mut b = [0u8; 24];
        b[0] = 0x01;
        b[1] = 0x09;
        b[2] = 0xE0;
        b[6] = 0x41;
        b[7] = 0x44;
        let v = Terminate::new_checked(&b[..]).unwrap();
        assert!(v.r() && v.rdma_header().is_none());
        assert_eq!(v.ddp_header().unwrap().len(), 18);
        assert_eq!(v.header_len(), 24);
    }
}
