//! A fixed-work, single-threaded driver of two whole engines for profiling the cost per
//! message under callgrind (instruction counts do not depend on the load of a shared
//! machine; see `bench/README.md`):
//!
//! ```sh
//! cargo build --profile bench -p warpcore-bench --example engine_profile
//! valgrind --tool=callgrind target/release/examples/engine_profile write 64 20000
//! ```
//!
//! Two caller-driven contexts ([`Drive::Caller`]) joined by the in-memory link, one MPA
//! connection (Rev 2, CRC on), then `COUNT` messages of `SIZE` octets with up to `DEPTH`
//! (default 128) in flight, every completion taken: `write` (RDMA Write), `send`
//! (Send/Receive, receives re-posted), `read` (RDMA Read); `idle` runs `COUNT` loops of
//! both cores with nothing to do; `pingpong` runs `COUNT` round trips of iwperf's write_lat
//! (each side Writes `SIZE` octets into the other's region once it has seen the other's
//! Write arrive, by the tag in its last octet): the cost of a round trip on both sides, the
//! loops that carry it included. There the ACK delay is 1 ms (`MAX_ACK_DELAY`, the most the
//! engine takes) instead of the default 20 us, which callgrind's slowdown would outlast:
//! each answer carries the ACK of its request, as at full speed (the run prints the TCP
//! segments each side sent: one per round trip). One thread runs both engines in
//! turn, so nothing idles on a lock or a scheduler and the work per message is the same on
//! every run: the difference between two counts divided by the difference in messages is
//! the instructions per message of both sides together (poster, both engines, both TCP
//! stacks, completion handling), without the DPDK driver.

use std::time::Duration;

use warpcore_bench::or_exit;
use warpcore_verbs::*;

fn main() {
    // Malformed arguments stop the run (`warpcore_bench::Args`): a default in their place
    // would make compare.sh's two runs alike and their difference 0 instructions.
    let prog = "engine_profile";
    let mut args = warpcore_bench::Args::new(std::env::args().skip(1));
    let what = or_exit(
        prog,
        args.word("workload", &["write", "send", "read", "idle", "pingpong"]),
    );
    // pingpong's tag rides in the message's last octet: at least one.
    let min_size = u32::from(what == "pingpong");
    let size: u32 = or_exit(prog, args.num("SIZE", 64, min_size));
    let count: u64 = or_exit(prog, args.num("COUNT", 10_000, 0));
    let depth: u64 = or_exit(prog, args.num("DEPTH", 128, 1));
    or_exit(prog, args.finish());
    // WC_LOSS: the probability that the link loses a frame, each way (seeded, so a run
    // under callgrind loses the same frames; recovery timers still follow the clock).
    let mut link = LinkConfig::default();
    if let Some(p) = or_exit(prog, warpcore_bench::env::<f64>("WC_LOSS")) {
        if !(0.0..=1.0).contains(&p) {
            or_exit(prog, Err(format!("WC_LOSS={p} is not a probability")))
        }
        link.faults_ab.loss = p;
        link.faults_ba.loss = p;
    }
    let (da, db) = link_pair(&link);
    let mut cs = Config::new(db, [10, 0, 0, 2]);
    cs.drive = Drive::Caller;
    let mut cc = Config::new(da, [10, 0, 0, 1]);
    cc.drive = Drive::Caller;
    if what == "pingpong" {
        for c in [&mut cs, &mut cc] {
            c.engine.tcp.ack_delay = Some(MAX_ACK_DELAY);
        }
    }
    // WC_MAX_QPS: the QP table size (the pollers walk it every loop).
    if let Some(n) = or_exit(prog, warpcore_bench::env::<usize>("WC_MAX_QPS")) {
        for c in [&mut cs, &mut cc] {
            c.engine.max_qps = n;
            c.engine.max_pending_requests = c.engine.max_pending_requests.min(n);
        }
    }
    let server = Context::open(cs).expect("server engine");
    let client = Context::open(cc).expect("client engine");
    let both = || {
        let a = client.progress();
        let b = server.progress();
        a | b
    };
    let len = (size as usize).max(1) * depth as usize;
    let remote = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let spd = server.alloc_pd();
    let scq = server.create_cq(4096).expect("cq");
    let smr = spd.alloc_mr(len, remote).expect("mr");
    let mut si = QpInit::new(&scq, &scq);
    si.sq_depth = depth as u32 + 8;
    si.rq_depth = depth as u32 + 8;
    let sqp = spd.create_qp(&si).expect("qp");
    let recv = |k: u64| {
        let wr = RecvWr::new(k, &[smr.sge((k % depth) * u64::from(size), size)]).expect("wr");
        sqp.post_recv(&wr).expect("post_recv");
    };
    if what == "send" {
        (0..depth).for_each(recv);
    }
    server.listen(9000, &MpaParams::default()).expect("listen");
    let cpd = client.alloc_pd();
    let ccq = client.create_cq(4096).expect("cq");
    let cmr = cpd.alloc_mr(len, remote).expect("mr");
    let mut ci = QpInit::new(&ccq, &ccq);
    ci.sq_depth = depth as u32 + 8;
    let cqp = cpd.create_qp(&ci).expect("qp");
    cqp.connect([10, 0, 0, 2], 9000, &MpaParams::default(), b"")
        .expect("connect");
    let req = loop {
        both();
        if let Some(CmEvent::ConnectRequest(r)) = server.next_event(Duration::ZERO) {
            break r;
        }
    };
    server.accept(&req, &sqp, b"").expect("accept");
    loop {
        both();
        if let Some(CmEvent::Established(_)) = client.next_event(Duration::ZERO) {
            break;
        }
    }
    if what == "idle" {
        // The cost of an idle loop of both cores (a busy-polling thread's floor).
        for _ in 0..count {
            both();
        }
        println!("idle: {count} loops of both cores");
        return;
    }
    if what == "pingpong" {
        pingpong(
            &client,
            &server,
            [&cqp, &sqp],
            [&ccq, &scq],
            [&cmr, &smr],
            size,
            count,
        );
        let stats = |c: &Context| {
            c.stats()
                .expect("stats")
                .iter()
                .fold((0, 0), |(l, t), s| (l + s.loops, t + s.tcp_segments_sent))
        };
        let ((cl, ct), (sl, st)) = (stats(&client), stats(&server));
        println!(
            "pingpong {size} B: {count} round trips; loops {cl} + {sl}, TCP segments sent {ct} + {st}"
        );
        return;
    }
    let (mut posted, mut done, mut received) = (0u64, 0u64, 0u64);
    while done < count || (what == "send" && received < count) {
        // Sends also wait for the receiver's re-posted buffers (a Send without a posted
        // receive is fatal in iWARP).
        while posted < count
            && posted - done < depth
            && (what != "send" || posted < received + depth)
        {
            let off = (posted % depth) * u64::from(size);
            let op = match what.as_str() {
                "write" => SendOp::Write {
                    remote_stag: smr.stag(),
                    remote_to: off,
                },
                "read" => SendOp::Read {
                    remote_stag: smr.stag(),
                    remote_to: off,
                },
                _ => SendOp::Send,
            };
            let wr = SendWr::new(posted, op, &[cmr.sge(off, size)]).expect("wr");
            match cqp.post_send(&wr) {
                Ok(()) => posted += 1,
                Err(Error::QueueFull) => break,
                Err(e) => panic!("post_send: {e}"),
            }
        }
        both();
        while let Some(c) = ccq.poll_one() {
            assert_eq!(c.status, WcStatus::Success, "{c:?}");
            done += 1;
        }
        while let Some(c) = scq.poll_one() {
            assert_eq!(c.status, WcStatus::Success, "{c:?}");
            received += 1;
            if received + depth <= count {
                recv(received + depth - 1);
            }
        }
    }
    println!("{what} {size} B: {done} completed, {received} received");
}

/// `count` write_lat round trips of `size` octets: the client Writes into the server's
/// region, the server sees the tag in the last octet and Writes back, the client sees it.
/// Each side stages its message in the second `size` octets of its region and receives the
/// peer's in the first.
fn pingpong(
    client: &Context,
    server: &Context,
    [cqp, sqp]: [&QueuePair; 2],
    [ccq, scq]: [&CompletionQueue; 2],
    [cmr, smr]: [&MemoryRegion; 2],
    size: u32,
    count: u64,
) {
    let s = size.max(1) as usize;
    let both = || {
        client.progress();
        server.progress();
    };
    let write = |qp: &QueuePair, from: &MemoryRegion, to: &MemoryRegion, i: u64| {
        let tag = (i % 255) as u8 + 1;
        // Staged in the second slot; the peer's Writes land in the first.
        from.write(2 * s - 1, &[tag]).expect("stage");
        let op = SendOp::Write {
            remote_stag: to.stag(),
            remote_to: 0,
        };
        let wr = SendWr::new(i, op, &[from.sge(u64::from(size), size)]).expect("wr");
        qp.post_send(&wr).expect("post_send");
    };
    let arrived = |mr: &MemoryRegion, i: u64| {
        let mut b = [0u8; 1];
        mr.read(s - 1, &mut b).expect("read");
        b[0] == (i % 255) as u8 + 1
    };
    for i in 0..count {
        write(cqp, cmr, smr, i);
        while !arrived(smr, i) {
            both();
        }
        write(sqp, smr, cmr, i);
        while !arrived(cmr, i) {
            both();
        }
        while ccq.poll_one().is_some() || scq.poll_one().is_some() {}
    }
}
