//! DDP segment headers (draft-ietf-rddp-ddp-04 §4; final RFC 5041; WIRE-FORMATS §3).
//!
//! A DDP segment is the MPA ULPDU: a 14-octet tagged header (T = 1) or an 18-octet untagged
//! header (T = 0), then the ULP payload. DDP has no length field of its own; the segment
//! length is the MPA ULPDU_Length, i.e. the length of the buffer this view wraps (DDP-3-8).
//!
//! ```text
//! D+0  T|L|Rsvd(4)|DV(2)     control octet, common to both models (DDP-4.1-*)
//! D+1  RsvdULP[0:7]          opaque to DDP; RDMAP puts its control octet here
//!      --- tagged (T=1) ---   --- untagged (T=0) ---
//! D+2  STag (4)               RsvdULP[8:39] (4)  (RDMAP: Invalidate STag or 0)
//! D+6  TO (8)                 QN (4)
//! D+10                        MSN (4)
//! D+14 payload                MO (4)
//! D+18                        payload
//! ```
//!
//! [`DdpSegment`] is the zero-copy view; [`DdpRepr`] the parsed header. Neither judges the
//! DV field or the buffer fields: that is receive validation (`crate::ddp`), because the
//! Terminate code for a bad version depends on the buffer model (DDP-7.2-1).

use super::{Error, Result};

/// The DDP version this implementation speaks (DV = 01b, DDP-4.1-9). Version 0 is the
/// pre-IETF RDMA Consortium flavour, which a stream may use only if MPA negotiated it
/// (WIRE-FORMATS §7.2 (h)).
pub const DDP_VERSION: u8 = 1;

/// Length of the tagged buffer model header (DDP-4.2-1).
pub const TAGGED_HEADER_LEN: usize = 14;

/// Length of the untagged buffer model header (DDP-4.3-1).
pub const UNTAGGED_HEADER_LEN: usize = 18;

/// The longer of the two header lengths: a buffer this large holds any DDP header.
pub const MAX_HEADER_LEN: usize = UNTAGGED_HEADER_LEN;

/// Field offsets (octets from D+0) and control-octet masks.
mod field {
    use core::ops::Range;

    pub const CONTROL: usize = 0;
    pub const RSVD_ULP: usize = 1;

    // Tagged buffer model (DDP-04 §4.2 Figure 4).
    pub const STAG: Range<usize> = 2..6;
    pub const TO: Range<usize> = 6..14;

    // Untagged buffer model (DDP-04 §4.3 Figure 5).
    pub const RSVD_ULP2: Range<usize> = 2..6;
    pub const QN: Range<usize> = 6..10;
    pub const MSN: Range<usize> = 10..14;
    pub const MO: Range<usize> = 14..18;

    // Control octet (DDP-04 §4.1 Figure 3).
    pub const T_MASK: u8 = 0x80;
    pub const L_MASK: u8 = 0x40;
    pub const RSVD_MASK: u8 = 0x3C;
    pub const RSVD_SHIFT: u32 = 2;
    pub const DV_MASK: u8 = 0x03;
}

#[inline]
fn read_u32(data: &[u8], range: core::ops::Range<usize>) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&data[range]);
    u32::from_be_bytes(b)
}

#[inline]
fn read_u64(data: &[u8], range: core::ops::Range<usize>) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&data[range]);
    u64::from_be_bytes(b)
}

/// A zero-copy view of one DDP segment (header plus payload).
///
/// Construct it with [`DdpSegment::new_checked`] for bytes from the network: it reads the T
/// bit first and then requires the full header of that model, after which no getter panics.
/// Model-specific getters (`stag`, `to`, `rsvd_ulp2`, `qn`, `msn`, `mo`) return `None` for a
/// segment of the other model, so a tagged 14-octet segment can never be read past its end.
/// Setters are for building segments in buffers at least [`DdpRepr::buffer_len`] long and
/// panic on shorter buffers, as in smoltcp.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DdpSegment<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> DdpSegment<T> {
    /// Wraps a buffer without checking its length. Getters may panic unless
    /// [`check_len`](Self::check_len) succeeds.
    pub const fn new_unchecked(buffer: T) -> DdpSegment<T> {
        DdpSegment { buffer }
    }

    /// Wraps a buffer from the network, checking that it holds the whole header of the
    /// model its T bit announces (DDP-4.2-1, DDP-4.3-1).
    pub fn new_checked(buffer: T) -> Result<DdpSegment<T>> {
        let segment = Self::new_unchecked(buffer);
        segment.check_len()?;
        Ok(segment)
    }

    /// Checks that the buffer holds the control octet and then the whole header of the
    /// model the T bit selects. Returns [`Error::Truncated`] otherwise.
    pub fn check_len(&self) -> Result<()> {
        let data = self.buffer.as_ref();
        match data.get(field::CONTROL) {
            None => Err(Error::Truncated),
            Some(&control) => {
                let need = header_len_for(control & field::T_MASK != 0);
                if data.len() < need {
                    Err(Error::Truncated)
                } else {
                    Ok(())
                }
            }
        }
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// The whole control octet (D+0).
    pub fn control(&self) -> u8 {
        self.buffer.as_ref()[field::CONTROL]
    }

    /// The T flag: true for the tagged buffer model (DDP-4.1-1, DDP-4.1-2).
    pub fn tagged(&self) -> bool {
        self.control() & field::T_MASK != 0
    }

    /// The L flag: true on the last segment of a message (DDP-4.1-3).
    pub fn last(&self) -> bool {
        self.control() & field::L_MASK != 0
    }

    /// The 4 reserved bits of the control octet. Receivers do not check them (DDP-4.1-8);
    /// the getter exists for dissectors and tests.
    pub fn rsvd(&self) -> u8 {
        (self.control() & field::RSVD_MASK) >> field::RSVD_SHIFT
    }

    /// The DV field, the DDP version (2 bits).
    pub fn version(&self) -> u8 {
        self.control() & field::DV_MASK
    }

    /// RsvdULP (tagged) or RsvdULP\[0:7\] (untagged): the octet at D+1, opaque to DDP.
    /// RDMAP keeps its own control octet here.
    pub fn rsvd_ulp(&self) -> u8 {
        self.buffer.as_ref()[field::RSVD_ULP]
    }

    /// The STag of a tagged segment; `None` for an untagged one.
    pub fn stag(&self) -> Option<u32> {
        self.tagged()
            .then(|| read_u32(self.buffer.as_ref(), field::STAG))
    }

    /// The Tagged Offset of a tagged segment; `None` for an untagged one.
    pub fn to(&self) -> Option<u64> {
        self.tagged()
            .then(|| read_u64(self.buffer.as_ref(), field::TO))
    }

    /// RsvdULP\[8:39\] of an untagged segment (RDMAP's Invalidate STag); `None` if tagged.
    pub fn rsvd_ulp2(&self) -> Option<u32> {
        (!self.tagged()).then(|| read_u32(self.buffer.as_ref(), field::RSVD_ULP2))
    }

    /// The Queue Number of an untagged segment; `None` if tagged.
    pub fn qn(&self) -> Option<u32> {
        (!self.tagged()).then(|| read_u32(self.buffer.as_ref(), field::QN))
    }

    /// The Message Sequence Number of an untagged segment; `None` if tagged.
    pub fn msn(&self) -> Option<u32> {
        (!self.tagged()).then(|| read_u32(self.buffer.as_ref(), field::MSN))
    }

    /// The Message Offset of an untagged segment; `None` if tagged.
    pub fn mo(&self) -> Option<u32> {
        (!self.tagged()).then(|| read_u32(self.buffer.as_ref(), field::MO))
    }

    /// The header length the T bit selects: 14 (tagged) or 18 (untagged).
    pub fn header_len(&self) -> usize {
        header_len_for(self.tagged())
    }

    /// The header octets, e.g. to copy the offending DDP header into a Terminate.
    pub fn header(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.header_len()]
    }

    /// The ULP payload: everything after the header.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }

    /// The payload length in octets (the segment length minus the header length).
    pub fn payload_len(&self) -> usize {
        self.buffer.as_ref().len() - self.header_len()
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DdpSegment<T> {
    fn data_mut(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }

    fn update_control(&mut self, mask: u8, value: u8) {
        let c = &mut self.data_mut()[field::CONTROL];
        *c = (*c & !mask) | (value & mask);
    }

    /// Sets the whole control octet.
    pub fn set_control(&mut self, value: u8) {
        self.data_mut()[field::CONTROL] = value;
    }

    /// Sets the T flag (this changes which layout the other setters address).
    pub fn set_tagged(&mut self, value: bool) {
        self.update_control(field::T_MASK, if value { 0xFF } else { 0 });
    }

    /// Sets the L flag.
    pub fn set_last(&mut self, value: bool) {
        self.update_control(field::L_MASK, if value { 0xFF } else { 0 });
    }

    /// Sets the 4 reserved bits (senders write 0, DDP-4.1-8; other values are for tests).
    pub fn set_rsvd(&mut self, value: u8) {
        self.update_control(field::RSVD_MASK, value << field::RSVD_SHIFT);
    }

    /// Sets DV (masked to 2 bits).
    pub fn set_version(&mut self, value: u8) {
        self.update_control(field::DV_MASK, value);
    }

    /// Sets the octet at D+1 (RsvdULP / RsvdULP\[0:7\]).
    pub fn set_rsvd_ulp(&mut self, value: u8) {
        self.data_mut()[field::RSVD_ULP] = value;
    }

    /// Sets the STag (tagged layout, D+2..D+6).
    pub fn set_stag(&mut self, value: u32) {
        self.data_mut()[field::STAG].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the Tagged Offset (tagged layout, D+6..D+14).
    pub fn set_to(&mut self, value: u64) {
        self.data_mut()[field::TO].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets RsvdULP\[8:39\] (untagged layout, D+2..D+6).
    pub fn set_rsvd_ulp2(&mut self, value: u32) {
        self.data_mut()[field::RSVD_ULP2].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the QN (untagged layout, D+6..D+10).
    pub fn set_qn(&mut self, value: u32) {
        self.data_mut()[field::QN].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the MSN (untagged layout, D+10..D+14).
    pub fn set_msn(&mut self, value: u32) {
        self.data_mut()[field::MSN].copy_from_slice(&value.to_be_bytes());
    }

    /// Sets the MO (untagged layout, D+14..D+18).
    pub fn set_mo(&mut self, value: u32) {
        self.data_mut()[field::MO].copy_from_slice(&value.to_be_bytes());
    }

    /// The payload, mutably (everything after the header the T bit selects).
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let start = self.header_len();
        &mut self.data_mut()[start..]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for DdpSegment<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

const fn header_len_for(tagged: bool) -> usize {
    if tagged {
        TAGGED_HEADER_LEN
    } else {
        UNTAGGED_HEADER_LEN
    }
}

/// The buffer model and its addressing fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DdpBuffer {
    /// Tagged buffer model (T = 1, DDP-04 §4.2): placement at `to` in the buffer `stag`.
    Tagged {
        /// Steering Tag of the Data Sink's tagged buffer.
        stag: u32,
        /// Tagged Offset of this segment's first payload octet.
        to: u64,
    },
    /// Untagged buffer model (T = 0, DDP-04 §4.3): placement at `mo` in the buffer that
    /// queue `qn` holds for message `msn`.
    Untagged {
        /// RsvdULP\[8:39\], opaque to DDP (RDMAP: the Invalidate STag of a Send with
        /// Invalidate, otherwise 0).
        rsvd_ulp2: u32,
        /// Queue Number.
        qn: u32,
        /// Message Sequence Number.
        msn: u32,
        /// Message Offset of this segment's first payload octet.
        mo: u32,
    },
}

impl DdpBuffer {
    /// True for the tagged model.
    pub const fn is_tagged(&self) -> bool {
        matches!(self, DdpBuffer::Tagged { .. })
    }

    /// The header length of this model: 14 (tagged) or 18 (untagged).
    pub const fn header_len(&self) -> usize {
        header_len_for(self.is_tagged())
    }
}

/// A parsed DDP header.
///
/// The reserved control bits are not represented: they are sent as zero and not checked on
/// receive (DDP-4.1-8). `version` is kept as received; receive validation compares it with
/// the stream's version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DdpRepr {
    /// The L flag (DDP-4.1-3, DDP-4.1-4).
    pub last: bool,
    /// DV, 2 bits ([`DDP_VERSION`] for this protocol).
    pub version: u8,
    /// The octet at D+1 (RsvdULP / RsvdULP\[0:7\]); opaque to DDP, RDMAP's control octet.
    pub rsvd_ulp: u8,
    /// Buffer model and addressing fields.
    pub buffer: DdpBuffer,
}

impl DdpRepr {
    /// Parses the header of a checked segment. Every bit pattern is a well-formed header, so
    /// this fails only if the view's buffer is too short for the header.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(segment: &DdpSegment<&T>) -> Result<DdpRepr> {
        DdpRepr::split(segment.buffer.as_ref())
            .map(|(repr, _)| repr)
            .ok_or(Error::Truncated)
    }

    /// Parses the header at the front of a DDP segment from the network and returns it with
    /// the ULP payload that follows it; `None` if the segment is empty or shorter than the
    /// header its T bit announces (the cases [`DdpSegment::check_len`] refuses). The same
    /// as [`DdpSegment::new_checked`] then [`DdpRepr::parse`] and
    /// [`DdpSegment::payload`], with one length check.
    #[inline(always)]
    pub(crate) fn split(segment: &[u8]) -> Option<(DdpRepr, &[u8])> {
        let control = *segment.first()?;
        let (rsvd_ulp, buffer, payload) = if control & field::T_MASK != 0 {
            let (h, payload) = segment.split_first_chunk::<TAGGED_HEADER_LEN>()?;
            let buffer = DdpBuffer::Tagged {
                stag: read_u32(h, field::STAG),
                to: read_u64(h, field::TO),
            };
            (h[field::RSVD_ULP], buffer, payload)
        } else {
            let (h, payload) = segment.split_first_chunk::<UNTAGGED_HEADER_LEN>()?;
            let buffer = DdpBuffer::Untagged {
                rsvd_ulp2: read_u32(h, field::RSVD_ULP2),
                qn: read_u32(h, field::QN),
                msn: read_u32(h, field::MSN),
                mo: read_u32(h, field::MO),
            };
            (h[field::RSVD_ULP], buffer, payload)
        };
        let repr = DdpRepr {
            last: control & field::L_MASK != 0,
            version: control & field::DV_MASK,
            rsvd_ulp,
            buffer,
        };
        Some((repr, payload))
    }

    /// The header length: 14 (tagged) or 18 (untagged).
    pub const fn header_len(&self) -> usize {
        self.buffer.header_len()
    }

    /// The number of octets [`emit`](Self::emit) writes (the header only; the payload is
    /// the caller's).
    pub const fn buffer_len(&self) -> usize {
        self.header_len()
    }

    /// The control octet this header goes out with: reserved bits zero (DDP-4.1-8), DV
    /// masked to 2 bits.
    pub const fn control(&self) -> u8 {
        let mut c = self.version & field::DV_MASK;
        if self.buffer.is_tagged() {
            c |= field::T_MASK;
        }
        if self.last {
            c |= field::L_MASK;
        }
        c
    }

    /// Writes the header into the first [`buffer_len`](Self::buffer_len) octets of the
    /// segment (panics if the buffer is shorter, as smoltcp's `emit` does). The payload
    /// octets are left alone.
    #[inline(always)]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]> + ?Sized>(&self, segment: &mut DdpSegment<&mut T>) {
        segment.set_control(self.control());
        segment.set_rsvd_ulp(self.rsvd_ulp);
        match self.buffer {
            DdpBuffer::Tagged { stag, to } => {
                segment.set_stag(stag);
                segment.set_to(to);
            }
            DdpBuffer::Untagged {
                rsvd_ulp2,
                qn,
                msn,
                mo,
            } => {
                segment.set_rsvd_ulp2(rsvd_ulp2);
                segment.set_qn(qn);
                segment.set_msn(msn);
                segment.set_mo(mo);
            }
        }
    }

    /// Writes the header into the start of `buf` and returns its length, or
    /// [`Error::Truncated`] if `buf` is too short. A convenience for the send path, which
    /// writes headers into small scratch buffers.
    pub fn emit_into(&self, buf: &mut [u8]) -> Result<usize> {
        let len = self.header_len();
        let head = buf.get_mut(..len).ok_or(Error::Truncated)?;
        self.emit(&mut DdpSegment::new_unchecked(head));
        Ok(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // WIRE-FORMATS §3.1 control-octet table (DV = 1): C1 / 81 / 41 / 01.
    #[test]
    fn control_octets_of_wire_formats_3_1() {
        let cases = [
            (true, true, 0xC1u8),
            (true, false, 0x81),
            (false, true, 0x41),
            (false, false, 0x01),
        ];
        for (tagged, last, octet) in cases {
            let buffer = if tagged {
                DdpBuffer::Tagged { stag: 0, to: 0 }
            } else {
                DdpBuffer::Untagged {
                    rsvd_ulp2: 0,
                    qn: 0,
                    msn: 1,
                    mo: 0,
                }
            };
            let repr = DdpRepr {
                last,
                version: DDP_VERSION,
                rsvd_ulp: 0x43,
                buffer,
            };
            assert_eq!(repr.control(), octet);
            let mut buf = [0xAAu8; MAX_HEADER_LEN];
            let n = repr.emit_into(&mut buf).unwrap();
            assert_eq!(buf[0], octet);
            let seg = DdpSegment::new_checked(&buf[..n]).unwrap();
            assert_eq!((seg.tagged(), seg.last(), seg.version()), (tagged, last, 1));
            assert_eq!(DdpRepr::parse(&seg).unwrap(), repr);
        }
    }

    // DDP-4.1-8: reserved bits are not checked on receive and not part of the repr.
    #[test]
    fn reserved_bits_are_ignored_on_parse() {
        let mut bytes = [0u8; 14];
        bytes[0] = 0xC1 | 0x3C;
        let seg = DdpSegment::new_checked(&bytes[..]).unwrap();
        assert_eq!(seg.rsvd(), 0xF);
        let repr = DdpRepr::parse(&seg).unwrap();
        assert_eq!(repr.control(), 0xC1);
    }

    #[test]
    fn new_checked_reads_t_first() {
        // 14 octets are enough for a tagged header but not for an untagged one.
        let mut bytes = [0u8; 14];
        bytes[0] = 0x81;
        assert!(DdpSegment::new_checked(&bytes[..]).is_ok());
        bytes[0] = 0x01;
        assert_eq!(
            DdpSegment::new_checked(&bytes[..]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            DdpSegment::new_checked(&[][..]).unwrap_err(),
            Error::Truncated
        );
        assert_eq!(
            DdpSegment::new_checked(&[0x81u8; 13][..]).unwrap_err(),
            Error::Truncated
        );
    }

    #[test]
    fn model_specific_getters_refuse_the_other_model() {
        let bytes = [0xC1u8; 14];
        let seg = DdpSegment::new_checked(&bytes[..]).unwrap();
        assert!(seg.mo().is_none() && seg.qn().is_none() && seg.msn().is_none());
        assert!(seg.rsvd_ulp2().is_none());
        assert_eq!(seg.stag(), Some(0xC1C1_C1C1));
        let bytes = [0x41u8; 18];
        let seg = DdpSegment::new_checked(&bytes[..]).unwrap();
        assert!(seg.stag().is_none() && seg.to().is_none());
        assert_eq!(seg.mo(), Some(0x4141_4141));
        assert_eq!(seg.payload_len(), 0);
    }

    #[test]
    fn emit_into_short_buffer_fails() {
        let repr = DdpRepr {
            last: true,
            version: 1,
            rsvd_ulp: 0,
            buffer: DdpBuffer::Tagged { stag: 1, to: 2 },
        };
        assert_eq!(repr.emit_into(&mut [0u8; 13]), Err(Error::Truncated));
        assert_eq!(repr.emit_into(&mut [0u8; 14]), Ok(14));
    }

    /// `DdpRepr::split` is `new_checked`, `parse` and `payload` in one: for every T bit,
    /// length and content.
    #[test]
    fn split_matches_the_view() {
        for len in 0..40usize {
            for control in [0x00u8, 0x01, 0x41, 0x7E, 0x80, 0x81, 0xC1, 0xFF] {
                let mut bytes: Vec<u8> = (0..len).map(|i| (i * 29 + 3) as u8).collect();
                if let Some(first) = bytes.first_mut() {
                    *first = control;
                }
                let expected = DdpSegment::new_checked(&bytes[..])
                    .ok()
                    .map(|seg| (DdpRepr::parse(&seg).unwrap(), &bytes[seg.header_len()..]));
                assert_eq!(DdpRepr::split(&bytes), expected, "{bytes:02x?}");
                let parsed = DdpRepr::parse(&DdpSegment::new_unchecked(&bytes[..]));
                assert_eq!(parsed.ok(), expected.map(|(repr, _)| repr));
            }
        }
    }
}
