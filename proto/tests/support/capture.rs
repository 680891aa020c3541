//! A synthetic capture writer for tests: TCP conversations with consistent sequence and
//! acknowledgement numbers, written as a classic pcap (Ethernet, IPv4, TCP), so that an
//! independent dissector (Wireshark's `tshark`) can judge the bytes our framer produces.

use std::time::Duration;

use etherparse::PacketBuilder;
use pcap_file::pcap::{PcapPacket, PcapWriter};

/// Which way a segment travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    /// From the initiator (the side that sends the MPA Request) to the responder.
    ToResponder,
    /// From the responder to the initiator.
    ToInitiator,
}

#[derive(Debug)]
struct Endpoint {
    mac: [u8; 6],
    ip: [u8; 4],
    port: u16,
    /// Next sequence number this endpoint sends.
    seq: u32,
}

/// One TCP connection between an initiator and a responder, recorded packet by packet.
#[derive(Debug)]
pub struct Conversation {
    initiator: Endpoint,
    responder: Endpoint,
    packets: Vec<Vec<u8>>,
}

impl Conversation {
    /// A connection from `198.18.0.12:client_port` to `198.18.0.11:server_port`, opened with
    /// a three-way handshake. Initial sequence numbers are chosen near the wrap point when
    /// `isn_near_wrap` so the capture also exercises sequence-number wrap.
    pub fn open(client_port: u16, server_port: u16, isn_near_wrap: bool) -> Conversation {
        let (isn_i, isn_r) = if isn_near_wrap {
            (0xFFFF_F000, 0xFFFF_FF00)
        } else {
            (0x1000_0000, 0x2000_0000)
        };
        let mut c = Conversation {
            initiator: Endpoint {
                mac: [0x02, 0, 0, 0, 0, 0x12],
                ip: [198, 18, 0, 12],
                port: client_port,
                seq: isn_i,
            },
            responder: Endpoint {
                mac: [0x02, 0, 0, 0, 0, 0x11],
                ip: [198, 18, 0, 11],
                port: server_port,
                seq: isn_r,
            },
            packets: Vec::new(),
        };
        c.control(Dir::ToResponder, Flags::Syn);
        c.control(Dir::ToInitiator, Flags::SynAck);
        c.segment(Dir::ToResponder, &[]);
        c
    }

    fn ends(&mut self, dir: Dir) -> (&mut Endpoint, &mut Endpoint) {
        match dir {
            Dir::ToResponder => (&mut self.initiator, &mut self.responder),
            Dir::ToInitiator => (&mut self.responder, &mut self.initiator),
        }
    }

    fn control(&mut self, dir: Dir, flags: Flags) {
        let (src, dst) = self.ends(dir);
        let mut b = PacketBuilder::ethernet2(src.mac, dst.mac)
            .ipv4(src.ip, dst.ip, 64)
            .tcp(src.port, dst.port, src.seq, 65535);
        b = match flags {
            Flags::Syn => b.syn(),
            Flags::SynAck => b.syn().ack(dst.seq),
            Flags::Fin => b.fin().ack(dst.seq),
        };
        let mut out = Vec::with_capacity(b.size(0));
        b.write(&mut out, &[]).expect("packet build");
        // SYN and FIN each take one sequence number.
        src.seq = src.seq.wrapping_add(1);
        self.packets.push(out);
    }

    /// One TCP segment carrying `payload` (which may be empty: a pure ACK).
    pub fn segment(&mut self, dir: Dir, payload: &[u8]) {
        let (src, dst) = self.ends(dir);
        let b = PacketBuilder::ethernet2(src.mac, dst.mac)
            .ipv4(src.ip, dst.ip, 64)
            .tcp(src.port, dst.port, src.seq, 65535)
            .ack(dst.seq);
        let b = if payload.is_empty() { b } else { b.psh() };
        let mut out = Vec::with_capacity(b.size(payload.len()));
        b.write(&mut out, payload).expect("packet build");
        src.seq = src.seq.wrapping_add(payload.len() as u32);
        self.packets.push(out);
    }

    /// Sends `data` as one or more segments of at most `mss` octets each.
    pub fn send(&mut self, dir: Dir, data: &[u8], mss: usize) {
        for chunk in data.chunks(mss.max(1)) {
            self.segment(dir, chunk);
        }
    }

    /// Closes both halves with FIN.
    pub fn close(&mut self) {
        self.control(Dir::ToResponder, Flags::Fin);
        self.control(Dir::ToInitiator, Flags::Fin);
        self.segment(Dir::ToResponder, &[]);
    }

    /// The recorded Ethernet frames.
    pub fn into_packets(self) -> Vec<Vec<u8>> {
        self.packets
    }
}

#[derive(Clone, Copy, Debug)]
enum Flags {
    Syn,
    SynAck,
    Fin,
}

/// Writes Ethernet frames as a classic pcap file, 1 ms apart.
pub fn write_pcap(path: &std::path::Path, frames: &[Vec<u8>]) {
    let file = std::fs::File::create(path).expect("create pcap");
    let mut w = PcapWriter::new(file).expect("pcap header");
    for (i, f) in frames.iter().enumerate() {
        let ts = Duration::from_millis(1_700_000_000_000 + i as u64);
        w.write_packet(&PcapPacket::new(ts, f.len() as u32, f))
            .expect("pcap record");
    }
}
