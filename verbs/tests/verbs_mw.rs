//! Memory windows, fast registration and invalidation through the verbs API with engine
//! threads over the in-memory link: the server binds a type 2 window with a Bind request
//! and advertises its STag in a Send queued right behind it; the client writes and reads
//! through it and invalidates it with a Send with Invalidate; then a fast registration,
//! a Local Invalidate and the typed post-time refusals. Then what becomes of a region
//! whose windows outlive its handle's deregistration.

use std::time::Duration;

use warpcore_verbs::*;

mod common;

const T: Duration = Duration::from_secs(10);

fn wc(cq: &CompletionQueue, wr_id: u64, opcode: WcOpcode) -> Completion {
    let c = cq.wait(T).unwrap();
    assert_eq!(
        (c.wr_id, c.opcode, c.status),
        (wr_id, opcode, WcStatus::Success),
        "{c:?}"
    );
    c
}

#[test]
fn windows_and_fast_registration_over_verbs() {
    let (server, client) = common::link_contexts();

    let spd = server.alloc_pd();
    let scq = server.create_cq(64).unwrap();
    // Local rights only: remote access goes through the window.
    let smr = spd
        .alloc_mr(8192, Access::LOCAL_WRITE | Access::MW_BIND)
        .unwrap();
    let sqp = spd.create_qp(&QpInit::new(&scq, &scq)).unwrap();
    sqp.post_recv(&RecvWr::new(1, &[smr.sge(0, 64)]).unwrap())
        .unwrap();
    server.listen(7400, &MpaParams::default()).unwrap();

    let cpd = client.alloc_pd();
    let ccq = client.create_cq(64).unwrap();
    let cmr = cpd.alloc_mr(8192, Access::LOCAL_WRITE).unwrap();
    let cqp = cpd.create_qp(&QpInit::new(&ccq, &ccq)).unwrap();
    for i in 0..3 {
        cqp.post_recv(&RecvWr::new(100 + i, &[cmr.sge(4096 + 64 * i, 64)]).unwrap())
            .unwrap();
    }
    common::connect_accept(&server, &sqp, &client, &cqp, 7400);

    // Bind, then advertise in the same send queue: the Send goes out after the bind ran.
    let mw = spd.alloc_mw(MwType::Type2).unwrap();
    assert!(!mw.is_bound());
    let w = sqp
        .post_bind_mw(
            10,
            &mw,
            &smr,
            1024,
            2048,
            Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    assert_eq!(w, mw.stag());
    smr.write(6000, &w.to_be_bytes()).unwrap();
    sqp.post_send(&SendWr::new(11, SendOp::Send, &[smr.sge(6000, 4)]).unwrap())
        .unwrap();
    wc(&scq, 10, WcOpcode::BindMw);
    wc(&scq, 11, WcOpcode::Send);
    assert!(mw.is_bound());
    wc(&ccq, 100, WcOpcode::Recv);
    let mut got = [0u8; 4];
    cmr.read(4096, &mut got).unwrap();
    let stag = u32::from_be_bytes(got);
    assert_eq!(stag, w);

    // Write and Read through the window.
    cmr.write(0, b"through the window").unwrap();
    let write = SendOp::Write {
        remote_stag: stag,
        remote_to: 1500,
    };
    cqp.post_send(&SendWr::new(20, write, &[cmr.sge(0, 18)]).unwrap())
        .unwrap();
    let read = SendOp::Read {
        remote_stag: stag,
        remote_to: 1500,
    };
    cqp.post_send(&SendWr::new(21, read, &[cmr.sge(512, 18)]).unwrap())
        .unwrap();
    wc(&ccq, 20, WcOpcode::Write);
    wc(&ccq, 21, WcOpcode::Read);
    let mut back = [0u8; 18];
    cmr.read(512, &mut back).unwrap();
    assert_eq!(&back, b"through the window");
    smr.read(1500, &mut back).unwrap();
    assert_eq!(&back, b"through the window");

    // The client invalidates the window it was given; the server's receive names it.
    cqp.post_send(&SendWr::new(22, SendOp::SendInvalidate { stag }, &[cmr.sge(0, 4)]).unwrap())
        .unwrap();
    wc(&ccq, 22, WcOpcode::Send);
    let c = wc(&scq, 1, WcOpcode::Recv);
    assert_eq!(c.invalidated, Some(stag));
    assert!(!mw.is_bound());

    // Fast registration of 256 octets at 4096 of the region, advertised, written by the
    // client, then invalidated locally; the posted requests run in order.
    let fr = spd.alloc_fast_reg().unwrap();
    let f = sqp
        .post_fast_reg(
            30,
            &fr,
            &smr,
            4096,
            256,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    smr.write(6000, &f.to_be_bytes()).unwrap();
    sqp.post_send(&SendWr::new(31, SendOp::Send, &[smr.sge(6000, 4)]).unwrap())
        .unwrap();
    wc(&scq, 30, WcOpcode::FastReg);
    wc(&scq, 31, WcOpcode::Send);
    wc(&ccq, 101, WcOpcode::Recv);
    cmr.read(4096 + 64, &mut got).unwrap();
    assert_eq!(u32::from_be_bytes(got), f);
    assert!(fr.is_valid());
    let write = SendOp::Write {
        remote_stag: f,
        remote_to: 8,
    };
    cqp.post_send(&SendWr::new(32, write, &[cmr.sge(0, 18)]).unwrap())
        .unwrap();
    wc(&ccq, 32, WcOpcode::Write);
    // A Write completes when sent; the Read behind it returns once it was placed.
    let read = SendOp::Read {
        remote_stag: f,
        remote_to: 8,
    };
    cqp.post_send(&SendWr::new(35, read, &[cmr.sge(1024, 18)]).unwrap())
        .unwrap();
    wc(&ccq, 35, WcOpcode::Read);
    smr.read(4096 + 8, &mut back).unwrap();
    assert_eq!(&back, b"through the window");
    sqp.post_local_invalidate(33, f, true).unwrap();
    wc(&scq, 33, WcOpcode::LocalInvalidate);
    assert!(!fr.is_valid());
    // A second registration gets a new key: the old STag never matches again.
    let f2 = sqp
        .post_fast_reg(34, &fr, &smr, 0, 64, Access::REMOTE_READ)
        .unwrap();
    wc(&scq, 34, WcOpcode::FastReg);
    assert_ne!(f2, f);
    assert!(fr.is_valid());

    // Typed refusals at post time, nothing queued.
    let plain = spd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    assert_eq!(
        sqp.post_bind_mw(40, &mw, &plain, 0, 8, Access::REMOTE_READ),
        Err(Error::Stag(MemError::BindNotAllowed))
    );
    assert_eq!(
        sqp.post_bind_mw(41, &mw, &smr, 8000, 1000, Access::REMOTE_READ),
        Err(Error::Stag(MemError::OutOfBounds))
    );
    assert_eq!(
        sqp.post_local_invalidate(42, 0x00AB_CD00, false),
        Err(Error::Stag(MemError::InvalidStag))
    );
    let other = client.alloc_pd().alloc_mw(MwType::Type2).unwrap();
    assert_eq!(
        cqp.post_bind_mw(43, &other, &cmr, 0, 8, Access::REMOTE_READ),
        Err(Error::Stag(MemError::WrongPd))
    );
    // The region stays while a window is bound to it: dropping it is refused by the table
    // (the window keeps the memory alive either way).
    let w3 = sqp
        .post_bind_mw(44, &mw, &smr, 0, 64, Access::REMOTE_READ)
        .unwrap();
    wc(&scq, 44, WcOpcode::BindMw);
    assert_eq!(w3, mw.stag());
    assert_eq!(
        sqp.post_send_inline(45, SendOp::LocalInvalidate { stag: w3 }, b"x"),
        Err(Error::InvalidInline)
    );
    assert!(scq.poll_one().is_none());
}

/// A server and a client context, connected: the server's domain, completion queue and
/// queue pair; the client's completion queue, queue pair and an 8 KiB region.
struct Pair {
    server: Context,
    spd: ProtectionDomain,
    scq: CompletionQueue,
    sqp: QueuePair,
    ccq: CompletionQueue,
    cqp: QueuePair,
    cmr: MemoryRegion,
    _client: Context,
}

fn pair(port: u16) -> Pair {
    let (server, client) = common::link_contexts();
    let spd = server.alloc_pd();
    let scq = server.create_cq(64).unwrap();
    let sqp = spd.create_qp(&QpInit::new(&scq, &scq)).unwrap();
    server.listen(port, &MpaParams::default()).unwrap();
    let cpd = client.alloc_pd();
    let ccq = client.create_cq(64).unwrap();
    let cmr = cpd.alloc_mr(8192, Access::LOCAL_WRITE).unwrap();
    let cqp = cpd.create_qp(&QpInit::new(&ccq, &ccq)).unwrap();
    common::connect_accept(&server, &sqp, &client, &cqp, port);
    Pair {
        server,
        spd,
        scq,
        sqp,
        ccq,
        cqp,
        cmr,
        _client: client,
    }
}

impl Pair {
    /// Registrations of the server's region table.
    fn registered(&self) -> u64 {
        self.server.stats().unwrap()[0].mrs_registered
    }

    /// The client's Write of `len` octets of its region to `stag`, `to`; its completion.
    fn write(&self, wr_id: u64, stag: u32, to: u64, len: u32) -> Completion {
        let write = SendOp::Write {
            remote_stag: stag,
            remote_to: to,
        };
        self.cqp
            .post_send(&SendWr::new(wr_id, write, &[self.cmr.sge(0, len)]).unwrap())
            .unwrap();
        self.ccq.wait(T).unwrap()
    }

    /// Waits until the client's queue pair is in the error state (a Terminate came).
    fn client_failed(&self) -> bool {
        let t0 = std::time::Instant::now();
        while t0.elapsed() < T {
            if self.cqp.state() == QpState::Error {
                return true;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        false
    }
}

/// `MemoryRegion::deregister` refuses while a window is bound to the region (as
/// `ibv_dereg_mr` does) and hands the region back unchanged; once the window is gone it
/// deregisters.
#[test]
fn deregister_is_refused_while_a_window_is_bound() {
    let p = pair(7410);
    let smr = p
        .spd
        .alloc_mr(4096, Access::LOCAL_WRITE | Access::MW_BIND)
        .unwrap();
    let mw = p.spd.alloc_mw(MwType::Type1).unwrap();
    p.sqp
        .post_bind_mw(1, &mw, &smr, 0, 64, Access::REMOTE_READ)
        .unwrap();
    wc(&p.scq, 1, WcOpcode::BindMw);
    let before = p.registered();
    let (smr, e) = smr.deregister().unwrap_err();
    assert_eq!(e, Error::Memory(MemError::Busy));
    assert_eq!(p.registered(), before, "nothing changed");
    smr.write(0, b"still mine").unwrap();
    drop(mw);
    smr.deregister().unwrap();
    assert_eq!(p.registered(), before - 2);
}

/// A region dropped while a window is bound to it cannot wait for the window: its own
/// STag stops working at once (a peer's Write to it earns a Terminate) while the window
/// still serves, and the registration ends when the window goes: nothing keeps the
/// region's STag writable after both handles are gone.
#[test]
fn a_dropped_region_stops_at_once_and_ends_with_its_last_window() {
    let p = pair(7411);
    let region = std::sync::Arc::new(Region::allocate(8192, 4096).unwrap());
    let smr = p
        .spd
        .register(
            std::sync::Arc::clone(&region),
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::MW_BIND,
        )
        .unwrap();
    let mr_stag = smr.stag();
    let mw = p.spd.alloc_mw(MwType::Type1).unwrap();
    let w = p
        .sqp
        .post_bind_mw(1, &mw, &smr, 0, 64, Access::REMOTE_WRITE)
        .unwrap();
    wc(&p.scq, 1, WcOpcode::BindMw);
    let sink = p.spd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let before = p.registered();
    drop(smr);
    assert_eq!(p.registered(), before, "the window still holds the region");
    // The window serves: a Write through it, and a Send behind it to know it was placed.
    p.cmr.write(0, b"through the window").unwrap();
    assert_eq!(p.write(2, w, 8, 18).status, WcStatus::Success);
    p.sqp
        .post_recv(&RecvWr::new(3, &[sink.sge(0, 8)]).unwrap())
        .unwrap();
    p.cqp
        .post_send(&SendWr::new(4, SendOp::Send, &[p.cmr.sge(0, 8)]).unwrap())
        .unwrap();
    wc(&p.ccq, 4, WcOpcode::Send);
    wc(&p.scq, 3, WcOpcode::Recv);
    let mut got = [0u8; 18];
    region.read_at(8, &mut got).unwrap();
    assert_eq!(&got, b"through the window");
    drop(mw);
    assert_eq!(
        p.registered(),
        before - 2,
        "the window's deallocation ended the region's registration"
    );
    // The region's own STag: refused, nothing placed.
    p.cmr.write(0, b"after dereg").unwrap();
    let _ = p.write(5, mr_stag, 100, 11);
    assert!(
        p.client_failed(),
        "a Write to a deregistered region's STag was accepted"
    );
    let mut got = [0u8; 11];
    region.read_at(100, &mut got).unwrap();
    assert_eq!(got, [0; 11]);
}

/// The region's own STag stops at the drop, not when its last window goes: a Write to it
/// while the window is still bound is refused.
#[test]
fn a_dropped_region_with_a_bound_window_refuses_its_own_stag() {
    let p = pair(7412);
    let smr = p
        .spd
        .alloc_mr(
            8192,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::MW_BIND,
        )
        .unwrap();
    let mr_stag = smr.stag();
    let mw = p.spd.alloc_mw(MwType::Type1).unwrap();
    p.sqp
        .post_bind_mw(1, &mw, &smr, 0, 64, Access::REMOTE_READ)
        .unwrap();
    wc(&p.scq, 1, WcOpcode::BindMw);
    drop(smr);
    p.cmr.write(0, b"after dereg").unwrap();
    let _ = p.write(2, mr_stag, 100, 11);
    assert!(
        p.client_failed(),
        "a Write to a dropped region's STag was placed while a window was bound"
    );
    assert!(mw.is_bound(), "the window is not the region");
}

/// A fast registration reaches its region's memory: while it is valid the region is not
/// deregistered (`Busy`, the handle comes back), so a peer can never write through it into
/// memory whose region the application deregistered; once it is invalidated the region
/// deregisters.
#[test]
fn deregister_is_refused_while_a_fast_registration_uses_the_region() {
    let p = pair(7413);
    let smr = p.spd.alloc_mr(8192, Access::LOCAL_WRITE).unwrap();
    let fr = p.spd.alloc_fast_reg().unwrap();
    let f = p
        .sqp
        .post_fast_reg(
            1,
            &fr,
            &smr,
            0,
            4096,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )
        .unwrap();
    wc(&p.scq, 1, WcOpcode::FastReg);
    let (smr, e) = smr.deregister().unwrap_err();
    assert_eq!(e, Error::Memory(MemError::Busy));
    p.sqp.post_local_invalidate(2, f, false).unwrap();
    wc(&p.scq, 2, WcOpcode::LocalInvalidate);
    smr.deregister().unwrap();
    assert!(!fr.is_valid());
}

/// A server whose engine core runs only when the test runs it (`Drive::Caller`), so that
/// requests can be posted and act before they execute, connected to a client on `port`
/// `conns` times: the server's context, domain, completion queue and queue pairs; the
/// client's context and queue pairs.
struct CallerPair {
    server: Context,
    spd: ProtectionDomain,
    scq: CompletionQueue,
    sqps: Vec<QueuePair>,
    _client: (Context, Vec<QueuePair>),
}

fn caller_pair(port: u16, conns: usize) -> CallerPair {
    let (da, db) = link_pair(&LinkConfig::default());
    let mut cs = Config::new(db, [10, 0, 0, 2]);
    cs.drive = Drive::Caller;
    let server = Context::open(cs).unwrap();
    let client = Context::open(Config::new(da, [10, 0, 0, 1])).unwrap();
    let spd = server.alloc_pd();
    let scq = server.create_cq(64).unwrap();
    server.listen(port, &MpaParams::default()).unwrap();
    let cpd = client.alloc_pd();
    let ccq = client.create_cq(64).unwrap();
    let (mut sqps, mut cqps) = (Vec::new(), Vec::new());
    for _ in 0..conns {
        let sqp = spd.create_qp(&QpInit::new(&scq, &scq)).unwrap();
        let cqp = cpd.create_qp(&QpInit::new(&ccq, &ccq)).unwrap();
        common::connect_accept(&server, &sqp, &client, &cqp, port);
        let t0 = std::time::Instant::now();
        while sqp.state() != QpState::Rts {
            server.progress();
            assert!(t0.elapsed() < T);
        }
        sqps.push(sqp);
        cqps.push(cqp);
    }
    CallerPair {
        server,
        spd,
        scq,
        sqps,
        _client: (client, cqps),
    }
}

impl CallerPair {
    /// Runs the server's core until `n` completions came; their (wr_id, status).
    fn completions(&self, n: usize) -> Vec<(u64, WcStatus)> {
        let mut done = Vec::new();
        let t0 = std::time::Instant::now();
        while done.len() < n {
            self.server.progress();
            if let Some(c) = self.scq.poll_one() {
                done.push((c.wr_id, c.status));
            }
            assert!(t0.elapsed() < T, "{done:?}");
        }
        done
    }

    fn registered(&self) -> u64 {
        self.server.stats().unwrap()[0].mrs_registered
    }
}

/// A bind or fast registration that fails when it runs (here: its region went between post
/// and execution), and one flushed behind it, leave the window and the fast-registration
/// STag as they were; the next bind and fast registration (on another queue pair) work.
/// The handles named their STags by the key the previous request would have left, so one
/// failure made every later request fail.
#[test]
fn a_failed_bind_or_fast_registration_does_not_poison_its_handle() {
    let p = caller_pair(7414, 2);
    let smr = p
        .spd
        .alloc_mr(8192, Access::LOCAL_WRITE | Access::MW_BIND)
        .unwrap();
    let gone = p
        .spd
        .alloc_mr(4096, Access::LOCAL_WRITE | Access::MW_BIND)
        .unwrap();
    let mw = p.spd.alloc_mw(MwType::Type1).unwrap();
    let fr = p.spd.alloc_fast_reg().unwrap();
    let rights = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    p.sqps[0]
        .post_bind_mw(1, &mw, &gone, 0, 64, Access::REMOTE_READ)
        .unwrap();
    p.sqps[0]
        .post_fast_reg(2, &fr, &gone, 0, 64, rights)
        .unwrap();
    drop(gone);
    assert_eq!(
        p.completions(2),
        vec![(1, WcStatus::MwBind), (2, WcStatus::FlushErr)]
    );
    assert!(!mw.is_bound() && !fr.is_valid());
    let w = p.sqps[1]
        .post_bind_mw(3, &mw, &smr, 0, 64, Access::REMOTE_READ)
        .unwrap();
    let f = p.sqps[1]
        .post_fast_reg(4, &fr, &smr, 64, 64, rights)
        .unwrap();
    assert_eq!(
        p.completions(2),
        vec![(3, WcStatus::Success), (4, WcStatus::Success)],
        "a bind and a fast registration after a failed one"
    );
    assert_eq!((mw.stag(), fr.stag()), (w, f));
    assert!(mw.is_bound() && fr.is_valid());
}

/// A fast registration that fails because its STag is still valid (the documented
/// "invalidate first") does not poison the handle either: after the Local Invalidate,
/// the next fast registration works.
#[test]
fn a_fast_registration_refused_as_still_valid_does_not_poison_its_handle() {
    let p = caller_pair(7415, 2);
    let smr = p.spd.alloc_mr(8192, Access::LOCAL_WRITE).unwrap();
    let fr = p.spd.alloc_fast_reg().unwrap();
    let f1 = p.sqps[0]
        .post_fast_reg(1, &fr, &smr, 0, 64, Access::REMOTE_READ)
        .unwrap();
    p.sqps[0]
        .post_fast_reg(2, &fr, &smr, 0, 64, Access::REMOTE_READ)
        .unwrap();
    assert_eq!(
        p.completions(2),
        vec![(1, WcStatus::Success), (2, WcStatus::LocalProtection)]
    );
    p.sqps[1].post_local_invalidate(3, f1, false).unwrap();
    let f3 = p.sqps[1]
        .post_fast_reg(4, &fr, &smr, 0, 64, Access::REMOTE_READ)
        .unwrap();
    assert_eq!(
        p.completions(2),
        vec![(3, WcStatus::Success), (4, WcStatus::Success)],
        "fast registration after invalidation"
    );
    assert_eq!(fr.stag(), f3);
    assert!(fr.is_valid());
}

/// Dropping a fast-registration STag or a window with requests for it still queued frees it
/// at once, whatever key those requests would leave: the queued requests fail when they
/// run, and no STag of the dropped handle ever becomes valid. (The drop freed only the key
/// of the last request posted or the one before; with two or more queued it freed nothing
/// and the queued registration made an STag valid that no handle owned.)
#[test]
fn dropping_a_handle_with_queued_requests_frees_it() {
    let p = caller_pair(7416, 2);
    let smr = p
        .spd
        .alloc_mr(8192, Access::LOCAL_WRITE | Access::MW_BIND)
        .unwrap();
    let before = p.registered();
    let fr = p.spd.alloc_fast_reg().unwrap();
    let a = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let f1 = p.sqps[0].post_fast_reg(1, &fr, &smr, 0, 4096, a).unwrap();
    p.sqps[0].post_local_invalidate(2, f1, false).unwrap();
    p.sqps[0].post_fast_reg(3, &fr, &smr, 0, 4096, a).unwrap();
    drop(fr);
    assert_eq!(p.registered(), before, "the drop freed the STag");
    assert_eq!(
        p.completions(3),
        vec![
            (1, WcStatus::LocalProtection),
            (2, WcStatus::FlushErr),
            (3, WcStatus::FlushErr)
        ]
    );
    assert_eq!(p.registered(), before, "nothing came back");
    // The same for a window with two binds queued.
    let mw = p.spd.alloc_mw(MwType::Type1).unwrap();
    for id in [4, 5] {
        p.sqps[1]
            .post_bind_mw(id, &mw, &smr, 0, 64, Access::REMOTE_WRITE)
            .unwrap();
    }
    drop(mw);
    assert_eq!(p.registered(), before);
    assert_eq!(
        p.completions(2),
        vec![(4, WcStatus::MwBind), (5, WcStatus::FlushErr)]
    );
    assert_eq!(p.registered(), before);
    // Nothing keeps the region registered.
    smr.deregister().unwrap();
}

/// ibverbs: `IBV_WR_REG_MR` then a Send through its new key, posted together, is valid:
/// the send queue runs the registration first. With local keys checked at post (the
/// default) the Send would be refused ([`Error::SgeInvalidStag`]: the registration has
/// not run; the server's core runs only when the test runs it); with the check off (as the
/// drop-in library has it) the Send's keys are checked when it starts, after the
/// registration ran, and it goes through.
#[test]
fn a_send_through_a_fast_registration_posted_before_it_with_keys_checked_when_it_runs() {
    let (da, db) = link_pair(&LinkConfig::default());
    let mut cs = Config::new(db, [10, 0, 0, 2]);
    cs.drive = Drive::Caller;
    let server = Context::open(cs).unwrap();
    let client = Context::open(Config::new(da, [10, 0, 0, 1])).unwrap();
    let spd = server.alloc_pd();
    let scq = server.create_cq(64).unwrap();
    server.listen(7416, &MpaParams::default()).unwrap();
    let cpd = client.alloc_pd();
    let ccq = client.create_cq(64).unwrap();
    let cmr = cpd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let mut init = QpInit::new(&scq, &scq);
    init.sges_checked_at_post = false;
    let sqp = spd.create_qp(&init).unwrap();
    let cqp = cpd.create_qp(&QpInit::new(&ccq, &ccq)).unwrap();
    cqp.post_recv(&RecvWr::new(9, &[cmr.sge(0, 64)]).unwrap())
        .unwrap();
    common::connect_accept(&server, &sqp, &client, &cqp, 7416);
    let t0 = std::time::Instant::now();
    while sqp.state() != QpState::Rts {
        server.progress();
        assert!(t0.elapsed() < T);
    }
    let smr = spd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    smr.write(128, b"through the new key").unwrap();
    let fr = spd.alloc_fast_reg().unwrap();
    let f1 = sqp
        .post_fast_reg(1, &fr, &smr, 128, 64, Access::LOCAL_WRITE)
        .unwrap();
    let sge = |stag| Sge {
        stag,
        to: 0,
        len: 19,
    };
    sqp.post_send(&SendWr::new(2, SendOp::Send, &[sge(f1)]).unwrap())
        .expect("valid once the registration before it ran");
    let mut done = Vec::new();
    while done.len() < 2 {
        server.progress();
        if let Some(c) = scq.poll_one() {
            done.push((c.wr_id, c.status));
        }
        assert!(t0.elapsed() < 2 * T, "{done:?}");
    }
    assert_eq!(done, vec![(1, WcStatus::Success), (2, WcStatus::Success)]);
    let c = ccq.wait(T).unwrap();
    assert_eq!((c.wr_id, c.status, c.byte_len), (9, WcStatus::Success, 19));
    let mut got = [0u8; 19];
    cmr.read(0, &mut got).unwrap();
    assert_eq!(&got, b"through the new key");
}
