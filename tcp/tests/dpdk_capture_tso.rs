//! A capture that begins while a TSO super-frame is already queued for transmit (the ring
//! refused it, or the flush has not come yet): no frame is joined once a capture is taken,
//! but one joined before still goes as a super-frame, which the port cuts into segments.
//! Both captures (the device's pcapng, the pcap of a `Capture` around the device) must
//! record what the wire carries: each segment whole, with its own length, sequence number,
//! identification, PSH on the last only and right checksums. They recorded the super-frame
//! as one frame of the whole payload, its header the one rewritten for the port (the IPv4
//! total length of all segments, the TCP checksum field a pseudo-header sum): a frame no
//! receiver ever saw, which the pcapng writer's snap length (MTU + 18, as `verbs` gives
//! it) cut short, a half frame in the capture. (EAL with --no-huge --no-pci, once per
//! process.)
#![cfg(feature = "dpdk")]

use std::collections::VecDeque;

use smoltcp::phy::{ChecksumCapabilities, Device, TxToken};
use smoltcp::time::Instant;
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr, IpAddress, IpProtocol,
    Ipv4Address, Ipv4Packet, Ipv4Repr, TcpControl, TcpPacket, TcpRepr, TcpSeqNumber,
};
use warpcore_tcp::dpdk_sys::{
    EalBuilder, Mbuf, Mempool, PcapngWriter, PortConfig, RingPortPair, RxQueue,
};
use warpcore_tcp::{Capture, DpdkDevice, DpdkDeviceConfig, PollDevice};

const ETH: usize = 14;
const IP: usize = 20;
/// The payloads of the three segments joined: two full, one shorter (the port cuts every
/// segment but the last at the first's length).
const PAYLOADS: [usize; 3] = [1000, 1000, 600];
const SEQ0: u32 = 1000;

/// Data segment `k` of one connection, as the TCP hands it to the device: ACK and PSH,
/// checksums filled.
fn segment(k: usize) -> Vec<u8> {
    let payload = vec![k as u8 + 1; PAYLOADS[k]];
    let seq = SEQ0 + PAYLOADS[..k].iter().sum::<usize>() as u32;
    let tcp = TcpRepr {
        src_port: 4791,
        dst_port: 50000,
        control: TcpControl::Psh,
        seq_number: TcpSeqNumber(seq as i32),
        ack_number: Some(TcpSeqNumber(77)),
        window_len: 1000,
        window_scale: None,
        max_seg_size: None,
        sack_permitted: false,
        sack_ranges: [None; 3],
        timestamp: None,
        payload: &payload,
    };
    let (src, dst) = (Ipv4Address::new(10, 0, 0, 1), Ipv4Address::new(10, 0, 0, 2));
    let ip = Ipv4Repr {
        src_addr: src,
        dst_addr: dst,
        next_header: IpProtocol::Tcp,
        payload_len: tcp.buffer_len(),
        hop_limit: 64,
    };
    let mut buf = vec![0; ETH + IP + tcp.buffer_len()];
    let mut eth = EthernetFrame::new_unchecked(&mut buf);
    EthernetRepr {
        src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
        dst_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
        ethertype: EthernetProtocol::Ipv4,
    }
    .emit(&mut eth);
    let caps = ChecksumCapabilities::default();
    let mut ipp = Ipv4Packet::new_unchecked(eth.payload_mut());
    ip.emit(&mut ipp, &caps);
    let mut t = TcpPacket::new_unchecked(ipp.payload_mut());
    tcp.emit(&mut t, &IpAddress::Ipv4(src), &IpAddress::Ipv4(dst), &caps);
    buf
}

/// Queues the three segments on `dev` (joined into one super-frame: TSO is on and no
/// capture is taken yet) without flushing.
fn queue_super_frame(dev: &mut DpdkDevice) {
    for k in 0..PAYLOADS.len() {
        let f = segment(k);
        dev.transmit(Instant::from_millis(k as i64))
            .expect("a transmit token")
            .consume(f.len(), |buf| buf.copy_from_slice(&f));
    }
    let st = PollDevice::stats(dev);
    assert_eq!(
        (st.tx_tso_frames, st.tx_tso_segments, dev.tx_pending()),
        (1, 3, 3),
        "the three segments wait as one super-frame"
    );
}

/// What reached the far end: one packet, the super-frame (the ring port does not cut it).
fn far_end_got_the_super_frame(rx: &mut RxQueue) {
    let mut got: VecDeque<Mbuf> = VecDeque::new();
    while rx.rx_burst(&mut got, 32) > 0 {}
    assert_eq!(got.len(), 1, "one super-frame crossed");
    assert_eq!(got[0].nb_segs(), 3);
    assert_eq!(
        got[0].pkt_len(),
        ETH + IP + 20 + PAYLOADS.iter().sum::<usize>()
    );
}

/// The recorded frames must be the segments the wire carries, in order.
fn check_recorded(frames: &[(usize, Vec<u8>)]) {
    let lens: Vec<_> = frames.iter().map(|(orig, f)| (*orig, f.len())).collect();
    let want: Vec<_> = PAYLOADS
        .iter()
        .map(|p| (ETH + IP + 20 + p, ETH + IP + 20 + p))
        .collect();
    assert_eq!(lens, want, "(original, captured) length of each record");
    for (k, (_, f)) in frames.iter().enumerate() {
        let sent = segment(k);
        let ip = Ipv4Packet::new_checked(&f[ETH..]).expect("IPv4");
        assert!(ip.verify_checksum(), "segment {k}: IPv4 checksum");
        assert_eq!(usize::from(ip.total_len()), f.len() - ETH, "segment {k}");
        assert_eq!(
            ip.ident(),
            k as u16,
            "segment {k}: counts up from the head's"
        );
        let tcp = TcpPacket::new_checked(ip.payload()).expect("TCP");
        assert!(
            tcp.verify_checksum(&ip.src_addr().into(), &ip.dst_addr().into()),
            "segment {k}: TCP checksum"
        );
        let st = TcpPacket::new_checked(&sent[ETH + IP..]).expect("TCP");
        assert_eq!(tcp.seq_number(), st.seq_number(), "segment {k}");
        assert_eq!(tcp.payload(), st.payload(), "segment {k}");
        assert_eq!(
            (tcp.ack_number(), tcp.window_len(), tcp.ack()),
            (st.ack_number(), st.window_len(), true),
            "segment {k}"
        );
        assert_eq!(
            tcp.psh(),
            k + 1 == PAYLOADS.len(),
            "segment {k}: PSH on the last"
        );
    }
}

/// The (original length, data) of the enhanced packet blocks of little-endian pcapng.
fn pcapng_frames(bytes: &[u8]) -> Vec<(usize, Vec<u8>)> {
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4"));
    let mut out = Vec::new();
    let mut at = 0;
    while at + 12 <= bytes.len() {
        let (kind, len) = (u32_at(at), u32_at(at + 4) as usize);
        assert!(len >= 12 && at + len <= bytes.len(), "block at {at}");
        if kind == 6 {
            let (caplen, orig) = (u32_at(at + 20) as usize, u32_at(at + 24) as usize);
            out.push((orig, bytes[at + 28..at + 28 + caplen].to_vec()));
        }
        at += len;
    }
    out
}

/// The (original length, data) of the records of little-endian classic pcap.
fn pcap_frames(bytes: &[u8]) -> Vec<(usize, Vec<u8>)> {
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4"));
    let mut out = Vec::new();
    let mut at = 24;
    while at < bytes.len() {
        let (incl, orig) = (u32_at(at + 8) as usize, u32_at(at + 12) as usize);
        out.push((orig, bytes[at + 16..at + 16 + incl].to_vec()));
        at += 16 + incl;
    }
    out
}

#[test]
fn a_super_frame_queued_before_a_capture_is_recorded_as_the_wire_segments() {
    let eal = EalBuilder::for_test("dpdk_capture_tso", 0, 256)
        .init()
        .expect("EAL init with --no-huge --no-pci");
    let pool =
        Mempool::new(&eal, "wcnet_ctso_pool", 1023, 0, Mempool::DEFAULT_DATA_ROOM).expect("pool");
    let mut pairs = Vec::new();
    for name in ["wcctso_png", "wcctso_pcap"] {
        let RingPortPair { mut a, mut b } = RingPortPair::new(&eal, name, 64).expect("rings");
        for p in [&mut a, &mut b] {
            p.configure(&PortConfig::default(), &pool)
                .expect("configure");
            p.start().expect("start");
        }
        let mut dev = DpdkDevice::new(
            a.rx_queue(0).expect("rx"),
            a.tx_queue(0).expect("tx"),
            pool,
            DpdkDeviceConfig::default(),
        )
        .expect("device");
        // The ring port cuts nothing (the test reads what crossed); TSO's joining is what
        // is under test.
        dev.force_tso_for_test();
        let far = b.rx_queue(0).expect("far rx");
        pairs.push((dev, far, a, b));
    }

    // The device's pcapng, with the snap length `verbs` gives it (MTU + 18).
    let path = std::env::temp_dir().join(format!("wcnet-ctso-{}.pcapng", std::process::id()));
    let w = PcapngWriter::create(
        &eal,
        path.to_str().expect("utf-8"),
        "wcnet_ctso_copies",
        1518,
    )
    .expect("pcapng writer");
    let (dev, far, _, _) = &mut pairs[0];
    queue_super_frame(dev);
    dev.set_pcapng(w).expect("covers the port");
    assert!(dev.flush(), "the ring takes the super-frame");
    far_end_got_the_super_frame(far);
    let w = dev.take_pcapng().expect("the writer");
    assert_eq!(dev.capture_missed(), 0);
    drop(w); // flushes and closes the file
    let frames = pcapng_frames(&std::fs::read(&path).expect("the capture"));
    let _ = std::fs::remove_file(&path);
    check_recorded(&frames);

    // A `Capture` (classic pcap) put around the device.
    let (mut dev, mut far, _a, _b) = pairs.pop().expect("second pair");
    queue_super_frame(&mut dev);
    let mut cap = Capture::new(dev, Vec::new(), 65535);
    assert!(cap.flush(), "the ring takes the super-frame");
    far_end_got_the_super_frame(&mut far);
    assert_eq!(cap.finish(), (PAYLOADS.len() as u64, 0));
    let (dev, out) = cap.into_parts();
    assert_eq!(dev.capture_missed(), 0);
    check_recorded(&pcap_frames(&out));
}
