//! The reference TCP: smoltcp 0.14's TCP socket behind the engine-facing [`crate::Stack`]
//! interface. It is never on the default path (see `docs/decisions/0002-own-tcp.md`); it
//! stays as the yardstick of differential tests, which run the same seeded workload through
//! it and through Warpcore's own TCP ([`crate::host`]) and compare the delivered bytes.

use std::collections::VecDeque;

use smoltcp::iface::{Config, Interface, Route, SocketHandle, SocketSet};
use smoltcp::socket::tcp::{self, CongestionControl, State};
use smoltcp::time::{Duration, Instant};
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpCidr, IpEndpoint, Ipv4Address};

use crate::device::{DeviceStats, PollDevice};
use crate::stack::{Congestion, ConnId, Event, ListenerId, StackConfig, StackError, TcpTuning};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// One of a listener's sockets waiting for a SYN.
    Backlog(ListenerId),
    /// A connection accepted by a listener that has not finished its handshake yet.
    Embryonic(ListenerId),
    /// A connection the user owns.
    User,
}

#[derive(Debug)]
struct Slot {
    handle: SocketHandle,
    generation: u32,
    role: Role,
    state: State,
    recv_queue: usize,
    send_space: usize,
    peer_closed: bool,
    aborted: bool,
}

#[derive(Debug)]
struct Listener {
    port: u16,
    tuning: TcpTuning,
    ready: VecDeque<ConnId>,
    open: bool,
}

/// A TCP/IP stack over one device, driven by the caller's clock.
///
/// Call [`RefStack::poll`] with the current time in a loop; between polls, take events with
/// [`RefStack::next_event`] and use the per-connection calls. Nothing here reads a clock.
pub struct RefStack<D: PollDevice> {
    device: D,
    iface: Interface,
    sockets: SocketSet<'static>,
    slots: Vec<Option<Slot>>,
    generations: Vec<u32>,
    listeners: Vec<Listener>,
    events: VecDeque<Event>,
    max_connections: usize,
    next_port: u16,
    now: Instant,
    /// This stack's tag in every handle it makes (`crate::stack::new_stack_tag`).
    tag: u32,
}

impl<D: PollDevice + std::fmt::Debug> std::fmt::Debug for RefStack<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RefStack")
            .field("device", &self.device)
            .field("ip", &self.iface.ipv4_addr())
            .field("connections", &self.live())
            .field("listeners", &self.listeners.len())
            .field("pending_events", &self.events.len())
            .finish_non_exhaustive()
    }
}

const EPHEMERAL_FIRST: u16 = 49152;
/// Connections the tables are preallocated for at most (a larger bound grows them).
const PREALLOCATED_MAX: usize = 4096;

fn new_socket(t: &TcpTuning) -> tcp::Socket<'static> {
    let mut s = tcp::Socket::new(
        tcp::SocketBuffer::new(vec![0; t.rx_buffer]),
        tcp::SocketBuffer::new(vec![0; t.tx_buffer]),
    );
    s.set_nagle_enabled(t.nagle);
    s.set_ack_delay(t.ack_delay);
    s.set_congestion_control(match t.congestion {
        Congestion::None => CongestionControl::None,
        Congestion::Reno => CongestionControl::Reno,
        Congestion::Cubic => CongestionControl::Cubic,
    });
    s.set_keep_alive(t.keep_alive);
    s.set_timeout(t.timeout);
    s
}

impl<D: PollDevice> RefStack<D> {
    /// Creates the stack on `device` at time `now`.
    pub fn new(mut device: D, config: &StackConfig, now: Instant) -> Result<Self, StackError> {
        config.check()?;
        let mut ic = Config::new(HardwareAddress::Ethernet(EthernetAddress(config.mac)));
        ic.random_seed = config.random_seed;
        let mut iface = Interface::new(ic, &mut device, now);
        iface.update_ip_addrs(|a| {
            // The address list has room for one address; the interface starts empty.
            let _ = a.push(IpCidr::Ipv4(config.ip));
        });
        if let Some(gw) = config.gateway {
            iface
                .routes_mut()
                .add_default_ipv4_route(gw)
                .map_err(|_| StackError::TooManyRoutes)?;
        }
        let mut overflow = false;
        iface.routes_mut().update(|r| {
            for (cidr, via) in &config.routes {
                overflow |= r
                    .push(Route {
                        cidr: IpCidr::Ipv4(*cidr),
                        via_router: (*via).into(),
                        preferred_until: None,
                        expires_at: None,
                    })
                    .is_err();
            }
        });
        if overflow {
            return Err(StackError::TooManyRoutes);
        }
        let span = u64::from(u16::MAX - EPHEMERAL_FIRST);
        // The tables are preallocated for the bound where it is modest; a larger one (up
        // to no bound at all, `usize::MAX`) grows them as connections come, rather than
        // asking for memory it never uses (or more than exists: a capacity overflow).
        let prealloc = config.max_connections.min(PREALLOCATED_MAX);
        Ok(RefStack {
            device,
            iface,
            sockets: SocketSet::new(Vec::with_capacity(prealloc)),
            slots: Vec::with_capacity(prealloc),
            generations: Vec::with_capacity(prealloc),
            listeners: Vec::new(),
            events: VecDeque::with_capacity(prealloc * 4),
            max_connections: config.max_connections,
            next_port: EPHEMERAL_FIRST + (config.random_seed % span) as u16,
            now,
            tag: crate::stack::new_stack_tag(),
        })
    }

    /// The device.
    pub fn device(&self) -> &D {
        &self.device
    }

    /// The device, mutably.
    pub fn device_mut(&mut self) -> &mut D {
        &mut self.device
    }

    /// Drops the stack (every connection with it, without sending anything) and returns the
    /// device, e.g. to close a capture.
    pub fn into_device(self) -> D {
        self.device
    }

    /// Device counters.
    pub fn device_stats(&self) -> DeviceStats {
        self.device.stats()
    }

    /// The interface's IPv4 address.
    pub fn ipv4_addr(&self) -> Option<Ipv4Address> {
        self.iface.ipv4_addr()
    }

    /// Runs the stack at time `now`: one rx batch in, timers, everything sendable out, one tx
    /// flush. Returns whether anything happened (packets moved or events were raised).
    #[inline(never)]
    pub fn poll(&mut self, now: Instant) -> bool {
        self.now = now;
        self.device.begin_poll();
        let changed = self.iface.poll(now, &mut self.device, &mut self.sockets);
        self.device.end_rx();
        let sent = self.device.flush();
        let before = self.events.len();
        self.scan();
        changed != smoltcp::iface::PollResult::None || sent || self.events.len() != before
    }

    /// Moves the stack's time on to `now` (never back) between polls: the time
    /// [`Self::release`] runs its RST's poll at ([`crate::host::Host::set_time`]).
    pub fn set_time(&mut self, now: Instant) {
        self.now = self.now.max(now);
    }

    /// When the stack next needs a poll without new input (`None`: only on input).
    pub fn poll_at(&mut self, now: Instant) -> Option<Instant> {
        self.iface.poll_at(now, &self.sockets)
    }

    /// Takes the oldest pending event.
    pub fn next_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Whether an event is pending.
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    fn alloc_slot(&mut self, handle: SocketHandle, role: Role) -> ConnId {
        // A slot that served every generation is retired (its next would wrap to 0, and a
        // handle of 2^32 uses before would name the new connection: handles are never
        // aliased, `ConnId`).
        let free = |(i, s): (usize, &Option<Slot>)| s.is_none() && self.generations[i] != u32::MAX;
        let (index, generation) = match self.slots.iter().enumerate().position(free) {
            Some(i) => {
                self.generations[i] += 1;
                (i, self.generations[i])
            }
            None => {
                self.slots.push(None);
                self.generations.push(0);
                (self.slots.len() - 1, 0)
            }
        };
        let s = self.sockets.get::<tcp::Socket<'_>>(handle);
        self.slots[index] = Some(Slot {
            handle,
            generation,
            role,
            state: s.state(),
            recv_queue: 0,
            send_space: 0,
            peer_closed: false,
            aborted: false,
        });
        ConnId {
            index: index as u32,
            generation,
            stack: self.tag,
        }
    }

    /// Connections in the table now (listener backlog sockets included).
    pub fn live(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    fn slot(&self, id: ConnId) -> Result<&Slot, StackError> {
        match self.slots.get(id.index as usize) {
            Some(Some(s))
                if s.generation == id.generation
                    && id.stack == self.tag
                    && s.role == Role::User =>
            {
                Ok(s)
            }
            _ => Err(StackError::UnknownConnection),
        }
    }

    fn socket(&mut self, id: ConnId) -> Result<&mut tcp::Socket<'static>, StackError> {
        let h = self.slot(id)?.handle;
        Ok(self.sockets.get_mut::<tcp::Socket<'static>>(h))
    }

    fn ephemeral_port(&mut self) -> u16 {
        let p = self.next_port;
        self.next_port = if p == u16::MAX {
            EPHEMERAL_FIRST
        } else {
            p + 1
        };
        p
    }

    /// Opens a connection to `remote` from `local_port` (an ephemeral port if `None`).
    /// [`Event::Connected`] or [`Event::Reset`] follows.
    pub fn connect(
        &mut self,
        remote: (Ipv4Address, u16),
        local_port: Option<u16>,
        tuning: &TcpTuning,
    ) -> Result<ConnId, StackError> {
        tuning.check()?;
        if self.live() >= self.max_connections {
            return Err(StackError::TableFull(self.max_connections));
        }
        let port = match local_port {
            Some(p) => p,
            None => self.ephemeral_port(),
        };
        let mut s = new_socket(tuning);
        let ep = IpEndpoint::new(remote.0.into(), remote.1);
        s.connect(self.iface.context(), ep, port)
            .map_err(|e| StackError::Connect(ep, e))?;
        let h = self.sockets.add(s);
        Ok(self.alloc_slot(h, Role::User))
    }

    /// Listens on `port` with `backlog` sockets ready for simultaneous handshakes.
    /// [`Event::Acceptable`] tells when [`RefStack::accept`] has a connection. Each socket that
    /// took a SYN is replaced after the poll; SYNs beyond the free backlog sockets within one
    /// poll are answered with RST (smoltcp keeps no SYN queue), so size the backlog for the
    /// burst of connections expected.
    pub fn listen(
        &mut self,
        port: u16,
        backlog: usize,
        tuning: &TcpTuning,
    ) -> Result<ListenerId, StackError> {
        tuning.check()?;
        if backlog == 0 {
            return Err(crate::host::BACKLOG_ZERO);
        }
        if backlog > self.max_connections.saturating_sub(self.live()) {
            return Err(StackError::TableFull(self.max_connections));
        }
        let id = ListenerId(self.listeners.len() as u32, 0, self.tag);
        for _ in 0..backlog {
            self.add_backlog_socket(id, port, tuning)?;
        }
        self.listeners.push(Listener {
            port,
            tuning: *tuning,
            ready: VecDeque::with_capacity(backlog),
            open: true,
        });
        Ok(id)
    }

    fn add_backlog_socket(
        &mut self,
        id: ListenerId,
        port: u16,
        tuning: &TcpTuning,
    ) -> Result<(), StackError> {
        let mut s = new_socket(tuning);
        s.listen(port).map_err(|e| StackError::Listen(port, e))?;
        let h = self.sockets.add(s);
        self.alloc_slot(h, Role::Backlog(id));
        Ok(())
    }

    /// Takes an established connection from the listener, if one is waiting.
    pub fn accept(&mut self, listener: ListenerId) -> Result<Option<ConnId>, StackError> {
        let tag = self.tag;
        let l = self
            .listeners
            .get_mut(listener.0 as usize)
            .filter(|l| l.open && listener.2 == tag)
            .ok_or(StackError::UnknownListener)?;
        Ok(l.ready.pop_front())
    }

    /// Listener entries (never reused).
    pub fn listener_entries(&self) -> usize {
        self.listeners.len()
    }

    /// Stops listening: the backlog sockets are dropped, connections not yet accepted are
    /// reset; accepted connections stay. The handle is stale from here.
    pub fn unlisten(&mut self, listener: ListenerId) -> Result<(), StackError> {
        let tag = self.tag;
        let l = self
            .listeners
            .get_mut(listener.0 as usize)
            .filter(|_| listener.2 == tag)
            .ok_or(StackError::UnknownListener)?;
        if !l.open {
            return Err(StackError::UnknownListener);
        }
        l.open = false;
        // Established but never accepted: reset, as ours does.
        let ready: Vec<ConnId> = l.ready.drain(..).collect();
        for id in ready {
            let _ = self.release(id);
        }
        for i in 0..self.slots.len() {
            let drop_it = matches!(&self.slots[i], Some(s) if s.role == Role::Backlog(listener));
            if drop_it {
                if let Some(s) = self.slots[i].take() {
                    self.sockets.remove(s.handle);
                }
            }
        }
        Ok(())
    }

    /// Lends the free contiguous part of the send buffer to `f`, which writes into it and
    /// returns how many bytes it wrote. Returns that count.
    pub fn send_with<F>(&mut self, id: ConnId, f: F) -> Result<usize, StackError>
    where
        F: FnOnce(&mut [u8]) -> usize,
    {
        let s = self.socket(id)?;
        let state = s.state();
        s.send(|buf| {
            let n = f(buf).min(buf.len());
            (n, n)
        })
        .map_err(|_| StackError::CannotSend(state))
    }

    /// Lends the contiguous received bytes to `f`, which returns how many it consumed.
    /// Returns that count. Fails once the peer closed and everything was read.
    pub fn recv_with<F>(&mut self, id: ConnId, f: F) -> Result<usize, StackError>
    where
        F: FnOnce(&[u8]) -> usize,
    {
        let s = self.socket(id)?;
        let state = s.state();
        s.recv(|data| {
            let n = f(data).min(data.len());
            (n, n)
        })
        .map_err(|_| StackError::CannotRecv(state))
    }

    /// Bytes waiting to be read.
    pub fn recv_queue(&mut self, id: ConnId) -> Result<usize, StackError> {
        Ok(self.socket(id)?.recv_queue())
    }

    /// Bytes in the send buffer not yet acknowledged.
    pub fn send_queue(&mut self, id: ConnId) -> Result<usize, StackError> {
        Ok(self.socket(id)?.send_queue())
    }

    /// Free bytes in the send buffer.
    pub fn send_space(&mut self, id: ConnId) -> Result<usize, StackError> {
        let s = self.socket(id)?;
        Ok(s.send_capacity() - s.send_queue())
    }

    /// The TCP state.
    pub fn state(&mut self, id: ConnId) -> Result<State, StackError> {
        Ok(self.socket(id)?.state())
    }

    /// Local and remote endpoints.
    pub fn endpoints(
        &mut self,
        id: ConnId,
    ) -> Result<(Option<IpEndpoint>, Option<IpEndpoint>), StackError> {
        let s = self.socket(id)?;
        Ok((s.local_endpoint(), s.remote_endpoint()))
    }

    /// Changes the Nagle and delayed-ACK settings of a live connection.
    pub fn set_nagle_and_ack_delay(
        &mut self,
        id: ConnId,
        nagle: bool,
        ack_delay: Option<Duration>,
    ) -> Result<(), StackError> {
        let s = self.socket(id)?;
        s.set_nagle_enabled(nagle);
        s.set_ack_delay(ack_delay);
        Ok(())
    }

    /// Nothing to lift: the reference ignores [`crate::TcpTuning::rx_window_clamp`] (its
    /// window is its buffer's free space from the SYN on).
    pub fn clear_window_clamp(&mut self, id: ConnId) -> Result<(), StackError> {
        self.socket(id).map(|_| ())
    }

    /// Sends FIN after the buffered data (graceful close of the sending half).
    pub fn close(&mut self, id: ConnId) -> Result<(), StackError> {
        self.socket(id)?.close();
        Ok(())
    }

    /// Sends RST and drops everything buffered.
    pub fn abort(&mut self, id: ConnId) -> Result<(), StackError> {
        let i = id.index as usize;
        self.socket(id)?.abort();
        if let Some(Some(s)) = self.slots.get_mut(i) {
            s.aborted = true;
        }
        Ok(())
    }

    /// Frees the connection's slot (aborting it if still open). The handle becomes stale.
    pub fn release(&mut self, id: ConnId) -> Result<(), StackError> {
        let h = self.slot(id)?.handle;
        let s = self.sockets.get_mut::<tcp::Socket<'static>>(h);
        if s.state() != State::Closed && s.state() != State::TimeWait {
            s.abort();
            // Let the RST go out before the socket disappears.
            self.device.begin_poll();
            let _ = self
                .iface
                .poll(self.now, &mut self.device, &mut self.sockets);
            self.device.end_rx();
            self.device.flush();
        }
        self.slots[id.index as usize] = None;
        self.sockets.remove(h);
        Ok(())
    }

    /// Compares every slot with its socket and raises events; promotes backlog sockets that
    /// received a SYN and replaces them.
    fn scan(&mut self) {
        for i in 0..self.slots.len() {
            let Some(slot) = self.slots[i].as_mut() else {
                continue;
            };
            let s = self.sockets.get::<tcp::Socket<'static>>(slot.handle);
            let id = ConnId {
                index: i as u32,
                generation: slot.generation,
                stack: self.tag,
            };
            let state = s.state();
            let prev = slot.state;
            slot.state = state;
            match slot.role {
                Role::Backlog(l) => {
                    if state != State::Listen {
                        slot.role = Role::Embryonic(l);
                        let (port, tuning, open) = {
                            let li = &self.listeners[l.0 as usize];
                            (li.port, li.tuning, li.open)
                        };
                        if open {
                            // Failing to refill only shrinks the backlog.
                            let _ = self.add_backlog_socket(l, port, &tuning);
                        }
                        self.promote(i, l);
                    }
                }
                Role::Embryonic(l) => self.promote(i, l),
                Role::User => self.user_events(i, id, prev),
            }
        }
    }

    fn promote(&mut self, i: usize, l: ListenerId) {
        let Some(slot) = self.slots[i].as_mut() else {
            return;
        };
        let s = self.sockets.get::<tcp::Socket<'static>>(slot.handle);
        match s.state() {
            State::SynReceived => {}
            State::Closed | State::Listen | State::SynSent => {
                // The handshake failed (RST or timeout): nobody ever saw this connection.
                let h = slot.handle;
                self.slots[i] = None;
                self.sockets.remove(h);
            }
            _ => {
                slot.role = Role::User;
                slot.recv_queue = 0;
                slot.send_space = s.send_capacity() - s.send_queue();
                let id = ConnId {
                    index: i as u32,
                    generation: slot.generation,
                    stack: self.tag,
                };
                let li = &mut self.listeners[l.0 as usize];
                li.ready.push_back(id);
                self.events.push_back(Event::Acceptable(l));
                let prev = State::Established;
                self.user_events(i, id, prev);
            }
        }
    }

    fn user_events(&mut self, i: usize, id: ConnId, prev: State) {
        let Some(slot) = self.slots[i].as_mut() else {
            return;
        };
        let s = self.sockets.get::<tcp::Socket<'static>>(slot.handle);
        let state = s.state();
        if prev == State::SynSent && state != State::SynSent && state != State::Closed {
            self.events.push_back(Event::Connected(id));
        }
        let rq = s.recv_queue();
        if rq > slot.recv_queue {
            self.events.push_back(Event::Readable(id));
        }
        slot.recv_queue = rq;
        let space = if s.may_send() {
            s.send_capacity() - s.send_queue()
        } else {
            0
        };
        if space > slot.send_space && s.may_send() {
            self.events.push_back(Event::Writable(id));
        }
        slot.send_space = space;
        let fin_seen = matches!(
            state,
            State::CloseWait | State::LastAck | State::Closing | State::TimeWait
        );
        if fin_seen && !slot.peer_closed {
            slot.peer_closed = true;
            self.events.push_back(Event::PeerClosed(id));
        }
        if state == State::Closed && prev != State::Closed {
            let graceful = matches!(prev, State::TimeWait | State::LastAck | State::Closing);
            self.events.push_back(if graceful || slot.aborted {
                Event::Closed(id)
            } else {
                Event::Reset(id)
            });
        }
    }
}

#[cfg(test)]
mod generation_tests {
    use super::*;
    use crate::link::{self, LinkConfig};
    use smoltcp::wire::Ipv4Cidr;

    /// As Warpcore's TCP (`host::generation_tests`): a slot that served generation
    /// `u32::MAX` came back at generation 0, so a stale handle of 2^32 uses before named
    /// the new connection. The counter is set where 2^32 - 1 more uses leave it.
    #[test]
    fn a_reference_slot_whose_generations_wrapped_names_no_stale_handle() {
        let (a, _b) = link::pair(&LinkConfig::default());
        let config = StackConfig {
            mac: [0x02, 0, 0, 0, 0, 1],
            ip: Ipv4Cidr::new(Ipv4Address::new(198, 18, 0, 1), 24),
            gateway: None,
            routes: Vec::new(),
            random_seed: 7,
            max_connections: 16,
            out_of_order_budget_bytes: crate::OUT_OF_ORDER_BUDGET_DEFAULT,
        };
        let mut s = RefStack::new(a, &config, Instant::from_secs(1)).unwrap();
        let peer = (Ipv4Address::new(198, 18, 0, 2), 4791);
        let tuning = TcpTuning::default();
        let old = s.connect(peer, None, &tuning).unwrap();
        s.release(old).unwrap();
        s.generations[old.slot()] = old.generation.wrapping_sub(1);
        let new = s.connect(peer, None, &tuning).unwrap();
        assert_ne!(new, old, "a stale handle names the new connection");
        assert_eq!(s.state(old), Err(StackError::UnknownConnection));
        assert!(s.state(new).is_ok());
    }
}
