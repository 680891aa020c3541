//! A port configured with the driver's default MTU (`PortConfig::mtu: None`, 1500) over a
//! pool whose mbufs cannot hold a whole 1500-octet frame must still receive such frames:
//! `Port::configure` enables receive scatter (chained mbufs) for the default MTU as it does
//! for one given explicitly. Without it net_tap reads each frame into one mbuf
//! (`pmd_rx_burst`'s `readv` of a single buffer without `RTE_ETH_RX_OFFLOAD_SCATTER`,
//! DPDK 22.11) and drops every longer one, counted in `ierrors`: a TCP connection whose
//! handshake works stalls on its first full-sized segment.
//!
//! Over a real net_tap port: the kernel sends a 1,400-octet UDP datagram out of the tap
//! interface (a static neighbour entry, so no ARP is needed), and the port must hand it over
//! whole. Needs root (a tap interface) and fails without it. One test function: the
//! EAL is initialised once per process.

use std::process::Command;
use std::time::{Duration, Instant};

mod common;

use warpcore_dpdk_sys::{EalBuilder, Mbuf, Mempool, Port, PortConfig};

const IFACE: &str = "wcrevscat0";
const LOCAL: &str = "10.251.77.1";
const PEER: &str = "10.251.77.2";
const PEER_MAC: &str = "02:00:00:fb:4d:02";

/// Runs `ip` with the words of `args`.
fn ip(args: &str) {
    let st = Command::new("ip")
        .args(args.split_whitespace())
        .status()
        .expect("run ip");
    assert!(st.success(), "ip {args}");
}

#[test]
fn default_mtu_frames_longer_than_one_mbuf_are_received() {
    common::require_root();
    let eal = EalBuilder::for_test("port_rx_scatter", 0, 256)
        .vdev(&format!("net_tap0,iface={IFACE}"))
        .init()
        .expect("EAL with a net_tap port");
    // 1,024 octets of data per mbuf: a 1,442-octet frame needs two.
    let pool = Mempool::new(&eal, "wc_rev_scatter", 2047, 0, 1024 + 128).expect("pool");
    let mut p = Port::by_name(&eal, "net_tap0").expect("tap port");
    assert!(
        p.info().rx_offload_capa & (1 << 13) != 0,
        "net_tap offers RTE_ETH_RX_OFFLOAD_SCATTER"
    );
    let off = p
        .configure(
            &PortConfig {
                rx_desc: 512,
                tx_desc: 512,
                mtu: None,
                checksum_offload: false,
                ..PortConfig::default()
            },
            &pool,
        )
        .expect("configure with the default MTU");
    assert_eq!(p.mtu().expect("mtu"), 1500);
    p.start().expect("start");
    ip(&format!("addr add {LOCAL}/24 dev {IFACE}"));
    ip(&format!("link set {IFACE} up"));
    ip(&format!(
        "neigh replace {PEER} lladdr {PEER_MAC} dev {IFACE} nud permanent"
    ));
    let mut rx = p.rx_queue(0).expect("rx queue");

    let sock = std::net::UdpSocket::bind(format!("{LOCAL}:0")).expect("udp socket");
    let payload = vec![0x5a_u8; 1400];
    let mut got: Vec<Mbuf> = Vec::new();
    let mut longest = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while longest < 1442 && Instant::now() < deadline {
        let _ = sock.send_to(&payload, format!("{PEER}:9"));
        std::thread::sleep(Duration::from_millis(20));
        got.clear();
        rx.rx_burst(&mut got, 64);
        longest = got
            .iter()
            .map(Mbuf::pkt_len)
            .max()
            .unwrap_or(0)
            .max(longest);
    }
    let ierrors = p.stats().map(|s| s.ierrors).unwrap_or(0);
    drop(rx);
    assert!(
        longest >= 1442,
        "no 1,442-octet frame received (longest {longest}, ierrors {ierrors}, receive \
         scatter {}): frames of the default MTU longer than one mbuf are dropped",
        off.rx_scatter
    );
    assert!(
        off.rx_scatter,
        "receive scatter enabled for the default MTU"
    );
}
