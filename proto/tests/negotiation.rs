//! MPA startup: Request/Reply frames byte for byte (WIRE-FORMATS §6.2, Linux siw captures)
//! and the initiator/responder machines against each other, against siw's octets, split at
//! every byte, and against malformed input.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use warpcore_proto::mpa::negotiation::{
    Config, Event, Failure, Initiator, Negotiated, NegotiationError, Phase, RejectReason,
    Rejection, Responder, Role, UsageError,
};
use warpcore_proto::wire::mpa::{
    frame_len, EnhancedData, Frame, FrameError, FrameKind, FrameRepr, RtrType, RtrTypes,
    IRD_ORD_NO_NEGOTIATION,
};
use warpcore_proto::MpaError;

fn hex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2));
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

// Octets copied from the siw captures in interop/pcaps (tshark -T fields -e tcp.payload).
/// siw_mpa2_rping.pcap: Rev 2, flags 0x10 (S only), IRD/ORD 1/1.
const SIW_MPA2_REQ_1_1: &str = "4d504120494420526571204672616d651002000400010001";
const SIW_MPA2_REP_1_1: &str = "4d504120494420526570204672616d651002000400010001";
/// siw_mpa2_ib_read_lat.pcap, first connection: IRD/ORD 0/0.
const SIW_MPA2_REQ_0_0: &str = "4d504120494420526571204672616d651002000400000000";
const SIW_MPA2_REP_0_0: &str = "4d504120494420526570204672616d651002000400000000";
/// siw_mpa2_ib_read_lat.pcap, second connection: IRD/ORD 128/128.
const SIW_MPA2_REQ_128: &str = "4d504120494420526571204672616d651002000400800080";
const SIW_MPA2_REP_128: &str = "4d504120494420526570204672616d651002000400800080";
/// siw_mpa2crc_rping.pcap: flags 0x50 (C + S).
const SIW_MPA2CRC_REQ: &str = "4d504120494420526571204672616d655002000400010001";
const SIW_MPA2CRC_REP: &str = "4d504120494420526570204672616d655002000400010001";
/// siw_mpa1_rping.pcap: Rev 1, 20 octets.
const SIW_MPA1_REQ: &str = "4d504120494420526571204672616d6500010000";
const SIW_MPA1_REP: &str = "4d504120494420526570204672616d6500010000";
/// siw_mpa2p2p_rping.pcap: A=1, Write+Read offered, IRD/ORD 1/1; Reply picks Write.
const SIW_P2P_REQ: &str = "4d504120494420526571204672616d65100200048001c001";
const SIW_P2P_REP: &str = "4d504120494420526570204672616d651002000480018001";
/// siw_mpa2p2p_ib_read_lat.pcap, first connection: IRD 0, ORD 0 raised to 1 for the Read
/// RTR offer; the Reply raises IRD to 1 and picks Write.
const SIW_P2P_REQ_0: &str = "4d504120494420526571204672616d65100200048000c001";
const SIW_P2P_REP_0: &str = "4d504120494420526570204672616d651002000480018000";
/// Same file, second connection: 128/128.
const SIW_P2P_REQ_128: &str = "4d504120494420526571204672616d65100200048080c080";
const SIW_P2P_REP_128: &str = "4d504120494420526570204672616d651002000480808080";
/// siw_mpa2p2p_rping.pcap frame 8: the initiator's Write RTR FPDU right after the Reply
/// (ULPDU_Length 14, tagged, STag 1, no CRC negotiated so the CRC field is 0).
const SIW_WRITE_RTR_FPDU: &str = "000ec14000000001000000000000000000000000";

/// WIRE-FORMATS §6.2 example: C + S, Rev 2, A=1, Read RTR, IRD = ORD = 16.
const WF_6_2_EXAMPLE: &str = "4d504120494420526571204672616d655002000480104010";

fn now0() -> Instant {
    Instant::now()
}

fn drain(tx: &mut dyn FnMut(&mut [u8]) -> usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 7]; // small on purpose: partial transmits must work
    loop {
        let n = tx(&mut buf);
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf[..n]);
    }
}

fn initiator_bytes(cfg: Config) -> Vec<u8> {
    let mut i = Initiator::new(cfg, now0()).unwrap();
    drain(&mut |b| i.poll_transmit(b))
}

fn events_i(i: &mut Initiator) -> Vec<Event> {
    std::iter::from_fn(|| i.poll_event()).collect()
}

fn events_r(r: &mut Responder) -> Vec<Event> {
    std::iter::from_fn(|| r.poll_event()).collect()
}

fn cfg(rev: u8, crc: bool, ird: u16, ord: u16) -> Config {
    Config {
        rev,
        crc,
        ird,
        ord,
        ..Config::default()
    }
}

fn p2p(mut c: Config, rtr: RtrTypes) -> Config {
    c.peer_to_peer = true;
    c.rtr = rtr;
    c
}

fn only_established(events: Vec<Event>) -> Negotiated {
    match <[Event; 1]>::try_from(events) {
        Ok([Event::Established(n)]) => n,
        Ok([other]) => panic!("expected Established, got {other:?}"),
        Err(v) => panic!("expected one event, got {v:?}"),
    }
}

fn only_failure(events: Vec<Event>) -> Failure {
    match <[Event; 1]>::try_from(events) {
        Ok([Event::Failed(f)]) => f,
        Ok([other]) => panic!("expected Failed, got {other:?}"),
        Err(v) => panic!("expected one event, got {v:?}"),
    }
}

fn only_rejection(events: Vec<Event>) -> Rejection {
    match <[Event; 1]>::try_from(events) {
        Ok([Event::Rejected(r)]) => r,
        Ok([other]) => panic!("expected Rejected, got {other:?}"),
        Err(v) => panic!("expected one event, got {v:?}"),
    }
}

// ---------------------------------------------------------------------------------------
// Wire: byte-exact frames
// ---------------------------------------------------------------------------------------

/// WIRE-FORMATS §6.2 (MPA2-6-5, MPA2-9-1): decode, and re-encode from a repr built by hand.
#[test]
fn wire_formats_6_2_example_byte_exact() {
    let bytes = hex(WF_6_2_EXAMPLE);
    let repr = FrameRepr::parse(&Frame::new_checked(&bytes[..]).unwrap()).unwrap();
    let expected = FrameRepr {
        kind: FrameKind::Request,
        markers: false,
        crc: true,
        reject: false,
        res: 0,
        rev: 2,
        enhanced: Some(EnhancedData {
            peer_to_peer: true,
            rtr: RtrTypes::READ,
            ird: 16,
            ord: 16,
        }),
        private_data: &[],
    };
    assert_eq!(repr, expected);
    assert_eq!(expected.buffer_len(), 24);
    assert_eq!(expected.to_vec(), bytes);
    // The initiator produces it from the matching configuration.
    let c = p2p(cfg(2, true, 16, 16), RtrTypes::READ);
    assert_eq!(initiator_bytes(c), bytes);
}

/// (hex, kind, Rev, C, enhanced (A, RTR flags, IRD, ORD)).
type FrameCase = (
    &'static str,
    FrameKind,
    u8,
    bool,
    Option<(bool, RtrTypes, u16, u16)>,
);

/// Every siw frame parses, re-emits identically, and has the fields the capture README
/// describes.
#[test]
fn siw_frames_decode_and_reencode() {
    let cases: &[FrameCase] = &[
        (
            SIW_MPA2_REQ_1_1,
            FrameKind::Request,
            2,
            false,
            Some((false, RtrTypes::EMPTY, 1, 1)),
        ),
        (
            SIW_MPA2_REP_1_1,
            FrameKind::Reply,
            2,
            false,
            Some((false, RtrTypes::EMPTY, 1, 1)),
        ),
        (
            SIW_MPA2_REQ_0_0,
            FrameKind::Request,
            2,
            false,
            Some((false, RtrTypes::EMPTY, 0, 0)),
        ),
        (
            SIW_MPA2_REP_0_0,
            FrameKind::Reply,
            2,
            false,
            Some((false, RtrTypes::EMPTY, 0, 0)),
        ),
        (
            SIW_MPA2_REQ_128,
            FrameKind::Request,
            2,
            false,
            Some((false, RtrTypes::EMPTY, 128, 128)),
        ),
        (
            SIW_MPA2_REP_128,
            FrameKind::Reply,
            2,
            false,
            Some((false, RtrTypes::EMPTY, 128, 128)),
        ),
        (
            SIW_MPA2CRC_REQ,
            FrameKind::Request,
            2,
            true,
            Some((false, RtrTypes::EMPTY, 1, 1)),
        ),
        (
            SIW_MPA2CRC_REP,
            FrameKind::Reply,
            2,
            true,
            Some((false, RtrTypes::EMPTY, 1, 1)),
        ),
        (SIW_MPA1_REQ, FrameKind::Request, 1, false, None),
        (SIW_MPA1_REP, FrameKind::Reply, 1, false, None),
        (
            SIW_P2P_REQ,
            FrameKind::Request,
            2,
            false,
            Some((true, RtrTypes::WRITE.union(RtrTypes::READ), 1, 1)),
        ),
        (
            SIW_P2P_REP,
            FrameKind::Reply,
            2,
            false,
            Some((true, RtrTypes::WRITE, 1, 1)),
        ),
        (
            SIW_P2P_REQ_0,
            FrameKind::Request,
            2,
            false,
            Some((true, RtrTypes::WRITE.union(RtrTypes::READ), 0, 1)),
        ),
        (
            SIW_P2P_REP_0,
            FrameKind::Reply,
            2,
            false,
            Some((true, RtrTypes::WRITE, 1, 0)),
        ),
        (
            SIW_P2P_REQ_128,
            FrameKind::Request,
            2,
            false,
            Some((true, RtrTypes::WRITE.union(RtrTypes::READ), 128, 128)),
        ),
        (
            SIW_P2P_REP_128,
            FrameKind::Reply,
            2,
            false,
            Some((true, RtrTypes::WRITE, 128, 128)),
        ),
    ];
    for &(h, kind, rev, crc, enh) in cases {
        let bytes = hex(h);
        assert_eq!(frame_len(&bytes), Ok(bytes.len()), "{h}");
        let frame = Frame::new_checked(&bytes[..]).unwrap();
        assert_eq!(frame.kind(), Some(kind));
        let repr = FrameRepr::parse(&frame).unwrap();
        assert_eq!((repr.kind, repr.rev, repr.crc), (kind, rev, crc), "{h}");
        assert!(!repr.markers && !repr.reject && repr.res == 0, "{h}");
        let got = repr.enhanced.map(|e| (e.peer_to_peer, e.rtr, e.ird, e.ord));
        assert_eq!(got, enh, "{h}");
        assert!(repr.private_data.is_empty());
        assert_eq!(repr.to_vec(), bytes, "{h}");
    }
}

/// MPA2-6-1, MPA-7.1.1-16: reserved bits, including siw's non-standard 0x08, are accepted
/// and kept, so a re-emitted frame is identical.
#[test]
fn reserved_bits_are_kept_not_checked() {
    let mut bytes = hex(SIW_MPA2_REQ_1_1);
    bytes[16] |= 0x08;
    let repr = FrameRepr::parse(&Frame::new_checked(&bytes[..]).unwrap()).unwrap();
    assert_eq!(repr.res, 0x08);
    assert_eq!(repr.enhanced.map(|e| e.ird), Some(1));
    assert_eq!(repr.to_vec(), bytes);
    // The responder does not mind either.
    let mut r = Responder::new(cfg(2, false, 4, 4), now0()).unwrap();
    assert_eq!(r.handle_input(&bytes), bytes.len());
    assert!(matches!(events_r(&mut r)[..], [Event::Request(_)]));
}

/// Our machines emit exactly what siw emits for the same settings.
#[test]
fn initiator_matches_siw_requests() {
    assert_eq!(initiator_bytes(cfg(2, false, 1, 1)), hex(SIW_MPA2_REQ_1_1));
    assert_eq!(initiator_bytes(cfg(2, false, 0, 0)), hex(SIW_MPA2_REQ_0_0));
    assert_eq!(
        initiator_bytes(cfg(2, false, 128, 128)),
        hex(SIW_MPA2_REQ_128)
    );
    assert_eq!(initiator_bytes(cfg(2, true, 1, 1)), hex(SIW_MPA2CRC_REQ));
    assert_eq!(initiator_bytes(cfg(1, false, 1, 1)), hex(SIW_MPA1_REQ));
    let wr = RtrTypes::WRITE.union(RtrTypes::READ);
    assert_eq!(
        initiator_bytes(p2p(cfg(2, false, 1, 1), wr)),
        hex(SIW_P2P_REQ)
    );
    // ORD 0 with a Read RTR offered is announced as 1 (MPA2-9.1-3), as siw does.
    assert_eq!(
        initiator_bytes(p2p(cfg(2, false, 0, 0), wr)),
        hex(SIW_P2P_REQ_0)
    );
    assert_eq!(
        initiator_bytes(p2p(cfg(2, false, 128, 128), wr)),
        hex(SIW_P2P_REQ_128)
    );
}

fn respond(c: Config, request: &[u8]) -> (Responder, Vec<u8>, Negotiated) {
    let mut r = Responder::new(c, now0()).unwrap();
    assert_eq!(r.handle_input(request), request.len());
    assert!(matches!(events_r(&mut r)[..], [Event::Request(_)]));
    r.accept(&[]).unwrap();
    let n = only_established(events_r(&mut r));
    let reply = drain(&mut |b| r.poll_transmit(b));
    (r, reply, n)
}

/// Our responder answers siw's Requests with siw's Replies (a responder that accepts only
/// the Write RTR, as siw prefers it, and has IRD/ORD to spare).
#[test]
fn responder_matches_siw_replies() {
    let pairs = [
        (SIW_MPA2_REQ_1_1, SIW_MPA2_REP_1_1, false),
        (SIW_MPA2_REQ_0_0, SIW_MPA2_REP_0_0, false),
        (SIW_MPA2_REQ_128, SIW_MPA2_REP_128, false),
        (SIW_MPA2CRC_REQ, SIW_MPA2CRC_REP, false),
        (SIW_MPA1_REQ, SIW_MPA1_REP, false),
        (SIW_P2P_REQ, SIW_P2P_REP, true),
        (SIW_P2P_REQ_0, SIW_P2P_REP_0, true),
        (SIW_P2P_REQ_128, SIW_P2P_REP_128, true),
    ];
    for (req, rep, is_p2p) in pairs {
        let mut c = cfg(2, false, 256, 256);
        c.rtr = RtrTypes::WRITE;
        let (_, reply, n) = respond(c, &hex(req));
        assert_eq!(reply, hex(rep), "reply to {req}");
        assert_eq!(n.peer_to_peer, is_p2p);
        assert_eq!(
            n.rtr_accepted,
            if is_p2p {
                RtrTypes::WRITE
            } else {
                RtrTypes::EMPTY
            }
        );
        assert_eq!(n.rx_fpdu_offset as usize, req.len() / 2);
        assert_eq!(n.tx_fpdu_offset as usize, rep.len() / 2);
    }
}

/// The initiator accepts siw's Replies; in P2P it picks the Write RTR, and the responder
/// recognises siw's actual Write RTR (STag 1) as the fence-lifting first ULPDU.
#[test]
fn siw_p2p_exchange_end_to_end() {
    let wr = RtrTypes::WRITE.union(RtrTypes::READ);
    let mut i = Initiator::new(p2p(cfg(2, false, 1, 1), wr), now0()).unwrap();
    drain(&mut |b| i.poll_transmit(b));
    let mut input = hex(SIW_P2P_REP);
    let reply_len = input.len();
    input.extend_from_slice(&hex(SIW_WRITE_RTR_FPDU)); // whatever follows is not ours
    assert_eq!(i.handle_input(&input), reply_len);
    let n = only_established(events_i(&mut i));
    assert_eq!(n.rtr, Some(RtrType::Write));
    assert_eq!((n.local_ird, n.local_ord), (1, 1));
    assert_eq!((n.peer_ird, n.peer_ord), (Some(1), Some(1)));
    assert!(!n.crc && !n.markers_tx && !n.markers_rx);
    assert!(!i.can_send_fpdus(), "MPA2-5-1: nothing before the RTR");
    i.handle_rtr_sent();
    assert!(i.can_send_fpdus());

    let mut c = cfg(2, false, 256, 256);
    c.rtr = RtrTypes::WRITE;
    let (mut r, _, _) = respond(c, &hex(SIW_P2P_REQ));
    assert!(
        !r.can_send_fpdus(),
        "MPA-7.1.2-16: fenced until the first FPDU"
    );
    assert_eq!(r.expected_rtr(), RtrTypes::WRITE);
    let fpdu = hex(SIW_WRITE_RTR_FPDU);
    let ulpdu = &fpdu[2..16]; // ULPDU_Length 14, no pad, then the CRC field
    assert_eq!(r.handle_first_ulpdu(ulpdu), Ok(Some(RtrType::Write)));
    assert!(r.can_send_fpdus());
}

#[test]
fn siw_client_server_replies_accepted() {
    for (c, rep, ird_ord, crc) in [
        (cfg(2, false, 1, 1), SIW_MPA2_REP_1_1, (1, 1), false),
        (cfg(2, false, 0, 0), SIW_MPA2_REP_0_0, (0, 0), false),
        (cfg(2, false, 128, 128), SIW_MPA2_REP_128, (128, 128), false),
        (cfg(2, false, 1, 1), SIW_MPA2CRC_REP, (1, 1), true),
    ] {
        let mut i = Initiator::new(c, now0()).unwrap();
        drain(&mut |b| i.poll_transmit(b));
        let rep = hex(rep);
        assert_eq!(i.handle_input(&rep), rep.len());
        let n = only_established(events_i(&mut i));
        assert_eq!((n.local_ird, n.local_ord), ird_ord);
        assert_eq!(n.crc, crc, "MPA-7.1.1-12: C in either frame");
        assert_eq!(n.rtr, None);
        assert!(i.can_send_fpdus());
    }
    // Rev 1 (RFC 5044): no IRD/ORD exchange, the configured values stay (MPA2-10-8).
    let mut i = Initiator::new(cfg(1, false, 3, 5), now0()).unwrap();
    drain(&mut |b| i.poll_transmit(b));
    assert_eq!(i.handle_input(&hex(SIW_MPA1_REP)), 20);
    let n = only_established(events_i(&mut i));
    assert_eq!((n.rev_sent, n.rev_received, n.enhanced), (1, 1, false));
    assert_eq!((n.local_ird, n.local_ord, n.peer_ird), (3, 5, None));
}

// ---------------------------------------------------------------------------------------
// Pairs: initiator against responder
// ---------------------------------------------------------------------------------------

/// How the responder's ULP decides.
#[derive(Clone, Copy, Debug)]
enum Decision<'a> {
    Accept(&'a [u8]),
    Reject(&'a [u8]),
}

#[derive(Debug)]
struct Run {
    i_events: Vec<Event>,
    r_events: Vec<Event>,
    request: Vec<u8>,
    reply: Vec<u8>,
    i: Initiator,
    r: Responder,
}

/// Runs a whole startup. The Request is fed to the responder split at `split_req`, the Reply
/// to the initiator split at `split_rep` (None: in one piece); `trailer` octets follow each
/// frame in the same input and must be left unconsumed. If the responder fails, the
/// initiator sees TCP close.
fn run(
    ic: Config,
    rc: Config,
    decision: Decision<'_>,
    split_req: Option<usize>,
    split_rep: Option<usize>,
) -> Run {
    let trailer = hex(SIW_WRITE_RTR_FPDU);
    let t0 = now0();
    let mut i = Initiator::new(ic, t0).unwrap();
    let mut r = Responder::new(rc, t0).unwrap();
    let request = drain(&mut |b| i.poll_transmit(b));
    feed(&request, &trailer, split_req, &mut |d| r.handle_input(d));
    let mut r_events = events_r(&mut r);
    if let Some(Event::Request(_)) = r_events.last() {
        match decision {
            Decision::Accept(pd) => r.accept(pd).unwrap(),
            Decision::Reject(pd) => r.reject(pd).unwrap(),
        }
        r_events.extend(events_r(&mut r));
    }
    let reply = drain(&mut |b| r.poll_transmit(b));
    if reply.is_empty() {
        i.handle_close();
    } else {
        feed(&reply, &trailer, split_rep, &mut |d| i.handle_input(d));
    }
    let i_events = events_i(&mut i);
    Run {
        i_events,
        r_events,
        request,
        reply,
        i,
        r,
    }
}

/// Feeds `frame` followed by `trailer`, split at `split`, and checks that exactly the frame
/// is consumed whatever the split.
fn feed(frame: &[u8], trailer: &[u8], split: Option<usize>, input: &mut dyn FnMut(&[u8]) -> usize) {
    let mut all = frame.to_vec();
    all.extend_from_slice(trailer);
    let k = split.unwrap_or(all.len());
    // The engine keeps what was not taken and offers it again with what follows.
    let first = input(&all[..k]);
    let second = input(&all[first..]);
    // Every frame here is well-formed, so exactly the frame is taken, whatever the split.
    assert_eq!(first, k.min(frame.len()), "first piece of a split at {k}");
    assert_eq!(first + second, frame.len(), "split at {k}");
}

/// The full matrix: Rev, CRC and markers (with and without marker support) on each side,
/// client-server and peer-to-peer with every offered/accepted RTR set. The expected outcome
/// is derived from the rules in the comments, not from the machines.
/// MPA-4.4-6, MPA-4.4-9, MPA-C.1-2 (CRCs iff either side sent C = 1), MPA-7.1-1 (both FPDU
/// offsets are the frame lengths), MPA2-10-4 (Rev 1 Requests to Rev 2 responders).
#[test]
fn matrix_of_pairs() {
    let sets: Vec<RtrTypes> = (1u8..8)
        .map(|b| {
            RtrType::ALL
                .into_iter()
                .enumerate()
                .filter(|(k, _)| b & (1 << k) != 0)
                .map(|(_, t)| t)
                .collect()
        })
        .collect();
    let mut runs = 0;
    for bits in 0u32..256 {
        let b = |k: u32| bits & (1 << k) != 0;
        let (irev, rrev) = (if b(0) { 2 } else { 1 }, if b(1) { 2 } else { 1 });
        let (icrc, rcrc, imark, rmark, isup, rsup) = (b(2), b(3), b(4), b(5), b(6), b(7));
        let mut p2p_cases: Vec<Option<(RtrTypes, RtrTypes)>> = vec![None];
        if irev == 2 {
            for &o in &sets {
                for &s in &sets {
                    p2p_cases.push(Some((o, s)));
                }
            }
        }
        for case in p2p_cases {
            let mut ic = cfg(irev, icrc, 8, 8);
            ic.markers = imark;
            ic.markers_supported = isup;
            let mut rc = cfg(rrev, rcrc, 8, 8);
            rc.markers = rmark;
            rc.markers_supported = rsup;
            if let Some((offer, support)) = case {
                ic = p2p(ic, offer);
                rc.rtr = support;
            }
            let out = run(ic, rc, Decision::Accept(b"ok"), None, None);
            runs += 1;
            let ctx = format!("bits {bits:08b} case {case:?}");
            // MPA2-10-7: a Rev 1 responder closes on an enhanced Request; the initiator
            // sees TCP close.
            if irev == 2 && rrev == 1 {
                let f = only_failure(out.r_events);
                assert_eq!(f.error, NegotiationError::EnhancedNotSupported, "{ctx}");
                assert_eq!(f.error.mpa_error(), MpaError::InvalidStartupFrame);
                assert_eq!(
                    only_failure(out.i_events).error,
                    NegotiationError::PeerClosed
                );
                continue;
            }
            // The initiator needs markers the responder cannot send: rejected, TCP open.
            if imark && !rsup {
                let rj = only_rejection(out.r_events);
                assert_eq!(rj.reason, RejectReason::MarkersUnsupported, "{ctx}");
                let rj = only_rejection(out.i_events);
                assert_eq!(rj.reason, RejectReason::ByPeer, "{ctx}");
                assert_eq!(out.i.phase(), Phase::Rejected);
                continue;
            }
            let rn = match &out.r_events[..] {
                [Event::Request(_), Event::Established(n)] => n.clone(),
                other => panic!("{ctx}: {other:?}"),
            };
            // The responder needs markers the initiator cannot send.
            if rmark && !isup {
                let f = only_failure(out.i_events);
                assert_eq!(f.error, NegotiationError::MarkersUnsupported, "{ctx}");
                assert_eq!(f.error.mpa_error(), MpaError::LocalCatastrophic);
                assert!(f.terminate.is_none());
                continue;
            }
            let enhanced = irev == 2 && rrev == 2;
            // RFC 6581 §9.2: the responder marks offered ∩ supported, or all it supports;
            // the initiator picks Write, then Send, then Read.
            let expected_rtr = case.map(|(offer, support)| {
                let common = offer.intersection(support);
                let marked = if common.is_empty() { support } else { common };
                let usable = offer.intersection(marked);
                [RtrType::Write, RtrType::Send, RtrType::Read]
                    .into_iter()
                    .find(|t| usable.contains(*t))
            });
            if let Some(None) = expected_rtr {
                let f = only_failure(out.i_events);
                assert_eq!(f.error, NegotiationError::NoMatchingRtr, "{ctx}");
                assert_eq!(f.error.mpa_error().terminate_code().code(), 7);
                assert!(f.terminate.is_some(), "MPA2-9.2-10: a TERM goes out");
                continue;
            }
            let inn = only_established(out.i_events);
            for (n, role) in [(&inn, Role::Initiator), (&rn, Role::Responder)] {
                assert_eq!(n.role, role);
                assert_eq!(n.crc, icrc || rcrc, "{ctx}: MPA-7.1.1-12");
                assert_eq!(n.enhanced, enhanced, "{ctx}: MPA2-10-5/6");
                assert_eq!(n.peer_to_peer, case.is_some(), "{ctx}");
            }
            // MPA-7.1.1-7..10: markers per direction.
            assert_eq!((inn.markers_tx, inn.markers_rx), (rmark, imark), "{ctx}");
            assert_eq!((rn.markers_tx, rn.markers_rx), (imark, rmark), "{ctx}");
            // Revisions: the responder answers at min(own, request) (MPA2-6-4).
            assert_eq!(inn.rev_sent, irev);
            assert_eq!(rn.rev_sent, irev.min(rrev));
            assert_eq!((inn.rev_received, rn.rev_received), (rn.rev_sent, irev));
            // Private data both ways; offsets are the frame lengths.
            assert_eq!(inn.peer_private_data, b"ok");
            assert_eq!(inn.tx_fpdu_offset as usize, out.request.len());
            assert_eq!(inn.rx_fpdu_offset as usize, out.reply.len());
            assert_eq!(rn.rx_fpdu_offset, inn.tx_fpdu_offset);
            assert_eq!(rn.tx_fpdu_offset, inn.rx_fpdu_offset);
            // Equal IRD/ORD 8/8 on both sides negotiate to 8/8 (or stay as configured).
            assert_eq!(
                (inn.local_ird, inn.local_ord, rn.local_ird, rn.local_ord),
                (8, 8, 8, 8)
            );
            assert_eq!(inn.peer_ird.is_some(), enhanced);
            let rtr = expected_rtr.flatten();
            assert_eq!(inn.rtr, rtr, "{ctx}");
            // Fencing and the RTR.
            let (mut i, mut r) = (out.i, out.r);
            assert!(!r.can_send_fpdus(), "{ctx}: MPA-7.1.2-16");
            match rtr {
                Some(t) => {
                    assert!(!i.can_send_fpdus(), "{ctx}: MPA2-5-1");
                    i.handle_rtr_sent();
                    assert_eq!(r.handle_first_ulpdu(t.ulpdu()), Ok(Some(t)), "{ctx}");
                }
                None => assert_eq!(r.handle_first_ulpdu(&hex("41430000")), Ok(None)),
            }
            assert!(i.can_send_fpdus() && r.can_send_fpdus(), "{ctx}");
        }
    }
    assert!(runs > 256 * 2);
}

/// Stream decoding at every split (GUIDE test ladder step 2): the Request split at every
/// octet for the responder, the Reply split at every octet for the initiator, each followed
/// by FPDU octets that must stay unconsumed. Outcomes equal the unsplit run's.
#[test]
fn every_split_gives_the_same_outcome() {
    let pd_i = vec![0xA5u8; 37];
    let configs = [
        (cfg(1, true, 4, 4), cfg(2, false, 4, 4)),
        (
            Config {
                private_data: pd_i.clone(),
                ..p2p(cfg(2, true, 4, 2), RtrTypes::ALL)
            },
            cfg(2, false, 16, 16),
        ),
    ];
    for (ic, rc) in configs {
        let whole = run(
            ic.clone(),
            rc.clone(),
            Decision::Accept(b"reply-pd"),
            None,
            None,
        );
        let n = whole.request.len() + 20;
        for k in 0..=n {
            let s = run(
                ic.clone(),
                rc.clone(),
                Decision::Accept(b"reply-pd"),
                Some(k),
                None,
            );
            assert_eq!(s.r_events, whole.r_events, "request split at {k}");
            assert_eq!(s.i_events, whole.i_events, "request split at {k}");
        }
        for k in 0..=whole.reply.len() + 20 {
            let s = run(
                ic.clone(),
                rc.clone(),
                Decision::Accept(b"reply-pd"),
                None,
                Some(k),
            );
            assert_eq!(s.i_events, whole.i_events, "reply split at {k}");
        }
    }
}

/// One octet at a time.
#[test]
fn octet_by_octet() {
    let ic = p2p(cfg(2, true, 4, 4), RtrTypes::READ);
    let mut i = Initiator::new(ic, now0()).unwrap();
    let mut r = Responder::new(cfg(2, true, 4, 4), now0()).unwrap();
    let req = drain(&mut |b| i.poll_transmit(b));
    for (k, o) in req.iter().enumerate() {
        assert_eq!(r.handle_input(std::slice::from_ref(o)), 1, "octet {k}");
        assert_eq!(r.phase() == Phase::AwaitingFrame, k + 1 < req.len());
    }
    assert_eq!(
        r.handle_input(&[0, 0x2e]),
        0,
        "octets after the Request stay"
    );
    events_r(&mut r);
    r.accept(&[]).unwrap();
    let rep = drain(&mut |b| r.poll_transmit(b));
    for o in &rep {
        assert_eq!(i.handle_input(std::slice::from_ref(o)), 1);
    }
    let n = only_established(events_i(&mut i));
    assert_eq!(n.rtr, Some(RtrType::Read));
    assert_eq!(i.handle_input(&[1, 2, 3]), 0);
}

/// MPA-7.1.2-5..7, MPA-7.1.2-14, MPA2-9.1-10: a reject carries the responder's private data
/// and IRD/ORD to the initiator, and the initiator's to the responder's ULP; TCP stays open.
#[test]
fn reject_with_private_data() {
    let ic = Config {
        private_data: b"please".to_vec(),
        ..cfg(2, true, 2, 6)
    };
    let out = run(
        ic,
        cfg(2, true, 4, 9),
        Decision::Reject(b"no thanks"),
        Some(5),
        Some(3),
    );
    let req = match &out.r_events[..] {
        [Event::Request(p), Event::Rejected(rj)] => {
            assert_eq!(rj.reason, RejectReason::ByUlp);
            assert_eq!(&rj.peer, p);
            p.clone()
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(req.private_data, b"please");
    assert_eq!((req.ird(), req.ord()), (Some(2), Some(6)));
    let rj = only_rejection(out.i_events);
    assert_eq!(rj.reason, RejectReason::ByPeer);
    assert_eq!(rj.peer.private_data, b"no thanks");
    // The reject states the ORD the responder requires, un-clamped (MPA2-9.1-5): 9 > 2.
    assert_eq!((rj.peer.ird(), rj.peer.ord()), (Some(4), Some(9)));
    assert_eq!(out.r.phase(), Phase::Rejected);
    assert_eq!(out.i.phase(), Phase::Rejected);
    // The Reply has R set.
    assert_eq!(out.reply[16] & 0x20, 0x20);
    // Rev 1 rejects work the same, without enhanced data.
    let out = run(
        cfg(1, true, 2, 6),
        cfg(2, true, 4, 9),
        Decision::Reject(b"x"),
        None,
        None,
    );
    let rj = only_rejection(out.i_events);
    assert_eq!(
        (rj.peer.rev, rj.peer.enhanced, &rj.peer.private_data[..]),
        (1, None, &b"x"[..])
    );
}

#[test]
fn decision_api_misuse() {
    let mut r = Responder::new(cfg(2, true, 4, 4), now0()).unwrap();
    assert_eq!(r.accept(&[]), Err(UsageError::NotAwaitingDecision));
    assert_eq!(r.handle_first_ulpdu(RtrType::Write.ulpdu()), Ok(None));
    r.handle_input(&hex(SIW_MPA2_REQ_1_1));
    assert_eq!(r.accept(&[0; 509]), Err(UsageError::PrivateDataTooLong));
    assert_eq!(r.set_ird_ord(0x4000, 1), Err(UsageError::IrdOrdOutOfRange));
    r.accept(&[0; 508]).unwrap();
    assert_eq!(r.reject(&[]), Err(UsageError::NotAwaitingDecision));

    let bad = [
        (
            Config {
                rev: 3,
                ..Config::default()
            },
            UsageError::UnsupportedRevision,
        ),
        (
            Config {
                rev: 0,
                ..Config::default()
            },
            UsageError::UnsupportedRevision,
        ),
        (
            Config {
                ird: 0x4000,
                ..Config::default()
            },
            UsageError::IrdOrdOutOfRange,
        ),
        (
            p2p(cfg(1, true, 1, 1), RtrTypes::WRITE),
            UsageError::PeerToPeerNeedsRev2,
        ),
        (
            p2p(cfg(2, true, 1, 1), RtrTypes::EMPTY),
            UsageError::NoRtrType,
        ),
        (
            Config {
                private_data: vec![0; 509],
                ..Config::default()
            },
            UsageError::PrivateDataTooLong,
        ),
    ];
    for (c, e) in bad {
        assert_eq!(Initiator::new(c, now0()).unwrap_err(), e);
    }
    assert!(Initiator::new(
        Config {
            private_data: vec![0; 512],
            ..cfg(1, true, 1, 1)
        },
        now0()
    )
    .is_ok());
    let c = Config {
        rtr: RtrTypes::EMPTY,
        ..Config::default()
    };
    assert_eq!(
        Responder::new(c, now0()).unwrap_err(),
        UsageError::NoRtrType
    );
}

// ---------------------------------------------------------------------------------------
// IRD/ORD (RFC 6581 §9.1)
// ---------------------------------------------------------------------------------------

type IrdOrdRow = ((u16, u16, u16, u16), (u16, u16), (u16, u16), (u16, u16));

/// (initiator IRD, ORD; responder IRD, ORD) → (Reply IRD, ORD; initiator local IRD, ORD;
/// responder local IRD, ORD). Expected values worked out by hand from §9.1.
#[test]
fn ird_ord_negotiation_table() {
    const X: u16 = IRD_ORD_NO_NEGOTIATION;
    #[rustfmt::skip]
    let table: &[IrdOrdRow] = &[
        // Responder IRD covers the initiator ORD; responder ORD clamped to initiator IRD.
        ((4, 8, 16, 2), (8, 2), (2, 8), (8, 2)),
        // MPA2-9.1-4: responder ORD 16 clamped to the initiator IRD 4; responder IRD 3
        // below the initiator ORD 8 lowers the initiator ORD (MPA2-9.1-7).
        ((4, 8, 3, 16), (3, 4), (4, 3), (3, 4)),
        // MPA2-9.1-11/14: initiator ORD 0x3FFF → Reply IRD 0x3FFF, responder IRD kept;
        // the initiator keeps its ORD.
        ((4, X, 16, 2), (X, 2), (2, X), (16, 2)),
        // MPA2-9.1-13/14: initiator IRD 0x3FFF → Reply ORD 0x3FFF, responder ORD kept; the
        // initiator keeps its IRD.
        ((X, 8, 16, 2), (8, X), (X, 8), (8, 2)),
        // MPA2-9.1-12: responder not negotiating its IRD → initiator ORD unchanged.
        ((4, 8, X, 2), (X, 2), (2, 8), (X, 2)),
        ((X, X, X, X), (X, X), (X, X), (X, X)),
        ((0, 0, 0, 0), (0, 0), (0, 0), (0, 0)),
    ];
    for &((ii, io, ri, ro), reply, il, rl) in table {
        let out = run(
            cfg(2, true, ii, io),
            cfg(2, true, ri, ro),
            Decision::Accept(&[]),
            None,
            None,
        );
        let ctx = format!("{:?}", (ii, io, ri, ro));
        let e = FrameRepr::parse(&Frame::new_checked(&out.reply[..]).unwrap())
            .unwrap()
            .enhanced
            .unwrap();
        assert_eq!((e.ird, e.ord), reply, "{ctx}");
        let inn = only_established(out.i_events);
        assert_eq!((inn.local_ird, inn.local_ord), il, "{ctx}");
        assert_eq!((inn.peer_ird, inn.peer_ord), (Some(reply.0), Some(reply.1)));
        let rn = match &out.r_events[..] {
            [Event::Request(_), Event::Established(n)] => n.clone(),
            other => panic!("{other:?}"),
        };
        assert_eq!((rn.local_ird, rn.local_ord), rl, "{ctx}");
        assert_eq!(
            (rn.peer_ird, rn.peer_ord),
            (Some(ii), Some(io)),
            "MPA2-9.1-1"
        );
        // The §9.1 invariants after success, where both values are negotiated numbers.
        if ![ii, io, ri, ro].contains(&X) {
            assert!(inn.local_ord <= rn.local_ird && rn.local_ord <= inn.local_ird);
        }
    }
}

fn reply_frame(
    markers: bool,
    crc: bool,
    reject: bool,
    rev: u8,
    e: Option<EnhancedData>,
) -> Vec<u8> {
    FrameRepr {
        kind: FrameKind::Reply,
        markers,
        crc,
        reject,
        res: 0,
        rev,
        enhanced: e,
        private_data: b"pd",
    }
    .to_vec()
}

fn request_frame(rev: u8, e: Option<EnhancedData>) -> Vec<u8> {
    FrameRepr {
        kind: FrameKind::Request,
        markers: false,
        crc: true,
        reject: false,
        res: 0,
        rev,
        enhanced: e,
        private_data: &[],
    }
    .to_vec()
}

fn initiator_gets(c: Config, reply: &[u8]) -> (Initiator, Vec<Event>) {
    let mut i = Initiator::new(c, now0()).unwrap();
    drain(&mut |b| i.poll_transmit(b));
    i.handle_input(reply);
    let ev = events_i(&mut i);
    (i, ev)
}

/// MPA2-9.1-8/9: a responder ORD above the IRD we can give → Terminate code 6, and the
/// responder's values still reach the ULP (MPA2-9.1-10).
/// MPA2-9.1-6: the TERM is Layer 2 (LLP), EType 0 (MPA), code 6.
#[test]
fn insufficient_ird_terminates_with_code_6() {
    let e = EnhancedData {
        peer_to_peer: false,
        rtr: RtrTypes::EMPTY,
        ird: 8,
        ord: 5,
    };
    let (i, ev) = initiator_gets(
        cfg(2, true, 4, 8),
        &reply_frame(false, true, false, 2, Some(e)),
    );
    let f = only_failure(ev);
    assert_eq!(f.error, NegotiationError::InsufficientIrd);
    assert_eq!(f.error.mpa_error().terminate_code().code(), 6);
    assert!(f.error.sends_terminate());
    let t = f.terminate.expect("FPDU parameters for the Terminate");
    assert!(t.crc);
    let peer = f.peer.unwrap();
    assert_eq!(
        (peer.ird(), peer.ord(), &peer.private_data[..]),
        (Some(8), Some(5), &b"pd"[..])
    );
    assert_eq!(i.phase(), Phase::Failed);
    assert!(!i.can_send_fpdus());
}

/// MPA2-9.1-3: a Read RTR gets a responder IRD of at least 1 even when the initiator ORD is
/// 0; a responder with IRD 0 does not offer the Read RTR at all.
#[test]
fn read_rtr_and_ird() {
    let req = request_frame(
        2,
        Some(EnhancedData {
            peer_to_peer: true,
            rtr: RtrTypes::READ,
            ird: 3,
            ord: 0,
        }),
    );
    let (_, reply, n) = respond(cfg(2, true, 4, 4), &req);
    let e = FrameRepr::parse(&Frame::new_checked(&reply[..]).unwrap())
        .unwrap()
        .enhanced
        .unwrap();
    assert_eq!(
        (e.peer_to_peer, e.rtr, e.ird, e.ord),
        (true, RtrTypes::READ, 1, 3)
    );
    assert_eq!((n.local_ird, n.rtr_accepted), (1, RtrTypes::READ));

    // Responder IRD 0: Read cannot be accepted; it marks what it does support (MPA2-9.2-8)
    // and a Read-only initiator gives up with code 7.
    let mut rc = cfg(2, true, 0, 4);
    rc.rtr = RtrTypes::WRITE.union(RtrTypes::READ);
    let out = run(
        p2p(cfg(2, true, 4, 4), RtrTypes::READ),
        rc,
        Decision::Accept(&[]),
        None,
        None,
    );
    let f = only_failure(out.i_events);
    assert_eq!(f.error, NegotiationError::NoMatchingRtr);
    // An initiator must not pick Read when the responder's IRD is 0, even if marked.
    let e = EnhancedData {
        peer_to_peer: true,
        rtr: RtrTypes::READ,
        ird: 0,
        ord: 0,
    };
    let (_, ev) = initiator_gets(
        p2p(cfg(2, true, 4, 4), RtrTypes::READ),
        &reply_frame(false, true, false, 2, Some(e)),
    );
    assert_eq!(only_failure(ev).error, NegotiationError::NoMatchingRtr);
}

/// A Rev 2 responder that accepts only the Read RTR at IRD 0 could mark no RTR type in its
/// Reply to a peer-to-peer Request (MPA2-9.1-3, MPA2-9.2-8): it is refused when created, and
/// an accept after `set_ird_ord` lowered its IRD to 0 is refused with nothing sent, the
/// decision still open. A client-server Request marks no type anyway and is accepted.
#[test]
fn a_responder_that_could_mark_no_rtr_type_is_refused() {
    let read_only = |ird| Config {
        rtr: RtrTypes::READ,
        ..cfg(2, true, ird, 4)
    };
    assert_eq!(
        Responder::new(read_only(0), now0()).unwrap_err(),
        UsageError::NoRtrType
    );
    assert!(Responder::new(read_only(0x3FFF), now0()).is_ok());
    let request = |peer_to_peer| {
        request_frame(
            2,
            Some(EnhancedData {
                peer_to_peer,
                rtr: RtrTypes::READ,
                ird: 4,
                ord: 4,
            }),
        )
    };
    let mut r = Responder::new(read_only(4), now0()).unwrap();
    r.handle_input(&request(true));
    assert!(matches!(events_r(&mut r)[..], [Event::Request(_)]));
    r.set_ird_ord(0, 4).unwrap();
    assert_eq!(r.accept(&[]), Err(UsageError::NoRtrType));
    assert!(drain(&mut |b| r.poll_transmit(b)).is_empty());
    r.set_ird_ord(1, 4).unwrap();
    r.accept(&[]).unwrap();
    assert_eq!(
        only_established(events_r(&mut r)).rtr_accepted,
        RtrTypes::READ
    );

    let mut r = Responder::new(read_only(4), now0()).unwrap();
    r.handle_input(&request(false));
    assert!(matches!(events_r(&mut r)[..], [Event::Request(_)]));
    r.set_ird_ord(0, 4).unwrap();
    r.accept(&[]).unwrap();
    assert_eq!(
        only_established(events_r(&mut r)).rtr_accepted,
        RtrTypes::EMPTY
    );
}

/// MPA2-9.2-4: a Reply that does not echo A fails with code 7 (no common connection model).
#[test]
fn model_mismatch_is_code_7() {
    let e = EnhancedData {
        peer_to_peer: false,
        rtr: RtrTypes::EMPTY,
        ird: 4,
        ord: 4,
    };
    let (_, ev) = initiator_gets(
        p2p(cfg(2, true, 4, 4), RtrTypes::WRITE),
        &reply_frame(false, true, false, 2, Some(e)),
    );
    let f = only_failure(ev);
    assert_eq!(f.error, NegotiationError::ModelMismatch);
    assert_eq!(f.error.mpa_error(), MpaError::NoMatchingRtr);
    let e = EnhancedData {
        peer_to_peer: true,
        rtr: RtrTypes::WRITE,
        ird: 4,
        ord: 4,
    };
    let (_, ev) = initiator_gets(
        cfg(2, true, 4, 4),
        &reply_frame(false, true, false, 2, Some(e)),
    );
    assert_eq!(only_failure(ev).error, NegotiationError::ModelMismatch);
}

/// MPA2-9.2-14/15: with A = 0 the B/C/D flags are sent as 0 and ignored on receipt.
#[test]
fn rtr_flags_ignored_without_peer_to_peer() {
    // An initiator configured with RTR types but client-server sends B=C=D=0.
    let mut c = cfg(2, true, 1, 1);
    c.rtr = RtrTypes::ALL;
    let req = initiator_bytes(c);
    assert_eq!(&req[20..24], &[0x00, 0x01, 0x00, 0x01]);
    // A Request with A = 0 but stray RTR bits gets a client-server reply with none.
    let stray = request_frame(
        2,
        Some(EnhancedData {
            peer_to_peer: false,
            rtr: RtrTypes::ALL,
            ird: 1,
            ord: 1,
        }),
    );
    let (_, reply, n) = respond(cfg(2, true, 4, 4), &stray);
    assert_eq!(&reply[20..24], &[0x00, 0x01, 0x00, 0x01]);
    assert!(!n.peer_to_peer && n.rtr_accepted.is_empty());
}

/// The responder's fence and the RTR check (MPA2-5-1, MPA-7.1.2-16).
#[test]
fn responder_rejects_a_wrong_first_ulpdu() {
    let req = request_frame(
        2,
        Some(EnhancedData {
            peer_to_peer: true,
            rtr: RtrTypes::WRITE,
            ird: 1,
            ord: 1,
        }),
    );
    for bad in [
        RtrType::Send.ulpdu().to_vec(),
        RtrType::Read.ulpdu().to_vec(),
        hex("4143000000000000000000000001000000000000"), // a Send with payload
        hex("c141"),
        vec![],
    ] {
        let (mut r, _, _) = respond(cfg(2, true, 4, 4), &req);
        let e = r.handle_first_ulpdu(&bad).unwrap_err();
        assert_eq!(e, NegotiationError::InvalidRtr);
        assert_eq!(e.mpa_error().terminate_code().code(), 7);
        assert!(e.sends_terminate());
        assert!(!r.can_send_fpdus());
        assert_eq!(r.phase(), Phase::Failed);
    }
    // The RTR encodings of WIRE-FORMATS §6.4 (ULPDUs, without length and CRC).
    assert_eq!(
        RtrType::classify_ulpdu(&hex("414300000000000000000000000100000000")),
        Some(RtrType::Send)
    );
    // Send with SE is a zero-length Send too; MSN 2 is not a first message.
    assert_eq!(
        RtrType::classify_ulpdu(&hex("414500000000000000000000000100000000")),
        Some(RtrType::Send)
    );
    assert_eq!(
        RtrType::classify_ulpdu(&hex("414300000000000000000000000200000000")),
        None
    );
    assert_eq!(
        RtrType::classify_ulpdu(&hex("c1400000000000000000000000000000")[..14]),
        Some(RtrType::Write)
    );
    // DDP version 0 (RDMAC) or a Read Response opcode are not RTRs.
    assert_eq!(
        RtrType::classify_ulpdu(&hex("c0400000000000000000000000000000")[..14]),
        None
    );
    assert_eq!(
        RtrType::classify_ulpdu(&hex("c1420000000000000000000000000000")[..14]),
        None
    );
    let mut read = RtrType::Read.ulpdu().to_vec();
    assert_eq!(read.len(), 46);
    read[33] = 1; // RDMARDSZ 1: not a zero-length Read
    assert_eq!(RtrType::classify_ulpdu(&read), None);
}

// ---------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------

fn responder_gets(input: &[u8]) -> (Responder, usize, Vec<Event>) {
    let mut r = Responder::new(cfg(2, true, 4, 4), now0()).unwrap();
    let n = r.handle_input(input);
    let ev = events_r(&mut r);
    (r, n, ev)
}

/// MPA-7.1.1-3, MPA-7.1.2-17: a wrong key closes at the first wrong octet.
#[test]
fn bad_key() {
    let (r, n, ev) = responder_gets(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    assert_eq!(n, 1);
    let f = only_failure(ev);
    assert_eq!(f.error, NegotiationError::Frame(FrameError::BadKey));
    assert_eq!(f.error.mpa_error(), MpaError::InvalidStartupFrame);
    assert!(!f.error.sends_terminate());
    assert_eq!(r.phase(), Phase::Failed);
    let mut almost = hex(SIW_MPA2_REQ_1_1);
    almost[15] = b'E';
    let (_, n, ev) = responder_gets(&almost);
    assert_eq!(n, 16);
    assert_eq!(
        only_failure(ev).error,
        NegotiationError::Frame(FrameError::BadKey)
    );
    assert_eq!(frame_len(&almost), Err(FrameError::BadKey));
    assert_eq!(
        MpaError::from(FrameError::BadKey),
        MpaError::InvalidStartupFrame
    );
}

/// MPA-7.1.1-19: Rev 3 (and Rev 0) closes as an invalid frame.
#[test]
fn unsupported_revisions() {
    for rev in [0u8, 3, 0xFF] {
        let mut f = hex(SIW_MPA2_REQ_1_1);
        f[17] = rev;
        let (_, n, ev) = responder_gets(&f);
        assert_eq!(n, f.len());
        assert_eq!(
            only_failure(ev).error,
            NegotiationError::UnsupportedRevision(rev)
        );
        let mut rep = hex(SIW_MPA2_REP_1_1);
        rep[17] = rev;
        let (_, ev) = initiator_gets(cfg(2, false, 1, 1), &rep);
        assert_eq!(
            only_failure(ev).error,
            NegotiationError::UnsupportedRevision(rev)
        );
    }
}

/// MPA-7.1.1-22: PD_Length 513 fails as soon as the header is in, without waiting for 513
/// octets.
#[test]
fn pd_length_513() {
    let mut f = hex(SIW_MPA1_REQ);
    f[18..20].copy_from_slice(&513u16.to_be_bytes());
    assert_eq!(frame_len(&f), Err(FrameError::PrivateDataTooLong));
    let (_, n, ev) = responder_gets(&f);
    assert_eq!(n, 20);
    assert_eq!(
        only_failure(ev).error,
        NegotiationError::Frame(FrameError::PrivateDataTooLong)
    );
    f[18..20].copy_from_slice(&512u16.to_be_bytes());
    assert_eq!(frame_len(&f), Ok(532));
    f.resize(532, 7);
    let (_, n, ev) = responder_gets(&f);
    assert_eq!(n, 532);
    match &ev[..] {
        [Event::Request(p)] => assert_eq!(p.private_data.len(), 512),
        other => panic!("{other:?}"),
    }
}

/// MPA2-6-5: S = 1 at Rev 2 with PD_Length 2 is malformed; at Rev 1 the bit is reserved.
#[test]
fn enhanced_without_enhanced_data() {
    let f = hex("4d504120494420526571204672616d6550020002abcd");
    assert_eq!(
        FrameRepr::parse(&Frame::new_checked(&f[..]).unwrap()),
        Err(FrameError::EnhancedDataMissing)
    );
    let (_, _, ev) = responder_gets(&f);
    assert_eq!(
        only_failure(ev).error,
        NegotiationError::Frame(FrameError::EnhancedDataMissing)
    );
    let mut v1 = f.clone();
    v1[17] = 1;
    let (_, _, ev) = responder_gets(&v1);
    match &ev[..] {
        [Event::Request(p)] => {
            assert_eq!(
                (p.rev, p.enhanced, &p.private_data[..]),
                (1, None, &[0xab, 0xcd][..])
            )
        }
        other => panic!("{other:?}"),
    }
}

/// MPA-7.1.2-20: the key difference detects a Reply sent to a responder and a Request sent
/// to an initiator, at octet 9.
#[test]
fn wrong_roles() {
    let (_, n, ev) = responder_gets(&hex(SIW_MPA2_REP_1_1));
    assert_eq!(n, 10);
    assert_eq!(only_failure(ev).error, NegotiationError::UnexpectedReply);
    let (_, ev) = initiator_gets(cfg(2, false, 1, 1), &hex(SIW_MPA2_REQ_1_1));
    let f = only_failure(ev);
    assert_eq!(f.error, NegotiationError::InitiatorInitiator);
    assert_eq!(f.error.mpa_error(), MpaError::InvalidStartupFrame);
}

/// MPA2-10-5/6: the Reply must be enhanced exactly when the Request was.
#[test]
fn enhanced_mismatch() {
    let (_, ev) = initiator_gets(cfg(2, true, 1, 1), &hex(SIW_MPA1_REP));
    assert_eq!(only_failure(ev).error, NegotiationError::EnhancedMismatch);
    let (_, ev) = initiator_gets(cfg(1, true, 1, 1), &hex(SIW_MPA2_REP_1_1));
    assert_eq!(only_failure(ev).error, NegotiationError::EnhancedMismatch);
    // A Rev 2 Reply without S to a Rev 1 Request is an RFC 5044 Reply: fine.
    let rep = reply_frame(false, false, false, 2, None);
    let (_, ev) = initiator_gets(cfg(1, true, 1, 1), &rep);
    assert_eq!(only_established(ev).rev_received, 2);
    // A rejecting Reply is taken as a reject whatever its format.
    let (_, ev) = initiator_gets(
        cfg(2, true, 1, 1),
        &reply_frame(false, false, true, 1, None),
    );
    assert_eq!(only_rejection(ev).reason, RejectReason::ByPeer);
}

/// MPA-7.1.2-21, MPA-7.1.2-27: both waits time out; nothing fires early or twice.
#[test]
fn timeouts() {
    let t0 = Instant::now();
    let c = Config {
        timeout: Duration::from_millis(500),
        ..cfg(2, true, 1, 1)
    };
    let mut i = Initiator::new(c.clone(), t0).unwrap();
    let deadline = i.poll_timeout().unwrap();
    assert_eq!(deadline, t0 + Duration::from_millis(500));
    i.handle_timeout(t0 + Duration::from_millis(499));
    assert!(events_i(&mut i).is_empty());
    i.handle_input(&hex(SIW_MPA2_REP_1_1)[..10]); // a partial Reply does not stop the clock
    i.handle_timeout(deadline);
    let f = only_failure(events_i(&mut i));
    assert_eq!(f.error, NegotiationError::Timeout);
    assert_eq!(f.error.mpa_error(), MpaError::TcpLost);
    assert_eq!(i.poll_timeout(), None);
    i.handle_timeout(deadline + Duration::from_secs(1));
    assert!(events_i(&mut i).is_empty());
    assert_eq!(i.handle_input(&hex(SIW_MPA2_REP_1_1)), 0);

    let mut r = Responder::new(c.clone(), t0).unwrap();
    r.handle_timeout(t0 + Duration::from_secs(1));
    assert_eq!(
        only_failure(events_r(&mut r)).error,
        NegotiationError::Timeout
    );

    // Once the frame is in, the timer is off.
    let mut r = Responder::new(c, t0).unwrap();
    r.handle_input(&hex(SIW_MPA2_REQ_1_1));
    assert_eq!(r.poll_timeout(), None);
    r.handle_timeout(t0 + Duration::from_secs(60));
    assert!(matches!(events_r(&mut r)[..], [Event::Request(_)]));
}

/// MPA-7.1.2-27, mpa-08 §7.1.2: an initiator built before its TCP connection is
/// established counts its wait for the Reply from the establishment (`restart_timer`);
/// once the outcome is known a restart arms nothing.
#[test]
fn the_initiator_timer_restarts_from_the_tcp_establishment() {
    let t0 = Instant::now();
    let c = Config {
        timeout: Duration::from_millis(500),
        ..cfg(2, true, 1, 1)
    };
    let mut i = Initiator::new(c.clone(), t0).unwrap();
    let up = t0 + Duration::from_millis(400);
    i.restart_timer(up);
    assert_eq!(i.poll_timeout(), Some(up + Duration::from_millis(500)));
    i.handle_timeout(t0 + Duration::from_millis(500));
    assert!(events_i(&mut i).is_empty(), "timed out from `new`");
    i.handle_timeout(up + Duration::from_millis(500));
    assert_eq!(
        only_failure(events_i(&mut i)).error,
        NegotiationError::Timeout
    );
    i.restart_timer(up + Duration::from_secs(1));
    assert_eq!(i.poll_timeout(), None);

    let mut i = Initiator::new(c, t0).unwrap();
    i.handle_input(&hex(SIW_MPA2_REP_1_1));
    i.restart_timer(up);
    assert_eq!(i.poll_timeout(), None);
}

/// Premature close: before any octet it is a lost connection, inside a frame a truncated
/// frame; after the outcome it changes nothing.
/// MPA-7.1.1-21: Private Data shorter than PD_Length (the stream ends inside it) fails as a
/// malformed frame.
#[test]
fn premature_close() {
    let mut r = Responder::new(cfg(2, true, 1, 1), now0()).unwrap();
    r.handle_close();
    assert_eq!(
        only_failure(events_r(&mut r)).error,
        NegotiationError::PeerClosed
    );
    let mut r = Responder::new(cfg(2, true, 1, 1), now0()).unwrap();
    r.handle_input(&hex(SIW_MPA2_REQ_1_1)[..21]);
    r.handle_close();
    let f = only_failure(events_r(&mut r));
    assert_eq!(f.error, NegotiationError::Frame(FrameError::Truncated));
    assert_eq!(f.error.mpa_error(), MpaError::InvalidStartupFrame);
    let mut i = Initiator::new(cfg(2, false, 1, 1), now0()).unwrap();
    i.handle_input(&hex(SIW_MPA2_REP_1_1));
    i.handle_close();
    assert!(matches!(events_i(&mut i)[..], [Event::Established(_)]));
}

// ---------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------

fn arb_enhanced() -> impl Strategy<Value = EnhancedData> {
    (any::<bool>(), 0u8..8, 0u16..=0x3FFF, 0u16..=0x3FFF).prop_map(|(a, bits, ird, ord)| {
        EnhancedData {
            peer_to_peer: a,
            rtr: RtrType::ALL
                .into_iter()
                .enumerate()
                .filter(|(k, _)| bits & (1 << k) != 0)
                .map(|(_, t)| t)
                .collect(),
            ird,
            ord,
        }
    })
}

#[derive(Debug, Clone)]
struct OwnedRepr {
    kind: FrameKind,
    markers: bool,
    crc: bool,
    reject: bool,
    res: u8,
    rev: u8,
    enhanced: Option<EnhancedData>,
    pd: Vec<u8>,
}

fn arb_repr() -> impl Strategy<Value = OwnedRepr> {
    (
        any::<bool>(),
        any::<(bool, bool, bool)>(),
        any::<u8>(),
        any::<u8>(),
        proptest::option::of(arb_enhanced()),
        proptest::collection::vec(any::<u8>(), 0..=512),
    )
        .prop_map(|(req, (m, c, r), res, rev, enh, mut pd)| {
            // S and Res as the revision defines them (see wire::mpa docs).
            let (res, enhanced) = if rev >= 2 {
                (res & 0x0F, enh)
            } else {
                (res & 0x1F, None)
            };
            if enhanced.is_some() {
                pd.truncate(508);
            }
            OwnedRepr {
                kind: if req {
                    FrameKind::Request
                } else {
                    FrameKind::Reply
                },
                markers: m,
                crc: c,
                reject: r,
                res,
                rev,
                enhanced,
                pd,
            }
        })
}

proptest! {
    /// Emit then parse is identity; buffer_len is what emit writes; frame_len agrees.
    #[test]
    fn emit_then_parse(o in arb_repr()) {
        let repr = FrameRepr {
            kind: o.kind, markers: o.markers, crc: o.crc, reject: o.reject, res: o.res,
            rev: o.rev, enhanced: o.enhanced, private_data: &o.pd,
        };
        let mut buf = vec![0xEEu8; repr.buffer_len() + 3];
        repr.emit(&mut Frame::new_unchecked(&mut buf[..]));
        prop_assert!(buf[repr.buffer_len()..].iter().all(|&b| b == 0xEE));
        prop_assert_eq!(frame_len(&buf), Ok(repr.buffer_len()));
        let parsed = FrameRepr::parse(&Frame::new_checked(&buf[..]).unwrap()).unwrap();
        prop_assert_eq!(parsed, repr);
    }

    /// EnhancedData words round-trip (MPA2-9-1).
    #[test]
    fn enhanced_data_words(b in any::<[u8; 4]>()) {
        prop_assert_eq!(EnhancedData::from_bytes(b).to_bytes(), b);
    }

    /// Arbitrary octets: parsing never panics, and whatever parses re-emits identically.
    #[test]
    fn parse_arbitrary(mut bytes in proptest::collection::vec(any::<u8>(), 0..600), key in 0u8..3) {
        if key == 1 && bytes.len() >= 16 { bytes[..16].copy_from_slice(b"MPA ID Req Frame"); }
        if key == 2 && bytes.len() >= 16 { bytes[..16].copy_from_slice(b"MPA ID Rep Frame"); }
        if let Ok(f) = Frame::new_checked(&bytes[..]) {
            let _ = (f.kind(), f.flags(), f.private_data(), f.enhanced_data(), f.res());
        }
        let _ = frame_len(&bytes);
        if let Ok(repr) = FrameRepr::parse(&Frame::new_unchecked(&bytes[..])) {
            prop_assert_eq!(&repr.to_vec()[..], &bytes[..repr.buffer_len()]);
        }
        let _ = RtrType::classify_ulpdu(&bytes);
    }

    /// Arbitrary input in arbitrary pieces never panics either machine, never makes them
    /// take more than one frame, and ends in at most one outcome.
    #[test]
    fn machines_survive_arbitrary_input(
        mut bytes in proptest::collection::vec(any::<u8>(), 0..700),
        cuts in proptest::collection::vec(0usize..700, 0..6),
        key in 0u8..3,
        pd_len in 0u16..600,
    ) {
        if bytes.len() >= 20 && key > 0 {
            bytes[..16].copy_from_slice(if key == 1 { b"MPA ID Req Frame" } else { b"MPA ID Rep Frame" });
            bytes[18..20].copy_from_slice(&pd_len.to_be_bytes());
        }
        let mut cuts = cuts;
        cuts.push(bytes.len());
        cuts.sort_unstable();
        let t0 = Instant::now();
        let mut i = Initiator::new(p2p(cfg(2, true, 4, 4), RtrTypes::ALL), t0).unwrap();
        let mut r = Responder::new(cfg(2, false, 4, 4), t0).unwrap();
        let (mut ti, mut tr, mut at) = (0, 0, 0);
        for c in cuts {
            let c = c.min(bytes.len()).max(at);
            // Offer each machine everything from where it stopped, as an engine does.
            ti += i.handle_input(&bytes[ti..c]);
            tr += r.handle_input(&bytes[tr..c]);
            at = c;
        }
        prop_assert!(ti <= 20 + 512 && tr <= 20 + 512);
        if r.phase() == Phase::AwaitingDecision {
            r.accept(&[]).unwrap();
            let _ = r.handle_first_ulpdu(&bytes);
        }
        i.handle_close();
        r.handle_close();
        i.handle_timeout(t0 + Duration::from_secs(3600));
        let ie = events_i(&mut i);
        let re = events_r(&mut r);
        prop_assert!(ie.len() == 1);
        prop_assert!(re.len() <= 2);
    }
}

/// MPA2-6-3, MPA2-10-2/6: a Rev 2 Request without S is an unenhanced Request; the Reply is
/// unenhanced, at the lower of the two revisions. MPA2-10-7: a Rev 1 responder closes on an
/// enhanced one.
/// MPA2-10-4: the unenhanced Request is accepted.
#[test]
fn rev2_request_without_s() {
    let req = request_frame(2, None);
    for (own, rev) in [(2u8, 2u8), (1, 1)] {
        let (_, reply, n) = respond(cfg(own, true, 4, 4), &req);
        let repr = FrameRepr::parse(&Frame::new_checked(&reply[..]).unwrap()).unwrap();
        assert_eq!((repr.rev, repr.enhanced), (rev, None));
        assert_eq!(
            (n.enhanced, n.peer_ird, n.local_ird, n.local_ord),
            (false, None, 4, 4)
        );
    }
    let enhanced = request_frame(2, Some(EnhancedData::default()));
    let mut r = Responder::new(cfg(1, true, 4, 4), now0()).unwrap();
    r.handle_input(&enhanced);
    let f = only_failure(events_r(&mut r));
    assert_eq!(f.error, NegotiationError::EnhancedNotSupported);
    assert_eq!(f.peer.map(|p| p.ird()), Some(Some(0)));
}

/// The fences hold until the frames are fully handed to TCP.
#[test]
fn fences_wait_for_the_frames_to_leave() {
    let mut i = Initiator::new(cfg(2, false, 1, 1), now0()).unwrap();
    let mut r = Responder::new(cfg(2, false, 1, 1), now0()).unwrap();
    let mut buf = [0u8; 10];
    let n = i.poll_transmit(&mut buf);
    assert_eq!(r.handle_input(&buf[..n]), 10);
    let req = drain(&mut |b| i.poll_transmit(b));
    assert_eq!(r.handle_input(&req), 14);
    events_r(&mut r);
    r.accept(&[]).unwrap();
    let mut part = [0u8; 23];
    assert_eq!(r.poll_transmit(&mut part), 23);
    assert_eq!(r.handle_first_ulpdu(b"anything"), Ok(None));
    assert!(!r.can_send_fpdus(), "one Reply octet is still queued");
    assert_eq!(r.poll_transmit(&mut part), 1);
    assert!(r.can_send_fpdus());
    assert_eq!(r.poll_transmit(&mut part), 0);
}
