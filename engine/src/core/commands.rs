//! The application's commands, as the rings of [`crate::runtime`] deliver them (tests call
//! them directly): queue pairs created, destroyed and inspected, work requests posted.

use super::*;

impl Qp {
    /// A queue pair in the idle state with nothing posted and no connection, its send
    /// queue's sequence numbers starting at `sq_seq`: what [`EngineCore::create_qp`] makes
    /// and what [`EngineCore::reset_qp`] starts over from. The queues start empty and grow
    /// with what is posted (at most the depths, which [`QpShared`] enforces): an idle QP
    /// holds no work-request slots (issue 11, item 3). The caller sets the shared state.
    fn idle(
        id: QpId,
        stream: StreamId,
        shared: Arc<QpShared>,
        pd: PdId,
        send_cq: Arc<CompletionQueue>,
        recv_cq: Arc<CompletionQueue>,
        sq_seq: u64,
    ) -> Qp {
        Qp {
            id,
            stream,
            shared,
            pd,
            send_cq,
            recv_cq,
            state: QpState::Idle,
            sq: VecDeque::new(),
            sq_head_seq: sq_seq,
            sq_next_seq: sq_seq,
            rq: VecDeque::new(),
            orq: VecDeque::new(),
            ord: 0,
            irq: VecDeque::new(),
            ird: InboundReadQueue::new(0),
            tx: None,
            conn: None,
            read_placed: 0,
            disconnect_requested: false,
            orq_high: 0,
            rfc7306: true,
            sges_at_post: true,
            tx_fault: None,
            tx_fault_cause: None,
        }
    }

    /// Appends `wr` to the send queue, a new entry with `status`: the entry is pushed
    /// with an empty request and `wr` copied into it where it lies in the queue, field by
    /// field. Built whole and then pushed, the entry went through the stack (the queue may
    /// grow in between), and a copy of a whole request (over 128 octets) is a `memcpy`
    /// call: two calls per request.
    #[inline(always)]
    pub(super) fn push_sq(&mut self, wr: &SendWr, status: Option<WcStatus>) {
        self.sq.push_back(SqEntry {
            wr: SendWr::placeholder(),
            status,
            byte_len: wr.sges.total_len() as u32,
            stage: 0,
            atomic_orig: None,
            unacked: 0,
            sent_whole: false,
        });
        if let Some(e) = self.sq.back_mut() {
            e.wr.copy_from(wr);
        }
    }
}

impl<D: PollDevice> EngineCore<D> {
    /// Creates a queue pair in the idle state.
    pub fn create_qp(&mut self, attr: QpAttr) -> Result<(QpId, Arc<QpShared>), EngineError> {
        if attr.sq_depth as usize > self.ctx.cfg.max_sq_depth || attr.sq_depth == 0 {
            return Err(EngineError::LimitExceeded("sq_depth"));
        }
        if attr.rq_depth as usize > self.ctx.cfg.max_rq_depth || attr.rq_depth == 0 {
            return Err(EngineError::LimitExceeded("rq_depth"));
        }
        if attr.max_sge as usize > self.ctx.cfg.max_sge {
            return Err(EngineError::LimitExceeded("max_sge"));
        }
        let index = match self.free_slots.pop() {
            Some(i) => i,
            None if self.qps.len() < self.ctx.cfg.max_qps => {
                self.qps.push(None);
                self.generations.push(0);
                self.rx_ready.grow(self.qps.len());
                self.tx_ready.grow(self.qps.len());
                self.qps.len() - 1
            }
            None => return Err(EngineError::TableFull("queue pair")),
        };
        self.generations[index] = self.generations[index].wrapping_add(1);
        let id = QpId {
            core: self.core,
            index: index as u16,
            generation: self.generations[index],
        };
        let shared = Arc::new(QpShared::new(
            attr.pd,
            attr.sq_depth,
            attr.rq_depth,
            attr.max_sge,
        ));
        self.qps[index] = Some(Qp::idle(
            id,
            id.stream(),
            Arc::clone(&shared),
            attr.pd,
            attr.send_cq,
            attr.recv_cq,
            0,
        ));
        if let Err(at) = self.live.binary_search(&index) {
            self.live.insert(at, index);
        }
        Ok((id, shared))
    }

    /// Destroys a queue pair: its work requests are flushed and its connection is aborted —
    /// unless a graceful close is already under way (a Terminate or a FIN went out), in which
    /// case TCP finishes that close on its own (reset if it makes no progress for
    /// [`EngineConfig::close_timeout_ms`]). An RST there could overtake the Terminate at
    /// the peer: a peer stack that receives the Terminate and the RST in one burst drops the
    /// unread Terminate with its receive buffer, and the peer's user would see a bare reset
    /// instead of the error report RDMAP-5.4/RDMAP-7.1 require.
    pub fn destroy_qp(&mut self, id: QpId) -> Result<(), EngineError> {
        if !self.posted_out.is_empty() {
            self.complete_posted_out();
        }
        self.note_acked(id);
        // The connection first: every request completes now, those whose buffers TCP
        // still reads (FPDUs sent from registered memory, unacknowledged) flushed, and
        // nothing may read those buffers again (RDMAP-5.5-8): TCP takes a copy of what it
        // still has to send of them, or the connection is reset.
        let (conn, reads_buffers) = self.release_conn(id)?;
        let q = self.qp_mut(id)?;
        q.flush();
        // Its flushed requests may have overrun a queue (IBV_EVENT_CQ_ERR): reported now,
        // once for the queue as `cq_overran` does, since no sweep looks at a destroyed
        // queue pair's queues (and no other may complete into them).
        let overran = [&q.send_cq, &q.recv_cq].map(|cq| cq.take_overrun_report().then(|| cq.id()));
        for cq in overran.into_iter().flatten() {
            self.ctx.events.push_back(CmEvent::CqError { cq });
        }
        let index = usize::from(id.index);
        self.qps[index] = None;
        if let Ok(at) = self.live.binary_search(&index) {
            self.live.remove(at);
        }
        self.free_slots.push(index);
        // Its MPA startup timer entry, if any, is stale from now on (the slot's next QP has
        // another generation): dropped when it surfaces, or by a compaction.
        self.let_go(conn, reads_buffers);
        Ok(())
    }

    /// Notes what TCP had acknowledged of QP `id`'s FPDUs sent from registered memory,
    /// before the QP lets its connection go: a request `flush` would hold for it completes
    /// as acknowledged (RDMAP-5.5-8), not flushed.
    pub(super) fn note_acked(&mut self, id: QpId) {
        if id.core != self.core {
            return;
        }
        let EngineCore {
            qps, stack, txrec, ..
        } = self;
        let Some(Some(q)) = qps.get_mut(usize::from(id.index)) else {
            return;
        };
        let Some(tcp) = q.conn.as_ref().map(|c| c.tcp) else {
            return;
        };
        if q.id == id && txrec.outstanding(tcp) > 0 {
            if let Ok(Some(upto)) = stack.take_acked_external(tcp) {
                txrec.acked(tcp, upto, |seq| q.record_acked(seq));
            }
        }
    }

    /// Takes QP `id`'s connection from it, before its requests complete with the QP's
    /// destruction or reset, and says whether TCP may still read the buffers of any of them
    /// (FPDUs sent from registered memory, unacknowledged: [`Self::let_go`] then resets the
    /// connection). Where a graceful close is under way (our Terminate or FIN sent), TCP
    /// is given a copy of what it still has to send or resend of those FPDUs
    /// ([`warpcore_tcp::Stack::internalize_external`], the octets written into its send
    /// buffer as into a frame), so that the close goes on, the Terminate and the data
    /// before it delivered, while the application has its buffers back: an RST there
    /// could overtake the Terminate (`destroy_qp`), and the peer would lose the tail of
    /// a stream whose end we had announced.
    fn release_conn(&mut self, id: QpId) -> Result<(Option<Conn>, bool), EngineError> {
        let q = self.qp_mut(id)?;
        let conn = q.conn.take();
        let mut reads_buffers = q.sq.iter().any(|e| e.unacked > 0);
        let closing = conn.as_ref().filter(|c| c.fin_sent).map(|c| c.tcp);
        if let Some(tcp) = closing.filter(|&t| reads_buffers || self.txrec.outstanding(t) > 0) {
            let EngineCore {
                stack,
                txrec,
                rx_mrs,
                ..
            } = self;
            if txrec::internalize(stack, tcp, txrec, rx_mrs) {
                // TCP reads none of them again.
                reads_buffers = false;
            }
            // Else a buffer could not be read (a fill failed: noted for `fail_unfillable`,
            // which finds no QP holding the connection and leaves it). The records from it
            // on stay TCP's to read: a request's, handed back with the QP, means a reset
            // (`reads_buffers`); a Read Response's source is read as before, and only a
            // retransmission that cannot read it resets the connection.
        }
        Ok((conn, reads_buffers))
    }

    /// A connection its QP no longer holds: reset unless our FIN went out (a graceful close
    /// under way finishes on its own, `destroy_qp` says why), and left to the zombies to be
    /// released when TCP reports it closed (`conn_qp` may still name the QP's slot for it:
    /// `find_qp` checks the QP's own connection, which is no longer this one).
    /// `reads_buffers`: TCP may still read the buffers of requests that completed
    /// (flushed) with the QP's let-go (FPDUs sent from registered memory, unacknowledged,
    /// and not copied into TCP: [`Self::release_conn`]): reset all the same, as nothing may
    /// read a buffer handed back (RDMAP-5.5-8).
    fn let_go(&mut self, conn: Option<Conn>, reads_buffers: bool) {
        if let Some(c) = conn {
            let reset = !c.fin_sent || reads_buffers;
            if reset {
                let _ = self.stack.abort(c.tcp);
            }
            self.zombies.insert(c.tcp);
            if !reset {
                // The close TCP finishes on its own is bounded as the QP's was
                // (`EngineConfig::close_timeout_ms`).
                self.watch_zombie(c.tcp);
            }
            // What arrived and was not read yet: no Readable event comes for it again.
            self.discard_zombie_input(c.tcp);
        }
    }

    /// Takes a queue pair that failed (the error state, or Terminate) back to the idle
    /// state, as a new one: the verbs' move from ERR to RESET (IB spec's QP state machine,
    /// the kernel's `ib_modify_qp_is_ok`; siw moves ERROR to IDLE). Every outstanding work
    /// request is flushed (again: a failed QP flushed them when it failed; any that reached
    /// the core since complete with [`WcStatus::FlushErr`]); a connection it still holds (TCP
    /// still closing after a Terminate) is let go as [`Self::destroy_qp`] lets it go: aborted
    /// unless its FIN went out, left to the zombies, with no further [`CmEvent`] (its end
    /// was reported when the QP failed). The per-connection state starts over as
    /// [`Self::create_qp`] makes it; the id, protection domain, completion queues, depths,
    /// shared receive queue and the settings the user made on its [`QpShared`]
    /// ([`QpShared::rfc7306`], [`QpShared::sges_checked_at_post`]) are kept, and
    /// [`QpShared::ord`] / [`QpShared::rfc7306_in_use`] read as on a new QP. Receives may be
    /// posted and the QP connected or accepted again.
    ///
    /// An idle QP is left as it is. A QP with a live connection (connecting, in RTS,
    /// closing) is refused with [`EngineError::InvalidState`]: [`Self::abort`] first. A
    /// completion queue that overran stays in error: a QP fed by one fails again at the
    /// next sweep ([`CmEvent::CqError`]).
    pub fn reset_qp(&mut self, id: QpId) -> Result<(), EngineError> {
        match self.qp_ref(id)?.state {
            QpState::Idle => return Ok(()),
            QpState::Error | QpState::Terminate => {}
            s => return Err(EngineError::InvalidState(s)),
        }
        // Writes framed at post complete before the flush, in order (as `abort`).
        if !self.posted_out.is_empty() {
            self.complete_posted_out();
        }
        // The next connection is another DDP stream: a type 2 window bound on this one
        // must not serve it (DDP-8.2-2, DDP-8.3.1-3, RDMAP-8.1.1-3), nor the remote
        // invalidations and Read Responses checked against it.
        self.resets += 1;
        let stream = reset_stream(self.core, self.resets);
        self.note_acked(id);
        // The connection first, as `destroy_qp` takes it: every request completes now.
        let (conn, reads_buffers) = self.release_conn(id)?;
        let q = self.qp_mut(id)?;
        q.flush();
        // As `create_qp` makes it, from one constructor (a field added later starts over
        // too). The SQ sequence numbers go on from where they are (the queue is empty):
        // nothing refers to the old ones, and none is reused.
        let fresh = Qp::idle(
            id,
            stream,
            Arc::clone(&q.shared),
            q.pd,
            Arc::clone(&q.send_cq),
            Arc::clone(&q.recv_cq),
            q.sq_head_seq,
        );
        *q = fresh;
        // What application threads check posts against, before the state they read first.
        q.shared.set_connection(false, 0);
        q.set_state(QpState::Idle);
        // Its MPA startup timer entry, if any, is stale (the QP has no initiator now; a
        // connect adds a new one): dropped when it surfaces, or by a compaction.
        self.let_go(conn, reads_buffers);
        Ok(())
    }

    /// The state of a queue pair.
    pub fn qp_state(&self, id: QpId) -> Result<QpState, EngineError> {
        self.qp_ref(id).map(|q| q.state)
    }

    /// State, negotiated IRD/ORD and the ORD high-water mark of a queue pair.
    pub fn qp_info(&self, id: QpId) -> Result<QpInfo, EngineError> {
        self.qp_ref(id).map(|q| QpInfo {
            state: q.state,
            ird: q.ird.ird(),
            ord: q.ord,
            reads_in_flight_max: q.orq_high,
        })
    }

    /// Posts a send queue work request (validated; nothing changes on error).
    pub fn post_send(&mut self, id: QpId, wr: SendWr) -> Result<(), EngineError> {
        let mrs = Arc::clone(&self.ctx.mrs);
        // Looked up unmarked: `post_send_reserved_ref` marks what it queues, as for an
        // application thread's request.
        let q = self.qp_ref(id)?;
        validate_send(&q.shared, &mrs, &wr)?;
        // Validated (the QP in RTS) and reserved: taken as an application thread's
        // request is; the next loop sends it.
        let _ = self.post_send_reserved_ref(id, &wr);
        Ok(())
    }

    /// Takes a send work request already validated (and its slot reserved) by an
    /// application thread with [`validate_send`]. If the QP left RTS meanwhile the request is
    /// not sent: it completes with a flush error, after the requests posted before it.
    #[inline(never)]
    pub fn post_send_reserved(&mut self, id: QpId, wr: SendWr) {
        let _ = self.post_send_reserved_ref(id, &wr);
    }

    /// [`Self::post_send_reserved`] of a request read where it lies (the command ring's
    /// slot), not moved out of it first: copied from there into its send queue entry
    /// ([`Qp::push_sq`]). Inlined into its callers: the core loop's command handler, the
    /// caller-driven post (`runtime`'s `post_send_now`), [`Self::post_send`] and
    /// [`Self::post_send_reserved`].
    ///
    /// A plain one-FPDU Write posted to an empty send queue is framed at once
    /// ([`Qp::write_at_post`]) and the next loop transmits first. Returns whether the
    /// request was framed so and is the only one since the last loop, on a connection with
    /// nothing in flight: a lone message (a ping-pong's next request or its answer), whose
    /// segment the caller that holds the core may send at once ([`Self::transmit_posted`]).
    /// A burst of posts waits for the loop, which sends it together. (The count is tested
    /// first: the posts of a burst after its first skip the connection's look-up, and one
    /// framed behind a lone Write its post could not send is not tried again.)
    #[inline(always)]
    pub(crate) fn post_send_reserved_ref(&mut self, id: QpId, wr: &SendWr) -> bool {
        if matches!(wr.op, SendOp::Write { .. }) {
            if let Some(tcp) = self.write_at_post(id, wr) {
                return self.posted_out.len() == 1 && self.stack.nothing_in_flight(tcp) == Ok(true);
            }
        }
        let Ok(q) = self.qp_mut_for_send(id) else {
            return false;
        };
        // What `validate_send` refuses by the connection's settings (`QpShared::ord`,
        // `QpShared::rfc7306_in_use`), should a request reach the core unchecked: it is
        // not sent.
        let bad_read = (matches!(wr.op, SendOp::Read { .. }) || wr.op.is_atomic()) && q.ord == 0;
        let bad_ext = wr.op.is_rfc7306() && !q.rfc7306;
        let status = (q.state != QpState::Rts || bad_read || bad_ext).then_some(WcStatus::FlushErr);
        let idle = q.sq.is_empty();
        q.push_sq(wr, status);
        if status.is_some() {
            // Done before it started: never sent nor executed, it completes in order,
            // behind the requests queued before it. At the sending position it is passed
            // at once; behind requests not started yet (a graceful close began after the
            // request was validated in RTS: they still go out), the sending position
            // passes it when it gets there (`Qp::local_op_next`).
            if q.sq_next_seq - q.sq_head_seq + 1 == q.sq.len() as u64 {
                q.sq_next_seq += 1;
            }
            q.retire_sq();
        } else if idle {
            self.send_first = true;
        }
        false
    }

    /// [`Self::post_send_reserved_ref`] from a caller that holds the core (the
    /// caller-driven post, `runtime`'s `post_send_now`), `clock` giving the time when it is
    /// needed: a lone message leaves from this call. A plain one-FPDU Write that is the
    /// first post since the last loop goes to [`Qp::write_lone`]: its frame is flushed
    /// before the TCP files it ([`Stack::send_lone_record`]); else, framed into the send
    /// buffer, it is sent by [`Self::transmit_posted`] if it is a lone message. Either
    /// way the next loop completes it, as [`Self::write_at_post`]'s requests.
    #[inline(always)]
    pub(crate) fn post_send_now(
        &mut self,
        id: QpId,
        wr: &SendWr,
        clock: &mut impl FnMut() -> Instant,
    ) {
        if matches!(wr.op, SendOp::Write { .. }) && self.posted_out.is_empty() {
            match self.write_lone(id, wr, clock) {
                LoneWrite::Sent(now) => {
                    // As `transmit_posted`: the next loop completes it, no pass of its own.
                    self.now = now;
                    self.framed_at_post = false;
                    return;
                }
                LoneWrite::Framed(tcp, now) => {
                    if self.stack.nothing_in_flight(tcp) == Ok(true) {
                        self.transmit_posted(now);
                    }
                    return;
                }
                LoneWrite::Declined => {}
            }
        }
        if self.post_send_reserved_ref(id, wr) {
            let now = clock();
            self.transmit_posted(now);
        }
    }

    /// [`Qp::write_lone`] of `wr` on QP `id` (`clock` read once it is framed); recorded as
    /// [`Self::write_at_post`] records the requests it frames.
    #[inline(always)]
    fn write_lone(
        &mut self,
        id: QpId,
        wr: &SendWr,
        clock: &mut impl FnMut() -> Instant,
    ) -> LoneWrite {
        if id.core != self.core {
            return LoneWrite::Declined;
        }
        let i = usize::from(id.index);
        let EngineCore {
            qps,
            stack,
            ctx,
            fpdu,
            ..
        } = self;
        let Some(Some(q)) = qps.get_mut(i) else {
            return LoneWrite::Declined;
        };
        if q.id != id {
            return LoneWrite::Declined;
        }
        let out = q.write_lone(stack, ctx, fpdu, wr, clock);
        if out != LoneWrite::Declined {
            self.record_posted_out(id, wr);
        }
        out
    }

    /// Sends what a lone post just framed ([`Self::post_send_reserved_ref`] returned true)
    /// from the posting call, at time `now`: the stack's transmit pass and one flush, the
    /// send-first part of the next loop ([`Self::poll`]) done ahead of it. That loop still
    /// gives the request's slot and completion back, first, so a completion is seen only
    /// once its frame was handed to the device, and the slot is held until then.
    pub(crate) fn transmit_posted(&mut self, now: Instant) {
        self.now = now;
        // Sent: the next loop completes it without a transmit pass of its own for it.
        self.framed_at_post = false;
        self.transmit();
    }

    /// [`Qp::write_at_post`] of `wr` on QP `id`: the TCP connection it was framed on, if it
    /// was taken. The QP is not marked for the transmit poller (it is settled: its visit
    /// would find nothing); the next loop gives its slot and completion back, then
    /// transmits first (`posted_out`, `framed_at_post`).
    #[inline(always)]
    fn write_at_post(&mut self, id: QpId, wr: &SendWr) -> Option<ConnId> {
        if id.core != self.core {
            return None;
        }
        let i = usize::from(id.index);
        let EngineCore {
            qps,
            stack,
            ctx,
            gather,
            fpdu,
            ..
        } = self;
        let Some(Some(q)) = qps.get_mut(i) else {
            return None;
        };
        if q.id != id {
            return None;
        }
        let tcp = q.write_at_post(stack, ctx, (gather, fpdu), wr)?;
        self.record_posted_out(id, wr);
        Some(tcp)
    }

    /// Records request `wr` of QP `id`, framed at post ([`Self::write_at_post`],
    /// [`Self::write_lone`]): the next loop gives its slot and completion back, then
    /// transmits first.
    #[inline(always)]
    fn record_posted_out(&mut self, id: QpId, wr: &SendWr) {
        self.posted_out.push(PostedOut {
            id,
            wr_id: wr.wr_id,
            byte_len: wr.sges.total_len() as u32,
            signaled: wr.signaled,
        });
        self.send_first = true;
        self.framed_at_post = true;
        if cfg!(any(test, feature = "self-check")) {
            // The visits it was spared must find nothing: the transmit one now, the
            // receive one in the next loop (as `qp_mut_for_send` has it checked).
            let i = usize::from(id.index);
            self.rx_check.push(i);
            self.mark_tx_unless_settled(i);
        }
    }

    /// Gives back the slots of the requests framed at post ([`Qp::write_at_post`]) and
    /// pushes the completions of the signalled ones, in posting order, then acts on a
    /// completion queue that overran, as the transmit poller does after its visits. Run by
    /// the first loop after the posts, before anything else can complete a request of
    /// their QPs (their later requests wait in the send queue behind them), so completions
    /// keep submission order (RDMAP-5.5-8) and none is seen before a loop that sends its
    /// frame has begun: as on the general path, where the request completes in the loop
    /// that frames it. Also run first by the calls that take a QP out of RTS between loops
    /// (`disconnect`, `abort`, `destroy_qp`), after which a request is flushed at once.
    pub(super) fn complete_posted_out(&mut self) {
        let EngineCore {
            posted_out, qps, ..
        } = self;
        let mut overran = false;
        // By runs of one QP (a run of small Writes, the common case): one look-up and one
        // atomic operation on its slot count a run.
        let mut k = 0;
        while let Some(first) = posted_out.get(k) {
            let id = first.id;
            let run = posted_out[k..].iter().take_while(|p| p.id == id).count();
            if let Some(q) = qp_in(qps, id) {
                // Slots first: by the time the application sees a completion its slot is
                // free (as `retire_sq`).
                q.shared.release_sq_n(run as u32);
                // Each stretch of signalled requests in one claim of the queue's ring.
                let mut rest = &posted_out[k..k + run];
                while !rest.is_empty() {
                    let skip = rest.iter().take_while(|p| !p.signaled).count();
                    rest = &rest[skip..];
                    let n = rest.iter().take_while(|p| p.signaled).count();
                    let (signaled, after) = rest.split_at(n);
                    if n > 0 {
                        q.send_cq.push_run(n, |j| Completion {
                            wr_id: signaled[j].wr_id,
                            qp: id,
                            opcode: WcOpcode::Write,
                            status: WcStatus::Success,
                            byte_len: signaled[j].byte_len,
                            solicited: false,
                            invalidated: None,
                            imm: None,
                            atomic_orig: None,
                        });
                    }
                    rest = after;
                }
                overran |= q.send_cq.overrun();
            }
            k += run;
        }
        if overran {
            self.posted_out_overran();
        }
        self.posted_out.clear();
    }

    /// [`Self::complete_posted_out`] overran a completion queue: each QP it pushed to whose
    /// queue overran is acted on ([`Self::cq_overran`], which acts once per QP).
    #[cold]
    #[inline(never)]
    fn posted_out_overran(&mut self) {
        let posted = std::mem::take(&mut self.posted_out);
        for p in &posted {
            if qp_in(&self.qps, p.id).is_some_and(|q| q.send_cq.overrun()) {
                self.cq_overran(usize::from(p.id.index));
            }
        }
        self.posted_out = posted;
    }

    /// Posts a receive work request (validated; nothing changes on error).
    pub fn post_recv(&mut self, id: QpId, wr: RecvWr) -> Result<(), EngineError> {
        let mrs = Arc::clone(&self.ctx.mrs);
        let q = self.qp_mut(id)?;
        validate_recv(&q.shared, &mrs, &wr)?;
        q.rq.push_back(wr);
        Ok(())
    }

    /// Takes a receive work request validated by an application thread ([`validate_recv`]).
    pub fn post_recv_reserved(&mut self, id: QpId, wr: RecvWr) {
        self.post_recv_reserved_ref(id, &wr);
    }

    /// [`Self::post_recv_reserved`] of a request read where it lies (the command ring's
    /// slot), not moved out of it first.
    pub(crate) fn post_recv_reserved_ref(&mut self, id: QpId, wr: &RecvWr) {
        let Ok(q) = self.qp_mut(id) else { return };
        q.rq.push_back(*wr);
        // Validated before the QP failed: flushed now, not when TCP finishes closing (a QP
        // in Terminate keeps that state until then; its receive queue was flushed when it
        // entered it).
        if matches!(q.state, QpState::Terminate | QpState::Error) {
            q.flush_rq();
        }
    }
}

/// The stream identity of a queue pair's connection after its `n`-th reset on `core`:
/// bits 63 and 62 set, the core in bits 48-61, `n` below. No [`QpId::stream`] has bit 62
/// (cores are numbered below 2^14), and `n` never repeats on a core (2^48 resets).
fn reset_stream(core: u16, n: u64) -> StreamId {
    1 << 63 | 1 << 62 | u64::from(core & 0x3FFF) << 48 | (n & ((1 << 48) - 1))
}
