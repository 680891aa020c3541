//! The server: answers each test connection by its header (echo or sink).

use super::*;

// ---------------------------------------------------------------- the server

#[derive(Debug)]
pub(crate) struct ServerConn {
    pub(crate) id: ConnId,
    pub(crate) header: Vec<u8>,
    pub(crate) kind: u32,
    pub(crate) param: u64,
    // request/response: bytes of the current request received, and of the reply sent
    pub(crate) got: u64,
    pub(crate) echo: Vec<u8>,
    pub(crate) echo_sent: usize,
    // bulk
    pub(crate) count: u64,
    pub(crate) count_reply: [u8; 8],
    pub(crate) count_sent: usize,
    pub(crate) closing: bool,
}

#[derive(Debug)]
pub(crate) struct Server {
    pub(crate) listener: warpcore_tcp::ListenerId,
    pub(crate) conns: Vec<ServerConn>,
    pub(crate) finished: u32,
}

impl Server {
    pub(crate) fn new<D: PollDevice>(
        s: &mut Stack<D>,
        port: u16,
        buffer: usize,
    ) -> Result<Self, String> {
        let listener = s
            .listen(port, 4, &tuning(buffer))
            .map_err(|e| e.to_string())?;
        Ok(Server {
            listener,
            conns: Vec::new(),
            finished: 0,
        })
    }

    pub(crate) fn on_event<D: PollDevice>(&mut self, s: &mut Stack<D>, e: Event) {
        match e {
            Event::Acceptable(l) if l == self.listener => {
                while let Ok(Some(id)) = s.accept(l) {
                    self.conns.push(ServerConn {
                        id,
                        header: Vec::with_capacity(16),
                        kind: 0,
                        param: 0,
                        got: 0,
                        echo: Vec::new(),
                        echo_sent: 0,
                        count: 0,
                        count_reply: [0; 8],
                        count_sent: 8,
                        closing: false,
                    });
                }
            }
            Event::PeerClosed(c) => {
                if let Some(sc) = self.conns.iter_mut().find(|x| x.id == c) {
                    let _ = s.close(c);
                    sc.closing = true;
                }
            }
            Event::Closed(c) | Event::Reset(c) | Event::TimedOut(c) => {
                if let Some(i) = self.conns.iter().position(|x| x.id == c) {
                    let sc = self.conns.swap_remove(i);
                    let _ = s.release(sc.id);
                    self.finished += 1;
                }
            }
            _ => {}
        }
    }

    pub(crate) fn step<D: PollDevice>(&mut self, s: &mut Stack<D>) -> bool {
        let mut work = false;
        for sc in &mut self.conns {
            let c = sc.id;
            if sc.header.len() < 16 {
                let need = 16 - sc.header.len();
                let mut tmp = [0u8; 16];
                let n = s.recv(c, &mut tmp[..need]).unwrap_or(0);
                sc.header.extend_from_slice(&tmp[..n]);
                work |= n > 0;
                if sc.header.len() < 16 {
                    continue;
                }
                if &sc.header[..4] != MAGIC {
                    let _ = s.abort(c);
                    continue;
                }
                sc.kind = u32::from_be_bytes(sc.header[4..8].try_into().expect("4 bytes"));
                sc.param = u64::from_be_bytes(sc.header[8..16].try_into().expect("8 bytes"));
                if sc.kind == KIND_RR {
                    // The size comes from the network: refuse what no tcpperf client asks
                    // for rather than allocate it.
                    if !(1..=MAX_RR_SIZE).contains(&sc.param) {
                        eprintln!(
                            "server: refused a request/response test of {} B (1 to {MAX_RR_SIZE})",
                            sc.param
                        );
                        let _ = s.abort(c);
                        sc.kind = 0;
                        continue;
                    }
                    sc.echo = vec![0; sc.param as usize];
                    sc.echo_sent = sc.echo.len();
                }
            }
            match sc.kind {
                KIND_RR => {
                    let size = sc.param;
                    // Finish sending the previous reply before taking the next request.
                    if sc.echo_sent < sc.echo.len() {
                        let echo = std::mem::take(&mut sc.echo);
                        work |= send_some(s, c, &echo, &mut sc.echo_sent);
                        sc.echo = echo;
                        if sc.echo_sent < sc.echo.len() {
                            continue;
                        }
                    }
                    let got = sc.got;
                    let echo = &mut sc.echo;
                    let n = s
                        .recv_with(c, |d| {
                            let n = d.len().min((size - got) as usize);
                            echo[got as usize..got as usize + n].copy_from_slice(&d[..n]);
                            n
                        })
                        .unwrap_or(0);
                    sc.got += n as u64;
                    work |= n > 0;
                    if sc.got == size && size > 0 {
                        sc.got = 0;
                        sc.echo_sent = 0;
                        let echo = std::mem::take(&mut sc.echo);
                        work |= send_some(s, c, &echo, &mut sc.echo_sent);
                        sc.echo = echo;
                    }
                }
                KIND_BULK => {
                    let n = s.recv_with(c, |d| d.len()).unwrap_or(0);
                    if n > 0 {
                        sc.count += n as u64;
                        work = true;
                        if sc.count >= sc.param && sc.count_sent == 8 && sc.count_reply == [0; 8] {
                            sc.count_reply = sc.count.to_be_bytes();
                            sc.count_sent = 0;
                        }
                    }
                    if sc.count_sent < 8 {
                        let r = sc.count_reply;
                        work |= send_some(s, c, &r, &mut sc.count_sent);
                    }
                }
                _ => {
                    let _ = s.abort(c);
                }
            }
        }
        work
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test header from the network asking for an echo buffer no client would ask for
    /// (u64::MAX octets) is refused with a reset, nothing allocated.
    #[test]
    fn server_resets_an_oversized_request_size() {
        let (ea, eb) = link::pair(&LinkConfig::default());
        let clock = Clock(StdInstant::now());
        let ip = |n| Ipv4Cidr::new(Ipv4Address::new(198, 18, 0, n), 24);
        let mut a = new_stack(
            ea,
            &stack_config([2, 0, 0, 0, 0, 1], ip(1), None),
            clock.now(),
        )
        .unwrap();
        let mut b = new_stack(
            eb,
            &stack_config([2, 0, 0, 0, 0, 2], ip(2), None),
            clock.now(),
        )
        .unwrap();
        let mut server = Server::new(&mut b, 5201, 1 << 16).unwrap();
        let c = a
            .connect(
                (Ipv4Address::new(198, 18, 0, 2), 5201),
                None,
                &tuning(1 << 16),
            )
            .unwrap();
        let mut h = [0u8; 16];
        h[..4].copy_from_slice(MAGIC);
        h[4..8].copy_from_slice(&KIND_RR.to_be_bytes());
        h[8..].copy_from_slice(&u64::MAX.to_be_bytes());
        let (mut sent, mut reset) = (0, false);
        for _ in 0..100_000 {
            let now = clock.now();
            a.poll(now);
            while let Some(e) = a.next_event() {
                reset |= e == Event::Reset(c);
            }
            if sent < h.len() {
                send_some(&mut a, c, &h, &mut sent);
            }
            b.poll(now);
            while let Some(e) = b.next_event() {
                server.on_event(&mut b, e);
            }
            server.step(&mut b);
            if reset {
                break;
            }
        }
        assert!(reset, "the server did not reset the connection");
    }
}
