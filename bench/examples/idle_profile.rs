//! The idle loop of two connected engines, counted under callgrind (see
//! `engine_profile.rs`, whose `idle` workload is the figure issue 12 judges):
//!
//! ```sh
//! cargo build --profile bench -p warpcore-bench --example idle_profile
//! valgrind --tool=callgrind target/release/examples/idle_profile held 20000
//! ```
//!
//! `progress` runs `COUNT` loops of both cores, one `Context::progress` call each (every
//! loop reads the clock: the application ran in between); `held` runs as many through
//! `Context::progress_until` (`COUNT` loops under one hold of each core, as a waiter that
//! spins on memory runs them, and as an engine thread spinning between loops: idle loops
//! that follow one another take the clock's last reading, seven in eight). A separate
//! program from `engine_profile`: a `progress_until` in its `main` changes what the
//! compiler inlines there, and so that program's counts.

use std::time::Duration;

use warpcore_bench::or_exit;
use warpcore_verbs::*;

fn main() {
    let prog = "idle_profile";
    let mut args = warpcore_bench::Args::new(std::env::args().skip(1));
    let what = or_exit(prog, args.word("workload", &["held", "progress"]));
    let count: u32 = or_exit(prog, args.num("COUNT", 10_000, 0));
    or_exit(prog, args.finish());
    let (da, db) = link_pair(&LinkConfig::default());
    let mut cs = Config::new(db, [10, 0, 0, 2]);
    cs.drive = Drive::Caller;
    let mut cc = Config::new(da, [10, 0, 0, 1]);
    cc.drive = Drive::Caller;
    let server = Context::open(cs).expect("server engine");
    let client = Context::open(cc).expect("client engine");
    let both = || client.progress() | server.progress();
    // One connection, as in engine_profile's idle workload.
    let spd = server.alloc_pd();
    let scq = server.create_cq(64).expect("cq");
    let sqp = spd.create_qp(&QpInit::new(&scq, &scq)).expect("qp");
    server.listen(9000, &MpaParams::default()).expect("listen");
    let cpd = client.alloc_pd();
    let ccq = client.create_cq(64).expect("cq");
    let cqp = cpd.create_qp(&QpInit::new(&ccq, &ccq)).expect("qp");
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
    // Let the handshake's last segments and timers settle.
    for _ in 0..1000 {
        both();
    }
    match what.as_str() {
        "progress" => {
            for _ in 0..count {
                both();
            }
        }
        "held" => {
            client.progress_until(count, || false);
            server.progress_until(count, || false);
        }
        other => panic!("unknown workload {other:?} (progress or held)"),
    }
    println!("{what}: {count} loops of both cores");
}
