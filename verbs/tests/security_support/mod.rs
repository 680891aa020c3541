//! A hand-driven hostile iWARP peer for the security matrix: proto's MPA initiator, framer
//! and deframer over a raw smoltcp stack on one end of the in-memory link, polled in real
//! time from the test thread, while a verbs `Context` runs its engine thread on the other
//! end. Adapted from `engine/tests/engine_hostile.rs` (which drives an `EngineCore` in
//! simulated time); here the victim is what users see, the verbs API.
#![allow(dead_code)]

use std::time::{Duration, Instant as StdInstant};

use warpcore_engine::proto::mpa::deframer::{Deframer, DeframerConfig};
use warpcore_engine::proto::mpa::framer::{Framer, FramerConfig};
use warpcore_engine::proto::mpa::negotiation::{self as nego, Initiator};
use warpcore_engine::proto::wire::ddp::DdpBuffer;
use warpcore_engine::proto::wire::fpdu;
use warpcore_engine::proto::wire::rdmap::{AtomicRequestRepr, Opcode};
use warpcore_engine::proto::wire::segment::{RdmapHeader, Segment, SegmentRepr};
use warpcore_engine::tcp::link::LinkEnd;
use warpcore_engine::tcp::smoltcp::time::Instant;
use warpcore_engine::tcp::smoltcp::wire::{Ipv4Address, Ipv4Cidr};
use warpcore_engine::tcp::{ConnId, Stack, StackConfig, TcpTuning};

/// The hostile peer: a TCP stack and, once connected, one MPA connection in FPDU mode.
pub struct Hostile {
    stack: Stack<LinkEnd>,
    start: StdInstant,
    pub tcp: Option<ConnId>,
    pub framer: Option<Framer>,
    pub deframer: Option<Deframer>,
    rx: Vec<u8>,
}

impl Hostile {
    /// A stack at 10.0.0.`n` on `end`.
    pub fn new(end: LinkEnd, n: u8) -> Hostile {
        let sc = StackConfig {
            mac: [2, 0, 0, 0, 0, n],
            ip: Ipv4Cidr::new(Ipv4Address::new(10, 0, 0, n), 24),
            gateway: None,
            routes: Vec::new(),
            random_seed: u64::from(n),
            max_connections: 4,
            out_of_order_budget_bytes: warpcore_engine::tcp::OUT_OF_ORDER_BUDGET_DEFAULT,
        };
        Hostile {
            stack: Stack::new(end, &sc, Instant::ZERO).expect("stack"),
            // The engine cores' origin: the in-memory link delivers a frame once the
            // receiver's clock reaches the sender's stamp, so a peer counting from its own
            // creation would see every frame of the cores late by the gap between the two
            // origins (seconds, late in a long test binary: the startup then timed out).
            start: warpcore_engine::runtime::time_origin(&warpcore_engine::runtime::Clock::new(
                StdInstant::now,
            )),
            tcp: None,
            framer: None,
            deframer: None,
            rx: Vec::new(),
        }
    }

    /// One poll of the stack at the real elapsed time.
    pub fn poll(&mut self) {
        let t = Instant::from_micros(self.start.elapsed().as_micros() as i64);
        self.stack.poll(t);
    }

    /// Connects to 10.0.0.`to`:`port` as MPA initiator (Rev 2, CRC, client-server);
    /// `accept` is called repeatedly (it should accept the request on the victim's side)
    /// until the startup completed. Panics after 10 s.
    pub fn connect(&mut self, to: u8, port: u16, mut accept: impl FnMut() -> bool) {
        let tcp = self
            .stack
            .connect(
                (Ipv4Address::new(10, 0, 0, to), port),
                None,
                &TcpTuning::default(),
            )
            .expect("connect");
        let cfg = nego::Config {
            ird: 4,
            ord: 4,
            ..nego::Config::default()
        };
        let mut init = Initiator::new(cfg, std::time::Instant::now()).expect("initiator");
        let deadline = StdInstant::now() + Duration::from_secs(10);
        let mut negotiated = None;
        let mut accepted = false;
        while negotiated.is_none() || !accepted {
            assert!(StdInstant::now() < deadline, "hostile peer: no startup");
            self.poll();
            let _ = self.stack.send_with(tcp, |b| init.poll_transmit(b));
            let _ = self.stack.recv_with(tcp, |d| init.handle_input(d));
            while let Some(e) = init.poll_event() {
                match e {
                    nego::Event::Established(n) => negotiated = Some(n),
                    other => panic!("hostile peer: {other:?}"),
                }
            }
            if !accepted {
                accepted = accept();
            }
            std::thread::sleep(Duration::from_micros(50));
        }
        let n = negotiated.expect("negotiated");
        self.framer = Some(Framer::new(FramerConfig {
            markers: n.markers_tx,
            crc: n.crc,
            mulpdu: fpdu::mulpdu(1460, n.markers_tx),
            stream_offset: 0,
        }));
        self.deframer = Some(Deframer::new(DeframerConfig {
            markers: n.markers_rx,
            crc: n.crc,
            ..DeframerConfig::default()
        }));
        self.tcp = Some(tcp);
    }

    /// Frames `ulpdus` (the CRC of each corrupted if `corrupt_crc`) and sends them.
    pub fn send_ulpdus(&mut self, ulpdus: &[Vec<u8>], corrupt_crc: bool) {
        let tcp = self.tcp.expect("connected");
        let framer = self.framer.as_mut().expect("connected");
        let mut bytes = Vec::new();
        for u in ulpdus {
            let mut out = vec![0u8; framer.fpdu_wire_len(u.len())];
            let n = framer.emit(&[u], &mut out).expect("frame");
            if corrupt_crc {
                out[n - 1] ^= 0x55;
            }
            bytes.extend_from_slice(&out[..n]);
        }
        let mut off = 0;
        let deadline = StdInstant::now() + Duration::from_secs(10);
        while off < bytes.len() {
            assert!(StdInstant::now() < deadline, "hostile peer: cannot send");
            off += self.stack.send(tcp, &bytes[off..]).expect("send");
            self.poll();
        }
        self.poll();
    }

    /// Polls until the victim's Terminate arrives; its (layer, etype, code).
    pub fn terminate(&mut self) -> (u8, u8, u8) {
        let tcp = self.tcp.expect("connected");
        let deadline = StdInstant::now() + Duration::from_secs(10);
        loop {
            assert!(StdInstant::now() < deadline, "hostile peer: no Terminate");
            self.poll();
            let rx = &mut self.rx;
            let _ = self.stack.recv_with(tcp, |data| {
                rx.extend_from_slice(data);
                data.len()
            });
            let d = self.deframer.as_mut().expect("connected");
            let mut used = 0;
            while let Ok((n, Some(u))) = d.poll(&self.rx[used..]) {
                used += n;
                if let Ok(seg) = Segment::parse(&u) {
                    if let RdmapHeader::Terminate(t) = seg.repr.header {
                        let c = t.code;
                        return (c.layer(), c.etype(), c.code());
                    }
                }
            }
            self.rx.drain(..used);
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// Keeps the stack going for `d` (TCP teardown).
    pub fn idle(&mut self, d: Duration) {
        let end = StdInstant::now() + d;
        while StdInstant::now() < end {
            self.poll();
            if let Some(tcp) = self.tcp {
                let _ = self.stack.recv_with(tcp, |data| data.len());
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }
}

fn seg(repr: SegmentRepr, payload: &[u8]) -> Vec<u8> {
    let s = Segment { repr, payload };
    let mut v = vec![0u8; s.buffer_len()];
    s.emit(&mut v).expect("emit");
    v
}

/// A one-segment Send on QN 0 with `msn`.
pub fn send(msn: u32, payload: &[u8]) -> Vec<u8> {
    seg(
        SegmentRepr {
            last: true,
            buffer: DdpBuffer::Untagged {
                rsvd_ulp2: 0,
                qn: 0,
                msn,
                mo: 0,
            },
            opcode: Opcode::Send,
            header: RdmapHeader::None,
        },
        payload,
    )
}

/// A one-segment RDMA Write to `stag` at `to`.
pub fn write(stag: u32, to: u64, payload: &[u8]) -> Vec<u8> {
    seg(
        SegmentRepr {
            last: true,
            buffer: DdpBuffer::Tagged { stag, to },
            opcode: Opcode::Write,
            header: RdmapHeader::None,
        },
        payload,
    )
}

/// One segment of a Send with Invalidate of `stag` on QN 0: message `msn`, offset `mo`,
/// `last` for the L = 1 segment. Every segment carries the Invalidate STag (RDMAP-4.1-3).
pub fn send_invalidate(msn: u32, mo: u32, last: bool, stag: u32, payload: &[u8]) -> Vec<u8> {
    seg(
        SegmentRepr {
            last,
            buffer: DdpBuffer::Untagged {
                rsvd_ulp2: stag,
                qn: 0,
                msn,
                mo,
            },
            opcode: Opcode::SendInvalidate,
            header: RdmapHeader::None,
        },
        payload,
    )
}

/// An RFC 7306 CmpSwap Atomic Request on QN 1, message `msn`, of the word at `to` of `stag`
/// (swap all ones into it whatever it holds).
pub fn atomic_cmp_swap(msn: u32, stag: u32, to: u64) -> Vec<u8> {
    seg(
        SegmentRepr {
            last: true,
            buffer: DdpBuffer::Untagged {
                rsvd_ulp2: 0,
                qn: 1,
                msn,
                mo: 0,
            },
            opcode: Opcode::AtomicRequest,
            header: RdmapHeader::AtomicRequest(AtomicRequestRepr::cmp_swap(
                msn,
                stag,
                to,
                u64::MAX,
                u64::MAX,
                0,
                0,
            )),
        },
        &[],
    )
}
