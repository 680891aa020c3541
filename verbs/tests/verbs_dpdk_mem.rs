//! The memory features of issue 5 over DPDK: two contexts on two net_ring ports in one
//! process (`--no-huge --no-pci`), two connections with CRC32c whose server queue pairs
//! share one receive queue. On them: a type 2 window bound to the first server QP, written
//! and read through by its peer (DDP-8.3-3, RDMAP-8.1.1-6); a fast registration
//! invalidated by a Send with Invalidate (the receive completion names it, RDMAP-5.3-12);
//! Sends from both connections drained from the one shared receive queue; and a Write to
//! the invalidated STag from the second connection, which earns DDP's Terminate 1/1/00
//! (invalid STag, DDP-7.1-10) while the first connection stays up. The pcapng capture is
//! judged by iwdump and tshark (zero violations, malformed frames and bad CRCs), and both
//! must find the Send with Invalidate naming the STag, the Write and Read Request through
//! the window, and the Terminate's code.
#![cfg(feature = "dpdk")]

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use warpcore_engine::proto::wire::rdmap::Opcode;
use warpcore_verbs::*;

const T: Duration = Duration::from_secs(20);
const PORT: u16 = 7600;

fn wc(cq: &CompletionQueue, wr_id: u64, opcode: WcOpcode) -> Completion {
    let c = cq.wait(T).expect("completion");
    assert_eq!(
        (c.wr_id, c.opcode, c.status),
        (wr_id, opcode, WcStatus::Success),
        "{c:?}"
    );
    c
}

fn send_wr(id: u64, op: SendOp, sges: &[Sge]) -> SendWr {
    SendWr::new(id, op, sges).unwrap()
}

/// Waits for `ctx`'s next error event.
fn error_event(ctx: &Context) -> ConnError {
    let deadline = Instant::now() + T;
    loop {
        match ctx.next_event(Duration::from_millis(50)) {
            Some(CmEvent::Error { error, .. }) => return error,
            Some(_) => {}
            None => assert!(Instant::now() < deadline, "no error event"),
        }
    }
}

/// What the run put on the wire, for the capture checks.
struct Expect {
    window: u32,
    fast_reg: u32,
}

fn run(client: &Context, server: &Context) -> Expect {
    let spd = server.alloc_pd();
    let scq = server.create_cq(64).unwrap();
    // Local rights only: remote access goes through the window and the fast registration.
    let smr = spd
        .alloc_mr(64 * 1024, Access::LOCAL_WRITE | Access::MW_BIND)
        .unwrap();
    let srq = spd.create_srq(8, 1).unwrap();
    for i in 0..8u64 {
        srq.post_recv(&RecvWr::new(100 + i, &[smr.sge(32 * 1024 + i * 1024, 1024)]).unwrap())
            .unwrap();
    }
    let init = QpInit::new(&scq, &scq).with_srq(&srq);
    let sqps = [spd.create_qp(&init).unwrap(), spd.create_qp(&init).unwrap()];
    server.listen(PORT, &MpaParams::default()).unwrap();

    let cpd = client.alloc_pd();
    let ccq = client.create_cq(64).unwrap();
    let cmr = cpd.alloc_mr(64 * 1024, Access::LOCAL_WRITE).unwrap();
    let mut cqps = Vec::new();
    for sqp in &sqps {
        let cqp = cpd.create_qp(&QpInit::new(&ccq, &ccq)).unwrap();
        cqp.connect([198, 18, 0, 2], PORT, &MpaParams::default(), b"mem")
            .unwrap();
        let req = match server.next_event(T) {
            Some(CmEvent::ConnectRequest(r)) => r,
            e => panic!("expected a request, got {e:?}"),
        };
        server.accept(&req, sqp, b"").unwrap();
        for ctx in [client, server] {
            match ctx.next_event(T) {
                Some(CmEvent::Established(e)) => assert!(e.crc),
                e => panic!("expected Established, got {e:?}"),
            }
        }
        cqps.push(cqp);
    }
    let data = common::pattern(8192, 5);
    cmr.write(0, &data).unwrap();

    // A type 2 window over [4096, 8192) of the region, bound to the first server QP; its
    // peer writes 3000 octets through it (several FPDUs) and reads them back.
    let mw = spd.alloc_mw(MwType::Type2).unwrap();
    let w = sqps[0]
        .post_bind_mw(
            10,
            &mw,
            &smr,
            4096,
            4096,
            Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    wc(&scq, 10, WcOpcode::BindMw);
    let write = SendOp::Write {
        remote_stag: w,
        remote_to: 5000,
    };
    cqps[0]
        .post_send(&send_wr(1, write, &[cmr.sge(0, 3000)]))
        .unwrap();
    let read = SendOp::Read {
        remote_stag: w,
        remote_to: 5000,
    };
    cqps[0]
        .post_send(&send_wr(2, read, &[cmr.sge(16_384, 3000)]))
        .unwrap();
    wc(&ccq, 1, WcOpcode::Write);
    wc(&ccq, 2, WcOpcode::Read);
    let mut back = vec![0u8; 3000];
    smr.read(5000, &mut back).unwrap();
    assert!(
        back == data[..3000],
        "the Write through the window: first difference at {:?}",
        back.iter().zip(&data).position(|(a, b)| a != b)
    );
    cmr.read(16_384, &mut back).unwrap();
    assert!(
        back == data[..3000],
        "the Read through the window: first difference at {:?}",
        back.iter().zip(&data).position(|(a, b)| a != b)
    );

    // A fast registration of [16384, 17408), written by the first client QP, then
    // invalidated by its Send with Invalidate, which lands in a shared receive buffer.
    let fr = spd.alloc_fast_reg().unwrap();
    let f = sqps[0]
        .post_fast_reg(
            20,
            &fr,
            &smr,
            16_384,
            1024,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )
        .unwrap();
    wc(&scq, 20, WcOpcode::FastReg);
    let write = SendOp::Write {
        remote_stag: f,
        remote_to: 0,
    };
    cqps[0]
        .post_send(&send_wr(3, write, &[cmr.sge(0, 512)]))
        .unwrap();
    cqps[0]
        .post_send(&send_wr(
            4,
            SendOp::SendInvalidate { stag: f },
            &[cmr.sge(1000, 300)],
        ))
        .unwrap();
    wc(&ccq, 3, WcOpcode::Write);
    wc(&ccq, 4, WcOpcode::Send);
    let c = wc(&scq, 100, WcOpcode::Recv);
    assert_eq!(
        (c.qp, c.byte_len, c.invalidated),
        (sqps[0].id(), 300, Some(f))
    );
    assert!(!fr.is_valid());
    let mut got = vec![0u8; 512];
    smr.read(16_384, &mut got).unwrap();
    assert_eq!(got, data[..512]);

    // Both connections drain the shared receive queue: three Sends each, alternating.
    for round in 0..3u64 {
        for (k, cqp) in cqps.iter().enumerate() {
            let len = 200 + 100 * k as u32 + round as u32;
            let off = 1024 * (2 * round + k as u64);
            cqp.post_send(&send_wr(10 + round, SendOp::Send, &[cmr.sge(off, len)]))
                .unwrap();
        }
    }
    let mut per_qp = [Vec::new(), Vec::new()];
    for _ in 0..6 {
        let c = scq.wait(T).expect("receive");
        assert_eq!((c.opcode, c.status), (WcOpcode::Recv, WcStatus::Success));
        let k = sqps.iter().position(|q| q.id() == c.qp).expect("ours");
        let round = per_qp[k].len() as u64;
        let len = 200 + 100 * k as u32 + round as u32;
        assert_eq!(c.byte_len, len);
        let off = 1024 * (2 * round + k as u64) as usize;
        let mut got = vec![0u8; len as usize];
        smr.read(32 * 1024 + (c.wr_id as usize - 100) * 1024, &mut got)
            .unwrap();
        assert_eq!(got, data[off..off + len as usize], "buffer {}", c.wr_id);
        per_qp[k].push(c.wr_id);
    }
    assert_eq!(per_qp.iter().map(Vec::len).collect::<Vec<_>>(), [3, 3]);
    let mut sent: Vec<_> = (0..6)
        .map(|_| {
            let c = ccq.wait(T).expect("Send completion");
            assert_eq!((c.opcode, c.status), (WcOpcode::Send, WcStatus::Success));
            (cqps.iter().position(|q| q.id() == c.qp), c.wr_id)
        })
        .collect();
    sent.sort();
    assert_eq!(
        sent,
        [
            (Some(0), 10),
            (Some(0), 11),
            (Some(0), 12),
            (Some(1), 10),
            (Some(1), 11),
            (Some(1), 12)
        ]
    );
    assert_eq!(srq.len(), 1);

    // A Write to the invalidated STag from the second connection: DDP 1/1/00.
    let write = SendOp::Write {
        remote_stag: f,
        remote_to: 0,
    };
    cqps[1]
        .post_send(&send_wr(30, write, &[cmr.sge(0, 64)]))
        .unwrap();
    let ConnError::RemoteTerminate(rep) = error_event(client) else {
        panic!("the client should receive a Terminate")
    };
    let code = (rep.code.layer(), rep.code.etype(), rep.code.code());
    assert_eq!(code, (1, 1, 0), "{rep:?}");
    let ConnError::LocalTerminate(_) = error_event(server) else {
        panic!("the server should report the Terminate it sent")
    };
    let deadline = Instant::now() + T;
    while (cqps[1].state() != QpState::Error || sqps[1].state() != QpState::Error)
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        (cqps[1].state(), sqps[1].state()),
        (QpState::Error, QpState::Error)
    );
    smr.read(16_384, &mut got).unwrap();
    assert_eq!(got, data[..512], "nothing placed through the dead STag");
    // The first connection is unaffected and closes gracefully.
    assert_eq!(
        (cqps[0].state(), sqps[0].state()),
        (QpState::Rts, QpState::Rts)
    );
    cqps[0].disconnect().unwrap();
    let deadline = Instant::now() + T;
    while (cqps[0].state() != QpState::Error || sqps[0].state() != QpState::Error)
        && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(100));
    Expect {
        window: w,
        fast_reg: f,
    }
}

/// iwdump's view: the opcodes of every connection together and the Terminates' codes.
fn iwdump_view(path: &Path) -> (BTreeSet<u8>, Vec<(u8, u8, u8)>) {
    let report = common::judge::iwdump_report(path, "mem");
    let mut ops = BTreeSet::new();
    let mut terms = Vec::new();
    for c in report.iwarp() {
        assert!(
            c.negotiated.as_ref().is_some_and(|n| n.crc),
            "CRC negotiated"
        );
        for d in &c.directions {
            ops.extend(d.opcodes.keys().map(|o| *o as u8));
            for (_, t) in &d.terminates {
                terms.push((t.code.layer(), t.code.etype(), t.code.code()));
            }
        }
    }
    (ops, terms)
}

fn parse_num(s: &str) -> u64 {
    match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).expect("hex field"),
        None => s.parse().expect("decimal field"),
    }
}

/// tshark's view: one row per iWARP frame with its opcodes, the Invalidate STag, the
/// tagged STag (Writes), the Read Request's source STag and a Terminate's layer, DDP
/// error type and tagged-buffer code.
fn tshark_rows(path: &Path) -> Vec<[Vec<u64>; 6]> {
    let fields = [
        "iwarp_rdma.opcode",
        "iwarp_rdma.inval_stag",
        "iwarp_ddp.stag",
        "iwarp_rdma.srcstag",
        "iwarp_rdma.term_layer",
        "iwarp_rdma.term_errcode_ddp_tagged",
    ];
    let mut args = vec!["-Y", "iwarp_rdma", "-T", "fields", "-E", "aggregator=|"];
    for f in &fields {
        args.extend(["-e", f]);
    }
    warpcore_test_support::tshark::run(path, &args)
        .lines()
        .map(|line| {
            let mut cols = line.split('\t');
            std::array::from_fn(|_| {
                cols.next()
                    .unwrap_or("")
                    .split('|')
                    .filter(|v| !v.is_empty())
                    .map(parse_num)
                    .collect()
            })
        })
        .collect()
}

#[test]
fn windows_fast_registration_invalidation_and_srq_over_net_ring() {
    let (_eal, ca, cb, cap) = common::ring::ring_pair("mem");
    let expect = {
        let client = Context::open(ca).expect("context a");
        let server = Context::open(cb).expect("context b");
        run(&client, &server)
    };
    // iwdump and tshark: zero violations, malformed frames, bad CRCs (the shared judge).
    common::judge::judge_capture(&cap);
    let (ops, terms) = iwdump_view(&cap);
    let want: BTreeSet<u8> = [
        Opcode::Write,
        Opcode::ReadRequest,
        Opcode::ReadResponse,
        Opcode::Send,
        Opcode::SendInvalidate,
        Opcode::Terminate,
    ]
    .iter()
    .map(|o| *o as u8)
    .collect();
    assert!(ops.is_superset(&want), "iwdump saw opcodes {ops:?}");
    assert_eq!(terms, [(1, 1, 0)], "iwdump: the one Terminate");
    if !warpcore_test_support::tshark::present_or_skip("the tshark check of the capture") {
        let _ = std::fs::remove_dir_all(cap.parent().unwrap());
        return;
    }
    let rows = tshark_rows(&cap);
    let has = |op: Opcode, pred: &dyn Fn(&[Vec<u64>; 6]) -> bool| {
        rows.iter().any(|r| r[0].contains(&(op as u64)) && pred(r))
    };
    let (w, f) = (u64::from(expect.window), u64::from(expect.fast_reg));
    assert!(
        has(Opcode::Write, &|r| r[2].contains(&w)),
        "tshark: a Write through the window"
    );
    assert!(
        has(Opcode::ReadRequest, &|r| r[3].contains(&w)),
        "tshark: a Read Request of the window"
    );
    assert!(
        has(Opcode::SendInvalidate, &|r| r[1].contains(&f)),
        "tshark: the Send with Invalidate of the fast registration"
    );
    assert!(
        has(Opcode::Write, &|r| r[2].contains(&f)),
        "tshark: Writes to the fast registration"
    );
    assert!(
        has(Opcode::Terminate, &|r| r[4] == [1] && r[5] == [0]),
        "tshark: the Terminate DDP/tagged/invalid STag: {rows:?}"
    );
    println!(
        "mem: window {w:#010x} Write/Read, fast registration {f:#010x} invalidated by Send with Invalidate, SRQ drained by two QPs, Terminate 1/1/00; iwdump and tshark agree ({} iWARP frames)",
        rows.len()
    );
    let _ = std::fs::remove_dir_all(cap.parent().unwrap());
}
