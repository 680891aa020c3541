//! Two engine cores joined by the in-memory link, stepped alternately with a simulated
//! clock (no threads): the deterministic harness of the engine tests.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Instant as StdInstant;

use warpcore_engine::mem::{Access, MrTable, PdId, Region, Stag};
use warpcore_engine::proto::TerminateReport;
use warpcore_engine::tcp::link::{self, LinkConfig, LinkEnd};
use warpcore_engine::tcp::smoltcp::time::{Duration, Instant};
use warpcore_engine::tcp::smoltcp::wire::{Ipv4Address, Ipv4Cidr};
use warpcore_engine::tcp::StackConfig;
use warpcore_engine::{
    CmEvent, Completion, CompletionQueue, ConnError, ConnectRequest, EngineConfig, EngineCore,
    MpaParams, QpAttr, QpId, QpShared, RecvWr, SendOp, SendWr, Sge, SgeList,
};

pub const PD: PdId = PdId(1);
pub const PORT: u16 = 4791;

pub fn ip(n: u8) -> Ipv4Address {
    Ipv4Address::new(10, 0, 0, n)
}

/// The stack configuration of host `n` (10.0.0.n/24, MAC 02:00:00:00:00:n) with room for
/// `max_connections`.
pub fn stack_config(n: u8, max_connections: usize) -> StackConfig {
    StackConfig {
        mac: [2, 0, 0, 0, 0, n],
        ip: Ipv4Cidr::new(ip(n), 24),
        gateway: None,
        routes: Vec::new(),
        random_seed: u64::from(n) * 7919,
        max_connections,
        out_of_order_budget_bytes: warpcore_engine::tcp::OUT_OF_ORDER_BUDGET_DEFAULT,
    }
}

/// A link that loses `loss` of the frames each way, seeded `seed_ab` and `seed_ba`.
pub fn lossy_link(loss: f64, (seed_ab, seed_ba): (u64, u64)) -> LinkConfig {
    let lossy = |seed| link::Faults {
        seed,
        loss,
        ..link::Faults::default()
    };
    LinkConfig {
        faults_ab: lossy(seed_ab),
        faults_ba: lossy(seed_ba),
        ..LinkConfig::default()
    }
}

/// QP attributes in the tests' PD, sends and receives completing into `cq`, `depth` of
/// each, `max_sge` SGEs.
/// A hand-driven TCP peer (10.0.0.1) and an engine core (10.0.0.2, core index 1) over the
/// in-memory link, each stack of 16 connections, the core with `cfg` and `mrs`: the
/// harness of the tests that play the engine's peer octet by octet.
pub fn hand_driven_pair(
    cfg: EngineConfig,
    mrs: &Arc<MrTable>,
) -> (warpcore_engine::tcp::Stack<LinkEnd>, EngineCore<LinkEnd>) {
    let (ea, eb) = link::pair(&LinkConfig::default());
    let peer = warpcore_engine::tcp::Stack::new(ea, &stack_config(1, 16), Instant::ZERO)
        .expect("the peer's stack");
    let engine = EngineCore::new(
        1,
        eb,
        &stack_config(2, 16),
        cfg,
        Arc::clone(mrs),
        StdInstant::now(),
        Instant::ZERO,
    )
    .expect("core");
    (peer, engine)
}

pub fn qp_attr(cq: &Arc<CompletionQueue>, depth: u32, max_sge: u32) -> QpAttr {
    QpAttr {
        pd: PD,
        send_cq: Arc::clone(cq),
        recv_cq: Arc::clone(cq),
        sq_depth: depth,
        rq_depth: depth,
        max_sge,
    }
}

pub struct Side {
    pub core: EngineCore<LinkEnd>,
    pub mrs: Arc<MrTable>,
    pub cq: Arc<CompletionQueue>,
    pub events: Vec<CmEvent>,
    pub completions: Vec<Completion>,
    /// Leaves the core's events in its queue (an application that reads none for a
    /// while); `Pair::step` takes them otherwise.
    pub hold_events: bool,
}

impl Side {
    fn new(n: u8, end: LinkEnd, cfg: &EngineConfig, base: StdInstant) -> Side {
        let mrs = Arc::new(MrTable::new(cfg.mr_table_capacity));
        let sc = stack_config(n, cfg.max_connections);
        let core = EngineCore::new(
            u16::from(n) - 1,
            end,
            &sc,
            cfg.clone(),
            Arc::clone(&mrs),
            base,
            Instant::ZERO,
        )
        .expect("core");
        Side {
            core,
            mrs,
            cq: Arc::new(CompletionQueue::new(4096).unwrap()),
            events: Vec::new(),
            completions: Vec::new(),
            hold_events: false,
        }
    }

    pub fn qp(&mut self, depth: u32) -> QpId {
        self.qp_shared(depth).0
    }

    /// The same QP with its shared state (to turn RFC 7306 on or off, attach a shared
    /// receive queue).
    pub fn qp_shared(&mut self, depth: u32) -> (QpId, Arc<QpShared>) {
        self.core
            .create_qp(qp_attr(&self.cq, depth, 4))
            .expect("qp")
    }

    /// Registers `len` zeroed octets with `access`; returns the region and its STag.
    pub fn region(&self, len: usize, access: Access) -> (Arc<Region>, Stag) {
        let r = Arc::new(Region::allocate(len, 4096).expect("alloc"));
        let s = self
            .mrs
            .register(Arc::clone(&r), PD, access, 0)
            .expect("register");
        (r, s)
    }

    fn drain(&mut self) {
        while !self.hold_events {
            let Some(e) = self.core.next_event() else {
                break;
            };
            self.events.push(e);
        }
        while let Some(c) = self.cq.pop() {
            self.completions.push(c);
        }
    }

    pub fn take_events(&mut self) -> Vec<CmEvent> {
        std::mem::take(&mut self.events)
    }

    pub fn take_completions(&mut self) -> Vec<Completion> {
        std::mem::take(&mut self.completions)
    }
}

pub struct Pair {
    pub a: Side,
    pub b: Side,
    pub now: Instant,
}

pub fn all_access() -> Access {
    Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE
}

impl Pair {
    pub fn new(link_cfg: &LinkConfig, cfg: &EngineConfig) -> Pair {
        Pair::with_configs(link_cfg, cfg, cfg)
    }

    /// A pair whose two cores are configured apart (`cfg_a` for A, `cfg_b` for B).
    pub fn with_configs(link_cfg: &LinkConfig, cfg_a: &EngineConfig, cfg_b: &EngineConfig) -> Pair {
        let (ea, eb) = link::pair(link_cfg);
        let base = StdInstant::now();
        Pair {
            a: Side::new(1, ea, cfg_a, base),
            b: Side::new(2, eb, cfg_b, base),
            now: Instant::ZERO,
        }
    }

    pub fn default_pair() -> Pair {
        Pair::new(&LinkConfig::default(), &EngineConfig::default())
    }

    /// One loop of both cores. When neither did work the simulated clock jumps to the next
    /// thing due (a frame on the link, a TCP timer), at least 10 µs and at most 50 ms on.
    pub fn step(&mut self) -> bool {
        let wa = self.a.core.poll(self.now);
        let wb = self.b.core.poll(self.now);
        self.a.drain();
        self.b.drain();
        if !(wa || wb) {
            let mut next = self.now + Duration::from_millis(50);
            for t in [
                self.a.core.poll_at(),
                self.b.core.poll_at(),
                self.a.core.stack().device().next_delivery(),
                self.b.core.stack().device().next_delivery(),
            ]
            .into_iter()
            .flatten()
            {
                next = next.min(t);
            }
            self.now = next.max(self.now + Duration::from_micros(10));
        }
        wa || wb
    }

    /// Steps until `done` holds; panics after `max` steps.
    pub fn run_until(&mut self, max: usize, mut done: impl FnMut(&mut Pair) -> bool) {
        for _ in 0..max {
            if done(self) {
                return;
            }
            self.step();
        }
        panic!("condition not reached after {max} steps");
    }

    /// Steps (at most `max` times) until both sides reported an error; returns the events
    /// of A and of B, taken.
    pub fn run_until_both_fail(&mut self, max: usize) -> (Vec<CmEvent>, Vec<CmEvent>) {
        let failed = |ev: &[CmEvent]| ev.iter().any(|e| matches!(e, CmEvent::Error { .. }));
        self.run_until(max, |p| failed(&p.a.events) && failed(&p.b.events));
        (self.a.take_events(), self.b.take_events())
    }

    /// Polls A alone `n` times, 10 µs apart: B neither receives nor acknowledges.
    pub fn run_a_alone(&mut self, n: usize) {
        for _ in 0..n {
            self.a.core.poll(self.now);
            self.a.drain();
            self.now += Duration::from_micros(10);
        }
    }

    /// Steps `n` times.
    pub fn run(&mut self, n: usize) {
        for _ in 0..n {
            self.step();
        }
    }

    /// Steps until B has a connection request (taking B's events); returns it.
    pub fn wait_request(&mut self) -> ConnectRequest {
        let mut req = None;
        self.run_until(2000, |p| {
            for e in p.b.take_events() {
                if let CmEvent::ConnectRequest(r) = e {
                    req = Some(r);
                }
            }
            req.is_some()
        });
        req.expect("request")
    }

    /// Listens on B, connects A to it with `params` on both sides, accepts; returns the two
    /// QPs in RTS.
    pub fn connect_with(&mut self, pa: &MpaParams, pb: &MpaParams, depth: u32) -> (QpId, QpId) {
        let qa = self.a.qp(depth);
        let qb = self.b.qp(depth);
        self.b.core.listen(PORT, pb.clone()).expect("listen");
        self.a
            .core
            .connect(qa, (ip(2), PORT), pa, b"hello from a")
            .expect("connect");
        let req = self.wait_request();
        assert_eq!(req.private_data, b"hello from a");
        self.b
            .core
            .accept(req.request, qb, b"hello from b", None)
            .expect("accept");
        let mut est = (false, false);
        self.run_until(2000, |p| {
            for e in p.a.take_events() {
                if let CmEvent::Established(x) = e {
                    assert_eq!(x.private_data, b"hello from b");
                    est.0 = true;
                }
            }
            for e in p.b.take_events() {
                if let CmEvent::Established(_) = e {
                    est.1 = true;
                }
            }
            est.0 && est.1
        });
        (qa, qb)
    }

    /// Steps until both sides reported `Established` (their other events are dropped).
    pub fn run_until_established(&mut self) {
        let mut up = (false, false);
        self.run_until(2000, |p| {
            up.0 |=
                p.a.take_events()
                    .iter()
                    .any(|e| matches!(e, CmEvent::Established(_)));
            up.1 |=
                p.b.take_events()
                    .iter()
                    .any(|e| matches!(e, CmEvent::Established(_)));
            up.0 && up.1
        });
    }

    pub fn connect(&mut self) -> (QpId, QpId) {
        self.connect_with(&MpaParams::default(), &MpaParams::default(), 64)
    }

    /// A's QP (send queue `depth`) connected to B's; returns it with its shared state, for
    /// a request checked by `validate_send` apart from its post (as an application thread
    /// does).
    pub fn connect_shared(&mut self, depth: u32) -> (QpId, Arc<QpShared>) {
        let (qa, shared) = self.a.qp_shared(depth);
        let qb = self.b.qp(depth);
        self.b.core.listen(PORT, MpaParams::default()).unwrap();
        self.a
            .core
            .connect(qa, (ip(2), PORT), &MpaParams::default(), b"")
            .unwrap();
        let req = self.wait_request();
        self.b.core.accept(req.request, qb, b"", None).unwrap();
        self.run_until_established();
        (qa, shared)
    }

    /// Steps (at most `max` times) until both sides saw `Disconnected`; returns whether
    /// each was abortive (a reset or a timeout), A's then B's.
    pub fn run_until_disconnected(&mut self, max: usize) -> (bool, bool) {
        let reset = |ev: Vec<CmEvent>| {
            ev.into_iter().find_map(|e| match e {
                CmEvent::Disconnected { cause, .. } => Some(cause.is_abortive()),
                _ => None,
            })
        };
        let (mut da, mut db) = (None, None);
        self.run_until(max, |p| {
            da = da.or_else(|| reset(p.a.take_events()));
            db = db.or_else(|| reset(p.b.take_events()));
            da.is_some() && db.is_some()
        });
        (da.unwrap_or_default(), db.unwrap_or_default())
    }
}

pub fn sges(list: &[(Stag, u64, u32)]) -> SgeList {
    let v: Vec<Sge> = list
        .iter()
        .map(|&(s, to, len)| Sge { stag: s.0, to, len })
        .collect();
    SgeList::from_slice(&v).expect("sges")
}

pub fn send_wr(wr_id: u64, op: SendOp, list: &[(Stag, u64, u32)]) -> SendWr {
    SendWr {
        wr_id,
        op,
        sges: sges(list),
        signaled: true,
        fence: false,
    }
}

/// A Write to `remote_to` of the STag `remote_stag`.
pub fn write_op(remote_stag: u32, remote_to: u64) -> SendOp {
    SendOp::Write {
        remote_stag,
        remote_to,
    }
}

/// A Read from `remote_to` of the STag `remote_stag`.
pub fn read_op(remote_stag: u32, remote_to: u64) -> SendOp {
    SendOp::Read {
        remote_stag,
        remote_to,
    }
}

/// Posts a signalled request with `list` on A's `qa`.
pub fn post_a(p: &mut Pair, qa: QpId, wr_id: u64, op: SendOp, list: &[(Stag, u64, u32)]) {
    p.a.core.post_send(qa, send_wr(wr_id, op, list)).unwrap();
}

pub fn recv_wr(wr_id: u64, list: &[(Stag, u64, u32)]) -> RecvWr {
    RecvWr {
        wr_id,
        sges: sges(list),
    }
}

/// Each item's `Debug` form, for comparing the outcomes of two runs (the fast-path tests).
pub fn dbg<T: std::fmt::Debug>(v: &[T]) -> Vec<String> {
    v.iter().map(|x| format!("{x:?}")).collect()
}

pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// The Terminate from the peer that the first error among `events` reports; panics with
/// the events if that error is another one.
pub fn received_terminate(events: &[CmEvent]) -> &TerminateReport {
    let Some(CmEvent::Error {
        error: ConnError::RemoteTerminate(rep),
        ..
    }) = events.iter().find(|e| matches!(e, CmEvent::Error { .. }))
    else {
        panic!("{events:?}")
    };
    rep
}

pub fn read_region(r: &Region, off: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    r.read_at(off, &mut v).expect("read_at");
    v
}
