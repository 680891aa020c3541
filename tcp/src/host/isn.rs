//! Initial sequence numbers per RFC 6528 and the keyed hash of the demultiplexing table.
//!
//! ISN = M + F(local address, local port, remote address, remote port, secret), where M is a
//! clock of 4 us ticks (RFC 6528 3, RFC 9293 3.4.1) and F is SipHash-2-4 under a secret key.
//! The key comes from the stack's seed, so runs over the in-memory link stay reproducible;
//! the engine seeds production stacks from the operating system's randomness.
//!
//! Ephemeral ports per RFC 6056 3.3.3 (Algorithm 3, the simple hash-based one): port = min +
//! (next + F(remote address, remote port, secret)) mod count, with `next` one counter for
//! every destination and F a keyed SipHash-2-4 of its own key.
//!
//! Timestamp clock offsets per 4-tuple: TSval = our microsecond clock + G(local address,
//! local port, remote address, remote port, secret), G a keyed SipHash-2-4 of its own key.
//! The offset hides the clock (as F hides M) and stays the same for every incarnation of a
//! 4-tuple, so the TSvals of a later incarnation never lie below an earlier one's: PAWS
//! keeps an old duplicate out of the new connection (RFC 7323 5.8; RFC 6191 2 and 3 ask
//! timestamps monotonic across the incarnations of a 4-tuple), what lets TIME-WAIT be
//! short or end early (RFC 1337's hazard H1). Drawn from each connection's ISN, as
//! before, a later incarnation's clock could lie billions of ticks behind an earlier one's.

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
    /// The key of the timestamp clock offsets ([`IsnGen::ts_offset`]).
    ts0: u64,
    ts1: u64,
}

impl IsnGen {
    pub fn new(seed: u64) -> Self {
        let mut s = seed ^ 0x6528_6528_6528_6528;
        // The ISN key first: drawn as before, so a seed gives the same ISNs.
        let (k0, k1) = (splitmix(&mut s), splitmix(&mut s));
        IsnGen {
            k0,
            k1,
            ts0: splitmix(&mut s),
            ts1: splitmix(&mut s),
        }
    }

    /// The timestamp clock offset of every connection of this 4-tuple (module docs): the
    /// same for each incarnation, unrelated to the ISN's.
    pub fn ts_offset(&self, local: (Ipv4Address, u16), remote: (Ipv4Address, u16)) -> u32 {
        let mut h = SipHasher24::new_with_keys(self.ts0, self.ts1);
        h.write(&local.0.octets());
        h.write_u16(local.1);
        h.write(&remote.0.octets());
        h.write_u16(remote.1);
        h.finish() as u32
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

/// The RFC 6056 3.3.3 (Algorithm 3) ephemeral port selector: each destination's ports run
/// from its own secret offset, so a peer that sees the ports of its own connections learns
/// nothing of the ports of ours to anyone else (a global counter from a random start, as
/// before, gave every connection the port after the last one's, whoever its peer: RFC 6056
/// 2.2's trivially guessed sequence, to any peer that also saw one of our connections).
#[derive(Debug, Clone)]
pub(crate) struct PortGen {
    k0: u64,
    k1: u64,
    /// RFC 6056's `next_ephemeral`: one step per port tried, for any destination.
    next: u32,
}

impl PortGen {
    pub fn new(seed: u64) -> Self {
        let mut s = seed ^ 0x6056_6056_6056_6056;
        PortGen {
            k0: splitmix(&mut s),
            k1: splitmix(&mut s),
            next: splitmix(&mut s) as u32,
        }
    }

    /// The candidates for a connection to `remote`, in the order to try them: each of the
    /// `count` ports from `first` on, once, starting at this destination's offset plus the
    /// counter, which advances by one per candidate taken (RFC 6056 3.3.3).
    pub fn candidates(
        &mut self,
        remote: (Ipv4Address, u16),
        first: u16,
        count: u32,
    ) -> impl Iterator<Item = u16> + '_ {
        let mut h = SipHasher24::new_with_keys(self.k0, self.k1);
        h.write(&remote.0.octets());
        h.write_u16(remote.1);
        let offset = h.finish() as u32;
        (0..count).map(move |_| {
            let k = self.next.wrapping_add(offset) % count;
            self.next = self.next.wrapping_add(1);
            first + k as u16
        })
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

    /// RFC 7323 5.8, RFC 6191 3: the timestamp clock offset is the same for every
    /// incarnation of a 4-tuple (whatever the time), differs per 4-tuple and per key, and
    /// leaves the ISNs of a seed as they were.
    #[test]
    fn rfc6191_3_the_timestamp_offset_is_one_per_4_tuple() {
        let g = IsnGen::new(1);
        assert_eq!(g.ts_offset(A, B), IsnGen::new(1).ts_offset(A, B));
        assert_ne!(g.ts_offset(A, (B.0, B.1 + 1)), g.ts_offset(A, B));
        assert_ne!(IsnGen::new(2).ts_offset(A, B), g.ts_offset(A, B));
        let mut s = 1u64 ^ 0x6528_6528_6528_6528;
        let (k0, k1) = (splitmix(&mut s), splitmix(&mut s));
        assert_eq!((g.k0, g.k1), (k0, k1));
    }

    /// RFC 6056 3.3.3: a destination's candidates are every port of the range once (so a
    /// full range is found full only after each was tried), and the counter they share
    /// moves on by one per candidate taken.
    #[test]
    fn rfc6056_3_3_3_candidates_cover_the_range_once() {
        let mut g = PortGen::new(7);
        let all: std::collections::BTreeSet<u16> = g.candidates(B, 49152, 16384).collect();
        assert_eq!(all.len(), 16384);
        assert_eq!(all.first(), Some(&49152));
        assert_eq!(all.last(), Some(&u16::MAX));
        let p = g.candidates(B, 49152, 16384).next().unwrap();
        let q = g.candidates(B, 49152, 16384).next().unwrap();
        assert_eq!(q, if p == u16::MAX { 49152 } else { p + 1 });
    }
}
