//! Connection management: MPA startup in both roles (the initiator's `connect`, the
//! responder's `listen` / `accept` / `reject`, MPA Requests read by the requests poller),
//! TCP events (accepted connections, FIN, RST), the startup timers, and teardown
//! (`disconnect`, `abort`).

use super::*;

/// The receive window a listener's connection offers until its request is accepted: an MPA
/// Request is at most 532 octets (the 20-octet header and 512 of Private Data,
/// MPA-7.1.1-22), so a Request arrives whole in one segment, and what a peer can park
/// behind it while the application decides is this much, not the TCP's whole receive
/// buffer (`EngineConfig::tcp`'s 4 MiB by default: up to 4 GiB over a full table of 1,024
/// requests before). Nothing honest sends more before the Reply: an initiator sends no FPDU until
/// it has the Reply (mpa-08 §7.1.2 rule 2's note).
pub(super) const REQUEST_WINDOW: usize = 4096;

/// The IRD/ORD we announce: at most our configured limit, except 0x3FFF ("not negotiated",
/// RFC 6581 §9.1), which goes on the wire as is. A value above 0x3FFF, which no 14-bit
/// field holds, is passed on unchanged for MPA to refuse (`UsageError::IrdOrdOutOfRange`):
/// taken for 0x3FFF it would silently mean "not negotiated".
pub(super) fn clamp_offer(v: u16, max: u16) -> u16 {
    if v >= IRD_ORD_NO_NEGOTIATION {
        v
    } else {
        v.min(max)
    }
}

pub(super) fn clamp_ird_ord(v: u16, max: u16) -> u32 {
    // 0x3FFF: not negotiated, left to the ULP (RFC 6581 §9.1); we use our limit.
    if v >= 0x3FFF {
        u32::from(max)
    } else {
        u32::from(v.min(max))
    }
}

impl Qp {
    pub(super) fn setup_fpdu_mode(&mut self, n: &Negotiated, cfg: &EngineConfig) {
        let Some(conn) = self.conn.as_mut() else {
            return;
        };
        conn.framer = Some(
            Framer::new(FramerConfig {
                markers: n.markers_tx,
                crc: n.crc,
                mulpdu: fpdu::mulpdu(cfg.emss(), n.markers_tx),
                // Markers count from the first octet of FPDU mode (mpa-08 §7.1.2 rule 7).
                stream_offset: 0,
            })
            .with_crc32c(crate::mem::crc::crc32c_append),
        );
        conn.deframer = Some(Box::new(
            Deframer::new(DeframerConfig {
                markers: n.markers_rx,
                crc: n.crc,
                max_ulpdu_len: MAX_ULPDU_LEN,
                stream_offset: 0,
            })
            .with_crc32c(crate::mem::crc::crc32c_append),
        ));
        self.ird = InboundReadQueue::new(clamp_ird_ord(n.local_ird, cfg.max_ird));
        self.ord = clamp_ird_ord(n.local_ord, cfg.max_ord);
        conn.rtr_pending = n.rtr;
        // RFC 7306 is agreed out of band (no MPA bit): fixed for the connection now.
        self.rfc7306 = self.shared.rfc7306();
        // Read once, as RFC 7306: send queue requests come only in RTS, after this.
        self.sges_at_post = self.shared.sges_checked_at_post();
        // For the post-time checks of application threads (`validate_send`).
        self.shared.set_connection(self.rfc7306, self.ord);
    }

    pub(super) fn established_event(&self, n: &Negotiated) -> CmEvent {
        CmEvent::Established(Established {
            qp: self.id,
            rev: (n.rev_sent, n.rev_received),
            crc: n.crc,
            markers: (n.markers_tx, n.markers_rx),
            ird: self.ird.ird() as u16,
            ord: self.ord as u16,
            peer_ird_ord: n.peer_ird.zip(n.peer_ord),
            rtr: n.rtr,
            rtr_accepted: n.rtr_accepted,
            private_data: n.peer_private_data.clone(),
        })
    }

    /// Drains the initiator's events (after input or a timeout).
    pub(super) fn drive_initiator(&mut self, ctx: &mut Ctx) {
        loop {
            let ev = match self.conn.as_mut().map(|c| &mut c.mpa) {
                Some(Mpa::Initiator(i)) => i.poll_event(),
                _ => None,
            };
            let Some(ev) = ev else { break };
            match ev {
                nego::Event::Established(n) => {
                    self.setup_fpdu_mode(&n, &ctx.cfg);
                    self.set_state(QpState::Rts);
                    ctx.events.push_back(self.established_event(&n));
                }
                nego::Event::Rejected(r) => {
                    self.flush();
                    ctx.events.push_back(CmEvent::Rejected {
                        qp: self.id,
                        peer_ird_ord: r.peer.ird().zip(r.peer.ord()),
                        private_data: r.peer.private_data,
                    });
                    if let Some(c) = self.conn.as_mut() {
                        c.mpa = Mpa::Done;
                        c.fin_sent = false;
                    }
                    self.disconnect_requested = true;
                }
                nego::Event::Failed(f) => {
                    if let Some(n) = f.terminate.as_ref() {
                        self.setup_fpdu_mode(n, &ctx.cfg);
                        if let Some(c) = self.conn.as_mut() {
                            let mut buf = [0u8; TERM_FPDU_MAX];
                            let err = ProtocolError::Mpa(f.error.mpa_error());
                            if let Ok(len) = emit_terminate(err, None, &mut buf) {
                                c.term = Some((buf, len));
                            }
                            c.rtr_pending = None;
                            c.mpa = Mpa::Done;
                        }
                    }
                    // No Reply within `mpa_timeout_ms` (MPA-7.1.2-27): reset, as the
                    // responder resets a silent initiator (`poll_requests`); a FIN would
                    // leave the connection to a peer that may never answer it.
                    if f.error == nego::NegotiationError::Timeout {
                        if let Some(c) = self.conn.as_mut() {
                            c.reset_on_close = true;
                        }
                    }
                    self.flush();
                    self.disconnect_requested = true;
                    if self.conn.as_ref().is_some_and(|c| c.term.is_some()) {
                        self.set_state(QpState::Terminate);
                    }
                    ctx.events.push_back(CmEvent::Error {
                        qp: self.id,
                        error: ConnError::Negotiation {
                            error: f.error,
                            // MPA2-9.1-10: the responder's IRD and ORD reach the user
                            // even though its Reply failed our checks.
                            peer_ird_ord: f.peer.as_ref().and_then(|p| p.ird().zip(p.ord())),
                        },
                    });
                }
                nego::Event::Request(_) => {}
            }
        }
    }
}

impl Conn {
    /// A connection in MPA startup (`mpa`), before FPDU mode.
    fn new(tcp: ConnId, mpa: Mpa) -> Conn {
        Conn {
            tcp,
            mpa,
            framer: None,
            deframer: None,
            ddp_tx: DdpSender::new(),
            ddp_rx: DdpReceiver::new(DDP_VERSION),
            rtr_pending: None,
            fin_sent: false,
            peer_closed: false,
            term: None,
            mulpdu_synced: false,
            fpdu_octets_rx: false,
            reset_on_close: false,
            close_watch: None,
        }
    }
}

impl<D: PollDevice> EngineCore<D> {
    pub(super) fn mpa_config(
        &self,
        p: &MpaParams,
        private_data: Vec<u8>,
        initiator: bool,
    ) -> nego::Config {
        nego::Config {
            rev: p.rev,
            crc: p.crc,
            markers: p.markers,
            markers_supported: p.markers_supported,
            ird: clamp_offer(p.ird, self.ctx.cfg.max_ird),
            ord: clamp_offer(p.ord, self.ctx.cfg.max_ord),
            peer_to_peer: initiator && p.peer_to_peer && p.rev >= 2,
            // An initiator offers the RTR types chosen, but no Read RTR when it can issue
            // no Read at all: MPA judges the Read RTR by the ORD it is given, and 0x3FFF
            // passes that check while the engine makes it `max_ord` (`clamp_ird_ord`), here
            // 0, and the Read RTR would be a Read outstanding beyond it (RDMAP-6.1-4,
            // MPA2-9.2-2: only the types it can send). A responder accepts the ones chosen,
            // but no Read RTR when it can serve no Read at all: MPA judges the Read RTR by
            // the IRD it is given, and 0x3FFF passes that check while the engine makes it
            // `max_ird` (`clamp_ird_ord`), here 0 (MPA2-9.2-5, MPA2-9.1-3).
            rtr: if initiator && self.ctx.cfg.max_ord == 0 {
                p.rtr_offer.iter().filter(|t| *t != RtrType::Read).collect()
            } else if initiator {
                p.rtr_offer
            } else if self.ctx.cfg.max_ird == 0 {
                p.rtr_accept
                    .iter()
                    .filter(|t| *t != RtrType::Read)
                    .collect()
            } else {
                p.rtr_accept
            },
            private_data,
            timeout: StdDuration::from_millis(self.ctx.cfg.mpa_timeout_ms),
        }
    }

    /// Connects an idle queue pair to `remote` as MPA initiator with `private_data`, from
    /// an ephemeral local port the TCP chooses (the next one of the destination's RFC
    /// 6056 3.3.3 sequence whose 4-tuple is free and that nothing listens on). [`CmEvent::Established`],
    /// [`CmEvent::Rejected`] or [`CmEvent::Error`] follows.
    pub fn connect(
        &mut self,
        id: QpId,
        remote: (Ipv4Address, u16),
        params: &MpaParams,
        private_data: &[u8],
    ) -> Result<(), EngineError> {
        self.connect_from(id, remote, None, params, private_data)
    }

    /// [`Self::connect`] from `local_port` if given (the port an rdma_cm id was bound to),
    /// else from an ephemeral one. A local port whose 4-tuple with `remote` is in use on
    /// this core (a connection, one in TIME-WAIT included), or port 0, is refused with
    /// [`EngineError::Stack`] holding [`StackError::PortInUse`](crate::tcp::StackError::PortInUse)
    /// naming the port, and nothing changes. A remote port 0 is refused with
    /// [`StackError::InvalidArgument`](crate::tcp::StackError::InvalidArgument) naming it.
    pub fn connect_from(
        &mut self,
        id: QpId,
        remote: (Ipv4Address, u16),
        local_port: Option<u16>,
        params: &MpaParams,
        private_data: &[u8],
    ) -> Result<(), EngineError> {
        // RFC 6335 6: port 0 is reserved; no connection is made to it. Named here: the TCP
        // refused it as an unaddressable peer address, which blamed the address.
        if remote.1 == 0 {
            return Err(EngineError::Stack(
                warpcore_tcp::StackError::InvalidArgument(
                    "remote port",
                    "must not be 0 (no connection is made to port 0)",
                ),
            ));
        }
        let config = self.mpa_config(params, private_data.to_vec(), true);
        let now_std = self.now_std();
        let st = self.qp_mut(id)?.state;
        if st != QpState::Idle {
            return Err(EngineError::InvalidState(st));
        }
        let init = Initiator::new(config, now_std)?;
        let deadline = init.poll_timeout();
        let tcp = self.stack.connect(remote, local_port, &self.ctx.cfg.tcp)?;
        self.bind_conn(tcp, id);
        let q = self.qp_mut(id)?;
        q.conn = Some(Conn::new(tcp, Mpa::Initiator(Box::new(init))));
        q.set_state(QpState::Connecting);
        // Its startup timeout (MPA-7.1.2-27), polled when due (`poll_timers`), counts from
        // the TCP connection's establishment (`start_mpa_timer`): MPA starts then (mpa-08
        // §7.1.2), and the handshake ends in its own timeout (`TcpTimedOut`,
        // `NeighborUnresolved`). Only on a TCP without a user timeout, which could take far
        // longer to give up (or, waiting for ARP, never), does the startup timer bound the
        // handshake too, from here.
        if self.ctx.cfg.tcp.timeout.is_none() {
            if let Some(at) = deadline {
                self.arm_mpa_timer(at, (id.index, id.generation));
            }
        }
        Ok(())
    }

    /// The TCP connection of QP slot `i` is established: an MPA initiator awaiting its
    /// Reply counts its startup timeout (MPA-7.1.2-27) from now ([`Initiator::restart_timer`];
    /// an entry armed at `connect` is left stale).
    fn start_mpa_timer(&mut self, i: usize) {
        let now_std = self.now_std();
        let Some(Some(q)) = self.qps.get_mut(i) else {
            return;
        };
        let key = (q.id.index, q.id.generation);
        let Some(Mpa::Initiator(init)) = q.conn.as_mut().map(|c| &mut c.mpa) else {
            return;
        };
        init.restart_timer(now_std);
        if let Some(at) = init.poll_timeout() {
            self.arm_mpa_timer(at, key);
        }
    }

    /// Puts an initiator's startup deadline `at` in `mpa_timers` for QP `key` (slot,
    /// generation), compacting the heap when stale entries outnumber the live QPs.
    fn arm_mpa_timer(&mut self, at: StdInstant, key: (u16, u32)) {
        self.mpa_timers.push(at, key);
        if self.mpa_timers.needs_compaction(self.live.len()) {
            let qps = &self.qps;
            self.mpa_timers
                .retain(|at, key| initiator_entry_live(qps, at, key));
        }
        self.note_mpa_due();
    }

    /// Resolves the next hop towards `ip` (the address itself on our subnet, else its
    /// router) with ARP, without a connection, as rdma_cm's address resolution does:
    /// [`CmEvent::NeighborResolved`] follows once it answers (at once if it is known),
    /// [`CmEvent::NeighborFailed`] if it has not within `timeout`. Requests repeat every
    /// second, three a round with a second's pause between rounds (the neighbour table's
    /// pace, as for a connection; RFC 1122 2.3.2.1). The resolution fills
    /// this core's neighbour table only. Refused as the TCP refuses it
    /// ([`EngineError::Stack`]: an address without a route, one no connection could be
    /// opened to, too many pending, the smoltcp reference).
    pub fn resolve_neighbor(
        &mut self,
        ip: Ipv4Address,
        timeout: StdDuration,
    ) -> Result<NeighborId, EngineError> {
        let micros = u64::try_from(timeout.as_micros()).unwrap_or(u64::MAX);
        let timeout = Duration::from_micros(micros);
        let id = self.stack.resolve_neighbor(ip, timeout, self.now)?;
        Ok(NeighborId {
            core: self.core,
            id,
        })
    }

    /// Listens on `port`; connection requests arrive as [`CmEvent::ConnectRequest`].
    /// Parameters no responder could use (a revision other than 1 or 2, IRD/ORD above
    /// 0x3FFF, or at Rev 2 no RTR type it could mark) are refused with
    /// [`EngineError::Mpa`], nothing bound, as `connect` refuses an initiator's.
    pub fn listen(&mut self, port: u16, params: MpaParams) -> Result<ListenerId, EngineError> {
        // Each connection builds its responder from these parameters; were they refused
        // there, every connection would be reset after it took a request slot.
        Responder::new(self.mpa_config(&params, Vec::new(), false), self.now_std())?;
        // One listener a port, whatever the TCP underneath: the reference TCP lets a second
        // socket listen on a port, and the entry below would then forget the first TCP
        // listener, which went on taking connections nobody read and could not be ended.
        if self.listeners.iter().any(|l| l.port == port && l.open) {
            return Err(EngineError::Stack(warpcore_tcp::StackError::PortInUse(
                port,
            )));
        }
        // Warpcore's TCP bounds handshakes in progress (SYN-RECEIVED) by the backlog and
        // evicts the oldest beyond it: as many as the table holds, so a SYN flood must
        // cycle through the whole table, which takes far longer than one handshake. The
        // reference preallocates one socket per backlog entry: a few.
        let backlog = match self.ctx.cfg.tcp_implementation {
            TcpImplementation::Warpcore => self.ctx.cfg.max_connections,
            TcpImplementation::SmoltcpReference => self.ctx.cfg.max_pending_requests.min(4),
        };
        // Until a connection is accepted only its MPA Request is read: its window is
        // clamped to `REQUEST_WINDOW` (the TCP's window clamp, lifted in `accept`), so a
        // peer that sends more behind its Request parks that much at most, not the whole
        // receive buffer, for as long as the request waits (up to `mpa_timeout_ms`, in
        // each of `max_pending_requests` slots).
        let tuning = TcpTuning {
            rx_window_clamp: Some(REQUEST_WINDOW),
            ..self.ctx.cfg.tcp
        };
        let tcp = self.stack.listen(port, backlog, &tuning)?;
        let entry = Listener {
            tcp,
            params,
            port,
            open: true,
        };
        let index = match self.listeners.iter().position(|l| l.port == port) {
            Some(i) => {
                self.listeners[i] = entry;
                i
            }
            None => {
                self.listeners.push(entry);
                self.listeners.len() - 1
            }
        };
        Ok(ListenerId {
            core: self.core,
            index: index as u32,
        })
    }

    /// Stops listening on `port`: new connections to it are refused (a SYN draws a RST),
    /// TCP connections established but not yet taken from the TCP's accept queue are
    /// reset. Connection requests already reported ([`CmEvent::ConnectRequest`]) stay
    /// the user's, to accept or reject as before (as rdma_cm's child ids outlive their
    /// listener). Those still in their MPA startup, never reported, end here: a complete
    /// MPA Request the TCP already holds is answered with a Reply with R = 1 (as iw_cm
    /// rejects a request that reaches a listener no longer listening), and a connection
    /// whose Request has not arrived whole is reset, as siw releases one whose listener
    /// went (docs/engine.md, "Listening"). The initiator sees [`CmEvent::Rejected`] or
    /// [`ConnError::TcpReset`]. A port not listened on is [`EngineError::NotListening`].
    pub fn unlisten(&mut self, port: u16) -> Result<(), EngineError> {
        let li = self
            .listeners
            .iter()
            .position(|l| l.port == port && l.open)
            .ok_or(EngineError::NotListening(port))?;
        self.listeners[li].open = false;
        self.stack.unlisten(self.listeners[li].tcp)?;
        self.end_unreported_requests(li as u32);
        Ok(())
    }

    /// Ends the requests of listener `listener` (just closed) that are still in their MPA
    /// startup: nobody will be told of them, so none may reach the user later as a
    /// [`CmEvent::ConnectRequest`] on a port nothing listens on. What the TCP holds is read
    /// first: a whole Request gets a Reply with R = 1 (then FIN, as `reject`), which
    /// RFC 5044 §7.1.2 and RFC 6581 give a responder that will not accept; anything less
    /// (nothing yet, a partial or malformed Request) is reset, the answer of a responder
    /// that has no Request to reply to.
    fn end_unreported_requests(&mut self, listener: u32) {
        for i in 0..self.requests.len() {
            let Some(r) = self.requests[i].as_mut() else {
                continue;
            };
            if r.listener != listener || r.phase != ReqPhase::Reading {
                continue;
            }
            let resp = &mut r.responder;
            let _ = self.stack.recv_with(r.tcp, |d| resp.handle_input(d));
            let mut arrived = false;
            let mut refused_by_mpa = false;
            while let Some(ev) = r.responder.poll_event() {
                match ev {
                    nego::Event::Request(_) => arrived = true,
                    // MPA refused the Request on its own: its Reply with R = 1 is queued.
                    nego::Event::Rejected(_) => refused_by_mpa = true,
                    _ => {}
                }
            }
            if arrived && r.responder.reject(&[]).is_ok() {
                while r.responder.poll_event().is_some() {}
                r.phase = ReqPhase::Rejecting;
                self.req_ready.mark(i);
            } else if refused_by_mpa {
                r.phase = ReqPhase::Rejecting;
                self.req_ready.mark(i);
            } else if let Some(r) = self.take_request(i) {
                // Release resets a connection still open (RST).
                let _ = self.stack.release(r.tcp);
            }
        }
    }

    pub(super) fn req_mut(&mut self, id: RequestId) -> Result<&mut PendingReq, EngineError> {
        let i = id.index as usize;
        if id.core != self.core
            || id.engine != self.instance
            || self.req_generations.get(i) != Some(&id.generation)
        {
            return Err(EngineError::UnknownRequest);
        }
        match self.requests.get_mut(i) {
            Some(Some(r)) if r.phase == ReqPhase::Waiting => Ok(r),
            _ => Err(EngineError::UnknownRequest),
        }
    }

    /// Accepts a connection request on an idle queue pair with our private data (optionally
    /// overriding IRD/ORD). [`CmEvent::Established`] follows at once.
    pub fn accept(
        &mut self,
        req: RequestId,
        id: QpId,
        private_data: &[u8],
        ird_ord: Option<(u16, u16)>,
    ) -> Result<(), EngineError> {
        let (max_ird, max_ord) = (self.ctx.cfg.max_ird, self.ctx.cfg.max_ord);
        let st = self.qp_mut(id)?.state;
        if st != QpState::Idle {
            return Err(EngineError::InvalidState(st));
        }
        let r = self.req_mut(req)?;
        // Answered on a copy: an override or private data MPA refuses leaves the request
        // as it was, still waiting for a valid answer.
        let mut responder = r.responder.clone();
        if let Some((ird, ord)) = ird_ord {
            responder.set_ird_ord(clamp_offer(ird, max_ird), clamp_offer(ord, max_ord))?;
        }
        responder.accept(private_data)?;
        let Some(r) = self.take_request(req.index as usize) else {
            return Err(EngineError::UnknownRequest);
        };
        let cfg = self.ctx.cfg.clone();
        self.bind_conn(r.tcp, id);
        // The QP reads its stream from now on: the whole receive buffer is offered.
        let _ = self.stack.clear_window_clamp(r.tcp);
        // The Reply goes to TCP now, into the fresh connection's empty send buffer
        // (MPA-7.1.2-8), so no octet of ours can precede it, whatever the next loop's
        // receive poller makes of what the initiator sent behind its Request. What TCP
        // could not take (a peer gone already) the transmit poller offers again.
        let _ = self.stack.send_with(r.tcp, |b| responder.poll_transmit(b));
        let q = self.qp_mut(id)?;
        let mut negotiated = None;
        while let Some(ev) = responder.poll_event() {
            if let nego::Event::Established(n) = ev {
                negotiated = Some(n);
            }
        }
        let mut conn = Conn::new(r.tcp, Mpa::Responder(responder));
        conn.peer_closed = r.peer_closed;
        q.conn = Some(conn);
        if let Some(n) = negotiated {
            q.setup_fpdu_mode(&n, &cfg);
            q.set_state(QpState::Rts);
            let ev = q.established_event(&n);
            self.ctx.events.push_back(ev);
        }
        Ok(())
    }

    /// Rejects a connection request with our private data (MPA Reply with R = 1, then
    /// FIN).
    pub fn reject(&mut self, req: RequestId, private_data: &[u8]) -> Result<(), EngineError> {
        let r = self.req_mut(req)?;
        r.responder.reject(private_data)?;
        while r.responder.poll_event().is_some() {}
        r.phase = ReqPhase::Rejecting;
        self.req_ready.mark(req.index as usize);
        Ok(())
    }

    /// Graceful close: no new sends; the send queue and inbound Reads drain, then FIN.
    /// [`CmEvent::Disconnected`] follows once both sides closed. A close that makes no
    /// progress for [`EngineConfig::close_timeout_ms`] before our FIN is acknowledged (a
    /// peer holding its window at zero, a Read never answered) is given up as an abort:
    /// RST, everything outstanding flushed, and [`CmEvent::Disconnected`] with
    /// [`DisconnectCause::CloseTimedOut`].
    pub fn disconnect(&mut self, id: QpId) -> Result<(), EngineError> {
        // Writes framed at post complete first: a request posted after this call is
        // flushed at once, and must not complete ahead of them.
        if !self.posted_out.is_empty() {
            self.complete_posted_out();
        }
        let q = self.qp_mut(id)?;
        match q.state {
            QpState::Rts => {
                q.set_state(QpState::Closing);
                q.disconnect_requested = true;
                Ok(())
            }
            QpState::Closing => Ok(()),
            s => Err(EngineError::InvalidState(s)),
        }
    }

    /// Abortive close: RST at once, everything outstanding is flushed. A QP that never
    /// connected (idle) has no stream to reset: it moves to the error state and its posted
    /// receives are flushed (the verbs' move to ERR), with no event. Otherwise
    /// [`CmEvent::Disconnected`] with [`DisconnectCause::Reset`] follows, unless the
    /// connection's end was reported already ([`CmEvent::Rejected`], or a
    /// [`CmEvent::Error`] that left the QP in Error or Terminate).
    pub fn abort(&mut self, id: QpId) -> Result<(), EngineError> {
        if !self.posted_out.is_empty() {
            self.complete_posted_out();
        }
        // What TCP acknowledged completes as such; the rest is flushed (RDMAP-5.5-8).
        self.note_acked(id);
        let q = self.qp_mut(id)?;
        if q.conn.is_none() {
            if q.state == QpState::Idle {
                q.flush();
                return Ok(());
            }
            return Err(EngineError::InvalidState(q.state));
        }
        self.reset_conn(id, DisconnectCause::Reset);
        Ok(())
    }

    /// Ends QP `id`'s connection abortively (RFC 9293 3.10.5: RST, everything TCP holds
    /// dropped) and flushes the QP's work requests, reporting [`CmEvent::Disconnected`]
    /// with `cause`: `abort`'s, and a graceful close given up
    /// ([`Self::poll_close_timers`]). What TCP had acknowledged was noted first
    /// (`note_acked`). The connection goes to the zombies until TCP reports it closed.
    fn reset_conn(&mut self, id: QpId, cause: DisconnectCause) {
        let Some(Some(q)) = self.qps.get_mut(usize::from(id.index)) else {
            return;
        };
        if q.id != id {
            return;
        }
        let Some(c) = q.conn.take() else {
            return;
        };
        // A connection whose end was reported already (`Rejected`, or an `Error` that left
        // the QP in Error or Terminate, TCP still closing) gets no second ending, as the
        // TCP close handler gives none for such a QP.
        let told = matches!(q.state, QpState::Error | QpState::Terminate);
        q.flush();
        let _ = self.stack.abort(c.tcp);
        self.zombies.insert(c.tcp);
        if !told {
            self.ctx
                .events
                .push_back(CmEvent::Disconnected { qp: id, cause });
        }
    }

    /// The transmit poller's look at QP slot `i`, in `Closing`: the first one starts the
    /// bound on its graceful close ([`EngineConfig::close_timeout_ms`], an entry in
    /// `close_timers`), each one after notes whether the close moved on since
    /// (`Qp::close_mark`). The sweep visits every QP at least every 50 ms, so progress is
    /// seen within that.
    #[cold]
    #[inline(never)]
    pub(super) fn watch_close(&mut self, i: usize) {
        let now = self.now;
        let bound = Duration::from_millis(self.ctx.cfg.close_timeout_ms);
        let EngineCore {
            qps,
            stack,
            close_timers,
            live,
            ..
        } = self;
        let Some(Some(q)) = qps.get_mut(i) else {
            return;
        };
        let key = (q.id.index, q.id.generation);
        let Some(c) = q.conn.as_ref() else {
            return;
        };
        let (tcp, watch) = (c.tcp, c.close_watch);
        if watch.is_some_and(|w| w.due.is_none()) {
            // Our side is done: no bound applies any more.
            return;
        }
        let mark = q.close_mark(stack, tcp);
        let Some(c) = q.conn.as_mut() else {
            return;
        };
        match c.close_watch.as_mut() {
            Some(w) => {
                if w.mark != mark {
                    w.mark = mark;
                    w.since = now;
                }
            }
            None => {
                let due = now + bound;
                c.close_watch = Some(CloseWatch {
                    since: now,
                    due: Some(due),
                    mark,
                });
                close_timers.push(due, key);
                if close_timers.needs_compaction(live.len()) {
                    let qps = &*qps;
                    close_timers.retain(|at, key| close_entry_live(qps, at, key));
                }
                self.note_close_due();
            }
        }
    }

    /// The bounds of graceful closes that are due ([`EngineConfig::close_timeout_ms`]):
    /// each live entry taken looks at its close once more. A close that moved on since it
    /// was last looked at gets a new deadline, a bound from now; one whose side is done
    /// (everything sent and our FIN acknowledged: FIN-WAIT-2 and later, where
    /// `tcp.fin_wait_2_timeout` bounds the peer's close) or that left `Closing` (a
    /// Terminate, the peer's RST) needs none. One that made no progress for the whole
    /// bound is given up as `abort` ends a connection (`reset_conn`): RST, everything
    /// outstanding flushed, [`CmEvent::Disconnected`] with
    /// [`DisconnectCause::CloseTimedOut`]. RDMAP-06 §6 has the close wait for the send
    /// queue to drain, and RFC 9293 3.8.6.1 lets a peer hold its window at zero for as
    /// long as it answers the probes: no TCP timer ends such a close, which held the QP
    /// and its registered memory for good.
    pub(super) fn poll_close_timers(&mut self) -> bool {
        let now = self.now;
        let bound = Duration::from_millis(self.ctx.cfg.close_timeout_ms);
        let mut work = false;
        while let Some((at, key)) = self.close_timers.pop_due(now) {
            let EngineCore {
                qps,
                stack,
                close_timers,
                ..
            } = self;
            if !close_entry_live(qps, at, key) {
                continue;
            }
            let Some(Some(q)) = qps.get_mut(usize::from(key.0)) else {
                continue;
            };
            let Some(tcp) = q.conn.as_ref().map(|c| c.tcp) else {
                continue;
            };
            let mark = q.close_mark(stack, tcp);
            let done = q.state != QpState::Closing || q.close_sent(stack, tcp);
            let retransmitting = tcp_bounds_the_wait(stack, tcp);
            let id = q.id;
            let Some(w) = q.conn.as_mut().and_then(|c| c.close_watch.as_mut()) else {
                continue;
            };
            if w.mark != mark || retransmitting {
                w.mark = mark;
                w.since = now;
            }
            if done {
                w.due = None;
                continue;
            }
            let due = w.since + bound;
            if due > now {
                w.due = Some(due);
                close_timers.push(due, key);
                continue;
            }
            // No progress for the whole bound: given up.
            w.due = None;
            work = true;
            self.note_acked(id);
            self.reset_conn(id, DisconnectCause::CloseTimedOut);
        }
        self.note_close_due();
        // The closes TCP finishes without a QP (the zombies, our FIN sent): reset once
        // what TCP still has to send made no progress for the bound, unless our FIN was
        // acknowledged (then `tcp.fin_wait_2_timeout` bounds the peer's close).
        while let Some((tcp, w)) = self.zombies.pop_due(now) {
            if fin_acked(&mut self.stack, tcp) {
                self.zombies.unwatch(tcp);
                continue;
            }
            let mark = self.stack.send_queue(tcp).unwrap_or(0);
            let moved = mark != w.mark || tcp_bounds_the_wait(&self.stack, tcp);
            let since = if moved { now } else { w.since };
            if since + bound > now {
                self.zombies.watch_from(tcp, since, bound, mark);
                continue;
            }
            // RST (RFC 9293 3.10.5): TCP reports the connection closed, and the zombie is
            // released then.
            self.zombies.unwatch(tcp);
            let _ = self.stack.abort(tcp);
            work = true;
        }
        work
    }

    /// Puts zombie `tcp`, left to finish its graceful close, under the bound of
    /// [`EngineConfig::close_timeout_ms`] from now ([`Zombies::watch`]).
    pub(super) fn watch_zombie(&mut self, tcp: ConnId) {
        let bound = Duration::from_millis(self.ctx.cfg.close_timeout_ms);
        let mark = self.stack.send_queue(tcp).unwrap_or(0);
        self.zombies.watch_from(tcp, self.now, bound, mark);
    }

    /// The earliest live bound of a graceful close, a QP's or a zombie's (stale entries
    /// ahead of it dropped).
    pub(super) fn next_close_timer(&mut self) -> Option<Instant> {
        let qps = &self.qps;
        self.close_timers
            .prune_head(|at, key| close_entry_live(qps, at, key));
        self.note_close_due();
        let qp = self.close_timers.peek().map(|(at, _)| at);
        [qp, self.zombies.next_due()].into_iter().flatten().min()
    }

    /// Notes when `close_timers`' earliest entry is due (`close_due`), as `note_mpa_due`.
    fn note_close_due(&mut self) {
        self.close_due = self.close_timers.peek().map_or(NEVER, |(at, _)| at);
    }

    /// Records that TCP connection `tcp` belongs to QP `id` (for [`Self::find_qp`]).
    pub(super) fn bind_conn(&mut self, tcp: ConnId, id: QpId) {
        let slot = tcp.slot();
        if self.conn_qp.len() <= slot {
            self.conn_qp.resize(slot + 1, NO_QP);
        }
        self.conn_qp[slot] = u32::from(id.index);
        // Octets may already wait in the connection (they came before it had a QP).
        self.mark(usize::from(id.index));
    }

    /// The QP slot whose connection is `tcp`, if any: one lookup, no scan.
    pub(super) fn find_qp(&self, tcp: ConnId) -> Option<usize> {
        let i = *self.conn_qp.get(tcp.slot())? as usize;
        self.qps
            .get(i)?
            .as_ref()
            .and_then(|q| q.conn.as_ref())
            .is_some_and(|c| c.tcp == tcp)
            .then_some(i)
    }

    #[inline(always)]
    pub(super) fn poll_tcp_events(&mut self) -> bool {
        // The idle loop's case, without the call.
        if !self.stack.has_events() {
            return false;
        }
        self.handle_tcp_events()
    }

    #[inline(never)]
    fn handle_tcp_events(&mut self) -> bool {
        let mut work = false;
        while let Some(ev) = self.stack.next_event() {
            work = true;

            match ev {
                TcpEvent::Acceptable(l) => self.on_acceptable(l),
                TcpEvent::PeerClosed(c) => {
                    if self.find_qp(c).is_none() {
                        // A request still pending: no further TCP event comes for its FIN,
                        // so the QP that accepts it must know (departure 26). Its poller
                        // visits it (a request still reading closes now).
                        if let Some(i) = self.find_req(c) {
                            if let Some(r) = self.requests[i].as_mut() {
                                r.peer_closed = true;
                            }
                            self.req_ready.mark(i);
                        }
                    }
                    if let Some(i) = self.find_qp(c) {
                        // Read what precedes the FIN, then drain and close.
                        self.mark(i);
                        let Some(q) = self.qps[i].as_mut() else {
                            continue;
                        };
                        // A startup frame may still sit in the receive buffer in front of the
                        // FIN: the receive poller reads it first and only then tells the
                        // initiator about the close.
                        let mut fenced = false;
                        if let Some(conn) = q.conn.as_mut() {
                            conn.peer_closed = true;
                            fenced = matches!(conn.mpa, Mpa::Responder(_));
                        }
                        // A responder still fenced: the receive poller decides once every
                        // octet before the FIN is read (it may be the RTR or a Terminate).
                        if q.state == QpState::Rts && !fenced {
                            // The peer closed: drain what we owe, then FIN (RDMAP-06 §6).
                            q.set_state(QpState::Closing);
                        }
                    }
                }
                TcpEvent::NeighborResolved(id) => {
                    let id = NeighborId {
                        core: self.core,
                        id,
                    };
                    self.ctx.events.push_back(CmEvent::NeighborResolved(id));
                }
                TcpEvent::NeighborFailed(id) => {
                    let id = NeighborId {
                        core: self.core,
                        id,
                    };
                    self.ctx.events.push_back(CmEvent::NeighborFailed(id));
                }
                TcpEvent::Closed(c)
                | TcpEvent::Reset(c)
                | TcpEvent::TimedOut(c)
                | TcpEvent::NeighborUnreachable(c) => {
                    // Why, for the user: a peer's RST is not a peer gone silent.
                    let cause = match ev {
                        TcpEvent::Closed(_) => DisconnectCause::Closed,
                        // An established connection whose next hop stopped answering ARP
                        // went silent as far as its user can tell.
                        TcpEvent::TimedOut(_) | TcpEvent::NeighborUnreachable(_) => {
                            DisconnectCause::TimedOut
                        }
                        _ => DisconnectCause::Reset,
                    };
                    if let Some(i) = self.find_qp(c) {
                        let Some(id) = self.qps[i].as_ref().map(|q| q.id) else {
                            continue;
                        };
                        // A graceful close: what arrived before the peer's FIN (acknowledged
                        // to it, its last messages, RDMAP-06 §6, MPA-7.2-1) and the receive
                        // poller has not read yet (it reads `rx_budget_bytes` a loop) is
                        // delivered before the QP lets the connection go; released unread,
                        // it was lost and its receives flushed. A reset drops it, as TCP
                        // does (RFC 9293 3.10.7.4).
                        if matches!(ev, TcpEvent::Closed(_)) {
                            let mut queued = self.stack.recv_queue(c).unwrap_or(0);
                            while queued > 0 {
                                self.rx_one(i);
                                let left = self.stack.recv_queue(c).unwrap_or(0);
                                // No progress (a QP that reads no more: a startup that ended
                                // before FPDU mode): the rest goes with the connection.
                                if left >= queued {
                                    break;
                                }
                                queued = left;
                            }
                            // Both FINs are out: one that ended the peer's stream inside a
                            // message fails it rather than closing it cleanly (MPA-8-1).
                            if let Some(q) = self.qps[i].as_mut() {
                                if let Some(conn) = q.conn.as_mut() {
                                    conn.peer_closed = true;
                                }
                                q.fail_if_fin_inside_message(queued, &mut self.ctx);
                            }
                        }
                        // What TCP had acknowledged by its end completes as such: a request
                        // `flush` held for it (RDMAP-5.5-8) is then a success, not flushed.
                        self.note_acked(id);
                        let Some(q) = self.qps[i].as_mut() else {
                            continue;
                        };
                        let conn = q.conn.take();
                        let was = q.state;
                        q.flush();
                        if let Some(conn) = conn {
                            let _ = self.stack.release(conn.tcp);
                            self.txrec.forget(conn.tcp);
                            if was == QpState::Connecting {
                                // A connection that never came up: why, as rdma_cm tells a
                                // refusal (REJECTED) from a timeout (UNREACHABLE).
                                let error = match ev {
                                    TcpEvent::TimedOut(_) => ConnError::TcpTimedOut,
                                    // No SYN left: the next hop never answered ARP.
                                    TcpEvent::NeighborUnreachable(_) => {
                                        ConnError::NeighborUnresolved
                                    }
                                    _ => ConnError::TcpReset,
                                };
                                self.ctx
                                    .events
                                    .push_back(CmEvent::Error { qp: q.id, error });
                            } else if !matches!(was, QpState::Error | QpState::Terminate) {
                                self.ctx
                                    .events
                                    .push_back(CmEvent::Disconnected { qp: q.id, cause });
                            }
                        }
                    } else if self.take_zombie(c) {
                        let _ = self.stack.release(c);
                        self.txrec.forget(c);
                    } else {
                        self.cancel_request(c);
                    }
                }
                TcpEvent::Readable(c) => {
                    if let Some(i) = self.find_qp(c) {
                        self.rx_ready.mark(i);
                    } else if let Some(i) = self.find_req(c) {
                        // Octets of a pending request's startup (or, closing, to discard).
                        self.req_ready.mark(i);
                    } else if self.is_zombie(c) {
                        self.discard_zombie_input(c);
                    }
                }
                // The initiator's MPA Request goes out; freed send space lets FPDUs follow
                // (a settled QP has none to send: the latency path's ACK of its last Write).
                TcpEvent::Connected(c) => {
                    if let Some(i) = self.find_qp(c) {
                        // MPA starts now: so does the wait for the Reply (MPA-7.1.2-27).
                        self.start_mpa_timer(i);
                        self.mark_tx_unless_settled(i);
                    }
                }
                TcpEvent::Writable(c) => {
                    if let Some(i) = self.find_qp(c) {
                        self.mark_tx_unless_settled(i);
                    }
                }
            }
        }
        work
    }

    /// Whether `tcp` is a zombie (its QP gone): one look-up per TCP event
    /// (`CoreStats::zombie_probes`), whatever the number of zombies.
    fn is_zombie(&mut self, tcp: ConnId) -> bool {
        self.ctx.stats.zombie_probes += 1;
        self.zombies.contains(tcp)
    }

    /// Takes `tcp` out of the zombies; whether it was one (one look-up, as `is_zombie`).
    fn take_zombie(&mut self, tcp: ConnId) -> bool {
        self.ctx.stats.zombie_probes += 1;
        self.zombies.remove(tcp)
    }

    /// Reads and drops what arrived on `tcp`, a connection of the zombies (its QP gone,
    /// our FIN sent): nothing else reads it, and a receive buffer left to fill closed the
    /// window on a peer still draining its send queue, which then could neither finish
    /// its close nor time out (it probes a zero window that is answered) until our
    /// FIN-WAIT-2 timeout reset the connection, minutes later. Dropped, the close
    /// completes once the peer has sent what it owes.
    pub(super) fn discard_zombie_input(&mut self, tcp: ConnId) {
        while let Ok(n) = self.stack.recv_with(tcp, |d| d.len()) {
            if n == 0 {
                break;
            }
        }
    }

    /// Resets the connection of every pending request (RST) and frees its slot: the core
    /// stops (its context dropped), and nobody will accept, reject or read them now, while
    /// their initiators would otherwise wait for their MPA startup timeout (or, a request
    /// still closing, for its close that no loop finishes). No event: no application
    /// reads them any more.
    pub fn reset_pending_requests(&mut self) {
        for i in 0..self.requests.len() {
            if let Some(r) = self.take_request(i) {
                let _ = self.stack.release(r.tcp);
            }
        }
    }

    pub(super) fn cancel_request(&mut self, tcp: ConnId) {
        // One look-up, not a scan of the table: a flood's RSTs each end one request.
        let Some(i) = self.find_req(tcp) else {
            return;
        };
        if let Some(r) = self.take_request(i) {
            let _ = self.stack.release(r.tcp);
            if r.phase == ReqPhase::Waiting {
                let id = self.request_id(i);
                self.ctx.report_cancelled(id);
            }
        }
    }

    pub(super) fn on_acceptable(&mut self, l: warpcore_tcp::ListenerId) {
        let Some(li) = self.listeners.iter().position(|x| x.tcp == l && x.open) else {
            return;
        };
        while let Ok(Some(tcp)) = self.stack.accept(l) {
            let params = self.listeners[li].params.clone();
            let config = self.mpa_config(&params, Vec::new(), false);
            // The responder before the slot: a pending request is evicted only for a
            // connection that will use its slot (`listen` refused parameters no responder
            // takes, so this does not fail).
            let Ok(responder) = Responder::new(config, self.now_std()) else {
                let _ = self.stack.release(tcp);
                continue;
            };
            let Some(slot) = self.free_request_slot().or_else(|| self.evict_request()) else {
                // No room for another pending request: refuse with RST.
                let _ = self.stack.release(tcp);
                self.ctx.stats.requests_refused += 1;
                continue;
            };
            let remote = match self.stack.endpoints(tcp) {
                Ok((_, Some(ep))) => match ep.addr {
                    warpcore_tcp::smoltcp::wire::IpAddress::Ipv4(a) => (a, ep.port),
                },
                _ => (Ipv4Address::UNSPECIFIED, 0),
            };
            self.req_generations[slot] = self.req_generations[slot].wrapping_add(1);
            self.arrivals += 1;
            self.requests_live += 1;
            let since = self.now_std();
            if self.conn_req.len() <= tcp.slot() {
                self.conn_req.resize(tcp.slot() + 1, NO_QP);
            }
            self.conn_req[tcp.slot()] = slot as u32;
            // Read at the next loop (the Request may be here already), then on its
            // connection's events or at its deadline.
            self.req_ready.grow(self.requests.len());
            self.req_ready.mark(slot);
            let r = PendingReq {
                tcp,
                since,
                arrival: self.arrivals,
                timer: None,
                responder: Box::new(responder),
                listener: li as u32,
                phase: ReqPhase::Reading,
                remote,
                peer_closed: false,
            };
            let deadline = request_deadline(&r, self.mpa_limit());
            self.requests[slot] = Some(r);
            self.file_for_eviction(slot);
            if let Some(at) = deadline {
                self.arm_request_timer(slot, at);
            }
        }
    }

    /// Frees a slot of a full request table for a new connection, if one may go: a request
    /// already closing (its startup failed or was rejected), else the oldest whose MPA
    /// Request has not arrived yet, reset (RST). Requests handed to the application stay.
    /// A peer that opens connections and sends nothing (or one octet a second) thus only
    /// pushes out its own older connections, while a client that sends its Request at once
    /// gets it read within a loop or two (issue 15: 2,000 silent connections must not lock
    /// the listener).
    fn evict_request(&mut self) -> Option<usize> {
        // The oldest of each kind from its queue in arrival order (`req_closing`,
        // `req_reading`), stale entries dropped on the way: O(log n) a connection, where
        // two scans of the table made each connection of a flood cost the table's size.
        let (requests, gens) = (&self.requests, &self.req_generations);
        let probes = &mut self.ctx.stats.eviction_probes;
        let i = [&mut self.req_closing, &mut self.req_reading]
            .into_iter()
            .zip([ReqPhase::Closing, ReqPhase::Reading])
            .find_map(|(q, phase)| {
                q.prune_head(|arrival, key| {
                    *probes += 1;
                    arrival_entry_live(requests, gens, arrival, key, phase)
                });
                q.pop().map(|(_, (slot, _))| slot as usize)
            })?;
        let r = self.take_request(i)?;
        let _ = self.stack.release(r.tcp);
        self.ctx.stats.requests_evicted += 1;
        Some(i)
    }

    /// An empty slot of the request table, growing the table (up to
    /// [`EngineConfig::max_pending_requests`]) when none is: the table is as wide as the
    /// most requests pending at once so far, not its limit.
    fn free_request_slot(&mut self) -> Option<usize> {
        while let Some(i) = self.req_free.pop() {
            if matches!(self.requests.get(i), Some(None)) {
                return Some(i);
            }
        }
        if self.requests.len() < self.ctx.cfg.max_pending_requests {
            self.requests.push(None);
            self.req_generations.push(0);
            return Some(self.requests.len() - 1);
        }
        None
    }

    /// The application's name of pending request `i`.
    fn request_id(&self, i: usize) -> RequestId {
        RequestId {
            core: self.core,
            index: i as u32,
            generation: self.req_generations[i],
            engine: self.instance,
        }
    }

    /// The request slot whose connection is `tcp`, if any: one lookup, no scan.
    pub(super) fn find_req(&self, tcp: ConnId) -> Option<usize> {
        let i = *self.conn_req.get(tcp.slot())? as usize;
        self.requests
            .get(i)?
            .as_ref()
            .is_some_and(|r| r.tcp == tcp)
            .then_some(i)
    }

    /// Takes pending request `i` out of the table.
    pub(super) fn take_request(&mut self, i: usize) -> Option<PendingReq> {
        let r = self.requests.get_mut(i)?.take();
        if r.is_some() {
            self.requests_live -= 1;
            self.req_free.push(i);
        }
        r
    }

    /// Files pending request `i` (just made, or just closing) in `req_reading` or
    /// `req_closing` by its arrival, compacting that queue when stale entries outnumber
    /// the live requests (most requests leave the reading phase by being accepted, long
    /// before any eviction would surface their entries).
    fn file_for_eviction(&mut self, i: usize) {
        let Some(Some(r)) = self.requests.get(i) else {
            return;
        };
        let (phase, arrival) = (r.phase, r.arrival);
        let q = match phase {
            ReqPhase::Reading => &mut self.req_reading,
            ReqPhase::Closing => &mut self.req_closing,
            _ => return,
        };
        q.push(arrival, (i as u32, self.req_generations[i]));
        if q.needs_compaction(self.requests_live) {
            let (requests, gens) = (&self.requests, &self.req_generations);
            q.retain(|arrival, key| arrival_entry_live(requests, gens, arrival, key, phase));
        }
    }

    pub(super) fn poll_requests(&mut self) -> bool {
        if self.requests_live == 0 {
            return false;
        }
        let now_std = self.now_std();
        // Those marked (`req_ready`) and those whose deadline has passed, each at its
        // deadline (MPA-7.1.2-27): a loop costs the requests with something to do, and
        // the others none.
        if !self.req_deadlines.is_due(now_std) && self.req_ready.is_empty() {
            return false;
        }
        while let Some((at, key)) = self.req_deadlines.pop_due(now_std) {
            if request_entry_live(&self.requests, &self.req_generations, at, key) {
                let i = key.0 as usize;
                if let Some(Some(r)) = self.requests.get_mut(i) {
                    // Taken: the visit arms it again if it stays pending.
                    r.timer = None;
                }
                // Marked, so that one also marked by its connection is visited once.
                self.req_ready.mark(i);
            }
        }
        let mut batch = std::mem::take(&mut self.req_batch);
        self.req_ready.take_into(&mut batch);
        let work = self.visit_requests(&batch, now_std);
        batch.clear();
        self.req_batch = batch;
        work
    }

    /// The startup timeout, `mpa_timeout_ms`.
    fn mpa_limit(&self) -> StdDuration {
        StdDuration::from_millis(self.ctx.cfg.mpa_timeout_ms)
    }

    /// Puts pending request `i`'s deadline `at` in `req_deadlines`, unless its live entry
    /// is there already; the entry it had at another instant is left stale. Compacts the
    /// queue when stale entries outnumber the live ones (requests accepted, evicted or
    /// reset long before their deadlines: a flood's churn).
    fn arm_request_timer(&mut self, i: usize, at: StdInstant) {
        let Some(Some(r)) = self.requests.get_mut(i) else {
            return;
        };
        if r.timer == Some(at) {
            return;
        }
        r.timer = Some(at);
        self.req_deadlines
            .push(at, (i as u32, self.req_generations[i]));
        if self.req_deadlines.needs_compaction(self.requests_live) {
            let (requests, gens) = (&self.requests, &self.req_generations);
            self.req_deadlines
                .retain(|at, key| request_entry_live(requests, gens, at, key));
        }
    }

    /// The earliest live deadline of a pending request (stale entries ahead of it are
    /// dropped).
    pub(super) fn next_request_deadline(&mut self) -> Option<StdInstant> {
        let (requests, gens) = (&self.requests, &self.req_generations);
        self.req_deadlines
            .prune_head(|at, key| request_entry_live(requests, gens, at, key));
        self.req_deadlines.peek().map(|(at, _)| at)
    }

    /// The earliest live MPA initiator deadline (stale entries ahead of it are dropped).
    pub(super) fn next_mpa_timer(&mut self) -> Option<StdInstant> {
        let qps = &self.qps;
        self.mpa_timers
            .prune_head(|at, key| initiator_entry_live(qps, at, key));
        self.note_mpa_due();
        self.mpa_timers.peek().map(|(at, _)| at)
    }

    /// The MPA initiators waiting for their Reply with a deadline (`CoreStats::mpa_timers`):
    /// a count over the timer entries, at a read of the counters.
    pub(super) fn live_mpa_timers(&self) -> usize {
        self.mpa_timers
            .iter()
            .filter(|&(at, key)| initiator_entry_live(&self.qps, at, key))
            .count()
    }

    /// The requests poller's visit of requests `batch` at `now_std`; each request still
    /// pending after it is marked again if it has more to do at once, and its deadline is
    /// armed in `req_deadlines`.
    fn visit_requests(&mut self, batch: &[usize], now_std: StdInstant) -> bool {
        let mut work = false;
        let limit = StdDuration::from_millis(self.ctx.cfg.mpa_timeout_ms);
        for &i in batch {
            let mut read_some = false;
            let Some(Some(r)) = self.requests.get_mut(i) else {
                continue;
            };
            self.ctx.stats.request_visits += 1;
            let was_closing = r.phase == ReqPhase::Closing;
            let id = RequestId {
                core: self.core,
                index: i as u32,
                generation: self.req_generations[i],
                engine: self.instance,
            };
            let mut timed_out = false;
            match r.phase {
                ReqPhase::Reading => {
                    let resp = &mut r.responder;
                    let n = self
                        .stack
                        .recv_with(r.tcp, |d| resp.handle_input(d))
                        .unwrap_or(0);
                    work |= n > 0;
                    read_some = n > 0;
                    r.responder.handle_timeout(now_std);
                    while let Some(ev) = r.responder.poll_event() {
                        work = true;
                        match ev {
                            nego::Event::Request(peer) => {
                                r.phase = ReqPhase::Waiting;
                                self.ctx.events.push_back(CmEvent::ConnectRequest(
                                    ConnectRequest {
                                        request: id,
                                        listener: ListenerId {
                                            core: self.core,
                                            index: r.listener,
                                        },
                                        remote: r.remote,
                                        local_port: self
                                            .listeners
                                            .get(r.listener as usize)
                                            .map_or(0, |l| l.port),
                                        rev: peer.rev,
                                        ird: peer.ird(),
                                        ord: peer.ord(),
                                        private_data: peer.private_data,
                                    },
                                ));
                            }
                            nego::Event::Rejected(rej) => {
                                // MPA refused the Request on its own (markers we cannot
                                // send): the Reply with R = 1 goes out, and our user is
                                // told, typed, so neither side waits in silence.
                                if rej.reason == nego::RejectReason::MarkersUnsupported {
                                    self.ctx.report_refused(request_refused(
                                        self.core,
                                        r,
                                        nego::NegotiationError::MarkersUnsupported,
                                    ));
                                }
                                r.phase = ReqPhase::Rejecting;
                            }
                            nego::Event::Failed(f)
                                if f.error == nego::NegotiationError::Timeout =>
                            {
                                // No complete Request within `mpa_timeout_ms` (mpa-08
                                // §7.1.2 rule 8): reset at once, so a silent peer cannot
                                // hold the slot through a graceful close either.
                                timed_out = true;
                            }
                            nego::Event::Failed(f) => {
                                // A malformed Request (key, revision, PD_Length, enhanced
                                // format): TCP closes and our user is told what was wrong
                                // (MPA-7.1.1-3, MPA-7.1.2-4, MPA-7.1.2-17).
                                self.ctx
                                    .report_refused(request_refused(self.core, r, f.error));
                                let _ = self.stack.close(r.tcp);
                                r.phase = ReqPhase::Closing;
                            }
                            nego::Event::Established(_) => {}
                        }
                    }
                    if r.phase == ReqPhase::Reading && r.peer_closed {
                        // The peer closed before its Request was whole: it never will be.
                        // Our side closes now rather than hold the slot until the
                        // startup timeout. A Request cut short (some of it arrived) is
                        // reported to our user as malformed requests are (MPA-7.1.1-21:
                        // close and report an error locally); a connection closed before
                        // any octet of it is not a request at all.
                        r.responder.handle_close();
                        while let Some(ev) = r.responder.poll_event() {
                            if let nego::Event::Failed(f) = ev {
                                if matches!(f.error, nego::NegotiationError::Frame(_)) {
                                    self.ctx
                                        .report_refused(request_refused(self.core, r, f.error));
                                }
                            }
                        }
                        let _ = self.stack.close(r.tcp);
                        r.phase = ReqPhase::Closing;
                        work = true;
                    }
                }
                ReqPhase::Rejecting => {
                    let resp = &mut r.responder;
                    let n = self
                        .stack
                        .send_with(r.tcp, |b| resp.poll_transmit(b))
                        .unwrap_or(0);
                    if n == 0 {
                        // The Reply is in TCP's hands; close after it (MPA-7.1.2-7 leaves
                        // the choice to the ULP; siw closes too).
                        let _ = self.stack.close(r.tcp);
                        r.phase = ReqPhase::Closing;
                    }
                    work = true;
                }
                ReqPhase::Closing => {
                    let _ = self.stack.recv_with(r.tcp, |d| d.len());
                    // A peer that never closes its side would keep the slot in FIN-WAIT-2:
                    // after twice the startup timeout the connection is reset instead.
                    let done = match self.stack.state(r.tcp) {
                        Ok(s) => matches!(s, TcpState::Closed | TcpState::TimeWait),
                        Err(_) => true,
                    } || now_std.saturating_duration_since(r.since) > 2 * limit;
                    if done {
                        let _ = self.stack.release(r.tcp);
                        self.take_request(i);
                        work = true;
                    }
                }
                ReqPhase::Waiting => {
                    // Handed to the application, neither accepted nor rejected: after the
                    // startup timeout the initiator has given up waiting for the Reply
                    // (mpa-08 §7.1.2 rule 10), so the slot is freed and the application
                    // told; its RequestId is stale from now on.
                    if now_std.saturating_duration_since(r.since) > limit {
                        self.ctx.report_cancelled(id);
                        timed_out = true;
                    }
                }
            }
            if timed_out {
                if let Some(r) = self.take_request(i) {
                    let _ = self.stack.release(r.tcp);
                }
                self.ctx.stats.requests_timed_out += 1;
                work = true;
            }
            let Some(Some(r)) = self.requests.get(i) else {
                continue;
            };
            if !was_closing && r.phase == ReqPhase::Closing {
                // Closing now: the first a full table gives up (`evict_request`).
                self.file_for_eviction(i);
            }
            let Some(Some(r)) = self.requests.get(i) else {
                continue;
            };
            // Visited again at once: a Reply still going out, a startup that read octets
            // (more may wait behind them). Otherwise at its connection's next event or at
            // its deadline (strictly after it, as the checks above are).
            let again = match r.phase {
                ReqPhase::Rejecting => true,
                ReqPhase::Reading => read_some,
                ReqPhase::Waiting | ReqPhase::Closing => false,
            };
            let deadline = request_deadline(r, limit);
            if again {
                self.req_ready.mark(i);
            }
            // A request visited again at once needs no entry for a deadline already
            // passed (a Reply still going out): it is armed again when it waits.
            if let Some(at) = deadline.filter(|&at| !again || at > now_std) {
                self.arm_request_timer(i, at);
            }
        }
        work
    }

    /// MPA startup timers that are due (MPA-7.1.2-27): each entry taken fails its QP's
    /// startup if the QP still has that deadline, else (the QP destroyed or reset, its
    /// startup over) it is dropped. The entries not yet due cost nothing.
    pub(super) fn poll_timers(&mut self) -> bool {
        let now_std = self.now_std();
        let mut work = false;
        while let Some((at, (slot, generation))) = self.mpa_timers.pop_due(now_std) {
            self.ctx.stats.mpa_timer_visits += 1;
            let EngineCore {
                qps, ctx, tx_ready, ..
            } = self;
            let i = usize::from(slot);
            let Some(Some(q)) = qps.get_mut(i) else {
                continue;
            };
            if q.id.generation != generation {
                continue;
            }
            let fired = match q.conn.as_mut().map(|c| &mut c.mpa) {
                Some(Mpa::Initiator(init)) if init.poll_timeout() == Some(at) => {
                    init.handle_timeout(now_std);
                    true
                }
                _ => false,
            };
            if fired {
                work = true;
                q.drive_initiator(ctx);
                tx_ready.mark(i);
            }
        }
        self.note_mpa_due();
        work
    }

    /// Notes when `mpa_timers`' earliest entry is due, in engine time (`mpa_due`, which
    /// each loop compares with its time).
    fn note_mpa_due(&mut self) {
        self.mpa_due = match self.mpa_timers.peek() {
            Some((at, _)) => self.instant_of(at),
            None => NEVER,
        };
    }
}

/// Pending request `r`'s deadline at its phase, the first instant its visit acts on it:
/// the startup timeout (MPA-7.1.2-27), at which MPA's own timer fails a Request not yet
/// whole (`Responder::handle_timeout`: at `limit`) and after which a request the
/// application has not answered is dropped (strictly after `limit`), or while closing,
/// the bound on the peer's close (strictly after twice `limit`). `None`: a timeout too
/// large for the clock, never reached.
fn request_deadline(r: &PendingReq, limit: StdDuration) -> Option<StdInstant> {
    let after = StdDuration::from_micros(1);
    match r.phase {
        ReqPhase::Reading => r.responder.poll_timeout(),
        ReqPhase::Waiting | ReqPhase::Rejecting => r.since.checked_add(limit + after),
        ReqPhase::Closing => r.since.checked_add(2 * limit + after),
    }
}

/// Whether `req_reading` / `req_closing` entry `(arrival, (slot, generation))` is its
/// request's, still in `phase`.
fn arrival_entry_live(
    requests: &[Option<PendingReq>],
    generations: &[u32],
    arrival: u64,
    (slot, generation): (u32, u32),
    phase: ReqPhase,
) -> bool {
    let i = slot as usize;
    generations.get(i) == Some(&generation)
        && matches!(requests.get(i), Some(Some(r)) if r.arrival == arrival && r.phase == phase)
}

/// Whether `req_deadlines` entry `(at, (slot, generation))` is its request's live one.
fn request_entry_live(
    requests: &[Option<PendingReq>],
    generations: &[u32],
    at: StdInstant,
    (slot, generation): (u32, u32),
) -> bool {
    let i = slot as usize;
    generations.get(i) == Some(&generation)
        && matches!(requests.get(i), Some(Some(r)) if r.timer == Some(at))
}

/// Whether `mpa_timers` entry `(at, (slot, generation))` is the deadline of its QP's MPA
/// initiator.
fn initiator_entry_live(
    qps: &[Option<Qp>],
    at: StdInstant,
    (slot, generation): (u16, u32),
) -> bool {
    matches!(
        qps.get(usize::from(slot)),
        Some(Some(q)) if q.id.generation == generation
            && matches!(
                q.conn.as_ref().map(|c| &c.mpa),
                Some(Mpa::Initiator(init)) if init.poll_timeout() == Some(at)
            )
    )
}

/// Whether TCP itself bounds a close's wait on `tcp`: data of ours in flight to a peer
/// whose window is open, under the retransmission timer, whose backoff the user timeout
/// ends (RFC 9293 3.8.3, RFC 6298 5). A close stalled there (a lossy or briefly dead path)
/// is TCP's to give up or carry through: the close bound would cut the backoff (up to 60 s
/// a retransmission) short. The bound is for what no TCP timer ends: a peer that holds its
/// window at zero while it answers the probes (RFC 9293 3.8.6.1), or nothing in flight
/// while the close waits (a Read never answered).
fn tcp_bounds_the_wait<D: PollDevice>(stack: &Stack<D>, tcp: ConnId) -> bool {
    stack.nothing_in_flight(tcp) == Ok(false) && stack.peer_window_shut(tcp) == Ok(false)
}

/// Whether our FIN on `tcp` was acknowledged (or the connection is gone): FIN-WAIT-2,
/// TIME-WAIT or closed (RFC 9293 3.10.7.4), where a close's bound no longer applies.
fn fin_acked<D: PollDevice>(stack: &mut Stack<D>, tcp: ConnId) -> bool {
    match stack.state(tcp) {
        Ok(s) => matches!(
            s,
            TcpState::FinWait2 | TcpState::TimeWait | TcpState::Closed
        ),
        Err(_) => true,
    }
}

/// Whether `close_timers` entry `(at, (slot, generation))` is its QP's live bound.
fn close_entry_live(qps: &[Option<Qp>], at: Instant, (slot, generation): (u16, u32)) -> bool {
    matches!(
        qps.get(usize::from(slot)),
        Some(Some(q)) if q.id.generation == generation
            && q.conn.as_ref().and_then(|c| c.close_watch).is_some_and(|w| w.due == Some(at))
    )
}

impl Qp {
    /// The progress of this QP's graceful close on `tcp`, compared by
    /// `EngineCore::watch_close` and `poll_close_timers`: the octets framed so far (the
    /// stream position of our FPDUs, Read Responses included), the octets TCP holds
    /// unacknowledged (they shrink as the peer takes them), the requests completed, the
    /// octets of the Read Response being placed, and the octets of the peer's stream read
    /// (a Read Response we wait for comes behind whatever the peer sent before it). None
    /// of these moves while a peer holds its window at zero or leaves our Read unanswered.
    fn close_mark<D: PollDevice>(&self, stack: &mut Stack<D>, tcp: ConnId) -> [u64; 5] {
        let conn = self.conn.as_ref();
        let framed = conn
            .and_then(|c| c.framer.as_ref())
            .map_or(0, |f| f.stream_offset());
        let read = conn
            .and_then(|c| c.deframer.as_ref())
            .map_or(0, |d| d.stream_offset());
        let unacked = stack.send_queue(tcp).unwrap_or(0) as u64;
        [framed, unacked, self.sq_head_seq, self.read_placed, read]
    }

    /// Whether our side of the graceful close is done: nothing owed (the test
    /// `tx_close_if_drained` makes before the FIN), the FIN sent and acknowledged (TCP in
    /// FIN-WAIT-2, TIME-WAIT or closed, RFC 9293 3.10.7.4).
    fn close_sent<D: PollDevice>(&self, stack: &mut Stack<D>, tcp: ConnId) -> bool {
        let drained =
            self.tx.is_none() && self.irq.is_empty() && self.sq.is_empty() && self.orq.is_empty();
        drained && self.conn.as_ref().is_some_and(|c| c.fin_sent) && fin_acked(stack, tcp)
    }
}

/// What `RequestRefused` reports of pending request `r` on `core`'s listener.
fn request_refused(core: u16, r: &PendingReq, error: nego::NegotiationError) -> CmEvent {
    CmEvent::RequestRefused {
        listener: ListenerId {
            core,
            index: r.listener,
        },
        remote: r.remote,
        error,
    }
}
