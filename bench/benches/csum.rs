//! Latency of the Internet checksum on a small segment's path: `sum_to_fold` over 112
//! octets (a 64 B Write's TCP segment, verified on receive) and `copy_and_sum_to_fold`
//! over 90 (its payload copied into the frame on transmit). Each iteration is a chain of
//! 1,000 calls, each call's input depending on the one before (an octet set from its
//! result), so the figure per call is the time from input to result, not a throughput:
//! what a ping-pong's half round trip pays. The one-octet store each call's input gets is
//! read back by an eight-octet load, which x86 cannot forward from the store: every call
//! also pays that stall, so the absolute figures are high and the difference between two
//! versions is what counts. `bench/README.md` has the figures.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use warpcore_tcp::csum;

const CHAIN: usize = 1000;

fn latency(c: &mut Criterion) {
    let mut g = c.benchmark_group("csum_latency");
    let mut seg = vec![0x5au8; 112];
    g.bench_function("sum_to_fold/112B x1000", |b| {
        b.iter(|| {
            let mut x = 0u64;
            for _ in 0..CHAIN {
                seg[0] = x as u8;
                x = csum::sum_to_fold(black_box(&seg));
            }
            x
        })
    });
    let (src, mut dst) = (vec![0xa5u8; 90], vec![0u8; 90]);
    let mut src = src;
    g.bench_function("copy_and_sum_to_fold/90B x1000", |b| {
        b.iter(|| {
            let mut x = 0u64;
            for _ in 0..CHAIN {
                src[0] = x as u8;
                x = csum::copy_and_sum_to_fold(&mut dst, black_box(&src));
            }
            x
        })
    });
    g.finish();
}

criterion_group!(benches, latency);
criterion_main!(benches);
