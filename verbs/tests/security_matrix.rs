//! The security matrix (issue 5): one test per hostile or mistaken remote access, through
//! the verbs API with engine threads over the in-memory link. A requester (context A, or a
//! hand-driven hostile peer where no honest engine would send the fault) faults against a
//! responder (context B). Each case checks
//! * the Terminate (layer, type, code) as received by the faulting side,
//! * the queue pair state on both sides (both end in `Error`),
//! * what each user is told: the requester's completions and `CmEvent::Error`
//!   (`RemoteTerminate`), the responder's `CmEvent::Error` (`LocalTerminate` with the same
//!   code) and its flushed receives, each list exact (work request ids, opcodes, statuses,
//!   count; every case but `send-no-receive` has a receive posted on the responder, so a
//!   flush is checked),
//! * that no byte changed in any registered region of either side (the target region
//!   included: every request here is refused before placement),
//! * that the regions stay usable: a fresh connection between the same users (same PDs,
//!   CQs and regions) moves data into the target region (or reads it, where the case's
//!   target grants no remote write) and into the guard region by Write and by Send, each
//!   verified, with every other octet of every region still as before,
//!
//! and prints one line, e.g.
//! `security: unknown-stag  Terminate 1/1/00 (...) requester=Error responder=Error ... usable=ok`.
//! `scripts/test-engine.sh` runs it with `--nocapture` so the lines show in the suite.

mod security_support;

use std::time::{Duration, Instant};

use security_support::Hostile;
use warpcore_verbs::*;

const T: Duration = Duration::from_secs(10);
const PORT: u16 = 7400;
const REQ_LEN: usize = 64 * 1024;
const TARGET_LEN: usize = 4096;

fn all() -> Access {
    Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC
}

/// Remote rights a window may grant.
fn window_rights() -> Access {
    Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(29).wrapping_add(seed) ^ (i >> 9) as u8)
        .collect()
}

fn contents(mr: &MemoryRegion) -> Vec<u8> {
    let mut v = vec![0u8; mr.len()];
    mr.read(0, &mut v).unwrap();
    v
}

/// Two connected contexts and the regions of one case. The regions are filled with
/// patterns before the fault and compared afterwards.
struct Env {
    a: Context,
    b: Context,
    apd: ProtectionDomain,
    bpd: ProtectionDomain,
    acq: CompletionQueue,
    bcq: CompletionQueue,
    aqp: QueuePair,
    bqp: QueuePair,
    /// The requester's buffers (all access).
    amr: MemoryRegion,
    /// The responder's target region (access per case).
    target: MemoryRegion,
    /// A neighbouring region of the responder (all access).
    guard: MemoryRegion,
    /// A region of the responder in another protection domain (all access).
    other_pd: MemoryRegion,
    _bpd2: ProtectionDomain,
    snapshot: Vec<Vec<u8>>,
    /// The target region's access, and whether its STag is still valid (a case may
    /// invalidate it): what the usability check may do with it.
    target_access: Access,
    target_valid: bool,
    /// The receives posted on the responder's QP, in order: all must be flushed.
    rq: Vec<u64>,
}

/// The receive the tagged cases post on the responder (guard octets 2048..2560), so that
/// the flush of the receive queue is checked in every case.
const RECV_ID: u64 = 900;

impl Env {
    fn new(target_access: Access, pa: &MpaParams, pb: &MpaParams) -> Env {
        Env::with_drive_a(target_access, pa, pb, Drive::Thread)
    }

    /// `new`, with the requester's engine core run as `drive_a` says.
    fn with_drive_a(target_access: Access, pa: &MpaParams, pb: &MpaParams, drive_a: Drive) -> Env {
        let (da, db) = link_pair(&LinkConfig::default());
        let b = Context::open(Config::new(db, [10, 0, 0, 2])).unwrap();
        let mut ca = Config::new(da, [10, 0, 0, 1]);
        ca.drive = drive_a;
        let a = Context::open(ca).unwrap();
        let (apd, bpd, bpd2) = (a.alloc_pd(), b.alloc_pd(), b.alloc_pd());
        let acq = a.create_cq(256).unwrap();
        let bcq = b.create_cq(256).unwrap();
        let amr = apd.alloc_mr(REQ_LEN, all()).unwrap();
        let target = bpd.alloc_mr(TARGET_LEN, target_access).unwrap();
        let guard = bpd.alloc_mr(TARGET_LEN, all()).unwrap();
        let other_pd = bpd2.alloc_mr(TARGET_LEN, all()).unwrap();
        let bqp = bpd.create_qp(&QpInit::new(&bcq, &bcq)).unwrap();
        let aqp = apd.create_qp(&QpInit::new(&acq, &acq)).unwrap();
        b.listen(PORT, pb).unwrap();
        aqp.connect([10, 0, 0, 2], PORT, pa, b"").unwrap();
        // A caller-driven A sends nothing unless its thread runs it: drive it while B waits.
        let deadline = Instant::now() + T;
        let req = loop {
            a.progress();
            match b.next_event(Duration::from_millis(1)) {
                Some(CmEvent::ConnectRequest(r)) => break r,
                Some(_) => {}
                None => assert!(Instant::now() < deadline, "no connection request"),
            }
        };
        b.accept(&req, &bqp, b"").unwrap();
        for ctx in [&a, &b] {
            assert!(matches!(ctx.next_event(T), Some(CmEvent::Established(_))));
        }
        let mut env = Env {
            a,
            b,
            apd,
            bpd,
            acq,
            bcq,
            aqp,
            bqp,
            amr,
            target,
            guard,
            other_pd,
            _bpd2: bpd2,
            snapshot: Vec::new(),
            target_access,
            target_valid: true,
            rq: Vec::new(),
        };
        for (k, mr) in env.regions().into_iter().enumerate() {
            mr.write(0, &pattern(mr.len(), k as u8 + 1)).unwrap();
        }
        env.snapshot = env.regions().into_iter().map(contents).collect();
        env
    }

    /// A second connection between the same two users (same PDs and CQs), up.
    fn second_connection(&self) -> (QueuePair, QueuePair) {
        self.b.listen(PORT + 1, &MpaParams::default()).unwrap();
        self.connection(PORT + 1)
    }

    /// A new connection between the same two users (same PDs and CQs) to B's listener on
    /// `port`, up. Events of earlier connections (their teardown) are passed over; A's core
    /// is run here in case it is caller-driven.
    fn connection(&self, port: u16) -> (QueuePair, QueuePair) {
        let bqp = self
            .bpd
            .create_qp(&QpInit::new(&self.bcq, &self.bcq))
            .unwrap();
        let aqp = self
            .apd
            .create_qp(&QpInit::new(&self.acq, &self.acq))
            .unwrap();
        aqp.connect([10, 0, 0, 2], port, &MpaParams::default(), b"")
            .unwrap();
        let deadline = Instant::now() + T;
        let req = loop {
            self.a.progress();
            match self.b.next_event(Duration::from_millis(1)) {
                Some(CmEvent::ConnectRequest(r)) => break r,
                Some(_) => {}
                None => assert!(Instant::now() < deadline, "no connection request"),
            }
        };
        self.b.accept(&req, &bqp, b"").unwrap();
        for (ctx, qp) in [(&self.a, &aqp), (&self.b, &bqp)] {
            loop {
                self.a.progress();
                match ctx.next_event(Duration::from_millis(1)) {
                    Some(CmEvent::Established(e)) if e.qp == qp.id() => break,
                    Some(CmEvent::Error { qp: q, error }) if q == qp.id() => {
                        panic!("new connection failed: {error:?}")
                    }
                    Some(_) => {}
                    None => assert!(Instant::now() < deadline, "new connection not up"),
                }
            }
        }
        (aqp, bqp)
    }

    /// An environment whose responder has one receive posted ([`RECV_ID`]).
    fn default_with(target_access: Access) -> Env {
        let mut env = Env::bare(target_access);
        env.post_recv(RECV_ID, 2048, 512);
        env
    }

    /// An environment with no receive posted (the Send cases post their own).
    fn bare(target_access: Access) -> Env {
        Env::new(target_access, &MpaParams::default(), &MpaParams::default())
    }

    /// Posts a receive of guard octets `off..off + len` on the responder's QP.
    fn post_recv(&mut self, wr_id: u64, off: u64, len: u32) {
        self.bqp
            .post_recv(&RecvWr::new(wr_id, &[self.guard.sge(off, len)]).unwrap())
            .unwrap();
        self.rq.push(wr_id);
    }

    /// The responder's receives, each flushed, in order.
    fn flushed(&self) -> Vec<(u64, WcOpcode, WcStatus)> {
        self.rq
            .iter()
            .map(|&id| (id, WcOpcode::Recv, WcStatus::FlushErr))
            .collect()
    }

    fn regions(&self) -> [&MemoryRegion; 4] {
        [&self.amr, &self.target, &self.guard, &self.other_pd]
    }

    fn post(&self, wr_id: u64, op: SendOp, sges: &[Sge]) {
        self.aqp
            .post_send(&SendWr::new(wr_id, op, sges).unwrap())
            .unwrap();
    }

    /// Checks that no byte of any region changed; "ok" or a panic naming the region.
    fn untouched(&self) -> &'static str {
        self.regions_are(&self.snapshot, "changed");
        "ok"
    }

    /// Checks every octet of every region against `want`; panics naming the first
    /// difference.
    fn regions_are(&self, want: &[Vec<u8>], what: &str) {
        let names = ["requester", "target", "guard", "other-pd"];
        for ((mr, want), name) in self.regions().into_iter().zip(want).zip(names) {
            let now = contents(mr);
            assert_eq!(now.len(), want.len());
            if let Some(i) = now.iter().zip(want).position(|(x, y)| x != y) {
                panic!("{name} region {what} at offset {i}");
            }
        }
    }

    /// After the Terminate the regions stay usable: a fresh connection (to B's listener on
    /// `PORT`, same PDs, CQs and regions) Writes 256 octets into the guard region, Writes
    /// 128 into the target region (or Reads them back when the target grants no remote
    /// write; nothing when its STag was invalidated), and Sends 100 into a 256-octet receive
    /// in the guard region. Every completion is checked exactly, and every octet of every
    /// region must then be the snapshot with just those changes (the receive's tail, the
    /// flushed receive's buffer and all else untouched). "ok" or a panic.
    fn usable(&self) -> &'static str {
        let (aqp, bqp) = self.connection(PORT);
        let mut want = self.snapshot.clone();
        let put = |want: &mut Vec<Vec<u8>>, k: usize, off: usize, data: &[u8]| {
            want[k][off..off + data.len()].copy_from_slice(data);
        };
        bqp.post_recv(&RecvWr::new(950, &[self.guard.sge(3072, 256)]).unwrap())
            .unwrap();
        let post = |wr_id: u64, op: SendOp, sge: Sge| {
            aqp.post_send(&SendWr::new(wr_id, op, &[sge]).unwrap())
                .unwrap();
        };
        let to_guard = pattern(256, 0xA1);
        self.amr.write(8192, &to_guard).unwrap();
        put(&mut want, 0, 8192, &to_guard);
        put(&mut want, 2, 512, &to_guard);
        post(
            961,
            write_op(self.guard.stag(), 512),
            self.amr.sge(8192, 256),
        );
        let mut want_a = vec![(961, WcOpcode::Write, WcStatus::Success)];
        if self.target_valid && self.target_access.contains(Access::REMOTE_WRITE) {
            let to_target = pattern(128, 0xB2);
            self.amr.write(12288, &to_target).unwrap();
            put(&mut want, 0, 12288, &to_target);
            put(&mut want, 1, 1536, &to_target);
            post(
                962,
                write_op(self.target.stag(), 1536),
                self.amr.sge(12288, 128),
            );
            want_a.push((962, WcOpcode::Write, WcStatus::Success));
        } else if self.target_valid {
            let back = want[1][1536..1664].to_vec();
            put(&mut want, 0, 16384, &back);
            post(
                962,
                read_op(self.target.stag(), 1536),
                self.amr.sge(16384, 128),
            );
            want_a.push((962, WcOpcode::Read, WcStatus::Success));
        }
        let sent = pattern(100, 0xC3);
        self.amr.write(20480, &sent).unwrap();
        put(&mut want, 0, 20480, &sent);
        put(&mut want, 2, 3072, &sent);
        post(963, SendOp::Send, self.amr.sge(20480, 100));
        want_a.push((963, WcOpcode::Send, WcStatus::Success));
        // The Send follows the Writes on the stream: its receive completing means they
        // were placed. A's core is run meanwhile in case it is caller-driven.
        let cb = drain_driving(&self.a, &self.bcq, 1);
        let got: Vec<_> = cb
            .iter()
            .map(|c| (c.wr_id, c.opcode, c.status, c.byte_len))
            .collect();
        assert_eq!(
            got,
            [(950, WcOpcode::Recv, WcStatus::Success, 100)],
            "usable: responder"
        );
        let ca = drain(&self.acq, want_a.len());
        let got: Vec<_> = ca.iter().map(|c| (c.wr_id, c.opcode, c.status)).collect();
        assert_eq!(got, want_a, "usable: requester");
        self.regions_are(&want, "wrong after the fresh connection's transfers");
        assert_eq!((aqp.state(), bqp.state()), (QpState::Rts, QpState::Rts));
        "ok"
    }
}

/// The decoded outcome of one case.
struct Seen {
    term: (u8, u8, u8),
    desc: &'static str,
    requester: String,
    responder: QpState,
    local: String,
    remote: String,
}

fn error_event(ctx: &Context) -> ConnError {
    let deadline = Instant::now() + T;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match ctx.next_event(left) {
            Some(CmEvent::Error { error, .. }) => return error,
            Some(_) => {}
            None => panic!("no CmEvent::Error"),
        }
    }
}

fn wait_state(qp: &QueuePair, want: QpState) -> QpState {
    let deadline = Instant::now() + T;
    while qp.state() != want && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    qp.state()
}

/// Takes at least `n` completions (waiting for them), then whatever else arrives within
/// 20 ms (so an unexpected extra one is seen).
fn drain(cq: &CompletionQueue, n: usize) -> Vec<Completion> {
    let mut out = Vec::new();
    while out.len() < n {
        out.push(cq.wait(T).expect("completion"));
    }
    std::thread::sleep(Duration::from_millis(20));
    while let Some(c) = cq.poll_one() {
        out.push(c);
    }
    out
}

/// `drain`, running `ctx`'s caller-driven cores while it waits (for a completion queue of
/// the other context, whose completions depend on `ctx` sending).
fn drain_driving(ctx: &Context, cq: &CompletionQueue, n: usize) -> Vec<Completion> {
    let mut out = Vec::new();
    let deadline = Instant::now() + T;
    while out.len() < n {
        assert!(Instant::now() < deadline, "no completion");
        ctx.progress();
        out.extend(cq.poll_one());
    }
    let end = Instant::now() + Duration::from_millis(20);
    while Instant::now() < end {
        ctx.progress();
        out.extend(cq.poll_one());
    }
    out
}

fn wcs(v: &[Completion]) -> String {
    let parts: Vec<String> = v
        .iter()
        .map(|c| format!("{:?}:{:?}", c.opcode, c.status))
        .collect();
    format!("[{}]", parts.join(","))
}

fn code3(c: warpcore_engine::proto::TerminateCode) -> (u8, u8, u8) {
    (c.layer(), c.etype(), c.code())
}

/// Waits for both sides' reports after the requester faulted; checks the responder's
/// `LocalTerminate` names the same code as the Terminate the requester received, both QPs
/// in `Error`, the requester's completions (`want_wc`: work request id, opcode and status
/// of each, in order, and no other) and the responder's: exactly its posted receives,
/// flushed in order (RDMAP-6.2.1-2), the one a Send too long for it aimed at (1/2/05)
/// with a local length error.
fn observe(env: &Env, want_wc: &[(u64, WcOpcode, WcStatus)]) -> Seen {
    let ea = error_event(&env.a);
    let eb = error_event(&env.b);
    let ConnError::RemoteTerminate(rep) = ea else {
        panic!("requester: {ea:?}")
    };
    let ConnError::LocalTerminate(sent) = eb else {
        panic!("responder: {eb:?}")
    };
    let term = code3(rep.code);
    assert_eq!(code3(sent.terminate_code()), term, "sent vs received code");
    let ra = wait_state(&env.aqp, QpState::Error);
    let rb = wait_state(&env.bqp, QpState::Error);
    assert_eq!((ra, rb), (QpState::Error, QpState::Error));
    let ca = drain(&env.acq, want_wc.len());
    let got: Vec<_> = ca.iter().map(|c| (c.wr_id, c.opcode, c.status)).collect();
    assert_eq!(got, want_wc, "requester completions");
    let mut want_rq = env.flushed();
    // A Send longer than its receive (1/2/05) fails that receive with a local length
    // error; the others are flushed.
    if term == (1, 2, 5) {
        if let Some(first) = want_rq.first_mut() {
            first.2 = WcStatus::LocalLength;
        }
    }
    let cb = drain(&env.bcq, want_rq.len());
    let got: Vec<_> = cb.iter().map(|c| (c.wr_id, c.opcode, c.status)).collect();
    assert_eq!(got, want_rq, "responder completions (flushed receives)");
    Seen {
        term,
        desc: rep.code.description(),
        requester: format!("{ra:?}"),
        responder: rb,
        local: format!("{} + RemoteTerminate", wcs(&ca)),
        remote: format!("LocalTerminate + rq{}", wcs(&cb)),
    }
}

fn line(name: &str, s: &Seen, untouched: &str, usable: &str) {
    let (l, t, c) = s.term;
    println!(
        "security: {name:<26} Terminate {l}/{t}/{c:02X} ({}) requester={} responder={:?} local={} remote={} untouched={untouched} usable={usable}",
        s.desc, s.requester, s.responder, s.local, s.remote
    );
}

/// Runs one two-context case: `fault` posts the offending request(s) on A.
fn case(
    name: &str,
    env: Env,
    fault: impl FnOnce(&Env),
    want: (u8, u8, u8),
    want_wc: &[(u64, WcOpcode, WcStatus)],
) {
    fault(&env);
    let seen = observe(&env, want_wc);
    assert_eq!(seen.term, want, "{name}");
    let u = env.untouched();
    let usable = env.usable();
    line(name, &seen, u, usable);
}

fn write_op(stag: u32, to: u64) -> SendOp {
    SendOp::Write {
        remote_stag: stag,
        remote_to: to,
    }
}

fn read_op(stag: u32, to: u64) -> SendOp {
    SendOp::Read {
        remote_stag: stag,
        remote_to: to,
    }
}

/// The faulting Write (work request 1) completed at the requester when handed to TCP.
const WRITE_OK: (u64, WcOpcode, WcStatus) = (1, WcOpcode::Write, WcStatus::Success);

/// DDP-7.1-10: a tagged message to an STag that was never registered → DDP 1/1/00. The
/// Write itself completed at the requester when handed to TCP (departure 1); the error
/// reaches the user as the decoded Terminate.
#[test]
fn unknown_stag() {
    let env = Env::default_with(all());
    case(
        "unknown-stag",
        env,
        |e| {
            let s = e.amr.sge(0, 64);
            e.post(1, write_op(0x00AB_CD00, 0), &[s]);
        },
        (1, 1, 0),
        &[WRITE_OK],
    );
}

/// DDP-7.1-10, GUIDE rule 6: the STag's index is right but its 8-bit key is not (a stale
/// STag) → 1/1/00.
#[test]
fn wrong_key() {
    let env = Env::default_with(all());
    case(
        "wrong-key",
        env,
        |e| {
            let s = e.target.stag();
            let stale = (s & !0xFF) | ((s + 1) & 0xFF);
            e.post(1, write_op(stale, 0), &[e.amr.sge(0, 64)]);
        },
        (1, 1, 0),
        &[WRITE_OK],
    );
}

/// DDP-8.2-1, RDMAP-8.1.1-*: an STag registered in another protection domain than the
/// responder's QP → 1/1/02 (STag not associated with the DDP stream).
#[test]
fn stag_of_another_pd() {
    let env = Env::default_with(all());
    case(
        "stag-of-another-pd",
        env,
        |e| e.post(1, write_op(e.other_pd.stag(), 0), &[e.amr.sge(0, 64)]),
        (1, 1, 2),
        &[WRITE_OK],
    );
}

/// DDP-7.1-11: a Write into a region without remote write access. DDP has no "access
/// rights" code for tagged buffers, so the engine answers 1/1/00 (invalid STag), exactly
/// as siw does (`siw_tagged_error(E_ACCESS_PERM)`).
#[test]
fn no_write_access() {
    let env = Env::default_with(Access::LOCAL_WRITE | Access::REMOTE_READ);
    case(
        "no-write-access",
        env,
        |e| e.post(1, write_op(e.target.stag(), 0), &[e.amr.sge(0, 64)]),
        (1, 1, 0),
        &[WRITE_OK],
    );
}

/// RDMAP-7.2-9: a Read Request for a region without remote read access → RDMAP remote
/// protection 0/1/02 (access rights); the Read completes with a remote access error.
#[test]
fn no_read_access() {
    let env = Env::default_with(Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    case(
        "no-read-access",
        env,
        |e| e.post(1, read_op(e.target.stag(), 0), &[e.amr.sge(0, 64)]),
        (0, 1, 2),
        &[(1, WcOpcode::Read, WcStatus::RemoteAccess)],
    );
}

/// EXT-5.2.1-*, departure 14: an atomic on a region without REMOTE_ATOMIC → 0/1/02.
#[test]
fn no_atomic_access() {
    let env = Env::default_with(Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ);
    case(
        "no-atomic-access",
        env,
        |e| {
            let op = SendOp::AtomicFetchAdd {
                remote_stag: e.target.stag(),
                remote_to: 0,
                add: 1,
                add_mask: 0,
            };
            e.post(1, op, &[e.amr.sge(0, 8)]);
        },
        (0, 1, 2),
        &[(1, WcOpcode::AtomicFetchAdd, WcStatus::RemoteAccess)],
    );
}

/// DDP-7.1-13: a Write that starts inside the region and runs past its end → 1/1/01;
/// nothing placed, not even the part inside the region.
#[test]
fn past_the_end() {
    let env = Env::default_with(all());
    case(
        "past-the-end",
        env,
        |e| {
            e.post(
                1,
                write_op(e.target.stag(), TARGET_LEN as u64 - 16),
                &[e.amr.sge(0, 32)],
            );
        },
        (1, 1, 1),
        &[WRITE_OK],
    );
}

/// DDP-7.1-10, RDMAP-5.3-12: the responder's user invalidates its region's STag (Local
/// Invalidate); a Write through the invalidated STag is refused → 1/1/00.
#[test]
fn invalidated_stag() {
    let mut env = Env::default_with(all());
    env.bqp
        .post_local_invalidate(7, env.target.stag(), false)
        .unwrap();
    let c = env.bcq.wait(T).unwrap();
    assert_eq!(
        (c.wr_id, c.opcode, c.status),
        (7, WcOpcode::LocalInvalidate, WcStatus::Success)
    );
    env.target_valid = false;
    case(
        "invalidated-stag",
        env,
        |e| e.post(2, write_op(e.target.stag(), 0), &[e.amr.sge(0, 64)]),
        (1, 1, 0),
        &[(2, WcOpcode::Write, WcStatus::Success)],
    );
}

/// DDP-7.1-12: a Write through a memory window at a Tagged Offset before the window's
/// start. The window opens octets 1024..2048 of the target region, addressed with the
/// region's own TOs (departure 20), and the Write starts at TO 1000 → 1/1/01; the region
/// below the window is untouched too.
#[test]
fn before_the_start() {
    let env = Env::default_with(all() | Access::MW_BIND);
    let mw = env.bpd.alloc_mw(MwType::Type1).unwrap();
    let w = env
        .bqp
        .post_bind_mw(7, &mw, &env.target, 1024, 1024, window_rights())
        .unwrap();
    let c = env.bcq.wait(T).unwrap();
    assert_eq!((c.opcode, c.status), (WcOpcode::BindMw, WcStatus::Success));
    case(
        "before-the-start",
        env,
        |e| e.post(1, write_op(w, 1000), &[e.amr.sge(0, 64)]),
        (1, 1, 1),
        &[WRITE_OK],
    );
    drop(mw);
}

/// DDP-7.1-12/14: a Write whose Tagged Offset wraps the 64-bit space (2^64 - 16 for 32
/// octets, the 16 octets "before" TO 0 of a zero-based region). An honest requester
/// never sends it, so the hand-driven peer does; DDP checks the TO against the range
/// first → 1/1/01, nothing placed.
#[test]
fn to_wraps_below_the_base() {
    hostile_case(
        "to-wraps",
        |stag| vec![security_support::write(stag, u64::MAX - 15, &[0xEE; 32])],
        false,
        (1, 1, 1),
    );
}

/// DDP-8.2-1, RDMAP-8.1.1-*: a type 2 window bound to another queue pair of the responder
/// (a second connection between the same two users) is refused on this one → 1/1/02 (not
/// associated with the stream); the other connection stays up.
#[test]
fn window_bound_to_another_qp() {
    let env = Env::default_with(all() | Access::MW_BIND);
    let (aqp2, bqp2) = env.second_connection();
    let mw = env.bpd.alloc_mw(MwType::Type2).unwrap();
    let w = bqp2
        .post_bind_mw(7, &mw, &env.target, 0, TARGET_LEN as u64, window_rights())
        .unwrap();
    let c = env.bcq.wait(T).unwrap();
    assert_eq!((c.opcode, c.status), (WcOpcode::BindMw, WcStatus::Success));
    case(
        "window-of-another-qp",
        env,
        |e| e.post(1, write_op(w, 0), &[e.amr.sge(0, 64)]),
        (1, 1, 2),
        &[WRITE_OK],
    );
    assert_eq!((aqp2.state(), bqp2.state()), (QpState::Rts, QpState::Rts));
    drop(mw);
}

/// RDMAP-5.3-12, RDMAP-8.1.1-8: a Send with Invalidate naming a valid STag of this
/// stream's PD that may not be invalidated by a peer (a region registered without
/// `REMOTE_INVALIDATE`, usable by every stream of the PD; departure 18) → RDMAP remote
/// operation 0/2/09 "STag cannot be invalidated"; the region stays valid and untouched,
/// the receive is flushed. The Invalidate STag is checked before the first segment is
/// placed (departure 24), so the posted receive buffer is untouched too.
#[test]
fn send_invalidate_not_invalidatable() {
    send_invalidate_case("send-inv-not-allowed", false, (0, 2, 9));
}

/// RDMAP-5.3-11, RDMAP-7.2-5: a Send with Invalidate naming an STag of another protection
/// domain (not associated with this stream) → RDMAP remote protection 0/1/09.
#[test]
fn send_invalidate_foreign_stag() {
    send_invalidate_case("send-inv-foreign-stag", true, (0, 1, 9));
}

/// The Send is 3000 octets, several segments (MULPDU < 1500 on the link): refused at the
/// first, no octet of any lands in the receive buffer (the guard region's first 4000).
fn send_invalidate_case(name: &str, foreign: bool, want: (u8, u8, u8)) {
    let mut env = Env::bare(all());
    env.post_recv(7, 0, 4000);
    let stag = if foreign {
        env.other_pd.stag()
    } else {
        env.target.stag()
    };
    env.post(1, SendOp::SendInvalidate { stag }, &[env.amr.sge(0, 3000)]);
    let seen = observe(&env, &[(1, WcOpcode::Send, WcStatus::Success)]);
    assert_eq!(seen.term, want, "{name}");
    let u = env.untouched();
    let usable = env.usable();
    line(name, &seen, u, usable);
}

/// EXT-5.2.1-2: an atomic on a word that is not 8-aligned → 0/2/07 (siw's reading of
/// RFC 7306's "invalid request"); nothing changes. Sent by the hand-driven peer (the TO
/// names an unaligned word of the target, whose base TO is aligned like its address).
#[test]
fn misaligned_atomic() {
    hostile_case(
        "misaligned-atomic",
        |stag| vec![security_support::atomic_cmp_swap(1, stag, 12)],
        false,
        (0, 2, 7),
    );
}

/// RDMAP-6.1-2, RFC 6581 §9.1: the requester did not negotiate its ORD (0x3FFF, so it
/// runs at its maximum, 16) and the responder's IRD is 2: the third Read in flight earns
/// 0/2/07. The third Read (the first beyond IRD 2) is the one named by the Terminate
/// (its QN 1 MSN in the copied DDP header, RDMAP-06 §4.8); every Read fails.
#[test]
fn reads_beyond_ird() {
    let pa = MpaParams {
        ord: 0x3FFF,
        ..MpaParams::default()
    };
    let pb = MpaParams {
        ird: 2,
        ..MpaParams::default()
    };
    // The requester's core runs on this thread (Drive::Caller), so all four Requests are
    // queued before its first loop sends them together: with an engine thread of its own
    // the first Request could go out alone and be answered before the third arrived, and
    // the IRD would never be exceeded (seen once on a loaded machine).
    let mut env = Env::with_drive_a(all(), &pa, &pb, Drive::Caller);
    env.post_recv(RECV_ID, 2048, 512);
    // The Read named by the Terminate (the third) fails with a remote operation error,
    // the other three are flushed; none succeeds (the responder sends the Terminate
    // before any Read Response).
    case(
        "reads-beyond-ird",
        env,
        |e| {
            for k in 0..4u64 {
                e.post(k, read_op(e.target.stag(), 0), &[e.amr.sge(k * 64, 64)]);
            }
        },
        (0, 2, 7),
        &[
            (0, WcOpcode::Read, WcStatus::FlushErr),
            (1, WcOpcode::Read, WcStatus::FlushErr),
            (2, WcOpcode::Read, WcStatus::RemoteOperation),
            (3, WcOpcode::Read, WcStatus::FlushErr),
        ],
    );
}

/// DDP-7.1-2: a Send when the responder posted no receive → 1/2/02. The one case with
/// no receive to flush: the responder's completion queue must stay exactly empty.
#[test]
fn send_without_receive() {
    let env = Env::bare(all());
    case(
        "send-no-receive",
        env,
        |e| e.post(1, SendOp::Send, &[e.amr.sge(0, 8)]),
        (1, 2, 2),
        &[(1, WcOpcode::Send, WcStatus::Success)],
    );
}

/// DDP-7.1-4: a Send longer than the posted receive buffer → 1/2/05; nothing placed, the
/// receive fails with `WcStatus::LocalLength`.
#[test]
fn send_longer_than_buffer() {
    let mut env = Env::bare(all());
    env.post_recv(7, 100, 10);
    case(
        "send-too-long",
        env,
        |e| e.post(1, SendOp::Send, &[e.amr.sge(0, 11)]),
        (1, 2, 5),
        &[(1, WcOpcode::Send, WcStatus::Success)],
    );
}

/// A responder (context B) attacked by the hand-driven peer: connects, posts one receive
/// into the guard region, sends the ULPDUs `ulpdus` builds from the guard's STag, and checks the Terminate, B's state,
/// report and flushed receives, and that no byte of B's regions changed.
fn hostile_case(
    name: &str,
    ulpdus: impl FnOnce(u32) -> Vec<Vec<u8>>,
    corrupt_crc: bool,
    want: (u8, u8, u8),
) {
    let (da, db) = link_pair(&LinkConfig::default());
    // Without the `dpdk` feature a link is the only kind of device.
    #[allow(irrefutable_let_patterns)]
    let Device::Link(ea) = da
    else {
        unreachable!("link_pair gives link devices")
    };
    let b = Context::open(Config::new(db, [10, 0, 0, 2])).unwrap();
    let bpd = b.alloc_pd();
    let bcq = b.create_cq(64).unwrap();
    let guard = bpd.alloc_mr(TARGET_LEN, all()).unwrap();
    guard.write(0, &pattern(TARGET_LEN, 9)).unwrap();
    let before = contents(&guard);
    let bqp = bpd.create_qp(&QpInit::new(&bcq, &bcq)).unwrap();
    bqp.post_recv(&RecvWr::new(7, &[guard.sge(0, 64)]).unwrap())
        .unwrap();
    b.listen(PORT, &MpaParams::default()).unwrap();
    let mut peer = Hostile::new(ea, 1);
    hostile_connect(&mut peer, &b, &bqp);
    // The peer is the initiator in the client-server model: its first FPDU is the fault.
    peer.send_ulpdus(&ulpdus(guard.stag()), corrupt_crc);
    let term = peer.terminate();
    assert_eq!(term, want, "{name}");
    let deadline = Instant::now() + T;
    let eb = loop {
        peer.idle(Duration::from_millis(1));
        match b.next_event(Duration::from_millis(1)) {
            Some(CmEvent::Error { error, .. }) => break error,
            Some(_) => {}
            None => assert!(Instant::now() < deadline, "{name}: no error event"),
        }
    };
    let ConnError::LocalTerminate(sent) = eb else {
        panic!("{name}: {eb:?}")
    };
    assert_eq!(code3(sent.terminate_code()), want);
    peer.idle(Duration::from_millis(20));
    let rb = wait_state(&bqp, QpState::Error);
    assert_eq!(rb, QpState::Error);
    let cb = drain(&bcq, 1);
    let got: Vec<_> = cb.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(got, [(7, WcStatus::FlushErr)], "{name}");
    assert_eq!(
        contents(&guard),
        before,
        "{name}: the receive buffer changed"
    );
    let usable = hostile_usable(&mut peer, &b, &bpd, &bcq, &guard, &before);
    let code = warpcore_engine::proto::TerminateCode::new(want.0, want.1, want.2);
    let seen = Seen {
        term: want,
        desc: code.description(),
        requester: "hostile-peer".into(),
        responder: rb,
        local: "(peer got the Terminate, then FIN)".into(),
        remote: format!("LocalTerminate + rq{}", wcs(&cb)),
    };
    line(name, &seen, "ok", usable);
}

/// The hand-driven peer connects to B's listener on `PORT`; B accepts on `bqp`. If the
/// startup fails, B's connection manager events and `bqp`'s state are printed before the
/// panic goes on.
fn hostile_connect(peer: &mut Hostile, b: &Context, bqp: &QueuePair) {
    let mut seen = Vec::new();
    let up = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        peer.connect(2, PORT, || match b.next_event(Duration::from_millis(1)) {
            Some(CmEvent::ConnectRequest(r)) => {
                let res = b.accept(&r, bqp, b"");
                seen.push(format!("ConnectRequest {r:?} -> accept {res:?}"));
                res.is_ok()
            }
            Some(e) => {
                seen.push(format!("{e:?}"));
                false
            }
            None => false,
        })
    }));
    if let Err(e) = up {
        while let Some(e) = b.next_event(Duration::from_millis(1)) {
            seen.push(format!("later: {e:?}"));
        }
        eprintln!(
            "hostile peer's startup failed; B's events: {seen:#?}; B's QP {:?}",
            bqp.state()
        );
        std::panic::resume_unwind(e);
    }
}

/// After the Terminate the responder's guard region stays usable: the peer connects again
/// (a new TCP connection and MPA startup, accepted on a new QP of the same PD and CQ) and,
/// honest this time, Writes 256 octets into the guard region at 512 and Sends 100 into a
/// 256-octet receive at 3072 (MSN 1 of the new stream). The receive must complete exactly
/// (id, opcode, status, length, nothing else), and the guard region must be `before` with
/// just those octets changed (the receive's tail included). "ok" or a panic.
fn hostile_usable(
    peer: &mut Hostile,
    b: &Context,
    bpd: &ProtectionDomain,
    bcq: &CompletionQueue,
    guard: &MemoryRegion,
    before: &[u8],
) -> &'static str {
    let bqp = bpd.create_qp(&QpInit::new(bcq, bcq)).unwrap();
    bqp.post_recv(&RecvWr::new(950, &[guard.sge(3072, 256)]).unwrap())
        .unwrap();
    hostile_connect(peer, b, &bqp);
    let written = pattern(256, 0xA1);
    let sent = pattern(100, 0xC3);
    peer.send_ulpdus(
        &[
            security_support::write(guard.stag(), 512, &written),
            security_support::send(1, &sent),
        ],
        false,
    );
    let deadline = Instant::now() + T;
    let mut cb = Vec::new();
    while cb.is_empty() {
        assert!(Instant::now() < deadline, "usable: no receive completion");
        peer.idle(Duration::from_millis(1));
        cb.extend(bcq.poll_one());
    }
    peer.idle(Duration::from_millis(20));
    while let Some(c) = bcq.poll_one() {
        cb.push(c);
    }
    let got: Vec<_> = cb
        .iter()
        .map(|c| (c.wr_id, c.opcode, c.status, c.byte_len))
        .collect();
    assert_eq!(
        got,
        [(950, WcOpcode::Recv, WcStatus::Success, 100)],
        "usable"
    );
    let mut want = before.to_vec();
    want[512..768].copy_from_slice(&written);
    want[3072..3172].copy_from_slice(&sent);
    let now = contents(guard);
    if let Some(i) = now.iter().zip(&want).position(|(x, y)| x != y) {
        panic!("usable: guard region wrong at offset {i} after the new connection's transfers");
    }
    assert_eq!(bqp.state(), QpState::Rts);
    "ok"
}

/// DDP-7.1-5: an untagged message whose MSN is not the expected one (7 instead of 1) →
/// 1/2/03 (MSN range). No honest engine sends it: the hand-driven peer does.
#[test]
fn msn_out_of_range() {
    hostile_case(
        "msn-out-of-range",
        |_| vec![security_support::send(7, b"hi")],
        false,
        (1, 2, 3),
    );
}

/// MPA-8-*: an FPDU with a bad CRC32c → MPA 2/0/02; the FPDU is not trusted, nothing
/// placed (its payload would have fitted the posted receive).
#[test]
fn crc_error() {
    hostile_case(
        "crc-error",
        |_| vec![security_support::send(1, b"hi")],
        true,
        (2, 0, 2),
    );
}

/// Departure 24's second half: the Invalidate STag is checked before each segment is
/// placed and again when the last one delivers the message. Here the responder's user
/// invalidates the STag (Local Invalidate) after the first of two segments was placed and
/// checked: the last segment earns 0/2/09 (RDMAP-7.2-4, the STag is no longer valid), the
/// receive is flushed, the first segment's octets stay in its buffer (nothing of the last
/// is placed) and no other byte changed.
#[test]
fn send_invalidate_revoked_between_segments() {
    let name = "send-inv-revoked-midway";
    let (da, db) = link_pair(&LinkConfig::default());
    // Without the `dpdk` feature a link is the only kind of device.
    #[allow(irrefutable_let_patterns)]
    let Device::Link(ea) = da
    else {
        unreachable!("link_pair gives link devices")
    };
    let b = Context::open(Config::new(db, [10, 0, 0, 2])).unwrap();
    let bpd = b.alloc_pd();
    let bcq = b.create_cq(64).unwrap();
    let guard = bpd.alloc_mr(TARGET_LEN, all()).unwrap();
    let target = bpd
        .alloc_mr(TARGET_LEN, all() | Access::REMOTE_INVALIDATE)
        .unwrap();
    guard.write(0, &pattern(TARGET_LEN, 9)).unwrap();
    target.write(0, &pattern(TARGET_LEN, 10)).unwrap();
    let (g0, t0) = (contents(&guard), contents(&target));
    let bqp = bpd.create_qp(&QpInit::new(&bcq, &bcq)).unwrap();
    bqp.post_recv(&RecvWr::new(7, &[guard.sge(0, 64)]).unwrap())
        .unwrap();
    b.listen(PORT, &MpaParams::default()).unwrap();
    let mut peer = Hostile::new(ea, 1);
    hostile_connect(&mut peer, &b, &bqp);
    let stag = target.stag();
    let first = pattern(32, 77);
    peer.send_ulpdus(
        &[security_support::send_invalidate(1, 0, false, stag, &first)],
        false,
    );
    let deadline = Instant::now() + T;
    while contents(&guard)[..32] != first[..] {
        assert!(
            Instant::now() < deadline,
            "{name}: first segment not placed"
        );
        peer.idle(Duration::from_millis(1));
    }
    bqp.post_local_invalidate(8, stag, false).unwrap();
    let c = loop {
        peer.idle(Duration::from_millis(1));
        if let Some(c) = bcq.poll_one() {
            break c;
        }
        assert!(Instant::now() < deadline, "{name}: no Local Invalidate");
    };
    assert_eq!(
        (c.wr_id, c.opcode, c.status),
        (8, WcOpcode::LocalInvalidate, WcStatus::Success)
    );
    peer.send_ulpdus(
        &[security_support::send_invalidate(
            1,
            32,
            true,
            stag,
            &pattern(32, 78),
        )],
        false,
    );
    let want = (0, 2, 9);
    assert_eq!(peer.terminate(), want, "{name}");
    let eb = loop {
        peer.idle(Duration::from_millis(1));
        match b.next_event(Duration::from_millis(1)) {
            Some(CmEvent::Error { error, .. }) => break error,
            Some(_) => {}
            None => assert!(Instant::now() < deadline, "{name}: no error event"),
        }
    };
    let ConnError::LocalTerminate(sent) = eb else {
        panic!("{name}: {eb:?}")
    };
    assert_eq!(code3(sent.terminate_code()), want);
    peer.idle(Duration::from_millis(20));
    let rb = wait_state(&bqp, QpState::Error);
    let cb = drain(&bcq, 1);
    let got: Vec<_> = cb.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(got, [(7, WcStatus::FlushErr)], "{name}");
    let mut want_guard = g0;
    want_guard[..32].copy_from_slice(&first);
    assert!(contents(&guard) == want_guard, "{name}: guard region");
    assert!(contents(&target) == t0, "{name}: target region changed");
    let usable = hostile_usable(&mut peer, &b, &bpd, &bcq, &guard, &want_guard);
    assert!(contents(&target) == t0, "{name}: target region changed");
    let code = warpcore_engine::proto::TerminateCode::new(want.0, want.1, want.2);
    let seen = Seen {
        term: want,
        desc: code.description(),
        requester: "hostile-peer".into(),
        responder: rb,
        local: "(peer got the Terminate, then FIN)".into(),
        remote: format!("LocalTerminate + rq{}", wcs(&cb)),
    };
    line(
        name,
        &seen,
        "ok-but-first-segment-in-flushed-receive",
        usable,
    );
}

/// DDP-8.2-2, DDP-8.3.1-3, RDMAP-8.1.1-3: a type 2 window is
/// bound to the stream whose Bind ran. The responder's QP binds one on its first connection
/// (to A's first QP), the connection ends (abort), the QP is reset (`QueuePair::reset`) and
/// accepts a new connection from another QP of the peer: a new DDP stream. The window of
/// the old stream must not serve the new one: the Write through it must be refused and the
/// target region left as it was.
#[test]
fn a_type2_window_does_not_serve_the_next_connection_of_a_reset_qp() {
    let env = Env::bare(all() | Access::MW_BIND);
    let mw = env.bpd.alloc_mw(MwType::Type2).unwrap();
    let w = env
        .bqp
        .post_bind_mw(7, &mw, &env.target, 0, TARGET_LEN as u64, window_rights())
        .unwrap();
    let c = env.bcq.wait(T).unwrap();
    assert_eq!((c.opcode, c.status), (WcOpcode::BindMw, WcStatus::Success));
    // The first connection (and with it the window's stream) ends.
    env.bqp.abort().unwrap();
    assert_eq!(wait_state(&env.bqp, QpState::Error), QpState::Error);
    env.bqp.reset().unwrap();
    assert_eq!(env.bqp.state(), QpState::Idle);
    // A new connection, from another QP of A, accepted on the same (reset) QP of B.
    env.b.listen(PORT + 2, &MpaParams::default()).unwrap();
    let aqp2 = env.apd.create_qp(&QpInit::new(&env.acq, &env.acq)).unwrap();
    aqp2.connect([10, 0, 0, 2], PORT + 2, &MpaParams::default(), b"")
        .unwrap();
    let deadline = Instant::now() + T;
    let req = loop {
        match env.b.next_event(Duration::from_millis(1)) {
            Some(CmEvent::ConnectRequest(r)) => break r,
            Some(_) => {}
            None => assert!(Instant::now() < deadline, "no connection request"),
        }
    };
    env.b.accept(&req, &env.bqp, b"").unwrap();
    for (ctx, qp) in [(&env.a, &aqp2), (&env.b, &env.bqp)] {
        loop {
            match ctx.next_event(Duration::from_millis(1)) {
                Some(CmEvent::Established(e)) if e.qp == qp.id() => break,
                Some(_) => {}
                None => assert!(Instant::now() < deadline, "new connection not up"),
            }
        }
    }
    assert!(
        env.bqp.id().qpn() != 0 && mw.is_bound(),
        "the window is still bound"
    );
    // The new peer writes through the old stream's window, then reads the guard region
    // (the Read's answer comes after the Write was handled).
    aqp2.post_send(&SendWr::new(1, write_op(w, 0), &[env.amr.sge(0, 64)]).unwrap())
        .unwrap();
    aqp2.post_send(
        &SendWr::new(2, read_op(env.guard.stag(), 0), &[env.amr.sge(8192, 64)]).unwrap(),
    )
    .unwrap();
    let got = drain(&env.acq, 2);
    assert_eq!(
        contents(&env.target),
        env.snapshot[1],
        "the new stream wrote through a type 2 window bound to the old one: {}",
        wcs(&got)
    );
    // The Write completes at A once handed to TCP; B's refusal (a Terminate) fails the
    // connection, so the Read behind it does not succeed.
    assert_ne!(got[1].status, WcStatus::Success, "the Read: {}", wcs(&got));
    drop(mw);
}
