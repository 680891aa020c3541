//! A doorbell an application thread can sleep on, and `poll()` as a file descriptor: the
//! read end of a Unix socket pair holding one token per ring. Engine cores ring it without
//! waiting (a full socket buffer drops the token: the descriptor is readable anyway), so
//! the data path never blocks on the application. Completion channels and connection
//! manager event channels are built on it.

use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// See the module documentation.
#[derive(Debug)]
pub struct Doorbell {
    rx: UnixStream,
    tx: UnixStream,
}

impl Doorbell {
    /// A new doorbell (one socket pair).
    pub fn new() -> std::io::Result<Doorbell> {
        let (rx, tx) = UnixStream::pair()?;
        tx.set_nonblocking(true)?;
        Ok(Doorbell { rx, tx })
    }

    /// Rings: one token, never waiting.
    pub fn ring(&self) {
        let _ = (&self.tx).write(&[1]);
    }

    /// The descriptor to wait on: readable while a token is pending.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.rx.as_fd()
    }

    /// Waits until `deadline` (`None`: for ever) for tokens and takes them (up to 64 at
    /// once); returns whether any came. Interrupted waits and timeouts return `false`.
    pub fn wait(&self, deadline: Option<Instant>) -> std::io::Result<bool> {
        let left = match deadline {
            Some(d) => match d.checked_duration_since(Instant::now()) {
                Some(l) if !l.is_zero() => Some(l),
                _ => return Ok(false),
            },
            None => None,
        };
        self.rx
            .set_read_timeout(left.map(|l| l.max(Duration::from_micros(1))))?;
        let mut tokens = [0u8; 64];
        match (&self.rx).read(&mut tokens) {
            Ok(n) => Ok(n > 0),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_wakes_a_waiter_and_tokens_are_taken() {
        let d = Doorbell::new().unwrap();
        let soon = || Some(Instant::now() + Duration::from_millis(30));
        assert!(!d.wait(soon()).unwrap(), "nothing rang");
        d.ring();
        d.ring();
        assert!(d.wait(soon()).unwrap());
        assert!(!d.wait(soon()).unwrap(), "both tokens were taken at once");
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(50));
                d.ring();
            });
            let t0 = Instant::now();
            assert!(d
                .wait(Some(Instant::now() + Duration::from_secs(5)))
                .unwrap());
            assert!(t0.elapsed() >= Duration::from_millis(40));
        });
    }
}
