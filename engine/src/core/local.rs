//! Send queue work requests that run locally, in send queue order, without a message:
//! memory window binds, fast registrations and Local Invalidates (issue 5; docs/engine.md,
//! "Memory windows, fast registration, invalidation").
//!
//! Each runs when it reaches the sending position: every earlier request has started and
//! been framed whole, so a later Send that advertises the STag is framed only after the
//! STag is valid. With `fence` it also waits for earlier RDMA Reads and atomics; a Local
//! Invalidate also waits for the earlier requests that read through its STag and whose
//! FPDUs sent from registered memory are not acknowledged yet (module `txrec`). What does
//! not depend on STag states is checked at post time ([`check_local_op`]), with a typed
//! error; what does (a fast registration of an STag still valid, a bind whose region was
//! deregistered meanwhile, a new key the STag has then) fails at execution: the request
//! completes with [`WcStatus::MwBind`] (a bind) or [`WcStatus::LocalProtection`] (a fast
//! registration or Local Invalidate) and the QP goes to the error state as for any request
//! that fails locally (a Terminate "local catastrophic" to the peer, later requests
//! flushed), as in the verbs, where a failed bind moves the QP to the error state. The
//! QP's error event names the request and the cause ([`ConnError::LocalOperation`]).

use warpcore_proto::error::{ProtocolError, RdmapError};

use super::Qp;
use crate::cm::ConnError;
use crate::error::EngineError;
use crate::mem::{MemError, MrTable, PdId, Stag};
use crate::wr::{SendOp, SendWr, WcOpcode, WcStatus};

/// Post-time checks of a local operation (see the module documentation). A bind or fast
/// registration names its window or STag as allocated, whatever its key now (the requests
/// queued before this one may rebind or re-register it under a new key before it runs),
/// and its new key is not compared with the current one for the same reason (checked when
/// it runs: [`MemError::SameKey`]); a Local Invalidate names a key, but is checked by its
/// slot for the same reason.
pub(super) fn check_local_op(pd: PdId, mrs: &MrTable, wr: &SendWr) -> Result<(), EngineError> {
    if !wr.sges.as_slice().is_empty() {
        return Err(EngineError::TooManySges);
    }
    let r = match wr.op {
        SendOp::BindMw {
            mw,
            new_key,
            mr,
            to,
            len,
            access,
        } => mrs.check_bind(Stag(mw), new_key, Stag(mr), pd, to, len, access),
        SendOp::FastReg {
            stag,
            new_key,
            mr,
            mr_to,
            len,
            base_to,
            access,
        } => mrs.check_fast_reg(
            Stag(stag),
            new_key,
            Stag(mr),
            pd,
            mr_to,
            len,
            base_to,
            access,
        ),
        SendOp::LocalInvalidate { stag } => match mrs.slot_info(Stag(stag)) {
            None => Err(MemError::InvalidStag),
            Some((_, p)) if p != pd => Err(MemError::WrongPd),
            Some(_) => Ok(()),
        },
        _ => Ok(()),
    };
    r.map_err(EngineError::Memory)
}

/// Runs one local operation for the QP of `pd` and stream `stream`.
fn execute(mrs: &MrTable, pd: PdId, stream: u64, op: &SendOp) -> Result<(), MemError> {
    match *op {
        SendOp::BindMw {
            mw,
            new_key,
            mr,
            to,
            len,
            access,
        } => mrs
            .bind_mw(
                Stag(mw),
                new_key,
                Stag(mr),
                pd,
                to,
                len,
                access,
                Some(stream),
            )
            .map(|_| ()),
        SendOp::FastReg {
            stag,
            new_key,
            mr,
            mr_to,
            len,
            base_to,
            access,
        } => mrs
            .fast_register(
                Stag(stag),
                new_key,
                Stag(mr),
                pd,
                mr_to,
                len,
                base_to,
                access,
            )
            .map(|_| ()),
        SendOp::LocalInvalidate { stag } => mrs.invalidate_local(Stag(stag), pd),
        _ => Ok(()),
    }
}

impl Qp {
    /// Runs the local operations at the sending position, in order, until a message or a
    /// fence stops it; a failure sets `tx_fault` (module documentation). Returns whether
    /// any ran.
    ///
    /// Called whenever the sending position may move (`tx_control`; a message start asks
    /// [`Self::local_op_next`] itself and calls [`Self::run_local_ops_at`]): the common
    /// case, no local operation there, is decided inline, without a call.
    #[inline]
    pub(super) fn run_local_ops(&mut self, mrs: &MrTable) -> bool {
        self.local_op_next() && self.run_local_ops_at(mrs)
    }

    /// Whether a local operation, or a request done before it started (flushed when it was
    /// posted: `EngineCore::post_send_reserved_ref`), is at the sending position: the next
    /// message start runs it or passes it over ([`Self::run_local_ops_at`]), and it may
    /// wait for guards on a region to drain.
    #[inline]
    pub(super) fn local_op_next(&self) -> bool {
        usize::try_from(self.sq_next_seq - self.sq_head_seq)
            .ok()
            .and_then(|idx| self.sq.get(idx))
            .is_some_and(|e| e.wr.op.is_local() || e.status.is_some())
    }

    /// [`Self::run_local_ops`] once a local operation (or a request done before it started)
    /// is at the sending position.
    #[inline(never)]
    pub(super) fn run_local_ops_at(&mut self, mrs: &MrTable) -> bool {
        let mut any = false;
        while let Ok(idx) = usize::try_from(self.sq_next_seq - self.sq_head_seq) {
            let Some(e) = self.sq.get(idx) else { break };
            if e.status.is_some() {
                // Done before it started (flushed when posted): passed over, neither sent
                // nor executed; it retires in order.
                self.sq_next_seq += 1;
                any = true;
                continue;
            }
            if !e.wr.op.is_local()
                || (e.wr.fence && !self.orq.is_empty())
                || self.invalidates_unacked_source(idx, &e.wr.op)
            {
                break;
            }
            let result = execute(mrs, self.pd, self.stream, &e.wr.op);
            let wr_id = e.wr.wr_id;
            let opcode = match e.wr.op {
                SendOp::BindMw { .. } => WcOpcode::BindMw,
                SendOp::FastReg { .. } => WcOpcode::FastReg,
                _ => WcOpcode::LocalInvalidate,
            };
            let seq = self.sq_next_seq;
            self.sq_next_seq += 1;
            any = true;
            let status = match (&result, &e.wr.op) {
                (Ok(()), _) => WcStatus::Success,
                (Err(_), SendOp::BindMw { .. }) => WcStatus::MwBind,
                (Err(_), _) => WcStatus::LocalProtection,
            };
            if let Some(e) = self.entry_mut(seq) {
                e.status = Some(status);
            }
            if let Err(cause) = result {
                // The verbs' status names no cause: the QP's error event does
                // (`ConnError::LocalOperation`), the Terminate the peer gets is local
                // catastrophic (RDMAP-7.1-1, RDMAP-7.1-3).
                self.tx_fault_cause = Some(ConnError::LocalOperation {
                    wr_id,
                    opcode,
                    cause,
                });
                self.tx_fault = Some(ProtocolError::Rdmap(RdmapError::LocalCatastrophic));
                break;
            }
        }
        if any {
            self.retire_sq();
        }
        any
    }

    /// Whether `op`, the local operation at index `idx` of the send queue, is a Local
    /// Invalidate of an STag that a request before it still reads: one with FPDUs sent from
    /// registered memory that TCP has not had acknowledged (`SqEntry::unacked`, module
    /// `txrec`), which TCP reads again through that STag for every retransmission. The
    /// invalidation waits for their acknowledgement (the `Writable` event that reports it
    /// marks the QP again), as it would for a copy: invalidated under them, the next copy
    /// would fail and reset the stream although the requests were posted in a valid order
    /// (a Write from a registration, then its Local Invalidate: Linux svcrdma's chain).
    /// Binds and fast registrations change no STag a request reads from (windows are never
    /// local keys; a fast registration needs its STag invalid already).
    fn invalidates_unacked_source(&self, idx: usize, op: &SendOp) -> bool {
        let SendOp::LocalInvalidate { stag } = *op else {
            return false;
        };
        self.sq
            .iter()
            .take(idx)
            .filter(|e| e.unacked > 0)
            .any(|e| e.wr.sges.as_slice().iter().any(|s| s.stag == stag))
    }
}
