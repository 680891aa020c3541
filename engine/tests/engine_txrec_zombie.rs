//! The transmit path from registered memory (module `core/txrec.rs`) after the QP lets its
//! connection go: a hand-driven iWARP peer (proto's MPA initiator, framer and deframer over
//! a raw TCP stack) against an engine core.

mod common;

use std::sync::Arc;

use common::{all_access, ip, pattern, PD, PORT};
use warpcore_engine::mem::{MrTable, Region, Stag};
use warpcore_engine::proto::mpa::deframer::{Deframer, DeframerConfig};
use warpcore_engine::proto::mpa::framer::{Framer, FramerConfig};
use warpcore_engine::proto::mpa::negotiation::{self as nego, Initiator};
use warpcore_engine::proto::wire::ddp::DdpBuffer;
use warpcore_engine::proto::wire::fpdu;
use warpcore_engine::proto::wire::rdmap::{Opcode, ReadRequestRepr};
use warpcore_engine::proto::wire::segment::{RdmapHeader, Segment, SegmentRepr};
use warpcore_engine::tcp::link::{Faults, LinkEnd};
use warpcore_engine::tcp::smoltcp::time::{Duration, Instant};
use warpcore_engine::tcp::{ConnId, Stack, TcpTuning};
use warpcore_engine::{
    CmEvent, CompletionQueue, EngineConfig, EngineCore, MpaParams, QpId, QpState,
};

/// The hand-driven peer connected (MPA initiator) to the engine's QP, which may be read
/// through `stag`, a region of the QP's PD with remote read access.
struct World {
    peer: Stack<LinkEnd>,
    engine: EngineCore<LinkEnd>,
    tcp: ConnId,
    qp: QpId,
    region: Arc<Region>,
    stag: Stag,
    framer: Framer,
    deframer: Deframer,
    now: Instant,
    _cq: Arc<CompletionQueue>,
}

impl World {
    fn new(len: usize) -> World {
        let mrs = Arc::new(MrTable::new(64));
        let (mut peer, mut engine) = common::hand_driven_pair(EngineConfig::default(), &mrs);
        engine.listen(PORT, MpaParams::default()).unwrap();
        let region = Arc::new(Region::allocate(len, 4096).unwrap());
        let stag = mrs
            .register(Arc::clone(&region), PD, all_access(), 0)
            .unwrap();
        let cq = Arc::new(CompletionQueue::new(256).unwrap());
        let qp = engine.create_qp(common::qp_attr(&cq, 8, 1)).unwrap().0;
        let tcp = peer
            .connect((ip(2), PORT), None, &TcpTuning::default())
            .unwrap();
        let cfg = nego::Config {
            ird: 4,
            ord: 4,
            ..nego::Config::default()
        };
        let mut init = Initiator::new(cfg, std::time::Instant::now()).unwrap();
        let mut now = Instant::ZERO;
        let mut negotiated = None;
        for _ in 0..20_000 {
            peer.poll(now);
            engine.poll(now);
            now += Duration::from_micros(100);
            let _ = peer.send_with(tcp, |b| init.poll_transmit(b));
            let _ = peer.recv_with(tcp, |d| init.handle_input(d));
            while let Some(e) = init.poll_event() {
                if let nego::Event::Established(n) = e {
                    negotiated = Some(n);
                }
            }
            while let Some(e) = engine.next_event() {
                if let CmEvent::ConnectRequest(r) = e {
                    engine.accept(r.request, qp, b"", None).unwrap();
                }
            }
            if negotiated.is_some() && engine.qp_state(qp).unwrap() == QpState::Rts {
                break;
            }
        }
        let n = negotiated.expect("negotiated");
        let framer = Framer::new(FramerConfig {
            markers: n.markers_tx,
            crc: n.crc,
            mulpdu: fpdu::mulpdu(1460, n.markers_tx),
            stream_offset: 0,
        });
        let deframer = Deframer::new(DeframerConfig {
            markers: n.markers_rx,
            crc: n.crc,
            ..DeframerConfig::default()
        });
        World {
            peer,
            engine,
            tcp,
            qp,
            region,
            stag,
            framer,
            deframer,
            now,
            _cq: cq,
        }
    }

    fn step(&mut self) {
        self.peer.poll(self.now);
        self.engine.poll(self.now);
        self.now += Duration::from_micros(100);
    }

    /// Sends the ULPDU `u`, framed.
    fn send_ulpdu(&mut self, u: &[u8]) {
        let mut f = vec![0u8; self.framer.fpdu_wire_len(u.len())];
        let n = self.framer.emit(&[u], &mut f).unwrap();
        let mut off = 0;
        while off < n {
            off += self.peer.send(self.tcp, &f[off..n]).unwrap();
            self.step();
        }
    }

    /// One step; the payload of every Read Response FPDU the peer received is appended to
    /// `got` (`rx`: what is left of an FPDU for the next call). Every FPDU must pass the
    /// deframer's checks (CRC included).
    fn step_reading(&mut self, rx: &mut Vec<u8>, got: &mut Vec<u8>) {
        self.step();
        let _ = self.peer.recv_with(self.tcp, |x| {
            rx.extend_from_slice(x);
            x.len()
        });
        let mut input = &rx[..];
        loop {
            match self.deframer.poll(input) {
                Ok((k, Some(u))) => {
                    input = &input[k..];
                    let s = Segment::parse(&u).expect("an RDMAP segment");
                    if s.repr.opcode == Opcode::ReadResponse {
                        got.extend_from_slice(s.payload);
                    }
                }
                // A part of an FPDU, kept by the deframer for the next call.
                Ok((k, None)) => {
                    input = &input[k..];
                    break;
                }
                Err(e) => panic!("the peer's deframer: {e:?}"),
            }
        }
        let used = rx.len() - input.len();
        rx.drain(..used);
    }
}

/// A Read Request for `len` octets at TO 0 of `src_stag` (MSN `msn`).
fn read_request(msn: u32, src_stag: u32, len: u32) -> Vec<u8> {
    let s = Segment {
        repr: SegmentRepr {
            last: true,
            buffer: DdpBuffer::Untagged {
                rsvd_ulp2: 0,
                qn: 1,
                msn,
                mo: 0,
            },
            opcode: Opcode::ReadRequest,
            header: RdmapHeader::ReadRequest(ReadRequestRepr {
                sink_stag: 0x100,
                sink_to: 0,
                read_size: len,
                src_stag,
                src_to: 0,
            }),
        },
        payload: &[],
    };
    let mut v = vec![0u8; s.buffer_len()];
    s.emit(&mut v).unwrap();
    v
}

/// Module `txrec`'s promise that the zombie connection reads no region after the QP is
/// gone (RDMAP-5.5-8: the QP's buffers are the application's then). A peer closes (FIN)
/// right behind a Read Request. The engine answers from registered memory, sends its FIN
/// and, the peer having closed already, flushes the QP, hands its connection to the
/// zombies and reports `Disconnected` in the same pass (`tx_close_if_drained`), while TCP
/// still has most of the Read Response to send or resend (the engine's frames are lost
/// half the time until then). The application destroys the QP and reuses its buffer at
/// once (0xEE over it): the peer must get the Read Response as it was, nothing written
/// after the destroy, and the zombie must read no memory of the QP.
#[test]
fn a_zombie_after_the_peers_close_reads_no_memory_of_a_destroyed_qp() {
    let len = 600_000usize;
    let mut w = World::new(1 << 20);
    let data: Vec<u8> = pattern(len, 3)
        .into_iter()
        .map(|b| if b == 0xEE { 0x11 } else { b })
        .collect();
    w.region.write_at(0, &data).unwrap();
    let rr = read_request(1, w.stag.0, len as u32);
    w.send_ulpdu(&rr);
    w.peer.close(w.tcp).unwrap();
    let lossy = |loss| Faults {
        seed: 5,
        loss,
        ..Faults::default()
    };
    w.engine.stack().device().set_tx_faults(lossy(0.5)).unwrap();
    let (mut rx, mut got) = (Vec::new(), Vec::new());
    let mut disconnected = false;
    for _ in 0..5000 {
        w.step_reading(&mut rx, &mut got);
        while let Some(e) = w.engine.next_event() {
            disconnected |= matches!(e, CmEvent::Disconnected { .. });
        }
        if disconnected {
            break;
        }
    }
    assert!(disconnected, "the engine never reported the close");
    assert!(
        got.len() < len - 100_000,
        "the response must be partly undelivered yet: {} octets arrived",
        got.len()
    );
    let before = w.engine.stats().tx_from_memory_wire_octets;
    w.engine.destroy_qp(w.qp).unwrap();
    // The QP is gone: its memory is the application's, reused at once.
    w.region.fill(0, len, 0xEE).unwrap();
    w.engine.stack().device().set_tx_faults(lossy(0.0)).unwrap();
    for _ in 0..50_000 {
        w.step_reading(&mut rx, &mut got);
        if got.len() >= len {
            break;
        }
    }
    let scribbled = got.iter().filter(|&&b| b == 0xEE).count();
    assert_eq!(
        scribbled,
        0,
        "the peer received {scribbled} octets written after the QP was destroyed ({} of \
         {len} arrived)",
        got.len()
    );
    assert_eq!(
        w.engine.stats().tx_from_memory_wire_octets,
        before,
        "the zombie connection read the destroyed QP's memory"
    );
    assert!(got == data, "the Read Response arrives whole, as it was");
}
