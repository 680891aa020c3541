//! The three ways to drive an engine core ([`Drive`]): each side of a connection over the
//! in-memory link runs on its own application thread, and a Send, RDMA Writes and an RDMA
//! Read arrive byte for byte, in the caller-driven mode (no engine threads: the threads
//! that poll run the cores), in busy-poll mode, and with the default threads.

use std::time::Duration;

use warpcore_verbs::*;

const T: Duration = Duration::from_secs(10);

fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ salt)
        .collect()
}

fn run(drive: Drive, port: u16) {
    let (da, db) = link_pair(&LinkConfig::default());
    let mut cs = Config::new(db, [10, 0, 0, 2]);
    cs.drive = drive;
    let mut cc = Config::new(da, [10, 0, 0, 1]);
    cc.drive = drive;
    let server = Context::open(cs).unwrap();
    let client = Context::open(cc).unwrap();
    // The server's Read source and Write target.
    let spd = server.alloc_pd();
    let scq = server.create_cq(256).unwrap();
    let remote = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let smr = spd.alloc_mr(1 << 16, remote).unwrap();
    smr.write(32768, &pattern(4096, 0x5a)).unwrap();
    let sqp = spd.create_qp(&QpInit::new(&scq, &scq)).unwrap();
    sqp.post_recv(&RecvWr::new(7, &[smr.sge(0, 4096)]).unwrap())
        .unwrap();
    server.listen(port, &MpaParams::default()).unwrap();
    let stag = smr.stag();
    std::thread::scope(|s| {
        let srv = s.spawn(|| {
            let Some(CmEvent::ConnectRequest(req)) = server.next_event(T) else {
                panic!("no connection request")
            };
            server.accept(&req, &sqp, b"").unwrap();
            // The Send (its completion), then the last Write's word: both need this
            // thread to run the server's core in the caller-driven mode.
            let wc = scq.wait(T).unwrap();
            assert_eq!(
                (wc.wr_id, wc.status, wc.byte_len),
                (7, WcStatus::Success, 3000)
            );
            let mut got = vec![0u8; 3000];
            smr.read(0, &mut got).unwrap();
            assert_eq!(got, pattern(3000, 1));
            let t0 = std::time::Instant::now();
            let mut last = [0u8; 1];
            while last[0] != 0xee {
                assert!(t0.elapsed() < T, "the last Write never arrived");
                server.progress();
                smr.read(16383, &mut last).unwrap();
            }
            let mut got = vec![0u8; 8192];
            smr.read(8192, &mut got).unwrap();
            let mut want = pattern(8192, 2);
            want[8191] = 0xee;
            assert_eq!(got, want);
            // Stay up (and keep running the core) until the client has read.
            while !matches!(server.next_event(T), Some(CmEvent::Disconnected { .. })) {}
        });
        let cpd = client.alloc_pd();
        let ccq = client.create_cq(256).unwrap();
        let cmr = cpd.alloc_mr(1 << 16, Access::LOCAL_WRITE).unwrap();
        let cqp = cpd.create_qp(&QpInit::new(&ccq, &ccq)).unwrap();
        cqp.connect([10, 0, 0, 2], port, &MpaParams::default(), b"")
            .unwrap();
        assert!(matches!(
            client.next_event(T),
            Some(CmEvent::Established(_))
        ));
        cmr.write(0, &pattern(3000, 1)).unwrap();
        cqp.post_send(&SendWr::new(1, SendOp::Send, &[cmr.sge(0, 3000)]).unwrap())
            .unwrap();
        let mut w = pattern(8192, 2);
        w[8191] = 0xee;
        cmr.write(8192, &w).unwrap();
        let write = SendOp::Write {
            remote_stag: stag,
            remote_to: 8192,
        };
        cqp.post_send(&SendWr::new(2, write, &[cmr.sge(8192, 8192)]).unwrap())
            .unwrap();
        let read = SendOp::Read {
            remote_stag: stag,
            remote_to: 32768,
        };
        cqp.post_send(&SendWr::new(3, read, &[cmr.sge(32768, 4096)]).unwrap())
            .unwrap();
        for id in 1..=3 {
            let wc = ccq.wait(T).unwrap();
            assert_eq!((wc.wr_id, wc.status), (id, WcStatus::Success));
        }
        let mut got = vec![0u8; 4096];
        cmr.read(32768, &mut got).unwrap();
        assert_eq!(got, pattern(4096, 0x5a));
        cqp.disconnect().unwrap();
        while !matches!(client.next_event(T), Some(CmEvent::Disconnected { .. })) {}
        srv.join().unwrap();
    });
}

#[test]
fn caller_driven_cores() {
    run(Drive::Caller, 7300);
}

#[test]
fn busy_polling_core_threads() {
    run(Drive::BusyPoll, 7301);
}

#[test]
fn parking_core_threads() {
    run(Drive::Thread, 7302);
}

/// A caller-driven context does nothing between calls: with nobody polling the server, a
/// client's connection attempt is not answered; once the server polls, it is.
#[test]
fn caller_driven_core_runs_only_when_polled() {
    let (da, db) = link_pair(&LinkConfig::default());
    let mut cs = Config::new(db, [10, 0, 0, 2]);
    cs.drive = Drive::Caller;
    let server = Context::open(cs).unwrap();
    let client = Context::open(Config::new(da, [10, 0, 0, 1])).unwrap();
    server.listen(7303, &MpaParams::default()).unwrap();
    let cpd = client.alloc_pd();
    let ccq = client.create_cq(16).unwrap();
    let cqp = cpd.create_qp(&QpInit::new(&ccq, &ccq)).unwrap();
    cqp.connect([10, 0, 0, 2], 7303, &MpaParams::default(), b"")
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert!(client.next_event(Duration::from_millis(100)).is_none());
    assert!(matches!(
        server.next_event(T),
        Some(CmEvent::ConnectRequest(_))
    ));
}

/// Two caller-driven contexts over the in-memory link, (server at 10.0.0.2, client at
/// 10.0.0.1); `client` adjusts the client's configuration.
fn caller_driven_contexts(client: impl FnOnce(&mut Config)) -> (Context, Context) {
    let (da, db) = link_pair(&LinkConfig::default());
    let mut cs = Config::new(db, [10, 0, 0, 2]);
    cs.drive = Drive::Caller;
    let mut cc = Config::new(da, [10, 0, 0, 1]);
    cc.drive = Drive::Caller;
    client(&mut cc);
    (Context::open(cs).unwrap(), Context::open(cc).unwrap())
}

/// Connects `cqp` to `sqp` (listening on `port`), this thread running both caller-driven
/// contexts.
fn connect_on_this_thread(
    client: &Context,
    server: &Context,
    cqp: &QueuePair,
    sqp: &QueuePair,
    port: u16,
) {
    let both = || client.progress() | server.progress();
    cqp.connect([10, 0, 0, 2], port, &MpaParams::default(), b"")
        .unwrap();
    let t0 = std::time::Instant::now();
    let req = loop {
        assert!(t0.elapsed() < T);
        both();
        if let Some(CmEvent::ConnectRequest(r)) = server.next_event(Duration::ZERO) {
            break r;
        }
    };
    server.accept(&req, sqp, b"").unwrap();
    while !matches!(
        client.next_event(Duration::ZERO),
        Some(CmEvent::Established(_))
    ) {
        assert!(t0.elapsed() < T);
        both();
    }
}

/// One thread can run two caller-driven engines (what `bench/examples/engine_profile.rs` does),
/// and posting more requests than a caller-driven core's command ring holds runs the core
/// to make room instead of failing. A post to a caller-driven core that nobody runs goes
/// straight into its send queue only while its command ring is empty: here a post list
/// fills the ring first, so every later post goes through the ring behind it, and the
/// completions come back in posting order.
#[test]
fn one_thread_runs_two_caller_driven_engines_past_a_full_command_ring() {
    let (server, client) = caller_driven_contexts(|cc| cc.engine.command_queue_depth = 8);
    let both = || client.progress() | server.progress();
    let spd = server.alloc_pd();
    let scq = server.create_cq(64).unwrap();
    let smr = spd
        .alloc_mr(1 << 16, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let sqp = spd.create_qp(&QpInit::new(&scq, &scq)).unwrap();
    server.listen(7304, &MpaParams::default()).unwrap();
    let cpd = client.alloc_pd();
    let ccq = client.create_cq(256).unwrap();
    let cmr = cpd.alloc_mr(1 << 16, Access::LOCAL_WRITE).unwrap();
    let mut init = QpInit::new(&ccq, &ccq);
    init.sq_depth = 128;
    let cqp = cpd.create_qp(&init).unwrap();
    let t0 = std::time::Instant::now();
    connect_on_this_thread(&client, &server, &cqp, &sqp, 7304);
    // 100 Writes back to back through a ring of 8 commands, without polling in between:
    // a list of 8 fills the ring, then 92 one at a time.
    let write = |k: u64| {
        cmr.write(k as usize * 64, &pattern(64, k as u8)).unwrap();
        let op = SendOp::Write {
            remote_stag: smr.stag(),
            remote_to: k * 64,
        };
        SendWr::new(k, op, &[cmr.sge(k * 64, 64)]).unwrap()
    };
    let list: Vec<SendWr> = (0..8).map(write).collect();
    cqp.post_send_list(&list).unwrap();
    for k in 8..100u64 {
        cqp.post_send(&write(k)).unwrap();
    }
    let mut done = 0;
    while done < 100 {
        assert!(t0.elapsed() < T, "{done} of 100 completed");
        server.progress();
        if let Some(wc) = ccq.poll_one() {
            assert_eq!((wc.wr_id, wc.status), (done, WcStatus::Success));
            done += 1;
        }
    }
    // RDMAP orders the Writes; give the server a few loops to place the last one.
    let mut got = vec![0u8; 64];
    while t0.elapsed() < T {
        both();
        smr.read(99 * 64, &mut got).unwrap();
        if got == pattern(64, 99) {
            break;
        }
    }
    for k in 0..100u64 {
        smr.read(k as usize * 64, &mut got).unwrap();
        assert_eq!(got, pattern(64, k as u8), "write {k}");
    }
}

/// Posts from one thread while another runs the caller-driven core without pause: a send
/// request goes straight into its queue when the core is free and its command ring empty,
/// through the ring otherwise (the core busy, or commands waiting). Nothing is lost and
/// a thread's posts keep their order: 300 Writes complete in posting order, and 300
/// receives posted between them (always through the ring) take the server's 300 Sends in
/// posting order. How often each way is taken depends on the scheduler: this checks the
/// two ways side by side, not a particular interleaving.
#[test]
fn posts_keep_their_order_while_another_thread_runs_the_core() {
    const N: u64 = 300;
    let (server, client) = caller_driven_contexts(|_| {});
    let both = || client.progress() | server.progress();
    let spd = server.alloc_pd();
    let scq = server.create_cq(1024).unwrap();
    let smr = spd
        .alloc_mr(1 << 16, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    smr.write(0, &pattern(64, 5)).unwrap();
    let mut sinit = QpInit::new(&scq, &scq);
    sinit.sq_depth = 512;
    let sqp = spd.create_qp(&sinit).unwrap();
    server.listen(7305, &MpaParams::default()).unwrap();
    let cpd = client.alloc_pd();
    let ccq = client.create_cq(1024).unwrap();
    let cmr = cpd.alloc_mr(1 << 16, Access::LOCAL_WRITE).unwrap();
    let mut init = QpInit::new(&ccq, &ccq);
    init.sq_depth = 512;
    init.rq_depth = 512;
    let cqp = cpd.create_qp(&init).unwrap();
    let t0 = std::time::Instant::now();
    connect_on_this_thread(&client, &server, &cqp, &sqp, 7305);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                client.progress();
            }
        });
        for k in 0..N {
            cqp.post_recv(&RecvWr::new(k, &[cmr.sge(k * 64, 64)]).unwrap())
                .unwrap();
            let op = SendOp::Write {
                remote_stag: smr.stag(),
                remote_to: 4096 + k * 8,
            };
            cqp.post_send(&SendWr::new(k, op, &[cmr.sge(32768 + k * 8, 8)]).unwrap())
                .unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    for k in 0..N {
        let len = 1 + (k % 60) as u32;
        sqp.post_send(&SendWr::new(k, SendOp::Send, &[smr.sge(0, len)]).unwrap())
            .unwrap();
    }
    let (mut recvs, mut writes) = (0u64, 0u64);
    while recvs < N || writes < N {
        assert!(t0.elapsed() < T, "{recvs} receives, {writes} writes");
        both();
        while let Some(wc) = ccq.poll_one() {
            assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
            if wc.opcode == WcOpcode::Recv {
                assert_eq!((wc.wr_id, wc.byte_len), (recvs, 1 + (recvs % 60) as u32));
                recvs += 1;
            } else {
                assert_eq!(wc.wr_id, writes);
                writes += 1;
            }
        }
        while scq.poll_one().is_some() {}
    }
}

/// A small Write posted to an idle caller-driven core is framed when posted
/// (`Qp::write_at_post`), and its completion comes with the loop that sends it: by the
/// time the completion queue poll hands it over, the Write is on the wire, and the server
/// places it with the client never polled again. A completion handed over before that
/// loop would leave the frame in the client's TCP send buffer, never seen by the server.
#[test]
fn a_write_framed_at_post_is_sent_by_the_time_its_completion_is_handed_over() {
    let p = write_pair(7306);
    let (server, client) = (&p.server, &p.client);
    let (smr, cmr, cqp, ccq) = (&p.smr, &p.cmr, &p.cqp, &p.ccq);
    // Let both sides go quiet (the handshake's last ACKs).
    for _ in 0..100 {
        client.progress();
        server.progress();
    }
    // Three Writes from a region, then two inline (their payload copied into the QP's
    // own arena at post).
    for k in 0..5u64 {
        let data = pattern(64, 0x40 + k as u8);
        let op = SendOp::Write {
            remote_stag: smr.stag(),
            remote_to: k * 64,
        };
        if k < 3 {
            cmr.write(k as usize * 64, &data).unwrap();
            cqp.post_send(&SendWr::new(k, op, &[cmr.sge(k * 64, 64)]).unwrap())
                .unwrap();
        } else {
            cqp.post_send_inline(k, op, &data).unwrap();
        }
        let wc = ccq.poll_one().expect("a completion");
        assert_eq!((wc.wr_id, wc.status), (k, WcStatus::Success));
        // Only the server runs from here on.
        let t0 = std::time::Instant::now();
        let mut got = vec![0u8; 64];
        loop {
            server.progress();
            smr.read(k as usize * 64, &mut got).unwrap();
            if got == pattern(64, 0x40 + k as u8) {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(2),
                "Write {k} never left the client"
            );
        }
    }
}

/// Two caller-driven contexts connected on this thread on `port`: the server's region
/// (remote write) and QP, the client's region, QP and CQ (fields drop in this order, as
/// locals declared the other way round would).
struct WritePair {
    cqp: QueuePair,
    cmr: MemoryRegion,
    ccq: CompletionQueue,
    _cpd: ProtectionDomain,
    _sqp: QueuePair,
    smr: MemoryRegion,
    _scq: CompletionQueue,
    _spd: ProtectionDomain,
    client: Context,
    server: Context,
}

/// Writes `ctx`'s cores sent ahead of the TCP's bookkeeping (`Stack::send_lone_record`).
fn sent_at_post(ctx: &Context) -> u64 {
    ctx.stats()
        .unwrap()
        .iter()
        .map(|c| c.writes_sent_at_post)
        .sum()
}

fn write_pair(port: u16) -> WritePair {
    let (server, client) = caller_driven_contexts(|_| {});
    let spd = server.alloc_pd();
    let scq = server.create_cq(16).unwrap();
    let smr = spd
        .alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let sqp = spd.create_qp(&QpInit::new(&scq, &scq)).unwrap();
    server.listen(port, &MpaParams::default()).unwrap();
    let cpd = client.alloc_pd();
    let ccq = client.create_cq(16).unwrap();
    let cmr = cpd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let cqp = cpd.create_qp(&QpInit::new(&ccq, &ccq)).unwrap();
    connect_on_this_thread(&client, &server, &cqp, &sqp, port);
    WritePair {
        cqp,
        cmr,
        ccq,
        _cpd: cpd,
        _sqp: sqp,
        smr,
        _scq: scq,
        _spd: spd,
        client,
        server,
    }
}

/// A lone Write, the only request posted since the client's last loop on a connection with
/// nothing in flight (a ping-pong's request or answer), leaves from the posting call: the
/// server places it with the client never polled after the post. A Write posted while
/// one sent earlier waits for its ACK, or behind one framed since the client's last loop
/// (a burst of posts), waits for the client's next loop, which sends what waits together.
#[test]
fn a_lone_write_leaves_from_the_posting_call_and_others_wait_for_the_loop() {
    let p = write_pair(7307);
    let (server, client) = (&p.server, &p.client);
    let (smr, cmr, cqp, ccq) = (&p.smr, &p.cmr, &p.cqp, &p.ccq);
    // Loops until every delayed ACK has left: a Write posted while its predecessor's ACK
    // is still owed is not lone. A fixed count of loops is not enough: on a fast CPU a
    // hundred of them take less than the ACK delay, and Write 0 then waited for the
    // client's loop (seen on a 2.6 GHz Xeon).
    let wait_acks = Duration::from_micros(10 * ENGINE_ACK_DELAY.total_micros());
    let settle = || {
        let t0 = std::time::Instant::now();
        let mut loops = 0;
        while loops < 100 || t0.elapsed() < wait_acks {
            client.progress();
            server.progress();
            loops += 1;
        }
    };
    settle();
    let write = |k: u64| {
        cmr.write(k as usize * 64, &pattern(64, 0x60 + k as u8))
            .unwrap();
        let op = SendOp::Write {
            remote_stag: smr.stag(),
            remote_to: k * 64,
        };
        cqp.post_send(&SendWr::new(k, op, &[cmr.sge(k * 64, 64)]).unwrap())
            .unwrap();
    };
    let placed = |k: u64| {
        let mut got = vec![0u8; 64];
        smr.read(k as usize * 64, &mut got).unwrap();
        got == pattern(64, 0x60 + k as u8)
    };
    let server_until_placed = |k: u64, what: &str| {
        let t0 = std::time::Instant::now();
        while !placed(k) {
            server.progress();
            assert!(t0.elapsed() < Duration::from_secs(2), "{what}");
        }
    };
    let server_only_not_placed = |k: u64, what: &str| {
        for _ in 0..2_000 {
            server.progress();
        }
        assert!(!placed(k), "{what}");
    };
    // Write 0 is lone: only the server runs after its post.
    write(0);
    server_until_placed(0, "the lone Write 0 did not leave from its post");
    settle();
    // Write 1 is lone too; the client's loop completes it before the server has run, so
    // it is still unacknowledged when Write 2 is posted: Write 2 waits for the client.
    write(1);
    client.progress();
    write(2);
    server_until_placed(1, "the lone Write 1 did not leave from its post");
    server_only_not_placed(
        2,
        "Write 2, posted with Write 1 in flight, left before the loop",
    );
    client.progress();
    server_until_placed(2, "Write 2 did not leave in the client's loop");
    settle();
    // Writes 3 and 4 posted back to back: 3 leaves from its post, 4 (behind Write 3, in
    // flight and framed since the client's last loop) waits for the loop.
    write(3);
    write(4);
    server_until_placed(3, "the lone Write 3 did not leave from its post");
    server_only_not_placed(
        4,
        "Write 4, posted right behind Write 3, left before the loop",
    );
    client.progress();
    server_until_placed(4, "Write 4 did not leave in the client's loop");
    // All complete, in order.
    for k in 0..5 {
        let wc = ccq.wait(Duration::from_secs(2)).expect("a completion");
        assert_eq!((wc.wr_id, wc.status), (k, WcStatus::Success));
    }
    // The lone ones (0, 1, 3) had their frames flushed before the TCP filed them
    // (`Stack::send_lone_record`); Writes 2 and 4, posted with data in flight, never
    // do. (A lone one may still take the general path, as where a timer came due since
    // the client's last loop: a thread descheduled between its loop and its post.)
    let at_post = sent_at_post(client);
    assert!(
        (1..=3).contains(&at_post),
        "{at_post} Writes sent ahead of the TCP's bookkeeping, of the 3 lone ones"
    );
}

/// A write_lat-style ping-pong, each side on its own thread waiting only with
/// [`Context::progress_until`] on the last octet of the other's Write: 300 rounds of 64 B,
/// each message checked. The loops it runs after an idle one take the clock's last reading
/// (`warpcore_engine::runtime::CLOCK_REUSE_LOOPS`).
#[test]
fn a_ping_pong_waiting_with_progress_until() {
    const ROUNDS: u64 = 300;
    let (server, client) = caller_driven_contexts(|_| {});
    let remote = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let spd = server.alloc_pd();
    let scq = server.create_cq(64).unwrap();
    let smr = spd.alloc_mr(4096, remote).unwrap();
    let sqp = spd.create_qp(&QpInit::new(&scq, &scq)).unwrap();
    server.listen(7306, &MpaParams::default()).unwrap();
    let cpd = client.alloc_pd();
    let ccq = client.create_cq(64).unwrap();
    let cmr = cpd.alloc_mr(4096, remote).unwrap();
    let cqp = cpd.create_qp(&QpInit::new(&ccq, &ccq)).unwrap();
    connect_on_this_thread(&client, &server, &cqp, &sqp, 7306);
    let t0 = std::time::Instant::now();
    // Message k: 64 octets of pattern k, its last octet k | 1 (never 0, the buffer's start).
    let message = |k: u64| {
        let mut m = pattern(64, k as u8);
        m[63] = (k as u8) | 1;
        m
    };
    // Waits on `ctx` until `mr`'s message at 0 is message `k`, then checks it whole.
    let wait = |ctx: &Context, mr: &MemoryRegion, k: u64| {
        let want = message(k);
        let mut last = [0u8; 1];
        while !ctx.progress_until(32, || {
            mr.read(63, &mut last).unwrap();
            last[0] == want[63]
        }) {
            assert!(t0.elapsed() < T, "message {k} never arrived");
        }
        let mut got = vec![0u8; 64];
        mr.read(0, &mut got).unwrap();
        assert_eq!(got, want, "message {k}");
    };
    // Writes message `k` from `mr`'s offset 1024 into the peer's region at 0.
    let write = |qp: &QueuePair, mr: &MemoryRegion, stag: u32, k: u64| {
        mr.write(1024, &message(k)).unwrap();
        let op = SendOp::Write {
            remote_stag: stag,
            remote_to: 0,
        };
        let wr = SendWr::new(k, op, &[mr.sge(1024, 64)])
            .unwrap()
            .unsignaled();
        qp.post_send(&wr).unwrap();
    };
    let (sstag, cstag) = (smr.stag(), cmr.stag());
    std::thread::scope(|s| {
        s.spawn(|| {
            for k in 0..ROUNDS {
                wait(&server, &smr, 2 * k);
                write(&sqp, &smr, cstag, 2 * k + 1);
            }
        });
        for k in 0..ROUNDS {
            write(&cqp, &cmr, sstag, 2 * k);
            wait(&client, &cmr, 2 * k + 1);
        }
    });
    assert!(t0.elapsed() < T);
    // Each side's request found the last one acknowledged (the answer carried the ACK)
    // almost always, and went out ahead of the TCP's bookkeeping
    // (`Stack::send_lone_record`); a descheduled side may see a loss probe or a delayed
    // ACK in between, so not every time.
    for (side, ctx) in [("client", &client), ("server", &server)] {
        let at_post = sent_at_post(ctx);
        assert!(
            at_post >= ROUNDS / 4,
            "{side}: {at_post} of {ROUNDS} Writes sent ahead of the TCP's bookkeeping"
        );
    }
}

/// With cores on their own threads there is nothing to run: `progress_until` asks `done`
/// once and returns its answer.
#[test]
fn progress_until_without_caller_driven_cores_asks_done_once() {
    let (da, _db) = link_pair(&LinkConfig::default());
    let ctx = Context::open(Config::new(da, [10, 0, 0, 1])).unwrap();
    let mut asked = 0;
    assert!(!ctx.progress_until(100, || {
        asked += 1;
        false
    }));
    assert_eq!(asked, 1);
    assert!(ctx.progress_until(100, || true));
}
