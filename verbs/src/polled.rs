//! The caller-driven mode ([`crate::Drive::Caller`]): engine cores without threads of their
//! own, run by the application threads that wait on them.
//!
//! Every place where the verbs layer waits for an engine core runs the core's loop instead
//! of waiting for another thread to: completion-queue polls ([`Driver::pop`]), connection
//! manager waits ([`crate::Context::next_event`]) and control calls ([`wait_reply`]). With
//! cores on their own threads all of this reduces to what it was: a pop, a channel wait.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam::channel::{Receiver, RecvTimeoutError, TryRecvError};
use warpcore_engine::runtime::{CoreHandle, CoreWatch};
use warpcore_engine::{Completion, CompletionQueue};

use crate::{Context, Error};

/// Runs one loop of each caller-driven core; whether any did work.
pub(crate) fn progress(cores: &[CoreHandle]) -> bool {
    let mut work = false;
    for c in cores {
        work |= c.progress();
    }
    work
}

/// [`Context::progress_until`]: a lone caller-driven core runs its loops under one lock;
/// several run one loop each per turn.
pub(crate) fn progress_until(
    cores: &[CoreHandle],
    max_loops: u32,
    done: &mut dyn FnMut() -> bool,
) -> bool {
    match cores {
        [c] if c.caller_driven() => c.progress_until(max_loops, |_| done()),
        _ if cores.iter().any(CoreHandle::caller_driven) => {
            for _ in 0..max_loops {
                progress(cores);
                if done() {
                    return true;
                }
            }
            false
        }
        _ => done(),
    }
}

/// How long a control call waits for its reply.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// How often a control call waiting on a core with its own thread looks whether that
/// thread ended ([`CoreHandle::gone`]).
const GONE_CHECK: Duration = Duration::from_millis(10);

/// Waits for a control call's reply, running the core meanwhile if it is caller-driven.
/// [`Error::EngineGone`] when the core stops for good while the call waits (its thread
/// ended, or a caller-driven loop panicked): the command stays in the ring, never applied,
/// and its reply channel neither sends nor closes. [`Error::Timeout`] when the core is
/// still running but has not answered within [`CALL_TIMEOUT`] (a core stalled or starved
/// of its CPU): the command may still be applied later, its reply then dropped (a queue
/// pair or listener it creates then is undone at once: the core destroys or unlistens what
/// a reply nobody takes would have named, `runtime::apply`).
pub(crate) fn wait_reply<T>(core: &CoreHandle, rx: &Receiver<T>) -> Result<T, Error> {
    wait_reply_within(core, rx, CALL_TIMEOUT)
}

/// [`wait_reply`] with the timeout given.
fn wait_reply_within<T>(
    core: &CoreHandle,
    rx: &Receiver<T>,
    timeout: Duration,
) -> Result<T, Error> {
    let deadline = Instant::now() + timeout;
    let caller = core.caller_driven();
    loop {
        if caller {
            core.progress();
            match rx.try_recv() {
                Ok(r) => return Ok(r),
                Err(TryRecvError::Disconnected) => return Err(Error::EngineGone),
                Err(TryRecvError::Empty) => {}
            }
        } else {
            match rx.recv_timeout(GONE_CHECK) {
                Ok(r) => return Ok(r),
                Err(RecvTimeoutError::Disconnected) => return Err(Error::EngineGone),
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
        let gone = core.gone();
        if gone || Instant::now() >= deadline {
            // A reply sent just before the core went (or the deadline passed) still counts.
            // A live core that did not answer in time is not a stopped engine: the caller
            // gets a timeout, not EngineGone (which tells it to give the context up).
            return rx.try_recv().map_err(|_| {
                if gone {
                    Error::EngineGone
                } else {
                    Error::Timeout
                }
            });
        }
    }
}

/// How long a blocking wait on a channel of a context with engine threads sleeps before it
/// asks whether the threads ended ([`Context::cores_gone`]): a thread that panicked
/// signals nothing.
pub(crate) const GONE_POLL: Duration = Duration::from_millis(100);

/// What a completion queue runs when it finds itself empty, and how it learns that its
/// cores stopped for good: the caller-driven context that created it, or watches on the
/// threads of the cores of a context with engine threads (not the context itself, which
/// the queue must not keep alive).
#[derive(Debug, Clone)]
pub(crate) enum Driver {
    /// The caller-driven context that created the queue: its polls run that context's
    /// cores.
    Caller(Context),
    /// The threads of the cores of the context that created the queue.
    Threads(Arc<[CoreWatch]>),
}

impl Driver {
    /// The driver of completion queues created by `ctx`.
    pub(crate) fn of(ctx: &Context) -> Driver {
        if ctx.inner.cores.iter().any(CoreHandle::caller_driven) {
            Driver::Caller(ctx.clone())
        } else {
            Driver::Threads(
                ctx.inner
                    .cores
                    .iter()
                    .filter_map(CoreHandle::watch)
                    .collect(),
            )
        }
    }

    /// Takes a completion; when there is none and the cores are caller-driven, runs them
    /// once and looks again. A full queue is drained without running the cores.
    pub(crate) fn pop(&self, cq: &CompletionQueue) -> Option<Completion> {
        if let Some(c) = cq.pop() {
            return Some(c);
        }
        match self {
            Driver::Caller(ctx) if ctx.progress() => cq.pop(),
            _ => None,
        }
    }

    /// Moves up to `out.len()` completions into `out` with one claim of the queue; when
    /// it had fewer and the cores are caller-driven, runs them once and takes more.
    pub(crate) fn pop_into(&self, cq: &CompletionQueue, out: &mut [Completion]) -> usize {
        let n = cq.pop_into(out);
        if n == out.len() {
            return n;
        }
        match self {
            Driver::Caller(ctx) if ctx.progress() => n + cq.pop_into(&mut out[n..]),
            _ => n,
        }
    }

    /// Whether the cores all stopped for good: a caller-driven context's loops panicked
    /// ([`CoreHandle::gone`]), or the threads of a context's cores ended (it was dropped
    /// and shut them down, or they panicked; [`CoreWatch::gone`]). Nothing will complete
    /// into its queues nor signal its channels any more, so a blocking wait must not go on.
    pub(crate) fn gone(&self) -> bool {
        match self {
            Driver::Caller(ctx) => ctx.cores_gone(),
            Driver::Threads(watches) => watches.iter().all(CoreWatch::gone),
        }
    }

    /// The idle step of a blocking wait after `spins` empty polls: spin, then park in short
    /// slices; caller-driven, never park (nothing else runs the cores), only yield.
    pub(crate) fn pause(&self, spins: u32) {
        if spins < 200 {
            std::hint::spin_loop();
        } else if matches!(self, Driver::Caller(_)) {
            std::thread::yield_now();
        } else {
            std::thread::park_timeout(Duration::from_micros(20));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{link_pair, Config, Drive, LinkConfig};

    /// A control call whose live core does not answer in time times out: it used to be told
    /// the engine had stopped (EngineGone), which sends an application to tear down a
    /// context that still works. Both kinds of core.
    #[test]
    fn a_live_core_that_does_not_answer_in_time_is_a_timeout_not_engine_gone() {
        for drive in [Drive::Thread, Drive::Caller] {
            let (dev, _peer) = link_pair(&LinkConfig::default());
            let mut cfg = Config::new(dev, [10, 0, 0, 1]);
            cfg.drive = drive;
            let ctx = Context::open(cfg).unwrap();
            let core = &ctx.inner.cores[0];
            // A reply channel nobody answers on (its sender kept alive): the core runs,
            // it just never replies.
            let (_tx, rx) = crossbeam::channel::bounded::<()>(1);
            let r = wait_reply_within(core, &rx, Duration::from_millis(50));
            assert_eq!(r, Err(Error::Timeout), "{drive:?}");
            assert!(!core.gone(), "{drive:?}");
            // A real call still works afterwards.
            assert!(ctx.stats().is_ok(), "{drive:?}");
        }
    }
}
