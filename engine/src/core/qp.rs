//! The state of one queue pair: send-queue retirement in order, completions, the move to
//! the error state with its flush, and the two ways a stream fails: a local protocol error
//! (our Terminate) and a remote Terminate.

use super::*;
use warpcore_proto::wire::ddp::DdpBuffer;

impl<D: PollDevice> EngineCore<D> {
    /// A completion queue that overran lost completions: every QP feeding it that is still
    /// alive goes to the error state, as the verbs prescribe for a CQ error, with a local
    /// catastrophic Terminate to the peer (RDMAP-7.1-1: reported to the local user as
    /// [`ConnError::CqOverrun`]). Nothing is lost silently.
    #[inline]
    pub(super) fn poll_cq_overrun(&mut self, slots: &[usize]) {
        for &i in slots {
            if self.qps[i]
                .as_ref()
                .is_some_and(|q| q.send_cq.overrun() || q.recv_cq.overrun())
            {
                self.cq_overran(i);
            }
        }
    }

    /// [`Self::poll_cq_overrun`]'s action for QP slot `i`, whose send or receive CQ
    /// overran: out of line, so that the poller's check of each QP stays a few
    /// instructions.
    #[cold]
    #[inline(never)]
    pub(super) fn cq_overran(&mut self, i: usize) {
        let EngineCore {
            qps, ctx, tx_ready, ..
        } = self;
        let Some(q) = qps[i].as_mut() else {
            return;
        };
        // The queue's own asynchronous error, once for the queue (whichever core finds it
        // first), before the errors of the queue pairs it fails; also when the queue pair
        // had failed already (its flushes may be what overran it).
        for cq in [&q.send_cq, &q.recv_cq] {
            if cq.take_overrun_report() {
                ctx.events.push_back(CmEvent::CqError { cq: cq.id() });
            }
        }
        if matches!(q.state, QpState::Terminate | QpState::Error) {
            return;
        }
        if q.conn.is_none() || q.state == QpState::Connecting {
            // Not connected (yet): nothing to tell a peer; to the error state at once. An
            // initiator still waiting for the Reply has no FPDU mode to frame a Terminate
            // in: its startup is abandoned (a Reply arriving later is dropped, not taken
            // for an establishment) and TCP closed on the transmit poller.
            q.flush();
            if let Some(c) = q.conn.as_mut() {
                c.mpa = Mpa::Done;
                q.disconnect_requested = true;
                tx_ready.mark(i);
            }
            ctx.events.push_back(CmEvent::Error {
                qp: q.id,
                error: ConnError::CqOverrun,
            });
        } else {
            q.fail_local_because(
                ProtocolError::Rdmap(RdmapError::LocalCatastrophic),
                None,
                ctx,
                ConnError::CqOverrun,
            );
            // The Terminate goes out on the transmit poller.
            tx_ready.mark(i);
        }
    }
}

impl Qp {
    pub(super) fn complete_send(&self, e: &SqEntry, status: WcStatus) {
        let opcode = match e.wr.op {
            SendOp::Write { .. } => WcOpcode::Write,
            SendOp::Read { .. } => WcOpcode::Read,
            SendOp::AtomicFetchAdd { .. } => WcOpcode::AtomicFetchAdd,
            SendOp::AtomicCmpSwap { .. } => WcOpcode::AtomicCmpSwap,
            SendOp::WriteWithImm { .. } => WcOpcode::WriteWithImm,
            SendOp::Immediate { .. } => WcOpcode::Immediate,
            SendOp::BindMw { .. } => WcOpcode::BindMw,
            SendOp::FastReg { .. } => WcOpcode::FastReg,
            SendOp::LocalInvalidate { .. } => WcOpcode::LocalInvalidate,
            _ => WcOpcode::Send,
        };
        self.send_cq.push(Completion {
            wr_id: e.wr.wr_id,
            qp: self.id,
            opcode,
            status,
            // A request that failed or was flushed transferred nothing the application may
            // count on (a refused Read placed nothing, a flushed Write was never sent):
            // 0 octets, as a flushed receive reports and as rdma-core's providers do (rxe
            // fills `byte_len` only on success; siw flushes with 0). RDMAP-7.1-3,
            // RDMAP-6.2.1-2.
            byte_len: if status == WcStatus::Success {
                e.byte_len
            } else {
                0
            },
            solicited: false,
            invalidated: None,
            imm: None,
            atomic_orig: if status == WcStatus::Success {
                e.atomic_orig
            } else {
                None
            },
        });
    }

    /// Retires done requests from the head of the send queue, in order: operations complete
    /// in submission order (RDMAP-5.5-8), a Read only once its Read Response was delivered
    /// (RDMAP-5.5-12); unsignalled successes retire without an entry.
    pub(super) fn retire_sq(&mut self) -> bool {
        // The run of finished requests at the head gives its slots back first, in one
        // atomic operation: by the time the application sees a completion its slot is free.
        // Counted by index: the deque's iterator sets up its two slices first, which
        // costs more than the lone request a latency-bound QP retires.
        let mut done = 0;
        while self.sq.get(done).is_some_and(|e| e.status.is_some()) {
            done += 1;
        }
        if done == 0 {
            return false;
        }
        self.shared.release_sq_n(done as u32);
        for _ in 0..done {
            let Some(e) = self.sq.front() else { break };
            let status = e.status.unwrap_or(WcStatus::Success);
            if e.wr.signaled || status != WcStatus::Success {
                self.complete_send(e, status);
            }
            self.sq.pop_front();
            self.sq_head_seq += 1;
        }
        // A request done before it started (flushed when posted: `post_send_reserved_ref`)
        // may be retired at or past the sending position, which then passes it as
        // `run_local_ops_at` would have: the position never falls behind the head, where
        // `sq_next_seq - sq_head_seq` wrapped (a panic with overflow checks, else a queue
        // that never started another request). RDMAP-5.5-8.
        self.sq_next_seq = self.sq_next_seq.max(self.sq_head_seq);
        true
    }

    /// Records an outstanding Read or Atomic Request (ORD, RDMAP-6.1-1, EXT-5.2-1), in the
    /// order its response must come back, and the high-water mark of the queue.
    pub(super) fn push_outstanding(&mut self, entry: OrqEntry) {
        self.orq.push_back(entry);
        self.orq_high = self.orq_high.max(self.orq.len() as u32);
    }

    pub(super) fn entry_mut(&mut self, seq: u64) -> Option<&mut SqEntry> {
        let i = seq.checked_sub(self.sq_head_seq)?;
        self.sq.get_mut(usize::try_from(i).ok()?)
    }

    pub(super) fn set_state(&mut self, s: QpState) {
        self.state = s;
        self.shared.set_state(s);
    }

    /// Moves to the error state and flushes every outstanding work request: those not done
    /// complete with [`WcStatus::FlushErr`] (done ones keep their status), in queue order
    /// (RDMAP-6.2.1-2: after a Terminate everything outstanding completes in error).
    ///
    /// A Send or Write with FPDUs sent from registered memory that TCP has not had
    /// acknowledged (`SqEntry::unacked`, module `txrec`) is held while the QP still has its
    /// connection: TCP reads its buffer again for every (re)transmission of those FPDUs,
    /// which still go out ahead of our Terminate and FIN and which the peer places, so a
    /// completion now (successful or flushed, either hands the buffer back) would let the
    /// application's next use of the buffer reach the peer (RDMAP-5.5-8, RDMAP-5.5-7;
    /// departure 1). It completes once TCP has them acknowledged ([`Qp::record_acked`]:
    /// successfully if it was queued whole, else flushed), or flushed when the connection
    /// ends (the QP no longer holds it: this is called again then, or the caller took it
    /// first). Never successfully when they were not acknowledged. The requests behind it
    /// complete after it, in order.
    pub(super) fn flush(&mut self) {
        self.set_state(QpState::Error);
        let live = self.conn.is_some();
        for e in self.sq.iter_mut() {
            if e.status.is_none() && !(live && e.unacked > 0) {
                e.status = Some(WcStatus::FlushErr);
            }
        }
        self.retire_sq();
        // Nothing more starts; what is held waits for its acknowledgement (every entry
        // left is past the sending position, as a request flushed at post is).
        self.sq_next_seq = self.sq_head_seq + self.sq.len() as u64;
        self.flush_rq();
        self.orq.clear();
        self.irq.clear();
        self.tx = None;
    }

    /// Completes every posted receive with [`WcStatus::FlushErr`], in order: the receive
    /// half of [`Self::flush`], also for a receive that reaches the core once the QP is in
    /// the Terminate or error state (validated by an application thread before), which
    /// would otherwise wait for TCP to finish closing.
    pub(super) fn flush_rq(&mut self) {
        while let Some(r) = self.rq.pop_front() {
            // The slot first, as `complete_recv` and `retire_sq` give it back: a thread
            // that polled the completion finds room for its next post.
            self.shared.release_rq();
            self.recv_cq.push(Completion {
                wr_id: r.wr_id,
                qp: self.id,
                opcode: WcOpcode::Recv,
                status: WcStatus::FlushErr,
                byte_len: 0,
                solicited: false,
                invalidated: None,
                imm: None,
                atomic_orig: None,
            });
        }
    }

    /// A local failure found while starting work at the sending position (`tx_fault`):
    /// fail the QP with it as [`Self::fail_local`] does. Returns whether there was one.
    pub(super) fn fail_tx_fault(&mut self, ctx: &mut Ctx) -> bool {
        let Some(err) = self.tx_fault.take() else {
            return false;
        };
        let reason = self
            .tx_fault_cause
            .take()
            .unwrap_or(ConnError::LocalTerminate(err));
        self.fail_local_because(err, None, ctx, reason);
        true
    }

    /// A protocol error found here: queue the Terminate the specs prescribe (RDMAP-06
    /// §4.8, §7.1; RDMAP-6.2.1-1, RDMAP-7.1-3/4; DDP-7.1-15/16; MPA-8-*), flush, report
    /// to the local ULP (RDMAP-7.1-1). The Terminate goes out on the next send poll, ahead of
    /// everything else and as the stream's last message (RDMAP-5.4-6); then TCP is closed
    /// gracefully so that it arrives (RDMAP-6.2.1-4). Only the first error is reported
    /// (RDMAP-7.1-5): later calls do nothing.
    pub(super) fn fail_local(
        &mut self,
        err: ProtocolError,
        offending: Option<&[u8]>,
        ctx: &mut Ctx,
    ) {
        self.fail_local_because(err, offending, ctx, ConnError::LocalTerminate(err));
    }

    /// [`Self::fail_local`], reporting `reason` to the local user (when the cause is not the
    /// protocol error the peer is told about, e.g. a completion queue that overran).
    pub(super) fn fail_local_because(
        &mut self,
        err: ProtocolError,
        offending: Option<&[u8]>,
        ctx: &mut Ctx,
        reason: ConnError,
    ) {
        if matches!(self.state, QpState::Terminate | QpState::Error) {
            return;
        }
        if let Some(conn) = self.conn.as_mut() {
            let mut buf = [0u8; TERM_FPDU_MAX];
            let off = offending.map(Offending::new);
            // An offending message is one DDP delivered (or refused itself). On a stream
            // with RFC 7306, an Atomic Request, Atomic Response or Immediate Data message
            // that RDMAP refuses names itself by its DDP header in every case (RFC 7306
            // §8.1 rule 2, EXT-8.1-2), an unsupported AOpCode and an unsolicited Atomic
            // Response too; without RFC 7306 those opcodes are unknown ones (no header,
            // docs/decisions/0001 RDMAP items 3 and 12).
            let emitted = if self.rfc7306 {
                emit_terminate_delivered(err, off.as_ref(), &mut buf)
            } else {
                emit_terminate(err, off.as_ref(), &mut buf)
            };
            if let Ok(n) = emitted {
                conn.term = Some((buf, n));
            }
        }
        self.flush();
        self.set_state(QpState::Terminate);
        ctx.events.push_back(CmEvent::Error {
            qp: self.id,
            error: reason,
        });
    }

    pub(super) fn remote_terminate(&mut self, report: TerminateReport, ctx: &mut Ctx) {
        ctx.stats.terminates_rx += 1;
        // A Terminate that names one of our Read or Atomic Requests fails that request
        // with the peer's verdict; everything else outstanding is flushed and the decoded
        // Terminate goes to the application. The request is the one whose QN 1 MSN the
        // copied DDP header carries (RDMAP-06 §4.8), not necessarily the oldest: a
        // responder refuses the request beyond its IRD, say, with earlier ones queued.
        let named = match (report.opcode, report.ddp.map(|d| d.buffer)) {
            (
                Some(Opcode::ReadRequest | Opcode::AtomicRequest),
                Some(DdpBuffer::Untagged {
                    qn: qn::READ_REQUEST,
                    msn,
                    ..
                }),
            ) => self.orq.iter().find(|o| o.msn == msn).and_then(|o| o.seq),
            _ => None,
        };
        if let Some(seq) = named {
            let access = report.code.etype() == 1 && report.code.layer() <= 1;
            let status = if access {
                WcStatus::RemoteAccess
            } else {
                WcStatus::RemoteOperation
            };
            if let Some(e) = self.entry_mut(seq) {
                e.status = Some(status);
            }
        }
        self.flush();
        // The stream is dead: close TCP once the send poller runs (RDMAP-06 §5.4).
        self.disconnect_requested = true;
        ctx.events.push_back(CmEvent::Error {
            qp: self.id,
            error: ConnError::RemoteTerminate(report),
        });
    }
}
