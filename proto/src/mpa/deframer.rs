//! The MPA receive deframer: TCP byte stream in, validated ULPDUs out.
//!
//! Sans-IO and resumable at any byte split: the caller hands over the in-order TCP payload
//! in whatever chunks it has and calls [`Deframer::poll`] until it yields no ULPDU:
//!
//! ```
//! use warpcore_proto::mpa::deframer::{Deframer, DeframerConfig};
//!
//! let mut d = Deframer::new(DeframerConfig { markers: false, crc: false, ..Default::default() });
//! // Two FPDUs ("ab" and "c", CRC fields unchecked), split in the middle of the second.
//! let stream = [0, 2, b'a', b'b', 0, 0, 0, 0, 0, 1, b'c', 0, 0, 0, 0, 0];
//! let mut seen = Vec::new();
//! for chunk in [&stream[..10], &stream[10..]] {
//!     let mut input = chunk;
//!     loop {
//!         let (consumed, ulpdu) = d.poll(input).expect("valid stream");
//!         input = &input[consumed..];
//!         match ulpdu {
//!             Some(ulpdu) => seen.push(ulpdu.to_vec()),
//!             None => break, // all of `input` consumed and buffered
//!         }
//!     }
//! }
//! assert_eq!(seen, [b"ab".to_vec(), b"c".to_vec()]);
//! ```
//!
//! What it does (mpa-08 §4-§6, §8):
//! - finds FPDU boundaries from the ULPDU_Length chain (MPA-5.2-1, MPA-6-3, MPA-6-4) and
//!   never depends on TCP segment boundaries (MPA-5.1-5, MPA-A.4-1);
//! - when this side asked for markers, strips them and checks every marker's FPDUPTR against
//!   the FPDU start the length chain gives (MPA-4.3-3, MPA-4.3-11, MPA-5.2-2, MPA-8-3,
//!   MPA-8-6, MPA-8-8), ignoring the reserved field and the two low FPDUPTR bits (MPA-4.2-3,
//!   MPA-4.2-5);
//! - when CRCs were negotiated, recomputes the CRC32c over the same octets the sender covered,
//!   markers included (MPA-4.4-15 to MPA-4.4-21, MPA-6-2), or, for an FPDU that is the whole
//!   input of [`Deframer::poll_digest`], checks it through the input's CRC32c that the caller
//!   took in the pass that verified the TCP checksum; when they were not, it never looks
//!   at the CRC field (MPA-4.1-4, MPA-7.1.1-11, MPA-7.1.1-14; WIRE-FORMATS §7.2 (c));
//! - hands out only whole, validated ULPDUs, never markers, length, pad or CRC (MPA-3-8,
//!   MPA-4.3-12, MPA-4.3-13, MPA-4.3-14, MPA-6-1);
//! - after the first error it is poisoned: every later `poll` returns the same error and no
//!   further ULPDU is delivered on this half connection (MPA-8-12). It never closes anything
//!   itself (MPA-8-13): the caller decides, typically after sending a Terminate with
//!   [`MpaError::terminate_code`].
//!
//! Zero copy: when the ULPDU lies contiguous in the input chunk (no marker inside it) and the
//! rest of its FPDU (pad, CRC) is in the same chunk, the ULPDU is returned borrowed from the
//! input ([`Ulpdu::Borrowed`]) and only the CRC pass touches the payload (none at all when
//! [`Deframer::poll_digest`]'s digest checks it). Otherwise the ULPDU is assembled in a
//! reassembly buffer, grown on demand to the longest ULPDU seen ([`Ulpdu::Reassembled`]).
//! Either way the CRC is computed in one call per FPDU and input chunk, over the contiguous
//! covered span (markers included, since they are covered too), never octet by octet or
//! field by field.
//!
//! Fast path: between FPDUs, when the whole next FPDU is at the front of the input and no
//! marker falls inside it (every FPDU of an MPA-aligned sender, ours or siw), it is checked
//! and delivered in one step (length, one CRC call, the borrowed ULPDU) instead of field by
//! field; anything else, every error included, takes the general path, which decides it the
//! same way (`fast_path_and_octet_by_octet_agree` in `tests/mpa_framing.rs`).
//!
//! Error codes: a CRC mismatch is [`MpaError::CrcMismatch`] (code 2). A marker that
//! disagrees with the length chain is [`MpaError::MarkerMismatch`] (code 3); with CRCs on it
//! is reported only once the FPDU's CRC has been found valid, as MPA-8-3 defines code 3 for a
//! valid CRC (a bad CRC wins). A ULPDU_Length above the configured maximum is reported as
//! [`MpaError::MarkerMismatch`] too, at once: the length chain cannot be followed, which is
//! a framing error, and MPA has no separate code for it (mpa-08 §8). [`Deframer::fault`]
//! tells the three cases apart.

use core::fmt;
use core::ops::Deref;

use crate::error::MpaError;
use crate::wire::fpdu::{
    self, crc32c_append, crc_from_wire, Crc32cFn, Marker, CRC_LEN, MARKER_LEN, MAX_ULPDU_LEN,
    ULPDU_LENGTH_LEN,
};

/// Receive-side settings, fixed when the MPA negotiation completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeframerConfig {
    /// Expect markers: true iff **this** side asked for them (M = 1 in the frame it sent;
    /// MPA-7.1.1-7, MPA-7.1.1-8).
    pub markers: bool,
    /// Check the CRC: true iff either startup frame had C = 1 (MPA-7.1.1-13). When false the
    /// CRC field is never checked (MPA-7.1.1-11).
    pub crc: bool,
    /// The largest ULPDU_Length accepted, and the size of the reassembly buffer. Normally
    /// [`MAX_ULPDU_LEN`] (64768, MPA-3-5); values above 65535 (the field's range) are
    /// treated as 65535.
    pub max_ulpdu_len: usize,
    /// Stream offset, counted from the first octet of FPDU mode, of the first octet that will
    /// be passed in: 0 for a connection that just finished its MPA startup. It places the
    /// markers (at multiples of 512, MPA-4.3-8); it should be a multiple of 4.
    pub stream_offset: u64,
}

impl Default for DeframerConfig {
    /// Markers off, CRC on (MPA-4.4-5), maximum 64768, offset 0.
    fn default() -> Self {
        DeframerConfig {
            markers: false,
            crc: true,
            max_ulpdu_len: MAX_ULPDU_LEN,
            stream_offset: 0,
        }
    }
}

/// A validated ULPDU (one DDP segment), borrowed from the caller's input when it was
/// contiguous there, else from the deframer's reassembly buffer. Dereferences to `[u8]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ulpdu<'a, 'b> {
    /// The ULPDU as it lay in the input chunk (zero copy).
    Borrowed(&'a [u8]),
    /// The ULPDU assembled from several chunks or from around markers.
    Reassembled(&'b [u8]),
}

impl Ulpdu<'_, '_> {
    /// The ULPDU octets.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        match *self {
            Ulpdu::Borrowed(s) => s,
            Ulpdu::Reassembled(s) => s,
        }
    }

    /// True if the octets are borrowed from the input (no copy was made).
    #[inline]
    pub fn is_borrowed(&self) -> bool {
        matches!(self, Ulpdu::Borrowed(_))
    }
}

impl Deref for Ulpdu<'_, '_> {
    type Target = [u8];
    #[inline]
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl AsRef<[u8]> for Ulpdu<'_, '_> {
    fn as_ref(&self) -> &[u8] {
        self.as_slice()
    }
}

/// What exactly went wrong, for diagnostics (capture decoders, logs). Each maps to the
/// [`MpaError`] that [`Deframer::poll`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum DeframeFault {
    /// The CRC field does not match the covered octets.
    #[error("MPA CRC mismatch: field {received:#010x}, computed {computed:#010x}")]
    Crc {
        /// CRC value in the field (decoded least significant octet first).
        received: u32,
        /// CRC computed over the covered octets.
        computed: u32,
    },
    /// A marker's FPDUPTR disagrees with the FPDU start found from the length chain.
    #[error("MPA marker at stream offset {marker_offset}: FPDUPTR {received:#06x}, length chain gives {expected:#06x}")]
    Marker {
        /// Stream offset of the marker.
        marker_offset: u64,
        /// FPDUPTR the length chain implies (low two bits clear).
        expected: u16,
        /// FPDUPTR received (low two bits cleared).
        received: u16,
    },
    /// ULPDU_Length exceeds the configured maximum.
    #[error("MPA ULPDU_Length {len} exceeds the maximum {max}")]
    UlpduTooLong {
        /// The received ULPDU_Length.
        len: u16,
        /// The configured maximum.
        max: usize,
    },
}

impl DeframeFault {
    /// The MPA error reported for this fault (see the module documentation for the choice
    /// of code 3 for an oversized ULPDU_Length).
    pub const fn mpa_error(self) -> MpaError {
        match self {
            DeframeFault::Crc { .. } => MpaError::CrcMismatch,
            DeframeFault::Marker { .. } | DeframeFault::UlpduTooLong { .. } => {
                MpaError::MarkerMismatch
            }
        }
    }
}

/// Which part of the current FPDU the next (non-marker) octet belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Length,
    Ulpdu,
    Pad,
    Crc,
}

/// The receive deframer of one half connection.
pub struct Deframer {
    markers: bool,
    crc_on: bool,
    crc_fn: Crc32cFn,
    max_ulpdu_len: usize,

    /// Stream offset of the next input octet.
    pos: u64,
    field: Field,
    /// Octets of `field` received so far.
    got: usize,
    len_field: [u8; ULPDU_LENGTH_LEN],
    ulpdu_len: usize,
    crc_field: [u8; CRC_LEN],
    /// CRC32c over the covered octets of the current FPDU so far.
    crc: u32,
    /// Stream offset of the current FPDU's ULPDU_Length, once its first octet arrived.
    fpdu_start: Option<u64>,
    marker: [u8; MARKER_LEN],
    /// Octets of the current marker received; nonzero only while a marker is split.
    marker_got: usize,
    /// Some octet of the current FPDU (a leading marker included) has been consumed.
    started: bool,
    /// A marker of the current FPDU disagreed; reported once the CRC is known to be valid.
    marker_fault: Option<DeframeFault>,
    /// Reassembly buffer for ULPDUs that arrive in pieces: empty until the first one, then
    /// grown to the longest such ULPDU (never beyond `max_ulpdu_len`). A connection that
    /// receives whole FPDUs (an MPA-aligned sender) never allocates it.
    buf: Vec<u8>,

    fault: Option<DeframeFault>,
    last_fpdu_offset: u64,
    fpdus: u64,
    /// Of `fpdus`, those whose CRC a digest checked ([`Deframer::poll_digest`]).
    by_digest: u64,
    // Not next to `fpdus`: side by side, the fast path's two increments were merged
    // into one vector add that costs three times the instructions.
    markers_seen: u64,
    ulpdu_octets: u64,
}

impl fmt::Debug for Deframer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Deframer")
            .field("markers", &self.markers)
            .field("crc", &self.crc_on)
            .field("max_ulpdu_len", &self.max_ulpdu_len)
            .field("stream_offset", &self.pos)
            .field("field", &self.field)
            .field("got", &self.got)
            .field("fault", &self.fault)
            .field("fpdus", &self.fpdus)
            .finish_non_exhaustive()
    }
}

impl Deframer {
    /// A deframer for the given settings. It allocates nothing until a ULPDU arrives split
    /// across inputs; then its reassembly buffer grows to that ULPDU's length (at most
    /// `max_ulpdu_len` octets), so an idle connection costs only the deframer's fields.
    pub fn new(config: DeframerConfig) -> Deframer {
        let max_ulpdu_len = config.max_ulpdu_len.min(u16::MAX as usize);
        Deframer {
            markers: config.markers,
            crc_on: config.crc,
            crc_fn: crc32c_append,
            max_ulpdu_len,
            pos: config.stream_offset,
            field: Field::Length,
            got: 0,
            len_field: [0; ULPDU_LENGTH_LEN],
            ulpdu_len: 0,
            crc_field: [0; CRC_LEN],
            crc: 0,
            fpdu_start: None,
            marker: [0; MARKER_LEN],
            marker_got: 0,
            started: false,
            marker_fault: None,
            buf: Vec::new(),
            fault: None,
            last_fpdu_offset: 0,
            fpdus: 0,
            by_digest: 0,
            ulpdu_octets: 0,
            markers_seen: 0,
        }
    }

    /// This deframer with `f` checking the CRC32c of FPDUs that arrive whole (those that
    /// arrive in pieces, or with markers, use the `crc32c` crate as they come).
    pub fn with_crc32c(mut self, f: Crc32cFn) -> Deframer {
        self.crc_fn = f;
        self
    }

    /// Grows the reassembly buffer to hold the current ULPDU (checked against
    /// `max_ulpdu_len` when its length field arrived).
    fn reassembly_room(&mut self) {
        if self.buf.len() < self.ulpdu_len {
            self.buf.resize(self.ulpdu_len, 0);
        }
    }

    /// Octets the reassembly buffer holds now (0 until a ULPDU arrived in pieces).
    pub fn reassembly_capacity(&self) -> usize {
        self.buf.len()
    }

    /// Consumes octets from the front of `input` and returns how many it consumed, plus the
    /// next whole validated ULPDU if one completed.
    ///
    /// Call it again with the rest of the input (`&input[consumed..]`) until it returns
    /// `None`; `None` means all of `input` was consumed (buffered as part of an incomplete
    /// FPDU). A returned ULPDU must be used before the next call (it may point into the
    /// reassembly buffer). After an error every call returns that same error (MPA-8-12).
    #[inline]
    pub fn poll<'a, 'b>(
        &'b mut self,
        input: &'a [u8],
    ) -> Result<(usize, Option<Ulpdu<'a, 'b>>), MpaError> {
        self.poll_digest(input, None)
    }

    /// [`Deframer::poll`], given the CRC32c of the whole of `input` (`crc32c_append(0,
    /// input)`, from the pass that verified its TCP checksum): when `input` is exactly one
    /// whole FPDU, its CRC is checked against `digest` instead of being computed again
    /// (MPA-6-2 still holds: the ULPDU goes out only after the check). Appending the four
    /// octets of the CRC field maps CRC states one to one, so `digest` equals the CRC state
    /// after the covered octets and the field exactly when the covered octets' CRC is the
    /// field's value. A `digest` that is not the input's own makes a valid FPDU take the
    /// general path, which computes its CRC; it never makes an invalid one pass, as long as
    /// `digest` is the input's CRC32c.
    #[inline]
    pub fn poll_digest<'a, 'b>(
        &'b mut self,
        input: &'a [u8],
        digest: Option<u32>,
    ) -> Result<(usize, Option<Ulpdu<'a, 'b>>), MpaError> {
        if let Some((total, ulpdu, by_digest)) = self.whole_fpdu_at_front(input, digest) {
            // Fast path (the case of an MPA-aligned sender): one whole, valid FPDU at the
            // front of the input and none of it received before.
            self.by_digest += u64::from(by_digest);
            self.last_fpdu_offset = self.pos;
            self.pos = self.pos.wrapping_add(total as u64);
            self.fpdus += 1;
            self.ulpdu_octets += ulpdu.len() as u64;
            return Ok((total, Some(Ulpdu::Borrowed(ulpdu))));
        }
        self.poll_general(input)
    }

    /// [`Deframer::poll`] field by field, for everything the fast path does not take: an
    /// FPDU split across inputs or with a marker inside, every error, and a poisoned
    /// deframer. Kept out of line so that the fast path does not pay for its registers.
    #[inline(never)]
    fn poll_general<'a, 'b>(
        &'b mut self,
        input: &'a [u8],
    ) -> Result<(usize, Option<Ulpdu<'a, 'b>>), MpaError> {
        if let Some(fault) = self.fault {
            return Err(fault.mpa_error());
        }
        if input.is_empty() {
            return Ok((0, None));
        }
        let mut i = 0usize;
        // The ULPDU, if it is being taken from `input` without a copy.
        let mut borrowed: Option<(usize, usize)> = None;
        // Every stream octet from the FPDU's first octet (a leading marker included) up to
        // the first octet of its CRC field is covered by the CRC (MPA-4.4-15 to
        // MPA-4.4-17), markers and all. So the CRC is not computed field by field but over
        // each contiguous covered span of the input in one call: `covered_from` is where the
        // pending span starts, `None` once the CRC field has begun.
        let mut covered_from = if self.field == Field::Crc && self.got > 0 {
            None
        } else {
            Some(0)
        };
        loop {
            // Fields that are complete (or empty) need no input to move on.
            if self.field == Field::Ulpdu && self.got == self.ulpdu_len {
                self.field = Field::Pad;
                self.got = 0;
            }
            if self.field == Field::Pad && self.got == fpdu::pad_len(self.ulpdu_len) {
                self.field = Field::Crc;
                self.got = 0;
            }
            if self.field == Field::Crc && self.got == CRC_LEN {
                return self.finish(input, i, borrowed);
            }
            if i == input.len() {
                if let Some(from) = covered_from {
                    self.crc_span(&input[from..i]);
                }
                if let Some((start, len)) = borrowed {
                    // The FPDU continues in a later chunk: keep the ULPDU before the input
                    // goes away.
                    self.reassembly_room();
                    self.buf[..len].copy_from_slice(&input[start..start + len]);
                }
                return Ok((i, None));
            }
            let rest = &input[i..];
            self.started = true;

            // A marker, whole or split, wherever it falls (MPA-4.3-8).
            if self.markers && (self.marker_got > 0 || fpdu::is_marker_offset(self.pos)) {
                let n = (MARKER_LEN - self.marker_got).min(rest.len());
                // Covered (through `covered_from`) unless the CRC field has begun.
                self.marker[self.marker_got..self.marker_got + n].copy_from_slice(&rest[..n]);
                self.marker_got += n;
                self.advance(&mut i, n);
                if self.marker_got == MARKER_LEN {
                    self.marker_got = 0;
                    self.check_marker()?;
                }
                continue;
            }
            // Octets available before the next marker (never 0 here: a due marker was taken
            // above).
            let avail = if self.markers {
                rest.len().min(fpdu::octets_to_next_marker(self.pos))
            } else {
                rest.len()
            };

            match self.field {
                Field::Length => {
                    if self.got == 0 {
                        self.fpdu_start = Some(self.pos);
                    }
                    let n = (ULPDU_LENGTH_LEN - self.got).min(avail);
                    self.len_field[self.got..self.got + n].copy_from_slice(&rest[..n]);
                    self.got += n;
                    self.advance(&mut i, n);
                    if self.got == ULPDU_LENGTH_LEN {
                        let len = u16::from_be_bytes(self.len_field);
                        if len as usize > self.max_ulpdu_len {
                            return Err(self.fail(DeframeFault::UlpduTooLong {
                                len,
                                max: self.max_ulpdu_len,
                            }));
                        }
                        self.ulpdu_len = len as usize;
                        self.field = Field::Ulpdu;
                        self.got = 0;
                    }
                }
                Field::Ulpdu => {
                    let want = self.ulpdu_len - self.got;
                    if self.got == 0 && avail >= want {
                        // Whole ULPDU contiguous in the input: take it in place; the CRC
                        // pass over the covered span is the only pass over the payload.
                        borrowed = Some((i, want));
                        self.got = want;
                        self.advance(&mut i, want);
                    } else {
                        // Reassembly: one copy per run between markers or chunk ends.
                        let n = want.min(avail);
                        self.reassembly_room();
                        self.buf[self.got..self.got + n].copy_from_slice(&rest[..n]);
                        self.got += n;
                        self.advance(&mut i, n);
                    }
                }
                Field::Pad => {
                    // Pad content is ignored except by the CRC (MPA-4.1-3).
                    let n = (fpdu::pad_len(self.ulpdu_len) - self.got).min(avail);
                    self.got += n;
                    self.advance(&mut i, n);
                }
                Field::Crc => {
                    if let Some(from) = covered_from.take() {
                        self.crc_span(&input[from..i]);
                    }
                    let n = (CRC_LEN - self.got).min(avail);
                    self.crc_field[self.got..self.got + n].copy_from_slice(&rest[..n]);
                    self.got += n;
                    self.advance(&mut i, n);
                }
            }
        }
    }

    /// The length of the FPDU at the front of `input` and its ULPDU, when the fast path may
    /// take it: the deframer is between FPDUs (no octet of the next FPDU, not even its
    /// leading marker, taken yet), no marker falls inside the FPDU, the whole FPDU is in
    /// `input`, its ULPDU_Length is within the maximum and its CRC (if on) matches. Anything
    /// else (including every error) goes through the general path, which decides it the
    /// same way octet by octet. `digest`: the CRC32c of all of `input`
    /// ([`Deframer::poll_digest`]); the third value says whether it checked the CRC.
    #[inline]
    fn whole_fpdu_at_front<'a>(
        &self,
        input: &'a [u8],
        digest: Option<u32>,
    ) -> Option<(usize, &'a [u8], bool)> {
        // `started`: not even a leading marker of this FPDU may have been taken already,
        // since that marker is covered by the FPDU's CRC (MPA-4.4-17) and makes it "in an
        // FPDU" (a chunk that ended right after the marker; found by the deframer fuzzer).
        // Every octet the general path takes sets `started`, and only `finish` clears it,
        // along with the field state; so between FPDUs the rest of the state is at rest.
        // Every error is found inside an FPDU and `finish` does not clear `started` on
        // one, so a poisoned deframer is `started` too and goes to the general path, which
        // reports the error (MPA-8-12).
        if self.started {
            return None;
        }
        debug_assert!(self.field == Field::Length && self.got == 0 && self.marker_got == 0);
        debug_assert!(self.fault.is_none());
        let (&length, _) = input.split_first_chunk::<ULPDU_LENGTH_LEN>()?;
        let len = usize::from(u16::from_be_bytes(length));
        if len > self.max_ulpdu_len {
            return None;
        }
        let total = super::fpdu_len_of(len);
        if self.markers {
            let to_marker = fpdu::octets_to_next_marker(self.pos);
            if to_marker == 0 || to_marker < total {
                return None;
            }
        }
        let (fpdu, _) = input.split_at_checked(total)?;
        let (covered, field) = fpdu.split_last_chunk::<CRC_LEN>()?;
        // Sliced before the CRC call rather than after it: less is then kept across the
        // call in the caller's registers.
        let ulpdu = covered.get(ULPDU_LENGTH_LEN..ULPDU_LENGTH_LEN + len)?;
        let mut by_digest = false;
        if self.crc_on {
            let ok = match digest {
                // MPA-6-2: the covered octets' CRC is the field's, checked through the
                // input's CRC (`poll_digest`): four octets appended instead of the FPDU.
                // Only when the digest covers exactly this FPDU: with octets after it, four
                // of them could be chosen to make any digest match.
                Some(d) if total == input.len() => {
                    by_digest = true;
                    (self.crc_fn)(crc_from_wire(*field), field.as_slice()) == d
                }
                _ => crc_from_wire(*field) == (self.crc_fn)(0, covered),
            };
            if !ok {
                return None;
            }
        }
        Some((total, ulpdu, by_digest))
    }

    /// Extends the running CRC over covered octets (skipped when CRCs are off: the field is
    /// never checked then, so there is nothing to compute).
    #[inline]
    fn crc_span(&mut self, covered: &[u8]) {
        if self.crc_on {
            self.crc = crc32c_append(self.crc, covered);
        }
    }

    #[inline]
    fn advance(&mut self, i: &mut usize, n: usize) {
        *i += n;
        self.pos = self.pos.wrapping_add(n as u64);
    }

    fn fail(&mut self, fault: DeframeFault) -> MpaError {
        self.fault = Some(fault);
        fault.mpa_error()
    }

    /// Checks a complete marker against the length chain (MPA-8-3, MPA-8-6).
    fn check_marker(&mut self) -> Result<(), MpaError> {
        self.markers_seen += 1;
        let marker_offset = self.pos.wrapping_sub(MARKER_LEN as u64);
        // A marker in front of ULPDU_Length belongs to that FPDU and must be 0 (MPA-4.3-5,
        // MPA-4.3-11); any other points back to it (MPA-4.3-3, MPA-4.3-9, MPA-4.3-10).
        let distance = match self.fpdu_start {
            Some(start) => marker_offset.wrapping_sub(start),
            None => 0,
        };
        let expected = (distance as u16) & !3;
        let received = Marker::new_unchecked(&self.marker[..]).fpduptr();
        if expected != received {
            let fault = DeframeFault::Marker {
                marker_offset,
                expected,
                received,
            };
            if self.crc_on {
                // Code 3 presumes a valid CRC (MPA-8-3): decide at the end of the FPDU.
                if self.marker_fault.is_none() {
                    self.marker_fault = Some(fault);
                }
            } else {
                return Err(self.fail(fault));
            }
        }
        Ok(())
    }

    /// The CRC field is complete: validate and deliver.
    fn finish<'a, 'b>(
        &'b mut self,
        input: &'a [u8],
        consumed: usize,
        borrowed: Option<(usize, usize)>,
    ) -> Result<(usize, Option<Ulpdu<'a, 'b>>), MpaError> {
        if self.crc_on {
            let received = crc_from_wire(self.crc_field);
            if received != self.crc {
                return Err(self.fail(DeframeFault::Crc {
                    received,
                    computed: self.crc,
                }));
            }
        }
        if let Some(fault) = self.marker_fault {
            return Err(self.fail(fault));
        }
        let len = self.ulpdu_len;
        self.last_fpdu_offset = self.fpdu_start.unwrap_or(self.pos);
        self.fpdus += 1;
        self.ulpdu_octets += len as u64;
        self.field = Field::Length;
        self.got = 0;
        self.crc = 0;
        self.fpdu_start = None;
        self.ulpdu_len = 0;
        self.started = false;
        self.marker_fault = None;
        let ulpdu = match borrowed {
            Some((start, n)) => Ulpdu::Borrowed(&input[start..start + n]),
            None => Ulpdu::Reassembled(&self.buf[..len]),
        };
        Ok((consumed, Some(ulpdu)))
    }

    /// Stream offset (from the start of FPDU mode) of the next octet expected.
    pub fn stream_offset(&self) -> u64 {
        self.pos
    }

    /// Stream offset of the ULPDU_Length field of the FPDU most recently delivered (the
    /// sender's order, MPA-3-10); 0 before the first.
    pub fn last_fpdu_offset(&self) -> u64 {
        self.last_fpdu_offset
    }

    /// FPDUs delivered so far.
    pub fn fpdus(&self) -> u64 {
        self.fpdus
    }

    /// Of [`Deframer::fpdus`], those whose CRC was checked through the digest given to
    /// [`Deframer::poll_digest`] rather than computed here.
    pub fn fpdus_by_digest(&self) -> u64 {
        self.by_digest
    }

    /// ULPDU octets delivered so far.
    pub fn ulpdu_octets(&self) -> u64 {
        self.ulpdu_octets
    }

    /// Markers received and checked so far.
    pub fn markers_seen(&self) -> u64 {
        self.markers_seen
    }

    /// True if an FPDU is partly received (octets are buffered).
    pub fn in_fpdu(&self) -> bool {
        self.started
    }

    /// The error this deframer is poisoned with, if any.
    pub fn error(&self) -> Option<MpaError> {
        self.fault.map(DeframeFault::mpa_error)
    }

    /// The detailed cause of the error, if any.
    pub fn fault(&self) -> Option<DeframeFault> {
        self.fault
    }

    /// The configured maximum ULPDU_Length.
    pub fn max_ulpdu_len(&self) -> usize {
        self.max_ulpdu_len
    }
}
