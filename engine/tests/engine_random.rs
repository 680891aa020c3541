//! A seeded random workload of Writes, Reads, Sends and the RFC 7306 operations (FetchAdd,
//! CmpSwap, Immediate Data, Write with Immediate; EXT-5.*, EXT-6.*) between two engine cores over the
//! in-memory link with 1% loss, reordering and duplication in both directions, verified
//! byte for byte against a model of every memory region and receive buffer (GUIDE §4
//! step 5): after each batch every octet of every registered region of both sides (A's
//! source and sink, B's target, receive and atomic regions) is compared with the model,
//! receive-buffer tails beyond what a message placed and the atomic region around its word
//! included; `comparison_catches_one_changed_octet_in_each_area` shows the comparison
//! fails on a single changed octet in each kind of area it covers. Writes and Reads go to
//! the target region through its own STag or through a type 2 memory window over it that B
//! rebinds (new key) between batches; the window is invalidated now and then by a Send with
//! Invalidate from A (the receive completion names it) or a Local Invalidate on B, and the
//! STags it had are checked dead.

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

/// The octets of every registered region of both sides: what the model says they hold, or
/// what they hold.
#[derive(Clone, Debug, PartialEq)]
struct Octets {
    /// A's source region (Write, Send and Write with Immediate payloads; A's own writes only).
    src: Vec<u8>,
    /// A's sink region (Read sinks and atomic result sinks).
    sink: Vec<u8>,
    /// B's target region (Writes land here, Reads come from here).
    target: Vec<u8>,
    /// B's receive region (every receive buffer).
    rx: Vec<u8>,
    /// B's atomic region (the word at offset 8; every other octet stays zero).
    atomic: Vec<u8>,
}

/// The live regions, read into [`Octets`].
struct Regions {
    src: std::sync::Arc<warpcore_engine::mem::Region>,
    sink: std::sync::Arc<warpcore_engine::mem::Region>,
    target: std::sync::Arc<warpcore_engine::mem::Region>,
    rx: std::sync::Arc<warpcore_engine::mem::Region>,
    atomic: std::sync::Arc<warpcore_engine::mem::Region>,
}

impl Regions {
    fn octets(&self) -> Octets {
        let all = |r: &warpcore_engine::mem::Region| read_region(r, 0, r.len());
        Octets {
            src: all(&self.src),
            sink: all(&self.sink),
            target: all(&self.target),
            rx: all(&self.rx),
            atomic: all(&self.atomic),
        }
    }
}

/// A receive buffer posted on B: `posted` octets at `off` of the receive region, of which
/// the first `placed` received the message; the rest (the tail) must keep what it held.
#[derive(Clone, Copy, Debug)]
struct RecvBuf {
    wr_id: u64,
    off: usize,
    posted: usize,
    placed: usize,
}

/// What the model says an octet belongs to; a mismatch names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Place {
    Source,
    Sink,
    Target,
    /// Octets of a receive buffer its message placed.
    RecvPlaced {
        wr_id: u64,
    },
    /// Octets of a receive buffer beyond what its message placed.
    RecvTail {
        wr_id: u64,
    },
    /// Octets of the receive region no receive buffer covered.
    RecvUnposted,
    /// The atomic word (octets 8..16 of the atomic region).
    AtomicWord,
    /// The rest of the atomic region.
    AtomicRest,
}

/// The first octet where the regions differ from the model.
#[derive(Debug, PartialEq, Eq)]
struct Mismatch {
    place: Place,
    region: &'static str,
    offset: usize,
    model: u8,
    actual: u8,
}

const ATOMIC_TO: usize = 8;

/// The model: the octets every region must hold, and the receive buffers posted so far (to
/// name the receive buffer a differing octet belongs to).
struct Model {
    want: Octets,
    recvs: Vec<RecvBuf>,
}

impl Model {
    fn new(src: usize, sink: usize, target: usize, rx: usize, atomic: usize) -> Model {
        Model {
            want: Octets {
                src: vec![0; src],
                sink: vec![0; sink],
                target: vec![0; target],
                rx: vec![0; rx],
                atomic: vec![0; atomic],
            },
            recvs: Vec::new(),
        }
    }

    /// A's user wrote `data` at `off` of its source region (and into the model).
    fn put_src(&mut self, r: &warpcore_engine::mem::Region, off: usize, data: &[u8]) {
        r.write_at(off, data).unwrap();
        self.want.src[off..off + data.len()].copy_from_slice(data);
    }

    /// A receive buffer of `posted` octets at `off`, into which a message of `data` will be
    /// placed.
    fn recv(&mut self, wr_id: u64, off: usize, posted: usize, data: &[u8]) {
        assert!(data.len() <= posted);
        self.want.rx[off..off + data.len()].copy_from_slice(data);
        self.recvs.push(RecvBuf {
            wr_id,
            off,
            posted,
            placed: data.len(),
        });
    }

    fn set_word(&mut self, word: u64) {
        self.want.atomic[ATOMIC_TO..ATOMIC_TO + 8].copy_from_slice(&word.to_ne_bytes());
    }

    /// What the octet at `offset` of the receive region belongs to: the latest receive
    /// buffer that covered it, or none.
    fn rx_place(&self, offset: usize) -> Place {
        match self
            .recvs
            .iter()
            .rev()
            .find(|r| (r.off..r.off + r.posted).contains(&offset))
        {
            Some(r) if offset < r.off + r.placed => Place::RecvPlaced { wr_id: r.wr_id },
            Some(r) => Place::RecvTail { wr_id: r.wr_id },
            None => Place::RecvUnposted,
        }
    }

    /// Compares every octet of every region with the model.
    fn compare(&self, actual: &Octets) -> Result<(), Mismatch> {
        let w = &self.want;
        let areas: [(&'static str, &[u8], &[u8]); 5] = [
            ("A source", &w.src, &actual.src),
            ("A sink", &w.sink, &actual.sink),
            ("B target", &w.target, &actual.target),
            ("B receive", &w.rx, &actual.rx),
            ("B atomic", &w.atomic, &actual.atomic),
        ];
        for (region, want, got) in areas {
            assert_eq!(want.len(), got.len(), "{region}: region length");
            let Some(offset) = want.iter().zip(got).position(|(x, y)| x != y) else {
                continue;
            };
            let place = match region {
                "A source" => Place::Source,
                "A sink" => Place::Sink,
                "B target" => Place::Target,
                "B receive" => self.rx_place(offset),
                _ if (ATOMIC_TO..ATOMIC_TO + 8).contains(&offset) => Place::AtomicWord,
                _ => Place::AtomicRest,
            };
            return Err(Mismatch {
                place,
                region,
                offset,
                model: want[offset],
                actual: got[offset],
            });
        }
        Ok(())
    }
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

/// Runs the workload; returns the model and the regions' octets at the end (compared after
/// every batch already).
fn run(seed: u64, crc: bool, rev: u8) -> (Model, Octets) {
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
    // The window as allocated (what a bind names) and its current STag.
    let window = p.b.mrs.alloc_mw(PD, MwType::Type2).unwrap();
    let mut mw = window;
    let mut win: Option<Stag> = None;
    let mut dead: Vec<Stag> = Vec::new();
    let (mut binds, mut invalidations) = (0u32, 0u32);
    let (b_rx, s_rx) = p.b.region(OPS * SLOT, all_access());
    let (b_atomic, s_atomic) = p.b.region(
        4096,
        all_access() | warpcore_engine::mem::Access::REMOTE_ATOMIC,
    );
    let regions = Regions {
        src: std::sync::Arc::clone(&a_src),
        sink: std::sync::Arc::clone(&a_sink),
        target: std::sync::Arc::clone(&b_w),
        rx: std::sync::Arc::clone(&b_rx),
        atomic: std::sync::Arc::clone(&b_atomic),
    };
    let mut m = Model::new(OPS * SLOT, OPS * SLOT, W, OPS * SLOT, 4096);
    if let Err(e) = m.compare(&regions.octets()) {
        panic!("before the first batch: {e:?}");
    }
    let mut word = 0u64;
    let mut rng = Rng(seed | 1);
    for batch in 0..40 {
        // B (re)binds the window with the next key, or invalidates it locally, on its send
        // queue; A's requests of the batch start after the completion.
        let local_op = match rng.below(4) {
            0 | 1 => {
                let op = SendOp::BindMw {
                    mw: window.0,
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
                        m.set_word(word);
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
                            m.set_word(word);
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
                    // The original value lands in the 8-octet sink (EXT-5.2.2-*).
                    m.want.sink[i * SLOT..i * SLOT + 8].copy_from_slice(&orig.to_ne_bytes());
                    ops.push(Op::Atomic { orig });
                    continue;
                }
                4 => {
                    let imm = rng.next();
                    let solicited = rng.below(2) == 0;
                    let write = (rng.below(2) == 0).then(|| {
                        let to = wbase + rng.below((W / 2 - len) as u64 + 1) as usize;
                        let data = rng.bytes(len);
                        m.want.target[to..to + len].copy_from_slice(&data);
                        (to, data)
                    });
                    let wr_id = (batch * 100 + i) as u64;
                    p.b.core
                        .post_recv(qb, recv_wr(wr_id, &[(s_rx, (i * SLOT) as u64, 8)]))
                        .unwrap();
                    // Immediate Data places nothing: the whole 8-octet buffer is a tail that
                    // must keep its octets (EXT-6.3-2).
                    m.recv(wr_id, i * SLOT, 8, &[]);
                    let wr = match &write {
                        Some((to, data)) => {
                            m.put_src(&a_src, i * SLOT, data);
                            send_wr(
                                wr_id,
                                SendOp::WriteWithImm {
                                    remote_stag: s_w.0,
                                    remote_to: *to as u64,
                                    imm,
                                    solicited,
                                },
                                &[(s_src, (i * SLOT) as u64, data.len() as u32)],
                            )
                        }
                        None => send_wr(wr_id, SendOp::Immediate { imm, solicited }, &[]),
                    };
                    p.a.core.post_send(qa, wr).unwrap();
                    ops.push(Op::Imm {
                        imm,
                        solicited,
                        write,
                    });
                    continue;
                }
                0 => {
                    let to = wbase + rng.below((W / 2 - len) as u64 + 1) as usize;
                    let data = rng.bytes(len);
                    m.want.target[to..to + len].copy_from_slice(&data);
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
                        expect: m.want.target[to..to + len].to_vec(),
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
                    m.put_src(&a_src, i * SLOT, data);
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
                    expect,
                } => {
                    m.want.sink[*sink..*sink + *len].copy_from_slice(expect);
                    send_wr(
                        wr_id,
                        SendOp::Read {
                            remote_stag: stag.0,
                            remote_to: *to as u64,
                        },
                        &[(s_sink, *sink as u64, *len as u32)],
                    )
                }
                Op::Atomic { .. } | Op::Imm { .. } => unreachable!("posted above"),
                Op::Send { slot, data, inv } => {
                    // Split across two SGEs to exercise gathering.
                    m.put_src(&a_src, *slot, data);
                    let h = data.len() / 2;
                    p.b.core
                        .post_recv(qb, recv_wr(wr_id, &[(s_rx, *slot as u64, SLOT as u32)]))
                        .unwrap();
                    m.recv(wr_id, *slot, SLOT, data);
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
        // Writes complete at the source when handed to TCP; a (zero-length) Read behind
        // them on the same stream proves they are placed. Then every octet of every region
        // of both sides must be what the model says.
        post_a(&mut p, qa, 8500 + batch as u64, read_op(s_w.0, 0), &[]);
        p.run_until(400_000, |p| !p.a.completions.is_empty());
        let c = p.a.take_completions();
        assert_eq!(
            c.iter()
                .map(|c| (c.wr_id, c.opcode, c.status))
                .collect::<Vec<_>>(),
            [(8500 + batch as u64, WcOpcode::Read, WcStatus::Success)]
        );
        if let Err(e) = m.compare(&regions.octets()) {
            panic!("batch {batch}: {e:?}");
        }
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
    let target = m.want.target.clone();
    m.want.sink[..W].copy_from_slice(&target);
    let end = regions.octets();
    if let Err(e) = m.compare(&end) {
        panic!("after the final Read: {e:?}");
    }
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
        st.lost > 0 && st.duplicated > 0 && st.overtaken > 0,
        "{st:?}"
    );
    // Issue 12 item 2: both receive paths carried this workload, the placement straight
    // from the frames (`EngineCore::poll_stack`) and the TCP receive queue (what arrived
    // behind a gap, octets of a startup, Terminates).
    for (side, core) in [("A", &p.a.core), ("B", &p.b.core)] {
        let s = core.stats();
        let tcp = core.stack().tcp_totals().expect("Warpcore's TCP");
        assert!(
            s.rx_in_place_octets > 0,
            "{side}: nothing placed from the frames"
        );
        assert_eq!(s.rx_in_place_octets, tcp.delivered_in_place, "{side}");
        // Issue 12 item 3: FPDUs of 512 payload octets or more went out from registered
        // memory, framed into each frame (retransmissions over this lossy link included).
        assert!(
            s.tx_from_memory_octets > 0,
            "{side}: nothing sent from registered memory"
        );
        assert!(
            s.tx_from_memory_wire_octets > s.tx_from_memory_octets,
            "{side}: {} payload octets queued, {} written into frames",
            s.tx_from_memory_octets,
            s.tx_from_memory_wire_octets
        );
    }
    (m, end)
}

#[test]
fn random_workload_with_loss_reorder_duplication_crc_rev2() {
    let (m, end) = run(0x5eed_0001, true, 2);
    // The workload reached every kind of area the comparison claims to cover.
    assert!(m.recvs.iter().any(|r| r.placed > 0 && r.placed < r.posted));
    assert!(m.recvs.iter().any(|r| r.posted == 8 && r.placed == 0));
    assert!(end.sink[64 * 1024..].iter().any(|&x| x != 0));
    assert!(end.src.iter().any(|&x| x != 0));
    assert!(end.atomic[ATOMIC_TO..ATOMIC_TO + 8].iter().any(|&x| x != 0));
}

#[test]
fn random_workload_with_loss_reorder_duplication_nocrc_rev1() {
    run(0x5eed_0002, false, 1);
}

/// Planted defects: the comparison run after every batch must fail on one changed octet in
/// each kind of area it claims to cover, and name that area and offset. The regions are
/// the real ones at the end of a run (they match the model); each defect is one octet of a
/// copy of them flipped.
#[test]
fn comparison_catches_one_changed_octet_in_each_area() {
    let (m, end) = run(0x5eed_0003, true, 2);
    assert_eq!(m.compare(&end), Ok(()), "the clean run passes");
    let last = |f: &dyn Fn(&RecvBuf) -> bool| *m.recvs.iter().rev().find(|r| f(r)).unwrap();
    // The tail of a Send's buffer (after the placed octets), an Immediate Data buffer
    // (nothing placed: all tail), and the placed octets of a buffer.
    let send = last(&|r| r.placed > 0 && r.placed < r.posted);
    let imm = last(&|r| r.posted == 8 && r.placed == 0);
    // Latest buffers of their slots, so the octet is named after them.
    let tail_off = send.off + send.placed + (send.posted - send.placed) / 2;
    let placed_off = send.off + send.placed / 2;
    assert_eq!(m.rx_place(tail_off), Place::RecvTail { wr_id: send.wr_id });
    assert_eq!(
        m.rx_place(imm.off + 7),
        Place::RecvTail { wr_id: imm.wr_id }
    );
    type Pick = fn(&mut Octets) -> &mut Vec<u8>;
    let cases: [(Pick, usize, &str, Place); 9] = [
        (
            |o| &mut o.rx,
            tail_off,
            "B receive",
            Place::RecvTail { wr_id: send.wr_id },
        ),
        (
            |o| &mut o.rx,
            imm.off + 7,
            "B receive",
            Place::RecvTail { wr_id: imm.wr_id },
        ),
        (
            |o| &mut o.rx,
            placed_off,
            "B receive",
            Place::RecvPlaced { wr_id: send.wr_id },
        ),
        (|o| &mut o.atomic, 4095, "B atomic", Place::AtomicRest),
        (|o| &mut o.atomic, 0, "B atomic", Place::AtomicRest),
        (
            |o| &mut o.atomic,
            ATOMIC_TO + 7,
            "B atomic",
            Place::AtomicWord,
        ),
        (|o| &mut o.sink, 64 * 1024 + 1000, "A sink", Place::Sink),
        (
            |o| &mut o.src,
            12 * 16 * 1024 - 1,
            "A source",
            Place::Source,
        ),
        (|o| &mut o.target, 40_000, "B target", Place::Target),
    ];
    for (pick, offset, region, place) in cases {
        let mut bad = end.clone();
        let model = pick(&mut bad)[offset];
        pick(&mut bad)[offset] ^= 0x01;
        assert_eq!(
            m.compare(&bad),
            Err(Mismatch {
                place,
                region,
                offset,
                model,
                actual: model ^ 0x01,
            }),
            "{region} offset {offset} flipped"
        );
    }
}
