//! A wire for tests that does what a TSO port does: it carries frames between two DPDK
//! queue pairs and cuts every TSO super-frame ([`crate::tso`]) on the way with DPDK's own
//! segmentation library (librte_gso, which net_tap's TSO runs), filling in the IPv4 and
//! TCP checksums of each segment as a port would. Every frame it delivers is shown to the
//! caller first, so a test can judge what the wire carried.

use smoltcp::wire::{EthernetFrame, IpAddress, Ipv4Packet, TcpPacket};
use warpcore_dpdk_sys::{Gso, Mbuf, Mempool, RxQueue, TxQueue};

/// One side of the wire: the queues of the port facing a stack.
#[derive(Debug)]
pub struct WireEnd {
    /// Frames the stack sent.
    pub rx: RxQueue,
    /// Frames for the stack.
    pub tx: TxQueue,
}

/// Two [`WireEnd`]s and the frames waiting for room towards each.
#[derive(Debug)]
pub struct GsoWire {
    a: WireEnd,
    b: WireEnd,
    pool: Mempool,
    to_a: Vec<Mbuf>,
    to_b: Vec<Mbuf>,
    super_frames: u64,
}

impl GsoWire {
    /// A wire between the port facing stack A and the one facing stack B; segments and
    /// their copies come from `pool`.
    pub fn new(a: WireEnd, b: WireEnd, pool: Mempool) -> GsoWire {
        GsoWire {
            a,
            b,
            pool,
            to_a: Vec::new(),
            to_b: Vec::new(),
            super_frames: 0,
        }
    }

    /// Super-frames cut so far.
    pub fn super_frames(&self) -> u64 {
        self.super_frames
    }

    /// Moves what waits on either side. `observe(a_to_b, frame, cut)` sees every frame
    /// delivered (`cut`: it is a segment of a super-frame). Returns whether anything moved.
    ///
    /// # Panics
    /// When librte_gso fails or the pool runs dry: a test's wire must not lose frames.
    pub fn carry(&mut self, observe: &mut dyn FnMut(bool, &[u8], bool)) -> bool {
        let ab = carry_one(
            &mut self.a.rx,
            &mut self.b.tx,
            &mut self.to_b,
            self.pool,
            &mut self.super_frames,
            &mut |f, cut| observe(true, f, cut),
        );
        let ba = carry_one(
            &mut self.b.rx,
            &mut self.a.tx,
            &mut self.to_a,
            self.pool,
            &mut self.super_frames,
            &mut |f, cut| observe(false, f, cut),
        );
        ab | ba
    }
}

fn carry_one(
    rx: &mut RxQueue,
    tx: &mut TxQueue,
    waiting: &mut Vec<Mbuf>,
    pool: Mempool,
    super_frames: &mut u64,
    observe: &mut dyn FnMut(&[u8], bool),
) -> bool {
    let mut moved = false;
    if !waiting.is_empty() {
        moved = tx.tx_burst(waiting) > 0;
        if !waiting.is_empty() {
            // The ring towards the stack is full: leave the rest on the other ring.
            return moved;
        }
    }
    let mut got = Vec::new();
    rx.rx_burst(&mut got, 64);
    if got.is_empty() {
        return moved;
    }
    for m in got {
        let (frames, cut) = match m.tx_tso_segsz() {
            Some(segsz) => {
                // Our headers: Ethernet, IPv4 without options, TCP (its data offset).
                let hdr = 14 + 20 + usize::from(m.data()[14 + 20 + 12] >> 4) * 4;
                let gso = Gso::new(&pool, (hdr + usize::from(segsz)) as u16);
                let mut segs = gso.segment(m).expect("rte_gso_segment");
                assert!(segs.len() >= 2, "a super-frame of one segment");
                *super_frames += 1;
                for v in &mut segs {
                    fill_checksums(v);
                }
                (segs, true)
            }
            None => {
                let mut v = vec![0; m.pkt_len()];
                m.copy_to_slice(&mut v);
                (vec![v], false)
            }
        };
        for v in frames {
            observe(&v, cut);
            waiting.push(Mbuf::from_slice(&pool, &v).expect("the wire's pool ran dry"));
        }
    }
    tx.tx_burst(waiting);
    true
}

/// What a port does after cutting: both checksums of each segment.
fn fill_checksums(v: &mut [u8]) {
    let mut eth = EthernetFrame::new_unchecked(v);
    let mut ip = Ipv4Packet::new_unchecked(eth.payload_mut());
    ip.fill_checksum();
    let (src, dst) = (ip.src_addr(), ip.dst_addr());
    let mut tcp = TcpPacket::new_unchecked(ip.payload_mut());
    tcp.fill_checksum(&IpAddress::Ipv4(src), &IpAddress::Ipv4(dst));
}
