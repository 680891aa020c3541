//! Several application threads posting to one queue pair at once through the verbs API:
//! every request is either refused with a typed error (full queue) or completes exactly
//! once, and the data arrives byte for byte.

use std::time::Duration;

use warpcore_verbs::*;

#[test]
fn concurrent_posters_on_one_queue_pair() {
    let (da, db) = link_pair(&LinkConfig::default());
    let server = Context::open(Config::new(db, [10, 0, 0, 2])).unwrap();
    let client = Context::open(Config::new(da, [10, 0, 0, 1])).unwrap();
    let spd = server.alloc_pd();
    let scq = server.create_cq(4096).unwrap();
    let smr = spd
        .alloc_mr(1 << 20, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let sqp = spd.create_qp(&QpInit::new(&scq, &scq)).unwrap();
    server.listen(7200, &MpaParams::default()).unwrap();
    let cpd = client.alloc_pd();
    let ccq = client.create_cq(4096).unwrap();
    let cmr = cpd.alloc_mr(1 << 20, Access::LOCAL_WRITE).unwrap();
    let mut init = QpInit::new(&ccq, &ccq);
    init.sq_depth = 16;
    let cqp = cpd.create_qp(&init).unwrap();
    cqp.connect([10, 0, 0, 2], 7200, &MpaParams::default(), b"")
        .unwrap();
    let Some(CmEvent::ConnectRequest(req)) = server.next_event(Duration::from_secs(10)) else {
        panic!("request")
    };
    server.accept(&req, &sqp, b"").unwrap();
    assert!(matches!(
        client.next_event(Duration::from_secs(10)),
        Some(CmEvent::Established(_))
    ));
    const THREADS: u64 = 4;
    const PER: u64 = 250;
    for t in 0..THREADS {
        let data: Vec<u8> = (0..1024).map(|i| (i as u8) ^ (t as u8 * 37)).collect();
        cmr.write(t as usize * 1024, &data).unwrap();
    }
    let mut full = 0u64;
    std::thread::scope(|s| {
        let mut hs = Vec::new();
        for t in 0..THREADS {
            let (cqp, cmr, smr) = (&cqp, &cmr, &smr);
            hs.push(s.spawn(move || {
                let mut refused = 0u64;
                for k in 0..PER {
                    let op = SendOp::Write {
                        remote_stag: smr.stag(),
                        remote_to: t * 262_144 + (k % 200) * 1024,
                    };
                    let wr = SendWr::new(t * 1000 + k, op, &[cmr.sge(t * 1024, 1024)]).unwrap();
                    loop {
                        match cqp.post_send(&wr) {
                            Ok(()) => break,
                            Err(Error::QueueFull) => {
                                refused += 1;
                                std::thread::yield_now();
                            }
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
                refused
            }));
        }
        for h in hs {
            full += h.join().unwrap();
        }
    });
    let mut ids = Vec::new();
    while ids.len() < (THREADS * PER) as usize {
        let c = ccq.wait(Duration::from_secs(10)).expect("completion");
        assert_eq!(c.status, WcStatus::Success);
        ids.push(c.wr_id);
    }
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(
        ids.len(),
        (THREADS * PER) as usize,
        "each request completes once"
    );
    assert!(
        full > 0,
        "a 16-deep queue under 4 posters must refuse some posts"
    );
    // A final Send after the Writes orders them before we look at the server's memory.
    sqp.post_recv(&RecvWr::new(1, &[smr.sge(1 << 19, 8)]).unwrap())
        .unwrap();
    cqp.post_send(&SendWr::new(9, SendOp::Send, &[]).unwrap())
        .unwrap();
    assert_eq!(scq.wait(Duration::from_secs(10)).unwrap().wr_id, 1);
    for t in 0..THREADS {
        let want: Vec<u8> = (0..1024).map(|i| (i as u8) ^ (t as u8 * 37)).collect();
        let mut got = vec![0u8; 1024];
        smr.read(t as usize * 262_144 + 5 * 1024, &mut got).unwrap();
        assert_eq!(got, want);
    }
}
