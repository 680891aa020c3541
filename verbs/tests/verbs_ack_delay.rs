//! The engine's delayed ACK (`EngineConfig::tcp.ack_delay`, `ENGINE_ACK_DELAY`): in a
//! request/response exchange the answer carries the ACK of its request, so each side sends
//! one TCP segment per message instead of a pure ACK and then the answer; a lone segment
//! nobody answers is still acknowledged (its Write, sent from registered memory, completes);
//! and a delay beyond what our peers' probe timeout allows is refused.

mod common;

use std::time::{Duration, Instant};

use warpcore_verbs::*;

const T: Duration = Duration::from_secs(10);

struct Pair {
    client: Context,
    server: Context,
    cqp: QueuePair,
    ccq: CompletionQueue,
    cmr: MemoryRegion,
    sqp: QueuePair,
    smr: MemoryRegion,
    scq: CompletionQueue,
}

impl Pair {
    /// Two caller-driven engines over the in-memory link, one connected QP each: this
    /// thread runs both cores, so an answer is posted a loop or two after its request lands.
    fn connect(port: u16) -> Pair {
        let (server, client) = common::caller_contexts(&LinkConfig::default());
        let remote = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
        let spd = server.alloc_pd();
        let scq = server.create_cq(256).unwrap();
        let smr = spd.alloc_mr(1 << 16, remote).unwrap();
        let sqp = spd.create_qp(&QpInit::new(&scq, &scq)).unwrap();
        let cpd = client.alloc_pd();
        let ccq = client.create_cq(256).unwrap();
        let cmr = cpd.alloc_mr(1 << 16, remote).unwrap();
        let cqp = cpd.create_qp(&QpInit::new(&ccq, &ccq)).unwrap();
        common::connect_accept_driven(&server, &sqp, &client, &cqp, port);
        Pair {
            client,
            server,
            cqp,
            ccq,
            cmr,
            sqp,
            smr,
            scq,
        }
    }

    fn both(&self) {
        self.client.progress();
        self.server.progress();
    }

    /// TCP segments each side has sent so far.
    fn segments(&self) -> (u64, u64) {
        let sent = |c: &Context| {
            c.stats()
                .unwrap()
                .iter()
                .map(|s| s.tcp_segments_sent)
                .sum::<u64>()
        };
        (sent(&self.client), sent(&self.server))
    }
}

/// Writes `len` octets staged at offset `len` of `from` to offset 0 of `to`, the last
/// octet being `tag`.
fn write(qp: &QueuePair, from: &MemoryRegion, to: &MemoryRegion, len: u32, tag: u8, id: u64) {
    from.write(2 * len as usize - 1, &[tag]).unwrap();
    let op = SendOp::Write {
        remote_stag: to.stag(),
        remote_to: 0,
    };
    let wr = SendWr::new(id, op, &[from.sge(u64::from(len), len)]).unwrap();
    qp.post_send(&wr).unwrap();
}

fn arrived(mr: &MemoryRegion, len: u32, tag: u8) -> bool {
    let mut b = [0u8; 1];
    mr.read(len as usize - 1, &mut b).unwrap();
    b[0] == tag
}

#[test]
fn an_answer_carries_the_ack_of_its_request() {
    let p = Pair::connect(9300);
    let rounds = 400u64;
    let (c0, s0) = p.segments();
    for i in 0..rounds {
        let tag = (i % 250) as u8 + 1;
        write(&p.cqp, &p.cmr, &p.smr, 64, tag, i);
        let t0 = Instant::now();
        while !arrived(&p.smr, 64, tag) {
            assert!(t0.elapsed() < T, "request {i} never arrived");
            p.both();
        }
        write(&p.sqp, &p.smr, &p.cmr, 64, tag, i);
        while !arrived(&p.cmr, 64, tag) {
            assert!(t0.elapsed() < T, "answer {i} never arrived");
            p.both();
        }
        while p.ccq.poll_one().is_some() || p.scq.poll_one().is_some() {}
    }
    let (c1, s1) = p.segments();
    let (c, s) = (c1 - c0, s1 - s0);
    // One segment per message when the answer rides on the ACK; two (data, then a pure
    // ACK for the other side's message) when every received segment is acknowledged at
    // once. A thread descheduled for more than the delay sends a pure ACK now and then:
    // allow a quarter of the rounds for that.
    let most = rounds + rounds / 4;
    assert!(
        c <= most && s <= most,
        "{rounds} round trips took {c} client and {s} server segments (at most {most} each)"
    );
    assert!(c >= rounds && s >= rounds);
}

#[test]
fn a_lone_segment_nobody_answers_is_acknowledged() {
    let p = Pair::connect(9301);
    // 1,000 octets: sent from registered memory (EngineConfig::tx_from_memory_min, 512), so
    // the Write completes only once TCP has its ACK, which nothing rides on here.
    let len = 1000u32;
    // The sender's probe timeout is at least 1 ms (RecoveryConfig::max_ack_delay added to
    // 2 SRTT with one segment in flight, RFC 8985 7.2); the held ACK leaves 20 us after the
    // segment lands. While this thread turns the loop at least every STALL, the segment
    // lands, its ACK leaves and the sender reads it within 3 STALL + 20 us of the send, well
    // before any probe. A Write during which this thread was descheduled longer (a busy CI
    // machine) proves nothing either way: it is not counted, and a probe in it is allowed.
    const STALL: Duration = Duration::from_micros(200);
    let want = 20u32;
    let (mut clean, mut stalled) = (0u32, 0u32);
    let deadline = Instant::now() + Duration::from_secs(60);
    let probes_and_retransmits = || {
        let stats = p.client.stats().unwrap();
        let r: u64 = stats.iter().map(|s| s.tcp_retransmitted_segments).sum();
        let t: u64 = stats.iter().map(|s| s.tcp_tail_loss_probes).sum();
        (r, t)
    };
    let mut i = 0u64;
    while clean < want {
        assert!(
            Instant::now() < deadline,
            "only {clean} of {want} Writes ran without this thread stalling over {STALL:?} \
             ({stalled} stalled): the machine is too busy for this test"
        );
        let before = probes_and_retransmits();
        let tag = (i % 250) as u8 + 1;
        write(&p.cqp, &p.cmr, &p.smr, len, tag, i);
        let t0 = Instant::now();
        let mut last = t0;
        let mut longest = Duration::ZERO;
        let wc = loop {
            let now = Instant::now();
            longest = longest.max(now - last);
            last = now;
            assert!(
                now - t0 < Duration::from_secs(2),
                "Write {i} never completed"
            );
            p.both();
            if let Some(wc) = p.ccq.poll_one() {
                break wc;
            }
        };
        longest = longest.max(last.elapsed());
        assert_eq!((wc.wr_id, wc.status), (i, WcStatus::Success));
        assert!(arrived(&p.smr, len, tag));
        if longest < STALL {
            clean += 1;
            assert_eq!(
                probes_and_retransmits(),
                before,
                "Write {i}: a delayed ACK must come before the sender's probe or \
                 retransmission (retransmitted, probes); the loop never stalled over {STALL:?}"
            );
        } else {
            stalled += 1;
        }
        i += 1;
    }
}

#[test]
fn an_ack_delay_beyond_our_peers_allowance_is_refused() {
    let mut cfg = EngineConfig::default();
    assert_eq!(cfg.tcp.ack_delay, Some(ENGINE_ACK_DELAY));
    assert!(cfg.validate().is_ok());
    cfg.tcp.ack_delay = Some(MAX_ACK_DELAY);
    assert!(cfg.validate().is_ok());
    cfg.tcp.ack_delay = Some(MAX_ACK_DELAY + MAX_ACK_DELAY);
    assert_eq!(cfg.validate().unwrap_err().field, "tcp.ack_delay");
    cfg.tcp.ack_delay = None;
    assert!(cfg.validate().is_ok());
}
