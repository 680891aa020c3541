//! Local keys checked when a request runs instead of when it is posted
//! (`QpInit::sges_checked_at_post = false`, what the drop-in libibverbs asks for, as
//! rdma-core's providers behave): the post is accepted; the request completes with
//! `LocalProtection` before anything of it reaches the peer's memory; the requests behind
//! it are flushed; the peer learns of it by a local catastrophic Terminate; and the
//! default (checked at post) still refuses the same requests, typed, queueing nothing.

mod common;

use std::time::{Duration, Instant};

use warpcore_verbs::*;

const T: Duration = Duration::from_secs(10);
const LEN: usize = 1 << 16;

struct Pair {
    client: Context,
    server: Context,
    cpd: ProtectionDomain,
    cqp: QueuePair,
    ccq: CompletionQueue,
    cmr: MemoryRegion,
    csrq: Option<SharedReceiveQueue>,
    sqp: QueuePair,
    smr: MemoryRegion,
    scq: CompletionQueue,
}

impl Pair {
    /// Two caller-driven engines over the in-memory link, one connected QP each; the
    /// client's local keys checked at post or not as `at_post` says, the server's at post.
    fn connect(port: u16, at_post: bool) -> Pair {
        Pair::connect_with(port, at_post, false)
    }

    /// [`Pair::connect`], the client's QP taking its receives from a shared receive queue
    /// (its keys checked as `at_post` says) if `srq`.
    fn connect_with(port: u16, at_post: bool, srq: bool) -> Pair {
        let (server, client) = common::caller_contexts(&LinkConfig::default());
        let remote = Access::LOCAL_WRITE
            | Access::REMOTE_WRITE
            | Access::REMOTE_READ
            | Access::REMOTE_ATOMIC;
        let spd = server.alloc_pd();
        let scq = server.create_cq(256).unwrap();
        let smr = spd.alloc_mr(LEN, remote).unwrap();
        let sqp = spd.create_qp(&QpInit::new(&scq, &scq)).unwrap();
        let cpd = client.alloc_pd();
        let ccq = client.create_cq(256).unwrap();
        let cmr = cpd.alloc_mr(LEN, remote).unwrap();
        let mut init = QpInit::new(&ccq, &ccq);
        init.sges_checked_at_post = at_post;
        let csrq = srq.then(|| {
            let q = cpd.create_srq(16, 1).unwrap();
            q.set_sges_checked_at_post(at_post);
            q
        });
        if let Some(q) = &csrq {
            init = init.with_srq(q);
        }
        let cqp = cpd.create_qp(&init).unwrap();
        common::connect_accept_driven(&server, &sqp, &client, &cqp, port);
        Pair {
            client,
            server,
            cpd,
            cqp,
            ccq,
            cmr,
            csrq,
            sqp,
            smr,
            scq,
        }
    }

    /// A region of another protection domain and a read-only one of the client's: what
    /// the bad SGEs name besides an unknown key and a range past the end.
    fn foreign_regions(&self) -> (MemoryRegion, MemoryRegion) {
        let other = self.client.alloc_pd();
        (
            other.alloc_mr(4096, Access::LOCAL_WRITE).unwrap(),
            self.cpd.alloc_mr(4096, Access::empty()).unwrap(),
        )
    }

    fn both(&self) {
        self.client.progress();
        self.server.progress();
    }

    /// The client's next `n` completions, in order.
    fn client_completions(&self, n: usize) -> Vec<Completion> {
        let mut got = Vec::new();
        let t0 = Instant::now();
        while got.len() < n {
            assert!(
                t0.elapsed() < T,
                "{} of {n} completions: {got:?}",
                got.len()
            );
            self.both();
            while let Some(c) = self.ccq.poll_one() {
                got.push(c);
            }
        }
        got
    }

    /// The client's QP failed on its own account: it is in the error state and the server's
    /// connection ended with a local catastrophic Terminate (0/0/FF, RDMAP-7.1), not one
    /// that blames the server.
    fn assert_failed_locally(&self, case: &str) {
        assert_eq!(self.cqp.state(), QpState::Error, "{case}");
        let end = self.server_end();
        assert!(
            matches!(&end, Some(ConnError::RemoteTerminate(r))
                if (r.code.layer(), r.code.etype(), r.code.code()) == (0, 0, 0xFF)),
            "{case}: the server's connection ended with {end:?}"
        );
    }

    /// Runs both engines until the server reports its connection's end; returns its
    /// error, if that was an error.
    fn server_end(&self) -> Option<ConnError> {
        let t0 = Instant::now();
        loop {
            assert!(t0.elapsed() < T, "the server's connection did not end");
            self.both();
            match self.server.next_event(Duration::ZERO) {
                Some(CmEvent::Error { error, .. }) => return Some(error),
                Some(CmEvent::Disconnected { .. }) => return None,
                _ => {}
            }
        }
    }
}

/// The ways a local SGE can be wrong, each as a bad SGE of `len` octets for an operation
/// that reads (`write` false) or writes (`write` true) local memory.
fn bad_sges(
    p: &Pair,
    other: &MemoryRegion,
    read_only: &MemoryRegion,
    write: bool,
    len: u32,
) -> Vec<(&'static str, Sge)> {
    let mut v = vec![
        (
            "an unknown key",
            Sge {
                stag: p.cmr.stag() ^ 0x5a5a_5a00,
                to: 0,
                len,
            },
        ),
        ("another protection domain's region", other.sge(0, len)),
        (
            "a range past the region's end",
            p.cmr.sge(LEN as u64 - 4, len),
        ),
    ];
    if write {
        v.push(("a region without local write", read_only.sge(0, len)));
    }
    v
}

/// The send queue requests with a bad local SGE, for a fresh connection `p` (its keys),
/// with a region of another PD and a read-only one: a description, the operation and its
/// SGEs.
fn bad_requests(
    p: &Pair,
    other: &MemoryRegion,
    ro: &MemoryRegion,
) -> Vec<(String, SendOp, Vec<Sge>)> {
    let write_to = |to| SendOp::Write {
        remote_stag: p.smr.stag(),
        remote_to: to,
    };
    let read = SendOp::Read {
        remote_stag: p.smr.stag(),
        remote_to: 0,
    };
    let fetch_add = SendOp::AtomicFetchAdd {
        remote_stag: p.smr.stag(),
        remote_to: 0,
        add: 1,
        add_mask: 0,
    };
    let imm = SendOp::WriteWithImm {
        remote_stag: p.smr.stag(),
        remote_to: 0,
        imm: 7,
        solicited: false,
    };
    let mut v = Vec::new();
    // (operation, its name, whether it writes local memory, the SGE's length): a 64 B Write
    // is framed whole (its copy finds the key bad), a 4 KiB one is sent from registered
    // memory, and the rest start in `start_sq`.
    for (op, name, writes, len) in [
        (SendOp::Send, "Send", false, 64),
        (write_to(0), "64 B Write", false, 64),
        (write_to(0), "4 KiB Write", false, 4096),
        (imm, "Write with Immediate", false, 64),
        (read, "Read", true, 64),
        (fetch_add, "FetchAdd", true, 8),
    ] {
        for (what, bad) in bad_sges(p, other, ro, writes, len) {
            v.push((format!("{name} with {what}"), op, vec![bad]));
        }
    }
    // A good SGE first, the bad one second.
    let (what, bad) = bad_sges(p, other, ro, false, 64)[0];
    v.push((
        format!("Send with a good SGE, then {what}"),
        SendOp::Send,
        vec![p.cmr.sge(0, 64), bad],
    ));
    v
}

#[test]
fn a_bad_local_key_posted_fails_when_its_request_runs() {
    let cases = {
        let p = Pair::connect(9400, false);
        let (other, ro) = p.foreign_regions();
        bad_requests(&p, &other, &ro).len()
    };
    for (k, port) in (0..cases).zip(9401..) {
        let p = Pair::connect(port, false);
        let (other, ro) = p.foreign_regions();
        let (case, op, sges) = bad_requests(&p, &other, &ro).swap_remove(k);
        // The peer's memory and a receive for a Send: nothing may land in either.
        p.smr.write(0, &[0xEE; 64]).unwrap();
        p.sqp
            .post_recv(&RecvWr::new(1, &[p.smr.sge(8192, 8192)]).unwrap())
            .unwrap();
        // A good request first, the bad one, an unsignalled good one and a signalled one
        // behind it.
        let good = |id| {
            SendWr::new(
                id,
                SendOp::Write {
                    remote_stag: p.smr.stag(),
                    remote_to: 32768,
                },
                &[p.cmr.sge(0, 16)],
            )
            .unwrap()
        };
        p.cqp.post_send(&good(10)).unwrap();
        let wr = SendWr::new(11, op, &sges).unwrap();
        p.cqp
            .post_send(&wr)
            .unwrap_or_else(|e| panic!("{case}: refused at post: {e}"));
        p.cqp.post_send(&good(12).unsignaled()).unwrap();
        p.cqp.post_send(&good(13)).unwrap();
        let c = p.client_completions(4);
        let got: Vec<(u64, WcStatus)> = c.iter().map(|c| (c.wr_id, c.status)).collect();
        assert_eq!(
            got,
            [
                (10, WcStatus::Success),
                (11, WcStatus::LocalProtection),
                (12, WcStatus::FlushErr),
                (13, WcStatus::FlushErr)
            ],
            "{case}"
        );
        // The peer: a Terminate naming a local catastrophic error, nothing placed.
        p.assert_failed_locally(&case);
        let mut b = [0u8; 64];
        p.smr.read(0, &mut b).unwrap();
        assert_eq!(b, [0xEE; 64], "{case}: the peer's memory changed");
        let recv = p.scq.poll_one();
        assert!(
            recv.is_none_or(|c| c.status == WcStatus::FlushErr),
            "{case}: the peer's receive completed with {recv:?}"
        );
    }
}

/// An SGE of no octets touches no memory: its key is not checked when the request runs,
/// as rdma-core's providers pass it over (and as every copy does).
#[test]
fn an_sge_of_no_octets_is_passed_over_whatever_its_key() {
    let p = Pair::connect(9450, false);
    let junk = Sge {
        stag: 0,
        to: 0,
        len: 0,
    };
    p.cmr.write(0, &[5; 64]).unwrap();
    p.sqp
        .post_recv(&RecvWr::new(1, &[p.smr.sge(0, 4096)]).unwrap())
        .unwrap();
    let send = SendWr::new(20, SendOp::Send, &[p.cmr.sge(0, 64), junk]).unwrap();
    p.cqp.post_send(&send).unwrap();
    let write = SendWr::new(
        21,
        SendOp::Write {
            remote_stag: p.smr.stag(),
            remote_to: 8192,
        },
        &[junk],
    )
    .unwrap();
    p.cqp.post_send(&write).unwrap();
    let read = SendWr::new(
        22,
        SendOp::Read {
            remote_stag: p.smr.stag(),
            remote_to: 0,
        },
        &[junk],
    )
    .unwrap();
    p.cqp.post_send(&read).unwrap();
    let c = p.client_completions(3);
    let got: Vec<(u64, WcStatus)> = c.iter().map(|c| (c.wr_id, c.status)).collect();
    assert_eq!(
        got,
        [
            (20, WcStatus::Success),
            (21, WcStatus::Success),
            (22, WcStatus::Success)
        ]
    );
    let t0 = Instant::now();
    let r = loop {
        assert!(t0.elapsed() < T, "the Send did not arrive");
        p.both();
        if let Some(r) = p.scq.poll_one() {
            break r;
        }
    };
    assert_eq!((r.status, r.byte_len), (WcStatus::Success, 64));
    assert_eq!(p.cqp.state(), QpState::Rts);
}

#[test]
fn a_bad_local_key_in_a_posted_receive_fails_when_a_message_lands() {
    for (k, port) in (0..8).zip(9500..) {
        let on_srq = k >= 4;
        let p = Pair::connect_with(port, false, on_srq);
        let k = k % 4;
        let (other, ro) = p.foreign_regions();
        let (what, bad) = bad_sges(&p, &other, &ro, true, 64)[k];
        let what = format!("{what}{}", if on_srq { " on an SRQ" } else { "" });
        let post = |wr: &RecvWr| match &p.csrq {
            Some(q) => q.post_recv(wr),
            None => p.cqp.post_recv(wr),
        };
        post(&RecvWr::new(21, &[bad]).unwrap())
            .unwrap_or_else(|e| panic!("a receive with {what}: refused at post: {e}"));
        post(&RecvWr::new(22, &[p.cmr.sge(0, 64)]).unwrap()).unwrap();
        p.smr.write(0, &[7; 64]).unwrap();
        p.sqp
            .post_send(&SendWr::new(1, SendOp::Send, &[p.smr.sge(0, 64)]).unwrap())
            .unwrap();
        // A QP's own second receive is flushed with it; an SRQ's stays in the queue.
        let want: &[(u64, WcStatus)] = if on_srq {
            &[(21, WcStatus::LocalProtection)]
        } else {
            &[(21, WcStatus::LocalProtection), (22, WcStatus::FlushErr)]
        };
        let c = p.client_completions(want.len());
        let got: Vec<(u64, WcStatus)> = c.iter().map(|c| (c.wr_id, c.status)).collect();
        assert_eq!(got, want, "a receive with {what}");
        p.assert_failed_locally(&format!("a receive with {what}"));
        // The good buffer behind it got nothing.
        let mut b = [0u8; 64];
        p.cmr.read(0, &mut b).unwrap();
        assert_eq!(
            b, [0; 64],
            "a receive with {what}: the next buffer was written"
        );
    }
}

#[test]
fn by_default_a_bad_local_key_is_refused_at_post_and_nothing_queued() {
    let p = Pair::connect(9600, true);
    let (other, ro) = p.foreign_regions();
    let want = [
        Error::SgeInvalidStag,
        Error::SgeInvalidStag,
        Error::SgeOutOfBounds,
        Error::SgeAccess,
    ];
    for (case, op, sges) in bad_requests(&p, &other, &ro) {
        let bad = sges.last().copied().unwrap();
        let k = bad_sges(&p, &other, &ro, true, bad.len)
            .iter()
            .position(|(_, s)| *s == bad)
            .unwrap();
        let wr = SendWr::new(11, op, &sges).unwrap();
        match p.cqp.post_send(&wr) {
            Err(e) if e == want[k] => {}
            r => panic!("{case}: {r:?}, expected {:?}", want[k]),
        }
    }
    let srq = p.cpd.create_srq(4, 1).unwrap();
    for (what, bad) in bad_sges(&p, &other, &ro, true, 64) {
        assert!(
            p.cqp.post_recv(&RecvWr::new(21, &[bad]).unwrap()).is_err(),
            "a receive with {what} was accepted"
        );
        assert!(
            srq.post_recv(&RecvWr::new(21, &[bad]).unwrap()).is_err(),
            "an SRQ receive with {what} was accepted"
        );
    }
    // Nothing was queued: a good Write completes, alone, and the QP stays up.
    let good = SendWr::new(
        12,
        SendOp::Write {
            remote_stag: p.smr.stag(),
            remote_to: 0,
        },
        &[p.cmr.sge(0, 16)],
    )
    .unwrap();
    p.cqp.post_send(&good).unwrap();
    let c = p.client_completions(1);
    assert_eq!((c[0].wr_id, c[0].status), (12, WcStatus::Success));
    for _ in 0..100 {
        p.both();
    }
    assert!(p.ccq.poll_one().is_none());
    assert_eq!(p.cqp.state(), QpState::Rts);
}
