//! A connection that carries nothing for minutes stays up: RDMA applications keep idle
//! queue pairs open for hours (a storage client between requests, an MPI rank between
//! phases). Found with iwperf against perftest: our side reset perftest's idle exchange
//! connection exactly 30 s after its last segment.

mod common;

use warpcore_engine::tcp::smoltcp::time::Duration;

use common::*;
use warpcore_engine::{CmEvent, SendOp, WcStatus};

/// Steps both cores until the simulated clock has moved on by `d`.
fn idle_for(p: &mut Pair, d: Duration) {
    let end = p.now + d;
    let mut steps = 0u64;
    while p.now < end {
        p.step();
        steps += 1;
        assert!(steps < 10_000_000, "the clock did not advance");
    }
}

#[test]
fn an_idle_connection_survives_ten_minutes_and_still_moves_data() {
    let mut p = Pair::default_pair();
    let (qa, qb) = p.connect();
    let (ra, sa) = p.a.region(4096, all_access());
    let (rb, sb) = p.b.region(4096, all_access());
    idle_for(&mut p, Duration::from_secs(600));
    let a_events = p.a.take_events();
    let b_events = p.b.take_events();
    let ended = |ev: &[CmEvent]| {
        ev.iter()
            .any(|e| matches!(e, CmEvent::Disconnected { .. } | CmEvent::Error { .. }))
    };
    assert!(
        !ended(&a_events),
        "A's connection ended while idle: {a_events:?}"
    );
    assert!(
        !ended(&b_events),
        "B's connection ended while idle: {b_events:?}"
    );
    // Still usable both ways.
    let data = pattern(1000, 9);
    ra.write_at(0, &data).unwrap();
    p.a.core
        .post_send(qa, send_wr(1, write_op(sb.0, 100), &[(sa, 0, 1000)]))
        .unwrap();
    p.b.core
        .post_recv(qb, recv_wr(2, &[(sb, 2000, 64)]))
        .unwrap();
    p.a.core
        .post_send(qa, send_wr(3, SendOp::Send, &[(sa, 0, 64)]))
        .unwrap();
    p.run_until(5000, |p| {
        p.a.completions.len() == 2 && p.b.completions.len() == 1
    });
    for c in
        p.a.take_completions()
            .into_iter()
            .chain(p.b.take_completions())
    {
        assert_eq!(c.status, WcStatus::Success, "{c:?}");
    }
    assert_eq!(read_region(&rb, 100, 1000), data);
    assert_eq!(read_region(&rb, 2000, 64), data[..64].to_vec());
}

/// A timeout without keep-alive probes shorter than it would reset every idle connection:
/// the configuration is refused, naming the field.
#[test]
fn a_timeout_without_shorter_keep_alive_is_refused() {
    use warpcore_engine::EngineConfig;
    let mut cfg = EngineConfig::default();
    cfg.tcp.keep_alive = None;
    assert_eq!(cfg.validate().unwrap_err().field, "tcp.keep_alive");
    cfg.tcp.keep_alive = cfg.tcp.timeout;
    assert_eq!(cfg.validate().unwrap_err().field, "tcp.keep_alive");
    cfg.tcp.timeout = None;
    assert!(cfg.validate().is_ok());
}

/// The sweep that visits every live QP whether or not anything marked it (the safety net
/// behind the ready sets) visits a core's 1,000 QPs in chunks of at most 256 a loop, spread
/// over its 50 ms, not all in one loop: a core with thousands of QPs (issue 11: 10,000)
/// would otherwise hold its busy QPs for a whole table's receive and transmit attempts
/// every 50 ms. Every QP is still visited once a pass.
#[test]
fn the_sweep_over_many_qps_is_spread_over_its_interval() {
    let mut p = Pair::default_pair();
    let n = 1000u64;
    for _ in 0..n {
        p.a.qp(4);
    }
    assert_eq!(p.a.core.stats().qps_live, n);
    let visits = |p: &Pair| p.a.core.stats().sweep_visits;
    let before = visits(&p);
    let (mut most, mut loops_sweeping) = (0, 0);
    // 200 ms of loops 100 us apart: passes begin at 50, 100 and 150 ms.
    let end = p.now + Duration::from_millis(200);
    while p.now < end {
        let v = visits(&p);
        p.a.core.poll(p.now);
        let d = visits(&p) - v;
        most = most.max(d);
        loops_sweeping += u64::from(d > 0);
        p.now += Duration::from_micros(100);
    }
    let total = visits(&p) - before;
    assert!(most <= 256, "one loop's sweep visited {most} QPs");
    assert!(
        (3 * n..=4 * n).contains(&total),
        "{total} visits in 200 ms: three whole passes over {n} QPs expected"
    );
    assert!(
        loops_sweeping >= 3 * n.div_ceil(256),
        "{loops_sweeping} loops swept"
    );
}
