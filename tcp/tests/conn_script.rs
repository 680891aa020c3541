//! Packetdrill-style scripts for one connection (issue 11 item 1): segments in at given
//! instants, the segments, timers and events that must come out. One test per behaviour,
//! named after it, citing the RFC section. The peer is scripted by hand; nothing else runs.

use smoltcp::socket::tcp::State;
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{TcpControl, TcpRepr, TcpSeqNumber, TcpTimestampRepr};
use warpcore_tcp::conn::{ConnConfig, ConnEvent, Connection, Endpoints};
use warpcore_tcp::recovery::RecoveryConfig;

mod script;
use script::*;

#[test]
fn rfc9293_3_5_active_open_offers_mss_window_scale_sack_and_timestamps() {
    let mut c = Connection::connect(&cfg(), ep(), ISS, ms(0));
    assert_eq!(c.state(), State::SynSent);
    let out = drain(&mut c, ms(0));
    assert_eq!(out.len(), 1);
    let syn = &out[0];
    assert_eq!(syn.control, TcpControl::Syn);
    assert_eq!(syn.seq, ISS);
    assert_eq!(syn.ack, None);
    assert_eq!(syn.mss, Some(1460)); // RFC 9293 3.7.1
    assert_eq!(syn.ws, Some(1)); // RFC 7323 2.2: 64 KiB buffer -> shift 1
    assert!(syn.sack_permitted); // RFC 2018 2
    assert!(syn.ts.is_some_and(|t| t.tsecr == 0)); // RFC 7323 3.2
                                                   // The SYN's window is never scaled (RFC 7323 2.2).
    assert_eq!(syn.window, 0xffff);
    let c = established(cfg(), false);
    assert_eq!(c.state(), State::Established);
}

#[test]
fn rfc9293_3_10_7_2_passive_open_answers_only_the_options_offered() {
    let mut syn = seg(TcpControl::Syn, PISS, None, &[]);
    syn.max_seg_size = Some(1200);
    let mut c = Connection::accept(&cfg(), ep(), ISS, &syn, ms(0));
    assert_eq!(c.state(), State::SynReceived);
    let out = drain(&mut c, ms(0));
    assert_eq!(out.len(), 1);
    let sa = &out[0];
    assert_eq!(sa.control, TcpControl::Syn);
    assert_eq!(sa.ack, Some(PISS + 1));
    assert_eq!(sa.mss, Some(1460));
    // Not offered by the peer, so not answered (RFC 7323 2.2, 3.2; RFC 2018 2).
    assert_eq!(sa.ws, None);
    assert!(!sa.sack_permitted);
    assert!(sa.ts.is_none());
    // The handshake completes with the peer's ACK.
    c.handle_segment(ms(1), &seg(TcpControl::None, PISS + 1, Some(ISS + 1), &[]));
    assert_eq!(c.state(), State::Established);
    assert_eq!(events(&mut c), vec![ConnEvent::Connected]);
    // The peer's MSS bounds ours.
    c.send(&[7u8; 5000]).unwrap();
    let out = drain(&mut c, ms(1));
    assert!(out.iter().all(|o| o.payload.len() <= 1200), "{out:?}");
}

#[test]
fn rfc6298_2_1_and_5_5_syn_retransmitted_after_one_second_then_backed_off() {
    let mut c = Connection::connect(&cfg(), ep(), ISS, ms(0));
    drain(&mut c, ms(0));
    let out = run_until(&mut c, ms(0), ms(3500));
    let syns: Vec<Instant> = out
        .iter()
        .filter(|(_, o)| o.control == TcpControl::Syn)
        .map(|(t, _)| *t)
        .collect();
    assert_eq!(syns, vec![ms(1000), ms(3000)], "{out:?}");
}

#[test]
fn rfc5961_3_2_in_window_rst_draws_a_challenge_ack_exact_rst_resets() {
    let mut c = established(cfg(), true);
    c.handle_segment(ms(2), &seg(TcpControl::Rst, PISS + 100, None, &[]));
    assert_eq!(c.state(), State::Established);
    let out = drain(&mut c, ms(2));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].ack, Some(PISS + 1), "challenge ACK");
    // A RST outside the window is dropped silently.
    c.handle_segment(ms(3), &seg(TcpControl::Rst, PISS + 10_000_000, None, &[]));
    assert!(drain(&mut c, ms(3)).is_empty());
    // RST at exactly RCV.NXT resets.
    c.handle_segment(ms(4), &seg(TcpControl::Rst, PISS + 1, None, &[]));
    assert_eq!(c.state(), State::Closed);
    assert_eq!(events(&mut c), vec![ConnEvent::Reset]);
}

#[test]
fn rfc5961_4_2_syn_in_a_synchronized_state_draws_a_challenge_ack() {
    let mut c = established(cfg(), true);
    c.handle_segment(ms(2), &seg(TcpControl::Syn, PISS + 5, None, &[]));
    assert_eq!(c.state(), State::Established);
    let out = drain(&mut c, ms(2));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].control, TcpControl::None);
    assert_eq!(out[0].ack, Some(PISS + 1));
}

#[test]
fn rfc5961_5_2_ack_of_data_never_sent_is_dropped_and_answered() {
    let mut c = established(cfg(), true);
    c.handle_segment(ms(2), &data(0, b"abc", ISS + 1 + 100_000));
    // Dropped: the data is not taken.
    assert_eq!(c.recv_queue(), 0);
    let out = drain(&mut c, ms(2));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].ack, Some(PISS + 1));
}

#[test]
fn rfc7323_5_3_paws_drops_a_segment_with_an_old_timestamp() {
    let mut c = established(cfg(), false);
    let mut s = data(0, b"new", ISS + 1);
    s.timestamp = Some(TcpTimestampRepr {
        tsval: 100,
        tsecr: 0,
    });
    c.handle_segment(ms(2), &s);
    assert_eq!(c.recv_queue(), 3);
    drain(&mut c, ms(2));
    let mut old = data(3, b"old", ISS + 1);
    old.timestamp = Some(TcpTimestampRepr {
        tsval: 50,
        tsecr: 0,
    });
    c.handle_segment(ms(3), &old);
    assert_eq!(c.recv_queue(), 3, "the old segment was dropped");
    assert_eq!(c.stats().paws_dropped, 1);
    let out = drain(&mut c, ms(3));
    assert_eq!(out.len(), 1, "an ACK answers it");
    // Our ACKs echo TS.Recent: here the in-order segment's, acknowledged before the old
    // one arrived (RFC 7323 4.3).
    assert_eq!(out[0].ts.map(|t| t.tsecr), Some(100));
}

#[test]
fn rfc7323_3_2_a_segment_without_timestamps_is_dropped_once_they_are_negotiated() {
    let mut c = established(cfg(), false);
    c.handle_segment(ms(2), &data(0, b"bare", ISS + 1));
    assert_eq!(c.recv_queue(), 0, "the segment without TSopt was taken");
    assert_eq!(c.stats().ts_missing_dropped, 1);
    assert!(
        drain(&mut c, ms(2)).is_empty(),
        "dropped silently: nothing answers it"
    );
    // The same octets with the option are taken.
    c.handle_segment(ms(3), &stamped(data(0, b"bare", ISS + 1)));
    assert_eq!(c.recv_queue(), 4);
    // Where timestamps were not negotiated, a segment without them is normal.
    let mut plain = established(cfg(), true);
    plain.handle_segment(ms(2), &data(0, b"bare", ISS + 1));
    assert_eq!(plain.recv_queue(), 4);
    assert_eq!(plain.stats().ts_missing_dropped, 0);
    // A RST is processed without further validation: it needs no timestamp.
    c.handle_segment(ms(4), &seg(TcpControl::Rst, PISS + 5, None, &[]));
    assert_eq!(c.state(), State::Closed);
}

/// RFC 7323 4.3 (2) and case (A): TS.Recent takes a segment's TSval only if SEG.SEQ <=
/// Last.ACK.sent, so an ACK that covers two segments (the second-segment rule) echoes the
/// first's and the peer's RTT sample includes the time the ACK waited. On both receive
/// paths: the second segment is one header prediction takes.
#[test]
fn rfc7323_4_3_an_ack_of_two_segments_echoes_the_earlier_tsval() {
    for general in [true, false] {
        warpcore_tcp::conn::set_general_paths_only(general);
        let mut config = cfg();
        config.ack_delay = Some(Duration::from_millis(10));
        let mut c = established(config, false);
        let predicted = warpcore_tcp::conn::predicted_segments();
        let mut a = data(0, &[1; 1000], ISS + 1);
        a.timestamp = Some(TcpTimestampRepr {
            tsval: 100,
            tsecr: 0,
        });
        c.handle_segment(ms(2), &a);
        assert!(
            drain(&mut c, ms(2)).is_empty(),
            "first segment: ACK delayed"
        );
        let mut b = data(1000, &[2; 1000], ISS + 1);
        b.timestamp = Some(TcpTimestampRepr {
            tsval: 200,
            tsecr: 0,
        });
        c.handle_segment(ms(3), &b);
        let out = drain(&mut c, ms(3));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].ack, Some(PISS + 1 + 2000));
        assert_eq!(
            out[0].ts.map(|t| t.tsecr),
            Some(100),
            "general paths only: {general}"
        );
        // The next segment after that ACK updates TS.Recent again.
        let mut d = data(2000, &[3; 1000], ISS + 1);
        d.timestamp = Some(TcpTimestampRepr {
            tsval: 300,
            tsecr: 0,
        });
        c.handle_segment(ms(4), &d);
        c.handle_timeout(ms(14));
        let out = drain(&mut c, ms(14));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].ts.map(|t| t.tsecr), Some(300));
        let took = warpcore_tcp::conn::predicted_segments() - predicted;
        assert_eq!(took > 0, !general, "the fast path took {took} segments");
    }
    warpcore_tcp::conn::set_general_paths_only(false);
}

#[test]
fn rfc1122_4_2_3_2_delayed_ack_at_the_timeout_or_every_second_segment() {
    let mut config = cfg();
    config.ack_delay = Some(Duration::from_millis(10));
    let mut c = established(config, true);
    c.handle_segment(ms(2), &data(0, &[1; 1000], ISS + 1));
    assert!(
        drain(&mut c, ms(2)).is_empty(),
        "first segment: ACK delayed"
    );
    assert_eq!(c.poll_timeout(), Some(ms(12)));
    c.handle_timeout(ms(12));
    let out = drain(&mut c, ms(12));
    assert_eq!(out[0].ack, Some(PISS + 1 + 1000));
    // Two segments: the second is acknowledged at once.
    c.handle_segment(ms(20), &data(1000, &[2; 1000], ISS + 1));
    assert!(drain(&mut c, ms(20)).is_empty());
    c.handle_segment(ms(21), &data(2000, &[3; 1000], ISS + 1));
    let out = drain(&mut c, ms(21));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].ack, Some(PISS + 1 + 3000));
}

#[test]
fn rfc5681_4_2_and_rfc2018_4_out_of_order_data_is_acked_at_once_with_sack_blocks() {
    let mut config = cfg();
    config.ack_delay = Some(Duration::from_millis(10));
    let mut c = established(config, false);
    c.handle_segment(ms(2), &stamped(data(1000, &[2; 500], ISS + 1)));
    c.handle_segment(ms(2), &stamped(data(3000, &[4; 500], ISS + 1)));
    let out = drain(&mut c, ms(2));
    assert_eq!(out.len(), 1);
    let base = (PISS.0 as u32).wrapping_add(1);
    assert_eq!(out[0].ack, Some(PISS + 1));
    // The most recent block first (RFC 2018 4).
    assert_eq!(
        out[0].sack,
        vec![(base + 3000, base + 3500), (base + 1000, base + 1500)]
    );
    assert_eq!(c.recv_queue(), 0);
    // The gap filled: everything up to the next hole, ACKed at once.
    c.handle_segment(ms(3), &stamped(data(0, &[1; 1000], ISS + 1)));
    let out = drain(&mut c, ms(3));
    assert_eq!(out[0].ack, Some(PISS + 1 + 1500));
    assert_eq!(out[0].sack, vec![(base + 3000, base + 3500)]);
    assert_eq!(c.recv_queue(), 1500);
    let mut buf = vec![0; 2000];
    assert_eq!(c.recv(&mut buf), Ok(1500));
    assert!(buf[..1000].iter().all(|&b| b == 1) && buf[1000..1500].iter().all(|&b| b == 2));
}

/// Sends `n` octets and returns the segments that left at `now`.
fn send(c: &mut Connection, now: Instant, n: usize) -> Vec<Out> {
    let v: Vec<u8> = (0..n).map(|i| i as u8).collect();
    assert_eq!(c.send(&v), Ok(n));
    drain(c, now)
}

#[test]
fn rfc6928_initial_window_is_ten_segments() {
    let mut c = established(cfg(), true);
    let out = send(&mut c, ms(2), 100_000);
    let total: usize = out.iter().map(|o| o.payload.len()).sum();
    assert_eq!(out.len(), 10);
    assert_eq!(total, 10 * 1460);
}

#[test]
fn rfc8985_7_tail_loss_is_probed_after_about_two_rtts_not_an_rto() {
    let mut c = established(cfg(), true);
    // An RTT sample of 1 ms from the handshake (SYN at 0, SYN-ACK at 1 ms).
    let out = send(&mut c, ms(2), 1000);
    assert_eq!(out.len(), 1);
    // The segment is lost: nothing comes back. The probe fires at 2 SRTT + the peer's ACK
    // delay with one segment in flight (RFC 8985 7.2): 2 ms + 1 ms, well before the 5 ms
    // RTO floor.
    let later = run_until(&mut c, ms(2), ms(4));
    assert!(later.is_empty(), "{later:?}");
    let later = run_until(&mut c, ms(2), ms(6));
    assert_eq!(later.len(), 1, "{later:?}");
    let (t, probe) = &later[0];
    assert_eq!(*t, ms(5));
    assert_eq!(probe.seq, ISS + 1);
    assert_eq!(probe.payload.len(), 1000, "the last segment again");
    assert_eq!(c.stats().recovery.tlp_count, 1);
    assert_eq!(c.stats().recovery.rto_count, 0);
}

#[test]
fn rfc8985_6_2_rack_marks_the_hole_lost_once_later_data_is_sacked() {
    let mut c = established(cfg(), false);
    let out = send(&mut c, ms(2), 4 * 1448);
    assert_eq!(out.len(), 4);
    let base = ISS.0 as u32 + 1;
    // Segment 1 lost; 2..4 SACKed at 3 ms (RTT 1 ms).
    let mut a = stamped(seg(TcpControl::None, PISS + 1, Some(ISS + 1), &[]));
    a.sack_ranges = [Some((base + 1448, base + 4 * 1448)), None, None];
    c.handle_segment(ms(3), &a);
    // RACK: segment 1 was sent before the delivered ones; after RTT + reo_wnd (min RTT / 4)
    // from its transmission it is lost and retransmitted.
    let out = run_until(&mut c, ms(3), ms(4));
    let retx: Vec<_> = out.iter().filter(|(_, o)| o.seq == ISS + 1).collect();
    assert_eq!(retx.len(), 1, "{out:?}");
    assert!(retx[0].0 <= ms(4), "retransmitted at {}", retx[0].0);
    assert_eq!(retx[0].1.payload.len(), 1448);
    assert_eq!(c.stats().recovery.fast_recoveries, 1);
    assert_eq!(c.stats().recovery.rto_count, 0);
}

#[test]
fn rfc6298_2_4_and_5_5_rto_has_a_floor_and_backs_off() {
    let mut config = cfg();
    config.recovery = RecoveryConfig {
        rack_tlp: false,
        ..RecoveryConfig::default()
    };
    let mut c = established(config, true);
    send(&mut c, ms(2), 1000);
    let out = run_until(&mut c, ms(2), ms(50));
    let times: Vec<Instant> = out.iter().map(|(t, _)| *t).collect();
    // RTT 1 ms: RTO = 1 + max(4 * 0.5, 5 ms floor) = 6 ms (the floor is the least margin
    // above SRTT, as Linux's), then 12, 24 (doubling).
    assert_eq!(times, vec![ms(8), ms(20), ms(44)], "{out:?}");
    assert_eq!(c.stats().recovery.rto_count, 3);
}

#[test]
fn rfc5681_3_2_and_rfc6582_three_dupacks_then_partial_acks_without_sack() {
    let mut config = cfg();
    config.recovery = RecoveryConfig {
        rack_tlp: false,
        ..RecoveryConfig::default()
    };
    let mut c = established(config, true);
    let out = send(&mut c, ms(2), 6 * 1460);
    assert_eq!(out.len(), 6);
    // Segments 1 and 3 lost: three duplicate ACKs for segment 1.
    for _ in 0..3 {
        c.handle_segment(ms(3), &seg(TcpControl::None, PISS + 1, Some(ISS + 1), &[]));
    }
    let out = drain(&mut c, ms(3));
    assert_eq!(
        out.first().map(|o| o.seq),
        Some(ISS + 1),
        "fast retransmit: {out:?}"
    );
    // A partial ACK (up to the second hole) retransmits the next hole at once (RFC 6582 3.2).
    c.handle_segment(
        ms(4),
        &seg(TcpControl::None, PISS + 1, Some(ISS + 1 + 2 * 1460), &[]),
    );
    let out = drain(&mut c, ms(4));
    assert_eq!(
        out.first().map(|o| o.seq),
        Some(ISS + 1 + 2 * 1460),
        "{out:?}"
    );
    assert_eq!(c.stats().recovery.rto_count, 0);
}

#[test]
fn rfc9293_3_8_6_1_zero_window_is_probed_and_data_flows_when_it_opens() {
    let mut c = established(cfg(), true);
    // The peer's window closes.
    let mut z = seg(TcpControl::None, PISS + 1, Some(ISS + 1), &[]);
    z.window_len = 0;
    c.handle_segment(ms(2), &z);
    assert!(
        send(&mut c, ms(2), 3000).is_empty(),
        "nothing fits a zero window"
    );
    let out = run_until(&mut c, ms(2), ms(20));
    assert!(!out.is_empty(), "a window probe went out");
    assert_eq!(out[0].1.payload.len(), 1, "one octet probes the window");
    assert!(c.stats().window_probes >= 1);
    // The window opens: the rest follows.
    let mut open = seg(TcpControl::None, PISS + 1, Some(ISS + 1 + 1), &[]);
    open.window_len = 0xffff;
    c.handle_segment(ms(21), &open);
    let out = drain(&mut c, ms(21));
    // The probe's timeouts were no congestion signal (the shut window could take nothing):
    // the initial window of ten segments still holds, and the rest goes at once.
    let total: usize = out.iter().map(|o| o.payload.len()).sum();
    assert_eq!(total, 2999, "{out:?}");
    assert_eq!(out[0].seq, ISS + 2);
    assert_eq!(c.stats().recovery.rto_count, 0);
}

/// RFC 9293 3.8.6.1 and RFC 1122 4.2.2.17: a zero window probed for a long time, answered
/// or not, leaves the congestion window as it was: a probe's timeout is no loss.
#[test]
fn rfc9293_3_8_6_1_probing_a_shut_window_leaves_the_congestion_window_alone() {
    let mut c = established(cfg(), true);
    let cwnd = c.stats().recovery.cwnd;
    assert_eq!(cwnd, 10 * 1460);
    let mut z = seg(TcpControl::None, PISS + 1, Some(ISS + 1), &[]);
    z.window_len = 0;
    c.handle_segment(ms(2), &z);
    assert!(send(&mut c, ms(2), 20 * 1460).is_empty());
    // Ten seconds of probing; the peer answers every other probe with its shut window.
    let mut now = ms(2);
    let mut probes = 0;
    while now < ms(10_000) {
        let Some(t) = c.poll_timeout() else { break };
        now = t.max(now);
        c.handle_timeout(now);
        for o in drain(&mut c, now) {
            assert!(o.payload.len() <= 1, "only the probe octet: {o:?}");
            if o.payload.len() == 1 {
                probes += 1;
                if probes % 2 == 0 {
                    c.handle_segment(now, &z);
                }
            }
        }
    }
    assert!(probes >= 5, "{probes} probes");
    let s = c.stats().recovery;
    assert_eq!(s.rto_count, 0, "{s:?}");
    assert!(s.window_probe_timeouts >= 4, "{s:?}");
    assert_eq!(s.cwnd, cwnd, "{s:?}");
    assert_eq!(s.ssthresh, u64::MAX, "{s:?}");
    assert_eq!(c.state(), State::Established);
    // The window opens: a whole initial window goes at once (the probe's octet again
    // first, then as many full segments as the rest of it holds).
    let mut open = seg(TcpControl::None, PISS + 1, Some(ISS + 1), &[]);
    open.window_len = 0xffff;
    c.handle_segment(now, &open);
    let out = drain(&mut c, now);
    let lens: Vec<usize> = out.iter().map(|o| o.payload.len()).collect();
    assert_eq!(out[0].seq, ISS + 1);
    assert_eq!(
        lens,
        [vec![1], vec![1460; 9]].concat(),
        "cwnd less the octet"
    );
}

#[test]
fn rfc9293_3_8_6_2_2_reading_announces_the_reopened_window() {
    let mut config = cfg();
    config.rx_buffer = 8192;
    let mut c = established(config, true);
    c.handle_segment(ms(2), &data(0, &[9; 1460], ISS + 1));
    c.handle_segment(ms(2), &data(1460, &[9; 1460], ISS + 1));
    let out = drain(&mut c, ms(2));
    let w_before = out.last().unwrap().window;
    let mut buf = vec![0; 4096];
    assert_eq!(c.recv(&mut buf), Ok(2920));
    let out = drain(&mut c, ms(3));
    assert_eq!(out.len(), 1, "a window update");
    assert!(out[0].window > w_before);
}

/// FIN-WAIT-2 with a limit (`fin_wait_2_timeout`, Linux's `tcp_fin_timeout`): a peer that
/// acknowledged our FIN and then neither sends nor closes is reset once the limit passes
/// without new data (data pushes the deadline back); the user sees a reset. Without a
/// limit (RFC 9293, the default) FIN-WAIT-2 lasts.
#[test]
fn fin_wait_2_without_data_for_the_limit_resets_the_connection() {
    for limit in [Some(Duration::from_secs(1)), None] {
        let mut config = cfg();
        config.fin_wait_2_timeout = limit;
        // No keep-alive nor user timeout: only the FIN-WAIT-2 limit can end it.
        config.keep_alive = None;
        config.timeout = None;
        let mut c = established(config, true);
        c.close();
        assert_eq!(drain(&mut c, ms(2))[0].control, TcpControl::Fin);
        c.handle_segment(ms(3), &seg(TcpControl::None, PISS + 1, Some(ISS + 2), &[]));
        assert_eq!(c.state(), State::FinWait2);
        // Data at 900 ms: the peer is still sending.
        assert!(run_until(&mut c, ms(3), ms(900)).is_empty());
        c.handle_segment(ms(900), &data(0, b"late", ISS + 2));
        let _ = drain(&mut c, ms(900));
        let out = run_until(&mut c, ms(900), ms(1_890));
        assert!(
            out.iter().all(|(_, o)| o.control != TcpControl::Rst),
            "{out:?}"
        );
        assert_eq!(c.state(), State::FinWait2);
        let out = run_until(&mut c, ms(1_890), ms(60_000));
        match limit {
            Some(_) => {
                // The first deadline (1,003 ms) found the data and set the limit again:
                // the reset comes at 2,003 ms.
                let rst: Vec<_> = out
                    .iter()
                    .filter(|(_, o)| o.control == TcpControl::Rst)
                    .collect();
                assert_eq!(rst.len(), 1, "{out:?}");
                assert_eq!(rst[0].0, ms(2_003));
                assert_eq!(c.state(), State::Closed);
                assert_eq!(events(&mut c).last(), Some(&ConnEvent::TimedOut));
            }
            None => {
                assert!(out.is_empty(), "{out:?}");
                assert_eq!(c.state(), State::FinWait2);
            }
        }
    }
}

#[test]
fn rfc9293_3_6_active_close_through_fin_wait_and_time_wait() {
    let mut config = cfg();
    config.time_wait = Duration::from_secs(2);
    let mut c = established(config, true);
    c.close();
    assert_eq!(c.state(), State::FinWait1);
    let out = drain(&mut c, ms(2));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].control, TcpControl::Fin);
    c.handle_segment(ms(3), &seg(TcpControl::None, PISS + 1, Some(ISS + 2), &[]));
    assert_eq!(c.state(), State::FinWait2);
    c.handle_segment(ms(4), &seg(TcpControl::Fin, PISS + 1, Some(ISS + 2), &[]));
    assert_eq!(c.state(), State::TimeWait);
    // The user learns of the close now; TIME-WAIT runs on inside the stack.
    assert_eq!(
        events(&mut c),
        vec![ConnEvent::PeerClosed, ConnEvent::Closed]
    );
    let out = drain(&mut c, ms(4));
    assert_eq!(out[0].ack, Some(PISS + 2));
    assert_eq!(c.poll_timeout(), Some(ms(2004)));
    c.handle_timeout(ms(2004));
    assert_eq!(c.state(), State::Closed);
    assert_eq!(events(&mut c), vec![]);
    assert!(c.is_finished());
}

#[test]
fn rfc9293_3_6_passive_close_through_close_wait_and_last_ack() {
    let mut c = established(cfg(), true);
    c.handle_segment(ms(2), &seg(TcpControl::Fin, PISS + 1, Some(ISS + 1), &[]));
    assert_eq!(c.state(), State::CloseWait);
    assert_eq!(events(&mut c), vec![ConnEvent::PeerClosed]);
    assert!(c.recv(&mut [0; 10]).is_err(), "nothing more will arrive");
    drain(&mut c, ms(2));
    c.close();
    assert_eq!(c.state(), State::LastAck);
    let out = drain(&mut c, ms(3));
    assert_eq!(out[0].control, TcpControl::Fin);
    c.handle_segment(ms(4), &seg(TcpControl::None, PISS + 2, Some(ISS + 2), &[]));
    assert_eq!(c.state(), State::Closed);
    assert_eq!(events(&mut c), vec![ConnEvent::Closed]);
}

#[test]
fn rfc9293_3_6_simultaneous_close_through_closing() {
    let mut c = established(cfg(), true);
    c.close();
    drain(&mut c, ms(2));
    // The peer's FIN crosses ours: it does not acknowledge our FIN.
    c.handle_segment(ms(3), &seg(TcpControl::Fin, PISS + 1, Some(ISS + 1), &[]));
    assert_eq!(c.state(), State::Closing);
    c.handle_segment(ms(4), &seg(TcpControl::None, PISS + 2, Some(ISS + 2), &[]));
    assert_eq!(c.state(), State::TimeWait);
}

#[test]
fn rfc9293_3_10_5_abort_sends_rst_and_closes() {
    let mut c = established(cfg(), true);
    c.abort();
    assert_eq!(c.state(), State::Closed);
    let out = drain(&mut c, ms(2));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].control, TcpControl::Rst);
    assert_eq!(out[0].seq, ISS + 1);
    assert_eq!(events(&mut c), vec![ConnEvent::Closed]);
    assert!(c.is_finished());
}

#[test]
fn rfc9293_3_8_4_keep_alive_probes_an_idle_peer_and_a_dead_one_is_reset() {
    let mut config = cfg();
    config.keep_alive = Some(Duration::from_secs(1));
    config.timeout = Some(Duration::from_secs(3));
    let mut c = established(config, true);
    let out = run_until(&mut c, ms(1), ms(1500));
    assert_eq!(out.len(), 1, "{out:?}");
    // SEG.SEQ = SND.NXT - 1: outside the peer's window, it must answer with an ACK.
    assert_eq!(out[0].1.seq, ISS);
    // The peer answers: it stays up.
    c.handle_segment(
        ms(1600),
        &seg(TcpControl::None, PISS + 1, Some(ISS + 1), &[]),
    );
    run_until(&mut c, ms(1600), ms(4000));
    assert_eq!(c.state(), State::Established);
    // Silence from now on: reset three seconds after the peer was last heard.
    run_until(&mut c, ms(4000), ms(5000));
    assert_eq!(c.state(), State::Closed);
    assert_eq!(events(&mut c), vec![ConnEvent::TimedOut]);
}

/// A burst's receive buffer stays while the connection is busy (growing it again for every
/// burst cost reallocations and fresh pages) and is given back at the keep-alive tick once
/// the connection is idle and the queue drained.
#[test]
fn a_drained_receive_buffer_is_kept_until_the_keep_alive_tick() {
    let mut config = cfg();
    config.rx_buffer = 256 * 1024;
    config.keep_alive = Some(Duration::from_secs(1));
    config.tx_buffer = 256 * 1024;
    let mut c = established(config, true);
    let idle = c.buffer_memory();
    // A burst sent and acknowledged as it goes out: its send ring is kept too, until the
    // tick.
    let mut out = send(&mut c, ms(2), 100_000);
    while let Some(last) = out.last() {
        let end = last.seq + last.payload.len();
        c.handle_segment(ms(2), &seg(TcpControl::None, PISS + 1, Some(end), &[]));
        out = drain(&mut c, ms(2));
    }
    assert_eq!(c.send_queue(), 0);
    assert!(c.buffer_memory() >= 100_000);
    let mut buf = vec![0; 256 * 1024];
    let mut off = 0;
    for burst in 0..3 {
        for _ in 0..100 {
            c.handle_segment(ms(2 + burst), &data(off, &[7; 1460], ISS + 1 + 100_000));
            off += 1460;
        }
        drain(&mut c, ms(2 + burst));
        assert_eq!(c.recv(&mut buf), Ok(146_000));
        assert!(
            c.buffer_memory() >= 146_000,
            "burst {burst}: the drained buffer is kept ({} octets)",
            c.buffer_memory()
        );
    }
    // Idle: the keep-alive tick (1 s after the last segment) gives the buffer back.
    run_until(&mut c, ms(5), ms(1500));
    assert!(
        c.buffer_memory() <= idle + 4096,
        "{} octets held by an idle connection (idle at start: {idle})",
        c.buffer_memory()
    );
}

#[test]
fn acknowledged_data_frees_the_send_buffer_and_raises_writable() {
    let mut c = established(cfg(), true);
    send(&mut c, ms(2), 3000);
    assert_eq!(c.send_queue(), 3000);
    c.handle_segment(
        us(2500),
        &seg(TcpControl::None, PISS + 1, Some(ISS + 1 + 3000), &[]),
    );
    assert_eq!(c.send_queue(), 0);
    assert_eq!(events(&mut c), vec![ConnEvent::Writable]);
    assert!(c.stats().recovery.srtt_us > 0);
}

/// Two connections joined by a wire that loses, reorders and duplicates segments (seeded):
/// 10 MB each way arrive intact and in order.
#[test]
fn ten_megabytes_each_way_through_a_lossy_reordering_duplicating_wire() {
    lossy_transfer(ISS, PISS, false);
}

/// An MPA-aligned sender (mpa-08 §4 item 4; `Connection::send_with_room` writes records):
/// records of many sizes, some longer than a segment, 10 MB each way through the same
/// lossy wire, across the sequence-space wrap and around the send ring's end many times.
/// Every data segment, new or retransmitted, starts at a record boundary and ends at one,
/// except where a record longer than a segment must be cut (at full segments); segments
/// pack several small records.
#[test]
fn records_are_never_split_across_segments_under_loss_and_retransmission() {
    lossy_transfer(ISS, PISS, true);
    lossy_transfer(
        TcpSeqNumber((u32::MAX - 3_000_000) as i32),
        TcpSeqNumber((u32::MAX - 7_000_000) as i32),
        true,
    );
}

/// RFC 9293 §3.4: sequence numbers are modulo 2^32. Both initial sequence numbers a few
/// megabytes below the wrap (as RFC 6528's random ISNs put some connection of thousands
/// sooner or later): 10 MB each way cross it, with loss, reordering and duplication.
#[test]
fn rfc9293_3_4_ten_megabytes_each_way_across_the_sequence_space_wrap() {
    lossy_transfer(
        TcpSeqNumber((u32::MAX - 3_000_000) as i32),
        TcpSeqNumber((u32::MAX - 7_000_000) as i32),
        false,
    );
    lossy_transfer(
        TcpSeqNumber(i32::MAX - 2_000_000),
        TcpSeqNumber(i32::MAX - 5_000_000),
        false,
    );
}

/// The length of record `k` of a record stream: mostly one segment's worth (1,448: MSS 1460
/// less the timestamp option) or small, now and then longer than a segment.
fn record_len(k: usize) -> usize {
    match (k.wrapping_mul(2_654_435_761) >> 7) % 16 {
        0 => 3_000,
        1..=7 => 1_448,
        8 => 1_447,
        9 => 1,
        n => 64 * n,
    }
}

fn lossy_transfer(iss_a: TcpSeqNumber, iss_b: TcpSeqNumber, records: bool) {
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn chance(&mut self, p: f64) -> bool {
            (self.next() % 1_000_000) as f64 / 1e6 < p
        }
    }
    #[derive(Clone)]
    struct Wire {
        at: Instant,
        to_b: bool,
        seg: Out,
    }
    let total: usize = 10 * 1000 * 1000;
    let pat = |salt: u8, i: usize| (i as u8).wrapping_mul(31) ^ salt ^ (i >> 8) as u8;
    let config = ConnConfig {
        rx_buffer: 512 * 1024,
        tx_buffer: 512 * 1024,
        ..ConnConfig::default()
    };
    let mut a = Connection::connect(&config, ep(), iss_a, ms(0));
    let ep_b = Endpoints {
        local: PEER,
        remote: US,
    };
    let mut rng = Rng(0x1234_5678_9abc_def1);
    let mut wire: Vec<Wire> = Vec::new();
    let mut b: Option<Connection> = None;
    let (mut sent_a, mut sent_b, mut got_a, mut got_b) = (0usize, 0usize, 0usize, 0usize);
    let mut now = ms(0);
    let latency = Duration::from_micros(50);
    let mut lost = 0;
    // Record streams: the stream offset just past each record, per side (a, b).
    let mut ends: [Vec<usize>; 2] = [Vec::new(), Vec::new()];
    let (mut aligned, mut cut, mut packed) = (0u64, 0u64, 0u64);
    for _ in 0..5_000_000 {
        // Both ends send what they can.
        for (side_a, conn) in [(true, Some(&mut a)), (false, b.as_mut())] {
            let Some(c) = conn else { continue };
            if c.state() == State::Established {
                let (sent, salt) = if side_a {
                    (&mut sent_a, 1)
                } else {
                    (&mut sent_b, 2)
                };
                while records && *sent < total {
                    let off = *sent;
                    let side = usize::from(!side_a);
                    let len = record_len(ends[side].len()).min(total - off);
                    let n = c
                        .send_with_room(len, |buf| {
                            if buf.len() < len {
                                return 0;
                            }
                            for (k, x) in buf[..len].iter_mut().enumerate() {
                                *x = pat(salt, off + k);
                            }
                            len
                        })
                        .unwrap();
                    if n == 0 {
                        break;
                    }
                    *sent += n;
                    ends[side].push(*sent);
                }
                while !records && *sent < total {
                    let off = *sent;
                    let n = c
                        .send_with(|buf| {
                            let n = buf.len().min(total - off);
                            for (k, x) in buf[..n].iter_mut().enumerate() {
                                *x = pat(salt, off + k);
                            }
                            n
                        })
                        .unwrap();
                    if n == 0 {
                        break;
                    }
                    *sent += n;
                }
                let (got, salt) = if side_a {
                    (&mut got_a, 2)
                } else {
                    (&mut got_b, 1)
                };
                loop {
                    let off = *got;
                    let n = c
                        .recv_with(|d| {
                            for (k, &x) in d.iter().enumerate() {
                                assert_eq!(x, pat(salt, off + k), "octet {} differs", off + k);
                            }
                            d.len()
                        })
                        .unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    *got += n;
                }
            }
            for o in drain(c, now) {
                if records && !o.payload.is_empty() {
                    let side = usize::from(!side_a);
                    let iss = if side_a { iss_a } else { iss_b };
                    let start = o.seq.0.wrapping_sub(iss.0).wrapping_sub(1) as u32 as usize;
                    let end = start + o.payload.len();
                    let e = &ends[side];
                    // The record holding stream offset `x`: its length.
                    let rec = |x: usize| {
                        let i = e.partition_point(|&b| b <= x);
                        e[i] - if i == 0 { 0 } else { e[i - 1] }
                    };
                    let starts = start == 0 || e.binary_search(&start).is_ok();
                    let ends_at = e.binary_search(&end).is_ok();
                    if starts && ends_at {
                        aligned += 1;
                        let first = e.partition_point(|&b| b <= start);
                        packed += u64::from(e[first] < end);
                    } else {
                        // Only a record longer than a segment is cut, at full segments.
                        assert!(
                            (starts || rec(start) > 1448) && (ends_at || rec(end - 1) > 1448),
                            "segment [{start}, {end}) splits a record that fits a segment"
                        );
                        if !ends_at {
                            assert_eq!(o.payload.len(), 1448, "a cut segment is full");
                        }
                        cut += 1;
                    }
                }
                if rng.chance(0.01) {
                    lost += 1;
                    continue;
                }
                let mut at = now + latency;
                if rng.chance(0.02) {
                    at += Duration::from_micros(300);
                }
                let w = Wire {
                    at,
                    to_b: side_a,
                    seg: o,
                };
                if rng.chance(0.01) {
                    wire.push(w.clone());
                }
                wire.push(w);
            }
            while let Some(_e) = c.poll_event() {}
        }
        if got_a == total && got_b == total {
            break;
        }
        // Deliver what is due, else jump to the next delivery or timer.
        wire.sort_by_key(|w| w.at);
        let due: Vec<Wire> = {
            let k = wire.iter().take_while(|w| w.at <= now).count();
            wire.drain(..k).collect()
        };
        for w in &due {
            let o = &w.seg;
            let repr = TcpRepr {
                src_port: if w.to_b { US.1 } else { PEER.1 },
                dst_port: if w.to_b { PEER.1 } else { US.1 },
                control: o.control,
                seq_number: o.seq,
                ack_number: o.ack,
                window_len: o.window,
                window_scale: o.ws,
                max_seg_size: o.mss,
                sack_permitted: o.sack_permitted,
                sack_ranges: {
                    let mut r = [None; 3];
                    for (i, s) in o.sack.iter().enumerate() {
                        r[i] = Some(*s);
                    }
                    r
                },
                timestamp: o.ts,
                payload: &o.payload,
            };
            if w.to_b {
                match b.as_mut() {
                    Some(c) => c.handle_segment(now, &repr),
                    None if o.control == TcpControl::Syn => {
                        b = Some(Connection::accept(&config, ep_b, iss_b, &repr, now));
                    }
                    None => {}
                }
            } else {
                a.handle_segment(now, &repr);
            }
        }
        if due.is_empty() {
            let mut next = wire.first().map(|w| w.at);
            for c in [Some(&a), b.as_ref()].into_iter().flatten() {
                if let Some(t) = c.poll_timeout() {
                    next = Some(next.map_or(t, |n: Instant| n.min(t)));
                }
            }
            now = next
                .unwrap_or(now + Duration::from_millis(1))
                .max(now + Duration::from_micros(1));
            for c in [Some(&mut a), b.as_mut()].into_iter().flatten() {
                if c.poll_timeout().is_some_and(|t| t <= now) {
                    c.handle_timeout(now);
                }
            }
        }
    }
    assert_eq!(
        (got_a, got_b),
        (total, total),
        "transfer incomplete at {now}"
    );
    assert!(lost > 100, "the wire lost {lost} segments");
    let s = a.stats().recovery;
    eprintln!("10 MB each way in {now} simulated; a lost {lost} segments in all; a: {s:?}");
    if records {
        eprintln!("records: {aligned} aligned segments ({packed} with several), {cut} cut");
        assert!(aligned > 10_000 && packed > 1_000 && cut > 0);
        assert!(s.retransmitted_segments > 100, "{s:?}");
    }
    // Loss costs milliseconds, not seconds: the transfer at 1 % loss with a 100 us RTT
    // takes far less than one second of simulated time per lost segment.
    assert!(now < ms(60_000), "took {now}");
}

/// The peer's octets 2000..2100 and 4000..4100 arrive ahead of a hole at 2 ms: the
/// connection holds them and has two SACK blocks to report (what it sent is drained).
fn hold_two_sack_blocks(c: &mut Connection) {
    c.handle_segment(ms(2), &stamped(data(2000, &[1; 100], ISS + 1)));
    c.handle_segment(ms(2), &stamped(data(4000, &[1; 100], ISS + 1)));
    drain(c, ms(2));
}

#[test]
fn rfc9293_3_7_1_sack_blocks_on_data_segments_come_out_of_the_mss() {
    let mut c = established(cfg(), false);
    // Out-of-order data held: our segments carry SACK blocks from now on.
    hold_two_sack_blocks(&mut c);
    let out = send(&mut c, ms(3), 10_000);
    assert!(!out.is_empty());
    for o in &out {
        assert_eq!(o.sack.len(), 2);
        // Timestamps (10 octets) and two SACK blocks (2 + 16) take 28 octets of options:
        // the segment never exceeds MSS + 20 (a 1,500-octet IP packet).
        let options = 10 + 18;
        assert!(
            o.payload.len() + options <= 1460,
            "{} + {options}",
            o.payload.len()
        );
    }
}

/// An active connection without options (MSS 1460, no timestamps, no window scaling) whose
/// peer offers `window` octets from its SYN-ACK on.
fn established_with_window(window: u16) -> Connection {
    let mut c = Connection::connect(&cfg(), ep(), ISS, ms(0));
    drain(&mut c, ms(0));
    let mut sa = seg(TcpControl::Syn, PISS, Some(ISS + 1), &[]);
    sa.max_seg_size = Some(1460);
    sa.window_len = window;
    c.handle_segment(ms(1), &sa);
    assert_eq!(c.state(), State::Established);
    drain(&mut c, ms(1));
    events(&mut c);
    c
}

/// Writes one record of `len` octets of `fill`.
fn record(c: &mut Connection, len: usize, fill: u8) {
    let n = c.send_with_room(len, |b| {
        b[..len].fill(fill);
        len
    });
    assert_eq!(n, Ok(len));
}

/// The peer's ACK of our first `acked` data octets, offering `window`.
fn ack_of(acked: usize, window: u16) -> TcpRepr<'static> {
    let mut a = seg(TcpControl::None, PISS + 1, Some(ISS + 1 + acked), &[]);
    a.window_len = window;
    a
}

/// mpa-08 §4 item 4 (an MPA-aligned sender): when the peer's window has room for part of
/// the next record, which would fit a segment, and data is in flight, the sender waits for
/// the ACK rather than cut the record (a plain stream would send the 1,400 octets the
/// window allows, RFC 9293 3.8.6.2.1's "at least half the largest window").
#[test]
fn mpa_aligned_sender_waits_for_an_ack_rather_than_split_a_record() {
    let mut c = established_with_window(2000);
    record(&mut c, 600, 1);
    record(&mut c, 1450, 2);
    let out = drain(&mut c, ms(2));
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].payload, vec![1; 600]);
    c.handle_segment(ms(3), &ack_of(600, 2000));
    let out = drain(&mut c, ms(3));
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].payload, vec![2; 1450]);
}

/// ... but with nothing in flight no ACK will come: a record wider than the peer's whole
/// window goes out in pieces (never a deadlock).
#[test]
fn mpa_aligned_sender_cuts_a_record_wider_than_the_window_when_nothing_is_in_flight() {
    let mut c = established_with_window(1000);
    record(&mut c, 1450, 3);
    let out = drain(&mut c, ms(2));
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].payload.len(), 1000);
    c.handle_segment(ms(3), &ack_of(1000, 1000));
    let out = drain(&mut c, ms(3));
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].payload.len(), 450);
}

/// Small records share a segment: whole records up to the segment's payload room, the cut
/// at the last boundary that fits.
#[test]
fn mpa_aligned_sender_packs_whole_small_records_into_a_segment() {
    let mut c = established(cfg(), true);
    for k in 0..10u8 {
        record(&mut c, 300, k);
    }
    let out = drain(&mut c, ms(2));
    let lens: Vec<usize> = out.iter().map(|o| o.payload.len()).collect();
    // 1460 octets of room hold four 300-octet records (1,200), not 4.87.
    assert_eq!(lens, vec![1200, 1200, 600]);
}

/// RFC 2018 4 and mpa-08 §4 item 4: while out-of-order data is held, a record stream's data
/// segments keep their whole payload room (a full FPDU still fits) and carry only the SACK
/// blocks that fit beside it; a pure ACK with every block follows them.
#[test]
fn rfc2018_4_sack_blocks_give_way_to_whole_records_and_follow_in_a_pure_ack() {
    let mut c = established(cfg(), false);
    hold_two_sack_blocks(&mut c);
    assert_eq!(c.max_record_payload(), 1448);
    for k in 0..3u8 {
        record(&mut c, 1448, k);
    }
    let out = drain(&mut c, ms(3));
    assert_eq!(out.len(), 4, "{out:?}");
    for o in &out[..3] {
        assert_eq!(o.payload.len(), 1448);
        assert!(o.sack.is_empty(), "no room for a SACK block: {o:?}");
    }
    assert!(out[3].payload.is_empty());
    assert_eq!(out[3].sack.len(), 2);
}

/// RFC 9293 3.10.4, CLOSE in SYN-RECEIVED: with nothing to send the connection enters
/// FIN-WAIT-1 at once, but its FIN follows its SYN: closed before the SYN-ACK went out, the
/// SYN-ACK goes first at ISS and the FIN at ISS + 1, and the ACK of both is ordinary (the
/// tcp_segments fuzz target found the FIN taking the SYN's sequence number, and the ACK's
/// accounting then underflowed; corpus entry regress-fin-after-unsent-syn).
#[test]
fn rfc9293_3_10_4_close_in_syn_received_sends_the_syn_before_the_fin() {
    let mut syn = seg(TcpControl::Syn, PISS, None, &[]);
    syn.max_seg_size = Some(1460);
    let mut c = Connection::accept(&cfg(), ep(), ISS, &syn, ms(0));
    assert_eq!(c.state(), State::SynReceived);
    c.close();
    assert_eq!(c.state(), State::FinWait1);
    let out = drain(&mut c, ms(0));
    assert_eq!(out.len(), 2, "{out:?}");
    assert_eq!((out[0].control, out[0].seq), (TcpControl::Syn, ISS));
    assert_eq!(out[0].ack, Some(PISS + 1));
    assert_eq!((out[1].control, out[1].seq), (TcpControl::Fin, ISS + 1));
    // The peer acknowledges our SYN and FIN together.
    c.handle_segment(ms(1), &seg(TcpControl::None, PISS + 1, Some(ISS + 2), &[]));
    assert_eq!(c.state(), State::FinWait2);
}

/// RFC 1122 4.2.3.6 and RFC 9293 3.10.4 (CLOSE in SYN-RECEIVED): a connection closed before
/// its handshake completed reaches FIN-WAIT-2 with the peer's ACK of our SYN and FIN, and
/// waits there for the peer's last data and FIN as any other (half-close, RFC 9293 3.6).
/// Keep-alive must probe the peer there too: the user timeout counts silence as death
/// wherever keep-alive is configured, and the handshake's ACK never armed the keep-alive
/// timer on this path (only the SYN-RECEIVED to ESTABLISHED transition did). A live,
/// half-closed peer that took longer than the user timeout to send its last data was given
/// up as timed out (no RST: left half-open), its data lost.
#[test]
fn keep_alive_probes_fin_wait_2_after_a_close_in_syn_received() {
    let mut config = cfg();
    config.keep_alive = Some(Duration::from_secs(10));
    config.timeout = Some(Duration::from_secs(30));
    config.fin_wait_2_timeout = None;
    let mut syn = seg(TcpControl::Syn, PISS, None, &[]);
    syn.max_seg_size = Some(1460);
    let mut c = Connection::accept(&config, ep(), ISS, &syn, ms(0));
    c.close();
    assert_eq!(drain(&mut c, ms(0)).len(), 2, "SYN-ACK then FIN");
    fin_wait_2_keep_alive_probes_a_live_peer(&mut c, ms(1));
}

// Header prediction (`Connection::take_predicted`, the receive fast path) against the
// general path: seeded scripts of peer segments, mostly the next in-order data and
// everything around it that must not take the fast path (PSH or not, old or missing
// timestamps, a changed or shut window, SACK blocks, new ACKs, out-of-order data,
// duplicates, data beyond the window, a FIN), run into two connections, one held to the
// general path (`set_general_paths_only`, feature `self-check`). After every segment both
// must have sent the same segments, raised the same events, delivered and queued the same
// octets and kept the same counters and timer; every 16 segments and at the end, their
// whole state (`Debug`) must be the same.

/// xorshift64*: the scripts' choices, reproducible from the seed.
fn rand(r: &mut u64) -> u64 {
    *r ^= *r >> 12;
    *r ^= *r << 25;
    *r ^= *r >> 27;
    r.wrapping_mul(0x2545_f491_4f6c_dd1d)
}

/// What one connection showed after a step.
#[derive(Debug, PartialEq)]
struct Seen {
    out: String,
    events: Vec<ConnEvent>,
    delivered: usize,
    queued: usize,
    stats: warpcore_tcp::conn::ConnStats,
    timeout: Option<Instant>,
    state: State,
}

/// Hands `s` to `c` (on the path `general` says), its in-order payload offered to a
/// `deliver` that takes all, half or none of it (`take`), then collects what `c` showed.
fn step(
    c: &mut Connection,
    general: bool,
    now: Instant,
    s: &TcpRepr<'_>,
    take: u64,
    got: &mut Vec<u8>,
) -> (Seen, Vec<Out>) {
    warpcore_tcp::conn::set_general_paths_only(general);
    let mut delivered = 0;
    c.handle_segment_with(now, s, &mut |d| {
        let n = match take {
            0 => d.len(),
            1 => d.len() / 2,
            _ => 0,
        };
        got.extend_from_slice(&d[..n]);
        delivered += n;
        n
    });
    warpcore_tcp::conn::set_general_paths_only(false);
    let out = drain(c, now);
    let seen = Seen {
        out: format!("{out:?}"),
        events: events(c),
        delivered,
        queued: c.recv_queue(),
        stats: c.stats(),
        timeout: c.poll_timeout(),
        state: c.state(),
    };
    (seen, out)
}

/// One script of `steps` peer segments from `seed` into a fast-path and a general-path
/// connection. Returns how many segments took the fast path, and how many of those
/// acknowledged new data of ours.
fn predicted_against_general(seed: u64, plain: bool, steps: usize) -> (u64, u64) {
    let mut r = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    // Odd seeds delay their ACKs (RFC 1122 4.2.3.2): the second full segment or the
    // timer sends one.
    let config = ConnConfig {
        rx_buffer: 8 * 1024,
        tx_buffer: 16 * 1024,
        mss: 1460,
        ack_delay: (seed % 2 == 1).then(|| Duration::from_micros(500)),
        ..ConnConfig::default()
    };
    let mut fast = established(config, plain);
    let mut general = established(config, plain);
    let mut now = ms(1);
    // The peer's next in-order offset, how much of our stream it acknowledges, the
    // highest offset of ours it has seen, its window field, its clock and our last tsval.
    let (mut off, mut acked, mut seen_high) = (0usize, 0usize, 0usize);
    let (mut window, mut tsval, mut echo) = (0xffffu16, 100u32, 0u32);
    let (mut got_fast, mut got_general) = (Vec::new(), Vec::new());
    let mut read = 0;
    // Where the peer's FIN went, once sent: its stream ends there.
    let mut fin_at: Option<usize> = None;
    let before = warpcore_tcp::conn::predicted_segments();
    let answered_before = warpcore_tcp::conn::answered_segments();
    let payload: Vec<u8> = (0..4096u32).map(|i| (i * 31 + seed as u32) as u8).collect();
    for i in 0..steps {
        now += Duration::from_micros(1 + rand(&mut r) % 300);
        let pick = rand(&mut r) % 100;
        let take = if rand(&mut r).is_multiple_of(16) {
            1 + rand(&mut r) % 2
        } else {
            0
        };
        let mut len = 1 + (rand(&mut r) % 1460) as usize;
        let mut at = off;
        let mut control = if rand(&mut r).is_multiple_of(2) {
            TcpControl::Psh
        } else {
            TcpControl::None
        };
        // Beyond what we sent, for this segment only (a near miss of the fast path's
        // second case, RFC 5961 5.2).
        let mut ack_beyond = 0;
        match pick {
            // The next in-order data (the fast path's case, and its near misses below).
            0..=44 => {}
            // The next in-order data acknowledging new data of ours: all of it (an
            // answer's segment), part of it, or (rarely) more than we sent.
            45..=59 => {
                if seen_high > acked {
                    acked = if rand(&mut r).is_multiple_of(2) {
                        seen_high
                    } else {
                        acked + 1 + (rand(&mut r) as usize % (seen_high - acked))
                    };
                }
                if rand(&mut r).is_multiple_of(10) {
                    ack_beyond = 1 + (rand(&mut r) % 3000) as usize;
                }
            }
            // Beyond a gap, then (next time) the gap; late in a script sometimes the
            // peer's FIN there, with or without data: the segment that fills the gap
            // must then take the FIN in too.
            60..=65 => {
                at = off + 1 + (rand(&mut r) % 3000) as usize;
                if i > steps / 2 && fin_at.is_none() && rand(&mut r).is_multiple_of(3) {
                    control = TcpControl::Fin;
                    if rand(&mut r).is_multiple_of(2) {
                        len = 0;
                    }
                    fin_at = Some(at + len);
                }
            }
            // Old data again.
            66..=69 => at = off.saturating_sub(1 + (rand(&mut r) % 2000) as usize),
            // Pure ACKs, some acknowledging new data of ours.
            70..=76 => {
                len = 0;
                control = TcpControl::None;
                if seen_high > acked {
                    acked += 1 + (rand(&mut r) as usize % (seen_high - acked));
                }
            }
            // More than the window can take.
            77..=79 => len = 1460 + (rand(&mut r) % 2600) as usize,
            // Our side sends: later segments may acknowledge it.
            80..=87 => {
                let n = 1 + (rand(&mut r) % 3000) as usize;
                let (a, b) = (fast.send(&payload[..n]), general.send(&payload[..n]));
                assert_eq!(a, b, "seed {seed} step {i}: send");
                len = 0;
                control = TcpControl::None;
            }
            // Our receive queue read.
            88..=92 => {
                let (mut a, mut b) = ([0u8; 8192], [0u8; 8192]);
                let (na, nb) = (fast.recv(&mut a), general.recv(&mut b));
                assert_eq!(na, nb, "seed {seed} step {i}: recv");
                if let Ok(n) = na {
                    assert_eq!(a[..n], b[..n], "seed {seed} step {i}: recv");
                    read += n;
                }
                len = 0;
                control = TcpControl::None;
            }
            // Timers.
            93..=95 => {
                now += Duration::from_millis(rand(&mut r) % 300);
                for c in [&mut fast, &mut general] {
                    if c.poll_timeout().is_some_and(|t| t <= now) {
                        c.handle_timeout(now);
                    }
                }
                len = 0;
                control = TcpControl::None;
            }
            // The peer's FIN, late in a script.
            _ if i > steps * 3 / 4 => control = TcpControl::Fin,
            _ => {}
        }
        // The peer's window: mostly as it was; sometimes another, rarely shut.
        match rand(&mut r) % 80 {
            0 | 1 => window = 1 + (rand(&mut r) % 0xffff) as u16,
            2 => window = 0,
            3..=5 => window = 0xffff,
            _ => {}
        }
        // Its clock: mostly forward; sometimes still, back, or no option at all.
        let ts = match rand(&mut r) % 30 {
            0 => Some(tsval.wrapping_sub(1 + (rand(&mut r) % 50) as u32)),
            1 => None,
            2 => Some(tsval),
            _ => {
                tsval = tsval.wrapping_add(1 + (rand(&mut r) % 3) as u32);
                Some(tsval)
            }
        };
        if let Some(f) = fin_at {
            if at < f && control != TcpControl::Fin {
                len = len.min(f - at);
            }
        }
        let data = &payload[..len.min(payload.len())];
        let mut s = seg(
            control,
            PISS + 1 + at,
            Some(ISS + 1 + acked + ack_beyond),
            data,
        );
        s.window_len = window;
        if !plain {
            s.timestamp = ts.map(|tsval| TcpTimestampRepr { tsval, tsecr: echo });
            if rand(&mut r).is_multiple_of(20) {
                let l = (ISS + 1 + acked).0 as u32;
                s.sack_ranges[0] = Some((l.wrapping_add(100), l.wrapping_add(200)));
            }
        }
        let (a, out) = step(&mut fast, false, now, &s, take, &mut got_fast);
        let (b, _) = step(&mut general, true, now, &s, take, &mut got_general);
        assert_eq!(a, b, "seed {seed} plain {plain} step {i}: {s:?}");
        assert_eq!(
            got_fast, got_general,
            "seed {seed} step {i}: delivered octets"
        );
        if i % 16 == 15 {
            assert_eq!(
                format!("{fast:?}"),
                format!("{general:?}"),
                "seed {seed} step {i}"
            );
        }
        // What the peer learns from our segments.
        for o in out.iter().filter(|o| o.seq > ISS) {
            seen_high = seen_high.max((o.seq - (ISS + 1)) + o.payload.len());
            if let Some(t) = o.ts {
                echo = t.tsval;
            }
        }
        // Everything taken in order so far: delivered in place, queued, or read.
        off = got_fast.len() + fast.recv_queue() + read;
    }
    assert_eq!(
        format!("{fast:?}"),
        format!("{general:?}"),
        "seed {seed} at the end"
    );
    (
        warpcore_tcp::conn::predicted_segments() - before,
        warpcore_tcp::conn::answered_segments() - answered_before,
    )
}

#[test]
fn rfc9293_3_10_7_4_header_prediction_does_what_the_general_path_does() {
    let (mut predicted, mut answered, mut segments) = (0, 0, 0);
    for seed in 0..48 {
        for plain in [false, true] {
            let (p, a) = predicted_against_general(seed, plain, 160);
            predicted += p;
            answered += a;
            segments += 160;
        }
    }
    // The scripts are mostly the next in-order data: the fast path must have taken a fair
    // share of them, in both of its cases, or the comparison above compared the general
    // path with itself.
    eprintln!(
        "the fast path took {predicted} of {segments} segments, {answered} of them acknowledging new data"
    );
    assert!(
        predicted * 5 > segments,
        "the fast path took only {predicted} of {segments} segments"
    );
    assert!(
        answered * 50 > segments,
        "the fast path took only {answered} of {segments} segments that acknowledged new data"
    );
}

#[test]
fn rfc9293_3_10_7_4_a_ping_pongs_segments_all_take_the_fast_path() {
    // Each side sends one segment and waits for the other's: every segment after the
    // first acknowledges the one it answers.
    let mut c = established(cfg(), false);
    let (before, answered) = (
        warpcore_tcp::conn::predicted_segments(),
        warpcore_tcp::conn::answered_segments(),
    );
    let (request, answer) = ([5u8; 64], [9u8; 64]);
    let mut now = ms(2);
    for (i, tsval) in (0..100).zip(11..) {
        let mut s = data(i * 64, &request, ISS + 1 + i * 64);
        s.window_len = 0xffff;
        s.timestamp = Some(TcpTimestampRepr { tsval, tsecr: 0 });
        let mut took = 0;
        c.handle_segment_with(now, &s, &mut |d| {
            took += d.len();
            d.len()
        });
        assert_eq!(took, 64, "request {i}");
        assert_eq!(c.send(&answer), Ok(64));
        let out = drain(&mut c, now);
        assert_eq!(out.len(), 1, "answer {i}: {out:?}");
        assert_eq!(out[0].payload.len(), 64);
        now += Duration::from_micros(3);
    }
    // The first request acknowledges nothing of ours and brings the first scaled window:
    // the general path's. Every later one acknowledges the answer before it.
    assert_eq!(warpcore_tcp::conn::predicted_segments() - before, 99);
    assert_eq!(warpcore_tcp::conn::answered_segments() - answered, 99);
    assert_eq!(c.stats().delivered_in_place, 100 * 64);
}

#[test]
fn rfc9293_3_10_7_4_a_bulk_receivers_segments_all_take_the_fast_path() {
    let mut c = established(cfg(), false);
    let before = warpcore_tcp::conn::predicted_segments();
    let payload = [7u8; 1448];
    for (i, tsval) in (0..100).zip(11..) {
        let mut s = data(i * 1448, &payload, ISS + 1);
        s.window_len = 0xffff;
        s.timestamp = Some(TcpTimestampRepr { tsval, tsecr: 0 });
        c.handle_segment_with(ms(2), &s, &mut |d| d.len());
        drain(&mut c, ms(2));
    }
    // The first segment's window is the first scaled one (the SYN-ACK's is not scaled):
    // an update, which the general path takes.
    assert_eq!(warpcore_tcp::conn::predicted_segments() - before, 99);
    assert_eq!(c.stats().delivered_in_place, 100 * 1448);
}

/// RFC 5681 3.2 / RFC 6582 3.2 step 2 without SACK, default configuration (CUBIC, RACK-TLP
/// on), a full initial window of ten segments: the first is lost, the other nine draw nine
/// duplicate ACKs. The fast retransmit goes out at the third, not at a timer (before: pipe
/// 9 segments > cwnd 7, nothing lowered it, and segment 1 was first resent by the RTO at
/// 7 ms after two probes).
#[test]
fn rfc5681_3_2_fast_retransmit_without_sack_with_a_full_window() {
    let mut c = established(cfg(), true);
    let out = send(&mut c, ms(2), 10 * 1460);
    assert_eq!(out.len(), 10);
    let mut sent = vec![];
    for k in 0..9 {
        c.handle_segment(
            us(3000 + k * 10),
            &seg(TcpControl::None, PISS + 1, Some(ISS + 1), &[]),
        );
        let now = drain(&mut c, us(3000 + k * 10));
        if k < 2 {
            assert!(
                now.iter().all(|o| o.seq != ISS + 1),
                "retransmitted at dupack {}",
                k + 1
            );
        }
        sent.extend(now);
    }
    let later = run_until(&mut c, ms(3), ms(30));
    let first_retx = later
        .iter()
        .find(|(_, o)| o.seq == ISS + 1)
        .map(|(t, _)| *t);
    let s = c.stats().recovery;
    assert_eq!(
        sent.iter().filter(|o| o.seq == ISS + 1).count(),
        1,
        "no fast retransmit after nine dupacks; segment 1 resent at {first_retx:?}; \
         later: {:?}; rto_count {} tlp_count {}",
        later
            .iter()
            .map(|(t, o)| (t.total_micros(), o.seq.0 - ISS.0 - 1, o.payload.len()))
            .collect::<Vec<_>>(),
        s.rto_count,
        s.tlp_count
    );
    assert_eq!(s.fast_recoveries, 1);
}

// The connection state machine against RFC 9293 3.10.7, RFC 5961, RFC 7323 and RFC 1122
// (the review of `tcp/src/conn`): one script per defect found.

/// RFC 9293 3.10.7.3 (SYN-SENT, first check): an ACK that does not acknowledge our SYN
/// draws `<SEQ=SEG.ACK><CTL=RST>`. This is how a connect finds the peer's half-open
/// connection of an earlier incarnation (RFC 9293 3.5.1, Figure 10; RFC 5961 4.2 relies on
/// it: the peer answers our SYN with a challenge ACK, our RST at its SEG.ACK is exactly its
/// RCV.NXT and resets the stale connection, and our next SYN connects). Before, the ACK only
/// set an ACK owed that SYN-SENT never sends: every SYN drew a challenge ACK that went
/// unanswered until the connect timed out. The SYN itself is kept: the retransmission
/// follows at its RTO as before. An ACK with RST set draws nothing.
#[test]
fn rfc9293_3_10_7_3_a_bad_ack_in_syn_sent_draws_a_reset_at_its_ack() {
    let mut c = Connection::connect(&cfg(), ep(), ISS, ms(0));
    assert_eq!(drain(&mut c, ms(0)).len(), 1);
    let stale = PISS + 7_777;
    for ack in [ISS - 5_000, ISS, ISS + 2] {
        c.handle_segment(ms(10), &seg(TcpControl::None, stale, Some(ack), &[]));
        assert_eq!(c.state(), State::SynSent);
        let out = drain(&mut c, ms(10));
        assert_eq!(out.len(), 1, "ack {ack}: {out:?}");
        assert_eq!(out[0].control, TcpControl::Rst);
        assert_eq!(out[0].seq, ack);
        assert_eq!(out[0].ack, None, "<SEQ=SEG.ACK><CTL=RST>");
    }
    c.handle_segment(ms(11), &seg(TcpControl::Rst, stale, Some(ISS + 9), &[]));
    assert!(drain(&mut c, ms(11)).is_empty(), "a RST is never answered");
    assert_eq!(c.state(), State::SynSent);
    let out = run_until(&mut c, ms(11), ms(1500));
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!((out[0].1.control, out[0].1.seq), (TcpControl::Syn, ISS));
    // The stale connection gone, the peer's SYN-ACK completes the handshake.
    c.handle_segment(ms(1500), &seg(TcpControl::Syn, PISS, Some(ISS + 1), &[]));
    assert_eq!(c.state(), State::Established);
}

/// RFC 9293 3.10.7.4 (fifth, SYN-RECEIVED): an ACK that does not acknowledge our SYN-ACK
/// draws `<SEQ=SEG.ACK><CTL=RST>` and the connection stays in SYN-RECEIVED (before:
/// nothing was sent at all).
#[test]
fn rfc9293_3_10_7_4_a_bad_ack_in_syn_received_draws_a_reset_at_its_ack() {
    let mut c = syn_received();
    let bad = ISS + 50_000;
    c.handle_segment(ms(1), &seg(TcpControl::None, PISS + 1, Some(bad), &[]));
    assert_eq!(c.state(), State::SynReceived);
    let out = drain(&mut c, ms(1));
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(
        (out[0].control, out[0].seq, out[0].ack),
        (TcpControl::Rst, bad, None)
    );
    c.handle_segment(ms(2), &seg(TcpControl::None, PISS + 1, Some(ISS + 1), &[]));
    assert_eq!(c.state(), State::Established);
}

/// RFC 9293 3.5, Figure 8: simultaneous open. Both ends send a SYN, each answers the other's
/// with a SYN-ACK from SYN-RECEIVED, and the SYN-ACK each receives there acknowledges its SYN:
/// both are ESTABLISHED then (as Linux's `tcp_validate_incoming` lets such a SYN-ACK
/// through). Before, the SYN-ACK failed the acceptability test (its SEG.SEQ is RCV.NXT - 1),
/// the ACK it owed was never sent from SYN-RECEIVED, and both ends went on retransmitting
/// SYN-ACKs that met the same fate until the handshake timed out.
#[test]
fn rfc9293_3_5_simultaneous_open_completes_without_a_timeout() {
    let peer_ep = Endpoints {
        local: PEER,
        remote: US,
    };
    let mut a = Connection::connect(&cfg(), ep(), ISS, ms(0));
    let mut b = Connection::connect(&cfg(), peer_ep, PISS, ms(0));
    // The SYNs cross.
    let (sa, sb) = (drain(&mut a, ms(0)), drain(&mut b, ms(0)));
    assert_eq!((sa.len(), sb.len()), (1, 1));
    let carry = |o: &Out, to: &mut Connection, now: Instant| {
        let mut s = seg(o.control, o.seq, o.ack, &o.payload);
        (s.src_port, s.dst_port) = (0, 0);
        s.window_len = o.window;
        s.max_seg_size = o.mss;
        s.window_scale = o.ws;
        s.sack_permitted = o.sack_permitted;
        s.timestamp = o.ts;
        to.handle_segment(now, &s);
    };
    carry(&sa[0], &mut b, ms(1));
    carry(&sb[0], &mut a, ms(1));
    assert_eq!(
        (a.state(), b.state()),
        (State::SynReceived, State::SynReceived)
    );
    // The SYN-ACKs cross, and whatever they draw is carried until both ends are quiet.
    let mut now = ms(2);
    let (mut qa, mut qb) = (drain(&mut a, now), drain(&mut b, now));
    while !qa.is_empty() || !qb.is_empty() {
        for o in qa.drain(..) {
            carry(&o, &mut b, now);
        }
        for o in qb.drain(..) {
            carry(&o, &mut a, now);
        }
        now += Duration::from_micros(10);
        qa = drain(&mut a, now);
        qb = drain(&mut b, now);
    }
    assert_eq!(
        (a.state(), b.state()),
        (State::Established, State::Established)
    );
    assert!(now < ms(3), "completed at {now}");
    assert_eq!(events(&mut a), vec![ConnEvent::Connected]);
    assert_eq!(events(&mut b), vec![ConnEvent::Connected]);
    // And data flows.
    assert_eq!(a.send(b"hello"), Ok(5));
    for o in drain(&mut a, now) {
        carry(&o, &mut b, now);
    }
    let mut buf = [0u8; 8];
    assert_eq!(b.recv(&mut buf), Ok(5));
    assert_eq!(&buf[..5], b"hello");
}

/// RFC 9293 3.10.7.4 (eighth) and 3.9.1 RECEIVE: the FIN ends the stream. A FIN that came
/// out of order fixes where the stream ends: octets past it are not the peer's data and are
/// dropped, a later FIN at another place changes nothing, and once the gap before the FIN
/// fills the FIN is taken (as Linux's `tcp_fin` purges what it held out of order). Before,
/// octets held past the FIN were delivered when the gap filled, RCV.NXT ran past the FIN's
/// place, and the FIN was never taken: no PeerClosed, ESTABLISHED for ever.
#[test]
fn rfc9293_3_10_7_4_a_fin_out_of_order_ends_the_stream_where_it_lies() {
    let mut c = established(cfg(), true);
    c.handle_segment(
        ms(2),
        &seg(TcpControl::Fin, PISS + 1 + 10, Some(ISS + 1), &[]),
    );
    c.handle_segment(ms(3), &data(10, &[7; 10], ISS + 1));
    c.handle_segment(
        ms(3),
        &seg(TcpControl::Fin, PISS + 1 + 20, Some(ISS + 1), &[]),
    );
    assert_eq!(c.state(), State::Established);
    assert_eq!(c.recv_queue(), 0);
    c.handle_segment(ms(4), &data(0, &[1; 10], ISS + 1));
    assert_eq!(
        c.recv_queue(),
        10,
        "the octets before the FIN, and only those"
    );
    assert_eq!(c.state(), State::CloseWait);
    assert_eq!(
        events(&mut c),
        vec![ConnEvent::Readable, ConnEvent::PeerClosed]
    );
    let out = drain(&mut c, ms(4));
    assert_eq!(
        out.last().map(|o| o.ack),
        Some(Some(PISS + 1 + 11)),
        "{out:?}"
    );
    let mut buf = [0u8; 32];
    assert_eq!(c.recv(&mut buf), Ok(10));
    assert_eq!(&buf[..10], &[1; 10]);
    assert!(c.recv(&mut buf).is_err(), "nothing more will arrive");
}

/// FIN-WAIT-2 lasts while the peer is alive ([`ConnConfig::fin_wait_2_timeout`] `None`:
/// no limit). The user timeout counts silence as death wherever keep-alive is configured
/// (`user_timeout_applies`), so keep-alive probes must go out in FIN-WAIT-2 too, as they
/// do in ESTABLISHED and CLOSE-WAIT (and as Linux sends them in FIN_WAIT2). Before, none
/// went out there, and a half-closed connection whose peer took longer than the user
/// timeout to send its last data and FIN was reset, the data lost.
#[test]
fn rfc1122_4_2_3_6_keep_alive_probes_a_live_peer_in_fin_wait_2() {
    let mut config = cfg();
    config.keep_alive = Some(Duration::from_secs(10));
    config.timeout = Some(Duration::from_secs(30));
    config.fin_wait_2_timeout = None;
    let mut c = established(config, true);
    c.close();
    assert_eq!(drain(&mut c, ms(2))[0].control, TcpControl::Fin);
    fin_wait_2_keep_alive_probes_a_live_peer(&mut c, ms(3));
}

/// The peer acknowledges our FIN at `at`: in FIN-WAIT-2 for two minutes, a live peer that
/// answers every keep-alive keeps the connection (RFC 1122 4.2.3.6; the user timeout
/// counts silence), and its last data and FIN still arrive.
fn fin_wait_2_keep_alive_probes_a_live_peer(c: &mut Connection, at: Instant) {
    c.handle_segment(at, &seg(TcpControl::None, PISS + 1, Some(ISS + 2), &[]));
    assert_eq!(c.state(), State::FinWait2);
    let mut now = at;
    let mut probes = 0;
    while now < ms(120_000) {
        let next = now + Duration::from_secs(1);
        for (t, o) in run_until(c, now, next) {
            // A keep-alive: SEG.SEQ = SND.NXT - 1, no data; the live peer answers it.
            assert_eq!((o.seq, o.payload.len()), (ISS + 1, 0), "{o:?}");
            probes += 1;
            c.handle_segment(t, &seg(TcpControl::None, PISS + 1, Some(ISS + 2), &[]));
        }
        now = next;
        assert_eq!(c.state(), State::FinWait2, "at {now}");
    }
    assert!(probes >= 10, "{probes} keep-alives");
    // The peer's last data and FIN still arrive.
    c.handle_segment(now, &data(0, b"late", ISS + 2));
    c.handle_segment(now, &seg(TcpControl::Fin, PISS + 5, Some(ISS + 2), &[]));
    assert_eq!(c.state(), State::TimeWait);
    assert_eq!(c.recv_queue(), 4);
}

/// RFC 9293 3.8.6.2.1 (sender SWS avoidance, case 4) and RFC 1122 4.2.3.4: the sender
/// holds back a segment smaller than a full one and than half the largest window, but only
/// until the override timeout; with nothing in flight no ACK will come to change its mind.
/// A peer's window left small and open (its buffer holds data its application has not read
/// yet, and the window update that follows the read is lost) would otherwise stall the
/// connection for good (before: no timer at all, the data stayed queued until the user
/// timeout reset the connection). As Linux's persist timer (`tcp_probe_timer` sends what
/// the window allows), the window-probe timer covers it and sends what fits.
#[test]
fn rfc9293_3_8_6_2_1_a_small_open_window_is_used_after_the_override_timeout() {
    let mut c = established(cfg(), true);
    // The peer's window shrinks to 1,000 octets (below a segment and half of 65,535).
    let mut small = seg(TcpControl::None, PISS + 1, Some(ISS + 1), &[]);
    small.window_len = 1000;
    c.handle_segment(ms(2), &small);
    assert!(
        send(&mut c, ms(2), 3000).is_empty(),
        "SWS avoidance holds it"
    );
    let out = run_until(&mut c, ms(2), ms(5_000));
    let first = out.iter().find(|(_, o)| !o.payload.is_empty());
    let Some((t, o)) = first else {
        panic!("nothing sent into the open window: {out:?}");
    };
    assert!(*t <= ms(1_100), "sent at {t}");
    assert_eq!((o.seq, o.payload.len()), (ISS + 1, 1000));
    assert_eq!(c.state(), State::Established);
}

/// A pure ACK (and a RST) goes out with a SEG.SEQ the peer can accept: SND.NXT, but no
/// further than the right edge of the peer's window, SND.UNA + SND.WND (Linux's
/// `tcp_acceptable_seq`). After a zero-window probe SND.NXT lies one octet past a window
/// the peer still holds shut, and a receiver with RCV.WND = 0 accepts SEG.SEQ = RCV.NXT
/// only (RFC 9293 3.10.7.4, first check): the ACKs of its data (and our abort) were
/// dropped there, its data went unacknowledged while its own window stayed shut, and with
/// a warpcore peer (whose window probes are data) neither side's ACKs got through until
/// the window opened. The same after a peer shrinks its window (RFC 9293 3.8.6).
#[test]
fn rfc9293_3_10_7_4_acks_stay_within_a_shut_or_shrunk_peer_window() {
    let mut c = established(cfg(), true);
    let mut zero = seg(TcpControl::None, PISS + 1, Some(ISS + 1), &[]);
    zero.window_len = 0;
    c.handle_segment(ms(2), &zero);
    assert!(send(&mut c, ms(2), 3000).is_empty());
    let out = run_until(&mut c, ms(2), ms(1_500));
    assert!(
        out.iter()
            .any(|(_, o)| o.seq == ISS + 1 && o.payload.len() == 1),
        "a window probe: {out:?}"
    );
    // The peer, its window still shut, sends data (and does not take the probe's octet).
    let mut d = data(0, b"0123456789", ISS + 1);
    d.window_len = 0;
    c.handle_segment(ms(1_600), &d);
    let out = drain(&mut c, ms(1_600));
    let acks: Vec<_> = out.iter().filter(|o| o.payload.is_empty()).collect();
    assert_eq!(acks.len(), 1, "{out:?}");
    assert_eq!(acks[0].ack, Some(PISS + 11));
    assert_eq!(
        acks[0].seq,
        ISS + 1,
        "SND.UNA + SND.WND, within the peer's window"
    );
    c.abort();
    let out = drain(&mut c, ms(1_700));
    assert_eq!((out[0].control, out[0].seq), (TcpControl::Rst, ISS + 1));
}

/// RFC 7323 5.5: after a long idle spell TS.Recent is invalid. PAWS lets the next segment
/// through whatever its TSval, and that segment's TSval becomes TS.Recent, so PAWS and the
/// echoes work again from there. A peer with a microsecond timestamp clock (Warpcore's)
/// moves more than 2^31 ticks in 36 minutes: after such a spell without keep-alive its
/// TSvals look older than TS.Recent. Before, TS.Recent stayed at the value before the spell
/// (only a newer TSval could replace it): every ACK echoed it, so the peer got no RTT
/// sample, and with TS.Recent stale for good PAWS dropped nothing any more.
#[test]
fn rfc7323_5_5_a_stale_ts_recent_takes_the_next_segments_tsval() {
    let mut config = cfg();
    config.keep_alive = None;
    config.timeout = None;
    let mut c = established(config, false);
    let ts = |tsval| Some(TcpTimestampRepr { tsval, tsecr: 0 });
    // 40 minutes later the peer's clock (it sent 1 in its SYN-ACK) has moved 2.4e9 us.
    let later = ms(40 * 60 * 1000);
    let tsval = 1u32.wrapping_add(2_400_000_000);
    let mut s = data(0, b"late", ISS + 1);
    s.timestamp = ts(tsval);
    c.handle_segment(later, &s);
    assert_eq!(c.recv_queue(), 4, "PAWS lets it through");
    let out = drain(&mut c, later);
    assert_eq!(out.len(), 1);
    assert_eq!(
        out[0].ts.map(|t| t.tsecr),
        Some(tsval),
        "the echo is the new TSval"
    );
    // PAWS works again: a segment with an older TSval is dropped.
    let mut old = data(4, b"old", ISS + 1);
    old.timestamp = ts(tsval.wrapping_sub(1000));
    c.handle_segment(later + Duration::from_millis(1), &old);
    assert_eq!(c.recv_queue(), 4);
    assert_eq!(c.stats().paws_dropped, 1);
}

/// RFC 9293 3.8.6.1: a receiver whose window is shut does not take the probe's octet (it is
/// not acceptable, 3.10.7.4; Linux drops it too) and answers with its zero window. When its
/// window opens it sends a window update that acknowledges nothing new; the probe's octet,
/// never taken, goes again at once and the data follows its ACK. Before, nothing went out
/// until the probe's retransmission timer fired: backed off through the probes (and not
/// reset by the peer's answers), up to a minute after the window opened.
#[test]
fn rfc9293_3_8_6_1_a_reopened_window_resends_the_probe_at_once() {
    let mut c = established(cfg(), true);
    let mut zero = seg(TcpControl::None, PISS + 1, Some(ISS + 1), &[]);
    zero.window_len = 0;
    c.handle_segment(ms(2), &zero);
    assert!(send(&mut c, ms(2), 3000).is_empty());
    // Thirty seconds of a shut window: each probe draws the zero window again.
    let mut now = ms(2);
    let mut probes = 0;
    while now < ms(30_000) {
        let next = now + Duration::from_millis(10);
        for (t, o) in run_until(&mut c, now, next) {
            assert_eq!((o.seq, o.payload.len()), (ISS + 1, 1), "{o:?}");
            probes += 1;
            c.handle_segment(t, &zero);
        }
        now = next;
    }
    assert!(probes >= 4, "{probes} probes");
    assert_eq!(c.state(), State::Established);
    // The window opens.
    let open = seg(TcpControl::None, PISS + 1, Some(ISS + 1), &[]);
    c.handle_segment(now, &open);
    let out = drain(&mut c, now);
    assert!(
        out.iter()
            .any(|o| o.seq == ISS + 1 && !o.payload.is_empty()),
        "the octet at SND.UNA goes again at once: {out:?}"
    );
    // The probing left the congestion window as it was: the rest follows at once.
    assert_eq!(out.get(1).map(|o| o.seq), Some(ISS + 2), "{out:?}");
    let total: usize = out.iter().map(|o| o.payload.len()).sum();
    assert_eq!(total, 3000);
}

/// RFC 1122 4.2.3.6: keep-alive probes go only when nothing came from the peer for a whole
/// interval. A segment heard since the last tick moves the next probe to one interval after
/// it. Before, the tick sent a probe whenever nothing was outstanding at that instant, every
/// interval, however busy the connection (a request/response exchange drew one every
/// keep-alive interval).
#[test]
fn rfc1122_4_2_3_6_no_keep_alive_within_an_interval_of_the_peers_last_segment() {
    let mut config = cfg();
    config.keep_alive = Some(Duration::from_secs(1));
    config.timeout = Some(Duration::from_secs(3));
    let mut c = established(config, true);
    // The peer's data at 900 ms (the tick is due at 1,001 ms).
    c.handle_segment(ms(900), &data(0, b"req", ISS + 1));
    let _ = drain(&mut c, ms(900));
    let out = run_until(&mut c, ms(900), ms(1_850));
    assert!(
        out.is_empty(),
        "a keep-alive 0.1 s after the peer spoke: {out:?}"
    );
    let out = run_until(&mut c, ms(1_850), ms(1_950));
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(
        (out[0].0, out[0].1.seq),
        (ms(1_900), ISS),
        "one interval after it"
    );
    assert_eq!(c.stats().keepalives, 1);
}

/// RFC 1122 4.2.3.3 (MUST) and RFC 9293 3.8.6.2.2: receiver SWS avoidance. The right edge
/// of the window offered moves on only by at least min(buffer / 2, MSS): a buffer that
/// filled and was read from in small pieces keeps offering a zero window, not the few
/// octets read, until that much is free. Before, every ACK offered whatever was free: a
/// zero-window probe drew an offer of 100 octets, which a sender fills with a segment of
/// 100 (Linux's probe timer sends what the window allows), the silly window syndrome.
#[test]
fn rfc1122_4_2_3_3_the_window_offered_opens_by_an_mss_or_not_at_all() {
    let mut config = cfg();
    config.rx_buffer = 8192;
    let mut c = established(config, true);
    let mut off = 0;
    while off < 8192 {
        let n = (8192 - off).min(1460);
        c.handle_segment(ms(2), &data(off, &[3; 1460][..n], ISS + 1));
        off += n;
    }
    let out = drain(&mut c, ms(2));
    assert_eq!(out.last().map(|o| o.window), Some(0), "{out:?}");
    let mut buf = [0u8; 1400];
    assert_eq!(c.recv(&mut buf[..100]), Ok(100));
    assert!(
        drain(&mut c, ms(3)).is_empty(),
        "no window update for 100 octets"
    );
    // The peer's zero-window probe (Linux's: SND.UNA - 1, no data) draws an ACK.
    let probe = seg(TcpControl::None, PISS + 8192, Some(ISS + 1), &[]);
    c.handle_segment(ms(4), &probe);
    let out = drain(&mut c, ms(4));
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].window, 0, "the edge stays until an MSS is free");
    // 1,500 octets free: the window update offers them all.
    assert_eq!(c.recv(&mut buf), Ok(1400));
    let out = drain(&mut c, ms(5));
    assert_eq!(out.len(), 1, "{out:?}");
    assert_eq!(out[0].window, 1500);
}

/// RFC 7323 2.2: the window of a SYN-ACK is never scaled, also the one that completes a
/// simultaneous open (taken as the peer's ACK in SYN-RECEIVED): taken as a scaled window
/// once the SYN was stripped, with a shift of 1 and the SYN-ACK's 65,535, the sender saw
/// 131,070 octets of window where the peer had offered 65,535, and sent past the peer's
/// buffer. And the peer's SYN-ACK may come before ours left (it answers our SYN, sent
/// from SYN-SENT): it acknowledges our SYN all the same (SYN-RECEIVED kept SND.NXT past
/// it; resetting it made the ACK one of a SYN never sent), and our ACK of the peer's SYN
/// then establishes the peer.
#[test]
fn rfc7323_2_2_the_simultaneous_open_syn_ack_window_is_not_scaled() {
    let mut config = cfg();
    config.recovery.congestion = warpcore_tcp::recovery::Congestion::None;
    let peer_ep = Endpoints {
        local: PEER,
        remote: US,
    };
    let mut a = Connection::connect(&config, ep(), ISS, ms(0));
    let mut b = Connection::connect(&config, peer_ep, PISS, ms(0));
    let carry = |o: &Out, to: &mut Connection, now: Instant| {
        let mut s = seg(o.control, o.seq, o.ack, &o.payload);
        s.window_len = o.window;
        s.max_seg_size = o.mss;
        s.window_scale = o.ws;
        s.sack_permitted = o.sack_permitted;
        s.timestamp = o.ts;
        to.handle_segment(now, &s);
    };
    let (sa, sb) = (drain(&mut a, ms(0)), drain(&mut b, ms(0)));
    assert_eq!(sb[0].ws, Some(1), "64 KiB buffers: a shift of 1");
    carry(&sa[0], &mut b, ms(1));
    carry(&sb[0], &mut a, ms(1));
    // B's SYN-ACK reaches A (and nothing else: A's answer is left in flight).
    let from_b = drain(&mut b, ms(2));
    assert_eq!(from_b.len(), 1);
    assert_eq!(
        (from_b[0].control, from_b[0].window),
        (TcpControl::Syn, 0xffff)
    );
    carry(&from_b[0], &mut a, ms(2));
    assert_eq!(a.state(), State::Established);
    // A's SYN-ACK had not left: A's ACK of B's SYN establishes B.
    let from_a = drain(&mut a, ms(2));
    assert_eq!(from_a.len(), 1, "{from_a:?}");
    assert_eq!(from_a[0].ack, Some(PISS + 1));
    carry(&from_a[0], &mut b, ms(2));
    assert_eq!(b.state(), State::Established);
    // A sends into B's window of 65,535 octets and no further.
    let v = vec![1u8; 200_000];
    assert_eq!(a.send(&v), Ok(200_000));
    let sent: usize = drain(&mut a, ms(3)).iter().map(|o| o.payload.len()).sum();
    assert!(sent <= 0xffff, "{sent} octets sent into a window of 65,535");
}

// ------------------------------------------------------------------ hostile segments
// RFC 9293 3.10.7.4's checks, RFC 5961's blind-injection defences and RFC 2018 / 2883 SACK
// validation, each pinned by the segment an attacker (or a broken peer) would send.

/// RFC 5961 7: challenge ACKs (for in-window RSTs, 3.2, and SYNs, 4.2) are limited, here to
/// ten a second, so a flood of forged segments cannot turn us into an ACK reflector; the
/// limit starts again a second later. (The interval every ACK answering a bad segment keeps,
/// `oow_ack_interval`, is off here: `rfc5961_7_challenge_acks_share_the_oow_interval`.)
#[test]
fn rfc5961_7_challenge_acks_are_rate_limited() {
    let mut config = cfg();
    config.oow_ack_interval = Duration::ZERO;
    let mut c = established(config, true);
    let mut acks = 0;
    for i in 0..15u32 {
        // RFC 5961 3.2 and 4.2: in-window RSTs and SYNs alternate, one shared limit.
        let control = if i % 2 == 0 {
            TcpControl::Rst
        } else {
            TcpControl::Syn
        };
        c.handle_segment(ms(2), &seg(control, PISS + 100 + i as usize, None, &[]));
        acks += drain(&mut c, ms(2)).len();
    }
    assert_eq!(c.state(), State::Established);
    assert_eq!(acks, 10, "ten challenge ACKs in the first second");
    assert_eq!(c.stats().challenge_acks, 10);
    // A second on, the next one is answered again.
    c.handle_segment(ms(1003), &seg(TcpControl::Rst, PISS + 100, None, &[]));
    let out = drain(&mut c, ms(1003));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].ack, Some(PISS + 1));
    assert_eq!(c.stats().challenge_acks, 11);
}

/// RFC 5961 4.2 (RFC 9293 3.10.7.4 fourth): a SYN in a synchronized state draws a challenge
/// ACK "irrespective of the sequence number": also one outside the window, which the first
/// check would otherwise answer with an ACK of its own for every copy, past the challenge
/// ACK limit (RFC 5961 7). The connection is untouched either way.
#[test]
fn rfc5961_4_2_a_syn_outside_the_window_draws_a_limited_challenge_ack() {
    let mut config = cfg();
    config.oow_ack_interval = Duration::ZERO;
    let mut c = established(config, true);
    let mut acks = Vec::new();
    for i in 0..15usize {
        // RFC 9293 3.10.7.4 first check fails: far past the window, or long before it.
        let seq = if i % 2 == 0 {
            PISS + 10_000_000
        } else {
            PISS - 10_000_000
        };
        c.handle_segment(ms(2), &seg(TcpControl::Syn, seq, None, &[]));
        acks.extend(drain(&mut c, ms(2)));
    }
    assert_eq!(c.state(), State::Established);
    assert_eq!(acks.len(), 10, "{acks:?}");
    assert!(acks
        .iter()
        .all(|o| o.control == TcpControl::None && o.ack == Some(PISS + 1) && o.seq == ISS + 1));
    assert_eq!(c.stats().challenge_acks, 10);
    // Data still flows from where it was.
    c.handle_segment(ms(3), &data(0, b"abc", ISS + 1));
    assert_eq!(c.recv_queue(), 3);
}

/// Challenge ACKs also keep the interval of every ACK that answers a bad segment
/// (`oow_ack_interval`, 500 ms), as Linux's `tcp_send_challenge_ack` checks
/// `__tcp_oow_rate_limited` before its per-second budget: a flood of forged RSTs, SYNs and
/// stale pure ACKs draws one ACK per interval in all, not one per interval of each kind
/// plus ten challenge ACKs a second. The rest are counted as suppressed.
#[test]
fn rfc5961_7_challenge_acks_share_the_oow_interval() {
    let mut c = established(cfg(), true);
    assert_eq!(cfg().oow_ack_interval, Duration::from_millis(500));
    let mut acks = Vec::new();
    for i in 0..15u32 {
        let s = match i % 3 {
            0 => seg(TcpControl::Rst, PISS + 100 + i as usize, None, &[]),
            1 => seg(TcpControl::Syn, PISS + 100, None, &[]),
            _ => seg(TcpControl::None, PISS, Some(ISS + 1), &[]),
        };
        c.handle_segment(ms(2), &s);
        acks.extend(drain(&mut c, ms(2)));
    }
    assert_eq!(acks.len(), 1, "one ACK for the whole flood: {acks:?}");
    assert_eq!((acks[0].seq, acks[0].ack), (ISS + 1, Some(PISS + 1)));
    assert_eq!(c.stats().challenge_acks, 1, "the first RST's");
    assert_eq!(c.stats().oow_acks_suppressed, 14);
    // A stale pure ACK answered at 300 ms would have reset the clock; none was, so a SYN
    // 500 ms after the first challenge draws the next one, and one 100 ms later does not.
    c.handle_segment(ms(502), &seg(TcpControl::Syn, PISS + 100, None, &[]));
    assert_eq!(drain(&mut c, ms(502)).len(), 1, "500 ms after the last one");
    c.handle_segment(ms(602), &seg(TcpControl::Rst, PISS + 100, None, &[]));
    assert!(drain(&mut c, ms(602)).is_empty());
    assert_eq!(c.stats().challenge_acks, 2);
    assert_eq!(c.state(), State::Established);
    // The connection is as it was.
    c.handle_segment(ms(603), &data(0, b"abc", ISS + 1));
    assert_eq!(c.recv_queue(), 3);
}

/// RFC 9293 3.10.7.4 first check, all four rows of the acceptability table: a segment
/// outside RCV.NXT..RCV.NXT+RCV.WND (data or not, window open or shut) moves nothing and is
/// answered with <SEQ=SND.NXT><ACK=RCV.NXT><CTL=ACK>; the acceptable ones are taken.
/// Every unacceptable segment here is answered: the limit on ACKs for those without data
/// (`oow_ack_interval`, pinned by the tests after `rfc5961_7_...`) is off, as this test is
/// about which segments the table refuses, within a few milliseconds.
#[test]
fn rfc9293_3_10_7_4_unacceptable_segments_move_nothing_and_draw_an_ack() {
    let mut config = cfg();
    config.rx_buffer = 4096;
    config.oow_ack_interval = Duration::ZERO;
    let mut c = established(config, true);
    let wnd = 4096usize;
    // Open window, no data: SEG.SEQ below RCV.NXT or at the right edge is unacceptable.
    for seq in [PISS, PISS + 1 + wnd] {
        c.handle_segment(ms(2), &seg(TcpControl::None, seq, Some(ISS + 1), &[]));
        let out = drain(&mut c, ms(2));
        assert_eq!(out.len(), 1, "{seq}");
        assert_eq!((out[0].seq, out[0].ack), (ISS + 1, Some(PISS + 1)));
    }
    // Open window, data wholly past the right edge: not taken, not held for later.
    c.handle_segment(ms(3), &data(wnd, &[9; 100], ISS + 1));
    assert_eq!(drain(&mut c, ms(3))[0].ack, Some(PISS + 1));
    assert_eq!(c.recv_queue(), 0);
    // Data starting in the window but running past it: only the part inside is taken.
    c.handle_segment(ms(4), &data(0, &[1; 5000], ISS + 1));
    assert_eq!(c.recv_queue(), wnd);
    let out = drain(&mut c, ms(4));
    assert_eq!(out.last().unwrap().ack, Some(PISS + 1 + wnd));
    assert_eq!(
        out.last().unwrap().window,
        0,
        "the buffer is full: window shut"
    );
    // Shut window: the octets of data at RCV.NXT (one or many) are not taken, answered
    // (its ACK is: `conn_window.rs`, `rfc9293_3_10_7_4_a_shut_receive_window_still_takes_the_ack`).
    c.handle_segment(ms(5), &data(wnd, &[2; 10], ISS + 1));
    let out = drain(&mut c, ms(5));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].ack, Some(PISS + 1 + wnd));
    assert_eq!(c.recv_queue(), wnd);
    // Shut window, no data, SEG.SEQ = RCV.NXT: acceptable, and its window update is taken:
    // our data can go once the peer's window opens.
    let mut shut = seg(TcpControl::None, PISS + 1 + wnd, Some(ISS + 1), &[]);
    shut.window_len = 0;
    c.handle_segment(ms(6), &shut);
    assert!(drain(&mut c, ms(6)).is_empty());
    c.send(b"hello").unwrap();
    assert!(drain(&mut c, ms(6)).iter().all(|o| o.payload.is_empty()));
    // Shut window, no data, SEG.SEQ elsewhere: unacceptable, its window ignored.
    let mut open = seg(TcpControl::None, PISS + 2 + wnd, Some(ISS + 1), &[]);
    open.window_len = 1000;
    c.handle_segment(ms(7), &open);
    let out = drain(&mut c, ms(7));
    assert!(out.iter().all(|o| o.payload.is_empty()), "{out:?}");
    assert_eq!(out.len(), 1);
}

/// RFC 5961 5.2: SEG.ACK below SND.UNA - MAX.SND.WND (a blind injection's guess) is no
/// acceptable ACK: the segment is dropped, its data not taken, and an ACK tells the peer
/// where we are.
#[test]
fn rfc5961_5_2_an_ack_older_than_the_largest_window_is_dropped_and_answered() {
    let mut c = established(cfg(), true);
    // MAX.SND.WND is the peer's 65535 (no window scaling in the plain handshake).
    c.handle_segment(ms(2), &data(0, b"abc", ISS + 1 - 70_000));
    assert_eq!(c.recv_queue(), 0, "the injected data was taken");
    let out = drain(&mut c, ms(2));
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].ack, Some(PISS + 1));
    // Within MAX.SND.WND of SND.UNA an old ACK is acceptable: the data is taken.
    c.handle_segment(ms(3), &data(0, b"abc", ISS + 1 - 60_000));
    assert_eq!(c.recv_queue(), 3);
}

/// RFC 2018 3 and RFC 6675 (the scoreboard holds only SND.UNA..SND.NXT): SACK blocks that
/// lie beyond SND.NXT, below SND.UNA (not first, so no D-SACK, RFC 2883 4) or are empty or
/// inverted are ignored: the connection does exactly what it does for the same ACK without
/// them (no loss marked, no retransmission, no recovery).
#[test]
fn rfc2018_3_sack_blocks_outside_snd_una_to_snd_nxt_leave_the_scoreboard_alone() {
    let base = ISS.0 as u32 + 1;
    let nxt = base + 4 * 1448;
    let bogus = [
        // Beyond SND.NXT: data never sent "received".
        [Some((nxt, nxt + 1448)), Some((base + 1448, nxt + 1)), None],
        // Inverted, empty, and wrapping across the whole space.
        [
            Some((base + 2 * 1448, base + 1448)),
            Some((base + 1448, base + 1448)),
            Some((nxt, base + 1448)),
        ],
        // Below SND.UNA, after a first valid-looking block outside the window.
        [
            Some((nxt + 1, nxt + 2)),
            Some((base.wrapping_sub(5000), base.wrapping_sub(1000))),
            Some((base.wrapping_sub(1 << 31), base + 1448)),
        ],
    ];
    for blocks in bogus {
        let mut runs = Vec::new();
        for with in [false, true] {
            let mut c = established(cfg(), false);
            let out = send(&mut c, ms(2), 4 * 1448);
            assert_eq!(out.len(), 4);
            let mut a = stamped(seg(TcpControl::None, PISS + 1, Some(ISS + 1), &[]));
            if with {
                a.sack_ranges = blocks;
            }
            c.handle_segment(ms(3), &a);
            let out: Vec<_> = run_until(&mut c, ms(3), ms(50))
                .into_iter()
                .map(|(t, o)| (t, o.seq, o.payload.len()))
                .collect();
            let s = c.stats().recovery;
            runs.push((out, s.fast_recoveries, s.dsacks_received, s.rto_count));
        }
        assert_eq!(runs[0], runs[1], "blocks {blocks:?}");
        assert_eq!(runs[1].1, 0, "no recovery for {blocks:?}");
    }
}

/// RFC 2883 4 (a D-SACK block reports one duplicate segment) and RFC 3708 5 (a receiver's
/// D-SACKs may lie): a first block below SEG.ACK that is longer than the largest window the
/// peer ever offered cannot report a duplicate it received; it is ignored (Linux's "dubious
/// DSACK"), not counted and not taken as evidence of reordering. A D-SACK of one segment is.
#[test]
fn rfc2883_4_a_dsack_block_wider_than_the_peer_window_is_ignored() {
    let base = ISS.0 as u32 + 1;
    for (block, counted) in [
        ((base, base + 1448), 1),
        ((base.wrapping_sub(20_000_000), base + 1448), 0),
    ] {
        let mut c = established(cfg(), false);
        send(&mut c, ms(2), 4 * 1448);
        let end = ISS + 1 + 4 * 1448;
        c.handle_segment(
            ms(3),
            &stamped(seg(TcpControl::None, PISS + 1, Some(end), &[])),
        );
        let mut d = stamped(seg(TcpControl::None, PISS + 1, Some(end), &[]));
        d.sack_ranges = [Some(block), None, None];
        c.handle_segment(ms(4), &d);
        assert_eq!(
            c.stats().recovery.dsacks_received,
            counted,
            "block {block:?}"
        );
    }
}

/// RFC 2018 3: an option of n blocks is 8n + 2 octets, so 40 octets of options hold four
/// (without timestamps). Parsed from the wire by smoltcp, such an option keeps its first
/// three blocks (the first is the most recent, RFC 2018 4; smoltcp drops the fourth, which
/// the host reads from the octets and hands over with
/// `Connection::handle_segment_with_fourth_sack`): no parse error, no panic, and the blocks
/// kept are used.
#[test]
fn rfc2018_3_four_sack_blocks_from_the_wire_keep_the_first_three() {
    use smoltcp::phy::ChecksumCapabilities;
    use smoltcp::wire::{IpAddress, TcpPacket};
    let mut c = established(cfg(), true);
    let mut c_sack = established(
        ConnConfig {
            timestamps: false,
            ..cfg()
        },
        false,
    );
    for c in [&mut c, &mut c_sack] {
        assert_eq!(send(c, ms(2), 4 * 1448).len(), 4);
    }
    let base = ISS.0 as u32 + 1;
    let blocks: [(u32, u32); 4] = [
        (base + 1448, base + 4 * 1448), // segments 2..4: segment 1 is the hole
        (base + 5 * 1448, base + 6 * 1448), // past SND.NXT: ignored
        (base + 2 * 1448, base + 1448), // inverted: ignored
        (base, base + 4 * 1448),        // the fourth: not kept
    ];
    let mut bytes = [0u8; 20 + 36];
    bytes[0..2].copy_from_slice(&PEER.1.to_be_bytes());
    bytes[2..4].copy_from_slice(&US.1.to_be_bytes());
    bytes[4..8].copy_from_slice(&((PISS.0 as u32) + 1).to_be_bytes());
    bytes[8..12].copy_from_slice(&base.to_be_bytes());
    bytes[12] = (56 / 4) << 4;
    bytes[13] = 0x10; // ACK
    bytes[14..16].copy_from_slice(&0xffffu16.to_be_bytes());
    bytes[20..24].copy_from_slice(&[1, 1, 5, 34]); // NOP, NOP, SACK of 4 blocks
    for (i, (l, r)) in blocks.iter().enumerate() {
        bytes[24 + 8 * i..28 + 8 * i].copy_from_slice(&l.to_be_bytes());
        bytes[28 + 8 * i..32 + 8 * i].copy_from_slice(&r.to_be_bytes());
    }
    let packet = TcpPacket::new_checked(&bytes[..]).expect("a whole header");
    let repr = TcpRepr::parse(
        &packet,
        &IpAddress::from(PEER.0),
        &IpAddress::from(US.0),
        &ChecksumCapabilities::ignored(),
    )
    .expect("four SACK blocks parse");
    assert_eq!(
        repr.sack_ranges,
        [Some(blocks[0]), Some(blocks[1]), Some(blocks[2])]
    );
    // The plain connection (no SACK negotiated) ignores the option; the SACK one takes
    // the first block and marks the hole lost (RFC 8985 6.2).
    c.handle_segment(ms(3), &repr);
    c_sack.handle_segment(ms(3), &repr);
    run_until(&mut c, ms(3), ms(5));
    let out = run_until(&mut c_sack, ms(3), ms(5));
    assert_eq!(c.stats().recovery.fast_recoveries, 0);
    assert_eq!(c_sack.stats().recovery.fast_recoveries, 1, "{out:?}");
    assert!(out
        .iter()
        .any(|(_, o)| o.seq == ISS + 1 && !o.payload.is_empty()));
}

// ------------------------------------------------------------------ ACK loops
// RFC 9293 3.10.7.4 answers every unacceptable segment with an ACK and RFC 5961 5.2 every
// ACK outside SND.UNA - MAX.SND.WND ..= SND.NXT; RFC 5961 7 limits only challenge ACKs. So
// two endpoints out of step (each segment of one outside the other's window), or a forger
// reflecting off us, could trade such ACKs for ever. As Linux (`tcp_oow_rate_limited`,
// sysctl `tcp_invalid_ratelimit`, 500 ms): an ACK answering a segment without data outside
// the window, or an ACK outside 5.2's range, goes at most once per
// `ConnConfig::oow_ack_interval`; data outside the window is still answered every time.

/// A burst of pure ACKs outside the window (old ones, and ones past its right edge) draws
/// one ACK per `oow_ack_interval` (500 ms), not one each; the rest are counted.
#[test]
fn rfc9293_3_10_7_4_out_of_window_pure_acks_draw_one_ack_per_interval() {
    let mut c = established(cfg(), true);
    assert_eq!(cfg().oow_ack_interval, Duration::from_millis(500));
    let wnd = cfg().rx_buffer;
    let mut acks = Vec::new();
    for i in 0..20usize {
        let seq = if i % 2 == 0 { PISS } else { PISS + 1 + wnd + i };
        c.handle_segment(ms(2), &seg(TcpControl::None, seq, Some(ISS + 1), &[]));
        acks.extend(drain(&mut c, ms(2)));
    }
    assert_eq!(acks.len(), 1, "one ACK for the burst: {acks:?}");
    assert_eq!((acks[0].seq, acks[0].ack), (ISS + 1, Some(PISS + 1)));
    assert_eq!(c.stats().oow_acks_suppressed, 19);
    assert_eq!(
        c.stats().duplicates,
        20,
        "each is still counted as unacceptable"
    );
    // Within the interval: none; from its end on: the next one is answered.
    c.handle_segment(ms(501), &seg(TcpControl::None, PISS, Some(ISS + 1), &[]));
    assert!(drain(&mut c, ms(501)).is_empty());
    c.handle_segment(ms(502), &seg(TcpControl::None, PISS, Some(ISS + 1), &[]));
    assert_eq!(drain(&mut c, ms(502)).len(), 1, "500 ms after the last one");
    c.handle_segment(ms(700), &seg(TcpControl::None, PISS, Some(ISS + 1), &[]));
    assert!(drain(&mut c, ms(700)).is_empty());
    assert_eq!(c.stats().oow_acks_suppressed, 21);
    // The connection is as it was: in-order data is taken and acknowledged.
    c.handle_segment(ms(701), &data(0, b"abc", ISS + 1));
    assert_eq!(c.recv_queue(), 3);
    assert_eq!(drain(&mut c, ms(701)).last().unwrap().ack, Some(PISS + 4));
}

/// Linux: "Data packets without SYNs are not likely part of an ACK loop". Data (or a FIN)
/// outside the window draws its ACK every time (RFC 9293 3.10.7.4), even while pure ACKs
/// outside it are being held back, and duplicate ACKs for in-window out-of-order data
/// (RFC 5681 4.2) go one per segment as before.
#[test]
fn rfc9293_3_10_7_4_out_of_window_data_still_draws_an_ack_each() {
    let mut c = established(cfg(), true);
    c.handle_segment(ms(2), &data(0, b"abcdef", ISS + 1));
    assert_eq!(drain(&mut c, ms(2)).last().unwrap().ack, Some(PISS + 7));
    let mut acks = Vec::new();
    for _ in 0..5 {
        // An old pure ACK (limited), then octets received before, then an old FIN.
        c.handle_segment(ms(3), &seg(TcpControl::None, PISS, Some(ISS + 1), &[]));
        acks.push(drain(&mut c, ms(3)).len());
        c.handle_segment(ms(3), &data(0, b"abc", ISS + 1));
        acks.push(drain(&mut c, ms(3)).len());
        c.handle_segment(ms(3), &seg(TcpControl::Fin, PISS + 2, Some(ISS + 1), &[]));
        acks.push(drain(&mut c, ms(3)).len());
    }
    assert_eq!(
        acks,
        [1, 1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1],
        "pure ACK, data, FIN: only the pure ACKs after the first go unanswered"
    );
    assert_eq!(c.stats().oow_acks_suppressed, 4);
    assert_eq!(c.recv_queue(), 6, "nothing taken twice");
    // Out-of-order data in the window: one duplicate ACK per segment.
    for k in 0..4usize {
        c.handle_segment(ms(4), &data(100 + 10 * k, &[7; 5], ISS + 1));
        let out = drain(&mut c, ms(4));
        assert_eq!(out.len(), 1, "segment {k}");
        assert_eq!(out[0].ack, Some(PISS + 7));
    }
    assert_eq!(c.stats().oow_acks_suppressed, 4);
}

/// RFC 5961 5.2: SEG.ACK above SND.NXT or below SND.UNA - MAX.SND.WND drops the segment and
/// draws an ACK, at most one per interval whether or not the segment carries data (Linux
/// answers a too old ACK with `tcp_send_challenge_ack`, under `__tcp_oow_rate_limited`),
/// as its data is never taken. The interval is shared with the first check's ACKs.
#[test]
fn rfc5961_5_2_acks_outside_the_range_draw_one_ack_per_interval() {
    let mut c = established(cfg(), true);
    let mut acks = Vec::new();
    for i in 0..10u32 {
        let ack = if i % 2 == 0 {
            ISS + 1 + 100_000
        } else {
            ISS + 1 - 70_000
        };
        c.handle_segment(ms(2), &data(0, b"abc", ack));
        acks.extend(drain(&mut c, ms(2)));
        c.handle_segment(ms(2), &seg(TcpControl::None, PISS + 1, Some(ack), &[]));
        acks.extend(drain(&mut c, ms(2)));
    }
    assert_eq!(acks.len(), 1, "{acks:?}");
    assert_eq!(acks[0].ack, Some(PISS + 1));
    assert_eq!(c.recv_queue(), 0, "no data taken");
    assert_eq!(c.stats().oow_acks_suppressed, 19);
    // Shared with the first check: an old pure ACK within the interval is not answered.
    c.handle_segment(ms(300), &seg(TcpControl::None, PISS, Some(ISS + 1), &[]));
    assert!(drain(&mut c, ms(300)).is_empty());
    c.handle_segment(ms(502), &data(0, b"abc", ISS + 1 + 100_000));
    assert_eq!(drain(&mut c, ms(502)).len(), 1);
}

/// RFC 7323 5.3: a segment PAWS rejects draws an ACK; one without data at most once per
/// interval (Linux: the same `tcp_oow_rate_limited`, `TCPACKSkippedPAWS`), one with data
/// every time.
#[test]
fn rfc7323_5_3_paws_rejected_pure_acks_draw_one_ack_per_interval() {
    let mut c = established(cfg(), false);
    let mut s = data(0, b"new", ISS + 1);
    s.timestamp = Some(TcpTimestampRepr {
        tsval: 100,
        tsecr: 0,
    });
    c.handle_segment(ms(2), &s);
    drain(&mut c, ms(2));
    let old = TcpTimestampRepr {
        tsval: 50,
        tsecr: 0,
    };
    let mut acks = 0;
    for _ in 0..6 {
        let mut p = seg(TcpControl::None, PISS + 4, Some(ISS + 1), &[]);
        p.timestamp = Some(old);
        c.handle_segment(ms(3), &p);
        acks += drain(&mut c, ms(3)).len();
    }
    assert_eq!(acks, 1);
    assert_eq!(c.stats().paws_dropped, 6);
    assert_eq!(c.stats().oow_acks_suppressed, 5);
    let mut d = data(3, b"old", ISS + 1);
    d.timestamp = Some(old);
    for _ in 0..3 {
        c.handle_segment(ms(3), &d);
        assert_eq!(
            drain(&mut c, ms(3)).len(),
            1,
            "data PAWS rejects is answered"
        );
    }
    assert_eq!(c.recv_queue(), 3);
}

// ------------------------------------------- SYN-RECEIVED's ACKs, a RST's data, RFC 6298 5.7

/// RFC 5961 3.2 ("in all states except SYN-SENT") and 4.2, RFC 9293 3.10.7.4 first
/// check: in SYN-RECEIVED an in-window RST that is not exact, or a SYN with another
/// sequence number (the client came back from the same port with a new ISN), draws a
/// challenge ACK: a bare ACK of the peer's first SYN, SEG.SEQ = SND.NXT. The client's
/// SYN-SENT answers it with <SEQ=SEG.ACK><CTL=RST> (RFC 9293 3.10.7.3), exactly at our
/// RCV.NXT, which clears the stale half-open connection (3.5.1), and nothing goes after.
/// (Nothing went out: the SYN states sent only their SYN, so the `ack_now` the challenge
/// set waited for the handshake's end.)
#[test]
fn rfc5961_3_2_and_4_2_syn_received_draws_a_challenge_ack() {
    let mut syn2 = seg(TcpControl::Syn, PISS + 1_000_000, None, &[]);
    syn2.max_seg_size = Some(1460);
    let cases = [
        ("in-window RST", seg(TcpControl::Rst, PISS + 100, None, &[])),
        ("SYN with a new ISN", syn2),
    ];
    for (name, provocation) in cases {
        let mut c = syn_received();
        c.handle_segment(ms(1), &provocation);
        assert_eq!(c.state(), State::SynReceived, "{name}");
        let out = drain(&mut c, ms(1));
        assert_eq!(out.len(), 1, "{name}: one challenge ACK: {out:?}");
        assert_eq!(
            (out[0].control, out[0].seq, out[0].ack),
            (TcpControl::None, ISS + 1, Some(PISS + 1)),
            "{name}: a bare ACK of the peer's SYN: {out:?}"
        );
        c.handle_segment(ms(2), &seg(TcpControl::Rst, PISS + 1, None, &[]));
        assert_eq!(c.state(), State::Closed, "{name}");
        assert!(run_until(&mut c, ms(2), ms(5_000)).is_empty(), "{name}");
    }
}

/// RFC 9293 3.10.7.4: with RCV.WND zero "special allowance should be made to accept valid
/// ACKs, URGs, and RSTs"; RFC 9293 3.5.3 / RFC 1122 4.2.2.12: a RST may carry data
/// (diagnostics). A RST exactly at RCV.NXT carrying a payload resets the connection when
/// the receive buffer is full (its octets took no part in the acceptability test).
#[test]
fn rfc9293_3_10_7_4_a_rst_with_data_at_rcv_nxt_resets_with_a_zero_window() {
    let config = ConnConfig {
        rx_buffer: 1000,
        ..cfg()
    };
    let mut c = established(config, true);
    let fill = [7u8; 1000];
    c.handle_segment(ms(2), &data(0, &fill, ISS + 1));
    assert_eq!(c.recv_queue(), 1000);
    drain(&mut c, ms(2));
    let rst = seg(TcpControl::Rst, PISS + 1 + 1000, None, b"reason");
    c.handle_segment(ms(3), &rst);
    assert_eq!(
        c.state(),
        State::Closed,
        "exact RST with data ignored at zero window"
    );
}

/// RFC 6298 5.7: "If the timer expires awaiting the ACK of a SYN segment and the TCP
/// implementation is using an RTO less than 3 seconds, the RTO MUST be re-initialized to 3
/// seconds when data transmission begins (i.e., after the three-way handshake completes)."
/// The SYN went twice (no RTT sample by Karn, no timestamps): 3 s, not the backed-off 2 s.
#[test]
fn rfc6298_5_7_rto_is_three_seconds_after_a_syn_timeout() {
    let mut c = Connection::connect(&cfg(), ep(), ISS, ms(0));
    let syn = drain(&mut c, ms(0));
    assert_eq!(syn.len(), 1);
    let out = run_until(&mut c, ms(0), ms(1500));
    assert_eq!(
        out.iter()
            .filter(|(_, o)| o.control == TcpControl::Syn)
            .count(),
        1,
        "one SYN retransmission at 1 s: {out:?}"
    );
    let mut sa = seg(TcpControl::Syn, PISS, Some(ISS + 1), &[]);
    sa.max_seg_size = Some(1460);
    c.handle_segment(ms(1500), &sa);
    assert_eq!(c.state(), State::Established);
    drain(&mut c, ms(1500));
    assert_eq!(
        c.stats().recovery.rto_us,
        3_000_000,
        "RTO after the handshake"
    );
}

/// RFC 6298 5.7's fallback only follows a SYN timeout: a SYN answered before its timer
/// expired is timed (no timestamps; Karn's rule allows it), and the RTO comes from that
/// sample (2.2: 900 ms + 4 x 450 ms), not the 3 s fallback.
#[test]
fn rfc6298_5_7_a_syn_answered_in_time_sets_the_rto_from_its_sample() {
    let mut c = Connection::connect(&cfg(), ep(), ISS, ms(0));
    assert_eq!(drain(&mut c, ms(0)).len(), 1);
    let mut sa = seg(TcpControl::Syn, PISS, Some(ISS + 1), &[]);
    sa.max_seg_size = Some(1460);
    c.handle_segment(ms(900), &sa);
    assert_eq!(c.state(), State::Established);
    drain(&mut c, ms(900));
    assert_eq!(c.stats().recovery.rto_us, 2_700_000);
}

/// RFC 6298 5.7 on the passive side: the SYN-ACK timed out and went again; the ACK that
/// ends the handshake gives no sample (Karn, no timestamps): 3 s.
#[test]
fn rfc6298_5_7_rto_is_three_seconds_after_a_syn_ack_timeout() {
    let mut c = syn_received();
    let out = run_until(&mut c, ms(0), ms(1500));
    assert_eq!(
        out.iter()
            .filter(|(_, o)| o.control == TcpControl::Syn)
            .count(),
        1,
        "one SYN-ACK retransmission at 1 s: {out:?}"
    );
    c.handle_segment(
        ms(1500),
        &seg(TcpControl::None, PISS + 1, Some(ISS + 1), &[]),
    );
    assert_eq!(c.state(), State::Established);
    assert_eq!(c.stats().recovery.rto_us, 3_000_000);
}

/// A window clamp (`ConnConfig::rx_window_clamp`, Linux's `TCP_WINDOW_CLAMP`; the engine's
/// listeners until a request is accepted) bounds the window from the SYN-ACK on, so what
/// the peer sends beyond it is not taken; lifting it announces the rest of the buffer at
/// once. The window only opens (RFC 9293 3.8.6.2.1: no shrinking).
#[test]
fn a_window_clamp_bounds_the_window_from_the_syn_and_lifting_it_opens_it() {
    let config = ConnConfig {
        rx_window_clamp: Some(4096),
        ..cfg()
    };
    let mut syn = seg(TcpControl::Syn, PISS, None, &[]);
    syn.max_seg_size = Some(1460);
    let mut c = Connection::accept(&config, ep(), ISS, &syn, ms(0));
    let sa = drain(&mut c, ms(0));
    assert_eq!(sa[0].control, TcpControl::Syn);
    assert_eq!(sa[0].window, 4096, "the SYN-ACK offers the clamp");
    c.handle_segment(ms(1), &seg(TcpControl::None, PISS + 1, Some(ISS + 1), &[]));
    assert_eq!(c.state(), State::Established);
    // 6,000 octets in six segments against a window of 4,096: the rest is not taken.
    let payload = [7u8; 1000];
    for i in 0..6 {
        c.handle_segment(ms(2), &data(i * 1000, &payload, ISS + 1));
    }
    assert_eq!(c.recv_queue(), 4096);
    let acks = drain(&mut c, ms(2));
    let last = acks.last().expect("an ACK");
    assert_eq!(last.ack, Some(PISS + 1 + 4096));
    assert_eq!(last.window, 0, "{acks:?}");
    // Lifted: one window update at once, offering the rest of the 64 KiB buffer.
    assert!(c.clear_window_clamp());
    let update = drain(&mut c, ms(3));
    assert_eq!(update.len(), 1, "{update:?}");
    assert_eq!(usize::from(update[0].window), 64 * 1024 - 4096);
    // The peer's next segment is taken; lifting again changes nothing.
    c.handle_segment(ms(4), &data(4096, &payload, ISS + 1));
    assert_eq!(c.recv_queue(), 4096 + 1000);
    assert!(!c.clear_window_clamp());
}

/// RFC 5681 2 (DUPLICATE ACKNOWLEDGMENT, condition (e)): only an ACK whose number equals
/// the greatest one received (SND.UNA) is a duplicate. ACKs the network reordered, older
/// than SND.UNA, are no sign of loss: three of them drew a spurious fast retransmit and a
/// window reduction on a connection without SACK.
#[test]
fn rfc5681_2_old_acks_below_snd_una_are_no_duplicate_acks() {
    let mut c = established(cfg(), true);
    let out = send(&mut c, ms(2), 6 * 1460);
    assert_eq!(out.len(), 6);
    // The ACK of the first three segments, then three older ACKs it overtook.
    c.handle_segment(
        ms(3),
        &seg(TcpControl::None, PISS + 1, Some(ISS + 1 + 3 * 1460), &[]),
    );
    for k in 0..3 {
        c.handle_segment(
            ms(3),
            &seg(TcpControl::None, PISS + 1, Some(ISS + 1 + k * 1460), &[]),
        );
    }
    let out = drain(&mut c, ms(3));
    assert!(
        out.iter().all(|o| o.seq != ISS + 1 + 3 * 1460),
        "old ACKs drew a fast retransmit: {:?}",
        out.iter().map(|o| o.seq).collect::<Vec<_>>()
    );
    assert_eq!(c.stats().recovery.fast_recoveries, 0);
}

/// RFC 6675 4-5 (IsLost, DupThresh): with RACK-TLP off (`RecoveryConfig::rack_tlp`,
/// "duplicate-ACK counting and the RTO only") a peer that SACKs still gets a fast
/// retransmit. Duplicate ACKs with SACK blocks were not counted (only those without, from
/// a peer never seen to SACK), and nothing else marked a hole lost: the RTO was the only
/// repair of every loss.
#[test]
fn rfc6675_5_without_rack_sack_blocks_still_drive_a_fast_retransmit() {
    let mut config = cfg();
    config.recovery = RecoveryConfig {
        rack_tlp: false,
        ..RecoveryConfig::default()
    };
    let mut c = established(config, false);
    let out = send(&mut c, ms(2), 6 * 1448);
    assert_eq!(out.len(), 6);
    let base = ISS.0 as u32 + 1;
    // Segment 1 lost; 2, 3 and 4 SACKed by three duplicate ACKs.
    for k in 2..5 {
        let mut a = stamped(seg(TcpControl::None, PISS + 1, Some(ISS + 1), &[]));
        a.sack_ranges = [Some((base + 1448, base + k * 1448)), None, None];
        c.handle_segment(ms(3), &a);
    }
    let out = drain(&mut c, ms(3));
    assert_eq!(
        out.first().map(|o| o.seq),
        Some(ISS + 1),
        "no fast retransmit after three SACKing duplicate ACKs: {:?}",
        out.iter().map(|o| o.seq).collect::<Vec<_>>()
    );
    assert_eq!(c.stats().recovery.fast_recoveries, 1);
    assert_eq!(c.stats().recovery.rto_count, 0);
}

/// RFC 2018 4: after the block of the segment that drew the ACK, the SACK option SHOULD
/// repeat the most recently reported blocks, so that each block goes out in several ACKs
/// and the loss of one ACK hides nothing. The blocks after the first were the lowest ones
/// instead: with more than three holes, a block in the middle was reported only in the
/// ACKs of the segments that grew it, and where those were lost the sender never heard
/// of it before the cumulative ACK reached it; RACK meanwhile resent all of it (in a
/// two-connection simulation at 3 % loss, bursts of up to 30 segments the receiver held).
#[test]
fn rfc2018_4_sack_blocks_repeat_the_most_recently_reported() {
    let mut c = established(cfg(), false);
    let base = (PISS.0 as u32).wrapping_add(1);
    let mut last = Vec::new();
    for off in [1000, 3000, 5000, 7000] {
        c.handle_segment(ms(2), &stamped(data(off, &[9; 500], ISS + 1)));
        let out = drain(&mut c, ms(2));
        assert_eq!(out.len(), 1);
        last = out[0].sack.clone();
    }
    let block = |off: u32| (base + off, base + off + 500);
    assert_eq!(last, vec![block(7000), block(5000), block(3000)]);
}

/// RFC 7323 2.2 ("may send a Window Scale option in a <SYN,ACK> segment only if the option
/// was received in the initial <SYN>"), 3.2 (TSopt likewise) and RFC 2018 2 (SACK-permitted
/// "must not be sent on non-SYN segments", and on a SYN-ACK only if the SYN carried it):
/// in a simultaneous open our SYN-ACK answers the peer's SYN, so it carries an option
/// only if that SYN did. It carried all three whatever the peer's SYN held (the option
/// choice tested "active", true for our side of a simultaneous open).
#[test]
fn rfc7323_2_2_simultaneous_open_syn_ack_options_follow_the_peer_syn() {
    for peer_offers in [false, true] {
        let mut c = Connection::connect(&cfg(), ep(), ISS, ms(0));
        let syn = drain(&mut c, ms(0));
        assert!(syn[0].ws.is_some() && syn[0].ts.is_some() && syn[0].sack_permitted);
        // The peer's SYN crosses ours.
        let mut s = seg(TcpControl::Syn, PISS, None, &[]);
        s.max_seg_size = Some(1460);
        if peer_offers {
            s.window_scale = Some(7);
            s.sack_permitted = true;
            s.timestamp = Some(TcpTimestampRepr { tsval: 1, tsecr: 0 });
        }
        c.handle_segment(ms(1), &s);
        assert_eq!(c.state(), State::SynReceived);
        let out = drain(&mut c, ms(1));
        assert_eq!(out.len(), 1, "{out:?}");
        let sa = &out[0];
        assert_eq!(sa.control, TcpControl::Syn);
        assert_eq!(sa.ack, Some(PISS + 1));
        assert_eq!(sa.ws.is_some(), peer_offers, "{sa:?}");
        assert_eq!(sa.ts.is_some(), peer_offers, "{sa:?}");
        assert_eq!(sa.sack_permitted, peer_offers, "{sa:?}");
        if peer_offers {
            // The same shift as our SYN's (RFC 7323 2.2: one shift per direction).
            assert_eq!(sa.ws, syn[0].ws);
        }
        // The SYN-ACK's retransmission at the RTO likewise.
        let again = run_until(&mut c, ms(1), ms(1_500));
        let sa2 = again
            .iter()
            .find(|(_, o)| o.control == TcpControl::Syn)
            .map(|(_, o)| o)
            .expect("SYN-ACK again");
        assert_eq!(
            (sa2.ws.is_some(), sa2.ts.is_some(), sa2.sack_permitted),
            (peer_offers, peer_offers, peer_offers),
            "{sa2:?}"
        );
    }
}

/// RFC 2883 4: a segment that fills the gap before a block held out of order and repeats
/// some of that block's octets (a retransmission cut differently from the original, or
/// a copy the network duplicated with another segment) is a duplicate receipt of those
/// octets, reported as the first (D-SACK) block of the ACK it draws, as the same octets
/// are when the segment lies wholly out of order (`Reassembly::held_within`) or below
/// RCV.NXT, and as Linux's `tcp_ofo_queue` reports them (`tcp_dsack_extend`). Without it
/// the sender is not told its retransmission was not needed (RFC 3708, RFC 8985 6.2
/// step 4). The octets held first are not overwritten by the later copy's either.
#[test]
fn rfc2883_4_an_in_order_segment_repeating_held_octets_is_a_d_sack() {
    let mut c = established(cfg(), false);
    let base = PISS + 1;
    // Octets 1000..2000 arrive first, out of order: SACKed.
    c.handle_segment(ms(2), &stamped(data(1000, &[1; 1000], ISS + 1)));
    let out = drain(&mut c, ms(2));
    let want = ((base + 1000).0 as u32, (base + 2000).0 as u32);
    assert_eq!(out.last().expect("an ACK").sack, vec![want]);
    // The gap fills with 0..1460, whose 1000..1460 were held already.
    c.handle_segment(ms(3), &stamped(data(0, &[2; 1460], ISS + 1)));
    let out = drain(&mut c, ms(3));
    let ack = out.last().expect("the gap filled is ACKed at once");
    assert_eq!(ack.ack, Some(base + 2000), "{out:?}");
    let dup = ((base + 1000).0 as u32, (base + 1460).0 as u32);
    assert_eq!(
        ack.sack,
        vec![dup],
        "the repeated octets are not reported: {out:?}"
    );
    // The stream holds the new octets, then those held first.
    let mut buf = vec![0; 4000];
    assert_eq!(c.recv(&mut buf), Ok(2000));
    assert!(buf[..1000].iter().all(|&b| b == 2));
    assert!(
        buf[1000..2000].iter().all(|&b| b == 1),
        "a held octet was overwritten"
    );
}

/// RFC 9293 3.10.7.4 (fifth, SYN-RECEIVED): "If the segment acknowledgment is not
/// acceptable, form a reset segment <SEQ=SEG.ACK><CTL=RST> and send it." A close in
/// SYN-RECEIVED (here our side of a simultaneous open, RFC 9293 3.5) moves to FIN-WAIT-1
/// at once (3.10.4), before our SYN is acknowledged: the SYN-RECEIVED check was skipped
/// there, and a segment whose ACK does not cover our SYN (SEG.ACK = ISS) had its data
/// taken and its ACK processed as a synchronized connection's. It draws the RST, and its
/// data is not taken; the connection stays as it is and completes with a good ACK.
#[test]
fn close_in_syn_received_still_rejects_an_ack_short_of_our_syn() {
    let mut c = Connection::connect(&cfg(), ep(), ISS, ms(0));
    assert_eq!(drain(&mut c, ms(0)).len(), 1);
    let mut syn = seg(TcpControl::Syn, PISS, None, &[]);
    syn.max_seg_size = Some(1460);
    c.handle_segment(ms(1), &syn);
    assert_eq!(c.state(), State::SynReceived);
    let sa = drain(&mut c, ms(1));
    assert_eq!(sa.len(), 1, "{sa:?}");
    assert_eq!(
        (sa[0].control, sa[0].ack),
        (TcpControl::Syn, Some(PISS + 1))
    );
    c.close();
    assert_eq!(c.state(), State::FinWait1);
    // Data whose ACK stops short of our SYN.
    c.handle_segment(ms(2), &data(0, b"forged", ISS));
    assert_eq!(c.recv_queue(), 0, "data taken with an unacceptable ACK");
    let out = drain(&mut c, ms(2));
    assert!(
        out.iter()
            .any(|o| o.control == TcpControl::Rst && o.seq == ISS && o.ack.is_none()),
        "no <SEQ=SEG.ACK><CTL=RST>: {out:?}"
    );
    assert_eq!(c.state(), State::FinWait1);
    // The good ACK (of our SYN and our FIN, RFC 9293 3.10.4: sent from SYN-RECEIVED)
    // completes the handshake and the close.
    let fin = out
        .iter()
        .find(|o| o.control == TcpControl::Fin)
        .map(|o| o.seq);
    assert_eq!(fin, Some(ISS + 1), "{out:?}");
    c.handle_segment(ms(3), &data(0, b"hello", ISS + 2));
    assert_eq!(c.recv_queue(), 5);
    assert_eq!(c.state(), State::FinWait2);
}
