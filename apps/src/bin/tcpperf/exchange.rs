//! A byte-exact pattern exchange with any TCP peer (the kernel-interop test).

use super::*;

// ---------------------------------------------------------------- exchange

#[derive(Debug)]
pub(crate) struct Exchange {
    pub(crate) conn: Option<ConnId>,
    pub(crate) listener: Option<warpcore_tcp::ListenerId>,
    pub(crate) bytes: u64,
    pub(crate) tx_salt: u32,
    pub(crate) rx_salt: u32,
    pub(crate) sent: u64,
    pub(crate) received: u64,
    pub(crate) fin_sent: bool,
    pub(crate) peer_closed: bool,
    pub(crate) connected: bool,
    pub(crate) error: Option<String>,
}

impl Exchange {
    pub(crate) fn on_event<D: PollDevice>(&mut self, s: &mut Stack<D>, e: Event) {
        match e {
            Event::Connected(c) if Some(c) == self.conn => self.connected = true,
            Event::Acceptable(l) if Some(l) == self.listener => {
                if let Ok(Some(c)) = s.accept(l) {
                    if self.conn.is_none() {
                        self.conn = Some(c);
                        self.connected = true;
                    }
                }
            }
            Event::PeerClosed(c) if Some(c) == self.conn => self.peer_closed = true,
            Event::Reset(c) | Event::TimedOut(c) if Some(c) == self.conn => {
                let what = if matches!(e, Event::Reset(_)) {
                    "reset"
                } else {
                    "timed out"
                };
                self.error = Some(format!(
                    "connection {what} after sending {} and receiving {} bytes",
                    self.sent, self.received
                ))
            }
            _ => {}
        }
    }

    pub(crate) fn step<D: PollDevice>(&mut self, s: &mut Stack<D>) -> bool {
        let (Some(c), true) = (self.conn, self.connected) else {
            return false;
        };
        let mut work = false;
        while self.sent < self.bytes {
            let (off, total, salt) = (self.sent, self.bytes, self.tx_salt);
            let n = s
                .send_with(c, |buf| {
                    let n = buf.len().min((total - off) as usize);
                    fill_pattern(&mut buf[..n], salt, off);
                    n
                })
                .unwrap_or(0);
            if n == 0 {
                break;
            }
            self.sent += n as u64;
            work = true;
        }
        if self.sent == self.bytes && !self.fin_sent {
            let _ = s.close(c);
            self.fin_sent = true;
        }
        loop {
            let (off, salt) = (self.received, self.rx_salt);
            let mut bad = None;
            let n = s
                .recv_with(c, |d| {
                    if let Some(k) = d
                        .iter()
                        .enumerate()
                        .position(|(k, &b)| b != pattern(salt, off + k as u64))
                    {
                        bad = Some(off + k as u64);
                    }
                    d.len()
                })
                .unwrap_or(0);
            if let Some(at) = bad {
                self.error
                    .get_or_insert(format!("received byte {at} differs"));
            }
            if n == 0 {
                break;
            }
            self.received += n as u64;
            work = true;
        }
        work
    }

    /// Finished when everything was received and everything sent was acknowledged, FIN
    /// included (TIME-WAIT or CLOSED): leaving earlier could strand unacknowledged bytes.
    pub(crate) fn done<D: PollDevice>(&self, s: &mut Stack<D>) -> bool {
        if self.error.is_some() {
            return true;
        }
        let Some(c) = self.conn else {
            return false;
        };
        let acked = matches!(s.state(c), Ok(State::TimeWait | State::Closed));
        self.received == self.bytes && self.sent == self.bytes && self.peer_closed && acked
    }
}
