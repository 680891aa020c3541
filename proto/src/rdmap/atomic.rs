//! RFC 7306 atomic operations as pure functions on a 64-bit word (RFC 7306 §5.1;
//! WIRE-FORMATS §5.2).
//!
//! The engine reads the target word (in the target memory's byte order, RFC 7306 §5.1.1),
//! calls [`execute`], writes the new value back under whatever lock gives it atomicity
//! (EXT-5-1, EXT-5.3-1) and answers with an Atomic Response carrying the original value
//! ([`response`]). The checks that must happen *before* memory is touched are the AOpCode
//! ([`check_request`]), the STag, rights and range ([`handle_atomic_request`]) and the
//! alignment of the *address* the Tagged Offset resolves to ([`check_alignment`], which
//! only the engine, holding the registration, can apply), so a failing request never
//! modifies memory (EXT-5.1.1-3, EXT-5.1.2-3, EXT-5.1.2-4).

use crate::error::RdmapError;
use crate::rdmap::{check_remote_access, Access, AccessRegion, StagFault};
use crate::wire::rdmap::{AtomicOpcode, AtomicRequestRepr, AtomicResponseRepr};

/// The alignment RFC 7306 requires of an atomic target: 64 bits (EXT-5.2.1-2).
pub const ATOMIC_ALIGN: u64 = 8;

/// The length of an atomic target in octets.
pub const ATOMIC_LEN: u32 = 8;

/// Masked, lane-wise addition (RFC 7306 §5.1.1, FetchAdd).
///
/// A 1 bit in `mask` marks the most significant bit of a lane: the carry out of that bit is
/// dropped instead of flowing into the next lane. `mask == 0` is a plain 64-bit wrapping add
/// (the carry out of bit 63 is always dropped). Lanes need not be of equal width; any set
/// of bits may be marked.
///
/// With the marked bits cleared in both operands, the carry into a marked bit is at most 1
/// and nothing carries out of it; XOR-ing the operands' marked bits back in gives that bit's
/// sum. Lower bits are unaffected, so this equals the bit-serial pseudocode of §5.1.1 (the
/// tests check it against a literal transcription).
pub const fn masked_add(orig: u64, add: u64, mask: u64) -> u64 {
    ((orig & !mask).wrapping_add(add & !mask)) ^ ((orig ^ add) & mask)
}

/// FetchAdd on `word`: stores the masked sum and returns the original value (RFC 7306
/// §5.1.1).
pub fn fetch_add(word: &mut u64, add_data: u64, add_mask: u64) -> u64 {
    let orig = *word;
    *word = masked_add(orig, add_data, add_mask);
    orig
}

/// CmpSwap on `word`: if `(compare_data ^ orig) & compare_mask == 0` the bits selected by
/// `swap_mask` are replaced by those of `swap_data`, otherwise `word` is unchanged; returns
/// the original value either way (RFC 7306 §5.1.2, EXT-5.1.2-1).
pub fn cmp_swap(
    word: &mut u64,
    swap_data: u64,
    swap_mask: u64,
    compare_data: u64,
    compare_mask: u64,
) -> u64 {
    let orig = *word;
    if (compare_data ^ orig) & compare_mask == 0 {
        *word = (orig & !swap_mask) | (swap_data & swap_mask);
    }
    orig
}

/// Checks the target alignment: the address a Remote Tagged Offset resolves to must be a
/// multiple of 8 (EXT-5.2.1-2).
///
/// A misaligned target is [`RdmapError::CatastrophicStream`], Terminate 0x0/0x2/0x07
/// (EXT-5.1.1-2, EXT-5.1.1-4, EXT-5.1.2-5, EXT-5.1.2-6, EXT-8.2-4, EXT-8.2-5).
///
/// Apply it to the address, not to the Tagged Offset: RFC 7306 §5.2.1 lets the TO "start
/// at an arbitrary offset" as long as it represents an 8-aligned "ULP Buffer address", and
/// whether a TO maps to an aligned address depends on the registration (its base TO need
/// not be congruent to its address mod 8). warpcore-engine applies this rule through its
/// region guard (`MrGuard::atomic`).
pub const fn check_alignment(addr: u64) -> Result<(), RdmapError> {
    if addr.is_multiple_of(ATOMIC_ALIGN) {
        Ok(())
    } else {
        Err(RdmapError::CatastrophicStream)
    }
}

/// The check on an Atomic Request that needs no memory lookup: a supported AOpCode.
/// Returns the operation.
///
/// An AOpCode RFC 7306 does not define (0x1, which was Swap in the superseded draft, and
/// 0x3-0xF) must surface an error at the responder (EXT-5.2.1-7) but no code is given
/// (WIRE-FORMATS §5.2 open point). We report [`RdmapError::UnexpectedOpcode`] (0x0/0x2/0x06):
/// the sub-opcode is part of the operation code of the message, and "unexpected opcode" is
/// the defined code whose meaning is closest. STag validity, bounds and access rights
/// (remote read and write on 8 octets at `remote_to`) follow in [`handle_atomic_request`].
/// The Tagged Offset itself is not checked for alignment (RFC 7306 §5.2.1: it "MAY start at
/// an arbitrary offset"); the address it resolves to is ([`check_alignment`]).
pub const fn check_request(req: &AtomicRequestRepr) -> Result<AtomicOpcode, RdmapError> {
    match req.op() {
        Some(op) => Ok(op),
        None => Err(RdmapError::UnexpectedOpcode),
    }
}

/// The responder checks on an inbound Atomic Request that need the STag table, in order:
/// the AOpCode ([`check_request`]), then the target STag, access rights (remote read and
/// write) and the 8-octet range ([`check_remote_access`], the remote protection codes of
/// WIRE-FORMATS §4.5). `lookup` resolves the Remote STag against this stream's STag table.
/// Returns the operation to [`execute`]; the alignment of the resolved address
/// ([`check_alignment`]) is the caller's, before it touches the word.
///
/// IRD accounting is separate ([`crate::rdmap::InboundReadQueue::admit`]; Atomic Requests
/// share QN 1 with Read Requests, EXT-5.2-1). The Terminate for a failure carries the DDP
/// header but no RDMA header (EXT-8.1-2; [`crate::rdmap::terminate`]).
pub fn handle_atomic_request(
    req: &AtomicRequestRepr,
    lookup: impl FnOnce(u32) -> Result<AccessRegion, StagFault>,
) -> Result<AtomicOpcode, RdmapError> {
    let op = check_request(req)?;
    check_remote_access(
        lookup(req.remote_stag),
        req.remote_to,
        u64::from(ATOMIC_LEN),
        Access::RemoteAtomic,
    )?;
    Ok(op)
}

/// Runs the operation of a request on `word` and returns the original value. Call only
/// after [`check_request`] succeeded; on error `word` is left untouched.
pub fn execute(req: &AtomicRequestRepr, word: &mut u64) -> Result<u64, RdmapError> {
    Ok(match check_request(req)? {
        AtomicOpcode::FetchAdd => fetch_add(word, req.add_swap_data, req.add_swap_mask),
        AtomicOpcode::CmpSwap => cmp_swap(
            word,
            req.add_swap_data,
            req.add_swap_mask,
            req.compare_data,
            req.compare_mask,
        ),
    })
}

/// The Atomic Response header answering `req` with the original value (RFC 7306 §5.2.2):
/// it echoes the Request Identifier.
pub const fn response(req: &AtomicRequestRepr, orig_value: u64) -> AtomicResponseRepr {
    AtomicResponseRepr {
        orig_request_id: req.request_id,
        orig_value,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A literal transcription of the RFC 7306 §5.1.1 pseudocode.
    fn reference_fetch_add(orig: u64, add: u64, mask: u64) -> u64 {
        let mut carry = 0u64;
        let mut out = 0u64;
        for bit in 0..64 {
            let loc = 1u64 << bit;
            let v1 = (orig & loc) >> bit;
            let v2 = (add & loc) >> bit;
            let sum = carry + v1 + v2;
            carry = (sum & 2) >> 1;
            if sum & 1 != 0 {
                out |= loc;
            }
            carry = u64::from(carry != 0 && mask & loc == 0);
        }
        out
    }

    #[test]
    fn masked_add_matches_the_pseudocode_on_edge_values() {
        let vals = [
            0,
            1,
            0x7F,
            0x80,
            0xFF,
            0xFFFF,
            0x8000_0000,
            u64::MAX,
            0x8080_8080_8080_8080,
            0x0123_4567_89AB_CDEF,
        ];
        for &a in &vals {
            for &b in &vals {
                for &m in &vals {
                    assert_eq!(masked_add(a, b, m), reference_fetch_add(a, b, m));
                }
            }
        }
    }
}
