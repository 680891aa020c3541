//! A doorbell an application thread can sleep on, and `poll()` as a file descriptor: an
//! eventfd whose counter holds the rings not yet taken. Engine cores ring it without
//! waiting (an eventfd write blocks only when the counter would pass 2^64 - 2), so the data
//! path never blocks on the application. Completion channels and connection manager event
//! channels are built on it.
//!
//! Waiting ([`Doorbell::wait`]) is a `poll(2)` on the descriptor with the caller's own
//! timeout: it takes nothing, so every thread waiting on one doorbell sees a pending ring,
//! and a waiter never sleeps while one is pending. Rings are taken apart from waiting,
//! without blocking ([`Doorbell::take`]): one at a time on a counting doorbell (a
//! completion channel takes one per event it hands out, so its descriptor is readable
//! exactly while an event is pending), all at once on a plain one (a wake-up hint).
//!
//! The system calls go through `rustix`'s safe wrappers, so this module needs no `unsafe`
//! (docs/decisions/0008-doorbell-eventfd.md).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use rustix::event::{eventfd, poll, EventfdFlags, PollFd, PollFlags, Timespec};

/// See the module documentation.
#[derive(Debug)]
pub struct Doorbell {
    fd: OwnedFd,
    /// Held by [`Doorbell::take`] across its poll and its read, so that two threads
    /// taking at once cannot both see one ring and the second then sleep in `read` on the
    /// blocking descriptor. Never taken by [`Doorbell::ring`]: cores do not wait on it.
    taking: Mutex<()>,
}

impl Doorbell {
    /// A plain doorbell: [`Doorbell::take`] takes every pending ring at once.
    pub fn new() -> std::io::Result<Doorbell> {
        Doorbell::with_flags(EventfdFlags::CLOEXEC)
    }

    /// A counting doorbell: [`Doorbell::take`] takes one ring, so a user that rings once per
    /// event and takes once per event keeps the descriptor readable exactly while an event
    /// is pending.
    pub fn counting() -> std::io::Result<Doorbell> {
        Doorbell::with_flags(EventfdFlags::CLOEXEC | EventfdFlags::SEMAPHORE)
    }

    // Not EFD_NONBLOCK: whether the descriptor is non-blocking is the application's choice
    // (rdma-compat's `ibv_get_cq_event` fails with EAGAIN exactly when the application set
    // O_NONBLOCK on the channel's descriptor), and nothing here relies on it.
    fn with_flags(flags: EventfdFlags) -> std::io::Result<Doorbell> {
        Ok(Doorbell {
            fd: eventfd(0, flags)?,
            taking: Mutex::new(()),
        })
    }

    /// Rings: one more pending ring, never waiting.
    pub fn ring(&self) {
        let _ = rustix::io::write(&self.fd, &1u64.to_ne_bytes());
    }

    /// The descriptor to wait on: readable while a ring is pending. Poll it; reading it
    /// takes rings its owner counts on.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Takes one pending ring (a counting doorbell) or all of them (a plain one) without
    /// waiting; returns whether there was one. The read follows a zero-timeout poll, and
    /// takers are serialized from the poll to the read, so it does not block on a blocking
    /// descriptor (unless something other than `take` reads the descriptor, which its
    /// users must not do). Several threads may take at once (clones of one event channel).
    pub fn take(&self) -> bool {
        // Nothing is left inconsistent by a panic while it is held: poisoning is ignored.
        let _taking = self.taking.lock().unwrap_or_else(PoisonError::into_inner);
        if !self.pending(Some(&Timespec::default())) {
            return false;
        }
        let mut count = [0u8; 8];
        matches!(rustix::io::read(&self.fd, &mut count), Ok(8))
    }

    /// Waits until a ring is pending or `deadline` passes (`None`: no deadline), taking
    /// nothing; returns whether one is pending. An interrupted wait returns `false` early.
    pub fn wait(&self, deadline: Option<Instant>) -> std::io::Result<bool> {
        let timeout = match deadline {
            // Longer than a `Timespec` holds: as good as no deadline.
            Some(d) => Timespec::try_from(d.saturating_duration_since(Instant::now())).ok(),
            None => None,
        };
        let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
        match poll(&mut fds, timeout.as_ref()) {
            Ok(n) => Ok(n > 0),
            Err(rustix::io::Errno::INTR) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    fn pending(&self, timeout: Option<&Timespec>) -> bool {
        let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
        matches!(poll(&mut fds, timeout), Ok(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn soon() -> Option<Instant> {
        Some(Instant::now() + Duration::from_millis(30))
    }

    #[test]
    fn a_ring_wakes_a_waiter_and_waiting_takes_nothing() {
        let d = Doorbell::new().unwrap();
        assert!(!d.wait(soon()).unwrap(), "nothing rang");
        d.ring();
        assert!(d.wait(soon()).unwrap());
        assert!(d.wait(soon()).unwrap(), "waiting took the ring");
        let d2 = Doorbell::new().unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(50));
                d2.ring();
            });
            let t0 = Instant::now();
            assert!(d2
                .wait(Some(Instant::now() + Duration::from_secs(5)))
                .unwrap());
            assert!(t0.elapsed() >= Duration::from_millis(40));
        });
    }

    #[test]
    fn a_plain_doorbell_takes_every_ring_at_once_a_counting_one_takes_one() {
        let plain = Doorbell::new().unwrap();
        plain.ring();
        plain.ring();
        assert!(plain.take());
        assert!(!plain.take(), "both rings were taken at once");
        assert!(!plain.wait(Some(Instant::now())).unwrap());
        let counting = Doorbell::counting().unwrap();
        counting.ring();
        counting.ring();
        assert!(counting.take());
        assert!(
            counting.wait(Some(Instant::now())).unwrap(),
            "one ring left"
        );
        assert!(counting.take());
        assert!(!counting.take(), "nothing left, and taking did not block");
        assert!(!counting.wait(soon()).unwrap());
    }

    /// Two threads taking from one plain doorbell with one ring pending (two clones of a
    /// verbs `EventChannel` in `get_event`): both may see the descriptor readable, and
    /// the second `read` then sleeps on the blocking descriptor, past any deadline, until
    /// the next ring. `take` must never block: one takes the ring, the other returns
    /// `false`.
    #[test]
    fn concurrent_takes_never_block() {
        use std::sync::{mpsc, Arc, Barrier};
        let d = Arc::new(Doorbell::new().unwrap());
        let rounds = if cfg!(miri) { 4 } else { 2_000 };
        for round in 0..rounds {
            d.ring();
            let start = Arc::new(Barrier::new(2));
            let (tx, rx) = mpsc::channel();
            let takers: Vec<_> = (0..2)
                .map(|_| {
                    let (d, start, tx) = (Arc::clone(&d), Arc::clone(&start), tx.clone());
                    std::thread::spawn(move || {
                        start.wait();
                        tx.send(d.take()).unwrap();
                    })
                })
                .collect();
            let mut taken = 0;
            let mut blocked = false;
            for _ in 0..2 {
                match rx.recv_timeout(Duration::from_secs(2)) {
                    Ok(t) => taken += usize::from(t),
                    Err(_) => {
                        // Release the sleeper so that the test ends, then fail.
                        blocked = true;
                        d.ring();
                        taken += usize::from(rx.recv().unwrap());
                    }
                }
            }
            for t in takers {
                t.join().unwrap();
            }
            assert!(!blocked, "round {round}: a take blocked on the descriptor");
            assert_eq!(taken, 1, "round {round}: exactly one take gets the ring");
        }
    }
}
