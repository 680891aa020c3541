//! The placement hot path: one STag lookup, one bounds check and one copy per segment
//! (`MrTable::lookup` + `MrGuard::place_at`), for 64 B, 1 KiB and 64 KiB segments, next to
//! a plain `memcpy` of the same bytes into the same kind of memory. Run with
//! `cargo bench -p warpcore-engine --bench placement`.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use warpcore_engine::mem::{Access, MrTable, PdId, Region};

const REGION_LEN: usize = 1 << 20;

fn placement(c: &mut Criterion) {
    let table = MrTable::new(1024);
    // Other registrations around it, so the slot is not alone in the table.
    for _ in 0..100 {
        table
            .register(
                Arc::new(Region::allocate(4096, 8).unwrap()),
                PdId(1),
                Access::LOCAL_WRITE,
                0,
            )
            .unwrap();
    }
    let region = Arc::new(Region::allocate(REGION_LEN, 4096).unwrap());
    let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let base = 0x7F00_0000_0000u64;
    let stag = table.register(region, PdId(7), access, base).unwrap();
    let mut plain = vec![0u8; REGION_LEN];

    let mut g = c.benchmark_group("placement");
    for len in [64usize, 1024, 64 * 1024] {
        let payload = vec![0xA5u8; len];
        // Walk through the region so that the copies do not all hit the same lines.
        let slots = (REGION_LEN / len) as u64;
        g.throughput(Throughput::Bytes(len as u64));
        g.bench_with_input(
            BenchmarkId::new("lookup_bounds_place", len),
            &len,
            |b, &len| {
                let mut i = 0u64;
                b.iter(|| {
                    let to = base + (i % slots) * len as u64;
                    i += 1;
                    let guard = table
                        .lookup(black_box(stag), PdId(7), Access::REMOTE_WRITE)
                        .unwrap();
                    guard.place_at(black_box(to), black_box(&payload)).unwrap();
                });
            },
        );
        g.bench_with_input(BenchmarkId::new("memcpy", len), &len, |b, &len| {
            let mut i = 0usize;
            b.iter(|| {
                let off = (i % slots as usize) * len;
                i += 1;
                plain[off..off + len].copy_from_slice(black_box(&payload));
                black_box(&plain);
            });
        });
    }
    // Two threads placing 64 B segments into the same registration: the cost of sharing
    // the slot's state word between cores (each lookup and guard drop is an atomic RMW).
    {
        let payload = [0x5Au8; 64];
        let slots = (REGION_LEN / 64) as u64;
        g.throughput(Throughput::Bytes(64));
        g.bench_function("lookup_bounds_place_2_threads/64", |b| {
            b.iter_custom(|iters| {
                let start = std::sync::Barrier::new(2);
                std::thread::scope(|s| {
                    let table = &table;
                    let start = &start;
                    let helper = s.spawn(move || {
                        start.wait();
                        for i in 0..iters {
                            let to = base + ((i * 2 + 1) % slots) * 64;
                            let g = table.lookup(stag, PdId(7), Access::REMOTE_WRITE).unwrap();
                            g.place_at(to, &payload).unwrap();
                        }
                    });
                    start.wait();
                    let t0 = std::time::Instant::now();
                    for i in 0..iters {
                        let to = base + ((i * 2) % slots) * 64;
                        let g = table.lookup(stag, PdId(7), Access::REMOTE_WRITE).unwrap();
                        g.place_at(black_box(to), black_box(&payload)).unwrap();
                    }
                    let mine = t0.elapsed();
                    helper.join().unwrap();
                    mine
                })
            });
        });
    }
    g.throughput(Throughput::Elements(1));
    g.bench_function("lookup_only", |b| {
        b.iter(|| {
            black_box(
                table
                    .lookup(black_box(stag), PdId(7), Access::REMOTE_WRITE)
                    .unwrap(),
            );
        });
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = placement
}
criterion_main!(benches);
