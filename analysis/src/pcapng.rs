//! The one pcapng normaliser: DPDK 22.11's `rte_pcapng` writes block options that the pcap-file crate
//! behind `iwdump` refuses, so iwperf rewrites the file at exit as plain pcapng: the
//! section header, each interface description with only its timestamp resolution and
//! offset, and each enhanced, simple or (obsolete) packet block without options. Wireshark
//! reads both forms. [`crate::capture::parse_capture`] reads a file through [`normalise`]
//! when pcap-file refuses one of its blocks (a raw `rte_pcapng` or `dpdk-dumpcap` file).

use std::path::Path;

const SHB: u32 = 0x0A0D_0D0A;
const IDB: u32 = 1;
const PB: u32 = 2;
const SPB: u32 = 3;
const EPB: u32 = 6;

fn u32_at(b: &[u8], i: usize, le: bool) -> Option<u32> {
    let a: [u8; 4] = b.get(i..i + 4)?.try_into().ok()?;
    Some(if le {
        u32::from_le_bytes(a)
    } else {
        u32::from_be_bytes(a)
    })
}

fn u64_at(b: &[u8], i: usize, le: bool) -> Option<u64> {
    let a: [u8; 8] = b.get(i..i + 8)?.try_into().ok()?;
    Some(if le {
        u64::from_le_bytes(a)
    } else {
        u64::from_be_bytes(a)
    })
}

fn u16_at(b: &[u8], i: usize, le: bool) -> Option<u16> {
    let a: [u8; 2] = b.get(i..i + 2)?.try_into().ok()?;
    Some(if le {
        u16::from_le_bytes(a)
    } else {
        u16::from_be_bytes(a)
    })
}

/// One little-endian pcapng block of type `ty` around `body`, padded to 32 bits.
pub(crate) fn block(out: &mut Vec<u8>, ty: u32, body: &[u8]) {
    let pad = (4 - body.len() % 4) % 4;
    let total = (12 + body.len() + pad) as u32;
    out.extend_from_slice(&ty.to_le_bytes());
    out.extend_from_slice(&total.to_le_bytes());
    out.extend_from_slice(body);
    out.resize(out.len() + pad, 0);
    out.extend_from_slice(&total.to_le_bytes());
}

/// Rewrites the pcapng file `raw` as a plain pcapng file `out`; returns the packet count.
/// A file cut short (an interrupted run) is rewritten up to its last whole block;
/// [`clean_report`] says whether that happened.
pub fn clean(raw: &Path, out: &Path) -> Result<u64, String> {
    clean_report(raw, out).map(|c| c.packets)
}

/// What [`clean_report`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cleaned {
    /// Packets written.
    pub packets: u64,
    /// Where the raw file stopped being readable before its end (the octet offset of the
    /// block, and why): what follows was left out.
    pub cut: Option<(usize, &'static str)>,
}

/// [`clean`], saying where the raw file was cut short when it was.
pub fn clean_report(raw: &Path, out: &Path) -> Result<Cleaned, String> {
    let b = std::fs::read(raw).map_err(|e| format!("{}: {e}", raw.display()))?;
    let (o, cleaned) = normalise(&b);
    std::fs::write(out, o).map_err(|e| format!("{}: {e}", out.display()))?;
    Ok(cleaned)
}

/// The plain pcapng form of the pcapng file `b` ([`clean`] without the files): every block
/// in little-endian order, options left out but `if_tsresol` and `if_tsoffset`, blocks
/// other than section headers, interface descriptions and packets dropped; up to the last
/// whole block (a packet or interface block too short for its fixed fields ends it too, and
/// [`Cleaned::cut`] says where).
pub fn normalise(b: &[u8]) -> (Vec<u8>, Cleaned) {
    let mut o = Vec::with_capacity(b.len());
    let mut i = 0usize;
    let mut le = true;
    let mut packets = 0u64;
    let mut cut = None;
    while i < b.len() {
        if i + 12 > b.len() {
            cut = Some((i, "fewer octets left than a block header"));
            break;
        }
        // Both reads are within the 12 octets checked above.
        let ty = u32_at(b, i, le).unwrap_or(0);
        if ty == SHB {
            le = b.get(i + 8..i + 12) == Some(&[0x4D, 0x3C, 0x2B, 0x1A][..]);
        }
        let len = u32_at(b, i + 4, le).unwrap_or(0) as usize;
        if len < 12 || len > b.len() - i {
            // A block cut short by an interrupted run ends the file.
            cut = Some((i, "a block longer than the rest of the file"));
            break;
        }
        // The length is written before and after the body (section 3.1): where the two
        // differ, one is damaged and where the next block starts is not known.
        if u32_at(b, i + len - 4, le) != Some(len as u32) {
            cut = Some((i, "a block whose leading and trailing lengths differ"));
            break;
        }
        let body = &b[i + 8..i + len - 4];
        match ty {
            SHB => {
                let mut s = Vec::new();
                s.extend_from_slice(&0x1A2B_3C4Du32.to_le_bytes());
                s.extend_from_slice(&1u16.to_le_bytes());
                s.extend_from_slice(&0u16.to_le_bytes());
                s.extend_from_slice(&u64::MAX.to_le_bytes());
                block(&mut o, SHB, &s);
            }
            IDB if body.len() >= 8 => {
                // The section's byte order, like every other field (a big-endian host's
                // LINKTYPE_ETHERNET read little-endian is 256).
                let link = u16_at(body, 0, le).unwrap_or(0);
                let snap = u32_at(body, 4, le).unwrap_or(0);
                let mut s = Vec::new();
                s.extend_from_slice(&link.to_le_bytes());
                s.extend_from_slice(&0u16.to_le_bytes());
                s.extend_from_slice(&snap.to_le_bytes());
                // Keep if_tsresol (option 9): DPDK stamps in nanoseconds.
                let mut j = 8;
                while j + 4 <= body.len() {
                    let code = u16_at(body, j, le).unwrap_or(0);
                    let olen = usize::from(u16_at(body, j + 2, le).unwrap_or(0));
                    if code == 0 || j + 4 + olen > body.len() {
                        break;
                    }
                    if code == 9 && olen == 1 {
                        s.extend_from_slice(&[9, 0, 1, 0, body[j + 4], 0, 0, 0]);
                    }
                    // if_tsoffset: seconds to add to every stamp (pcapng spec section 4.2).
                    if code == 14 && olen == 8 {
                        let v = u64_at(body, j + 4, le).unwrap_or(0);
                        s.extend_from_slice(&[14, 0, 8, 0]);
                        s.extend_from_slice(&v.to_le_bytes());
                    }
                    j += 4 + olen.div_ceil(4) * 4;
                }
                s.extend_from_slice(&[0, 0, 0, 0]);
                block(&mut o, IDB, &s);
            }
            EPB if body.len() >= 20 => {
                let cap = u32_at(body, 12, le).unwrap_or(0) as usize;
                if 20 + cap > body.len() {
                    cut = Some((i, "a packet block shorter than its captured length"));
                    break;
                }
                let mut s = Vec::with_capacity(20 + cap);
                for k in 0..5 {
                    s.extend_from_slice(&u32_at(body, k * 4, le).unwrap_or(0).to_le_bytes());
                }
                s.extend_from_slice(&body[20..20 + cap]);
                block(&mut o, EPB, &s);
                packets += 1;
            }
            SPB if body.len() >= 4 => {
                // The original length, then the packet and its padding (section 4.4): the
                // reader cuts it to min(original length, snap length).
                let mut s = u32_at(body, 0, le).unwrap_or(0).to_le_bytes().to_vec();
                s.extend_from_slice(&body[4..]);
                block(&mut o, SPB, &s);
                packets += 1;
            }
            PB if body.len() >= 20 => {
                // Interface and drop count (16 bits each), timestamp high and low, captured
                // and original length (appendix A).
                let cap = u32_at(body, 12, le).unwrap_or(0) as usize;
                if 20 + cap > body.len() {
                    cut = Some((i, "a packet block shorter than its captured length"));
                    break;
                }
                let mut s = Vec::with_capacity(20 + cap);
                for k in 0..2 {
                    s.extend_from_slice(&u16_at(body, k * 2, le).unwrap_or(0).to_le_bytes());
                }
                for k in 1..5 {
                    s.extend_from_slice(&u32_at(body, k * 4, le).unwrap_or(0).to_le_bytes());
                }
                s.extend_from_slice(&body[20..20 + cap]);
                block(&mut o, PB, &s);
                packets += 1;
            }
            // A packet or interface block too short for its fixed fields (sections 4.2-4.4,
            // appendix A) is damage: skipping it would lose a packet, or shift every later
            // packet onto the wrong interface, without a word.
            IDB | EPB | SPB | PB => {
                cut = Some((
                    i,
                    "a packet or interface block shorter than its fixed fields",
                ));
                break;
            }
            _ => {}
        }
        i += len;
    }
    (o, Cleaned { packets, cut })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::{parse_capture, LinkType};

    /// A block in big-endian byte order.
    fn be_block(out: &mut Vec<u8>, ty: u32, body: &[u8]) {
        let total = (12 + body.len()) as u32;
        out.extend_from_slice(&ty.to_be_bytes());
        out.extend_from_slice(&total.to_be_bytes());
        out.extend_from_slice(body);
        out.extend_from_slice(&total.to_be_bytes());
    }

    /// A little-endian section header, one Ethernet interface, then `blocks`.
    fn le_file(blocks: &[(u32, Vec<u8>)]) -> Vec<u8> {
        let mut f = Vec::new();
        let mut shb = 0x1A2B_3C4Du32.to_le_bytes().to_vec();
        shb.extend_from_slice(&[1, 0, 0, 0]);
        shb.extend_from_slice(&u64::MAX.to_le_bytes());
        block(&mut f, SHB, &shb);
        for (ty, body) in blocks {
            block(&mut f, *ty, body);
        }
        f
    }

    fn epb(k: u8) -> Vec<u8> {
        let mut b = vec![0u8; 8];
        b.extend_from_slice(&u32::from(k).to_le_bytes());
        b.extend_from_slice(&60u32.to_le_bytes());
        b.extend_from_slice(&60u32.to_le_bytes());
        b.extend_from_slice(&[k; 60]);
        b
    }

    /// A packet or interface block whose framing is whole but whose body is shorter than
    /// the block's fixed fields (pcapng spec sections 4.2-4.4, appendix A) is damage, not a
    /// block to skip: the normaliser dropped it without a word, the packet count and the
    /// judge ([`Cleaned::cut`] unset) then passed a capture that was not read whole, and a
    /// dropped interface shifted every later packet onto the wrong interface.
    #[test]
    fn short_packet_and_interface_blocks_are_not_dropped_silently() {
        let idb = vec![1, 0, 0, 0, 0, 0, 4, 0];
        for (name, ty, short) in [
            ("enhanced packet", EPB, vec![0u8; 16]),
            ("obsolete packet", PB, vec![0u8; 12]),
            ("simple packet", SPB, vec![]),
            ("interface", IDB, vec![1, 0, 0, 0]),
        ] {
            let f = le_file(&[
                (IDB, idb.clone()),
                (EPB, epb(1)),
                (ty, short),
                (EPB, epb(2)),
            ]);
            let (_, c) = normalise(&f);
            assert!(
                c.cut.is_some(),
                "a short {name} block was dropped silently: {c:?}"
            );
            // iwdump's reader says so too.
            let read = parse_capture(&f).unwrap();
            assert!(
                read.warnings.iter().any(|w| w.contains("damaged")),
                "{name}: {:?}",
                read.warnings
            );
        }
        // Every block whole: read whole, nothing reported.
        let f = le_file(&[(IDB, idb), (EPB, epb(1)), (EPB, epb(2))]);
        let (_, c) = normalise(&f);
        assert_eq!(
            c,
            Cleaned {
                packets: 2,
                cut: None
            }
        );
    }

    /// A block whose trailing length differs from its leading one (pcapng spec section 3.1:
    /// both say the same) has a damaged length: read on trust it swallowed the packet
    /// blocks after it (or sent the reader into the middle of one, whose octets then read
    /// as blocks of unknown type and were skipped), without a word.
    #[test]
    fn block_lengths_that_disagree_are_damage() {
        let idb = vec![1, 0, 0, 0, 0, 0, 4, 0];
        let mut f = le_file(&[(IDB, idb), (EPB, epb(1))]);
        let second = f.len();
        for k in 2..5 {
            block(&mut f, EPB, &epb(k));
        }
        // The second packet's leading length grown by the next two blocks' lengths: still
        // within the file, its body long enough for its captured length.
        let one = u32::from_le_bytes(f[second + 4..second + 8].try_into().unwrap());
        f[second + 4..second + 8].copy_from_slice(&(one * 3).to_le_bytes());
        let (_, c) = normalise(&f);
        assert!(c.cut.is_some(), "packets lost without a word: {c:?}");
    }

    /// A pcapng file written on a big-endian host (every field in that order) is rewritten
    /// with its link type and timestamp resolution intact, not read as link type 256 with
    /// microsecond stamps.
    #[test]
    fn big_endian_sections_keep_link_type_and_resolution() {
        let mut f = Vec::new();
        let mut shb = 0x1A2B_3C4Du32.to_be_bytes().to_vec();
        shb.extend_from_slice(&[0, 1, 0, 0]);
        shb.extend_from_slice(&u64::MAX.to_be_bytes());
        be_block(&mut f, SHB, &shb);
        // LINKTYPE_ETHERNET, snap length 65535, if_tsresol 9 (nanoseconds), end of options.
        let mut idb = vec![0, 1, 0, 0];
        idb.extend_from_slice(&65535u32.to_be_bytes());
        idb.extend_from_slice(&[0, 9, 0, 1, 9, 0, 0, 0, 0, 0, 0, 0]);
        be_block(&mut f, IDB, &idb);
        let frame = [0xAAu8; 60];
        let ts: u64 = 1_500_000_000; // 1.5 s in nanoseconds
        let mut epb = 0u32.to_be_bytes().to_vec();
        epb.extend_from_slice(&((ts >> 32) as u32).to_be_bytes());
        epb.extend_from_slice(&(ts as u32).to_be_bytes());
        epb.extend_from_slice(&60u32.to_be_bytes());
        epb.extend_from_slice(&60u32.to_be_bytes());
        epb.extend_from_slice(&frame);
        be_block(&mut f, EPB, &epb);
        let dir = std::env::temp_dir().join(format!("wc-pcapng-be-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (raw, out) = (dir.join("raw.pcapng"), dir.join("clean.pcapng"));
        std::fs::write(&raw, &f).unwrap();
        assert_eq!(clean(&raw, &out), Ok(1));
        let c = parse_capture(&std::fs::read(&out).unwrap()).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        assert_eq!(c.frames.len(), 1);
        assert_eq!(c.frames[0].link, LinkType::Ethernet);
        assert_eq!(
            c.frames[0].timestamp,
            std::time::Duration::from_millis(1500)
        );
        assert_eq!(c.frames[0].data, frame);
    }
}
