//! `--perftest`: talk to linux-rdma/perftest's `-R` (rdma_cm) tools. Without an address we
//! answer their clients (`ib_write_bw -R ADDR` and friends run against this process); with
//! one we are the client of their servers (`ib_write_bw -R` waiting in the peer).
//!
//! perftest with `-R` opens two rdma_cm connections to the test port: the first carries its
//! own parameter exchange (Send/Recv), the second is the test QP. Each exchange step is
//! symmetric: the client Sends its value, the server Receives it and Sends its own back
//! (`ctx_xchg_data` in perftest's src/perftest_communication.c). Most steps are values both
//! sides must agree on (version string, sizes, MTU, GID compatibility, the reports at the
//! end), so as server we answer with the value the client sent. The one step that carries
//! *our* resources is `struct pingpong_dest` (56 octets, big endian: lid, out_reads, qpn,
//! psn, rkey, 4 octets padding, vaddr, 16-octet GID, srqn, gid_index; perftest's
//! `rdma_write_keys`): there we answer with our test region's STag and address 0 (regions
//! are zero-based). perftest sends the dest again as a barrier around the measurement; we
//! answer each time the same way.
//!
//! Server, on the test connection: `write_bw`, `read_bw`, `read_lat` need nothing from us
//! (the client's Writes land in our region, its Reads are served by the engine); for
//! `send_lat` we answer each received message with a Send of the same length; for
//! `send_bw` we RDMA Write perftest's credit (our count of completed receives) to the
//! client's dest after each receive, as iWARP has no receiver-not-ready flow control and
//! perftest's client waits for it; for `write_lat` we watch the last octet of the client's
//! Write in our region (perftest puts its iteration counter there) and Write the same
//! counter back to the buffer the client advertised in its `pingpong_dest` (we Write first,
//! as perftest's server does). Message size `-s` (or `-a`) and, for `write_lat`, the count `-n`
//! must match the client's (defaults 2 and 1000 as perftest's).
//!
//! Client: the same exchange with us Sending first, in the order siw-to-siw captures show
//! (interop/pcaps/siw_mpa2_ib_*.pcap); then the test with the server's dest
//! (Writes, Reads, Sends; `write_lat` answers the server's counter; `send_lat` waits for
//! the server's Send), then the closing steps (`write_bw`/`read_bw`: dest, the five report
//! values size, iterations, peak and average MB/s, message rate; the others: one dest;
//! `write_lat` none). `-s` (or `-a`: every size from 2 to 2^23 in the write and read tests) and
//! `-n` must match the server's. Options it cannot honour are refused (`Cli::validate`).

use std::time::{Duration, Instant};

use warpcore_verbs::{
    Access, CmEvent, CompletionQueue, Context, MemoryRegion, MpaParams, QpInit, QueuePair, RecvWr,
    SendOp, SendWr, WcOpcode, WcStatus,
};

use crate::cli::{Cli, TestName};
use crate::net::Endpoint;
use crate::report;

/// Size of perftest's `struct pingpong_dest` on the wire.
const DEST_LEN: usize = 56;
/// Largest exchange message we accept.
const MSG_MAX: u32 = 256;
/// Receive buffers kept posted on the exchange connection.
const RECVS: u64 = 8;
/// Our test region: perftest's client keeps its accesses within a few buffers of `-s`.
const REGION_LEN: usize = 64 << 20;

/// The error for a test `--perftest` does not speak, in either role.
fn unsupported(t: TestName) -> String {
    format!(
        "--perftest runs write/read/send _bw/_lat and atomic_bw; {} is not one of them",
        t.name()
    )
}

/// Whether `--perftest` speaks this test, as server and as client.
pub fn supported(t: TestName) -> bool {
    matches!(
        t,
        TestName::WriteBw
            | TestName::SendBw
            | TestName::ReadBw
            | TestName::ReadLat
            | TestName::SendLat
            | TestName::WriteLat
            | TestName::AtomicBw
    )
}

/// Receives kept posted on the test connection of the Send tests (perftest's default
/// rx depth is 512, its tx depth 128: the client never has more in flight).
const TEST_RECVS: u64 = 512;
/// Where our outgoing test data lives in the region (the first half receives).
const TX_AREA: u64 = (REGION_LEN / 2) as u64;

/// The client's `pingpong_dest` (rkey, vaddr), when a message is one.
fn client_dest(msg: &[u8]) -> Option<(u32, u64)> {
    let be32 = |i: usize| u32::from_be_bytes([msg[i], msg[i + 1], msg[i + 2], msg[i + 3]]);
    if msg.len() != DEST_LEN || (be32(4) == 0 && be32(8) == 0 && be32(16) == 0) {
        return None;
    }
    let mut v = [0u8; 8];
    v.copy_from_slice(&msg[24..32]);
    Some((be32(16), u64::from_be_bytes(v)))
}

/// Our answer to a received exchange message: the same octets, except for a
/// `pingpong_dest` naming the client's QP, which we answer with our own region.
fn answer(msg: &[u8], stag: u32) -> Vec<u8> {
    let mut out = msg.to_vec();
    if client_dest(msg).is_some() {
        // out_reads and qpn stay as the client's (it only reads them back for its banner),
        // rkey and vaddr are ours; PSN 0 (iWARP has none); the GID is echoed.
        out[12..16].copy_from_slice(&0u32.to_be_bytes());
        out[16..20].copy_from_slice(&stag.to_be_bytes());
        out[20..24].copy_from_slice(&[0; 4]);
        out[24..32].copy_from_slice(&0u64.to_be_bytes());
    }
    out
}

/// The exchange connection: its QP, CQ, receive slots and send buffer.
struct Exchange {
    qp: QueuePair,
    cq: CompletionQueue,
    rx: MemoryRegion,
    tx: MemoryRegion,
}

fn accept(ctx: &Context, timeout: Duration) -> Result<Exchange, String> {
    let req = loop {
        match ctx.next_event(timeout) {
            Some(CmEvent::ConnectRequest(r)) => break r,
            Some(e) => eprintln!("iwperf: perftest: event {e:?}"),
            None => return Err("perftest: no connection request".into()),
        }
    };
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(256).map_err(|e| e.to_string())?;
    let mut init = QpInit::new(&cq, &cq);
    init.core = Some(usize::from(req.request.core));
    // perftest runs on siw and friends: plain RFC 5040.
    init.rfc7306 = false;
    let qp = pd.create_qp(&init).map_err(|e| e.to_string())?;
    let rx = pd
        .alloc_mr(MSG_MAX as usize * RECVS as usize, Access::LOCAL_WRITE)
        .map_err(|e| e.to_string())?;
    let tx = pd
        .alloc_mr(MSG_MAX as usize, Access::LOCAL_WRITE)
        .map_err(|e| e.to_string())?;
    for i in 0..RECVS {
        let wr = RecvWr::new(i, &[rx.sge(i * u64::from(MSG_MAX), MSG_MAX)])
            .map_err(|e| e.to_string())?;
        qp.post_recv(&wr).map_err(|e| e.to_string())?;
    }
    eprintln!(
        "iwperf: perftest: connection from {}:{} (IRD {:?} ORD {:?})",
        req.remote.0, req.remote.1, req.ird, req.ord
    );
    ctx.accept(&req, &qp, &[]).map_err(|e| e.to_string())?;
    Ok(Exchange { qp, cq, rx, tx })
}

/// Serves one perftest `-R` client: the exchange connection, the test connection, the
/// test (passive on our side), and the exchange until the client closes.
pub fn serve(cli: &Cli, ep: &Endpoint, mpa: &MpaParams) -> Result<(), String> {
    if !supported(cli.test) {
        return Err(unsupported(cli.test));
    }
    let ctx = &ep.ctx;
    let timeout = Duration::from_secs(cli.timeout);
    // perftest asks rdma_cm for IRD/ORD 0 on the exchange connection and 128 for Reads.
    let mut params = mpa.clone();
    params.peer_to_peer = false;
    params.ird = 128;
    params.ord = 128;
    ctx.listen(cli.port, &params).map_err(|e| e.to_string())?;
    eprintln!(
        "iwperf: perftest server ({}) on {}:{}",
        cli.test.name(),
        ep.ip,
        cli.port
    );
    let xchg = accept(ctx, timeout)?;
    let pd = ctx.alloc_pd();
    let region = pd
        .alloc_mr(
            REGION_LEN,
            Access::LOCAL_WRITE
                | Access::REMOTE_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_ATOMIC,
        )
        .map_err(|e| e.to_string())?;
    let mut test: Option<(QueuePair, CompletionQueue)> = None;
    let mut steps = 0u32;
    let mut deadline = Instant::now() + timeout;
    let sizes = run_sizes(cli)?;
    let slot = TX_AREA / TEST_RECVS;
    let mut peer: Option<(u32, u64)> = None;
    // write_lat: where we are in the client's sizes and -n (iwperf's must match them).
    let mut wl = WriteLat {
        sizes,
        at: 0,
        sent: 0,
        iters: cli.iters(),
    };
    let mut test_ready = false;
    let mut echoed = 0u64;
    loop {
        if let Some((qp, cq)) = &test {
            if let Some(n) = drive_test(
                cli.test,
                qp,
                cq,
                &region,
                slot,
                peer.filter(|_| test_ready || cli.test == TestName::SendBw),
                &mut wl,
            )? {
                echoed += n;
                deadline = Instant::now() + timeout;
                continue;
            }
        }
        if let Some(wc) = xchg.cq.poll_one() {
            if wc.qp != xchg.qp.id() {
                continue;
            }
            match (wc.status, wc.opcode) {
                (WcStatus::Success, WcOpcode::Recv) => {
                    let n = (wc.byte_len as usize).min(MSG_MAX as usize);
                    let at = wc.wr_id * u64::from(MSG_MAX);
                    let mut msg = vec![0u8; n];
                    xchg.rx
                        .read(at as usize, &mut msg)
                        .map_err(|e| e.to_string())?;
                    if peer.is_none() {
                        peer = client_dest(&msg);
                    }
                    let reply = answer(&msg, region.stag());
                    xchg.tx.write(0, &reply).map_err(|e| e.to_string())?;
                    let wr = RecvWr::new(wc.wr_id, &[xchg.rx.sge(at, MSG_MAX)])
                        .map_err(|e| e.to_string())?;
                    xchg.qp.post_recv(&wr).map_err(|e| e.to_string())?;
                    let send = SendWr::new(1000, SendOp::Send, &[xchg.tx.sge(0, n as u32)])
                        .map_err(|e| e.to_string())?;
                    xchg.qp.post_send(&send).map_err(|e| e.to_string())?;
                    steps += 1;
                    deadline = Instant::now() + timeout;
                }
                (WcStatus::Success, _) => {}
                (WcStatus::FlushErr, _) => break,
                (s, op) => return Err(format!("perftest exchange: {op:?} completed with {s:?}")),
            }
            continue;
        }
        match ctx.next_event(Duration::ZERO) {
            Some(CmEvent::ConnectRequest(r)) if test.is_none() => {
                // The test connection: nothing to post, the client drives it. Region and QP
                // share a protection domain.
                let cq = ctx.create_cq(1024).map_err(|e| e.to_string())?;
                let mut init = QpInit::new(&cq, &cq);
                init.core = Some(usize::from(r.request.core));
                // atomic_bw needs RFC 7306 (a Warpcore peer: siw has no atomics).
                init.rfc7306 = cli.test == TestName::AtomicBw;
                init.rq_depth = TEST_RECVS as u32;
                init.sq_depth = 256;
                let qp = pd.create_qp(&init).map_err(|e| e.to_string())?;
                if matches!(cli.test, TestName::SendBw | TestName::SendLat) {
                    for i in 0..TEST_RECVS {
                        let wr = RecvWr::new(i, &[region.sge(i * slot, slot as u32)])
                            .map_err(|e| e.to_string())?;
                        qp.post_recv(&wr).map_err(|e| e.to_string())?;
                    }
                }
                eprintln!(
                    "iwperf: perftest: test connection from {}:{} (IRD {:?} ORD {:?})",
                    r.remote.0, r.remote.1, r.ird, r.ord
                );
                ctx.accept(&r, &qp, &[]).map_err(|e| e.to_string())?;
                test = Some((qp, cq));
            }
            Some(CmEvent::Disconnected { qp, .. }) if qp == xchg.qp.id() => break,
            Some(CmEvent::Error { qp, error }) => {
                return Err(format!("perftest: connection {qp:?} failed: {error}"))
            }
            Some(CmEvent::Established(e)) => {
                if test.as_ref().is_some_and(|(qp, _)| qp.id() == e.qp) {
                    test_ready = true;
                }
            }
            Some(CmEvent::Disconnected { .. }) => {}
            Some(e) => eprintln!("iwperf: perftest: event {e:?}"),
            None => {
                if Instant::now() > deadline {
                    return Err(format!(
                        "perftest: nothing from the client for {} s",
                        timeout.as_secs()
                    ));
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }
    if let Some((_, cq)) = &test {
        while let Some(wc) = cq.poll_one() {
            if wc.status != WcStatus::Success && wc.status != WcStatus::FlushErr {
                return Err(format!("perftest test QP: {:?} {:?}", wc.opcode, wc.status));
            }
        }
    }
    eprintln!(
        "iwperf: perftest: client done after {steps} exchange messages, {echoed} test \
         messages answered"
    );
    Ok(())
}

/// The largest message `--perftest` handles in `test`: the Send tests' receive slots are
/// 64 KiB (512 of them, perftest's rx depth, in half the region); Writes and Reads go up to
/// perftest's `MAX_SIZE`, 8 MiB.
fn size_limit(test: TestName) -> u64 {
    if matches!(test, TestName::SendBw | TestName::SendLat) {
        TX_AREA / TEST_RECVS
    } else {
        1 << 23
    }
}

/// The sizes of a `--perftest` run: `-s`, or with `-a` perftest's run over all sizes, every
/// power of two from 2 to 2^23 (`for (i = 1; i < 24; ++i) size = 1 << i`).
fn run_sizes(cli: &Cli) -> Result<Vec<u64>, String> {
    let sizes = cli.sizes();
    let limit = size_limit(cli.test);
    match sizes.iter().find(|&&s| s > limit) {
        Some(s) => Err(format!(
            "--perftest {}: -s {s} is larger than {limit}",
            cli.test.name()
        )),
        None => Ok(sizes),
    }
}

/// Our side of perftest's write_lat as its server: the current size (of `-s`, or every size
/// with `-a`) and the Writes sent of it.
#[derive(Debug)]
struct WriteLat {
    sizes: Vec<u64>,
    at: usize,
    sent: u64,
    iters: u64,
}

/// One step of our side of the test connection; `Some(n)` when it did something (n
/// messages answered), `None` when idle.
fn drive_test(
    test: TestName,
    qp: &QueuePair,
    cq: &CompletionQueue,
    region: &MemoryRegion,
    slot: u64,
    peer: Option<(u32, u64)>,
    wl: &mut WriteLat,
) -> Result<Option<u64>, String> {
    let sent = &mut wl.sent;
    let err = |e: warpcore_verbs::Error| e.to_string();
    if let Some(wc) = cq.poll_one() {
        match (wc.status, wc.opcode) {
            (WcStatus::Success, WcOpcode::Recv) => {
                let wr = RecvWr::new(wc.wr_id, &[region.sge(wc.wr_id * slot, slot as u32)])
                    .map_err(err)?;
                qp.post_recv(&wr).map_err(err)?;
                if test == TestName::SendBw {
                    // perftest's credits: iWARP has no receiver-not-ready flow control, so
                    // perftest's send_bw server RDMA Writes its count of completed receives
                    // (a host-order u32) to the buffer the client's pingpong_dest names;
                    // the client stops sending while it is a receive queue ahead of it. We
                    // credit every receive (perftest every rx_depth / 3 and at the end).
                    let Some((rkey, vaddr)) = peer else {
                        return Err("perftest send_bw: a Send before the client's dest".into());
                    };
                    *sent += 1;
                    let at = TX_AREA + (*sent % 64) * 8;
                    region
                        .write(at as usize, &(*sent as u32).to_le_bytes())
                        .map_err(err)?;
                    let write = SendOp::Write {
                        remote_stag: rkey,
                        remote_to: vaddr,
                    };
                    let wr = SendWr::new(3, write, &[region.sge(at, 4)]).map_err(err)?;
                    qp.post_send(&wr).map_err(err)?;
                    return Ok(Some(1));
                }
                if test == TestName::SendLat {
                    let send = SendWr::new(1, SendOp::Send, &[region.sge(TX_AREA, wc.byte_len)])
                        .map_err(err)?;
                    qp.post_send(&send).map_err(err)?;
                    return Ok(Some(1));
                }
                return Ok(Some(0));
            }
            (WcStatus::Success, _) | (WcStatus::FlushErr, _) => return Ok(Some(0)),
            (s, op) => return Err(format!("perftest test QP: {op:?} completed with {s:?}")),
        }
    }
    if test == TestName::WriteLat {
        // perftest's write_lat: the server Writes first; each side then waits until the last
        // octet of its buffer holds the peer's counter (mod 256) before Writing its next one
        // (`run_iter_lat_write`). We Write counter k + 1 once the client's k arrived.
        let Some((rkey, vaddr)) = peer else {
            return Ok(None);
        };
        let mut size = wl.sizes[wl.at];
        if *sent >= wl.iters {
            // All of this size sent. With -a, perftest's next size starts (with our Write,
            // again) once the client's last counter of this one arrived.
            if wl.at + 1 >= wl.sizes.len() {
                return Ok(None);
            }
            let mut last = [0u8; 1];
            region.read(size as usize - 1, &mut last).map_err(err)?;
            if last[0] != wl.iters as u8 {
                return Ok(None);
            }
            wl.at += 1;
            *sent = 0;
            size = wl.sizes[wl.at];
        }
        if *sent > 0 {
            let mut last = [0u8; 1];
            region.read(size as usize - 1, &mut last).map_err(err)?;
            if last[0] != *sent as u8 {
                return Ok(None);
            }
        }
        *sent += 1;
        region
            .write((TX_AREA + size - 1) as usize, &[*sent as u8])
            .map_err(err)?;
        let write = SendOp::Write {
            remote_stag: rkey,
            remote_to: vaddr,
        };
        let wr = SendWr::new(2, write, &[region.sge(TX_AREA, size as u32)]).map_err(err)?;
        qp.post_send(&wr).map_err(err)?;
        return Ok(Some(1));
    }
    Ok(None)
}

/// perftest's version string as its 6.x clients send it (16 octets, NUL padded).
const VERSION: &[u8; 16] = b"6.06\0\0\0\0\0\0\0\0\0\0\0\0";

/// Our `pingpong_dest`: out_reads, a QP number, our region's STag at address 0.
fn our_dest(out_reads: u32, stag: u32) -> [u8; DEST_LEN] {
    let mut d = [0u8; DEST_LEN];
    d[4..8].copy_from_slice(&out_reads.to_be_bytes());
    d[8..12].copy_from_slice(&1u32.to_be_bytes());
    d[16..20].copy_from_slice(&stag.to_be_bytes());
    d
}

/// The exchange connection, client side: each step Sends ours and Receives the server's.
struct ClientXchg {
    x: Exchange,
    timeout: Duration,
}

impl ClientXchg {
    fn step(&self, msg: &[u8]) -> Result<Vec<u8>, String> {
        let x = &self.x;
        x.tx.write(0, msg).map_err(|e| e.to_string())?;
        let send = SendWr::new(1000, SendOp::Send, &[x.tx.sge(0, msg.len() as u32)])
            .map_err(|e| e.to_string())?;
        x.qp.post_send(&send).map_err(|e| e.to_string())?;
        let deadline = Instant::now() + self.timeout;
        loop {
            match x.cq.poll_one() {
                Some(wc) if wc.status != WcStatus::Success => {
                    return Err(format!(
                        "perftest exchange: {:?} completed with {:?}",
                        wc.opcode, wc.status
                    ))
                }
                Some(wc) if wc.opcode == WcOpcode::Recv => {
                    let n = (wc.byte_len as usize).min(MSG_MAX as usize);
                    let at = wc.wr_id * u64::from(MSG_MAX);
                    let mut m = vec![0u8; n];
                    x.rx.read(at as usize, &mut m).map_err(|e| e.to_string())?;
                    let wr = RecvWr::new(wc.wr_id, &[x.rx.sge(at, MSG_MAX)])
                        .map_err(|e| e.to_string())?;
                    x.qp.post_recv(&wr).map_err(|e| e.to_string())?;
                    return Ok(m);
                }
                Some(_) => {}
                None if Instant::now() > deadline => {
                    return Err("perftest exchange: the server did not answer".into())
                }
                None => std::thread::sleep(Duration::from_micros(50)),
            }
        }
    }
}

/// Connects one QP to `server:port`, retrying (with a fresh QP) while nobody listens.
/// What a connection's queue pair needs before it connects: its receives, and whether it
/// speaks RFC 7306 (only `atomic_bw`'s test connection does).
struct QpSetup<'a> {
    recvs: &'a dyn Fn(&QueuePair) -> Result<(), String>,
    rfc7306: bool,
}

fn connect_qp(
    ctx: &Context,
    pd: &warpcore_verbs::ProtectionDomain,
    server: std::net::Ipv4Addr,
    port: u16,
    params: &MpaParams,
    timeout: Duration,
    setup: QpSetup<'_>,
) -> Result<(QueuePair, CompletionQueue), String> {
    let QpSetup { recvs, rfc7306 } = setup;
    let t0 = Instant::now();
    loop {
        let cq = ctx.create_cq(1024).map_err(|e| e.to_string())?;
        let mut init = QpInit::new(&cq, &cq);
        init.rfc7306 = rfc7306;
        init.rq_depth = TEST_RECVS as u32;
        init.sq_depth = 256;
        let qp = pd.create_qp(&init).map_err(|e| e.to_string())?;
        recvs(&qp)?;
        qp.connect(server, port, params, &[])
            .map_err(|e| e.to_string())?;
        match ctx.next_event(timeout.saturating_sub(t0.elapsed())) {
            Some(CmEvent::Established(e)) => {
                eprintln!(
                    "iwperf: perftest: connected to {server}:{port} (IRD {} ORD {})",
                    e.ird, e.ord
                );
                return Ok((qp, cq));
            }
            Some(CmEvent::Rejected { .. }) => {
                return Err(format!("perftest: {server}:{port} rejected the connection"))
            }
            ev if t0.elapsed() < timeout => {
                if let Some(e) = ev {
                    eprintln!("iwperf: perftest: {e:?}, retrying");
                }
                std::thread::sleep(Duration::from_millis(300));
            }
            _ => return Err(format!("perftest: no server at {server}:{port}")),
        }
    }
}

/// Client: runs the test against a linux-rdma/perftest `-R` server (`ib_write_bw -R` and
/// friends): the exchange connection (we Send each step first, the server answers), the
/// test connection, the test, the closing exchange.
pub fn client(
    cli: &Cli,
    ep: &Endpoint,
    server: std::net::Ipv4Addr,
    mpa: &MpaParams,
) -> Result<(), String> {
    if !supported(cli.test) {
        return Err(unsupported(cli.test));
    }
    let ctx = &ep.ctx;
    let timeout = Duration::from_secs(cli.timeout);
    let mut params = mpa.clone();
    params.ird = 128;
    params.ord = 128;
    let pd = ctx.alloc_pd();
    let rx = pd
        .alloc_mr(MSG_MAX as usize * RECVS as usize, Access::LOCAL_WRITE)
        .map_err(|e| e.to_string())?;
    let tx = pd
        .alloc_mr(MSG_MAX as usize, Access::LOCAL_WRITE)
        .map_err(|e| e.to_string())?;
    let post_x = |qp: &QueuePair| -> Result<(), String> {
        for i in 0..RECVS {
            let wr = RecvWr::new(i, &[rx.sge(i * u64::from(MSG_MAX), MSG_MAX)])
                .map_err(|e| e.to_string())?;
            qp.post_recv(&wr).map_err(|e| e.to_string())?;
        }
        Ok(())
    };
    let (qp, cq) = connect_qp(
        ctx,
        &pd,
        server,
        cli.port,
        &params,
        timeout,
        QpSetup {
            recvs: &post_x,
            rfc7306: false,
        },
    )?;
    let x = ClientXchg {
        x: Exchange { qp, cq, rx, tx },
        timeout,
    };
    // perftest's server posts its first receive only after rdma_cm told it the connection is
    // up; a Send that arrives before that is lost to siw (seen: the server never answered
    // our version string and flushed after its timeout). perftest's own client is slower
    // than that; we wait a moment instead.
    std::thread::sleep(Duration::from_millis(300));
    // perftest's opening steps (exchange_versions, check_sys_data, check_mtu, then an
    // all-zero dest): the server answers each with its own value.
    let v = x.step(VERSION)?;
    eprintln!(
        "iwperf: perftest: server version {}",
        String::from_utf8_lossy(&v).trim_end_matches('\0')
    );
    x.step(&4096u32.to_be_bytes())?;
    x.step(&64u32.to_be_bytes())?;
    x.step(b"3\0")?;
    x.step(&[0u8; DEST_LEN])?;
    let sizes = run_sizes(cli)?;
    let iters = cli.iters();
    let region = pd
        .alloc_mr(
            REGION_LEN,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .map_err(|e| e.to_string())?;
    let slot = TX_AREA / TEST_RECVS;
    let sends = matches!(cli.test, TestName::SendBw | TestName::SendLat);
    let post_t = |qp: &QueuePair| -> Result<(), String> {
        if sends {
            for i in 0..TEST_RECVS {
                let wr = RecvWr::new(i, &[region.sge(i * slot, slot as u32)])
                    .map_err(|e| e.to_string())?;
                qp.post_recv(&wr).map_err(|e| e.to_string())?;
            }
        }
        Ok(())
    };
    // atomic_bw needs RFC 7306 (a Warpcore peer: siw has no atomics).
    let ext = cli.test == TestName::AtomicBw;
    let (tqp, tcq) = connect_qp(
        ctx,
        &pd,
        server,
        cli.port,
        &params,
        timeout,
        QpSetup {
            recvs: &post_t,
            rfc7306: ext,
        },
    )?;
    x.step(&[0u8; DEST_LEN])?;
    let reads = matches!(
        cli.test,
        TestName::ReadBw | TestName::ReadLat | TestName::AtomicBw
    );
    let me = our_dest(if reads { 128 } else { 1 }, region.stag());
    let mut peer = None;
    // The barrier dests before the test: three in write_bw/read_bw, four in the others
    // (send_bw adds one after its receives are posted, the latency tests one more); as in
    // siw-to-siw captures (interop/pcaps/siw_mpa2_ib_*.pcap).
    let pre = if matches!(
        cli.test,
        TestName::WriteBw | TestName::ReadBw | TestName::AtomicBw
    ) {
        3
    } else {
        4
    };
    for _ in 0..pre {
        peer = client_dest(&x.step(&me)?);
    }
    let (rkey, vaddr) = peer.ok_or("perftest: the server sent no pingpong_dest")?;
    let t = TestConn {
        qp: &tqp,
        cq: &tcq,
        region: &region,
        slot,
        timeout,
    };
    match cli.test {
        TestName::WriteBw | TestName::ReadBw | TestName::SendBw | TestName::AtomicBw => {
            // perftest's -a runs the sizes back to back (no exchange between them in
            // write_bw and read_bw) and reports the last one in xchg_bw_reports.
            warpcore_apps::outln!("{}", report::bw_header(false));
            let mut last = None;
            for &size in &sizes {
                let (posted, completed) = t.bw(cli.test, size, iters, rkey, vaddr)?;
                let bw = BwReport::of(size, &posted, &completed);
                warpcore_apps::outln!("{}", bw.row(size, iters));
                last = Some((size, bw));
            }
            let (size, bw) = last.ok_or("no size to run")?;
            if cli.test == TestName::SendBw {
                // send_bw closes with one dest and no report exchange.
                x.step(&me)?;
            } else {
                // xchg_bw_reports: size, iterations, peak and average BW, message rate. A
                // peak perftest would not compute (over 20000 iterations) goes as its 0.
                x.step(&me)?;
                let peak = bw.peak_mb.unwrap_or(0.0);
                for v in [
                    size,
                    iters,
                    peak.to_bits(),
                    bw.avg_mb.to_bits(),
                    bw.rate_mpps.to_bits(),
                ] {
                    x.step(&v.to_be_bytes())?;
                }
                x.step(&me)?;
            }
        }
        _ => {
            warpcore_apps::outln!("{}", report::LAT_HEADER);
            // With -a, perftest's read_lat and write_lat run the sizes back to back with no
            // exchange between them (write_lat's server Writes first again at each size).
            for &size in &sizes {
                let posted = t.lat(cli.test, size, iters, rkey, vaddr)?;
                // perftest's LAT samples: the intervals between consecutive posts (each one
                // round trip of the ping-pong, or one Read), iters - 1 of them.
                let deltas: Vec<u64> = posted.windows(2).map(|w| w[1] - w[0]).collect();
                let st = report::lat_stats(&deltas, report::rtt_factor(cli.test));
                warpcore_apps::outln!("{}", report::lat_row(size, iters, st.as_ref()));
            }
            // perftest's latency tests close with one more dest (write_lat with none).
            if cli.test != TestName::WriteLat {
                x.step(&me)?;
            }
        }
    }
    // As perftest's client: close the test connection, let the server close the exchange
    // (closing it ourselves right after the last step made siw's server fail its last
    // Send completion, status 2).
    let _ = tqp.disconnect();
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        match ctx.next_event(Duration::from_millis(100)) {
            Some(CmEvent::Disconnected { qp, .. }) if qp == x.x.qp.id() => break,
            _ => {}
        }
    }
    let _ = x.x.qp.disconnect();
    std::thread::sleep(Duration::from_millis(200));
    eprintln!(
        "iwperf: perftest: client done ({iters} iterations of {} size(s), {} to {} octets)",
        sizes.len(),
        sizes.first().copied().unwrap_or(0),
        sizes.last().copied().unwrap_or(0)
    );
    Ok(())
}

/// The bandwidth figures of a `--perftest` client run, as perftest's `print_report_bw`
/// computes them (MB = 2^20 octets).
#[derive(Debug, Clone, Copy, PartialEq)]
struct BwReport {
    /// perftest's peak ([`report::perftest_opt_delta_ns`]); `None` where perftest has none.
    peak_mb: Option<f64>,
    /// Octets over the time from the first post to the last completion.
    avg_mb: f64,
    /// Messages per microsecond over the same time.
    rate_mpps: f64,
}

impl BwReport {
    fn of(size: u64, tposted: &[u64], tcompleted: &[u64]) -> BwReport {
        let n = tcompleted.len() as f64;
        let span = match (tposted.first(), tcompleted.last()) {
            (Some(&a), Some(&b)) if b > a => (b - a) as f64 / 1e9,
            _ => f64::NAN,
        };
        let mb = f64::from(1u32 << 20);
        BwReport {
            peak_mb: report::perftest_opt_delta_ns(tposted, tcompleted)
                .filter(|&d| d > 0)
                .map(|d| size as f64 * 1e9 / d as f64 / mb),
            avg_mb: size as f64 * n / span / mb,
            rate_mpps: n / span / 1e6,
        }
    }

    fn row(&self, size: u64, iters: u64) -> String {
        format!(
            " {:<7}    {:<7}          {:<7}            {:<7.2}\t\t   {:<7.6}",
            size,
            iters,
            report::or_na(self.peak_mb),
            self.avg_mb,
            self.rate_mpps
        )
    }
}

/// The test connection, client side.
struct TestConn<'a> {
    qp: &'a QueuePair,
    cq: &'a CompletionQueue,
    region: &'a MemoryRegion,
    slot: u64,
    timeout: Duration,
}

impl TestConn<'_> {
    /// The next completion (successful), or an error.
    fn wait(&self) -> Result<warpcore_verbs::Completion, String> {
        let deadline = Instant::now() + self.timeout;
        loop {
            if let Some(wc) = self.cq.poll_one() {
                if wc.status != WcStatus::Success {
                    return Err(format!(
                        "perftest test QP: {:?} completed with {:?}",
                        wc.opcode, wc.status
                    ));
                }
                if wc.opcode == WcOpcode::Recv {
                    let wr = RecvWr::new(
                        wc.wr_id,
                        &[self.region.sge(wc.wr_id * self.slot, self.slot as u32)],
                    )
                    .map_err(|e| e.to_string())?;
                    self.qp.post_recv(&wr).map_err(|e| e.to_string())?;
                }
                return Ok(wc);
            }
            if Instant::now() > deadline {
                return Err("perftest test QP: nothing completed in time".into());
            }
            std::hint::spin_loop();
        }
    }

    fn op(&self, test: TestName, rkey: u32, vaddr: u64) -> SendOp {
        match test {
            TestName::ReadBw | TestName::ReadLat => SendOp::Read {
                remote_stag: rkey,
                remote_to: vaddr,
            },
            TestName::SendBw | TestName::SendLat => SendOp::Send,
            // perftest's default atomic: FetchAdd of 1 on the 8 octets at the dest's address.
            TestName::AtomicBw => SendOp::AtomicFetchAdd {
                remote_stag: rkey,
                remote_to: vaddr,
                add: 1,
                add_mask: 0,
            },
            _ => SendOp::Write {
                remote_stag: rkey,
                remote_to: vaddr,
            },
        }
    }

    /// Bandwidth: `iters` operations, at most a window in flight (Reads: the IRD we
    /// assume of a siw responder, 16). Returns each operation's post and completion time
    /// (ns from the first post), as perftest's `tposted` / `tcompleted`.
    fn bw(
        &self,
        test: TestName,
        size: u64,
        iters: u64,
        rkey: u32,
        vaddr: u64,
    ) -> Result<(Vec<u64>, Vec<u64>), String> {
        let window = if matches!(test, TestName::ReadBw | TestName::AtomicBw) {
            16
        } else {
            64
        };
        let (mut posted, mut done) = (0u64, 0u64);
        let origin = Instant::now();
        let ns = || origin.elapsed().as_nanos() as u64;
        let mut tposted = Vec::with_capacity(iters as usize);
        let mut tcompleted = Vec::with_capacity(iters as usize);
        while done < iters {
            while posted < iters && posted - done < window {
                let wr = SendWr::new(
                    posted,
                    self.op(test, rkey, vaddr),
                    &[self.region.sge(TX_AREA, size as u32)],
                )
                .map_err(|e| e.to_string())?;
                tposted.push(ns());
                self.qp.post_send(&wr).map_err(|e| e.to_string())?;
                posted += 1;
            }
            if self.wait()?.opcode != WcOpcode::Recv {
                tcompleted.push(ns());
                done += 1;
            }
        }
        Ok((tposted, tcompleted))
    }

    /// Latency: one operation at a time; returns each post's time (ns from the first), taken
    /// right before the post as perftest's `tposted`. send_lat: we Send, the server answers
    /// with a Send. write_lat: the server Writes first; we answer counter k (last octet of
    /// our buffer) with k.
    fn lat(
        &self,
        test: TestName,
        size: u64,
        iters: u64,
        rkey: u32,
        vaddr: u64,
    ) -> Result<Vec<u64>, String> {
        let mut tposted = Vec::with_capacity(iters as usize);
        let deadline = Instant::now() + self.timeout;
        let origin = Instant::now();
        for k in 1..=iters {
            if test == TestName::WriteLat {
                let mut last = [0u8; 1];
                loop {
                    self.region
                        .read(size as usize - 1, &mut last)
                        .map_err(|e| e.to_string())?;
                    if last[0] == k as u8 {
                        break;
                    }
                    if Instant::now() > deadline {
                        return Err(format!("perftest write_lat: no Write {k} from the server"));
                    }
                    while let Some(wc) = self.cq.poll_one() {
                        if wc.status != WcStatus::Success {
                            return Err(format!(
                                "perftest test QP: {:?} {:?}",
                                wc.opcode, wc.status
                            ));
                        }
                    }
                }
                self.region
                    .write((TX_AREA + size - 1) as usize, &[k as u8])
                    .map_err(|e| e.to_string())?;
            }
            let wr = SendWr::new(
                k,
                self.op(test, rkey, vaddr),
                &[self.region.sge(TX_AREA, size as u32)],
            )
            .map_err(|e| e.to_string())?;
            tposted.push(origin.elapsed().as_nanos() as u64);
            self.qp.post_send(&wr).map_err(|e| e.to_string())?;
            // Read and Write: their completion; Send: its completion and the answer.
            let mut need = if test == TestName::SendLat { 2 } else { 1 };
            while need > 0 {
                self.wait()?;
                need -= 1;
            }
        }
        Ok(tposted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dest_answer_carries_our_region_other_messages_are_echoed() {
        // A pingpong_dest as siw's ib_write_bw sent it (siw_mpa2_ib_write_bw.pcap frame 30).
        let mut dest = [0u8; DEST_LEN];
        dest[4..8].copy_from_slice(&1u32.to_be_bytes());
        dest[8..12].copy_from_slice(&2u32.to_be_bytes());
        dest[12..16].copy_from_slice(&0x000e_b226u32.to_be_bytes());
        dest[16..20].copy_from_slice(&0x9473_6e00u32.to_be_bytes());
        dest[24..32].copy_from_slice(&0x7f5d_0aed_5000u64.to_be_bytes());
        dest[32..38].copy_from_slice(&[0x52, 0x54, 0, 0x19, 0x80, 0x0c]);
        let a = answer(&dest, 0x1234_5678);
        assert_eq!(&a[16..20], &0x1234_5678u32.to_be_bytes());
        assert_eq!(&a[24..32], &[0; 8]);
        assert_eq!(&a[..12], &dest[..12]);
        assert_eq!(&a[32..], &dest[32..]);
        // Version string, sizes, zeroed GID checks: echoed as they came.
        for m in [
            &b"6.06\0\0\0\0\0\0\0\0\0\0\0\0"[..],
            &[0, 0, 0x10, 0],
            &[0u8; DEST_LEN],
        ] {
            assert_eq!(answer(m, 7), m);
        }
        assert!(supported(TestName::WriteBw) && supported(TestName::WriteLat));
        assert_eq!(client_dest(&dest), Some((0x9473_6e00, 0x7f5d_0aed_5000)));
        assert_eq!(client_dest(&[0u8; DEST_LEN]), None);
    }

    #[test]
    fn our_client_dest_is_read_back_as_a_dest_and_answered_by_our_server() {
        // What our client sends is what a perftest server parses as rkey/vaddr (and what
        // our own server recognises as a client's dest).
        let d = our_dest(128, 0xdead_be00);
        assert_eq!(client_dest(&d), Some((0xdead_be00, 0)));
        assert_eq!(&d[4..8], &128u32.to_be_bytes());
        let a = answer(&d, 0x0102_0300);
        assert_eq!(client_dest(&a), Some((0x0102_0300, 0)));
        assert_eq!(VERSION.len(), 16);
        assert!(supported(TestName::SendBw) && !supported(TestName::AtomicLat));
    }
}
