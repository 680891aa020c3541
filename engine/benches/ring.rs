//! SPSC ring throughput: push/pop on one thread (single and batched) and across two
//! threads, next to crossbeam's `ArrayQueue` (the stand-in the engine may use until the
//! ring lands); and the completion queue's ring (`ring::mpmc`) moving completions from one
//! thread to another one at a time and in batches, next to `ArrayQueue`, which the
//! completion queues used before it. Run with `cargo bench -p warpcore-engine --bench ring`.

use std::hint::black_box;
use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use crossbeam::queue::ArrayQueue;
use warpcore_engine::ring::mpmc;
use warpcore_engine::ring::spsc::channel;
use warpcore_engine::{Completion, QpId, WcOpcode, WcStatus};

const BATCH: usize = 32;

fn same_thread(c: &mut Criterion) {
    let mut g = c.benchmark_group("ring/same_thread");
    g.throughput(Throughput::Elements(1));
    g.bench_function("push_pop", |b| {
        let (mut p, mut c) = channel::<u64>(1024);
        let mut i = 0u64;
        b.iter(|| {
            p.push(black_box(i)).unwrap();
            i += 1;
            black_box(c.pop().unwrap())
        });
    });
    g.bench_function("array_queue_push_pop", |b| {
        let q = ArrayQueue::<u64>::new(1024);
        let mut i = 0u64;
        b.iter(|| {
            q.push(black_box(i)).unwrap();
            i += 1;
            black_box(q.pop().unwrap())
        });
    });
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function(BenchmarkId::new("push_pop_batch", BATCH), |b| {
        let (mut p, mut c) = channel::<u64>(1024);
        let mut out = Vec::with_capacity(BATCH);
        let mut i = 0u64;
        b.iter(|| {
            let mut items = i..i + BATCH as u64;
            assert_eq!(p.push_batch(&mut items), BATCH);
            i += BATCH as u64;
            out.clear();
            assert_eq!(c.pop_batch(&mut out, BATCH), BATCH);
            black_box(&out);
        });
    });
    g.finish();
}

/// Moves `n` items from this thread to another through the ring, `batch` at a time
/// (1 = single push/pop), and returns the elapsed time.
fn cross(n: u64, batch: usize) -> Duration {
    let (mut p, mut c) = channel::<u64>(4096);
    let consumer = thread::spawn(move || {
        let mut got = 0u64;
        let mut sum = 0u64;
        let mut out = Vec::with_capacity(batch);
        while got < n {
            if batch == 1 {
                if let Some(v) = c.pop() {
                    sum = sum.wrapping_add(v);
                    got += 1;
                } else {
                    std::hint::spin_loop();
                }
            } else {
                out.clear();
                if c.pop_batch(&mut out, batch) == 0 {
                    std::hint::spin_loop();
                }
                got += out.len() as u64;
                sum = out.iter().fold(sum, |s, &v| s.wrapping_add(v));
            }
        }
        sum
    });
    let start = Instant::now();
    let mut next = 0u64;
    while next < n {
        if batch == 1 {
            if p.push(next).is_ok() {
                next += 1;
            } else {
                std::hint::spin_loop();
            }
        } else {
            let end = (next + batch as u64).min(n);
            let mut it = next..end;
            let pushed = p.push_batch(&mut it) as u64;
            if pushed == 0 {
                std::hint::spin_loop();
            }
            next += pushed;
        }
    }
    let sum = consumer.join().unwrap();
    let elapsed = start.elapsed();
    assert_eq!(sum, n * (n - 1) / 2);
    elapsed
}

fn cross_array_queue(n: u64) -> Duration {
    let q = std::sync::Arc::new(ArrayQueue::<u64>::new(4096));
    let q2 = q.clone();
    let consumer = thread::spawn(move || {
        let mut got = 0u64;
        let mut sum = 0u64;
        while got < n {
            if let Some(v) = q2.pop() {
                sum = sum.wrapping_add(v);
                got += 1;
            } else {
                std::hint::spin_loop();
            }
        }
        sum
    });
    let start = Instant::now();
    let mut next = 0u64;
    while next < n {
        if q.push(next).is_ok() {
            next += 1;
        } else {
            std::hint::spin_loop();
        }
    }
    let sum = consumer.join().unwrap();
    let elapsed = start.elapsed();
    assert_eq!(sum, n * (n - 1) / 2);
    elapsed
}

fn cross_thread(c: &mut Criterion) {
    const N: u64 = 1 << 20;
    let mut g = c.benchmark_group("ring/cross_thread");
    g.throughput(Throughput::Elements(N));
    g.sample_size(10);
    g.bench_function("single", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| cross(N, 1)).sum())
    });
    g.bench_function(BenchmarkId::new("batch", BATCH), |b| {
        b.iter_custom(|iters| (0..iters).map(|_| cross(N, BATCH)).sum())
    });
    g.bench_function("array_queue", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| cross_array_queue(N)).sum())
    });
    g.finish();
}

/// A send completion as a run of Writes produces them.
fn completion(i: u64) -> Completion {
    Completion {
        wr_id: i,
        qp: QpId {
            core: 0,
            index: 1,
            generation: 1,
        },
        opcode: WcOpcode::Write,
        status: WcStatus::Success,
        byte_len: 64,
        solicited: false,
        invalidated: None,
        imm: None,
        atomic_orig: None,
    }
}

/// Moves `n` completions from this thread (an engine core completing runs of `push` at a
/// time) to another (an application polling `pop` at a time) through `ring::mpmc`, or
/// through `ArrayQueue` one at a time on both sides when `array_queue`; the elapsed time.
fn cross_cq(n: u64, push: usize, pop: usize, array_queue: bool) -> Duration {
    let q = std::sync::Arc::new(mpmc::Queue::<Completion>::new(4096));
    let a = std::sync::Arc::new(ArrayQueue::<Completion>::new(4096));
    let (q2, a2) = (q.clone(), a.clone());
    let consumer = thread::spawn(move || {
        let mut got = 0u64;
        let mut sum = 0u64;
        let mut out = vec![completion(0); pop];
        while got < n {
            let k = if array_queue {
                match a2.pop() {
                    Some(c) => {
                        out[0] = c;
                        1
                    }
                    None => 0,
                }
            } else {
                q2.pop_into(&mut out)
            };
            if k == 0 {
                std::hint::spin_loop();
            }
            got += k as u64;
            sum = out[..k].iter().fold(sum, |s, c| s.wrapping_add(c.wr_id));
        }
        sum
    });
    let start = Instant::now();
    let mut next = 0u64;
    while next < n {
        let run = (push as u64).min(n - next) as usize;
        let pushed = if array_queue {
            let mut k = 0;
            while k < run && a.push(completion(next + k as u64)).is_ok() {
                k += 1;
            }
            k
        } else {
            let base = next;
            q.push_with(run, |j| completion(base + j as u64))
        };
        if pushed == 0 {
            std::hint::spin_loop();
        }
        next += pushed as u64;
    }
    let sum = consumer.join().unwrap();
    let elapsed = start.elapsed();
    assert_eq!(sum, n * (n - 1) / 2);
    elapsed
}

fn completion_queue(c: &mut Criterion) {
    const N: u64 = 1 << 20;
    let mut g = c.benchmark_group("cq/cross_thread");
    g.throughput(Throughput::Elements(N));
    g.sample_size(10);
    g.bench_function("array_queue", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| cross_cq(N, 32, 1, true)).sum())
    });
    g.bench_function("mpmc_single", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| cross_cq(N, 1, 1, false)).sum())
    });
    g.bench_function("mpmc_push32_pop16", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| cross_cq(N, 32, 16, false)).sum())
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    targets = same_thread, cross_thread, completion_queue
}
criterion_main!(benches);
