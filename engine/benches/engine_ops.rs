//! Engine-core time per operation: two engine cores over the in-memory link in one thread,
//! counting only the time spent inside `EngineCore::poll` of both cores (receive, placement,
//! framing, TCP; not the harness). Small messages are 64 octets; the per-KiB figure comes
//! from 64 KiB messages (time / 64).

use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant as StdInstant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use warpcore_engine::mem::{Access, MrTable, PdId, Region, Stag};
use warpcore_engine::tcp::link::{self, LinkConfig, LinkEnd};
use warpcore_engine::tcp::smoltcp::time::{Duration, Instant};
use warpcore_engine::tcp::smoltcp::wire::{Ipv4Address, Ipv4Cidr};
use warpcore_engine::tcp::StackConfig;
use warpcore_engine::{
    CmEvent, CompletionQueue, EngineConfig, EngineCore, MpaParams, QpAttr, QpId, RecvWr, SendOp,
    SendWr, Sge, SgeList,
};

const PD: PdId = PdId(1);

struct Bench {
    a: EngineCore<LinkEnd>,
    b: EngineCore<LinkEnd>,
    cqa: Arc<CompletionQueue>,
    cqb: Arc<CompletionQueue>,
    qa: QpId,
    qb: QpId,
    sa: Stag,
    sb: Stag,
    now: Instant,
    busy: StdDuration,
}

fn core(n: u8, end: LinkEnd, mrs: Arc<MrTable>) -> EngineCore<LinkEnd> {
    let sc = StackConfig {
        mac: [2, 0, 0, 0, 0, n],
        ip: Ipv4Cidr::new(Ipv4Address::new(10, 0, 0, n), 24),
        gateway: None,
        routes: Vec::new(),
        random_seed: u64::from(n),
        max_connections: 16,
        out_of_order_budget_bytes: warpcore_engine::tcp::OUT_OF_ORDER_BUDGET_DEFAULT,
    };
    let cfg = EngineConfig {
        tcp: warpcore_engine::tcp::TcpTuning {
            rx_buffer: 4 << 20,
            tx_buffer: 4 << 20,
            ..Default::default()
        },
        ..EngineConfig::default()
    };
    EngineCore::new(
        u16::from(n),
        end,
        &sc,
        cfg,
        mrs,
        StdInstant::now(),
        Instant::ZERO,
    )
    .unwrap()
}

impl Bench {
    fn new() -> Bench {
        let (ea, eb) = link::pair(&LinkConfig {
            mtu: 9000,
            queue_frames: 4096,
            ..LinkConfig::default()
        });
        let (ma, mb) = (Arc::new(MrTable::new(64)), Arc::new(MrTable::new(64)));
        let mut a = core(1, ea, Arc::clone(&ma));
        let mut b = core(2, eb, Arc::clone(&mb));
        let all = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
        let ra = Arc::new(Region::allocate(8 << 20, 4096).unwrap());
        let rb = Arc::new(Region::allocate(8 << 20, 4096).unwrap());
        let sa = ma.register(ra, PD, all, 0).unwrap();
        let sb = mb.register(rb, PD, all, 0).unwrap();
        let (cqa, cqb) = (
            Arc::new(CompletionQueue::new(8192).unwrap()),
            Arc::new(CompletionQueue::new(8192).unwrap()),
        );
        let attr = |cq: &Arc<CompletionQueue>| QpAttr {
            pd: PD,
            send_cq: Arc::clone(cq),
            recv_cq: Arc::clone(cq),
            sq_depth: 1024,
            rq_depth: 1024,
            max_sge: 1,
        };
        let qa = a.create_qp(attr(&cqa)).unwrap().0;
        let qb = b.create_qp(attr(&cqb)).unwrap().0;
        b.listen(4000, MpaParams::default()).unwrap();
        a.connect(
            qa,
            (Ipv4Address::new(10, 0, 0, 2), 4000),
            &MpaParams::default(),
            b"",
        )
        .unwrap();
        let mut bench = Bench {
            a,
            b,
            cqa,
            cqb,
            qa,
            qb,
            sa,
            sb,
            now: Instant::ZERO,
            busy: StdDuration::ZERO,
        };
        let mut req = None;
        while req.is_none() {
            bench.step();
            while let Some(e) = bench.b.next_event() {
                if let CmEvent::ConnectRequest(r) = e {
                    req = Some(r.request);
                }
            }
        }
        bench.b.accept(req.unwrap(), qb, b"", None).unwrap();
        for _ in 0..200 {
            bench.step();
        }
        bench
    }

    fn step(&mut self) {
        let t = StdInstant::now();
        let w = self.a.poll(self.now) | self.b.poll(self.now);
        self.busy += t.elapsed();
        if !w {
            self.now += Duration::from_micros(5);
        }
    }

    /// Runs `n` operations of `len` octets; returns the engine time they took.
    fn run(&mut self, op: &str, len: u32, n: u64) -> StdDuration {
        self.busy = StdDuration::ZERO;
        let window = 64u64;
        let (mut posted, mut done) = (0u64, 0u64);
        let sge = |s: Stag, to: u64| SgeList::from_slice(&[Sge { stag: s.0, to, len }]).unwrap();
        while done < n {
            while posted < n && posted - done < window {
                let slot = (posted % 64) * u64::from(len.max(64));
                let wr = |op| SendWr {
                    wr_id: posted,
                    op,
                    sges: sge(self.sa, slot),
                    signaled: true,
                    fence: false,
                };
                let r = match op {
                    "send" => {
                        self.b
                            .post_recv(
                                self.qb,
                                RecvWr {
                                    wr_id: posted,
                                    sges: sge(self.sb, slot),
                                },
                            )
                            .unwrap();
                        self.a.post_send(self.qa, wr(SendOp::Send))
                    }
                    "write" => self.a.post_send(
                        self.qa,
                        wr(SendOp::Write {
                            remote_stag: self.sb.0,
                            remote_to: slot,
                        }),
                    ),
                    _ => self.a.post_send(
                        self.qa,
                        wr(SendOp::Read {
                            remote_stag: self.sb.0,
                            remote_to: slot,
                        }),
                    ),
                };
                r.unwrap();
                posted += 1;
            }
            self.step();
            while self.cqa.pop().is_some() {
                done += 1;
            }
            while self.cqb.pop().is_some() {}
        }
        self.busy
    }
}

fn benches(c: &mut Criterion) {
    let mut bench = Bench::new();
    let mut g = c.benchmark_group("engine_core_time");
    g.sample_size(10);
    g.measurement_time(StdDuration::from_secs(3));
    for op in ["send", "write", "read"] {
        for len in [64u32, 65536] {
            g.throughput(Throughput::Bytes(u64::from(len)));
            g.bench_function(format!("{op}_{len}B"), |bch| {
                bch.iter_custom(|iters| bench.run(op, len, iters))
            });
        }
    }
    g.finish();
}

criterion_group!(engine, benches);
criterion_main!(engine);
