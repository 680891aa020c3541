//! The core verbs suite, split into a server role and a client role that only talk over the
//! network, so the same script runs over the in-memory link (two threads), DPDK net_ring
//! (two contexts in one process) and net_memif (two processes).
#![allow(dead_code)]

// Not every test file that includes this module judges a capture.
#[allow(unused_imports)]
pub use warpcore_test_support::judge;
#[cfg(feature = "dpdk")]
pub mod ring;

use std::time::Duration;

use warpcore_verbs::*;

pub const PORT: u16 = 7100;
const T: Duration = Duration::from_secs(20);
const LEN: usize = 64 * 1024;

/// The MPA settings of each connection round (RDMAP over MPA Rev 2 with CRC and the
/// peer-to-peer RTR; Rev 1 without CRC, client-server; Rev 2 without CRC with markers).
pub fn rounds() -> Vec<(MpaParams, &'static str)> {
    vec![
        (MpaParams::default(), "graceful"),
        (
            MpaParams {
                rev: 1,
                crc: false,
                peer_to_peer: false,
                ..MpaParams::default()
            },
            "abort",
        ),
        (
            MpaParams {
                crc: false,
                markers: true,
                ..MpaParams::default()
            },
            "server-closes",
        ),
    ]
}

pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

fn event(ctx: &Context) -> CmEvent {
    ctx.next_event(T).expect("connection manager event")
}

/// The server's view of the connection manager: the events of one queue pair, or the next
/// connection request, in arrival order, keeping the others for later. A client that runs
/// ahead can open its next connection before this side saw the previous one close: the
/// engine keeps each connection's events in order, not the events of different ones.
struct Events<'a> {
    ctx: &'a Context,
    stash: std::collections::VecDeque<CmEvent>,
}

impl<'a> Events<'a> {
    fn new(ctx: &'a Context) -> Self {
        Events {
            ctx,
            stash: std::collections::VecDeque::new(),
        }
    }

    fn take(&mut self, want: impl Fn(&CmEvent) -> bool) -> CmEvent {
        if let Some(i) = self.stash.iter().position(&want) {
            return self.stash.remove(i).expect("stashed event");
        }
        loop {
            let e = event(self.ctx);
            if want(&e) {
                return e;
            }
            self.stash.push_back(e);
        }
    }

    /// The next connection request.
    fn request(&mut self) -> CmEvent {
        self.take(|e| matches!(e, CmEvent::ConnectRequest(_)))
    }

    /// The next event of queue pair `qp`.
    fn of(&mut self, qp: QpId) -> CmEvent {
        self.take(|e| match e {
            CmEvent::Established(est) => est.qp == qp,
            CmEvent::Disconnected { qp: q, .. }
            | CmEvent::Error { qp: q, .. }
            | CmEvent::Rejected { qp: q, .. } => *q == qp,
            _ => false,
        })
    }
}

fn expect_wc(cq: &CompletionQueue, wr_id: u64) -> Completion {
    let c = cq.wait(T).expect("completion");
    assert_eq!(c.wr_id, wr_id, "{c:?}");
    assert_eq!(c.status, WcStatus::Success, "{c:?}");
    c
}

/// The server role; `ready` is called once it listens.
pub fn server(ctx: &Context, ready: impl FnOnce()) {
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(256).unwrap();
    let all =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    let mr = pd.alloc_mr(4 * LEN, all).unwrap();
    let src = pattern(LEN, 77);
    mr.write(2 * LEN, &src).unwrap(); // what the client Reads
                                      // Every listener first: the client may run ahead of us.
    let n = rounds().len() as u16;
    for (i, (params, _)) in rounds().into_iter().enumerate() {
        ctx.listen(PORT + i as u16, &params).unwrap();
    }
    ctx.listen(PORT + n, &MpaParams::default()).unwrap();
    ctx.listen(PORT + n + 1, &MpaParams::default()).unwrap();
    ready();
    let mut cores_seen = std::collections::BTreeSet::new();
    let mut events = Events::new(ctx);
    for (i, (params, close)) in rounds().into_iter().enumerate() {
        let CmEvent::ConnectRequest(req) = events.request() else {
            panic!("expected a connection request")
        };
        assert_eq!(req.private_data, format!("round {i}").as_bytes());
        assert_eq!(req.rev, params.rev);
        cores_seen.insert(req.request.core);
        let mut init = QpInit::new(&cq, &cq);
        init.core = Some(usize::from(req.request.core));
        let qp = pd.create_qp(&init).unwrap();
        // Receives before accepting: two Sends, one Send with SE, a zero-length Send, the
        // final Send after the Write.
        // Receive 5 takes the Immediate Data of the Write with Immediate (RFC 7306).
        for (wr_id, off, len) in [
            (1u64, 0u64, 40_000u32),
            (2, 40_000, 100),
            (3, 41_000, 0),
            (5, 43_000, 0),
            (4, 42_000, 16),
        ] {
            qp.post_recv(
                &RecvWr::new(
                    wr_id,
                    &[
                        mr.sge(off, len / 2),
                        mr.sge(off + u64::from(len / 2), len - len / 2),
                    ],
                )
                .unwrap(),
            )
            .unwrap();
        }
        let mut pd_bytes = mr.stag().to_be_bytes().to_vec();
        pd_bytes.extend_from_slice(b"srv");
        ctx.accept(&req, &qp, &pd_bytes).unwrap();
        let CmEvent::Established(est) = events.of(qp.id()) else {
            panic!("expected Established")
        };
        assert_eq!(est.qp, qp.id());
        assert_eq!(est.private_data, format!("round {i}").as_bytes());
        assert_eq!(est.crc, params.crc);
        let c = expect_wc(&cq, 1);
        assert_eq!(c.byte_len, 40_000);
        let mut got = vec![0u8; 40_000];
        mr.read(0, &mut got).unwrap();
        assert!(got == pattern(40_000, i as u8), "Send payload differs");
        let c = expect_wc(&cq, 2);
        assert!(c.solicited && c.byte_len == 100);
        assert_eq!(expect_wc(&cq, 3).byte_len, 0);
        // EXT-6.3-*: the Write with Immediate's value, its data placed before it.
        let c = expect_wc(&cq, 5);
        assert_eq!(
            (c.opcode, c.imm),
            (WcOpcode::RecvImm, Some(0x7306 + i as u64))
        );
        let mut w = [0u8; 64];
        mr.read(44_000, &mut w).unwrap();
        assert!(
            w[..] == pattern(64, i as u8)[..],
            "Write with Immediate data differs"
        );
        expect_wc(&cq, 4);
        // EXT-5.1.1-*: one FetchAdd of 1 per round on the word at 48_000. It executes
        // when its response is due, which may be just after the final Send was placed.
        let word = mr.atomic_u64(48_000).unwrap();
        let t0 = std::time::Instant::now();
        while word.load(std::sync::atomic::Ordering::SeqCst) != i as u64 + 1 {
            assert!(t0.elapsed() < T, "FetchAdd not executed");
            std::thread::sleep(Duration::from_millis(1));
        }
        // The final Send follows the Write on the same stream: the Write is placed.
        let mut w = vec![0u8; LEN];
        mr.read(LEN, &mut w).unwrap();
        assert!(
            w == pattern(LEN, 100 + i as u8),
            "RDMA Write payload differs"
        );
        // Answer, then close as the round says.
        mr.write(3 * LEN, b"server done").unwrap();
        qp.post_send(&SendWr::new(9, SendOp::Send, &[mr.sge(3 * LEN as u64, 11)]).unwrap())
            .unwrap();
        expect_wc(&cq, 9);
        if close == "server-closes" {
            qp.disconnect().unwrap();
        }
        match events.of(qp.id()) {
            CmEvent::Disconnected { qp: q, cause } => {
                assert_eq!(q, qp.id());
                let want = if close == "abort" {
                    DisconnectCause::Reset
                } else {
                    DisconnectCause::Closed
                };
                assert_eq!(cause, want);
            }
            e => panic!("expected Disconnected, got {e:?}"),
        }
        assert_eq!(qp.state(), QpState::Error);
    }
    // Reject with private data.
    let CmEvent::ConnectRequest(req) = events.request() else {
        panic!("expected a connection request")
    };
    assert_eq!(req.private_data, b"reject me");
    ctx.reject(&req, b"no thanks").unwrap();
    // A remote access error: the client Reads beyond our region.
    let CmEvent::ConnectRequest(req) = events.request() else {
        panic!("expected a connection request")
    };
    let mut init = QpInit::new(&cq, &cq);
    init.core = Some(usize::from(req.request.core));
    let qp = pd.create_qp(&init).unwrap();
    qp.post_recv(&RecvWr::new(50, &[mr.sge(0, 8)]).unwrap())
        .unwrap();
    ctx.accept(&req, &qp, &mr.stag().to_be_bytes()).unwrap();
    assert!(matches!(events.of(qp.id()), CmEvent::Established(_)));
    match events.of(qp.id()) {
        CmEvent::Error {
            error: ConnError::LocalTerminate(e),
            ..
        } => assert_eq!(e.terminate_code().layer(), 0),
        e => panic!("expected our Terminate, got {e:?}"),
    }
    let c = cq.wait(T).unwrap();
    assert_eq!((c.wr_id, c.status), (50, WcStatus::FlushErr));
    // With several engine cores the connections were spread over them (each owned by the
    // core its frames arrive at).
    assert_eq!(
        cores_seen.len(),
        ctx.cores().min(rounds().len()),
        "{cores_seen:?}"
    );
}

/// Both roles in this process: the server's on a thread of its own (at `server_ip`), the
/// client's on this one once the server listens.
pub fn both_roles(client_ctx: &Context, server_ctx: Context, server_ip: [u8; 4]) {
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::channel();
        let t = s.spawn(move || server(&server_ctx, move || tx.send(()).unwrap()));
        rx.recv().expect("server listening");
        client(client_ctx, server_ip);
        t.join().expect("server role");
    });
}

/// The client role.
pub fn client(ctx: &Context, server_ip: [u8; 4]) {
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(256).unwrap();
    let mr = pd.alloc_mr(4 * LEN, Access::LOCAL_WRITE).unwrap();
    for (i, (params, close)) in rounds().into_iter().enumerate() {
        // The server (another process over memif) may not be reachable yet: a refused or
        // timed-out connect is retried on a fresh queue pair.
        let (qp, est) = loop {
            let qp = pd.create_qp(&QpInit::new(&cq, &cq)).unwrap();
            qp.post_recv(&RecvWr::new(20, &[mr.sge(3 * LEN as u64, 64)]).unwrap())
                .unwrap();
            qp.connect(
                server_ip,
                PORT + i as u16,
                &params,
                format!("round {i}").as_bytes(),
            )
            .unwrap();
            match event(ctx) {
                CmEvent::Established(e) => break (qp, e),
                // Nothing listens yet: the SYN draws a RST.
                CmEvent::Error {
                    error: ConnError::TcpReset,
                    ..
                } if i == 0 => {
                    let c = cq.wait(T).unwrap();
                    assert_eq!(c.status, WcStatus::FlushErr);
                    std::thread::sleep(Duration::from_millis(100));
                }
                e => panic!("expected Established, got {e:?}"),
            }
        };
        assert_eq!(&est.private_data[4..], b"srv");
        let stag = u32::from_be_bytes(est.private_data[..4].try_into().unwrap());
        let _ = (close, stag);
        // Local misuse: typed errors, nothing changes.
        assert_eq!(
            qp.post_send(
                &SendWr::new(99, SendOp::Send, &[mr.sge(4 * LEN as u64 - 10, 20)]).unwrap()
            ),
            Err(Error::SgeOutOfBounds)
        );
        mr.write(0, &pattern(40_000, i as u8)).unwrap();
        mr.write(LEN, &pattern(LEN, 100 + i as u8)).unwrap();
        let s = |o: u64, l: u32| mr.sge(o, l);
        qp.post_send(&SendWr::new(1, SendOp::Send, &[s(0, 10_000), s(10_000, 30_000)]).unwrap())
            .unwrap();
        qp.post_send(&SendWr::new(2, SendOp::SendSe, &[s(0, 100)]).unwrap())
            .unwrap();
        qp.post_send(&SendWr::new(3, SendOp::Send, &[]).unwrap().unsignaled())
            .unwrap();
        let write = SendOp::Write {
            remote_stag: stag,
            remote_to: LEN as u64,
        };
        qp.post_send(&SendWr::new(4, write, &[s(LEN as u64, LEN as u32)]).unwrap())
            .unwrap();
        // Zero-length Write and Read, then Reads of the server's pattern, several at once.
        let zw = SendOp::Write {
            remote_stag: stag,
            remote_to: 0,
        };
        qp.post_send(&SendWr::new(5, zw, &[]).unwrap()).unwrap();
        let zr = SendOp::Read {
            remote_stag: stag,
            remote_to: 0,
        };
        qp.post_send(&SendWr::new(6, zr, &[s(0, 0)]).unwrap())
            .unwrap();
        for k in 0..4u64 {
            let rd = SendOp::Read {
                remote_stag: stag,
                remote_to: 2 * LEN as u64 + k * (LEN as u64 / 4),
            };
            qp.post_send(
                &SendWr::new(
                    10 + k,
                    rd,
                    &[s(2 * LEN as u64 + k * (LEN as u64 / 4), LEN as u32 / 4)],
                )
                .unwrap(),
            )
            .unwrap();
        }
        // RFC 7306: a Write with Immediate and a FetchAdd (in the captures too).
        let wi = SendOp::WriteWithImm {
            remote_stag: stag,
            remote_to: 44_000,
            imm: 0x7306 + i as u64,
            solicited: false,
        };
        qp.post_send(&SendWr::new(8, wi, &[s(0, 64)]).unwrap())
            .unwrap();
        let fa = SendOp::AtomicFetchAdd {
            remote_stag: stag,
            remote_to: 48_000,
            add: 1,
            add_mask: 0,
        };
        qp.post_send(&SendWr::new(14, fa, &[]).unwrap()).unwrap();
        qp.post_send(&SendWr::new(7, SendOp::Send, &[s(0, 16)]).unwrap())
            .unwrap();
        for id in [1, 2, 4, 5, 6, 10, 11, 12, 13, 8, 14, 7] {
            let c = expect_wc(&cq, id);
            if id == 14 {
                assert_eq!(c.atomic_orig, Some(i as u64));
            }
        }
        let mut got = vec![0u8; LEN];
        mr.read(2 * LEN, &mut got).unwrap();
        assert!(got == pattern(LEN, 77), "RDMA Read data differs");
        let c = expect_wc(&cq, 20);
        let mut reply = [0u8; 11];
        mr.read(3 * LEN, &mut reply).unwrap();
        assert_eq!((c.byte_len, &reply), (11, b"server done"));
        match close {
            "graceful" => qp.disconnect().unwrap(),
            "abort" => qp.abort().unwrap(),
            _ => {}
        }
        match event(ctx) {
            CmEvent::Disconnected { qp: q, cause } => {
                assert_eq!(q, qp.id());
                let want = if close == "abort" {
                    DisconnectCause::Reset
                } else {
                    DisconnectCause::Closed
                };
                assert_eq!(cause, want);
            }
            e => panic!("expected Disconnected, got {e:?}"),
        }
        assert_eq!(
            qp.post_send(&SendWr::new(98, SendOp::Send, &[]).unwrap()),
            Err(Error::InvalidState(QpState::Error))
        );
    }
    let n = rounds().len() as u16;
    // Rejected with private data.
    let qp = pd.create_qp(&QpInit::new(&cq, &cq)).unwrap();
    connect_retrying(ctx, &qp, server_ip, PORT + n, b"reject me");
    match event(ctx) {
        CmEvent::Rejected { private_data, .. } => assert_eq!(private_data, b"no thanks"),
        e => panic!("expected Rejected, got {e:?}"),
    }
    // Remote access error: a Read beyond the server's region (RDMAP-7.2-12).
    let qp = pd.create_qp(&QpInit::new(&cq, &cq)).unwrap();
    connect_retrying(ctx, &qp, server_ip, PORT + n + 1, b"");
    let CmEvent::Established(est) = event(ctx) else {
        panic!("expected Established")
    };
    let stag = u32::from_be_bytes(est.private_data[..4].try_into().unwrap());
    let rd = SendOp::Read {
        remote_stag: stag,
        remote_to: 4 * LEN as u64 - 8,
    };
    qp.post_send(&SendWr::new(30, rd, &[mr.sge(0, 64)]).unwrap())
        .unwrap();
    match event(ctx) {
        CmEvent::Error {
            error: ConnError::RemoteTerminate(rep),
            ..
        } => assert_eq!(
            (rep.code.layer(), rep.code.etype(), rep.code.code()),
            (0, 1, 1)
        ),
        e => panic!("expected the peer's Terminate, got {e:?}"),
    }
    let c = cq.wait(T).unwrap();
    assert_eq!((c.wr_id, c.status), (30, WcStatus::RemoteAccess));
}

fn connect_retrying(ctx: &Context, qp: &QueuePair, ip: [u8; 4], port: u16, pd: &[u8]) {
    qp.connect(ip, port, &MpaParams::default(), pd).unwrap();
    let _ = ctx;
}

/// How long the set-up helpers below wait for each connection manager event.
const CM_WAIT: Duration = Duration::from_secs(10);

/// Two contexts with engine threads over the in-memory link: (server at 10.0.0.2, client
/// at 10.0.0.1).
pub fn link_contexts() -> (Context, Context) {
    let (dev_a, dev_b) = link_pair(&LinkConfig::default());
    let server = Context::open(Config::new(dev_b, [10, 0, 0, 2])).unwrap();
    let client = Context::open(Config::new(dev_a, [10, 0, 0, 1])).unwrap();
    (server, client)
}

/// Connects the client's `cqp` to the server's listener on `port` (default MPA settings,
/// no private data), accepts the request on `sqp` and checks that the client's next event
/// is Established. Bounded: a lost request fails the test instead of hanging it.
pub fn connect_accept(
    server: &Context,
    sqp: &QueuePair,
    client: &Context,
    cqp: &QueuePair,
    port: u16,
) {
    cqp.connect([10, 0, 0, 2], port, &MpaParams::default(), b"")
        .unwrap();
    let req = loop {
        match server.next_event(CM_WAIT) {
            Some(CmEvent::ConnectRequest(r)) => break r,
            Some(_) => {}
            None => panic!("no connection request within {CM_WAIT:?}"),
        }
    };
    server.accept(&req, sqp, b"").unwrap();
    assert!(matches!(
        client.next_event(CM_WAIT),
        Some(CmEvent::Established(_))
    ));
}

/// Two caller-driven contexts over one in-memory link (`link`): (server at 10.0.0.2,
/// client at 10.0.0.1). The test's thread runs both cores ([`connect_accept_driven`]).
pub fn caller_contexts(link: &LinkConfig) -> (Context, Context) {
    let (da, db) = link_pair(link);
    let mut cs = Config::new(db, [10, 0, 0, 2]);
    cs.drive = Drive::Caller;
    let mut cc = Config::new(da, [10, 0, 0, 1]);
    cc.drive = Drive::Caller;
    (Context::open(cs).unwrap(), Context::open(cc).unwrap())
}

/// [`connect_accept`] for caller-driven contexts ([`caller_contexts`]): the server listens
/// on `port`, the client's `cqp` connects, `sqp` accepts, and this thread runs both cores
/// until the client is established; bounded by `CM_WAIT`.
pub fn connect_accept_driven(
    server: &Context,
    sqp: &QueuePair,
    client: &Context,
    cqp: &QueuePair,
    port: u16,
) {
    server.listen(port, &MpaParams::default()).unwrap();
    cqp.connect([10, 0, 0, 2], port, &MpaParams::default(), b"")
        .unwrap();
    let t0 = std::time::Instant::now();
    let req = loop {
        assert!(
            t0.elapsed() < CM_WAIT,
            "no connection request within {CM_WAIT:?}"
        );
        client.progress();
        server.progress();
        if let Some(CmEvent::ConnectRequest(r)) = server.next_event(Duration::ZERO) {
            break r;
        }
    };
    server.accept(&req, sqp, b"").unwrap();
    loop {
        assert!(t0.elapsed() < CM_WAIT, "not established within {CM_WAIT:?}");
        client.progress();
        server.progress();
        if let Some(CmEvent::Established(_)) = client.next_event(Duration::ZERO) {
            break;
        }
    }
}
