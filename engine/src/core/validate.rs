//! Post-time checks of work requests, on the application's thread: what a request names
//! (STags, protection domain, access, bounds, queue room) is checked before it is queued,
//! with a typed error ([`EngineError`]); nothing is queued when a check fails.

use super::*;

/// Checks a send work request against the QP's shared state and the region table and
/// reserves its send queue slot. Used by [`EngineCore::post_send`] and by application
/// threads before they hand a request to a core, so misuse is refused before anything is
/// queued (nothing changes on error).
pub fn validate_send(shared: &QpShared, mrs: &MrTable, wr: &SendWr) -> Result<(), EngineError> {
    let st = shared.state();
    if st != QpState::Rts {
        return Err(EngineError::InvalidState(st));
    }
    let sges = wr.sges.as_slice();
    if sges.len() > shared.max_sge as usize {
        return Err(EngineError::TooManySges);
    }
    // Binds, fast registrations and Local Invalidates: what does not depend on the STag
    // states they will meet when executed (module `local`).
    if wr.op.is_local() {
        local::check_local_op(shared.pd, mrs, wr)?;
    }
    // RFC 7306 operations only on connections that use it (EXT-1.1-1): refused here,
    // typed, before anything reaches the wire.
    if wr.op.is_rfc7306() && !shared.rfc7306() {
        return Err(EngineError::NotSupported("RFC 7306"));
    }
    let is_read = matches!(wr.op, SendOp::Read { .. });
    if is_read && sges.len() > 1 {
        return Err(EngineError::ReadSgeCount);
    }
    // An atomic returns the original 8-octet word into at most one local SGE of exactly
    // 8 octets (EXT-5.2.2-*; as ibverbs' atomic SGE); Immediate Data carries no payload.
    let is_atomic = wr.op.is_atomic();
    if is_atomic && (sges.len() > 1 || sges.first().is_some_and(|s| s.len != 8)) {
        return Err(EngineError::AtomicSge);
    }
    // The message length, summed once.
    let total_len = wr.sges.total_len();
    if matches!(wr.op, SendOp::Immediate { .. }) && total_len != 0 {
        return Err(EngineError::MessageTooLong);
    }
    let is_read = is_read || is_atomic;
    if total_len > u64::from(u32::MAX) {
        return Err(EngineError::MessageTooLong);
    }
    // The remote range [TO, TO + length) must not wrap the 64-bit TO space: the Data Sink
    // would refuse it (DDP-7.1-14, RDMAP-7.2-13) and our segmenter cannot frame it, so it
    // is refused here, typed, rather than failing at transmit. An atomic's range is its
    // 8-octet word.
    let remote_to = match wr.op {
        SendOp::Write { remote_to, .. }
        | SendOp::WriteWithImm { remote_to, .. }
        | SendOp::Read { remote_to, .. }
        | SendOp::AtomicFetchAdd { remote_to, .. }
        | SendOp::AtomicCmpSwap { remote_to, .. } => Some(remote_to),
        _ => None,
    };
    let remote_len = if is_atomic { 8 } else { total_len };
    if remote_to.is_some_and(|to| to_range_wraps(to, remote_len)) {
        return Err(EngineError::RemoteToWrap);
    }
    for s in sges {
        check_sge(mrs, shared.pd, s, is_read)?;
    }
    if !shared.reserve_sq() {
        return Err(EngineError::QueueFull);
    }
    Ok(())
}

/// Checks a receive work request and reserves its receive queue slot (see
/// [`validate_send`]). Receives may be posted before the connection exists.
pub fn validate_recv(shared: &QpShared, mrs: &MrTable, wr: &RecvWr) -> Result<(), EngineError> {
    let st = shared.state();
    if !matches!(st, QpState::Idle | QpState::Connecting | QpState::Rts) {
        return Err(EngineError::InvalidState(st));
    }
    if shared.srq().is_some() {
        return Err(EngineError::UsesSrq);
    }
    let sges = wr.sges.as_slice();
    if sges.len() > shared.max_sge as usize {
        return Err(EngineError::TooManySges);
    }
    if wr.sges.total_len() > u64::from(u32::MAX) {
        return Err(EngineError::MessageTooLong);
    }
    for s in sges {
        check_sge(mrs, shared.pd, s, true)?;
    }
    if !shared.reserve_rq() {
        return Err(EngineError::QueueFull);
    }
    Ok(())
}

#[inline]
pub(super) fn check_sge(mrs: &MrTable, pd: PdId, s: &Sge, write: bool) -> Result<(), EngineError> {
    // Unguarded: the engine looks the key up again, guarded, when it touches the memory.
    mrs.check_local(Stag(s.stag), pd, write, s.to, u64::from(s.len))
        .map_err(|f| match f {
            Ok(LookupFault::AccessDenied) => EngineError::SgeAccess,
            Ok(LookupFault::InvalidStag | LookupFault::WrongPd | LookupFault::WrongQp) => {
                EngineError::SgeInvalidStag
            }
            Err(_) => EngineError::SgeOutOfBounds,
        })
}
