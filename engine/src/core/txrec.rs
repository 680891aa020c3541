//! Transmit from registered memory (issue 12 item 3).
//!
//! An FPDU of at least [`EngineConfig::tx_from_memory_min`] payload octets is not copied
//! into the TCP's send buffer. [`Qp::tx_fpdus`] validates its sources (the same lookups and
//! bounds checks as a copy), advances the framer ([`Framer::reserve_in_place`]), records
//! here what the FPDU is made of (its DDP/RDMAP header, at most [`MAX_SGE`] pieces of
//! registered memory, the CRC setting) and queues it in TCP as an *external record* of its
//! wire length under a token ([`Stack::send_external_run`]). Each time TCP sends a
//! segment that carries it, first transmission or retransmission, the host calls
//! [`TxRecords::fill`] with the frame's payload space: the payload is copied from the
//! region straight into the frame (one copy, through [`MrGuard::copy_out_at`], so the
//! region's bounds and validity are checked at every copy and nothing outside it is ever
//! read) and framed around it ([`fpdu_frame_around_head`]): ULPDU_Length, header, pad and
//! CRC32c. Where the port does not compute the TCP checksum, the copy also sums the payload
//! for it and extends the CRC over it in the same pass
//! ([`MrGuard::copy_out_summed_crc_at`], [`crate::mem::crc::copy_sum_crc`]): each octet is
//! read once, and neither the host's Internet checksum nor the CRC reads it again. With the
//! checksum offloaded, the CRC runs over the copy just written, still in L1. An FPDU that
//! segments carry in parts is framed aside once and every part copied from there
//! ([`Aside`]): its parts then agree with its CRC whatever the region does meanwhile.
//!
//! Consecutive FPDUs of one message that the segmenter cuts in one transmit pass go as
//! one record, a *run* ([`Run`]): after the first, the equal FPDUs that fit the send
//! buffer, the pass's budget and [`RUN_MAX`], the message's shorter last one included
//! (so a pass may make several runs of one message). Runs of more than one FPDU are built
//! only without markers and from FPDUs with no ULP header octets. The record keeps the
//! first FPDU's header and the run's shape (payload of each FPDU, of the last, their
//! count); each FPDU's own header follows from the first's ([`run_header`]: TO or MO
//! advanced, L on the message's last FPDU; `TxRecord::put_head` derives it in registers
//! as it writes it), and TCP gets the run as one external record
//! with a record boundary after each FPDU ([`Stack::send_external_run`]), so segments are
//! cut between FPDUs as between any records (MPA-aligned; a bulk transfer's segment is one
//! FPDU, and a short last one may share a segment with the next record: `fill` writes
//! whatever FPDUs, or parts, a frame's piece covers). One record, one TCP entry and one
//! acknowledgement for a 64 KiB Write's 46 segments at MTU 1500, instead of 46 (`perf` of write_bw: the per-FPDU queueing was ~10 % of the sending
//! core, the records' ring ~0.7 MiB of its cache at a window of 128 such Writes).
//!
//! ```text
//! tx_fpdus ─ the run's FPDUs from the segmenter ─ queue: TxRecords::push (header, shape, pieces)
//!          ─ Stack::send_external_run(len, each FPDU's wire length, token)
//!                                                 ... TCP sends, loses, resends ...
//! Stack::poll_with_fill_pass / poll_transmit_fill ─ host emit ─ TxRecords::fill(conn, token, at, frame)
//!          ─ TxRecord::write (FPDU `at` names: its header, its part of the pieces)
//! ACK ─ Stack::take_acked_external ─ TxRecords::acked ─ SqEntry::unacked == 0 ─ completion
//! ```
//!
//! # Completion semantics (RDMAP-5.5-8: a Send or Write completes when its buffer may be
//! reused)
//! The buffer of a message sent this way is read again for every retransmission, so its
//! Send or Write completes only once TCP reports every such FPDU of it acknowledged
//! ([`SqEntry::unacked`]), after its last FPDU was queued; completions stay in submission
//! order. A message whose FPDUs were all copied completes when the last is queued, as
//! before. Read Responses complete nothing; their records only keep the region readable
//! under the remote Read's STag while TCP may resend them.
//!
//! # When the memory goes away
//! A region deregistered or invalidated while TCP may still resend from it cannot be read
//! ([`MrTable::lookup_local`] / [`MrTable::lookup_remote`] fail): `fill` returns false, the
//! host sends an RST in place of the segment and closes the connection, and
//! [`EngineCore::fail_unfillable`] reports the failure: the request's status is
//! [`WcStatus::LocalProtection`] and the QP fails with a local catastrophic error. Never
//! does a frame carry octets that were not read from the region. (Hardware RNICs do the
//! same: a retransmission through an invalidated STag fails the QP.) A Local Invalidate
//! posted behind such a request, naming an STag of its SGEs, is no such case: it waits for
//! the request's FPDUs to be acknowledged (`Qp::invalidates_unacked_source`).
//!
//! Records are kept per TCP connection (indexed by [`ConnId::slot`], generation-checked),
//! not per QP. A QP that lets its connection go while TCP still delivers it has TCP copy
//! what it still has to send of them into its send buffer ([`internalize`], through
//! [`TxRecords::fill`]) and its records forgotten: at a destroy or reset during a graceful
//! close (`release_conn`), and when its graceful close ends with the peer's FIN before the
//! peer acknowledged our Read Responses (`tx_close_if_drained` hands the connection to the
//! zombies and reports `Disconnected`): the zombie connection reads no region after the QP
//! let it go.
//! Where a copy fails and only Read Responses remain, their records stay and the zombie
//! resends from them. Stale records of a connection that is gone are dropped when its slot
//! is reused; they hold no memory of the regions, only STags and offsets.

use super::*;
use crate::mem::StreamId;
use warpcore_proto::mpa::framer::frame_around_head as fpdu_frame_around_head;
use warpcore_proto::wire::ddp::{self, DdpSegment};
use warpcore_tcp::csum;

/// One piece of registered memory an FPDU's payload is gathered from.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct MemPiece {
    pub to: u64,
    pub stag: u32,
    pub len: u32,
}

/// How the pieces are looked up: with local read access under the QP's PD (the payload
/// of a posted Send or Write) or with remote read access for the QP's stream (a Read
/// Response, RDMAP-5.2.1-12).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum PieceAccess {
    Local { pd: PdId },
    Remote { pd: PdId, stream: StreamId },
}

/// The guard of the region the last FPDU of a transmit pass was copied from, the STag it
/// was looked up under and how ([`PieceAccess`]): kept for the next FPDU, which nearly
/// always comes from the same region (the next segment of the same message), so that the
/// lookup is not repeated and, above all, the guard is not dropped right after each copy.
/// A guard's drop is a locked instruction, which waits until every earlier store has
/// reached the cache: right after a copy into a frame, the ~23 stores of 64 octets of an
/// MTU 1500 segment (`perf` of write_bw: the drop and the next lookup took ~2 % of the
/// sending core). Held for one transmit pass of the stack and dropped when it ends, as the
/// receive path's [`super::rx::RxHeld`] is: the pass runs no engine code but the fill, so
/// nothing of this core waits on it, and a deregistration or invalidation on another thread
/// waits at most one pass. Both passes hold one: the transmit-only pass
/// (`EngineCore::transmit`) and the stack poll's pass after its rx burst (`poll_stack`,
/// where a bulk transfer sends most of its segments, the ones each batch of ACKs lets
/// out), whose fill the stack makes only when it runs the pass
/// ([`Stack::poll_with_fill_pass`]), after every delivery of the burst: an idle loop sets
/// up and drops nothing. (Before, the poll's fill took and dropped a guard per segment: a
/// locked increment and decrement of the region's count each, ~3 % of the MTU 1500
/// sender.)
pub(super) type TxHeld<'m> = Option<(MrGuard<'m>, u32, PieceAccess)>;

/// The longest DDP/RDMAP header a record keeps: an untagged DDP header with its RDMAP
/// control fields (a Send's); a tagged one (a Write's, a Read Response's) is 14 octets.
/// Only those carry payload from registered memory; an FPDU with a longer header (none
/// today) is framed into the send buffer instead ([`queue`] returns `Ok(false)`). Kept
/// short so a record is two cache lines, not three: a bulk sender keeps one per run in flight.
pub(super) const RECORD_HDR_MAX: usize = warpcore_proto::wire::ddp::UNTAGGED_HEADER_LEN;

/// The most FPDUs one record's run holds (the transmit pass's budget,
/// [`EngineConfig::tx_budget_fpdus`], usually bounds a run first).
pub(super) const RUN_MAX: usize = 256;

/// What one external record is made of: a run of FPDUs of one message, consecutive in
/// it, each carrying `each` payload octets but the last, which carries the rest (one FPDU
/// when the payload is at most `each`). `hdr` is the first FPDU's DDP/RDMAP header; the
/// others' differ only in their TO (tagged) or MO (untagged), advanced by `each` an FPDU
/// (DDP-5.2-8, DDP-5.2-6), and in L, set on the last FPDU of a run that ends its message
/// (`ends_msg`, DDP-4.1-3) and on no other.
#[derive(Debug, Clone, Copy)]
pub(super) struct TxRecord {
    pub token: u64,
    pub hdr: [u8; RECORD_HDR_MAX],
    pub hdr_len: u8,
    pub crc: bool,
    /// The run's last FPDU ends the message (L set on it). For a run of one FPDU `hdr`
    /// already says so.
    pub ends_msg: bool,
    pub access: PieceAccess,
    pub pieces: [MemPiece; MAX_SGE],
    pub npieces: u8,
    /// Payload octets of each FPDU of the run but the last, and of the last (MULPDU is at
    /// most 64,768, MPA-3-5: 16 bits hold any).
    pub each: u16,
    pub last: u16,
    /// The length on the wire of each FPDU of the run but the last.
    pub each_wire: u16,
    /// FPDUs in the run (at least one).
    pub fpdus: u16,
    /// The SQ sequence number of the Send or Write these FPDUs belong to, plus one (0:
    /// none, a Read Response's): eight octets, not an `Option`'s sixteen, so that a record
    /// stays two cache lines. [`TxRecord::sq`], [`TxRecord::set_sq`].
    sq1: u64,
}

impl TxRecord {
    /// The record a new slot of a [`RecordRing`] holds until [`queue`] fills it in place
    /// (records are never built on the stack and then moved: a move reads back with wide
    /// loads what narrow stores just wrote, and no store forwards to such a load: it waits
    /// for every earlier store, the last frame's included; ~2 % of the MTU 1500 sender).
    const BLANK: TxRecord = TxRecord {
        token: 0,
        hdr: [0; RECORD_HDR_MAX],
        hdr_len: 0,
        crc: false,
        ends_msg: false,
        access: PieceAccess::Local { pd: PdId(0) },
        pieces: [MemPiece {
            to: 0,
            stag: 0,
            len: 0,
        }; MAX_SGE],
        npieces: 0,
        each: 0,
        last: 0,
        each_wire: 0,
        fpdus: 1,
        sq1: 0,
    };

    /// The SQ sequence number of the request the run belongs to, if any.
    #[inline]
    pub fn sq(&self) -> Option<u64> {
        self.sq1.checked_sub(1)
    }

    /// Sets [`TxRecord::sq`] (a sequence number below `u64::MAX`, as SQ numbers are).
    #[inline]
    pub fn set_sq(&mut self, sq: Option<u64>) {
        self.sq1 = sq.map_or(0, |q| q.wrapping_add(1));
    }

    /// FPDUs in the run: at least one.
    #[inline]
    fn fpdus(&self) -> usize {
        usize::from(self.fpdus.max(1))
    }

    /// FPDU `k`'s payload (of `n` in the run): its offset in the run's payload and its
    /// length.
    #[inline]
    fn fpdu_payload(&self, k: usize, n: usize) -> (usize, usize) {
        let each = usize::from(self.each);
        (
            k * each,
            if k + 1 == n {
                usize::from(self.last)
            } else {
                each
            },
        )
    }

    /// FPDU `k`'s length on the wire (of `n` in the run).
    #[inline]
    fn fpdu_wire_len(&self, k: usize, n: usize) -> usize {
        if k + 1 == n {
            fpdu::fpdu_len(usize::from(self.hdr_len) + usize::from(self.last))
        } else {
            usize::from(self.each_wire)
        }
    }

    /// The run's length on the wire: its FPDUs end to end (all but the last the same).
    fn wire_len(&self) -> usize {
        let n = self.fpdus();
        (n - 1) * usize::from(self.each_wire) + self.fpdu_wire_len(n - 1, n)
    }

    /// Writes ULPDU_Length `len` and FPDU `k`'s header ([`run_header`]; `skip` its payload's
    /// offset in the run) into `to` (`2 + hdr_len` octets). A bare tagged or untagged
    /// header, the only ones a run has, is derived in registers from the record's first
    /// header and written in the 8-octet words the CRC and the TCP checksum read back
    /// right away: `run_header`'s copy on the stack, with its narrow stores of the control
    /// octet and TO, was read back by 8-octet loads that span them, and no store forwards
    /// to such a load (a store-forwarding stall on every FPDU of a run, ~3 % of the MTU
    /// 1500 sender in `perf`). Other headers: `run_header`, then its octets.
    #[inline(always)]
    fn put_head(&self, (k, n): (usize, usize), skip: usize, to: &mut [u8], len: u16) {
        const T: u64 = 0x80 << 40;
        const L: u64 = 0x40 << 40;
        let hl = usize::from(self.hdr_len);
        let h = &self.hdr;
        // Octets 0..6 of the header in the low 48 bits (the control octet in bits 40..48),
        // ULPDU_Length above them.
        let w0 = u64::from_be_bytes([0, 0, h[0], h[1], h[2], h[3], h[4], h[5]]);
        // L: as the record has it in a run of one; else on the last FPDU of a run that
        // ends its message (DDP-4.1-3, DDP-4.1-4).
        let l = if n == 1 {
            w0 & L
        } else if k + 1 == n && self.ends_msg {
            L
        } else {
            0
        };
        let first = u64::from(len) << 48 | (w0 & !L) | l;
        // Octets 6..14: TO (tagged), or QN and MSN (untagged).
        let w1 = u64::from_be_bytes([h[6], h[7], h[8], h[9], h[10], h[11], h[12], h[13]]);
        let tagged = w0 & T != 0;
        if let (ddp::TAGGED_HEADER_LEN, true, Some((a, b))) =
            (hl, tagged, to.split_first_chunk_mut::<8>())
        {
            // TO advanced by the payload before this FPDU (DDP-5.2-8).
            *a = first.to_be_bytes();
            b.copy_from_slice(&w1.wrapping_add(skip as u64).to_be_bytes());
        } else if let (ddp::UNTAGGED_HEADER_LEN, false, Some((a, rest))) =
            (hl, tagged, to.split_first_chunk_mut::<8>())
        {
            // QN and MSN as they are, MO advanced (DDP-5.2-6).
            let mo = u32::from_be_bytes([h[14], h[15], h[16], h[17]]).wrapping_add(skip as u32);
            *a = first.to_be_bytes();
            rest[..8].copy_from_slice(&w1.to_be_bytes());
            rest[8..].copy_from_slice(&mo.to_be_bytes());
        } else {
            let hdr = run_header(h, hl, (k, n), skip, self.ends_msg);
            to[..2].copy_from_slice(&len.to_be_bytes());
            to[2..].copy_from_slice(&hdr[..hl]);
        }
    }

    /// The guard of `stag` looked up as this record's access says: the one `held` keeps if
    /// it is for the same STag and access, else a new lookup that replaces it (the old
    /// guard goes first: a failed lookup leaves none held). `None`: the STag no longer
    /// names memory this record may read.
    fn guard<'h, 'm>(
        &self,
        stag: u32,
        mrs: &'m MrTable,
        held: &'h mut TxHeld<'m>,
    ) -> Option<&'h MrGuard<'m>> {
        if !matches!(held, Some((_, s, how)) if *s == stag && *how == self.access) {
            *held = None;
            let g = match self.access {
                PieceAccess::Local { pd } => mrs.lookup_local(Stag(stag), pd, false),
                PieceAccess::Remote { pd, stream } => {
                    mrs.lookup_remote(Stag(stag), pd, stream, Access::REMOTE_READ)
                }
            };
            *held = Some((g.ok()?, stag, self.access));
        }
        held.as_ref().map(|(g, _, _)| g)
    }

    /// Whether FPDU `k`'s payload can still be read from registered memory, looked up and
    /// bounds-checked as [`Self::write`] does, without a copy: a part of an FPDU sent from
    /// its [`Aside`] is sent only while the memory it was read from is still there, as
    /// every copy checks (a region deregistered or invalidated since fails it the same
    /// way). `held` as for [`Self::write`].
    fn readable<'m>(&self, k: usize, mrs: &'m MrTable, held: &mut TxHeld<'m>) -> bool {
        let (skip, payload_len) = self.fpdu_payload(k, self.fpdus());
        let mut before = 0usize;
        for p in &self.pieces[..usize::from(self.npieces)] {
            let plen = p.len as usize;
            let from = skip.max(before);
            let to_end = (skip + payload_len).min(before + plen);
            let start = before;
            before += plen;
            if from >= to_end {
                continue;
            }
            let src_to = p.to + (from - start) as u64;
            let Some(g) = self.guard(p.stag, mrs, held) else {
                return false;
            };
            if g.bounds(src_to, to_end - from).is_err() {
                return false;
            }
        }
        true
    }

    /// Copies FPDU `k`'s payload from registered memory into `out` (exactly that FPDU) and
    /// frames it there. `None` if a piece cannot be read (nothing of the region is touched then);
    /// else, when `sum`, the unfolded Internet checksum sum of `out` (`csum::sum`), taken
    /// as the payload is copied and over the few framing octets: the TCP checksum never
    /// reads the payload again (issue 12 item 2's one touch per octet, on transmit). With
    /// the CRC on and `sum`, the copy extends the CRC32c too
    /// ([`MrGuard::copy_out_summed_crc_at`]): one pass over the payload for all three.
    /// `held`: the guard kept from the previous copy ([`TxHeld`]), used for a piece of
    /// the same STag looked up the same way, else replaced.
    fn write<'m>(
        &self,
        k: usize,
        mrs: &'m MrTable,
        held: &mut TxHeld<'m>,
        out: &mut [u8],
        sum: bool,
    ) -> Option<u64> {
        let n = self.fpdus();
        let hl = usize::from(self.hdr_len);
        let base = 2 + hl;
        let (skip, payload_len) = self.fpdu_payload(k, n);
        let mut total = 0u64;
        let crc: Option<fpdu::Crc32cFn> = self.crc.then_some(crate::mem::crc::crc32c_append);
        let head = |to: &mut [u8], len: u16| self.put_head((k, n), skip, to, len);
        fpdu_frame_around_head(hl, payload_len, crc, out, head, |payload, mut c| {
            // The pieces' octets `[skip, skip + payload_len)` of the run, in order.
            let (mut at, mut before) = (0, 0usize);
            for p in &self.pieces[..usize::from(self.npieces)] {
                let plen = p.len as usize;
                let from = skip.max(before);
                let to_end = (skip + payload_len).min(before + plen);
                before += plen;
                if from >= to_end {
                    continue;
                }
                let n = to_end - from;
                let src_to = p.to + (from - (before - plen)) as u64;
                let dst = payload.get_mut(at..at + n).ok_or(())?;
                let g = self.guard(p.stag, mrs, held).ok_or(())?;
                match (sum, c) {
                    (true, Some(cv)) => {
                        let (s, cv) = g.copy_out_summed_crc_at(src_to, dst, cv).map_err(|_| ())?;
                        total += csum::at_offset(s, base + at);
                        c = Some(cv);
                    }
                    (true, None) => {
                        let s = g.copy_out_summed_at(src_to, dst).map_err(|_| ())?;
                        total += csum::at_offset(s, base + at);
                    }
                    (false, _) => {
                        g.copy_out_at(src_to, dst).map_err(|_| ())?;
                        // The CRC over the copy while it is in L1.
                        c = c.map(|cv| crate::mem::crc::crc32c_append(cv, dst));
                    }
                }
                at += n;
            }
            if at != payload_len {
                return Err(());
            }
            Ok::<_, ()>(c)
        })
        .ok()?;
        if sum {
            // ULPDU_Length and the header at offset 0, the pad and CRC after the payload.
            let end = base + payload_len;
            total +=
                csum::sum_short(&out[..base]) + csum::at_offset(csum::sum_short(&out[end..]), end);
        }
        Some(total)
    }
}

/// The header of FPDU `k` of a run of `n` whose first FPDU has header `first[..hdr_len]`
/// and whose FPDUs before `k` carry `skip` payload octets: the first's with TO (tagged) or
/// MO (untagged) advanced by `skip` (the segmenter's DDP-5.2-8 and DDP-5.2-6, which the
/// message's checks keep from wrapping), and L set on the last FPDU of a run that ends its
/// message, on no other (DDP-4.1-3, DDP-4.1-4). A run of one keeps its header as it came.
pub(super) fn run_header(
    first: &[u8; RECORD_HDR_MAX],
    hdr_len: usize,
    (k, n): (usize, usize),
    skip: usize,
    ends_msg: bool,
) -> [u8; RECORD_HDR_MAX] {
    let mut h = *first;
    if n == 1 {
        return h;
    }
    let mut seg = DdpSegment::new_unchecked(&mut h[..hdr_len.min(RECORD_HDR_MAX)]);
    if seg.tagged() {
        if let Some(to) = seg.to() {
            seg.set_to(to.wrapping_add(skip as u64));
        }
    } else if let Some(mo) = seg.mo() {
        seg.set_mo(mo.wrapping_add(skip as u32));
    }
    seg.set_last(k + 1 == n && ends_msg);
    h
}

/// The records of one TCP connection.
#[derive(Debug)]
struct ConnRecords {
    conn: ConnId,
    next_token: u64,
    recs: RecordRing,
    /// Where the last fill ended: the record's token, the offset in its run after the
    /// FPDU written, and that FPDU's index. The next segment of a bulk transfer starts
    /// there: its FPDU is the next one, found without a division.
    after_fill: (u64, usize, usize),
    /// The FPDU last framed aside because a segment carried only part of it ([`Aside`]).
    aside: Aside,
}

/// An FPDU framed whole aside for segments that carry only part of it (a window smaller
/// than the FPDU with nothing in flight, a window probe): its token and index in the run,
/// and its octets. Every later part of the same FPDU, and every retransmission of a part,
/// is copied from here, not framed again from the region: the parts of one FPDU then come
/// from one read of the region and agree with the one CRC they end with, even when the
/// memory changed between them (the source of a Read Response, which the responder's
/// application may write at any time: no completion tells it when the response is read).
/// Framed again per part, an FPDU whose payload changed between two parts arrived torn,
/// its CRC taken over the second read, and the peer failed the stream for a CRC error
/// (MPA-8-2). A segment cuts an FPDU only where nothing is in
/// flight (or for a window probe, likewise), so the FPDUs cut are sent one after
/// another, each acknowledged before the next is cut: one aside per connection suffices.
/// A part is sent from here only while the memory is still readable as the copy read it
/// ([`TxRecord::readable`]): a region deregistered or invalidated since fails the part as
/// it fails a copy. Allocated at the first cut FPDU, given back by [`TxRecords::trim_idle`].
#[derive(Debug, Default)]
struct Aside {
    /// `(token, index)` of the FPDU in `octets`, `None` when they hold none.
    key: Option<(u64, usize)>,
    octets: Vec<u8>,
}

/// A FIFO of records that keeps its slots: [`RecordRing::push_slot`] hands out the slot of
/// a record dropped before, as it was, for the caller to overwrite, and a pop only moves
/// the head. A `VecDeque` wrote a whole blank record per push and moved each record out
/// per pop (3 % of the MTU 1500 sender in `perf` for the push alone). Slots are a power of
/// two, grown by doubling (new slots blank).
#[derive(Debug)]
struct RecordRing {
    slots: Vec<TxRecord>,
    head: usize,
    len: usize,
}

impl RecordRing {
    const fn new() -> RecordRing {
        RecordRing {
            slots: Vec::new(),
            head: 0,
            len: 0,
        }
    }

    #[inline]
    fn len(&self) -> usize {
        self.len
    }

    #[inline]
    fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// The slot of record `k` (0: the oldest), `k < len`.
    #[inline]
    fn index(&self, k: usize) -> usize {
        (self.head + k) & (self.slots.len() - 1)
    }

    /// A slot at the back, counted in: it holds whatever record was there before (or a
    /// blank one), and the caller writes every field it or a reader will read.
    #[inline]
    fn push_slot(&mut self) -> &mut TxRecord {
        if self.len == self.slots.len() {
            self.grow();
        }
        let i = self.index(self.len);
        self.len += 1;
        &mut self.slots[i]
    }

    #[cold]
    fn grow(&mut self) {
        // Oldest first, then double: the records keep their order from slot 0.
        self.slots.rotate_left(self.head);
        self.head = 0;
        let cap = (self.slots.len() * 2).max(16);
        self.slots.resize_with(cap, || TxRecord::BLANK);
    }

    /// Forgets the newest record.
    fn pop_back(&mut self) -> bool {
        if self.len == 0 {
            return false;
        }
        self.len -= 1;
        true
    }

    /// Forgets the oldest record.
    #[inline]
    fn pop_front(&mut self) {
        if self.len > 0 {
            self.head = self.index(1);
            self.len -= 1;
        }
    }

    #[inline]
    fn get(&self, k: usize) -> Option<&TxRecord> {
        (k < self.len).then(|| &self.slots[self.index(k)])
    }

    #[inline]
    fn front(&self) -> Option<&TxRecord> {
        self.get(0)
    }

    fn iter(&self) -> impl Iterator<Item = &TxRecord> + '_ {
        (0..self.len).map(|k| &self.slots[self.index(k)])
    }
}

/// Every external record of a core (module documentation).
#[derive(Debug)]
pub(super) struct TxRecords {
    by_conn: Vec<Option<ConnRecords>>,
    /// Connections whose record could not be written, with the request it belonged to.
    failed: Vec<(ConnId, Option<u64>)>,
}

impl TxRecords {
    pub fn new() -> TxRecords {
        TxRecords {
            by_conn: Vec::new(),
            failed: Vec::new(),
        }
    }

    /// The records of `conn`, emptied first if its slot held another connection's.
    fn of(&mut self, conn: ConnId) -> &mut ConnRecords {
        let slot = conn.slot();
        if self.by_conn.len() <= slot {
            self.by_conn.resize_with(slot + 1, || None);
        }
        let e = &mut self.by_conn[slot];
        if !e.as_ref().is_some_and(|r| r.conn == conn) {
            *e = Some(ConnRecords {
                conn,
                next_token: 1,
                recs: RecordRing::new(),
                after_fill: (0, 0, 0),
                aside: Aside::default(),
            });
        }
        match e {
            Some(r) => r,
            None => unreachable!("set above"),
        }
    }

    /// Adds a record for `conn` under a new token, and returns it to be filled in place,
    /// with its token (the caller queues the record in TCP under it, or takes it back with
    /// [`Self::unpush`]). Only the token is set: the slot holds an older record's fields
    /// ([`RecordRing::push_slot`]), every one of which [`queue`] writes.
    fn push_slot(&mut self, conn: ConnId) -> (&mut TxRecord, u64) {
        let r = self.of(conn);
        let token = r.next_token;
        r.next_token += 1;
        let rec = r.recs.push_slot();
        rec.token = token;
        (rec, token)
    }

    /// Takes back the record just pushed (TCP refused it); its token is given again, so
    /// that a connection's tokens stay consecutive (`fill` finds a record by subtraction).
    pub fn unpush(&mut self, conn: ConnId) {
        let r = self.of(conn);
        if r.recs.pop_back() {
            r.next_token -= 1;
        }
    }

    /// Records of `conn` not yet acknowledged.
    #[inline]
    pub fn outstanding(&self, conn: ConnId) -> usize {
        match self.by_conn.get(conn.slot()) {
            Some(Some(r)) if r.conn == conn => r.recs.len(),
            _ => 0,
        }
    }

    /// Whether a Read Response of `conn` sent from registered memory is not acknowledged
    /// yet: TCP may still read its source for a (re)transmission. An Atomic Response
    /// behind it waits ([`Qp::tx_fpdus`]): its atomic, executed when it starts, must not
    /// show in a Read Response requested before it (RFC 7306 §5.4 rule 8 and §7's
    /// table, EXT-5.2.2-6; departure 16). Walks the records (only with an Atomic
    /// Response owed).
    pub fn read_responses_unacked(&self, conn: ConnId) -> bool {
        match self.by_conn.get(conn.slot()) {
            Some(Some(r)) if r.conn == conn => r.recs.iter().any(|x| x.sq().is_none()),
            _ => false,
        }
    }

    /// Drops the records of `conn` up to token `upto` (acknowledged), calling `done` with
    /// the SQ sequence number of each that belonged to a request.
    pub fn acked(&mut self, conn: ConnId, upto: u64, mut done: impl FnMut(u64)) {
        let Some(Some(r)) = self.by_conn.get_mut(conn.slot()) else {
            return;
        };
        if r.conn != conn {
            return;
        }
        while let Some(x) = r.recs.front().filter(|x| x.token <= upto) {
            if let Some(seq) = x.sq() {
                done(seq);
            }
            r.recs.pop_front();
        }
        if r.aside.key.is_some_and(|(t, _)| t <= upto) {
            r.aside.key = None;
        }
    }

    /// Gives back the room of connections with nothing in flight that once had a window's
    /// worth (a record is 128 octets: thousands of connections must not each keep a
    /// bulk transfer's worth). Called by the core's sweep, not on the data path, so a
    /// connection that empties its queue at every message does not allocate each time.
    pub fn trim_idle(&mut self) {
        for r in self.by_conn.iter_mut().flatten() {
            if r.recs.is_empty() && r.recs.capacity() > 64 {
                r.recs = RecordRing::new();
            }
            if r.recs.is_empty() && r.aside.octets.capacity() > 0 {
                r.aside = Aside::default();
            }
        }
    }

    /// Drops the records of `conn`, released by the engine (TCP will send nothing more).
    pub fn forget(&mut self, conn: ConnId) {
        if let Some(e) = self.by_conn.get_mut(conn.slot()) {
            if e.as_ref().is_some_and(|r| r.conn == conn) {
                *e = None;
            }
        }
    }

    /// The host's [`warpcore_tcp::host::Fill`]: writes `dst.len()` octets of record `token`
    /// of `conn` from offset `at` of its run of FPDUs, read from registered memory in the core's
    /// region table `mrs`, and returns the Internet checksum sum of what it wrote when `sum`
    /// (else 0). `None` (and the failure noted for [`Self::take_failed`]) when the record is
    /// unknown or its memory cannot be read. `held`: the guard kept from the previous fill
    /// of the same transmit pass ([`TxHeld`]), which the caller drops when the pass ends.
    #[allow(clippy::too_many_arguments)]
    pub fn fill<'m>(
        &mut self,
        conn: ConnId,
        token: u64,
        at: usize,
        dst: &mut [u8],
        sum: bool,
        mrs: &'m MrTable,
        held: &mut TxHeld<'m>,
    ) -> Option<u64> {
        let TxRecords { by_conn, failed } = self;
        let done = fill_inner(by_conn, (conn, token, at), dst, sum, mrs, held);
        if done.is_none() {
            note_failed(by_conn, failed, conn, token);
        }
        done
    }

    /// The failures noted since the last call.
    pub fn take_failed(&mut self) -> Option<(ConnId, Option<u64>)> {
        self.failed.pop()
    }

    /// Whether a failure waits.
    #[inline]
    pub fn has_failed(&self) -> bool {
        !self.failed.is_empty()
    }
}

/// Hands TCP a copy of what it still has to send or resend of `tcp`'s records
/// ([`Stack::internalize_external`], the octets written into its send buffer by
/// [`TxRecords::fill`] as into a frame) and forgets them: from then on the connection reads
/// no registered memory. For a QP that lets its connection go while TCP still delivers it
/// (a graceful close under way: `release_conn` at a destroy or reset, `tx_close_if_drained`
/// when the connection goes to the zombies), so that nothing reads its memory once it is
/// gone. `false` when a fill failed (noted for `fail_unfillable`): the records from that
/// one on stay TCP's to read, and a retransmission that cannot read them resets the
/// connection.
pub(super) fn internalize<D: PollDevice>(
    stack: &mut Stack<D>,
    tcp: ConnId,
    records: &mut TxRecords,
    mrs: &MrTable,
) -> bool {
    if records.outstanding(tcp) == 0 {
        return true;
    }
    let mut held: TxHeld<'_> = None;
    let copied = stack.internalize_external(tcp, |token, at, dst| {
        records
            .fill(tcp, token, at, dst, false, mrs, &mut held)
            .is_some()
    });
    drop(held);
    if copied == Ok(true) {
        records.forget(tcp);
        return true;
    }
    false
}

/// [`TxRecords::fill`]'s work: the record `token` of `conn` found, and the FPDUs of its
/// run that `[at, at + dst.len())` covers written ([`fill_run`]; a bulk transfer's segment
/// is one FPDU, first sent or resent).
#[allow(clippy::too_many_arguments)]
fn fill_inner<'m>(
    by_conn: &mut [Option<ConnRecords>],
    (conn, token, at): (ConnId, u64, usize),
    dst: &mut [u8],
    sum: bool,
    mrs: &'m MrTable,
    held: &mut TxHeld<'m>,
) -> Option<u64> {
    let r = by_conn.get_mut(conn.slot())?.as_mut()?;
    if r.conn != conn {
        return None;
    }
    if dst.is_empty() {
        // Nothing to write (the host never asks so).
        return Some(0);
    }
    // Tokens are consecutive from the oldest record on, up to the next one given: the
    // oldest's is found without reading its record (a line the fill would touch for nothing).
    let first = r.next_token.checked_sub(r.recs.len() as u64)?;
    let k = token.checked_sub(first)?;
    let rec = r.recs.get(k as usize).filter(|x| x.token == token)?;
    // The FPDU after the last fill's, when `at` is where that one ended (the next segment
    // of a bulk transfer).
    let hint = match r.after_fill {
        (t, end, next) if t == token && end == at => Some(next),
        _ => None,
    };
    let (written, after) = fill_run(rec, hint, &mut r.aside, at, dst, sum, mrs, held)?;
    r.after_fill = (token, after.0, after.1);
    Some(written)
}

/// Writes the octets `[at, at + dst.len())` of `rec`'s run of FPDUs into `dst`: each FPDU
/// `dst` holds whole straight into it, each one it holds only part of framed aside into
/// `aside` (unless it holds that FPDU already: [`Aside`]) and the part copied from there
/// (and summed when `sum`). `hint`: the index of the FPDU
/// that starts at `at`, if the caller knows it (else found by a division). Returns the
/// unfolded Internet checksum sum of `dst` (0 without `sum`) and where the fill ended:
/// the offset in the run after the last FPDU it touched, and that FPDU's index plus one.
/// `None` when the range is not inside the run or a piece cannot be read.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn fill_run<'m>(
    rec: &TxRecord,
    hint: Option<usize>,
    aside: &mut Aside,
    at: usize,
    dst: &mut [u8],
    sum: bool,
    mrs: &'m MrTable,
    held: &mut TxHeld<'m>,
) -> Option<(u64, (usize, usize))> {
    let n = rec.fpdus();
    let each_wire = usize::from(rec.each_wire);
    // The FPDU `at` falls in: all but the last are `each_wire` long.
    let mut j = match hint {
        _ if n == 1 => 0,
        Some(next) => next,
        None => at / each_wire.max(1),
    };
    if j >= n {
        j = n - 1;
    }
    let end = at.checked_add(dst.len())?;
    let mut fpdu_at = j * each_wire;
    let mut total = 0u64;
    while fpdu_at < end {
        if j >= n {
            return None;
        }
        let wire = rec.fpdu_wire_len(j, n);
        let fpdu_end = fpdu_at + wire;
        let (from, to) = (at.max(fpdu_at), end.min(fpdu_end));
        if from >= to {
            return None;
        }
        let part = &mut dst[from - at..to - at];
        let kept = aside.key == Some((rec.token, j));
        if from == fpdu_at && to == fpdu_end && !kept {
            let s = rec.write(j, mrs, held, part, sum)?;
            total += csum::at_offset(s, from - at);
        } else {
            // Part of the FPDU (or one framed aside for an earlier part): framed whole
            // aside once, then the part copied from there (and summed).
            if !kept {
                aside.key = None;
                if aside.octets.len() < wire {
                    aside.octets.resize(wire, 0);
                }
                rec.write(j, mrs, held, &mut aside.octets[..wire], false)?;
                aside.key = Some((rec.token, j));
            } else if !rec.readable(j, mrs, held) {
                return None;
            }
            let src = aside.octets.get(from - fpdu_at..to - fpdu_at)?;
            if sum {
                total += csum::at_offset(csum::copy_and_sum(part, src), from - at);
            } else {
                part.copy_from_slice(src);
            }
        }
        fpdu_at = fpdu_end;
        j += 1;
    }
    Some((total, (fpdu_at, j)))
}

/// Notes the failure of a fill of record `token` of `conn`, with the request it belonged
/// to ([`TxRecords::take_failed`]).
fn note_failed(
    by_conn: &[Option<ConnRecords>],
    failed: &mut Vec<(ConnId, Option<u64>)>,
    conn: ConnId,
    token: u64,
) {
    let sq = match by_conn.get(conn.slot()) {
        Some(Some(r)) if r.conn == conn => r
            .recs
            .iter()
            .find(|x| x.token == token)
            .and_then(|x| x.sq()),
        _ => None,
    };
    failed.push((conn, sq));
}

/// Where an FPDU's payload comes from, checked, written into `rec` (its pieces, how they
/// are looked up, the request): `Ok(true)`; `Ok(false)` for a header-only response
/// (nothing to read); `Err` when the source cannot be read (the request or the Read being
/// answered fails). A request's SGEs ([`sges_readable`]) and a Read Response's source are
/// looked up and bounds-checked at the message's first FPDU (`off == 0`); later FPDUs are
/// split by arithmetic, and the copy into each frame checks again.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn source_into(
    rec: &mut TxRecord,
    src: &TxSrc,
    sq: &VecDeque<SqEntry>,
    sq_head: u64,
    mrs: &MrTable,
    pd: PdId,
    stream: StreamId,
    off: u64,
    plen: usize,
) -> Result<bool, ()> {
    match src {
        TxSrc::Sq(seq) => {
            let e = sq.get((*seq - sq_head) as usize).ok_or(())?;
            let sges = e.wr.sges.as_slice();
            if off == 0 && !sges_readable(mrs, pd, sges) {
                return Err(());
            }
            rec.npieces = pieces_into(&mut rec.pieces, sges, off, plen).ok_or(())?;
            rec.access = PieceAccess::Local { pd };
            rec.set_sq(Some(*seq));
            Ok(true)
        }
        TxSrc::ReadResp(plan) => {
            let to = plan.src_to.checked_add(off).ok_or(())?;
            if off == 0 {
                let g = mrs
                    .lookup_remote(Stag(plan.src_stag), pd, stream, Access::REMOTE_READ)
                    .map_err(|_| ())?;
                g.bounds(plan.src_to, plan.len as usize).map_err(|_| ())?;
            }
            rec.pieces[0] = MemPiece {
                to,
                stag: plan.src_stag,
                len: u32::try_from(plen).map_err(|_| ())?,
            };
            rec.npieces = 1;
            rec.access = PieceAccess::Remote { pd, stream };
            rec.set_sq(None);
            Ok(true)
        }
        TxSrc::AtomicResp => Ok(false),
    }
}

/// The FPDUs of one message queued as one record ([`queue`]): `fpdus` consecutive
/// segments from the segmenter, the first with header `hdr[..hdr_len]` and payload
/// `[off, off + plen)` of the message in all, each carrying `each` octets but the last
/// (the rest), the last ending the message if `ends_msg`.
#[derive(Debug, Clone, Copy)]
pub(super) struct Run {
    pub off: u64,
    pub plen: usize,
    pub each: usize,
    pub fpdus: usize,
    pub ends_msg: bool,
}

/// Queues the run of FPDUs `run` (header `hdr[..hdr_len]` on its first) in TCP as one
/// external record ([`Stack::send_external_run`]: a record boundary after each FPDU, so
/// each still goes out in segments of its own): its source checked ([`source_into`]),
/// each FPDU counted by the framer, the run recorded here (filled in place). `Ok(false)`
/// for a header-only response, a header longer than a record keeps ([`RECORD_HDR_MAX`]),
/// or when a marker falls inside the FPDU (the caller frames it into the send buffer;
/// runs of more than one FPDU are built only without markers, where the framer never
/// declines), and `Err` when the source cannot be read (the request or Read fails): then
/// no record is left and neither the framer nor TCP changed (the record pushed first is
/// taken back; only the connection's list of records may have been set up, as any push
/// sets it up). `Err` too when the framer refuses an FPDU of the run after the first, or
/// when TCP refuses a run whose room was checked: the framer counted FPDUs, so the stream
/// is broken and the QP fails.
#[allow(clippy::too_many_arguments)]
pub(super) fn queue<D: PollDevice>(
    stack: &mut Stack<D>,
    tcp: ConnId,
    records: &mut TxRecords,
    framer: &mut Framer,
    (hdr, hdr_len): (&[u8; MAX_SEGMENT_HEADER_LEN], usize),
    src: &TxSrc,
    (sq, sq_head): (&VecDeque<SqEntry>, u64),
    mrs: &MrTable,
    (pd, stream): (PdId, StreamId),
    run: Run,
) -> Result<bool, ()> {
    if hdr_len > RECORD_HDR_MAX {
        return Ok(false);
    }
    let Some(kept) = hdr.first_chunk::<RECORD_HDR_MAX>() else {
        return Ok(false);
    };
    let rest = run.plen.checked_sub((run.fpdus.max(1) - 1) * run.each);
    let each_wire = fpdu::fpdu_len(hdr_len + run.each);
    let (Ok(fpdus), Ok(each), Some(Ok(last)), Ok(each_wire)) = (
        u16::try_from(run.fpdus.max(1)),
        u16::try_from(run.each),
        rest.map(u16::try_from),
        u16::try_from(each_wire),
    ) else {
        return Ok(false);
    };
    let (rec, token) = records.push_slot(tcp);
    // All the room, past the header too (octets a record never reads): a copy of fixed
    // length, two moves, not a call to `memcpy` for a length known only here.
    rec.hdr = *kept;
    rec.hdr_len = hdr_len as u8;
    rec.crc = framer.crc();
    rec.ends_msg = run.ends_msg;
    rec.each = each;
    rec.last = last;
    rec.each_wire = each_wire;
    rec.fpdus = fpdus;
    let need = match source_into(rec, src, sq, sq_head, mrs, pd, stream, run.off, run.plen) {
        Ok(true) => reserve_run(framer, rec),
        Ok(false) => Ok(None),
        Err(()) => {
            records.unpush(tcp);
            return Err(());
        }
    };
    let Ok(Some((len, every))) = need else {
        records.unpush(tcp);
        return if need.is_err() { Err(()) } else { Ok(false) };
    };
    match stack.send_external_run(tcp, len, every, token) {
        Ok(true) => Ok(true),
        _ => {
            records.unpush(tcp);
            Err(())
        }
    }
}

/// Counts the FPDUs of `rec`'s run with the framer, in order: their length on the wire
/// and that of each but the last. `Ok(None)` when the framer declines or refuses the
/// first (it counted nothing; a run of more than one is only built without markers and
/// within MULPDU), `Err` when it declines or refuses one after the first (the QP fails:
/// the framer counted the ones before).
fn reserve_run(framer: &mut Framer, rec: &TxRecord) -> Result<Option<(usize, usize)>, ()> {
    let n = rec.fpdus();
    let hl = usize::from(rec.hdr_len);
    let mut total = 0;
    for k in 0..n {
        let (_, len) = rec.fpdu_payload(k, n);
        match framer.reserve_in_place(hl, len) {
            Ok(Some(w)) => total += w,
            // The first: as a lone FPDU, declined (a marker) or refused (the framer's
            // MULPDU), with nothing counted; the caller frames it as it would any.
            _ if k == 0 => return Ok(None),
            _ => return Err(()),
        }
    }
    debug_assert_eq!(total, rec.wire_len());
    Ok(Some((total, rec.fpdu_wire_len(0, n))))
}

/// Whether every SGE of a request can be read now as the copies will read it (region
/// valid under `pd` with local access, bounds): checked once, when its first FPDU is
/// queued, so that a request naming a region that is already gone fails as a copied one
/// does (a local protection error and a Terminate). A region that goes away later is
/// found by the copy into the frame (`fill`).
pub(super) fn sges_readable(mrs: &MrTable, pd: PdId, sges: &[Sge]) -> bool {
    sges.iter().all(|s| {
        s.len == 0
            || mrs
                .lookup_local(Stag(s.stag), pd, false)
                .is_ok_and(|g| g.bounds(s.to, s.len as usize).is_ok())
    })
}

/// Splits `[off, off + len)` of a request's payload, given by its SGEs, into pieces of
/// registered memory written into `out` (arithmetic only: [`sges_readable`] checked them),
/// and returns how many. `None` when the range is not covered.
pub(super) fn pieces_into(
    out: &mut [MemPiece; MAX_SGE],
    sges: &[Sge],
    offset: u64,
    len: usize,
) -> Option<u8> {
    let mut n = 0usize;
    let mut off = offset;
    let mut left = len as u64;
    for s in sges {
        if left == 0 {
            break;
        }
        let l = u64::from(s.len);
        if off >= l {
            off -= l;
            continue;
        }
        let take = (l - off).min(left);
        let to = s.to.checked_add(off)?;
        *out.get_mut(n)? = MemPiece {
            stag: s.stag,
            to,
            len: take as u32,
        };
        n += 1;
        left -= take;
        off = 0;
    }
    (left == 0).then_some(n as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record told apart by its token.
    fn rec(ring: &mut RecordRing, token: u64) {
        let r = ring.push_slot();
        r.token = token;
        r.set_sq(Some(token * 10));
    }

    fn tokens(ring: &RecordRing) -> Vec<u64> {
        ring.iter().map(|r| r.token).collect()
    }

    #[test]
    fn a_record_ring_is_a_fifo_across_wraps_and_growth() {
        let mut ring = RecordRing::new();
        assert!(ring.is_empty() && ring.front().is_none() && ring.get(0).is_none());
        // Against a VecDeque model: pushes, pops at both ends, growth while wrapped.
        let mut model = VecDeque::new();
        let mut next = 1u64;
        for round in 0..200u64 {
            for _ in 0..(round % 7) + 1 {
                rec(&mut ring, next);
                model.push_back(next);
                next += 1;
            }
            for _ in 0..round % 5 {
                ring.pop_front();
                model.pop_front();
            }
            if round % 11 == 0 && ring.pop_back() {
                model.pop_back();
                next -= 1;
            }
            assert_eq!(tokens(&ring), Vec::from(model.clone()), "round {round}");
            assert_eq!(ring.len(), model.len());
            assert_eq!(ring.front().map(|r| r.token), model.front().copied());
            for (k, t) in model.iter().enumerate() {
                let r = ring.get(k).unwrap();
                assert_eq!((r.token, r.sq()), (*t, Some(*t * 10)));
            }
            assert!(ring.get(model.len()).is_none());
            assert!(ring.capacity().is_power_of_two() || ring.capacity() == 0);
        }
        while !model.is_empty() {
            ring.pop_front();
            model.pop_front();
        }
        assert!(ring.is_empty());
        ring.pop_front();
        assert!(!ring.pop_back() && ring.is_empty());
    }

    /// A run's FPDU headers as the segmenter writes them: from every segment of messages
    /// of many lengths and MULPDUs, tagged and untagged (with RDMAP's fields), a run may
    /// start at any segment and take any number of the next ones; `run_header` must give
    /// each one's header from the run's first (TO or MO advanced, L only on the message's
    /// last segment when the run takes it), and `TxRecord::put_head` must write it after
    /// ULPDU_Length. DDP-5.2-6, DDP-5.2-8, DDP-4.1-3, DDP-4.1-4.
    #[test]
    fn a_runs_headers_are_the_segmenters() {
        use warpcore_proto::ddp::DdpSender;
        let mut checked = 0;
        for mulpdu in [100usize, 1000, 1444] {
            for len in [1u32, 85, 86, 200, 982, 2000, 4321, 65_536] {
                for tagged in [true, false] {
                    let mut ddp = DdpSender::new();
                    ddp.set_next_msn(0, 0xfffe).unwrap();
                    let mut seg = if tagged {
                        ddp.tagged(0x40, 0x1234_5678, 0xffff_ffff_0000_0000, &[], len, mulpdu)
                    } else {
                        ddp.untagged(0x41, 0xdead_beef, 0, &[], len, mulpdu)
                    }
                    .unwrap();
                    // Every segment's header and payload length.
                    let mut segs = Vec::new();
                    let mut h = [0u8; MAX_SEGMENT_HEADER_LEN];
                    while let Ok(Some(s)) = seg.next_segment(&mut h) {
                        let mut k = [0u8; RECORD_HDR_MAX];
                        k[..s.header_len].copy_from_slice(&h[..s.header_len]);
                        segs.push((k, s.header_len, s.payload_len as usize, s.last()));
                    }
                    for first in 0..segs.len() {
                        let (hdr, hl, _, _) = segs[first];
                        for n in 1..=(segs.len() - first).min(6) {
                            let run = &segs[first..first + n];
                            let ends_msg = run[n - 1].3;
                            let mut skip = 0;
                            for (k, &(want, _, plen, _)) in run.iter().enumerate() {
                                let got = run_header(&hdr, hl, (k, n), skip, ends_msg);
                                assert_eq!(
                                    got[..hl],
                                    want[..hl],
                                    "mulpdu {mulpdu} len {len} tagged {tagged}: FPDU {k} of a run \
                                     of {n} from segment {first}"
                                );
                                // `put_head`, which writes it in words from the record's.
                                let mut r = TxRecord::BLANK;
                                (r.hdr, r.hdr_len, r.ends_msg) = (hdr, hl as u8, ends_msg);
                                let ulpdu = (hl + plen) as u16;
                                let mut to = [0xAAu8; 2 + RECORD_HDR_MAX];
                                r.put_head((k, n), skip, &mut to[..2 + hl], ulpdu);
                                assert_eq!(to[..2], ulpdu.to_be_bytes());
                                assert_eq!(
                                    to[2..2 + hl],
                                    want[..hl],
                                    "put_head: mulpdu {mulpdu} len {len} tagged {tagged}: FPDU \
                                     {k} of a run of {n} from segment {first}"
                                );
                                skip += plen;
                                checked += 1;
                            }
                        }
                    }
                }
            }
        }
        assert!(checked > 1000);
    }

    /// A run written by `fill_run` is the message's FPDUs as the segmenter and the
    /// framer make them, octet for octet, whatever cuts the host asks for: whole FPDUs (a
    /// bulk transfer's segments), parts of one (a segment TCP cut), several at once, from
    /// any offset, with and without the hint, the checksum sum always that of the octets
    /// written. The payload comes from two pieces of a registered region (two SGEs); the
    /// expected octets are framed by `frame_in_place` around the segmenter's own headers.
    #[test]
    fn a_run_fills_as_its_fpdus_framed_one_by_one() {
        use crate::mem::Region;
        use warpcore_proto::ddp::DdpSender;
        use warpcore_proto::mpa::framer::frame_in_place;
        let region = Arc::new(Region::allocate(1 << 16, 8).unwrap());
        let pattern: Vec<u8> = (0..1u32 << 16).map(|i| (i * 31 + i / 251) as u8).collect();
        region.write_at(0, &pattern).unwrap();
        let t = MrTable::with_seed(4, 5);
        let pd = PdId(3);
        let base = 0x10_000u64;
        let stag = t.register(region, pd, Access::LOCAL_WRITE, base).unwrap();
        // Two pieces: 3,000 octets at 100, then 2,321 at 9,000 (a message of two SGEs).
        let pieces = [(100usize, 3000usize), (9000, 2321)];
        let len: usize = pieces.iter().map(|p| p.1).sum();
        let message: Vec<u8> = pieces
            .iter()
            .flat_map(|&(o, n)| pattern[o..o + n].iter().copied())
            .collect();
        for mulpdu in [700usize, 1444] {
            let ddp = DdpSender::new();
            let mut seg = ddp
                .tagged(0x40, 0x5566_7788, 0x7000, &[], len as u32, mulpdu)
                .unwrap();
            // The FPDUs as the segmenter and the framer make them.
            let (mut expected, mut first, mut each, mut n) = (Vec::new(), None, 0, 0);
            let mut h = [0u8; MAX_SEGMENT_HEADER_LEN];
            while let Ok(Some(sg)) = seg.next_segment(&mut h) {
                let (hl, plen) = (sg.header_len, sg.payload_len as usize);
                let off = sg.payload_offset as usize;
                let mut f = vec![0u8; fpdu::fpdu_len(hl + plen)];
                f[2 + hl..2 + hl + plen].copy_from_slice(&message[off..off + plen]);
                frame_in_place(&h[..hl], plen, Some(crate::mem::crc::crc32c_append), &mut f);
                expected.extend_from_slice(&f);
                if first.is_none() {
                    let mut k = [0u8; RECORD_HDR_MAX];
                    k[..hl].copy_from_slice(&h[..hl]);
                    first = Some((k, hl));
                    each = plen;
                }
                n += 1;
            }
            let (hdr, hl) = first.unwrap();
            let mut rec = TxRecord::BLANK;
            rec.token = 9;
            rec.hdr = hdr;
            rec.hdr_len = hl as u8;
            rec.crc = true;
            rec.ends_msg = true;
            rec.access = PieceAccess::Local { pd };
            for (k, &(o, n)) in pieces.iter().enumerate() {
                rec.pieces[k] = MemPiece {
                    to: base + o as u64,
                    stag: stag.0,
                    len: n as u32,
                };
            }
            rec.npieces = 2;
            rec.each = each as u16;
            rec.last = (len - (n - 1) * each) as u16;
            rec.each_wire = fpdu::fpdu_len(hl + each) as u16;
            rec.fpdus = n as u16;
            assert_eq!(rec.wire_len(), expected.len());
            let mut aside = Aside::default();
            let mut held: TxHeld<'_> = None;
            let mut check = |at: usize, l: usize, hint: Option<usize>, sum: bool| {
                let mut dst = vec![0xeeu8; l];
                aside.key = None;
                let got = fill_run(&rec, hint, &mut aside, at, &mut dst, sum, &t, &mut held);
                let (s, _) = got.unwrap_or_else(|| panic!("fill [{at}, {}) failed", at + l));
                assert_eq!(
                    dst,
                    expected[at..at + l],
                    "mulpdu {mulpdu}: [{at}, {})",
                    at + l
                );
                if sum {
                    assert_eq!(
                        csum::fold(s),
                        csum::fold(csum::sum(&dst)),
                        "sum of [{at}, +{l})"
                    );
                }
            };
            // Each FPDU whole, in order with the hint and without.
            let w = usize::from(rec.each_wire);
            for j in 0..n {
                let l = rec.fpdu_wire_len(j, n);
                check(j * w, l, Some(j), true);
                check(j * w, l, None, j % 2 == 0);
            }
            // Parts and spans from every few offsets, odd ones included.
            for at in (0..expected.len()).step_by(97) {
                for l in [1, 2, 63, 200, w - 1, w, w + 1, 2 * w + 5] {
                    if at + l <= expected.len() {
                        check(at, l, None, true);
                    }
                }
            }
            // Past the run's end: refused.
            let mut dst = [0u8; 4];
            let past = fill_run(
                &rec,
                None,
                &mut aside,
                expected.len() - 2,
                &mut dst,
                true,
                &t,
                &mut held,
            );
            assert!(past.is_none());
        }
    }

    /// A handle of a real stack's connection (records are kept per `ConnId`).
    fn a_conn() -> ConnId {
        use warpcore_tcp::link::{self, LinkConfig};
        use warpcore_tcp::smoltcp::wire::Ipv4Cidr;
        use warpcore_tcp::TcpTuning;
        let (end, _peer) = link::pair(&LinkConfig::default());
        let sc = StackConfig {
            mac: [2, 0, 0, 0, 0, 1],
            ip: Ipv4Cidr::new(Ipv4Address::new(10, 0, 0, 1), 24),
            gateway: None,
            routes: Vec::new(),
            random_seed: 1,
            max_connections: 2,
            out_of_order_budget_bytes: warpcore_tcp::OUT_OF_ORDER_BUDGET_DEFAULT,
        };
        let mut stack = Stack::new(end, &sc, Instant::ZERO).unwrap();
        stack
            .connect(
                (Ipv4Address::new(10, 0, 0, 2), 4791),
                None,
                &TcpTuning::default(),
            )
            .unwrap()
    }

    /// An FPDU that segments carry in parts (a window smaller than the FPDU with nothing
    /// in flight, a window probe: the TCP cuts records there) is read from the region once:
    /// the source of a Read Response may change between two parts (the responder's
    /// application writes it when it likes), and the parts must still make one FPDU whose
    /// CRC matches its octets (MPA-8-2: the peer fails the stream otherwise). A part sent
    /// again (a retransmission) is the same octets; a whole FPDU, or the next record, is
    /// read afresh; an acknowledgement lets the aside go.
    #[test]
    fn the_parts_of_one_fpdu_come_from_one_read_of_the_region() {
        use crate::mem::Region;
        use warpcore_proto::ddp::DdpSender;
        use warpcore_proto::mpa::framer::frame_in_place;
        let region = Arc::new(Region::allocate(1 << 16, 8).unwrap());
        let old = pattern(4096, 1);
        region.write_at(0, &old).unwrap();
        let t = MrTable::with_seed(4, 5);
        let pd = PdId(3);
        let stag = t
            .register(Arc::clone(&region), pd, Access::REMOTE_READ, 0)
            .unwrap();
        let stream: StreamId = 7;
        // A Read Response of 1,400 octets in one FPDU, as `queue` records it.
        let plen = 1400;
        let mut seg = DdpSender::new()
            .tagged(0x41, 0x5566_7788, 0x9000, &[], plen as u32, 1444)
            .unwrap();
        let mut h = [0u8; MAX_SEGMENT_HEADER_LEN];
        let s = seg.next_segment(&mut h).unwrap().unwrap();
        let hl = s.header_len;
        let framed = |payload: &[u8]| {
            let mut f = vec![0u8; fpdu::fpdu_len(hl + plen)];
            f[2 + hl..2 + hl + plen].copy_from_slice(payload);
            frame_in_place(&h[..hl], plen, Some(crate::mem::crc::crc32c_append), &mut f);
            f
        };
        let conn = a_conn();
        let mut records = TxRecords::new();
        let push = |records: &mut TxRecords| {
            let (rec, token) = records.push_slot(conn);
            rec.hdr = *h.first_chunk().unwrap();
            rec.hdr_len = hl as u8;
            rec.crc = true;
            rec.ends_msg = true;
            rec.access = PieceAccess::Remote { pd, stream };
            rec.pieces[0] = MemPiece {
                to: 100,
                stag: stag.0,
                len: plen as u32,
            };
            rec.npieces = 1;
            rec.each = plen as u16;
            rec.last = plen as u16;
            rec.each_wire = fpdu::fpdu_len(hl + plen) as u16;
            rec.fpdus = 1;
            rec.set_sq(None);
            token
        };
        let wire = fpdu::fpdu_len(hl + plen);
        // Each fill a transmit pass of its own (the pass's guard dropped at its end).
        let try_fill = |records: &mut TxRecords, token: u64, at: usize, len: usize| {
            let mut dst = vec![0u8; len];
            let mut held: TxHeld<'_> = None;
            records
                .fill(conn, token, at, &mut dst, true, &t, &mut held)
                .map(|s| (s, dst))
        };
        let fill = |records: &mut TxRecords, token: u64, at: usize, len: usize| {
            let got = try_fill(records, token, at, len);
            let sum = got.as_ref().map(|(s, _)| *s);
            let dst = got.map(|(_, d)| d).unwrap_or_default();
            assert_eq!(
                sum.map(csum::fold),
                Some(csum::fold(csum::sum(&dst))),
                "[{at}, +{len})"
            );
            dst
        };
        let token = push(&mut records);
        // The first part (header and 700 octets of payload), then the application writes the
        // source, then the rest (payload and CRC).
        let mut got = fill(&mut records, token, 0, 720);
        let new = pattern(4096, 2);
        region.write_at(0, &new).unwrap();
        got.extend(fill(&mut records, token, 720, wire - 720));
        let want = framed(&old[100..100 + plen]);
        assert_eq!(
            got, want,
            "the parts of the FPDU come from one read of the region"
        );
        // The first part sent again (a retransmission): the same octets.
        assert_eq!(fill(&mut records, token, 0, 720), want[..720]);
        // Acknowledged: the next record's FPDU, in parts too, is read afresh.
        records.acked(conn, token, |_| {});
        let next = push(&mut records);
        let mut got = fill(&mut records, next, 0, 1);
        got.extend(fill(&mut records, next, 1, wire - 1));
        assert_eq!(got, framed(&new[100..100 + plen]));
        // A whole FPDU is written straight into its frame, from the region as it is.
        records.acked(conn, next, |_| {});
        let whole = push(&mut records);
        region.write_at(0, &old).unwrap();
        assert_eq!(
            fill(&mut records, whole, 0, wire),
            framed(&old[100..100 + plen])
        );
        // The region deregistered between two parts: the next part is refused (the host
        // resets the stream), as a copy from the region would be.
        records.acked(conn, whole, |_| {});
        let last = push(&mut records);
        fill(&mut records, last, 0, 720);
        t.deregister(stag).unwrap();
        assert!(try_fill(&mut records, last, 720, wire - 720).is_none());
        assert!(records.has_failed());
    }

    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| {
                (i as u32)
                    .wrapping_mul(2_654_435_761)
                    .rotate_right(u32::from(seed)) as u8
            })
            .collect()
    }

    #[test]
    fn a_record_is_two_cache_lines() {
        // A bulk sender keeps one per run in flight (one or a few per message).
        assert_eq!(std::mem::size_of::<TxRecord>(), 128);
    }

    #[test]
    fn a_pushed_slot_comes_as_it_was_left() {
        // `queue` relies on every field a reader uses being written after `push_slot`;
        // the readers are `write` and `fill` (hdr, hdr_len, crc, ends_msg, access, pieces,
        // npieces, each, last, each_wire, fpdus), `acked` and `note_failed` (token, sq). A slot once used keeps its old fields until then.
        let mut ring = RecordRing::new();
        let r = ring.push_slot();
        r.token = 7;
        r.npieces = 3;
        ring.pop_front();
        for _ in 0..15 {
            ring.push_slot();
            ring.pop_front();
        }
        let again = ring.push_slot();
        assert_eq!(
            (again.token, again.npieces),
            (7, 3),
            "the slot is handed out as it was"
        );
    }
}
