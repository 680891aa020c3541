//! The receive path: `poll_rx` hands each connection's new in-order octets to
//! [`Qp::consume`] (MPA frames during startup, then the deframer), which hands each ULPDU to
//! [`Qp::rx_ulpdu`]: RDMAP checks, one STag lookup, DDP validation, then placement into
//! registered memory (tagged: [`crate::mem::MrGuard::place_at`]; untagged: [`scatter`] over
//! the head receive's SGEs), Read and Atomic Requests queued for the transmit path, and
//! completions in MSN order.

use super::tx::tx_settled_but_txrec;
use super::*;
use warpcore_proto::ddp::{TaggedPlacement, UntaggedPlacement};
use warpcore_proto::wire::ddp::{
    DdpBuffer, DdpRepr, DdpSegment, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN,
};
use warpcore_proto::wire::segment::{SegmentError, SegmentRepr};

/// The tagged lookup done once per segment, before DDP validation: DDP does the TO range,
/// wrap and bounds arithmetic on the region it returns (DDP-7.1-10..14).
struct TaggedView(Result<TaggedRegion, TaggedFault>);

impl TaggedBuffers for TaggedView {
    fn tagged_region(&self, _stag: u32, _rsvd_ulp: u8) -> Result<TaggedRegion, TaggedFault> {
        self.0
    }
}

/// The untagged queues of a stream as DDP sees them: QN 0 is the receive queue, QN 1 the
/// inbound Read Request slots (IRD is accounted by RDMAP), QN 2 the Terminate slot. QN 3
/// (Atomic Responses) is not a queue without RFC 7306 atomics.
struct UntaggedView {
    rq_head_len: Option<u64>,
    /// QN 3 is a queue when RFC 7306 is in use (EXT-5.2-2).
    rfc7306: bool,
}

impl UntaggedBuffers for UntaggedView {
    fn queue_valid(&self, qn: u32) -> bool {
        qn <= qn::TERMINATE || (self.rfc7306 && qn == qn::ATOMIC_RESPONSE)
    }
    fn buffer_len(&self, q: u32, _msn: u32) -> Option<u64> {
        match q {
            qn::SEND => self.rq_head_len,
            // RDMAP-5.2.1-2: each Read Request takes one of these (IRD bounds them).
            qn::READ_REQUEST => Some(64),
            // RDMAP-5.4-4: a Terminate always finds its buffer.
            qn::TERMINATE => Some(TERMINATE_SEGMENT_MAX_LEN as u64),
            // The requester keeps room for every outstanding response: ORD bounds them (EXT-5.2.2-4).
            qn::ATOMIC_RESPONSE if self.rfc7306 => Some(64),
            _ => None,
        }
    }
}

/// Scatters `data` at message offset `mo` over the SGEs of a receive buffer.
pub(super) fn scatter(
    mrs: &MrTable,
    pd: PdId,
    sges: &[Sge],
    mo: u64,
    data: &[u8],
) -> Result<(), DdpError> {
    let mut off = mo;
    let mut rest = data;
    for s in sges {
        if rest.is_empty() {
            break;
        }
        let l = u64::from(s.len);
        if off >= l {
            off -= l;
            continue;
        }
        let n = (l - off).min(rest.len() as u64) as usize;
        let g = mrs
            .lookup_local(Stag(s.stag), pd, true)
            .map_err(|_| DdpError::LocalCatastrophic)?;
        let to = s.to.checked_add(off).ok_or(DdpError::LocalCatastrophic)?;
        g.place_at(to, &rest[..n])
            .map_err(|_| DdpError::LocalCatastrophic)?;
        rest = &rest[n..];
        off = 0;
    }
    if rest.is_empty() {
        Ok(())
    } else {
        // DDP checked MO + length against the buffer length; this cannot happen.
        Err(DdpError::UntaggedTooLong)
    }
}

/// The region of the last tagged segment placed in this receive pass, still guarded, with
/// the stream and the right it was looked up for: the next segment into the same region
/// (every segment of a bulk Write) places through it without a lookup of its own. Dropping
/// a guard is a locked instruction, which waits until the placement's stores have drained;
/// once per pass instead of once per segment, the stores of one segment drain while the
/// next is checked. The pass drops it at its end, and before a Send with Invalidate is
/// handled (the invalidation waits for the region's guards: the core would wait on
/// itself), so a deregistration waits at most one pass.
pub(super) type RxHeld<'m> = Option<(MrGuard<'m>, crate::mem::StreamId, HeldRight)>;

/// The right a held guard was looked up for: one of the two the receive path asks for. An
/// enum rather than [`Access`], so that its spare values tell `None` of [`RxHeld`] (one
/// compare of a byte in memory where every loop's pass drops its guard) rather than the
/// guard's slot address (a load and a test).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum HeldRight {
    /// A peer's RDMA Write into a region (RDMAP-8.1.1-6).
    RemoteWrite,
    /// A Read Response into the sink of our own Read.
    LocalWrite,
}

impl HeldRight {
    /// The right as [`MrTable::lookup_remote`] takes it.
    #[inline(always)]
    fn access(self) -> Access {
        match self {
            HeldRight::RemoteWrite => Access::REMOTE_WRITE,
            HeldRight::LocalWrite => Access::LOCAL_WRITE,
        }
    }
}

/// The data messages' fast decode (not taken under `core::set_general_paths_only`; held to
/// the general path by `tests/engine_rx_fast_paths.rs`): a ULPDU whose two control octets
/// are exactly those we send for a message without RDMAP header, with that header whole,
/// is decoded without `Segment::parse` and `check_inbound`: the tagged RDMA Write and Read
/// Response (DDP: T = 1, reserved 0, DV 1, either L; 14 octets) and the four Sends on QN 0
/// (T = 0; 18 octets), each with RDMAP RV 1 and reserved bits 0. For such a ULPDU both pass
/// (DDP-4.1-10, DV; the RDMAP version, RDMAP-4.1-7; a defined opcode on its buffer model
/// and queue; no RDMAP header, RDMAP-4.2-1; none is an RFC 7306 opcode) and `parse` returns
/// what this does: the header's fields, no RDMAP header, and the rest as payload.
/// Everything after (lookup, `handle_header`, placement, the receive, the Invalidate) runs
/// as for any segment. Anything else is `None`, for the general decode.
#[inline(always)]
fn plain_data(ulpdu: &[u8]) -> Option<Segment<'_>> {
    /// DDP control octet, L masked: T, reserved bits 0, DDP version.
    const DDP_TAGGED: u8 = 0x80 | DDP_VERSION;
    const DDP_UNTAGGED: u8 = DDP_VERSION;
    const DDP_L: u8 = 0x40;
    let ctrl = *ulpdu.first()?;
    let last = ctrl & DDP_L != 0;
    let rdmap = *ulpdu.get(1)?;
    let (buffer, opcode, payload) = if ctrl & !DDP_L == DDP_TAGGED {
        let opcode = match rdmap {
            c if c == Control::new(Opcode::Write).0 => Opcode::Write,
            c if c == Control::new(Opcode::ReadResponse).0 => Opcode::ReadResponse,
            _ => return None,
        };
        let (h, payload) = ulpdu.split_first_chunk::<TAGGED_HEADER_LEN>()?;
        let buffer = DdpBuffer::Tagged {
            stag: u32::from_be_bytes([h[2], h[3], h[4], h[5]]),
            to: u64::from_be_bytes([h[6], h[7], h[8], h[9], h[10], h[11], h[12], h[13]]),
        };
        (buffer, opcode, payload)
    } else if ctrl & !DDP_L == DDP_UNTAGGED {
        let opcode = match rdmap {
            c if c == Control::new(Opcode::Send).0 => Opcode::Send,
            c if c == Control::new(Opcode::SendSe).0 => Opcode::SendSe,
            c if c == Control::new(Opcode::SendInvalidate).0 => Opcode::SendInvalidate,
            c if c == Control::new(Opcode::SendSeInvalidate).0 => Opcode::SendSeInvalidate,
            _ => return None,
        };
        let (h, payload) = ulpdu.split_first_chunk::<UNTAGGED_HEADER_LEN>()?;
        let word = |i: usize| u32::from_be_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
        if word(6) != qn::SEND {
            return None;
        }
        let buffer = DdpBuffer::Untagged {
            rsvd_ulp2: word(2),
            qn: qn::SEND,
            msn: word(10),
            mo: word(14),
        };
        (buffer, opcode, payload)
    } else {
        return None;
    };
    Some(Segment {
        repr: SegmentRepr {
            last,
            buffer,
            opcode,
            header: RdmapHeader::None,
        },
        payload,
    })
}

/// What a ULPDU `Segment::parse` refused with `e` earns: the Terminate `e` maps to; but a
/// Terminate whose HdrCt bits announce headers it does not carry (its control word whole)
/// is the peer's verdict all the same, delivered to the user (RDMAP-5.4-5, RDMAP-7.1-1)
/// and not answered with a Terminate of ours (RDMAP-5.4-7; siw answers no Terminate
/// either, `siw_proc_terminate`).
#[cold]
#[inline(never)]
fn segment_fault(ulpdu: &[u8], e: SegmentError) -> RxFault {
    if let Some(r) = truncated_terminate(ulpdu, e) {
        return RxFault::RemoteTerminate(r);
    }
    e.protocol_error().into()
}

/// The peer's verdict in a Terminate that `Segment::parse` refused with `e` because its
/// HdrCt bits announce headers it does not hold, its control word whole: what
/// [`segment_fault`] reports, and what a fenced responder takes for a Terminate in place of
/// the RTR ([`Qp::rx_fenced`]; RDMAP-5.4-5, MPA2-9.2-10/11).
fn truncated_terminate(ulpdu: &[u8], e: SegmentError) -> Option<TerminateReport> {
    if e != SegmentError::HeaderTruncated(Opcode::Terminate) {
        return None;
    }
    ulpdu
        .get(UNTAGGED_HEADER_LEN..)
        .and_then(TerminateReport::decode_control_word)
}

/// The general decode: `Segment::parse`, then RDMAP's inbound checks, for what
/// [`plain_data`] does not decode (or everything, under `core::set_general_paths_only`).
/// A fault goes to [`Qp::rx_malformed`], which ranks DDP's untagged checks before the
/// RDMAP faults DDP precedes.
#[inline(always)]
fn parse_checked(ulpdu: &[u8], rfc7306: bool) -> Result<Segment<'_>, RxFault> {
    let seg = Segment::parse(ulpdu).map_err(|e| segment_fault(ulpdu, e))?;
    // RFC 7306 opcodes only where the connection uses RFC 7306; otherwise 0/2/06 as for an
    // RFC 5040 receiver (EXT-8.2-2, EXT-1.1-1).
    let rdmap_cfg = RdmapConfig {
        atomics: rfc7306,
        immediate_data: rfc7306,
    };
    check_inbound(&seg.repr, &rdmap_cfg)?;
    Ok(seg)
}

impl Qp {
    /// Consumes received stream octets: MPA startup frames, then FPDUs. Returns how many
    /// octets were consumed. `mrs` and `held`: see [`RxHeld`].
    pub(super) fn consume<'m>(
        &mut self,
        data: &[u8],
        ctx: &mut Ctx,
        mrs: &'m MrTable,
        held: &mut RxHeld<'m>,
    ) -> usize {
        let mut used = 0;
        if let Some(Mpa::Initiator(i)) = self.conn.as_mut().map(|c| &mut c.mpa) {
            if i.phase() == nego::Phase::AwaitingFrame {
                used += i.handle_input(data);
                self.drive_initiator(ctx);
            }
        }
        // Octets past the startup frames: the peer is in FPDU mode (a fenced responder's
        // Terminate may now go out, `tx_control`).
        if data.len() > used {
            if let Some(c) = self.conn.as_mut() {
                c.fpdu_octets_rx = true;
            }
        }
        if !matches!(self.state, QpState::Rts | QpState::Closing) {
            // Nothing more is delivered after a Terminate or an error (DDP-7.1-17): the
            // octets are dropped so that TCP keeps its window open while it closes.
            return if matches!(self.state, QpState::Terminate | QpState::Error) {
                data.len()
            } else {
                used
            };
        }
        used + self.consume_fpdus(&data[used..], None, ctx, mrs, held)
    }

    /// [`Self::consume`] past the startup, for a QP in RTS or Closing that awaits no MPA
    /// frame (an initiator reaches RTS only once it read the reply): FPDUs through the
    /// deframer. `poll_stack` calls it directly for a QP it found steady (RTS, MPA done),
    /// for which `consume`'s own steps before it would do nothing.
    #[inline(never)]
    pub(super) fn consume_fpdus<'m>(
        &mut self,
        data: &[u8],
        digest: Option<u32>,
        ctx: &mut Ctx,
        mrs: &'m MrTable,
        held: &mut RxHeld<'m>,
    ) -> usize {
        debug_assert!(
            matches!(self.state, QpState::Rts | QpState::Closing)
                && !self.conn.as_ref().is_some_and(|c| matches!(
                    &c.mpa,
                    Mpa::Initiator(i) if i.phase() == nego::Phase::AwaitingFrame
                )),
            "consume_fpdus on a QP whose startup `consume` would still run"
        );
        let mut used = 0;
        let Some(mut d) = self.conn.as_mut().and_then(|c| c.deframer.take()) else {
            return used;
        };
        let by_digest = d.fpdus_by_digest();
        loop {
            // `digest` is the CRC32c of all of `data` (a segment's payload, from the pass
            // that verified its checksum: `Stack::set_payload_digest`), so only for the
            // first FPDU; the deframer uses it when that FPDU is all of `data`.
            let digest = if used == 0 { digest } else { None };
            match d.poll_digest(&data[used..], digest) {
                Ok((n, Some(ulpdu))) => {
                    used += n;
                    ctx.stats.fpdus_rx += 1;
                    match self.rx_ulpdu(&ulpdu, ctx, mrs, held) {
                        // The input ended with this FPDU (an aligned segment): no call
                        // for the empty rest.
                        Ok(()) if used == data.len() => break,
                        Ok(()) => {}
                        Err(RxFault::Protocol(e)) => {
                            // Out of rx_ulpdu's way: asked there, the steady path of a
                            // 64 B Write cost ~20 instructions more (callgrind).
                            if names_read_response(&ulpdu) {
                                self.read_response_refused();
                            }
                            self.fail_local(e, Some(&ulpdu), ctx);
                            used = data.len();
                            break;
                        }
                        Err(RxFault::RemoteTerminate(r)) => {
                            self.remote_terminate(r, ctx);
                            used = data.len();
                            break;
                        }
                    }
                }
                Ok((n, None)) => {
                    used += n;
                    break;
                }
                Err(e) => {
                    // CRC or marker error (MPA-8-*): Terminate with the MPA code, no copied
                    // header (the FPDU is not trustworthy).
                    self.fail_local(ProtocolError::Mpa(e), None, ctx);
                    used = data.len();
                    break;
                }
            }
        }
        ctx.stats.fpdus_rx_by_digest += d.fpdus_by_digest() - by_digest;
        if let Some(c) = self.conn.as_mut() {
            c.deframer = Some(d);
        }
        used
    }

    /// Validates and places one ULPDU (one DDP segment): a plain RDMA Write placed by
    /// [`Self::rx_plain_write`] if it can; else a fenced responder's first ULPDU
    /// ([`Self::rx_fenced`]), then the decode ([`plain_data`] or `Segment::parse`), RDMAP's
    /// checks, the STag lookup ([`Self::rx_lookup`]), DDP's validation, and the handler of
    /// the segment's buffer: [`Self::rx_tagged`], or one per untagged queue (QN 0 Sends and
    /// Immediate Data, QN 1 Read and Atomic Requests, QN 2 Terminates, QN 3 Atomic
    /// Responses).
    pub(super) fn rx_ulpdu<'m>(
        &mut self,
        ulpdu: &[u8],
        ctx: &mut Ctx,
        mrs: &'m MrTable,
        held: &mut RxHeld<'m>,
    ) -> Result<(), RxFault> {
        if fast_paths() && self.rx_plain_write(ulpdu, mrs, held, &mut ctx.stats) {
            return Ok(());
        }
        // The fence is a responder's first ULPDU's business only (and the ULPDUs until its
        // Reply is all out): out of line, the steady path tests one tag.
        if self
            .conn
            .as_ref()
            .is_none_or(|c| !matches!(c.mpa, Mpa::Done))
            && self.rx_fenced(ulpdu)?
        {
            return Ok(());
        }
        let seg = match plain_data(ulpdu).filter(|_| fast_paths()) {
            Some(seg) => seg,
            None => match parse_checked(ulpdu, self.rfc7306) {
                Ok(seg) => seg,
                Err(f) => return self.rx_malformed(ulpdu, f, ctx),
            },
        };
        // A QP on a shared receive queue claims the oldest buffer there for a message on
        // QN 0 when it holds none (module `srq`); none there: no buffer, as below. Apart,
        // so that a QP with buffers of its own pays nothing for giving one back.
        if self.rq.is_empty()
            && matches!(
                seg.repr.buffer,
                warpcore_proto::wire::ddp::DdpBuffer::Untagged { qn: qn::SEND, .. }
            )
            && self.shared.srq().is_some()
        {
            return self.rx_from_srq(ulpdu, &seg, ctx, mrs, held);
        }
        self.rx_segment(ulpdu, &seg, ctx, mrs, held)
    }

    /// A Read Response segment this side refused (its decode, DDP's checks of its tagged
    /// buffer, or RDMAP-5.2.2-5's of the Read it answers): Read Responses answer our Reads in order
    /// (RDMAP-5.2.2-4), so the Read it answers, the outstanding one whose request went out,
    /// is the request that failed. It completes with [`WcStatus::Fatal`] (this side
    /// detected a protocol error and terminated the stream; RDMAP-7.1-1), ahead of the
    /// flush of those behind it, rather than as flushed: the verbs give the failing request
    /// its own error (siw's `SIW_WC_GENERAL_ERR`). A status set already stays (a sink that
    /// went away: `LocalProtection`). An unsolicited response answers no Read.
    #[cold]
    #[inline(never)]
    fn read_response_refused(&mut self) {
        let Some(seq) = self
            .answerable_head()
            .filter(|h| h.atomic.is_none())
            .and_then(|h| h.seq)
        else {
            return;
        };
        if let Some(e) = self.entry_mut(seq) {
            e.status.get_or_insert(WcStatus::Fatal);
        }
    }

    /// What a ULPDU the decode refused with `fault` earns ([`parse_checked`]). DDP validates
    /// every untagged field of a message before RDMAP judges it (RDMAP-7.2-6, RDMAP-7.2-1,
    /// EXT-8.2-1; DDP-7.1-1..5, DDP-7.1-15): RDMAP's errors on an incoming message are those
    /// found once DDP delivered it (RDMAP-06 §7.1 rules 22 and 23; RDMAP-7.1-3/4), and DDP
    /// places or delivers nothing of a segment it refused. So the RDMAP faults of a message
    /// without ULP payload (Read Request, Terminate, the RFC 7306 messages) that the decode
    /// finds from its octets alone, an RDMAP header cut short or followed by octets, or a
    /// message not whole in one segment (L = 0 or MO > 0; `check_inbound`), all 0/2/07,
    /// come after DDP's QN, MSN, buffer and MO checks: a Read Request whose MSN is out of
    /// range and whose MO is not 0 earns DDP's 1/2/03, as it does from siw (which does not
    /// check MO), not 0/2/07. The checks the decode makes first stay first (DDP version,
    /// the DDP header's length, RDMAP version, opcode, buffer model, QN; siw's
    /// `siw_get_hdr` order, docs/decisions/0001 RDMAP item 5). Cold: a valid message never
    /// comes here, and the decode of one is unchanged.
    #[cold]
    #[inline(never)]
    fn rx_malformed(&mut self, ulpdu: &[u8], fault: RxFault, ctx: &mut Ctx) -> Result<(), RxFault> {
        let deferred = match Segment::parse(ulpdu) {
            Err(SegmentError::HeaderTruncated(op) | SegmentError::UnexpectedPayload(op)) => {
                Some(op)
            }
            // Decoded: the fault is `check_inbound`'s; its whole-message check is the one
            // DDP precedes (an RFC 7306 opcode not agreed is an opcode check, first as
            // siw makes it).
            Ok(seg)
                if !seg.repr.opcode.carries_payload()
                    && matches!(
                        fault,
                        RxFault::Protocol(ProtocolError::Rdmap(RdmapError::CatastrophicStream))
                    ) =>
            {
                Some(seg.repr.opcode)
            }
            _ => None,
        };
        // A Terminate whose control word says more than it holds is the peer's verdict
        // (`segment_fault`), not an error of ours to rank.
        let Some(opcode) = deferred.filter(|_| matches!(fault, RxFault::Protocol(_))) else {
            return Err(fault);
        };
        let Ok(ddp) = DdpSegment::new_checked(ulpdu).and_then(|v| DdpRepr::parse(&v)) else {
            return Err(fault);
        };
        // Every message without ULP payload is untagged (the decode checked the T bit).
        let qn = match ddp.buffer {
            DdpBuffer::Untagged { qn, .. } => qn,
            DdpBuffer::Tagged { .. } => return Err(fault),
        };
        let verdict = |q: &mut Self, _: &mut Ctx| q.ddp_before_rdmap(ulpdu, &ddp, opcode, fault);
        // Immediate Data on QN 0 of a QP on a shared receive queue that holds no buffer:
        // DDP looks for the buffer there, as `rx_from_srq` does (given back: the message
        // fails either way).
        if qn == qn::SEND && self.rq.is_empty() && self.shared.srq().is_some() {
            self.with_srq_buffer(ctx, verdict)
        } else {
            verdict(self, ctx)
        }
    }

    /// [`Self::rx_malformed`]'s verdict on the untagged DDP header `ddp` of `ulpdu`, a
    /// message of `opcode` that RDMAP refuses with `fault`: DDP's error if DDP refuses the
    /// segment (its validation as [`Self::rx_segment`] makes it), `fault` otherwise,
    /// nothing if DDP already failed (DDP-7.1-17).
    fn ddp_before_rdmap(
        &mut self,
        ulpdu: &[u8],
        ddp: &DdpRepr,
        opcode: Opcode,
        fault: RxFault,
    ) -> Result<(), RxFault> {
        let untagged = self.untagged_view(matches!(
            opcode,
            Opcode::ImmediateData | Opcode::ImmediateDataSe
        ));
        let Some(conn) = self.conn.as_mut() else {
            return Err(fault);
        };
        let payload_len = ulpdu.len().saturating_sub(ddp.header_len());
        let no_tag = TaggedView(Err(TaggedFault::InvalidStag));
        match conn
            .ddp_rx
            .handle_header(ddp, payload_len, &no_tag, &untagged)?
        {
            Some(_) => Err(fault),
            None => Ok(()),
        }
    }

    /// The untagged queues as DDP sees them for a segment of this QP; `immediate`: the
    /// segment is Immediate Data, which takes a receive buffer whatever its length (the 8
    /// octets go into the completion, not into the buffer: EXT-6.3-2; departure in
    /// docs/engine.md).
    #[inline(always)]
    fn untagged_view(&self, immediate: bool) -> UntaggedView {
        UntaggedView {
            rq_head_len: self.rq.front().map(|r| {
                if immediate {
                    r.sges.total_len().max(8)
                } else {
                    r.sges.total_len()
                }
            }),
            rfc7306: self.rfc7306,
        }
    }

    /// [`Self::rx_ulpdu`] of an untagged Send on QN 0 for a QP on a shared receive queue
    /// that holds no buffer: claims the oldest there, then handles the segment.
    #[inline(never)]
    fn rx_from_srq<'m>(
        &mut self,
        ulpdu: &[u8],
        seg: &Segment<'_>,
        ctx: &mut Ctx,
        mrs: &'m MrTable,
        held: &mut RxHeld<'m>,
    ) -> Result<(), RxFault> {
        self.with_srq_buffer(ctx, |q, ctx| q.rx_segment(ulpdu, seg, ctx, mrs, held))
    }

    /// Runs `handle` for a message on QN 0 of a QP on a shared receive queue that holds no
    /// buffer, with the oldest buffer there claimed for it (if there is one); a failed
    /// `handle` gives it back.
    #[inline(always)]
    fn with_srq_buffer(
        &mut self,
        ctx: &mut Ctx,
        handle: impl FnOnce(&mut Self, &mut Ctx) -> Result<(), RxFault>,
    ) -> Result<(), RxFault> {
        let mut claimed = false;
        let mut reached = None;
        if let Some(q) = self.shared.srq() {
            if let Some((wr, r)) = q.claim() {
                self.shared.claim_rq();
                self.rq.push_back(wr);
                claimed = true;
                reached = r;
            }
        }
        let res = handle(self, ctx);
        // A segment that fails the checks that need the buffer (DDP's, a Send longer than
        // it) or its placement fails the QP: the buffer it claimed for it goes back to the
        // shared queue, ahead of the buffers there (module `srq`), for the other QPs,
        // instead of being flushed with this QP (departure 23). The claim is undone, the
        // limit's disarming with it: no buffer left the queue, so no limit event.
        if claimed && res.is_err() && self.rq.len() == 1 {
            if let (Some(wr), Some(q)) = (self.rq.pop_front(), self.shared.srq()) {
                match q.give_back(wr, reached.take()) {
                    Ok(()) => self.shared.release_rq(),
                    // No room (buffers posted meanwhile): flushed with the QP, as before;
                    // the claim stands, and so does its limit event.
                    Err((wr, r)) => {
                        self.rq.push_front(wr);
                        reached = r;
                    }
                }
            }
        }
        // The verbs' IBV_EVENT_SRQ_LIMIT_REACHED, for a claim that kept its buffer.
        if reached.is_some() {
            if let Some(q) = self.shared.srq() {
                ctx.events
                    .push_back(CmEvent::SrqLimitReached { srq: q.id() });
            }
        }
        res
    }

    /// [`Self::rx_ulpdu`] of a segment decoded (and, for a QP on a shared receive queue,
    /// its buffer claimed: [`Self::rx_from_srq`]). Inlined into both callers.
    #[inline(always)]
    fn rx_segment<'m>(
        &mut self,
        ulpdu: &[u8],
        seg: &Segment<'_>,
        ctx: &mut Ctx,
        mrs: &'m MrTable,
        held: &mut RxHeld<'m>,
    ) -> Result<(), RxFault> {
        let opcode = seg.repr.opcode;
        let immediate = matches!(opcode, Opcode::ImmediateData | Opcode::ImmediateDataSe);
        // A Send with Invalidate may wait for its region's guards to drain, ours included.
        if seg.repr.invalidate_stag().is_some() {
            *held = None;
        }
        let stats = &mut ctx.stats;
        let (guard, tagged) = self.rx_lookup(seg, mrs, held)?;
        // Immediate Data consumes a receive buffer whatever its length: the 8 octets go
        // into the completion, not into the buffer (EXT-6.3-2; departure in docs/engine.md).
        let untagged = self.untagged_view(immediate);
        let conn = self
            .conn
            .as_mut()
            .ok_or(RxFault::Protocol(ProtocolError::Mpa(
                MpaError::LocalCatastrophic,
            )))?;
        // The DDP header as `Segment::parse` decoded it (its version already checked first,
        // DDP-4.1-10), with the wire's RsvdULP octet: DDP validates it without parsing the
        // header a second time.
        let ddp = warpcore_proto::wire::ddp::DdpRepr {
            last: seg.repr.last,
            version: DDP_VERSION,
            rsvd_ulp: ulpdu.get(1).copied().unwrap_or(0),
            buffer: seg.repr.buffer,
        };
        let payload_len = ulpdu.len().saturating_sub(ddp.header_len());
        let placement = match conn
            .ddp_rx
            .handle_header(&ddp, payload_len, &tagged, &untagged)
        {
            Ok(Some(p)) => p,
            Ok(None) => return Ok(()),
            // A Send longer than the QP's own head receive (DDP-7.1-4, Terminate 1/2/05):
            // that receive fails with a local length error, as the verbs report a receive
            // too short for its message (siw's SIW_WC_LOC_LEN_ERR), ahead of the flush of
            // those behind it (RDMAP-6.2.1-2). A buffer claimed from a shared receive
            // queue goes back to it instead (`with_srq_buffer`, departure 23).
            Err(DdpError::UntaggedTooLong)
                if !immediate
                    && self.shared.srq().is_none()
                    && matches!(ddp.buffer, DdpBuffer::Untagged { qn: qn::SEND, .. }) =>
            {
                self.complete_recv(Completion {
                    status: WcStatus::LocalLength,
                    ..self.recv_completion()
                });
                return Err(DdpError::UntaggedTooLong.into());
            }
            Err(e) => return Err(e.into()),
        };
        match placement {
            Placement::Tagged(p) => self.rx_tagged(ulpdu, &p, opcode, guard, stats),
            Placement::Untagged(p) => match p.qn {
                qn::SEND if immediate => self.rx_immediate(seg, &p),
                qn::SEND => self.rx_send(ulpdu, seg, &p, mrs, stats),
                qn::READ_REQUEST if opcode == Opcode::AtomicRequest => {
                    self.rx_atomic_request(seg, mrs)
                }
                qn::ATOMIC_RESPONSE => self.rx_atomic_response(seg, mrs),
                qn::READ_REQUEST => self.rx_read_request(seg, mrs),
                qn::TERMINATE => {
                    let RdmapHeader::Terminate(t) = seg.repr.header else {
                        return Err(RdmapError::UnexpectedOpcode.into());
                    };
                    // Delivered to the ULP decoded (RDMAP-5.4-5); we stop sending
                    // (RDMAP-5.4-7) and close.
                    Err(RxFault::RemoteTerminate(TerminateReport::decode(&t)))
                }
                _ => Err(DdpError::UntaggedInvalidQn.into()),
            },
        }
    }

    /// The plain RDMA Write's fast path (not taken under `core::set_general_paths_only`;
    /// held to the general path by `tests/engine_rx_fast_paths.rs`): a segment whose two
    /// control octets are exactly those we send for an RDMA Write (DDP: T = 1, reserved 0,
    /// DV 1, either L; RDMAP: RV 1, reserved 0, opcode Write), with payload, on a stream past
    /// its MPA fence whose DDP has not failed, is decoded from its fixed 14-octet header and
    /// placed through the held guard or a lookup of its own, as [`Self::rx_lookup`] and
    /// [`Self::rx_tagged`] would. For such a segment `Segment::parse`, `check_inbound` and
    /// `DdpReceiver::handle_header` decide nothing that the lookup (STag, PD, stream and the
    /// remote write right: DDP-7.1-10/11, DDP-8.2-1, RDMAP-8.1.1-6) and the guard's bounds
    /// check (DDP-7.1-12..14, the same range on the same registration) do not decide here,
    /// so they are skipped. Anything else, and every lookup or bounds fault, returns false
    /// with nothing placed: the general path then handles the segment, faults and
    /// Terminates included, as if this had not run.
    #[inline(always)]
    fn rx_plain_write<'m>(
        &mut self,
        ulpdu: &[u8],
        mrs: &'m MrTable,
        held: &mut RxHeld<'m>,
        stats: &mut CoreStats,
    ) -> bool {
        /// DDP control octet: T = 1, reserved bits 0, DDP version (DDP-4.1-10); L is masked.
        const DDP_TAGGED: u8 = 0x80 | DDP_VERSION;
        const DDP_L: u8 = 0x40;
        const RDMAP_WRITE: u8 = Control::new(Opcode::Write).0;
        if ulpdu.len() <= TAGGED_HEADER_LEN
            || ulpdu[0] & !DDP_L != DDP_TAGGED
            || ulpdu[1] != RDMAP_WRITE
        {
            return false;
        }
        let Some(c) = self.conn.as_ref() else {
            return false;
        };
        if !matches!(c.mpa, Mpa::Done) || c.ddp_rx.failed().is_some() {
            return false;
        }
        let (h, data) = ulpdu.split_at(TAGGED_HEADER_LEN);
        let stag = Stag(u32::from_be_bytes([h[2], h[3], h[4], h[5]]));
        let to = u64::from_be_bytes([h[6], h[7], h[8], h[9], h[10], h[11], h[12], h[13]]);
        let need = HeldRight::RemoteWrite;
        let stream = self.stream;
        let hit = held.as_ref().is_some_and(|(g, s, a)| {
            g.stag() == stag && g.pd() == self.pd && *s == stream && *a == need
        });
        if !hit {
            // As in `rx_lookup`: the old guard goes first.
            *held = None;
            match mrs.lookup_remote(stag, self.pd, stream, need.access()) {
                Ok(g) => *held = Some((g, stream, need)),
                Err(_) => return false,
            }
        }
        let Some((g, _, _)) = held.as_ref() else {
            return false;
        };
        // The guard checks the range before it copies: a fault places nothing.
        if g.place_at(to, data).is_err() {
            return false;
        }
        stats.placed_octets += data.len() as u64;
        true
    }

    /// MPA fencing and the peer-to-peer RTR (MPA-7.1.2-16, MPA2-5-1) on a responder's first
    /// ULPDU. Returns whether the ULPDU was the RTR and is consumed.
    ///
    /// An initiator that finds no RTR in common sends a Terminate instead of an RTR
    /// (MPA2-9.2-10/11): it is decoded like any Terminate, so our user learns the peer's
    /// verdict rather than seeing us answer a Terminate with a Terminate. Parsed here only
    /// while the fence holds (the first ULPDU), not per FPDU.
    #[cold]
    #[inline(never)]
    fn rx_fenced(&mut self, ulpdu: &[u8]) -> Result<bool, RxFault> {
        let conn = self
            .conn
            .as_mut()
            .ok_or(RxFault::Protocol(ProtocolError::Mpa(
                MpaError::LocalCatastrophic,
            )))?;
        // A Terminate in place of the RTR (MPA2-9.2-10/11) is the peer's verdict, to be
        // delivered (RDMAP-5.4-5), not a bad RTR to answer: also one whose HdrCt bits
        // announce headers it does not hold, which `segment_fault` reports as the peer's.
        if matches!(conn.mpa, Mpa::Responder(_))
            && match Segment::parse(ulpdu) {
                Ok(s) => matches!(s.repr.header, RdmapHeader::Terminate(_)),
                Err(e) => truncated_terminate(ulpdu, e).is_some(),
            }
        {
            conn.mpa = Mpa::Done;
        }
        let Mpa::Responder(r) = &mut conn.mpa else {
            return Ok(false);
        };
        let first = r
            .handle_first_ulpdu(ulpdu)
            .map_err(|e| ProtocolError::Mpa(e.mpa_error()))?;
        // The fence is lifted once the Reply is all with TCP too: until then the
        // responder keeps what is left of it for the transmit poller (`tx_control`
        // switches to `Mpa::Done` when it is out). Dropped here, the Reply was lost
        // when the initiator's first FPDU came before our Reply left.
        if r.can_send_fpdus() {
            conn.mpa = Mpa::Done;
        }
        match first {
            None => Ok(false),
            Some(RtrType::Write) => Ok(true),
            Some(RtrType::Send) => {
                // The Send RTR took MSN 1 of QN 0 and consumes no receive buffer.
                let _ = conn.ddp_rx.set_expected_msn(qn::SEND, 2);
                Ok(true)
            }
            Some(RtrType::Read) => {
                // The Read RTR takes MSN 1 of QN 1 and one IRD credit; it is answered
                // with a zero-length Read Response (RFC 6581 §9.2).
                let _ = conn.ddp_rx.set_expected_msn(qn::READ_REQUEST, 2);
                if let Ok(seg) = Segment::parse(ulpdu) {
                    if let RdmapHeader::ReadRequest(rr) = seg.repr.header {
                        self.ird.admit()?;
                        self.irq.push_back(Inbound::Read(ReadResponsePlan {
                            sink_stag: rr.sink_stag,
                            sink_to: rr.sink_to,
                            src_stag: rr.src_stag,
                            src_to: rr.src_to,
                            len: 0,
                        }));
                    }
                }
                Ok(true)
            }
        }
    }

    /// The one STag lookup per segment: key, protection domain and access here, bounds on
    /// the guard when placing (DDP-7.1-10..14, DDP-8.2-1, RDMAP-8.1.1-6). Zero-length tagged
    /// segments are not looked up at all (DDP-5.2-11). A lookup fault is DDP's to report
    /// (through the view), except for our own Read whose sink went away under it.
    #[inline(always)]
    fn rx_lookup<'h, 'm>(
        &mut self,
        seg: &Segment<'_>,
        mrs: &'m MrTable,
        held: &'h mut RxHeld<'m>,
    ) -> Result<(Option<&'h MrGuard<'m>>, TaggedView), RxFault> {
        let warpcore_proto::wire::ddp::DdpBuffer::Tagged { stag, .. } = seg.repr.buffer else {
            return Ok((None, TaggedView(Err(TaggedFault::InvalidStag))));
        };
        if seg.payload.is_empty() {
            return Ok((None, TaggedView(Err(TaggedFault::InvalidStag))));
        }
        let opcode = seg.repr.opcode;
        let need = if opcode == Opcode::ReadResponse {
            HeldRight::LocalWrite
        } else {
            HeldRight::RemoteWrite
        };
        let stream = self.stream;
        // The held guard answers as a fresh lookup would: same STag, PD, stream and right.
        let hit = held.as_ref().is_some_and(|(g, s, a)| {
            g.stag() == Stag(stag) && g.pd() == self.pd && *s == stream && *a == need
        });
        if !hit {
            // The old guard goes first: this thread never holds two for one segment.
            *held = None;
            match mrs.lookup_remote(Stag(stag), self.pd, stream, need.access()) {
                Ok(g) => *held = Some((g, stream, need)),
                Err(_)
                    if opcode == Opcode::ReadResponse
                        && self.answerable_head().is_some_and(|h| {
                            // A Read of no octets has no sink memory that could go
                            // away: octets under its (absent) sink STag are the peer's
                            // error, for DDP to report.
                            h.atomic.is_none() && h.len != 0 && h.sink_stag == stag
                        }) =>
                {
                    // The sink of our own Read went away under it (deregistered or
                    // invalidated locally): a local fault, not the peer's (departure 8).
                    if let Some(seq) = self.orq.front().and_then(|h| h.seq) {
                        if let Some(e) = self.entry_mut(seq) {
                            e.status = Some(WcStatus::LocalProtection);
                        }
                    }
                    return Err(RdmapError::LocalCatastrophic.into());
                }
                Err(f) => return Ok((None, TaggedView(Err(f.tagged_fault())))),
            }
        }
        Ok(match held.as_ref() {
            Some((g, _, _)) => (Some(g), TaggedView(Ok(g.tagged_region()))),
            None => (None, TaggedView(Err(TaggedFault::InvalidStag))),
        })
    }

    /// A tagged segment DDP accepted: an RDMA Write (with or without Immediate) or a Read
    /// Response, placed at its tagged offset through the lookup's guard.
    #[inline(always)]
    fn rx_tagged(
        &mut self,
        ulpdu: &[u8],
        p: &TaggedPlacement,
        opcode: Opcode,
        guard: Option<&MrGuard<'_>>,
        stats: &mut CoreStats,
    ) -> Result<(), RxFault> {
        let data = ulpdu
            .get(p.payload_offset..p.payload_offset + p.payload_len)
            .unwrap_or(&[]);
        if opcode == Opcode::ReadResponse {
            // Read Responses answer our Reads in order (RDMAP-5.2.2-4, RDMAP-5.5-13).
            // RDMAP-5.2.2-5's optional checks are all made, before any octet is placed:
            // the STag, TO and length the Read Request named. The sink's registration
            // needs only local write access, so without them a peer could write anywhere
            // in it outside the Read's sink. A segment that leaves the named range, or
            // does not continue where the last one ended, is a base or bounds violation
            // of the tagged buffer the Read named (as siw's `siw_rresp_check_ntoh`).
            let head = self
                .answerable_head()
                .filter(|h| h.atomic.is_none())
                .ok_or(RdmapError::UnexpectedOpcode)?;
            if !data.is_empty() {
                if p.stag != head.sink_stag {
                    return Err(DdpError::TaggedInvalidStag.into());
                }
                let end = self.read_placed + data.len() as u64;
                if Some(p.to) != head.sink_to.checked_add(self.read_placed)
                    || end > u64::from(head.len)
                {
                    return Err(DdpError::TaggedBaseOrBounds.into());
                }
            }
            // The last segment must complete the Read: a response shorter than the
            // Read Request asked for is invalid too, and surfaces as a Terminate
            // (RDMAP-5.2.2-5, RDMAP-7.1-3), not only as the Read's error completion.
            if p.last && self.read_placed + data.len() as u64 != u64::from(head.len) {
                return Err(RdmapError::OperationUnspecified.into());
            }
        }
        if let Some(g) = guard {
            // DDP checked the range on this very registration; the guard checks it
            // again as it copies, so no octet can land outside the region.
            g.place_at(p.to, data).map_err(BoundsFault::ddp_error)?;
            stats.placed_octets += data.len() as u64;
        }
        if opcode == Opcode::ReadResponse {
            self.read_placed += data.len() as u64;
            if p.last {
                if let Some(head) = self.orq.pop_front() {
                    let placed = self.read_placed;
                    self.read_placed = 0;
                    if let Some(seq) = head.seq {
                        // Checked above: the response covered the Read exactly.
                        debug_assert_eq!(placed, u64::from(head.len));
                        if let Some(e) = self.entry_mut(seq) {
                            e.byte_len = placed as u32;
                            e.status = Some(WcStatus::Success);
                        }
                    }
                    self.retire_sq();
                }
            }
        }
        Ok(())
    }

    /// Immediate Data on QN 0: one message in one segment (check_inbound); it completes the
    /// head receive in MSN order with the value (EXT-6.3-2, EXT-6.3-3, RDMAP-5.5-2).
    #[inline(always)]
    fn rx_immediate(&mut self, seg: &Segment<'_>, p: &UntaggedPlacement) -> Result<(), RxFault> {
        let RdmapHeader::ImmediateData(h) = seg.repr.header else {
            return Err(RdmapError::UnexpectedOpcode.into());
        };
        // A segment of a message DDP has already seen segments of (a Send begun with the
        // same MSN): the message is not whole in one segment, so it is malformed as
        // check_inbound rules for L = 0 or MO > 0 (RDMAP-7.2-2, EXT-6.3-7), not a RecvImm
        // that would drop the octets placed before it.
        if !p.first {
            return Err(RdmapError::CatastrophicStream.into());
        }
        if p.message_len.is_some() {
            self.complete_recv(Completion {
                opcode: WcOpcode::RecvImm,
                byte_len: 0,
                solicited: seg.repr.opcode == Opcode::ImmediateDataSe,
                imm: Some(u64::from_be_bytes(h.data)),
                ..self.recv_completion()
            });
        }
        Ok(())
    }

    /// A Send segment on QN 0 (with or without Invalidate, Solicited Event): scattered over
    /// the head receive's SGEs at its message offset; the last one completes the receive.
    #[inline(always)]
    fn rx_send(
        &mut self,
        ulpdu: &[u8],
        seg: &Segment<'_>,
        p: &UntaggedPlacement,
        mrs: &MrTable,
        stats: &mut CoreStats,
    ) -> Result<(), RxFault> {
        let data = ulpdu
            .get(p.payload_offset..p.payload_offset + p.payload_len)
            .unwrap_or(&[]);
        let head = self.rq.front().ok_or(DdpError::UntaggedNoBuffer)?;
        let inv_stag = seg.repr.invalidate_stag();
        if let Some(inv) = inv_stag {
            // RDMAP-5.3-11/12, RDMAP-7.2-4/5, RDMAP-8.1.1-8: every segment
            // carries the Invalidate STag (RDMAP-4.1-3); it is checked before
            // the segment is placed, so a refused Send with Invalidate places
            // nothing (the security matrix).
            mrs.check_invalidate_remote(Stag(inv), self.pd, self.stream)
                .map_err(invalidate_error)?;
        }
        match scatter(mrs, self.pd, head.sges.as_slice(), u64::from(p.mo), data) {
            Ok(()) => {}
            Err(DdpError::LocalCatastrophic) => {
                // The receive buffer's region went away under the posted receive (its
                // SGEs were checked at post): our fault, not the peer's. The receive
                // completes with a local protection error, the stream ends with a local
                // catastrophic Terminate (departure 8, as for a Read's sink).
                self.complete_recv(Completion {
                    status: WcStatus::LocalProtection,
                    ..self.recv_completion()
                });
                return Err(RdmapError::LocalCatastrophic.into());
            }
            Err(e) => return Err(e.into()),
        }
        stats.placed_octets += data.len() as u64;
        if let Some(len) = p.message_len {
            let mut invalidated = None;
            if let Some(inv) = inv_stag {
                // Invalidated at delivery, checked again: a local operation
                // (Local Invalidate, bind, deregistration) may have changed the
                // STag since the check above; then the Terminate goes out now
                // and the placed payload is flushed with the receive
                // (`MrTable::invalidate_remote`; docs/engine.md departure 24).
                mrs.invalidate_remote(Stag(inv), self.pd, self.stream)
                    .map_err(invalidate_error)?;
                invalidated = Some(inv);
            }
            // Delivered once, in MSN order, after DDP delivery (RDMAP-5.5-2,
            // RDMAP-5.5-9, DDP-5.4-1).
            self.complete_recv(Completion {
                byte_len: len,
                solicited: seg.repr.opcode.is_solicited(),
                invalidated,
                ..self.recv_completion()
            });
        }
        Ok(())
    }

    /// The oldest outstanding Read or Atomic Request, once its request has gone out whole:
    /// the one a Read or Atomic Response answers (RDMAP-5.2.2-4, EXT-5.2.2-6). While the
    /// request is still the message being sent (it waits for room in the TCP send
    /// buffer) nothing answers it yet: a response then is unsolicited (departure 3), and
    /// must not complete a request the transmit path is still sending.
    #[inline(always)]
    fn answerable_head(&self) -> Option<OrqEntry> {
        let head = self.orq.front().copied()?;
        let sending = head.seq.is_some()
            && matches!(self.tx.as_ref().map(|m| &m.src), Some(TxSrc::Sq(s)) if Some(*s) == head.seq);
        (!sending).then_some(head)
    }

    /// A successful receive completion of this QP, to be filled in ([`Self::complete_recv`]).
    #[inline(always)]
    fn recv_completion(&self) -> Completion {
        Completion {
            wr_id: 0,
            qp: self.id,
            opcode: WcOpcode::Recv,
            status: WcStatus::Success,
            byte_len: 0,
            solicited: false,
            invalidated: None,
            imm: None,
            atomic_orig: None,
        }
    }

    /// Completes the head receive with `c` (its wr_id filled in here), in MSN order
    /// (RDMAP-5.5-2).
    #[inline(always)]
    fn complete_recv(&mut self, c: Completion) {
        if let Some(r) = self.rq.pop_front() {
            self.shared.release_rq();
            self.recv_cq.push(Completion {
                wr_id: r.wr_id,
                ..c
            });
        }
    }

    /// Fails the stream if the peer's FIN ended it inside a message, and says whether it
    /// did. `queued`: the octets TCP still holds before the FIN (the check waits for them
    /// to be read). A graceful close ends a stream between messages (RDMAP-06 §6.2: ULP
    /// Graceful Termination, then the LLP's); octets of an FPDU not whole, or a DDP message
    /// whose L = 1 segment never came, at the peer's FIN mean the stream was lost midway:
    /// MPA error 1, "TCP connection closed" (MPA-8-1, MPA-8-5), a fatal error DDP reports
    /// to its ULP with every outstanding request completed in error (DDP-6.2.2-1/2,
    /// RDMAP-6.2.1-2), and a Terminate on our half, still open (RDMAP-6.2.1-1; 2/0/01).
    /// The receive the message was filling, and the Read a response was filling, complete
    /// with [`WcStatus::Fatal`] ahead of the flush; neither completes as a success, and
    /// the user is told `Error { LocalTerminate }`, not `Disconnected { Closed }`. A fenced
    /// responder's close is the startup's (`rx_one`).
    pub(super) fn fail_if_fin_inside_message(&mut self, queued: usize, ctx: &mut Ctx) -> bool {
        if queued > 0 || !matches!(self.state, QpState::Rts | QpState::Closing) {
            return false;
        }
        let Some(c) = self.conn.as_ref() else {
            return false;
        };
        if !c.peer_closed || !matches!(c.mpa, Mpa::Done) {
            return false;
        }
        let in_fpdu = c.deframer.as_ref().is_some_and(|d| d.in_fpdu());
        let in_send = c.ddp_rx.failed().is_none() && c.ddp_rx.in_progress(qn::SEND);
        let in_read = self.read_placed > 0;
        if !(in_fpdu || in_send || in_read) {
            return false;
        }
        if in_send {
            self.complete_recv(Completion {
                status: WcStatus::Fatal,
                ..self.recv_completion()
            });
        }
        if in_read {
            self.read_response_refused();
        }
        self.fail_local(ProtocolError::Mpa(MpaError::TcpLost), None, ctx);
        true
    }

    /// Whether a request that needs an answer arrived after our FIN: a graceful close sends
    /// FIN only once nothing is owed (`tx_close_if_drained`), so a Read or Atomic Request
    /// that crossed it can never be answered, not even by a Terminate. It is dropped
    /// (no IRD credit taken); the requester fails it once it has read up to our FIN
    /// (`Qp::fail_unanswerable`), instead of both sides waiting for ever.
    #[inline]
    fn answers_after_fin(&self) -> bool {
        self.conn.as_ref().is_some_and(|c| c.fin_sent)
    }

    /// An Atomic Request on QN 1: admitted under IRD, checked, and queued to be executed
    /// when its turn to be answered comes.
    #[inline(always)]
    fn rx_atomic_request(&mut self, seg: &Segment<'_>, mrs: &MrTable) -> Result<(), RxFault> {
        let RdmapHeader::AtomicRequest(ar) = seg.repr.header else {
            return Err(RdmapError::UnexpectedOpcode.into());
        };
        if self.answers_after_fin() {
            return Ok(());
        }
        // Atomic Requests count against IRD next to Read Requests (EXT-5.2-1).
        self.ird.admit()?;
        // AOpCode (0/2/06, EXT-5.2.1-7), then STag, REMOTE_ATOMIC right and bounds (the
        // remote protection codes; proto's `handle_atomic_request`), then the alignment of
        // the word in memory (0/2/07), which proto cannot see. A region grants atomics only
        // with REMOTE_ATOMIC, so that right stands for both remote rights proto's check
        // asks for.
        //
        // EXT-5.2.1-2 (RFC 7306 §5.2.1, §8.2): the Remote Tagged Offset "MAY start at an
        // arbitrary offset but MUST represent a ULP Buffer address that is 64-bit
        // aligned". The rule is on the address the TO resolves to, not on the TO: a
        // registration whose base TO is not congruent to its address mod 8
        // (`register_with_base`, a fast registration, an unaligned buffer registered
        // zero-based) maps an unaligned TO to an aligned word and an aligned TO to an
        // unaligned one. Only the address is checked (as rxe's `rxe_mr_do_atomic_op`
        // checks the page offset, not the iova), here where the request is received, so
        // the Terminate is 0/2/07 with its DDP header and nothing behind it on the stream
        // is placed; `execute_atomic` checks it again before the 8-octet atomic access.
        let pd = self.pd;
        let stream = self.stream;
        let mut misaligned = false;
        let checked = handle_atomic_request(&ar, |stag| {
            let g = mrs
                .lookup_remote(Stag(stag), pd, stream, Access::empty())
                .map_err(LookupFault::stag_fault)?;
            let atomic_ok = g.access().contains(Access::REMOTE_ATOMIC);
            misaligned = g
                .bounds(ar.remote_to, 8)
                .is_ok_and(|off| matches!(g.atomic(off), Err(BoundsFault::Misaligned)));
            let mut a = g.access_region();
            a.remote_read = atomic_ok;
            a.remote_write = atomic_ok;
            Ok(a)
        })
        .and_then(|op| {
            if misaligned {
                Err(BoundsFault::Misaligned.rdmap_error())
            } else {
                Ok(op)
            }
        });
        if let Err(e) = checked {
            self.ird.retire();
            return Err(e.into());
        }
        // Executed when its turn comes to be answered, after every earlier
        // Read Response was read (responses in request order, EXT-5.2.2-6).
        self.irq.push_back(Inbound::Atomic(ar));
        Ok(())
    }

    /// An Atomic Response on QN 3: answers the head of the outstanding queue; the original
    /// value goes into the atomic's local SGE and the atomic completes in order.
    #[inline(always)]
    fn rx_atomic_response(&mut self, seg: &Segment<'_>, mrs: &MrTable) -> Result<(), RxFault> {
        let RdmapHeader::AtomicResponse(resp) = seg.repr.header else {
            return Err(RdmapError::UnexpectedOpcode.into());
        };
        // Responses come back in request order, Reads and Atomics together;
        // one that answers nothing outstanding is an unexpected opcode (as an
        // unsolicited Read Response, departure 3).
        let head = self.answerable_head();
        let Some(head) = head.filter(|h| h.atomic == Some(resp.orig_request_id)) else {
            return Err(RdmapError::UnexpectedOpcode.into());
        };
        self.orq.pop_front();
        let orig = resp.orig_value;
        if let Some(seq) = head.seq {
            let sink = self
                .entry_mut(seq)
                .and_then(|e| e.wr.sges.as_slice().first().copied());
            let mut status = WcStatus::Success;
            if let Some(s) = sink {
                // The original value into the local SGE in host byte order,
                // as ibverbs returns it.
                let ok = mrs
                    .lookup_local(Stag(s.stag), self.pd, true)
                    .ok()
                    .is_some_and(|g| g.place_at(s.to, &orig.to_ne_bytes()).is_ok());
                if !ok {
                    status = WcStatus::LocalProtection;
                }
            }
            if let Some(e) = self.entry_mut(seq) {
                e.status = Some(status);
                e.atomic_orig = Some(orig);
            }
            // The local SGE's region went away under the posted atomic: the
            // stream ends with a local catastrophic Terminate (departure 8),
            // the atomic keeps its local protection completion.
            if status != WcStatus::Success {
                return Err(RdmapError::LocalCatastrophic.into());
            }
        }
        self.retire_sq();
        Ok(())
    }

    /// A Read Request on QN 1: admitted under IRD (RDMAP-6.1-2: a Read beyond it breaks the
    /// negotiated ORD), its source checked, and queued for a Read Response.
    #[inline(always)]
    fn rx_read_request(&mut self, seg: &Segment<'_>, mrs: &MrTable) -> Result<(), RxFault> {
        let RdmapHeader::ReadRequest(rr) = seg.repr.header else {
            return Err(RdmapError::UnexpectedOpcode.into());
        };
        if self.answers_after_fin() {
            return Ok(());
        }
        self.ird.admit()?;
        let plan = handle_read_request(&rr, |stag| {
            mrs.lookup_remote(Stag(stag), self.pd, self.stream, Access::empty())
                .map(|g| g.access_region())
                .map_err(LookupFault::stag_fault)
        });
        let plan = match plan {
            Ok(p) => p,
            Err(e) => {
                self.ird.retire();
                return Err(e.into());
            }
        };
        self.irq.push_back(Inbound::Read(plan));
        Ok(())
    }
}

impl<D: PollDevice> EngineCore<D> {
    /// The stack's poll (an rx burst, timers, transmit), with in-order payload placed
    /// straight from the received frames (issue 12, item 2): while a connection's TCP
    /// receive queue is empty, each in-order segment's payload is lent to [`Qp::consume`]
    /// as it is parsed, so whole FPDUs are deframed (CRC checked) and placed into
    /// registered memory from the mbuf, never copied into the TCP's queue first. Only a QP
    /// past its startup (RTS, MPA done, peer not closed) takes octets this way; anything
    /// else, and whatever `consume` leaves, is queued by TCP and read by [`Self::poll_rx`].
    #[inline]
    pub(super) fn poll_stack(&mut self, now: Instant) -> bool {
        let EngineCore {
            stack,
            qps,
            ctx,
            conn_qp,
            tx_ready,
            txrec,
            rx_mrs,
            rx_settled,
            ..
        } = self;
        let mrs: &MrTable = rx_mrs;
        let mut held: RxHeld<'_> = None;
        // Made when the stack runs a transmit pass, after every delivery of its rx burst,
        // and dropped when the pass ends: the pass's guard (`txrec::TxHeld`), as
        // `transmit`'s, with nothing of this core's engine code (a Send with Invalidate
        // waiting for its region's guards) running while it is held, and nothing for a
        // poll that sends nothing to set up or drop (the idle loop).
        let make_fill = move || {
            let mut tx_held: txrec::TxHeld<'_> = None;
            move |c, t, at, dst: &mut [u8], sum| txrec.fill(c, t, at, dst, sum, mrs, &mut tx_held)
        };
        let work = stack.poll_with_fill_pass(
            now,
            |tcp, data, digest| {
                let Some(&i) = conn_qp.get(tcp.slot()) else {
                    return 0;
                };
                let i = i as usize;
                let Some(Some(q)) = qps.get_mut(i) else {
                    return 0;
                };
                let steady = q.state == QpState::Rts
                    && q.conn.as_ref().is_some_and(|c| {
                        c.tcp == tcp && matches!(c.mpa, Mpa::Done) && !c.peer_closed
                    });
                if !steady {
                    return 0;
                }
                // Steady: `consume`'s startup steps have nothing to do.
                let n = q.consume_fpdus(data, digest, ctx, mrs, &mut held);
                ctx.stats.rx_in_place_octets += n as u64;
                // Received octets may owe the peer something (as in `poll_rx`); a QP left
                // settled (a Write or Send placed) owes nothing: checked below, once its
                // records sent from memory may be read.
                if tx_settled_but_txrec(q) {
                    rx_settled.push(i);
                } else {
                    tx_ready.mark(i);
                }
                n
            },
            make_fill,
        );
        drop(held);
        if self.txrec.has_failed() {
            self.fail_unfillable();
        }
        if !self.rx_settled.is_empty() {
            let mut settled = std::mem::take(&mut self.rx_settled);
            for &i in &settled {
                // The rest of `tx_settled` was found in the pass; what ran since and may
                // have given the QP work (`fail_unfillable`) marked it itself.
                let tcp = self.qps[i]
                    .as_ref()
                    .and_then(|q| q.conn.as_ref())
                    .map(|c| c.tcp);
                if tcp.is_some_and(|t| self.txrec.outstanding(t) > 0) {
                    self.tx_ready.mark(i);
                } else if cfg!(any(test, feature = "self-check")) && !self.tx_ready.is_marked(i) {
                    self.check_settled(i);
                }
            }
            settled.clear();
            self.rx_settled = settled;
        }
        work
    }

    /// The receive poller: every QP marked ready (by a Readable or PeerClosed event of its
    /// connection, a command, or its own unfinished budget).
    pub(super) fn poll_rx(&mut self) -> bool {
        let mut batch = std::mem::take(&mut self.batch);
        self.rx_ready.take_into(&mut batch);
        let mut work = false;
        for &i in &batch {
            if self.rx_one(i) {
                work = true;
                // Received octets may owe the peer something: a Read Response, a Terminate,
                // the close after its FIN, a lifted MPA fence.
                self.mark_tx_unless_settled(i);
            }
        }
        batch.clear();
        self.batch = batch;
        work
    }

    /// The receive steps of QP slot `i`; whether it did anything. A QP that leaves octets
    /// unread (its budget ran out) stays marked.
    pub(super) fn rx_one(&mut self, i: usize) -> bool {
        let mut work = false;
        let budget = self.ctx.cfg.rx_budget_bytes;
        let EngineCore {
            stack,
            qps,
            ctx,
            rx_ready,
            rx_mrs,
            ..
        } = self;
        let mrs: &MrTable = rx_mrs;
        let mut held: RxHeld<'_> = None;
        let Some(q) = qps[i].as_mut() else {
            return false;
        };
        let Some(tcp) = q.conn.as_ref().map(|c| c.tcp) else {
            return false;
        };
        // No new octets: consuming nothing would change nothing (the deframer keeps
        // partial FPDUs itself; startup timeouts and closes have their own steps below
        // and in `poll_timers`).
        // Up to the budget, in as many calls as the queue has contiguous pieces (a queue
        // that wrapped lends its octets in two): a queue left non-empty makes the next
        // loop's in-order arrivals queue behind it instead of being placed from their
        // frames (`poll_stack`).
        let mut taken = 0;
        while taken < budget && stack.recv_queue(tcp).unwrap_or(0) > 0 {
            let n = stack
                .recv_with(tcp, |data| {
                    let data = &data[..data.len().min(budget - taken)];
                    q.consume(data, ctx, mrs, &mut held)
                })
                .unwrap_or(0);
            if n == 0 {
                break;
            }
            taken += n;
            work = true;
        }
        // The peer's FIN ended its stream inside a message: not a graceful close.
        if q.conn.as_ref().is_some_and(|c| c.peer_closed)
            && q.fail_if_fin_inside_message(stack.recv_queue(tcp).unwrap_or(0), ctx)
        {
            work = true;
        }
        // The peer closed during the startup and every octet before its FIN is read.
        let closed_early = q.state == QpState::Connecting
            && q.conn.as_ref().is_some_and(|c| c.peer_closed)
            && stack.recv_queue(tcp).unwrap_or(0) == 0;
        if closed_early {
            if let Some(Mpa::Initiator(init)) = q.conn.as_mut().map(|c| &mut c.mpa) {
                init.handle_close();
            }
            q.drive_initiator(ctx);
            work = true;
        }
        // The initiator closed before its first FPDU (e.g. it cannot send the markers
        // we require, MPA-7.1.1-10) and everything before its FIN was read: the startup
        // never completed and we may send nothing (MPA-7.1.2-16), so fail it, typed,
        // and close, rather than wait in Closing for a fence that cannot lift.
        let closed_in_rts = q.state == QpState::Rts
            && q.conn.as_ref().is_some_and(|c| c.peer_closed)
            && stack.recv_queue(tcp).unwrap_or(0) == 0;
        let fenced = q
            .conn
            .as_ref()
            .is_some_and(|c| matches!(c.mpa, Mpa::Responder(_)));
        // Closing, the peer closed and everything before its FIN is read: the transmit
        // visit (`poll_rx` marks it on `work`) fails what can no longer complete and
        // finishes the close (`tx_close_if_drained`); nothing else may mark it.
        if q.state == QpState::Closing
            && q.conn.as_ref().is_some_and(|c| c.peer_closed)
            && stack.recv_queue(tcp).unwrap_or(0) == 0
        {
            work = true;
        }
        if closed_in_rts && !fenced {
            // The RTR came with the FIN: drain what we owe, then FIN (RDMAP-06 §6).
            q.set_state(QpState::Closing);
            work = true;
        } else if closed_in_rts {
            q.flush();
            q.disconnect_requested = true;
            q.set_state(QpState::Error);
            ctx.events.push_back(CmEvent::Error {
                qp: q.id,
                error: ConnError::Negotiation {
                    error: nego::NegotiationError::PeerClosed,
                    peer_ird_ord: None,
                },
            });
            work = true;
        }
        if stack.recv_queue(tcp).unwrap_or(0) > 0 {
            rx_ready.mark(i);
        }
        work
    }
}

/// Whether `ulpdu`'s control octets name a tagged Read Response (the DDP T bit, RDMAP
/// opcode 0x1): what a refused segment answered, read without decoding it again.
fn names_read_response(ulpdu: &[u8]) -> bool {
    matches!(ulpdu, [ddp, rdmap, ..]
        if ddp & 0x80 != 0 && rdmap & 0x0F == Opcode::ReadResponse as u8)
}
