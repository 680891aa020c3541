//! Protocol errors and the Terminate codes they map to.
//!
//! Every error that the protocol core can detect in bytes received from the network is one of
//! the small `Copy` enums below, and each maps to exactly one Terminate triple
//! (layer, error type, error code) as RDMAP §4.8 (Figure 9), DDP §7.2 and RFC 6581 §8 define
//! them (wire values in `WIRE-FORMATS.md` §3.5 and §4.6). The reverse mapping
//! ([`ProtocolError::from_code`]) decodes a received Terminate for the local user.

use core::fmt;

/// The layer nibble of a Terminate control word (RDMAP-4.8; WIRE-FORMATS §4.6.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Layer {
    /// 0x0: RDMAP.
    Rdmap = 0,
    /// 0x1: DDP.
    Ddp = 1,
    /// 0x2: the lower layer protocol; error type 0 is MPA.
    Llp = 2,
}

impl Layer {
    /// The layer for a nibble value, if it is one of the three defined layers.
    pub const fn from_nibble(value: u8) -> Option<Layer> {
        match value {
            0 => Some(Layer::Rdmap),
            1 => Some(Layer::Ddp),
            2 => Some(Layer::Llp),
            _ => None,
        }
    }
}

/// The (layer, error type, error code) triple carried in a Terminate control word.
///
/// Layer and error type are 4-bit fields; constructing a code masks them to 4 bits so every
/// value of this type can be put on the wire as it is.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TerminateCode {
    layer: u8,
    etype: u8,
    code: u8,
}

impl TerminateCode {
    /// A code from its three fields (layer and error type are masked to 4 bits).
    pub const fn new(layer: u8, etype: u8, code: u8) -> TerminateCode {
        TerminateCode {
            layer: layer & 0x0F,
            etype: etype & 0x0F,
            code,
        }
    }

    /// The layer nibble.
    pub const fn layer(self) -> u8 {
        self.layer
    }

    /// The error type nibble.
    pub const fn etype(self) -> u8 {
        self.etype
    }

    /// The error code octet.
    pub const fn code(self) -> u8 {
        self.code
    }

    /// The typed error this code stands for, if the code is a defined one.
    pub fn decode(self) -> Option<ProtocolError> {
        ProtocolError::from_code(self)
    }

    /// A one-line human description ("DDP tagged buffer: invalid STag"); codes that no spec
    /// defines are described as such rather than guessed at.
    pub fn description(self) -> &'static str {
        match self.decode() {
            Some(e) => e.description(),
            None => "undefined Terminate code",
        }
    }
}

impl fmt::Debug for TerminateCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "TerminateCode({:#x}/{:#x}/{:#04x})",
            self.layer, self.etype, self.code
        )
    }
}

impl fmt::Display for TerminateCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "layer {:#x} type {:#x} code {:#04x} ({})",
            self.layer,
            self.etype,
            self.code,
            self.description()
        )
    }
}

/// RDMAP errors (Terminate layer 0x0; RDMAP-06 §4.8 Figure 9, WIRE-FORMATS §4.6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
// Each error prints its description and the Terminate code it maps to.
#[error("{d} [{l:#x}/{t:#x}/{c:#04x}]", d = self.description(), l = self.terminate_code().layer(), t = self.terminate_code().etype(), c = self.terminate_code().code())]
pub enum RdmapError {
    /// EType 0: local catastrophic error. The code is ignored on receive; we send 0xFF as
    /// Linux siw does (WIRE-FORMATS §4.6.3 note).
    LocalCatastrophic,
    /// EType 1 code 0x00: invalid STag.
    InvalidStag,
    /// EType 1 code 0x01: base or bounds violation.
    BaseOrBounds,
    /// EType 1 code 0x02: access rights violation.
    AccessRights,
    /// EType 1 code 0x03: STag not associated with the RDMAP stream.
    StagNotAssociated,
    /// EType 1 code 0x04: TO wrap.
    ToWrap,
    /// EType 1 code 0x09: STag cannot be invalidated (remote protection).
    ProtectionCannotInvalidate,
    /// EType 1 code 0xFF: unspecified remote protection error.
    ProtectionUnspecified,
    /// EType 2 code 0x05: invalid RDMAP version.
    InvalidVersion,
    /// EType 2 code 0x06: unexpected opcode.
    UnexpectedOpcode,
    /// EType 2 code 0x07: catastrophic error, limited to the RDMAP stream (also a misaligned
    /// atomic target, RFC 7306 §8.2).
    CatastrophicStream,
    /// EType 2 code 0x08: catastrophic error, global.
    CatastrophicGlobal,
    /// EType 2 code 0x09: STag cannot be invalidated (remote operation).
    OperationCannotInvalidate,
    /// EType 2 code 0xFF: unspecified remote operation error.
    OperationUnspecified,
}

impl RdmapError {
    /// The Terminate triple for this error.
    pub const fn terminate_code(self) -> TerminateCode {
        use RdmapError::*;
        let (etype, code) = match self {
            LocalCatastrophic => (0x0, 0xFF),
            InvalidStag => (0x1, 0x00),
            BaseOrBounds => (0x1, 0x01),
            AccessRights => (0x1, 0x02),
            StagNotAssociated => (0x1, 0x03),
            ToWrap => (0x1, 0x04),
            ProtectionCannotInvalidate => (0x1, 0x09),
            ProtectionUnspecified => (0x1, 0xFF),
            InvalidVersion => (0x2, 0x05),
            UnexpectedOpcode => (0x2, 0x06),
            CatastrophicStream => (0x2, 0x07),
            CatastrophicGlobal => (0x2, 0x08),
            OperationCannotInvalidate => (0x2, 0x09),
            OperationUnspecified => (0x2, 0xFF),
        };
        TerminateCode::new(Layer::Rdmap as u8, etype, code)
    }

    /// The error for an RDMAP-layer (etype, code) pair, if defined. EType 0 matches any code
    /// (the IANA registry entry 0x0/0x0/ALL).
    pub const fn from_etype_code(etype: u8, code: u8) -> Option<RdmapError> {
        use RdmapError::*;
        Some(match (etype, code) {
            (0x0, _) => LocalCatastrophic,
            (0x1, 0x00) => InvalidStag,
            (0x1, 0x01) => BaseOrBounds,
            (0x1, 0x02) => AccessRights,
            (0x1, 0x03) => StagNotAssociated,
            (0x1, 0x04) => ToWrap,
            (0x1, 0x09) => ProtectionCannotInvalidate,
            (0x1, 0xFF) => ProtectionUnspecified,
            (0x2, 0x05) => InvalidVersion,
            (0x2, 0x06) => UnexpectedOpcode,
            (0x2, 0x07) => CatastrophicStream,
            (0x2, 0x08) => CatastrophicGlobal,
            (0x2, 0x09) => OperationCannotInvalidate,
            (0x2, 0xFF) => OperationUnspecified,
            _ => return None,
        })
    }

    /// True for the remote protection errors (EType 1), whose Terminate carries the RDMA
    /// header of an offending Read Request (RDMAP-06 §4.8 Figure 10).
    pub const fn is_protection(self) -> bool {
        self.terminate_code().etype() == 0x1
    }

    /// A one-line human description.
    pub const fn description(self) -> &'static str {
        use RdmapError::*;
        match self {
            LocalCatastrophic => "RDMAP: local catastrophic error",
            InvalidStag => "RDMAP remote protection: invalid STag",
            BaseOrBounds => "RDMAP remote protection: base or bounds violation",
            AccessRights => "RDMAP remote protection: access rights violation",
            StagNotAssociated => "RDMAP remote protection: STag not associated with RDMAP stream",
            ToWrap => "RDMAP remote protection: TO wrap",
            ProtectionCannotInvalidate => "RDMAP remote protection: STag cannot be invalidated",
            ProtectionUnspecified => "RDMAP remote protection: unspecified error",
            InvalidVersion => "RDMAP remote operation: invalid RDMAP version",
            UnexpectedOpcode => "RDMAP remote operation: unexpected opcode",
            CatastrophicStream => "RDMAP remote operation: catastrophic error, stream",
            CatastrophicGlobal => "RDMAP remote operation: catastrophic error, global",
            OperationCannotInvalidate => "RDMAP remote operation: STag cannot be invalidated",
            OperationUnspecified => "RDMAP remote operation: unspecified error",
        }
    }
}

/// DDP errors (Terminate layer 0x1; DDP-04 §7.2, WIRE-FORMATS §3.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
// Each error prints its description and the Terminate code it maps to.
#[error("{d} [{l:#x}/{t:#x}/{c:#04x}]", d = self.description(), l = self.terminate_code().layer(), t = self.terminate_code().etype(), c = self.terminate_code().code())]
pub enum DdpError {
    /// EType 0 code 0x00: local catastrophic error.
    LocalCatastrophic,
    /// EType 1 code 0x00: tagged buffer, invalid STag.
    TaggedInvalidStag,
    /// EType 1 code 0x01: tagged buffer, base or bounds violation.
    TaggedBaseOrBounds,
    /// EType 1 code 0x02: tagged buffer, STag not associated with the DDP stream.
    TaggedStagNotAssociated,
    /// EType 1 code 0x03: tagged buffer, TO wrap.
    TaggedToWrap,
    /// EType 1 code 0x04: tagged buffer, invalid DDP version.
    TaggedInvalidVersion,
    /// EType 2 code 0x01: untagged buffer, invalid QN.
    UntaggedInvalidQn,
    /// EType 2 code 0x02: untagged buffer, invalid MSN, no buffer available.
    UntaggedNoBuffer,
    /// EType 2 code 0x03: untagged buffer, invalid MSN, MSN out of range.
    UntaggedMsnOutOfRange,
    /// EType 2 code 0x04: untagged buffer, invalid MO.
    UntaggedInvalidMo,
    /// EType 2 code 0x05: untagged buffer, DDP message too long for the buffer.
    UntaggedTooLong,
    /// EType 2 code 0x06: untagged buffer, invalid DDP version.
    UntaggedInvalidVersion,
}

impl DdpError {
    /// The Terminate triple for this error.
    pub const fn terminate_code(self) -> TerminateCode {
        use DdpError::*;
        let (etype, code) = match self {
            LocalCatastrophic => (0x0, 0x00),
            TaggedInvalidStag => (0x1, 0x00),
            TaggedBaseOrBounds => (0x1, 0x01),
            TaggedStagNotAssociated => (0x1, 0x02),
            TaggedToWrap => (0x1, 0x03),
            TaggedInvalidVersion => (0x1, 0x04),
            UntaggedInvalidQn => (0x2, 0x01),
            UntaggedNoBuffer => (0x2, 0x02),
            UntaggedMsnOutOfRange => (0x2, 0x03),
            UntaggedInvalidMo => (0x2, 0x04),
            UntaggedTooLong => (0x2, 0x05),
            UntaggedInvalidVersion => (0x2, 0x06),
        };
        TerminateCode::new(Layer::Ddp as u8, etype, code)
    }

    /// The error for a DDP-layer (etype, code) pair, if defined.
    pub const fn from_etype_code(etype: u8, code: u8) -> Option<DdpError> {
        use DdpError::*;
        Some(match (etype, code) {
            (0x0, _) => LocalCatastrophic,
            (0x1, 0x00) => TaggedInvalidStag,
            (0x1, 0x01) => TaggedBaseOrBounds,
            (0x1, 0x02) => TaggedStagNotAssociated,
            (0x1, 0x03) => TaggedToWrap,
            (0x1, 0x04) => TaggedInvalidVersion,
            (0x2, 0x01) => UntaggedInvalidQn,
            (0x2, 0x02) => UntaggedNoBuffer,
            (0x2, 0x03) => UntaggedMsnOutOfRange,
            (0x2, 0x04) => UntaggedInvalidMo,
            (0x2, 0x05) => UntaggedTooLong,
            (0x2, 0x06) => UntaggedInvalidVersion,
            _ => return None,
        })
    }

    /// A one-line human description.
    pub const fn description(self) -> &'static str {
        use DdpError::*;
        match self {
            LocalCatastrophic => "DDP: local catastrophic error",
            TaggedInvalidStag => "DDP tagged buffer: invalid STag",
            TaggedBaseOrBounds => "DDP tagged buffer: base or bounds violation",
            TaggedStagNotAssociated => "DDP tagged buffer: STag not associated with DDP stream",
            TaggedToWrap => "DDP tagged buffer: TO wrap",
            TaggedInvalidVersion => "DDP tagged buffer: invalid DDP version",
            UntaggedInvalidQn => "DDP untagged buffer: invalid QN",
            UntaggedNoBuffer => "DDP untagged buffer: invalid MSN, no buffer available",
            UntaggedMsnOutOfRange => "DDP untagged buffer: invalid MSN, MSN out of range",
            UntaggedInvalidMo => "DDP untagged buffer: invalid MO",
            UntaggedTooLong => "DDP untagged buffer: message too long for buffer",
            UntaggedInvalidVersion => "DDP untagged buffer: invalid DDP version",
        }
    }
}

/// MPA errors (Terminate layer 0x2, error type 0x0; mpa-08 §8 codes 1-4, RFC 6581 §8 codes
/// 5-7; WIRE-FORMATS §4.6.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
// Each error prints its description and the Terminate code it maps to.
#[error("{d} [{l:#x}/{t:#x}/{c:#04x}]", d = self.description(), l = self.terminate_code().layer(), t = self.terminate_code().etype(), c = self.terminate_code().code())]
pub enum MpaError {
    /// Code 0x01: TCP connection closed, terminated or lost.
    TcpLost,
    /// Code 0x02: received MPA CRC does not match (MPA-8-*; the half connection stops
    /// delivering FPDUs but MPA does not close TCP itself).
    CrcMismatch,
    /// Code 0x03: a marker and the ULPDU_Length chain disagree about where an FPDU starts.
    MarkerMismatch,
    /// Code 0x04: invalid MPA Request or Reply frame (TCP is closed at once).
    InvalidStartupFrame,
    /// Code 0x05: local catastrophic error during enhanced connection setup (RFC 6581 §8).
    LocalCatastrophic,
    /// Code 0x06: insufficient IRD resources (RFC 6581 §8).
    InsufficientIrd,
    /// Code 0x07: no matching RTR option (RFC 6581 §8).
    NoMatchingRtr,
}

impl MpaError {
    /// The Terminate triple for this error (layer 2, error type 0).
    pub const fn terminate_code(self) -> TerminateCode {
        use MpaError::*;
        let code = match self {
            TcpLost => 0x01,
            CrcMismatch => 0x02,
            MarkerMismatch => 0x03,
            InvalidStartupFrame => 0x04,
            LocalCatastrophic => 0x05,
            InsufficientIrd => 0x06,
            NoMatchingRtr => 0x07,
        };
        TerminateCode::new(Layer::Llp as u8, 0x0, code)
    }

    /// The error for an LLP-layer (etype, code) pair, if defined (only EType 0, MPA).
    pub const fn from_etype_code(etype: u8, code: u8) -> Option<MpaError> {
        use MpaError::*;
        Some(match (etype, code) {
            (0x0, 0x01) => TcpLost,
            (0x0, 0x02) => CrcMismatch,
            (0x0, 0x03) => MarkerMismatch,
            (0x0, 0x04) => InvalidStartupFrame,
            (0x0, 0x05) => LocalCatastrophic,
            (0x0, 0x06) => InsufficientIrd,
            (0x0, 0x07) => NoMatchingRtr,
            _ => return None,
        })
    }

    /// A one-line human description.
    pub const fn description(self) -> &'static str {
        use MpaError::*;
        match self {
            TcpLost => "MPA: TCP connection closed, terminated or lost",
            CrcMismatch => "MPA: CRC mismatch",
            MarkerMismatch => "MPA: marker and ULPDU_Length disagree",
            InvalidStartupFrame => "MPA: invalid Request or Reply frame",
            LocalCatastrophic => "MPA: local catastrophic error in enhanced connection setup",
            InsufficientIrd => "MPA: insufficient IRD resources",
            NoMatchingRtr => "MPA: no matching RTR option",
        }
    }
}

/// Any error the protocol core reports to a peer in a Terminate, by layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
// Each error prints its description and the Terminate code it maps to.
#[error("{d} [{l:#x}/{t:#x}/{c:#04x}]", d = self.description(), l = self.terminate_code().layer(), t = self.terminate_code().etype(), c = self.terminate_code().code())]
pub enum ProtocolError {
    /// Layer 0.
    Rdmap(RdmapError),
    /// Layer 1.
    Ddp(DdpError),
    /// Layer 2, error type 0.
    Mpa(MpaError),
}

/// Which copied headers a Terminate for an error carries (RDMAP-06 §4.8 Figure 10, §7.1;
/// WIRE-FORMATS §4.6.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TerminateHeaders {
    /// DDP Segment Length and the offending DDP header are included (D bit).
    pub ddp: bool,
    /// The RDMA header of an offending Read Request is included (R bit). Only a Read Request
    /// has an RDMA header to copy; the sender sets R only when the offending message was one.
    pub rdma_if_read_request: bool,
}

impl ProtocolError {
    /// The Terminate triple for this error.
    pub const fn terminate_code(self) -> TerminateCode {
        match self {
            ProtocolError::Rdmap(e) => e.terminate_code(),
            ProtocolError::Ddp(e) => e.terminate_code(),
            ProtocolError::Mpa(e) => e.terminate_code(),
        }
    }

    /// The typed error for a received Terminate triple, if the triple is defined.
    pub const fn from_code(code: TerminateCode) -> Option<ProtocolError> {
        match Layer::from_nibble(code.layer()) {
            Some(Layer::Rdmap) => match RdmapError::from_etype_code(code.etype(), code.code()) {
                Some(e) => Some(ProtocolError::Rdmap(e)),
                None => None,
            },
            Some(Layer::Ddp) => match DdpError::from_etype_code(code.etype(), code.code()) {
                Some(e) => Some(ProtocolError::Ddp(e)),
                None => None,
            },
            Some(Layer::Llp) => match MpaError::from_etype_code(code.etype(), code.code()) {
                Some(e) => Some(ProtocolError::Mpa(e)),
                None => None,
            },
            None => None,
        }
    }

    /// Which headers a Terminate reporting this error copies from the offending message, per
    /// RDMAP-06 Figure 10 (RDMAP-4.8-*): none for local catastrophic and LLP errors; the DDP
    /// header for DDP errors and RDMAP remote operation/protection errors; additionally the
    /// Read Request header for remote protection errors caused by a Read Request.
    ///
    /// Exception, as Linux siw does (WIRE-FORMATS §4.6.7 item 4): an invalid DDP or RDMAP
    /// version and an unexpected opcode copy no header, because the layout of the offending
    /// segment is then unknown (its header may not even be as long as a DDP header).
    pub const fn terminate_headers(self) -> TerminateHeaders {
        let (ddp, rdma) = match self {
            ProtocolError::Rdmap(
                RdmapError::LocalCatastrophic
                | RdmapError::InvalidVersion
                | RdmapError::UnexpectedOpcode,
            ) => (false, false),
            ProtocolError::Rdmap(e) => (true, e.is_protection()),
            ProtocolError::Ddp(
                DdpError::LocalCatastrophic
                | DdpError::TaggedInvalidVersion
                | DdpError::UntaggedInvalidVersion,
            ) => (false, false),
            ProtocolError::Ddp(_) => (true, false),
            ProtocolError::Mpa(_) => (false, false),
        };
        TerminateHeaders {
            ddp,
            rdma_if_read_request: rdma,
        }
    }

    /// A one-line human description.
    pub const fn description(self) -> &'static str {
        match self {
            ProtocolError::Rdmap(e) => e.description(),
            ProtocolError::Ddp(e) => e.description(),
            ProtocolError::Mpa(e) => e.description(),
        }
    }
}

impl From<RdmapError> for ProtocolError {
    fn from(e: RdmapError) -> Self {
        ProtocolError::Rdmap(e)
    }
}

impl From<DdpError> for ProtocolError {
    fn from(e: DdpError) -> Self {
        ProtocolError::Ddp(e)
    }
}

impl From<MpaError> for ProtocolError {
    fn from(e: MpaError) -> Self {
        ProtocolError::Mpa(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL_RDMAP: [RdmapError; 14] = {
        use RdmapError::*;
        [
            LocalCatastrophic,
            InvalidStag,
            BaseOrBounds,
            AccessRights,
            StagNotAssociated,
            ToWrap,
            ProtectionCannotInvalidate,
            ProtectionUnspecified,
            InvalidVersion,
            UnexpectedOpcode,
            CatastrophicStream,
            CatastrophicGlobal,
            OperationCannotInvalidate,
            OperationUnspecified,
        ]
    };
    const ALL_DDP: [DdpError; 12] = {
        use DdpError::*;
        [
            LocalCatastrophic,
            TaggedInvalidStag,
            TaggedBaseOrBounds,
            TaggedStagNotAssociated,
            TaggedToWrap,
            TaggedInvalidVersion,
            UntaggedInvalidQn,
            UntaggedNoBuffer,
            UntaggedMsnOutOfRange,
            UntaggedInvalidMo,
            UntaggedTooLong,
            UntaggedInvalidVersion,
        ]
    };
    const ALL_MPA: [MpaError; 7] = {
        use MpaError::*;
        [
            TcpLost,
            CrcMismatch,
            MarkerMismatch,
            InvalidStartupFrame,
            LocalCatastrophic,
            InsufficientIrd,
            NoMatchingRtr,
        ]
    };

    fn all() -> Vec<ProtocolError> {
        ALL_RDMAP
            .iter()
            .map(|&e| e.into())
            .chain(ALL_DDP.iter().map(|&e| e.into()))
            .chain(ALL_MPA.iter().map(|&e| e.into()))
            .collect()
    }

    #[test]
    fn every_error_round_trips_through_its_terminate_code() {
        for e in all() {
            assert_eq!(ProtocolError::from_code(e.terminate_code()), Some(e), "{e}");
        }
    }

    #[test]
    fn codes_are_distinct() {
        let codes: std::collections::HashSet<_> =
            all().iter().map(|e| e.terminate_code()).collect();
        assert_eq!(codes.len(), all().len());
    }

    /// Spot checks against the wire values in WIRE-FORMATS §3.5, §4.6.3 and §4.6.5, which
    /// Linux siw (iwarp.h), cxgb4 and Wireshark agree on.
    #[test]
    fn wire_values_match_the_tables() {
        // RDMAP-4.8: remote protection, invalid STag 0x0/0x1/0x00; unexpected opcode 0x0/0x2/0x06.
        assert_eq!(
            RdmapError::InvalidStag.terminate_code(),
            TerminateCode::new(0, 1, 0x00)
        );
        assert_eq!(
            RdmapError::AccessRights.terminate_code(),
            TerminateCode::new(0, 1, 0x02)
        );
        assert_eq!(
            RdmapError::UnexpectedOpcode.terminate_code(),
            TerminateCode::new(0, 2, 0x06)
        );
        assert_eq!(
            RdmapError::CatastrophicStream.terminate_code(),
            TerminateCode::new(0, 2, 7)
        );
        // DDP-7.2: tagged STag not associated is 0x1/0x1/0x02 (not 0x03 as in RDMAP).
        assert_eq!(
            DdpError::TaggedStagNotAssociated.terminate_code(),
            TerminateCode::new(1, 1, 0x02)
        );
        assert_eq!(
            DdpError::UntaggedTooLong.terminate_code(),
            TerminateCode::new(1, 2, 0x05)
        );
        // MPA2-8: codes 5-7 of RFC 6581.
        assert_eq!(
            MpaError::NoMatchingRtr.terminate_code(),
            TerminateCode::new(2, 0, 0x07)
        );
        assert_eq!(
            MpaError::CrcMismatch.terminate_code(),
            TerminateCode::new(2, 0, 0x02)
        );
    }

    #[test]
    fn local_catastrophic_accepts_any_code() {
        assert_eq!(
            TerminateCode::new(0, 0, 0x42).decode(),
            Some(ProtocolError::Rdmap(RdmapError::LocalCatastrophic))
        );
        assert_eq!(TerminateCode::new(3, 0, 0).decode(), None);
        assert_eq!(TerminateCode::new(2, 1, 1).decode(), None);
        assert_eq!(TerminateCode::new(1, 2, 0x00).decode(), None);
    }

    #[test]
    fn terminate_headers_follow_figure_10() {
        let h = ProtocolError::from(RdmapError::AccessRights).terminate_headers();
        assert!(h.ddp && h.rdma_if_read_request);
        let h = ProtocolError::from(RdmapError::CatastrophicStream).terminate_headers();
        assert!(h.ddp && !h.rdma_if_read_request);
        // Version and opcode errors copy nothing: the segment's layout is unknown (siw).
        for e in [
            ProtocolError::from(RdmapError::UnexpectedOpcode),
            ProtocolError::from(RdmapError::InvalidVersion),
            ProtocolError::from(DdpError::TaggedInvalidVersion),
            ProtocolError::from(DdpError::UntaggedInvalidVersion),
        ] {
            assert!(!e.terminate_headers().ddp, "{e}");
        }
        let h = ProtocolError::from(DdpError::UntaggedNoBuffer).terminate_headers();
        assert!(h.ddp && !h.rdma_if_read_request);
        let h = ProtocolError::from(MpaError::CrcMismatch).terminate_headers();
        assert!(!h.ddp && !h.rdma_if_read_request);
        let h = ProtocolError::from(RdmapError::LocalCatastrophic).terminate_headers();
        assert!(!h.ddp);
    }

    #[test]
    fn display_names_the_triple() {
        let s = ProtocolError::from(DdpError::TaggedInvalidStag).to_string();
        assert!(
            s.contains("invalid STag") && s.contains("0x1/0x1/0x00"),
            "{s}"
        );
        let s = TerminateCode::new(0xF, 0xF, 0xEE).to_string();
        assert!(s.contains("undefined"), "{s}");
    }
}
