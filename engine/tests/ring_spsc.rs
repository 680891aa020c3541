//! The SPSC ring (GUIDE rule 8): order, edges, wrap-around, batches, drop safety, the lazy
//! doorbell, and a two-thread stress run with checksums.

use std::cell::Cell;
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam::utils::Backoff;
use warpcore_engine::ring::spsc::{channel, Consumer, Producer};

/// Smaller loops under Miri, which is orders of magnitude slower.
const fn scaled(n: usize) -> usize {
    if cfg!(miri) {
        n / 2_000 + 10
    } else {
        n
    }
}

#[test]
fn fifo_order_and_full_empty_edges() {
    let (mut p, mut c) = channel::<u64>(8);
    assert_eq!(p.capacity(), 8);
    assert!(p.is_empty() && c.is_empty());
    assert_eq!(c.pop(), None);
    for i in 0..8 {
        assert_eq!(p.len(), i as usize);
        p.push(i).unwrap();
    }
    assert!(p.is_full());
    assert_eq!(c.len(), 8);
    // Full: the value comes back, untouched.
    assert_eq!(p.push(100), Err(100));
    assert_eq!(p.try_push(101), Err(101));
    for i in 0..8 {
        assert_eq!(c.pop(), Some(i));
    }
    assert_eq!(c.pop(), None);
    assert!(c.is_empty() && p.is_empty());
    // One slot free again after a single pop from full.
    for i in 0..8 {
        p.push(i).unwrap();
    }
    assert_eq!(c.pop(), Some(0));
    p.push(8).unwrap();
    assert_eq!(p.push(9), Err(9));
}

#[test]
fn capacity_one() {
    let (mut p, mut c) = channel::<&str>(1);
    p.push("a").unwrap();
    assert_eq!(p.push("b"), Err("b"));
    assert_eq!(c.pop(), Some("a"));
    p.push("b").unwrap();
    assert_eq!(c.pop(), Some("b"));
    assert_eq!(c.pop(), None);
}

/// Many laps around a small ring with varying fill levels, against a model queue.
#[test]
fn wrap_around_many_times_matches_a_model() {
    let (mut p, mut c) = channel::<u32>(8);
    let mut model = VecDeque::new();
    let mut next = 0u32;
    // A fixed pseudo-random schedule of pushes and pops.
    let mut x = 0x1234_5678u32;
    for _ in 0..scaled(100_000) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        if !x.is_multiple_of(3) {
            match p.push(next) {
                Ok(()) => {
                    model.push_back(next);
                    next += 1;
                }
                Err(v) => {
                    assert_eq!(v, next);
                    assert_eq!(model.len(), 8);
                }
            }
        } else {
            assert_eq!(c.pop(), model.pop_front());
        }
        assert_eq!(c.len(), model.len());
    }
    assert!(next > 8 * 100 || cfg!(miri), "many laps: {next}");
}

#[test]
fn push_batch_takes_only_what_fits() {
    let (mut p, mut c) = channel::<u32>(8);
    let mut items = 0..20u32;
    assert_eq!(p.push_batch(&mut items), 8);
    // Nothing was taken from the iterator beyond what fits.
    assert_eq!(items.next(), Some(8));
    assert_eq!(p.push_batch(&mut items), 0);
    assert_eq!(items.next(), Some(9));
    let mut out = Vec::new();
    assert_eq!(c.pop_batch(&mut out, 3), 3);
    assert_eq!(out, [0, 1, 2]);
    assert_eq!(p.push_slice(&[100, 101, 102, 103]), 3);
    out.clear();
    assert_eq!(c.drain_into(&mut out), 8);
    assert_eq!(out, [3, 4, 5, 6, 7, 100, 101, 102]);
    assert_eq!(c.pop_batch(&mut out, 10), 0);
    assert_eq!(c.pop_batch(&mut out, 0), 0);
}

/// An `Extend` that takes at most `limit` items and ignores the rest of the iterator.
struct TakeSome<'a> {
    limit: usize,
    got: &'a mut Vec<u32>,
}

impl Extend<u32> for TakeSome<'_> {
    fn extend<I: IntoIterator<Item = u32>>(&mut self, iter: I) {
        for v in iter.into_iter().take(self.limit) {
            self.got.push(v);
        }
    }
}

#[test]
fn pop_batch_leaves_what_the_sink_does_not_take() {
    let (mut p, mut c) = channel::<u32>(16);
    p.push_batch(&mut (0..10));
    let mut got = Vec::new();
    let n = c.pop_batch(
        &mut TakeSome {
            limit: 4,
            got: &mut got,
        },
        10,
    );
    assert_eq!(n, 4);
    assert_eq!(got, [0, 1, 2, 3]);
    assert_eq!(c.len(), 6);
    assert_eq!(c.pop(), Some(4));
}

/// Counts drops, to check every item is dropped exactly once.
#[derive(Debug)]
struct Counted<'a>(u32, &'a Cell<usize>);

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.1.set(self.1.get() + 1);
    }
}

#[test]
fn items_left_in_the_ring_are_dropped_once_when_both_ends_are() {
    let drops = Cell::new(0);
    let (mut p, mut c) = channel::<Counted<'_>>(8);
    for i in 0..6 {
        p.push(Counted(i, &drops)).unwrap();
    }
    // A rejected push gives the value back: dropping it is the caller's, once.
    for i in 6..8 {
        p.push(Counted(i, &drops)).unwrap();
    }
    let back = p.push(Counted(99, &drops)).unwrap_err();
    assert_eq!(drops.get(), 0);
    drop(back);
    assert_eq!(drops.get(), 1);
    drop(c.pop());
    drop(c.pop());
    assert_eq!(drops.get(), 3);
    drop(p);
    assert_eq!(drops.get(), 3, "the consumer still owns the items");
    assert_eq!(c.pop().map(|x| x.0), Some(2));
    assert_eq!(drops.get(), 4);
    drop(c);
    assert_eq!(drops.get(), 9, "4 dropped before, 5 with the ring");
}

#[test]
fn dropping_the_consumer_first_also_drops_the_items() {
    let drops = Cell::new(0);
    let (mut p, c) = channel::<Counted<'_>>(4);
    // Wrap the cursors first so the remaining items straddle the end of the buffer.
    let mut c = c;
    for i in 0..3 {
        p.push(Counted(i, &drops)).unwrap();
        drop(c.pop());
    }
    for i in 0..4 {
        p.push(Counted(i, &drops)).unwrap();
    }
    drop(c);
    assert!(p.is_abandoned());
    assert_eq!(drops.get(), 3);
    drop(p);
    assert_eq!(drops.get(), 7);
}

/// A sink that panics half-way: items it received are its own (dropped during unwinding),
/// the others stay in the ring; none is dropped twice or lost.
struct PanicAfter<'a> {
    after: usize,
    got: Vec<Counted<'a>>,
}

impl<'a> Extend<Counted<'a>> for PanicAfter<'a> {
    fn extend<I: IntoIterator<Item = Counted<'a>>>(&mut self, iter: I) {
        for v in iter {
            self.got.push(v);
            if self.got.len() == self.after {
                panic!("sink failure");
            }
        }
    }
}

#[test]
fn a_panicking_sink_loses_and_duplicates_nothing() {
    let drops = Cell::new(0);
    let (mut p, mut c) = channel::<Counted<'_>>(8);
    for i in 0..8 {
        p.push(Counted(i, &drops)).unwrap();
    }
    let mut sink = PanicAfter {
        after: 3,
        got: Vec::new(),
    };
    let r = catch_unwind(AssertUnwindSafe(|| c.pop_batch(&mut sink, 8)));
    assert!(r.is_err());
    assert_eq!(sink.got.len(), 3);
    drop(sink);
    assert_eq!(drops.get(), 3);
    assert_eq!(c.len(), 5);
    assert_eq!(c.pop().map(|x| x.0), Some(3));
    drop((p, c));
    assert_eq!(drops.get(), 8);
}

#[test]
fn zero_sized_items() {
    let (mut p, mut c) = channel::<()>(4);
    for _ in 0..4 {
        p.push(()).unwrap();
    }
    assert_eq!(p.push(()), Err(()));
    assert_eq!(c.len(), 4);
    let mut v = Vec::new();
    assert_eq!(c.drain_into(&mut v), 4);
}

#[test]
fn doorbell_flag_protocol() {
    let (mut p, mut c) = channel::<u8>(4);
    // No consumer asleep: no doorbell.
    p.push(1).unwrap();
    assert!(!p.doorbell_needed());
    // Items present: the consumer must not go to sleep.
    assert!(!c.prepare_idle());
    c.clear_idle();
    assert_eq!(c.pop(), Some(1));
    // Empty: the consumer may sleep; the next push must ring, once.
    assert!(c.prepare_idle());
    assert!(c.is_idle());
    p.push(2).unwrap();
    assert!(p.doorbell_needed());
    assert!(!p.doorbell_needed(), "the flag was taken down");
    assert!(!c.is_idle());
}

/// The lazy doorbell across threads: the consumer parks whenever it finds the ring empty
/// after raising its flag; the producer unparks it only when `doorbell_needed` says so.
/// A lost wake-up would leave the consumer parked with items waiting; the park timeout
/// turns that into a test failure instead of a hang.
#[test]
fn lazy_doorbell_loses_no_wakeup() {
    const TIMEOUT: Duration = Duration::from_secs(10);
    let n = scaled(200_000) as u64;
    let (mut p, mut c) = channel::<u64>(64);
    let consumer = thread::spawn(move || {
        let (mut sum, mut got, mut raises) = (0u64, 0u64, 0u64);
        while got < n {
            if let Some(v) = c.pop() {
                sum += v;
                got += 1;
                continue;
            }
            raises += 1;
            if c.prepare_idle() {
                let t0 = Instant::now();
                thread::park_timeout(TIMEOUT);
                assert!(t0.elapsed() < TIMEOUT, "lost wake-up after {got} items");
            }
            c.clear_idle();
        }
        (sum, raises)
    });
    let waker = consumer.thread().clone();
    let mut rings = 0u64;
    for i in 0..n {
        let mut v = i;
        while let Err(back) = p.push(v) {
            v = back;
            thread::yield_now();
        }
        if p.doorbell_needed() {
            rings += 1;
            waker.unpark();
        }
        if i % 1024 == 0 {
            // Give the consumer reasons to sleep.
            thread::yield_now();
        }
    }
    let (sum, raises) = consumer.join().unwrap();
    assert_eq!(sum, n * (n - 1) / 2);
    // Each raise of the flag is taken down by at most one doorbell.
    assert!(rings <= raises, "rang {rings} times for {raises} raises");
}

/// Items for the two-thread stress runs: 10^7 in optimized builds (`cargo test --release`),
/// 10^6 in debug builds so that the workspace suite stays quick on a shared machine, and
/// a few under Miri.
const STRESS_ITEMS: usize = if cfg!(debug_assertions) {
    scaled(1_000_000)
} else {
    scaled(10_000_000)
};

/// `n` items across two threads, single and batched, checking order and a checksum of the
/// values.
fn stress(n: u64, batched: bool, capacity: usize) {
    let (mut p, mut c): (Producer<u64>, Consumer<u64>) = channel(capacity);
    let producer = thread::spawn(move || {
        let mut next = 0u64;
        let mut sum = 0u64;
        // Spin briefly, then yield: the test machine may have fewer cores than threads.
        let backoff = Backoff::new();
        while next < n {
            let pushed = if batched {
                let end = (next + 37).min(n);
                let mut it = next..end;
                p.push_batch(&mut it) as u64
            } else {
                u64::from(p.push(next).is_ok())
            };
            for v in next..next + pushed {
                sum = sum.wrapping_add(v.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            }
            next += pushed;
            if pushed == 0 {
                backoff.snooze();
            } else {
                backoff.reset();
            }
        }
        sum
    });
    let mut expected = 0u64;
    let mut sum = 0u64;
    let mut buf = Vec::with_capacity(64);
    let backoff = Backoff::new();
    while expected < n {
        buf.clear();
        let got = if batched {
            c.pop_batch(&mut buf, 64)
        } else {
            c.pop().map(|v| buf.push(v)).is_some() as usize
        };
        for &v in &buf {
            assert_eq!(v, expected, "out of order");
            sum = sum.wrapping_add(v.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            expected += 1;
        }
        if got == 0 {
            backoff.snooze();
        } else {
            backoff.reset();
        }
    }
    assert_eq!(producer.join().unwrap(), sum);
    assert!(c.is_empty());
}

#[test]
fn two_thread_stress_single() {
    stress(STRESS_ITEMS as u64, false, 1024);
}

#[test]
fn two_thread_stress_batched() {
    stress(STRESS_ITEMS as u64, true, 1024);
}

/// Tiny rings across threads: every push meets a full ring and every pop an empty one,
/// so the cursor reloads and the full/empty edges are exercised under contention.
#[test]
fn two_thread_stress_tiny_rings() {
    for capacity in [1, 2, 4] {
        stress(scaled(20_000) as u64, false, capacity);
        stress(scaled(20_000) as u64, true, capacity);
    }
}

/// Boxed items across threads with drops counted: nothing leaks or is freed twice when the
/// consumer stops early and both ends are dropped with items still inside.
#[test]
fn cross_thread_drop_accounting() {
    static DROPS: AtomicUsize = AtomicUsize::new(0);
    struct D(#[allow(dead_code)] Box<u64>);
    impl Drop for D {
        fn drop(&mut self) {
            DROPS.fetch_add(1, Ordering::Relaxed);
        }
    }
    let total = scaled(100_000);
    let (mut p, mut c) = channel::<D>(128);
    let done = Arc::new(AtomicBool::new(false));
    let producer = {
        let done = done.clone();
        thread::spawn(move || {
            let mut pushed = 0;
            let mut pending = None;
            while pushed < total && !done.load(Ordering::Relaxed) {
                let item = pending.take().unwrap_or_else(|| D(Box::new(pushed as u64)));
                match p.push(item) {
                    Ok(()) => pushed += 1,
                    // Keep the rejected item for the next attempt: it is not counted as
                    // pushed, and dropping it would count a drop.
                    Err(back) => pending = Some(back),
                }
            }
            // An item created but never pushed is dropped here, and counted as created.
            let created = pushed + usize::from(pending.is_some());
            drop(pending);
            (pushed, created, p)
        })
    };
    let mut popped = 0;
    while popped < total / 2 {
        if c.pop().is_some() {
            popped += 1;
        }
    }
    done.store(true, Ordering::Relaxed);
    let (pushed, created, p) = producer.join().unwrap();
    let left = c.len();
    assert_eq!(pushed, popped + left);
    assert_eq!(DROPS.load(Ordering::Relaxed), created - left);
    drop(c);
    drop(p);
    assert_eq!(DROPS.load(Ordering::Relaxed), created);
}

/// `Producer` and `Consumer` are `Send` but neither `Sync` nor `Clone`. The negative checks
/// use the ambiguity trick (`static_assertions::assert_not_impl_any!`): the call to
/// `some_item` resolves only if exactly one blanket impl applies.
#[test]
fn ends_are_send_but_not_sync_or_clone() {
    fn is_send<T: Send>() {}
    is_send::<Producer<String>>();
    is_send::<Consumer<String>>();

    trait AmbiguousIfImpl<A> {
        fn some_item() {}
    }
    impl<T: ?Sized> AmbiguousIfImpl<()> for T {}
    struct IfSync;
    impl<T: ?Sized + Sync> AmbiguousIfImpl<IfSync> for T {}
    struct IfClone;
    impl<T: Clone> AmbiguousIfImpl<IfClone> for T {}

    <Producer<u8> as AmbiguousIfImpl<_>>::some_item();
    <Consumer<u8> as AmbiguousIfImpl<_>>::some_item();
}
