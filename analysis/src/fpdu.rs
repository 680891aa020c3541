//! Driving `warpcore-proto`'s MPA deframer over a reassembled stream and recording where
//! each ULPDU lay, so the analysis can map FPDUs back to frames and sequence numbers.
//!
//! This is only the loop around [`Deframer::poll`] (chunked input, offsets, the poisoned
//! state after an error); the deframing itself (length chain, markers, pad, CRC32c) is
//! proto's.

pub use warpcore_proto::mpa::deframer::DeframeFault;
use warpcore_proto::mpa::deframer::Deframer;
pub use warpcore_proto::mpa::deframer::DeframerConfig;

/// One thing the deframer produced, with its place in the FPDU-mode stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FpduEvent {
    /// A whole, validated ULPDU.
    Ulpdu {
        /// Stream offset (from the start of FPDU mode) where its FPDU began.
        offset: u64,
        /// Stream offset just after its FPDU (after the CRC).
        end: u64,
        /// The ULPDU octets (DDP segment).
        ulpdu: Vec<u8>,
        /// `Some(true)` if a CRC was checked and matched; `None` if CRCs are off. (A CRC that
        /// does not match is an [`FpduEvent::Error`].)
        crc_ok: Option<bool>,
    },
    /// The deframer stopped on an error (MPA-8-12). After a CRC error decoding resumes at
    /// the next FPDU (see [`deframe`]); after any other error nothing more is decoded.
    Error {
        /// Stream offset where the failing FPDU began.
        offset: u64,
        /// Stream offset where the deframer stopped.
        end: u64,
        /// proto's diagnosis (`None` when the deframer gave only its error code).
        fault: Option<DeframeFault>,
        /// proto's description of the fault.
        detail: String,
    },
}

impl FpduEvent {
    /// Where the FPDU began.
    pub fn offset(&self) -> u64 {
        match self {
            FpduEvent::Ulpdu { offset, .. } | FpduEvent::Error { offset, .. } => *offset,
        }
    }

    /// Where it ended.
    pub fn end(&self) -> u64 {
        match self {
            FpduEvent::Ulpdu { end, .. } | FpduEvent::Error { end, .. } => *end,
        }
    }
}

/// The result of deframing one direction.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Deframed {
    /// ULPDUs (and at most one final error), in stream order.
    pub events: Vec<FpduEvent>,
    /// Octets after the last whole FPDU that did not make up a whole FPDU.
    pub trailing_octets: usize,
    /// True if the deframer stopped on an error.
    pub stopped: bool,
    /// How often decoding resumed after a CRC error with a fresh deframer at the next FPDU.
    pub resumed: usize,
}

/// Feeds `chunks` (consecutive pieces of one direction's FPDU-mode stream) to a fresh
/// deframer and collects what comes out. The result does not depend on how the stream is
/// split into chunks; the split tests rely on that.
///
/// After a CRC error decoding resumes with a new deframer right after the failed FPDU,
/// unless the previous resumption produced no valid FPDU (then the length chain is lost).
/// Marker errors and oversized lengths end decoding: the framing itself is in doubt.
pub fn deframe(config: DeframerConfig, chunks: &[&[u8]]) -> Deframed {
    let mut deframer = Deframer::new(config);
    let mut out = Deframed::default();
    // Stream offset (relative to the configured start) where the current FPDU began: the end
    // of the previous one.
    let base = config.stream_offset;
    let mut fpdu_start = 0u64;
    let mut consumed_total = 0u64;
    let mut resumed_without_success = false;
    'chunks: for chunk in chunks {
        let mut input = *chunk;
        loop {
            match deframer.poll(input) {
                Ok((consumed, ulpdu)) => {
                    input = input.get(consumed..).unwrap_or(&[]);
                    consumed_total += consumed as u64;
                    let Some(ulpdu) = ulpdu else { break };
                    out.events.push(FpduEvent::Ulpdu {
                        offset: fpdu_start,
                        end: consumed_total,
                        ulpdu: ulpdu.to_vec(),
                        crc_ok: config.crc.then_some(true),
                    });
                    fpdu_start = consumed_total;
                    resumed_without_success = false;
                }
                Err(error) => {
                    let fault = deframer.fault();
                    let detail = match fault {
                        Some(f) => f.to_string(),
                        None => error.to_string(),
                    };
                    let end = deframer.stream_offset().wrapping_sub(base);
                    out.events.push(FpduEvent::Error {
                        offset: fpdu_start,
                        end,
                        fault,
                        detail,
                    });
                    // An endpoint stops here (MPA-8-12). An observer can do better after a
                    // CRC error: the deframer stopped right after that FPDU's CRC field, and
                    // if only payload or CRC octets were damaged the length chain still
                    // holds, so a fresh deframer from there decodes the rest. If the length
                    // field was the damaged part the next FPDU fails too, and we stop.
                    let resumable =
                        matches!(fault, Some(DeframeFault::Crc { .. })) && !resumed_without_success;
                    let used = end.wrapping_sub(consumed_total);
                    if !resumable || used > input.len() as u64 {
                        out.stopped = true;
                        break 'chunks;
                    }
                    input = &input[used as usize..];
                    consumed_total = end;
                    fpdu_start = end;
                    deframer = Deframer::new(DeframerConfig {
                        stream_offset: base + end,
                        ..config
                    });
                    resumed_without_success = true;
                    out.resumed += 1;
                }
            }
        }
    }
    if !out.stopped {
        out.trailing_octets = (consumed_total - fpdu_start) as usize;
    }
    out
}
