//! Our initiator against any enhanced Reply, our responder against any enhanced Request:
//! the RFC 6581 §9.1-9.2 rules each must keep whatever the peer sends. (`mpa_grid.rs`
//! pairs our own machines; a peer such as siw answers in its own way.)
//!
//! Requirement IDs refer to `shared/specs/REQUIREMENTS.md`.

use std::time::Instant;

use proptest::prelude::*;
use warpcore_proto::mpa::negotiation::{Config, Event, Initiator, Responder};
use warpcore_proto::wire::mpa::{
    EnhancedData, Frame, FrameKind, FrameRepr, RtrType, RtrTypes, IRD_ORD_NO_NEGOTIATION as X,
};

fn drain(f: &mut dyn FnMut(&mut [u8]) -> usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 64];
    loop {
        let n = f(&mut buf);
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// The enhanced data of an emitted frame.
fn enhanced_of(frame: &[u8]) -> EnhancedData {
    let repr = FrameRepr::parse(&Frame::new_checked(frame).unwrap()).unwrap();
    repr.enhanced.expect("an enhanced frame")
}

fn frame(kind: FrameKind, reject: bool, e: EnhancedData) -> Vec<u8> {
    FrameRepr {
        kind,
        markers: false,
        crc: true,
        reject,
        res: 0,
        rev: 2,
        enhanced: Some(e),
        private_data: &[],
    }
    .to_vec()
}

/// IRD/ORD values: small ones (where the rules bite), 0x3FFF and any other.
fn arb_ird_ord() -> impl Strategy<Value = u16> {
    prop_oneof![0u16..4, Just(X), 0u16..X]
}

fn arb_rtr() -> impl Strategy<Value = RtrTypes> {
    (0u8..8).prop_map(|bits| {
        RtrType::ALL
            .into_iter()
            .enumerate()
            .filter(|(i, _)| bits & (1 << i) != 0)
            .map(|(_, t)| t)
            .collect()
    })
}

fn arb_enhanced() -> impl Strategy<Value = EnhancedData> {
    (any::<bool>(), arb_rtr(), arb_ird_ord(), arb_ird_ord()).prop_map(
        |(peer_to_peer, rtr, ird, ord)| EnhancedData {
            peer_to_peer,
            rtr,
            ird,
            ord,
        },
    )
}

proptest! {
    /// Whatever accepting Reply comes back, an initiator that reaches FPDU mode has IRD at
    /// least the responder ORD and ORD at most the responder IRD (MPA2-9.1-7), keeps its
    /// own value against a 0x3FFF (MPA2-9.1-12, MPA2-9.1-14), saw A echoed (MPA2-9.2-4,
    /// MPA2-9.2-13) and sends an RTR exactly in the peer-to-peer model, one both offered
    /// and marked (MPA2-9.2-9), a Read RTR only with a Read credit on both sides
    /// (MPA2-9.1-3). Anything else ends in `Failed`.
    #[test]
    fn initiator_keeps_the_rules_against_any_reply(
        ird in arb_ird_ord(),
        ord in arb_ird_ord(),
        p2p in any::<bool>(),
        offer in arb_rtr(),
        reply in arb_enhanced(),
    ) {
        let c = Config { ird, ord, peer_to_peer: p2p, rtr: offer, ..Config::default() };
        let Ok(mut i) = Initiator::new(c, Instant::now()) else {
            prop_assert!(p2p && offer.is_empty());
            return Ok(());
        };
        let sent = enhanced_of(&drain(&mut |b| i.poll_transmit(b)));
        i.handle_input(&frame(FrameKind::Reply, false, reply));
        match i.poll_event() {
            Some(Event::Established(n)) => {
                if reply.ord != X && n.local_ird != X {
                    prop_assert!(n.local_ird >= reply.ord, "{n:?}");
                }
                if reply.ird != X && n.local_ord != X {
                    prop_assert!(n.local_ord <= reply.ird, "{n:?}");
                }
                if reply.ord == X {
                    prop_assert_eq!(n.local_ird, sent.ird);
                }
                if reply.ird == X {
                    prop_assert_eq!(n.local_ord, sent.ord);
                }
                prop_assert_eq!(reply.peer_to_peer, p2p);
                match n.rtr {
                    Some(t) => {
                        prop_assert!(p2p && offer.contains(t) && reply.rtr.contains(t));
                        if t == RtrType::Read {
                            prop_assert!(n.local_ord >= 1 && reply.ird >= 1, "{n:?}");
                        }
                    }
                    None => prop_assert!(!p2p),
                }
            }
            Some(Event::Failed(_)) => {}
            other => prop_assert!(false, "{other:?}"),
        }
    }

    /// Whatever enhanced Request arrives, the Reply echoes A (MPA2-9.2-4, MPA2-9.2-13),
    /// marks no RTR type without it (MPA2-9.2-14) and at least one with it (MPA2-9.2-3,
    /// MPA2-9.2-8), answers 0x3FFF with 0x3FFF (MPA2-9.1-11, MPA2-9.1-13), accepts with an
    /// ORD no higher than the initiator IRD (MPA2-9.1-4) and offers a Read RTR only with an
    /// IRD of at least 1 (MPA2-9.1-3); the local values are the replied ones, or ours
    /// where 0x3FFF was replied.
    #[test]
    fn responder_keeps_the_rules_against_any_request(
        ird in arb_ird_ord(),
        ord in arb_ird_ord(),
        accepts in arb_rtr(),
        request in arb_enhanced(),
        reject in any::<bool>(),
    ) {
        let c = Config { ird, ord, rtr: accepts, ..Config::default() };
        let Ok(mut r) = Responder::new(c, Instant::now()) else {
            return Ok(());
        };
        let req = frame(FrameKind::Request, false, request);
        prop_assert_eq!(r.handle_input(&req), req.len());
        prop_assert!(matches!(r.poll_event(), Some(Event::Request(_))));
        let decided = if reject { r.reject(&[]) } else { r.accept(&[]) };
        if decided.is_err() {
            return Ok(());
        }
        let reply = enhanced_of(&drain(&mut |b| r.poll_transmit(b)));
        prop_assert_eq!(reply.peer_to_peer, request.peer_to_peer);
        prop_assert_eq!(reply.rtr.is_empty(), !request.peer_to_peer);
        if request.ord == X {
            prop_assert_eq!(reply.ird, X);
        }
        if request.ird == X {
            prop_assert_eq!(reply.ord, X);
        }
        if !reject && request.ird != X && reply.ord != X {
            prop_assert!(reply.ord <= request.ird, "{reply:?}");
        }
        if reply.rtr.contains(RtrType::Read) && reply.ird != X {
            prop_assert!(reply.ird >= 1, "{reply:?}");
        }
        if !reject {
            let Some(Event::Established(n)) = r.poll_event() else {
                return Err(TestCaseError::fail("no Established after accept"));
            };
            prop_assert_eq!(n.local_ird, if reply.ird == X { ird } else { reply.ird });
            prop_assert_eq!(n.local_ord, if reply.ord == X { ord } else { reply.ord });
            prop_assert_eq!(n.rtr_accepted, reply.rtr);
        }
    }
}
