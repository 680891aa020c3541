//! Captures of a DPDK port whose tx ring takes fewer frames than offered: a net_ring port
//! over a 4-slot ring (EAL with --no-huge --no-pci, once per process). Both captures, the
//! device's pcapng and the pcap of a `Capture` around the device, must hold exactly the frames
//! the driver took, once each, in order: not the ones it refused and never took (before, both
//! recorded every frame offered, so a frame still queued when the device went showed in the
//! capture although it never reached the wire).
#![cfg(feature = "dpdk")]

use std::collections::VecDeque;

use smoltcp::phy::{Device, TxToken};
use smoltcp::time::Instant;
use warpcore_tcp::dpdk_sys::{
    EalBuilder, Mbuf, Mempool, PcapngWriter, PortConfig, RingPortPair, RxQueue,
};
use warpcore_tcp::{Capture, DpdkDevice, DpdkDeviceConfig, PollDevice};

/// Frames of 60 octets, frame `i` filled with `i`.
const FRAME_LEN: usize = 60;

/// Hands frame `i` to the device (it queues it for the next flush).
fn offer<D: Device>(dev: &mut D, i: u8) {
    let tok = dev
        .transmit(Instant::from_millis(i64::from(i)))
        .expect("a transmit token");
    tok.consume(FRAME_LEN, |buf| buf.fill(i));
}

/// The ids of the frames waiting at the far end of the ring.
fn drain(rx: &mut RxQueue) -> Vec<u8> {
    let mut got: VecDeque<Mbuf> = VecDeque::new();
    while rx.rx_burst(&mut got, 32) > 0 {}
    got.iter()
        .map(|m| {
            let d = m.data();
            assert_eq!(d.len(), FRAME_LEN);
            assert!(d.iter().all(|&b| b == d[0]), "frame intact");
            d[0]
        })
        .collect()
}

/// Offers frames 1 to 8 to `dev` and flushes three times, draining the far end `rx` after
/// the first flush only, so that the ring refuses frames at each flush and the last ones
/// are never taken. Returns the ids that crossed, in order.
fn run<D: Device + PollDevice>(dev: &mut D, rx: &mut RxQueue) -> Vec<u8> {
    for i in 1..=8 {
        offer(dev, i);
    }
    assert!(dev.flush(), "the first burst takes some");
    let mut crossed = drain(rx);
    assert!(
        !crossed.is_empty() && crossed.len() < 8,
        "the 4-slot ring takes fewer than 8: {crossed:?}"
    );
    dev.flush();
    dev.flush();
    crossed.extend(drain(rx));
    assert!(crossed.len() < 8, "some never taken: {crossed:?}");
    assert_eq!(crossed, (1..=crossed.len() as u8).collect::<Vec<_>>());
    crossed
}

/// The payload ids of the enhanced packet blocks of little-endian pcapng `bytes`.
fn pcapng_ids(bytes: &[u8]) -> Vec<u8> {
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4"));
    let mut ids = Vec::new();
    let mut at = 0;
    while at + 12 <= bytes.len() {
        let (kind, len) = (u32_at(at), u32_at(at + 4) as usize);
        assert!(len >= 12 && at + len <= bytes.len(), "block at {at}");
        if kind == 6 {
            // Interface id, timestamp (two words), captured length, original length, data.
            let caplen = u32_at(at + 20) as usize;
            assert_eq!(caplen, FRAME_LEN);
            ids.push(bytes[at + 28]);
        }
        at += len;
    }
    ids
}

/// The payload ids of the records of little-endian classic pcap `bytes`.
fn pcap_ids(bytes: &[u8]) -> Vec<u8> {
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4"));
    let mut ids = Vec::new();
    let mut at = 24;
    while at < bytes.len() {
        let incl = u32_at(at + 8) as usize;
        assert_eq!(incl, FRAME_LEN);
        ids.push(bytes[at + 16]);
        at += 16 + incl;
    }
    ids
}

#[test]
fn captures_hold_exactly_the_frames_the_driver_took() {
    let eal = EalBuilder::for_test("dpdk_capture", 0, 256)
        .init()
        .expect("EAL init with --no-huge --no-pci");
    let pool =
        Mempool::new(&eal, "wcnet_cap_pool", 1023, 0, Mempool::DEFAULT_DATA_ROOM).expect("pool");
    let port_cfg = PortConfig::default();
    // Two pairs: the device on `a` of each sends, `b` is the far end, read directly.
    let mut pairs = Vec::new();
    for name in ["wccap_png", "wccap_pcap"] {
        let RingPortPair { mut a, mut b } = RingPortPair::new(&eal, name, 4).expect("rings");
        for p in [&mut a, &mut b] {
            p.configure(&port_cfg, &pool).expect("configure");
            p.start().expect("start");
        }
        let dev = DpdkDevice::new(
            a.rx_queue(0).expect("rx"),
            a.tx_queue(0).expect("tx"),
            pool,
            DpdkDeviceConfig::default(),
        )
        .expect("device");
        let far = b.rx_queue(0).expect("far rx");
        // The device and the queue drop before the ports (fields drop in order).
        pairs.push((dev, far, a, b));
    }

    // The device's pcapng (after the ports: the file has interfaces for them).
    let path = std::env::temp_dir().join(format!("wcnet-txcap-{}.pcapng", std::process::id()));
    let w = PcapngWriter::create(&eal, path.to_str().expect("utf-8"), "wcnet_cap_copies", 256)
        .expect("pcapng writer");
    let (dev, far, _, _) = &mut pairs[0];
    dev.set_pcapng(w).expect("covers the port");
    let crossed = run(dev, far);
    let w = dev.take_pcapng().expect("the writer");
    assert_eq!(dev.capture_missed(), 0);
    drop(w); // flushes and closes the file
    let ids = pcapng_ids(&std::fs::read(&path).expect("the capture"));
    let _ = std::fs::remove_file(&path);
    assert_eq!(
        ids, crossed,
        "pcapng: exactly the frames the driver took, once, in order"
    );

    // A `Capture` (classic pcap) around the device.
    let (dev, far, _a, _b) = pairs.pop().expect("second pair");
    let mut cap = Capture::new(dev, Vec::new(), 65535);
    let crossed = run(&mut cap, &mut { far });
    assert_eq!(cap.finish(), (crossed.len() as u64, 0));
    let (dev, out) = cap.into_parts();
    assert_eq!(dev.capture_missed(), 0);
    assert_eq!(
        pcap_ids(&out),
        crossed,
        "Capture: exactly the frames the driver took, once, in order"
    );
}
