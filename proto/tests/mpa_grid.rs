//! Our initiator against our responder over a grid of IRD/ORD (0x3FFF
//! included) and RTR sets; the RFC 6581 §9.1-9.2 invariants after every outcome.

use std::time::Instant;

use warpcore_proto::mpa::negotiation::{Config, Event, Initiator, Responder};
use warpcore_proto::wire::mpa::{RtrType, RtrTypes, IRD_ORD_NO_NEGOTIATION as X};

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

#[test]
fn grid_invariants() {
    let vals = [0u16, 1, 2, 5, X];
    let sets: Vec<RtrTypes> = (1u8..8)
        .map(|b| {
            RtrType::ALL
                .into_iter()
                .enumerate()
                .filter(|(i, _)| b & (1 << i) != 0)
                .map(|(_, t)| t)
                .collect()
        })
        .collect();
    let now = Instant::now();
    let mut checked = 0;
    for &ii in &vals {
        for &io in &vals {
            for &ri in &vals {
                for &ro in &vals {
                    for &offer in &sets {
                        for &accept in &sets {
                            for p2p in [false, true] {
                                let ic = Config {
                                    ird: ii,
                                    ord: io,
                                    peer_to_peer: p2p,
                                    rtr: offer,
                                    ..Config::default()
                                };
                                let rc = Config {
                                    ird: ri,
                                    ord: ro,
                                    rtr: accept,
                                    ..Config::default()
                                };
                                let Ok(mut r) = Responder::new(rc, now) else {
                                    continue;
                                };
                                let mut i = Initiator::new(ic, now).unwrap();
                                let req = drain(&mut |b| i.poll_transmit(b));
                                assert_eq!(r.handle_input(&req), req.len());
                                let Some(Event::Request(_)) = r.poll_event() else {
                                    panic!()
                                };
                                if r.accept(&[]).is_err() {
                                    continue;
                                }
                                let Some(Event::Established(rn)) = r.poll_event() else {
                                    panic!()
                                };
                                let rep = drain(&mut |b| r.poll_transmit(b));
                                i.handle_input(&rep);
                                let ctx = format!(
                                    "i=({ii},{io}) r=({ri},{ro}) offer={offer:?} accept={accept:?} p2p={p2p}"
                                );
                                match i.poll_event() {
                                    Some(Event::Established(n)) => {
                                        checked += 1;
                                        let num = |v: u16| v != X;
                                        if num(n.local_ord) && num(rn.local_ird) {
                                            assert!(
                                                n.local_ord <= rn.local_ird,
                                                "{ctx}: {n:?} {rn:?}"
                                            );
                                        }
                                        if num(rn.local_ord) && num(n.local_ird) {
                                            assert!(
                                                rn.local_ord <= n.local_ird,
                                                "{ctx}: {n:?} {rn:?}"
                                            );
                                        }
                                        if let Some(t) = n.rtr {
                                            assert!(rn.rtr_accepted.contains(t), "{ctx}");
                                            assert!(offer.contains(t), "{ctx}");
                                            assert!(accept.contains(t), "{ctx}");
                                            if t == RtrType::Read {
                                                assert!(
                                                    rn.local_ird >= 1 && n.local_ord >= 1,
                                                    "{ctx}: {n:?} {rn:?}"
                                                );
                                            }
                                        } else {
                                            assert!(!p2p, "{ctx}");
                                        }
                                        // What the user configured as a number is never exceeded.
                                        if num(ri) {
                                            assert!(rn.local_ird <= ri.max(1), "{ctx}");
                                        }
                                        if num(ro) {
                                            assert!(rn.local_ord <= ro, "{ctx}");
                                        }
                                        if num(ii) {
                                            assert!(n.local_ird <= ii, "{ctx}");
                                        }
                                    }
                                    Some(Event::Failed(f)) => {
                                        // Only an RTR mismatch may fail between two of us.
                                        assert!(p2p, "{ctx}: {f:?}");
                                        assert!(
                                            offer.intersection(accept).is_empty()
                                                || (offer.intersection(accept) == RtrTypes::READ),
                                            "{ctx}: {f:?}"
                                        );
                                    }
                                    other => panic!("{ctx}: {other:?}"),
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(checked > 1000);
}
