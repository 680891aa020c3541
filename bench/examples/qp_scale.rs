//! Many queue pairs on one engine core (issue 11 item 5): memory per idle connected QP and
//! the 64 B Write rate spread over 1, 16, 1,024, ... QPs, two whole engines driven by one
//! thread over the in-memory link (no DPDK, so it runs anywhere and under callgrind).
//!
//! ```sh
//! cargo run --release -p warpcore-bench --example qp_scale -- 10000 1,16,1024,10000 200000
//! ```
//!
//! Arguments: QPS (connections to open, default 1024), the active-QP counts to measure
//! (comma-separated, each at most QPS), and MESSAGES per measurement. It prints:
//! - `memory: N idle connected QPs, R KiB RSS growth, P bytes per QP (both sides)`: the
//!   resident set before the first connection and after the last, divided by N; both ends
//!   of every connection live in this process, so one QP's share is half of it, printed too;
//! - one line per active count: messages per second of wall-clock time (both engines and
//!   the poster share the thread) and the ratio to the first count's rate (the one-QP
//!   rate when the list starts at 1).
//!
//! `WC_TCP=reference` runs smoltcp's reference TCP instead of Warpcore's.

use std::time::{Duration, Instant};

use warpcore_bench::or_exit;
use warpcore_verbs::*;

fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn main() {
    // Malformed arguments stop the run: an active count that did not parse was dropped
    // from the list without a word, and a QPS that did not parse was 1,024.
    let prog = "qp_scale";
    let mut args = warpcore_bench::Args::new(std::env::args().skip(1));
    let qps: usize = or_exit(prog, args.num("QPS", 1024, 1));
    let actives: Vec<usize> = or_exit(prog, args.list("ACTIVE", "1,16,1024", 1, qps));
    let messages: u64 = or_exit(prog, args.num("MESSAGES", 200_000, 1));
    or_exit(prog, args.finish());
    let (da, db) = link_pair(&LinkConfig::default());
    let mut cs = Config::new(db, [10, 0, 0, 2]);
    let mut cc = Config::new(da, [10, 0, 0, 1]);
    for c in [&mut cs, &mut cc] {
        c.drive = Drive::Caller;
        c.engine.max_qps = qps;
        c.engine.max_connections = qps + 64;
        if std::env::var("WC_TCP").as_deref() == Ok("reference") {
            c.engine.tcp_implementation = warpcore_tcp::TcpImplementation::SmoltcpReference;
        }
    }
    let server = Context::open(cs).expect("server engine");
    let client = Context::open(cc).expect("client engine");
    let both = || {
        let a = client.progress();
        let b = server.progress();
        a | b
    };
    let depth = 16u32;
    let size = 64u32;
    let remote = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let spd = server.alloc_pd();
    let scq = server.create_cq(8192).expect("cq");
    let smr = spd.alloc_mr(4096, remote).expect("mr");
    let cpd = client.alloc_pd();
    let ccq = client.create_cq(8192).expect("cq");
    let cmr = cpd.alloc_mr(4096, remote).expect("mr");
    server.listen(9000, &MpaParams::default()).expect("listen");
    let rss0 = rss_kib();
    let mut cqps = Vec::with_capacity(qps);
    let mut sqps = Vec::with_capacity(qps);
    let t0 = Instant::now();
    for _ in 0..qps {
        let mut si = QpInit::new(&scq, &scq);
        si.sq_depth = depth;
        si.rq_depth = 1;
        let sqp = spd.create_qp(&si).expect("server qp");
        let mut ci = QpInit::new(&ccq, &ccq);
        ci.sq_depth = depth;
        ci.rq_depth = 1;
        let cqp = cpd.create_qp(&ci).expect("client qp");
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
            match client.next_event(Duration::ZERO) {
                Some(CmEvent::Established(_)) => break,
                Some(e) => panic!("connect: {e:?}"),
                None => {}
            }
        }
        cqps.push(cqp);
        sqps.push(sqp);
    }
    // Let the last handshakes' ACKs and window updates settle.
    for _ in 0..1000 {
        both();
    }
    let rss1 = rss_kib();
    let per_qp = (rss1.saturating_sub(rss0)) * 1024 / qps as u64;
    println!(
        "memory: {qps} idle connected QPs in {:.1} s, {} KiB RSS growth, {per_qp} bytes per QP \
         pair (both ends), {} bytes per QP",
        t0.elapsed().as_secs_f64(),
        rss1.saturating_sub(rss0),
        per_qp / 2
    );
    let mut base = None;
    for &active in &actives {
        let (mut posted, mut done) = (0u64, 0u64);
        let mut inflight = vec![0u32; active];
        // The completion queue (8,192 entries) must hold every Write in flight: fewer per QP
        // when many are active (an overrun would fail the QPs, as it must).
        let depth = depth.min((8000 / active as u32).max(1));
        let start = Instant::now();
        while done < messages {
            for (k, qp) in cqps.iter().take(active).enumerate() {
                while inflight[k] < depth && posted < messages {
                    let wr = SendWr::new(
                        k as u64,
                        SendOp::Write {
                            remote_stag: smr.stag(),
                            remote_to: 0,
                        },
                        &[cmr.sge(0, size)],
                    )
                    .expect("wr");
                    match qp.post_send(&wr) {
                        Ok(()) => {
                            posted += 1;
                            inflight[k] += 1;
                        }
                        Err(Error::QueueFull) => break,
                        Err(e) => panic!("post_send: {e}"),
                    }
                }
            }
            both();
            while let Some(c) = ccq.poll_one() {
                assert_eq!(c.status, WcStatus::Success, "{c:?}");
                inflight[c.wr_id as usize] -= 1;
                done += 1;
            }
        }
        let rate = messages as f64 / start.elapsed().as_secs_f64();
        // The ratio is to the first count's rate, which is the one-QP rate only when the
        // list starts at 1: the line says which.
        let (first, b) = *base.get_or_insert((active, rate));
        println!(
            "rate: {active} active QPs: {:.3} M msgs/s, {:.2}x the {first}-QP rate",
            rate / 1e6,
            rate / b
        );
    }
}
