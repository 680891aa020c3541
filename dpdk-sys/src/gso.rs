//! DPDK's software segmentation (librte_gso): cuts a TCP super-frame marked for TSO
//! ([`crate::Mbuf::set_tx_tso`]) the way a port's TSO does. net_tap's TSO is exactly this
//! library inside the driver; Warpcore's tests use it to check, without a port, what the
//! wire carries for the super-frames it builds.

use crate::{ffi, Error, Mbuf, Mempool};

/// Output segments one [`Gso::segment`] call can return (net_tap's limit, `MAX_GSO_MBUFS`).
pub const GSO_SEGMENTS_MAX: usize = 64;

/// A segmentation context: the pool the segments' header copies and payload references come
/// from, and the largest segment (Ethernet, IPv4 and TCP headers plus payload) to cut.
#[derive(Debug)]
pub struct Gso {
    ctx: ffi::rte_gso_ctx,
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
        }
    }

    /// Cuts `pkt` (which must ask for TSO) into segments, each a header copy followed by a
    /// reference to its part of `pkt`'s payload (which stays alive as long as they do).
    /// `pkt` itself is left to the caller. An empty result means `pkt` needs no cutting
    /// (it fits one frame); DPDK then clears its TSO flag.
    pub fn segment(&self, pkt: &mut Mbuf) -> Result<Vec<Mbuf>, Error> {
        let mut out = [std::ptr::null_mut::<ffi::rte_mbuf>(); GSO_SEGMENTS_MAX];
        // SAFETY: pkt is a valid packet we own for the call; out has room for
        // GSO_SEGMENTS_MAX pointers, the count passed; the context's pools live for the
        // process. rte_gso_segment does not free pkt; each segment it writes to out is a new
        // packet owned by the caller.
        let n = unsafe {
            ffi::rte_gso_segment(
                pkt.as_raw(),
                &self.ctx,
                out.as_mut_ptr(),
                GSO_SEGMENTS_MAX as u16,
            )
        };
        if n < 0 {
            return Err(Error::Gso {
                reason: Error::code_reason(n),
            });
        }
        Ok(out[..n as usize]
            .iter()
            .filter_map(|&p| std::ptr::NonNull::new(p))
            // SAFETY: each pointer is a segment rte_gso_segment just created for us.
            .map(|p| unsafe { Mbuf::from_raw(p) })
            .collect())
    }
}
