//! What rping puts on the wire above RDMAP: the 16-octet buffer advertisement carried by
//! every Send, and the data pattern of the ping buffer. Both follow rdma-core's
//! `librdmacm/examples/rping.c` (`struct rping_rdma_info`, `rping_test_client`), so that
//! each side can talk to the real tool.

/// Size of the advertisement (`struct rping_rdma_info`): u64 address, u32 rkey, u32 size.
pub const INFO_LEN: usize = 16;
/// rping's default and limits for `-S`: large enough for the "rdma-ping-N: " prefix with
/// any `int` (rping computes 26 from its format string), below 64 KiB.
pub const MIN_SIZE: u32 = 26;
/// Largest `-S` (rping: `RPING_BUFSIZE - 1`).
pub const MAX_SIZE: u32 = 64 * 1024 - 1;

/// A buffer advertisement: where the peer may Read from or Write to. All fields travel in
/// network byte order (big endian), as rping's `htobe64`/`htobe32` put them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RdmaInfo {
    /// Tagged offset of the buffer (rping sends its virtual address; Warpcore's regions are
    /// zero-based, so ours is an offset into the region).
    pub buf: u64,
    /// STag of the region.
    pub rkey: u32,
    /// Length of the buffer.
    pub size: u32,
}

impl RdmaInfo {
    /// The 16 octets of the advertisement.
    pub fn to_bytes(self) -> [u8; INFO_LEN] {
        let mut b = [0u8; INFO_LEN];
        b[..8].copy_from_slice(&self.buf.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..].copy_from_slice(&self.size.to_be_bytes());
        b
    }

    /// Parses a received advertisement; rping rejects any other length ("Received bogus
    /// data"), and so do we.
    pub fn parse(b: &[u8]) -> Result<RdmaInfo, String> {
        if b.len() != INFO_LEN {
            return Err(format!(
                "received bogus advertisement: {} octets, expected {INFO_LEN}",
                b.len()
            ));
        }
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut buf = [0u8; 8];
        buf.copy_from_slice(&b[..8]);
        Ok(RdmaInfo {
            buf: u64::from_be_bytes(buf),
            rkey: u32_at(8),
            size: u32_at(12),
        })
    }
}

/// First character of the cycling part of ping `ping`'s buffer: rping starts at 'A' (65)
/// and moves on by one per ping, wrapping after 'z' (122).
pub fn start_char(ping: u64) -> u8 {
    65 + (ping % 58) as u8
}

/// The contents of rping's start buffer for ping number `ping` of `size` octets:
/// "rdma-ping-N: " followed by characters counting up from [`start_char`] (wrapping from
/// 'z' to 'A'), the last octet NUL.
pub fn pattern(ping: u64, size: usize) -> Vec<u8> {
    let mut b = vec![0u8; size];
    if size == 0 {
        return b;
    }
    // rping formats with the C `int` counter and snprintf, which truncates to size-1.
    let head = format!("rdma-ping-{}: ", ping as i32);
    let n = head.len().min(size - 1);
    b[..n].copy_from_slice(&head.as_bytes()[..n]);
    let mut c = start_char(ping);
    for x in b.iter_mut().take(size).skip(head.len()) {
        *x = c;
        c = if c >= 122 { 65 } else { c + 1 };
    }
    b[size - 1] = 0;
    b
}

/// The printable part of a ping buffer (up to the first NUL), as rping's `%s` shows it.
pub fn as_text(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// rping's server Writes `strlen(buf) + 1` octets back: the text and its NUL.
pub fn echo_len(b: &[u8]) -> usize {
    b.iter().position(|&c| c == 0).map_or(b.len(), |n| n + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advertisement_is_big_endian_and_round_trips() {
        let i = RdmaInfo {
            buf: 0x0102_0304_0506_0708,
            rkey: 0x1122_3344,
            size: 64,
        };
        let b = i.to_bytes();
        assert_eq!(
            b,
            [1, 2, 3, 4, 5, 6, 7, 8, 0x11, 0x22, 0x33, 0x44, 0, 0, 0, 64]
        );
        assert_eq!(RdmaInfo::parse(&b), Ok(i));
        assert!(RdmaInfo::parse(&b[..15]).is_err());
        assert!(RdmaInfo::parse(&[0u8; 17]).is_err());
    }

    #[test]
    fn pattern_matches_rping_first_pings() {
        // As captured from rping -c -S 64 (siw_mpa2_rping.pcap, first Read Response).
        let p = pattern(0, 64);
        assert_eq!(&p[..13], b"rdma-ping-0: ");
        assert_eq!(p[13], b'A');
        assert_eq!(p[14], b'B');
        assert_eq!(p[63], 0);
        assert_eq!(echo_len(&p), 64);
        let q = pattern(1, 64);
        assert_eq!(q[13], b'B');
        assert_eq!(as_text(&q).len(), 63);
        // Wrap after 'z' both inside a buffer and across pings.
        let long = pattern(0, 200);
        let z = long.iter().position(|&c| c == b'z').unwrap();
        assert_eq!(long[z + 1], b'A');
        assert_eq!(start_char(57), b'z');
        assert_eq!(start_char(58), b'A');
    }
}
