//! iwperf's own out-of-band vocabulary, carried in-band (documented in docs/iwperf.md):
//!
//! * **Hello** (36 octets, big-endian) in the MPA Request private data (client to server)
//!   and in the MPA Reply private data (server to client): `"IWPF"`, version, test, flags,
//!   reserved, QP index, QP count, TX depth, data STag, data length, control STag, inline size.
//!   It replaces perftest's TCP socket exchange of QPN/PSN/RKey/VAddr. The client's
//!   Request appends its largest size, `-r` and the run's shape ([`RunShape`]).
//! * **Control messages** (64 octets) as Sends with the Solicited Event flag (so a receiver
//!   can tell them from a send test's data Sends): `"IWPF"`, kind, size, iterations,
//!   duration in ns, and three values (see [`Ctrl`]).
//! * **Data pattern**: a function of (salt, iteration, offset), so the receiving side can
//!   check every octet of every message it verifies.

/// Magic at the start of every iwperf message.
pub const MAGIC: &[u8; 4] = b"IWPF";
/// Hello format version.
pub const VERSION: u8 = 1;
/// Octets of a control message (magic, kind, seven 64-bit values).
pub const CTRL_LEN: usize = 64;

/// Hello flag: the client verifies data.
pub const FLAG_VERIFY: u8 = 1;
/// Hello flag: bidirectional bandwidth test.
pub const FLAG_BIDIR: u8 = 2;
/// Hello flag: write tests use RDMA Write with Immediate Data.
pub const FLAG_IMM: u8 = 4;
/// Hello flag: atomic tests use CmpSwap (else FetchAdd).
pub const FLAG_CMP_SWAP: u8 = 8;

/// The buffers one side offers the other, plus the run's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Hello {
    /// Test number (index in `TestName::ALL`).
    pub test: u8,
    /// `FLAG_*` bits.
    pub flags: u8,
    /// Which QP of the run this connection is.
    pub qp_index: u16,
    /// QPs in the run.
    pub qps: u16,
    /// Work requests in flight per QP.
    pub tx_depth: u32,
    /// STag of the data region (RDMA Write target, RDMA Read source, Send sink).
    pub data_stag: u32,
    /// Length of the data region.
    pub data_len: u64,
    /// STag of the control region (the credit word is written there).
    pub ctrl_stag: u32,
    /// `-I`: messages up to this size are posted inline (both sides).
    pub inline: u32,
}

impl Hello {
    /// Encoded length.
    pub const LEN: usize = 36;

    /// Encodes.
    pub fn encode(&self) -> [u8; Hello::LEN] {
        let mut b = [0u8; Hello::LEN];
        b[..4].copy_from_slice(MAGIC);
        b[4] = VERSION;
        b[5] = self.test;
        b[6] = self.flags;
        b[8..10].copy_from_slice(&self.qp_index.to_be_bytes());
        b[10..12].copy_from_slice(&self.qps.to_be_bytes());
        b[12..16].copy_from_slice(&self.tx_depth.to_be_bytes());
        b[16..20].copy_from_slice(&self.data_stag.to_be_bytes());
        b[20..28].copy_from_slice(&self.data_len.to_be_bytes());
        b[28..32].copy_from_slice(&self.ctrl_stag.to_be_bytes());
        b[32..36].copy_from_slice(&self.inline.to_be_bytes());
        b
    }

    /// Decodes, saying why not: no iwperf hello at all, or one of another version (named,
    /// with ours: a peer running another iwperf is not a peer running something else).
    pub fn parse(b: &[u8]) -> Result<Hello, String> {
        if b.len() < 5 || &b[..4] != MAGIC {
            return Err("no iwperf hello".into());
        }
        if b[4] != VERSION {
            return Err(format!(
                "an iwperf hello of version {}, not version {VERSION}",
                b[4]
            ));
        }
        Hello::decode(b).ok_or_else(|| {
            format!(
                "a short iwperf hello ({} octets, {} expected)",
                b.len(),
                Hello::LEN
            )
        })
    }

    /// Decodes; `None` for anything that is not an iwperf hello of our version.
    pub fn decode(b: &[u8]) -> Option<Hello> {
        if b.len() < Hello::LEN || &b[..4] != MAGIC || b[4] != VERSION {
            return None;
        }
        let u16_at = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_be_bytes(b[i..i + 4].try_into().unwrap_or_default());
        Some(Hello {
            test: b[5],
            flags: b[6],
            qp_index: u16_at(8),
            qps: u16_at(10),
            tx_depth: u32_at(12),
            data_stag: u32_at(16),
            data_len: u64::from_be_bytes(b[20..28].try_into().unwrap_or_default()),
            ctrl_stag: u32_at(28),
            inline: u32_at(32),
        })
    }
}

/// The run the client asks for, sent after the hello, its largest size and `-r` in the MPA
/// Request's private data (octets 44 to 67, big-endian): its one message size (0: every
/// size, `-a`), iterations per size (0: a timed run), each size's duration in ns (0: by
/// iterations). A server holds it against the run flags on its own command line
/// ([`crate::cli::ServerRun`]); a client too old to send it is not checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RunShape {
    /// The one message size, or 0 for `-a`.
    pub size: u64,
    /// Iterations per size, or 0 for a timed run.
    pub iters: u64,
    /// Duration of each size in ns, or 0 for a run by iterations.
    pub duration_ns: u64,
}

impl RunShape {
    /// Encoded length.
    pub const LEN: usize = 24;
    /// Where it starts in the client's private data: after the hello, the largest size and
    /// `-r` (four octets each).
    pub const OFFSET: usize = Hello::LEN + 8;

    /// Encodes.
    pub fn encode(&self) -> [u8; RunShape::LEN] {
        let mut b = [0u8; RunShape::LEN];
        b[..8].copy_from_slice(&self.size.to_be_bytes());
        b[8..16].copy_from_slice(&self.iters.to_be_bytes());
        b[16..24].copy_from_slice(&self.duration_ns.to_be_bytes());
        b
    }

    /// Decodes the client's private data's run shape; `None` when it has none.
    pub fn decode(private_data: &[u8]) -> Option<RunShape> {
        let b = private_data.get(Self::OFFSET..Self::OFFSET + Self::LEN)?;
        let u64_at = |i: usize| u64::from_be_bytes(b[i..i + 8].try_into().unwrap_or_default());
        Some(RunShape {
            size: u64_at(0),
            iters: u64_at(8),
            duration_ns: u64_at(16),
        })
    }
}

/// Kinds of control message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Kind {
    /// Client: a run of `size` octets starts (`iters` iterations or `duration_ns`; `v0` =
    /// `-D`'s margin in ns, 0 for none).
    Start = 1,
    /// Server: buffers are prepared; go.
    Ready = 2,
    /// Sender of a QP: finished after `iters` messages (`v0` = elapsed ns, `v1` = peak
    /// bytes per second).
    Done = 3,
    /// Server: `v0` = verification errors, `v1` = messages it verified; with `-b` its own
    /// sending figures follow in a `Done` first.
    Result = 4,
    /// Client: the session is over; the server closes and exits (a FIN alone can be lost
    /// when the client's process, and with it a memif link, goes away first).
    Bye = 5,
    /// Server, before its `Result` when a check of this size failed: the first mismatch
    /// (`iters` = message number, `duration_ns` = what differed: 1 an octet, `v0` offset,
    /// `v1` expected, `v2` received; 2 a Send's length, `v0` received, `v1` expected; 3..6 a
    /// value (immediate, atomic original in completion / sink, counter word), `v0` seen,
    /// `v1` expected).
    Mismatch = 6,
}

/// A decoded control message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ctrl {
    /// What it says.
    pub kind: Kind,
    /// Message size of the run.
    pub size: u64,
    /// Iterations (requested or done).
    pub iters: u64,
    /// Requested duration (0: by iterations).
    pub duration_ns: u64,
    /// Kind-specific values.
    pub v0: u64,
    /// Kind-specific values.
    pub v1: u64,
    /// Kind-specific values.
    pub v2: u64,
    /// Kind-specific values.
    pub v3: u64,
}

impl Ctrl {
    /// A message with zero values.
    pub fn new(kind: Kind, size: u64, iters: u64) -> Ctrl {
        Ctrl {
            kind,
            size,
            iters,
            duration_ns: 0,
            v0: 0,
            v1: 0,
            v2: 0,
            v3: 0,
        }
    }

    /// Encodes.
    pub fn encode(&self) -> [u8; CTRL_LEN] {
        let mut b = [0u8; CTRL_LEN];
        b[..4].copy_from_slice(MAGIC);
        b[4..8].copy_from_slice(&(self.kind as u32).to_be_bytes());
        for (i, v) in [
            self.size,
            self.iters,
            self.duration_ns,
            self.v0,
            self.v1,
            self.v2,
            self.v3,
        ]
        .iter()
        .enumerate()
        {
            b[8 + i * 8..16 + i * 8].copy_from_slice(&v.to_be_bytes());
        }
        b
    }

    /// Decodes.
    pub fn decode(b: &[u8]) -> Option<Ctrl> {
        if b.len() < CTRL_LEN || &b[..4] != MAGIC {
            return None;
        }
        let kind = match u32::from_be_bytes(b[4..8].try_into().ok()?) {
            1 => Kind::Start,
            2 => Kind::Ready,
            3 => Kind::Done,
            4 => Kind::Result,
            5 => Kind::Bye,
            6 => Kind::Mismatch,
            _ => return None,
        };
        let v =
            |i: usize| u64::from_be_bytes(b[8 + i * 8..16 + i * 8].try_into().unwrap_or_default());
        Some(Ctrl {
            kind,
            size: v(0),
            iters: v(1),
            duration_ns: v(2),
            v0: v(3),
            v1: v(4),
            v2: v(5),
            v3: v(6),
        })
    }
}

/// Salt of the client's data.
pub const CLIENT_SALT: u64 = 0xC11E_47D0_0000_0001;
/// Salt of the server's data.
pub const SERVER_SALT: u64 = 0x5E87_E700_0000_0002;

/// Fills `buf` with the pattern of message `iter` of side `salt`: 64-bit words from a
/// multiplicative hash of (salt, iteration, word index), so that a misplaced, stale or
/// corrupted octet shows.
pub fn fill(buf: &mut [u8], salt: u64, iter: u64) {
    let seed = salt ^ iter.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut chunks = buf.chunks_exact_mut(8);
    let mut w = 0u64;
    for c in &mut chunks {
        c.copy_from_slice(&word(seed, w).to_le_bytes());
        w += 1;
    }
    let rest = chunks.into_remainder();
    let n = rest.len();
    rest.copy_from_slice(&word(seed, w).to_le_bytes()[..n]);
}

fn word(seed: u64, w: u64) -> u64 {
    let x = seed.wrapping_add(w.wrapping_mul(0xD6E8_FEB8_6659_FD93));
    (x ^ (x >> 29)).wrapping_mul(0xBF58_476D_1CE4_E5B9)
}

/// The tag a latency test puts in the last octet of message `iter`: never 0 (buffers are
/// cleared to 0 before a run) and different from the previous iteration's.
pub fn tag(iter: u64) -> u8 {
    (iter % 255) as u8 + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_and_ctrl_round_trip() {
        let h = Hello {
            test: 3,
            flags: FLAG_VERIFY | FLAG_IMM,
            qp_index: 1,
            qps: 2,
            tx_depth: 128,
            data_stag: 0x1234_5678,
            data_len: 1 << 33,
            ctrl_stag: 0x9abc_def0,
            inline: 220,
        };
        assert_eq!(Hello::decode(&h.encode()), Some(h));
        assert_eq!(
            Hello::decode(b"MPA nonsense of any length here......."),
            None
        );
        let shape = RunShape {
            size: 65536,
            iters: 5000,
            duration_ns: 0,
        };
        let mut pd = h.encode().to_vec();
        pd.extend_from_slice(&[0; 8]);
        assert_eq!(
            RunShape::decode(&pd),
            None,
            "an older client's private data"
        );
        pd.extend_from_slice(&shape.encode());
        assert_eq!(RunShape::decode(&pd), Some(shape));
        let mut c = Ctrl::new(Kind::Done, 65536, 5000);
        c.v0 = 7;
        c.v2 = u64::MAX;
        assert_eq!(Ctrl::decode(&c.encode()), Some(c));
    }

    #[test]
    fn pattern_differs_per_iteration_and_tag_never_zero() {
        let (mut a, mut b) = ([0u8; 13], [0u8; 13]);
        fill(&mut a, CLIENT_SALT, 1);
        fill(&mut b, CLIENT_SALT, 2);
        assert_ne!(a, b);
        for i in 0..1000 {
            assert_ne!(tag(i), 0);
            assert_ne!(tag(i), tag(i + 1));
        }
    }
}
