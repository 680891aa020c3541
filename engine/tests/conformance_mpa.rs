//! MPA (draft-ietf-rddp-mpa-08 / RFC 5044) rows checked on the wire against an engine core:
//! a hand-driven peer (`conformance_common`) negotiates with the settings under test, then
//! judges the FPDUs the engine sends and sends FPDUs of its own (some with a broken CRC).
//! Requirement IDs are the rows of `shared/specs/REQUIREMENTS.md`.

mod common;
mod conformance_common;

use conformance_common::*;
use warpcore_engine::proto::mpa::negotiation as nego;
use warpcore_engine::{MpaParams, QpState, SendOp, WcOpcode, WcStatus};

/// The peer sends a valid Send (lifting the engine's MPA fence), the engine answers with a
/// Send of 8 octets; returns the ULPDU the peer got.
fn exchange(w: &mut World, c: &mut Conn) -> Vec<u8> {
    w.send(c, &[send_ulpdu(1, b"go")], false);
    let mut got = Vec::new();
    for _ in 0..3000 {
        w.step();
        got.extend(w.completions());
        if !got.is_empty() {
            break;
        }
    }
    assert_eq!(
        got.iter()
            .map(|c| (c.opcode, c.status, c.byte_len))
            .collect::<Vec<_>>(),
        vec![(WcOpcode::Recv, WcStatus::Success, 2)]
    );
    w.region.write_at(256, b"outbound").unwrap();
    w.engine
        .post_send(c.qp, send_wr(50, SendOp::Send, Some((w.stag, 256, 8))))
        .unwrap();
    let u = w.read_n(c, 1);
    assert_eq!(u.len(), 1);
    u[0].clone()
}

/// MPA-3-13, MPA-C.1-1: at Rev 1 and at Rev 2 the DDP and RDMAP headers the engine sends
/// carry version 1 (DDP DV, the low two bits of D+0; RDMAP RV, the top two of D+1), and
/// the engine takes the peer's version-1 headers: the same version both ways. (Rev 0, the
/// RDMAC version 0, is refused at startup: `engine_mpa_startup`'s
/// `malformed_replies_fail_typed_and_release_the_connection`.)
#[test]
fn ddp_and_rdmap_version_1_both_ways_at_rev_1_and_2() {
    for rev in [1u8, 2] {
        let mut w = world(MpaParams::default());
        let mut c = w.connect(
            2,
            nego::Config {
                rev,
                ..nego::Config::default()
            },
        );
        assert_eq!(
            c.negotiated.rev_received, rev,
            "the engine answers at Rev {rev}"
        );
        let u = exchange(&mut w, &mut c);
        assert_eq!(u[0] & 0x03, 1, "Rev {rev}: DDP version");
        assert_eq!(u[1] >> 6, 1, "Rev {rev}: RDMAP version");
        assert_eq!(&u[18..], b"outbound");
    }
}

/// MPA-4.4-2, MPA-4.4-6, MPA-4.4-9, MPA-4.4-10, MPA-4.4-11, MPA-4.4-1: the engine's CRC
/// policy on the wire, for each of the four C settings of the peer and the engine. When
/// either side announced C = 1, the engine's FPDUs carry a valid CRC (the peer's deframer
/// checks it) and an FPDU of the peer with a broken CRC is refused with Terminate 2/0/02
/// and not delivered, however late in the connection. Only when both announced C = 0 does
/// the engine stop checking: the same broken FPDU is delivered.
#[test]
fn crc_generated_and_checked_unless_both_sides_announced_c_0() {
    for (peer_c, engine_c) in [(true, true), (true, false), (false, true), (false, false)] {
        let ctx = format!("peer C={peer_c} engine C={engine_c}");
        let mut w = world(MpaParams {
            crc: engine_c,
            ..MpaParams::default()
        });
        let mut c = w.connect(
            3,
            nego::Config {
                crc: peer_c,
                ..nego::Config::default()
            },
        );
        let on = peer_c || engine_c;
        assert_eq!(c.negotiated.crc, on, "{ctx}");
        // With CRCs on the peer's deframer checks the engine's CRC (a bad one panics in
        // `World::read`).
        exchange(&mut w, &mut c);
        // Later in the connection: a good FPDU first.
        w.send(&mut c, &[send_ulpdu(2, b"ok")], false);
        w.run(200);
        let _ = w.completions();
        w.send(&mut c, &[send_ulpdu(3, b"broken")], true);
        let mut term = None;
        let mut done = Vec::new();
        for _ in 0..2000 {
            term = term.or(terminate_in(&w.read(&mut c)));
            done.extend(w.completions());
            if term.is_some() || done.iter().any(|c| c.status == WcStatus::Success) {
                break;
            }
        }
        if on {
            assert_eq!(term, Some((2, 0, 2)), "{ctx}");
            assert!(
                done.iter().all(|c| c.status != WcStatus::Success),
                "{ctx}: {done:?}"
            );
        } else {
            assert_eq!(term, None, "{ctx}");
            assert_eq!(
                done.iter()
                    .map(|c| (c.opcode, c.status, c.byte_len))
                    .collect::<Vec<_>>(),
                vec![(WcOpcode::Recv, WcStatus::Success, 6)],
                "{ctx}"
            );
            assert_eq!(w.engine.qp_state(c.qp), Ok(QpState::Rts));
        }
    }
}

/// MPA-7.1-1, MPA-7.1-4: the peer writes its first FPDU into TCP in the same step as the
/// engine's Reply completes its startup, right behind the Request in the stream: the engine
/// takes it as an FPDU from exactly that octet on (both ends agree where Full Operation
/// begins), and the QP it accepted onto is already bound to the stream and completes the
/// receive with the FPDU's octets.
#[test]
fn the_first_fpdu_right_behind_the_startup_frames_reaches_the_bound_qp() {
    let mut w = world(MpaParams::default());
    let c = w.connect_then(1, nego::Config::default(), |w, tcp, framer| {
        let bytes = frame(framer, &[send_ulpdu(1, b"at once")], false);
        assert_eq!(w.peer.send(tcp, &bytes).unwrap(), bytes.len());
    });
    let mut got = Vec::new();
    for _ in 0..3000 {
        w.step();
        got.extend(w.completions());
        if !got.is_empty() {
            break;
        }
    }
    assert_eq!(
        got.iter()
            .map(|c| (c.wr_id, c.opcode, c.status, c.byte_len))
            .collect::<Vec<_>>(),
        vec![(0, WcOpcode::Recv, WcStatus::Success, 7)]
    );
    let mut b = [0u8; 7];
    w.region.read_at(0, &mut b).unwrap();
    assert_eq!(&b, b"at once");
    assert_eq!(w.engine.qp_state(c.qp), Ok(QpState::Rts));
}
