//! Shared receive queues: several queue pairs, on any engine cores, drain one queue of
//! receive buffers (`ibv_create_srq`).
//!
//! The queue is a bounded lock-free MPMC queue: application threads post to it directly
//! (validated on the posting thread, as a QP's receives are), and an engine core *claims*
//! the oldest buffer for a queue pair when the first segment of a new untagged message on
//! QN 0 (a Send of any kind, Immediate Data) arrives and the QP holds no claimed buffer.
//! From then on the buffer is that QP's: the message's later segments land in it, and it
//! completes on the QP's receive completion queue with the QP's id in
//! [`Completion::qp`](crate::Completion::qp), in the QP's MSN order. When the shared queue
//! is empty the message earns the Terminate of a QP with no posted receive: DDP untagged
//! "no buffer", layer DDP, type 0x2, code 0x02 (DDP-7.1-6,
//! [`DdpError::UntaggedNoBuffer`](warpcore_proto::error::DdpError::UntaggedNoBuffer)).
//!
//! A QP that goes to the error state flushes only the buffer it claimed (its message is
//! lost); the others stay in the shared queue for the other QPs (as an SRQ's WQEs do in
//! the verbs). A buffer claimed for a message whose first segment fails the checks that
//! need it (DDP's bounds: a Send longer than the buffer) or fails otherwise before the QP
//! could use it is given back instead, ahead of the buffers in the queue: an invalid
//! message of one QP does not consume a buffer the others could use.
//!
//! The limit event of the verbs (`IBV_EVENT_SRQ_LIMIT_REACHED`): arm it with
//! [`SharedRq::arm_limit`]; the first claim that leaves fewer buffers than the limit
//! disarms it ([`SharedRq::armed_limit`] turns 0), raises [`SharedRq::limit_reached`], and
//! has the claiming core report [`CmEvent::SrqLimitReached`](crate::CmEvent::SrqLimitReached)
//! naming the queue's [`SharedRq::id`], once per arming.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use crossbeam::queue::ArrayQueue;

use crate::error::{DepthError, EngineError};
use crate::mem::{LookupFault, MrTable, PdId, Stag};
use crate::wr::RecvWr;

/// Identifiers of shared receive queues, unique in the process.
static NEXT_SRQ_ID: AtomicU64 = AtomicU64::new(1);

/// A shared receive queue (see the module documentation). Share it with `Arc`.
#[derive(Debug)]
pub struct SharedRq {
    queue: ArrayQueue<RecvWr>,
    /// Buffers given back by a QP whose message failed before it could use them
    /// ([`SharedRq::give_back`]): older than every buffer in `queue`, claimed first.
    returned: ArrayQueue<RecvWr>,
    id: u64,
    pd: PdId,
    max_sge: u32,
    /// 0: not armed.
    limit: AtomicU32,
    limit_reached: AtomicBool,
    /// Whether receives' SGEs are checked at post ([`SharedRq::sges_checked_at_post`]).
    sges_at_post: AtomicBool,
}

impl SharedRq {
    /// A queue of `depth` receive buffers of at most `max_sge` SGEs each, in protection
    /// domain `pd` (the QPs that use it must be of the same one). `depth` is in
    /// `1..=`[`MAX_QUEUE_DEPTH`](crate::MAX_QUEUE_DEPTH), else a [`DepthError`] names it
    /// (as `ibv_create_srq` refuses a depth above the device's limit): a depth of 0 used to
    /// make a queue of one, and `u32::MAX` to allocate two queues of 2^32 requests. The
    /// verbs layer checks its configured `max_rq_depth` first.
    pub fn new(pd: PdId, depth: u32, max_sge: u32) -> Result<SharedRq, DepthError> {
        DepthError::check("shared receive queue", depth as usize)?;
        Ok(SharedRq {
            queue: ArrayQueue::new(depth as usize),
            returned: ArrayQueue::new(depth as usize),
            id: NEXT_SRQ_ID.fetch_add(1, Ordering::Relaxed),
            pd,
            max_sge,
            limit: AtomicU32::new(0),
            limit_reached: AtomicBool::new(false),
            sges_at_post: AtomicBool::new(true),
        })
    }

    /// The queue's identifier, unique in the process: what
    /// [`CmEvent::SrqLimitReached`](crate::CmEvent::SrqLimitReached) names it by.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The protection domain.
    pub fn pd(&self) -> PdId {
        self.pd
    }

    /// Depth.
    pub fn depth(&self) -> u32 {
        self.queue.capacity() as u32
    }

    /// SGEs per receive.
    pub fn max_sge(&self) -> u32 {
        self.max_sge
    }

    /// Receive buffers waiting (not yet claimed by a QP).
    pub fn len(&self) -> usize {
        self.queue.len() + self.returned.len()
    }

    /// No buffer waiting.
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty() && self.returned.is_empty()
    }

    /// Whether [`SharedRq::post`] checks the SGEs' local keys (the default), or leaves them
    /// to the placement of a message into the buffer, as a queue pair does with
    /// [`QpShared::sges_checked_at_post`](crate::QpShared::sges_checked_at_post) off: a
    /// buffer that fails there completes with `WcStatus::LocalProtection` on the queue
    /// pair that claimed it, which goes to the error state.
    pub fn sges_checked_at_post(&self) -> bool {
        self.sges_at_post.load(Ordering::Relaxed)
    }

    /// Sets [`SharedRq::sges_checked_at_post`], for the posts that follow.
    pub fn set_sges_checked_at_post(&self, on: bool) {
        self.sges_at_post.store(on, Ordering::Relaxed);
    }

    /// Posts a receive buffer: its SGEs must be regions of the queue's PD with local write
    /// access, inside their regions ([`EngineError::SgeInvalidStag`],
    /// [`EngineError::SgeAccess`], [`EngineError::SgeOutOfBounds`]; unless
    /// [`SharedRq::sges_checked_at_post`] is off), at most `max_sge` of
    /// them ([`EngineError::TooManySges`]); [`EngineError::QueueFull`] when the queue
    /// holds `depth` buffers. Nothing changes on error.
    pub fn post(&self, mrs: &MrTable, wr: &RecvWr) -> Result<(), EngineError> {
        let sges = wr.sges.as_slice();
        if sges.len() > self.max_sge as usize {
            return Err(EngineError::TooManySges);
        }
        if wr.sges.total_len() > u64::from(u32::MAX) {
            return Err(EngineError::MessageTooLong);
        }
        if self.sges_checked_at_post() {
            for s in sges {
                let g = mrs
                    .lookup_local(Stag(s.stag), self.pd, true)
                    .map_err(|f| match f {
                        LookupFault::AccessDenied => EngineError::SgeAccess,
                        _ => EngineError::SgeInvalidStag,
                    })?;
                g.bounds(s.to, s.len as usize)
                    .map_err(|_| EngineError::SgeOutOfBounds)?;
            }
        }
        // Buffers given back count against the depth too.
        if self.len() >= self.queue.capacity() {
            return Err(EngineError::QueueFull);
        }
        self.queue.push(*wr).map_err(|_| EngineError::QueueFull)
    }

    /// Arms the limit: the first claim that leaves fewer than `limit` buffers disarms it,
    /// raises [`SharedRq::limit_reached`] and is reported as
    /// [`CmEvent::SrqLimitReached`](crate::CmEvent::SrqLimitReached) (0 disarms).
    /// [`EngineError::LimitExceeded`] above the depth.
    pub fn arm_limit(&self, limit: u32) -> Result<(), EngineError> {
        if limit > self.depth() {
            return Err(EngineError::LimitExceeded("srq limit"));
        }
        self.limit_reached.store(false, Ordering::Release);
        self.limit.store(limit, Ordering::Release);
        Ok(())
    }

    /// Whether the armed limit was reached since it was armed (the flag stays until the
    /// next [`SharedRq::arm_limit`]).
    pub fn limit_reached(&self) -> bool {
        self.limit_reached.load(Ordering::Acquire)
    }

    /// The armed limit: 0 when disarmed, as it is once reached (`ibv_query_srq`'s
    /// `srq_limit`).
    pub fn armed_limit(&self) -> u32 {
        self.limit.load(Ordering::Acquire)
    }

    /// Engine side: takes the oldest buffer for a QP, and whether this claim reached the
    /// armed limit (true for exactly one claim per arming, whichever core makes it: the
    /// claimer reports the event).
    pub(crate) fn claim(&self) -> Option<(RecvWr, bool)> {
        let wr = self.returned.pop().or_else(|| self.queue.pop())?;
        let limit = self.limit.load(Ordering::Acquire);
        let reached = limit != 0
            && self.len() < limit as usize
            && self
                .limit
                .compare_exchange(limit, 0, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
        if reached {
            self.limit_reached.store(true, Ordering::Release);
        }
        Some((wr, reached))
    }

    /// Engine side: puts back a buffer [`SharedRq::claim`] took for a message that failed
    /// before it could use it: it is claimed next, before the buffers posted before it was
    /// given back (among several given back at once by different cores, in the order they
    /// were given back). `Err` hands it back when there is no room (buffers were posted
    /// meanwhile up to the depth and more are being given back at once).
    pub(crate) fn give_back(&self, wr: RecvWr) -> Result<(), RecvWr> {
        if self.len() >= self.queue.capacity() {
            return Err(wr);
        }
        self.returned.push(wr)
    }
}
