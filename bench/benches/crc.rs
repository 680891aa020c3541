//! Throughput of the engine's CRC32c (`warpcore_engine::mem::crc`) over one FPDU's payload
//! at MTU 1500 (1,440 octets) and at MTU 9000 (8,960), next to the `crc32c` crate and
//! `memcpy`; and of its copy from registered memory into a frame with the Internet
//! checksum's sum and the CRC in one pass (`copy_sum_crc_slices`), next to a copy followed
//! by the crate's CRC. The frames rotate over 1,024 buffers (9 MiB, as a memif port's
//! mbufs), so the copies write memory that is not in the first-level caches, as the
//! transmit path's do. On a CPU with AVX-512F and VPCLMULQDQ the engine's functions fold
//! 512 bits at a time; elsewhere they run three `crc32` lanes. `bench/README.md` has the
//! figures.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use warpcore_engine::mem::crc;

const FRAMES: usize = 1024;
const SLOT: usize = 9216;

fn throughput(c: &mut Criterion) {
    let src: Vec<u8> = (0..65_536u32).map(|i| (i * 7 + 3) as u8).collect();
    let mut frames = vec![0u8; FRAMES * SLOT];
    for n in [1440usize, 8960] {
        let mut g = c.benchmark_group(format!("crc_{n}B"));
        g.throughput(Throughput::Bytes(n as u64));
        let mut k = 0usize;
        g.bench_function("crc32c crate", |b| {
            b.iter(|| {
                k = (k + 1) % 32;
                crc32c::crc32c_append(0, black_box(&src[k * 1000..k * 1000 + n]))
            })
        });
        g.bench_function("engine crc32c_append", |b| {
            b.iter(|| {
                k = (k + 1) % 32;
                crc::crc32c_append(0, black_box(&src[k * 1000..k * 1000 + n]))
            })
        });
        let mut f = 0usize;
        g.bench_function("memcpy into a frame", |b| {
            b.iter(|| {
                f = (f + 1) % FRAMES;
                k = (k + 1) % 32;
                let dst = &mut frames[f * SLOT..f * SLOT + n];
                dst.copy_from_slice(black_box(&src[k * 1000..k * 1000 + n]));
                dst[n - 1]
            })
        });
        g.bench_function("memcpy then crate crc32c", |b| {
            b.iter(|| {
                f = (f + 1) % FRAMES;
                k = (k + 1) % 32;
                let dst = &mut frames[f * SLOT..f * SLOT + n];
                dst.copy_from_slice(black_box(&src[k * 1000..k * 1000 + n]));
                crc32c::crc32c_append(0, dst)
            })
        });
        g.bench_function("engine copy_sum_crc (one pass)", |b| {
            b.iter(|| {
                f = (f + 1) % FRAMES;
                k = (k + 1) % 32;
                let dst = &mut frames[f * SLOT..f * SLOT + n];
                crc::copy_sum_crc_slices(black_box(&src[k * 1000..k * 1000 + n]), dst, 0)
            })
        });
        g.finish();
    }
}

criterion_group!(benches, throughput);
criterion_main!(benches);
