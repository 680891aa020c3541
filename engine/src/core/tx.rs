//! The transmit path: `poll_tx` visits each connection; `tx_qp` sends, within the FPDU
//! budget, the Terminate if one is due, the RTR, then messages that [`Qp::start_next`] picks
//! (Read and Atomic Responses first, then the send queue in order, ORD enforced), each
//! segmented by DDP and framed by MPA straight into the TCP send buffer ([`send_fpdu`],
//! [`send_fpdu_from`], payload gathered from registered memory by [`gather`]).

use super::validate::check_sges;
use super::*;
use crate::SgeList;
use std::ops::ControlFlow;
use warpcore_proto::ddp::SegmentationError;
use warpcore_proto::wire::ddp::TAGGED_HEADER_LEN;

/// Gathers `out.len()` octets at message offset `offset` from the SGEs of a send request.
///
/// `held` is the region of the last SGE gathered from in this transmit pass, still guarded:
/// a run of small messages from one region (the common case: a ring of buffers in one
/// registration) pays one guard, two atomic operations on the slot, per pass instead of
/// one per message. The guard is checked for the same STag and PD as a fresh lookup would
/// be (a local key is looked up with no write right, so that is all its outcome depends
/// on). The caller drops it at the end of its pass and before anything on its thread can
/// wait for a region's guards to drain (a Local Invalidate, a bind, a fast registration:
/// [`Qp::local_op_next`]), so a deregistration waits at most one pass.
// Inlined into its one caller, the payload closure of `tx_fpdus` (once per FPDU).
#[inline(always)]
pub(super) fn gather<'m>(
    mrs: &'m MrTable,
    held: &mut Option<MrGuard<'m>>,
    pd: PdId,
    sges: &[Sge],
    offset: u64,
    out: &mut [u8],
) -> bool {
    // One SGE (the common case): the loop below unrolled for it, without its bookkeeping;
    // the same steps, checks and outcome.
    if let [s] = sges {
        if out.is_empty() {
            return true;
        }
        let l = u64::from(s.len);
        if offset >= l {
            return false;
        }
        let n = (l - offset).min(out.len() as u64) as usize;
        let Some(g) = held_guard(mrs, held, pd, Stag(s.stag)) else {
            return false;
        };
        let Some(to) = s.to.checked_add(offset) else {
            return false;
        };
        return g.copy_out_at(to, &mut out[..n]).is_ok() && n == out.len();
    }
    let mut off = offset;
    let mut done = 0usize;
    for s in sges {
        if done == out.len() {
            break;
        }
        let l = u64::from(s.len);
        if off >= l {
            off -= l;
            continue;
        }
        let n = (l - off).min((out.len() - done) as u64) as usize;
        let Some(g) = held_guard(mrs, held, pd, Stag(s.stag)) else {
            return false;
        };
        let Some(to) = s.to.checked_add(off) else {
            return false;
        };
        if g.copy_out_at(to, &mut out[done..done + n]).is_err() {
            return false;
        }
        done += n;
        off = 0;
    }
    done == out.len()
}

/// [`gather`] of a whole message with no guard held before or after: one SGE's region is
/// guarded for its copy only (the same lookup, bounds and outcome).
#[inline(always)]
fn gather_once(mrs: &MrTable, pd: PdId, sges: &[Sge], out: &mut [u8]) -> bool {
    if let [s] = sges {
        if out.len() != s.len as usize {
            return gather(mrs, &mut None, pd, sges, 0, out);
        }
        if out.is_empty() {
            return true;
        }
        return mrs
            .lookup_local(Stag(s.stag), pd, false)
            .is_ok_and(|g| g.copy_out_at(s.to, out).is_ok());
    }
    gather(mrs, &mut None, pd, sges, 0, out)
}

/// The guard of local key `stag` for [`gather`]: `held` if it is that region's (same STag
/// and PD, all a fresh lookup's outcome depends on), else a fresh lookup, which replaces
/// it. `None`: the lookup failed (`held` is then empty).
#[inline(always)]
fn held_guard<'m, 'h>(
    mrs: &'m MrTable,
    held: &'h mut Option<MrGuard<'m>>,
    pd: PdId,
    stag: Stag,
) -> Option<&'h MrGuard<'m>> {
    if !held
        .as_ref()
        .is_some_and(|g| g.stag() == stag && g.pd() == pd)
    {
        // The old guard goes first: this thread never holds two for one SGE.
        *held = None;
        *held = Some(mrs.lookup_local(stag, pd, false).ok()?);
    }
    held.as_ref()
}

/// Frames one ULPDU (`hdr` then `payload`) into the connection's TCP send buffer: straight
/// into the buffer when the free space is contiguous, through `scratch` when it wraps.
/// Returns false, having changed nothing, when the send buffer lacks room.
pub(super) fn send_fpdu<D: PollDevice>(
    stack: &mut Stack<D>,
    tcp: ConnId,
    framer: &mut Framer,
    hdr: &[u8],
    payload: &[u8],
    scratch: &mut Vec<u8>,
) -> bool {
    let need = framer.fpdu_wire_len(hdr.len() + payload.len());
    match stack.send_space(tcp) {
        Ok(s) if s >= need => {}
        _ => return false,
    }
    send_fpdu_in_room(stack, tcp, framer, hdr, payload, need, scratch)
}

/// [`send_fpdu`] once the send buffer is known to hold the FPDU's `need` octets.
fn send_fpdu_in_room<D: PollDevice>(
    stack: &mut Stack<D>,
    tcp: ConnId,
    framer: &mut Framer,
    hdr: &[u8],
    payload: &[u8],
    need: usize,
    scratch: &mut Vec<u8>,
) -> bool {
    let direct = stack.send_with_room(tcp, need, |buf| {
        if buf.len() >= need {
            framer.emit(&[hdr, payload], buf).unwrap_or(0)
        } else {
            0
        }
    });
    match direct {
        Ok(n) if n == need => return true,
        Ok(0) => {}
        _ => return false,
    }
    // The scratch buffer is allocated at its first use (a core that never meets a wrapped
    // send buffer never holds it).
    if scratch.len() < FPDU_SCRATCH_LEN {
        scratch.resize(FPDU_SCRATCH_LEN, 0);
    }
    let Ok(n) = framer.emit(&[hdr, payload], scratch) else {
        return false;
    };
    let mut off = 0;
    while off < n {
        match stack.send(tcp, &scratch[off..n]) {
            Ok(k) if k > 0 => off += k,
            _ => break,
        }
    }
    // The space was checked above, so the FPDU always goes in whole: one record.
    debug_assert_eq!(off, n);
    let _ = stack.end_record(tcp);
    true
}

/// Frames the ULPDU `hdr` + `plen` payload octets, which `fill` copies out of registered
/// memory, into the connection's TCP send buffer. When no marker falls inside the FPDU and
/// the buffer's free space is contiguous, `fill` writes the payload straight into the send
/// buffer at its place in the FPDU and the framer writes the fields and the CRC around it
/// ([`Framer::emit_in_place`]): one copy of the payload. Otherwise the payload is gathered
/// into `gbuf` first and framed by [`send_fpdu`]. `need` is the FPDU's length on the wire,
/// `framer.fpdu_wire_len(hdr.len() + plen)`. `Ok(false)`: no room, nothing changed and
/// `fill` not called; `Err(())`: `fill` failed (the local region went away), nothing
/// sent.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
pub(super) fn send_fpdu_from<D: PollDevice>(
    stack: &mut Stack<D>,
    tcp: ConnId,
    framer: &mut Framer,
    hdr: &[u8],
    plen: usize,
    need: usize,
    fill: &mut impl FnMut(&mut [u8]) -> bool,
    gbuf: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
) -> Result<bool, ()> {
    let ulen = hdr.len() + plen;
    debug_assert_eq!(need, framer.fpdu_wire_len(ulen));
    if need == fpdu::fpdu_len(ulen) {
        let at = fpdu::ULPDU_LENGTH_LEN + hdr.len();
        let mut failed = false;
        let direct = stack.send_with_room(tcp, need, |buf| {
            if buf.len() < need {
                return 0;
            }
            if !fill(&mut buf[at..at + plen]) {
                failed = true;
                return 0;
            }
            match framer.emit_in_place(hdr, plen, buf) {
                Ok(Some(n)) => n,
                _ => 0,
            }
        });
        if failed {
            return Err(());
        }
        match direct {
            Ok(n) if n == need => return Ok(true),
            Ok(0) => {}
            _ => return Ok(false),
        }
    }
    // No room (a caller that did not check first): nothing gathered, nothing changed.
    if stack.send_space(tcp).unwrap_or(0) < need {
        return Ok(false);
    }
    if gbuf.len() < MAX_ULPDU_LEN {
        gbuf.resize(MAX_ULPDU_LEN, 0);
    }
    let Some(g) = gbuf.get_mut(..plen) else {
        return Err(());
    };
    if !fill(g) {
        return Err(());
    }
    Ok(send_fpdu_in_room(stack, tcp, framer, hdr, g, need, scratch))
}

impl Qp {
    /// Whether FPDUs other than the RTR may go out now (MPA2-5-1, MPA-7.1.2-16).
    pub(super) fn can_send_fpdus(&self) -> bool {
        match self.conn.as_ref().map(|c| &c.mpa) {
            Some(Mpa::Done) => true,
            Some(Mpa::Initiator(i)) => i.can_send_fpdus(),
            Some(Mpa::Responder(r)) => r.can_send_fpdus(),
            None => false,
        }
    }

    /// Starts the next message: Read Responses first, in the order of their requests
    /// (RDMAP-5.2.2-4, RDMAP-5.5-13), then the send queue in posting order (RDMAP-5.5-6).
    /// A Read Response reads its source as it is sent, which may be after later Writes were
    /// placed (RDMAP-5.5-5 allows it; a requester that needs otherwise fences).
    ///
    /// The message is written into `self.tx`, which stays `None` when there is nothing to
    /// start: a message returned was copied whole once more, into the caller's `self.tx`
    /// (the segmenter in it is ~100 octets).
    ///
    /// `local_next` is [`Self::local_op_next`], which the caller has just asked (nothing
    /// changed the send queue since): it is not looked up again.
    ///
    /// Inlined into its one caller, `tx_fpdus` (once a message): the call and its register
    /// saves cost more than the code it repeats.
    #[inline(always)]
    pub(super) fn start_next(&mut self, mrs: &MrTable, local_next: bool) {
        self.tx = None;
        let _ = self.start_next_into_tx(mrs, local_next);
    }

    #[inline(always)]
    fn start_next_into_tx(&mut self, mrs: &MrTable, local_next: bool) -> Option<()> {
        debug_assert_eq!(local_next, self.local_op_next());
        // Binds, fast registrations and Local Invalidates at the sending position run
        // here, in order, without a message (module `local`; [`Self::run_local_ops`]).
        if local_next {
            let _ = self.run_local_ops_at(mrs);
        }
        if self.tx_fault.is_some() {
            return None;
        }
        let mulpdu = self.conn.as_ref()?.framer.as_ref()?.max_ulpdu_len();
        match self.irq.pop_front() {
            Some(Inbound::Read(plan)) => self.start_read_response(plan, mulpdu),
            Some(Inbound::Atomic(req)) => self.start_atomic_response(&req, mrs, mulpdu),
            None => self.start_sq(mrs, mulpdu),
        }
    }

    /// A Read Response into `self.tx`: a tagged message to the requester's sink, read from
    /// our source as it is sent.
    #[inline(always)]
    fn start_read_response(&mut self, plan: ReadResponsePlan, mulpdu: usize) -> Option<()> {
        let conn = self.conn.as_mut()?;
        let ctrl = Control::new(Opcode::ReadResponse).0;
        let seg = conn
            .ddp_tx
            .tagged(ctrl, plan.sink_stag, plan.sink_to, &[], plan.len, mulpdu)
            .ok()?;
        self.tx = Some(TxMsg {
            seg,
            src: TxSrc::ReadResp(plan),
        });
        Some(())
    }

    /// An Atomic Response into `self.tx`: the atomic is executed now ([`execute_atomic`]) and its original
    /// value goes back on QN 3.
    #[inline(always)]
    fn start_atomic_response(
        &mut self,
        req: &AtomicRequestRepr,
        mrs: &MrTable,
        mulpdu: usize,
    ) -> Option<()> {
        let orig = match execute_atomic(req, mrs, self.pd, self.stream) {
            Ok(orig) => orig,
            Err(e) => {
                self.tx_fault = Some(ProtocolError::Rdmap(e));
                return None;
            }
        };
        let mut hdr = [0u8; 12];
        ext_atomic::response(req, orig).emit(&mut AtomicResponse::new_unchecked(&mut hdr[..]));
        let conn = self.conn.as_mut()?;
        let seg = conn
            .ddp_tx
            .untagged(
                Control::new(Opcode::AtomicResponse).0,
                0,
                qn::ATOMIC_RESPONSE,
                &hdr,
                0,
                mulpdu,
            )
            .ok()?;
        self.tx = Some(TxMsg {
            seg,
            src: TxSrc::AtomicResp,
        });
        Some(())
    }

    /// The request at the send position: its message started into `self.tx` (segmenter set
    /// up, Reads and Atomics recorded as outstanding under ORD), or `None` while it must
    /// wait (a fence, ORD, a local operation).
    #[inline(always)]
    fn start_sq(&mut self, mrs: &MrTable, mulpdu: usize) -> Option<()> {
        let conn = self.conn.as_mut()?;
        let idx = usize::try_from(self.sq_next_seq - self.sq_head_seq).ok()?;
        // Looked up once, mutably: its stage is advanced below through the same reference.
        let e = self.sq.get_mut(idx)?;
        // Read fence: wait until every earlier Read completed.
        if e.wr.fence && !self.orq.is_empty() {
            return None;
        }
        // Local keys not checked at post (`QpShared::sges_checked_at_post`, the drop-in
        // libibverbs): checked now, as post would have, before anything of the request is
        // on the wire.
        if !self.sges_at_post && e.stage == 0 {
            let write = matches!(e.wr.op, SendOp::Read { .. }) || e.wr.op.is_atomic();
            if check_sges(mrs, self.pd, e.wr.sges.as_slice(), write).is_err() {
                let seq = self.sq_next_seq;
                self.fail_unsegmentable(seq, false);
                return None;
            }
        }
        let len = e.wr.sges.total_len() as u32;
        let seq = self.sq_next_seq;
        // A plain Write (the common request): the steps of the general path below for it,
        // with its message written into `self.tx` where it is segmented, not carried out
        // of the match first (~40 instructions a Write; `tests/engine_fast_paths.rs` holds
        // it to the general path).
        if let (
            SendOp::Write {
                remote_stag,
                remote_to,
            },
            true,
        ) = (e.wr.op, fast_paths())
        {
            e.stage += 1;
            self.sq_next_seq += 1;
            let ctrl = Control::new(Opcode::Write).0;
            let seg = conn
                .ddp_tx
                .tagged(ctrl, remote_stag, remote_to, &[], len, mulpdu);
            return self.begin_sq_message(seg, seq, true);
        }
        let stage = e.stage;
        // A Write with Immediate is two messages; the request stays at the send position
        // until its second (Immediate Data) has started.
        let mut advance = true;
        // A Read or Atomic Request, recorded as outstanding under ORD once segmented, in
        // the order its response must come back (RDMAP-6.1-1, EXT-5.2-1).
        let mut outstanding = None;
        let seg = match e.wr.op {
            // A local operation still here waits for its fence (`run_local_ops`).
            SendOp::BindMw { .. } | SendOp::FastReg { .. } | SendOp::LocalInvalidate { .. } => {
                return None
            }
            SendOp::WriteWithImm {
                remote_stag,
                remote_to,
                ..
            } if stage == 0 => {
                advance = false;
                conn.ddp_tx.tagged(
                    Control::new(Opcode::Write).0,
                    remote_stag,
                    remote_to,
                    &[],
                    len,
                    mulpdu,
                )
            }
            SendOp::WriteWithImm { imm, .. } | SendOp::Immediate { imm, .. } => {
                let op = match e.wr.op {
                    SendOp::Immediate {
                        solicited: true, ..
                    }
                    | SendOp::WriteWithImm {
                        solicited: true, ..
                    } => Opcode::ImmediateDataSe,
                    _ => Opcode::ImmediateData,
                };
                let hdr = immediate_header(imm);
                conn.ddp_tx
                    .untagged(Control::new(op).0, 0, qn::SEND, &hdr, 0, mulpdu)
            }
            SendOp::AtomicFetchAdd { .. } | SendOp::AtomicCmpSwap { .. } => {
                // ORD bounds Reads and Atomics together (EXT-5.2-1): the queue waits.
                if self.orq.len() as u32 >= self.ord {
                    return None;
                }
                let id = seq as u32;
                let hdr = atomic_request_header(&e.wr.op, id)?;
                outstanding = Some(OrqEntry {
                    seq: Some(seq),
                    sink_stag: 0,
                    sink_to: 0,
                    len: 8,
                    atomic: Some(id),
                    msn: conn.ddp_tx.next_msn(qn::READ_REQUEST).unwrap_or(0),
                });
                request(conn, Opcode::AtomicRequest, &hdr, mulpdu)
            }
            SendOp::Send | SendOp::SendSe => {
                let op = if e.wr.op == SendOp::Send {
                    Opcode::Send
                } else {
                    Opcode::SendSe
                };
                conn.ddp_tx
                    .untagged(Control::new(op).0, 0, qn::SEND, &[], len, mulpdu)
            }
            SendOp::SendInvalidate { stag } | SendOp::SendSeInvalidate { stag } => {
                let op = if matches!(e.wr.op, SendOp::SendInvalidate { .. }) {
                    Opcode::SendInvalidate
                } else {
                    Opcode::SendSeInvalidate
                };
                conn.ddp_tx
                    .untagged(Control::new(op).0, stag, qn::SEND, &[], len, mulpdu)
            }
            SendOp::Write {
                remote_stag,
                remote_to,
            } => conn.ddp_tx.tagged(
                Control::new(Opcode::Write).0,
                remote_stag,
                remote_to,
                &[],
                len,
                mulpdu,
            ),
            SendOp::Read {
                remote_stag,
                remote_to,
            } => {
                // ORD (RDMAP-6.1-1): at most `ord` Reads in flight; the send queue waits.
                if self.orq.len() as u32 >= self.ord {
                    return None;
                }
                let sink = e.wr.sges.as_slice().first().copied().unwrap_or_default();
                let hdr = read_request_header(sink, remote_stag, remote_to);
                outstanding = Some(OrqEntry {
                    seq: Some(seq),
                    sink_stag: sink.stag,
                    sink_to: sink.to,
                    len: sink.len,
                    atomic: None,
                    msn: conn.ddp_tx.next_msn(qn::READ_REQUEST).unwrap_or(0),
                });
                request(conn, Opcode::ReadRequest, &hdr, mulpdu)
            }
        };
        e.stage += 1;
        if let (Ok(_), Some(entry)) = (&seg, outstanding) {
            self.push_outstanding(entry);
        }
        if advance {
            self.sq_next_seq += 1;
        }
        self.begin_sq_message(seg, seq, advance)
    }

    /// The message of SQ entry `seq` segmented (`seg`): written into `self.tx`, or, if the
    /// segmenter refused it, the request failed ([`Self::fail_unsegmentable`]; `advanced`:
    /// the send position moved past it).
    #[inline(always)]
    fn begin_sq_message(
        &mut self,
        seg: Result<Segmenter, SegmentationError>,
        seq: u64,
        advanced: bool,
    ) -> Option<()> {
        match seg {
            Ok(seg) => {
                self.tx = Some(TxMsg {
                    seg,
                    src: TxSrc::Sq(seq),
                });
                Some(())
            }
            Err(_) => {
                self.fail_unsegmentable(seq, advanced);
                None
            }
        }
    }

    /// A request the segmenter refuses: `validate_send` refuses every such request at post
    /// time (TO + length wrapping, `EngineError::RemoteToWrap`; lengths), so this is a broken
    /// invariant, not a peer's doing. It fails as a local error does (departure 8): a local
    /// protection completion, a local catastrophic Terminate (0/0/FF) to the peer, later
    /// requests flushed. Also a request whose local keys, not checked at post, fail when
    /// it starts (`start_sq`).
    fn fail_unsegmentable(&mut self, seq: u64, advanced: bool) {
        if !advanced {
            self.sq_next_seq += 1;
        }
        if let Some(e) = self.entry_mut(seq) {
            e.status = Some(WcStatus::LocalProtection);
        }
        self.tx_fault = Some(ProtocolError::Rdmap(RdmapError::LocalCatastrophic));
    }
}

/// Whether the QP's next visit by `tx_qp` would do nothing and change nothing, until
/// something gives it work (and marks it: a command, a TCP event, receive activity): in RTS
/// past its startup (MPA done, FPDUs sized), no Terminate, RTR, message in progress, local
/// fault nor inbound request owed, every request of the send queue started and none done at
/// its head (`retire_sq` took those), no FPDU sent from registered memory awaiting its
/// acknowledgement (`txrec`), no completion queue overrun. Each of these but the last is a
/// step of `tx_qp` that would have work; its other steps need one of them. Such a QP is not
/// marked for the transmit poller (a lone request sent whole and retired: the latency
/// path's common case).
#[inline]
pub(super) fn tx_settled(q: &Qp, txrec: &TxRecords) -> bool {
    tx_settled_but_txrec(q)
        && q.conn
            .as_ref()
            .is_none_or(|c| txrec.outstanding(c.tcp) == 0)
}

/// [`tx_settled`] but for the records sent from registered memory (for a caller that
/// cannot read them yet).
#[inline(always)]
pub(super) fn tx_settled_but_txrec(q: &Qp) -> bool {
    let Some(c) = q.conn.as_ref() else {
        // `tx_qp` does nothing without a connection.
        return true;
    };
    tx_quiet(q.state, &q.tx, &q.tx_fault, &q.irq, c)
        && q.sq_next_seq - q.sq_head_seq == q.sq.len() as u64
        && q.sq.front().is_none_or(|e| e.status.is_none())
        // A QP whose completion queue overran stays marked as before, so that the transmit
        // poller's overrun check (`poll_cq_overrun` of its batch) finds it in the same loop
        // as a busy QP of its core rather than at the next 50 ms sweep.
        && !(q.send_cq.overrun() || q.recv_cq.overrun())
}

/// The part of [`tx_settled_but_txrec`] that [`Qp::write_at_post`] shares: in RTS past its
/// startup (MPA done, MULPDU known), no Terminate or RTR due, no message in progress, no
/// fault, no inbound request owed. Given the QP's fields (its state, message in progress,
/// fault, inbound requests) apart from its connection `c`, which a caller may hold mutably.
#[inline(always)]
fn tx_quiet(
    state: QpState,
    tx: &Option<TxMsg>,
    fault: &Option<ProtocolError>,
    irq: &VecDeque<Inbound>,
    c: &Conn,
) -> bool {
    state == QpState::Rts
        && matches!(c.mpa, Mpa::Done)
        && c.mulpdu_synced
        && c.term.is_none()
        && c.rtr_pending.is_none()
        && tx.is_none()
        && fault.is_none()
        && irq.is_empty()
}

/// Executes an inbound atomic now, in request order after every earlier Read Response was
/// read (EXT-5.2.2-6), atomically against every other atomic through this engine on the
/// same word (EXT-5-1, EXT-5.3-1): a compare-exchange loop on the word's AtomicU64, which
/// holds the value in host byte order (EXT-5.1.1-1: the target memory's order; operands are
/// big-endian on the wire only). Returns the original value; a local catastrophic error if
/// the region went away since the request was checked, or the error of a check that fails
/// now although it passed then (the receive path checks the AOpCode, bounds and the word's
/// alignment in memory before queueing the request: `Qp::rx_atomic_request`). The TO
/// itself need not be 8-aligned, only the word it resolves to (EXT-5.2.1-2).
fn execute_atomic(
    req: &AtomicRequestRepr,
    mrs: &MrTable,
    pd: PdId,
    stream: u64,
) -> Result<u64, RdmapError> {
    let g = mrs
        .lookup_remote(Stag(req.remote_stag), pd, stream, Access::REMOTE_ATOMIC)
        .map_err(|_| RdmapError::LocalCatastrophic)?;
    let off = g
        .bounds(req.remote_to, 8)
        .map_err(BoundsFault::rdmap_error)?;
    let w = g.atomic(off).map_err(BoundsFault::rdmap_error)?;
    let mut cur = w.load(std::sync::atomic::Ordering::Acquire);
    loop {
        let mut new = cur;
        ext_atomic::execute(req, &mut new)?;
        if new == cur {
            // CmpSwap miss (or a no-op): nothing to store.
            return Ok(cur);
        }
        match w.compare_exchange_weak(
            cur,
            new,
            std::sync::atomic::Ordering::AcqRel,
            std::sync::atomic::Ordering::Acquire,
        ) {
            Ok(_) => return Ok(cur),
            Err(v) => cur = v,
        }
    }
}

/// A Read or Atomic Request (QN 1, no payload) segmented; [`Qp::start_sq`] records it as
/// outstanding under ORD if this succeeds.
#[inline(always)]
fn request(
    conn: &mut Conn,
    opcode: Opcode,
    hdr: &[u8],
    mulpdu: usize,
) -> Result<Segmenter, SegmentationError> {
    conn.ddp_tx
        .untagged(Control::new(opcode).0, 0, qn::READ_REQUEST, hdr, 0, mulpdu)
}

/// The RDMAP header of Immediate Data (RFC 7306): the 8 octets, big-endian.
fn immediate_header(imm: u64) -> [u8; 8] {
    let mut hdr = [0u8; 8];
    ImmediateDataRepr {
        data: imm.to_be_bytes(),
    }
    .emit(&mut ImmediateData::new_unchecked(&mut hdr[..]));
    hdr
}

/// The RDMAP header of an Atomic Request (RFC 7306) for a FetchAdd or CmpSwap request;
/// `None` for any other operation.
fn atomic_request_header(op: &SendOp, id: u32) -> Option<[u8; 52]> {
    let req = match *op {
        SendOp::AtomicFetchAdd {
            remote_stag,
            remote_to,
            add,
            add_mask,
        } => AtomicRequestRepr::fetch_add(id, remote_stag, remote_to, add, add_mask),
        SendOp::AtomicCmpSwap {
            remote_stag,
            remote_to,
            compare,
            compare_mask,
            swap,
            swap_mask,
        } => AtomicRequestRepr::cmp_swap(
            id,
            remote_stag,
            remote_to,
            swap,
            swap_mask,
            compare,
            compare_mask,
        ),
        _ => return None,
    };
    let mut hdr = [0u8; 52];
    req.emit(&mut AtomicRequest::new_unchecked(&mut hdr[..]));
    Some(hdr)
}

/// The RDMAP header of a Read Request: our sink (the local SGE) and the peer's source.
fn read_request_header(sink: Sge, src_stag: u32, src_to: u64) -> [u8; 28] {
    let rr = ReadRequestRepr {
        sink_stag: sink.stag,
        sink_to: sink.to,
        read_size: sink.len,
        src_stag,
        src_to,
    };
    let mut hdr = [0u8; 28];
    rr.emit(&mut ReadRequest::new_unchecked(&mut hdr[..]));
    hdr
}

impl<D: PollDevice> EngineCore<D> {
    /// The transmit poller: every QP marked ready. A QP that did something stays marked (it
    /// may have stopped at its budget) unless [`tx_settled`] shows that its next
    /// visit would find nothing to do (a lone request sent whole and retired: the latency
    /// path's common case); one that did nothing waits for a trigger (a command, a Writable
    /// or PeerClosed event, receive activity). Then the CQ overrun check of the QPs
    /// visited: completions are pushed only by the pollers.
    pub(super) fn poll_tx(&mut self) -> bool {
        let mut batch = std::mem::take(&mut self.batch);
        self.tx_ready.take_into(&mut batch);
        let mut work = false;
        // `tx_qp` never creates nor destroys a QP.
        for &i in &batch {
            if self.tx_qp(i) {
                work = true;
                self.mark_tx_unless_settled(i);
            }
        }
        if work {
            self.poll_cq_overrun(&batch);
        }
        batch.clear();
        self.batch = batch;
        work
    }

    /// Marks QP slot `i` for the transmit poller unless it is settled ([`tx_settled`]): its
    /// visit would find nothing to do. With the `self-check` feature (the engine's tests)
    /// the visit skipped is made, and must find nothing.
    #[inline]
    pub(super) fn mark_tx_unless_settled(&mut self, i: usize) {
        let settled = match self.qps[i].as_ref() {
            Some(q) => tx_settled(q, &self.txrec),
            None => true,
        };
        if !settled {
            self.tx_ready.mark(i);
        } else if cfg!(any(test, feature = "self-check")) {
            self.check_settled(i);
        }
    }

    /// The `self-check` of a QP found settled: the visit skipped finds nothing to do.
    #[cold]
    #[inline(never)]
    pub(super) fn check_settled(&mut self, i: usize) {
        assert!(!self.tx_qp(i), "QP slot {i}: a settled QP had work to send");
    }

    /// The transmit steps of QP slot `i`, in order: MPA startup frames, the close of a failed
    /// startup, the Terminate, the RTR, local operations, then FPDUs within the budget
    /// ([`Qp::tx_fpdus`]), retirement, and the graceful close once nothing is owed.
    pub(super) fn tx_qp(&mut self, i: usize) -> bool {
        // A graceful close is bounded (`EngineConfig::close_timeout_ms`): its progress is
        // looked at on each visit, before any step below can end the visit early.
        if self.qps[i]
            .as_ref()
            .is_some_and(|q| q.state == QpState::Closing)
        {
            self.watch_close(i);
        }
        let EngineCore {
            stack,
            qps,
            ctx,
            gather,
            fpdu,
            zombies,
            txrec,
            now,
            ..
        } = self;
        let now = *now;
        let Some(q) = qps[i].as_mut() else {
            return false;
        };
        let Some(tcp) = q.conn.as_ref().map(|c| c.tcp) else {
            return false;
        };
        // FPDUs sent from registered memory that TCP has had acknowledged: their requests
        // may complete (module `txrec`).
        let mut acked = false;
        if txrec.outstanding(tcp) > 0 {
            if let Ok(Some(upto)) = stack.take_acked_external(tcp) {
                txrec.acked(tcp, upto, |seq| q.record_acked(seq));
                acked = true;
                // A failed QP's requests that `flush` held for these acknowledgements
                // complete now (RDMAP-5.5-8): no later step of a failed QP retires.
                if matches!(q.state, QpState::Error | QpState::Terminate) {
                    q.retire_sq();
                }
            }
        }
        let mut work = acked;
        work |= match q.tx_control(stack, tcp, ctx, fpdu) {
            // A responder still fenced sends no FPDU (MPA-7.1.2-16), but a FIN is none: its
            // graceful close goes on (`tx_close_if_drained`).
            ControlFlow::Break(w) if q.state == QpState::Closing && !q.can_send_fpdus() => {
                return q.tx_close_if_drained(stack, tcp, ctx, (zombies, now), txrec) || w;
            }
            ControlFlow::Break(w) => return w,
            ControlFlow::Continue(w) => w,
        };
        let from_memory = stack.implementation() == TcpImplementation::Warpcore;
        match q.tx_fpdus(stack, tcp, ctx, gather, fpdu, txrec, from_memory) {
            ControlFlow::Break(w) => return w,
            ControlFlow::Continue(w) => work |= w,
        }
        work |= q.retire_sq();
        work |= q.tx_close_if_drained(stack, tcp, ctx, (zombies, now), txrec);
        work
    }
}

impl Qp {
    /// Everything before the FPDUs: MPA startup frames, the close of a rejected or failed
    /// startup, the Terminate (first, then TCP closes), the initiator's RTR, and the local
    /// operations at the sending position. `Break(work)` ends this QP's turn.
    #[inline(always)]
    fn tx_control<D: PollDevice>(
        &mut self,
        stack: &mut Stack<D>,
        tcp: ConnId,
        ctx: &mut Ctx,
        fbuf: &mut Vec<u8>,
    ) -> ControlFlow<bool, bool> {
        let fenced_responder = !self.can_send_fpdus()
            && self
                .conn
                .as_ref()
                .is_some_and(|c| matches!(c.mpa, Mpa::Responder(_)));
        let Some(conn) = self.conn.as_mut() else {
            return ControlFlow::Break(false);
        };
        let mut work = false;
        // MPA startup frames.
        match &mut conn.mpa {
            Mpa::Initiator(init) if init.phase() == nego::Phase::AwaitingFrame => {
                work |= stack.send_with(tcp, |b| init.poll_transmit(b)).unwrap_or(0) > 0;
                return ControlFlow::Break(work);
            }
            Mpa::Initiator(init) => {
                work |= stack.send_with(tcp, |b| init.poll_transmit(b)).unwrap_or(0) > 0;
            }
            Mpa::Responder(r) => {
                work |= stack.send_with(tcp, |b| r.poll_transmit(b)).unwrap_or(0) > 0;
            }
            Mpa::Done => {}
        }
        // A rejected or failed startup: close once the frames are out.
        if self.state == QpState::Error && self.disconnect_requested && !conn.fin_sent {
            if conn.reset_on_close {
                let _ = stack.abort(tcp);
            } else {
                let _ = stack.close(tcp);
            }
            conn.fin_sent = true;
            return ControlFlow::Break(true);
        }
        // A responder still fenced may send no FPDU, a Terminate included (MPA-7.1.2-16),
        // while the initiator may still be in its startup. A local failure before any FPDU
        // octet of the initiator arrived (its user told already, `fail_local`) holds its
        // Terminate until the initiator's first FPDU octets come (it is in FPDU mode then,
        // and a Terminate may answer them: a CRC error in its first FPDU, say); if the
        // initiator closes first, the stream closes without one.
        if conn.term.is_some() && fenced_responder && !conn.fpdu_octets_rx {
            if !conn.peer_closed {
                return ControlFlow::Break(work);
            }
            conn.term = None;
            let _ = stack.close(tcp);
            conn.fin_sent = true;
            self.set_state(QpState::Error);
            return ControlFlow::Break(true);
        }
        // The Terminate goes first, at an FPDU boundary; then TCP closes.
        if conn.term.is_some() {
            return ControlFlow::Break(self.tx_terminate(stack, tcp, ctx, fbuf) || work);
        }
        if !matches!(self.state, QpState::Rts | QpState::Closing) {
            return ControlFlow::Break(work);
        }
        // The initiator's RTR is its first FPDU (MPA2-5-1).
        if conn.rtr_pending.is_some() {
            if !self.tx_rtr(stack, tcp, ctx, fbuf) {
                return ControlFlow::Break(work);
            }
            work = true;
        }
        // Binds, fast registrations and Local Invalidates at the sending position need no
        // FPDU: they run even while MPA fencing holds FPDUs back (module `local`).
        if self.tx.is_none() {
            work |= self.run_local_ops(&ctx.mrs);
            if self.fail_tx_fault(ctx) {
                return ControlFlow::Break(true);
            }
        }
        if !self.can_send_fpdus() {
            return ControlFlow::Break(work);
        }
        if let Some(c) = self.conn.as_mut() {
            if matches!(c.mpa, Mpa::Initiator(_) | Mpa::Responder(_)) {
                c.mpa = Mpa::Done;
            }
        }
        ControlFlow::Continue(work)
    }

    /// Sends the queued Terminate as the stream's last FPDU and closes TCP. Returns whether
    /// anything changed (false: no room yet).
    fn tx_terminate<D: PollDevice>(
        &mut self,
        stack: &mut Stack<D>,
        tcp: ConnId,
        ctx: &mut Ctx,
        fbuf: &mut Vec<u8>,
    ) -> bool {
        let Some(conn) = self.conn.as_mut() else {
            return false;
        };
        let Some((buf, len)) = conn.term else {
            return false;
        };
        let Some(framer) = conn.framer.as_mut() else {
            conn.term = None;
            let _ = stack.close(tcp);
            return true;
        };
        if conn.fin_sent {
            // The error came after our FIN (a graceful close waiting for the peer to
            // drain): nothing may follow a FIN, so no Terminate can go out; the stream
            // fails all the same (the user was told, `fail_local`). The RDMAP, DDP and LLP
            // streams are abortively terminated (RDMAP-06 §7, §6.2): the connection is
            // reset, so that the peer, whose message was dropped, does not take the end
            // of the stream for a clean close. TCP reads no buffer of ours again; what it
            // held completes flushed when it reports the connection closed.
            conn.term = None;
            let _ = stack.abort(tcp);
            self.set_state(QpState::Error);
            return true;
        }
        if !send_fpdu(stack, tcp, framer, &buf[..len], &[], fbuf) {
            return false;
        }
        conn.term = None;
        ctx.stats.terminates_tx += 1;
        ctx.stats.fpdus_tx += 1;
        let _ = stack.close(tcp);
        conn.fin_sent = true;
        self.set_state(QpState::Error);
        true
    }

    /// Sends the initiator's pending RTR (MPA2-5-1) and accounts for it: a Send RTR takes
    /// MSN 1 of QN 0, a Read RTR MSN 1 of QN 1 and an ORD slot for its zero-length Read
    /// Response. Returns false, nothing changed, when there is no room yet.
    fn tx_rtr<D: PollDevice>(
        &mut self,
        stack: &mut Stack<D>,
        tcp: ConnId,
        ctx: &mut Ctx,
        fbuf: &mut Vec<u8>,
    ) -> bool {
        let Some(conn) = self.conn.as_mut() else {
            return false;
        };
        let Some(t) = conn.rtr_pending else {
            return false;
        };
        let Some(framer) = conn.framer.as_mut() else {
            return false;
        };
        if !send_fpdu(stack, tcp, framer, t.ulpdu(), &[], fbuf) {
            return false;
        }
        ctx.stats.fpdus_tx += 1;
        conn.rtr_pending = None;
        match t {
            RtrType::Send => {
                let _ = conn.ddp_tx.set_next_msn(qn::SEND, 2);
            }
            RtrType::Read => {
                let _ = conn.ddp_tx.set_next_msn(qn::READ_REQUEST, 2);
                // Through push_outstanding, as every Read in flight: the RTR's Read holds
                // an ORD slot (RDMAP-6.1-1) and counts in the high-water mark
                // (`QpInfo::reads_in_flight_max`), which missed it.
                self.push_outstanding(OrqEntry {
                    seq: None,
                    sink_stag: 0,
                    sink_to: 0,
                    len: 0,
                    atomic: None,
                    msn: 1,
                });
            }
            RtrType::Write => {}
        }
        if let Some(Mpa::Initiator(init)) = self.conn.as_mut().map(|c| &mut c.mpa) {
            init.handle_rtr_sent();
        }
        true
    }

    /// Sizes FPDUs to the TCP connection's segments once, before the first data FPDU:
    /// MULPDU from the payload room of a segment (the MSS both ends allow, minus the
    /// timestamp option; markers counted, mpa-08 §4.5), so that one full FPDU fills one
    /// segment and our TCP sends every FPDU in a segment of its own or packed whole with
    /// others (an MPA-aligned sender, mpa-08 §4 item 4). The configured EMSS stays where
    /// the TCP does not say (the smoltcp reference).
    #[inline(always)]
    fn sync_mulpdu<D: PollDevice>(&mut self, stack: &Stack<D>, tcp: ConnId) {
        if self.conn.as_ref().is_some_and(|c| !c.mulpdu_synced) {
            self.sync_mulpdu_once(stack, tcp);
        }
    }

    #[cold]
    #[inline(never)]
    fn sync_mulpdu_once<D: PollDevice>(&mut self, stack: &Stack<D>, tcp: ConnId) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        let Some(framer) = conn.framer.as_mut() else {
            return;
        };
        conn.mulpdu_synced = true;
        if let Ok(Some(room)) = stack.max_record_payload(tcp) {
            framer.set_emss(room);
        }
    }

    /// Up to `tx_budget_fpdus` FPDUs: messages started by [`Self::start_next`], cut into
    /// segments by DDP, each framed into the TCP send buffer with its payload copied out of
    /// registered memory ([`send_fpdu_from`]); a finished message updates its request
    /// ([`Self::tx_message_done`]). `Break(true)`: the QP failed.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn tx_fpdus<D: PollDevice>(
        &mut self,
        stack: &mut Stack<D>,
        tcp: ConnId,
        ctx: &mut Ctx,
        gbuf: &mut Vec<u8>,
        fbuf: &mut Vec<u8>,
        records: &mut TxRecords,
        from_memory: bool,
    ) -> ControlFlow<bool, bool> {
        let mut work = false;
        let mut fpdus = 0;
        // The region last gathered from, guarded for this pass ([`gather`]).
        let mut held: Option<MrGuard<'_>> = None;
        // Each segment's headers: zeroed once per pass, not once per FPDU (each segment
        // overwrites the `header_len` octets it uses, and only those are read).
        let mut hdr = [0u8; MAX_SEGMENT_HEADER_LEN];
        self.sync_mulpdu(stack, tcp);
        while fpdus < ctx.cfg.tx_budget_fpdus {
            if self.tx.is_none() {
                let mut known_local = None;
                if fast_paths() {
                    let small = if from_memory {
                        ctx.cfg.tx_from_memory_min
                    } else {
                        usize::MAX
                    };
                    match self.tx_write_whole(stack, tcp, &ctx.mrs, &mut held, gbuf, fbuf, small) {
                        WriteWhole::Sent => {
                            fpdus += 1;
                            ctx.stats.fpdus_tx += 1;
                            work = true;
                            continue;
                        }
                        WriteWhole::NoRoom | WriteWhole::NothingToStart => break,
                        WriteWhole::SourceFailed(seq) => {
                            drop(held);
                            self.fail_tx_source(Some(seq), ctx);
                            return ControlFlow::Break(true);
                        }
                        WriteWhole::Declined { local_next } => known_local = Some(local_next),
                    }
                }
                // An Atomic Response owed behind Read Responses sent from registered
                // memory waits until TCP has them acknowledged: the atomic executes when
                // its response starts, and a Read requested before it must not see it,
                // which a (re)transmission reading the source afterwards would show
                // (RFC 7306 §5.4 rule 8, §7's table; EXT-5.2.2-6; departure 16). The
                // acknowledgement's Writable event brings the QP back.
                if matches!(self.irq.front(), Some(Inbound::Atomic(_)))
                    && records.read_responses_unacked(tcp)
                {
                    break;
                }
                let local_next = known_local.unwrap_or_else(|| self.local_op_next());
                if local_next {
                    // It may wait for a region's guards to drain, ours included.
                    held = None;
                }
                self.start_next(&ctx.mrs, local_next);
                if self.tx_fault.is_some() {
                    drop(held);
                    self.fail_tx_fault(ctx);
                    return ControlFlow::Break(true);
                }
                if self.tx.is_none() {
                    break;
                }
            }
            let Some(conn) = self.conn.as_mut() else {
                break;
            };
            let Some(framer) = conn.framer.as_mut() else {
                break;
            };
            let Some(msg) = self.tx.as_mut() else { break };
            let Some(ulpdu_len) = msg.seg.next_ulpdu_len() else {
                self.tx = None;
                continue;
            };
            let need = framer.fpdu_wire_len(ulpdu_len);
            if stack.send_space(tcp).unwrap_or(0) < need {
                break;
            }
            let Ok(Some(s)) = msg.seg.next_segment(&mut hdr) else {
                self.tx = None;
                continue;
            };
            let plen = s.payload_len as usize;
            let off = u64::from(s.payload_offset);
            let (sq, sq_head, pd, stream) = (&self.sq, self.sq_head_seq, self.pd, self.stream);
            let src = &msg.src;
            let mrs: &MrTable = &ctx.mrs;
            // A Read Response of no octets has nothing to read, and its source was never
            // validated (RDMAP-5.2.1-13/14): the from-memory path would look it up (and
            // fail the stream on an STag or TO the peer may name freely). It is framed
            // below as the header-only FPDU it is, whatever `tx_from_memory_min`.
            let header_only_read = plen == 0 && matches!(src, TxSrc::ReadResp(_));
            if plen >= ctx.cfg.tx_from_memory_min && from_memory && !header_only_read {
                // Sent from registered memory (module `txrec`): its source checked now,
                // copied into each frame that carries it. The message's next segments
                // join it while they are full ones (the last may be shorter) that fit the
                // send buffer and the pass's budget: queued as one run, one record and
                // one TCP entry for them all ([`txrec::Run`]).
                let mut run = txrec::Run {
                    off,
                    plen,
                    each: plen,
                    fpdus: 1,
                    ends_msg: s.last(),
                };
                // Runs only where every FPDU's header follows from the first's (no ULP
                // octets in it), without markers (the framer then never declines one).
                if !s.last() && s.header_len == s.repr.header_len() && !framer.markers() {
                    let most = (ctx.cfg.tx_budget_fpdus - fpdus).min(txrec::RUN_MAX);
                    let mut space = stack.send_space(tcp).unwrap_or(0).saturating_sub(need);
                    let mut next_hdr = [0u8; MAX_SEGMENT_HEADER_LEN];
                    while run.fpdus < most {
                        let Some(ulpdu_len) = msg.seg.next_ulpdu_len() else {
                            break;
                        };
                        let chunk = ulpdu_len.saturating_sub(s.header_len);
                        let wire = framer.fpdu_wire_len(ulpdu_len);
                        // A longer segment (MULPDU grew) starts a run of its own.
                        if chunk > plen || space < wire {
                            break;
                        }
                        let Ok(Some(next)) = msg.seg.next_segment(&mut next_hdr) else {
                            break;
                        };
                        debug_assert!(
                            next.header_len == s.header_len
                                && u64::from(next.payload_offset) == off + run.plen as u64
                        );
                        space -= wire;
                        run.fpdus += 1;
                        run.plen += next.payload_len as usize;
                        run.ends_msg = next.last();
                        debug_assert_eq!(
                            &txrec::run_header(
                                hdr.first_chunk().unwrap_or(&[0; txrec::RECORD_HDR_MAX]),
                                s.header_len,
                                (run.fpdus - 1, run.fpdus),
                                run.plen - next.payload_len as usize,
                                run.ends_msg
                            )[..s.header_len],
                            &next_hdr[..s.header_len],
                            "a run's header differs from the segmenter's"
                        );
                        // Only the message's last segment is shorter than the others.
                        if next.last() || (next.payload_len as usize) < plen {
                            break;
                        }
                    }
                }
                let queued = txrec::queue(
                    stack,
                    tcp,
                    records,
                    framer,
                    (&hdr, s.header_len),
                    src,
                    (sq, sq_head),
                    mrs,
                    (pd, stream),
                    run,
                );
                match queued {
                    Ok(true) => {
                        if let TxSrc::Sq(seq) = msg.src {
                            if let Some(e) = self.sq.get_mut((seq - sq_head) as usize) {
                                e.unacked += 1;
                            }
                        }
                        fpdus += run.fpdus;
                        ctx.stats.fpdus_tx += run.fpdus as u64;
                        ctx.stats.tx_from_memory_octets += run.plen as u64;
                        work = true;
                        if msg.seg.is_done() {
                            self.tx_message_done();
                        }
                        continue;
                    }
                    // A header-only response, or a marker inside: framed into the send
                    // buffer below.
                    Ok(false) if run.fpdus == 1 => {}
                    // Never for a run of more (built only where `queue` takes it); the
                    // segmenter is past its FPDUs, so the QP fails rather than lose them.
                    Ok(false) => {
                        debug_assert!(false, "a run of FPDUs was declined");
                        drop(held);
                        self.fail_tx_source(msg_seq(&self.tx), ctx);
                        return ControlFlow::Break(true);
                    }
                    Err(()) => {
                        drop(held);
                        self.fail_tx_source(msg_seq(&self.tx), ctx);
                        return ControlFlow::Break(true);
                    }
                }
            }
            let (sq, src) = (&self.sq, &msg.src);
            // Copies this segment's payload out of registered memory into `dst`; false if
            // the local region went away.
            let mut fill = |dst: &mut [u8]| -> bool {
                match src {
                    TxSrc::Sq(seq) => match sq.get((*seq - sq_head) as usize) {
                        Some(e) => gather(mrs, &mut held, pd, e.wr.sges.as_slice(), off, dst),
                        None => false,
                    },
                    TxSrc::AtomicResp => true,
                    TxSrc::ReadResp(plan) => {
                        dst.is_empty()
                            || mrs
                                .lookup_remote(Stag(plan.src_stag), pd, stream, Access::REMOTE_READ)
                                .ok()
                                .and_then(|g| {
                                    let to = plan.src_to.checked_add(off)?;
                                    g.copy_out_at(to, dst).ok()
                                })
                                .is_some()
                    }
                }
            };
            let sent = send_fpdu_from(
                stack,
                tcp,
                framer,
                &hdr[..s.header_len],
                plen,
                need,
                &mut fill,
                gbuf,
                fbuf,
            );
            if sent.is_err() {
                drop(held);
                self.fail_tx_source(msg_seq(&self.tx), ctx);
                return ControlFlow::Break(true);
            }
            // Space was checked before the segment was cut, so this always succeeds.
            debug_assert!(matches!(sent, Ok(true)));
            fpdus += 1;
            ctx.stats.fpdus_tx += 1;
            work = true;
            if msg.seg.is_done() {
                self.tx_message_done();
            }
        }
        ControlFlow::Continue(work)
    }

    /// The request at the send position if it is a plain RDMA Write that goes out whole in
    /// one FPDU, copied into the TCP send buffer (fewer than `small`
    /// payload octets: not sent from registered memory, module `txrec`): sent here, with
    /// no segmenter (`DdpSender::tagged_whole` writes its header) and no message in
    /// `self.tx`. The same steps and outcome as [`Self::start_next`], the segment loop of
    /// [`Self::tx_fpdus`] and [`Self::tx_message_done`] for it, ~90 instructions fewer (a
    /// 64 B Write); `tests/engine_fast_paths.rs` holds it to them. Declined when anything
    /// comes first (a fault, a Read or Atomic Response owed, a local operation or a fence
    /// waiting): the general path decides. One difference: with no room in the send
    /// buffer the Write is not started (the general path starts it and then stops), so a
    /// Read or Atomic Response that arrives before the next pass goes out before it, as a
    /// response owed before the Write reached the send position would on the general path
    /// (RDMAP orders responses among themselves, not against our requests). Declining
    /// there instead, so that the general path starts the Write, was tried (c1e6437) and
    /// undone: `bench/loss.sh --quick` then counted a spurious RTO in every loss-free run
    /// (3 of 3, and at every loss rate of two full runs), against 2 in 26 loss-free runs
    /// of the builds around it; the cause is not found yet. With nothing at all to start,
    /// says so (the general path would look the send position up again to find nothing).
    /// Inlined into `tx_fpdus`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn tx_write_whole<'m, D: PollDevice>(
        &mut self,
        stack: &mut Stack<D>,
        tcp: ConnId,
        mrs: &'m MrTable,
        held: &mut Option<MrGuard<'m>>,
        gbuf: &mut Vec<u8>,
        fbuf: &mut Vec<u8>,
        small: usize,
    ) -> WriteWhole {
        let Ok(idx) = usize::try_from(self.sq_next_seq - self.sq_head_seq) else {
            return WriteWhole::DECLINED;
        };
        let Some(e) = self.sq.get_mut(idx) else {
            // Every request started: with no fault and no response owed, the general path
            // would find nothing to start either.
            return if self.tx_fault.is_none() && self.irq.is_empty() {
                WriteWhole::NothingToStart
            } else {
                WriteWhole::DECLINED
            };
        };
        // The operation first: what the other requests pay to be declined.
        let SendOp::Write {
            remote_stag,
            remote_to,
        } = e.wr.op
        else {
            return WriteWhole::Declined {
                local_next: e.wr.op.is_local() || e.status.is_some(),
            };
        };
        // A fault, a Read or Atomic Response owed, a Read fence waiting for earlier Reads,
        // or a Write flushed when it was posted (passed over, never sent: `local_op_next`):
        // the general path decides.
        if self.tx_fault.is_some()
            || !self.irq.is_empty()
            || e.status.is_some()
            || (e.wr.fence && !self.orq.is_empty())
        {
            return WriteWhole::Declined {
                local_next: e.status.is_some(),
            };
        }
        let Some(conn) = self.conn.as_mut() else {
            return WriteWhole::DECLINED;
        };
        let pd = self.pd;
        let sent = frame_write_whole(
            stack,
            tcp,
            conn,
            (remote_stag, remote_to),
            &e.wr.sges,
            |sges, dst| gather(mrs, held, pd, sges, 0, dst),
            (gbuf, fbuf),
            small,
        );
        let seq = self.sq_next_seq;
        match sent {
            WholeWrite::NotWhole => return WriteWhole::DECLINED,
            // The general path would start the message and find no room: nothing sent.
            WholeWrite::NoRoom => return WriteWhole::NoRoom,
            WholeWrite::Sent | WholeWrite::SourceFailed => {}
        }
        // Started (as `start_sq` does), whether it went out or its source failed.
        e.stage += 1;
        self.sq_next_seq += 1;
        if sent == WholeWrite::SourceFailed {
            return WriteWhole::SourceFailed(seq);
        }
        // As `tx_message_done`: a Write is done once out whole (none of it was sent from
        // registered memory, so no acknowledgement is awaited).
        e.sent_whole = true;
        if e.unacked == 0 {
            e.status.get_or_insert(WcStatus::Success);
        }
        WriteWhole::Sent
    }

    /// A send request posted to this QP's empty send queue, taken at once if it is a plain
    /// RDMA Write that [`Self::tx_write_whole`] would send whole from the send position:
    /// framed into the TCP send buffer now; the caller records it, and the next loop gives
    /// its slot back and, if signalled, pushes its completion before anything else (the
    /// payload was copied, so the buffer may be reused: a Write completes when its buffer
    /// may be reused; RDMAP-5.5-8's order kept, as nothing is outstanding ahead of it and
    /// what follows waits in the send queue). It never enters the send queue: no entry
    /// written, looked up, started and retired. Linux siw, too, sends a request posted to
    /// an idle send queue in the caller's context.
    ///
    /// Taken only where the general path would do the same at its next pass with nothing
    /// in between: the QP settled as [`tx_settled_but_txrec`] has it (connected, MPA done,
    /// no Terminate, RTR, message in progress, fault or response owed) but for its
    /// completion queues (an overrun is acted on when the next loop pushes its completion,
    /// `EngineCore::complete_posted_out`), its send queue empty, and no fence waiting for
    /// a Read. Returns the TCP connection it was framed on; `None`, nothing changed: the
    /// request goes into the send queue (no room in the send buffer, not such a Write, or
    /// its local region went away, which the general path then reports).
    #[inline(always)]
    pub(super) fn write_at_post<D: PollDevice>(
        &mut self,
        stack: &mut Stack<D>,
        ctx: &mut Ctx,
        bufs: (&mut Vec<u8>, &mut Vec<u8>),
        wr: &SendWr,
    ) -> Option<ConnId> {
        let SendOp::Write {
            remote_stag,
            remote_to,
        } = wr.op
        else {
            return None;
        };
        // `tx_settled_but_txrec` with its send queue empty, but for the completion queues:
        // overrun, they are acted on when the next loop pushes its completion.
        let conn = self.conn.as_mut()?;
        if !(self.sq.is_empty()
            && tx_quiet(self.state, &self.tx, &self.tx_fault, &self.irq, conn)
            // A fenced Write waits for earlier Reads (`tx_write_whole`, `start_sq`): the
            // send queue may be empty while the ORQ is not (an initiator's Read RTR).
            && (!wr.fence || self.orq.is_empty())
            && fast_paths())
        {
            return None;
        }
        let tcp = conn.tcp;
        let small = if stack.implementation() == TcpImplementation::Warpcore {
            ctx.cfg.tx_from_memory_min
        } else {
            usize::MAX
        };
        let (mrs, pd) = (&*ctx.mrs, self.pd);
        let sent = frame_write_whole(
            stack,
            tcp,
            conn,
            (remote_stag, remote_to),
            &wr.sges,
            |sges, dst| gather_once(mrs, pd, sges, dst),
            bufs,
            small,
        );
        if sent != WholeWrite::Sent {
            return None;
        }
        ctx.stats.fpdus_tx += 1;
        // Done: the caller records it, and the next loop retires it
        // (`EngineCore::complete_posted_out`). The send queue's sequence numbers stay:
        // they number its entries, and it had none (no record sent from memory or ORQ
        // entry names this request).
        Some(tcp)
    }

    /// [`Self::write_at_post`] for a request that would be a lone message (the first post
    /// since the last loop, by a caller that holds the core and sends it at once): the
    /// Write is framed into `scratch` and handed to [`Stack::send_lone_record`], which
    /// flushes its frame first and files the FPDU in the TCP send buffer after
    /// ([`LoneWrite::Sent`]); where the stack declines, the FPDU goes into the send buffer
    /// as `write_at_post` frames it ([`LoneWrite::Framed`], the caller's transmit pass
    /// sends it). [`LoneWrite::Declined`], nothing changed (the framer untouched): not
    /// such a Write, no room, or its local region went away; `write_at_post` decides.
    /// `clock` is read once the FPDU is framed. With data in flight the stack declines
    /// (the first post after each loop of a stream of small Writes): the FPDU then costs
    /// a second copy, into the send buffer; asking the stack first cost the lone path
    /// more (callgrind: ~50 instructions a round trip) than it saved a stream (none
    /// measurable per 64 B Write), so it is not asked.
    #[inline(always)]
    pub(super) fn write_lone<D: PollDevice>(
        &mut self,
        stack: &mut Stack<D>,
        ctx: &mut Ctx,
        scratch: &mut Vec<u8>,
        wr: &SendWr,
        clock: &mut impl FnMut() -> Instant,
    ) -> LoneWrite {
        let SendOp::Write {
            remote_stag,
            remote_to,
        } = wr.op
        else {
            return LoneWrite::Declined;
        };
        // `write_at_post`'s conditions.
        let Some(conn) = self.conn.as_mut() else {
            return LoneWrite::Declined;
        };
        if !(self.sq.is_empty()
            && tx_quiet(self.state, &self.tx, &self.tx_fault, &self.irq, conn)
            && (!wr.fence || self.orq.is_empty())
            && fast_paths()
            && stack.implementation() == TcpImplementation::Warpcore)
        {
            return LoneWrite::Declined;
        }
        let tcp = conn.tcp;
        let Some(framer) = conn.framer.as_mut() else {
            return LoneWrite::Declined;
        };
        // `frame_write_whole`'s header and size checks.
        let len = wr.sges.total_len() as u32;
        let plen = len as usize;
        let Some((hdr, hlen)) =
            whole_write_header(&conn.ddp_tx, framer, (remote_stag, remote_to), len)
        else {
            return LoneWrite::Declined;
        };
        let ulen = hlen + plen;
        let need = framer.fpdu_wire_len(ulen);
        if plen >= ctx.cfg.tx_from_memory_min
            || need != fpdu::fpdu_len(ulen)
            || stack.send_space(tcp).unwrap_or(0) < need
        {
            return LoneWrite::Declined;
        }
        if scratch.len() < need {
            scratch.resize(need.max(FPDU_SCRATCH_LEN), 0);
        }
        let fpdu = &mut scratch[..need];
        let at = fpdu::ULPDU_LENGTH_LEN + hlen;
        if !gather_once(
            &ctx.mrs,
            self.pd,
            wr.sges.as_slice(),
            &mut fpdu[at..at + plen],
        ) {
            return LoneWrite::Declined;
        }
        match framer.emit_in_place(&hdr[..hlen], plen, fpdu) {
            Ok(Some(n)) if n == need => {}
            // Nothing changed (a marker would fall inside: not the case with `need` the
            // FPDU's plain length).
            _ => return LoneWrite::Declined,
        }
        // Framed: from here the FPDU is sent, one way or the other.
        ctx.stats.fpdus_tx += 1;
        let now = clock();
        if stack.send_lone_record(tcp, now, fpdu) == Ok(true) {
            ctx.stats.writes_sent_at_post += 1;
            return LoneWrite::Sent(now);
        }
        // Into the send buffer as `send_fpdu_from` writes it (the room was checked).
        let direct = stack.send_with_room(tcp, need, |buf| match buf.get_mut(..need) {
            Some(b) => {
                b.copy_from_slice(fpdu);
                need
            }
            None => 0,
        });
        if direct != Ok(need) {
            let mut off = 0;
            while off < need {
                match stack.send(tcp, &fpdu[off..]) {
                    Ok(k) if k > 0 => off += k,
                    _ => break,
                }
            }
            debug_assert_eq!(off, need);
            let _ = stack.end_record(tcp);
        }
        LoneWrite::Framed(tcp, now)
    }

    /// The local region went away under a posted request (SQ entry `seq`) or a Read being
    /// answered: the request fails with [`WcStatus::LocalProtection`], the stream with a
    /// local catastrophic error.
    pub(super) fn fail_tx_source(&mut self, seq: Option<u64>, ctx: &mut Ctx) {
        if let Some(e) = seq.and_then(|s| self.entry_mut(s)) {
            e.status.get_or_insert(WcStatus::LocalProtection);
        }
        self.fail_local(
            ProtocolError::Rdmap(RdmapError::LocalCatastrophic),
            None,
            ctx,
        );
    }

    /// TCP acknowledged an FPDU of SQ entry `seq` sent from registered memory: once all
    /// of them are and its last was queued, the request is done.
    pub(super) fn record_acked(&mut self, seq: u64) {
        let flushed = matches!(self.state, QpState::Error | QpState::Terminate);
        if let Some(e) = self.entry_mut(seq) {
            e.unacked = e.unacked.saturating_sub(1);
            if e.unacked == 0 && e.status.is_none() {
                if e.sent_whole {
                    e.status = Some(WcStatus::Success);
                } else if flushed {
                    // Held by `flush` until TCP no longer reads its buffer (RDMAP-5.5-8):
                    // not all of it was queued, so it completes flushed.
                    e.status = Some(WcStatus::FlushErr);
                }
            }
        }
    }

    /// The message at `tx` is out whole: a Send or Write is done (it completes when the
    /// requests before it did, and when TCP acknowledged those of its FPDUs sent from
    /// registered memory); Reads and Atomics complete when their response arrives, a
    /// Write with Immediate when its second message is out; a Read or Atomic Response frees
    /// its IRD slot.
    #[inline(always)]
    fn tx_message_done(&mut self) {
        let done = self.tx.take();
        match done.map(|m| m.src) {
            Some(TxSrc::Sq(seq)) => {
                if let Some(e) = self.entry_mut(seq) {
                    let pending = matches!(e.wr.op, SendOp::Read { .. })
                        || e.wr.op.is_atomic()
                        || (matches!(e.wr.op, SendOp::WriteWithImm { .. }) && e.stage < 2);
                    if !pending {
                        e.sent_whole = true;
                        if e.unacked == 0 {
                            e.status.get_or_insert(WcStatus::Success);
                        }
                    }
                }
            }
            Some(TxSrc::ReadResp(_)) | Some(TxSrc::AtomicResp) => self.ird.retire(),
            None => {}
        }
    }

    /// In a graceful close, once the peer has closed and everything before its FIN is
    /// read, nothing more can arrive: what only the peer could complete never will. Our
    /// outstanding Reads and Atomics (their responses), and, on a responder still fenced
    /// (MPA-7.1.2-16: the initiator closed before its first FPDU, so the fence cannot
    /// lift), everything posted to send, complete flushed, so that the close finishes (FIN,
    /// then `Disconnected`) instead of waiting for ever. `queued`: the octets TCP still
    /// holds before the FIN. Returns whether anything changed.
    fn fail_unanswerable(&mut self, queued: usize) -> bool {
        let peer_done = self.conn.as_ref().is_some_and(|c| c.peer_closed) && queued == 0;
        if !peer_done {
            return false;
        }
        let mut work = false;
        while let Some(h) = self.orq.pop_front() {
            if let Some(e) = h.seq.and_then(|seq| self.entry_mut(seq)) {
                e.status.get_or_insert(WcStatus::FlushErr);
            }
            work = true;
        }
        self.read_placed = 0;
        if !self.can_send_fpdus() && !self.sq.is_empty() {
            // Nothing of these was sent (no FPDU before the fence lifts); local operations
            // that ran have their status already.
            for e in self.sq.iter_mut() {
                e.status.get_or_insert(WcStatus::FlushErr);
            }
            self.tx = None;
            work = true;
        }
        if work {
            self.retire_sq();
            if self.sq.is_empty() {
                self.sq_next_seq = self.sq_head_seq;
            }
        }
        work
    }

    /// Graceful close: once nothing is owed, FIN (RDMAP-06 §6; the peer drains too); once
    /// the peer closed as well and everything before its FIN is read, the QP is flushed,
    /// its TCP connection handed to the zombies and [`CmEvent::Disconnected`] reported. TCP
    /// may still have to send or resend Read Responses sent from registered memory (the
    /// peer closed before it acknowledged them): it gets a copy of them first
    /// ([`txrec::internalize`]), as at a destroy during a graceful close, so that the zombie
    /// reads no memory of a QP that let it go (and may be destroyed, its buffers reused, at
    /// once).
    fn tx_close_if_drained<D: PollDevice>(
        &mut self,
        stack: &mut Stack<D>,
        tcp: ConnId,
        ctx: &mut Ctx,
        (zombies, now): (&mut Zombies, Instant),
        records: &mut TxRecords,
    ) -> bool {
        if self.state != QpState::Closing {
            return false;
        }
        // Octets still queued before the peer's FIN (none once the poller read them): every
        // step below waits for them, and none of them reads any.
        let queued = stack.recv_queue(tcp).unwrap_or(0);
        // Before our FIN: the Terminate of a stream the peer's FIN ended inside a message
        // goes out first (`fail_if_fin_inside_message`).
        if self.fail_if_fin_inside_message(queued, ctx) {
            return true;
        }
        let mut work = self.fail_unanswerable(queued);
        let drained =
            self.tx.is_none() && self.irq.is_empty() && self.sq.is_empty() && self.orq.is_empty();
        if !drained {
            return work;
        }
        let qid = self.id;
        if let Some(c) = self.conn.as_mut() {
            if !c.fin_sent {
                let _ = stack.close(tcp);
                c.fin_sent = true;
                work = true;
            }
            // Only once everything before the peer's FIN is read (RDMAP-06 §6, MPA-7.2-1):
            // the receive poller reads a queue `rx_budget_bytes` a loop, and what it has not
            // read yet (Sends the peer completed, their receives posted here) would be
            // flushed with the receives and lost. It marks this QP when the queue is empty.
            if c.peer_closed && queued == 0 {
                self.flush();
                if let Some(c) = self.conn.take() {
                    // Nothing of ours is read once the QP lets the connection go (module
                    // `txrec`; RDMAP-5.5-8: its memory is the application's again, to
                    // reuse or deregister once `Disconnected` is reported or the QP is
                    // destroyed): what TCP still owes of its records becomes TCP's own.
                    txrec::internalize(stack, c.tcp, records, &ctx.mrs);
                    zombies.insert(c.tcp);
                    // What TCP still has to send (our FIN, Read Responses the peer has
                    // not acknowledged) is bounded as the QP's close was
                    // (`EngineConfig::close_timeout_ms`, `EngineCore::poll_close_timers`).
                    let bound = Duration::from_millis(ctx.cfg.close_timeout_ms);
                    let mark = stack.send_queue(c.tcp).unwrap_or(0);
                    zombies.watch_from(c.tcp, now, bound, mark);
                }
                ctx.events.push_back(CmEvent::Disconnected {
                    qp: qid,
                    cause: DisconnectCause::Closed,
                });
            }
        }
        work
    }
}

/// Frames a plain RDMA Write of `wr_sges` to the peer's `(STag, Tagged Offset)` whole in
/// one FPDU, its header from `DdpSender::tagged_whole` and its payload (fewer than `small`
/// octets) copied into the TCP send buffer by `fill` from the SGEs ([`gather`],
/// [`send_fpdu_from`]). The one body of [`Qp::tx_write_whole`] and [`Qp::write_at_post`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn frame_write_whole<D: PollDevice>(
    stack: &mut Stack<D>,
    tcp: ConnId,
    conn: &mut Conn,
    (remote_stag, remote_to): (u32, u64),
    wr_sges: &SgeList,
    mut fill: impl FnMut(&[Sge], &mut [u8]) -> bool,
    (gbuf, fbuf): (&mut Vec<u8>, &mut Vec<u8>),
    small: usize,
) -> WholeWrite {
    let Some(framer) = conn.framer.as_mut() else {
        return WholeWrite::NotWhole;
    };
    let sges = wr_sges.as_slice();
    // The post checks reject a message over u32::MAX octets.
    let len = wr_sges.total_len() as u32;
    let plen = len as usize;
    let Some((hdr, hlen)) = whole_write_header(&conn.ddp_tx, framer, (remote_stag, remote_to), len)
    else {
        return WholeWrite::NotWhole;
    };
    if plen >= small {
        return WholeWrite::NotWhole;
    }
    let need = framer.fpdu_wire_len(hlen + plen);
    let mut fill = |dst: &mut [u8]| fill(sges, dst);
    match send_fpdu_from(
        stack,
        tcp,
        framer,
        &hdr[..hlen],
        plen,
        need,
        &mut fill,
        gbuf,
        fbuf,
    ) {
        Ok(true) => WholeWrite::Sent,
        Ok(false) => WholeWrite::NoRoom,
        Err(()) => WholeWrite::SourceFailed,
    }
}

/// The DDP/RDMAP header of a plain RDMA Write of `len` octets to the peer's
/// `(STag, Tagged Offset)` sent whole in one FPDU within `framer`'s MULPDU
/// (`DdpSender::tagged_whole`), and its length; `None` where it does not go whole. The
/// header of [`frame_write_whole`] and [`Qp::write_lone`].
#[inline(always)]
fn whole_write_header(
    ddp_tx: &DdpSender,
    framer: &Framer,
    (remote_stag, remote_to): (u32, u64),
    len: u32,
) -> Option<([u8; TAGGED_HEADER_LEN], usize)> {
    let mut hdr = [0u8; TAGGED_HEADER_LEN];
    let ctrl = Control::new(Opcode::Write).0;
    let hlen = ddp_tx.tagged_whole(
        ctrl,
        remote_stag,
        remote_to,
        len,
        framer.max_ulpdu_len(),
        &mut hdr,
    )?;
    Some((hdr, hlen))
}

/// What [`frame_write_whole`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WholeWrite {
    /// Not a Write that goes out whole in one FPDU copied into the send buffer: nothing
    /// done.
    NotWhole,
    /// No room in the TCP send buffer: nothing changed.
    NoRoom,
    /// Framed into the send buffer.
    Sent,
    /// The local region went away (`gather` failed): nothing sent.
    SourceFailed,
}

/// What [`Qp::write_lone`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LoneWrite {
    /// Not taken, nothing changed.
    Declined,
    /// Framed and flushed at this time.
    Sent(Instant),
    /// Framed into this TCP connection's send buffer at this time, not yet sent.
    Framed(ConnId, Instant),
}

/// What [`Qp::tx_write_whole`] did.
enum WriteWhole {
    /// The Write went out whole.
    Sent,
    /// Not such a Write, or something comes first: the general path decides.
    /// `local_next`: [`Qp::local_op_next`], found on the way (the request at the send
    /// position was looked up already).
    Declined { local_next: bool },
    /// No room in the TCP send buffer: nothing changed, the pass ends.
    NoRoom,
    /// No request left to start, no response owed and no fault: the general path would
    /// start nothing; the pass ends.
    NothingToStart,
    /// The local region went away under the request (its sequence number): the message
    /// was started, nothing was sent.
    SourceFailed(u64),
}

impl WriteWhole {
    /// Declined with no local operation at the send position.
    const DECLINED: WriteWhole = WriteWhole::Declined { local_next: false };
}

/// The SQ sequence number of the message being sent, if it is a request's.
fn msg_seq(tx: &Option<TxMsg>) -> Option<u64> {
    match tx.as_ref().map(|m| &m.src) {
        Some(TxSrc::Sq(seq)) => Some(*seq),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem::Region;
    use std::sync::atomic::Ordering;

    /// EXT-5-1, EXT-5.3-1: the engine's atomic primitive ([`execute_atomic`], what every
    /// core runs for an inbound Atomic Request) loses no update when two cores run it on
    /// one word at once: a masked FetchAdd in each of two 32-bit lanes (the carry out of
    /// the low lane must not reach the high one), and a CmpSwap used as an increment of a
    /// second word (each success must be exact). Each call looks the STag up, as a core
    /// does per request.
    #[test]
    fn execute_atomic_from_two_threads_loses_no_update() {
        let r = Arc::new(Region::allocate(64, 64).unwrap());
        let t = Arc::new(MrTable::with_seed(4, 7));
        let pd = PdId(1);
        let access = Access::LOCAL_WRITE | Access::REMOTE_ATOMIC | Access::REMOTE_READ;
        let stag = t.register(Arc::clone(&r), pd, access, 0).unwrap().0;
        let per_thread: u64 = if cfg!(miri) { 200 } else { 100_000 };
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let workers: Vec<_> = (0..2u32)
            .map(|i| {
                let (t, barrier) = (Arc::clone(&t), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    barrier.wait();
                    let mask = 0x8000_0000_8000_0000;
                    // Thread 0 adds 0xFFFF_FFFF to the low lane (a carry out of it every
                    // time it is not zero, dropped by the mask), thread 1 one to the high lane.
                    let add = if i == 0 { 0xFFFF_FFFF } else { 1 << 32 };
                    let mut swaps = 0u64;
                    for n in 0..per_thread {
                        let fa = AtomicRequestRepr::fetch_add(n as u32, stag, 8, add, mask);
                        execute_atomic(&fa, &t, pd, 0).unwrap();
                        // An increment by CmpSwap: retried until it matches.
                        let mut guess = 0;
                        loop {
                            let cs = AtomicRequestRepr::cmp_swap(
                                n as u32,
                                stag,
                                16,
                                guess + 1,
                                u64::MAX,
                                guess,
                                u64::MAX,
                            );
                            let orig = execute_atomic(&cs, &t, pd, 0).unwrap();
                            if orig == guess {
                                swaps += 1;
                                break;
                            }
                            guess = orig;
                        }
                    }
                    swaps
                })
            })
            .collect();
        let swaps: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
        let lanes = r.atomic_u64_at(8).unwrap().load(Ordering::SeqCst);
        let low = (per_thread.wrapping_mul(0xFFFF_FFFF)) & 0xFFFF_FFFF;
        assert_eq!(lanes, (per_thread << 32) | low, "masked FetchAdd lanes");
        assert_eq!(swaps, 2 * per_thread);
        assert_eq!(r.atomic_u64_at(16).unwrap().load(Ordering::SeqCst), swaps);
    }

    /// `gather`'s one-SGE fast path gives what its general loop gives (the same SGE
    /// followed by an empty one takes the loop, with the same outcome by definition):
    /// result, octets written and the guard held afterwards, at offsets and lengths inside,
    /// across and past the SGE, for a bad key, another PD and a TO that wraps.
    #[test]
    fn gather_one_sge_equals_the_loop() {
        let r = Arc::new(Region::allocate(4096, 8).unwrap());
        let pattern: Vec<u8> = (0..4096u32).map(|i| (i * 13 + i / 7) as u8).collect();
        r.write_at(0, &pattern).unwrap();
        let t = MrTable::with_seed(4, 9);
        let pd = PdId(1);
        let stag = t.register(r, pd, Access::LOCAL_WRITE, 0x1000).unwrap().0;
        let sges = [
            Sge {
                stag,
                to: 0x1000,
                len: 4096,
            },
            Sge {
                stag,
                to: 0x1100,
                len: 100,
            },
            Sge {
                stag,
                to: 0x1000 + 4000,
                len: 200,
            },
            Sge {
                stag: stag ^ 0xff,
                to: 0x1000,
                len: 64,
            },
            Sge {
                stag,
                to: u64::MAX - 10,
                len: 64,
            },
            Sge {
                stag,
                to: 0x1000,
                len: 0,
            },
        ];
        for s in sges {
            for pd in [pd, PdId(2)] {
                for off in [0u64, 1, 63, 99, 100, 101, 4095, 4096, 5000] {
                    for len in [0usize, 1, 36, 64, 99, 100, 101] {
                        let empty = Sge {
                            stag,
                            to: 0,
                            len: 0,
                        };
                        let (mut a, mut b) = (vec![0xEE; len], vec![0xEE; len]);
                        let (mut ha, mut hb) = (None, None);
                        let ra = gather(&t, &mut ha, pd, &[s], off, &mut a);
                        let rb = gather(&t, &mut hb, pd, &[s, empty], off, &mut b);
                        let what = format!("{s:?} pd {pd:?} offset {off} length {len}");
                        assert_eq!(ra, rb, "{what}");
                        assert_eq!(a, b, "{what}");
                        assert_eq!(
                            ha.as_ref().map(|g| g.stag()),
                            hb.as_ref().map(|g| g.stag()),
                            "{what}"
                        );
                    }
                }
            }
        }
    }
}
