//! Completion channels (`ibv_comp_channel`): a thread sleeps until an armed completion queue
//! gets a completion; solicited-only arming ignores unsolicited messages; the channel is a
//! descriptor that is readable exactly while an event is pending; a zero timeout returns a
//! pending event; caller-driven contexts refuse channels (nothing would run their cores
//! while the application sleeps).

mod common;

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};

use common::{connect_accept, link_contexts};
use warpcore_verbs::*;

/// Whether `fd` (a channel's descriptor) becomes readable within `within`; polling takes
/// nothing from the channel.
fn readable(fd: impl AsFd, within: Duration) -> bool {
    let t = Timespec::try_from(within).unwrap();
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    poll(&mut fds, Some(&t)).unwrap() == 1
}

/// A connected pair over the link: the server's receive queue `rcq` signals `ch`; four
/// receives posted; the client's `cqp` sends from `cmr` and completes into `ccq`.
#[allow(dead_code)]
struct Setup {
    server: Context,
    client: Context,
    ch: CompletionChannel,
    rcq: CompletionQueue,
    sqp: QueuePair,
    mr: MemoryRegion,
    ccq: CompletionQueue,
    cqp: QueuePair,
    cmr: MemoryRegion,
}

fn setup(port: u16) -> Setup {
    let (server, client) = link_contexts();
    let ch = server.create_comp_channel().unwrap();
    let rcq = server.create_cq_with_channel(16, &ch).unwrap();
    let scq = server.create_cq(16).unwrap();
    let spd = server.alloc_pd();
    let sqp = spd.create_qp(&QpInit::new(&scq, &rcq)).unwrap();
    let mr = spd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    for i in 0..4 {
        sqp.post_recv(&RecvWr::new(i, &[mr.sge(i * 64, 64)]).unwrap())
            .unwrap();
    }
    let ccq = client.create_cq(16).unwrap();
    let cpd = client.alloc_pd();
    let cqp = cpd.create_qp(&QpInit::new(&ccq, &ccq)).unwrap();
    let cmr = cpd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    server.listen(port, &MpaParams::default()).unwrap();
    connect_accept(&server, &sqp, &client, &cqp, port);
    Setup {
        server,
        client,
        ch,
        rcq,
        sqp,
        mr,
        ccq,
        cqp,
        cmr,
    }
}

#[test]
fn an_armed_queue_wakes_the_sleeping_thread_once() {
    let st = setup(7411);
    let (ch, rcq, ccq, cqp, cmr) = (&st.ch, &st.rcq, &st.ccq, &st.cqp, &st.cmr);

    // Not armed: nothing signals, even when a completion arrives.
    assert_eq!(
        ch.get_event(Some(Duration::from_millis(50))).unwrap_err(),
        Error::Timeout
    );
    cqp.post_send(&SendWr::new(1, SendOp::Send, &[cmr.sge(0, 8)]).unwrap())
        .unwrap();
    ccq.wait(Duration::from_secs(5)).unwrap();
    assert!(rcq.wait(Duration::from_secs(5)).is_ok());
    assert_eq!(
        ch.get_event(Some(Duration::from_millis(50))).unwrap_err(),
        Error::Timeout,
        "a queue that was not armed must not signal"
    );

    // Armed: a thread sleeping in get_event wakes when the Send lands, and gets the queue.
    rcq.req_notify(false).unwrap();
    assert!(rcq.poll_one().is_none());
    let t0 = Instant::now();
    let fired = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(100));
            cqp.post_send(&SendWr::new(2, SendOp::Send, &[cmr.sge(0, 8)]).unwrap())
                .unwrap();
        });
        ch.get_event(Some(Duration::from_secs(5))).unwrap()
    });
    assert!(
        t0.elapsed() >= Duration::from_millis(50),
        "woke before the Send"
    );
    assert!(fired.same_as(rcq));
    let wc = fired
        .poll_one()
        .expect("the completion that fired the event");
    assert_eq!(wc.opcode, WcOpcode::Recv);
    ccq.wait(Duration::from_secs(5)).unwrap();

    // One event per arming: the next Send, without arming again, signals nothing.
    cqp.post_send(&SendWr::new(3, SendOp::Send, &[cmr.sge(0, 8)]).unwrap())
        .unwrap();
    ccq.wait(Duration::from_secs(5)).unwrap();
    rcq.wait(Duration::from_secs(5)).unwrap();
    assert_eq!(
        ch.get_event(Some(Duration::from_millis(50))).unwrap_err(),
        Error::Timeout
    );
}

#[test]
fn solicited_only_arming_waits_for_the_solicited_event_flag() {
    let st = setup(7412);
    let (ch, rcq, ccq, cqp, cmr) = (&st.ch, &st.rcq, &st.ccq, &st.cqp, &st.cmr);

    rcq.req_notify(true).unwrap();
    cqp.post_send(&SendWr::new(1, SendOp::Send, &[cmr.sge(0, 8)]).unwrap())
        .unwrap();
    ccq.wait(Duration::from_secs(5)).unwrap();
    rcq.wait(Duration::from_secs(5)).unwrap();
    assert_eq!(
        ch.get_event(Some(Duration::from_millis(100))).unwrap_err(),
        Error::Timeout,
        "an unsolicited Send must not fire a solicited-only arming"
    );
    assert!(!readable(ch, Duration::ZERO), "no token without an event");
    cqp.post_send(&SendWr::new(2, SendOp::SendSe, &[cmr.sge(0, 8)]).unwrap())
        .unwrap();
    ccq.wait(Duration::from_secs(5)).unwrap();
    assert!(
        readable(ch, Duration::from_secs(5)),
        "the descriptor never became readable"
    );
    let fired = ch.get_event(Some(Duration::from_secs(5))).unwrap();
    assert!(fired.same_as(rcq));
    assert!(
        !readable(ch, Duration::ZERO),
        "the descriptor stayed readable after its one event was taken"
    );
    let wc = fired.poll_one().unwrap();
    assert!(wc.solicited);
}

/// A zero timeout, what the drop-in `ibv_get_cq_event` passes on a non-blocking channel,
/// returns the pending event (it used to time out before looking at the channel); with
/// none pending it times out at once.
#[test]
fn a_zero_timeout_returns_the_pending_event() {
    let st = setup(7414);
    let (ch, rcq, ccq, cqp, cmr) = (&st.ch, &st.rcq, &st.ccq, &st.cqp, &st.cmr);
    rcq.req_notify(false).unwrap();
    assert!(rcq.poll_one().is_none());
    assert_eq!(
        ch.get_event(Some(Duration::ZERO)).unwrap_err(),
        Error::Timeout
    );
    cqp.post_send(&SendWr::new(1, SendOp::Send, &[cmr.sge(0, 8)]).unwrap())
        .unwrap();
    ccq.wait(Duration::from_secs(5)).unwrap();
    assert!(readable(ch, Duration::from_secs(5)), "no event within 5 s");
    let fired = ch
        .get_event(Some(Duration::ZERO))
        .expect("the pending event");
    assert!(fired.same_as(rcq));
    assert_eq!(
        ch.get_event(Some(Duration::ZERO)).unwrap_err(),
        Error::Timeout
    );
}

#[test]
fn queues_without_a_channel_refuse() {
    let (server, _client) = link_contexts();
    let cq = server.create_cq(4).unwrap();
    assert_eq!(cq.req_notify(false).unwrap_err(), Error::NoChannel);
}

/// On a caller-driven context the thread waiting on a completion channel runs the engine
/// core: a Send from a thread-driven peer arrives and fires the channel while the only
/// thread of the receiving side sleeps in `get_event` (what the drop-in libibverbs relies
/// on for `ibv_get_cq_event` with WARPCORE_POLL_MODE=caller).
#[test]
fn a_caller_driven_channel_runs_the_cores_while_it_waits() {
    const PORT: u16 = 4800;
    let wait = Duration::from_secs(10);
    let (a, b) = link_pair(&LinkConfig::default());
    let server = Context::open(Config::new(b, [10, 0, 0, 2])).unwrap();
    let mut cfg = Config::new(a, [10, 0, 0, 1]);
    cfg.drive = Drive::Caller;
    let client = Context::open(cfg).unwrap();
    server.listen(PORT, &MpaParams::default()).unwrap();
    let ch = client.create_comp_channel().unwrap();
    let ccq = client.create_cq_with_channel(4, &ch).unwrap();
    let cpd = client.alloc_pd();
    let cqp = cpd.create_qp(&QpInit::new(&ccq, &ccq)).unwrap();
    let cmr = cpd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    cqp.post_recv(&RecvWr::new(7, &[cmr.sge(0, 64)]).unwrap())
        .unwrap();
    cqp.connect([10, 0, 0, 2], PORT, &MpaParams::default(), b"")
        .unwrap();
    let deadline = Instant::now() + wait;
    let req = loop {
        assert!(Instant::now() < deadline, "no connection request");
        client.progress();
        if let Some(CmEvent::ConnectRequest(r)) = server.next_event(Duration::from_millis(1)) {
            break r;
        }
    };
    let scq = server.create_cq(4).unwrap();
    let spd = server.alloc_pd();
    let sqp = spd
        .create_qp(&QpInit {
            core: Some(usize::from(req.request.core)),
            ..QpInit::new(&scq, &scq)
        })
        .unwrap();
    server.accept(&req, &sqp, b"").unwrap();
    let mut up = (false, false);
    while up != (true, true) {
        assert!(Instant::now() < deadline, "not established: {up:?}");
        if let Some(CmEvent::Established(_)) = client.next_event(Duration::from_millis(1)) {
            up.0 = true;
        }
        if let Some(CmEvent::Established(_)) = server.next_event(Duration::from_millis(1)) {
            up.1 = true;
        }
    }
    ccq.req_notify(false).unwrap();
    let smr = spd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    sqp.post_send(&SendWr::new(1, SendOp::Send, &[smr.sge(0, 16)]).unwrap())
        .unwrap();
    let fired = ch.get_event(Some(wait)).unwrap();
    assert!(fired.same_as(&ccq));
    let wc = ccq.poll_one().unwrap();
    assert_eq!((wc.wr_id, wc.byte_len), (7, 16));
}

/// The connection manager's event channel: a thread sleeps until a connection request
/// arrives; the descriptor is readable when events were handed over; nothing pending is a
/// timeout; caller-driven contexts refuse it.
#[test]
fn the_event_channel_wakes_on_connection_manager_events() {
    let (server, client) = link_contexts();
    let ev = server.event_channel().unwrap();
    assert_eq!(
        ev.get_event(Some(Duration::from_millis(50))).unwrap_err(),
        Error::Timeout
    );
    server.listen(7413, &MpaParams::default()).unwrap();
    let ccq = client.create_cq(16).unwrap();
    let cpd = client.alloc_pd();
    let cqp = cpd.create_qp(&QpInit::new(&ccq, &ccq)).unwrap();
    let t0 = Instant::now();
    let req = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(100));
            cqp.connect([10, 0, 0, 2], 7413, &MpaParams::default(), b"hi")
                .unwrap();
        });
        ev.get_event(Some(Duration::from_secs(10))).unwrap()
    });
    assert!(
        t0.elapsed() >= Duration::from_millis(50),
        "woke before the request"
    );
    let CmEvent::ConnectRequest(req) = req else {
        panic!("expected the connection request, got {req:?}");
    };
    assert_eq!(req.private_data, b"hi");
    // Accept; the Established event makes the descriptor readable.
    let scq = server.create_cq(16).unwrap();
    let spd = server.alloc_pd();
    let sqp = spd.create_qp(&QpInit::new(&scq, &scq)).unwrap();
    server.accept(&req, &sqp, b"").unwrap();
    let ev2 = server.event_channel().unwrap();
    assert!(
        readable(&ev2, Duration::from_secs(10)),
        "readable once events came"
    );
    assert!(matches!(
        ev2.get_event(Some(Duration::from_secs(10))).unwrap(),
        CmEvent::Established(_)
    ));
    assert_eq!(
        ev2.get_event(Some(Duration::ZERO)).unwrap_err(),
        Error::Timeout
    );
    assert!(
        !readable(&ev2, Duration::ZERO),
        "still readable after a call found no event"
    );
    let (a, _b) = link_pair(&LinkConfig::default());
    let mut cfg = Config::new(a, [10, 0, 0, 9]);
    cfg.drive = Drive::Caller;
    let polled = Context::open(cfg).unwrap();
    assert!(matches!(
        polled.event_channel().unwrap_err(),
        Error::NeedsEngineThreads(_)
    ));
}

/// `Duration::MAX` (a caller's "for ever") as the timeout of every wait: completion queue
/// waits, the completion channel, the event channel and `next_event` each added it to the
/// current instant, which panicked; now it is a wait without a deadline, and what is
/// pending (or arrives) ends it.
#[test]
fn the_longest_timeout_waits_without_a_deadline() {
    let (server, client) = link_contexts();
    let ch = server.create_comp_channel().unwrap();
    let cq = server.create_cq_with_channel(8, &ch).unwrap();
    let qp = QpId {
        core: 0,
        index: 0,
        generation: 1,
    };
    cq.push_flushed(1, qp, WcOpcode::Send).unwrap();
    assert_eq!(cq.wait(Duration::MAX).unwrap().wr_id, 1);
    // A completion in error ends a solicited wait.
    cq.push_flushed(2, qp, WcOpcode::Send).unwrap();
    let mut out = Vec::new();
    assert_eq!(cq.wait_solicited(Duration::MAX, &mut out), Ok(0));
    assert_eq!(out[0].wr_id, 2);
    cq.req_notify(false).unwrap();
    cq.push_flushed(3, qp, WcOpcode::Send).unwrap();
    assert!(ch.get_event(Some(Duration::MAX)).unwrap().same_as(&cq));

    // A connection request for `next_event`, then one for the event channel (the peer's
    // first request is answered, so it may send another).
    let events = server.event_channel().unwrap();
    server.listen(7415, &MpaParams::default()).unwrap();
    let ccq = client.create_cq(8).unwrap();
    let pd = client.alloc_pd();
    let first = pd.create_qp(&QpInit::new(&ccq, &ccq)).unwrap();
    first
        .connect([10, 0, 0, 2], 7415, &MpaParams::default(), b"")
        .unwrap();
    let Some(CmEvent::ConnectRequest(req)) = server.next_event(Duration::MAX) else {
        panic!("expected the connection request");
    };
    server.reject(&req, b"").unwrap();
    let second = pd.create_qp(&QpInit::new(&ccq, &ccq)).unwrap();
    second
        .connect([10, 0, 0, 2], 7415, &MpaParams::default(), b"")
        .unwrap();
    assert!(matches!(
        events.get_event(Some(Duration::MAX)),
        Ok(CmEvent::ConnectRequest(_))
    ));
}
