//! A local user's request whose remote range wraps the 64-bit Tagged Offset space gets a
//! typed error at post time (`Error::RemoteToWrap`, DDP-7.1-14, RDMAP-7.2-13), nothing is
//! queued, and the connection stays up; the errors of lower layers are kept as typed
//! sources; a handle of another context is `Error::StaleHandle`.

use std::time::Duration;

use warpcore_verbs::*;

mod common;

const T: Duration = Duration::from_secs(10);

#[test]
fn remote_to_wrap_is_a_typed_post_error() {
    let (b, a) = common::link_contexts();
    let (apd, bpd) = (a.alloc_pd(), b.alloc_pd());
    let acq = a.create_cq(64).unwrap();
    let bcq = b.create_cq(64).unwrap();
    let amr = apd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let bmr = bpd
        .alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let bqp = bpd.create_qp(&QpInit::new(&bcq, &bcq)).unwrap();
    let aqp = apd.create_qp(&QpInit::new(&acq, &acq)).unwrap();
    b.listen(7460, &MpaParams::default()).unwrap();
    common::connect_accept(&b, &bqp, &a, &aqp, 7460);
    assert!(matches!(b.next_event(T), Some(CmEvent::Established(_))));
    for op in [
        SendOp::Write {
            remote_stag: bmr.stag(),
            remote_to: u64::MAX - 10,
        },
        SendOp::Read {
            remote_stag: bmr.stag(),
            remote_to: u64::MAX - 63,
        },
    ] {
        let e = aqp
            .post_send(&SendWr::new(1, op, &[amr.sge(0, 64)]).unwrap())
            .unwrap_err();
        assert_eq!(e, Error::RemoteToWrap);
        assert_eq!(e.to_string(), "remote tagged offset plus length wraps 2^64");
    }
    assert!(acq.poll_one().is_none(), "nothing was queued");
    amr.write(0, b"still up").unwrap();
    aqp.post_send(
        &SendWr::new(
            2,
            SendOp::Write {
                remote_stag: bmr.stag(),
                remote_to: 0,
            },
            &[amr.sge(0, 8)],
        )
        .unwrap(),
    )
    .unwrap();
    let c = acq.wait(T).unwrap();
    assert_eq!((c.wr_id, c.status), (2, WcStatus::Success));
    // Completed once in TCP's send buffer (departure 1): wait for it to land.
    let deadline = std::time::Instant::now() + T;
    let mut got = [0u8; 8];
    while &got != b"still up" {
        assert!(
            std::time::Instant::now() < deadline,
            "the Write never landed"
        );
        std::thread::sleep(Duration::from_millis(1));
        bmr.read(0, &mut got).unwrap();
    }
    assert_eq!((aqp.state(), bqp.state()), (QpState::Rts, QpState::Rts));
}

/// Errors of the layers below stay typed: the verbs error names the field or the fault and
/// keeps the engine's error as its source, and its message repeats the source's.
#[test]
fn lower_layer_errors_are_kept_as_typed_sources() {
    use std::error::Error as _;

    // A configuration the engine refuses: which field, and why.
    let (dev, _peer) = link_pair(&LinkConfig::default());
    let mut cfg = Config::new(dev, [10, 0, 0, 9]);
    cfg.engine.max_qps = 0;
    let e = Context::open(cfg).unwrap_err();
    let Error::Config(ConfigError { field, .. }) = &e else {
        panic!("expected Error::Config, got {e:?}");
    };
    assert_eq!(*field, "max_qps");
    let src = e.source().expect("the engine's ConfigError is the source");
    assert!(src.downcast_ref::<ConfigError>().is_some());
    assert!(e.to_string().contains("max_qps"), "{e}");

    // An accessor outside the region: the region's own fault, as a source.
    let (b, _a) = common::link_contexts();
    let mr = b.alloc_pd().alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let e = mr.write(60, &[0; 8]).unwrap_err();
    assert_eq!(e, Error::Memory(MemError::OutOfBounds));
    assert_eq!(
        e.source().and_then(|s| s.downcast_ref::<MemError>()),
        Some(&MemError::OutOfBounds)
    );
    let e = mr.atomic_u64(4).unwrap_err();
    assert_eq!(e, Error::Memory(MemError::Misaligned));
}

/// A CPU the engine core cannot be pinned to is the user's error, named: before, the core
/// ran unpinned and the benchmark ran on CPUs the user had not asked for.
#[test]
fn a_cpu_the_core_cannot_be_pinned_to_is_refused_by_name() {
    for cpu in [1000, 5000] {
        let (dev, _peer) = link_pair(&LinkConfig::default());
        let mut cfg = Config::new(dev, [10, 0, 0, 9]);
        cfg.cpus = vec![cpu];
        let e = Context::open(cfg).unwrap_err();
        assert!(
            matches!(e, Error::Device(warpcore_engine::EngineError::Pin(c)) if c == cpu),
            "{e:?}"
        );
        assert!(e.to_string().contains(&format!("CPU {cpu}")), "{e}");
    }
    // A CPU this process may run on is taken.
    let (dev, _peer) = link_pair(&LinkConfig::default());
    let mut cfg = Config::new(dev, [10, 0, 0, 9]);
    let allowed = core_affinity::get_core_ids().expect("the allowed CPUs");
    cfg.cpus = vec![allowed[0].id];
    Context::open(cfg).expect("pinned to an allowed CPU");
}

/// A link runs one engine core: two CPUs for it are refused, not the second ignored.
#[test]
fn cpus_other_than_one_per_engine_core_are_refused() {
    let allowed = core_affinity::get_core_ids().expect("the allowed CPUs");
    let (dev, _peer) = link_pair(&LinkConfig::default());
    let mut cfg = Config::new(dev, [10, 0, 0, 9]);
    cfg.cpus = vec![allowed[0].id, allowed[0].id];
    let e = Context::open(cfg).unwrap_err();
    assert_eq!(e, Error::CpuCount { given: 2, cores: 1 });
    assert!(
        e.to_string().contains("2 CPU(s) for 1 engine core(s)"),
        "{e}"
    );
}

/// `Error::StaleHandle` covers a handle of another context: `Context::accept` refuses
/// another context's queue pair (whose id would name one of its own: the first QP of each
/// context's core 0 has the same), and nothing is accepted.
#[test]
fn accept_refuses_a_queue_pair_of_another_context() {
    let (server, client) = common::link_contexts();
    let spd = server.alloc_pd();
    let scq = server.create_cq(16).unwrap();
    let sqp = spd.create_qp(&QpInit::new(&scq, &scq)).unwrap();
    server.listen(7610, &MpaParams::default()).unwrap();
    let cpd = client.alloc_pd();
    let ccq = client.create_cq(16).unwrap();
    let cqp = cpd.create_qp(&QpInit::new(&ccq, &ccq)).unwrap();
    assert_eq!(sqp.id(), cqp.id(), "the first QP of each context's core 0");
    cqp.connect([10, 0, 0, 2], 7610, &MpaParams::default(), b"")
        .unwrap();
    let req = loop {
        if let Some(CmEvent::ConnectRequest(r)) = server.next_event(T) {
            break r;
        }
    };
    assert_eq!(server.accept(&req, &cqp, b""), Err(Error::StaleHandle));
    assert_eq!(sqp.state(), QpState::Idle, "nothing was accepted");
    // The request is still there for the server's own queue pair.
    server.accept(&req, &sqp, b"").unwrap();
    assert!(matches!(
        client.next_event(T),
        Some(CmEvent::Established(_))
    ));
}

/// `create_qp` refuses another context's shared receive queue, even one whose protection
/// domain has the same number as the creating one (domains are numbered per context).
#[test]
fn create_qp_refuses_a_shared_receive_queue_of_another_context() {
    let (a, b) = common::link_contexts();
    let pd_a = a.alloc_pd();
    let srq_b = b.alloc_pd().create_srq(8, 1).unwrap();
    let cq = a.create_cq(16).unwrap();
    let init = QpInit::new(&cq, &cq).with_srq(&srq_b);
    assert_eq!(pd_a.create_qp(&init).map(|_| ()), Err(Error::StaleHandle));
    assert_eq!(a.stats().unwrap()[0].qps_live, 0, "nothing was created");
}

/// `Context::unlisten` of a port nothing listens on names the port; one that listens stops,
/// once (a second call is the same error), and can listen again.
#[test]
fn unlisten_of_a_port_not_listened_on_is_refused_naming_it() {
    let (b, _a) = common::link_contexts();
    assert!(matches!(b.unlisten(7470), Err(Error::NotListening(7470))));
    b.listen(7470, &MpaParams::default()).unwrap();
    b.unlisten(7470).unwrap();
    let e = b.unlisten(7470).unwrap_err();
    assert!(matches!(e, Error::NotListening(7470)), "{e:?}");
    assert_eq!(e.to_string(), "not listening on port 7470");
    b.listen(7470, &MpaParams::default()).unwrap();
}

/// A prefix length above 32 is the user's error, named: `Context::open` handed it to
/// smoltcp's `Ipv4Cidr::new`, whose assertion panicked.
#[test]
fn a_prefix_length_above_32_is_refused_naming_it() {
    for len in [33, u8::MAX] {
        let (dev, _peer) = link_pair(&LinkConfig::default());
        let mut cfg = Config::new(dev, [10, 0, 0, 9]);
        cfg.prefix_len = len;
        let e = Context::open(cfg).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Config(ConfigError {
                    field: "prefix_len",
                    ..
                })
            ),
            "{e:?}"
        );
    }
    // 32 (a host route) and 0 (everything on link) stay allowed.
    for len in [0, 32] {
        let (dev, _peer) = link_pair(&LinkConfig::default());
        let mut cfg = Config::new(dev, [10, 0, 0, 9]);
        cfg.prefix_len = len;
        Context::open(cfg).unwrap();
    }
}

/// An inline capacity above `MAX_INLINE` is refused when the queue pair is created, as
/// `ibv_create_qp` refuses a `max_inline_data` above the device's: unbounded, the first
/// inline post of a queue pair asking for `u32::MAX` mapped and faulted in `sq_depth` times
/// 4 GiB for its arena.
#[test]
fn an_inline_capacity_above_max_inline_is_refused_at_create_qp() {
    let (b, _a) = common::link_contexts();
    let pd = b.alloc_pd();
    let cq = b.create_cq(8).unwrap();
    for max_inline in [MAX_INLINE + 1, u32::MAX] {
        let mut init = QpInit::new(&cq, &cq);
        init.max_inline = max_inline;
        let e = pd.create_qp(&init).unwrap_err();
        assert_eq!(e, Error::LimitExceeded("max_inline"));
    }
    let mut init = QpInit::new(&cq, &cq);
    init.max_inline = MAX_INLINE;
    pd.create_qp(&init).unwrap();
}

/// An in-memory link configured by a user (a loss probability from a command line, say) is
/// refused naming the field by `try_link_pair`; `link_pair` panicked on it, and a NaN loss
/// used to inject none at all. A sound configuration still makes a working pair.
#[test]
fn try_link_pair_refuses_a_link_config_naming_the_field() {
    let mut cfg = LinkConfig::default();
    cfg.faults_ab.loss = f64::NAN;
    let e = try_link_pair(&cfg).expect_err("a NaN loss was accepted");
    assert!(
        matches!(e, LinkConfigError::Faults("faults_ab", "loss", _)),
        "{e:?}"
    );
    let mut cfg = LinkConfig::default();
    cfg.faults_ba.duplicate = 1.5;
    let e = try_link_pair(&cfg).expect_err("a duplicate probability of 1.5 was accepted");
    assert!(e.to_string().contains("faults_ba.duplicate"), "{e}");
    let (a, b) = try_link_pair(&LinkConfig::default()).expect("the default link");
    assert!(Context::open(Config::new(a, [198, 18, 0, 1])).is_ok());
    assert!(Context::open(Config::new(b, [198, 18, 0, 2])).is_ok());
}

/// `alloc_mr` of a length no region can hold, or no machine memory could back (every page
/// is touched), is refused naming the length: before, a length above `isize::MAX` read
/// "alignment is not a power of two or length is too large", and one above the machine's
/// memory depended on the kernel's overcommit policy (refused by the default heuristic,
/// handed to the out-of-memory killer under `vm.overcommit_memory=1`). Nothing is
/// registered; a region of an ordinary length still is.
#[test]
fn an_mr_length_beyond_what_a_region_can_hold_is_refused_naming_it() {
    let (b, _a) = common::link_contexts();
    let pd = b.alloc_pd();
    let most = Region::max_allocate_len();
    let mut lens = vec![usize::MAX, isize::MAX as usize + 1, isize::MAX as usize];
    if most < isize::MAX as usize {
        lens.push(most + 1);
    }
    for len in lens {
        let e = pd
            .alloc_mr(len, Access::LOCAL_WRITE)
            .map(|_| ())
            .unwrap_err();
        assert_eq!(e, Error::LimitExceeded("mr length"), "len {len:#x}");
        assert_eq!(e.to_string(), "mr length exceeds the configured limit");
    }
    let mr = pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    mr.write(4088, b"in range").unwrap();
}

/// `post_bind_mw` and `post_fast_reg` refuse a window, fast registration or region of
/// another context (STags are per context: its index would name one of ours), and
/// `create_cq_with_channel` another context's channel (its waits would run the other
/// context's cores): `Error::StaleHandle`, nothing posted. The same calls with this
/// context's handles pass that check.
#[test]
fn binds_fast_registrations_and_channels_of_another_context_are_stale_handles() {
    let (a, b) = common::link_contexts();
    let pd_a = a.alloc_pd();
    let pd_b = b.alloc_pd();
    let cq = a.create_cq(16).unwrap();
    let qp = pd_a.create_qp(&QpInit::new(&cq, &cq)).unwrap();
    let acc = Access::LOCAL_WRITE | Access::MW_BIND;
    let (mr_a, mr_b) = (
        pd_a.alloc_mr(4096, acc).unwrap(),
        pd_b.alloc_mr(4096, acc).unwrap(),
    );
    let (mw_a, mw_b) = (
        pd_a.alloc_mw(MwType::Type1).unwrap(),
        pd_b.alloc_mw(MwType::Type1).unwrap(),
    );
    let (fr_a, fr_b) = (
        pd_a.alloc_fast_reg().unwrap(),
        pd_b.alloc_fast_reg().unwrap(),
    );
    let stag_a = mw_a.stag();
    for (mw, mr) in [(&mw_b, &mr_a), (&mw_a, &mr_b)] {
        assert_eq!(
            qp.post_bind_mw(1, mw, mr, 0, 64, Access::REMOTE_READ),
            Err(Error::StaleHandle)
        );
    }
    assert_eq!(mw_a.stag(), stag_a, "no new key taken");
    for (fr, mr) in [(&fr_b, &mr_a), (&fr_a, &mr_b)] {
        assert_eq!(
            qp.post_fast_reg(2, fr, mr, 0, 64, Access::REMOTE_READ),
            Err(Error::StaleHandle)
        );
    }
    // This context's own handles pass the check, to the next one (an idle queue pair
    // takes no send request).
    let idle = Err(Error::InvalidState(QpState::Idle));
    assert_eq!(
        qp.post_bind_mw(3, &mw_a, &mr_a, 0, 64, Access::REMOTE_READ),
        idle
    );
    assert_eq!(
        qp.post_fast_reg(4, &fr_a, &mr_a, 0, 64, Access::REMOTE_READ),
        idle
    );
    let ch_b = b.create_comp_channel().unwrap();
    assert_eq!(
        a.create_cq_with_channel(16, &ch_b).map(|_| ()),
        Err(Error::StaleHandle)
    );
    let ch_a = a.create_comp_channel().unwrap();
    a.create_cq_with_channel(16, &ch_a).unwrap();
}

/// `QpInit::max_inline` is a capacity of its own (`ibv_qp_cap`'s `max_inline_data` beside
/// `max_send_sge`), and `post_send_inline` takes octets, not SGEs: the one SGE it builds
/// over the queue pair's own arena is not the caller's. A queue pair made to send inline
/// only (`max_sge` 0, `max_inline` 64) refused every inline post with
/// `Error::TooManySges`, an error naming SGEs the caller never gave; the inline post is
/// taken, and an SGE the caller does give is still refused beyond `max_sge`.
#[test]
fn an_inline_only_queue_pair_sends_inline() {
    let (b, a) = common::link_contexts();
    let (apd, bpd) = (a.alloc_pd(), b.alloc_pd());
    let acq = a.create_cq(16).unwrap();
    let bcq = b.create_cq(16).unwrap();
    let amr = apd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let bmr = bpd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let bqp = bpd.create_qp(&QpInit::new(&bcq, &bcq)).unwrap();
    let mut init = QpInit::new(&acq, &acq);
    init.max_sge = 0;
    init.max_inline = 64;
    let aqp = apd.create_qp(&init).unwrap();
    bqp.post_recv(&RecvWr::new(7, &[bmr.sge(0, 64)]).unwrap())
        .unwrap();
    b.listen(7461, &MpaParams::default()).unwrap();
    common::connect_accept(&b, &bqp, &a, &aqp, 7461);
    assert_eq!(
        aqp.post_send_inline(1, SendOp::Send, b"inline only"),
        Ok(())
    );
    let c = acq.wait(T).unwrap();
    assert_eq!((c.wr_id, c.status), (1, WcStatus::Success));
    let r = bcq.wait(T).unwrap();
    assert_eq!((r.wr_id, r.status, r.byte_len), (7, WcStatus::Success, 11));
    let mut got = [0u8; 11];
    bmr.read(0, &mut got).unwrap();
    assert_eq!(&got, b"inline only");
    // The caller's own SGEs are still bounded by max_sge 0.
    let wr = SendWr::new(2, SendOp::Send, &[amr.sge(0, 8)]).unwrap();
    assert_eq!(aqp.post_send(&wr), Err(Error::TooManySges));
    assert_eq!(
        aqp.post_send_list(&[wr]).map_err(|e| e.error),
        Err(Error::TooManySges)
    );
}

/// An inline post refused because the queue pair is not in RTS changes nothing: it used
/// to register the queue pair's inline arena (`sq_depth × max_inline` octets, touched page
/// by page, and a slot of the region table) before the state was asked, so an idle queue
/// pair kept 64 MiB and a table slot after one refused call, against "nothing changed when
/// a call returns an error" and `QpInit::max_inline`'s "an idle queue pair ... holds no
/// arena". Seen here as the table slot: with room for two regions, one refused inline post
/// left room for one.
#[test]
fn a_refused_inline_post_registers_no_arena() {
    let (dev, _peer) = link_pair(&LinkConfig::default());
    let mut cfg = Config::new(dev, [10, 0, 0, 9]);
    cfg.engine.mr_table_capacity = 2;
    let ctx = Context::open(cfg).unwrap();
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(16).unwrap();
    let qp = pd.create_qp(&QpInit::new(&cq, &cq)).unwrap();
    for op in [
        SendOp::Send,
        SendOp::Write {
            remote_stag: 1,
            remote_to: 0,
        },
    ] {
        assert_eq!(
            qp.post_send_inline(1, op, b"not yet"),
            Err(Error::InvalidState(QpState::Idle))
        );
    }
    let regions: Vec<_> = (0..2)
        .map(|i| {
            pd.alloc_mr(64, Access::LOCAL_WRITE)
                .unwrap_or_else(|e| panic!("region {i} refused after a refused inline post: {e}"))
        })
        .collect();
    assert_eq!(regions.len(), 2);
    // Failed, the same holds.
    qp.abort().unwrap();
    assert_eq!(qp.state(), QpState::Error);
    drop(regions);
    assert_eq!(
        qp.post_send_inline(2, SendOp::Send, b"failed"),
        Err(Error::InvalidState(QpState::Error))
    );
    let _a = pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    let _b = pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
}

/// A queue pair asked on an engine core the context does not run is refused naming the
/// core and how many there are: it was `Error::WrongCore`, whose message ("queue pair and
/// connection request are on different engine cores") speaks of a connection request
/// where there is none. Nothing is created: the context's one core still takes its
/// queue pairs.
#[test]
fn a_queue_pair_on_a_core_the_context_lacks_is_refused_naming_it() {
    let (dev, _peer) = link_pair(&LinkConfig::default());
    let ctx = Context::open(Config::new(dev, [10, 0, 0, 9])).unwrap();
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(16).unwrap();
    for core in [1, 3, usize::MAX] {
        let mut init = QpInit::new(&cq, &cq);
        init.core = Some(core);
        let e = pd.create_qp(&init).map(|_| ()).unwrap_err();
        assert_eq!(e, Error::NoSuchCore { core, cores: 1 });
        assert_eq!(
            e.to_string(),
            format!("no engine core {core}: this context runs 1 (0 to 0)")
        );
    }
    let mut init = QpInit::new(&cq, &cq);
    init.core = Some(0);
    assert_eq!(pd.create_qp(&init).unwrap().core(), 0);
}

/// An RDMA Read takes at most one local SGE, none for a Read of no octets (the engine
/// sends it with no Data Sink memory, as the zero-length Read of RFC 6581 §9.2 is sent):
/// `Error::ReadSgeCount` said "exactly one local SGE", while a Read without one is
/// posted and completes. The refusal of two now says what the rule is.
#[test]
fn a_read_takes_at_most_one_local_sge_as_its_error_says() {
    let (b, a) = common::link_contexts();
    let (apd, bpd) = (a.alloc_pd(), b.alloc_pd());
    let acq = a.create_cq(16).unwrap();
    let bcq = b.create_cq(16).unwrap();
    let amr = apd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let bmr = bpd
        .alloc_mr(4096, Access::LOCAL_WRITE | Access::REMOTE_READ)
        .unwrap();
    let bqp = bpd.create_qp(&QpInit::new(&bcq, &bcq)).unwrap();
    let aqp = apd.create_qp(&QpInit::new(&acq, &acq)).unwrap();
    b.listen(7463, &MpaParams::default()).unwrap();
    common::connect_accept(&b, &bqp, &a, &aqp, 7463);
    let read = SendOp::Read {
        remote_stag: bmr.stag(),
        remote_to: 0,
    };
    let e = aqp
        .post_send(&SendWr::new(1, read, &[amr.sge(0, 8), amr.sge(8, 8)]).unwrap())
        .unwrap_err();
    assert_eq!(e, Error::ReadSgeCount);
    assert_eq!(
        e.to_string(),
        "an RDMA Read takes at most one local SGE (none: a Read of no octets)"
    );
    aqp.post_send(&SendWr::new(2, read, &[]).unwrap()).unwrap();
    let c = acq.wait(T).unwrap();
    assert_eq!(
        (c.wr_id, c.opcode, c.status, c.byte_len),
        (2, WcOpcode::Read, WcStatus::Success, 0)
    );
    assert_eq!((aqp.state(), bqp.state()), (QpState::Rts, QpState::Rts));
}
