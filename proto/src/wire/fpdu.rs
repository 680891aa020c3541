//! MPA FPDU framing primitives: ULPDU_Length, pad, CRC32c, markers and MULPDU.
//!
//! An FPDU (mpa-08 §4.1 Figure 2) is `ULPDU_Length (2) | ULPDU | PAD (0-3) | CRC (4)`; when the
//! receiver asked for markers, 4-octet markers are also interleaved at every 512th octet of the
//! stream, counted from the first octet of FPDU mode (mpa-08 §4.3). This module holds the
//! arithmetic both the framer ([`crate::mpa::framer`]) and the deframer
//! ([`crate::mpa::deframer`]) rely on, plus two zero-copy views:
//!
//! - [`Fpdu`]: a marker-free FPDU (length, ULPDU, pad, CRC field, CRC computation);
//! - [`Marker`] and [`MarkerRepr`]: the 4-octet marker (reserved 16 bits + FPDUPTR).
//!
//! Stream positions ("stream offsets") in this crate are counted in octets from the first
//! octet of FPDU mode in one direction, i.e. from the first octet after the MPA Request (or
//! Reply) frame. Markers therefore sit at offsets 0, 512, 1024, ... (MPA-4.3-7, MPA-4.3-8),
//! which is the same as `SeqStart + k * 512` in TCP sequence space.
//!
//! The CRC is the iSCSI CRC32c (MPA-4.4-14) computed with the `crc32c` crate; it is the one
//! field in iWARP that travels least significant octet first (WIRE-FORMATS §7.2 (c)).

use super::{Error, Result};

/// Size of the ULPDU_Length field (mpa-08 §4.1).
pub const ULPDU_LENGTH_LEN: usize = 2;
/// Size of the CRC field (mpa-08 §4.1).
pub const CRC_LEN: usize = 4;
/// Size of a marker (mpa-08 §4.2).
pub const MARKER_LEN: usize = 4;
/// Markers sit at every 512th octet of the stream in FPDU mode (MPA-4.3-2, MPA-4.3-8).
pub const MARKER_INTERVAL: usize = 512;
/// Fixed per-FPDU overhead without pad and markers: length field plus CRC (mpa-08 §4.1).
pub const FPDU_OVERHEAD: usize = ULPDU_LENGTH_LEN + CRC_LEN;
/// The largest ULPDU DDP may hand to MPA and the upper bound of MULPDU (MPA-3-4, MPA-3-5).
pub const MAX_ULPDU_LEN: usize = 64768;
/// The smallest MULPDU MPA may offer, whatever the EMSS (MPA-3-4, MPA-4.5-6, MPA-4.5-7).
pub const MIN_MULPDU: usize = 128;

/// Number of zero pad octets after a ULPDU of `ulpdu_len` octets, so that
/// `2 + ulpdu_len + pad` is a multiple of 4 (MPA-4.1-2; WIRE-FORMATS §7.3 rule 6).
///
/// The pad depends on the length field plus the ULPDU, not on the ULPDU alone: 42 gives 0,
/// 16 gives 2.
#[inline]
pub const fn pad_len(ulpdu_len: usize) -> usize {
    (4 - (ULPDU_LENGTH_LEN + (ulpdu_len % 4)) % 4) % 4
}

/// Length of a marker-free FPDU carrying `ulpdu_len` ULPDU octets: length field, ULPDU, pad
/// and CRC (MPA-4.1-1). Always a multiple of 4.
#[inline]
pub const fn fpdu_len(ulpdu_len: usize) -> usize {
    ULPDU_LENGTH_LEN + ulpdu_len + pad_len(ulpdu_len) + CRC_LEN
}

/// True if a marker starts at `stream_offset` (counted from the start of FPDU mode) when
/// markers are on (MPA-4.3-8).
#[inline]
pub const fn is_marker_offset(stream_offset: u64) -> bool {
    stream_offset.is_multiple_of(MARKER_INTERVAL as u64)
}

/// Octets from `stream_offset` up to the start of the next marker (0 if a marker starts
/// right there).
#[inline]
pub const fn octets_to_next_marker(stream_offset: u64) -> usize {
    let phase = (stream_offset % MARKER_INTERVAL as u64) as usize;
    (MARKER_INTERVAL - phase) % MARKER_INTERVAL
}

/// Number of markers inside an FPDU that starts at `stream_offset` and carries `content_len`
/// octets of marker-free FPDU (`fpdu_len(ulpdu_len)`).
///
/// A marker belongs to the FPDU if some octet of the FPDU follows it: that includes a marker
/// directly in front of ULPDU_Length (MPA-4.3-5, MPA-4.4-17) and one between pad and CRC
/// (MPA-4.4-16), but not one directly after the CRC, which belongs to the next FPDU.
pub const fn markers_in_fpdu(stream_offset: u64, content_len: usize) -> usize {
    if content_len == 0 {
        return 0;
    }
    let phase = (stream_offset % MARKER_INTERVAL as u64) as usize;
    // A marker at relative position p (a multiple of 512 minus phase) belongs to the FPDU iff
    // p < content_len + 4 * (number of markers before p). Each marker adds only 4 octets while
    // markers are 512 apart, so iterating the count to its fixed point converges in at most
    // two rounds.
    let mut markers = 0;
    loop {
        let end = phase + content_len + MARKER_LEN * markers;
        // Multiples of 512 in [phase, end).
        let count = end.div_ceil(MARKER_INTERVAL) - phase.div_ceil(MARKER_INTERVAL);
        if count == markers {
            return markers;
        }
        markers = count;
    }
}

/// Octets an FPDU with a ULPDU of `ulpdu_len` octets occupies on the wire when it starts at
/// `stream_offset`, markers included if `markers` is true (mpa-08 §4.1, §4.3).
#[inline]
pub const fn fpdu_wire_len(stream_offset: u64, ulpdu_len: usize, markers: bool) -> usize {
    let content = fpdu_len(ulpdu_len);
    if markers {
        content + MARKER_LEN * markers_in_fpdu(stream_offset, content)
    } else {
        content
    }
}

/// The MULPDU for an effective MSS (MPA-4.5-1 with markers, MPA-4.5-2 without), clamped to
/// `MIN_MULPDU..=MAX_ULPDU_LEN` (MPA-3-4, MPA-4.5-6).
///
/// `markers` is whether this side must *send* markers, i.e. whether the peer asked for them
/// (WIRE-FORMATS §7.3 rule 7). `emss` is the TCP segment size the path allows (path MTU minus
/// IP and TCP headers and options; WIRE-FORMATS §7.2 (e)).
pub const fn mulpdu(emss: usize, markers: bool) -> usize {
    let overhead = if markers {
        FPDU_OVERHEAD + MARKER_LEN * emss.div_ceil(MARKER_INTERVAL) + emss % 4
    } else {
        FPDU_OVERHEAD + emss % 4
    };
    let raw = emss.saturating_sub(overhead);
    if raw < MIN_MULPDU {
        MIN_MULPDU
    } else if raw > MAX_ULPDU_LEN {
        MAX_ULPDU_LEN
    } else {
        raw
    }
}

/// CRC32c (iSCSI polynomial, reflected, init and final XOR 0xFFFFFFFF) of `data`
/// (MPA-4.4-14).
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    ::crc32c::crc32c(data)
}

/// Extends a CRC32c value over more data: `crc32c_append(crc32c(a), b) == crc32c(a ++ b)`.
/// Start from 0 to get `crc32c(data)`.
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    ::crc32c::crc32c_append(crc, data)
}

/// A CRC32c implementation with [`crc32c_append`]'s contract. The framers and deframers use
/// [`crc32c_append`] (the `crc32c` crate) unless given another
/// ([`crate::mpa::framer::Framer::with_crc32c`], [`crate::mpa::deframer::Deframer::with_crc32c`],
/// [`crate::mpa::framer::frame_in_place`]): a host may have a faster one for its inputs
/// (the engine's is for short FPDUs), which this crate cannot write without `unsafe`. Any
/// correct one gives the same octets on the wire.
pub type Crc32cFn = fn(u32, &[u8]) -> u32;

/// The CRC field octets for a CRC value: least significant octet first (WIRE-FORMATS §7.2 (c),
/// §7.3 rule 5; mpa-08 Figures 5-6).
#[inline]
pub const fn crc_to_wire(crc: u32) -> [u8; CRC_LEN] {
    crc.to_le_bytes()
}

/// The CRC value carried in CRC field octets (least significant octet first).
#[inline]
pub const fn crc_from_wire(field: [u8; CRC_LEN]) -> u32 {
    u32::from_le_bytes(field)
}

mod field {
    use core::ops::Range;

    pub const ULPDU_LENGTH: Range<usize> = 0..2;
    pub const ULPDU: usize = 2;

    pub const MARKER_RESERVED: Range<usize> = 0..2;
    pub const MARKER_FPDUPTR: Range<usize> = 2..4;
}

/// A zero-copy view of one marker-free FPDU: ULPDU_Length, ULPDU, pad and CRC field
/// (mpa-08 §4.1 Figure 2).
///
/// Use it for FPDUs that carry no marker (markers off, or none fell inside); the deframer
/// handles the general case. The buffer may be longer than the FPDU; octets after it are
/// ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fpdu<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Fpdu<T> {
    /// Wraps a buffer without checking its length; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Fpdu<T> {
        Fpdu { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len); afterwards no accessor panics.
    pub fn new_checked(buffer: T) -> Result<Fpdu<T>> {
        let fpdu = Self::new_unchecked(buffer);
        fpdu.check_len()?;
        Ok(fpdu)
    }

    /// Checks that the buffer holds the length field and the whole FPDU it announces
    /// (`Error::Truncated` otherwise).
    pub fn check_len(&self) -> Result<()> {
        let data = self.buffer.as_ref();
        if data.len() < field::ULPDU {
            return Err(Error::Truncated);
        }
        if data.len() < fpdu_len(self.ulpdu_len() as usize) {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The ULPDU_Length field: ULPDU octets only, never pad, CRC or markers (MPA-4.1-1).
    #[inline]
    pub fn ulpdu_len(&self) -> u16 {
        let data = self.buffer.as_ref();
        u16::from_be_bytes([
            data[field::ULPDU_LENGTH.start],
            data[field::ULPDU_LENGTH.start + 1],
        ])
    }

    /// The number of pad octets after the ULPDU.
    #[inline]
    pub fn pad_len(&self) -> usize {
        pad_len(self.ulpdu_len() as usize)
    }

    /// Total FPDU length: length field, ULPDU, pad and CRC.
    #[inline]
    pub fn total_len(&self) -> usize {
        fpdu_len(self.ulpdu_len() as usize)
    }

    fn crc_start(&self) -> usize {
        self.total_len() - CRC_LEN
    }

    /// The ULPDU (the DDP segment) this FPDU carries.
    #[inline]
    pub fn ulpdu(&self) -> &[u8] {
        let end = field::ULPDU + self.ulpdu_len() as usize;
        &self.buffer.as_ref()[field::ULPDU..end]
    }

    /// The pad octets (sent as zero, ignored on receive except by the CRC; MPA-4.1-3).
    #[inline]
    pub fn pad(&self) -> &[u8] {
        let start = field::ULPDU + self.ulpdu_len() as usize;
        &self.buffer.as_ref()[start..self.crc_start()]
    }

    /// The octets the CRC covers: length field, ULPDU and pad (MPA-4.4-15).
    #[inline]
    pub fn covered(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.crc_start()]
    }

    /// The value in the CRC field, decoded least significant octet first.
    #[inline]
    pub fn crc_field(&self) -> u32 {
        let data = self.buffer.as_ref();
        let s = self.crc_start();
        crc_from_wire([data[s], data[s + 1], data[s + 2], data[s + 3]])
    }

    /// The CRC32c over the covered octets (MPA-4.4-19).
    #[inline]
    pub fn compute_crc(&self) -> u32 {
        crc32c(self.covered())
    }

    /// True if the CRC field matches the covered octets (MPA-4.4-20). Only meaningful when
    /// CRCs are negotiated; with CRCs off the field MUST NOT be checked (MPA-4.1-4).
    #[inline]
    pub fn verify_crc(&self) -> bool {
        self.compute_crc() == self.crc_field()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Fpdu<T> {
    /// Sets the ULPDU_Length field.
    #[inline]
    pub fn set_ulpdu_len(&mut self, value: u16) {
        self.buffer.as_mut()[field::ULPDU_LENGTH].copy_from_slice(&value.to_be_bytes());
    }

    /// The ULPDU, mutable (length taken from the ULPDU_Length field).
    #[inline]
    pub fn ulpdu_mut(&mut self) -> &mut [u8] {
        let end = field::ULPDU + self.ulpdu_len() as usize;
        &mut self.buffer.as_mut()[field::ULPDU..end]
    }

    /// Zeroes the pad octets (MPA-4.1-2).
    #[inline]
    pub fn clear_pad(&mut self) {
        let start = field::ULPDU + self.ulpdu_len() as usize;
        let end = self.crc_start();
        self.buffer.as_mut()[start..end].fill(0);
    }

    /// Writes `value` into the CRC field, least significant octet first.
    #[inline]
    pub fn set_crc_field(&mut self, value: u32) {
        let s = self.crc_start();
        self.buffer.as_mut()[s..s + CRC_LEN].copy_from_slice(&crc_to_wire(value));
    }

    /// Computes the CRC over the covered octets and writes it (MPA-4.4-18).
    #[inline]
    pub fn fill_crc(&mut self) {
        let crc = self.compute_crc();
        self.set_crc_field(crc);
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Fpdu<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// A zero-copy view of a 4-octet marker: 16 reserved bits, then FPDUPTR (mpa-08 §4.2
/// Figure 3; MPA-4.2-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Marker<T> {
    /// Wraps a buffer without checking its length; accessors may panic on a short buffer.
    pub const fn new_unchecked(buffer: T) -> Marker<T> {
        Marker { buffer }
    }

    /// Wraps a buffer after [`check_len`](Self::check_len); afterwards no accessor panics.
    pub fn new_checked(buffer: T) -> Result<Marker<T>> {
        let marker = Self::new_unchecked(buffer);
        marker.check_len()?;
        Ok(marker)
    }

    /// Checks that the buffer holds at least the 4 marker octets.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < MARKER_LEN {
            Err(Error::Truncated)
        } else {
            Ok(())
        }
    }

    /// Returns the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The reserved field as received (ignored except by the CRC; MPA-4.2-3).
    #[inline]
    pub fn reserved(&self) -> u16 {
        let d = self.buffer.as_ref();
        u16::from_be_bytes([
            d[field::MARKER_RESERVED.start],
            d[field::MARKER_RESERVED.start + 1],
        ])
    }

    /// The FPDUPTR field exactly as received, low two bits included.
    #[inline]
    pub fn fpduptr_raw(&self) -> u16 {
        let d = self.buffer.as_ref();
        u16::from_be_bytes([
            d[field::MARKER_FPDUPTR.start],
            d[field::MARKER_FPDUPTR.start + 1],
        ])
    }

    /// FPDUPTR with the two low bits taken as zero, as receivers must (MPA-4.2-5): the
    /// distance back from the marker to the ULPDU_Length field of its FPDU.
    #[inline]
    pub fn fpduptr(&self) -> u16 {
        self.fpduptr_raw() & !3
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Marker<T> {
    /// Sets the reserved field (senders use 0; MPA-4.2-2).
    #[inline]
    pub fn set_reserved(&mut self, value: u16) {
        self.buffer.as_mut()[field::MARKER_RESERVED].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the FPDUPTR field as given (senders clear the low bits; MPA-4.2-4).
    #[inline]
    pub fn set_fpduptr(&mut self, value: u16) {
        self.buffer.as_mut()[field::MARKER_FPDUPTR].copy_from_slice(&value.to_be_bytes());
    }
}

/// The meaning of a marker: where its FPDU starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MarkerRepr {
    /// Octets from the first octet of the containing FPDU's ULPDU_Length field to the first
    /// octet of this marker; 0 for a marker between FPDUs (MPA-4.3-3, MPA-4.3-11). Always a
    /// multiple of 4.
    pub fpduptr: u16,
}

impl MarkerRepr {
    /// The marker for an FPDU whose ULPDU_Length starts `distance` octets before the marker
    /// (0 when the marker precedes ULPDU_Length). The distance is taken modulo 2^16 and its
    /// two low bits are cleared (MPA-4.2-4).
    #[inline]
    pub const fn for_distance(distance: usize) -> MarkerRepr {
        MarkerRepr {
            fpduptr: (distance as u16) & !3,
        }
    }

    /// Parses a marker, ignoring the reserved field and the two low FPDUPTR bits
    /// (MPA-4.2-3, MPA-4.2-5). Never fails on a checked view.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(marker: &Marker<&T>) -> Result<MarkerRepr> {
        marker.check_len()?;
        Ok(MarkerRepr {
            fpduptr: marker.fpduptr(),
        })
    }

    /// The length of an emitted marker.
    pub const fn buffer_len(&self) -> usize {
        MARKER_LEN
    }

    /// Writes the marker: reserved 0, FPDUPTR with its low bits cleared (MPA-4.2-2, MPA-4.2-4).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, marker: &mut Marker<&mut T>) {
        marker.set_reserved(0);
        marker.set_fpduptr(self.fpduptr & !3);
    }

    /// The 4 wire octets of this marker.
    #[inline]
    pub const fn to_bytes(self) -> [u8; MARKER_LEN] {
        let p = (self.fpduptr & !3).to_be_bytes();
        [0, 0, p[0], p[1]]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// WIRE-FORMATS §7.3 rule 6: pad counts the length field; 42 -> 0, 16 -> 2 (MPA-4.1-2).
    #[test]
    fn pad_counts_the_length_field() {
        assert_eq!(pad_len(42), 0);
        assert_eq!(pad_len(16), 2);
        for len in 0..64 {
            assert_eq!((2 + len + pad_len(len)) % 4, 0);
            assert!(pad_len(len) < 4);
            assert_eq!(fpdu_len(len) % 4, 0);
        }
        assert_eq!(fpdu_len(0), 8);
        assert_eq!(fpdu_len(1), 8);
        assert_eq!(fpdu_len(2), 8);
        assert_eq!(fpdu_len(3), 12);
    }

    /// The check value of CRC32c (WIRE-FORMATS §7.2 (c)) and the octet order of the field.
    #[test]
    fn crc_parameters_and_octet_order() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c_append(crc32c(b"1234"), b"56789"), 0xE306_9283);
        assert_eq!(crc_to_wire(0x8399_2352), [0x52, 0x23, 0x99, 0x83]);
        assert_eq!(crc_from_wire([0x84, 0x92, 0x58, 0x98]), 0x9858_9284);
    }

    /// MPA-4.5-1, MPA-4.5-2, MPA-3-4: worked values of WIRE-FORMATS §7.2 (e) and the clamps.
    #[test]
    fn mulpdu_formula_and_clamps() {
        assert_eq!(mulpdu(1460, false), 1454);
        assert_eq!(mulpdu(1460, true), 1442);
        assert_eq!(mulpdu(1448, false), 1442);
        assert_eq!(mulpdu(1448, true), 1430);
        assert_eq!(mulpdu(0, true), MIN_MULPDU);
        assert_eq!(mulpdu(100, false), MIN_MULPDU);
        assert_eq!(mulpdu(9000 * 100, false), MAX_ULPDU_LEN);
        assert_eq!(mulpdu(usize::MAX, true), MAX_ULPDU_LEN);
        // An FPDU of MULPDU octets fits the EMSS even in the worst marker phase.
        for emss in [536usize, 1024, 1460, 1448, 4096, 8960] {
            let m = mulpdu(emss, true);
            for phase in (0..512u64).step_by(4) {
                assert!(
                    fpdu_wire_len(phase, m, true) <= emss,
                    "emss {emss} phase {phase}"
                );
            }
            assert!(fpdu_len(mulpdu(emss, false)) <= emss);
        }
    }

    /// MPA-4.3-5, MPA-4.3-7, MPA-4.4-16: which markers an FPDU owns.
    #[test]
    fn marker_count_by_position() {
        // Figure 5: first FPDU at offset 0 has the leading marker: 4 + 48 octets.
        assert_eq!(fpdu_wire_len(0, 42, true), 52);
        // Figure 6: FPDU at 0x1EC contains the marker at 0x200.
        assert_eq!(fpdu_wire_len(0x1EC, 42, true), 52);
        assert_eq!(fpdu_wire_len(0x1EC, 42, false), 48);
        // FPDU ending exactly at 512: the marker at 512 belongs to the next FPDU.
        assert_eq!(fpdu_wire_len(512 - 48, 42, true), 48);
        // A marker between pad and CRC (CRC would start at 512) belongs to this FPDU.
        assert_eq!(fpdu_wire_len(512 - 44, 42, true), 52);
        // A long FPDU spans several markers.
        let w = fpdu_wire_len(4, 4096, true);
        assert_eq!(w, fpdu_len(4096) + 4 * 8); // markers at 512, 1024, ..., 4096
        assert_eq!(markers_in_fpdu(0, 0), 0);
        assert_eq!(octets_to_next_marker(0), 0);
        assert_eq!(octets_to_next_marker(4), 508);
        assert!(is_marker_offset(1024) && !is_marker_offset(1020));
    }

    /// Brute-force cross-check of `markers_in_fpdu` against a byte-by-byte simulation.
    #[test]
    fn marker_count_matches_simulation() {
        for phase in (0..1024u64).step_by(4) {
            for ulpdu_len in [0usize, 1, 5, 42, 500, 505, 506, 507, 508, 509, 1020, 2000] {
                let content = fpdu_len(ulpdu_len);
                let mut pos = phase;
                let mut markers = 0;
                for _ in 0..content {
                    if is_marker_offset(pos) {
                        markers += 1;
                        pos += 4;
                    }
                    pos += 1;
                }
                assert_eq!(
                    markers_in_fpdu(phase, content),
                    markers,
                    "{phase} {ulpdu_len}"
                );
            }
        }
    }

    #[test]
    fn fpdu_view_checks_length_and_reads_fields() {
        assert_eq!(Fpdu::new_checked(&[0u8][..]), Err(Error::Truncated));
        assert_eq!(
            Fpdu::new_checked(&[0u8, 4, 1, 2, 3, 4, 0, 0, 0, 0][..]),
            Err(Error::Truncated)
        );
        let mut buf = [0u8; 12];
        let mut f = Fpdu::new_unchecked(&mut buf[..]);
        f.set_ulpdu_len(3);
        f.ulpdu_mut().copy_from_slice(b"abc");
        f.clear_pad();
        f.fill_crc();
        let f = Fpdu::new_checked(&buf[..]).unwrap();
        assert_eq!(f.ulpdu(), b"abc");
        assert_eq!(f.pad(), &[0u8; 3]);
        assert_eq!(f.total_len(), 12);
        assert!(f.verify_crc());
        assert_eq!(f.crc_field(), crc32c(&buf[..8]));
    }

    #[test]
    fn marker_view_and_repr() {
        let m = Marker::new_checked(&[0xAB, 0xCD, 0x00, 0x17][..]).unwrap();
        assert_eq!(m.reserved(), 0xABCD);
        assert_eq!(m.fpduptr_raw(), 0x17);
        assert_eq!(m.fpduptr(), 0x14);
        assert_eq!(MarkerRepr::parse(&m).unwrap().fpduptr, 0x14);
        assert_eq!(Marker::new_checked(&[0u8; 3][..]), Err(Error::Truncated));
        let mut buf = [0xFFu8; 4];
        let repr = MarkerRepr::for_distance(0x14);
        repr.emit(&mut Marker::new_unchecked(&mut buf[..]));
        assert_eq!(buf, [0, 0, 0, 0x14]);
        assert_eq!(repr.to_bytes(), buf);
        assert_eq!(repr.buffer_len(), 4);
    }
}
