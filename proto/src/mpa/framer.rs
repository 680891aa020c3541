//! The MPA transmit framer: ULPDU in, FPDU (length, ULPDU, pad, markers, CRC) out.
//!
//! Sans-IO: the framer owns no buffer. The caller gathers one ULPDU from any number of slices
//! (typically the DDP/RDMAP header and one or more payload slices) and gives an output buffer,
//! normally the free space of the TCP socket's transmit buffer. The framer copies the
//! ULPDU into it exactly once, inserting markers, and computes the CRC32c right behind the
//! copy, block by block (16 KiB) while the octets are still in cache, so the payload is
//! never walked a second time from memory. (Markers cut the copy into runs of at most 508
//! octets; a CRC per run would fall off the `crc32c` crate's fast interleaved path, which
//! is why the CRC works on blocks of the output, markers included, rather than per run.)
//!
//! Markers depend on the stream position, so the framer tracks the stream offset (counted
//! from the first octet of FPDU mode, see [`crate::wire::fpdu`]) of everything it emits;
//! [`Framer::fpdu_wire_len`] tells beforehand exactly how many octets the next FPDU takes.
//! Every FPDU emitted must therefore actually be sent, in order, on the same half connection.
//!
//! ```
//! use warpcore_proto::mpa::framer::{Framer, FramerConfig};
//! use warpcore_proto::wire::fpdu;
//!
//! let mut framer = Framer::new(FramerConfig {
//!     markers: false,
//!     crc: true,
//!     mulpdu: fpdu::mulpdu(1460, false),
//!     ..FramerConfig::default()
//! });
//! let header = [0x41u8, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0];
//! let payload = b"hello";
//! let mut out = [0u8; 64];
//! let need = framer.fpdu_wire_len(header.len() + payload.len());
//! let written = framer.emit(&[&header, payload], &mut out).unwrap();
//! assert_eq!(written, need);
//! ```

use crate::wire::ddp::{TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN};
use crate::wire::fpdu::{
    self, crc32c_append, crc_to_wire, Crc32cFn, MarkerRepr, MAX_ULPDU_LEN, MIN_MULPDU,
};

/// Transmit-side settings, fixed when the MPA negotiation completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FramerConfig {
    /// Insert markers: true iff the **peer** asked for them (M = 1 in the peer's Request or
    /// Reply; MPA-7.1.1-7, MPA-7.1.1-8, MPA-7.1.1-9, MPA-7.1.1-10).
    pub markers: bool,
    /// Generate the CRC32c. When false the CRC field is sent as zeros (it is still present,
    /// MPA-4.4-13; any value is valid, MPA-4.1-4). Negotiated CRCs must be generated
    /// (MPA-7.1.1-12); leaving them on is always allowed (MPA-4.4-12).
    pub crc: bool,
    /// The largest ULPDU accepted (MULPDU, normally [`fpdu::mulpdu`] of the EMSS), clamped
    /// to `128..=64768`: MPA never offers less than 128 (MPA-4.5-6, MPA-4.5-7) nor more than
    /// 64768 (MPA-3-4, MPA-3-5).
    pub mulpdu: usize,
    /// Stream offset, counted from the first octet of FPDU mode, of the first octet this
    /// framer emits: 0 for a connection that just finished its MPA startup (so the first
    /// FPDU is preceded by the initial marker, MPA-4.3-7). FPDU mode keeps every FPDU at a
    /// multiple of 4 octets, so this should be a multiple of 4.
    pub stream_offset: u64,
}

impl Default for FramerConfig {
    /// Markers off, CRC on (the default MPA-4.4-5 requires), MULPDU 64768, offset 0.
    fn default() -> Self {
        FramerConfig {
            markers: false,
            crc: true,
            mulpdu: MAX_ULPDU_LEN,
            stream_offset: 0,
        }
    }
}

/// Why the framer refused to emit an FPDU. Nothing was written and the stream offset did not
/// move, so the caller may retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum FramerError {
    /// The output buffer is shorter than the FPDU; `needed` octets are required.
    #[error("MPA framer: output buffer too small ({needed} octets needed)")]
    OutputTooSmall {
        /// Wire length of the FPDU at the current position.
        needed: usize,
    },
    /// The ULPDU is longer than the current MULPDU or than 64768 octets (MPA-3-5, MPA-3-7).
    #[error("MPA framer: ULPDU of {len} octets exceeds MULPDU {max}")]
    UlpduTooLong {
        /// Length of the offered ULPDU.
        len: usize,
        /// The largest length accepted.
        max: usize,
    },
}

/// The transmit framer of one half connection.
#[derive(Debug, Clone)]
pub struct Framer {
    markers: bool,
    crc: bool,
    crc_fn: Crc32cFn,
    /// MULPDU, at most 64768 (`clamp_mulpdu`): 16 bits, so that the fast paths' bound
    /// on a ULPDU's length is known to the compiler without a clamp of its own.
    mulpdu: u16,
    stream_offset: u64,
    fpdus: u64,
    ulpdu_octets: u64,
    markers_sent: u64,
}

impl Framer {
    /// A framer for the given settings.
    pub fn new(config: FramerConfig) -> Framer {
        Framer {
            markers: config.markers,
            crc: config.crc,
            crc_fn: crc32c_append,
            mulpdu: clamp_mulpdu(config.mulpdu),
            stream_offset: config.stream_offset,
            fpdus: 0,
            ulpdu_octets: 0,
            markers_sent: 0,
        }
    }

    /// This framer with `f` computing the CRC32c of FPDUs without markers (those with
    /// markers use the `crc32c` crate over long blocks).
    pub fn with_crc32c(mut self, f: Crc32cFn) -> Framer {
        self.crc_fn = f;
        self
    }

    /// True if markers are inserted.
    pub fn markers(&self) -> bool {
        self.markers
    }

    /// True if the CRC32c is generated (else the field is zero).
    pub fn crc(&self) -> bool {
        self.crc
    }

    /// The current MULPDU: the largest ULPDU [`emit`](Self::emit) accepts (MPA-3-2).
    pub fn max_ulpdu_len(&self) -> usize {
        usize::from(self.mulpdu)
    }

    /// Changes MULPDU, e.g. after an EMSS change or to fill the rest of a segment
    /// (MPA-4.5-3, MPA-4.5-4), clamped to `128..=64768` (MPA-3-4, MPA-4.5-6, MPA-4.5-7).
    /// Use [`fpdu::mulpdu`] to derive it from an EMSS. Packing a small FPDU into the room
    /// left in a segment needs no MULPDU change: check [`fpdu_wire_len`](Self::fpdu_wire_len)
    /// against the room instead.
    pub fn set_max_ulpdu_len(&mut self, mulpdu: usize) {
        self.mulpdu = clamp_mulpdu(mulpdu);
    }

    /// Sets MULPDU from an effective MSS with the marker-aware formula of mpa-08 §4.5
    /// (MPA-4.5-1, MPA-4.5-2, MPA-4.5-6).
    pub fn set_emss(&mut self, emss: usize) {
        // Already clamped; the clamp only narrows it to the field.
        self.mulpdu = clamp_mulpdu(fpdu::mulpdu(emss, self.markers));
    }

    /// Stream offset (from the start of FPDU mode) of the next octet to be emitted.
    pub fn stream_offset(&self) -> u64 {
        self.stream_offset
    }

    /// FPDUs emitted so far.
    pub fn fpdus(&self) -> u64 {
        self.fpdus
    }

    /// ULPDU octets emitted so far.
    pub fn ulpdu_octets(&self) -> u64 {
        self.ulpdu_octets
    }

    /// Markers emitted so far.
    pub fn markers_sent(&self) -> u64 {
        self.markers_sent
    }

    /// Exactly how many octets an FPDU carrying `ulpdu_len` ULPDU octets takes if it is the
    /// next one emitted (markers depend on the current position).
    #[inline]
    pub fn fpdu_wire_len(&self, ulpdu_len: usize) -> usize {
        fpdu::fpdu_wire_len(self.stream_offset, ulpdu_len, self.markers)
    }

    /// Frames one ULPDU, gathered from `ulpdu` (its slices concatenated), into the front of
    /// `out` and returns the number of octets written (= [`fpdu_wire_len`](Self::fpdu_wire_len)).
    ///
    /// Writes ULPDU_Length, the ULPDU, zero pad, the CRC (least significant octet first, or
    /// zeros when CRC is off) and, if markers are on, a marker at every 512th stream octet
    /// with FPDUPTR pointing back to this FPDU's ULPDU_Length, or 0 for a marker directly in
    /// front of it (MPA-4.1-1, MPA-4.1-2, MPA-4.3-2, MPA-4.3-3, MPA-4.3-5, MPA-4.3-9,
    /// MPA-4.3-11, MPA-4.4-15, MPA-4.4-16, MPA-4.4-17, MPA-4.4-18). The CRC is computed
    /// while copying. Octets of `out` past the FPDU are left untouched.
    ///
    /// The slices may be empty and their number is free; an empty list frames a zero-length
    /// ULPDU.
    pub fn emit(&mut self, ulpdu: &[&[u8]], out: &mut [u8]) -> Result<usize, FramerError> {
        let mut len: usize = 0;
        for part in ulpdu {
            len = len.saturating_add(part.len());
        }
        if len > usize::from(self.mulpdu) {
            return Err(FramerError::UlpduTooLong {
                len,
                max: usize::from(self.mulpdu),
            });
        }
        let needed = self.fpdu_wire_len(len);
        let Some(out) = out.get_mut(..needed) else {
            return Err(FramerError::OutputTooSmall { needed });
        };
        if needed == fpdu::fpdu_len(len) {
            // No marker falls inside this FPDU (always so with markers off): write the
            // fields in place and take the CRC in one pass over the covered octets, without
            // the per-slice marker bookkeeping of `Writer`.
            self.emit_plain(ulpdu, len, out);
            return Ok(needed);
        }

        let mut w = Writer {
            out,
            at: 0,
            pos: self.stream_offset,
            fpdu_start: None,
            crc: 0,
            crc_done: 0,
            crc_on: self.crc,
            markers: self.markers,
            markers_written: 0,
        };
        // `len <= 64768` so it fits the 16-bit field (MPA-3-5).
        w.put(&(len as u16).to_be_bytes());
        for part in ulpdu {
            w.put(part);
        }
        w.put(&[0u8; 3][..fpdu::pad_len(len)]);
        // A marker due right where the CRC starts is still part of this FPDU (MPA-4.4-16).
        w.marker_if_due();
        w.crc_flush();
        let crc = if self.crc { w.crc } else { 0 };
        // The CRC field itself is not covered. (With a stream offset that is not a multiple
        // of 4 a marker could fall inside it; it is then inserted but not covered, exactly
        // as the deframer expects. Conforming streams never do this.)
        w.crc_on = false;
        w.put(&crc_to_wire(crc));
        let written = w.at;
        let markers_written = w.markers_written;
        debug_assert_eq!(written, needed);

        self.stream_offset = self.stream_offset.wrapping_add(written as u64);
        self.fpdus += 1;
        self.ulpdu_octets += len as u64;
        self.markers_sent += markers_written;
        Ok(written)
    }
}

impl Framer {
    /// Frames the ULPDU `hdr` followed by `payload_len` octets that the caller has already
    /// written in place, at `out[2 + hdr.len()..][..payload_len]` (right behind the
    /// ULPDU_Length field and the header): writes ULPDU_Length, the header, the pad and the
    /// CRC around the payload and returns the FPDU's length, exactly as [`Framer::emit`]
    /// would have framed the same octets (MPA-4.1-1, MPA-4.1-2, MPA-4.4-15).
    ///
    /// This lets a sender copy the payload once, from wherever it lives straight into the
    /// transmit buffer, instead of gathering it into a slice first. It applies only when
    /// no marker falls inside the FPDU (always so with markers off); otherwise, and on any
    /// error, it returns `Ok(None)` or the error having changed nothing, and the caller
    /// uses [`Framer::emit`] (the payload positions then depend on the markers).
    pub fn emit_in_place(
        &mut self,
        hdr: &[u8],
        payload_len: usize,
        out: &mut [u8],
    ) -> Result<Option<usize>, FramerError> {
        let len = hdr.len().saturating_add(payload_len);
        // MULPDU is 16 bits (at most 64768): the compiler sees that the FPDU arithmetic
        // below cannot wrap, and drops the bounds checks that assume it might.
        if len > usize::from(self.mulpdu) {
            return Err(FramerError::UlpduTooLong {
                len,
                max: usize::from(self.mulpdu),
            });
        }
        // `fpdu_wire_len(len)` is this FPDU's length exactly when no marker falls inside
        // it (always so with markers off: markers go only into a stream whose receiver
        // asked for them, MPA-4.3-1, MPA-4.3-2).
        let needed = super::fpdu_len_of(len);
        if self.markers && fpdu::markers_in_fpdu(self.stream_offset, needed) != 0 {
            return Ok(None);
        }
        let Some(out) = out.get_mut(..needed) else {
            return Err(FramerError::OutputTooSmall { needed });
        };
        // Nothing fails from here on. The bookkeeping goes first, so that little is kept
        // across the CRC call.
        self.stream_offset = self.stream_offset.wrapping_add(needed as u64);
        self.fpdus += 1;
        self.ulpdu_octets += len as u64;
        // `out` is the FPDU of a ULPDU of `len <= MULPDU <= 64768` octets: what
        // `frame_in_place` asserts holds.
        fill_in_place(hdr, len, self.crc.then_some(self.crc_fn), out);
        Ok(Some(needed))
    }

    /// Accounts for the next FPDU, of the ULPDU `hdr_len` + `payload_len` octets, without
    /// writing it: the caller frames it later, as often as it must be sent, with
    /// [`frame_in_place`] (a sender that transmits from registered memory builds each FPDU
    /// in the frame that carries it, and again for a retransmission). Returns its length,
    /// what [`Framer::emit_in_place`] would have written; `Ok(None)`, having changed
    /// nothing, when a marker falls inside the FPDU (the caller then uses
    /// [`Framer::emit`]); the MULPDU error as `emit_in_place`.
    pub fn reserve_in_place(
        &mut self,
        hdr_len: usize,
        payload_len: usize,
    ) -> Result<Option<usize>, FramerError> {
        let len = hdr_len.saturating_add(payload_len);
        if len > usize::from(self.mulpdu) {
            return Err(FramerError::UlpduTooLong {
                len,
                max: usize::from(self.mulpdu),
            });
        }
        let needed = self.fpdu_wire_len(len);
        if needed != fpdu::fpdu_len(len) {
            return Ok(None);
        }
        self.stream_offset = self.stream_offset.wrapping_add(needed as u64);
        self.fpdus += 1;
        self.ulpdu_octets += len as u64;
        Ok(Some(needed))
    }
}

/// Writes the fields of one marker-free FPDU around its payload, which the caller has
/// already written at `out[2 + hdr.len()..][..payload_len]`: ULPDU_Length, the header, the
/// zero pad and the CRC32c (computed by `crc`; zeros when it is `None`) over all of it (MPA-4.1-1,
/// MPA-4.1-2, MPA-4.4-15). `out` must be exactly the FPDU, `fpdu_len(hdr.len() +
/// payload_len)` octets, of a ULPDU no longer than 64768 octets (MPA-3-5). The framer's
/// bookkeeping is [`Framer::reserve_in_place`] or [`Framer::emit_in_place`].
///
/// # Panics
/// If `out` is not exactly that long (a caller's bug).
#[inline]
pub fn frame_in_place(hdr: &[u8], payload_len: usize, crc: Option<Crc32cFn>, out: &mut [u8]) {
    let len = check_fpdu(hdr, payload_len, out);
    fill_in_place(hdr, len, crc, out);
}

/// [`frame_in_place`] once its checks are done: `out` is exactly the FPDU of a ULPDU of
/// `len` octets (`len <= 64768`), `hdr` and then the payload already in place.
#[inline]
fn fill_in_place(hdr: &[u8], len: usize, crc: Option<Crc32cFn>, out: &mut [u8]) {
    // The pad (0 to 3 octets, MPA-4.1-2) and the CRC field behind it, zeroed with one
    // 4-octet store; the CRC is written over its part below.
    let pad_at = fpdu::ULPDU_LENGTH_LEN + len;
    out[pad_at..pad_at + fpdu::CRC_LEN].copy_from_slice(&[0; fpdu::CRC_LEN]);
    let (covered, crc_field) = fields_before_payload(hdr, len, out);
    let crc = crc.map_or(0, |f| f(0, covered));
    crc_field.copy_from_slice(&crc_to_wire(crc));
}

/// Checks that `out` is exactly the FPDU of a ULPDU of `hdr` and `payload_len` octets and
/// returns the ULPDU length.
///
/// # Panics
/// If `out` is not that FPDU, or the ULPDU is longer than 64768 octets (a caller's bug).
#[inline]
fn check_fpdu(hdr: &[u8], payload_len: usize, out: &[u8]) -> usize {
    check_fpdu_len(hdr.len(), payload_len, out)
}

/// [`check_fpdu`] for a header of `hdr_len` octets.
#[inline]
fn check_fpdu_len(hdr_len: usize, payload_len: usize, out: &[u8]) -> usize {
    let len = hdr_len + payload_len;
    assert!(
        len <= MAX_ULPDU_LEN && out.len() == fpdu::fpdu_len(len),
        "framing in place: the output is not the FPDU"
    );
    len
}

/// Writes ULPDU_Length and the header of the FPDU `out` of a ULPDU of `len` octets and
/// returns the covered octets and the CRC field. The caller has checked `out`
/// ([`check_fpdu`]).
#[inline]
fn fields_before_payload<'o>(
    hdr: &[u8],
    len: usize,
    out: &'o mut [u8],
) -> (&'o mut [u8], &'o mut [u8]) {
    let (covered, crc_field) = out.split_at_mut(out.len() - fpdu::CRC_LEN);
    // `len <= 64768` so it fits the 16-bit field (MPA-3-5).
    length_and_header(
        &mut covered[..fpdu::ULPDU_LENGTH_LEN + hdr.len()],
        len as u16,
        hdr,
    );
    (covered, crc_field)
}

/// Writes ULPDU_Length `len` and then `hdr` into `to` (`2 + hdr.len()` octets). A bare
/// tagged or untagged DDP header (14 or 18 octets) goes with the length in whole 8-octet
/// words, the first made of the length and the header's first six octets in a register:
/// the CRC and the TCP checksum read these octets back as 8-octet words right away, and a
/// load that spans two earlier stores (a 2-octet length and a header copy) cannot take its
/// value from them and waits until both reach the cache (a store-forwarding stall, on the
/// path of every FPDU this framer writes; [`frame_around_head`]'s caller writes its own in
/// the same words). Other headers: the length, then the header ([`copy_long_header`]).
#[inline]
fn length_and_header(to: &mut [u8], len: u16, hdr: &[u8]) {
    let words = |to: &mut [u8], hdr: &[u8]| {
        let head = u64::from_be_bytes(hdr[..8].try_into().unwrap_or([0; 8]));
        let first = u64::from(len) << 48 | head >> 16;
        to[..8].copy_from_slice(&first.to_be_bytes());
        to[8..].copy_from_slice(&hdr[6..]);
    };
    match hdr.len() {
        TAGGED_HEADER_LEN => words(
            &mut to[..fpdu::ULPDU_LENGTH_LEN + TAGGED_HEADER_LEN],
            &hdr[..TAGGED_HEADER_LEN],
        ),
        UNTAGGED_HEADER_LEN => words(
            &mut to[..fpdu::ULPDU_LENGTH_LEN + UNTAGGED_HEADER_LEN],
            &hdr[..UNTAGGED_HEADER_LEN],
        ),
        _ => {
            let (length, rest) = to.split_at_mut(fpdu::ULPDU_LENGTH_LEN);
            length.copy_from_slice(&len.to_be_bytes());
            copy_long_header(rest, hdr);
        }
    }
}

/// [`length_and_header`]'s copy of a header with RDMAP octets. Not inlined: inlined, its
/// `memcpy` would be merged with the bare headers' fixed-size copies into one `memcpy` of
/// `hdr.len()` octets.
#[inline(never)]
fn copy_long_header(to: &mut [u8], hdr: &[u8]) {
    to.copy_from_slice(hdr);
}

/// [`frame_in_place`] for a payload written by the caller in between: ULPDU_Length and the
/// header first, then `write(payload, crc)` writes the payload at its place
/// (`out[2 + hdr.len()..][..payload_len]`), then the zero pad and the CRC field. With the
/// CRC on, `crc` is the CRC32c over ULPDU_Length and the header (`None` with it off), and
/// `write` may return it extended over the payload ([`crc32c_append`]'s convention), taken
/// in the pass that writes the payload, so that nothing reads it again; returning `None`
/// leaves that to this function. An error of `write` is returned as is, the FPDU
/// incomplete. Same contract as [`frame_in_place`] otherwise.
///
/// # Panics
/// As [`frame_in_place`].
#[inline]
pub fn frame_around<E>(
    hdr: &[u8],
    payload_len: usize,
    crc: Option<Crc32cFn>,
    out: &mut [u8],
    write: impl FnOnce(&mut [u8], Option<u32>) -> Result<Option<u32>, E>,
) -> Result<(), E> {
    frame_around_head(
        hdr.len(),
        payload_len,
        crc,
        out,
        |to, len| length_and_header(to, len, hdr),
        write,
    )
}

/// [`frame_around`] for a header the caller writes: `head(to, len)` writes ULPDU_Length
/// `len` (big-endian, MPA-4.1-1) and a DDP header of `hdr_len` octets into `to`, exactly
/// `2 + hdr_len` octets, before anything reads them. For a caller that derives the header
/// in registers: one built on the stack and handed over as octets is read back with wide
/// loads that span its narrow stores, and no store forwards to such a load (a
/// store-forwarding stall). What `head` leaves in `to` is framed as it is. Same contract
/// as [`frame_around`] otherwise.
///
/// # Panics
/// As [`frame_in_place`].
#[inline]
pub fn frame_around_head<E>(
    hdr_len: usize,
    payload_len: usize,
    crc: Option<Crc32cFn>,
    out: &mut [u8],
    head: impl FnOnce(&mut [u8], u16),
    write: impl FnOnce(&mut [u8], Option<u32>) -> Result<Option<u32>, E>,
) -> Result<(), E> {
    let len = check_fpdu_len(hdr_len, payload_len, out);
    let (covered, crc_field) = out.split_at_mut(out.len() - fpdu::CRC_LEN);
    let (head_octets, rest) = covered.split_at_mut(fpdu::ULPDU_LENGTH_LEN + hdr_len);
    // `len <= 64768` so it fits the 16-bit field (MPA-3-5).
    head(head_octets, len as u16);
    let head = &*head_octets;
    let (payload, pad) = rest.split_at_mut(payload_len);
    let head_crc = crc.map(|f| f(0, head));
    let after = write(payload, head_crc)?;
    zero_pad(pad);
    let value = match (crc, head_crc) {
        (Some(f), Some(c)) => {
            let c = after.unwrap_or_else(|| f(c, payload));
            f(c, pad)
        }
        _ => 0,
    };
    crc_field.copy_from_slice(&crc_to_wire(value));
    Ok(())
}

/// Once this many covered octets are pending, the CRC catches up over them while they are
/// still in cache. Markers cut the copy into runs of at most 508 octets, and CRC32c is much
/// faster over long spans (the `crc32c` crate interleaves three streams over 768 octets and
/// more), so the CRC runs over blocks of the output rather than over each run.
const CRC_BLOCK: usize = 16 * 1024;

/// Zeroes the pad of an FPDU (MPA-4.1-2), 0 to 3 octets, with plain stores: `fill` calls
/// `memset`, some twenty instructions for these few octets (none at all for no pad).
#[inline]
fn zero_pad(pad: &mut [u8]) {
    match pad {
        [] => {}
        [a] => *a = 0,
        [a, b] => {
            *a = 0;
            *b = 0;
        }
        [a, b, c] => {
            *a = 0;
            *b = 0;
            *c = 0;
        }
        _ => pad.fill(0),
    }
}

// `clamp_mulpdu`'s result fits its 16 bits.
const _: () = assert!(MAX_ULPDU_LEN <= u16::MAX as usize);

fn clamp_mulpdu(mulpdu: usize) -> u16 {
    mulpdu.clamp(MIN_MULPDU, MAX_ULPDU_LEN) as u16
}

impl Framer {
    /// The marker-free case of [`Framer::emit`]: `out` is exactly the FPDU
    /// (`fpdu_len(len)` octets) and no marker position falls inside it.
    fn emit_plain(&mut self, ulpdu: &[&[u8]], len: usize, out: &mut [u8]) {
        let (covered, crc_field) = out.split_at_mut(out.len() - fpdu::CRC_LEN);
        covered[..2].copy_from_slice(&(len as u16).to_be_bytes());
        let mut at = 2;
        for part in ulpdu {
            covered[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        zero_pad(&mut covered[at..]);
        let crc = if self.crc {
            (self.crc_fn)(0, covered)
        } else {
            0
        };
        crc_field.copy_from_slice(&crc_to_wire(crc));
        self.stream_offset = self.stream_offset.wrapping_add(out.len() as u64);
        self.fpdus += 1;
        self.ulpdu_octets += len as u64;
    }
}

/// Copies FPDU content into the output, inserting markers at their stream positions; the
/// CRC follows the copy block by block over the written output (markers included).
struct Writer<'o> {
    out: &'o mut [u8],
    at: usize,
    pos: u64,
    /// Stream offset of this FPDU's ULPDU_Length field, once its first octet is written.
    fpdu_start: Option<u64>,
    crc: u32,
    /// Output octets `..crc_done` are already in `crc`.
    crc_done: usize,
    crc_on: bool,
    markers: bool,
    markers_written: u64,
}

impl Writer<'_> {
    fn marker_if_due(&mut self) {
        if !self.markers || !fpdu::is_marker_offset(self.pos) {
            return;
        }
        // FPDUPTR: distance back to ULPDU_Length; 0 if the marker precedes it (MPA-4.3-11).
        let distance = match self.fpdu_start {
            Some(start) => self.pos.wrapping_sub(start) as usize,
            None => 0,
        };
        let bytes = MarkerRepr::for_distance(distance).to_bytes();
        self.raw(&bytes);
        self.markers_written += 1;
    }

    fn raw(&mut self, data: &[u8]) {
        let end = self.at + data.len();
        self.out[self.at..end].copy_from_slice(data);
        self.at = end;
        self.pos = self.pos.wrapping_add(data.len() as u64);
        if self.at - self.crc_done >= CRC_BLOCK {
            self.crc_flush();
        }
    }

    /// Brings the CRC up to date with everything written so far.
    fn crc_flush(&mut self) {
        if self.crc_on {
            self.crc = crc32c_append(self.crc, &self.out[self.crc_done..self.at]);
        }
        self.crc_done = self.at;
    }

    fn put(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.markers {
                self.marker_if_due();
            }
            if self.fpdu_start.is_none() {
                self.fpdu_start = Some(self.pos);
            }
            let run = if self.markers {
                data.len().min(fpdu::octets_to_next_marker(self.pos).max(1))
            } else {
                data.len()
            };
            // After a marker the next one is 508 octets away, so `run` is never 0 here;
            // `max(1)` only guards the arithmetic.
            let (head, tail) = data.split_at(run);
            self.raw(head);
            data = tail;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// WIRE-FORMATS §7.4 vector 1 (mpa-08 Figure 5): first FPDU, leading marker, CRC on.
    #[test]
    fn figure_5_first_fpdu_with_leading_marker() {
        let mut f = Framer::new(FramerConfig {
            markers: true,
            ..FramerConfig::default()
        });
        let mut ulpdu = [0u8; 42];
        ulpdu[..2].copy_from_slice(&[0x41, 0x43]);
        ulpdu[13] = 1; // MSN 1
        let mut out = [0xEEu8; 60];
        let n = f.emit(&[&ulpdu[..10], &ulpdu[10..]], &mut out).unwrap();
        assert_eq!(n, 52);
        assert_eq!(&out[..6], &[0, 0, 0, 0, 0x00, 0x2a]);
        assert_eq!(&out[48..52], &[0x52, 0x23, 0x99, 0x83]);
        assert_eq!(out[52], 0xEE, "nothing written past the FPDU");
        assert_eq!(f.stream_offset(), 52);
        assert_eq!(f.markers_sent(), 1);
    }

    /// `emit_in_place` writes exactly what `emit` writes, CRC on and off, markers off and
    /// on (where no marker falls inside), and declines, changing nothing, when one would.
    #[test]
    fn emit_in_place_matches_emit() {
        for (markers, crc) in [(false, true), (false, false), (true, true), (true, false)] {
            let cfg = FramerConfig {
                markers,
                crc,
                ..FramerConfig::default()
            };
            let (mut a, mut b) = (Framer::new(cfg), Framer::new(cfg));
            let hdr: Vec<u8> = (0..14u8).collect();
            let mut declined = 0;
            for plen in [0usize, 1, 3, 64, 100, 250, 491, 700, 1440] {
                let payload: Vec<u8> = (0..plen).map(|i| (i * 7 + plen) as u8).collect();
                let mut want = vec![0xEEu8; 2000];
                let mut got = vec![0xEEu8; 2000];
                got[2 + hdr.len()..][..plen].copy_from_slice(&payload);
                let before = b.stream_offset();
                match b.emit_in_place(&hdr, plen, &mut got).unwrap() {
                    Some(n) => {
                        let m = a.emit(&[&hdr, &payload], &mut want).unwrap();
                        assert_eq!(n, m);
                        assert_eq!(got, want, "markers {markers} crc {crc} len {plen}");
                    }
                    None => {
                        assert!(markers);
                        assert_eq!(b.stream_offset(), before);
                        declined += 1;
                        // Both framers send this one the ordinary way.
                        a.emit(&[&hdr, &payload], &mut want).unwrap();
                        b.emit(&[&hdr, &payload], &mut got).unwrap();
                    }
                }
                assert_eq!(a.stream_offset(), b.stream_offset());
                assert_eq!(a.fpdus(), b.fpdus());
            }
            assert_eq!(declined > 0, markers, "markers {markers}");
        }
    }

    /// `emit_in_place` (and `frame_in_place`) write what `emit` writes for headers of every
    /// length, the DDP ones (14, 18) and others, and every pad length, over an output that
    /// is not zeroed beforehand.
    #[test]
    fn in_place_matches_emit_for_every_header_length() {
        for hlen in [0usize, 1, 2, 13, 14, 15, 17, 18, 19, 22, 46, 70] {
            for plen in 0..8usize {
                let cfg = FramerConfig::default();
                let (mut a, mut b) = (Framer::new(cfg), Framer::new(cfg));
                let hdr: Vec<u8> = (0..hlen).map(|i| (i * 11 + 1) as u8).collect();
                let payload: Vec<u8> = (0..plen).map(|i| (i * 5 + 200) as u8).collect();
                let mut want = vec![0xEEu8; 128];
                let mut got = vec![0xEEu8; 128];
                got[2 + hlen..][..plen].copy_from_slice(&payload);
                let n = b.emit_in_place(&hdr, plen, &mut got).unwrap().unwrap();
                assert_eq!(a.emit(&[&hdr, &payload], &mut want), Ok(n));
                assert_eq!(got, want, "header {hlen}, payload {plen}");
                let mut framed = vec![0xEEu8; n];
                framed[2 + hlen..][..plen].copy_from_slice(&payload);
                let f: Crc32cFn = crc32c_append;
                frame_in_place(&hdr, plen, Some(f), &mut framed);
                assert_eq!(framed[..], want[..n], "header {hlen}, payload {plen}");
            }
        }
    }

    /// `reserve_in_place` then `frame_in_place` (a FPDU built later, in the frame) writes
    /// exactly what `emit` writes and advances the framer alike; with a marker inside it
    /// declines, changing nothing; over MULPDU it fails as `emit` does.
    #[test]
    fn reserve_then_frame_in_place_matches_emit() {
        for (markers, crc) in [(false, true), (false, false), (true, true)] {
            let cfg = FramerConfig {
                markers,
                crc,
                ..FramerConfig::default()
            };
            let (mut a, mut b) = (Framer::new(cfg), Framer::new(cfg));
            let hdr: Vec<u8> = (0..18u8).map(|i| i.wrapping_mul(29)).collect();
            let mut declined = 0;
            for plen in [0usize, 1, 2, 3, 64, 491, 700, 1440, 8940] {
                let payload: Vec<u8> = (0..plen).map(|i| (i * 13 + plen) as u8).collect();
                let mut want = vec![0xEEu8; 10_000];
                let before = b.stream_offset();
                match b.reserve_in_place(hdr.len(), plen).unwrap() {
                    Some(n) => {
                        let mut got = vec![0xAAu8; n];
                        got[2 + hdr.len()..][..plen].copy_from_slice(&payload);
                        let f: Crc32cFn = crate::wire::fpdu::crc32c_append;
                        frame_in_place(&hdr, plen, crc.then_some(f), &mut got);
                        let m = a.emit(&[&hdr, &payload], &mut want).unwrap();
                        assert_eq!(n, m);
                        assert_eq!(got[..], want[..m], "markers {markers} crc {crc} len {plen}");
                        // frame_around: the payload written by the closure, its CRC taken
                        // there (as the engine's fused copy does) or left to the framer.
                        for own_crc in [false, true] {
                            let mut around = vec![0xAAu8; n];
                            frame_around(&hdr, plen, crc.then_some(f), &mut around, |p, c| {
                                assert_eq!(c.is_some(), crc);
                                p.copy_from_slice(&payload);
                                Ok::<_, ()>(c.filter(|_| own_crc).map(|c| f(c, &payload)))
                            })
                            .unwrap();
                            assert_eq!(around, got, "frame_around, own CRC {own_crc}, len {plen}");
                            // frame_around_head: the caller's head writer gets the ULPDU
                            // length and the exact head octets, and its octets are framed.
                            let mut by_head = vec![0xAAu8; n];
                            frame_around_head(
                                hdr.len(),
                                plen,
                                crc.then_some(f),
                                &mut by_head,
                                |to, len| {
                                    assert_eq!((to.len(), usize::from(len)), (2 + 18, 18 + plen));
                                    to[..2].copy_from_slice(&len.to_be_bytes());
                                    to[2..].copy_from_slice(&hdr);
                                },
                                |p, c| {
                                    p.copy_from_slice(&payload);
                                    Ok::<_, ()>(c.filter(|_| own_crc).map(|c| f(c, &payload)))
                                },
                            )
                            .unwrap();
                            assert_eq!(by_head, got, "frame_around_head, len {plen}");
                        }
                    }
                    None => {
                        assert!(markers);
                        assert_eq!(b.stream_offset(), before);
                        declined += 1;
                        a.emit(&[&hdr, &payload], &mut want).unwrap();
                        b.emit(&[&hdr, &payload], &mut want).unwrap();
                    }
                }
                assert_eq!(a.stream_offset(), b.stream_offset());
                assert_eq!(a.fpdus(), b.fpdus());
                assert_eq!(a.ulpdu_octets(), b.ulpdu_octets());
            }
            assert_eq!(declined > 0, markers, "markers {markers}");
        }
        let mut f = Framer::new(FramerConfig {
            mulpdu: 200,
            ..FramerConfig::default()
        });
        assert_eq!(
            f.reserve_in_place(14, 187),
            Err(FramerError::UlpduTooLong { len: 201, max: 200 })
        );
        assert_eq!(f.stream_offset(), 0);
    }

    #[test]
    fn errors_leave_state_untouched() {
        let mut f = Framer::new(FramerConfig {
            mulpdu: 200,
            ..FramerConfig::default()
        });
        let big = [0u8; 201];
        assert_eq!(
            f.emit(&[&big], &mut [0u8; 400]),
            Err(FramerError::UlpduTooLong { len: 201, max: 200 })
        );
        assert_eq!(
            f.emit(&[&big[..14]], &mut [0u8; 19]),
            Err(FramerError::OutputTooSmall { needed: 20 })
        );
        assert_eq!(f.stream_offset(), 0);
        assert_eq!(f.fpdus(), 0);
        f.set_max_ulpdu_len(1_000_000);
        assert_eq!(f.max_ulpdu_len(), MAX_ULPDU_LEN);
        // MPA-4.5-7: never below 128, even for the room left in a segment.
        f.set_max_ulpdu_len(40);
        assert_eq!(f.max_ulpdu_len(), MIN_MULPDU);
        assert_eq!(f.emit(&[&big[..128]], &mut [0u8; 140]), Ok(136));
        f.set_emss(1460);
        assert_eq!(f.max_ulpdu_len(), 1454);
    }

    /// `emit_in_place` and `reserve_in_place` take a ULPDU of exactly MULPDU octets and
    /// refuse one more (MPA-3-2), with the default MULPDU, one set below it and one clamped
    /// down from above 64768 (MPA-3-5); the refusal changes nothing.
    #[test]
    fn in_place_refuses_exactly_past_mulpdu() {
        for (set, max) in [
            (None, MAX_ULPDU_LEN),
            (Some(200), 200),
            (Some(1 << 40), MAX_ULPDU_LEN),
        ] {
            let mut f = Framer::new(FramerConfig::default());
            if let Some(m) = set {
                f.set_max_ulpdu_len(m);
            }
            let mut out = vec![0u8; fpdu::fpdu_len(max + 1)];
            let too_long = Err(FramerError::UlpduTooLong { len: max + 1, max });
            assert_eq!(f.emit_in_place(&[0; 14], max - 13, &mut out), too_long);
            assert_eq!(f.reserve_in_place(14, max - 13), too_long);
            assert_eq!((f.stream_offset(), f.fpdus()), (0, 0));
            let n = fpdu::fpdu_len(max);
            assert_eq!(f.emit_in_place(&[0; 14], max - 14, &mut out), Ok(Some(n)));
            assert_eq!(f.reserve_in_place(14, max - 14), Ok(Some(n)));
            assert_eq!((f.stream_offset(), f.fpdus()), (2 * n as u64, 2));
        }
    }

    /// MPA-4.1-4 / MPA-4.4-13: with CRC off the field is present and zero.
    #[test]
    fn crc_off_sends_zero_field() {
        let mut f = Framer::new(FramerConfig {
            crc: false,
            ..FramerConfig::default()
        });
        let mut out = [0xEEu8; 12];
        assert_eq!(f.emit(&[b"abc"], &mut out).unwrap(), 12);
        assert_eq!(out, [0, 3, b'a', b'b', b'c', 0, 0, 0, 0, 0, 0, 0]);
    }
}
