//! RFC 7306 through the verbs API with engine threads over the in-memory link: a masked
//! FetchAdd and a CmpSwap (original values returned), a Write with Immediate (data placed,
//! the value in the receiver's completion), an Immediate Data with SE, and the typed
//! refusal on a queue pair with RFC 7306 off (EXT-1.1-1, EXT-5.*, EXT-6.*).

use std::sync::atomic::Ordering;
use std::time::Duration;

use warpcore_verbs::*;

mod common;

const T: Duration = Duration::from_secs(10);

#[test]
fn atomics_and_immediate_data_over_verbs() {
    let (server, client) = common::link_contexts();

    let spd = server.alloc_pd();
    let scq = server.create_cq(64).unwrap();
    let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC;
    let smr = spd.alloc_mr(4096, access).unwrap();
    let sqp = spd.create_qp(&QpInit::new(&scq, &scq)).unwrap();
    sqp.post_recv(&RecvWr::new(1, &[smr.sge(2048, 16)]).unwrap())
        .unwrap();
    sqp.post_recv(&RecvWr::new(2, &[]).unwrap()).unwrap();
    server.listen(7306, &MpaParams::default()).unwrap();

    let cpd = client.alloc_pd();
    let ccq = client.create_cq(64).unwrap();
    let cmr = cpd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let cqp = cpd.create_qp(&QpInit::new(&ccq, &ccq)).unwrap();
    common::connect_accept(&server, &sqp, &client, &cqp, 7306);

    smr.atomic_u64(8)
        .unwrap()
        .store(0x00FF_00FF_00FF_00FF, Ordering::SeqCst);
    // Masked FetchAdd on 16-bit lanes: no carry crosses a lane end (RFC 7306 §5.1.1).
    let fa = SendOp::AtomicFetchAdd {
        remote_stag: smr.stag(),
        remote_to: 8,
        add: 0x0001_0001_0001_0001,
        add_mask: 0x8000_8000_8000_8000,
    };
    cqp.post_send(&SendWr::new(10, fa, &[cmr.sge(0, 8)]).unwrap())
        .unwrap();
    let c = ccq.wait(T).unwrap();
    assert_eq!((c.wr_id, c.status), (10, WcStatus::Success));
    assert_eq!(c.opcode, WcOpcode::AtomicFetchAdd);
    assert_eq!(c.atomic_orig, Some(0x00FF_00FF_00FF_00FF));
    let mut b = [0u8; 8];
    cmr.read(0, &mut b).unwrap();
    assert_eq!(u64::from_ne_bytes(b), 0x00FF_00FF_00FF_00FF);
    assert_eq!(
        smr.atomic_u64(8).unwrap().load(Ordering::SeqCst),
        0x0100_0100_0100_0100
    );
    let cs = SendOp::AtomicCmpSwap {
        remote_stag: smr.stag(),
        remote_to: 8,
        compare: 0x0100_0100_0100_0100,
        compare_mask: u64::MAX,
        swap: 42,
        swap_mask: u64::MAX,
    };
    cqp.post_send(&SendWr::new(11, cs, &[]).unwrap()).unwrap();
    let c = ccq.wait(T).unwrap();
    assert_eq!(c.atomic_orig, Some(0x0100_0100_0100_0100));
    assert_eq!(smr.atomic_u64(8).unwrap().load(Ordering::SeqCst), 42);

    // Write with Immediate, then Immediate Data with SE.
    cmr.write(100, b"written with imm").unwrap();
    let wi = SendOp::WriteWithImm {
        remote_stag: smr.stag(),
        remote_to: 1000,
        imm: 0xFEED,
        solicited: false,
    };
    cqp.post_send(&SendWr::new(12, wi, &[cmr.sge(100, 16)]).unwrap())
        .unwrap();
    let im = SendOp::Immediate {
        imm: 7,
        solicited: true,
    };
    cqp.post_send(&SendWr::new(13, im, &[]).unwrap()).unwrap();
    assert_eq!(ccq.wait(T).unwrap().opcode, WcOpcode::WriteWithImm);
    assert_eq!(ccq.wait(T).unwrap().opcode, WcOpcode::Immediate);
    let r = scq.wait(T).unwrap();
    assert_eq!(
        (r.wr_id, r.opcode, r.imm, r.solicited),
        (1, WcOpcode::RecvImm, Some(0xFEED), false)
    );
    let mut got = [0u8; 16];
    smr.read(1000, &mut got).unwrap();
    assert_eq!(&got, b"written with imm");
    let r = scq.wait(T).unwrap();
    assert_eq!(
        (r.wr_id, r.opcode, r.imm, r.solicited),
        (2, WcOpcode::RecvImm, Some(7), true)
    );
}

#[test]
fn rfc7306_off_is_refused_at_post_time() {
    let (server, client) = common::link_contexts();
    let spd = server.alloc_pd();
    let scq = server.create_cq(16).unwrap();
    let sqp = spd.create_qp(&QpInit::new(&scq, &scq)).unwrap();
    server.listen(7307, &MpaParams::default()).unwrap();
    let cpd = client.alloc_pd();
    let ccq = client.create_cq(16).unwrap();
    let mut init = QpInit::new(&ccq, &ccq);
    init.rfc7306 = false;
    let cqp = cpd.create_qp(&init).unwrap();
    common::connect_accept(&server, &sqp, &client, &cqp, 7307);
    let im = SendOp::Immediate {
        imm: 7,
        solicited: false,
    };
    assert!(matches!(
        cqp.post_send(&SendWr::new(1, im, &[]).unwrap()),
        Err(Error::NotSupported(_))
    ));
    assert_eq!(cqp.state(), QpState::Rts);
}

/// RDMAP-5.3-*, EXT-6.3-*: the solicited-event wait returns at the first solicited receive
/// (here an Immediate Data with SE after two unsolicited messages), keeping the earlier
/// completions; without one it times out with what arrived.
#[test]
fn wait_solicited_returns_at_the_solicited_receive() {
    let (server, client) = common::link_contexts();
    let spd = server.alloc_pd();
    let scq = server.create_cq(16).unwrap();
    let sqp = spd.create_qp(&QpInit::new(&scq, &scq)).unwrap();
    for i in 0..4 {
        sqp.post_recv(&RecvWr::new(i, &[]).unwrap()).unwrap();
    }
    server.listen(7308, &MpaParams::default()).unwrap();
    let cpd = client.alloc_pd();
    let ccq = client.create_cq(16).unwrap();
    let cqp = cpd.create_qp(&QpInit::new(&ccq, &ccq)).unwrap();
    common::connect_accept(&server, &sqp, &client, &cqp, 7308);
    let imm = |imm, solicited| SendOp::Immediate { imm, solicited };
    cqp.post_send(&SendWr::new(1, SendOp::Send, &[]).unwrap())
        .unwrap();
    cqp.post_send(&SendWr::new(2, imm(5, false), &[]).unwrap())
        .unwrap();
    cqp.post_send(&SendWr::new(3, imm(6, true), &[]).unwrap())
        .unwrap();
    let mut out = Vec::new();
    let at = scq.wait_solicited(T, &mut out).unwrap();
    assert_eq!(at, 2);
    let got: Vec<_> = out.iter().map(|c| (c.wr_id, c.solicited, c.imm)).collect();
    assert_eq!(
        got,
        vec![(0, false, None), (1, false, Some(5)), (2, true, Some(6))]
    );
    cqp.post_send(&SendWr::new(4, SendOp::Send, &[]).unwrap())
        .unwrap();
    out.clear();
    assert!(matches!(
        scq.wait_solicited(Duration::from_millis(300), &mut out),
        Err(Error::Timeout)
    ));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].wr_id, 3);
}

/// Inline sends: the payload is copied at post time, so the caller's buffer is reused at
/// once; more inline requests than the send queue depth go through the arena's slots in
/// turn, every payload byte-exact at the receiver; oversize and Read refusals.
#[test]
fn inline_sends_copy_at_post_time() {
    let (server, client) = common::link_contexts();
    let spd = server.alloc_pd();
    let scq = server.create_cq(512).unwrap();
    let smr = spd.alloc_mr(200 * 64, Access::LOCAL_WRITE).unwrap();
    let mut sinit = QpInit::new(&scq, &scq);
    sinit.rq_depth = 256;
    let sqp = spd.create_qp(&sinit).unwrap();
    server.listen(7309, &MpaParams::default()).unwrap();
    let cpd = client.alloc_pd();
    let ccq = client.create_cq(512).unwrap();
    let mut init = QpInit::new(&ccq, &ccq);
    init.sq_depth = 8;
    init.max_inline = 64;
    let cqp = cpd.create_qp(&init).unwrap();
    common::connect_accept(&server, &sqp, &client, &cqp, 7309);
    assert_eq!(
        cqp.post_send_inline(1, SendOp::Send, &[0u8; 65]),
        Err(Error::LimitExceeded("inline data"))
    );
    let rd = SendOp::Read {
        remote_stag: 1,
        remote_to: 0,
    };
    assert_eq!(
        cqp.post_send_inline(1, rd, &[0u8; 8]),
        Err(Error::InvalidInline)
    );
    // Immediate Data carries no payload (EXT-6.3-2): inline octets for it are refused, not
    // dropped (it was posted, the octets silently left out).
    let imm = SendOp::Immediate {
        imm: 9,
        solicited: false,
    };
    assert_eq!(
        cqp.post_send_inline(1, imm, &[0u8; 8]),
        Err(Error::InvalidInline)
    );
    const N: u64 = 200;
    let mut posted_recv = 0u64;
    let mut buf = [0u8; 64];
    let mut done = 0u64;
    for i in 0..N {
        while posted_recv < N && posted_recv < i + 16 {
            let o = posted_recv * 64;
            sqp.post_recv(&RecvWr::new(posted_recv, &[smr.sge(o, 64)]).unwrap())
                .unwrap();
            posted_recv += 1;
        }
        // The same stack buffer every time, overwritten right after the post returns.
        let len = (i % 64 + 1) as usize;
        for (k, b) in buf.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(7).wrapping_add(k as u8);
        }
        loop {
            match cqp.post_send_inline(i, SendOp::Send, &buf[..len]) {
                Ok(()) => break,
                Err(Error::QueueFull) => {
                    let c = ccq.wait(T).unwrap();
                    assert_eq!((c.wr_id, c.status), (done, WcStatus::Success));
                    done += 1;
                }
                Err(e) => panic!("{e}"),
            }
        }
        buf.fill(0xEE);
    }
    while done < N {
        assert_eq!(ccq.wait(T).unwrap().wr_id, done);
        done += 1;
    }
    for i in 0..N {
        let c = scq.wait(T).unwrap();
        let len = (i % 64 + 1) as usize;
        assert_eq!((c.wr_id, c.byte_len as usize), (i, len));
        let mut got = vec![0u8; len];
        smr.read(i as usize * 64, &mut got).unwrap();
        let want: Vec<u8> = (0..len)
            .map(|k| (i as u8).wrapping_mul(7).wrapping_add(k as u8))
            .collect();
        assert_eq!(got, want, "inline send {i}");
    }
}

/// An Immediate Data request with octets in its SGEs is refused naming what is wrong:
/// Immediate Data carries no payload (EXT-6.3-2). It was refused as
/// `Error::MessageTooLong`, whose documentation says "longer than 2^32 - 1 octets", for
/// an SGE of 8 octets. An Immediate whose SGEs hold no octets still goes out, and nothing
/// of the refused one was queued.
#[test]
fn immediate_data_with_octets_is_refused_by_name() {
    let (b, a) = common::link_contexts();
    let (apd, bpd) = (a.alloc_pd(), b.alloc_pd());
    let acq = a.create_cq(16).unwrap();
    let bcq = b.create_cq(16).unwrap();
    let amr = apd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let bmr = bpd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let bqp = bpd.create_qp(&QpInit::new(&bcq, &bcq)).unwrap();
    let aqp = apd.create_qp(&QpInit::new(&acq, &acq)).unwrap();
    bqp.post_recv(&RecvWr::new(7, &[bmr.sge(0, 64)]).unwrap())
        .unwrap();
    b.listen(7462, &MpaParams::default()).unwrap();
    common::connect_accept(&b, &bqp, &a, &aqp, 7462);
    let imm = SendOp::Immediate {
        imm: 0x1122,
        solicited: false,
    };
    let e = aqp
        .post_send(&SendWr::new(1, imm, &[amr.sge(0, 8)]).unwrap())
        .unwrap_err();
    assert_eq!(e, Error::ImmediatePayload);
    assert_eq!(
        e.to_string(),
        "Immediate Data carries no payload: its SGEs must hold no octets"
    );
    assert_eq!(
        aqp.post_send_list(&[SendWr::new(2, imm, &[amr.sge(0, 1), amr.sge(8, 0)]).unwrap()])
            .map_err(|e| e.error),
        Err(Error::ImmediatePayload)
    );
    assert!(acq.poll_one().is_none(), "nothing was queued");
    aqp.post_send(&SendWr::new(3, imm, &[amr.sge(0, 0)]).unwrap())
        .unwrap();
    let c = acq.wait(T).unwrap();
    assert_eq!((c.wr_id, c.status), (3, WcStatus::Success));
    let r = bcq.wait(T).unwrap();
    assert_eq!(
        (r.wr_id, r.status, r.imm),
        (7, WcStatus::Success, Some(0x1122))
    );
}
