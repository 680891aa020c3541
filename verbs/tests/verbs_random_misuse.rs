//! A local user's mistakes at random: a seeded workload of verbs calls on context A with
//! arguments drawn to be wrong as often as right (STags stale, foreign or made up;
//! offsets and lengths at, past and far past a region's end; every access combination;
//! every send operation, raw window binds and fast registrations among them; queue,
//! SGE and inline limits crossed; regions deregistered under posted requests; queue pairs
//! aborted and disconnected) against a well-behaved peer B over the in-memory link, both
//! contexts caller-driven on the test's thread. The house rule under test: bad input from
//! a local user gets a typed error or an error completion, never a panic (the test is
//! built with overflow checks and debug assertions), and never a write outside what the
//! user granted. Checked throughout:
//! * B's guard region (local write only) and A's regions without local write keep every
//!   octet they were given (a Read into a region without local write, a Write to a
//!   region without remote write, must be refused before placement);
//! * every completion A gets names a work request A posted;
//! * when A's queue pair leaves RTS, both sides' queue pairs are replaced and connected
//!   again (the contexts keep serving: a new connection each time);
//!
//! and at the end a fresh connection still moves a verified Write and a verified Send.

mod common;

use std::collections::HashSet;

use common::{caller_contexts, connect_accept_driven, pattern};
use warpcore_verbs::*;

const STEPS: usize = 5000;
const SEEDS: u64 = 32;
const B_RECV_SLOTS: usize = 16;
const B_RECV_SLOT: usize = 512;

/// The link's seeded generator, with the choices this workload makes.
struct Rng(warpcore_engine::tcp::rng::Rng);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0.next_u64()
    }
    fn below(&mut self, n: usize) -> usize {
        self.0.below(n as u64) as usize
    }
    fn chance(&mut self, pct: u64) -> bool {
        self.0.below(100) < pct
    }
    fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[self.below(v.len())]
    }
    /// One of `v`, or (as often as each) any value.
    fn pick_or_any(&mut self, v: &[u64]) -> u64 {
        match self.below(v.len() + 1) {
            i if i < v.len() => v[i],
            _ => self.next(),
        }
    }
}

/// One of A's regions and what it must still hold when A may not write it.
struct ARegion {
    mr: MemoryRegion,
    /// The contents given at registration, for a region without local write.
    frozen: Option<Vec<u8>>,
}

struct World {
    a: Context,
    b: Context,
    a_pd: ProtectionDomain,
    a_cq: CompletionQueue,
    b_pd: ProtectionDomain,
    b_cq: CompletionQueue,
    a_qp: QueuePair,
    b_qp: QueuePair,
    /// B's regions: local write only (never written by the peer), everything, receives.
    guard: MemoryRegion,
    guard_bytes: Vec<u8>,
    target: MemoryRegion,
    recv: MemoryRegion,
    a_mrs: Vec<ARegion>,
    mws: Vec<MemoryWindow>,
    frs: Vec<FastRegMr>,
    /// Work request ids A posted (its completions must name one).
    posted: HashSet<u64>,
    next_wr: u64,
    port: u16,
    reconnects: usize,
    refused: usize,
    error_completions: usize,
    ok_completions: usize,
}

fn any_access(rng: &mut Rng) -> Access {
    let bits = [
        Access::LOCAL_WRITE,
        Access::REMOTE_READ,
        Access::REMOTE_WRITE,
        Access::REMOTE_ATOMIC,
        Access::MW_BIND,
        Access::REMOTE_INVALIDATE,
    ];
    let mut a = Access::empty();
    for b in bits {
        if rng.chance(40) {
            a |= b;
        }
    }
    a
}

impl World {
    fn new() -> World {
        let (b, a) = caller_contexts(&LinkConfig::default());
        let a_pd = a.alloc_pd();
        let a_cq = a.create_cq(1024).unwrap();
        let b_pd = b.alloc_pd();
        let b_cq = b.create_cq(1024).unwrap();
        let guard = b_pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
        let guard_bytes = pattern(4096, 0x47);
        guard.write(0, &guard_bytes).unwrap();
        let target = b_pd
            .alloc_mr(
                8192,
                Access::LOCAL_WRITE
                    | Access::REMOTE_WRITE
                    | Access::REMOTE_READ
                    | Access::REMOTE_ATOMIC
                    | Access::MW_BIND,
            )
            .unwrap();
        let recv = b_pd
            .alloc_mr(B_RECV_SLOTS * B_RECV_SLOT, Access::LOCAL_WRITE)
            .unwrap();
        let a_qp = a_pd.create_qp(&QpInit::new(&a_cq, &a_cq)).unwrap();
        let b_qp = b_pd.create_qp(&QpInit::new(&b_cq, &b_cq)).unwrap();
        let mut w = World {
            a,
            b,
            a_pd,
            a_cq,
            b_pd,
            b_cq,
            a_qp,
            b_qp,
            guard,
            guard_bytes,
            target,
            recv,
            a_mrs: Vec::new(),
            mws: Vec::new(),
            frs: Vec::new(),
            posted: HashSet::new(),
            next_wr: 1,
            port: 7700,
            reconnects: 0,
            refused: 0,
            error_completions: 0,
            ok_completions: 0,
        };
        w.connect();
        w
    }

    /// Connects the current queue pairs on a new port, B's receives posted first.
    fn connect(&mut self) {
        for i in 0..B_RECV_SLOTS {
            self.b_qp
                .post_recv(
                    &RecvWr::new(
                        i as u64,
                        &[self.recv.sge((i * B_RECV_SLOT) as u64, B_RECV_SLOT as u32)],
                    )
                    .unwrap(),
                )
                .unwrap();
        }
        self.port += 1;
        connect_accept_driven(&self.b, &self.b_qp, &self.a, &self.a_qp, self.port);
    }

    /// Both queue pairs replaced by new ones, connected again.
    fn reconnect(&mut self) {
        self.reconnects += 1;
        let a_qp = self
            .a_pd
            .create_qp(&QpInit::new(&self.a_cq, &self.a_cq))
            .unwrap();
        let b_qp = self
            .b_pd
            .create_qp(&QpInit::new(&self.b_cq, &self.b_cq))
            .unwrap();
        // The old ones go (destroyed, their connections reset) before the new connect.
        self.a_qp = a_qp;
        self.b_qp = b_qp;
        self.run(64);
        self.drain();
        self.connect();
    }

    fn run(&self, loops: usize) {
        for _ in 0..loops {
            self.a.progress();
            self.b.progress();
        }
    }

    /// Takes every completion of both sides: A's must name a request A posted; B's
    /// receives are posted again (on B's current queue pair, if it still takes them).
    fn drain(&mut self) {
        while let Some(c) = self.a_cq.poll_one() {
            assert!(
                self.posted.contains(&c.wr_id),
                "A completed work request {} it never posted: {c:?}",
                c.wr_id
            );
            if c.status == WcStatus::Success {
                self.ok_completions += 1;
            } else {
                self.error_completions += 1;
            }
        }
        while let Some(c) = self.b_cq.poll_one() {
            if c.status == WcStatus::Success
                && matches!(c.opcode, WcOpcode::Recv | WcOpcode::RecvImm)
                && c.qp == self.b_qp.id()
            {
                let i = c.wr_id as usize % B_RECV_SLOTS;
                let _ = self.b_qp.post_recv(
                    &RecvWr::new(
                        c.wr_id,
                        &[self.recv.sge((i * B_RECV_SLOT) as u64, B_RECV_SLOT as u32)],
                    )
                    .unwrap(),
                );
            }
        }
    }

    fn wr_id(&mut self) -> u64 {
        let id = self.next_wr;
        self.next_wr += 1;
        self.posted.insert(id);
        id
    }

    /// A local STag: one of A's regions (live or not), a window, a fast registration, B's
    /// (foreign to A), or made up.
    fn any_local_stag(&mut self, rng: &mut Rng) -> u32 {
        match rng.below(6) {
            0 | 1 if !self.a_mrs.is_empty() => {
                let i = rng.below(self.a_mrs.len());
                self.a_mrs[i].mr.stag()
            }
            2 if !self.mws.is_empty() => {
                let i = rng.below(self.mws.len());
                self.mws[i].stag()
            }
            3 if !self.frs.is_empty() => {
                let i = rng.below(self.frs.len());
                self.frs[i].stag()
            }
            4 => self.guard.stag(),
            _ => rng.next() as u32,
        }
    }

    /// A remote STag and Tagged Offset: B's target (often in bounds), B's guard, one of
    /// A's own, or made up.
    fn any_remote(&mut self, rng: &mut Rng) -> (u32, u64) {
        let to_near = |rng: &mut Rng, base: u64, len: u64| -> u64 {
            match rng.below(6) {
                0 => base,
                1 | 2 => base + rng.below(len as usize / 2) as u64,
                3 => base + len - 8,
                4 => base + len,
                _ => rng.next(),
            }
        };
        match rng.below(6) {
            0..=3 => {
                let (s, b, l) = (
                    self.target.stag(),
                    self.target.base_to(),
                    self.target.len() as u64,
                );
                (s, to_near(rng, b, l) & !7)
            }
            4 => {
                let (s, b) = (self.guard.stag(), self.guard.base_to());
                (s, to_near(rng, b, 4096))
            }
            _ => {
                let s = self.any_local_stag(rng);
                (s, rng.next())
            }
        }
    }

    fn any_sge(&mut self, rng: &mut Rng) -> Sge {
        if !self.a_mrs.is_empty() && rng.chance(50) {
            // In bounds (the region's rights may still not fit the operation).
            let i = rng.below(self.a_mrs.len());
            let len = self.a_mrs[i].mr.len();
            let off = rng.below(len.max(1)).min(len);
            let n = rng.below((len - off).min(600) + 1);
            return self.a_mrs[i].mr.sge(off as u64, n as u32);
        }
        if !self.a_mrs.is_empty() && rng.chance(70) {
            let i = rng.below(self.a_mrs.len());
            let len = self.a_mrs[i].mr.len() as u64;
            let off = match rng.below(5) {
                0 => 0,
                1 => rng.below(len.max(1) as usize) as u64,
                2 => len,
                3 => len.saturating_sub(1),
                _ => rng.next(),
            };
            let n = match rng.below(6) {
                0 => 0,
                1 => 1,
                2 => len as u32,
                3 => len.saturating_sub(off) as u32,
                4 => u32::MAX,
                _ => rng.below(600) as u32,
            };
            self.a_mrs[i].mr.sge(off, n)
        } else {
            Sge {
                stag: self.any_local_stag(rng),
                to: rng.next() % 8192,
                len: rng.below(600) as u32,
            }
        }
    }

    fn any_sges(&mut self, rng: &mut Rng) -> Vec<Sge> {
        let n = rng.pick(&[0usize, 1, 1, 1, 2, 3, MAX_SGE, MAX_SGE + 1]);
        (0..n).map(|_| self.any_sge(rng)).collect()
    }

    fn any_op(&mut self, rng: &mut Rng) -> SendOp {
        let (remote_stag, remote_to) = self.any_remote(rng);
        match rng.below(11) {
            0 => SendOp::Send,
            1 => SendOp::SendSe,
            2 => SendOp::SendInvalidate {
                stag: self.any_remote(rng).0,
            },
            3 => SendOp::SendSeInvalidate {
                stag: self.any_remote(rng).0,
            },
            4 | 5 => SendOp::Write {
                remote_stag,
                remote_to,
            },
            6 => SendOp::Read {
                remote_stag,
                remote_to,
            },
            7 => SendOp::AtomicFetchAdd {
                remote_stag,
                remote_to: if rng.chance(80) {
                    remote_to & !7
                } else {
                    remote_to
                },
                add: rng.next(),
                add_mask: rng.pick_or_any(&[0, u64::MAX]),
            },
            8 => SendOp::AtomicCmpSwap {
                remote_stag,
                remote_to,
                compare: rng.next(),
                compare_mask: rng.pick_or_any(&[u64::MAX]),
                swap: rng.next(),
                swap_mask: rng.pick_or_any(&[u64::MAX]),
            },
            9 => SendOp::WriteWithImm {
                remote_stag,
                remote_to,
                imm: rng.next(),
                solicited: rng.chance(50),
            },
            _ => SendOp::Immediate {
                imm: rng.next(),
                solicited: rng.chance(50),
            },
        }
    }

    /// A raw send-queue operation on memory keys, built by hand (not through the
    /// checked helpers): any window, region and range.
    fn any_key_op(&mut self, rng: &mut Rng) -> SendOp {
        let mr = if !self.a_mrs.is_empty() && rng.chance(70) {
            let i = rng.below(self.a_mrs.len());
            self.a_mrs[i].mr.stag()
        } else {
            self.any_local_stag(rng)
        };
        let to = rng.pick_or_any(&[0u64, 8, 4096, u64::MAX - 7]);
        let len = rng.pick(&[0u64, 1, 64, 4096, 1 << 40, u64::MAX]);
        match rng.below(3) {
            0 => SendOp::BindMw {
                mw: self.any_local_stag(rng),
                new_key: rng.next() as u8,
                mr,
                to,
                len,
                access: any_access(rng),
            },
            1 => SendOp::FastReg {
                stag: self.any_local_stag(rng),
                new_key: rng.next() as u8,
                mr,
                mr_to: to,
                len,
                base_to: rng.pick_or_any(&[0u64, u64::MAX]),
                access: any_access(rng),
            },
            _ => SendOp::LocalInvalidate {
                stag: self.any_local_stag(rng),
            },
        }
    }

    fn refused<T>(&mut self, r: Result<T, Error>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                // Every refusal says what it is (typed; its text non-empty).
                assert!(!e.to_string().is_empty());
                self.refused += 1;
                None
            }
        }
    }

    fn step(&mut self, rng: &mut Rng) {
        match rng.below(16) {
            0 if self.a_mrs.len() < 12 => {
                let len = rng.pick(&[0usize, 1, 7, 8, 64, 600, 4096, 8192, 1 << 40]);
                let access = any_access(rng);
                if let Some(mr) = self.refused(self.a_pd.alloc_mr(len, access)) {
                    let bytes = pattern(mr.len(), rng.next() as u8);
                    mr.write(0, &bytes).unwrap();
                    let frozen = (!access.contains(Access::LOCAL_WRITE)).then_some(bytes);
                    self.a_mrs.push(ARegion { mr, frozen });
                }
            }
            1 if !self.a_mrs.is_empty() => {
                // Deregistered, requests that name it posted or not; a refusal keeps it.
                let i = rng.below(self.a_mrs.len());
                let r = self.a_mrs.swap_remove(i);
                self.check_frozen(&r);
                match r.mr.deregister() {
                    Ok(()) => {}
                    Err((mr, e)) => {
                        assert!(!e.to_string().is_empty());
                        self.refused += 1;
                        self.a_mrs.push(ARegion {
                            mr,
                            frozen: r.frozen,
                        });
                    }
                }
            }
            2..=4 => {
                let op = self.any_op(rng);
                let sges = self.any_sges(rng);
                let id = self.wr_id();
                if let Some(wr) = self.refused(SendWr::new(id, op, &sges)) {
                    let wr = match rng.below(4) {
                        0 => wr.fenced(),
                        1 => wr.unsignaled(),
                        _ => wr,
                    };
                    self.refused(self.a_qp.post_send(&wr));
                }
            }
            5 => {
                let sges = self.any_sges(rng);
                let id = self.wr_id();
                if let Some(wr) = self.refused(RecvWr::new(id, &sges)) {
                    self.refused(self.a_qp.post_recv(&wr));
                }
            }
            6 => {
                let op = self.any_key_op(rng);
                let id = self.wr_id();
                if let Some(wr) = self.refused(SendWr::new(id, op, &[])) {
                    self.refused(self.a_qp.post_send(&wr));
                }
            }
            7 if !self.a_mrs.is_empty() => {
                if self.mws.len() < 6 {
                    let ty = rng.pick(&[MwType::Type1, MwType::Type2]);
                    if let Some(mw) = self.refused(self.a_pd.alloc_mw(ty)) {
                        self.mws.push(mw);
                    }
                }
                if let Some(i) = (!self.mws.is_empty()).then(|| rng.below(self.mws.len())) {
                    let m = rng.below(self.a_mrs.len());
                    let off = rng.pick_or_any(&[0u64, 8, 4095, 1 << 40]);
                    let len = rng.pick(&[0u64, 8, 64, 4096, u64::MAX]);
                    let access = any_access(rng);
                    let id = self.wr_id();
                    let r = self.a_qp.post_bind_mw(
                        id,
                        &self.mws[i],
                        &self.a_mrs[m].mr,
                        off,
                        len,
                        access,
                    );
                    self.refused(r);
                }
            }
            8 if !self.a_mrs.is_empty() => {
                if self.frs.len() < 4 {
                    if let Some(fr) = self.refused(self.a_pd.alloc_fast_reg()) {
                        self.frs.push(fr);
                    }
                }
                if let Some(i) = (!self.frs.is_empty()).then(|| rng.below(self.frs.len())) {
                    let m = rng.below(self.a_mrs.len());
                    let off = rng.pick_or_any(&[0u64, 8, 4095, 1 << 40]);
                    let len = rng.pick(&[0u64, 8, 64, 4096, u64::MAX]);
                    let access = any_access(rng);
                    let id = self.wr_id();
                    let r = self.a_qp.post_fast_reg(
                        id,
                        &self.frs[i],
                        &self.a_mrs[m].mr,
                        off,
                        len,
                        access,
                    );
                    self.refused(r);
                }
            }
            9 => {
                let stag = self.any_local_stag(rng);
                let id = self.wr_id();
                let fenced = rng.chance(50);
                self.refused(self.a_qp.post_local_invalidate(id, stag, fenced));
            }
            10 => {
                let len = rng.pick(&[0usize, 1, 8, 255, 256, 257, 4096]);
                let data = pattern(len, 3);
                let op = self.any_op(rng);
                let id = self.wr_id();
                self.refused(self.a_qp.post_send_inline(id, op, &data));
            }
            11 => {
                let n = 1 + rng.below(4);
                let mut wrs = Vec::new();
                for _ in 0..n {
                    let op = self.any_op(rng);
                    let sges = self.any_sges(rng);
                    let id = self.wr_id();
                    if let Ok(wr) = SendWr::new(id, op, &sges) {
                        wrs.push(wr);
                    }
                }
                if let Err(e) = self.a_qp.post_send_list(&wrs) {
                    assert!(!e.to_string().is_empty());
                    self.refused += 1;
                }
            }
            12 => {
                // Queue pairs and queues of any shape: refused with a typed error, or made
                // and dropped.
                let cq_depth = rng.pick(&[0usize, 1, 2, 1 << 20, 1 << 40]);
                if let Some(cq) = self.refused(self.a.create_cq(cq_depth)) {
                    let mut init = QpInit::new(&cq, &self.a_cq);
                    init.sq_depth = rng.pick(&[0u32, 1, 64, 1 << 20, u32::MAX]);
                    init.rq_depth = rng.pick(&[0u32, 1, 64, 1 << 20, u32::MAX]);
                    init.max_sge = rng.pick(&[0u32, 1, MAX_SGE as u32, 64]);
                    init.max_inline = rng.pick(&[0u32, 1, MAX_INLINE, MAX_INLINE + 1]);
                    init.core = rng.pick(&[None, Some(0), Some(1), Some(usize::MAX)]);
                    init.sges_checked_at_post = rng.chance(50);
                    let _ = self.refused(self.a_pd.create_qp(&init));
                }
                let _ = self.refused(self.a.query_port(rng.next() as u8));
                let _ = self.refused(
                    self.a_pd
                        .create_srq(rng.pick(&[0u32, 1, u32::MAX]), rng.pick(&[0u32, 1, 64])),
                );
            }
            13 if rng.chance(3) => {
                // The user ends the connection itself, now and then.
                if rng.chance(50) {
                    self.refused(self.a_qp.disconnect());
                } else {
                    self.refused(self.a_qp.abort());
                }
            }
            _ => {
                self.run(1 + rng.below(8));
                self.drain();
            }
        }
    }

    fn check_frozen(&self, r: &ARegion) {
        if let Some(want) = &r.frozen {
            let mut got = vec![0u8; r.mr.len()];
            r.mr.read(0, &mut got).unwrap();
            assert!(
                got == *want,
                "a region without local write changed (stag {:#x})",
                r.mr.stag()
            );
        }
    }

    fn check(&self) {
        let mut got = vec![0u8; 4096];
        self.guard.read(0, &mut got).unwrap();
        assert!(got == self.guard_bytes, "B's guard region changed");
        for r in &self.a_mrs {
            self.check_frozen(r);
        }
    }

    /// A fresh connection moves a verified Write into B's target and a verified Send
    /// into B's receive.
    fn still_serves(&mut self) {
        self.reconnect();
        let src = self
            .a_pd
            .alloc_mr(4096, Access::LOCAL_WRITE)
            .expect("a region after all that");
        let data = pattern(4096, 0x99);
        src.write(0, &data).unwrap();
        let id = self.wr_id();
        self.a_qp
            .post_send(
                &SendWr::new(
                    id,
                    SendOp::Write {
                        remote_stag: self.target.stag(),
                        remote_to: self.target.base_to() + 1024,
                    },
                    &[src.sge(0, 4096)],
                )
                .unwrap(),
            )
            .expect("a Write on the fresh connection");
        let sid = self.wr_id();
        self.a_qp
            .post_send(&SendWr::new(sid, SendOp::Send, &[src.sge(0, 300)]).unwrap())
            .expect("a Send on the fresh connection");
        let (mut wrote, mut sent, mut received) = (false, false, None);
        for _ in 0..200_000 {
            self.run(1);
            while let Some(c) = self.a_cq.poll_one() {
                assert_eq!(c.status, WcStatus::Success, "{c:?}");
                wrote |= c.wr_id == id;
                sent |= c.wr_id == sid;
            }
            while let Some(c) = self.b_cq.poll_one() {
                if c.qp == self.b_qp.id() && c.opcode == WcOpcode::Recv {
                    assert_eq!(c.status, WcStatus::Success, "{c:?}");
                    received = Some(c);
                }
            }
            if wrote && sent && received.is_some() {
                break;
            }
        }
        assert!(
            wrote && sent,
            "the fresh connection's Write and Send did not complete"
        );
        let c = received.expect("B's receive of the Send");
        assert_eq!(c.byte_len, 300);
        let slot = c.wr_id as usize % B_RECV_SLOTS;
        let mut got = vec![0u8; 300];
        self.recv.read(slot * B_RECV_SLOT, &mut got).unwrap();
        assert_eq!(got, data[..300]);
        let mut got = vec![0u8; 4096];
        self.target.read(1024, &mut got).unwrap();
        assert_eq!(got, data);
    }
}

#[test]
fn a_local_users_random_mistakes_get_typed_errors_and_leave_the_contexts_serving() {
    for seed in 0..SEEDS {
        let mut rng = Rng(warpcore_engine::tcp::rng::Rng::new(seed));
        let mut w = World::new();
        for i in 0..STEPS {
            w.step(&mut rng);
            if i % 32 == 0 {
                w.check();
            }
            if w.a_qp.state() != QpState::Rts {
                // Ended by a fault (an error completion, a Terminate) or by the user:
                // what it completed is taken, then both sides get a new connection.
                w.run(64);
                w.drain();
                w.check();
                w.reconnect();
            }
        }
        w.run(256);
        w.drain();
        w.check();
        w.still_serves();
        w.check();
        println!(
            "seed {seed:#x}: {STEPS} steps, {} refused with a typed error, {} completions \
             in error, {} successful, {} reconnections",
            w.refused, w.error_completions, w.ok_completions, w.reconnects
        );
        assert!(w.refused > 0 && w.error_completions > 0 && w.reconnects > 0);
    }
}
