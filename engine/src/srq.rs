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
//! naming the queue's [`SharedRq::id`], once per arming. A claim whose buffer is given back
//! took nothing from the queue: it reports nothing and leaves the limit armed (unless the
//! application armed it again meanwhile).
//!
//! The depth (`ibv_create_srq`'s `max_wr`) bounds the buffers waiting, those posted and
//! those given back together, whatever the number of threads posting at once: a post or a
//! give-back first reserves its place in one counter ([`SharedRq::len`]).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

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
    /// Buffers waiting in `queue` and `returned`, with the places reserved by posts and
    /// give-backs under way: what the depth bounds. A place is reserved before the push
    /// (which then always finds room) and freed after the pop.
    waiting: AtomicUsize,
    depth: usize,
    id: u64,
    pd: PdId,
    max_sge: u32,
    /// The limit's state in one word, so that a claim given back can undo exactly its own
    /// disarming: bits 0-31 the armed limit (0: not armed), bit 32 whether it was reached,
    /// bits 33-63 the arming's generation ([`SharedRq::arm_limit`] counts it).
    limit: AtomicU64,
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
            waiting: AtomicUsize::new(0),
            depth: depth as usize,
            id: NEXT_SRQ_ID.fetch_add(1, Ordering::Relaxed),
            pd,
            max_sge,
            limit: AtomicU64::new(0),
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
        self.depth as u32
    }

    /// SGEs per receive.
    pub fn max_sge(&self) -> u32 {
        self.max_sge
    }

    /// Receive buffers waiting (not yet claimed by a QP).
    pub fn len(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }

    /// No buffer waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Reserves the place of one more buffer waiting; false at the depth. Checked and
    /// counted in one atomic step: concurrent posts (and give-backs) never take the queue
    /// past its depth, as a check of the queues' lengths followed by a push did.
    fn reserve(&self) -> bool {
        self.waiting
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.depth).then_some(n + 1)
            })
            .is_ok()
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
        if !self.reserve() {
            return Err(EngineError::QueueFull);
        }
        // The reservation holds a place: at most `depth` buffers are in the queue.
        let pushed = self.queue.push(*wr);
        debug_assert!(
            pushed.is_ok(),
            "a reserved place in the shared receive queue"
        );
        Ok(())
    }

    /// Arms the limit: the first claim that leaves fewer than `limit` buffers disarms it,
    /// raises [`SharedRq::limit_reached`] and is reported as
    /// [`CmEvent::SrqLimitReached`](crate::CmEvent::SrqLimitReached) (0 disarms).
    /// [`EngineError::LimitExceeded`] above the depth.
    pub fn arm_limit(&self, limit: u32) -> Result<(), EngineError> {
        if limit > self.depth() {
            return Err(EngineError::LimitExceeded("srq limit"));
        }
        // A new generation, not reached, armed at `limit`.
        let _ = self
            .limit
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                Some(((w >> LIMIT_GEN_SHIFT).wrapping_add(1) << LIMIT_GEN_SHIFT) | u64::from(limit))
            });
        Ok(())
    }

    /// Whether the armed limit was reached since it was armed (the flag stays until the
    /// next [`SharedRq::arm_limit`]).
    pub fn limit_reached(&self) -> bool {
        self.limit.load(Ordering::Acquire) & LIMIT_REACHED != 0
    }

    /// The armed limit: 0 when disarmed, as it is once reached (`ibv_query_srq`'s
    /// `srq_limit`).
    pub fn armed_limit(&self) -> u32 {
        self.limit.load(Ordering::Acquire) as u32
    }

    /// Engine side: takes the oldest buffer for a QP, and whether this claim reached the
    /// armed limit (`Some` for exactly one claim per arming, whichever core makes it: the
    /// claimer reports the event if it keeps the buffer, or hands the token to
    /// [`SharedRq::give_back`]).
    pub(crate) fn claim(&self) -> Option<(RecvWr, Option<LimitReached>)> {
        let wr = self.returned.pop().or_else(|| self.queue.pop())?;
        // The buffers left by this claim, counted in the same step that frees its place.
        let left = self.waiting.fetch_sub(1, Ordering::AcqRel) - 1;
        let w = self.limit.load(Ordering::Acquire);
        let limit = w as u32;
        let reached = limit != 0
            && left < limit as usize
            && self
                .limit
                .compare_exchange(
                    w,
                    (w & LIMIT_GEN_MASK) | LIMIT_REACHED,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok();
        Some((wr, reached.then_some(LimitReached(w))))
    }

    /// Engine side: puts back a buffer [`SharedRq::claim`] took for a message that failed
    /// before it could use it: it is claimed next, before the buffers posted before it was
    /// given back (among several given back at once by different cores, in the order they
    /// were given back). If that claim reached the limit (`reached`), the queue is as if
    /// it had not been made: the limit is armed again, not reached, unless it was armed
    /// anew meanwhile, and nothing is to be reported. `Err` hands both back when there is
    /// no room (buffers were posted meanwhile up to the depth): the claim stands, and its
    /// event with it.
    pub(crate) fn give_back(
        &self,
        wr: RecvWr,
        reached: Option<LimitReached>,
    ) -> Result<(), (RecvWr, Option<LimitReached>)> {
        if !self.reserve() {
            return Err((wr, reached));
        }
        // Before the buffer can be claimed again: a claim of it then finds the limit armed.
        if let Some(LimitReached(w)) = reached {
            let _ = self.limit.compare_exchange(
                (w & LIMIT_GEN_MASK) | LIMIT_REACHED,
                w,
                Ordering::AcqRel,
                Ordering::Acquire,
            );
        }
        // The reservation holds a place: at most `depth` buffers are given back.
        let pushed = self.returned.push(wr);
        debug_assert!(
            pushed.is_ok(),
            "a reserved place in the shared receive queue"
        );
        Ok(())
    }
}

/// [`SharedRq::limit`]: the reached bit, and the generation's place and mask.
const LIMIT_REACHED: u64 = 1 << 32;
const LIMIT_GEN_SHIFT: u32 = 33;
const LIMIT_GEN_MASK: u64 = !0 << LIMIT_GEN_SHIFT;

/// A claim that reached the armed limit (and disarmed it): the limit word before it, so
/// that [`SharedRq::give_back`] can undo exactly that disarming.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LimitReached(u64);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SgeList;
    use std::sync::atomic::AtomicUsize;

    /// `ibv_create_srq`'s `max_wr` bounds the buffers waiting however many threads post at
    /// once. With a buffer given back waiting, posts racing for the last place each saw
    /// room (the queues' lengths checked, then the push) and all got in: more buffers
    /// waiting than the depth.
    #[test]
    fn concurrent_posts_never_exceed_the_depth() {
        const THREADS: usize = 4;
        let mrs = MrTable::new(64);
        let wr = RecvWr {
            wr_id: 0,
            sges: SgeList::new(),
        };
        for round in 0..3000 {
            let q = SharedRq::new(PdId(1), 2, 1).unwrap();
            q.post(&mrs, &wr).unwrap();
            let (claimed, _) = q.claim().unwrap();
            assert!(q.give_back(claimed, None).is_ok());
            assert_eq!(q.len(), 1);
            // All threads start together (spinning: a blocking barrier wakes them
            // microseconds apart, longer than a post).
            let ready = AtomicUsize::new(0);
            let posted = AtomicUsize::new(0);
            std::thread::scope(|s| {
                for _ in 0..THREADS {
                    s.spawn(|| {
                        ready.fetch_add(1, Ordering::AcqRel);
                        let mut spins = 0u32;
                        while ready.load(Ordering::Acquire) < THREADS {
                            spins += 1;
                            if spins.is_multiple_of(1024) {
                                std::thread::yield_now();
                            }
                            std::hint::spin_loop();
                        }
                        if q.post(&mrs, &wr).is_ok() {
                            posted.fetch_add(1, Ordering::AcqRel);
                        }
                    });
                }
            });
            let posted = posted.load(Ordering::Acquire);
            let mut waiting = 0;
            while q.claim().is_some() {
                waiting += 1;
            }
            assert!(
                posted == 1 && waiting == 2,
                "round {round}: {posted} posts taken, {waiting} buffers waiting in a queue of depth 2"
            );
        }
    }

    /// A claim given back undoes its own disarming only: a limit armed again between the
    /// claim and the give-back stays as the application armed it.
    #[test]
    fn a_give_back_undoes_only_its_own_disarming() {
        let mrs = MrTable::new(64);
        let wr = RecvWr {
            wr_id: 0,
            sges: SgeList::new(),
        };
        let q = SharedRq::new(PdId(1), 4, 1).unwrap();
        q.post(&mrs, &wr).unwrap();
        q.post(&mrs, &wr).unwrap();
        q.arm_limit(2).unwrap();
        let (w, reached) = q.claim().unwrap();
        assert!(reached.is_some());
        assert_eq!((q.armed_limit(), q.limit_reached()), (0, true));
        assert!(q.give_back(w, reached).is_ok());
        assert_eq!((q.armed_limit(), q.limit_reached()), (2, false));
        // Claimed again: reached again, once.
        let (w, reached) = q.claim().unwrap();
        assert!(reached.is_some());
        // The application arms 1 meanwhile: the give-back leaves that arming alone.
        q.arm_limit(1).unwrap();
        assert!(q.give_back(w, reached).is_ok());
        assert_eq!((q.armed_limit(), q.limit_reached(), q.len()), (1, false, 2));
        let (_, r1) = q.claim().unwrap();
        assert!(r1.is_none(), "one left: not below 1");
        let (_, r2) = q.claim().unwrap();
        assert!(r2.is_some());
        assert!(q.claim().is_none());
        assert_eq!((q.armed_limit(), q.limit_reached(), q.len()), (0, true, 0));
    }
}
