//! The engine as MPA initiator against a hand-driven responder (proto's `Responder` over a
//! raw TCP stack): Replies split at every octet, hostile or malformed Replies, and a peer
//! that accepts the TCP connection and never answers. Each ends in a typed event for the
//! local user, and no connection is held once the startup is over.

mod common;

use std::sync::Arc;

use common::{ip, PORT};
use warpcore_engine::proto::mpa::negotiation::{self as nego, NegotiationError, Responder};
use warpcore_engine::proto::wire::mpa::{FrameError, RtrType};
use warpcore_engine::tcp::link::LinkEnd;
use warpcore_engine::tcp::smoltcp::socket::tcp::State as TcpState;
use warpcore_engine::tcp::smoltcp::time::{Duration, Instant};
use warpcore_engine::tcp::{ConnId, ListenerId, Stack, TcpTuning};
use warpcore_engine::{
    CmEvent, CompletionQueue, ConnError, DisconnectCause, EngineConfig, EngineCore, MpaParams,
    QpId, QpState,
};

/// The startup timeout of these tests' engine (the default is 10 s).
const MPA_TIMEOUT_MS: u64 = 1_000;

struct World {
    /// The hand-driven responder's stack (10.0.0.1), listening on `PORT`.
    peer: Stack<LinkEnd>,
    listener: ListenerId,
    /// The engine (10.0.0.2), initiator.
    engine: EngineCore<LinkEnd>,
    qp: QpId,
    events: Vec<CmEvent>,
    now: Instant,
    _cq: Arc<CompletionQueue>,
    mrs: Arc<warpcore_engine::mem::MrTable>,
}

fn world() -> World {
    let cfg = EngineConfig {
        mpa_timeout_ms: MPA_TIMEOUT_MS,
        ..EngineConfig::default()
    };
    let mrs = Arc::new(warpcore_engine::mem::MrTable::new(64));
    let (mut peer, mut engine) = common::hand_driven_pair(cfg, &mrs);
    let listener = peer.listen(PORT, 4, &TcpTuning::default()).unwrap();
    let cq = Arc::new(CompletionQueue::new(256).unwrap());
    let qp = engine.create_qp(common::qp_attr(&cq, 8, 1)).unwrap().0;
    World {
        peer,
        listener,
        engine,
        qp,
        events: Vec::new(),
        now: Instant::ZERO,
        _cq: cq,
        mrs,
    }
}

impl World {
    /// Polls both sides once and moves the clock on by `dt`.
    fn step_by(&mut self, dt: Duration) {
        self.peer.poll(self.now);
        self.engine.poll(self.now);
        while let Some(e) = self.engine.next_event() {
            self.events.push(e);
        }
        while self.peer.next_event().is_some() {}
        self.now += dt;
    }

    fn step(&mut self) {
        self.step_by(Duration::from_micros(100));
    }

    /// The engine connects with `params`; returns the peer's side of the TCP connection
    /// once the engine's whole MPA Request has arrived there, and the Request's octets.
    fn start(&mut self, params: &MpaParams) -> (ConnId, Vec<u8>) {
        self.engine
            .connect(self.qp, (ip(1), PORT), params, b"from the engine")
            .unwrap();
        let mut tcp = None;
        let mut request = Vec::new();
        for _ in 0..5000 {
            self.step();
            if tcp.is_none() {
                tcp = self.peer.accept(self.listener).unwrap();
            }
            if let Some(c) = tcp {
                let _ = self.peer.recv_with(c, |d| {
                    request.extend_from_slice(d);
                    d.len()
                });
                if request.len() >= 20 {
                    let pd_len = u16::from_be_bytes([request[18], request[19]]) as usize;
                    if request.len() >= 20 + pd_len {
                        return (c, request);
                    }
                }
            }
        }
        panic!("no MPA Request from the engine ({} octets)", request.len());
    }

    /// Sends `bytes` to the engine one octet per step.
    fn send_octet_by_octet(&mut self, tcp: ConnId, bytes: &[u8]) {
        for b in bytes {
            while self.peer.send(tcp, std::slice::from_ref(b)).unwrap() == 0 {
                self.step();
            }
            self.step();
            self.step();
        }
    }

    /// Steps until the engine reported an event `pick` accepts; returns it.
    fn wait_event<T>(&mut self, mut pick: impl FnMut(&CmEvent) -> Option<T>) -> T {
        for _ in 0..20_000 {
            if let Some(t) = self.events.iter().find_map(&mut pick) {
                return t;
            }
            self.step();
        }
        panic!("event not reported: {:?}", self.events);
    }

    /// The failed MPA startup the engine reports: why, and the peer's IRD and ORD.
    fn negotiation_failure(&mut self) -> (NegotiationError, Option<(u16, u16)>) {
        self.wait_event(|e| match e {
            CmEvent::Error {
                error:
                    ConnError::Negotiation {
                        error,
                        peer_ird_ord,
                    },
                ..
            } => Some((*error, *peer_ird_ord)),
            _ => None,
        })
    }
}

/// The Reply proto's responder answers `request` with: accepting (or rejecting) with
/// `private_data`.
fn reply_to(request: &[u8], accept: bool, private_data: &[u8]) -> Vec<u8> {
    let mut r = Responder::new(
        nego::Config {
            ird: 3,
            ord: 5,
            ..nego::Config::default()
        },
        std::time::Instant::now(),
    )
    .unwrap();
    assert_eq!(r.handle_input(request), request.len());
    assert!(matches!(r.poll_event(), Some(nego::Event::Request(_))));
    if accept {
        r.accept(private_data).unwrap();
    } else {
        r.reject(private_data).unwrap();
    }
    let mut out = vec![0u8; 1024];
    let n = r.poll_transmit(&mut out);
    out.truncate(n);
    out
}

/// MPA-7.1.2-11/15, MPA2-9.1-7/10: a Reply that arrives one octet per TCP segment is put
/// together and accepted; the local user learns the responder's private data and its
/// IRD/ORD, and the initiator's own IRD/ORD follow them.
#[test]
fn a_reply_split_at_every_octet_establishes() {
    let mut w = world();
    let params = MpaParams {
        peer_to_peer: false,
        ..MpaParams::default()
    };
    let (tcp, request) = w.start(&params);
    let reply = reply_to(&request, true, b"from the peer");
    w.send_octet_by_octet(tcp, &reply);
    let est = w.wait_event(|e| match e {
        CmEvent::Established(x) => Some(x.clone()),
        _ => None,
    });
    assert_eq!(est.private_data, b"from the peer");
    // The peer's Reply: IRD min(our ORD 8, its 3) = 3, ORD min(its 5, our IRD 8) = 5.
    assert_eq!(est.peer_ird_ord, Some((3, 5)));
    assert_eq!((est.ird, est.ord), (5, 3));
    assert_eq!(w.engine.qp_state(w.qp).unwrap(), QpState::Rts);
}

/// MPA-7.1.2-12, MPA-7.1.2-17/20, MPA-7.1.1-6/19, MPA-7.1.2-22..26, MPA2-6-5, MPA2-10-5:
/// a malformed Reply, each fed one octet at a time, fails the startup with the error that
/// names what was wrong, the QP ends in the error state, and the connection is closed and
/// released (the peer closes its side when it sees ours close).
/// MPA-7.1.1-5 (the initiator checks the Reply key), MPA-8-10 (TCP closed at once after error
/// 4).
#[test]
fn malformed_replies_fail_typed_and_release_the_connection() {
    type Mangle = fn(&mut Vec<u8>);
    let cases: [(&str, Mangle, NegotiationError); 7] = [
        (
            "bad key",
            |r| r[3] = b'X',
            NegotiationError::Frame(FrameError::BadKey),
        ),
        (
            "a Request key",
            |r| r[9] = b'q',
            NegotiationError::InitiatorInitiator,
        ),
        (
            "Rev 0",
            |r| r[17] = 0,
            NegotiationError::UnsupportedRevision(0),
        ),
        (
            "Rev 3",
            |r| r[17] = 3,
            NegotiationError::UnsupportedRevision(3),
        ),
        (
            "PD_Length 513",
            |r| r[18..20].copy_from_slice(&513u16.to_be_bytes()),
            NegotiationError::Frame(FrameError::PrivateDataTooLong),
        ),
        (
            "S = 1 without enhanced data",
            |r| {
                r[18..20].copy_from_slice(&2u16.to_be_bytes());
                r.truncate(22);
            },
            NegotiationError::Frame(FrameError::EnhancedDataMissing),
        ),
        (
            "S = 0 to an enhanced Request",
            |r| {
                // Clear S and drop the enhanced data: a well-formed RFC 5044 Reply.
                r[16] &= !0x10;
                let pd_len = u16::from_be_bytes([r[18], r[19]]) - 4;
                r[18..20].copy_from_slice(&pd_len.to_be_bytes());
                r.drain(20..24);
            },
            NegotiationError::EnhancedMismatch,
        ),
    ];
    for (name, mangle, want) in cases {
        let mut w = world();
        let (tcp, request) = w.start(&MpaParams::default());
        let mut reply = reply_to(&request, true, b"pd");
        mangle(&mut reply);
        w.send_octet_by_octet(tcp, &reply);
        let got = w.negotiation_failure();
        // No valid frame: no IRD and ORD of the peer's to pass on.
        assert_eq!(got, (want, None), "{name}");
        assert_eq!(w.engine.qp_state(w.qp).unwrap(), QpState::Error, "{name}");
        assert!(
            !w.events
                .iter()
                .any(|e| matches!(e, CmEvent::Established(_))),
            "{name}: {:?}",
            w.events
        );
        // The peer answers our close with its own; then nothing is left.
        let mut closed = false;
        for _ in 0..5000 {
            w.step();
            let _ = w.peer.recv_with(tcp, |d| d.len());
            if !closed && w.peer.state(tcp).is_ok_and(|s| s == TcpState::CloseWait) {
                w.peer.close(tcp).unwrap();
                closed = true;
            }
            if w.engine.stack().live() == 0 {
                break;
            }
        }
        assert_eq!(w.engine.stack().live(), 0, "{name}: connection left");
    }
}

/// MPA-7.1.2-27 (a timeout guards the wait for the startup frame, against denial of
/// service): a peer that accepts the TCP connection, reads the Request and never answers
/// (nor closes) fails the startup with `Negotiation(Timeout)` once `mpa_timeout_ms` has
/// passed, and the connection is reset then, as the responder side resets a silent
/// initiator's. It used to be closed gracefully: the silent peer never sent its FIN, and
/// the connection stayed in FIN-WAIT-2 for good, after `destroy_qp` too.
#[test]
fn mpa_7_1_2_27_a_peer_that_never_replies_times_out_and_holds_nothing() {
    let mut w = world();
    let (tcp, _request) = w.start(&MpaParams::default());
    let started = w.now;
    let got = w.wait_event(|e| match e {
        CmEvent::Error {
            qp,
            error: ConnError::Negotiation { error: n, .. },
        } => Some((*qp, *n)),
        _ => None,
    });
    assert_eq!(got, (w.qp, NegotiationError::Timeout));
    let waited = w.now - started;
    assert!(
        waited >= Duration::from_millis(MPA_TIMEOUT_MS - 100)
            && waited <= Duration::from_millis(MPA_TIMEOUT_MS + 100),
        "timed out after {waited}"
    );
    assert_eq!(w.engine.qp_state(w.qp).unwrap(), QpState::Error);
    // The silent peer keeps its end open (and answers keep-alives) for a minute.
    for _ in 0..60_000 {
        w.step_by(Duration::from_millis(1));
        let _ = w.peer.recv_with(tcp, |d| d.len());
    }
    assert_eq!(
        w.engine.stack().live(),
        0,
        "the engine still holds the connection"
    );
    w.engine.destroy_qp(w.qp).unwrap();
    w.step();
    assert_eq!(w.engine.stats().tcp_zombies, 0);
    assert_eq!(w.engine.stack().live(), 0);
    // No second report.
    let errors = w
        .events
        .iter()
        .filter(|e| !matches!(e, CmEvent::Established(_)))
        .count();
    assert_eq!(errors, 1, "{:?}", w.events);
}

/// A graceful disconnect (RDMAP-06 §6: FIN once drained, `Disconnected` once the peer
/// closed too) to a peer that acknowledges our FIN and then neither sends nor closes:
/// the engine's TCP resets the connection after a minute in FIN-WAIT-2
/// (`TcpTuning::fin_wait_2_timeout`, Linux's `tcp_fin_timeout`), the local user gets
/// `Disconnected { cause: TimedOut }` (the peer went silent: no RST came), and nothing is
/// held. Before, the QP waited in Closing,
/// without its `Disconnected`, for as long as the peer kept its side open (and a
/// destroyed QP's connection stayed a zombie for good).
#[test]
fn a_disconnect_to_a_peer_that_never_closes_ends_within_a_minute() {
    for destroy in [false, true] {
        let mut w = world();
        let (tcp, request) = w.start(&MpaParams::default());
        let reply = reply_to(&request, true, b"pd");
        assert_eq!(w.peer.send(tcp, &reply).unwrap(), reply.len());
        w.wait_event(|e| matches!(e, CmEvent::Established(_)).then_some(()));
        w.engine.disconnect(w.qp).unwrap();
        let from = w.now;
        // The FIN goes out and is acknowledged; the peer reads and keeps its side open.
        for _ in 0..100 {
            w.step();
            let _ = w.peer.recv_with(tcp, |d| d.len());
        }
        assert_eq!(w.peer.state(tcp), Ok(TcpState::CloseWait));
        if destroy {
            w.engine.destroy_qp(w.qp).unwrap();
        }
        let mut ended = None;
        for _ in 0..70_000 {
            w.step_by(Duration::from_millis(1));
            let _ = w.peer.recv_with(tcp, |d| d.len());
            if ended.is_none() && w.engine.stack().live() == 0 {
                ended = Some(w.now - from);
            }
        }
        let ended = ended.expect("the engine still holds the connection after 70 s");
        assert!(
            ended >= Duration::from_secs(60) && ended <= Duration::from_secs(61),
            "released after {ended}"
        );
        assert_eq!(w.engine.stats().tcp_zombies, 0);
        if !destroy {
            assert!(
                w.events
                    .iter()
                    .any(|e| matches!(e, CmEvent::Disconnected { qp, cause: DisconnectCause::TimedOut } if *qp == w.qp)),
                "{:?}",
                w.events
            );
        }
        // The peer learns of it (our RST).
        assert!(w.peer.state(tcp).is_err() || w.peer.state(tcp) == Ok(TcpState::Closed));
    }
}

/// Each ending once: a startup that ended in `Rejected` has told its user how the
/// connection ended; an `abort` afterwards (the user freeing the QP, as rdma_cm users do
/// after REJECTED) reports no `Disconnected` on top (it reported `Reset` before).
#[test]
fn abort_after_rejected_reports_no_second_ending() {
    let mut w = world();
    let params = MpaParams {
        peer_to_peer: false,
        ..MpaParams::default()
    };
    let (tcp, request) = w.start(&params);
    let reply = reply_to(&request, false, b"no");
    w.send_octet_by_octet(tcp, &reply);
    w.wait_event(|e| matches!(e, CmEvent::Rejected { .. }).then_some(()));
    w.engine.abort(w.qp).unwrap();
    for _ in 0..200 {
        w.step();
    }
    let endings: Vec<_> = w
        .events
        .iter()
        .filter(|e| {
            matches!(
                e,
                CmEvent::Rejected { .. } | CmEvent::Disconnected { .. } | CmEvent::Error { .. }
            )
        })
        .collect();
    assert_eq!(endings.len(), 1, "{endings:?}");
}

/// MPA-7.1.2-15 (after a valid Reply with R = 0 the initiator parses what follows as
/// FPDUs), MPA-7.1-1 (FPDU mode starts at the octet after the Reply): a responder's first
/// FPDU that arrives in the same TCP segment as its Reply, or split with it at any octet,
/// is deframed from the octet right after the Reply and delivered: the Send lands in the
/// posted receive, byte for byte, and nothing fails.
#[test]
fn mpa_7_1_2_15_an_fpdu_in_the_replys_segment_is_delivered() {
    use warpcore_engine::proto::mpa::framer::{Framer, FramerConfig};
    use warpcore_engine::proto::wire::fpdu;
    use warpcore_engine::WcStatus;
    let payload = b"first fpdu, right behind the reply";
    // A Send, QN 0, MSN 1, MO 0, last (the Send RTR's header plus a payload).
    let mut send = RtrType::Send.ulpdu().to_vec();
    send.extend_from_slice(payload);
    for split in [None, Some(7), Some(20), Some(1)] {
        let mut w = world();
        let region = Arc::new(warpcore_engine::mem::Region::allocate(4096, 4096).unwrap());
        let stag = w
            .mrs
            .register(Arc::clone(&region), common::PD, common::all_access(), 0)
            .unwrap();
        w.engine
            .post_recv(w.qp, common::recv_wr(7, &[(stag, 0, 256)]))
            .unwrap();
        let params = MpaParams {
            peer_to_peer: false,
            ..MpaParams::default()
        };
        let (tcp, request) = w.start(&params);
        let reply = reply_to(&request, true, b"pd");
        let mut framer = Framer::new(FramerConfig {
            markers: false,
            crc: true,
            mulpdu: fpdu::mulpdu(1460, false),
            stream_offset: 0,
        });
        let mut out = vec![0u8; framer.fpdu_wire_len(send.len())];
        let n = framer.emit(&[&send], &mut out).unwrap();
        let mut stream = reply.clone();
        stream.extend_from_slice(&out[..n]);
        match split {
            None => assert_eq!(w.peer.send(tcp, &stream).unwrap(), stream.len()),
            Some(1) => w.send_octet_by_octet(tcp, &stream),
            Some(k) => {
                let at = reply.len() - k;
                assert_eq!(w.peer.send(tcp, &stream[..at]).unwrap(), at);
                w.step();
                w.step();
                assert_eq!(w.peer.send(tcp, &stream[at..]).unwrap(), stream.len() - at);
            }
        }
        let mut got = None;
        for _ in 0..2000 {
            w.step();
            if let Some(c) = w._cq.pop() {
                got = Some(c);
                break;
            }
        }
        let c = got.unwrap_or_else(|| panic!("{split:?}: no completion; {:?}", w.events));
        assert_eq!(
            c.status,
            WcStatus::Success,
            "{split:?}: {c:?} {:?}",
            w.events
        );
        assert_eq!(c.byte_len as usize, payload.len(), "{split:?}");
        let mut placed = vec![0u8; payload.len()];
        region.read_at(0, &mut placed).unwrap();
        assert_eq!(&placed[..], &payload[..], "{split:?}");
        assert!(
            w.events
                .iter()
                .any(|e| matches!(e, CmEvent::Established(_))),
            "{split:?}: {:?}",
            w.events
        );
        assert_eq!(w.engine.qp_state(w.qp).unwrap(), QpState::Rts, "{split:?}");
    }
}

/// MPA2-9.1-8/9 (an initiator without the IRD the responder's ORD needs sends Terminate
/// 2/0/06 and ends the connection), MPA2-9.2-4/13 with MPA2-9.2-10/11 (A not echoed, or no
/// marked RTR type the initiator can send: Terminate 2/0/07): a hostile responder's
/// accepting Reply that fails the enhanced negotiation makes the engine, as initiator,
/// send exactly that Terminate as its first FPDU (no RTR before it, MPA2-5-1), report
/// the typed error with the responder's IRD and ORD (MPA2-9.1-10; before, the error had
/// none and they were dropped), and close.
#[test]
fn mpa2_9_failed_negotiation_after_a_valid_reply_sends_its_terminate() {
    use warpcore_engine::proto::mpa::deframer::{Deframer, DeframerConfig};
    use warpcore_engine::proto::wire::mpa::RtrTypes;
    use warpcore_engine::proto::wire::segment::{RdmapHeader, Segment};
    type Edit = fn(&mut [u8]);
    let cases: [(&str, MpaParams, Edit, NegotiationError, u8); 3] = [
        (
            "responder ORD above our IRD",
            MpaParams::default(),
            // ORD (P+22..23, low 14 bits) 0x1000: far above our IRD of 8.
            |r| {
                let word = u16::from_be_bytes([r[22], r[23]]) & 0xC000 | 0x1000;
                r[22..24].copy_from_slice(&word.to_be_bytes());
            },
            NegotiationError::InsufficientIrd,
            6,
        ),
        (
            "A not echoed",
            MpaParams::default(),
            |r| r[20] &= !0x80,
            NegotiationError::ModelMismatch,
            7,
        ),
        (
            "only the Send RTR marked, Write offered",
            MpaParams {
                rtr_offer: RtrTypes::WRITE,
                ..MpaParams::default()
            },
            // B = 1, C = D = 0.
            |r| {
                r[20] |= 0x40;
                r[22] &= !0xC0;
            },
            NegotiationError::NoMatchingRtr,
            7,
        ),
    ];
    for (name, params, edit, want, code) in cases {
        let mut w = world();
        let (tcp, request) = w.start(&params);
        let mut reply = reply_to(&request, true, b"pd");
        edit(&mut reply);
        assert_eq!(w.peer.send(tcp, &reply).unwrap(), reply.len(), "{name}");
        let mut rx = Vec::new();
        let mut first = None;
        for _ in 0..5000 {
            w.step();
            let _ = w.peer.recv_with(tcp, |data| {
                rx.extend_from_slice(data);
                data.len()
            });
            let mut d = Deframer::new(DeframerConfig {
                markers: false,
                crc: true,
                ..DeframerConfig::default()
            });
            if let Ok((_, Some(u))) = d.poll(&rx) {
                first = Some(u.to_vec());
                break;
            }
        }
        let first = first.unwrap_or_else(|| panic!("{name}: no FPDU; {:?}", w.events));
        let seg = Segment::parse(&first).expect("a DDP segment");
        let RdmapHeader::Terminate(t) = seg.repr.header else {
            panic!("{name}: first FPDU is not a Terminate: {:?}", seg.repr);
        };
        assert_eq!(
            (t.code.layer(), t.code.etype(), t.code.code()),
            (2, 0, code),
            "{name}"
        );
        let got = w.negotiation_failure();
        // MPA2-9.1-10: the responder's IRD and ORD (the Reply's enhanced word, low 14
        // bits each) reach the user with the failure.
        let word = |i: usize| u16::from_be_bytes([reply[i], reply[i + 1]]) & 0x3FFF;
        assert_eq!(got, (want, Some((word(20), word(22)))), "{name}");
        assert!(
            !w.events
                .iter()
                .any(|e| matches!(e, CmEvent::Established(_))),
            "{name}: {:?}",
            w.events
        );
    }
}

/// MPA-7.1.2-27 (mpa-08 §7.1.2 rules 2, 3 and 10): MPA starts once its TCP connection is
/// established, so the wait for the Reply is timed from then, not from `connect`. Here the
/// responder's SYN-ACKs are lost for 1.5 s (more than the 1 s startup timeout): the
/// handshake takes two SYN retransmissions, then the Reply comes at once. The initiator
/// used to count the handshake too and failed with `Negotiation(Timeout)` at 1 s, before
/// its Request had even left; Linux siw arms its MPA timer after `kernel_connect`.
#[test]
fn mpa_7_1_2_27_the_reply_timer_starts_once_tcp_is_established() {
    let mut w = world();
    // The engine knows the peer's MAC first, so its SYN leaves at once.
    let r = w
        .engine
        .resolve_neighbor(ip(1), std::time::Duration::from_secs(1))
        .unwrap();
    w.wait_event(|e| (*e == CmEvent::NeighborResolved(r)).then_some(()));
    w.events.clear();
    let silent = warpcore_engine::tcp::link::Faults {
        loss: 1.0,
        ..Default::default()
    };
    w.peer.device().set_tx_faults(silent).unwrap();
    w.engine
        .connect(
            w.qp,
            (ip(1), PORT),
            &MpaParams::default(),
            b"from the engine",
        )
        .unwrap();
    let started = w.now;
    let mut tcp = None;
    let mut request = Vec::new();
    let mut replied = false;
    for _ in 0..20_000 {
        w.step_by(Duration::from_millis(1));
        if w.now - started >= Duration::from_millis(1_500) {
            w.peer
                .device()
                .set_tx_faults(warpcore_engine::tcp::link::Faults::default())
                .unwrap();
        }
        if tcp.is_none() {
            tcp = w.peer.accept(w.listener).unwrap();
        }
        if let Some(c) = tcp {
            let _ = w.peer.recv_with(c, |d| {
                request.extend_from_slice(d);
                d.len()
            });
            if !replied && request.len() >= 20 {
                let pd_len = u16::from_be_bytes([request[18], request[19]]) as usize;
                if request.len() >= 20 + pd_len {
                    let reply = reply_to(&request, true, b"");
                    assert_eq!(w.peer.send(c, &reply).unwrap(), reply.len());
                    replied = true;
                }
            }
        }
        if w.events.iter().any(|e| {
            matches!(
                e,
                CmEvent::Established(_) | CmEvent::Error { .. } | CmEvent::Rejected { .. }
            )
        }) {
            break;
        }
    }
    assert!(
        matches!(w.events.as_slice(), [CmEvent::Established(_)]),
        "after {}: {:?}",
        w.now - started,
        w.events
    );
    // The handshake did outlast the startup timeout.
    assert!(w.now - started > Duration::from_millis(MPA_TIMEOUT_MS));
}
