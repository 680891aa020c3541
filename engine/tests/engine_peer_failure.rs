//! Peer failure under live connections: the link going silent past the TCP user
//! timeout with Writes, Sends and Reads outstanding on several QPs, and a peer that restarts
//! (same address and port; same or another MAC) under a live connection.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use common::*;
use warpcore_engine::mem::{MrTable, Region};
use warpcore_engine::proto::mpa::negotiation::{self as nego, Responder};
use warpcore_engine::tcp::link::{Faults, LinkConfig, LinkEnd};
use warpcore_engine::tcp::smoltcp::time::{Duration, Instant};
use warpcore_engine::tcp::{ConnId, ListenerId, Stack, TcpTuning};
use warpcore_engine::{
    CmEvent, CompletionQueue, DisconnectCause, EngineConfig, EngineCore, MpaParams, QpId, SendOp,
    WcStatus,
};

fn silence() -> Faults {
    Faults {
        loss: 1.0,
        ..Faults::default()
    }
}

/// `n` QPs of A connected to `n` of B over one listener.
fn connect_many(p: &mut Pair, n: usize, depth: u32) -> Vec<(QpId, QpId)> {
    p.b.core.listen(PORT, MpaParams::default()).expect("listen");
    let mut out = Vec::new();
    for _ in 0..n {
        let qa = p.a.qp(depth);
        let qb = p.b.qp(depth);
        p.a.core
            .connect(qa, (ip(2), PORT), &MpaParams::default(), b"")
            .expect("connect");
        let req = p.wait_request();
        p.b.core.accept(req.request, qb, b"", None).expect("accept");
        p.run_until_established();
        out.push((qa, qb));
    }
    out
}

/// Posts on each of A's QPs a 64 KiB Write, a 1 KiB Send, an 8 KiB Read and a 1 KiB
/// Write (wr_ids `qp_index * 10 + k`); B posts a receive for each Send. Returns the ids.
fn post_mixed(
    p: &mut Pair,
    qps: &[(QpId, QpId)],
    (sa, sb): (warpcore_engine::mem::Stag, warpcore_engine::mem::Stag),
) -> Vec<(QpId, u64)> {
    let mut ids = Vec::new();
    for (i, &(qa, qb)) in qps.iter().enumerate() {
        let base = (i as u64) * 10;
        let off = (i as u64) * 0x2_0000;
        p.b.core
            .post_recv(qb, recv_wr(base + 9, &[(sb, 0x10_0000 + off, 4096)]))
            .expect("recv");
        post_a(
            p,
            qa,
            base + 1,
            write_op(sb.0, off),
            &[(sa, off, 64 * 1024)],
        );
        post_a(p, qa, base + 2, SendOp::Send, &[(sa, off + 0x1_0000, 1024)]);
        post_a(
            p,
            qa,
            base + 3,
            read_op(sb.0, off + 0x1_0000),
            &[(sa, 0x10_0000 + off, 8192)],
        );
        post_a(
            p,
            qa,
            base + 4,
            write_op(sb.0, off + 0x1_8000),
            &[(sa, off + 0x1_8000, 1024)],
        );
        ids.extend((1..=4).map(|k| (qa, base + k)));
    }
    ids
}

/// Every id of `ids` completed exactly once in `done` (nothing else of A's there); returns
/// the statuses.
fn exactly_once(
    ids: &[(QpId, u64)],
    done: &[warpcore_engine::Completion],
) -> HashMap<(QpId, u64), WcStatus> {
    let mut seen = HashMap::new();
    for c in done {
        assert!(
            seen.insert((c.qp, c.wr_id), c.status).is_none(),
            "completed twice: {c:?}"
        );
    }
    for id in ids {
        assert!(seen.contains_key(id), "never completed: {id:?} of {done:?}");
    }
    assert_eq!(seen.len(), ids.len(), "{done:?}");
    seen
}

/// Case 1: the link goes silent both ways with Writes, Sends and Reads outstanding on three
/// QPs. With the default tuning (user timeout 30 s, docs/net.md `TcpTuning`) each QP of A
/// ends with `Disconnected { cause: TimedOut }` no sooner than the user timeout and not
/// long after it, and every posted request completes exactly once, flushed.
#[test]
fn a_silent_link_flushes_every_request_once_after_the_user_timeout() {
    let cfg = EngineConfig::default();
    let timeout = cfg.tcp.timeout.expect("a default user timeout");
    let mut p = Pair::new(&LinkConfig::default(), &cfg);
    let qps = connect_many(&mut p, 3, 16);
    let (_ra, sa) = p.a.region(1 << 21, all_access());
    let (_rb, sb) = p.b.region(1 << 21, all_access());
    // Some traffic first, so the connections have RTT samples.
    post_a(&mut p, qps[0].0, 100, write_op(sb.0, 0), &[(sa, 0, 4096)]);
    p.run_until(2000, |p| !p.a.completions.is_empty());
    p.a.take_completions();
    p.a.core.stack().device().set_tx_faults(silence()).unwrap();
    p.b.core.stack().device().set_tx_faults(silence()).unwrap();
    let start = p.now;
    let ids = post_mixed(&mut p, &qps, (sa, sb));
    let mut ended: HashMap<QpId, (DisconnectCause, Duration)> = HashMap::new();
    p.run_until(200_000, |p| {
        for e in p.a.take_events() {
            match e {
                CmEvent::Disconnected { qp, cause } => {
                    assert!(ended.insert(qp, (cause, p.now - start)).is_none(), "twice");
                }
                CmEvent::Error { qp, error } => panic!("{qp:?}: {error:?}"),
                _ => {}
            }
        }
        ended.len() == qps.len()
    });
    for (qp, (cause, after)) in &ended {
        assert_eq!(*cause, DisconnectCause::TimedOut, "{qp:?}");
        assert!(*after >= timeout, "{qp:?} ended after {after}");
        assert!(
            *after <= timeout + Duration::from_secs(2),
            "{qp:?} ended {after} after the silence, past the {timeout} user timeout"
        );
    }
    p.run(200);
    let done = p.a.take_completions();
    for (id, st) in exactly_once(&ids, &done) {
        assert_ne!(st, WcStatus::Success, "{id:?} succeeded over a silent link");
    }
}

/// A hand-driven peer stack (10.0.0.1) that can restart, and an engine (10.0.0.2).
struct Restart {
    peer: Option<Stack<LinkEnd>>,
    listener: ListenerId,
    engine: EngineCore<LinkEnd>,
    now: Instant,
    events: Vec<CmEvent>,
    cq: Arc<CompletionQueue>,
    mrs: Arc<MrTable>,
}

impl Restart {
    fn new() -> Restart {
        let mrs = Arc::new(MrTable::new(64));
        let (mut peer, engine) = hand_driven_pair(EngineConfig::default(), &mrs);
        let listener = peer.listen(PORT, 4, &TcpTuning::default()).unwrap();
        Restart {
            peer: Some(peer),
            listener,
            engine,
            now: Instant::ZERO,
            events: Vec::new(),
            cq: Arc::new(CompletionQueue::new(256).unwrap()),
            mrs,
        }
    }

    fn peer(&mut self) -> &mut Stack<LinkEnd> {
        self.peer.as_mut().unwrap()
    }

    fn step(&mut self) {
        let now = self.now;
        self.peer().poll(now);
        self.engine.poll(now);
        while let Some(e) = self.engine.next_event() {
            self.events.push(e);
        }
        while self.peer().next_event().is_some() {}
        self.now += Duration::from_micros(100);
    }

    /// The engine connects `qp` from `local_port`; the peer answers by hand. Returns the
    /// peer's side of the connection once the engine reported `Established`.
    fn establish(&mut self, qp: QpId, local_port: u16) -> ConnId {
        let params = MpaParams {
            peer_to_peer: false,
            ..MpaParams::default()
        };
        self.engine
            .connect_from(qp, (ip(1), PORT), Some(local_port), &params, b"")
            .unwrap();
        let mut tcp = None;
        let mut request = Vec::new();
        for _ in 0..50_000 {
            self.step();
            if tcp.is_none() {
                let l = self.listener;
                tcp = self.peer().accept(l).unwrap();
            }
            if let Some(c) = tcp {
                let _ = self.peer().recv_with(c, |d| {
                    request.extend_from_slice(d);
                    d.len()
                });
                if request.len() >= 20
                    && request.len() >= 20 + u16::from_be_bytes([request[18], request[19]]) as usize
                {
                    break;
                }
            }
        }
        let c = tcp.expect("the engine's connection reached the peer");
        let mut r = Responder::new(nego::Config::default(), std::time::Instant::now()).unwrap();
        assert_eq!(r.handle_input(&request), request.len());
        assert!(matches!(r.poll_event(), Some(nego::Event::Request(_))));
        r.accept(b"").unwrap();
        let mut out = vec![0u8; 1024];
        let n = r.poll_transmit(&mut out);
        assert_eq!(self.peer().send(c, &out[..n]).unwrap(), n);
        for _ in 0..50_000 {
            if self
                .events
                .iter()
                .any(|e| matches!(e, CmEvent::Established(x) if x.qp == qp))
            {
                return c;
            }
            self.step();
        }
        panic!("not established: {:?}", self.events);
    }

    /// The peer restarts: a fresh stack at the same address (MAC `mac`) on the same wire,
    /// listening on the same port, knowing nothing of the old connection.
    fn restart(&mut self, mac: [u8; 6]) {
        let dev = self.peer.take().unwrap().into_device();
        let mut sc = stack_config(1, 16);
        sc.mac = mac;
        sc.random_seed ^= 0x5eed;
        let mut s = Stack::new(dev, &sc, self.now).unwrap();
        self.listener = s.listen(PORT, 4, &TcpTuning::default()).unwrap();
        self.peer = Some(s);
    }

    fn qp(&mut self) -> QpId {
        self.engine.create_qp(qp_attr(&self.cq, 8, 1)).unwrap().0
    }

    /// The engine sends `n` octets on `qp` (wr_id 7).
    fn send(&mut self, qp: QpId, n: u32) {
        let r = Arc::new(Region::allocate(4096, 4096).unwrap());
        let s = self.mrs.register(r, PD, all_access(), 0).unwrap();
        self.engine
            .post_send(qp, send_wr(7, SendOp::Send, &[(s, 0, n)]))
            .unwrap();
    }
}

/// Case 2 and 4: the peer restarts (same address and port, MAC `mac`) under a live
/// connection; the engine's next segment draws the fresh stack's RST (RFC 9293 3.10.7.1,
/// 3.5.2), which must end the QP at once, its Send flushed once, not after the 30 s user
/// timeout; a new connect to the restarted peer from the same local port then succeeds.
fn restart_case(mac: [u8; 6], within: Duration) {
    let mut w = Restart::new();
    let qp = w.qp();
    let _old = w.establish(qp, 40_000);
    w.restart(mac);
    w.send(qp, 512);
    let start = w.now;
    let mut cause = None;
    for _ in 0..400_000 {
        w.step();
        cause = w.events.iter().find_map(|e| match e {
            CmEvent::Disconnected { qp: q, cause } if *q == qp => Some(*cause),
            _ => None,
        });
        if cause.is_some() {
            break;
        }
    }
    let after = w.now - start;
    assert_eq!(cause, Some(DisconnectCause::Reset), "{:?}", w.events);
    assert!(after < within, "reset only after {after}");
    for _ in 0..100 {
        w.step();
    }
    let mut done = Vec::new();
    while let Some(c) = w.cq.pop() {
        done.push(c);
    }
    assert_eq!(done.len(), 1, "{done:?}");
    assert_eq!((done[0].wr_id, done[0].status), (7, WcStatus::FlushErr));
    // A new connection to the restarted peer, from the same local port (same 4-tuple).
    let qp2 = w.qp();
    w.events.clear();
    let c = w.establish(qp2, 40_000);
    w.send(qp2, 100);
    let mut got = 0;
    for _ in 0..20_000 {
        w.step();
        got += w.peer().recv_with(c, |d| d.len()).unwrap();
        if got >= 100 {
            break;
        }
    }
    assert!(got >= 100, "no data on the new connection ({got})");
}

#[test]
fn a_restarted_peer_resets_the_old_qp_at_once_and_takes_a_new_connection() {
    restart_case([2, 0, 0, 0, 0, 1], Duration::from_secs(2));
}

/// Case 4: the peer restarts on another NIC (new MAC): the engine learns the new MAC from
/// the restarted peer's ARP (RFC 826 merge), and traffic to it resumes.
#[test]
fn a_peer_restarted_on_another_mac_is_reached_again() {
    restart_case([2, 0, 0, 0, 0, 0x41], Duration::from_secs(10));
}
