//! `--perftest` (server role): answer linux-rdma/perftest's `-R` (rdma_cm) clients, e.g.
//! `ib_write_bw -R`, `ib_read_bw -R`, `ib_read_lat -R` run against this process.
//!
//! perftest with `-R` opens two rdma_cm connections to the test port: the first carries its
//! own parameter exchange (Send/Recv), the second is the test QP. Each exchange step is
//! symmetric: the client Sends its value, the server Receives it and Sends its own back
//! (`ctx_xchg_data` in perftest's src/perftest_communication.c). Most steps are values both
//! sides must agree on (version string, sizes, MTU, GID compatibility, the reports at the
//! end), so we answer with the value the client sent. The one step that carries *our*
//! resources is `struct pingpong_dest` (56 octets, big endian: lid, out_reads, qpn, psn,
//! rkey, 4 octets padding, vaddr, 16-octet GID, srqn, gid_index; perftest's
//! `rdma_write_keys`): there we answer with our test region's STag and address 0 (regions
//! are zero-based). perftest sends the dest again as a barrier around the measurement; we
//! answer each time the same way.
//!
//! On the test connection: `write_bw`, `read_bw`, `read_lat` need nothing from us (the
//! client's Writes land in our region, its Reads are served by the engine); for `send_lat` we answer each received message with a Send of
//! the same length; for `write_lat` we watch the last octet of the client's Write in our
//! region (perftest puts its iteration counter there) and Write the same counter back to the
//! buffer the client advertised in its `pingpong_dest` (we Write first, as perftest's
//! server does). Message size `-s` and, for `write_lat`, the count `-n` must match the
//! client's (defaults 2 and 1000 as perftest's). The client role is not
//! implemented.

use std::time::{Duration, Instant};

use warpcore_verbs::{
    Access, CmEvent, CompletionQueue, Context, MemoryRegion, MpaParams, QpInit, QueuePair, RecvWr,
    SendOp, SendWr, WcOpcode, WcStatus,
};

use crate::cli::{Cli, TestName};
use crate::net::Endpoint;

/// Size of perftest's `struct pingpong_dest` on the wire.
const DEST_LEN: usize = 56;
/// Largest exchange message we accept.
const MSG_MAX: u32 = 256;
/// Receive buffers kept posted on the exchange connection.
const RECVS: u64 = 8;
/// Our test region: perftest's client keeps its accesses within a few buffers of `-s`.
const REGION_LEN: usize = 64 << 20;

/// Whether `--perftest` can serve this test.
pub fn supported(t: TestName) -> bool {
    matches!(
        t,
        // send_bw is not here: against siw's ib_send_bw -R the client stalls after the
        // exchange (not understood yet; docs/interop.md).
        TestName::WriteBw
            | TestName::ReadBw
            | TestName::ReadLat
            | TestName::SendLat
            | TestName::WriteLat
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
        return Err(format!(
            "--perftest serves write_bw/lat, read_bw/lat and send_lat; {} is not one of them",
            cli.test.name()
        ));
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
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .map_err(|e| e.to_string())?;
    let mut test: Option<(QueuePair, CompletionQueue)> = None;
    let mut steps = 0u32;
    let mut deadline = Instant::now() + timeout;
    let size = cli.sizes().first().copied().unwrap_or(2);
    if size > TX_AREA / TEST_RECVS {
        return Err(format!(
            "--perftest: -s {size} is larger than {}",
            TX_AREA / TEST_RECVS
        ));
    }
    let slot = if cli.test == TestName::WriteLat {
        size
    } else {
        TX_AREA / TEST_RECVS
    };
    let mut peer: Option<(u32, u64)> = None;
    // write_lat: Writes sent so far, of the client's -n (iwperf's -n must match it).
    let mut sent: u64 = 0;
    let iters = cli.iters();
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
                size,
                peer.filter(|_| test_ready),
                (&mut sent, iters),
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
                init.rfc7306 = false;
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

/// One step of our side of the test connection; `Some(n)` when it did something (n
/// messages answered), `None` when idle.
#[allow(clippy::too_many_arguments)]
fn drive_test(
    test: TestName,
    qp: &QueuePair,
    cq: &CompletionQueue,
    region: &MemoryRegion,
    slot: u64,
    size: u64,
    peer: Option<(u32, u64)>,
    (sent, iters): (&mut u64, u64),
) -> Result<Option<u64>, String> {
    let err = |e: warpcore_verbs::Error| e.to_string();
    if let Some(wc) = cq.poll_one() {
        match (wc.status, wc.opcode) {
            (WcStatus::Success, WcOpcode::Recv) => {
                let wr = RecvWr::new(wc.wr_id, &[region.sge(wc.wr_id * slot, slot as u32)])
                    .map_err(err)?;
                qp.post_recv(&wr).map_err(err)?;
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
        if *sent >= iters {
            return Ok(None);
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
}
