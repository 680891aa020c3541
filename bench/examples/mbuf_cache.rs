//! What a thread's lcore id is worth to its mbufs: threads that allocate and free mbufs of
//! one pool (in runs of 32, as a burst does) for two seconds, first with an lcore id of their
//! own (`Mempool::use_lcore_cache`, which `DpdkDevice` calls each loop), then without (a
//! thread DPDK did not start: every allocation and free an atomic operation on the pool's
//! shared ring), twice each. The arguments are the CPUs, one thread each:
//!
//!     cargo build --profile bench -p warpcore-bench --example mbuf_cache
//!     target/release/examples/mbuf_cache 0 1     # two threads on two CPUs
//!     target/release/examples/mbuf_cache 1 1     # two threads sharing one CPU
//!
//! Needs libdpdk (the `dpdk` feature); the EAL starts with `--no-huge --no-pci`.

#[cfg(feature = "dpdk")]
fn main() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::{Duration, Instant};
    use warpcore_dpdk_sys::{lcore_id, EalBuilder, Mempool};

    let cpus: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("a CPU number"))
        .collect();
    assert!(!cpus.is_empty(), "usage: mbuf_cache CPU [CPU...]");
    let eal = EalBuilder::for_test("mbuf_cache", 0, 128)
        .init()
        .expect("EAL init");
    let pool =
        Mempool::new(&eal, "mbuf_cache", 16383, 256, Mempool::DEFAULT_DATA_ROOM).expect("pool");
    for with_id in [true, false, true, false] {
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            for (i, &cpu) in cpus.iter().enumerate() {
                let (pool, stop) = (&pool, &stop);
                s.spawn(move || {
                    assert!(
                        core_affinity::set_for_current(core_affinity::CoreId { id: cpu }),
                        "cannot pin to CPU {cpu}"
                    );
                    if with_id {
                        pool.use_lcore_cache().expect("an lcore id");
                    }
                    let mut held = Vec::with_capacity(32);
                    let (t, mut n) = (Instant::now(), 0u64);
                    while !stop.load(Ordering::Relaxed) {
                        held.extend((0..32).map(|_| pool.alloc().expect("mbuf")));
                        held.clear();
                        n += 32;
                    }
                    let ns = t.elapsed().as_nanos() as f64 / n as f64;
                    println!(
                        "thread {i} on CPU {cpu}, lcore id {:>10}: {ns:>10.1} ns an allocation and free ({n} of them)",
                        lcore_id()
                    );
                });
            }
            std::thread::sleep(Duration::from_secs(2));
            stop.store(true, Ordering::Relaxed);
        });
    }
}

#[cfg(not(feature = "dpdk"))]
fn main() {
    eprintln!("mbuf_cache needs the dpdk feature (libdpdk)");
    std::process::exit(2);
}
