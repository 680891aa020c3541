//! The runtime's hand-out of connection manager events to an application that reads none
//! for a while: what a network peer can cause without end stays bounded behind the ring.

use std::time::Instant as StdInstant;

use warpcore_engine::clock::Clock;
use warpcore_engine::runtime::{Command, Drive};
use warpcore_engine::tcp::smoltcp::socket::tcp::State;
use warpcore_engine::tcp::smoltcp::time::Instant;
use warpcore_engine::tcp::smoltcp::wire::{Ipv4Address, Ipv4Cidr};
use warpcore_engine::tcp::{ConnId, Stack, StackConfig, TcpTuning};
use warpcore_engine::{CmEvent, EngineConfig, MpaParams};

mod runtime_common;
use runtime_common::core_with;

const PORT: u16 = 4791;
const DEPTH: usize = 16;
const FLOOD: usize = 40;

/// MPA-7.1.1-3 (a malformed Request is refused and reported): the runtime moved every
/// event the core made into a queue of its own behind the application's ring, so the core's
/// bound on waiting `RequestRefused` reports (`event_queue_depth`) never applied and a
/// peer's flood of bad Requests grew that queue without end while the application read no
/// events. The core keeps what the ring has no room for now: the application finds at most
/// the ring's worth, one held, and the core's `event_queue_depth` reports, however long the
/// flood.
#[test]
fn mpa_7_1_1_3_a_flood_of_bad_requests_leaves_bounded_events_behind_the_ring() {
    let origin = StdInstant::now();
    let clock = Clock::new(StdInstant::now);
    let cfg = EngineConfig {
        event_queue_depth: DEPTH,
        ..EngineConfig::default()
    };
    let (core, end) = core_with(Drive::Caller, clock, cfg);
    let (tx, rx) = crossbeam::channel::bounded(1);
    core.submit(Command::Listen(PORT, MpaParams::default(), tx))
        .expect("submit");
    assert!(core.progress_until(1_000, |_| !rx.is_empty()));
    rx.recv().expect("reply").expect("listen");

    // A bad key: a malformed Request (MPA-7.1.2-4), refused with a close.
    let request = b"XPA ID Req Frame\x40\x01\x00\x00";
    let now = || Instant::from_micros(origin.elapsed().as_micros() as i64);
    let mut peer = Stack::new(
        end,
        &StackConfig {
            mac: [0x02, 0, 0, 0, 0, 1],
            ip: Ipv4Cidr::new(Ipv4Address::new(10, 0, 0, 1), 24),
            gateway: None,
            routes: Vec::new(),
            random_seed: 3,
            max_connections: 64,
            out_of_order_budget_bytes: warpcore_engine::tcp::OUT_OF_ORDER_BUDGET_DEFAULT,
        },
        now(),
    )
    .expect("peer stack");
    // One connection after another, each refused before the next opens: the core's loops
    // see one refusal at a time (a flood at once would meet the core's bound within one
    // loop, whatever the runtime does with its events).
    let remote = (Ipv4Address::new(10, 0, 0, 2), PORT);
    for k in 0..FLOOD {
        let c: ConnId = peer
            .connect(remote, None, &TcpTuning::default())
            .expect("connect");
        let mut sent = false;
        let mut refused = false;
        // Time, not loops: a first connection waits for ARP (retried every second).
        let t0 = StdInstant::now();
        while t0.elapsed() < std::time::Duration::from_secs(10) {
            peer.poll(now());
            core.progress();
            let st = peer.state(c);
            if !sent && st == Ok(State::Established) {
                assert_eq!(peer.send(c, request).expect("send"), request.len());
                sent = true;
            }
            if matches!(st, Ok(State::CloseWait | State::Closed)) {
                refused = true;
                break;
            }
        }
        assert!(sent && refused, "connection {k}: {:?}", peer.state(c));
        let _ = peer.abort(c);
        peer.poll(now());
    }
    let (tx, rx) = crossbeam::channel::bounded(1);
    core.submit(Command::Stats(tx)).expect("submit");
    assert!(core.progress_until(1_000, |_| !rx.is_empty()));
    let stats = rx.recv().expect("reply").expect("stats");
    let mut events = Vec::new();
    while let Some(e) = core.next_event() {
        events.push(e);
        core.progress();
    }
    assert!(events
        .iter()
        .all(|e| matches!(e, CmEvent::RequestRefused { .. })));
    assert!(
        events.len() <= 2 * DEPTH + 1,
        "{} events for {FLOOD} refusals",
        events.len()
    );
    assert!(stats.refusals_unreported > 0);
    assert_eq!(
        events.len() as u64 + stats.refusals_unreported,
        FLOOD as u64
    );
}

/// A command or event ring depth that `EngineConfig::validate` refuses (0, or not a power
/// of two) is the caller's error, named, as every other bad setting is
/// (`EngineError::LimitExceeded` with the field): `spawn_core` built the two rings before
/// the core checked its configuration, so such a depth panicked in `spsc::channel`
/// ("capacity must be a power of two") on the caller's thread, and an absurd one
/// (2^40) was allocated before anything refused it.
#[test]
fn spawn_core_refuses_a_bad_ring_depth_with_a_typed_error() {
    use std::sync::Arc;
    use warpcore_engine::mem::MrTable;
    use warpcore_engine::runtime::spawn_core;
    use warpcore_engine::EngineError;
    type Set = fn(&mut EngineConfig);
    let bad: [(&str, Set); 3] = [
        ("command 0", |c| c.command_queue_depth = 0),
        ("command 3", |c| c.command_queue_depth = 3),
        ("event 5", |c| c.event_queue_depth = 5),
    ];
    for drive in [Drive::Thread, Drive::Caller] {
        for (what, set) in bad {
            let mut cfg = EngineConfig::default();
            set(&mut cfg);
            let want = cfg.validate().expect_err(what).field;
            let (spec, _peer) = runtime_common::core_spec(drive);
            let mrs = Arc::new(MrTable::new(cfg.mr_table_capacity));
            let clock = Clock::new(StdInstant::now);
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                spawn_core(0, spec, cfg, mrs, clock).map(|_| ())
            }));
            match r {
                Ok(Err(EngineError::LimitExceeded(field))) => {
                    assert_eq!(field, want, "{drive:?}, {what}")
                }
                Ok(other) => panic!("{drive:?}, {what}: {other:?}"),
                Err(_) => panic!("{drive:?}, {what}: spawn_core panicked"),
            }
        }
    }
}

/// A device that panics in the poll after `armed` is set: a core thread's loop that
/// panics, as a bug would make it.
struct Bomb {
    end: warpcore_engine::tcp::link::LinkEnd,
    armed: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl warpcore_engine::tcp::smoltcp::phy::Device for Bomb {
    type RxToken<'a> = warpcore_engine::tcp::link::LinkRxToken<'a>;
    type TxToken<'a> = warpcore_engine::tcp::link::LinkTxToken<'a>;

    fn receive(&mut self, now: Instant) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        self.end.receive(now)
    }

    fn transmit(&mut self, now: Instant) -> Option<Self::TxToken<'_>> {
        self.end.transmit(now)
    }

    fn capabilities(&self) -> warpcore_engine::tcp::smoltcp::phy::DeviceCapabilities {
        self.end.capabilities()
    }
}

impl warpcore_engine::tcp::PollDevice for Bomb {
    fn begin_poll(&mut self) {
        if self.armed.load(std::sync::atomic::Ordering::Relaxed) {
            panic!("the test's device panicked in the core's loop");
        }
    }

    fn stats(&self) -> warpcore_engine::tcp::DeviceStats {
        self.end.stats()
    }
}

/// A core thread that ended, by a panic or by its handle's shutdown, is seen gone by a
/// [`CoreWatch`](warpcore_engine::runtime::CoreWatch) taken from its handle, which the
/// verbs' completion queues keep instead of the context: a queue outlives its context,
/// and a thread blocked on it had no way to learn that nothing could complete into it
/// any more (`CompletionQueue::wait(Duration::MAX)` waited for ever). A caller-driven core
/// has no watch (its handle answers).
#[test]
fn a_core_watch_sees_its_thread_end_by_a_panic_or_a_shutdown() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;
    use warpcore_engine::mem::MrTable;
    use warpcore_engine::runtime::{spawn_core, CoreSpec};
    let spawn = |armed: &Arc<AtomicBool>| {
        let (spec, _peer) = runtime_common::core_spec(Drive::Thread);
        let (end, _peer2) = warpcore_engine::tcp::link::pair(&Default::default());
        let armed = Arc::clone(armed);
        let spec = CoreSpec {
            device: Box::new(move || Ok(Bomb { end, armed })),
            stack: spec.stack,
            cpu: None,
            drive: Drive::Thread,
        };
        let cfg = EngineConfig::default();
        let mrs = Arc::new(MrTable::new(cfg.mr_table_capacity));
        spawn_core(0, spec, cfg, mrs, Clock::new(StdInstant::now)).expect("core")
    };
    let gone_within = |gone: &dyn Fn() -> bool| {
        let t0 = StdInstant::now();
        while !gone() {
            if t0.elapsed() > Duration::from_secs(10) {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    };
    // A panic.
    let armed = Arc::new(AtomicBool::new(false));
    let core = spawn(&armed);
    let watch = core.watch().expect("a core thread has a watch");
    std::thread::sleep(Duration::from_millis(20));
    assert!(
        !watch.gone() && !core.gone(),
        "gone before anything ended it"
    );
    armed.store(true, Ordering::Relaxed);
    assert!(
        gone_within(&|| watch.gone()),
        "the watch never saw the panic"
    );
    assert!(core.gone());
    drop(core);
    // A shutdown: the handle dropped, the watch kept.
    let core = spawn(&Arc::new(AtomicBool::new(false)));
    let watch = core.watch().expect("a core thread has a watch");
    assert!(!watch.gone());
    drop(core);
    assert!(
        watch.gone(),
        "the watch did not see the shutdown that joined the thread"
    );
    // Caller-driven: no watch.
    let (core, _peer) = runtime_common::core_on(Drive::Caller, Clock::new(StdInstant::now));
    assert!(core.watch().is_none());
}
