//! External records (issue 12 item 3, transmit from registered memory): octets the
//! connection never holds, written by their owner into each frame that carries them
//! (`Stack::send_external_record`, the `fill` of `Stack::poll_with_fill`), kept writable
//! until acknowledged. Over the in-memory link with loss, reordering and duplication, a
//! stream of records, some held by the TCP and some external, must arrive byte for byte;
//! no record may be asked for after it was reported acknowledged; and a record its owner
//! cannot write resets the connection instead of sending anything else.

mod common;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

use common::*;
use smoltcp::time::{Duration, Instant};
use warpcore_tcp::link::{self, Faults, LinkConfig, LinkEnd};
use warpcore_tcp::{csum, ConnId, Event, Stack, StackError, TcpTuning};

const SALT: u32 = 0x0e47_0001;

/// Fills of runs of records (`Stack::send_external_run`), and of those the ones that did
/// not start and end at the run's record boundaries (tests run on threads of one process:
/// `transfer` takes differences, and its test runs its seeds one after the other).
static RUN_FILLS: AtomicU64 = AtomicU64::new(0);
static RUN_FILLS_CUT: AtomicU64 = AtomicU64::new(0);

fn lossy(seed: u64) -> LinkConfig {
    faulty_link(seed, 0.02)
}

fn connect(a: &mut Stack<LinkEnd>, b: &mut Stack<LinkEnd>, now: &mut Instant) -> (ConnId, ConnId) {
    b.listen(5000, 2, &TcpTuning::default()).expect("listen");
    let ca = a
        .connect((IP_B, 5000), None, &TcpTuning::default())
        .expect("connect");
    let (mut up, mut cb) = (false, None);
    for _ in 0..100_000 {
        let w = a.poll(*now) | b.poll(*now);
        while let Some(e) = a.next_event() {
            up |= matches!(e, Event::Connected(_));
        }
        while let Some(e) = b.next_event() {
            if let Event::Acceptable(l) = e {
                cb = b.accept(l).expect("accept");
            }
        }
        if let (true, Some(cb)) = (up, cb) {
            return (ca, cb);
        }
        let wake = [a.poll_at(*now), b.poll_at(*now)]
            .into_iter()
            .flatten()
            .chain(next_delivery(a, b))
            .min();
        *now = sim_clock(*now, w, wake);
    }
    panic!("no connection");
}

/// Two stacks over an in-memory link of `link`'s faults, a connected to b.
fn connected(link: &LinkConfig) -> (Stack<LinkEnd>, Stack<LinkEnd>, Instant, ConnId, ConnId) {
    let (ea, eb) = link::pair(link);
    let mut a = Stack::new(ea, &config(1, IP_A), Instant::ZERO).expect("a");
    let mut b = Stack::new(eb, &config(2, IP_B), Instant::ZERO).expect("b");
    let mut now = Instant::ZERO;
    let (ca, cb) = connect(&mut a, &mut b, &mut now);
    (a, b, now, ca, cb)
}

/// One record the sender queued: where it starts in the stream, its length, and its token
/// if external; for a run of records under one token (`Stack::send_external_run`), the
/// length of each but the last.
struct Rec {
    start: u64,
    len: usize,
    token: Option<u64>,
    every: Option<usize>,
}

/// Sends `total` octets from a to b as records of seeded sizes, every third one held by the
/// TCP, the others external; checks the receiver's every octet and the acknowledgement
/// contract. Returns the octets of external records and what the TCP counted as written by
/// the owner.
fn transfer(seed: u64, total: u64) -> (u64, u64, u64) {
    let cut_before = RUN_FILLS_CUT.load(Ordering::Relaxed);
    let fills_before = RUN_FILLS.load(Ordering::Relaxed);
    let (mut a, mut b, mut now, ca, cb) = connected(&lossy(seed));
    let room = a.max_record_payload(ca).expect("ours").expect("ours");
    let mut rng = seed | 1;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let (mut sent, mut received, mut token, mut ext_octets) = (0u64, 0u64, 0u64, 0u64);
    let mut live: VecDeque<Rec> = VecDeque::new();
    let mut acked_upto: Option<u64> = None;
    let deadline = now + Duration::from_secs(600);
    while received < total {
        assert!(now < deadline, "stalled at {received} of {total}");
        // Queue records while there is room: mostly up to a segment, sometimes longer
        // (cut across segments) or tiny (several per segment).
        while sent < total {
            let r = next();
            let len = match r % 10 {
                0 => 1 + (r >> 8) as usize % 16,
                1 => room + 1 + (r >> 8) as usize % room,
                _ => 1 + (r >> 8) as usize % room,
            }
            .min((total - sent) as usize);
            let start = sent;
            let ok = if r % 3 == 0 {
                let n = a
                    .send_with_room(ca, len, |buf| {
                        if buf.len() < len {
                            return 0;
                        }
                        for (k, b) in buf[..len].iter_mut().enumerate() {
                            *b = pattern(SALT, start + k as u64);
                        }
                        len
                    })
                    .expect("send");
                if n == 0 {
                    false
                } else {
                    live.push_back(Rec {
                        start,
                        len,
                        token: None,
                        every: None,
                    });
                    true
                }
            } else {
                // Tokens increase; one refused (no room) is not used. Every other external
                // record is a run: records of `every` octets (a segment's room or less)
                // under one token, as the engine queues a message's FPDUs.
                let every = (r % 2 == 0).then(|| 1 + (r >> 20) as usize % room);
                let queued = match every {
                    Some(e) => a.send_external_run(ca, len, e, token + 1),
                    None => a.send_external_record(ca, len, token + 1),
                }
                .expect("external");
                if queued {
                    token += 1;
                    ext_octets += len as u64;
                    live.push_back(Rec {
                        start,
                        len,
                        token: Some(token),
                        every,
                    });
                }
                queued
            };
            if !ok {
                break;
            }
            sent += len as u64;
        }
        let wa = a.poll_with_fill(
            now,
            |_, _| 0,
            |c, t, at, dst, want| {
                assert_eq!(c, ca);
                fill_from(&live, acked_upto, t, at, dst, want)
            },
        );
        let wb = b.poll(now);
        while let Some(e) = a.next_event() {
            assert!(
                !matches!(e, Event::Reset(_) | Event::TimedOut(_) | Event::Closed(_)),
                "{e:?} at {now} sent {sent} received {received} b {:?} a {:?}",
                b.host_stats(),
                a.host_stats()
            );
        }
        while b.next_event().is_some() {}
        take_acked(&mut a, ca, &mut acked_upto, &mut live);
        loop {
            let off = received;
            let n = b
                .recv_with(cb, |data| {
                    for (k, &x) in data.iter().enumerate() {
                        let want = pattern(SALT, off + k as u64);
                        assert_eq!(x, want, "byte {} of the stream differs", off + k as u64);
                    }
                    data.len()
                })
                .unwrap_or(0);
            if n == 0 {
                break;
            }
            received += n as u64;
        }
        let wake = next_delivery(&a, &b);
        let wake = [a.poll_at(now), b.poll_at(now)]
            .into_iter()
            .flatten()
            .chain(wake)
            .min();
        now = sim_clock(now, wa | wb, wake);
    }
    // Everything arrives, so everything is acknowledged in the end (retransmissions may
    // still ask for records meanwhile).
    for _ in 0..100_000 {
        if acked_upto == Some(token) {
            let cut = RUN_FILLS_CUT.load(Ordering::Relaxed) - cut_before;
            let fills = RUN_FILLS.load(Ordering::Relaxed) - fills_before;
            assert!(fills > 100, "runs of records were filled {fills} times");
            assert!(
                cut * 100 <= fills,
                "{cut} of {fills} fills of runs cut a record: segments must end at their boundaries"
            );
            let lost = a.device().tx_fault_stats().lost;
            let written = a.tcp_totals().expect("ours").external_octets_sent;
            return (ext_octets, written, lost);
        }
        let w = a.poll_with_fill(
            now,
            |_, _| 0,
            |_, t, at, dst, want| fill_from(&live, acked_upto, t, at, dst, want),
        ) | b.poll(now);
        take_acked(&mut a, ca, &mut acked_upto, &mut live);
        let wake = [a.poll_at(now), b.poll_at(now)]
            .into_iter()
            .flatten()
            .chain(next_delivery(&a, &b))
            .min();
        now = sim_clock(now, w, wake);
    }
    panic!("the last external record was never acknowledged: acked {acked_upto:?} of {token}, queue {:?}, at {now}", a.send_queue(ca));
}

/// The owner's fill: the record's octets of the stream pattern, never for a record already
/// reported acknowledged, summed in the same pass when the host asks (as the engine does).
fn fill_from(
    live: &VecDeque<Rec>,
    acked: Option<u64>,
    t: u64,
    at: usize,
    dst: &mut [u8],
    want: bool,
) -> Option<u64> {
    assert!(
        acked.is_none_or(|u| t > u),
        "record {t} asked for after {acked:?} was reported acknowledged"
    );
    let r = live
        .iter()
        .find(|r| r.token == Some(t))
        .expect("fill of a record never queued");
    assert!(at + dst.len() <= r.len, "fill past the record's end");
    if let Some(e) = r.every {
        // A run's records are cut as any: segments start and end at their boundaries
        // (but where TCP may cut a record: with nothing in flight and the windows short
        // of it, or a zero-window probe; `transfer` bounds how often).
        let end = at + dst.len();
        RUN_FILLS.fetch_add(1, Ordering::Relaxed);
        if !(at.is_multiple_of(e) && (end.is_multiple_of(e) || end == r.len)) {
            RUN_FILLS_CUT.fetch_add(1, Ordering::Relaxed);
        }
    }
    let start = r.start + at as u64;
    let sum = csum::copy_and_sum_from(dst, |off, out| {
        for (k, b) in out.iter_mut().enumerate() {
            *b = pattern(SALT, start + (off + k) as u64);
        }
    });
    Some(if want { sum } else { 0 })
}

/// Takes the acknowledgement TCP reports and drops the records it covers.
fn take_acked(
    a: &mut Stack<LinkEnd>,
    ca: ConnId,
    acked: &mut Option<u64>,
    live: &mut VecDeque<Rec>,
) {
    if let Some(t) = a.take_acked_external(ca).expect("acked") {
        assert!(acked.is_none_or(|u| t > u), "acknowledged tokens go back");
        *acked = Some(t);
        while live.front().is_some_and(|r| r.token.is_none_or(|x| x <= t)) {
            live.pop_front();
        }
    }
}

#[test]
fn external_records_arrive_byte_exact_under_loss_and_are_never_asked_for_after_their_ack() {
    for seed in [3_u64, 0xabcd, 0x1234_5678] {
        let (ext, written, lost) = transfer(seed, 3 << 20);
        eprintln!(
            "seed {seed:#x}: {ext} external octets, {written} written by fill, {lost} frames lost"
        );
        assert!(lost > 0, "the link must have lost frames");
        assert!(
            written > ext,
            "retransmissions must have asked for external octets again"
        );
    }
}

/// A record its owner cannot write (the engine: the region went away) never leaves as
/// anything else: the frame becomes an RST, our side reports Closed, the peer Reset, and
/// the peer received only octets that were written.
#[test]
fn a_record_the_owner_cannot_write_resets_the_connection() {
    let (mut a, mut b, mut now, ca, cb) = connected(&LinkConfig::default());
    assert!(
        a.send_with(ca, |buf| {
            buf[..100].fill(7);
            100
        })
        .expect("send")
            == 100
    );
    let (mut a_closed, mut b_reset, mut got) = (false, false, Vec::new());
    for _ in 0..10_000 {
        if got.len() == 100 {
            break;
        }
        let w = a.poll(now) | b.poll(now);
        let _ = b.recv_with(cb, |d| {
            got.extend_from_slice(d);
            d.len()
        });
        let wake = next_delivery(&a, &b);
        now = sim_clock(now, w, wake);
    }
    assert!(a.send_external_record(ca, 500, 1).expect("external"));
    for _ in 0..10_000 {
        let w = a.poll_with_fill(now, |_, _| 0, |_, _, _, _, _| None) | b.poll(now);
        while let Some(e) = a.next_event() {
            a_closed |= matches!(e, Event::Closed(_));
        }
        while let Some(e) = b.next_event() {
            b_reset |= matches!(e, Event::Reset(_));
        }
        let _ = b.recv_with(cb, |d| {
            got.extend_from_slice(d);
            d.len()
        });
        if a_closed && b_reset {
            break;
        }
        let wake = next_delivery(&a, &b);
        now = sim_clock(now, w, wake);
    }
    assert!(a_closed, "our side must report the connection closed");
    assert!(b_reset, "the peer must see the reset");
    assert_eq!(got, vec![7u8; 100], "only the written octets arrive");
    assert_eq!(a.host_stats().expect("ours").external_fill_failures, 1);
}

/// `Stack::poll_with_fill_pass`: the fill is made only for a poll that runs a transmit
/// pass, after every delivery of the poll's rx burst, and dropped when that pass ends,
/// before the poll returns (the engine holds a region's guard in it for the pass: a
/// delivery that invalidated that region would wait on its own core, and an idle loop
/// must set up nothing).
#[test]
fn a_poll_makes_its_fill_for_a_transmit_pass_only_after_every_delivery_and_drops_it_with_the_pass()
{
    use std::cell::RefCell;
    struct Dropped<'a>(&'a RefCell<Vec<&'static str>>);
    impl Drop for Dropped<'_> {
        fn drop(&mut self) {
            self.0.borrow_mut().push("drop");
        }
    }
    let (mut a, mut b, mut now, ca, cb) = connected(&LinkConfig::default());
    // Settle: nothing left to send or receive either way, nothing due.
    for _ in 0..100 {
        while a.next_event().is_some() || b.next_event().is_some() {}
        if !(a.poll(now) | b.poll(now)) && next_delivery(&a, &b).is_none() {
            break;
        }
    }
    let log = RefCell::new(Vec::new());
    let poll_a = |a: &mut Stack<LinkEnd>, now| {
        log.borrow_mut().clear();
        a.poll_with_fill_pass(
            now,
            |_, data: &[u8], _| {
                log.borrow_mut().push("deliver");
                data.len()
            },
            || {
                log.borrow_mut().push("make");
                let d = Dropped(&log);
                move |_, t, _, dst: &mut [u8], _| {
                    // Moves `d` itself into the fill (a use of `d.0` alone would move only
                    // the field, and `d` would drop with `make_fill`, before the pass).
                    let _ = &d;
                    assert_eq!(t, 7, "the one record queued");
                    d.0.borrow_mut().push("fill");
                    dst.fill(9);
                    Some(csum::sum(dst))
                }
            },
        );
        log.borrow().clone()
    };
    assert_eq!(
        poll_a(&mut a, now),
        Vec::<&str>::new(),
        "an idle poll makes no fill"
    );
    // The peer's octets wait for a, and a has a record to send: one poll delivers them,
    // then makes the fill for its transmit pass, which writes the record, then drops it.
    assert_eq!(
        b.send_with(cb, |buf| {
            buf[..100].fill(3);
            100
        })
        .expect("send"),
        100
    );
    b.poll(now);
    assert!(a.send_external_record(ca, 500, 7).expect("external"));
    assert_eq!(poll_a(&mut a, now), ["deliver", "make", "fill", "drop"]);
    // The record arrives whole.
    let mut got = Vec::new();
    for _ in 0..100 {
        let w = b.poll(now);
        let _ = b.recv_with(cb, |d| {
            got.extend_from_slice(d);
            d.len()
        });
        if got.len() >= 500 {
            break;
        }
        now = sim_clock(now, w, next_delivery(&a, &b));
    }
    assert_eq!(got, vec![9u8; 500]);
}

/// A caller's slips with external records are refused, naming the argument, and queue
/// nothing: a token not above those of the records still unacknowledged (the contract
/// `take_acked_external` rests on: a debug build panicked, a release one took it), and a
/// record or boundary step of no octets (answered `Ok(false)`, "no room", for which room
/// never comes).
#[test]
fn external_records_a_caller_got_wrong_are_refused_naming_the_argument() {
    let (mut a, _b, _now, ca, _cb) = connected(&LinkConfig::default());
    let refused = |r: Result<bool, StackError>, arg: &str| match r {
        Err(StackError::InvalidArgument(name, _)) => assert_eq!(name, arg),
        other => panic!("{arg}: {other:?}"),
    };
    assert_eq!(a.send_external_record(ca, 500, 5), Ok(true));
    refused(a.send_external_record(ca, 500, 5), "token");
    refused(a.send_external_record(ca, 500, 4), "token");
    refused(a.send_external_record(ca, 0, 6), "len");
    refused(a.send_external_run(ca, 500, 0, 6), "every");
    assert_eq!(a.send_queue(ca), Ok(500), "nothing more queued");
    assert_eq!(a.send_external_run(ca, 500, 100, 6), Ok(true));
    assert_eq!(a.send_queue(ca), Ok(1000));
}

/// `Stack::internalize_external`: an owner that must take its memory back while the
/// connection still has records of it to send and resend (the engine's queue pair
/// destroyed during a graceful close) has them copied into the send buffer. Over a lossy
/// link, mid-transfer (records acknowledged, partly acknowledged, in flight and unsent),
/// then a FIN: every octet arrives byte exact, retransmissions included, and the owner's
/// fill is never asked for anything again.
#[test]
fn internalized_external_records_arrive_byte_exact_and_are_never_asked_for_again() {
    for seed in [5_u64, 0x77, 0xdead_beef] {
        let (mut a, mut b, mut now, ca, cb) = connected(&lossy(seed));
        let room = a.max_record_payload(ca).expect("ours").expect("ours");
        // Runs of 8 records of `room` octets, token k starting at octet k * run.
        let run = 8 * room;
        let fill_run = |t: u64, at: usize, dst: &mut [u8]| {
            let start = t * run as u64 + at as u64;
            for (k, b) in dst.iter_mut().enumerate() {
                *b = pattern(SALT, start + k as u64);
            }
        };
        let (mut queued, mut got, mut internalized) = (0u64, Vec::new(), false);
        let (mut fills_after, mut closed, mut blackout) = (0u64, false, None);
        let total_runs = 200u64;
        let deadline = now + Duration::from_secs(600);
        loop {
            assert!(now < deadline, "seed {seed:#x}: stalled at {}", got.len());
            while !internalized && queued < total_runs {
                if !a.send_external_run(ca, run, room, queued).expect("queue") {
                    break;
                }
                queued += 1;
            }
            // Half-way through the stream, a's frames are all lost for a while (the peer's
            // acknowledgements still come): SND.UNA stops where the peer's in-order point
            // stopped, mostly inside a run, and everything after it must be sent again,
            // from the copies.
            if blackout.is_none() && got.len() as u64 >= 60 * run as u64 {
                a.device()
                    .set_tx_faults(Faults {
                        loss: 1.0,
                        ..Faults::default()
                    })
                    .expect("faults");
                blackout = Some(now + Duration::from_micros(500));
            }
            if !internalized && blackout.is_some_and(|t| now >= t) {
                a.device()
                    .set_tx_faults(lossy(seed ^ 0x55).faults_ab)
                    .expect("faults");
                assert!(a.tcp_totals().expect("ours").external_octets_sent > 0);
                let mut asked = 0u64;
                let done = a
                    .internalize_external(ca, |t, at, dst| {
                        asked += dst.len() as u64;
                        fill_run(t, at, dst);
                        true
                    })
                    .expect("ours");
                assert!(done, "seed {seed:#x}: every fill succeeded");
                assert!(
                    asked > 0,
                    "seed {seed:#x}: records were still unacknowledged"
                );
                a.close(ca).expect("close");
                internalized = true;
            }
            let w = a.poll_with_fill(
                now,
                |_, _| 0,
                |_, t, at, dst, sum| {
                    if internalized {
                        fills_after += 1;
                    }
                    fill_run(t, at, dst);
                    Some(if sum { csum::sum(dst) } else { 0 })
                },
            ) | b.poll(now);
            let _ = b.recv_with(cb, |d| {
                got.extend_from_slice(d);
                d.len()
            });
            while a.next_event().is_some() {}
            while let Some(e) = b.next_event() {
                closed |= matches!(e, Event::PeerClosed(_) | Event::Closed(_));
            }
            if closed && got.len() as u64 == queued * run as u64 {
                break;
            }
            let wake = [a.poll_at(now), b.poll_at(now)]
                .into_iter()
                .flatten()
                .chain(next_delivery(&a, &b))
                .min();
            now = sim_clock(now, w, wake);
        }
        assert!(internalized);
        assert_eq!(fills_after, 0, "seed {seed:#x}: the owner was asked again");
        let bad = got
            .iter()
            .enumerate()
            .find(|&(k, &b)| b != pattern(SALT, k as u64));
        assert!(bad.is_none(), "seed {seed:#x}: octet {bad:?} wrong");
    }
}
