//! The rping exchange over one connection, client and server (rping.c's
//! `rping_test_client` / `rping_test_server`), with every completion and connection event
//! checked, so a Terminate from either side ends the run with a clear report.
//!
//! Per ping: client Send(start buffer advertisement) -> server RDMA Read of it -> server
//! Send(go ahead) -> client Send(sink buffer advertisement) -> server RDMA Write of what it
//! read -> server Send(go ahead); the client compares its sink with its start buffer.

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use warpcore_verbs::{
    Access, CmEvent, CompletionQueue, ConnError, ConnectRequest, Context, DisconnectCause,
    Established, MemoryRegion, MpaParams, ProtectionDomain, QpInit, QueuePair, RecvWr, RtrTypes,
    SendOp, SendWr, WcOpcode, WcStatus,
};

use crate::cli::{Cli, Fault};
use crate::wire::{as_text, echo_len, pattern, RdmaInfo, INFO_LEN, MIN_SIZE};

/// How a run ended badly.
#[derive(Debug)]
pub enum Failure {
    /// The peer rejected our MPA Request (or the startup failed): exit status 4.
    Rejected(String),
    /// The connection ended with a Terminate (sent or received): exit status 3.
    Terminated(String),
    /// Anything else (timeouts, data mismatch, local errors): exit status 1.
    Other(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Rejected(s) => write!(f, "MPA startup failed or rejected: {s}"),
            Failure::Terminated(s) => write!(f, "connection terminated: {s}"),
            Failure::Other(s) => f.write_str(s),
        }
    }
}

fn other(e: impl std::fmt::Display) -> Failure {
    Failure::Other(e.to_string())
}

/// The MPA settings rping's rdma_cm would use, with our overrides.
pub fn mpa_params(cli: &Cli) -> MpaParams {
    MpaParams {
        rev: cli.mpa_rev,
        crc: cli.crc,
        markers: cli.markers,
        ird: cli.ird_ord,
        ord: cli.ird_ord,
        peer_to_peer: cli.p2p,
        // Markers are part of our engine: we insert them when the peer asks.
        markers_supported: true,
        rtr_offer: cli.rtr_types(RtrTypes::WRITE),
        rtr_accept: cli.rtr_types(RtrTypes::ALL),
    }
}

const WR_SEND: u64 = 1;
const WR_RDMA: u64 = 2;
const WR_RECV: u64 = 3;

/// The resources of one side: the CQ, the QP and rping's four buffers.
struct Side<'a> {
    ctx: &'a Context,
    pd: ProtectionDomain,
    cq: &'a CompletionQueue,
    qp: QueuePair,
    /// Receive buffer for the peer's advertisements.
    recv: MemoryRegion,
    /// Our advertisement / go-ahead.
    send: MemoryRegion,
    /// Client: the sink the server Writes into. Server: the buffer it Reads into and
    /// Writes from.
    rdma: MemoryRegion,
    timeout: Duration,
    debug: bool,
    /// Server with -P: connection requests that arrive while a client is served wait here.
    backlog: Option<&'a Backlog>,
}

/// Connection requests a persistent server (-P) has not served yet.
type Backlog = std::cell::RefCell<std::collections::VecDeque<ConnectRequest>>;

/// What a completion wait produced.
enum Got {
    Recv(usize),
    Rdma,
    Disconnected,
}

fn describe(e: &ConnError) -> Failure {
    match e {
        ConnError::RemoteTerminate(_)
        | ConnError::LocalTerminate(_)
        | ConnError::LocalOperation { .. } => Failure::Terminated(e.to_string()),
        ConnError::Negotiation { .. } => Failure::Rejected(e.to_string()),
        ConnError::TcpReset
        | ConnError::TcpTimedOut
        | ConnError::NeighborUnresolved
        | ConnError::CqOverrun => Failure::Other(e.to_string()),
    }
}

impl Side<'_> {
    fn post_recv(&self) -> Result<(), Failure> {
        self.qp
            .post_recv(&RecvWr::new(WR_RECV, &[self.recv.sge(0, INFO_LEN as u32)]).map_err(other)?)
            .map_err(other)
    }

    fn send_info(&self, info: RdmaInfo) -> Result<(), Failure> {
        if self.debug {
            eprintln!(
                "iwping: advertising addr {:#x} rkey {:#x} len {}",
                info.buf, info.rkey, info.size
            );
        }
        self.send.write(0, &info.to_bytes()).map_err(other)?;
        self.qp
            .post_send(
                &SendWr::new(WR_SEND, SendOp::Send, &[self.send.sge(0, INFO_LEN as u32)])
                    .map_err(other)?,
            )
            .map_err(other)
    }

    fn go_ahead(&self) -> Result<(), Failure> {
        // rping's server sends its (never filled) send buffer: 16 octets of zeros.
        self.send.write(0, &[0u8; INFO_LEN]).map_err(other)?;
        self.qp
            .post_send(
                &SendWr::new(WR_SEND, SendOp::Send, &[self.send.sge(0, INFO_LEN as u32)])
                    .map_err(other)?,
            )
            .map_err(other)
    }

    /// A connection event that ends the run, if one is queued.
    fn check_events(&self) -> Result<Option<Got>, Failure> {
        match self.ctx.next_event(Duration::ZERO) {
            Some(CmEvent::Error { error, .. }) => Err(describe(&error)),
            Some(CmEvent::Disconnected {
                cause: DisconnectCause::Closed,
                ..
            }) => Ok(Some(Got::Disconnected)),
            Some(CmEvent::Disconnected {
                cause: DisconnectCause::Reset,
                ..
            }) => Err(Failure::Other("the peer reset the connection".into())),
            Some(CmEvent::Disconnected {
                cause: DisconnectCause::TimedOut,
                ..
            }) => Err(Failure::Other(
                "the connection timed out (the peer or the path went silent)".into(),
            )),
            Some(CmEvent::Disconnected {
                cause: DisconnectCause::CloseTimedOut,
                ..
            }) => Err(Failure::Other(
                "the graceful close made no progress and was given up (reset)".into(),
            )),
            Some(CmEvent::ConnectRequest(r)) if self.backlog.is_some() => {
                if let Some(b) = self.backlog {
                    b.borrow_mut().push_back(r);
                }
                Ok(None)
            }
            Some(e) => {
                if self.debug {
                    eprintln!("iwping: event {e:?}");
                }
                Ok(None)
            }
            None => Ok(None),
        }
    }

    /// After a failed completion, the connection event that says why (a Terminate is
    /// reported as a connection error right after the completion).
    fn why(&self, status: WcStatus, what: WcOpcode) -> Failure {
        let until = Instant::now() + Duration::from_secs(2);
        while Instant::now() < until {
            match self.check_events() {
                Err(f) => return f,
                Ok(Some(Got::Disconnected)) => break,
                _ => std::thread::sleep(Duration::from_millis(5)),
            }
        }
        match status {
            WcStatus::RemoteAccess | WcStatus::RemoteOperation | WcStatus::Fatal => {
                Failure::Terminated(format!("{what:?} completed with {status:?}"))
            }
            _ => Failure::Other(format!("{what:?} completed with {status:?}")),
        }
    }

    /// After a flushed work request: a clean disconnect only if the connection event says
    /// so; a reset, a lost connection or a Terminate is the run's failure (the flush comes
    /// first, the event that says why right behind it).
    fn after_flush(&self, what: WcOpcode) -> Result<Got, Failure> {
        let until = Instant::now() + Duration::from_secs(2);
        while Instant::now() < until {
            match self.check_events()? {
                Some(Got::Disconnected) => return Ok(Got::Disconnected),
                _ => std::thread::sleep(Duration::from_millis(5)),
            }
        }
        Err(Failure::Other(format!(
            "{what:?} flushed, and no disconnect or error followed within 2 s"
        )))
    }

    /// Waits for the next receive or RDMA completion (Send completions are consumed),
    /// or the end of the connection.
    fn wait(&self) -> Result<Got, Failure> {
        let deadline = Instant::now() + self.timeout;
        loop {
            while let Some(wc) = self.cq.poll_one() {
                if wc.qp != self.qp.id() {
                    // Flushed work requests of an earlier, refused connection attempt.
                    continue;
                }
                if wc.status == WcStatus::FlushErr {
                    // The QP left RTS: the connection event says whether that was a
                    // disconnect or an error.
                    return self.after_flush(wc.opcode);
                }
                if wc.status != WcStatus::Success {
                    return Err(self.why(wc.status, wc.opcode));
                }
                match wc.opcode {
                    WcOpcode::Send => {}
                    WcOpcode::Recv => {
                        self.post_recv()?;
                        return Ok(Got::Recv(wc.byte_len as usize));
                    }
                    WcOpcode::Read | WcOpcode::Write => return Ok(Got::Rdma),
                    op => return Err(Failure::Other(format!("unexpected completion {op:?}"))),
                }
            }
            if let Some(g) = self.check_events()? {
                return Ok(g);
            }
            if Instant::now() >= deadline {
                return Err(Failure::Other(format!(
                    "no completion within {} s",
                    self.timeout.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    fn wait_recv(&self, what: &str) -> Result<Option<RdmaInfo>, Failure> {
        match self.wait()? {
            Got::Recv(n) => {
                let mut b = vec![0u8; n.min(INFO_LEN + 1)];
                self.recv
                    .read(0, &mut b[..n.min(INFO_LEN)])
                    .map_err(other)?;
                RdmaInfo::parse(&b[..n.min(INFO_LEN + 1)])
                    .map(Some)
                    .map_err(Failure::Other)
            }
            Got::Rdma => Err(Failure::Other(format!(
                "waiting for {what}: unexpected RDMA completion"
            ))),
            Got::Disconnected => Ok(None),
        }
    }
}

fn make_side<'a>(
    ctx: &'a Context,
    cq: &'a CompletionQueue,
    cli: &Cli,
    core: Option<usize>,
    rdma_len: usize,
) -> Result<Side<'a>, Failure> {
    let pd = ctx.alloc_pd();
    let mut init = QpInit::new(cq, cq);
    init.core = core;
    // siw has no RFC 7306 (atomic_cap ATOMIC_NONE): plain RFC 5040 on this connection.
    init.rfc7306 = false;
    init.sq_depth = 16;
    init.rq_depth = 4;
    let qp = pd.create_qp(&init).map_err(other)?;
    let remote = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
    Ok(Side {
        ctx,
        cq,
        qp,
        recv: pd.alloc_mr(INFO_LEN, Access::LOCAL_WRITE).map_err(other)?,
        send: pd.alloc_mr(INFO_LEN, Access::LOCAL_WRITE).map_err(other)?,
        rdma: pd.alloc_mr(rdma_len, remote).map_err(other)?,
        pd,
        timeout: Duration::from_secs(cli.timeout),
        debug: cli.debug,
        backlog: None,
    })
}

fn report_established(e: &Established) {
    eprintln!(
        "iwping: connected: MPA rev {}/{}, CRC {}, markers {}/{}, IRD {} ORD {}, peer IRD/ORD {:?}, \
         RTR sent {:?}, RTR accepted {:?}",
        e.rev.0,
        e.rev.1,
        if e.crc { "on" } else { "off" },
        e.markers.0,
        e.markers.1,
        e.ird,
        e.ord,
        e.peer_ird_ord,
        e.rtr,
        e.rtr_accepted
    );
}

/// An STag that names no region of ours (the key byte flipped), for `--fault bad-rkey`.
fn spoil(stag: u32) -> u32 {
    stag ^ 0x5a
}

/// rping -c: returns the number of pings done.
pub fn client(ctx: &Context, cli: &Cli, server: Ipv4Addr) -> Result<u64, Failure> {
    let cq = ctx.create_cq(64).map_err(other)?;
    let size = cli.size as usize;
    let params = mpa_params(cli);
    let retry_until = Instant::now() + Duration::from_secs(cli.retry);
    let (side, start) = loop {
        let side = make_side(ctx, &cq, cli, None, size)?;
        let start = side
            .pd
            .alloc_mr(
                size,
                Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE,
            )
            .map_err(other)?;
        side.post_recv()?;
        side.qp
            .connect(server, cli.port, &params, &[])
            .map_err(other)?;
        match ctx.next_event(Duration::from_secs(cli.timeout)) {
            Some(CmEvent::Established(e)) => {
                report_established(&e);
                break (side, start);
            }
            Some(CmEvent::Rejected { private_data, .. }) => {
                return Err(Failure::Rejected(format!(
                    "the peer rejected our MPA Request (private data {private_data:02x?})"
                )))
            }
            // Refused (the server is not listening yet), not answered (not up yet) or its
            // host not answering ARP yet (a VM still booting: a connect gives up after one
            // round of three requests, a second apart, RFC 1122 2.3.2.1): try again while
            // --retry lasts.
            Some(CmEvent::Error {
                error:
                    ConnError::TcpReset
                    | ConnError::TcpTimedOut
                    | ConnError::NeighborUnresolved
                    | ConnError::Negotiation { .. },
                ..
            }) if Instant::now() < retry_until => {
                drop(side);
                std::thread::sleep(Duration::from_millis(500));
            }
            Some(CmEvent::Error { error, .. }) => return Err(describe(&error)),
            Some(e) => return Err(Failure::Other(format!("unexpected event {e:?}"))),
            None => return Err(Failure::Other("connection timed out".into())),
        }
    };
    std::thread::sleep(Duration::from_millis(cli.settle_ms));
    let mut ping = 0u64;
    while cli.count == 0 || ping < cli.count {
        let want = pattern(ping, size);
        start.write(0, &want).map_err(other)?;
        side.rdma.write(0, &vec![0u8; size]).map_err(other)?;
        let rkey = match cli.fault {
            Some(Fault::BadRkey) => spoil(start.stag()),
            None => start.stag(),
        };
        side.send_info(RdmaInfo {
            buf: 0,
            rkey,
            size: cli.size,
        })?;
        // The server Reads our start buffer, then says go ahead.
        if side
            .wait_recv("the server's go-ahead after its Read")?
            .is_none()
        {
            return Err(Failure::Other(format!(
                "the server disconnected during ping {ping}"
            )));
        }
        side.send_info(RdmaInfo {
            buf: 0,
            rkey: side.rdma.stag(),
            size: cli.size,
        })?;
        if side
            .wait_recv("the server's go-ahead after its Write")?
            .is_none()
        {
            return Err(Failure::Other(format!(
                "the server disconnected during ping {ping}"
            )));
        }
        let mut got = vec![0u8; size];
        side.rdma.read(0, &mut got).map_err(other)?;
        if cli.validate && got != want {
            let at = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
            return Err(Failure::Other(format!(
                "data mismatch in ping {ping} at octet {at}: got {:?}",
                as_text(&got)
            )));
        }
        if cli.verbose > 0 {
            warpcore_apps::outln!("ping data: {}", as_text(&got));
        }
        ping += 1;
    }
    side.qp.disconnect().map_err(other)?;
    // A clean close: both FINs (no Terminate at disconnect, as siw).
    let until = Instant::now() + Duration::from_secs(cli.timeout);
    while Instant::now() < until {
        match ctx.next_event(Duration::from_millis(100)) {
            Some(CmEvent::Disconnected { .. }) => return Ok(ping),
            Some(CmEvent::Error { error, .. }) => return Err(describe(&error)),
            _ => {}
        }
    }
    Err(Failure::Other("disconnect did not complete".into()))
}

/// rping -s: serves one client until it disconnects; returns the number of pings done.
/// With -P (rping's persistent server) it serves every client that comes, one after
/// another (requests that arrive meanwhile wait), until it is stopped; a failed session is
/// reported and the next client served.
pub fn server(ctx: &Context, cli: &Cli) -> Result<u64, Failure> {
    let params = mpa_params(cli);
    ctx.listen(cli.port, &params).map_err(other)?;
    eprintln!("iwping: listening on port {}", cli.port);
    let backlog = Backlog::default();
    let mut total = 0u64;
    let mut served = 0u64;
    loop {
        let queued = backlog.borrow_mut().pop_front();
        let req = match queued {
            Some(r) => r,
            None => match ctx.next_event(Duration::from_secs(cli.timeout)) {
                Some(CmEvent::ConnectRequest(r)) => r,
                Some(CmEvent::RequestRefused { remote, error, .. }) => {
                    let f = Failure::Rejected(format!(
                        "refused the request of {}:{}: {error}",
                        remote.0, remote.1
                    ));
                    if !cli.persistent {
                        return Err(f);
                    }
                    eprintln!("iwping: {f}");
                    continue;
                }
                Some(e) => {
                    eprintln!("iwping: event {e:?}");
                    continue;
                }
                // A persistent server waits for clients until it is stopped.
                None if cli.persistent => continue,
                None => return Err(Failure::Other("no connection request".into())),
            },
        };
        served += 1;
        let r = serve_one(ctx, cli, req, cli.persistent.then_some(&backlog));
        if !cli.persistent {
            return r;
        }
        match r {
            Ok(n) => {
                total += n;
                eprintln!("iwping: server: client {served}: {n} pings done ({total} in all)");
            }
            Err(f) => eprintln!("iwping: server: client {served}: {f}"),
        }
    }
}

/// Serves the client of `req` until it disconnects.
fn serve_one(
    ctx: &Context,
    cli: &Cli,
    req: ConnectRequest,
    backlog: Option<&Backlog>,
) -> Result<u64, Failure> {
    eprintln!(
        "iwping: request from {}:{}: MPA rev {}, IRD {:?} ORD {:?}, private data {:02x?}",
        req.remote.0, req.remote.1, req.rev, req.ird, req.ord, req.private_data
    );
    let cq = ctx.create_cq(64).map_err(other)?;
    let side = make_side(
        ctx,
        &cq,
        cli,
        Some(usize::from(req.request.core)),
        crate::wire::MAX_SIZE as usize + 1,
    )?;
    let side = Side { backlog, ..side };
    side.post_recv()?;
    side.post_recv()?;
    ctx.accept(&req, &side.qp, &[]).map_err(other)?;
    loop {
        match ctx.next_event(Duration::from_secs(cli.timeout)) {
            Some(CmEvent::Established(e)) => {
                report_established(&e);
                break;
            }
            Some(CmEvent::Error { error, .. }) => return Err(describe(&error)),
            Some(CmEvent::ConnectRequest(r)) if backlog.is_some() => {
                if let Some(b) = backlog {
                    b.borrow_mut().push_back(r);
                }
            }
            Some(e) => return Err(Failure::Other(format!("unexpected event {e:?}"))),
            None => return Err(Failure::Other("connection timed out".into())),
        }
    }
    let mut ping = 0u64;
    // Each ping starts with the client's start buffer advertisement.
    while let Some(src) = side.wait_recv("the client's start buffer")? {
        let len = src.size as usize;
        if len > side.rdma.len() {
            return Err(Failure::Other(format!(
                "the client advertised {len} octets, more than our {}",
                side.rdma.len()
            )));
        }
        // -V checks the Read against rping's pattern for that length: below rping's shortest
        // ping the header is cut, and at 1 octet only the NUL is left, which any buffer
        // passes.
        if cli.validate && len < MIN_SIZE as usize {
            return Err(Failure::Other(format!(
                "ping {ping}: the client advertised {len} octets, fewer than rping's shortest \
                 ping ({MIN_SIZE}): too short to validate (-V)"
            )));
        }
        let rkey = match cli.fault {
            Some(Fault::BadRkey) => spoil(src.rkey),
            None => src.rkey,
        };
        if cli.debug {
            eprintln!(
                "iwping: RDMA Read {len} octets from {:#x}/{rkey:#x}",
                src.buf
            );
        }
        let read = SendOp::Read {
            remote_stag: rkey,
            remote_to: src.buf,
        };
        side.qp
            .post_send(&SendWr::new(WR_RDMA, read, &[side.rdma.sge(0, src.size)]).map_err(other)?)
            .map_err(other)?;
        match side.wait()? {
            Got::Rdma => {}
            Got::Disconnected => {
                return Err(Failure::Other("the client left during our Read".into()))
            }
            Got::Recv(_) => return Err(Failure::Other("a Send arrived during our Read".into())),
        }
        let mut data = vec![0u8; len];
        side.rdma.read(0, &mut data).map_err(other)?;
        if cli.validate && data != pattern(ping, len) {
            return Err(Failure::Other(format!(
                "ping {ping}: the data read is not rping's pattern: {:?}",
                as_text(&data)
            )));
        }
        if cli.verbose > 0 {
            warpcore_apps::outln!("server ping data: {}", as_text(&data));
        }
        side.go_ahead()?;
        let Some(sink) = side.wait_recv("the client's sink buffer")? else {
            return Err(Failure::Other(format!(
                "the client left in the middle of ping {ping}"
            )));
        };
        let n = echo_len(&data).min(sink.size as usize) as u32;
        let write = SendOp::Write {
            remote_stag: sink.rkey,
            remote_to: sink.buf,
        };
        side.qp
            .post_send(&SendWr::new(WR_RDMA, write, &[side.rdma.sge(0, n)]).map_err(other)?)
            .map_err(other)?;
        match side.wait()? {
            Got::Rdma => {}
            _ => return Err(Failure::Other("our Write did not complete".into())),
        }
        side.go_ahead()?;
        ping += 1;
    }
    eprintln!("iwping: the client disconnected");
    Ok(ping)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use warpcore_apps::device::{Endpoint, EngineOptions, MemifRole, PairAddrs};

    /// A client whose connection is reset (it crashed, or aborted) ended the server's
    /// session as if it had disconnected cleanly: the flushed receive came first, the reset
    /// event behind it was taken for a clean close, and `iwping -s` reported "the client
    /// disconnected" and exited 0. Both ends here share the in-memory link.
    /// Both ends on one in-memory link: a server `-s` with `server_args` more, on B, and
    /// the engine of a hand-written client, A (see [`client_side`]).
    fn pair(server_args: &[&str]) -> (Cli, Endpoint, Endpoint) {
        let args = [
            &[
                "iwping",
                "-s",
                "-a",
                "10.0.0.2",
                "--loopback=link",
                "--timeout",
                "10",
            ][..],
            server_args,
        ]
        .concat();
        let server_cli = Cli::try_parse_from(args).unwrap();
        let addrs = PairAddrs {
            server: Ipv4Addr::new(10, 0, 0, 2),
            client: Ipv4Addr::new(10, 0, 0, 1),
        };
        let (b, a) = server_cli
            .dev
            .open_engine_pair(&EngineOptions::new("iwping", MemifRole::Server), addrs)
            .unwrap();
        (server_cli, b, a)
    }

    /// A client's side on `ctx` with a ping buffer of `size` octets, connected to the
    /// server of [`pair`]; runs `f` on it, then leaves the engine up a while so that the
    /// server sees what came.
    fn client_side(ctx: &Context, size: usize, f: impl FnOnce(&Side<'_>)) {
        let client_cli =
            Cli::try_parse_from(["iwping", "-c", "-a", "10.0.0.2", "-I", "10.0.0.1"]).unwrap();
        let cq = ctx.create_cq(8).unwrap();
        let side = make_side(ctx, &cq, &client_cli, None, size).unwrap();
        side.post_recv().unwrap();
        side.qp
            .connect(
                Ipv4Addr::new(10, 0, 0, 2),
                7174,
                &mpa_params(&client_cli),
                &[],
            )
            .unwrap();
        match ctx.next_event(Duration::from_secs(10)) {
            Some(CmEvent::Established(_)) => {}
            e => panic!("client: {e:?}"),
        }
        f(&side);
        std::thread::sleep(Duration::from_secs(3));
    }

    /// A client whose connection is reset (it crashed, or aborted) ended the server's
    /// session as if it had disconnected cleanly: the flushed receive came first, the reset
    /// event behind it was taken for a clean close, and `iwping -s` reported "the client
    /// disconnected" and exited 0.
    #[test]
    fn a_client_reset_fails_the_server() {
        let (cli, b, a) = pair(&[]);
        let client = std::thread::spawn(move || {
            client_side(&a.ctx, 64, |side| side.qp.abort().unwrap());
        });
        let r = server(&b.ctx, &cli);
        client.join().unwrap();
        match r {
            Err(Failure::Other(e)) => assert!(e.contains("reset"), "{e}"),
            other => panic!("the server ended with {other:?}"),
        }
    }

    /// `-V` on the server checks what it Read against rping's pattern for the length the
    /// client advertised; a client advertising 1 octet had only the pattern's NUL checked,
    /// which any buffer passes, and the ping counted as validated. rping's pings are at
    /// least 26 octets (the "rdma-ping-N: " header fits); fewer is refused under `-V`.
    #[test]
    fn validation_refuses_a_ping_too_short_to_check() {
        let (cli, b, a) = pair(&["-V"]);
        let client = std::thread::spawn(move || {
            client_side(&a.ctx, 1, |side| {
                side.rdma.write(0, &[0]).unwrap();
                let start = RdmaInfo {
                    buf: 0,
                    rkey: side.rdma.stag(),
                    size: 1,
                };
                side.send_info(start).unwrap();
                if side.wait_recv("go ahead").ok().flatten().is_some() {
                    side.send_info(start).unwrap();
                    let _ = side.wait_recv("go ahead");
                }
                let _ = side.qp.disconnect();
            });
        });
        let r = server(&b.ctx, &cli);
        client.join().unwrap();
        match r {
            Err(Failure::Other(e)) => assert!(e.contains("rping's shortest"), "{e}"),
            other => panic!("the server ended with {other:?}"),
        }
    }
}
