//! Arming a completion queue racing the cores' pushes (ibv_req_notify_cq's
//! contract: a completion added after the arming signals the channel, so the loop "arm,
//! poll, sleep" never sleeps through one), solicited-only arming, and several waiters on
//! one channel. Short stress runs: two producer threads (two cores sharing one queue).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use warpcore_engine::{Completion, CompletionChannel, CompletionQueue, QpId, WcOpcode, WcStatus};

fn wc(k: u64, solicited: bool) -> Completion {
    Completion {
        wr_id: k,
        qp: QpId {
            core: (k & 1) as u16,
            index: 1,
            generation: 1,
        },
        opcode: WcOpcode::Recv,
        status: WcStatus::Success,
        byte_len: 0,
        solicited,
        invalidated: None,
        imm: None,
        atomic_orig: None,
    }
}

/// Two producers push completions one at a time (a run now and then) while the consumer
/// runs the verbs' loop: arm, drain, and when it has not seen them all, sleep on the
/// channel. Every push after the arming must signal, so the sleep never times out.
#[test]
fn arm_poll_sleep_never_sleeps_through_a_completion() {
    const PER: u64 = 3_000;
    let ch = Arc::new(CompletionChannel::new().unwrap());
    let cq = Arc::new(CompletionQueue::with_channel(1 << 14, Arc::clone(&ch)).unwrap());
    let producers: Vec<_> = (0..2u64)
        .map(|p| {
            let cq = Arc::clone(&cq);
            std::thread::spawn(move || {
                let mut k = 0;
                while k < PER {
                    if k % 7 == 3 && k + 3 <= PER {
                        cq.push_run(3, |j| wc(p + 2 * (k + j as u64), false));
                        k += 3;
                    } else {
                        cq.push(wc(p + 2 * k, false));
                        k += 1;
                    }
                    if k % 64 == 0 {
                        std::thread::yield_now();
                    }
                }
            })
        })
        .collect();
    let mut seen = 0u64;
    let mut out = [wc(0, false); 16];
    while seen < 2 * PER {
        cq.arm(false);
        loop {
            let n = cq.pop_into(&mut out);
            if n == 0 {
                break;
            }
            seen += n as u64;
        }
        if seen == 2 * PER {
            break;
        }
        let ev = ch.get_event(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(
            ev,
            Some(cq.id()),
            "slept through a completion ({seen} seen)"
        );
    }
    for p in producers {
        p.join().unwrap();
    }
    assert!(!cq.overrun());
}

/// Solicited-only arming: a solicited completion pushed after the arming signals, whatever
/// the unsolicited ones around it do.
#[test]
fn solicited_arming_never_misses_a_solicited_completion() {
    const PER: u64 = 3_000;
    let ch = Arc::new(CompletionChannel::new().unwrap());
    let cq = Arc::new(CompletionQueue::with_channel(1 << 14, Arc::clone(&ch)).unwrap());
    let producers: Vec<_> = (0..2u64)
        .map(|p| {
            let cq = Arc::clone(&cq);
            std::thread::spawn(move || {
                for k in 0..PER {
                    cq.push(wc(p + 2 * k, k % 5 == 4));
                    if k % 64 == 0 {
                        std::thread::yield_now();
                    }
                }
            })
        })
        .collect();
    let total_solicited = 2 * (PER / 5);
    let (mut seen, mut solicited) = (0u64, 0u64);
    while solicited < total_solicited {
        cq.arm(true);
        while let Some(c) = cq.pop() {
            seen += 1;
            solicited += u64::from(c.solicited);
        }
        if solicited == total_solicited {
            break;
        }
        let ev = ch.get_event(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(ev, Some(cq.id()), "slept through a solicited completion");
    }
    for p in producers {
        p.join().unwrap();
    }
    while cq.pop().is_some() {
        seen += 1;
    }
    assert_eq!(seen, 2 * PER);
}

/// Three threads wait on one channel of two queues, each armed again by whoever took its
/// event; every event goes to exactly one waiter and none waits while one is pending.
#[test]
fn several_waiters_share_the_events() {
    let ch = Arc::new(CompletionChannel::new().unwrap());
    let cqs: Vec<_> = (0..2)
        .map(|_| Arc::new(CompletionQueue::with_channel(1 << 12, Arc::clone(&ch)).unwrap()))
        .collect();
    let taken = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    const EVENTS: u64 = 1_000;
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let (ch, taken, stop) = (Arc::clone(&ch), Arc::clone(&taken), Arc::clone(&stop));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    if ch
                        .get_event(Some(Duration::from_millis(20)))
                        .unwrap()
                        .is_some()
                    {
                        taken.fetch_add(1, Ordering::AcqRel);
                    }
                }
            })
        })
        .collect();
    for k in 0..EVENTS {
        let cq = &cqs[(k % 2) as usize];
        cq.arm(false);
        cq.push(wc(k, false));
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while taken.load(Ordering::Acquire) < k + 1 {
            assert!(std::time::Instant::now() < until, "event {k} never taken");
            std::thread::yield_now();
        }
    }
    stop.store(true, Ordering::Release);
    for w in waiters {
        w.join().unwrap();
    }
    assert_eq!(taken.load(Ordering::Acquire), EVENTS);
}
