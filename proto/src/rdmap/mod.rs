//! RDMAP semantics, sans-IO (RDMAP-06 §5-§7, RFC 7306 §5-§8).
//!
//! The wire decoding of a segment lives in [`crate::wire::segment`]; this module adds the
//! checks that need connection state or the local STag table, the responder's work for
//! Read and Atomic Requests, and the Terminate message in both directions:
//!
//! - [`check_inbound`]: per-message receive checks on a decoded segment (RFC 7306 support,
//!   control messages that must be a single segment).
//! - [`check_remote_access`], [`check_write_access`] and [`invalidate_error`]: STag checks with the remote
//!   protection error mapping; the STag table itself belongs to the engine, which answers a
//!   lookup with an [`AccessRegion`] or a [`StagFault`].
//! - [`read`]: Read Request validation, the Read Response plan, IRD accounting.
//! - [`atomic`]: FetchAdd and CmpSwap on a 64-bit word; AOpCode and target checks
//!   ([`atomic::handle_atomic_request`]), and the alignment rule for the address a Tagged
//!   Offset resolves to ([`atomic::check_alignment`]).
//! - [`terminate`]: Terminate construction from any [`ProtocolError`] plus the offending
//!   segment, and decoding of a received Terminate for the local user.
//!
//! Nothing here allocates, blocks or reads a clock.

pub mod atomic;
pub mod read;
pub mod terminate;

pub use read::{handle_read_request, InboundReadQueue, ReadResponsePlan};
pub use terminate::{
    emit_terminate, emit_terminate_delivered, terminate_header, terminate_header_delivered,
    Offending, TerminateReport,
};

use crate::error::{DdpError, ProtocolError, RdmapError};
use crate::wire::ddp::DdpBuffer;
use crate::wire::rdmap::Opcode;
use crate::wire::segment::SegmentRepr;

/// The RDMAP features a stream has agreed on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RdmapConfig {
    /// RFC 7306 Atomic Request/Response were agreed at the ULP level (EXT-1.1-1).
    pub atomics: bool,
    /// RFC 7306 Immediate Data (with SE) was agreed at the ULP level.
    pub immediate_data: bool,
}

/// Receive checks on a decoded segment beyond those of [`crate::wire::segment`]
/// (RDMAP-7.2-2, EXT-8.2-2):
///
/// - An RFC 7306 opcode the stream did not agree on is an unexpected opcode, 0x0/0x2/0x06,
///   as it is for an RFC 5040 receiver (WIRE-FORMATS §4.2 notes; Linux siw implements
///   0x0-0x7 only).
/// - Messages without ULP payload (Read Request, Terminate, the RFC 7306 messages) must be
///   a whole message in one segment: L = 1 and MO = 0. The segment decoder already requires
///   the header to fill the segment; a message that continues (L = 0) or starts later
///   (MO > 0) is therefore longer than its header, which is
///   [`RdmapError::CatastrophicStream`] as for other malformed RDMAP headers.
///
/// The Invalidate STag of a Send with Invalidate is checked by the caller against its STag
/// table ([`invalidate_error`]); DDP checks (QN validity, MSN, MO, buffers) are
/// [`crate::ddp`]'s, and a DDP fault of the same segment is reported before the whole-message
/// error (RDMAP-7.2-6: DDP validates every untagged field before RDMAP judges the message).
pub fn check_inbound(seg: &SegmentRepr, config: &RdmapConfig) -> Result<(), ProtocolError> {
    let agreed = match seg.opcode {
        Opcode::AtomicRequest | Opcode::AtomicResponse => config.atomics,
        Opcode::ImmediateData | Opcode::ImmediateDataSe => config.immediate_data,
        _ => true,
    };
    if !agreed {
        return Err(RdmapError::UnexpectedOpcode.into());
    }
    if !seg.opcode.carries_payload() {
        let whole = match seg.buffer {
            DdpBuffer::Untagged { mo, .. } => seg.last && mo == 0,
            DdpBuffer::Tagged { .. } => seg.last,
        };
        if !whole {
            return Err(RdmapError::CatastrophicStream.into());
        }
    }
    Ok(())
}

/// What the engine's STag table knows about a tagged buffer that is valid for this stream:
/// its legal TO range (as in [`crate::ddp::TaggedRegion`]) and its remote access rights,
/// which RDMAP checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AccessRegion {
    /// The lowest legal Tagged Offset of the buffer (0 for zero-based regions, the virtual
    /// address otherwise).
    pub base: u64,
    /// The buffer length in octets.
    pub len: u64,
    /// Remote reads (Read Requests, atomics) are allowed.
    pub remote_read: bool,
    /// Remote writes (Writes, atomics) are allowed.
    pub remote_write: bool,
}

/// Why an STag lookup failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StagFault {
    /// No valid buffer has this STag (unknown index, stale key, invalidated).
    Invalid,
    /// The STag is valid but not associated with this stream (another protection domain,
    /// or scoped to another stream; RDMAP-8.1.1-2, RDMAP-8.1.1-3).
    NotAssociated,
}

/// The kind of remote access to check for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// A Read Request reads the source buffer.
    RemoteRead,
    /// An atomic reads and writes its target.
    RemoteAtomic,
}

/// Checks a remote access of `len` octets at `to` against the result of an STag lookup and
/// returns the remote protection error (Terminate layer 0, EType 1) the first failing check
/// earns (RDMAP-7.2-9..13, RDMAP-8.1.1-4; WIRE-FORMATS §4.5):
///
/// 1. invalid STag → 0x00 [`RdmapError::InvalidStag`];
/// 2. not associated with the stream → 0x03 [`RdmapError::StagNotAssociated`];
/// 3. the buffer does not allow the access → 0x02 [`RdmapError::AccessRights`];
/// 4. `to + len` wraps the 64-bit TO space → 0x04 [`RdmapError::ToWrap`];
/// 5. `to` or `to + len` outside the buffer → 0x01 [`RdmapError::BaseOrBounds`].
///
/// The order of 1-3 and 5 is siw's (`siw_check_mem`); the wrap check comes before the
/// bounds check so that the bounds arithmetic never wraps. `len == 0` passes checks 4-5
/// if `to` lies within the buffer or at its end.
pub fn check_remote_access(
    lookup: Result<AccessRegion, StagFault>,
    to: u64,
    len: u64,
    access: Access,
) -> Result<(), RdmapError> {
    let region = match lookup {
        Ok(r) => r,
        Err(StagFault::Invalid) => return Err(RdmapError::InvalidStag),
        Err(StagFault::NotAssociated) => return Err(RdmapError::StagNotAssociated),
    };
    let allowed = match access {
        Access::RemoteRead => region.remote_read,
        Access::RemoteAtomic => region.remote_read && region.remote_write,
    };
    if !allowed {
        return Err(RdmapError::AccessRights);
    }
    // DDP-7.1-14 / RDMAP-7.2: the 64-bit sum of TO and length must not wrap. The same
    // definition as DDP's (`crate::ddp`), so that a range RDMAP accepts is one DDP can carry.
    if to_range_wraps(to, len) {
        return Err(RdmapError::ToWrap);
    }
    let start = u128::from(to);
    let end = start + u128::from(len);
    let base = u128::from(region.base);
    let limit = base + u128::from(region.len);
    if start < base || end > limit {
        return Err(RdmapError::BaseOrBounds);
    }
    Ok(())
}

/// True when the 64-bit sum of `to` and `len` wraps (DDP-7.1-14): the one definition of
/// "TO wrap" used by RDMAP's checks, the Read Request sink check and DDP segmentation, so the
/// layers never disagree about a range ending exactly at 2^64 (it wraps: the sum is 0).
pub const fn to_range_wraps(to: u64, len: u64) -> bool {
    to.checked_add(len).is_none()
}

/// The access check for the target of an inbound RDMA Write (RDMAP-8.1.1-6): the buffer
/// must allow remote writes.
///
/// A Write cannot cause an RDMAP remote protection error (RDMAP-06 Figure 10 lists only
/// Read Requests and the invalidating Sends), so a violation is a DDP tagged buffer error.
/// DDP has no code for it (WIRE-FORMATS §3.5, "tagged check 2"); like Linux siw
/// (`siw_tagged_error` maps a permission failure to invalid STag) we report
/// [`DdpError::TaggedInvalidStag`], 0x1/0x1/0x00. STag validity and bounds of a Write are
/// DDP's checks ([`crate::ddp`]).
pub const fn check_write_access(region: &AccessRegion) -> Result<(), DdpError> {
    if region.remote_write {
        Ok(())
    } else {
        Err(DdpError::TaggedInvalidStag)
    }
}

/// Why a remote invalidation (Send with Invalidate) failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InvalidateFault {
    /// No valid buffer has this STag (RDMAP-7.2-4).
    Invalid,
    /// The STag belongs to another protection domain or stream (RDMAP-7.2-5).
    NotAssociated,
    /// The STag may not be invalidated remotely, e.g. it is shared by several streams
    /// (RDMAP-8.1.1-8) or is of a kind only local invalidation may end.
    NotInvalidatable,
}

/// The Terminate error for a failed remote invalidation: "STag cannot be invalidated"
/// (RDMAP-5.3-11, RDMAP-5.3-12), as a remote protection error (0x0/0x1/0x09) when the STag
/// is not associated with the stream and as a remote operation error (0x0/0x2/0x09)
/// otherwise. This is Linux siw's split (`siw_rdmap_complete`: `-EACCES` from the PD check
/// gives remote protection, any other failure remote operation). The Terminate carries the
/// DDP header but no RDMA header ([`terminate`] module documentation).
pub const fn invalidate_error(fault: InvalidateFault) -> RdmapError {
    match fault {
        InvalidateFault::NotAssociated => RdmapError::ProtectionCannotInvalidate,
        InvalidateFault::Invalid | InvalidateFault::NotInvalidatable => {
            RdmapError::OperationCannotInvalidate
        }
    }
}
