//! MPA Request/Reply frames (mpa-08 §7.1.1, RFC 6581 §6) and the RFC 6581 §9 enhanced
//! connection data, plus the ready-to-receive (RTR) message kinds of RFC 6581 §9.2.
//!
//! Layout (WIRE-FORMATS §6.1, offsets `P+n`):
//!
//! ```text
//! P+0   16  Key        "MPA ID Req Frame" / "MPA ID Rep Frame"
//! P+16   1  flags      M 0x80 | C 0x40 | R 0x20 | S 0x10 | Res 0x0F
//! P+17   1  Rev
//! P+18   2  PD_Length  0..=512, big-endian
//! P+20   n  Private Data (with S = 1 it starts with the 4-octet enhanced data)
//! ```
//!
//! The frames travel as plain TCP stream data before MPA enters Full Operation: no
//! ULPDU_Length, no markers, no CRC (mpa-08 §7.1). A stream reader learns how many octets to
//! wait for from the first 20 with [`frame_len`].
//!
//! Two readings are fixed here and used by the negotiation:
//! - The S bit is defined from Rev 2 on (RFC 6581 §6: enhanced features need Rev ≥ 2). In a
//!   frame with Rev 0 or 1 the S position is one of RFC 5044's five reserved bits, so it is
//!   kept in [`FrameRepr::res`] and never read as "enhanced data present" (this is also what
//!   Linux siw does). MPA2-6-1, MPA2-6-2, MPA-7.1.1-16.
//! - Reserved bits are kept as received so that `emit(parse(x)) == x`, and are never checked:
//!   Linux siw sets the non-standard 0x08 (`MPA_RR_FLAG_GSO_EXP`) in them (WIRE-FORMATS §6.6).

use core::fmt;

use crate::error::MpaError;

/// The Request key, "MPA ID Req Frame" (MPA-7.1.1-1).
pub const REQUEST_KEY: [u8; 16] = *b"MPA ID Req Frame";
/// The Reply key, "MPA ID Rep Frame": octet 9 is `p` (0x70) instead of `q` (MPA-7.1.1-4).
pub const REPLY_KEY: [u8; 16] = *b"MPA ID Rep Frame";
/// Length of the fixed part of a frame (key, flags, Rev, PD_Length).
pub const HEADER_LEN: usize = 20;
/// Largest Private Data field, enhanced data included (MPA-7.1.1-23, MPA2-7-4).
pub const MAX_PRIVATE_DATA_LEN: usize = 512;
/// Length of the RFC 6581 §9 enhanced connection data word.
pub const ENHANCED_DATA_LEN: usize = 4;
/// Largest ULP private data after the enhanced data (512 - 4).
pub const MAX_ULP_PRIVATE_DATA_LEN_ENHANCED: usize = MAX_PRIVATE_DATA_LEN - ENHANCED_DATA_LEN;
/// Largest frame on the wire.
pub const MAX_FRAME_LEN: usize = HEADER_LEN + MAX_PRIVATE_DATA_LEN;
/// Mask of the 14-bit IRD and ORD fields; the all-ones value also means "no automatic
/// negotiation, the ULP handles it" (RFC 6581 §9.1; MPA2-9.1-11..14).
pub const IRD_ORD_MASK: u16 = 0x3FFF;
/// IRD/ORD value that switches automatic negotiation off (same bits as [`IRD_ORD_MASK`]).
pub const IRD_ORD_NO_NEGOTIATION: u16 = 0x3FFF;

/// Flag bits of octet P+16.
pub mod flags {
    /// M: markers required from the peer (mpa-08 §7.1.1).
    pub const MARKERS: u8 = 0x80;
    /// C: CRC wanted (mpa-08 §7.1.1).
    pub const CRC: u8 = 0x40;
    /// R: connection rejected (meaningful in a Reply only).
    pub const REJECT: u8 = 0x20;
    /// S: private data starts with the enhanced connection data (RFC 6581 §6; Rev ≥ 2 only).
    pub const ENHANCED: u8 = 0x10;
    /// Res from Rev 2 on (four bits).
    pub const RES: u8 = 0x0F;
    /// Res of an RFC 5044 (Rev 0/1) frame: five bits, S included.
    pub const RES_V1: u8 = 0x1F;
}

mod field {
    use core::ops::Range;
    pub const KEY: Range<usize> = 0..16;
    pub const FLAGS: usize = 16;
    pub const REV: usize = 17;
    pub const PD_LENGTH: Range<usize> = 18..20;
    pub const PRIVATE_DATA: usize = 20;
}

/// Which of the two startup frames a key announces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FrameKind {
    /// "MPA ID Req Frame", sent by the initiator.
    Request,
    /// "MPA ID Rep Frame", sent by the responder.
    Reply,
}

impl FrameKind {
    /// The 16-octet key of this kind.
    pub const fn key(self) -> &'static [u8; 16] {
        match self {
            FrameKind::Request => &REQUEST_KEY,
            FrameKind::Reply => &REPLY_KEY,
        }
    }

    /// The kind whose key is `key`, if any.
    pub fn from_key(key: &[u8]) -> Option<FrameKind> {
        if key == REQUEST_KEY {
            Some(FrameKind::Request)
        } else if key == REPLY_KEY {
            Some(FrameKind::Reply)
        } else {
            None
        }
    }
}

/// Why a startup frame is malformed. Every variant is an invalid Request/Reply frame for the
/// peer (MPA Terminate code 4; the TCP connection is closed at once, mpa-08 §7.1.1, §8), see
/// [`FrameError::protocol_error`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[error("{d}", d = self.description())]
pub enum FrameError {
    /// Fewer octets than the header or than PD_Length announces (also: the stream ended
    /// inside a frame).
    Truncated,
    /// The key is neither the Request nor the Reply key (MPA-7.1.1-3, MPA-7.1.1-6).
    BadKey,
    /// PD_Length is above 512 (MPA-7.1.1-22, MPA2-7-4).
    PrivateDataTooLong,
    /// S = 1 in a Rev ≥ 2 frame but PD_Length < 4, so the enhanced data is missing (MPA2-6-5).
    EnhancedDataMissing,
}

impl FrameError {
    /// The MPA error this maps to: always [`MpaError::InvalidStartupFrame`].
    pub const fn protocol_error(self) -> MpaError {
        MpaError::InvalidStartupFrame
    }

    /// A one-line human description.
    pub const fn description(self) -> &'static str {
        match self {
            FrameError::Truncated => "MPA startup frame truncated",
            FrameError::BadKey => "MPA startup frame has an unknown key",
            FrameError::PrivateDataTooLong => "MPA startup frame PD_Length above 512",
            FrameError::EnhancedDataMissing => "MPA enhanced frame (S=1) with PD_Length below 4",
        }
    }
}

impl From<FrameError> for MpaError {
    fn from(e: FrameError) -> Self {
        e.protocol_error()
    }
}

impl From<crate::wire::Error> for FrameError {
    fn from(e: crate::wire::Error) -> Self {
        match e {
            crate::wire::Error::Truncated => FrameError::Truncated,
            crate::wire::Error::Malformed => FrameError::BadKey,
        }
    }
}

/// The total length of a frame (header plus private data) from its first octets, so that a
/// stream reader knows how much to wait for.
///
/// Needs at least [`HEADER_LEN`] octets (more are ignored); fails with
/// [`FrameError::Truncated`] before that, [`FrameError::BadKey`] if the key is neither key and
/// [`FrameError::PrivateDataTooLong`] if PD_Length is above 512, so a reader never waits for
/// a length that could not be valid.
pub fn frame_len(header: &[u8]) -> Result<usize, FrameError> {
    if header.len() < HEADER_LEN {
        return Err(FrameError::Truncated);
    }
    if FrameKind::from_key(&header[field::KEY]).is_none() {
        return Err(FrameError::BadKey);
    }
    let pd_len = usize::from(u16::from_be_bytes([header[18], header[19]]));
    if pd_len > MAX_PRIVATE_DATA_LEN {
        return Err(FrameError::PrivateDataTooLong);
    }
    Ok(HEADER_LEN + pd_len)
}

/// Whether `prefix` (the first octets received so far) can still be the start of a frame with
/// the key of `kind`. Lets a reader reject garbage before 20 octets have arrived.
pub fn key_prefix_matches(kind: FrameKind, prefix: &[u8]) -> bool {
    let n = prefix.len().min(16);
    prefix[..n] == kind.key()[..n]
}

/// A zero-copy view of an MPA Request or Reply frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wraps a buffer without any check. Accessors may panic if it is too short; use
    /// [`Frame::new_checked`] for untrusted input.
    pub const fn new_unchecked(buffer: T) -> Frame<T> {
        Frame { buffer }
    }

    /// Wraps a buffer and checks that it holds the header and the whole private data that
    /// PD_Length announces. Afterwards no accessor panics.
    pub fn new_checked(buffer: T) -> crate::wire::Result<Frame<T>> {
        let frame = Self::new_unchecked(buffer);
        frame.check_len()?;
        Ok(frame)
    }

    /// Checks that the buffer holds the header and `PD_Length` octets of private data.
    /// Octets after the frame are allowed (an FPDU may follow in the same segment).
    pub fn check_len(&self) -> crate::wire::Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN || len < self.total_len() {
            Err(crate::wire::Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The 16-octet key.
    pub fn key(&self) -> &[u8] {
        &self.buffer.as_ref()[field::KEY]
    }

    /// The frame kind the key announces, or `None` for any other key.
    pub fn kind(&self) -> Option<FrameKind> {
        FrameKind::from_key(self.key())
    }

    /// The whole flags octet P+16.
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }

    /// M: the sender requires markers in the FPDUs the receiver of this frame sends.
    pub fn markers(&self) -> bool {
        self.flags() & flags::MARKERS != 0
    }

    /// C: the sender wants CRCs.
    pub fn crc(&self) -> bool {
        self.flags() & flags::CRC != 0
    }

    /// R: the connection is rejected (Reply only; not checked in a Request).
    pub fn reject(&self) -> bool {
        self.flags() & flags::REJECT != 0
    }

    /// The raw S bit. It means "enhanced data present" only when [`Frame::rev`] ≥ 2; see
    /// [`Frame::is_enhanced`].
    pub fn s_bit(&self) -> bool {
        self.flags() & flags::ENHANCED != 0
    }

    /// True when the private data starts with the RFC 6581 enhanced data: S = 1 and Rev ≥ 2.
    pub fn is_enhanced(&self) -> bool {
        self.s_bit() && self.rev() >= 2
    }

    /// The reserved bits as the frame's revision defines them: 4 bits (0x0F) from Rev 2 on,
    /// 5 bits (0x1F, the S position included) for Rev 0 and 1.
    pub fn res(&self) -> u8 {
        if self.rev() >= 2 {
            self.flags() & flags::RES
        } else {
            self.flags() & flags::RES_V1
        }
    }

    /// Rev, the MPA revision of the sender.
    pub fn rev(&self) -> u8 {
        self.buffer.as_ref()[field::REV]
    }

    /// PD_Length.
    pub fn pd_length(&self) -> u16 {
        let b = self.buffer.as_ref();
        u16::from_be_bytes([b[field::PD_LENGTH.start], b[field::PD_LENGTH.start + 1]])
    }

    /// Header plus private data: the octets this frame occupies in the stream.
    pub fn total_len(&self) -> usize {
        HEADER_LEN + usize::from(self.pd_length())
    }

    /// The whole Private Data field (enhanced data included when present).
    pub fn private_data(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PRIVATE_DATA..self.total_len()]
    }

    /// The enhanced data word, if the frame is enhanced and PD_Length is at least 4.
    pub fn enhanced_data(&self) -> Option<EnhancedData> {
        let pd = self.private_data();
        if self.is_enhanced() && pd.len() >= ENHANCED_DATA_LEN {
            Some(EnhancedData::from_bytes([pd[0], pd[1], pd[2], pd[3]]))
        } else {
            None
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    /// Writes the key of `kind`.
    pub fn set_kind(&mut self, kind: FrameKind) {
        self.buffer.as_mut()[field::KEY].copy_from_slice(kind.key());
    }

    /// Writes the whole flags octet.
    pub fn set_flags(&mut self, value: u8) {
        self.buffer.as_mut()[field::FLAGS] = value;
    }

    fn set_flag(&mut self, bit: u8, on: bool) {
        let f = self.flags();
        self.set_flags(if on { f | bit } else { f & !bit });
    }

    /// Sets or clears M.
    pub fn set_markers(&mut self, on: bool) {
        self.set_flag(flags::MARKERS, on)
    }

    /// Sets or clears C.
    pub fn set_crc(&mut self, on: bool) {
        self.set_flag(flags::CRC, on)
    }

    /// Sets or clears R.
    pub fn set_reject(&mut self, on: bool) {
        self.set_flag(flags::REJECT, on)
    }

    /// Sets or clears S.
    pub fn set_s_bit(&mut self, on: bool) {
        self.set_flag(flags::ENHANCED, on)
    }

    /// Writes Rev.
    pub fn set_rev(&mut self, value: u8) {
        self.buffer.as_mut()[field::REV] = value;
    }

    /// Writes PD_Length.
    pub fn set_pd_length(&mut self, value: u16) {
        self.buffer.as_mut()[field::PD_LENGTH].copy_from_slice(&value.to_be_bytes());
    }

    /// The Private Data field for writing (PD_Length must be set first).
    pub fn private_data_mut(&mut self) -> &mut [u8] {
        let end = self.total_len();
        &mut self.buffer.as_mut()[field::PRIVATE_DATA..end]
    }
}

/// One of the three RTR (ready-to-receive) messages of RFC 6581 §9.2: the initiator's first
/// FPDU in the peer-to-peer model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RtrType {
    /// B: a zero-length Send (untagged, QN 0, MSN 1; consumes a receive buffer).
    Send,
    /// C (enhanced data, not the CRC flag): a zero-length RDMA Write (tagged).
    Write,
    /// D: a zero-length RDMA Read Request (QN 1, MSN 1, RDMARDSZ 0; needs responder IRD ≥ 1).
    Read,
}

impl RtrType {
    /// All three kinds, in the order of the enhanced-data flags (B, C, D).
    pub const ALL: [RtrType; 3] = [RtrType::Send, RtrType::Write, RtrType::Read];

    const fn bit(self) -> u8 {
        match self {
            RtrType::Send => RtrTypes::SEND.0,
            RtrType::Write => RtrTypes::WRITE.0,
            RtrType::Read => RtrTypes::READ.0,
        }
    }

    /// The DDP segment (MPA ULPDU) of this RTR as we send it: DDP/RDMAP version 1, all
    /// addressing fields zero, MSN 1 on its queue (WIRE-FORMATS §6.4). The engine frames it
    /// like any other ULPDU (length, markers, pad, CRC).
    pub const fn ulpdu(self) -> &'static [u8] {
        match self {
            RtrType::Send => &SEND_RTR_ULPDU,
            RtrType::Write => &WRITE_RTR_ULPDU,
            RtrType::Read => &READ_RTR_ULPDU,
        }
    }

    /// Which RTR a received DDP segment (MPA ULPDU, i.e. without ULPDU_Length, markers, pad
    /// and CRC) is, if it is a well-formed one:
    /// - Write: tagged, L = 1, opcode RDMA Write, exactly the 14-octet header. STag and TO are
    ///   not checked (DDP-04 §5.2 for zero-length tagged segments; siw sends STag 1).
    /// - Send: untagged, L = 1, opcode Send or Send with SE, QN 0, MSN 1, MO 0, exactly the
    ///   18-octet header.
    /// - Read: untagged, L = 1, opcode Read Request, QN 1, MSN 1, MO 0, RDMARDSZ 0, exactly
    ///   46 octets. Sink and source STag/TO are not checked (RDMAP-06 §5.2.1).
    ///
    /// DDP version and RDMAP version must both be 1, the only versions we send.
    pub fn classify_ulpdu(ulpdu: &[u8]) -> Option<RtrType> {
        if ulpdu.len() < 2 {
            return None;
        }
        let (ddp, rdmap) = (ulpdu[0], ulpdu[1]);
        // L = 1, DV = 1, RV = 1; the reserved bits are not checked (DDP-04 §4.1, RDMAP-06 §4.1).
        if ddp & 0x40 == 0 || ddp & 0x03 != 1 || rdmap & 0xC0 != 0x40 {
            return None;
        }
        let tagged = ddp & 0x80 != 0;
        let opcode = rdmap & 0x0F;
        let be32 = |at: usize| -> u32 {
            u32::from_be_bytes([ulpdu[at], ulpdu[at + 1], ulpdu[at + 2], ulpdu[at + 3]])
        };
        match (tagged, opcode, ulpdu.len()) {
            (true, 0x0, 14) => Some(RtrType::Write),
            (false, 0x3 | 0x5, 18) if be32(6) == 0 && be32(10) == 1 && be32(14) == 0 => {
                Some(RtrType::Send)
            }
            (false, 0x1, 46) if be32(6) == 1 && be32(10) == 1 && be32(14) == 0 && be32(30) == 0 => {
                Some(RtrType::Read)
            }
            _ => None,
        }
    }
}

impl fmt::Display for RtrType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RtrType::Send => "zero-length Send RTR",
            RtrType::Write => "zero-length RDMA Write RTR",
            RtrType::Read => "zero-length RDMA Read RTR",
        })
    }
}

/// Zero-length Send, QN 0, MSN 1 (WIRE-FORMATS §6.4).
const SEND_RTR_ULPDU: [u8; 18] = [0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0];
/// Zero-length RDMA Write, STag 0, TO 0 (WIRE-FORMATS §6.4).
const WRITE_RTR_ULPDU: [u8; 14] = [0xC1, 0x40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
/// Zero-length RDMA Read Request, QN 1, MSN 1, everything else 0 (WIRE-FORMATS §6.4).
const READ_RTR_ULPDU: [u8; 46] = {
    let mut b = [0u8; 46];
    b[0] = 0x41;
    b[1] = 0x41;
    b[9] = 1; // QN 1
    b[13] = 1; // MSN 1
    b
};

/// A set of RTR types: the B, C and D flags of the enhanced data.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct RtrTypes(u8);

impl RtrTypes {
    /// No RTR type.
    pub const EMPTY: RtrTypes = RtrTypes(0);
    /// B: zero-length Send.
    pub const SEND: RtrTypes = RtrTypes(0b001);
    /// C: zero-length RDMA Write.
    pub const WRITE: RtrTypes = RtrTypes(0b010);
    /// D: zero-length RDMA Read.
    pub const READ: RtrTypes = RtrTypes(0b100);
    /// All three.
    pub const ALL: RtrTypes = RtrTypes(0b111);

    /// The set holding only `t`.
    pub const fn only(t: RtrType) -> RtrTypes {
        RtrTypes(t.bit())
    }

    /// Whether `t` is in the set.
    pub const fn contains(self, t: RtrType) -> bool {
        self.0 & t.bit() != 0
    }

    /// The set with `t` added.
    pub const fn with(self, t: RtrType) -> RtrTypes {
        RtrTypes(self.0 | t.bit())
    }

    /// Union.
    pub const fn union(self, other: RtrTypes) -> RtrTypes {
        RtrTypes(self.0 | other.0)
    }

    /// Intersection.
    pub const fn intersection(self, other: RtrTypes) -> RtrTypes {
        RtrTypes(self.0 & other.0)
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The members, in B, C, D order.
    pub fn iter(self) -> impl Iterator<Item = RtrType> {
        RtrType::ALL.into_iter().filter(move |t| self.contains(*t))
    }
}

impl fmt::Debug for RtrTypes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl FromIterator<RtrType> for RtrTypes {
    fn from_iter<I: IntoIterator<Item = RtrType>>(iter: I) -> Self {
        iter.into_iter().fold(RtrTypes::EMPTY, RtrTypes::with)
    }
}

/// The RFC 6581 §9 enhanced connection data: the first 4 private-data octets when S = 1.
///
/// ```text
/// octets 0-1: A 0x8000 (peer-to-peer) | B 0x4000 (Send RTR)  | IRD 0x3FFF
/// octets 2-3: C 0x8000 (Write RTR)    | D 0x4000 (Read RTR)  | ORD 0x3FFF
/// ```
///
/// The fields are kept as sent: B, C and D are kept even with A = 0 (where the receiver must
/// ignore them, MPA2-9.2-15) so that a re-emitted frame is identical.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct EnhancedData {
    /// A: peer-to-peer connection model (MPA2-9.2-1).
    pub peer_to_peer: bool,
    /// B, C and D: RTR types requested (in a Request) or supported (in a Reply).
    pub rtr: RtrTypes,
    /// IRD, 14 bits (0x3FFF: no automatic negotiation).
    pub ird: u16,
    /// ORD, 14 bits (0x3FFF: no automatic negotiation).
    pub ord: u16,
}

impl EnhancedData {
    /// Decodes the 4 octets (network byte order, MPA2-9-1).
    pub const fn from_bytes(b: [u8; 4]) -> EnhancedData {
        let hi = u16::from_be_bytes([b[0], b[1]]);
        let lo = u16::from_be_bytes([b[2], b[3]]);
        let mut rtr = 0;
        if hi & 0x4000 != 0 {
            rtr |= RtrTypes::SEND.0;
        }
        if lo & 0x8000 != 0 {
            rtr |= RtrTypes::WRITE.0;
        }
        if lo & 0x4000 != 0 {
            rtr |= RtrTypes::READ.0;
        }
        EnhancedData {
            peer_to_peer: hi & 0x8000 != 0,
            rtr: RtrTypes(rtr),
            ird: hi & IRD_ORD_MASK,
            ord: lo & IRD_ORD_MASK,
        }
    }

    /// Encodes the 4 octets; IRD and ORD are masked to 14 bits.
    pub const fn to_bytes(self) -> [u8; 4] {
        let mut hi = self.ird & IRD_ORD_MASK;
        let mut lo = self.ord & IRD_ORD_MASK;
        if self.peer_to_peer {
            hi |= 0x8000;
        }
        if self.rtr.contains(RtrType::Send) {
            hi |= 0x4000;
        }
        if self.rtr.contains(RtrType::Write) {
            lo |= 0x8000;
        }
        if self.rtr.contains(RtrType::Read) {
            lo |= 0x4000;
        }
        let h = hi.to_be_bytes();
        let l = lo.to_be_bytes();
        [h[0], h[1], l[0], l[1]]
    }

    /// The RTR types that count: empty when A = 0 (MPA2-9.2-15).
    pub const fn effective_rtr(self) -> RtrTypes {
        if self.peer_to_peer {
            self.rtr
        } else {
            RtrTypes::EMPTY
        }
    }
}

/// A parsed MPA Request or Reply frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FrameRepr<'a> {
    /// Request or Reply (from the key).
    pub kind: FrameKind,
    /// M.
    pub markers: bool,
    /// C (CRC; not the Write RTR flag of the enhanced data).
    pub crc: bool,
    /// R.
    pub reject: bool,
    /// The reserved bits as received (never checked): mask 0x0F from Rev 2 on, 0x1F (S
    /// position included) for Rev 0/1. Sent as 0 by us (MPA-7.1.1-15).
    pub res: u8,
    /// Rev.
    pub rev: u8,
    /// The enhanced data, present iff S = 1 and Rev ≥ 2. On emit, `Some` sets S and writes
    /// the word in front of `private_data`; it should only be used with Rev ≥ 2.
    pub enhanced: Option<EnhancedData>,
    /// The ULP private data: the Private Data field after the enhanced data, if any.
    pub private_data: &'a [u8],
}

impl<'a> FrameRepr<'a> {
    /// Parses and validates a frame: key, PD_Length ≤ 512, the whole private data present,
    /// and with S = 1 (Rev ≥ 2) at least the 4-octet enhanced data. Flags, Rev and reserved
    /// bits are not judged here; that is the negotiation's business.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        frame: &Frame<&'a T>,
    ) -> Result<FrameRepr<'a>, FrameError> {
        let buf: &'a [u8] = T::as_ref(frame.buffer);
        // The same order of checks as `frame_len`, so both report the same error.
        frame_len(buf)?;
        let frame = Frame::new_checked(buf)?;
        let kind = frame.kind().ok_or(FrameError::BadKey)?;
        let pd: &'a [u8] = &buf[HEADER_LEN..frame.total_len()];
        let (enhanced, private_data) = if frame.is_enhanced() {
            if pd.len() < ENHANCED_DATA_LEN {
                return Err(FrameError::EnhancedDataMissing);
            }
            (
                Some(EnhancedData::from_bytes([pd[0], pd[1], pd[2], pd[3]])),
                &pd[ENHANCED_DATA_LEN..],
            )
        } else {
            (None, pd)
        };
        Ok(FrameRepr {
            kind,
            markers: frame.markers(),
            crc: frame.crc(),
            reject: frame.reject(),
            res: frame.res(),
            rev: frame.rev(),
            enhanced,
            private_data,
        })
    }

    /// Length of the Private Data field (PD_Length) this repr emits.
    pub fn pd_length(&self) -> usize {
        self.private_data.len()
            + if self.enhanced.is_some() {
                ENHANCED_DATA_LEN
            } else {
                0
            }
    }

    /// Octets [`FrameRepr::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.pd_length()
    }

    /// Writes the frame into the first [`FrameRepr::buffer_len`] octets of `frame`.
    ///
    /// # Panics
    /// If the buffer is shorter than [`FrameRepr::buffer_len`] or the private data is longer
    /// than a PD_Length can express; callers keep it at or below 512 octets (the negotiation
    /// checks this when it is configured).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, frame: &mut Frame<&mut T>) {
        let pd_len = u16::try_from(self.pd_length()).expect("private data fits PD_Length");
        let mut f = self.res;
        if self.markers {
            f |= flags::MARKERS;
        }
        if self.crc {
            f |= flags::CRC;
        }
        if self.reject {
            f |= flags::REJECT;
        }
        if self.enhanced.is_some() {
            f |= flags::ENHANCED;
        }
        frame.set_kind(self.kind);
        frame.set_flags(f);
        frame.set_rev(self.rev);
        frame.set_pd_length(pd_len);
        let pd = frame.private_data_mut();
        let ulp = match self.enhanced {
            Some(e) => {
                pd[..ENHANCED_DATA_LEN].copy_from_slice(&e.to_bytes());
                &mut pd[ENHANCED_DATA_LEN..]
            }
            None => pd,
        };
        ulp.copy_from_slice(self.private_data);
    }

    /// Convenience: the frame as a new vector (set-up time only).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0u8; self.buffer_len()];
        self.emit(&mut Frame::new_unchecked(&mut v[..]));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// WIRE-FORMATS §6.2 example: CRC, no markers, P2P, Read RTR only, IRD = ORD = 16.
    const EXAMPLE: [u8; 24] = [
        0x4D, 0x50, 0x41, 0x20, 0x49, 0x44, 0x20, 0x52, 0x65, 0x71, 0x20, 0x46, 0x72, 0x61, 0x6D,
        0x65, 0x50, 0x02, 0x00, 0x04, 0x80, 0x10, 0x40, 0x10,
    ];

    #[test]
    fn keys_differ_only_at_octet_9() {
        // MPA-7.1.1-1, MPA-7.1.1-4.
        for i in 0..16 {
            assert_eq!(REQUEST_KEY[i] == REPLY_KEY[i], i != 9);
        }
        assert_eq!((REQUEST_KEY[9], REPLY_KEY[9]), (0x71, 0x70));
    }

    #[test]
    fn wire_formats_6_2_example_parses() {
        let frame = Frame::new_checked(&EXAMPLE[..]).unwrap();
        let repr = FrameRepr::parse(&frame).unwrap();
        assert_eq!(repr.kind, FrameKind::Request);
        assert!(repr.crc && !repr.markers && !repr.reject);
        assert_eq!(repr.rev, 2);
        assert_eq!(
            repr.enhanced,
            Some(EnhancedData {
                peer_to_peer: true,
                rtr: RtrTypes::READ,
                ird: 16,
                ord: 16
            })
        );
        assert!(repr.private_data.is_empty());
        assert_eq!(repr.to_vec(), EXAMPLE);
    }

    #[test]
    fn rev1_s_bit_is_reserved() {
        // MPA2-6-2: S only means something from Rev 2 on.
        let mut b = EXAMPLE;
        b[17] = 1;
        let repr = FrameRepr::parse(&Frame::new_unchecked(&b[..])).unwrap();
        assert_eq!(repr.enhanced, None);
        assert_eq!(repr.res, 0x10);
        assert_eq!(repr.private_data.len(), 4);
        assert_eq!(repr.to_vec(), b);
    }

    #[test]
    fn rtr_ulpdus_classify_as_themselves() {
        for t in RtrType::ALL {
            assert_eq!(RtrType::classify_ulpdu(t.ulpdu()), Some(t));
        }
        assert_eq!(RtrType::classify_ulpdu(&[]), None);
        // siw's Write RTR carries STag 1 (siw_mpa2p2p_rping.pcap frame 8).
        let siw = [0xC1, 0x40, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(RtrType::classify_ulpdu(&siw), Some(RtrType::Write));
    }
}
