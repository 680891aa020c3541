//! A seeded random workload of Writes, Reads, Sends and the RFC 7306 operations (FetchAdd,
//! CmpSwap, Immediate Data, Write with Immediate; EXT-5.*, EXT-6.*) between two engine cores over the
//! in-memory link with 1% loss, reordering and duplication in both directions, verified
//! byte for byte against a model of every memory region and receive buffer (GUIDE §4
//! step 5). Writes and Reads go to the target region through its own STag or through a
//! type 2 memory window over it that B rebinds (new key) between batches; the window is
//! invalidated now and then by a Send with Invalidate from A (the receive completion
//! names it) or a Local Invalidate on B, and the STags it had are checked dead.

mod common;

use common::*;
use warpcore_engine::mem::{Access, MwType, Stag};
use warpcore_engine::tcp::link::{Faults, LinkConfig};
use warpcore_engine::tcp::smoltcp::time::Duration;
use warpcore_engine::{EngineConfig, SendOp, SgeList, WcOpcode, WcStatus};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

enum Op {
    Write {
        to: usize,
        data: Vec<u8>,
        stag: Stag,
    },
    Read {
        to: usize,
        len: usize,
        sink: usize,
        expect: Vec<u8>,
        stag: Stag,
    },
    /// A Send, or a Send with Invalidate of the window when `inv` is set.
    Send {
        slot: usize,
        data: Vec<u8>,
        inv: Option<Stag>,
    },
    /// FetchAdd or CmpSwap on B's atomic word; `orig` is the model's value before it.
    Atomic { orig: u64 },
    /// Immediate Data (with or without SE), or a Write with Immediate when `write` is set.
    Imm {
        imm: u64,
        solicited: bool,
        write: Option<(usize, Vec<u8>)>,
    },
}

fn faults(seed: u64) -> Faults {
    Faults {
        seed,
        loss: 0.01,
        duplicate: 0.01,
        reorder: 0.01,
        reorder_delay: Duration::from_micros(300),
        ..Faults::default()
    }
}

fn run(seed: u64, crc: bool, rev: u8) {
    let link = LinkConfig {
        faults_ab: faults(seed),
        faults_ba: faults(seed ^ 0xABCD),
        ..LinkConfig::default()
    };
    let mut p = Pair::new(&link, &EngineConfig::default());
    let params = warpcore_engine::MpaParams {
        rev,
        crc,
        peer_to_peer: rev >= 2,
        ..Default::default()
    };
    let (qa, qb) = p.connect_with(&params, &params, 64);
    const W: usize = 64 * 1024;
    const SLOT: usize = 16 * 1024;
    const OPS: usize = 12;
    let (a_src, s_src) = p.a.region(OPS * SLOT, all_access());
    let (a_sink, s_sink) = p.a.region(OPS * SLOT, all_access());
    let (b_w, s_w) = p.b.region(W, all_access() | Access::MW_BIND);
    // The window over the whole target region (same TOs), its STag while valid, and every
    // STag it had before (all must stay dead).
    let mut mw = p.b.mrs.alloc_mw(PD, MwType::Type2).unwrap();
    let mut win: Option<Stag> = None;
    let mut dead: Vec<Stag> = Vec::new();
    let (mut binds, mut invalidations) = (0u32, 0u32);
    let (b_rx, s_rx) = p.b.region(OPS * SLOT, all_access());
    let (b_atomic, s_atomic) = p.b.region(
        4096,
        all_access() | warpcore_engine::mem::Access::REMOTE_ATOMIC,
    );
    let mut word = 0u64;
    let mut rng = Rng(seed | 1);
    let mut model = vec![0u8; W];
    for batch in 0..40 {
        // B (re)binds the window with the next key, or invalidates it locally, on its send
        // queue; A's requests of the batch start after the completion.
        let local_op = match rng.below(4) {
            0 | 1 => {
                let op = SendOp::BindMw {
                    mw: mw.0,
                    new_key: mw.key().wrapping_add(1),
                    mr: s_w.0,
                    to: 0,
                    len: W as u64,
                    access: Access::REMOTE_READ | Access::REMOTE_WRITE,
                };
                Some((op, WcOpcode::BindMw))
            }
            2 if win.is_some() => Some((
                SendOp::LocalInvalidate { stag: mw.0 },
                WcOpcode::LocalInvalidate,
            )),
            _ => None,
        };
        if let Some((op, opcode)) = local_op {
            // A Write completes at A once handed to TCP; before the window's STag changes,
            // a (zero-length) Read behind A's Writes proves they were all placed.
            p.a.core
                .post_send(
                    qa,
                    send_wr(
                        8000 + batch as u64,
                        SendOp::Read {
                            remote_stag: s_w.0,
                            remote_to: 0,
                        },
                        &[],
                    ),
                )
                .unwrap();
            p.run_until(400_000, |p| !p.a.completions.is_empty());
            assert_eq!(p.a.take_completions()[0].status, WcStatus::Success);
            let wr = warpcore_engine::SendWr {
                wr_id: 7000 + batch as u64,
                op,
                sges: SgeList::new(),
                signaled: true,
                fence: false,
            };
            p.b.core.post_send(qb, wr).unwrap();
            p.run_until(400_000, |p| !p.b.completions.is_empty());
            let c = p.b.take_completions();
            assert_eq!(
                (c[0].opcode, c[0].status),
                (opcode, WcStatus::Success),
                "{c:?} {:?} {:?}",
                p.b.events,
                p.a.events
            );
            if let Some(old) = win.take() {
                dead.push(old);
            }
            if opcode == WcOpcode::BindMw {
                mw = Stag::new(mw.index(), mw.key().wrapping_add(1));
                win = Some(mw);
                binds += 1;
            } else {
                invalidations += 1;
            }
        }
        for d in &dead {
            assert!(!p.b.mrs.is_valid(*d), "stale window STag {d:?} valid");
        }
        let mut ops = Vec::new();
        for i in 0..OPS {
            let len = match rng.below(10) {
                0 => 0,
                1..=3 => rng.below(64) as usize + 1,
                _ => rng.below(SLOT as u64) as usize + 1,
            };
            // Writes go to one half of the target region and Reads come from the other,
            // swapping every batch: a Read is not ordered before later Writes to the same
            // memory unless fenced (RDMAP-06 §5.5), so a model of unfenced overlapping
            // traffic would not be deterministic.
            let (wbase, rbase) = if batch % 2 == 0 {
                (0, W / 2)
            } else {
                (W / 2, 0)
            };
            let len = len.min(W / 2);
            let op = match rng.below(5) {
                3 => {
                    let orig = word;
                    if rng.below(2) == 0 {
                        let add = rng.next();
                        let mask = if rng.below(2) == 0 { 0 } else { rng.next() };
                        word = warpcore_engine::proto::rdmap::atomic::masked_add(word, add, mask);
                        let wr_id = (batch * 100 + i) as u64;
                        let op = SendOp::AtomicFetchAdd {
                            remote_stag: s_atomic.0,
                            remote_to: 8,
                            add,
                            add_mask: mask,
                        };
                        p.a.core
                            .post_send(qa, send_wr(wr_id, op, &[(s_sink, (i * SLOT) as u64, 8)]))
                            .unwrap();
                    } else {
                        // Compare against the right value half of the time.
                        let compare = if rng.below(2) == 0 { word } else { rng.next() };
                        let swap = rng.next();
                        if compare == word {
                            word = swap;
                        }
                        let op = SendOp::AtomicCmpSwap {
                            remote_stag: s_atomic.0,
                            remote_to: 8,
                            compare,
                            compare_mask: u64::MAX,
                            swap,
                            swap_mask: u64::MAX,
                        };
                        let wr_id = (batch * 100 + i) as u64;
                        p.a.core
                            .post_send(qa, send_wr(wr_id, op, &[(s_sink, (i * SLOT) as u64, 8)]))
                            .unwrap();
                    }
                    ops.push(Op::Atomic { orig });
                    continue;
                }
                4 => {
                    let imm = rng.next();
                    let solicited = rng.below(2) == 0;
                    let write = (rng.below(2) == 0).then(|| {
                        let to = wbase + rng.below((W / 2 - len) as u64 + 1) as usize;
                        let data = rng.bytes(len);
                        model[to..to + len].copy_from_slice(&data);
                        (to, data)
                    });
                    let wr_id = (batch * 100 + i) as u64;
                    p.b.core
                        .post_recv(qb, recv_wr(wr_id, &[(s_rx, (i * SLOT) as u64, 8)]))
                        .unwrap();
                    let wr = match &write {
                        Some((to, data)) => {
                            a_src.write_at(i * SLOT, data).unwrap();
                            send_wr(
                                wr_id,
                                SendOp::WriteWithImm {
                                    remote_stag: s_w.0,
                                    remote_to: *to as u64,
                                    imm,
                                },
                                &[(s_src, (i * SLOT) as u64, data.len() as u32)],
                            )
                        }
                        None => send_wr(wr_id, SendOp::Immediate { imm, solicited }, &[]),
                    };
                    p.a.core.post_send(qa, wr).unwrap();
                    ops.push(Op::Imm {
                        imm,
                        solicited: solicited && write.is_none(),
                        write,
                    });
                    continue;
                }
                0 => {
                    let to = wbase + rng.below((W / 2 - len) as u64 + 1) as usize;
                    let data = rng.bytes(len);
                    model[to..to + len].copy_from_slice(&data);
                    let stag = win.filter(|_| rng.below(2) == 0).unwrap_or(s_w);
                    Op::Write { to, data, stag }
                }
                1 => {
                    let to = rbase + rng.below((W / 2 - len) as u64 + 1) as usize;
                    let stag = win.filter(|_| rng.below(2) == 0).unwrap_or(s_w);
                    Op::Read {
                        to,
                        len,
                        sink: i * SLOT,
                        expect: model[to..to + len].to_vec(),
                        stag,
                    }
                }
                _ => {
                    // Now and then the Send invalidates the window: later requests of the
                    // batch use the region's own STag (RDMAP-5.3-11/12).
                    let inv = if rng.below(4) == 0 { win.take() } else { None };
                    if let Some(w) = inv {
                        dead.push(w);
                        invalidations += 1;
                    }
                    Op::Send {
                        slot: i * SLOT,
                        data: rng.bytes(len),
                        inv,
                    }
                }
            };
            let wr_id = (batch * 100 + i) as u64;
            let wr = match &op {
                Op::Write { to, data, stag } => {
                    a_src.write_at(i * SLOT, data).unwrap();
                    send_wr(
                        wr_id,
                        SendOp::Write {
                            remote_stag: stag.0,
                            remote_to: *to as u64,
                        },
                        &[(s_src, (i * SLOT) as u64, data.len() as u32)],
                    )
                }
                Op::Read {
                    to,
                    len,
                    sink,
                    stag,
                    ..
                } => send_wr(
                    wr_id,
                    SendOp::Read {
                        remote_stag: stag.0,
                        remote_to: *to as u64,
                    },
                    &[(s_sink, *sink as u64, *len as u32)],
                ),
                Op::Atomic { .. } | Op::Imm { .. } => unreachable!("posted above"),
                Op::Send { slot, data, inv } => {
                    // Split across two SGEs to exercise gathering.
                    a_src.write_at(*slot, data).unwrap();
                    let h = data.len() / 2;
                    p.b.core
                        .post_recv(qb, recv_wr(wr_id, &[(s_rx, *slot as u64, SLOT as u32)]))
                        .unwrap();
                    let op = match inv {
                        Some(w) => SendOp::SendInvalidate { stag: w.0 },
                        None => SendOp::Send,
                    };
                    let mut wr = send_wr(
                        wr_id,
                        op,
                        &[
                            (s_src, *slot as u64, h as u32),
                            (s_src, (*slot + h) as u64, (data.len() - h) as u32),
                        ],
                    );
                    // Earlier Reads through the window are answered from it as their
                    // responses go out: the ULP fences the invalidation behind them.
                    wr.fence = inv.is_some();
                    wr
                }
            };
            p.a.core.post_send(qa, wr).unwrap();
            ops.push(op);
        }
        let sends = ops
            .iter()
            .filter(|o| matches!(o, Op::Send { .. } | Op::Imm { .. }))
            .count();
        p.run_until(400_000, |p| {
            p.a.completions.len() == OPS && p.b.completions.len() == sends
        });
        let ca = p.a.take_completions();
        let cb = p.b.take_completions();
        assert!(
            ca.iter().all(|c| c.status == WcStatus::Success),
            "{ca:?} {:?} {:?}",
            p.a.events,
            p.b.events
        );
        assert_eq!(
            ca.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
            (0..OPS)
                .map(|i| (batch * 100 + i) as u64)
                .collect::<Vec<_>>()
        );
        let mut recvs = cb.iter();
        for (i, op) in ops.iter().enumerate() {
            match op {
                Op::Read {
                    len, sink, expect, ..
                } => {
                    assert_eq!(ca[i].opcode, WcOpcode::Read);
                    assert_eq!(ca[i].byte_len as usize, *len);
                    assert!(
                        &read_region(&a_sink, *sink, *len) == expect,
                        "read {i} differs"
                    );
                }
                Op::Send { slot, data, inv } => {
                    let c = recvs.next().expect("receive completion");
                    assert_eq!(c.wr_id, (batch * 100 + i) as u64);
                    assert_eq!(c.byte_len as usize, data.len());
                    assert_eq!(c.invalidated, inv.map(|s| s.0), "send {i}");
                    assert!(
                        &read_region(&b_rx, *slot, data.len()) == data,
                        "send {i} differs"
                    );
                }
                Op::Write { .. } => {}
                Op::Atomic { orig } => {
                    assert_eq!(ca[i].atomic_orig, Some(*orig), "atomic {i}");
                    assert_eq!(read_region(&a_sink, i * SLOT, 8), orig.to_ne_bytes());
                }
                Op::Imm {
                    imm,
                    solicited,
                    write,
                } => {
                    let sent = if write.is_some() {
                        WcOpcode::WriteWithImm
                    } else {
                        WcOpcode::Immediate
                    };
                    assert_eq!(ca[i].opcode, sent);
                    let c = recvs.next().expect("receive completion");
                    assert_eq!(c.wr_id, (batch * 100 + i) as u64);
                    assert_eq!(
                        (c.opcode, c.imm, c.solicited),
                        (WcOpcode::RecvImm, Some(*imm), *solicited)
                    );
                }
            }
        }
        // Writes complete at the source when handed to TCP; a Read behind them on the same
        // stream proves they are placed. Check the whole region after one final Read.
    }
    p.a.core
        .post_send(
            qa,
            send_wr(
                9999,
                SendOp::Read {
                    remote_stag: s_w.0,
                    remote_to: 0,
                },
                &[(s_sink, 0, W as u32)],
            ),
        )
        .unwrap();
    p.run_until(400_000, |p| p.a.completions.len() == 1);
    assert_eq!(p.a.take_completions()[0].status, WcStatus::Success);
    assert!(
        read_region(&b_w, 0, W) == model,
        "target region differs from the model"
    );
    assert!(
        read_region(&a_sink, 0, W) == model,
        "final Read differs from the model"
    );
    assert_eq!(
        b_atomic
            .atomic_u64_at(8)
            .unwrap()
            .load(std::sync::atomic::Ordering::SeqCst),
        word
    );
    for d in &dead {
        assert!(!p.b.mrs.is_valid(*d), "stale window STag {d:?} valid");
    }
    assert!(
        binds > 5 && invalidations > 5,
        "{binds} binds, {invalidations} invalidations"
    );
    let st = p.a.core.stack().device().tx_fault_stats();
    assert!(
        st.lost > 0 && st.duplicated > 0 && st.reordered > 0,
        "{st:?}"
    );
}

#[test]
fn random_workload_with_loss_reorder_duplication_crc_rev2() {
    run(0x5eed_0001, true, 2);
}

#[test]
fn random_workload_with_loss_reorder_duplication_nocrc_rev1() {
    run(0x5eed_0002, false, 1);
}
