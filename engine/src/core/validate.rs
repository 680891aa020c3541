//! Post-time checks of work requests, on the application's thread: what a request names
//! (STags, protection domain, access, bounds, queue room) is checked before it is queued,
//! with a typed error ([`EngineError`]); nothing is queued when a check fails.

use super::*;

/// Checks a send work request against the QP's shared state and the region table and
/// reserves its send queue slot. Used by [`EngineCore::post_send`] and by application
/// threads before they hand a request to a core, so misuse is refused before anything is
/// queued (nothing changes on error).
pub fn validate_send(shared: &QpShared, mrs: &MrTable, wr: &SendWr) -> Result<(), EngineError> {
    // A Write or Send of one SGE (the common requests): the checks below that apply to
    // it, in the same order, with the same outcome (the test
    // `a_one_sge_write_or_send_is_checked_as_any`).
    if let ([s], true) = (wr.sges.as_slice(), fast_paths()) {
        match wr.op {
            SendOp::Write { remote_to, .. } => {
                return validate_one_sge(shared, mrs, Some(remote_to), s)
            }
            SendOp::Send | SendOp::SendSe => return validate_one_sge(shared, mrs, None, s),
            _ => {}
        }
    }
    validate_send_general(shared, mrs, wr)
}

/// [`validate_send`] of a request the verbs layer built over a queue pair's inline arena
/// (`QueuePair::post_send_inline`): the same checks and reservation, but for the SGE count
/// against [`QpShared::max_sge`]. The caller gave octets, not SGEs, and the one SGE over
/// the arena is the layer's own; the inline capacity is a limit of its own, as
/// `ibv_qp_cap`'s `max_inline_data` is beside `max_send_sge` (checked by the layer). With
/// the count asked, a queue pair made to send inline only (`max_sge` 0) refused every
/// inline post with [`EngineError::TooManySges`].
pub fn validate_send_inline(
    shared: &QpShared,
    mrs: &MrTable,
    wr: &SendWr,
) -> Result<(), EngineError> {
    validate_send_checks(shared, mrs, wr, false)
}

/// [`validate_send`] of a Write (to the remote TO `remote_to`) or a Send (`None`) of one
/// SGE `s`: the state, the SGE count (one), a Write's remote range, the SGE, the queue
/// room. None of the operation checks between them applies to these, and one SGE's
/// length (a `u32`) is never too long.
#[inline(always)]
fn validate_one_sge(
    shared: &QpShared,
    mrs: &MrTable,
    remote_to: Option<u64>,
    s: &Sge,
) -> Result<(), EngineError> {
    let st = shared.state();
    if st != QpState::Rts {
        return Err(EngineError::InvalidState(st));
    }
    if shared.max_sge == 0 {
        return Err(EngineError::TooManySges);
    }
    if remote_to.is_some_and(|to| to_range_wraps(to, u64::from(s.len))) {
        return Err(EngineError::RemoteToWrap);
    }
    if shared.sges_checked_at_post() {
        check_sge(mrs, shared.pd, s, false)?;
    }
    if !shared.reserve_sq() {
        return Err(EngineError::QueueFull);
    }
    Ok(())
}

/// [`validate_send`] of any request.
fn validate_send_general(shared: &QpShared, mrs: &MrTable, wr: &SendWr) -> Result<(), EngineError> {
    validate_send_checks(shared, mrs, wr, true)
}

/// [`validate_send_general`], with the SGE count against [`QpShared::max_sge`] asked only
/// if `count_sges` ([`validate_send_inline`] does not ask it).
#[inline(always)]
fn validate_send_checks(
    shared: &QpShared,
    mrs: &MrTable,
    wr: &SendWr,
    count_sges: bool,
) -> Result<(), EngineError> {
    let st = shared.state();
    if st != QpState::Rts {
        return Err(EngineError::InvalidState(st));
    }
    let sges = wr.sges.as_slice();
    if count_sges && sges.len() > shared.max_sge as usize {
        return Err(EngineError::TooManySges);
    }
    // Binds, fast registrations and Local Invalidates: what does not depend on the STag
    // states they will meet when executed (module `local`).
    if wr.op.is_local() {
        local::check_local_op(shared.pd, mrs, wr)?;
    }
    // RFC 7306 operations only on connections that use it (EXT-1.1-1): refused here,
    // typed, before anything reaches the wire. The connection's setting, fixed when it
    // was set up: the QP's own flag may have changed since, and a core would only flush
    // the request.
    if wr.op.is_rfc7306() && !shared.rfc7306_in_use() {
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
    // Reads and atomics need an ORD of at least 1 (RDMAP-6.1-1, EXT-5.2-1): with none
    // negotiated the request could never be issued.
    if (is_read || is_atomic) && shared.ord() == 0 {
        return Err(EngineError::NoReadCredits);
    }
    // The message length, summed once.
    let total_len = wr.sges.total_len();
    // EXT-6.3-2: named as such, not as a message longer than 2^32 - 1 octets.
    if matches!(wr.op, SendOp::Immediate { .. }) && total_len != 0 {
        return Err(EngineError::ImmediatePayload);
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
    // An atomic's remote TO is not checked for alignment: RFC 7306 §5.2.1 (EXT-5.2.1-2)
    // lets it "start at an arbitrary offset" as long as it represents an 8-aligned
    // address at the responder, which only the responder knows (a registration's base TO
    // need not be congruent to its address mod 8). A TO that resolves to an unaligned
    // word earns Terminate 0/2/07 from the responder (EXT-8.2-4/5).
    if shared.sges_checked_at_post() {
        for s in sges {
            check_sge(mrs, shared.pd, s, is_read)?;
        }
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
    validate_recv_checks(shared, mrs, wr)
}

/// The states in which a queue pair's posts are refused by [`validate_send`] and
/// [`validate_recv`] but accepted by the verbs as requests to be flushed
/// (`ibv_post_send(3)` / `ibv_post_recv(3)` on a QP in the error state): closing,
/// Terminate, error.
pub fn ends_in_flush(st: QpState) -> bool {
    matches!(st, QpState::Closing | QpState::Terminate | QpState::Error)
}

/// [`validate_recv`] for a queue pair that is closing or failed ([`ends_in_flush`]): the
/// same checks but the state's, and the slot reserved. The core queues the receive behind
/// those posted before it: flushed with them ([`WcStatus::FlushErr`], at once if the QP
/// failed), or filled by a message that still arrives while the connection closes.
pub fn validate_recv_late(
    shared: &QpShared,
    mrs: &MrTable,
    wr: &RecvWr,
) -> Result<(), EngineError> {
    let st = shared.state();
    if !ends_in_flush(st) {
        return Err(EngineError::InvalidState(st));
    }
    validate_recv_checks(shared, mrs, wr)
}

/// What [`validate_send`] reserves for a queue pair that is closing or failed
/// ([`ends_in_flush`]): its send queue slot, for a request the core completes with
/// [`WcStatus::FlushErr`] behind those posted before it, in order (`post_send_reserved`
/// flushes whatever reaches it outside RTS). Nothing of the request is checked: it is
/// neither sent nor executed.
pub fn reserve_flushed_send(shared: &QpShared) -> Result<(), EngineError> {
    let st = shared.state();
    if !ends_in_flush(st) {
        return Err(EngineError::InvalidState(st));
    }
    if !shared.reserve_sq() {
        return Err(EngineError::QueueFull);
    }
    Ok(())
}

/// [`validate_recv`]'s checks after the state's.
fn validate_recv_checks(shared: &QpShared, mrs: &MrTable, wr: &RecvWr) -> Result<(), EngineError> {
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
    if shared.sges_checked_at_post() {
        for s in sges {
            check_sge(mrs, shared.pd, s, true)?;
        }
    }
    if !shared.reserve_rq() {
        return Err(EngineError::QueueFull);
    }
    Ok(())
}

/// The checks a request's local keys get when they were not checked at post
/// ([`QpShared::sges_checked_at_post`] off): [`check_sge`] of each SGE that holds octets,
/// in order, the first failure. An SGE of no octets is passed over whatever its key, as
/// the copies pass it over (`gather`, `scatter`) and as rdma-core's providers do (siw's
/// `siw_check_sgl_tx`): nothing of the memory it names is touched.
#[inline]
pub(super) fn check_sges(
    mrs: &MrTable,
    pd: PdId,
    sges: &[Sge],
    write: bool,
) -> Result<(), EngineError> {
    sges.iter()
        .filter(|s| s.len != 0)
        .try_for_each(|s| check_sge(mrs, pd, s, write))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::Region;
    use crate::SgeList;
    use std::sync::Arc;

    /// A Write or Send of one SGE gets from the fast check exactly what the general one
    /// gives it,
    /// the reservation of a send queue slot included, over every combination of QP state,
    /// SGE limit, local key (valid, another PD's, a stale key, a region without local
    /// write), local range (inside, at the end, past it), remote range (up to and past the
    /// top of the TO space), send queue room and whether local keys are checked at post.
    #[test]
    fn a_one_sge_write_or_send_is_checked_as_any() {
        let mrs = MrTable::with_seed(16, 5);
        let (pd, other_pd) = (PdId(3), PdId(4));
        let region = |len| Arc::new(Region::allocate(len, 8).unwrap());
        let mine = mrs
            .register(region(4096), pd, Access::LOCAL_WRITE, 0x1000)
            .unwrap();
        let theirs = mrs
            .register(region(4096), other_pd, Access::LOCAL_WRITE, 0)
            .unwrap();
        let read_only = mrs.register(region(4096), pd, Access::empty(), 0).unwrap();
        let stale = Stag(mine.0 ^ 0x5A);
        let states = [
            QpState::Idle,
            QpState::Connecting,
            QpState::Rts,
            QpState::Closing,
            QpState::Error,
        ];
        let sges = [
            (mine, 0x1000, 64),
            (mine, 0x1000, 4096),
            (mine, 0x1000, 4097),
            (mine, 0x1FC0, 64),
            (mine, 0x1FC1, 64),
            (mine, 0x0FFF, 1),
            (mine, u64::MAX, 0),
            (mine, 0x1800, 0),
            (theirs, 0, 64),
            (read_only, 0, 64),
            (stale, 0x1000, 64),
            (Stag(0), 0, 0),
        ];
        let tos = [
            0,
            1 << 40,
            u64::MAX - 64,
            u64::MAX - 63,
            u64::MAX,
            u64::MAX - 4096,
        ];
        // `validate_send` takes its fast path here.
        assert!(fast_paths());
        let mut cases = 0;
        for st in states {
            for max_sge in [0, 1, 4] {
                for &(stag, to, len) in &sges {
                    for op in tos
                        .iter()
                        .map(|&to| SendOp::Write {
                            remote_stag: 0x77,
                            remote_to: to,
                        })
                        .chain([SendOp::Send, SendOp::SendSe])
                    {
                        for (room, at_post) in [(true, true), (false, true), (true, false)] {
                            let sge = Sge {
                                stag: stag.0,
                                to,
                                len,
                            };
                            let wr = SendWr {
                                wr_id: 1,
                                op,
                                sges: SgeList::from_slice(&[sge]).unwrap(),
                                signaled: true,
                                fence: false,
                            };
                            let outcome = |general: bool| {
                                let shared = QpShared::new(pd, 2, 2, max_sge);
                                shared.set_sges_checked_at_post(at_post).unwrap();
                                shared.set_state(st);
                                if !room {
                                    assert!(shared.reserve_sq() && shared.reserve_sq());
                                }
                                let r = if general {
                                    validate_send_general(&shared, &mrs, &wr)
                                } else {
                                    validate_send(&shared, &mrs, &wr)
                                };
                                (r, shared.sq_used())
                            };
                            let (fast, general) = (outcome(false), outcome(true));
                            assert_eq!(
                                fast, general,
                                "{st:?} {max_sge} {sge:?} {op:?} checked at post: {at_post}"
                            );
                            // Not checked at post, an SGE error never comes from here.
                            assert!(
                                at_post
                                    || !matches!(
                                        general.0,
                                        Err(EngineError::SgeInvalidStag
                                            | EngineError::SgeAccess
                                            | EngineError::SgeOutOfBounds)
                                    ),
                                "{st:?} {max_sge} {sge:?} {op:?}: {:?}",
                                general.0
                            );
                            cases += usize::from(general.0.is_ok());
                        }
                    }
                }
            }
        }
        // Some combinations pass, so the comparison covers success too.
        assert!(cases > 0);
    }
}
