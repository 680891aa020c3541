//! Initial sequence numbers per RFC 6528 and the keyed hash of the demultiplexing table.
//!
//! ISN = M + F(local address, local port, remote address, remote port, secret), where M is a
//! clock of 4 us ticks (RFC 6528 3, RFC 9293 3.4.1) and F is SipHash-2-4 under a secret key.
//! The key comes from the stack's seed, so runs over the in-memory link stay reproducible;
//! the engine seeds production stacks from the operating system's randomness.

use std::hash::{BuildHasher, Hasher};

use siphasher::sip::{SipHasher13, SipHasher24};
use smoltcp::time::Instant;
use smoltcp::wire::{Ipv4Address, TcpSeqNumber};

/// SplitMix64: spreads a seed into independent keys.
fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The RFC 6528 generator.
#[derive(Debug, Clone)]
pub(crate) struct IsnGen {
    k0: u64,
    k1: u64,
}

impl IsnGen {
    pub fn new(seed: u64) -> Self {
        let mut s = seed ^ 0x6528_6528_6528_6528;
        IsnGen {
            k0: splitmix(&mut s),
            k1: splitmix(&mut s),
        }
    }

    pub fn isn(
        &self,
        now: Instant,
        local: (Ipv4Address, u16),
        remote: (Ipv4Address, u16),
    ) -> TcpSeqNumber {
        let mut h = SipHasher24::new_with_keys(self.k0, self.k1);
        h.write(&local.0.octets());
        h.write_u16(local.1);
        h.write(&remote.0.octets());
        h.write_u16(remote.1);
        let m = (now.total_micros() / 4) as u32;
        TcpSeqNumber(m.wrapping_add(h.finish() as u32) as i32)
    }
}

/// A keyed SipHash-1-3 for the connection table: peers choose the 4-tuples, so an unkeyed
/// hash would let them collide every entry into one bucket.
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyedHash {
    k0: u64,
    k1: u64,
}

impl KeyedHash {
    pub fn new(seed: u64) -> Self {
        let mut s = seed ^ 0xd3_a1_7a_b1_e5;
        KeyedHash {
            k0: splitmix(&mut s),
            k1: splitmix(&mut s),
        }
    }
}

impl BuildHasher for KeyedHash {
    type Hasher = SipHasher13;
    fn build_hasher(&self) -> SipHasher13 {
        SipHasher13::new_with_keys(self.k0, self.k1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: (Ipv4Address, u16) = (Ipv4Address::new(198, 18, 0, 1), 4791);
    const B: (Ipv4Address, u16) = (Ipv4Address::new(198, 18, 0, 2), 50000);

    #[test]
    fn rfc6528_isn_advances_with_the_clock_and_differs_per_tuple_and_key() {
        let g = IsnGen::new(1);
        let t0 = Instant::from_micros(0);
        let i0 = g.isn(t0, A, B);
        // M ticks every 4 us (RFC 6528 3).
        assert_eq!(g.isn(Instant::from_micros(400), A, B), i0 + 100);
        assert_ne!(g.isn(t0, A, (B.0, B.1 + 1)), i0);
        assert_ne!(IsnGen::new(2).isn(t0, A, B), i0);
        // Same key and inputs: reproducible.
        assert_eq!(IsnGen::new(1).isn(t0, A, B), i0);
    }
}
