//! A hand-driven iWARP peer for the conformance tests (`conformance_ext`, `conformance_mpa`):
//! proto's MPA initiator, framer and deframer over a raw TCP stack, facing one engine core
//! that listens. The peer sees every ULPDU the engine puts on the wire and can send any
//! ULPDU it likes, so a test checks the wire and not only what completes.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Instant as StdInstant;

use warpcore_engine::mem::{Access, MrTable, PdId, Region, Stag};
use warpcore_engine::proto::mpa::deframer::{Deframer, DeframerConfig};
use warpcore_engine::proto::mpa::framer::{Framer, FramerConfig};
use warpcore_engine::proto::mpa::negotiation::{self as nego, Initiator, Negotiated};
use warpcore_engine::proto::wire::ddp::DdpBuffer;
use warpcore_engine::proto::wire::fpdu;
use warpcore_engine::proto::wire::rdmap::{AtomicRequestRepr, Opcode};
use warpcore_engine::proto::wire::segment::{RdmapHeader, Segment, SegmentRepr};
use warpcore_engine::tcp::link::{self, LinkConfig, LinkEnd};
use warpcore_engine::tcp::smoltcp::time::{Duration, Instant};
use warpcore_engine::tcp::{ConnId, Stack, StackConfig, TcpTuning};
use warpcore_engine::{
    CmEvent, Completion, CompletionQueue, EngineConfig, EngineCore, MpaParams, QpAttr, QpId,
    QpState, RecvWr, SendOp, SendWr, Sge, SgeList,
};

pub const PORT: u16 = 4791;
pub const PD: PdId = PdId(1);

pub use crate::common::ip;

/// Host `n`'s stack configuration (the engine tests' own, `common::stack_config`).
fn stack_config(n: u8) -> StackConfig {
    crate::common::stack_config(n, 16)
}

pub fn access() -> Access {
    Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC
}

pub struct World {
    pub peer: Stack<LinkEnd>,
    pub engine: EngineCore<LinkEnd>,
    pub mrs: Arc<MrTable>,
    pub cq: Arc<CompletionQueue>,
    pub stag: Stag,
    pub region: Arc<Region>,
    pub now: Instant,
    pub events: Vec<CmEvent>,
}

/// One engine core listening on [`PORT`] with `params`, one 4096-octet region with every
/// remote access (atomics too), one CQ.
pub fn world(params: MpaParams) -> World {
    let (ea, eb) = link::pair(&LinkConfig::default());
    let peer = Stack::new(ea, &stack_config(1), Instant::ZERO).unwrap();
    let mrs = Arc::new(MrTable::new(64));
    let mut engine = EngineCore::new(
        1,
        eb,
        &stack_config(2),
        EngineConfig::default(),
        Arc::clone(&mrs),
        StdInstant::now(),
        Instant::ZERO,
    )
    .unwrap();
    engine.listen(PORT, params).unwrap();
    let region = Arc::new(Region::allocate(4096, 4096).unwrap());
    let stag = mrs.register(Arc::clone(&region), PD, access(), 0).unwrap();
    World {
        peer,
        engine,
        mrs,
        cq: Arc::new(CompletionQueue::new(256).unwrap()),
        stag,
        region,
        now: Instant::ZERO,
        events: Vec::new(),
    }
}

/// The peer's end of one connection in FPDU mode.
pub struct Conn {
    pub tcp: ConnId,
    pub framer: Framer,
    pub deframer: Deframer,
    pub qp: QpId,
    pub negotiated: Negotiated,
}

impl World {
    pub fn step(&mut self) {
        self.peer.poll(self.now);
        self.engine.poll(self.now);
        self.now += Duration::from_micros(100);
        while let Some(e) = self.engine.next_event() {
            self.events.push(e);
        }
    }

    pub fn run(&mut self, n: usize) {
        for _ in 0..n {
            self.step();
        }
    }

    pub fn completions(&self) -> Vec<Completion> {
        let mut v = Vec::new();
        while let Some(c) = self.cq.pop() {
            v.push(c);
        }
        v
    }

    /// A QP with 16 sends and receives (one SGE each) and `rq` receives of 64 octets posted
    /// at offset 0 of the region.
    pub fn qp(&mut self, rq: usize) -> QpId {
        let qp = self
            .engine
            .create_qp(QpAttr {
                pd: PD,
                send_cq: Arc::clone(&self.cq),
                recv_cq: Arc::clone(&self.cq),
                sq_depth: 16,
                rq_depth: 16,
                max_sge: 1,
            })
            .unwrap()
            .0;
        for i in 0..rq {
            self.engine
                .post_recv(qp, recv_wr(i as u64, self.stag, 0, 64))
                .unwrap();
        }
        qp
    }

    /// The peer connects as initiator with `cfg`; the engine accepts onto a new QP with
    /// `rq` receives. `first` runs in the same step as the peer's initiator reports
    /// Full Operation, before the world steps again.
    pub fn connect_then(
        &mut self,
        rq: usize,
        cfg: nego::Config,
        mut first: impl FnMut(&mut World, ConnId, &mut Framer),
    ) -> Conn {
        let qp = self.qp(rq);
        let tcp = self
            .peer
            .connect((ip(2), PORT), None, &TcpTuning::default())
            .unwrap();
        let mut init = Initiator::new(cfg, StdInstant::now()).unwrap();
        for _ in 0..5000 {
            self.step();
            let _ = self.peer.send_with(tcp, |b| init.poll_transmit(b));
            let _ = self.peer.recv_with(tcp, |d| init.handle_input(d));
            if let Some(e) = init.poll_event() {
                match e {
                    nego::Event::Established(n) => {
                        let mut framer = Framer::new(FramerConfig {
                            markers: n.markers_tx,
                            crc: n.crc,
                            mulpdu: fpdu::mulpdu(1460, n.markers_tx),
                            stream_offset: n.tx_fpdu_offset,
                        });
                        let deframer = Deframer::new(DeframerConfig {
                            markers: n.markers_rx,
                            crc: n.crc,
                            stream_offset: n.rx_fpdu_offset,
                            ..DeframerConfig::default()
                        });
                        first(self, tcp, &mut framer);
                        let conn = Conn {
                            tcp,
                            framer,
                            deframer,
                            qp,
                            negotiated: n,
                        };
                        // Anything the engine sends meanwhile stays in TCP for the test.
                        for _ in 0..2000 {
                            if self.engine.qp_state(qp).unwrap() == QpState::Rts {
                                return conn;
                            }
                            self.step();
                        }
                        panic!("the engine's QP never reached RTS");
                    }
                    e => panic!("peer initiator: {e:?}"),
                }
            }
            let events = std::mem::take(&mut self.events);
            for e in events {
                match e {
                    CmEvent::ConnectRequest(r) => {
                        self.engine.accept(r.request, qp, b"", None).unwrap();
                    }
                    e => self.events.push(e),
                }
            }
        }
        panic!("no Full Operation")
    }

    pub fn connect(&mut self, rq: usize, cfg: nego::Config) -> Conn {
        self.connect_then(rq, cfg, |_, _, _| {})
    }

    /// Frames `ulpdus` (CRC field flipped if `corrupt_crc`) and hands them to the peer's TCP.
    pub fn send(&mut self, c: &mut Conn, ulpdus: &[Vec<u8>], corrupt_crc: bool) {
        let bytes = frame(&mut c.framer, ulpdus, corrupt_crc);
        self.send_raw(c.tcp, &bytes);
    }

    pub fn send_raw(&mut self, tcp: ConnId, bytes: &[u8]) {
        let mut off = 0;
        while off < bytes.len() {
            off += self.peer.send(tcp, &bytes[off..]).unwrap();
            self.step();
        }
    }

    /// Steps once and returns the whole ULPDUs that reached the peer.
    pub fn read(&mut self, c: &mut Conn) -> Vec<Vec<u8>> {
        self.step();
        let mut rx = Vec::new();
        let _ = self.peer.recv_with(c.tcp, |data| {
            rx.extend_from_slice(data);
            data.len()
        });
        let mut out = Vec::new();
        let mut input = &rx[..];
        loop {
            match c.deframer.poll(input) {
                Ok((n, Some(u))) => {
                    input = &input[n..];
                    out.push(u.to_vec());
                }
                Ok((n, None)) => {
                    input = &input[n..];
                    if input.is_empty() {
                        break;
                    }
                }
                Err(e) => panic!("the engine's stream does not deframe: {e:?}"),
            }
        }
        out
    }

    /// Steps until `n` ULPDUs reached the peer (or 5000 steps passed) and returns them.
    pub fn read_n(&mut self, c: &mut Conn, n: usize) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        for _ in 0..5000 {
            got.extend(self.read(c));
            if got.len() >= n {
                break;
            }
        }
        got
    }
}

pub fn frame(framer: &mut Framer, ulpdus: &[Vec<u8>], corrupt_crc: bool) -> Vec<u8> {
    let mut bytes = Vec::new();
    for u in ulpdus {
        let mut out = vec![0u8; framer.fpdu_wire_len(u.len())];
        let n = framer.emit(&[u], &mut out).unwrap();
        if corrupt_crc {
            out[n - 1] ^= 0x55;
        }
        bytes.extend_from_slice(&out[..n]);
    }
    bytes
}

pub fn seg(repr: SegmentRepr, payload: &[u8]) -> Vec<u8> {
    let s = Segment { repr, payload };
    let mut v = vec![0u8; s.buffer_len()];
    s.emit(&mut v).unwrap();
    v
}

pub fn untagged(qn: u32, msn: u32) -> DdpBuffer {
    DdpBuffer::Untagged {
        rsvd_ulp2: 0,
        qn,
        msn,
        mo: 0,
    }
}

pub fn send_ulpdu(msn: u32, payload: &[u8]) -> Vec<u8> {
    seg(
        SegmentRepr {
            last: true,
            buffer: untagged(0, msn),
            opcode: Opcode::Send,
            header: RdmapHeader::None,
        },
        payload,
    )
}

pub fn atomic_request_ulpdu(msn: u32, req: AtomicRequestRepr) -> Vec<u8> {
    seg(
        SegmentRepr {
            last: true,
            buffer: untagged(1, msn),
            opcode: Opcode::AtomicRequest,
            header: RdmapHeader::AtomicRequest(req),
        },
        &[],
    )
}

pub fn recv_wr(wr_id: u64, stag: Stag, to: u64, len: u32) -> RecvWr {
    RecvWr {
        wr_id,
        sges: sges(stag, to, len),
    }
}

pub fn send_wr(wr_id: u64, op: SendOp, sge: Option<(Stag, u64, u32)>) -> SendWr {
    SendWr {
        wr_id,
        op,
        sges: sge.map_or_else(|| sges_of(&[]), |(s, t, l)| sges(s, t, l)),
        signaled: true,
        fence: false,
    }
}

fn sges(stag: Stag, to: u64, len: u32) -> SgeList {
    sges_of(&[Sge {
        stag: stag.0,
        to,
        len,
    }])
}

fn sges_of(v: &[Sge]) -> SgeList {
    SgeList::from_slice(v).expect("sges")
}

/// The Terminate code (layer, EType, code) among `ulpdus`, if one is there.
pub fn terminate_in(ulpdus: &[Vec<u8>]) -> Option<(u8, u8, u8)> {
    ulpdus.iter().find_map(|u| match Segment::parse(u) {
        Ok(s) => match s.repr.header {
            RdmapHeader::Terminate(t) => Some((t.code.layer(), t.code.etype(), t.code.code())),
            _ => None,
        },
        Err(_) => None,
    })
}

pub fn word(r: &Region, off: usize) -> u64 {
    let mut b = [0u8; 8];
    r.read_at(off, &mut b).unwrap();
    u64::from_ne_bytes(b)
}

pub fn set_word(r: &Region, off: usize, v: u64) {
    r.write_at(off, &v.to_ne_bytes()).unwrap();
}
