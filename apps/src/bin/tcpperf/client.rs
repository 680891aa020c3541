//! The client: opens each test with its header, then runs request/response ping-pongs or a
//! bulk transfer and reports them.

use super::*;

// ---------------------------------------------------------------- the client

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ClientPhase {
    Connecting,
    Running,
    Finished,
}

#[derive(Debug)]
pub(crate) struct Client {
    pub(crate) test: TestArgs,
    pub(crate) kind: TestKind,
    pub(crate) conn: ConnId,
    pub(crate) phase: ClientPhase,
    pub(crate) header: [u8; 16],
    pub(crate) header_sent: usize,
    // request/response
    pub(crate) msg: Vec<u8>,
    pub(crate) msg_sent: usize,
    pub(crate) reply_got: u64,
    pub(crate) round: u64,
    pub(crate) t_req: StdInstant,
    pub(crate) hist: Histogram<u64>,
    // bulk
    pub(crate) bulk_sent: u64,
    pub(crate) reply: Vec<u8>,
    pub(crate) t_start: StdInstant,
    pub(crate) cpu_start: f64,
    pub(crate) elapsed_s: f64,
    pub(crate) cpu_s: f64,
    pub(crate) error: Option<String>,
}

impl Client {
    pub(crate) fn new<D: PollDevice>(
        s: &mut Stack<D>,
        server: (Ipv4Address, u16),
        test: TestArgs,
        kind: TestKind,
    ) -> Result<Self, String> {
        let conn = s
            .connect(
                server,
                None,
                &TcpTuning {
                    congestion: test.congestion().into(),
                    ..tuning(test.buffer())
                },
            )
            .map_err(|e| e.to_string())?;
        let (code, param) = match kind {
            TestKind::Rr => (KIND_RR, test.size),
            TestKind::Bulk => (KIND_BULK, test.bytes),
        };
        let mut header = [0u8; 16];
        header[..4].copy_from_slice(MAGIC);
        header[4..8].copy_from_slice(&code.to_be_bytes());
        header[8..].copy_from_slice(&param.to_be_bytes());
        Ok(Client {
            msg: vec![0x42; test.size as usize],
            test,
            kind,
            conn,
            phase: ClientPhase::Connecting,
            header,
            header_sent: 0,
            msg_sent: 0,
            reply_got: 0,
            round: 0,
            t_req: StdInstant::now(),
            hist: rtt_histogram(),
            bulk_sent: 0,
            reply: Vec::with_capacity(8),
            t_start: StdInstant::now(),
            elapsed_s: 0.0,
            cpu_start: 0.0,
            cpu_s: 0.0,
            error: None,
        })
    }

    pub(crate) fn on_event(&mut self, e: Event) {
        match e {
            Event::Connected(c) if c == self.conn => {
                self.phase = ClientPhase::Running;
                self.t_start = StdInstant::now();
                self.cpu_start = cpu_seconds();
            }
            Event::Reset(c) if c == self.conn => {
                self.error = Some("connection reset".into());
                self.phase = ClientPhase::Finished;
            }
            Event::TimedOut(c) if c == self.conn => {
                self.error = Some("connection timed out".into());
                self.phase = ClientPhase::Finished;
            }
            _ => {}
        }
    }

    /// Advances the test; returns whether it made progress.
    pub(crate) fn step<D: PollDevice>(&mut self, s: &mut Stack<D>) -> bool {
        if self.phase != ClientPhase::Running {
            return false;
        }
        let c = self.conn;
        let mut work = false;
        if self.header_sent < 16 {
            let h = self.header;
            work |= send_some(s, c, &h, &mut self.header_sent);
            if self.header_sent < 16 {
                return work;
            }
            self.t_req = StdInstant::now();
            self.t_start = self.t_req;
            self.cpu_start = cpu_seconds();
        }
        match self.kind {
            TestKind::Rr => {
                let size = self.test.size;
                work |= send_some(s, c, &self.msg, &mut self.msg_sent);
                let want = size - self.reply_got;
                let got = s.recv_with(c, |d| d.len().min(want as usize)).unwrap_or(0) as u64;
                if got > 0 {
                    work = true;
                    self.reply_got += got;
                }
                if self.reply_got == size && self.msg_sent == size as usize {
                    let ns = self.t_req.elapsed().as_nanos() as u64;
                    if self.round >= self.test.warmup {
                        record_rtt(&mut self.hist, ns);
                    }
                    self.round += 1;
                    self.reply_got = 0;
                    self.msg_sent = 0;
                    if self.round == self.test.warmup {
                        self.t_start = StdInstant::now();
                        self.cpu_start = cpu_seconds();
                    }
                    if self.round >= self.test.warmup + self.test.iterations {
                        self.elapsed_s = self.t_start.elapsed().as_secs_f64();
                        self.cpu_s = cpu_seconds() - self.cpu_start;
                        let _ = s.close(c);
                        self.phase = ClientPhase::Finished;
                    } else {
                        self.t_req = StdInstant::now();
                        work |= send_some(s, c, &self.msg, &mut self.msg_sent);
                    }
                }
            }
            TestKind::Bulk => {
                let total = self.test.bytes;
                while self.bulk_sent < total {
                    let off = self.bulk_sent;
                    let n = s
                        .send_with(c, |buf| {
                            let n = buf.len().min((total - off) as usize);
                            // Payload content is irrelevant for throughput; skip filling.
                            n
                        })
                        .unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    self.bulk_sent += n as u64;
                    work = true;
                }
                let mut tmp = [0u8; 8];
                let room = 8 - self.reply.len();
                if let Ok(n) = s.recv(c, &mut tmp[..room]) {
                    self.reply.extend_from_slice(&tmp[..n]);
                    work |= n > 0;
                }
                if self.reply.len() == 8 {
                    self.elapsed_s = self.t_start.elapsed().as_secs_f64();
                    self.cpu_s = cpu_seconds() - self.cpu_start;
                    let got = u64::from_be_bytes(self.reply[..8].try_into().expect("8 bytes"));
                    if got != total {
                        self.error = Some(format!("server counted {got} of {total} bytes"));
                    }
                    let _ = s.close(c);
                    self.phase = ClientPhase::Finished;
                }
            }
        }
        work
    }

    pub(crate) fn report(&self, label: &str) -> Result<(), String> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        match self.kind {
            TestKind::Rr => report_rr(
                label,
                self.test.size,
                &self.hist,
                self.elapsed_s,
                self.cpu_s,
            ),
            TestKind::Bulk => report_bulk(label, self.test.bytes, self.elapsed_s, self.cpu_s),
        }
        Ok(())
    }
}
