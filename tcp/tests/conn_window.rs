//! The send and receive windows of one connection, and the timestamps that keep its
//! segments acceptable to the peer: packetdrill-style scripts (as `conn_script.rs`), one
//! per behaviour, named after the RFC section it holds the connection to. The peer is
//! scripted by hand; nothing else runs.

use smoltcp::socket::tcp::State;
use smoltcp::time::Instant;
use smoltcp::wire::{TcpControl, TcpSeqNumber, TcpTimestampRepr};
use warpcore_tcp::conn::{ConnEvent, Connection};

mod script;
use script::*;

fn send(c: &mut Connection, now: Instant, n: usize) -> Vec<Out> {
    let v: Vec<u8> = (0..n).map(|i| i as u8).collect();
    assert_eq!(c.send(&v), Ok(n));
    drain(c, now)
}

/// RFC 9293 3.10.7.4 fifth check: the send window is an offset from the ACK that carried it.
/// A segment from the peer that advances SND.UNA but fails the SND.WL1 test (a
/// retransmission filling a hole, SEG.SEQ below that of an out-of-order segment taken
/// before) leaves SND.WND as the older segment gave it, relative to an older ACK; taken
/// relative to the new SND.UNA it moves the right edge past what the peer offered, by
/// everything the new ACK covers. Linux's `tcp_may_update_window` takes the window of every
/// ACK that advances SND.UNA (`after(ack, tp->snd_una)`), for this reason.
#[test]
fn rfc9293_3_10_7_4_never_send_past_the_right_edge_the_peer_offered() {
    let mut c = established(cfg(), true);
    // Four segments of ours in flight.
    let out = send(&mut c, ms(2), 4 * 1460);
    assert_eq!(out.len(), 4);
    let una0 = ISS + 1;
    // The peer's data: its second segment arrives first (its first is lost), acknowledging
    // nothing of ours yet, with 8,000 octets of window: right edge una0 + 8,000.
    let mut d2 = data(1000, &[2; 1000], una0);
    d2.window_len = 8000;
    c.handle_segment(ms(3), &d2);
    // The peer's retransmission of its first segment acknowledges our four segments and
    // offers the same right edge (its reader is not reading): 8,000 - 5,840 = 2,160.
    let mut d1 = data(0, &[1; 1000], una0 + 4 * 1460);
    d1.window_len = 8000 - 4 * 1460;
    c.handle_segment(ms(4), &d1);
    let edge = una0 + 8000;
    let out = send(&mut c, ms(4), 20_000);
    assert_within(&out, edge);
}

/// RFC 9293 3.10.7.4: "If the RCV.WND is zero, no segments will be acceptable, but special
/// allowance should be made to accept valid ACKs". A data segment at RCV.NXT while our
/// window is shut (a zero-window probe of the peer: data, carrying the ACK of our data) is
/// dropped whole, its ACK too; Linux's `tcp_sequence` lets SEG.SEQ = RCV.NXT through with a
/// zero window, processes the ACK and drops only the data.
#[test]
fn rfc9293_3_10_7_4_a_shut_receive_window_still_takes_the_ack() {
    // Our 1,000 octets out; the peer fills our window without acknowledging them (its ACK
    // for them is delayed).
    let mut c = shut_with_our_data_out(true);
    // Its zero-window probe: one octet at RCV.NXT, acknowledging our 1,000 octets.
    c.handle_segment(ms(3), &data(4096, &[5], ISS + 1 + 1000));
    assert!(
        c.nothing_in_flight(),
        "the probe's ACK of our data was not taken"
    );
}

/// RFC 9293 3.10.7.4 with a shut receive window: a bare FIN at RCV.NXT takes no buffer
/// space, so it is taken, as Linux's `tcp_data_queue` takes one ("Some stacks are known to
/// send bare FIN packets in a loop even if we send RWIN 0 in our ACK"). Refused, the peer
/// closed and we did not know: its FIN waited for its next retransmission after our window
/// opened (up to the RTO ceiling later), and a peer that had closed its socket gave up
/// retransmitting it meanwhile (Linux's orphan retries), so the close was lost and the
/// connection ended by a RST.
#[test]
fn rfc9293_3_10_7_4_a_bare_fin_is_taken_with_the_window_shut() {
    let mut config = cfg();
    config.rx_buffer = 4096;
    let mut c = established(config, true);
    // The peer fills our window; we read nothing.
    c.handle_segment(ms(2), &data(0, &[5; 2048], ISS + 1));
    c.handle_segment(ms(2), &data(2048, &[5; 2048], ISS + 1));
    let acks = drain(&mut c, ms(2));
    assert_eq!(acks.last().unwrap().window, 0, "{acks:?}");
    events(&mut c);
    // The peer closes: a bare FIN at RCV.NXT.
    c.handle_segment(
        ms(3),
        &seg(TcpControl::Fin, PISS + 1 + 4096, Some(ISS + 1), &[]),
    );
    assert_eq!(c.state(), State::CloseWait);
    assert!(
        events(&mut c).contains(&ConnEvent::PeerClosed),
        "the peer's close not reported"
    );
    // Our ACK covers the FIN, the window still shut.
    let out = drain(&mut c, ms(3));
    let last = out.last().expect("the FIN is acknowledged");
    assert_eq!(last.ack, Some(PISS + 1 + 4096 + 1), "{out:?}");
    assert_eq!(last.window, 0, "{out:?}");
    // A FIN with octets is still refused whole with the window shut: its FIN lies past
    // octets there is no room for.
    let mut config = cfg();
    config.rx_buffer = 4096;
    let mut c = established(config, true);
    c.handle_segment(ms(2), &data(0, &[5; 2048], ISS + 1));
    c.handle_segment(ms(2), &data(2048, &[5; 2048], ISS + 1));
    assert_eq!(drain(&mut c, ms(2)).last().unwrap().window, 0);
    c.handle_segment(
        ms(3),
        &seg(TcpControl::Fin, PISS + 1 + 4096, Some(ISS + 1), &[6]),
    );
    assert_eq!(c.state(), State::Established);
}

/// RFC 9293 3.8.6 ("shrinking the window" is strongly discouraged) and RFC 7323 2.4 /
/// Appendix F: with a window scale in use the right edge we advertise must not move left
/// while we hold it back for receiver SWS avoidance. Linux's `tcp_select_window` rounds the
/// held window up to the scale's granularity (`ALIGN(cur_win, 1 << rcv_wscale)`) for this;
/// rounding it down retracts the edge by up to 2^shift - 1 octets at each ACK.
#[test]
fn rfc7323_2_4_the_advertised_right_edge_never_moves_left() {
    let mut config = cfg();
    config.rx_buffer = 4 << 20; // window scale 7
    let mut c = established(config, false);
    let mut worst: Option<(u64, u64)> = None;
    let mut edge_max = 0u64;
    let mut off = 0usize;
    for i in 0..200u64 {
        let len = 1000 + (i as usize * 37) % 400; // odd sizes, never a multiple of 128
        let payload = vec![1; len];
        let mut s = data(off, &payload, ISS + 1);
        s.timestamp = Some(TcpTimestampRepr {
            tsval: 1 + i as u32,
            tsecr: 0,
        });
        c.handle_segment(ms(2 + i), &s);
        off += len;
        for o in drain(&mut c, ms(2 + i)) {
            let ack = o.ack.unwrap();
            let edge = u64::from((ack - (PISS + 1)) as u32) + (u64::from(o.window) << 7);
            if edge < edge_max && worst.is_none_or(|(_, d)| edge_max - edge > d) {
                worst = Some((i, edge_max - edge));
            }
            edge_max = edge_max.max(edge);
        }
    }
    assert_eq!(worst, None, "(segment, octets the right edge moved left)");
}

/// RFC 9293 3.8.6.1: a peer that keeps its window shut and answers every probe keeps the
/// connection open, probing backed off up to the RTO ceiling, and the data flows once the
/// window opens (regression guard; passes).
#[test]
fn rfc9293_3_8_6_1_an_hour_of_shut_window_answered_then_the_data() {
    let mut c = established(cfg(), true);
    let mut z = seg(TcpControl::None, PISS + 1, Some(ISS + 1), &[]);
    z.window_len = 0;
    c.handle_segment(ms(2), &z);
    assert!(send(&mut c, ms(2), 50_000).is_empty());
    let mut now = ms(2);
    let mut probes = 0u32;
    let mut last_probe = now;
    let mut max_gap = 0i64;
    while now < ms(3_600_000) {
        let Some(t) = c.poll_timeout() else { break };
        now = t.max(now);
        c.handle_timeout(now);
        for o in drain(&mut c, now) {
            assert!(o.payload.len() <= 1, "{o:?}");
            if o.payload.len() == 1 {
                probes += 1;
                max_gap = max_gap.max((now - last_probe).total_millis() as i64);
                last_probe = now;
                c.handle_segment(now, &z);
            }
        }
    }
    assert_eq!(c.state(), State::Established);
    assert!(probes > 50, "{probes}");
    assert!(max_gap <= 60_000, "probe gap {max_gap} ms");
    let mut open = seg(TcpControl::None, PISS + 1, Some(ISS + 1), &[]);
    open.window_len = 0xffff;
    c.handle_segment(now, &open);
    let out = drain(&mut c, now);
    assert_eq!(out[0].seq, ISS + 1);
    assert!(out.len() >= 2, "{out:?}");
}

/// RFC 7323 5.4-5.5: a peer takes TS.Recent as valid for 24 days of idleness ("the
/// timestamp clock frequency in the range 1 ms to 1 sec per tick"; Linux before 6.7:
/// `TCP_PAWS_24DAYS`, the Debian 6.1 kernel of the interop rig). Our TSval ticks in
/// microseconds, half its space in 35.8 minutes, and keep-alive probes (SEG.SEQ =
/// SND.NXT - 1, outside the peer's window) never move the peer's TS.Recent on (it takes
/// TSval only from acceptable segments). After 36 to 72 minutes of idleness every segment
/// we send reads as older than TS.Recent there and is dropped by PAWS until our clock
/// comes round again: the connection stalls and its user timeout ends it.
#[test]
fn rfc7323_5_5_forty_idle_minutes_do_not_make_our_tsval_look_old() {
    let mut c = established(cfg(), false);
    // The last acceptable segment we sent: 100 octets at 2 ms, acknowledged at 3 ms.
    let out = send(&mut c, ms(2), 100);
    let mut last_acceptable = Some(out[0].ts.unwrap().tsval);
    let mut a = seg(TcpControl::None, PISS + 1, Some(ISS + 101), &[]);
    a.timestamp = Some(TcpTimestampRepr {
        tsval: 2,
        tsecr: last_acceptable.unwrap(),
    });
    c.handle_segment(ms(3), &a);
    let mut now = ms(3);
    let mut peer_ts = 3u32;
    let ack_of_keepalive = |ts: u32, ecr: u32| {
        let mut a = seg(TcpControl::None, PISS + 1, Some(ISS + 101), &[]);
        a.timestamp = Some(TcpTimestampRepr {
            tsval: ts,
            tsecr: ecr,
        });
        a
    };
    while now < ms(40 * 60 * 1000) {
        let Some(t) = c.poll_timeout() else { break };
        now = t.max(now);
        c.handle_timeout(now);
        for o in drain(&mut c, now) {
            let ts = o.ts.unwrap().tsval;
            if o.seq == ISS + 101 {
                last_acceptable = Some(ts);
            }
            // The peer answers the keep-alive (with its millisecond clock).
            peer_ts += 10_000;
            c.handle_segment(now, &ack_of_keepalive(peer_ts, ts));
        }
    }
    assert_eq!(c.state(), State::Established);
    let out = send(&mut c, now, 100);
    let ts = out[0].ts.unwrap().tsval;
    let recent = last_acceptable.expect("an acceptable segment");
    // Linux < 6.7's tcp_paws_check: (s32)(ts_recent - rcv_tsval) <= 1, or 24 days passed.
    assert!(
        (recent.wrapping_sub(ts) as i32) <= 1,
        "TSval {ts} after TS.Recent {recent}: older by PAWS arithmetic"
    );
}

/// RFC 9293 3.8.6.2.1 (4): data held back by sender SWS avoidance goes once the override
/// timeout passes. The timer (`window_probe_at`) is cleared by every window update that
/// leaves the window open, the same window again included, so a peer that keeps sending
/// (its data segments carry the same small window) pushes the override back for as long
/// as it sends.
#[test]
fn rfc9293_3_8_6_2_1_the_override_timeout_is_not_restarted_by_each_ack() {
    let mut c = established(cfg(), true); // the SYN-ACK offered 65,535 octets
                                          // The peer's window narrows to 1,000 octets; 5,000 of ours wait.
    let mut w = seg(TcpControl::None, PISS + 1, Some(ISS + 1), &[]);
    w.window_len = 1000;
    c.handle_segment(ms(2), &w);
    assert!(
        send(&mut c, ms(2), 5000).is_empty(),
        "SWS avoidance holds them"
    );
    // The peer sends us a segment every 2 ms, each with the same window.
    let mut sent_at = None;
    let mut now = ms(2);
    for k in 0..100usize {
        let next = ms(4 + 2 * k as u64);
        for (t, o) in run_until(&mut c, now, next) {
            if !o.payload.is_empty() && sent_at.is_none() {
                sent_at = Some(t);
            }
        }
        now = next;
        let mut d = data(k * 100, &[3; 100], ISS + 1);
        d.window_len = 1000;
        c.handle_segment(now, &d);
        for o in drain(&mut c, now) {
            if !o.payload.is_empty() && sent_at.is_none() {
                sent_at = Some(now);
            }
        }
    }
    let rto = c.stats().recovery.rto_us / 1000;
    assert!(
        sent_at.is_some_and(|t| t <= ms(2 + 4 * rto.max(1))),
        "held data sent at {sent_at:?} (RTO {rto} ms)"
    );
}

/// RFC 7323 2.4 with the right edge rounded up (`rfc7323_2_4_the_advertised_right_edge_never_moves_left`):
/// each ACK may move the edge up to 2^shift - 1 octets past the buffer's free space, so a
/// peer sending small segments (20 octets here, an ACK for every 40 against a unit of 32)
/// ratchets it on (bounded at four buffers instead, 5 MiB were queued for a 1 MiB buffer
/// before the window closed). The edge runs ahead of the buffer by a sixteenth of it at most: an application
/// that never reads still sees the window close, its queue holding no more than that.
#[test]
fn rfc7323_2_4_the_right_edge_runs_ahead_of_the_buffer_by_a_sixteenth_at_most() {
    let mut config = cfg();
    config.rx_buffer = 1 << 20; // window scale 5: a unit of 32 octets
    let mut c = established(config, false);
    let mut off = 0usize;
    // The handshake's ACK offered the whole buffer.
    let mut edge = 1usize << 20;
    let mut now = 2;
    while off + 20 <= edge {
        c.handle_segment(ms(now), &stamped(data(off, &[4; 20], ISS + 1)));
        off += 20;
        for o in drain(&mut c, ms(now)) {
            let ack = o.ack.unwrap() - (PISS + 1);
            edge = ack + (usize::from(o.window) << 5);
        }
        now += 1;
    }
    assert!(
        c.recv_queue() <= (1 << 20) + (1 << 16),
        "{} octets queued for a 1 MiB buffer",
        c.recv_queue()
    );
    assert!(
        edge - off < 20,
        "the window never closed: {} octets",
        edge - off
    );
}

/// RFC 9293 3.10.7.4 fifth check: "If SND.UNA =< SEG.ACK =< SND.NXT, the send window
/// should be updated" and "If the ACK is a duplicate (SEG.ACK < SND.UNA), it can be
/// ignored": an older ACK's window is an offset from that older ACK, not from SND.UNA.
/// Taking the window of every ACK that advances SND.UNA moves SND.WL1 back to the
/// retransmission's SEG.SEQ, so a segment the network held back (sent before the
/// retransmission, SEG.SEQ above it, SEG.ACK below SND.UNA) then passes the WL1 test, and
/// its window, put on SND.UNA, moves the right edge past what the peer offered (Linux's
/// `tcp_ack` takes no window from an ACK below SND.UNA either: `old_ack`).
#[test]
fn rfc9293_3_10_7_4_an_old_ack_never_moves_the_right_edge() {
    let mut c = established(cfg(), true);
    let out = send(&mut c, ms(2), 4 * 1460);
    assert_eq!(out.len(), 4);
    let una0 = ISS + 1;
    // The peer's segments in the order it sent them: its first (lost), its second
    // (held back by the network) and third, both acknowledging our first segment with the
    // right edge una0 + 8,000; then the retransmission of its first, acknowledging all
    // four with the same right edge.
    let mut d2 = data(1000, &[2; 1000], una0 + 1460);
    d2.window_len = 8000 - 1460;
    let mut d3 = data(2000, &[3; 1000], una0 + 1460);
    d3.window_len = 8000 - 1460;
    let mut d1 = data(0, &[1; 1000], una0 + 4 * 1460);
    d1.window_len = 8000 - 4 * 1460;
    c.handle_segment(ms(3), &d3);
    c.handle_segment(ms(4), &d1);
    // The second arrives last: in order, its data taken, its ACK older than SND.UNA.
    c.handle_segment(ms(5), &d2);
    let edge = una0 + 8000;
    let out = send(&mut c, ms(5), 20_000);
    assert!(!out.is_empty());
    assert_within(&out, edge);
}

/// Every segment in `out` ends at or before `edge`, the right edge the peer offered.
fn assert_within(out: &[Out], edge: TcpSeqNumber) {
    for o in out {
        let end = o.seq + o.payload.len();
        assert!(
            end <= edge,
            "sent {}..{} past the peer's right edge {}",
            o.seq,
            end,
            edge
        );
    }
}

/// RFC 9293 3.10.7.4: a segment that starts before RCV.NXT and ends past RCV.NXT + RCV.WND
/// overlaps the whole window, yet neither its first nor its last octet lies in it, so the
/// two-part test read literally refuses it, and the new octets it carries with it. The
/// same section has the processing trim what is old ("only the new parts are processed")
/// and what lies past the window ("trimming off any portions that lie outside the
/// window"), and Linux's `tcp_sequence` and BSD's `tcp_input` take any segment that
/// overlaps the window and trim it. Refused whole, a peer that sends its retransmission
/// so (a repacketised or coalesced one covering octets we hold, past a window it overran)
/// gets nothing in until the window opens past its end: an RTO, backed off, each time.
#[test]
fn rfc9293_3_10_7_4_a_segment_spanning_the_window_is_trimmed_not_dropped() {
    let mut config = cfg();
    config.rx_buffer = 4096;
    let mut c = established(config, true);
    // The peer fills our window; the application then reads half of it.
    c.handle_segment(ms(2), &data(0, &[5; 2048], ISS + 1));
    c.handle_segment(ms(2), &data(2048, &[5; 2048], ISS + 1));
    assert_eq!(drain(&mut c, ms(2)).last().unwrap().window, 0);
    let mut buf = [0u8; 2048];
    assert_eq!(c.recv(&mut buf), Ok(2048));
    let upd = drain(&mut c, ms(3));
    assert_eq!(upd.last().unwrap().window, 2048, "{upd:?}");
    // Octets 3,000..7,000: 1,096 held already, 2,048 that fit the window, 856 past it.
    let payload: Vec<u8> = (0..4000u32).map(|i| (i % 251) as u8).collect();
    c.handle_segment(ms(4), &data(3000, &payload, ISS + 1));
    assert_eq!(
        c.recv_queue(),
        4096,
        "the octets within the window were dropped"
    );
    let out = drain(&mut c, ms(4));
    assert_eq!(out.last().unwrap().ack, Some(PISS + 1 + 6144), "{out:?}");
    // Delivered as sent: the old part and the part past the window trimmed off.
    let mut rest = vec![0u8; 4096];
    let mut got = 0;
    while got < rest.len() {
        let n = c.recv(&mut rest[got..]).unwrap();
        assert!(n > 0);
        got += n;
    }
    assert_eq!(&rest[2048..], &payload[1096..1096 + 2048]);
}

/// A connection (`plain`: no options; else SACK and timestamps) whose 1,000 octets went
/// out unacknowledged and whose 4,096-octet receive window the peer then filled: shut.
fn shut_with_our_data_out(plain: bool) -> Connection {
    let mut config = cfg();
    config.rx_buffer = 4096;
    let mut c = established(config, plain);
    assert_eq!(send(&mut c, ms(2), 1000).len(), 1);
    let opts = |s| if plain { s } else { stamped(s) };
    c.handle_segment(ms(2), &opts(data(0, &[5; 2048], ISS + 1)));
    c.handle_segment(ms(2), &opts(data(2048, &[5; 2048], ISS + 1)));
    let acks = drain(&mut c, ms(2));
    assert_eq!(acks.last().unwrap().window, 0, "{acks:?}");
    c
}

/// RFC 9293 3.10.7.4: "If the RCV.WND is zero, no segments will be acceptable, but special
/// allowance should be made to accept valid ACKs". A segment that begins before RCV.NXT and
/// reaches past it while our window is shut (the peer's retransmission of octets we took
/// plus new ones, repacketised) carries the ACK of our data: it was dropped whole, its ACK
/// and window too. Linux's `tcp_sequence` lets it through (it overlaps RCV.NXT), the ACK is
/// processed and `tcp_data_queue` drops the data; it is still answered with an ACK.
#[test]
fn a_shut_window_takes_the_ack_of_a_segment_from_before_rcv_nxt() {
    let mut c = shut_with_our_data_out(true);
    // Its last 1,000 octets again with one new one, acknowledging our 1,000 octets.
    c.handle_segment(ms(3), &data(3096, &[5; 1001], ISS + 1 + 1000));
    assert!(
        c.nothing_in_flight(),
        "the ACK of our data in a segment from before RCV.NXT was not taken"
    );
    // The data is not taken (nothing is readable past the 4,096 octets), and the segment is
    // answered with our ACK at RCV.NXT, window still shut.
    let acks = drain(&mut c, ms(3));
    let last = acks.last().expect("no ACK answered the segment");
    assert_eq!(last.ack, Some(PISS + 1 + 4096), "{acks:?}");
    assert_eq!(last.window, 0, "{acks:?}");
}

/// The segment of `a_shut_window_takes_the_ack_of_a_segment_from_before_rcv_nxt`
/// with SACK in use: its octets before RCV.NXT, received before, are reported in the ACK
/// that answers it as a D-SACK block (RFC 2883 4), as Linux's `tcp_data_queue` does.
#[test]
fn a_shut_window_dsacks_the_old_octets_of_a_segment_from_before_rcv_nxt() {
    let mut c = shut_with_our_data_out(false);
    c.handle_segment(ms(3), &stamped(data(3096, &[5; 1001], ISS + 1 + 1000)));
    assert!(c.nothing_in_flight());
    let acks = drain(&mut c, ms(3));
    let last = acks.last().expect("no ACK answered the segment");
    let base = (PISS + 1).0 as u32;
    assert_eq!(
        last.sack,
        vec![(base.wrapping_add(3096), base.wrapping_add(4096))],
        "{acks:?}"
    );
}

/// RFC 9293 3.8.6.2.2 (RFC 1122 4.2.3.3): a window update goes when the right edge we can
/// offer moves by min(RCV.BUFF / 2, MSS). The edge the peer sees is the one the window
/// field carries: 65,535 units of 2^shift at most, each ACK's window a whole number of
/// units. Without window scaling (a peer whose SYN had no Window Scale option) a 1 MiB
/// buffer read in pieces moves no edge the field can carry once 64 KiB are free; with a
/// shift of 13 (a 256 MiB buffer) a read of one MSS moves it by less than the unit. Each
/// such read drew a pure ACK anyway, the same SEG.ACK and the same window as the last: no
/// update, and to a peer with data in flight a duplicate ACK (RFC 5681 2, all five
/// conditions), three of which are a spurious fast retransmit. Linux's
/// `__tcp_cleanup_rbuf` compares the window `__tcp_select_window` would offer.
#[test]
fn reads_send_no_window_update_the_field_cannot_carry() {
    for (rx_buffer, plain) in [(1 << 20, true), (256 << 20, false)] {
        let mut config = cfg();
        config.rx_buffer = rx_buffer;
        // `plain`: the peer's SYN-ACK has no Window Scale option, so ours is not used.
        let mut c = established(config, plain);
        let stamp = |mut s: smoltcp::wire::TcpRepr<'static>| {
            if !plain {
                s.timestamp = Some(TcpTimestampRepr { tsval: 2, tsecr: 0 });
            }
            s
        };
        // The peer sends 10 segments; each pair is acknowledged at once.
        let payload: &'static [u8] = &[7; 1460];
        let mut off = 0;
        for _ in 0..10 {
            c.handle_segment(ms(2), &stamp(data(off, payload, ISS + 1)));
            off += 1460;
        }
        let out = drain(&mut c, ms(2));
        let mut last = out.last().expect("the data is acknowledged").clone();
        // The application reads it in pieces of an MSS: every ACK that goes moves the
        // window (the data is all acknowledged already), none repeats the last.
        let mut buf = [0u8; 1460];
        for k in 0..10 {
            assert_eq!(c.recv(&mut buf), Ok(1460));
            for o in drain(&mut c, ms(3 + k)) {
                assert!(
                    o.ack != last.ack || o.window != last.window,
                    "buffer {rx_buffer}: read {k} drew an ACK that changes nothing \
                     (a duplicate ACK to the peer): {o:?}"
                );
                last = o;
            }
        }
    }
}

/// RFC 9293 3.8.6 (SHLD-14: the right edge should not be moved left) and RFC 7323 2.4: a
/// receive-window clamp below one unit of the window scale (`rx_window_clamp` 4,096 under
/// a 512 MiB buffer's shift of 14, units of 16,384 octets; the engine's `REQUEST_WINDOW`)
/// offered 4,096 in the SYN-ACK (unscaled, RFC 7323 2.2), then 0 in the ACK of the peer's
/// first 500 octets: the edge moved back from 4,096 to 500, and the window closed with the
/// buffer free. `window_field` rounded the clamp down to whole units, and the SYN-ACK's
/// edge was recorded as that rounding (0), not the 4,096 it carried. Now the held edge
/// rounds up to one unit (Linux's `tcp_select_window`: `ALIGN(cur_win, 1 << wscale)`), the
/// same at a passive and an active open, and the clamp still bounds what the peer parks
/// to the clamp and one unit.
#[test]
fn clamp_below_one_unit_never_shrinks() {
    use warpcore_tcp::conn::ConnConfig;
    let config = ConnConfig {
        rx_buffer: 512 << 20,
        rx_window_clamp: Some(4096),
        ..cfg()
    };
    let unit = 1u64 << 14;
    // Passive: the SYN-ACK offers the clamp, unscaled, with our shift of 14.
    let mut syn = seg(TcpControl::Syn, PISS, None, &[]);
    syn.max_seg_size = Some(1460);
    syn.window_scale = Some(7);
    let mut c = Connection::accept(&config, ep(), ISS, &syn, ms(0));
    let sa = drain(&mut c, ms(0));
    assert_eq!(sa[0].control, TcpControl::Syn);
    assert_eq!(sa[0].ws, Some(14));
    assert_eq!(sa[0].window, 4096, "the SYN-ACK offers the clamp");
    c.handle_segment(ms(1), &seg(TcpControl::None, PISS + 1, Some(ISS + 1), &[]));
    assert_eq!(c.state(), State::Established);
    c.handle_segment(ms(2), &data(0, &[1; 500], ISS + 1));
    assert_eq!(c.recv_queue(), 500);
    let acks = drain(&mut c, ms(2));
    let last = acks.last().expect("an ACK of the 500 octets");
    assert_eq!(last.ack, Some(PISS + 1 + 500));
    let edge = 500 + (u64::from(last.window) << 14);
    assert!(
        edge >= 4096,
        "the right edge moved left from 4,096 to {edge}"
    );
    // The peer sends on, unread: the queue passes the clamp (then the window is offered
    // shut and the edge moves back by less than a unit, RFC 7323 2.4, the rest refused)
    // and stays within the clamp and one unit.
    let payload = [2u8; 1000];
    let mut off = 500;
    let mut last_window = None;
    while off + 1000 <= 4096 + unit as usize {
        c.handle_segment(ms(3), &data(off, &payload, ISS + 1));
        off += 1000;
        if let Some(o) = drain(&mut c, ms(3)).last() {
            last_window = Some(o.window);
        }
    }
    assert!(c.recv_queue() >= 4096, "{}", c.recv_queue());
    assert!(c.recv_queue() <= 4096 + unit as usize, "{}", c.recv_queue());
    assert_eq!(
        last_window,
        Some(0),
        "past the clamp the window is offered shut"
    );
    // Once the application reads it all, the clamp's 4,096 octets are free again (less
    // than one unit, more than the step): a window update reopens it by one unit, not
    // the zero that rounding the free space down gave for as long as the clamp held.
    let mut buf = vec![0u8; 4096 + unit as usize];
    let queued = c.recv_queue();
    assert_eq!(c.recv(&mut buf), Ok(queued));
    let update = drain(&mut c, ms(5));
    let last = update
        .last()
        .expect("a window update once the queue is read");
    assert_eq!(last.window, 1, "the window reopens by one unit: {update:?}");

    // Active: our SYN offers the clamp unscaled; the ACK of the SYN-ACK keeps that edge.
    let mut c = Connection::connect(&config, ep(), ISS, ms(0));
    let s = drain(&mut c, ms(0));
    assert_eq!(s[0].window, 4096);
    let mut sa = seg(TcpControl::Syn, PISS, Some(ISS + 1), &[]);
    sa.max_seg_size = Some(1460);
    sa.window_scale = Some(7);
    c.handle_segment(ms(1), &sa);
    assert_eq!(c.state(), State::Established);
    let ack = drain(&mut c, ms(1));
    let edge = u64::from(ack.last().expect("the ACK").window) << 14;
    assert!(
        edge >= 4096,
        "the right edge moved left from 4,096 to {edge}"
    );
}

/// RFC 9293 3.8.6.2.2 (receiver SWS avoidance: the window grows by min(Fr * RCV.BUFF, MSS),
/// Fr = 1/2) with the smallest buffer the tuning accepts, one octet (`TcpTuning::check`:
/// "at least one octet"). The step came to 0 (half of one octet, rounded down), and the
/// tests of the free space against it (`free >= step`) held with the buffer full: the
/// window shut by the peer's octet was reopened at once by one unit (one octet without a
/// window scale) past the full buffer, and the peer's next octet was queued beside the
/// first, two octets in a one-octet buffer. The step is at least one octet: a full
/// one-octet buffer offers a shut window, and reopens once it is read.
#[test]
fn a_one_octet_buffer_offers_no_window_when_full() {
    use warpcore_tcp::conn::ConnConfig;
    let config = ConnConfig {
        rx_buffer: 1,
        ..cfg()
    };
    let mut c = established(config, true);
    c.handle_segment(ms(2), &data(0, &[1], ISS + 1));
    assert_eq!(c.recv_queue(), 1);
    let acks = drain(&mut c, ms(2));
    let last = acks.last().expect("the ACK of the octet");
    assert_eq!(last.ack, Some(PISS + 2));
    assert_eq!(last.window, 0, "a full buffer offers no window: {acks:?}");
    // The peer's next octet (a probe, or a sender trusting a window offered) is refused.
    c.handle_segment(ms(3), &data(1, &[2], ISS + 1));
    assert_eq!(c.recv_queue(), 1, "two octets queued in a one-octet buffer");
    for o in drain(&mut c, ms(3)) {
        assert_eq!(o.window, 0, "{o:?}");
    }
    // Read, the octet frees the buffer: the window reopens.
    let mut buf = [0u8; 4];
    assert_eq!(c.recv(&mut buf), Ok(1));
    let update = drain(&mut c, ms(4));
    assert_eq!(
        update.last().map(|o| o.window),
        Some(1),
        "the window reopens once read: {update:?}"
    );
}
