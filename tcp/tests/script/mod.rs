//! The one-connection script harness shared by `conn_script.rs` and `teardown.rs`: the
//! endpoints and initial sequence numbers, the segments we send (owned), a segment from the
//! peer, the configuration, timers run to an instant, and an established connection.
#![allow(dead_code)]

use smoltcp::socket::tcp::State;
use smoltcp::time::Instant;
use smoltcp::wire::{Ipv4Address, TcpControl, TcpRepr, TcpSeqNumber, TcpTimestampRepr};
use warpcore_tcp::conn::{ConnConfig, ConnEvent, Connection, Endpoints};

pub const US: (Ipv4Address, u16) = (Ipv4Address::new(198, 18, 0, 1), 4791);
pub const PEER: (Ipv4Address, u16) = (Ipv4Address::new(198, 18, 0, 2), 50000);
pub const ISS: TcpSeqNumber = TcpSeqNumber(1000);
pub const PISS: TcpSeqNumber = TcpSeqNumber(500_000);

pub fn ep() -> Endpoints {
    Endpoints {
        local: US,
        remote: PEER,
    }
}

pub fn ms(n: u64) -> Instant {
    Instant::from_micros(n as i64 * 1000)
}

pub fn us(n: u64) -> Instant {
    Instant::from_micros(n as i64)
}

/// An owned copy of a segment we sent.
#[derive(Debug, Clone)]
pub struct Out {
    pub control: TcpControl,
    pub seq: TcpSeqNumber,
    pub ack: Option<TcpSeqNumber>,
    pub window: u16,
    pub mss: Option<u16>,
    pub ws: Option<u8>,
    pub sack_permitted: bool,
    pub sack: Vec<(u32, u32)>,
    pub ts: Option<TcpTimestampRepr>,
    pub payload: Vec<u8>,
}

pub fn drain(c: &mut Connection, now: Instant) -> Vec<Out> {
    let mut v = Vec::new();
    while let Some(s) = c.poll_transmit(now) {
        v.push(Out {
            control: s.control,
            seq: s.seq_number,
            ack: s.ack_number,
            window: s.window_len,
            mss: s.max_seg_size,
            ws: s.window_scale,
            sack_permitted: s.sack_permitted,
            sack: s.sack_ranges.iter().flatten().copied().collect(),
            ts: s.timestamp,
            payload: s.payload.to_vec(),
        });
        assert!(v.len() < 10_000, "poll_transmit never ends");
    }
    v
}

pub fn events(c: &mut Connection) -> Vec<ConnEvent> {
    std::iter::from_fn(|| c.poll_event()).collect()
}

/// A segment from the peer.
pub fn seg(
    control: TcpControl,
    seq: TcpSeqNumber,
    ack: Option<TcpSeqNumber>,
    payload: &[u8],
) -> TcpRepr<'_> {
    TcpRepr {
        src_port: PEER.1,
        dst_port: US.1,
        control,
        seq_number: seq,
        ack_number: ack,
        window_len: 0xffff,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload,
    }
}

pub fn cfg() -> ConnConfig {
    ConnConfig {
        rx_buffer: 64 * 1024,
        tx_buffer: 256 * 1024,
        mss: 1460,
        ..ConnConfig::default()
    }
}

/// A passive connection to the peer's SYN (PISS, MSS 1460), its SYN-ACK out at 0 ms.
pub fn syn_received() -> Connection {
    let mut syn = seg(TcpControl::Syn, PISS, None, &[]);
    syn.max_seg_size = Some(1460);
    let mut c = Connection::accept(&cfg(), ep(), ISS, &syn, ms(0));
    assert_eq!(drain(&mut c, ms(0))[0].control, TcpControl::Syn);
    c
}

/// Runs timers up to `until` in steps, collecting what goes out.
pub fn run_until(c: &mut Connection, from: Instant, until: Instant) -> Vec<(Instant, Out)> {
    let mut out = Vec::new();
    let mut now = from;
    loop {
        for o in drain(c, now) {
            out.push((now, o));
        }
        match c.poll_timeout() {
            Some(t) if t <= until => {
                now = t.max(now);
                c.handle_timeout(now);
            }
            _ => return out,
        }
    }
}

/// An established active connection; the peer offered MSS 1460, WS 7, SACK and timestamps
/// unless `plain`. Returns it at t = 1 ms with the SYN-ACK acknowledged.
pub fn established(config: ConnConfig, plain: bool) -> Connection {
    let mut c = Connection::connect(&config, ep(), ISS, ms(0));
    let syn = drain(&mut c, ms(0));
    assert_eq!(syn.len(), 1);
    let mut sa = seg(TcpControl::Syn, PISS, Some(ISS + 1), &[]);
    if !plain {
        sa.max_seg_size = Some(1460);
        sa.window_scale = Some(7);
        sa.sack_permitted = true;
        sa.timestamp = Some(TcpTimestampRepr {
            tsval: 1,
            tsecr: syn[0].ts.map_or(0, |t| t.tsval),
        });
    } else {
        sa.max_seg_size = Some(1460);
    }
    c.handle_segment(ms(1), &sa);
    assert_eq!(c.state(), State::Established);
    let ack = drain(&mut c, ms(1));
    assert_eq!(ack.len(), 1, "{ack:?}");
    assert_eq!(events(&mut c), vec![ConnEvent::Connected]);
    c
}

/// The peer's data segment at its stream offset `off` (after its SYN).
pub fn data(off: usize, payload: &[u8], ack: TcpSeqNumber) -> TcpRepr<'_> {
    seg(TcpControl::Psh, PISS + 1 + off, Some(ack), payload)
}

/// `s` with the timestamp option a peer that negotiated timestamps puts on every segment
/// (RFC 7323 3.2): TSval 1, the SYN-ACK's of `established`.
pub fn stamped(mut s: TcpRepr<'_>) -> TcpRepr<'_> {
    s.timestamp = Some(TcpTimestampRepr { tsval: 1, tsecr: 0 });
    s
}
