//! A connection's receive digest (`Stack::set_rx_digest`, issue 12 item 2): the host
//! verifies each segment's checksum with the sum the digest returns and hands the owner the
//! digest's front CRC with the payload (`Stack::poll_with_fill_crc`). Over the in-memory
//! link with loss, reordering, duplication and flipped bits, the stream must arrive byte
//! for byte (a corrupted segment is still refused: the digest's sum is the one verified),
//! a front CRC must come only with the very octets it was taken of, and never with octets
//! read from the queue.

mod common;

use common::*;
use smoltcp::time::{Duration, Instant};
use warpcore_tcp::host::FrontCrc;
use warpcore_tcp::link::{self, Faults, LinkConfig, LinkEnd};
use warpcore_tcp::{csum, ConnId, Event, Stack, TcpTuning};

const SALT: u32 = 0x0d16_0001;

/// A stand-in for the engine's CRC32c: FNV-1a over the first half of the payload.
fn front_hash(data: &[u8]) -> u32 {
    data.iter().fold(0x811c_9dc5u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

fn digest(payload: &[u8]) -> (u64, FrontCrc) {
    let n = payload.len() / 2;
    (csum::sum(payload), Some((n, front_hash(&payload[..n]))))
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

#[test]
fn digest_verifies_and_hints_only_its_own_octets() {
    let mut cfg = faulty_link(0xd16e_5700, 0.02);
    for f in [&mut cfg.faults_ab, &mut cfg.faults_ba] {
        *f = Faults {
            corrupt: 0.02,
            ..*f
        };
    }
    let (ea, eb) = link::pair(&cfg);
    let mut a = Stack::new(ea, &config(1, IP_A), Instant::ZERO).expect("a");
    let mut b = Stack::new(eb, &config(2, IP_B), Instant::ZERO).expect("b");
    let mut now = Instant::ZERO;
    let (ca, cb) = connect(&mut a, &mut b, &mut now);
    b.set_rx_digest(cb, Some(digest)).expect("digest");
    let total = 4u64 << 20;
    let (mut sent, mut received, mut hinted, mut plain) = (0u64, 0u64, 0u64, 0u64);
    let deadline = now + Duration::from_secs(600);
    while received < total {
        assert!(now < deadline, "stalled at {received} of {total}");
        while sent < total {
            let start = sent;
            let want = (total - sent).min(3000) as usize;
            let n = a
                .send_with_room(ca, want, |buf| {
                    let n = buf.len().min(want);
                    for (k, x) in buf[..n].iter_mut().enumerate() {
                        *x = pattern(SALT, start + k as u64);
                    }
                    n
                })
                .expect("send");
            if n == 0 {
                break;
            }
            sent += n as u64;
        }
        let wa = a.poll(now);
        let wb = b.poll_with_fill_crc(
            now,
            |c, data, front| {
                assert_eq!(c, cb);
                if let Some((n, h)) = front {
                    assert!(n <= data.len(), "front CRC past the octets");
                    assert_eq!(h, front_hash(&data[..n]), "front CRC of other octets");
                    hinted += 1;
                } else {
                    plain += 1;
                }
                for (k, &x) in data.iter().enumerate() {
                    let off = received + k as u64;
                    assert_eq!(x, pattern(SALT, off), "byte {off} of the stream differs");
                }
                received += data.len() as u64;
                data.len()
            },
            |_, _, _, _, _| None,
        );
        while let Some(e) = a.next_event() {
            assert!(!matches!(e, Event::Reset(_) | Event::Closed(_)), "{e:?}");
        }
        while b.next_event().is_some() {}
        // Octets left in the queue, if any.
        loop {
            let off = received;
            let n = b
                .recv_with(cb, |data| {
                    for (k, &x) in data.iter().enumerate() {
                        let at = off + k as u64;
                        assert_eq!(x, pattern(SALT, at), "byte {at} of the stream differs");
                    }
                    data.len()
                })
                .unwrap_or(0);
            if n == 0 {
                break;
            }
            received += n as u64;
        }
        let wake = [a.poll_at(now), b.poll_at(now)]
            .into_iter()
            .flatten()
            .chain(next_delivery(&a, &b))
            .min();
        now = sim_clock(now, wa | wb, wake);
    }
    let corrupted = a.device().tx_fault_stats().corrupted;
    assert!(corrupted > 10, "the link corrupted {corrupted} frames");
    assert!(hinted > 100, "{hinted} payloads delivered with a front CRC");
    // Octets the host held back (out of order, then filled in) come without one.
    assert!(
        plain > 0,
        "every delivery had a front CRC: reassembly went untested"
    );
}

/// The sum the digest returns is the one verified: a digest that gets it wrong has every
/// data segment of its connection dropped as corrupt, and nothing is delivered.
#[test]
fn digest_sum_is_the_one_verified() {
    fn wrong(payload: &[u8]) -> (u64, FrontCrc) {
        (csum::sum(payload) + 1, None)
    }
    let (ea, eb) = link::pair(&LinkConfig::default());
    let mut a = Stack::new(ea, &config(1, IP_A), Instant::ZERO).expect("a");
    let mut b = Stack::new(eb, &config(2, IP_B), Instant::ZERO).expect("b");
    let mut now = Instant::ZERO;
    let (ca, cb) = connect(&mut a, &mut b, &mut now);
    b.set_rx_digest(cb, Some(wrong)).expect("digest");
    let dropped_before = b.host_stats().expect("ours").rx_dropped;
    let n = a
        .send_with_room(ca, 5000, |buf| {
            let n = buf.len().min(5000);
            buf[..n].fill(7);
            n
        })
        .expect("send");
    assert!(n > 0);
    let end = now + Duration::from_millis(50);
    let mut delivered = 0usize;
    while now < end {
        let w = a.poll(now)
            | b.poll_with_fill_crc(
                now,
                |_, d, _| {
                    delivered += d.len();
                    d.len()
                },
                |_, _, _, _, _| None,
            );
        let wake = [a.poll_at(now), b.poll_at(now)]
            .into_iter()
            .flatten()
            .chain(next_delivery(&a, &b))
            .min();
        now = sim_clock(now, w, wake);
    }
    assert_eq!(
        delivered, 0,
        "a segment whose checksum did not verify was delivered"
    );
    assert!(b.recv_with(cb, |d| d.len()).unwrap_or(0) == 0);
    assert!(b.host_stats().expect("ours").rx_dropped > dropped_before);
}
