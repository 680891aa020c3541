//! Engine core threads: one pinned thread per [`EngineCore`], joined to application threads
//! only by lock-free queues (GUIDE rule 8).
//!
//! - **Commands in**: one SPSC ring per core ([`crate::ring::spsc`]). Several application
//!   threads may post to QPs of one core, so the producer end sits behind a mutex taken
//!   by application threads only; the core's consumer end is lock-free. Work requests
//!   arrive already validated and with their queue slot reserved ([`crate::validate_send`]),
//!   so the core never answers them; control calls (create QP, connect, accept, ...) carry a
//!   one-slot reply channel the core fills with `try_send`, never waiting.
//! - **Events out**: one SPSC ring per core of [`CmEvent`]s (the core produces; the
//!   consumer end sits behind the context's mutex). Completions go straight into the
//!   [`crate::CompletionQueue`]s, which several cores may share (MPMC).
//! - **Idle back-off** lives in [`Backoff`], the one place a core slows down: spin, then
//!   yield, then park for at most 200 µs. Before parking the core raises the ring's idle
//!   flag ([`crate::ring::Consumer::prepare_idle`]); a producer unparks it only when that
//!   flag was up ([`crate::ring::Producer::doorbell_needed`], siw's lazy doorbell). An
//!   engine core never blocks on an application thread, and the doorbell never blocks.
//! - **Three ways to drive a core** ([`Drive`]): its own thread with that back-off (the
//!   default), its own thread that never parks ([`Drive::BusyPoll`]), or no thread at all
//!   ([`Drive::Caller`]): the application thread runs the core's loop itself through
//!   [`CoreHandle::progress`] (run to completion, as a DPDK application's lcore does). The
//!   loop is the same (`CoreLoop::step`) in all three; only who calls it differs. On a
//!   machine with fewer CPUs than runnable threads, the caller-driven mode saves the
//!   scheduler wake-up that every hand-off between an application thread and its core's
//!   thread otherwise costs.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration as StdDuration, Instant as StdInstant};

use std::sync::Mutex;

use crossbeam::channel::Sender;
use try_lock::TryLock;
use warpcore_tcp::smoltcp::time::Instant;
use warpcore_tcp::smoltcp::wire::Ipv4Address;
use warpcore_tcp::{PollDevice, StackConfig};

use crate::clock::CoreClock;
use crate::cm::{CmEvent, ListenerId, MpaParams, RequestId};
use crate::config::EngineConfig;
use crate::core::{EngineCore, QpAttr};
use crate::doorbell::Doorbell;
use crate::error::{DeviceError, EngineError};
use crate::mem::MrTable;
use crate::ring::{channel, Consumer, Front, Producer};
use crate::wr::{QpId, QpShared, RecvWr, SendWr};

/// A reply slot for a control call.
pub type Reply<T> = Sender<Result<T, EngineError>>;

/// What an application thread asks of an engine core.
#[derive(Debug)]
pub enum Command {
    /// Create a queue pair.
    CreateQp(QpAttr, Reply<(QpId, Arc<QpShared>)>),
    /// Destroy a queue pair.
    DestroyQp(QpId, Reply<()>),
    /// A send work request, validated and reserved by [`crate::validate_send`].
    PostSend(QpId, SendWr),
    /// A receive work request, validated and reserved by [`crate::validate_recv`].
    PostRecv(QpId, RecvWr),
    /// Connect a queue pair.
    Connect {
        /// The queue pair.
        qp: QpId,
        /// Peer address and port.
        remote: (Ipv4Address, u16),
        /// Local port to connect from (`None`: an ephemeral one the TCP chooses).
        local_port: Option<u16>,
        /// MPA settings.
        params: MpaParams,
        /// Private data of the MPA Request.
        private_data: Vec<u8>,
        /// Reply.
        reply: Reply<()>,
    },
    /// Listen on a port.
    Listen(u16, MpaParams, Reply<ListenerId>),
    /// Stop listening on a port.
    Unlisten(u16, Reply<()>),
    /// Accept a request on a queue pair.
    Accept {
        /// The request.
        req: RequestId,
        /// The queue pair.
        qp: QpId,
        /// Private data of the MPA Reply.
        private_data: Vec<u8>,
        /// IRD/ORD override.
        ird_ord: Option<(u16, u16)>,
        /// Reply.
        reply: Reply<()>,
    },
    /// Reject a request.
    Reject(RequestId, Vec<u8>, Reply<()>),
    /// Graceful close.
    Disconnect(QpId, Reply<()>),
    /// Abortive close.
    Abort(QpId, Reply<()>),
    /// Take a failed queue pair back to the idle state ([`EngineCore::reset_qp`]).
    ResetQp(QpId, Reply<()>),
    /// The core's counters.
    Stats(Reply<crate::core::CoreStats>),
    /// Resolve the next hop towards an address, with a timeout.
    ResolveNeighbor(Ipv4Address, StdDuration, Reply<crate::cm::NeighborId>),
}

/// The idle back-off of an engine core: the one place it slows down.
#[derive(Debug)]
pub struct Backoff {
    idle_loops: u32,
    spin: u32,
    yield_until: u32,
    park: StdDuration,
}

impl Backoff {
    /// Spin `spin` idle loops, yield until `yield_until`, then park up to `park`.
    pub fn new(spin: u32, yield_until: u32, park: StdDuration) -> Backoff {
        Backoff {
            idle_loops: 0,
            spin,
            yield_until,
            park,
        }
    }

    /// Never parks: spin `spin` idle loops, then yield to other runnable threads (the
    /// [`Drive::BusyPoll`] back-off; the core answers within one loop of a post, and a
    /// CPU shared with other threads still gets their share).
    pub fn busy(spin: u32) -> Backoff {
        Backoff::new(spin, u32::MAX, StdDuration::ZERO)
    }

    /// Called once per loop with whether any poller did work; parks only when the command
    /// ring is still empty after its idle flag went up. Returns whether it only spun after
    /// an idle loop (the next loop follows at once: [`ClockReuse`]).
    fn pause<T>(&mut self, work: bool, commands: &mut Consumer<T>) -> bool {
        if work {
            self.idle_loops = 0;
            return false;
        }
        self.idle_loops = self.idle_loops.saturating_add(1);
        if self.idle_loops < self.spin {
            std::hint::spin_loop();
            return true;
        } else if self.idle_loops < self.yield_until || self.park.is_zero() {
            thread::yield_now();
        } else {
            if commands.prepare_idle() {
                thread::park_timeout(self.park);
            }
            commands.clear_idle();
        }
        false
    }
}

/// How an engine core is driven.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Drive {
    /// Its own (pinned) thread; idle, it spins, yields, then parks up to 200 µs until a
    /// producer rings the doorbell ([`Backoff`]).
    #[default]
    Thread,
    /// Its own (pinned) thread that never parks: spins, then yields when idle. Lowest
    /// latency when the core has a CPU of its own; costs that CPU.
    BusyPoll,
    /// No thread: the core runs one loop each time an application thread calls
    /// [`CoreHandle::progress`] (the verbs layer calls it from completion-queue polls,
    /// event waits and control calls). Nothing happens on the core between such calls,
    /// TCP timers included, so the application must keep polling while it expects
    /// traffic. Several threads may call it; one runs the loop, the others return at once.
    Caller,
}

/// One engine core and its queues: the body of the core's loop, whoever runs it.
struct CoreLoop<D: PollDevice> {
    core: EngineCore<D>,
    commands: Consumer<Command>,
    events: Producer<CmEvent>,
    /// Rung when events were handed to the application ([`CoreHandle::set_event_doorbell`]).
    event_bell: Arc<OnceLock<Arc<Doorbell>>>,
    /// The event the application's ring had no room for, taken from the core: the rest
    /// wait in the core's queue, where a request's report can still be withdrawn and
    /// refusals are bounded (`Ctx::report_cancelled`, `Ctx::report_refused`).
    held: Option<CmEvent>,
    clock: CoreClock,
}

/// Idle loops that follow one another at once take the clock's last reading instead of
/// reading it, up to this many loops in a row counting the one that read it: a loop that
/// follows an idle one at once sees a time at most seven idle loops old (well under a
/// microsecond, the engine time's unit, `clock.rs`). A loop after one that did work, or
/// after a yield, a park or a return to the application, reads the clock.
pub const CLOCK_REUSE_LOOPS: u32 = 8;

/// Which loops of a run of loops that follow one another at once take the clock's last
/// reading ([`CLOCK_REUSE_LOOPS`]).
#[derive(Debug, Default)]
struct ClockReuse {
    /// Loops in a row that took the clock's last reading.
    reused: u32,
}

impl ClockReuse {
    /// Whether the next loop may take the clock's last reading: it follows an idle loop
    /// (`after_idle`) and fewer than [`CLOCK_REUSE_LOOPS`] - 1 loops in a row took it.
    #[inline(always)]
    fn last_will_do(&mut self, after_idle: bool) -> bool {
        if after_idle && self.reused + 1 < CLOCK_REUSE_LOOPS {
            self.reused += 1;
            true
        } else {
            self.reused = 0;
            false
        }
    }
}

impl<D: PollDevice> CoreLoop<D> {
    /// One loop of the core at a fresh clock reading; whether anything was done.
    #[inline(always)]
    fn step(&mut self) -> bool {
        self.step_with(false)
    }

    /// Loops at once until `done` (asked after each with whether that loop did work)
    /// returns true, at most `max_loops`: the first loop, and each after one that did work,
    /// at a fresh clock reading ([`ClockReuse`]). Whether `done` returned true.
    fn run_until(&mut self, max_loops: u32, done: &mut dyn FnMut(bool) -> bool) -> bool {
        let mut reuse = ClockReuse::default();
        let mut work = true;
        for _ in 0..max_loops {
            work = self.step_with(reuse.last_will_do(!work));
            if done(work) {
                return true;
            }
        }
        false
    }

    /// One loop of the core: application commands (bounded), the core's pollers, events
    /// out. Returns whether anything was done. Its time is the clock's last reading if
    /// `last_will_do` ([`ClockReuse`]), else a fresh one. Out of line, one copy for every
    /// caller: a copy per caller pushes the pollers out of line (~30 instructions more per
    /// idle loop).
    #[inline(never)]
    fn step_with(&mut self, last_will_do: bool) -> bool {
        let now = if last_will_do {
            self.clock.last()
        } else {
            self.clock.now()
        };
        // The receive snapshot first, then the commands: every frame this loop takes
        // reached the device before the commands it applies were read, so a receive posted
        // before the peer was told to Send is there for the Send (`EngineCore::begin_poll`).
        self.core.begin_poll();
        // Poller 0: application rings, bounded. The idle loop's case is one look at an
        // empty ring; the commands are applied out of line (inlined here, the code around
        // them cost the idle loop ~8 instructions more, callgrind's `engine_profile idle`).
        let (mut work, mut now) = (false, now);
        if !self.commands.is_empty() {
            (work, now) = self.apply_commands();
        }
        // Pollers 1-7 (rx, tcp events, requests, receive, timers, send, tx flush).
        work |= self.core.poll(now);
        // Events out (none, the idle loop's case, costs two tests).
        if self.core.has_events() || self.held.is_some() {
            work |= self.hand_out_events();
        }
        work
    }

    /// Poller 0 of [`Self::step_with`] when the command ring is not empty: up to
    /// `command_budget` commands applied at a clock reading taken now (not the previous
    /// loop's time, nor the loop's own reading, which may be older than the commands: reused
    /// from an idle loop before, or taken before the core was preempted while the
    /// application queued them; a timeout a command starts counts from here). Whether any
    /// was, and the reading, which the rest of the loop runs at (the clock never goes
    /// back). Out of line: the idle loop does not pay for its set-up (the note in
    /// [`Self::step_with`]).
    #[inline(never)]
    fn apply_commands(&mut self) -> (bool, Instant) {
        let now = self.clock.now();
        self.core.commands_at(now);
        let mut work = false;
        let mut exhausted = true;
        for _ in 0..self.core.config().command_budget {
            let Some(cmd) = self.commands.front() else {
                exhausted = false;
                break;
            };
            work = true;
            apply(&mut self.core, cmd);
        }
        // The ring went empty: every command queued before the snapshot was applied
        // (those queued since cannot matter to its frames). The budget ran out first:
        // some left may be older than the frames, which wait for a loop that applied
        // them. (Bounded: the queues' depths bound the commands an application can
        // queue before completions, which need received ACKs, free room.)
        if exhausted && !self.commands.is_empty() {
            self.core.hold_rx();
        }
        (work, now)
    }

    /// The core's last loops when it stops (its context dropped): the commands still in
    /// its ring are carried out, then one more loop sends what they queued. A queue pair
    /// dropped just before its context queued its destroy (`QueuePair`'s drop does not
    /// wait for it): skipped, its connection was never aborted and the peer, told
    /// nothing (no RST, no FIN), held it until its keep-alive probes went unanswered
    /// (30 s by default; for good without keep-alives). Bounded: no application thread
    /// can queue more once the handle is dropped.
    /// Connection requests still pending (reported to an application that will never
    /// answer them now, or still being read) are reset, so that their initiators learn
    /// of it at once rather than at their MPA startup timeout.
    fn finish(&mut self) {
        while !self.commands.is_empty() {
            self.step();
        }
        self.core.reset_pending_requests();
        self.step();
    }

    /// Moves the core's events to the application's ring while it has room; the event it
    /// had none for waits in `held`, the others in the core, never lost. Returns whether
    /// any was handed out.
    #[inline(never)]
    fn hand_out_events(&mut self) -> bool {
        let mut handed = false;
        while let Some(ev) = self.held.take().or_else(|| self.core.next_event()) {
            if let Err(ev) = self.events.push(ev) {
                self.held = Some(ev);
                break;
            }
            handed = true;
        }
        if handed {
            if let Some(bell) = self.event_bell.get() {
                bell.ring();
            }
        }
        handed
    }
}

/// A caller-driven core, its device type erased.
trait Step: Send {
    fn step(&mut self) -> bool;
    fn run_until(&mut self, max_loops: u32, done: &mut dyn FnMut(bool) -> bool) -> bool;
    fn linger(&self) -> StdDuration;
    /// Takes a send request (validated and reserved by [`crate::validate_send`]) into its
    /// QP's send queue now, as the loop takes [`Command::PostSend`] from the ring, unless
    /// commands wait in the ring (false: nothing done; the request must go behind them).
    fn post_send_now(&mut self, qp: QpId, wr: &SendWr) -> bool;
    /// [`CoreLoop::finish`].
    fn finish(&mut self);
}

impl<D: PollDevice + Send> Step for CoreLoop<D> {
    fn step(&mut self) -> bool {
        CoreLoop::step(self)
    }
    fn run_until(&mut self, max_loops: u32, done: &mut dyn FnMut(bool) -> bool) -> bool {
        CoreLoop::run_until(self, max_loops, done)
    }
    fn post_send_now(&mut self, qp: QpId, wr: &SendWr) -> bool {
        if !self.commands.is_empty() {
            return false;
        }
        // A lone message (a ping-pong's) leaves from this call: its segment does not wait
        // for the loop this thread runs next.
        let clock = &mut self.clock;
        self.core.post_send_now(qp, wr, &mut || clock.now());
        true
    }
    fn linger(&self) -> StdDuration {
        StdDuration::from_millis(self.core.config().shutdown_linger_ms)
    }
    fn finish(&mut self) {
        CoreLoop::finish(self)
    }
}

enum Runner {
    Thread {
        stop: Arc<AtomicBool>,
        thread: Thread,
        join: Option<JoinHandle<()>>,
        /// Set as the thread ends, however it ends ([`CoreWatch`]).
        ended: Arc<AtomicBool>,
    },
    Caller(CallerLock<Box<dyn Step>>),
}

/// A caller-driven core's loop, run by whichever application thread takes it first: only
/// ever *tried* ([`CoreHandle::post_send`], [`CoreHandle::progress`],
/// [`CoreHandle::progress_until`] give up at once when another thread holds it), so it is
/// an atomic flag ([`try_lock::TryLock`]) rather than a mutex. Taking it is one atomic swap
/// and letting go one release store, where `std::sync::Mutex` pays a second locked
/// operation to learn whether a waiter needs waking (none ever waits here): at 64 B that
/// was ~5 % of a write_bw sender's samples, posting a message and running the loop per
/// message (`perf annotate` of `CoreHandle::post_send`).
///
/// As a mutex is poisoned, a panic inside the loop or a post leaves the core never run
/// again (its state may be half-changed); the shutdown still takes it and drops it.
struct CallerLock<T> {
    /// `None` once shut down.
    core: TryLock<Option<T>>,
    /// Set when a closure of [`CallerLock::with`] panicked.
    poisoned: AtomicBool,
}

impl<T> CallerLock<T> {
    fn new(core: T) -> Self {
        CallerLock {
            core: TryLock::new(Some(core)),
            poisoned: AtomicBool::new(false),
        }
    }

    /// Runs `f` on the core if this thread can take it now: `None` when another thread
    /// holds it, or it panicked before, or it is shut down.
    #[inline]
    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        let mut g = self.core.try_lock()?;
        // Read under the flag: the swap that took it (Acquire) sees the store a panicking
        // holder made before its guard let go (Release).
        if self.poisoned.load(Ordering::Relaxed) {
            return None;
        }
        let core = g.as_mut()?;
        let poison = PoisonOnUnwind(&self.poisoned);
        let r = f(core);
        std::mem::forget(poison);
        Some(r)
    }

    /// The core, taken out for good (poisoned or not), unless already taken.
    fn take(&mut self) -> Option<T> {
        // `&mut self`: no other thread holds the flag, so this never fails.
        self.core.try_lock().and_then(|mut g| g.take())
    }
}

/// Marks a [`CallerLock`] poisoned when dropped, that is, unless forgotten after its closure
/// returned: it drops only while unwinding from a panic, before the flag is let go.
struct PoisonOnUnwind<'a>(&'a AtomicBool);

impl Drop for PoisonOnUnwind<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Whether a core with its own thread stopped for good, seen without holding the core
/// ([`CoreHandle::watch`]): the thread ended, after a shutdown or a panic. A completion
/// queue outlives the context that created it, and a thread blocked on one cannot ask the
/// core's handle, which may be gone with the context: it asks this.
#[derive(Debug, Clone)]
pub struct CoreWatch(Arc<AtomicBool>);

impl CoreWatch {
    /// Whether the core's thread ended: nothing more comes from that core (completions,
    /// events, channel signals). What it queued before it ended is still there to take.
    pub fn gone(&self) -> bool {
        // Acquire: what the thread pushed before it ended is seen by a caller that sees it
        // gone, so "empty and gone" means empty for good.
        self.0.load(Ordering::Acquire)
    }
}

/// Marks a core thread's [`CoreWatch`] gone when the thread's closure ends: on return, and
/// while unwinding from a panic (dropped after the core's loop, which drops first).
struct EndedOnDrop(Arc<AtomicBool>);

impl Drop for EndedOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Runner::Thread { thread, .. } => write!(f, "Thread({:?})", thread.name()),
            Runner::Caller(_) => write!(f, "Caller"),
        }
    }
}

/// A running engine core, seen from application threads.
#[derive(Debug)]
pub struct CoreHandle {
    commands: Mutex<Producer<Command>>,
    events: Mutex<Consumer<CmEvent>>,
    event_bell: Arc<OnceLock<Arc<Doorbell>>>,
    runner: Runner,
}

impl CoreHandle {
    /// From now on the core rings `bell` whenever it hands events to the application (a
    /// connection manager event channel sleeps on it). Set once; returns false when a
    /// doorbell was set already.
    pub fn set_event_doorbell(&self, bell: Arc<Doorbell>) -> bool {
        self.event_bell.set(bell).is_ok()
    }

    /// Queues a command and rings the doorbell if the core may be idle. Fails (returning
    /// nothing queued) when the command queue is full or the core stopped.
    pub fn submit(&self, cmd: Command) -> Result<(), EngineError> {
        let mut cmd = Some(cmd);
        self.submit_by(|p| {
            let Some(c) = cmd.take() else {
                return false;
            };
            match p.push(c) {
                Ok(()) => true,
                Err(c) => {
                    cmd = Some(c);
                    false
                }
            }
        })
    }

    /// Queues [`Command::PostSend`] of `wr` (validated and reserved by
    /// [`crate::validate_send`]) as [`CoreHandle::submit`] does, the command built in its
    /// ring slot: the request is copied once on its way in, field by field
    /// (`SendWr::copy_from`, [`Producer::push_with_init`]).
    ///
    /// A caller-driven core that no thread is running and whose command ring is empty
    /// takes the request straight into its send queue instead, on this thread, as its
    /// loop would have from the ring (`Step::post_send_now`): no ring slot written and
    /// read back (~90 instructions a request). With commands waiting, the request goes
    /// behind them through the ring, so a thread's requests and commands keep their order.
    pub fn post_send(&self, qp: QpId, wr: &SendWr) -> Result<(), EngineError> {
        if let Runner::Caller(c) = &self.runner {
            if c.with(|s| s.post_send_now(qp, wr)) == Some(true) {
                return Ok(());
            }
        }
        self.submit_by(|p| {
            p.push_with_init(
                || Command::PostSend(qp, SendWr::placeholder()),
                |c| {
                    if let Command::PostSend(_, w) = c {
                        w.copy_from(wr);
                    }
                },
            )
        })
    }

    /// Queues [`Command::PostRecv`] of `wr` (validated and reserved by
    /// [`crate::validate_recv`]), as [`CoreHandle::post_send`] does.
    pub fn post_recv(&self, qp: QpId, wr: &RecvWr) -> Result<(), EngineError> {
        self.submit_by(|p| p.push_with(|| Command::PostRecv(qp, *wr)))
    }

    /// The body of [`CoreHandle::submit`]: `push` tries to queue the command (false: the
    /// ring is full, nothing queued) and may be called a second time.
    #[inline]
    fn submit_by(
        &self,
        mut push: impl FnMut(&mut Producer<Command>) -> bool,
    ) -> Result<(), EngineError> {
        if self.gone() {
            return Err(EngineError::CoreGone);
        }
        let mut p = self.commands.lock().unwrap_or_else(|e| e.into_inner());
        if push(&mut p) {
            if let Runner::Thread { thread, .. } = &self.runner {
                if p.doorbell_needed() {
                    thread.unpark();
                }
            }
            return Ok(());
        }
        // A full ring of a caller-driven core drains only when someone runs it: run it once
        // (it takes up to `command_budget` commands) and try again.
        drop(p);
        if self.caller_driven() {
            self.progress();
            let mut p = self.commands.lock().unwrap_or_else(|e| e.into_inner());
            if push(&mut p) {
                return Ok(());
            }
        }
        Err(EngineError::LimitExceeded("command_queue_depth"))
    }

    /// Queues `cmds` in order under one lock and rings the doorbell once (a post list);
    /// returns how many were queued, all unless the command ring filled (then the rest are
    /// dropped and [`EngineError::LimitExceeded`] says so). A caller-driven core is run
    /// once to make room, as [`CoreHandle::submit`] does.
    pub fn submit_all(&self, cmds: Vec<Command>) -> Result<usize, (usize, EngineError)> {
        if self.gone() {
            return Err((0, EngineError::CoreGone));
        }
        let total = cmds.len();
        let mut it = cmds.into_iter();
        let mut queued = 0;
        let mut retried = false;
        let mut pending = it.next();
        while let Some(cmd) = pending.take() {
            let mut p = self.commands.lock().unwrap_or_else(|e| e.into_inner());
            let mut next = Some(cmd);
            while let Some(c) = next.take() {
                match p.push(c) {
                    Ok(()) => {
                        queued += 1;
                        next = it.next();
                    }
                    Err(c) => {
                        pending = Some(c);
                        break;
                    }
                }
            }
            if let Runner::Thread { thread, .. } = &self.runner {
                if queued > 0 && p.doorbell_needed() {
                    thread.unpark();
                }
            }
            drop(p);
            if pending.is_some() {
                if retried || !self.caller_driven() {
                    return Err((queued, EngineError::LimitExceeded("command_queue_depth")));
                }
                retried = true;
                self.progress();
            }
        }
        debug_assert_eq!(queued, total);
        Ok(queued)
    }

    /// Whether the core will never run again: its thread ended, or (caller-driven) its
    /// loop panicked (the lock of its loop poisoned). Commands are refused then
    /// ([`EngineError::CoreGone`]): queued, none would ever be applied, and a caller that
    /// waits for room in a full ring (a `QueuePair`'s drop) would wait for ever. A caller
    /// waiting for the reply of a command queued before the core went asks this too: that
    /// command stays in the ring, its reply channel never sends nor closes.
    pub fn gone(&self) -> bool {
        match &self.runner {
            // The flag rather than `JoinHandle::is_finished`: its Acquire load makes what
            // the thread queued before it ended visible to a caller that sees it gone.
            Runner::Thread { join, ended, .. } => join.is_none() || ended.load(Ordering::Acquire),
            Runner::Caller(c) => c.poisoned.load(Ordering::Relaxed),
        }
    }

    /// A watch on a core with its own thread: whether that thread ended
    /// ([`CoreWatch::gone`]), asked without holding this handle. `None` for a caller-driven
    /// core, which stops only with its handle or when its loop panics ([`CoreHandle::gone`]).
    pub fn watch(&self) -> Option<CoreWatch> {
        match &self.runner {
            Runner::Thread { ended, .. } => Some(CoreWatch(Arc::clone(ended))),
            Runner::Caller(_) => None,
        }
    }

    /// Takes the oldest event of this core.
    pub fn next_event(&self) -> Option<CmEvent> {
        self.events.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }

    /// Whether the core is caller-driven ([`Drive::Caller`]).
    pub fn caller_driven(&self) -> bool {
        matches!(self.runner, Runner::Caller(_))
    }

    /// Runs one loop of a caller-driven core on this thread and returns whether it did
    /// any work. Returns `false` at once for a core with its own thread, or when another
    /// thread is running this core's loop right now.
    pub fn progress(&self) -> bool {
        match &self.runner {
            Runner::Caller(c) => c.with(|s| s.step()).unwrap_or(false),
            Runner::Thread { .. } => false,
        }
    }

    /// Runs loops of a caller-driven core on this thread, one after another without
    /// letting go of it, until `done` (asked after each loop, with whether that loop did
    /// any work) returns true, at most `max_loops` loops. For a waiter spinning on memory
    /// that an RDMA Write will change: [`Self::progress`] in a loop takes the core's lock
    /// and reads the clock every time, and so notices an arriving frame later (loops that
    /// follow an idle one take the clock's last reading, [`CLOCK_REUSE_LOOPS`]). `done`
    /// must be a quick test: the core runs nothing while it runs. Returns whether `done`
    /// returned true; `false` at once for a core with its own thread, or when another
    /// thread is running this core's loop right now.
    pub fn progress_until(&self, max_loops: u32, mut done: impl FnMut(bool) -> bool) -> bool {
        match &self.runner {
            Runner::Caller(c) => c
                .with(|s| s.run_until(max_loops, &mut done))
                .unwrap_or(false),
            Runner::Thread { .. } => false,
        }
    }

    fn shutdown(&mut self) {
        match &mut self.runner {
            Runner::Thread {
                stop, thread, join, ..
            } => {
                stop.store(true, Ordering::SeqCst);
                thread.unpark();
                if let Some(j) = join.take() {
                    let _ = j.join();
                }
            }
            Runner::Caller(c) => {
                // A core whose loop panicked is never run again, not even to finish.
                let poisoned = c.poisoned.load(Ordering::Relaxed);
                let core = c.take();
                if let Some(mut core) = core {
                    if !poisoned {
                        core.finish();
                    }
                    // As a core thread does: stop polling, keep the device open a while.
                    thread::sleep(core.linger());
                    drop(core);
                }
            }
        }
    }
}

impl Drop for CoreHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// How to start one engine core.
pub struct CoreSpec<D> {
    /// Builds the device on the core's own thread (DPDK queues are per-lcore objects).
    pub device: Box<dyn FnOnce() -> Result<D, DeviceError> + Send>,
    /// IP configuration of the core's stack.
    pub stack: StackConfig,
    /// CPU to pin the thread to (`None`: not pinned; ignored by [`Drive::Caller`], whose
    /// core runs on whichever thread calls it). A CPU the thread cannot be pinned to fails
    /// [`spawn_core`] with [`EngineError::Pin`].
    pub cpu: Option<usize>,
    /// Who runs the core's loop.
    pub drive: Drive,
}

impl<D> std::fmt::Debug for CoreSpec<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoreSpec")
            .field("stack", &self.stack)
            .field("cpu", &self.cpu)
            .field("drive", &self.drive)
            .finish_non_exhaustive()
    }
}

pub use crate::clock::Clock;

/// The instant every core of this process counts its `now` from. One origin for all: two
/// engines joined by the in-memory link stamp each frame with the sender's `now` and
/// deliver it once the receiver's `now` reaches the stamp, so with an origin per core a
/// core started later saw every frame of an earlier one late by the gap between their
/// starts (milliseconds: an RDMA Read over the link took ~5.7 ms instead of microseconds).
///
/// Anything else that drives a stack over the in-memory link next to engine cores (a test's
/// scripted peer) must count its time from the same origin, or every frame between it and
/// the cores arrives late by the gap between their starts: the first call, by a core or
/// not, fixes the origin from `clock`.
pub fn time_origin(clock: &Clock) -> StdInstant {
    static ORIGIN: OnceLock<StdInstant> = OnceLock::new();
    *ORIGIN.get_or_init(|| clock.now())
}

/// Starts core number `index`: on its own thread, returning its handle once the device and
/// the stack are up; or, for [`Drive::Caller`], on this thread, returning a handle whose
/// [`CoreHandle::progress`] runs the loop.
pub fn spawn_core<D: PollDevice + Send + 'static>(
    index: u16,
    spec: CoreSpec<D>,
    cfg: EngineConfig,
    mrs: Arc<MrTable>,
    clock: Clock,
) -> Result<CoreHandle, EngineError> {
    // Checked before the rings are built from it, as `EngineCore::new` checks it (with
    // the same error): a ring depth that is 0 or not a power of two panicked in
    // `spsc::channel`, and an absurd one was allocated before anything refused it.
    cfg.validate()
        .map_err(|e| EngineError::LimitExceeded(e.field))?;
    let (commands, c2) = channel::<Command>(cfg.command_queue_depth);
    let (e2, events) = channel::<CmEvent>(cfg.event_queue_depth);
    let event_bell: Arc<OnceLock<Arc<Doorbell>>> = Arc::default();
    let bell2 = Arc::clone(&event_bell);
    let build = move |device: D, cfg: EngineConfig, clock: Clock| {
        let base = time_origin(&clock);
        let mut clock = CoreClock::new(clock, base);
        let now = clock.now();
        EngineCore::new(index, device, &spec.stack, cfg, mrs, base, now).map(|core| CoreLoop {
            core,
            commands: c2,
            events: e2,
            event_bell: bell2,
            held: None,
            clock,
        })
    };
    if spec.drive == Drive::Caller {
        let device = (spec.device)().map_err(EngineError::Device)?;
        let lp = build(device, cfg, clock)?;
        return Ok(CoreHandle {
            commands: Mutex::new(commands),
            events: Mutex::new(events),
            event_bell,
            runner: Runner::Caller(CallerLock::new(Box::new(lp))),
        });
    }
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = crossbeam::channel::bounded::<Result<(), EngineError>>(1);
    let s2 = Arc::clone(&stop);
    let ended = Arc::new(AtomicBool::new(false));
    let ended_on_drop = EndedOnDrop(Arc::clone(&ended));
    let (cpu, device, drive) = (spec.cpu, spec.device, spec.drive);
    let join = thread::Builder::new()
        .name(format!("warpcore-core{index}"))
        .spawn(move || {
            // Declared first, dropped last: after the loop (and the queues it fills).
            let _ended = ended_on_drop;
            if let Some(cpu) = cpu {
                // A CPU asked for and not had is the user's error, named: a core left
                // unpinned would run the benchmark the user did not ask for. (`CPU_SET`
                // holds CPUs below 1,024: core_affinity would index past it.)
                if cpu >= 1024 || !core_affinity::set_for_current(core_affinity::CoreId { id: cpu })
                {
                    let _ = ready_tx.send(Err(EngineError::Pin(cpu)));
                    return;
                }
            }
            let device = match device() {
                Ok(d) => d,
                Err(e) => {
                    let _ = ready_tx.send(Err(EngineError::Device(e)));
                    return;
                }
            };
            let mut lp = match build(device, cfg, clock) {
                Ok(l) => l,
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            let _ = ready_tx.send(Ok(()));
            let linger = StdDuration::from_millis(lp.core.config().shutdown_linger_ms);
            let mut backoff = match drive {
                Drive::BusyPoll => Backoff::busy(2000),
                _ => Backoff::new(2000, 2100, StdDuration::from_micros(200)),
            };
            let (mut reuse, mut spun) = (ClockReuse::default(), false);
            while !s2.load(Ordering::Relaxed) {
                let work = lp.step_with(reuse.last_will_do(spun));
                spun = backoff.pause(work, &mut lp.commands);
            }
            lp.finish();
            // Stopped polling; keep the device open a while (see `shutdown_linger_ms`).
            thread::sleep(linger);
            drop(lp);
        })
        .map_err(|e| EngineError::Device(DeviceError::Spawn(Arc::new(e))))?;
    let thread = join.thread().clone();
    match ready_rx.recv() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            let _ = join.join();
            return Err(e);
        }
        Err(_) => {
            let _ = join.join();
            return Err(EngineError::CoreGone);
        }
    }
    Ok(CoreHandle {
        commands: Mutex::new(commands),
        events: Mutex::new(events),
        event_bell,
        runner: Runner::Thread {
            stop,
            thread,
            join: Some(join),
            ended,
        },
    })
}

/// Carries out the command at the front of the ring. Work requests, the common case, are
/// read where they lie in the ring's slot and copied from there into their queue; a `pop`
/// would copy the whole command out first, and moving it through the `match` copied it
/// again. Inlined into the loop's step (it was, until the post of a Write at once made
/// the work request's case larger: the command-ring Send then cost ~17 instructions more).
#[inline(always)]
fn apply<D: PollDevice>(core: &mut EngineCore<D>, cmd: Front<'_, Command>) {
    // `forget` below leaks what a work request owns: they must own nothing.
    const _: () = assert!(!std::mem::needs_drop::<SendWr>() && !std::mem::needs_drop::<RecvWr>());
    // Work requests own nothing (`SendWr` and `RecvWr` are `Copy`): their slot is freed
    // without the call of `Command`'s drop glue that dropping the guard would make.
    match &*cmd {
        Command::PostSend(qp, wr) => {
            // The loop sends what it framed in this loop's pass (send first).
            let _ = core.post_send_reserved_ref(*qp, wr);
            return cmd.forget();
        }
        Command::PostRecv(qp, wr) => {
            core.post_recv_reserved_ref(*qp, wr);
            return cmd.forget();
        }
        _ => {}
    }
    match cmd.take() {
        // A caller that gave up waiting for the reply (the verbs' control call timed out,
        // `Error::Timeout`) dropped its receiver: what the command created is undone here,
        // not left behind. A queue pair whose number nobody learned held one of `max_qps`
        // slots (and its completion queues) until the context went; a listener held its
        // port, and the caller's retry was refused with `PortInUse`.
        Command::CreateQp(attr, r) => {
            if let Err(e) = r.try_send(core.create_qp(attr)) {
                if let Ok((qp, _)) = e.into_inner() {
                    let _ = core.destroy_qp(qp);
                }
            }
        }
        Command::DestroyQp(qp, r) => {
            let _ = r.try_send(core.destroy_qp(qp));
        }
        // Taken by the match above; out of line here (not a second inlined copy).
        Command::PostSend(qp, wr) => core.post_send_reserved(qp, wr),
        Command::PostRecv(qp, wr) => core.post_recv_reserved(qp, wr),
        Command::Connect {
            qp,
            remote,
            local_port,
            params,
            private_data,
            reply,
        } => {
            let _ =
                reply.try_send(core.connect_from(qp, remote, local_port, &params, &private_data));
        }
        Command::Listen(port, params, r) => {
            if let Err(e) = r.try_send(core.listen(port, params)) {
                if e.into_inner().is_ok() {
                    let _ = core.unlisten(port);
                }
            }
        }
        Command::Unlisten(port, r) => {
            let _ = r.try_send(core.unlisten(port));
        }
        Command::Accept {
            req,
            qp,
            private_data,
            ird_ord,
            reply,
        } => {
            let _ = reply.try_send(core.accept(req, qp, &private_data, ird_ord));
        }
        Command::Reject(req, pd, r) => {
            let _ = r.try_send(core.reject(req, &pd));
        }
        Command::Disconnect(qp, r) => {
            let _ = r.try_send(core.disconnect(qp));
        }
        Command::Abort(qp, r) => {
            let _ = r.try_send(core.abort(qp));
        }
        Command::ResetQp(qp, r) => {
            let _ = r.try_send(core.reset_qp(qp));
        }
        Command::Stats(r) => {
            let _ = r.try_send(Ok(core.stats()));
        }
        Command::ResolveNeighbor(ip, timeout, r) => {
            let _ = r.try_send(core.resolve_neighbor(ip, timeout));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::CallerLock;

    #[test]
    fn caller_lock_runs_one_taker_at_a_time() {
        let c = CallerLock::new(0u32);
        assert_eq!(c.with(|n| *n += 1), Some(()));
        // Held by this thread: a second taker (here nested) gives up at once.
        assert_eq!(c.with(|_| c.with(|n| *n += 1)), Some(None));
        assert_eq!(c.with(|n| *n), Some(1));
    }

    #[test]
    fn caller_lock_is_taken_by_one_of_many_threads_at_a_time() {
        // Each taker raises the count, checks no one else moved it meanwhile, lowers it.
        let c = CallerLock::new(0u32);
        let ran = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..20_000 {
                        c.with(|n| {
                            *n += 1;
                            std::hint::black_box(&mut *n);
                            assert_eq!(*n, 1, "two threads held the core");
                            *n -= 1;
                            ran.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        });
                    }
                });
            }
        });
        assert!(ran.into_inner() > 0);
        assert_eq!(c.with(|n| *n), Some(0));
    }

    #[test]
    fn caller_lock_is_poisoned_by_a_panic_and_still_taken_at_shutdown() {
        let mut c = CallerLock::new(7u32);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            c.with(|n| {
                *n = 8;
                panic!("a loop panicked");
            })
        }));
        assert!(r.is_err());
        // Never run again, as a poisoned mutex; the flag itself was let go.
        assert_eq!(c.with(|n| *n), None);
        assert_eq!(c.take(), Some(8));
        assert_eq!(c.take(), None);
        assert_eq!(c.with(|n| *n), None);
    }

    #[test]
    fn caller_lock_after_shutdown_runs_nothing() {
        let mut c = CallerLock::new(1u32);
        assert_eq!(c.take(), Some(1));
        assert_eq!(c.with(|n| *n), None);
    }
}
