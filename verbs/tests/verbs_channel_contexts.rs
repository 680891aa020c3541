//! How completions and connection manager events reach application threads
//! through the verbs' channels and queues.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::link_contexts;
use warpcore_verbs::*;

/// A queue pair names completion queues of its own context only (as a channel must be of
/// the queue's context, and `ibv_create_qp` refuses another device context's CQ): a
/// caller-driven context's polls of a queue made by another context run that other
/// context's cores, never the queue pair's, so its completions would never come.
#[test]
fn a_queue_pair_refuses_a_completion_queue_of_another_context() {
    let (server, client) = link_contexts();
    let scq = server.create_cq(8).unwrap();
    let ccq = client.create_cq(8).unwrap();
    let cpd = client.alloc_pd();
    assert!(matches!(
        cpd.create_qp(&QpInit::new(&scq, &scq)),
        Err(Error::StaleHandle)
    ));
    assert!(matches!(
        cpd.create_qp(&QpInit::new(&ccq, &scq)),
        Err(Error::StaleHandle)
    ));
    assert!(matches!(
        cpd.create_qp(&QpInit::new(&scq, &ccq)),
        Err(Error::StaleHandle)
    ));
    // A queue of a channel counts as its context's too; the context's own still work.
    let ch = client.create_comp_channel().unwrap();
    let chcq = client.create_cq_with_channel(8, &ch).unwrap();
    cpd.create_qp(&QpInit::new(&ccq, &chcq)).unwrap();
    let sch = server.create_comp_channel().unwrap();
    let schcq = server.create_cq_with_channel(8, &sch).unwrap();
    assert!(matches!(
        cpd.create_qp(&QpInit::new(&ccq, &schcq)),
        Err(Error::StaleHandle)
    ));
}

/// Two clones of one event channel wait while core 0 hands over events one at a time:
/// every event reaches exactly one of them, and none sleeps through one.
#[test]
fn two_waiters_on_one_event_channel_take_every_event_once() {
    let (server, _client) = link_contexts();
    let ev = server.event_channel().unwrap();
    let got = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    const N: u64 = 200;
    std::thread::scope(|s| {
        for _ in 0..2 {
            let (ev, got, stop) = (ev.clone(), Arc::clone(&got), Arc::clone(&stop));
            s.spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    match ev.get_event(Some(Duration::from_millis(20))) {
                        Ok(CmEvent::NeighborResolved(_)) => {
                            got.fetch_add(1, Ordering::AcqRel);
                        }
                        Ok(e) => panic!("unexpected {e:?}"),
                        Err(Error::Timeout) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
            });
        }
        for k in 0..N {
            // Our own address's peer on the link answers ARP; known after the first.
            server
                .resolve_neighbor([10, 0, 0, 1], Duration::from_secs(2))
                .unwrap();
            let until = Instant::now() + Duration::from_secs(5);
            while got.load(Ordering::Acquire) < k + 1 {
                assert!(Instant::now() < until, "event {k} never taken");
                std::thread::yield_now();
            }
        }
        stop.store(true, Ordering::Release);
    });
    assert_eq!(got.load(Ordering::Acquire), N);
}
