//! DPDK's software segmentation (librte_gso): cuts a TCP super-frame marked for TSO
//! ([`crate::Mbuf::set_tx_tso`]) the way a port's TSO does. net_tap's TSO is exactly this
//! library inside the driver; Warpcore's tests use it to check, without a port, what the
//! wire carries for the super-frames it builds.

use crate::{ffi, Error, Mbuf, Mempool};

/// Output segments one [`Gso::segment`] call can return (net_tap's limit, `MAX_GSO_MBUFS`).
pub const GSO_SEGMENTS_MAX: usize = 64;

/// Headroom DPDK keeps in front of every mbuf's data (`RTE_PKTMBUF_HEADROOM`).
const HEADROOM: usize = 128;

/// The shortest IPv4 and TCP headers (RFC 791, RFC 9293): librte_gso accesses both as
/// whole headers of at least this length.
const IPV4_HEADER_MIN: usize = 20;
const TCP_HEADER_MIN: usize = 20;

/// A segmentation context: the pool the segments' header copies and payload references come
/// from, and the largest segment (Ethernet, IPv4 and TCP headers plus payload) to cut.
#[derive(Debug)]
pub struct Gso {
    ctx: ffi::rte_gso_ctx,
    room: usize,
}

impl Gso {
    /// A context cutting TCP/IPv4 packets into frames of at most `frame_max` octets, headers
    /// included, with segments from `pool`. The IPv4 identification is incremented per segment
    /// (as net_tap's TSO does).
    pub fn new(pool: &Mempool, frame_max: u16) -> Gso {
        Gso {
            ctx: ffi::rte_gso_ctx {
                direct_pool: pool.as_ptr(),
                indirect_pool: pool.as_ptr(),
                flag: 0,
                gso_types: ffi::RTE_ETH_TX_OFFLOAD_TCP_TSO,
                gso_size: frame_max,
            },
            room: usize::from(pool.data_room()).saturating_sub(HEADROOM),
        }
    }

    /// Cuts `pkt` (which must ask for TSO) into segments and returns a copy of each (the
    /// segments librte_gso builds share `pkt`'s buffers, so they never leave this call).
    /// A packet that fits one frame comes back whole. Refused with [`Error::Gso`], before
    /// librte_gso sees it, when `pkt` does not ask for TSO, when its header is shared with
    /// another owner (a reference count above 1: librte_gso clears its TSO flag), when its
    /// IPv4 or TCP header length (in its offload word) is under 20 octets, or when its
    /// headers are not all in its first segment, do not fit one of the pool's mbufs or leave
    /// no payload in a frame of the context's size.
    pub fn segment(&self, pkt: Mbuf) -> Result<Vec<Vec<u8>>, Error> {
        let refuse = |why: String| Err(Error::Gso { reason: why });
        if pkt.tx_tso_segsz().is_none() {
            return refuse("the packet does not ask for TSO".into());
        }
        // librte_gso clears the packet's TSO flag (RTE_MBUF_F_TX_TCP_SEG) when it cuts it:
        // a header shared with another owner (a reference count above 1) is not ours to
        // change.
        // SAFETY: the first segment of the chain pkt owns.
        if let Err(e) = unsafe { crate::mbuf::header_owner(pkt.as_raw()) } {
            return refuse(format!("the packet's header is shared: {e}"));
        }
        let (l2, l3, l4) = pkt.tx_header_lens();
        // librte_gso rewrites the IPv4 total length and identification and the TCP sequence
        // number and flags of every segment's header copy in place, and reads them from
        // `pkt`, at the offsets the lengths give but as whole 20-octet headers: shorter
        // lengths would have it read and write past the headers, and so past the mbufs
        // checked below to hold them.
        if l3 < IPV4_HEADER_MIN || l4 < TCP_HEADER_MIN {
            return refuse(format!(
                "IPv4 header of {l3} octets and TCP header of {l4} (at least \
                 {IPV4_HEADER_MIN} and {TCP_HEADER_MIN})"
            ));
        }
        let hdr = l2 + l3 + l4;
        if hdr > pkt.data_len() || hdr > self.room || hdr >= usize::from(self.ctx.gso_size) {
            return refuse(format!(
                "{hdr} header octets (first segment {}, pool room {}, frame {})",
                pkt.data_len(),
                self.room,
                self.ctx.gso_size
            ));
        }
        let mut out = [std::ptr::null_mut::<ffi::rte_mbuf>(); GSO_SEGMENTS_MAX];
        // SAFETY: pkt is a valid packet we own for the call, its headers (as its offload word
        // gives them, which librte_gso copies, with IPv4 and TCP headers long enough for the
        // fields it rewrites) are inside its first segment and fit a pool mbuf, and the
        // frame size leaves payload (checked above); out has room for
        // GSO_SEGMENTS_MAX pointers, the count passed; the context's pools live for the
        // process. rte_gso_segment does not free pkt; each segment it writes to out is a new
        // packet owned by us, whose payload refers to pkt's buffers.
        let n = unsafe {
            ffi::rte_gso_segment(
                pkt.as_raw(),
                &self.ctx,
                out.as_mut_ptr(),
                GSO_SEGMENTS_MAX as u16,
            )
        };
        if n < 0 {
            return refuse(Error::code_reason(n));
        }
        let copy = |m: &Mbuf| {
            let mut v = vec![0; m.pkt_len()];
            m.copy_to_slice(&mut v);
            v
        };
        let segs: Vec<Mbuf> = out[..n as usize]
            .iter()
            .filter_map(|&p| std::ptr::NonNull::new(p))
            // SAFETY: each pointer is a segment rte_gso_segment just created for us.
            .map(|p| unsafe { Mbuf::from_raw(p) })
            .collect();
        if segs.is_empty() {
            return Ok(vec![copy(&pkt)]);
        }
        // The segments are read and dropped here, before pkt: nothing else sees the
        // buffers they share with it.
        Ok(segs.iter().map(copy).collect())
    }
}
