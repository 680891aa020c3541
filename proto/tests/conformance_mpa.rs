//! MPA (draft-ietf-rddp-mpa-08 / RFC 5044) and MPA v2 (RFC 6581) rows that the other proto
//! tests exercised without checking them outright: CRC defaults, Rev and PD_Length of the
//! frames we send, when a responder enters Full Operation, how much Private Data is taken,
//! marker arithmetic past 2^32 octets, and the RTR types a responder marks. Requirement IDs
//! are the rows of `shared/specs/REQUIREMENTS.md`.

use std::time::Instant;

use warpcore_proto::mpa::deframer::{Deframer, DeframerConfig};
use warpcore_proto::mpa::framer::{Framer, FramerConfig};
use warpcore_proto::mpa::negotiation::{Config, Event, Initiator, Phase, Responder};
use warpcore_proto::wire::fpdu::MAX_ULPDU_LEN;
use warpcore_proto::wire::mpa::{Frame, RtrTypes};

fn drain(tx: &mut dyn FnMut(&mut [u8]) -> usize) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let mut buf = [0u8; 1024];
        let n = tx(&mut buf);
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf[..n]);
    }
}

fn request(c: Config) -> Vec<u8> {
    let mut i = Initiator::new(c, Instant::now()).unwrap();
    drain(&mut |b| i.poll_transmit(b))
}

fn events(r: &mut Responder) -> Vec<Event> {
    std::iter::from_fn(|| r.poll_event()).collect()
}

/// MPA-2.2-3, MPA-4.4-4, MPA-4.4-2: CRCs are on unless the user asks otherwise: the
/// default configuration announces C = 1 in the Request and in the Reply, even to a peer
/// that announced C = 0; only an explicit `crc: false` sends C = 0.
#[test]
fn crcs_are_on_unless_explicitly_turned_off() {
    assert!(Config::default().crc);
    let req = request(Config::default());
    assert!(Frame::new_checked(&req[..]).unwrap().crc());
    let no_crc = request(Config {
        crc: false,
        ..Config::default()
    });
    assert!(!Frame::new_checked(&no_crc[..]).unwrap().crc());
    let mut r = Responder::new(Config::default(), Instant::now()).unwrap();
    assert_eq!(r.handle_input(&no_crc), no_crc.len());
    assert!(matches!(events(&mut r)[..], [Event::Request(_)]));
    r.accept(b"").unwrap();
    let reply = drain(&mut |b| r.poll_transmit(b));
    assert!(Frame::new_checked(&reply[..]).unwrap().crc());
    match &events(&mut r)[..] {
        [Event::Established(n)] => assert!(n.crc),
        e => panic!("{e:?}"),
    }
}

/// MPA-7.1.1-17, MPA-7.1.1-20, MPA2-10-3: a Rev 1 initiator (no enhanced feature wanted)
/// sends Rev 1 with S = 0 and no enhanced data; PD_Length is exactly the number of Private
/// Data octets that follow, and 0 means none (a 20-octet frame). A Rev 1 responder's Reply
/// is Rev 1 too. At Rev 2 PD_Length counts the 4 enhanced octets in front of the ULP's.
#[test]
fn rev_1_frames_and_pd_length() {
    for pd in [&b""[..], b"abc", &[7u8; 512][..]] {
        let c = Config {
            rev: 1,
            private_data: pd.to_vec(),
            ..Config::default()
        };
        let req = request(c.clone());
        let f = Frame::new_checked(&req[..]).unwrap();
        assert_eq!(f.rev(), 1);
        assert!(!f.s_bit() && f.enhanced_data().is_none());
        assert_eq!(usize::from(f.pd_length()), pd.len());
        assert_eq!(req.len(), 20 + pd.len());
        assert_eq!(f.private_data(), pd);
        let mut r = Responder::new(c, Instant::now()).unwrap();
        assert_eq!(r.handle_input(&req), req.len());
        let _ = events(&mut r);
        r.accept(pd).unwrap();
        let reply = drain(&mut |b| r.poll_transmit(b));
        let f = Frame::new_checked(&reply[..]).unwrap();
        assert_eq!((f.rev(), f.s_bit()), (1, false));
        assert_eq!(usize::from(f.pd_length()), pd.len());
        assert_eq!(reply.len(), 20 + pd.len());
    }
    let req = request(Config {
        private_data: b"abc".to_vec(),
        ..Config::default()
    });
    let f = Frame::new_checked(&req[..]).unwrap();
    assert_eq!((f.rev(), f.s_bit(), f.pd_length()), (2, true, 7));
    assert_eq!(&req[24..], b"abc");
}

/// MPA-7.1.2-3: a responder enters Full Operation only once a whole Request has arrived and
/// been validated, and its ULP accepted it: with one octet of the Request missing nothing
/// is reported and nothing may be sent; the last octet brings the Request; FPDU mode only
/// follows the accept. A Request with a wrong key never gets that far.
#[test]
fn responder_enters_full_operation_only_after_a_validated_request() {
    let req = request(Config::default());
    let mut r = Responder::new(Config::default(), Instant::now()).unwrap();
    assert_eq!(r.handle_input(&req[..req.len() - 1]), req.len() - 1);
    assert!(events(&mut r).is_empty());
    assert_ne!(r.phase(), Phase::Established);
    assert!(drain(&mut |b| r.poll_transmit(b)).is_empty());
    assert_eq!(r.handle_input(&req[req.len() - 1..]), 1);
    assert!(matches!(events(&mut r)[..], [Event::Request(_)]));
    assert_ne!(r.phase(), Phase::Established);
    r.accept(b"").unwrap();
    assert!(matches!(events(&mut r)[..], [Event::Established(_)]));
    assert_eq!(r.phase(), Phase::Established);

    let mut bad = req.clone();
    bad[5] ^= 0x20;
    let mut r = Responder::new(Config::default(), Instant::now()).unwrap();
    r.handle_input(&bad);
    assert!(matches!(events(&mut r)[..], [Event::Failed(_)]));
    assert_ne!(r.phase(), Phase::Established);
}

/// MPA-7.1.2-23, MPA-7.1.2-24: the largest Private Data (512 octets) is received whole,
/// and no more than PD_Length octets are taken: the FPDU octets that follow the Request in
/// the same input are left for the deframer, however the input is split.
#[test]
fn private_data_is_taken_whole_and_no_further() {
    let pd: Vec<u8> = (0..512u32).map(|i| i as u8).collect();
    let req = request(Config {
        rev: 1,
        private_data: pd.clone(),
        ..Config::default()
    });
    let mut input = req.clone();
    input.extend_from_slice(&[0x00, 0x2A, 0x41, 0x43, 0, 0, 0, 0]);
    for split in [1, 19, 20, 21, 300, req.len() - 1, req.len(), input.len()] {
        let mut r = Responder::new(Config::default(), Instant::now()).unwrap();
        let first = r.handle_input(&input[..split]);
        let second = r.handle_input(&input[first..]);
        assert_eq!(first + second, req.len(), "split {split}");
        match &events(&mut r)[..] {
            [Event::Request(p)] => assert_eq!(p.private_data, pd, "split {split}"),
            e => panic!("split {split}: {e:?}"),
        }
    }
}

/// MPA-4.3-4: where a marker points is computed modulo the stream, so a connection that
/// has carried more than 2^32 octets (where TCP sequence numbers wrap) frames and deframes
/// exactly as one at the same offset modulo 512: the wire octets at offset 2^32 - 8 and
/// 2^33 - 8 equal those at 504, and they deframe to the same ULPDUs.
#[test]
fn markers_past_2_32_octets_of_stream() {
    let ulpdus: Vec<Vec<u8>> = [10usize, 1000, 3, 600, 2000]
        .iter()
        .enumerate()
        .map(|(k, &n)| (0..n).map(|i| (i * 7 + k) as u8).collect())
        .collect();
    let wire_at = |offset: u64| {
        let mut f = Framer::new(FramerConfig {
            markers: true,
            crc: true,
            mulpdu: MAX_ULPDU_LEN,
            stream_offset: offset,
        });
        let mut wire = Vec::new();
        for u in &ulpdus {
            let mut out = vec![0u8; f.fpdu_wire_len(u.len())];
            let n = f.emit(&[u], &mut out).unwrap();
            wire.extend_from_slice(&out[..n]);
        }
        wire
    };
    let reference = wire_at(504);
    for offset in [(1u64 << 32) - 8, (1u64 << 33) - 8] {
        let wire = wire_at(offset);
        assert_eq!(wire, reference, "offset {offset:#x}");
        let mut d = Deframer::new(DeframerConfig {
            markers: true,
            crc: true,
            max_ulpdu_len: MAX_ULPDU_LEN,
            stream_offset: offset,
        });
        let mut got = Vec::new();
        let mut input = &wire[..];
        while !input.is_empty() {
            let (n, u) = d.poll(input).unwrap();
            input = &input[n..];
            if let Some(u) = u {
                got.push(u.to_vec());
            }
        }
        assert_eq!(got, ulpdus, "offset {offset:#x}");
    }
}

/// MPA2-9.2-6: a responder that supports several of the RTR types a peer-to-peer Request
/// offers marks at least one of them (here: every one it supports among those offered).
#[test]
fn a_responder_marks_an_offered_rtr_type_it_supports() {
    let all = RtrTypes::WRITE.union(RtrTypes::READ).union(RtrTypes::SEND);
    for offer in [
        RtrTypes::WRITE.union(RtrTypes::READ),
        RtrTypes::SEND.union(RtrTypes::READ),
        all,
    ] {
        let req = request(Config {
            peer_to_peer: true,
            rtr: offer,
            ..Config::default()
        });
        let mut r = Responder::new(
            Config {
                rtr: all,
                ..Config::default()
            },
            Instant::now(),
        )
        .unwrap();
        r.handle_input(&req);
        let _ = events(&mut r);
        r.accept(b"").unwrap();
        let reply = drain(&mut |b| r.poll_transmit(b));
        let marked = Frame::new_checked(&reply[..])
            .unwrap()
            .enhanced_data()
            .unwrap()
            .rtr;
        assert_eq!(marked.intersection(offer), offer, "offer {offer:?}");
    }
}
