//! Throughput of the engine's CRC32c (`warpcore_engine::mem::crc`) over one FPDU's payload
//! at MTU 1500 (1,440 octets) and at MTU 9000 (8,960), next to the `crc32c` crate and
//! `memcpy`; and of its copy from registered memory into a frame with the Internet
//! checksum's sum and the CRC in one pass (`copy_sum_crc_slices`), next to a copy followed
//! by the crate's CRC; and of the Internet checksum's sum of a received segment (the TCP
//! crate's and the engine's `bulk_sum`). The frames rotate over 1,024 buffers (9 MiB, as a
//! memif port's mbufs), so the copies write memory that is not in the first-level caches,
//! as the transmit path's do. On a CPU with AVX-512F and VPCLMULQDQ the engine's functions fold
//! 512 bits at a time; elsewhere the CRC runs three `crc32` lanes, and the copy folds 256
//! bits at a time where the CPU has AVX2 and VPCLMULQDQ. `bench/README.md` has the
//! figures.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use warpcore_engine::mem::crc;
use warpcore_tcp::csum;

const FRAMES: usize = 1024;
const SLOT: usize = 9216;

/// The next source window (one of 32, 1,000 octets apart) and the next frame (one of
/// [`FRAMES`]): where the next iteration reads and writes.
fn advance(k: &mut usize, f: &mut usize) -> (usize, usize) {
    *k = (*k + 1) % 32;
    *f = (*f + 1) % FRAMES;
    (*k * 1000, *f * SLOT)
}

fn throughput(c: &mut Criterion) {
    let src: Vec<u8> = (0..65_536u32).map(|i| (i * 7 + 3) as u8).collect();
    let mut frames = vec![0u8; FRAMES * SLOT];
    let (mut k, mut f) = (0usize, 0usize);
    for n in [1440usize, 8960] {
        let mut g = c.benchmark_group(format!("crc_{n}B"));
        g.throughput(Throughput::Bytes(n as u64));
        g.bench_function("crc32c crate", |b| {
            b.iter(|| {
                let (s, _) = advance(&mut k, &mut f);
                crc32c::crc32c_append(0, black_box(&src[s..s + n]))
            })
        });
        g.bench_function("engine crc32c_append", |b| {
            b.iter(|| {
                let (s, _) = advance(&mut k, &mut f);
                crc::crc32c_append(0, black_box(&src[s..s + n]))
            })
        });
        // The received segment's checksum sum: the TCP crate's own, and the engine's
        // `bulk_sum` (512-bit vectors with AVX-512F, 256-bit with AVX2), which the host
        // takes instead where the CPU has it.
        g.bench_function("tcp crate csum::sum", |b| {
            b.iter(|| {
                let (s, _) = advance(&mut k, &mut f);
                csum::sum(black_box(&src[s..s + n]))
            })
        });
        let bulk = crc::bulk_sum().unwrap_or(csum::bulk_sum);
        g.bench_function("engine bulk_sum", |b| {
            b.iter(|| {
                let (s, _) = advance(&mut k, &mut f);
                bulk(black_box(&src[s..s + n]))
            })
        });
        // The receive pass: a full segment's checksum sum and CRC together, where the CPU
        // has the 512-bit or the 256-bit folding paths (`crc::payload_digest`).
        if let Some(digest) = crc::payload_digest() {
            g.bench_function("engine payload_digest (one pass)", |b| {
                b.iter(|| {
                    let (s, _) = advance(&mut k, &mut f);
                    let (sum, c) = digest(black_box(&src[s..s + n]));
                    sum ^ u64::from(c)
                })
            });
        }
        // The copies: (source, frame) -> what the iteration returns.
        type Copy = fn(&[u8], &mut [u8]) -> u64;
        let copies: [(&str, Copy); 3] = [
            ("memcpy into a frame", |s, d| {
                d.copy_from_slice(s);
                u64::from(d[d.len() - 1])
            }),
            ("memcpy then crate crc32c", |s, d| {
                d.copy_from_slice(s);
                u64::from(crc32c::crc32c_append(0, d))
            }),
            ("engine copy_sum_crc (one pass)", |s, d| {
                let (sum, c) = crc::copy_sum_crc_slices(s, d, 0);
                sum ^ u64::from(c)
            }),
        ];
        for (name, copy) in copies {
            g.bench_function(name, |b| {
                b.iter(|| {
                    let (s, d) = advance(&mut k, &mut f);
                    copy(black_box(&src[s..s + n]), &mut frames[d..d + n])
                })
            });
        }
        g.finish();
    }
}

criterion_group!(benches, throughput);
criterion_main!(benches);
