//! Test-only entry point of the `tcp_segments` fuzz target (feature `fuzzing`; issue 11).
//!
//! The input drives one [`crate::Stack`] (Warpcore's TCP) over a scripted device, with the
//! fuzzer playing the peer at 198.18.0.2: segments with arbitrary flags, sequence and
//! acknowledgement numbers (mostly near the live window, sometimes anywhere), windows,
//! options (SACK options of four blocks among them, as a peer without timestamps sends
//! them, RFC 2018 3) and payload lengths, sent to a listener, to an active connection or to
//! no connection at all; raw frames; the clock moving on; and the local user sending,
//! reading, closing, aborting and releasing.
//!
//! Invariants checked after every step (a violation panics, failing the run):
//! * nothing panics, and time only moves forward;
//! * the octets a connection delivers are exactly the peer's stream from offset 0, in order:
//!   every payload octet the fuzzer sends is a function of its stream offset, so however
//!   segments overlap, repeat or arrive out of order, any corruption of reassembly shows;
//! * every segment the stack sends carries, at each stream offset, the octet the user wrote
//!   there (retransmissions come from the same source), never beyond what was written;
//! * every frame the stack sends parses as Ethernet/ARP or Ethernet/IPv4/TCP|ICMP;
//! * buffered octets never exceed the configured buffers, and the octets held out of order
//!   never the stack's budget ([`StackConfig::out_of_order_budget_bytes`], one receive
//!   buffer's worth here, so that two connections' out-of-order data meets it, and one
//!   reneges for the other: RFC 2018 8), whose count always equals the sum over the
//!   connections and whose index of holders is exactly theirs;
//! * with feature `self-check`, the receive fast paths change nothing: the same input run
//!   again with every connection held to the general path
//!   ([`crate::conn::set_general_paths_only`]) sends the same frames, delivers the same
//!   octets and raises the same events, step by step.

use std::collections::VecDeque;
use std::sync::OnceLock;

use arbitrary::{Arbitrary, Unstructured};
use smoltcp::phy::{self, ChecksumCapabilities, Device, DeviceCapabilities, Medium};
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr, IpAddress, IpProtocol,
    Ipv4Address, Ipv4Cidr, Ipv4Packet, Ipv4Repr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
    TcpTimestampRepr,
};

use crate::{ConnId, Event, PollDevice, Stack, StackConfig, TcpTuning};

const US: Ipv4Address = Ipv4Address::new(198, 18, 0, 1);
const PEER: Ipv4Address = Ipv4Address::new(198, 18, 0, 2);
const US_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
const PEER_MAC: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);
const LISTEN_PORT: u16 = 4000;
const PASSIVE_PEER_PORT: u16 = 5000;
const ACTIVE_PEER_PORT: u16 = 6000;
const PEER_ISS: u32 = 0x1000_0000;
const BUF: usize = 16 * 1024;

/// The peer's octet at sequence number `seq`: a function of the absolute sequence number, so
/// every copy of an octet is the same whatever the segment boundaries.
fn peer_octet(seq: u32) -> u8 {
    (u64::from(seq).wrapping_mul(0x9e37_79b9) >> 11) as u8
}

/// Byte `off` of our user's stream.
fn user_octet(off: u64) -> u8 {
    (off.wrapping_mul(0x85eb_ca6b) >> 13) as u8 ^ 0x5a
}

/// [`peer_octet`] repeats every 2^19 sequence numbers (its octet is bits 11-18 of `seq *
/// 0x9e37_79b9`, which depend on `seq` mod 2^19 alone; 2^32 is a multiple, so the
/// sequence space's wrap keeps the period), [`user_octet`] every 2^21 offsets (bits 13-20
/// of the product): one period of each, computed once per process (a pure function of the
/// index, the same for every input), lets payloads be copied and the checks compare slices
/// instead of calling the function octet by octet, which under the fuzzer's instrumentation
/// (a coverage and comparison callback per iteration) cost a large share of each input.
const PEER_PERIOD: usize = 1 << 19;
/// See [`PEER_PERIOD`].
const USER_PERIOD: usize = 1 << 21;

fn peer_table() -> &'static [u8] {
    static T: OnceLock<Box<[u8]>> = OnceLock::new();
    T.get_or_init(|| (0..PEER_PERIOD as u32).map(peer_octet).collect())
}

fn user_table() -> &'static [u8] {
    static T: OnceLock<Box<[u8]>> = OnceLock::new();
    T.get_or_init(|| (0..USER_PERIOD as u64).map(user_octet).collect())
}

/// Calls `f(at, run)` for consecutive runs of `table` (one period of a periodic stream)
/// that together are the `len` octets of the stream from index `start`: `at` is the run's
/// offset in those `len` octets.
fn periodic_runs(table: &[u8], start: usize, len: usize, mut f: impl FnMut(usize, &[u8])) {
    let mut at = 0;
    let mut i = start % table.len();
    while at < len {
        let n = (table.len() - i).min(len - at);
        f(at, &table[i..i + n]);
        at += n;
        i = 0;
    }
}

/// `dst` := the peer's octets from sequence number `seq` on (each [`peer_octet`]).
fn fill_peer(seq: u32, dst: &mut [u8]) {
    periodic_runs(peer_table(), seq as usize, dst.len(), |at, run| {
        dst[at..at + run.len()].copy_from_slice(run);
    });
}

/// `dst` := our user's octets from stream offset `off` on (each [`user_octet`]).
fn fill_user(off: u64, dst: &mut [u8]) {
    let start = (off % USER_PERIOD as u64) as usize;
    periodic_runs(user_table(), start, dst.len(), |at, run| {
        dst[at..at + run.len()].copy_from_slice(run);
    });
}

/// The first octet of `d` that is not the periodic stream of `table` from `start` on.
fn first_mismatch(table: &[u8], start: usize, d: &[u8]) -> Option<usize> {
    let mut bad = None;
    periodic_runs(table, start, d.len(), |at, run| {
        let got = &d[at..at + run.len()];
        if bad.is_none() && got != run {
            bad = got
                .iter()
                .zip(run)
                .position(|(a, b)| a != b)
                .map(|k| at + k);
        }
    });
    bad
}

/// The peer's payload of `len` octets from sequence number `start`.
fn peer_payload(start: u32, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    fill_peer(start, &mut v);
    v
}

#[derive(Debug, Default)]
struct ScriptDevice {
    rx: VecDeque<Vec<u8>>,
    tx: Vec<Vec<u8>>,
}

#[derive(Debug)]
struct Rx(Vec<u8>);
#[derive(Debug)]
struct Tx<'a>(&'a mut Vec<Vec<u8>>);

impl phy::RxToken for Rx {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(&self.0)
    }
}

impl phy::TxToken for Tx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut v = vec![0; len];
        let r = f(&mut v);
        self.0.push(v);
        r
    }
}

impl Device for ScriptDevice {
    type RxToken<'a> = Rx;
    type TxToken<'a> = Tx<'a>;
    fn receive(&mut self, _: Instant) -> Option<(Rx, Tx<'_>)> {
        let f = self.rx.pop_front()?;
        Some((Rx(f), Tx(&mut self.tx)))
    }
    fn transmit(&mut self, _: Instant) -> Option<Tx<'_>> {
        Some(Tx(&mut self.tx))
    }
    fn capabilities(&self) -> DeviceCapabilities {
        let mut c = DeviceCapabilities::default();
        c.medium = Medium::Ethernet;
        c.max_transmission_unit = 1514;
        // The fuzzer need not compute checksums: both directions skip them.
        c.checksum = ChecksumCapabilities::ignored();
        c
    }
}

impl PollDevice for ScriptDevice {}

#[derive(Debug, Arbitrary)]
enum Target {
    Passive,
    Active,
    Nobody(u16, u16),
}

#[derive(Debug, Arbitrary)]
struct Seg {
    target: Target,
    /// The control (`flags % 8`, `build`); bit 7 asks for a fourth SACK block
    /// (`with_fourth_sack_block`).
    flags: u8,
    /// Relative to the peer's next octet (small), or an absolute number.
    seq: Num,
    /// Relative to our next octet, or absolute, or absent.
    ack: Option<Num>,
    window: u16,
    mss: Option<u16>,
    ws: Option<u8>,
    sack_permitted: bool,
    sack: [Option<(i16, u16)>; 3],
    ts: Option<(u32, u32)>,
    len: u16,
}

#[derive(Debug, Arbitrary)]
enum Num {
    Rel(i16),
    Far(i32),
    Abs(u32),
}

#[derive(Debug, Arbitrary)]
enum Op {
    Seg(Seg),
    Raw(Vec<u8>),
    Wait(u16),
    WaitLong(u8),
    Send(u16),
    Recv(u16),
    Close(bool),
    Abort(bool),
    Release(bool),
    Connect,
    /// Well-formed peer moves, so random inputs reach the synchronized states often: a SYN to
    /// the listener (or a SYN-ACK to our SYN), an ACK of everything seen, in-order data.
    PeerOpen(bool),
    PeerAck(bool),
    PeerData(bool, u16),
}

/// What the peer (the fuzzer) knows of one connection.
#[derive(Debug, Default)]
struct Side {
    id: Option<ConnId>,
    /// Our ISS, learned from our SYN or SYN-ACK.
    our_iss: Option<TcpSeqNumber>,
    /// Highest of our octets seen (relative to our ISS + 1).
    our_seen: u64,
    /// The peer's next stream offset (what it has "sent" in order so far, roughly).
    peer_next: u64,
    /// Octets our user wrote.
    written: u64,
    /// Octets delivered to our user.
    delivered: u64,
    /// The sequence number of the peer's first stream octet as our stack acknowledged it
    /// (IRS + 1), learned from the first ACK it sent.
    peer_base: Option<TcpSeqNumber>,
    local_port: u16,
}

/// The external records one side's user queued: (token, stream offset, length) of those
/// not yet reported acknowledged, the last token given and the last acknowledged.
#[derive(Debug, Default)]
struct Ext {
    live: Vec<(u64, u64, usize)>,
    next_token: u64,
    acked: Option<u64>,
}

fn clamp_len(len: u16) -> usize {
    usize::from(len % 1500)
}

fn build(seg: &Seg, side: &Side, dst_port: u16, src_port: u16) -> (TcpRepr<'static>, Vec<u8>) {
    let peer_base = side.peer_base.unwrap_or(TcpSeqNumber(PEER_ISS as i32) + 1);
    let seq = match seg.seq {
        Num::Rel(r) => TcpSeqNumber(
            peer_base
                .0
                .wrapping_add(side.peer_next as i32)
                .wrapping_add(i32::from(r)),
        ),
        Num::Far(r) => TcpSeqNumber(peer_base.0.wrapping_add(r)),
        Num::Abs(a) => TcpSeqNumber(a as i32),
    };
    let our_base = side.our_iss.unwrap_or(TcpSeqNumber(0)) + 1;
    let ack = seg.ack.as_ref().map(|a| match a {
        Num::Rel(r) => TcpSeqNumber(
            (our_base + side.our_seen as usize)
                .0
                .wrapping_add(i32::from(*r)),
        ),
        Num::Far(r) => TcpSeqNumber(our_base.0.wrapping_add(*r)),
        Num::Abs(a) => TcpSeqNumber(*a as i32),
    });
    let control = match seg.flags % 8 {
        3 => TcpControl::Psh,
        4 => TcpControl::Syn,
        5 => TcpControl::Fin,
        6 => TcpControl::Rst,
        _ => TcpControl::None,
    };
    let len = if control == TcpControl::Rst {
        0
    } else {
        clamp_len(seg.len)
    };
    // The first payload octet follows the SYN, which occupies one sequence number.
    let start = (seq.0 as u32).wrapping_add(u32::from(control == TcpControl::Syn));
    let payload = peer_payload(start, len);
    let mut sack = [None; 3];
    for (i, s) in seg.sack.iter().enumerate() {
        if let Some((off, l)) = s {
            let a = (our_base + side.our_seen as usize)
                .0
                .wrapping_add(i32::from(*off));
            sack[i] = Some((a as u32, (a as u32).wrapping_add(u32::from(*l))));
        }
    }
    // Options as a real peer sends them: MSS, window scale and SACK-permitted only on a SYN,
    // SACK blocks only on others (more would not fit the 40 octets of TCP options; a
    // fourth block is added to the frame where `Seg::flags` asks, `with_fourth_sack_block`).
    let syn = control == TcpControl::Syn;
    let repr = TcpRepr {
        src_port,
        dst_port,
        control,
        seq_number: seq,
        ack_number: ack,
        window_len: seg.window,
        window_scale: if syn { seg.ws } else { None },
        max_seg_size: if syn { seg.mss } else { None },
        sack_permitted: syn && seg.sack_permitted,
        sack_ranges: if syn { [None; 3] } else { sack },
        timestamp: seg
            .ts
            .map(|(tsval, tsecr)| TcpTimestampRepr { tsval, tsecr }),
        payload: &[],
    };
    (repr, payload)
}

/// A segment a well-behaved peer would send now: the next sequence number, an ACK of all
/// our octets seen (`ack`), a large window, and on a SYN the usual options.
fn well_formed(
    side: &Side,
    dst_port: u16,
    src_port: u16,
    control: TcpControl,
    ack: bool,
) -> TcpRepr<'static> {
    let syn = control == TcpControl::Syn;
    let base = side.peer_base.unwrap_or(TcpSeqNumber(PEER_ISS as i32) + 1);
    let seq = if syn {
        base - 1
    } else {
        base + side.peer_next as usize
    };
    let ack = if ack {
        side.our_iss.map(|iss| iss + 1 + side.our_seen as usize)
    } else {
        None
    };
    TcpRepr {
        src_port,
        dst_port,
        control,
        seq_number: seq,
        ack_number: ack,
        window_len: 0xffff,
        window_scale: syn.then_some(7),
        max_seg_size: syn.then_some(1460),
        sack_permitted: syn,
        sack_ranges: [None; 3],
        timestamp: None,
        payload: &[],
    }
}

fn frame(repr: &TcpRepr<'_>, payload: &[u8]) -> Vec<u8> {
    let repr = TcpRepr { payload, ..*repr };
    let tcp_len = repr.header_len() + payload.len();
    let mut f = vec![0u8; 14 + 20 + tcp_len];
    let mut eth = EthernetFrame::new_unchecked(&mut f[..]);
    EthernetRepr {
        src_addr: PEER_MAC,
        dst_addr: US_MAC,
        ethertype: EthernetProtocol::Ipv4,
    }
    .emit(&mut eth);
    let ip = Ipv4Repr {
        src_addr: PEER,
        dst_addr: US,
        next_header: IpProtocol::Tcp,
        payload_len: tcp_len,
        hop_limit: 64,
    };
    let caps = ChecksumCapabilities::ignored();
    let mut ipp = Ipv4Packet::new_unchecked(eth.payload_mut());
    ip.emit(&mut ipp, &caps);
    repr.emit(
        &mut TcpPacket::new_unchecked(ipp.payload_mut()),
        &IpAddress::Ipv4(PEER),
        &IpAddress::Ipv4(US),
        &caps,
    );
    f
}

/// Adds a fourth block to the SACK option of `f` (the frame of `repr`), as a peer without
/// timestamps sends four (RFC 2018 3: 40 octets of options hold them; smoltcp's writer
/// stops at three): the range after the third block, as long as it. Only for a segment with
/// three blocks, no timestamps and no other option (`build` gives a non-SYN segment none);
/// any other frame stays as it is.
fn with_fourth_sack_block(f: &mut Vec<u8>, repr: &TcpRepr<'_>) {
    let Some((l, r)) = repr.sack_ranges[2] else {
        return;
    };
    if repr.timestamp.is_some() || repr.control == TcpControl::Syn {
        return;
    }
    let tcp = 14 + 20;
    let hl = usize::from(f[tcp + 12] >> 4) * 4;
    // The SACK option of three blocks first, as smoltcp writes it, then padding.
    if hl != 48 || f[tcp + 20..tcp + 22] != [5, 26] {
        return;
    }
    let blocks = f[tcp + 22..tcp + 46].to_vec();
    let payload = f.split_off(tcp + hl);
    f.truncate(tcp + 20);
    f.extend_from_slice(&[1, 1, 5, 34]);
    f.extend_from_slice(&blocks);
    f.extend_from_slice(&r.to_be_bytes());
    f.extend_from_slice(&r.wrapping_add(r.wrapping_sub(l)).to_be_bytes());
    f[tcp + 12] = (56 / 4) << 4 | (f[tcp + 12] & 0x0f);
    f.extend_from_slice(&payload);
    let ip_len = (f.len() - 14) as u16;
    f[14 + 2..14 + 4].copy_from_slice(&ip_len.to_be_bytes());
}

/// Checks one frame the stack sent and updates what the peer knows.
fn check_output(f: &[u8], passive: &mut Side, active: &mut Side, arp_due: &mut bool) {
    let eth = EthernetFrame::new_checked(f).expect("stack sent a short Ethernet frame");
    match eth.ethertype() {
        EthernetProtocol::Arp => {
            // The peer answers every ARP request (an entry expires after a minute).
            let p = smoltcp::wire::ArpPacket::new_checked(eth.payload())
                .expect("stack sent a short ARP packet");
            smoltcp::wire::ArpRepr::parse(&p).expect("stack sent a bad ARP packet");
            *arp_due = true;
            return;
        }
        EthernetProtocol::Ipv4 => {}
        other => panic!("stack sent EtherType {other}"),
    }
    let caps = ChecksumCapabilities::ignored();
    let ipp = Ipv4Packet::new_checked(eth.payload()).expect("stack sent a bad IPv4 packet");
    let ip = Ipv4Repr::parse(&ipp, &caps).expect("stack sent a bad IPv4 header");
    if ip.next_header != IpProtocol::Tcp {
        return;
    }
    let tp = TcpPacket::new_checked(ipp.payload()).expect("stack sent a short TCP segment");
    let t = TcpRepr::parse(&tp, &IpAddress::Ipv4(US), &IpAddress::Ipv4(PEER), &caps)
        .expect("stack sent a bad TCP segment");
    let side = if t.dst_port == PASSIVE_PEER_PORT && t.src_port == LISTEN_PORT {
        passive
    } else if t.dst_port == ACTIVE_PEER_PORT {
        active
    } else if t.src_port == LISTEN_PORT {
        // The listener answers a SYN from any port (a SYN-ACK, then ACKs or a RST of that
        // half-open or accepted connection): nothing the user wrote goes there.
        assert!(
            t.payload.is_empty(),
            "data to a connection the user never wrote to: {t}"
        );
        return;
    } else {
        // RSTs to segments for nobody.
        assert_eq!(
            t.control,
            TcpControl::Rst,
            "segment to an unknown peer port: {t}"
        );
        return;
    };
    if t.control == TcpControl::Syn {
        side.our_iss = Some(t.seq_number);
        side.local_port = t.src_port;
    }
    if side.peer_base.is_none() && t.control != TcpControl::Rst {
        side.peer_base = t.ack_number;
    }
    let Some(iss) = side.our_iss else {
        return;
    };
    if t.payload.is_empty() {
        return;
    }
    let first = i64::from(t.seq_number.0.wrapping_sub((iss + 1).0));
    assert!(first >= 0, "payload before our ISS: {t}");
    let end = first as u64 + t.payload.len() as u64;
    assert!(
        end <= side.written,
        "stack sent octets up to {end}, the user wrote {}",
        side.written
    );
    let start = (first as u64 % USER_PERIOD as u64) as usize;
    if let Some(k) = first_mismatch(user_table(), start, t.payload) {
        let off = first as u64 + k as u64;
        assert_eq!(
            t.payload[k],
            user_octet(off),
            "octet {off} of our stream went out altered"
        );
    }
    side.our_seen = side.our_seen.max(end);
}

/// Runs one fuzz input (see the module documentation).
pub fn tcp_segments(data: &[u8]) {
    #[cfg(not(feature = "self-check"))]
    run(data);
    #[cfg(feature = "self-check")]
    {
        let fast = run(data);
        crate::conn::set_general_paths_only(true);
        let general = std::panic::catch_unwind(|| run(data));
        crate::conn::set_general_paths_only(false);
        let general = general.unwrap_or_else(|e| std::panic::resume_unwind(e));
        for (step, (f, g)) in fast.iter().zip(&general).enumerate() {
            assert_eq!(
                f, g,
                "step {step}: the fast paths and the general path differ"
            );
        }
        assert_eq!(
            fast.len(),
            general.len(),
            "the two runs took different steps"
        );
    }
}

/// What one step of a run showed: the frames sent, the octets delivered in place and the
/// events, in order.
#[derive(Debug, Default, PartialEq)]
struct Shown {
    frames: Vec<Vec<u8>>,
    delivered: Vec<(u32, u32, usize)>,
    events: Vec<Event>,
}

/// One run of the script in `data` (see the module documentation); returns what each step
/// showed.
fn run(data: &[u8]) -> Vec<Shown> {
    let mut shown = Vec::new();
    let mut u = Unstructured::new(data);
    let cfg = StackConfig {
        mac: US_MAC.0,
        ip: Ipv4Cidr::new(US, 24),
        gateway: None,
        routes: Vec::new(),
        random_seed: 7,
        max_connections: 8,
        out_of_order_budget_bytes: BUF,
    };
    let tuning = TcpTuning {
        rx_buffer: BUF,
        tx_buffer: BUF,
        ..TcpTuning::default()
    };
    let Ok(mut stack) = Stack::new(ScriptDevice::default(), &cfg, Instant::ZERO) else {
        panic!("stack refused a valid configuration");
    };
    let listener = stack.listen(LISTEN_PORT, 4, &tuning).expect("listen");
    let mut now = Instant::ZERO;
    let (mut passive, mut active) = (Side::default(), Side::default());
    // External records of each side (written by `fill` at every transmission), and the
    // last token reported acknowledged: none may be asked for after that.
    let (mut ext_p, mut ext_a) = (Ext::default(), Ext::default());
    // Read once a run: an environment lookup at every step took a lock and a copy.
    let trace = std::env::var_os("WC_FUZZ_TRACE").is_some();
    // The peer's MAC is known from the start, as after any exchange.
    stack.device_mut().rx.push_back(arp_reply());
    for step in 0..256u32 {
        let Ok(op) = Op::arbitrary(&mut u) else {
            break;
        };
        let mut seen = Shown::default();
        // The peer's stream starts where the stack says: the first ACK it sent (where
        // `check_output` learns it) may already cover data that came with the SYN or before
        // that ACK went out.
        for side in [&mut passive, &mut active] {
            if let Some(start) = side.id.and_then(|id| stack.peer_stream_start(id)) {
                side.peer_base = Some(start);
            }
        }
        if trace {
            eprintln!("op {op:?} passive {passive:?} active {active:?}");
        }
        let mut nobody = Side::default();
        match op {
            Op::Seg(seg) => {
                let (side, dst, src) = match seg.target {
                    Target::Passive => (&mut passive, LISTEN_PORT, PASSIVE_PEER_PORT),
                    Target::Active => {
                        let p = active.local_port.max(1);
                        (&mut active, p, ACTIVE_PEER_PORT)
                    }
                    Target::Nobody(d, s) => (&mut nobody, d.max(1), s.max(1)),
                };
                let (repr, payload) = build(&seg, side, dst, src);
                if matches!(seg.seq, Num::Rel(r) if r >= 0) && repr.control != TcpControl::Rst {
                    side.peer_next = side.peer_next.max(
                        side.peer_next
                            + payload.len() as u64
                            + u64::from(repr.control == TcpControl::Syn),
                    );
                }
                let mut f = frame(&repr, &payload);
                if seg.flags & 0x80 != 0 {
                    with_fourth_sack_block(&mut f, &repr);
                }
                stack.device_mut().rx.push_back(f);
            }
            Op::PeerOpen(which) => {
                let (side, dst, src) = if which {
                    (&mut passive, LISTEN_PORT, PASSIVE_PEER_PORT)
                } else {
                    let p = active.local_port.max(1);
                    (&mut active, p, ACTIVE_PEER_PORT)
                };
                let repr = well_formed(side, dst, src, TcpControl::Syn, side.our_iss.is_some());
                stack.device_mut().rx.push_back(frame(&repr, &[]));
            }
            Op::PeerAck(which) => {
                let (side, dst, src) = if which {
                    (&mut passive, LISTEN_PORT, PASSIVE_PEER_PORT)
                } else {
                    let p = active.local_port.max(1);
                    (&mut active, p, ACTIVE_PEER_PORT)
                };
                let repr = well_formed(side, dst, src, TcpControl::None, true);
                stack.device_mut().rx.push_back(frame(&repr, &[]));
            }
            Op::PeerData(which, len) => {
                let (side, dst, src) = if which {
                    (&mut passive, LISTEN_PORT, PASSIVE_PEER_PORT)
                } else {
                    let p = active.local_port.max(1);
                    (&mut active, p, ACTIVE_PEER_PORT)
                };
                let repr = well_formed(side, dst, src, TcpControl::Psh, true);
                let start = repr.seq_number.0 as u32;
                let payload = peer_payload(start, usize::from(len % 1461));
                side.peer_next += payload.len() as u64;
                stack.device_mut().rx.push_back(frame(&repr, &payload));
            }
            Op::Raw(mut bytes) => {
                bytes.truncate(1600);
                stack.device_mut().rx.push_back(bytes);
            }
            Op::Wait(us) => now += Duration::from_micros(u64::from(us)),
            Op::WaitLong(s) => now += Duration::from_millis(u64::from(s) * 50),
            Op::Send(n) => {
                for (side, ext) in [(&mut passive, &mut ext_p), (&mut active, &mut ext_a)] {
                    if let Some(id) = side.id {
                        let off = side.written;
                        let n = usize::from(n);
                        let write = |buf: &mut [u8]| {
                            let k = buf.len().min(n);
                            fill_user(off, &mut buf[..k]);
                            k
                        };
                        // Odd sizes are records (an FPDU's way in: the MPA-aligned sender),
                        // one in two of them external (the engine's FPDUs sent from
                        // registered memory).
                        let sent = if n % 4 == 3 {
                            ext.next_token += 1;
                            match stack.send_external_record(id, n, ext.next_token) {
                                Ok(true) => {
                                    ext.live.push((ext.next_token, off, n));
                                    Ok(n)
                                }
                                other => other.map(|_| 0),
                            }
                        } else if n % 2 == 1 {
                            stack.send_with_room(id, n, write)
                        } else {
                            stack.send_with(id, write)
                        };
                        if let Ok(k) = sent {
                            side.written += k as u64;
                        }
                    }
                }
            }
            Op::Recv(n) => {
                for side in [&mut passive, &mut active] {
                    if let Some(id) = side.id {
                        let (off, base) = (side.delivered, side.peer_base);
                        if let Ok(k) = stack.recv_with(id, |d| {
                            let k = d.len().min(usize::from(n));
                            check_delivered(base, off, &d[..k]);
                            k
                        }) {
                            side.delivered += k as u64;
                        }
                    }
                }
            }
            Op::Close(which) => {
                let (side, ext) = if which {
                    (&passive, &mut ext_p)
                } else {
                    (&active, &mut ext_a)
                };
                if let Some(id) = side.id {
                    let _ = stack.close(id);
                    // One close in two also takes the external records back from their
                    // owner, as the engine does for a queue pair destroyed after its FIN
                    // (`Stack::internalize_external`): what is sent of them from now on
                    // must still be the user's octets (checked at every frame), and no
                    // fill may ask for them again (the records leave `ext.live`).
                    if step % 2 == 1 && !ext.live.is_empty() {
                        let live = &ext.live;
                        let mut failed_at = None;
                        let _ = stack.internalize_external(id, |token, at, dst| {
                            let Some(&(_, start, len)) = live.iter().find(|r| r.0 == token) else {
                                panic!("internalize asked for record {token}, never queued");
                            };
                            assert!(at + dst.len() <= len, "past the end of record {token}");
                            // As the fill: one record in 29 cannot be written.
                            if token.is_multiple_of(29) {
                                failed_at = Some(token);
                                return false;
                            }
                            fill_user(start + at as u64, dst);
                            true
                        });
                        // Those before a failed one are the connection's now (records are
                        // taken oldest first), the others stay external.
                        ext.live.retain(|r| failed_at.is_some_and(|t| r.0 >= t));
                    }
                }
            }
            Op::Abort(which) => {
                let side = if which { &passive } else { &active };
                if let Some(id) = side.id {
                    let _ = stack.abort(id);
                }
            }
            Op::Release(which) => {
                let (side, ext) = if which {
                    (&mut passive, &mut ext_p)
                } else {
                    (&mut active, &mut ext_a)
                };
                if let Some(id) = side.id.take() {
                    let _ = stack.release(id);
                    *side = Side::default();
                    *ext = Ext::default();
                }
            }
            Op::Connect => {
                if active.id.is_none() {
                    active = Side::default();
                    ext_a = Ext::default();
                    active.id = stack.connect((PEER, ACTIVE_PEER_PORT), None, &tuning).ok();
                }
            }
        }
        // In-order octets are offered in place while nothing is queued (the engine's
        // placement from the frame): taken whole, in part or not at all by turns, each
        // checked where it falls in the peer's stream; the rest queues for `Op::Recv`.
        let ids = (passive.id, active.id);
        let (ep, ea) = (&ext_p, &ext_a);
        let fill = |id: ConnId, token: u64, at: usize, dst: &mut [u8], want: bool| {
            let ext = if Some(id) == ids.0 {
                ep
            } else if Some(id) == ids.1 {
                ea
            } else {
                panic!("fill for a connection the user does not hold");
            };
            assert!(
                ext.acked.is_none_or(|a| token > a),
                "record {token} asked for after {:?} was reported acknowledged",
                ext.acked
            );
            let Some(&(_, start, len)) = ext.live.iter().find(|r| r.0 == token) else {
                panic!("fill of record {token}, never queued");
            };
            assert!(at + dst.len() <= len, "fill past the end of record {token}");
            // One record in 29 cannot be written (the engine's region went away): the
            // connection must reset rather than send anything else.
            if token.is_multiple_of(29) {
                return None;
            }
            fill_user(start + at as u64, dst);
            Some(if want { crate::csum::sum(dst) } else { 0 })
        };
        stack.poll_with_fill(
            now,
            |id, d| {
                // A connection not accepted yet (or released) is not the user's: left queued.
                let Some(side) = [&mut passive, &mut active]
                    .into_iter()
                    .find(|s| s.id == Some(id) && s.peer_base.is_some())
                else {
                    return 0;
                };
                let k = match step % 3 {
                    0 => d.len(),
                    1 => d.len() / 2,
                    _ => 0,
                };
                check_delivered(side.peer_base, side.delivered, &d[..k]);
                side.delivered += k as u64;
                seen.delivered.push((id.index, id.generation, k));
                k
            },
            fill,
        );
        for (side, ext) in [(&passive, &mut ext_p), (&active, &mut ext_a)] {
            if let Some(id) = side.id {
                if let Ok(Some(t)) = stack.take_acked_external(id) {
                    assert!(
                        ext.acked.is_none_or(|a| t > a),
                        "acknowledged tokens go back"
                    );
                    ext.acked = Some(t);
                    ext.live.retain(|r| r.0 > t);
                }
            }
        }
        while let Some(e) = stack.next_event() {
            seen.events.push(e.untagged());
            match e {
                Event::Acceptable(l) => {
                    assert_eq!(l, listener);
                    while let Ok(Some(id)) = stack.accept(l) {
                        // The passive side is the peer's connection from its passive port;
                        // one a stray SYN from another port opened is not the user's.
                        let theirs = matches!(stack.endpoints(id), Ok((_, Some(r)))
                            if r.port == PASSIVE_PEER_PORT);
                        if passive.id.is_none() && theirs {
                            passive.id = Some(id);
                        } else {
                            let _ = stack.release(id);
                        }
                    }
                }
                Event::Closed(id) | Event::Reset(id) | Event::TimedOut(id) => {
                    for (side, ext) in [(&mut passive, &mut ext_p), (&mut active, &mut ext_a)] {
                        if side.id == Some(id) {
                            let _ = stack.release(id);
                            *side = Side::default();
                            *ext = Ext::default();
                        }
                    }
                }
                _ => {}
            }
        }
        for side in [&passive, &active] {
            if let Some(id) = side.id {
                if let Ok(q) = stack.recv_queue(id) {
                    assert!(q <= BUF, "receive queue {q} above its buffer {BUF}");
                }
                if let Ok(q) = stack.send_queue(id) {
                    assert!(q <= BUF, "send queue {q} above its buffer {BUF}");
                }
            }
        }
        let held = stack.host_stats().map(|h| h.out_of_order_held as usize);
        assert_eq!(
            held,
            stack.out_of_order_held_by_connections(),
            "the out-of-order count is not the connections' sum"
        );
        assert!(
            held.is_some_and(|h| h <= BUF),
            "out-of-order octets {held:?} above the budget"
        );
        let out = std::mem::take(&mut stack.device_mut().tx);
        let mut arp_due = false;
        for f in &out {
            check_output(f, &mut passive, &mut active, &mut arp_due);
        }
        if arp_due {
            stack.device_mut().rx.push_back(arp_reply());
        }
        seen.frames = out;
        shown.push(seen);
    }
    shown
}

/// Asserts that `d`, delivered at stream offset `off` of a peer whose SYN-ACK our stack
/// acknowledged at `base`, is the peer's stream there.
fn check_delivered(base: Option<TcpSeqNumber>, off: u64, d: &[u8]) {
    if d.is_empty() {
        return;
    }
    let base = base.expect("octets delivered before our stack ACKed a SYN");
    let seq = (base.0 as u32).wrapping_add(off as u32);
    if let Some(i) = first_mismatch(peer_table(), seq as usize, d) {
        assert_eq!(
            d[i],
            peer_octet(seq.wrapping_add(i as u32)),
            "octet {} of the peer's stream delivered altered",
            off + i as u64
        );
    }
}

fn arp_reply() -> Vec<u8> {
    use smoltcp::wire::{ArpOperation, ArpPacket, ArpRepr};
    let repr = ArpRepr::EthernetIpv4 {
        operation: ArpOperation::Reply,
        source_hardware_addr: PEER_MAC,
        source_protocol_addr: PEER,
        target_hardware_addr: US_MAC,
        target_protocol_addr: US,
    };
    let mut f = vec![0u8; 14 + repr.buffer_len()];
    let mut eth = EthernetFrame::new_unchecked(&mut f[..]);
    EthernetRepr {
        src_addr: PEER_MAC,
        dst_addr: US_MAC,
        ethertype: EthernetProtocol::Arp,
    }
    .emit(&mut eth);
    repr.emit(&mut ArpPacket::new_unchecked(eth.payload_mut()));
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The periods the tables rely on: each function is its table, across the period's
    /// end and the sequence space's wrap, and the slice check finds the octet the
    /// octet-by-octet one did.
    #[test]
    fn the_octet_tables_are_the_octet_functions() {
        for seq in (0..4 * PEER_PERIOD as u32)
            .step_by(4099)
            .chain([u32::MAX - 3])
        {
            let mut d = [0u8; 9];
            fill_peer(seq, &mut d);
            for (k, &b) in d.iter().enumerate() {
                assert_eq!(b, peer_octet(seq.wrapping_add(k as u32)), "seq {seq} + {k}");
            }
        }
        for off in (0..3 * USER_PERIOD as u64)
            .step_by(16_411)
            .chain([u64::MAX - 3])
        {
            let mut d = [0u8; 9];
            fill_user(off, &mut d);
            for (k, &b) in d.iter().enumerate() {
                assert_eq!(
                    b,
                    user_octet(off.wrapping_add(k as u64)),
                    "offset {off} + {k}"
                );
            }
        }
        let seq = PEER_PERIOD as u32 - 2;
        let mut d = peer_payload(seq, 5);
        assert_eq!(first_mismatch(peer_table(), seq as usize, &d), None);
        d[3] ^= 1;
        assert_eq!(first_mismatch(peer_table(), seq as usize, &d), Some(3));
    }
}
