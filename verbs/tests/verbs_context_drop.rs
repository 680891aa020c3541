//! A context dropped while its connections are up: the destroys its queue pairs queued
//! are carried out (the peer is reset, not left to its keep-alive), and a caller-driven
//! core whose loop panicked refuses commands instead of hanging a drop.

mod common;

use std::time::Duration;

use common::{caller_contexts, connect_accept, connect_accept_driven, link_contexts};
use warpcore_verbs::*;

/// The server's next ending of a connection: waited for up to 20 s with an engine thread
/// (under the 30 s in which the keep-alive probes would find the peer gone: the ending
/// sought is the peer's RST), or within `loops` runs of a caller-driven core.
fn ending(server: &Context, driven: bool) -> Option<CmEvent> {
    if !driven {
        let t0 = std::time::Instant::now();
        while let Some(left) = Duration::from_secs(20).checked_sub(t0.elapsed()) {
            match server.next_event(left) {
                Some(e @ (CmEvent::Disconnected { .. } | CmEvent::Error { .. })) => return Some(e),
                Some(_) => {}
                None => return None,
            }
        }
        return None;
    }
    for _ in 0..100_000 {
        server.progress();
        if let Some(e @ (CmEvent::Disconnected { .. } | CmEvent::Error { .. })) =
            server.next_event(Duration::ZERO)
        {
            return Some(e);
        }
    }
    None
}

/// The user drops its queue pair, then its context (engine threads): the dropped queue
/// pair is destroyed, which aborts its connection (`EngineCore::destroy_qp`), so the peer
/// learns of the end at once (an RST), not from its keep-alive timeout 30 s later (nor
/// never, without keep-alives).
#[test]
fn dropping_the_context_after_its_queue_pair_resets_the_peer() {
    let (server, client) = link_contexts();
    server.listen(7501, &MpaParams::default()).unwrap();
    let spd = server.alloc_pd();
    let scq = server.create_cq(64).unwrap();
    let sqp = spd.create_qp(&QpInit::new(&scq, &scq)).unwrap();
    let cpd = client.alloc_pd();
    let ccq = client.create_cq(64).unwrap();
    let cqp = cpd.create_qp(&QpInit::new(&ccq, &ccq)).unwrap();
    connect_accept(&server, &sqp, &client, &cqp, 7501);
    // Established on the server too.
    let t0 = std::time::Instant::now();
    while sqp.state() != QpState::Rts {
        assert!(t0.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(cqp);
    drop(ccq);
    drop(cpd);
    drop(client);
    let e = ending(&server, false);
    assert!(
        matches!(e, Some(CmEvent::Disconnected { qp, cause: DisconnectCause::Reset }) if qp == sqp.id()),
        "the server's connection was not ended: {e:?} (state {:?})",
        sqp.state()
    );
}

/// The same with caller-driven cores: the drop's destroy waits in the command ring, and
/// the context's shutdown must carry it out before the core goes.
#[test]
fn dropping_a_caller_driven_context_after_its_queue_pair_resets_the_peer() {
    let (server, client) = caller_contexts(&LinkConfig::default());
    let spd = server.alloc_pd();
    let scq = server.create_cq(64).unwrap();
    let sqp = spd.create_qp(&QpInit::new(&scq, &scq)).unwrap();
    let cpd = client.alloc_pd();
    let ccq = client.create_cq(64).unwrap();
    let cqp = cpd.create_qp(&QpInit::new(&ccq, &ccq)).unwrap();
    connect_accept_driven(&server, &sqp, &client, &cqp, 7502);
    for _ in 0..1000 {
        server.progress();
        client.progress();
        if sqp.state() == QpState::Rts {
            break;
        }
    }
    assert_eq!(sqp.state(), QpState::Rts);
    drop(cqp);
    drop(ccq);
    drop(cpd);
    drop(client);
    let e = ending(&server, true);
    assert!(
        matches!(e, Some(CmEvent::Disconnected { qp, cause: DisconnectCause::Reset }) if qp == sqp.id()),
        "the server's connection was not ended: {e:?} (state {:?})",
        sqp.state()
    );
}

/// A caller-driven core whose loop panicked (here: the caller's own test in
/// `progress_until`, run inside the loop) is never run again. A queue pair dropped while
/// that core's command ring is full waited for room that never comes: the drop spun
/// for ever. A core that panicked is gone, as a core thread that ended is
/// (`EngineError::CoreGone`): the drop, and every post, gives up at once.
#[test]
fn dropping_a_queue_pair_of_a_panicked_caller_driven_core_does_not_hang() {
    let (dev_a, _dev_b) = link_pair(&LinkConfig::default());
    let mut cfg = Config::new(dev_a, [10, 0, 0, 1]);
    cfg.drive = Drive::Caller;
    cfg.engine.command_queue_depth = 2;
    let ctx = Context::open(cfg).unwrap();
    let pd = ctx.alloc_pd();
    let cq = ctx.create_cq(16).unwrap();
    let mr = pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let qp = pd.create_qp(&QpInit::new(&cq, &cq)).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ctx.progress_until(10, || panic!("the caller's test panicked"))
    }));
    assert!(r.is_err());
    // Fill the command ring (receives are queued through it).
    let mut queued = 0;
    for i in 0..16 {
        if qp
            .post_recv(&RecvWr::new(i, &[mr.sge(0, 64)]).unwrap())
            .is_err()
        {
            break;
        }
        queued += 1;
    }
    assert!(queued <= 2, "{queued} receives queued on a ring of 2");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(qp);
        let _ = tx.send(());
    });
    assert!(
        rx.recv_timeout(Duration::from_secs(10)).is_ok(),
        "the queue pair's drop never returned"
    );
}

/// A context dropped with a connection request it never answered (reported, neither
/// accepted nor rejected): its core resets the request's connection as it stops, so the
/// initiator learns at once, not at its MPA startup timeout (10 s) waiting for a Reply
/// that can no longer come.
#[test]
fn dropping_a_context_with_a_request_pending_resets_its_initiator() {
    let (server, client) = caller_contexts(&LinkConfig::default());
    server.listen(7503, &MpaParams::default()).unwrap();
    let cpd = client.alloc_pd();
    let ccq = client.create_cq(64).unwrap();
    let cqp = cpd.create_qp(&QpInit::new(&ccq, &ccq)).unwrap();
    cqp.connect([10, 0, 0, 2], 7503, &MpaParams::default(), b"")
        .unwrap();
    let mut reported = false;
    for _ in 0..10_000 {
        server.progress();
        client.progress();
        if let Some(CmEvent::ConnectRequest(_)) = server.next_event(Duration::ZERO) {
            reported = true;
            break;
        }
    }
    assert!(reported, "no connection request reached the server");
    drop(server);
    let t0 = std::time::Instant::now();
    let mut ended = None;
    for _ in 0..100_000 {
        client.progress();
        if let Some(e @ (CmEvent::Error { .. } | CmEvent::Disconnected { .. })) =
            client.next_event(Duration::ZERO)
        {
            ended = Some(e);
            break;
        }
    }
    assert!(
        matches!(ended, Some(CmEvent::Error { qp, .. }) if qp == cqp.id()),
        "the initiator was not told: {ended:?} after {:?} (state {:?})",
        t0.elapsed(),
        cqp.state()
    );
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
}

/// A control call (here `Context::stats`) whose command is queued on a caller-driven core
/// when another thread's loop on that core panics: the core is gone, its command is never
/// applied, and the call must say so (`Error::EngineGone`) at once, as a call made after
/// the panic does (`CoreGone` from the refused submit). It spun instead, trying the
/// poisoned core and the reply channel back to back at full speed, for the whole call
/// timeout (30 s). The panic is forced after the call's command is queued: the holder
/// keeps the core (inside `progress_until`) until the caller thread is about to call,
/// and a while more.
#[test]
fn a_control_call_on_a_core_that_panics_meanwhile_returns_at_once() {
    use std::sync::mpsc;
    let (dev_a, _dev_b) = link_pair(&LinkConfig::default());
    let mut cfg = Config::new(dev_a, [10, 0, 0, 1]);
    cfg.drive = Drive::Caller;
    let ctx = Context::open(cfg).unwrap();
    let (held_tx, held_rx) = mpsc::channel::<()>();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let holder = {
        let ctx = ctx.clone();
        std::thread::spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                ctx.progress_until(u32::MAX, || {
                    let _ = held_tx.send(());
                    let _ = go_rx.recv();
                    panic!("the holder's test panicked");
                })
            }));
            assert!(r.is_err());
        })
    };
    held_rx.recv().unwrap();
    let (about_tx, about_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel();
    {
        let ctx = ctx.clone();
        std::thread::spawn(move || {
            about_tx.send(()).unwrap();
            let _ = done_tx.send(ctx.stats().map(|_| ()));
        });
    }
    about_rx.recv().unwrap();
    // The call queues its command (a push under a mutex) and then waits for the reply.
    std::thread::sleep(Duration::from_millis(200));
    go_tx.send(()).unwrap();
    holder.join().unwrap();
    match done_rx.recv_timeout(Duration::from_secs(10)) {
        Ok(Err(Error::EngineGone)) => {}
        Ok(other) => panic!("the call returned {other:?}"),
        Err(_) => panic!("the call still waits for a core that panicked"),
    }
}

/// Queues one flushed Send completion of work request `wr_id` on `cq`.
fn push_one_flushed(cq: &CompletionQueue, wr_id: u64) {
    let qp = QpId {
        core: 0,
        index: 0,
        generation: 0,
    };
    cq.push_flushed(wr_id, qp, WcOpcode::Send).unwrap();
}

/// The blocking waits `wants` reported in turn on `rx`, each within 10 s and each
/// `Error::EngineGone` (not still waiting on `on`).
fn each_engine_gone(
    rx: &std::sync::mpsc::Receiver<(&str, Result<(), Error>)>,
    wants: &[&str],
    on: &str,
) {
    for want in wants {
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok((what, r)) => {
                assert_eq!(what, *want);
                assert!(matches!(r, Err(Error::EngineGone)), "{what}: {r:?}");
            }
            Err(_) => panic!("{want} still waits on {on}"),
        }
    }
}

/// Blocking waits on a caller-driven context whose core's loop panicked (the only core it
/// has): nothing will ever run it, so nothing will complete into its queues or signal its
/// channel. `CompletionQueue::wait`, `wait_solicited` and `CompletionChannel::get_event`
/// with no deadline waited for ever (spinning and yielding), where posts and control calls
/// on that core already give up with `Error::EngineGone`; they must too, once the queue
/// holds nothing more. `Context::next_event` waited out its whole timeout; it returns
/// `None` at once.
#[test]
fn blocking_waits_on_a_caller_driven_core_that_panicked_return() {
    use std::sync::mpsc;
    let (dev_a, _dev_b) = link_pair(&LinkConfig::default());
    let mut cfg = Config::new(dev_a, [10, 0, 0, 1]);
    cfg.drive = Drive::Caller;
    let ctx = Context::open(cfg).unwrap();
    let ch = ctx.create_comp_channel().unwrap();
    let cq = ctx.create_cq_with_channel(16, &ch).unwrap();
    cq.req_notify(false).unwrap();
    // A completion queued before the panic is still handed out.
    push_one_flushed(&cq, 7);
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ctx.progress_until(10, || panic!("the caller's test panicked"))
    }));
    assert!(r.is_err());
    assert_eq!(
        ch.get_event(Some(Duration::ZERO)).map(|q| q.id()).ok(),
        Some(cq.id())
    );
    assert_eq!(cq.wait(Duration::MAX).map(|c| c.wr_id).ok(), Some(7));
    let (tx, rx) = mpsc::channel();
    {
        let (cq, ch) = (cq.clone(), ch.clone());
        std::thread::spawn(move || {
            let _ = tx.send(("wait", cq.wait(Duration::MAX).map(|_| ())));
            let mut out = Vec::new();
            let _ = tx.send((
                "wait_solicited",
                cq.wait_solicited(Duration::MAX, &mut out).map(|_| ()),
            ));
            cq.req_notify(false).unwrap();
            let _ = tx.send(("get_event", ch.get_event(None).map(|_| ())));
        });
    }
    each_engine_gone(
        &rx,
        &["wait", "wait_solicited", "get_event"],
        "a core that panicked",
    );
    // The connection manager's wait: `None` (no event can come), not the whole timeout.
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(ctx.next_event(Duration::MAX).is_none());
    });
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(10)).ok(),
        Some(true),
        "next_event still waits on a core that panicked"
    );
}

/// Blocking waits on a completion queue whose context (engine threads) was dropped: the
/// drop shut the core threads down, so nothing can complete into the queue any more, yet
/// the queue lives on (it does not keep its context alive). `CompletionQueue::wait` and
/// `wait_solicited` with no deadline waited for ever (parking in short slices, asking
/// nothing); they return `Error::EngineGone` once the queue holds nothing more, as on a
/// caller-driven context whose loop panicked.
#[test]
fn blocking_waits_on_a_queue_whose_context_was_dropped_return() {
    use std::sync::mpsc;
    let (dev_a, _dev_b) = link_pair(&LinkConfig::default());
    let ctx = Context::open(Config::new(dev_a, [10, 0, 0, 1])).unwrap();
    assert!(!ctx.caller_driven());
    let cq = ctx.create_cq(16).unwrap();
    // A completion queued before the drop is still handed out.
    push_one_flushed(&cq, 9);
    drop(ctx);
    assert_eq!(cq.wait(Duration::MAX).map(|c| c.wr_id).ok(), Some(9));
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(("wait", cq.wait(Duration::MAX).map(|_| ())));
        let mut out = Vec::new();
        let _ = tx.send((
            "wait_solicited",
            cq.wait_solicited(Duration::MAX, &mut out).map(|_| ()),
        ));
    });
    each_engine_gone(
        &rx,
        &["wait", "wait_solicited"],
        "a queue whose context was dropped",
    );
}
