//! The pcapng writer over a real EAL (no hugepages, no PCI): what it writes is well-formed
//! pcapng (every block's two lengths agree, every packet names an interface the file
//! declares), it refuses what it cannot write so, and a failed `create` leaves nothing behind
//! (no open descriptor, no pool name taken). One test function: the EAL is initialised once
//! per process.

use std::path::PathBuf;

use warpcore_dpdk_sys::{Direction, EalBuilder, Error, Mbuf, Mempool, PcapngWriter, RingPortPair};

/// One block of a pcapng file: its type and body (between the length fields).
struct Block {
    kind: u32,
    body: Vec<u8>,
}

/// Splits little-endian pcapng `bytes` into blocks, checking what a reader checks: each
/// block's leading and trailing lengths agree, are a multiple of 4 and fit the file.
fn blocks(bytes: &[u8]) -> Vec<Block> {
    let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4"));
    let mut out = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        assert!(
            at + 12 <= bytes.len(),
            "a block header at {at} is cut short"
        );
        let (kind, len) = (u32_at(at), u32_at(at + 4) as usize);
        assert!(
            len >= 12 && len % 4 == 0 && at + len <= bytes.len(),
            "block at {at}: length {len} of a {}-octet file",
            bytes.len()
        );
        assert_eq!(
            u32_at(at + len - 4) as usize,
            len,
            "trailing length at {at}"
        );
        out.push(Block {
            kind,
            body: bytes[at + 8..at + len - 4].to_vec(),
        });
        at += len;
    }
    out
}

/// The interface count of a capture and, per enhanced packet block, its interface id,
/// captured and original lengths, and timestamp (in nanoseconds: the interfaces say so).
fn packets(bytes: &[u8]) -> (usize, Vec<(u32, u32, u32)>, Vec<u64>) {
    let blocks = blocks(bytes);
    assert_eq!(
        blocks.first().map(|b| b.kind),
        Some(0x0a0d_0d0a),
        "starts with a SHB"
    );
    let interfaces = blocks.iter().filter(|b| b.kind == 1).count();
    let epbs = blocks
        .iter()
        .filter(|b| b.kind == 6)
        .map(|b| {
            let f = |at: usize| u32::from_le_bytes(b.body[at..at + 4].try_into().expect("4"));
            (
                (f(0), f(12), f(16)),
                (u64::from(f(4)) << 32) | u64::from(f(8)),
            )
        })
        .collect::<Vec<_>>();
    let stamps = epbs.iter().map(|e| e.1).collect();
    (interfaces, epbs.into_iter().map(|e| e.0).collect(), stamps)
}

fn now_ns() -> u64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970");
    u64::try_from(d.as_nanos()).expect("before 2554")
}

fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .count()
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("wcnet-{name}-{}.pcapng", std::process::id()))
}

#[test]
fn captures_are_well_formed_and_failures_leave_nothing_behind() {
    let eal = EalBuilder::for_test("pcapng_capture", 0, 256)
        .vdev("net_null0")
        .init()
        .expect("EAL with --no-huge --no-pci and a net_null port");
    let pool =
        Mempool::new(&eal, "wc_cap_pool", 1023, 0, Mempool::DEFAULT_DATA_ROOM).expect("pool");
    let path = temp("cap");
    let path_str = path.to_str().expect("utf-8");

    // A snap length that keeps nothing, or one whose mbuf size wraps in DPDK's 32 bits
    // (u32::MAX - 2 comes out as 148 octets): refused, not a capture that drops every packet.
    for snaplen in [0, u32::MAX - 2, 70_000] {
        let err = PcapngWriter::create(&eal, path_str, &format!("wc_cap_{snaplen}"), snaplen)
            .expect_err("a snap length outside 1..=65535");
        assert!(
            matches!(err, Error::Pcapng { ref reason, .. } if reason.contains("snaplen")),
            "{err}"
        );
    }

    // A file whose headers cannot be written (/dev/full), one that cannot be created: the
    // error says why, the descriptor is closed and the pool name is still free.
    let before = open_descriptors();
    let err = PcapngWriter::create(&eal, "/dev/full", "wc_cap_copies", 128)
        .expect_err("/dev/full takes no section header");
    assert!(
        matches!(err, Error::Pcapng { ref reason, .. } if reason.contains("No space left")),
        "{err}"
    );
    assert_eq!(
        open_descriptors(),
        before,
        "the descriptor of /dev/full was leaked"
    );
    let missing = std::env::temp_dir().join("wcnet-no-such-dir/cap.pcapng");
    let err = PcapngWriter::create(&eal, missing.to_str().expect("utf-8"), "wc_cap_copies", 128)
        .expect_err("no such directory");
    assert!(matches!(err, Error::Pcapng { .. }), "{err}");
    let mut cap = PcapngWriter::create(&eal, path_str, "wc_cap_copies", 128)
        .expect("the pool name of the failed attempts is free");

    // Ports probed after the file was created have no interface in it, nor has an id past
    // DPDK's port table: refused and counted, not written under an interface read from
    // outside rte_pcapng's port map.
    let RingPortPair { a, .. } = RingPortPair::new(&eal, "wc_cap", 64).expect("ring ports");
    let null = warpcore_dpdk_sys::Port::by_name(&eal, "net_null0").expect("net_null port");
    let frame = |len: usize| {
        let data: Vec<u8> = (0..len).map(|i| i as u8).collect();
        Mbuf::from_slice(&pool, &data).expect("mbuf")
    };
    let m = frame(60);
    for port in [a.id(), 999] {
        let err = cap
            .record(port, 0, &m, Direction::Tx)
            .expect_err("a port without an interface in the file");
        assert!(err.to_string().contains(&format!("port {port}")), "{err}");
    }
    assert!(cap.covers(null.id()).is_ok() && cap.covers(a.id()).is_err());
    assert_eq!(cap.dropped(), 2);
    // What the drop prints to standard error names the file and the count.
    let report = cap.loss_report().expect("two packets were not captured");
    assert!(
        report.contains(path_str) && report.contains("2 packet(s) NOT captured"),
        "{report}"
    );

    // The port probed with the EAL: recorded, cut to the snap length, stamped with the time
    // they were recorded at (DPDK's own conversion puts the first packet of the process,
    // and all after it, two centuries ahead).
    let start = now_ns();
    for (len, dir) in [
        (60, Direction::Tx),
        (61, Direction::Rx),
        (300, Direction::Rx),
    ] {
        cap.record(null.id(), 0, &frame(len), dir)
            .expect("net_null0 is in the file");
    }
    cap.flush();
    // A write the disk cut short (half a block at the end of the file would make every
    // later block unreadable): that batch is dropped, the file cut back to its last whole
    // block, and the next batch follows it.
    cap.pretend_next_write_short(10);
    cap.record(null.id(), 0, &frame(90), Direction::Tx)
        .expect("net_null0 is in the file");
    cap.flush();
    assert_eq!(cap.dropped(), 3);
    cap.record(null.id(), 0, &frame(62), Direction::Tx)
        .expect("net_null0 is in the file");
    let end = now_ns();
    drop(cap);
    let bytes = std::fs::read(&path).expect("capture file");
    let _ = std::fs::remove_file(&path);
    let (interfaces, epbs, stamps) = packets(&bytes);
    assert_eq!(interfaces, 1, "net_null0 alone was probed at creation");
    assert_eq!(epbs, [(0, 60, 60), (0, 61, 61), (0, 128, 300), (0, 62, 62)]);
    // A millisecond either way for the TSC frequency DPDK measured.
    for (i, &t) in stamps.iter().enumerate() {
        assert!(
            t + 1_000_000 >= start && t <= end + 1_000_000,
            "packet {i} stamped {t} ns, recorded between {start} and {end}"
        );
    }
    assert!(stamps.windows(2).all(|w| w[0] <= w[1]), "{stamps:?}");
}
