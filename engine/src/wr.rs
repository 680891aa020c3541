//! Work requests, completions, completion queues and the handles that name engine objects
//! across threads (GUIDE rule 6).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use crate::config::MAX_SGE;
use crate::error::DepthError;
use crate::mem::{Access, PdId, StreamId};
use crate::ring::mpmc;
use crate::srq::SharedRq;

/// Names a queue pair: the engine core that owns it, its slot and the slot's generation, so
/// a stale handle never reaches a reused slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct QpId {
    /// The owning engine core.
    pub core: u16,
    /// Slot in the core's QP table.
    pub index: u16,
    /// Generation of the slot.
    pub generation: u32,
}

/// Most queue pairs one engine core can hold (the QP number has 14 bits for the slot).
pub const MAX_QPS_PER_CORE: usize = 1 << 14;

impl QpId {
    /// The QP number shown to users and peers (core, slot and generation folded together):
    /// the core in the top 8 bits, the slot in the next 14 (room for [`MAX_QPS_PER_CORE`]),
    /// the low 10 bits of the generation below.
    pub fn qpn(self) -> u32 {
        (u32::from(self.core & 0xFF) << 24)
            | ((u32::from(self.index) & 0x3FFF) << 10)
            | (self.generation & 0x3FF)
    }

    /// The stream identity of the QP's first connection, which type 2 memory windows are
    /// bound to: the whole handle, so a window bound to a destroyed QP never matches the
    /// QP that reuses its slot; never 0 (bit 63 set), bit 62 clear (cores are numbered
    /// below 2^14; a reset QP's later connections take identities with bit 62 set).
    pub fn stream(self) -> StreamId {
        1 << 63
            | (u64::from(self.core) << 48)
            | (u64::from(self.index) << 32)
            | u64::from(self.generation)
    }
}

/// One scatter/gather element: `len` octets at Tagged Offset `to` of the local region
/// `stag` (the lkey).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sge {
    /// The region.
    pub stag: u32,
    /// Offset in the region's TO space.
    pub to: u64,
    /// Length in octets.
    pub len: u32,
}

/// Up to [`MAX_SGE`] SGEs, stored inline (no allocation per work request). The entries
/// past the list's length are all zero: every constructor zeroes them (the fields are
/// private), which [`SgeList::total_len`] relies on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SgeList {
    sges: [Sge; MAX_SGE],
    len: u8,
}

impl SgeList {
    /// An empty list (a zero-length message).
    pub const fn new() -> SgeList {
        SgeList {
            sges: [Sge {
                stag: 0,
                to: 0,
                len: 0,
            }; MAX_SGE],
            len: 0,
        }
    }

    /// A list of the given SGEs; `None` if there are more than [`MAX_SGE`].
    pub fn from_slice(sges: &[Sge]) -> Option<SgeList> {
        if sges.len() > MAX_SGE {
            return None;
        }
        let mut l = SgeList::new();
        l.sges[..sges.len()].copy_from_slice(sges);
        l.len = sges.len() as u8;
        Some(l)
    }

    /// The SGEs.
    pub fn as_slice(&self) -> &[Sge] {
        &self.sges[..usize::from(self.len)]
    }

    /// Total length in octets (the post checks reject > u32::MAX). Summed over all
    /// [`MAX_SGE`] entries, those past the length being zero: a fixed sum without a
    /// branch, where one over the list's length runs a loop (this is asked several times
    /// for each request).
    #[inline]
    pub fn total_len(&self) -> u64 {
        self.sges.iter().map(|s| u64::from(s.len)).sum()
    }
}

/// What a send queue work request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    /// Send (RDMAP opcode 0x3).
    Send,
    /// Send with Solicited Event (0x5).
    SendSe,
    /// Send with Invalidate of the peer's STag (0x4).
    SendInvalidate {
        /// STag the peer invalidates.
        stag: u32,
    },
    /// Send with Solicited Event and Invalidate (0x6).
    SendSeInvalidate {
        /// STag the peer invalidates.
        stag: u32,
    },
    /// RDMA Write into the peer's region.
    Write {
        /// The peer's STag.
        remote_stag: u32,
        /// The peer's Tagged Offset.
        remote_to: u64,
    },
    /// RDMA Read from the peer's region into the (single) local SGE; with none, a Read of
    /// no octets.
    Read {
        /// The peer's STag (Data Source).
        remote_stag: u32,
        /// The peer's Tagged Offset.
        remote_to: u64,
    },
    /// RFC 7306 masked FetchAdd on the 64-bit word at `remote_to` of the peer's region (the
    /// word's address must be 8-aligned at the peer, EXT-5.2.1-2, the TO need not be when
    /// the region's base TO is not congruent to its address), which needs `REMOTE_ATOMIC` access. The original value comes
    /// back in [`Completion::atomic_orig`] and, if the request has one local SGE (exactly 8
    /// octets, local write), is written there in host byte order. `add_mask` marks lane
    /// ends (0: a plain 64-bit add; RFC 7306 §5.1.1).
    AtomicFetchAdd {
        /// The peer's STag.
        remote_stag: u32,
        /// The peer's Tagged Offset of the word.
        remote_to: u64,
        /// Add Data.
        add: u64,
        /// Add Mask.
        add_mask: u64,
    },
    /// RFC 7306 masked CmpSwap: if `(compare ^ word) & compare_mask == 0` the bits of
    /// `swap_mask` are replaced by those of `swap` (all ones masks: the plain form;
    /// RFC 7306 §5.1.2). The original value is returned as for
    /// [`SendOp::AtomicFetchAdd`].
    AtomicCmpSwap {
        /// The peer's STag.
        remote_stag: u32,
        /// The peer's Tagged Offset of the word.
        remote_to: u64,
        /// Compare Data.
        compare: u64,
        /// Compare Mask.
        compare_mask: u64,
        /// Swap Data.
        swap: u64,
        /// Swap Mask.
        swap_mask: u64,
    },
    /// RDMA Write followed by an RFC 7306 Immediate Data message carrying `imm` (sent
    /// big-endian, EXT-6.3-5), with the Solicited Event flag if `solicited` (Immediate
    /// Data with SE, 0x9): the peer's receive completes with [`WcOpcode::RecvImm`]
    /// once the written data is placed (the Write precedes it on the stream).
    WriteWithImm {
        /// The peer's STag.
        remote_stag: u32,
        /// The peer's Tagged Offset.
        remote_to: u64,
        /// The immediate value.
        imm: u64,
        /// Send the Immediate Data message with the Solicited Event flag (opcode 0x9;
        /// `IBV_SEND_SOLICITED` on `IBV_WR_RDMA_WRITE_WITH_IMM`): the peer's completion is
        /// solicited and wakes a CQ armed for solicited completions.
        solicited: bool,
    },
    /// RFC 7306 Immediate Data (opcode 0x8) or Immediate Data with Solicited Event (0x9):
    /// exactly 8 octets, `imm` big-endian on the wire, that consume one receive buffer of
    /// the peer and are reported in its completion (EXT-6.3-2, EXT-6.3-4). Takes no local SGE.
    Immediate {
        /// The immediate value.
        imm: u64,
        /// Set the Solicited Event flag (opcode 0x9).
        solicited: bool,
    },
    /// Bind memory window `mw` (named as allocated: the STag
    /// [`MrTable::alloc_mw`](crate::mem::MrTable::alloc_mw) returned, whatever its key now)
    /// to `len` octets at Tagged Offset `to` of the local region `mr` (the window uses the
    /// region's TOs) with `access` (remote rights only), under the new key `new_key`: the
    /// window's STag becomes `Stag::new(mw.index(), new_key)`. A type 2 window is bound to
    /// this QP.
    /// Executed in send queue order when it reaches the head of the sending position
    /// (later requests, e.g. a Send advertising the window, see it bound); nothing goes on
    /// the wire. Takes no SGE. Completes with [`WcOpcode::BindMw`].
    BindMw {
        /// The window, as allocated (the STag `alloc_mw` returned).
        mw: u32,
        /// The key of its new STag (differs from the current key).
        new_key: u8,
        /// The region (lkey) the window opens.
        mr: u32,
        /// First Tagged Offset of the window, in the region's TO space.
        to: u64,
        /// Length in octets.
        len: u64,
        /// Rights the window grants (a subset of `Access::WINDOW_RIGHTS`).
        access: Access,
    },
    /// Fast registration: make the invalid fast-registration STag `stag` (named as
    /// allocated, as [`SendOp::BindMw`] names its window) valid under the new key
    /// `new_key` over `len` octets at Tagged Offset `mr_to` of the local region `mr`, the
    /// first of which gets Tagged Offset `base_to`, with `access`. Executed in send queue
    /// order like [`SendOp::BindMw`]; completes with [`WcOpcode::FastReg`].
    FastReg {
        /// The fast-registration STag, as allocated (the STag `alloc_fast_reg` returned).
        stag: u32,
        /// The key of its new STag (differs from the current key).
        new_key: u8,
        /// The region providing the memory.
        mr: u32,
        /// Where in the region's TO space the memory starts.
        mr_to: u64,
        /// Length in octets.
        len: u64,
        /// Tagged Offset of the first octet under the new STag.
        base_to: u64,
        /// Rights of the new registration.
        access: Access,
    },
    /// Local Invalidate of a local STag of this QP's protection domain (a window, a fast
    /// registration or a region), in send queue order; with `fence` it also waits for
    /// earlier RDMA Reads (whose responses may still land in the STag's memory). An STag
    /// already invalid under this key (the peer invalidated it) is left so, successfully.
    /// Completes with [`WcOpcode::LocalInvalidate`].
    LocalInvalidate {
        /// The STag to invalidate.
        stag: u32,
    },
}

impl SendOp {
    /// An RFC 7306 operation: refused unless the connection uses RFC 7306 (EXT-1.1-1).
    pub fn is_rfc7306(&self) -> bool {
        matches!(
            self,
            SendOp::AtomicFetchAdd { .. }
                | SendOp::AtomicCmpSwap { .. }
                | SendOp::WriteWithImm { .. }
                | SendOp::Immediate { .. }
        )
    }

    /// A memory operation executed locally in send queue order (bind, fast registration,
    /// Local Invalidate): nothing goes on the wire.
    pub fn is_local(&self) -> bool {
        matches!(
            self,
            SendOp::BindMw { .. } | SendOp::FastReg { .. } | SendOp::LocalInvalidate { .. }
        )
    }

    /// An atomic (a request answered on QN 3 that counts against ORD like a Read).
    pub fn is_atomic(&self) -> bool {
        matches!(
            self,
            SendOp::AtomicFetchAdd { .. } | SendOp::AtomicCmpSwap { .. }
        )
    }
}

/// A send queue work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWr {
    /// The caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// The operation.
    pub op: SendOp,
    /// Local buffers: the data of a Send/Write, the sink of a Read (exactly one SGE; an
    /// empty list only for a zero-length Read).
    pub sges: SgeList,
    /// Produce a completion on success (errors always complete).
    pub signaled: bool,
    /// Read fence: start this request only after every earlier RDMA Read completed (its
    /// Read Response placed), so e.g. a Write after a Read of the same remote memory cannot
    /// change what the Read returns (RDMAP-5.5-5 gives no implicit fence).
    pub fence: bool,
}

impl SendWr {
    /// `*self = *src`, field by field, for a copy into the request's place in a queue: each
    /// field is small enough to be copied inline, where a copy of the whole request (over
    /// 128 octets; also one built whole from its fields) is a `memcpy` call.
    #[inline(always)]
    pub(crate) fn copy_from(&mut self, src: &SendWr) {
        let SendWr {
            wr_id,
            op,
            sges,
            signaled,
            fence,
        } = *src;
        self.wr_id = wr_id;
        self.op = op;
        self.sges = sges;
        self.signaled = signaled;
        self.fence = fence;
    }

    /// A request that is a placeholder until [`Self::copy_from`] fills it in (its fields
    /// are all written inline: no `memcpy` of a constant).
    #[inline(always)]
    pub(crate) fn placeholder() -> SendWr {
        SendWr {
            wr_id: 0,
            op: SendOp::Send,
            sges: SgeList::new(),
            signaled: false,
            fence: false,
        }
    }
}

/// A receive queue work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvWr {
    /// The caller's identifier, returned in the completion.
    pub wr_id: u64,
    /// Where an incoming Send's payload goes, in order.
    pub sges: SgeList,
}

/// Kind of a completed work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcOpcode {
    /// A Send of any kind.
    Send,
    /// An RDMA Write.
    Write,
    /// An RDMA Read.
    Read,
    /// A received Send.
    Recv,
    /// An RFC 7306 FetchAdd (the original value in [`Completion::atomic_orig`]).
    AtomicFetchAdd,
    /// An RFC 7306 CmpSwap (the original value in [`Completion::atomic_orig`]).
    AtomicCmpSwap,
    /// An RDMA Write with Immediate Data.
    WriteWithImm,
    /// An Immediate Data message sent.
    Immediate,
    /// A received Immediate Data message (from an Immediate or a Write with Immediate):
    /// the value is in [`Completion::imm`], `byte_len` is 0.
    RecvImm,
    /// A memory window bound ([`SendOp::BindMw`]).
    BindMw,
    /// A fast registration done ([`SendOp::FastReg`]).
    FastReg,
    /// A Local Invalidate done ([`SendOp::LocalInvalidate`]).
    LocalInvalidate,
}

/// Outcome of a work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcStatus {
    /// Done.
    Success,
    /// Flushed: the QP went to the error state before the request completed.
    FlushErr,
    /// A local SGE was not usable when the engine came to it (region deregistered), or a
    /// fast registration or Local Invalidate failed when it was executed (the STag was not
    /// in the state it needs then); the QP then goes to the error state. For a fast
    /// registration or Local Invalidate the QP's error event names the cause
    /// ([`ConnError::LocalOperation`](crate::ConnError::LocalOperation)).
    LocalProtection,
    /// A memory window bind ([`SendOp::BindMw`]) failed when it was executed: its region
    /// was deregistered or its window deallocated meanwhile, or the window is not in the
    /// state the bind needs then (the verbs' Memory Window Bind Error, `IBV_WC_MW_BIND_ERR`);
    /// the QP then goes to the error state, its error event naming the cause
    /// ([`ConnError::LocalOperation`](crate::ConnError::LocalOperation)).
    MwBind,
    /// The received message was longer than the posted buffers (a Send longer than the
    /// queue pair's own receive: the stream ends with DDP's Terminate 1/2/05 and the
    /// receives behind it are flushed; a buffer of a shared receive queue goes back to it).
    LocalLength,
    /// The peer reported a remote access error in a Terminate.
    RemoteAccess,
    /// The peer reported another error in a Terminate, or the stream failed.
    RemoteOperation,
    /// This side detected a protocol error and terminated the stream: a Read whose Read
    /// Response it refused (the requests behind it are flushed).
    Fatal,
}

/// One completion entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The work request's identifier.
    pub wr_id: u64,
    /// The queue pair.
    pub qp: QpId,
    /// What completed.
    pub opcode: WcOpcode,
    /// How it ended.
    pub status: WcStatus,
    /// Octets received (receives) or transferred (Reads, Writes, Sends); 0 in a
    /// completion in error (flushed, refused): nothing it names was transferred that the
    /// application may count on.
    pub byte_len: u32,
    /// A received Send carried the Solicited Event flag.
    pub solicited: bool,
    /// A received Send with Invalidate invalidated this local STag.
    pub invalidated: Option<u32>,
    /// The immediate value of a received Immediate Data message ([`WcOpcode::RecvImm`]).
    pub imm: Option<u64>,
    /// The original value of the target word of a successful atomic.
    pub atomic_orig: Option<u64>,
}

/// A completion channel (the `ibv_comp_channel` of the verbs): completion queues created
/// with it signal it once after each arming ([`CompletionQueue::arm`]), so an application
/// thread can sleep until a completion arrives instead of polling.
///
/// It is waitable as a file descriptor ([`CompletionChannel::fd`]), for `poll()`/`epoll`
/// users: a counting eventfd ([`crate::doorbell::Doorbell::counting`]) that holds one token
/// per event queued, rung under the queue's lock as the event is queued and taken under it
/// as the event is handed out, so it is readable exactly while an event is pending (a
/// level-triggered `epoll` wakes once per event, never for one already taken). Poll the
/// descriptor, do not read it: reading takes a token without its event.
///
/// [`CompletionChannel::get_event`] waits with `poll(2)` and its own timeout, which takes
/// nothing: any number of threads may wait on one channel, and none sleeps while an event
/// is pending (each event goes to exactly one of them). An engine core signals without
/// waiting for the application beyond the queue's lock, which no one holds across a
/// blocking call.
#[derive(Debug)]
pub struct CompletionChannel {
    bell: crate::doorbell::Doorbell,
    /// The identifiers of the queues that fired, oldest first; the bell holds one token per
    /// entry whenever this lock is free.
    fired: std::sync::Mutex<std::collections::VecDeque<u64>>,
}

impl CompletionChannel {
    /// A new channel (one eventfd).
    pub fn new() -> std::io::Result<CompletionChannel> {
        Ok(CompletionChannel {
            bell: crate::doorbell::Doorbell::counting()?,
            fired: std::sync::Mutex::new(std::collections::VecDeque::new()),
        })
    }

    /// The descriptor to wait on: readable exactly while an event is pending.
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.bell.fd()
    }

    fn signal(&self, cq: u64) {
        let mut fired = self.fired.lock().unwrap_or_else(|e| e.into_inner());
        fired.push_back(cq);
        self.bell.ring();
    }

    /// Takes the pending events of queue `cq` off the channel, each with its token (under
    /// the queue's lock, as `get_event` takes one); returns how many. For a queue being
    /// destroyed: the kernel's uverbs deletes a destroyed CQ's queued events from its
    /// completion channel (`ib_uverbs_release_ucq`), so the descriptor stays readable
    /// only while an event of a live queue waits.
    fn forget(&self, cq: u64) -> usize {
        let mut fired = self.fired.lock().unwrap_or_else(|e| e.into_inner());
        let before = fired.len();
        fired.retain(|&id| id != cq);
        let n = before - fired.len();
        for _ in 0..n {
            self.bell.take();
        }
        n
    }

    /// Waits up to `timeout` (`None`, or one too long for an `Instant` such as
    /// `Duration::MAX`: for ever) for an event; returns the identifier of the
    /// completion queue that fired (`Ok(None)` on timeout). A pending event is returned
    /// even with a zero timeout. Each arming of a queue yields at most one event; poll the
    /// queue after arming it, as with `ibv_req_notify_cq`.
    pub fn get_event(&self, timeout: Option<std::time::Duration>) -> std::io::Result<Option<u64>> {
        // A timeout past what an `Instant` holds (`Duration::MAX`) is no deadline; adding it
        // panicked.
        let deadline = timeout.and_then(|t| std::time::Instant::now().checked_add(t));
        loop {
            {
                let mut fired = self.fired.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(id) = fired.pop_front() {
                    // The event's token, rung before the lock was let go: the descriptor
                    // stays readable exactly while events are pending.
                    self.bell.take();
                    return Ok(Some(id));
                }
            }
            if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                return Ok(None);
            }
            self.bell.wait(deadline)?;
        }
    }
}

/// Not armed / armed for the next completion / armed for the next solicited one.
const UNARMED: u8 = 0;
const ARMED_NEXT: u8 = 1;
const ARMED_SOLICITED: u8 = 2;

#[derive(Debug)]
struct Notify {
    channel: Arc<CompletionChannel>,
    armed: AtomicU8,
}

/// Identifiers of completion queues, unique in the process.
static NEXT_CQ_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A completion queue: filled by engine cores, drained by application threads. Several QPs,
/// possibly on several cores, may share one (a bounded lock-free MPMC queue,
/// [`crate::ring::mpmc`], that moves a run of completions per atomic operation on each
/// side: [`CompletionQueue::push_run`], [`CompletionQueue::pop_into`]).
#[derive(Debug)]
pub struct CompletionQueue {
    ring: mpmc::Queue<Completion>,
    overrun: AtomicBool,
    /// The overrun was announced (`CmEvent::CqError`), once.
    overrun_reported: AtomicBool,
    id: u64,
    notify: Option<Notify>,
}

impl CompletionQueue {
    /// A queue of `depth` entries (allocated now, never again), `depth` in
    /// `1..=`[`MAX_QUEUE_DEPTH`](crate::MAX_QUEUE_DEPTH); any other depth is refused with a
    /// [`DepthError`] naming it (a queue of 0 entries used to become one of 1, an absurd
    /// depth aborted the process on allocation, and a later `new` panicked on both). The
    /// verbs layer checks its configured `max_cq_depth` first.
    pub fn new(depth: usize) -> Result<CompletionQueue, DepthError> {
        DepthError::check("completion queue", depth)?;
        Ok(CompletionQueue {
            ring: mpmc::Queue::new(depth),
            overrun: AtomicBool::new(false),
            overrun_reported: AtomicBool::new(false),
            id: NEXT_CQ_ID.fetch_add(1, Ordering::Relaxed),
            notify: None,
        })
    }

    /// A queue of `depth` entries that signals `channel` (naming itself by [`Self::id`])
    /// when armed; `depth` is checked as by [`CompletionQueue::new`].
    pub fn with_channel(
        depth: usize,
        channel: Arc<CompletionChannel>,
    ) -> Result<CompletionQueue, DepthError> {
        Ok(CompletionQueue {
            notify: Some(Notify {
                channel,
                armed: AtomicU8::new(UNARMED),
            }),
            ..CompletionQueue::new(depth)?
        })
    }

    /// The queue's identifier, unique in the process (what `CmEvent::CqError` and a
    /// completion channel's events name it by).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Engine side: true exactly once after the queue overran, for the core that announces
    /// it (`CmEvent::CqError`); several cores may feed one queue.
    pub fn take_overrun_report(&self) -> bool {
        self.overrun() && !self.overrun_reported.swap(true, Ordering::AcqRel)
    }

    /// Arms the queue (`ibv_req_notify_cq`): the next completion added (with
    /// `solicited_only`, the next one of a message with the Solicited Event flag, or any
    /// in error) signals the channel once. Returns false when the queue has no channel.
    pub fn arm(&self, solicited_only: bool) -> bool {
        match &self.notify {
            Some(n) => {
                let a = if solicited_only {
                    ARMED_SOLICITED
                } else {
                    ARMED_NEXT
                };
                // A queue armed for any completion stays so when asked for solicited ones.
                // Sequentially consistent, as `notify`'s look at the arming and the
                // queue's cursors are: the caller polls the queue next, and either that
                // poll sees a completion a core pushed meanwhile or the core sees this
                // arming (store buffering: with acquire/release only, both could read the
                // old value, and a thread that then sleeps on the channel would sleep
                // through the completion; Miri found it,
                // `an_arming_racing_a_push_is_seen_or_signalled`). Plain loads and
                // locked operations on x86 either way.
                let _ = n
                    .armed
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |cur| {
                        Some(if cur == ARMED_NEXT { cur } else { a })
                    });
                true
            }
            None => false,
        }
    }

    /// Disarms the queue and takes the events it signalled and nobody has taken yet off its
    /// channel; returns how many. For a queue being destroyed, no QP completing into it
    /// any more (the verbs' `ibv_destroy_cq`): its channel's descriptor no longer reads
    /// readable for it.
    pub fn forget_events(&self) -> usize {
        match &self.notify {
            Some(n) => {
                n.armed.store(UNARMED, Ordering::SeqCst);
                n.channel.forget(self.id)
            }
            None => 0,
        }
    }

    /// Engine side: appends a completion; on overrun the entry is lost and the overrun
    /// flag is raised (the engine never waits for the application). An armed queue then
    /// signals its channel.
    #[inline]
    pub fn push(&self, c: Completion) {
        let notable = c.solicited || c.status != WcStatus::Success;
        if self.ring.push(c).is_err() {
            self.overrun.store(true, Ordering::Release);
        }
        self.notify(notable);
    }

    /// Application side: appends a completion if the queue has room, as [`Self::push`]
    /// does (an armed queue signals its channel), or hands it back untouched when the
    /// queue is full: no overrun is raised. For a completion an application thread queues
    /// itself (a flush the layer above makes), whose caller can be told, where an overrun
    /// would lose it silently and fail every queue pair completing into the queue.
    pub fn try_push(&self, c: Completion) -> Result<(), Completion> {
        let notable = c.solicited || c.status != WcStatus::Success;
        self.ring.push(c)?;
        self.notify(notable);
        Ok(())
    }

    /// Engine side: appends `n` completions, `make(j)` building the `j`-th, in order, with
    /// one atomic claim of the ring ([`crate::ring::mpmc::Queue::push_with`]), as `n`
    /// [`CompletionQueue::push`]es would: the ones that do not fit are lost and raise the
    /// overrun flag, and an armed queue signals its channel once. `make` must not panic.
    #[inline]
    pub fn push_run(&self, n: usize, mut make: impl FnMut(usize) -> Completion) {
        match n {
            0 => return,
            1 => return self.push(make(0)),
            _ => {}
        }
        let mut notable = false;
        let pushed = self.ring.push_with(n, |j| {
            let c = make(j);
            notable |= c.solicited || c.status != WcStatus::Success;
            c
        });
        if pushed < n {
            self.overrun.store(true, Ordering::Release);
        }
        self.notify(notable);
    }

    /// After a push: an armed queue signals its channel (`notable`: a solicited or error
    /// completion was among those pushed).
    #[inline]
    fn notify(&self, notable: bool) {
        if let Some(n) = &self.notify {
            // Sequentially consistent, after the push's claim of the ring (a SeqCst
            // compare-and-swap of its tail): see `arm`.
            let a = n.armed.load(Ordering::SeqCst);
            let fire = a == ARMED_NEXT || (a == ARMED_SOLICITED && notable);
            if fire
                && n.armed
                    .compare_exchange(a, UNARMED, Ordering::SeqCst, Ordering::SeqCst)
                    .is_ok()
            {
                n.channel.signal(self.id);
            }
        }
    }

    /// Takes the oldest completion.
    #[inline]
    pub fn pop(&self) -> Option<Completion> {
        // An empty queue (the common poll) is told by its two cursors, inline. `None`
        // means empty at that moment.
        if self.ring.is_empty() {
            return None;
        }
        self.ring.pop()
    }

    /// Moves up to `out.len()` of the oldest completions into `out`, in order, with one
    /// atomic claim of the ring; returns how many (0: empty at that moment).
    #[inline]
    pub fn pop_into(&self, out: &mut [Completion]) -> usize {
        if self.ring.is_empty() {
            return 0;
        }
        self.ring.pop_into(out)
    }

    /// Entries waiting.
    pub fn len(&self) -> usize {
        self.ring.len()
    }

    /// No entries waiting.
    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }

    /// Capacity.
    pub fn capacity(&self) -> usize {
        self.ring.capacity()
    }

    /// Whether a completion was ever lost because the queue was full.
    pub fn overrun(&self) -> bool {
        self.overrun.load(Ordering::Acquire)
    }
}

/// State of a queue pair (RDMAP-06 §6 / the iWARP verbs QP states).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum QpState {
    /// Created, not connected: receives may be posted.
    Idle = 0,
    /// TCP and MPA set-up in progress.
    Connecting = 1,
    /// Ready to send: FPDU mode on an established stream.
    Rts = 2,
    /// Graceful close in progress: no new sends, the send queue drains, then FIN.
    Closing = 3,
    /// A Terminate is being sent or was received; the stream is dead.
    Terminate = 4,
    /// Error: every outstanding and newly posted request completes with a flush error.
    Error = 5,
}

impl QpState {
    fn from_u8(v: u8) -> QpState {
        match v {
            0 => QpState::Idle,
            1 => QpState::Connecting,
            2 => QpState::Rts,
            3 => QpState::Closing,
            4 => QpState::Terminate,
            _ => QpState::Error,
        }
    }
}

/// The part of a QP that application threads read without asking the engine core: state
/// and queue occupancy, so local misuse is refused at once, before anything is queued.
#[derive(Debug)]
pub struct QpShared {
    state: AtomicU8,
    rfc7306: AtomicBool,
    /// Whether local SGEs are checked at post ([`QpShared::sges_checked_at_post`]).
    sges_at_post: AtomicBool,
    /// What the connection fixed when it entered RTS (stored before the state, so a thread
    /// that reads RTS reads these too): RFC 7306 in use, and the negotiated ORD.
    rfc7306_in_use: AtomicBool,
    ord: AtomicU32,
    sq_used: AtomicU32,
    rq_used: AtomicU32,
    /// Send queue depth.
    pub sq_depth: u32,
    /// Receive queue depth.
    pub rq_depth: u32,
    /// SGEs per work request.
    pub max_sge: u32,
    /// The protection domain.
    pub pd: PdId,
    /// The shared receive queue this QP takes its receive buffers from, if any.
    srq: OnceLock<Arc<SharedRq>>,
}

impl QpShared {
    /// Shared state of a new QP.
    pub fn new(pd: PdId, sq_depth: u32, rq_depth: u32, max_sge: u32) -> QpShared {
        QpShared {
            state: AtomicU8::new(QpState::Idle as u8),
            rfc7306: AtomicBool::new(true),
            sges_at_post: AtomicBool::new(true),
            rfc7306_in_use: AtomicBool::new(false),
            ord: AtomicU32::new(0),
            sq_used: AtomicU32::new(0),
            rq_used: AtomicU32::new(0),
            sq_depth,
            rq_depth,
            max_sge,
            pd,
            srq: OnceLock::new(),
        }
    }

    /// Makes the QP take its receive buffers from `srq` (several QPs may share one, on
    /// any engine cores). Only while the QP is idle, with no receive posted, once, and with
    /// the same protection domain; then [`validate_recv`](crate::validate_recv) refuses
    /// receives posted to the QP itself ([`EngineError::UsesSrq`](crate::EngineError)).
    pub fn attach_srq(&self, srq: Arc<SharedRq>) -> Result<(), crate::EngineError> {
        let st = self.state();
        if st != QpState::Idle {
            return Err(crate::EngineError::InvalidState(st));
        }
        if srq.pd() != self.pd {
            return Err(crate::EngineError::Memory(crate::mem::MemError::WrongPd));
        }
        if self.rq_used() != 0 {
            return Err(crate::EngineError::UsesSrq);
        }
        self.srq.set(srq).map_err(|_| crate::EngineError::UsesSrq)
    }

    /// The shared receive queue, if one is attached.
    pub fn srq(&self) -> Option<&Arc<SharedRq>> {
        self.srq.get()
    }

    /// Counts a receive buffer the engine claimed from the shared receive queue as this
    /// QP's (released like any receive when it completes or is flushed).
    pub(crate) fn claim_rq(&self) {
        self.rq_used.fetch_add(1, Ordering::AcqRel);
    }

    /// The current state.
    pub fn state(&self) -> QpState {
        QpState::from_u8(self.state.load(Ordering::Acquire))
    }

    /// Whether the connection uses RFC 7306 (atomics, Immediate Data; EXT-1.1-1). There
    /// is no MPA negotiation for it: both ULPs must agree out of band. On by default (our
    /// own peers); turn it off before connecting towards a peer without it (siw).
    pub fn rfc7306(&self) -> bool {
        self.rfc7306.load(Ordering::Acquire)
    }

    /// Sets [`QpShared::rfc7306`]; the engine reads it once when the QP connects or is
    /// accepted, so later changes do not affect a running connection.
    pub fn set_rfc7306(&self, on: bool) {
        self.rfc7306.store(on, Ordering::Release);
    }

    /// Whether the local SGEs of a work request (a local key naming a region of this
    /// protection domain with the access the operation needs, the range inside it) are
    /// checked when it is posted, on the posting thread, with a typed error and nothing
    /// queued ([`validate_send`](crate::validate_send), [`validate_recv`](crate::validate_recv)):
    /// the default. Off, a request is posted with whatever local keys it names and they are
    /// checked when it runs, as rdma-core's providers (siw, rxe, mlx5) do: a send queue
    /// request when the engine starts it (before anything of it goes on the wire), a
    /// receive as its payload is placed. One that fails completes with
    /// `WcStatus::LocalProtection`, the stream ends with a local catastrophic Terminate
    /// (0/0/FF) and the queue pair goes to the error state, the requests behind it
    /// flushed. An SGE of no octets is not checked then, as the providers pass it over.
    /// On: a send queue request naming the new STag of a fast registration posted before
    /// it, not run yet, is refused at post (`EngineError::SgeInvalidStag`: the key is not
    /// valid yet); off, it is checked when it starts, after the registration ran.
    /// Either way the engine looks every key up again, guarded, where it touches the
    /// memory: the check at post is for the caller's sake, not the memory's.
    pub fn sges_checked_at_post(&self) -> bool {
        self.sges_at_post.load(Ordering::Relaxed)
    }

    /// Sets [`QpShared::sges_checked_at_post`], only while the QP is idle (the engine reads
    /// it once when the QP connects or is accepted, and a send queue request posted under
    /// one setting must run under the same one); otherwise
    /// [`EngineError::InvalidState`](crate::EngineError::InvalidState) and nothing changes.
    pub fn set_sges_checked_at_post(&self, on: bool) -> Result<(), crate::EngineError> {
        let st = self.state();
        if st != QpState::Idle {
            return Err(crate::EngineError::InvalidState(st));
        }
        self.sges_at_post.store(on, Ordering::Relaxed);
        Ok(())
    }

    /// Whether the connection uses RFC 7306: [`QpShared::rfc7306`] as the engine read it
    /// when the connection was set up (false before).
    pub fn rfc7306_in_use(&self) -> bool {
        self.rfc7306_in_use.load(Ordering::Acquire)
    }

    /// The connection's negotiated ORD (0 before it is set up): RDMA Reads and atomics
    /// need at least 1.
    pub fn ord(&self) -> u32 {
        self.ord.load(Ordering::Acquire)
    }

    /// Records what the connection fixed ([`QpShared::rfc7306_in_use`], [`QpShared::ord`]),
    /// before the QP enters RTS.
    pub(crate) fn set_connection(&self, rfc7306: bool, ord: u32) {
        self.rfc7306_in_use.store(rfc7306, Ordering::Release);
        self.ord.store(ord, Ordering::Release);
    }

    pub(crate) fn set_state(&self, s: QpState) {
        self.state.store(s as u8, Ordering::Release);
    }

    /// Work requests on the send queue not yet retired.
    pub fn sq_used(&self) -> u32 {
        self.sq_used.load(Ordering::Acquire)
    }

    /// Work requests on the receive queue not yet retired.
    pub fn rq_used(&self) -> u32 {
        self.rq_used.load(Ordering::Acquire)
    }

    /// Reserves one send queue slot; false if the queue is full.
    pub fn reserve_sq(&self) -> bool {
        self.sq_used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                (u < self.sq_depth).then_some(u + 1)
            })
            .is_ok()
    }

    /// Reserves one receive queue slot; false if the queue is full.
    pub fn reserve_rq(&self) -> bool {
        self.rq_used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                (u < self.rq_depth).then_some(u + 1)
            })
            .is_ok()
    }

    /// Gives back a send queue slot: done by the engine when a request retires, and by an
    /// application thread whose reserved request could not be queued.
    pub fn release_sq(&self) {
        self.release_sq_n(1);
    }

    /// Gives back `n` send queue slots at once (one atomic operation for a run of
    /// requests retired together).
    pub fn release_sq_n(&self, n: u32) {
        if n > 0 {
            self.sq_used.fetch_sub(n, Ordering::AcqRel);
        }
    }

    /// Gives back a receive queue slot (see [`QpShared::release_sq`]).
    pub fn release_rq(&self) {
        self.rq_used.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `SgeList::total_len` (over every entry) is the sum over the list's SGEs, for each
    /// constructor and length, with the largest lengths (no overflow in 64 bits).
    #[test]
    fn total_len_is_the_sum_of_the_list() {
        let all: Vec<Sge> = (0..MAX_SGE as u32)
            .map(|i| Sge {
                stag: i + 1,
                to: u64::from(i) << 40,
                len: [u32::MAX, 1, 4096, 64][i as usize % 4] - i,
            })
            .collect();
        for n in 0..=MAX_SGE {
            for skip in 0..MAX_SGE {
                let sges: Vec<Sge> = all.iter().cycle().skip(skip).take(n).copied().collect();
                let l = SgeList::from_slice(&sges).unwrap();
                let sum: u64 = l.as_slice().iter().map(|s| u64::from(s.len)).sum();
                assert_eq!(l.total_len(), sum, "{n} SGEs from {skip}");
                assert_eq!(sum, sges.iter().map(|s| u64::from(s.len)).sum::<u64>());
            }
        }
        assert_eq!(SgeList::new().total_len(), 0);
        assert_eq!(SgeList::default().total_len(), 0);
        assert!(SgeList::from_slice(&[all[0]; MAX_SGE + 1]).is_none());
    }

    /// A 64 B Write's completion with `wr_id` `k`, as the queue tests push them.
    fn write_wc(k: u64, status: WcStatus) -> Completion {
        Completion {
            wr_id: k,
            qp: QpId {
                core: 0,
                index: 1,
                generation: 2,
            },
            opcode: WcOpcode::Write,
            status,
            byte_len: 64,
            solicited: false,
            invalidated: None,
            imm: None,
            atomic_orig: None,
        }
    }

    /// `CompletionQueue::pop` (an empty queue told inline) gives what the queue's own
    /// `pop` gives: the completions in order, `None` exactly when empty, across the ring's
    /// wrap and an overrun (the lost completion never comes back).
    #[test]
    fn cq_pop_equals_the_queue_pop() {
        let c = |k: u64| write_wc(k, WcStatus::Success);
        let cq = CompletionQueue::new(3).unwrap();
        let mut model = std::collections::VecDeque::new();
        let mut k = 0u64;
        for round in 0..40u64 {
            for _ in 0..round % 5 {
                cq.push(c(k));
                if model.len() < 3 {
                    model.push_back(k);
                }
                k += 1;
            }
            for _ in 0..(round * 7) % 4 {
                assert_eq!(
                    cq.pop().map(|x| x.wr_id),
                    model.pop_front(),
                    "round {round}"
                );
                assert_eq!(cq.is_empty(), model.is_empty());
            }
        }
        assert!(cq.overrun());
        while let Some(want) = model.pop_front() {
            assert_eq!(cq.pop().map(|x| x.wr_id), Some(want));
        }
        assert!(cq.pop().is_none());
    }

    /// `CompletionQueue::push_run` and `pop_into` (one claim of the ring per run and per
    /// batch) give what as many `push`es and `pop`s give: the completions in order, the
    /// first ones of a run that does not fit kept and the rest lost with the overrun
    /// raised, batches that stop where the queue empties, across the ring's wrap.
    #[test]
    fn cq_runs_and_batches_equal_single_pushes_and_pops() {
        let c = |k: u64| write_wc(k, WcStatus::Success);
        let (runs, singles) = (
            CompletionQueue::new(5).unwrap(),
            CompletionQueue::new(5).unwrap(),
        );
        let mut k = 0u64;
        let mut out = [c(0); 4];
        for round in 0..60u64 {
            let n = (round % 7) as usize;
            let base = k;
            runs.push_run(n, |j| c(base + j as u64));
            for j in 0..n as u64 {
                singles.push(c(base + j));
            }
            k += n as u64;
            assert_eq!(runs.overrun(), singles.overrun(), "round {round}");
            assert_eq!(runs.len(), singles.len(), "round {round}");
            let want = ((round * 3) % 5) as usize;
            let got = runs.pop_into(&mut out[..want.min(4)]);
            let mut model = Vec::new();
            while model.len() < want.min(4) {
                match singles.pop() {
                    Some(x) => model.push(x.wr_id),
                    None => break,
                }
            }
            let got: Vec<u64> = out[..got].iter().map(|x| x.wr_id).collect();
            assert_eq!(got, model, "round {round}");
        }
        assert!(runs.overrun(), "the runs overran the queue of 5");
        assert_eq!(runs.pop_into(&mut []), 0);
    }

    /// A queue being destroyed takes its pending events off its channel, tokens and all,
    /// and only its own: the descriptor then reads readable only for the others'.
    #[test]
    fn forget_events_takes_only_the_queues_own() {
        let ch = Arc::new(CompletionChannel::new().unwrap());
        let gone = CompletionQueue::with_channel(8, Arc::clone(&ch)).unwrap();
        let stays = CompletionQueue::with_channel(8, Arc::clone(&ch)).unwrap();
        let zero = std::time::Duration::ZERO;
        let readable = |ch: &CompletionChannel| {
            let fd = ch.fd();
            let mut fds = [rustix::event::PollFd::new(
                &fd,
                rustix::event::PollFlags::IN,
            )];
            let now = rustix::event::Timespec::default();
            matches!(rustix::event::poll(&mut fds, Some(&now)), Ok(1))
        };
        assert!(gone.arm(false) && stays.arm(false));
        gone.push(write_wc(1, WcStatus::Success));
        stays.push(write_wc(2, WcStatus::Success));
        assert!(gone.arm(false));
        gone.push(write_wc(3, WcStatus::Success));
        assert!(gone.arm(false));
        assert_eq!(gone.forget_events(), 2);
        gone.push(write_wc(4, WcStatus::Success));
        assert!(readable(&ch));
        assert_eq!(ch.get_event(Some(zero)).unwrap(), Some(stays.id()));
        assert!(
            !readable(&ch),
            "readable with no event of a live queue left"
        );
        assert_eq!(ch.get_event(Some(zero)).unwrap(), None);
        assert_eq!(CompletionQueue::new(8).unwrap().forget_events(), 0);
    }

    /// An armed queue signals its channel once per run (ARMED_NEXT), and a queue armed for
    /// solicited completions only when the run holds one in error.
    #[test]
    fn cq_run_signals_an_armed_channel_once() {
        let ch = Arc::new(CompletionChannel::new().unwrap());
        let cq = CompletionQueue::with_channel(64, Arc::clone(&ch)).unwrap();
        let c = write_wc;
        let zero = std::time::Duration::ZERO;
        cq.push_run(8, |j| c(j as u64, WcStatus::Success));
        assert_eq!(ch.get_event(Some(zero)).unwrap(), None, "not armed");
        assert!(cq.arm(false));
        cq.push_run(0, |j| c(j as u64, WcStatus::Success));
        assert_eq!(
            ch.get_event(Some(zero)).unwrap(),
            None,
            "an empty run adds nothing"
        );
        cq.push_run(8, |j| c(j as u64, WcStatus::Success));
        assert_eq!(ch.get_event(Some(zero)).unwrap(), Some(cq.id()));
        assert_eq!(
            ch.get_event(Some(zero)).unwrap(),
            None,
            "one signal per arming"
        );
        assert!(cq.arm(true));
        cq.push_run(8, |j| c(j as u64, WcStatus::Success));
        assert_eq!(ch.get_event(Some(zero)).unwrap(), None, "nothing solicited");
        cq.push_run(8, |j| {
            c(
                j as u64,
                if j == 5 {
                    WcStatus::FlushErr
                } else {
                    WcStatus::Success
                },
            )
        });
        assert_eq!(ch.get_event(Some(zero)).unwrap(), Some(cq.id()));
    }

    /// `ibv_req_notify_cq`'s contract with the queue polled after the arming: a completion
    /// pushed by a core while an application thread arms the queue is either seen by the
    /// poll that follows the arming or signals the channel; never neither (a thread that
    /// then sleeps on the channel would sleep through it). The store-buffering shape
    /// (core: push, then read the arming; application: arm, then read the queue) needs
    /// every one of the four accesses sequentially consistent. x86 never shows the bad
    /// outcome (its loads and locked operations are the same either way): the test finds
    /// it under Miri, whose weak memory emulation produced it in the first round with the
    /// acquire/release orderings (`cargo +nightly miri test -p warpcore-engine --lib
    /// an_arming_racing`).
    #[test]
    fn an_arming_racing_a_push_is_seen_or_signalled() {
        let rounds = if cfg!(miri) { 300 } else { 5_000 };
        for round in 0..rounds {
            // Miri has no EFD_SEMAPHORE eventfd: a plain doorbell rings as well.
            let ch = Arc::new(CompletionChannel {
                bell: crate::doorbell::Doorbell::new().unwrap(),
                fired: std::sync::Mutex::new(std::collections::VecDeque::new()),
            });
            let cq = Arc::new(CompletionQueue::with_channel(4, ch).unwrap());
            let core = {
                let cq = Arc::clone(&cq);
                std::thread::spawn(move || cq.push(write_wc(1, WcStatus::Success)))
            };
            assert!(cq.arm(false));
            let seen = !cq.is_empty();
            core.join().unwrap();
            let signalled = cq.notify.as_ref().unwrap().armed.load(Ordering::Relaxed) == UNARMED;
            assert!(
                seen || signalled,
                "round {round}: neither seen nor signalled"
            );
        }
    }

    /// A timeout too long for an `Instant` (`Duration::MAX`, a caller's "for ever") waits
    /// without a deadline: adding it to now panicked. A pending event returns at once.
    #[test]
    fn get_event_with_the_longest_timeout_waits_without_a_deadline() {
        let ch = Arc::new(CompletionChannel::new().unwrap());
        let cq = CompletionQueue::with_channel(4, Arc::clone(&ch)).unwrap();
        assert!(cq.arm(false));
        cq.push(write_wc(1, WcStatus::Success));
        let max = Some(std::time::Duration::MAX);
        assert_eq!(ch.get_event(max).unwrap(), Some(cq.id()));
    }

    /// `SendWr::copy_from` onto a placeholder (the queues' in-place copy) gives the
    /// request itself, for every operation, SGE lists short and full, and each flag.
    #[test]
    fn copy_from_equals_copy() {
        let sge = |i: u32| Sge {
            stag: 0x100 + i,
            to: 0x1_0000_0000 * u64::from(i) + 7,
            len: 64 * i + 1,
        };
        let full: Vec<Sge> = (1..=MAX_SGE as u32).map(sge).collect();
        let ops = [
            SendOp::Send,
            SendOp::SendSe,
            SendOp::SendInvalidate { stag: 9 },
            SendOp::SendSeInvalidate { stag: 10 },
            SendOp::Write {
                remote_stag: 11,
                remote_to: u64::MAX - 3,
            },
            SendOp::Read {
                remote_stag: 12,
                remote_to: 13,
            },
            SendOp::AtomicFetchAdd {
                remote_stag: 14,
                remote_to: 16,
                add: 17,
                add_mask: 18,
            },
            SendOp::AtomicCmpSwap {
                remote_stag: 19,
                remote_to: 24,
                compare: 25,
                compare_mask: 26,
                swap: 27,
                swap_mask: 28,
            },
            SendOp::WriteWithImm {
                remote_stag: 29,
                remote_to: 30,
                imm: 31,
                solicited: false,
            },
            SendOp::Immediate {
                imm: 32,
                solicited: true,
            },
            SendOp::BindMw {
                mw: 33,
                new_key: 34,
                mr: 35,
                to: 36,
                len: 37,
                access: Access::REMOTE_WRITE,
            },
            SendOp::FastReg {
                stag: 38,
                new_key: 39,
                mr: 40,
                mr_to: 41,
                len: 42,
                base_to: 43,
                access: Access::REMOTE_READ,
            },
            SendOp::LocalInvalidate { stag: 44 },
        ];
        for (k, op) in ops.into_iter().enumerate() {
            for n in [0, 1, MAX_SGE] {
                for flags in 0..4u8 {
                    let wr = SendWr {
                        wr_id: 0xABCD_0000 + k as u64,
                        op,
                        sges: SgeList::from_slice(&full[..n]).unwrap(),
                        signaled: flags & 1 != 0,
                        fence: flags & 2 != 0,
                    };
                    let mut w = SendWr::placeholder();
                    w.copy_from(&wr);
                    assert_eq!(w, wr);
                }
            }
        }
    }
}
