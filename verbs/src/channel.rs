//! Completion channels and the connection manager's event channel: sleeping until a
//! completion or an event arrives, or `poll()`ing a descriptor for it.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::weak_map::WeakById;
use crate::{polled, CmEvent, CompletionQueue, Context, Error};

/// A completion channel (the `ibv_comp_channel` of the verbs), from
/// [`Context::create_comp_channel`]. Completion queues created with it
/// ([`Context::create_cq_with_channel`]) signal it once per arming
/// ([`CompletionQueue::req_notify`]); [`CompletionChannel::get_event`] sleeps until one
/// does and names it; any number of threads may wait on one channel, each event goes to
/// one of them. The channel is also a file descriptor ([`AsFd`], [`AsRawFd`]), readable
/// exactly while an event is pending, for `poll()` and `epoll` loops (poll it, do not read
/// it).
///
/// The usual loop, as with `ibv_get_cq_event`: arm the queue, poll it (completions that
/// arrived before the arming signal nothing), and when it is empty wait for the event,
/// then poll again.
#[derive(Debug, Clone)]
pub struct CompletionChannel {
    inner: Arc<warpcore_engine::CompletionChannel>,
    cqs: Arc<Mutex<WeakById<warpcore_engine::CompletionQueue>>>,
    ctx: Context,
}

impl CompletionChannel {
    pub(crate) fn new(ctx: Context) -> Result<CompletionChannel, Error> {
        Ok(CompletionChannel {
            inner: Arc::new(warpcore_engine::CompletionChannel::new()?),
            cqs: Arc::default(),
            ctx,
        })
    }

    /// The context that made it.
    pub(crate) fn context(&self) -> &Context {
        &self.ctx
    }

    pub(crate) fn new_cq(
        &self,
        depth: usize,
    ) -> Result<Arc<warpcore_engine::CompletionQueue>, warpcore_engine::DepthError> {
        let cq = Arc::new(warpcore_engine::CompletionQueue::with_channel(
            depth,
            Arc::clone(&self.inner),
        )?);
        let id = cq.id();
        self.cqs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, &cq);
        Ok(cq)
    }

    /// Waits up to `timeout` (`None` or `Some(Duration::MAX)`: until one comes) for an armed
    /// queue of this channel to signal, and returns that queue (`ibv_get_cq_event`).
    /// [`Error::Timeout`] when none did in time. A zero timeout returns a pending event (a non-blocking
    /// `ibv_get_cq_event`). An event of a queue dropped meanwhile is skipped.
    /// [`Error::EngineGone`] when no event is pending and the channel's context's cores
    /// stopped for good (a caller-driven loop panicked, a core thread panicked): none can
    /// come any more. (With engine threads, a wait without events wakes every
    /// 100 ms to ask.)
    pub fn get_event(&self, timeout: Option<Duration>) -> Result<CompletionQueue, Error> {
        let deadline = timeout.and_then(crate::deadline_after);
        loop {
            // Both ways below look at the channel before they look at the clock.
            let left = deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
            let id = if self.ctx.caller_driven() {
                // Nobody else runs the cores: run them while waiting, backing off from
                // spinning to short sleeps while nothing happens.
                let mut idle = 0u32;
                loop {
                    let work = self.ctx.progress();
                    if let Some(id) = self.inner.get_event(Some(Duration::ZERO))? {
                        break id;
                    }
                    // Cores that stopped for good (a loop panicked) signal nothing more.
                    if self.ctx.cores_gone() {
                        match self.inner.get_event(Some(Duration::ZERO))? {
                            Some(id) => break id,
                            None => return Err(Error::EngineGone),
                        }
                    }
                    if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                        return Err(Error::Timeout);
                    }
                    idle = if work { 0 } else { idle.saturating_add(1) };
                    match idle {
                        0..=200 => std::hint::spin_loop(),
                        201..=2000 => std::thread::yield_now(),
                        _ => std::thread::sleep(Duration::from_micros(50)),
                    }
                }
            } else {
                // In slices: a core thread that ended (a panic) signals nothing, and says
                // nothing either.
                let slice = left.map_or(polled::GONE_POLL, |l| l.min(polled::GONE_POLL));
                match self.inner.get_event(Some(slice))? {
                    Some(id) => id,
                    None if self.ctx.cores_gone() => {
                        match self.inner.get_event(Some(Duration::ZERO))? {
                            Some(id) => id,
                            None => return Err(Error::EngineGone),
                        }
                    }
                    None if left.is_some_and(|l| l <= slice) => return Err(Error::Timeout),
                    None => continue,
                }
            };
            let cq = self.cqs.lock().unwrap_or_else(|e| e.into_inner()).get(id);
            if let Some(cq) = cq {
                return Ok(CompletionQueue {
                    cq,
                    driver: polled::Driver::of(&self.ctx),
                });
            }
        }
    }
}

impl AsFd for CompletionChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.fd()
    }
}

impl AsRawFd for CompletionChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.inner.fd().as_raw_fd()
    }
}

/// The connection manager's event channel (`rdma_event_channel`), from
/// [`Context::event_channel`]: [`EventChannel::get_event`] sleeps until an engine core hands
/// over a [`CmEvent`] (connection requests, establishment, disconnects, errors, CQ errors)
/// and returns it. It is also a file descriptor ([`AsFd`], [`AsRawFd`]) that becomes
/// readable when events were handed over, for `poll()` and `epoll` loops (then take them
/// with `get_event(Some(Duration::ZERO))` until it times out, which leaves the descriptor
/// unreadable until the next hand-over). Poll the descriptor, do not read it. A new
/// channel's descriptor starts readable once, events or not (an event queued while the
/// channel was made must not wait for the next one): the first `get_event` may time out.
#[derive(Debug, Clone)]
pub struct EventChannel {
    pub(crate) bell: Arc<warpcore_engine::doorbell::Doorbell>,
    pub(crate) ctx: Context,
}

impl EventChannel {
    /// The next event, waiting up to `timeout` (`None` or `Some(Duration::MAX)`: until one
    /// comes); [`Error::Timeout`] when none came (`rdma_get_cm_event`).
    /// [`Error::EngineGone`] when none is queued and the context's core threads ended (a
    /// panic): none can come any more. (A wait without events wakes every
    /// 100 ms to ask.)
    pub fn get_event(&self, timeout: Option<Duration>) -> Result<CmEvent, Error> {
        let deadline = timeout.and_then(crate::deadline_after);
        loop {
            if let Some(e) = self.ctx.take_event() {
                return Ok(e);
            }
            // Asked after the queue was found empty: an event handed over before the
            // threads ended is taken by the look that follows.
            if self.ctx.cores_gone() {
                return self.ctx.take_event().ok_or(Error::EngineGone);
            }
            // Nothing queued: the rings pending were spent (a core rings after it queued its
            // events). Take them, then look again: events queued before the take are seen
            // now, later ones ring again, so no waiter sleeps through one.
            if self.bell.take() {
                if let Some(e) = self.ctx.take_event() {
                    // The rings taken may have announced more than this event: ring once
                    // more so that another waiter (or the next call) looks.
                    self.bell.ring();
                    return Ok(e);
                }
            }
            let now = std::time::Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                return Err(Error::Timeout);
            }
            let slice = now + polled::GONE_POLL;
            self.bell
                .wait(Some(deadline.map_or(slice, |d| d.min(slice))))?;
        }
    }
}

impl AsFd for EventChannel {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.bell.fd()
    }
}

impl AsRawFd for EventChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.bell.fd().as_raw_fd()
    }
}
