//! A graceful close that cannot finish is bounded: the engine against a hand-driven peer
//! (a raw TCP stack) that keeps the connection alive (it acknowledges every segment and
//! answers every zero-window probe, so no TCP timer gives up) but never lets our send
//! queue drain.

mod common;

use std::sync::Arc;

use common::{all_access, ip, read_op, send_wr, write_op, PD, PORT};
use warpcore_engine::mem::{MrTable, Region};
use warpcore_engine::proto::mpa::negotiation::{self as nego, Responder};
use warpcore_engine::tcp::link::LinkEnd;
use warpcore_engine::tcp::smoltcp::socket::tcp::State as TcpState;
use warpcore_engine::tcp::smoltcp::time::{Duration, Instant};
use warpcore_engine::tcp::{ConnId, Stack, TcpTuning};
use warpcore_engine::{
    CmEvent, CompletionQueue, DisconnectCause, EngineConfig, EngineCore, MpaParams, QpId, WcStatus,
};

struct World {
    peer: Stack<LinkEnd>,
    engine: EngineCore<LinkEnd>,
    qp: QpId,
    /// The peer's side of the connection, once it accepted it.
    conn: Option<ConnId>,
    events: Vec<CmEvent>,
    now: Instant,
    cq: Arc<CompletionQueue>,
    mrs: Arc<MrTable>,
}

impl World {
    /// The engine (10.0.0.2) connected to the hand-driven peer (10.0.0.1) with `cfg`, the
    /// peer's MPA Reply sent by hand.
    fn new(cfg: EngineConfig) -> World {
        let mrs = Arc::new(MrTable::new(64));
        let (mut peer, mut engine) = common::hand_driven_pair(cfg, &mrs);
        let listener = peer.listen(PORT, 4, &TcpTuning::default()).unwrap();
        let cq = Arc::new(CompletionQueue::new(256).unwrap());
        let qp = engine.create_qp(common::qp_attr(&cq, 16, 1)).unwrap().0;
        let params = MpaParams {
            peer_to_peer: false,
            ..MpaParams::default()
        };
        engine.connect(qp, (ip(1), PORT), &params, b"").unwrap();
        let mut w = World {
            peer,
            engine,
            qp,
            conn: None,
            events: Vec::new(),
            now: Instant::ZERO,
            cq,
            mrs,
        };
        let mut tcp = None;
        let mut request = Vec::new();
        for _ in 0..5000 {
            w.step();
            if tcp.is_none() {
                tcp = w.peer.accept(listener).unwrap();
            }
            if let Some(c) = tcp {
                let _ = w.peer.recv_with(c, |d| {
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
        w.conn = Some(c);
        let mut r = Responder::new(nego::Config::default(), std::time::Instant::now()).unwrap();
        assert_eq!(r.handle_input(&request), request.len());
        assert!(matches!(r.poll_event(), Some(nego::Event::Request(_))));
        r.accept(b"").unwrap();
        let mut out = vec![0u8; 1024];
        let n = r.poll_transmit(&mut out);
        assert_eq!(w.peer.send(c, &out[..n]).unwrap(), n);
        for _ in 0..5000 {
            if w.events
                .iter()
                .any(|e| matches!(e, CmEvent::Established(_)))
            {
                return w;
            }
            w.step();
        }
        panic!("not established: {:?}", w.events);
    }

    fn tcp(&self) -> ConnId {
        self.conn.expect("connected")
    }

    /// Polls both sides once and moves the clock on by `dt`.
    fn step_by(&mut self, dt: Duration) {
        self.peer.poll(self.now);
        self.engine.poll(self.now);
        while let Some(e) = self.engine.next_event() {
            self.events.push(e);
        }
        while self.peer.next_event().is_some() {}
        self.now += dt;
    }

    fn step(&mut self) {
        self.step_by(Duration::from_micros(100));
    }

    /// A registered region of `len` octets.
    fn region(&self, len: usize) -> warpcore_engine::mem::Stag {
        let r = Arc::new(Region::allocate(len, 4096).unwrap());
        self.mrs.register(r, PD, all_access(), 0).unwrap()
    }

    /// Steps 1 ms at a time (the peer never reading when `!read`) until the engine reports
    /// the QP's end or `limit` passed; returns the end and when it came, counted from
    /// `from`.
    fn wait_end(
        &mut self,
        from: Instant,
        limit: Duration,
        read: bool,
    ) -> Option<(CmEvent, Duration)> {
        while self.now - from < limit {
            self.step_by(Duration::from_millis(1));
            if read {
                let _ = self.peer.recv_with(self.tcp(), |d| d.len());
            }
            let qp = self.qp;
            if let Some(e) = self.events.iter().find(|e| {
                matches!(e, CmEvent::Disconnected { qp: q, .. } | CmEvent::Error { qp: q, .. } if *q == qp)
            }) {
                return Some((e.clone(), self.now - from));
            }
        }
        None
    }

    fn completions(&self) -> Vec<(u64, WcStatus)> {
        let mut v = Vec::new();
        while let Some(c) = self.cq.pop() {
            v.push((c.wr_id, c.status));
        }
        v
    }
}

/// The engine's configuration in these tests: a graceful close that makes no progress
/// for 2 s is given up.
fn cfg() -> EngineConfig {
    EngineConfig {
        close_timeout_ms: 2_000,
        ..EngineConfig::default()
    }
}

/// What the peer sees once the engine gave the close up: the connection reset (RFC 9293
/// 3.10.7.x: an RST ends it), not a FIN.
fn peer_was_reset(w: &mut World) -> bool {
    for _ in 0..50 {
        w.step();
    }
    matches!(w.peer.state(w.tcp()), Err(_) | Ok(TcpState::Closed))
}

/// RFC 9293 3.8.6.1 lets a receiver hold its window at zero for as long as it answers the
/// probes, and RDMAP-06 §6 has a graceful close drain the send queue before the FIN: a
/// peer that stops reading thus held `disconnect` without bound (no TCP timer fires while
/// the probes are answered), the QP, its requests and their registered memory pinned and
/// no `Disconnected` ever reported; only `abort` ended it. The close is now given up after
/// `close_timeout_ms` without progress, as an abort: RST, everything outstanding flushed,
/// and `Disconnected { cause: CloseTimedOut }` (Linux's siw moves such a QP to ERROR; the
/// kernel's TCP bounds an orphaned close with `tcp_orphan_retries`).
///
/// Both ways the Writes can be queued: sent from registered memory (each waits in the send
/// queue for its acknowledgement, so no FIN goes out) and copied into TCP's send buffer
/// (the send queue drains at once, the FIN goes out behind the data and TCP waits in
/// FIN-WAIT-1 for good).
#[test]
fn a_disconnect_behind_a_zero_window_ends_within_the_close_timeout() {
    for from_memory_min in [512, usize::MAX] {
        zero_window_case(EngineConfig {
            tx_from_memory_min: from_memory_min,
            ..cfg()
        });
    }
}

/// Disconnects `w`'s QP and expects the close to be given up: `Disconnected {
/// CloseTimedOut }` within 2.0-2.2 s (`cfg`'s bound plus the sweep's 50 ms and a margin),
/// the peer reading everything meanwhile when `drain`.
fn disconnect_times_out(w: &mut World, drain: bool) {
    w.engine.disconnect(w.qp).unwrap();
    let from = w.now;
    let end = w.wait_end(from, Duration::from_secs(20), drain);
    let (ev, after) = end.unwrap_or_else(|| {
        panic!(
            "no end 20 s after disconnect (state {:?}): {:?}",
            w.engine.qp_state(w.qp),
            w.events
        )
    });
    assert_eq!(
        ev,
        CmEvent::Disconnected {
            qp: w.qp,
            cause: DisconnectCause::CloseTimedOut
        }
    );
    assert!(
        after >= Duration::from_millis(2_000) && after <= Duration::from_millis(2_200),
        "ended {after} after disconnect"
    );
}

fn zero_window_case(cfg: EngineConfig) {
    let from_memory = cfg.tx_from_memory_min < usize::MAX;
    let mut w = World::new(cfg);
    // 3 MiB of Writes: the peer's 1 MiB window takes a third, then shuts.
    let s = w.region(1 << 20);
    for k in 0..3 {
        w.engine
            .post_send(w.qp, send_wr(k, write_op(0x1234, 0), &[(s, 0, 1 << 20)]))
            .unwrap();
    }
    // Until the window is shut (the peer reads nothing from now on).
    for _ in 0..2000 {
        w.step();
    }
    disconnect_times_out(&mut w, false);
    // Every Write completes once. Sent from registered memory, those the peer's TCP never
    // acknowledged (its window shut after the first third) are flushed; copied, they were
    // done once TCP held them.
    let done = w.completions();
    assert_eq!(done.len(), 3, "{done:?}");
    assert_eq!(
        done.iter().any(|&(_, st)| st == WcStatus::FlushErr),
        from_memory,
        "{done:?}"
    );
    assert!(peer_was_reset(&mut w), "{:?}", w.peer.state(w.tcp()));
    assert_eq!(w.engine.stats().tcp_zombies, 0);
}

/// The same for a close held by the peer's silence at the RDMAP level: our Read's
/// Response never comes (the peer's TCP acknowledges the Read Request and reads
/// everything), so the send queue never drains and no FIN goes out (RDMAP-06 §6). The
/// close is given up after `close_timeout_ms`, the Read flushed.
#[test]
fn a_disconnect_held_by_an_unanswered_read_ends_within_the_close_timeout() {
    let mut w = World::new(cfg());
    let s = w.region(4096);
    w.engine
        .post_send(w.qp, send_wr(5, read_op(0x4321, 0), &[(s, 0, 100)]))
        .unwrap();
    for _ in 0..200 {
        w.step();
        let _ = w.peer.recv_with(w.tcp(), |d| d.len());
    }
    disconnect_times_out(&mut w, true);
    assert_eq!(w.completions(), vec![(5, WcStatus::FlushErr)]);
    assert!(peer_was_reset(&mut w), "{:?}", w.peer.state(w.tcp()));
}

/// A close that makes progress is not given up, however long it takes: the peer reads
/// slowly (a few KiB every 100 ms), so draining 3 MiB takes far longer than the close
/// timeout; the close ends gracefully, every Write successful.
#[test]
fn a_slow_but_progressing_close_is_not_given_up() {
    let mut w = World::new(EngineConfig {
        close_timeout_ms: 500,
        ..EngineConfig::default()
    });
    let s = w.region(1 << 20);
    for k in 0..3 {
        w.engine
            .post_send(w.qp, send_wr(k, write_op(0x1234, 0), &[(s, 0, 1 << 20)]))
            .unwrap();
    }
    for _ in 0..2000 {
        w.step();
    }
    w.engine.disconnect(w.qp).unwrap();
    let from = w.now;
    let mut closed = false;
    while w.now - from < Duration::from_secs(600) {
        for _ in 0..100 {
            w.step_by(Duration::from_millis(1));
        }
        let _ = w.peer.recv_with(w.tcp(), |d| d.len().min(32 * 1024));
        if !closed && w.peer.state(w.tcp()) == Ok(TcpState::CloseWait) {
            // Our FIN arrived after everything: the peer closes too.
            w.peer.close(w.tcp()).unwrap();
            closed = true;
        }
        if w.events
            .iter()
            .any(|e| matches!(e, CmEvent::Disconnected { .. } | CmEvent::Error { .. }))
        {
            break;
        }
    }
    let took = w.now - from;
    assert!(took > Duration::from_secs(5), "drained in {took}");
    assert!(
        w.events.contains(&CmEvent::Disconnected {
            qp: w.qp,
            cause: DisconnectCause::Closed
        }),
        "{:?}",
        w.events
    );
    let done = w.completions();
    assert_eq!(
        done,
        vec![
            (0, WcStatus::Success),
            (1, WcStatus::Success),
            (2, WcStatus::Success)
        ]
    );
}

/// A close stalled by a dead path (the peer silent: nothing of ours acknowledged, its
/// window open) is the retransmission timer's to carry through and the TCP user timeout's
/// to end, not the close bound's, which would cut the backoff short (a link flap during a
/// close reset the connection and flushed its requests after the bound, where a QP in
/// RTS survives the same outage). The peer silent for 8 s, four bounds: the close still
/// ends cleanly once it is back.
#[test]
fn a_close_stalled_by_a_dead_path_is_left_to_tcp() {
    let mut w = World::new(cfg());
    let s = w.region(64 * 1024);
    w.engine
        .post_send(w.qp, send_wr(1, write_op(0x1234, 0), &[(s, 0, 64 * 1024)]))
        .unwrap();
    w.engine.disconnect(w.qp).unwrap();
    // The path dies: the peer takes nothing (and sends nothing) for 8 s.
    let from = w.now;
    while w.now - from < Duration::from_secs(8) {
        w.engine.poll(w.now);
        while let Some(e) = w.engine.next_event() {
            w.events.push(e);
        }
        w.now += Duration::from_millis(1);
    }
    assert!(
        !w.events
            .iter()
            .any(|e| matches!(e, CmEvent::Disconnected { .. } | CmEvent::Error { .. })),
        "the close was given up while TCP retransmitted: {:?}",
        w.events
    );
    // Back: the peer reads everything and closes once our FIN came.
    let back = w.now;
    let mut closed = false;
    while w.now - back < Duration::from_secs(120) {
        w.step_by(Duration::from_millis(1));
        let _ = w.peer.recv_with(w.tcp(), |d| d.len());
        if !closed && w.peer.state(w.tcp()) == Ok(TcpState::CloseWait) {
            w.peer.close(w.tcp()).unwrap();
            closed = true;
        }
        if w.events
            .iter()
            .any(|e| matches!(e, CmEvent::Disconnected { .. } | CmEvent::Error { .. }))
        {
            break;
        }
    }
    assert!(
        w.events.contains(&CmEvent::Disconnected {
            qp: w.qp,
            cause: DisconnectCause::Closed
        }),
        "{:?}",
        w.events
    );
    assert_eq!(w.completions(), vec![(1, WcStatus::Success)]);
}

/// The same wait after the QP let its connection go: a QP destroyed during its graceful
/// close, once its FIN went out, leaves TCP to finish the close on its own (the
/// connection joins the zombies, released when TCP reports it closed). Behind a peer's
/// zero window that close never finished either: the connection, its 3 MiB of send
/// buffer and its slot were held for as long as the peer answered the probes (Linux bounds
/// such an orphaned close with `tcp_orphan_retries`). It is now reset once its send
/// buffer made no progress for `close_timeout_ms`.
#[test]
fn a_zombie_behind_a_zero_window_is_reset_within_the_close_timeout() {
    let mut w = World::new(EngineConfig {
        // Copied into the send buffer: the Writes complete, the FIN goes out at once.
        tx_from_memory_min: usize::MAX,
        ..cfg()
    });
    let s = w.region(1 << 20);
    for k in 0..3 {
        w.engine
            .post_send(w.qp, send_wr(k, write_op(0x1234, 0), &[(s, 0, 1 << 20)]))
            .unwrap();
    }
    for _ in 0..2000 {
        w.step();
    }
    w.engine.disconnect(w.qp).unwrap();
    for _ in 0..10 {
        w.step();
    }
    w.engine.destroy_qp(w.qp).unwrap();
    assert_eq!(w.engine.stats().tcp_zombies, 1);
    let from = w.now;
    let mut released = None;
    while w.now - from < Duration::from_secs(20) {
        w.step_by(Duration::from_millis(1));
        if w.engine.stats().tcp_zombies == 0 {
            released = Some(w.now - from);
            break;
        }
    }
    let after = released.expect("the zombie is still held 20 s after the destroy");
    assert!(
        after >= Duration::from_millis(2_000) && after <= Duration::from_millis(2_200),
        "released {after} after the destroy"
    );
    assert_eq!(w.engine.stack().live(), 0);
    assert!(peer_was_reset(&mut w), "{:?}", w.peer.state(w.tcp()));
}
