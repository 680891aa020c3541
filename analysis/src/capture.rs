//! Reading capture files: classic pcap and pcapng, whatever their byte order and timestamp
//! resolution, into a flat list of link-layer frames.
//!
//! The whole file is read into memory and parsed with `pcap-file`'s slice parsers, so a
//! damaged or truncated file yields every frame before the damage plus a warning, never a
//! panic. Link types other than the ones in [`LinkType`] are kept as `Other` and skipped by
//! the TCP layer (with a count in the report).

use std::path::Path;
use std::time::Duration;

use pcap_file::pcap::PcapParser;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
use pcap_file::pcapng::{Block, PcapNgParser};
use pcap_file::{DataLink, Endianness, PcapError, TsResolution};

/// The link-layer framing of a captured frame, as far as this tool decodes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LinkType {
    /// Ethernet II, optionally with 802.1Q/802.1ad VLAN tags (DLT_EN10MB).
    Ethernet,
    /// Linux "cooked" capture v1 (DLT_LINUX_SLL, 16-octet header), e.g. `tcpdump -i any`.
    LinuxSll,
    /// Linux "cooked" capture v2 (DLT_LINUX_SLL2, 20-octet header).
    LinuxSll2,
    /// Raw IPv4 or IPv6, version taken from the first nibble (DLT_RAW, DLT_IPV4, DLT_IPV6).
    RawIp,
    /// BSD loopback: a 4-octet address family in host byte order, then IP (DLT_NULL).
    Null,
    /// Anything else: the frame is kept but not decoded.
    Other(u32),
}

impl LinkType {
    fn from_datalink(link: DataLink) -> Self {
        match link {
            DataLink::ETHERNET => LinkType::Ethernet,
            DataLink::LINUX_SLL => LinkType::LinuxSll,
            DataLink::LINUX_SLL2 => LinkType::LinuxSll2,
            DataLink::RAW | DataLink::IPV4 | DataLink::IPV6 => LinkType::RawIp,
            DataLink::NULL | DataLink::LOOP => LinkType::Null,
            other => LinkType::Other(u32::from(other)),
        }
    }
}

/// The container format a capture file was recognised as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureFormat {
    /// Classic libpcap format (either byte order, micro- or nanosecond timestamps).
    Pcap,
    /// pcapng (any number of sections and interfaces).
    PcapNg,
}

/// One captured frame.
#[derive(Clone, Debug)]
pub struct Frame {
    /// Frame number as Wireshark counts it: 1 for the first frame of the file.
    pub number: u64,
    /// Capture time since the Unix epoch.
    pub timestamp: Duration,
    /// How to decode `data`.
    pub link: LinkType,
    /// The captured octets (possibly fewer than were on the wire, see `original_len`).
    pub data: Vec<u8>,
    /// Length of the frame on the wire.
    pub original_len: u32,
}

/// A capture file read into memory.
#[derive(Clone, Debug)]
pub struct Capture {
    /// The container format.
    pub format: CaptureFormat,
    /// Every frame that could be read, in file order.
    pub frames: Vec<Frame>,
    /// Problems with the container that did not stop reading (e.g. a truncated last record).
    pub warnings: Vec<String>,
    /// Whether frames of the file were left out: damage or a cut end stopped the reading
    /// early, or a frame named no interface the file described. A report of such a
    /// capture covers part of what it recorded (`iwdump` exits 2).
    pub incomplete: bool,
}

/// Why a capture could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The file could not be opened or read.
    #[error("{0}")]
    Io(std::io::Error),
    /// The file is neither pcap nor pcapng (or its file header is damaged).
    #[error("not a pcap or pcapng capture: {0}")]
    NotACapture(String),
}

/// Magic numbers of the classic pcap header in both byte orders and both resolutions.
const PCAP_MAGICS: [[u8; 4]; 4] = [
    [0xD4, 0xC3, 0xB2, 0xA1],
    [0xA1, 0xB2, 0xC3, 0xD4],
    [0x4D, 0x3C, 0xB2, 0xA1],
    [0xA1, 0xB2, 0x3C, 0x4D],
];
/// Block type of a pcapng Section Header Block (the same in both byte orders).
const PCAPNG_MAGIC: [u8; 4] = [0x0A, 0x0D, 0x0D, 0x0A];

/// Reads a capture file from disk. See [`parse_capture`].
pub fn read_capture_file(path: &Path) -> Result<Capture, CaptureError> {
    let bytes = std::fs::read(path).map_err(CaptureError::Io)?;
    parse_capture(&bytes)
}

/// Parses the bytes of a pcap or pcapng file. Frames after a damaged record are lost and a
/// warning says where reading stopped; a file whose header is not a capture header is an
/// error.
pub fn parse_capture(bytes: &[u8]) -> Result<Capture, CaptureError> {
    let magic = bytes.get(..4).ok_or_else(|| {
        CaptureError::NotACapture(format!("file is only {} octets long", bytes.len()))
    })?;
    if PCAP_MAGICS.iter().any(|m| m == magic) {
        parse_pcap(bytes)
    } else if magic == PCAPNG_MAGIC {
        read_pcapng(bytes)
    } else {
        Err(CaptureError::NotACapture(format!(
            "unknown magic number {:02x}{:02x}{:02x}{:02x}",
            magic[0], magic[1], magic[2], magic[3]
        )))
    }
}

fn describe(e: &PcapError) -> String {
    match e {
        PcapError::IncompleteBuffer => "the file ends in the middle of a record".to_string(),
        other => other.to_string(),
    }
}

fn parse_pcap(bytes: &[u8]) -> Result<Capture, CaptureError> {
    let (mut rest, parser) = PcapParser::new(bytes)
        .map_err(|e| CaptureError::NotACapture(format!("bad pcap header: {}", describe(&e))))?;
    let link = LinkType::from_datalink(parser.header().datalink);
    let mut capture = Capture {
        format: CaptureFormat::Pcap,
        frames: Vec::new(),
        warnings: Vec::new(),
        incomplete: false,
    };
    let nanos_per_frac = match parser.header().ts_resolution {
        TsResolution::MicroSecond => 1_000,
        TsResolution::NanoSecond => 1,
    };
    while !rest.is_empty() {
        // The raw record, not `next_packet`: pcap-file's checked packet refuses a record
        // whose wire length exceeds the file's snap length, and that is every frame the
        // snap length cut (`tcpdump -s 128`), which is exactly when the two lengths differ.
        // Like Wireshark, take what the record holds and judge lengths in the TCP layer.
        match parser.next_raw_packet(rest) {
            Ok((next, packet)) => {
                rest = next;
                let number = capture.frames.len() as u64 + 1;
                let data = packet.data.into_owned();
                capture.frames.push(Frame {
                    number,
                    timestamp: Duration::from_secs(u64::from(packet.ts_sec))
                        + Duration::from_nanos(u64::from(packet.ts_frac) * nanos_per_frac),
                    link,
                    // A writer that put a wire length below the captured one is wrong about
                    // the wire length: at least the captured octets were sent.
                    original_len: packet
                        .orig_len
                        .max(u32::try_from(data.len()).unwrap_or(u32::MAX)),
                    data,
                });
            }
            Err(e) => {
                capture.warnings.push(format!(
                    "capture file damaged after frame {}: {}; the rest is ignored",
                    capture.frames.len(),
                    describe(&e)
                ));
                capture.incomplete = true;
                break;
            }
        }
    }
    Ok(capture)
}

/// Per-interface facts a pcapng Enhanced Packet Block needs to be interpreted.
#[derive(Clone, Copy)]
struct Interface {
    link: LinkType,
    /// Timestamp units per second.
    units_per_sec: u64,
    /// SnapLen: the most octets a packet of this interface holds (0: no limit).
    snaplen: u32,
    /// if_tsoffset: seconds to add to every timestamp of the interface (signed).
    offset_secs: i64,
}

fn interface_of(
    idb: &pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock<'_>,
) -> Interface {
    // The default resolution is microseconds; if_tsresol gives a power of 10, or of 2 when
    // its top bit is set (pcapng spec section 4.2).
    let mut units_per_sec = 1_000_000u64;
    let mut offset_secs = 0i64;
    for opt in &idb.options {
        // if_tsoffset, a signed 64-bit count of seconds, must be added to every packet's
        // timestamp to make it absolute (pcapng spec section 4.2).
        if let InterfaceDescriptionOption::IfTsOffset(o) = opt {
            offset_secs = *o as i64;
        }
        if let InterfaceDescriptionOption::IfTsResol(r) = opt {
            let exp = u32::from(r & 0x7F);
            units_per_sec = if r & 0x80 != 0 {
                1u64.checked_shl(exp).unwrap_or(0)
            } else {
                10u64.checked_pow(exp).unwrap_or(0)
            };
        }
    }
    Interface {
        link: LinkType::from_datalink(idb.linktype),
        units_per_sec,
        snaplen: idb.snaplen,
        offset_secs,
    }
}

impl Interface {
    /// The absolute capture time of a packet stamped `units` on this interface.
    fn timestamp(&self, units: u64) -> Duration {
        let t = timestamp_from_units(units, self.units_per_sec);
        let offset = Duration::from_secs(self.offset_secs.unsigned_abs());
        if self.offset_secs >= 0 {
            t.checked_add(offset).unwrap_or(t)
        } else {
            t.saturating_sub(offset)
        }
    }
}

fn timestamp_from_units(units: u64, units_per_sec: u64) -> Duration {
    if units_per_sec == 0 {
        return Duration::ZERO;
    }
    let secs = units / units_per_sec;
    let frac = units % units_per_sec;
    let nanos = (u128::from(frac) * 1_000_000_000 / u128::from(units_per_sec)) as u32;
    Duration::new(secs, nanos)
}

/// A pcapng file: read with pcap-file; if it refuses a block whose framing is whole (an
/// option it does not take, as in the raw files DPDK's `rte_pcapng` and `dpdk-dumpcap`
/// write), the whole file is read again through [`crate::pcapng::normalise`], which leaves
/// the options out, and a warning says so; the frames after the refused block are not lost.
fn read_pcapng(bytes: &[u8]) -> Result<Capture, CaptureError> {
    let (capture, refused) = match parse_pcapng(bytes) {
        Ok(read) => read,
        // The section header refused, its byte-order magic sound (an option pcap-file
        // does not take): read again as below, or the error if that fails too.
        Err(e) => {
            let magic = bytes.get(8..12);
            if magic != Some(&[0x4D, 0x3C, 0x2B, 0x1A][..])
                && magic != Some(&[0x1A, 0x2B, 0x3C, 0x4D][..])
            {
                return Err(e);
            }
            let empty = Capture {
                format: CaptureFormat::PcapNg,
                frames: Vec::new(),
                warnings: vec![e.to_string()],
                incomplete: true,
            };
            (empty, Some((0, e.to_string())))
        }
    };
    let Some((at, why)) = refused else {
        return Ok(capture);
    };
    let (plain, cleaned) = crate::pcapng::normalise(bytes);
    match parse_pcapng(&plain) {
        Ok((mut again, None)) if again.frames.len() >= capture.frames.len() => {
            let mut warnings = vec![format!(
                "pcapng block at octet {at} refused ({why}); the file was read with the \
                 options of its blocks left out"
            )];
            if let Some((off, why)) = cleaned.cut {
                warnings.push(format!(
                    "capture file damaged at octet {off} ({why}); the rest is ignored"
                ));
                again.incomplete = true;
            }
            warnings.append(&mut again.warnings);
            again.warnings = warnings;
            Ok(again)
        }
        _ if at == 0 => Err(CaptureError::NotACapture(why)),
        _ => Ok(capture),
    }
}

/// The block framing at the start of `rest` in a section of byte order `endianness` is
/// whole: a type, a length of at least 12 within `rest`, and the same length at its end.
fn whole_block(rest: &[u8], endianness: Endianness) -> bool {
    let at = |i: usize| -> Option<u32> {
        let a: [u8; 4] = rest.get(i..i + 4)?.try_into().ok()?;
        Some(match endianness {
            Endianness::Little => u32::from_le_bytes(a),
            Endianness::Big => u32::from_be_bytes(a),
        })
    };
    match at(4).map(|l| l as usize) {
        Some(len) if len >= 12 && len <= rest.len() => at(len - 4) == Some(len as u32),
        _ => false,
    }
}

/// Reads a pcapng file with pcap-file; the second value is the octet offset of a block
/// whose framing is whole but whose contents pcap-file refused, and why (reading stopped
/// there, with a warning).
fn parse_pcapng(bytes: &[u8]) -> Result<(Capture, Option<(usize, String)>), CaptureError> {
    let (mut rest, mut parser) = PcapNgParser::new(bytes)
        .map_err(|e| CaptureError::NotACapture(format!("bad pcapng header: {}", describe(&e))))?;
    let mut capture = Capture {
        format: CaptureFormat::PcapNg,
        frames: Vec::new(),
        warnings: Vec::new(),
        incomplete: false,
    };
    let mut refused = None;
    let mut interfaces: Vec<Interface> = Vec::new();
    while !rest.is_empty() {
        let block = match parser.next_block(rest) {
            Ok((next, block)) => {
                rest = next;
                block
            }
            Err(e) => {
                let at = bytes.len() - rest.len();
                capture.incomplete = true;
                if whole_block(rest, parser.section().endianness) {
                    capture.warnings.push(format!(
                        "pcapng block at octet {at} refused after frame {}: {}; the rest is \
                         ignored",
                        capture.frames.len(),
                        describe(&e)
                    ));
                    refused = Some((at, describe(&e)));
                } else {
                    capture.warnings.push(format!(
                        "capture file damaged after frame {}: {}; the rest is ignored",
                        capture.frames.len(),
                        describe(&e)
                    ));
                }
                break;
            }
        };
        let number = capture.frames.len() as u64 + 1;
        match block {
            // A new section starts a new interface list.
            Block::SectionHeader(_) => interfaces.clear(),
            Block::InterfaceDescription(idb) => interfaces.push(interface_of(&idb)),
            Block::EnhancedPacket(epb) => {
                let Some(iface) = usize::try_from(epb.interface_id)
                    .ok()
                    .and_then(|i| interfaces.get(i).copied())
                else {
                    capture.warnings.push(format!(
                        "frame {number}: unknown interface {}; frame skipped",
                        epb.interface_id
                    ));
                    capture.incomplete = true;
                    continue;
                };
                // pcap-file 2 hands the raw 64-bit timestamp over as nanoseconds whatever
                // the interface resolution; undo that and apply if_tsresol ourselves.
                let units = u64::try_from(epb.timestamp.as_nanos()).unwrap_or(u64::MAX);
                capture.frames.push(Frame {
                    number,
                    timestamp: iface.timestamp(units),
                    link: iface.link,
                    data: epb.data.into_owned(),
                    original_len: epb.original_len,
                });
            }
            Block::SimplePacket(spb) => {
                let Some(iface) = interfaces.first().copied() else {
                    capture
                        .warnings
                        .push(format!("frame {number}: no interface; skipped"));
                    capture.incomplete = true;
                    continue;
                };
                // pcap-file hands over the whole block body, padding included; the packet
                // is min(original length, SnapLen) octets of it (pcapng spec section 4.4).
                let snap = match iface.snaplen {
                    0 => u32::MAX,
                    n => n,
                };
                let len = usize::try_from(spb.original_len.min(snap)).unwrap_or(usize::MAX);
                let data = spb.data.get(..len).unwrap_or(&spb.data);
                capture.frames.push(Frame {
                    number,
                    timestamp: Duration::ZERO,
                    link: iface.link,
                    data: data.to_vec(),
                    original_len: spb.original_len,
                });
            }
            Block::Packet(pb) => {
                let Some(iface) = interfaces.get(usize::from(pb.interface_id)).copied() else {
                    capture
                        .warnings
                        .push(format!("frame {number}: unknown interface; skipped"));
                    capture.incomplete = true;
                    continue;
                };
                // The timestamp is two 32-bit words, high then low, each in the section's
                // byte order (pcapng spec appendix A); pcap-file 2 reads them as one 64-bit
                // integer, which in a little-endian section swaps the halves.
                let units = match parser.section().endianness {
                    Endianness::Little => pb.timestamp.rotate_left(32),
                    Endianness::Big => pb.timestamp,
                };
                capture.frames.push(Frame {
                    number,
                    timestamp: iface.timestamp(units),
                    link: iface.link,
                    data: pb.data.into_owned(),
                    original_len: pb.original_len,
                });
            }
            _ => {}
        }
    }
    Ok((capture, refused))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamp_resolutions() {
        assert_eq!(
            timestamp_from_units(1_500_000, 1_000_000),
            Duration::from_millis(1500)
        );
        assert_eq!(timestamp_from_units(3, 2), Duration::from_millis(1500));
        assert_eq!(timestamp_from_units(5, 0), Duration::ZERO);
    }

    /// A classic pcap file, little-endian, microsecond timestamps, Ethernet, with this snap
    /// length and these records (seconds, microseconds, captured octets, wire length).
    fn pcap_file(snaplen: u32, records: &[(u32, u32, usize, u32)]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&[0xD4, 0xC3, 0xB2, 0xA1, 2, 0, 4, 0]);
        b.extend_from_slice(&[0; 8]);
        b.extend_from_slice(&snaplen.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        for &(sec, usec, incl, orig) in records {
            for v in [sec, usec, incl as u32, orig] {
                b.extend_from_slice(&v.to_le_bytes());
            }
            b.extend((0..incl).map(|i| i as u8));
        }
        b
    }

    /// `tcpdump -s 96` writes snap length 96 and, for every frame longer than that, 96
    /// captured octets and the frame's real wire length: a good file, whose frames are all
    /// read (the TCP layer then knows the cut ones for what they are).
    #[test]
    fn pcap_frames_cut_by_the_snap_length_are_read() {
        let bytes = pcap_file(
            96,
            &[(1, 500_000, 96, 1514), (2, 0, 60, 60), (3, 7, 96, 9014)],
        );
        let c = parse_capture(&bytes).unwrap();
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let got: Vec<(u64, Duration, usize, u32)> = c
            .frames
            .iter()
            .map(|f| (f.number, f.timestamp, f.data.len(), f.original_len))
            .collect();
        assert_eq!(
            got,
            [
                (1, Duration::from_millis(1500), 96, 1514),
                (2, Duration::from_secs(2), 60, 60),
                (3, Duration::new(3, 7_000), 96, 9014)
            ]
        );
        assert_eq!(c.frames[0].data[95], 95);
        // A wire length below the captured one is the writer's mistake: the frame is kept,
        // with at least its captured octets as its length.
        let c = parse_capture(&pcap_file(65535, &[(0, 0, 80, 60)])).unwrap();
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        assert_eq!((c.frames[0].data.len(), c.frames[0].original_len), (80, 80));
    }

    /// A little-endian pcapng file: a section header, one Ethernet interface description
    /// (snap length `snaplen`, microsecond stamps) and then `blocks` (type, body), each padded.
    fn pcapng_file(snaplen: u32, blocks: &[(u32, Vec<u8>)]) -> Vec<u8> {
        use crate::pcapng::block;
        let mut f = Vec::new();
        let mut shb = 0x1A2B_3C4Du32.to_le_bytes().to_vec();
        shb.extend_from_slice(&[1, 0, 0, 0]);
        shb.extend_from_slice(&u64::MAX.to_le_bytes());
        block(&mut f, 0x0A0D_0D0A, &shb);
        let mut idb = vec![1, 0, 0, 0];
        idb.extend_from_slice(&snaplen.to_le_bytes());
        block(&mut f, 1, &idb);
        for (ty, body) in blocks {
            block(&mut f, *ty, body);
        }
        f
    }

    /// A Simple Packet Block holds min(original length, snap length) packet octets and then
    /// padding to 32 bits (pcapng spec, section 4.4): the padding is no part of the frame.
    #[test]
    fn simple_packet_block_padding_is_not_frame_data() {
        let frame: Vec<u8> = (1..=61).collect();
        let mut spb = 61u32.to_le_bytes().to_vec();
        spb.extend_from_slice(&frame);
        // A 100-octet frame cut by a snap length of 64: 64 octets are captured.
        let long: Vec<u8> = (0..64).collect();
        let mut cut = 100u32.to_le_bytes().to_vec();
        cut.extend_from_slice(&long);
        let c = parse_capture(&pcapng_file(64, &[(3, spb), (3, cut)])).unwrap();
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        assert_eq!(c.frames.len(), 2);
        assert_eq!(c.frames[0].data, frame);
        assert_eq!(c.frames[0].original_len, 61);
        assert_eq!(
            (c.frames[1].data.len(), c.frames[1].original_len),
            (64, 100)
        );
    }

    /// The obsolete Packet Block stores its timestamp as two 32-bit words, high then low,
    /// each in the section's byte order (pcapng spec, appendix A), like the Enhanced Packet
    /// Block: a little-endian file's 1.5 s is 1.5 s, not 1.5 s with its halves swapped.
    #[test]
    fn packet_block_timestamp_halves_in_order() {
        let units: u64 = (1 << 32) + 500_000; // microseconds
        let mut pb = 0u16.to_le_bytes().to_vec(); // interface 0
        pb.extend_from_slice(&0u16.to_le_bytes()); // drops
        pb.extend_from_slice(&((units >> 32) as u32).to_le_bytes());
        pb.extend_from_slice(&(units as u32).to_le_bytes());
        pb.extend_from_slice(&60u32.to_le_bytes());
        pb.extend_from_slice(&60u32.to_le_bytes());
        pb.extend_from_slice(&[0xAA; 60]);
        let c = parse_capture(&pcapng_file(65535, &[(2, pb)])).unwrap();
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        assert_eq!(c.frames.len(), 1);
        assert_eq!(
            c.frames[0].timestamp,
            Duration::from_micros(units),
            "{:?}",
            c.frames[0].timestamp
        );
        assert_eq!(c.frames[0].data, [0xAA; 60]);
    }

    /// if_tsoffset (option 14) is added to every timestamp of its interface (pcapng spec
    /// section 4.2): two interfaces stamped 1.5 s with offsets 100 and -1 s are 98 s apart.
    #[test]
    fn interface_timestamp_offset_is_applied() {
        let idb = |offset: i64| {
            let mut b = vec![1, 0, 0, 0];
            b.extend_from_slice(&65535u32.to_le_bytes());
            b.extend_from_slice(&[14, 0, 8, 0]);
            b.extend_from_slice(&offset.to_le_bytes());
            b.extend_from_slice(&[0, 0, 0, 0]);
            b
        };
        let epb = |iface: u32| {
            let units: u64 = 1_500_000; // microseconds
            let mut b = iface.to_le_bytes().to_vec();
            b.extend_from_slice(&((units >> 32) as u32).to_le_bytes());
            b.extend_from_slice(&(units as u32).to_le_bytes());
            b.extend_from_slice(&60u32.to_le_bytes());
            b.extend_from_slice(&60u32.to_le_bytes());
            b.extend_from_slice(&[0xAA; 60]);
            b
        };
        // pcapng_file's own interface 0 has no offset; these are interfaces 1 and 2.
        let c = parse_capture(&pcapng_file(
            65535,
            &[
                (1, idb(100)),
                (1, idb(-1)),
                (6, epb(1)),
                (6, epb(2)),
                (6, epb(0)),
            ],
        ))
        .unwrap();
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let times: Vec<Duration> = c.frames.iter().map(|f| f.timestamp).collect();
        assert_eq!(
            times,
            [
                Duration::from_millis(101_500),
                Duration::from_millis(500),
                Duration::from_millis(1_500)
            ]
        );
    }

    /// A block whose options pcap-file refuses (as in raw `rte_pcapng` / `dpdk-dumpcap`
    /// files) no longer ends the capture: the file is read again with the options left out
    /// and every frame after the block is kept, with a warning naming the block. Refused
    /// here: an Enhanced Packet Block's comment that is not UTF-8, an interface
    /// description's `if_speed` of 4 octets. The interface's `if_tsoffset` and a Simple
    /// Packet Block after the refusal survive the second reading. Before: reading stopped
    /// at the refused block (1 and 0 frames).
    #[test]
    fn blocks_with_refused_options_do_not_end_the_capture() {
        let epb = |iface: u32, octet: u8, comment: &[u8]| {
            let mut b = iface.to_le_bytes().to_vec();
            b.extend_from_slice(&0u32.to_le_bytes());
            b.extend_from_slice(&2_000_000u32.to_le_bytes());
            b.extend_from_slice(&60u32.to_le_bytes());
            b.extend_from_slice(&60u32.to_le_bytes());
            b.extend_from_slice(&[octet; 60]);
            if !comment.is_empty() {
                b.extend_from_slice(&1u16.to_le_bytes());
                b.extend_from_slice(&(comment.len() as u16).to_le_bytes());
                b.extend_from_slice(comment);
                b.resize(b.len().div_ceil(4) * 4, 0);
                b.extend_from_slice(&[0, 0, 0, 0]);
            }
            b
        };
        let mut spb = 60u32.to_le_bytes().to_vec();
        spb.extend_from_slice(&[4; 60]);
        let c = parse_capture(&pcapng_file(
            65535,
            &[
                (6, epb(0, 1, b"")),
                (6, epb(0, 2, &[0xFF, 0xFE, 0x80])),
                (6, epb(0, 3, b"")),
                (3, spb.clone()),
            ],
        ))
        .unwrap();
        let octets: Vec<u8> = c.frames.iter().map(|f| f.data[0]).collect();
        assert_eq!(octets, [1, 2, 3, 4], "{:?}", c.warnings);
        assert_eq!(c.frames[2].timestamp, Duration::from_secs(2));
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        assert!(c.warnings[0].contains("refused"), "{:?}", c.warnings);
        let mut idb = vec![1, 0, 0, 0];
        idb.extend_from_slice(&65535u32.to_le_bytes());
        idb.extend_from_slice(&[8, 0, 4, 0, 0, 0, 0, 0]);
        idb.extend_from_slice(&[14, 0, 8, 0]);
        idb.extend_from_slice(&10i64.to_le_bytes());
        idb.extend_from_slice(&[0, 0, 0, 0]);
        let c = parse_capture(&pcapng_file(
            65535,
            &[(1, idb), (6, epb(1, 5, b"")), (6, epb(0, 6, b""))],
        ))
        .unwrap();
        let got: Vec<(u8, Duration)> = c.frames.iter().map(|f| (f.data[0], f.timestamp)).collect();
        assert_eq!(
            got,
            [(5, Duration::from_secs(12)), (6, Duration::from_secs(2))],
            "{:?}",
            c.warnings
        );
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
    }

    /// A section header whose option pcap-file refuses (a hardware string that is not
    /// UTF-8): the file is read with the options left out; a section header with a bad
    /// byte-order magic is still not a capture.
    #[test]
    fn a_section_header_with_a_refused_option_is_read() {
        let mut f = pcapng_file(
            65535,
            &[(3, [60u32.to_le_bytes().to_vec(), vec![4; 60]].concat())],
        );
        let good = f.clone();
        // The section header's body: magic, version, length, then shb_hardware (2) of 4
        // octets that are not UTF-8 and the end of options; 8 octets more for the block.
        let mut shb = 0x1A2B_3C4Du32.to_le_bytes().to_vec();
        shb.extend_from_slice(&[1, 0, 0, 0]);
        shb.extend_from_slice(&u64::MAX.to_le_bytes());
        shb.extend_from_slice(&[2, 0, 4, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0]);
        let mut head = Vec::new();
        crate::pcapng::block(&mut head, 0x0A0D_0D0A, &shb);
        f.splice(..28, head);
        let c = parse_capture(&f).unwrap();
        assert_eq!(c.frames.len(), 1, "{:?}", c.warnings);
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        let mut bad = good;
        bad[8..12].copy_from_slice(&[1, 2, 3, 4]);
        assert!(matches!(
            parse_capture(&bad),
            Err(CaptureError::NotACapture(_))
        ));
    }

    /// A file cut in the middle of a block is damage, not a refusal: the frames before it
    /// and one warning, as before.
    #[test]
    fn a_cut_block_is_damage_not_a_refusal() {
        let mut spb = 60u32.to_le_bytes().to_vec();
        spb.extend_from_slice(&[4; 60]);
        let mut f = pcapng_file(65535, &[(3, spb.clone()), (3, spb)]);
        f.truncate(f.len() - 10);
        let c = parse_capture(&f).unwrap();
        assert_eq!(c.frames.len(), 1);
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        assert!(c.warnings[0].contains("damaged"), "{:?}", c.warnings);
    }

    #[test]
    fn rejects_non_captures() {
        assert!(matches!(
            parse_capture(b""),
            Err(CaptureError::NotACapture(_))
        ));
        assert!(matches!(
            parse_capture(b"hello world"),
            Err(CaptureError::NotACapture(_))
        ));
    }
}
